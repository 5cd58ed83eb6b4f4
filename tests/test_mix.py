#!/usr/bin/env python3
"""MixUp / CutMix (options mixup, cutmix) against torchvision.transforms.v2,
and repeated augmentation (option repeats) against RASampler's split.

golden    every case of tests/fixtures/mix/golden.npz (torchvision's MixUp /
          CutMix output with a fixed lambda, and for CutMix the box its own
          make_params drew; made by tests/fixtures/make_mix_golden.py):
          chute's mixing (tests/tools/mixtool) of the same batch with the
          same lambda and box must give the same bytes and the same soft
          labels, in float32, float16 and uint8 (CutMix), NCHW and NHWC.
draws     chute's batch draws against torchvision's own draws (10000 each,
          from the fixture): MixUp lambdas for alpha 0.2 and 1.0 (two-sample
          KS at the 0.1% level, and the test's power: alpha 0.2 against 1.0
          is rejected), CutMix boxes (corners, sides, corrected lambda, KS),
          every box reachable by torchvision's formula from its lambda, and
          the MixUp/CutMix switch frequency.
loader    through the loader (tests/tools/dump): workers 1, 2, 3 give the
          same bytes and soft labels; each batch is, exactly, the plain
          epoch (same seed, no mixing) mixed with itself rolled by one,
          recomputed here with numpy's float32 (MixUp) or the box read off
          the pixels (CutMix, its area matching the soft label); resume from
          batch k is the epoch's tail; refusals are named.
repeats   repeats=3: every sample 3 times per epoch over the ranks, each
          rank's order the one torchvision references' RASampler gives for
          the same permutation (padding included), copies with different
          crops, copy 0 the unrepeated sample; workers and resume as above.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "fixtures", "mix", "golden.npz")


def mixtool(ctx):
    return os.path.join(os.path.dirname(ctx.dump), "mixtool")


def ks2(a, b):
    """Two-sample Kolmogorov-Smirnov statistic (ties handled: both ECDFs
    evaluated at every distinct value)."""
    import numpy as np
    a, b = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    v = np.union1d(a, b)
    fa = np.searchsorted(a, v, side="right") / a.size
    fb = np.searchsorted(b, v, side="right") / b.size
    return float(np.abs(fa - fb).max())


def ks_crit(n, m, c=1.95):  # 0.1% level
    return c * ((n + m) / (n * m)) ** 0.5


def golden(ctx):
    ctx.need_modules("numpy")
    import numpy as np
    tool = mixtool(ctx)
    work = ctx.scratch("golden")
    g = np.load(GOLDEN)
    meta = json.loads(bytes(g["meta"]).decode())
    ctx.note("torch %s, torchvision %s" % (meta["torch"], meta["torchvision"]))
    n, S, C = meta["n"], meta["size"], meta["classes"]
    labels = os.path.join(work, "labels.bin")
    np.asarray(meta["labels"], dtype="<i8").tofile(labels)
    done = 0
    for k, c in enumerate(meta["cases"]):
        x, want, soft_want = g["in_" + c["dtype"]], g["out%d" % k], g["soft%d" % k]
        for layout in ("nchw", "nhwc"):
            perm = (0, 1, 2, 3) if layout == "nchw" else (0, 2, 3, 1)
            inp, out, soft = (os.path.join(work, f) for f in ("in.bin", "out.bin", "soft.bin"))
            np.ascontiguousarray(x.transpose(perm)).tofile(inp)
            x1, y1, x2, y2 = c["box"]
            what = "%s %s %s lam %r" % (c["kind"], c["dtype"], layout, c["lam"])
            ctx.run([tool, "apply", c["kind"], "%.9g" % c["lam"], x1, y1, x2, y2, c["dtype"],
                     layout, S, n, C, inp, labels, out, soft], what=what)
            got = np.fromfile(out, dtype=x.dtype).reshape(x.transpose(perm).shape)
            w = np.ascontiguousarray(want.transpose(perm))
            ctx.check(got.tobytes() == w.tobytes(),
                      "%s: pixels differ from torchvision's (%d of %d values, max abs %g)"
                      % (what, int((got != w).sum()), w.size,
                         float(np.abs(got.astype(np.float64) - w.astype(np.float64)).max())))
            gs = np.fromfile(soft, dtype="<f4").reshape(n, C)
            ctx.check(gs.tobytes() == soft_want.astype("<f4").tobytes(),
                      "%s: soft labels differ from torchvision's:\n%r\n%r" % (what, gs, soft_want))
            done += 1
    ctx.check(done == 2 * len(meta["cases"]) and done >= 36, "only %d cases" % done)
    kinds = {(c["kind"], c["dtype"]) for c in meta["cases"]}
    ctx.check(len(kinds) == 5, "cases cover %r" % sorted(kinds))
    # a label outside num_classes is refused, naming the sample
    np.asarray([1, 2, 10, 0, 4], dtype="<i8").tofile(labels)
    np.zeros((n, 3, S, S), dtype="<f4").tofile(inp)
    p = ctx.run([tool, "apply", "mixup", "0.5", 0, 0, 0, 0, "float32", "nchw", S, n, C, inp,
                 labels, out, soft], expect=3)
    ctx.check("label 10 of sample 2 is outside 0..9" in p.err, "bad label: %r" % p.err)
    print("golden: %d cases identical to torchvision %s (pixels and soft labels)"
          % (done, meta["torchvision"]))


def draw_rows(ctx, mixup, cutmix, switch, size, seed, n):
    p = ctx.run([mixtool(ctx), "draw", mixup, cutmix, switch, size, seed, n])
    rows = [line.split() for line in p.out.strip().split("\n")]
    ctx.check(len(rows) == n, "draw rows: %d of %d" % (len(rows), n))
    return [(int(r[0]), float(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]), float(r[6]))
            for r in rows]


def draws(ctx):
    ctx.need_modules("numpy")
    import numpy as np
    g = np.load(GOLDEN)
    meta = json.loads(bytes(g["meta"]).decode())
    N = meta["draws"]
    lams = {}
    for alpha in (0.2, 1.0):
        rows = draw_rows(ctx, alpha, 0, 0.5, 32, 3, N)
        ctx.check(all(r[0] == 1 for r in rows), "mixup alone drew another kind")
        lam = np.array([r[1] for r in rows])
        ctx.check(((lam >= 0) & (lam <= 1)).all(), "lambda outside [0, 1]")
        ctx.check((lam == lam.astype(np.float32)).all(), "lambda is not a float32 value")
        tv = g["mixup_lam_%g" % alpha]
        # torch's draws stop at 1 - 2^-24 (a float32 Beta draw is never 1):
        # the mass above it must sit there, as much of it as torch puts there
        top = float(np.float32(1 - 2 ** -24))
        ctx.check(lam.max() <= top, "mixup alpha %g: lambda %r above 1 - 2^-24" % (alpha, lam.max()))
        a, b = (lam == top).sum(), (tv == top).sum()
        ctx.check(abs(a - b) <= 4 * (b + 1) ** 0.5 + 2, "mixup alpha %g: %d draws at 1 - 2^-24, "
                  "torchvision %d" % (alpha, a, b))
        d = ks2(lam, tv)
        ctx.check(d < ks_crit(N, tv.size), "mixup alpha %g: KS D %.4f against torchvision's "
                  "draws (limit %.4f)" % (alpha, d, ks_crit(N, tv.size)))
        print("mixup alpha %g: KS D %.4f vs torchvision (0.1%% limit %.4f), mean %.4f / %.4f"
              % (alpha, d, ks_crit(N, tv.size), lam.mean(), tv.mean()))
        lams[alpha] = lam
    # the comparison can fail: alpha 0.2's lambdas are not alpha 1.0's
    d = ks2(lams[0.2], g["mixup_lam_1"])
    ctx.check(d > 3 * ks_crit(N, N), "KS cannot tell alpha 0.2 from 1.0 (D %.4f)" % d)

    S = meta["cutmix_size"]
    rows = draw_rows(ctx, 0, 1.0, 0.5, S, 4, N)
    ctx.check(all(r[0] == 2 for r in rows), "cutmix alone drew another kind")
    box = np.array([r[2:6] for r in rows])
    tvb = g["cutmix_box"].astype(np.int64)
    for j, name in enumerate(("x1", "y1", "x2", "y2")):
        d = ks2(box[:, j], tvb[:, j])
        ctx.check(d < ks_crit(N, N), "cutmix %s: KS D %.4f against torchvision's" % (name, d))
    w, h = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
    tw, th = tvb[:, 2] - tvb[:, 0], tvb[:, 3] - tvb[:, 1]
    for name, a, b in (("width", w, tw), ("height", h, th),
                       ("corrected lambda", 1 - w * h / S / S, 1 - tw * th / S / S)):
        d = ks2(a, b)
        ctx.check(d < ks_crit(N, N), "cutmix %s: KS D %.4f against torchvision's" % (name, d))
        print("cutmix %s: KS D %.4f vs torchvision (0.1%% limit %.4f)" % (name, d, ks_crit(N, N)))
    # every box is torchvision's formula for its lambda and some centre
    bad = 0
    for kind, lam, x1, y1, x2, y2, adj in rows:
        r = 0.5 * (1.0 - lam) ** 0.5
        hw, hh = int(r * S), int(r * S)
        xs = {(max(c - hw, 0), min(c + hw, S)) for c in range(S)}
        ys = {(max(c - hh, 0), min(c + hh, S)) for c in range(S)}
        ok = (x1, x2) in xs and (y1, y2) in ys and adj == 1.0 - (x2 - x1) * (y2 - y1) / (S * S)
        bad += not ok
    ctx.check(bad == 0, "%d CutMix boxes are not torchvision's box for their lambda" % bad)
    # both on: CutMix with probability mix_switch
    for q in (0.5, 0.3):
        rows = draw_rows(ctx, 0.8, 1.0, q, 32, 5, N)
        f = sum(r[0] == 2 for r in rows) / N
        ctx.check(abs(f - q) < 4 * (q * (1 - q) / N) ** 0.5,
                  "switch %g: CutMix on %.4f of the batches" % (q, f))
        print("switch %g: CutMix on %.4f of %d batches" % (q, f, N))


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def loader(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    import numpy as np
    work = ctx.scratch("loader")
    S, B, C = 24, 16, 3
    common = ["--transform", "train", "--size", S, "--batch-size", B, "--epoch", 1, "--seed", 9,
              "--dtype", "float32"]
    mix = ["--mixup", 0.8, "--cutmix", 1.0]
    outs = {}
    for wk in (1, 2, 3):
        outs[wk] = (os.path.join(work, "w%d.bin" % wk), os.path.join(work, "w%d.soft" % wk))
        p = ctx.dump_run(ctx.tree, outs[wk][0], *common, *mix, "--workers", wk,
                         "--soft", outs[wk][1])
        ctx.check(T.parse_counts(p.out).get("samples") == 200, "workers %d: %r" % (wk, p.out))
    for wk in (2, 3):
        ctx.check(same_file(outs[1][0], outs[wk][0]) and same_file(outs[1][1], outs[wk][1]),
                  "mixing: workers 1 and %d give different bytes" % wk)
    plain = os.path.join(work, "plain.bin")
    ctx.dump_run(ctx.tree, plain, *common, "--workers", 2)
    ip, lp, xp = ctx.read_dump(plain, S, "float32")
    im, lm, xm = ctx.read_dump(outs[1][0], S, "float32")
    soft = np.fromfile(outs[1][1], dtype="<f4").reshape(-1, C)
    ctx.check(np.array_equal(ip, im) and np.array_equal(lp, lm),
              "mixing moved samples or labels (it must only mix pixels)")
    kinds = {"mixup": 0, "cutmix": 0}
    for b0 in range(0, 200, B):
        n = min(B, 200 - b0)
        x, m, lab, sl = xp[b0:b0 + n], xm[b0:b0 + n], lp[b0:b0 + n], soft[b0:b0 + n]
        roll, rlab = np.roll(x, 1, axis=0), np.roll(lab, 1)
        diff = lab != rlab
        ctx.check(diff.any(), "batch at %d: every label equal (the test needs one pair)" % b0)
        lam = np.float32(sl[np.argmax(diff), lab[np.argmax(diff)]])  # own label's share
        b = np.float32(1.0 - np.float64(lam))
        if np.array_equal(m, b * roll + lam * x):  # torch: rolled * (1 - lam) + x * lam
            kinds["mixup"] += 1
            adj = np.float64(lam)
        else:  # CutMix: every sample is x outside one box, its partner inside
            union = (m != x).reshape(n, 3, S, S).any(axis=1).any(axis=0)
            ys, xs = np.where(union)
            y1, y2 = (ys.min(), ys.max() + 1) if ys.size else (0, 0)
            x1, x2 = (xs.min(), xs.max() + 1) if xs.size else (0, 0)
            want = x.copy().reshape(n, 3, S, S)
            want[:, :, y1:y2, x1:x2] = roll.reshape(n, 3, S, S)[:, :, y1:y2, x1:x2]
            ok = np.array_equal(m, want.reshape(m.shape))
            ctx.check(ok, "batch at %d is neither MixUp nor CutMix of the plain batch" % b0)
            kinds["cutmix"] += ok
            adj = 1.0 - (y2 - y1) * (x2 - x1) / (S * S)  # torchvision's lam_adjusted
        # labels: one-hot mixed as torchvision's _mixup_label
        a32, b32 = np.float32(adj), np.float32(1.0 - adj)
        want = np.zeros((n, C), np.float32)
        want[np.arange(n), rlab] = b32
        want[np.arange(n), lab] = np.where(diff, a32, b32 + a32)
        ctx.check(np.array_equal(sl, want), "batch at %d: soft labels %r, want %r (lambda %r)"
                  % (b0, sl, want, adj))
    ctx.check(kinds["mixup"] >= 2 and kinds["cutmix"] >= 2, "batches mixed: %r" % kinds)
    print("loader: %d MixUp and %d CutMix batches, each exactly the plain batch mixed" %
          (kinds["mixup"], kinds["cutmix"]))
    # float16 NHWC, MixUp alone: every batch is the plain float16 batch mixed as
    # torch mixes Half (each product and the sum computed in float, rounded to half)
    h16 = ["--transform", "train", "--size", S, "--batch-size", B, "--epoch", 1, "--seed", 9,
           "--dtype", "float16", "--layout", "nhwc"]
    pm, sm = os.path.join(work, "h_plain.bin"), os.path.join(work, "h_mix.bin")
    ctx.dump_run(ctx.tree, pm, *h16, "--workers", 2)
    ctx.dump_run(ctx.tree, sm, *h16, "--workers", 3, "--mixup", 0.4, "--soft",
                 os.path.join(work, "h_mix.soft"))
    _, hl, hp = ctx.read_dump(pm, S, "float16")
    _, _, hm = ctx.read_dump(sm, S, "float16")
    hs = np.fromfile(os.path.join(work, "h_mix.soft"), dtype="<f4").reshape(-1, C)
    f16 = 0
    for b0 in range(0, 200, B):
        n = min(B, 200 - b0)
        x, lab = hp[b0:b0 + n].astype(np.float32), hl[b0:b0 + n]
        i = int(np.argmax(lab != np.roll(lab, 1)))
        lam = np.float32(hs[b0 + i, lab[i]])
        b = np.float32(1.0 - np.float64(lam))
        p16 = (np.roll(x, 1, axis=0) * b).astype(np.float16).astype(np.float32)
        x16 = (x * lam).astype(np.float16).astype(np.float32)
        f16 += np.array_equal(hm[b0:b0 + n], (p16 + x16).astype(np.float16))
    ctx.check(f16 == 13, "float16 NHWC MixUp: %d of 13 batches as torch's Half arithmetic" % f16)
    # resume: batches from k on are the epoch's tail (pixels and soft labels)
    rec = 16 + S * S * 3 * 4
    with open(outs[1][0], "rb") as f:
        whole = f.read()
    for k in (2, 5):
        part, ps = os.path.join(work, "from%d.bin" % k), os.path.join(work, "from%d.soft" % k)
        ctx.dump_run(ctx.tree, part, *common, *mix, "--workers", 2, "--start-batch", k,
                     "--soft", ps)
        with open(part, "rb") as f:
            ctx.check(f.read() == whole[k * B * rec:], "mixing: resume from batch %d differs" % k)
        ctx.check(np.array_equal(np.fromfile(ps, dtype="<f4").reshape(-1, C), soft[k * B:]),
                  "mixing: resumed soft labels differ")
    # a stream (pipe: of a WebDataset tar of the tree): mixed batches, soft
    # labels from the records' .cls labels, the same for workers 1 and 3
    import io
    import tarfile
    tar = os.path.join(work, "tree.tar")
    with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as t:
        for i, (path, lab) in enumerate(T.imagefolder_samples(ctx.tree)[1][:64]):
            with open(path, "rb") as f:
                img = f.read()
            for ext, data in (("jpg", img), ("cls", str(lab).encode())):
                ti = tarfile.TarInfo("s%05d.%s" % (i, ext))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    st = {}
    for wk in (1, 3):
        o, so = os.path.join(work, "st%d.bin" % wk), os.path.join(work, "st%d.soft" % wk)
        ctx.dump_run("pipe:cat " + tar, o, *common, "--mixup", 0.5, "--num-classes", C,
                     "--workers", wk, "--soft", so)
        _, sl_, sx = ctx.read_dump(o, S, "float32")
        st[wk] = (sx, np.fromfile(so, dtype="<f4").reshape(-1, C), sl_)
    p = ctx.dump_run("pipe:cat " + tar, o, *common, "--mixup", 0.5, expect=1)
    ctx.check("num_classes is needed" in p.err, "stream without num_classes: %r" % p.err)
    sx, ss, sl_ = st[1]
    ctx.check(sx.shape[0] == 64 and np.array_equal(sx, st[3][0]) and np.array_equal(ss, st[3][1]),
              "stream mixing: %d samples, workers 1 and 3 differ" % sx.shape[0])
    rl = np.roll(sl_.reshape(4, B), 1, axis=1).ravel()
    ctx.check(np.allclose(ss.sum(axis=1), 1, atol=1e-6) and
              ((ss[np.arange(64), sl_] > 0) & (ss[np.arange(64), rl] > 0)).all(),
              "stream mixing: soft labels do not mix each record's label with its partner's")
    # uint8: CutMix works, MixUp is refused (as torchvision); bad settings named
    u8 = os.path.join(work, "u8.bin")
    ctx.dump_run(ctx.tree, u8, "--transform", "train", "--size", S, "--dtype", "uint8",
                 "--cutmix", 1.0, "--soft", os.path.join(work, "u8.soft"))
    for flags, msg in ((["--dtype", "uint8", "--mixup", 0.2], "mixup: needs a float dtype"),
                       (["--mixup", 0.2, "--num-classes", 2], "is outside 0..1 (num_classes 2)"),
                       (["--mixup", -1], "mixup = -1 must be finite, > 0")):
        p = ctx.dump_run(ctx.tree, u8, "--size", S, *flags, expect=1)
        ctx.check(msg in p.out + p.err, "%r: %r lacks %r" % (flags, p.err, msg))
    p = ctx.run([ctx.chute, "bench", ctx.tree, "--epochs", 1, "--size", S, "--mixup", 0.2,
                 "--cutmix", 1.0, "--repeats", 2])
    ctx.check(p.returncode == 0, "chute bench --mixup --cutmix --repeats: %r" % p.err)


def ra_order(perm, k, world, rank):
    """torchvision references' RASampler.__iter__, for a given permutation,
    without its final cut to num_selected_samples."""
    import math
    n = len(perm)
    num_samples = int(math.ceil(n * float(k) / world))
    total = num_samples * world
    indices = [e for e in perm for _ in range(k)]
    indices += indices[: (total - len(indices))]
    return indices[rank:total:world]


def repeats(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    import numpy as np
    work = ctx.scratch("repeats")
    S, K = 16, 3
    common = ["--transform", "train", "--size", S, "--batch-size", 10, "--seed", 4, "--dtype",
              "uint8", "--epoch", 2]
    base = os.path.join(work, "base.bin")
    ctx.dump_run(ctx.tree, base, *common)
    perm, _, xb = ctx.read_dump(base, S)
    for world, shuffle in ((2, []), (7, []), (4, ["--no-shuffle"])):
        p0 = list(range(200)) if shuffle else [int(v) for v in perm]
        seen, pix = {}, {}
        for rank in range(world):
            out = os.path.join(work, "r%d.bin" % rank)
            ctx.dump_run(ctx.tree, out, *common, *shuffle, "--repeats", K, "--world", world,
                         "--rank", rank, "--workers", 2)
            idx, _, x = ctx.read_dump(out, S)
            want = ra_order(p0, K, world, rank)
            ctx.check([int(v) for v in idx] == want,
                      "world %d rank %d: order differs from RASampler's" % (world, rank))
            for i, v in enumerate(idx):
                seen[int(v)] = seen.get(int(v), 0) + 1
                pix.setdefault(int(v), []).append(x[i].tobytes())
        total = sum(seen.values())
        pad = total - 200 * K
        ctx.check(0 <= pad < world and all(c >= K for c in seen.values()) and len(seen) == 200,
                  "world %d: counts %r" % (world, sorted(set(seen.values()))))
        if shuffle:
            continue
        same = sum(len(set(v[:K])) < K for v in pix.values())
        ctx.check(same <= 2, "world %d: %d samples got the same pixels on two copies"
                  % (world, same))
        by_idx = {int(v): xb[i].tobytes() for i, v in enumerate(perm)}
        miss = sum(by_idx[i] not in v for i, v in pix.items())
        ctx.check(miss == 0, "world %d: %d samples lack a copy equal to the unrepeated one"
                  % (world, miss))
    # workers and resume
    a, b = os.path.join(work, "w1.bin"), os.path.join(work, "w3.bin")
    ctx.dump_run(ctx.tree, a, *common, "--repeats", K, "--workers", 1)
    ctx.dump_run(ctx.tree, b, *common, "--repeats", K, "--workers", 3)
    ctx.check(same_file(a, b), "repeats: workers 1 and 3 differ")
    with open(a, "rb") as f:
        whole = f.read()
    ctx.check(len(whole) == 600 * (16 + S * S * 3), "repeats: epoch of %d bytes" % len(whole))
    c = os.path.join(work, "from7.bin")
    ctx.dump_run(ctx.tree, c, *common, "--repeats", K, "--start-batch", 7)
    with open(c, "rb") as f:
        ctx.check(f.read() == whole[70 * (16 + S * S * 3):], "repeats: resume differs")
    p = ctx.dump_run(ctx.shards, c, *common, "--repeats", K, "--format", "shards",
                     expect=None)
    ctx.check(p.returncode == 0, "repeats over shards (global shuffle): %r" % p.err)


if __name__ == "__main__":
    T.main({"golden": golden, "draws": draws, "loader": loader, "repeats": repeats})
