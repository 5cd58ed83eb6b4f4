/*
 * test_infer.c — the inference session (chute_infer_*) as a caller sees
 * it: its tensors equal the training loader's EVAL/NONE samples bit for
 * bit (the loader is checked against torchvision by eval_matches_torchvision),
 * every admitted id comes back exactly once, ordered mode keeps submission
 * order, a corrupt request fails alone, the batching deadline is kept, a
 * full queue and a closed session refuse clearly, four threads may
 * submit at once (run this file under the TSan build too), and
 * worker_slice_us gives the workers, and only them, that scheduler slice
 * without touching their nice value, and without it they run with the
 * kernel's default, not their creator's (as the kernel reports each
 * thread).
 *
 * Uses the fixture photo tree (--data DIR); skips without it.
 */
#include "unit.h"

#include "chute.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

static char g_tree[4096];

static int have_data(void)
{
    if (!g_data)
        return 0;
    snprintf(g_tree, sizeof g_tree, "%s/tree", g_data);
    char ready[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    return access(ready, F_OK) == 0;
}

#define NEED_DATA()                                                                       \
    do {                                                                                  \
        if (!have_data())                                                                 \
            SKIP("fixture data missing (run the data_setup test)");                       \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The encoded bytes of every sample of the tree (malloc'd). */
typedef struct samples {
    uint64_t n;
    uint8_t **data;
    size_t *len;
    char **path;
} samples;

static void samples_free(samples *s)
{
    for (uint64_t i = 0; i < s->n; i++) {
        free(s->data[i]);
        free(s->path[i]);
    }
    free(s->data);
    free(s->len);
    free(s->path);
}

static int samples_load(chute_dataset *ds, samples *s)
{
    s->n = chute_dataset_size(ds);
    s->data = calloc(s->n, sizeof *s->data);
    s->len = calloc(s->n, sizeof *s->len);
    s->path = calloc(s->n, sizeof *s->path);
    for (uint64_t i = 0; i < s->n; i++) {
        uint64_t sz = chute_dataset_sample_size(ds, i);
        s->data[i] = malloc(sz ? sz : 1);
        chute_error err = {0};
        if (chute_dataset_read(ds, i, s->data[i], sz, &s->len[i], &err) != CHUTE_OK) {
            fprintf(stderr, "read %llu: %s\n", (unsigned long long)i, err.message);
            return 1;
        }
        char buf[4096];
        s->path[i] = strdup(chute_dataset_describe(ds, i, buf, sizeof buf));
    }
    return 0;
}

/* The loader's sample for every index (dataset order), one buffer. */
static uint8_t *loader_samples(chute_dataset *ds, chute_transform t, chute_dtype dt,
                               size_t *sample_bytes)
{
    chute_loader_options o = {0};
    o.batch_size = 16;
    o.size = 40;
    o.transform = t;
    o.dtype = dt;
    o.no_shuffle = 1;
    o.workers = 2;
    chute_loader *ld = NULL;
    chute_error err = {0};
    if (chute_loader_create(ds, &o, &ld, &err) != CHUTE_OK) {
        fprintf(stderr, "loader: %s\n", err.message);
        return NULL;
    }
    uint64_t n = chute_dataset_size(ds);
    uint8_t *all = NULL;
    chute_batch *b;
    while (chute_loader_next(ld, &b) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        size_t sb = v.nbytes / v.count;
        if (!all)
            all = calloc(n, sb);
        *sample_bytes = sb;
        for (uint32_t k = 0; k < v.count; k++)
            memcpy(all + v.indices[k] * sb, (uint8_t *)v.data + k * sb, sb);
        chute_batch_release(b);
    }
    chute_loader_destroy(ld);
    return all;
}

/* Poll until `want` requests came back (or 30 s); calls fn per request. */
typedef int (*req_fn)(void *ctx, const chute_infer_view *v, uint32_t k, const char *msg);
static int drain(chute_infer *s, uint64_t want, req_fn fn, void *ctx)
{
    uint64_t got = 0, t0 = now_ns();
    while (got < want) {
        chute_infer_batch *b = NULL;
        int rc = chute_infer_poll(s, 100000, &b);
        if (rc == CHUTE_EINTERRUPTED) {
            if (now_ns() - t0 > 30000000000ull) {
                fprintf(stderr, "drain: %llu of %llu after 30 s\n", (unsigned long long)got,
                        (unsigned long long)want);
                return 1;
            }
            continue;
        }
        if (rc != CHUTE_OK) {
            fprintf(stderr, "poll: %s\n", chute_status_name(rc));
            return 1;
        }
        chute_infer_view v;
        chute_infer_batch_view(b, &v);
        for (uint32_t k = 0; k < v.count; k++)
            if (fn(ctx, &v, k, chute_infer_batch_errmsg(b, k))) {
                chute_infer_batch_release(b);
                return 1;
            }
        got += v.count;
        chute_infer_batch_release(b);
    }
    return 0;
}

typedef struct cmp_ctx {
    const uint8_t *expect;
    size_t sb;
    uint64_t n, seen, mismatches;
    uint8_t *hits;
} cmp_ctx;

static int cmp_fn(void *c, const chute_infer_view *v, uint32_t k, const char *msg)
{
    cmp_ctx *x = c;
    uint64_t id = v->ids[k];
    if (id >= x->n || v->status[k] != CHUTE_OK) {
        fprintf(stderr, "id %llu status %d: %s\n", (unsigned long long)id, v->status[k], msg);
        return 1;
    }
    x->hits[id]++;
    x->seen++;
    if (v->nbytes / v->count != x->sb ||
        memcmp((const uint8_t *)v->data + (size_t)k * x->sb, x->expect + id * x->sb, x->sb))
        x->mismatches++;
    return 0;
}

static int check_equals_loader(chute_transform t, chute_dtype dt, int by_path)
{
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    size_t sb = 0;
    uint8_t *expect = loader_samples(ds, t, dt, &sb);
    CHECK(expect, "loader failed");
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 40;
    o.transform = t;
    o.dtype = dt;
    o.max_batch = 5;
    o.max_delay_us = 2000;
    o.workers = 3;
    o.unordered = 1;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    cmp_ctx c = {expect, sb, smp.n, 0, 0, calloc(smp.n, 1)};
    for (uint64_t i = 0; i < smp.n; i++) {
        int rc;
        do {
            rc = by_path ? chute_infer_submit_path(s, smp.path[i], i, &err)
                         : chute_infer_submit(s, smp.data[i], smp.len[i], i, CHUTE_INFER_COPY, &err);
            if (rc == CHUTE_EBUSY) { /* drain a little, then retry */
                chute_infer_batch *b;
                if (chute_infer_poll(s, 1000, &b) == CHUTE_OK) {
                    chute_infer_view v;
                    chute_infer_batch_view(b, &v);
                    for (uint32_t k = 0; k < v.count; k++)
                        CHECK(cmp_fn(&c, &v, k, chute_infer_batch_errmsg(b, k)) == 0, "bad");
                    chute_infer_batch_release(b);
                }
            }
        } while (rc == CHUTE_EBUSY);
        CHECK(rc == CHUTE_OK, "submit %llu: %s", (unsigned long long)i, err.message);
    }
    CHECK(drain(s, smp.n - c.seen, cmp_fn, &c) == 0, "drain");
    for (uint64_t i = 0; i < smp.n; i++)
        CHECK(c.hits[i] == 1, "id %llu came back %u times", (unsigned long long)i, c.hits[i]);
    CHECK(c.mismatches == 0, "%llu of %llu samples differ from the loader's",
          (unsigned long long)c.mismatches, (unsigned long long)smp.n);
    chute_infer_stats st;
    chute_infer_get_stats(s, &st);
    CHECK(st.completed == smp.n && st.failed == 0, "stats: %llu completed, %llu failed",
          (unsigned long long)st.completed, (unsigned long long)st.failed);
    CHECK(st.decode.count == smp.n && st.total.count == smp.n && st.total.p50_ns > 0 &&
              st.total.p99_ns >= st.total.p50_ns,
          "latency histograms: %llu decodes, %llu totals", (unsigned long long)st.decode.count,
          (unsigned long long)st.total.count);
    chute_infer_destroy(s);
    free(c.hits);
    free(expect);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

TEST(equals_loader_eval_float32)
{
    NEED_DATA();
    return check_equals_loader(CHUTE_TRANSFORM_EVAL, CHUTE_DTYPE_FLOAT32, 0);
}

TEST(equals_loader_none_uint8_by_path)
{
    NEED_DATA();
    return check_equals_loader(CHUTE_TRANSFORM_NONE, CHUTE_DTYPE_UINT8, 1);
}

/* ------------------------------------------------------------------ */

typedef struct order_ctx {
    uint64_t next;            /* ordered: the id expected next */
    int ordered;
    uint64_t base, n;
    uint8_t *hits;
} order_ctx;

static int order_fn(void *c, const chute_infer_view *v, uint32_t k, const char *msg)
{
    order_ctx *x = c;
    uint64_t id = v->ids[k];
    if (id < x->base || id >= x->base + x->n) {
        fprintf(stderr, "unknown id %llu\n", (unsigned long long)id);
        return 1;
    }
    x->hits[id - x->base]++;
    if (x->ordered && id != x->next) {
        fprintf(stderr, "ordered: got id %llu, expected %llu\n", (unsigned long long)id,
                (unsigned long long)x->next);
        return 1;
    }
    x->next = id + 1;
    return 0;
}

static int check_ids(int ordered)
{
    NEED_DATA();
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 24;
    o.max_batch = 4;
    o.max_delay_us = 500;
    o.workers = 4;
    o.unordered = !ordered;
    o.queue_capacity = 400;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    const uint64_t N = 300, base = 1000;
    order_ctx c = {base, ordered, base, N, calloc(N, 1)};
    /* Borrowed bytes: they outlive the session. */
    for (uint64_t i = 0; i < N; i++) {
        uint64_t k = (i * 7) % smp.n;
        CHECK(chute_infer_submit(s, smp.data[k], smp.len[k], base + i, 0, &err) == CHUTE_OK,
              "submit %llu: %s", (unsigned long long)i, err.message);
    }
    CHECK(drain(s, N, order_fn, &c) == 0, "drain");
    for (uint64_t i = 0; i < N; i++)
        CHECK(c.hits[i] == 1, "id %llu came back %u times", (unsigned long long)(base + i),
              c.hits[i]);
    chute_infer_batch *b;
    CHECK(chute_infer_poll(s, 0, &b) == CHUTE_EINTERRUPTED, "nothing more to hand out");
    chute_infer_close(s);
    CHECK(chute_infer_poll(s, 0, &b) == CHUTE_END, "closed and drained: END");
    chute_infer_destroy(s);
    free(c.hits);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

TEST(ids_exactly_once_ordered)
{
    return check_ids(1);
}

TEST(ids_exactly_once_unordered)
{
    return check_ids(0);
}

/* ------------------------------------------------------------------ */

TEST(corrupt_request_fails_alone)
{
    NEED_DATA();
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 32;
    o.max_batch = 4;
    o.max_delay_us = 1000000; /* only a full batch goes out */
    o.workers = 2;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    /* A JPEG cut in half's header survives; its scan does not. */
    uint8_t garbage[64];
    memset(garbage, 0x5a, sizeof garbage);
    CHECK(chute_infer_submit(s, smp.data[0], smp.len[0], 10, 0, &err) == CHUTE_OK, "%s",
          err.message);
    CHECK(chute_infer_submit(s, garbage, sizeof garbage, 11, CHUTE_INFER_COPY, &err) ==
              CHUTE_OK, "%s", err.message);
    CHECK(chute_infer_submit_path(s, "/nonexistent/x.jpg", 12, &err) == CHUTE_OK, "%s",
          err.message);
    CHECK(chute_infer_submit(s, smp.data[1], smp.len[1], 13, 0, &err) == CHUTE_OK, "%s",
          err.message);
    chute_infer_batch *b = NULL;
    CHECK(chute_infer_poll(s, 20000000, &b) == CHUTE_OK, "a full batch comes out");
    chute_infer_view v;
    chute_infer_batch_view(b, &v);
    CHECK(v.count == 4 && v.failed == 2, "count %u failed %u", v.count, v.failed);
    CHECK(v.ids[0] == 10 && v.ids[1] == 11 && v.ids[2] == 12 && v.ids[3] == 13, "ids in order");
    CHECK(v.status[0] == CHUTE_OK && v.status[3] == CHUTE_OK, "good requests succeed");
    CHECK(v.status[1] == CHUTE_EFORMAT || v.status[1] == CHUTE_ECORRUPT, "garbage: %s",
          chute_status_name(v.status[1]));
    CHECK(strlen(chute_infer_batch_errmsg(b, 1)) > 0, "garbage has a message");
    CHECK(v.status[2] == CHUTE_ENOTFOUND, "missing path: %s", chute_status_name(v.status[2]));
    CHECK(strstr(chute_infer_batch_errmsg(b, 2), "/nonexistent/x.jpg"),
          "message names the path: %s", chute_infer_batch_errmsg(b, 2));
    CHECK(chute_infer_batch_errmsg(b, 0)[0] == '\0', "no message for a good request");
    /* The good ones are real pixels, the failed ones zeros. */
    size_t sb = v.nbytes / v.count;
    const float *f0 = v.data, *f1 = (const float *)((const uint8_t *)v.data + sb);
    int nonzero = 0, zeros = 1;
    for (size_t i = 0; i < sb / 4; i++) {
        nonzero |= f0[i] != 0;
        zeros &= f1[i] == 0;
    }
    CHECK(nonzero && zeros, "good sample has pixels, failed one is zeroed");
    chute_infer_batch_release(b);
    chute_infer_stats st;
    chute_infer_get_stats(s, &st);
    CHECK(st.failed == 2 && st.completed == 4, "stats failed %llu", (unsigned long long)st.failed);
    chute_infer_destroy(s);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

TEST(max_delay_is_honoured)
{
    NEED_DATA();
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 32;
    o.max_batch = 64;
    o.max_delay_us = 30000;
    o.workers = 1;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    for (int round = 0; round < 3; round++) {
        uint64_t t0 = now_ns();
        CHECK(chute_infer_submit(s, smp.data[round], smp.len[round], 7, 0, &err) == CHUTE_OK,
              "%s", err.message);
        chute_infer_batch *b = NULL;
        CHECK(chute_infer_poll(s, -1, &b) == CHUTE_OK, "one request comes back");
        uint64_t dt = now_ns() - t0;
        chute_infer_view v;
        chute_infer_batch_view(b, &v);
        CHECK(v.count == 1 && v.ids[0] == 7 && v.status[0] == CHUTE_OK, "the request");
        chute_infer_batch_release(b);
        /* Not before the deadline (the batch is not full); and within
         * the deadline plus a generous bound for one decode. */
        CHECK(dt >= 30000000ull, "handed out after %.1f ms, before the 30 ms deadline",
              dt / 1e6);
        CHECK(dt < 30000000ull + 2000000000ull, "handed out after %.1f ms", dt / 1e6);
    }
    chute_infer_stats st;
    chute_infer_get_stats(s, &st);
    CHECK(st.closed_by_deadline == 3 && st.batches == 3, "deadline closes: %llu",
          (unsigned long long)st.closed_by_deadline);
    CHECK(st.total.p50_ns >= 28000000ull, "total latency p50 %llu ns includes the wait",
          (unsigned long long)st.total.p50_ns);
    chute_infer_destroy(s);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

TEST(full_queue_and_closed_session_refuse)
{
    NEED_DATA();
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 16;
    o.max_batch = 2;
    o.queue_capacity = 4;
    o.workers = 1;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    for (uint64_t i = 0; i < 4; i++)
        CHECK(chute_infer_submit(s, smp.data[i], smp.len[i], i, 0, &err) == CHUTE_OK, "%s",
              err.message);
    err.message[0] = '\0';
    CHECK(chute_infer_submit(s, smp.data[0], smp.len[0], 99, 0, &err) == CHUTE_EBUSY,
          "the fifth request is refused");
    CHECK(strstr(err.message, "queue_capacity"), "message: %s", err.message);
    /* Handing out does not free capacity; releasing does. */
    chute_infer_batch *b = NULL;
    CHECK(chute_infer_poll(s, 20000000, &b) == CHUTE_OK, "first batch");
    CHECK(chute_infer_submit(s, smp.data[0], smp.len[0], 99, 0, &err) == CHUTE_EBUSY,
          "still full while held");
    chute_infer_batch_release(b);
    CHECK(chute_infer_submit(s, smp.data[0], smp.len[0], 4, 0, &err) == CHUTE_OK, "%s",
          err.message);
    chute_infer_close(s);
    err.message[0] = '\0';
    CHECK(chute_infer_submit(s, smp.data[0], smp.len[0], 100, 0, &err) == CHUTE_EINVAL,
          "submit after close");
    CHECK(strstr(err.message, "closed"), "message: %s", err.message);
    CHECK(chute_infer_submit_path(s, smp.path[0], 101, &err) == CHUTE_EINVAL, "path too");
    /* What was admitted still comes out, then END. */
    uint64_t got = 0;
    int rc;
    while ((rc = chute_infer_poll(s, 20000000, &b)) == CHUTE_OK) {
        chute_infer_view v;
        chute_infer_batch_view(b, &v);
        got += v.count;
        chute_infer_batch_release(b);
    }
    CHECK(rc == CHUTE_END && got == 3, "rc %s, %llu more after close", chute_status_name(rc),
          (unsigned long long)got);
    chute_infer_stats st;
    chute_infer_get_stats(s, &st);
    CHECK(st.rejected_busy == 2 && st.submitted == 5, "rejected %llu submitted %llu",
          (unsigned long long)st.rejected_busy, (unsigned long long)st.submitted);
    chute_infer_destroy(s);
    chute_infer_destroy(NULL);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

/* max_batch 1 with the default queue: the admission queue is sized apart
 * from the batch (64 requests, not 4 x 1), every request is its own
 * batch handed out on its own, and each carries its timestamps in
 * order (submit <= start <= decoded <= done <= the poll that returned
 * it). */
TEST(batch_of_one_default_queue_and_timing)
{
    NEED_DATA();
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 16;
    o.max_batch = 1;
    o.workers = 1;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    uint64_t t_before = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t_before = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    for (uint64_t i = 0; i < 64; i++) {
        uint32_t k = (uint32_t)(i % smp.n);
        CHECK(chute_infer_submit(s, smp.data[k], smp.len[k], i, 0, &err) == CHUTE_OK,
              "request %llu of 64 refused: %s", (unsigned long long)i, err.message);
    }
    err.message[0] = '\0';
    CHECK(chute_infer_submit(s, smp.data[0], smp.len[0], 99, 0, &err) == CHUTE_EBUSY,
          "the 65th request is refused");
    CHECK(strstr(err.message, "queue_capacity 64"), "message: %s", err.message);
    chute_infer_close(s);
    chute_infer_batch *b = NULL;
    uint64_t next = 0;
    int rc;
    while ((rc = chute_infer_poll(s, 20000000, &b)) == CHUTE_OK) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        chute_infer_view v;
        chute_infer_batch_view(b, &v);
        CHECK(v.count == 1 && v.ids[0] == next && v.status[0] == CHUTE_OK,
              "batch %llu: count %u id %llu status %d", (unsigned long long)next, v.count,
              (unsigned long long)v.ids[0], v.status[0]);
        chute_infer_timing tm;
        CHECK(chute_infer_batch_timing(b, 0, &tm) == CHUTE_OK, "timing");
        CHECK(t_before <= tm.submit_ns && tm.submit_ns <= tm.start_ns &&
                  tm.start_ns <= tm.decoded_ns && tm.decoded_ns <= tm.done_ns &&
                  tm.start_ns < tm.done_ns && tm.done_ns <= now,
              "request %llu: submit %llu start %llu decoded %llu done %llu now %llu",
              (unsigned long long)next, (unsigned long long)(tm.submit_ns - t_before),
              (unsigned long long)(tm.start_ns - t_before),
              (unsigned long long)(tm.decoded_ns - t_before),
              (unsigned long long)(tm.done_ns - t_before), (unsigned long long)(now - t_before));
        CHECK(chute_infer_batch_timing(b, 1, &tm) == CHUTE_EINVAL, "k past the batch");
        chute_infer_batch_release(b);
        next++;
    }
    CHECK(rc == CHUTE_END && next == 64, "rc %s after %llu", chute_status_name(rc),
          (unsigned long long)next);
    chute_infer_destroy(s);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

typedef struct late_sub {
    chute_infer *s;
    const uint8_t *data;
    size_t len;
    int rc;
    struct timespec at; /* just before the submit */
} late_sub;

static void *late_submitter(void *p)
{
    late_sub *a = p;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL); /* let the poller go to sleep first */
    clock_gettime(CLOCK_MONOTONIC, &a->at);
    a->rc = chute_infer_submit(a->s, a->data, a->len, 7, 0, NULL);
    return NULL;
}

/* The deadline of a batch opened while the poller is already asleep
 * (no batch open when it started waiting): the submit must wake it to
 * learn the deadline.  Before, the poller slept on until the batch was
 * full, so at low rates every request waited for 63 others (here: until
 * the 10 s poll timeout). */
TEST(deadline_reaches_a_waiting_poller)
{
    NEED_DATA();
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 16;
    o.max_batch = 64;
    o.max_delay_us = 30000;
    o.workers = 1;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    for (int round = 0; round < 2; round++) {
        late_sub a = {s, smp.data[0], smp.len[0], -1, {0, 0}};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, late_submitter, &a) == 0, "thread");
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        chute_infer_batch *b = NULL;
        int rc = chute_infer_poll(s, 10 * 1000 * 1000, &b);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_join(th, NULL);
        double el = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
        CHECK(a.rc == CHUTE_OK, "submit: %d", a.rc);
        CHECK(rc == CHUTE_OK, "round %d: poll %s after %.3f s: the 30 ms deadline never reached "
              "the sleeping poller", round, chute_status_name(rc), el);
        chute_infer_view v;
        chute_infer_batch_view(b, &v);
        CHECK(v.count == 1 && v.ids[0] == 7, "count %u", v.count);
        /* Not before the deadline: 30 ms after the submit (timed by the
         * submitter: the poll may start a little after its sleep did). */
        double since = (double)(t1.tv_sec - a.at.tv_sec) + (t1.tv_nsec - a.at.tv_nsec) / 1e9;
        CHECK(since >= 0.03 - 0.002 && el < 5.0, "round %d: handed out %.3f s after the submit "
              "(%.3f s after the poll began)", round, since, el);
        chute_infer_batch_release(b);
    }
    chute_infer_destroy(s);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

TEST(bad_options_refused)
{
    chute_infer *s = NULL;
    chute_error err = {0};
    chute_infer_options o = {0};
    o.max_batch = 100000;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_EINVAL && !s, "max_batch bound");
    CHECK(strstr(err.message, "max_batch"), "%s", err.message);
    o = (chute_infer_options){0};
    o.transform = (chute_transform)7;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_EINVAL, "transform");
    o = (chute_infer_options){0};
    o.size = 100000;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_EINVAL, "size bound: %s", err.message);
    o = (chute_infer_options){0};
    o.workers = 1;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "defaults: %s", err.message);
    CHECK(chute_infer_submit(s, NULL, 5, 1, 0, &err) == CHUTE_EINVAL, "NULL data");
    CHECK(chute_infer_submit(s, "x", 1, 1, 8, &err) == CHUTE_EINVAL, "unknown flag");
    chute_infer_stats st;
    chute_infer_get_stats(s, &st);
    /* 8 x 3 x 224 x 224 floats, then 8 ids and 8 statuses on 64-byte
     * boundaries: sized for the batch, not rounded to 2 MiB.  Slots: the
     * default queue of 64 requests (apart from the batch) in batches of
     * 8, plus 2 the caller may hold. */
    CHECK(st.slots == 64 / 8 + 2 && st.slot_bytes == 4816896 + 64 + 64,
          "8 x 224^2 floats in %zu-byte slots", st.slot_bytes);
    chute_infer_destroy(s);
    o.pretouch = 1;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "pretouch: %s", err.message);
    chute_infer_get_stats(s, &st);
    CHECK(st.slot_bytes == (6u << 20), "pretouch: the loader's 2 MiB rounding, %zu",
          st.slot_bytes);
    chute_infer_destroy(s);
    return 0;
}

/* ------------------------------------------------------------------ */

typedef struct sub_arg {
    chute_infer *s;
    samples *smp;
    uint64_t base, n;
    int fail;
} sub_arg;

static void *submitter(void *p)
{
    sub_arg *a = p;
    for (uint64_t i = 0; i < a->n; i++) {
        uint64_t k = (a->base + i) % a->smp->n;
        chute_error err = {0};
        int rc;
        while ((rc = chute_infer_submit(a->s, a->smp->data[k], a->smp->len[k], a->base + i,
                                        CHUTE_INFER_COPY, &err)) == CHUTE_EBUSY)
            usleep(200);
        if (rc != CHUTE_OK)
            a->fail = 1;
        if (i % 25 == 0) { /* stats from the submitting threads too (TSan) */
            chute_infer_stats st;
            chute_infer_get_stats(a->s, &st);
        }
    }
    return NULL;
}

TEST(four_threads_submit)
{
    NEED_DATA();
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    samples smp = {0};
    CHECK(samples_load(ds, &smp) == 0, "reading samples");
    chute_infer_options o = {0};
    o.size = 16;
    o.max_batch = 6;
    o.max_delay_us = 300;
    o.workers = 3;
    o.queue_capacity = 24;
    chute_infer *s = NULL;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_OK, "%s", err.message);
    enum { T = 4, PER = 150 };
    sub_arg a[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        a[t] = (sub_arg){s, &smp, (uint64_t)t * PER, PER, 0};
        pthread_create(&th[t], NULL, submitter, &a[t]);
    }
    order_ctx c = {0, 0, 0, T * PER, calloc(T * PER, 1)};
    int drc = drain(s, T * PER, order_fn, &c);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    CHECK(drc == 0, "drain");
    for (int t = 0; t < T; t++)
        CHECK(!a[t].fail, "submitter %d failed", t);
    for (uint64_t i = 0; i < T * PER; i++)
        CHECK(c.hits[i] == 1, "id %llu came back %u times", (unsigned long long)i, c.hits[i]);
    chute_infer_stats st;
    chute_infer_get_stats(s, &st);
    CHECK(st.completed == T * PER && st.failed == 0, "completed %llu",
          (unsigned long long)st.completed);
    chute_infer_destroy(s);
    free(c.hits);
    samples_free(&smp);
    chute_dataset_close(ds);
    return 0;
}

