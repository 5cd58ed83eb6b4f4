/*
 * fuzz_hdf5.c — fuzz target: the chunk arithmetic and filters chute runs
 * on every HDF5 read (src/format/h5chunk.c) — not libhdf5, which chute
 * calls only at open.  The input's first bytes choose a geometry (rank,
 * dimensions, chunk shape, element size), a filter pipeline and a filter
 * mask; the rest is a stored chunk.  Whatever the bytes, undoing the
 * filters must stay inside its buffers and either fail cleanly or give
 * exactly chunk_bytes, and copying every chunk of a sample must stay
 * inside the sample (ASan checks both).  Each chunk is inflated twice,
 * with zlib and with libdeflate (when built with it), and where both
 * accept it the bytes must be equal.
 */
#include "format/h5chunk.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 12)
        return 0;
    uint32_t rank = 1 + data[0] % 4;
    uint64_t dims[4], cdims[4];
    for (uint32_t k = 0; k < rank; k++) {
        dims[k] = 1 + data[1 + k] % 9;
        cdims[k] = 1 + data[5 + k] % 6;
    }
    uint32_t es = 1u << (data[9] % 4);
    uint8_t fl = data[10], mask = data[11];
    data += 12;
    size -= 12;
    ch_h5_geom g;
    chute_error err;
    if (ch_h5_geom_init(&g, rank, dims, cdims, es, "fuzz", &err) != CHUTE_OK)
        return 0;
    /* bits 0..1: first filter, 2..3: second (0 none, 1 deflate, 2 shuffle) */
    for (int k = 0; k < 2; k++) {
        int f = (fl >> (2 * k)) & 3;
        if (f == 1 || f == 2)
            ch_h5_geom_filter(&g, f == 1 ? CH_H5_FILTER_DEFLATE : CH_H5_FILTER_SHUFFLE,
                              (fl >> 4) % 9, "fuzz", &err);
    }
    size_t cap = (size_t)(size > g.chunk_bytes ? size : g.chunk_bytes);
    uint8_t *a = malloc(cap ? cap : 1), *b = malloc(cap ? cap : 1);
    uint8_t *z = malloc(CH_H5_ZARENA), *row = malloc((size_t)g.row_bytes);
    memcpy(a, data, size);
    const uint8_t *out = NULL;
    /* The same chunk through zlib (no inflater) and through libdeflate:
     * both must stay in bounds, and where both succeed they must agree
     * byte for byte (they may differ only in which malformed streams they
     * refuse, e.g. zlib ignores bytes after the stream). */
    uint8_t *a2 = malloc(cap ? cap : 1), *b2 = malloc(cap ? cap : 1);
    memcpy(a2, data, size);
    ch_h5_inflater *inf = ch_h5_inflater_new();
    const uint8_t *out2 = NULL;
    int rc2 = ch_h5_unfilter(&g, mask, a2, b2, cap, size, z, inf, &out2, "fuzz", &err);
    ch_h5_inflater_free(inf);
    if (ch_h5_unfilter(&g, mask, a, b, cap, size, z, NULL, &out, "fuzz", &err) == CHUTE_OK) {
        if (rc2 == CHUTE_OK && memcmp(out, out2, (size_t)g.chunk_bytes) != 0)
            __builtin_trap();
        /* A chunk that is exactly one sample inflates straight into it:
         * the same bytes as the general path. */
        if (ch_h5_direct(&g, mask)) {
            uint8_t *d = malloc((size_t)g.row_bytes);
            if (ch_h5_inflate_direct(&g, data, size, d, z, NULL, "fuzz", &err) != CHUTE_OK ||
                memcmp(d, out, (size_t)g.row_bytes) != 0)
                __builtin_trap();
            free(d);
        }
        if (out != a && out != b)
            __builtin_trap();
        uint64_t i = dims[0] - 1;
        uint64_t first = ch_h5_first_chunk(&g, i);
        if (first + g.per_row > g.nchunks)
            __builtin_trap();
        for (uint64_t k = first; k < first + g.per_row; k++) {
            uint64_t gc[CH_H5_MAX_RANK];
            ch_h5_chunk_coords(&g, k, gc);
            if (gc[0] != i / cdims[0])
                __builtin_trap();
            ch_h5_copy_chunk(&g, i, gc, out, row);
        }
    }
    free(a);
    free(b);
    free(a2);
    free(b2);
    free(z);
    free(row);
    return 0;
}
