#!/usr/bin/env python3
"""The issue-25 recipes through chute and through torchvision v2 + DataLoader.

Alternating rounds (so drift on a shared machine hits every side alike) of:
  chute bench SOURCE                    plain RandomResizedCrop + flip
  chute bench SOURCE --augment SPEC     each recipe below
  bench/torch_baseline.py SOURCE        the same recipes in torchvision v2
                                        (--python: a venv with current torch)
all at --size, --workers, --batch-size, --epochs alike.  Prints, per
configuration, the median images/s, CPU ms/image (user + system of the
process and its workers over the timed region), the ratio to the same
system's plain RRC + flip, and chute / torchvision for the same recipe.

    python3 bench/augment_recipe.py --python /work/wt10/augment/build-tv/bin/python \\
        [--chute build/chute] [--rounds 3] SOURCE
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# (label, chute augment string, torch_baseline flags)
RECIPES = [
    ("RRC + flip", "", []),
    ("+ TrivialAugmentWide + RandomErasing 0.1", "trivialaugment,erasing=0.1",
     ["--policy", "trivialaugment", "--erasing", "0.1"]),
    ("+ RandAugment(2, 9) + RandomErasing 0.1", "randaugment=2:9,erasing=0.1",
     ["--policy", "randaugment", "--erasing", "0.1"]),
    ("+ AutoAugment(ImageNet)", "autoaugment", ["--policy", "autoaugment"]),
]


def run_chute(a, spec):
    cmd = [a.chute, "bench", a.source, "--json", "--size", str(a.size), "--workers",
           str(a.workers), "--batch-size", str(a.batch_size), "--epochs", str(a.epochs)]
    if spec:
        cmd += ["--augment", spec]
    d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return d["images_per_sec"], 1000.0 * d["cpu_seconds"] / d["images"]


def run_torch(a, flags):
    cmd = [a.python, os.path.join(HERE, "torch_baseline.py"), a.source, "--v2", "--size",
           str(a.size), "--workers", str(a.workers), "--batch-size", str(a.batch_size),
           "--epochs", str(a.epochs)] + flags
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    d = json.loads(out.strip().split("\n")[-1])
    return d["images_per_sec"], 1000.0 * d["cpu_seconds"] / d["images"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute", default="build/chute")
    ap.add_argument("--python", required=True, help="python with torch + torchvision (v2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=176)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("source")
    a = ap.parse_args()
    res = {}
    for _ in range(a.rounds):
        for label, spec, flags in RECIPES:
            res.setdefault(("chute", label), []).append(run_chute(a, spec))
            res.setdefault(("torchvision", label), []).append(run_torch(a, flags))
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
           for k, v in res.items()}
    print("| recipe | chute images/s | chute CPU ms/image | chute / its plain | "
          "torchvision images/s | torchvision CPU ms/image | torchvision / its plain | "
          "chute / torchvision |")
    print("|---|---|---|---|---|---|---|---|")
    base_c, base_t = med[("chute", RECIPES[0][0])][0], med[("torchvision", RECIPES[0][0])][0]
    for label, _, _ in RECIPES:
        c, t = med[("chute", label)], med[("torchvision", label)]
        print("| %s | %.0f | %.3f | %.3f | %.0f | %.3f | %.3f | %.2fx |"
              % (label, c[0], c[1], c[0] / base_c, t[0], t[1], t[0] / base_t, c[0] / t[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
