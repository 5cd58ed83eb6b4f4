#!/usr/bin/python3
"""Does training on `pack --max-side` shards reach the accuracy of the originals?

    bench/preresize_train.py [--train 6000] [--test 2000] [--up 112] [--max-side 64]
                             [--size 56] [--epochs 3] [--seeds 0,1,2]
                             [--work bench/data/preresize_train] [--chute build/chute]

Fashion-MNIST (real photographs of clothes, Debian's dataset-fashion-mnist)
is 28x28; so that pre-resizing has something to remove, each image is first
upscaled to --up pixels (Pillow BICUBIC) and stored as a quality-95 JPEG:
those are "the originals".  The train and test trees are packed as they are
and with --max-side M (default 64 for 112: the ratio of 256 to ImageNet's
typical 400), and a small CNN is trained with chute's train transform
(RandomResizedCrop(--size, scale 0.35..1) + flip) on each, for each seed,
then evaluated with the eval transform on both test sets.  Prints per-seed
accuracies, mean and spread (max - min, and the standard deviation), and
writes them under --work.  Sized for a few minutes on 2 cores.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
for cand in (os.path.join(ROOT, "python"), os.path.join(ROOT, "build-python", "lib-test")):
    if glob.glob(os.path.join(cand, "chute", "_chute*.so")):
        sys.path.insert(0, cand)
        break


def upscale_tree(src, dst, up):
    from PIL import Image
    if os.path.exists(os.path.join(dst, ".done")):
        return
    for path in sorted(glob.glob(os.path.join(src, "*", "*.png"))):
        rel = os.path.relpath(path, src)
        out = os.path.join(dst, os.path.splitext(rel)[0] + ".jpg")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        Image.open(path).convert("RGB").resize((up, up), Image.BICUBIC).save(out, quality=95)
    open(os.path.join(dst, ".done"), "w").close()


def model(nclasses):
    import torch.nn as nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
                             nn.ReLU(inplace=True), nn.MaxPool2d(2))
    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(64, nclasses))


def accuracy(chute, net, src, size, torch):
    net.eval()
    right = total = 0
    with torch.no_grad(), chute.Loader(src, batch_size=256, transform="eval", size=size,
                                       shuffle=False, workers=2) as ld:
        for x, y in ld:
            right += int((net(x).argmax(1) == y).sum())
            total += len(y)
    return right / total


def train_one(chute, torch, src, size, epochs, seed, nclasses):
    torch.manual_seed(seed)
    net = model(nclasses)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    ld = chute.Loader(src, batch_size=128, transform="train", size=size, scale=(0.35, 1.0),
                      seed=seed, workers=2, drop_last=True)
    steps = epochs * len(ld)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
    with ld:
        for ep in range(epochs):
            ld.set_epoch(ep)
            net.train()
            for x, y in ld:
                loss = torch.nn.functional.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
    return net


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=6000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--up", type=int, default=112)
    ap.add_argument("--max-side", type=int, default=64)
    ap.add_argument("--size", type=int, default=56)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--work", default=os.path.join(ROOT, "bench", "data", "preresize_train"))
    ap.add_argument("--chute", default=os.path.join(ROOT, "build", "chute"))
    a = ap.parse_args()
    import chute
    import torch
    torch.set_num_threads(a.threads)
    os.makedirs(a.work, exist_ok=True)
    fm = os.path.join(a.work, "fm28")
    if not os.path.isdir(os.path.join(fm, "test")):
        subprocess.run([sys.executable, os.path.join(ROOT, "python", "tools",
                                                     "fashion_mnist_to_folder.py"), fm,
                        "--train", str(a.train), "--test", str(a.test)], check=True)
    orig = os.path.join(a.work, "orig%d" % a.up)
    for split in ("train", "test"):
        upscale_tree(os.path.join(fm, split), os.path.join(orig, split), a.up)
    ds = {}
    for split in ("train", "test"):
        for name, opts in (("full", []), ("ms", ["--max-side", str(a.max_side)])):
            out = os.path.join(a.work, "%s_%s" % (name, split))
            subprocess.run([a.chute, "pack", os.path.join(orig, split), out] + opts, check=True,
                           stdout=subprocess.DEVNULL)
            ds[name, split] = out
    nclasses = len(os.listdir(os.path.join(orig, "train")))
    results = {"full": [], "ms": []}
    for seed in [int(s) for s in a.seeds.split(",")]:
        for name in ("full", "ms"):
            t0 = time.time()
            net = train_one(chute, torch, ds[name, "train"], a.size, a.epochs, seed, nclasses)
            acc = {t: accuracy(chute, net, ds[t, "test"], a.size, torch) for t in ("full", "ms")}
            results[name].append(acc)
            print("seed %d trained on %-4s: test acc %.4f (original test set) %.4f (pre-resized "
                  "test set)  %.0f s" % (seed, name, acc["full"], acc["ms"], time.time() - t0),
                  flush=True)
    lines = ["Fashion-MNIST upscaled to %d px (%d train / %d test), --max-side %d, size %d, "
             "%d epochs, seeds %s" % (a.up, a.train, a.test, a.max_side, a.size, a.epochs,
                                      a.seeds), "",
             "| trained on | evaluated on | mean acc | std | spread (max-min) | per seed |",
             "|---|---|---:|---:|---:|---|"]
    for name in ("full", "ms"):
        for t in ("full", "ms"):
            v = [r[t] for r in results[name]]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            lines.append("| %s | %s | %.4f | %.4f | %.4f | %s |" % (
                "originals" if name == "full" else "--max-side %d" % a.max_side,
                "originals" if t == "full" else "--max-side %d" % a.max_side,
                statistics.mean(v), sd, max(v) - min(v), " ".join("%.4f" % x for x in v)))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.work, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
