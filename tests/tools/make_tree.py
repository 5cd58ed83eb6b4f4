#!/usr/bin/env python3
"""Make a small ImageFolder tree of real photos for tests.

Crops of the photos in Debian's wallpaper packages, re-encoded at varied
sizes: mostly colour JPEG, some greyscale JPEG, some PNG (RGB, grey, RGBA),
so every decode path is exercised on real image content.

usage: make_tree.py OUT_DIR [--images N] [--classes K] [--seed S] [--max-side M]
"""
import argparse
import glob
import os
import random
import sys

from PIL import Image


# The sources on a Debian 12 host with plasma-workspace-wallpapers
# (scripts/deps.sh installs it), in the order the rule below picked them
# there: pinned, so the tree -- and every bound measured on it -- is the same
# on every such host whatever else is installed.  (Grey's ten names are
# links to one photo.)  Other photos still give a valid tree (the bounds of
# eval_matches_torchvision hold on any: see reference_dct in
# tests/test_accuracy.py), but the figures measured on it differ.
PINNED = ["Shell/contents/images/720x1440.jpg", "Flow/contents/images_dark/720x1440.jpg"] + [
    "Grey/contents/images/%s.jpg" % r for r in
    ("1280x1024", "1280x800", "1440x900", "1600x1200", "1638x1024", "1680x1050", "1920x1080",
     "1920x1200", "2560x1440", "2560x1600")]


def pinned_photos():
    out = [os.path.join("/usr/share/wallpapers", f) for f in PINNED]
    return out if all(os.path.isfile(f) for f in out) else None


def photos():
    pats = ["/usr/share/wallpapers/*/contents/images/*", "/usr/share/wallpapers/*/contents/images_dark/*",
            "/usr/share/backgrounds/**/*"]
    out = []
    for p in pats:
        out += [f for f in glob.glob(p, recursive=True) if f.lower().endswith((".jpg", ".jpeg", ".png"))]
    out = sorted(set(out))
    # A handful of sources keeps generation fast; JPEGs first (quick to open).
    out.sort(key=lambda f: (not f.lower().endswith((".jpg", ".jpeg")), os.path.getsize(f)))
    out = out[:12]
    if not out:
        sys.exit("make_tree.py: no photos found; install plasma-workspace-wallpapers or gnome-backgrounds")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=120)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-side", type=int, default=640)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    srcs = pinned_photos()
    print("sources: %s" % ("pinned" if srcs else "other"))
    if not srcs:
        srcs = photos()
    cache = {}
    loaded = {}
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, "class%02d" % c), exist_ok=True)
    for i in range(a.images):
        src = srcs[rnd.randrange(len(srcs))]
        if src not in loaded:
            im = Image.open(src)
            im.draft("RGB", (1600, 1600))
            im = im.convert("RGB")
            im.thumbnail((1600, 1600))
            loaded[src] = im
        im = loaded[src]
        w, h = im.size
        cw = rnd.randint(min(200, w), w)
        ch = rnd.randint(min(200, h), h)
        x = rnd.randint(0, w - cw)
        y = rnd.randint(0, h - ch)
        tw = rnd.randint(160, a.max_side)
        th = rnd.randint(160, a.max_side)
        out = im.crop((x, y, x + cw, y + ch)).resize((tw, th), Image.BILINEAR)
        d = os.path.join(a.out, "class%02d" % (i % a.classes))
        r = i % 20
        if r == 0:
            out.save(os.path.join(d, "img%05d.png" % i))
        elif r == 10:
            out.convert("L").save(os.path.join(d, "img%05d.png" % i))
        elif r == 5:
            out.convert("RGBA").save(os.path.join(d, "img%05d.png" % i))
        elif r in (3, 13):
            out.convert("L").save(os.path.join(d, "img%05d.jpg" % i), quality=85)
        elif r == 7:
            out.save(os.path.join(d, "img%05d.jpeg" % i), quality=75, progressive=True)
        elif r == 17:
            out.convert("CMYK").save(os.path.join(d, "img%05d.jpg" % i), quality=90)
        else:
            out.save(os.path.join(d, "img%05d.jpg" % i), quality=rnd.choice([80, 90, 95]),
                     subsampling=rnd.choice([0, 2]))
    print("made %d images in %s" % (a.images, a.out))


if __name__ == "__main__":
    main()
