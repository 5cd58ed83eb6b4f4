/*
 * parse.h — parsers for the formats people already have: TFRecord
 * (plain, GZIP, ZLIB; with tf.train.Example payloads) and WebDataset tar
 * shards.
 *
 * This is the layer *below* a format registry: it turns bytes into
 * indexes (where each record or member lives) and records into named
 * fields, and knows nothing of datasets, labels or the pipeline.  A
 * registry entry (probe/open/read) is a thin shell over these calls.
 *
 * Why it is shaped so:
 *   - Indexing is separate from reading.  An index is built once (at open,
 *     or loaded from a DALI-style .idx file) and then every record is one
 *     positional read, so workers never parse framing in the hot loop.
 *   - Input comes through fmt_reader: either a memory buffer (zero copy;
 *     what the fuzzers and tests use) or a file descriptor read through a
 *     read-ahead window, so a scan that hops from header to header reads
 *     only what it needs and never holds a whole file in memory.
 *   - Parsing a record (fmt_pb_*) allocates nothing: it returns views
 *     (pointer + length) into the caller's buffer, so the per-sample path
 *     stays allocation-free.
 *   - Everything read from a file is a claim to be checked, not a fact:
 *     each length, size and offset is compared against what is really
 *     there (with overflow-checked arithmetic) before it is used, and
 *     against caller-given limits (CHUTE_ELIMIT) so a hostile file cannot
 *     make us allocate or read without bound.
 *
 * Status codes: CHUTE_EFORMAT = "this is not that format at all" (the
 * very first header is wrong), CHUTE_ECORRUPT = "it is that format but
 * damaged here", CHUTE_ELIMIT = "valid, but beyond a configured limit",
 * CHUTE_EUNSUPPORTED = "legal but a feature we do not read" (tar sparse
 * files, a protobuf list split over two messages), CHUTE_EIO = the
 * storage failed (never reported as corrupt).  Every message names the
 * input (its name as given) and the byte offset, then the reason.
 *
 * No function here keeps state between calls or touches a global; all
 * state lives in the structs the caller passes.  Indexes own their
 * arrays and are released with their *_free call (which accepts a zeroed
 * struct).  None of these calls is thread-safe on the same struct; on
 * different structs any thread may call anything.
 */
#ifndef CHUTE_FORMAT_PARSE_H
#define CHUTE_FORMAT_PARSE_H

#include "../common/checksum.h"
#include "../common/common.h"

#include <stddef.h>
#include <stdint.h>

/* ---- input: a memory buffer or a file read through a window ---------- */

typedef struct fmt_reader {
    const char *name;       /* for messages; borrowed */
    uint64_t size;          /* bytes available: buffer length or file size */
    const uint8_t *mem;     /* memory input, or NULL for an fd */
    int fd;
    uint8_t *win;           /* fd input: the read-ahead window */
    size_t win_cap;
    uint64_t win_off;       /* file offset of win[0] */
    size_t win_len;         /* valid bytes in win */
    uint64_t last_off;      /* offset of the previous get (sizes refills) */
    const struct ch_source_ops *src; /* source input (fmt_reader_source), or NULL */
    void *src_h;
} fmt_reader;

#define FMT_WINDOW_DEFAULT (1u << 20)

/* A reader over len bytes at p (borrowed; must outlive the reader). */
void fmt_reader_mem(fmt_reader *r, const void *p, size_t len, const char *name);
/* A reader over the first `size` bytes of fd, read through a window of
 * `window` bytes (0 = FMT_WINDOW_DEFAULT).  The fd stays the caller's. */
int fmt_reader_fd(fmt_reader *r, int fd, uint64_t size, size_t window, const char *name,
                  chute_error *err);
/* Point *out at n bytes at off.  The view is valid until the next call.
 * n must be <= the window (or anything for memory input).  Reading past
 * r->size is CHUTE_ECORRUPT ("truncated"); a failed or short pread inside
 * the size is CHUTE_EIO (the file changed or the device failed). */
int fmt_reader_get(fmt_reader *r, uint64_t off, size_t n, const uint8_t **out,
                   chute_error *err);
