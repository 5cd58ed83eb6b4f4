/*
 * trivialaugment.c — TrivialAugmentWide(num_magnitude_bins): one op drawn
 * uniformly from the 14 of the Wide space (Identity, ShearX, ShearY,
 * TranslateX, TranslateY, Rotate, Brightness, Color, Contrast, Sharpness,
 * Posterize, Solarize, AutoContrast, Equalize), one of its bins uniformly,
 * the sign with probability 1/2 where the space signs it (policy.c).
 * args: [0] 1, [1] op id, [2] signed magnitude.
 */
#include "../aug.h"

static int check(const float *p, char *why, size_t n)
{
    if (p[0] != (float)(int)p[0])
        return snprintf(why, n, "num_magnitude_bins must be a whole number"), 1;
    return 0;
}

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    const int nbins = (int)p[0];
    const int op = (int)ch_rng_below(r, CH_AUG_P_INVERT); /* the 14 before Invert */
    int has, sgn;
    float m = ch_aug_policy_magnitude(CH_AUG_SPACE_WIDE, op, nbins, 0, w, h, &has, &sgn);
    if (has) {
        const int bin = (int)ch_rng_below(r, (uint64_t)nbins);
        m = ch_aug_policy_magnitude(CH_AUG_SPACE_WIDE, op, nbins, bin, w, h, &has, &sgn);
        if (sgn && (float)ch_rng_uniform(r) <= 0.5f)
            m = -m;
    }
    args[0] = 1;
    args[1] = (float)op;
    args[2] = m;
    return 1;
}

const ch_aug_op ch_aug_trivialaugment = {
    .name = "trivialaugment", .torchvision = "TrivialAugmentWide(num_magnitude_bins)",
    .stage = CH_AUG_PIXELS, .nparams = 1, .nrequired = 0, .pname = {"num_magnitude_bins"},
    .def = {31}, .lo = {2}, .hi = {1024}, .check = check,
    .draw = draw, .apply = ch_aug_policy_apply,
};
