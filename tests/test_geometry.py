#!/usr/bin/env python3
"""The geometric plan (src/ops/plan.h) against torchvision.transforms.v2.

golden    every case of tests/fixtures/geometry/golden.npz (torchvision's
          functional ops with fixed parameters on small real-photo crops,
          made by tests/fixtures/make_geometry_golden.py): the same steps
          through tests/tools/geomtool, which passes only the plan's decoder
          window on.  Boxes and keypoints within 1e-3 px, masks identical,
          the boxes SanitizeBoundingBoxes keeps (and their indices)
          identical, images within the MAE bounds below (max and mean
          printed per case).
convert   box formats xyxy / xywh / cxcywh against F.convert_bounding_box_format.
flipmap   keypoint left/right swap on flips, against a hand computation.
parse     geometry strings: parsed values, and errors naming token and offset.
draws     random steps: two-sample KS of rotation, affine (angle, translate,
          scale, shear), RandomResizedCrop (top, left, h, w), ScaleJitter and
          RandomZoomOut draws against torchvision's make_params samples in
          the fixture; flip frequency; same (seed, epoch, sample) -> same
          plan, another seed -> another.
loader    option geometry through the loader (tests/tools/dump): workers 1,
          2 and 3 give byte-identical epochs, the tree and its shards too;
          "hflip=1" / "vflip=1" give exactly the mirror of transform none, with
          and without DCT-scaled decodes
          (the classification path, untouched, as the reference); a bad
          string and the refused combinations are named by `chute bench`.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "fixtures", "geometry", "golden.npz")
# Image bounds (uint8 levels).  Cases with a resize: chute's resampler is
# PIL's antialiased bilinear with float intermediates, torchvision's tensor
# path its own uint8 kernel (measured: MAE <= 0.17, max 1).  Cases without:
# crops, pads and flips are copies, and the warp reproduces torchvision's
# float32 grid arithmetic (measured: MAE <= 0.0001, max 1: a rounding tie).
MAE_RESAMPLE, MAE_EXACT = 0.25, 0.01
MAX_RESAMPLE, MAX_EXACT = 1, 1
TOL = 1e-3


def tool(ctx):
    return os.path.join(os.path.dirname(ctx.dump), "geomtool")


def load(ctx):
    ctx.need_modules("numpy")
    import numpy as np
    g = np.load(GOLDEN)
    return np, g, json.loads(bytes(g["meta"]).decode())


def golden(ctx):
    np, g, meta = load(ctx)
    ctx.note("torch %s, torchvision %s" % (meta["torch"], meta["torchvision"]))
    work = ctx.scratch("golden")
    fill = meta["fill"]
    summary = []
    for c in meta["cases"]:
        n = c["input"]
        img, mask = g["in%d_img" % n], g["in%d_mask" % n]
        boxes, kpts = g["in%d_boxes" % n], g["in%d_kpts" % n]
        h, w = img.shape[:2]
        pre = os.path.join(work, "c")
        img.tofile(pre + ".img")
        mask.tofile(pre + ".mask")
        boxes.astype(np.float32).tofile(pre + ".boxes")
        kxyv = np.concatenate([kpts, np.ones((len(kpts), 1), np.float32)], axis=1)
        kxyv.astype(np.float32).tofile(pre + ".kpts")
        p = ctx.run([tool(ctx), "apply", c["steps"], w, h, pre, len(boxes), len(kpts)] + fill +
                    [meta["mfill"]], what=c["case"])
        ow, oh = [int(v) for v in p.out.split()[:2]]
        k = c["key"]
        want_img = g[k + "_img"]
        name = "%s (input %d)" % (c["case"], n)
        ctx.check(want_img.shape == (oh, ow, 3), "%s: canvas %dx%d, torchvision %r"
                  % (name, ow, oh, want_img.shape))
        if want_img.shape != (oh, ow, 3):
            continue
        got = np.fromfile(pre + ".out.img", np.uint8).reshape(oh, ow, 3)
        d = np.abs(got.astype(np.int32) - want_img.astype(np.int32))
        mae, mx = float(d.mean()), int(d.max())
        resamples = any(s.split(":")[0] in ("resize", "short", "letterbox")
                        for s in c["steps"].split(","))
        lim_mae, lim_max = ((MAE_RESAMPLE, MAX_RESAMPLE) if resamples
                            else (MAE_EXACT, MAX_EXACT))
        ctx.check(mae <= lim_mae and mx <= lim_max, "%s: image MAE %.4f max %d > %g / %d"
                  % (name, mae, mx, lim_mae, lim_max))
        gm = np.fromfile(pre + ".out.mask", np.uint8).reshape(oh, ow)
        bad = int((gm != g[k + "_mask"]).sum())
        ctx.check(bad == 0, "%s: %d mask pixels differ" % (name, bad))
        gb = np.fromfile(pre + ".out.boxes", np.float32).reshape(-1, 4)
        db = float(np.abs(gb - g[k + "_boxes"]).max())
        ctx.check(db <= TOL, "%s: boxes off by %g px\n%r\n%r" % (name, db, gb, g[k + "_boxes"]))
        gk = np.fromfile(pre + ".out.kpts", np.float32).reshape(-1, 3)
        dk = float(np.abs(gk[:, :2] - g[k + "_kpts"]).max())
        ctx.check(dk <= TOL, "%s: keypoints off by %g px" % (name, dk))
        # visibility: a point outside the final canvas is marked invisible
        # (torchvision's coordinates decide; points within TOL of an edge
        # may fall either way)
        wk = g[k + "_kpts"]
        inside = (wk[:, 0] >= 0) & (wk[:, 0] < ow) & (wk[:, 1] >= 0) & (wk[:, 1] < oh)
        edge = np.minimum.reduce([np.abs(wk[:, 0]), np.abs(wk[:, 0] - ow), np.abs(wk[:, 1]),
                                  np.abs(wk[:, 1] - oh)]) <= TOL
        ctx.check(np.array_equal((gk[:, 2] == 1) | edge, inside | edge),
                  "%s: visibility %r, inside %r" % (name, gk[:, 2], inside))
        keep = np.fromfile(pre + ".out.keep", np.uint32)
        ctx.check(np.array_equal(keep, g[k + "_keep"]), "%s: sanitize keeps %r, torchvision %r"
                  % (name, keep, g[k + "_keep"]))
        sb = np.fromfile(pre + ".out.sboxes", np.float32).reshape(-1, 4)
        ctx.check(sb.shape == g[k + "_sboxes"].shape and
                  (sb.size == 0 or float(np.abs(sb - g[k + "_sboxes"]).max()) <= TOL),
                  "%s: sanitized boxes differ" % name)
        summary.append((name, mae, mx, db, dk))
    ctx.check(len(summary) >= 40, "only %d cases ran" % len(summary))
    for name, mae, mx, db, dk in summary:
        print("%-42s image MAE %.4f max %d  boxes %.2g  keypoints %.2g" % (name, mae, mx, db, dk))


def convert(ctx):
    np, g, _ = load(ctx)
    fmts = {"XYXY": 0, "XYWH": 1, "CXCYWH": 2}
    for src, a in fmts.items():
        for dst, b in fmts.items():
            # the fixture's input is XYXY; express it in src first (torchvision's numbers)
            inp = g["conv_XYXY_%s" % src]
            want = g["conv_%s_%s" % (src, dst)] if src == "XYXY" else g["conv_XYXY_%s" % dst]
            for row, exp in zip(inp, want):
                p = ctx.run([tool(ctx), "convert", a, b] + ["%.9g" % v for v in row])
                got = np.array([float(v) for v in p.out.split()], np.float32)
                ctx.check(np.abs(got - exp).max() <= 1e-5, "%s -> %s: %r, want %r"
                          % (src, dst, got, exp))


def flipmap(ctx):
    np, _, _ = load(ctx)
    work = ctx.scratch("flipmap")
    pre = os.path.join(work, "f")
    w, h = 10, 8
    np.zeros((h, w, 3), np.uint8).tofile(pre + ".img")
    np.zeros((h, w), np.uint8).tofile(pre + ".mask")
    np.zeros((0, 4), np.float32).tofile(pre + ".boxes")
    # two objects of three points: (nose, left eye, right eye); flip map 0 2 1
    k = np.array([[5, 2, 1], [3, 1, 1], [7, 1, 0], [1, 6, 1], [0, 5, 1], [2.5, 5, 1]], np.float32)
    k.tofile(pre + ".kpts")
    ctx.run([tool(ctx), "apply", "hflip", w, h, pre, 0, 6, 0, 0, 0, 0, "0:2:1"])
    got = np.fromfile(pre + ".out.kpts", np.float32).reshape(-1, 3)
    # by hand: x' = W - 1 - x (torchvision's keypoint flip), then eyes swapped;
    # visibility travels with its point
    want = np.array([[4, 2, 1], [2, 1, 0], [6, 1, 1], [8, 6, 1], [6.5, 5, 1], [9, 5, 1]],
                    np.float32)
    ctx.check(np.array_equal(got, want), "hflip with flip map: %r, want %r" % (got, want))
    # a pad pushes the right eye of object 1 out of a crop: invisible
    ctx.run([tool(ctx), "apply", "crop:0:1:8:8", w, h, pre, 0, 6, 0, 0, 0, 0])
    got = np.fromfile(pre + ".out.kpts", np.float32).reshape(-1, 3)
    ctx.check(list(got[:, 2]) == [1, 1, 0, 1, 0, 1], "crop visibility: %r" % got)


def parse(ctx):
    p = ctx.run([tool(ctx), "parse", " rrc=0.25 , hflip, rotate=15:1,affine=10:0.1:0.2:0.8:1.2:5,"
                 "lsj,zoomout=1:3,resize=256:512,letterbox"])
    rows = [r.split() for r in p.out.strip().split("\n")]
    ctx.check(len(rows) == 8, "parsed: %r" % p.out)
    ctx.check(rows[0][:3] == ["0", "0.25", "1"], "rrc: %r" % rows[0])
    ctx.check(rows[1][:2] == ["5", "0.5"], "hflip default p: %r" % rows[1])
    ctx.check(rows[2][:3] == ["7", "15", "1"], "rotate: %r" % rows[2])
    ctx.check(rows[3][:8] == ["8", "10", "0.1", "0.2", "0.8", "1.2", "5", "0"][:8],
              "affine: %r" % rows[3])
    ctx.check(rows[4][:3] == ["9", "0.1", "2"], "lsj defaults: %r" % rows[4])
    ctx.check(rows[5][:4] == ["10", "1", "3", "0.5"], "zoomout: %r" % rows[5])
    ctx.check(ctx.run([tool(ctx), "parse", "  "]).out == "", "blank string gives steps")
    bad = {
        "rrc,flop": "unknown step 'flop' at offset 4",
        "rrc=0.5:0.2": "scale range must be 0 < lo <= hi <= 1",
        "rotate": "rotate needs at least 1 value",
        "rotate=200": "degrees must be in [0, 180]",
        "rotate=10:2": "expand 0 or 1",
        "hflip=1.5": "p must be in [0, 1]",
        "hflip=0.5:1": "hflip takes at most 1 value",
        "rrc,,hflip": "empty step at offset 4",
        "affine=10:x": "value 2 of affine at offset 10 is not a finite number",
        "affine=10:0:0:1:1:70": "shear must be in [0, 60]",
        "resize=12.5": "whole numbers",
        "resize=256:200": "max_size must be larger",
        "zoomout=0.5": "side range",
        "lsj=nan": "not a finite number",
        "hflip;vflip": "unknown step 'hflip;vflip' at offset 0",
        "hflip=0.5;vflip": "unexpected ';' at offset 9",
        ",".join(["hflip"] * 17): "more than 16 steps",
    }
    for spec, msg in bad.items():
        p = ctx.run([tool(ctx), "parse", spec], expect=2)
        ctx.check(msg in p.out, "%r: %r lacks %r" % (spec, p.out, msg))


def ks2(a, b):
    """Two-sample Kolmogorov-Smirnov statistic."""
    import numpy as np
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    da = np.searchsorted(a, x, side="right") / len(a)
    db = np.searchsorted(b, x, side="right") / len(b)
    return float(np.abs(da - db).max())


def draws(ctx):
    np, g, _ = load(ctx)
    N = 4000

    def draw(spec, w, h, oh, ow, seed=7):
        p = ctx.run([tool(ctx), "draw", spec, w, h, oh, ow, seed, 2, N])
        return [r.split() for r in p.out.strip().split("\n")]

    def check(name, ours, theirs):
        ours = np.asarray(ours, np.float64)
        d = ks2(ours, theirs)
        crit = 1.95 * np.sqrt((len(ours) + len(theirs)) / (len(ours) * len(theirs)))  # 0.1%
        ctx.check(d < crit, "%s: KS D %.4f >= %.4f against torchvision" % (name, d, crit))
        print("%-18s KS D %.4f (0.1%% level %.4f)" % (name, d, crit))

    # RandomRotation(30) on a 100 x 80 image: angle (rotate negates for the matrix)
    rows = draw("rotate=30", 100, 80, 80, 100)
    check("rotate angle", [-float(r[6]) for r in rows if r[1] == "affine"], g["draw_rotate30_angle"])
    # RandomAffine(10, translate (0.1, 0.2), scale (0.8, 1.2), shear (-5, 5, -3, 3))
    rows = [r for r in draw("affine=10:0.1:0.2:0.8:1.2:5:3", 100, 80, 80, 100) if r[1] == "affine"]
    ctx.check(len(rows) == N, "affine rows %d" % len(rows))
    for col, key in ((6, "angle"), (7, "tx"), (8, "ty"), (9, "scale"), (10, "shx"), (11, "shy")):
        check("affine " + key, [float(r[col]) for r in rows], g["draw_affine_" + key])
    # RandomResizedCrop((48, 64)): the crop box
    rows = [r for r in draw("rrc", 100, 80, 48, 64) if r[1] == "crop"]
    for col, key in ((2, "top"), (3, "left"), (4, "height"), (5, "width")):
        check("rrc " + key, [float(r[col]) for r in rows], g["draw_rrc_" + key])
    # ScaleJitter((64, 48), (0.1, 2)): the resized size
    # (draw adds a final resize to 64 x 48: keep each sample's first resize)
    first = {}
    for r in draw("lsj", 100, 80, 64, 48):
        if r[1] == "resize" and r[0] not in first:
            first[r[0]] = (float(r[2]), float(r[3]))
    ctx.check(len(first) == N, "lsj rows %d" % len(first))
    check("lsj height", [v[0] for v in first.values()], g["draw_lsj_h"])
    check("lsj width", [v[1] for v in first.values()], g["draw_lsj_w"])
    # RandomZoomOut(side_range (1, 4), p 1): the padding
    rows = [r for r in draw("zoomout=1:4:1", 100, 80, 80, 100) if r[1] == "pad"]
    ctx.check(len(rows) == N, "zoomout rows %d" % len(rows))
    for col, key in ((2, "left"), (3, "top"), (4, "right"), (5, "bottom")):
        check("zoomout " + key, [float(r[col]) for r in rows], g["draw_zoomout_" + key])
    # RandomHorizontalFlip(0.3): frequency against torchvision's coins (5 sigma)
    flips = len([r for r in draw("hflip=0.3", 100, 80, 80, 100) if r[1] == "hflip"]) / N
    tv = float(np.mean(g["draw_hflip0.3_applied"]))
    sig = np.sqrt(0.3 * 0.7 / N)
    ctx.check(abs(flips - 0.3) < 5 * sig and abs(tv - 0.3) < 5 * sig,
              "hflip p 0.3: chute %.3f, torchvision %.3f" % (flips, tv))
    # determinism: the same key gives the same plans; another seed others
    spec = "rrc,hflip,rotate=20,affine=5:0.1:0.1:0.9:1.1:3,zoomout"
    a = ctx.run([tool(ctx), "draw", spec, 120, 90, 64, 64, 3, 1, 50]).out
    b = ctx.run([tool(ctx), "draw", spec, 120, 90, 64, 64, 3, 1, 50]).out
    c = ctx.run([tool(ctx), "draw", spec, 120, 90, 64, 64, 4, 1, 50]).out
    ctx.check(a == b, "same (seed, epoch, sample), another plan")
    ctx.check(a != c, "seeds 3 and 4 give the same plans")
    last = {}
    for r in a.strip().split("\n"):
        last[r.split()[0]] = r.split()[-2:]
    ctx.check(all(v == ["64", "64"] for v in last.values()), "a plan does not end at 64 x 64")


def loader(ctx):
    ctx.need_data()
    np, _, _ = load(ctx)
    work = ctx.scratch("loader")
    S = 40
    common = ["--size", S, "--batch-size", 16, "--epoch", 1, "--seed", 5, "--dtype", "uint8",
              "--layout", "nhwc"]
    spec = "rrc=0.3:1,hflip,rotate=20:1,affine=10:0.1:0.1:0.9:1.1:5,zoomout=1:2:0.5,letterbox"
    outs = {}
    for w in (1, 2, 3):
        outs[w] = os.path.join(work, "w%d.bin" % w)
        p = ctx.dump_run(ctx.tree, outs[w], *common, "--workers", w, "--geometry", spec)
        ctx.check(T.parse_counts(p.out).get("samples") == 200, "workers %d: %r" % (w, p.out))
    data = {w: open(outs[w], "rb").read() for w in outs}
    ctx.check(data[1] == data[2] == data[3], "geometry: worker counts give different bytes")
    sh = os.path.join(work, "shards.bin")
    ctx.dump_run(ctx.shards, sh, *common, "--workers", 2, "--geometry", spec)
    ctx.check(open(sh, "rb").read() == data[1], "geometry: the tree and its shards differ")
    s6 = os.path.join(work, "seed6.bin")
    ctx.dump_run(ctx.tree, s6, *common, "--workers", 2, "--geometry", spec, "--seed", 6)
    ctx.check(open(s6, "rb").read() != data[1], "geometry: seeds 5 and 6 give the same epoch")
    # the mirror of the classification path's transform none, byte for byte,
    # with and without DCT-scaled decodes (which then differ from each other)
    planes = {}
    for dct in ([], ["--no-dct-scale"]):
        none = os.path.join(work, "none.bin")
        ctx.dump_run(ctx.tree, none, *common, "--workers", 2, "--transform", "none", *dct)
        ia, _, a = ctx.read_dump(none, S, "uint8")
        a = a.reshape(-1, S, S, 3)
        planes[bool(dct)] = a
        for spec1, want in (("hflip=1", a[:, :, ::-1]), ("vflip=1", a[:, ::-1])):
            out = os.path.join(work, "flip.bin")
            ctx.dump_run(ctx.tree, out, *common, "--workers", 2, "--geometry", spec1, *dct)
            ib, _, b = ctx.read_dump(out, S, "uint8")
            ctx.check(np.array_equal(ia, ib), "%s: another sample order" % spec1)
            ctx.check(np.array_equal(b.reshape(-1, S, S, 3), want),
                      "%s %s is not the mirror of transform none" % (spec1, dct))
    ctx.check(not np.array_equal(planes[True], planes[False]), "no DCT-scaled decode happened")
    # the CLI: a bad string and the refused combinations, named
    for flags, msg in ((["--geometry", "rrc,flop"], "unknown step 'flop' at offset 4"),
                       (["--geometry", "hflip", "--augment", "invert"], "not with augment"),
                       (["--geometry", "hflip", "--decoded-cache-bytes", 1 << 20],
                        "not with decoded_cache_bytes")):
        p = ctx.run([ctx.chute, "bench", ctx.tree, "--epochs", 1] + flags, expect=1)
        ctx.check(msg in p.out + p.err, "chute bench %r: %r lacks %r" % (flags, p.err, msg))


if __name__ == "__main__":
    sys.exit(T.main({"golden": golden, "convert": convert, "flipmap": flipmap, "parse": parse,
            "draws": draws, "loader": loader}))
