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
concurrent           several packs of one tree into one OUT_DIR at once (every
                     rank running the prep script): all exit 0, one packs,
                     the others report it as already packed; the dataset
                     opens and equals the tree; no lock or temporary left.
lock_wait            a pack waits while OUT_DIR's lock is held (and leaves the
                     holder's temporaries alone), or fails at once with
                     --no-wait; after the wait: the same tree's dataset is
                     reported as already packed, another tree's is refused
                     (not overwritten), no dataset means it packs.
io_errors            EIO on a read (LD_PRELOAD fault shim), EACCES (as another
                     user), ENOSPC on a shard write, EIO on the manifest's or
                     the directory's fsync, a failed rename: pack fails naming the file, writes no manifest,
                     leaves no temporary; a transient EIO is retried and
                     reported; never counted as "undecodable".
limits               the loader's default limits (64 MiB per file, 64 Mpx)
                     apply at pack time: over-limit files are skipped and
                     counted apart from undecodable ones (header-checked
                     even with --no-validate), fail under --strict, and
                     --max-sample-bytes raises the limit; the loader reads
                     every packed sample.
out_in_root          OUT_DIR == ROOT, inside ROOT (also through a symlink or
                     a not-yet-existing path with ".."), or containing ROOT
                     is refused before anything is written.
