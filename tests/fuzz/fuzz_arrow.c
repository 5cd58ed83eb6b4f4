/*
 * fuzz_arrow.c — fuzz target: chute_dataset_open_arrow and every read of
 * the dataset it opens (src/format/fmt_arrow.c), over Arrow arrays built
 * from a serialized description (the input bytes, read front to back,
 * zeros past the end):
 *
 *   ncols, then per column a type (int8, int32, int64, float32, float64,
 *   bool, binary, large_utf8, fixed_size_list<float32>[k],
 *   fixed_size_list<fixed_size_list<int16>[2]>[k], a Hugging Face image
 *   struct), nbatches, then per batch its length and offset and per node
 *   (every array, children included) a "mode" byte: honest, or one lie
 *   (length short of what the parent indexes, a wrong buffer or child
 *   count, a negative length or offset, null_count without a bitmap),
 *   its offset, null pattern, and for binary nodes each offset's step (a
 *   signed byte: offsets may go backwards or start negative; the last one
 *   may be set low, below earlier ones).  List sizes
 *   are the schema's, so an honest description opens; lies in the child
 *   lengths are what must be refused.  Bytes left after the description
 *   spell opt->schema, the null defaults "NAME[:TYPE]=VALUE,...", one token
 *   a byte from a small table (names, types, values, separators), so that
 *   parser and the default paths of every read are fuzzed too.
 *
 * What is honest and what is not: the C Data Interface carries no buffer
 * sizes, so the harness allocates every buffer exactly as large as the
 * node's stated numbers promise (validity and values for offset + length
 * elements, offset + length + 1 offsets, a data buffer of the LAST offset's
 * bytes) and lies only in those numbers and the offsets' contents.  Any
 * read past a buffer is then libchute trusting something it should have
 * checked, and ASan stops it.  Meaningful because every lie a producer can
 * tell through the ABI is reachable; sizes themselves are not, by design
 * (chute.h, "Trust boundary").
 */
#define _GNU_SOURCE
#include "arrow_build.h"

#include "chute.h"
#include "format/format.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct rd {
    const uint8_t *p;
    size_t n, pos;
} rd;

static uint8_t nx(rd *r) { return r->pos < r->n ? r->p[r->pos++] : 0; }

enum { T_I8, T_I32, T_I64, T_F32, T_F64, T_BOOL, T_BIN, T_LSTR, T_FSL, T_FSL2, T_IMG, T_N };

static void *zalloc(size_t n) { return calloc(1, n ? n : 1); }

/* A node's stated geometry and lies from the mode byte. */
typedef struct geo {
    int64_t len, off, nulls;
    int nbuf_delta, nchild_delta, no_bitmap;
} geo;

static geo read_geo(rd *r, int64_t need)
{
    geo g = {need, 0, 0, 0, 0, 0};
    uint8_t mode = nx(r);
    g.off = nx(r) % 5;
    uint8_t nullb = nx(r);
    g.nulls = nullb == 1 ? -1 : nullb == 2 ? 1 : 0;
    g.len = need + (mode & 3);
    switch (mode >> 4) {
    case 15: g.len = need > 0 ? need - 1 : 0; break;
    case 14: g.nbuf_delta = (mode & 1) ? 1 : -1; break;
    case 13: g.nchild_delta = (mode & 1) ? 1 : -1; break;
    case 12: g.len = -1 - (mode & 3); break;
    case 11: g.off = -1; break;
    case 10: g.no_bitmap = 1; g.nulls = 1; break;
    case 9: g.off = (int64_t)1 << 62; break;
    }
    return g;
}

/* The number of elements of a buffer the node promises: offset + length
 * when both are sane, else 0 (and the node is refused before any read). */
static size_t promised(const geo *g)
{
    if (g->len < 0 || g->off < 0 || g->off > 4096)
        return 0;
    return (size_t)(g->len + g->off);
}

static struct ArrowArray *node(rd *r, int type, int64_t need, int64_t k);

