"""chute_testlib — shared plumbing for chute's integration tests.

Every test script is run by ctest as

    python3 tests/test_X.py --chute BIN --dump BIN --dsinfo BIN --data DIR
                            --tools DIR --work DIR [CASE ...]

and uses `main(cases)` below: CASE names pick functions from the script's
`cases` dict.  A case calls `check(cond, msg)` for each expectation (all of
them are evaluated and reported, not just the first), or raises `Skip` when
it cannot run here (missing Python module, no fixture data): the script then
exits 77, which ctest reports as skipped.

`run()` runs a chute binary and also fails the test if its stderr shows a
crash or a sanitizer report, whatever the exit status was expected to be:
"fails cleanly" must never be satisfied by a segfault.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
import traceback

SKIP_CODE = 77

CRASH_MARKERS = (
    "Segmentation fault", "AddressSanitizer", "LeakSanitizer", "ThreadSanitizer",
    "UndefinedBehaviorSanitizer", "runtime error:", "Aborted", "core dumped",
    "stack smashing", "double free", "free(): ", "malloc(): ",
)


class Skip(Exception):
    pass


class Ctx:
    def __init__(self, args):
        self.chute = args.chute
        self.dump = args.dump
        self.dsinfo = args.dsinfo
        self.data = args.data
        self.tools = args.tools
        self.work = args.work
        self.failures = []
        self.tree = os.path.join(self.data, "tree") if self.data else None
        self.shards = os.path.join(self.data, "shards") if self.data else None

    # ---- expectations ----
    def check(self, cond, msg):
        if not cond:
            self.failures.append(msg)
            print("FAIL: " + msg, file=sys.stderr, flush=True)
        return bool(cond)

    def note(self, msg):
        print(msg, file=sys.stderr, flush=True)

    # ---- environment ----
    def need_data(self):
        if not self.data or not os.path.exists(os.path.join(self.data, "READY")):
            raise Skip("fixture data missing (the data_setup test did not produce %s/READY)" % self.data)

    def need_modules(self, *names):
        import importlib
        for n in names:
            try:
                importlib.import_module(n)
            except Exception as e:  # ImportError, or a broken install
                raise Skip("python module %s unavailable: %s" % (n, e))

    def scratch(self, name):
        d = os.path.join(self.work, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    # ---- running binaries ----
    def run(self, cmd, expect=0, timeout=None, what=None, **kw):
        """Run cmd; check its exit status (expect: int, 'nonzero', or None)
        and that it did not crash or hang (CHUTE_TEST_RUN_TIMEOUT seconds,
        default 60).  Returns the CompletedProcess."""
        if timeout is None:
            timeout = int(os.environ.get("CHUTE_TEST_RUN_TIMEOUT", "60"))
        what = what or " ".join(os.path.basename(str(c)) if i == 0 else str(c)
                                for i, c in enumerate(cmd))
        try:
            p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=timeout, **kw)
        except subprocess.TimeoutExpired as e:
            self.check(False, "%s: still running after %d s (hang or deadlock?); killed" % (what, timeout))
            p = subprocess.CompletedProcess(cmd, -999, e.stdout or b"", e.stderr or b"")
            p.out = p.stdout.decode("utf-8", "replace")
            p.err = p.stderr.decode("utf-8", "replace")
            return p
        p.out = p.stdout.decode("utf-8", "replace")
        p.err = p.stderr.decode("utf-8", "replace")
        self.no_crash(p, what)
        if expect == "nonzero":
            self.check(p.returncode > 0,
                       "%s: exit status %d, expected a clean failure (>0)\nstderr: %s"
                       % (what, p.returncode, p.err[-2000:]))
        elif expect is not None:
            self.check(p.returncode == expect, "%s: exit status %d, expected %d\nstdout: %s\nstderr: %s"
                       % (what, p.returncode, expect, p.out[-1500:], p.err[-3000:]))
        return p

    def no_crash(self, p, what):
        if p.returncode < 0:
            self.check(False, "%s: killed by signal %d\nstderr: %s"
                       % (what, -p.returncode, p.err[-3000:]))
        for m in CRASH_MARKERS:
            if m in p.err:
                self.check(False, "%s: crash/sanitizer output (%r):\n%s" % (what, m, p.err[-6000:]))
                break

    def dump_run(self, source, out, *opts, expect=0, what=None):
        return self.run([self.dump, source, out] + [str(o) for o in opts], expect=expect, what=what)

    # ---- reading outputs ----
    def read_dump(self, path, size, dtype="uint8"):
        """Records of a dump file as numpy arrays: idx (u8), label (i8),
        data (N x sample elements of dtype)."""
        import numpy as np
        esz = {"uint8": 1, "float16": 2, "float32": 4}[dtype]
        nbytes = size * size * 3 * esz
        rec = np.dtype([("idx", "<u8"), ("label", "<i8"), ("data", "u1", (nbytes,))])
        raw = np.fromfile(path, dtype=np.uint8)
        self.check(raw.size % rec.itemsize == 0,
                   "%s: %d bytes is not a whole number of %d-byte records" % (path, raw.size, rec.itemsize))
        r = raw[: raw.size - raw.size % rec.itemsize].view(rec)
        data = r["data"].copy().view({"uint8": np.uint8, "float16": "<f2", "float32": "<f4"}[dtype])
        return r["idx"].copy(), r["label"].copy(), data

    def dsinfo_run(self, source, *opts, expect=0):
        p = self.run([self.dsinfo, source] + list(opts), expect=expect)
        info = {"classes": [], "samples": []}
        for line in p.out.splitlines():
            if line.startswith("n="):
                kv = dict(x.split("=", 1) for x in line.split())
                info["n"] = int(kv["n"])
                info["kind"] = kv["kind"]
            elif line.startswith("class "):
                _, lab, name = line.split(" ", 2)
                info["classes"].append(name)
            elif line.startswith("sample "):
                _, i, lab, size, where = line.split(" ", 4)
                info["samples"].append((int(i), int(lab), int(size), where))
        info["proc"] = p
        return info

    @staticmethod
    def read_len_prefixed(path):
        import struct
        out = []
        with open(path, "rb") as f:
            while True:
                h = f.read(8)
                if not h:
                    break
                (n,) = struct.unpack("<Q", h)
                out.append(f.read(n))
        return out


def remote_harness():
    """tests/test_remote.py (SeaweedFS `weed mini`, the fault proxy, the
    upload helpers) loaded as a module, from whatever directory a test
    runs in (it is a ctest script, not a package module)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "_chute_remote_harness",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_remote.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def parse_counts(text):
    """'samples=N batches=B corrupt=C' -> dict of ints."""
    out = {}
    for tok in text.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            try:
                out[k] = int(v)
            except ValueError:
                pass
    return out


