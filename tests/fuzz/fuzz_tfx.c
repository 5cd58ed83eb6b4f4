/*
 * fuzz_tfx.c — fuzz target: chute's saved TFRecord index parser
 * (src/format/tfr_saved.h), the one part of a saved index that sees bytes
 * from disk.  What the index must match (data size, mtime, keys) is taken
 * from the input's own header when it has one, and each input is tried
 * also with its checksum fixed up, so mutations reach the record checks
 * instead of stopping at "stale" or "checksum mismatch".
 *
 * Invariants: parsing either fails with a message naming the input or
 * gives records that lie inside the data file, in increasing and
 * non-overlapping order, with image_len <= length and flags 0/1; and an
 * accepted index is canonical: formatting it again gives the same bytes.
 */
#define _GNU_SOURCE
#include "format/parse.h"
#include "format/tfr_saved.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void one(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);
    /* Again with the checksum made right, so mutations reach the checks
     * behind it (the replayer's byte flips would otherwise stop there). */
    if (size >= 48) {
        uint8_t *fixed = malloc(size);
        if (!fixed)
            return 0;
        memcpy(fixed, data, size);
        uint32_t c = ch_crc32c(0, fixed, size - 8);
        for (int i = 0; i < 4; i++)
            fixed[size - 8 + i] = (uint8_t)(c >> (8 * i));
        one(fixed, size);
        free(fixed);
    }
    return 0;
}

static void one(const uint8_t *data, size_t size)
{
    char keys[2][CH_TFX_MAX_KEYS + 1] = {"image", "label"};
    ch_tfx_want want = {0, 0, keys[0], keys[1]};
    if (size >= 40) {
        want.data_size = le64(data + 16);
        want.mtime_ns = (int64_t)le64(data + 24);
        uint32_t k = (uint32_t)le64(data + 12) & 0xffffffffu;
        if (k >= 2 && k <= CH_TFX_MAX_KEYS && size - 40 >= k) {
            const char *s = (const char *)data + 40;
            const char *z = memchr(s, '\0', k);
            if (z && z + 1 < s + k && memchr(z + 1, '\0', (size_t)(s + k - z - 1))) {
                memcpy(keys[0], s, (size_t)(z - s) + 1);
                strcpy(keys[1], z + 1);
            }
        }
    }
    chute_error err;
    ch_tfx ix;
    int rc = ch_tfx_parse(data, size, "mem.chuteidx", &want, &ix, &err);
    if (rc != CHUTE_OK) {
        if (!strstr(err.message, "mem.chuteidx"))
            __builtin_trap();
        return;
    }
    uint64_t end = 0;
    for (uint64_t i = 0; i < ix.count; i++) {
        const ch_tfx_rec *r = &ix.recs[i];
        if (r->offset < end || r->offset + 16 + r->length > want.data_size ||
            r->offset + 16 + r->length < r->offset || r->image_len > r->length || r->bad > 1)
            __builtin_trap();
        end = r->offset + 16 + r->length;
    }
    uint8_t *again = NULL;
    size_t n = 0;
    if (ch_tfx_format(&ix, &want, &again, &n, &err) != CHUTE_OK || n != size ||
        memcmp(again, data, size) != 0)
        __builtin_trap();
    free(again);
    ch_tfx_free(&ix);
}
