/*
 * test_api.c — the public API (include/chute.h) as a caller sees it,
 * linked against the shared library: argument checking, batch views,
 * the held-batch protocol, epoch restarts, statistics, and the calls the
 * header promises are thread-safe (run these under the TSan build).
 *
 * Uses the fixture data (--data DIR: tree/ and shards/); skips without it.
 */
#include "unit.h"

#include <math.h>
#include <time.h>

#include "chute.h"

#include <pthread.h>

static char g_tree[4096], g_shards[4096];

static int have_data(void)
{
    if (!g_data)
        return 0;
    snprintf(g_tree, sizeof g_tree, "%s/tree", g_data);
    snprintf(g_shards, sizeof g_shards, "%s/shards", g_data);
    char ready[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    return access(ready, F_OK) == 0;
}

#define NEED_DATA()                                                                       \
    do {                                                                                  \
        if (!have_data())                                                                 \
            SKIP("fixture data missing (run the data_setup test)");                       \
    } while (0)

static chute_dataset *open_ds(const char *path)
{
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open(path, CHUTE_SOURCE_AUTO, &ds, &err) != CHUTE_OK)
        fprintf(stderr, "open %s: %s\n", path, err.message);
    return ds;
}

static chute_loader_options small_opts(void)
{
    chute_loader_options o = {0};
    o.batch_size = 32;
    o.size = 32;
    o.workers = 2;
    o.seed = 1;
    return o;
}

/* FNV-1a over a batch's data, labels and indices: a compact fingerprint. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

/* Run one epoch; returns a fingerprint of everything delivered, or 0. */
static uint64_t epoch_fingerprint(chute_loader *ld, uint64_t epoch, uint64_t *samples)
{
    uint64_t h = 0xcbf29ce484222325ull;
    *samples = 0;
    if (chute_loader_start_epoch(ld, epoch, 0) != CHUTE_OK)
        return 0;
    chute_batch *b;
    int rc;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        h = fnv(h, v.data, v.nbytes);
        h = fnv(h, v.labels, v.count * sizeof *v.labels);
        h = fnv(h, v.indices, v.count * sizeof *v.indices);
        *samples += v.count;
        chute_batch_release(b);
    }
    if (rc != CHUTE_END) {
        fprintf(stderr, "epoch %llu: %s: %s\n", (unsigned long long)epoch, chute_status_name(rc),
                chute_loader_errmsg(ld));
        return 0;
    }
    return h;
}

/* ------------------------------------------------------------------ */

TEST(version_and_status_names)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", CHUTE_VERSION_MAJOR, CHUTE_VERSION_MINOR,
             CHUTE_VERSION_PATCH);
    CHECK(strcmp(chute_version(), want) == 0, "chute_version() '%s' vs header %s", chute_version(),
          want);
    CHECK(chute_version_number() == CHUTE_VERSION_NUMBER, "version number %d",
          chute_version_number());
    static const struct {
        int code;
        const char *name;
    } t[] = {{CHUTE_OK, "CHUTE_OK"},           {CHUTE_END, "CHUTE_END"},
             {CHUTE_EINVAL, "CHUTE_EINVAL"},   {CHUTE_ENOMEM, "CHUTE_ENOMEM"},
             {CHUTE_EIO, "CHUTE_EIO"},         {CHUTE_EFORMAT, "CHUTE_EFORMAT"},
             {CHUTE_ECORRUPT, "CHUTE_ECORRUPT"}, {CHUTE_ELIMIT, "CHUTE_ELIMIT"},
             {CHUTE_ENOTFOUND, "CHUTE_ENOTFOUND"}, {CHUTE_EBUSY, "CHUTE_EBUSY"},
             {CHUTE_EUNSUPPORTED, "CHUTE_EUNSUPPORTED"},
             {CHUTE_EINTERRUPTED, "CHUTE_EINTERRUPTED"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        CHECK(strcmp(chute_status_name(t[i].code), t[i].name) == 0, "status %d named '%s'",
              t[i].code, chute_status_name(t[i].code));
    CHECK(chute_status_name(12345) != NULL && chute_status_name(-12345) != NULL,
          "unknown status gives NULL");
    return 0;
}

TEST(null_handles_are_safe)
{
    chute_dataset_close(NULL);
    chute_loader_destroy(NULL);
    chute_batch_release(NULL);
    chute_batch_view_get(NULL, NULL);
    chute_loader_stats(NULL, NULL);
    CHECK(chute_dataset_size(NULL) == 0 && chute_dataset_num_classes(NULL) == 0, "NULL dataset");
    CHECK(chute_dataset_class_name(NULL, 0) == NULL, "class name of NULL");
    CHECK(chute_loader_num_batches(NULL) == 0, "NULL loader batches");
    CHECK(chute_loader_start_epoch(NULL, 0, 0) == CHUTE_EINVAL, "start NULL");
    chute_batch *b = NULL;
    CHECK(chute_loader_next(NULL, &b) == CHUTE_EINVAL, "next NULL");
    CHECK(strcmp(chute_loader_errmsg(NULL), "") == 0, "errmsg NULL");
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(NULL, NULL, &ld, &err) == CHUTE_EINVAL && !ld, "create NULL ds");
    size_t len;
    CHECK(chute_dataset_read(NULL, 0, NULL, 0, &len, &err) == CHUTE_EINVAL, "read NULL");
    char buf[64];
    chute_dataset_describe(NULL, 3, buf, sizeof buf);
    CHECK(buf[0] != '\0', "describe NULL");
    return 0;
}

TEST(option_validation)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    struct {
        const char *what;
        chute_loader_options o;
    } bad[12];
    int n = 0;
