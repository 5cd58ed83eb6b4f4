/*
 * mix.h — batch mixing: MixUp and CutMix (options mixup, cutmix,
 * mix_switch, num_classes; docs/AUGMENT.md "Batch mixing").
 *
 * Semantics are torchvision.transforms.v2's MixUp / CutMix, operation by
 * operation, so a batch mixed here is bit-identical to torchvision's on
 * the same batch with the same lambda (and box):
 *   - one draw per batch: lambda ~ Beta(alpha, alpha), a float32 value
 *     (torch samples Beta in float32, then float());
 *   - the partner of sample i is sample i - 1, sample 0's is the last
 *     (batch.roll(1, 0));
 *   - MixUp: out = rolled * (1 - lam) + x * lam, each product and the sum
 *     rounded in the output's dtype as PyTorch's mul_/add_ round them;
 *   - CutMix: a box centred at (randint(W), randint(H)) with half-sides
 *     int(0.5 * sqrt(1 - lam) * W) and ... * H, clamped to the image; the
 *     box's pixels come from the partner; lambda becomes
 *     1 - box area / (W * H);
 *   - labels: one-hot of num_classes, float32, mixed with the same
 *     formula and lambda;
 *   - both on: one of the two per batch, CutMix with probability
 *     `switch_p` (torchvision's RandomChoice([MixUp, CutMix], p=[1 - q, q]);
 *     q = 0.5 is RandomChoice's default p=None).
 * The draws come from (seed, epoch, key) only (key: the batch's first
 * global position, see loader.c), never from torch's generator: the same
 * seed does not give torchvision's lambdas, the same distribution does.
 *
 * What it must never do: allocate per batch (the caller passes scratch of
 * one sample, reserved once), or read a label outside [0, num_classes)
 * (ch_mix_apply returns the sample at fault instead).
 */
#ifndef CHUTE_MIX_H
#define CHUTE_MIX_H

#include "ops.h"

enum { CH_MIX_NONE = 0, CH_MIX_MIXUP = 1, CH_MIX_CUTMIX = 2 };

/* The configured mixing (immutable after create). */
typedef struct ch_mix {
    float mixup;       /* MixUp's alpha, 0 = off */
    float cutmix;      /* CutMix's alpha, 0 = off */
    float switch_p;    /* both on: probability of CutMix for a batch */
    uint32_t classes;  /* num_classes */
} ch_mix;

/* One batch's draw. */
typedef struct ch_mix_draw {
    int kind;                  /* CH_MIX_MIXUP or CH_MIX_CUTMIX (NONE: mixing off) */
    float lam;                 /* Beta(alpha, alpha), float32 as torch draws it */
    uint32_t x1, y1, x2, y2;   /* CutMix: the box, [x1, x2) x [y1, y2) */
    double lam_adj;            /* lambda the labels get (CutMix: 1 - box area / W H) */
} ch_mix_draw;

/* A Beta(a, a) variate from r (two Gamma(a) variates, Marsaglia-Tsang, in
 * log space so that a small alpha does not underflow to 0 / 0). */
double ch_beta_sym(ch_rng *r, double a);

/* The batch's draw: kind, lambda and (CutMix) the box for w x h images. */
void ch_mix_draw_batch(const ch_mix *m, uint64_t seed, uint64_t epoch, uint64_t key, uint32_t w,
                       uint32_t h, ch_mix_draw *out);

/* Mix n samples of `data` (laid out as o says) in place with the draw d,
 * and write the n x classes float32 soft labels of `labels` into soft.
 * scratch: at least one sample's bytes.  Returns -1, or the first sample
 * whose label is outside [0, classes) (nothing is then written). */
int64_t ch_mix_apply(const ch_mix_draw *d, const ch_out_spec *o, void *data, uint32_t n,
                     const int64_t *labels, uint32_t classes, float *soft, void *scratch);

/* The soft labels alone (exposed for tools and tests). */
void ch_mix_labels(const int64_t *labels, uint32_t n, uint32_t classes, double lam, float *soft);

#endif
