/*
 * affine.c — the geometric kernel of the policy ops (rotate, shear_x,
 * shear_y, translate_x, translate_y): torchvision v2's affine_image /
 * rotate_image on uint8 with NEAREST interpolation and fill 0 (the
 * policies' defaults), reproduced operation by operation:
 *
 *   the inverse matrix   _get_inverse_affine_matrix, in double (libm's
 *                        cos/sin/tan, as Python's math module)
 *   theta                that matrix rounded to float32
 *   the grid             _affine_grid: x = (1 - w) / 2 + j, y likewise;
 *                        theta's columns divided by (w / 2, h / 2);
 *                        gx = (x * r00 + y * r10) + r20 in float32 (the
 *                        order PyTorch's bmm sums these three products in:
 *                        no fused multiply-add; this file is compiled with
 *                        -ffp-contract=off)
 *   grid_sample          ix = round_half_even((gx + 1) * (w / 2) - 0.5),
 *                        a pixel outside the image reads 0
 *
 * Measured against torchvision 0.29.2 on images whose pixels encode their
 * own coordinates (31..224 pixels square, 61 angles, 42 shears, 20
 * translations): the same source pixel for every one of 9.7 million output
 * pixels.  rotate_image's fast paths (angle % 360 of 0, 180, and 90 / 270
 * on square images: torch.rot90) are taken where torchvision takes them.
 */
#include "../aug.h"

#include <math.h>
#include <string.h>

static const double deg2rad = 3.14159265358979323846 / 180.0; /* Python's math.radians */
static const double rad2deg = 180.0 / 3.14159265358979323846; /* math.degrees */

void ch_aug_inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx,
                           double shy, double m[6])
{
    const double rot = angle * deg2rad, sx = shx * deg2rad, sy = shy * deg2rad;
    const double cos_sy = cos(sy), tan_sx = tan(sx), rot_minus_sy = rot - sy;
    const double cx_plus_tx = cx + tx, cy_plus_ty = cy + ty;
    const double a = cos(rot_minus_sy) / cos_sy;
    const double b = -(a * tan_sx + sin(rot));
    const double c = sin(rot_minus_sy) / cos_sy;
    const double d = cos(rot) - c * tan_sx;
    m[0] = d, m[1] = -b, m[2] = 0.0, m[3] = -c, m[4] = a, m[5] = 0.0; /* scale 1 */
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
}

/* A whole-pixel translation (TranslateX/Y: the matrix is [1 0 -tx; 0 1
 * -ty] with tx, ty whole): the grid above lands within float error of
 * whole pixels (below 1e-3 of a pixel up to 4096 pixels), so rounding
 * gives exactly j - tx: rows moved with memmove, the rest 0. */
static int shift(uint8_t *px, uint32_t w, uint32_t h, long long tx, long long ty)
{
    const size_t row = (size_t)w * 3;
    if (tx >= (long long)w || -tx >= (long long)w || ty >= (long long)h || -ty >= (long long)h) {
        memset(px, 0, row * h);
        return CHUTE_OK;
    }
    const size_t keep = (size_t)((long long)w - (tx < 0 ? -tx : tx)) * 3;
    for (uint32_t k = 0; k < h; k++) {
        /* rows in the order that never reads a row already overwritten */
        const uint32_t i = ty > 0 ? h - 1 - k : k;
        uint8_t *d = px + (size_t)i * row;
        const long long si = (long long)i - ty;
        if (si < 0 || si >= (long long)h) {
            memset(d, 0, row);
            continue;
        }
        const uint8_t *src = px + (size_t)si * row;
        if (tx >= 0) {
            memmove(d + (size_t)tx * 3, src, keep);
            memset(d, 0, (size_t)tx * 3);
        } else {
            memmove(d, src + (size_t)(-tx) * 3, keep);
            memset(d + keep, 0, row - keep);
        }
    }
    return CHUTE_OK;
}

