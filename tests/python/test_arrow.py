"""Arrow and Parquet input (issue #12): files and tables written by pyarrow
itself, every value chute delivers compared with what pyarrow reads back
(exact integers, bitwise float32, float64 as numpy rounds it to float32,
fixed-size lists as tensors, binary as bytes), a Hugging Face-style image
column (struct<bytes, path>) of JPEGs against PIL + torchvision's eval
transform, nulls under the corrupt policy, and Parquet files cut short.

pyarrow is not a Debian package: scripts/test.sh fetches pyarrow==17.0.0
(built for numpy 1.x and 2.x, so Debian's numpy 1.24 works) from PyPI into
build-python/pyarrow/site; run alone, this file fetches it there itself, and
skips, saying so, only when PyPI cannot be reached.
"""
import fcntl
import io
import os
import subprocess
import sys

import numpy as np
import pytest

import chute
from conftest import ROOT

PYARROW_DIR = os.environ.get("CHUTE_PYARROW_DIR",
                             os.path.join(ROOT, "build-python", "pyarrow", "site"))


def _fetch_pyarrow():
    try:
        import pyarrow  # noqa: F401
        return
    except ImportError:
        pass
    os.makedirs(os.path.dirname(PYARROW_DIR), exist_ok=True)
    with open(os.path.join(os.path.dirname(PYARROW_DIR), ".lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if not os.path.isdir(os.path.join(PYARROW_DIR, "pyarrow")):
            p = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                                "--disable-pip-version-check", "--no-deps", "--target",
                                PYARROW_DIR, "pyarrow==17.0.0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
            if p.returncode != 0:
                pytest.skip("cannot fetch pyarrow==17.0.0 from PyPI (offline?): %s"
                            % p.stdout.decode("utf-8", "replace")[-300:],
                            allow_module_level=True)
    sys.path.append(PYARROW_DIR)


_fetch_pyarrow()
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

N = 523


def _table(seed=0, n=N):
    rs = np.random.RandomState(seed)
    cols = {
        "label": pa.array(rs.randint(0, 7, n), pa.int64()),
        "i8": pa.array(rs.randint(-128, 128, n).astype(np.int8)),
        "i16": pa.array(rs.randint(-2 ** 15, 2 ** 15, n).astype(np.int16)),
        "i32": pa.array(rs.randint(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)),
        "i64": pa.array(rs.randint(-2 ** 62, 2 ** 62, n, dtype=np.int64)),
        "u8": pa.array(rs.randint(0, 256, n).astype(np.uint8)),
        "u16": pa.array(rs.randint(0, 2 ** 16, n).astype(np.uint16)),
        "u32": pa.array(rs.randint(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)),
        "u64": pa.array(rs.randint(0, 2 ** 63, n, dtype=np.uint64)),
        "f32": pa.array((rs.randn(n) * 10.0 ** rs.randint(-30, 30, n)).astype(np.float32)),
        "f64": pa.array(rs.randn(n) * 10.0 ** rs.randint(-300, 30, n)),
        "flag": pa.array(rs.randint(0, 2, n).astype(bool)),
        "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(rs.randn(n * 4).astype(np.float32)), 4),
        "mat": pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(
            pa.array(rs.randint(-999, 999, n * 6).astype(np.int16)), 3), 2),
        "blob": pa.array([bytes(rs.randint(0, 256, rs.randint(0, 40)).astype(np.uint8))
                          for _ in range(n)], pa.binary()),
        "text": pa.array(["row %d ü" % k for k in range(n)], pa.large_string()),
    }
    return pa.table(cols)


SCALARS = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64", "flag"]
FIELDS = SCALARS + ["vec", "mat", "blob", "text"]


def _loader(src, **kw):
    kw.setdefault("as_torch", False)
    kw.setdefault("return_indices", True)
    kw.setdefault("workers", 2)
    kw.setdefault("batch_size", 64)
    kw.setdefault("drop_last", False)
    kw.setdefault("fields", FIELDS)
    return chute.Loader(src, **kw)


def _epoch(ld):
    got = {}
    for b in ld:
        idx = np.array(b["indices"])
        for k, v in b.items():
            if k == "indices":
                continue
            v = np.array(v, copy=True)
            got.setdefault(k, {}).update({int(i): v[j] for j, i in enumerate(idx)})
    ld.close()
    return got


def _check(got, t, n=None):
    """Chute's values against pyarrow's reading of the same table."""
    n = t.num_rows if n is None else n
    assert sorted(got["labels"]) == list(range(n))
    want = {c: t.column(c).to_numpy(zero_copy_only=False) for c in SCALARS + ["label"]}
    for i in range(n):
        assert got["labels"][i] == want["label"][i]
        for c in ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "flag"]:
            assert got[c][i] == int(want[c][i]), (c, i)
            assert got[c][i].dtype == np.int64
        assert got["f32"][i].view(np.uint32) == np.float32(want["f32"][i]).view(np.uint32)
        assert got["f64"][i].view(np.uint32) == np.float32(want["f64"][i]).view(np.uint32)
    vec = np.stack(t.column("vec").to_numpy(zero_copy_only=False))
    mat = np.array(t.column("mat").to_pylist(), dtype=np.int16)
    for i in range(n):
        assert got["vec"][i].dtype == np.float32 and got["vec"][i].shape == (4,)
        assert np.array_equal(got["vec"][i].view(np.uint32), vec[i].view(np.uint32))
        assert got["mat"][i].dtype == np.int16 and np.array_equal(got["mat"][i], mat[i])
    blob, text = t.column("blob").to_pylist(), t.column("text").to_pylist()
    for i in range(n):
        assert bytes(got["blob"][i][:got["blob_lengths"][i]]) == blob[i]
        assert bytes(got["text"][i][:got["text_lengths"][i]]).decode() == text[i]


