#!/usr/bin/env python3
"""TensorBoard export overhead (issue 27): images/s with tensorboard= on and
off, alternating, in one run.

    /usr/bin/python3 bench/tensorboard_overhead.py [--dir DIR] [--images N] [--rounds R]
                                                   [--every N] [--batch-size B]
                                                   [--workers W] [--tiny]

Data: an ImageFolder tree made once in DIR (default bench/data/tb_tree) by
tests/tools/make_tree.py (real photos, max side 320).  Each round runs one
epoch (train transform, size 128, uint8) for each configuration in turn:
  off      tensorboard=None
  native   tensorboard=DIR: the library's event file, every N batches
           (default 1: the worst case, a snapshot per batch)
  writer   tensorboard=torch.utils.tensorboard.SummaryWriter (when the
           tensorboard package is importable; bench adds build-python/tb/site,
           which tests/python/test_tensorboard.py fills)
The order rotates each round so no configuration always runs first.
images/s per configuration is the median over rounds; "ratio" is that over
"off"'s median, "round ratio" the median over rounds of the ratio to "off"
in the same round (less sensitive to a machine whose load changes between
rounds).  "cpu ms/1k" is the process's CPU time (every thread: workers, the
event writer, Python) per 1000 images, median over rounds: what the export
costs in work, whatever else the machine runs.  Timings mean something only
on a quiet machine; --tiny checks that everything runs in seconds.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_set(d, n):
    if not os.path.isdir(d):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "make_tree.py"), d,
                        "--images", str(n), "--classes", "4", "--seed", "3", "--max-side", "320"],
                       check=True)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(HERE, "data", "tb_tree"))
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="a few rounds on a few images")
    a = ap.parse_args()
    if a.tiny:
        a.images, a.rounds, a.dir = 96, 2, a.dir + "_tiny"
    import chute
    data = make_set(a.dir, a.images)
    tb_site = os.path.join(ROOT, "build-python", "tb", "site")
    sys.path.append(tb_site)
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # no tensorboard package: that row is left out
        SummaryWriter = None
    logs = tempfile.mkdtemp(prefix="chute-tb-bench-")
    configs = ["off", "native"] + (["writer"] if SummaryWriter else [])
    rates = {c: [] for c in configs}
    cpu = {c: [] for c in configs}
    ds = chute.Dataset(data)
    try:
        for r in range(a.rounds + 1):  # round 0 warms the page cache, not counted
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for c in order:
                w = None
                tb = None
                if c == "native":
                    tb = os.path.join(logs, "native%d" % r)
                elif c == "writer":
                    w = SummaryWriter(os.path.join(logs, "writer%d" % r))
                    tb = w
                ld = chute.Loader(ds, batch_size=a.batch_size, size=128, dtype="uint8",
                                  workers=a.workers, as_torch=False, tensorboard=tb,
                                  tensorboard_every=a.every)
                t0 = time.perf_counter()
                c0 = time.process_time()
                n = 0
                for images, _ in ld:
                    n += len(images)
                ld.close()  # the native writer's last records are written by now
                if w is not None:
                    w.close()
                dt = time.perf_counter() - t0
                dc = time.process_time() - c0
                if r:
                    rates[c].append(n / dt)
                    cpu[c].append(1e6 * dc / n)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    base = statistics.median(rates["off"])
    print("images=%d batch=%d workers=%d every=%d rounds=%d"
          % (a.images, a.batch_size, a.workers, a.every, a.rounds))
    cbase = statistics.median(cpu["off"])
    print("%-8s %10s %7s %12s %10s %7s   %s" % ("config", "images/s", "ratio", "round ratio",
                                             "cpu ms/1k", "ratio", "images/s per round"))
    for c in configs:
        m = statistics.median(rates[c])
        rr = statistics.median(x / y for x, y in zip(rates[c], rates["off"]))
        cm = statistics.median(cpu[c])
        print("%-8s %10.1f %7.3f %12.3f %10.1f %7.3f   %s"
              % (c, m, m / base, rr, cm, cm / cbase, " ".join("%.0f" % x for x in rates[c])))


if __name__ == "__main__":
    main()
