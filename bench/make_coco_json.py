#!/usr/bin/env python3
"""Write a synthetic COCO instances file with the real schema and the size of
instances_train2017.json (118,287 images, 860,001 annotations, ~450 MB) for
bench/json_parse.c.  Deterministic (seeded); not committed: run it first.

  python3 bench/make_coco_json.py bench/data/coco_synth.json [--scale 1.0]

Shape follows the real file: polygons of 2-decimal floats (mean ~24
vertices, a long tail), ~1% iscrowd annotations with uncompressed RLE
{"counts": [...], "size": [h, w]}, 80 categories with supercategories,
info/licenses blocks, images with coco_url/flickr_url/date_captured.
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    rng = random.Random(2017)
    nimg = int(118287 * a.scale)
    nann = int(860001 * a.scale)
    cat_ids = [i for i in range(1, 91) if i % 9 != 0]  # 80 of 1..90, with gaps as COCO's
    with open(a.out, "w") as f:
        f.write('{"info": {"description": "COCO 2017 Dataset (synthetic)", "url": "http://cocodataset.org", '
                '"version": "1.0", "year": 2017, "contributor": "COCO Consortium", "date_created": "2017/09/01"}, ')
        f.write('"licenses": [' + ", ".join(
            '{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/", "id": %d, "name": "Attribution License"}' % i
            for i in range(1, 9)) + '], ')
        f.write('"images": [')
        sizes = []
        for i in range(nimg):
            w, h = rng.choice([(640, 480), (640, 427), (480, 640), (640, 426), (500, 375)])
            sizes.append((w, h))
            f.write('%s{"license": %d, "file_name": "%012d.jpg", "coco_url": '
                    '"http://images.cocodataset.org/train2017/%012d.jpg", "height": %d, "width": %d, '
                    '"date_captured": "2013-11-14 11:18:45", "flickr_url": '
                    '"http://farm9.staticflickr.com/8186/8119368305_4e622c8349_z.jpg", "id": %d}'
                    % ("," if i else "", rng.randint(1, 8), i + 1, i + 1, h, w, i + 1))
        f.write('], "annotations": [')
        for k in range(nann):
            im = rng.randrange(nimg)
            w, h = sizes[im]
            bw = rng.uniform(2, w / 2)
            bh = rng.uniform(2, h / 2)
            x = rng.uniform(0, w - bw)
            y = rng.uniform(0, h - bh)
            crowd = rng.random() < 0.01
            if crowd:
                counts = []
                left = w * h
                while left > 0:
                    c = min(left, rng.randint(0, 400))
                    counts.append(c)
                    left -= c
                seg = '{"counts": [%s], "size": [%d, %d]}' % (",".join(map(str, counts)), h, w)
            else:
                n = max(3, int(rng.expovariate(1 / 24)))
                pts = []
                for _ in range(n):
                    pts.append("%.2f" % (x + rng.random() * bw))
                    pts.append("%.2f" % (y + rng.random() * bh))
                seg = "[[" + ",".join(pts) + "]]"
            f.write('%s{"segmentation": %s, "area": %.4f, "iscrowd": %d, "image_id": %d, '
                    '"bbox": [%.2f,%.2f,%.2f,%.2f], "category_id": %d, "id": %d}'
                    % ("," if k else "", seg, bw * bh * 0.6, int(crowd), im + 1, x, y, bw, bh,
                       rng.choice(cat_ids), k + 1))
        f.write('], "categories": [' + ", ".join(
            '{"supercategory": "thing%d", "id": %d, "name": "class%d"}' % (i // 8, i, i)
            for i in cat_ids) + "]}")


if __name__ == "__main__":
    main()
