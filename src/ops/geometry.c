/*
 * geometry.c — where to crop.
 *
 * The random crop reproduces torchvision's RandomResizedCrop.get_params
 * (ten tries at a random area fraction and log-uniform aspect ratio, then
 * a central fallback), drawing from a per-sample RNG so the crop of a
 * sample depends only on (seed, epoch, sample id).
 */
#include "ops.h"

#include <math.h>

void ch_geom_full(uint32_t w, uint32_t h, ch_crop *out)
{
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
    const double area = (double)W * H;
    const double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    int32_t cw = 0, chh = 0, ci = 0, cj = 0;
    int found = 0;
    for (int attempt = 0; attempt < 10 && !found; attempt++) {
        double target = area * (smin + (smax - smin) * ch_rng_uniform(rng));
        double ar = exp(lr0 + (lr1 - lr0) * ch_rng_uniform(rng));
        int32_t w = (int32_t)lround(sqrt(target * ar));
        int32_t h = (int32_t)lround(sqrt(target / ar));
        if (w > 0 && h > 0 && (uint32_t)w <= W && (uint32_t)h <= H) {
            ci = (int32_t)ch_rng_below(rng, H - (uint32_t)h + 1);
            cj = (int32_t)ch_rng_below(rng, W - (uint32_t)w + 1);
            cw = w;
            chh = h;
            found = 1;
        }
    }
    if (!found) {
        double in_ratio = (double)W / H;
        if (in_ratio < 3.0 / 4.0) {
            cw = (int32_t)W;
            chh = (int32_t)lround(cw / (3.0 / 4.0));
        } else if (in_ratio > 4.0 / 3.0) {
            chh = (int32_t)H;
            cw = (int32_t)lround(chh * (4.0 / 3.0));
        } else {
            cw = (int32_t)W;
            chh = (int32_t)H;
        }
        if (cw > (int32_t)W)
            cw = (int32_t)W;
        if (chh > (int32_t)H)
            chh = (int32_t)H;
        ci = ((int32_t)H - chh) / 2;
        cj = ((int32_t)W - cw) / 2;
    }
    /* torchvision crops first, then resizes the crop: the filter never
     * reads outside the crop. */
    out->x0 = cj;
    out->y0 = ci;
    out->x1 = cj + cw;
    out->y1 = ci + chh;
    out->clip_x0 = cj;
    out->clip_y0 = ci;
    out->clip_x1 = cj + cw;
    out->clip_y1 = ci + chh;
    out->flip = ch_rng_next(rng) >> 63;
}

void ch_geom_eval(uint32_t W, uint32_t H, uint32_t size, ch_crop *out)
{
    /* Resize(R) with R = size * 256 / 224, then CenterCrop(size). */
    uint32_t R = (uint32_t)((size * 256u + 112u) / 224u);
    uint32_t rw, rh;
    if (W <= H) {
        rw = R;
        rh = (uint32_t)((uint64_t)R * H / W);
    } else {
        rh = R;
        rw = (uint32_t)((uint64_t)R * W / H);
    }
    double sx = (double)W / rw, sy = (double)H / rh;
    /* CenterCrop: int(round((rh - size) / 2)) with Python's half-to-even. */
    double top = nearbyint(((double)rh - size) / 2.0);
    double left = nearbyint(((double)rw - size) / 2.0);
    out->x0 = left * sx;
    out->y0 = top * sy;
    out->x1 = (left + size) * sx;
    out->y1 = (top + size) * sy;
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
    out->clip_x0 = c->clip_x0 / (int32_t)denom;
    out->clip_y0 = c->clip_y0 / (int32_t)denom;
    out->clip_x1 = CH_MIN((c->clip_x1 + (int32_t)denom - 1) / (int32_t)denom, (int32_t)sw);
    out->clip_y1 = CH_MIN((c->clip_y1 + (int32_t)denom - 1) / (int32_t)denom, (int32_t)sh);
    out->flip = c->flip;
}
