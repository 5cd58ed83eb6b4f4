#!/usr/bin/env python3
"""Tensors and tables: samples/s of chute against the way people feed them
today, on the same cores, in one run (issue #12).

    /usr/bin/python3 bench/tensors.py [--dir DIR] [--n N] [--dim D] [--rows R]
                                      [--batch-size B] [--workers W] [--epochs E] [--tiny]

Workloads (made once in DIR, default bench/data/tensors, by numpy and pandas):
  npy   one N x D float32 array (np.lib.format.open_memmap) + labels.npy:
        chute Loader(fields=["x"]) vs a torch Dataset over np.load(mmap_mode="r")
        + DataLoader(num_workers=W) (each item torch.from_numpy(mm[i]), default
        collate), both shuffled.
  csv   R rows x 8 columns (int64, 6 float32, a category) in 4 files written by
        pandas: chute Loader(schema=..., fields=[...]) vs pandas.read_csv of
        every file + a TensorDataset + DataLoader(num_workers=W), shuffled.
        The pandas row includes its read_csv time in the first epoch (that is
        what a run pays), and is also given without it ("pandas, loaded").
Each configuration runs E epochs after one warm-up epoch; samples/s is the
mean over the timed epochs; the ratio column is chute / that row.  Timings
are meaningful only on a quiet machine (the lead runs the figures); --tiny
checks that everything runs in seconds.
"""
import argparse
import os
import time

import numpy as np

from harness import add_common_args, chute_epochs, data_loader, print_rows, timed


def make_npy(d, n, dim):
    p = os.path.join(d, "x.npy")
    if not os.path.exists(p):
        m = np.lib.format.open_memmap(p + ".tmp", mode="w+", dtype=np.float32, shape=(n, dim))
        rs = np.random.RandomState(0)
        for s in range(0, n, 65536):
            m[s:s + 65536] = rs.randn(min(65536, n - s), dim).astype(np.float32)
        m.flush()
        del m
        np.save(os.path.join(d, "labels.npy"), (np.arange(n) % 1000).astype(np.int64))
        os.rename(p + ".tmp", p)
    return p


def make_csv(d, rows):
    import pandas as pd
    cd = os.path.join(d, "csv")
    if not os.path.isdir(cd):
        os.makedirs(cd + ".tmp", exist_ok=True)
        rs = np.random.RandomState(1)
        per = rows // 4
        for k in range(4):
            df = pd.DataFrame({"y": rs.randint(0, 10, per), "id": rs.randint(0, 2 ** 40, per)})
            for j in range(6):
                df["f%d" % j] = rs.randn(per).astype(np.float32)
            df["cat"] = rs.choice(["alpha", "beta", "gamma, delta", "eps"], per)
            df.to_csv(os.path.join(cd + ".tmp", "part-%d.csv" % k), index=False)
        os.rename(cd + ".tmp", cd)
    return cd


CSV_SCHEMA = "id:int64," + ",".join("f%d:float32" % j for j in range(6)) + ",cat:category"
CSV_FIELDS = ["id"] + ["f%d" % j for j in range(6)] + ["cat"]


def bench_npy(a, path):
    import torch
    from torch.utils.data import Dataset

    import chute

    ld = chute.Loader(path, batch_size=a.batch_size, workers=a.workers, fields=["x"], seed=1)

    class Mm(Dataset):
        def __init__(self):
            self.x = np.load(path, mmap_mode="r")
            self.y = np.load(os.path.join(os.path.dirname(path), "labels.npy"), mmap_mode="r")

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return torch.from_numpy(np.array(self.x[i])), int(self.y[i])

    dl = data_loader(Mm(), a)
    out = [("npy", "chute", *timed(chute_epochs(ld), a.epochs)),
           ("npy", "numpy memmap + DataLoader", *timed(lambda e: dl, a.epochs))]
    ld.close()
    return out


def bench_csv(a, d):
    import pandas as pd
    import torch
    from torch.utils.data import TensorDataset

    import chute

    ld = chute.Loader(d, batch_size=a.batch_size, workers=a.workers, schema=CSV_SCHEMA,
                      label_key="y", fields=CSV_FIELDS, seed=1)

    def load():
        df = pd.concat([pd.read_csv(os.path.join(d, f)) for f in sorted(os.listdir(d))],
                       ignore_index=True)
        return TensorDataset(torch.from_numpy(df["id"].to_numpy(np.int64)),
                             torch.from_numpy(df[["f%d" % j for j in range(6)]]
                                              .to_numpy(np.float32)),
                             torch.from_numpy(df["cat"].astype("category").cat.codes
                                              .to_numpy(np.int64)),
                             torch.from_numpy(df["y"].to_numpy(np.int64)))

    t0 = time.perf_counter()
    ds = load()
    load_s = time.perf_counter() - t0
    dl = data_loader(ds, a)
    loaded = timed(lambda e: dl, a.epochs)
    n = len(ds)
    # with the load: the first epoch pays read_csv; spread over all epochs
    with_load = n * (a.epochs + 1) / ((n * a.epochs) / loaded[0] + loaded[1] + load_s)
    out = [("csv", "chute", *timed(chute_epochs(ld), a.epochs)),
           ("csv", "pandas + DataLoader (read_csv included)", with_load, loaded[1] + load_s),
           ("csv", "pandas + DataLoader, loaded", *loaded)]
    ld.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "data", "tensors"))
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--rows", type=int, default=1_000_000)
    add_common_args(ap, 256, "a few thousand samples: checks it runs")
    a = ap.parse_args()
    if a.tiny:
        a.n, a.dim, a.rows, a.epochs = 4000, 32, 4000, 1
        a.dir = os.path.join(a.dir, "tiny")
    os.makedirs(a.dir, exist_ok=True)
    rows = bench_npy(a, make_npy(a.dir, a.n, a.dim)) + bench_csv(a, make_csv(a.dir, a.rows))
    print_rows(rows)
    print("\n%d workers, batch %d, %d timed epochs; npy %d x %d float32, csv %d rows" %
          (a.workers, a.batch_size, a.epochs, a.n, a.dim, a.rows))


if __name__ == "__main__":
    main()
