#!/usr/bin/env python3
"""remote_aio_*: the S3/HTTP sources' asynchronous reads (aio_open /
aio_submit / aio_reap of src/io/remote/http_multi.c: the curl multi engine the
read-ahead stage drives), through tests/tools/aioprobe.c.

Each case uploads a few objects of random bytes with boto3 (S3, SeaweedFS
from PyPI as in test_remote.py) or writes them under a loopback HTTP
server (tools/range_http.py), and aioprobe reads 200 random and
neighbouring ranges plus whole objects, comparing every byte with the
local copy.  Requests are counted where they arrive: at
tools/faultproxy.py between chute and the server (its --log has one line
per request), so "neighbouring reads share one GET" is checked against
the wire, not the engine's own counters; and with coalescing turned off
(--max 1) the same reads must take one GET each.

recv_buffer: the receive buffer libcurl reads into (512 KiB by default,
CHUTE_REMOTE_RECV_BUFFER_KB) is the one in effect, in both the engine
and the blocking session of chute iobench: the lengths recvfrom() asks
for, seen with strace.

Cases: s3 http faults missing dataset recv_buffer
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402
import test_remote as R  # noqa: E402

SIZES = {"a/big.bin": 3 << 20, "a/mid.bin": 700001, "b/small bit \u00fc.bin": 50000}


def aioprobe():
    p = os.environ.get("CHUTE_AIOPROBE")
    if not p or not os.path.exists(p):
        raise T.Skip("CHUTE_AIOPROBE not set (run through ctest)")
    return p


def make_objects(work):
    local = {}
    for key, n in SIZES.items():
        path = os.path.join(work, "root", key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(os.urandom(n))
        local[key] = path
    return local


def run_probe(ctx, env, pairs, *args, expect=0):
    p = ctx.run([aioprobe()] + [str(a) for a in args] + ["%s=%s" % kv for kv in pairs],
                expect=expect, env=env, timeout=240)
    ctx.check(R.SK not in p.out and R.SK not in p.err, "the secret appears in aioprobe's output")
    st = {}
    words = p.out.split()
    for i in range(0, len(words) - 1, 2):
        st[words[i]] = int(words[i + 1])
    return p, st


def proxy_log(ctx, upstream_port, work, *args):
    log = os.path.join(work, "log%d" % len(os.listdir(work)))
    pf, stf = log + ".port", log + ".stats"
    pr = subprocess.Popen([sys.executable, os.path.join(ctx.tools, "faultproxy.py"), "--upstream",
                           "127.0.0.1:%d" % upstream_port, "--port-file", pf, "--stats", stf,
                           "--log", log] + list(args))
    for _ in range(200):
        if os.path.exists(pf):
            break
        time.sleep(0.05)
    with open(pf) as f:
        return pr, int(f.read().strip()), log, stf


def gets_in(log):
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return sum(1 for line in f if line.startswith("GET "))


def coalescing(ctx, env_for, url_for, local, upstream_port, work, name):
    """Default coalescing vs none, GETs counted at a proxy."""
    counts = {}
    for label, extra in (("coalesced", []), ("one GET per read", ["--max", "1"])):
        pr, port, log, _ = proxy_log(ctx, upstream_port, work)
        try:
            pairs = [(url_for(port, k), v) for k, v in local.items()]
            p, st = run_probe(ctx, env_for(port), pairs, "--n", 200, "--depth", 32, "--seed", 7,
                              *extra)
        finally:
            pr.kill()
            pr.wait()
        wire = gets_in(log)
        ctx.note("%s %s: %s, %d GETs at the proxy" % (name, label, p.out.strip(), wire))
        ctx.check(st.get("requests") == 200, "%s %s: %r" % (name, label, p.out))
        ctx.check(wire == st.get("gets"), "%s %s: the proxy saw %d GETs, the engine counted %s"
                  % (name, label, wire, st.get("gets")))
        counts[label] = (wire, st)
    wire, st = counts["coalesced"]
    ctx.check(st["coalesced"] > 0 and wire == 200 - st["coalesced"] and wire < 200,
              "%s: neighbouring reads did not share GETs: %d GETs for 200 reads" % (name, wire))
    off_wire, off_st = counts["one GET per read"]
    ctx.check(off_st["coalesced"] == 0 and off_wire == 200,
              "%s: without coalescing %d GETs for 200 reads" % (name, off_wire))
    ctx.check(wire < off_wire, "%s: coalescing saved no GET (%d vs %d)" % (name, wire, off_wire))


def s3(ctx):
    w, c = R.server(ctx, "s3")
    work = ctx.scratch("s3w")
    try:
        local = make_objects(work)
        for key, path in local.items():
            c.upload_file(path, R.BUCKET, "aio/" + key)
        url = lambda k: "s3://%s/aio/%s" % (R.BUCKET, k)  # noqa: E731
        # straight to the server, several seeds and depths
        for seed, depth in ((1, 32), (2, 4), (3, 64)):
            run_probe(ctx, w.env(), [(url(k), v) for k, v in local.items()], "--seed", seed,
                      "--depth", depth)
        coalescing(ctx, lambda port: w.env("http://127.0.0.1:%d" % port),
                   lambda port, k: url(k), local, w.port,
                   ctx.scratch("s3p"), "s3")
    finally:
        w.stop()


def start_http(ctx, root, work):
    pf = os.path.join(work, "http.port")
    pr = subprocess.Popen([sys.executable, os.path.join(ctx.tools, "range_http.py"), root,
                           "--port-file", pf])
    for _ in range(200):
        if os.path.exists(pf):
            break
        time.sleep(0.05)
    with open(pf) as f:
        return pr, int(f.read())


def http(ctx):
    work = ctx.scratch("http")
    local = make_objects(work)
    srv, port = start_http(ctx, os.path.join(work, "root"), work)
    try:
        base = "http://127.0.0.1:%d/" % port
        run_probe(ctx, None, [(base + k, v) for k, v in local.items()], "--seed", 11)
        coalescing(ctx, lambda p: None, lambda p, k: "http://127.0.0.1:%d/%s" % (p, k), local, port,
                   ctx.scratch("httpp"), "http")
    finally:
        srv.kill()
        srv.wait()


def faults(ctx):
    """503 bursts, resets and delay between chute and SeaweedFS: every read
    completes with the right bytes, each fault cost one retry."""
    w, c = R.server(ctx, "faults")
    work = ctx.scratch("faultsw")
    try:
        local = make_objects(work)
        for key, path in local.items():
            c.upload_file(path, R.BUCKET, "f/" + key)
        pairs = [("s3://%s/f/%s" % (R.BUCKET, k), v) for k, v in local.items()]
        fast = dict(CHUTE_REMOTE_BACKOFF_MS="10", CHUTE_REMOTE_BACKOFF_CAP_MS="200")
        pwork = ctx.scratch("faultsp")
        for mode, every, count, delay in (("503", 3, 20, 0), ("reset", 4, 12, 0),
                                          ("none", 1, 0, 50)):
            pr, port, log, stf = proxy_log(ctx, w.port, pwork, "--mode", mode, "--every",
                                           str(every), "--count", str(count), "--delay-ms",
                                           str(delay))
            try:
                t0 = time.time()
                p, st = run_probe(ctx, w.env("http://127.0.0.1:%d" % port, **fast), pairs,
                                  "--seed", 5, "--depth", 32)
                spent = time.time() - t0
            finally:
                pr.kill()
                pr.wait()
            req, nfault = R.stats(stf)
            ctx.note("faults %s: %s; %d requests, %d faults, %.1f s"
                     % (mode, p.out.strip(), req, nfault, spent))
            if mode != "none":
                ctx.check(nfault == count, "%s: %d faults injected, want %d" % (mode, nfault, count))
                # open's HEADs (blocking path) meet some of the faults and
                # retry on their own: one extra HEAD each
                with open(log) as f:
                    head_faults = sum(1 for ln in f if ln.startswith("HEAD ")) - len(pairs)
                # every 503 on a GET costs the engine exactly one retry; a reset
                # of a kept-alive connection may instead be retried inside curl
                # (a reused connection that died unanswered is asked again)
                want = nfault - head_faults
                ctx.check(st.get("retries") == want if mode == "503" else
                          0 < st.get("retries", 0) <= want,
                          "%s: %s retries for %d faults on GETs" % (mode, st.get("retries"), want))
            else:
                # 200 reads at 50 ms each take 10 s one at a time; in flight
                # together they take a fraction of it
                ctx.check(spent < 8, "50 ms delay: 200 reads took %.1f s (not in flight together?)"
                          % spent)
        # the same 50 ms from tests/tools/delayproxy.c, the benchmarks' proxy
        # (bench/remote_latency.py): SigV4 requests pass through it intact
        # (run_probe compares every byte), the engine's requests are held
        # side by side (several at once, never more than its depth plus
        # open's blocking HEADs), and 200 reads still take a fraction of
        # 200 x 50 ms
        stf = os.path.join(pwork, "delayproxy.stats")
        pr, ep = R.delay_proxy(ctx, w, 50, stats=stf)
        try:
            t0 = time.time()
            p, st = run_probe(ctx, w.env(ep), pairs, "--seed", 5, "--depth", 32)
            spent = time.time() - t0
        finally:
            pr.terminate()
            pr.wait(30)
        ctx.check(pr.returncode == 0, "delayproxy exit %s on SIGTERM" % pr.returncode)
        with open(stf) as f:
            kv = f.read().split()
        d = dict(zip(kv[0::2], kv[1::2]))
        ctx.note("delayproxy 50 ms: %s; %s; %.1f s" % (p.out.strip(), " ".join(kv), spent))
        ctx.check(spent < 8, "delayproxy 50 ms: 200 reads took %.1f s" % spent)
        ctx.check(4 <= int(d["held_max"]) <= 32 + len(pairs),
                  "delayproxy 50 ms: at most %s requests held at once (depth 32)" % d["held_max"])
    finally:
        w.stop()


def missing(ctx):
    """A missing key fails that read only, with a message naming it and the
    server's answer; every other read completes."""
    w, c = R.server(ctx, "missing")
    work = ctx.scratch("missingw")
    try:
        local = make_objects(work)
        for key, path in local.items():
            c.upload_file(path, R.BUCKET, "m/" + key)
        pairs = [("s3://%s/m/%s" % (R.BUCKET, k), v) for k, v in local.items()]
        gone = "s3://%s/m/no such key.bin" % R.BUCKET
        p, st = run_probe(ctx, w.env(), pairs, "--missing", gone, "--seed", 9)
        errs = [ln for ln in p.err.splitlines() if ln.startswith("ERR ")]
        ctx.check(len(errs) == 1 and "CHUTE_ENOTFOUND" in errs[0] and gone in errs[0]
                  and "404" in errs[0] and "NoSuchKey" in errs[0],
                  "missing key: %r" % p.err[-1500:])
        ctx.check(st.get("failed") == 1 and st.get("requests") == 201, "missing key: %r" % p.out)
        # HTTP: the same, without S3's error code
        srv, port = start_http(ctx, os.path.join(work, "root"), work)
        try:
            base = "http://127.0.0.1:%d/" % port
            p, st = run_probe(ctx, None, [(base + k, v) for k, v in local.items()],
                              "--missing", base + "nope.bin")
            ctx.check("ERR CHUTE_ENOTFOUND: " + base + "nope.bin" in p.err and "404" in p.err,
                      "missing over HTTP: %r" % p.err[-1500:])
        finally:
            srv.kill()
            srv.wait()
    finally:
        w.stop()


