"""The "npy" format and image-less samples (issue #12): files written by
numpy itself (np.save, np.lib.format.open_memmap), every value compared
with what numpy reads back (exact for ints and raw pixels, bitwise for
float32); a header lying about its shape fails naming file and offset;
every sample exactly once per epoch over ranks, and resume, as for
images."""
import json
import os

import numpy as np
import pytest

import chute


def L(path, **kw):
    kw.setdefault("as_torch", False)
    kw.setdefault("return_indices", True)
    kw.setdefault("workers", 2)
    return chute.Loader(str(path), **kw)


def collect(ld, field):
    """(indices, labels, values) of one epoch, in delivery order."""
    idx, lab, val = [], [], []
    for b in ld:
        assert isinstance(b, dict) and "images" not in b
        idx += np.asarray(b["indices"]).tolist()
        lab += np.asarray(b["labels"]).tolist()
        val.append(np.array(b[field]))
    return idx, lab, np.concatenate(val)


@pytest.fixture
def feats(tmp_path):
    rs = np.random.RandomState(3)
    x = rs.randn(37, 3, 5).astype(np.float32)
    x[0, 0, 0] = np.float32("nan")          # bitwise: a NaN payload, -0.0, denormals
    x[1, 0, 0] = np.float32(-0.0)
    x[2, 0, 0] = np.float32(1e-45)
    np.save(tmp_path / "feat.npy", x)
    np.save(tmp_path / "labels.npy", rs.randint(0, 7, 37).astype(np.int16))
    return tmp_path


def test_single_array_tensor_field_bitwise(feats):
    ds = chute.Dataset(str(feats / "feat.npy"))
    assert not ds.has_images and len(ds) == 37
    assert ds.fields() == [{"name": "feat", "kind": "tensor", "dtype": "float32",
                            "shape": (3, 5)}]
    want = np.load(feats / "feat.npy", mmap_mode="r")
    labels = np.load(feats / "labels.npy")
    idx, lab, val = collect(L(feats / "feat.npy", batch_size=8, fields=["feat"], seed=4), "feat")
    assert sorted(idx) == list(range(37)) and idx != list(range(37))  # shuffled, once each
    assert lab == labels[idx].astype(np.int64).tolist()
    assert val.tobytes() == np.ascontiguousarray(want[idx]).tobytes()


def test_open_memmap_int_and_label_key(tmp_path):
    m = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.int64,
                                  shape=(50, 4))
    m[:] = np.arange(200).reshape(50, 4) * -(2 ** 40)
    m.flush()
    del m
    np.save(tmp_path / "y.npy", (np.arange(50) % 3).astype(np.uint8))
    ld = L(tmp_path / "big.npy", batch_size=7, fields=["big"], label_key="y.npy",
           shuffle=False)
    idx, lab, val = collect(ld, "big")
    assert idx == list(range(50)) and lab == (np.arange(50) % 3).tolist()
    assert np.array_equal(val, np.load(tmp_path / "big.npy"))
    assert val.dtype == np.int64


def test_no_labels_is_an_error_unless_label_key_empty(tmp_path):
    """Issue 22.2: an array with no labels beside it used to give labels of
    0 without a word; now it is refused naming the files looked for, and
    label_key="" is the explicit "no labels" (then plain iteration is a
    dict of labels 0)."""
    np.save(tmp_path / "v.npy", np.arange(10, dtype=np.float32))
    with pytest.raises(chute.FormatError, match=r"no labels.*label\.npy.*label_key"):
        L(tmp_path / "v.npy", batch_size=4)
    with L(tmp_path / "v.npy", batch_size=4, return_indices=False, label_key="") as ld:
        b = next(iter(ld))
    assert set(b) == {"labels"} and np.asarray(b["labels"]).tolist() == [0] * 4


@pytest.mark.parametrize("name", ["labels.npy", "label.npy", "targets.npy", "y.npy"])
def test_images_and_labels_directory_is_n_samples(tmp_path, name):
    """Issue 31.3: a directory holding images.npy + labels.npy (NumPy's
    usual layout) was read as 2 one-sample files with labels 0; now it is
    N samples with their labels, whatever the labels file's usual name."""
    d = tmp_path / "d"
    d.mkdir()
    imgs = np.random.RandomState(3).randint(0, 256, (20, 16, 16, 3), dtype=np.uint8)
    np.save(d / "images.npy", imgs)
    np.save(d / name, np.arange(20) % 5)
    seen, labs, out = [], [], []
    for im, y, idx in L(d, batch_size=8, size=16, transform="none", dtype="uint8",
                        layout="nhwc", shuffle=False):
        out.append(np.asarray(im))
        labs += np.asarray(y).tolist()
        seen += np.asarray(idx).tolist()
    assert seen == list(range(20)) and labs == [i % 5 for i in range(20)]
    assert np.array_equal(np.concatenate(out), imgs)
    # the file itself finds the same labels beside it
    labs2 = [v for _, y, _ in L(d / "images.npy", batch_size=20, size=16, transform="none",
                                dtype="uint8", shuffle=False) for v in np.asarray(y).tolist()]
    assert labs2 == labs