#define BAD(w, field, val)                                                                \
    do {                                                                                  \
        bad[n].what = w;                                                                  \
        bad[n].o = small_opts();                                                          \
        bad[n].o.field = val;                                                             \
        n++;                                                                              \
    } while (0)
    BAD("rank == world", rank, 1);
    BAD("size 9000", size, 9000);
    BAD("transform 7", transform, (chute_transform)7);
    BAD("dtype 9", dtype, (chute_dtype)9);
    BAD("layout 5", layout, (chute_layout)5);
    BAD("policy 4", on_corrupt, (chute_corrupt_policy)4);
    BAD("remainder 3", remainder, (chute_remainder)3);
    BAD("workers 5000", workers, 5000);
    BAD("prefetch 100", prefetch, 100);
    BAD("scale 50..20", scale_min_pct, 50);
    bad[n - 1].o.scale_max_pct = 20;
    BAD("std negative", std[1], -1.0f);
    BAD("batch 2^21", batch_size, 1u << 21);
    for (int i = 0; i < n; i++) {
        chute_loader *ld = (chute_loader *)0x1;
        chute_error err = {0};
        int rc = chute_loader_create(ds, &bad[i].o, &ld, &err);
        CHECK(rc == CHUTE_EINVAL && ld == NULL && err.message[0],
              "%s: %s (%s), loader %p", bad[i].what, chute_status_name(rc), err.message, (void *)ld);
        chute_loader_destroy(rc == CHUTE_OK ? ld : NULL);
    }
    /* DROP with more ranks than samples has nothing to give any rank. */
    chute_loader_options o = small_opts();
    o.world_size = 1000;
    o.rank = 999;
    o.remainder = CHUTE_REMAINDER_DROP;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_EINVAL, "DROP with world > n");
    /* PAD with world > n still works: one sample per rank. */
    o.remainder = CHUTE_REMAINDER_PAD;
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "PAD world > n: %s", err.message);
    CHECK(chute_loader_num_samples(ld) == 1 && chute_loader_num_batches(ld) == 1, "PAD world > n");
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

static int check_views(chute_dataset *ds, chute_dtype dt, chute_layout lay, int drop_last)
{
    chute_loader_options o = small_opts();
    o.dtype = dt;
    o.layout = lay;
    o.drop_last = drop_last;
    o.size = 24;
    chute_loader *ld = NULL;
    chute_error err = {0};
    if (chute_loader_create(ds, &o, &ld, &err) != CHUTE_OK) {
        fprintf(stderr, "create: %s\n", err.message);
        return 1;
    }
    uint64_t n = chute_dataset_size(ds), B = 32;
    uint64_t want_nb = drop_last ? n / B : (n + B - 1) / B;
    uint64_t want_ns = drop_last ? n / B * B : n;
    int bad = 0;
    if (chute_loader_num_batches(ld) != want_nb || chute_loader_num_samples(ld) != want_ns) {
        fprintf(stderr, "num_batches %llu num_samples %llu, want %llu %llu\n",
                (unsigned long long)chute_loader_num_batches(ld),
                (unsigned long long)chute_loader_num_samples(ld), (unsigned long long)want_nb,
                (unsigned long long)want_ns);
        bad = 1;
    }
    size_t es = dt == CHUTE_DTYPE_UINT8 ? 1 : dt == CHUTE_DTYPE_FLOAT16 ? 2 : 4;
    chute_layout eff = lay != CHUTE_LAYOUT_DEFAULT ? lay
                       : dt == CHUTE_DTYPE_UINT8   ? CHUTE_LAYOUT_NHWC
                                                   : CHUTE_LAYOUT_NCHW;
    chute_loader_start_epoch(ld, 2, 0);
    uint64_t got = 0, nb = 0;
    chute_batch *b;
    int rc;
    while (!bad && (rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        uint32_t want_count = (uint32_t)(nb + 1 < want_nb || drop_last ? B : want_ns - nb * B);
        int64_t S = 24;
        int64_t shape[4] = {v.count, 3, S, S}, nhwc[4] = {v.count, S, S, 3};
        const int64_t *ws = eff == CHUTE_LAYOUT_NCHW ? shape : nhwc;
        if (v.count != want_count || v.shape[0] != v.count || v.dtype != dt || v.layout != eff ||
            memcmp(v.shape, ws, sizeof v.shape) != 0 || v.strides[3] != 1 ||
            v.strides[2] != ws[3] || v.strides[1] != ws[2] * ws[3] ||
            v.strides[0] != ws[1] * ws[2] * ws[3] || v.nbytes != (size_t)v.count * 3 * S * S * es ||
            v.epoch != 2 || v.batch_index != nb || !v.data) {
            fprintf(stderr,
                    "batch %llu: count %u shape %lld,%lld,%lld,%lld strides %lld,%lld,%lld,%lld "
                    "nbytes %zu epoch %llu index %llu\n",
                    (unsigned long long)nb, v.count, (long long)v.shape[0], (long long)v.shape[1],
                    (long long)v.shape[2], (long long)v.shape[3], (long long)v.strides[0],
                    (long long)v.strides[1], (long long)v.strides[2], (long long)v.strides[3],
                    v.nbytes, (unsigned long long)v.epoch, (unsigned long long)v.batch_index);
            bad = 1;
        }
        for (uint32_t k = 0; k < v.count && !bad; k++)
            if (v.indices[k] >= n || v.labels[k] != chute_dataset_label(ds, v.indices[k])) {
                fprintf(stderr, "batch %llu slot %u: index %llu label %lld\n",
                        (unsigned long long)nb, k, (unsigned long long)v.indices[k],
                        (long long)v.labels[k]);
                bad = 1;
            }
        got += v.count;
        nb++;
        chute_batch_release(b);
    }
    if (!bad && (rc != CHUTE_END || got != want_ns || nb != want_nb)) {
        fprintf(stderr, "epoch ended with %s after %llu samples in %llu batches\n",
                chute_status_name(rc), (unsigned long long)got, (unsigned long long)nb);
        bad = 1;
    }
    /* END is sticky until the next start_epoch. */
    if (!bad && chute_loader_next(ld, &b) != CHUTE_END) {
        fprintf(stderr, "next after END did not return END\n");
        bad = 1;
    }
    chute_loader_destroy(ld);
    return bad;
}

TEST(batch_views_shapes_and_counts)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    CHECK_OK(check_views(ds, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_DEFAULT, 0));
    CHECK_OK(check_views(ds, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_DEFAULT, 0));
    CHECK_OK(check_views(ds, CHUTE_DTYPE_FLOAT16, CHUTE_LAYOUT_NHWC, 1));
    CHECK_OK(check_views(ds, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NCHW, 1));
    chute_dataset_close(ds);
    return 0;
}

