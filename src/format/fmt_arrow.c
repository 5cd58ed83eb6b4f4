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
 *   - Larger than memory (chute_dataset_open_arrow_units): the producer
 *     names its units (Parquet row groups) and their row counts up front and
 *     loads one on demand; at most max_resident units are held, the least
 *     recently used unpinned one released to make room.  Each loaded batch
 *     gets the same checks as a streamed one before any read touches it.
 *     A read pins its unit with one CAS on the unit's pin count (-1 = not
 *     resident), so the steady state (unit resident) takes no lock; only a
 *     load or an eviction takes the mutex.  Unit = shuffle unit, so
 *     shuffle="shards" plus the seeded shuffle buffer keeps a few units
 *     live at a time; a global shuffle still works but re-loads units.
 * Never: call back into a stream's producer after open (the stream is
 * released before chute_dataset_open_arrow returns), trust an offset it did
 * not check, or allocate per sample.
 */
#define _GNU_SOURCE
#include "format.h"
#include "chute_arrow.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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
    /* Default for null cells (opt->schema "NAME[:TYPE]=VALUE"): int and
     * bool columns (and integer tensors) use def_i, float ones def_f,
     * bytes columns the text def_s. */
    int has_def;
    int64_t def_i;
    double def_f;
    char def_s[64];
    size_t def_n;
} arrow_col;

typedef struct arrow_impl {
    struct ArrowSchema schema;
    struct ArrowArray *batches;
    size_t nb, cap;
    uint64_t *first;          /* nb + 1 prefix sums of the batch lengths */
    arrow_col cols[CH_FIELD_MAX + 2];
    uint32_t ncols;
    int img, lab;             /* cols index or -1 */
    int labels_given;         /* units mode: the producer gives the labels (any column type) */
    int fcol[CH_FIELD_MAX];   /* ds field -> cols index */
    /* Units mode (chute_dataset_open_arrow_units): batches[u] is unit u,
     * present when state[u] == U_RESIDENT.  mu guards state, resident,
     * peak, loads and batches[u] while not pinned; pin[u] is -1 unless
     * resident, else the number of reads using it (CAS, no lock). */
    int lazy;
    chute_arrow_units src;
    _Atomic int64_t *pin;
    _Atomic uint64_t *used;   /* value of tick when last pinned */
    uint8_t *state;
    _Atomic uint64_t tick;
    _Atomic uint32_t waiters;
    uint32_t resident, max_resident, peak;
    uint64_t loads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sync_ok;
    char **unit_names;        /* nb names for messages, or NULL */
} arrow_impl;

enum { U_ABSENT = 0, U_LOADING, U_RESIDENT };

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

static int check_batch(const arrow_impl *t, const struct ArrowArray *a, size_t b,
                       chute_error *err);

/* Units mode: load unit u (the caller set state LOADING and counted it). */
static int unit_load(arrow_impl *t, size_t u, chute_error *err)
{
    struct ArrowArray a;
    memset(&a, 0, sizeof a);
    char msg[256] = "";
    int rc = t->src.load(t->src.ctx, (uint64_t)u, &a, msg, sizeof msg);
    if (rc != 0 || !a.release) {
        if (a.release)
            a.release(&a);
        return ch_err(err, rc == CHUTE_ECORRUPT ? CHUTE_ECORRUPT : CHUTE_EIO,
                      "arrow unit %zu: the producer's load failed%s%s", u, msg[0] ? ": " : "",
                      msg);
    }
    uint64_t want = t->first[u + 1] - t->first[u];
    if (a.length < 0 || (uint64_t)a.length != want) {
        rc = ch_err(err, CHUTE_ECORRUPT, "arrow unit %zu: loaded %lld rows, the producer "
                    "declared %llu", u, (long long)a.length, (unsigned long long)want);
    } else {
        rc = check_batch(t, &a, u, err);
    }
    if (rc) {
        a.release(&a);
        return rc;
    }
    t->batches[u] = a; /* not visible to readers until state and pin say so */
    return CHUTE_OK;
}

/* Evict the least recently used resident unpinned unit (mu held); its
 * array is moved to *out for release outside the lock.  0: none. */
