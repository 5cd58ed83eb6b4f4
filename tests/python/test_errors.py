"""Library errors become chute.ChuteError subclasses carrying the library's message."""
import os

import pytest

import chute


def test_missing_path():
    with pytest.raises(chute.NotFoundError) as e:
        chute.Loader("/nonexistent/chute-data")
    assert "/nonexistent/chute-data" in str(e.value)
    assert e.value.code == -7 and e.value.status == "CHUTE_ENOTFOUND"
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, chute.ChuteError)


def test_empty_and_wrong_sources(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(chute.ChuteError):
        chute.Dataset(str(empty))
    f = tmp_path / "file.txt"
    f.write_text("not a dataset")
    with pytest.raises(chute.ChuteError):
        chute.Dataset(str(f))
    with pytest.raises(chute.ChuteError):
        chute.Dataset(str(empty), 2)  # shards requested, no manifest


@pytest.mark.parametrize("kw,exc", [
    ({"batch_size": 0}, ValueError),
    ({"batch_size": -1}, ValueError),
    ({"size": 0}, ValueError),
    ({"workers": 0}, ValueError),
    ({"transform": "random"}, ValueError),
    ({"dtype": "int32"}, ValueError),
    ({"layout": "chw"}, ValueError),
    ({"on_corrupt": "ignore"}, ValueError),
    ({"hold_policy": "wait"}, ValueError),
    ({"rank": 2, "world_size": 2}, ValueError),
    ({"normalize": False, "mean": (0.5, 0.5, 0.5)}, ValueError),
    ({"std": (0.2, 0.0, 0.2)}, ValueError),
    ({"mean": (0.5, 0.5)}, ValueError),
    ({"scale": (0.5, 0.2)}, ValueError),
    ({"max_held": 0}, ValueError),
    ({"prefetch": 65}, ValueError),
    ({"batch_size": "8"}, TypeError),
])
def test_bad_options(tree, kw, exc):
    with pytest.raises(exc):
        chute.Loader(tree, **kw)


def test_corrupt_fail_names_the_file(corrupt_tree):
    ld = chute.Loader(corrupt_tree, batch_size=8, size=16, on_corrupt="fail", shuffle=False,
                      drop_last=False)
    with pytest.raises(chute.CorruptDataError) as e:
        for _ in ld:
            pass
    msg = str(e.value)
    assert "truncated.jpg" in msg or "garbage.jpg" in msg
    assert e.value.status == "CHUTE_ECORRUPT"
    # The failed epoch is over; the next one can be started.
    ld.set_epoch(1)
    with pytest.raises(chute.CorruptDataError):
        for _ in ld:
            pass


def test_corrupt_skip_counts_and_continues(corrupt_tree):
    ld = chute.Loader(corrupt_tree, batch_size=8, size=16, on_corrupt="skip", drop_last=False,
                      return_indices=True)
    ds = ld.dataset
    bad = {i for i in range(len(ds)) if os.path.basename(ds.describe(i)) in ("truncated.jpg",
                                                                             "garbage.jpg")}
    assert len(bad) == 2
    with pytest.warns(chute.SkippedSamplesWarning) as rec:
        got = [i for _, _, idx in ld for i in idx.tolist()]
    assert len(got) == 32 and not bad & set(got)  # full batches, no corrupt sample delivered
    s = ld.stats()
    assert s["corrupt"] >= 2 and s["io_retries"] == 0
    # The message names a skipped file together with that file's own reason.
    msg = ld._core.errmsg()
    assert msg.startswith("skipped "), msg
    if "truncated.jpg" in msg:
        assert "truncated.jpg: JPEG" in msg, msg
    else:
        assert "garbage.jpg: not a JPEG, PNG, BMP or CHRAW" in msg, msg
    warned = [str(w.message) for w in rec if issubclass(w.category, chute.SkippedSamplesWarning)]
    assert len(warned) == 1 and "%d samples" % s["corrupt"] in warned[0], warned


def test_corrupt_shard_record(corrupt_tree, tmp_path):
    out = str(tmp_path / "shards")
    res = chute.pack(corrupt_tree, out)
    assert res["skipped"] == 2 and res["files"] == 30
    assert sorted(os.path.basename(p) for p, _ in res["skipped_files"]) == ["garbage.jpg",
                                                                          "truncated.jpg"]
    ds = chute.Dataset(out)
    shard = os.path.join(out, "shard-00000.chute")
    where = ds.describe(5)
    offset = int(where.split("@")[1].split()[0])
    with open(shard, "r+b") as f:  # flip bytes inside sample 5's record
        f.seek(offset + 100)
        b = f.read(16)
        f.seek(offset + 100)
        f.write(bytes(x ^ 0xFF for x in b))
    with pytest.raises(chute.CorruptDataError):
        chute.Dataset(out).read(5)
    ld = chute.Loader(out, batch_size=10, size=16, on_corrupt="fail", shuffle=False)
    with pytest.raises(chute.CorruptDataError) as e:
        for _ in ld:
            pass
    assert "shard-00000.chute" in str(e.value)


def test_pack_errors(corrupt_tree, tmp_path):
    with pytest.raises(chute.CorruptDataError) as e:
        chute.pack(corrupt_tree, str(tmp_path / "strict"), strict=True)
    assert ".jpg" in str(e.value)
    with pytest.raises(chute.NotFoundError):
        chute.pack(str(tmp_path / "missing"), str(tmp_path / "out"))
    # A failed pack leaves no directory that opens as a dataset.
    with pytest.raises(chute.ChuteError):
        chute.Dataset(str(tmp_path / "strict"))


def test_closed_loader(tree):
    ld = chute.Loader(tree, batch_size=8, size=8)
    ld.close()
    ld.close()  # idempotent
    with pytest.raises(RuntimeError):
        ld.stats()
    with pytest.raises(RuntimeError):
        ld.next_batch()
