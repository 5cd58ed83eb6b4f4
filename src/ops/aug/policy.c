/*
 * policy.c — what TrivialAugmentWide, RandAugment and AutoAugment share
 * (trivialaugment.c, randaugment.c, autoaugment.c): torchvision v2's
 * _AUGMENTATION_SPACE magnitudes and _apply_image_or_video_transform.
 *
 * Magnitudes are torchvision's float32 tables, computed as torch computes
 * them: torch.linspace's scalar loop (start + step * i below the halfway
 * index, end - step * (steps - 1 - i) from there, each one fused
 * multiply-add, as the compiler contracts them in PyTorch's kernel; the
 * plain float32 expression differs in the last bit for 83 of 2085 entries
 * of the fixture's tables, e.g. Solarize's 0.8 of 16 bins, which moves
 * the threshold 204 across the level 204).  torch's vectorised loop, used
 * for tables of 32 values and more on AVX-512 (16 and more on AVX2), can
 * differ in the last bit; posterize's (8 - arange / ((bins - 1) / d))
 * rounded half to even.  A policy op is then applied with the magnitude as
 * torchvision turns it into the op's argument:
 *   ShearX/Y       affine shear atan(m) degrees about the corner
 *   TranslateX/Y   int(m) pixels
 *   Rotate         m degrees
 *   Brightness, Color (saturation), Contrast, Sharpness: factor 1.0 + m
 *                  (double; _blend's alpha 1.0 - factor, in double too)
 *   Posterize      int(m) bits
 *   Solarize       threshold 255 * m, compared in float32
 *   AutoContrast, Equalize, Invert, Identity: no magnitude
 */
#include "../aug.h"

#include <math.h>

const char *const ch_aug_policy_names[CH_AUG_P_COUNT] = {
    "Identity", "ShearX",    "ShearY",   "TranslateX", "TranslateY",
    "Rotate",   "Brightness", "Color",   "Contrast",   "Sharpness",
    "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
};

extern const ch_aug_op ch_aug_posterize, ch_aug_solarize, ch_aug_autocontrast, ch_aug_equalize,
    ch_aug_invert;

float ch_aug_linspace(float start, float end, int64_t steps, int64_t idx)
{
    if (steps <= 1)
        return start;
    const float step = (end - start) / (float)(steps - 1);
    return idx < steps / 2 ? __builtin_fmaf(step, (float)idx, start)
                           : __builtin_fmaf(-step, (float)(steps - idx - 1), end);
}

float ch_aug_policy_magnitude(int space, int op, int nbins, int idx, uint32_t w, uint32_t h,
                              int *has, int *signed_)
{
    const int wide = space == CH_AUG_SPACE_WIDE;
    *has = 1;
    *signed_ = 1;
    switch (op) {
    case CH_AUG_P_SHEAR_X:
    case CH_AUG_P_SHEAR_Y:
        return ch_aug_linspace(0.0f, wide ? 0.99f : 0.3f, nbins, idx);
    case CH_AUG_P_TRANSLATE_X:
    case CH_AUG_P_TRANSLATE_Y: {
        if (wide)
            return ch_aug_linspace(0.0f, 32.0f, nbins, idx);
        const double side = op == CH_AUG_P_TRANSLATE_X ? w : h;
        return ch_aug_linspace(0.0f, (float)(150.0 / 331.0 * side), nbins, idx);
    }
    case CH_AUG_P_ROTATE:
        return ch_aug_linspace(0.0f, wide ? 135.0f : 30.0f, nbins, idx);
    case CH_AUG_P_BRIGHTNESS:
    case CH_AUG_P_COLOR:
    case CH_AUG_P_CONTRAST:
    case CH_AUG_P_SHARPNESS:
        return ch_aug_linspace(0.0f, wide ? 0.99f : 0.9f, nbins, idx);
    case CH_AUG_P_POSTERIZE: {
        *signed_ = 0;
        const float div = (float)((nbins - 1) / (wide ? 6.0 : 4.0));
        return (float)(int)rintf(8.0f - (float)idx / div);
    }
    case CH_AUG_P_SOLARIZE:
        *signed_ = 0;
        return ch_aug_linspace(1.0f, 0.0f, nbins, idx);
    default:
        *has = 0;
        *signed_ = 0;
        return 0.0f;
    }
}

/* _blend's ratio and alpha for factor 1.0 + m, both from the double. */
static float ratio_of(float m)
{
    return (float)(1.0 + (double)m);
}
static float alpha_of(float m)
{
    return (float)(1.0 - (1.0 + (double)m));
}

static int apply_one(uint8_t *px, uint32_t w, uint32_t h, int op, float m, ch_buf *s)
{
    const size_t n = (size_t)w * h;
    float a;
    switch (op) {
    case CH_AUG_P_IDENTITY:
        return CHUTE_OK;
    case CH_AUG_P_SHEAR_X:
        return ch_aug_geometric(px, w, h, CH_AUG_GEO_SHEAR_X, m, s);
    case CH_AUG_P_SHEAR_Y:
        return ch_aug_geometric(px, w, h, CH_AUG_GEO_SHEAR_Y, m, s);
    case CH_AUG_P_TRANSLATE_X:
        return ch_aug_geometric(px, w, h, CH_AUG_GEO_TRANSLATE_X, m, s);
    case CH_AUG_P_TRANSLATE_Y:
        return ch_aug_geometric(px, w, h, CH_AUG_GEO_TRANSLATE_Y, m, s);
    case CH_AUG_P_ROTATE:
        return ch_aug_geometric(px, w, h, CH_AUG_GEO_ROTATE, m, s);
    case CH_AUG_P_BRIGHTNESS:
        ch_aug_brightness(px, n, ratio_of(m));
        return CHUTE_OK;
    case CH_AUG_P_COLOR:
        ch_aug_saturation_blend(px, n, ratio_of(m), alpha_of(m));
        return CHUTE_OK;
    case CH_AUG_P_CONTRAST:
        ch_aug_contrast_blend(px, n, ratio_of(m), alpha_of(m));
        return CHUTE_OK;
    case CH_AUG_P_SHARPNESS:
        return ch_aug_sharpen(px, w, h, alpha_of(m), s);
    case CH_AUG_P_POSTERIZE:
        a = (float)(int)m;
        return ch_aug_posterize.apply(px, w, h, &a, s);
    case CH_AUG_P_SOLARIZE:
        a = (float)(255.0 * (double)m); /* torch compares uint8 >= threshold in float32 */
        return ch_aug_solarize.apply(px, w, h, &a, s);
    case CH_AUG_P_AUTOCONTRAST:
        return ch_aug_autocontrast.apply(px, w, h, &m, s);
    case CH_AUG_P_EQUALIZE:
        return ch_aug_equalize.apply(px, w, h, &m, s);
    case CH_AUG_P_INVERT:
        return ch_aug_invert.apply(px, w, h, &m, s);
    default:
        return CHUTE_EINVAL;
    }
}

int ch_aug_policy_apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    const int n = (int)args[0];
    for (int k = 0; k < n && 2 + 2 * k < CH_AUG_MAXARGS; k++) {
        int rc = apply_one(px, w, h, (int)args[1 + 2 * k], args[2 + 2 * k], s);
        if (rc != CHUTE_OK)
            return rc;
    }
    return CHUTE_OK;
}
