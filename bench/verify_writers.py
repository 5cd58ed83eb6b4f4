#!/usr/bin/env python3
"""verify_writers.py — read what `chute convert` / `chute pack --format`
write with the real tools, and compare with the source tree's own bytes.

    /work/wt/tfvenv/bin/python bench/verify_writers.py [CHUTE] [--images N] [--work DIR]

Not run by CI (needs TensorFlow and webdataset; CI checks the same files
with an independent stdlib reader in tests/test_writers.py).  Steps:

  1. an ImageFolder tree of JPEGs and PNGs (PIL; two sizes per class) plus
     one undecodable file, which the writers must skip;
  2. `chute pack TREE OUT --format tfrecord|wds` and `chute convert` (tree
     -> TFRecord with --label-offset 1, TFRecord -> wds), several files
     each (a small --shard-size);
  3. TensorFlow: tf.data.TFRecordDataset over the files in name order,
     tf.io.parse_single_example with imagenet_to_gcs.py's feature spec;
     every record's image/encoded equals the tree file named by
     image/class/synset + image/filename, records come in the tree's
     (torchvision) order, labels are the class index (+ offset), format,
     height, width as PIL sees them; CRCs are checked by TensorFlow itself
     (a bad one raises DataLossError);
  4. DALI's tfrecord2idx layout: one "offset size" line per record,
     offsets contiguous from 0, sizes summing to the file size, each size
     = 8 + 4 + the record's length + 4, count = TensorFlow's record count;
  5. webdataset.WebDataset over the tars: keys in order, .jpg/.png bytes
     equal the tree's, .cls the label, .txt the class name.
Prints one OK line per check and exits 1 on the first mismatch.
"""
import argparse
import glob
import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def die(msg):
    print("FAIL:", msg)
    sys.exit(1)


