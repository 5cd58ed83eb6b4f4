/*
 * fmt_arrow.c — the "arrow" format: the record batches of an Arrow C
 * stream (include/chute_arrow.h, the Arrow C Data / C Stream Interface) as
 * a dataset, one sample per row.  chute_dataset_open_arrow (chute.h) is
 * its only way in: there is no path to probe, so it is not in the
 * registry's list, but once open it is a format like any other and the
 * pipeline never knows the difference.
 *
 * Why it is shaped so:
 *   - No copy.  The batches are moved into the dataset (the C Data
 *     Interface's "move" semantics: we take the struct, the producer's
 *     buffers stay where they are) and released when the dataset closes.
 *     A Hugging Face Parquet shard of 2000 JPEGs is read into memory once
 *     by pyarrow and decoded straight out of its buffers.
 *   - Random access.  Row i is found by binary search in the prefix sums of
 *     the batch lengths, so the sampler permutes rows globally like any
 *     indexed format; unit_of is the batch (a Parquet row group when the
 *     Python package streams a file), so shuffle="shards" gives row-group
 *     granularity plus the seeded shuffle buffer.
 *   - Everything checkable is checked once, at open (the trust boundary
 *     in chute.h): the C ABI carries no buffer sizes, so the producer's
 *     lengths, offsets and null counts are all we have, and each is checked
 *     with overflow-safe arithmetic against its parent's and its own —
 *     every offsets entry of a binary column in range and monotone, child
 *     arrays long enough for the rows the parent can name.  After that a
 *     read indexes only where open proved it may, so reads are lock- and
 *     allocation-free and cannot go out of the bounds the producer stated.
 *   - Nulls: a null label fails the open (labels are an index built at
 *     open); a null field or image is CHUTE_ECORRUPT when that sample is
 *     read, so the loader's corrupt policy decides, like a damaged JPEG.
 * Never: call back into the producer after open (the stream is released
 * before chute_dataset_open_arrow returns), trust an offset it did not
 * check, or allocate per sample.
 */
#define _GNU_SOURCE
#include "format.h"
#include "chute_arrow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { AK_INT = 1, AK_UINT, AK_BOOL, AK_FLOAT, AK_FSL, AK_BIN, AK_IMAGE };

/* Bound on any length or offset from the producer, so that sums and
 * products of two of them cannot overflow before they are compared. */
#define AR_MAX ((int64_t)1 << 48)

typedef struct arrow_col {
    char name[CH_FIELD_NAME_MAX];
    uint32_t child;           /* index among the batch struct's children */
    int kind;
    int width;                /* bytes of an element (the leaf's for AK_FSL);
                                 AK_BIN/AK_IMAGE: bytes of an offset */
    int dtype;                /* chute_dtype of the element (the leaf's) */
    uint32_t depth;           /* AK_FSL: list levels */
    int64_t dims[CH_FIELD_MAX_DIMS];
    uint32_t bytes_child;     /* AK_IMAGE: the struct's "bytes" child */
    int field;                /* ds->fields index, or -1 (image, label) */
} arrow_col;

typedef struct arrow_impl {
    struct ArrowSchema schema;
    struct ArrowArray *batches;
    size_t nb, cap;
    uint64_t *first;          /* nb + 1 prefix sums of the batch lengths */
    arrow_col cols[CH_FIELD_MAX + 2];
    uint32_t ncols;
    int img, lab;             /* cols index or -1 */
    int fcol[CH_FIELD_MAX];   /* ds field -> cols index */
} arrow_impl;

/* ---- types -------------------------------------------------------------- */

