"""The "csv" format (issue #12): files written by Python's csv module and by
pandas, every value compared with what pandas reads back (exact ints,
bitwise float32 = pandas' float64 parse cast to float32, category codes =
astype("category").cat.codes); malformed rows name file:line and are
skipped and counted or fatal; exactly once over ranks; resume."""
import csv
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import chute

SCHEMA = "a:int64,b:float32=0.25,c:category=zz"


def L(path, **kw):
    kw.setdefault("as_torch", False)
    kw.setdefault("return_indices", True)
    kw.setdefault("workers", 2)
    kw.setdefault("schema", SCHEMA)
    kw.setdefault("label_key", "y")
    return chute.Loader(str(path), **kw)


@pytest.fixture
def table(tmp_path):
    """Three files: two by the csv module (CRLF and LF, quoting every kind of
    cell), one by pandas; blank lines between some rows."""
    rs = np.random.RandomState(1)
    words = ["x", "comma,inside", 'quote"d', "new\nline", "", "ünï"]
    d = tmp_path / "t"
    d.mkdir()
    for fi, term in enumerate(["\r\n", "\n"]):
        with open(d / ("%d.csv" % fi), "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator=term, quoting=csv.QUOTE_MINIMAL)
            w.writerow(["y", "a", "b", "c", "unused"])
            for k in range(40):
                b = "" if k % 7 == 3 else repr(float(rs.randn() * 10 ** rs.randint(-5, 6)))
                w.writerow([rs.randint(0, 5), rs.randint(-2 ** 62, 2 ** 62), b,
                            words[rs.randint(0, len(words))], "ignored"])
                if k == 10:
                    f.write(term)  # a blank line: skipped, as pandas does
    pd.DataFrame({"y": rs.randint(0, 5, 30), "a": rs.randint(-1000, 1000, 30),
                  "b": rs.randn(30).astype(np.float32), "c": [words[i % 4] for i in range(30)],
                  "unused": 0}).to_csv(d / "2.csv", index=False)
    df = pd.concat([pd.read_csv(d / ("%d.csv" % k), keep_default_na=False,
                                dtype={"b": str, "c": str}) for k in range(3)],
                   ignore_index=True)
    want = {"y": df["y"].to_numpy(np.int64), "a": df["a"].to_numpy(np.int64),
            "b": df["b"].replace("", "0.25").astype(np.float64).astype(np.float32).to_numpy(),
            "c": df["c"].replace("", "zz").astype("category").cat.codes.to_numpy(np.int64)}
    return d, want


def epoch(ld):
    got = {"i": [], "y": [], "a": [], "b": [], "c": []}
    for bt in ld:
        assert "images" not in bt
        got["i"] += np.asarray(bt["indices"]).tolist()
        got["y"] += np.asarray(bt["labels"]).tolist()
        for k in "abc":
            if k in bt:
                got[k].append(np.array(bt[k]))
    for k in "abc":
        got[k] = np.concatenate(got[k]) if got[k] else None
    return got


def test_values_match_pandas(table):
    d, want = table
    ds = chute.Dataset(str(d), schema=SCHEMA, label_key="y")
    assert len(ds) == 110 and not ds.has_images
    assert [(f["name"], f["dtype"]) for f in ds.fields()] == [
        ("a", "int64"), ("b", "float32"), ("c", "int64")]
    g = epoch(L(d, batch_size=16, fields=["a", "b", "c"], seed=3))
    i = g["i"]
    assert sorted(i) == list(range(110)) and i != sorted(i)  # rows shuffled across files
    assert g["y"] == want["y"][i].tolist()
    assert np.array_equal(g["a"], want["a"][i])
    assert g["b"].tobytes() == want["b"][i].tobytes()
    assert np.array_equal(g["c"], want["c"][i])


def test_no_header_schema_lists_every_column(tmp_path):
    rows = [[3, "1.5", "p"], [1, "", "q"], [0, "-2", "p"]]
    with open(tmp_path / "n.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    ld = L(tmp_path / "n.csv", schema="lab:skip,v:float32=9,w:category", label_key="0",
           csv_no_header=True, fields=["v", "w"], shuffle=False, batch_size=3)
    (b,) = list(ld)
    assert np.asarray(b["labels"]).tolist() == [3, 1, 0]
    assert np.asarray(b["v"]).tolist() == [1.5, 9.0, -2.0]
    assert np.asarray(b["w"]).tolist() == [0, 1, 0]


@pytest.mark.parametrize("world", [1, 4])
def test_exactly_once_over_ranks(table, world):
    d, _ = table
    seen = []
    for r in range(world):
        seen += epoch(L(d, batch_size=8, fields=["a", "b", "c"], rank=r, world_size=world,
                        seed=5))["i"]
    assert set(seen) == set(range(110)) and len(seen) == -(-110 // world) * world


def test_resume(table):
    d, _ = table
    kw = dict(batch_size=9, fields=["a", "b"], seed=4)

    def run(ld, limit=None):
        ld.set_epoch(2)
        out = []
        for b in ld:
            out.append((np.asarray(b["indices"]).tolist(), np.array(b["b"]).tobytes()))
            if limit and len(out) == limit:
                break
        return out

    ref = run(L(d, **kw))
    first = L(d, workers=1, **kw)
    seen = run(first, limit=5)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    again = L(d, **kw)
    again.load_state_dict(state)
    assert seen + run(again) == ref


def bad_file(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("y,a,b,c\n0,1,2,x\n1,2\n2,3,nope,x\n3,4,5,x\n4,,6,x\n0,6,7,\"open\n1,7,8,x\n")
    return p


def test_malformed_rows_fail_naming_file_line(tmp_path):
    p = bad_file(tmp_path)
    with L(p, batch_size=1, fields=["a", "b"], on_corrupt="fail", shuffle=False,
           workers=1) as ld:
        it = iter(ld)
        next(it)  # line 2 is good
        with pytest.raises(chute.ChuteError) as e:
            next(it)
    assert "bad.csv:3" in str(e.value) and "2 cells, the rows have 4" in str(e.value)


def test_malformed_rows_skipped_and_counted(tmp_path):
    p = bad_file(tmp_path)
    with pytest.warns(chute.SkippedSamplesWarning) as w:
        with L(p, batch_size=6, fields=["a", "b"], shuffle=False) as ld:
            g = epoch(ld)
            assert ld.stats()["corrupt"] >= 4
    assert set(g["i"]) <= {0, 3}  # lines 2 and 5 are the only good rows
    text = " ".join(str(x.message) for x in w)
    assert "bad.csv:" in text


def test_inspect(table):
    d, _ = table
    p = subprocess.run([sys.executable, "-m", "chute", "inspect", "--json", str(d)],
                       capture_output=True, text=True)
    # no schema and no column named label/labels/target/targets/class: the
    # label is not guessed (issue 22.2), the error names the columns seen
    assert p.returncode != 0 and "no label column" in p.stderr and "y, a, b, c" in p.stderr
    p = subprocess.run([sys.executable, "-m", "chute", "inspect", "--json", "--label-key", "",
                        str(d)], capture_output=True, text=True)
    # label_key "": no labels; every column is float32; the text columns
    # make no difference to the count
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["format"] == "csv" and j["samples"] == 110 and j["images"] is False
    assert [f["name"] for f in j["fields"]] == ["y", "a", "b", "c", "unused"]


@pytest.mark.parametrize("lab", ["label", "Labels", "target", "class", None])
def test_no_schema_label_column_by_name_and_features(tmp_path, lab):
    """Issue 22.2: Loader("rows.csv") on a header a,b,c,label gave every label
    as 0 and no feature columns.  Now a column named label/labels/target/
    targets/class (any case) is the label and the other columns arrive as
    fields and as one (N, columns) float32 "features" tensor, equal to what
    pandas reads; with no such column the open fails naming the columns;
    label_key="" is the explicit "no labels"."""
    rs = np.random.RandomState(4)
    df = pd.DataFrame({"a": rs.randint(-50, 50, 12), "b": rs.randn(12).astype(np.float32),
                       "c": rs.rand(12).astype(np.float32)})
    if lab:
        df[lab] = rs.randint(0, 4, 12)
    df.to_csv(tmp_path / "rows.csv", index=False)
    p = str(tmp_path / "rows.csv")
    want = pd.read_csv(p)
    if lab is None:
        with pytest.raises(chute.FormatError, match=r"no label column: the header has a, b, c"):
            chute.Loader(p, batch_size=12)
        b = next(iter(chute.Loader(p, batch_size=12, shuffle=False, label_key="",
                                   as_torch=False, return_indices=False)))
        assert np.asarray(b["labels"]).tolist() == [0] * 12
        assert np.array_equal(np.asarray(b["features"]),
                              want[["a", "b", "c"]].to_numpy(np.float64).astype(np.float32))
        return
    b = next(iter(chute.Loader(p, batch_size=12, shuffle=False, as_torch=False,
                               return_indices=False)))
    assert np.asarray(b["labels"]).tolist() == want[lab].tolist()
    f = np.asarray(b["features"])
    assert f.shape == (12, 3) and f.dtype == np.float32
    assert np.array_equal(f, want[["a", "b", "c"]].to_numpy(np.float64).astype(np.float32))
    assert np.array_equal(np.asarray(b["b"]), f[:, 1]) and lab not in b
