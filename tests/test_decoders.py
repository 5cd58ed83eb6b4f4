#!/usr/bin/env python3
"""The decoder registry's BMP and raw (CHRAW) decoders, against PIL.

bmp_pixels   BMPs written by PIL (24-bit RGB, 32-bit RGBA, 8-bit adaptive
             palette, 8-bit grey, 1-bit) and hand-built variants PIL reads
             (top-down rows, 32-bit BI_BITFIELDS with two mask orders in a
             40-byte and a V5 header, 4-bit palette, OS/2 core header, a
             short palette with indices past its end), from fixture photos
             cropped to odd widths so rows are padded: chute's pixels equal
             PIL's convert("RGB") exactly, whole and for a window (only its
             rows and columns decoded).  RLE8, JPEG-in-BMP, 16-bit,
             truncated and lying headers fail with a clear message.
bmp_loader   the loader's eval and train uint8 output on a tree of BMPs is
             byte for byte the output on the same pixels saved as PNG;
             `chute inspect --json` counts them as BMP.
raw_loader   CHRAW records (docs/FORMAT.md) of PIL-decoded pixels (RGB,
             grey, RGBA), decode to exactly those pixels; as a tree and
             packed into chute shards they give the loader output of the
             PNGs of the same pixels, byte for byte.
png0_pixels  PNG compression level 0 (src/codec/png0.c, the stored-block
             fast path): PNGs written by Pillow with compress_level=0 (RGB,
             L, LA, RGBA, odd sizes; Pillow picks filters per row) and
             hand-built ones (Python's zlib level 0, each of the five PNG
             filters alone and mixed, IDATs split at random bytes down to
             one byte each) are taken by the fast path (decode --png0) and
             equal PIL's convert("RGB") exactly, as does the full decoder,
             whole and for crop windows (top row, middle, bottom rows).
             Files it must leave to libspng (level 6, palette, 16-bit, a
             tEXt chunk, a zlib stream with a fixed-Huffman block) are
             declined and still decode equal to PIL; a bad CRC or adler32
             is declined and the decoder fails with libspng's message.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402


def decode_tool(ctx):
    return os.path.join(os.path.dirname(ctx.dump), "decode")


def photos(ctx, n):
    out = []
    for root, dirs, files in os.walk(ctx.tree):
        dirs.sort()
        for f in sorted(files):
            out.append(os.path.join(root, f))
    return out[:: max(1, len(out) // n)][:n]


def chute_decode(ctx, path, window=None, expect=0):
    import numpy as np
    out = path + ".rgb"
    cmd = [decode_tool(ctx), path, out] + ([str(v) for v in window] if window else [])
    p = ctx.run(cmd, expect=expect)
    if p.returncode != 0:
        return None, p
    kv = dict(t.split("=") for t in p.out.split())
    w, h = (window[2], window[3]) if window else (int(kv["width"]), int(kv["height"]))
    return np.fromfile(out, dtype=np.uint8).reshape(h, w, 3), p


def pil_rgb(path):
    import numpy as np
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


# ---- hand-built BMP variants (each from a PIL-written file's pixels) ----

def bmp_file(info_header, palette, rows, top_down=False):
    """BITMAPFILEHEADER + header + palette + rows (already padded)."""
    body = b"".join(rows if top_down else rows[::-1])
    off = 14 + len(info_header) + len(palette)
    return b"BM" + struct.pack("<IHHI", off + len(body), 0, 0, off) + info_header + palette + body


def info40(w, h, bpp, comp=0, colors=0):
    return struct.pack("<IiiHHIIiiII", 40, w, h, 1, bpp, comp, 0, 2835, 2835, colors, 0)


def pad(row):
    return row + b"\0" * (-len(row) % 4)


def variants(rgb):
    """(name, bytes) of hand-built BMPs of an RGB array."""
    import numpy as np
    h, w, _ = rgb.shape
    bgr = [pad(rgb[y, :, ::-1].tobytes()) for y in range(h)]
    out = [("topdown24", bmp_file(info40(w, -h, 24), b"", bgr, top_down=True))]
    # 32-bit BI_BITFIELDS: X8R8G8B8 (masks after a 40-byte header) and
    # R8G8B8X8 in a V5 header.
    xrgb = [np.concatenate([rgb[y, :, ::-1], np.full((w, 1), 7, np.uint8)], 1).tobytes()
            for y in range(h)]
    out.append(("bitfields40", bmp_file(info40(w, h, 32, 3) +
                                        struct.pack("<III", 0xFF0000, 0xFF00, 0xFF), b"", xrgb)))
    rgbx = [np.concatenate([np.full((w, 1), 9, np.uint8), rgb[y, :, ::-1]], 1).tobytes()
            for y in range(h)]
    v5 = struct.pack("<IiiHHIIiiII", 124, w, h, 1, 32, 3, 0, 2835, 2835, 0, 0)
    v5 += struct.pack("<IIII", 0xFF000000, 0xFF0000, 0xFF00, 0) + b"sRGB" + b"\0" * 64
    assert len(v5) == 124
    out.append(("bitfieldsV5", bmp_file(v5, b"", rgbx)))
    # 4-bit palette: 16 levels of green-ish colours from the red channel.
    idx = (rgb[:, :, 0] >> 4).astype(np.uint8)
    pal = b"".join(struct.pack("BBBB", 255 - 16 * i, 16 * i, (37 * i) & 255, 0) for i in range(16))
    rows4 = [pad(((idx[y, 0::2] << 4) | np.append(idx[y, 1::2], [0] * (w % 2)).astype(np.uint8))
                 .tobytes()) for y in range(h)]
    out.append(("pal4", bmp_file(info40(w, h, 4), pal, rows4)))
    # OS/2 1.x core header, 24-bit.
    core = struct.pack("<IHHHH", 12, w, h, 1, 24)
    out.append(("os2core24", bmp_file(core, b"", bgr)))
    # 8-bit with a 3-entry palette and indices up to 7 (past its end).
    idx8 = (rgb[:, :, 1] >> 5).astype(np.uint8)
    pal3 = struct.pack("BBBBBBBBBBBB", 10, 20, 30, 0, 200, 100, 50, 0, 1, 2, 3, 0)
    out.append(("pal8short", bmp_file(info40(w, h, 8, 0, 3), pal3,
                                      [pad(idx8[y].tobytes()) for y in range(h)])))
    return out


def case_bmp_pixels(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL")
    import numpy as np
    from PIL import Image
    work = ctx.scratch("bmp_pixels")
    files = []
    for k, src in enumerate(photos(ctx, 6)):
        with Image.open(src) as im:
            im = im.convert("RGB")
            # odd widths: every row padded (3*w and w not multiples of 4)
            im = im.crop((0, 0, min(im.width, 37 + 10 * k) | 1, min(im.height, 29 + 8 * k)))
        base = os.path.join(work, "p%d" % k)
        im.save(base + "-rgb24.bmp")
        rgba = im.copy()
        rgba.putalpha(Image.fromarray((np.arange(im.width * im.height) % 251)
                                      .astype(np.uint8).reshape(im.height, im.width)))
        rgba.save(base + "-rgba32.bmp")
        im.convert("P", palette=Image.ADAPTIVE, colors=200).save(base + "-pal8.bmp")
        im.convert("L").save(base + "-grey8.bmp")
        im.convert("1").save(base + "-mono1.bmp")
        files += [base + s for s in ("-rgb24.bmp", "-rgba32.bmp", "-pal8.bmp", "-grey8.bmp",
                                     "-mono1.bmp")]
        for name, data in variants(np.asarray(im)):
            path = "%s-%s.bmp" % (base, name)
            with open(path, "wb") as f:
                f.write(data)
            files.append(path)
    for path in files:
        want = pil_rgb(path)  # PIL must read every variant: it is the reference
        got, p = chute_decode(ctx, path)
        if got is None:
            continue
        ctx.check("format=3 " in p.out, "%s: format id %s, want 3 (BMP)" % (path, p.out.strip()))
        ctx.check(got.shape == want.shape and np.array_equal(got, want),
                  "%s: pixels differ from PIL's (shape %s vs %s, %d values differ)"
                  % (path, got.shape, want.shape,
                     -1 if got.shape != want.shape else int((got != want).sum())))
        h, w, _ = want.shape
        win = (w // 3, h // 4, w - w // 3 - 1, h // 2)
        gotw, _ = chute_decode(ctx, path, win)
        if gotw is not None:
            ctx.check(np.array_equal(gotw, want[win[1]:win[1] + win[3], win[0]:win[0] + win[2]]),
                      "%s: window %s differs from PIL's pixels there" % (path, win))
    ctx.note("bmp_pixels: %d BMPs equal PIL's decode, whole and windowed" % len(files))

    # Refused with a reason.
    rgb24 = open(files[0], "rb").read()

    def patched(offset, fmt, value):
        b = bytearray(rgb24)
        struct.pack_into(fmt, b, offset, value)
        return bytes(b)
    bad = [
        ("rle8", patched(28, "<H", 8)[:30] + struct.pack("<I", 1) + rgb24[34:], "RLE8"),
        ("jpeg_in_bmp", rgb24[:30] + struct.pack("<I", 4) + rgb24[34:], "JPEG-in-BMP"),
        ("bpp16", patched(28, "<H", 16), "16-bit BMP is not supported"),
        ("truncated", rgb24[:len(rgb24) - 5], "truncated"),
        ("offset_past_end", patched(10, "<I", len(rgb24) + 1), "pixel data offset"),
        ("huge", patched(18, "<i", 0x7FFFFFFF)[:22] + struct.pack("<i", -0x80000000) + rgb24[26:],
         "exceeds the limit"),
        ("big", patched(18, "<i", 60000)[:22] + struct.pack("<i", 60000) + rgb24[26:],
         "do not fit"),
        ("zero_width", patched(18, "<i", 0), "bad image size"),
        ("os2v2", patched(14, "<I", 64), "OS/2 2.x"),
    ]
    for name, data, want in bad:
        path = os.path.join(work, "bad-%s.bmp" % name)
        with open(path, "wb") as f:
            f.write(data)
        got, p = chute_decode(ctx, path, expect=1)
        ctx.check(want in p.err and "BMP" in p.err,
                  "%s: message %r does not say %r" % (name, p.err.strip(), want))


def save_tree(ctx, dst, n, save):
    """n fixture photos as dst/<class>/<name>, written by save(rgb_image, base_path)."""
    from PIL import Image
    for src in photos(ctx, n):
        rel = os.path.relpath(src, ctx.tree)
        base = os.path.join(dst, os.path.splitext(rel)[0])
        os.makedirs(os.path.dirname(base), exist_ok=True)
        with Image.open(src) as im:
            save(im.convert("RGB"), base)


def dumps_equal(ctx, a, b, what):
    work = os.path.dirname(a.rstrip("/"))
    for opts in (["--transform", "eval", "--size", "64", "--no-shuffle"],
                 ["--transform", "train", "--size", "48", "--seed", "5"]):
        outs = []
        for src in (a, b):
            out = os.path.join(work, "%s-%s.dump" % (os.path.basename(src), opts[1]))
            ctx.dump_run(src, out, "--dtype", "uint8", "--workers", "2", *opts)
            outs.append(open(out, "rb").read() if os.path.exists(out) else b"")
        ctx.check(outs[0] == outs[1] and len(outs[0]) > 0,
                  "%s: %s output differs (%d vs %d bytes)" % (what, opts[1], len(outs[0]),
                                                              len(outs[1])))


def case_bmp_loader(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL")
    work = ctx.scratch("bmp_loader")
    bmp, png = os.path.join(work, "bmp"), os.path.join(work, "png")
    save_tree(ctx, bmp, 40, lambda im, base: im.save(base + ".bmp"))
    save_tree(ctx, png, 40, lambda im, base: im.save(base + ".png"))
    dumps_equal(ctx, bmp, png, "BMP tree vs PNG tree")
    # inspect counts them by the registry's format id
    import json
    p = ctx.run([ctx.chute, "inspect", "--json", bmp])
    if p.returncode == 0:
        f = json.loads(p.out)["formats"]
        ctx.check(f.get("bmp") == 40 and f.get("undecodable") == 0, "inspect formats: %s" % f)


def chraw(im):
    """A CHRAW record (docs/FORMAT.md) of a PIL image in mode RGB, L or RGBA."""
    import numpy as np
    a = np.asarray(im)
    c = 1 if a.ndim == 2 else a.shape[2]
    return b"CHRAW" + struct.pack("<BBBII", 1, c, 0, im.width, im.height) + a.tobytes()


def case_raw_loader(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL")
    import numpy as np
    from PIL import Image
    work = ctx.scratch("raw_loader")
    # Pixels: every mode's record decodes to PIL's convert("RGB").
    for k, src in enumerate(photos(ctx, 3)):
        with Image.open(src) as im:
            im = im.convert("RGB")
        rgba = im.copy()
        rgba.putalpha(77)
        for mode, img in (("RGB", im), ("L", im.convert("L")), ("RGBA", rgba)):
            path = os.path.join(work, "r%d-%s.chraw" % (k, mode))
            with open(path, "wb") as f:
                f.write(chraw(img))
            want = np.asarray(img.convert("RGB"))
            got, p = chute_decode(ctx, path)
            if got is not None:
                ctx.check("format=4 " in p.out and np.array_equal(got, want),
                          "%s: %s, pixels differ from PIL's" % (path, p.out.strip()))
            h, w, _ = want.shape
            win = (w // 5, h // 3, w // 2, h // 2)
            got, p = chute_decode(ctx, path, win)
            if got is not None:
                ctx.check(np.array_equal(got, want[win[1]:win[1] + win[3], win[0]:win[0] + win[2]]),
                          "%s: window %s differs" % (path, win))
    # Damaged records are refused with a reason.
    good = chraw(im)
    for name, data, want in [("short", good[:-1], "width*height*channels"),
                             ("long", good + b"\0", "width*height*channels"),
                             ("version", good[:5] + b"\2" + good[6:], "version 2"),
                             ("dtype", good[:7] + b"\1" + good[8:], "dtype 1"),
                             ("channels", good[:6] + b"\2" + good[7:], "2 channels"),
                             ("header", good[:12], "shorter than its 16-byte header")]:
        path = os.path.join(work, "bad-%s.chraw" % name)
        with open(path, "wb") as f:
            f.write(data)
        _, p = chute_decode(ctx, path, expect=1)
        ctx.check(want in p.err, "%s: message %r does not say %r" % (name, p.err.strip(), want))
    # The loader: the tree lists files by image extension and decodes by
    # content, so CHRAW records named like the PNGs go through it exactly
    # as `pack --raw` output will; packed into shards, likewise.
    raw, png = os.path.join(work, "raw"), os.path.join(work, "png")

    def save_raw(im, base):
        with open(base + ".png", "wb") as f:
            f.write(chraw(im))
    save_tree(ctx, raw, 30, save_raw)
    save_tree(ctx, png, 30, lambda im, base: im.save(base + ".png"))
    dumps_equal(ctx, raw, png, "CHRAW tree vs PNG tree")
    shards = os.path.join(work, "rawshards")
    ctx.run([ctx.chute, "pack", raw, shards])
    dumps_equal(ctx, shards, png, "CHRAW shards vs PNG tree")


# ---- PNG level 0 ----

def png_chunk(t, d):
    import zlib
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)


def png_filter_rows(raw, bpp, ftypes):
    """PNG's five filters (spec section 9), row y with ftypes[y % len]."""
    import numpy as np
    h, rb = raw.shape
    out, prev = bytearray(), np.zeros(rb, np.int32)
    for y in range(h):
        cur = raw[y].astype(np.int32)
        left = np.concatenate([np.zeros(bpp, np.int32), cur[:-bpp]])
        ul = np.concatenate([np.zeros(bpp, np.int32), prev[:-bpp]])
        p = left + prev - ul
        pa, pb, pc = abs(p - left), abs(p - prev), abs(p - ul)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, ul))
        ft = ftypes[y % len(ftypes)]
        pred = [0 * cur, left, prev, (left + prev) >> 1, paeth][ft]
        out.append(ft)
        out += ((cur - pred) & 255).astype(np.uint8).tobytes()
        prev = cur
    return bytes(out)


