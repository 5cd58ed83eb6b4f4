#!/usr/bin/env python3
"""`chute pack --max-side N [--quality Q]` and `chute pack --raw`, against Pillow.

The reference is never chute: shards are read with a parser written here
from docs/FORMAT.md (struct + zlib.crc32), re-encoded JPEGs are decoded by
Pillow, and the expected pixels and sizes come from Pillow's
Image.resize(LANCZOS) and torchvision's Resize(N).

max_side_jpeg     every image whose shorter side is over N is re-encoded as a
                  JPEG of torchvision Resize(N)'s size that Pillow decodes,
                  within a stated tolerance of Pillow's LANCZOS resize of the
                  original (JPEG quality 90 loss: mean |diff| <= 2.5 levels
                  per image on the fixture's grainy photos) and within 1
                  level of Pillow's resize + Pillow's own JPEG encode at the
                  same settings (CMYK sources excepted: see raw_exact); the
                  others are stored byte for byte; the
                  manifest is version 2 with the pack line and `inspect`
                  shows it; a lower --quality gives smaller files and is
                  recorded; bad --quality/--max-side values, and --quality
                  without --max-side or with --raw, are refused.
raw_exact         --raw --max-side N: every record is a CHRAW record whose
                  pixels equal Pillow's LANCZOS resize of the original
                  exactly (images over N) or Pillow's own decode (the
                  others); --raw alone: every record equals Pillow's decode
                  (both use libjpeg-turbo's default IDCT and upsampling);
                  the loader reads raw shards with the train and eval
                  transforms.  CMYK JPEGs are compared within 1 level
                  (Pillow's and chute's inverted-CMYK arithmetic round
                  differently).
raw_over_limit    --raw records over --max-sample-bytes are skipped as over
                  the limit (count from Pillow's sizes), named; --strict fails.
raw_lying_header  a raw record whose header lies about its size (CRC fixed
                  up, so only the CHRAW parser can notice) is corrupt: the
                  loader fails under --strict naming shard@offset and the
                  CHRAW reason, and skips it (counted) by default.
"""
import glob
import os
import shutil
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

MAX_SIDE = 256


def read_shards(d):
    """[(name, label, kind, offset, bytes, shard path)] in dataset order, per docs/FORMAT.md."""
    out = []
    names = []
    for line in open(os.path.join(d, "chute.manifest")).read().splitlines():
        if line.startswith("shard "):
            names.append(line.split()[1])
    for nm in names:
        path = os.path.join(d, nm)
        b = open(path, "rb").read()
        tr = b[-64:]
        magic, ix_off, ix_bytes, count = struct.unpack_from("<8sQQQ", tr, 0)
        assert magic == b"CHUTEIDX", path
        ix = b[ix_off:ix_off + ix_bytes]
        ents = [struct.unpack_from("<QIIiI", ix, 32 * i) for i in range(count)]
        at = 32 * count
        (ncls,) = struct.unpack_from("<I", ix, at)
        at += 4
        for _ in range(ncls):
            (ln,) = struct.unpack_from("<I", ix, at)
            at += 4 + ln
        (nn,) = struct.unpack_from("<Q", ix, at)
        at += 8
        snames = []
        for _ in range(nn):
            (ln,) = struct.unpack_from("<I", ix, at)
            snames.append(ix[at + 4:at + 4 + ln].decode())
            at += 4 + ln
        for (off, length, crc, label, kind), sn in zip(ents, snames):
            rec = b[off:off + length]
            assert zlib.crc32(rec) == crc, "%s@%d: CRC" % (path, off)
            out.append((sn, label, kind, off, rec, path))
    return out


def parse_chraw(rec):
    import numpy as np
    assert rec[:5] == b"CHRAW", rec[:8]
    ver, ch, dt, w, h = struct.unpack_from("<BBBII", rec, 5)
    assert ver == 1 and dt == 0 and len(rec) == 16 + w * h * ch, (ver, dt, w, h, ch, len(rec))
    return np.frombuffer(rec, np.uint8, offset=16).reshape(h, w, ch)


