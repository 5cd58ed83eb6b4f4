#!/usr/bin/env python3
"""WAV audio: clips/s of chute against soundfile + torch DataLoader on the
same cores, in one run (issue #12).

    /usr/bin/python3 bench/audio.py [--dir DIR] [--n N] [--rate HZ] [--min-s S] [--max-s S]
                                    [--samples L] [--batch-size B] [--workers W]
                                    [--epochs E] [--tiny]

Data (made once in DIR, default bench/data/audio, by soundfile): N mono
16-bit PCM .wav files of uniformly random 1-10 s at 16 kHz in 10 class
directories (ImageFolder layout).  Every loader takes the train transform's
random window of L frames (default 16000 = 1 s; shorter clips zero-padded
with their real length) and yields (audio float32 (B, L, 1), lengths,
labels):
  chute                     Loader(fields=["audio", "length"], audio_samples=L,
                            workers=W): header + one positional read of the window
  soundfile window + DL     a torch Dataset doing what chute does in Python:
                            soundfile.info for the length, a seeded random start,
                            soundfile.read(start=, frames=L, dtype="float32"), pad;
                            DataLoader(num_workers=W, shuffle=True)
  soundfile whole + DL      the common recipe: soundfile.read of the whole file,
                            then crop/pad with numpy; same DataLoader
Each row runs E timed epochs after one warm-up epoch (page cache warm);
clips/s is their mean; the ratio column is chute / that row.  Timings mean
something only on a quiet machine (the lead runs the figures); --tiny checks
that everything runs in seconds.
"""
import argparse
import os

import numpy as np

from harness import add_common_args, chute_epochs, data_loader, timed


def make_set(d, n, rate, lo, hi):
    import soundfile as sf
    if os.path.isdir(d):
        return d
    tmp = d + ".tmp"
    rs = np.random.RandomState(0)
    for k in range(n):
        c = os.path.join(tmp, "c%d" % (k % 10))
        os.makedirs(c, exist_ok=True)
        frames = int(rs.uniform(lo, hi) * rate)
        x = (rs.randn(frames) * 3000).clip(-32768, 32767).astype(np.int16)
        sf.write(os.path.join(c, "clip%06d.wav" % k), x, rate, subtype="PCM_16")
    os.rename(tmp, d)
    return d


class WavSet:
    """(audio (L, 1) float32, length, label) per clip, through soundfile."""

    def __init__(self, root, L, whole):
        self.L, self.whole = L, whole
        self.files, self.labels = [], []
        for ci, c in enumerate(sorted(os.listdir(root))):
            for f in sorted(os.listdir(os.path.join(root, c))):
                self.files.append(os.path.join(root, c, f))
                self.labels.append(ci)
        self.epoch = 0

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import soundfile as sf
        import torch
        rs = np.random.default_rng((self.epoch, i))
        L = self.L
        if self.whole:
            x, _ = sf.read(self.files[i], dtype="float32", always_2d=True)
            F = len(x)
            s = int(rs.integers(0, F - L + 1)) if F > L else 0
            x = x[s:s + L]
        else:
            F = sf.info(self.files[i]).frames
            s = int(rs.integers(0, F - L + 1)) if F > L else 0
            x, _ = sf.read(self.files[i], start=s, frames=min(L, F), dtype="float32",
                           always_2d=True)
        n = len(x)
        out = np.zeros((L, x.shape[1]), np.float32)
        out[:n] = x
        return torch.from_numpy(out), n, self.labels[i]


def bench(a, root):
    import chute

    ld = chute.Loader(root, batch_size=a.batch_size, workers=a.workers, transform="train",
                      audio_samples=a.samples, audio_rate=a.rate, fields=["audio", "length"],
                      seed=1, as_torch=True)

    rows = [("chute", *timed(chute_epochs(ld), a.epochs))]
    ld.close()
    for name, whole in (("soundfile window + DataLoader", False),
                        ("soundfile whole file + DataLoader", True)):
        ds = WavSet(root, a.samples, whole)
        dl = data_loader(ds, a)

        def it(e, ds=ds, dl=dl):
            # Persistent workers keep their own copy of ds, so their windows
            # repeat from epoch to epoch; what each costs does not change.
            ds.epoch = e
            return dl
        rows.append((name, *timed(it, a.epochs)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "data", "audio"))
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rate", type=int, default=16000)
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--max-s", type=float, default=10.0)
    ap.add_argument("--samples", type=int, default=16000, help="frames per clip (L)")
    add_common_args(ap, 64, "a few dozen clips: checks it runs")
    a = ap.parse_args()
    if a.tiny:
        a.n, a.min_s, a.max_s, a.samples, a.epochs, a.batch_size = 64, 0.1, 0.5, 4000, 1, 16
        a.dir = os.path.join(a.dir, "tiny")
    root = make_set(os.path.join(a.dir, "n%d-%g-%gs-%dHz" % (a.n, a.min_s, a.max_s, a.rate)),
                    a.n, a.rate, a.min_s, a.max_s)
    rows = bench(a, root)
    print("\n| loader | clips/s | warm-up epoch s | chute / this |")
    print("|---|---:|---:|---:|")
    for name, rate, first in rows:
        print("| %s | %.0f | %.2f | %.2fx |" % (name, rate, first, rows[0][1] / rate))
    print("\n%d workers, batch %d, %d timed epochs; %d clips of %g-%g s at %d Hz, 16-bit mono, "
          "window %d frames (train)" % (a.workers, a.batch_size, a.epochs, a.n, a.min_s,
                                         a.max_s, a.rate, a.samples))


if __name__ == "__main__":
    main()