def png_build(arr, ftypes, split, seed, level=0, extra=b""):
    """A PNG of arr (h x w [x ch] uint8) whose zlib stream (Python's zlib at
    level) is cut into IDATs of split bytes (None: random 1..3000)."""
    import random
    import zlib
    h, w = arr.shape[:2]
    ch = 1 if arr.ndim == 2 else arr.shape[2]
    data = zlib.compress(png_filter_rows(arr.reshape(h, w * ch), ch, ftypes), level)
    rnd, parts, i = random.Random(seed), [], 0
    while i < len(data):
        n = split or rnd.randint(1, 3000)
        parts.append(data[i:i + n])
        i += n
    ihdr = struct.pack(">IIBBBBB", w, h, 8, {1: 0, 2: 4, 3: 2, 4: 6}[ch], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra +
            b"".join(png_chunk(b"IDAT", p) for p in parts) + png_chunk(b"IEND", b""))


def png0_only(ctx, path, expect):
    import numpy as np
    out = path + ".fast"
    p = ctx.run([decode_tool(ctx), "--png0", path, out], expect=expect)
    if p.returncode != 0:
        return None
    kv = dict(t.split("=") for t in p.out.split())
    return np.fromfile(out, dtype=np.uint8).reshape(int(kv["height"]), int(kv["width"]), 3)


