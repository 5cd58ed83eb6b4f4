/*
 * resample.c — the fused output pass: antialiased bilinear resampling of
 * a decoded RGB8 window straight into a batch slot, with flip, normalize,
 * dtype cast and layout folded into the final write.
 *
 * Filter: PIL's "bilinear" resample as torchvision applies it to PIL
 * images: a triangle filter whose support widens with the downscale
 * factor (antialiasing), taps centred at (i + 0.5) * scale, support
 * clipped to the rectangle PIL would be resampling from, weights
 * normalised to sum to one.  PIL runs the horizontal pass first; we run
 * the vertical one first (see ch_resize_run) and keep intermediate values
 * in float rather than PIL's rounded bytes, so results differ from PIL by
 * rounding only (measured: mean absolute error ~0.1 on uint8).
 *
 * Memory: taps and the intermediate rows live in the worker's scratch,
 * which grows to the largest crop seen and is then reused.
 *
 * Cost.  Vertical-first is the fast order for every usual crop, but it
 * runs the vertical taps over the whole window width once per output
 * row, which is out_h / window_h times the pixels when the window is
 * shorter than the output: a 4,194,304 x 1 PNG resized whole (transform
 * NONE) would cost 224 passes over 12 MB.  So the pass order is chosen
 * from the plan's tap counts: when horizontal-first (PIL's own order) is
 * clearly cheaper, the source rows are first reduced to out_w columns and
 * the vertical taps run on those.  Either way the work is bounded by a
 * small multiple of (window pixels + output pixels) x taps.
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
        /* Clamped to the clip box in double, before any conversion. */
        int32_t xmin = (int32_t)fmax(floor(center - support + 0.5), clip0);
        int32_t xmax = (int32_t)fmin(floor(center + support + 0.5), clip1);
        if (xmax <= xmin) { /* degenerate: take the nearest pixel */
            xmin = (int32_t)fmin(fmax(floor(center), clip0), clip1 - 1);
            xmax = xmin + 1;
        }
        int32_t n = xmax - xmin;
        if (n > a->ksize)
            n = a->ksize;
        float *k = a->k + (size_t)i * a->ksize;
        double sum = 0; /* in double: a 1-pixel-tall strip has 10^5..10^6 taps */
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
            k[t] = (float)(k[t] / sum);
        a->start[i] = xmin;
        a->count[i] = n;
        if (xmin < a->lo)
            a->lo = xmin;
        if (xmin + n > a->hi)
            a->hi = xmin + n;
    }
    /* Zero-pad every tap list to the longest so the hot loop has a fixed
     * trip count (the padded taps read slack that is zeroed). */
    a->kmax = 1;
    for (uint32_t i = 0; i < out; i++)
        if (a->count[i] > a->kmax)
            a->kmax = a->count[i];
    for (uint32_t i = 0; i < out; i++)
        for (int32_t t = a->count[i]; t < a->kmax; t++)
            a->k[(size_t)i * a->ksize + t] = 0.0f;
}

/* Bytes of an axis's tables, 0 on overflow. */
static size_t axis_bytes(uint32_t out, int32_t ksize)
{
    size_t per = 2 * sizeof(int32_t) + (size_t)ksize * sizeof(float);
    return per > SIZE_MAX / 2 / out ? 0 : (size_t)out * per;
}

static void axis_bind(ch_resize_axis *a, uint8_t *mem, uint32_t out, int32_t ksize)
{
    a->ksize = ksize;
    a->k = (float *)mem;
    a->start = (int32_t *)(mem + (size_t)out * ksize * sizeof(float));
    a->count = a->start + out;
}

/* Taps per output pixel an axis may need: 2 * ceil(scale) + 2 covers the
 * widened triangle's support, and no list is longer than the clip box. */
static int32_t axis_ksize(double in0, double in1, uint32_t out, int32_t clip0, int32_t clip1)
{
    double scale = (in1 - in0) / out;
    double k = ceil(scale < 1.0 ? 1.0 : scale) * 2 + 2;
    double span = (double)clip1 - clip0;
    return (int32_t)(k < span ? k : span);
}

