"""Labels and pixels match torchvision's ImageFolder for the same samples."""
import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

import chute


@pytest.fixture(scope="module")
def folder(tree):
    return torchvision.datasets.ImageFolder(tree)


def test_labels_match_imagefolder_targets(source, folder):
    ld = chute.Loader(source, batch_size=16, size=16, return_indices=True, drop_last=False,
                      seed=11)
    assert list(ld.classes) == folder.classes
    seen = []
    for epoch in (0, 1):
        ld.set_epoch(epoch)
        for _, labels, idx in ld:
            targets = torch.tensor([folder.targets[i] for i in idx.tolist()])
            assert torch.equal(labels, targets)
            seen += idx.tolist()
    assert sorted(seen[: len(folder)]) == list(range(len(folder)))


def test_pixels_match_pil(source, folder):
    """transform='none' at 96x96 against PIL's bilinear (antialiased) resize of
    the same file: the right image, channel order and orientation."""
    ld = chute.Loader(source, batch_size=25, size=96, transform="none", dtype="uint8",
                      shuffle=False, return_indices=True, dct_scale=False, as_torch=False)
    for images, labels, idx in ld:
        images = np.asarray(images).astype(np.int16)
        for k, i in enumerate(np.asarray(idx)):
            ref = Image.open(folder.samples[i][0]).convert("RGB").resize((96, 96), Image.BILINEAR)
            diff = np.abs(images[k] - np.asarray(ref, dtype=np.int16))
            assert diff.mean() < 3.0, (folder.samples[i][0], diff.mean())
            # A different photo is far away: the check would catch a mix-up.
            other = folder.samples[(i + 1) % len(folder)][0]
            ref2 = Image.open(other).convert("RGB").resize((96, 96), Image.BILINEAR)
            assert np.abs(images[k] - np.asarray(ref2, dtype=np.int16)).mean() > 3 * max(
                diff.mean(), 1.0)
