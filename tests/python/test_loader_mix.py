"""chute.Loader(mixup=..., cutmix=..., num_classes=..., repeats=...) (issue
25): the options reach the C loader from Python, the label tensor becomes
float32 soft labels (N, num_classes), draws depend on (seed, epoch, batch
position) only, a batch copied out of the ring keeps its soft labels, and
refused combinations raise ValueError.  Pixels and draws are checked against
torchvision in tests/test_mix.py (ctest mix_*).
"""
import warnings

import pytest
import torch

import chute

KW = dict(batch_size=8, size=24, seed=3, return_indices=True, shuffle=True)


def epoch(tree, keep=False, **kw):
    ld = chute.Loader(tree, **dict(KW, **kw))
    ld.set_epoch(1)
    imgs, labs, idx, held = [], [], [], []
    for x, y, i in ld:
        imgs.append(x.clone())
        labs.append(y.clone())
        idx.append(i.clone())
        if keep:
            held.append((x, y))  # past max_held: later batches are copied out of the ring
    return torch.cat(imgs), torch.cat(labs), torch.cat(idx)


def test_soft_labels_replace_labels_and_do_not_depend_on_workers(tree):
    classes = chute.Dataset(tree).num_classes
    a, la, ia = epoch(tree, mixup=0.8, cutmix=1.0, workers=1)
    b, lb, ib = epoch(tree, mixup=0.8, cutmix=1.0, workers=3)
    assert la.dtype == torch.float32 and la.shape == (ia.numel(), classes)
    assert torch.equal(ia, ib) and torch.equal(a, b) and torch.equal(la, lb)
    assert torch.allclose(la.sum(dim=1), torch.ones(ia.numel()), atol=1e-6)
    plain, lp, ip = epoch(tree, workers=2)
    assert torch.equal(ip, ia) and not torch.equal(plain, a)
    assert lp.dtype == torch.int64
    # every row mixes the sample's own label with its batch partner's
    own = torch.nn.functional.one_hot(lp, classes).bool()
    assert int((la > 0).sum(dim=1).max()) <= 2
    assert float((la[own] > 0).float().mean()) > 0.99  # 0 only for a box that covers all


def test_copied_batches_keep_their_soft_labels(tree):
    _, la, _ = epoch(tree, cutmix=1.0, workers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        _, lc, _ = epoch(tree, keep=True, cutmix=1.0, workers=2, max_held=1)
    assert torch.equal(la, lc)


def test_num_classes_sets_the_width(tree):
    _, la, _ = epoch(tree, mixup=0.2, num_classes=7, workers=2)
    assert la.shape[1] == 7 and torch.equal(la[:, 3:], torch.zeros_like(la[:, 3:]))


@pytest.mark.parametrize("kw,msg", [
    (dict(mixup=0.2, dtype="uint8"), "mixup: needs a float dtype"),
    (dict(mixup=-0.2), "mixup = -0.2 must be finite, > 0"),
    (dict(cutmix=1.0, mix_switch=2.0), "mix_switch = 2 must be finite"),
    (dict(repeats=2, shuffle="shards"), "repeats: not with shuffle shards"),
])
def test_refused(tree, kw, msg):
    with pytest.raises(ValueError, match=msg):
        chute.Loader(tree, **dict(KW, **kw))


def test_cutmix_on_uint8(tree):
    x, la, _ = epoch(tree, cutmix=1.0, dtype="uint8", workers=2)
    assert x.dtype == torch.uint8 and la.dtype == torch.float32


def test_repeats_deliver_each_sample_k_times(tree):
    _, _, i1 = epoch(tree, workers=2)
    x3, _, i3 = epoch(tree, repeats=3, workers=2)
    ld = chute.Loader(tree, **dict(KW, repeats=3))
    assert len(ld) == -(-3 * i1.numel() // KW["batch_size"])
    assert torch.equal(torch.bincount(i3), 3 * torch.bincount(i1))
    # consecutive copies of one sample get different crops
    assert torch.equal(i3[0::3], i3[1::3]) and not torch.equal(x3[0::3], x3[1::3])
