/*
 * sharpness.c — RandomAdjustSharpness(factor, p): torchvision's
 * adjust_sharpness_image on uint8: the interior is blended with its 3x3
 * smoothed copy (kernel [1 1 1; 1 5 1; 1 1 1] / 13, rounded to uint8
 * levels), x + (1 - factor) * (smooth - x), clamped and truncated; the
 * one-pixel border is kept.  The smoothed value is exact (an integer sum
 * over 13 never lies within float error of a half), the blend rounds as
 * PyTorch's fused add-with-alpha.
 */
#include "../aug.h"

#include <math.h>
#include <string.h>

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    args[0] = p[0];
    return ch_aug_coin(r, p[1]);
}

CH_AUG_CLONES
int ch_aug_sharpen(uint8_t *px, uint32_t w, uint32_t h, float alpha, ch_buf *s)
{
    if (w <= 2 || h <= 2)
        return CHUTE_OK;
    const size_t row = (size_t)w * 3;
    /* The source rows the kernel reads, kept before they are overwritten:
     * three rows, rotated. */
    if (ch_aug_scratch(s, 3 * row) != CHUTE_OK)
        return CHUTE_ENOMEM;
    uint8_t *keep = s->data;
    const float a = (float)(1.0 / 13.0), b = (float)(5.0 / 13.0);
    memcpy(keep, px, row);
    memcpy(keep + row, px + row, row);
    for (uint32_t y = 1; y + 1 < h; y++) {
        const uint8_t *up = keep + ((y - 1) % 3) * row, *mid = keep + (y % 3) * row;
        uint8_t *down = keep + ((y + 1) % 3) * row;
        memcpy(down, px + (size_t)(y + 1) * row, row);
        uint8_t *out = px + (size_t)y * row;
        for (uint32_t x = 1; x + 1 < w; x++) {
            for (int c = 0; c < 3; c++) {
                size_t l = (size_t)(x - 1) * 3 + c, m = (size_t)x * 3 + c, rr = (size_t)(x + 1) * 3 + c;
                float sum = a * up[l] + a * up[m] + a * up[rr] + a * mid[l] + b * mid[m] +
                            a * mid[rr] + a * down[l] + a * down[m] + a * down[rr];
                float v = mid[m];
                out[m] = ch_aug_u8_trunc(__builtin_fmaf(alpha, rintf(sum) - v, v));
            }
        }
    }
    return CHUTE_OK;
}

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    return ch_aug_sharpen(px, w, h, (float)(1.0 - (double)args[0]), s); /* alpha in double */
}

const ch_aug_op ch_aug_sharpness = {
    .name = "sharpness", .torchvision = "RandomAdjustSharpness(sharpness_factor, p)",
    .stage = CH_AUG_PIXELS, .nparams = 2, .nrequired = 1, .pname = {"factor", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {100, 1},
    .draw = draw, .apply = apply,
};