static int crop_ok(const ch_crop *c, uint32_t out_w, uint32_t out_h)
{
    return out_w > 0 && out_h > 0 && isfinite(c->x0) && isfinite(c->x1) && isfinite(c->y0) &&
           isfinite(c->y1) && c->x1 > c->x0 && c->y1 > c->y0 && c->clip_x0 >= 0 &&
           c->clip_y0 >= 0 && c->clip_x1 > c->clip_x0 && c->clip_y1 > c->clip_y0 &&
           c->x0 >= c->clip_x0 - 1.0 && c->x1 <= c->clip_x1 + 1.0 && c->y0 >= c->clip_y0 - 1.0 &&
           c->y1 <= c->clip_y1 + 1.0;
}

int ch_resize_plan_make(ch_resize_plan *p, const ch_crop *c, uint32_t out_w, uint32_t out_h,
                        ch_resize_scratch *s)
{
    if (!crop_ok(c, out_w, out_h))
        return CHUTE_EINVAL;
    int32_t kx = axis_ksize(c->x0, c->x1, out_w, c->clip_x0, c->clip_x1);
    int32_t ky = axis_ksize(c->y0, c->y1, out_h, c->clip_y0, c->clip_y1);
    size_t bx = axis_bytes(out_w, kx), by = axis_bytes(out_h, ky);
    if (!bx || !by || bx > SIZE_MAX - by || ch_buf_reserve(&s->coef, bx + by) != CHUTE_OK)
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

/* Write one output row (W RGB floats in 0..255) into the slot, for every
 * output but float32 NCHW, which hpass_planar writes directly. */
static void write_row(const float *row, uint32_t y, int flip, const ch_out_spec *o, void *dst)
{
    const uint32_t W = o->size;
    const size_t plane = (size_t)o->size * o->size;
    if (o->dtype == CHUTE_DTYPE_UINT8 && o->layout == CHUTE_LAYOUT_NHWC) {
        /* the augmented pass's intermediate (aug.h): one contiguous row,
         * its pixels reversed in place when flipped */
        uint8_t *d = (uint8_t *)dst + (size_t)y * W * 3;
        for (size_t i = 0; i < (size_t)W * 3; i++) {
            float v = row[i] + 0.5f;
            d[i] = !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
        }
        for (uint32_t a = 0, b = W - 1; flip && a < b; a++, b--)
            for (int c = 0; c < 3; c++) {
                uint8_t t = d[a * 3 + c];
                d[a * 3 + c] = d[b * 3 + c];
                d[b * 3 + c] = t;
            }
        return;
    }
    if (o->dtype == CHUTE_DTYPE_UINT8) {
        for (uint32_t x = 0; x < W; x++) {
            uint32_t ox = flip ? W - 1 - x : x;
            for (int c = 0; c < 3; c++) {
                float v = row[x * 3 + c] + 0.5f;
                /* NaN-proof: !(v > 0) catches it before the conversion */
                uint8_t b = !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
                if (o->layout == CHUTE_LAYOUT_NHWC)
                    ((uint8_t *)dst)[((size_t)y * W + ox) * 3 + c] = b;
                else
                    ((uint8_t *)dst)[c * plane + (size_t)y * W + ox] = b;
            }
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

typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Vertical taps over the window's columns: the one loop that touches every
 * source pixel, contiguous and branch-free, so it vectorises; built for
 * AVX2 too and picked at load time where the CPU has it. */
/* Hot kernels get an x86-64-v3 (AVX2+FMA) clone picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CH_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CH_CLONES
#endif

CH_CLONES
static void vertical(const uint8_t *const *rows, const float *k, int32_t n, size_t len, float *out)
{
    const uint8_t *r0 = rows[0];
    const float k0 = k[0];
    for (size_t i = 0; i < len; i++)
        out[i] = k0 * (float)r0[i];
    for (int32_t j = 1; j < n; j++) {
        const uint8_t *r = rows[j];
        const float kj = k[j];
        for (size_t i = 0; i < len; i++)
            out[i] += kj * (float)r[i];
    }
}

/* Horizontal taps of one row, K taps per output pixel (K a compile-time
 * constant in the specialised copies, so the tap loop is unrolled). */
static inline __attribute__((always_inline)) v4f htaps(const ch_resize_plan *p, const float *vrow,
                                                       uint32_t x, int32_t K)
{
    const float *k = p->x.k + (size_t)x * p->x.ksize;
    const float *sp = vrow + (size_t)(p->x.start[x] - p->x.lo) * 3;
    v4f acc = k[0] * load4(sp);
    for (int32_t j = 1; j < K; j++)
        acc += k[j] * load4(sp + 3 * j);
    return acc;
}

#define CH_HPASS_PLANAR(K)                                                                     \
    for (uint32_t x = 0; x < W; x++) {                                                         \
        v4f acc = htaps(p, vrow, x, (K));                                                      \
        uint32_t ox = flip ? W - 1 - x : x;                                                    \
        d0[ox] = acc[0] * m0 + a0;                                                             \
        d1[ox] = acc[1] * m1 + a1;                                                             \
        d2[ox] = acc[2] * m2 + a2;                                                             \
    }

/* Horizontal taps fused with normalize and the planar (NCHW float) write. */
CH_CLONES
static void hpass_planar(const ch_resize_plan *p, const float *vrow, int flip, const ch_out_spec *o,
                         float *d0, size_t plane)
{
    const uint32_t W = p->out_w;
    float *d1 = d0 + plane, *d2 = d1 + plane;
    const float m0 = o->mul[0], m1 = o->mul[1], m2 = o->mul[2];
    const float a0 = o->add[0], a1 = o->add[1], a2 = o->add[2];
    switch (p->x.kmax) {
    case 1: CH_HPASS_PLANAR(1) break;
    case 2: CH_HPASS_PLANAR(2) break;
    case 3: CH_HPASS_PLANAR(3) break;
    case 4: CH_HPASS_PLANAR(4) break;
    case 5: CH_HPASS_PLANAR(5) break;
    case 6: CH_HPASS_PLANAR(6) break;
    default: CH_HPASS_PLANAR(p->x.kmax) break;
    }
}

/* Horizontal taps into an RGB float row, for the other output formats. */
static void hpass_rgb(const ch_resize_plan *p, const float *vrow, float *orow)
{
    for (uint32_t x = 0; x < p->out_w; x++) {
        v4f acc = htaps(p, vrow, x, p->x.kmax);
        orow[3 * x] = acc[0];
        orow[3 * x + 1] = acc[1];
        orow[3 * x + 2] = acc[2];
    }
}

/* Horizontal-first (PIL's order), for windows much wider than they are
 * tall relative to the output: every source row of the window is reduced
 * to out_w RGB floats once, then the vertical taps combine those rows.
 * Tap lists are walked to their true length here (the padded tail of a
 * list may point past the window's last column). */
static int run_hfirst(const ch_resize_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                      int32_t py, int flip, const ch_out_spec *o, void *dst, ch_resize_scratch *s)
{
    const uint32_t W = p->out_w, H = p->out_h;
    const size_t rows = (size_t)(p->y.hi - p->y.lo);
    const size_t rowf = (size_t)W * 3;
    if (rows + 1 > SIZE_MAX / sizeof(float) / rowf)
        return CHUTE_ENOMEM;
    if (ch_buf_reserve(&s->tmp, (rows + 1) * rowf * sizeof(float)) != CHUTE_OK)
        return CHUTE_ENOMEM;
    float *inter = (float *)s->tmp.data, *orow = inter + rows * rowf;
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *src = pix + (size_t)(p->y.lo + (int32_t)r - py) * stride;
        float *d = inter + r * rowf;
        for (uint32_t x = 0; x < W; x++) {
            const float *k = p->x.k + (size_t)x * p->x.ksize;
            const uint8_t *sp = src + (size_t)(p->x.start[x] - px) * 3;
            /* double: this path is taken for very long tap lists */
            double a0 = 0, a1 = 0, a2 = 0;
            for (int32_t t = 0; t < p->x.count[x]; t++) {
                a0 += k[t] * (double)sp[3 * t];
                a1 += k[t] * (double)sp[3 * t + 1];
                a2 += k[t] * (double)sp[3 * t + 2];
            }
            d[3 * x] = (float)a0;
            d[3 * x + 1] = (float)a1;
            d[3 * x + 2] = (float)a2;
        }
    }
    for (uint32_t y = 0; y < H; y++) {
        const float *k = p->y.k + (size_t)y * p->y.ksize;
        const float *r0 = inter + (size_t)(p->y.start[y] - p->y.lo) * rowf;
        for (size_t i = 0; i < rowf; i++)
            orow[i] = k[0] * r0[i];
        for (int32_t j = 1; j < p->y.count[y]; j++) {
            const float *r = r0 + (size_t)j * rowf;
            for (size_t i = 0; i < rowf; i++)
                orow[i] += k[j] * r[i];
        }
        write_row(orow, y, flip, o, dst);
    }
    return CHUTE_OK;
}

int ch_resize_hfirst(const ch_resize_plan *p)
{
    /* Multiply-adds of each order (per channel), from the plan alone, so
     * the choice is the same for a window and for the whole image. */
    const double cols = (double)(p->x.hi - p->x.lo), rows = (double)(p->y.hi - p->y.lo);
    const double W = p->out_w, H = p->out_h;
    double vfirst = H * p->y.kmax * cols + H * W * p->x.kmax;
    double hfirst = rows * W * p->x.kmax + H * W * p->y.kmax;
    /* Clearly cheaper only (the vertical-first kernels are the tuned
     * ones), and with the intermediate rows no larger than the window
     * itself or 16 Mi floats. */
    return hfirst * 4 < vfirst && rows * W * 3 <= CH_MAX(cols * rows * 3, 16.0 * 1024 * 1024);
}

/* AVX-512 planar path (float32 NCHW, the training output).
 *
 * Profiled on Zen 4 (perf record of `chute bench`, train transform, 256-side
 * shards): the per-pixel horizontal pass above was 42% of a raw sample's
 * CPU and 18% of a small JPEG's.  It computes one output pixel per 4-wide
 * vector (a lane wasted, three scalar stores), ~20 instructions a pixel.
 * Here the vertical pass writes its row as three planes (R, G, B floats:
 * uint8 -> float, taps, then a two-permute deinterleave, all in registers),
 * and the horizontal pass computes 16 output pixels of one channel per
 * vector: the source pixels of 16 neighbouring outputs span < 32 floats
 * whenever the crop is not shrunk by more than ~1.7x (every upscale and
 * most train crops of a pre-resized image), so each tap is one vpermt2ps
 * from two loads and one FMA; wider spans take a gather.  Flip reverses
 * the vector.  The taps and their order are the scalar path's, so the two
 * differ by float rounding only.  Picked at run time (__builtin_cpu_supports),
 * so the binary still runs on any x86-64; the cache and uncached runs take
 * the same path, so they stay bit-identical. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CH_HAVE_AVX512 1
#define CH_AVX512 __attribute__((target("avx512f")))

static int avx512_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

/* idx1/idx2 pick channel c of 16 interleaved RGB floats held in three
 * vectors: t = permutex2var(v0, idx1, v1), then permutex2var(t, idx2, v2). */
CH_AVX512 static inline void deint_idx(int c, __m512i *idx1, __m512i *idx2)
{
    int32_t a[16], b[16];
    for (int i = 0; i < 16; i++) {
        int q = 3 * i + c;
        a[i] = q < 32 ? q : 0;
        b[i] = q < 32 ? i : 16 + (q - 32);
    }
    *idx1 = _mm512_loadu_si512(a);
    *idx2 = _mm512_loadu_si512(b);
}

CH_AVX512 static inline __m512 u8x16(const uint8_t *q)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

/* Vertical taps over `cols` RGB pixels into three planes. */
CH_AVX512 static void vertical_planar(const uint8_t *const *rows, const float *k, int32_t n,
                                      size_t cols, float *pr, float *pg, float *pb,
                                      const __m512i ix[3][2])
{
    const size_t nb = cols / 16;
    for (size_t b = 0; b < nb; b++) {
        const size_t off = b * 48;
        __m512 kk = _mm512_set1_ps(k[0]);
        __m512 a0 = _mm512_mul_ps(kk, u8x16(rows[0] + off));
        __m512 a1 = _mm512_mul_ps(kk, u8x16(rows[0] + off + 16));
        __m512 a2 = _mm512_mul_ps(kk, u8x16(rows[0] + off + 32));
        for (int32_t j = 1; j < n; j++) {
            kk = _mm512_set1_ps(k[j]);
            a0 = _mm512_fmadd_ps(kk, u8x16(rows[j] + off), a0);
            a1 = _mm512_fmadd_ps(kk, u8x16(rows[j] + off + 16), a1);
            a2 = _mm512_fmadd_ps(kk, u8x16(rows[j] + off + 32), a2);
        }
        float *dst[3] = {pr, pg, pb};
        for (int c = 0; c < 3; c++) {
            __m512 t = _mm512_permutex2var_ps(a0, ix[c][0], a1);
            _mm512_storeu_ps(dst[c] + b * 16, _mm512_permutex2var_ps(t, ix[c][1], a2));
        }
    }
    for (size_t x = nb * 16; x < cols; x++) {
        float acc[3];
        for (int c = 0; c < 3; c++)
            acc[c] = k[0] * (float)rows[0][x * 3 + c];
        for (int32_t j = 1; j < n; j++)
            for (int c = 0; c < 3; c++)
                acc[c] += k[j] * (float)rows[j][x * 3 + c];
        pr[x] = acc[0];
        pg[x] = acc[1];
        pb[x] = acc[2];
    }
}

/* cols RGB floats into three planes. */
CH_AVX512 static void deinterleave(const float *v, size_t cols, float *pr, float *pg, float *pb,
                                   const __m512i ix[3][2])
{
    const size_t nb = cols / 16;
    float *dst[3] = {pr, pg, pb};
    for (size_t b = 0; b < nb; b++) {
        const __m512 a0 = _mm512_loadu_ps(v + b * 48), a1 = _mm512_loadu_ps(v + b * 48 + 16),
                     a2 = _mm512_loadu_ps(v + b * 48 + 32);
        for (int c = 0; c < 3; c++) {
            __m512 t = _mm512_permutex2var_ps(a0, ix[c][0], a1);
            _mm512_storeu_ps(dst[c] + b * 16, _mm512_permutex2var_ps(t, ix[c][1], a2));
        }
    }
    for (size_t x = nb * 16; x < cols; x++)
        for (int c = 0; c < 3; c++)
            dst[c][x] = v[x * 3 + c];
}

/* Horizontal taps of 16 outputs [x0, x0 + 16) of one plane. */
CH_AVX512 static inline __m512 htaps16(const float *pl, const int32_t *start, int32_t lo,
                                       const float *kt, uint32_t W, int32_t K, uint32_t x0)
{
    __m512i s = _mm512_sub_epi32(_mm512_loadu_si512(start + x0), _mm512_set1_epi32(lo));
    const int32_t base = start[x0] - lo;
    __m512 acc;
    if (start[x0 + 15] - start[x0] + K - 1 < 32) {
        const __m512 v0 = _mm512_loadu_ps(pl + base), v1 = _mm512_loadu_ps(pl + base + 16);
        __m512i rel = _mm512_sub_epi32(s, _mm512_set1_epi32(base));
        acc = _mm512_mul_ps(_mm512_loadu_ps(kt + x0), _mm512_permutex2var_ps(v0, rel, v1));
        for (int32_t j = 1; j < K; j++) {
            rel = _mm512_add_epi32(rel, _mm512_set1_epi32(1));
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(kt + (size_t)j * W + x0),
                                  _mm512_permutex2var_ps(v0, rel, v1), acc);
        }
    } else {
        acc = _mm512_mul_ps(_mm512_loadu_ps(kt + x0), _mm512_i32gather_ps(s, pl, 4));
        for (int32_t j = 1; j < K; j++) {
            s = _mm512_add_epi32(s, _mm512_set1_epi32(1));
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(kt + (size_t)j * W + x0),
                                  _mm512_i32gather_ps(s, pl, 4), acc);
        }
    }
    return acc;
}

/* htaps16 with each tap's product rounded before the add (acc + k * v),
 * as hpass_rgb computes it: the uint8 output below then holds the same
 * values as the generic path's.  GCC's intrinsics are vector arithmetic,
 * which it would contract into FMAs: not here. */
#if defined(__clang__)
#define CH_NO_CONTRACT
#else
#define CH_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif
CH_AVX512 CH_NO_CONTRACT static inline __m512 htaps16_unfused(const float *pl, const int32_t *start, int32_t lo,
                                               const float *kt, uint32_t W, int32_t K, uint32_t x0)
{
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    __m512i s = _mm512_sub_epi32(_mm512_loadu_si512(start + x0), _mm512_set1_epi32(lo));
    const int32_t base = start[x0] - lo;
    __m512 acc;
    if (start[x0 + 15] - start[x0] + K - 1 < 32) {
        const __m512 v0 = _mm512_loadu_ps(pl + base), v1 = _mm512_loadu_ps(pl + base + 16);
        __m512i rel = _mm512_sub_epi32(s, _mm512_set1_epi32(base));
        acc = _mm512_mul_ps(_mm512_loadu_ps(kt + x0), _mm512_permutex2var_ps(v0, rel, v1));
        for (int32_t j = 1; j < K; j++) {
            rel = _mm512_add_epi32(rel, _mm512_set1_epi32(1));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(kt + (size_t)j * W + x0),
                                                   _mm512_permutex2var_ps(v0, rel, v1)));
        }
    } else {
        acc = _mm512_mul_ps(_mm512_loadu_ps(kt + x0), _mm512_i32gather_ps(s, pl, 4));
        for (int32_t j = 1; j < K; j++) {
            s = _mm512_add_epi32(s, _mm512_set1_epi32(1));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(kt + (size_t)j * W + x0),
                                                   _mm512_i32gather_ps(s, pl, 4)));
        }
    }
    return acc;
}

