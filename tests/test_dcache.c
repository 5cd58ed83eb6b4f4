/*
 * test_dcache.c — the decoded-sample cache through the public API, with
 * many workers racing to fill and read it (the TSan tier runs these), a
 * budget smaller than the data, and fork().
 *
 * What must hold: every epoch is byte-identical to the same options
 * without the cache (decoded_cache_bytes = 0), whatever the worker count
 * and the budget; the cache's bytes stay within the budget; a forked child
 * can destroy a loader that holds a cache.
 *
 * Uses the fixture data (--data DIR: tree/ and shards/); skips without it.
 */
#include "unit.h"

#include "chute.h"

#include <stdint.h>
#include <sys/wait.h>

static char g_shards[4096];

static int have_data(void)
{
    if (!g_data)
        return 0;
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

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

enum { EPOCHS = 3 };

/* Fingerprints of EPOCHS epochs of one loader; 0 on success. */
static int run(chute_dataset *ds, const chute_loader_options *o, uint64_t fp[EPOCHS],
               chute_stats *st)
{
    chute_loader *ld = NULL;
    chute_error err = {0};
    if (chute_loader_create(ds, o, &ld, &err) != CHUTE_OK) {
        fprintf(stderr, "create: %s\n", err.message);
        return 1;
    }
    for (int e = 0; e < EPOCHS; e++) {
        fp[e] = 0xcbf29ce484222325ull;
        chute_loader_start_epoch(ld, (uint64_t)e, 0);
        chute_batch *b;
        int rc;
        while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
            chute_batch_view v;
            chute_batch_view_get(b, &v);
            fp[e] = fnv(fp[e], v.data, v.nbytes);
            fp[e] = fnv(fp[e], v.labels, v.count * sizeof *v.labels);
            fp[e] = fnv(fp[e], v.indices, v.count * sizeof *v.indices);
            chute_batch_release(b);
        }
        if (rc != CHUTE_END) {
            fprintf(stderr, "epoch %d: %s: %s\n", e, chute_status_name(rc),
                    chute_loader_errmsg(ld));
            chute_loader_destroy(ld);
            return 1;
        }
    }
    chute_loader_stats(ld, st);
    chute_loader_destroy(ld);
    return 0;
}

static chute_dataset *open_shards(void)
{
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open(g_shards, CHUTE_SOURCE_SHARDS, &ds, &err) != CHUTE_OK)
        fprintf(stderr, "open %s: %s\n", g_shards, err.message);
    return ds;
}

static int compare(chute_transform t, uint32_t size, uint64_t budget, uint32_t workers)
{
    NEED_DATA();
    chute_dataset *ds = open_shards();
    CHECK(ds, "open");
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = size;
    o.transform = t;
    o.dtype = CHUTE_DTYPE_UINT8;
    o.seed = 21;
    o.workers = 1;
    uint64_t ref[EPOCHS], got[EPOCHS];
    chute_stats rs, s;
    CHECK_OK(run(ds, &o, ref, &rs));
    o.workers = workers;
    o.decoded_cache_bytes = budget;
    CHECK_OK(run(ds, &o, got, &s));
    uint64_t n = chute_dataset_size(ds);
    chute_dataset_close(ds);
    for (int e = 0; e < EPOCHS; e++)
        CHECK(ref[e] == got[e], "epoch %d differs with the cache (budget %llu, %u workers)", e,
              (unsigned long long)budget, workers);
    CHECK(rs.cache_hits == 0 && rs.cache_bytes == 0, "stats without a cache");
    CHECK(s.cache_hits > 0, "no cache hits");
    CHECK(s.cache_hits + s.cache_misses == EPOCHS * n, "hits %llu + misses %llu != %llu",
          (unsigned long long)s.cache_hits, (unsigned long long)s.cache_misses,
          (unsigned long long)(EPOCHS * n));
    CHECK(s.cache_bytes <= budget, "cache bytes %llu over the budget %llu",
          (unsigned long long)s.cache_bytes, (unsigned long long)budget);
    return 0;
}

/* 8 workers fill and read the cache at once; output as with 1 worker and
 * no cache. */
TEST(train_identical_many_workers) { return compare(CHUTE_TRANSFORM_TRAIN, 32, 256u << 20, 8); }
TEST(eval_identical_many_workers) { return compare(CHUTE_TRANSFORM_EVAL, 32, 256u << 20, 8); }

/* A budget that holds a part of the data: the rest is made as without. */
TEST(partial_budget_identical)
{
    int rc = compare(CHUTE_TRANSFORM_TRAIN, 32, 3u << 20, 6);
    if (rc)
        return rc;
    return compare(CHUTE_TRANSFORM_EVAL, 32, 4096 + 64 * 3200, 6);
}

/* A budget too small for even the index caches nothing and changes nothing. */
TEST(tiny_budget_caches_nothing)
{
    NEED_DATA();
    chute_dataset *ds = open_shards();
    CHECK(ds, "open");
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 16;
    o.workers = 3;
    o.decoded_cache_bytes = 64;
    uint64_t fp[EPOCHS];
    chute_stats s;
    CHECK_OK(run(ds, &o, fp, &s));
    chute_dataset_close(ds);
    CHECK(s.cache_hits == 0 && s.cache_entries == 0, "hits %llu entries %llu",
          (unsigned long long)s.cache_hits, (unsigned long long)s.cache_entries);
    return 0;
}

/* fork() after the cache filled: the child destroys the loader (freeing
 * the cache, taking no lock); the parent goes on and still hits. */
TEST(fork_child_destroys_cache)
{
    NEED_DATA();
    chute_dataset *ds = open_shards();
    CHECK(ds, "open");
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 16;
    o.workers = 2;
    o.transform = CHUTE_TRANSFORM_EVAL;
    o.decoded_cache_bytes = 64u << 20;
    chute_loader *ld = NULL;
    chute_error err = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
    chute_batch *b;
    chute_loader_start_epoch(ld, 0, 0);
    while (chute_loader_next(ld, &b) == CHUTE_OK)
        chute_batch_release(b);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        alarm(10);
        chute_loader_destroy(ld);
        chute_dataset_close(ds);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
    chute_loader_start_epoch(ld, 1, 0);
    while (chute_loader_next(ld, &b) == CHUTE_OK)
        chute_batch_release(b);
    chute_stats s;
    chute_loader_stats(ld, &s);
    chute_loader_destroy(ld);
    uint64_t n = chute_dataset_size(ds);
    chute_dataset_close(ds);
    CHECK(s.cache_hits == n, "parent after fork: %llu hits of %llu", (unsigned long long)s.cache_hits,
          (unsigned long long)n);
    return 0;
}

UNIT_MAIN