static int unit_evict(arrow_impl *t, struct ArrowArray *out)
{
    size_t best = SIZE_MAX;
    uint64_t bt = UINT64_MAX;
    for (size_t u = 0; u < t->nb; u++) {
        if (t->state[u] != U_RESIDENT || atomic_load(&t->pin[u]) != 0)
            continue;
        uint64_t w = atomic_load_explicit(&t->used[u], memory_order_relaxed);
        if (w < bt) {
            bt = w;
            best = u;
        }
    }
    int64_t zero = 0;
    if (best == SIZE_MAX || !atomic_compare_exchange_strong(&t->pin[best], &zero, -1))
        return 0; /* none, or pinned since the scan: the caller waits and rescans */
    *out = t->batches[best];
    memset(&t->batches[best], 0, sizeof t->batches[best]);
    t->state[best] = U_ABSENT;
    t->resident--;
    return 1;
}

/* Pin unit u (units mode): resident → one CAS; else load it, evicting. */
static int unit_pin(arrow_impl *t, size_t u, chute_error *err)
{
    int64_t p = atomic_load(&t->pin[u]);
    while (p >= 0)
        if (atomic_compare_exchange_weak(&t->pin[u], &p, p + 1)) {
            atomic_store_explicit(&t->used[u], atomic_load_explicit(&t->tick,
                                  memory_order_relaxed), memory_order_relaxed);
            return CHUTE_OK;
        }
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (t->state[u] == U_RESIDENT) {
            atomic_fetch_add(&t->pin[u], 1);
            atomic_store(&t->used[u], atomic_load(&t->tick));
            pthread_mutex_unlock(&t->mu);
            return CHUTE_OK;
        }
        int wait = t->state[u] == U_LOADING;
        if (!wait && t->resident >= t->max_resident) {
            struct ArrowArray old;
            atomic_fetch_add(&t->waiters, 1);
            int got = unit_evict(t, &old);
            if (got) {
                atomic_fetch_sub(&t->waiters, 1);
                pthread_mutex_unlock(&t->mu);
                old.release(&old); /* outside the lock: it may take a producer's lock */
                pthread_mutex_lock(&t->mu);
                continue;
            }
            wait = 1; /* every resident unit is pinned: wait for an unpin */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            atomic_fetch_sub(&t->waiters, 1);
            continue;
        }
        if (wait) {
            pthread_cond_wait(&t->cv, &t->mu);
            continue;
        }
        t->state[u] = U_LOADING;
        t->resident++;
        if (t->resident > t->peak)
            t->peak = t->resident;
        t->loads++;
        pthread_mutex_unlock(&t->mu);
        int rc = unit_load(t, u, err);
        pthread_mutex_lock(&t->mu);
        if (rc) {
            t->state[u] = U_ABSENT;
            t->resident--;
        } else {
            t->state[u] = U_RESIDENT;
            atomic_fetch_add(&t->tick, 1);
            atomic_store(&t->used[u], atomic_load(&t->tick));
            atomic_store(&t->pin[u], 1); /* ours */
        }
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        return rc;
    }
}

static void unit_unpin(arrow_impl *t, size_t u)
{
    if (atomic_fetch_sub(&t->pin[u], 1) == 1 && atomic_load(&t->waiters) > 0) {
        pthread_mutex_lock(&t->mu);
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
    }
}

/* Batch and row of sample i, the batch pinned until row_done. */
static int row_get(const arrow_impl *ct, uint64_t i, size_t *b, int64_t *row, chute_error *err)
{
    *b = locate_row(ct, i, row);
    return ct->lazy ? unit_pin((arrow_impl *)ct, *b, err) : CHUTE_OK;
}

static void row_done(const arrow_impl *ct, size_t b)
{
    if (ct->lazy)
        unit_unpin((arrow_impl *)ct, b);
}

/* Column c of row `row` of batch b: its array and the physical index of
 * the row in it; *null set when the row or the value is null. */
static void col_at(const arrow_impl *t, const arrow_col *c, size_t b, int64_t row,
                   const struct ArrowArray **out, int64_t *phys, int *null)
{
    const struct ArrowArray *top = &t->batches[b];
    int64_t p = top->offset + row;
    const struct ArrowArray *a = top->children[c->child];
    *null = !is_valid(top, p) || !is_valid(a, a->offset + p);
    *out = a;
    *phys = a->offset + p;
}

