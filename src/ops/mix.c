/*
 * mix.c — MixUp and CutMix on a finished batch (see mix.h for the
 * semantics and torchvision's formulas this follows).
 *
 * In place.  The partner of sample i is sample i - 1 (the batch rolled by
 * one), so walking i from the last sample down to 1 always reads a partner
 * not yet mixed; only sample 0's partner, the last sample, has been
 * overwritten by then, which is why the last sample is copied to the
 * caller's scratch first.  One sample of scratch, no second batch buffer.
 *
 * Rounding.  PyTorch computes `rolled.mul_(1 - lam).add_(x.mul(lam))` as
 * two products and a sum, each rounded to the tensor's dtype, with the
 * Python scalars converted to float (its opmath type for float32 and
 * float16); mixing here does exactly that, so float32 and float16 batches
 * match torchvision's bit for bit.  uint8 batches are not mixed by MixUp
 * (torchvision's mul_ refuses to write floats into uint8; the loader
 * refuses the option); CutMix only copies pixels, so any dtype works.
 */
#include "mix.h"

#include <float.h>
#include <math.h>
#include <string.h>

static double normal(ch_rng *r)
{
    double u1 = 1.0 - ch_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = ch_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* log of a Gamma(a, 1) variate (Marsaglia and Tsang 2000; for a < 1 the
 * boost G(a) = G(a + 1) * U^(1/a), kept in log space). */
static double log_gamma_variate(ch_rng *r, double a)
{
    double boost = 0.0;
    if (a < 1.0) {
        boost = log(1.0 - ch_rng_uniform(r)) / a;
        a += 1.0;
    }
    const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(r), v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = 1.0 - ch_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return log(d * v) + boost;
    }
}

double ch_beta_sym(ch_rng *r, double a)
{
    double lx = log_gamma_variate(r, a), ly = log_gamma_variate(r, a);
    return 1.0 / (1.0 + exp(ly - lx)); /* X / (X + Y) */
}

void ch_mix_draw_batch(const ch_mix *m, uint64_t seed, uint64_t epoch, uint64_t key, uint32_t w,
                       uint32_t h, ch_mix_draw *out)
{
    memset(out, 0, sizeof *out);
    if (!(m->mixup > 0) && !(m->cutmix > 0))
        return;
    ch_rng r = ch_rng_for(seed ^ 0x6d69787570ull /* "mixup" */, epoch, key);
    int cut = m->cutmix > 0;
    if (m->mixup > 0 && m->cutmix > 0)
        cut = ch_rng_uniform(&r) < (double)m->switch_p;
    out->kind = cut ? CH_MIX_CUTMIX : CH_MIX_MIXUP;
    /* torch's Beta draws are float32 values in [FLT_MIN, 1 - 2^-24], never
     * 1 (measured: at alpha 0.2, 2% of 200,000 torch draws are exactly
     * 1 - 2^-24); rounding to float alone would put 1.6% at 1.0. */
    float lam = (float)ch_beta_sym(&r, cut ? m->cutmix : m->mixup);
    out->lam = fminf(fmaxf(lam, FLT_MIN), 0x1.fffffep-1f);
    out->lam_adj = out->lam;
    if (!cut)
        return;
    /* torchvision's CutMix.make_params, in its order and arithmetic. */
    int64_t rx = (int64_t)ch_rng_below(&r, w), ry = (int64_t)ch_rng_below(&r, h);
    double rr = 0.5 * sqrt(1.0 - (double)out->lam);
    int64_t hw = (int64_t)(rr * w), hh = (int64_t)(rr * h);
    out->x1 = (uint32_t)(rx - hw < 0 ? 0 : rx - hw);
    out->y1 = (uint32_t)(ry - hh < 0 ? 0 : ry - hh);
    out->x2 = (uint32_t)(rx + hw > (int64_t)w ? (int64_t)w : rx + hw);
    out->y2 = (uint32_t)(ry + hh > (int64_t)h ? (int64_t)h : ry + hh);
    double area = (double)((uint64_t)(out->x2 - out->x1) * (out->y2 - out->y1));
    out->lam_adj = 1.0 - area / ((double)w * (double)h);
}

void ch_mix_labels(const int64_t *labels, uint32_t n, uint32_t classes, double lam, float *soft)
{
    const float a = (float)lam, b = (float)(1.0 - lam);
    memset(soft, 0, (size_t)n * classes * sizeof *soft);
    for (uint32_t i = 0; i < n; i++) {
        float *row = soft + (size_t)i * classes;
        int64_t own = labels[i], partner = labels[i ? i - 1 : n - 1];
        row[partner] = b;
        row[own] = own == partner ? b + a : a;
    }
}

