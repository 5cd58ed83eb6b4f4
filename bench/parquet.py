#!/usr/bin/env python3
"""Parquet: samples/s of chute (Parquet -> pyarrow row groups -> Arrow C
stream -> libchute) against pandas/pyarrow + torch DataLoader, on the same
cores, in one run (issue #12).

    /usr/bin/python3 bench/parquet.py [--dir DIR] [--rows R] [--images I]
                                      [--batch-size B] [--workers W] [--epochs E] [--tiny]

Workloads (written once in DIR, default bench/data/parquet, by pyarrow):
  table   R rows (default 100k) of 16 float32 features, an int64 id, a 64-float
          fixed_size_list embedding and an int64 label, row groups of 10k:
          chute Loader(path, fields=[...]) vs pandas.read_parquet + a
          TensorDataset + DataLoader(num_workers=W), both shuffled.  The
          pandas row is given with its read_parquet time spread over the run
          and without it ("loaded"); chute's first epoch includes its read.
  images  a Hugging Face-style column struct<bytes, path> of I JPEGs (default
          2000; bench/data/imagenet-like JPEGs when bench/data/tree exists,
          else made by PIL), 224 train transform: chute Loader(path,
          transform="train") vs a torch Dataset over the pyarrow table
          (PIL decode + RandomResizedCrop + flip + ToTensor + Normalize) +
          DataLoader(num_workers=W).
Each configuration runs E epochs after one warm-up epoch; samples/s is the
mean over the timed epochs; the ratio column is chute / that row.  Timings
mean something only on a quiet machine (the lead runs the figures); --tiny
checks that everything runs, in seconds.  pyarrow is taken from the
environment or from build-python/pyarrow/site (scripts/test.sh fetches it).
"""
import argparse
import io
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "build-python", "pyarrow", "site"))
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from harness import timed  # noqa: E402

FEATURES = ["f%d" % j for j in range(16)]
FIELDS = ["id"] + FEATURES + ["emb"]


def make_table(d, rows):
    p = os.path.join(d, "table.parquet")
    if not os.path.exists(p):
        rs = np.random.RandomState(0)
        cols = {"label": pa.array(rs.randint(0, 1000, rows), pa.int64()),
                "id": pa.array(rs.randint(0, 2 ** 40, rows), pa.int64())}
        for f in FEATURES:
            cols[f] = pa.array(rs.randn(rows).astype(np.float32))
        cols["emb"] = pa.FixedSizeListArray.from_arrays(
            pa.array(rs.randn(rows * 64).astype(np.float32)), 64)
        pq.write_table(pa.table(cols), p + ".tmp", row_group_size=10000)
        os.rename(p + ".tmp", p)
    return p


def jpeg_sources(n):
    """n encoded JPEGs: from bench/data/tree if present, else drawn by PIL."""
    tree = os.path.join(HERE, "data", "tree")
    out = []
    if os.path.isdir(tree):
        for root, _, files in sorted(os.walk(tree)):
            for f in sorted(files):
                if f.lower().endswith((".jpg", ".jpeg")) and len(out) < n:
                    with open(os.path.join(root, f), "rb") as fh:
                        out.append(fh.read())
    from PIL import Image
    rs = np.random.RandomState(1)
    while len(out) < n:
        h, w = rs.randint(240, 480), rs.randint(320, 640)
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 255 // w), (y * 255 // h), ((x + y) * 3) % 256], -1)
        img = (img + rs.randint(0, 40, (h, w, 3))).clip(0, 255).astype(np.uint8)
        b = io.BytesIO()
        Image.fromarray(img).save(b, "JPEG", quality=90)
        out.append(b.getvalue())
    return out


