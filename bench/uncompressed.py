#!/usr/bin/env python3
"""Uncompressed images on the train transform: the same images as JPEG,
BMP and PNG with compression level 0, each packed into chute shards, read
by chute.Loader(transform="train") on the same cores in one run.

    python3 bench/uncompressed.py TREE [--images N] [--chute build/chute]
                                  [--workers W] [--batch-size B] [--epochs E]

Run by bench/formats.sh (builds the package, makes TREE with
bench/make_dataset.py, ImageNet-like JPEGs).  The first N images of TREE
are decoded once with PIL and written as TREE.unc/{jpeg,bmp,png0}/CLASS/*
(JPEG quality 90; BMP 24-bit; PNG compress_level=0, i.e. stored deflate
blocks), each tree packed with `chute pack`, the page cache warmed by
reading every shard.  Prints images/s, CPU ms/image and MB read per image,
and each format's ratio to JPEG.  Not a figure on a busy machine: the lead
runs it on a quiet one."""
import argparse
import os
import resource
import subprocess
import sys
import time


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_trees(tree, out, n):
    from PIL import Image
    stamp = os.path.join(out, "stamp")
    if os.path.exists(stamp) and open(stamp).read() == "%d\n" % n:
        return
    files = []
    for c in sorted(os.listdir(tree)):
        if os.path.isdir(os.path.join(tree, c)):
            files += [(c, f) for f in sorted(os.listdir(os.path.join(tree, c)))]
    files = files[:: max(1, len(files) // n)][:n]
    for c, f in files:
        im = Image.open(os.path.join(tree, c, f)).convert("RGB")
        stem = os.path.splitext(f)[0]
        for fmt, ext, kw in (("jpeg", ".jpg", dict(format="JPEG", quality=90)),
                             ("bmp", ".bmp", dict(format="BMP")),
                             ("png0", ".png", dict(format="PNG", compress_level=0))):
            d = os.path.join(out, fmt, c)
            os.makedirs(d, exist_ok=True)
            im.save(os.path.join(d, stem + ext), **kw)
    open(stamp, "w").write("%d\n" % n)


def pack(chute_bin, src, dst):
    if not os.path.exists(os.path.join(dst, "chute.manifest")):
        subprocess.run([chute_bin, "pack", src, dst], check=True, stdout=subprocess.DEVNULL)
    total = 0
    for f in os.listdir(dst):
        with open(os.path.join(dst, f), "rb") as fh:
            while True:
                b = fh.read(1 << 24)
                if not b:
                    break
                total += len(b)
    return total


def run(path, a):
    import chute
    ld = chute.Loader(path, batch_size=a.batch_size, size=224, transform="train",
                      workers=a.workers, seed=1, as_torch=False)
    best = None
    for e in range(a.epochs):
        ld.set_epoch(e)
        t0, c0, n = time.perf_counter(), cpu_s(), 0
        for x, _ in ld:
            n += x.shape[0]
        t, c = time.perf_counter() - t0, cpu_s() - c0
        r = (n / t, 1000 * c / max(n, 1))
        best = r if best is None or r[0] > best[0] else best
    ld.close()
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tree")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--chute", default="build/chute")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    out = a.tree.rstrip("/") + ".unc"
    make_trees(a.tree, out, a.images)
    rows = []
    for fmt in ("jpeg", "bmp", "png0"):
        shards = os.path.join(out, fmt + ".shards")
        size = pack(a.chute, os.path.join(out, fmt), shards)
        ips, cpu = run(shards, a)
        rows.append((fmt, ips, cpu, size / a.images / 1e6))
    print("uncompressed bench: %d images, train 224, %d workers, best of %d epochs"
          % (a.images, a.workers, a.epochs))
    print("| format | img/s | CPU ms/img | MB/img on disk | speed vs JPEG | CPU vs JPEG |")
    print("|---|---|---|---|---|---|")
    j = rows[0]
    for fmt, ips, cpu, mb in rows:
        print("| %s | %.0f | %.2f | %.3f | %.2fx | %.2fx |" % (fmt, ips, cpu, mb, ips / j[1],
                                                            cpu / j[2]))


if __name__ == "__main__":
    sys.exit(main())
