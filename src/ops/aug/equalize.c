/*
 * equalize.c — RandomEqualize(p): per-channel histogram equalisation with
 * PIL's lookup table, as torchvision's equalize_image computes it on uint8
 * (exact): step = (pixels not in the highest occupied bin) // 255;
 * lut[0] = 0, lut[k] = min(255, (cum[k-1] + step // 2) // step); a channel
 * with step 0 is left as it is.  It depends on the whole image: here, the
 * sample's output crop (torchvision's place in a recipe after the crop).
 */
#include "../aug.h"

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    (void)args, (void)s;
    const size_t n = (size_t)w * h;
    for (int c = 0; c < 3; c++) {
        uint64_t hist[256] = {0};
        for (size_t i = 0; i < n; i++)
            hist[px[i * 3 + c]]++;
        int last = 255;
        while (last > 0 && hist[last] == 0)
            last--;
        uint64_t step = (n - hist[last]) / 255;
        if (step == 0)
            continue;
        uint8_t lut[256];
        uint64_t cum = 0;
        lut[0] = 0;
        for (int k = 1; k < 256; k++) {
            cum += hist[k - 1];
            uint64_t v = (cum + step / 2) / step;
            lut[k] = (uint8_t)(v > 255 ? 255 : v);
        }
        for (size_t i = 0; i < n; i++)
            px[i * 3 + c] = lut[px[i * 3 + c]];
    }
    return CHUTE_OK;
}

const ch_aug_op ch_aug_equalize = {
    .name = "equalize", .torchvision = "RandomEqualize(p)", .stage = CH_AUG_PIXELS,
    .nparams = 1, .nrequired = 0, .pname = {"p"},
    .def = {0.5f}, .lo = {0}, .hi = {1},
    .draw = ch_aug_draw_coin, .apply = apply,
};