/* The same over a file opened through a source (src/io): refills are
 * src->read_at calls, so a format indexes remote files as local ones. */
int fmt_reader_source(fmt_reader *r, const struct ch_source_ops *src, void *h, uint64_t size,
                      size_t window, const char *name, chute_error *err);
void fmt_reader_free(fmt_reader *r);

/* CRC-32C (TFRecord's checksum) lives in common/checksum.h. */

/* ---- TFRecord framing ------------------------------------------------- */
/*
 * A record: u64 length (LE), u32 masked CRC32C of those 8 bytes, `length`
 * data bytes, u32 masked CRC32C of the data.  16 bytes of framing.
 */
#define FMT_TFR_OVERHEAD 16u
#define FMT_TFR_HEADER 12u

typedef struct fmt_tfr_record {
    uint64_t offset;        /* of the record's length field (the framing) */
    uint64_t length;        /* of the data; the data starts at offset + 12 */
} fmt_tfr_record;

typedef struct fmt_tfr_index {
    fmt_tfr_record *recs;
    uint64_t count, cap;
    uint64_t end;           /* offset just past the last good record */
} fmt_tfr_index;

typedef enum fmt_tfr_compression {
    FMT_TFR_NONE = 0,
    FMT_TFR_GZIP = 1,       /* TFRecordOptions(compression_type="GZIP") */
    FMT_TFR_ZLIB = 2        /* compression_type="ZLIB" */
} fmt_tfr_compression;

typedef struct fmt_tfr_opts {
    uint64_t max_record;    /* larger data length: CHUTE_ELIMIT (0 = 1 GiB) */
    uint64_t max_records;   /* more records: CHUTE_ELIMIT (0 = 2^32) */
    uint64_t max_inflated;  /* compressed input: more uncompressed bytes than
                               this is CHUTE_ELIMIT (0 = 64 GiB) */
    int verify_data;        /* also check every record's data CRC while
                               indexing (reads every byte) */
} fmt_tfr_opts;

/*
 * Index the records of an uncompressed TFRecord stream.  Header CRCs are
 * always checked; data CRCs when opts->verify_data.  Without verify_data
 * an fd reader hops from header to header, reading 12 bytes per record
 * (through its window).  On error the index holds every record before the
 * bad one (ix->end = where it starts); framing cannot be recovered past a
 * bad length, so the scan stops there.  An empty stream is 0 records.
 */
int fmt_tfr_index_build(fmt_reader *r, const fmt_tfr_opts *opts, fmt_tfr_index *ix,
                        chute_error *err);

/*
 * Index a GZIP or ZLIB compressed TFRecord file by streaming inflate.
 * Offsets in the index are offsets in the *uncompressed* stream.  A
 * deflate stream has no random access, so a reader either (a) passes
 * cache_fd >= 0 here, which receives the whole uncompressed stream as it
 * is inflated — the cache is then read like a plain TFRecord file, one
 * pread per record — or (b) reads sequentially, inflating again in index
 * order.  Concatenated gzip members (cat a.gz b.gz) are one stream, as
 * gzip(1) and TensorFlow read them.  Always verifies data CRCs (every
 * byte passes by anyway).
 */
int fmt_tfr_index_compressed(int fd, const char *name, fmt_tfr_compression comp,
                             const fmt_tfr_opts *opts, int cache_fd, fmt_tfr_index *ix,
                             chute_error *err);
/* The same, reading the compressed file (of `size` bytes) through a
 * source's read_at on handle h (src/io), so remote files inflate too. */
int fmt_tfr_index_compressed_src(const struct ch_source_ops *src, void *h, uint64_t size,
                                 const char *name, fmt_tfr_compression comp,
                                 const fmt_tfr_opts *opts, int cache_fd, fmt_tfr_index *ix,
                                 chute_error *err);

/* Check a record's data CRC: `data` holds the record's `length` data bytes
 * followed by its 4-byte CRC (i.e. the bytes at rec.offset + 12).
 * `offset` (the record's) and `name` are for the message. */
int fmt_tfr_check_data(const uint8_t *data, uint64_t length, const char *name, uint64_t offset,
                       chute_error *err);