CH_AUG_CLONES
int ch_aug_warp(uint8_t *px, uint32_t w, uint32_t h, const double m[6], ch_buf *s)
{
    const size_t n = (size_t)w * h * 3;
    if ((size_t)w * h > INT32_MAX / 3)
        return CHUTE_EINVAL; /* the offsets below are int32 */
    if (m[0] == 1.0 && m[1] == 0.0 && m[3] == 0.0 && m[4] == 1.0 && m[2] == (double)(long long)m[2] &&
        m[5] == (double)(long long)m[5] && w <= 4096 && h <= 4096)
        return shift(px, w, h, -(long long)m[2], -(long long)m[5]);
    /* the source copy, then w + h floats per grid coordinate, w indices */
    const size_t need = n + 64 + sizeof(float) * 5 * ((size_t)w + h);
    if (ch_aug_scratch(s, need) != CHUTE_OK)
        return CHUTE_ENOMEM;
    uint8_t *src = s->data;
    memcpy(src, px, n);
    float *ax = (float *)(void *)(s->data + ((n + 63) & ~(size_t)63));
    float *ay = ax + w, *bx = ay + w, *by = bx + h;
    int32_t *at = (int32_t *)(by + h);
    float th[6];
    for (int i = 0; i < 6; i++)
        th[i] = (float)m[i];
    const float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    const float r00 = th[0] / hw, r10 = th[1] / hw, r20 = th[2] / hw;
    const float r01 = th[3] / hh, r11 = th[4] / hh, r21 = th[5] / hh;
    const float x0 = (float)((1.0 - w) * 0.5), y0 = (float)((1.0 - h) * 0.5);
    for (uint32_t j = 0; j < w; j++) {
        const float x = x0 + (float)j;
        ax[j] = x * r00;
        ay[j] = x * r01;
    }
    for (uint32_t i = 0; i < h; i++) {
        const float y = y0 + (float)i;
        bx[i] = y * r10;
        by[i] = y * r11;
    }
    const float sfx = (float)w / 2.0f, sfy = (float)h / 2.0f;
    const float fw = (float)w, fh = (float)h;
    for (uint32_t i = 0; i < h; i++) {
        /* the source offset of every pixel of the row (-1: outside the
         * image, which reads 0), branch-free so it vectorises, then the
         * copy */
        const float bxi = bx[i], byi = by[i];
        for (uint32_t j = 0; j < w; j++) {
            const float gx = (ax[j] + bxi) + r20, gy = (ay[j] + byi) + r21;
            const float ix = rintf((gx + 1.0f) * sfx - 0.5f);
            const float iy = rintf((gy + 1.0f) * sfy - 0.5f);
            const int in = ix > -1.0f && ix < fw && iy > -1.0f && iy < fh;
            const int32_t xi = (int32_t)(in ? ix : 0.0f), yi = (int32_t)(in ? iy : 0.0f);
            at[j] = in ? (yi * (int32_t)w + xi) * 3 : -1;
        }
        uint8_t *out = px + (size_t)i * w * 3;
        for (uint32_t j = 0; j < w; j++) {
            uint8_t *o = out + (size_t)j * 3;
            if (at[j] >= 0) {
                const uint8_t *q = src + at[j];
                o[0] = q[0], o[1] = q[1], o[2] = q[2];
            } else {
                o[0] = o[1] = o[2] = 0;
            }
        }
    }
    return CHUTE_OK;
}

/* torch.rot90(k) over (H, W) of a square image. */
static int rot90(uint8_t *px, uint32_t w, int k, ch_buf *s)
{
    const size_t n = (size_t)w * w * 3;
    if (ch_aug_scratch(s, n) != CHUTE_OK)
        return CHUTE_ENOMEM;
    uint8_t *src = s->data;
    memcpy(src, px, n);
    for (uint32_t i = 0; i < w; i++)
        for (uint32_t j = 0; j < w; j++) {
            uint32_t si, sj; /* the source of out[i][j] */
            if (k == 1)
                si = j, sj = w - 1 - i;
            else if (k == 2)
                si = w - 1 - i, sj = w - 1 - j;
            else
                si = w - 1 - j, sj = i;
            memcpy(px + ((size_t)i * w + j) * 3, src + ((size_t)si * w + sj) * 3, 3);
        }
    return CHUTE_OK;
}

/* rotate_image(angle) with center None, expand False. */
static int rotate(uint8_t *px, uint32_t w, uint32_t h, double angle, ch_buf *s)
{
    double a = fmod(angle, 360.0); /* Python's angle % 360 */
    if (a < 0.0) /* -0.0 stays: Python gives 0.0, both take the angle-0 path */
        a += 360.0;
    if (a == 0.0)
        return CHUTE_OK;
    if (a == 180.0 && w == h)
        return rot90(px, w, 2, s);
    if (a == 180.0) { /* rot90(k=2) of a non-square image: both axes reversed */
        const size_t n = (size_t)w * h;
        for (size_t i = 0, j = n - 1; i < j; i++, j--)
            for (int c = 0; c < 3; c++) {
                uint8_t t = px[i * 3 + c];
                px[i * 3 + c] = px[j * 3 + c];
                px[j * 3 + c] = t;
            }
        return CHUTE_OK;
    }
    if (w == h && (a == 90.0 || a == 270.0))
        return rot90(px, w, a == 90.0 ? 1 : 3, s);
    double m[6];
    ch_aug_inverse_affine(0.0, 0.0, -a, 0.0, 0.0, 0.0, 0.0, m);
    return ch_aug_warp(px, w, h, m, s);
}

