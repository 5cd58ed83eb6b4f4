/*
 * resample.c — the fused output pass: antialiased bilinear resampling of
 * a decoded RGB8 window straight into a batch slot, with flip, normalize,
 * dtype cast and layout folded into the final write.
 *
 * Filter: PIL's "bilinear" resample as torchvision applies it to PIL
 * images: a triangle filter whose support widens with the downscale
 * factor (antialiasing), taps centred at (i + 0.5) * scale, support
 * clipped to the rectangle PIL would be resampling from, weights
 * normalised to sum to one.  Horizontal pass first (over only the rows
 * the vertical pass needs), then vertical, as PIL does.  Intermediate
 * values stay float rather than PIL's rounded bytes, so results differ
 * from PIL by rounding only.
 *
 * Memory: taps and the intermediate rows live in the worker's scratch,
 * which grows to the largest crop seen and is then reused.
 */
#include "ops.h"

#include <math.h>
#include <string.h>

static inline float tri(float x)
{
    x = fabsf(x);
    return x < 1.0f ? 1.0f - x : 0.0f;
}

static void axis_taps(ch_resize_axis *a, double in0, double in1, uint32_t out, int32_t clip0,
                      int32_t clip1)
{
    double scale = (in1 - in0) / out;
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * fscale;
    float ss = (float)(1.0 / fscale);
    a->lo = clip1;
    a->hi = clip0;
    for (uint32_t i = 0; i < out; i++) {
        double center = in0 + (i + 0.5) * scale;
        int32_t xmin = (int32_t)floor(center - support + 0.5);
        int32_t xmax = (int32_t)floor(center + support + 0.5);
        if (xmin < clip0)
            xmin = clip0;
        if (xmax > clip1)
            xmax = clip1;
        if (xmax <= xmin) { /* degenerate: take the nearest pixel */
            xmin = CH_MIN(CH_MAX((int32_t)floor(center), clip0), clip1 - 1);
            xmax = xmin + 1;
        }
        int32_t n = xmax - xmin;
        if (n > a->ksize)
            n = a->ksize;
        float *k = a->k + (size_t)i * a->ksize;
        float sum = 0;
        for (int32_t t = 0; t < n; t++) {
            float w = tri((float)((xmin + t) - center + 0.5) * ss);
            k[t] = w;
            sum += w;
        }
        if (sum <= 0) {
            k[0] = 1;
            n = 1;
            sum = 1;
        }
        for (int32_t t = 0; t < n; t++)
            k[t] /= sum;
        a->start[i] = xmin;
        a->count[i] = n;
        if (xmin < a->lo)
            a->lo = xmin;
        if (xmin + n > a->hi)
            a->hi = xmin + n;
    }
}

static size_t axis_bytes(uint32_t out, int32_t ksize)
{
    return (size_t)out * (2 * sizeof(int32_t) + (size_t)ksize * sizeof(float));
}

static void axis_bind(ch_resize_axis *a, uint8_t *mem, uint32_t out, int32_t ksize)
{
    a->ksize = ksize;
    a->k = (float *)mem;
    a->start = (int32_t *)(mem + (size_t)out * ksize * sizeof(float));
    a->count = a->start + out;
}

int ch_resize_plan_make(ch_resize_plan *p, const ch_crop *c, uint32_t out_w, uint32_t out_h,
                        ch_resize_scratch *s)
{
    double sx = (c->x1 - c->x0) / out_w, sy = (c->y1 - c->y0) / out_h;
    int32_t kx = (int32_t)ceil(CH_MAX(sx, 1.0)) * 2 + 2;
    int32_t ky = (int32_t)ceil(CH_MAX(sy, 1.0)) * 2 + 2;
    size_t bx = axis_bytes(out_w, kx), by = axis_bytes(out_h, ky);
    if (ch_buf_reserve(&s->coef, bx + by) != CHUTE_OK)
        return CHUTE_ENOMEM;
    axis_bind(&p->x, s->coef.data, out_w, kx);
    axis_bind(&p->y, s->coef.data + bx, out_h, ky);
    axis_taps(&p->x, c->x0, c->x1, out_w, c->clip_x0, c->clip_x1);
    axis_taps(&p->y, c->y0, c->y1, out_h, c->clip_y0, c->clip_y1);
    p->out_w = out_w;
    p->out_h = out_h;
    return CHUTE_OK;
}

uint16_t ch_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mant = x & 0x007FFFFFu;
    int32_t exp = (int32_t)((x >> 23) & 0xFF);
    if (exp == 0xFF) /* inf / nan */
        return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0));
    exp = exp - 127 + 15;
    if (exp >= 0x1F)
        return (uint16_t)(sign | 0x7C00u);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x00800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++;
    return (uint16_t)half;
}