/* A one-letter primitive format: kind, element width and dtype. */
static int prim(const char *f, int *kind, int *width, int *dtype)
{
    static const struct { char c; int kind, width, dtype; } t[] = {
        {'c', AK_INT, 1, CHUTE_DTYPE_INT8},      {'C', AK_UINT, 1, CHUTE_DTYPE_UINT8},
        {'s', AK_INT, 2, CHUTE_DTYPE_INT16},     {'S', AK_UINT, 2, CHUTE_DTYPE_UINT16},
        {'i', AK_INT, 4, CHUTE_DTYPE_INT32},     {'I', AK_UINT, 4, CHUTE_DTYPE_UINT32},
        {'l', AK_INT, 8, CHUTE_DTYPE_INT64},     {'L', AK_UINT, 8, CHUTE_DTYPE_UINT64},
        {'f', AK_FLOAT, 4, CHUTE_DTYPE_FLOAT32}, {'g', AK_FLOAT, 8, CHUTE_DTYPE_FLOAT64},
        {'b', AK_BOOL, 0, CHUTE_DTYPE_BOOL},
    };
    if (!f || !f[0] || f[1])
        return 0;
    for (size_t k = 0; k < sizeof t / sizeof *t; k++)
        if (t[k].c == f[0]) {
            *kind = t[k].kind;
            *width = t[k].width;
            *dtype = t[k].dtype;
            return 1;
        }
    return 0;
}

/* binary/utf8 (32-bit offsets) or their large forms: the offset width. */
static int bin_width(const char *f)
{
    if (!f || !f[0] || f[1])
        return 0;
    return f[0] == 'z' || f[0] == 'u' ? 4 : f[0] == 'Z' || f[0] == 'U' ? 8 : 0;
}

/* "+w:N": N, or 0 when f is not a fixed-size list. */
static int64_t fsl_size(const char *f)
{
    if (!f || strncmp(f, "+w:", 3) != 0)
        return 0;
    int64_t n = 0;
    const char *p = f + 3;
    if (!*p)
        return 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || n > AR_MAX)
            return 0;
        n = n * 10 + (*p - '0');
    }
    return n > 0 && n <= AR_MAX ? n : 0;
}

static int schema_ok(const struct ArrowSchema *s)
{
    return s && s->release && s->format && (s->n_children == 0 || s->children) &&
           s->n_children >= 0 && s->n_children <= 4096;
}

/* What column schema s is (0: unsupported), filling c. */
static int classify(const struct ArrowSchema *s, arrow_col *c)
{
    if (!schema_ok(s) || s->dictionary)
        return 0;
    if (prim(s->format, &c->kind, &c->width, &c->dtype))
        return c->kind;
    if ((c->width = bin_width(s->format))) {
        c->dtype = CHUTE_DTYPE_UINT8;
        return c->kind = AK_BIN;
    }
    if (strcmp(s->format, "+s") == 0) {
        /* A Hugging Face Image: struct<bytes: binary, path: string>. */
        for (int64_t k = 0; k < s->n_children; k++) {
            const struct ArrowSchema *ch = s->children[k];
            if (schema_ok(ch) && !ch->dictionary && ch->name && strcmp(ch->name, "bytes") == 0 &&
                (c->width = bin_width(ch->format))) {
                c->bytes_child = (uint32_t)k;
                return c->kind = AK_IMAGE;
            }
        }
        return 0;
    }
    c->depth = 0;
    for (const struct ArrowSchema *l = s; l; l = l->children[0]) {
        int64_t n = fsl_size(l->format);
        if (!n) {
            int kind, width, dtype;
            if (c->depth == 0 || l->dictionary || !prim(l->format, &kind, &width, &dtype) ||
                kind == AK_BOOL)
                return 0;
            c->width = width;
            c->dtype = dtype;
            return c->kind = AK_FSL;
        }
        if (c->depth == CH_FIELD_MAX_DIMS || l->dictionary || l->n_children != 1 ||
            !schema_ok(l->children[0]))
            return 0;
        c->dims[c->depth++] = n;
    }
    return 0;
}

/* ---- checks at open --------------------------------------------------------- */

typedef struct chk {
    const char *col;
    size_t batch;
    chute_error *err;
} chk;

static int bad(const chk *k, const char *what)
{
    return ch_err(k->err, CHUTE_ECORRUPT, "arrow: column %s, batch %zu: %s", k->col, k->batch,
                  what);
}

