/*
 * erasing.c — RandomErasing(p, scale, ratio, value): a rectangle of the
 * finished sample set to `value`.  torchvision places it after Normalize
 * (it erases the normalized tensor, value 0 = the mean colour), so this is
 * an output-stage op: it runs on the slot after normalize and cast, and
 * `value` is in the slot's units (0 for float outputs is what torchvision's
 * recipes write; for uint8 outputs the value is rounded and clamped to
 * 0..255).  The rectangle is drawn as torchvision's get_params: up to 10
 * tries of area = H W U(scale), log-aspect U(log ratio), h = round(sqrt(area
 * aspect)), w = round(sqrt(area / aspect)), kept when h < H and w < W, then
 * top = U{0..H-h}, left = U{0..W-w}; no fit in 10 tries erases nothing.
 * value `random` is torchvision's value="random": every erased value an
 * independent standard normal (in normalized units, as torchvision draws
 * it; float outputs only, the loader refuses it for uint8), from the
 * sample's stream.
 */
#include "../aug.h"

#include <math.h>

static int check(const float *p, char *why, size_t n)
{
    if (p[2] < p[1])
        return snprintf(why, n, "scale range must be lo <= hi"), 1;
    if (!(p[3] > 0.0f) || p[4] < p[3])
        return snprintf(why, n, "ratio range must be 0 < lo <= hi"), 1;
    return 0;
}

static int check_dtype(const float *p, chute_dtype d, char *why, size_t n)
{
    if (isnan(p[5]) && d == CHUTE_DTYPE_UINT8)
        return snprintf(why, n, "value random writes normal noise in normalized units: it "
                        "needs a float dtype, not uint8"), 1;
    return 0;
}

static int draw(const float *p, uint32_t W, uint32_t H, ch_rng *r, float *args)
{
    if (!ch_aug_coin(r, p[0]))
        return 0;
    const double area = (double)W * H;
    const float lr0 = logf(p[3]), lr1 = logf(p[4]);
    for (int t = 0; t < 10; t++) {
        double ea = area * (double)ch_aug_uniform(r, p[1], p[2]);
        double ar = (double)expf(ch_aug_uniform(r, lr0, lr1));
        double h = nearbyint(sqrt(ea * ar)), w = nearbyint(sqrt(ea / ar));
        if (!(h < H && w < W))
            continue;
        args[0] = (float)ch_rng_below(r, (uint64_t)(H - h + 1)); /* top */
        args[1] = (float)ch_rng_below(r, (uint64_t)(W - w + 1)); /* left */
        args[2] = (float)h;
        args[3] = (float)w;
        args[4] = p[5];
        uint64_t seed = ch_rng_next(r); /* random: the noise's stream */
        args[5] = (float)(uint32_t)(seed >> 40);
        args[6] = (float)(uint32_t)((seed >> 16) & 0xFFFFFFu);
        return h > 0 && w > 0;
    }
    return 0;
}

void ch_aug_erase_out(void *dst, const ch_out_spec *o, const float *args)
{
    const uint32_t S = o->size, top = (uint32_t)args[0], left = (uint32_t)args[1];
    const uint32_t eh = (uint32_t)args[2], ew = (uint32_t)args[3];
    const float v = args[4];
    const size_t plane = (size_t)S * S;
    if (isnan(v)) { /* random: standard normal per value (Box-Muller) */
        ch_rng r = ch_rng_for((uint64_t)args[5] << 24 | (uint64_t)args[6], 0x65726173ull, 0);
        for (int c = 0; c < 3; c++)
            for (uint32_t y = top; y < top + eh && y < S; y++)
                for (uint32_t x = left; x < left + ew && x < S; x++) {
                    double u1 = 1.0 - ch_rng_uniform(&r), u2 = ch_rng_uniform(&r);
                    float z = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
                    size_t at = o->layout == CHUTE_LAYOUT_NHWC ? ((size_t)y * S + x) * 3 + c
                                                                : c * plane + (size_t)y * S + x;
                    if (o->dtype == CHUTE_DTYPE_FLOAT32)
                        ((float *)dst)[at] = z;
                    else if (o->dtype == CHUTE_DTYPE_FLOAT16)
                        ((uint16_t *)dst)[at] = ch_f32_to_f16(z);
                }
        return;
    }
    const uint8_t vb = ch_aug_u8_trunc(nearbyintf(v));
    const uint16_t vh = ch_f32_to_f16(v);
    for (uint32_t y = top; y < top + eh && y < S; y++)
        for (uint32_t x = left; x < left + ew && x < S; x++)
            for (int c = 0; c < 3; c++) {
                size_t at = o->layout == CHUTE_LAYOUT_NHWC ? ((size_t)y * S + x) * 3 + c
                                                            : c * plane + (size_t)y * S + x;
                if (o->dtype == CHUTE_DTYPE_UINT8)
                    ((uint8_t *)dst)[at] = vb;
                else if (o->dtype == CHUTE_DTYPE_FLOAT32)
                    ((float *)dst)[at] = v;
                else
                    ((uint16_t *)dst)[at] = vh;
            }
}

const ch_aug_op ch_aug_erasing = {
    .name = "erasing", .torchvision = "RandomErasing(p, scale, ratio, value)",
    .stage = CH_AUG_OUTPUT, .nparams = 6, .nrequired = 0,
    .pname = {"p", "scale_lo", "scale_hi", "ratio_lo", "ratio_hi", "value"},
    .def = {0.5f, 0.02f, 0.33f, 0.3f, 3.3f, 0.0f},
    .lo = {0, 0, 0, 0, 0, -65504.0f}, .hi = {1, 1, 1, 100, 100, 65504.0f},
    .word = {NULL, NULL, NULL, NULL, NULL, "random"},
    .check = check, .check_dtype = check_dtype, .draw = draw, .apply_out = ch_aug_erase_out,
};