/* Where batch b is, for messages: the producer's unit name or "batch b". */
static void batch_name(const arrow_impl *t, size_t b, char *buf, size_t n)
{
    if (t->unit_names && t->unit_names[b])
        snprintf(buf, n, "%s", t->unit_names[b]);
    else
        snprintf(buf, n, "%s %zu", t->lazy ? "unit" : "batch", b);
}

static int null_err(const arrow_impl *t, const arrow_col *c, size_t b, int64_t row, uint64_t i,
                    chute_error *err)
{
    char where[200];
    batch_name(t, b, where, sizeof where);
    return ch_err(err, CHUTE_ECORRUPT, "arrow sample %llu (%s row %lld): column %s is null "
                  "and has no default (give one with schema \"%s=VALUE\")",
                  (unsigned long long)i, where, (long long)row, c->name, c->name);
}

/* Binary value at physical index p of a (offsets checked at open). */
static void bin_at(const struct ArrowArray *a, int width, int64_t p, const uint8_t **data,
                   size_t *len)
{
    int64_t o0 = off_at(a->buffers[1], width, p), o1 = off_at(a->buffers[1], width, p + 1);
    *data = (const uint8_t *)a->buffers[2] + o0;
    *len = (size_t)(o1 - o0);
}

/* The image bytes of sample i, its batch pinned: row_done(t, *b) after. */
static int image_bytes(const chute_dataset *ds, uint64_t i, const uint8_t **data, size_t *len,
                       size_t *b, chute_error *err)
{
    const arrow_impl *t = ds->impl;
    if (t->img < 0)
        return ch_err(err, CHUTE_EUNSUPPORTED, "arrow: the dataset has no image column");
    const arrow_col *c = &t->cols[t->img];
    const struct ArrowArray *a;
    int64_t p, row;
    int null;
    int rc = row_get(t, i, b, &row, err);
    if (rc)
        return rc;
    col_at(t, c, *b, row, &a, &p, &null);
    if (null)
        rc = null_err(t, c, *b, row, i, err);
    if (rc == CHUTE_OK && c->kind == AK_IMAGE) {
        const struct ArrowArray *bb = a->children[c->bytes_child];
        p += bb->offset;
        a = bb;
        if (!is_valid(a, p))
            rc = ch_err(err, CHUTE_ECORRUPT, "arrow sample %llu: column %s has null bytes",
                        (unsigned long long)i, c->name);
    }
    if (rc) {
        row_done(t, *b);
        return rc;
    }
    bin_at(a, c->width, p, data, len);
    return CHUTE_OK;
}