/* The common checks of array a of schema s whose parent may index its
 * logical elements [0, need): sizes, buffer and child counts, validity. */
static int check_common(const struct ArrowArray *a, int64_t need, int64_t nbuf, int64_t nchild,
                        const chk *k)
{
    char m[160];
    if (!a || !a->release)
        return bad(k, "an array is missing or already released");
    if (a->length < 0 || a->offset < 0 || a->length > AR_MAX || a->offset > AR_MAX)
        return bad(k, "a negative or huge length or offset");
    if (a->null_count < -1 || a->null_count > a->length)
        return bad(k, "null_count is not in -1..length");
    if (a->length < need) {
        snprintf(m, sizeof m, "a child array has %lld elements, its parent indexes %lld",
                 (long long)a->length, (long long)need);
        return bad(k, m);
    }
    if (a->n_buffers != nbuf || (nbuf && !a->buffers)) {
        snprintf(m, sizeof m, "%lld buffers where the type has %lld", (long long)a->n_buffers,
                 (long long)nbuf);
        return bad(k, m);
    }
    if (a->n_children != nchild || (nchild && !a->children)) {
        snprintf(m, sizeof m, "%lld children where the type has %lld", (long long)a->n_children,
                 (long long)nchild);
        return bad(k, m);
    }
    for (int64_t c = 0; c < nchild; c++)
        if (!a->children[c])
            return bad(k, "a NULL child");
    if (nbuf && !a->buffers[0] && a->null_count > 0)
        return bad(k, "null_count > 0 and no validity buffer");
    for (int64_t b = 1; b < nbuf; b++)
        if (!a->buffers[b] && a->length > 0)
            return bad(k, "a NULL data buffer");
    return CHUTE_OK;
}

