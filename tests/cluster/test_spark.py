"""chute.spark.write on pyspark local[2,2] (2 cores, a task may fail once).

Ground truth is the input rows themselves (real photos, their labels, in
DataFrame order): the chute dataset must hold every row exactly once with
byte-identical image bytes (chute.Dataset.read) and its label; TFRecord
files are decoded by tests/test_writers.py's stdlib parser (its own CRC32C
table, the Example wire format with no schema from chute); tars by
tarfile.  Failure cases compare every committed file byte for byte with a
clean run's: a task that fails once mid-partition (a UDF raising on its
first attempt), a task whose files were complete when it failed (so two
attempts of the partition wrote complete shards: what a speculative
duplicate leaves), and s3:// on SeaweedFS.
"""
import filecmp
import os
import tarfile

import pytest

pyspark = pytest.importorskip("pyspark")

import chute  # noqa: E402
import chute.spark  # noqa: E402
import test_writers as TW  # noqa: E402  (tests/: the independent TFRecord parser)
from conftest import Ctx  # noqa: E402

PARTS = 4


@pytest.fixture(scope="module")
def spark(weed):
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2,2]")  # 2 cores; maxFailures 2 (local mode's knob)
         .appName("chute-test").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.driver.memory", "1g"))
    # The Python workers' environment comes from the JVM, which an earlier
    # module's session (test_ray's) may have started before `weed` set the
    # AWS_* variables: hand them over explicitly.
    for k, v in os.environ.items():
        if k.startswith("AWS_"):
            s = s.config("spark.executorEnv." + k, v)
    s = s.getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def _df(spark, rows):
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType
    schema = StructType([StructField("image", BinaryType()), StructField("label", IntegerType())])
    rdd = spark.sparkContext.parallelize([(bytearray(b), lab) for b, lab in rows], PARTS)
    return spark.createDataFrame(rdd, schema)  # PARTS partitions, rows in order


def _rows_in_order(df):
    """The rows as the DataFrame holds them: partition order, then row order."""
    return [(bytes(r["image"]), r["label"]) for r in df.collect()]


def _same_files(a, b):
    """Same names and bytes; TFRecord readers' index caches (.chuteidx, made
    when the result is opened and holding file times) aside."""
    na, nb = ([n for n in sorted(os.listdir(d)) if not n.endswith(".chuteidx")] for d in (a, b))
    assert na == nb
    _, mismatch, errors = filecmp.cmpfiles(a, b, na, shallow=False)
    assert not mismatch and not errors


@pytest.fixture(scope="module")
def clean(spark, photos, tmp_path_factory):
    rows, classes = photos
    df = _df(spark, rows)
    want = _rows_in_order(df)
    out = {}
    for fmt in ("chute", "tfrecord", "wds"):
        d = str(tmp_path_factory.mktemp("clean") / fmt)
        res = chute.spark.write(df, d, fmt, classes=classes, shard_size=64 << 10, prefix="train")
        out[fmt] = (d, res)
    return df, want, classes, out


def test_chute_clean_run_every_row_once(clean):
    df, want, classes, out = clean
    d, res = out["chute"]
    assert res["samples"] == len(want) == 48 and res["partitions"] == PARTS
    ds = chute.Dataset(d)
    assert len(ds) == len(want) and list(ds.classes) == classes
    assert [(ds.read(i), ds.label(i)) for i in range(len(ds))] == want
    n = len(res["files"])
    assert n > PARTS and res["files"] == ["shard-%05d.chute" % k for k in range(n)]
    assert sorted(os.listdir(d)) == sorted(res["files"] + ["chute.manifest"])  # nothing else
    ld = chute.Loader(d, batch_size=16, size=32, dtype="uint8", workers=1, seed=1)
    assert sum(len(y) for _, y in ld) == len(want)  # opens as ONE dataset


def test_tfrecord_and_wds_clean(clean):
    _, want, classes, out = clean
    d, res = out["tfrecord"]
    data = [f for f in res["files"] if not f.endswith(".idx")]
    n = len(data)
    assert data == ["train-%05d-of-%05d" % (k, n) for k in range(n)]
    recs = []
    for name in data:
        framed = TW.read_tfrecords(Ctx(), os.path.join(d, name))
        with open(os.path.join(d, name + ".idx")) as f:
            assert [tuple(map(int, x.split())) for x in f] == [(o, s) for o, s, _ in framed]
        recs += [TW.example_features(r) for _, _, r in framed]
    assert [(f["image/encoded"][0], f["image/class/label"][0]) for f in recs] == want
    d, res = out["wds"]
    assert res["files"] == ["shard-%06d.tar" % k for k in range(len(res["files"]))]
    got = []
    for s in res["files"]:
        with tarfile.open(os.path.join(d, s)) as t:
            m = t.getmembers()
            for k in range(0, len(m), 3):
                img = t.extractfile(m[k]).read()
                assert m[k + 1].name.endswith(".cls") and m[k + 2].name.endswith(".txt")
                lab = int(t.extractfile(m[k + 1]).read())
                assert t.extractfile(m[k + 2]).read() == classes[lab].encode()
                got.append((img, lab))
    assert got == want


