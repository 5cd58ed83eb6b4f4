/*
 * targets_api.c — the public face of target records (chute_dataset_targets
 * and friends, include/chute.h): a record's bytes, which may be unaligned
 * and are untrusted, become a chute_targets with aligned arrays.
 *
 * The record is checked whole by ch_tg_decode first, then copied into one
 * allocation laid out for the caller (ids, boxes, labels, flags,
 * keypoints, the mask path, and the record itself for painting masks
 * later).  One allocation per call: this is the inspection path (tests,
 * `chute inspect`, user scripts), not the loader's per-sample path.
 */
#include "../parse/targets.h"
#include "format.h"

#include <stdlib.h>
#include <string.h>

typedef struct tg_impl {
    chute_targets pub; /* first: the caller's pointer is this */
    ch_tg_view v;
    char what[512];
} tg_impl;

static size_t up8(size_t n) { return (n + 7) & ~(size_t)7; }

static int decode(const void *rec, size_t len, const char *what, chute_targets **out,
                  chute_error *err)
{
    ch_tg_view v;
    int rc = ch_tg_decode(rec, len, what, &v, err);
    if (rc != CHUTE_OK)
        return rc;
    size_t n = v.n, k = v.k;
    /* n <= 2^20, k <= 2^10 (checked by the decoder): no overflow below */
    size_t sz = up8(sizeof(tg_impl)) + up8(n * 8) + up8(n * 16) + up8(n * 4) + up8(n) + up8(n) +
                up8(n * k * 12) + up8((size_t)v.mask_path_len + 1) + up8(len);
    uint8_t *m = calloc(1, sz);
    if (!m)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for its targets", what);
    tg_impl *t = (tg_impl *)m;
    uint8_t *p = m + up8(sizeof(tg_impl));
    int64_t *ids = (int64_t *)p;
    p += up8(n * 8);
    float *boxes = (float *)p;
    p += up8(n * 16);
    int32_t *labels = (int32_t *)p;
    p += up8(n * 4);
    uint8_t *crowd = p;
    p += up8(n);
    uint8_t *has = p;
    p += up8(n);
    float *kp = (float *)p;
    p += up8(n * k * 12);
    char *mp = (char *)p;
    p += up8((size_t)v.mask_path_len + 1);
    memcpy(p, rec, len);
    ch_tg_decode(p, len, what, &t->v, NULL); /* the copy: checked above */
    for (uint32_t i = 0; i < v.n; i++) {
        size_t body;
        ids[i] = ch_tg_ann_id(&t->v, i);
        ch_tg_box(&t->v, i, boxes + (size_t)i * 4);
        labels[i] = ch_tg_label(&t->v, i);
        crowd[i] = ch_tg_crowd(&t->v, i);
        has[i] = ch_tg_seg(&t->v, i, &body) != CH_SEG_NONE;
        if (k)
            ch_tg_keypoints(&t->v, i, kp + (size_t)i * k * 3);
    }
    if (v.mask_path)
        memcpy(mp, v.mask_path, v.mask_path_len);
    ch_str_fit(t->what, sizeof t->what, what);
    t->pub = (chute_targets){.count = v.n, .keypoints = v.k, .width = v.width, .height = v.height,
                             .ann_ids = ids, .boxes = boxes, .labels = labels, .iscrowd = crowd,
                             .keypoints_xyv = kp, .has_mask = has,
                             .mask_path = v.mask_path ? mp : NULL,
                             .mask_image = t->v.mask_image,
                             .mask_image_bytes = t->v.mask_image_len};
    *out = &t->pub;
    return CHUTE_OK;
}

int chute_dataset_targets(const chute_dataset *ds, uint64_t i, chute_targets **out,
                          chute_error *err)
{
    if (!ds || !out)
        return ch_err(err, CHUTE_EINVAL, "chute_dataset_targets: dataset and out are required");
    *out = NULL;
    if (i >= chute_dataset_size(ds))
        return ch_err(err, CHUTE_EINVAL, "chute_dataset_targets: sample %llu is past the end",
                      (unsigned long long)i);
    if (!ds->fmt->targets)
        return ch_err(err, CHUTE_ENOTFOUND, "this %s dataset carries no targets", ds->fmt->name);
    const uint8_t *rec;
    size_t len;
    char what[512];
    int rc = ds->fmt->targets(ds, i, &rec, &len, what, sizeof what, err);
    if (rc != CHUTE_OK)
        return rc;
    if (!rec)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: the dataset carries no targets", what);
    return decode(rec, len, what, out, err);
}

int chute_targets_decode(const void *record, size_t len, chute_targets **out, chute_error *err)
{
    if (!record || !out)
        return ch_err(err, CHUTE_EINVAL, "chute_targets_decode: record and out are required");
    *out = NULL;
    return decode(record, len, "target record", out, err);
}

int chute_targets_mask(const chute_targets *pub, uint32_t k, uint8_t *plane, size_t plane_bytes,
                       chute_error *err)
{
    const tg_impl *t = (const tg_impl *)pub;
    if (!t || !plane || k >= pub->count)
        return ch_err(err, CHUTE_EINVAL, "chute_targets_mask: no such object %u", k);
    uint64_t need = (uint64_t)pub->width * pub->height;
    if (plane_bytes < need)
        return ch_err(err, CHUTE_ELIMIT, "chute_targets_mask: plane of %zu bytes, the mask needs %llu",
                      plane_bytes, (unsigned long long)need);
    if (!pub->has_mask[k])
        return ch_err(err, CHUTE_ENOTFOUND, "%s: object %u (annotation %lld) has no segmentation",
                      t->what, k, (long long)pub->ann_ids[k]);
    memset(plane, 0, (size_t)need);
    return ch_tg_mask(&t->v, k, pub->height, pub->width, plane, err);
}

void chute_targets_free(chute_targets *t)
{
    free(t);
}
