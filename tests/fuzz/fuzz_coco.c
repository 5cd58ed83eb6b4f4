/*
 * fuzz_coco.c — fuzz target: a COCO instances file into target records
 * (src/parse/coco_json.c over jansson).  Under both policies: whatever
 * parses must give, for every image, a record the checked decoder accepts,
 * with exactly the image's kept annotations, each label below the
 * category count; masks of small images are painted from the records (the
 * checks at parse time must make painting infallible but for memory).
 * Under the skip policy only structural damage may fail the parse.
 */
#include "parse/targets.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ch_tg_builder b;
    for (int skip = 0; skip < 2; skip++) {
        chute_error err = {0};
        ch_tg_policy pol = {.skip = skip};
        ch_coco *c;
        if (ch_coco_parse((const char *)data, size, "fuzz.json", &pol, &c, &err) != CHUTE_OK)
            continue;
        uint64_t total = 0;
        for (size_t i = 0; i < ch_coco_nimages(c); i++) {
            const ch_coco_image *im = ch_coco_image_at(c, i);
            const uint8_t *rec;
            size_t len;
            ch_tg_view v;
            int rc = ch_coco_record(c, i, &b, &err);
            if (rc == CHUTE_OK)
                rc = ch_tg_finish(&b, &rec, &len);
            if (rc == CHUTE_ENOMEM || rc == CHUTE_ELIMIT)
                continue;
            if (rc != CHUTE_OK || ch_tg_decode(rec, len, "fuzz", &v, &err) != CHUTE_OK ||
                v.n != im->count || v.width != im->width || v.height != im->height)
                __builtin_trap();
            total += v.n;
            uint64_t area = (uint64_t)v.width * v.height;
            uint8_t *plane = area <= 4096 ? calloc(area, 1) : NULL;
            for (uint32_t o = 0; o < v.n; o++) {
                if ((uint32_t)ch_tg_label(&v, o) >= ch_coco_ncategories(c))
                    __builtin_trap();
                size_t body;
                if (plane && ch_tg_seg(&v, o, &body) != CH_SEG_NONE &&
                    ch_tg_mask(&v, o, v.height, v.width, plane, &err) != CHUTE_OK &&
                    err.code != CHUTE_ENOMEM)
                    __builtin_trap();
            }
            free(plane);
        }
        if (total != ch_coco_nannotations(c))
            __builtin_trap();
        ch_coco_free(c);
    }
    return 0;
}
