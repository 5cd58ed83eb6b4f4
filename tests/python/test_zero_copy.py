"""Batches reach PyTorch and NumPy without a copy: the tensors' memory is the library's buffer."""
import gc

import numpy as np
import pytest
import torch

import chute


def test_torch_from_dlpack_shares_the_buffer(source):
    ld = chute.Loader(source, batch_size=16, size=32, as_torch=False)
    b = ld.next_batch()
    assert not b.copied
    t = torch.from_dlpack(b.images)
    assert t.data_ptr() == b.images.data_ptr == b.data_ptr
    assert t.numel() * t.element_size() == b.nbytes == b.images.nbytes
    lab = torch.from_dlpack(b.labels)
    idx = torch.from_dlpack(b.indices)
    assert lab.dtype == torch.int64 and idx.dtype == torch.int64
    assert lab.data_ptr() == b.labels.data_ptr
    # Same memory: a write through the tensor shows through the Array.
    t[0, 0, 0, 0] = 123.0
    assert np.asarray(b.images)[0, 0, 0, 0] == 123.0


def test_numpy_paths_share_the_buffer(source):
    ld = chute.Loader(source, batch_size=8, size=16, dtype="uint8", as_torch=False)
    b = ld.next_batch()
    img = b.images
    via_interface = np.asarray(img)
    via_dlpack = np.from_dlpack(img)
    via_buffer = np.frombuffer(memoryview(img), dtype=np.uint8).reshape(img.shape)
    for a in (via_interface, via_dlpack, via_buffer):
        assert a.ctypes.data == img.data_ptr
        assert a.shape == (8, 16, 16, 3)
    assert img.__array_interface__["typestr"] == "|u1"
    assert memoryview(img).format == "B" and memoryview(img).shape == (8, 16, 16, 3)
    assert np.asarray(b.labels).ctypes.data == b.labels.data_ptr


def test_float16_dlpack(tree):
    ld = chute.Loader(tree, batch_size=4, size=8, dtype="float16", as_torch=False)
    b = ld.next_batch()
    t = torch.from_dlpack(b.images)
    assert t.dtype == torch.float16 and t.data_ptr() == b.data_ptr
    assert np.from_dlpack(b.images).dtype == np.float16
    assert memoryview(b.images).format == "e"
    assert b.labels.tolist() == np.asarray(b.labels).tolist()


def test_iteration_tensors_lie_in_the_ring(tree):
    """Tensors yielded by iteration point into ring slots (the addresses the
    library hands out), never into a copy."""
    ld = chute.Loader(tree, batch_size=10, size=24, prefetch=2, max_held=2)
    ring_addresses = set()
    raw = ld.next_batch()  # learn the slot addresses through the raw API
    ring_addresses.add(raw.data_ptr)
    del raw
    for epoch in range(3):
        ld.set_epoch(epoch)
        for images, labels in ld:
            ring_addresses.add(images.data_ptr())
    slots = ld.prefetch + ld.max_held + 1
    assert len(ring_addresses) <= slots
    assert ld.stats()["copied_batches"] == 0


def test_dlpack_protocol_details(tree):
    ld = chute.Loader(tree, batch_size=4, size=8, as_torch=False)
    b = ld.next_batch()
    assert b.images.__dlpack_device__() == (1, 0)
    cap = b.images.__dlpack__()
    assert "dltensor" in repr(cap)
    vcap = b.images.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(vcap)
    del cap, vcap  # unconsumed capsules release their reference
    copy = torch.from_dlpack(b.images.__dlpack__(copy=True))
    assert copy.data_ptr() != b.data_ptr
    assert torch.equal(copy, torch.from_dlpack(b.images))
    with pytest.raises(BufferError):
        b.images.__dlpack__(dl_device=(2, 0))
    del b
    gc.collect()
    assert ld.stats()["held_batches"] == 0
