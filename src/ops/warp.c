/*
 * warp.c — applying a plan (plan.h): the image, masks, boxes, keypoints.
 *
 * Image.  The leading run of axis-aligned steps (crops inside the canvas,
 * at most one resize, flips) is one pass of the antialiased separable
 * resampler (resample.c), reading only ch_geo_window's rectangle: that is
 * RandomResizedCrop + flip, or resize + centre crop, exactly as the
 * classification path computes them, and the filter's clip box is the
 * canvas the resize saw (torchvision resizes a crop, or crops a resize).
 * The steps after that run each make one intermediate canvas, as
 * torchvision's sequence does: pad and out-of-canvas crop copy with the
 * fill value, flips copy reversed, a resize is another resampler pass, and
 * rotation/affine is a bilinear warp that reproduces torchvision's tensor
 * arithmetic (affine_grid at output pixel centres, grid_sample with zero
 * padding, then its fill blend  v = (v - fill) * m + fill  where m is the
 * in-image share of the taps, rounded half to even) in float32.  Like
 * torchvision's, that warp does not antialias: a plan that shrinks after a
 * rotation should put its resize before it (rrc, resize, lsj first), which
 * is where the geometry strings put them.  Intermediates live in the
 * worker's scratch (aug_px, aug_tmp), grown once and reused.
 *
 * Masks go through every step with nearest-neighbour rules torchvision
 * uses (floor(dst * in / out) for resize, grid_sample's nearest for the
 * warp), so labels are never blended.  Boxes and keypoints go step by step
 * too, so the clamping of each step matches torchvision's.
 */
#include "plan.h"

#include <math.h>
#include <string.h>

void ch_geo_step_matrix(const ch_geo_step *st, int target, ch_affine *m);

/* --- the leading axis-aligned run */

typedef struct lead_run {
    uint32_t k;       /* steps it covers (0: none) */
    ch_crop c;        /* source rectangle, clip box, horizontal flip */
    int vflip;
    uint32_t w, h;    /* canvas after it */
} lead_run;

static void lead(const ch_geo_plan *p, lead_run *r)
{
    double sx = 1, tx = 0, sy = 1, ty = 0;
    double cx0 = 0, cx1 = p->src_w, cy0 = 0, cy1 = p->src_h;
    int resized = 0;
    uint32_t k = 0;
    for (; k < p->n; k++) {
        const ch_geo_step *st = &p->step[k];
        if (st->kind == CH_GEO_CROP) {
            int64_t t = st->i[0], l = st->i[1];
            if (t < 0 || l < 0 || l + st->i[3] > (int64_t)st->in_w || t + st->i[2] > (int64_t)st->in_h)
                break;
            tx -= (double)l;
            ty -= (double)t;
            if (!resized) { /* the canvas the resize will see, in source pixels */
                double a = -tx / sx, b = (st->out_w - tx) / sx;
                cx0 = fmax(cx0, fmin(a, b));
                cx1 = fmin(cx1, fmax(a, b));
                a = -ty / sy;
                b = (st->out_h - ty) / sy;
                cy0 = fmax(cy0, fmin(a, b));
                cy1 = fmin(cy1, fmax(a, b));
            }
        } else if (st->kind == CH_GEO_RESIZE) {
            if (resized)
                break;
            double fx = (double)st->out_w / st->in_w, fy = (double)st->out_h / st->in_h;
            sx *= fx;
            tx *= fx;
            sy *= fy;
            ty *= fy;
            resized = 1;
        } else if (st->kind == CH_GEO_HFLIP) {
            sx = -sx;
            tx = st->in_w - tx;
        } else if (st->kind == CH_GEO_VFLIP) {
            sy = -sy;
            ty = st->in_h - ty;
        } else {
            break;
        }
    }
    r->k = k;
    r->w = k ? p->step[k - 1].out_w : p->src_w;
    r->h = k ? p->step[k - 1].out_h : p->src_h;
    double a = -tx / sx, b = (r->w - tx) / sx;
    r->c.x0 = fmin(a, b);
    r->c.x1 = fmax(a, b);
    a = -ty / sy;
    b = (r->h - ty) / sy;
    r->c.y0 = fmin(a, b);
    r->c.y1 = fmax(a, b);
    /* crops are whole pixels before the resize: the clip box is exact */
    r->c.clip_x0 = (int32_t)nearbyint(cx0);
    r->c.clip_x1 = (int32_t)nearbyint(cx1);
    r->c.clip_y0 = (int32_t)nearbyint(cy0);
    r->c.clip_y1 = (int32_t)nearbyint(cy1);
    r->c.flip = sx < 0;
    r->vflip = sy < 0;
    if (k > 0 && p->denom > 1) /* read from the 1/denom decode, as the classification path */
        ch_crop_scale(&r->c, p->denom, p->scaled_w, p->scaled_h, &r->c);
}

