#!/usr/bin/env python3
"""The decoded-sample cache, per epoch: images/s and CPU ms/image of epoch 1
and epoch 2 without the cache, and with it (epoch 1 fills it, epoch 2+ read
it), plus the cache's resident memory against its budget.

    python3 bench/dcache.py SHARDS [--budget BYTES] [--workers N] [--epochs E]
                            [--transform train|eval] [--batch-size B] [--size S]

Run by bench/dcache.sh (which builds the package and the dataset).  Each
configuration gets a fresh loader in this process, one after the other, on
the same cores; CPU time is this process's (all worker threads), so it
includes the consumer loop (a few microseconds per batch).  "RSS +MiB" is
VmRSS after the epoch minus VmRSS before the loader was created (ring
included); "cache MiB" is stats()["cache_bytes"] (index + entries)."""
import argparse
import os
import resource
import sys
import time

import chute

MiB = 1 << 20


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(args, budget):
    before = rss()
    ld = chute.Loader(args.shards, batch_size=args.batch_size, size=args.size,
                      transform=args.transform, workers=args.workers, seed=1,
                      as_torch=False, decoded_cache_bytes=budget)
    rows = []
    for e in range(args.epochs):
        ld.set_epoch(e)
        s0 = ld.stats()
        t0, c0, n = time.perf_counter(), cpu_s(), 0
        for x, y in ld:
            n += x.shape[0] if hasattr(x, "shape") else args.batch_size
        t, c = time.perf_counter() - t0, cpu_s() - c0
        s = ld.stats()
        rows.append(dict(epoch=e + 1, images=n, ips=n / t, cpu_ms=1000 * c / max(n, 1),
                         hits=s["cache_hits"] - s0["cache_hits"], rss=(rss() - before) / MiB,
                         cache=s["cache_bytes"] / MiB, ring=ld.prefetch + ld.max_held,
                         workers=s["workers"]))
    ld.close()
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shards")
    p.add_argument("--budget", type=int, default=8 << 30, help="cache budget in bytes")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--transform", default="train", choices=["train", "eval"])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    args = p.parse_args()
    if args.epochs < 2:
        p.error("--epochs must be >= 2 (epoch 2 is the point)")
    print("chute %s, %s, %s transform, batch %d, size %d, cache budget %.0f MiB, %d cores"
          % (chute.__version__, args.shards, args.transform, args.batch_size, args.size,
             args.budget / MiB, os.cpu_count()))
    off = run(args, 0)
    on = run(args, args.budget)
    print()
    print("| run | epoch | images/s | CPU ms/image | cache hits | RSS +MiB | cache MiB "
          "| budget MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in (("no cache", off), ("cache", on)):
        for r in rows:
            print("| %s | %d | %.0f | %.2f | %d | %.0f | %.0f | %s |"
                  % (name, r["epoch"], r["ips"], r["cpu_ms"], r["hits"], r["rss"], r["cache"],
                     "-" if rows is off else "%.0f" % (args.budget / MiB)))
    base = off[0]["ips"]
    e2 = on[1]["ips"]
    print()
    print("epoch 2 with the cache / epoch 1 without: %.2fx images/s (%d workers); "
          "cache hits in epoch 2: %d of %d; cache RSS %.0f MiB of a %.0f MiB budget"
          % (e2 / base if base else 0, on[1]["workers"], on[1]["hits"], on[1]["images"],
             on[-1]["cache"], args.budget / MiB))
    return 0


if __name__ == "__main__":
    sys.exit(main())
