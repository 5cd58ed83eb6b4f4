"""state_dict()/load_state_dict(): a run stopped mid-epoch resumes with exactly
the batches it had not seen, in the same order, with the same pixels."""
import json

import pytest
import torch

import chute

KW = dict(batch_size=10, size=24, transform="train", seed=5, return_indices=True)


def run(loader, epoch=None, limit=None):
    if epoch is not None:
        loader.set_epoch(epoch)
    out = []
    for images, labels, idx in loader:
        out.append((images.clone(), labels.clone(), idx.clone()))
        if limit is not None and len(out) == limit:
            break
    return out


def same(a, b):
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) and torch.equal(x[2], y[2])
        for x, y in zip(a, b))


@pytest.mark.parametrize("stop_after", [0, 4, 14])
def test_resume_mid_epoch_with_other_worker_count(source, stop_after):
    reference = run(chute.Loader(source, workers=2, **KW), epoch=1)
    first = chute.Loader(source, workers=1, **KW)
    seen = run(first, epoch=1, limit=stop_after) if stop_after else []
    if not stop_after:
        first.set_epoch(1)
    state = json.loads(json.dumps(first.state_dict()))  # survives serialisation
    assert state["epoch"] == 1 and state["batches_consumed"] == stop_after
    first.close()

    resumed = chute.Loader(source, workers=2, **KW)
    resumed.load_state_dict(state)
    rest = run(resumed, epoch=1)  # a training loop calls set_epoch(epoch) again
    assert same(seen + rest, reference)
    assert resumed.state_dict()["batches_consumed"] == len(reference)
    # The next epoch is a full, normal one.
    assert same(run(resumed, epoch=2), run(chute.Loader(source, **KW), epoch=2))


def test_resume_after_complete_epoch(tree):
    ld = chute.Loader(tree, **KW)
    run(ld, epoch=3)
    state = ld.state_dict()
    assert state["batches_consumed"] == len(ld)
    other = chute.Loader(tree, **KW)
    other.load_state_dict(state)
    assert run(other, epoch=3) == []  # nothing left of epoch 3
    assert len(run(other, epoch=4)) == len(ld)


def test_resume_state_from_rank0_on_rank1(tree):
    kw = dict(KW, world_size=2)
    reference = run(chute.Loader(tree, rank=1, **kw), epoch=0)
    r0 = chute.Loader(tree, rank=0, **kw)
    run(r0, epoch=0, limit=3)
    r1 = chute.Loader(tree, rank=1, **kw)
    r1.load_state_dict(r0.state_dict())  # checkpoints are usually written by rank 0
    assert same(run(r1, epoch=0), reference[3:])


def test_set_epoch_discards_other_epochs_resume_point(tree):
    ld = chute.Loader(tree, **KW)
    run(ld, epoch=0, limit=2)
    state = ld.state_dict()
    other = chute.Loader(tree, **KW)
    other.load_state_dict(state)
    assert len(run(other, epoch=5)) == len(ld)


def test_mismatched_settings_are_refused(tree):
    state = chute.Loader(tree, **KW).state_dict()
    # (world_size and batch_size may change: test_elastic.py.)
    for change in ({"seed": 6}, {"shuffle": False}, {"remainder": "drop"}, {"drop_last": True}):
        kw = dict(KW)
        kw.update(change)
        with pytest.raises(ValueError):
            chute.Loader(tree, **kw).load_state_dict(state)
    with pytest.raises(ValueError):
        chute.Loader(tree, **KW).load_state_dict({"epoch": 0})
