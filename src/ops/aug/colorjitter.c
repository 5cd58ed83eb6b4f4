/*
 * colorjitter.c — ColorJitter(brightness, contrast, saturation, hue): the
 * four adjustments of color.c in a random order, as torchvision v2 draws
 * it: a permutation of the four (randperm(4)), then one factor per
 * adjustment that is on (parameter > 0), each applied in the drawn order.
 * args: [0..3] the order, [4..7] the factors (NaN: that one is off).
 */
#include "../aug.h"

#include <math.h>

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    uint64_t perm[4];
    ch_permutation(perm, 4, r);
    for (int i = 0; i < 4; i++)
        args[i] = (float)perm[i];
    for (int i = 0; i < 3; i++)
        args[4 + i] = p[i] > 0.0f ? ch_aug_jitter_factor(r, p[i]) : NAN;
    args[7] = p[3] > 0.0f ? ch_aug_uniform(r, -p[3], p[3]) : NAN;
    return p[0] > 0.0f || p[1] > 0.0f || p[2] > 0.0f || p[3] > 0.0f;
}

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    (void)s;
    const size_t n = (size_t)w * h;
    for (int i = 0; i < 4; i++) {
        int fn = (int)args[i];
        float f = args[4 + fn];
        if (isnan(f))
            continue;
        switch (fn) {
        case 0: ch_aug_brightness(px, n, f); break;
        case 1: ch_aug_contrast(px, n, f); break;
        case 2: ch_aug_saturation(px, n, f); break;
        default: ch_aug_hue(px, n, f); break;
        }
    }
    return CHUTE_OK;
}

const ch_aug_op ch_aug_colorjitter = {
    .name = "colorjitter", .torchvision = "ColorJitter(brightness, contrast, saturation, hue)",
    .stage = CH_AUG_PIXELS, .nparams = 4, .nrequired = 1,
    .pname = {"brightness", "contrast", "saturation", "hue"},
    .def = {0, 0, 0, 0}, .lo = {0, 0, 0, 0}, .hi = {100, 100, 100, 0.5f},
    .draw = draw, .apply = apply,
};
