/*
 * target_record.c — the per-sample target record: one image's objects
 * (boxes, labels, crowd flags, annotation ids, keypoints, segmentations)
 * and an optional semantic-mask reference, as one self-describing byte
 * string.  docs/TARGETS.md is the specification; this file implements it.
 *
 * Why a byte string and not structs: the record travels.  `chute pack`
 * stores it beside the image in a shard (where the shard's CRC covers it),
 * the reader hands it back untouched, and any consumer (C API, inspect,
 * the loader) decodes it with the one checked decoder below.  All
 * integers and floats are little-endian and packed without padding; the
 * decoder never casts into the record (it may be unaligned), it copies.
 *
 * The decoder is the trust boundary: a shard can be damaged or forged, so
 * every count is bounded before it is multiplied, every section must end
 * inside the record, the record must end exactly where its last section
 * does, and a segmentation is checked whole (counts that cover their mask
 * exactly, polygons of >= 3 points with finite coordinates) before anyone
 * paints it.  The builder checks the same things, so a record it writes
 * always decodes.
 */
#include "targets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fixed part per object: id, box, label, crowd. */
#define OBJ_FIXED (8 + 16 + 4 + 1)

static int grow(uint8_t **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return CHUTE_OK;
    if (need > CH_TG_MAX_BYTES)
        return CHUTE_ELIMIT;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    uint8_t *n = realloc(*p, c);
    if (!n)
        return CHUTE_ENOMEM;
    *p = n;
    *cap = c;
    return CHUTE_OK;
}

static int put(uint8_t **p, size_t *n, size_t *cap, const void *src, size_t len)
{
    if (len > CH_TG_MAX_BYTES || *n > CH_TG_MAX_BYTES - len)
        return CHUTE_ELIMIT;
    int rc = grow(p, cap, *n + len);
    if (rc != CHUTE_OK)
        return rc;
    memcpy(*p + *n, src, len);
    *n += len;
    return CHUTE_OK;
}

void ch_tg_begin(ch_tg_builder *b, uint32_t width, uint32_t height, uint32_t keypoints)
{
    b->objs_n = b->seg_n = b->out_n = 0;
    b->n = 0;
    b->k = keypoints;
    b->width = width;
    b->height = height;
    b->flags = 0;
    b->mask_path[0] = 0;
    b->mask_img_n = 0;
}

int ch_tg_set_mask_image(ch_tg_builder *b, const void *data, size_t len)
{
    if (len == 0 || len > CH_TG_MAX_BYTES / 2)
        return CHUTE_ELIMIT;
    b->mask_img_n = 0;
    int rc = put(&b->mask_img, &b->mask_img_n, &b->mask_img_cap, data, len);
    if (rc == CHUTE_OK)
        b->flags |= CH_TG_FLAG_MASK_IMAGE;
    return rc;
}

int ch_tg_set_mask_path(ch_tg_builder *b, const char *path)
{
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof b->mask_path)
        return CHUTE_ELIMIT;
    memcpy(b->mask_path, path, n + 1);
    b->flags |= CH_TG_FLAG_MASK;
    return CHUTE_OK;
}