static int arrow_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap,
                      size_t *out_len, chute_error *err)
{
    const uint8_t *d = NULL;
    size_t n = 0, b = 0;
    int rc = image_bytes(ds, i, &d, &n, &b, err);
    if (rc)
        return rc;
    *out_len = n;
    if (n > cap)
        rc = CH_ESMALL;
    else if (n)
        memcpy(buf, d, n);
    row_done(ds->impl, b);
    return rc;
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

/* Element e of an AK_FSL column's leaf type at dst: the default. */
static void put_elem(const arrow_col *c, void *dst, int64_t e)
{
    uint8_t *o = (uint8_t *)dst + (size_t)e * (size_t)c->width;
    if (c->dtype == CHUTE_DTYPE_FLOAT32) {
        float f = (float)c->def_f;
        memcpy(o, &f, 4);
    } else if (c->dtype == CHUTE_DTYPE_FLOAT64) {
        memcpy(o, &c->def_f, 8);
    } else {
        /* range-checked against the leaf type when the default was parsed;
         * little-endian hosts only, like the rest of the Arrow reader */
        memcpy(o, &c->def_i, (size_t)c->width);
    }
}

/* A null cell of a column with a default: the default as the field. */
static int put_default(const arrow_col *c, void *dst, size_t cap, int64_t *len, uint64_t i,
                       chute_error *err)
{
    if (c->kind == AK_BIN) {
        if (c->def_n > cap)
            return ch_err(err, CHUTE_ELIMIT, "arrow sample %llu: column %s's default holds %zu "
                          "bytes, more than field_bytes %zu", (unsigned long long)i, c->name,
                          c->def_n, cap);
        if (c->def_n)
            memcpy(dst, c->def_s, c->def_n);
        *len = (int64_t)c->def_n;
    } else if (c->kind == AK_FSL) {
        int64_t n = 1;
        for (uint32_t d = 0; d < c->depth; d++)
            n *= c->dims[d]; /* fits: the field's byte size was checked at open */
        for (int64_t e = 0; e < n; e++)
            put_elem(c, dst, e);
    } else if (c->kind == AK_FLOAT) {
        float f = (float)c->def_f;
        memcpy(dst, &f, 4);
    } else {
        memcpy(dst, &c->def_i, 8);
    }
    return CHUTE_OK;
}

/* A fixed-size list row: walk down the levels to the leaf's contiguous
 * elements, checking each level's validity over the range.  A null in an
 * inner level makes the whole row the default; a null leaf element makes
 * that element the default; without a default either is an error. */
static int tensor(const arrow_impl *t, const arrow_col *c, size_t b, int64_t row,
                  const struct ArrowArray *a, int64_t p, void *dst, uint64_t i,
                  chute_error *err)
{
    int64_t start = p, count = 1;
    for (uint32_t d = 0; d <= c->depth; d++) {
        if (a->null_count != 0 && a->buffers[0] && d < c->depth)
            for (int64_t e = start; e < start + count; e++)
                if (!bit(a->buffers[0], e))
                    return c->has_def ? put_default(c, dst, 0, NULL, i, err)
                                      : null_err(t, c, b, row, i, err);
        if (d == c->depth)
            break;
        /* the child's logical index is the parent's physical index * n */
        a = a->children[0];
        start = start * c->dims[d] + a->offset;
        count *= c->dims[d];
    }
    memcpy(dst, (const uint8_t *)a->buffers[1] + (size_t)start * c->width,
           (size_t)count * c->width);
    if (a->null_count != 0 && a->buffers[0])
        for (int64_t e = start; e < start + count; e++)
            if (!bit(a->buffers[0], e)) {
                if (!c->has_def)
                    return ch_err(err, CHUTE_ECORRUPT, "arrow sample %llu: column %s: element "
                                  "%lld is null and the column has no default (give one with "
                                  "schema \"%s=VALUE\")", (unsigned long long)i, c->name,
                                  (long long)(e - start), c->name);
                put_elem(c, dst, e - start);
            }
    return CHUTE_OK;
}

static int read_fields_row(const arrow_impl *t, size_t b, int64_t row, uint64_t i,
                           const chute_dataset *ds, const ch_field_req *req, size_t nreq,
                           chute_error *err)
{
    for (size_t k = 0; k < nreq; k++) {
        if (req[k].field >= ds->nfields)
            return ch_err(err, CHUTE_EINVAL, "arrow: no field %u", req[k].field);
        const arrow_col *c = &t->cols[t->fcol[req[k].field]];
        const struct ArrowArray *a;
        int64_t p;
        int null, rc = CHUTE_OK;
        col_at(t, c, b, row, &a, &p, &null);
        if (null && !c->has_def)
            rc = null_err(t, c, b, row, i, err);
        else if (null)
            rc = put_default(c, req[k].dst, req[k].cap, req[k].len, i, err);
        else if (c->kind == AK_FSL)
            rc = tensor(t, c, b, row, a, p, req[k].dst, i, err);
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

static int arrow_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                             size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    (void)scratch, (void)max_bytes;
    const arrow_impl *t = ds->impl;
    size_t b;
    int64_t row;
    int rc = row_get(t, i, &b, &row, err);
    if (rc)
        return rc;
    rc = read_fields_row(t, b, row, i, ds, req, nreq, err);
    row_done(t, b);
    return rc;
}

/* With an image column: its encoded bytes.  Without: the bytes the row's
 * fields deliver (scalars 8 or 4, tensors their size, bytes their length;
 * a null cell 0), the "sample size" of inspect's histogram. */
static uint64_t arrow_sample_size(const chute_dataset *ds, uint64_t i)
{
    const arrow_impl *t = ds->impl;
    const uint8_t *d = NULL;
    size_t n = 0, b;
    chute_error e;
    if (t->img >= 0) {
        if (image_bytes(ds, i, &d, &n, &b, &e) != CHUTE_OK)
            return 0;
        row_done(t, b);
        return n;
    }
    int64_t row;
    if (row_get(t, i, &b, &row, &e) != CHUTE_OK)
        return 0;
    uint64_t sum = 0;
    for (uint32_t k = 0; k < ds->nfields; k++) {
        const arrow_col *c = &t->cols[t->fcol[k]];
        const struct ArrowArray *a;
        int64_t p;
        int null;
        col_at(t, c, b, row, &a, &p, &null);
        if (null)
            continue;
        if (c->kind == AK_BIN) {
            bin_at(a, c->width, p, &d, &n);
            sum += n;
        } else {
            sum += ch_field_sample_bytes(&ds->fields[k]);
        }
    }
    row_done(t, b);
    return sum;
}

static void arrow_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    int64_t row;
    size_t b = locate_row(ds->impl, i, &row);
    char where[200];
    batch_name(ds->impl, b, where, sizeof where);
    snprintf(buf, n, "arrow %s row %lld (sample %llu)", where, (long long)row,
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
    if (t->lazy && t->src.release)
        t->src.release(t->src.ctx);
    if (t->sync_ok) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
    }
    if (t->unit_names)
        for (size_t u = 0; u < t->nb; u++)
            free(t->unit_names[u]);
    free(t->unit_names);
    free(t->pin);
    free(t->used);
    free(t->state);
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

/* One default's text for column c: parsed and range-checked. */
static int set_default(arrow_col *c, const char *ty, size_t tl, const char *v, size_t vl,
                       chute_error *err)
{
    int isf = c->kind == AK_FLOAT ||
              (c->kind == AK_FSL && (c->dtype == CHUTE_DTYPE_FLOAT32 ||
                                     c->dtype == CHUTE_DTYPE_FLOAT64));
    const char *want = c->kind == AK_BIN ? "bytes" : isf ? "float32" : "int64";
    if (c->kind == AK_IMAGE || c->kind == 0)
        return ch_err(err, CHUTE_EINVAL, "schema: column %s: an image column has no default",
                      c->name);
    if (tl && (strlen(want) != tl || memcmp(ty, want, tl) != 0))
        return ch_err(err, CHUTE_EINVAL, "schema: column %s is delivered as %s, not %.*s",
                      c->name, want, (int)CH_MIN(tl, 40), ty);
    if (vl >= sizeof c->def_s)
        return ch_err(err, CHUTE_EINVAL, "schema: column %s: default is too long", c->name);
    memcpy(c->def_s, v, vl);
    c->def_s[vl] = '\0';
    c->def_n = vl;
    c->has_def = 1;
    if (c->kind == AK_BIN)
        return CHUTE_OK;
    char *end = NULL;
    errno = 0;
    if (isf) {
        c->def_f = strtod(c->def_s, &end);
        if (vl == 0 || errno || *end)
            return ch_err(err, CHUTE_EINVAL, "schema: column %s: default \"%s\" is not a "
                          "number", c->name, c->def_s);
        return CHUTE_OK;
    }
    long long x = strtoll(c->def_s, &end, 10);
    if (vl == 0 || errno || *end)
        return ch_err(err, CHUTE_EINVAL, "schema: column %s: default \"%s\" is not an "
                      "integer", c->name, c->def_s);
    c->def_i = x;
    if (c->kind == AK_FSL) {
        int sgn = c->dtype == CHUTE_DTYPE_INT8 || c->dtype == CHUTE_DTYPE_INT16 ||
                  c->dtype == CHUTE_DTYPE_INT32 || c->dtype == CHUTE_DTYPE_INT64;
        int bits = c->width * 8;
        int64_t lo = sgn ? (bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1))) : 0;
        int64_t hi = bits == 64 ? INT64_MAX
                     : sgn ? ((int64_t)1 << (bits - 1)) - 1 : ((int64_t)1 << bits) - 1;
        if (x < lo || x > hi)
            return ch_err(err, CHUTE_EINVAL, "schema: column %s: default %lld does not fit its "
                          "elements' type", c->name, x);
    }
    return CHUTE_OK;
}

