#!/usr/bin/python3
"""How well shuffle="shards" mixes, against the shuffle buffer's size.

    bench/mixing.py [--classes 100] [--per-class 128] [--shard-samples 256]
                    [--buffers 1,16,64,256,1024,4096,16384] [--epochs 3]
                    [--world 1] [--work DIR] [--out FILE]

Not a timing benchmark: it measures the *order* the real loader delivers.
The dataset is the worst case for reading files front to back: an ImageFolder
tree of tiny PNGs (so decoding costs nothing), classes c000..cNNN with
--per-class images each, packed with chute.pack, which writes in tree order,
so every shard holds one or two classes only (WebDataset or chute shards
written by walking a class-sorted tree look like this; imagenet_to_gcs.py,
by contrast, shuffles the training file list with random.seed(0) before it
writes TFRecords, so its shards already hold every class).

For each buffer size the loader runs --epochs epochs with shuffle="shards",
then once more with shuffle="global" as the reference, and reports, averaged
over epochs (and ranks when --world > 1, each rank's own order):

  run      mean length of runs of equal labels in the delivered order
           (a global shuffle over C balanced classes: about C / (C - 1));
  classes  distinct labels per batch of --batch samples (mean);
  rho      Spearman rank correlation between where a sample is delivered and
           where it sits in the shard read order (the same seed's order with
           buffer 1, which the unit permutation does not depend on): 1 means
           the read order survives, 0 what a global shuffle gives.

Writes a markdown table to --out (default: stdout only).
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def make_tree(root, classes, per_class):
    from PIL import Image
    stamp = os.path.join(root, ".stamp")
    want = "%d %d" % (classes, per_class)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    rng = np.random.default_rng(0)
    for c in range(classes):
        d = os.path.join(root, "c%03d" % c)
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            px = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
            Image.fromarray(px).save(os.path.join(d, "%05d.png" % i))
    with open(stamp, "w") as f:
        f.write(want)


def order(chute, path, world, rank, epoch, batch, **kw):
    ld = chute.Loader(path, batch_size=batch, size=8, transform="none", dtype="uint8",
                      return_indices=True, as_torch=False, workers=2, rank=rank,
                      world_size=world, seed=1, **kw)
    ld.set_epoch(epoch)
    idx, lab = [], []
    for _, labels, indices in ld:
        lab.append(np.asarray(labels).copy())
        idx.append(np.asarray(indices).copy())
    ld.close()
    return np.concatenate(idx), np.concatenate(lab)


def metrics(idx, lab, ref_idx, batch):
    runs = 1 + np.count_nonzero(lab[1:] != lab[:-1])
    run_len = len(lab) / runs
    classes = np.mean([len(np.unique(lab[i:i + batch])) for i in range(0, len(lab), batch)])
    # Spearman: positions are already ranks (every index once per rank,
    # except PAD's few repeats, which we drop).
    pos_ref = {int(i): p for p, i in enumerate(ref_idx)}
    a = np.array([pos_ref[int(i)] for i in idx if int(i) in pos_ref], dtype=float)
    b = np.arange(len(a), dtype=float)
    ra = np.argsort(np.argsort(a)).astype(float)
    rho = np.corrcoef(ra, b)[0, 1]
    return run_len, classes, rho


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--per-class", type=int, default=128)
    ap.add_argument("--shard-samples", type=int, default=256,
                    help="about this many samples per shard")
    ap.add_argument("--buffers", default="1,16,64,256,1024,4096,16384")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--work", default=os.path.join(HERE, "data", "mixing"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "build-python", "lib-test"))
    import chute

    tree = os.path.join(a.work, "tree")
    shards = os.path.join(a.work, "shards-%d" % a.shard_samples)
    make_tree(tree, a.classes, a.per_class)
    if not os.path.exists(os.path.join(shards, "chute.manifest")):
        sizes = [os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(tree)
                 for f in fs if f.endswith(".png")]
        rec = (int(np.mean(sizes)) + 63) // 64 * 64 + 64
        chute.pack(tree, shards, shard_size=rec * a.shard_samples, align=64, threads=2)
    n = a.classes * a.per_class
    nshards = sum(1 for f in os.listdir(shards) if f.endswith(".chute"))
    buffers = [int(b) for b in a.buffers.split(",")]
    t0 = time.time()
    rows = []
    for name, kw in ([("shards, buffer %d" % b, dict(shuffle="shards", shuffle_buffer=b))
                      for b in buffers] + [("global", dict(shuffle="global"))]):
        acc = []
        for e in range(a.epochs):
            for r in range(a.world):
                ref, _ = order(chute, shards, a.world, r, e, a.batch, shuffle="shards",
                               shuffle_buffer=1)
                idx, lab = order(chute, shards, a.world, r, e, a.batch, **kw)
                acc.append(metrics(idx, lab, ref, a.batch))
        m = np.mean(np.array(acc), axis=0)
        rows.append((name, m[0], m[1], m[2]))
        print("%-24s run %7.2f  classes/batch %6.1f  rho %+.3f" % (name, *m), flush=True)
    head = ("%d samples, %d classes of %d, class-sorted into %d shards (~%d samples each); "
            "world %d, batch %d, %d epochs averaged; %.0f s"
            % (n, a.classes, a.per_class, nshards, n // max(nshards, 1), a.world, a.batch,
               a.epochs, time.time() - t0))
    md = ["<!-- bench/mixing.py %s -->" % " ".join(sys.argv[1:]), "", head, "",
          "| order | mean label run | classes per batch | Spearman rho vs shard order |",
          "|---|---|---|---|"]
    md += ["| %s | %.2f | %.1f | %+.3f |" % r for r in rows]
    text = "\n".join(md) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
