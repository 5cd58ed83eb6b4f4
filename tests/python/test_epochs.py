"""Epochs and iterators of chute.Loader (issues 22.3 and 30.4).

- A second iter(loader) while the first is open supersedes the first: the
  older iterator raises RuntimeError naming why, never a silent
  StopIteration that loses the rest of its epoch.
- A loop without set_epoch gets a new order (and new crops) every epoch, as
  DataLoader(shuffle=True); set_epoch still chooses the epoch exactly, and
  state_dict/load_state_dict keep the advance.
"""
import json

import pytest
import torch

import chute

KW = dict(batch_size=10, size=16, seed=7, return_indices=True)


def order(loader):
    return torch.cat([i for _, _, i in loader]).tolist()


def reference(tree, epoch, **kw):
    """The order of `epoch` from a fresh loader told it explicitly."""
    ld = chute.Loader(tree, **dict(KW, **kw))
    ld.set_epoch(epoch)
    return order(ld)


def test_superseded_iterator_raises_naming_why(tree):
    ld = chute.Loader(tree, **KW)
    it1 = iter(ld)
    next(it1)
    it2 = iter(ld)
    next(it2)
    with pytest.raises(RuntimeError, match=r"superseded by a new iteration .*epoch 1"):
        next(it1)
    # The newer iterator is unaffected and finishes its epoch.
    rest = [i for _, _, i in it2]
    assert len(rest) == len(ld) - 1
    # A finished iterator keeps saying StopIteration, whatever happens later.
    with pytest.raises(StopIteration):
        next(it2)
    next(iter(ld))
    with pytest.raises(StopIteration):
        next(it2)


def test_iterator_that_delivered_its_whole_epoch_just_stops(tree):
    # Every batch taken (but StopIteration not yet seen), then a new loop:
    # nothing was lost, so the old iterator ends normally.
    ld = chute.Loader(tree, **KW)
    it = iter(ld)
    for _ in range(len(ld)):
        next(it)
    next(iter(ld))
    with pytest.raises(StopIteration):
        next(it)


def test_superseded_by_set_epoch_and_load_state_dict(tree):
    ld = chute.Loader(tree, **KW)
    it = iter(ld)
    next(it)
    ld.set_epoch(4)
    with pytest.raises(RuntimeError, match=r"superseded by set_epoch\(4\)"):
        next(it)
    it = iter(ld)
    next(it)
    ld.load_state_dict(ld.state_dict())
    with pytest.raises(RuntimeError, match=r"superseded by load_state_dict"):
        next(it)
    # set_epoch of the epoch already running does not interrupt the loop.
    it = iter(ld)               # epoch 4 again from batch 1: the state's resume point
    next(it)
    left = len(it)
    assert left == len(ld) - 2
    ld.set_epoch(ld.epoch)
    assert len(list(it)) == left


def test_loop_without_set_epoch_gets_a_new_order_per_epoch(tree):
    ld = chute.Loader(tree, **KW)
    orders = [order(ld) for _ in range(3)]
    for o in orders:
        assert sorted(o) == list(range(len(o)))  # each one still exactly once
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0] != orders[2]
    # They are epochs 0, 1, 2: the same as set_epoch(0), (1), (2) on another loader.
    assert orders == [reference(tree, e) for e in range(3)]
    assert ld.epoch == 2


def test_train_crops_change_without_set_epoch(tree):
    # Same order (shuffle=False) but the train crops are drawn per epoch.
    kw = dict(KW, shuffle=False, transform="train")
    ld = chute.Loader(tree, **kw)
    first = next(iter(ld))[0].clone()
    second = next(iter(ld))[0].clone()
    assert not torch.equal(first, second)


def test_set_epoch_is_exact(tree):
    ld = chute.Loader(tree, **KW)
    order(ld)                      # epoch 0
    ld.set_epoch(0)                # chosen again: the very same order
    assert order(ld) == reference(tree, 0)
    ld.set_epoch(5)
    assert order(ld) == reference(tree, 5)
    assert order(ld) == reference(tree, 6)  # and the advance goes on from there
    # A DDP-style loop calling set_epoch every epoch gets exactly that epoch.
    for e in (3, 3, 1):
        ld.set_epoch(e)
        assert order(ld) == reference(tree, e)


def test_ranks_stay_in_step_without_set_epoch(tree):
    # Two ranks running the same loop: every epoch's shares are disjoint and
    # together cover the dataset once, for each epoch (the advance is per
    # rank but counts the same iterations on each).
    r0 = chute.Loader(tree, rank=0, world_size=2, **KW)
    r1 = chute.Loader(tree, rank=1, world_size=2, **KW)
    for _ in range(3):
        a, b = order(r0), order(r1)
        assert sorted(a + b) == list(range(len(a) + len(b)))


def test_resume_keeps_the_advance(tree):
    ld = chute.Loader(tree, **KW)
    full = [order(ld) for _ in range(3)]       # epochs 0, 1, 2 uninterrupted

    first = chute.Loader(tree, **KW)
    order(first)                                # epoch 0 complete
    seen = []
    for _, _, i in first:                       # epoch 1, stopped after 4 batches
        seen.append(i)
        if len(seen) == 4:
            break
    state = json.loads(json.dumps(first.state_dict()))
    assert state["epoch"] == 1

    resumed = chute.Loader(tree, **KW)
    resumed.load_state_dict(state)
    assert torch.cat(seen).tolist() + order(resumed) == full[1]
    assert order(resumed) == full[2]            # and the next loop runs epoch 2

    # A state saved after an epoch's last batch: the next loop is the next epoch.
    done = chute.Loader(tree, **KW)
    order(done)
    again = chute.Loader(tree, **KW)
    again.load_state_dict(done.state_dict())
    assert order(again) == full[1]
