/*
 * tfr_saved.h — chute's saved index of a TFRecord file ("F.chuteidx").
 *
 * Opening TFRecords has to learn every label, and labels live inside the
 * records: without help, open reads the whole dataset (1.28M records for
 * ImageNet).  So the first open saves what it learnt — each record's
 * offset, length, raw label, image size and whether it was bad — and
 * later opens read only that.  A DALI tfrecord2idx file gives offsets but
 * no labels, so it spares the header scan, not the read.
 *
 * Layout (little-endian, docs/FORMAT.md "TFRecord saved index"):
 *   0  "CHUTETFX"                     8  u32 version (1)
 *   12 u32 K: bytes of the keys        16 u64 data file size
 *   24 i64 data file mtime (ns)        32 u64 count
 *   40 image key NUL label key NUL, zero-padded to a multiple of 8
 *   then count x 32: u64 offset, u64 length, i64 raw label,
 *                    u32 image length, u32 flags (bit 0: bad at open)
 *   then u32 CRC32C of everything before it, "TFXE".
 *
 * Everything in a saved index is a claim: it is used only when its CRC
 * holds, its data size and mtime equal the data file's now (so a file
 * rewritten since is rebuilt, within the file system's mtime resolution),
 * its keys are the ones asked for, and every record lies inside the file
 * in increasing, non-overlapping order.  Anything else and the file is
 * indexed again and the index rewritten.  Reads still check both CRCs of
 * every record, so even a stale index cannot make wrong image bytes.
 *
 * Where it lives: beside the data (F.chuteidx) when the data is local and
 * its directory writable, else in the index directory (the dataset option
 * index_dir; default $XDG_CACHE_HOME/chute, else ~/.cache/chute) under a
 * name made from a hash of the data's path.  Written to a temporary name
 * and renamed, so readers see a whole index or none.  Saving is best
 * effort: a failure to save never fails the open.
 */
#ifndef CHUTE_FORMAT_TFR_SAVED_H
#define CHUTE_FORMAT_TFR_SAVED_H

#include "../common/common.h"
#include "../io/io.h"

#define CH_TFX_MAGIC "CHUTETFX"
#define CH_TFX_VERSION 1u
#define CH_TFX_SUFFIX ".chuteidx"
#define CH_TFX_MAX_KEYS 8192u

typedef struct ch_tfx_rec {
    uint64_t offset, length;
    int64_t raw_label;
    uint32_t image_len;
    uint32_t bad;
} ch_tfx_rec;

typedef struct ch_tfx {
    uint64_t count, cap;
    ch_tfx_rec *recs;
} ch_tfx;

/* What a saved index must match to be used. */
typedef struct ch_tfx_want {
    uint64_t data_size;
    int64_t mtime_ns;
    const char *image_key, *label_key;
} ch_tfx_want;

/* Parse and check a saved index held in memory (fuzzed: never trusts it).
 * CHUTE_OK with *out filled; CHUTE_ECORRUPT (damaged) or CHUTE_EFORMAT
 * (another version, other keys, a data file changed since) with a message
 * naming `name`: the caller rebuilds. */
int ch_tfx_parse(const uint8_t *p, size_t n, const char *name, const ch_tfx_want *want,
                 ch_tfx *out, chute_error *err);
/* Serialise ix for `want` into a malloc'd buffer. */
int ch_tfx_format(const ch_tfx *ix, const ch_tfx_want *want, uint8_t **out, size_t *out_len,
                  chute_error *err);
/* Append one record (grows by doubling). */
int ch_tfx_push(ch_tfx *ix, const ch_tfx_rec *r);
void ch_tfx_free(ch_tfx *ix);

/* The saved index of data file `path` (read through src beside it, then
 * from the local index directory `index_dir`, NULL = default, "" = none):
 * CHUTE_OK with *out, or CHUTE_ENOTFOUND when none is usable (missing,
 * stale, damaged: *why then says which, for diagnostics). */
int ch_tfx_load(const ch_source_ops *src, const char *path, const char *index_dir,
                const ch_tfx_want *want, ch_tfx *out, char *why, size_t why_n);
/* Save ix for data file `path`: beside it when src is the local source
 * and the directory takes it, else into the index directory.  Best
 * effort; returns CHUTE_OK or the last failure (callers may ignore it). */
int ch_tfx_save(const ch_source_ops *src, const char *path, const char *index_dir,
                const ch_tfx_want *want, const ch_tfx *ix, chute_error *err);
/* Write buf[n] as the local file `final` atomically (a temporary in the
 * same directory, fsync, rename): the video format's index uses it too. */
int ch_write_atomic(const char *final, const uint8_t *buf, size_t n, chute_error *err);
/* The index directory's path for index_dir (NULL = default) into buf;
 * 0 when there is none ("" or no HOME). */
int ch_tfx_cache_path(const char *path, const char *index_dir, char *buf, size_t n);

/* ---- GZIP/ZLIB TFRecord files: inflated once, then read as plain ----
 *
 * Deflate has no random access, so a compressed TFRecord file is
 * inflated once, while its records are indexed and every record's CRCs
 * checked, into the index directory as
 * "<hash of path>-<size>-<mtime ns>-<name>.tfrecord" (the compressed
 * file's identity is in the name: a changed file gets a new copy),
 * written to a temporary name and renamed when complete.  Its saved index
 * goes beside it, and the copy is used only while that index is valid
 * for it; otherwise it is inflated again.  Reads are then one pread of
 * the local copy per record, both CRCs checked as for any TFRecord. */

/* FMT_TFR_GZIP or FMT_TFR_ZLIB when the n >= 2 bytes at p start like
 * such a stream, else FMT_TFR_NONE (0). */
int ch_tfx_compression(const uint8_t *p, size_t n);
/* 1 if inflating the n bytes at p (a stream of kind comp) gives at least
 * 12 bytes, which go to out. */
int ch_tfx_inflate_head(const uint8_t *p, size_t n, int comp, uint8_t out[12]);
/* The inflated copy's path for compressed file `path` of `size` bytes
 * and mtime `mtime_ns`; 0 when there is no index directory. */
int ch_tfx_inflated_path(const char *path, const char *index_dir, uint64_t size,
                         int64_t mtime_ns, char *buf, size_t n);
/* Inflate `path` (open as h through src, `size` bytes, kind comp) into
 * `copy` atomically; *ix gets its records (offsets in the copy). */
struct fmt_tfr_index;
int ch_tfx_inflate(const ch_source_ops *src, void *h, const char *path, uint64_t size, int comp,
                   const char *copy, struct fmt_tfr_index *ix, chute_error *err);

#endif
