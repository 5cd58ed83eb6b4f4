#!/usr/bin/env python3
"""The augmentation ops against torchvision.transforms.v2.

golden    every case of tests/fixtures/augment/golden.npz (torchvision's
          output, made by tests/fixtures/make_augment_golden.py on small
          real-photo crops): chute's op (tests/tools/augtool) on the same
          input with the same parameters.  Ops torchvision computes exactly
          on uint8 must be identical; the others within BOUND levels.  Max
          and mean absolute difference are printed per op.
parse     augment strings: the parsed steps, and errors that name the
          offending token.
loader    option augment through the loader (tests/tools/dump): workers 1, 2
          and 3 give byte-identical epochs (tree, shards and a decoded
          cache too); resuming from batch k gives the epoch's tail; seeds
          differ; invert=1 on uint8 is 255 - the plain
          epoch; erasing=1 on float32 zeroes one rectangle per sample and
          leaves the rest as a no-op augment string does; value random
          writes N(0, 1) values (mean, std, 4th moment), worker-independent,
          refused for uint8; `chute bench --augment` names a bad token and
          the refused combinations; a no-op string
          differs from the plain float pass by the uint8 rounding only.
draws     the draw functions: coin frequencies match p, factors stay in
          ColorJitter's ranges, uniform there (KS), ColorJitter's orders
          all 24 permutations equally often (chi-square), erasing boxes fit and match their area range.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "fixtures", "augment", "golden.npz")
# Non-exact ops: 1 level (float sums in another order, vectorised exp, fused
# multiply-adds where PyTorch's scalar tail does not fuse).
BOUND = {"grayscale": 1, "brightness": 1, "contrast": 1, "saturation": 1, "hue": 1,
         "sharpness": 1, "blur": 1, "colorjitter": 1,
         # the policies' Brightness, Color, Contrast and Sharpness (their
         # geometric and the other ops are exact)
         "trivialaugment": 1, "randaugment": 1}
POLICIES = ("trivialaugment", "randaugment", "autoaugment")
# and on average: an op that is off by one level on a share of its pixels is
# wrong, however small each difference (dropping saturation's floor() gives
# max 1, mean 0.18)
MEAN_BOUND = 0.01


def augtool(ctx):
    return os.path.join(os.path.dirname(ctx.dump), "augtool")


def golden(ctx):
    ctx.need_modules("numpy")
    import numpy as np
    tool = augtool(ctx)
    work = ctx.scratch("golden")
    g = np.load(GOLDEN)
    meta = json.loads(bytes(g["meta"]).decode())
    ctx.note("torch %s, torchvision %s" % (meta["torch"], meta["torchvision"]))
    per_op = {}
    for c in meta["cases"]:
        src = g["in%d" % c["input"]]
        want = g[c["key"]]
        h, w = src.shape[:2]
        if c["op"] == "erasing" and w != h:
            continue  # output-stage ops act on a square slot
        inp, out = os.path.join(work, "in.bin"), os.path.join(work, "out.bin")
        with open(inp, "wb") as f:
            f.write(np.ascontiguousarray(src).tobytes())
        args = ["%.9g" % a for a in c["args"]]
        ctx.run([tool, "apply", c["op"], w, h, inp, out] + args, what=c["case"])
        got = np.fromfile(out, dtype=np.uint8).reshape(src.shape)
        d = np.abs(got.astype(np.int32) - want.astype(np.int32))
        mx, mean = int(d.max()), float(d.mean())
        key = c["op"]
        if key in POLICIES:  # per policy op
            ids = meta["policy"]["ids"]
            key += " " + "+".join(ids[int(c["args"][1 + 2 * k])] for k in range(int(c["args"][0])))
        r = per_op.setdefault(key, [0, 0.0, 0, c["exact"]])
        r[0] = max(r[0], mx)
        r[1] += float(d.sum())
        r[2] += d.size
        limit = 0 if c["exact"] else BOUND[c["op"]]
        ctx.check(mx <= limit, "%s on input %d: max abs diff %d > %d (mean %.4f)"
                  % (c["case"], c["input"], mx, limit, mean))
        ctx.check(mean <= MEAN_BOUND, "%s on input %d: mean abs diff %.4f > %g"
                  % (c["case"], c["input"], mean, MEAN_BOUND))
    ctx.check(len(per_op) >= 14, "only %d ops in the golden file" % len(per_op))
    for op, (mx, s, n, exact) in sorted(per_op.items()):
        print("%-30s %-6s max abs diff %d  mean %.5f" % (op, "exact" if exact else "bound",
                                                         mx, s / n))


def parse(ctx):
    tool = augtool(ctx)
    p = ctx.run([tool, "parse", "colorjitter=0.4:0.4:0.4:0.1, grayscale=0.2,solarize=128,"
                 "erasing=0.25,blur=5"])
    want = ["colorjitter brightness=0.4 contrast=0.4 saturation=0.4 hue=0.1",
            "grayscale p=0.2", "solarize threshold=128 p=0.5",
            "erasing p=0.25 scale_lo=0.02 scale_hi=0.33 ratio_lo=0.3 ratio_hi=3.3 value=0",
            "blur kernel=5 lo=0.1 hi=2"]
    ctx.check(p.out.split("\n")[:5] == want, "parsed: %r" % p.out)
    ctx.check(ctx.run([tool, "parse", ""]).out == "", "empty string gives steps")
    bad = {
        "invert,fliip": "unknown op 'fliip' at offset 7",
        "colorjitter=0.4:x": "contrast of colorjitter is 'x', not a number",
        "solarize=300": "threshold of solarize is 300, outside [0, 255]",
        "posterize=2.5": "bits must be a whole number",
        "posterize": "posterize needs bits",
        "invert=0.1:0.2": "invert takes at most 1 value",
        "invert,,equalize": "empty op at offset 7",
        "blur=4": "kernel size must be an odd whole number",
        "blur=5:2:1": "sigma range must be 0 < lo <= hi",
        "hue=0.6": "outside [0, 0.5]",
        "erasing=0.5:0.3:0.1": "scale range must be lo <= hi",
        "brightness=nan": "not a number",
        "grayscale=": "p of grayscale is empty",
        "erasing=1:0.02:0.33:0.3:3.3:rand": "'rand', not a number or random",
        ",".join(["invert"] * 17): "more than 16 ops",
    }
    for spec, msg in bad.items():
        p = ctx.run([tool, "parse", spec], expect=2)
        ctx.check(msg in p.out, "%r: %r lacks %r" % (spec, p.out, msg))


def draws(ctx):
    tool = augtool(ctx)
    N = 4000
    p = ctx.run([tool, "draw", "grayscale=0.2,colorjitter=0.4:0.3:0.5:0.1,erasing=0.5",
                 64, 48, 11, 3, N])
    rows = [line.split() for line in p.out.strip().split("\n")]
    ctx.check(len(rows) == 3 * N, "draw rows: %d" % len(rows))
    gray = [r for r in rows if r[1] == "0"]
    cj = [list(map(float, r[3:])) for r in rows if r[1] == "1"]
    er = [(int(r[2]), list(map(float, r[3:]))) for r in rows if r[1] == "2"]
    fg = sum(int(r[2]) for r in gray) / N
    ctx.check(abs(fg - 0.2) < 0.03, "grayscale p=0.2 applied to %.3f" % fg)
    orders = {tuple(int(a) for a in c[:4]) for c in cj}
    ctx.check(len(orders) == 24, "colorjitter orders seen: %d of 24" % len(orders))
    for k, (lo, hi) in enumerate([(0.6, 1.4), (0.7, 1.3), (0.5, 1.5), (-0.1, 0.1)]):
        v = [c[4 + k] for c in cj]
        ctx.check(min(v) >= lo and max(v) <= hi, "factor %d outside [%g, %g]" % (k, lo, hi))
        ctx.check(min(v) < lo + 0.02 * (hi - lo) and max(v) > hi - 0.02 * (hi - lo),
                  "factor %d does not fill [%g, %g]: %g..%g" % (k, lo, hi, min(v), max(v)))
    # uniform, as torch's uniform_ and randperm: KS of each factor against
    # U(lo, hi) and chi-square of the 24 orders, both at the 0.1% level
    for k, (lo, hi) in enumerate([(0.6, 1.4), (0.7, 1.3), (0.5, 1.5), (-0.1, 0.1)]):
        v = sorted((c[4 + k] - lo) / (hi - lo) for c in cj)
        n = len(v)
        d = max(max((i + 1) / n - x, x - i / n) for i, x in enumerate(v))
        ctx.check(d < 1.95 / n ** 0.5, "factor %d: KS D %.4f against U(%g, %g)" % (k, d, lo, hi))
    counts = {}
    for c in cj:
        o = tuple(int(a) for a in c[:4])
        counts[o] = counts.get(o, 0) + 1
    exp = len(cj) / 24
    chi2 = sum((counts.get(o, 0) - exp) ** 2 / exp for o in counts) + exp * (24 - len(counts))
    ctx.check(chi2 < 49.7, "colorjitter orders: chi-square %.1f (23 dof, 0.1%% level 49.7)" % chi2)
    on = [a for o, a in er if o]
    fe = len(on) / N
    ctx.check(abs(fe - 0.5) < 0.04, "erasing p=0.5 applied to %.3f" % fe)
    for a in on:
        top, left, h, w = a[:4]
        ctx.check(0 <= top and top + h <= 48 and 0 <= left and left + w <= 64 and h < 48
                  and w < 64, "erasing box %r outside 64x48" % (a[:4],))
        # rounding h and w moves the area by at most (h + w) / 2 + 1/4 pixels
        ctx.check(0.02 * 3072 - (h + w) / 2 - 1 <= h * w <= 0.33 * 3072 + (h + w) / 2 + 1,
                  "erasing area %g outside scale (0.02, 0.33)" % (h * w))


def chi2_crit(df, z=3.0902):
    """The chi-square distribution's upper 0.1% point (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def chi2_test(ctx, what, observed, expected, n):
    """observed: cell -> count; expected: cell -> probability (torchvision's).
    Cells expected below 5 draws are pooled; a drawn cell torchvision
    cannot draw fails outright."""
    for cell in observed:
        ctx.check(expected.get(cell, 0) > 0, "%s: drew %r, which torchvision never draws" % (what, cell))
    chi2, df, pool_o, pool_e = 0.0, -1, 0, 0.0
    for cell, pr in expected.items():
        e, o = pr * n, observed.get(cell, 0)
        if e < 5:
            pool_o, pool_e = pool_o + o, pool_e + e
            continue
        chi2 += (o - e) ** 2 / e
        df += 1
    if pool_e > 0:
        chi2 += (pool_o - pool_e) ** 2 / pool_e
        df += 1
    crit = chi2_crit(df)
    print("%-44s chi-square %7.1f  df %3d  (0.1%% level %.1f)" % (what, chi2, df, crit))
    ctx.check(chi2 < crit, "%s: chi-square %.1f >= %.1f (df %d)" % (what, chi2, crit, df))