int ch_aug_geometric(uint8_t *px, uint32_t w, uint32_t h, int kind, double mag, ch_buf *s)
{
    double m[6];
    /* _apply_image_or_video_transform: shears about the corner (center
     * [0, 0], i.e. (-w / 2, -h / 2) from the middle) by atan(magnitude);
     * translations by int(magnitude) pixels about the middle */
    const double cx = -(double)w * 0.5, cy = -(double)h * 0.5;
    switch (kind) {
    case CH_AUG_GEO_ROTATE:
        return rotate(px, w, h, mag, s);
    case CH_AUG_GEO_SHEAR_X:
        ch_aug_inverse_affine(cx, cy, 0.0, 0.0, 0.0, atan(mag) * rad2deg, 0.0, m);
        break;
    case CH_AUG_GEO_SHEAR_Y:
        ch_aug_inverse_affine(cx, cy, 0.0, 0.0, 0.0, 0.0, atan(mag) * rad2deg, m);
        break;
    case CH_AUG_GEO_TRANSLATE_X:
        ch_aug_inverse_affine(0.0, 0.0, 0.0, (double)(long long)mag, 0.0, 0.0, 0.0, m);
        break;
    default:
        ch_aug_inverse_affine(0.0, 0.0, 0.0, 0.0, (double)(long long)mag, 0.0, 0.0, m);
        break;
    }
    return ch_aug_warp(px, w, h, m, s);
}

/* The standalone ops: magnitude p[0], negated with probability 1/2 (as
 * the policies sign theirs: torch.rand(()) <= 0.5), applied with
 * probability p[1].  args[0]: the signed magnitude. */
static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    const int on = ch_aug_coin(r, p[1]);
    const int neg = (float)ch_rng_uniform(r) <= 0.5f;
    args[0] = neg ? -p[0] : p[0];
    return on;
}

#define GEO_APPLY(name, kind)                                                                  \
    static int apply_##name(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s) \
    {                                                                                          \
        return ch_aug_geometric(px, w, h, kind, (double)args[0], s);                           \
    }
GEO_APPLY(rotate, CH_AUG_GEO_ROTATE)
GEO_APPLY(shear_x, CH_AUG_GEO_SHEAR_X)
GEO_APPLY(shear_y, CH_AUG_GEO_SHEAR_Y)
GEO_APPLY(translate_x, CH_AUG_GEO_TRANSLATE_X)
GEO_APPLY(translate_y, CH_AUG_GEO_TRANSLATE_Y)

static int check_whole(const float *p, char *why, size_t n)
{
    if (p[0] != (float)(int)p[0])
        return snprintf(why, n, "pixels must be a whole number"), 1;
    return 0;
}

const ch_aug_op ch_aug_rotate = {
    .name = "rotate", .torchvision = "F.rotate(angle=+-degrees, NEAREST) (policies' Rotate)",
    .stage = CH_AUG_PIXELS, .nparams = 2, .nrequired = 1, .pname = {"degrees", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {360, 1}, .draw = draw, .apply = apply_rotate,
};
const ch_aug_op ch_aug_shear_x = {
    .name = "shear_x", .torchvision = "F.affine(shear=[atan(+-v) deg, 0], center=[0, 0]) (ShearX)",
    .stage = CH_AUG_PIXELS, .nparams = 2, .nrequired = 1, .pname = {"v", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {10, 1}, .draw = draw, .apply = apply_shear_x,
};
const ch_aug_op ch_aug_shear_y = {
    .name = "shear_y", .torchvision = "F.affine(shear=[0, atan(+-v) deg], center=[0, 0]) (ShearY)",
    .stage = CH_AUG_PIXELS, .nparams = 2, .nrequired = 1, .pname = {"v", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {10, 1}, .draw = draw, .apply = apply_shear_y,
};
const ch_aug_op ch_aug_translate_x = {
    .name = "translate_x", .torchvision = "F.affine(translate=[+-pixels, 0]) (TranslateX)",
    .stage = CH_AUG_PIXELS, .nparams = 2, .nrequired = 1, .pname = {"pixels", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {4096, 1}, .check = check_whole,
    .draw = draw, .apply = apply_translate_x,
};
const ch_aug_op ch_aug_translate_y = {
    .name = "translate_y", .torchvision = "F.affine(translate=[0, +-pixels]) (TranslateY)",
    .stage = CH_AUG_PIXELS, .nparams = 2, .nrequired = 1, .pname = {"pixels", "p"},
    .def = {0, 0.5f}, .lo = {0, 0}, .hi = {4096, 1}, .check = check_whole,
    .draw = draw, .apply = apply_translate_y,
};
