#!/usr/bin/env python3
"""Hostile image trees: names, special files, empty classes, long paths.

order      class, directory and file names that are not valid UTF-8 (and
           valid ones that sort differently once escaped bytes are among
           them) list in exactly torchvision ImageFolder's order, compared
           byte for byte with torchvision's own listing (os.fsencode of
           its paths); `inspect --json` of that tree is valid UTF-8 JSON
           whose class names give back the raw bytes via os.fsencode.
special    a FIFO, a socket, a symbolic link to a FIFO and to /dev/null,
           a dangling link and a link loop, all named *.jpg: inspect,
           bench, dump and pack finish (no hang), list only the regular
           files, and inspect/bench say what was left out; --verify fails.
empty      an empty class directory (the first one, and one holding only
           a .txt) is refused naming those classes, the same set that
           torchvision's FileNotFoundError names; pack refuses it too; a
           tree of undecodable files only does not crash inspect.
messages   a path too long to open keeps the reason in the message (the
           path loses its middle); inspect --verify exits 1 with a
           summary when a file does not decode, 0 on a clean tree, and
           names the bad file once per line.
"""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

HANG = 30  # seconds: every command here finishes in well under one


def photos(ctx, n):
    import glob
    files = sorted(glob.glob(os.path.join(ctx.tree, "*", "*.jpg")))
    if not files:
        raise T.Skip("fixture tree has no JPEGs")
    return [files[k % len(files)] for k in range(n)]  # links may repeat a photo


def put(src, dst):
    """Hard-link (or copy) src to the bytes path dst, making directories."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())


def dsinfo_bytes(ctx, root, expect=0):
    """dsinfo's listing with names as raw bytes."""
    p = ctx.run([ctx.dsinfo, os.fsdecode(root)], expect=expect, timeout=HANG)
    classes, samples = [], []
    for line in p.stdout.split(b"\n"):
        if line.startswith(b"class "):
            classes.append(line.split(b" ", 2)[2])
        elif line.startswith(b"sample "):
            _, i, lab, size, where = line.split(b" ", 4)
            samples.append((where, int(lab)))
    return classes, samples, p


# Names whose Python order (code points after os.fsdecode) differs from
# byte order, and byte sequences on every edge of UTF-8 validity.
NAMES = [
    b"a", b"Z", b".hidden", b"\xc3\xa9",            # e-acute, valid
    b"\x80", b"\xff", b"\xfe",                       # escaped: U+DC80, U+DCFF, U+DCFE
    b"\xee\x80\x80", b"\xef\xbf\xbd",                # U+E000, U+FFFD (> U+DCxx, < 0xFF bytes)
    b"\xf0\x9f\x98\x80",                             # U+1F600
    b"\xc3x", b"\xc3\xa9\x80", b"\xe2\x82",          # truncated sequences
    b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf",   # surrogate, overlongs
    b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",    # > U+10FFFF, 5-byte form
    b"\xd0\xb0", b"\xd0\xb0\x80", b"\xd0",           # Cyrillic a, + stray, bare lead
]


