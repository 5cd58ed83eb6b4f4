"""`chute inspect` and `chute bench` of Parquet (and Arrow) sources.

Why this module: the C command has no Parquet reader (libchute takes Arrow
through the C Stream Interface; pyarrow is the producer), so for a Parquet
SOURCE the C CLI replaces itself with this module's :func:`main`
(cli/parquet.c).  The flags are built from the same option tables as the
C command's (src/common/loader_options.def and dataset_options.def through
``_chute.loader_options()`` / ``option_rows()``): ``--batch-size N``,
``--no-shuffle``, ``--shuffle shards``, ``--schema ...``; options the
Python package does not take (C-only rows) are refused by name.  Output
follows the C command's for image-less datasets (inspect: source, format,
samples, classes, bytes, fields with kind/dtype/shape, the histogram of
sample sizes; bench: samples/s and CPU seconds).  ``--parquet-memory-bytes``
bounds the decoded row groups held (see :mod:`chute.arrow`).
"""
import inspect as _inspect
import json
import os
import resource
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import ChuteError, _chute


def need_pyarrow() -> None:
    """ImportError naming pyarrow when it cannot be imported."""
    import pyarrow  # noqa: F401
    import pyarrow.parquet  # noqa: F401


class UsageError(Exception):
    pass


def _table() -> Dict[str, Tuple[str, str, Any]]:
    """--flag -> (Loader keyword, kind, choices|value) from the C tables."""
    out: Dict[str, Tuple[str, str, Any]] = {}
    for name, kind, _d, lo, hi, layers, _h in _chute.loader_options():
        if "cli" in layers:
            out["--" + name.replace("_", "-")] = (name if "python" in layers else "",
                                                  "int", (lo, hi))
    for row in _chute.option_rows():  # (table, field, name, kind, default, choices, layers, ...)
        field, name, kind, choices, layers = row[1], row[2], row[3], row[5], row[6]
        if "cli" not in layers:
            continue
        kw = field if "python" in layers else ""  # "": a C-only row, refused by name
        if kind == "neg":
            out["--" + name.replace("_", "-")] = (kw, "neg", None)
        elif kind == "enum":
            out["--" + name.replace("_", "-")] = (kw, "enum", choices)
        elif kind == "float":
            out["--" + name.replace("_", "-")] = (kw, "float", None)
        elif kind == "str":
            out["--" + name.replace("_", "-")] = (kw, "str", None)
        else:
            out["--" + name.replace("_", "-")] = (kw, "int", None)
    return out


_OWN = {
    "inspect": {"--json": "flag", "--verify": "flag", "--threads": "int",
                "--parquet-memory-bytes": "int"},
    "bench": {"--json": "flag", "--quiet": "flag", "--epochs": "int", "--max-batches": "int",
              "--step-ms": "int", "--parquet-memory-bytes": "int"},
}


def _parse(cmd: str, argv: Sequence[str]) -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
    table = _table()
    own: Dict[str, Any] = {}
    kw: Dict[str, Any] = {}
    src: Optional[str] = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--help", "-h"):
            raise UsageError("help")
        if not a.startswith("--") or a == "-":
            if src is not None:
                raise UsageError("one SOURCE only (got %s and %s)" % (src, a))
            src = a
            i += 1
            continue
        name, eq, val = a.partition("=")
        kind = _OWN[cmd].get(name)
        row = table.get(name)
        if kind is None and row is None:
            raise UsageError("unknown option %s" % name)
        if kind == "flag" or (row and row[1] == "neg"):
            if eq:
                raise UsageError("%s takes no value" % name)
            if kind == "flag":
                own[name[2:].replace("-", "_")] = True
            elif not row[0]:
                raise UsageError("%s is not supported for Parquet sources" % name)
            else:
                kw[row[0]] = False
            i += 1
            continue
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError("%s needs a value" % name)
            val = argv[i + 1]
            i += 1
        i += 1
        if kind is not None:
            try:
                own[name[2:].replace("-", "_")] = int(val)
            except ValueError:
                raise UsageError("%s: %r is not a number" % (name, val)) from None
            continue
        k, rk, extra = row
        if not k:
            raise UsageError("%s is not supported for Parquet sources" % name)
        if rk == "enum":
            if val not in extra:
                raise UsageError("%s must be one of %s" % (name, "|".join(extra)))
            kw[k] = val
        elif rk == "float":
            try:
                f = [float(x) for x in val.split(",")]
            except ValueError:
                raise UsageError("%s: %r is not a number list" % (name, val)) from None
            kw[k] = f if len(f) > 1 else f[0]
        elif rk == "str":
            kw[k] = val
        else:
            try:
                kw[k] = int(val, 0)
            except ValueError:
                raise UsageError("%s: %r is not an integer" % (name, val)) from None
    if src is None:
        raise UsageError("need SOURCE, a .parquet file or a directory of them")
    if "shuffle" in kw and kw["shuffle"] == "global":
        kw["shuffle"] = True
    kw.pop("format", None)  # parquet / arrow: this module is the format
    return src, kw, own