def test_parquet_directory_values_match_pyarrow(tmp_path):
    t = _table(1)
    d = tmp_path / "pq"
    d.mkdir()
    pq.write_table(t.slice(0, 300), d / "a.parquet", row_group_size=64)
    pq.write_table(t.slice(300), d / "b.parquet", row_group_size=100)
    back = pq.read_table(d)  # what pyarrow reads back, in file order
    ld = _loader(str(d), shuffle=True, seed=3)
    assert ld.dataset.path == str(d)
    _check(_epoch(ld), back)
    f = {x["name"]: x for x in ld.fields}
    assert f["vec"]["shape"] == (4,) and f["mat"]["shape"] == (2, 3)
    assert f["mat"]["dtype"] == "int16" and f["f64"]["dtype"] == "float32"


def test_table_reader_and_ipc_file(tmp_path):
    t = _table(2)
    _check(_epoch(_loader(t)), t)
    # record batches of a reader, some of them sliced (offsets != 0)
    bs = [t.slice(0, 100).to_batches()[0], t.slice(100, 23).to_batches()[0],
          t.slice(123).to_batches()[0]]
    _check(_epoch(_loader(pa.RecordBatchReader.from_batches(t.schema, bs))), t)
    # an Arrow IPC file written by pyarrow, read back by pyarrow
    p = tmp_path / "t.arrow"
    with pa.ipc.new_file(p, t.schema) as w:
        w.write_table(t, max_chunksize=77)
    back = pa.ipc.open_file(p).read_all()
    _check(_epoch(_loader(back, shuffle="shards", shuffle_buffer=50)), back)


def test_same_order_as_an_equal_seed(tmp_path):
    t = _table(4, 200)
    a = [np.array(b["indices"]).tolist() for b in _loader(t, shuffle=True, seed=9)]
    b = [np.array(b["indices"]).tolist() for b in _loader(t, shuffle=True, seed=9)]
    assert a == b and sorted(sum(a, [])) == list(range(200)) and sum(a, []) != list(range(200))