TEST(held_batches_and_ebusy)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    o.max_held = 2;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
    chute_batch *a, *b, *c = NULL;
    CHECK(chute_loader_next(ld, &a) == CHUTE_OK, "first");
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "second");
    int rc = chute_loader_next(ld, &c);
    CHECK(rc == CHUTE_EBUSY && c == NULL, "third while holding 2: %s", chute_status_name(rc));
    CHECK(strstr(chute_loader_errmsg(ld), "max_held") != NULL, "EBUSY message '%s'",
          chute_loader_errmsg(ld));
    chute_batch_view va, vb;
    chute_batch_view_get(a, &va);
    chute_batch_view_get(b, &vb);
    CHECK(va.batch_index == 0 && vb.batch_index == 1 && va.data != vb.data, "two distinct batches");
    chute_batch_release(a);
    CHECK(chute_loader_next(ld, &c) == CHUTE_OK, "after release: %s", chute_loader_errmsg(ld));
    chute_batch_view vc;
    chute_batch_view_get(c, &vc);
    CHECK(vc.batch_index == 2, "third batch index %llu", (unsigned long long)vc.batch_index);
    chute_batch_release(b);
    chute_batch_release(c);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(first_next_starts_epoch_zero)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    chute_loader *l1 = NULL, *l2 = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &l1, &err) == CHUTE_OK, "create");
    CHECK(chute_loader_create(ds, &o, &l2, &err) == CHUTE_OK, "create");
    chute_batch *a, *b;
    CHECK(chute_loader_next(l1, &a) == CHUTE_OK, "implicit start");
    CHECK(chute_loader_start_epoch(l2, 0, 0) == CHUTE_OK, "explicit start");
    CHECK(chute_loader_next(l2, &b) == CHUTE_OK, "explicit next");
    chute_batch_view va, vb;
    chute_batch_view_get(a, &va);
    chute_batch_view_get(b, &vb);
    CHECK(va.epoch == 0 && va.count == vb.count &&
              memcmp(va.indices, vb.indices, va.count * 8) == 0 &&
              memcmp(va.data, vb.data, va.nbytes) == 0,
          "implicit start differs from start_epoch(0, 0)");
    chute_batch_release(a);
    chute_batch_release(b);
    /* Drain both epochs (destroying mid-epoch is destroy_mid_epoch's business). */
    while (chute_loader_next(l1, &a) == CHUTE_OK)
        chute_batch_release(a);
    while (chute_loader_next(l2, &b) == CHUTE_OK)
        chute_batch_release(b);
    chute_loader_destroy(l1);
    chute_loader_destroy(l2);
    chute_dataset_close(ds);
    return 0;
}

TEST(restart_keeps_held_batch_valid)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    o.prefetch = 3;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create");
    chute_loader_start_epoch(ld, 0, 0);
    chute_batch *held;
    CHECK(chute_loader_next(ld, &held) == CHUTE_OK, "first");
    chute_batch_view hv;
    chute_batch_view_get(held, &hv);
    void *copy = malloc(hv.nbytes);
    uint64_t idx0 = hv.indices[0];
    memcpy(copy, hv.data, hv.nbytes);
    /* Restart several times mid-epoch while workers are busy and one
     * batch is held; consume a little of each run. */
    for (uint64_t e = 1; e <= 4; e++) {
        CHECK(chute_loader_start_epoch(ld, e, e % 3) == CHUTE_OK, "restart %llu",
              (unsigned long long)e);
        chute_batch *b;
        CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next after restart: %s",
              chute_loader_errmsg(ld));
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        CHECK(v.epoch == e && v.batch_index == e % 3, "after restart to (%llu, %llu): got (%llu, %llu)",
              (unsigned long long)e, (unsigned long long)(e % 3), (unsigned long long)v.epoch,
              (unsigned long long)v.batch_index);
        chute_batch_release(b);
    }
    chute_batch_view_get(held, &hv);
    CHECK(hv.epoch == 0 && hv.indices[0] == idx0 && memcmp(copy, hv.data, hv.nbytes) == 0,
          "a held batch changed while the loader restarted");
    chute_batch_release(held);
    chute_batch_release(held); /* a second release of the same batch is ignored */
    /* The full epoch still comes out right afterwards. */
    uint64_t s1, s2;
    uint64_t h1 = epoch_fingerprint(ld, 7, &s1);
    uint64_t h2 = epoch_fingerprint(ld, 7, &s2);
    CHECK(h1 && h1 == h2 && s1 == chute_dataset_size(ds), "epoch 7 twice: %llx %llx (%llu samples)",
          (unsigned long long)h1, (unsigned long long)h2, (unsigned long long)s1);
    free(copy);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(next_timeout_polls)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    o.workers = 1;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create");
    chute_loader_start_epoch(ld, 0, 0);
    uint64_t got = 0, polls = 0;
    for (;;) {
        chute_batch *b = NULL;
        int rc = chute_loader_next_timeout(ld, 0, &b);
        if (rc == CHUTE_EINTERRUPTED) {
            CHECK(b == NULL, "batch with EINTERRUPTED");
            polls++;
            usleep(1000);
            continue;
        }
        if (rc == CHUTE_END)
            break;
        CHECK(rc == CHUTE_OK, "next_timeout: %s", chute_status_name(rc));
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        got += v.count;
        chute_batch_release(b);
    }
    CHECK(got == chute_dataset_size(ds), "polled %llu samples", (unsigned long long)got);
    fprintf(stderr, "%llu empty polls\n", (unsigned long long)polls);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

