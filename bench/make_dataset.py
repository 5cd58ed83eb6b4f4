#!/usr/bin/python3
"""Build an ImageNet-like ImageFolder tree from the photos installed on this machine.

    bench/make_dataset.py ROOT [--images N] [--classes K] [--seed S] [--procs P]

Writes ROOT/<class>/<class>_<i>.JPEG.  The point is a dataset whose decode
cost matches ImageNet's, so the loader benchmark measures what training would
see: the same pixel counts (typical 500x375 / 375x500, shorter side spread
over ~170-500, a few larger images, ~2% greyscale) and the same compressed
sizes (mean ~110 KB, ~80% between 64 KB and 256 KB).  JPEG decode time is
roughly linear in pixels and in compressed bytes, so matching both matters.

Sources are the wallpapers under /usr/share/wallpapers and
/usr/share/backgrounds (JPEG, PNG and WebP, de-duplicated by real path,
thumbnails skipped).  Each output image is a random crop of one source at a
random position and scale, resized to the sampled dimensions.  Wallpapers are
much smoother than ImageNet's photos: at quality 90 a 500x375 crop compresses
to 10-60 KB.  To reach ImageNet's bytes per pixel, each image gets a sampled
JPEG quality (mostly 85-95, like Flickr uploads) and a sampled target size,
and film-grain-like noise (mostly luma, some chroma) is added with a strength
found by a short search so the encoded file lands near its target; where the
grain would have to exceed a cap the quality is raised to 95 or 97 instead.
If the crop is already larger than the target with no noise, the quality is
lowered.  Grain is the part that is not ImageNet-like to the eye, but it
gives the entropy decoder ImageNet's amount of work per pixel.

Everything is a function of (--images, --classes, --seed): the plan is drawn
in the parent from one RNG, and the noise comes from a fixed seeded field, so
the output does not depend on worker scheduling.  A stamp file ROOT.stamp
beside the tree records the parameters; a rerun with the same parameters
returns at once.  The tree is built under a temporary name and renamed into
place before the stamp is written, so an interrupted run never looks done.
"""

import argparse
import io
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import sys
import time

import numpy as np
from PIL import Image

GENERATOR_VERSION = 2
SOURCE_DIRS = ("/usr/share/wallpapers", "/usr/share/backgrounds")
SOURCE_EXTS = (".jpg", ".jpeg", ".png", ".webp")
MIN_SOURCE_SIDE = 700          # skips the 400x250 screenshots and tiny tiles
NOISE_SIDE = 1700              # noise field side; larger outputs wrap around
MAX_SIGMA = 24.0               # grain strength cap (8-bit levels, luma)
KB = 1024


def find_sources():
    found = set()
    for top in SOURCE_DIRS:
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                if name.lower().endswith(SOURCE_EXTS):
                    found.add(os.path.realpath(os.path.join(dirpath, name)))
    sources = []
    for path in sorted(found):
        try:
            with Image.open(path) as im:
                w, h = im.size
        except (OSError, ValueError):
            continue
        if min(w, h) >= MIN_SOURCE_SIDE:
            sources.append((path, w, h))
    return sources


def sample_dims(rng):
    """Output (width, height) drawn to resemble ImageNet train."""
    u = rng.random()
    aspect = rng.choices((4 / 3, 3 / 2, 1.0, 5 / 4, 16 / 9, None),
                         weights=(55, 20, 8, 7, 5, 5))[0]
    if aspect is None:
        aspect = rng.uniform(1.05, 2.0)
    if u < 0.70:                      # the dominant "long side 500" images
        long_side = 500
    elif u < 0.93:                    # smaller ones
        long_side = rng.uniform(300, 500)
    else:                             # a tail of larger images
        long_side = math.exp(rng.uniform(math.log(600), math.log(1600)))
    short_side = max(64, round(long_side / aspect))
    long_side = round(long_side)
    if rng.random() < 0.78:
        return long_side, short_side
    return short_side, long_side


