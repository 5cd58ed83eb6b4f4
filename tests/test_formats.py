#!/usr/bin/env python3
"""test_formats.py — the format registry and the TFRecord and WebDataset
formats, read through the public API (tests/tools/dsinfo, dump) and the CLI.

Ground truth: the committed fixtures written by TensorFlow and webdataset
(tests/fixtures, expected.json from the tools' own inputs); for the photo
tree, files written here with Python's stdlib (tarfile; TFRecord framing
with a CRC32C computed in Python) from the tree's own bytes in
torchvision's order — never values computed by chute.

Cases:
  fixtures_tfrecord    every record of plain.tfrecord (TensorFlow) comes back
                       with expected.json's image bytes and label (+ offset),
                       with its DALI index and without; probing picks tfrecord
  fixtures_wds         the two webdataset ShardWriter shards: every sample's
                       .jpg bytes and .cls label; probing picks wds
  probe_errors         ties, unknown names, a wrong name, nothing matching:
                       clear errors naming what was tried
  corrupt_records      a flipped byte in a TFRecord record -> that sample fails
                       with file@offset and a CRC message, the others read; a
                       tar sample without image or label, or with a field
                       twice, fails naming shard and key
  same_batches         tree, shards, TFRecord and WebDataset copies of the
                       photo tree give byte-identical batches for one seed;
                       bench and inspect name the format
  corrupt_policy       a damaged TFRecord record is skipped by default
                       (corrupt=1, never delivered) and fails --strict naming
                       file@offset
"""
import hashlib
import io
import json
import os
import shutil
import struct
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def expected():
    with open(os.path.join(FIX, "expected.json")) as f:
        return json.load(f)


# ---- TFRecord writing (framing + tf.train.Example), stdlib only -------------

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    t = _T
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, payload):
    return varint((field << 3) | 2) + varint(len(payload)) + payload


def example(image, label):
    """tf.train.Example{features{feature{"image/encoded": bytes_list},
    feature{"image/class/label": int64_list}}} (the proto's wire layout)."""
    f_img = ld(1, ld(1, image))                      # Feature.bytes_list.value
    f_lab = ld(3, ld(1, varint(label)))              # Feature.int64_list.value (packed)
    ent = [ld(1, b"image/encoded") + ld(2, f_img), ld(1, b"image/class/label") + ld(2, f_lab)]
    feats = b"".join(ld(1, e) for e in ent)          # Features.feature map entries
    return ld(1, feats)                              # Example.features


def tfrecord(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(crc32c(n))) + data + struct.pack("<I", masked(crc32c(data)))


def write_tfrecords(samples, out_dir, nfiles):
    """samples: [(bytes, label)] in order; split into nfiles named like
    imagenet_to_gcs.py's.  Returns [(file, offset)] per sample."""
    os.makedirs(out_dir, exist_ok=True)
    per = (len(samples) + nfiles - 1) // nfiles
    where = []
    for k in range(nfiles):
        path = os.path.join(out_dir, "train-%05d-of-%05d" % (k, nfiles))
        off = 0
        with open(path, "wb") as f:
            for img, lab in samples[k * per:(k + 1) * per]:
                rec = tfrecord(example(img, lab))
                f.write(rec)
                where.append((path, off))
                off += len(rec)
    return where


def write_wds(samples, out_dir, nfiles):
    os.makedirs(out_dir, exist_ok=True)
    per = (len(samples) + nfiles - 1) // nfiles
    for k in range(nfiles):
        with tarfile.open(os.path.join(out_dir, "shard-%06d.tar" % k), "w",
                          format=tarfile.USTAR_FORMAT) as t:
            for i, (img, lab) in enumerate(samples[k * per:(k + 1) * per]):
                key = "s%07d" % (k * per + i)
                for ext, data in (("jpg", img), ("cls", str(lab).encode())):
                    ti = tarfile.TarInfo("%s.%s" % (key, ext))
                    ti.size = len(data)
                    t.addfile(ti, io.BytesIO(data))


def tree_samples(root):
    out = []
    for path, lab in T.imagefolder_samples(root)[1]:
        with open(path, "rb") as f:
            out.append((f.read(), lab))
    return out