_KINDS = {1: "int64", 2: "float32", 3: "tensor", 4: "bytes"}
# chute_image_header's format ids (include/chute.h)
_IMAGE_FORMATS = {1: "jpeg", 2: "png", 3: "bmp", 4: "raw"}


def _dataset(src: str, kw: Dict[str, Any], own: Dict[str, Any]) -> Any:
    from . import arrow
    return arrow.dataset(src, image_key=kw.get("image_key"), label_key=kw.get("label_key"),
                         label_offset=kw.get("label_offset", 0), schema=kw.get("schema"),
                         read_delay_us=kw.get("read_delay_us", 0),
                         parquet_memory_bytes=own.get("parquet_memory_bytes"))


def _inspect_cmd(src: str, kw: Dict[str, Any], own: Dict[str, Any]) -> int:
    t0 = time.monotonic()
    ds = _dataset(src, kw, own)
    n = len(ds)
    bins: Dict[int, int] = {}
    total = 0
    for i in range(n):  # rows in order: one row group resident at a time
        z = ds.sample_size(i)
        total += z
        b = z.bit_length() - 1 if z else 0
        bins[b] = bins.get(b, 0) + 1
    bad: List[str] = []
    # Images: every cell's header is parsed (as the C command does for its
    # formats) for formats and dimensions; --verify decodes it whole instead.
    fmts: Dict[str, int] = {}
    dims: Dict[Tuple[int, int], int] = {}
    sum_w = sum_h = 0
    if ds.has_images:
        for i in range(n):
            try:
                data = ds.read(i)
                w, h, _, f = _chute.image_header(data)
                if own.get("verify"):
                    _chute.probe_image(data)
            except Exception as e:  # a damaged image or a null cell
                bad.append("%s: %s" % (ds.describe(i), e))
                continue
            name = _IMAGE_FORMATS.get(f, "other")
            fmts[name] = fmts.get(name, 0) + 1
            dims[(w, h)] = dims.get((w, h), 0) + 1
            sum_w += w
            sum_h += h
    good = n - len(bad)
    top = sorted(dims.items(), key=lambda kv: (-kv[1], kv[0]))
    fields = ds.fields()
    fmt = "parquet"
    if own.get("json"):
        out = {"source": src, "format": fmt, "samples": n, "classes": ds.num_classes,
               "images": bool(ds.has_images), "bytes": total,
               "fields": [{"name": f["name"], "kind": f["kind"], "dtype": f["dtype"],
                           "shape": list(f["shape"])} for f in fields],
               "size_histogram": {str(1 << b): c for b, c in sorted(bins.items())},
               "seconds": round(time.monotonic() - t0, 3)}
        if ds.has_images:
            out["formats"] = dict(fmts, undecodable=len(bad))
            out["top_dimensions"] = [{"width": w, "height": h, "count": c}
                                     for (w, h), c in top[:10]]
            out["mean_width"] = round(sum_w / good, 1) if good else 0
            out["mean_height"] = round(sum_h / good, 1) if good else 0
            out["undecodable"] = len(bad)
            out["undecodable_samples"] = bad[:20]
        if own.get("verify"):
            out["undecodable"] = len(bad)
            out["undecodable_samples"] = bad[:20]
            out["verify_ok"] = not bad
        print(json.dumps(out))
    else:
        what = "images" if ds.has_images else "no images"
        print("%s: %s, %d samples in %d classes, %s, %.1f MB (mean %.1f B)"
              % (src, fmt, n, ds.num_classes, what, total / 1e6, total / n if n else 0))
        print("fields:")
        for f in fields:
            print("  %-20s %-7s %s[%s]" % (f["name"], f["kind"], f["dtype"],
                                           ",".join(str(d) for d in f["shape"])))
        print("sample sizes:" if not ds.has_images else "image sizes (encoded):")
        for b, c in sorted(bins.items()):
            print("  >= %-12d %8d %5.1f%%" % (1 << b, c, 100.0 * c / (n or 1)))
        if ds.has_images:
            print("formats: %s, %d undecodable"
                  % (", ".join("%d %s" % (c, k.upper()) for k, c in sorted(fmts.items()))
                     or "none", len(bad)))
            if good:
                print("most common dimensions:%s" % "".join(
                    "  %dx%d (%.1f%%)" % (w, h, 100.0 * c / good) for (w, h), c in top[:5]))
                print("mean dimensions: %.1fx%.1f" % (sum_w / good, sum_h / good))
        cl = ds.classes
        print("classes: %s%s" % (" ".join(cl[:10]), " ..." if len(cl) > 10 else ""))
        if bad and not own.get("verify"):
            print("undecodable (%d):" % len(bad))
            for m in bad[:20]:
                print("  " + m)
        if own.get("verify"):
            if bad:
                print("undecodable (%d):" % len(bad))
                for m in bad[:20]:
                    print("  " + m)
            else:
                print("verify: all %d samples decode" % n)
    if own.get("verify") and bad:
        sys.stderr.write("chute inspect: verify FAILED: %d of %d samples could not be read or "
                         "decoded\n" % (len(bad), n))
        return 1
    return 0


