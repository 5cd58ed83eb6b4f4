#!/usr/bin/env python3
"""Option geometry (issue 24) against torchvision.transforms.v2 + DataLoader.

For each pipeline, alternately ROUNDS times (drift on a shared machine hits
both sides alike): `chute bench SOURCE --json --geometry SPEC` and the same
steps as a torchvision v2 Compose in a DataLoader with the same worker
count, batch size and output (float32 NCHW, normalized), run by a Python
with current torch/torchvision (--tv-python; Debian's 1.13/0.14 has no v2).
Images only (targets are not in the loader yet).  Prints median images/s
per side and their ratio.

    python3 bench/geometry_vs_torchvision.py --tv-python VENV/bin/python \\
        [--chute build/chute] [--workers 2] [--rounds 3] [--epochs 2] TREE
"""
import argparse
import json
import statistics
import subprocess
import sys

# (name, chute geometry string, output size, torchvision v2 steps as code)
PIPES = [
    ("detection LSJ 512", "lsj=0.1:2,crop,hflip", 512,
     "[T.ScaleJitter((512, 512), (0.1, 2.0)), T.RandomCrop(512, pad_if_needed=True), "
     "T.RandomHorizontalFlip()]"),
    ("segmentation 0.5-2 crop 512", "lsj=0.5:2,crop,hflip", 512,
     "[T.ScaleJitter((512, 512), (0.5, 2.0)), T.RandomCrop(512, pad_if_needed=True), "
     "T.RandomHorizontalFlip()]"),
    ("rrc + flip + rotate 224", "rrc,hflip,rotate=15", 224,
     "[T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip(), "
     "T.RandomRotation(15)]"),
]

TV = r'''
import sys, time, torch
from torchvision import datasets, tv_tensors
from torchvision.io import ImageReadMode, decode_image, read_file
from torchvision.transforms import v2 as T
root, workers, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
steps = eval(sys.argv[5])
tf = T.Compose([T.ToImage()] + steps + [T.ToDtype(torch.float32, scale=True),
               T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = datasets.ImageFolder(root, transform=tf, loader=lambda p: decode_image(read_file(p),
                                                                  mode=ImageReadMode.RGB))
dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                 persistent_workers=False)
n, t0 = 0, time.time()
for _ in range(epochs):
    for x, y in dl:
        n += x.shape[0]
print(n / (time.time() - t0))
'''


def chute_ips(a, spec, size):
    cmd = [a.chute, "bench", a.source, "--json", "--geometry", spec, "--size", str(size),
           "--workers", str(a.workers), "--batch-size", str(a.batch), "--epochs", str(a.epochs)]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)[
        "images_per_sec"]


def tv_ips(a, steps):
    out = subprocess.run([a.tv_python, "-c", TV, a.source, str(a.workers), str(a.batch),
                          str(a.epochs), steps], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().split()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute", default="build/chute")
    ap.add_argument("--tv-python", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("source")
    a = ap.parse_args()
    print("| pipeline | chute images/s | torchvision v2 + DataLoader images/s | ratio |")
    print("|---|---|---|---|")
    for name, spec, size, steps in PIPES:
        c, t = [], []
        for _ in range(a.rounds):
            c.append(chute_ips(a, spec, size))
            t.append(tv_ips(a, steps))
        mc, mt = statistics.median(c), statistics.median(t)
        print("| %s (`%s`) | %.1f | %.1f | %.2f |" % (name, spec, mc, mt, mc / mt), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
