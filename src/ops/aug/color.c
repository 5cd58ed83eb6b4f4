/*
 * color.c — brightness, contrast, saturation and hue: ColorJitter's four
 * adjustments as standalone ops (ColorJitter(brightness=b) etc.), and the
 * kernels colorjitter.c composes.  Each follows torchvision's uint8 kernel
 * in float32, in its order of operations:
 *   brightness  clamp(x * f) truncated
 *   contrast    _blend(x, mean(floor(gray)), f)
 *   saturation  _blend(x, floor(gray), f)
 *   hue         x / 255 -> HSV, h = (h + f) mod 1 -> RGB, * (256 - 1e-3),
 *               truncated
 * where _blend(a, b, f) = clamp(a * f + (1 - f) * b) truncated.  The
 * parameter is ColorJitter's: the factor is drawn uniformly from
 * [max(0, 1 - v), 1 + v] (hue: [-v, v]).
 */
#include "../aug.h"

#include <math.h>

/* brightness and contrast map each value through a function of that value
 * alone: a 256-entry table per sample, computed with the same expression. */
static void apply_lut(uint8_t *px, size_t n, const uint8_t *lut)
{
    for (size_t i = 0; i < n * 3; i++)
        px[i] = lut[px[i]];
}

void ch_aug_brightness(uint8_t *px, size_t n, float f)
{
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = ch_aug_u8_trunc((float)v * f);
    apply_lut(px, n, lut);
}

static float blend_alpha(float f)
{
    return (float)(1.0 - (double)f); /* torchvision: alpha=(1.0 - ratio) in double */
}

CH_AUG_CLONES
static double gray_floor_sum(const uint8_t *px, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (int)ch_aug_gray(px + i * 3); /* >= 0: truncation is floor */
    return sum;
}

void ch_aug_contrast(uint8_t *px, size_t n, float f)
{
    ch_aug_contrast_blend(px, n, f, blend_alpha(f));
}

void ch_aug_contrast_blend(uint8_t *px, size_t n, float f, float alpha)
{
    double sum = gray_floor_sum(px, n);
    /* float32 division as torch.mean: sum and n are exact in float below 2^24 */
    const float mean = (float)sum / (float)n;
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = ch_aug_blend((uint8_t)v, mean, f, alpha);
    apply_lut(px, n, lut);
}

void ch_aug_saturation(uint8_t *px, size_t n, float f)
{
    ch_aug_saturation_blend(px, n, f, blend_alpha(f));
}

CH_AUG_CLONES
void ch_aug_saturation_blend(uint8_t *px, size_t n, float f, float alpha)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t *q = px + i * 3;
        float g = (float)(int)ch_aug_gray(q); /* >= 0: truncation is floor */
        q[0] = ch_aug_blend(q[0], g, f, alpha);
        q[1] = ch_aug_blend(q[1], g, f, alpha);
        q[2] = ch_aug_blend(q[2], g, f, alpha);
    }
}

