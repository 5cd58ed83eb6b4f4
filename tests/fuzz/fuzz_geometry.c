/*
 * fuzz_geometry.c — fuzz target: crop geometry -> resize plan -> resample,
 * the path from a decoded image's size to the pixels of a batch slot, with
 * every size the input can name (1 x 16,777,216, 16,777,216 x 1, 1 x 1,
 * ...) and every transform, output size, eval resize side, train scale
 * range, DCT scale, dtype and layout.
 *
 * Input: 24 bytes (shorter inputs are zero-padded):
 *   0-3 width, 4-7 height (little-endian), each shifted right by the low
 *   5 bits of bytes 8 / 9 so that every magnitude is common; 10 transform
 *   (train / eval / full) and the JPEG-like DCT downscale flag; 11-12 output
 *   size (1..512); 13-14 eval resize side (0: floor(size / 0.875)); 15-16
 *   train scale range in percent; 17 dtype, layout, flip, image pattern;
 *   18-23 RNG key.
 *
 * Findings are what the library promises not to do: a geometry the plan
 * refuses, a plan window outside the image or the clip box, a resampled
 * value that is not finite or not a blend of the source pixels (a flat
 * image must stay flat), plus anything the sanitizers see (float-to-int
 * overflow included).  Memory is bounded: images above 2^24 pixels are
 * refused as the decoders' pixel limit would, and the window is only
 * synthesised (from a hash of absolute coordinates, as a decoder would
 * deliver it) when it is at most 2^22 pixels.
 */
#include "ops/ops.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_PIXELS (1ull << 24)
#define FUZZ_MAX_WINDOW (1ull << 22)

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint8_t px(int32_t x, int32_t y, int c, int flat)
{
    if (flat)
        return (uint8_t)(c == 0 ? 17 : c == 1 ? 200 : 99);
    uint32_t v = ((uint32_t)x * 73856093u) ^ ((uint32_t)y * 19349663u) ^ ((uint32_t)(c + 1) * 83492791u);
    v = (v ^ (v >> 13)) * 0x5BD1E995u;
    return (uint8_t)(v ^ (v >> 15));
}

