"""Typed records (issue #9): Loader(fields=[...]) yields a dict of zero-copy
tensors whose values equal, byte for byte, what webdataset/numpy/json and
TensorFlow read back from the committed fixtures (tests/fixtures/fields,
written by tests/fixtures/make_fixtures.py; expected.txt comes from those
tools, never from chute)."""
import gc
import os

import numpy as np
import pytest

import chute

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures",
                   "fields")


def expected(ds_name):
    out = {}
    with open(os.path.join(FIX, "expected.txt")) as f:
        for line in f:
            d, i, field, val = line.split()
            if d == ds_name:
                out.setdefault(int(i), {})[field] = int(val) if field == "label" else \
                    bytes.fromhex(val)
    return out


def check(batch, exp, as_np=np.asarray):
    idx = as_np(batch["indices"]).tolist()
    labels = as_np(batch["labels"]).tolist()
    n = 0
    for pos, i in enumerate(idx):
        for field, want in exp[i].items():
            if field == "label":
                assert labels[pos] == want, (i, field)
            elif field + "_lengths" in batch:
                ln = int(as_np(batch[field + "_lengths"])[pos])
                assert as_np(batch[field])[pos, :ln].tobytes() == want, (i, field)
            elif field in batch:
                assert as_np(batch[field])[pos].tobytes() == want, (i, field)
            else:
                continue
            n += 1
    return n


def loader(sub, fields, **kw):
    kw.setdefault("as_torch", False)
    return chute.Loader(os.path.join(FIX, sub), batch_size=kw.pop("batch_size", 6),
                        transform="none", size=8, shuffle=False, workers=2, fields=fields,
                        return_indices=True, **kw)


def test_dataset_lists_fields():
    ds = chute.Dataset(os.path.join(FIX, "wds"))
    f = {x["name"]: x for x in ds.fields()}
    assert set(f) == {"cls", "json", "txt", "npy", "ids.npy"}
    assert f["npy"] == {"name": "npy", "kind": "tensor", "dtype": "float32", "shape": (2, 3)}
    assert f["ids.npy"]["dtype"] == "int64" and f["ids.npy"]["shape"] == (4,)
    assert f["json"]["kind"] == "bytes" and f["json"]["shape"] == (-1,)
    assert f["cls"] == {"name": "cls", "kind": "int64", "dtype": "int64", "shape": ()}
    ds = chute.Dataset(os.path.join(FIX, "tfr"), extra_keys="bbox,weight,mask.npy")
    f = {x["name"]: x for x in ds.fields()}
    assert f["bbox"]["shape"] == (4,) and f["weight"]["shape"] == ()
    assert f["mask.npy"]["dtype"] == "uint8" and f["mask.npy"]["shape"] == (4, 4)


def test_wds_fields_dict_matches_webdataset():
    names = ["cls", "json", "txt", "npy", "ids.npy"]
    with loader("wds", names) as ld:
        assert {f["name"] for f in ld.fields} == set(names)
        batches = list(ld)
    assert len(batches) == 1
    b = batches[0]
    assert set(b) == {"images", "labels", "indices", "cls", "json", "json_lengths", "txt",
                      "txt_lengths", "npy", "ids.npy"}
    assert np.asarray(b["npy"]).shape == (6, 2, 3) and np.asarray(b["npy"]).dtype == np.float32
    assert np.asarray(b["json"]).shape == (6, 4096)
    assert check(b, expected("wds")) == 6 * 6


def test_tfrecord_fields_through_torch():
    torch = pytest.importorskip("torch")
    names = ["bbox", "ids", "weight", "meta", "mask.npy"]
    ld = chute.Loader(os.path.join(FIX, "tfr"), batch_size=5, transform="none", size=8,
                      shuffle=False, workers=2, fields=names, extra_keys=names,
                      return_indices=True, as_torch=True)
    b = next(iter(ld))
    assert isinstance(b["bbox"], torch.Tensor) and b["bbox"].dtype == torch.float32
    assert b["mask.npy"].shape == (5, 4, 4) and b["mask.npy"].dtype == torch.uint8
    assert check(b, expected("tfr"), as_np=lambda t: t.numpy()) == 5 * 6
    ld.close()


