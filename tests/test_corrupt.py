#!/usr/bin/env python3
"""Damaged inputs: the loader and pack must count, skip, or fail cleanly
with a message naming the file (and offset), and never crash.

tree    the fixture tree plus a truncated JPEG, a garbage .jpg and an empty
        .png in the middle: the default policy finishes the epoch with full
        batches and corrupt=3; --strict fails naming the file; `chute pack`
        reports each bad file with its reason and counts them; `chute pack
        --strict` fails.
shards  a flipped byte inside a record: skipped and counted once by default,
        a failure naming shard@offset with --strict (and from
        chute_dataset_read); truncated shards, foreign files named like
        shards, damaged manifests, missing paths: `chute bench` exits
        non-zero with a clear message.
"""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

BAD = ("class01/img00100_trunc.jpg", "class01/img00100_zgarbage.jpg", "class01/img00103_empty.png")


def make_dirty_tree(ctx, work):
    tree = os.path.join(work, "tree")
    T.link_tree(ctx.tree, tree)
    # A real JPEG cut shortly after its scan starts: any crop window needs
    # rows past the cut, and pack's full check sees it too.
    src = os.path.join(ctx.tree, "class00", "img00006.jpg")
    data = open(src, "rb").read()
    sos = data.find(b"\xff\xda")
    assert sos > 0
    with open(os.path.join(tree, BAD[0]), "wb") as f:
        f.write(data[: sos + 400])
    import random
    rnd = random.Random(5)
    with open(os.path.join(tree, BAD[1]), "wb") as f:
        f.write(bytes(rnd.randrange(256) for _ in range(5000)))
    open(os.path.join(tree, BAD[2]), "wb").close()
    return tree


