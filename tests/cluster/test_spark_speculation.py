"""chute.spark.write under real speculative execution (spark.speculation).

Spark launches a speculative copy of a task only on another host than the
running attempt's (TaskSetManager: no second attempt of a task on a host
that has one), so local[N] and local-cluster[N,...] (every executor on one
host) never speculate.  This module starts a standalone cluster of its own:
a master on 127.0.0.1 and two workers on 127.0.0.2 and 127.0.0.3 (one core
each: two executor processes on two loopback "hosts"), with pyspark's
bundled bin/spark-class, and kills them at the end.

Partition 2's first attempt writes two rows, then crawls (a UDF sleeps on
every further row of that attempt, once the speculative copy has started):
Spark sees a straggler, runs attempt 1 on the other executor, takes its
result and kills attempt 0 mid-partition (its shard files half-written in
its attempt directory).  Marker files written inside the tasks name
partition, attemptNumber and taskAttemptId: the test requires two attempts
of partition 2.  The dataset must then be the clean run's, file for file and
byte for byte (manifest included), hold every row once, and leave nothing
else in dst.
"""
import filecmp
import glob
import os
import socket
import subprocess
import time

import pytest

pyspark = pytest.importorskip("pyspark")

import chute  # noqa: E402
import chute.spark  # noqa: E402

PARTS = 4
SLOW = 2  # the partition whose first attempt straggles


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _wait_workers(ui, n, work, limit=90):
    """Until the master's JSON page lists n alive workers; fails naming the logs."""
    import json
    import urllib.request
    t0 = time.time()
    while time.time() - t0 < limit:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/" % ui, timeout=2) as r:
                if json.load(r).get("aliveworkers", 0) >= n:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the standalone cluster did not have %d workers after %d s (logs in %s)"
                       % (n, limit, work))


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    home = os.path.dirname(pyspark.__file__)
    cls = os.path.join(home, "bin", "spark-class")
    if not os.path.exists(cls):
        pytest.skip("pyspark has no bin/spark-class: cannot start a standalone cluster")
    work = str(tmp_path_factory.mktemp("standalone"))
    port = _free_port()
    # JVMs that start fast (C1 only, serial GC): they live for seconds
    fast = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
               SPARK_DAEMON_JAVA_OPTS=fast)
    procs = []

    def start(args, log, **extra):
        with open(os.path.join(work, log), "w") as f:  # the child keeps its own descriptor
            procs.append(subprocess.Popen([cls] + args, env=dict(env, **extra), stdout=f,
                                          stderr=subprocess.STDOUT))
    try:
        ui = _free_port()
        start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
               str(port), "--webui-port", str(ui)], "master.log")
        for k, host in enumerate(("127.0.0.2", "127.0.0.3")):
            start(["org.apache.spark.deploy.worker.Worker", "spark://127.0.0.1:%d" % port,
                   "--host", host, "--cores", "1", "--memory", "1g", "--webui-port",
                   str(_free_port()), "--work-dir", os.path.join(work, "w%d" % k)],
                  "worker%d.log" % k, SPARK_LOCAL_IP=host)
        # Both workers registered before the driver connects (a driver that
        # finds no master yet retries only after 20 s).
        _wait_workers(ui, 2, work)
        from pyspark.sql import SparkSession
        s = (SparkSession.builder.master("spark://127.0.0.1:%d" % port)
             .appName("chute-speculation").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.memory", "512m").config("spark.executor.memory", "512m")
             .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
             .config("spark.executor.extraJavaOptions", fast)
             .config("spark.speculation", "true")
             .config("spark.speculation.interval", "100ms")
             .config("spark.speculation.multiplier", "1.5")
             .config("spark.speculation.quantile", "0.5")
             .config("spark.speculation.minTaskRuntime", "200ms")
             .getOrCreate())
        s.sparkContext.setLogLevel("ERROR")
        try:
            yield s
        finally:
            s.stop()
    finally:
        for p in procs:  # the master and workers this fixture started (their executors
            p.terminate()  # ended with the SparkContext)
        for p in procs:
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _df(spark, rows):
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType
    schema = StructType([StructField("image", BinaryType()), StructField("label", IntegerType())])
    rdd = spark.sparkContext.parallelize([(bytearray(b), lab) for b, lab in rows], PARTS)
    return spark.createDataFrame(rdd, schema)