static struct ArrowArray fill(geo g, int nbuf, void **bufs, int nchild,
                              struct ArrowArray **kids)
{
    struct ArrowArray a = ab_array(g.len, g.off, g.nulls, 0, 0);
    ab_priv *p = a.private_data;
    for (int k = 0; k < 4; k++)
        p->bufs[k] = k < nbuf ? bufs[k] : NULL;
    for (int k = 0; k < nchild && k < 4; k++)
        p->achildren[k] = kids[k];
    a.n_buffers = nbuf + g.nbuf_delta;
    if (a.n_buffers < 0)
        a.n_buffers = 0;
    a.n_children = nchild + g.nchild_delta;
    /* the pointer array has room for 4: a stated extra child is NULL */
    if (a.n_children < 0)
        a.n_children = 0;
    if (a.n_children > 4)
        a.n_children = 3;
    /* ab_array_release frees n_children children: keep the ones we made
     * reachable even when fewer are stated. */
    for (int k = (int)a.n_children; k < nchild; k++) {
        kids[k]->release(kids[k]);
        free(kids[k]);
        p->achildren[k] = NULL;
    }
    return a;
}

static void *validity(rd *r, const geo *g)
{
    if (g->no_bitmap || g->nulls == 0)
        return g->nulls == 0 && (nx(r) & 1) ? zalloc((promised(g) + 7) / 8) : NULL;
    size_t n = (promised(g) + 7) / 8;
    uint8_t *v = zalloc(n);
    uint8_t pat = nx(r);
    for (size_t k = 0; k < n; k++)
        v[k] = (uint8_t)(pat | 0x81) ^ (uint8_t)k;
    return v;
}

static struct ArrowArray binary(rd *r, geo g, int width)
{
    size_t n = promised(&g);
    void *bufs[3] = {validity(r, &g), zalloc((n + 1) * (size_t)width), NULL};
    int64_t v = (int8_t)nx(r) < -100 ? -3 : 0, last = 0;
    for (size_t k = 0; k <= n; k++) {
        if (k)
            v += (int8_t)nx(r) < -120 ? -2 : nx(r) % 9;
        if (k == n) { /* the last offset, which sizes the data buffer, may lie low */
            uint8_t lb = nx(r);
            v = lb >= 0xF0 ? lb & 15 : v;
        }
        if (width == 4) {
            int32_t x = (int32_t)v;
            memcpy((uint8_t *)bufs[1] + k * 4, &x, 4);
        } else {
            memcpy((uint8_t *)bufs[1] + k * 8, &v, 8);
        }
        last = v;
    }
    size_t dl = last > 0 ? (size_t)last : 0;
    bufs[2] = zalloc(dl);
    for (size_t k = 0; k < dl; k++)
        ((uint8_t *)bufs[2])[k] = (uint8_t)(k * 37);
    return fill(g, 3, bufs, 0, NULL);
}

static struct ArrowArray *node(rd *r, int type, int64_t need, int64_t k)
{
    geo g = read_geo(r, need);
    size_t n = promised(&g);
    struct ArrowArray a;
    static const int width[] = {1, 4, 8, 4, 8, 0};
    if (type <= T_BOOL) {
        size_t bytes = type == T_BOOL ? (n + 7) / 8 : n * (size_t)width[type];
        void *bufs[2] = {validity(r, &g), zalloc(bytes)};
        /* small non-negative integers (labels in range), any floats */
        int w = type == T_BOOL ? 1 : width[type];
        for (size_t k = 0; k < bytes; k++)
            ((uint8_t *)bufs[1])[k] = k % (size_t)w == 0 ? (uint8_t)(k * 7 % 50) : 0;
        a = fill(g, 2, bufs, 0, NULL);
    } else if (type == T_BIN || type == T_LSTR) {
        a = binary(r, g, type == T_BIN ? 4 : 8);
    } else if (type == T_FSL || type == T_FSL2) {
        void *bufs[1] = {validity(r, &g)};
        struct ArrowArray *kid = node(r, type == T_FSL ? T_F32 : T_FSL + 100, (int64_t)n * k, 0);
        a = fill(g, 1, bufs, 1, &kid);
    } else if (type == T_FSL + 100) { /* the inner list of T_FSL2: <int16>[2] */
        void *bufs[1] = {validity(r, &g)};
        geo lg = read_geo(r, (int64_t)n * 2);
        size_t ln = promised(&lg);
        void *lb[2] = {validity(r, &lg), zalloc(ln * 2)};
        struct ArrowArray *leaf = ab_heap_array(fill(lg, 2, lb, 0, NULL));
        a = fill(g, 1, bufs, 1, &leaf);
    } else { /* T_IMG: struct<bytes: binary, path: utf8> */
        void *bufs[1] = {validity(r, &g)};
        struct ArrowArray *kids[2] = {ab_heap_array(binary(r, read_geo(r, (int64_t)n), 4)),
                                      ab_heap_array(binary(r, read_geo(r, (int64_t)n), 4))};
        a = fill(g, 1, bufs, 2, kids);
    }
    return ab_heap_array(a);
}