typedef struct poller {
    chute_loader *ld;
    volatile int stop;
    uint64_t polls;
} poller;

static void *poll_stats(void *arg)
{
    poller *p = arg;
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        chute_stats s;
        chute_loader_stats(p->ld, &s);
        p->polls++;
        usleep(200);
    }
    return NULL;
}

TEST(stats_from_another_thread)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    o.workers = 3;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create");
    poller p = {ld, 0, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, poll_stats, &p) == 0, "thread");
    uint64_t samples;
    uint64_t h = epoch_fingerprint(ld, 0, &samples);
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(h != 0, "epoch failed");
    chute_stats s;
    chute_loader_stats(ld, &s);
    uint64_t n = chute_dataset_size(ds);
    CHECK(s.samples == n && s.batches == chute_loader_num_batches(ld) && s.corrupt == 0 &&
              s.workers == 3 && s.read.items >= n && s.decode.items >= n &&
              s.transform.items >= n && s.read.bytes > 0 && s.wall_ns > 0,
          "stats: samples %llu batches %llu corrupt %llu workers %u read %llu decode %llu",
          (unsigned long long)s.samples, (unsigned long long)s.batches,
          (unsigned long long)s.corrupt, s.workers, (unsigned long long)s.read.items,
          (unsigned long long)s.decode.items);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* chute_stats' recent figures (issue 30.5): nothing before the first
 * next(); after an idle start the window covers the loop only (not the
 * idle time the lifetime rates include), counts what was handed over, and
 * last_step_ns is the consumer's step as it timed it. */
TEST(stats_window_skips_idle_start)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create");
    chute_stats s;
    chute_loader_stats(ld, &s);
    CHECK(s.window_ns == 0 && s.window_samples == 0 && s.last_wait_ns == 0 &&
              s.last_step_ns == 0, "recent figures before any next()");
    usleep(300000); /* idle start */
    uint64_t t0 = mono_ns(), t_prev = 0, step = 0, samples = 0, batches = 0;
    chute_batch *b = NULL;
    while (chute_loader_next(ld, &b) == CHUTE_OK) {
        uint64_t t = mono_ns();
        step = t_prev ? t - t_prev : 0;
        t_prev = t;
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        samples += v.count;
        batches++;
        chute_batch_release(b);
        usleep(20000); /* the consumer's work */
    }
    uint64_t t1 = mono_ns();
    chute_loader_stats(ld, &s);
    CHECK(batches >= 3 && s.window_samples == samples && s.window_batches == batches,
          "window counts %llu/%llu of %llu/%llu", (unsigned long long)s.window_samples,
          (unsigned long long)s.window_batches, (unsigned long long)samples,
          (unsigned long long)batches);
    /* The window is the loop (t0..t1 plus the stats call), not the idle 0.3 s. */
    CHECK(s.window_ns >= t1 - t0 - (t1 - t0) / 20 && s.window_ns <= t1 - t0 + 20000000ull &&
              s.wall_ns >= s.window_ns + 290000000ull,
          "window %llu ns, loop %llu ns, wall %llu ns", (unsigned long long)s.window_ns,
          (unsigned long long)(t1 - t0), (unsigned long long)s.wall_ns);
    CHECK(s.window_wait_ns <= s.window_ns && s.window_wait_ns <= s.wait_ns, "window wait");
    uint64_t d = s.last_step_ns > step ? s.last_step_ns - step : step - s.last_step_ns;
    CHECK(step >= 20000000ull && d <= 2000000ull + step / 10, "last step %llu ns, timed %llu",
          (unsigned long long)s.last_step_ns, (unsigned long long)step);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

typedef struct reader_arg {
    chute_dataset *ds;
    uint64_t start;
    uint64_t sum;
    int failed;
} reader_arg;

static void *read_all(void *arg)
{
    reader_arg *r = arg;
    uint64_t n = chute_dataset_size(r->ds);
    size_t cap = 4 << 20;
    uint8_t *buf = malloc(cap);
    r->sum = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = (k + r->start) % n;
        size_t len = 0;
        chute_error err = {0};
        if (chute_dataset_read(r->ds, i, buf, cap, &len, &err) != CHUTE_OK) {
            r->failed = 1;
            break;
        }
        r->sum += fnv(0xcbf29ce484222325ull, buf, len) ^ i;
    }
    free(buf);
    return NULL;
}

TEST(concurrent_dataset_reads)
{
    NEED_DATA();
    const char *paths[2] = {g_tree, g_shards};
    for (int p = 0; p < 2; p++) {
        chute_dataset *ds = open_ds(paths[p]);
        CHECK(ds != NULL, "open %s", paths[p]);
        reader_arg one = {ds, 0, 0, 0};
        read_all(&one);
        CHECK(!one.failed, "single-threaded read of %s failed", paths[p]);
        enum { T = 4 };
        reader_arg ra[T];
        pthread_t th[T];
        for (int i = 0; i < T; i++) {
            ra[i] = (reader_arg){ds, (uint64_t)i * 37, 0, 0};
            CHECK(pthread_create(&th[i], NULL, read_all, &ra[i]) == 0, "thread");
        }
        for (int i = 0; i < T; i++) {
            pthread_join(th[i], NULL);
            CHECK(!ra[i].failed && ra[i].sum == one.sum, "%s: thread %d read different bytes",
                  paths[p], i);
        }
        chute_dataset_close(ds);
    }
    return 0;
}

typedef struct loader_arg {
    chute_dataset *ds;
    uint64_t fp, samples;
} loader_arg;