/* dst = partner * b + dst * a, each step rounded in the dtype. */
static void mix_f32(float *dst, const float *partner, size_t n, float a, float b)
{
    for (size_t k = 0; k < n; k++) {
        float p = partner[k] * b; /* two statements: no contraction into an FMA */
        float x = dst[k] * a;
        dst[k] = p + x;
    }
}

/* float16: each product and the sum computed in float and rounded to half
 * (PyTorch's opmath for Half on the CPU).  With the compiler's _Float16
 * the conversions are F16C instructions in the x86-64-v3 clone (round to
 * nearest even, as ch_f32_to_f16; 40x faster than the portable loop, which
 * stays for compilers without _Float16, and under ThreadSanitizer: a clone
 * is an ifunc, and its resolver, instrumented, would run before the TSan
 * runtime is up and crash every program at load). */
#if defined(__FLT16_MAX__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) \
    && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
static void mix_f16(uint16_t *dst, const uint16_t *partner, size_t n, float a, float b)
{
    _Float16 *d = (_Float16 *)(void *)dst;
    const _Float16 *q = (const _Float16 *)(const void *)partner;
    for (size_t k = 0; k < n; k++) {
        float p = (float)(_Float16)((float)q[k] * b);
        float x = (float)(_Float16)((float)d[k] * a);
        d[k] = (_Float16)(p + x);
    }
}
#else
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0x1f) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    } else if (!m) {
        bits = sign;
    } else { /* subnormal: renormalise */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void mix_f16(uint16_t *dst, const uint16_t *partner, size_t n, float a, float b)
{
    for (size_t k = 0; k < n; k++) {
        float p = f16_to_f32(ch_f32_to_f16(f16_to_f32(partner[k]) * b));
        float x = f16_to_f32(ch_f32_to_f16(f16_to_f32(dst[k]) * a));
        dst[k] = ch_f32_to_f16(p + x);
    }
}
#endif

/* Copy the box of src into dst (one sample each, layout o). */
static void copy_box(uint8_t *dst, const uint8_t *src, const ch_mix_draw *d, const ch_out_spec *o,
                     size_t esz)
{
    const size_t S = o->size;
    if (d->x2 <= d->x1 || d->y2 <= d->y1)
        return;
    if (o->layout == CHUTE_LAYOUT_NHWC) {
        size_t row = S * 3 * esz, len = (size_t)(d->x2 - d->x1) * 3 * esz;
        for (size_t y = d->y1; y < d->y2; y++) {
            size_t off = y * row + (size_t)d->x1 * 3 * esz;
            memcpy(dst + off, src + off, len);
        }
        return;
    }
    size_t row = S * esz, len = (size_t)(d->x2 - d->x1) * esz;
    for (size_t c = 0; c < 3; c++)
        for (size_t y = d->y1; y < d->y2; y++) {
            size_t off = (c * S + y) * row + (size_t)d->x1 * esz;
            memcpy(dst + off, src + off, len);
        }
}

int64_t ch_mix_apply(const ch_mix_draw *d, const ch_out_spec *o, void *data, uint32_t n,
                     const int64_t *labels, uint32_t classes, float *soft, void *scratch)
{
    for (uint32_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= (int64_t)classes)
            return i;
    if (d->kind == CH_MIX_NONE || n == 0)
        return -1;
    const size_t esz = o->dtype == CHUTE_DTYPE_FLOAT32 ? 4 : o->dtype == CHUTE_DTYPE_FLOAT16 ? 2
                                                                                              : 1;
    const size_t elems = (size_t)o->size * o->size * 3, bytes = elems * esz;
    uint8_t *px = data;
    memcpy(scratch, px + (size_t)(n - 1) * bytes, bytes);
    const float a = d->lam, b = (float)(1.0 - (double)d->lam);
    for (uint32_t i = n; i-- > 0;) {
        uint8_t *x = px + (size_t)i * bytes;
        const uint8_t *p = i ? x - bytes : (const uint8_t *)scratch;
        if (d->kind == CH_MIX_CUTMIX)
            copy_box(x, p, d, o, esz);
        else if (o->dtype == CHUTE_DTYPE_FLOAT32)
            mix_f32((float *)(void *)x, (const float *)(const void *)p, elems, a, b);
        else if (o->dtype == CHUTE_DTYPE_FLOAT16)
            mix_f16((uint16_t *)(void *)x, (const uint16_t *)(const void *)p, elems, a, b);
    }
    ch_mix_labels(labels, n, classes, d->lam_adj, soft);
    return -1;
}