def link_tree(src, dst, select=None):
    """Copy an image tree as hard links (falling back to copies).
    select(relpath) -> bool picks files; returns the relative paths linked."""
    done = []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for f in sorted(files):
            s = os.path.join(root, f)
            rel = os.path.relpath(s, src)
            if select and not select(rel):
                continue
            d = os.path.join(dst, rel)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            try:
                os.link(s, d)
            except OSError:
                shutil.copy2(s, d)
            done.append(rel)
    return done


def tree_rows(root):
    """([(encoded bytes, label)], class names) of an ImageFolder tree, in
    ImageFolder order (classes and files sorted): the rows a conversion test
    feeds to an engine."""
    classes = sorted(os.listdir(root))
    rows = []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            with open(os.path.join(root, cls, name), "rb") as f:
                rows.append((f.read(), label))
    return rows, classes


def imagefolder_samples(root):
    """torchvision.datasets.ImageFolder's (classes, samples) for root."""
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(root)
    return ds.classes, ds.samples


def main(cases, argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--chute")
    ap.add_argument("--dump")
    ap.add_argument("--dsinfo")
    ap.add_argument("--data")
    ap.add_argument("--tools")
    ap.add_argument("--work", default="/tmp/chute-test-work")
    ap.add_argument("case", nargs="*")
    args = ap.parse_args(argv)
    ctx = Ctx(args)
    names = args.case or list(cases)
    for n in names:
        if n not in cases:
            print("unknown case %s (have: %s)" % (n, ", ".join(cases)), file=sys.stderr)
            return 2
    os.makedirs(ctx.work, exist_ok=True)
    skipped = []
    for n in names:
        t0 = time.time()
        before = len(ctx.failures)
        try:
            cases[n](ctx)
        except Skip as e:
            print("[skip] %s: %s" % (n, e), file=sys.stderr)
            skipped.append(n)
            continue
        except Exception:
            ctx.check(False, "%s raised:\n%s" % (n, traceback.format_exc()))
        status = "ok" if len(ctx.failures) == before else "FAIL"
        print("[%s] %s (%.1f s)" % (status, n, time.time() - t0), file=sys.stderr, flush=True)
    if ctx.failures:
        print("\n%d expectation(s) failed:" % len(ctx.failures), file=sys.stderr)
        for f in ctx.failures:
            print("  - " + f.splitlines()[0], file=sys.stderr)
        return 1
    if skipped and len(skipped) == len(names):
        return SKIP_CODE
    return 0