static int64_t off_at(const void *p, int width, int64_t i)
{
    if (width == 4) {
        int32_t v;
        memcpy(&v, (const uint8_t *)p + (size_t)i * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, (const uint8_t *)p + (size_t)i * 8, 8);
    return v;
}

/* Binary offsets: length + 1 entries from `offset`, each >= 0 and >= the
 * one before.  The last bounds what the data buffer must hold. */
static int check_offsets(const struct ArrowArray *a, int width, const chk *k)
{
    if (a->length == 0)
        return CHUTE_OK;
    int64_t prev = off_at(a->buffers[1], width, a->offset);
    if (prev < 0)
        return bad(k, "a negative first offset");
    for (int64_t i = a->offset + 1; i <= a->offset + a->length; i++) {
        int64_t v = off_at(a->buffers[1], width, i);
        if (v < prev) {
            char m[160];
            snprintf(m, sizeof m, "offsets go backwards at element %lld (%lld after %lld)",
                     (long long)(i - a->offset), (long long)v, (long long)prev);
            return bad(k, m);
        }
        prev = v;
    }
    if (prev > AR_MAX)
        return bad(k, "an offset past 2^48");
    return CHUTE_OK;
}

/* Column c's array a (a child of the batch, which indexes [0, need)). */
static int check_col(const arrow_col *c, const struct ArrowArray *a, int64_t need, const chk *k)
{
    int rc;
    switch (c->kind) {
    case AK_INT: case AK_UINT: case AK_BOOL: case AK_FLOAT:
        return check_common(a, need, 2, 0, k);
    case AK_BIN:
        rc = check_common(a, need, 3, 0, k);
        return rc ? rc : check_offsets(a, c->width, k);
    case AK_IMAGE: {
        rc = check_common(a, need, 1, a ? a->n_children : 0, k);
        if (rc)
            return rc;
        if (a->n_children <= (int64_t)c->bytes_child)
            return bad(k, "the image struct lacks its bytes child");
        const struct ArrowArray *b = a->children[c->bytes_child];
        rc = check_common(b, a->offset + a->length, 3, 0, k);
        return rc ? rc : check_offsets(b, c->width, k);
    }
    case AK_FSL: {
        const struct ArrowArray *l = a;
        for (uint32_t d = 0; d <= c->depth; d++) {
            rc = check_common(l, need, d < c->depth ? 1 : 2, d < c->depth ? 1 : 0, k);
            if (rc)
                return rc;
            if (d == c->depth)
                break;
            /* (offset + length) * n: both factors are below 2^48 and
             * 2^48 respectively, so check before multiplying. */
            int64_t end = l->offset + l->length;
            if (end && c->dims[d] > AR_MAX / end)
                return bad(k, "a fixed-size list's child would need more than 2^48 elements");
            need = end * c->dims[d];
            l = l->children[0];
        }
        return CHUTE_OK;
    }
    }
    return bad(k, "an unsupported type");
}

/* ---- reads ---------------------------------------------------------------- */

static int bit(const void *bm, int64_t i)
{
    return (((const uint8_t *)bm)[i >> 3] >> (i & 7)) & 1;
}

static int is_valid(const struct ArrowArray *a, int64_t phys)
{
    return a->null_count == 0 || !a->buffers[0] || bit(a->buffers[0], phys);
}

/* Batch and row of sample i. */
static size_t locate_row(const arrow_impl *t, uint64_t i, int64_t *row)
{
    size_t lo = 0, hi = t->nb; /* first[lo] <= i < first[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->first[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    *row = (int64_t)(i - t->first[lo]);
    return lo;
}

/* Column c of sample i: its array and the physical index of the row in
 * it, or CHUTE_ECORRUPT when the row or the value is null. */
static int col_at(const arrow_impl *t, const arrow_col *c, uint64_t i,
                  const struct ArrowArray **out, int64_t *phys, chute_error *err)
{
    int64_t row;
    size_t b = locate_row(t, i, &row);
    const struct ArrowArray *top = &t->batches[b];
    int64_t p = top->offset + row;
    const struct ArrowArray *a = top->children[c->child];
    if (!is_valid(top, p) || !is_valid(a, a->offset + p))
        return ch_err(err, CHUTE_ECORRUPT, "arrow batch %zu row %lld: column %s is null", b,
                      (long long)row, c->name);
    *out = a;
    *phys = a->offset + p;
    return CHUTE_OK;
}

/* Binary value at physical index p of a (offsets checked at open). */
static void bin_at(const struct ArrowArray *a, int width, int64_t p, const uint8_t **data,
                   size_t *len)
{
    int64_t o0 = off_at(a->buffers[1], width, p), o1 = off_at(a->buffers[1], width, p + 1);
    *data = (const uint8_t *)a->buffers[2] + o0;
    *len = (size_t)(o1 - o0);
}

static int image_bytes(const chute_dataset *ds, uint64_t i, const uint8_t **data, size_t *len,
                       chute_error *err)
{
    const arrow_impl *t = ds->impl;
    if (t->img < 0)
        return ch_err(err, CHUTE_EUNSUPPORTED, "arrow: the dataset has no image column");
    const arrow_col *c = &t->cols[t->img];
    const struct ArrowArray *a;
    int64_t p;
    int rc = col_at(t, c, i, &a, &p, err);
    if (rc)
        return rc;
    if (c->kind == AK_IMAGE) {
        const struct ArrowArray *b = a->children[c->bytes_child];
        p += b->offset;
        a = b;
        if (!is_valid(a, p))
            return ch_err(err, CHUTE_ECORRUPT, "arrow sample %llu: column %s has null bytes",
                          (unsigned long long)i, c->name);
    }
    bin_at(a, c->width, p, data, len);
    return CHUTE_OK;
}

static int arrow_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap,
                      size_t *out_len, chute_error *err)
{
    const uint8_t *d = NULL;
    size_t n = 0;
    int rc = image_bytes(ds, i, &d, &n, err);
    if (rc)
        return rc;
    *out_len = n;
    if (n > cap)
        return CH_ESMALL;
    if (n)
        memcpy(buf, d, n);
    return CHUTE_OK;
}

static int scalar(const arrow_col *c, const struct ArrowArray *a, int64_t p, void *dst,
                  uint64_t i, chute_error *err)
{
    const uint8_t *v = a->buffers[1];
    if (c->kind == AK_FLOAT) {
        float f;
        if (c->width == 4) {
            memcpy(&f, v + (size_t)p * 4, 4);
        } else {
            double d;
            memcpy(&d, v + (size_t)p * 8, 8);
            f = (float)d;
        }
        memcpy(dst, &f, 4);
        return CHUTE_OK;
    }
    int64_t x = 0;
    if (c->kind == AK_BOOL) {
        x = bit(v, p);
    } else if (c->kind == AK_INT) {
        switch (c->width) {
        case 1: { int8_t y; memcpy(&y, v + p, 1); x = y; break; }
        case 2: { int16_t y; memcpy(&y, v + (size_t)p * 2, 2); x = y; break; }
        case 4: { int32_t y; memcpy(&y, v + (size_t)p * 4, 4); x = y; break; }
        default: memcpy(&x, v + (size_t)p * 8, 8);
        }
    } else {
        uint64_t u = 0;
        switch (c->width) {
        case 1: { uint8_t y; memcpy(&y, v + p, 1); u = y; break; }
        case 2: { uint16_t y; memcpy(&y, v + (size_t)p * 2, 2); u = y; break; }
        case 4: { uint32_t y; memcpy(&y, v + (size_t)p * 4, 4); u = y; break; }
        default: memcpy(&u, v + (size_t)p * 8, 8);
        }
        if (u > (uint64_t)INT64_MAX)
            return ch_err(err, CHUTE_ECORRUPT, "arrow sample %llu: column %s: %llu does not fit "
                          "an int64", (unsigned long long)i, c->name, (unsigned long long)u);
        x = (int64_t)u;
    }
    memcpy(dst, &x, 8);
    return CHUTE_OK;
}

/* A fixed-size list row: walk down the levels to the leaf's contiguous
 * elements, checking each level's validity over the range. */
static int tensor(const arrow_col *c, const struct ArrowArray *a, int64_t p, void *dst,
                  uint64_t i, chute_error *err)
{
    int64_t start = p, count = 1;
    for (uint32_t d = 0; d <= c->depth; d++) {
        if (a->null_count != 0 && a->buffers[0])
            for (int64_t e = start; e < start + count; e++)
                if (!bit(a->buffers[0], e))
                    return ch_err(err, CHUTE_ECORRUPT, "arrow sample %llu: column %s holds a "
                                  "null", (unsigned long long)i, c->name);
        if (d == c->depth)
            break;
        /* the child's logical index is the parent's physical index * n */
        a = a->children[0];
        start = start * c->dims[d] + a->offset;
        count *= c->dims[d];
    }
    memcpy(dst, (const uint8_t *)a->buffers[1] + (size_t)start * c->width,
           (size_t)count * c->width);
    return CHUTE_OK;
}

static int arrow_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                             size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    (void)scratch, (void)max_bytes;
    const arrow_impl *t = ds->impl;
    for (size_t k = 0; k < nreq; k++) {
        if (req[k].field >= ds->nfields)
            return ch_err(err, CHUTE_EINVAL, "arrow: no field %u", req[k].field);
        const arrow_col *c = &t->cols[t->fcol[req[k].field]];
        const struct ArrowArray *a;
        int64_t p;
        int rc = col_at(t, c, i, &a, &p, err);
        if (rc == CHUTE_OK && c->kind == AK_FSL)
            rc = tensor(c, a, p, req[k].dst, i, err);
        else if (rc == CHUTE_OK && c->kind == AK_BIN) {
            const uint8_t *d;
            size_t n;
            bin_at(a, c->width, p, &d, &n);
            if (n > req[k].cap)
                return ch_err(err, CHUTE_ELIMIT, "arrow sample %llu: column %s holds %zu bytes, "
                              "more than field_bytes %zu", (unsigned long long)i, c->name, n,
                              req[k].cap);
            if (n)
                memcpy(req[k].dst, d, n);
            *req[k].len = (int64_t)n;
        } else if (rc == CHUTE_OK) {
            rc = scalar(c, a, p, req[k].dst, i, err);
        }
        if (rc)
            return rc;
    }
    return CHUTE_OK;
}

