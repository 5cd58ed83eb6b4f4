#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/image: small BMPs (written by PIL, and the
hand-built variants of tests/test_decoders.py that PIL reads) and CHRAW
records, the seeds fuzz_image is replayed on for the BMP and raw decoders
(ctest fuzz_replay_image_bmp_raw).  Run from anywhere:
    python3 tests/fuzz/make_image_seeds.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import test_decoders as D  # noqa: E402


def main():
    import numpy as np
    from PIL import Image
    out = os.path.join(HERE, "corpus", "image")
    os.makedirs(out, exist_ok=True)
    y, x = np.mgrid[0:7, 0:13]
    rgb = np.stack([x * 19, y * 36, (x * y * 7) % 256], -1).astype(np.uint8)
    im = Image.fromarray(rgb, "RGB")
    im.save(os.path.join(out, "rgb24.bmp"))
    rgba = im.copy()
    rgba.putalpha(200)
    rgba.save(os.path.join(out, "rgba32.bmp"))
    im.convert("P", palette=Image.ADAPTIVE, colors=16).save(os.path.join(out, "pal8.bmp"))
    im.convert("1").save(os.path.join(out, "mono1.bmp"))
    for name, data in D.variants(rgb):
        with open(os.path.join(out, name + ".bmp"), "wb") as f:
            f.write(data)
    for name, img in (("rgb", im), ("grey", im.convert("L")), ("rgba", rgba)):
        with open(os.path.join(out, name + ".chraw"), "wb") as f:
            f.write(D.chraw(img))


if __name__ == "__main__":
    main()