def dataset(ctx):
    """The dataset option coalesce_gap_bytes reaches the engine: a shard
    directory opened from S3 with coalesce_gap_bytes=1 merges only reads
    at most a byte apart (each merge drops at most one byte), where the
    default (64 KiB) drops more; the shards' bytes are compared as above."""
    ctx.need_data()
    w, c = R.server(ctx, "dataset")
    try:
        shards = sorted(os.listdir(ctx.shards))
        for f in shards:
            c.upload_file(os.path.join(ctx.shards, f), R.BUCKET, "ds/" + f)
        chute_files = [f for f in shards if f.endswith(".chute")][:2]
        ctx.check(chute_files, "no shards in the fixture")
        pairs = [("s3://%s/ds/%s" % (R.BUCKET, f), os.path.join(ctx.shards, f))
                 for f in chute_files]
        root = "s3://%s/ds/" % R.BUCKET
        got = {}
        for gap in ("1", "65536"):
            p, st = run_probe(ctx, w.env(), pairs, "--dataset", root, "--gap", gap, "--seed", 4)
            ctx.note("dataset, coalesce_gap_bytes %s: %s" % (gap, p.out.strip()))
            got[gap] = st
        ctx.check(got["1"].get("coalesced", 0) > 0
                  and got["1"]["gap_bytes"] <= got["1"]["coalesced"],
                  "coalesce_gap_bytes=1 through the dataset: %r" % got["1"])
        ctx.check(got["65536"].get("gap_bytes", 0) > got["65536"].get("coalesced", 0),
                  "coalesce_gap_bytes=65536 through the dataset: %r" % got["65536"])
    finally:
        w.stop()