int ch_tg_add(ch_tg_builder *b, const ch_tg_obj *o)
{
    if (b->n >= CH_TG_MAX_OBJECTS || b->k > CH_TG_MAX_KEYPOINTS)
        return CHUTE_ELIMIT;
    for (int j = 0; j < 4; j++)
        if (!isfinite(o->box[j]))
            return CHUTE_EINVAL;
    uint8_t fixed[OBJ_FIXED];
    memcpy(fixed, &o->ann_id, 8);
    memcpy(fixed + 8, o->box, 16);
    memcpy(fixed + 24, &o->label, 4);
    fixed[28] = o->iscrowd;
    int rc = put(&b->objs, &b->objs_n, &b->objs_cap, fixed, OBJ_FIXED);
    /* keypoints: k * 3 floats, zeros when the object has none */
    for (uint32_t j = 0; rc == CHUTE_OK && j < b->k * 3; j++) {
        float f = o->kp ? o->kp[j] : 0.0f;
        rc = put(&b->objs, &b->objs_n, &b->objs_cap, &f, 4);
    }
    if (rc != CHUTE_OK)
        return rc;
    /* segmentation, kept apart and appended after every object's fixed
     * part: the decoder finds the arrays at computed offsets. */
    uint8_t kind = (uint8_t)o->seg;
    size_t seg0 = b->seg_n;
    rc = put(&b->seg, &b->seg_n, &b->seg_cap, &kind, 1);
    if (rc == CHUTE_OK && o->seg == CH_SEG_POLY) {
        if (o->npoly == 0)
            rc = CHUTE_EINVAL;
        else
            rc = put(&b->seg, &b->seg_n, &b->seg_cap, &o->npoly, 4);
        size_t at = 0;
        for (uint32_t p = 0; rc == CHUTE_OK && p < o->npoly; p++) {
            uint32_t L = o->poly_len[p];
            if (L < 6 || (L & 1))
                rc = CHUTE_EINVAL;
            for (uint32_t j = 0; rc == CHUTE_OK && j < L; j++)
                if (!isfinite(o->poly_xy[at + j]))
                    rc = CHUTE_EINVAL;
            if (rc == CHUTE_OK)
                rc = put(&b->seg, &b->seg_n, &b->seg_cap, &L, 4);
            if (rc == CHUTE_OK)
                rc = put(&b->seg, &b->seg_n, &b->seg_cap, o->poly_xy + at, (size_t)L * 8);
            at += L;
        }
    } else if (rc == CHUTE_OK && o->seg == CH_SEG_RLE) {
        if (ch_rle_check(o->rle, o->rle_m, o->rle_h, o->rle_w, NULL, 0) != CHUTE_OK)
            rc = CHUTE_EINVAL;
        uint32_t hdr[3] = {o->rle_h, o->rle_w, o->rle_m};
        if (rc == CHUTE_OK)
            rc = put(&b->seg, &b->seg_n, &b->seg_cap, hdr, 12);
        if (rc == CHUTE_OK)
            rc = put(&b->seg, &b->seg_n, &b->seg_cap, o->rle, (size_t)o->rle_m * 4);
    } else if (rc == CHUTE_OK && o->seg != CH_SEG_NONE) {
        rc = CHUTE_EINVAL;
    }
    if (rc != CHUTE_OK) {
        b->objs_n -= OBJ_FIXED + (size_t)b->k * 12;
        b->seg_n = seg0;
        return rc;
    }
    if (o->seg != CH_SEG_NONE)
        b->flags |= CH_TG_FLAG_SEG;
    b->n++;
    return CHUTE_OK;
}

int ch_tg_finish(ch_tg_builder *b, const uint8_t **out, size_t *out_len)
{
    /* objs holds the objects interleaved (fixed + keypoints each); the
     * record stores each field as one array: regroup. */
    size_t per = OBJ_FIXED + (size_t)b->k * 12;
    size_t body = (size_t)b->n * per;
    size_t total = CH_TG_HEADER + body;
    if (b->flags & CH_TG_FLAG_SEG)
        total += b->seg_n;
    size_t plen = (b->flags & CH_TG_FLAG_MASK) ? strlen(b->mask_path) : 0;
    if (b->flags & CH_TG_FLAG_MASK)
        total += 4 + plen;
    if (b->flags & CH_TG_FLAG_MASK_IMAGE)
        total += 4 + b->mask_img_n;
    if (total > CH_TG_MAX_BYTES)
        return CHUTE_ELIMIT;
    int rc = grow(&b->out, &b->out_cap, total);
    if (rc != CHUTE_OK)
        return rc;
    uint8_t *o = b->out;
    memcpy(o, CH_TG_MAGIC, 4);
    uint16_t maj = CH_TG_MAJOR, min = CH_TG_MINOR;
    uint32_t t32 = (uint32_t)total;
    memcpy(o + 4, &maj, 2);
    memcpy(o + 6, &min, 2);
    memcpy(o + 8, &t32, 4);
    memcpy(o + 12, &b->n, 4);
    memcpy(o + 16, &b->k, 4);
    memcpy(o + 20, &b->width, 4);
    memcpy(o + 24, &b->height, 4);
    memcpy(o + 28, &b->flags, 4);
    uint8_t *ids = o + CH_TG_HEADER, *box = ids + (size_t)b->n * 8, *lab = box + (size_t)b->n * 16,
            *crowd = lab + (size_t)b->n * 4, *kp = crowd + b->n;
    for (uint32_t i = 0; i < b->n; i++) {
        const uint8_t *s = b->objs + (size_t)i * per;
        memcpy(ids + (size_t)i * 8, s, 8);
        memcpy(box + (size_t)i * 16, s + 8, 16);
        memcpy(lab + (size_t)i * 4, s + 24, 4);
        crowd[i] = s[28];
        memcpy(kp + (size_t)i * b->k * 12, s + OBJ_FIXED, (size_t)b->k * 12);
    }
    uint8_t *end = o + CH_TG_HEADER + body;
    if (b->flags & CH_TG_FLAG_SEG) {
        memcpy(end, b->seg, b->seg_n);
        end += b->seg_n;
    }
    if (b->flags & CH_TG_FLAG_MASK) {
        uint32_t l = (uint32_t)plen;
        memcpy(end, &l, 4);
        memcpy(end + 4, b->mask_path, plen);
        end += 4 + plen;
    }
    if (b->flags & CH_TG_FLAG_MASK_IMAGE) {
        uint32_t l = (uint32_t)b->mask_img_n;
        memcpy(end, &l, 4);
        memcpy(end + 4, b->mask_img, b->mask_img_n);
    }
    b->out_n = total;
    *out = b->out;
    *out_len = total;
    return CHUTE_OK;
}

