#!/usr/bin/env python3
"""The cost of options mixup / cutmix / repeats (issue 25) against the plain
train pass, and torchvision v2's MixUp / CutMix on a batch of the same
shape, measured in the same run.

Runs `chute bench SOURCE --json` alternately without and with each option
set, ROUNDS times (alternating, so drift on a shared machine hits every
side alike), and prints per configuration the median images/s and its
ratio to the plain run.  Then, when torch and torchvision (v2) import in
PYTHON (default: this interpreter), times torchvision's MixUp(0.2) and
CutMix(1.0) on a float32 batch of --batch-size x 3 x --size x --size (one
thread, as the one chute worker that mixes a batch) and prints ms per batch
and per image beside chute's CPU ms per image and transform-stage ms per
image (resample + mixing, busy time summed over workers) from the runs
above.

    python3 bench/mix_overhead.py [--chute build/chute] [--rounds 5] [--python PY] SOURCE [bench flags]
"""
import argparse
import json
import statistics
import subprocess
import sys

CONFIGS = [
    [],
    ["--mixup", "0.2"],
    ["--cutmix", "1.0"],
    ["--mixup", "0.2", "--cutmix", "1.0"],
    ["--repeats", "3"],
]

PEER = r"""
import sys, time, torch
from torchvision.transforms import v2
torch.set_num_threads(1)
B, S = int(sys.argv[1]), int(sys.argv[2])
x = torch.randn(B, 3, S, S)
y = torch.randint(0, 1000, (B,))
for name, t in (("MixUp(0.2)", v2.MixUp(alpha=0.2, num_classes=1000)),
                ("CutMix(1.0)", v2.CutMix(alpha=1.0, num_classes=1000))):
    t(x, y)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter(); t(x, y); ts.append(time.perf_counter() - t0)
    ts.sort()
    print("%s %.3f" % (name, 1000 * ts[2]))
"""


def run(chute, source, extra, cfg):
    cmd = [chute, "bench", source, "--json"] + extra + cfg
    d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    n = max(d["images"], 1)
    return (d["images_per_sec"], 1000.0 * d["cpu_seconds"] / n,
            1000.0 * d["transform_busy_s"] / n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute", default="build/chute")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("source")
    args, extra = ap.parse_known_args()
    extra = extra or ["--epochs", "2", "--size", "224", "--batch-size", "64"]
    res = {i: [] for i in range(len(CONFIGS))}
    for _ in range(args.rounds):
        for i, cfg in enumerate(CONFIGS):
            res[i].append(run(args.chute, args.source, extra, cfg))
    base = statistics.median(r[0] for r in res[0])
    print("| options | median images/s | / plain | CPU ms/image | transform ms/image |")
    print("|---|---|---|---|---|")
    for i, cfg in enumerate(CONFIGS):
        ips, cpu, tr = (statistics.median(r[j] for r in res[i]) for j in range(3))
        print("| %s | %.1f | %.3f | %.3f | %.3f |" % ("`%s`" % " ".join(cfg) if cfg else "(none)",
                                                    ips, ips / base, cpu, tr))
    size = extra[extra.index("--size") + 1] if "--size" in extra else "224"
    batch = extra[extra.index("--batch-size") + 1] if "--batch-size" in extra else "256"
    p = subprocess.run([args.python, "-c", PEER, batch, size], capture_output=True, text=True)
    if p.returncode != 0:
        print("torchvision v2 not available in %s: peer not measured" % args.python)
        return 0
    print("\n| torchvision v2, one thread, %s x 3 x %s^2 float32 | ms / batch | ms / image |"
          % (batch, size))
    print("|---|---|---|")
    for line in p.stdout.strip().split("\n"):
        name, ms = line.split()
        print("| %s | %s | %.3f |" % (name, ms, float(ms) / int(batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