/* One row of 16-pixel blocks as uint8 RGB (HWC): each channel's taps,
 * + 0.5 clamped to [0, 255] and truncated (write_row's rounding), then
 * interleaved (two permutes per output vector) and narrowed to bytes. */
CH_AVX512 CH_NO_CONTRACT static void row_u8_avx512(const ch_resize_plan *p, const float *pl, size_t pl_len,
                                    const float *kt, int flip, uint8_t *d)
{
    const uint32_t W = p->out_w;
    const int32_t K = p->x.kmax;
    /* output vector k, lane e holds value q = 16k + e: pixel q / 3 of
     * channel q % 3; ia picks R (< 16) or G (16 +), ib keeps that or B */
    static const int32_t ia[3][16] = {
        {0, 16, 0, 1, 17, 0, 2, 18, 0, 3, 19, 0, 4, 20, 0, 5},
        {21, 0, 6, 22, 0, 7, 23, 0, 8, 24, 0, 9, 25, 0, 10, 26},
        {0, 11, 27, 0, 12, 28, 0, 13, 29, 0, 14, 30, 0, 15, 31, 0}};
    static const int32_t ib[3][16] = {
        {0, 1, 16, 3, 4, 17, 6, 7, 18, 9, 10, 19, 12, 13, 20, 15},
        {0, 21, 2, 3, 22, 5, 6, 23, 8, 9, 24, 11, 12, 25, 14, 15},
        {26, 1, 2, 27, 4, 5, 28, 7, 8, 29, 10, 11, 30, 13, 14, 31}};
    const __m512i a0 = _mm512_loadu_si512(ia[0]), a1 = _mm512_loadu_si512(ia[1]),
                  a2 = _mm512_loadu_si512(ia[2]), b0 = _mm512_loadu_si512(ib[0]),
                  b1 = _mm512_loadu_si512(ib[1]), b2 = _mm512_loadu_si512(ib[2]);
    const __m512i ai[3] = {a0, a1, a2}, bi[3] = {b0, b1, b2};
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
    const __m512i rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512 half = _mm512_set1_ps(0.5f), zero = _mm512_setzero_ps(),
                 top = _mm512_set1_ps(255.0f);
    for (uint32_t x0 = 0; x0 < W; x0 += 16) {
        if (x0 + 16 > W)
            x0 = W - 16;
        __m512i v[3];
        for (int c = 0; c < 3; c++) {
            __m512 f = _mm512_add_ps(
                htaps16_unfused(pl + (size_t)c * pl_len, p->x.start, p->x.lo, kt, W, K, x0), half);
            f = _mm512_min_ps(_mm512_max_ps(f, zero), top); /* NaN: max gives 0 */
            v[c] = _mm512_cvttps_epi32(f);
            if (flip)
                v[c] = _mm512_permutexvar_epi32(rev, v[c]);
        }
        uint8_t *at = d + (size_t)(flip ? W - 16 - x0 : x0) * 3;
        for (int k = 0; k < 3; k++) {
            __m512i t = _mm512_permutex2var_epi32(v[0], ai[k], v[1]);
            t = _mm512_permutex2var_epi32(t, bi[k], v[2]);
            _mm_storeu_si128((__m128i *)(at + 16 * k), _mm512_cvtepi32_epi8(t));
        }
    }
}

