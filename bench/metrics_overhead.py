"""What the Prometheus export costs a training loop (issue 27; docs/METRICS.md).

Alternating runs of the same chute.Loader loop over the same data, in the
same process: "off" (no export) and "on" (metrics_port, scraped every
second by a separate scraper process, as Prometheus would, plus
metrics_file written every second).  Each run iterates batches for a
fixed time and counts samples; the result is images/s per run, the
median per mode and the ratio on/off.  Alternating (off, on, off, on, ...)
spreads drift of a shared machine over both modes.

    /usr/bin/python3 bench/metrics_overhead.py DATASET [--rounds 5] [--seconds 4]

DATASET: any chute dataset (a shard directory or an ImageFolder tree), e.g.
build/tests/data/shards after `ctest -R data_setup`.  Needs the extension
built (tests/python/conftest.py builds it into build-python/).
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "build-python", "lib-test"))

import chute  # noqa: E402

SCRAPER = r"""
import sys, time, urllib.request
url, n, t_end = sys.argv[1], 0, time.time() + float(sys.argv[2])
while time.time() < t_end:
    t0 = time.time()
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            r.read()
        n += 1
    except OSError:
        pass
    time.sleep(max(0.0, 1.0 - (time.time() - t0)))
print(n)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(data, seconds, on, tmp, args):
    kw = dict(batch_size=args.batch_size, size=args.size, workers=args.workers)
    scraper = None
    if on:
        port = free_port()
        kw.update(metrics_port=port, metrics_file=os.path.join(tmp, "chute.prom"))
    with chute.Loader(data, **kw) as ld:
        if on:
            scraper = subprocess.Popen([sys.executable, "-c", SCRAPER,
                                        "http://127.0.0.1:%d/metrics" % port,
                                        str(seconds + 1)],
                                       stdout=subprocess.PIPE, text=True)
        for b in ld:  # warm-up: one batch
            break
        n, t0, c0 = 0, time.perf_counter(), cpu_s()
        while time.perf_counter() - t0 < seconds:
            for b in ld:
                n += b[1].shape[0]
                if time.perf_counter() - t0 >= seconds:
                    break
        dt, dc = time.perf_counter() - t0, cpu_s() - c0
    scrapes = int(scraper.communicate()[0].strip() or 0) if scraper else 0
    return n / dt, dc / n * 1e6, scrapes


def cpu_s():
    """This process's CPU time (all threads: workers, the exporter)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def scrape_cost(data, args, n=300):
    """Client-side time of n back-to-back scrapes of a loader that is
    iterating: what one scrape costs the process (the responder renders on
    its own thread).  At one scrape a second the share of a core is
    ms_per_scrape / 1000.  Less noisy on a shared machine than images/s."""
    import threading
    import urllib.request
    port = free_port()
    with chute.Loader(data, batch_size=args.batch_size, size=args.size, workers=args.workers,
                      metrics_port=port) as ld:
        stop = threading.Event()

        def loop():
            while not stop.is_set():
                for _ in ld:
                    if stop.is_set():
                        break
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        url = "http://127.0.0.1:%d/metrics" % port
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=5) as r:
                body = r.read()
            times.append(time.perf_counter() - t0)
        stop.set()
        t.join(timeout=10)
    return statistics.median(times) * 1e3, len(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    ms, size = scrape_cost(args.data, args)
    print("one scrape (client round trip, median of 300): %.3f ms, %d bytes; at 1 scrape/s "
          "that is %.4f%% of one core" % (ms, size, ms / 10), flush=True)
    rates = {False: [], True: []}
    cpus = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for on in (False, True):
                rate, cpu_us, scrapes = run(args.data, args.seconds, on, tmp, args)
                rates[on].append(rate)
                cpus[on].append(cpu_us)
                print("round %d %-3s %8.1f images/s %7.1f CPU-us/image%s" % (
                    r, "on" if on else "off", rate, cpu_us,
                    "  (%d scrapes)" % scrapes if on else ""), flush=True)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print("\n| mode | images/s (median of %d) | runs |" % args.rounds)
    print("|---|---|---|")
    print("| off | %.1f | %s |" % (off, ", ".join("%.0f" % x for x in rates[False])))
    print("| on (scraped 1/s + textfile) | %.1f | %s |"
          % (on, ", ".join("%.0f" % x for x in rates[True])))
    pairs = [b / a for a, b in zip(rates[False], rates[True])]
    con, coff = statistics.median(cpus[True]), statistics.median(cpus[False])
    print("\nCPU time per image (all threads; less sensitive to other load than images/s): "
          "off %.1f us, on %.1f us, on/off %.4f (%+.2f%%)" % (coff, con, con / coff,
                                                           (con / coff - 1) * 100))
    print("on/off of the medians = %.4f (%+.2f%%)" % (on / off, (on / off - 1) * 100))
    print("on/off per round (each on run over the off run just before it): %s; median %.4f"
          % (", ".join("%.3f" % x for x in pairs), statistics.median(pairs)))


if __name__ == "__main__":
    main()
