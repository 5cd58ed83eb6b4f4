/*
 * posterize.c — RandomPosterize(bits, p): keep the top `bits` bits of every
 * value (torchvision's `image & mask` on uint8; exact).
 */
#include "../aug.h"

static int check(const float *p, char *why, size_t n)
{
    if (p[0] != (float)(int)p[0])
        return snprintf(why, n, "bits must be a whole number"), 1;
    return 0;
}

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    args[0] = p[0];
    return ch_aug_coin(r, p[1]);
}

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    (void)s;
    int bits = (int)args[0];
    if (bits >= 8)
        return CHUTE_OK;
    uint8_t mask = (uint8_t)(0xFFu << (8 - bits));
    size_t n = (size_t)w * h * 3;
    for (size_t i = 0; i < n; i++)
        px[i] &= mask;
    return CHUTE_OK;
}

const ch_aug_op ch_aug_posterize = {
    .name = "posterize", .torchvision = "RandomPosterize(bits, p)", .stage = CH_AUG_PIXELS,
    .nparams = 2, .nrequired = 1, .pname = {"bits", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {8, 1},
    .check = check, .draw = draw, .apply = apply,
};
