/*
 * fuzz_yolo.c — fuzz target: YOLO label text (src/parse/yolo_txt.c) into a
 * target record, under both policies.  Whatever is accepted must finish as
 * a record that the checked decoder accepts, with boxes that are finite
 * and ordered (x0 <= x1, y0 <= y1) and labels >= 0; under the skip policy
 * a file never fails on content.
 */
#include "parse/targets.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ch_tg_builder b; /* reused, as the pack loop reuses it */
    for (int skip = 0; skip < 2; skip++) {
        chute_error err = {0};
        ch_tg_policy pol = {.skip = skip};
        int rc = ch_yolo_parse((const char *)data, size, 640, 480, skip ? 0 : 80, "fuzz.txt", &b,
                               &pol, &err);
        if (skip && rc != CHUTE_OK && rc != CHUTE_ENOMEM && rc != CHUTE_ELIMIT)
            __builtin_trap();
        if (rc != CHUTE_OK)
            continue;
        const uint8_t *rec;
        size_t len;
        ch_tg_view v;
        if (ch_tg_finish(&b, &rec, &len) != CHUTE_OK)
            continue;
        if (ch_tg_decode(rec, len, "fuzz", &v, &err) != CHUTE_OK)
            __builtin_trap();
        for (uint32_t i = 0; i < v.n; i++) {
            float box[4];
            ch_tg_box(&v, i, box);
            if (!(box[0] <= box[2]) || !(box[1] <= box[3]) || ch_tg_label(&v, i) < 0)
                __builtin_trap();
        }
    }
    return 0;
}
