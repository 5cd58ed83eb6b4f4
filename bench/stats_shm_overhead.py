#!/usr/bin/env python3
"""The cost of `chute top`'s stats segment (stats_shm, on by default).

Runs `chute bench SOURCE --json` alternately with --stats-shm 0 and 1,
ROUNDS times each (alternating, so drift on a shared machine hits both
sides alike), and prints the median images/s of each and their ratio.
The segment's publisher wakes every 250 ms and copies ~26 counters; the
hot path does nothing new, so the ratio should be 1 within noise.

    python3 bench/stats_shm_overhead.py [--chute build/chute] [--rounds 5] SOURCE [bench flags]
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(chute, source, extra, on):
    r = subprocess.run([chute, "bench", source, "--json", "--stats-shm", "1" if on else "0"]
                       + extra, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["images_per_sec"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute", default="build/chute")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("source")
    args, extra = ap.parse_known_args()
    extra = extra or ["--epochs", "3", "--size", "64"]
    off, on = [], []
    for _ in range(args.rounds):
        off.append(run(args.chute, args.source, extra, False))
        on.append(run(args.chute, args.source, extra, True))
    m_off, m_on = statistics.median(off), statistics.median(on)
    print("| stats_shm | median images/s | runs |")
    print("|---|---|---|")
    print("| 0 (off) | %.1f | %s |" % (m_off, ", ".join("%.0f" % x for x in off)))
    print("| 1 (on, default) | %.1f | %s |" % (m_on, ", ".join("%.0f" % x for x in on)))
    print("\non / off = %.3f" % (m_on / m_off))
    return 0


if __name__ == "__main__":
    sys.exit(main())
