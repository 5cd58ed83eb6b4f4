"""HDF5 (issue #12) from Python: chute.Loader(path.h5, fields=[...]) yields
a dict whose images, labels and fields equal what h5py reads back from the
file h5py wrote (exact); image_key/label_key/extra_keys name the datasets;
features()["hdf5"] says whether the format is there, and without it an HDF5
file is an UnsupportedError, not "no format"."""
import os

import numpy as np
import pytest

import chute

h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def h5file(tmp_path_factory):
    d = tmp_path_factory.mktemp("h5")
    rng = np.random.default_rng(7)
    imgs = rng.integers(0, 256, size=(10, 12, 12, 3), dtype=np.uint8)
    with h5py.File(d / "x.h5", "w") as f:
        f.create_dataset("pix", data=imgs, chunks=(2, 12, 5, 3), compression="gzip",
                         shuffle=True)
        f.create_dataset("y", data=np.arange(10, dtype=np.int16) % 4)
        f.create_dataset("emb", data=rng.standard_normal((10, 3, 2)).astype(np.float64),
                         chunks=(4, 3, 2), compression="gzip")
        f.create_dataset("score", data=rng.standard_normal(10).astype(np.float32))
    return str(d / "x.h5")


def test_features_say_hdf5_and_open_agrees(h5file):
    if chute.features()["hdf5"]:
        assert chute.Dataset(h5file, image_key="pix", label_key="y").kind == "hdf5"
    else:
        with pytest.raises(chute.UnsupportedError, match="without libhdf5"):
            chute.Dataset(h5file, image_key="pix", label_key="y")


def test_loader_dict_matches_h5py(h5file):
    if not chute.features()["hdf5"]:
        pytest.skip("built without libhdf5")
    with h5py.File(h5file, "r") as f:
        want = {k: f[k][:] for k in f}
    ld = chute.Loader(h5file, batch_size=5, size=12, transform="none", dtype="uint8",
                      layout="nhwc", shuffle=False, workers=2, as_torch=False,
                      image_key="pix", label_key="y", extra_keys=["emb", "score"],
                      fields=["emb", "score"], return_indices=True)
    n = 0
    for b in ld:
        idx = np.asarray(b["indices"])
        assert np.array_equal(np.asarray(b["images"]), want["pix"][idx])
        assert np.array_equal(np.asarray(b["labels"]), want["y"][idx].astype(np.int64))
        emb = np.asarray(b["emb"])
        assert emb.dtype == np.float64 and emb.shape == (5, 3, 2)
        assert emb.tobytes() == want["emb"][idx].tobytes()       # bitwise
        assert np.asarray(b["score"]).tobytes() == want["score"][idx].tobytes()
        n += len(idx)
    assert n == 10
    f = {x["name"]: x for x in chute.Dataset(h5file, image_key="pix", label_key="y",
                                             extra_keys="emb,score").fields()}
    assert f["emb"]["dtype"] == "float64" and f["emb"]["shape"] == (3, 2)
    assert f["score"]["dtype"] == "float32" and f["score"]["shape"] == ()


def test_wrong_dataset_named(h5file):
    if not chute.features()["hdf5"]:
        pytest.skip("built without libhdf5")
    with pytest.raises(chute.ChuteError, match=r'x\.h5.*"images"'):
        chute.Dataset(h5file)          # default image_key: no "images" here
    with pytest.raises(chute.ChuteError, match=r'x\.h5: dataset "y": images must be uint8'):
        chute.Dataset(h5file, image_key="y")


@pytest.mark.parametrize("name", ["labels", "label", "targets", "target", "y", None])
def test_label_dataset_found_by_usual_names_or_refused(tmp_path, name):
    """Issue 22.2: a label dataset named `label` (not `labels`) gave all-zero
    labels without a word.  Now the usual names are found, in the documented
    order; with none of them the open fails listing the file's datasets;
    label_key="" is the explicit "no labels"."""
    if not chute.features()["hdf5"]:
        pytest.skip("built without libhdf5")
    imgs = np.random.default_rng(3).integers(0, 256, size=(6, 8, 8, 3), dtype=np.uint8)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("images", data=imgs)
        f.create_dataset("extra", data=np.zeros(6, np.float32))
        if name:
            f.create_dataset(name, data=np.arange(6, dtype=np.int64) % 3 + 1)
    p = str(tmp_path / "d.h5")
    if name is None:
        with pytest.raises(chute.FormatError, match=r"no label dataset.*label, targets.*"
                           r"the file has: extra, images.*label_key"):
            chute.Loader(p, batch_size=6)
        b = next(iter(chute.Loader(p, batch_size=6, shuffle=False, size=8, label_key="")))
        assert np.asarray(b[1]).tolist() == [0] * 6
        return
    labs = [v for b in chute.Loader(p, batch_size=6, shuffle=False, size=8)
            for v in np.asarray(b[1]).tolist()]
    assert labs == [i % 3 + 1 for i in range(6)]