/* ------------------------------------------------------------------ */
/* worker_slice_us, checked against what the kernel says about each
 * thread in /proc/self/task/TID/sched (se.slice in ns, prio = 120 +
 * nice), not against chute's own report. */

static int task_sched(long tid, uint64_t *slice_ns, int *prio)
{
    char path[96], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%ld/sched", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int got = 0;
    unsigned long long v;
    int p;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "se.slice : %llu", &v) == 1) {
            *slice_ns = v;
            got |= 1;
        } else if (sscanf(line, "prio : %d", &p) == 1) {
            *prio = p;
            got |= 2;
        }
    }
    fclose(f);
    return got == 3 ? 0 : -1;
}

/* Threads of this process whose slice is slice_ns; *at_prio: of those,
 * how many run at `prio`. */
static int threads_with_slice(uint64_t slice_ns, int prio, int *at_prio)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    *at_prio = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        uint64_t sl = 0;
        int p = 0;
        if (task_sched(atol(e->d_name), &sl, &p) == 0 && sl == slice_ns) {
            n++;
            *at_prio += p == prio;
        }
    }
    closedir(d);
    return n;
}

/* The kernel's struct sched_attr, for the probe below. */
struct probe_attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t prio;
    uint64_t runtime, deadline, period;
};

/* Can a thread here ask for its own slice (Linux 6.12+, /proc showing
 * it)?  A throwaway thread asks for 2.5 ms and reads /proc back. */
