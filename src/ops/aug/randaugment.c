/*
 * randaugment.c — RandAugment(num_ops, magnitude, num_magnitude_bins):
 * num_ops times, an op drawn uniformly from the 14 of RandAugment's space
 * (TrivialAugmentWide's ops with AutoAugment's ranges: shear 0.3,
 * translate 150/331 of the side, rotate 30, factors 0.9, posterize 8..4),
 * at bin `magnitude` of num_magnitude_bins, signed with probability 1/2
 * where the space signs it (policy.c).
 * args: [0] num_ops, then (op id, signed magnitude) per op.
 */
#include "../aug.h"

#define MAX_OPS ((CH_AUG_MAXARGS - 1) / 2)

static int check(const float *p, char *why, size_t n)
{
    for (int i = 0; i < 3; i++)
        if (p[i] != (float)(int)p[i])
            return snprintf(why, n, "num_ops, magnitude and num_magnitude_bins must be whole "
                                    "numbers"), 1;
    if (p[1] >= p[2])
        return snprintf(why, n, "magnitude %g must be below num_magnitude_bins %g", p[1], p[2]), 1;
    return 0;
}

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    const int nops = (int)p[0], mag = (int)p[1], nbins = (int)p[2];
    args[0] = (float)nops;
    for (int k = 0; k < nops; k++) {
        const int op = (int)ch_rng_below(r, CH_AUG_P_INVERT);
        int has, sgn;
        float m = ch_aug_policy_magnitude(CH_AUG_SPACE_RAND, op, nbins, mag, w, h, &has, &sgn);
        if (has && sgn && (float)ch_rng_uniform(r) <= 0.5f)
            m = -m;
        args[1 + 2 * k] = (float)op;
        args[2 + 2 * k] = m;
    }
    return nops > 0;
}

const ch_aug_op ch_aug_randaugment = {
    .name = "randaugment", .torchvision = "RandAugment(num_ops, magnitude, num_magnitude_bins)",
    .stage = CH_AUG_PIXELS, .nparams = 3, .nrequired = 0,
    .pname = {"num_ops", "magnitude", "num_magnitude_bins"},
    .def = {2, 9, 31}, .lo = {0, 0, 2}, .hi = {MAX_OPS, 1023, 1024}, .check = check,
    .draw = draw, .apply = ch_aug_policy_apply,
};
