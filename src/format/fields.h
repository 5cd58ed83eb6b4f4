/*
 * fields.h — typed records: the named fields a sample carries besides its
 * image and label, and the strict `.npy` header parser behind tensor
 * fields.
 *
 * Why it is shaped so:
 *   - A field's shape is fixed for the whole dataset (learned at open from
 *     the first sample that has the field, or declared), so the loader can
 *     lay every field out once in its ring of batch buffers: one aligned
 *     array per field, nothing allocated per batch or per sample.  A later
 *     sample whose value is well formed but of another shape or dtype (a
 *     list of boxes that varies in length) is not damage: it is data this
 *     layout cannot hold, so reading it is CHUTE_EINVAL naming the field,
 *     the sample, both shapes and where the first came from
 *     (ch_field_varies), which fails the epoch under either on_corrupt
 *     policy.  Skipping it would deliver other samples in its place, and
 *     for a field that varies that is most of the dataset.  A value that
 *     does not parse, or is missing, is corrupt content as before.
 *   - Bytes fields (JSON, text, anything else) are variable: the loader
 *     gives each sample a fixed capacity (field_bytes) and a length; a
 *     longer value is CHUTE_ELIMIT naming the sample, never a reallocation.
 *   - The format reads a sample's fields into caller buffers through
 *     ch_format_ops.read_fields (optional, ops version 3), from any number
 *     of threads; the only scratch is the caller's growable buffer.
 * Nothing here touches the filesystem or keeps state between calls.
 */
#ifndef CHUTE_FORMAT_FIELDS_H
#define CHUTE_FORMAT_FIELDS_H

#include "../common/common.h"

#include <stddef.h>
#include <stdint.h>

#define CH_FIELD_MAX_DIMS 8       /* == the public CHUTE_FIELD_MAX_DIMS */
#define CH_FIELD_MAX 64           /* fields per dataset */
#define CH_FIELD_NAME_MAX 64      /* bytes, NUL included */
#define CH_NPY_MAX_HEADER 65536u  /* a longer .npy header is refused */

/* A field of a dataset (public kinds: chute_field_kind). */
typedef struct ch_field {
    char name[CH_FIELD_NAME_MAX];
    int kind;                     /* CHUTE_FIELD_* */
    int dtype;                    /* chute_dtype */
    uint32_t ndim;
    int64_t shape[CH_FIELD_MAX_DIMS];
    int known;                    /* shape learned (bytes fields: always) */
    char origin[256];             /* where the shape came from, for messages:
                                     "learned from FILE@OFFSET: sample
                                     \"KEY\"", "as declared in
                                     extra_keys"; "" if not recorded */
} ch_field;

/* Bytes of one element of a chute_dtype (0 if unknown). */
size_t ch_dtype_size(int dtype);
/* Bytes of one sample's value of a fixed-shape field; 0 on overflow or a
 * bytes field. */
uint64_t ch_field_sample_bytes(const ch_field *f);
/* "float32[3,4]" into buf, for messages. */
void ch_field_describe(const ch_field *f, char *buf, size_t n);

/* ---- .npy (NumPy's format, versions 1.0, 2.0 and 3.0) ---------------- */
typedef struct ch_npy_info {
    int dtype;                    /* chute_dtype */
    uint32_t ndim;
    int64_t shape[CH_FIELD_MAX_DIMS];
    uint64_t data_offset;         /* first byte of the array data */
    uint64_t data_bytes;          /* prod(shape) * itemsize, == len - data_offset */
} ch_npy_info;

/*
 * Parse the header of a whole .npy file in p[len].  Strict: the magic, a
 * known version, the header length inside the input and below
 * CH_NPY_MAX_HEADER, a dict literal with exactly the keys 'descr',
 * 'fortran_order' and 'shape' (any order, trailing comma allowed), a
 * little-endian or byte-order-free descr of a supported type, fortran_order
 * False, at most CH_FIELD_MAX_DIMS non-negative dimensions, only spaces and
 * the final newline as padding, and exactly prod(shape) * itemsize bytes
 * after the header (checked multiplication).  Anything else is
 * CHUTE_ECORRUPT "NAME@OFFSET: npy: reason" (big-endian or object arrays:
 * CHUTE_EUNSUPPORTED).  `name` and `base` (the member's offset in its
 * file) are for the message.  Allocates nothing.
 */
int ch_npy_parse(const uint8_t *p, size_t len, const char *name, uint64_t base,
                 ch_npy_info *out, chute_error *err);

/* ch_npy_parse for a value too large to hold: p[len] holds at least the
 * preamble and the whole header (read CH_NPY_MAX_HEADER + 12 bytes, or the
 * file when smaller), `total` is the whole value's size (the file's), and
 * the same checks apply, the data size against total. */
int ch_npy_parse_head(const uint8_t *p, size_t len, uint64_t total, const char *name,
                      uint64_t base, ch_npy_info *out, chute_error *err);