def make_tree(root, per_class):
    from PIL import Image
    classes = ["n01440764", "n01443537", "n01484850"]
    files = []
    for ci, c in enumerate(classes):
        os.makedirs(os.path.join(root, c))
        for i in range(per_class):
            im = Image.new("RGB", (64 + 8 * i, 48 + 4 * ci), (40 * ci, 9 * i % 256, 200))
            for x in range(0, im.width, 7):
                im.putpixel((x, x % im.height), (255, 255, 0))
            ext = "png" if i % 4 == 3 else "JPEG"
            p = os.path.join(root, c, "%s_%04d.%s" % (c, i, ext))
            im.save(p, format="PNG" if ext == "png" else "JPEG", quality=85)
    with open(os.path.join(root, classes[1], "broken.JPEG"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not a jpeg")
    # torchvision's order: classes sorted, files sorted; the broken one is skipped.
    for ci, c in enumerate(sorted(classes)):
        for n in sorted(os.listdir(os.path.join(root, c))):
            if n != "broken.JPEG":
                files.append((os.path.join(root, c, n), ci, c))
    return files


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        die("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    print("   ", p.stdout.strip())
    return p


def check_tfrecord(d, files, offset):
    import tensorflow as tf
    from PIL import Image
    paths = sorted(p for p in glob.glob(os.path.join(d, "train-*-of-*")) if not p.endswith(".idx"))
    if len(paths) < 2:
        die("expected several TFRecord files, got %s" % paths)
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/channels": tf.io.FixedLenFeature([], tf.int64),
        "image/colorspace": tf.io.FixedLenFeature([], tf.string),
    }
    k = 0
    for p in paths:
        raw = list(tf.data.TFRecordDataset([p]))
        for rec in raw:
            ex = tf.io.parse_single_example(rec, spec)
            path, label, cname = files[k]
            data = open(path, "rb").read()
            if ex["image/encoded"].numpy() != data:
                die("%s record %d: image/encoded differs from %s" % (p, k, path))
            if int(ex["image/class/label"]) != label + offset:
                die("%s record %d: label %d, want %d" % (p, k, int(ex["image/class/label"]),
                                                         label + offset))
            if ex["image/class/synset"].numpy().decode() != cname:
                die("record %d: synset %r" % (k, ex["image/class/synset"].numpy()))
            if ex["image/filename"].numpy().decode() != os.path.basename(path):
                die("record %d: filename %r" % (k, ex["image/filename"].numpy()))
            im = Image.open(io.BytesIO(data))
            if (int(ex["image/width"]), int(ex["image/height"])) != im.size:
                die("record %d: size %s vs PIL %s" % (k, (int(ex["image/width"]),
                                                          int(ex["image/height"])), im.size))
            want_fmt = {"JPEG": b"JPEG", "PNG": b"PNG"}[im.format]
            if ex["image/format"].numpy() != want_fmt:
                die("record %d: format %r" % (k, ex["image/format"].numpy()))
            k += 1
        # DALI tfrecord2idx layout
        lines = open(p + ".idx").read().splitlines()
        if len(lines) != len(raw):
            die("%s.idx: %d lines for %d records" % (p, len(lines), len(raw)))
        blob = open(p, "rb").read()
        pos = 0
        for ln in lines:
            off, size = (int(x) for x in ln.split())
            (length,) = struct.unpack_from("<Q", blob, off)
            if off != pos or size != 8 + 4 + length + 4:
                die("%s.idx line %r: expected offset %d, size %d" % (p, ln, pos, 12 + length + 4))
            pos += size
        if pos != len(blob):
            die("%s.idx covers %d of %d bytes" % (p, pos, len(blob)))
    if k != len(files):
        die("TensorFlow read %d records, the tree has %d good files" % (k, len(files)))
    print("OK  TensorFlow %s read %d records in %d files: bytes, labels (+%d), synsets, "
          "filenames, sizes, formats equal the tree; DALI .idx layout matches"
          % (tf.__version__, k, len(paths), offset))


def check_wds(d, files, synth_names=False):
    import webdataset as wds
    urls = sorted(glob.glob(os.path.join(d, "shard-*.tar")))
    if len(urls) < 2:
        die("expected several tar shards, got %s" % urls)
    k = 0
    last = ""
    for s in wds.WebDataset(urls, shardshuffle=False):
        path, label, cname = files[k]
        img = s.get("jpg", s.get("png"))
        if img is None or img != open(path, "rb").read():
            die("sample %d (%s): image bytes differ from %s (fields %s)"
                % (k, s["__key__"], path, sorted(s)))
        if synth_names:  # from TFRecords, whose reader synthesises names "0".."N-1"
            cname = str(label)
        if int(s["cls"]) != label or s["txt"].decode() != cname:
            die("sample %d: cls %r txt %r" % (k, s["cls"], s["txt"]))
        if s["__key__"] <= last:
            die("keys out of order: %s after %s" % (s["__key__"], last))
        last = s["__key__"]
        k += 1
    if k != len(files):
        die("webdataset read %d samples, the tree has %d good files" % (k, len(files)))
    print("OK  webdataset read %d samples in %d shards: bytes, .cls, .txt equal the tree, keys "
          "in order" % (k, len(urls)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("chute", nargs="?", default="build/chute")
    ap.add_argument("--images", type=int, default=24, help="images per class")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="chute-verify-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tree = os.path.join(work, "tree")
    files = make_tree(tree, a.images)
    tfr, tfr1, tar, tar2 = (os.path.join(work, n) for n in ("tfr", "tfr1", "wds", "wds2"))
    run([a.chute, "pack", tree, tfr, "--format", "tfrecord", "--shard-size", "64K"])
    run([a.chute, "convert", tree, tfr1, "--format", "tfrecord", "--shard-size", "64K",
         "--label-offset", "1"])
    run([a.chute, "pack", tree, tar, "--format", "wds", "--shard-size", "64K"])
    run([a.chute, "convert", tfr, tar2, "--format", "wds", "--shard-size", "64K"])
    check_tfrecord(tfr, files, 0)
    check_tfrecord(tfr1, files, 1)
    check_wds(tar, files)
    check_wds(tar2, files, synth_names=True)
    print("all checks passed")


if __name__ == "__main__":
    main()
