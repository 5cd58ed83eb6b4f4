/*
 * fuzz_augment.c — fuzz target: the augment-string parser (option
 * augment), then every op it accepted drawn and applied, through
 * ch_transform_run, to a small image in every output dtype and layout.
 *
 * Input: byte 0 picks the output side (1..32), dtype and layout; the rest
 * is the augment string (up to its first NUL).  Findings are what the
 * library promises not to do: a crash, a sanitizer report, a parse that
 * succeeds with a parameter outside its op's bounds, a failure on an
 * accepted string, a non-finite float output value.
 */
#include "ops/aug.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint32_t S = 1 + (data[0] & 31);
    char spec[4096];
    size_t n = size - 1 < sizeof spec - 1 ? size - 1 : sizeof spec - 1;
    memcpy(spec, data + 1, n);
    spec[n] = 0;
    ch_aug a;
    chute_error err = {0};
    if (ch_aug_parse(spec, &a, &err) != CHUTE_OK) {
        if (!err.message[0] || a.n != 0)
            abort(); /* an error says why, and leaves nothing parsed */
        return 0;
    }
    for (uint32_t k = 0; k < a.n; k++)
        for (int i = 0; i < a.step[k].op->nparams; i++)
            if (!(a.step[k].p[i] >= a.step[k].op->lo[i] && a.step[k].p[i] <= a.step[k].op->hi[i]) &&
                !(a.step[k].op->word[i] && isnan(a.step[k].p[i])))
                abort();
    /* A window of S x S pixels, the crop the whole of it. */
    uint8_t pix[32 * 32 * 3];
    for (size_t i = 0; i < (size_t)S * S * 3; i++)
        pix[i] = (uint8_t)(i * 37 + data[i % size]);
    ch_crop c = {0, 0, S, S, 0, 0, (int32_t)S, (int32_t)S, data[0] >> 7};
    ch_resize_scratch s = {0};
    ch_resize_plan p;
    static const chute_dtype dts[3] = {CHUTE_DTYPE_FLOAT32, CHUTE_DTYPE_UINT8, CHUTE_DTYPE_FLOAT16};
    ch_out_spec o = {.size = S, .dtype = dts[(data[0] >> 5) % 3],
                     .layout = (data[0] >> 5) & 1 ? CHUTE_LAYOUT_NHWC : CHUTE_LAYOUT_NCHW,
                     .mul = {1 / 58.0f, 1 / 57.0f, 1 / 57.5f}, .add = {-2.1f, -2.0f, -1.8f}};
    float dst[32 * 32 * 3];
    if (ch_resize_plan_make(&p, &c, S, S, &s) != CHUTE_OK)
        abort();
    ch_aug_key key = {size, data[0], n};
    if (ch_transform_run(&p, pix, (size_t)S * 3, 0, 0, c.flip, &o, &a, key, dst, &s) != CHUTE_OK)
        abort();
    if (o.dtype == CHUTE_DTYPE_FLOAT32)
        for (size_t i = 0; i < (size_t)S * S * 3; i++)
            if (!isfinite(dst[i]))
                abort();
    ch_buf_free(&s.coef);
    ch_buf_free(&s.tmp);
    ch_buf_free(&s.aug_px);
    ch_buf_free(&s.aug_tmp);
    return 0;
}