/* ---- .npz (numpy.savez: a zip archive of .npy members; npz.c) --------- */
typedef struct ch_npz_member {
    const char *name;             /* into the archive, name_len bytes, no NUL */
    size_t name_len;
    uint64_t offset, size;        /* the member's .npy bytes in the archive */
} ch_npz_member;
/* The members of a whole .npz in p[len], at most `max` of them (more:
 * CHUTE_ELIMIT), from its central directory; every offset checked against
 * len.  Deflated (savez_compressed), encrypted and zip64-directory
 * archives are CHUTE_EUNSUPPORTED, damage CHUTE_ECORRUPT, each
 * "NAME: npz: reason".  Allocates nothing; names point into p. */
int ch_npz_members(const uint8_t *p, size_t len, const char *name, ch_npz_member *out,
                   size_t max, size_t *out_n, chute_error *err);

/* Check a parsed .npy against a field's dtype and shape: when they
 * differ, ch_field_varies with "a .npy of int64[2]". */
int ch_npy_check(const ch_npy_info *a, const ch_field *f, const char *where, chute_error *err);

/* A well-formed value of field f whose shape or dtype is not the field's
 * (`got` says what it is: "a .npy of float32[3,4]", "a float_list of 3
 * values"): CHUTE_EINVAL "WHERE: field \"NAME\": this sample's value is
 * GOT, but the field is DESC (ORIGIN)", and what to do instead.  Not
 * content damage: the loader fails the epoch with it whatever on_corrupt
 * says (see the essay above).  Returns CHUTE_EINVAL. */
int ch_field_varies(const ch_field *f, const char *where, const char *got, chute_error *err);

/* Learn a field's dtype and shape from a parsed .npy (the first sample);
 * `origin` (may be NULL) names that sample, for ch_field_varies. */
void ch_field_from_npy(ch_field *f, const ch_npy_info *a, const char *origin);

/* One field a caller wants read for a sample: where to put it. */
typedef struct ch_field_req {
    uint32_t field;               /* index into ds->fields */
    void *dst;                    /* fixed fields: sample_bytes bytes;
                                     bytes fields: cap bytes */
    size_t cap;                   /* bytes fields: the capacity */
    int64_t *len;                 /* bytes fields: receives the length */
} ch_field_req;

/* Parse a comma-separated list of names ("a,b , c") into out[k] (k <
 * max), calling each name's callback; empty items are skipped.  Returns
 * the count, or -1 if a name is longer than CH_FIELD_NAME_MAX - 1 or there
 * are more than max.  Names are copied into names[k]. */
int ch_split_names(const char *list, char names[][CH_FIELD_NAME_MAX], int max);

/* ---- declared fields (streams) -----------------------------------------
 * A stream has no first record to learn shapes from at open, so its
 * fields are declared: a comma-separated list of "NAME:TYPE[DIMS]"
 * (spaces around items allowed):
 *   NAME:int64, NAME:float32          a scalar (an int64_list / float_list
 *                                     of one value)
 *   NAME:int64[N], NAME:float32[N]    a list of exactly N values (N >= 1)
 *   NAME:bytes                        one bytes value (capped by field_bytes)
 *   NAME.npy:DTYPE[D0xD1x...]         a .npy tensor of that dtype and shape
 *                                     (DTYPE: uint8 int8 int16 int32 int64
 *                                     uint16 uint32 uint64 float16 float32
 *                                     float64 bool; "[]" is a 0-d array)
 * Names must be unique, at most CH_FIELD_NAME_MAX - 1 bytes, and a tensor
 * name ends in ".npy" or is "npy" (a WebDataset key.npy member; a .npy
 * name is always a tensor).  Every number is
 * checked (1..2^31-1, product of a tensor within 2^40 bytes).  Fills
 * out[0..*n) with known = 1; CHUTE_EINVAL "extra_keys: item K (\"...\"):
 * reason" otherwise.  Allocates nothing; any thread. */
int ch_field_decl_parse(const char *list, ch_field *out, int max, int *n, chute_error *err);

/* ---- WebDataset members as fields (fmt_wds.c) ---------------------------
 * The wds format's field model, shared with tar streams (stream_tar.c) so
 * a member's value means the same in a file and on a stream: a member
 * other than the image is a field named by its extension, lowercased;
 * "cls" is an int64 scalar (ASCII decimal, the raw value), a name ending
 * in "npy" a .npy tensor, anything else bytes. */
int fmt_wds_field_kind(const char *name, size_t len);
/* Decode one member's whole value p[size] as field f into rq: bytes into
 * rq->dst (over rq->cap: CHUTE_ELIMIT; p may be rq->dst itself), cls as
 * ASCII decimal, a tensor through ch_npy_parse + ch_npy_check (over
 * max_bytes: CHUTE_ELIMIT).  Content errors are CHUTE_ECORRUPT "WHERE:
 * .FIELD ...: reason"; `name` and `base` (the member's data offset) place
 * .npy messages.  The size checks come before p is read, so p may be NULL
 * for a value over them (the call reports it).  Any thread. */
int fmt_wds_field_decode(const ch_field *f, const ch_field_req *rq, const uint8_t *p,
                         uint64_t size, uint64_t max_bytes, const char *where, const char *name,
                         uint64_t base, chute_error *err);

#endif
