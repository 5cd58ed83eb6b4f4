/*
 * arrow_build.h — hand-built Arrow C Data Interface schemas, arrays and a
 * stream over them, for tests/test_arrow.c and tests/fuzz/fuzz_arrow.c.
 *
 * Why by hand: the point is to hand libchute what a buggy or malicious
 * producer could (offsets that go backwards, children shorter than their
 * parent, wrong buffer counts), which no Arrow library will build.  Every
 * node owns its malloc'd buffers and children and frees them in its release
 * callback, as the spec asks; ab_live counts nodes not yet released so a
 * test can check that libchute released everything it was given.
 */
#ifndef CHUTE_TEST_ARROW_BUILD_H
#define CHUTE_TEST_ARROW_BUILD_H

#include "chute_arrow.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static long ab_live; /* schemas + arrays + streams not yet released */

typedef struct ab_priv {
    void *bufs[4];
    struct ArrowSchema *schildren[4];
    struct ArrowArray *achildren[4];
} ab_priv;

static void ab_schema_release(struct ArrowSchema *s)
{
    ab_priv *p = s->private_data;
    for (int64_t k = 0; k < s->n_children && k < 4; k++) {
        if (p->schildren[k]->release)
            p->schildren[k]->release(p->schildren[k]);
        free(p->schildren[k]);
    }
    free(p);
    s->release = NULL;
    ab_live--;
}

/* A schema node (children: up to 4 ArrowSchema*, heap, taken over). */
static struct ArrowSchema ab_schema(const char *format, const char *name, int n, ...)
{
    struct ArrowSchema s;
    memset(&s, 0, sizeof s);
    ab_priv *p = calloc(1, sizeof *p);
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++)
        p->schildren[k] = va_arg(ap, struct ArrowSchema *);
    va_end(ap);
    s.format = format;
    s.name = name;
    s.flags = ARROW_FLAG_NULLABLE;
    s.n_children = n;
    s.children = p->schildren;
    s.release = ab_schema_release;
    s.private_data = p;
    ab_live++;
    return s;
}

static struct ArrowSchema *ab_heap_schema(struct ArrowSchema s)
{
    struct ArrowSchema *h = malloc(sizeof *h);
    *h = s;
    return h;
}

static void ab_array_release(struct ArrowArray *a)
{
    ab_priv *p = a->private_data;
    for (int k = 0; k < 4; k++)
        free(p->bufs[k]);
    for (int64_t k = 0; k < a->n_children && k < 4; k++) {
        if (p->achildren[k] && p->achildren[k]->release)
            p->achildren[k]->release(p->achildren[k]);
        free(p->achildren[k]);
    }
    free(p);
    a->release = NULL;
    ab_live--;
}

/* An array node: nbuf buffers (malloc'd copies of the given bytes, NULL
 * stays NULL; the array of pointers has room for 4 whatever nbuf says),
 * then nchild ArrowArray* children (heap, taken over). */
static struct ArrowArray ab_array(int64_t length, int64_t offset, int64_t null_count, int nbuf,
                                  int nchild, ...)
{
    struct ArrowArray a;
    memset(&a, 0, sizeof a);
    ab_priv *p = calloc(1, sizeof *p);
    va_list ap;
    va_start(ap, nchild);
    for (int k = 0; k < nbuf && k < 4; k++) {
        const void *src = va_arg(ap, const void *);
        size_t len = va_arg(ap, size_t);
        if (src) {
            p->bufs[k] = malloc(len ? len : 1);
            memcpy(p->bufs[k], src, len);
        }
    }
    for (int k = 0; k < nchild && k < 4; k++)
        p->achildren[k] = va_arg(ap, struct ArrowArray *);
    va_end(ap);
    a.length = length;
    a.offset = offset;
    a.null_count = null_count;
    a.n_buffers = nbuf;
    a.n_children = nchild;
    a.buffers = (const void **)p->bufs;
    a.children = p->achildren;
    a.release = ab_array_release;
    a.private_data = p;
    ab_live++;
    return a;
}

static struct ArrowArray *ab_heap_array(struct ArrowArray a)
{
    struct ArrowArray *h = malloc(sizeof *h);
    *h = a;
    return h;
}

/* A stream handing out a schema and up to 8 batches; fail_at >= 0 makes
 * get_next fail at that batch with EIO and a message. */
typedef struct ab_stream {
    struct ArrowSchema schema;
    struct ArrowArray batches[8];
    int n, next, fail_at;
} ab_stream;

static int ab_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out)
{
    ab_stream *s = st->private_data;
    *out = s->schema;
    s->schema.release = NULL; /* moved */
    return 0;
}

static int ab_get_next(struct ArrowArrayStream *st, struct ArrowArray *out)
{
    ab_stream *s = st->private_data;
    if (s->next == s->fail_at)
        return 5; /* EIO */
    if (s->next == s->n) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    *out = s->batches[s->next];
    s->batches[s->next++].release = NULL;
    return 0;
}

static const char *ab_last_error(struct ArrowArrayStream *st)
{
    (void)st;
    return "the producer says: disk on fire";
}

static void ab_stream_release(struct ArrowArrayStream *st)
{
    ab_stream *s = st->private_data;
    if (s->schema.release)
        s->schema.release(&s->schema);
    for (int k = 0; k < s->n; k++)
        if (s->batches[k].release)
            s->batches[k].release(&s->batches[k]);
    free(s);
    st->release = NULL;
    ab_live--;
}

static struct ArrowArrayStream ab_stream_of(struct ArrowSchema schema, int n,
                                            const struct ArrowArray *batches)
{
    ab_stream *s = calloc(1, sizeof *s);
    s->schema = schema;
    for (int k = 0; k < n && k < 8; k++)
        s->batches[k] = batches[k];
    s->n = n;
    s->fail_at = -1;
    struct ArrowArrayStream st = {ab_get_schema, ab_get_next, ab_last_error, ab_stream_release,
                                  s};
    ab_live++;
    return st;
}

#endif
