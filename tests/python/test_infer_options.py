"""chute.Infer's keywords against the inference session's option table.

The table (src/common/infer_options.def) is exported by the extension
(`_chute.infer_options()`, rows as `_chute.option_rows()`), and
`_chute.resolve_infer_options()` runs the C library's own resolve step
(ch_infer_options_resolve, chute_infer_create's first step).  Checked here:
every Python row is a keyword of chute.Infer (its signature) and of the
_chute.pyi stub, and nothing else is; each keyword's default in the
signature is what C does with no option (passing it changes nothing); the
defaults are chute.h's (literals); the rows shared with the loader are the
loader table's rows; bounds are refused by C naming the option, values
that do not fit the field or name no choice by Python naming it; and the
old spellings (layout="NCHW", 0 for a default) still work.
"""
import ast
import inspect
import os

import pytest

import chute
from chute import _chute

ROWS = [dict(table=r[0], name=r[1], field=r[2], kind=r[3], default=r[4], choices=r[5],
             layers=r[6], help=r[7], min=r[8], max=r[9]) for r in _chute.infer_options()]
PY = [r for r in ROWS if "python" in r["layers"]]
SIG = inspect.signature(chute.Infer).parameters


def test_every_python_row_is_a_keyword_and_nothing_else():
    assert len(PY) >= 19
    assert set(SIG) == {r["name"] for r in PY}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in SIG.values())
    with pytest.raises(TypeError, match="bogus"):
        chute.Infer(bogus=1)
    with pytest.raises(TypeError, match="keyword"):
        chute.Infer(224)


