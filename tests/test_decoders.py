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


if __name__ == "__main__":
    sys.exit(T.main({"bmp_pixels": case_bmp_pixels, "bmp_loader": case_bmp_loader,
                     "raw_loader": case_raw_loader}))
