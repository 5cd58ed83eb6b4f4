/*
 * ops.h — transforms: crop geometry, and one fused pass that resamples a
 * decoded window and writes the sample straight into its batch slot
 * (flip, normalize, cast and layout included).
 *
 * Geometry follows torchvision on PIL images so a model trained with
 * torchvision sees the same kind of inputs: RandomResizedCrop's sampling
 * procedure, Resize(shorter side)+CenterCrop's arithmetic, and PIL's
 * antialiased bilinear filter (triangle filter widened by the downscale
 * factor, support clipped to the image or crop it resamples from).
 */
#ifndef CHUTE_OPS_H
#define CHUTE_OPS_H

#include "../common/common.h"

/* Source rectangle (fractional, in original image pixels) that maps onto
 * the whole output, the integer rectangle the filter may read from, and
 * whether to mirror horizontally. */
typedef struct ch_crop {
    double x0, y0, x1, y1;
    int32_t clip_x0, clip_y0, clip_x1, clip_y1;
    int flip;
} ch_crop;

/* Every geometry call gives, for any w, h >= 1 (up to INT32_MAX, past
 * which clip coordinates cannot be represented), a crop with finite
 * coordinates, 0 <= x0 < x1 <= w, 0 <= y0 < y1 <= h, and a non-empty clip
 * box inside the image: extreme aspect ratios (1 x 20000, 16777216 x 1)
 * included.  ch_resize_plan_make rejects anything else with EINVAL. */
void ch_geom_train(uint32_t w, uint32_t h, double scale_min, double scale_max, ch_rng *rng,
                   ch_crop *out);
/* torchvision Resize(resize) + CenterCrop(size); resize >= size. */
void ch_geom_eval(uint32_t w, uint32_t h, uint32_t resize, uint32_t size, ch_crop *out);
void ch_geom_full(uint32_t w, uint32_t h, ch_crop *out);
/* Resize side for an eval crop_pct, as timm computes it:
 * floor(size / crop_pct), with crop_pct read as the shortest decimal that
 * rounds to the float given (so 0.8f means 0.8, not 0.800000011920929);
 * 0 if the result does not fit in uint32. */
uint32_t ch_eval_resize_size(uint32_t size, float crop_pct);
/* The same crop in the coordinates of the image scaled by 1/denom. */
void ch_crop_scale(const ch_crop *c, uint32_t denom, uint32_t scaled_w, uint32_t scaled_h,
                   ch_crop *out);

typedef struct ch_out_spec {
    uint32_t size;            /* output is size x size x 3 */
    chute_dtype dtype;
    chute_layout layout;      /* NCHW or NHWC (never DEFAULT here) */
    float mul[3], add[3];     /* float outputs: value = pixel(0..255) * mul + add */
} ch_out_spec;

/* Per-worker reusable memory for plans and intermediate rows. */
typedef struct ch_resize_scratch {
    ch_buf coef;
    ch_buf tmp;
    ch_buf aug_px;  /* option augment: the sample's uint8 HWC pixels (aug.h) */
    ch_buf aug_tmp; /* and the ops' scratch */
    ch_buf geo_px;  /* option geometry: the plan's uint8 HWC output (plan.h) */
} ch_resize_scratch;

typedef struct ch_resize_axis {
    int32_t *start;           /* first source pixel per output pixel */
    int32_t *count;           /* taps per output pixel */
    float *k;                 /* ksize weights per output pixel */
    int32_t ksize;
    int32_t kmax;             /* largest tap count; shorter lists are zero-padded to it */
    int32_t lo, hi;           /* union of source pixels read: [lo, hi) */
} ch_resize_axis;

typedef struct ch_resize_plan {
    ch_resize_axis x, y;
    uint32_t out_w, out_h;
} ch_resize_plan;

/* Compute filter taps for mapping crop -> out_w x out_h. After this,
 * plan.x.lo/hi and plan.y.lo/hi give the window the decoder must
 * deliver.  Memory comes from s->coef.  CHUTE_EINVAL for a crop that is
 * not finite, empty, or whose clip box is empty or negative; CHUTE_ENOMEM
 * when the taps do not fit in memory. */
int ch_resize_plan_make(ch_resize_plan *p, const ch_crop *c, uint32_t out_w, uint32_t out_h,
                        ch_resize_scratch *s);

/* Resample the window `pix` (w x h RGB8, top-left at source (px, py)) and
 * write the result into dst, one sample's slot. */
int ch_resize_run(const ch_resize_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                  int32_t py, int flip, const ch_out_spec *o, void *dst, ch_resize_scratch *s);

/* Whether ch_resize_run takes the horizontal-first order for this plan
 * (exposed for tests: the choice depends only on the plan). */
int ch_resize_hfirst(const ch_resize_plan *p);

uint16_t ch_f32_to_f16(float f);

#endif