/* Check a record's 12-byte header against the length an external index
 * (a DALI .idx file) says it has: the length CRC, then the length. */
int fmt_tfr_check_header(const uint8_t hdr[12], uint64_t expect_length, const char *name,
                         uint64_t offset, chute_error *err);

/*
 * DALI's index files (tools/tfrecord2idx): ASCII text, one record per
 * line, "<offset> <size>\n", where size counts the whole framed record
 * (16 + data length).  Parsing checks every pair against file_size, that
 * records do not overlap and come in file order, and that size >= 16.
 */
int fmt_tfr_index_parse_dali(const char *text, size_t len, const char *name, uint64_t file_size,
                             fmt_tfr_index *ix, chute_error *err);
/* Write ix in that layout into a malloc'd NUL-terminated string (free()). */
int fmt_tfr_index_format_dali(const fmt_tfr_index *ix, char **out_text, size_t *out_len,
                              chute_error *err);
void fmt_tfr_index_free(fmt_tfr_index *ix);

/* ---- tf.train.Example (protobuf) -------------------------------------- */

typedef enum fmt_pb_kind {
    FMT_PB_MISSING = 0,     /* key not in the Example */
    FMT_PB_NONE = 1,        /* key present, Feature has no list set */
    FMT_PB_BYTES = 2,
    FMT_PB_FLOAT = 3,
    FMT_PB_INT64 = 4
} fmt_pb_kind;

/* One found feature: a view of its *List message inside the Example. */
typedef struct fmt_pb_feature {
    fmt_pb_kind kind;
    uint64_t count;         /* number of values (bytes: of strings) */
    const uint8_t *list;    /* the BytesList/FloatList/Int64List body */
    size_t list_len;
    uint64_t list_offset;   /* its offset in the Example (for messages) */
} fmt_pb_feature;

/*
 * Find `nkeys` keys in a serialized Example and describe each in out[i]
 * (FMT_PB_MISSING when absent).  The whole Example is walked and checked
 * (wire types, varints, lengths); the wanted features' lists are fully
 * validated and counted so that the decode calls below cannot fail on the
 * data.  Protobuf's merge rules hold where they are cheap: a repeated map
 * key takes its last value, a later oneof member replaces an earlier one;
 * one list split over two messages (legal protobuf, never written by
 * TensorFlow) is CHUTE_EUNSUPPORTED.  `base` is added to offsets in
 * messages (the record's file offset).  Allocates nothing.
 */
int fmt_pb_example_find(const uint8_t *buf, size_t len, const char *const *keys, size_t nkeys,
                        fmt_pb_feature *out, const char *name, uint64_t base,
                        chute_error *err);

/* Iterate the strings of a FMT_PB_BYTES feature: *pos starts at 0; each
 * call gives the next view and returns 1, then 0 at the end. */
int fmt_pb_bytes_next(const fmt_pb_feature *f, size_t *pos, const uint8_t **out_p,
                      size_t *out_n);
/* Decode up to cap values into dst (returns how many were written; the
 * feature's count says how many there are).  Packed and unpacked
 * encodings, mixed, in order.  Kind must match (else 0). */
size_t fmt_pb_int64_decode(const fmt_pb_feature *f, int64_t *dst, size_t cap);
size_t fmt_pb_float_decode(const fmt_pb_feature *f, float *dst, size_t cap);

/* Decode the features f[] (fmt_pb_example_find's, one per field, in field
 * order) into req[]'s buffers (fields.h), checking each against its field:
 * an int64/float32 list of the field's length, one bytes value within
 * req->cap, a .npy of the field's dtype and shape.  Anything else is
 * CHUTE_ECORRUPT (CHUTE_ELIMIT: over cap) starting with `where`; a .npy
 * message names `name`@`offset`.  Shared by the TFRecord format and
 * TFRecord records on streams (src/pipeline/stream_tfr.c). */
struct ch_field;
struct ch_field_req;
int fmt_tfr_fields_decode(const struct ch_field *fields, const fmt_pb_feature *f,
                          const struct ch_field_req *req, size_t nreq, const char *where,
                          const char *name, uint64_t offset, chute_error *err);

/* ---- tar (WebDataset shards) ------------------------------------------ */