static void *run_loader(void *arg)
{
    loader_arg *a = arg;
    chute_loader_options o = small_opts();
    chute_loader *ld = NULL;
    chute_error err = {0};
    if (chute_loader_create(a->ds, &o, &ld, &err) == CHUTE_OK)
        a->fp = epoch_fingerprint(ld, 3, &a->samples);
    chute_loader_destroy(ld);
    return NULL;
}

TEST(loaders_share_a_dataset)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_shards);
    CHECK(ds != NULL, "open");
    loader_arg a = {ds, 0, 0}, b = {ds, 0, 0};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, run_loader, &a) == 0, "thread");
    CHECK(pthread_create(&tb, NULL, run_loader, &b) == 0, "thread");
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.fp && a.fp == b.fp && a.samples == chute_dataset_size(ds),
          "two loaders on one dataset disagree (%llx vs %llx)", (unsigned long long)a.fp,
          (unsigned long long)b.fp);
    chute_dataset_close(ds);
    return 0;
}

TEST(destroy_mid_epoch)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    for (int round = 0; round < 4; round++) {
        chute_loader_options o = small_opts();
        o.workers = 1 + (uint32_t)round;
        chute_loader *ld = NULL;
        chute_error err = {0};
        CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create");
        if (round >= 1)
            chute_loader_start_epoch(ld, 0, 0);
        if (round >= 2) {
            chute_batch *b;
            CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next");
            if (round == 3)
                chute_batch_release(b);
            /* round 2: destroyed while the consumer holds a batch */
        }
        chute_loader_destroy(ld);
    }
    chute_dataset_close(ds);
    return 0;
}

/* A tree of real photos (hard links into the fixture tree) with garbage
 * files mixed in. */
static int make_dirty_tree(const char *root, int good, int garbage)
{
    char cls[4200];
    snprintf(cls, sizeof cls, "%s/a", root);
    unit_mkdirs(cls);
    char cmd[9000];
    snprintf(cmd, sizeof cmd,
             "n=0; for f in '%s'/class00/*.jpg; do n=$((n+1)); [ $n -gt %d ] && break; "
             "ln \"$f\" '%s'/ 2>/dev/null || cp \"$f\" '%s'/; done",
             g_tree, good, cls, cls);
    if (system(cmd) != 0)
        return -1;
    for (int i = 0; i < garbage; i++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/img%05d_bad.jpg", cls, i * 7);
        char junk[300];
        for (size_t k = 0; k < sizeof junk; k++)
            junk[k] = (char)(k * 31 + (size_t)i);
        if (unit_write_file(p, junk, sizeof junk) != 0)
            return -1;
    }
    return 0;
}

TEST(errmsg_while_skipping_corrupt)
{
    NEED_DATA();
    char dir[4096], root[4200];
    unit_scratch("errmsg_while_skipping", dir, sizeof dir);
    snprintf(root, sizeof root, "%s/tree", dir);
    CHECK(make_dirty_tree(root, 40, 12) == 0, "make tree");
    chute_dataset *ds = open_ds(root);
    CHECK(ds != NULL && chute_dataset_size(ds) == 52, "open");
    chute_loader_options o = small_opts();
    o.batch_size = 4;
    o.workers = 3;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create");
    chute_loader_start_epoch(ld, 0, 0);
    chute_batch *b;
    int rc;
    uint64_t got = 0, msgs = 0;
    /* The consumer reads the loader's message after every batch while
     * workers keep skipping corrupt samples (a data race if the library
     * writes the message without synchronising with this reader). */
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        const char *m = chute_loader_errmsg(ld);
        if (m[0]) {
            CHECK(strstr(m, "_bad.jpg") != NULL, "message while skipping: '%s'", m);
            msgs++;
        }
        /* A caller logs the message at its own pace (here: 1 ms later)
         * while the workers go on skipping samples of later batches. */
        usleep(1000);
        m = chute_loader_errmsg(ld);
        CHECK(m[0] == '\0' || strstr(m, "skipped") != NULL, "message torn: '%s'", m);
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        for (uint32_t k = 0; k < v.count; k++) {
            char where[1024];
            chute_dataset_describe(ds, v.indices[k], where, sizeof where);
            CHECK(strstr(where, "_bad") == NULL, "corrupt sample %s delivered", where);
        }
        got += v.count;
        chute_batch_release(b);
    }
    CHECK(rc == CHUTE_END && got == 52, "epoch: %s after %llu samples", chute_status_name(rc),
          (unsigned long long)got);
    chute_stats s;
    chute_loader_stats(ld, &s);
    CHECK(s.corrupt >= 12, "corrupt count %llu", (unsigned long long)s.corrupt);
    CHECK(msgs > 0, "no 'skipped' message was ever visible");
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(fail_policy_stops_the_epoch)
{
    NEED_DATA();
    char dir[4096], root[4200];
    unit_scratch("fail_policy", dir, sizeof dir);
    snprintf(root, sizeof root, "%s/tree", dir);
    CHECK(make_dirty_tree(root, 30, 1) == 0, "make tree");
    chute_dataset *ds = open_ds(root);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    o.batch_size = 4;
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create");
    for (int round = 0; round < 2; round++) {
        chute_loader_start_epoch(ld, (uint64_t)round, 0);
        chute_batch *b;
        int rc;
        while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK)
            chute_batch_release(b);
        CHECK(rc == CHUTE_ECORRUPT, "round %d: epoch ended with %s", round, chute_status_name(rc));
        CHECK(strstr(chute_loader_errmsg(ld), "img00000_bad.jpg") != NULL,
              "FAIL message does not name the file: '%s'", chute_loader_errmsg(ld));
        CHECK(chute_loader_next(ld, &b) == CHUTE_END, "after a failure the epoch is over");
    }
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

/* Run one epoch with a per-sample limit; count delivered samples for
 * which over(ds, index) is true, and the loader's corrupt count. */
