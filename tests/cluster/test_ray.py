"""Ray Data through chute (chute.ray): the datasource reads every sample
exactly once at any parallelism, with chute's pixels; the datasink commits
one dataset or nothing.

Runs in the cluster venv (scripts/cluster_venv.sh: ray[data] 2.52.1) with
the checkout's package built into build-python/lib-test (tests/python's
conftest builds it).  One local Ray cluster for the module
(ray.init(num_cpus=2)): its start is most of this file's time.

Expected values come from outside chute.ray: the photo files themselves
(their bytes, their class directory) and PIL's decode of them.
"""
import collections
import hashlib
import io
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "build-python", "lib-test")
if not os.environ.get("CHUTE_TEST_INSTALLED"):
    sys.path.insert(0, LIB)
    # Ray's workers are new processes: they find the same package this way.
    os.environ["PYTHONPATH"] = LIB + os.pathsep + os.environ.get("PYTHONPATH", "")
# ... and this module, whose datasink subclasses they unpickle.
os.environ["PYTHONPATH"] = (os.path.dirname(os.path.abspath(__file__)) + os.pathsep
                            + os.environ.get("PYTHONPATH", ""))

ray = pytest.importorskip("ray")
import ray.data  # noqa: E402
from PIL import Image  # noqa: E402

import chute  # noqa: E402
import chute.ray  # noqa: E402

IMAGES = 60
FMT = "chute"  # the failure tests
CLASSES = 3


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    yield
    ray.shutdown()