void ch_tg_builder_free(ch_tg_builder *b)
{
    free(b->objs);
    free(b->seg);
    free(b->out);
    free(b->mask_img);
    memset(b, 0, sizeof *b);
}

/* ---- decoding ------------------------------------------------------------ */

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static int bad(chute_error *err, const char *what, size_t off, const char *why)
{
    return ch_err(err, CHUTE_ECORRUPT, "%s: target record byte %zu: %s", what ? what : "target",
                  off, why);
}

/* Walk one object's segmentation at *at; check it; advance *at. */
static int seg_walk(const uint8_t *r, size_t len, size_t *at, const char *what, chute_error *err)
{
    size_t p = *at;
    if (p >= len)
        return bad(err, what, p, "segmentation section ends early");
    uint8_t kind = r[p++];
    if (kind == CH_SEG_NONE) {
        *at = p;
        return CHUTE_OK;
    }
    if (kind == CH_SEG_POLY) {
        if (len - p < 4)
            return bad(err, what, p, "polygon count past the end");
        uint32_t np = rd32(r + p);
        p += 4;
        if (np == 0)
            return bad(err, what, p - 4, "segmentation of zero polygons");
        for (uint32_t i = 0; i < np; i++) {
            if (len - p < 4)
                return bad(err, what, p, "polygon length past the end");
            uint32_t L = rd32(r + p);
            p += 4;
            if (L < 6 || (L & 1))
                return bad(err, what, p - 4, "polygon of fewer than 3 points or an odd length");
            if ((uint64_t)L * 8 > len - p)
                return bad(err, what, p, "polygon coordinates past the end");
            for (uint32_t j = 0; j < L; j++) {
                double d;
                memcpy(&d, r + p + (size_t)j * 8, 8);
                if (!isfinite(d))
                    return bad(err, what, p + (size_t)j * 8, "polygon coordinate not finite");
            }
            p += (size_t)L * 8;
        }
        *at = p;
        return CHUTE_OK;
    }
    if (kind == CH_SEG_RLE) {
        if (len - p < 12)
            return bad(err, what, p, "RLE header past the end");
        uint32_t h = rd32(r + p), w = rd32(r + p + 4), m = rd32(r + p + 8);
        p += 12;
        if ((uint64_t)m * 4 > len - p)
            return bad(err, what, p, "RLE counts past the end");
        uint64_t area = (uint64_t)h * w, sum = 0;
        if (area > CH_MASK_MAX_PIXELS)
            return bad(err, what, p - 12, "RLE mask over 2^31-1 pixels");
        for (uint32_t j = 0; j < m; j++)
            sum += rd32(r + p + (size_t)j * 4);
        if (sum != area)
            return bad(err, what, p, "RLE counts do not cover exactly h*w pixels");
        *at = p + (size_t)m * 4;
        return CHUTE_OK;
    }
    return bad(err, what, p - 1, "unknown segmentation kind");
}