"""
import fcntl
import glob
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib

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


def start_pack(ctx, tree, out, *extra, env=None):
    return subprocess.Popen([ctx.chute, "pack", tree, out, "--shard-size", "1M", "--threads", "1"]
                            + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)


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
    """A real interrupted pack: reading one file in the middle of the tree
    never returns (faultfs STALL; a FIFO did this before special files were
    left out of trees), so pack blocks there after writing the shards
    before it; kill -9 then."""
    tree = os.path.join(work, "tree")
    files = T.link_tree(ctx.tree, tree)
    stall = os.path.join(tree, "class01", "img00150_stall.jpg")
    shutil.copyfile(os.path.join(tree, sorted(files)[0]), stall)
    out = os.path.join(work, "out")
    faultfs = os.environ.get("CHUTE_FAULTFS")
    if not faultfs or not os.path.exists(faultfs):
        raise T.Skip("no faultfs shim (CHUTE_FAULTFS) to stall the pack")
    env = dict(os.environ, LD_PRELOAD=faultfs, CHUTE_FAULT_PATH="img00150_stall.jpg",
               CHUTE_FAULT_OP="read", CHUTE_FAULT_ERRNO="STALL",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    proc = start_pack(ctx, tree, out, env=env)
    # Wait for the first complete shard, give it a moment to reach the FIFO.
    ok = kill_when(ctx, proc, lambda: os.path.exists(os.path.join(out, "shard-00000.chute")),
                   settle=0.3)
    ctx.check(ok, "pack finished or failed although a read in the tree stalls")
    return tree, out, stall, files


def crash_safety(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("crash_safety")
    tree, out, stall, files = interrupted_dir(ctx, work)
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
    os.unlink(stall)
    p = ctx.run([ctx.chute, "pack", tree, out, "--shard-size", "1M", "--threads", "1"])
    ctx.check("packed 200 files" in p.out, "re-run pack: %r" % p.out)
    ctx.check(not glob.glob(os.path.join(out, "*.tmp")), "*.tmp files remain: %s" % os.listdir(out))
    ctx.check(not os.path.exists(os.path.join(out, "chute.lock")), "the lock file remains")
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
    tree, out, stall, _ = interrupted_dir(ctx, work)
    os.unlink(stall)
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



def leftovers(d):
    """Files pack must never leave behind: temporaries and its lock."""
    return sorted(n for n in os.listdir(d) if n.endswith(".tmp") or n == "chute.lock")


def concurrent(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("concurrent")
    # Many small shards: many temporaries and renames to collide on.  Before
    # the lock, 6 packs at once broke about one trial in four (a shard
    # renamed by one pack while another still wrote it: "size differs from
    # the manifest"), and the losers always failed.
    trials, procs = 6, 6
    for t in range(trials):
        out = os.path.join(work, "out%d" % t)
        ps = []
        for k in range(procs):
            ps.append(start_pack(ctx, ctx.tree, out, "--shard-size", "64K"))
            time.sleep(0.01 * (k % 3))
        res = []
        for p in ps:
            try:
                o, e = p.communicate(timeout=int(os.environ.get("CHUTE_TEST_RUN_TIMEOUT", "60")) * 2)
            except subprocess.TimeoutExpired:
                p.kill()
                o, e = p.communicate()
                ctx.check(False, "trial %d: a concurrent pack hung" % t)
            res.append((p.returncode, o.decode("utf-8", "replace"), e.decode("utf-8", "replace")))
        for rc, o, e in res:
            ctx.check(rc == 0, "trial %d: a concurrent pack exited %d: %s" % (t, rc, (o + e)[-600:]))
            for m in T.CRASH_MARKERS:
                ctx.check(m not in e, "trial %d: crash: %s" % (t, e[-2000:]))
        packed = sum("packed 200 files" in o for _, o, _ in res)
        already = sum(o.startswith("already packed:") and "200 files" in o for _, o, _ in res)
        ctx.check(packed == 1 and already == procs - 1,
                  "trial %d: %d packs packed, %d reported 'already packed' (want 1 and %d): %s"
                  % (t, packed, already, procs - 1, [o.strip()[:80] for _, o, _ in res]))
        ctx.check(leftovers(out) == [], "trial %d: left behind %s" % (t, leftovers(out)))
        verify_shards_against_tree(ctx, out, ctx.tree, "trial %d" % t)
        if ctx.failures:
            break


def hold_lock(out):
    """Take OUT_DIR's pack lock the way a pack does (flock on chute.lock)."""
    os.makedirs(out, exist_ok=True)
    fd = os.open(os.path.join(out, "chute.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"pid 4242 on the-test\n")
    return fd


def lock_wait(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("lock_wait")
    small = os.path.join(work, "small")
    T.link_tree(ctx.tree, small, lambda rel: int(os.path.basename(rel)[3:8]) < 30)
    small_out = os.path.join(work, "small_out")
    ctx.run([ctx.chute, "pack", small, small_out, "--shard-size", "1M"])
    full_out = os.path.join(work, "full_out")
    ctx.run([ctx.chute, "pack", ctx.tree, full_out, "--shard-size", "1M"])

    # --no-wait: fails at once, names the holder, touches nothing.
    out = os.path.join(work, "out")
    fd = hold_lock(out)
    stale = os.path.join(out, "shard-00003.chute.tmp")
    with open(stale, "wb") as f:
        f.write(b"the holder's shard in progress")
    t0 = time.time()
    p = ctx.run([ctx.chute, "pack", ctx.tree, out, "--no-wait"], expect="nonzero")
    ctx.check(time.time() - t0 < 10, "--no-wait waited")
    ctx.check("another process" in p.err and "pid 4242 on the-test" in p.err,
              "--no-wait message: %r" % p.err)
    ctx.check(os.path.exists(stale), "--no-wait removed the lock holder's temporary")

    def wait_case(tag, populate, expect_rc, expect_out, expect_err="", holder_dies=False):
        shutil.rmtree(out, ignore_errors=True)
        fd = hold_lock(out)
        with open(stale, "wb") as f:
            f.write(b"the holder's shard in progress")
        p = start_pack(ctx, ctx.tree, out)
        time.sleep(1.0)
        ctx.check(p.poll() is None, "%s: pack did not wait for the held lock (exit %s)" % (tag, p.poll()))
        ctx.check(os.path.exists(stale), "%s: a waiting pack removed the holder's temporary" % tag)
        ctx.check(not os.path.exists(os.path.join(out, "shard-00000.chute")),
                  "%s: a waiting pack wrote a shard" % tag)
        populate()
        if not holder_dies:  # a pack's exit; a killed one leaves both behind
            os.unlink(stale)
            os.unlink(os.path.join(out, "chute.lock"))
        os.close(fd)
        try:
            o, e = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            ctx.check(False, "%s: pack still waiting after the lock was released" % tag)
        o, e = o.decode("utf-8", "replace"), e.decode("utf-8", "replace")
        ctx.check("is being packed by another process (pid 4242 on the-test); waiting" in e,
                  "%s: no waiting notice: %r" % (tag, e))
        ctx.check((p.returncode == 0) == (expect_rc == 0) and p.returncode >= 0,
                  "%s: exit %d, want %s: %s" % (tag, p.returncode, expect_rc, (o + e)[-800:]))
        ctx.check(expect_out in o and expect_err in e, "%s: output %r / %r" % (tag, o, e[-600:]))
        ctx.check(leftovers(out) == [], "%s: left behind %s" % (tag, leftovers(out)))

    def copy_from(src):
        def populate():
            for n in os.listdir(src):
                shutil.copy(os.path.join(src, n), os.path.join(out, n))
        return populate

    # The holder packed this very tree: reported, not redone.
    wait_case("same tree", copy_from(full_out), 0, "already packed: %s holds 200 files" % out)
    verify_shards_against_tree(ctx, out, ctx.tree, "already packed")
    # The holder packed another tree: refused, and its dataset left alone.
    wait_case("other tree", copy_from(small_out), 1, "", "packed a different tree into it")
    verify_shards_against_tree(ctx, out, small, "other tree kept")
    # The holder died without a dataset: this pack packs.
    wait_case("holder died", lambda: None, 0, "packed 200 files", holder_dies=True)
    verify_shards_against_tree(ctx, out, ctx.tree, "packed after the holder died")


def fault_env(ctx, path, op="read", errno_name="EIO", **extra):
    lib = os.environ.get("CHUTE_FAULTFS")
    if not lib or not os.path.exists(lib):
        raise T.Skip("fault shim not built (CHUTE_FAULTFS=%r)" % lib)
    env = dict(os.environ)
    env.update({"LD_PRELOAD": lib, "CHUTE_FAULT_PATH": path, "CHUTE_FAULT_OP": op,
                "CHUTE_FAULT_ERRNO": errno_name})
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def io_errors(ctx):
    ctx.need_data()
    work = ctx.scratch("io_errors")
    tree = os.path.join(work, "tree")
    files = T.link_tree(ctx.tree, tree)
    victim = files[57]  # any file; the fault is injected by path
    pack = [ctx.chute, "pack", tree]
    opts = ["--shard-size", "1M", "--threads", "2"]

    def failed_cleanly(tag, out, p, *words):
        ctx.check(p.returncode > 0, "%s: exit %d, want a failure: %s" % (tag, p.returncode, p.out))
        for w in words:
            ctx.check(w in p.err, "%s: message lacks %r: %r" % (tag, w, p.err))
        ctx.check("undecodable" not in p.out + p.err, "%s: an I/O error was reported as undecodable" % tag)
        if os.path.isdir(out):
            ctx.check(not os.path.exists(os.path.join(out, "chute.manifest")),
                      "%s: a manifest was written: %s" % (tag, sorted(os.listdir(out))))
            ctx.check(leftovers(out) == [], "%s: left behind %s" % (tag, leftovers(out)))
            # nor finished shards no manifest lists (issue 31.4: a full disk
            # kept shard-00000.chute, shard-00001.chute and a .tmp)
            shards = sorted(n for n in os.listdir(out) if n.startswith("shard-"))
            ctx.check(shards == [], "%s: left shards behind: %s" % (tag, shards))
        d = ctx.dsinfo_run(out, "--kind", "shards", expect="nonzero")
        ctx.check(d["proc"].returncode != 0, "%s: the output opens as a dataset" % tag)

    # A read that keeps failing with EIO: the pack fails naming the file.
    out = os.path.join(work, "eio")
    log = os.path.join(work, "eio.log")
    p = ctx.run(pack + [out] + opts, expect="nonzero",
                env=fault_env(ctx, victim, CHUTE_FAULT_LOG=log))
    failed_cleanly("EIO", out, p, victim, "Input/output error")
    with open(log) as f:
        n = len(f.read().splitlines())
    ctx.check(n >= 2, "EIO: the read was not retried (%d faults injected)" % n)

    # One transient EIO: retried, packed whole, and the summary says so.
    out = os.path.join(work, "eio_once")
    p = ctx.run(pack + [out] + opts, env=fault_env(ctx, victim, CHUTE_FAULT_COUNT=1))
    ctx.check("packed 200 files" in p.out and "1 files read only on a retry" in p.out,
              "transient EIO: %r" % p.out)

    # EACCES for real: a chmod-000 copy, packed as an unprivileged user.
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        t2 = os.path.join(work, "tree_eacces")
        T.link_tree(ctx.tree, t2)
        locked = os.path.join(t2, victim)
        os.unlink(locked)
        shutil.copy(os.path.join(ctx.tree, victim), locked)
        os.chmod(locked, 0)
        outp = os.path.join(work, "eacces_parent")
        os.makedirs(outp)
        os.chmod(outp, 0o777)
        out = os.path.join(outp, "out")
        p = ctx.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                     ctx.chute, "pack", t2, out] + opts, expect=None)
        if "Permission denied" in p.err and victim not in p.err:
            ctx.note("note: the unprivileged user cannot reach the test tree; EACCES case skipped")
        else:
            failed_cleanly("EACCES", out, p, victim, "Permission denied")
    else:
        ctx.note("note: not root or no setpriv; EACCES case skipped")

    # Writing the second shard runs out of space.
    out = os.path.join(work, "enospc")
    p = ctx.run(pack + [out] + opts, expect="nonzero",
                env=fault_env(ctx, "shard-00001", "write", "ENOSPC"))
    failed_cleanly("ENOSPC", out, p, "shard-00001", "No space left on device")
    # fsync of the manifest fails (its rename must not be trusted either).
    out = os.path.join(work, "fsync")
    p = ctx.run(pack + [out] + opts, expect="nonzero",
                env=fault_env(ctx, "chute.manifest", "fsync", "EIO"))
    failed_cleanly("manifest fsync", out, p, "chute.manifest", "fsync")
    # The directory fsync that makes the old manifest's removal durable
    # fails (this one was ignored: exit 0).
    out = os.path.join(work, "dirsync")
    p = ctx.run(pack + [out] + opts, expect="nonzero",
                env=fault_env(ctx, "=" + out, "fsync", "EIO", CHUTE_FAULT_COUNT=1))
    failed_cleanly("directory fsync", out, p, out, "fsync failed")
    # A shard's rename fails.
    out = os.path.join(work, "rename")
    p = ctx.run(pack + [out] + opts, expect="nonzero",
                env=fault_env(ctx, "shard-00002.chute.tmp", "rename", "EIO"))
    failed_cleanly("rename", out, p, "shard-00002", "rename")
    # A pack that failed is re-run without faults: a whole, correct dataset.
    p = ctx.run(pack + [out] + opts)
    ctx.check("packed 200 files" in p.out, "re-run after faults: %r" % p.out)
    ctx.check(leftovers(out) == [], "re-run left behind %s" % leftovers(out))


def png_header_only(w, h):
    """A PNG whose IHDR claims w x h (the pixels are never reached)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def limits(ctx):
    ctx.need_data()
    work = ctx.scratch("limits")
    tree = os.path.join(work, "tree")
    files = T.link_tree(ctx.tree, tree, lambda rel: int(os.path.basename(rel)[3:8]) < 12)
    jpg = next(os.path.join(ctx.tree, f) for f in files if f.endswith(".jpg"))
    mib64 = 64 << 20
    # JPEGs padded with zeros after their end marker (sparse: no disk used):
    # exactly the loader's 64 MiB default, and one byte over it.
    for name, size in (("pad_exact.jpg", mib64), ("pad_over.jpg", mib64 + 1)):
        d = os.path.join(tree, "class00", name)
        shutil.copy(jpg, d)
        os.truncate(d, size)
    # 9000 x 8000 = 72 Mpx, over the loader's 64 Mpx (67,108,864 pixels).
    with open(os.path.join(tree, "class01", "huge.png"), "wb") as f:
        f.write(png_header_only(9000, 8000))
    with open(os.path.join(tree, "class02", "junk.jpg"), "wb") as f:
        f.write(b"this is not an image at all\n" * 10)
    total = len(files) + 4
    # The reference is what the loader with default options makes of each
    # file (a one-file tree, --strict): pack must agree with it.
    for rel, loads in (("class00/pad_exact.jpg", True), ("class00/pad_over.jpg", False),
                       ("class01/huge.png", False), ("class02/junk.jpg", False)):
        one = os.path.join(work, "one_" + os.path.basename(rel))
        os.makedirs(os.path.join(one, "c"))
        os.link(os.path.join(tree, rel), os.path.join(one, "c", os.path.basename(rel)))
        d = ctx.dump_run(one, os.path.join(work, "one.bin"), "--transform", "none", "--size", 16,
                         "--dtype", "uint8", "--workers", 1, "--strict", expect=None)
        ctx.check((d.returncode == 0) == loads, "the default loader %s %s: %r" %
                  ("rejects" if loads else "accepts", rel, (d.out + d.err)[-300:]))

    out = os.path.join(work, "out")
    p = ctx.run([ctx.chute, "pack", tree, out, "--threads", "2"])
    ctx.check("packed %d files" % (total - 3) in p.out and
              "skipped 1 undecodable files and 2 over the loader's limits" in p.out,
              "default pack summary: %r" % p.out)
    for bad in ("pad_over.jpg", "huge.png", "junk.jpg"):
        ctx.check(bad in p.err, "the skip of %s is not reported: %r" % (bad, p.err))
    ctx.check("pad_exact.jpg" not in p.err, "a file exactly at the limit was skipped")
    d = ctx.dump_run(out, os.path.join(work, "shards.bin"), "--transform", "none", "--size", 16,
                     "--dtype", "uint8", "--workers", 2, "--strict", "--no-shuffle")
    c = T.parse_counts(d.out)
    ctx.check(c.get("corrupt") == 0 and c.get("samples") == total - 3,
              "the loader on the packed shards: %r (every packed sample must load)" % d.out)
    os.unlink(os.path.join(work, "shards.bin"))
    shutil.rmtree(out)

    # --no-validate still applies both limits (size, header pixels).
    out = os.path.join(work, "out_nv")
    p = ctx.run([ctx.chute, "pack", tree, out, "--no-validate"])
    ctx.check("skipped 1 undecodable files and 2 over the loader's limits" in p.out,
              "--no-validate summary: %r" % p.out)
    shutil.rmtree(out)
    # --strict: the first over-limit file fails the pack.
    out = os.path.join(work, "out_strict")
    p = ctx.run([ctx.chute, "pack", tree, out, "--strict"], expect="nonzero")
    ctx.check("pad_over.jpg" in p.err and "limit" in p.err, "--strict message: %r" % p.err)
    ctx.check(not os.path.exists(os.path.join(out, "chute.manifest")), "--strict wrote a manifest")
    shutil.rmtree(out, ignore_errors=True)
    # A raised limit packs the large file.
    out = os.path.join(work, "out_raised")
    p = ctx.run([ctx.chute, "pack", tree, out, "--max-sample-bytes", "65M",
                 "--max-pixels", "80000000"])
    # (huge.png is then decoded, and its made-up pixel data is undecodable.)
    ctx.check("packed %d files" % (total - 2) in p.out and
              "skipped 2 undecodable files and 0 over" in p.out, "raised limits: %r" % p.out)
    shutil.rmtree(out, ignore_errors=True)


def out_in_root(ctx):
    ctx.need_data()
    work = ctx.scratch("out_in_root")
    tree = os.path.join(work, "tree")
    T.link_tree(ctx.tree, tree, lambda rel: int(os.path.basename(rel)[3:8]) < 12)
    before = sorted(os.listdir(tree))
    before00 = sorted(os.listdir(os.path.join(tree, "class00")))
    link = os.path.join(work, "link")
    os.symlink(tree, link)
    cases = [
        ("inside", tree, os.path.join(tree, "packed"), "inside ROOT"),
        ("nested", tree, os.path.join(tree, "class00", "packed"), "inside ROOT"),
        ("itself", tree, tree, "ROOT itself"),
        ("itself, trailing slash", tree + "/", tree, "ROOT itself"),
        ("via symlink", link, os.path.join(tree, "packed"), "inside ROOT"),
        ("missing tail with ..", tree, os.path.join(tree, "x", "..", "y"), "inside ROOT"),
        ("relative", os.path.relpath(tree), os.path.join(os.path.relpath(tree), "p"), "inside ROOT"),
        ("root inside out", os.path.join(tree, "class00"), tree, "inside OUT_DIR"),
    ]
    for tag, root, out, words in cases:
        p = ctx.run([ctx.chute, "pack", root, out], expect="nonzero")
        ctx.check(words in p.err, "%s: message %r lacks %r" % (tag, p.err, words))
        ctx.check(sorted(os.listdir(tree)) == before, "%s: pack wrote into the tree: %s"
                  % (tag, sorted(os.listdir(tree))))
        ctx.check(sorted(os.listdir(os.path.join(tree, "class00"))) == before00,
                  "%s: pack wrote into a class directory" % tag)
    ctx.check(not os.path.exists(os.path.join(tree, "x")), "a refused pack created directories")
    # A sibling whose name merely starts with ROOT's is fine.
    p = ctx.run([ctx.chute, "pack", tree, tree + "2"])
    ctx.check("packed" in p.out, "sibling OUT_DIR %s2 refused: %r" % (tree, p.err))


if __name__ == "__main__":
    sys.exit(T.main({"round_trip": round_trip, "tree_order": tree_order,
                     "crash_safety": crash_safety, "interrupted_message": interrupted_message,
                     "repack": repack, "concurrent": concurrent, "lock_wait": lock_wait,
                     "io_errors": io_errors, "limits": limits, "out_in_root": out_in_root}))