def case_order(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("order")
    root = os.path.join(work, "tree").encode()
    src = iter(photos(ctx, 200))
    for cls in NAMES:
        put(next(src), os.path.join(root, cls, b"1.jpg"))
    # One class with every name as a file, as a directory, and nested.
    mix = os.path.join(root, b"mix")
    for nm in NAMES:
        put(next(src), os.path.join(mix, nm + b".jpg"))
        put(next(src), os.path.join(mix, nm, b"x.jpg"))
    put(next(src), os.path.join(mix, b"\xc3\xa9-x", b"y.jpg"))
    put(next(src), os.path.join(mix, b"\x80", b"\xff", b"z.jpg"))

    from torchvision.datasets import ImageFolder
    tv = ImageFolder(os.fsdecode(root))
    want_classes = [os.fsencode(c) for c in tv.classes]
    want = [(os.fsencode(p), t) for p, t in tv.samples]
    # The test only means something if byte order differs here.
    ctx.check(want_classes != sorted(want_classes), "test tree does not exercise the order")
    classes, got, _ = dsinfo_bytes(ctx, root)
    ctx.check(classes == want_classes, "classes differ from ImageFolder:\n  chute %r\n  tv    %r"
              % (classes, want_classes))
    if not ctx.check(got == want, "samples differ from ImageFolder (%d vs %d)" % (len(got), len(want))):
        for g, w in zip(got, want):
            if g != w:
                ctx.note("  first difference: chute %r, torchvision %r" % (g, w))
                break

    # inspect --json: valid UTF-8, valid JSON; names round-trip to bytes.
    garbage = os.path.join(mix, b"\xff\x80bad.jpg")
    with open(garbage, "wb") as f:
        f.write(b"not an image at all" * 8)
    p = ctx.run([ctx.chute, "inspect", os.fsdecode(root), "--json"], timeout=HANG)
    try:
        text = p.stdout.decode("utf-8")  # strict
        j = json.loads(text)
    except ValueError as e:
        ctx.check(False, "inspect --json is not valid UTF-8 JSON: %s" % e)
        return
    ctx.check([os.fsencode(k) for k in j["class_counts"]] == want_classes,
              "class_counts keys do not give back the class names' bytes")
    ctx.check(os.fsencode(j["source"]) == root, "source does not give back the root's bytes")
    bad = [os.fsencode(u["where"]) for u in j["undecodable_samples"]]
    ctx.check(bad == [garbage], "undecodable_samples where %r, want [%r]" % (bad, garbage))
    # Packing keeps ImageFolder's order too.
    shards = os.path.join(work, "shards").encode()
    ctx.run([ctx.chute, "pack", os.fsdecode(root), os.fsdecode(shards), "--threads", "2"], timeout=HANG)
    sc, ss, _ = dsinfo_bytes(ctx, shards)
    ctx.check(sc == want_classes, "packed classes differ from ImageFolder")
    ctx.check([lab for _, lab in ss] == [t for p_, t in want if p_ != garbage],
              "packed labels differ from ImageFolder's order")


def case_special(ctx):
    ctx.need_data()
    work = ctx.scratch("special")
    root = os.path.join(work, "tree")
    src = photos(ctx, 6)
    for k, f in enumerate(src[:3]):
        put(f, os.path.join(root, "a", "%d.jpg" % k).encode())
    for k, f in enumerate(src[3:]):
        put(f, os.path.join(root, "b", "%d.jpg" % k).encode())
    a = os.path.join(root, "a")
    os.mkfifo(os.path.join(a, "fifo.jpg"))
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(a, "sock.jpg"))
    s.close()
    os.symlink("fifo.jpg", os.path.join(a, "to_fifo.jpg"))
    os.symlink("/dev/null", os.path.join(a, "null.jpg"))
    os.symlink("nowhere.jpg", os.path.join(a, "dangling.jpg"))
    os.symlink("loop.jpg", os.path.join(a, "loop.jpg"))
    os.mkfifo(os.path.join(root, "b", "notes.txt"))  # not image-named: ignored silently
    special = {"fifo.jpg", "sock.jpg", "to_fifo.jpg", "null.jpg", "dangling.jpg", "loop.jpg"}

    classes, got, _ = dsinfo_bytes(ctx, root.encode())
    names = sorted(os.path.basename(w).decode() for w, _ in got)
    ctx.check(names == ["0.jpg", "0.jpg", "1.jpg", "1.jpg", "2.jpg", "2.jpg"],
              "listing should hold the 6 regular files only: %s" % names)
    p = ctx.run([ctx.chute, "inspect", root], timeout=HANG)
    for nm in special:
        ctx.check(("%s: " % os.path.join(a, nm)) in p.out and "left out" in p.out,
                  "inspect does not say %s was left out:\n%s" % (nm, p.out))
    ctx.check("notes.txt" not in p.out, "a non-image FIFO should be ignored silently")
    p = ctx.run([ctx.chute, "inspect", root, "--verify"], expect=1, timeout=HANG)
    ctx.check("left out" in p.err, "--verify summary does not count entries left out: %s" % p.err)
    p = ctx.run([ctx.chute, "inspect", root, "--json"], timeout=HANG)
    j = json.loads(p.out)
    ctx.check(j["skipped_at_listing"] == len(special) and j["samples"] == 6,
              "inspect --json: %r skipped, %r samples" % (j.get("skipped_at_listing"), j.get("samples")))
    p = ctx.run([ctx.chute, "bench", root, "--json", "--batch-size", 2, "--size", 16,
                 "--workers", 2, "--transform", "none"], timeout=HANG)
    j = json.loads(p.out) if p.out.strip() else {}
    ctx.check(j.get("images") == 6 and j.get("corrupt") == 0, "bench: %s" % j)
    ctx.check(sum("left out" in ln for ln in p.err.splitlines()) == len(special),
              "bench does not report the entries left out:\n%s" % p.err)
    ctx.dump_run(root, os.path.join(work, "dump.bin"), "--size", 16, "--transform", "none")
    shards = os.path.join(work, "shards")
    ctx.run([ctx.chute, "pack", root, shards, "--threads", "2"], timeout=HANG)
    sc, ss, _ = dsinfo_bytes(ctx, shards.encode())
    ctx.check(len(ss) == 6, "pack stored %d samples, want the 6 regular files" % len(ss))


