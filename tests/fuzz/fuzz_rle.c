/*
 * fuzz_rle.c — fuzz target: COCO's mask codecs (src/parse/rle.c).  The
 * input's first 4 bytes choose a mask size (h, w <= 64); the rest is read
 * two ways: as a compressed RLE string (decoded, checked, painted when the
 * counts cover the mask exactly) and as polygon coordinates (doubles made
 * from 16-bit pairs, so the walk stays small), rasterised with rleFrPoly's
 * rules and painted.  Whatever is accepted must cover exactly h * w pixels;
 * painting may only write inside the plane (ASan checks).
 */
#include "parse/targets.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t h = 1 + data[0] % 64, w = 1 + data[1] % 64;
    uint8_t *plane = calloc((size_t)h * w, 1);
    ch_u32v c = {0};
    char why[160];
    if (!plane)
        return 0;
    if (ch_rle_from_string((const char *)data + 4, size - 4, &c, why, sizeof why) == CHUTE_OK &&
        ch_rle_check(c.v, c.n, h, w, why, sizeof why) == CHUTE_OK) {
        uint64_t sum = 0;
        for (size_t j = 0; j < c.n; j++)
            sum += c.v[j];
        if (sum != (uint64_t)h * w)
            __builtin_trap();
        ch_rle_paint(c.v, c.n, h, w, plane);
    }
    size_t k = (size - 4) / 4;
    if (k > 256)
        k = 256;
    double *xy = malloc(sizeof(double) * (2 * k + 1));
    if (xy) {
        for (size_t j = 0; j < 2 * k; j++) {
            int16_t v;
            memcpy(&v, data + 4 + j * 2, 2);
            xy[j] = v / (data[2] & 1 ? 256.0 : 2048.0);
        }
        if (ch_rle_from_poly(xy, k, h, w, &c, why, sizeof why) == CHUTE_OK) {
            if (ch_rle_check(c.v, c.n, h, w, why, sizeof why) != CHUTE_OK)
                __builtin_trap(); /* a rasterised polygon always covers its mask */
            ch_rle_paint(c.v, c.n, h, w, plane);
        }
        free(xy);
    }
    ch_u32v_free(&c);
    free(plane);
    return 0;
}