typedef struct fmt_tar_member {
    uint64_t header_offset; /* of its first header block (pax/GNU included) */
    uint64_t data_offset;
    uint64_t size;
    uint32_t name_off;      /* into fmt_tar_index.names, NUL-terminated */
    uint32_t name_len;
    char type;              /* '0' regular ('\0' and '7' are reported as '0') */
} fmt_tar_member;

typedef enum fmt_tar_end {
    FMT_TAR_END_TWO_ZERO = 0,   /* two zero blocks: the POSIX end */
    FMT_TAR_END_ONE_ZERO = 1,   /* one zero block then EOF or anything:
                                   accepted (GNU tar warns, Python's tarfile
                                   is silent); what follows is not read */
    FMT_TAR_END_EOF = 2         /* EOF right at a header boundary with no
                                   zero block: accepted, as Python does */
} fmt_tar_end;

typedef struct fmt_tar_index {
    fmt_tar_member *m;          /* regular files only, in archive order */
    uint64_t count, cap;
    char *names;
    size_t names_len, names_cap;
    uint64_t skipped;           /* directories, links, devices, fifos */
    fmt_tar_end end;
    uint64_t end_offset;        /* where the end marker (or EOF) was found */
} fmt_tar_index;

typedef struct fmt_tar_opts {
    uint64_t max_member;        /* bigger member: CHUTE_ELIMIT (0 = 64 GiB) */
    uint64_t max_members;       /* (0 = 2^31) */
    uint32_t max_name;          /* longest name, pax or GNU (0 = 64 KiB) */
    uint32_t max_pax;           /* largest pax header data (0 = 1 MiB) */
} fmt_tar_opts;

/*
 * Walk a tar archive: POSIX ustar (with the 155-byte prefix), pax 'x'/'X'
 * and 'g' headers (path and size honoured, global ones for every later
 * member as Python's tarfile does), GNU 'L'/'K' long names/links; numbers
 * octal or base-256; the header checksum accepted as the unsigned or the
 * signed byte sum (as tar and Python do).  GNU sparse ('S') members and pax
 * GNU.sparse keys are CHUTE_EUNSUPPORTED.  The first header failing its
 * checksum is CHUTE_EFORMAT (not a tar), a later one CHUTE_ECORRUPT; a
 * member whose data runs past EOF is CHUTE_ECORRUPT.  On error the index
 * holds the members before the bad header.
 */
int fmt_tar_index_build(fmt_reader *r, const fmt_tar_opts *opts, fmt_tar_index *ix,
                        chute_error *err);
static inline const char *fmt_tar_name(const fmt_tar_index *ix, uint64_t i)
{
    return ix->names + ix->m[i].name_off;
}
void fmt_tar_index_free(fmt_tar_index *ix);

/* ---- WebDataset samples ------------------------------------------------ */
/*
 * WebDataset (1.0.2, tariterators.py) groups consecutive tar members into
 * samples by base_plus_ext: the regex ^((?:.*\/|)[^.]+)[.]([^/]*)$, i.e.
 * key = the whole path up to the first dot of the basename (directory
 * included), field = the rest of the basename, lowercased.  A name the
 * regex does not match (no dot in the basename, ".hidden" at top level)
 * is skipped, as are metadata names (__x__ at top level, or a first path
 * component of the form __x__).  A new sample starts whenever the key
 * differs from the previous member's.
 */
typedef struct fmt_wds_field {
    uint64_t member;            /* index into the tar index */
    uint32_t ext_off, ext_len;  /* the field name: a suffix of the member's
                                   name, compare case-insensitively (ASCII) */
} fmt_wds_field;

enum { FMT_WDS_SPLIT = 1u << 0 };  /* its key also names another sample */

typedef struct fmt_wds_sample {
    uint64_t first_field, nfields;  /* into fmt_wds_index.fields */
    uint32_t key_off, key_len;      /* a prefix of its first member's name */
    uint32_t flags;
} fmt_wds_sample;

