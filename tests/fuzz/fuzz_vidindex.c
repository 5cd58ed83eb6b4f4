/*
 * fuzz_vidindex.c — fuzz target: chute's saved video keyframe index
 * parser (src/format/vidindex.h), the part of the video format that reads
 * bytes chute did not just demux.  What the index must match (file size,
 * mtime, head CRC) is taken from the input's own header, and each input is
 * tried also with its checksum fixed up, so mutations reach the row checks
 * instead of stopping at "stale" or "CRC".
 *
 * Invariants: parsing either fails with a message naming the input, or
 * gives rows whose presentation order is a permutation with strictly
 * increasing pts, positions inside the file, a keyframe list of exactly
 * the key rows, and a seek row for every frame that is a keyframe at or
 * before it in decode order with pts at or before its pts (or none); and
 * an accepted index is canonical: formatting it again gives the same bytes.
 */
#define _GNU_SOURCE
#include "format/vidindex.h"

#include "common/checksum.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void one(const uint8_t *data, size_t size)
{
    ch_vix_want want = {0, 0, 0};
    if (size >= 64) {
        want.size = le(data + 16, 8);
        want.mtime_ns = (int64_t)le(data + 24, 8);
        want.head_crc = (uint32_t)le(data + 32, 4);
    }
    chute_error err;
    ch_vix ix;
    int rc = ch_vix_parse(data, size, "mem.chutevix", &want, &ix, &err);
    if (rc != CHUTE_OK) {
        if (!strstr(err.message, "mem.chutevix"))
            __builtin_trap();
        return;
    }
    uint32_t nkeys = 0;
    for (uint64_t k = 0; k < ix.count; k++) {
        const ch_vix_row *r = &ix.rows[k];
        if ((r->pos >= 0 && (uint64_t)r->pos >= want.size) || r->pos < -1 ||
            ix.rank[ix.by_pts[k]] != k)
            __builtin_trap();
        if (k && ix.rows[ix.by_pts[k]].pts <= ix.rows[ix.by_pts[k - 1]].pts)
            __builtin_trap();
        if (r->flags & CH_VIX_KEY) {
            if (nkeys >= ix.nkeys || ix.keys[nkeys] != k)
                __builtin_trap();
            nkeys++;
        }
    }
    if (nkeys != ix.nkeys)
        __builtin_trap();
    for (uint64_t f = 0; f < ix.count && f < 4096; f++) {
        uint32_t s = ch_vix_seek_row(&ix, f, f);
        if (s == UINT32_MAX)
            continue;
        const ch_vix_row *r = &ix.rows[s], *w = &ix.rows[ix.by_pts[f]];
        if (!(r->flags & CH_VIX_KEY) || s > ix.by_pts[f] || r->pts > w->pts)
            __builtin_trap();
    }
    uint8_t *again = NULL;
    size_t n = 0;
    if (ch_vix_format(&ix, &want, &again, &n, &err) != CHUTE_OK || n != size ||
        memcmp(again, data, size) != 0)
        __builtin_trap();
    free(again);
    ch_vix_free(&ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);
    if (size >= 72) { /* again with the CRC made right */
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
