#!/usr/bin/env python3
"""exactly_once_across_ranks: the epoch split over ranks, end to end.

On a 101-image tree (101 is prime, so every world size 2..4 leaves a
remainder), for world sizes 1..4, PAD and DROP, epochs 0 and 1, dump every
rank's epoch and check:
  - all ranks deliver the same number of samples and of batches;
  - PAD: every index at least once; total = ceil(n/w)*w; the extra ones
    are exactly the head of the epoch's order repeated (nothing else
    duplicated); DROP: no duplicates, total = floor(n/w)*w;
  - interleaving the ranks (global position r + k*w) gives the same
    epoch order for every world size;
  - epochs 0 and 1 differ; labels match the dataset's.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chute_testlib as T  # noqa: E402

N = 101
BATCH = 10


def ranks(ctx):
    ctx.need_data()
    ctx.need_modules("numpy")
    work = ctx.scratch("ranks")
    tree = os.path.join(work, "tree")
    # img00000 .. img00100: 101 files spread over the 3 classes.
    T.link_tree(ctx.tree, tree, lambda rel: int(os.path.basename(rel)[3:8]) < N)
    info = ctx.dsinfo_run(tree)
    ctx.check(info.get("n") == N, "subtree has %s samples, want %d" % (info.get("n"), N))
    labels = {i: lab for (i, lab, _, _) in info["samples"]}

    orders = {}  # (epoch) -> the epoch's order as seen by world size 1
    for epoch in (0, 1):
        for drop in (False, True):
            for world in (1, 2, 3, 4):
                per_rank, nbatches = [], []
                for rank in range(world):
                    out = os.path.join(work, "e%d_w%d_r%d_%s.bin" % (epoch, world, rank, drop))
                    opts = ["--transform", "none", "--dtype", "uint8", "--size", 8,
                            "--batch-size", BATCH, "--workers", 2, "--seed", 5, "--epoch", epoch,
                            "--rank", rank, "--world", world]
                    if drop:
                        opts.append("--remainder-drop")
                    p = ctx.dump_run(tree, out, *opts)
                    c = T.parse_counts(p.out)
                    idx, lab, _ = ctx.read_dump(out, 8)
                    ctx.check(c.get("samples") == len(idx) and c.get("corrupt") == 0,
                              "w%d r%d: dump says %r, file has %d records" % (world, rank, p.out, len(idx)))
                    for i, l in zip(idx.tolist(), lab.tolist()):
                        if labels.get(i) != l:
                            ctx.check(False, "w%d r%d: sample %d has label %d, dataset says %s"
                                      % (world, rank, i, l, labels.get(i)))
                            break
                    per_rank.append(idx.tolist())
                    nbatches.append(c.get("batches"))
                tag = "epoch %d world %d %s" % (epoch, world, "DROP" if drop else "PAD")
                sizes = [len(x) for x in per_rank]
                want = N // world if drop else -(-N // world)
                ctx.check(all(s == want for s in sizes),
                          "%s: ranks deliver %s samples, want %d each" % (tag, sizes, want))
                ctx.check(len(set(nbatches)) == 1,
                          "%s: ranks have different batch counts %s" % (tag, nbatches))
                # Interleave: global position g = r + k*world.
                seq = [None] * (want * world)
                for r, xs in enumerate(per_rank):
                    for k, v in enumerate(xs[:want]):
                        seq[r + k * world] = v
                if drop:
                    ctx.check(len(set(seq)) == len(seq), "%s: duplicates delivered" % tag)
                    ctx.check(len(seq) == N // world * world, "%s: total %d" % (tag, len(seq)))
                else:
                    ctx.check(sorted(set(seq)) == list(range(N)),
                              "%s: %d of %d samples never delivered"
                              % (tag, N - len(set(seq) - {None}), N))
                    extra = len(seq) - N
                    ctx.check(seq[N:] == seq[:extra],
                              "%s: the %d padding samples are not the head of the epoch repeated"
                              % (tag, extra))
                    ctx.check(sorted(seq[:N]) == list(range(N)),
                              "%s: duplicates inside the epoch proper" % tag)
                base = orders.setdefault(epoch, seq[:N] if world == 1 else None)
                if base is not None:
                    ctx.check(seq[: len(seq) if drop else N] == base[: len(seq) if drop else N],
                              "%s: epoch order differs from world size 1" % tag)
    ctx.check(orders.get(0) and orders.get(1) and orders[0] != orders[1],
              "epochs 0 and 1 have the same order")
    ctx.check(orders.get(0) != list(range(N)), "epoch 0 is not shuffled")


if __name__ == "__main__":
    sys.exit(T.main({"ranks": ranks}))