def test_hf_image_column_matches_pil_eval(tree, tmp_path):
    tv = pytest.importorskip("torchvision")
    import torchvision.transforms as TV
    from PIL import Image
    ds = tv.datasets.ImageFolder(tree)
    files = [p for p, _ in ds.samples]
    labels = [y for _, y in ds.samples]
    img = pa.array([{"bytes": open(p, "rb").read(), "path": os.path.basename(p)}
                    for p in files],
                   pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    t = pa.table({"image": img, "label": pa.array(labels, pa.int64())})
    pq.write_table(t, tmp_path / "hf.parquet", row_group_size=5)
    ld = chute.Loader(str(tmp_path / "hf.parquet"), batch_size=8, size=64, transform="eval",
                      dtype="uint8", shuffle=False, drop_last=False, dct_scale=False,
                      as_torch=False, return_indices=True, workers=2)
    tf = TV.Compose([TV.Resize(int(64 / 0.875)), TV.CenterCrop(64)])
    seen = 0
    for images, lab, idx in ld:
        images, lab = np.array(images), np.array(lab)
        for j, i in enumerate(np.array(idx)):
            assert lab[j] == labels[i]
            with Image.open(io.BytesIO(t.column("image")[int(i)]["bytes"].as_py())) as im:
                ref = np.asarray(tf(im.convert("RGB")), dtype=np.float32)
            # the same bound as test_eval_options (rounding only)
            assert np.abs(images[j].astype(np.float32) - ref).mean() < 0.3
            seen += 1
    assert seen == len(files)


def test_nulls_follow_the_corrupt_policy(tmp_path):
    t = pa.table({"label": pa.array([0, 1, 2, 3, 4, 5], pa.int64()),
                  "x": pa.array([1.5, None, 2.5, 3.5, None, 4.5], pa.float32())})
    ld = _loader(t, fields=["x"], on_corrupt="skip", batch_size=6)
    with pytest.warns(chute.SkippedSamplesWarning):
        got = _epoch(ld)
    assert sorted(got["x"]) == [0, 2, 3, 5] and sorted(got["labels"]) == [0, 2, 3, 5]
    assert [got["x"][i] for i in (0, 2, 3, 5)] == [1.5, 2.5, 3.5, 4.5]
    with pytest.raises(chute.CorruptDataError, match="column x is null"):
        _epoch(_loader(t, fields=["x"], on_corrupt="fail", batch_size=6))
    bad = pa.table({"label": pa.array([0, None], pa.int64()), "x": pa.array([1.0, 2.0])})
    with pytest.raises(chute.CorruptDataError, match="label"):
        _loader(bad, fields=["x"])


def test_parquet_cut_short_names_the_file(tmp_path):
    t = _table(5, 100)
    d = tmp_path / "cut"
    d.mkdir()
    pq.write_table(t, d / "a.parquet")
    pq.write_table(t, d / "b.parquet")
    for name in ("b.parquet", "a.parquet"):  # a later file (through the stream), the first
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[:len(data) // 2])
        with pytest.raises((chute.ChuteError, OSError)) as e:
            _loader(str(d))
        assert str(d / name) in str(e.value) and "Parquet" in str(e.value), str(e.value)


def test_unsupported_named_columns_and_misuse(tmp_path):
    t = pa.table({"label": pa.array(["a", "b"]), "x": pa.array([1, 2], pa.int32())})
    with pytest.raises(chute.UnsupportedError, match="label column label"):
        _loader(t, fields=["x"], label_key="label")
    with pytest.raises(chute.NotFoundError, match="no column nope"):
        _loader(t, fields=["x"], image_key="nope", label_key="")
    # a default-named string "label" of a stream is no longer left out with
    # labels of 0 (issue 31.2): refused naming it; label_key="" = no labels
    with pytest.raises(chute.FormatError, match=r"no label column.*label \(u\)"):
        _loader(t, fields=["x"])
    got = _epoch(_loader(t, fields=["x"], label_key=""))
    assert list(got["labels"].values()) == [0, 0] and got["x"][1] == 2
    r = pa.RecordBatchReader.from_batches(t.schema, t.to_batches())
    cap = r.__arrow_c_stream__()
    chute._chute._dataset_from_arrow(cap, label_key="")
    with pytest.raises(ValueError, match="already consumed"):
        chute._chute._dataset_from_arrow(cap, label_key="")


# ---- Parquet larger than memory (row groups on demand), null defaults ----

def _many_groups(path, groups, rows, width, seed=0):
    """A Parquet file of `groups` row groups written by pyarrow: label, x
    (int32 with nulls), v (fixed_size_list<uint8>[width], compressible so
    the file is small and the decoded row groups large)."""
    rs = np.random.RandomState(seed)
    schema = pa.schema([("label", pa.int64()), ("x", pa.int32()),
                        ("v", pa.list_(pa.uint8(), width))])
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for g in range(groups):
            base = g * rows
            x = [None if (base + r) % 7 == 3 else base + r for r in range(rows)]
            v = np.repeat(rs.randint(0, 256, (rows, 1)).astype(np.uint8), width, axis=1)
            v[:, 0] = np.arange(base, base + rows) % 251
            t = pa.table({"label": pa.array(np.arange(base, base + rows) % 10, pa.int64()),
                          "x": pa.array(x, pa.int32()),
                          "v": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), width)},
                         schema=schema)
            w.write_table(t, row_group_size=rows)


