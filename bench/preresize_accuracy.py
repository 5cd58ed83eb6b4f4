#!/usr/bin/python3
"""How much `pack --max-side N` changes what the model sees: the eval transform's pixels.

    bench/preresize_accuracy.py [--images 400] [--max-side 256] [--qualities 75,85,90,95]
                                [--work bench/data/preresize_acc] [--chute build/chute]

Builds the ImageNet-like tree of bench/make_dataset.py (real wallpaper photos,
ImageNet's sizes and bytes per pixel), packs it as it is, with --max-side N at
each quality, and with --raw --max-side N, then runs chute's eval transform
(Resize(256) + CenterCrop(224), uint8, no DCT-scale shortcut) over every
dataset in the same order and reports, against the originals' output:

  mae        mean |diff| over all output bytes (uint8 levels)
  p99_img    99th percentile over images of the per-image mean |diff|
  max_img    the worst image's mean |diff|
  bytes/img  mean record size

The --raw row isolates the resize (no JPEG loss): it is what Lanczos-then-
bilinear costs against bilinear alone.  For scale, the row "dct_scale" is the
originals with the loader's default DCT-scaled decode against the full decode
(a shortcut chute already takes by default).  Prints a markdown table and
writes it, with the raw numbers as JSON, under --work.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
for cand in (os.path.join(ROOT, "python"), os.path.join(ROOT, "build-python", "lib-test")):
    if glob.glob(os.path.join(cand, "chute", "_chute*.so")):
        sys.path.insert(0, cand)
        break


def eval_output(chute, src, size, dct_scale):
    import numpy as np
    ld = chute.Loader(src, batch_size=50, transform="eval", size=size, dtype="uint8",
                      shuffle=False, dct_scale=dct_scale, as_torch=False, workers=2)
    out = []
    with ld:
        for batch in ld:
            out.append(np.array(batch[0], copy=True))
    return np.concatenate(out)


def stats(a, b):
    import numpy as np
    d = np.abs(a.astype(np.int16) - b.astype(np.int16)).reshape(len(a), -1).mean(axis=1)
    return {"mae": float(d.mean()), "p99_img": float(np.percentile(d, 99)),
            "max_img": float(d.max())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--max-side", type=int, default=256)
    ap.add_argument("--qualities", default="75,85,90,95")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--work", default=os.path.join(ROOT, "bench", "data", "preresize_acc"))
    ap.add_argument("--chute", default=os.path.join(ROOT, "build", "chute"))
    a = ap.parse_args()
    try:
        import chute
    except ImportError as e:
        sys.exit("preresize_accuracy.py: cannot import chute (%s): build it in place "
                 "(python3 setup.py build_ext --inplace) or pip install ." % e)
    os.makedirs(a.work, exist_ok=True)
    tree = os.path.join(a.work, "tree")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_dataset.py"), tree,
                    "--images", str(a.images), "--classes", str(a.classes)], check=True)

    def pack(name, *opts):
        out = os.path.join(a.work, name)
        subprocess.run([a.chute, "pack", tree, out] + [str(o) for o in opts], check=True,
                       stdout=subprocess.DEVNULL)
        recs = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out, "shard-*.chute")))
        return out, recs

    full, full_bytes = pack("full")
    ref = eval_output(chute, full, a.size, False)
    n = len(ref)
    rows = [("originals (full decode)", {"mae": 0.0, "p99_img": 0.0, "max_img": 0.0},
             full_bytes / n)]
    rows.append(("originals, dct_scale", stats(eval_output(chute, full, a.size, True), ref),
                 full_bytes / n))
    for q in [int(x) for x in a.qualities.split(",") if x]:
        d, b = pack("ms%d_q%d" % (a.max_side, q), "--max-side", a.max_side, "--quality", q)
        rows.append(("--max-side %d --quality %d" % (a.max_side, q),
                     stats(eval_output(chute, d, a.size, False), ref), b / n))
    d, b = pack("raw_ms%d" % a.max_side, "--raw", "--max-side", a.max_side)
    rows.append(("--raw --max-side %d" % a.max_side, stats(eval_output(chute, d, a.size, False), ref),
                 b / n))

    lines = ["eval transform (Resize %d + CenterCrop %d, uint8), %d images of %s; |diff| in "
             "uint8 levels vs the originals' full decode; bytes/img includes shard padding"
             % (round(a.size / 0.875), a.size, n, tree), "",
             "| dataset | mae | p99 per image | worst image | KB/img |",
             "|---|---:|---:|---:|---:|"]
    for name, s, b in rows:
        lines.append("| %s | %.3f | %.3f | %.3f | %.1f |" % (name, s["mae"], s["p99_img"],
                                                           s["max_img"], b / 1e3))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.work, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.work, "results.json"), "w") as f:
        json.dump([{"dataset": r[0], **r[1], "bytes_per_image": r[2]} for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