def plan_images(n, classes, seed, sources):
    rng = random.Random(seed)
    class_names = ["n%08d" % (1440764 + 1117 * k) for k in range(classes)]
    plan = []
    for i in range(n):
        w, h = sample_dims(rng)
        si = rng.randrange(len(sources))
        _path, sw, sh = sources[si]
        # Crop of the source with the output's aspect ratio; its width ranges
        # from the output width (1:1 detail) up to the whole source.
        max_cw = min(sw, sh * w / h)
        min_cw = min(max_cw, w * rng.uniform(1.0, 1.5))
        cw = min(max_cw, math.exp(rng.uniform(math.log(min_cw), math.log(max_cw))))
        ch = min(sh, cw * h / w)
        x = rng.uniform(0, max(0.0, sw - cw))
        y = rng.uniform(0, max(0.0, sh - ch))
        grey = rng.random() < 0.02
        quality = rng.choices((80, 85, 88, 90, 92, 95),
                              weights=(5, 12, 15, 25, 20, 23))[0]
        # Compressed size: log-normal, median ~104 KB, scaled by pixel count
        # (bigger images are bigger files, less than linearly).
        target = 104 * KB * math.exp(rng.gauss(0.0, 0.36)) * (w * h / 187500) ** 0.5
        if grey:
            target *= 0.7             # no chroma to code
        cls = i % classes
        plan.append(dict(index=i, source=si, w=w, h=h,
                         box=(x, y, x + cw, y + ch), flip=rng.random() < 0.5,
                         grey=grey, quality=quality, target=int(target),
                         noise_off=(rng.randrange(NOISE_SIDE), rng.randrange(NOISE_SIDE)),
                         cls=class_names[cls],
                         name="%s_%d.JPEG" % (class_names[cls], i)))
    return class_names, plan


# ---- worker side -------------------------------------------------------

_noise = None     # (luma field, chroma field), built once per worker
_cache = (None, None)


def _init_worker(seed):
    global _noise
    g = np.random.default_rng(seed ^ 0x5EED)
    luma = g.standard_normal((NOISE_SIDE, NOISE_SIDE), dtype=np.float32)
    chroma = g.standard_normal((NOISE_SIDE, NOISE_SIDE, 3), dtype=np.float32) * 0.35
    _noise = (luma, chroma)


def _load_source(path):
    """The source photo and its 1/2, 1/4, 1/8 reductions (cached per worker)."""
    global _cache
    if _cache[0] != path:
        im = Image.open(path)
        if im.mode in ("RGBA", "LA", "P"):
            im = im.convert("RGBA")
            bg = Image.new("RGBA", im.size, (128, 128, 128, 255))
            im = Image.alpha_composite(bg, im)
        im = im.convert("RGB")
        _cache = (path, [(1, im), (2, im.reduce(2)), (4, im.reduce(4)), (8, im.reduce(8))])
    return _cache[1]


def _resize_from(pyramid, box, w, h):
    # Start from the smallest level that still has >= 2x the output's
    # width, then a bicubic resize: close to a direct high-quality resize
    # at a fraction of the cost on big crops.
    x0, y0, x1, y1 = box
    f, im = pyramid[0]
    for lf, lim in pyramid:
        if (x1 - x0) / lf >= 2 * w:
            f, im = lf, lim
    return im.resize((w, h), Image.BICUBIC, box=(x0 / f, y0 / f, x1 / f, y1 / f))


def _noise_for(off, h, w, grey):
    luma, chroma = _noise
    if h <= NOISE_SIDE and w <= NOISE_SIDE:
        y = off[1] % (NOISE_SIDE - h + 1)
        x = off[0] % (NOISE_SIDE - w + 1)
        ly, cy = luma[y:y + h, x:x + w], chroma[y:y + h, x:x + w]
    else:
        ys = (np.arange(h) + off[1]) % NOISE_SIDE
        xs = (np.arange(w) + off[0]) % NOISE_SIDE
        ly, cy = luma[np.ix_(ys, xs)], chroma[np.ix_(ys, xs)]
    if grey:
        return ly
    return ly[:, :, None] + cy


