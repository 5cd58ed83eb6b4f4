#!/usr/bin/env python3
"""Inference latency: chute's inference session against a plain Python loop.

    python3 bench/latency.py SOURCE [--chute build/chute] [--workers N] [--repeat 3]
    python3 bench/latency.py SOURCE --tiny        # a quick check that everything runs

The issue's target (#13): at 50% of the maximum rate, the p99 *added*
latency <= 2 x the single-image decode+transform time measured in the same
run; compared with a plain Python loop (PIL decode + torchvision eval
transform per request) on the same cores.

Definitions (the same for chute and for Python, and printed with the table):

- arrivals: an open-loop Poisson process at a given rate, the *same* times
  for both (the splitmix64 sequence of cli/latency.c, reproduced here), each
  request a pre-encoded image held in memory, cycled through --images.
- latency of a request: when its tensor was handed to the caller minus its
  *scheduled* arrival (a generator running late counts against the system:
  no coordinated omission).
- single-image time of an image: its decode+transform alone on an idle
  pipeline, one at a time (chute: one worker, max batch 1, the worker's own
  start..done timestamps; Python: the function call), median of 3, measured
  in the same run.  "single" = its mean over the images.
- added latency of a request: its latency minus the single-image time of the
  same image.  Ratio = p99 added latency / single.  Target: <= 2.
- max rate: the highest rate whose p99 latency stays <= --budget-ms (no
  refusals), by bisection; the figures are taken at half of it.

For each repeat, one after another on the same cores: chute with the latency
preset (max batch 1, unordered), chute with the batch preset (batches of 8,
1 ms deadline, ordered), then the Python peer (a pool of as many threads as
chute has workers -- PIL releases the GIL in decode and resize) at its own
half max rate and at chute's.  Repeats alternate, so drift on a shared
machine shows as spread; the summary gives the median over repeats.
Prints markdown tables; --json writes everything to a file.
"""
import argparse
import glob
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TARGET = 2.0
M64 = (1 << 64) - 1


# --------------------------------------------------------------------- chute