static int run_limited(chute_dataset *ds, chute_loader_options *o, int (*over)(chute_dataset *, uint64_t),
                       uint64_t *n_over_dataset, uint64_t *n_over_delivered, uint64_t *corrupt,
                       uint64_t *delivered)
{
    *n_over_dataset = *n_over_delivered = *delivered = 0;
    for (uint64_t i = 0; i < chute_dataset_size(ds); i++)
        *n_over_dataset += over(ds, i) != 0;
    chute_loader *ld = NULL;
    chute_error err = {0};
    if (chute_loader_create(ds, o, &ld, &err) != CHUTE_OK) {
        fprintf(stderr, "create: %s\n", err.message);
        return 1;
    }
    chute_batch *b;
    int rc;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        for (uint32_t k = 0; k < v.count; k++)
            *n_over_delivered += over(ds, v.indices[k]) != 0;
        *delivered += v.count;
        chute_batch_release(b);
    }
    chute_stats s;
    chute_loader_stats(ld, &s);
    *corrupt = s.corrupt;
    if (rc != CHUTE_END)
        fprintf(stderr, "epoch ended with %s: %s\n", chute_status_name(rc), chute_loader_errmsg(ld));
    chute_loader_destroy(ld);
    return rc == CHUTE_END ? 0 : 1;
}

static uint64_t g_limit;
static int bigger_than_limit(chute_dataset *ds, uint64_t i)
{
    return chute_dataset_sample_size(ds, i) > g_limit;
}
static int more_pixels_than_limit(chute_dataset *ds, uint64_t i)
{
    size_t cap = 4 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    uint32_t w = 0, h = 0;
    chute_error err = {0};
    int big = chute_dataset_read(ds, i, buf, cap, &len, &err) == CHUTE_OK &&
              chute_probe_image(buf, len, 1ull << 40, &w, &h, NULL, &err) == CHUTE_OK &&
              (uint64_t)w * h > g_limit;
    free(buf);
    return big;
}

/* Resource limits are per-sample options: a sample over the limit is a bad
 * sample (skipped and counted under SKIP), whatever its size otherwise. */
TEST(limits_max_sample_bytes)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    o.max_sample_bytes = g_limit = 100000;
    uint64_t in_ds, delivered_over, corrupt, delivered;
    int failed = run_limited(ds, &o, bigger_than_limit, &in_ds, &delivered_over, &corrupt, &delivered);
    chute_dataset_close(ds);
    CHECK(!failed, "epoch failed");
    CHECK(in_ds > 0, "no sample above %llu bytes to test with", (unsigned long long)g_limit);
    CHECK(delivered_over == 0 && corrupt >= in_ds,
          "max_sample_bytes=%llu: %llu samples are larger; %llu of them were delivered, corrupt "
          "count %llu (limit not enforced below the worker's 512 KiB read buffer?)",
          (unsigned long long)g_limit, (unsigned long long)in_ds,
          (unsigned long long)delivered_over, (unsigned long long)corrupt);
    return 0;
}

TEST(limits_max_pixels)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    chute_loader_options o = small_opts();
    o.max_pixels = g_limit = 300000;
    uint64_t in_ds, delivered_over, corrupt, delivered;
    int failed = run_limited(ds, &o, more_pixels_than_limit, &in_ds, &delivered_over, &corrupt,
                             &delivered);
    uint64_t n = chute_dataset_size(ds);
    chute_dataset_close(ds);
    CHECK(!failed, "epoch failed");
    CHECK(in_ds > 0, "no image above %llu pixels to test with", (unsigned long long)g_limit);
    CHECK(delivered_over == 0 && corrupt >= in_ds && delivered == n,
          "max_pixels=%llu: %llu images are larger; %llu delivered, corrupt %llu",
          (unsigned long long)g_limit, (unsigned long long)in_ds,
          (unsigned long long)delivered_over, (unsigned long long)corrupt);
    return 0;
}

TEST(probe_image)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    size_t cap = 8 << 20, len;
    uint8_t *buf = malloc(cap);
    chute_error err = {0};
    for (uint64_t i = 0; i < 20; i++) {
        CHECK(chute_dataset_read(ds, i, buf, cap, &len, &err) == CHUTE_OK, "read");
        uint32_t w = 0, h = 0, c = 0;
        CHECK(chute_probe_image(buf, len, 0, &w, &h, &c, &err) == CHUTE_OK, "probe %llu: %s",
              (unsigned long long)i, err.message);
        CHECK(w >= 16 && h >= 16 && (c == 1 || c == 3 || c == 4), "probe %llu: %ux%u c%u",
              (unsigned long long)i, w, h, c);
        CHECK(chute_probe_image(buf, len / 2, 0, NULL, NULL, NULL, &err) == CHUTE_ECORRUPT,
              "probe of half of sample %llu", (unsigned long long)i);
    }
    CHECK(chute_probe_image("nope", 4, 0, NULL, NULL, NULL, &err) == CHUTE_EFORMAT, "garbage");
    CHECK(chute_probe_image(NULL, 10, 0, NULL, NULL, NULL, &err) == CHUTE_EINVAL, "NULL data");
    free(buf);
    chute_dataset_close(ds);
    return 0;
}

/* Normalization constants and the eval resize side (issue #8): NaN or
 * infinite mean/std, a zero std channel, a std whose reciprocal is not a
 * float, crop_pct outside (0, 1], both crop_pct and resize_size, and a
 * resize side below the output size are refused with a message naming
 * the option; the valid spellings of the defaults are accepted. */