def _bench_cmd(src: str, kw: Dict[str, Any], own: Dict[str, Any]) -> int:
    from .loader import Loader
    accepted = set(_inspect.signature(Loader.__init__).parameters)
    for k in kw:
        if k not in accepted:
            raise UsageError("--%s is not supported for Parquet sources" % k.replace("_", "-"))
    t_open = time.monotonic()
    ld = Loader(src, as_torch=False, parquet_memory_bytes=own.get("parquet_memory_bytes"),
                **kw)
    t_open = time.monotonic() - t_open
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    samples = batches = 0
    step = own.get("step_ms", 0) / 1000.0
    for e in range(max(1, own.get("epochs", 1))):
        for b in ld:
            if own.get("max_batches") and batches >= own["max_batches"]:
                break
            first = b[0] if isinstance(b, tuple) else next(iter(b.values()))
            samples += len(first)
            batches += 1
            if step:
                time.sleep(step)
    el = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    loads, peak, _ = _chute._arrow_units_stats(ld.dataset)
    ld.close()
    rate = samples / el if el > 0 else 0.0
    if own.get("json"):
        print(json.dumps({"source": src, "format": "parquet", "samples": samples,
                          "batches": batches, "seconds": round(el, 4),
                          "samples_per_s": round(rate, 1), "cpu_s": round(cpu, 3),
                          "cpu_ms_per_sample": round(1e3 * cpu / samples, 4) if samples else 0,
                          "open_s": round(t_open, 3), "row_group_loads": loads,
                          "row_groups_peak_resident": peak}))
    else:
        print("%s: parquet, %d samples in %d batches, %.3f s: %.1f samples/s, %.3f CPU ms per "
              "sample (open %.3f s; %d row-group loads, at most %d resident)"
              % (src, samples, batches, el, rate, 1e3 * cpu / samples if samples else 0,
                 t_open, loads, peak))
    return 0


def _usage(cmd: str) -> str:
    rows = sorted(_table().items())
    lines = ["usage: chute %s SOURCE.parquet|DIR [options]  (Parquet through the Python "
             "package)" % cmd, "", "options:"]
    for name, kind in sorted(_OWN[cmd].items()):
        lines.append("  %-28s %s" % (name + ("" if kind == "flag" else " N"), "(%s)" % cmd))
    for name, (kw, kind, extra) in rows:
        if kw:
            arg = "" if kind == "neg" else "|".join(extra) if kind == "enum" else \
                "STR" if kind == "str" else "X" if kind == "float" else "N"
            lines.append("  %-28s" % (name + (" " + arg if arg else "")))
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in _OWN:
        sys.stderr.write("usage: python -m chute.cli inspect|bench SOURCE [options]\n")
        return 2
    cmd = args.pop(0)
    try:
        src, kw, own = _parse(cmd, args)
        return _inspect_cmd(src, kw, own) if cmd == "inspect" else _bench_cmd(src, kw, own)
    except UsageError as e:
        if str(e) == "help":
            print(_usage(cmd))
            return 0
        sys.stderr.write("chute %s: %s\n" % (cmd, e))
        return 2
    except (OSError, ValueError, ChuteError) as e:
        sys.stderr.write("chute %s: %s\n" % (cmd, e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
