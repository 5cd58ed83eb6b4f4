/*
 * aug.h — the augmentation-op registry (option `augment`).
 *
 * An augmentation is one file in src/ops/aug/ that defines a ch_aug_op
 * (name, parameters with defaults and bounds, a draw and an apply
 * function) plus one line in src/ops/aug/registry.c's table; docs/DESIGN.md
 * "Adding an augmentation" walks through it, docs/AUGMENT.md lists the
 * ops with their torchvision counterparts and measured differences.
 *
 * Where the ops run.  With augment set, the fused pass resamples the crop
 * into the worker's uint8 HWC scratch (rounded as torchvision's PIL crop
 * is), the pixel-stage ops run there in the order written, then one pass
 * writes the sample into its slot with normalize, cast and layout, and the
 * output-stage ops (RandomErasing, which torchvision places after
 * Normalize) run on the slot.  Without augment nothing of this runs: the
 * resampler writes the slot directly, as before.
 *
 * Randomness.  Every draw comes from ch_aug_rng(seed, epoch, sample), a
 * stream of its own (adding augment does not move the crop draws), so a
 * sample's augmentation depends on (seed, epoch, sample) only, whatever
 * the worker count or order.
 *
 * Memory.  An op's scratch is the worker's ch_resize_scratch.aug buffer
 * (grown to the largest need, then reused): nothing is allocated per
 * sample in steady state.
 */
#ifndef CHUTE_AUG_H
#define CHUTE_AUG_H

#include "ops.h"

#include <stdio.h>

#define CH_AUG_MAXP 6      /* parameters of one op */
#define CH_AUG_MAXARGS 16  /* one sample's drawn arguments */
#define CH_AUG_MAXSTEPS 16 /* ops in one augment string */

enum {
    CH_AUG_PIXELS = 0, /* apply() on the sample's uint8 HWC pixels, before normalize */
    CH_AUG_OUTPUT = 1  /* apply_out() on the finished slot, after normalize and cast */
};

typedef struct ch_aug_op {
    const char *name;        /* in the augment string */
    const char *torchvision; /* counterpart in torchvision.transforms.v2 (docs) */
    int stage;               /* CH_AUG_PIXELS or CH_AUG_OUTPUT */
    int nparams;             /* parameters an augment string may give, ':'-separated */
    int nrequired;           /* leading ones without a default */
    const char *pname[CH_AUG_MAXP];
    float def[CH_AUG_MAXP], lo[CH_AUG_MAXP], hi[CH_AUG_MAXP]; /* inclusive bounds */
    const char *word[CH_AUG_MAXP]; /* a word a parameter may be instead of a number (NaN) */
    int (*check)(const float *p, char *why, size_t n); /* relations between parameters, or NULL */
    /* Whether the configured op can serve outputs of dtype `d` (nonzero +
     * why when not), or NULL: any. */
    int (*check_dtype)(const float *p, chute_dtype d, char *why, size_t n);
    /* One sample's draw from the configured parameters p (w x h: the
     * output's size): fill args, and return 0 when the op is not applied
     * to this sample (its probability said no).  r is this step's own
     * stream (ch_aug_step_rng), so how much an op draws never moves the
     * draws of the ops after it. */
    int (*draw)(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args);
    /* Apply with drawn args to w x h RGB8 (HWC, rows of w * 3 bytes). */
    int (*apply)(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *scratch);
    /* CH_AUG_OUTPUT: apply to the sample's slot as o describes it. */
    void (*apply_out)(void *dst, const ch_out_spec *o, const float *args);
} ch_aug_op;

/* The registry, in the order docs list it; NULL-terminated. */
extern const ch_aug_op *const ch_aug_ops[];
const ch_aug_op *ch_aug_find(const char *name, size_t len);

typedef struct ch_aug_step {
    const ch_aug_op *op;
    float p[CH_AUG_MAXP];
} ch_aug_step;

