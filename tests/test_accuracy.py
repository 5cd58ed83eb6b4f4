#!/usr/bin/env python3
"""Pixels against torchvision on PIL images, on real photos.

eval   --transform eval uint8, no shuffle, against torchvision's
       Resize(R) + CenterCrop(size) on PIL's convert("RGB") (JPEG,
       progressive, grey, CMYK, PNG RGB/grey/RGBA), R = floor(size / crop_pct)
       as timm computes it (crop_pct 0.875 by default: 224 -> 256,
       299 -> 341) or the --resize-size given; labels equal ImageFolder's.
       Bounds are the measured errors plus a small margin (see LIMITS):
       per-image mean absolute error (0..255 scale) and its mean over the
       tree.  With DCT-domain downscaling a JPEG decoded at 1/d is compared
       with libjpeg-turbo's own 1/d decode resampled by PIL (see
       reference_dct for why), under the same bound.
train  the train transform's float32 output has the statistics torchvision's
       RandomResizedCrop + flip + Normalize gives on the same photos, stays
       inside the normalized range, changes between epochs; with the crop
       area pinned to 100% (so RandomResizedCrop reduces to its
       deterministic central crop) every image equals torchvision's crop +
       resize or its mirror image, and about half are mirrored.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def reference_eval(samples, size, resize):
    import numpy as np
    import torchvision.transforms as TV
    from PIL import Image
    tf = TV.Compose([TV.Resize(resize), TV.CenterCrop(size)])
    out = []
    for path, _ in samples:
        with Image.open(path) as im:
            out.append(np.asarray(tf(im.convert("RGB")), dtype=np.float32))
    return out


def eval_box(W, H, size, resize):
    """Resize(resize) + CenterCrop(size) as a box in source pixels (floats),
    computed as torchvision does: shorter side -> resize, longer side
    int(resize * long / short), crop offsets int(round(...))."""
    s, l = min(W, H), max(W, H)
    rl = int(resize * l / s)
    rw, rh = (resize, rl) if W <= H else (rl, resize)
    top, left = int(round((rh - size) / 2)), int(round((rw - size) / 2))
    return (left * W / rw, top * H / rh, min((left + size) * W / rw, W), min((top + size) * H / rh, H))


def dct_denom(fmt, box, size):
    """The scale dct_scale documents: JPEG only, the smallest 1/d
    (d = 2, 4, 8) at which the crop still covers size x size pixels."""
    d = 1
    if fmt == "JPEG":
        while d < 8 and (box[2] - box[0]) / (2 * d) >= size and (box[3] - box[1]) / (2 * d) >= size:
            d *= 2
    return d


def reference_dct(samples, size, resize, tv_ref):
    """The reference for dct_scale=True, and how many images it scales.

    Why not torchvision's pixels: a JPEG decoded at 1/d has been low-passed
    by libjpeg-turbo's reduced IDCT (only the lowest (8/d)^2 coefficients
    of each block survive), not by PIL's antialiasing triangle, so the two
    differ by whatever detail lies between the two filters' passbands: a
    property of the photo, not of chute.  Measured (2026-11-28) on trees
    make_tree.py cuts from the same wallpapers with seeds 1..6: max per-image
    MAE against torchvision 1.13, 1.13, 1.78, 2.16, 1.28, 2.37; the tree a
    host builds depends on the wallpapers it has installed, so a bound
    measured on one host's tree (the old 1.5) failed on another's (issue
    30.1: 1.64 and 1.89).  The SIMD paths were ruled out: the dump is
    bit-identical with libjpeg-turbo forced to none/SSE2/AVX2
    (JSIMD_FORCE*), and chute's resample clones (x86-64-v3 vs baseline)
    change 193 of 30 M bytes by one level, no MAE at 3 decimals (its
    AVX-512 path serves float32 NCHW only).

    What chute must get exactly right is the decode at 1/d and the crop
    mapped into it, so that is what is compared: libjpeg-turbo's own 1/d
    decode (PIL's draft(): same library, ISLOW IDCT and fancy upsampling,
    as jpeg.c sets) resampled by PIL's bilinear from the box divided by d.
    Against it chute's DCT path is as close as its full-scale path is to
    torchvision (measured max 0.16 on all six trees), so the no-DCT bound
    holds on any tree; a wrong scale, box or window would show as MAE > 1.
    Images chute decodes at full scale keep torchvision's pixels."""
    import numpy as np
    from PIL import Image
    out, scaled = [], 0
    for (path, _), tv in zip(samples, tv_ref):
        with Image.open(path) as im:
            box = eval_box(im.size[0], im.size[1], size, resize)
            d = dct_denom(im.format, box, size)
            if d == 1:
                out.append(tv)
                continue
            W, H = im.size
            im.draft(im.mode, (W // d, H // d))
            assert im.size == ((W + d - 1) // d, (H + d - 1) // d), "PIL's draft gave %r" % (im.size,)
            sbox = tuple(v / d for v in box)
            out.append(np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR, box=sbox),
                                  dtype=np.float32))
            scaled += 1
    return out, scaled


# (size, extra dump options, torchvision's resize side, DCT allowed,
#  max per-image MAE, max mean MAE).  Measured on the fixture tree (200
#  photos): 224 no-DCT max 0.175 mean 0.103; 224 DCT (18 photos scaled,
#  against reference_dct) max 0.175 mean 0.103 (against torchvision: max
#  1.125 mean 0.144, see reference_dct); 299 (resize 341) max 0.167 mean
#  0.104 with or without DCT (no photo is large enough to scale); crop_pct
#  0.95 (resize 235) max 0.176 mean 0.102; resize_size 292 at 256 max 0.175
#  mean 0.104.  The old rule resized 299 to round(299 * 256 / 224) = 342:
#  MAE mean 4.3, max 14.2 against this.
LIMITS = [
    (224, [], 256, False, 0.3, 0.15),
    (224, [], 256, True, 0.3, 0.15),
    (299, [], 341, False, 0.3, 0.15),
    (299, [], 341, True, 0.3, 0.15),
    (224, ["--crop-pct", "0.95"], 235, False, 0.3, 0.15),
    (256, ["--resize-size", 292], 292, False, 0.3, 0.15),
]


def eval_(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL", "torchvision")
    import numpy as np
    work = ctx.scratch("eval")
    classes, samples = T.imagefolder_samples(ctx.tree)
    with open(os.path.join(ctx.data, "SOURCES")) as f:  # setup_data.py: which photos
        ctx.note("fixture tree cut from %s photos (make_tree.py PINNED)" % f.read().strip())
    refs = {}
    for S, extra, R, dct, limit, mean_limit in LIMITS:
        if (S, R) not in refs:
            refs[(S, R)] = reference_eval(samples, S, R)
        ref = refs[(S, R)]
        tv_ref = ref
        if dct:
            ref, scaled = reference_dct(samples, S, R, tv_ref)
            ctx.note("eval size %d resize %d: %d photos decoded at a reduced DCT scale" % (S, R, scaled))
            if S == 224:  # the tree's 512..640-pixel photos: the DCT path must be exercised
                ctx.check(scaled > 0, "eval size 224: no photo in the tree is large enough to scale")
        tag = "size %d resize %d dct=%s%s" % (S, R, dct, (" " + " ".join(map(str, extra))) if extra else "")
        out = os.path.join(work, "eval_%d_%d_dct%d.bin" % (S, R, dct))
        opts = ["--transform", "eval", "--dtype", "uint8", "--size", S, "--no-shuffle",
                "--batch-size", 50, "--workers", 2] + extra
        if not dct:
            opts.append("--no-dct-scale")
        ctx.dump_run(ctx.tree, out, *opts)
        idx, lab, data = ctx.read_dump(out, S)
        ctx.check(np.array_equal(idx, np.arange(len(samples))), "indices are not dataset order")
        ctx.check(lab.tolist() == [t for _, t in samples], "labels differ from ImageFolder's targets")
        imgs = data.reshape(-1, S, S, 3).astype(np.float32)
        maes = np.array([np.abs(a - b).mean() for a, b in zip(imgs, ref)])
        worst = int(maes.argmax())
        ctx.note("eval %s: MAE mean %.3f, max %.3f (%s)" %
                 (tag, maes.mean(), maes.max(), os.path.relpath(samples[worst][0], ctx.tree)))
        if dct:  # what DCT scaling costs against torchvision on this tree: reported, not bounded
            tv = np.array([np.abs(a - b).mean() for a, b in zip(imgs, tv_ref)])
            ctx.note("eval %s: against torchvision MAE mean %.3f, max %.3f, max level %d" %
                     (tag, tv.mean(), tv.max(), max(int(np.abs(a - b).max()) for a, b in zip(imgs, tv_ref))))
        for i in np.nonzero(maes > limit)[0][:10]:
            ctx.check(False, "eval %s: %s differs from %s by MAE %.2f (limit %.2f)"
                      % (tag, os.path.relpath(samples[i][0], ctx.tree),
                         "the reference (reference_dct)" if dct else "torchvision", maes[i], limit))
        ctx.check(maes.mean() <= mean_limit, "eval %s: mean MAE %.3f over the tree (limit %.2f)"
                  % (tag, maes.mean(), mean_limit))


def fallback_box(W, H):
    """torchvision RandomResizedCrop.get_params's central fallback."""
    r = W / H
    if r < 3 / 4:
        w, h = W, int(round(W / (3 / 4)))
    elif r > 4 / 3:
        h, w = H, int(round(H * (4 / 3)))
    else:
        w, h = W, H
    return (W - w) // 2, (H - h) // 2, w, h


def train(ctx):
    ctx.need_data()
    ctx.need_modules("numpy", "PIL", "torchvision")
    import numpy as np
    from PIL import Image
    work = ctx.scratch("train")
    classes, samples = T.imagefolder_samples(ctx.tree)
    n = len(samples)
    # Statistics of the normalized float32 output, two epochs, against
    # torchvision's RandomResizedCrop + flip + Normalize on the same tree
    # (wallpaper photos are contrasty: std ~1.6, not ImageNet's ~1).
    S = 64
    import torch
    import torchvision.transforms as TV
    from torchvision.datasets import ImageFolder
    torch.manual_seed(0)
    tv = ImageFolder(ctx.tree, transform=TV.Compose([
        TV.RandomResizedCrop(S), TV.RandomHorizontalFlip(), TV.ToTensor(), TV.Normalize(MEAN, STD)]))
    ref = torch.stack([tv[i][0] for i in range(len(tv))] + [tv[i][0] for i in range(len(tv))]).numpy()
    ref_mean, ref_std = float(ref.mean()), float(ref.std())
    eps = []
    for epoch in (0, 1):
        out = os.path.join(work, "f32_e%d.bin" % epoch)
        ctx.dump_run(ctx.tree, out, "--transform", "train", "--dtype", "float32", "--size", S,
                     "--batch-size", 32, "--workers", 2, "--seed", 1, "--epoch", epoch)
        idx, lab, data = ctx.read_dump(out, S, "float32")
        x = data.reshape(-1, 3, S, S)
        ctx.check(np.isfinite(x).all(), "non-finite values in float32 output")
        mean, std = float(x.mean()), float(x.std())
        ctx.note("train float32 epoch %d: mean %.3f std %.3f (torchvision: %.3f %.3f)"
                 % (epoch, mean, std, ref_mean, ref_std))
        ctx.check(abs(mean - ref_mean) < 0.15 and abs(std - ref_std) < 0.1,
                  "normalized output mean %.3f std %.3f, torchvision's %.3f %.3f"
                  % (mean, std, ref_mean, ref_std))
        for c in range(3):
            ctx.check(abs(float(x[:, c].mean()) - float(ref[:, c].mean())) < 0.2,
                      "channel %d mean %.3f, torchvision's %.3f" % (c, x[:, c].mean(), ref[:, c].mean()))
        for c in range(3):
            lo, hi = -MEAN[c] / STD[c], (1 - MEAN[c]) / STD[c]
            ctx.check(x[:, c].min() >= lo - 1e-3 and x[:, c].max() <= hi + 1e-3,
                      "channel %d outside [%.3f, %.3f]: %.3f..%.3f" % (c, lo, hi, x[:, c].min(), x[:, c].max()))
            ctx.check(x[:, c].std() > 0.3, "channel %d std %.3f" % (c, x[:, c].std()))
        # Per-image std: no blank samples.
        ctx.check((x.reshape(len(x), -1).std(axis=1) > 0.01).mean() > 0.97, "many flat samples")
        eps.append(dict(zip(idx.tolist(), x)))
    same = sum(np.array_equal(eps[0][i], eps[1][i]) for i in eps[0])
    ctx.check(same <= n // 20, "%d of %d samples identical in epochs 0 and 1" % (same, n))

    # Crop area pinned to 100%: the crop is deterministic, only the flip is random.
    S = 64
    out = os.path.join(work, "pinned.bin")
    ctx.dump_run(ctx.tree, out, "--transform", "train", "--dtype", "uint8", "--size", S,
                 "--no-shuffle", "--no-dct-scale", "--scale-pct", 100, 100, "--batch-size", 50,
                 "--workers", 2, "--seed", 4)
    idx, lab, data = ctx.read_dump(out, S)
    imgs = data.reshape(-1, S, S, 3).astype(np.float32)
    flips = direct = ambiguous = 0
    for i, (path, _) in enumerate(samples):
        with Image.open(path) as im:
            im = im.convert("RGB")
            x0, y0, w, h = fallback_box(*im.size)
            ref = np.asarray(im.crop((x0, y0, x0 + w, y0 + h)).resize((S, S), Image.BILINEAR),
                             dtype=np.float32)
        a = np.abs(imgs[i] - ref).mean()
        b = np.abs(imgs[i] - ref[:, ::-1]).mean()
        if min(a, b) > 2.0:
            ctx.check(False, "train (100%% area): %s differs from torchvision's crop by MAE %.2f "
                      "(mirrored %.2f)" % (os.path.relpath(path, ctx.tree), a, b))
        if abs(a - b) < 0.5:
            ambiguous += 1
        elif b < a:
            flips += 1
        else:
            direct += 1
    decided = flips + direct
    ctx.note("train flips: %d of %d decidable (%d symmetric)" % (flips, decided, ambiguous))
    ctx.check(decided > n * 0.8, "only %d of %d images decidable" % (decided, n))
    ctx.check(0.35 <= flips / max(decided, 1) <= 0.65, "flip rate %.2f, want ~0.5" % (flips / max(decided, 1)))


if __name__ == "__main__":
    sys.exit(T.main({"eval": eval_, "train": train}))