int ch_geo_lead(const ch_geo_plan *p, double *crop_w, double *crop_h, uint32_t *out_w,
                uint32_t *out_h)
{
    ch_geo_plan q = *p;
    q.denom = 0;
    lead_run r;
    lead(&q, &r);
    *crop_w = r.c.x1 - r.c.x0;
    *crop_h = r.c.y1 - r.c.y0;
    *out_w = r.w;
    *out_h = r.h;
    return r.k > 0;
}

int ch_geo_one_pass(const ch_geo_plan *p, ch_crop *c)
{
    lead_run r;
    lead(p, &r);
    if (r.k == 0 || r.k != p->n || r.vflip)
        return 0;
    *c = r.c;
    return 1;
}

int ch_geo_set_denom(ch_geo_plan *p, uint32_t denom, uint32_t sw, uint32_t sh)
{
    double cw, chh;
    uint32_t ow, oh;
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8)
        return CHUTE_EINVAL;
    if (denom > 1 && (!ch_geo_lead(p, &cw, &chh, &ow, &oh) || sw == 0 || sh == 0))
        return CHUTE_EINVAL;
    p->denom = denom;
    p->scaled_w = sw;
    p->scaled_h = sh;
    return CHUTE_OK;
}

/* The source pixels the resampler's taps read along one axis (the same
 * arithmetic as resample.c's axis_taps, first and last output pixel). */
static void taps_span(double in0, double in1, uint32_t out, int32_t clip0, int32_t clip1,
                      int32_t *lo, int32_t *hi)
{
    double scale = (in1 - in0) / out, support = scale < 1.0 ? 1.0 : scale;
    double c0 = in0 + 0.5 * scale, c1 = in0 + (out - 0.5) * scale;
    double a = fmax(floor(c0 - support + 0.5), clip0), b = fmin(floor(c1 + support + 0.5), clip1);
    if (b <= a) { /* the degenerate case takes the nearest pixel */
        a = fmin(fmax(floor(c0), clip0), clip1 - 1);
        b = fmax(fmin(floor(c1), clip1 - 1), a) + 1;
    }
    *lo = (int32_t)a;
    *hi = (int32_t)b;
}

void ch_geo_window(const ch_geo_plan *p, int32_t *x0, int32_t *y0, int32_t *x1, int32_t *y1)
{
    lead_run r;
    lead(p, &r);
    if (r.k == 0) { /* the first step pads or warps: it may read anything (full scale) */
        *x0 = *y0 = 0;
        *x1 = (int32_t)CH_MIN(p->src_w, (uint32_t)INT32_MAX);
        *y1 = (int32_t)CH_MIN(p->src_h, (uint32_t)INT32_MAX);
        return;
    }
    taps_span(r.c.x0, r.c.x1, r.w, r.c.clip_x0, r.c.clip_x1, x0, x1);
    taps_span(r.c.y0, r.c.y1, r.h, r.c.clip_y0, r.c.clip_y1, y0, y1);
}

/* --- image steps on uint8 HWC canvases */

typedef struct canvas {
    const uint8_t *px;
    size_t stride;
    uint32_t w, h;
    int ch; /* 3 image, 1 mask */
} canvas;

static int reserve(ch_buf *b, uint32_t w, uint32_t h, int ch, uint8_t **out)
{
    size_t n = (size_t)w * h * (size_t)ch; /* canvases are < 2^28 pixels (plan.c) */
    if (ch_buf_reserve(b, n ? n : 1) != CHUTE_OK)
        return CHUTE_ENOMEM;
    *out = b->data;
    return CHUTE_OK;
}

