#!/usr/bin/env python3
"""test_targets.py — chute's COCO reader against pycocotools (issue 24).

tests/fixtures/targets/ holds a small COCO-style set made from real photos
with hand-made annotations, and golden.json: what pycocotools.coco.COCO
reads from it (boxes, labels, crowd flags, keypoints, annToMask masks),
written by tests/fixtures/make_targets_golden.py.  tests/tools/targetdump
prints what chute reads: the JSON through ch_coco_record, the record bytes
through the checked decoder, masks painted from the decoded record.  Needs
only the standard library.

    test_targets.py --targetdump BUILD/tests/targetdump --fixtures tests/fixtures coco
    test_targets.py ... hostile
    test_targets.py ... --cli BUILD/chute --work DIR pack
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def dump(td, path, skip=False):
    p = subprocess.run([td, "coco", path] + (["skip"] if skip else []), capture_output=True,
                       text=True, timeout=float(os.environ.get("CHUTE_TEST_RUN_TIMEOUT", "45")))
    return p.returncode, [json.loads(l) for l in p.stdout.splitlines()], p.stderr


def test_coco(a):
    fx = os.path.join(a.fixtures, "targets")
    rc, lines, err = dump(a.targetdump, os.path.join(fx, "instances.json"))
    assert rc == 0 and not err, err
    compare(fx, lines)
    print("coco: %d annotations, masks identical to annToMask" % (len(lines) - 1))


def test_pack(a):
    """COCO JSON -> chute pack -> shards -> chute_dataset_targets: the same
    targets pycocotools reads, every annotation exactly once, the images in
    the JSON's order."""
    fx = os.path.join(a.fixtures, "targets")
    out = os.path.join(a.work, "coco_shards")
    subprocess.run([a.cli, "pack", os.path.join(fx, "instances.json"), out], check=True,
                   capture_output=True, timeout=60)
    p = subprocess.run([a.targetdump, "shards", out], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stderr, p.stderr
    lines = [json.loads(l) for l in p.stdout.splitlines()]
    doc = json.load(open(os.path.join(fx, "instances.json")))
    by_name = {im["file_name"]: im["id"] for im in doc["images"]}
    for o in lines[1:]:
        name = o["where"][o["where"].rindex("(") + 1:-1]
        o["image_id"] = by_name[name]
    compare(fx, lines)
    # the images: every image of the JSON once, in the JSON's order
    names = []
    for o in lines[1:]:
        n = o["where"][o["where"].rindex("(") + 1:-1]
        if not names or names[-1] != n:
            names.append(n)
    assert names == [im["file_name"] for im in doc["images"]], names
    # chute inspect's summary against the same figures from pycocotools' view
    ins = json.loads(subprocess.run([a.cli, "inspect", "--json", out], check=True,
                                    capture_output=True, text=True, timeout=60).stdout)["targets"]
    gold = json.load(open(os.path.join(fx, "golden.json")))
    ga = gold["annotations"]
    areas = [max(g["box"][2] - g["box"][0], 0) * max(g["box"][3] - g["box"][1], 0) for g in ga]
    per_image = {}
    for g in ga:
        per_image[g["image_id"]] = per_image.get(g["image_id"], 0) + 1
    assert ins["objects"] == len(ga) and ins["max_per_image"] == max(per_image.values()), ins
    assert ins["crowd"] == sum(g["iscrowd"] for g in ga), ins
    assert ins["masks"] == sum("mask_bits" in g for g in ga), ins
    assert ins["area"] == {"small": sum(x < 32 ** 2 for x in areas),
                           "medium": sum(32 ** 2 <= x < 96 ** 2 for x in areas),
                           "large": sum(x >= 96 ** 2 for x in areas)}, ins
    assert ins["objects_per_class"] == {c: sum(g["label"] == k for g in ga)
                                        for k, c in enumerate(gold["categories"])}, ins
    # an image the JSON lists but the folder lacks: named with its id, or
    # (without --strict) left out with its annotations and counted
    miss = os.path.join(a.work, "missing")
    shutil.rmtree(miss, ignore_errors=True)
    shutil.copytree(fx, miss)
    os.unlink(os.path.join(miss, "images", "water.jpg"))
    p = subprocess.run([a.cli, "pack", "--strict", os.path.join(miss, "instances.json"),
                        os.path.join(a.work, "missing_out")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "image id 11: no file" in p.stderr, p.stderr
    p = subprocess.run([a.cli, "pack", os.path.join(miss, "instances.json"),
                        os.path.join(a.work, "missing_out")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "image id 11: no file" in p.stdout + p.stderr, p.stdout + p.stderr
    assert "packed 3 files" in p.stdout, p.stdout
    print("pack: %d annotations through shards, as pycocotools reads them" % (len(lines) - 1))


def pack_and_dump(a, root, name, strict=False):
    out = os.path.join(a.work, name)
    p = subprocess.run([a.cli, "pack", root, out] + (["--strict"] if strict else []),
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return p, None
    d = subprocess.run([a.targetdump, "shards", out], capture_output=True, text=True, timeout=60)
    assert d.returncode == 0 and not d.stderr, d.stderr
    return p, [json.loads(l) for l in d.stdout.splitlines()]


def test_layouts(a):
    """YOLO labels and image + mask pairs through chute pack, against boxes
    computed by hand (x0 = W * (cx - w / 2)) and masks made with PIL."""
    from PIL import Image
    fx = os.path.join(a.fixtures, "targets", "images")
    root = os.path.join(a.work, "yolo")
    for sub in ("images/train", "labels/train"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    shutil.copy(os.path.join(fx, "autumn.jpg"), os.path.join(root, "images/train/a.jpg"))  # 160x120
    shutil.copy(os.path.join(fx, "water.jpg"), os.path.join(root, "images/train/b.jpg"))   # 120x90
    shutil.copy(os.path.join(fx, "leaf.jpg"), os.path.join(root, "images/train/c.jpg"))    # no labels
    open(os.path.join(root, "classes.txt"), "w").write("cat\ndog\nbird\n")
    open(os.path.join(root, "labels/train/a.txt"), "w").write(
        "1 0.5 0.5 0.25 0.5\n2 0.125 0.25 0.25 0.5\n")
    open(os.path.join(root, "labels/train/b.txt"), "w").write(
        "0 0.1 0.2 0.5 0.2 0.5 0.8\n7 0.5 0.5 0.1 0.1\n")  # a segment; class 7 is bad
    p, lines = pack_and_dump(a, root, "yolo_shards")
    assert p.returncode == 0, p.stderr
    assert "labels/train/b.txt:2" in p.stdout + p.stderr, p.stdout + p.stderr
    assert lines[0]["categories"] == ["cat", "dog", "bird"], lines[0]
    objs = [(o["where"].split("(")[1][:-1], o["label"], o["box"]) for o in lines[1:]]
    want = [("images/train/a.jpg", 1, [60.0, 30.0, 100.0, 90.0]),
            ("images/train/a.jpg", 2, [0.0, 0.0, 40.0, 60.0]),
            ("images/train/b.jpg", 0, [12.0, 18.0, 60.0, 72.0])]
    assert len(objs) == 3, objs
    for (n, l, b), (wn, wl, wb) in zip(objs, want):
        assert n == wn and l == wl and all(abs(x - y) < 1e-4 for x, y in zip(b, wb)), (n, l, b)
    p, _ = pack_and_dump(a, root, "yolo_strict", strict=True)
    assert p.returncode != 0 and "labels/train/b.txt:2" in p.stderr and "class 7" in p.stderr, p.stderr

    root = os.path.join(a.work, "masks")
    for sub in ("images", "annotations"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    shutil.copy(os.path.join(fx, "autumn.jpg"), os.path.join(root, "images/a.jpg"))
    shutil.copy(os.path.join(fx, "water.jpg"), os.path.join(root, "images/b.jpg"))
    Image.new("L", (160, 120), 3).save(os.path.join(root, "annotations/a.png"))
    Image.new("L", (90, 120), 3).save(os.path.join(root, "annotations/b.png"))  # wrong size
    p, lines = pack_and_dump(a, root, "mask_shards")
    assert p.returncode == 0, p.stderr
    assert "mask is 90x120, its image images/b.jpg 120x90" in p.stdout + p.stderr, p.stdout + p.stderr
    assert [o.get("mask_path") for o in lines[1:]] == ["annotations/a.png"], lines
    # the shard carries the mask: its bytes are the file's
    with open(os.path.join(root, "annotations/a.png"), "rb") as f:
        assert bytes.fromhex(lines[1]["mask_image"]) == f.read()
    p, _ = pack_and_dump(a, root, "mask_strict", strict=True)
    assert p.returncode != 0 and "annotations/b.png" in p.stderr, p.stderr
    # an ImageFolder whose classes are named "images" and "labels" (images in
    # both, no label text) stays an ImageFolder of two classes
    root = os.path.join(a.work, "not_yolo")
    for sub in ("images", "labels"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
        shutil.copy(os.path.join(fx, "autumn.jpg"), os.path.join(root, sub, "a.jpg"))
    p = subprocess.run([a.cli, "pack", root, os.path.join(a.work, "not_yolo_out")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "2 files" in p.stdout and "2 classes" in p.stdout, p.stdout + p.stderr
    print("layouts: YOLO boxes as computed by hand, bad line and bad mask pair named or counted")


def compare(fx, lines):
    gold = json.load(open(os.path.join(fx, "golden.json")))
    head, got = lines[0], lines[1:]
    assert head["categories"] == gold["categories"], head
    want = {g["id"]: g for g in gold["annotations"]}
    ids = [o["id"] for o in got]
    # every annotation exactly once
    assert sorted(ids) == sorted(want), (ids, sorted(want))
    # grouped by image in the images array's order, file order within
    img_order = [o["image_id"] for o in got]
    assert img_order == sorted(img_order), img_order
    masks = 0
    for o in got:
        w = want[o["id"]]
        where = "annotation %d" % o["id"]
        assert o["image_id"] == w["image_id"], where
        assert o["label"] == w["label"], where
        assert o["iscrowd"] == w["iscrowd"], where
        assert o["box"] == w["box"], (where, o["box"], w["box"])  # exact float32
        if w.get("keypoints"):
            assert o["keypoints"] == [float(v) for v in w["keypoints"]], where
        else:
            assert all(v == 0 for v in o.get("keypoints", [])), where
        if "mask_bits" in w:
            assert o.get("mask_shape") == w["mask_shape"], (where, o.get("mask_shape"))
            assert o["mask_bits"] == w["mask_bits"], (where, o["mask_sum"], w["mask_sum"])
            masks += 1
        else:
            assert "mask_bits" not in o, where
    assert masks == sum("mask_bits" in g for g in gold["annotations"]) and masks > 50, masks


def hostile_cases():
    """(name, mutate(doc), annotation id the message must name, text it must say)."""
    def ann(doc, i):
        return next(x for x in doc["annotations"] if x["id"] == i)

    def setp(i, key, val):
        def f(doc):
            ann(doc, i)[key] = val
        return f
    nan = float("nan")
    return [
        # NaN and Infinity are not JSON: the file is refused whole, naming
        # the line and column (a number past double range is too: jansson)
        ("box_nan", setp(101, "bbox", [nan, 1, 2, 3]), None, "near 'NaN'"),
        ("box_inf", setp(101, "bbox", [1, 1, float("inf"), 3]), None, "near 'Infinity'"),
        ("box_negative", setp(101, "bbox", [1, 1, -4, 3]), 101, "negative size"),
        ("box_outside", setp(102, "bbox", [500, 5, 10, 10]), 102, "outside"),
        ("poly_two_points", setp(202, "segmentation", [[1, 1, 5, 5]]), 202, "coordinates"),
        ("poly_odd", setp(202, "segmentation", [[1, 1, 5, 5, 9, 9, 3]]), 202, "coordinates"),
        ("rle_lying", lambda d: ann(d, 201)["segmentation"]["counts"].__setitem__(0, 999999), 201,
         "RLE counts"),
        ("rle_string_lying", lambda d: ann(d, 301)["segmentation"].__setitem__("counts", "0:1"),
         301, "RLE"),
        ("rle_string_bad_byte", lambda d: ann(d, 301)["segmentation"].__setitem__("counts", "ab~"),
         301, "RLE string"),
        ("rle_other_size", lambda d: ann(d, 201)["segmentation"].__setitem__(
            "size", [120, 90]), 201, "its image"),
        ("image_nowhere", setp(102, "image_id", 99), 102, "image_id 99"),
        ("category_nowhere", setp(102, "category_id", 4), 102, "category_id 4"),
        ("keypoints_length", setp(101, "keypoints", [1, 2, 2]), None, "keypoints"),
        ("keypoint_visibility", setp(302, "keypoints", [0] * 14 + [7]), 302, "visibility"),
        ("crowd_bad", setp(103, "iscrowd", 2), 103, "iscrowd"),
        # finite doubles past float32's range: converting them is undefined
        ("box_past_float", setp(103, "bbox", [-1e300, 5, 1e300, 10]), 103, "float range"),
        ("keypoint_past_float", setp(302, "keypoints", [1e300] + [0] * 14), 302, "float range"),
    ]


def test_hostile(a):
    fx = os.path.join(a.fixtures, "targets")
    base = json.load(open(os.path.join(fx, "instances.json")))
    with tempfile.TemporaryDirectory() as tmp:
        for name, mutate, aid, text in hostile_cases():
            doc = json.loads(json.dumps(base))
            mutate(doc)
            path = os.path.join(tmp, name + ".json")
            with open(path, "w") as f:
                json.dump(doc, f)  # NaN/Infinity written as Python does
            rc, lines, err = dump(a.targetdump, path)
            assert rc == 1, (name, rc, lines)
            assert path in err, (name, err)
            assert text in err, (name, err)
            if aid is not None:
                assert "annotation id %d" % aid in err, (name, err)
            rc, lines, err = dump(a.targetdump, path, skip=True)
            if "NaN" in json.dumps(doc) or "Infinity" in json.dumps(doc):
                # not JSON: refused whole, naming line and column
                assert rc == 1 and "line" in err, (name, rc, err)
                continue
            assert rc == 0 and not err, (name, err)
            tail = lines[-1]
            assert tail["skipped"] == 1 and text in tail["first"], (name, tail)
            kept = [o["id"] for o in lines[1:-1]]
            assert len(kept) == len(base["annotations"]) - 1 and (aid is None or aid not in kept), (name, kept)
        # structural damage always fails, skip or not
        for name, mutate, text in [
                ("dup_ann", lambda d: ann_dup(d), "appears twice"),
                ("dup_image", lambda d: d["images"].append(dict(d["images"][0])), "appears twice"),
                ("escape_name", lambda d: d["images"][0].__setitem__("file_name", "../x.jpg"),
                 "file_name"),
                ("no_images", lambda d: d.pop("images"), "images"),
        ]:
            doc = json.loads(json.dumps(base))
            mutate(doc)
            path = os.path.join(tmp, name + ".json")
            with open(path, "w") as f:
                json.dump(doc, f)
            rc, _, err = dump(a.targetdump, path, skip=True)
            assert rc == 1 and text in err and path in err, (name, err)
        path = os.path.join(tmp, "truncated.json")
        with open(path, "w") as f:
            f.write(json.dumps(base)[:-40])
        rc, _, err = dump(a.targetdump, path)
        assert rc == 1 and "line 1 column" in err, err
    print("hostile: %d annotation cases, each named or counted" % len(hostile_cases()))


def ann_dup(doc):
    doc["annotations"].append(dict(doc["annotations"][0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--targetdump", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--work")
    ap.add_argument("--cli")
    ap.add_argument("what", choices=["coco", "hostile", "pack", "layouts"])
    a, _ = ap.parse_known_args()
    rc, _, err = dump(a.targetdump, os.path.join(a.fixtures, "targets", "instances.json"))
    if "needs libjansson" in err and a.what != "layouts":
        print("skip: this build has no COCO reader (libjansson)")
        return 77
    if a.work:
        os.makedirs(a.work, exist_ok=True)
    {"coco": test_coco, "hostile": test_hostile, "pack": test_pack,
     "layouts": test_layouts}[a.what](a)


if __name__ == "__main__":
    sys.exit(main())
