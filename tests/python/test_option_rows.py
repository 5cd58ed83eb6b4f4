"""The option table's enum, float, flag, string and dataset rows in Python.

The rows are exported by the extension (`_chute.option_rows()`, the C
library's compiled table of src/common/loader_options.def and
dataset_options.def).  Checked here: every enum's choices are the names
chute.h gives its C values (literals below), chute.Loader's keyword
defaults are the table's, each choice of each enum makes a Loader whose
batches show it (C value <-> Python name), a bad choice or an out-of-range
float is refused naming the option in Python and in C
(`_chute.check_options`), and every Python-exposed row is a keyword of
chute.Loader.
"""
import inspect
import math

import numpy as np
import pytest

import chute
from chute import _chute

ROWS = {(r[0], r[2]): dict(table=r[0], name=r[1], field=r[2], kind=r[3], default=r[4],
                           choices=r[5], layers=r[6], help=r[7], min=r[8], max=r[9])
        for r in _chute.option_rows()}
ENUMS = [r for r in ROWS.values() if r["kind"] == "enum"]
# chute.h's enums, in C value order (literals, not from the table).
CHUTE_H = {"transform": ("train", "eval", "none"), "dtype": ("float32", "uint8", "float16"),
           "layout": ("default", "nchw", "nhwc"), "remainder": ("pad", "drop"),
           "on_corrupt": ("skip", "fail"), "shuffle": ("global", "shards"),
           "kind": ("auto", "tree", "shards"), "clip_sampler": ("random", "regular")}
# The Python keyword of a row where it differs from the C name.
PY_NAME = {("dataset", "kind"): "source_kind"}
# The shuffle mode shares its keyword with the shuffle flag: True (the
# flag's default) is the mode "global" (the mode's default).
SIG = inspect.signature(chute.Loader.__init__).parameters


def py_name(r):
    return PY_NAME.get((r["table"], r["name"]), r["name"])


def test_enum_choices_are_chute_h_values():
    assert {r["name"] for r in ENUMS} == set(CHUTE_H)
    for r in ENUMS:
        assert r["choices"] == CHUTE_H[r["name"]], r
        assert r["default"] == r["choices"][0]


def test_every_python_row_is_a_loader_keyword_with_the_table_default():
    for r in ROWS.values():
        if "python" not in r["layers"]:
            continue
        p = SIG.get(py_name(r))
        assert p is not None, "chute.Loader lacks %s" % py_name(r)
        # None for a float means the table's default (computed in C).
        want = None if r["kind"] == "float" else r["default"]
        if (r["table"], r["field"]) == ("loader", "shuffle"):
            assert want == "global" and ROWS[("loader", "no_shuffle")]["default"] is True
            want = True
        assert p.default == want, (r, p.default)


def test_bad_choice_refused_naming_the_option_in_python_and_c():
    for r in ENUMS:
        if "python" not in r["layers"]:
            continue
        with pytest.raises(ValueError, match=py_name(r)):
            chute.Loader("/nonexistent/chute-opt", **{py_name(r): "bogus"})
        for v in range(len(r["choices"])):
            _chute.check_options(**{r["name"]: v})
        with pytest.raises(ValueError, match=r["name"] + ".*" + "\\|".join(r["choices"])):
            _chute.check_options(**{r["name"]: len(r["choices"])})


def test_bad_float_refused_naming_the_option(tree):
    with pytest.raises(ValueError, match="crop_pct"):
        chute.Loader(tree, crop_pct=1.5)
    with pytest.raises(ValueError, match="crop_pct"):
        _chute.check_options(crop_pct=1.5)
    with pytest.raises(ValueError, match=r"std\[0\]"):
        _chute.check_options(std=(0.0, 1.0, 1.0))
    with pytest.raises(ValueError, match=r"mean\[1\]"):
        chute.Loader(tree, mean=(0.5, math.nan, 0.5), workers=1)
    with pytest.raises(ValueError, match="read_delay_us"):
        chute.Loader(tree, read_delay_us=ROWS[("dataset", "read_delay_us")]["max"] + 1)


def first(ld):
    for b in ld:
        return b


def test_each_choice_round_trips_through_the_loader(tree):
    """Python name -> C value -> what the batches show (and back to the
    attribute): dtypes and layouts by the arrays made in C."""
    kw = dict(batch_size=4, size=32, workers=1, as_torch=False)
    for name in CHUTE_H["dtype"]:
        img, _ = first(chute.Loader(tree, dtype=name, **kw))
        assert np.asarray(img).dtype == np.dtype(name)
    for name in CHUTE_H["layout"]:
        ld = chute.Loader(tree, layout=name, **kw)
        img, _ = first(ld)
        want = "nchw" if name == "default" else name
        assert ld.layout == want
        assert np.asarray(img).shape == ((4, 3, 32, 32) if want == "nchw" else (4, 32, 32, 3))
    for field, attr in (("transform", "transform"), ("remainder", "remainder"),
                        ("on_corrupt", "on_corrupt"), ("shuffle", "shuffle_mode")):
        for name in CHUTE_H[field]:
            ld = chute.Loader(tree, **{field: name}, **kw)
            assert getattr(ld, attr) == name
            img, lab = first(ld)
            assert len(lab) == 4