/* out[y][x] = in[y + top][x + left], fill outside: crop and pad alike */
static void shift_copy(const canvas *in, int64_t top, int64_t left, uint32_t w, uint32_t h,
                       const uint8_t *fill, uint8_t *out)
{
    const int ch = in->ch;
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *d = out + (size_t)y * w * ch;
        int64_t sy = (int64_t)y + top;
        int64_t xa = CH_MAX(0, -left), xb = CH_MIN((int64_t)w, (int64_t)in->w - left);
        if (sy < 0 || sy >= in->h || xb <= xa) {
            xa = xb = w;
        }
        for (int64_t x = 0; x < xa && x < (int64_t)w; x++)
            memcpy(d + x * ch, fill, (size_t)ch);
        if (xb > xa)
            memcpy(d + xa * ch, in->px + (size_t)sy * in->stride + (size_t)(xa + left) * ch,
                   (size_t)(xb - xa) * ch);
        for (int64_t x = CH_MAX(xb, xa); x < (int64_t)w; x++)
            memcpy(d + x * ch, fill, (size_t)ch);
    }
}

static void flip_copy(const canvas *in, int horiz, uint8_t *out)
{
    const int ch = in->ch;
    for (uint32_t y = 0; y < in->h; y++) {
        const uint8_t *s = in->px + (size_t)(horiz ? y : in->h - 1 - y) * in->stride;
        uint8_t *d = out + (size_t)y * in->w * ch;
        if (!horiz) {
            memcpy(d, s, (size_t)in->w * ch);
            continue;
        }
        for (uint32_t x = 0; x < in->w; x++)
            memcpy(d + (size_t)x * ch, s + (size_t)(in->w - 1 - x) * ch, (size_t)ch);
    }
}

/* torchvision's inverse matrix for F.affine with the default centre
 * (relative to the canvas centre), as float32 the way it builds theta, and
 * the per-output-pixel source coordinate of its affine_grid + grid_sample
 * (align_corners=False). */
typedef struct warp_map {
    float r[6]; /* theta / (0.5 * in size), rows for x and y */
    float hx, hy; /* 0.5 * (out - 1) */
    float wx, wy; /* in size / 2 */
} warp_map;

static void warp_setup(const ch_geo_step *st, warp_map *m)
{
    const double DEGR = 3.14159265358979323846 / 180.0;
    double rot = st->angle * DEGR, sx = st->shx * DEGR, sy = st->shy * DEGR;
    double a = cos(rot - sy) / cos(sy), b = -(a * tan(sx) + sin(rot));
    double c = sin(rot - sy) / cos(sy), d = cos(rot) - c * tan(sx);
    double t[6] = {d / st->scale, -b / st->scale, 0, -c / st->scale, a / st->scale, 0};
    double tx = st->expand ? 0 : st->tx, ty = st->expand ? 0 : st->ty;
    t[2] += -t[0] * tx - t[1] * ty;
    t[5] += -t[3] * tx - t[4] * ty;
    float hw = 0.5f * (float)st->in_w, hh = 0.5f * (float)st->in_h;
    for (int k = 0; k < 3; k++) {
        m->r[k] = (float)t[k] / hw;
        m->r[3 + k] = (float)t[3 + k] / hh;
    }
    m->hx = ((float)st->out_w - 1.0f) * 0.5f;
    m->hy = ((float)st->out_h - 1.0f) * 0.5f;
    m->wx = (float)st->in_w * 0.5f;
    m->wy = (float)st->in_h * 0.5f;
}

static inline void warp_src(const warp_map *m, uint32_t x, uint32_t y, float *ix, float *iy)
{
    float xg = (float)x - m->hx, yg = (float)y - m->hy;
    float gx = xg * m->r[0] + yg * m->r[1] + m->r[2];
    float gy = xg * m->r[3] + yg * m->r[4] + m->r[5];
    *ix = (gx + 1.0f) * m->wx - 0.5f;
    *iy = (gy + 1.0f) * m->wy - 0.5f;
}

/* Round half to even (torch's round_, grid_sample's nearbyint) for |v| <
 * 2^22 under the default rounding mode, without glibc's nearbyintf, which
 * saves and restores the floating-point environment on every call. */
static inline float round_even(float v)
{
    const float big = 12582912.0f; /* 1.5 * 2^23 (not folded without -ffast-math) */
    return (v + big) - big;
}