/* A parsed augment string: the steps in the order written. */
typedef struct ch_aug {
    uint32_t n;
    ch_aug_step step[CH_AUG_MAXSTEPS];
} ch_aug;

/* Parse "op[=v1[:v2...]],op..." (see docs/AUGMENT.md).  NULL or "" gives
 * n = 0.  CHUTE_EINVAL names the offending token and why. */
int ch_aug_parse(const char *spec, ch_aug *out, chute_error *err);

/* The sample's augmentation stream: (seed, epoch, sample) only. */
static inline ch_rng ch_aug_rng(uint64_t seed, uint64_t epoch, uint64_t sample)
{
    return ch_rng_for(seed ^ 0x6175676d656e74ull /* "augment" */, epoch, sample);
}

/* Step k's stream, from the sample's. */
static inline ch_rng ch_aug_step_rng(const ch_rng *sample, uint32_t k)
{
    ch_rng r;
    r.s = ch_mix64(sample->s ^ ((uint64_t)(k + 1) * 0xD1B54A32D192ED03ull));
    return r;
}

/* The sample a draw is keyed by: ch_aug_rng(seed, epoch, sample). */
typedef struct ch_aug_key {
    uint64_t seed, epoch, sample;
} ch_aug_key;

/* The fused pass with augmentation: ch_resize_run into uint8 HWC scratch,
 * the pixel ops, the write into dst as o says, the output ops.  aug NULL
 * or empty: exactly ch_resize_run, nothing else computed. */
int ch_transform_run(const ch_resize_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                     int32_t py, int flip, const ch_out_spec *o, const ch_aug *aug,
                     ch_aug_key key, void *dst, ch_resize_scratch *s);

/* Write size x size RGB8 HWC pixels into dst as o says (normalize, cast,
 * layout): the last step of the augmented pass, exposed for tests. */
void ch_out_write_u8(const uint8_t *px, const ch_out_spec *o, void *dst);

/* ---- helpers shared by op files (torchvision's kernels, float32) ---- */

/* torchvision's float -> uint8 of its blends: clamp to [0, 255] and
 * truncate (Tensor.to(uint8)); NaN gives 0. */
static inline uint8_t ch_aug_u8_trunc(float v)
{
    return !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}
/* rgb_to_grayscale's float value: r*0.2989 + 0.587*g + 0.114*b with
 * PyTorch's fused add-with-alpha (vectorised fmadd). */
static inline float ch_aug_gray(const uint8_t *rgb)
{
    float l = (float)rgb[0] * 0.2989f;
    l = __builtin_fmaf(0.587f, (float)rgb[1], l);
    return __builtin_fmaf(0.114f, (float)rgb[2], l);
}
/* The per-pixel kernels get an x86-64-v3 clone (FMA in hardware rather
 * than libm's fmaf call; the same exactly rounded result either way). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CH_AUG_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CH_AUG_CLONES
#endif
/* _blend(image1, image2, ratio) of one value: image1*ratio + image2*(1-ratio),
 * clamped and truncated. */
static inline uint8_t ch_aug_blend(uint8_t a, float b, float ratio, float alpha)
{
    return ch_aug_u8_trunc(__builtin_fmaf(alpha, b, (float)a * ratio));
}
/* Coin for "apply with probability p": torch's `rand(1) >= p` skips. */
static inline int ch_aug_coin(ch_rng *r, float p)
{
    return (float)ch_rng_uniform(r) < p;
}
/* The draw of an op whose only random choice is whether it applies, with
 * probability p[0] (invert, grayscale, equalize, autocontrast). */