/* opt->schema for Arrow: "NAME[:TYPE]=DEFAULT, ..." (CSV's shape, the
 * type optional since the column has one): defaults for null cells. */
static int parse_defaults(arrow_impl *t, const struct ArrowSchema *s, const char *spec,
                          chute_error *err)
{
    const char *p = spec;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        if (len) {
            const char *eq = memchr(p, '=', len);
            if (!eq)
                return ch_err(err, CHUTE_EINVAL, "schema: \"%.*s\" is not NAME[:TYPE]=DEFAULT",
                              (int)CH_MIN(len, 80), p);
            const char *colon = memchr(p, ':', (size_t)(eq - p));
            size_t nl = (size_t)((colon ? colon : eq) - p);
            while (nl && p[nl - 1] == ' ')
                nl--;
            const char *ty = colon ? colon + 1 : eq;
            size_t tl = colon ? (size_t)(eq - ty) : 0;
            while (tl && *ty == ' ')
                ty++, tl--;
            while (tl && ty[tl - 1] == ' ')
                tl--;
            const char *v = eq + 1;
            size_t vl = len - (size_t)(v - p);
            arrow_col *c = NULL;
            for (uint32_t k = 0; k < t->ncols; k++)
                if (strlen(t->cols[k].name) == nl && memcmp(t->cols[k].name, p, nl) == 0)
                    c = &t->cols[k];
            if (!c) {
                for (int64_t k = 0; k < s->n_children; k++)
                    if (strlen(s->children[k]->name) == nl &&
                        memcmp(s->children[k]->name, p, nl) == 0)
                        return ch_err(err, CHUTE_EUNSUPPORTED, "schema: column %.*s (format "
                                      "\"%s\") is not delivered, so it takes no default",
                                      (int)nl, p, s->children[k]->format);
                return ch_err(err, CHUTE_ENOTFOUND, "schema: no column %.*s",
                              (int)CH_MIN(nl, 80), p);
            }
            int rc = set_default(c, ty, tl, v, vl, err);
            if (rc)
                return rc;
        }
        p = end ? end + 1 : p + len;
    }
    return CHUTE_OK;
}

