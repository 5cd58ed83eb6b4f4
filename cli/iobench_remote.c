/*
 * iobench_remote.c — `chute iobench s3://bucket/prefix` (or a key, or an
 * http(s):// URL): can this object store feed the GPUs?
 *
 * Two patterns, the remote counterparts of the local ones:
 *   imagenet    GETs of small objects: every object under the prefix,
 *               each read whole, once per shuffled pass (an ImageFolder
 *               tree in a bucket); objects larger than 4 MiB, and a single
 *               key or URL, are read as ranges whose sizes follow the same
 *               ImageNet mix as the local pattern at random 4 KiB-aligned
 *               offsets.  Reports GET/s, MB/s and latency percentiles.
 *   sequential  large ranges (--bs, default 16 MiB) streamed object after
 *               object, as when reading packed shards.  Reports MB/s.
 * --threads requests are in flight at once (a thread each, blocking on
 * curl; all share one connection pool, so connections are kept alive and
 * reused, never one per request).  --requests N makes exactly N requests;
 * otherwise the run lasts --time.  Latency is request-to-last-byte.  The
 * buffers are allocated and written before the clock starts, and the
 * process's CPU time while measuring is reported: what a GET costs the
 * client, per MB, is half of the comparison with other clients.
 *
 * What it must never do is write what it did not create, as the local
 * mode.  Existing objects are only read.  Test objects are laid out only
 * when the target holds none and --create is given, under a new prefix
 * "<prefix>/chute-iobench-XXXXXXXXXXXX/" that is checked to be empty
 * first; each PUT refuses a key that exists (HEAD, then If-None-Match: *).
 * Exactly the keys this run created are deleted at the end (unless
 * --keep), also after SIGINT/SIGTERM.  Credentials come from the
 * environment (docs/REMOTE.md) and are never printed: reports name the
 * target as given, and errors come from the source, which never includes
 * a credential.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "common/common.h"
#include "io/io.h"
#include "io/remote.h"
#include "stats/hist.h"
#include "util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_iobench_remote(int argc, char **argv);

#ifndef CHUTE_HAVE_CURL
int cmd_iobench_remote(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "chute iobench: this chute was built without libcurl, so it cannot read "
                    "s3:// or http(s):// targets\n");
    return 1;
}
#else

#define WHOLE_MAX (4u << 20) /* imagenet: objects up to this are read whole */
#define MIX_MAX (256u << 10)
#define MAX_OBJECTS_DEFAULT 100000

static const struct {
    uint32_t kib, pct;
} k_rmix[] = {{2, 1}, {4, 2}, {8, 4}, {16, 8}, {32, 13}, {64, 38}, {128, 33}, {256, 1}};

/* Set by SIGINT/SIGTERM so the run stops and still deletes what it made. */
static volatile sig_atomic_t g_riob_stop;
static void on_rstop(int sig)
{
    (void)sig;
    g_riob_stop = 1;
}

static uint32_t rmix_size(ch_rng *r)
{
    uint64_t x = ch_rng_below(r, 100), acc = 0;
    for (size_t i = 0; i < sizeof k_rmix / sizeof k_rmix[0]; i++) {
        acc += k_rmix[i].pct;
        if (x < acc)
            return k_rmix[i].kib * 1024;
    }
    return 64 * 1024;
}

/* ---- the objects ------------------------------------------------------------ */

typedef struct robj {
    char *path; /* s3://bucket/key or the URL */
    uint64_t size;
} robj;

typedef struct rset {
    robj *v;
    size_t n, cap, max;
    uint64_t bytes;
    int truncated;
    char *created_prefix;      /* --create: the prefix this run made */
    size_t ncreated;           /* v[0..ncreated) were created by this run */
} rset;