static struct ArrowSchema *col_schema(int type, int64_t k, char *name, char *fmtbuf)
{
    static const char *const fmts[] = {"c", "i", "l", "f", "g", "b", "z", "U"};
    if (type < T_FSL)
        return ab_heap_schema(ab_schema(fmts[type], name, 0));
    if (type == T_IMG)
        return ab_heap_schema(ab_schema("+s", name, 2,
                                        ab_heap_schema(ab_schema("z", "bytes", 0)),
                                        ab_heap_schema(ab_schema("u", "path", 0))));
    snprintf(fmtbuf, 16, "+w:%lld", (long long)k);
    struct ArrowSchema *leaf =
        type == T_FSL ? ab_heap_schema(ab_schema("f", "item", 0))
                      : ab_heap_schema(ab_schema("+w:2", "item", 1,
                                                 ab_heap_schema(ab_schema("s", "item", 0))));
    return ab_heap_schema(ab_schema(fmtbuf, name, 1, leaf));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size, 0};
    int ncols = 1 + nx(&r) % 4;
    int types[4];
    int64_t ks[4];
    char names[4][8], fmtbufs[4][16];
    struct ArrowSchema *kids[4];
    for (int c = 0; c < ncols; c++) {
        types[c] = nx(&r) % T_N;
        snprintf(names[c], sizeof names[c], c == 0 ? "label" : c == 1 ? "image" : "f%d", c);
        ks[c] = 1 + nx(&r) % 3;
        kids[c] = col_schema(types[c], ks[c], names[c], fmtbufs[c]);
    }
    struct ArrowSchema s = ab_schema("+s", "", ncols, kids[0], kids[1 % ncols], kids[2 % ncols],
                                     kids[3 % ncols]);
    int nb = 1 + nx(&r) % 3;
    struct ArrowArray batches[3];
    for (int b = 0; b < nb; b++) {
        geo g = read_geo(&r, nx(&r) % 40 + (b == 0)); /* batch 0 never empty */
        struct ArrowArray *cols[4];
        int64_t need = g.len >= 0 && g.off >= 0 && g.off < 4096 ? g.len + g.off : 0;
        for (int c = 0; c < ncols; c++)
            cols[c] = node(&r, types[c], need, ks[c]);
        void *bufs[1] = {validity(&r, &g)};
        batches[b] = fill(g, 1, bufs, ncols, cols);
    }
    static const char *tok[] = {"label", "image", "f2", "f3", "=", ":", ",", " ", "int64",
                                "float32", "bytes", "-1", "2.5", "x", "99999999999999999999",
                                "1e400", "-129", "65535", "\"", "nope"};
    char spec[512] = "";
    size_t sl = 0;
    for (int t = 0; r.pos < r.n && t < 40; t++) {
        const char *w = tok[nx(&r) % (sizeof tok / sizeof *tok)];
        size_t wl = strlen(w);
        if (sl + wl >= sizeof spec)
            break;
        memcpy(spec + sl, w, wl + 1);
        sl += wl;
    }
    chute_dataset_options opt = {0};
    opt.schema = sl ? spec : NULL;
    struct ArrowArrayStream st = ab_stream_of(s, nb, batches);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open_arrow(&st, &opt, &ds, &err) == CHUTE_OK) {
        ch_buf scratch = {0};
        uint8_t out[4096];
        int64_t len;
        for (uint64_t i = 0; i < chute_dataset_size(ds); i++) {
            size_t n;
            (void)chute_dataset_read(ds, i, out, sizeof out, &n, &err);
            (void)chute_dataset_label(ds, i);
            char where[256];
            chute_dataset_describe(ds, i, where, sizeof where);
            for (uint32_t f = 0; f < chute_dataset_num_fields(ds); f++) {
                chute_field_info fi;
                chute_dataset_field_info(ds, f, &fi);
                ch_field_req q = {f, out, fi.kind == CHUTE_FIELD_BYTES ? 16 : 0, &len};
                if (fi.kind != CHUTE_FIELD_BYTES && ch_field_sample_bytes(&ds->fields[f]) >
                                                        sizeof out)
                    continue;
                (void)ds->fmt->read_fields(ds, i, &q, 1, &scratch, 1 << 20, &err);
            }
        }
        ch_buf_free(&scratch);
        chute_dataset_close(ds);
    }
    if (ab_live != 0) /* something given to libchute was never released */
        __builtin_trap();
    return 0;
}