int ch_tg_decode(const void *rec, size_t len, const char *what, ch_tg_view *v, chute_error *err)
{
    const uint8_t *r = rec;
    memset(v, 0, sizeof *v);
    if (len < CH_TG_HEADER)
        return bad(err, what, 0, "shorter than its 32-byte header");
    if (memcmp(r, CH_TG_MAGIC, 4) != 0)
        return bad(err, what, 0, "no CHTG magic");
    uint16_t maj, min;
    memcpy(&maj, r + 4, 2);
    memcpy(&min, r + 6, 2);
    if (maj != CH_TG_MAJOR)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: target record version %u.%u (this build reads %u.x)",
                      what ? what : "target", maj, min, CH_TG_MAJOR);
    if (rd32(r + 8) != len)
        return bad(err, what, 8, "its length field differs from its size");
    if (len > CH_TG_MAX_BYTES)
        return bad(err, what, 8, "over the 256 MiB record limit");
    v->n = rd32(r + 12);
    v->k = rd32(r + 16);
    v->width = rd32(r + 20);
    v->height = rd32(r + 24);
    v->flags = rd32(r + 28);
    v->minor = min;
    if (v->n > CH_TG_MAX_OBJECTS)
        return bad(err, what, 12, "over 2^20 objects");
    if (v->k > CH_TG_MAX_KEYPOINTS)
        return bad(err, what, 16, "over 1024 keypoints per object");
    if (v->flags & ~(CH_TG_FLAG_SEG | CH_TG_FLAG_MASK | CH_TG_FLAG_MASK_IMAGE))
        return bad(err, what, 28, "unknown flags");
    /* bounded above: n <= 2^20, k <= 2^10, so this fits 64 bits easily */
    uint64_t body = (uint64_t)v->n * (OBJ_FIXED + (uint64_t)v->k * 12);
    if (body > len - CH_TG_HEADER)
        return bad(err, what, CH_TG_HEADER, "object arrays past the end");
    v->rec = r;
    v->len = len;
    v->off_ids = CH_TG_HEADER;
    v->off_box = v->off_ids + (size_t)v->n * 8;
    v->off_label = v->off_box + (size_t)v->n * 16;
    v->off_crowd = v->off_label + (size_t)v->n * 4;
    v->off_kp = v->off_crowd + v->n;
    size_t at = v->off_kp + (size_t)v->n * v->k * 12;
    for (uint32_t i = 0; i < v->n; i++) {
        float b[4];
        memcpy(b, r + v->off_box + (size_t)i * 16, 16);
        for (int j = 0; j < 4; j++)
            if (!isfinite(b[j]))
                return bad(err, what, v->off_box + (size_t)i * 16, "box coordinate not finite");
    }
    if (v->flags & CH_TG_FLAG_SEG) {
        v->off_seg = at;
        for (uint32_t i = 0; i < v->n; i++) {
            int rc = seg_walk(r, len, &at, what, err);
            if (rc != CHUTE_OK)
                return rc;
        }
    }
    if (v->flags & CH_TG_FLAG_MASK) {
        if (len - at < 4)
            return bad(err, what, at, "mask path length past the end");
        uint32_t l = rd32(r + at);
        if (l == 0 || l > len - at - 4)
            return bad(err, what, at, "mask path empty or past the end");
        for (uint32_t j = 0; j < l; j++)
            if (r[at + 4 + j] == 0)
                return bad(err, what, at + 4 + j, "NUL in the mask path");
        v->mask_path = (const char *)r + at + 4;
        v->mask_path_len = l;
        at += 4 + (size_t)l;
    }
    if (v->flags & CH_TG_FLAG_MASK_IMAGE) {
        if (len - at < 4)
            return bad(err, what, at, "mask image length past the end");
        uint32_t l = rd32(r + at);
        if (l == 0 || l > len - at - 4)
            return bad(err, what, at, "mask image empty or past the end");
        v->mask_image = r + at + 4;
        v->mask_image_len = l;
        at += 4 + (size_t)l;
    }
    if (at != len)
        return bad(err, what, at, "bytes after the last section");
    return CHUTE_OK;
}

