/*
 * grayscale.c — RandomGrayscale(p): every channel set to
 * trunc(0.2989 R + 0.587 G + 0.114 B), torchvision's rgb_to_grayscale with
 * three output channels on uint8.
 */
#include "../aug.h"

CH_AUG_CLONES
static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    (void)args, (void)s;
    const size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++) {
        uint8_t g = ch_aug_u8_trunc(ch_aug_gray(px + i * 3));
        px[i * 3] = px[i * 3 + 1] = px[i * 3 + 2] = g;
    }
    return CHUTE_OK;
}

const ch_aug_op ch_aug_grayscale = {
    .name = "grayscale", .torchvision = "RandomGrayscale(p)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 0, .pname = {"p"},
    .def = {0.1f}, .lo = {0}, .hi = {1},
    .draw = ch_aug_draw_coin, .apply = apply,
};