def _run(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """An ImageFolder tree of real photos and the same samples as chute
    shards, TFRecord files and WebDataset tars (several files each)."""
    base = tmp_path_factory.mktemp("ray")
    tree = str(base / "tree")
    _run(sys.executable, os.path.join(ROOT, "tests", "tools", "make_tree.py"), tree,
         "--images", str(IMAGES), "--classes", str(CLASSES), "--seed", "5", "--max-side", "200")
    out = {"tree": tree}
    out["shards"] = str(base / "shards")
    chute.pack(tree, out["shards"], shard_size=400_000)
    cli = os.path.join(os.path.dirname(chute.__file__), "bin", "chute")
    for fmt in ("tfrecord", "wds"):
        out[fmt] = str(base / fmt)
        _run(cli, "convert", out["shards"], out[fmt], "--format", fmt, "--shard-size", "400K")
    # The truth, from the files: each photo's bytes -> its class index
    # (class directories in sorted order, as torchvision's ImageFolder).
    truth = {}
    for label, cls in enumerate(sorted(os.listdir(tree))):
        for name in os.listdir(os.path.join(tree, cls)):
            with open(os.path.join(tree, cls, name), "rb") as f:
                blob = f.read()
            truth[hashlib.sha256(blob).hexdigest()] = (label, blob)
    assert len(truth) == IMAGES  # distinct photos: a duplicate row cannot hide
    out["truth"] = truth
    return out


def _rows(ds):
    return ds.take_all()


def _check_exactly_once(rows, truth):
    got = collections.Counter(hashlib.sha256(r["bytes"]).hexdigest() for r in rows)
    assert sorted(got.values()) == [1] * len(truth) and set(got) == set(truth), (
        "missing %d, repeated %d, foreign %d" % (len(set(truth) - set(got)),
                                                 sum(1 for v in got.values() if v > 1),
                                                 len(set(got) - set(truth))))
    for r in rows:
        assert r["label"] == truth[hashlib.sha256(r["bytes"]).hexdigest()][0]
    assert sorted(int(r["index"]) for r in rows) == list(range(len(truth)))


@pytest.mark.parametrize("blocks", [1, 3, 7])
def test_shards_every_sample_once(data, blocks):
    ds = chute.ray.read(data["shards"], columns=["bytes", "label", "index"],
                        batch_size=8, override_num_blocks=blocks)
    assert ds.count() == IMAGES
    rows = _rows(ds)
    _check_exactly_once(rows, data["truth"])


@pytest.mark.parametrize("fmt,blocks", [("tfrecord", 4), ("wds", 5), ("tree", 2)])
def test_formats_every_sample_once(data, fmt, blocks):
    ds = chute.ray.read(data[fmt], columns=["bytes", "label", "index"], batch_size=16,
                        override_num_blocks=blocks)
    _check_exactly_once(_rows(ds), data["truth"])


def _pil_eval(blob, size):
    """torchvision's Resize(int(size / 0.875)) + CenterCrop(size), in PIL."""
    with Image.open(io.BytesIO(blob)) as im:
        im = im.convert("RGB")
        w, h = im.size
        short = int(size / 0.875)
        if w <= h:
            nw, nh = short, int(short * h / w)
        else:
            nw, nh = int(short * w / h), short
        im = im.resize((nw, nh), Image.BILINEAR)
        top, left = int(round((nh - size) / 2.0)), int(round((nw - size) / 2.0))
        return np.asarray(im.crop((left, top, left + size, top + size)), dtype=np.float32)


def test_decoded_pixels_match_pil(data):
    size = 48
    ds = chute.ray.read(data["tfrecord"], columns=["image", "bytes", "label", "index"],
                        size=size, dct_scale=False, batch_size=8, override_num_blocks=3)
    rows = _rows(ds)
    _check_exactly_once(rows, data["truth"])
    refs = {int(r["index"]): _pil_eval(r["bytes"], size) for r in rows}
    for r in rows:
        img = np.asarray(r["image"])
        assert img.shape == (size, size, 3) and img.dtype == np.uint8
        diff = np.abs(img.astype(np.float32) - refs[int(r["index"])]).mean()
        # the bound tests/python (test_arrow, test_eval_options) use: rounding only
        assert diff < 0.3, (int(r["index"]), diff)
        other = refs[(int(r["index"]) + 1) % IMAGES]
        assert np.abs(img.astype(np.float32) - other).mean() > 10 * max(diff, 0.1)


def test_train_crops_follow_the_sample_not_the_split(data):
    """transform="train" draws each crop from (seed, sample): the same pixels
    at 1 and 3 read tasks; another seed, other crops."""
    def crops(blocks, **kw):
        rows = chute.ray.read(data["shards"], size=32, transform="train", batch_size=16,
                              override_num_blocks=blocks, **kw).take_all()
        return {int(r["index"]): np.asarray(r["image"]) for r in rows}
    one, three, other = crops(1), crops(3), crops(3, seed=5)
    assert sorted(one) == sorted(three) == list(range(IMAGES))
    assert all(np.array_equal(one[i], three[i]) for i in one)
    assert sum(not np.array_equal(one[i], other[i]) for i in one) > IMAGES * 0.9


def _weed_harness():
    """tests/test_remote.py's SeaweedFS (`weed mini` on 127.0.0.1), as
    tests/python/test_remote_loader.py uses it."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    os.environ.setdefault("CHUTE_REMOTE_TOOLS", os.path.join(ROOT, "build-python",
                                                             "remote-tools"))
    import chute_testlib
    return chute_testlib.remote_harness()


class _Ctx:
    def note(self, msg):
        print(msg, file=sys.stderr)

    def check(self, cond, msg):
        assert cond, msg


def test_s3_shards_every_sample_once(data, tmp_path, monkeypatch):
    """s3:// through chute's own S3 source in every read task (the
    credentials reach the workers through their environment)."""
    pytest.importorskip("boto3")
    R = _weed_harness()
    import chute_testlib as T
    try:
        w = R.Weed(_Ctx(), str(tmp_path))
    except T.Skip as e:
        pytest.skip(str(e))
    try:
        c = w.client()
        c.create_bucket(Bucket=R.BUCKET)
        for name in os.listdir(data["shards"]):
            c.upload_file(os.path.join(data["shards"], name), R.BUCKET, "shards/" + name)
        env = {k: v for k, v in w.env().items() if k.startswith("AWS_")}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        ds = chute.ray.read("s3://%s/shards/" % R.BUCKET, columns=["bytes", "label", "index"],
                            override_num_blocks=3,
                            ray_remote_args={"runtime_env": {"env_vars": env}})
        _check_exactly_once(ds.take_all(), data["truth"])
    finally:
        w.stop()


def test_bad_input_fails_in_the_driver(data, tmp_path):
    with pytest.raises(chute.NotFoundError):
        chute.ray.read(str(tmp_path / "nothing-here"))
    with pytest.raises(ValueError, match="shuffle"):
        chute.ray.read(data["shards"], shuffle=True)
    with pytest.raises(ValueError, match="columns"):
        chute.ray.read(data["shards"], columns=["image", "pixels"])


@pytest.fixture(scope="module")
def damaged(data, tmp_path_factory):
    """A copy of the tree with one photo cut short (its JPEG undecodable)."""
    import shutil
    tree = str(tmp_path_factory.mktemp("damaged") / "tree")
    shutil.copytree(data["tree"], tree)
    cls = sorted(os.listdir(tree))[1]
    victim = os.path.join(tree, cls, sorted(os.listdir(os.path.join(tree, cls)))[3])
    with open(victim, "rb") as f:
        head = f.read(300)
    with open(victim, "wb") as f:
        f.write(head)
    return tree, victim


def test_corrupt_sample_fails_or_is_left_out(data, damaged):
    tree, victim = damaged
    with pytest.raises(Exception, match=os.path.basename(victim)) as e:
        chute.ray.read(tree, size=32, override_num_blocks=3).take_all()
    assert isinstance(e.value, chute.CorruptDataError), type(e.value)
    # skip: the damaged photo is missing, every other one there once (the
    # Loader's replacement sample is not delivered a second time).
    rows = chute.ray.read(tree, columns=["image", "bytes", "label", "index"], size=32,
                          on_corrupt="skip", override_num_blocks=3).take_all()
    want = dict(data["truth"])
    with open(os.path.join(data["tree"], os.path.relpath(victim, tree)), "rb") as f:
        del want[hashlib.sha256(f.read()).hexdigest()]
    got = collections.Counter(hashlib.sha256(r["bytes"]).hexdigest() for r in rows)
    assert set(got) == set(want) and max(got.values()) == 1


# ---------------------------------------------------------------------------
# Writing (chute.ray.write / ChuteDatasink on chute.Writer)

def _rows_in_order(data):
    """(bytes, label, class names) of the photos in tree order: the input."""
    import chute_testlib  # here: Ray's workers import this module without tests/ on their path
    return chute_testlib.tree_rows(data["tree"])


def _ray_rows(rows, blocks):
    import pyarrow as pa
    cut = [len(rows) * k // blocks for k in range(blocks + 1)]
    return ray.data.from_arrow([
        pa.table({"image": pa.array([b for b, _ in rows[cut[k]:cut[k + 1]]], pa.binary()),
                  "label": pa.array([l for _, l in rows[cut[k]:cut[k + 1]]], pa.int64())})
        for k in range(blocks)])


def _read_back(dst, fmt):
    ds = chute.Dataset(dst, format={"chute": "shards"}.get(fmt, fmt))
    return [(ds.read(i), ds.label(i)) for i in range(len(ds))], list(ds.classes)


def _read_with_peer(dst, fmt, files):
    """The rows as the format's own readers see them: the webdataset package
    for tars, tests/test_writers.py's stdlib TFRecord/Example parser (both
    CRCs checked) for TFRecord; None for chute (read back by chute above)."""
    if fmt == "wds":
        import webdataset
        urls = [os.path.join(dst, n) for n in sorted(files) if n.endswith(".tar")]
        out = []
        for sample in webdataset.WebDataset(urls, shardshuffle=False):
            image = [sample[k] for k in ("jpg", "jpeg", "png", "bmp") if k in sample]
            assert len(image) == 1, sorted(sample)
            out.append((image[0], int(sample["cls"])))
        return out
    if fmt == "tfrecord":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import test_writers as TW
        out = []
        for n in sorted(files):
            if "." in n:
                continue
            for _, _, rec in TW.read_tfrecords(_Ctx(), os.path.join(dst, n)):
                f = TW.example_features(rec)
                out.append((f["image/encoded"][0], f["image/class/label"][0]))
        return out
    return None


def _serial_parts(ref, fmt, rows, counts, classes, **kw):
    """The reference: chute.Writer run serially, part after part, over the
    same rows the write tasks got.  Returns each part's data files in order,
    with their manifest counts for the chute format."""
    files = []
    a = 0
    for k, n in enumerate(counts):
        part = os.path.join(ref, "part-%d" % k)
        # a dataset in parts: WebDataset keys carry the part ("p00001-000000")
        extra = {"key_prefix": "p%05d-" % k} if fmt == "wds" else {}
        w = chute.Writer(part, fmt, classes=classes, **kw, **extra)
        for b, l in rows[a:a + n]:
            w.write(b, l)
        info = w.close()
        a += n
        counts_of = {}
        if fmt == "chute":
            with open(os.path.join(part, "chute.manifest")) as f:
                for ln in f:
                    if ln.startswith("shard "):
                        counts_of[ln.split()[1]] = int(ln.split()[2])
        for name in info["files"]:
            if name.endswith(".chute") or name.endswith(".tar") or (
                    fmt == "tfrecord" and "." not in name):
                files.append((os.path.join(part, name), counts_of.get(name)))
    return files


@pytest.mark.parametrize("fmt", ["chute", "tfrecord", "wds"])
def test_write_round_trip(data, tmp_path, fmt):
    rows, classes = _rows_in_order(data)
    dst = str(tmp_path / "out")
    res = chute.ray.write(_ray_rows(rows, 4), dst, fmt, classes=classes, shard_size=300_000)
    assert sorted(os.listdir(dst)) == sorted(res["files"])  # nothing else left there
    assert res["samples"] == len(rows)
    got, got_classes = _read_back(dst, fmt)
    assert got == rows  # every row once, in the dataset's order, with its label
    if fmt == "chute":
        assert got_classes == classes
    peer = _read_with_peer(dst, fmt, res["files"])
    assert peer is None if fmt == "chute" else peer == rows
    # The same files as chute.Writer run serially over the same parts (what
    # chute.spark.write's tasks write for the same partitions), in order.
    assert sum(res["parts"]) == len(rows) and len(res["parts"]) >= 2
    ref = _serial_parts(str(tmp_path / "ref"), fmt, rows, res["parts"], classes,
                        shard_size=300_000)
    names = {"chute": "shard-%05d.chute", "wds": "shard-%06d.tar"}
    for k, (path, _) in enumerate(ref):
        final = names[fmt] % k if fmt in names else "train-%05d-of-%05d" % (k, len(ref))
        with open(path, "rb") as a, open(os.path.join(dst, final), "rb") as b:
            assert a.read() == b.read(), (path, final)
    data_files = [n for n in res["files"] if n.endswith((".chute", ".tar"))
                  or (fmt == "tfrecord" and "." not in n)]
    assert len(data_files) == len(ref) >= 2
    if fmt == "chute":  # the one manifest, as docs/FORMAT.md spells it
        want = ["chute-dataset 1"] + [
            "shard %s %d %d" % (names["chute"] % k, n, os.path.getsize(p))
            for k, (p, n) in enumerate(ref)] + ["end %d %d" % (len(ref), len(rows))]
        with open(os.path.join(dst, "chute.manifest")) as f:
            assert f.read() == "\n".join(want) + "\n"


def test_write_without_classes_names_them_by_number(data, tmp_path):
    rows, _ = _rows_in_order(data)
    dst = str(tmp_path / "out")
    chute.ray.write(_ray_rows(rows, 3), dst)
    got, got_classes = _read_back(dst, "chute")
    assert got == rows and got_classes == [str(k) for k in range(CLASSES)]
    with pytest.raises(FileExistsError, match="not empty"):
        chute.ray.write(_ray_rows(rows, 3), dst)  # never over an existing dataset


@pytest.mark.parametrize("fmt", ["chute", "wds"])
def test_write_equals_spark(data, tmp_path, fmt):
    """The same rows in the same partitions through chute.spark.write
    (local[2]) and chute.ray.write: the same files, byte for byte."""
    from chute.spark import write as spark_write
    from pyspark.sql import SparkSession
    rows, classes = _rows_in_order(data)
    ray_dst, spark_dst = str(tmp_path / "ray"), str(tmp_path / "spark")
    res = chute.ray.write(_ray_rows(rows, 4), ray_dst, fmt, classes=classes,
                          shard_size=300_000)
    assert res["parts"] == [15, 15, 15, 15]
    spark = (SparkSession.builder.master("local[2]").appName("chute-ray-vs-spark")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        # parallelize cuts a list as _ray_rows does: [k*n//P, (k+1)*n//P)
        rdd = spark.sparkContext.parallelize([(bytearray(b), l) for b, l in rows], 4)
        df = spark.createDataFrame(rdd, "image binary, label long")
        spark_write(df, spark_dst, fmt, classes=classes, shard_size=300_000)
    finally:
        spark.stop()
    names = sorted(os.listdir(spark_dst))
    assert names == sorted(os.listdir(ray_dst)) and len(names) >= 4
    for name in names:
        with open(os.path.join(ray_dst, name), "rb") as a, \
                open(os.path.join(spark_dst, name), "rb") as b:
            assert a.read() == b.read(), name


def test_write_damaged_rows_skipped_or_failing(data, tmp_path):
    rows, classes = _rows_in_order(data)
    bad = list(rows)
    bad[7] = (rows[7][0][:200], rows[7][1])  # a JPEG cut short: its header says more
    bad[31] = (b"not an image at all", rows[31][1])
    dst = str(tmp_path / "skip")
    res = chute.ray.write(_ray_rows(bad, 3), dst, classes=classes)
    assert res["skipped"] == 2 and res["samples"] == len(rows) - 2
    got, _ = _read_back(dst, "chute")
    assert got == [r for k, r in enumerate(rows) if k not in (7, 31)]
    dst = str(tmp_path / "fail")
    with pytest.raises(Exception) as e:
        chute.ray.write(_ray_rows(bad, 3), dst, classes=classes, on_damaged="fail")
    assert isinstance(e.value, (chute.CorruptDataError, chute.FormatError)), repr(e.value)
    assert not os.path.exists(dst) or os.listdir(dst) == []


class _DiesOnce(chute.ray.ChuteDatasink):
    """Task 1's first attempt writes its first block, then its process dies (no
    abort, no cleanup: what a killed node leaves); Ray runs the task again."""

    def __init__(self, marker, *a, **kw):
        super().__init__(*a, **kw)
        self.marker = marker

    def write(self, blocks, ctx):
        if ctx.task_idx != 1 or os.path.exists(self.marker):
            return super().write(blocks, ctx)

        def then_die():
            for b in blocks:
                yield b  # written (complete shards on disk, the last one not)
                open(self.marker, "w").close()
                os._exit(1)
        return super().write(then_die(), ctx)


class _Fails(chute.ray.ChuteDatasink):
    """Task 1 raises after writing its first block, every attempt."""

    def write(self, blocks, ctx):
        if ctx.task_idx != 1:
            return super().write(blocks, ctx)

        def then_raise():
            for b in blocks:
                yield b
                raise RuntimeError("injected write failure")
        return super().write(then_raise(), ctx)


def test_write_failed_task_leaves_nothing(data, tmp_path):
    rows, classes = _rows_in_order(data)
    dst = str(tmp_path / "out")
    with pytest.raises(Exception, match="injected write failure"):
        _ray_rows(rows, 6).write_datasink(_Fails(dst, FMT, classes=classes,
                                                 shard_size=100_000))
    assert not os.path.exists(dst) or os.listdir(dst) == []


def test_write_retried_task_leaves_the_clean_dataset(data, tmp_path):
    rows, classes = _rows_in_order(data)
    clean = str(tmp_path / "clean")
    chute.ray.write(_ray_rows(rows, 3), clean, FMT, classes=classes, shard_size=100_000)
    dst = str(tmp_path / "out")
    marker = str(tmp_path / "died")
    ds = _ray_rows(rows, 3)
    ds.context.execution_options.preserve_order = True
    sink = _DiesOnce(marker, dst, FMT, classes=classes, shard_size=100_000)
    ds.write_datasink(sink, ray_remote_args={"max_retries": 2})
    assert os.path.exists(marker)  # the attempt did die
    assert sorted(os.listdir(dst)) == sorted(os.listdir(clean))
    for name in os.listdir(clean):
        with open(os.path.join(clean, name), "rb") as a, open(os.path.join(dst, name), "rb") as b:
            assert a.read() == b.read(), name


def _s3_objects(url):
    """{name: bytes} of every object under the s3:// prefix url (pyarrow.fs)."""
    from pyarrow import fs
    st = chute._commit.Store(url)
    key = url[len("s3://"):].rstrip("/")
    out = {}
    for i in st.fs.get_file_info(fs.FileSelector(key, recursive=True, allow_not_found=True)):
        if i.type == fs.FileType.File:
            with st.fs.open_input_stream(i.path) as f:
                out[i.path[len(key) + 1:]] = f.read()
    return out