def make_images(d, n):
    p = os.path.join(d, "images.parquet")
    if not os.path.exists(p):
        data = jpeg_sources(n)
        img = pa.array([{"bytes": b, "path": "%06d.jpg" % k} for k, b in enumerate(data)],
                       pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        t = pa.table({"image": img, "label": pa.array(np.arange(n) % 100, pa.int64())})
        pq.write_table(t, p + ".tmp", row_group_size=256)
        os.rename(p + ".tmp", p)
    return p


def bench_table(a, path):
    import pandas as pd
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import chute

    t0 = time.perf_counter()
    ld = chute.Loader(path, batch_size=a.batch_size, workers=a.workers, fields=FIELDS, seed=1)
    open_s = time.perf_counter() - t0

    def chute_iter(e):
        ld.set_epoch(e)
        return ld

    t0 = time.perf_counter()
    df = pd.read_parquet(path)
    ds = TensorDataset(torch.from_numpy(df["id"].to_numpy(np.int64)),
                       torch.from_numpy(df[FEATURES].to_numpy(np.float32)),
                       torch.from_numpy(np.stack(df["emb"].to_numpy()).astype(np.float32)),
                       torch.from_numpy(df["label"].to_numpy(np.int64)))
    load_s = time.perf_counter() - t0
    dl = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                    persistent_workers=a.workers > 0)
    loaded = timed(lambda e: dl, a.epochs)
    n = len(ds)
    with_load = n * (a.epochs + 1) / ((n * a.epochs) / loaded[0] + loaded[1] + load_s)
    c = timed(chute_iter, a.epochs)
    out = [("table", "chute (Parquet read at open included)", c[0], c[1] + open_s),
           ("table", "pandas.read_parquet + DataLoader (read included)", with_load,
            loaded[1] + load_s),
           ("table", "pandas.read_parquet + DataLoader, loaded", *loaded)]
    ld.close()
    return out


class _HFImages:
    """What a user writes today: a map-style Dataset over the pyarrow table."""

    def __init__(self, path, size):
        import torchvision.transforms as TV
        self.path, self.t = path, None
        self.tf = TV.Compose([TV.RandomResizedCrop(size), TV.RandomHorizontalFlip(),
                              TV.ToTensor(),
                              TV.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
        self.n = pq.ParquetFile(path).metadata.num_rows

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        from PIL import Image
        if self.t is None:  # each worker reads the file once
            self.t = pq.read_table(self.path)
        row = self.t.column("image")[i].as_py()
        with Image.open(io.BytesIO(row["bytes"])) as im:
            x = self.tf(im.convert("RGB"))
        return x, self.t.column("label")[i].as_py()


def bench_images(a, path):
    from torch.utils.data import DataLoader

    import chute

    ld = chute.Loader(path, batch_size=a.batch_size, workers=a.workers, size=224,
                      transform="train", dtype="float32", seed=1)

    def chute_iter(e):
        ld.set_epoch(e)
        return ld

    dl = DataLoader(_HFImages(path, 224), batch_size=a.batch_size, shuffle=True,
                    num_workers=a.workers, persistent_workers=a.workers > 0)
    out = [("images", "chute", *timed(chute_iter, a.epochs)),
           ("images", "pyarrow table + PIL/torchvision + DataLoader", *timed(lambda e: dl,
                                                                             a.epochs))]
    ld.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(HERE, "data", "parquet"))
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="a few thousand rows: checks it runs")
    a = ap.parse_args()
    if a.tiny:
        a.rows, a.images, a.epochs, a.batch_size = 3000, 48, 1, 16
        a.dir = os.path.join(a.dir, "tiny")
    os.makedirs(a.dir, exist_ok=True)
    rows = (bench_table(a, make_table(a.dir, a.rows)) +
            bench_images(a, make_images(a.dir, a.images)))
    print("\n| workload | loader | samples/s | first epoch s | chute / this |")
    print("|---|---|---:|---:|---:|")
    ref = {}
    for w, name, rate, first in rows:
        ref.setdefault(w, rate)
        print("| %s | %s | %.0f | %.2f | %.2fx |" % (w, name, rate, first, ref[w] / rate))
    print("\n%d workers, batch %d, %d timed epochs; table %d rows, images %d JPEGs" %
          (a.workers, a.batch_size, a.epochs, a.rows, a.images))


if __name__ == "__main__":
    main()