# ---- cases --------------------------------------------------------------------

def read_all(ctx, source, *opts, expect=0):
    work = ctx.scratch("bytes_%d" % abs(hash((source,) + opts)))
    out = os.path.join(work, "bytes")
    info = ctx.dsinfo_run(source, "--bytes", out, *opts, expect=expect)
    return info, ctx.read_len_prefixed(out) if os.path.exists(out) else []


def fixtures_tfrecord(ctx):
    recs = expected()["tfrecord"]["plain.tfrecord"]["records"]
    keys = ["--image-key", "image", "--label-key", "label", "--label-offset", "30"]
    work = ctx.scratch("fixtures_tfrecord")
    alone = os.path.join(work, "alone.tfrecord")       # no DALI index beside it
    shutil.copy(os.path.join(FIX, "plain.tfrecord"), alone)
    for src in (os.path.join(FIX, "plain.tfrecord"), alone):
        info, data = read_all(ctx, src, *keys)
        ctx.check(info["kind"] == "tfrecord", "%s probed as %s" % (src, info["kind"]))
        ctx.check(info["n"] == len(recs) and len(data) == len(recs),
                  "%s: %s samples, %d read; TensorFlow wrote %d" % (src, info["n"], len(data), len(recs)))
        labels = [r["features"]["label"]["values"][0] + 30 for r in recs]
        ctx.check(len(info["classes"]) == max(labels) + 1 and info["classes"][:3] == ["0", "1", "2"],
                  "synthesised classes: %d, %r" % (len(info["classes"]), info["classes"][:3]))
        for i, r in enumerate(recs):
            if i >= len(data):
                break
            ctx.check(data[i] == bytes.fromhex(r["features"]["image"]["values"][0]),
                      "%s record %d: bytes differ from what TensorFlow wrote" % (src, i))
            _, lab, _, where = info["samples"][i]
            ctx.check(lab == labels[i], "%s record %d: label %d, expected %d" % (src, i, lab, labels[i]))
            ctx.check(where == "%s@%d" % (src, r["offset"]), "record %d described as %r" % (i, where))
    # The default keys (imagenet_to_gcs.py's) are absent: a clear message.
    info = ctx.dsinfo_run(alone, expect="nonzero")
    ctx.check("image/encoded" in info["proc"].err and "image_key" in info["proc"].err,
              "default keys on the fixture: %r" % info["proc"].err)
    # Without the offset the labels are negative: refused, naming the record.
    info = ctx.dsinfo_run(alone, "--image-key", "image", "--label-key", "label", expect="nonzero")
    ctx.check("alone.tfrecord@0" in info["proc"].err and "label -30" in info["proc"].err,
              "negative label: %r" % info["proc"].err)


def fixtures_wds(ctx):
    exp = expected()["tar"]
    work = ctx.scratch("fixtures_wds")
    names = ["wds-000000.tar", "wds-000001.tar"]
    for n in names:
        shutil.copy(os.path.join(FIX, n), work)
    want = [s for n in names for s in exp[n]["samples"]]
    info, data = read_all(ctx, work)
    ctx.check(info["kind"] == "wds", "probed as %s" % info["kind"])
    ctx.check(info["n"] == len(want) and len(data) == len(want),
              "%s samples, %d read; webdataset wrote %d" % (info["n"], len(data), len(want)))
    for i, s in enumerate(want[:len(data)]):
        ctx.check(hashlib.sha256(data[i]).hexdigest() == s["fields"]["jpg"],
                  "sample %d (%s): bytes differ from the .jpg webdataset wrote" % (i, s["key"]))
        _, lab, _, where = info["samples"][i]
        ctx.check(hashlib.sha256(str(lab).encode()).hexdigest() == s["fields"]["cls"],
                  "sample %d: label %d is not the .cls webdataset wrote" % (i, lab))
        ctx.check(where.endswith(":" + s["key"]), "sample %d described as %r" % (i, where))
    # One shard as a file.
    one = ctx.dsinfo_run(os.path.join(work, names[1]))
    ctx.check(one["kind"] == "wds" and one["n"] == len(exp[names[1]]["samples"]),
              "one shard: %r %r" % (one.get("kind"), one.get("n")))