static uint64_t arrow_sample_size(const chute_dataset *ds, uint64_t i)
{
    const uint8_t *d = NULL;
    size_t n = 0;
    chute_error e;
    return image_bytes(ds, i, &d, &n, &e) == CHUTE_OK ? n : 0;
}

static void arrow_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    int64_t row;
    size_t b = locate_row(ds->impl, i, &row);
    snprintf(buf, n, "arrow batch %zu row %lld (sample %llu)", b, (long long)row,
             (unsigned long long)i);
}

static void arrow_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    (void)ds, (void)i;
    snprintf(buf, n, "arrow");
}

static uint64_t arrow_unit_of(const chute_dataset *ds, uint64_t i)
{
    int64_t row;
    return locate_row(ds->impl, i, &row);
}

static void arrow_close(void *impl)
{
    arrow_impl *t = impl;
    if (!t)
        return;
    for (size_t b = 0; b < t->nb; b++)
        if (t->batches[b].release)
            t->batches[b].release(&t->batches[b]);
    if (t->schema.release)
        t->schema.release(&t->schema);
    free(t->batches);
    free(t->first);
    free(t);
}

static int arrow_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                       size_t n)
{
    (void)src, (void)path, (void)is_dir;
    snprintf(why, n, "only through chute_dataset_open_arrow");
    return CH_PROBE_NO;
}

