"""chute.targets / chute.target_mask on a COCO set packed by chute.pack,
against the golden file pycocotools wrote (tests/fixtures/targets,
tests/fixtures/make_targets_golden.py): boxes exact, masks identical to
annToMask, every annotation once."""
import json
import os

import numpy as np
import pytest

import chute

FX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "targets")


def test_targets_match_pycocotools(tmp_path):
    if not chute.features()["coco"]:
        pytest.skip("built without libjansson")
    out = tmp_path / "coco"
    chute.pack(os.path.join(FX, "instances.json"), str(out))
    ds = chute.Dataset(str(out))
    gold = json.load(open(os.path.join(FX, "golden.json")))
    want = {g["id"]: g for g in gold["annotations"]}
    assert list(ds.classes) == gold["categories"]
    seen = []
    for i in range(len(ds)):
        t = chute.targets(ds, i)
        assert t["boxes"].dtype == np.float32 and t["boxes"].shape == (len(t["labels"]), 4)
        for k, aid in enumerate(t["ann_ids"].tolist()):
            g = want[aid]
            seen.append(aid)
            assert t["boxes"][k].tolist() == g["box"], aid
            assert int(t["labels"][k]) == g["label"] and int(t["iscrowd"][k]) == g["iscrowd"]
            if g.get("keypoints"):
                assert t["keypoints"][k].reshape(-1).tolist() == [float(v) for v in g["keypoints"]]
            if "mask_bits" in g:
                m = chute.target_mask(ds, i, k)
                assert m.shape == tuple(g["mask_shape"])
                assert np.packbits(m.reshape(-1)).tobytes().hex() == g["mask_bits"], aid
            else:
                assert not t["has_mask"][k]
                with pytest.raises(chute.NotFoundError):
                    chute.target_mask(ds, i, k)
    assert sorted(seen) == sorted(want)


def test_targets_none_for_an_image_tree(tree):
    ds = chute.Dataset(str(tree))
    assert chute.targets(ds, 0) is None
