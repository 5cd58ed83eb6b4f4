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


def test_pack_summary_separates_limits_from_undecodable(corrupt_tree, tmp_path):
    # corrupt_tree has one truncated and one garbage JPEG; a limit just under
    # the largest file's size makes that one "over the limit" instead.
    import os
    files = [os.path.join(r, f) for r, _, fs in os.walk(corrupt_tree) for f in fs]
    big = max(files, key=os.path.getsize)
    res = chute.pack(corrupt_tree, str(tmp_path / "s"), max_sample_bytes=os.path.getsize(big) - 1)
    assert res["skipped"] == 3 and res["skipped_over_limit"] == 1
    assert res["files"] == len(files) - 3 and res["already_packed"] is False
    assert any(p == big and "limit" in why for p, why in res["skipped_files"])


def test_pack_no_wait_fails_while_another_pack_holds_out_dir(tree, tmp_path):
    import fcntl
    import os
    out = tmp_path / "locked"
    out.mkdir()
    fd = os.open(str(out / "chute.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(chute.ChuteError, match="another process"):
            chute.pack(tree, str(out), wait=False)
        assert sorted(os.listdir(str(out))) == ["chute.lock"]
    finally:
        os.close(fd)
    res = chute.pack(tree, str(out), threads=2)
    assert res["files"] == TREE_IMAGES and not os.path.exists(str(out / "chute.lock"))


def test_pack_max_side_and_raw_kwargs(tree, tmp_path):
    """max_side/quality/raw reach chute_pack: Pillow reads the records at the
    requested size (torchvision's Resize arithmetic), the manifest records
    the options, and out-of-range values raise before anything is packed."""
    import io
    import struct
    from PIL import Image
    import torchvision.transforms as TV
    ref = torchvision.datasets.ImageFolder(tree)
    res = chute.pack(tree, str(tmp_path / "m"), threads=2, max_side=96, quality=80)
    assert res["files"] == TREE_IMAGES
    with open(tmp_path / "m" / "chute.manifest") as f:
        assert f.read().splitlines()[:2] == ["chute-dataset 2", "pack max_side=96 quality=80 raw=0"]
    res = chute.pack(tree, str(tmp_path / "r"), threads=2, max_side=96, raw=True)
    with open(tmp_path / "r" / "chute.manifest") as f:
        assert f.read().splitlines()[1] == "pack max_side=96 quality=0 raw=1"
    dm, dr = chute.Dataset(str(tmp_path / "m")), chute.Dataset(str(tmp_path / "r"))
    for i in range(0, TREE_IMAGES, 7):
        orig = Image.open(ref.samples[i][0]).convert("RGB")
        want = TV.Resize(96)(orig).size if min(orig.size) > 96 else orig.size
        rec = dr.read(i)
        assert rec[:5] == b"CHRAW" and struct.unpack_from("<II", rec, 8) == want
        blob = dm.read(i)
        assert Image.open(io.BytesIO(blob)).size == want
        if min(orig.size) <= 96:
            with open(ref.samples[i][0], "rb") as f:
                assert blob == f.read()
    for bad in ({"quality": 0}, {"quality": 101}, {"max_side": 0}, {"max_side": 70000}):
        with pytest.raises(ValueError):
            chute.pack(tree, str(tmp_path / "bad"), **{"max_side": 64, **bad})


def test_pack_threads_bound_is_the_clis(tree, tmp_path):
    """threads has one bound in every layer: `chute pack --threads` takes
    1..256, so chute.pack takes 256 and refuses 257 naming the option
    (before: Python took up to 4096 and C quietly used 256)."""
    res = chute.pack(tree, str(tmp_path / "ok"), threads=256)
    assert res["files"] == TREE_IMAGES
    with pytest.raises(ValueError, match=r"threads must be in 1\.\.256, got 257"):
        chute.pack(tree, str(tmp_path / "no"), threads=257)
    assert not (tmp_path / "no").exists()
