#!/usr/bin/env python3
"""HDF5: chute's hdf5 format against h5py + torch DataLoader, same cores,
same train transform, one run; and how much HDF5's global lock serialises
chute's workers.

    python3 bench/hdf5.py TREE [--images N] [--side S] [--workers W]
                          [--batch-size B] [--size 224] [--epochs E]

Run by bench/formats.sh (builds the package, makes TREE with
bench/make_dataset.py).  From the first N JPEGs of TREE it writes, with
h5py, into TREE.h5/ :
  raw.h5      images N x S x S x 3 uint8 (centre crop + resize), contiguous
  gzip.h5     the same pixels, chunked one image per chunk, gzip level 1
  jpeg.h5     the original JPEG files' bytes, variable-length uint8
each with labels.  Rows:
  chute         chute.Loader(transform="train"), W worker threads
  h5py+DL       torch DataLoader(num_workers=W) over a Dataset that opens
                the file once per worker and reads images[i] with h5py
                (raw: a numpy array; jpeg: PIL decode of the bytes), then
                torchvision RandomResizedCrop + RandomHorizontalFlip +
                ToTensor-equivalent scaling + Normalize
  lock          chute with 1 worker vs W workers on the same file: the
                speed-up.  raw/gzip reads never call libhdf5 (no lock);
                jpeg.h5 reads go through H5Dread under the library lock,
                so its speed-up shows what the lock costs.
Prints which chute package it measures and whether gzip chunks go through
libdeflate or zlib, then a table: images/s, CPU ms/image (this process +
DataLoader worker processes), and chute / DataLoader ratios."""
import argparse
import io
import os
import resource
import sys
import time

import numpy as np


def cpu_s():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def list_tree(tree, n):
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    files = []
    for ci, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(tree, c))):
            files.append((os.path.join(tree, c, f), ci))
    files.sort(key=lambda x: (hash(x[0]) & 0xffff, x[0]))  # mix classes, deterministic per run
    return files[:n]


def write_files(out, files, side):
    import h5py
    from PIL import Image
    os.makedirs(out, exist_ok=True)
    stamp = os.path.join(out, "stamp")
    want = "%d %d\n" % (len(files), side)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    n = len(files)
    labels = np.array([c for _, c in files], dtype=np.int64)
    pix = np.empty((n, side, side, 3), dtype=np.uint8)
    for i, (p, _) in enumerate(files):
        im = Image.open(p).convert("RGB")
        w, h = im.size
        s = min(w, h)
        im = im.crop(((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s))
        pix[i] = np.asarray(im.resize((side, side), Image.BILINEAR))
    with h5py.File(os.path.join(out, "raw.h5"), "w") as f:
        f.create_dataset("images", data=pix)
        f.create_dataset("labels", data=labels)
    with h5py.File(os.path.join(out, "gzip.h5"), "w") as f:
        f.create_dataset("images", data=pix, chunks=(1, side, side, 3), compression="gzip",
                         compression_opts=1)
        f.create_dataset("labels", data=labels)
    with h5py.File(os.path.join(out, "jpeg.h5"), "w") as f:
        d = f.create_dataset("images", (n,), dtype=h5py.vlen_dtype(np.uint8))
        for i, (p, _) in enumerate(files):
            d[i] = np.frombuffer(open(p, "rb").read(), dtype=np.uint8)
        f.create_dataset("labels", data=labels)
    open(stamp, "w").write(want)


def build_line():
    """Which chute the rows measure, and its inflater for gzip chunks: with
    zlib instead of libdeflate the gzip row costs ~1.6x the CPU (docs/DESIGN.md,
    HDF5), so a figure without this line cannot be told apart."""
    import chute
    from chute import _chute
    have = _chute.features().split()
    return ("chute %s from %s; gzip chunks inflated by %s; library features: %s"
            % (chute.__version__, os.path.dirname(chute.__file__),
               "libdeflate" if "libdeflate" in have else "zlib (no libdeflate in this build)",
               " ".join(have)))


def run_chute(path, a, workers):
    import chute
    ld = chute.Loader(path, batch_size=a.batch_size, size=a.size, transform="train",
                      workers=workers, seed=1, as_torch=False)
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


class H5Set:
    """The usual h5py Dataset: open lazily in each worker, read row i."""

    def __init__(self, path, encoded, size):
        import torchvision.transforms as T
        self.path, self.encoded, self.f = path, encoded, None
        self.t = T.Compose([T.RandomResizedCrop(size, antialias=True), T.RandomHorizontalFlip(),
                            T.ConvertImageDtype(__import__("torch").float32),
                            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        import h5py
        with h5py.File(path, "r") as f:
            self.n = len(f["labels"])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import h5py
        import torch
        from PIL import Image
        if self.f is None:
            self.f = h5py.File(self.path, "r")
        if self.encoded:
            im = Image.open(io.BytesIO(self.f["images"][i].tobytes())).convert("RGB")
            x = torch.from_numpy(np.asarray(im).copy())
        else:
            x = torch.from_numpy(self.f["images"][i])
        return self.t(x.permute(2, 0, 1)), int(self.f["labels"][i])


def run_dl(path, encoded, a):
    import torch
    ds = H5Set(path, encoded, a.size)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True,
                                     num_workers=a.workers, persistent_workers=False)
    best = None
    for _ in range(a.epochs):
        t0, c0, n = time.perf_counter(), cpu_s(), 0
        for x, _ in dl:
            n += x.shape[0]
        t, c = time.perf_counter() - t0, cpu_s() - c0  # workers reaped: RUSAGE_CHILDREN has them
        r = (n / t, 1000 * c / max(n, 1))
        best = r if best is None or r[0] > best[0] else best
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tree")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--side", type=int, default=256)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    out = a.tree.rstrip("/") + ".h5"
    write_files(out, list_tree(a.tree, a.images), a.side)
    print("hdf5 bench: %d images, %dx%d stored, train %d, %d workers, best of %d epochs"
          % (a.images, a.side, a.side, a.size, a.workers, a.epochs))
    print(build_line())
    print("| file | chute img/s | chute CPU ms/img | h5py+DL img/s | h5py+DL CPU ms/img "
          "| speed ratio | CPU ratio | chute 1 worker img/s | lock: W/1 speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, encoded in (("raw.h5", 0), ("gzip.h5", 0), ("jpeg.h5", 1)):
        p = os.path.join(out, name)
        c = run_chute(p, a, a.workers)
        c1 = run_chute(p, a, 1)
        d = run_dl(p, encoded, a)
        print("| %s | %.0f | %.2f | %.0f | %.2f | %.2fx | %.2fx | %.0f | %.2fx |"
              % (name, c[0], c[1], d[0], d[1], c[0] / d[0], d[1] / c[1], c1[0], c[0] / c1[0]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
