/*
 * rle.c — COCO's mask encodings, decoded exactly as pycocotools decodes them.
 *
 * A segmentation in a COCO file is either polygons, an uncompressed RLE
 * ({"counts": [...], "size": [h, w]}) or a compressed RLE (counts as a
 * string).  Users compare chute's masks with pycocotools' annToMask, so
 * this file follows maskApi.c step for step: rleFrString's 6-bit varint
 * with the delta against the count two back, rleFrPoly's 5x upsampled
 * boundary walk with its int truncations and its y-boundary rounding, and
 * rleDecode's column-major runs.  Where maskApi.c relies on undefined
 * behaviour or trusts its input (shifts past 31 bits, counts that overrun
 * the mask, coordinates whose 5x does not fit an int, walks of billions of
 * points) this code refuses instead, with a reason; on everything
 * maskApi.c decodes well it gives the same bits (tests/test_targets.py
 * checks against pycocotools' own output).
 *
 * No I/O and no JSON here: the COCO reader hands over strings and numbers.
 */
#include "targets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ch_u32v_push(ch_u32v *a, uint32_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(uint32_t))
            return CHUTE_ENOMEM;
        uint32_t *v = realloc(a->v, cap * sizeof(uint32_t));
        if (!v)
            return CHUTE_ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return CHUTE_OK;
}

void ch_u32v_free(ch_u32v *a)
{
    free(a->v);
    memset(a, 0, sizeof *a);
}

static int why_set(char *why, size_t whysz, const char *msg, long long a)
{
    if (why && whysz)
        snprintf(why, whysz, msg, a);
    return CHUTE_ECORRUPT;
}

int ch_rle_from_string(const char *s, size_t len, ch_u32v *out, char *why, size_t whysz)
{
    out->n = 0;
    size_t p = 0;
    while (p < len) {
        int64_t x = 0;
        int k = 0, more = 1;
        while (more) {
            if (p >= len)
                return why_set(why, whysz, "RLE string ends inside a count (byte %lld)", (long long)p);
            int c = (unsigned char)s[p] - 48;
            if (c < 0 || c > 63)
                return why_set(why, whysz, "RLE string has a byte outside '0'..'o' at %lld",
                               (long long)p);
            /* 7 groups of 5 bits hold any uint32 difference; maskApi.c
             * shifts an int past 31 bits beyond that (undefined). */
            if (k >= 7)
                return why_set(why, whysz, "RLE count longer than 7 characters at byte %lld",
                               (long long)p);
            x |= (int64_t)(c & 0x1f) << (5 * k);
            more = c & 0x20;
            p++;
            k++;
            if (!more && (c & 0x10))
                x |= (int64_t)-1 * ((int64_t)1 << (5 * k)); /* sign-extend */
        }
        if (out->n > 2)
            x += (int64_t)out->v[out->n - 2];
        if (x < 0 || x > (int64_t)UINT32_MAX)
            return why_set(why, whysz, "RLE count %lld is outside 0..2^32-1", (long long)x);
        if (ch_u32v_push(out, (uint32_t)x) != CHUTE_OK)
            return CHUTE_ENOMEM;
    }
    return CHUTE_OK;
}

int ch_rle_check(const uint32_t *cnts, size_t m, uint32_t h, uint32_t w, char *why, size_t whysz)
{
    uint64_t area = (uint64_t)h * w;
    if (area > CH_MASK_MAX_PIXELS)
        return why_set(why, whysz, "mask of %lld pixels is over the 2^31-1 limit", (long long)area);
    uint64_t sum = 0;
    for (size_t j = 0; j < m; j++) {
        sum += cnts[j];
        if (sum > area)
            return why_set(why, whysz, "RLE counts run past the mask's %lld pixels", (long long)area);
    }
    if (sum != area)
        return why_set(why, whysz, "RLE counts cover %lld pixels, not the mask's h*w",
                       (long long)sum);
    return CHUTE_OK;
}

void ch_rle_paint(const uint32_t *cnts, size_t m, uint32_t h, uint32_t w, uint8_t *plane)
{
    uint64_t pos = 0; /* column-major index: x * h + y */
    for (size_t j = 0; j < m; j++) {
        uint64_t c = cnts[j];
        if (j & 1) {
            for (uint64_t t = pos; t < pos + c; t++) {
                uint64_t x = t / h, y = t - x * h;
                plane[y * w + x] = 1;
            }
        }
        pos += c;
    }
}

int ch_poly_check(const double *xy, size_t k, char *why, size_t whysz)
{
    if (k < 3)
        return why_set(why, whysz, "polygon of %lld points (at least 3)", (long long)k);
    for (size_t j = 0; j < 2 * k; j++)
        if (!isfinite(xy[j]) || fabs(xy[j]) > CH_POLY_MAX_COORD)
            return why_set(why, whysz, "polygon coordinate %lld is not finite or beyond 1e8",
                           (long long)j);
    /* the walk's length, as ch_rle_from_poly computes it */
    uint64_t m = 0;
    for (size_t j = 0; j < k; j++) {
        size_t n = j + 1 < k ? j + 1 : 0;
        long long x0 = (int)(5 * xy[j * 2] + .5), x1 = (int)(5 * xy[n * 2] + .5);
        long long y0 = (int)(5 * xy[j * 2 + 1] + .5), y1 = (int)(5 * xy[n * 2 + 1] + .5);
        long long dx = llabs(x0 - x1), dy = llabs(y0 - y1);
        m += (uint64_t)(dx > dy ? dx : dy) + 1;
        if (m > CH_POLY_MAX_STEPS)
            return why_set(why, whysz, "polygon boundary walk over %lld steps (vertices too far apart)",
                           (long long)CH_POLY_MAX_STEPS);
    }
    return CHUTE_OK;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t c = *(const uint32_t *)a, d = *(const uint32_t *)b;
    return c > d ? 1 : c < d ? -1 : 0;
}

