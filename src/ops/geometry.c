/*
 * geometry.c — where to crop.
 *
 * The random crop reproduces torchvision's RandomResizedCrop.get_params
 * (ten tries at a random area fraction and log-uniform aspect ratio, then
 * a central fallback), drawing from a per-sample RNG so the crop of a
 * sample depends only on (seed, epoch, sample id).  The eval crop is
 * torchvision's Resize(R) + CenterCrop(size) on a PIL image, with R =
 * floor(size / crop_pct) as timm computes it, mapped back onto the source
 * so the resized image is never materialised.
 *
 * Extreme shapes.  Images may be 1 pixel wide and 2^24 tall (or PNG's
 * 2^31 - 1), so nothing here may assume a "normal" aspect ratio:
 * torchvision's resized long side int(R * long / short) is 4,294,967,296
 * for a 16,777,216 x 1 image at R = 256, one past uint32, so it is kept
 * in double (where it is exact) rather than wrapped to 0; every
 * float-to-integer conversion is range-checked first (an out-of-range
 * conversion is undefined behaviour, and UBSan's float-cast-overflow
 * check in the sanitizer builds watches for it).  We follow torchvision
 * wherever it is defined: for a 1 x 20000 image, Resize(256) gives
 * 256 x 5,120,000 and CenterCrop(224) takes rows 2,559,888.. of it, i.e.
 * 0.875 source rows in the middle of the image, upscaled; we produce
 * exactly that crop without the 3.9 GB intermediate PIL would allocate.
 */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void ch_geom_full(uint32_t w, uint32_t h, ch_crop *out)
{
    w = CH_MIN(w, (uint32_t)INT32_MAX);
    h = CH_MIN(h, (uint32_t)INT32_MAX);
    out->x0 = 0;
    out->y0 = 0;
    out->x1 = w;
    out->y1 = h;
    out->clip_x0 = 0;
    out->clip_y0 = 0;
    out->clip_x1 = (int32_t)w;
    out->clip_y1 = (int32_t)h;
    out->flip = 0;
}

void ch_geom_train(uint32_t W, uint32_t H, double smin, double smax, ch_rng *rng, ch_crop *out)
{
    /* Crop boxes are int32 (no decoder delivers more: JPEG stops at
     * 65535, PNG at 2^31 - 1); a larger caller value is clamped, not
     * wrapped. */
    W = CH_MIN(W, (uint32_t)INT32_MAX);
    H = CH_MIN(H, (uint32_t)INT32_MAX);
    if (W == 0 || H == 0) { /* no decoder gives this: an empty crop, refused by the plan */
        ch_geom_full(W, H, out);
        return;
    }
    const double area = (double)W * H;
    const double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    int32_t cw = 0, chh = 0, ci = 0, cj = 0;
    int found = 0;
    for (int attempt = 0; attempt < 10 && !found; attempt++) {
        double target = area * (smin + (smax - smin) * ch_rng_uniform(rng));
        double ar = exp(lr0 + (lr1 - lr0) * ch_rng_uniform(rng));
        /* int(round(...)) in Python: half to even, compared before any
         * integer conversion (sqrt of a huge area may not fit int32). */
        double w = nearbyint(sqrt(target * ar));
        double h = nearbyint(sqrt(target / ar));
        if (w > 0 && h > 0 && w <= W && h <= H) {
            cw = (int32_t)w;
            chh = (int32_t)h;
            ci = (int32_t)ch_rng_below(rng, H - (uint32_t)chh + 1);
            cj = (int32_t)ch_rng_below(rng, W - (uint32_t)cw + 1);
            found = 1;
        }
    }
    if (!found) {
        /* Central fallback.  W / (3/4) and H * (4/3) are never halves, so
         * lround and Python's round agree; both are bounded by the image
         * before conversion. */
        double in_ratio = (double)W / H, fw = W, fh = H;
        if (in_ratio < 3.0 / 4.0)
            fh = fmin(nearbyint(fw / (3.0 / 4.0)), H);
        else if (in_ratio > 4.0 / 3.0)
            fw = fmin(nearbyint(fh * (4.0 / 3.0)), W);
        cw = (int32_t)fw;
        chh = (int32_t)fh;
        ci = (int32_t)((H - (uint32_t)chh) / 2);
        cj = (int32_t)((W - (uint32_t)cw) / 2);
    }
    /* torchvision crops first, then resizes the crop: the filter never
     * reads outside the crop. */
    out->x0 = cj;
    out->y0 = ci;
    out->x1 = (double)cj + cw;
    out->y1 = (double)ci + chh;
    out->clip_x0 = cj;
    out->clip_y0 = ci;
    out->clip_x1 = cj + cw;
    out->clip_y1 = ci + chh;
    out->flip = ch_rng_next(rng) >> 63;
}