static int rset_add(rset *s, const char *path, uint64_t size)
{
    if (size == 0)
        return 0; /* nothing to GET */
    if (s->n == s->max) {
        s->truncated = 1;
        return 1;
    }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 256;
        robj *v = realloc(s->v, nc * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = nc;
    }
    s->v[s->n].path = strdup(path);
    if (!s->v[s->n].path)
        return -1;
    s->v[s->n++].size = size;
    s->bytes += size;
    return 0;
}

typedef struct lister {
    rset *s;
    const char *dir;
    char **subdirs;
    size_t nsub, capsub;
    int oom;
} lister;

static int on_entry(void *u, const char *name, const ch_stat *st)
{
    lister *l = u;
    char *p;
    size_t dl = strlen(l->dir);
    if (asprintf(&p, "%s%s%s", l->dir, dl && l->dir[dl - 1] == '/' ? "" : "/", name) < 0) {
        l->oom = 1;
        return 1;
    }
    if (st->type == CH_ENT_DIR) {
        if (l->nsub == l->capsub) {
            size_t nc = l->capsub ? l->capsub * 2 : 16;
            char **v = realloc(l->subdirs, nc * sizeof *v);
            if (!v) {
                free(p);
                l->oom = 1;
                return 1;
            }
            l->subdirs = v;
            l->capsub = nc;
        }
        l->subdirs[l->nsub++] = p;
        return 0;
    }
    int rc = st->type == CH_ENT_FILE ? rset_add(l->s, p, st->size) : 0;
    free(p);
    if (rc < 0)
        l->oom = 1;
    return rc != 0;
}

/* Every object under dir, depth first, up to s->max. */
static int list_tree(const char *dir, rset *s, int depth)
{
    lister l = {.s = s, .dir = dir};
    chute_error err = {0};
    int rc = ch_source_s3.list(dir, on_entry, &l, &err);
    if (rc == CHUTE_ENOTFOUND)
        rc = CHUTE_OK; /* nothing there: the caller decides */
    else if (rc != CHUTE_OK)
        fprintf(stderr, "chute iobench: %s\n", err.message);
    if (l.oom) {
        fprintf(stderr, "chute iobench: out of memory listing %s\n", dir);
        rc = CHUTE_ENOMEM;
    }
    for (size_t i = 0; i < l.nsub; i++) {
        if (rc == CHUTE_OK && !s->truncated && depth < 64)
            rc = list_tree(l.subdirs[i], s, depth + 1);
        free(l.subdirs[i]);
    }
    free(l.subdirs);
    return rc == CHUTE_OK ? 0 : -1;
}

/* What the target names: one object (a key, a URL) or all under a prefix. */
static int find_objects(const char *target, int s3, rset *s)
{
    const ch_source_ops *src = s3 ? &ch_source_s3 : &ch_source_http;
    ch_stat st;
    chute_error err = {0};
    size_t tl = strlen(target);
    int rc = tl && target[tl - 1] == '/' && s3 ? CHUTE_ENOTFOUND : src->stat(target, &st, &err);
    if (rc == CHUTE_OK && st.type == CH_ENT_FILE)
        return rset_add(s, target, st.size) < 0 ? -1 : 0;
    if (rc != CHUTE_OK && rc != CHUTE_ENOTFOUND) {
        fprintf(stderr, "chute iobench: %s\n", err.message);
        return -1;
    }
    if (!s3)
        return 0; /* a missing URL: no objects */
    return list_tree(target, s, 0);
}

static void rset_free(rset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].path);
    free(s->v);
    free(s->created_prefix);
    memset(s, 0, sizeof *s);
}

/* ---- laying out and removing test objects ------------------------------------ */

