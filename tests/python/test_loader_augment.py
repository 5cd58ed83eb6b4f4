"""chute.Loader(augment=...) (issue 25): the option reaches the C loader from
Python, draws depend on (seed, epoch, sample) only, and a bad string raises
ValueError naming the token.  The ops' pixels are checked against
torchvision in tests/test_augment.py (ctest augment_*).
"""
import pytest
import torch

import chute

SPEC = "colorjitter=0.4:0.4:0.4:0.1,grayscale=0.2,solarize=128,erasing=0.25"
KW = dict(batch_size=8, size=24, seed=3, return_indices=True, shuffle=True)


def epoch(tree, **kw):
    ld = chute.Loader(tree, **dict(KW, **kw))
    ld.set_epoch(1)
    imgs, idx = [], []
    for x, _, i in ld:
        imgs.append(x.clone())
        idx.append(i.clone())
    return torch.cat(imgs), torch.cat(idx)


def test_same_seed_same_batches_for_any_worker_count(tree):
    a, ia = epoch(tree, augment=SPEC, workers=1)
    b, ib = epoch(tree, augment=SPEC, workers=3)
    assert torch.equal(ia, ib) and torch.equal(a, b)
    plain, _ = epoch(tree, workers=2)
    assert not torch.equal(a, plain)


@pytest.mark.parametrize("spec", ["trivialaugment,erasing=0.1", "randaugment=2:9", "autoaugment"])
def test_policies_same_batches_for_any_worker_count(tree, spec):
    a, ia = epoch(tree, augment=spec, workers=1, size=40)
    b, ib = epoch(tree, augment=spec, workers=3, size=40)
    assert torch.equal(ia, ib) and torch.equal(a, b)
    plain, _ = epoch(tree, workers=2, size=40, augment="invert=0")
    assert not torch.equal(a, plain)


def test_invert_always_is_255_minus_plain(tree):
    plain, ia = epoch(tree, dtype="uint8", workers=2)
    inv, ib = epoch(tree, dtype="uint8", workers=2, augment="invert=1")
    assert torch.equal(ia, ib)
    assert torch.equal(inv, 255 - plain)


@pytest.mark.parametrize("spec,token", [("invert,flipp", "unknown op 'flipp' at offset 7"),
                                        ("solarize=300", "'solarize=300'"),
                                        ("colorjitter=0.4:x", "'x', not a number"),
                                        ("randaugment=2:31",
                                         "magnitude 31 must be below num_magnitude_bins 31"),
                                        ("autoaugment=1", "autoaugment takes at most 0 values")])
def test_bad_string_names_the_token(tree, spec, token):
    with pytest.raises(ValueError, match=token):
        chute.Loader(tree, **dict(KW, augment=spec))
