/*
 * test_geoplan.c — unit tests for the geometric plan (src/ops/plan.h)
 * where its answer is known without torchvision (tests/test_geometry.py
 * compares it with torchvision): the classification path's own crops
 * (RandomResizedCrop, Resize + CenterCrop) are the reference for the
 * plan's window and pixels, the one-matrix view must agree with the
 * step-by-step one, refusals, and scratch that stops growing.
 */
#include "unit.h"

#include "ops/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *photo(uint32_t w, uint32_t h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                p[((size_t)y * w + x) * 3 + c] =
                    (uint8_t)(128 + 100 * sin(x * 0.21 + c) * cos(y * 0.13 - c) + (x * y) % 7);
    return p;
}

static void free_scratch(ch_resize_scratch *s)
{
    ch_buf_free(&s->coef), ch_buf_free(&s->tmp), ch_buf_free(&s->aug_px);
    ch_buf_free(&s->aug_tmp), ch_buf_free(&s->geo_px);
}

/* The classification pass for crop c into S x S uint8 HWC, with its window. */
static int classify(const uint8_t *img, uint32_t w, const ch_crop *c, uint32_t S, uint8_t *out,
                    int32_t win[4], ch_resize_scratch *s)
{
    ch_resize_plan rp;
    if (ch_resize_plan_make(&rp, c, S, S, s) != CHUTE_OK)
        return 1;
    win[0] = rp.x.lo, win[1] = rp.y.lo, win[2] = rp.x.hi, win[3] = rp.y.hi;
    ch_out_spec o = {.size = S, .dtype = CHUTE_DTYPE_UINT8, .layout = CHUTE_LAYOUT_NHWC};
    return ch_resize_run(&rp, img, (size_t)w * 3, 0, 0, c->flip, &o, out, s) != CHUTE_OK;
}

/* The plan's pass given only its window (a copy of exactly that size). */
static int run_plan(const ch_geo_plan *p, const uint8_t *img, uint32_t w, uint8_t *out,
                    int32_t win[4], ch_resize_scratch *s)
{
    ch_geo_window(p, &win[0], &win[1], &win[2], &win[3]);
    size_t ww = (size_t)(win[2] - win[0]), wh = (size_t)(win[3] - win[1]);
    uint8_t *cut = malloc(ww * wh * 3);
    for (size_t y = 0; y < wh; y++)
        memcpy(cut + y * ww * 3, img + ((win[1] + y) * w + (size_t)win[0]) * 3, ww * 3);
    static const uint8_t fill[3] = {0, 0, 0};
    int rc = ch_geo_run_rgb8(p, cut, ww * 3, win[0], win[1], (uint32_t)ww, (uint32_t)wh, fill,
                             out, s);
    free(cut);
    return rc != CHUTE_OK;
}

TEST(plan_train_crop_equals_classification)
{
    /* RandomResizedCrop + flip as crop, resize, hflip steps: the same
     * window and the same bytes as the classification path's crop */
    const uint32_t sizes[][2] = {{120, 90}, {64, 200}, {333, 77}, {50, 50}};
    const uint32_t S = 48;
    ch_resize_scratch s1 = {0}, s2 = {0};
    uint8_t a[48 * 48 * 3], b[48 * 48 * 3];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint32_t W = sizes[k][0], H = sizes[k][1];
        uint8_t *img = photo(W, H);
        for (uint64_t i = 0; i < 40; i++) {
            ch_rng r = ch_rng_for(9, 1, i);
            ch_crop c;
            ch_geom_train(W, H, 0.08, 1.0, &r, &c);
            ch_geo_plan p;
            ch_geo_init(&p, W, H);
            CHECK(ch_geo_crop(&p, c.clip_y0, c.clip_x0, c.clip_y1 - c.clip_y0,
                              c.clip_x1 - c.clip_x0) == CHUTE_OK, "crop");
            CHECK(ch_geo_resize(&p, S, S) == CHUTE_OK, "resize");
            if (c.flip)
                CHECK(ch_geo_hflip(&p) == CHUTE_OK, "hflip");
            int32_t wa[4], wb[4];
            CHECK(classify(img, W, &c, S, a, wa, &s1) == 0, "classify");
            CHECK(run_plan(&p, img, W, b, wb, &s2) == 0, "plan");
            CHECK(!memcmp(wa, wb, sizeof wa), "%ux%u sample %llu: window %d,%d..%d,%d, "
                  "classification %d,%d..%d,%d", W, H, (unsigned long long)i, wb[0], wb[1], wb[2],
                  wb[3], wa[0], wa[1], wa[2], wa[3]);
            /* the loader's fused route: one pass, the same crop */
            ch_crop one;
            CHECK(ch_geo_one_pass(&p, &one) && one.flip == c.flip &&
                  fabs(one.x0 - c.x0) < 1e-9 && fabs(one.x1 - c.x1) < 1e-9 &&
                  fabs(one.y0 - c.y0) < 1e-9 && fabs(one.y1 - c.y1) < 1e-9 &&
                  one.clip_x0 == c.clip_x0 && one.clip_x1 == c.clip_x1 &&
                  one.clip_y0 == c.clip_y0 && one.clip_y1 == c.clip_y1, "one pass");
            ch_geo_plan q = p;
            CHECK(ch_geo_vflip(&q) == CHUTE_OK && !ch_geo_one_pass(&q, &one), "vflip is not");
            q = p;
            CHECK(ch_geo_rotate(&q, 5, 0) == CHUTE_OK && !ch_geo_one_pass(&q, &one),
                  "a rotation is not");
            CHECK(!memcmp(a, b, sizeof a), "%ux%u sample %llu: pixels differ", W, H,
                  (unsigned long long)i);
        }
        free(img);
    }
    free_scratch(&s1), free_scratch(&s2);
    return 0;
}

