/*
 * h5chunk.c — HDF5 chunk arithmetic and filters, no libhdf5 (h5chunk.h
 * says why).  Sizes are checked once in ch_h5_geom_init; afterwards every
 * offset is a product of values that geometry bounded, so the copy loops
 * need no further checks.  zlib allocates its inflate state from the
 * caller's arena, so a read allocates nothing.
 */
#include "h5chunk.h"

#include <string.h>
#include <zlib.h>
#ifdef CHUTE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#define GEOM_MAX_BYTES (1ull << 62)

static int mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > GEOM_MAX_BYTES / a)
        return 0;
    *out = a * b;
    return 1;
}

int ch_h5_geom_init(ch_h5_geom *g, uint32_t rank, const uint64_t *dims, const uint64_t *cdims,
                    uint32_t es, const char *where, chute_error *err)
{
    memset(g, 0, sizeof *g);
    if (rank < 1 || rank > CH_H5_MAX_RANK)
        return ch_err(err, CHUTE_EFORMAT, "%s: rank %u (1..%d supported)", where, rank,
                      CH_H5_MAX_RANK);
    if (es < 1 || es > 16)
        return ch_err(err, CHUTE_EFORMAT, "%s: element size %u (1..16 supported)", where, es);
    g->rank = rank;
    g->es = es;
    uint64_t row = es;
    for (uint32_t k = 0; k < rank; k++) {
        g->dims[k] = dims[k];
        if (k && dims[k] == 0)
            return ch_err(err, CHUTE_EFORMAT, "%s: dimension %u is 0", where, k);
        if (k && !mul_ok(row, dims[k], &row))
            return ch_err(err, CHUTE_EFORMAT, "%s: one sample is over 2^62 bytes", where);
    }
    uint64_t total;
    if (!mul_ok(row, dims[0], &total))
        return ch_err(err, CHUTE_EFORMAT, "%s: the dataset is over 2^62 bytes", where);
    g->row_bytes = row;
    if (!cdims)
        return CHUTE_OK;
    g->chunked = 1;
    uint64_t cb = es, n = 1;
    for (uint32_t k = 0; k < rank; k++) {
        if (cdims[k] == 0)
            return ch_err(err, CHUTE_EFORMAT, "%s: chunk dimension %u is 0", where, k);
        g->cdims[k] = cdims[k];
        g->grid[k] = dims[k] / cdims[k] + (dims[k] % cdims[k] != 0);
        if (!mul_ok(cb, cdims[k], &cb) || cb > CH_H5_MAX_CHUNK)
            return ch_err(err, CHUTE_EFORMAT, "%s: a chunk is over %llu bytes", where,
                          (unsigned long long)CH_H5_MAX_CHUNK);
        if (!mul_ok(n, g->grid[k] ? g->grid[k] : 1, &n) || n > (1ull << 40))
            return ch_err(err, CHUTE_EFORMAT, "%s: more than 2^40 chunks", where);
        if (k)
            g->per_row = k == 1 ? g->grid[1] : g->per_row * g->grid[k];
    }
    if (rank == 1)
        g->per_row = 1;
    g->nchunks = dims[0] ? n : 0;
    g->chunk_bytes = cb;
    return CHUTE_OK;
}

int ch_h5_geom_filter(ch_h5_geom *g, int filter, uint32_t shuffle_es, const char *where,
                      chute_error *err)
{
    if (g->nfilters >= CH_H5_MAX_FILTERS)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: more than %d filters", where,
                      CH_H5_MAX_FILTERS);
    g->filter[g->nfilters] = filter;
    g->shuffle_es[g->nfilters] = shuffle_es;
    g->nfilters++;
    return CHUTE_OK;
}

uint64_t ch_h5_first_chunk(const ch_h5_geom *g, uint64_t i)
{
    return i / g->cdims[0] * g->per_row;
}

void ch_h5_chunk_coords(const ch_h5_geom *g, uint64_t k, uint64_t *gc)
{
    for (uint32_t d = g->rank; d-- > 0;) {
        gc[d] = k % g->grid[d];
        k /= g->grid[d];
    }
}

/* ---- filters ---- */

typedef struct zarena {
    uint8_t *p;
    size_t used, cap;
} zarena;