def test_write_s3_equals_spark(data, weed, tmp_path):
    """chute.ray.write to s3:// (SeaweedFS) through the commit protocol
    chute.spark.write uses: for each format the objects are the files
    chute.spark.write (local[2]) makes of the same rows in the same
    partitions, byte for byte, nothing else is left under the prefix, and
    the dataset reads back from s3:// with chute and (from the same bytes)
    with the format's own reader."""
    import chute._commit  # noqa: F401
    from chute.spark import write as spark_write
    from pyspark.sql import SparkSession
    w, bucket = weed
    if w is None:
        pytest.skip("no S3 server: %s" % bucket)
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    rows, classes = _rows_in_order(data)
    fmts = ("chute", "tfrecord", "wds")
    got = {}
    for fmt in fmts:
        url = "s3://%s/ray-%s/" % (bucket, fmt)
        res = chute.ray.write(_ray_rows(rows, 4), url, fmt, classes=classes,
                              shard_size=300_000,
                              ray_remote_args={"runtime_env": {"env_vars": env}})
        assert res["parts"] == [15, 15, 15, 15] and res["samples"] == len(rows)
        got[fmt] = (url, res, _s3_objects(url))
    builder = (SparkSession.builder.master("local[2]").appName("chute-ray-s3-vs-spark")
               .config("spark.ui.enabled", "false"))
    spark = builder.getOrCreate()
    try:
        rdd = spark.sparkContext.parallelize([(bytearray(b), l) for b, l in rows], 4)
        df = spark.createDataFrame(rdd, "image binary, label long")
        for fmt in fmts:
            spark_write(df, str(tmp_path / fmt), fmt, classes=classes, shard_size=300_000)
    finally:
        spark.stop()
    for fmt in fmts:
        url, res, objs = got[fmt]
        local = str(tmp_path / fmt)
        names = sorted(n for n in os.listdir(local) if not n.endswith(".chuteidx"))
        # every object is the dataset's: no attempt left (SeaweedFS may keep
        # an empty "_chute_temporary" directory entry, which holds nothing)
        assert sorted(objs) == names == res["files"] and len(names) >= 4, fmt
        for name in names:
            with open(os.path.join(local, name), "rb") as f:
                assert objs[name] == f.read(), (fmt, name)
        ds = chute.Dataset(url, format={"chute": None}.get(fmt, fmt))
        assert [(ds.read(i), ds.label(i)) for i in range(len(ds))] == rows, fmt
        fetched = tmp_path / ("from-s3-" + fmt)  # the objects, for the peer's reader
        fetched.mkdir()
        for name, blob in objs.items():
            (fetched / name).write_bytes(blob)
        peer = _read_with_peer(str(fetched), fmt, names)
        assert peer is None if fmt == "chute" else peer == rows