def test_flat_npy_directory_without_labels_is_an_error(tmp_path):
    """One-sample files directly in a directory have no labels: refused
    (label_key="" reads them with labels 0); several arrays beside a
    labels file is refused naming the layout."""
    for i in range(3):
        np.save(tmp_path / ("s%d.npy" % i), np.full(4, i, np.float32))
    with pytest.raises(chute.FormatError, match="no class directories"):
        L(tmp_path, batch_size=3)
    with L(tmp_path, batch_size=3, label_key="", shuffle=False, return_indices=False) as ld:
        b = next(iter(ld))
    assert np.asarray(b["labels"]).tolist() == [0, 0, 0]
    np.save(tmp_path / "labels.npy", np.arange(3))
    with pytest.raises(chute.FormatError, match="labels.npy beside 3 other arrays"):
        L(tmp_path, batch_size=3)


def test_uint8_nhwc_array_is_images(tmp_path):
    rs = np.random.RandomState(1)
    rgb = rs.randint(0, 256, (9, 20, 20, 3), dtype=np.uint8)
    np.save(tmp_path / "rgb.npy", rgb)
    np.save(tmp_path / "labels.npy", np.arange(9, dtype=np.int32))
    assert chute.Dataset(str(tmp_path / "rgb.npy")).has_images
    out, lab = [], []
    for im, y, idx in L(tmp_path / "rgb.npy", batch_size=4, size=20, transform="none",
                        dtype="uint8", layout="nhwc", shuffle=False):
        out.append(np.asarray(im))
        lab += np.asarray(y).tolist()
    assert np.array_equal(np.concatenate(out), rgb) and lab == list(range(9))
    # the train transform applies to them like to any image
    for im, y, idx in L(tmp_path / "rgb.npy", batch_size=9, size=8, transform="train"):
        assert np.asarray(im).shape == (9, 3, 8, 8)


def test_uint8_grey_array_is_images(tmp_path):
    g = np.random.RandomState(2).randint(0, 256, (5, 6, 6, 1), dtype=np.uint8)
    d = tmp_path / "g"
    d.mkdir()
    np.save(d / "g.npy", g)
    (im, _, _), = list(L(d / "g.npy", batch_size=5, size=6, transform="none", dtype="uint8",
                         layout="nhwc", shuffle=False, label_key=""))
    assert np.array_equal(np.asarray(im), np.repeat(g, 3, axis=3))  # grey -> RGB, as PIL


def test_header_lying_about_shape(tmp_path):
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.save(tmp_path / "lie.npy", x)
    raw = (tmp_path / "lie.npy").read_bytes()
    (tmp_path / "lie.npy").write_bytes(raw.replace(b"(6, 4)", b"(9, 4)"))
    with pytest.raises(chute.ChuteError) as e:
        chute.Dataset(str(tmp_path / "lie.npy"))
    m = str(e.value)
    assert "lie.npy@0" in m and "144 data bytes" in m and "96" in m


def test_labels_of_wrong_length(feats):
    np.save(feats / "labels.npy", np.zeros(5, np.int64))
    with pytest.raises(chute.ChuteError) as e:
        chute.Dataset(str(feats / "feat.npy"))
    assert "labels.npy" in str(e.value) and "5 labels for 37 samples" in str(e.value)


