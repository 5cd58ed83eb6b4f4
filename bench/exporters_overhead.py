"""What every export together costs a training loop (issue 27).

Alternating runs of the same chute.Loader loop over the same data, in the
same process: "off" (tensorboard unset, no metrics, stats_shm=0: no stats
thread at all) and "on" (tensorboard at its default rate, every 100
batches; metrics_port scraped once a second by a separate process, as
Prometheus would; metrics_file written every second; stats_shm with a
`chute top --json --interval 1` reader attached for the whole run).  Each
run iterates batches for a fixed time; per run it records images/s and
this process's CPU time per image (getrusage: every thread of the loader,
the stats thread included, and not the scraper's or top's, which are other
processes).  CPU per image is the steadier figure on a shared 2-core VM:
other load stretches wall time, not the CPU this process spends per image.

    /usr/bin/python3 bench/exporters_overhead.py DATASET [--rounds 11] [--seconds 4]

DATASET: any chute dataset, e.g. build/tests/data/shards after
`ctest -R data_setup`.  The load average is printed before and after.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "build-python", "lib-test"))

import chute  # noqa: E402

# The once-a-second scraper, a free port and this process's CPU time:
# the same as metrics_overhead.py's (one copy, imported from there).
from metrics_overhead import SCRAPER, cpu_s, free_port  # noqa: E402


def chute_cli():
    for p in (os.path.join(HERE, "..", "build", "chute"),
              os.path.join(HERE, "..", "build-python", "lib-test", "chute", "bin", "chute")):
        if os.path.exists(p):
            return p
    sys.exit("no chute CLI (build/chute): build it first")


def run(data, seconds, on, tmp, args):
    kw = dict(batch_size=args.batch_size, size=args.size, workers=args.workers)
    helpers = []
    if on:
        port = free_port()
        kw.update(tensorboard=os.path.join(tmp, "tb"), metrics_port=port,
                  metrics_file=os.path.join(tmp, "chute.prom"), stats_shm=1)
    else:
        kw.update(stats_shm=0)
    with chute.Loader(data, **kw) as ld:
        if on:
            helpers.append(subprocess.Popen(
                [sys.executable, "-c", SCRAPER, "http://127.0.0.1:%d/metrics" % port,
                 str(seconds + 1)], stdout=subprocess.PIPE, text=True))
            helpers.append(subprocess.Popen(
                [chute_cli(), "top", "--json", "--interval", "1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for b in ld:  # warm-up: one batch
            break
        n, t0, c0 = 0, time.perf_counter(), cpu_s()
        while time.perf_counter() - t0 < seconds:
            for b in ld:
                n += b[1].shape[0]
                if time.perf_counter() - t0 >= seconds:
                    break
        dt, dc = time.perf_counter() - t0, cpu_s() - c0
    scrapes = 0
    if helpers:
        helpers[1].terminate()
        helpers[1].wait()
        scrapes = int(helpers[0].communicate()[0].strip() or 0)
    return n / dt, dc / n * 1e6, scrapes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    load0 = os.getloadavg()
    print("start %s UTC, load average %.2f %.2f %.2f" % (
        time.strftime("%H:%M:%S", time.gmtime()), *load0), flush=True)
    rates = {False: [], True: []}
    cpus = {False: [], True: []}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for on in (False, True):
                rate, cpu_us, scrapes = run(args.data, args.seconds, on, tmp, args)
                rates[on].append(rate)
                cpus[on].append(cpu_us)
                loads.append(os.getloadavg()[0])
                print("round %2d %-3s %8.1f images/s %7.1f CPU-us/image%s  load %.2f" % (
                    r, "on" if on else "off", rate, cpu_us,
                    "  (%d scrapes)" % scrapes if on else "", loads[-1]), flush=True)
    load1 = os.getloadavg()
    print("end %s UTC, load average %.2f %.2f %.2f; 1-min load during the runs: min %.2f, "
          "median %.2f, max %.2f" % (time.strftime("%H:%M:%S", time.gmtime()), *load1,
                                     min(loads), statistics.median(loads), max(loads)))
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    coff, con = statistics.median(cpus[False]), statistics.median(cpus[True])
    rpairs = [b / a for a, b in zip(rates[False], rates[True])]
    cpairs = [b / a for a, b in zip(cpus[False], cpus[True])]
    print("\n| mode | images/s (median of %d) | CPU us/image (median) |" % args.rounds)
    print("|---|---|---|")
    print("| all off | %.1f | %.1f |" % (off, coff))
    print("| all on | %.1f | %.1f |" % (on, con))
    print("\nimages/s on/off: of the medians %.4f (%+.2f%%); per round %s, median %.4f" % (
        on / off, (on / off - 1) * 100, ", ".join("%.3f" % x for x in rpairs),
        statistics.median(rpairs)))
    print("CPU per image on/off: of the medians %.4f (%+.2f%%); per round %s, median %.4f" % (
        con / coff, (con / coff - 1) * 100, ", ".join("%.3f" % x for x in cpairs),
        statistics.median(cpairs)))


if __name__ == "__main__":
    main()
