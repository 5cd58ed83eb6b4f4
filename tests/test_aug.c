/*
 * test_aug.c — unit tests for the augmented fused pass (src/ops/aug.h):
 * without augment it is the plain pass byte for byte; with it, every
 * dtype and layout carries the same pixels; scratch stops growing after
 * the first sample (no allocation per sample).  The ops' pixels against
 * torchvision are tests/test_augment.py's job.
 */
#include "unit.h"

#include "ops/aug.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define IW 53
#define IH 41
#define S 24

static void image(uint8_t *p)
{
    for (int i = 0; i < IW * IH * 3; i++)
        p[i] = (uint8_t)((i * 7919u) ^ (i >> 3));
}

static size_t esize(chute_dtype d)
{
    return d == CHUTE_DTYPE_FLOAT32 ? 4 : d == CHUTE_DTYPE_FLOAT16 ? 2 : 1;
}

static void scratch_free(ch_resize_scratch *s)
{
    ch_buf_free(&s->coef);
    ch_buf_free(&s->tmp);
    ch_buf_free(&s->aug_px);
    ch_buf_free(&s->aug_tmp);
}

/* Resample sample `id` of the image with o and aug into dst. */
static int run(const uint8_t *img, uint64_t id, const ch_out_spec *o, const ch_aug *aug,
               int plain, void *dst, ch_resize_scratch *s)
{
    ch_rng g = ch_rng_for(1, 0, id);
    ch_crop c;
    ch_geom_train(IW, IH, 0.3, 1.0, &g, &c);
    ch_resize_plan p;
    if (ch_resize_plan_make(&p, &c, S, S, s) != CHUTE_OK)
        return -1;
    if (plain)
        return ch_resize_run(&p, img, IW * 3, 0, 0, c.flip, o, dst, s);
    ch_aug_key key = {1, 0, id};
    return ch_transform_run(&p, img, IW * 3, 0, 0, c.flip, o, aug, key, dst, s);
}

TEST(transform_without_augment_is_resize_run)
{
    uint8_t img[IW * IH * 3];
    image(img);
    ch_aug empty;
    chute_error err = {0};
    CHECK(ch_aug_parse("  ", &empty, &err) == CHUTE_OK && empty.n == 0, "blank string");
    const chute_dtype dts[3] = {CHUTE_DTYPE_FLOAT32, CHUTE_DTYPE_UINT8, CHUTE_DTYPE_FLOAT16};
    const chute_layout lts[2] = {CHUTE_LAYOUT_NCHW, CHUTE_LAYOUT_NHWC};
    ch_resize_scratch s = {0};
    static uint8_t a[S * S * 3 * 4], b[S * S * 3 * 4], c[S * S * 3 * 4];
    for (int d = 0; d < 3; d++)
        for (int l = 0; l < 2; l++)
            for (uint64_t id = 0; id < 8; id++) {
                ch_out_spec o = {S, dts[d], lts[l], {0.017f, 0.018f, 0.019f}, {-2, -1.9f, -1.7f}};
                size_t n = (size_t)S * S * 3 * esize(dts[d]);
                CHECK(run(img, id, &o, NULL, 1, a, &s) == CHUTE_OK, "plain");
                CHECK(run(img, id, &o, NULL, 0, b, &s) == CHUTE_OK, "aug NULL");
                CHECK(run(img, id, &o, &empty, 0, c, &s) == CHUTE_OK, "aug empty");
                CHECK(!memcmp(a, b, n) && !memcmp(a, c, n), "dtype %d layout %d sample %d", d, l,
                      (int)id);
            }
    CHECK(s.aug_px.cap == 0 && s.aug_tmp.cap == 0, "the plain pass touched augment scratch");
    scratch_free(&s);
    return 0;
}

TEST(augmented_layouts_and_dtypes_agree)
{
    uint8_t img[IW * IH * 3];
    image(img);
    ch_aug aug;
    chute_error err = {0};
    CHECK(ch_aug_parse("colorjitter=0.4:0.4:0.4:0.1,sharpness=2:1,blur=3,erasing=1:0.1:0.3:0.5:2:7",
                       &aug, &err) == CHUTE_OK, "%s", err.message);
    ch_resize_scratch s = {0};
    static uint8_t u_hwc[S * S * 3], u_chw[S * S * 3];
    static float f_chw[S * S * 3], f_hwc[S * S * 3];
    static uint16_t h_chw[S * S * 3];
    const float mul[3] = {0.017f, 0.018f, 0.019f}, add[3] = {-2, -1.9f, -1.7f};
    for (uint64_t id = 0; id < 16; id++) {
        ch_out_spec o = {S, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NHWC, {0}, {0}};
        memcpy(o.mul, mul, sizeof mul);
        memcpy(o.add, add, sizeof add);
        CHECK(run(img, id, &o, &aug, 0, u_hwc, &s) == CHUTE_OK, "u8 nhwc");
        o.layout = CHUTE_LAYOUT_NCHW;
        CHECK(run(img, id, &o, &aug, 0, u_chw, &s) == CHUTE_OK, "u8 nchw");
        o.dtype = CHUTE_DTYPE_FLOAT32;
        CHECK(run(img, id, &o, &aug, 0, f_chw, &s) == CHUTE_OK, "f32 nchw");
        o.dtype = CHUTE_DTYPE_FLOAT16;
        CHECK(run(img, id, &o, &aug, 0, h_chw, &s) == CHUTE_OK, "f16 nchw");
        o.dtype = CHUTE_DTYPE_FLOAT32;
        o.layout = CHUTE_LAYOUT_NHWC;
        CHECK(run(img, id, &o, &aug, 0, f_hwc, &s) == CHUTE_OK, "f32 nhwc");
        for (int i = 0; i < S * S; i++)
            for (int c = 0; c < 3; c++) {
                uint8_t u = u_hwc[i * 3 + c];
                float f = f_chw[c * S * S + i];
                CHECK(u_chw[c * S * S + i] == u, "u8 layouts differ at %d", i);
                CHECK(f_hwc[i * 3 + c] == f, "f32 layouts differ at %d", i);
                CHECK(h_chw[c * S * S + i] == ch_f32_to_f16(f), "f16 is not f32 rounded");
                /* erased values are 7 in every dtype (uint8: 7 as a level) */
                if (f == 7.0f)
                    CHECK(u == 7, "erased in f32 but %u in uint8", u);
                else
                    CHECK(fabsf(f - (u * mul[c] + add[c])) <= 1e-5f, "f32 %g vs level %u", f, u);
            }
    }
    scratch_free(&s);
    return 0;
}

