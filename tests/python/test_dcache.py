"""The decoded-sample cache (decoded_cache_bytes): it never changes an output
pixel, and its memory stays within the budget.

The reference for every comparison is the same loader without the cache
(decoded_cache_bytes=0), so no expected value comes from the cache itself.
The photos are up to 640 px on a side and the output is 24 or 64 px, so the
train crops use every DCT scale (1/1 .. 1/8) and many crops ask for a scale
other than the cached one: both the hit and the scale-miss path run."""
import hashlib
import os
import shutil

import numpy as np
import pytest

import chute

MiB = 1 << 20


def epochs(source, n=3, **kw):
    """Per epoch, (sha256 of every batch's pixels, labels and indices), and the stats."""
    ld = chute.Loader(source, as_torch=False, return_indices=True, **kw)
    out = []
    for e in range(n):
        ld.set_epoch(e)
        out.append([hashlib.sha256(b"".join(np.from_dlpack(a).tobytes() for a in (x, y, i))).hexdigest()
                    for x, y, i in ld])
    s = ld.stats()
    ld.close()
    return out, s


KW = dict(batch_size=16, workers=2, seed=11)


@pytest.mark.parametrize("transform,size,dtype", [("train", 24, "uint8"), ("train", 64, "float32"),
                                                  ("eval", 24, "float32"), ("eval", 64, "uint8"),
                                                  ("none", 32, "uint8")])
def test_cache_is_bit_identical_over_epochs(source, transform, size, dtype):
    kw = dict(KW, transform=transform, size=size, dtype=dtype)
    ref, rs = epochs(source, **kw)
    got, s = epochs(source, decoded_cache_bytes=512 * MiB, **kw)
    assert got == ref
    assert rs["cache_hits"] == rs["cache_misses"] == rs["cache_bytes"] == 0
    n = s["samples"] // 3
    assert s["cache_entries"] == n  # everything fits 512 MiB
    assert 0 < s["cache_bytes"] <= 512 * MiB
    if transform == "train":
        # Epochs 2 and 3 hit unless the crop wants another DCT scale than the
        # cached one (with 640 px photos and a 24 px output, most do: see the
        # no_dct_scale test for the all-hit case).
        assert s["cache_hits"] > 0 and s["cache_hits"] + s["cache_misses"] == 3 * n
        assert s["read_items"] == s["cache_misses"]
    else:
        assert s["cache_hits"] == 2 * n and s["cache_misses"] == n
        assert s["read_items"] == n and s["decode_items"] == n  # later epochs read nothing


def test_no_dct_scale_train_hits_every_later_sample(tree):
    kw = dict(KW, transform="train", size=24, dct_scale=False)
    ref, _ = epochs(tree, **kw)
    got, s = epochs(tree, decoded_cache_bytes=512 * MiB, **kw)
    assert got == ref
    n = s["samples"] // 3
    assert s["cache_hits"] == 2 * n and s["read_items"] == n


@pytest.mark.parametrize("transform", ["train", "eval"])
def test_partial_budget_is_bit_identical(source, transform):
    kw = dict(KW, transform=transform, size=32, dtype="uint8")
    ref, _ = epochs(source, **kw)
    budget = 8 * MiB  # the photos decode to roughly 60 MiB (train); eval samples are 3 KiB
    if transform == "eval":
        budget = 4096 + 64 * 3200  # the index page and room for about 60 of 150 samples
    got, s = epochs(source, decoded_cache_bytes=budget, **kw)
    assert got == ref
    n = s["samples"] // 3
    assert 0 < s["cache_entries"] < n
    assert s["cache_bytes"] <= budget
    assert s["cache_hits"] > 0 and s["cache_misses"] > n


def test_corrupt_samples_behave_as_without_cache(corrupt_tree):
    """A truncated JPEG: its whole-image decode fails; the reference may still
    decode windows above the damage, or skip it: the cache must do the same."""
    for transform in ("train", "eval"):
        kw = dict(KW, transform=transform, size=24, dtype="uint8")
        ref, rs = epochs(corrupt_tree, **kw)
        got, s = epochs(corrupt_tree, decoded_cache_bytes=256 * MiB, **kw)
        assert got == ref and s["corrupt"] == rs["corrupt"]


def test_truncated_tail_is_decoded_as_without_cache(tree, tmp_path):
    """A baseline JPEG missing its last rows: the reference decodes every crop
    window above the damage, while the cache's whole-image decode fails.  The
    sample must then be made as without the cache, not skipped."""
    from PIL import Image
    out = tmp_path / "t"
    victim = None
    for cls in sorted(os.listdir(tree)):
        os.makedirs(out / cls)
        for f in sorted(os.listdir(os.path.join(tree, cls)))[:4]:
            shutil.copy(os.path.join(tree, cls, f), out / cls / f)
            path = os.path.join(tree, cls, f)
            if victim is None and f.endswith(".jpg"):
                with Image.open(path) as im:
                    if im.mode == "RGB" and not im.info.get("progressive"):
                        victim = path
    assert victim
    with open(victim, "rb") as f:
        data = f.read()
    with open(out / "class00" / "zz_truncated.jpg", "wb") as f:
        f.write(data[: len(data) * 6 // 10])
    kw = dict(KW, batch_size=4, transform="train", size=24, dtype="uint8", scale=(0.01, 0.05))
    ref, rs = epochs(str(out), n=6, **kw)
    got, s = epochs(str(out), n=6, decoded_cache_bytes=64 * MiB, **kw)
    assert rs["corrupt"] < 6  # the reference decoded the truncated file in some epoch
    assert got == ref and s["corrupt"] == rs["corrupt"]


def test_budget_is_validated(tree):
    with pytest.raises(ValueError):
        chute.Loader(tree, decoded_cache_bytes=-1)
    with pytest.raises(ValueError):
        chute.Loader(tree, decoded_cache_bytes=1 << 60)


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_rss_stays_within_ring_plus_budget_over_10_epochs(tree):
    """Resident memory grows by at most the batch ring + the cache budget +
    a fixed allowance (worker scratch: libjpeg and a 640x640 frame per worker,
    the Python copies of one batch), and does not grow after the cache is full."""
    budget, B, S = 12 * MiB, 16, 64
    before = rss()
    ld = chute.Loader(tree, as_torch=False, batch_size=B, size=S, workers=2, seed=3,
                      transform="train", decoded_cache_bytes=budget)
    # The ring: prefetch + max_held slots of B samples (float32 NCHW), labels and
    # indices, each slot rounded up to 2 MiB (loader.c).
    slot = B * S * S * 3 * 4 + 2 * ((B * 8 + 63) // 64 * 64)
    slot = (slot + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
    ring = (ld.prefetch + ld.max_held) * slot
    allowance = 24 * MiB
    peaks = []
    for e in range(10):
        ld.set_epoch(e)
        for x, y in ld:
            pass
        peaks.append(rss())
    s = ld.stats()
    ld.close()
    assert max(peaks) - before <= ring + budget + allowance, (peaks, before, ring)
    assert peaks[-1] - peaks[1] <= 4 * MiB, peaks  # nothing grows once the cache is full
    assert s["cache_bytes"] <= budget
    assert s["cache_bytes"] > budget - 4 * MiB  # the photos need more: it filled up