static void *slice_probe(void *p)
{
    struct probe_attr a = {0};
    a.size = sizeof a;
    a.runtime = 2500000;
    uint64_t sl = 0;
    int prio = 0;
    *(int *)p = syscall(SYS_sched_setattr, 0, &a, 0) == 0 &&
                task_sched((long)syscall(SYS_gettid), &sl, &prio) == 0 && sl == 2500000;
    return NULL;
}

typedef struct creator_arg {
    chute_infer_options o;
    chute_infer *s;
    int rc;
    char msg[256];
} creator_arg;

/* Creates the session from a thread at nice 3 on a 2.5 ms slice: its
 * workers inherit both unless chute changes them. */
static void *nice_creator(void *p)
{
    creator_arg *c = p;
    chute_error err = {0};
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 3) != 0) {
        c->rc = -1;
        snprintf(c->msg, sizeof c->msg, "setpriority: %s", strerror(errno));
        return NULL;
    }
    struct probe_attr a = {0};
    a.size = sizeof a;
    a.nice = 3;
    a.runtime = 2500000;
    if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) {
        c->rc = -1;
        snprintf(c->msg, sizeof c->msg, "sched_setattr: %s", strerror(errno));
        return NULL;
    }
    c->rc = chute_infer_create(&c->o, &c->s, &err);
    snprintf(c->msg, sizeof c->msg, "%s", err.message);
    return NULL;
}