/* Write one output row (W RGB floats in 0..255) into the slot. */
static void write_row(const float *row, uint32_t y, int flip, const ch_out_spec *o, void *dst)
{
    const uint32_t W = o->size;
    const size_t plane = (size_t)o->size * o->size;
    if (o->dtype == CHUTE_DTYPE_UINT8) {
        for (uint32_t x = 0; x < W; x++) {
            uint32_t ox = flip ? W - 1 - x : x;
            for (int c = 0; c < 3; c++) {
                float v = row[x * 3 + c] + 0.5f;
                uint8_t b = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
                if (o->layout == CHUTE_LAYOUT_NHWC)
                    ((uint8_t *)dst)[((size_t)y * W + ox) * 3 + c] = b;
                else
                    ((uint8_t *)dst)[c * plane + (size_t)y * W + ox] = b;
            }
        }
        return;
    }
    if (o->dtype == CHUTE_DTYPE_FLOAT32 && o->layout == CHUTE_LAYOUT_NCHW) {
        /* The hot case: three planar loops the compiler vectorises. */
        for (int c = 0; c < 3; c++) {
            float *d = (float *)dst + c * plane + (size_t)y * W;
            const float m = o->mul[c], a = o->add[c];
            if (!flip)
                for (uint32_t x = 0; x < W; x++)
                    d[x] = row[x * 3 + c] * m + a;
            else
                for (uint32_t x = 0; x < W; x++)
                    d[W - 1 - x] = row[x * 3 + c] * m + a;
        }
        return;
    }
    for (uint32_t x = 0; x < W; x++) {
        uint32_t ox = flip ? W - 1 - x : x;
        for (int c = 0; c < 3; c++) {
            float v = row[x * 3 + c] * o->mul[c] + o->add[c];
            size_t at = o->layout == CHUTE_LAYOUT_NHWC ? ((size_t)y * W + ox) * 3 + c
                                                        : c * plane + (size_t)y * W + ox;
            if (o->dtype == CHUTE_DTYPE_FLOAT32)
                ((float *)dst)[at] = v;
            else
                ((uint16_t *)dst)[at] = ch_f32_to_f16(v);
        }
    }
}

int ch_resize_run(const ch_resize_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                  int32_t py, int flip, const ch_out_spec *o, void *dst, ch_resize_scratch *s)
{
    const uint32_t W = p->out_w, H = p->out_h;
    const int32_t rows = p->y.hi - p->y.lo;
    const size_t rowf = (size_t)W * 3;
    if (ch_buf_reserve(&s->tmp, ((size_t)rows + 1) * rowf * sizeof(float)) != CHUTE_OK)
        return CHUTE_ENOMEM;
    float *tmp = (float *)s->tmp.data;
    float *acc = tmp + (size_t)rows * rowf;

    /* Horizontal pass over the rows the vertical taps touch. */
    for (int32_t r = 0; r < rows; r++) {
        const uint8_t *src = pix + (size_t)(p->y.lo + r - py) * stride;
        float *t = tmp + (size_t)r * rowf;
        for (uint32_t x = 0; x < W; x++) {
            const float *k = p->x.k + (size_t)x * p->x.ksize;
            const uint8_t *sp = src + (size_t)(p->x.start[x] - px) * 3;
            float r0 = 0, g0 = 0, b0 = 0;
            for (int32_t j = 0, n = p->x.count[x]; j < n; j++) {
                r0 += k[j] * sp[3 * j];
                g0 += k[j] * sp[3 * j + 1];
                b0 += k[j] * sp[3 * j + 2];
            }
            t[3 * x] = r0;
            t[3 * x + 1] = g0;
            t[3 * x + 2] = b0;
        }
    }
    /* Vertical pass, then the fused write. */
    for (uint32_t y = 0; y < H; y++) {
        const float *k = p->y.k + (size_t)y * p->y.ksize;
        const float *base = tmp + (size_t)(p->y.start[y] - p->y.lo) * rowf;
        const int32_t n = p->y.count[y];
        for (size_t i = 0; i < rowf; i++)
            acc[i] = k[0] * base[i];
        for (int32_t j = 1; j < n; j++) {
            const float *b = base + (size_t)j * rowf;
            const float kj = k[j];
            for (size_t i = 0; i < rowf; i++)
                acc[i] += kj * b[i];
        }
        write_row(acc, y, flip, o, dst);
    }
    return CHUTE_OK;
}
