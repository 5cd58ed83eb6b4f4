"""chute.Writer (chute_writer_open/add/finish/abort): samples streamed in by
the caller, written as chute shards, TFRecord or WebDataset tars.

Ground truth is the fixture tree's own files (real photos) with labels from
the directory order computed here, and readers that are not the writer:
chute.Dataset / chute.Loader for the chute format (the Loader's batches
equal those of the same photos read from an ImageFolder tree), the
TFRecord framing, masked CRC32C and tf.train.Example wire format decoded by
tests/test_writers.py's stdlib parser (its own CRC table, no schema from
chute), tars read with Python's tarfile.  The s3:// case writes into a real
SeaweedFS (tests/test_remote.py's harness) and reads back from s3://.
"""
import os
import struct
import sys
import tarfile
import threading

import pytest

import chute
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests"))
import chute_testlib as T  # noqa: E402
import test_writers as TW  # noqa: E402  (the independent TFRecord/Example parser)


class _Ctx:
    def note(self, msg):
        print(msg, file=sys.stderr)

    def check(self, cond, msg):
        assert cond, msg


def _samples(tree, every=6):
    """[(path, label, class name)] of every `every`-th photo, ImageFolder order."""
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    out, n = [], 0
    for lab, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(tree, c))):
            if n % every == 0:
                out.append((os.path.join(tree, c, f), lab, c))
            n += 1
    return classes, out


def _read(p):
    with open(p, "rb") as f:
        return f.read()


def _written(d):
    return sorted(os.listdir(d))


def test_chute_format_reads_back_byte_identical(tree, tmp_path):
    classes, want = _samples(tree)
    dst = tmp_path / "out"
    with chute.Writer(dst, shard_size=200 << 10, classes=classes) as w:
        for p, lab, _ in want:
            w.write(_read(p), lab)
    res = w.result
    assert res["samples"] == len(want) and res["format"] == "chute"
    assert res["bytes"] == sum(os.path.getsize(p) for p, _, _ in want)
    shards = ["shard-%05d.chute" % k for k in range(len(res["files"]))]
    assert len(shards) >= 2 and res["files"] == shards
    assert _written(dst) == sorted(shards + ["chute.manifest"])  # no lock, no temporary
    ds = chute.Dataset(str(dst))
    assert ds.kind == "shards" and len(ds) == len(want) and list(ds.classes) == classes
    for i, (p, lab, _) in enumerate(want):
        assert ds.read(i) == _read(p) and ds.label(i) == lab

    # Decoded through the Loader: the same batches as the photos as a tree.
    sub = tmp_path / "tree"
    picked = set(os.path.relpath(p, tree) for p, _, _ in want)
    T.link_tree(tree, str(sub), lambda rel: rel in picked)

    def batches(src):
        ld = chute.Loader(str(src), batch_size=8, size=32, dtype="uint8", workers=1, seed=3)
        return [(x.numpy().copy(), y.numpy().copy()) for x, y in ld]
    got, ref = batches(dst), batches(sub)
    assert len(got) == len(ref) > 0
    for (gx, gy), (rx, ry) in zip(got, ref):
        assert (gy == ry).all() and (gx == rx).all()


def test_tfrecord_checked_by_independent_parser(tree, tmp_path):
    classes, want = _samples(tree, every=10)
    dst = tmp_path / "tfr"
    w = chute.Writer(dst, "tfrecord", shard_size=150 << 10, prefix="val", label_offset=1,
                     classes=classes)
    for p, lab, _ in want:
        w.write(memoryview(_read(p)), lab)  # any bytes-like
    res = w.close()
    n = len([f for f in res["files"] if not f.endswith(".idx")])
    data = ["val-%05d-of-%05d" % (k, n) for k in range(n)]
    assert n >= 2 and res["files"] == sorted(data + [d + ".idx" for d in data])
    # besides them: the tfrecord reader's own index cache (NAME.chuteidx),
    # made when the writer opened its output to count it
    assert [f for f in _written(dst) if not f.endswith(".chuteidx")] == res["files"]
    recs = []
    for name in data:
        framed = TW.read_tfrecords(_Ctx(), str(dst / name))  # both CRCs checked
        idx = [tuple(map(int, line.split())) for line in _read(dst / (name + ".idx")).splitlines()]
        assert idx == [(off, size) for off, size, _ in framed]
        recs += [TW.example_features(r) for _, _, r in framed]
    assert len(recs) == len(want)
    for f, (p, lab, cname) in zip(recs, want):
        assert f["image/encoded"] == [_read(p)]
        assert f["image/class/label"] == [lab + 1]
        assert f["image/class/synset"] == [cname.encode()]