def probe_errors(ctx):
    # The fixture directory holds TFRecords and tars (and is a directory):
    # equally sure probes are an error, not a guess.
    info = ctx.dsinfo_run(FIX, expect="nonzero")
    err = info["proc"].err
    ctx.check("more than one format" in err and "tfrecord" in err and "wds" in err,
              "tie: %r" % err)
    info = ctx.dsinfo_run(FIX, "--format", "nosuch", expect="nonzero")
    err = info["proc"].err
    ctx.check("unknown format" in err and "nosuch" in err and "tfrecord, wds" in err,
              "unknown name: %r" % err)
    info = ctx.dsinfo_run(os.path.join(FIX, "plain.tfrecord"), "--format", "wds", expect="nonzero")
    ctx.check("plain.tfrecord" in info["proc"].err, "wds on a TFRecord: %r" % info["proc"].err)
    info = ctx.dsinfo_run(os.path.join(FIX, "wds-000000.tar"), "--format", "tfrecord",
                          expect="nonzero")
    ctx.check("wds-000000.tar" in info["proc"].err, "tfrecord on a tar: %r" % info["proc"].err)
    info = ctx.dsinfo_run(os.path.join(FIX, "plain.idx"), expect="nonzero")
    err = info["proc"].err
    ctx.check("no format recognises" in err and "tfrecord:" in err and "wds:" in err,
              "nothing matches: %r" % err)
    info = ctx.dsinfo_run(FIX, "--kind", "tree", "--format", "wds", expect="nonzero")
    ctx.check("disagree" in info["proc"].err, "kind vs format: %r" % info["proc"].err)
    # The CLI's --format (bench, inspect, doctor) reaches the same choice.
    for cmd in ("bench", "inspect", "doctor"):
        p = ctx.run([ctx.chute, cmd, os.path.join(FIX, "plain.tfrecord"), "--format", "wds"],
                    expect=1)
        ctx.check("plain.tfrecord" in p.err and "tar" in p.err,
                  "%s --format wds on a TFRecord: %r" % (cmd, p.err))
        p = ctx.run([ctx.chute, cmd, FIX, "--format", "nosuch"], expect=1)
        ctx.check("unknown format" in p.err and "nosuch" in p.err,
                  "%s --format nosuch: %r" % (cmd, p.err))


