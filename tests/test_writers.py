#!/usr/bin/env python3
"""test_writers.py — chute's writers (chute convert, pack --format) checked
with independent readers.

Ground truth is the tree's own files in torchvision's ImageFolder order and
Python's stdlib: TFRecord framing and masked CRC32C recomputed here (a
table CRC written from the Castagnoli polynomial, not chute's code), the
tf.train.Example wire format decoded generically (varints and
length-delimited fields, no schema from chute), tars read with tarfile.
The real tools (TensorFlow, webdataset) read the same output in
bench/verify_writers.py, run by hand.

Cases:
  tfrecord_framing  pack --format tfrecord: several files of ~shard-size; each
                    record's length CRC and data CRC verify; the Example holds
                    image/encoded == the tree file's bytes, image/class/label ==
                    its ImageFolder label (+ --label-offset through convert),
                    image/class/synset == its class, image/filename; the DALI
                    .idx lists every record's offset and framed size
  wds_tarfile       pack --format wds: tarfile reads every shard (ustar, valid
                    checksums); members KEY.jpg|png, KEY.cls, KEY.txt in key
                    order with the tree's bytes, labels and class names
  round_trip        tree -> tfrecord -> wds -> shards (chute convert): every
                    stage opens and holds the tree's sample bytes and labels
                    in order (dsinfo --bytes)
  crash             kill -9 mid-convert (a read in the tree stalls, faultfs):
                    DST does not open as a dataset and holds no file under a
                    final name; re-running gives a correct dataset and leaves
                    no temporary or lock behind
  refuses_inside    DST inside SRC is refused before anything is written
"""
import glob
import io
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

# ---- independent CRC32C and protobuf decoding ------------------------------

_TAB = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TAB.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TAB[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, pos):
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    pos, out = 0, []
    while pos < len(buf):
        tag, pos = varint(buf, pos)
        f, wt = tag >> 3, tag & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 2:
            n, pos = varint(buf, pos)
            v = bytes(buf[pos:pos + n])
            if len(v) != n:
                raise ValueError("length past the end")
            pos += n
        else:
            raise ValueError("unexpected wire type %d" % wt)
        out.append((f, wt, v))
    return out


def example_features(rec):
    """tf.train.Example -> {key: bytes or [int64]} from the wire format."""
    feats = {}
    for f, wt, v in fields(rec):
        assert f == 1 and wt == 2, "Example field %d" % f
        for ef, ewt, entry in fields(v):
            assert ef == 1 and ewt == 2
            kv = dict((k, val) for k, _, val in fields(entry))
            key = kv[1].decode()
            (kind, _, lst), = fields(kv[2])
            if kind == 1:  # bytes_list
                feats[key] = [x for _, _, x in fields(lst)]
            elif kind == 3:  # int64_list, packed or not
                vals = []
                for _, wt2, x in fields(lst):
                    if wt2 == 0:
                        vals.append(x)
                    else:
                        p = 0
                        while p < len(x):
                            y, p = varint(x, p)
                            vals.append(y)
                feats[key] = [y - (1 << 64) if y >= 1 << 63 else y for y in vals]
            else:
                raise ValueError("feature kind %d" % kind)
    return feats


