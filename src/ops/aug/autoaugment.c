/*
 * autoaugment.c — AutoAugment(AutoAugmentPolicy.IMAGENET): one of the 25
 * sub-policies drawn uniformly; each of its two (op, probability, bin)
 * applied when rand() <= probability, at that bin of 10 in RandAugment's
 * space (policy.c), signed with probability 1/2 where the space signs it.
 * The table is torchvision's _get_policies(IMAGENET).
 * args: [0] 2, then (op id, signed magnitude) per slot; a slot not applied
 * is Identity (not in AutoAugment's space).
 */
#include "../aug.h"

typedef struct {
    uint8_t op;
    float p;
    int8_t bin; /* -1: no magnitude */
} sub_op;

#define P(name) CH_AUG_P_##name
static const sub_op imagenet[25][2] = {
    {{P(POSTERIZE), 0.4f, 8}, {P(ROTATE), 0.6f, 9}},
    {{P(SOLARIZE), 0.6f, 5}, {P(AUTOCONTRAST), 0.6f, -1}},
    {{P(EQUALIZE), 0.8f, -1}, {P(EQUALIZE), 0.6f, -1}},
    {{P(POSTERIZE), 0.6f, 7}, {P(POSTERIZE), 0.6f, 6}},
    {{P(EQUALIZE), 0.4f, -1}, {P(SOLARIZE), 0.2f, 4}},
    {{P(EQUALIZE), 0.4f, -1}, {P(ROTATE), 0.8f, 8}},
    {{P(SOLARIZE), 0.6f, 3}, {P(EQUALIZE), 0.6f, -1}},
    {{P(POSTERIZE), 0.8f, 5}, {P(EQUALIZE), 1.0f, -1}},
    {{P(ROTATE), 0.2f, 3}, {P(SOLARIZE), 0.6f, 8}},
    {{P(EQUALIZE), 0.6f, -1}, {P(POSTERIZE), 0.4f, 6}},
    {{P(ROTATE), 0.8f, 8}, {P(COLOR), 0.4f, 0}},
    {{P(ROTATE), 0.4f, 9}, {P(EQUALIZE), 0.6f, -1}},
    {{P(EQUALIZE), 0.0f, -1}, {P(EQUALIZE), 0.8f, -1}},
    {{P(INVERT), 0.6f, -1}, {P(EQUALIZE), 1.0f, -1}},
    {{P(COLOR), 0.6f, 4}, {P(CONTRAST), 1.0f, 8}},
    {{P(ROTATE), 0.8f, 8}, {P(COLOR), 1.0f, 2}},
    {{P(COLOR), 0.8f, 8}, {P(SOLARIZE), 0.8f, 7}},
    {{P(SHARPNESS), 0.4f, 7}, {P(INVERT), 0.6f, -1}},
    {{P(SHEAR_X), 0.6f, 5}, {P(EQUALIZE), 1.0f, -1}},
    {{P(COLOR), 0.4f, 0}, {P(EQUALIZE), 0.6f, -1}},
    {{P(EQUALIZE), 0.4f, -1}, {P(SOLARIZE), 0.2f, 4}},
    {{P(SOLARIZE), 0.6f, 5}, {P(AUTOCONTRAST), 0.6f, -1}},
    {{P(INVERT), 0.6f, -1}, {P(EQUALIZE), 1.0f, -1}},
    {{P(COLOR), 0.6f, 4}, {P(CONTRAST), 1.0f, 8}},
    {{P(EQUALIZE), 0.8f, -1}, {P(EQUALIZE), 0.6f, -1}},
};
#undef P

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)p;
    const sub_op *sub = imagenet[ch_rng_below(r, 25)];
    args[0] = 2;
    for (int k = 0; k < 2; k++) {
        int op = CH_AUG_P_IDENTITY;
        float m = 0.0f;
        /* torchvision: `if not torch.rand(()) <= probability: continue` */
        if ((float)ch_rng_uniform(r) <= sub[k].p) {
            op = sub[k].op;
            int has, sgn;
            if (sub[k].bin >= 0) {
                m = ch_aug_policy_magnitude(CH_AUG_SPACE_RAND, op, 10, sub[k].bin, w, h, &has,
                                            &sgn);
                if (sgn && (float)ch_rng_uniform(r) <= 0.5f)
                    m = -m;
            }
        }
        args[1 + 2 * k] = (float)op;
        args[2 + 2 * k] = m;
    }
    return 1;
}

const ch_aug_op ch_aug_autoaugment = {
    .name = "autoaugment", .torchvision = "AutoAugment(AutoAugmentPolicy.IMAGENET)",
    .stage = CH_AUG_PIXELS, .nparams = 0, .nrequired = 0,
    .draw = draw, .apply = ch_aug_policy_apply,
};