TEST(option_validation_normalize_and_eval_resize)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    static const struct {
        const char *what, *says;
        int field; /* 0 mean[1], 1 std[1], 2 crop_pct, 3 resize_size, 4 both */
        float v;
    } bad[] = {
        {"mean NaN", "mean", 0, NAN},          {"mean inf", "mean", 0, INFINITY},
        {"std inf", "std", 1, INFINITY},       {"std NaN", "std", 1, NAN},
        {"std 0", "std", 1, 0.0f},             {"std 1e-40", "std", 1, 1e-40f},
        {"crop_pct -0.5", "crop_pct", 2, -0.5f}, {"crop_pct 1.5", "crop_pct", 2, 1.5f},
        {"crop_pct NaN", "crop_pct", 2, NAN},  {"resize 16 < size 32", "resize", 3, 16},
        {"resize 70000", "resize", 3, 70000},  {"crop_pct and resize_size", "crop_pct", 4, 0.9f},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        chute_loader_options o = small_opts();
        o.transform = CHUTE_TRANSFORM_EVAL;
        o.mean[0] = 0.5f, o.mean[1] = 0.5f, o.mean[2] = 0.5f;
        o.std[0] = 0.25f, o.std[1] = 0.25f, o.std[2] = 0.25f;
        switch (bad[i].field) {
        case 0: o.mean[1] = bad[i].v; break;
        case 1: o.std[1] = bad[i].v; break;
        case 2: o.crop_pct = bad[i].v; break;
        case 3: o.resize_size = (uint32_t)bad[i].v; break;
        default: o.crop_pct = bad[i].v, o.resize_size = 64; break;
        }
        chute_loader *ld = (chute_loader *)0x1;
        chute_error err = {0};
        int rc = chute_loader_create(ds, &o, &ld, &err);
        if (rc == CHUTE_OK)
            chute_loader_destroy(ld);
        CHECK(rc == CHUTE_EINVAL && strstr(err.message, bad[i].says),
              "%s: %s (%s)", bad[i].what, chute_status_name(rc), err.message);
    }
    static const struct {
        float crop_pct;
        uint32_t resize;
    } good[] = {{0, 0}, {0.875f, 0}, {1.0f, 0}, {0, 32}, {0, 37}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        chute_loader_options o = small_opts();
        o.transform = CHUTE_TRANSFORM_EVAL;
        o.crop_pct = good[i].crop_pct;
        o.resize_size = good[i].resize;
        chute_loader *ld = NULL;
        chute_error err = {0};
        int rc = chute_loader_create(ds, &o, &ld, &err);
        chute_loader_destroy(ld);
        CHECK(rc == CHUTE_OK, "crop_pct %g resize %u refused: %s", (double)good[i].crop_pct,
              good[i].resize, err.message);
    }
    chute_dataset_close(ds);
    return 0;
}

UNIT_MAIN

static int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    size_t l = strlen(needle);
    for (const char *p = hay; l && (p = strstr(p, needle)) != NULL; p += l)
        n++;
    return n;
}

/* Files of a listed tree replaced after the listing: a FIFO in a file's
 * place must be refused at once (open() would wait for a writer forever
 * and destroy would wait on that worker), a vanished file must be named
 * once in the message ("p: cannot open", not "p: p: cannot open"). */
TEST(file_swapped_after_listing)
{
    NEED_DATA();
    char dir[4096], root[4200];
    unit_scratch("swapped_after_listing", dir, sizeof dir);
    snprintf(root, sizeof root, "%s/tree", dir);
    CHECK(make_dirty_tree(root, 12, 0) == 0, "make tree");
    chute_dataset *ds = open_ds(root);
    CHECK(ds != NULL && chute_dataset_size(ds) == 12, "open");
    char fifo[4096], gone[4096];
    chute_dataset_describe(ds, 3, fifo, sizeof fifo);
    chute_dataset_describe(ds, 5, gone, sizeof gone);
    CHECK(unlink(fifo) == 0 && mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    CHECK(unlink(gone) == 0, "unlink %s", gone);

    static uint8_t buf[1 << 20];
    size_t len = 0;
    chute_error err = {0};
    int rc = chute_dataset_read(ds, 3, buf, sizeof buf, &len, &err);
    CHECK(rc == CHUTE_EFORMAT && strstr(err.message, "not a regular file") != NULL,
          "FIFO read: %s '%s'", chute_status_name(rc), err.message);
    CHECK(count_substr(err.message, fifo) == 1, "FIFO path not named once: '%s'", err.message);
    rc = chute_dataset_read(ds, 5, buf, sizeof buf, &len, &err);
    CHECK(rc != CHUTE_OK && count_substr(err.message, gone) == 1 &&
              strstr(err.message, "No such file") != NULL,
          "vanished file: %s '%s'", chute_status_name(rc), err.message);

    /* Through the loader: the epoch stops (FAIL policy) or skips, never
     * hangs; its message names the file once; destroy returns. */
    for (int policy = 0; policy < 2; policy++) {
        chute_loader_options o = small_opts();
        o.batch_size = 2;
        o.on_corrupt = policy ? CHUTE_CORRUPT_FAIL : CHUTE_CORRUPT_SKIP;
        chute_loader *ld = NULL;
        CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
        chute_loader_start_epoch(ld, 0, 0);
        chute_batch *b;
        int saw_msg = 0;
        while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
            const char *m = chute_loader_errmsg(ld);
            if (m[0]) {
                saw_msg = 1;
                CHECK(count_substr(m, root) >= 1 && count_substr(m, fifo) <= 1 &&
                          count_substr(m, gone) <= 1,
                      "skip message names no path, or one twice: '%s'", m);
            }
            chute_batch_release(b);
        }
        const char *m = chute_loader_errmsg(ld);
        if (policy) {
            CHECK(rc != CHUTE_END, "FAIL policy: epoch ended cleanly");
            CHECK(count_substr(m, root) == 1 &&
                      (strstr(m, "not a regular file") || strstr(m, "No such file")),
                  "FAIL message: '%s'", m);
        } else {
            CHECK(rc == CHUTE_END || rc == CHUTE_EIO || rc == CHUTE_EFORMAT ||
                      rc == CHUTE_ENOTFOUND || rc == CHUTE_ECORRUPT,
                  "skip policy: %s", chute_status_name(rc));
            CHECK(saw_msg || m[0], "skip policy: no message about the two bad files");
            /* An I/O error met while replacing a skipped sample names both
             * files (the replacement and the one it replaced), each once. */
            CHECK(count_substr(m, fifo) <= 1 && count_substr(m, gone) <= 1,
                  "message names a path twice: '%s'", m);
        }
        chute_loader_destroy(ld);
    }
    chute_dataset_close(ds);
    return 0;
}