static int arrow_open_path(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                           chute_error *err)
{
    (void)ds, (void)opt;
    return ch_err(err, CHUTE_EINVAL, "%s: the arrow format opens an Arrow C stream "
                  "(chute_dataset_open_arrow), not a path", path);
}

const ch_format_ops ch_format_arrow = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "arrow",
    .probe = arrow_probe,
    .open = arrow_open_path,
    .read = arrow_read,
    .sample_size = arrow_sample_size,
    .describe = arrow_describe,
    .file_of = arrow_file_of,
    .close = arrow_close,
    .unit_of = arrow_unit_of,
    .read_fields = arrow_read_fields,
};

/* ---- open ------------------------------------------------------------------- */

static int stream_error(struct ArrowArrayStream *s, int code, const char *what, chute_error *err)
{
    const char *m = s->get_last_error ? s->get_last_error(s) : NULL;
    return ch_err(err, CHUTE_EIO, "arrow stream: %s failed (errno %d)%s%s", what, code,
                  m ? ": " : "", m ? m : "");
}

/* Take every batch of the stream into t. */
static int take_batches(arrow_impl *t, struct ArrowArrayStream *s, chute_error *err)
{
    for (;;) {
        if (t->nb == t->cap) {
            size_t nc = t->cap ? t->cap * 2 : 16;
            struct ArrowArray *v = realloc(t->batches, nc * sizeof *v);
            if (!v)
                return ch_err(err, CHUTE_ENOMEM, "out of memory for %zu Arrow batches", nc);
            t->batches = v;
            t->cap = nc;
        }
        struct ArrowArray *a = &t->batches[t->nb];
        memset(a, 0, sizeof *a);
        int rc = s->get_next(s, a);
        if (rc != 0)
            return stream_error(s, rc, "get_next", err);
        if (!a->release)
            return CHUTE_OK; /* end of stream */
        t->nb++;
    }
}

