/*
 * solarize.c — RandomSolarize(threshold, p): x >= threshold becomes
 * 255 - x (torchvision's torch.where on uint8; exact).
 */
#include "../aug.h"

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    args[0] = p[0];
    return ch_aug_coin(r, p[1]);
}

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    (void)s;
    const float t = args[0];
    size_t n = (size_t)w * h * 3;
    for (size_t i = 0; i < n; i++)
        if ((float)px[i] >= t)
            px[i] = (uint8_t)(255 - px[i]);
    return CHUTE_OK;
}

const ch_aug_op ch_aug_solarize = {
    .name = "solarize", .torchvision = "RandomSolarize(threshold, p)", .stage = CH_AUG_PIXELS,
    .nparams = 2, .nrequired = 1, .pname = {"threshold", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {255, 1},
    .draw = draw, .apply = apply,
};
