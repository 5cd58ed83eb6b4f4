/*
 * fuzz_geoplan.c — fuzz target: the geometry-string parser (plan.h), then
 * a plan drawn from what it accepted, applied to a small image, a mask,
 * boxes and keypoints through the plan's decoder window.
 *
 * Input: bytes 0..3 pick the source (1..64 x 1..64) and output (1..32 x
 * 1..32) sizes, byte 4 the seed; the rest is the geometry string (up to
 * its first NUL).  Findings are what the library promises not to do: a
 * crash or sanitizer report (the image pass gets only the window, in a
 * buffer of exactly its size), an error without a message, a window
 * outside the image, a plan that does not end at the output size, a
 * failure applying a plan that was drawn, boxes kept by sanitize outside
 * the canvas, a visible keypoint outside it.
 */
#include "ops/plan.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    const uint32_t sw = 1 + (data[0] & 63), sh = 1 + (data[1] & 63);
    const uint32_t ow = 1 + (data[2] & 31), oh = 1 + (data[3] & 31);
    char spec[4096];
    size_t n = size - 5 < sizeof spec - 1 ? size - 5 : sizeof spec - 1;
    memcpy(spec, data + 5, n);
    spec[n] = 0;
    ch_geo_spec sp;
    chute_error err = {0};
    if (ch_geo_parse(spec, &sp, &err) != CHUTE_OK) {
        if (!err.message[0])
            abort();
        return 0;
    }
    ch_rng r = ch_geo_rng(data[4], 0, size);
    ch_geo_plan p;
    if (ch_geo_draw(&sp, sw, sh, oh, ow, &r, &p) != CHUTE_OK)
        return 0; /* a canvas past the limits: refused, not an error here */
    if (p.w != ow || p.h != oh)
        abort();
    size_t big = 0;
    for (uint32_t k = 0; k < p.n; k++)
        big = CH_MAX(big, (size_t)p.step[k].out_w * p.step[k].out_h);
    if (big > (1u << 18))
        return 0; /* valid, but too slow for a fuzzer's pace */
    int32_t x0, y0, x1, y1;
    ch_geo_window(&p, &x0, &y0, &x1, &y1);
    if (x0 < 0 || y0 < 0 || x1 > (int32_t)sw || y1 > (int32_t)sh || x1 <= x0 || y1 <= y0)
        abort();
    size_t ww = (size_t)(x1 - x0), wh = (size_t)(y1 - y0);
    uint8_t *win = malloc(ww * wh * 3), *mask = malloc((size_t)sw * sh);
    uint8_t *out = malloc((size_t)ow * oh * 3), *mout = malloc((size_t)ow * oh);
    if (!win || !mask || !out || !mout)
        abort();
    for (size_t i = 0; i < ww * wh * 3; i++)
        win[i] = (uint8_t)(i * 37 + data[i % size]);
    for (size_t i = 0; i < (size_t)sw * sh; i++)
        mask[i] = (uint8_t)(i % 5);
    ch_resize_scratch s = {0};
    ch_buf ms = {0};
    const uint8_t fill[3] = {1, 2, 3};
    if (ch_geo_run_rgb8(&p, win, ww * 3, x0, y0, (uint32_t)ww, (uint32_t)wh, fill, out, &s) !=
            CHUTE_OK ||
        ch_geo_run_mask(&p, mask, 9, mout, &ms) != CHUTE_OK)
        abort();
    for (size_t i = 0; i < (size_t)ow * oh; i++)
        if (mout[i] > 4 && mout[i] != 9)
            abort(); /* a label nobody wrote: blended */
    float b[4 * 4] = {0, 0, (float)sw, (float)sh, 1, 2, 3, 4, -5, -5, 2, 2, 0.5f, 0.5f, 0.5f, 9};
    uint32_t keep[4];
    ch_geo_run_boxes(&p, b, 4);
    size_t nk = ch_geo_sanitize(b, 4, p.w, p.h, 1, 1, keep);
    for (size_t i = 0; i < nk; i++)
        if (!(b[i * 4] >= 0 && b[i * 4 + 2] <= (float)p.w && b[i * 4 + 1] >= 0 &&
              b[i * 4 + 3] <= (float)p.h))
            abort();
    float kp[3 * 3] = {0, 0, 1, (float)sw - 1, (float)sh - 1, 1, 3.5f, 2.25f, 1};
    const uint32_t map[3] = {0, 2, 1};
    ch_geo_run_kpts(&p, kp, 3, map, 3);
    for (int i = 0; i < 3; i++)
        if (kp[i * 3 + 2] != 0 && !(kp[i * 3] >= 0 && kp[i * 3] < (float)p.w &&
                                    kp[i * 3 + 1] >= 0 && kp[i * 3 + 1] < (float)p.h))
            abort();
    free(win), free(mask), free(out), free(mout);
    ch_buf_free(&s.coef), ch_buf_free(&s.tmp), ch_buf_free(&s.aug_px), ch_buf_free(&s.aug_tmp);
    ch_buf_free(&ms);
    return 0;
}