static voidpf arena_alloc(voidpf opaque, uInt items, uInt size)
{
    zarena *a = opaque;
    size_t n = (size_t)items * size;
    n = (n + 15) & ~(size_t)15;
    if (n > a->cap - a->used)
        return Z_NULL;
    void *r = a->p + a->used;
    a->used += n;
    return r;
}

static void arena_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    (void)p;
}

static int inflate_to(const uint8_t *in, size_t in_len, uint8_t *out, size_t cap, size_t *out_len,
                      uint8_t *arena, const char *where, chute_error *err)
{
    zarena za = {(uint8_t *)(((uintptr_t)arena + 15) & ~(uintptr_t)15), 0, CH_H5_ZARENA - 16};
    z_stream z;
    memset(&z, 0, sizeof z);
    z.zalloc = arena_alloc;
    z.zfree = arena_free;
    z.opaque = &za;
    if (inflateInit(&z) != Z_OK)
        return ch_err(err, CHUTE_ENOMEM, "%s: zlib could not start", where);
    int rc = Z_OK;
    size_t done_in = 0, done_out = 0;
    /* avail_in/avail_out are uInt: feed in pieces below 4 GiB. */
    while (rc == Z_OK) {
        size_t ni = CH_MIN(in_len - done_in, (size_t)UINT32_MAX);
        size_t no = CH_MIN(cap - done_out, (size_t)UINT32_MAX);
        z.next_in = (Bytef *)(in + done_in);
        z.avail_in = (uInt)ni;
        z.next_out = out + done_out;
        z.avail_out = (uInt)no;
        rc = inflate(&z, Z_NO_FLUSH);
        done_in += ni - z.avail_in;
        done_out += no - z.avail_out;
        if (rc == Z_OK && ni == z.avail_in && no == z.avail_out)
            rc = Z_BUF_ERROR; /* no progress: truncated input or output full */
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END)
        return ch_err(err, CHUTE_ECORRUPT, "%s: deflate stream %s after %zu of %zu bytes", where,
                      rc == Z_BUF_ERROR ? (done_out == cap ? "inflates past the chunk's size"
                                                           : "is truncated")
                                        : "is corrupt",
                      done_in, in_len);
    *out_len = done_out;
    return CHUTE_OK;
}

#ifdef CHUTE_HAVE_LIBDEFLATE
ch_h5_inflater *ch_h5_inflater_new(void)
{
    return (ch_h5_inflater *)libdeflate_alloc_decompressor();
}

void ch_h5_inflater_free(ch_h5_inflater *inf)
{
    if (inf)
        libdeflate_free_decompressor((struct libdeflate_decompressor *)inf);
}

/* The same contract as inflate_to: a zlib stream that ends within cap
 * bytes of output (trailing input after it is ignored, as zlib does). */
static int inflate_fast(ch_h5_inflater *inf, const uint8_t *in, size_t in_len, uint8_t *out,
                        size_t cap, size_t *out_len, const char *where, chute_error *err)
{
    size_t n = 0;
    enum libdeflate_result r = libdeflate_zlib_decompress(
        (struct libdeflate_decompressor *)inf, in, in_len, out, cap, &n);
    if (r != LIBDEFLATE_SUCCESS)
        return ch_err(err, CHUTE_ECORRUPT, "%s: deflate stream of %zu bytes %s", where, in_len,
                      r == LIBDEFLATE_INSUFFICIENT_SPACE ? "inflates past the chunk's size"
                                                         : "is corrupt or truncated");
    *out_len = n;
    return CHUTE_OK;
}
#else
ch_h5_inflater *ch_h5_inflater_new(void)
{
    return NULL;
}

void ch_h5_inflater_free(ch_h5_inflater *inf)
{
    (void)inf;
}
#endif

static int inflate_any(ch_h5_inflater *fast, const uint8_t *in, size_t in_len, uint8_t *out,
                       size_t cap, size_t *n, uint8_t *zarena, const char *where,
                       chute_error *err)
{
#ifdef CHUTE_HAVE_LIBDEFLATE
    if (fast)
        return inflate_fast(fast, in, in_len, out, cap, n, where, err);
#endif
    return inflate_to(in, in_len, out, cap, n, zarena, where, err);
}

int ch_h5_direct(const ch_h5_geom *g, uint32_t mask)
{
    if (!g->chunked || g->cdims[0] != 1 || g->per_row != 1 || g->chunk_bytes != g->row_bytes)
        return 0;
    int deflates = 0;
    for (uint32_t k = 0; k < g->nfilters; k++) {
        if (k < 32 && (mask >> k & 1))
            continue;
        if (g->filter[k] == CH_H5_FILTER_DEFLATE)
            deflates++;
        else if (g->shuffle_es[k] > 1)
            return 0;
    }
    return deflates == 1;
}