def corrupt_records(ctx):
    recs = expected()["tfrecord"]["plain.tfrecord"]["records"]
    work = ctx.scratch("corrupt_records")
    bad = os.path.join(work, "bad.tfrecord")
    raw = bytearray(open(os.path.join(FIX, "plain.tfrecord"), "rb").read())
    off = recs[3]["offset"]
    raw[off + 12 + 5] ^= 0x40                   # inside record 3's data
    open(bad, "wb").write(bytes(raw))
    info, data = read_all(ctx, bad, "--image-key", "image", "--label-key", "label",
                          "--label-offset", "30", expect=1)
    err = info["proc"].err
    ctx.check("read 3:" in err and "bad.tfrecord@%d" % off in err and "CRC" in err,
              "flipped data byte: %r" % err)
    ctx.check(err.count("dsinfo: read") == 1, "only record 3 fails: %r" % err)
    for i in (2, 4):
        ctx.check(data[i] == bytes.fromhex(recs[i]["features"]["image"]["values"][0]),
                  "record %d next to the bad one reads" % i)
    # A tar whose samples lack an image or a label.
    d = os.path.join(work, "wds")
    os.makedirs(d)
    with tarfile.open(os.path.join(d, "a.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data_ in (("ok.jpg", b"JPEG"), ("ok.cls", b"1"), ("nolabel.png", b"PNG"),
                            ("noimage.cls", b"0"), ("badlabel.JPG", b"J"), ("badlabel.cls", b"x1"),
                            ("dup.jpg", b"1"), ("dup.cls", b"2"), ("dup.jpg", b"3")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data_)
            t.addfile(ti, io.BytesIO(data_))
    info, data = read_all(ctx, d, expect=1)
    err = info["proc"].err
    ctx.check(info["n"] == 5 and data and data[0] == b"JPEG", "wds: %r %r" % (info.get("n"), data[:1]))
    for key, why in (("nolabel", ".cls"), ("noimage", "no image"), ("badlabel", "not a decimal"),
                     ("dup", "twice")):
        ctx.check('a.tar@' in err and '"%s"' % key in err and why in err,
                  "sample %s: %r" % (key, err))


def photo_copies(ctx, work):
    samples = tree_samples(ctx.tree)
    tfr = os.path.join(work, "tfrecord")
    where = write_tfrecords(samples, tfr, 3)
    wds = os.path.join(work, "wds")
    write_wds(samples, wds, 2)
    return samples, tfr, wds, where


def same_batches(ctx):
    ctx.need_data()
    work = ctx.scratch("same_batches")
    samples, tfr, wds, _ = photo_copies(ctx, work)
    outs = {}
    for name, src in (("tree", ctx.tree), ("shards", ctx.shards), ("tfrecord", tfr), ("wds", wds)):
        info = ctx.dsinfo_run(src)
        ctx.check(info["kind"] == name and info["n"] == len(samples),
                  "%s probed as %s with %s samples" % (src, info["kind"], info["n"]))
        out = os.path.join(work, name + ".bin")
        p = ctx.dump_run(src, out, "--transform", "train", "--dtype", "uint8", "--size", "64",
                         "--batch-size", "16", "--workers", "2", "--seed", "7")
        ctx.check("corrupt=0" in p.out, "%s: %r" % (name, p.out))
        outs[name] = open(out, "rb").read()
    for name in ("shards", "tfrecord", "wds"):
        ctx.check(outs[name] == outs["tree"] and len(outs["tree"]) > 0,
                  "%s batches differ from the tree's (%d vs %d bytes)"
                  % (name, len(outs[name]), len(outs["tree"])))
    for name, src in (("tfrecord", tfr), ("wds", wds)):
        b = ctx.run([ctx.chute, "bench", src, "--epochs", "1", "--batch-size", "16",
                     "--size", "64", "--json", "--format", name])
        ctx.check('"format":"%s"' % name in b.out.replace(" ", ""), "bench on %s: %r" % (name, b.out))
        i = ctx.run([ctx.chute, "inspect", src])
        ctx.check(": %s, %d samples" % (name, len(samples)) in i.out,
                  "inspect on %s: %r" % (name, i.out[:300]))


def corrupt_policy(ctx):
    ctx.need_data()
    work = ctx.scratch("corrupt_policy")
    samples, tfr, _, where = photo_copies(ctx, work)
    path, off = where[5]
    raw = bytearray(open(path, "rb").read())
    raw[off + 12 + 40] ^= 0x01
    open(path, "wb").write(bytes(raw))
    out = os.path.join(work, "d.bin")
    p = ctx.dump_run(tfr, out, "--transform", "eval", "--dtype", "uint8", "--size", "32",
                     "--batch-size", "8")
    c = T.parse_counts(p.out)
    ctx.check(c.get("corrupt") == 1 and c.get("samples") == len(samples),
              "skip policy (the batch is refilled): %r" % p.out)
    idx, _, _ = ctx.read_dump(out, 32)
    ctx.check(5 not in set(int(i) for i in idx), "the damaged record was delivered")
    p = ctx.dump_run(tfr, out, "--transform", "eval", "--dtype", "uint8", "--size", "32",
                     "--batch-size", "8", "--strict", expect="nonzero")
    ctx.check("%s@%d" % (path, off) in p.err and "CRC" in p.err, "strict: %r" % p.err)


if __name__ == "__main__":
    sys.exit(T.main({"fixtures_tfrecord": fixtures_tfrecord, "fixtures_wds": fixtures_wds,
                     "probe_errors": probe_errors, "corrupt_records": corrupt_records,
                     "same_batches": same_batches, "corrupt_policy": corrupt_policy}))