static void warp_bilinear(const canvas *in, const ch_geo_step *st, const uint8_t *fill,
                          uint8_t *out)
{
    warp_map m;
    warp_setup(st, &m);
    const int W = (int)in->w, H = (int)in->h;
    for (uint32_t y = 0; y < st->out_h; y++)
        for (uint32_t x = 0; x < st->out_w; x++) {
            float ix, iy;
            warp_src(&m, x, y, &ix, &iy);
            float acc[3] = {0, 0, 0}, mask = 0;
            if (ix >= 0.0f && iy >= 0.0f && ix < (float)(W - 1) && iy < (float)(H - 1)) {
                /* inside: all four taps, no bounds checks (same sums) */
                int x0 = (int)ix, y0 = (int)iy;
                float ax = ix - (float)x0, ay = iy - (float)y0;
                const float wt[4] = {(1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay};
                const uint8_t *s0 = in->px + (size_t)y0 * in->stride + (size_t)x0 * 3;
                const uint8_t *s1 = s0 + in->stride;
                for (int c = 0; c < 3; c++)
                    acc[c] = wt[0] * s0[c] + wt[1] * s0[3 + c] + wt[2] * s1[c] + wt[3] * s1[3 + c];
                mask = wt[0] + wt[1] + wt[2] + wt[3];
            } else if (ix > -1.0f && iy > -1.0f && ix < (float)W && iy < (float)H) {
                float fx = floorf(ix), fy = floorf(iy);
                int x0 = (int)fx, y0 = (int)fy;
                float ax = ix - fx, ay = iy - fy;
                const float wt[4] = {(1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay};
                for (int k = 0; k < 4; k++) {
                    int sx = x0 + (k & 1), sy = y0 + (k >> 1);
                    if (sx < 0 || sy < 0 || sx >= W || sy >= H)
                        continue;
                    const uint8_t *s = in->px + (size_t)sy * in->stride + (size_t)sx * 3;
                    for (int c = 0; c < 3; c++)
                        acc[c] += wt[k] * s[c];
                    mask += wt[k];
                }
            }
            uint8_t *d = out + ((size_t)y * st->out_w + x) * 3;
            for (int c = 0; c < 3; c++) {
                float v = round_even((acc[c] - fill[c]) * mask + fill[c]);
                d[c] = !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
            }
        }
}

static void warp_nearest(const canvas *in, const ch_geo_step *st, uint8_t fill, uint8_t *out)
{
    warp_map m;
    warp_setup(st, &m);
    for (uint32_t y = 0; y < st->out_h; y++)
        for (uint32_t x = 0; x < st->out_w; x++) {
            float ix, iy;
            warp_src(&m, x, y, &ix, &iy);
            /* outside +-2^22 (where round_even stops being exact) is outside anyway */
            int near = fabsf(ix) < 4194304.0f && fabsf(iy) < 4194304.0f;
            float rx = near ? round_even(ix) : -1, ry = near ? round_even(iy) : -1;
            int in_img = rx >= 0 && ry >= 0 && rx < (float)in->w && ry < (float)in->h;
            out[(size_t)y * st->out_w + x] =
                in_img ? in->px[(size_t)ry * in->stride + (size_t)rx] : fill;
        }
}

static int resize_rgb8(const canvas *in, const ch_geo_step *st, uint8_t *out,
                       ch_resize_scratch *s)
{
    ch_crop c;
    ch_geom_full(in->w, in->h, &c);
    ch_resize_plan rp;
    int rc = ch_resize_plan_make(&rp, &c, st->out_w, st->out_h, s);
    if (rc != CHUTE_OK)
        return rc;
    /* uint8 NHWC rows are out_w pixels: size is the row length there */
    ch_out_spec o = {.size = st->out_w, .dtype = CHUTE_DTYPE_UINT8, .layout = CHUTE_LAYOUT_NHWC};
    return ch_resize_run(&rp, in->px, in->stride, 0, 0, 0, &o, out, s);
}

int ch_geo_run_rgb8(const ch_geo_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                    int32_t py, uint32_t ww, uint32_t wh, const uint8_t fill[3], uint8_t *dst,
                    ch_resize_scratch *s)
{
    static const uint8_t zero[3] = {0, 0, 0};
    lead_run r;
    lead(p, &r);
    canvas cur = {pix, stride, ww, wh, 3};
    ch_buf *bufs[2] = {&s->aug_px, &s->aug_tmp};
    int next = 0, rc;
    uint8_t *out;
    if (r.k > 0) {
        ch_resize_plan rp;
        if ((rc = ch_resize_plan_make(&rp, &r.c, r.w, r.h, s)) != CHUTE_OK)
            return rc;
        if (rp.x.lo < px || rp.y.lo < py || (int64_t)rp.x.hi > (int64_t)px + ww ||
            (int64_t)rp.y.hi > (int64_t)py + wh)
            return CHUTE_EINVAL; /* the window does not hold what the plan reads */
        if ((rc = reserve(bufs[next], r.w, r.h, 3, &out)) != CHUTE_OK)
            return rc;
        ch_out_spec o = {.size = r.w, .dtype = CHUTE_DTYPE_UINT8, .layout = CHUTE_LAYOUT_NHWC};
        if ((rc = ch_resize_run(&rp, pix, stride, px, py, r.c.flip, &o, out, s)) != CHUTE_OK)
            return rc;
        if (r.vflip) /* rows reversed in place */
            for (uint32_t y = 0; y < r.h / 2; y++)
                for (size_t i = 0; i < (size_t)r.w * 3; i++) {
                    uint8_t *a = out + (size_t)y * r.w * 3 + i,
                            *b = out + (size_t)(r.h - 1 - y) * r.w * 3 + i, t = *a;
                    *a = *b;
                    *b = t;
                }
        cur = (canvas){out, (size_t)r.w * 3, r.w, r.h, 3};
        next = 1;
    } else if (px != 0 || py != 0 || ww < p->src_w || wh < p->src_h) {
        return CHUTE_EINVAL; /* a plan that starts with a pad or a warp reads the whole image */
    } else {
        cur.w = p->src_w;
        cur.h = p->src_h;
    }
    for (uint32_t k = r.k; k < p->n; k++) {
        const ch_geo_step *st = &p->step[k];
        const ch_geo_step *nx = k + 1 < p->n ? &p->step[k + 1] : NULL;
        if (st->kind == CH_GEO_PAD && !st->zero && nx && nx->kind == CH_GEO_CROP &&
            nx->i[0] >= 0 && nx->i[1] >= 0 && (int64_t)nx->i[0] + nx->i[2] <= st->out_h &&
            (int64_t)nx->i[1] + nx->i[3] <= st->out_w) {
            /* a pad then a crop inside the padded canvas (RandomCrop with
             * pad_if_needed, LSJ): one shifted copy, every outside pixel
             * from the pad's fill, without the padded canvas */
            if ((rc = reserve(bufs[next], nx->out_w, nx->out_h, 3, &out)) != CHUTE_OK)
                return rc;
            shift_copy(&cur, (int64_t)nx->i[0] - st->i[1], (int64_t)nx->i[1] - st->i[0],
                       nx->out_w, nx->out_h, fill, out);
            cur = (canvas){out, (size_t)nx->out_w * 3, nx->out_w, nx->out_h, 3};
            next ^= 1;
            k++;
            continue;
        }
        if ((rc = reserve(bufs[next], st->out_w, st->out_h, 3, &out)) != CHUTE_OK)
            return rc;
        switch (st->kind) {
        case CH_GEO_CROP:
            shift_copy(&cur, st->i[0], st->i[1], st->out_w, st->out_h, st->zero ? zero : fill,
                       out);
            break;
        case CH_GEO_PAD:
            shift_copy(&cur, -(int64_t)st->i[1], -(int64_t)st->i[0], st->out_w, st->out_h,
                       st->zero ? zero : fill, out);
            break;
        case CH_GEO_HFLIP:
        case CH_GEO_VFLIP:
            flip_copy(&cur, st->kind == CH_GEO_HFLIP, out);
            break;
        case CH_GEO_RESIZE:
            if ((rc = resize_rgb8(&cur, st, out, s)) != CHUTE_OK)
                return rc;
            break;
        case CH_GEO_AFFINE:
            warp_bilinear(&cur, st, fill, out);
            break;
        }
        cur = (canvas){out, (size_t)st->out_w * 3, st->out_w, st->out_h, 3};
        next ^= 1;
    }
    for (uint32_t y = 0; y < cur.h; y++)
        memcpy(dst + (size_t)y * cur.w * 3, cur.px + (size_t)y * cur.stride, (size_t)cur.w * 3);
    return CHUTE_OK;
}

/* --- masks */

/* torch's upsample "nearest" index (aten nearest_idx): identity at equal
 * sizes, a shift at exactly 2x, else floor(dst * (float)in / out). */
static uint32_t nearest_idx(uint32_t o, uint32_t in, uint32_t out)
{
    if (in == out)
        return o;
    if (out == 2 * in)
        return o >> 1;
    float scale = (float)in / (float)out;
    uint64_t i = (uint64_t)floorf((float)o * scale);
    return (uint32_t)CH_MIN(i, (uint64_t)in - 1);
}

int ch_geo_run_mask(const ch_geo_plan *p, const uint8_t *src, uint8_t fill, uint8_t *dst,
                    ch_buf *scratch)
{
    /* two planes of the largest canvas, ping-pong */
    size_t big = (size_t)p->src_w * p->src_h;
    for (uint32_t k = 0; k < p->n; k++)
        big = CH_MAX(big, (size_t)p->step[k].out_w * p->step[k].out_h);
    if (ch_buf_reserve(scratch, 2 * big + 1) != CHUTE_OK)
        return CHUTE_ENOMEM;
    static const uint8_t zero[1] = {0};
    uint8_t *buf[2] = {scratch->data, scratch->data + big};
    canvas cur = {src, p->src_w, p->src_w, p->src_h, 1};
    int next = 0;
    for (uint32_t k = 0; k < p->n; k++) {
        const ch_geo_step *st = &p->step[k];
        uint8_t *out = buf[next];
        switch (st->kind) {
        case CH_GEO_CROP:
            shift_copy(&cur, st->i[0], st->i[1], st->out_w, st->out_h, st->zero ? zero : &fill,
                       out);
            break;
        case CH_GEO_PAD:
            shift_copy(&cur, -(int64_t)st->i[1], -(int64_t)st->i[0], st->out_w, st->out_h,
                       st->zero ? zero : &fill, out);
            break;
        case CH_GEO_HFLIP:
        case CH_GEO_VFLIP:
            flip_copy(&cur, st->kind == CH_GEO_HFLIP, out);
            break;
        case CH_GEO_RESIZE:
            for (uint32_t y = 0; y < st->out_h; y++) {
                const uint8_t *srow = cur.px + (size_t)nearest_idx(y, st->in_h, st->out_h) * cur.stride;
                for (uint32_t x = 0; x < st->out_w; x++)
                    out[(size_t)y * st->out_w + x] = srow[nearest_idx(x, st->in_w, st->out_w)];
            }
            break;
        case CH_GEO_AFFINE:
            warp_nearest(&cur, st, fill, out);
            break;
        }
        cur = (canvas){out, st->out_w, st->out_w, st->out_h, 1};
        next ^= 1;
    }
    for (uint32_t y = 0; y < cur.h; y++)
        memcpy(dst + (size_t)y * cur.w, cur.px + (size_t)y * cur.stride, cur.w);
    return CHUTE_OK;
}

/* --- boxes and keypoints */

static void clamp_boxes(float *b, size_t n, uint32_t w, uint32_t h)
{
    for (size_t i = 0; i < n; i++) {
        float *q = b + i * 4;
        q[0] = fminf(fmaxf(q[0], 0), (float)w);
        q[2] = fminf(fmaxf(q[2], 0), (float)w);
        q[1] = fminf(fmaxf(q[1], 0), (float)h);
        q[3] = fminf(fmaxf(q[3], 0), (float)h);
    }
}

void ch_geo_run_boxes(const ch_geo_plan *p, float *b, size_t n)
{
    for (uint32_t k = 0; k < p->n; k++) {
        const ch_geo_step *st = &p->step[k];
        ch_affine m;
        ch_geo_step_matrix(st, 1, &m);
        for (size_t i = 0; i < n; i++) {
            float *q = b + i * 4;
            const double xs[4] = {q[0], q[2], q[2], q[0]}, ys[4] = {q[1], q[1], q[3], q[3]};
            double x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
            for (int c = 0; c < 4; c++) {
                double x = m.a * xs[c] + m.b * ys[c] + m.c, y = m.d * xs[c] + m.e * ys[c] + m.f;
                x0 = fmin(x0, x);
                x1 = fmax(x1, x);
                y0 = fmin(y0, y);
                y1 = fmax(y1, y);
            }
            q[0] = (float)x0;
            q[1] = (float)y0;
            q[2] = (float)x1;
            q[3] = (float)y1;
        }
        /* torchvision clamps after crop, pad and affine, not after
         * resize or flips */
        if (st->kind == CH_GEO_CROP || st->kind == CH_GEO_PAD || st->kind == CH_GEO_AFFINE)
            clamp_boxes(b, n, st->out_w, st->out_h);
    }
}

size_t ch_geo_sanitize(float *b, size_t n, uint32_t w, uint32_t h, float min_size,
                       float min_area, uint32_t *keep)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const float *q = b + i * 4;
        float bw = q[2] - q[0], bh = q[3] - q[1];
        int ok = bw >= min_size && bh >= min_size && bw * bh >= min_area && q[0] >= 0 &&
                 q[1] >= 0 && q[2] >= 0 && q[3] >= 0 && q[0] <= (float)w && q[2] <= (float)w &&
                 q[1] <= (float)h && q[3] <= (float)h; /* NaN fails every comparison */
        if (!ok)
            continue;
        if (k != i)
            memmove(b + k * 4, q, 4 * sizeof *b);
        keep[k++] = (uint32_t)i;
    }
    return k;
}

