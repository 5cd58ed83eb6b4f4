#!/usr/bin/env python3
"""data_setup fixture: build the test data every other data test reads.

    DATA/tree/     200 real-photo crops in 3 classes (tests/tools/make_tree.py):
                   colour/grey/progressive/CMYK JPEG, RGB/grey/RGBA PNG
    DATA/shards/   the same tree packed by the chute under test (1 MiB shards)
    DATA/SOURCES   "pinned" when the tree was cut from make_tree.py's pinned
                   photos (the same tree on every host), else "other"
    DATA/READY     written last; tests skip (77) when it is missing

Exits 77 when PIL or the photos make_tree.py crops from are missing.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

IMAGES = 200


def setup(ctx):
    ctx.need_modules("PIL")
    shutil.rmtree(ctx.data, ignore_errors=True)
    os.makedirs(ctx.data)
    tree = os.path.join(ctx.data, "tree")
    p = subprocess.run([sys.executable, os.path.join(ctx.tools, "make_tree.py"), tree,
                        "--images", str(IMAGES), "--classes", "3", "--seed", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0 and "no photos found" in err:
        raise T.Skip(err.strip())
    if not ctx.check(p.returncode == 0, "make_tree.py failed:\n" + err):
        return
    # "pinned" or "other": which photos the tree was cut from (make_tree.py).
    with open(os.path.join(ctx.data, "SOURCES"), "w") as f:
        f.write("pinned\n" if "sources: pinned" in p.stdout.decode() else "other\n")
    shards = os.path.join(ctx.data, "shards")
    r = ctx.run([ctx.chute, "pack", tree, shards, "--shard-size", "1M", "--threads", "2"])
    if not ctx.check("packed %d files" % IMAGES in r.out and "skipped 0" in r.out,
                     "unexpected pack summary: %r" % r.out):
        return
    with open(os.path.join(ctx.data, "READY"), "w") as f:
        f.write("%d images\n" % IMAGES)


if __name__ == "__main__":
    sys.exit(T.main({"setup": setup}))