static int create_objects(ch_remote *rs, const char *target, int pattern, uint32_t nobj,
                          uint64_t size, int quiet, rset *s)
{
    ch_rng r = ch_rng_for(ch_now_ns(), (uint64_t)getpid(), 11);
    size_t tl = strlen(target);
    if (asprintf(&s->created_prefix, "%s%schute-iobench-%012llx/", target,
                 tl && target[tl - 1] == '/' ? "" : "/",
                 (unsigned long long)(ch_rng_next(&r) & 0xffffffffffffull)) < 0) {
        s->created_prefix = NULL;
        fprintf(stderr, "chute iobench: out of memory\n");
        return -1;
    }
    s->max = SIZE_MAX; /* every object created is recorded, whatever --max-objects says */
    /* The new prefix must be empty: nothing there is ever touched. */
    rset probe = {.max = 1};
    if (list_tree(s->created_prefix, &probe, 0) != 0 || probe.n) {
        if (probe.n)
            fprintf(stderr, "chute iobench: %s already holds objects; not writing there\n",
                    s->created_prefix);
        rset_free(&probe);
        return -1;
    }
    rset_free(&probe);
    uint64_t objsz = 64ull << 20;
    if (pattern == 1) {
        if (objsz > size)
            objsz = size;
        nobj = (uint32_t)((size + objsz - 1) / objsz);
    }
    size_t bufsz = pattern == 1 ? (size_t)objsz : MIX_MAX;
    uint64_t *buf = malloc(bufsz);
    if (!buf) {
        fprintf(stderr, "chute iobench: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < bufsz / 8; i++)
        buf[i] = ch_rng_next(&r);
    if (!quiet)
        fprintf(stderr, "iobench: creating %u test object(s) under %s...\n", nobj,
                s->created_prefix);
    int rc = 0;
    for (uint32_t i = 0; i < nobj && rc == 0; i++) {
        if (g_riob_stop) {
            rc = -1;
            break;
        }
        uint64_t sz = pattern == 1 ? CH_MIN(objsz, size - (uint64_t)i * objsz) : rmix_size(&r);
        char *p;
        if (asprintf(&p, "%s%07u.bin", s->created_prefix, i) < 0) {
            fprintf(stderr, "chute iobench: out of memory\n");
            rc = -1;
            break;
        }
        chute_error err = {0};
        if (ch_remote_put(rs, p, buf, (size_t)sz, &err) != CHUTE_OK) {
            fprintf(stderr, "chute iobench: %s\n", err.message);
            rc = -1;
        } else if (rset_add(s, p, sz) != 0) {
            fprintf(stderr, "chute iobench: out of memory\n");
            rc = -1; /* created but not recorded: say so below */
            fprintf(stderr, "chute iobench: %s was created and could not be recorded; remove it\n",
                    p);
        } else {
            s->ncreated = s->n;
        }
        free(p);
    }
    free(buf);
    return rc;
}

static void remove_created(ch_remote *rs, rset *s, int keep, int quiet)
{
    if (!s->ncreated)
        return;
    if (keep) {
        if (!quiet)
            fprintf(stderr, "iobench: kept %zu test object(s) under %s\n", s->ncreated,
                    s->created_prefix);
        return;
    }
    for (size_t i = 0; i < s->ncreated; i++) {
        chute_error err = {0};
        if (ch_remote_delete(rs, s->v[i].path, &err) != CHUTE_OK)
            fprintf(stderr, "chute iobench: cannot remove a test object: %s\n", err.message);
    }
}

/* ---- measuring ----------------------------------------------------------------- */

typedef struct rjob {
    ch_remote *rs;
    const rset *s;
    int pattern;
    uint64_t bs;
    uint64_t *order;            /* imagenet: the shuffled pass */
    uint64_t *chunk_obj;        /* sequential: chunk -> object, offset */
    uint64_t *chunk_off;
    uint64_t nchunks;
    uint64_t limit;             /* requests to make; 0: until the deadline */
    double deadline;
    uint64_t seed;
    _Atomic uint64_t next;
    _Atomic int failed;
    pthread_mutex_t mu;         /* protects errmsg */
    char errmsg[1024];
} rjob;

typedef struct rthread {
    rjob *j;
    pthread_t th;
    uint8_t *buf;               /* bufsz bytes, touched before the clock starts */
    size_t bufsz;
    uint64_t reqs, bytes, max_ns;
    ch_hist hist;
} rthread;

/* Request i: which object, where, how much. */
static void request_for(const rjob *j, uint64_t i, const robj **o, uint64_t *off, size_t *len)
{
    if (j->pattern == 1) {
        uint64_t c = i % j->nchunks;
        *o = &j->s->v[j->chunk_obj[c]];
        *off = j->chunk_off[c];
        *len = (size_t)CH_MIN(j->bs, (*o)->size - *off);
        return;
    }
    *o = &j->s->v[j->order[i % j->s->n]];
    if ((*o)->size <= WHOLE_MAX && j->s->n > 1) {
        *off = 0;
        *len = (size_t)(*o)->size;
        return;
    }
    ch_rng r = ch_rng_for(j->seed, i, 5);
    uint32_t want = rmix_size(&r);
    *len = (size_t)CH_MIN((uint64_t)want, (*o)->size);
    uint64_t slots = ((*o)->size - *len) / 4096 + 1;
    *off = ch_rng_below(&r, slots) * 4096;
}

static void *rthread_main(void *arg)
{
    rthread *t = arg;
    rjob *j = t->j;
    uint8_t *buf = t->buf;
    for (;;) {
        if (g_riob_stop || atomic_load_explicit(&j->failed, memory_order_relaxed))
            break;
        if (!j->limit && t->reqs && cli_now_s() >= j->deadline)
            break;
        uint64_t i = atomic_fetch_add(&j->next, 1);
        if (j->limit && i >= j->limit)
            break;
        const robj *o;
        uint64_t off;
        size_t len;
        request_for(j, i, &o, &off, &len);
        chute_error err = {0};
        uint64_t t0 = ch_now_ns();
        int rc = ch_remote_get(j->rs, o->path, off, buf, len, &err);
        uint64_t dt = ch_now_ns() - t0;
        if (rc != CHUTE_OK) {
            pthread_mutex_lock(&j->mu);
            if (!atomic_load(&j->failed))
                snprintf(j->errmsg, sizeof j->errmsg, "%s", err.message);
            atomic_store(&j->failed, 1);
            pthread_mutex_unlock(&j->mu);
            break;
        }
        ch_hist_add(&t->hist, dt);
        if (dt > t->max_ns)
            t->max_ns = dt;
        t->reqs++;
        t->bytes += len;
    }
    return NULL;
}

typedef struct rresult {
    double seconds, cpu, gets, mbs, p50, p90, p99, max;
    uint64_t reqs, bytes;
} rresult;

static int run_rjob(rjob *j, uint32_t threads, rresult *res)
{
    rthread *ts = calloc(threads, sizeof *ts);
    ch_hist_snap *h = calloc(1, sizeof *h);
    if (!ts || !h) {
        free(ts);
        free(h);
        fprintf(stderr, "chute iobench: out of memory\n");
        return -1;
    }
    /* Each thread's buffer is allocated and written once before the clock
     * starts, as a loader's reused buffers are: otherwise the first GETs
     * into fresh memory pay a page fault per 4 KiB (a quarter of the CPU
     * time of a 16 MiB range here), a cost of this process being new, not
     * of the object store. */
    size_t bufsz = j->pattern == 1 ? (size_t)j->bs : WHOLE_MAX;
    for (uint32_t i = 0; i < threads; i++) {
        ts[i].j = j;
        ts[i].bufsz = bufsz;
        ts[i].buf = malloc(bufsz);
        if (!ts[i].buf) {
            for (uint32_t k = 0; k < i; k++)
                free(ts[k].buf);
            free(ts);
            free(h);
            fprintf(stderr, "chute iobench: out of memory for %u x %zu-byte buffers\n", threads,
                    bufsz);
            return -1;
        }
        memset(ts[i].buf, 0xa5, bufsz); /* not 0: malloc+memset(0) may become calloc */
    }
    double t0 = cli_now_s(), cpu0 = cli_cpu_s();
    uint32_t started = 0;
    for (uint32_t i = 0; i < threads; i++) {
        if (pthread_create(&ts[i].th, NULL, rthread_main, &ts[i]) != 0) {
            snprintf(j->errmsg, sizeof j->errmsg, "cannot start a request thread");
            atomic_store(&j->failed, 1);
            break;
        }
        started++;
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(ts[i].th, NULL);
    res->seconds = cli_now_s() - t0;
    res->cpu = cli_cpu_s() - cpu0;
    for (uint32_t i = 0; i < threads; i++)
        free(ts[i].buf);
    uint64_t mx = 0;
    for (uint32_t i = 0; i < started; i++) {
        res->reqs += ts[i].reqs;
        res->bytes += ts[i].bytes;
        if (ts[i].max_ns > mx)
            mx = ts[i].max_ns;
        ch_hist_merge(h, &ts[i].hist);
    }
    cli_hist_pcts_us(h, &res->p50, &res->p90, &res->p99);
    res->max = mx / 1e3;
    free(h);
    free(ts);
    if (g_riob_stop)
        return -1;
    if (atomic_load(&j->failed)) {
        fprintf(stderr, "chute iobench: %s\n", j->errmsg[0] ? j->errmsg : "out of memory");
        return -1;
    }
    if (res->reqs == 0) {
        fprintf(stderr, "chute iobench: no request completed\n");
        return -1;
    }
    res->gets = res->reqs / res->seconds;
    res->mbs = res->bytes / 1e6 / res->seconds;
    return 0;
}

static int prepare_job(rjob *j, const rset *s)
{
    if (j->pattern == 1) {
        uint64_t n = 0;
        for (size_t i = 0; i < s->n; i++)
            n += (s->v[i].size + j->bs - 1) / j->bs;
        j->chunk_obj = malloc(n * sizeof *j->chunk_obj);
        j->chunk_off = malloc(n * sizeof *j->chunk_off);
        if (!j->chunk_obj || !j->chunk_off)
            return -1;
        uint64_t c = 0;
        for (size_t i = 0; i < s->n; i++)
            for (uint64_t off = 0; off < s->v[i].size; off += j->bs) {
                j->chunk_obj[c] = i;
                j->chunk_off[c++] = off;
            }
        j->nchunks = n;
        return 0;
    }
    j->order = malloc(s->n * sizeof *j->order);
    if (!j->order)
        return -1;
    ch_rng r = ch_rng_for(j->seed, 1, 1);
    ch_permutation(j->order, s->n, &r);
    return 0;
}

/* The target as it may be shown: an http(s) URL's user:password@ (if
 * someone put credentials there) becomes ***@. */
static void shown_target(const char *target, char *out, size_t cap)
{
    const char *p = strstr(target, "://");
    const char *host = p ? p + 3 : target;
    const char *end = host + strcspn(host, "/?#");
    const char *at = memchr(host, '@', (size_t)(end - host));
    if (!at)
        snprintf(out, cap, "%s", target);
    else
        snprintf(out, cap, "%.*s***%s", (int)(host - target), target, at);
}

static void print_rresult(const char *target, const char *source, int pattern, int whole,
                          uint32_t threads, uint64_t bs, const rset *s, int created, int kept,
                          int json, const rresult *r)
{
    const char *pn = pattern == 1 ? "sequential" : "imagenet";
    const char *mode = pattern == 1 ? "ranges" : whole ? "objects" : "mix ranges";
    if (json) {
        printf("{\"pattern\":\"%s\",\"source\":\"%s\",\"mode\":\"%s\",\"threads\":%u,", pn, source,
               mode, threads);
        printf("\"in_flight\":%u,\"seconds\":%.3f,\"cpu_seconds\":%.3f,\"requests\":%llu,"
               "\"bytes\":%llu,\"gets_per_sec\":%.1f,\"mb_per_sec\":%.2f,\"lat_p50_us\":%.1f,"
               "\"lat_p90_us\":%.1f,\"lat_p99_us\":%.1f,\"lat_max_us\":%.1f,\"range_bytes\":%llu,",
               threads, r->seconds, r->cpu, (unsigned long long)r->reqs, (unsigned long long)r->bytes,
               r->gets, r->mbs, r->p50, r->p90, r->p99, r->max,
               (unsigned long long)(pattern == 1 ? bs : 0));
        printf("\"objects\":%zu,\"object_bytes\":%llu,\"listing_truncated\":%s,\"target\":",
               s->n, (unsigned long long)s->bytes, s->truncated ? "true" : "false");
        cli_json_str(stdout, target);
        printf(",\"created\":%s,\"kept\":%s,\"created_prefix\":", created ? "true" : "false",
               kept ? "true" : "false");
        if (created)
            cli_json_str(stdout, s->created_prefix);
        else
            printf("null");
        printf("}\n");
        return;
    }
    printf("iobench %s on %s (%s, %zu object(s), %.1f MB%s%s): %s, %u request(s) in flight, "
           "%.1f s\n",
           pn, target, source, s->n, s->bytes / 1e6, s->truncated ? ", listing cut at --max-objects" : "",
           created ? (kept ? ", created and kept" : ", created and removed") : "", mode, threads,
           r->seconds);
    printf("  %llu GETs  %.0f GET/s  %.1f MB/s  %.2f CPU ms per MB\n", (unsigned long long)r->reqs,
           r->gets, r->mbs, r->bytes ? r->cpu * 1e9 / (double)r->bytes : 0.0);
    printf("  latency p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  max %.1f ms\n", r->p50 / 1e3,
           r->p90 / 1e3, r->p99 / 1e3, r->max / 1e3);
    if (pattern == 1)
        printf("  could sustain about %.0f images/s at ImageNet's mean 110 KB per image\n",
               r->bytes / 110000.0 / r->seconds);
    else
        printf("  could sustain about %.0f images/s (one GET per image)\n", r->gets);
}

int cmd_iobench_remote(int argc, char **argv)
{
    int pattern = 0, json = 0, keep = 0, create = 0;
    uint32_t threads = 32, nobj = 1000, maxobj = MAX_OBJECTS_DEFAULT;
    uint64_t requests = 0, size = 256ull << 20, bs = 16ull << 20;
    const char *time_s = "10s";
    const cli_opt opts[] = {
        {"--pattern", CLI_CHOICE, &pattern, "imagenet|sequential", 0, 0,
         "imagenet: small GETs (default); sequential: large ranges"},
        {"--threads", CLI_U32, &threads, NULL, 1, 1024,
         "requests in flight, one thread each (default 32)"},
        {"--requests", CLI_U64, &requests, NULL, 1, 1ull << 40,
         "make exactly this many requests (default: as many as --time allows)"},
        {"--time", CLI_STR, &time_s, NULL, 0, 0, "how long to measure (default 10s)"},
        {"--bs", CLI_SIZE, &bs, NULL, 4096, 256ull << 20,
         "sequential: range size (default 16M)"},
        {"--create", CLI_FLAG, &create, NULL, 0, 0,
         "if the target holds no objects, lay out test objects (removed at the end)"},
        {"--objects", CLI_U32, &nobj, NULL, 1, 10000000,
         "--create, imagenet: objects to lay out (default 1000)"},
        {"--size", CLI_SIZE, &size, NULL, 4096, 1ull << 40,
         "--create, sequential: bytes to lay out, in 64 MiB objects (default 256M)"},
        {"--max-objects", CLI_U32, &maxobj, NULL, 1, 100000000,
         "read at most this many objects of a prefix (default 100000)"},
        {"--keep", CLI_FLAG, &keep, NULL, 0, 0, "keep the objects --create made"},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "print one JSON object"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("iobench",
                       "s3://BUCKET/PREFIX-OR-KEY | http(s)://URL [options]\n\n"
                       "Existing objects are only read.  A target that holds no objects is\n"
                       "measured only with --create, which lays out test objects under a new\n"
                       "chute-iobench-* prefix and deletes exactly those at the end.\n"
                       "Settings and credentials: the AWS environment (docs/REMOTE.md)",
                       opts, argc, argv, pos, 1, &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 1) {
        fprintf(stderr, "chute iobench: need a target (see --help)\n");
        return 2;
    }
    const char *target = pos[0];
    char shown[4096];
    shown_target(target, shown, sizeof shown);
    int s3 = !strncmp(target, "s3://", 5);
    double secs = cli_parse_duration(time_s);
    if (secs <= 0) {
        fprintf(stderr, "chute iobench: --time: '%s' is not a positive duration (e.g. 30s, 2m)\n",
                time_s);
        return 2;
    }
    if (create && !s3) {
        fprintf(stderr, "chute iobench: --create needs an s3:// target (HTTP cannot be written)\n");
        return 2;
    }
    uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t per = pattern == 1 ? bs : WHOLE_MAX;
    if (ram && (uint64_t)threads * per > ram / 2) {
        fprintf(stderr, "chute iobench: --threads %u x %llu-byte buffers need more than half of "
                        "this machine's memory: lower --threads or --bs\n",
                threads, (unsigned long long)per);
        return 2;
    }

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_rstop;
    sigemptyset(&sa.sa_mask);
    g_riob_stop = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    ch_remote *rs = NULL;
    rset s = {.max = maxobj};
    rjob j;
    memset(&j, 0, sizeof j);
    pthread_mutex_init(&j.mu, NULL);
    int ret = 1, created = 0;
    chute_error err = {0};
    if (ch_remote_new(target, &rs, &err) != CHUTE_OK) {
        fprintf(stderr, "chute iobench: %s\n", err.message);
        goto out;
    }
    if (find_objects(target, s3, &s) != 0)
        goto out;
    if (s.n == 0) {
        if (!create) {
            fprintf(stderr,
                    "chute iobench: %s holds no objects to read; --create lays out test objects "
                    "under a new chute-iobench-* prefix there (deleted afterwards)\n",
                    shown);
            goto out;
        }
        created = 1;
        if (create_objects(rs, target, pattern, nobj, size, json, &s) != 0)
            goto out;
    } else if (create && !json) {
        fprintf(stderr, "iobench: %s holds %zu object(s): reading those, creating none\n", shown,
                s.n);
    }
    j.rs = rs;
    j.s = &s;
    j.pattern = pattern;
    j.bs = bs;
    j.limit = requests;
    j.seed = 0x10be5c;
    if (prepare_job(&j, &s) != 0) {
        fprintf(stderr, "chute iobench: out of memory\n");
        goto out;
    }
    int whole = 1;
    for (size_t i = 0; i < s.n && whole; i++)
        whole = s.v[i].size <= WHOLE_MAX;
    whole = whole && s.n > 1;
    j.deadline = cli_now_s() + secs;
    rresult res;
    memset(&res, 0, sizeof res);
    if (run_rjob(&j, threads, &res) != 0)
        goto out;
    print_rresult(shown, s3 ? "s3" : "http", pattern, whole, threads, bs, &s, created,
                  created && keep, json, &res);
    ret = 0;
out:
    remove_created(rs, &s, keep && ret == 0 && !g_riob_stop, json);
    ch_remote_free(rs);
    rset_free(&s);
    free(j.order);
    free(j.chunk_obj);
    free(j.chunk_off);
    pthread_mutex_destroy(&j.mu);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (g_riob_stop) {
        fprintf(stderr, "chute iobench: interrupted; removed the test objects it had created\n");
        return 130;
    }
    return ret;
}
#endif