def pil_rgb(path):
    from PIL import Image
    im = Image.open(path)
    mode = im.mode
    return im.convert("RGB"), mode


def pack(ctx, out, *opts, expect=0):
    return ctx.run([ctx.chute, "pack", ctx.tree, out, "--threads", 2] + list(opts), expect=expect)


def max_side_jpeg(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL", "torchvision")
    import io
    import json
    import numpy as np
    from PIL import Image
    import torchvision.transforms as TV
    work = ctx.scratch("max_side_jpeg")
    out = os.path.join(work, "s")
    pack(ctx, out, "--max-side", MAX_SIDE)
    lines = open(os.path.join(out, "chute.manifest")).read().splitlines()
    ctx.check(lines[:2] == ["chute-dataset 2", "pack max_side=%d quality=90 raw=0" % MAX_SIDE],
              "manifest head %r" % lines[:2])
    recs = read_shards(out)
    ctx.check(len(recs) > 100, "only %d samples packed" % len(recs))
    resized = kept = exact = 0
    worst = (0.0, None)
    for name, label, kind, off, rec, _ in recs:
        src = os.path.join(ctx.tree, name)
        orig, mode = pil_rgb(src)
        if min(orig.size) <= MAX_SIDE:
            kept += 1
            ctx.check(rec == open(src, "rb").read(), "%s: small image not stored as is" % name)
            continue
        resized += 1
        want = TV.Resize(MAX_SIDE)(orig).size  # torchvision's arithmetic
        got = Image.open(io.BytesIO(rec))
        ok = ctx.check(kind == 1 and got.format == "JPEG" and got.size == want,
                       "%s: kind %d %s %s, want JPEG %s" % (name, kind, got.format, got.size, want))
        if not ok:
            continue
        ctx.check(min(got.size) == MAX_SIDE, "%s: shorter side %d" % (name, min(got.size)))
        small = orig.resize(want, Image.LANCZOS)
        ref = np.asarray(small, np.int16)
        ours = np.asarray(got.convert("RGB"), np.int16)
        mae = float(np.abs(ours - ref).mean())
        if mae > worst[0]:
            worst = (mae, name)
        ctx.check(mae <= 2.5, "%s (%s): mean |diff| %.2f vs Pillow LANCZOS > 2.5" % (name, mode, mae))
        # The same resize through Pillow's own JPEG encoder (4:2:0, quality 90, optimised).
        buf = io.BytesIO()
        small.save(buf, "JPEG", quality=90, subsampling=2, optimize=True)
        pj = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"), np.int16)
        d = int(np.abs(ours - pj).max())
        if mode != "CMYK":
            exact += d == 0
            ctx.check(d <= 1, "%s (%s): max |diff| %d vs Pillow's resize+encode" % (name, mode, d))
    ctx.note("max_side %d: %d resized, %d kept; worst mean |diff| vs Pillow LANCZOS %.3f (%s); "
             "%d equal to Pillow's resize + JPEG encode exactly"
             % (MAX_SIDE, resized, kept, worst[0], worst[1], exact))
    ctx.check(resized >= 20 and kept >= 10, "fixture should have both kinds: %d/%d" % (resized, kept))
    # inspect shows what pack did.
    p = ctx.run([ctx.chute, "inspect", out, "--json"])
    info = json.loads(p.out) if p.returncode == 0 else {}
    ctx.check(info.get("pack") == {"manifest_version": 2, "max_side": MAX_SIDE, "quality": 90,
                                   "raw": False}, "inspect --json pack: %r" % info.get("pack"))
    p = ctx.run([ctx.chute, "inspect", out])
    ctx.check("shorter side capped at %d px" % MAX_SIDE in p.out and "quality 90" in p.out,
              "inspect text: %s" % p.out[:400])
    # Quality is used and recorded.
    q50 = os.path.join(work, "q50")
    pack(ctx, q50, "--max-side", MAX_SIDE, "--quality", 50)
    r50 = read_shards(q50)
    big = lambda rs: sum(len(r[4]) for r in rs if r[2] == 1 and Image.open(io.BytesIO(r[4])).size != Image.open(os.path.join(ctx.tree, r[0])).size)  # noqa: E731
    ctx.check(big(r50) < 0.8 * big(recs), "quality 50: %d bytes vs %d at 90" % (big(r50), big(recs)))
    ctx.check("pack max_side=%d quality=50 raw=0" % MAX_SIDE in open(os.path.join(q50, "chute.manifest")).read(),
              "quality 50 not recorded")
    for bad in (["--quality", 0], ["--quality", 101], ["--max-side", 0], ["--max-side", 70000],
                ["--raw", "--quality", 80]):
        p = pack(ctx, os.path.join(work, "bad"), "--max-side", 64, *bad, expect="nonzero")
    p = ctx.run([ctx.chute, "pack", ctx.tree, os.path.join(work, "bad"), "--quality", 80],
                expect="nonzero")
    ctx.check("applies only" in p.err, "--quality without --max-side: %s" % p.err[-300:])
    ctx.check(not os.path.exists(os.path.join(work, "bad", "chute.manifest")),
              "a refused pack wrote a manifest")
    # A plain pack still writes version 1 (what every reader reads).
    ctx.check(open(os.path.join(ctx.shards, "chute.manifest")).readline() == "chute-dataset 1\n",
              "plain pack no longer writes a version-1 manifest")


def raw_exact(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL")
    import numpy as np
    from PIL import Image
    work = ctx.scratch("raw_exact")
    for opts in ((), ("--max-side", MAX_SIDE)):
        out = os.path.join(work, "raw%s" % ("_%d" % MAX_SIDE if opts else ""))
        pack(ctx, out, "--raw", *opts)
        lines = open(os.path.join(out, "chute.manifest")).read().splitlines()
        ctx.check(lines[1] == "pack max_side=%d quality=0 raw=1" % (MAX_SIDE if opts else 0),
                  "manifest pack line %r" % lines[1])
        recs = read_shards(out)
        ctx.check(len(recs) > 100, "only %d samples" % len(recs))
        exact = near = 0
        for name, label, kind, off, rec, _ in recs:
            orig, mode = pil_rgb(os.path.join(ctx.tree, name))
            ref = orig
            if opts and min(orig.size) > MAX_SIDE:
                import torchvision.transforms as TV
                ref = orig.resize(TV.Resize(MAX_SIDE)(orig).size, Image.LANCZOS)
            px = parse_chraw(rec)
            ref = np.asarray(ref)
            if not ctx.check(kind == 4 and px.shape == ref.shape,
                             "%s: kind %d shape %s vs Pillow %s" % (name, kind, px.shape, ref.shape)):
                continue
            d = np.abs(px.astype(np.int16) - ref).max()
            if mode == "CMYK":
                ctx.check(d <= 1, "%s (CMYK): max |diff| %d vs Pillow" % (name, d))
                near += 1
            else:
                ctx.check(d == 0, "%s (%s): max |diff| %d vs Pillow, want exact" % (name, mode, d))
                exact += d == 0
        ctx.note("raw %s: %d records equal to Pillow exactly, %d CMYK within 1" % (opts, exact, near))
        for tf in ("train", "eval"):
            p = ctx.dump_run(out, os.path.join(work, "d.bin"), "--transform", tf, "--dtype", "uint8",
                             "--size", 64, "--workers", 2, "--strict")
            ctx.check("samples=%d " % len(recs) in p.out and "corrupt=0" in p.out,
                      "loader over raw shards (%s): %s %s" % (tf, p.out, p.err[-500:]))


def raw_lying_header(ctx):
    ctx.need_data()
    work = ctx.scratch("raw_lying_header")
    src = os.path.join(work, "raw")
    pack(ctx, src, "--raw", "--max-side", 64)
    recs = read_shards(src)
    name, label, kind, off, rec, path = recs[3]
    w, h = struct.unpack_from("<II", rec, 8)
    for what, patch in (("width", struct.pack("<I", w + 1) + rec[12:16]),
                        ("height", rec[8:12] + struct.pack("<I", 0x7FFFFFFF))):
        bad = os.path.join(work, "bad_" + what)
        shutil.copytree(src, bad)
        bpath = os.path.join(bad, os.path.basename(path))
        b = bytearray(open(bpath, "rb").read())
        b[off + 8:off + 16] = patch
        # Fix the record's CRC, the index CRC and the trailer CRC (per FORMAT.md)
        # so the damage reaches the CHRAW parser.
        tr = len(b) - 64
        magic, ix_off, ix_bytes, count = struct.unpack_from("<8sQQQ", b, tr)
        for i in range(count):
            if struct.unpack_from("<Q", b, ix_off + 32 * i)[0] == off:
                struct.pack_into("<I", b, ix_off + 32 * i + 12, zlib.crc32(bytes(b[off:off + len(rec)])))
        struct.pack_into("<I", b, tr + 32, zlib.crc32(bytes(b[ix_off:ix_off + ix_bytes])))
        struct.pack_into("<I", b, tr + 60, zlib.crc32(bytes(b[tr:tr + 60])))
        open(bpath, "wb").write(bytes(b))
        where = "%s@%d" % (os.path.basename(path), off)
        p = ctx.dump_run(bad, os.path.join(work, "d.bin"), "--transform", "train", "--dtype",
                         "uint8", "--size", 32, "--workers", 2, "--strict", expect=1)
        ctx.check(where in p.err and "CHRAW" in p.err,
                  "%s lie, --strict: error should name %s and CHRAW: %s" % (what, where, p.err[-600:]))
        p = ctx.dump_run(bad, os.path.join(work, "d.bin"), "--transform", "train", "--dtype",
                         "uint8", "--size", 32, "--workers", 2)
        ctx.check(p.returncode == 0 and "corrupt=1" in p.out,
                  "%s lie, default policy: %s %s" % (what, p.out, p.err[-300:]))


def raw_over_limit(ctx):
    """--raw under --max-sample-bytes L: a raw record over L (16 + w*h*3,
    w and h from Pillow) is left out as over the limit, named, counted apart
    from undecodable files; --strict fails on it."""
    ctx.need_data()
    ctx.need_modules("PIL")
    from PIL import Image
    work = ctx.scratch("raw_over_limit")
    lim = 150000
    want_over = 0
    total = 0
    for path in glob.glob(os.path.join(ctx.tree, "*", "*")):
        try:
            w, h = Image.open(path).size
        except Exception:
            continue  # the fixture's undecodable files
        total += 1
        want_over += os.path.getsize(path) > lim or 16 + w * h * 3 > lim
    p = pack(ctx, os.path.join(work, "r"), "--raw", "--max-sample-bytes", lim)
    ctx.check("%d over the loader's limits" % want_over in p.out,
              "want %d over the limit (of %d): %s" % (want_over, total, p.out))
    ctx.check("raw record would be" in p.err, "no reason names the raw record: %s" % p.err[-400:])
    ctx.check(0 < want_over < total, "fixture should have both: %d of %d over" % (want_over, total))
    pack(ctx, os.path.join(work, "s"), "--raw", "--max-sample-bytes", lim, "--strict",
         expect="nonzero")


cases = {
    "raw_over_limit": raw_over_limit,
    "max_side_jpeg": max_side_jpeg,
    "raw_exact": raw_exact,
    "raw_lying_header": raw_lying_header,
}

if __name__ == "__main__":
    sys.exit(T.main(cases))
