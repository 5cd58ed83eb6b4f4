"""chute.Loader's keyword options against the C library's option table.

The table (src/common/loader_options.def) is exported by the extension
(`_chute.loader_options()`), and `_chute.resolve_loader_options()` runs
the C library's own resolve step.  Checked here: Loader's signature takes
its defaults from the table, a Loader made with no options has what C
resolves from all-zero options, the bounds (min-1, max+1) are refused with
the option named, and — behaviour, not tables — `Loader(tree)` and
`chute bench tree` with no flags deliver the same batches, which is also
what torch's DataLoader gives for the same batch size and drop_last.
"""
import inspect
import json
import os
import subprocess

import pytest

import chute
from chute import _chute

from conftest import ROOT, TREE_IMAGES

U64_MAX = 2 ** 64 - 1
TABLE = {r[0]: dict(name=r[0], kind=r[1], default=r[2], min=r[3], max=r[4], layers=r[5],
                    help=r[6]) for r in _chute.loader_options()}
PY = [r for r in TABLE.values() if "python" in r["layers"]]


def test_table_is_exported():
    for name in ("batch_size", "size", "workers", "prefetch", "max_held", "seed", "drop_last",
                 "rank", "world_size", "max_pixels", "max_sample_bytes", "resize_size"):
        assert name in TABLE and "python" in TABLE[name]["layers"], name
    for r in TABLE.values():
        assert r["kind"] in ("u32", "u64", "bool") and r["help"]
        assert r["min"] <= r["max"]
        assert "auto" in r["layers"] or r["min"] <= r["default"] <= r["max"], r


def test_signature_defaults_come_from_the_table():
    params = inspect.signature(chute.Loader.__init__).parameters
    for r in PY:
        p = params[r["name"]]
        if "auto" in r["layers"] or r["name"] in ("rank", "world_size"):
            assert p.default is None, r["name"]  # computed (or from torch.distributed/env)
        elif r["kind"] == "bool":
            assert p.default is bool(r["default"]), r["name"]
        else:
            assert p.default == r["default"], r["name"]
    assert params["scale"].default == (TABLE["scale_min_pct"]["default"] / 100,
                                       TABLE["scale_max_pct"]["default"] / 100)


def test_defaults_equal_what_c_resolves(tree):
    c = _chute.resolve_loader_options()  # the C library, all-zero options
    ld = chute.Loader(tree)
    try:
        for name in ("batch_size", "size", "prefetch", "max_held", "seed", "drop_last", "rank",
                     "world_size"):
            assert getattr(ld, name) == c[name], name
        assert c["workers"] == chute.default_workers()[0] == ld.stats()["workers"]
        # The documented values (include/chute.h), literally: one default everywhere.
        assert (c["batch_size"], c["max_held"], c["drop_last"]) == (256, 2, False)
    finally:
        ld.close()


PY_NUM = [r for r in PY if r["kind"] != "bool"]


@pytest.mark.parametrize("row", PY_NUM, ids=[r["name"] for r in PY_NUM])
def test_python_bounds_name_the_option(tree, row):
    # Python's ints reach past every bound (-1 and 2^64 included).
    for v in (row["min"] - 1, row["max"] + 1):
        with pytest.raises(ValueError, match=row["name"]):
            chute.Loader(tree, **{row["name"]: v})
        with pytest.raises(ValueError, match=row["name"]):
            _chute.resolve_loader_options(**{row["name"]: v})


@pytest.mark.parametrize("row", list(TABLE.values()), ids=list(TABLE))
def test_c_accepts_each_bound(row):
    for v in (row["min"], row["max"]):
        kw = {row["name"]: v}
        if row["name"] == "rank":
            kw["world_size"] = TABLE["world_size"]["max"]
        if row["name"] == "scale_max_pct":
            kw["scale_min_pct"] = TABLE["scale_min_pct"]["min"]
        if row["name"] == "resize_size" and v < 224:
            with pytest.raises(ValueError, match="resize_size"):
                _chute.resolve_loader_options(**kw)  # below size: a cross-option check
            continue
        got = _chute.resolve_loader_options(**kw)
        if row["kind"] != "bool" and (v or "auto" not in row["layers"]):
            # 0 is the default, except in a row whose 0 means off (readahead).
            want = v if v or "zero_off" in row["layers"] else row["default"]
            assert got[row["name"]] == want, row["name"]


def test_readahead_on_by_default_and_0_turns_it_off():
    # Issue 22.1: read-ahead on by default (64, docs/DESIGN.md "Measured
    # choices"), and readahead=0 still off (not the default, as a zero
    # C field would be).
    assert _chute.resolve_loader_options()["readahead"] == 64
    assert _chute.resolve_loader_options(readahead=0)["readahead"] == 0
    assert _chute.resolve_loader_options(readahead=5)["readahead"] == 5


def test_max_held_copy_keeps_a_spare_slot(tree):
    top = TABLE["max_held"]["max"]
    with pytest.raises(ValueError, match="max_held"):
        chute.Loader(tree, max_held=top, hold_policy="copy")
    chute.Loader(tree, max_held=top, hold_policy="raise", size=16, batch_size=4).close()


