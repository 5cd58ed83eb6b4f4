#!/usr/bin/env python3
"""Reproducibility of the loader's output.

determinism  train transform, float32: workers 1, 2 and 5 give byte-identical
             epochs for the same seed (and the tree and its shards agree);
             another seed gives a different epoch.
resume       an epoch dumped from start-batch k equals the tail of the
             whole epoch from sample k*B on (for several k, worker counts,
             and k past the end).
dtypes       one seed, every output type: float16 is float32 rounded to
             half, NHWC is NCHW transposed, uint8 is the un-normalized value
             rounded, and indices/labels agree.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def determinism(ctx):
    ctx.need_data()
    work = ctx.scratch("determinism")
    base = ["--transform", "train", "--dtype", "float32", "--size", 64, "--batch-size", 32]
    common = base + ["--epoch", 1]
    outs = {}
    for w in (1, 2, 5):
        out = os.path.join(work, "w%d.bin" % w)
        p = ctx.dump_run(ctx.tree, out, *common, "--workers", w, "--seed", 7)
        ctx.check(T.parse_counts(p.out).get("samples") == 200, "workers %d: %r" % (w, p.out))
        outs[w] = out
    ctx.check(same_file(outs[1], outs[2]), "workers 1 and 2 give different bytes")
    ctx.check(same_file(outs[1], outs[5]), "workers 1 and 5 give different bytes")
    sh = os.path.join(work, "shards.bin")
    ctx.dump_run(ctx.shards, sh, *common, "--workers", 2, "--seed", 7)
    ctx.check(same_file(outs[1], sh), "the tree and its shards give different epochs")
    other = os.path.join(work, "seed8.bin")
    ctx.dump_run(ctx.tree, other, *common, "--workers", 2, "--seed", 8)
    ctx.check(not same_file(outs[1], other), "seeds 7 and 8 give the same epoch")
    ep2 = os.path.join(work, "epoch2.bin")
    ctx.dump_run(ctx.tree, ep2, *base, "--epoch", 2, "--workers", 2, "--seed", 7)
    ctx.check(not same_file(outs[1], ep2), "epochs 1 and 2 give the same bytes")


def resume(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    import numpy as np
    work = ctx.scratch("resume")
    B, S = 16, 48
    common = ["--transform", "train", "--dtype", "uint8", "--size", S, "--batch-size", B,
              "--seed", 3, "--epoch", 1]
    full = os.path.join(work, "full.bin")
    p = ctx.dump_run(ctx.shards, full, *common, "--workers", 2)
    c = T.parse_counts(p.out)
    ctx.check(c.get("samples") == 200 and c.get("batches") == 13, "full epoch: %r" % p.out)
    fi, fl, fd = ctx.read_dump(full, S)
    for k, workers in ((1, 2), (5, 2), (5, 3), (7, 1), (12, 2), (13, 2), (20, 2)):
        out = os.path.join(work, "from%d_w%d.bin" % (k, workers))
        p = ctx.dump_run(ctx.shards, out, *common, "--workers", workers, "--start-batch", k)
        c = T.parse_counts(p.out)
        want_n = max(0, 200 - k * B)
        ctx.check(c.get("samples") == want_n and c.get("batches") == max(0, 13 - k),
                  "start-batch %d: %r, want samples=%d" % (k, p.out, want_n))
        ri, rl, rd = ctx.read_dump(out, S)
        ctx.check(len(ri) == want_n and np.array_equal(ri, fi[k * B:]) and
                  np.array_equal(rl, fl[k * B:]) and np.array_equal(rd, fd[k * B:]),
                  "start-batch %d (workers %d) is not the tail of the full epoch" % (k, workers))


def dtypes(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    import numpy as np
    work = ctx.scratch("dtypes")
    S = 40
    common = ["--transform", "train", "--size", S, "--batch-size", 25, "--seed", 11,
              "--workers", 2]
    runs = {
        "f32": ("float32", []),
        "f16": ("float16", []),
        "u8": ("uint8", []),
        "f32nhwc": ("float32", ["--layout", "nhwc"]),
        "u8nchw": ("uint8", ["--layout", "nchw"]),
        "raw": ("float32", ["--no-normalize"]),
    }
    got = {}
    for name, (dt, extra) in runs.items():
        out = os.path.join(work, name + ".bin")
        ctx.dump_run(ctx.tree, out, *common, "--dtype", dt, *extra)
        got[name] = ctx.read_dump(out, S, dt)
    base_i, base_l = got["f32"][0], got["f32"][1]
    for name, (i, l, _) in got.items():
        ctx.check(np.array_equal(i, base_i) and np.array_equal(l, base_l),
                  "%s: indices/labels differ from float32's" % name)
    n = len(base_i)
    f32 = got["f32"][2].reshape(n, 3, S, S)
    f16 = got["f16"][2].reshape(n, 3, S, S)
    nhwc = got["f32nhwc"][2].reshape(n, S, S, 3)
    # Every output type comes from the same resampled values; the kernels
    # for different types/layouts may round differently in the last bit
    # (e.g. an FMA-using CPU-specific clone for the NCHW float32 path), so
    # allow one unit in the last place and report whether they are exact.
    h_ref = f32.astype(np.float16)
    hdiff = np.abs(h_ref.astype(np.float32) - f16.astype(np.float32))
    hulp = np.spacing(np.maximum(np.abs(h_ref), np.abs(f16))).astype(np.float32)
    ctx.check(bool((hdiff <= hulp * 1.0001 + 4e-6).all()),
              "float16 output differs from float32 rounded to half by more than 1 ulp + 4e-6 (max %g)"
              % float(hdiff.max()))
    ndiff = np.abs(nhwc - f32.transpose(0, 2, 3, 1))
    # |value| <= 2.7 and value = pixel * mul + add: a fused vs an unfused
    # multiply-add differ by at most about one ulp of the product (~4.4).
    ctx.check(bool((ndiff <= 4e-6).all()),
              "float32 NHWC is not NCHW transposed (max diff %g)" % float(ndiff.max()))
    exact16 = np.array_equal(h_ref.view(np.uint16), f16.view(np.uint16))
    exactT = np.array_equal(nhwc, f32.transpose(0, 2, 3, 1))
    ctx.note("bit-exact: float16 == float32 rounded: %s (%d values differ); NHWC == NCHW^T: %s "
             "(%d values differ, max %g)" % (exact16, int((hdiff > 0).sum()), exactT,
                                            int((ndiff > 0).sum()), float(ndiff.max())))
    u8 = got["u8"][2].reshape(n, S, S, 3).astype(np.float32)
    u8nchw = got["u8nchw"][2].reshape(n, 3, S, S)
    ctx.check(np.array_equal(u8nchw.transpose(0, 2, 3, 1), u8.astype(np.uint8)),
              "uint8 NCHW is not uint8 NHWC transposed")
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
    pix = ((f32 * std + mean) * 255.0).transpose(0, 2, 3, 1)
    err = np.abs(np.clip(pix, 0, 255) - u8)
    ctx.check(err.max() <= 0.51, "uint8 differs from de-normalized float32 by up to %.3f" % err.max())
    raw = got["raw"][2].reshape(n, 3, S, S).transpose(0, 2, 3, 1) * 255.0
    err = np.abs(np.clip(raw, 0, 255) - u8)
    ctx.check(err.max() <= 0.501, "uint8 differs from --no-normalize float32*255 by %.3f" % err.max())
    ctx.check(raw.min() >= -1e-3 and raw.max() <= 255.001,
              "--no-normalize values outside 0..1: %g..%g" % (raw.min() / 255, raw.max() / 255))


if __name__ == "__main__":
    sys.exit(T.main({"determinism": determinism, "resume": resume, "dtypes": dtypes}))
