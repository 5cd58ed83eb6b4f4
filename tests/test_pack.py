#!/usr/bin/env python3
"""`chute pack` end to end.

round_trip           every sample's bytes in the shards equal its source
                     file; labels and class names equal torchvision
                     ImageFolder's; tree and shards dump identically
                     (none/eval, no shuffle); packing is deterministic.
tree_order           a tree with awkward names (nested dirs, '-' vs '/'
                     ordering, upper-case and rare extensions, hidden files,
                     UTF-8, symlinks, non-image files) lists in exactly
                     ImageFolder's order with its labels, and packs so.
crash_safety         kill -9 during pack leaves a directory that does not
                     open as a dataset; re-running pack gives a correct
                     dataset and leaves no *.tmp files.
interrupted_message  `chute bench` on such a directory says the manifest is
                     missing (rather than something unrelated).
repack               packing a smaller tree into a used directory leaves no
                     stale shards behind.
"""
import glob
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402


def read(path):
    with open(path, "rb") as f:
        return f.read()


def shard_files(d):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "shard-*.chute")))


def manifest_shards(d):
    names = []
    with open(os.path.join(d, "chute.manifest")) as f:
        lines = f.read().splitlines()
    for ln in lines[1:]:
        if ln.startswith("shard "):
            names.append(ln.split()[1])
    return names, lines


def verify_shards_against_tree(ctx, shards, tree, tag, files=None):
    """Bytes, labels, names and class names of `shards` vs the source tree,
    in ImageFolder order (or the order of `files`, relative paths)."""
    info = ctx.dsinfo_run(shards, "--bytes", os.path.join(ctx.work, "bytes.bin"))
    if info["proc"].returncode != 0:
        return
    blobs = ctx.read_len_prefixed(os.path.join(ctx.work, "bytes.bin"))
    classes, samples = T.imagefolder_samples(tree)
    if files is not None:
        keep = set(files)
        samples = [s for s in samples if os.path.relpath(s[0], tree) in keep]
    ctx.check(info["kind"] == "shards", "%s: opened as %s" % (tag, info["kind"]))
    ctx.check(info["classes"] == classes, "%s: classes %s vs ImageFolder %s" % (tag, info["classes"], classes))
    ctx.check(info["n"] == len(samples), "%s: %d samples vs ImageFolder's %d" % (tag, info["n"], len(samples)))
    bad = 0
    for (i, lab, size, where), (path, target), blob in zip(info["samples"], samples, blobs):
        rel = os.path.relpath(path, tree)
        ok = (lab == target and size == len(blob) and blob == read(path) and
              where.endswith("(%s)" % rel))
        if not ok and bad < 5:
            ctx.check(False, "%s: sample %d (%s) label %d/%d size %d/%d bytes-equal %s" %
                      (tag, i, where, lab, target, size, os.path.getsize(path), blob == read(path)))
        bad += not ok
    ctx.check(bad == 0, "%s: %d samples differ from their source files" % (tag, bad))


def round_trip(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "torchvision")
    import numpy as np
    work = ctx.scratch("round_trip")
    verify_shards_against_tree(ctx, ctx.shards, ctx.tree, "fixture shards")
    ctx.check(not glob.glob(os.path.join(ctx.shards, "*.tmp")), "*.tmp files left in the shard dir")
    names, lines = manifest_shards(ctx.shards)
    ctx.check(names == shard_files(ctx.shards), "manifest lists %s, directory has %s"
              % (names, shard_files(ctx.shards)))
    for ln in lines[1:]:
        if ln.startswith("shard "):
            _, nm, cnt, size = ln.split()
            ctx.check(int(size) == os.path.getsize(os.path.join(ctx.shards, nm)),
                      "manifest size of %s is wrong" % nm)
    ctx.check(len(names) >= 3, "1 MiB shards of ~8 MB should give several shards, got %d" % len(names))
    # Tree and shards through the whole pipeline: identical samples.
    for tf, size in (("none", 32), ("eval", 64)):
        a, b = os.path.join(work, "tree_%s.bin" % tf), os.path.join(work, "shards_%s.bin" % tf)
        for src, out in ((ctx.tree, a), (ctx.shards, b)):
            ctx.dump_run(src, out, "--transform", tf, "--dtype", "uint8", "--size", size,
                         "--no-shuffle", "--batch-size", 50, "--workers", 2)
        ai, al, ad = ctx.read_dump(a, size)
        bi, bl, bd = ctx.read_dump(b, size)
        ctx.check(np.array_equal(ai, np.arange(200)) and np.array_equal(ai, bi),
                  "%s: no-shuffle order is not dataset order" % tf)
        ctx.check(np.array_equal(al, bl), "%s: labels differ between tree and shards" % tf)
        ctx.check(np.array_equal(ad, bd), "%s: pixels differ between tree and shards" % tf)
    # Packing is deterministic: another thread count gives identical shards.
    again = os.path.join(work, "again")
    p = ctx.run([ctx.chute, "pack", ctx.tree, again, "--shard-size", "1M", "--threads", "1"])
    ctx.check("packed 200 files" in p.out and "of 3 classes into %d shards" % len(names) in p.out,
              "pack summary: %r" % p.out)
    for nm in names:
        ctx.check(os.path.exists(os.path.join(again, nm)) and
                  read(os.path.join(again, nm)) == read(os.path.join(ctx.shards, nm)),
                  "re-packing gives a different %s" % nm)


