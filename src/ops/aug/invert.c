/*
 * invert.c — RandomInvert(p): 255 - x (torchvision's bitwise_not on uint8;
 * exact).
 */
#include "../aug.h"

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    (void)args, (void)s;
    size_t n = (size_t)w * h * 3;
    for (size_t i = 0; i < n; i++)
        px[i] = (uint8_t)~px[i];
    return CHUTE_OK;
}

const ch_aug_op ch_aug_invert = {
    .name = "invert", .torchvision = "RandomInvert(p)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 0, .pname = {"p"},
    .def = {0.5f}, .lo = {0.0f}, .hi = {1.0f},
    .draw = ch_aug_draw_coin, .apply = apply,
};