def case_empty(ctx):
    ctx.need_data()
    ctx.need_modules("torchvision")
    work = ctx.scratch("empty")
    root = os.path.join(work, "tree")
    src = iter(photos(ctx, 4))
    os.makedirs(os.path.join(root, "a_empty"))                    # first class: empty
    put(next(src), os.path.join(root, "b", "1.jpg").encode())
    os.makedirs(os.path.join(root, "c_text"))
    with open(os.path.join(root, "c_text", "notes.txt"), "w") as f:
        f.write("not an image\n")
    put(next(src), os.path.join(root, "d_nested", "sub", "1.jpg").encode())  # not empty
    os.makedirs(os.path.join(root, "e_dirs_only", "sub", "deeper"))

    from torchvision.datasets import ImageFolder
    try:
        ImageFolder(root)
        tv_msg = ""
    except FileNotFoundError as e:
        tv_msg = str(e)
    ctx.check("Found no valid file for the classes" in tv_msg, "torchvision accepted it? %r" % tv_msg)
    tv_empty = set(tv_msg.split("classes ", 1)[1].split(". ", 1)[0].split(", ")) if tv_msg else set()
    for cmd in ([ctx.dsinfo, root], [ctx.chute, "inspect", root], [ctx.chute, "bench", root]):
        p = ctx.run(cmd, expect="nonzero", timeout=HANG)
        named = {c for c in ("a_empty", "b", "c_text", "d_nested", "e_dirs_only") if "'%s'" % c in p.err}
        ctx.check(named == tv_empty, "%s names %s, torchvision %s:\n%s"
                  % (os.path.basename(cmd[0]) + " " + " ".join(cmd[1:2]), sorted(named), sorted(tv_empty), p.err))
        ctx.check("no image files" in p.err, "message does not say why: %s" % p.err)
    out = os.path.join(work, "shards")
    ctx.run([ctx.chute, "pack", root, out], expect="nonzero", timeout=HANG)
    ctx.check(not os.path.exists(os.path.join(out, "chute.manifest")), "pack wrote a dataset")
    # Every sample undecodable: inspect reports them all (and must not
    # hand qsort a NULL array).
    bad = os.path.join(work, "bad")
    for k in range(3):
        os.makedirs(os.path.join(bad, "c%d" % k))
        with open(os.path.join(bad, "c%d" % k, "x.jpg"), "wb") as f:
            f.write(b"garbage" * 30)
    p = ctx.run([ctx.chute, "inspect", bad, "--json"], timeout=HANG)
    j = json.loads(p.out) if p.out.strip() else {}
    ctx.check(j.get("undecodable") == 3 and j.get("top_dimensions") == [], "all-bad tree: %s" % j)


def case_messages(ctx):
    ctx.need_data()
    work = ctx.scratch("messages")
    # A tree whose file paths exceed PATH_MAX: the listing refuses it, and
    # the message keeps "path too long" although the path is 4 KiB.
    base = os.path.join(work, "deep")
    os.makedirs(base)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    path = base
    try:
        while len(path) < 4096 - 250:
            nm = "d" * min(200, 4096 - 250 - len(path))
            os.mkdir(nm, dir_fd=fd)
            nfd = os.open(nm, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
            path = os.path.join(path, nm)
        root = path
        os.mkdir("c", dir_fd=fd)
        cfd = os.open("c", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.mkdir("e" * 240, dir_fd=cfd)
        efd = os.open("e" * 240, os.O_RDONLY | os.O_DIRECTORY, dir_fd=cfd)
        wfd = os.open("x.jpg", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=efd)
        os.write(wfd, b"\xff\xd8\xff")
        for x in (wfd, efd, cfd):
            os.close(x)
    finally:
        os.close(fd)
    for cmd in ([ctx.chute, "inspect", root], [ctx.chute, "bench", root], [ctx.dsinfo, root]):
        p = ctx.run(cmd, expect="nonzero", timeout=HANG)
        last = p.err.strip().splitlines()[-1] if p.err.strip() else ""
        ctx.check(last.endswith("path too long"), "%s: reason lost: ...%s"
                  % (os.path.basename(cmd[0]), last[-200:]))
        ctx.check("\u2026" in last, "%s: long path not shortened in the middle" % os.path.basename(cmd[0]))
    # --verify: a bad file is a failure, with a summary; each line names it once.
    t = os.path.join(work, "tree")
    T.link_tree(ctx.tree, t)
    ctx.run([ctx.chute, "inspect", t, "--verify", "--threads", 2], expect=0, timeout=120)
    first = sorted(os.listdir(t))[0]
    bad = os.path.join(t, first, "zz_garbage.jpg")
    with open(bad, "wb") as f:
        f.write(b"this is not a JPEG" * 10)
    p = ctx.run([ctx.chute, "inspect", t, "--verify", "--threads", 2], expect=1, timeout=120)
    ctx.check("verify FAILED" in p.err and "1 of 201" in p.err, "no summary: %s" % p.err)
    lines = [ln for ln in p.out.splitlines() if "zz_garbage.jpg" in ln]
    ctx.check(len(lines) == 1 and lines[0].count(bad) == 1, "bad file lines: %r" % lines)
    p = ctx.run([ctx.chute, "inspect", t, "--verify", "--json", "--threads", 2], expect=1, timeout=120)
    j = json.loads(p.out)
    ctx.check(j.get("verify_ok") is False and j["undecodable_samples"][0]["where"] == bad
              and bad not in j["undecodable_samples"][0]["reason"],
              "inspect --json --verify: %r" % j.get("undecodable_samples"))


cases = {"order": case_order, "special": case_special, "empty": case_empty,
         "messages": case_messages}

if __name__ == "__main__":
    sys.exit(T.main(cases))
