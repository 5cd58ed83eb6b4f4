#!/usr/bin/env python3
"""The cost of option augment (issue 25) against the plain train pass.

Runs `chute bench SOURCE --json` alternately without and with each augment
string, ROUNDS times (alternating, so drift on a shared machine hits every
side alike), and prints per configuration the median images/s, its ratio
to the plain run, and the transform stage's busy ms per image (resample +
augmentation, summed over workers), from the same run.

    python3 bench/augment_overhead.py [--chute build/chute] [--rounds 5] SOURCE [bench flags]
"""
import argparse
import json
import statistics
import subprocess
import sys

SPECS = [
    "",
    "invert=0.5,solarize=128,posterize=4",
    "colorjitter=0.4:0.4:0.4:0.1,grayscale=0.2,erasing=0.25",
    "colorjitter=0.4:0.4:0.4:0.1,grayscale=0.2,blur=5,sharpness=2,equalize,autocontrast,erasing=0.25",
]


def run(chute, source, extra, spec):
    cmd = [chute, "bench", source, "--json"] + extra + (["--augment", spec] if spec else [])
    d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return d["images_per_sec"], 1000.0 * d["transform_busy_s"] / max(d["images"], 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute", default="build/chute")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("source")
    args, extra = ap.parse_known_args()
    extra = extra or ["--epochs", "2", "--size", "224"]
    res = {s: [] for s in SPECS}
    for _ in range(args.rounds):
        for s in SPECS:
            res[s].append(run(args.chute, args.source, extra, s))
    base = statistics.median(r[0] for r in res[""])
    print("| augment | median images/s | / plain | transform ms/image |")
    print("|---|---|---|---|")
    for s in SPECS:
        ips = statistics.median(r[0] for r in res[s])
        ms = statistics.median(r[1] for r in res[s])
        print("| %s | %.1f | %.3f | %.3f |" % ("`%s`" % s if s else "(none)", ips, ips / base, ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