static void swap_pairs(float *xyv, size_t n, const uint32_t *map, uint32_t nk)
{
    if (!map || nk == 0)
        return;
    for (size_t o = 0; o + nk <= n; o += nk)
        for (uint32_t k = 0; k < nk; k++) {
            uint32_t j = map[k];
            if (j > k && j < nk && map[j] == k)
                for (int c = 0; c < 3; c++) {
                    float t = xyv[(o + k) * 3 + c];
                    xyv[(o + k) * 3 + c] = xyv[(o + j) * 3 + c];
                    xyv[(o + j) * 3 + c] = t;
                }
        }
}

void ch_geo_run_kpts(const ch_geo_plan *p, float *xyv, size_t n, const uint32_t *flip_map,
                     uint32_t nk)
{
    for (uint32_t k = 0; k < p->n; k++) {
        const ch_geo_step *st = &p->step[k];
        ch_affine m;
        ch_geo_step_matrix(st, 2, &m);
        for (size_t i = 0; i < n; i++) {
            float *q = xyv + i * 3;
            double x = q[0], y = q[1];
            q[0] = (float)(m.a * x + m.b * y + m.c);
            q[1] = (float)(m.d * x + m.e * y + m.f);
        }
        if (st->kind == CH_GEO_HFLIP || st->kind == CH_GEO_VFLIP)
            swap_pairs(xyv, n, flip_map, nk);
    }
    for (size_t i = 0; i < n; i++) {
        float *q = xyv + i * 3;
        if (!(q[0] >= 0 && q[0] < (float)p->w && q[1] >= 0 && q[1] < (float)p->h))
            q[2] = 0;
    }
}

void ch_box_convert(float *b, size_t n, ch_box_fmt from, ch_box_fmt to)
{
    if (from == to)
        return;
    for (size_t i = 0; i < n; i++) {
        float *q = b + i * 4, x0, y0, x1, y1;
        if (from == CH_BOX_XYWH) {
            x0 = q[0], y0 = q[1], x1 = q[0] + q[2], y1 = q[1] + q[3];
        } else if (from == CH_BOX_CXCYWH) {
            x0 = q[0] - q[2] / 2, y0 = q[1] - q[3] / 2, x1 = q[0] + q[2] / 2, y1 = q[1] + q[3] / 2;
        } else {
            x0 = q[0], y0 = q[1], x1 = q[2], y1 = q[3];
        }
        if (to == CH_BOX_XYWH) {
            q[0] = x0, q[1] = y0, q[2] = x1 - x0, q[3] = y1 - y0;
        } else if (to == CH_BOX_CXCYWH) {
            q[0] = (x0 + x1) / 2, q[1] = (y0 + y1) / 2, q[2] = x1 - x0, q[3] = y1 - y0;
        } else {
            q[0] = x0, q[1] = y0, q[2] = x1, q[3] = y1;
        }
    }
}
