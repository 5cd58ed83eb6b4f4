/*
 * autocontrast.c — RandomAutocontrast(p): each channel stretched so its
 * minimum is 0 and its maximum 255, in float32 as torchvision's
 * autocontrast_image: (x - min) / ((max - min) * (1/255)), clamped and
 * truncated; a flat channel is kept (exact).  Whole-image: the sample's
 * output crop.
 */
#include "../aug.h"

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    (void)args, (void)s;
    const size_t n = (size_t)w * h;
    for (int c = 0; c < 3; c++) {
        uint8_t lo = 255, hi = 0;
        for (size_t i = 0; i < n; i++) {
            uint8_t v = px[i * 3 + c];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        float mn = lo, inv = (float)(hi - lo) * (float)(1.0 / 255.0);
        if (hi == lo) {
            mn = 0.0f;
            inv = 1.0f;
        }
        uint8_t lut[256];
        for (int v = 0; v < 256; v++)
            lut[v] = ch_aug_u8_trunc(((float)v - mn) / inv);
        for (size_t i = 0; i < n; i++)
            px[i * 3 + c] = lut[px[i * 3 + c]];
    }
    return CHUTE_OK;
}

const ch_aug_op ch_aug_autocontrast = {
    .name = "autocontrast", .torchvision = "RandomAutocontrast(p)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 0, .pname = {"p"},
    .def = {0.5f}, .lo = {0}, .hi = {1},
    .draw = ch_aug_draw_coin, .apply = apply,
};