def _cli():
    for p in (os.environ.get("CHUTE_CLI"), os.path.join(ROOT, "build", "chute")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("no chute CLI built (build/chute, or set CHUTE_CLI)")


def test_loader_and_bench_defaults_deliver_the_same_batches(tree):
    torch = pytest.importorskip("torch")
    out = subprocess.run([_cli(), "bench", tree, "--json", "--quiet"], check=True,
                         capture_output=True, text=True, timeout=600).stdout
    bench = json.loads(out)
    ld = chute.Loader(tree, as_torch=True)
    shapes = [tuple(x.shape) for x, _ in ld]
    ld.close()
    # torch's DataLoader with the same batch size and drop_last: the reference.
    ref = [len(b) for b in torch.utils.data.DataLoader(range(TREE_IMAGES),
                                                       batch_size=bench["batch_size"],
                                                       drop_last=ld.drop_last)]
    assert bench["batches"] == len(shapes) == len(ref)
    assert bench["images"] == sum(s[0] for s in shapes) == sum(ref) == TREE_IMAGES
    assert [s[0] for s in shapes] == ref
    assert all(s[1:] == (3, 224, 224) for s in shapes)


def test_default_max_held_lets_a_plain_loop_run_zero_copy(tree):
    # max_held is 2 now (was 4 in Python): the batch just returned plus the
    # previous one still bound to the loop variable, so a plain loop never
    # copies; keeping a third alive does.
    ld = chute.Loader(tree, batch_size=10, size=16)
    for x, y in ld:
        pass
    assert ld.stats()["copied_batches"] == 0
    kept = [b for b in ld]
    assert len(kept) == len(ld) and ld.stats()["copied_batches"] > 0
    del kept
    ld.close()


# Every row of both tables (src/common/loader_options.def and
# dataset_options.def) that Python exposes, with its Python keyword.
XROWS = [dict(table=r[0], name=r[1], field=r[2], kind=r[3], default=r[4], choices=r[5],
              layers=r[6]) for r in _chute.option_rows() if "python" in r[6]]
_KEYWORD = {("dataset", "kind"): "source_kind"}
# None is the C default where C computes the value (auto rows, floats) or
# Python takes it from torch.distributed / the environment.
_NONE_OK = {"rank", "world_size"}


def test_every_python_default_is_the_c_default():
    """What chute.Loader passes for an option left out is what C does with no option."""
    params = inspect.signature(chute.Loader.__init__).parameters
    c = _chute.resolve_loader_options()  # C's resolution of all-zero options
    checked = 0
    for r in PY:  # integer loader rows: against the value C resolves
        p = params[r["name"]].default
        if "auto" in r["layers"] or r["name"] in _NONE_OK:
            assert p is None, r["name"]
        elif r["kind"] == "bool":
            assert p is c[r["name"]], (r["name"], p, c[r["name"]])
        else:
            assert p == c[r["name"]] and type(p) is int, (r["name"], p, c[r["name"]])
        checked += 1
    assert params["scale"].default == (c["scale_min_pct"] / 100, c["scale_max_pct"] / 100)
    for r in XROWS:  # the other rows: Python's default must leave C's zero (= default)
        kw = _KEYWORD.get((r["table"], r["name"]), r["name"])
        p = params[kw].default
        if r["kind"] == "enum":
            if (r["table"], r["field"]) == ("loader", "shuffle"):
                continue  # shares its keyword with the flag below: True is "global"
            assert p == r["choices"][0], (kw, p)  # value 0
        elif r["kind"] == "neg":
            assert p is True, (kw, p)  # no_<name> = 0
        elif r["kind"] in ("str", "float"):
            assert p is None, (kw, p)  # NULL / all-zero: C's default
        else:
            assert p == 0 and not p, (kw, p)  # an integer field left 0
        checked += 1
    assert checked == len(PY) + len(XROWS) - 1 and checked > 40


def test_loader_defaults_are_taken_from_the_table_not_written_by_hand():
    """Each table keyword's default in loader.py is _default()/_xdefault() of its row."""
    import ast

    import chute.loader as L

    src = open(L.__file__).read()  # the module under test (the wheel's, in its tier)
    init = next(n for n in ast.walk(ast.parse(src))
                if isinstance(n, ast.FunctionDef) and n.name == "__init__"
                and "source_kind" in [a.arg for a in n.args.kwonlyargs])
    args = init.args.args[-len(init.args.defaults):] + init.args.kwonlyargs
    defaults = dict(zip([a.arg for a in args], init.args.defaults + init.args.kw_defaults))
    rows = {r["name"]: r for r in PY}
    rows.update({_KEYWORD.get((r["table"], r["name"]), r["name"]): r for r in XROWS})
    missing = set(rows) - set(defaults)
    assert not missing, missing
    for kw, r in sorted(rows.items()):
        d = defaults[kw]
        if isinstance(d, ast.Constant) and d.value is None and (
                "auto" in r["layers"] or r["kind"] == "float" or kw in _NONE_OK):
            continue  # C computes it (see above)
        calls = {n.func.id for n in ast.walk(d)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert calls & {"_default", "_xdefault"}, \
            "loader.py: %s's default %s is written by hand; take it from the table" % (
                kw, ast.unparse(d))
