#!/usr/bin/env python3
"""Convert Fashion-MNIST (idx format, e.g. Debian's dataset-fashion-mnist) to
ImageFolder trees of 28x28 greyscale PNGs:

    OUT/train/<k>_<name>/<n>.png     OUT/test/<k>_<name>/<n>.png

Class folders are prefixed with their label digit, so sorted folder order
(the ImageFolder and chute convention) equals the original labels.

usage: fashion_mnist_to_folder.py OUT [--src DIR] [--train N] [--test M]
(N, M: the first N/M images of each split; default all 60000/10000)
"""
import argparse
import gzip
import os
import struct
import sys

CLASSES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
           "boot"]
DEFAULT_SRC = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """(dims, bytes) of an idx file (optionally gzipped) of unsigned bytes."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not an idx file of unsigned bytes" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, memoryview(data)[4 + 4 * ndim:]


def find(src, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(src, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError("%s: no %s(.gz)" % (src, stem))


def convert(src, out, split, prefix, limit):
    from PIL import Image

    (n, h, w), pixels = read_idx(find(src, prefix + "-images-idx3-ubyte"))
    (nl,), labels = read_idx(find(src, prefix + "-labels-idx1-ubyte"))
    if nl != n:
        raise ValueError("%s: %d images but %d labels" % (prefix, n, nl))
    n = min(n, limit) if limit else n
    dirs = [os.path.join(out, split, "%d_%s" % (k, c)) for k, c in enumerate(CLASSES)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    size = h * w
    for i in range(n):
        im = Image.frombytes("L", (w, h), bytes(pixels[i * size:(i + 1) * size]))
        im.save(os.path.join(dirs[labels[i]], "%05d.png" % i), optimize=False, compress_level=1)
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--src", default=DEFAULT_SRC)
    ap.add_argument("--train", type=int, default=0, help="first N training images (0: all)")
    ap.add_argument("--test", type=int, default=0, help="first M test images (0: all)")
    a = ap.parse_args(argv)
    ntr = convert(a.src, a.out, "train", "train", a.train)
    nte = convert(a.src, a.out, "test", "t10k", a.test)
    print("wrote %d train and %d test images under %s" % (ntr, nte, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