def test_wds_keys_unique_across_the_dataset(clean):
    """webdataset's own reader over every tar of the 4-partition run: each
    sample's __key__ once in the whole dataset (each task's Writer numbers
    from 0: without a per-partition key prefix partition 1's first key
    repeats partition 0's), and the samples are the input rows in order.
    (The keys are the same in every attempt of a partition:
    test_partition_written_twice_same_as_clean[wds] compares the bytes.)"""
    import collections
    import webdataset
    _, want, _, out = clean
    d, res = out["wds"]
    urls = [os.path.join(d, n) for n in res["files"]]
    samples = list(webdataset.WebDataset(urls, shardshuffle=False))
    keys = collections.Counter(x["__key__"] for x in samples)
    assert len(samples) == len(want) and len(res["files"]) > PARTS
    assert [k for k, n in keys.items() if n > 1] == []
    assert [(x["jpg"] if "jpg" in x else x["png"], int(x["cls"])) for x in samples] == want


@pytest.mark.parametrize("fmt", ["chute", "tfrecord"])
def test_task_failing_once_mid_partition_same_as_clean(clean, tmp_path, fmt):
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType
    df, _, classes, out = clean
    flag = str(tmp_path / "failed-once")

    def fail_once(img, label):
        # partition 1's rows carry label 0 or 1; fail at one of them, once
        if label == want_label and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("injected failure (first attempt)")
        return img
    want_label = _rows_in_order(df)[20][1]
    udf = F.udf(fail_once, BinaryType())
    bad = df.withColumn("image", udf("image", "label"))
    d = str(tmp_path / "out")
    res = chute.spark.write(bad, d, fmt, classes=classes, shard_size=64 << 10, prefix="train")
    assert os.path.exists(flag)  # it did fail, and the retry succeeded
    assert res["samples"] == out[fmt][1]["samples"]
    _same_files(d, out[fmt][0])


@pytest.mark.parametrize("fmt", ["chute", "wds"])
def test_partition_written_twice_same_as_clean(clean, tmp_path, fmt):
    """Attempt 0 of partition 2 writes every file complete, then fails; the
    retry writes them again.  Two complete copies existed (what a
    speculative duplicate leaves): only the reported one is committed."""
    df, _, classes, out = clean
    seen = str(tmp_path / "attempts")
    os.makedirs(seen)

    def on_partition(pid, attempt, result):
        open(os.path.join(seen, "p%d-a%d" % (pid, attempt)), "w").close()
        assert os.listdir(result["dir"])  # its files are complete and there
        if pid == 2 and attempt == 0:
            raise RuntimeError("injected: the task dies after its files were written")
    d = str(tmp_path / "out")
    chute.spark.write(df, d, fmt, classes=classes, shard_size=64 << 10,
                      on_partition=on_partition)
    assert {"p2-a0", "p2-a1"} <= set(os.listdir(seen))
    _same_files(d, out[fmt][0])  # and no _chute_temporary left


def test_refuses_existing_dataset_unless_overwrite(clean, spark, photos, tmp_path):
    df, want, classes, out = clean
    d = str(tmp_path / "o")
    chute.spark.write(df, d, "wds", classes=classes)
    with pytest.raises(chute.InvalidArgumentError, match="holds a dataset already"):
        chute.spark.write(df, d, "wds", classes=classes)
    small = _df(spark, photos[0][:5])
    chute.spark.write(small, d, "wds", classes=classes, overwrite=True)
    assert len(chute.Dataset(d, format="wds")) == 5


def test_damaged_rows_skipped_or_fail(spark, photos, tmp_path):
    rows, classes = photos
    bad = rows[:6] + [(b"\xff\xd8\xff\xe0 not a jpeg" * 3, 0)] + rows[6:12]
    df = _df(spark, bad)
    res = chute.spark.write(df, str(tmp_path / "a"), "chute", classes=classes)
    assert res["samples"] == 12 and res["skipped"] == 1
    ds = chute.Dataset(str(tmp_path / "a"))
    assert [ds.read(i) for i in range(len(ds))] == [b for b, _ in _rows_in_order(df)
                                                   if not b.startswith(b"\xff\xd8\xff\xe0 not")]
    with pytest.raises(Exception, match="sample"):
        chute.spark.write(df, str(tmp_path / "b"), "chute", classes=classes, on_damaged="fail")
    assert not [n for n in os.listdir(str(tmp_path / "b")) if n != "_chute_temporary"] \
        if os.path.exists(str(tmp_path / "b")) else True


def test_s3_seaweedfs_same_as_local(clean, weed):
    w, bucket = weed
    if w is None:
        pytest.skip("no S3 server: %s" % bucket)
    df, want, classes, out = clean
    url = "s3://%s/spark-chute/" % bucket
    res = chute.spark.write(df, url, "chute", classes=classes, shard_size=64 << 10)
    assert res["files"] == out["chute"][1]["files"]
    ds = chute.Dataset(url)
    assert [(ds.read(i), ds.label(i)) for i in range(len(ds))] == want
    st = chute.spark._Store(url)
    from pyarrow import fs
    objs = sorted(i.path.split("/spark-chute/", 1)[1] for i in st.fs.get_file_info(
        fs.FileSelector("%s/spark-chute" % bucket, recursive=True)) if i.type == fs.FileType.File)
    # every object is the dataset's: no temporary object left (SeaweedFS may
    # keep the empty "_chute_temporary" directory entry, which holds nothing)
    assert objs == sorted(res["files"] + ["chute.manifest"])
    for name in res["files"] + ["chute.manifest"]:  # the objects equal the local run's files
        with st.fs.open_input_stream("%s/spark-chute/%s" % (bucket, name)) as f:
            with open(os.path.join(out["chute"][0], name), "rb") as g:
                assert f.read() == g.read(), name