/* The whole resample for float32 NCHW, or (u8 set) uint8 NHWC, the
 * augmented pass's intermediate; W >= 16 (the last block of a row is the
 * one ending at W, overlapping its neighbour: same values). */
CH_AVX512 static int run_planar_avx512(const ch_resize_plan *p, const uint8_t *colbase,
                                       size_t stride, int32_t py, int flip, const ch_out_spec *o,
                                       float *dst, uint8_t *u8, ch_resize_scratch *s)
{
    const uint32_t W = p->out_w, H = p->out_h;
    const int32_t K = p->x.kmax;
    const size_t cols = (size_t)(p->x.hi - p->x.lo);
    const size_t pad = (size_t)K + 48; /* zeroed: read by padded taps and 32-wide loads */
    const size_t pl_len = cols + pad;
    if (pl_len > SIZE_MAX / 64 / sizeof(float) || (size_t)K > SIZE_MAX / 64 / W)
        return CHUTE_ENOMEM;
    const size_t rows_b = ((size_t)p->y.ksize * sizeof(uint8_t *) + 63) & ~(size_t)63;
    /* uint8: one more row of cols RGB floats, the generic vertical pass's */
    const size_t vrow_len = u8 ? cols * 3 : 0;
    const size_t need =
        rows_b + (3 * pl_len + (size_t)K * W + 16 + vrow_len) * sizeof(float);
    if (ch_buf_reserve(&s->tmp, need) != CHUTE_OK)
        return CHUTE_ENOMEM;
    const uint8_t **rows = (const uint8_t **)s->tmp.data;
    float *pl = (float *)(s->tmp.data + rows_b);
    float *kt = pl + 3 * pl_len;
    float *vrow = kt + (size_t)K * W + 16;
    memset(pl, 0, 3 * pl_len * sizeof(float));
    for (int32_t j = 0; j < K; j++)
        for (uint32_t x = 0; x < W; x++)
            kt[(size_t)j * W + x] = p->x.k[(size_t)x * p->x.ksize + j];
    __m512i ix[3][2];
    for (int c = 0; c < 3; c++)
        deint_idx(c, &ix[c][0], &ix[c][1]);
    const __m512i rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const size_t plane = (size_t)W * H;
    for (uint32_t y = 0; y < H; y++) {
        const int32_t n = p->y.count[y];
        for (int32_t j = 0; j < n; j++)
            rows[j] = colbase + (size_t)(p->y.start[y] + j - py) * stride;
        if (u8) {
            /* the generic path's own vertical pass (whatever contraction
             * the compiler gave it), deinterleaved into the planes */
            vertical(rows, p->y.k + (size_t)y * p->y.ksize, n, cols * 3, vrow);
            deinterleave(vrow, cols, pl, pl + pl_len, pl + 2 * pl_len, ix);
            row_u8_avx512(p, pl, pl_len, kt, flip, u8 + (size_t)y * W * 3);
            continue;
        }
        vertical_planar(rows, p->y.k + (size_t)y * p->y.ksize, n, cols, pl, pl + pl_len,
                        pl + 2 * pl_len, ix);
        for (int c = 0; c < 3; c++) {
            const float *src = pl + (size_t)c * pl_len;
            float *d = dst + (size_t)c * plane + (size_t)y * W;
            const __m512 m = _mm512_set1_ps(o->mul[c]), a = _mm512_set1_ps(o->add[c]);
            for (uint32_t x0 = 0; x0 < W; x0 += 16) {
                if (x0 + 16 > W)
                    x0 = W - 16;
                __m512 v = _mm512_fmadd_ps(htaps16(src, p->x.start, p->x.lo, kt, W, K, x0), m, a);
                float *at = d + (flip ? W - 16 - x0 : x0);
                if (flip)
                    v = _mm512_permutexvar_ps(rev, v);
                /* Streaming stores where aligned: the slot is read next by
                 * the consumer (or a copy to the GPU), not by this core, so
                 * fetching its lines into the cache first only costs. */
                if (((uintptr_t)at & 63) == 0)
                    _mm512_stream_ps(at, v);
                else
                    _mm512_storeu_ps(at, v);
            }
        }
    }
    _mm_sfence(); /* streaming stores are ordered before the slot is published */
    return CHUTE_OK;
}
#endif