def read_tfrecords(ctx, path):
    """[(offset, framed size, data)] with both CRCs checked."""
    blob = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(blob):
        (n,) = struct.unpack_from("<Q", blob, pos)
        (lcrc,) = struct.unpack_from("<I", blob, pos + 8)
        ctx.check(lcrc == masked(crc32c(blob[pos:pos + 8])), "%s@%d: length CRC" % (path, pos))
        data = blob[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack_from("<I", blob, pos + 12 + n)
        ctx.check(len(data) == n and dcrc == masked(crc32c(data)), "%s@%d: data CRC" % (path, pos))
        out.append((pos, 16 + n, data))
        pos += 16 + n
    return out


# ---- helpers ---------------------------------------------------------------

def small_tree(ctx, work, every=7):
    """A subset of the fixture tree (pure-Python CRCs are slow)."""
    tree = os.path.join(work, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    n = [0]

    def pick(rel):
        n[0] += 1
        return n[0] % every == 1
    T.link_tree(ctx.tree, tree, pick)
    return tree


def tree_samples(tree):
    classes, samples = T.imagefolder_samples(tree)
    return [(p, lab, classes[lab]) for p, lab in samples]


def read(p):
    with open(p, "rb") as f:
        return f.read()


def tfrecord_framing(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("tfrecord_framing")
    tree = small_tree(ctx, work)
    want = tree_samples(tree)
    for offset, cmd in ((0, ["pack"]), (1, ["convert"])):
        out = os.path.join(work, "tfr%d" % offset)
        extra = ["--label-offset", str(offset)] if cmd == ["convert"] else []
        p = ctx.run([ctx.chute] + cmd + [tree, out, "--format", "tfrecord", "--shard-size",
                                         "256K"] + extra)
        # .idx: the DALI index the writer makes; .chuteidx: the index the
        # TFRecord reader saves beside the data when convert opens its result.
        files = sorted(f for f in os.listdir(out) if not f.endswith((".idx", ".chuteidx")))
        ctx.check(len(files) >= 2 and all(f.endswith("-of-%05d" % len(files)) for f in files)
                  and files[0] == "train-00000-of-%05d" % len(files),
                  "%s: TFRecord files %s" % (cmd, files))
        ctx.check("%d samples" % len(want) in p.out, "summary: %r" % p.out)
        k = 0
        for f in files:
            recs = read_tfrecords(ctx, os.path.join(out, f))
            idx = [tuple(int(x) for x in ln.split())
                   for ln in open(os.path.join(out, f + ".idx")).read().splitlines()]
            ctx.check(idx == [(o, s) for o, s, _ in recs], "%s.idx %s vs records %s"
                      % (f, idx[:3], [(o, s) for o, s, _ in recs][:3]))
            for _, _, data in recs:
                feats = example_features(data)
                path, lab, cname = want[k]
                ctx.check(feats["image/encoded"] == [read(path)], "record %d: image bytes" % k)
                ctx.check(feats["image/class/label"] == [lab + offset],
                          "record %d: label %s, want %d" % (k, feats["image/class/label"],
                                                            lab + offset))
                ctx.check(feats["image/class/synset"] == [cname.encode()],
                          "record %d: synset %s" % (k, feats["image/class/synset"]))
                ctx.check(feats["image/filename"] == [os.path.basename(path).encode()],
                          "record %d: filename %s" % (k, feats["image/filename"]))
                k += 1
        ctx.check(k == len(want), "%d records for %d tree files" % (k, len(want)))
        ctx.check(not os.path.exists(os.path.join(out, "chute.lock")), "lock left behind")


def wds_tarfile(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("wds_tarfile")
    tree = small_tree(ctx, work, every=3)
    want = tree_samples(tree)
    out = os.path.join(work, "wds")
    ctx.run([ctx.chute, "pack", tree, out, "--format", "wds", "--shard-size", "256K"])
    shards = sorted(os.listdir(out))
    ctx.check(len(shards) >= 2 and shards == ["shard-%06d.tar" % i for i in range(len(shards))],
              "shards: %s" % shards)
    members = []
    for s in shards:
        with tarfile.open(os.path.join(out, s)) as t:  # checks every header checksum
            for m in t.getmembers():
                ctx.check(m.isfile() and m.mode == 0o644, "%s: %s is not a plain file" % (s, m.name))
                members.append((m.name, t.extractfile(m).read()))
    ctx.check(len(members) == 3 * len(want), "%d members for %d samples" % (len(members), len(want)))
    keys = []
    for k, (path, lab, cname) in enumerate(want):
        trio = members[3 * k:3 * k + 3]
        key = trio[0][0].split(".")[0]
        keys.append(key)
        ext = os.path.splitext(path)[1].lower()
        ext = {".jpeg": ".jpg"}.get(ext, ext)
        got = dict((n, d) for n, d in trio)
        ctx.check(got.get(key + ext) == read(path), "sample %d (%s): image %s" % (k, key, sorted(got)))
        ctx.check(got.get(key + ".cls") == str(lab).encode(), "sample %d: cls %r" % (k, got.get(key + ".cls")))
        ctx.check(got.get(key + ".txt") == cname.encode(), "sample %d: txt %r" % (k, got.get(key + ".txt")))
    ctx.check(keys == sorted(keys) and len(set(keys)) == len(keys) and
              all(len(x) == len(keys[0]) for x in keys), "keys not zero-padded in order: %s" % keys[:5])


def check_bytes(ctx, src, want, what):
    b = os.path.join(os.path.dirname(src), os.path.basename(src) + ".bytes")
    info = ctx.dsinfo_run(src, "--bytes", b)
    got = ctx.read_len_prefixed(b)
    ctx.check(info["n"] == len(want) and len(got) == len(want),
              "%s: %d samples, the tree has %d" % (what, info["n"], len(want)))
    for k, ((path, lab, _), data, s) in enumerate(zip(want, got, info["samples"])):
        if data != read(path) or s[1] != lab:
            ctx.check(False, "%s: sample %d (%s) differs from %s (label %d vs %d)"
                      % (what, k, s[3], path, s[1], lab))
            break
    return info


def round_trip(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("round_trip")
    want = tree_samples(ctx.tree)
    tfr, wds, sh = (os.path.join(work, n) for n in ("tfr", "wds", "shards"))
    ctx.run([ctx.chute, "convert", ctx.tree, tfr, "--format", "tfrecord", "--shard-size", "1M"])
    ctx.run([ctx.chute, "convert", tfr, wds, "--format", "wds", "--shard-size", "1M"])
    ctx.run([ctx.chute, "convert", wds, sh, "--format", "chute", "--shard-size", "1M"])
    for d, name in ((tfr, "tfrecord"), (wds, "wds"), (sh, "shards")):
        info = check_bytes(ctx, d, want, name)
        ctx.check(info.get("kind") == name, "%s opened as %s" % (d, info.get("kind")))
    # Converting again into a used directory replaces, never mixes: wds -> tfr
    # (fewer, larger files) leaves only the new files.
    ctx.run([ctx.chute, "convert", wds, tfr, "--format", "tfrecord", "--shard-size", "4M"])
    check_bytes(ctx, tfr, want, "tfrecord rewritten")
    left = [f for f in os.listdir(tfr) if f.startswith(".chute-w-") or f == "chute.lock"]
    ctx.check(not left, "temporaries left: %s" % left)


def crash(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    faultfs = os.environ.get("CHUTE_FAULTFS")
    if not faultfs or not os.path.exists(faultfs):
        raise T.Skip("no faultfs shim (CHUTE_FAULTFS) to stall the convert")
    work = ctx.scratch("crash")
    tree = os.path.join(work, "tree")
    T.link_tree(ctx.tree, tree)
    stall = os.path.join(tree, "class01", "img00150_stall.jpg")
    first = sorted(glob.glob(os.path.join(tree, "class00", "*.jpg")))[0]
    shutil.copyfile(first, stall)
    env = dict(os.environ, LD_PRELOAD=faultfs, CHUTE_FAULT_PATH="img00150_stall.jpg",
               CHUTE_FAULT_OP="read", CHUTE_FAULT_ERRNO="STALL",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    for fmt in ("tfrecord", "wds"):
        out = os.path.join(work, fmt)
        proc = subprocess.Popen([ctx.chute, "convert", tree, out, "--format", fmt,
                                 "--shard-size", "256K"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
        # Several files complete (fsync'd) before the stalled read.
        t0 = time.time()
        while proc.poll() is None and time.time() - t0 < 120:
            if os.path.isdir(out) and sum(f != "chute.lock" for f in os.listdir(out)) >= 3:
                break
            time.sleep(0.005)
        time.sleep(0.3)
        alive = proc.poll() is None
        if alive:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        err = proc.stderr.read().decode("utf-8", "replace")
        ctx.check(alive, "%s: convert finished or failed although a read stalls: %s" % (fmt, err))
        for m in T.CRASH_MARKERS:
            ctx.check(m not in err, "convert crashed before it was killed:\n" + err[-3000:])
        present = sorted(os.listdir(out))
        ctx.note("%s after kill -9: %s" % (fmt, present))
        ctx.check(all(f.startswith(".chute-w-") or f == "chute.lock" for f in present),
                  "%s: files under final names after a kill: %s" % (fmt, present))
        d = ctx.dsinfo_run(out, expect="nonzero")
        ctx.check(d["proc"].err.strip() != "", "opening the interrupted output said nothing")
        d = ctx.dsinfo_run(out, "--format", fmt, expect="nonzero")
    os.unlink(stall)
    want = tree_samples(tree)
    for fmt in ("tfrecord", "wds"):
        out = os.path.join(work, fmt)
        ctx.run([ctx.chute, "convert", tree, out, "--format", fmt, "--shard-size", "256K"])
        check_bytes(ctx, out, want, "%s re-run" % fmt)
        left = [f for f in os.listdir(out) if f.startswith(".chute-w-") or f == "chute.lock"]
        ctx.check(not left, "%s: temporaries left after the re-run: %s" % (fmt, left))


def refuses_inside(ctx):
    ctx.need_data()
    work = ctx.scratch("refuses_inside")
    tree = small_tree(ctx, work)
    before = sorted(os.walk(tree))
    p = ctx.run([ctx.chute, "convert", tree, os.path.join(tree, "out"), "--format", "wds"],
                expect="nonzero")
    ctx.check("inside" in p.err, "message: %r" % p.err)
    ctx.check(sorted(os.walk(tree)) == before, "something was written inside SRC")
    p = ctx.run([ctx.chute, "convert", tree, os.path.join(work, "x"), "--format", "zip"],
                expect="nonzero")
    ctx.check("tfrecord" in p.err and "wds" in p.err, "unknown format message: %r" % p.err)


if __name__ == "__main__":
    sys.exit(T.main({"tfrecord_framing": tfrecord_framing, "wds_tarfile": wds_tarfile,
                     "round_trip": round_trip, "crash": crash, "refuses_inside": refuses_inside}))