def _straggling(spark, rows, marks):
    """The same DataFrame as _df, its rows coming from a generator that,
    inside each task, marks (partition, attemptNumber, taskAttemptId), and
    makes partition SLOW's attempt 0 crawl after its second row once
    another attempt has started.  (Rows stream from this generator to
    chute's task: attempt 0's Writer holds its first rows when it is killed.)"""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    def source(pid, it):
        from pyspark import TaskContext
        tc = TaskContext.get()
        att, tid = tc.attemptNumber(), tc.taskAttemptId()
        open(os.path.join(marks, "p%d-a%d-t%d" % (pid, att, tid)), "w").close()
        deadline = time.time() + 20  # for the speculative copy to start, in all
        for n, row in enumerate(it):
            if pid == SLOW and att == 0 and n >= 2:
                while not glob.glob(os.path.join(marks, "p%d-a[1-9]*" % SLOW)) and \
                        time.time() < deadline:
                    time.sleep(0.05)
                time.sleep(1.0)  # then crawl
            yield row
    schema = StructType([StructField("image", BinaryType()), StructField("label", IntegerType())])
    rdd = spark.sparkContext.parallelize([(bytearray(b), lab) for b, lab in rows], PARTS)
    return spark.createDataFrame(rdd.mapPartitionsWithIndex(source), schema)


def test_speculative_duplicate_leaves_the_clean_dataset(spark, photos, tmp_path):
    rows, classes = photos
    df = _df(spark, rows)
    clean = str(tmp_path / "clean")
    chute.spark.write(df, clean, "chute", classes=classes, shard_size=64 << 10)
    marks = str(tmp_path / "marks")
    os.makedirs(marks)
    done = str(tmp_path / "done")  # which attempts finished their files
    os.makedirs(done)

    def on_partition(pid, attempt, result):
        open(os.path.join(done, "p%d-a%d" % (pid, attempt)), "w").close()

    d = str(tmp_path / "out")
    t0 = time.time()
    res = chute.spark.write(_straggling(spark, rows, marks), d, "chute", classes=classes,
                            shard_size=64 << 10, on_partition=on_partition)
    took = time.time() - t0
    attempts = {}
    for m in os.listdir(marks):
        pid, att, tid = (int(x[1:]) for x in m.split("-"))
        attempts.setdefault(pid, {})[att] = tid
    assert sorted(attempts) == list(range(PARTS))
    assert sorted(attempts[SLOW]) == [0, 1], "no speculative attempt of partition %d ran: %r" % (
        SLOW, attempts)
    assert attempts[SLOW][0] != attempts[SLOW][1]  # two task attempts, not one marked twice
    # attempt 1 finished its files (attempt 0, crawling at 1 s a row, was
    # killed mid-partition: its half-written shard was in its own directory)
    assert "p%d-a1" % SLOW in os.listdir(done), (os.listdir(done), took)
    # the committed dataset: the clean run's files, byte for byte, nothing else
    names = sorted(os.listdir(d))
    assert names == sorted(os.listdir(clean)) and "chute.manifest" in names
    _, mismatch, errors = filecmp.cmpfiles(d, clean, names, shallow=False)
    assert not mismatch and not errors
    ds = chute.Dataset(d)  # every shard the manifest names, complete, each row once
    assert res["samples"] == len(ds) == len(rows)
    assert [(ds.read(i), ds.label(i)) for i in range(len(ds))] == \
        [(bytes(r["image"]), r["label"]) for r in df.collect()]