int ch_resize_run(const ch_resize_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                  int32_t py, int flip, const ch_out_spec *o, void *dst, ch_resize_scratch *s)
{
    /* Vertical pass first, then horizontal: for the usual downscale this
     * runs the gather-shaped horizontal taps on output rows only, and the
     * vectorisable vertical taps on the source rows.  The row buffer has
     * one float of slack so 4-wide loads of the last pixel stay inside. */
    if (ch_resize_hfirst(p))
        return run_hfirst(p, pix, stride, px, py, flip, o, dst, s);
    const uint32_t W = p->out_w, H = p->out_h;
#ifdef CH_HAVE_AVX512
    if (o->dtype == CHUTE_DTYPE_FLOAT32 && o->layout == CHUTE_LAYOUT_NCHW && W >= 16 &&
        avx512_ok())
        return run_planar_avx512(p, pix + (size_t)(p->x.lo - px) * 3, stride, py, flip, o,
                                 (float *)dst, NULL, s);
    /* uint8 NHWC (the augmented pass's intermediate, and plain uint8
     * outputs): the same values as the generic path below (its vertical
     * pass itself, a horizontal pass rounded as hpass_rgb's) */
    if (o->dtype == CHUTE_DTYPE_UINT8 && o->layout == CHUTE_LAYOUT_NHWC && W >= 16 &&
        avx512_ok())
        return run_planar_avx512(p, pix + (size_t)(p->x.lo - px) * 3, stride, py, flip, o, NULL,
                                 (uint8_t *)dst, s);
#endif
    const int32_t cols = p->x.hi - p->x.lo;
    const size_t len = (size_t)cols * 3;
    const size_t slack = (size_t)p->x.kmax * 3 + 4; /* zeroed; read by padded taps */
    const size_t need = (len + slack) * sizeof(float) + (size_t)p->y.ksize * sizeof(uint8_t *) +
                        (size_t)W * 3 * sizeof(float) + 64;
    if (ch_buf_reserve(&s->tmp, need) != CHUTE_OK)
        return CHUTE_ENOMEM;
    const uint8_t **rows = (const uint8_t **)s->tmp.data; /* 64-byte aligned */
    float *vrow = (float *)(rows + p->y.ksize);
    memset(vrow + len, 0, slack * sizeof(float));
    float *orow = vrow + len + slack;
    const uint8_t *colbase = pix + (size_t)(p->x.lo - px) * 3;
    const size_t plane = (size_t)W * H;
    const int fast = o->dtype == CHUTE_DTYPE_FLOAT32 && o->layout == CHUTE_LAYOUT_NCHW;

    for (uint32_t y = 0; y < H; y++) {
        const int32_t n = p->y.count[y];
        for (int32_t j = 0; j < n; j++)
            rows[j] = colbase + (size_t)(p->y.start[y] + j - py) * stride;
        vertical(rows, p->y.k + (size_t)y * p->y.ksize, n, len, vrow);

        if (fast)
            hpass_planar(p, vrow, flip, o, (float *)dst + (size_t)y * W, plane);
        else {
            hpass_rgb(p, vrow, orow);
            write_row(orow, y, flip, o, dst);
        }
    }
    return CHUTE_OK;
}
