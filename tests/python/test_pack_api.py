"""chute.pack: tree -> shards, with progress, cancellation, and identical samples."""
import pytest
import torchvision

import chute
from conftest import TREE_IMAGES


def test_pack_round_trip(tree, tmp_path):
    calls = []
    res = chute.pack(tree, str(tmp_path / "s"), shard_size=2 << 20, threads=2,
                     progress=lambda p: calls.append(dict(p)))
    assert res["files"] == TREE_IMAGES and res["skipped"] == 0 and res["classes"] == 3
    assert res["shards"] >= 2 and res["skipped_files"] == []
    assert calls and calls[-1]["files_done"] == calls[-1]["files_total"] == TREE_IMAGES
    ds = chute.Dataset(str(tmp_path / "s"))
    assert ds.kind == "shards" and len(ds) == TREE_IMAGES
    # The shards hold the original files' bytes, in ImageFolder order.
    ref = torchvision.datasets.ImageFolder(tree)
    assert ds.labels() == ref.targets
    for i in range(0, TREE_IMAGES, 13):
        with open(ref.samples[i][0], "rb") as f:
            assert ds.read(i) == f.read()


def test_pack_cancel(tree, tmp_path):
    with pytest.raises(chute.CancelledError):
        chute.pack(tree, str(tmp_path / "c"), progress=lambda p: True)
    with pytest.raises(chute.ChuteError):
        chute.Dataset(str(tmp_path / "c"))


def test_pack_progress_exception_propagates(tree, tmp_path):
    def boom(p):
        raise KeyError("from progress")

    with pytest.raises(KeyError):
        chute.pack(tree, str(tmp_path / "e"), progress=boom)
