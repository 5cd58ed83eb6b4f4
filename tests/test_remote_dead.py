#!/usr/bin/env python3
"""remote_dead_*: a remote server that dies mid-epoch (issues 22.5, 31.1).

SeaweedFS (tests/test_remote.py's `weed mini`) holds the fixture's chute
shards; tests/tools/faultproxy.py sits in front of it only to count the
requests, so the kill lands mid-epoch (after a fixed number of requests
of a run that would last 1,000 epochs).  The server is then SIGKILLed
and `chute bench` must exit with an error naming an object and the last
error within the retry budget plus one stall timeout (docs/REMOTE.md,
"What a dead server costs"), whatever the batch size, with and without
the read-ahead and the cache tier.  The budget is made small here
(CHUTE_REMOTE_RETRY_TOTAL_MS=1500) so each case takes seconds; before
the budget was per server outage, every sample spent it four times and
the time grew with the batch.

Cases: bench doctor
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402
import test_remote as R  # noqa: E402

BUDGET_MS = 1500
STALL_S = 2
SLACK_S = 2.0  # process exit, the loader's own 0.21 s of I/O backoff, a loaded CI machine
BOUND_S = BUDGET_MS / 1000 + STALL_S + SLACK_S
KILL_AFTER = 80  # requests through the proxy: the open (listing, manifest, HEADs, footers) is ~50, an epoch ~205


def dead_env(w, ep, **kw):
    return w.env(ep, **R.dead_server_env(BUDGET_MS, STALL_S), **kw)


def kill_mid_run(ctx, w, st, cmd, env, what):
    """Start cmd, SIGKILL the server after KILL_AFTER more requests; the
    seconds from the kill to cmd's exit, its exit code and stderr."""
    r0 = R.requests(st) if os.path.exists(st) else 0
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t_start = time.time()
    while R.requests(st) - r0 < KILL_AFTER and p.poll() is None and time.time() - t_start < 60:
        time.sleep(0.005)
    ctx.check(p.poll() is None, "%s: ended before the kill (exit %s)" % (what, p.poll()))
    w.stop(hard=True)  # SIGKILL by pid, waited for
    t_kill = time.time()
    try:
        out, err = p.communicate(timeout=BOUND_S + 60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    dt = time.time() - t_kill
    return dt, p.returncode, err.decode("utf-8", "replace")


def bench(ctx):
    """chute bench s3://.../shards/ with the server SIGKILLed mid-epoch:
    an error naming an object within budget + one stall timeout, batch 4,
    128 and 256; read-ahead on and off; the cache tier."""
    ctx.need_data()
    w, c = R.server(ctx, "remote_dead_bench")
    work = os.path.join(ctx.work, "remote_dead_bench")
    R.upload_dir(c, ctx.shards, "ds/shards")
    pr, ep, st = R.proxy(ctx, w, work, "--delay-ms", "10")
    u = "s3://%s/ds/shards/" % R.BUCKET
    cases = [(4, []), (128, []), (256, []),
             (4, ["--readahead", "16"]), (256, ["--readahead", "64"]),
             (128, ["--cache-dir", os.path.join(work, "cache"), "--cache-block-bytes", "65536"]),
             (256, ["--readahead", "64", "--cache-ram-bytes", str(64 << 20),
                    "--cache-block-bytes", "65536"])]
    try:
        for i, (batch, extra) in enumerate(cases):
            if i:
                w.start()
            what = "bench batch %d %s" % (batch, " ".join(extra))
            cmd = [ctx.chute, "bench", u, "--epochs", "1000", "--batch-size", str(batch),
                   "--workers", "2", "--size", "32"] + extra
            dt, rc, err = kill_mid_run(ctx, w, st, cmd, dead_env(w, ep), what)
            ctx.note("%s: exit %s %.2f s after the kill: %s" % (what, rc, dt, err.strip()[-400:]))
            ctx.check(rc not in (0, None) and rc > 0,
                      "%s: exit %s after the server died: %s" % (what, rc, err[-800:]))
            ctx.check(dt <= BOUND_S, "%s: %.1f s from the kill to the error, more than the budget "
                      "%.1f s + one stall timeout %d s (+%.1f s slack)"
                      % (what, dt, BUDGET_MS / 1000, STALL_S, SLACK_S))
            ctx.check("s3://%s/ds/shards/shard-0000" % R.BUCKET in err and "attempt" in err,
                      "%s: the message names no object or no last error: %r" % (what, err[-800:]))
            ctx.check(R.SK not in err, "%s: the secret is in the message" % what)
    finally:
        pr.kill()
        pr.wait()
        w.stop(hard=True)


def doctor(ctx):
    """chute doctor s3://.../shards/ with the server SIGKILLed during its
    measurements: an error within budget + one stall timeout, naming an
    object, at batch 4 and 256."""
    ctx.need_data()
    w, c = R.server(ctx, "remote_dead_doctor")
    work = os.path.join(ctx.work, "remote_dead_doctor")
    R.upload_dir(c, ctx.shards, "ds/shards")
    pr, ep, st = R.proxy(ctx, w, work, "--delay-ms", "10")
    u = "s3://%s/ds/shards/" % R.BUCKET
    try:
        for i, batch in enumerate((4, 256)):
            if i:
                w.start()
            what = "doctor batch %d" % batch
            cmd = [ctx.chute, "doctor", u, "--time", "30s", "--batch-size", str(batch),
                   "--workers", "2", "--size", "32"]
            dt, rc, err = kill_mid_run(ctx, w, st, cmd, dead_env(w, ep), what)
            ctx.note("%s: exit %s %.2f s after the kill: %s" % (what, rc, dt, err.strip()[-400:]))
            ctx.check(rc is not None and rc > 0,
                      "%s: exit %s after the server died: %s" % (what, rc, err[-800:]))
            ctx.check(dt <= BOUND_S, "%s: %.1f s from the kill to the error (bound %.1f s)"
                      % (what, dt, BOUND_S))
            ctx.check("s3://%s/ds/shards/shard-0000" % R.BUCKET in err,
                      "%s: the message names no object: %r" % (what, err[-800:]))
    finally:
        pr.kill()
        pr.wait()
        w.stop(hard=True)


if __name__ == "__main__":
    sys.exit(T.main({"bench": bench, "doctor": doctor}))