int ch_aug_draw_coin(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args);
static inline float ch_aug_uniform(ch_rng *r, float lo, float hi)
{
    return lo + (float)ch_rng_uniform(r) * (hi - lo);
}
/* The kernels ops share (color.c, blur.c, erasing.c); n = pixels. */
void ch_aug_brightness(uint8_t *px, size_t n, float f);
void ch_aug_contrast(uint8_t *px, size_t n, float f);
void ch_aug_saturation(uint8_t *px, size_t n, float f);
void ch_aug_hue(uint8_t *px, size_t n, float f);
/* contrast, saturation and sharpness with _blend's alpha given: torchvision
 * computes alpha = 1.0 - ratio in double from the double ratio, which a
 * policy's 1.0 + magnitude is before any float32 rounding. */
void ch_aug_contrast_blend(uint8_t *px, size_t n, float f, float alpha);
void ch_aug_saturation_blend(uint8_t *px, size_t n, float f, float alpha);
int ch_aug_sharpen(uint8_t *px, uint32_t w, uint32_t h, float alpha, ch_buf *s);

/* Geometry (affine.c): torchvision v2's affine / rotate on uint8, NEAREST,
 * fill 0.  ch_aug_inverse_affine is _get_inverse_affine_matrix (scale 1,
 * center relative to the image's middle, degrees); ch_aug_warp samples
 * with it as _affine_grid + grid_sample do; ch_aug_geometric applies one
 * policy op (_apply_image_or_video_transform's ShearX ... Rotate) of
 * magnitude mag. */
enum {
    CH_AUG_GEO_ROTATE,
    CH_AUG_GEO_SHEAR_X,
    CH_AUG_GEO_SHEAR_Y,
    CH_AUG_GEO_TRANSLATE_X,
    CH_AUG_GEO_TRANSLATE_Y
};
void ch_aug_inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx,
                           double shy, double m[6]);
int ch_aug_warp(uint8_t *px, uint32_t w, uint32_t h, const double m[6], ch_buf *s);
int ch_aug_geometric(uint8_t *px, uint32_t w, uint32_t h, int kind, double mag, ch_buf *s);

/* Policies (policy.c): the ops of torchvision's _AUGMENTATION_SPACE, by id
 * (CH_AUG_POLICY_OPS names, torchvision's keys). */
enum {
    CH_AUG_P_IDENTITY,
    CH_AUG_P_SHEAR_X,
    CH_AUG_P_SHEAR_Y,
    CH_AUG_P_TRANSLATE_X,
    CH_AUG_P_TRANSLATE_Y,
    CH_AUG_P_ROTATE,
    CH_AUG_P_BRIGHTNESS,
    CH_AUG_P_COLOR,
    CH_AUG_P_CONTRAST,
    CH_AUG_P_SHARPNESS,
    CH_AUG_P_POSTERIZE,
    CH_AUG_P_SOLARIZE,
    CH_AUG_P_AUTOCONTRAST,
    CH_AUG_P_EQUALIZE,
    CH_AUG_P_INVERT,
    CH_AUG_P_COUNT
};
extern const char *const ch_aug_policy_names[CH_AUG_P_COUNT];
enum { CH_AUG_SPACE_WIDE, CH_AUG_SPACE_RAND }; /* TrivialAugmentWide's; RandAugment's = AutoAugment's */
/* torch.linspace(start, end, steps)[idx] in float32 (its scalar loop). */
float ch_aug_linspace(float start, float end, int64_t steps, int64_t idx);
/* The magnitude of op at bin idx of nbins in a space (w x h image), and
 * whether the space signs it. */
float ch_aug_policy_magnitude(int space, int op, int nbins, int idx, uint32_t w, uint32_t h,
                              int *has, int *signed_);
/* args: [0] n, then (op id, signed magnitude) n times: apply them in order. */
int ch_aug_policy_apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s);
float ch_aug_jitter_factor(ch_rng *r, float v);
void ch_aug_gauss_kernel(int k, float sigma, float *out);
void ch_aug_erase_out(void *dst, const ch_out_spec *o, const float *args);

/* Reserve n bytes of the op scratch. */
static inline int ch_aug_scratch(ch_buf *s, size_t n)
{
    return ch_buf_reserve(s, n);
}

#endif