@pytest.mark.parametrize("world", [1, 3])
def test_exactly_once_over_ranks(feats, world):
    seen = []
    for r in range(world):
        idx, _, val = collect(L(feats / "feat.npy", batch_size=5, fields=["feat"], rank=r,
                                world_size=world, seed=9), "feat")
        seen += idx
    # every sample, and (PAD, the default) at most world - 1 repeated to even the ranks
    assert set(seen) == set(range(37)) and len(seen) == -(-37 // world) * world


def test_resume_mid_epoch(feats):
    kw = dict(batch_size=6, fields=["feat"], seed=2)

    def run(ld, limit=None):
        ld.set_epoch(1)
        out = []
        for b in ld:
            out.append((np.asarray(b["indices"]).tolist(), np.array(b["feat"]).tobytes()))
            if limit and len(out) == limit:
                break
        return out

    ref = run(L(feats / "feat.npy", **kw))
    first = L(feats / "feat.npy", workers=1, **kw)
    seen = run(first, limit=3)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    again = L(feats / "feat.npy", **kw)
    again.load_state_dict(state)
    assert seen + run(again) == ref


def make_class_dirs(root):
    rs = np.random.RandomState(5)
    want = {}
    for c, name in enumerate(["cat", "dog"]):
        (root / name).mkdir(parents=True)
        for k in range(4 + c):
            v = rs.randint(-1000, 1000, (2, 3)).astype(np.int32)
            p = root / name / ("s%02d.npy" % k)
            np.save(p, v)
            want[str(p)] = (c, v)
    return want


def test_directory_of_npy_in_class_dirs(tmp_path):
    want = make_class_dirs(tmp_path / "d")
    ds = chute.Dataset(str(tmp_path / "d"))
    assert ds.classes == ("cat", "dog") and len(ds) == 9 and not ds.has_images
    assert ds.fields()[0]["dtype"] == "int32" and ds.fields()[0]["shape"] == (2, 3)
    files = sorted(want)  # class dirs sorted, files sorted: the sample order
    idx, lab, val = collect(L(tmp_path / "d", batch_size=4, fields=["npy"], seed=1), "npy")
    assert sorted(idx) == list(range(9))
    for pos, i in enumerate(idx):
        c, v = want[files[i]]
        assert lab[pos] == c and np.array_equal(val[pos], np.load(files[i]))


def test_directory_flat_and_bad_file_policy(tmp_path):
    d = tmp_path / "flat"
    d.mkdir()
    for k in range(6):
        np.save(d / ("%d.npy" % k), np.full(4, k, np.float32))
    np.save(d / "3.npy", np.zeros(5, np.float32))  # another shape: refused, never replaced
    for policy in ("fail", "skip"):
        with pytest.raises(chute.InvalidArgumentError) as e:
            collect(L(d, batch_size=6, fields=["npy"], on_corrupt=policy, shuffle=False,
                      label_key=""), "npy")
        assert "3.npy" in str(e.value) and "float32[5], but the field is float32[4]" in \
            str(e.value) and "0.npy" in str(e.value)
    (d / "4.npy").write_bytes(b"\x93NUMPY garbage")  # bad content: skipped and counted
    np.save(d / "3.npy", np.full(4, 3, np.float32))
    with pytest.warns(chute.SkippedSamplesWarning, match="epoch 0: 1 sample with bad content"):
        with L(d, batch_size=6, fields=["npy"], shuffle=False, label_key="") as ld:
            idx, lab, val = collect(ld, "npy")
            assert ld.stats()["corrupt"] == 1
    for pos, i in enumerate(idx):
        assert i != 4 and np.array_equal(val[pos], np.full(4, i, np.float32))


def test_inspect_summarises_fields(feats):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "chute", "inspect", "--json",
                        str(feats / "feat.npy")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["format"] == "npy" and j["samples"] == 37 and j["images"] is False
    assert j["fields"] == [{"name": "feat", "kind": "tensor", "dtype": "float32",
                            "shape": [3, 5]}]
    assert j["size_histogram"] == {"32": 37}  # 60 bytes a sample


def test_directory_of_npz_members_are_fields(tmp_path):
    rs = np.random.RandomState(8)
    for c in ("neg", "pos"):
        (tmp_path / "z" / c).mkdir(parents=True)
        for k in range(3):
            np.savez(tmp_path / "z" / c / ("%d.npz" % k), emb=rs.randn(4).astype(np.float32),
                     tok=rs.randint(0, 1000, 5).astype(np.int32), w=np.float64(rs.rand()))
    files = sorted(str(p) for p in (tmp_path / "z").glob("*/*.npz"))
    ds = chute.Dataset(str(tmp_path / "z"))
    assert [f["name"] for f in ds.fields()] == ["emb", "tok", "w"] and ds.classes == ("neg", "pos")
    with L(tmp_path / "z", batch_size=4, fields=["tok", "emb", "w"], seed=6) as ld:
        got = {}
        for b in ld:
            for pos, i in enumerate(np.asarray(b["indices"]).tolist()):
                got[i] = {k: np.array(b[k])[pos] for k in ("emb", "tok", "w")}
                assert int(np.asarray(b["labels"])[pos]) == (0 if "/neg/" in files[i] else 1)
    assert sorted(got) == list(range(6))
    for i, f in enumerate(files):
        z = np.load(f)
        for k in ("emb", "tok", "w"):
            assert got[i][k].dtype == z[k].dtype and got[i][k].tobytes() == z[k].tobytes()


def test_compressed_npz_is_refused_naming_it(tmp_path):
    (tmp_path / "z").mkdir()
    np.savez(tmp_path / "z" / "0.npz", a=np.zeros(3, np.int16))
    np.savez_compressed(tmp_path / "z" / "1.npz", a=np.zeros(3, np.int16))
    with pytest.raises(chute.ChuteError) as e:
        list(L(tmp_path / "z", batch_size=2, fields=["a"], on_corrupt="fail", shuffle=False,
               label_key=""))
    assert "1.npz" in str(e.value) and "savez_compressed" in str(e.value)
