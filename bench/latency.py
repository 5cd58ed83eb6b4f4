#!/usr/bin/env python3
"""Inference latency: chute's inference session against a plain Python loop.

    python3 bench/latency.py SOURCE [--chute build/chute] [--workers N] [--budget-ms 50]
    python3 bench/latency.py SOURCE --tiny        # a quick check that everything runs

What it measures, in one run on the same cores and the same images:

1. `chute bench --latency SOURCE --find-max --json`: the mean single-image
   decode + transform time (one worker, one request at a time), the highest
   Poisson rate whose p99 stays under --budget-ms, and p50/p99/p99.9 at half
   of that rate, latency counted from each request's *scheduled* arrival.
   The issue's target: p99 at half the max rate <= 2 x the single-image time.
   Also first-request latency after create, with batch-sized buffers and with
   the training loader's pre-faulted 2 MiB ring.
2. A plain Python server: PIL decode + torchvision's eval transform
   (Resize(size / 0.875) + CenterCrop(size) + ToTensor + Normalize) per request,
   from a pool of --workers threads fed by the same open-loop Poisson schedule
   (same seed) at the same rate (chute's half-max rate), and its own
   single-image time.  PIL releases the GIL in decode and resize, so threads
   are the fair "same cores" Python peer.

Prints a markdown table and the ratios; --json writes everything to a file.
"""
import argparse
import glob
import json
import math
import os
import queue
import random
import subprocess
import sys
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def chute_run(args):
    cmd = [args.chute, "bench", "--latency", args.source, "--json", "--find-max",
           "--budget-ms", str(args.budget_ms), "--duration", str(args.duration),
           "--probe-duration", str(args.probe_duration), "--probes", str(args.probes),
           "--images", str(args.images), "--size", str(args.size), "--seed", str(args.seed)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    if args.max_batch:
        cmd += ["--max-batch", str(args.max_batch)]
    if args.max_delay_us:
        cmd += ["--max-delay-us", str(args.max_delay_us)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("chute bench --latency failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    return json.loads(p.stdout), " ".join(cmd)


def image_files(source, n):
    files = sorted(f for f in glob.glob(os.path.join(source, "*", "*")) if os.path.isfile(f))
    if not files:
        sys.exit("%s: the Python peer needs an image tree (ROOT/<class>/<file>)" % source)
    return files[:n]


def python_transform(size):
    import torchvision.transforms as TV
    return TV.Compose([TV.Resize(int(size / 0.875)), TV.CenterCrop(size), TV.ToTensor(),
                       TV.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def python_one(data, tf):
    import io
    from PIL import Image
    with Image.open(io.BytesIO(data)) as im:
        return tf(im.convert("RGB"))


def python_single_ms(blobs, tf):
    rounds = max(1, 64 // len(blobs) + 1) if len(blobs) < 64 else 1
    t0 = time.perf_counter()
    n = 0
    for _ in range(rounds):
        for b in blobs:
            python_one(b, tf)
            n += 1
    return (time.perf_counter() - t0) * 1e3 / n


def poisson(rate, duration, seed):
    rng = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append(t)


def python_open_loop(blobs, tf, rate, duration, workers, seed):
    """Latencies (ms) from scheduled arrival, served by `workers` threads."""
    arr = poisson(rate, duration, seed)
    q = queue.Queue()
    lat = [None] * len(arr)
    t0 = time.perf_counter() + 0.05

    def serve():
        while True:
            i = q.get()
            if i is None:
                return
            python_one(blobs[i % len(blobs)], tf)
            lat[i] = (time.perf_counter() - (t0 + arr[i])) * 1e3

    th = [threading.Thread(target=serve) for _ in range(workers)]
    for t in th:
        t.start()
    for i, a in enumerate(arr):
        d = t0 + a - time.perf_counter()
        if d > 0:
            time.sleep(d)
        q.put(i)
    for _ in th:
        q.put(None)
    for t in th:
        t.join()
    return sorted(lat)


def pct(sorted_ms, q):
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, max(0, math.ceil(q * len(sorted_ms)) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="an image tree (the Python peer reads its files)")
    ap.add_argument("--chute", default=os.path.join(REPO, "build", "chute"))
    ap.add_argument("--workers", type=int, default=0, help="threads for both (default: chute's)")
    ap.add_argument("--budget-ms", type=float, default=50.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--probe-duration", type=float, default=3.0)
    ap.add_argument("--probes", type=int, default=10)
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--max-batch", type=int, default=0)
    ap.add_argument("--max-delay-us", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--tiny", action="store_true",
                    help="seconds, not minutes: check that it runs (no figures)")
    args = ap.parse_args()
    if args.tiny:
        args.duration, args.probe_duration, args.probes = 0.5, 0.3, 4
        args.images, args.size, args.budget_ms = min(args.images, 16), 64, max(args.budget_ms, 500)

    c, cmd = chute_run(args)
    workers = args.workers or c.get("workers") or os.cpu_count()
    half = c.get("at_half_max") or {}
    rate = half.get("rate", 0.0)

    tf = python_transform(args.size)
    blobs = [open(f, "rb").read() for f in image_files(args.source, args.images)]
    py_single = python_single_ms(blobs, tf)
    py = python_open_loop(blobs, tf, rate, args.duration, workers, args.seed) if rate else []

    rows = [
        ("chute single image decode+transform (ms)", c["single_image_ms"]),
        ("chute max rate with p99 <= %.0f ms (req/s)" % args.budget_ms, c["max_rate"]),
        ("chute p50 / p99 / p99.9 at half max (ms)",
         "%.3f / %.3f / %.3f" % (half.get("p50_ms", float("nan")), half.get("p99_ms", float("nan")),
                                 half.get("p999_ms", float("nan")))),
        ("chute p99 at half max / single image", c.get("p99_over_single", float("nan"))),
        ("chute first request after create (ms): batch-sized / 2 MiB pre-faulted ring",
         "%.3f / %.3f" % (c["first_request_ms"], c["first_request_ms_pretouch"])),
        ("chute create (ms): batch-sized / 2 MiB pre-faulted ring",
         "%.3f / %.3f" % (c["create_ms"], c["create_ms_pretouch"])),
        ("Python PIL+torchvision single image (ms)", py_single),
        ("Python (%d threads) p50 / p99 / p99.9 at the same rate (ms)" % workers,
         "%.3f / %.3f / %.3f" % (pct(py, .5), pct(py, .99), pct(py, .999))),
        ("Python p99 / chute p99 at that rate",
         pct(py, .99) / half["p99_ms"] if py and half.get("p99_ms") else float("nan")),
        ("Python single / chute single", py_single / c["single_image_ms"]),
    ]
    print("| measure | value |\n|---|---|")
    for k, v in rows:
        print("| %s | %s |" % (k, "%.3f" % v if isinstance(v, float) else v))
    print("\nchute: %s\nrate for both: %.1f req/s, %d workers, %.1f s of arrivals, seed %d"
          % (cmd, rate, workers, args.duration, args.seed))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"chute": c, "python": {"single_ms": py_single, "rate": rate,
                                              "workers": workers, "p50_ms": pct(py, .5),
                                              "p99_ms": pct(py, .99), "p999_ms": pct(py, .999),
                                              "requests": len(py)}}, f, indent=1)


if __name__ == "__main__":
    main()