def test_stub_lists_the_table_keywords():
    import chute as pkg

    stub = os.path.join(os.path.dirname(pkg.__file__), "_chute.pyi")
    tree = ast.parse(open(stub).read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Infer")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert [a.arg for a in init.args.kwonlyargs] == [r["name"] for r in PY]


def _sig_default(r):
    """What chute.Infer's signature must say for row r (as loader.py does)."""
    if r["kind"] == "enum":
        return r["choices"][0]
    if r["kind"] == "neg":
        return True
    if r["kind"] == "bool":
        return bool(r["default"])
    if r["kind"] == "float" or "auto" in r["layers"]:
        return None  # computed in C
    return r["default"]


def test_signature_defaults_are_the_c_defaults():
    c = _chute.resolve_infer_options()  # C's resolution of all-zero options
    for r in PY:
        d = SIG[r["name"]].default
        assert d == _sig_default(r) and type(d) is type(_sig_default(r)), (r["name"], d)
        # Passing the signature's default is passing nothing.
        assert _chute.resolve_infer_options(**{r["name"]: d}) == c, r["name"]
        if "auto" not in r["layers"] and r["kind"] in ("u32", "u64", "bool", "neg"):
            assert c[r["name"]] == d, (r["name"], c[r["name"]], d)
    # include/chute.h's documented defaults, literally.
    assert (c["max_batch"], c["max_delay_us"], c["queue_capacity"]) == (8, 1000, 64)
    assert (c["worker_slice_us"], c["ordered"], c["pretouch"]) == (0, True, False)
    assert (c["transform"], c["dtype"], c["layout"], c["size"]) == ("eval", "float32", "nchw", 224)
    assert c["workers"] == chute.default_workers()[0]
    assert _chute.resolve_infer_options(max_batch=32)["queue_capacity"] == 128
    assert _chute.resolve_infer_options(max_batch=1)["queue_capacity"] == 64
    with chute.Infer(size=16) as inf:  # the session itself reports the resolved workers
        assert inf.stats()["workers"] == c["workers"]


def test_shared_rows_are_the_loader_rows():
    loader_int = {r[0]: r for r in _chute.loader_options()}
    loader_x = {r[2]: r for r in _chute.option_rows() if r[0] == "loader"}
    shared = [r for r in ROWS if "loader" in r["layers"]]
    assert {r["field"] for r in shared} == {
        "size", "dtype", "layout", "no_normalize", "mean", "std", "crop_pct", "resize_size",
        "no_dct_scale", "max_pixels", "max_sample_bytes", "workers", "stats_shm"}
    for r in shared:
        if r["field"] in loader_x:
            x = loader_x[r["field"]]
            assert (r["name"], r["kind"], r["default"], r["choices"], r["help"]) == \
                (x[1], x[3], x[4], x[5], x[7]), r["name"]
        else:
            name, kind, default, lo, hi, layers, hlp = loader_int[r["field"]]
            assert (r["name"], r["kind"], r["default"], r["min"], r["max"], r["help"]) == \
                (name, kind, default, lo, hi, hlp), r["name"]
            assert ("auto" in r["layers"]) == ("auto" in layers), r["name"]


INTS = [r for r in PY if r["kind"] in ("u32", "u64")]


@pytest.mark.parametrize("row", INTS, ids=[r["name"] for r in INTS])
def test_bounds_refused_by_c_naming_the_option(row):
    top = 2 ** 32 - 1 if row["kind"] == "u32" else 2 ** 64 - 1
    bad = [row["max"] + 1] if row["max"] < top else []
    if row["min"] > 1:
        bad.append(row["min"] - 1)
    for v in bad:
        with pytest.raises(chute.InvalidArgumentError, match=row["name"]):
            _chute.resolve_infer_options(**{row["name"]: v})
        with pytest.raises(chute.InvalidArgumentError, match=row["name"]):
            chute.Infer(**{row["name"]: v})
    for v in (row["min"], row["max"]):
        kw = {row["name"]: v}
        if row["name"] == "resize_size" and v < 224:
            continue  # below size: the loader's cross-option check
        assert _chute.resolve_infer_options(**kw)[row["name"]] == v
    # 0 and None are the default (0 is off in a zero_off row: stats_shm, as
    # the Loader's); what does not fit the field is Python's refusal.
    if "zero_off" in row["layers"]:
        assert _chute.resolve_infer_options(**{row["name"]: 0})[row["name"]] == 0
        assert _chute.resolve_infer_options(**{row["name"]: None})[row["name"]] == row["default"]
    else:
        assert _chute.resolve_infer_options(**{row["name"]: 0}) == \
            _chute.resolve_infer_options(**{row["name"]: None})
    for v in (-1, top + 1):
        with pytest.raises(ValueError, match=row["name"]):
            chute.Infer(**{row["name"]: v})
    with pytest.raises(TypeError, match=row["name"]):
        chute.Infer(**{row["name"]: "8"})


def test_messages_and_old_spellings():
    with pytest.raises(chute.InvalidArgumentError, match=r"max_batch 1025 is out of range \(1\.\.1024\)"):
        chute.Infer(max_batch=1025)
    with pytest.raises(chute.InvalidArgumentError,
                       match=r"worker_slice_us 99 is out of range \(0, or 100\.\.100000\)"):
        chute.Infer(worker_slice_us=99)
    with pytest.raises(ValueError, match="transform"):
        chute.Infer(transform="train")  # a random crop has no place at inference
    with pytest.raises(ValueError, match="layout"):
        chute.Infer(layout="CHW")
    # layout was spelled "NCHW"/"NHWC" before the table: any case is taken.
    r = _chute.resolve_infer_options(layout="NHWC", dtype="UINT8", transform="none",
                                     ordered=False, normalize=False, dct_scale=False,
                                     pretouch=True, crop_pct=0.5, mean=(0.5, 0.5, 0.5))
    assert (r["layout"], r["dtype"], r["transform"]) == ("nhwc", "uint8", "none")
    assert (r["ordered"], r["normalize"], r["dct_scale"], r["pretouch"]) == (False,) * 3 + (True,)
    assert r["crop_pct"] == 0.5 and r["mean"] == (0.5, 0.5, 0.5) and r["resize_size"] == 448