def chute_run(args, preset):
    cmd = [args.chute, "bench", "--latency", args.source, "--json", "--find-max",
           "--preset", preset,
           "--budget-ms", str(args.budget_ms), "--duration", str(args.duration),
           "--probe-duration", str(args.probe_duration), "--probes", str(args.probes),
           "--images", str(args.images), "--size", str(args.size), "--seed", str(args.seed)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("chute bench --latency failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    return json.loads(p.stdout), " ".join(cmd)


# -------------------------------------------------------------------- Python

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


def python_single(blobs, tf):
    """Per image: median of 3 timed calls (after one warm-up pass), in ms."""
    for b in blobs:
        python_one(b, tf)
    idle = []
    for b in blobs:
        t = []
        for _ in range(3):
            t0 = time.perf_counter()
            python_one(b, tf)
            t.append((time.perf_counter() - t0) * 1e3)
        idle.append(sorted(t)[1])
    return idle


def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    x = state
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return state, x ^ (x >> 31)


def poisson(rate, duration, seed):
    """cli/latency.c's arrivals(): the same times in seconds from 0."""
    st = (seed ^ 0x6c6174656e6379) & M64
    now, out = 0.0, []
    while True:
        st, x = splitmix(st)
        u = ((x >> 11) + 0.5) * (1.0 / 9007199254740992.0)
        now += -math.log(u) / rate
        if now >= duration:
            return out
        out.append(int(now * 1e9) / 1e9)


def pct(sorted_v, q):
    if not sorted_v:
        return float("nan")
    return sorted_v[min(len(sorted_v) - 1, max(0, math.ceil(q * len(sorted_v)) - 1))]


def thread_slice(us):
    """cli/latency.c's generator slice for the calling thread (Linux 6.12+
    sched_setattr: SCHED_OTHER, nice kept, sched_runtime = us; 0 = the
    kernel's default again): the peer's generator gets what chute's gets.
    Does nothing where the call is unknown or refused."""
    import ctypes
    import struct
    nr = {"x86_64": 314, "aarch64": 274}.get(os.uname().machine)
    if nr is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        nice = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's (Linux: per thread)
        attr = struct.pack("=IIQiIQQQII", 56, 0, 0, nice, 0, us * 1000, 0, 0, 0, 0)
        buf = ctypes.create_string_buffer(attr, len(attr))
        libc.syscall(nr, 0, buf, 0)
    except (OSError, AttributeError):
        pass


def python_open_loop(blobs, idle, tf, rate, duration, workers, seed):
    """Serve the Poisson schedule with `workers` threads; per-request ms."""
    arr = poisson(rate, duration, seed)
    q = queue.SimpleQueue()
    lat = [0.0] * len(arr)
    late = [0.0] * len(arr)
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
    thread_slice(100)  # after the start: the serving threads keep the default
    for i, a in enumerate(arr):
        d = t0 + a - time.perf_counter()
        if d > 0:
            time.sleep(d)
        late[i] = (time.perf_counter() - (t0 + a)) * 1e3
        q.put(i)
    thread_slice(0)
    for _ in th:
        q.put(None)
    for t in th:
        t.join()
    added = sorted(max(0.0, lat[i] - idle[i % len(idle)]) for i in range(len(arr)))
    lat.sort()
    late.sort()
    return {"rate": rate, "requests": len(arr),
            "p50_ms": pct(lat, .5), "p99_ms": pct(lat, .99), "p999_ms": pct(lat, .999),
            "added_p50_ms": pct(added, .5), "added_p99_ms": pct(added, .99),
            "added_p999_ms": pct(added, .999), "late_p99_ms": pct(late, .99)}


def python_find_max(blobs, idle, tf, args, workers, single):
    lo, hi = 0.0, 2.0 * workers * 1000.0 / max(single, 1e-3)
    for _ in range(args.py_probes):
        mid = (lo + hi) / 2
        r = python_open_loop(blobs, idle, tf, mid, args.probe_duration, workers, args.seed)
        ok = r["p99_ms"] <= args.budget_ms
        print("python probe %6.0f req/s: p99 %.3f ms -> %s" % (mid, r["p99_ms"],
              "under budget" if ok else "over"), file=sys.stderr)
        if ok:
            lo = mid
        else:
            hi = mid
    return lo


def ideal_queue(rate, duration, seed, service_ms, workers):
    """The floor queueing alone sets: the same arrivals served in order by
    `workers` servers with no overhead at all, each request taking exactly
    its image's idle time.  What chute adds beyond this is the pipeline's."""
    import heapq
    arr = poisson(rate, duration, seed)
    free = [0.0] * workers
    lat, added = [], []
    for i, a in enumerate(arr):
        t = a * 1e3
        svc = service_ms[i % len(service_ms)]
        start = max(t, heapq.heappop(free))
        heapq.heappush(free, start + svc)
        lat.append(start + svc - t)
        added.append(start - t)
    lat.sort()
    added.sort()
    return {"rate": rate, "requests": len(arr), "p50_ms": pct(lat, .5), "p99_ms": pct(lat, .99),
            "p999_ms": pct(lat, .999), "added_p99_ms": pct(added, .99)}


# ------------------------------------------------------------------- report

def f3(v):
    return "%.3f" % v if isinstance(v, (int, float)) and v == v and v >= 0 else "n/a"


def one_repeat(args, blobs, tf, workers_arg):
    out = {}
    for preset in args.presets:
        c, cmd = chute_run(args, preset)
        out["chute_" + preset] = c
        out["chute_cmd_" + preset] = cmd
    workers = workers_arg or out["chute_" + args.presets[0]].get("workers") or os.cpu_count()
    idle = python_single(blobs, tf)
    single = statistics.fmean(idle)
    py = {"workers": workers, "single_ms": single,
          "single_p50_ms": pct(sorted(idle), .5), "single_p99_ms": pct(sorted(idle), .99)}
    if not args.no_python_max:
        py["max_rate"] = python_find_max(blobs, idle, tf, args, workers, single)
        if py["max_rate"] > 0:
            py["at_half_max"] = python_open_loop(blobs, idle, tf, py["max_rate"] / 2,
                                                 args.duration, workers, args.seed)
    crate = args.py_rate or (out["chute_" + args.presets[0]].get("at_half_max") or {}).get("rate", 0)
    if crate:
        py["at_chute_half_max"] = python_open_loop(blobs, idle, tf, crate, args.duration,
                                                   workers, args.seed)
    out["python"] = py
    return out


def rows_of(rep, args):
    rows = []
    for preset in args.presets:
        c = rep["chute_" + preset]
        h = c.get("at_half_max") or {}
        s = c["single_image_ms"]
        added = h.get("added_p99_ms", float("nan"))
        rows.append({
            "system": "chute --preset %s (batch %d, %s)" % (
                preset, c.get("max_batch", 0), "unordered" if c.get("unordered") else "ordered"),
            "single": s, "max": c.get("max_rate", 0), "rate": h.get("rate", 0),
            "n": h.get("requests", 0),
            "p50": h.get("p50_ms"), "p99": h.get("p99_ms"), "p999": h.get("p999_ms"),
            "added_p99": added, "ratio": added / s if s else float("nan"),
            "late": h.get("late_p99_ms"), "queue": h.get("queue_wait_p99_ms"),
            "service": h.get("service_p99_ms"), "deliver": h.get("deliver_p99_ms")})
        each = c.get("single_image_each_ms")
        if each and h.get("rate"):
            m = ideal_queue(h["rate"], args.duration, args.seed, each, c["workers"])
            rows.append({
                "system": "model: ideal FIFO queue, %d servers, no overhead, chute's idle times "
                          "(%s rate)" % (c["workers"], preset),
                "single": s, "max": float("nan"), "rate": m["rate"], "n": m["requests"],
                "p50": m["p50_ms"], "p99": m["p99_ms"], "p999": m["p999_ms"],
                "added_p99": m["added_p99_ms"], "ratio": m["added_p99_ms"] / s, "late": None,
                "queue": None, "service": None, "deliver": None})
    py = rep["python"]
    for key, label in (("at_half_max", "Python PIL+torchvision, own half max"),
                       ("at_chute_half_max", "Python PIL+torchvision, at chute's rate"
                        if not args.py_rate else "Python PIL+torchvision, at --py-rate")):
        h = py.get(key)
        if not h:
            continue
        rows.append({
            "system": "%s (%d threads)" % (label, py["workers"]), "single": py["single_ms"],
            "max": py.get("max_rate", float("nan")), "rate": h["rate"], "n": h["requests"],
            "p50": h["p50_ms"], "p99": h["p99_ms"], "p999": h["p999_ms"],
            "added_p99": h["added_p99_ms"], "ratio": h["added_p99_ms"] / py["single_ms"],
            "late": h["late_p99_ms"], "queue": None, "service": None, "deliver": None})
    return rows


def floor_by_cores(each_ms, cores=(1, 2, 3, 4, 8, 16), seeds=(1, 2, 3), duration=20.0):
    """What queueing alone sets as the target's ratio on c cores: the ideal
    FIFO queue (no overhead) with the measured per-image idle times, at
    exactly half of c servers' capacity (rate = c / (2 x mean)), median over
    a few arrival seeds.  This is the floor any FIFO server reaches on c
    cores with these images; chute's own overhead is what its row adds to
    the model row at the same rate."""
    mean = statistics.fmean(each_ms)
    out = []
    for c in cores:
        rate = 0.5 * c / (mean / 1e3)
        r = [ideal_queue(rate, duration, sd, each_ms, c)["added_p99_ms"] / mean for sd in seeds]
        out.append({"cores": c, "rate": rate, "ratio": statistics.median(r)})
    return out


def print_floor(floor):
    print("\n### queueing floor by core count (ideal FIFO, no overhead, 50% of capacity)\n")
    print("| cores | rate req/s | p99 added / single | target <= %.0f |" % TARGET)
    print("|---:|---:|---:|---|")
    for f in floor:
        print("| %d | %.0f | %.2f | %s |" % (f["cores"], f["rate"], f["ratio"],
                                             "met" if f["ratio"] <= TARGET else "missed"))


def print_table(rows, title):
    print("\n### %s\n" % title)
    print("| system | single ms | max req/s (p99<=budget) | rate req/s | requests | p50 ms | p99 ms | "
          "p99.9 ms | p99 added ms | p99 added / single | target <= %.0f | p99 gen. late | "
          "p99 queue wait | p99 decode+transform | p99 hand-out |" % TARGET)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        met = "met" if r["ratio"] == r["ratio"] and r["ratio"] <= TARGET else "missed"
        print("| %s | %s | %.0f | %.0f | %d | %s | %s | %s | %s | **%.2f** | %s | %s | %s | %s | %s |"
              % (r["system"], f3(r["single"]), r["max"] or 0, r["rate"] or 0, r["n"] or 0,
                 f3(r["p50"]),
                 f3(r["p99"]), f3(r["p999"]), f3(r["added_p99"]), r["ratio"], met,
                 f3(r["late"]), f3(r["queue"]), f3(r["service"]), f3(r["deliver"])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="an image tree (the Python peer reads its files)")
    ap.add_argument("--chute", default=os.path.join(REPO, "build", "chute"))
    ap.add_argument("--workers", type=int, default=0, help="threads for both (default: chute's)")
    ap.add_argument("--budget-ms", type=float, default=50.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--probe-duration", type=float, default=3.0)
    ap.add_argument("--probes", type=int, default=10)
    ap.add_argument("--py-probes", type=int, default=7, help="bisection steps for Python")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="alternating repeats (median reported)")
    ap.add_argument("--presets", default="latency,batch",
                    help="chute presets to run, first one sets the Python comparison rate")
    ap.add_argument("--py-rate", type=float, default=0,
                    help="run the Python peer at this rate instead of chute's half max")
    ap.add_argument("--no-python-max", action="store_true",
                    help="skip Python's own max-rate search (only run it at chute's rate)")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--tiny", action="store_true",
                    help="seconds, not minutes: check that it runs (no figures)")
    args = ap.parse_args()
    args.presets = [p for p in args.presets.split(",") if p]
    if args.tiny:
        args.duration, args.probe_duration, args.probes, args.py_probes = 0.5, 0.3, 4, 3
        args.images, args.size, args.budget_ms = min(args.images, 16), 64, max(args.budget_ms, 500)

    tf = python_transform(args.size)
    blobs = [open(f, "rb").read() for f in image_files(args.source, args.images)]
    reps = []
    for r in range(args.repeat):
        rep = one_repeat(args, blobs, tf, args.workers)
        reps.append(rep)
        print_table(rows_of(rep, args), "repeat %d of %d" % (r + 1, args.repeat))
        sys.stdout.flush()

    all_rows = [rows_of(rep, args) for rep in reps]
    med = []
    for i, r0 in enumerate(all_rows[0]):
        m = dict(r0)
        for k in ("single", "max", "rate", "n", "p50", "p99", "p999", "added_p99", "ratio", "late",
                  "queue", "service", "deliver"):
            vals = [rows[i][k] for rows in all_rows
                    if i < len(rows) and rows[i][k] is not None and rows[i][k] == rows[i][k]]
            m[k] = statistics.median(vals) if vals else None
        med.append(m)
    if args.repeat > 1:
        print_table(med, "median of %d alternating repeats" % args.repeat)
    c0 = reps[0]["chute_" + args.presets[0]]
    floor = None
    if c0.get("single_image_each_ms"):
        floor = floor_by_cores(c0["single_image_each_ms"], duration=max(args.duration, 2.0))
        print_floor(floor)
    print("\nDefinitions: latency = tensor handed to the caller - scheduled Poisson arrival; "
          "single = mean over the images of each image's idle decode+transform (median of 3, "
          "same run); added = latency - the single-image time of the same image; target: "
          "p99 added at half the max rate <= %.0f x single. Max rate: highest Poisson rate with "
          "p99 latency <= %.0f ms. The model row: the same arrivals and per-image idle times "
          "through c ideal servers (no overhead): the floor queueing alone sets; the floor table "
          "puts the same images through c ideal servers at exactly half their capacity "
          "(repeat 1's idle times, seeds 1-3, median). %d images, size %d, %d chute workers, Python threads = chute "
          "workers, %.1f s per measured run, seed %d." % (
              TARGET, args.budget_ms, c0["images"], args.size, c0["workers"], args.duration,
              args.seed))
    for p in args.presets:
        print("chute (%s): %s" % (p, reps[0]["chute_cmd_" + p]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"repeats": reps, "median_rows": med, "floor_by_cores": floor,
                       "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
