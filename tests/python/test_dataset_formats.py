"""format= picks any registered format by name; the format's name is
reported back; TFRecord options reach the C reader (fixtures written by
TensorFlow and webdataset, tests/fixtures)."""
import json
import os
import shutil

import pytest

import chute

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


def test_format_names_probe_and_explicit(tree, shards, tmp_path):
    assert chute.Dataset(tree).kind == "tree"
    assert chute.Dataset(shards).kind == "shards"
    assert chute.Dataset(tree, format="tree").kind == "tree"
    with pytest.raises(chute.ChuteError) as e:
        chute.Dataset(tree, format="nosuch")
    assert "nosuch" in str(e.value) and "tfrecord" in str(e.value) and "wds" in str(e.value)
    with pytest.raises(chute.ChuteError) as e:
        chute.Dataset(tree, format="shards")
    assert "manifest" in str(e.value)


def test_tfrecord_fixture_through_python(tmp_path):
    recs = json.load(open(os.path.join(FIX, "expected.json")))["tfrecord"]["plain.tfrecord"]["records"]
    p = tmp_path / "x.tfrecord"
    shutil.copy(os.path.join(FIX, "plain.tfrecord"), p)
    ds = chute.Dataset(str(p), image_key="image", label_key="label", label_offset=30)
    assert ds.kind == "tfrecord" and len(ds) == len(recs)
    assert [ds.label(i) for i in range(len(ds))] == \
        [r["features"]["label"]["values"][0] + 30 for r in recs]
    with pytest.raises(chute.ChuteError) as e:
        chute.Dataset(str(p), format="tfrecord", image_key="image", label_key="label")
    assert "x.tfrecord@0" in str(e.value) and "label_offset" in str(e.value)


def test_tfrecord_read_returns_the_image_feature(tmp_path):
    """Dataset.read of a TFRecord sample is its image feature's bytes (as
    TensorFlow wrote them): the reader needs the whole record's room, more
    than sample_size, and Dataset.read used to fail with "needs N bytes"."""
    recs = json.load(open(os.path.join(FIX, "expected.json")))["tfrecord"]["plain.tfrecord"]["records"]
    p = tmp_path / "x.tfrecord"
    shutil.copy(os.path.join(FIX, "plain.tfrecord"), p)
    ds = chute.Dataset(str(p), image_key="image", label_key="label", label_offset=30)
    for i, r in enumerate(recs):
        want = bytes.fromhex(r["features"]["image"]["values"][0])
        assert ds.sample_size(i) == len(want)
        assert ds.read(i) == want


def test_loader_format_keyword(tree):
    ld = chute.Loader(tree, format="tree", batch_size=8, size=32, workers=1)
    assert ld.dataset.kind == "tree"
    with pytest.raises(chute.ChuteError):
        chute.Loader(tree, format="wds", batch_size=8, size=32, workers=1)