def tree(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    work = ctx.scratch("tree")
    t = make_dirty_tree(ctx, work)
    info = ctx.dsinfo_run(t)
    ctx.check(info.get("n") == 203, "dirty tree has %s samples" % info.get("n"))
    bad_idx = {i for (i, _, _, where) in info["samples"] if any(where.endswith(b) for b in BAD)}
    ctx.check(len(bad_idx) == 3 and min(bad_idx) > 20 and max(bad_idx) < 180,
              "bad files at positions %s (want 3, mid-dataset)" % sorted(bad_idx))
    B = 16
    for tf in ("train", "eval"):
        out = os.path.join(work, "skip_%s.bin" % tf)
        p = ctx.dump_run(t, out, "--transform", tf, "--dtype", "uint8", "--size", 32,
                         "--batch-size", B, "--workers", 2, "--seed", 1)
        c = T.parse_counts(p.out)
        ctx.check(c.get("samples") == 203 and c.get("batches") == 13 and c.get("corrupt") == 3,
                  "%s, default policy: %r (want samples=203 batches=13 corrupt=3)" % (tf, p.out.strip()))
        idx, lab, _ = ctx.read_dump(out, 32)
        ctx.check(len(idx) == 203, "%s: %d records" % (tf, len(idx)))
        ctx.check(not (set(idx.tolist()) & bad_idx), "%s: a corrupt sample was delivered" % tf)
        labels = {i: l for (i, l, _, _) in info["samples"]}
        ctx.check(all(labels[i] == l for i, l in zip(idx.tolist(), lab.tolist())),
                  "%s: replacement samples carry the wrong labels" % tf)
    # Strict: the run fails and names the file.
    p = ctx.dump_run(t, os.path.join(work, "strict.bin"), "--transform", "train", "--dtype", "uint8",
                     "--size", 32, "--batch-size", B, "--workers", 2, "--strict", expect="nonzero")
    named = [b for b in BAD if os.path.join(t, b) in p.err]
    ctx.check(len(named) >= 1, "--strict failure does not name a bad file's path: %r" % p.err.strip())
    ctx.check("CHUTE_ECORRUPT" in p.err or "CHUTE_EFORMAT" in p.err,
              "--strict failure status: %r" % p.err.strip())
    # Pack: each bad file reported with its reason, and counted.
    out = os.path.join(work, "shards")
    p = ctx.run([ctx.chute, "pack", t, out, "--threads", "2"])
    for b in BAD:
        line = [ln for ln in p.err.splitlines() if os.path.join(t, b) in ln]
        ctx.check(len(line) == 1 and ":" in line[0].split(os.path.join(t, b), 1)[1],
                  "pack's report for %s: %r" % (b, line))
    reasons = "\n".join(p.err.splitlines())
    ctx.check("empty" in reasons, "the empty file's reason does not say it is empty: %r" % reasons)
    ctx.check("packed 200 files" in p.out and "skipped 3 undecodable" in p.out,
              "pack summary: %r" % p.out)
    d = ctx.dsinfo_run(out)
    ctx.check(d.get("n") == 200, "packed dirty tree has %s samples" % d.get("n"))
    # Pack --strict fails, naming a bad file; no dataset is left behind.
    out2 = os.path.join(work, "strict_shards")
    p = ctx.run([ctx.chute, "pack", t, out2, "--threads", "2", "--strict"], expect="nonzero")
    ctx.check(any(os.path.join(t, b) in p.err for b in BAD),
              "pack --strict message does not name the file: %r" % p.err.strip())
    ctx.check(not os.path.exists(os.path.join(out2, "chute.manifest")),
              "pack --strict left a manifest")


def flip_record_byte(shards, where_desc, delta=100):
    """where_desc is 'DIR/shard-0000K.chute@OFF (name)'; flip a byte in it."""
    m = re.search(r"(shard-\d+\.chute)@(\d+)", where_desc)
    name, off = m.group(1), int(m.group(2))
    path = os.path.join(shards, name)
    with open(path, "r+b") as f:
        f.seek(off + delta)
        b = f.read(1)
        f.seek(off + delta)
        f.write(bytes([b[0] ^ 0x5A]))
    return name, off


def shards(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    work = ctx.scratch("shards")
    sh = os.path.join(work, "flipped")
    shutil.copytree(ctx.shards, sh)
    info = ctx.dsinfo_run(sh)
    victim = 57
    name, off = flip_record_byte(sh, info["samples"][victim][3])
    p = ctx.dump_run(sh, os.path.join(work, "skip.bin"), "--transform", "train", "--dtype", "uint8",
                     "--size", 32, "--batch-size", 16, "--workers", 2, "--seed", 2)
    c = T.parse_counts(p.out)
    ctx.check(c.get("samples") == 200 and c.get("corrupt") == 1,
              "flipped record, default policy: %r (want samples=200 corrupt=1)" % p.out.strip())
    idx, _, _ = ctx.read_dump(os.path.join(work, "skip.bin"), 32)
    ctx.check(victim not in set(idx.tolist()), "the damaged record was delivered")
    p = ctx.dump_run(sh, os.path.join(work, "strict.bin"), "--transform", "train", "--dtype", "uint8",
                     "--size", 32, "--batch-size", 16, "--workers", 2, "--strict", expect="nonzero")
    ctx.check("%s@%d" % (name, off) in p.err,
              "--strict message does not name %s@%d: %r" % (name, off, p.err.strip()))
    d = ctx.dsinfo_run(sh, "--bytes", os.path.join(work, "b.bin"), expect="nonzero")
    ctx.check("read %d: CHUTE_ECORRUPT" % victim in d["proc"].err and "%s@%d" % (name, off) in d["proc"].err,
              "chute_dataset_read of the damaged record: %r" % d["proc"].err.strip())
    ctx.check(d["proc"].err.count("dsinfo: read") == 1, "other records failed too: %r" % d["proc"].err)

    # Whole-file damage: bench must refuse cleanly, naming what is wrong.
    def bench_fails(path, *needles, what):
        p = ctx.run([ctx.chute, "bench", path, "--quiet", "--workers", "2"], expect="nonzero",
                    what="bench " + what)
        ctx.check(p.returncode == 1, "%s: exit status %d, want 1" % (what, p.returncode))
        for n in needles:
            ctx.check(n in p.err, "%s: message %r lacks %r" % (what, p.err.strip(), n))
        return p

    def fresh(tag):
        d = os.path.join(work, tag)
        shutil.copytree(ctx.shards, d)
        return d

    d = fresh("truncated")
    s1 = os.path.join(d, "shard-00001.chute")
    size = os.path.getsize(s1)
    os.truncate(s1, size - 100)
    bench_fails(d, "shard-00001.chute", "truncated", what="truncated shard")
    d = fresh("truncated_manifest_too")
    s1 = os.path.join(d, "shard-00001.chute")
    os.truncate(s1, size // 2)
    man = os.path.join(d, "chute.manifest")
    text = open(man).read().replace(" %d\n" % size, " %d\n" % (size // 2))
    open(man, "w").write(text)
    bench_fails(d, "shard-00001.chute", what="truncated shard, manifest edited to match")
    d = fresh("foreign")
    s0 = os.path.join(d, "shard-00000.chute")
    n0 = os.path.getsize(s0)
    import random
    rnd = random.Random(1)
    with open(s0, "wb") as f:
        f.write(bytes(rnd.randrange(256) for _ in range(n0)))
    bench_fails(d, "shard-00000.chute", "not a chute shard", what="foreign file (same size)")
    d = fresh("foreign_small")
    with open(os.path.join(d, "shard-00000.chute"), "w") as f:
        f.write("hello\n")
    bench_fails(d, "shard-00000.chute", what="foreign small file")
    d = fresh("index_flip")
    s2 = os.path.join(d, "shard-00002.chute")
    with open(s2, "r+b") as f:
        f.seek(-80, 2)
        b = f.read(1)
        f.seek(-80, 2)
        f.write(bytes([b[0] ^ 1]))
    bench_fails(d, "shard-00002.chute", "checksum", what="flipped index byte")
    d = fresh("trailer_flip")
    with open(os.path.join(d, "shard-00002.chute"), "r+b") as f:
        f.seek(-20, 2)
        b = f.read(1)
        f.seek(-20, 2)
        f.write(bytes([b[0] ^ 1]))
    bench_fails(d, "shard-00002.chute", "trailer", what="flipped trailer byte")
    d = fresh("missing_shard")
    os.unlink(os.path.join(d, "shard-00003.chute"))
    bench_fails(d, "shard-00003.chute", what="missing shard")
    d = fresh("bad_manifest")
    open(os.path.join(d, "chute.manifest"), "w").write("chute-dataset 1\nshard shard-00000.chute 12\n")
    bench_fails(d, "chute.manifest", what="malformed manifest")
    d = fresh("binary_manifest")
    open(os.path.join(d, "chute.manifest"), "wb").write(bytes(range(256)) * 4)
    bench_fails(d, "chute.manifest", what="binary manifest")
    bench_fails(os.path.join(work, "no-such-dir"), "no-such-dir", "No such file", what="missing path")
    empty = os.path.join(work, "empty")
    os.makedirs(empty)
    bench_fails(empty, "empty", what="empty directory")
    bench_fails(os.path.join(sh, "chute.manifest"), "not a directory", what="a file")


if __name__ == "__main__":
    sys.exit(T.main({"tree": tree, "shards": shards}))
