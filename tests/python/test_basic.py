"""Iteration over both source kinds: shapes, dtypes, layouts, lengths, stats."""
import math

import numpy as np
import pytest
import torch

import chute
from conftest import TREE_CLASSES, TREE_IMAGES


def test_version():
    assert chute.__version__ == chute._chute.version()
    parts = chute.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)
    assert issubclass(chute.CorruptDataError, chute.ChuteError)
    assert issubclass(chute.NotFoundError, FileNotFoundError)
    assert issubclass(chute.InvalidArgumentError, ValueError)


def test_dataset(source):
    ds = chute.Dataset(source)
    assert len(ds) == TREE_IMAGES
    assert ds.classes == tuple("class%02d" % c for c in range(TREE_CLASSES))
    assert ds.num_classes == TREE_CLASSES
    assert ds.kind == ("shards" if "shards" in source else "tree")
    labels = ds.labels()
    assert len(labels) == TREE_IMAGES and set(labels) == set(range(TREE_CLASSES))
    assert ds.label(-1) == labels[-1]
    data = ds.read(0)
    assert len(data) == ds.sample_size(0)
    w, h, c = chute.probe_image(data)
    assert w > 0 and h > 0 and c in (1, 3, 4)
    assert isinstance(ds.describe(0), str)
    with pytest.raises(IndexError):
        ds.label(TREE_IMAGES)


@pytest.mark.parametrize("dtype,layout,shape,tdtype", [
    ("float32", "default", (3, 32, 32), torch.float32),
    ("float16", "default", (3, 32, 32), torch.float16),
    ("uint8", "default", (32, 32, 3), torch.uint8),
    ("uint8", "nchw", (3, 32, 32), torch.uint8),
    ("float32", "nhwc", (32, 32, 3), torch.float32),
])
def test_shapes_dtypes_layouts(source, dtype, layout, shape, tdtype):
    # drop_last=True: every batch is full (the default keeps a partial one).
    ld = chute.Loader(source, batch_size=16, size=32, dtype=dtype, layout=layout, workers=2,
                      drop_last=True)
    assert len(ld) == TREE_IMAGES // 16
    n = 0
    for images, labels in ld:
        assert isinstance(images, torch.Tensor)
        assert tuple(images.shape) == (16,) + shape
        assert images.dtype == tdtype
        assert images.is_contiguous()
        assert labels.dtype == torch.int64 and tuple(labels.shape) == (16,)
        assert int(labels.min()) >= 0 and int(labels.max()) < TREE_CLASSES
        n += 1
    assert n == len(ld)