static inline float maxf(float a, float b)
{
    return a > b ? a : b;
}
static inline float minf(float a, float b)
{
    return a < b ? a : b;
}
static inline float clamp01(float v)
{
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* torchvision's _rgb_to_hsv and _hsv_to_rgb, float32, on HUE_BLOCK pixels
 * at a time: deinterleaved into planes, then one branch-free loop (every
 * branch of the per-pixel version is a select between values it computes
 * anyway, so the results are the same) that the compiler vectorises. */
#define HUE_BLOCK 256

CH_AUG_CLONES
static void hue_block(float *r, float *g, float *b, size_t n, float f)
{
    for (size_t i = 0; i < n; i++) {
        const float R = r[i], G = g[i], B = b[i];
        const float maxc = maxf(R, maxf(G, B)), minc = minf(R, minf(G, B));
        const int eqc = maxc == minc;
        const float range = maxc - minc;
        const float s = range / (eqc ? 1.0f : maxc);
        const float div = eqc ? 1.0f : range;
        const float rc = (maxc - R) / div, gc = (maxc - G) / div, bc = (maxc - B) / div;
        const float hr = bc - gc, hg = (rc + 2.0f) - bc, hb = (gc + 4.0f) - rc;
        const float hh = maxc == R ? hr : maxc == G ? hg : hb;
        /* hh / 6 + 1 lies in [0, 2): fmod(x, 1) is x - 1 above 1, exactly */
        float h = hh * (float)(1.0 / 6.0) + 1.0f;
        h = h >= 1.0f ? h - 1.0f : h;
        h = h + f; /* in (-0.5, 1.5): remainder(h, 1) = h - floor(h) */
        h = h < 0.0f ? h + 1.0f : h >= 1.0f ? h - 1.0f : h;
        h = h >= 1.0f ? 0.0f : h;
        const float h6 = h * 6.0f, fi = (float)(int)h6, fr = h6 - fi; /* h6 >= 0 */
        int k = (int)fi;
        k = k == 6 ? 0 : k;
        const float v = maxc, sxf = s * fr, oms = 1.0f - s;
        const float q = clamp01((1.0f - sxf) * v);
        const float t = clamp01((sxf + oms) * v);
        const float p = clamp01(oms * v);
        /* the (v, p, q, t) -> RGB table of _hsv_to_rgb, by sector k */
        r[i] = k == 0 || k == 5 ? v : k == 1 ? q : k == 4 ? t : p;
        g[i] = k == 1 || k == 2 ? v : k == 0 ? t : k == 3 ? q : p;
        b[i] = k == 3 || k == 4 ? v : k == 2 ? t : k == 5 ? q : p;
    }
}

void ch_aug_hue(uint8_t *px, size_t n, float f)
{
    const float inv255 = (float)(1.0 / 255.0), back = (float)(255.0 + 1.0 - 1e-3);
    float r[HUE_BLOCK], g[HUE_BLOCK], b[HUE_BLOCK];
    for (size_t at = 0; at < n; at += HUE_BLOCK) {
        const size_t m = n - at < HUE_BLOCK ? n - at : HUE_BLOCK;
        uint8_t *q = px + at * 3;
        for (size_t i = 0; i < m; i++) {
            r[i] = (float)q[i * 3] * inv255;
            g[i] = (float)q[i * 3 + 1] * inv255;
            b[i] = (float)q[i * 3 + 2] * inv255;
        }
        hue_block(r, g, b, m, f);
        for (size_t i = 0; i < m; i++) { /* values in [0, 1]: truncation as to(uint8) */
            q[i * 3] = (uint8_t)(r[i] * back);
            q[i * 3 + 1] = (uint8_t)(g[i] * back);
            q[i * 3 + 2] = (uint8_t)(b[i] * back);
        }
    }
}

/* ColorJitter's factor range for one parameter v: [max(0, 1 - v), 1 + v]. */
float ch_aug_jitter_factor(ch_rng *r, float v)
{
    float lo = 1.0f - v < 0.0f ? 0.0f : 1.0f - v;
    return ch_aug_uniform(r, lo, 1.0f + v);
}

static int draw_factor(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    args[0] = ch_aug_jitter_factor(r, p[0]);
    return p[0] > 0.0f;
}

static int draw_hue(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    args[0] = ch_aug_uniform(r, -p[0], p[0]);
    return p[0] > 0.0f;
}

#define COLOR_APPLY(fn)                                                                        \
    static int apply_##fn(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)   \
    {                                                                                          \
        (void)s;                                                                               \
        ch_aug_##fn(px, (size_t)w * h, args[0]);                                               \
        return CHUTE_OK;                                                                       \
    }
COLOR_APPLY(brightness)
COLOR_APPLY(contrast)
COLOR_APPLY(saturation)
COLOR_APPLY(hue)

const ch_aug_op ch_aug_brightness_op = {
    .name = "brightness", .torchvision = "ColorJitter(brightness=v)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 1, .pname = {"v"}, .def = {0}, .lo = {0}, .hi = {100},
    .draw = draw_factor, .apply = apply_brightness,
};
const ch_aug_op ch_aug_contrast_op = {
    .name = "contrast", .torchvision = "ColorJitter(contrast=v)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 1, .pname = {"v"}, .def = {0}, .lo = {0}, .hi = {100},
    .draw = draw_factor, .apply = apply_contrast,
};
const ch_aug_op ch_aug_saturation_op = {
    .name = "saturation", .torchvision = "ColorJitter(saturation=v)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 1, .pname = {"v"}, .def = {0}, .lo = {0}, .hi = {100},
    .draw = draw_factor, .apply = apply_saturation,
};
const ch_aug_op ch_aug_hue_op = {
    .name = "hue", .torchvision = "ColorJitter(hue=v)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 1, .pname = {"v"}, .def = {0}, .lo = {0}, .hi = {0.5f},
    .draw = draw_hue, .apply = apply_hue,
};