def test_wds_read_by_tarfile(tree, tmp_path):
    classes, want = _samples(tree, every=8)
    dst = tmp_path / "wds"
    with chute.Writer(dst, "wds", shard_size=200 << 10, classes=classes) as w:
        for p, lab, _ in want:
            w.write(_read(p), lab)
    files = w.result["files"]
    assert len(files) >= 2 and files == ["shard-%06d.tar" % k for k in range(len(files))]
    members = []
    for s in files:
        with tarfile.open(str(dst / s)) as t:  # checks every header checksum
            members += [(m.name, t.extractfile(m).read()) for m in t.getmembers()]
    assert len(members) == 3 * len(want)
    for k, (p, lab, cname) in enumerate(want):
        got = dict(members[3 * k:3 * k + 3])
        key = members[3 * k][0].split(".")[0]
        ext = {".jpeg": ".jpg"}.get(os.path.splitext(p)[1].lower(), os.path.splitext(p)[1].lower())
        assert got[key + ext] == _read(p)
        assert got[key + ".cls"] == str(lab).encode() and got[key + ".txt"] == cname.encode()


def test_wds_key_prefix(tree, tmp_path):
    """key_prefix goes before every key (tarfile reads the member names);
    a prefix that would break a key, or on a format without keys, is refused."""
    classes, want = _samples(tree, every=16)
    dst = tmp_path / "wds"
    with chute.Writer(dst, "wds", classes=classes, key_prefix="p00003-") as w:
        for p, lab, _ in want:
            w.write(_read(p), lab)
    with tarfile.open(str(dst / "shard-000000.tar")) as t:
        keys = [m.name.split(".")[0] for m in t.getmembers()][::3]
    assert keys == ["p00003-%06d" % k for k in range(len(want))]
    assert len(chute.Dataset(str(dst), format="wds")) == len(want)  # chute's reader groups them
    for bad in ("a.b", "a/b", "x" * 65, "sp ace"):
        with pytest.raises(chute.InvalidArgumentError, match="key_prefix"):
            chute.Writer(tmp_path / "bad", "wds", key_prefix=bad)
    with pytest.raises(chute.InvalidArgumentError, match="only the wds format"):
        chute.Writer(tmp_path / "bad", "tfrecord", key_prefix="p1-")


def test_damaged_sample_refused_writer_goes_on(tree, tmp_path):
    _, want = _samples(tree, every=30)
    good = [_read(p) for p, _, _ in want]
    with pytest.raises(chute.InvalidArgumentError, match="class table"):
        chute.Writer(tmp_path / "o")  # the chute format needs the class names
    w = chute.Writer(tmp_path / "o", classes=["a", "b"])
    w.write(good[0], 0)
    with pytest.raises((chute.CorruptDataError, chute.FormatError)) as ei:
        w.write(b"\xff\xd8\xff\xe0 this is not a jpeg " * 4, 0)
    assert "sample 1" in str(ei.value)
    with pytest.raises((chute.CorruptDataError, chute.FormatError)):
        w.write(good[1][:10], 0)  # truncated inside the header
    w.write(good[1], 1)
    res = w.close()
    ds = chute.Dataset(str(tmp_path / "o"))
    assert res["samples"] == 2 and [ds.read(i) for i in range(2)] == good[:2]
    assert [ds.label(i) for i in range(2)] == [0, 1]


def test_label_outside_classes_refused(tree, tmp_path):
    _, want = _samples(tree, every=50)
    w = chute.Writer(tmp_path / "o", classes=["a", "b"])
    with pytest.raises(chute.InvalidArgumentError, match="label 2"):
        w.write(_read(want[0][0]), 2)
    w.abort()
    assert _written(tmp_path / "o") == []


@pytest.mark.parametrize("fmt", ["chute", "tfrecord", "wds"])
def test_exception_aborts_and_leaves_nothing(tree, tmp_path, fmt):
    _, want = _samples(tree, every=5)
    dst = tmp_path / "o"
    with pytest.raises(KeyError):
        with chute.Writer(dst, fmt, shard_size=100 << 10, classes=["a", "b", "c"]) as w:
            for p, lab, _ in want:  # several files completed, one open
                w.write(_read(p), lab)
            raise KeyError("boom")
    assert _written(dst) == []  # no shard, no temporary, no manifest, no lock
    with pytest.raises(ValueError, match="closed"):
        w.write(_read(want[0][0]), 0)