def test_value_ranges(tree):
    u8 = chute.Loader(tree, batch_size=10, size=24, dtype="uint8", transform="eval", shuffle=False)
    raw = chute.Loader(tree, batch_size=10, size=24, dtype="float32", layout="nhwc",
                       transform="eval", shuffle=False, normalize=False)
    norm = chute.Loader(tree, batch_size=10, size=24, dtype="float32", layout="nhwc",
                        transform="eval", shuffle=False, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    for (a, _), (b, _), (c, _) in zip(u8, raw, norm):
        # uint8 is rounded; the float paths are not.
        assert torch.allclose(a.float() / 255, b, atol=0.5 / 255 + 1e-5)
        assert torch.allclose((b - 0.5) / 0.25, c, atol=1e-4)


def test_partial_last_batch(source):
    ld = chute.Loader(source, batch_size=64, size=16, drop_last=False, shuffle=False)
    assert len(ld) == math.ceil(TREE_IMAGES / 64)
    sizes = [len(y) for _, y in ld]
    assert sizes == [64, 64, TREE_IMAGES - 128]
    # The default is drop_last=False (as torch's DataLoader and the C library).
    assert chute.Loader(source, batch_size=64, size=16).num_samples == TREE_IMAGES
    assert chute.Loader(source, batch_size=64, size=16, drop_last=True).num_samples == 128


def test_shuffle_and_epochs(tree):
    ld = chute.Loader(tree, batch_size=50, size=16, return_indices=True, seed=3)
    orders = []
    for epoch in (0, 1, 0):
        ld.set_epoch(epoch)
        orders.append(torch.cat([i for _, _, i in ld]).tolist())
    assert sorted(orders[0]) == list(range(TREE_IMAGES))
    assert orders[0] != orders[1]
    assert orders[0] == orders[2]
    # Without set_epoch the next loop runs the next epoch (here 1 again, after 0),
    # as DataLoader(shuffle=True) reshuffles; test_epochs.py has the rest.
    again = torch.cat([i for _, _, i in ld]).tolist()
    assert again == orders[1]
    other_seed = chute.Loader(tree, batch_size=50, size=16, return_indices=True, seed=4)
    assert torch.cat([i for _, _, i in other_seed]).tolist() != orders[0]
    ordered = chute.Loader(tree, batch_size=50, size=16, return_indices=True, shuffle=False)
    assert torch.cat([i for _, _, i in ordered]).tolist() == list(range(TREE_IMAGES))


def test_numpy_output_without_torch(source):
    ld = chute.Loader(source, batch_size=8, size=20, dtype="uint8", as_torch=False)
    images, labels = next(iter(ld))
    assert isinstance(images, chute.Array)
    assert images.shape == (8, 20, 20, 3) and images.dtype == "uint8"
    a = np.asarray(images)
    assert a.shape == (8, 20, 20, 3) and a.dtype == np.uint8
    assert np.asarray(labels).dtype == np.int64
    assert labels.tolist() == np.asarray(labels).tolist()
    assert images.numpy().ctypes.data == images.data_ptr


def test_dtype_objects(tree):
    for d in (torch.float16, np.float16, np.dtype("float16"), "half"):
        assert chute.Loader(tree, batch_size=4, size=8, dtype=d).dtype == "float16"


def test_train_transform_is_deterministic(tree):
    def run(workers):
        ld = chute.Loader(tree, batch_size=25, size=48, transform="train", seed=9, workers=workers)
        ld.set_epoch(2)
        return [x.clone() for x, _ in ld]

    a, b = run(1), run(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_stats(tree):
    ld = chute.Loader(tree, batch_size=16, size=32, drop_last=True)
    for _ in ld:
        pass
    s = ld.stats()
    for key in ("images_per_sec", "bytes_read", "read_busy_s", "decode_busy_s", "transform_busy_s",
                "wait_s", "queue_fill_avg", "corrupt", "batches", "samples", "workers", "wall_s",
                "copied_batches"):
        assert key in s, key
    assert s["batches"] == len(ld) and s["samples"] == len(ld) * 16
    assert s["bytes_read"] > 0 and s["decode_busy_s"] > 0 and s["images_per_sec"] > 0
    assert s["corrupt"] == 0


def test_iterator_len_and_restart(tree):
    ld = chute.Loader(tree, batch_size=16, size=16, return_indices=True)
    it = iter(ld)
    assert len(it) == len(ld)
    first = next(it)[2].tolist()
    assert len(it) == len(ld) - 1
    ld.set_epoch(0)
    it2 = iter(ld)  # restarts epoch 0; the old iterator is superseded and says so
    with pytest.raises(RuntimeError, match="superseded"):
        next(it)
    assert next(it2)[2].tolist() == first


def test_help_reads_well():
    doc = chute.Loader.__doc__
    for word in ("batch_size", "transform", "rank", "max_held", "hold_policy", "state_dict"):
        assert word in doc
    assert "batch" in chute.Array.__doc__ and chute.pack.__doc__


def test_context_manager_and_close(tree):
    with chute.Loader(tree, batch_size=16, size=16) as ld:
        x, _ = next(iter(ld))
    assert ld.closed
    with pytest.raises(RuntimeError):
        next(iter(ld))
    assert x.sum().item() == x.clone().sum().item()  # still readable after close
