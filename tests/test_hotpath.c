/*
 * test_hotpath.c — with every exporter on (TensorBoard every batch,
 * Prometheus endpoint and textfile, `chute top`'s segment), the loader's
 * hot path allocates nothing new: counted by a malloc interposer in this
 * binary, not estimated.
 *
 * The interposer: malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc and memalign defined here forward to glibc's __libc_*
 * entry points (no dlsym: it may itself allocate, a recursion) and count
 * each call of the allocating ones per thread.  A thread's counter is
 * found by its kernel tid, so the test reads the stats thread's count
 * (named "chute-stats", /proc/self/task/TID/comm) as well as its own.
 *
 * Expected values are what "nothing per sample" means, not what the code
 * happens to do: the consumer (this thread, in next()/release) and the
 * stats thread allocate 0 times over N batches and over 2N batches of a
 * steady epoch.  Those are the only threads exporter code runs on; the
 * workers' (the decoder's per-image allocations) are the pipeline's and
 * do not line up with the consumer's windows (the workers run ahead by
 * up to the ring), so the whole process's counts, on and off, are printed
 * for the record and not compared.
 *
 * A sanitizer build has its own allocator interposed: the test skips.
 */
#include "unit.h"

#include "chute.h"

#include <dirent.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HOTPATH_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HOTPATH_SANITIZER 1
#endif
#endif

#ifndef HOTPATH_SANITIZER
/* ---- the interposer ---------------------------------------------------- */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#define MAX_THREADS 256
static struct {
    _Atomic long tid;
    _Atomic uint64_t allocs;
} g_threads[MAX_THREADS];
static _Atomic uint64_t g_total;
static __thread int t_slot = -1;