def tree_order(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("tree_order")
    root = os.path.join(work, "tree")
    jpgs = sorted(glob.glob(os.path.join(ctx.tree, "class00", "*.jpg")))
    pngs = sorted(glob.glob(os.path.join(ctx.tree, "class01", "*.png")))
    it = iter(jpgs)
    layout = {
        "b/x.jpg": next(it), "A/y.jpg": next(it), "a-b/z.png": pngs[0],
        "a/x.jpg": next(it), "a/.hidden.jpg": next(it), "a/UPPER.JPG": next(it),
        "a/k.JPEG": next(it), "a/sub/y.jpeg": next(it), "a/sub-dir/z.png": pngs[1],
        "a/sub/deeper/w.jpg": next(it), "a/\u00e9t\u00e9.jpg": next(it), "a/zz.webp": next(it),
        "a/t.tiff": next(it), "a/sp ace.jpg": next(it), "a/sub.jpg": next(it),
        "a/a0/1.jpg": next(it), "a/a/1.jpg": next(it),
    }
    for rel, src in layout.items():
        d = os.path.join(root, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        os.link(src, d)
    with open(os.path.join(root, "a", "notes.txt"), "w") as f:
        f.write("not an image\n")
    with open(os.path.join(root, "a", "jpg"), "w") as f:
        f.write("no extension\n")
    outside = os.path.join(work, "outside")
    os.makedirs(outside)
    os.link(next(it), os.path.join(outside, "q.jpg"))
    os.symlink(outside, os.path.join(root, "a", "lnk"))
    os.symlink(os.path.join(root, "a", "x.jpg"), os.path.join(root, "b", "s.jpg"))
    classes, samples = T.imagefolder_samples(root)
    info = ctx.dsinfo_run(root)
    ctx.check(info["classes"] == classes, "classes %s vs ImageFolder %s" % (info["classes"], classes))
    got = [(where, lab) for (_, lab, _, where) in info["samples"]]
    want = [(p, t) for (p, t) in samples]
    if not ctx.check(got == want, "tree listing differs from ImageFolder"):
        for g, w in zip(got + [None] * len(want), want + [None] * len(got)):
            if g != w:
                ctx.note("  chute %s\n  torchvision %s" % (g, w))
    # Packing keeps that order, the labels and the relative names.
    shards = os.path.join(work, "shards")
    ctx.run([ctx.chute, "pack", root, shards, "--threads", "2"])
    verify_shards_against_tree(ctx, shards, root, "awkward tree")


def start_pack(ctx, tree, out, *extra):
    return subprocess.Popen([ctx.chute, "pack", tree, out, "--shard-size", "1M", "--threads", "1"]
                            + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kill_when(ctx, proc, cond, timeout=120.0, settle=0.0):
    """Wait for cond() (polling every ms); then SIGKILL proc.  Returns
    True if it was killed while still running."""
    t0 = time.time()
    while not cond():
        if proc.poll() is not None:
            return False
        if time.time() - t0 > timeout:
            break
        time.sleep(0.001)
    if settle:
        time.sleep(settle)
    alive = proc.poll() is None
    if alive:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    err = proc.stderr.read().decode("utf-8", "replace")
    for m in T.CRASH_MARKERS:
        ctx.check(m not in err, "pack crashed before it was killed:\n" + err[-3000:])
    return alive


def interrupted_dir(ctx, work):
    """A real interrupted pack: the tree has a FIFO in the middle, so pack
    blocks there after writing the shards before it; kill -9 then."""
    tree = os.path.join(work, "tree")
    files = T.link_tree(ctx.tree, tree)
    fifo = os.path.join(tree, "class01", "img00150_fifo.jpg")
    os.mkfifo(fifo)
    out = os.path.join(work, "out")
    proc = start_pack(ctx, tree, out)
    # Wait for the first complete shard, give it a moment to reach the FIFO.
    ok = kill_when(ctx, proc, lambda: os.path.exists(os.path.join(out, "shard-00000.chute")),
                   settle=0.3)
    ctx.check(ok, "pack finished or failed although the tree has a FIFO")
    return tree, out, fifo, files


def crash_safety(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("crash_safety")
    tree, out, fifo, files = interrupted_dir(ctx, work)
    present = sorted(os.listdir(out))
    ctx.note("after kill -9: %s" % present)
    ctx.check("chute.manifest" not in present, "a manifest exists after an interrupted pack")
    ctx.check(any(n.endswith(".chute") for n in present), "no complete shard before the kill")
    b = ctx.run([ctx.chute, "bench", out, "--quiet", "--epochs", "1"], expect="nonzero")
    ctx.check(b.err.strip() != "", "bench on an interrupted pack printed no message")
    d = ctx.dsinfo_run(out, "--kind", "shards", expect="nonzero")
    ctx.check("manifest" in d["proc"].err, "opening as shards does not mention the manifest: %r"
              % d["proc"].err)
    # Re-run pack: a correct dataset, and no temporary files.
    os.unlink(fifo)
    p = ctx.run([ctx.chute, "pack", tree, out, "--shard-size", "1M", "--threads", "1"])
    ctx.check("packed 200 files" in p.out, "re-run pack: %r" % p.out)
    ctx.check(not glob.glob(os.path.join(out, "*.tmp")), "*.tmp files remain: %s" % os.listdir(out))
    names, _ = manifest_shards(out)
    ctx.check(names == shard_files(out), "manifest %s vs files %s" % (names, shard_files(out)))
    verify_shards_against_tree(ctx, out, tree, "re-packed after kill")

    # Timing variant, as an operator would see it: a 400-image tree, kill
    # as soon as the first shard appears (if pack is that quick to finish,
    # say so rather than fail).
    big = os.path.join(work, "big")
    T.link_tree(ctx.tree, big)
    for rel in files:
        d, f = os.path.split(rel)
        os.link(os.path.join(ctx.tree, rel), os.path.join(big, d, "dup_" + f))
    out2 = os.path.join(work, "out2")
    proc = start_pack(ctx, big, out2)
    killed = kill_when(ctx, proc, lambda: os.path.exists(os.path.join(out2, "shard-00000.chute")))
    if killed:
        ctx.check(not os.path.exists(os.path.join(out2, "chute.manifest")),
                  "manifest present after kill at the first shard")
        ctx.run([ctx.chute, "bench", out2, "--quiet"], expect="nonzero")
    else:
        ctx.note("note: pack of 400 images finished before it could be killed")
    p = ctx.run([ctx.chute, "pack", big, out2, "--shard-size", "1M", "--threads", "1"])
    ctx.check("packed 400 files" in p.out, "re-run pack (400): %r" % p.out)
    ctx.check(not glob.glob(os.path.join(out2, "*.tmp")), "*.tmp files remain in out2")
    verify_shards_against_tree(ctx, out2, big, "400-image re-pack")


def interrupted_message(ctx):
    ctx.need_data()
    work = ctx.scratch("interrupted_message")
    tree, out, fifo, _ = interrupted_dir(ctx, work)
    os.unlink(fifo)
    b = ctx.run([ctx.chute, "bench", out, "--quiet"], expect="nonzero")
    ctx.check("manifest" in b.err,
              "`chute bench` on an interrupted pack directory (%s) should say its manifest is "
              "missing; it said: %r" % (sorted(os.listdir(out)), b.err.strip()))
    d = ctx.dsinfo_run(out, expect="nonzero")
    ctx.check("manifest" in d["proc"].err,
              "chute_dataset_open(AUTO) on it should mention the manifest; it said: %r"
              % d["proc"].err.strip())


def repack(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("repack")
    out = os.path.join(work, "out")
    ctx.run([ctx.chute, "pack", ctx.tree, out, "--shard-size", "1M", "--threads", "2"])
    before = shard_files(out)
    small = os.path.join(work, "small")
    T.link_tree(ctx.tree, small, lambda rel: int(os.path.basename(rel)[3:8]) < 30)
    p = ctx.run([ctx.chute, "pack", small, out, "--shard-size", "1M", "--threads", "2"])
    ctx.check("packed 30 files" in p.out, "small pack: %r" % p.out)
    after = shard_files(out)
    names, _ = manifest_shards(out)
    ctx.check(len(before) > len(after), "expected fewer shards (%d before, %d after)" % (len(before), len(after)))
    ctx.check(after == names, "stale shards left behind: directory %s, manifest %s" % (after, names))
    ctx.check(sorted(os.listdir(out)) == sorted(names + ["chute.manifest"]),
              "unexpected files: %s" % sorted(os.listdir(out)))
    verify_shards_against_tree(ctx, out, small, "small re-pack")
    # And back to the big tree.
    ctx.run([ctx.chute, "pack", ctx.tree, out, "--shard-size", "1M", "--threads", "2"])
    ctx.check(shard_files(out) == before, "re-packing the big tree gives %s, first time %s"
              % (shard_files(out), before))
    verify_shards_against_tree(ctx, out, ctx.tree, "big re-pack")


if __name__ == "__main__":
    sys.exit(T.main({"round_trip": round_trip, "tree_order": tree_order,
                     "crash_safety": crash_safety, "interrupted_message": interrupted_message,
                     "repack": repack}))