typedef enum fmt_wds_policy {
    FMT_WDS_STRICT = 0,     /* a duplicate field or a split key fails with
                               CHUTE_ECORRUPT (webdataset raises ValueError
                               on duplicates; it accepts split keys silently,
                               but they make "sample = key" ambiguous) */
    FMT_WDS_LENIENT = 1     /* a duplicate field's later member is dropped
                               and counted; split samples are kept, flagged
                               FMT_WDS_SPLIT and counted */
} fmt_wds_policy;

typedef struct fmt_wds_index {
    fmt_wds_sample *samples;
    uint64_t count, cap;
    fmt_wds_field *fields;
    uint64_t nfields, fields_cap;
    uint64_t skipped_names;     /* members whose name gives no key, or meta */
    uint64_t duplicates;        /* LENIENT: fields dropped as duplicates */
    uint64_t split;             /* samples flagged FMT_WDS_SPLIT */
} fmt_wds_index;

/* base_plus_ext on one name: 1 and the key/extension lengths (key =
 * name[0, *key_len), ext = name[*ext_off, len)), or 0 if it has none. */
int fmt_wds_split_name(const char *name, size_t len, size_t *key_len, size_t *ext_off);
/* webdataset's metadata rule (skip_meta and the __key__ check). */
int fmt_wds_is_meta(const char *name, size_t len);

int fmt_wds_group(const fmt_tar_index *tar, fmt_wds_policy policy, const char *name,
                  fmt_wds_index *out, chute_error *err);
void fmt_wds_index_free(fmt_wds_index *w);

/* ---- tar read front to back from a stream (tarstream.c) --------------- */
/*
 * The same header rules as fmt_tar_index_build (tar.c: ustar prefix, GNU
 * 'L', pax 'x'/'g' path and size, checksum either way, sparse refused),
 * but for input that can only be read once, in order, with no size known
 * up front: a pipe, stdin, a socket.  The caller reads each member's data
 * (or skips it) before asking for the next header.  Offsets in messages
 * are stream byte offsets.
 */
typedef struct fmt_tar_stream {
    /* Read up to n bytes into buf; *got < n only at the end of the input. */
    int (*read)(void *ctx, uint8_t *buf, size_t n, size_t *got, chute_error *err);
    void *ctx;
    const char *name;           /* for messages; borrowed */
    uint64_t pos;               /* bytes consumed so far */
    uint64_t max_member;        /* 0 = 64 GiB */
    uint32_t max_name, max_pax; /* 0 = 64 KiB, 1 MiB */
    int ignore_zeros;           /* zero blocks do not end the input, only EOF
                                   does: concatenated archives (`cat a.tar
                                   b.tar`, curl's URL globs), as tar -i */
    int ended;
    uint64_t data_left, pad_left; /* of the member whose header was returned */
    char *nbuf;                 /* the current member's name (owned) */
    size_t nbuf_cap;
    uint8_t *ext;               /* extended-header data (owned) */
    size_t ext_cap;
} fmt_tar_stream;

#define FMT_TAR_STREAM_END 1
/* The next regular member's header: its name (valid until the next call),
 * data size and header offset.  FMT_TAR_STREAM_END at a zero block or at
 * EOF on a header boundary.  Any data of the previous member not yet read
 * is skipped first.  Errors as fmt_tar_index_build's (the very first
 * header bad: CHUTE_EFORMAT). */
int fmt_tar_stream_next(fmt_tar_stream *s, const char **name, size_t *name_len, uint64_t *size,
                        uint64_t *hdr_off, chute_error *err);
/* Read the next n bytes of the current member's data into dst (NULL:
 * discard them); after the last, its padding is consumed too. */
int fmt_tar_stream_data(fmt_tar_stream *s, void *dst, uint64_t n, chute_error *err);
void fmt_tar_stream_free(fmt_tar_stream *s);
/* tar.c's header pieces, shared with the streaming walker. */
int fmt_tar_hdr_number(const uint8_t *f, size_t n, uint64_t *out);
int fmt_tar_hdr_checksum_ok(const uint8_t *h, uint64_t stored);
int fmt_tar_pax_parse(const uint8_t *d, size_t n, int global, uint64_t *size, int *have_size,
                      const uint8_t **path, size_t *path_len, const char *rname, uint64_t off,
                      chute_error *err);

#endif