def _encode(arr, quality):
    buf = io.BytesIO()
    im = Image.fromarray(arr)
    if im.mode == "L":
        im.save(buf, "JPEG", quality=quality)
    else:
        im.save(buf, "JPEG", quality=quality, subsampling=2)   # 4:2:0 like most photos
    return buf.getvalue()


def _fit_noise(base, noise, q, target, cap):
    """Encode base + sigma * noise with sigma in [0, cap] chosen so the file
    is near `target` bytes.  Size grows monotonically with sigma: secant
    steps, kept inside the bracket once there is one, stopping within 6%.
    The first guess uses ~0.03 bytes/pixel per unit of sigma, measured on
    these sources at quality 85-95."""
    px = base.shape[0] * base.shape[1]
    d0 = _encode(base.astype(np.uint8), q)
    best = d0
    if len(d0) >= target:
        return d0
    prev = lo = (0.0, len(d0))
    hi = None
    s = min(cap, max(1.0, (target - len(d0)) / (0.03 * px)))
    for _ in range(6):
        d = _encode(np.clip(base + s * noise, 0, 255).astype(np.uint8), q)
        if abs(len(d) - target) < abs(len(best) - target):
            best = d
        if abs(len(d) - target) <= 0.06 * target:
            break
        cur = (s, len(d))
        if len(d) < target:
            lo = cur
        else:
            hi = cur
        if hi is None:
            if s >= cap:
                break
            (s0, b0), (s1, b1) = prev, cur
            slope = (b1 - b0) / (s1 - s0) if s1 > s0 and b1 > b0 else 0
            nxt = s1 + (target - b1) / slope if slope > 0 else s1 * 2
            s = min(max(nxt, s1 * 1.2), s1 * 3, cap)
            prev = cur
        else:
            frac = (target - lo[1]) / max(1, hi[1] - lo[1])
            s = lo[0] + (hi[0] - lo[0]) * min(0.9, max(0.1, frac))
    return best


def _make_one(p, src, out_root):
    crop = _resize_from(src, p["box"], p["w"], p["h"])
    if p["flip"]:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    if p["grey"]:
        crop = crop.convert("L")
    base = np.asarray(crop, dtype=np.float32)
    target, q = p["target"], p["quality"]
    data = _encode(base.astype(np.uint8), q)
    if len(data) >= target:
        # Already too big without noise: lower the quality instead.
        lo, hi = 30, q
        best = data
        for _ in range(5):
            mid = (lo + hi) // 2
            d = _encode(base.astype(np.uint8), mid)
            if abs(len(d) - target) < abs(len(best) - target):
                best = d
            if len(d) > target:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1:
                break
        data = best
    else:
        # Too small: add grain.  Past a moderate strength grain stops looking
        # like a photo, so when the cap is reached the quality goes up
        # instead (a high-quality JPEG of a grainy photo, as many are).
        noise = _noise_for(p["noise_off"], p["h"], p["w"], p["grey"])
        best = data
        for qq in [q] + [x for x in (95, 97) if x > q]:
            d = _fit_noise(base, noise, qq, target, MAX_SIGMA)
            if abs(len(d) - target) < abs(len(best) - target):
                best = d
            if len(d) >= 0.94 * target:
                break
        data = best
    path = os.path.join(out_root, p["cls"], p["name"])
    with open(path, "wb") as f:
        f.write(data)
    return len(data), p["w"], p["h"], p["grey"]


def _run_group(args):
    path, plans, out_root = args
    src = _load_source(path)
    return [_make_one(p, src, out_root) for p in plans]


# ---- driver --------------------------------------------------------------