TEST(worker_slice_is_the_workers_own)
{
    chute_infer *s = NULL;
    chute_error err = {0};
    chute_infer_options o = {0};
    o.workers = 1;
    o.worker_slice_us = 99;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_EINVAL && !s, "99 us is under the bound");
    CHECK(strstr(err.message, "worker_slice_us 99"), "%s", err.message);
    o.worker_slice_us = 100001;
    CHECK(chute_infer_create(&o, &s, &err) == CHUTE_EINVAL && !s, "100001 us is over the bound");

    int ok = 0;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, slice_probe, &ok) == 0, "probe thread");
    pthread_join(th, NULL);
    if (!ok)
        SKIP("no per-thread scheduler slice here (Linux < 6.12, or /proc without se.slice)");
    uint64_t main_slice = 0;
    int main_prio = 0;
    CHECK(task_sched((long)syscall(SYS_gettid), &main_slice, &main_prio) == 0, "own sched");
    CHECK(main_slice != 3000000, "the default slice is 3 ms here: pick another value");

    creator_arg c = {0};
    c.o.size = 16;
    c.o.workers = 2;
    c.o.stats_shm = CHUTE_STATS_SHM_OFF; /* no stats thread: only the workers are counted */
    c.o.worker_slice_us = 3000;
    CHECK(pthread_create(&th, NULL, nice_creator, &c) == 0, "creator thread");
    pthread_join(th, NULL);
    CHECK(c.rc == CHUTE_OK, "create at nice 3: %s", c.msg);
    /* Each worker asks for its slice when it starts: wait (bounded). */
    int n = 0, at_nice3 = 0;
    for (int i = 0; i < 1000 && (n = threads_with_slice(3000000, 123, &at_nice3)) < 2; i++)
        usleep(10000);
    CHECK(n == 2, "%d threads run with a 3 ms slice, want the 2 workers", n);
    CHECK(at_nice3 == 2, "%d of the 2 workers kept nice 3", at_nice3);
    chute_infer_stats st;
    chute_infer_get_stats(c.s, &st);
    CHECK(st.worker_slice_us == 3000, "stats say %u us", st.worker_slice_us);
    chute_infer_destroy(c.s);

    /* Without the option the workers run with the kernel's default (what
     * this untouched thread has), not with the 2.5 ms slice of the thread
     * that created them; still at its nice 3. */
    c = (creator_arg){0};
    c.o.size = 16;
    c.o.workers = 2;
    c.o.stats_shm = CHUTE_STATS_SHM_OFF;
    CHECK(pthread_create(&th, NULL, nice_creator, &c) == 0, "creator thread");
    pthread_join(th, NULL);
    CHECK(c.rc == CHUTE_OK, "create at nice 3: %s", c.msg);
    /* (this thread has the default slice too, at nice 0) */
    for (int i = 0; i < 1000; i++) {
        threads_with_slice(main_slice, 123, &at_nice3);
        if (at_nice3 >= 2)
            break;
        usleep(10000);
    }
    CHECK(at_nice3 == 2, "%d threads at nice 3 with the default slice, want the 2 workers",
          at_nice3);
    CHECK(threads_with_slice(2500000, 123, &at_nice3) == 0, "a worker kept its creator's slice");
    chute_infer_get_stats(c.s, &st);
    CHECK(st.worker_slice_us == main_slice / 1000, "default session: %u us, this thread %llu ns",
          st.worker_slice_us, (unsigned long long)main_slice);
    CHECK(threads_with_slice(3000000, 123, &at_nice3) == 0, "a 3 ms slice left over");
    chute_infer_destroy(c.s);
    return 0;
}

UNIT_MAIN