def policy_draws(ctx):
    """The policies' draws against the distributions torchvision's code
    defines (its _AUGMENTATION_SPACE tables, op keys and AutoAugment's
    sub-policies, stored in the golden fixture by the generator): chute's
    magnitude tables equal torchvision's bit for bit; over 20,000 samples
    the op frequencies and the (op, magnitude, sign) frequencies pass a
    chi-square test at the 0.1% level."""
    ctx.need_modules("numpy")
    import numpy as np
    tool = augtool(ctx)
    meta = json.loads(bytes(np.load(GOLDEN)["meta"]).decode())["policy"]
    ids, tables = meta["ids"], meta["tables"]
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    # the tables, bit for bit, for every bin count and size the fixture has
    for key, table in sorted(tables.items()):
        pol, nb, size = key.split("/")
        space = "wide" if pol == "trivialaugment" else "rand"
        got = {}
        for line in ctx.run([tool, "table", space, nb, size, size]).out.strip().split("\n"):
            t = line.split()
            got[t[0]] = (None if t[1] == "none" else [f32(v) for v in t[1:-2]], t[-1] == "1")
        for name, (mags, signed) in table.items():
            want = None if mags is None else [f32(v) for v in mags]
            ctx.check(got[name] == (want, signed), "%s %s: chute %r, torchvision %r"
                      % (key, name, got[name], (want, signed)))
    N = 20000

    def draws(spec, size):
        out = ctx.run([tool, "draw", spec, size, size, 17, 3, N]).out.strip().split("\n")
        rows = [[float(v) for v in line.split()[3:]] for line in out]
        ctx.check(len(rows) == N, "%s: %d draws" % (spec, len(rows)))
        return rows

    def cell(op_id, m):
        return (ids[op_id], abs(f32(m)), str(m).startswith("-") or np.signbit(np.float32(m)))

    def space_cells(table, name, idx_prob):
        """(name, |m|, negative) -> probability, for bins drawn with idx_prob."""
        mags, signed = table[name]
        if mags is None:
            return {(name, 0.0, False): 1.0}
        out = {}
        for i, pr in idx_prob.items():
            for neg in ((False, True) if signed else (False,)):
                c = (name, f32(mags[i]), neg)
                out[c] = out.get(c, 0) + pr * (0.5 if signed else 1.0)
        return out

    # TrivialAugmentWide: an op uniformly of its keys, a bin uniformly, a sign
    table = tables["trivialaugment/31/224"]
    keys = meta["keys"]["trivialaugment"]
    rows = draws("trivialaugment", 224)
    ops, cells = {}, {}
    for r in rows:
        ops[ids[int(r[1])]] = ops.get(ids[int(r[1])], 0) + 1
        c = cell(int(r[1]), r[2])
        cells[c] = cells.get(c, 0) + 1
    chi2_test(ctx, "trivialaugment: op frequencies", ops, {k: 1 / len(keys) for k in keys}, N)
    exp = {}
    for k in keys:
        for c, pr in space_cells(table, k, {i: 1 / 31 for i in range(31)}).items():
            exp[c] = exp.get(c, 0) + pr / len(keys)
    chi2_test(ctx, "trivialaugment: (op, magnitude, sign)", cells, exp, N)

    # RandAugment(2, 9): per op slot, an op uniformly of its keys at bin 9
    table = tables["randaugment/31/176"]
    keys = meta["keys"]["randaugment"]
    rows = draws("randaugment=2:9", 176)
    for slot in range(2):
        cells = {}
        for r in rows:
            ctx.check(int(r[0]) == 2, "randaugment=2:9 drew %d ops" % r[0])
            c = cell(int(r[1 + 2 * slot]), r[2 + 2 * slot])
            cells[c] = cells.get(c, 0) + 1
        exp = {}
        for k in keys:
            for c, pr in space_cells(table, k, {9: 1.0}).items():
                exp[c] = exp.get(c, 0) + pr / len(keys)
        chi2_test(ctx, "randaugment=2:9 op %d: (op, magnitude, sign)" % slot, cells, exp, N)

    # AutoAugment (ImageNet): a sub-policy uniformly; each of its two ops
    # applied with its probability (a slot not applied is Identity here),
    # at its bin of 10
    table = tables["autoaugment/10/224"]
    pols = meta["autoaugment_imagenet"]
    rows = draws("autoaugment", 224)
    for slot in range(2):
        cells, exp = {}, {}
        for r in rows:
            c = cell(int(r[1 + 2 * slot]), r[2 + 2 * slot])
            cells[c] = cells.get(c, 0) + 1
        for sub in pols:
            name, prob, idx = sub[slot]
            skip = ("Identity", 0.0, False)
            exp[skip] = exp.get(skip, 0) + (1 - f32(prob)) / len(pols)
            for c, pr in space_cells(table, name, {idx: 1.0} if idx is not None else {}).items():
                exp[c] = exp.get(c, 0) + pr * f32(prob) / len(pols)
        chi2_test(ctx, "autoaugment op %d: (op, magnitude, sign)" % slot, cells, exp, N)


