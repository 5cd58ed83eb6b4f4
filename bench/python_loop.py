#!/usr/bin/env python3
"""Throughput of the Python loop over chute.Loader, for comparison with the CLI.

    python3 bench/python_loop.py SOURCE [--size 224 --batch-size 256 ...]
    python3 bench/python_loop.py SOURCE --compare build/chute --repeat 5

Takes the options of `chute bench` (same names and defaults) and measures the
same thing: images per second from the first batch request to the end, with
the loader already created.  The loop is the one a training script runs:
`for images, labels in loader` with tensors made through DLPack (--as torch,
the default when torch is importable), chute.Array objects viewed by NumPy
(--as numpy), or raw Batch objects (--as raw).

With --compare CLI it alternates runs of `CLI bench SOURCE --json` and of the
Python loop (--repeat times each, so drift on a busy machine hits both alike)
and prints the median images/s of each and their ratio (Python / CLI), and
the same for CPU seconds per 1000 images, which other load on the machine
barely disturbs.
"""
import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
HERE = os.path.abspath(HERE)
if glob.glob(os.path.join(HERE, "chute", "_chute*.so")):
    sys.path.insert(0, HERE)  # the checkout's package, built in place, first
else:  # python/chute without its extension would shadow an installed chute
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]


def import_chute():
    try:
        import chute
    except ImportError as e:
        sys.exit("python_loop.py: cannot import chute (%s). Run `pip install .` or "
                 "`python3 setup.py build_ext --inplace` at the repository root." % e)
    return chute


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("--transform", default="train", choices=["train", "eval", "none"])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-batches", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "uint8", "float16"])
    ap.add_argument("--no-dct-scale", action="store_true")
    ap.add_argument("--as", dest="output", default=None, choices=["torch", "numpy", "raw"],
                    help="what the loop receives (default: torch if importable, else numpy)")
    ap.add_argument("--compare", metavar="CLI", help="also run `CLI bench` and print the ratio")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each with --compare")
    ap.add_argument("--json", action="store_true", help="print JSON")
    return ap.parse_args(argv)


def cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_python(a):
    chute = import_chute()
    output = a.output
    if output is None:
        try:
            import torch  # noqa: F401

            output = "torch"
        except ImportError:
            output = "numpy"
    if output == "numpy":
        import numpy as np
    ld = chute.Loader(a.source, batch_size=a.batch_size, transform=a.transform, size=a.size,
                      workers=a.workers, prefetch=a.prefetch, seed=a.seed, dtype=a.dtype,
                      dct_scale=not a.no_dct_scale, drop_last=False,
                      as_torch=output == "torch")
    images = batches = 0
    c0, t0 = cpu_s(), time.perf_counter()
    done = False
    for epoch in range(a.epochs):
        ld.set_epoch(epoch)
        if output == "raw":
            while True:
                if a.max_batches and batches >= a.max_batches:
                    done = True
                    break
                b = ld.next_batch()
                if b is None:
                    break
                images += b.count
                batches += 1
        else:
            for x, y in ld:
                if output == "numpy":
                    x, y = np.asarray(x), np.asarray(y)
                images += y.shape[0]
                batches += 1
                if a.max_batches and batches >= a.max_batches:
                    done = True
                    break
        if done:
            break
    secs = time.perf_counter() - t0
    cpu = cpu_s() - c0
    s = ld.stats()
    ld.close()
    return {"system": "chute-python", "output": output, "images": images, "batches": batches,
            "seconds": round(secs, 4), "images_per_sec": round(images / secs, 2) if secs else 0,
            "workers": s["workers"], "batch_size": a.batch_size, "wait_seconds": round(s["wait_s"], 4),
            "cpu_seconds": round(cpu, 3),
            "cpu_seconds_per_1k": round(cpu / images * 1000, 4) if images else 0,
            "copied_batches": s["copied_batches"],
            "corrupt": s["corrupt"]}


def cli_args(a):
    args = [a.source, "--json", "--quiet", "--transform", a.transform, "--size", str(a.size),
            "--batch-size", str(a.batch_size), "--prefetch", str(a.prefetch), "--epochs",
            str(a.epochs), "--seed", str(a.seed), "--dtype", a.dtype]
    if a.workers:
        args += ["--workers", str(a.workers)]
    if a.max_batches:
        args += ["--max-batches", str(a.max_batches)]
    if a.no_dct_scale:
        args.append("--no-dct-scale")
    return args


def run_cli(cli, a):
    r = subprocess.run([cli, "bench"] + cli_args(a), capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    a = parse(argv)
    if not a.compare:
        r = run_python(a)
        if a.json:
            print(json.dumps(r))
        else:
            print("%s (python loop, %s): %d images in %.2f s = %.1f images/s, %d workers, "
                  "waited %.2f s, copied %d batches"
                  % (a.source, r["output"], r["images"], r["seconds"], r["images_per_sec"],
                     r["workers"], r["wait_seconds"], r["copied_batches"]))
        return 0
    cli_runs, py_runs = [], []
    for i in range(a.repeat):
        cli_runs.append(run_cli(a.compare, a))
        py_runs.append(run_python(a))
        if not a.json:
            print("run %d: cli %.1f images/s, python %.1f images/s"
                  % (i + 1, cli_runs[-1]["images_per_sec"], py_runs[-1]["images_per_sec"]),
                  file=sys.stderr)
    cli_med = statistics.median(r["images_per_sec"] for r in cli_runs)
    py_med = statistics.median(r["images_per_sec"] for r in py_runs)
    # CPU seconds per 1000 images (all threads): barely moved by other load
    # on the machine, so it shows the Python loop's own cost more reliably.
    cli_cpu = statistics.median(r["cpu_seconds_per_1k"] for r in cli_runs)
    py_cpu = statistics.median(r["cpu_seconds_per_1k"] for r in py_runs)
    if cli_runs[0]["images"] != py_runs[0]["images"]:
        print("warning: the CLI delivered %d images, the Python loop %d"
              % (cli_runs[0]["images"], py_runs[0]["images"]), file=sys.stderr)
    result = {"source": a.source, "repeat": a.repeat, "output": py_runs[0]["output"],
              "cli_images_per_sec": cli_med, "python_images_per_sec": py_med,
              "ratio": round(py_med / cli_med, 4) if cli_med else None,
              "cli_cpu_seconds_per_1k": cli_cpu, "python_cpu_seconds_per_1k": py_cpu,
              "cpu_ratio": round(py_cpu / cli_cpu, 4) if cli_cpu else None,
              "cli_runs": [r["images_per_sec"] for r in cli_runs],
              "python_runs": [r["images_per_sec"] for r in py_runs]}
    if a.json:
        print(json.dumps(result))
    else:
        print("median over %d runs: CLI %.1f images/s, Python loop (%s) %.1f images/s, "
              "ratio %.3f; CPU s per 1000 images: CLI %.3f, Python %.3f, ratio %.3f"
              % (a.repeat, cli_med, result["output"], py_med, result["ratio"], cli_cpu, py_cpu,
                 result["cpu_ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