int ch_rle_from_poly(const double *xy, size_t k, uint32_t h, uint32_t w, ch_u32v *out, char *why,
                     size_t whysz)
{
    out->n = 0;
    int rc = ch_poly_check(xy, k, why, whysz);
    if (rc != CHUTE_OK)
        return rc;
    if ((uint64_t)h * w > CH_MASK_MAX_PIXELS)
        return why_set(why, whysz, "mask of %lld pixels is over the 2^31-1 limit",
                       (long long)((uint64_t)h * w));
    const double scale = 5;
    rc = CHUTE_ENOMEM;
    int *x = malloc(sizeof(int) * (k + 1)), *y = malloc(sizeof(int) * (k + 1));
    int *u = NULL, *v = NULL, *bx = NULL, *by = NULL;
    uint32_t *a = NULL;
    if (!x || !y)
        goto done;
    for (size_t j = 0; j < k; j++)
        x[j] = (int)(scale * xy[j * 2 + 0] + .5);
    x[k] = x[0];
    for (size_t j = 0; j < k; j++)
        y[j] = (int)(scale * xy[j * 2 + 1] + .5);
    y[k] = y[0];
    uint64_t m = 0;
    for (size_t j = 0; j < k; j++) {
        int64_t dx = llabs((long long)x[j] - x[j + 1]), dy = llabs((long long)y[j] - y[j + 1]);
        m += (uint64_t)(dx > dy ? dx : dy) + 1;
        if (m > CH_POLY_MAX_STEPS) {
            rc = why_set(why, whysz, "polygon boundary walk over %lld steps",
                         (long long)CH_POLY_MAX_STEPS);
            goto done;
        }
    }
    u = malloc(sizeof(int) * m);
    v = malloc(sizeof(int) * m);
    if (!u || !v)
        goto done;
    m = 0;
    for (size_t j = 0; j < k; j++) {
        int xs = x[j], xe = x[j + 1], ys = y[j], ye = y[j + 1], dx, dy, t, d;
        int flip;
        double s;
        dx = abs(xe - xs);
        dy = abs(ys - ye);
        flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
        if (flip) {
            t = xs; xs = xe; xe = t;
            t = ys; ys = ye; ye = t;
        }
        /* A repeated vertex (dx == dy == 0) is 0/0 in maskApi.c and its one
         * point gets v = (int)NaN (undefined; x86 gives INT_MIN).  That v is
         * never read: the point's u equals both neighbours' (the edges
         * around it end and start on the same vertex), and the downsampling
         * below only reads v where u changes.  s = 0 keeps it defined. */
        s = dx == 0 && dy == 0 ? 0.0
            : dx >= dy         ? (double)(ye - ys) / dx
                               : (double)(xe - xs) / dy;
        if (dx >= dy)
            for (d = 0; d <= dx; d++) {
                t = flip ? dx - d : d;
                u[m] = t + xs;
                v[m] = (int)(ys + s * t + .5);
                m++;
            }
        else
            for (d = 0; d <= dy; d++) {
                t = flip ? dy - d : d;
                v[m] = t + ys;
                u[m] = (int)(xs + s * t + .5);
                m++;
            }
    }
    bx = malloc(sizeof(int) * (m ? m : 1));
    by = malloc(sizeof(int) * (m ? m : 1));
    a = malloc(sizeof(uint32_t) * (m + 1));
    if (!bx || !by || !a)
        goto done;
    size_t n = 0;
    for (size_t j = 1; j < m; j++)
        if (u[j] != u[j - 1]) {
            double xd = (double)(u[j] < u[j - 1] ? u[j] : u[j] - 1);
            xd = (xd + .5) / scale - .5;
            if (floor(xd) != xd || xd < 0 || xd > (double)w - 1)
                continue;
            double yd = (double)(v[j] < v[j - 1] ? v[j] : v[j - 1]);
            yd = (yd + .5) / scale - .5;
            if (yd < 0)
                yd = 0;
            else if (yd > h)
                yd = h;
            yd = ceil(yd);
            bx[n] = (int)xd;
            by[n] = (int)yd;
            n++;
        }
    for (size_t j = 0; j < n; j++)
        a[j] = (uint32_t)((uint64_t)bx[j] * h + (uint64_t)by[j]);
    a[n++] = (uint32_t)((uint64_t)h * w);
    qsort(a, n, sizeof(uint32_t), cmp_u32);
    uint32_t p = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t t = a[j];
        a[j] -= p;
        p = t;
    }
    size_t j = 0;
    rc = ch_u32v_push(out, a[j++]);
    while (rc == CHUTE_OK && j < n) {
        if (a[j] > 0)
            rc = ch_u32v_push(out, a[j++]);
        else {
            j++;
            if (j < n)
                out->v[out->n - 1] += a[j++];
        }
    }
done:
    free(x);
    free(y);
    free(u);
    free(v);
    free(bx);
    free(by);
    free(a);
    return rc;
}