def test_empty_writer_refused(tmp_path):
    w = chute.Writer(tmp_path / "o", "tfrecord")
    with pytest.raises(chute.NotFoundError, match="no sample"):
        w.close()
    assert _written(tmp_path / "o") == []


def test_replaces_old_output_and_bad_options(tree, tmp_path):
    _, want = _samples(tree, every=15)
    dst = tmp_path / "o"
    with chute.Writer(dst, "wds", shard_size=1) as w:  # one tar per sample
        for p, lab, _ in want:
            w.write(_read(p), lab)
    (dst / "notes.txt").write_text("mine")
    with chute.Writer(dst, "wds") as w:
        w.write(_read(want[0][0]), 0)
    assert _written(dst) == ["notes.txt", "shard-000000.tar"]  # old tars gone, others kept
    with pytest.raises(chute.InvalidArgumentError, match="unknown output format"):
        chute.Writer(tmp_path / "x", "parquet")
    with pytest.raises(chute.InvalidArgumentError, match="prefix"):
        chute.Writer(tmp_path / "x", "tfrecord", prefix="a/b")


def test_writes_from_threads_in_parallel(tree, tmp_path):
    """Two writers fed from two threads (the GIL is released in write):
    both datasets complete and exact."""
    _, want = _samples(tree, every=4)
    blobs = [(_read(p), lab) for p, lab, _ in want]
    errs = []

    def run(d):
        try:
            with chute.Writer(d, shard_size=64 << 10, classes=["a", "b", "c"]) as w:
                for b, lab in blobs:
                    w.write(b, lab)
        except Exception as e:  # pragma: no cover - reported below
            errs.append(e)
    ts = [threading.Thread(target=run, args=(tmp_path / ("o%d" % i),)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs
    for i in range(2):
        ds = chute.Dataset(str(tmp_path / ("o%d" % i)))
        assert [ds.read(k) for k in range(len(ds))] == [b for b, _ in blobs]


# ---- s3:// (SeaweedFS) -----------------------------------------------------

def _harness():
    import chute_testlib
    return chute_testlib.remote_harness()


@pytest.fixture(scope="module")
def weed(tmp_path_factory):
    pytest.importorskip("boto3")
    os.environ.setdefault("CHUTE_REMOTE_TOOLS",
                          os.path.join(ROOT, "build-python", "remote-tools"))
    R = _harness()
    try:
        w = R.Weed(_Ctx(), str(tmp_path_factory.mktemp("weed")))
    except T.Skip as e:
        pytest.skip(str(e))
    try:
        w.client().create_bucket(Bucket=R.BUCKET)
        yield w, R
    finally:
        w.stop()


@pytest.mark.parametrize("fmt", ["chute", "tfrecord"])
def test_s3_destination(tree, weed, monkeypatch, tmp_path, fmt):
    w3, R = weed
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    for k, v in w3.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    classes, want = _samples(tree, every=9)
    url = "s3://%s/writer-%s/" % (R.BUCKET, fmt)
    with chute.Writer(url, fmt, shard_size=150 << 10, classes=classes) as w:
        for p, lab, _ in want:
            w.write(_read(p), lab)
    keys = sorted(o["Key"].split("/", 1)[1] for o in
                  w3.client().list_objects_v2(Bucket=R.BUCKET, Prefix="writer-%s/" % fmt)["Contents"])
    assert keys == sorted(w.result["files"] + (["chute.manifest"] if fmt == "chute" else []))
    ds = chute.Dataset(url, format=None if fmt == "chute" else fmt)
    assert len(ds) == len(want) and [ds.label(i) for i in range(len(ds))] == [x[1] for x in want]
    if fmt == "chute":
        got = [ds.read(i) for i in range(len(ds))]
    else:  # the objects themselves, through the independent parser
        got = []
        for name in w.result["files"]:
            if not name.endswith(".idx"):
                blob = w3.client().get_object(Bucket=R.BUCKET, Key="writer-%s/%s" % (fmt, name))
                local = str(tmp_path / name)
                with open(local, "wb") as f:
                    f.write(blob["Body"].read())
                got += [TW.example_features(r)["image/encoded"][0]
                        for _, _, r in TW.read_tfrecords(_Ctx(), local)]
    assert got == [_read(p) for p, _, _ in want]
    with pytest.raises(chute.InvalidArgumentError, match="holds a dataset already"):
        chute.Writer(url, fmt, classes=classes)