TEST(plan_dct_scaled_equals_classification)
{
    /* ch_geo_set_denom: the first pass reads a 1/denom decode with the
     * classification path's scaled crop (ch_crop_scale): same window in the
     * scaled image, same bytes */
    const uint32_t W = 640, H = 480, S = 40;
    ch_resize_scratch s1 = {0}, s2 = {0};
    uint8_t a[40 * 40 * 3], b[40 * 40 * 3];
    for (uint32_t d = 2; d <= 8; d *= 2) {
        uint32_t sw = (W + d - 1) / d, sh = (H + d - 1) / d; /* libjpeg's scaled size */
        uint8_t *img = photo(sw, sh);
        for (uint64_t i = 0; i < 30; i++) {
            ch_rng r = ch_rng_for(4, d, i);
            ch_crop c, sc;
            ch_geom_train(W, H, 0.25, 1.0, &r, &c);
            ch_crop_scale(&c, d, sw, sh, &sc);
            ch_geo_plan p;
            ch_geo_init(&p, W, H);
            CHECK(ch_geo_crop(&p, c.clip_y0, c.clip_x0, c.clip_y1 - c.clip_y0,
                              c.clip_x1 - c.clip_x0) == CHUTE_OK, "crop");
            CHECK(ch_geo_resize(&p, S, S) == CHUTE_OK, "resize");
            if (c.flip)
                CHECK(ch_geo_hflip(&p) == CHUTE_OK, "hflip");
            double cw, chh;
            uint32_t lw, lh;
            CHECK(ch_geo_lead(&p, &cw, &chh, &lw, &lh) && lw == S && lh == S &&
                  fabs(cw - (c.x1 - c.x0)) < 1e-9 && fabs(chh - (c.y1 - c.y0)) < 1e-9,
                  "lead pass %gx%g -> %ux%u, crop %gx%g",
                  cw, chh, lw, lh, c.x1 - c.x0, c.y1 - c.y0);
            CHECK(ch_geo_set_denom(&p, d, sw, sh) == CHUTE_OK, "denom");
            int32_t wa[4], wb[4];
            CHECK(classify(img, sw, &sc, S, a, wa, &s1) == 0, "classify");
            CHECK(run_plan(&p, img, sw, b, wb, &s2) == 0, "plan");
            CHECK(!memcmp(wa, wb, sizeof wa), "1/%u sample %llu: window %d,%d..%d,%d, "
                  "classification %d,%d..%d,%d", d, (unsigned long long)i, wb[0], wb[1], wb[2],
                  wb[3], wa[0], wa[1], wa[2], wa[3]);
            CHECK(!memcmp(a, b, sizeof a), "1/%u sample %llu: pixels differ", d,
                  (unsigned long long)i);
        }
        free(img);
    }
    ch_geo_plan p;
    ch_geo_init(&p, W, H);
    CHECK(ch_geo_rotate(&p, 10, 0) == CHUTE_OK, "rotate");
    CHECK(ch_geo_set_denom(&p, 2, 320, 240) == CHUTE_EINVAL, "a plan that warps first");
    CHECK(ch_geo_set_denom(&p, 3, 320, 240) == CHUTE_EINVAL, "denom 3");
    free_scratch(&s1), free_scratch(&s2);
    return 0;
}