uint32_t ch_eval_resize_size(uint32_t size, float crop_pct)
{
    if (!(crop_pct > 0) || !isfinite(crop_pct))
        return 0;
    /* The float a caller passes is usually a decimal they typed (0.875,
     * 0.9, 0.95): read it back as the shortest decimal that rounds to it,
     * so floor(224 / 0.8f) is 280, as in Python, not 279. */
    double d = crop_pct;
    char buf[40];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)crop_pct);
        if (strtof(buf, NULL) == crop_pct) {
            d = strtod(buf, NULL);
            break;
        }
    }
    double r = floor((double)size / d);
    return r >= 1 && r <= (double)UINT32_MAX ? (uint32_t)r : 0;
}

void ch_geom_eval(uint32_t W, uint32_t H, uint32_t R, uint32_t size, ch_crop *out)
{
    W = CH_MIN(W, (uint32_t)INT32_MAX);
    H = CH_MIN(H, (uint32_t)INT32_MAX);
    if (W == 0 || H == 0 || R == 0) { /* an empty crop, refused by the plan */
        ch_geom_full(0, 0, out);
        return;
    }
    /* Resize(R): the shorter side becomes R, the longer one
     * int(R * long / short) (torchvision's _compute_resized_output_size;
     * Python's true division is correctly rounded, as is this one, since
     * R * long < 2^53 is exact).  Kept in double: it may exceed 2^32. */
    double s = W <= H ? W : H, l = W <= H ? H : W;
    double rl = floor((double)R * l / s);
    double rw = W <= H ? R : rl, rh = W <= H ? rl : R;
    /* CenterCrop(size): int(round((rh - size) / 2)), Python rounding half
     * to even; R >= size is checked by the loader's option validation, and
     * if a caller breaks it the offsets clamp to 0 rather than go negative. */
    double top = fmax(nearbyint((rh - size) / 2.0), 0);
    double left = fmax(nearbyint((rw - size) / 2.0), 0);
    /* Back to source pixels; never past the image (rounding). */
    out->x0 = left * W / rw;
    out->y0 = top * H / rh;
    out->x1 = fmin((left + size) * W / rw, W);
    out->y1 = fmin((top + size) * H / rh, H);
    /* Resize happens on the whole image, so the filter may read any of it. */
    out->clip_x0 = 0;
    out->clip_y0 = 0;
    out->clip_x1 = (int32_t)W;
    out->clip_y1 = (int32_t)H;
    out->flip = 0;
}

void ch_crop_scale(const ch_crop *c, uint32_t denom, uint32_t sw, uint32_t sh, ch_crop *out)
{
    double d = denom;
    out->x0 = c->x0 / d;
    out->y0 = c->y0 / d;
    out->x1 = c->x1 / d;
    out->y1 = c->y1 / d;
    /* In 64 bits: clip_x1 + denom - 1 overflows int32 near INT32_MAX. */
    int64_t dd = denom;
    out->clip_x0 = (int32_t)(c->clip_x0 / dd);
    out->clip_y0 = (int32_t)(c->clip_y0 / dd);
    out->clip_x1 = (int32_t)CH_MIN((c->clip_x1 + dd - 1) / dd, (int64_t)sw);
    out->clip_y1 = (int32_t)CH_MIN((c->clip_y1 + dd - 1) / dd, (int64_t)sh);
    out->flip = c->flip;
}
