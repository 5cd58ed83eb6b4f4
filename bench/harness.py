"""harness.py — what the breadth benches (tensors.py, audio.py, parquet.py)
share: the epoch timer, the chute and DataLoader iterators they time, the
common flags and the results table.

Why one module: each bench had its own copy of these, and copies drift — a
timer counting a batch differently in one script would make its ratios
incomparable with the others'.  Every bench that compares chute with "the
DataLoader way" times both sides with the same `timed`, over the same
epochs, after the same warm-up epoch.
"""
import os
import time


def timed(make_iter, epochs):
    """(samples/s over the timed epochs, first epoch's seconds).

    make_iter(e) gives the iterable of epoch e; epoch 0 is the warm-up (its
    seconds are returned apart), epochs 1..epochs are timed.  A batch is a
    list/tuple whose first item has one row per sample (DataLoader, chute's
    (images, labels)), or a mapping with "labels" (chute's typed fields).
    """
    rates, first = [], None
    for e in range(epochs + 1):
        t0 = time.perf_counter()
        n = 0
        for b in make_iter(e):
            n += len(b[0]) if isinstance(b, (list, tuple)) else len(b["labels"])
        dt = time.perf_counter() - t0
        if e == 0:
            first = dt
        else:
            rates.append(n / dt)
    return sum(rates) / len(rates), first


def chute_epochs(ld):
    """make_iter for timed: the chute.Loader ld, set to epoch e."""
    def it(e):
        ld.set_epoch(e)
        return ld
    return it


def data_loader(ds, a):
    """torch's DataLoader as the benches run it: shuffled, a.workers persistent workers."""
    from torch.utils.data import DataLoader

    return DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                      persistent_workers=a.workers > 0)


def add_common_args(ap, batch_size, tiny_help):
    """--batch-size, --workers (default: the CPUs this process may use), --epochs, --tiny."""
    ap.add_argument("--batch-size", type=int, default=batch_size)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help=tiny_help)


def print_rows(rows):
    """Markdown table of (workload, loader, samples/s, first epoch s); the
    first row of each workload (chute) is the reference of its ratios."""
    print("\n| workload | loader | samples/s | first epoch s | chute / this |")
    print("|---|---|---:|---:|---:|")
    ref = {}
    for w, name, rate, first in rows:
        ref.setdefault(w, rate)
        print("| %s | %s | %.0f | %.2f | %.2fx |" % (w, name, rate, first, ref[w] / rate))
