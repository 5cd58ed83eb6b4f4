#!/usr/bin/env python3
"""remote_pack_*: `chute pack` and `chute convert` writing to s3://.

The server is test_remote.py's SeaweedFS; a fault proxy (tools/
faultproxy.py) sits between chute and it and logs every request.  What
is compared is always a local pack/convert of the same input (its files,
and the loader's batches from them), never a value computed from chute:

  pack     every output format packed to s3:// (with a part size small
           enough that shards go as multipart uploads and the manifest
           as one PUT): boto3 sees exactly the local run's files with
           the same bytes, the loader's batches from s3:// equal the
           local pack's, the manifest was the last object written; a
           second pack is refused without --force and replaces the old
           dataset with it (stale objects removed).
  convert  local shards -> s3:// TFRecord, s3:// shards -> s3:// WebDataset
           equal local converts; a destination inside the source refused.
  kill     a pack killed during its uploads, and one failing on a
           permanent error in a multipart upload, leave no manifest
           (nothing opens) and no unfinished multipart upload.
  stream   a pack of many small shards through a slow proxy uploads each
           shard while the next is written: the staging directory (polled
           from outside) never holds more than 2 shards, the objects and
           batches equal the local pack's, the manifest is written last.
No credential appears in any output.

Cases: pack convert kill stream
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402
import test_remote as R  # noqa: E402

DUMP = ("--transform", "train", "--dtype", "uint8", "--size", "48", "--batch-size", "16",
        "--workers", "2", "--seed", "7")
PART = str(5 << 20)  # CHUTE_REMOTE_PART_MB=5: S3's smallest part; a 6M shard goes in 2 parts
SHARD = "6M"  # the 7.7 MB fixture: one shard over the part size, one under


def read(path):
    with open(path, "rb") as f:
        return f.read()


def no_secret(ctx, p, what):
    ctx.check(R.SK not in p.out + p.err, "%s: the secret is in its output" % what)


def objects(c, prefix):
    """{name: bytes} of the objects under prefix (boto3, paged)."""
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=R.BUCKET, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix):]] = c.get_object(Bucket=R.BUCKET, Key=o["Key"])["Body"].read()
    return out


def local_files(d):
    """What a local run left, less the TFRecord reader's saved indexes
    (*.chuteidx: written beside local files when the result is verified;
    from s3:// they go to the index directory, never into the bucket)."""
    return {f: read(os.path.join(d, f)) for f in os.listdir(d)
            if f != "chute.lock" and not f.endswith(".chuteidx")}


def same_dump(ctx, env, local, url, work, what):
    a, b = os.path.join(work, "l.bin"), os.path.join(work, "s.bin")
    ctx.run([ctx.dump, local, a] + list(DUMP), what="dump %s" % local)
    p = ctx.run([ctx.dump, url, b] + list(DUMP), env=env, what="dump %s" % url)
    no_secret(ctx, p, "dump " + url)
    ctx.check(len(read(a)) > 0 and read(a) == read(b),
              "%s: batches from %s differ from the local run's" % (what, url))


def uploads_left(c):
    return c.list_multipart_uploads(Bucket=R.BUCKET).get("Uploads", [])


def setup(ctx, name, *proxy_args):
    ctx.need_data()
    w, c = R.server(ctx, name)
    work = os.path.join(ctx.work, name)
    log = os.path.join(work, "requests.log")
    pr, ep, st = R.proxy(ctx, w, work, "--log", log, *proxy_args)
    env = w.env(ep, CHUTE_REMOTE_PART_MB="5", TMPDIR=os.path.join(work, "tmp"),
                XDG_CACHE_HOME=os.path.join(work, "xdg"))
    os.makedirs(env["TMPDIR"])
    return w, c, work, pr, env, log


def log_lines(log):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [l.split() for l in f if l.strip()]


def pack(ctx):
    w, c, work, pr, env, log = setup(ctx, "pack")
    try:
        for fmt in ("chute", "tfrecord", "wds"):
            loc = os.path.join(work, "local-" + fmt)
            url = "s3://%s/out/%s/" % (R.BUCKET, fmt)
            args = ["--format", fmt, "--shard-size", SHARD]
            ctx.run([ctx.chute, "pack", ctx.tree, loc] + args)
            n0 = len(log_lines(log))
            p = ctx.run([ctx.chute, "pack", ctx.tree, url] + args, env=env)
            no_secret(ctx, p, "pack " + url)
            want, got = local_files(loc), objects(c, "out/%s/" % fmt)
            ctx.check(sorted(want) == sorted(got),
                      "%s: objects %r, the local pack wrote %r" % (fmt, sorted(got), sorted(want)))
            ctx.check(all(got.get(k) == v for k, v in want.items()),
                      "%s: an object's bytes differ from the local pack's file" % fmt)
            ctx.check(os.listdir(env["TMPDIR"]) == [], "%s: staging left in TMPDIR: %r"
                      % (fmt, os.listdir(env["TMPDIR"])))
            reqs = log_lines(log)[n0:]
            big = [k for k, v in want.items() if len(v) > int(PART)]
            ctx.check(big and any(r[0] == "POST" and r[1].endswith("?uploads=") for r in reqs)
                      and any("partNumber=" in r[1] for r in reqs),
                      "%s: no multipart upload for files over %s bytes (%r)" % (fmt, PART, big))
            writes = [r for r in reqs if r[0] in ("PUT", "POST")]
            if fmt == "chute":
                ctx.check(writes and writes[-1][1].split("?")[0].endswith("/chute.manifest")
                          and writes[-1][0] == "PUT",
                          "the manifest is not the last object written: %r" % writes[-3:])
            same_dump(ctx, env, loc, url, work, fmt)
            # A dataset is there: refused without --force, naming the flag.
            p = ctx.run([ctx.chute, "pack", ctx.tree, url] + args, env=env, expect="nonzero")
            ctx.check("--force" in p.err and "s3://%s/out/%s" % (R.BUCKET, fmt) in p.err,
                      "%s: a second pack without --force: %r" % (fmt, p.err))
            ctx.check(objects(c, "out/%s/" % fmt) == got, "%s: a refused pack changed objects" % fmt)
        # --force replaces: fewer, larger shards; no stale object stays.
        loc = os.path.join(work, "local-big")
        url = "s3://%s/out/chute/" % R.BUCKET
        ctx.run([ctx.chute, "pack", ctx.tree, loc, "--shard-size", "16M"])
        p = ctx.run([ctx.chute, "pack", ctx.tree, url, "--shard-size", "16M", "--force"], env=env)
        no_secret(ctx, p, "pack --force")
        want, got = local_files(loc), objects(c, "out/chute/")
        ctx.check(want == got, "--force: objects %r, local %r" % (sorted(got), sorted(want)))
        same_dump(ctx, env, loc, url, work, "--force")
    finally:
        pr.kill()
        pr.wait()
        w.stop()


def convert(ctx):
    w, c, work, pr, env, log = setup(ctx, "convert")
    try:
        # local shards -> s3:// TFRecord
        loc = os.path.join(work, "local-tfr")
        ctx.run([ctx.chute, "convert", ctx.shards, loc, "--format", "tfrecord", "--shard-size", SHARD])
        url = "s3://%s/conv/tfr/" % R.BUCKET
        p = ctx.run([ctx.chute, "convert", ctx.shards, url, "--format", "tfrecord", "--shard-size",
                     SHARD], env=env)
        no_secret(ctx, p, "convert")
        want, got = local_files(loc), objects(c, "conv/tfr/")
        ctx.check(want == got, "tfrecord: objects %r, local %r" % (sorted(got), sorted(want)))
        same_dump(ctx, env, loc, url, work, "convert to tfrecord")
        # s3:// shards -> s3:// WebDataset (both ends remote)
        ctx.run([ctx.chute, "pack", ctx.tree, "s3://%s/conv/shards/" % R.BUCKET], env=env)
        loc = os.path.join(work, "local-wds")
        ctx.run([ctx.chute, "convert", ctx.shards, loc, "--format", "wds", "--shard-size", SHARD])
        url = "s3://%s/conv/wds" % R.BUCKET
        p = ctx.run([ctx.chute, "convert", "s3://%s/conv/shards/" % R.BUCKET, url, "--format",
                     "wds", "--shard-size", SHARD], env=env)
        no_secret(ctx, p, "convert s3->s3")
        want, got = local_files(loc), objects(c, "conv/wds/")
        ctx.check(want == got, "wds: objects %r, local %r" % (sorted(got), sorted(want)))
        same_dump(ctx, env, loc, url + "/", work, "convert s3 -> s3 wds")
        # A destination inside the source is refused before anything is written.
        p = ctx.run([ctx.chute, "convert", "s3://%s/conv/shards/" % R.BUCKET,
                     "s3://%s/conv/shards/sub/" % R.BUCKET, "--format", "wds"], env=env,
                    expect="nonzero")
        ctx.check("may not be the source" in p.err, "convert into its source: %r" % p.err)
        ctx.check(not objects(c, "conv/shards/sub/"), "convert into its source wrote objects")
    finally:
        pr.kill()
        pr.wait()
        w.stop()


def kill(ctx):
    # 1. SIGKILL while uploading (every request slowed by the proxy).
    w, c, work, pr, env, log = setup(ctx, "kill", "--delay-ms", "150")
    try:
        url = "s3://%s/k/" % R.BUCKET
        p = subprocess.Popen([ctx.chute, "pack", ctx.tree, url, "--shard-size", SHARD], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            if any("partNumber=" in r[1] for r in log_lines(log)):
                break
            time.sleep(0.02)
        running = p.poll() is None
        p.send_signal(signal.SIGKILL)
        p.wait()
        ctx.check(running, "the pack ended before it could be killed")
        keys = objects(c, "k/")
        ctx.check("chute.manifest" not in keys, "a killed pack left a manifest: %r" % sorted(keys))
        q = ctx.run([ctx.dsinfo, url], env=env, expect="nonzero")
        ctx.check("CHUTE_ENOTFOUND" in q.err or "manifest" in q.err,
                  "a killed pack's prefix: %r" % q.err[-500:])
        # SIGKILL leaves the staging directory (documented); clear it.
        left = os.listdir(env["TMPDIR"])
        ctx.check(len(left) == 1 and left[0].startswith("chute-stage-"), "staging: %r" % left)
        shutil.rmtree(os.path.join(env["TMPDIR"], left[0]), ignore_errors=True)
    finally:
        pr.kill()
        pr.wait()
    # 2. A permanent failure (503 with no retries) inside a multipart upload.
    n = len(log_lines(log))
    pr, ep, st = R.proxy(ctx, w, work, "--log", log, "--mode", "503", "--every", "4",
                         "--count", "1")
    try:
        bad = dict(env, AWS_ENDPOINT_URL=ep, CHUTE_REMOTE_RETRIES="0")
        before = len(uploads_left(c))
        url = "s3://%s/f/" % R.BUCKET
        p = ctx.run([ctx.chute, "pack", ctx.tree, url, "--shard-size", SHARD], env=bad,
                    expect="nonzero")
        no_secret(ctx, p, "failing pack")
        ctx.check("SlowDown" in p.err and "s3://%s/f/" % R.BUCKET in p.err,
                  "failing pack's message: %r" % p.err[-500:])
        reqs = log_lines(log)[n:]
        ctx.check(any(r[0] == "DELETE" and "uploadId=" in r[1] for r in reqs),
                  "no AbortMultipartUpload after the failure: %r" % reqs)
        ctx.check(len(uploads_left(c)) == before, "unfinished multipart uploads: %r"
                  % uploads_left(c))
        ctx.check("chute.manifest" not in objects(c, "f/"), "a failed pack left a manifest")
        ctx.check(os.listdir(env["TMPDIR"]) == [], "a failed pack left its staging: %r"
                  % os.listdir(env["TMPDIR"]))
    finally:
        pr.kill()
        pr.wait()
        w.stop()


def stream(ctx):
    w, c, work, pr, env, log = setup(ctx, "stream", "--delay-ms", "30")
    try:
        loc = os.path.join(work, "local")
        args = ["--shard-size", "1M"]
        ctx.run([ctx.chute, "pack", ctx.tree, loc] + args)
        nshards = len([f for f in os.listdir(loc) if f.startswith("shard-")])
        ctx.check(nshards >= 4, "the fixture packs into %d shards of 1M; need >= 4" % nshards)
        url = "s3://%s/s/" % R.BUCKET
        errf = os.path.join(work, "pack.err")
        with open(errf, "wb") as ef:
            p = subprocess.Popen([ctx.chute, "pack", ctx.tree, url] + args, env=env,
                                 stdout=subprocess.DEVNULL, stderr=ef)
        most, polls_seen = 0, 0
        deadline = time.time() + 4 * int(os.environ.get("CHUTE_TEST_RUN_TIMEOUT", "60"))
        while p.poll() is None and time.time() < deadline:
            staged = 0
            try:
                for d in os.listdir(env["TMPDIR"]):
                    try:
                        staged += len([f for f in os.listdir(os.path.join(env["TMPDIR"], d))
                                       if f.startswith("shard-")])
                    except OSError:  # removed at the end of the pack
                        pass
            except OSError:
                pass
            most = max(most, staged)
            polls_seen += staged > 0
            time.sleep(0.005)
        if p.poll() is None:
            p.kill()
        p.wait()
        with open(errf, "rb") as f:
            err = f.read().decode("utf-8", "replace")
        ctx.check(R.SK not in err, "pack's stderr holds the secret")
        ctx.check(p.returncode == 0, "pack to %s: exit %s: %s" % (url, p.returncode, err[-1500:]))
        ctx.check(polls_seen > 0, "the staging directory was never seen holding a shard")
        ctx.check(most <= 2, "staging held %d of the %d shards at once (expected <= 2: each is "
                  "uploaded while the next is written)" % (most, nshards))
        want, got = local_files(loc), objects(c, "s/")
        ctx.check(want == got, "objects %r, the local pack wrote %r" % (sorted(got), sorted(want)))
        writes = [r for r in log_lines(log) if r[0] in ("PUT", "POST")]
        ctx.check(writes and writes[-1][1].split("?")[0].endswith("/chute.manifest"),
                  "the manifest is not the last object written: %r" % writes[-3:])
        ctx.check(os.listdir(env["TMPDIR"]) == [], "staging left in TMPDIR: %r"
                  % os.listdir(env["TMPDIR"]))
        same_dump(ctx, env, loc, url, work, "streamed pack")
    finally:
        pr.kill()
        pr.wait()
        w.stop()


cases = {"pack": pack, "convert": convert, "kill": kill, "stream": stream}

if __name__ == "__main__":
    sys.exit(T.main(cases))