SPEC = "colorjitter=0.4:0.4:0.4:0.1,grayscale=0.2,solarize=128:0.3,blur=3:0.1:1.5,erasing=0.25"


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def loader(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    import numpy as np
    work = ctx.scratch("loader")
    S = 48
    common = ["--transform", "train", "--size", S, "--batch-size", 16, "--epoch", 1, "--seed", 5]
    f32 = common + ["--dtype", "float32"]
    outs = {}
    for w in (1, 2, 3):
        outs[w] = os.path.join(work, "w%d.bin" % w)
        p = ctx.dump_run(ctx.tree, outs[w], *f32, "--workers", w, "--augment", SPEC)
        ctx.check(T.parse_counts(p.out).get("samples") == 200, "workers %d: %r" % (w, p.out))
    ctx.check(same_file(outs[1], outs[2]), "augment: workers 1 and 2 give different bytes")
    ctx.check(same_file(outs[1], outs[3]), "augment: workers 1 and 3 give different bytes")
    sh = os.path.join(work, "shards.bin")
    ctx.dump_run(ctx.shards, sh, *f32, "--workers", 2, "--augment", SPEC)
    ctx.check(same_file(outs[1], sh), "augment: the tree and its shards differ")
    dc = os.path.join(work, "cache.bin")
    ctx.dump_run(ctx.tree, dc, *f32, "--workers", 3, "--augment", SPEC,
                 "--decoded-cache-bytes", 1 << 30)
    ctx.check(same_file(outs[1], dc), "augment: a decoded cache changes the epoch")
    seed6 = os.path.join(work, "seed6.bin")
    ctx.dump_run(ctx.tree, seed6, *f32, "--workers", 2, "--augment", SPEC, "--seed", 6)
    ctx.check(not same_file(outs[1], seed6), "augment: seeds 5 and 6 give the same epoch")
    # resume: an epoch from batch k on is the tail of the whole epoch
    rec = 8 + 8 + S * S * 3 * 4
    with open(outs[1], "rb") as f:
        whole = f.read()
    for k in (3, 7):
        part = os.path.join(work, "from%d.bin" % k)
        ctx.dump_run(ctx.tree, part, *f32, "--workers", 2, "--augment", SPEC, "--start-batch", k)
        with open(part, "rb") as f:
            ctx.check(f.read() == whole[k * 16 * rec:], "augment: resume from batch %d differs" % k)
    plain = os.path.join(work, "plain.bin")
    ctx.dump_run(ctx.tree, plain, *f32, "--workers", 2)
    ctx.check(not same_file(outs[1], plain), "augment changed nothing")

    # invert=1 (always): exactly 255 - the plain uint8 epoch
    u8p, u8i = os.path.join(work, "u8.bin"), os.path.join(work, "u8inv.bin")
    ctx.dump_run(ctx.tree, u8p, *common, "--dtype", "uint8", "--workers", 2)
    ctx.dump_run(ctx.tree, u8i, *common, "--dtype", "uint8", "--workers", 2, "--augment", "invert=1")
    ia, _, a = ctx.read_dump(u8p, S, "uint8")
    ib, _, b = ctx.read_dump(u8i, S, "uint8")
    ctx.check(np.array_equal(ia, ib), "invert=1: another sample order")
    ctx.check(np.array_equal(b, 255 - a), "invert=1 is not 255 - the plain epoch")
    # ops run in the order written: solarize then posterize, computed here
    # with numpy from the plain epoch, differs from the other order
    for spec, want in (("solarize=100:1,posterize=3:1",
                        np.where(a >= 100, 255 - a, a) & 0xE0),
                       ("posterize=3:1,solarize=100:1",
                        np.where((a & 0xE0) >= 100, 255 - (a & 0xE0), a & 0xE0))):
        out = os.path.join(work, "order.bin")
        ctx.dump_run(ctx.tree, out, *common, "--dtype", "uint8", "--layout", "nchw",
                     "--workers", 2, "--augment", spec)
        _, _, got = ctx.read_dump(out, S, "uint8")
        want_chw = want.reshape(-1, S, S, 3).transpose(0, 3, 1, 2).reshape(got.shape)
        ctx.check(np.array_equal(got, want_chw), "%s (uint8 NCHW) differs from numpy" % spec)

    # a no-op string (invert with p 0): the plain float pass up to uint8 rounding
    nop, era = os.path.join(work, "nop.bin"), os.path.join(work, "erase.bin")
    ctx.dump_run(ctx.tree, nop, *f32, "--workers", 2, "--augment", "invert=0")
    ctx.dump_run(ctx.tree, era, *f32, "--workers", 2, "--augment", "invert=0,erasing=1")
    _, _, fp = ctx.read_dump(plain, S, "float32")
    _, _, fn = ctx.read_dump(nop, S, "float32")
    _, _, fe = ctx.read_dump(era, S, "float32")
    step = 0.5 / 255 / 0.224 + 1e-5  # half a level, the smallest std of the default
    ctx.check(float(np.abs(fp - fn).max()) <= step, "no-op augment moved a value by %g > %g"
              % (float(np.abs(fp - fn).max()), step))
    erased = 0
    for k in range(fn.shape[0]):
        x, y = fn[k].reshape(3, S, S), fe[k].reshape(3, S, S)
        m = (x != y).any(axis=0)
        ctx.check(((y == 0.0) | ~m[None]).all(), "sample %d: erasing wrote a nonzero value" % k)
        if m.any():
            erased += 1
            rows, cols = np.where(m.any(axis=1))[0], np.where(m.any(axis=0))[0]
            box = (rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1)
            ctx.check(box == m.sum(), "sample %d: erased pixels are not a rectangle" % k)
            ctx.check(box <= 0.33 * S * S + S, "sample %d: erased %d pixels" % (k, box))
    ctx.check(erased >= 190, "erasing=1 erased only %d of %d samples" % (erased, fn.shape[0]))

    # value random (torchvision's value="random"): standard normal values in
    # one rectangle per sample, the same for any worker count; refused for uint8
    rnd = "invert=0,erasing=1:0.1:0.33:0.3:3.3:random"
    r1, r3 = os.path.join(work, "rnd1.bin"), os.path.join(work, "rnd3.bin")
    ctx.dump_run(ctx.tree, r1, *f32, "--workers", 1, "--augment", rnd)
    ctx.dump_run(ctx.tree, r3, *f32, "--workers", 3, "--augment", rnd)
    ctx.check(same_file(r1, r3), "erasing random: workers 1 and 3 differ")
    _, _, fr = ctx.read_dump(r1, S, "float32")
    vals = []
    for k in range(fn.shape[0]):
        x, y = fn[k].reshape(3, S, S), fr[k].reshape(3, S, S)
        m = (x != y).any(axis=0)
        if m.any():
            rows, cols = np.where(m.any(axis=1))[0], np.where(m.any(axis=0))[0]
            ctx.check((rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1) == m.sum(),
                      "sample %d: random erasing is not a rectangle" % k)
            vals.append(y[:, m].ravel())
    v = np.concatenate(vals).astype(np.float64)
    ctx.check(v.size > 20000, "random erasing wrote %d values" % v.size)
    # N(0, 1): mean and std within 5 standard errors, 4th moment 3 +- 0.1
    se = 1 / np.sqrt(v.size)
    ctx.check(abs(v.mean()) < 5 * se and abs(v.std() - 1) < 5 * se * 0.71 + 0.002
              and abs((v ** 4).mean() - 3) < 0.1,
              "random erasing: mean %.4f std %.4f m4 %.3f over %d" % (v.mean(), v.std(),
                                                                       (v ** 4).mean(), v.size))
    print("erasing random: %d values, mean %.4f std %.4f m4 %.3f" % (v.size, v.mean(), v.std(),
                                                                     (v ** 4).mean()))
    p = ctx.dump_run(ctx.tree, r1, *common, "--dtype", "uint8", "--augment", rnd, expect=1)
    ctx.check("needs a float dtype" in p.out + p.err, "uint8 + random: %r" % (p.out + p.err))

    # the CLI: a bad string and the refused combinations, named
    for flags, msg in ((["--augment", "invert,fliip"], "unknown op 'fliip' at offset 7"),
                       (["--augment", "invert", "--gpu-decode-share", 50],
                        "not with gpu_decode_share"),
                       (["--augment", "invert", "--transform", "eval",
                         "--decoded-cache-bytes", 1 << 20], "use transform train or no cache")):
        p = ctx.run([ctx.chute, "bench", ctx.tree, "--epochs", 1] + flags, expect=1)
        ctx.check(msg in p.out + p.err, "chute bench %r: %r lacks %r" % (flags, p.err, msg))


def policy_loader(ctx):
    """The policies through the loader: the same seed gives byte-identical
    epochs with 1, 2 and 3 workers (uint8 and float32), resuming from a
    batch gives the epoch's tail, and the recipe changes the pixels;
    rotate=180:1 on uint8 is the plain epoch turned by 180 degrees
    (numpy)."""
    ctx.need_data()
    ctx.need_modules("numpy")
    import numpy as np
    work = ctx.scratch("policy_loader")
    S = 40
    common = ["--transform", "train", "--size", S, "--batch-size", 16, "--epoch", 2, "--seed", 9]
    for spec, dtype in (("trivialaugment,erasing=0.1", "float32"), ("randaugment=2:9", "uint8"),
                        ("autoaugment", "uint8")):
        outs = []
        for w in (1, 2, 3):
            outs.append(os.path.join(work, "w%d.bin" % w))
            p = ctx.dump_run(ctx.tree, outs[-1], *common, "--dtype", dtype, "--workers", w,
                             "--augment", spec)
            ctx.check(T.parse_counts(p.out).get("samples") == 200, "%s workers %d: %r"
                      % (spec, w, p.out))
        ctx.check(same_file(outs[0], outs[1]) and same_file(outs[0], outs[2]),
                  "%s: workers 1, 2, 3 give different bytes" % spec)
        plain = os.path.join(work, "plain.bin")
        ctx.dump_run(ctx.tree, plain, *common, "--dtype", dtype, "--workers", 2,
                     "--augment", "invert=0")
        _, _, a = ctx.read_dump(plain, S, dtype)
        _, _, b = ctx.read_dump(outs[0], S, dtype)
        changed = sum(not np.array_equal(a[k], b[k]) for k in range(a.shape[0]))
        # TrivialAugment leaves a sample alone when it draws Identity (1/14),
        # or an op that changes nothing there
        ctx.check(changed >= 150, "%s changed only %d of %d samples" % (spec, changed, a.shape[0]))
        rec = 8 + 8 + S * S * 3 * (4 if dtype == "float32" else 1)
        with open(outs[0], "rb") as f:
            whole = f.read()
        part = os.path.join(work, "from5.bin")
        ctx.dump_run(ctx.tree, part, *common, "--dtype", dtype, "--workers", 3, "--augment", spec,
                     "--start-batch", 5)
        with open(part, "rb") as f:
            ctx.check(f.read() == whole[5 * 16 * rec:], "%s: resume from batch 5 differs" % spec)
    u8p, u8r = os.path.join(work, "u8.bin"), os.path.join(work, "u8rot.bin")
    ctx.dump_run(ctx.tree, u8p, *common, "--dtype", "uint8", "--workers", 2)
    ctx.dump_run(ctx.tree, u8r, *common, "--dtype", "uint8", "--workers", 2,
                 "--augment", "rotate=180:1")
    _, _, a = ctx.read_dump(u8p, S, "uint8")
    _, _, b = ctx.read_dump(u8r, S, "uint8")
    want = a.reshape(-1, S, S, 3)[:, ::-1, ::-1, :].reshape(a.shape)
    ctx.check(np.array_equal(b, want), "rotate=180:1 is not the plain epoch turned by 180")


if __name__ == "__main__":
    sys.exit(T.main({"golden": golden, "parse": parse, "draws": draws, "loader": loader,
            "policy_draws": policy_draws, "policy_loader": policy_loader}))