TEST(plan_eval_crop_equals_classification)
{
    /* Resize(R) + CenterCrop(S) as resize_short and center_crop steps:
     * the classification eval crop's window (only the centre is decoded)
     * and its pixels, within one level (the source rectangle is computed
     * as left * W / rw there and (0 - tx) / sx here) */
    const uint32_t sizes[][2] = {{120, 90}, {64, 200}, {333, 77}, {257, 256}};
    ch_resize_scratch s1 = {0}, s2 = {0};
    uint8_t a[40 * 40 * 3], b[40 * 40 * 3];
    const uint32_t S = 40;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint32_t W = sizes[k][0], H = sizes[k][1];
        uint8_t *img = photo(W, H);
        for (uint32_t R = S; R <= 60; R += 4) {
            ch_crop c;
            ch_geom_eval(W, H, R, S, &c);
            ch_geo_plan p;
            ch_geo_init(&p, W, H);
            CHECK(ch_geo_resize_short(&p, R, 0) == CHUTE_OK, "resize");
            CHECK(ch_geo_center_crop(&p, S, S) == CHUTE_OK, "center crop");
            int32_t wa[4], wb[4];
            CHECK(classify(img, W, &c, S, a, wa, &s1) == 0, "classify");
            CHECK(run_plan(&p, img, W, b, wb, &s2) == 0, "plan");
            CHECK(!memcmp(wa, wb, sizeof wa), "%ux%u R %u: window %d,%d..%d,%d, classification "
                  "%d,%d..%d,%d", W, H, R, wb[0], wb[1], wb[2], wb[3], wa[0], wa[1], wa[2], wa[3]);
            int mx = 0;
            for (size_t i = 0; i < sizeof a; i++)
                mx = CH_MAX(mx, abs((int)a[i] - (int)b[i]));
            CHECK(mx <= 1, "%ux%u R %u: pixels differ by %d", W, H, R, mx);
        }
        free(img);
    }
    free_scratch(&s1), free_scratch(&s2);
    return 0;
}

TEST(plan_matrix_agrees_with_steps)
{
    /* ch_geo_matrix (one 2x3 for the plan) maps keypoints where the
     * step-by-step pass puts them; its inverse maps them back */
    ch_geo_spec sp;
    chute_error err = {0};
    CHECK(ch_geo_parse("rrc=0.3:1,hflip,rotate=30:1,affine=10:0.1:0.1:0.8:1.2:5:3,vflip,"
                       "zoomout=1:2:1,letterbox", &sp, &err) == CHUTE_OK, "%s", err.message);
    for (uint64_t i = 0; i < 50; i++) {
        ch_rng r = ch_geo_rng(3, 0, i);
        ch_geo_plan p;
        CHECK(ch_geo_draw(&sp, 160, 120, 64, 80, &r, &p) == CHUTE_OK, "draw");
        CHECK(p.w == 80 && p.h == 64, "canvas %ux%u", p.w, p.h);
        ch_affine m, inv;
        ch_geo_matrix(&p, 1, &m);
        CHECK(ch_affine_invert(&m, &inv) == CHUTE_OK, "invert");
        float kp[3 * 3] = {10, 20, 1, 80.5f, 60.25f, 1, 150, 100, 1};
        ch_geo_run_kpts(&p, kp, 3, NULL, 0);
        const double src[3][2] = {{10, 20}, {80.5, 60.25}, {150, 100}};
        for (int k = 0; k < 3; k++) {
            double x = m.a * src[k][0] + m.b * src[k][1] + m.c;
            double y = m.d * src[k][0] + m.e * src[k][1] + m.f;
            CHECK(fabs(x - kp[k * 3]) < 1e-3 && fabs(y - kp[k * 3 + 1]) < 1e-3,
                  "sample %llu point %d: matrix %g,%g steps %g,%g", (unsigned long long)i, k, x,
                  y, kp[k * 3], kp[k * 3 + 1]);
            double bx = inv.a * x + inv.b * y + inv.c, by = inv.d * x + inv.e * y + inv.f;
            CHECK(fabs(bx - src[k][0]) < 1e-6 && fabs(by - src[k][1]) < 1e-6, "inverse");
        }
    }
    return 0;
}

