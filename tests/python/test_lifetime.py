"""A batch's memory stays valid while any tensor made from it is alive, and
is never overwritten by later batches; it returns to the ring when freed."""
import gc
import warnings

import numpy as np
import pytest
import torch

import chute


def _hold_and_check(ld, hold, total):
    """Keep `hold` batches alive while `total` more pass through the ring;
    held tensors must still equal the copies made when they arrived."""
    kept = []
    seen = 0
    for epoch in range(100):
        ld.set_epoch(epoch)
        for images, labels in ld:
            if len(kept) < hold:
                kept.append((images, labels, images.clone(), labels.clone()))
            seen += 1
            if seen >= total:
                break
        if seen >= total:
            break
    for images, labels, images0, labels0 in kept:
        assert torch.equal(images, images0)
        assert torch.equal(labels, labels0)
    return kept


def test_hold_three_batches_zero_copy_across_ring_reuse(tree):
    # 3 kept + the loop variable's batch + the new one = 5 alive at most;
    # prefetch 2 + max_held 5 (+1 spare) = 8 slots; 40 batches cycle through them.
    ld = chute.Loader(tree, batch_size=10, size=32, transform="train", prefetch=2, max_held=5)
    kept = _hold_and_check(ld, hold=3, total=40)
    s = ld.stats()
    assert s["copied_batches"] == 0
    assert s["batches"] >= 40
    ptrs = {k[0].data_ptr() for k in kept}
    assert len(ptrs) == 3  # three distinct ring slots, all still pinned


def test_holding_more_than_max_held_copies(tree):
    ld = chute.Loader(tree, batch_size=10, size=32, prefetch=2, max_held=2)
    assert ld.max_held == 2
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        everything = [(x, x.clone()) for x, _ in ld]  # hold the whole epoch
    assert any(issubclass(x.category, ResourceWarning) for x in w)
    assert len(everything) == len(ld)
    for x, x0 in everything:
        assert torch.equal(x, x0)
    s = ld.stats()
    assert s["copied_batches"] == len(ld) - 2
    del everything
    gc.collect()
    assert ld.stats()["held_batches"] == 0
    # After releasing, batches are zero-copy again.
    b = ld.next_batch()
    assert not b.copied


def test_hold_policy_raise(tree):
    ld = chute.Loader(tree, batch_size=10, size=32, max_held=2, hold_policy="raise")
    it = iter(ld)
    a, b = next(it), next(it)
    with pytest.raises(chute.BusyError) as e:
        next(it)
    assert "max_held" in str(e.value)
    del a
    gc.collect()
    c = next(it)  # one slot came back
    assert c[0].shape[0] == 10 and b[0].shape[0] == 10


def test_reference_cycles_are_collected_before_busy(tree):
    ld = chute.Loader(tree, batch_size=10, size=16, max_held=1, hold_policy="raise")
    it = iter(ld)
    x, _ = next(it)
    cycle = [x]
    cycle.append(cycle)  # only the cycle collector can free x now
    del x, _, cycle
    x2, _ = next(it)  # the binding runs gc once before raising BusyError
    assert x2.shape[0] == 10


def test_tensor_outlives_loader(tree):
    ld = chute.Loader(tree, batch_size=10, size=32, as_torch=True)
    images, labels = next(iter(ld))
    images0 = images.clone()
    arr = ld.next_batch()
    view = np.asarray(arr.images)
    view0 = view.copy()
    ld.close()
    del ld, arr
    gc.collect()
    assert torch.equal(images, images0)  # memory still mapped and unchanged
    assert np.array_equal(view, view0)
    del images, view
    gc.collect()


def test_release_returns_slots(tree):
    ld = chute.Loader(tree, batch_size=10, size=16, max_held=2, hold_policy="raise")
    # Many epochs holding nothing across iterations never hits the limit.
    for epoch in range(5):
        ld.set_epoch(epoch)
        for images, labels in ld:
            pass
        del images, labels
    assert ld.stats()["held_batches"] == 0
    assert ld.stats()["copied_batches"] == 0


def test_tensor_freed_on_another_thread(tree):
    import threading

    ld = chute.Loader(tree, batch_size=10, size=16, max_held=2, hold_policy="raise")
    for epoch in range(3):
        ld.set_epoch(epoch)
        for images, labels in ld:
            box = [images, labels]
            th = threading.Thread(target=box.clear)
            del images, labels
            th.start()
            th.join()
    assert ld.stats()["held_batches"] == 0