def summarize(stats, seconds):
    sizes = np.array([s[0] for s in stats], dtype=np.float64)
    ws = np.array([s[1] for s in stats], dtype=np.float64)
    hs = np.array([s[2] for s in stats], dtype=np.float64)
    in_band = np.mean((sizes >= 64 * KB) & (sizes <= 256 * KB)) * 100
    common = np.mean([(s[1], s[2]) in ((500, 375), (375, 500)) for s in stats]) * 100
    return {
        "images": len(stats),
        "total_mb": round(sizes.sum() / KB / KB, 1),
        "mean_kb": round(sizes.mean() / KB, 1),
        "median_kb": round(float(np.median(sizes)) / KB, 1),
        "pct_64k_256k": round(in_band, 1),
        "pct_below_64k": round(np.mean(sizes < 64 * KB) * 100, 1),
        "pct_above_256k": round(np.mean(sizes > 256 * KB) * 100, 1),
        "mean_width": round(ws.mean(), 1),
        "mean_height": round(hs.mean(), 1),
        "mean_megapixels": round(float(np.mean(ws * hs)) / 1e6, 3),
        "pct_500x375_or_375x500": round(common, 1),
        "greyscale": int(sum(1 for s in stats if s[3])),
        "seconds": round(seconds, 1),
    }


def print_summary(s, root):
    print("dataset %s: %d images, %.1f MB, mean %.1f KB (median %.1f KB), "
          "%.1f%% in 64K-256K (%.1f%% below, %.1f%% above), "
          "mean %.0fx%.0f (%.3f Mpx), %.1f%% are 500x375/375x500, %d greyscale, built in %.1fs"
          % (root, s["images"], s["total_mb"], s["mean_kb"], s["median_kb"], s["pct_64k_256k"],
             s["pct_below_64k"], s["pct_above_256k"], s["mean_width"], s["mean_height"],
             s["mean_megapixels"], s["pct_500x375_or_375x500"], s["greyscale"], s["seconds"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--force", action="store_true",
                    help="replace ROOT even if it has no stamp from this script")
    a = ap.parse_args()
    if a.images < 1 or a.classes < 1 or a.procs < 1:
        ap.error("--images, --classes and --procs must be positive")

    root = os.path.abspath(a.root.rstrip("/"))
    stamp_path = root + ".stamp"
    want = {"generator": GENERATOR_VERSION, "images": a.images,
            "classes": a.classes, "seed": a.seed}
    if os.path.isdir(root) and os.path.isfile(stamp_path):
        try:
            with open(stamp_path) as f:
                have = json.load(f)
        except (OSError, ValueError):
            have = {}
        if have.get("params") == want:
            print("dataset %s is up to date (%s)" % (root, stamp_path))
            if "summary" in have:
                print_summary(have["summary"], root)
            return 0
    if os.path.exists(root):
        if not os.path.isfile(stamp_path) and not a.force and os.listdir(root):
            sys.exit("make_dataset: %s exists and was not made by this script "
                     "(no %s); pass --force to replace it" % (root, stamp_path))
        shutil.rmtree(root)
    if os.path.exists(stamp_path):
        os.remove(stamp_path)

    sources = find_sources()
    if not sources:
        sys.exit("make_dataset: no source photos found under %s" % " ".join(SOURCE_DIRS))
    class_names, plan = plan_images(a.images, a.classes, a.seed, sources)

    tmp = "%s.tmp-%d" % (root, os.getpid())
    os.makedirs(tmp)
    for c in class_names:
        os.makedirs(os.path.join(tmp, c))
    groups = {}
    for p in plan:
        groups.setdefault(p["source"], []).append(p)
    # Big groups first so the last task to finish is a short one.
    tasks = sorted(((sources[si][0], ps, tmp) for si, ps in groups.items()),
                   key=lambda t: -len(t[1]))
    print("make_dataset: %d images from %d source photos, %d classes, %d procs -> %s"
          % (a.images, len(sources), a.classes, a.procs, root), flush=True)
    t0 = time.time()
    stats = []
    try:
        with mp.Pool(a.procs, initializer=_init_worker, initargs=(a.seed,)) as pool:
            for res in pool.imap_unordered(_run_group, tasks):
                stats.extend(res)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.rename(tmp, root)
    summary = summarize(stats, time.time() - t0)
    with open(stamp_path + ".tmp", "w") as f:
        json.dump({"params": want, "summary": summary}, f, indent=1)
    os.rename(stamp_path + ".tmp", stamp_path)
    print_summary(summary, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