/* Pick image and label columns and make the fields. */
static int columns(chute_dataset *ds, arrow_impl *t, const chute_dataset_options *opt,
                   chute_error *err)
{
    const struct ArrowSchema *s = &t->schema;
    const char *img = opt->image_key, *lab = opt->label_key;
    int img_found = 0, lab_found = 0, no_labels = lab && !lab[0];
    t->img = t->lab = -1;
    /* Without label_key the label column is the first of these names that
     * is an integer column (or any column whose labels the units producer
     * gives); none is an error, never labels of 0 without a word, and
     * label_key "" says "no labels". */
    const char *const *names = ch_label_columns; /* format.h */
    if (!lab) {
        for (size_t j = 0; j < CH_LABEL_NAMES_N && !lab; j++)
            for (int64_t k = 0; k < s->n_children && !lab; k++) {
                const struct ArrowSchema *ch = s->children[k];
                arrow_col c;
                memset(&c, 0, sizeof c);
                if (!schema_ok(ch) || !ch->name || strcmp(ch->name, names[j]) != 0)
                    continue;
                int kind = classify(ch, &c);
                if (t->labels_given || kind == AK_INT || kind == AK_UINT || kind == AK_BOOL)
                    lab = names[j];
            }
        if (!lab && !t->labels_given) {
            char have[400] = "";
            for (int64_t k = 0; k < s->n_children; k++) {
                const struct ArrowSchema *ch = s->children[k];
                size_t l = strlen(have);
                const char *nm = ch && ch->name ? ch->name : "?";
                if (l + strlen(nm) + 8 >= sizeof have) {
                    snprintf(have + l, sizeof have - l, ", ...");
                    break;
                }
                snprintf(have + l, sizeof have - l, "%s%s (%s)", k ? ", " : "", nm,
                         ch && ch->format ? ch->format : "?");
            }
            char nm[128];
            return ch_err(err, CHUTE_EFORMAT,
                          "arrow: no label column: an integer column named %s is the label, and "
                          "the columns are %s; name one with label_key, or set label_key to \"\" "
                          "for rows without labels",
                          ch_label_names_text(names, "", " or ", nm, sizeof nm), have);
        }
    }
    if (no_labels)
        lab = NULL;
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
        int is_lab = lab && strcmp(ch->name, lab) == 0;
        if (is_img) {
            if (kind != AK_IMAGE && kind != AK_BIN)
                return ch_err(err, CHUTE_EUNSUPPORTED, "arrow: image column %s has format "
                              "\"%s\" (want binary or struct<bytes: binary, path: string>)",
                              ch->name, ch->format);
            img_found = 1;
            t->img = (int)t->ncols;
        } else if (is_lab) {
            if (kind != AK_INT && kind != AK_UINT && kind != AK_BOOL && !t->labels_given)
                return ch_err(err, CHUTE_EUNSUPPORTED, "arrow: label column %s has format "
                              "\"%s\" (want an integer type)", ch->name, ch->format);
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
    return parse_defaults(t, s, opt->schema, err);
}

/* Batch b (a stream batch or a loaded unit) against the schema. */
static int check_batch(const arrow_impl *t, const struct ArrowArray *a, size_t b,
                       chute_error *err)
{
    chk k = {"(the batch)", b, err};
    int rc = check_common(a, 0, 1, t->schema.n_children, &k);
    if (rc)
        return rc;
    for (uint32_t j = 0; j < t->ncols; j++) {
        if ((int)j == t->lab && t->labels_given)
            continue; /* its values came from the producer (any type); never read here */
        k.col = t->cols[j].name;
        rc = check_col(&t->cols[j], a->children[t->cols[j].child], a->offset + a->length, &k);
        if (rc)
            return rc;
    }
    return CHUTE_OK;
}

/* Labels for ds->n rows: from `given` (units mode) or the label column. */
static int make_labels(chute_dataset *ds, arrow_impl *t, const chute_dataset_options *opt,
                       const int64_t *given, chute_error *err)
{
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
            int64_t p, v, row;
            int rc = CHUTE_OK;
            if (given) {
                v = given[i];
            } else {
                size_t b = locate_row(t, i, &row);
                int null;
                col_at(t, c, b, row, &a, &p, &null);
                if (null && c->has_def)
                    v = c->def_i;
                else if (null)
                    rc = null_err(t, c, b, row, i, err);
                else
                    rc = scalar(c, a, p, &v, i, err);
            }
            char where[160];
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

/* Check every batch against the schema; prefix sums; labels. */
static int index_batches(chute_dataset *ds, arrow_impl *t, const chute_dataset_options *opt,
                         chute_error *err)
{
    t->first = calloc(t->nb + 1, sizeof *t->first);
    if (!t->first)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (size_t b = 0; b < t->nb; b++) {
        const struct ArrowArray *a = &t->batches[b];
        int rc = check_batch(t, a, b, err);
        if (rc)
            return rc;
        t->first[b + 1] = t->first[b] + (uint64_t)a->length; /* each < 2^48: no overflow */
    }
    ds->n = t->first[t->nb];
    return make_labels(ds, t, opt, NULL, err);
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

int chute_dataset_open_arrow_units(chute_arrow_units *src, const chute_dataset_options *opt,
                                   chute_dataset **out_ds, chute_error *err)
{
    if (out_ds)
        *out_ds = NULL;
    if (!src || !out_ds || !src->schema || !src->schema->release || !src->load ||
        (src->n_units && !src->rows)) {
        int rc = ch_err(err, CHUTE_EINVAL, "chute_dataset_open_arrow_units: a schema, rows, a "
                        "load callback and out_ds are required");
        if (src && src->schema && src->schema->release)
            src->schema->release(src->schema);
        if (src && src->release)
            src->release(src->ctx);
        return rc;
    }
    chute_dataset_options zero = {0};
    if (!opt)
        opt = &zero;
    int rc = CHUTE_OK;
    chute_dataset *ds = calloc(1, sizeof *ds);
    arrow_impl *t = calloc(1, sizeof *t);
    if (t) {
        t->schema = *src->schema; /* moved */
        src->schema->release = NULL;
        t->src = *src;
        t->lazy = 1;
    } else {
        src->schema->release(src->schema);
        if (src->release)
            src->release(src->ctx);
    }
    if (ds) {
        ds->impl = t;
        ds->fmt = &ch_format_arrow;
        ds->root = strdup("arrow");
    }
    if (!ds || !t || !ds->root) {
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        if (!ds)
            arrow_close(t);
        goto out;
    }
    if (src->n_units > SIZE_MAX / sizeof(struct ArrowArray) - 1) {
        rc = ch_err(err, CHUTE_ELIMIT, "arrow: %llu units", (unsigned long long)src->n_units);
        goto out;
    }
    t->nb = (size_t)src->n_units;
    t->batches = calloc(t->nb + 1, sizeof *t->batches);
    t->first = calloc(t->nb + 1, sizeof *t->first);
    t->pin = calloc(t->nb + 1, sizeof *t->pin);
    t->used = calloc(t->nb + 1, sizeof *t->used);
    t->state = calloc(t->nb + 1, 1);
    if (!t->batches || !t->first || !t->pin || !t->used || !t->state) {
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %zu units", t->nb);
        goto out;
    }
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        rc = ch_err(err, CHUTE_ENOMEM, "arrow: pthread_mutex_init failed");
        goto out;
    }
    if (pthread_cond_init(&t->cv, NULL) != 0) {
        pthread_mutex_destroy(&t->mu);
        rc = ch_err(err, CHUTE_ENOMEM, "arrow: pthread_cond_init failed");
        goto out;
    }
    t->sync_ok = 1;
    if (src->unit_names) {
        t->unit_names = calloc(t->nb + 1, sizeof *t->unit_names);
        for (size_t u = 0; t->unit_names && u < t->nb; u++)
            if (src->unit_names[u] && !(t->unit_names[u] = strdup(src->unit_names[u])))
                break;
        for (size_t u = 0; t->unit_names && u < t->nb; u++)
            if (src->unit_names[u] && !t->unit_names[u]) {
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory for unit names");
                goto out;
            }
        if (!t->unit_names) {
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory for unit names");
            goto out;
        }
    }
    for (size_t u = 0; u < t->nb; u++) {
        atomic_init(&t->pin[u], -1);
        if (src->rows[u] == 0 || src->rows[u] > (uint64_t)AR_MAX) {
            rc = ch_err(err, CHUTE_EINVAL, "arrow: unit %zu has %llu rows (want 1..2^48)", u,
                        (unsigned long long)src->rows[u]);
            goto out;
        }
        if (t->first[u] > UINT64_MAX - src->rows[u]) {
            rc = ch_err(err, CHUTE_ELIMIT, "arrow: too many rows");
            goto out;
        }
        t->first[u + 1] = t->first[u] + src->rows[u];
    }
    t->max_resident = src->max_resident ? src->max_resident : 2;
    ds->n = t->first[t->nb];
    if (!schema_ok(&t->schema) || strcmp(t->schema.format, "+s") != 0) {
        rc = ch_err(err, CHUTE_EUNSUPPORTED, "arrow: the schema is \"%s\", not a struct of "
                    "columns (\"+s\")", t->schema.format ? t->schema.format : "(null)");
        goto out;
    }
    t->labels_given = src->labels != NULL;
    rc = columns(ds, t, opt, err);
    if (rc == CHUTE_OK && t->lab >= 0 && !src->labels)
        rc = ch_err(err, CHUTE_EINVAL, "arrow: column %s is the label column: the units "
                    "producer must give its labels", t->cols[t->lab].name);
    if (rc == CHUTE_OK)
        rc = make_labels(ds, t, opt, src->labels, err);
out:
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

int chute_dataset_arrow_units_stats(const chute_dataset *ds, uint64_t *out_loads,
                                    uint32_t *out_peak_resident, uint32_t *out_resident)
{
    if (!ds || ds->fmt != &ch_format_arrow || !ds->impl || !((arrow_impl *)ds->impl)->lazy)
        return CHUTE_EINVAL;
    arrow_impl *t = ds->impl;
    pthread_mutex_lock(&t->mu);
    if (out_loads)
        *out_loads = t->loads;
    if (out_peak_resident)
        *out_peak_resident = t->peak;
    if (out_resident)
        *out_resident = t->resident;
    pthread_mutex_unlock(&t->mu);
    return CHUTE_OK;
}