/* A message about a very long path keeps its reason: the path loses its
 * middle (marked with U+2026), not the message its end. */
TEST(long_path_message_keeps_reason)
{
    char path[4000];
    size_t n = 0;
    while (n + 60 < sizeof path)
        n += (size_t)snprintf(path + n, sizeof path - n, "/no-such-directory-%08zu-xxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                              n);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    int rc = chute_dataset_open(path, CHUTE_SOURCE_AUTO, &ds, &err);
    CHECK(rc == CHUTE_ENOTFOUND && ds == NULL, "open: %s", chute_status_name(rc));
    size_t ml = strlen(err.message);
    CHECK(ml < sizeof err.message, "unterminated");
    const char *why = strerror(ENOENT);
    CHECK(ml > strlen(why) && strcmp(err.message + ml - strlen(why), why) == 0,
          "reason lost: '%s'", err.message);
    CHECK(strstr(err.message, "\xe2\x80\xa6") != NULL, "no ellipsis: '%s'", err.message);
    CHECK(strncmp(err.message, path, 40) == 0, "head of the path lost: '%s'", err.message);
    return 0;
}

/* Elastic resume through the public calls: 2 ranks (batch 7) consume 3
 * batches each, chute_loader_position gives the prefix, 3 ranks (batch 5,
 * one worker) start_epoch_at it: the two parts hold every sample, the new
 * ranks have equal run_batches, num_batches stays the whole epoch's, a
 * finished run's position is N, and P > N / shards mode are refused with a
 * message. */
TEST(elastic_start_epoch_at)
{
    NEED_DATA();
    chute_dataset *ds = open_ds(g_tree);
    CHECK(ds != NULL, "open");
    uint64_t n = chute_dataset_size(ds);
    uint8_t *seen = calloc(n, 1);
    CHECK(seen != NULL, "alloc");
    chute_error err = {0};
    chute_batch *b;
    chute_batch_view v;
    uint64_t pos = UINT64_MAX;
    for (uint32_t r = 0; r < 2; r++) {
        chute_loader_options o = small_opts();
        o.batch_size = 7, o.world_size = 2, o.rank = r;
        chute_loader *ld = NULL;
        CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
        CHECK(chute_loader_start_epoch(ld, 3, 0) == CHUTE_OK, "start");
        for (int i = 0; i < 3; i++) {
            CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next");
            chute_batch_view_get(b, &v);
            for (uint32_t j = 0; j < v.count; j++) {
                CHECK(!seen[v.indices[j]], "sample %llu twice before the resume",
                      (unsigned long long)v.indices[j]);
                seen[v.indices[j]] = 1;
            }
            chute_batch_release(b);
        }
        pos = chute_loader_position(ld, 3);
        chute_loader_destroy(ld);
    }
    CHECK(pos == 3 * 7 * 2, "position %llu", (unsigned long long)pos);
    uint64_t runb = UINT64_MAX, extra = 0;
    for (uint32_t r = 0; r < 3; r++) {
        chute_loader_options o = small_opts();
        o.batch_size = 5, o.world_size = 3, o.rank = r, o.workers = 1;
        chute_loader *ld = NULL;
        CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
        uint64_t whole = chute_loader_num_batches(ld);
        CHECK(chute_loader_start_epoch_at(ld, 3, n + 1, &err) == CHUTE_EINVAL &&
                  strstr(err.message, "past the end"), "P > N: %s", err.message);
        CHECK(chute_loader_start_epoch_at(ld, 3, pos, &err) == CHUTE_OK, "%s", err.message);
        CHECK(runb == UINT64_MAX || chute_loader_run_batches(ld) == runb, "unequal ranks");
        runb = chute_loader_run_batches(ld);
        CHECK(runb < whole && chute_loader_num_batches(ld) == whole, "run %llu whole %llu",
              (unsigned long long)runb, (unsigned long long)whole);
        uint64_t got = 0;
        while (chute_loader_next(ld, &b) == CHUTE_OK) {
            chute_batch_view_get(b, &v);
            CHECK(v.epoch == 3, "epoch %llu", (unsigned long long)v.epoch);
            for (uint32_t j = 0; j < v.count; j++)
                extra += seen[v.indices[j]]++ != 0;
            chute_batch_release(b);
            got++;
        }
        CHECK(got == runb, "delivered %llu of %llu batches", (unsigned long long)got,
              (unsigned long long)runb);
        CHECK(chute_loader_position(ld, got) == n, "finished run's position");
        chute_loader_destroy(ld);
    }
    for (uint64_t i = 0; i < n; i++)
        CHECK(seen[i], "sample %llu never delivered", (unsigned long long)i);
    CHECK(extra < 3, "%llu repeats (PAD fills < 3)", (unsigned long long)extra);
    free(seen);
    chute_dataset_close(ds);

    ds = open_ds(g_shards);
    CHECK(ds != NULL, "open shards");
    chute_loader_options o = small_opts();
    o.shuffle = CHUTE_SHUFFLE_SHARDS;
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
    CHECK(chute_loader_start_epoch_at(ld, 0, 10, &err) == CHUTE_EUNSUPPORTED &&
              strstr(err.message, "shards"), "shards mode: %s", err.message);
    CHECK(chute_loader_start_epoch_at(ld, 0, 0, &err) == CHUTE_OK, "P = 0 in shards mode");
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}