/* Pick image and label columns and make the fields. */
static int columns(chute_dataset *ds, arrow_impl *t, const chute_dataset_options *opt,
                   chute_error *err)
{
    const struct ArrowSchema *s = &t->schema;
    const char *img = opt->image_key, *lab = opt->label_key;
    int img_found = 0, lab_found = 0;
    t->img = t->lab = -1;
    for (int64_t k = 0; k < s->n_children; k++) {
        const struct ArrowSchema *ch = s->children[k];
        if (!schema_ok(ch) || !ch->name)
            return ch_err(err, CHUTE_ECORRUPT, "arrow: schema child %lld is malformed",
                          (long long)k);
        arrow_col c;
        memset(&c, 0, sizeof c);
        c.child = (uint32_t)k;
        c.field = -1;
        int kind = classify(ch, &c);
        size_t nl = strlen(ch->name);
        snprintf(c.name, sizeof c.name, "%s", ch->name);
        int is_img = img ? strcmp(ch->name, img) == 0
                         : strcmp(ch->name, "image") == 0 && (kind == AK_IMAGE || kind == AK_BIN);
        int is_lab = lab ? strcmp(ch->name, lab) == 0 : strcmp(ch->name, "label") == 0;
        if (is_img) {
            if (kind != AK_IMAGE && kind != AK_BIN)
                return ch_err(err, CHUTE_EUNSUPPORTED, "arrow: image column %s has format "
                              "\"%s\" (want binary or struct<bytes: binary, path: string>)",
                              ch->name, ch->format);
            img_found = 1;
            t->img = (int)t->ncols;
        } else if (is_lab) {
            if (kind != AK_INT && kind != AK_UINT && kind != AK_BOOL) {
                if (lab)
                    return ch_err(err, CHUTE_EUNSUPPORTED, "arrow: label column %s has format "
                                  "\"%s\" (want an integer type)", ch->name, ch->format);
                continue;
            }
            lab_found = 1;
            t->lab = (int)t->ncols;
        } else if (kind == 0 || kind == AK_IMAGE || t->ncols >= CH_FIELD_MAX) {
            continue; /* not deliverable as a field: left out */
        } else {
            int fk = kind == AK_FLOAT ? CHUTE_FIELD_FLOAT32
                     : kind == AK_FSL ? CHUTE_FIELD_TENSOR
                     : kind == AK_BIN ? CHUTE_FIELD_BYTES : CHUTE_FIELD_INT64;
            int dt = kind == AK_FLOAT ? CHUTE_DTYPE_FLOAT32
                     : kind == AK_FSL ? c.dtype
                     : kind == AK_BIN ? CHUTE_DTYPE_UINT8 : CHUTE_DTYPE_INT64;
            c.field = ch_ds_field_add(ds, ch->name, nl, fk, dt, err);
            if (c.field < 0)
                return err->code ? err->code : CHUTE_EINVAL;
            ch_field *f = &ds->fields[c.field];
            if (kind == AK_FSL) {
                f->ndim = c.depth;
                memcpy(f->shape, c.dims, c.depth * sizeof *c.dims);
            } else if (kind != AK_BIN) {
                f->ndim = 0;
            }
            f->known = 1;
            if (kind == AK_FSL && ch_field_sample_bytes(f) == 0)
                return ch_err(err, CHUTE_ELIMIT, "arrow: column %s: a row of %s is too large",
                              ch->name, ch->format);
            t->fcol[c.field] = (int)t->ncols;
        }
        t->cols[t->ncols++] = c;
    }
    if (img && !img_found)
        return ch_err(err, CHUTE_ENOTFOUND, "arrow: no column %s (image_key)", img);
    if (lab && !lab_found)
        return ch_err(err, CHUTE_ENOTFOUND, "arrow: no column %s (label_key)", lab);
    ds->no_image = t->img < 0;
    return CHUTE_OK;
}

