#!/usr/bin/env python3
"""What DCT-domain downscaling (dct_scale, on by default) costs in eval
accuracy, against torchvision's pixels (docs/DESIGN.md, "Measured choices").

Fashion-MNIST (Debian's dataset-fashion-mnist) is upscaled to SIDE x SIDE
and stored as JPEG (quality 90) in two ImageFolder trees under WORK.  A
small CNN is trained on torchvision's eval pixels of the training tree
(Resize(73) + CenterCrop(64) on PIL, as a model ported from torchvision
would have been), then the test tree goes through three paths: torchvision,
chute's eval with dct_scale on (every test image is large enough to be
decoded at 1/2), and with it off.  Printed per path: top-1, predictions
that differ from torchvision's, pixel MAE and max difference.

    python3 bench/eval_dct_accuracy.py WORK build/tests/dump [--epochs 10]

Fashion-MNIST holds no detail above its 28-px source, so this measures the
scale's cost on low-detail images; the pixel figures on photos are in
tests/test_accuracy.py's notes.  2 cores: ~5 minutes for 10 epochs.
"""
import argparse
import gzip
import os
import subprocess
import time

import numpy as np
import torch
import torch.nn as nn
import torchvision.transforms as TV
from PIL import Image

D = "/usr/share/datasets/fashion-mnist"
S, R = 64, 73  # R = floor(64 / 0.875), the eval default


def idx(name, off):
    with gzip.open(os.path.join(D, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)


def load(kind, n):
    x = idx("%s-images-idx3-ubyte.gz" % kind, 16).reshape(-1, 28, 28)[:n]
    y = idx("%s-labels-idx1-ubyte.gz" % kind, 8)[:n]
    return x, y


def make_tree(root, x, y, side):
    for i, (im, lab) in enumerate(zip(x, y)):
        d = os.path.join(root, "c%d" % lab)
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "%05d.jpg" % i)
        if not os.path.exists(p):
            Image.fromarray(im).resize((side, side), Image.BICUBIC).convert("RGB").save(p, quality=90)


def tv_pixels(root):
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(root)
    tf = TV.Compose([TV.Resize(R), TV.CenterCrop(S)])
    X = np.stack([np.asarray(tf(Image.open(p).convert("RGB"))) for p, _ in ds.samples])
    return X, np.array([t for _, t in ds.samples])


def chute_pixels(dump, work, root, extra):
    out = os.path.join(work, "dump.bin")
    subprocess.run([dump, root, out, "--transform", "eval", "--dtype", "uint8", "--size", str(S),
                    "--no-shuffle", "--batch-size", "100", "--workers", "2"] + extra, check=True,
                   stdout=subprocess.DEVNULL)
    rec = np.dtype([("idx", "<u8"), ("label", "<i8"), ("data", "u1", (S * S * 3,))])
    r = np.fromfile(out, np.uint8).view(rec)
    return r["data"].reshape(-1, S, S, 3), r["label"]


def tensor(X):
    return torch.from_numpy(X).permute(0, 3, 1, 2).float().div(255).sub(0.5).div(0.25)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("dump", help="build/tests/dump (the test tool that writes a loader's batches)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--side", type=int, default=160, help="stored image side (>= 2 x 73 to scale)")
    ap.add_argument("--train", type=int, default=12000)
    ap.add_argument("--test", type=int, default=4000)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    t0 = time.time()
    tr, te = os.path.join(a.work, "train"), os.path.join(a.work, "test")
    make_tree(tr, *load("train", a.train), a.side)
    make_tree(te, *load("t10k", a.test), a.side)
    Xtr, Ytr = tv_pixels(tr)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                        nn.Conv2d(64, 128, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(128, 10))
    opt = torch.optim.Adam(net.parameters(), 2e-3)
    Xt, Yt = tensor(Xtr), torch.from_numpy(Ytr).long()
    for ep in range(a.epochs):
        perm = torch.randperm(len(Xt))
        for i in range(0, len(Xt), 128):
            j = perm[i:i + 128]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(Xt[j]), Yt[j])
            loss.backward()
            opt.step()
        print("epoch %d loss %.3f  %.0f s" % (ep, loss.item(), time.time() - t0), flush=True)
    net.eval()

    def predict(X):
        with torch.no_grad():
            return torch.cat([net(tensor(X[i:i + 500])).argmax(1) for i in range(0, len(X), 500)]).numpy()

    Xtv, Ytv = tv_pixels(te)
    paths = {"torchvision": (Xtv, Ytv),
             "chute dct_scale=True": chute_pixels(a.dump, a.work, te, []),
             "chute dct_scale=False": chute_pixels(a.dump, a.work, te, ["--no-dct-scale"])}
    ptv = predict(Xtv)
    for k, (X, Y) in paths.items():
        assert (Y == Ytv).all(), "labels differ from ImageFolder's"
        p = predict(X)
        d = np.abs(X.astype(np.float32) - Xtv.astype(np.float32))
        print("%-22s top-1 %.2f%%  predictions differing from torchvision's %d of %d  "
              "pixel MAE %.3f max %d" % (k, 100 * (p == Y).mean(), (p != ptv).sum(), len(Y),
                                         d.mean(), d.max()))


if __name__ == "__main__":
    main()