TEST(augment_scratch_stops_growing)
{
    uint8_t img[IW * IH * 3];
    image(img);
    ch_aug aug;
    chute_error err = {0};
    CHECK(ch_aug_parse("blur=5:0.5:2,sharpness=3:1,equalize=1,colorjitter=0.4:0.4:0.4:0.1",
                       &aug, &err) == CHUTE_OK, "%s", err.message);
    ch_resize_scratch s = {0};
    static float dst[S * S * 3];
    ch_out_spec o = {S, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW, {1, 1, 1}, {0, 0, 0}};
    CHECK(run(img, 0, &o, &aug, 0, dst, &s) == CHUTE_OK, "first");
    const void *px = s.aug_px.data, *tmp = s.aug_tmp.data;
    size_t cpx = s.aug_px.cap, ctmp = s.aug_tmp.cap;
    CHECK(cpx >= (size_t)S * S * 3 && ctmp > 0, "scratch not used");
    for (uint64_t id = 1; id < 50; id++)
        CHECK(run(img, id, &o, &aug, 0, dst, &s) == CHUTE_OK, "sample %d", (int)id);
    CHECK(s.aug_px.data == px && s.aug_tmp.data == tmp && s.aug_px.cap == cpx &&
              s.aug_tmp.cap == ctmp, "scratch reallocated after the first sample");
    scratch_free(&s);
    return 0;
}

UNIT_MAIN

/* The augmented pass's uint8 NHWC intermediate (on AVX-512 CPUs its own
 * vector path) holds the same values as the generic path's uint8 NCHW,
 * transposed: crops shrunk and enlarged, flipped or not, sizes that are and
 * are not multiples of 16. */
TEST(uint8_nhwc_path_equals_generic)
{
    enum { W2 = 211, H2 = 157, MAXS = 80 };
    static uint8_t img[W2 * H2 * 3], a[MAXS * MAXS * 3], b[MAXS * MAXS * 3];
    for (int i = 0; i < W2 * H2 * 3; i++) /* smooth plus noise: values near every rounding */
        img[i] = (uint8_t)((i % (W2 * 3)) / 3 + (i / (W2 * 3)) + ((i * 7919u) >> 5) % 23);
    ch_resize_scratch s = {0};
    const uint32_t sizes[] = {16, 24, 37, 64, 80};
    long values = 0;
    for (int si = 0; si < 5; si++)
        for (uint64_t id = 0; id < 60; id++) {
            const uint32_t S2 = sizes[si];
            ch_rng g = ch_rng_for(3, si, id);
            ch_crop c;
            ch_geom_train(W2, H2, id % 3 ? 0.08 : 0.001, 1.0, &g, &c);
            ch_resize_plan p;
            CHECK(ch_resize_plan_make(&p, &c, S2, S2, &s) == CHUTE_OK, "plan");
            ch_out_spec hwc = {S2, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NHWC, {1, 1, 1}, {0, 0, 0}};
            ch_out_spec chw = hwc;
            chw.layout = CHUTE_LAYOUT_NCHW;
            CHECK(ch_resize_run(&p, img, W2 * 3, 0, 0, c.flip, &hwc, a, &s) == CHUTE_OK, "hwc");
            CHECK(ch_resize_run(&p, img, W2 * 3, 0, 0, c.flip, &chw, b, &s) == CHUTE_OK, "chw");
            const size_t plane = (size_t)S2 * S2;
            for (size_t i = 0; i < plane; i++)
                for (int ch = 0; ch < 3; ch++)
                    CHECK(a[i * 3 + ch] == b[ch * plane + i],
                          "size %u crop %d pixel %zu channel %d: %d vs %d", S2, (int)id, i, ch,
                          a[i * 3 + ch], b[ch * plane + i]);
            values += (long)plane * 3;
        }
    CHECK(values > 1000000, "compared %ld values", values);
    scratch_free(&s);
    return 0;
}
