"""cluster_convert.py — images/s per core converting one DataFrame of real
photos on Spark local[N]: chute.spark.write (bytes pass through, header
checked) vs an img2dataset-style job (PIL decode, resize shortest side to
256, re-encode JPEG q95, write tars, per row as img2dataset does) vs
Mosaic's dataframe_to_mds (when mosaicml-streaming is importable: run it
from the bench-only venv build-bench/mosaic, bench/README.md says how to
make it; never the CI venv).  One run, same rows, ratios printed.

  PYTHONPATH=build-python/lib-test build-cluster/venv/bin/python \
      bench/cluster_convert.py [--images 200] [--cores 2]
  PYTHONPATH=build-python/lib-test PYSPARK_PYTHON=$PWD/build-bench/mosaic/bin/python \
      build-bench/mosaic/bin/python bench/cluster_convert.py     # with Mosaic
"""
import argparse
import glob
import io
import os
import shutil
import sys
import tarfile
import tempfile
import time


def photos(n):
    files = sorted(f for d in ("/usr/share/wallpapers", "/usr/share/backgrounds")
                   for f in glob.glob(d + "/**/*.jp*g", recursive=True))
    if not files:
        sys.exit("no JPEGs under /usr/share/wallpapers or /usr/share/backgrounds")
    rows = []
    while len(rows) < n:
        f = files[len(rows) % len(files)]
        with open(f, "rb") as fh:
            rows.append((bytearray(fh.read()), len(rows) % 10))
    return rows, len(files)


def pil_partition(out_dir):
    def run(pid, it):
        from PIL import Image
        n = 0
        with tarfile.open(os.path.join(out_dir, "%05d.tar" % pid), "w") as t:
            for row in it:
                im = Image.open(io.BytesIO(bytes(row["image"]))).convert("RGB")
                w, h = im.size
                s = 256 / min(w, h)
                im = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BICUBIC)
                b = io.BytesIO()
                im.save(b, "JPEG", quality=95)
                for name, data in (("%09d.jpg" % n, b.getvalue()),
                                   ("%09d.cls" % n, str(row["label"]).encode())):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))
                n += 1
        yield n
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--cores", type=int, default=2)
    a = ap.parse_args()
    from pyspark.sql import SparkSession
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType
    import chute.spark
    rows, nfiles = photos(a.images)
    mb = sum(len(b) for b, _ in rows) / 1e6
    spark = (SparkSession.builder.master("local[%d]" % a.cores).config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = StructType([StructField("image", BinaryType()), StructField("label", IntegerType())])
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, a.cores * 2), schema).cache()
    df.count()
    df.rdd.map(lambda r: len(r["image"])).sum()  # Python workers started before any timing
    tmp = tempfile.mkdtemp(prefix="chute-cbench-")
    res = {}
    t = time.perf_counter()
    chute.spark.write(df, os.path.join(tmp, "chute"), "chute", classes=[str(k) for k in range(10)])
    res["chute.spark.write"] = time.perf_counter() - t
    os.makedirs(os.path.join(tmp, "pil"))
    t = time.perf_counter()
    df.rdd.mapPartitionsWithIndex(pil_partition(os.path.join(tmp, "pil"))).sum()
    res["img2dataset-style PIL re-encode"] = time.perf_counter() - t
    try:
        from streaming.base.converters import dataframe_to_mds
        t = time.perf_counter()
        dataframe_to_mds(df, merge_index=True, mds_kwargs={
            "out": os.path.join(tmp, "mds"), "columns": {"image": "bytes", "label": "int32"}})
        res["Mosaic dataframe_to_mds"] = time.perf_counter() - t
        import json
        with open(os.path.join(tmp, "mds", "index.json")) as f:
            got = sum(sh["samples"] for sh in json.load(f)["shards"])
        if got != len(rows):
            sys.exit("Mosaic wrote %d samples of %d" % (got, len(rows)))
    except ImportError as e:
        print("Mosaic dataframe_to_mds: skipped (%s)" % e)
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    print("%d images (%.1f MB, %d distinct photos), Spark local[%d]" % (len(rows), mb, nfiles,
                                                                       a.cores))
    base = res["chute.spark.write"]
    for k, s in res.items():
        print("  %-34s %7.2f s  %8.1f images/s/core  chute is %.1fx" % (
            k, s, len(rows) / s / a.cores, s / base))


if __name__ == "__main__":
    main()
