"""Detection / segmentation targets of a packed dataset (docs/TARGETS.md).

``chute pack`` stores one target record per image when its input is COCO
JSON, YOLO labels or image + mask pairs; these helpers read them back as
NumPy arrays, in the source image's pixels (before any transform)::

    ds = chute.Dataset("coco_shards")
    t = chute.targets(ds, 0)      # dict of arrays, or None
    t["boxes"]                    # float32 (n, 4): x0 y0 x1 y1
    chute.target_mask(ds, 0, 2)   # uint8 (height, width), pycocotools' annToMask
"""
from typing import Any, Dict, Optional

import numpy as np


def targets(ds: Any, i: int) -> Optional[Dict[str, Any]]:
    """Sample i's targets: ``boxes`` float32 (n, 4), ``labels`` int32 (n,),
    ``ann_ids`` int64, ``iscrowd`` and ``has_mask`` uint8, ``keypoints``
    float32 (n, k, 3) (x, y, visibility), ``width``/``height`` of the source
    image, and for mask pairs ``mask_path`` and ``mask_image`` (the mask
    file's bytes).  None when the dataset carries no targets."""
    r = ds.targets(i)
    if r is None:
        return None
    n, k = r["count"], r["keypoints"]
    out = {
        "width": r["width"], "height": r["height"],
        "boxes": np.frombuffer(r["boxes"], "<f4").reshape(n, 4),
        "labels": np.frombuffer(r["labels"], "<i4"),
        "ann_ids": np.frombuffer(r["ann_ids"], "<i8"),
        "iscrowd": np.frombuffer(r["iscrowd"], np.uint8),
        "has_mask": np.frombuffer(r["has_mask"], np.uint8),
        "keypoints": np.frombuffer(r["keypoints_xyv"], "<f4").reshape(n, k, 3),
    }
    if "mask_path" in r:
        out["mask_path"] = r["mask_path"]
        out["mask_image"] = r["mask_image"]
    return out


def target_mask(ds: Any, i: int, k: int) -> np.ndarray:
    """Object k's instance mask of sample i, uint8 (height, width), 1 inside:
    what pycocotools' ``annToMask`` gives for the same annotation."""
    r = ds.targets(i)
    if r is None:
        raise ValueError("the dataset carries no targets")
    return np.frombuffer(ds.target_mask(i, k), np.uint8).reshape(r["height"], r["width"])