def case_png0_pixels(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL")
    import numpy as np
    from PIL import Image, PngImagePlugin
    work = ctx.scratch("png0_pixels")
    fast, slow = [], []
    for k, src in enumerate(photos(ctx, 4)):
        with Image.open(src) as im:
            im = im.convert("RGB")
            im = im.crop((0, 0, min(im.width, 61 + 20 * k) | 1, min(im.height, 47 + 9 * k)))
        base = os.path.join(work, "p%d" % k)
        rgba = im.copy()
        rgba.putalpha(Image.fromarray((np.arange(im.width * im.height) % 253)
                                      .astype(np.uint8).reshape(im.height, im.width)))
        for name, img in (("rgb", im), ("l", im.convert("L")), ("la", rgba.convert("LA")),
                          ("rgba", rgba)):
            img.save(base + "-%s.png" % name, compress_level=0)
            fast.append(base + "-%s.png" % name)
        im.save(base + "-level6.png", compress_level=6)
        im.convert("P", palette=Image.ADAPTIVE, colors=100).save(base + "-pal.png",
                                                                 compress_level=0)
        Image.fromarray(np.asarray(im.convert("L")).astype(np.uint16) * 257).save(
            base + "-grey16.png", compress_level=0)
        info = PngImagePlugin.PngInfo()
        info.add_text("Comment", "level 0 with text")
        im.save(base + "-text.png", compress_level=0, pnginfo=info)
        slow += [base + s for s in ("-level6.png", "-pal.png", "-grey16.png", "-text.png")]
    rs = np.random.RandomState(12)
    for ch in (1, 2, 3, 4):
        shape = (23, 41) if ch == 1 else (23, 41, ch)
        arr = rs.randint(0, 256, shape).astype(np.uint8)
        arr[5:9] = 0  # runs where Sub/Up/Avg/Paeth predict exactly
        for ft in ((0,), (1,), (2,), (3,), (4,), (4, 3, 2, 1, 0)):
            for split in (None, 1):
                path = os.path.join(work, "h-c%d-f%s-s%s.png"
                                    % (ch, "".join(map(str, ft)), split or "r"))
                with open(path, "wb") as f:
                    f.write(png_build(arr, ft, split, seed=ch * 10 + len(ft)))
                fast.append(path)
        path = os.path.join(work, "h-c%d-fixed.png" % ch)
        with open(path, "wb") as f:  # zlib level 1: Huffman blocks, not stored
            f.write(png_build(arr, (1,), None, 0, level=1))
        slow.append(path)
    for path in fast + slow:
        if path.endswith("-grey16.png"):
            # PIL clips 16-bit to 255 where PNG decoders (and chute) keep the
            # high byte: the written values were grey * 257, so grey it is.
            with Image.open(path) as im16:
                g = (np.asarray(im16).astype(np.uint32) >> 8).astype(np.uint8)
            want = np.repeat(g[:, :, None], 3, axis=2)
        else:
            want = pil_rgb(path)
        got = png0_only(ctx, path, 0 if path in fast else 3)
        if got is not None:
            ctx.check(got.shape == want.shape and np.array_equal(got, want),
                      "%s: level-0 path differs from PIL (%d values)" % (
                          path, -1 if got.shape != want.shape else int((got != want).sum())))
        full, _ = chute_decode(ctx, path)
        if full is not None:
            ctx.check(full.shape == want.shape and np.array_equal(full, want),
                      "%s: decoder differs from PIL" % path)
        # A crop window: the fast path stops unfiltering below it.
        h, w, _ = want.shape
        for win in ((w // 3, h // 4, w - w // 3 - 1, h // 2), (0, 0, w, 1), (1, h - 2, w - 1, 2)):
            gotw, _ = chute_decode(ctx, path, win)
            if gotw is not None:
                ctx.check(np.array_equal(gotw, want[win[1]:win[1] + win[3],
                                                    win[0]:win[0] + win[2]]),
                          "%s: window %s differs from PIL's pixels there" % (path, win))
    ctx.note("png0_pixels: %d files through the level-0 path, %d declined, all equal PIL's"
             % (len(fast), len(slow)))
    # Damage: declined by the fast path, refused by libspng with its reason.
    good = open(fast[0], "rb").read()
    n = struct.unpack(">I", good[33:37])[0]
    assert good[37:41] == b"IDAT", "Pillow wrote a chunk before IDAT"
    idat = bytearray(good[41:41 + n])
    idat[len(idat) // 2] ^= 0x40  # a payload byte: the adler32 no longer matches
    bad_adler = good[:33] + png_chunk(b"IDAT", bytes(idat)) + good[45 + n:]
    bad_crc = bytearray(good)
    bad_crc[41 + n // 2] ^= 0x40  # the IDAT's CRC no longer matches
    for name, data in (("bad-adler", bad_adler), ("bad-crc", bytes(bad_crc))):
        path = os.path.join(work, name + ".png")
        with open(path, "wb") as f:
            f.write(data)
        png0_only(ctx, path, 3)
        _, p = chute_decode(ctx, path, expect=1)
        ctx.check("PNG data" in p.err or "PNG header" in p.err,
                  "%s: message %r does not name the PNG" % (name, p.err.strip()))


if __name__ == "__main__":
    sys.exit(T.main({"bmp_pixels": case_bmp_pixels, "bmp_loader": case_bmp_loader,
                     "raw_loader": case_raw_loader, "png0_pixels": case_png0_pixels}))
