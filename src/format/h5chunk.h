/*
 * h5chunk.h — the arithmetic of reading HDF5 datasets without libhdf5 in
 * the hot path: sample geometry, which chunks hold sample i, undoing the
 * filter pipeline (deflate, shuffle) of one chunk, and copying the part
 * of a chunk that belongs to sample i into a dense sample buffer.
 *
 * Why it is separate from fmt_hdf5.c: libhdf5 is used only at open (to
 * learn each dataset's shape, type, layout, file offset and chunk index);
 * the per-sample reads are plain positional reads through the source plus
 * this code, so they never take HDF5's global library lock.  Everything
 * here is pure (no I/O, no libhdf5, no allocation: zlib's state lives in a
 * caller-provided arena), so it is built with or without HDF5 and fuzzed
 * by tests/fuzz/fuzz_hdf5.c.  Every size is computed in checked 64-bit
 * arithmetic by ch_h5_geom_init; the other calls trust a geometry it
 * accepted.
 */
#ifndef CHUTE_FORMAT_H5CHUNK_H
#define CHUTE_FORMAT_H5CHUNK_H

#include "../common/common.h"
#include "fields.h"

#include <stddef.h>
#include <stdint.h>

#define CH_H5_MAX_RANK (CH_FIELD_MAX_DIMS + 1) /* the sample axis + a field's dims */
#define CH_H5_MAX_FILTERS 8
#define CH_H5_ZARENA (64u << 10)              /* zlib inflate state + 32 KiB window */
#define CH_H5_MAX_CHUNK (1ull << 32)          /* HDF5's own limit on a chunk */

enum { CH_H5_FILTER_DEFLATE = 1, CH_H5_FILTER_SHUFFLE = 2 };

typedef struct ch_h5_geom {
    uint32_t rank;                    /* axis 0 is the sample */
    uint64_t dims[CH_H5_MAX_RANK];
    uint32_t es;                      /* bytes per element */
    uint64_t row_bytes;               /* one sample: prod(dims[1..]) * es */
    /* Chunked datasets only (chunked = 0: contiguous). */
    int chunked;
    uint64_t cdims[CH_H5_MAX_RANK];
    uint64_t grid[CH_H5_MAX_RANK];    /* chunks along each axis */
    uint64_t per_row;                 /* chunks per row of the grid: prod(grid[1..]) */
    uint64_t nchunks;                 /* prod(grid) */
    uint64_t chunk_bytes;             /* prod(cdims) * es, as stored after unfiltering */
    uint32_t nfilters;                /* the pipeline in write order */
    int filter[CH_H5_MAX_FILTERS];    /* CH_H5_FILTER_* */
    uint32_t shuffle_es[CH_H5_MAX_FILTERS];
} ch_h5_geom;

/* Fill g for a dataset of rank dims (dims[0] samples) with elements of es
 * bytes, chunked by cdims (NULL: contiguous).  Rejects rank 0 or over
 * CH_H5_MAX_RANK, es 0 or over 16, a zero dimension other than dims[0],
 * a zero chunk dimension, sizes past 2^62 bytes, a chunk over
 * CH_H5_MAX_CHUNK bytes or more than 2^40 chunks: CHUTE_EFORMAT "WHERE:
 * reason".  Filters are added after with ch_h5_geom_filter. */
int ch_h5_geom_init(ch_h5_geom *g, uint32_t rank, const uint64_t *dims, const uint64_t *cdims,
                    uint32_t es, const char *where, chute_error *err);
/* Append a filter (write order); shuffle_es is the shuffle filter's
 * element size (its first client value).  CHUTE_EUNSUPPORTED past
 * CH_H5_MAX_FILTERS. */
int ch_h5_geom_filter(ch_h5_geom *g, int filter, uint32_t shuffle_es, const char *where,
                      chute_error *err);

/* The chunks that hold sample i (i < dims[0]) are the linear chunk
 * indices first .. first + per_row - 1 (row-major over the grid, as
 * chunk k of ch_h5_chunk_coords). */
uint64_t ch_h5_first_chunk(const ch_h5_geom *g, uint64_t i);
/* Grid coordinates of linear chunk k (< nchunks) into gc[rank]. */
void ch_h5_chunk_coords(const ch_h5_geom *g, uint64_t k, uint64_t *gc);

/* A reusable libdeflate decompressor (about 10 KiB, allocated once): its
 * inflate runs 2-3x faster than zlib's on HDF5's zlib-wrapped chunks.
 * ch_h5_inflater_new returns NULL when chute was built without libdeflate
 * (CHUTE_HAVE_LIBDEFLATE) or memory is short; a NULL inflater makes
 * ch_h5_unfilter use zlib in the caller's arena instead, with the same
 * result.  One inflater serves one call at a time; free accepts NULL. */
typedef struct ch_h5_inflater ch_h5_inflater;
ch_h5_inflater *ch_h5_inflater_new(void);
void ch_h5_inflater_free(ch_h5_inflater *inf);

/*
 * Undo the filters of one stored chunk.  The chunk's bytes are in a[0,
 * in_len); a and b are each cap >= max(in_len, chunk_bytes) bytes; mask is
 * the chunk's filter mask (bit k set: filter k was not applied).  zarena
 * is CH_H5_ZARENA bytes for zlib.  On success *out points at a or b and
 * holds exactly chunk_bytes bytes.  A stream that does not inflate, or to
 * another size, is CHUTE_ECORRUPT "WHERE: reason".  fast (may be NULL)
 * inflates with libdeflate instead of zlib; both check the adler32.
 */
int ch_h5_unfilter(const ch_h5_geom *g, uint32_t mask, uint8_t *a, uint8_t *b, size_t cap,
                   size_t in_len, uint8_t *zarena, ch_h5_inflater *fast, const uint8_t **out,
                   const char *where, chute_error *err);

/* 1 when a chunk with filter mask `mask` can be inflated straight into
 * the sample buffer: a chunk is exactly one sample (chunk shape 1 x the
 * sample's shape) and the filters left after the mask are one deflate
 * (shuffles of 1-byte elements, no-ops, aside).  h5py's
 * chunks=(1, ...), compression="gzip" is this case; it saves a copy of
 * every sample and a pass through a second buffer. */
int ch_h5_direct(const ch_h5_geom *g, uint32_t mask);
/* When ch_h5_direct(g, mask): inflate the stored chunk in[0, in_len)
 * into dst (row_bytes == chunk_bytes), with fast or zlib in zarena as
 * ch_h5_unfilter; the same errors. */
int ch_h5_inflate_direct(const ch_h5_geom *g, const uint8_t *in, size_t in_len, uint8_t *dst,
                         uint8_t *zarena, ch_h5_inflater *fast, const char *where,
                         chute_error *err);

/* Copy the part of chunk gc (grid coordinates, gc[0] == i / cdims[0])
 * that belongs to sample i from the unfiltered chunk (chunk_bytes bytes)
 * into the dense sample dst (row_bytes bytes). */
void ch_h5_copy_chunk(const ch_h5_geom *g, uint64_t i, const uint64_t *gc, const uint8_t *chunk,
                      uint8_t *dst);

#endif
