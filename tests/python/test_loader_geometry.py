"""chute.Loader(geometry=...) (issue 24): the option reaches the C loader
from Python, plans depend on (seed, epoch, sample) only, a certain flip is
the mirror of transform "none", and a bad string raises ValueError naming
the token.  The plan's pixels and targets are checked against torchvision
in tests/test_geometry.py (ctest geometry_*).
"""
import pytest
import torch

import chute

SPEC = "rrc=0.25:1,hflip,rotate=15,zoomout=1:2:0.5"
KW = dict(batch_size=8, size=24, seed=3, return_indices=True, shuffle=True, dtype="uint8",
          layout="nhwc")


def epoch(tree, **kw):
    ld = chute.Loader(tree, **dict(KW, **kw))
    ld.set_epoch(1)
    imgs, idx = [], []
    for x, _, i in ld:
        imgs.append(x.clone())
        idx.append(i.clone())
    return torch.cat(imgs), torch.cat(idx)


def test_same_seed_same_batches_for_any_worker_count(tree):
    a, ia = epoch(tree, geometry=SPEC, workers=1)
    b, ib = epoch(tree, geometry=SPEC, workers=3)
    assert torch.equal(ia, ib) and torch.equal(a, b)
    c, _ = epoch(tree, geometry=SPEC, workers=2, seed=4)
    assert not torch.equal(a, c)


def test_certain_hflip_mirrors_transform_none(tree):
    plain, ia = epoch(tree, transform="none", workers=2)
    flip, ib = epoch(tree, geometry="hflip=1", workers=2)
    assert torch.equal(ia, ib)
    assert torch.equal(flip, plain.flip(2))  # N x H x W x C: mirror W


@pytest.mark.parametrize("spec,token", [("rrc,flipp", "unknown step 'flipp' at offset 4"),
                                        ("rotate=200", "degrees must be in"),
                                        ("affine=10:x", "not a finite number")])
def test_bad_string_names_the_token(tree, spec, token):
    with pytest.raises(ValueError, match=token):
        chute.Loader(tree, **dict(KW, geometry=spec))