def test_default_still_yields_images_and_labels():
    with loader("wds", None) as ld:
        b = next(iter(ld))
    assert isinstance(b, tuple) and len(b) == 3


def test_field_tensors_outlive_loader_and_copies():
    exp = expected("wds")
    ld = loader("wds", ["npy", "json"], batch_size=2, max_held=1, hold_policy="copy")
    held = list(ld)  # 3 batches alive with max_held=1: two are copied out of the ring
    ld.close()
    del ld
    gc.collect()
    assert sum(check(b, exp) for b in held) == 6 * 3  # label, npy, json per sample


def test_bad_values_fail_naming_file_and_sample():
    with loader("wds_bad", ["npy", "json"], batch_size=5, on_corrupt="fail",
                field_bytes=64) as ld:
        with pytest.raises(chute.ChuteError) as e:
            next(iter(ld))
    m = str(e.value)
    assert "bad-000000.tar@" in m and '"b00001"' in m and "float32[3,2]" in m


def test_bad_values_skipped_and_counted():
    # b00003's .json is over field_bytes: bad content, replaced and counted once
    with pytest.warns(chute.SkippedSamplesWarning, match="1 sample with bad content"):
        with loader("wds_bad", ["json"], batch_size=5, field_bytes=64) as ld:
            b = next(iter(ld))
            assert ld.stats()["corrupt"] == 1
    assert 3 not in np.asarray(b["indices"]).tolist()
    assert all(bytes(np.asarray(b["json"])[j, :9]) == b'{"ok": 1}' for j in range(5))


def test_unknown_field_is_an_error():
    with pytest.raises(chute.ChuteError) as e:
        loader("wds", ["nope"])
    assert 'no field "nope"' in str(e.value) and "json" in str(e.value)


def _boxes_tar(path, n=40):
    """webdataset's usual detection layout, written with tarfile, numpy.save
    and PIL: key.jpg, key.cls and key.npy holding 1-3 boxes, float32 (k, 4)."""
    import io
    import tarfile

    from PIL import Image
    with tarfile.open(path, "w") as t:
        for i in range(n):
            img = io.BytesIO()
            Image.new("RGB", (16, 12), (i * 5 % 256, 40, 200)).save(img, "JPEG")
            boxes = io.BytesIO()
            np.save(boxes, np.full((1 + i % 3, 4), i, np.float32))
            for ext, data in (("jpg", img.getvalue()), ("cls", str(i % 4).encode()),
                              ("npy", boxes.getvalue())):
                ti = tarfile.TarInfo("%06d.%s" % (i, ext))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))


@pytest.mark.parametrize("on_corrupt", ["skip", "fail"])
def test_variable_shape_field_refused_never_substituted(tmp_path, on_corrupt):
    """A field whose shape varies (1-3 boxes per image) is refused at the
    first sample of another shape, naming the field, the sample and both
    shapes; never skipped as bad content and replaced by other samples
    (issue 30.2: 40 samples delivered, 14 distinct, "84 samples with bad
    content").  The same on a tar stream with the field declared."""
    import warnings
    path = str(tmp_path / "boxes.tar")
    _boxes_tar(path)
    for src, kw, first in [(path, {}, 'learned from %s@0: sample "000000"' % path),
                           ("pipe:cat " + path, {"extra_keys": ["npy:float32[1x4]"]},
                            "as declared in extra_keys")]:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            with chute.Loader(src, batch_size=8, size=8, transform="none", fields=["npy"],
                              on_corrupt=on_corrupt, return_indices=True, as_torch=False,
                              **kw) as ld:
                got = []
                with pytest.raises(chute.InvalidArgumentError) as e:
                    for b in ld:
                        got += np.asarray(b["indices"]).tolist()
                assert ld.stats()["corrupt"] == 0
        m = str(e.value)
        assert 'field "npy": this sample\'s value is a .npy of float32[' in m, m
        assert "but the field is float32[1,4] (%s)" % first in m, m
        assert "one that varies is refused, never skipped" in m, m
        assert m.count(path + "@") == (2 if src == path else 1), m  # the sample named once
        assert not [w for w in rec if issubclass(w.category, chute.SkippedSamplesWarning)]
        assert len(got) == len(set(got))  # nothing delivered twice in place of another