static float out_value(const void *dst, chute_dtype dt, size_t at)
{
    if (dt == CHUTE_DTYPE_UINT8)
        return ((const uint8_t *)dst)[at];
    if (dt == CHUTE_DTYPE_FLOAT32)
        return ((const float *)dst)[at];
    uint16_t h = ((const uint16_t *)dst)[at];
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                        : ldexpf((float)(m | 0x400), (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

/* A finding: say what was being done, then crash for the fuzzer. */
#define FINDING(why)                                                                           \
    do {                                                                                       \
        fprintf(stderr,                                                                        \
                "fuzz_geometry: %s: %ux%u transform %d size %u resize %u scale %u..%u%% dct %u " \
                "crop %.17g,%.17g-%.17g,%.17g clip %d,%d-%d,%d\n",                             \
                why, W, H, transform, S, R, smin, smax, denom, sc.x0, sc.y0, sc.x1, sc.y1,     \
                sc.clip_x0, sc.clip_y0, sc.clip_x1, sc.clip_y1);                               \
        __builtin_trap();                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t in[24] = {0};
    memcpy(in, data, size < sizeof in ? size : sizeof in);
    uint32_t W = rd32(in) >> (in[8] & 31), H = rd32(in + 4) >> (in[9] & 31);
    if (W == 0 || H == 0 || (uint64_t)W * H > FUZZ_MAX_PIXELS)
        return 0; /* the decoders refuse these before geometry runs */
    int transform = in[10] % 3, dct = (in[10] >> 2) & 1;
    uint32_t S = 1 + (((uint32_t)in[11] | (uint32_t)in[12] << 8) % 512);
    uint32_t R = (uint32_t)in[13] | (uint32_t)in[14] << 8;
    if (R == 0)
        R = ch_eval_resize_size(S, 0.875f);
    if (R < S)
        R = S + R % 64; /* the loader's validation requires resize >= size */
    uint32_t smin = 1 + in[15] % 100, smax = smin + in[16] % (101 - smin);
    chute_dtype dt = (chute_dtype)(in[17] % 3);
    chute_layout lay = (in[17] >> 2) & 1 ? CHUTE_LAYOUT_NHWC : CHUTE_LAYOUT_NCHW;
    int flip = (in[17] >> 3) & 1, flat = (in[17] >> 4) & 1;
    uint64_t key = 0;
    memcpy(&key, in + 18, 6);

    ch_crop crop;
    if (transform == 0) {
        ch_rng r = ch_rng_for(key, 0, key >> 8);
        ch_geom_train(W, H, smin / 100.0, smax / 100.0, &r, &crop);
    } else if (transform == 1) {
        ch_geom_eval(W, H, R, S, &crop);
    } else {
        ch_geom_full(W, H, &crop);
    }
    if (transform != 0)
        crop.flip = flip;
    /* The loader's DCT-scale choice, and the crop in the scaled image. */
    uint32_t denom = 1, sw = W, sh = H;
    if (dct) {
        double cw = crop.x1 - crop.x0, chh = crop.y1 - crop.y0;
        while (denom < 8 && cw / (denom * 2) >= S && chh / (denom * 2) >= S)
            denom *= 2;
    }
    ch_crop sc = crop;
    if (denom > 1) {
        sw = (W + denom - 1) / denom;
        sh = (H + denom - 1) / denom;
        ch_crop_scale(&crop, denom, sw, sh, &sc);
    }

    ch_resize_scratch s;
    memset(&s, 0, sizeof s);
    ch_resize_plan p;
    int rc = ch_resize_plan_make(&p, &sc, S, S, &s);
    if (rc != CHUTE_OK)
        FINDING("geometry made a crop the plan refuses");
    if (p.x.lo < 0 || p.y.lo < 0 || (uint32_t)p.x.hi > sw || (uint32_t)p.y.hi > sh ||
        p.x.lo >= p.x.hi || p.y.lo >= p.y.hi || p.x.lo < sc.clip_x0 || p.y.lo < sc.clip_y0 ||
        p.x.hi > sc.clip_x1 || p.y.hi > sc.clip_y1)
        FINDING("plan window outside the image or clip box");

    size_t ww = (size_t)(p.x.hi - p.x.lo), wh = (size_t)(p.y.hi - p.y.lo);
    if (ww * wh <= FUZZ_MAX_WINDOW) {
        uint8_t *win = malloc(ww * wh * 3);
        size_t esz = dt == CHUTE_DTYPE_UINT8 ? 1 : dt == CHUTE_DTYPE_FLOAT16 ? 2 : 4;
        void *dst = malloc((size_t)S * S * 3 * esz);
        if (win && dst) {
            float lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
            for (size_t y = 0; y < wh; y++)
                for (size_t x = 0; x < ww; x++)
                    for (int c = 0; c < 3; c++) {
                        uint8_t v = px(p.x.lo + (int32_t)x, p.y.lo + (int32_t)y, c, flat);
                        win[(y * ww + x) * 3 + c] = v;
                        lo[c] = fminf(lo[c], v);
                        hi[c] = fmaxf(hi[c], v);
                    }
            ch_out_spec o;
            memset(&o, 0, sizeof o);
            o.size = S;
            o.dtype = dt;
            o.layout = lay;
            for (int c = 0; c < 3; c++)
                o.mul[c] = 1.0f;
            if (ch_resize_run(&p, win, ww * 3, p.x.lo, p.y.lo, sc.flip, &o, dst, &s) != CHUTE_OK)
                FINDING("resample failed on a bounded window");
            /* Weights are non-negative and sum to one: every output is a
             * blend of source values, up to float summation error (at most
             * n * 2^-24 * 255 over n taps per pass) and float16's rounding
             * (1/8 near 255). */
            float tol = (dt == CHUTE_DTYPE_FLOAT16 ? 0.13f : 1e-3f) +
                        255.0f * 0x1p-24f * (float)(p.x.kmax + p.y.kmax);
            for (size_t i = 0; i < (size_t)S * S * 3; i++) {
                int c = lay == CHUTE_LAYOUT_NHWC ? (int)(i % 3) : (int)(i / ((size_t)S * S));
                float v = out_value(dst, dt, i);
                if (!isfinite(v) || v < lo[c] - tol || v > hi[c] + tol) {
                    fprintf(stderr, "value %g at %zu, source range %g..%g\n", (double)v, i,
                            (double)lo[c], (double)hi[c]);
                    FINDING("resampled value is not a blend of the source");
                }
            }
        }
        free(win);
        free(dst);
    }
    ch_buf_free(&s.coef);
    ch_buf_free(&s.tmp);
    return 0;
}