static void count(void)
{
    atomic_fetch_add_explicit(&g_total, 1, memory_order_relaxed);
    if (t_slot < 0) {
        long tid = syscall(SYS_gettid);
        for (int i = 0; i < MAX_THREADS; i++) {
            long z = 0;
            if (atomic_compare_exchange_strong(&g_threads[i].tid, &z, tid) || z == tid) {
                t_slot = i;
                break;
            }
        }
        if (t_slot < 0)
            return; /* more threads than slots: counted in the total only */
    }
    atomic_fetch_add_explicit(&g_threads[t_slot].allocs, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
    count();
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
    count();
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
    count();
    return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }
void *memalign(size_t al, size_t n)
{
    count();
    return __libc_memalign(al, n);
}
void *aligned_alloc(size_t al, size_t n)
{
    count();
    return __libc_memalign(al, n);
}
int posix_memalign(void **out, size_t al, size_t n)
{
    count();
    void *p = __libc_memalign(al, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

static uint64_t allocs_of_tid(long tid)
{
    for (int i = 0; i < MAX_THREADS; i++)
        if (atomic_load(&g_threads[i].tid) == tid)
            return atomic_load(&g_threads[i].allocs);
    return 0;
}

/* The tid of this process's thread named `name`, 0 if none. */
static long tid_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    long found = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && !found) {
        if (e->d_name[0] == '.')
            continue;
        char p[300], comm[64] = "";
        snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(p, "r");
        if (f) {
            if (fgets(comm, sizeof comm, f))
                comm[strcspn(comm, "\n")] = 0;
            fclose(f);
        }
        if (!strcmp(comm, name))
            found = atol(e->d_name);
    }
    if (d)
        closedir(d);
    return found;
}
#endif

/* ---- the test ---------------------------------------------------------- */

typedef struct window {
    uint64_t me, stats, total;
} window;

/* n batches; step_us: the model's step between them. */
static int take(chute_loader *ld, int n, int step_us)
{
    for (int i = 0; i < n; i++) {
        chute_batch *b = NULL;
        int rc = chute_loader_next(ld, &b);
        if (rc != CHUTE_OK)
            return rc;
        chute_batch_release(b);
        if (step_us)
            usleep((useconds_t)step_us);
    }
    return CHUTE_OK;
}

#ifndef HOTPATH_SANITIZER
static void snap(window *w, long me, long stats)
{
    w->me = allocs_of_tid(me);
    w->stats = stats ? allocs_of_tid(stats) : 0;
    w->total = atomic_load(&g_total);
}
#endif

/* Batches of 2 from the shards: warm-up W, then N, then 2N (one epoch:
 * the fixture's ~200 samples are ~100 batches). */
enum { WARM = 20, N = 20 };

static int run(int all_on, window *wn, window *w2n)
{
#ifdef HOTPATH_SANITIZER
    (void)all_on, (void)wn, (void)w2n;
    return 0;
#else
    char shards[4200], tb[4200], prom[4200];
    snprintf(shards, sizeof shards, "%s/shards", g_data);
    mkdir(g_work, 0755);
    snprintf(tb, sizeof tb, "%s/hot_tb", g_work);
    snprintf(prom, sizeof prom, "%s/hot.prom", g_work);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK_OK(chute_dataset_open(shards, CHUTE_SOURCE_AUTO, &ds, &err));
    chute_loader_options o = {0};
    o.batch_size = 2;
    o.size = 32;
    o.workers = 2;
    o.seed = 7;
    if (all_on) {
        o.tensorboard = tb;
        o.tensorboard_every = 1; /* a snapshot posted at every batch: the worst case */
        o.metrics_port = 0;
        o.metrics_file = prom;
        o.stats_shm = 1;
    } else {
        o.stats_shm = CHUTE_STATS_SHM_OFF;
    }
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
    long me = syscall(SYS_gettid), stats = 0;
    for (int i = 0; i < 100 && !stats; i++) { /* the thread names itself when it starts */
        stats = tid_named("chute-stats");
        if (!stats)
            usleep(all_on ? 10000 : 1000);
    }
    CHECK(all_on ? stats != 0 : stats == 0, "stats thread %ld (exporters %s)", stats,
          all_on ? "on" : "off");
    CHECK_OK(take(ld, WARM, 0));
    usleep(1100000); /* a metrics tick (1 s) and several segment ticks have run */
    window a, b, c;
    snap(&a, me, stats);
    /* With exporters on, a 30 ms step: N batches span 2-3 ticks of the
     * stats thread (250 ms), 2N a metrics tick (1 s) too. */
    int step = all_on ? 30000 : 0;
    CHECK_OK(take(ld, N, step));
    snap(&b, me, stats);
    CHECK_OK(take(ld, 2 * N, step));
    snap(&c, me, stats);
    *wn = (window){b.me - a.me, b.stats - a.stats, b.total - a.total};
    *w2n = (window){c.me - b.me, c.stats - b.stats, c.total - b.total};
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
#endif
}

TEST(exporters_add_no_allocation_per_batch)
{
#ifdef HOTPATH_SANITIZER
    SKIP("a sanitizer's allocator is interposed: this test counts glibc's");
#else
    if (!g_data)
        SKIP("fixture data missing (run the data_setup test)");
    char ready[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    if (access(ready, F_OK) != 0)
        SKIP("fixture data missing (run the data_setup test)");
    window on_n, on_2n, off_n, off_2n;
    if (run(1, &on_n, &on_2n) || run(0, &off_n, &off_2n))
        return 1;
    fprintf(stderr,
            "allocations, N=%d batches / 2N: consumer %llu / %llu, stats thread %llu / %llu, "
            "process %llu / %llu (exporters off: %llu / %llu)\n",
            N, (unsigned long long)on_n.me, (unsigned long long)on_2n.me,
            (unsigned long long)on_n.stats, (unsigned long long)on_2n.stats,
            (unsigned long long)on_n.total, (unsigned long long)on_2n.total,
            (unsigned long long)off_n.total, (unsigned long long)off_2n.total);
    CHECK(on_n.me == 0 && on_2n.me == 0,
          "the consumer allocated %llu times in %d batches and %llu in %d (TensorBoard's "
          "snapshot every batch)",
          (unsigned long long)on_n.me, N, (unsigned long long)on_2n.me, 2 * N);
    CHECK(on_n.stats == 0 && on_2n.stats == 0,
          "the stats thread allocated %llu / %llu times while %d / %d batches ran",
          (unsigned long long)on_n.stats, (unsigned long long)on_2n.stats, N, 2 * N);
    return 0;
#endif
}

UNIT_MAIN