int64_t ch_tg_ann_id(const ch_tg_view *v, uint32_t i)
{
    int64_t x;
    memcpy(&x, v->rec + v->off_ids + (size_t)i * 8, 8);
    return x;
}

void ch_tg_box(const ch_tg_view *v, uint32_t i, float out[4])
{
    memcpy(out, v->rec + v->off_box + (size_t)i * 16, 16);
}

int32_t ch_tg_label(const ch_tg_view *v, uint32_t i)
{
    int32_t x;
    memcpy(&x, v->rec + v->off_label + (size_t)i * 4, 4);
    return x;
}

uint8_t ch_tg_crowd(const ch_tg_view *v, uint32_t i)
{
    return v->rec[v->off_crowd + i];
}

void ch_tg_keypoints(const ch_tg_view *v, uint32_t i, float *out)
{
    memcpy(out, v->rec + v->off_kp + (size_t)i * v->k * 12, (size_t)v->k * 12);
}

int ch_tg_seg(const ch_tg_view *v, uint32_t i, size_t *body)
{
    if (!(v->flags & CH_TG_FLAG_SEG))
        return CH_SEG_NONE;
    size_t at = v->off_seg;
    /* checked by ch_tg_decode: the walk cannot fail */
    for (uint32_t j = 0; j < i; j++)
        seg_walk(v->rec, v->len, &at, NULL, NULL);
    *body = at + 1;
    return v->rec[at];
}

int ch_tg_mask(const ch_tg_view *v, uint32_t i, uint32_t h, uint32_t w, uint8_t *plane,
               chute_error *err)
{
    size_t p;
    char why[160];
    int kind = ch_tg_seg(v, i, &p);
    if (kind == CH_SEG_NONE)
        return ch_err(err, CHUTE_ENOTFOUND, "object %u (annotation %lld) has no segmentation", i,
                      (long long)ch_tg_ann_id(v, i));
    if (kind == CH_SEG_RLE) {
        uint32_t rh = rd32(v->rec + p), rw = rd32(v->rec + p + 4), m = rd32(v->rec + p + 8);
        if (rh != h || rw != w)
            return ch_err(err, CHUTE_EFORMAT,
                          "annotation %lld: RLE mask is %ux%u, its image %ux%u",
                          (long long)ch_tg_ann_id(v, i), rw, rh, w, h);
        /* counts may be unaligned in the record: paint from a copy-free walk */
        uint64_t pos = 0;
        for (uint32_t j = 0; j < m; j++) {
            uint64_t c = rd32(v->rec + p + 12 + (size_t)j * 4);
            if (j & 1)
                for (uint64_t t = pos; t < pos + c; t++) {
                    uint64_t x = t / h, y = t - x * h;
                    plane[y * w + x] = 1;
                }
            pos += c;
        }
        return CHUTE_OK;
    }
    uint32_t np = rd32(v->rec + p);
    p += 4;
    ch_u32v cnts = {0};
    double *xy = NULL;
    int rc = CHUTE_OK;
    for (uint32_t k = 0; k < np && rc == CHUTE_OK; k++) {
        uint32_t L = rd32(v->rec + p);
        p += 4;
        double *n = realloc(xy, (size_t)L * 8);
        if (!n) {
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory for a polygon");
            break;
        }
        xy = n;
        memcpy(xy, v->rec + p, (size_t)L * 8);
        p += (size_t)L * 8;
        rc = ch_rle_from_poly(xy, L / 2, h, w, &cnts, why, sizeof why);
        if (rc == CHUTE_ENOMEM)
            rc = ch_err(err, rc, "out of memory rasterising a polygon");
        else if (rc != CHUTE_OK)
            rc = ch_err(err, rc, "annotation %lld polygon %u: %s", (long long)ch_tg_ann_id(v, i), k,
                        why);
        else
            ch_rle_paint(cnts.v, cnts.n, h, w, plane);
    }
    free(xy);
    ch_u32v_free(&cnts);
    return rc;
}