TEST(plan_refuses_bad_steps)
{
    ch_geo_plan p;
    ch_geo_init(&p, 100, 80);
    CHECK(ch_geo_resize(&p, 0, 10) == CHUTE_EINVAL, "empty resize");
    CHECK(ch_geo_resize(&p, CH_GEO_MAXSIDE + 1, 10) == CHUTE_EINVAL, "side past the limit");
    CHECK(ch_geo_resize(&p, 40000, 40000) == CHUTE_EINVAL, "2^30 pixels");
    CHECK(ch_geo_pad(&p, INT32_MAX, 0, INT32_MAX, 0) == CHUTE_EINVAL, "overflowing pad");
    CHECK(ch_geo_pad(&p, -1, 0, 0, 0) == CHUTE_EINVAL, "negative pad");
    CHECK(ch_geo_crop(&p, INT32_MIN, 0, 10, 10) == CHUTE_EINVAL, "crop far outside");
    CHECK(ch_geo_affine(&p, NAN, 0, 0, 1, 0, 0) == CHUTE_EINVAL, "NaN angle");
    CHECK(ch_geo_affine(&p, 0, 0, 0, 0, 0, 0) == CHUTE_EINVAL, "scale 0");
    CHECK(ch_geo_affine(&p, 0, 0, 0, 1, 90, 0) == CHUTE_EINVAL, "shear 90");
    CHECK(ch_geo_resize_short(&p, 50, 40) == CHUTE_EINVAL, "max_size below size");
    CHECK(p.n == 0 && p.w == 100 && p.h == 80, "a refused step changed the plan");
    for (int k = 0; k < CH_GEO_MAXSTEPS; k++)
        CHECK(ch_geo_hflip(&p) == CHUTE_OK, "flip %d", k);
    CHECK(ch_geo_hflip(&p) == CHUTE_EINVAL && p.n == CH_GEO_MAXSTEPS, "a full plan");
    /* a plan that starts with a pad reads the whole image, and says so */
    ch_geo_init(&p, 100, 80);
    CHECK(ch_geo_pad(&p, 3, 3, 3, 3) == CHUTE_OK, "pad");
    int32_t x0, y0, x1, y1;
    ch_geo_window(&p, &x0, &y0, &x1, &y1);
    CHECK(x0 == 0 && y0 == 0 && x1 == 100 && y1 == 80, "window %d,%d..%d,%d", x0, y0, x1, y1);
    uint8_t px[30], out[106 * 86 * 3];
    ch_resize_scratch s = {0};
    const uint8_t fill[3] = {0, 0, 0};
    CHECK(ch_geo_run_rgb8(&p, px, 30, 0, 0, 10, 1, fill, out, &s) == CHUTE_EINVAL,
          "a window smaller than the plan reads");
    free_scratch(&s);
    return 0;
}

TEST(plan_scratch_stops_growing)
{
    /* steady state: once the worker's scratch has seen the epoch's plans,
     * running them again allocates nothing */
    ch_geo_spec sp;
    chute_error err = {0};
    CHECK(ch_geo_parse("rrc,hflip,rotate=20:1,zoomout=1:2,crop", &sp, &err) == CHUTE_OK, "parse");
    const uint32_t W = 96, H = 72, S = 32;
    uint8_t *img = photo(W, H), out[32 * 32 * 3];
    ch_resize_scratch s = {0};
    const uint8_t fill[3] = {5, 6, 7};
    size_t caps[5] = {0};
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t i = 0; i < 60; i++) {
            ch_rng r = ch_geo_rng(1, 0, i);
            ch_geo_plan p;
            CHECK(ch_geo_draw(&sp, W, H, S, S, &r, &p) == CHUTE_OK, "draw");
            int32_t x0, y0, x1, y1;
            ch_geo_window(&p, &x0, &y0, &x1, &y1);
            CHECK(ch_geo_run_rgb8(&p, img + ((size_t)y0 * W + (size_t)x0) * 3, (size_t)W * 3, x0,
                                  y0, (uint32_t)(x1 - x0), (uint32_t)(y1 - y0), fill, out,
                                  &s) == CHUTE_OK, "run");
            size_t now[5] = {s.coef.cap, s.tmp.cap, s.aug_px.cap, s.aug_tmp.cap, s.geo_px.cap};
            if (pass == 1)
                CHECK(!memcmp(now, caps, sizeof now), "sample %llu grew the scratch in the "
                      "second pass", (unsigned long long)i);
            memcpy(caps, now, sizeof now);
        }
    free(img);
    free_scratch(&s);
    return 0;
}

UNIT_MAIN