int ch_h5_inflate_direct(const ch_h5_geom *g, const uint8_t *in, size_t in_len, uint8_t *dst,
                         uint8_t *zarena, ch_h5_inflater *fast, const char *where,
                         chute_error *err)
{
    size_t n = 0;
    int rc = inflate_any(fast, in, in_len, dst, (size_t)g->chunk_bytes, &n, zarena, where, err);
    if (rc != CHUTE_OK)
        return rc;
    if (n != g->chunk_bytes)
        return ch_err(err, CHUTE_ECORRUPT, "%s: chunk holds %zu bytes after its filters, not %llu",
                      where, n, (unsigned long long)g->chunk_bytes);
    return CHUTE_OK;
}

/* HDF5's shuffle: byte j of element e is stored at j * n + e; a tail of
 * len % es bytes is stored as is. */
static void unshuffle(const uint8_t *in, uint8_t *out, size_t len, uint32_t es)
{
    size_t n = len / es;
    for (uint32_t j = 0; j < es; j++) {
        const uint8_t *src = in + (size_t)j * n;
        for (size_t e = 0; e < n; e++)
            out[e * es + j] = src[e];
    }
    memcpy(out + n * es, in + n * es, len - n * es);
}

int ch_h5_unfilter(const ch_h5_geom *g, uint32_t mask, uint8_t *a, uint8_t *b, size_t cap,
                   size_t in_len, uint8_t *zarena, ch_h5_inflater *fast, const uint8_t **out,
                   const char *where, chute_error *err)
{
    uint8_t *cur = a, *other = b;
    size_t len = in_len;
    for (uint32_t k = g->nfilters; k-- > 0;) {
        if (k < 32 && (mask >> k & 1))
            continue;
        if (g->filter[k] == CH_H5_FILTER_DEFLATE) {
            size_t n = 0, ocap = (size_t)CH_MIN((uint64_t)cap, g->chunk_bytes);
            int rc = inflate_any(fast, cur, len, other, ocap, &n, zarena, where, err);
            if (rc != CHUTE_OK)
                return rc;
            len = n;
        } else if (g->shuffle_es[k] > 1) {
            unshuffle(cur, other, len, g->shuffle_es[k]);
        } else {
            continue;
        }
        uint8_t *t = cur;
        cur = other;
        other = t;
    }
    if (len != g->chunk_bytes)
        return ch_err(err, CHUTE_ECORRUPT, "%s: chunk holds %zu bytes after its filters, not %llu",
                      where, len, (unsigned long long)g->chunk_bytes);
    *out = cur;
    return CHUTE_OK;
}

void ch_h5_copy_chunk(const ch_h5_geom *g, uint64_t i, const uint64_t *gc, const uint8_t *chunk,
                      uint8_t *dst)
{
    uint32_t r = g->rank, es = g->es;
    uint64_t a = i - gc[0] * g->cdims[0]; /* row inside the chunk */
    if (r == 1) {
        memcpy(dst, chunk + a * es, es);
        return;
    }
    /* Extent of the chunk inside the dataset along each axis >= 1. */
    uint64_t lo[CH_H5_MAX_RANK], ext[CH_H5_MAX_RANK], x[CH_H5_MAX_RANK];
    for (uint32_t d = 1; d < r; d++) {
        lo[d] = gc[d] * g->cdims[d];
        ext[d] = CH_MIN(g->cdims[d], g->dims[d] - lo[d]);
        x[d] = 0;
    }
    size_t run = (size_t)(ext[r - 1] * es);
    for (;;) {
        /* Offsets of the run starting at x[1..r-2], 0 along the last axis. */
        uint64_t so = a, dof = 0;
        for (uint32_t d = 1; d < r; d++) {
            so = so * g->cdims[d] + x[d];
            dof = dof * g->dims[d] + lo[d] + x[d];
        }
        memcpy(dst + dof * es, chunk + so * es, run);
        uint32_t d = r - 1;
        while (d-- > 1) {
            if (++x[d] < ext[d])
                break;
            x[d] = 0;
        }
        if (d == 0 || r == 2)
            return;
    }
}