def recv_sizes(ctx, cmd, env, what):
    """Run cmd under strace; the lengths its recvfrom() calls asked for."""
    import re
    import shutil
    strace = shutil.which("strace")
    if not strace:
        raise T.Skip("strace is not installed (scripts/deps.sh installs it)")
    log = os.path.join(ctx.scratch("strace"), "trace")
    env = dict(env)
    # LeakSanitizer cannot run under ptrace; the other cases check leaks
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    p = ctx.run([strace, "-f", "-qq", "-s", "0", "-e", "trace=recvfrom", "-o", log]
                + [str(c) for c in cmd], env=env, timeout=240, what=what)
    if p.returncode != 0 and "ptrace" in p.err:
        raise T.Skip("strace cannot trace here: %s" % p.err.strip()[-200:])
    with open(log) as f:
        return [int(m.group(1)) for m in re.finditer(r"recvfrom\(\d+, [^,]*, (\d+),", f.read())]


def recv_buffer(ctx):
    """Large ranges are received in large pieces (CURLOPT_BUFFERSIZE, 512 KiB
    by default, CHUTE_REMOTE_RECV_BUFFER_KB): libcurl's default 16 KiB made
    a 16 MiB range cost a thousand poll + recv() + callback rounds, most of
    chute's CPU on large GETs (iobench s3 sequential at 0.64x boto3).  The
    lengths recvfrom() asks for are seen with strace, for the read-ahead
    engine (aioprobe, ranges coalesced up to 8 MiB) and for the blocking
    session (chute iobench --pattern sequential --bs 2M); every byte is
    still checked (aioprobe) or counted (iobench)."""
    work = ctx.scratch("recvbuf")
    local = make_objects(work)
    srv, port = start_http(ctx, os.path.join(work, "root"), work)
    try:
        base = "http://127.0.0.1:%d/" % port
        pairs = ["%s=%s" % (base + k, v) for k, v in local.items()]
        for kb, want in ((None, 512 << 10), ("64", 64 << 10), ("1", 16 << 10)):
            env = dict(os.environ)
            env.pop("CHUTE_REMOTE_RECV_BUFFER_KB", None)
            if kb:
                env["CHUTE_REMOTE_RECV_BUFFER_KB"] = kb
            label = "CHUTE_REMOTE_RECV_BUFFER_KB=%s" % (kb or "(unset)")
            got = recv_sizes(ctx, [aioprobe(), "--n", 60, "--seed", 5] + pairs, env,
                             "aioprobe, %s" % label)
            ctx.check(got and max(got) == want,
                      "read-ahead engine, %s: recvfrom() asked for at most %s bytes, expected %d"
                      % (label, max(got) if got else "(no call)", want))
            got = recv_sizes(ctx, [ctx.chute, "iobench", base + "a/big.bin", "--pattern",
                                   "sequential", "--bs", "2M", "--requests", 2, "--threads", 1,
                                   "--json"], env, "iobench, %s" % label)
            ctx.check(got and max(got) == want,
                      "iobench (blocking session), %s: recvfrom() asked for at most %s bytes, "
                      "expected %d" % (label, max(got) if got else "(no call)", want))
    finally:
        srv.kill()
        srv.wait()


cases = {"s3": s3, "http": http, "faults": faults, "missing": missing, "dataset": dataset,
         "recv_buffer": recv_buffer}

if __name__ == "__main__":
    sys.exit(T.main(cases))
