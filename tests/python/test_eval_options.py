"""Eval resize options (crop_pct / resize_size, timm's convention) and the
normalization constants' validation, through the Python keyword arguments.

The eval transform is torchvision's Resize(R) + CenterCrop(size) with
R = floor(size / crop_pct): checked against torchvision itself on PIL for
size 299 (R = 341), where the old rule round(size * 256 / 224) = 342
differed, and for an explicit resize_size.
"""
import math

import numpy as np
import pytest

import chute


def _eval_batch(tree, size, **kw):
    ld = chute.Loader(tree, batch_size=12, size=size, transform="eval", dtype="uint8",
                      shuffle=False, drop_last=False, dct_scale=False, as_torch=False,
                      return_indices=True, **kw)
    images, labels, indices = next(iter(ld))
    out = np.array(images, copy=True), np.array(indices, copy=True)
    ld.close()
    return out


def _torchvision_eval(tree, indices, size, resize):
    tv = pytest.importorskip("torchvision")
    from PIL import Image
    import torchvision.transforms as TV
    ds = tv.datasets.ImageFolder(tree)
    tf = TV.Compose([TV.Resize(resize), TV.CenterCrop(size)])
    out = []
    for i in indices:
        with Image.open(ds.samples[int(i)][0]) as im:
            out.append(np.asarray(tf(im.convert("RGB")), dtype=np.float32))
    return np.stack(out)


@pytest.mark.parametrize("size,kw,resize", [
    (299, {}, math.floor(299 / 0.875)),
    (224, {"crop_pct": 0.95}, math.floor(224 / 0.95)),
    (160, {"resize_size": 200}, 200),
])
def test_eval_resize_matches_torchvision(tree, size, kw, resize):
    imgs, idx = _eval_batch(tree, size, **kw)
    ref = _torchvision_eval(tree, idx, size, resize)
    mae = np.abs(imgs.astype(np.float32) - ref).mean(axis=(1, 2, 3))
    # measured: <= 0.2 per image without DCT scaling (rounding only)
    assert mae.max() < 0.3, (mae.max(), resize)


def test_default_crop_pct_is_0875(tree):
    a, _ = _eval_batch(tree, 224)
    b, _ = _eval_batch(tree, 224, crop_pct=0.875)
    c, _ = _eval_batch(tree, 224, resize_size=256)
    assert np.array_equal(a, b) and np.array_equal(a, c)


@pytest.mark.parametrize("kw", [
    {"mean": (float("nan"), 0.5, 0.5)},
    {"mean": (0.5, float("inf"), 0.5)},
    {"std": (0.2, float("inf"), 0.2)},
    {"std": (0.2, float("nan"), 0.2)},
    {"std": (0.2, 0.0, 0.2)},
    {"std": (0.2, 1e-40, 0.2)},          # positive, but 1 / std is not a float
    {"crop_pct": 0.0},
    {"crop_pct": 1.5},
    {"crop_pct": float("nan")},
    {"crop_pct": 0.9, "resize_size": 256},
    {"resize_size": 100},                # below size
    {"resize_size": 70000},
])
def test_bad_eval_and_normalize_options(tree, kw):
    with pytest.raises(ValueError):
        chute.Loader(tree, batch_size=4, size=224, transform="eval", **kw)
