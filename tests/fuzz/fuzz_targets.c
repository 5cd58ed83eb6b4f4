/*
 * fuzz_targets.c — fuzz target: the target record decoder
 * (src/parse/target_record.c), the trust boundary for records read back
 * from shards.  An accepted record is read whole through every getter and
 * every object's mask is painted at the record's image size when that is
 * small (ASan checks every read stays inside the record, every write
 * inside the plane).
 */
#include "parse/targets.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chute_error err = {0};
    ch_tg_view v;
    /* the decoder may not assume alignment or a terminator: copy exactly */
    uint8_t *rec = malloc(size ? size : 1);
    if (!rec)
        return 0;
    memcpy(rec, data, size);
    if (ch_tg_decode(rec, size, "fuzz", &v, &err) != CHUTE_OK) {
        free(rec);
        return 0;
    }
    float *kp = malloc(sizeof(float) * (v.k ? v.k * 3 : 1));
    uint64_t area = (uint64_t)v.width * v.height;
    uint8_t *plane = area && area <= 4096 ? calloc(area, 1) : NULL;
    for (uint32_t i = 0; i < v.n && kp; i++) {
        float box[4];
        ch_tg_box(&v, i, box);
        (void)ch_tg_ann_id(&v, i);
        (void)ch_tg_label(&v, i);
        (void)ch_tg_crowd(&v, i);
        ch_tg_keypoints(&v, i, kp);
        size_t body;
        if (plane && ch_tg_seg(&v, i, &body) != CH_SEG_NONE)
            ch_tg_mask(&v, i, v.height, v.width, plane, &err);
    }
    free(plane);
    free(kp);
    free(rec);
    return 0;
}