def test_parquet_row_groups_loaded_on_demand_and_bounded(tmp_path):
    p = tmp_path / "many.parquet"
    _many_groups(p, groups=40, rows=16, width=4096)
    assert pq.ParquetFile(p).metadata.num_row_groups == 40
    biggest = 16 * 4096  # decoded bytes of a row group's v column
    back = pq.read_table(p)  # what pyarrow reads back
    want_x = back.column("x").to_pylist()
    want_v = np.array(back.column("v").to_pylist(), dtype=np.uint8)
    want_l = back.column("label").to_numpy()
    for shuffle in ("shards", True):
        kw = dict(fields=["x", "v"], batch_size=32, shuffle=shuffle, seed=5, workers=2,
                  shuffle_buffer=64, schema="x=-1", parquet_memory_bytes=4 * biggest)
        if shuffle is True:
            with pytest.warns(UserWarning, match="re-reads row groups"):
                ld = _loader(str(p), **kw)
        else:
            ld = _loader(str(p), **kw)
        loads0, _, _ = chute.arrow.units_stats(ld.dataset)
        assert loads0 == 0  # nothing but the footer and labels read at open
        got = _epoch(ld)
        assert sorted(got["labels"]) == list(range(640))
        for i in range(640):
            assert got["labels"][i] == want_l[i]
            assert got["x"][i] == (-1 if want_x[i] is None else want_x[i]), i
            assert np.array_equal(got["v"][i], want_v[i]), i
        loads, peak, now = chute.arrow.units_stats(ld.dataset)
        # never more than the budget's 4 row groups decoded at once, so
        # not all 40 were materialised together; each was loaded at least once
        assert peak <= 4 and now <= 4, (peak, now)
        assert loads >= 40, loads
    # the same seed and epoch give the same batches; resume continues them
    kw = dict(fields=["x"], batch_size=32, shuffle="shards", seed=7, workers=2,
              shuffle_buffer=48, schema="x=-1", parquet_memory_bytes=3 * biggest,
              as_torch=False)
    order = lambda ld: [np.array(b["indices"]).tolist() for b in ld]  # noqa: E731
    a = order(chute.Loader(str(p), return_indices=True,
                           **{k: v for k, v in kw.items() if k != "workers"}, workers=1))
    ld = chute.Loader(str(p), return_indices=True, **kw)
    b = order(ld)
    assert a == b and sorted(sum(a, [])) == list(range(640))
    # row groups are the shuffle units: a batch's samples come from few row
    # groups (a shuffle buffer of 48 = 3 groups; a global shuffle of 32 of
    # 640 rows would touch ~22 of the 40)
    spread = np.mean([len({i // 16 for i in batch}) for batch in a])
    assert spread < 14, spread  # 9.5 with this seed
    ld = chute.Loader(str(p), return_indices=True, **kw)
    it = iter(ld)
    first = [np.array(next(it)["indices"]).tolist() for _ in range(5)]
    st = ld.state_dict()
    ld.close()
    ld2 = chute.Loader(str(p), return_indices=True, **kw)
    ld2.load_state_dict(st)
    assert first + order(ld2) == a


def test_parquet_peak_memory_is_bounded(tmp_path):
    """Peak RSS while reading a Parquet file of 48 row groups (192 MiB
    decoded, small on disk) with parquet_memory_bytes of 4 row groups stays
    far below the decoded size: not all row groups are materialised."""
    p = tmp_path / "big.parquet"
    _many_groups(p, groups=48, rows=16, width=256 * 1024)
    code = r"""
import resource, sys
sys.path.append(%r)
import numpy as np, chute, pyarrow.parquet as pq
biggest = 16 * 256 * 1024  # decoded bytes of a row group's v column
ld = chute.Loader(%r, fields=["x", "v"], batch_size=16, shuffle="shards", seed=1, workers=2,
                  shuffle_buffer=32, schema="x=-1", parquet_memory_bytes=4 * biggest,
                  as_torch=False, prefetch=2)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = 0
chk = 0
for b in ld:
    v = np.asarray(b["v"])
    n += v.shape[0]
    chk += int(v[:, 0].astype(np.int64).sum())
loads, peak, now = chute.arrow.units_stats(ld.dataset)
print(n, chk, loads, peak, biggest, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
""" % (PYARROW_DIR, str(p))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "build-python", "lib-test"),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=600, env=env)
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    n, chk, loads, peak, biggest, grew_kib = map(int, r.stdout.split()[-6:])
    assert n == 48 * 16
    assert chk == sum(i % 251 for i in range(48 * 16))  # column v's first bytes, as written
    assert peak <= 4 and loads >= 48
    decoded = 48 * biggest
    assert pq.ParquetFile(p).metadata.num_row_groups == 48
    # the decoded row groups total 192 MiB; holding them all would grow RSS
    # by at least that.  Bound: 4 resident + the batch ring + allocator slack.
    assert grew_kib * 1024 < decoded // 2, (grew_kib, decoded)
    print("peak RSS growth %d KiB of %d KiB decoded" % (grew_kib, decoded // 1024))


def test_null_defaults_and_null_errors_name_row(tmp_path):
    p = tmp_path / "n.parquet"
    t = pa.table({"label": pa.array([0, 1, None, 3], pa.int64()),
                  "x": pa.array([1, None, 3, 4], pa.int64()),
                  "f": pa.array([0.5, 1.5, None, 3.5], pa.float32()),
                  "s": pa.array([b"a", None, b"ccc", b"d"], pa.binary()),
                  "v": pa.FixedSizeListArray.from_arrays(
                      pa.array([1, 2, None, 4, 5, 6, 7, 8], pa.int16()), 2)})
    pq.write_table(t, p, row_group_size=2)
    back = pq.read_table(p)
    # a null label with no default: named with file, row group and row
    with pytest.raises(chute.CorruptDataError, match=r"row group 1 row 0: column label is null"):
        _loader(str(p), fields=["x"])
    spec = "label=9, x:int64=-7, f=2.25, s:bytes=zz, v=-3"
    for src in (str(p), back):  # Parquet (units mode) and a table (stream mode)
        got = _epoch(_loader(src, fields=["x", "f", "s", "v"], schema=spec, batch_size=4))
        want_l = [9 if v is None else v for v in back.column("label").to_pylist()]
        assert [got["labels"][i] for i in range(4)] == want_l
        assert [got["x"][i] for i in range(4)] == [1, -7, 3, 4]
        assert [float(got["f"][i]) for i in range(4)] == [0.5, 1.5, 2.25, 3.5]
        assert [bytes(got["s"][i][:got["s_lengths"][i]]) for i in range(4)] == \
            [b"a", b"zz", b"ccc", b"d"]
        # the null element of v[1] takes the default, its neighbour is kept
        assert [got["v"][i].tolist() for i in range(4)] == [[1, 2], [-3, 4], [5, 6], [7, 8]]
    # without a default for x: the error names the column, the row group and row
    with pytest.raises(chute.CorruptDataError,
                       match=r"n\.parquet row group 0 row 1\): column x is null"):
        _epoch(_loader(str(p), fields=["x"], schema="label=9", on_corrupt="fail",
                       batch_size=4))
    with pytest.raises(chute.InvalidArgumentError, match="delivered as int64"):
        _loader(str(p), fields=["x"], schema="label=9,x:float32=1")


# ---- chute inspect / chute bench of Parquet (the C CLI hands off) ----

def _cli_env(with_pyarrow=True):
    env = dict(os.environ)
    paths = [os.path.join(ROOT, "build-python", "lib-test")]
    if with_pyarrow:
        paths.append(PYARROW_DIR)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["CHUTE_PYTHON"] = sys.executable
    return env


def _cli():
    exe = os.path.join(ROOT, "build-python", "lib-test", "chute", "bin", "chute")
    if not os.access(exe, os.X_OK):
        pytest.skip("the chute CLI is not part of this build (%s)" % exe)
    return exe


def test_cli_inspect_and_bench_parquet(tmp_path):
    import json
    exe = _cli()
    d = tmp_path / "pqdir"
    d.mkdir()
    t = pa.table({"label": pa.array(np.arange(90) % 3, pa.int64()),
                  "x": pa.array(np.arange(90), pa.int32()),
                  "v": pa.FixedSizeListArray.from_arrays(
                      pa.array(np.arange(90 * 6, dtype=np.float32)), 6),
                  "s": pa.array([b"q" * (k % 40) for k in range(90)], pa.binary())})
    pq.write_table(t.slice(0, 50), d / "a.parquet", row_group_size=20)
    pq.write_table(t.slice(50), d / "b.parquet", row_group_size=20)
    back = pq.read_table(d)
    r = subprocess.run([exe, "inspect", str(d), "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=_cli_env(), timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["samples"] == back.num_rows == 90 and j["format"] == "parquet"
    assert j["classes"] == len(set(back.column("label").to_pylist())) and not j["images"]
    f = {x["name"]: x for x in j["fields"]}
    assert set(f) == {"x", "v", "s"}
    assert (f["x"]["kind"], f["x"]["dtype"], f["x"]["shape"]) == ("int64", "int64", [])
    assert (f["v"]["kind"], f["v"]["dtype"], f["v"]["shape"]) == ("tensor", "float32", [6])
    assert f["s"]["kind"] == "bytes"
    # per-row delivered bytes from pyarrow's values: x as int64 (8), v 6 float32 (24), s its length
    sizes = [8 + 24 + len(s) for s in back.column("s").to_pylist()]
    want = {}
    for z in sizes:
        b = 1 << (z.bit_length() - 1)
        want[str(b)] = want.get(str(b), 0) + 1
    assert j["size_histogram"] == want and j["bytes"] == sum(sizes)
    # text output, through the same option table
    r = subprocess.run([exe, "inspect", str(d / "a.parquet"), "--label-key", "label"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_cli_env(),
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "parquet, 50 samples in 3 classes, no images" in out and "tensor  float32[6]" in out
    # bench runs the loader over it with the C command's flags
    r = subprocess.run([exe, "bench", str(d), "--batch-size", "16", "--fields", "x,v",
                        "--shuffle", "shards", "--workers", "2", "--epochs", "2", "--json",
                        "--parquet-memory-bytes", "4096"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_cli_env(),
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["samples"] == 2 * 90 and j["row_groups_peak_resident"] <= 2
    # a C-only option is refused by name; an unknown one too
    r = subprocess.run([exe, "bench", str(d), "--scale-min-pct", "50"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=_cli_env(), timeout=300)
    assert r.returncode == 2 and b"--scale-min-pct is not supported for Parquet" in r.stderr


def test_cli_inspect_parquet_image_dimensions(tmp_path):
    """inspect of a Hugging Face-style image column reads each image's header:
    formats, dimensions and undecodable cells, against the sizes PIL wrote."""
    import json
    from PIL import Image
    exe = _cli()
    sizes = [("JPEG", 40, 30)] * 3 + [("PNG", 17, 23)] * 2

    def enc(fmt, w, h):
        b = io.BytesIO()
        Image.new("RGB", (w, h), (w, h, 99)).save(b, format=fmt)
        return b.getvalue()

    cells = [{"bytes": enc(*z), "path": "%d.img" % k} for k, z in enumerate(sizes)]
    cells.append({"bytes": b"not an image at all", "path": "bad.img"})
    img = pa.array(cells, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    t = pa.table({"image": img, "label": pa.array([0, 1, 0, 1, 0, 1], pa.int64())})
    pq.write_table(t, tmp_path / "hf.parquet", row_group_size=4)
    r = subprocess.run([exe, "inspect", str(tmp_path / "hf.parquet"), "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_cli_env(),
                       timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["images"] and j["samples"] == 6
    assert j["formats"] == {"jpeg": 3, "png": 2, "undecodable": 1}
    assert j["top_dimensions"] == [{"width": 40, "height": 30, "count": 3},
                                   {"width": 17, "height": 23, "count": 2}]
    assert j["mean_width"] == round((3 * 40 + 2 * 17) / 5, 1)
    assert j["mean_height"] == round((3 * 30 + 2 * 23) / 5, 1)
    assert j["undecodable"] == 1 and len(j["undecodable_samples"]) == 1
    assert "row group 1 row 1 (sample 5)" in j["undecodable_samples"][0]
    r = subprocess.run([exe, "inspect", str(tmp_path / "hf.parquet")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=_cli_env(), timeout=300)
    out = r.stdout.decode()
    assert r.returncode == 0 and "3 JPEG, 2 PNG, 1 undecodable" in out, out
    assert "40x30 (60.0%)  17x23 (40.0%)" in out, out
    # --verify decodes every image and fails on the bad cell
    r = subprocess.run([exe, "inspect", str(tmp_path / "hf.parquet"), "--verify"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_cli_env(),
                       timeout=300)
    assert r.returncode == 1 and b"verify FAILED: 1 of 6" in r.stderr


def test_cli_parquet_without_pyarrow_says_so(tmp_path):
    exe = _cli()
    pq.write_table(pa.table({"x": pa.array([1, 2])}), tmp_path / "t.parquet")
    probe = subprocess.run([sys.executable, "-c", "import pyarrow"], env=_cli_env(False),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if probe.returncode == 0:
        pytest.skip("pyarrow is importable without PYARROW_DIR here")
    r = subprocess.run([exe, "inspect", str(tmp_path / "t.parquet")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=_cli_env(False), timeout=300)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "Parquet is read through the chute Python package and pyarrow" in err
    assert "pyarrow" in err and "t.parquet" in err and "Traceback" not in err
    env = _cli_env()
    env["CHUTE_PYTHON"] = str(tmp_path / "no-such-python")
    r = subprocess.run([exe, "bench", str(tmp_path / "t.parquet")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env, timeout=300)
    assert r.returncode == 127 and b"cannot be run" in r.stderr, r.stderr


def test_exit_with_parquet_loader_open_does_not_hang(tmp_path):
    """Workers read row groups through Python; an interpreter exiting with
    the loader still open (mid-epoch, loads in flight) must not wait
    forever for them (chute.arrow closes such loaders at exit)."""
    p = tmp_path / "x.parquet"
    _many_groups(p, groups=60, rows=16, width=2048)
    code = r"""
import chute
ld = chute.Loader(%r, fields=["v"], batch_size=16, workers=2, shuffle=True, schema="x=0",
                  parquet_memory_bytes=3 * 16 * 2048, as_torch=False)
it = iter(ld)
next(it); next(it)
print("exiting with the loader open")
""" % str(p)
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=_cli_env(), timeout=120)
    assert r.returncode == 0 and b"exiting with the loader open" in r.stdout, r.stdout


@pytest.mark.parametrize("case", ["labels", "target", "float", "category", "string", "none",
                                  "fraction"])
def test_parquet_label_columns_never_silently_zero(tmp_path, case):
    """Issues 22.2 / 31.2: Hugging Face-style Parquet whose label column is
    named labels or target, or whose label is float, dictionary-encoded
    (pandas category) or string, gave labels of 0 and classes ('0',)
    without a word.  Now: the usual names are found, whole-number floats
    are their numbers, categories their codes (pandas' cat.codes), strings
    their index in sorted order; no label column, or a float that is not
    a whole number, is an error naming the column."""
    import pandas as pd
    rs = np.random.RandomState(5)
    y = rs.randint(0, 4, 12)
    names = np.array(["cat", "dog", "emu", "ant"])
    col = {"labels": ("labels", y), "target": ("target", y),
           "float": ("label", y.astype(np.float64)),
           "category": ("label", pd.Categorical(names[y], categories=["dog", "ant", "emu", "cat"])),
           "string": ("label", names[y]), "none": (None, None),
           "fraction": ("label", y + 0.5)}[case]
    df = pd.DataFrame({"x": np.arange(12, dtype=np.int32)})
    if col[0]:
        df[col[0]] = col[1]
    df.to_parquet(tmp_path / "t.parquet", row_group_size=5)
    p = str(tmp_path / "t.parquet")
    if case == "none":
        with pytest.raises(chute.FormatError, match=r"no label column.*x \(int32\)"):
            _loader(p, fields=["x"])
        return
    if case == "fraction":
        with pytest.raises(ValueError, match="not a whole number"):
            _loader(p, fields=["x"])
        return
    got = _epoch(_loader(p, fields=["x"]))
    labs = [got["labels"][i] for i in sorted(got["labels"])]
    if case == "category":
        want = pd.read_parquet(p)["label"].cat.codes.tolist()
    elif case == "string":
        want = [sorted(set(names[y])).index(v) for v in names[y]]
    else:
        want = y.tolist()
    assert labs == want