/* Check every batch against the schema; prefix sums; labels. */
static int index_batches(chute_dataset *ds, arrow_impl *t, const chute_dataset_options *opt,
                         chute_error *err)
{
    t->first = calloc(t->nb + 1, sizeof *t->first);
    if (!t->first)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (size_t b = 0; b < t->nb; b++) {
        const struct ArrowArray *a = &t->batches[b];
        chk k = {"(the batch)", b, err};
        int rc = check_common(a, 0, 1, t->schema.n_children, &k);
        if (rc)
            return rc;
        for (uint32_t j = 0; j < t->ncols; j++) {
            k.col = t->cols[j].name;
            rc = check_col(&t->cols[j], a->children[t->cols[j].child], a->offset + a->length, &k);
            if (rc)
                return rc;
        }
        t->first[b + 1] = t->first[b] + (uint64_t)a->length; /* each < 2^48: no overflow */
    }
    ds->n = t->first[t->nb];
    if (ds->n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "arrow: the stream has no rows (%zu batches)", t->nb);
    if (ds->n > SIZE_MAX / sizeof *ds->labels)
        return ch_err(err, CHUTE_ELIMIT, "arrow: too many rows");
    ds->labels = calloc(ds->n, sizeof *ds->labels);
    if (!ds->labels)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu labels",
                      (unsigned long long)ds->n);
    int32_t maxl = 0;
    if (t->lab >= 0) {
        const arrow_col *c = &t->cols[t->lab];
        for (uint64_t i = 0; i < ds->n; i++) {
            const struct ArrowArray *a;
            int64_t p, v;
            int rc = col_at(t, c, i, &a, &p, err);
            if (rc == CHUTE_OK)
                rc = scalar(c, a, p, &v, i, err);
            char where[96];
            snprintf(where, sizeof where, "arrow sample %llu, column %s", (unsigned long long)i,
                     c->name);
            if (rc == CHUTE_OK)
                rc = ch_ds_label(v, opt, where, &ds->labels[i], err);
            if (rc)
                return rc;
            if (ds->labels[i] > maxl)
                maxl = ds->labels[i];
        }
    }
    return ch_ds_synth_classes(ds, (uint32_t)maxl + 1, err);
}

int chute_dataset_open_arrow(struct ArrowArrayStream *stream, const chute_dataset_options *opt,
                             chute_dataset **out_ds, chute_error *err)
{
    if (out_ds)
        *out_ds = NULL;
    if (!stream || !stream->release || !out_ds) {
        int rc = ch_err(err, CHUTE_EINVAL, "chute_dataset_open_arrow: a live stream and out_ds "
                        "are required");
        if (stream && stream->release)
            stream->release(stream);
        return rc;
    }
    chute_dataset_options zero = {0};
    if (!opt)
        opt = &zero;
    int rc = CHUTE_OK;
    chute_dataset *ds = calloc(1, sizeof *ds);
    arrow_impl *t = calloc(1, sizeof *t);
    if (ds)
        ds->impl = t;
    if (ds)
        ds->fmt = &ch_format_arrow;
    if (ds)
        ds->root = strdup("arrow");
    if (!ds || !t || !ds->root) {
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        if (!ds)
            free(t);
        goto out;
    }
    int sr = stream->get_schema(stream, &t->schema);
    if (sr != 0) {
        memset(&t->schema, 0, sizeof t->schema);
        rc = stream_error(stream, sr, "get_schema", err);
        goto out;
    }
    if (!schema_ok(&t->schema) || strcmp(t->schema.format, "+s") != 0) {
        rc = ch_err(err, CHUTE_EUNSUPPORTED, "arrow: the stream's schema is \"%s\", not a "
                    "struct of columns (\"+s\")", t->schema.format ? t->schema.format : "(null)");
        goto out;
    }
    rc = take_batches(t, stream, err);
    if (rc == CHUTE_OK)
        rc = columns(ds, t, opt, err);
    if (rc == CHUTE_OK)
        rc = index_batches(ds, t, opt, err);
out:
    stream->release(stream);
    if (rc != CHUTE_OK) {
        if (ds) {
            ch_dataset_free_fields(ds);
            free(ds);
        }
        return rc;
    }
    ds->read_delay_us = opt->read_delay_us;
    *out_ds = ds;
    return CHUTE_OK;
}
