/*
 * doctor.c — `chute doctor SOURCE`: is training going to wait for data,
 * and which part of the input path is to blame?
 *
 * Four measurements on the user's own data, each on its own:
 *   1. storage   cold reads (page cache evicted for the files read, with
 *                posix_fadvise DONTNEED) by as many threads as the
 *                pipeline has workers, in a shuffled order like training;
 *   2. decode    and
 *   3. transform per core: a one-worker pipeline run on warm data, whose
 *                stage timers give the cost of each stage per image;
 *   4. pipeline  the whole pipeline with all workers (warm cache), with a
 *                throughput / consumer-wait time series.
 * The slowest ceiling is the bottleneck.  Given a GPU's consumption rate,
 * doctor says how many such GPUs this machine can keep >= 90% busy, and it
 * prints advice tied to the numbers.  --report writes an HTML page with the
 * charts.
 *
 * A ceiling counts only what worked: a failed read is fast, so counting
 * it would show half-unreadable data as faster storage than healthy data.
 * Every stage's errors and skipped samples are reported (text, JSON, HTML)
 * and the verdict says the numbers cover only the readable part.  Each
 * stage measures at least one read / one batch, so a short --time gives a
 * rough number, never a zero ceiling that names the wrong bottleneck.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "common/common.h"
#include "common/loader_options.h"
#include "doctor.h"
#include "format/format.h"
#include "io/io.h"
#include "util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct store_job {
    const chute_dataset *ds;
    const uint64_t *order;
    uint64_t n;
    _Atomic uint64_t next;
    _Atomic uint64_t reads;   /* samples read or failed, not merely claimed */
    _Atomic uint64_t bytes;
    _Atomic uint64_t errors;
    double deadline;
    pthread_mutex_t mu;       /* first_error */
    char first_error[512];
} store_job;

static void *store_thread(void *arg)
{
    store_job *j = arg;
    ch_buf buf = {0};
    ch_buf_reserve(&buf, 1 << 20);
    uint64_t bytes = 0, reads = 0, errors = 0;
    for (;;) {
        /* Past the deadline, stop, unless nobody has claimed a read yet:
         * at least one read in all, however short --time is. */
        if (cli_now_s() >= j->deadline && atomic_load(&j->next) > 0)
            break;
        uint64_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->n)
            break;
        size_t len = 0;
        chute_error err = {0};
        reads++;
        if (ch_ds_read_buf(j->ds, j->order[k], &buf, UINT64_MAX, &len, &err) != CHUTE_OK) {
            errors++;
            pthread_mutex_lock(&j->mu);
            if (!j->first_error[0])
                snprintf(j->first_error, sizeof j->first_error, "%s",
                         err.message[0] ? err.message : "read failed");
            pthread_mutex_unlock(&j->mu);
        } else {
            bytes += len;
        }
    }
    atomic_fetch_add(&j->bytes, bytes);
    atomic_fetch_add(&j->reads, reads);
    atomic_fetch_add(&j->errors, errors);
    ch_buf_free(&buf);
    return NULL;
}

/* How much of the data is in the page cache now: mincore() over each
 * distinct file of up to 2,000 samples in `order`, pages resident / pages.
 * Cheap (one mmap per file, no read) and honest about what a training run
 * started now would find: under ~50% it starts cold.  -1 when the source
 * is not local or nothing could be mapped. */
static double page_cache_share(const chute_dataset *ds, const uint64_t *order, uint64_t n,
                               uint32_t *nfiles)
{
    *nfiles = 0;
    if (ds->src != &ch_source_local || !ds->fmt->file_of)
        return -1;
    enum { SEEN = 4096 };
    uint64_t seen[SEEN] = {0}; /* path hashes, open addressing (0: empty) */
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t pages = 0, resident = 0;
    unsigned char *vec = NULL;
    size_t vcap = 0;
    char path[4096];
    for (uint64_t k = 0; k < n && k < 2000; k++) {
        ds->fmt->file_of(ds, order[k], path, sizeof path);
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *c = path; *c; c++)
            h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        h |= 1;
        size_t slot = h % SEEN;
        while (seen[slot] && seen[slot] != h)
            slot = (slot + 1) % SEEN;
        if (seen[slot] == h)
            continue;
        seen[slot] = h;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0)
            continue;
        if (fstat(fd, &st) != 0 || st.st_size <= 0) {
            close(fd);
            continue;
        }
        size_t np = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            continue;
        if (np > vcap) {
            unsigned char *v = realloc(vec, np);
            if (!v) {
                munmap(m, (size_t)st.st_size);
                break;
            }
            vec = v;
            vcap = np;
        }
        if (mincore(m, (size_t)st.st_size, vec) == 0) {
            for (size_t i = 0; i < np; i++)
                resident += vec[i] & 1;
            pages += np;
            (*nfiles)++;
        }
        munmap(m, (size_t)st.st_size);
    }
    free(vec);
    return pages ? (double)resident / (double)pages : -1;
}

/* Stage 1. */
static int measure_storage(const chute_dataset *ds, uint32_t threads, double seconds,
                           doctor_result *r)
{
    uint64_t n = chute_dataset_size(ds);
    uint64_t *order = malloc(n * sizeof *order);
    if (!order)
        return -1;
    ch_rng rng = ch_rng_for(1234, 5, 6);
    ch_permutation(order, n, &rng);
    /* Before evicting: how much of it a run started now would find cached. */
    r->resident_frac = page_cache_share(ds, order, n, &r->resident_files);
    /* Evict what we may read: bounded so huge datasets don't spend minutes here. */
    uint64_t evict = n < 200000 ? n : 200000;
    for (uint64_t i = 0; i < evict; i++)
        ch_ds_drop_cache(ds, order[i]);
    store_job j;
    memset(&j, 0, sizeof j);
    j.ds = ds;
    j.order = order;
    j.n = evict;
    pthread_mutex_init(&j.mu, NULL);
    double t0 = cli_now_s();
    j.deadline = t0 + seconds;
    pthread_t *th = calloc(threads, sizeof *th);
    uint32_t started = 0;
    for (uint32_t i = 0; th && i < threads; i++)
        if (pthread_create(&th[i], NULL, store_thread, &j) == 0)
            started++;
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    double el = cli_now_s() - t0;
    uint64_t done = atomic_load(&j.reads), errors = atomic_load(&j.errors);
    /* Only reads that delivered bytes make the ceiling. */
    r->storage_ips = el > 0 ? (done - errors) / el : 0;
    r->storage_mbs = el > 0 ? atomic_load(&j.bytes) / 1e6 / el : 0;
    r->storage_samples = done;
    r->storage_errors = errors;
    snprintf(r->storage_first_error, sizeof r->storage_first_error, "%s", j.first_error);
    pthread_mutex_destroy(&j.mu);
    snprintf(r->storage_method, sizeof r->storage_method,
             "cold: page cache evicted for the files read (posix_fadvise DONTNEED), %u reader "
             "thread(s), shuffled order",
             threads);
    free(order);
    return 0;
}

typedef struct run_out {
    double ips, wait_frac, seconds;
    uint64_t images;
    chute_stats st;
    int failed;
    char err[512];
    char skip_msg[512];       /* the loader's message for the first skipped sample */
} run_out;

/* Run a loader for about `seconds`, sampling a time series if asked. */
static int run_pipeline(const chute_dataset *ds, const chute_loader_options *o, double seconds,
                        doctor_result *series, cli_gpu *gpu, run_out *out)
{
    memset(out, 0, sizeof *out);
    chute_error err = {0};
    chute_loader *ld = NULL;
    if (chute_loader_create(ds, o, &ld, &err) != CHUTE_OK) {
        snprintf(out->err, sizeof out->err, "%s", err.message);
        out->failed = 1;
        return -1;
    }
    chute_stats s0, sp;
    chute_loader_stats(ld, &s0);
    sp = s0;
    double t0 = cli_now_s(), tp = t0;
    uint64_t images = 0, imgp = 0;
    uint64_t epoch = 0;
    chute_loader_start_epoch(ld, epoch, 0);
    /* At least one batch, however short --time is: a stage that measured
     * nothing would report a zero ceiling. */
    int empty_epochs = 0;
    while ((images == 0 && empty_epochs < 2) || cli_now_s() - t0 < seconds) {
        chute_batch *b = NULL;
        int rc = chute_loader_next(ld, &b);
        if (rc == CHUTE_END) {
            empty_epochs += images == 0;
            chute_loader_start_epoch(ld, ++epoch, 0);
            continue;
        }
        if (rc != CHUTE_OK) {
            snprintf(out->err, sizeof out->err, "%s", chute_loader_errmsg(ld));
            out->failed = 1;
            break;
        }
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        images += v.count;
        chute_batch_release(b);
        const char *m = chute_loader_errmsg(ld);
        if (m && m[0] && !out->skip_msg[0])
            snprintf(out->skip_msg, sizeof out->skip_msg, "%s", m);
        double t = cli_now_s();
        if (series && t - tp >= 0.25 && series->nseries < DOCTOR_MAX_SERIES) {
            chute_stats s;
            chute_loader_stats(ld, &s);
            doctor_point *p = &series->series[series->nseries++];
            p->t = t - t0;
            p->ips = (images - imgp) / (t - tp);
            p->wait = (s.wait_ns - sp.wait_ns) / 1e9 / (t - tp);
            p->gpu_util = gpu ? cli_gpu_util(gpu) : -1;
            sp = s;
            tp = t;
            imgp = images;
        }
    }
    if (!out->failed && images == 0) {
        snprintf(out->err, sizeof out->err,
                 "an epoch delivered no batch (is --batch-size larger than the dataset?)");
        out->failed = 1;
    }
    double el = cli_now_s() - t0;
    chute_loader_stats(ld, &out->st);
    out->images = images;
    out->seconds = el;
    out->ips = el > 0 ? images / el : 0;
    out->wait_frac = el > 0 ? (out->st.wait_ns - s0.wait_ns) / 1e9 / el : 0;
    chute_loader_destroy(ld);
    return out->failed ? -1 : 0;
}

static void add_advice(doctor_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_advice(doctor_result *r, const char *fmt, ...)
{
    if (r->nadvice >= DOCTOR_MAX_ADVICE)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->advice[r->nadvice++], sizeof r->advice[0], fmt, ap);
    va_end(ap);
}

static void add_warning(doctor_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_warning(doctor_result *r, const char *fmt, ...)
{
    if (r->nwarnings >= DOCTOR_MAX_WARNINGS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->warnings[r->nwarnings++], sizeof r->warnings[0], fmt, ap);
    va_end(ap);
}

/* Every stage's errors and skips, in words. */
static void collect_warnings(doctor_result *r)
{
    if (r->storage_errors)
        add_warning(r,
                    "storage: %llu of %llu reads failed (first: %.300s); the storage ceiling "
                    "counts only the %llu reads that succeeded",
                    (unsigned long long)r->storage_errors, (unsigned long long)r->storage_samples,
                    r->storage_first_error,
                    (unsigned long long)(r->storage_samples - r->storage_errors));
    if (r->cpu_corrupt)
        add_warning(r,
                    "decode/transform (1 worker): %llu corrupt sample(s) skipped and replaced, "
                    "%llu delivered%s%.300s",
                    (unsigned long long)r->cpu_corrupt, (unsigned long long)r->cpu_samples,
                    r->skip_example[0] ? "; e.g. " : "", r->skip_example);
    if (r->pipeline_corrupt)
        add_warning(r,
                    "pipeline: %llu corrupt sample(s) skipped and replaced, %llu delivered%s%.300s",
                    (unsigned long long)r->pipeline_corrupt, (unsigned long long)r->pipeline_samples,
                    r->skip_example[0] ? "; e.g. " : "", r->skip_example);
}

/* The source as a stage.  For a remote dataset (s3://, http(s)://) the
 * storage stage is the object store: every read is a request, nothing is
 * evicted, and its latency (the loader's read histogram) is what a
 * training run pays per read; when storage is the bottleneck, the verdict
 * names the remote source and its latency. */
static void source_stage(doctor_result *r)
{
    r->source_bottleneck = !strcmp(r->bottleneck, "storage");
    if (!r->source_remote || !r->source_bottleneck)
        return;
    size_t l = strlen(r->verdict);
    snprintf(r->verdict + l, sizeof r->verdict - l,
             " (the remote %s source: %.0f images/s, %.1f MB/s, read latency p50 %.1f ms, p99 "
             "%.1f ms)",
             r->source_kind, r->storage_ips, r->storage_mbs, r->read_p50_ms, r->read_p99_ms);
    add_advice(r,
               "the remote %s source is the bottleneck: more reads in flight (--workers) hide its "
               "%.1f ms per read; a node-local cache tier makes epochs after the first local",
               r->source_kind, r->read_p50_ms);
}

/* The cache tier as a stage.  It is the bottleneck when storage is slow
 * and the warm pipeline stage still read more than a tenth of its blocks
 * from the origin: the cache is too small for the data read (or its
 * directory fails), so every epoch pays the source's rate. */
static void cache_stage(doctor_result *r)
{
    if (!r->cache_on)
        return;
    const chute_stats *s = &r->cache_st;
    if (r->cache_bottleneck) {
        size_t l = strlen(r->verdict);
        snprintf(r->verdict + l, sizeof r->verdict - l,
                 " (the cache tier: %.0f%% of the warm pipeline's block lookups hit, %llu blocks "
                 "read from the %s source; storage delivers %.0f images/s cold)",
                 100 * r->cache_hit_rate, (unsigned long long)s->tier_fetches, r->source_kind,
                 r->storage_ips);
        add_advice(r,
                   "the cache tier misses: %llu RAM and %llu disk evictions in the pipeline "
                   "stage; give it room for the data read each epoch (--cache-ram-bytes for RAM, "
                   "--cache-dir with --cache-bytes on local NVMe)%s",
                   (unsigned long long)s->tier_ram_evictions,
                   (unsigned long long)s->tier_disk_evictions,
                   s->tier_fallbacks ? "; cache_dir failed (full or removed) and reads went to "
                                       "the origin"
                                     : "");
    } else if (!strcmp(r->bottleneck, "storage") && r->cache_hit_rate >= 0.9) {
        add_advice(r,
                   "the cache tier served %.0f%% of the warm pipeline's block lookups: the cold "
                   "storage rate is the first epoch's; later epochs read from the cache "
                   "(pipeline %.0f images/s)",
                   100 * r->cache_hit_rate, r->pipeline_ips);
    }
}

/* Cold runs (issue 22.1): say when the data is cold and what the
 * read-ahead hides.  Without it each worker reads its own samples, so a
 * cold read's time adds to every image's: workers / storage_ips seconds
 * per image per worker (stage 1 measured exactly that many blocking
 * readers), on top of decode + transform.  With it the reads are in
 * flight ahead of the workers, who only decode, as long as the cold
 * ceiling with its reads in flight (storage_ra_ips) stays above the
 * pipeline's rate. */
static void cold_note(doctor_result *r)
{
    if (r->resident_frac < 0 || r->resident_frac >= 0.5 || r->storage_ips <= 0)
        return;
    double wait_ms = 1e3 * r->workers / r->storage_ips;
    double cpu_ms = 1e3 * (r->decode_s + r->transform_s);
    double slower = cpu_ms > 0 ? 100 * wait_ms / (cpu_ms + wait_ms) : 0;
    if (r->storage_ra_ips > 0)
        add_advice(r,
                   "data cold (%.0f%% in the page cache; every epoch is, for data larger than "
                   "RAM): a worker reading for itself waits %.2f ms per image (%.0f%% fewer "
                   "images/s than warm); the read-ahead (readahead %u) hides this: %s %.0f "
                   "images/s cold",
                   100 * r->resident_frac, wait_ms, slower, r->ra_depth,
                   r->storage_ra_ips >= r->pipeline_ips ? "storage keeps up, delivering"
                                                         : "only partly, storage delivers",
                   r->storage_ra_ips);
    else
        add_advice(r,
                   "data cold (%.0f%% in the page cache) and the read-ahead off: a worker reading "
                   "for itself waits %.2f ms per image (%.0f%% fewer images/s than warm); the "
                   "default read-ahead (without --readahead 0) reads ahead of the workers",
                   100 * r->resident_frac, wait_ms, slower);
}

/* The "bottleneck:" line of the text and HTML output.  r->bottleneck is
 * the slowest input stage (JSON "bottleneck"); when a --gpu-rate is given
 * and the input keeps up, the run is bound by the consumer instead, and
 * the line says so rather than naming a stage the verdict clears. */
const char *doctor_headline(const doctor_result *r, char *buf, size_t n)
{
    if (r->gpu_rate > 0 && r->deliverable_ips >= r->gpu_rate)
        snprintf(buf, n, "consumer (training compute); the input keeps up (its slowest stage: %s)",
                 r->bottleneck);
    else
        snprintf(buf, n, "%s", r->bottleneck);
    return buf;
}

static void diagnose(doctor_result *r)
{
    /* Seconds of CPU per image on one core.  Reading is left out: its time
     * is mostly waiting for storage, which stage 1 measures on its own. */
    double per_img_cpu = r->decode_s + r->transform_s;
    r->decode_ips = r->decode_s > 0 ? r->workers / r->decode_s : 0;
    r->transform_ips = r->transform_s > 0 ? r->workers / r->transform_s : 0;
    r->cpu_ips = per_img_cpu > 0 ? r->workers / per_img_cpu : 0;
    /* With the read-ahead on, cold reads come at its rate, not the
     * workers' own (stage 1 run both ways). */
    double st = r->storage_ra_ips > r->storage_ips ? r->storage_ra_ips : r->storage_ips;
    uint32_t readers = r->storage_ra_ips > r->storage_ips ? (r->ra_depth < 64 ? r->ra_depth : 64)
                                                         : r->workers;
    r->storage_ceiling_ips = st;
    r->deliverable_ips = r->pipeline_ips < st ? r->pipeline_ips : st;
    if (st < r->cpu_ips && r->cache_on && r->cache_hit_rate >= 0 &&
        r->cache_hit_rate < 0.9)
        snprintf(r->bottleneck, sizeof r->bottleneck, "cache"); /* cache_stage says why */
    else if (st < r->cpu_ips)
        snprintf(r->bottleneck, sizeof r->bottleneck, "storage");
    else if (r->decode_s >= r->transform_s)
        snprintf(r->bottleneck, sizeof r->bottleneck, "decode");
    else
        snprintf(r->bottleneck, sizeof r->bottleneck, "transform");
    if (r->gpu_rate > 0) {
        r->gpus_fed = (int)(r->deliverable_ips / (0.9 * r->gpu_rate));
        if (r->deliverable_ips >= r->gpu_rate)
            snprintf(r->verdict, sizeof r->verdict,
                     "input keeps up: %.0f images/s can keep %d GPU(s) at %.0f images/s each at "
                     ">= 90%% busy; the bottleneck is the consumer (training compute)",
                     r->deliverable_ips, r->gpus_fed, r->gpu_rate);
        else
            snprintf(r->verdict, sizeof r->verdict,
                     "GPU will starve: %.0f images/s delivered vs %.0f needed per GPU (%.0f%% busy "
                     "at best); the bottleneck is %s",
                     r->deliverable_ips, r->gpu_rate, 100.0 * r->deliverable_ips / r->gpu_rate,
                     r->bottleneck);
    } else {
        snprintf(r->verdict, sizeof r->verdict,
                 "this machine can deliver about %.0f images/s; the bottleneck is %s",
                 r->deliverable_ips, r->bottleneck);
    }

    collect_warnings(r);
    if (r->nwarnings) {
        size_t l = strlen(r->verdict);
        snprintf(r->verdict + l, sizeof r->verdict - l,
                 ". WARNING: %s; these ceilings describe only the readable data",
                 r->storage_errors && (r->cpu_corrupt || r->pipeline_corrupt)
                     ? "reads failed and corrupt samples were skipped"
                 : r->storage_errors ? "storage reads failed"
                                     : "corrupt samples were skipped");
    }

    /* Advice tied to what was measured. */
    if (!strcmp(r->bottleneck, "storage")) {
        if (!strcmp(r->format, "tree")) /* many small files */
            add_advice(r,
                       "pack the files into shards (chute pack %s OUT): one large file reads "
                       "sequentially instead of %.0f small opens+reads per second",
                       r->source, r->storage_ips);
        add_advice(r,
                   "storage delivers %.0f images/s (%.0f MB/s) cold with %u readers, %.1fx less "
                   "than the CPUs could decode: put a local NVMe or RAM cache tier in front of it, "
                   "or use faster storage (check it with chute iobench)",
                   st, st == r->storage_ips ? r->storage_mbs : r->storage_ra_mbs, readers,
                   st > 0 ? r->cpu_ips / st : 0);
        if (r->read_p99_ms > 5)
            add_advice(r,
                       "read latency p99 is %.1f ms: more reads in flight (more workers) hide "
                       "latency on remote storage",
                       r->read_p99_ms);
    } else if (strcmp(r->bottleneck, "cache")) { /* cache: advice in cache_stage */
        if (r->workers < r->cores)
            add_advice(r, "only %u of %u cores work on the input: use --workers %u", r->workers,
                       r->cores, r->cores);
        if (!strcmp(r->bottleneck, "decode"))
            add_advice(r,
                       "JPEG decode costs %.2f ms per image per core (%.0f%% of CPU time): "
                       "pre-resize the dataset once (e.g. shorter side 256-320 px) so every epoch "
                       "decodes fewer pixels (now %.0f kpx decoded per image on average)",
                       r->decode_s * 1e3, 100 * r->decode_s / (r->decode_s + r->transform_s + r->read_cpu_s),
                       r->mean_decoded_px / 1e3);
        else
            add_advice(r,
                       "the transform costs %.2f ms per image per core: emit uint8 (--dtype "
                       "uint8) and normalize on the GPU, or use a smaller output size",
                       r->transform_s * 1e3);
        add_advice(r, "more CPU cores scale this linearly: each core adds about %.0f images/s",
                   per_img_cpu > 0 ? 1.0 / per_img_cpu : 0);
    }
    if (r->pipeline_ips < 0.75 * (r->cpu_ips < r->storage_warm_ips ? r->cpu_ips : r->storage_warm_ips))
        add_advice(r,
                   "the full pipeline reached only %.0f of the %.0f images/s its stages allow: "
                   "other processes may compete for the CPUs",
                   r->pipeline_ips, r->cpu_ips);
    if (r->gpu_rate > 0 && r->deliverable_ips < r->gpu_rate)
        add_advice(r, "to feed one GPU at %.0f images/s you need about %.1fx the current input rate",
                   r->gpu_rate, r->gpu_rate / (r->deliverable_ips > 0 ? r->deliverable_ips : 1));
}

/* A measuring stage failed (an I/O error is never skipped: the loader
 * retries, then stops).  Say why, and what the stages before it found, so
 * a half-unreadable dataset is never reported as a clean, fast one. */
static int stage_failed(const doctor_result *r, const char *stage, const char *why, int json)
{
    if (json) {
        printf("{\"system\":\"chute\",\"failed\":true,\"failed_stage\":\"%s\",\"error\":", stage);
        cli_json_str(stdout, why);
        printf(",\"storage_reads\":%llu,\"storage_read_errors\":%llu,\"storage_first_error\":",
               (unsigned long long)r->storage_samples, (unsigned long long)r->storage_errors);
        cli_json_str(stdout, r->storage_errors ? r->storage_first_error : "");
        printf("}\n");
    }
    fprintf(stderr, "chute doctor: %s stage stopped: %s\n", stage, why);
    if (r->storage_errors)
        fprintf(stderr,
                "chute doctor: WARNING storage: %llu of %llu reads failed (first: %s)\n",
                (unsigned long long)r->storage_errors, (unsigned long long)r->storage_samples,
                r->storage_first_error);
    return 1;
}

int cmd_doctor(int argc, char **argv)
{
    doctor_result *r = calloc(1, sizeof *r);
    if (!r)
        return 1;
    chute_loader_options o = {0};
    int json = 0;
    chute_dataset_options dopt = {0};
    uint64_t gpu_rate = 0;
    const char *report = NULL, *time_s = "5s";
    /* The loader's rows come from the option table
     * (src/common/loader_options.def); these are doctor's own. */
    const cli_opt own[] = {
        {"--gpu-rate", CLI_U64, &gpu_rate, NULL, 1, 100000000,
         "images/s one GPU consumes (e.g. 2500 for ResNet-50 on an A100, 3000 on an H100)"},
        {"--report", CLI_STR, &report, NULL, 0, 0, "write an HTML report with charts to this file"},
        {"--time", CLI_STR, &time_s, NULL, 0, 0, "time per measurement (default 5s)"},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "print one JSON object"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    cli_opt opts[CLI_LOADER_OPTS_MAX + CLI_DATASET_OPTS_MAX + sizeof own / sizeof own[0]];
    cli_opt_text text[CLI_LOADER_OPTS_MAX + CLI_DATASET_OPTS_MAX];
    int nl = cli_loader_opts(&o, opts, text, CLI_LOADER_OPTS_MAX);
    nl += cli_dataset_opts(&dopt, opts + nl, text + nl, CLI_DATASET_OPTS_MAX);
    memcpy(opts + nl, own, sizeof own);
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("doctor", "SOURCE [options]", opts, argc, argv, pos, 1, &np);
    if (rc) {
        free(r);
        return rc == 1 ? 0 : 2;
    }
    double secs = cli_parse_duration(time_s);
    if (np != 1 || secs <= 0) {
        fprintf(stderr, np != 1 ? "chute doctor: need SOURCE (see --help)\n"
                                : "chute doctor: --time needs a duration like 5s\n");
        free(r);
        return 2;
    }
    if (report && doctor_report_path_ok(report) != 0) {
        free(r);
        return 2;
    }
    int transform = (int)o.transform; /* checked by the parser: 0..2 */
    uint32_t delay_us = dopt.read_delay_us;
    r->cores = (uint32_t)ch_online_cores();
    if (!o.workers)
        o.workers = chute_default_workers(NULL, 0); /* the library's default */
    r->workers = o.workers;
    r->gpu_rate = (double)gpu_rate;
    snprintf(r->source, sizeof r->source, "%s", pos[0]);
    const ch_source_ops *src_ops = ch_source_for(pos[0]);
    snprintf(r->source_kind, sizeof r->source_kind, "%s", src_ops->name);
    r->source_remote = src_ops != &ch_source_local;
    static const char *tn[] = {"train", "eval", "none"};
    snprintf(r->transform, sizeof r->transform, "%s", tn[transform]);

    chute_error err = {0};
    chute_dataset *ds = NULL;
    if (chute_dataset_open_ex(pos[0], &dopt, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "chute doctor: %s\n", err.message);
        free(r);
        return 1;
    }
    snprintf(r->format, sizeof r->format, "%s", chute_dataset_format_name(ds));
    r->samples = chute_dataset_size(ds);
    r->read_delay_us = delay_us;
    cli_gpu *gpu = cli_gpu_open();
    if (gpu)
        snprintf(r->gpu_name, sizeof r->gpu_name, "%s", cli_gpu_name(gpu));
    int quiet = json;
    if (!quiet)
        fprintf(stderr, "doctor: 1/4 storage (cold reads, %u threads)...\n", o.workers);
    measure_storage(ds, o.workers, secs, r);
    /* Stage 1 again with the read-ahead's reads in flight (local sources
     * whose format locates samples, as the loader's read-ahead needs): the
     * cold ceiling a run with the default options gets.  Its threads
     * engine's reader count, min(depth, 64); io_uring keeps as many reads
     * in flight from one thread. */
    {
        chute_loader_options ores;
        chute_error rerr = {0};
        if (ch_loader_options_resolve(&o, &ores, &rerr) == CHUTE_OK && !r->source_remote &&
            ds->fmt->locate && ores.readahead > 0) {
            r->ra_depth = ores.readahead;
            uint32_t th = ores.readahead < 64 ? ores.readahead : 64;
            doctor_result *t = calloc(1, sizeof *t);
            if (t) {
                if (!quiet)
                    fprintf(stderr, "doctor: 1/4 storage again with the read-ahead (cold reads, "
                                    "%u in flight)...\n", th);
                if (measure_storage(ds, th, secs, t) == 0) {
                    r->storage_ra_ips = t->storage_ips;
                    r->storage_ra_mbs = t->storage_mbs;
                }
                free(t);
            }
        }
    }
    if (r->source_remote)
        snprintf(r->storage_method, sizeof r->storage_method,
                 "remote %s source: every read a request (no page cache to evict), %u reader "
                 "thread(s), shuffled order",
                 r->source_kind, o.workers);

    if (!quiet)
        fprintf(stderr, "doctor: 2/4 + 3/4 decode and transform per core (1 worker)...\n");
    chute_loader_options o1 = o;
    o1.workers = 1;
    run_out one;
    if (run_pipeline(ds, &o1, secs, NULL, NULL, &one) != 0) {
        stage_failed(r, "decode/transform", one.err, json);
        chute_dataset_close(ds);
        cli_gpu_close(gpu);
        free(r);
        return 1;
    }
    uint64_t items = one.st.decode.items ? one.st.decode.items : 1;
    r->decode_s = one.st.decode.busy_ns / 1e9 / items;
    r->transform_s = one.st.transform.busy_ns / 1e9 / (one.st.transform.items ? one.st.transform.items : 1);
    /* Warm reads: what reading costs a worker once the bytes are cached. */
    r->read_cpu_s = one.st.read.busy_ns / 1e9 / (one.st.read.items ? one.st.read.items : 1);
    r->storage_warm_ips = r->read_cpu_s > 0 ? r->workers / r->read_cpu_s : 1e12;
    r->mean_bytes = one.st.read.items ? (double)one.st.read.bytes / one.st.read.items : 0;
    r->mean_decoded_px = one.st.decode.items ? one.st.decode.bytes / 3.0 / one.st.decode.items : 0;
    r->cpu_corrupt = one.st.corrupt;
    r->cpu_samples = one.st.samples;
    snprintf(r->skip_example, sizeof r->skip_example, "%s", one.skip_msg);

    if (!quiet)
        fprintf(stderr, "doctor: 4/4 full pipeline (%u workers)...\n", o.workers);
    run_out full;
    if (run_pipeline(ds, &o, secs, r, gpu, &full) != 0) {
        stage_failed(r, "pipeline", full.err, json);
        chute_dataset_close(ds);
        cli_gpu_close(gpu);
        free(r);
        return 1;
    }
    r->pipeline_ips = full.ips;
    r->pipeline_wait = full.wait_frac;
    r->read_p50_ms = full.st.read_lat_p50_ns / 1e6;
    r->read_p99_ms = full.st.read_lat_p99_ns / 1e6;
    r->pipeline_fill_avg = full.st.batches ? (double)full.st.queue_fill_sum / full.st.batches : 0;
    r->queue_capacity = full.st.queue_capacity;
    r->pipeline_corrupt = full.st.corrupt;
    r->pipeline_samples = full.st.samples;
    if (!r->skip_example[0])
        snprintf(r->skip_example, sizeof r->skip_example, "%s", full.skip_msg);
    if (gpu) {
        int idle = 0, n = 0;
        for (int i = 0; i < r->nseries; i++)
            if (r->series[i].gpu_util >= 0) {
                n++;
                idle += r->series[i].gpu_util < 5;
            }
        r->gpu_idle_frac = n ? (double)idle / n : -1;
    } else {
        r->gpu_idle_frac = -1;
    }
    r->cache_on = dopt.cache_dir || dopt.cache_ram_bytes;
    cli_tier_diff(&one.st, &full.st, &r->cache_st); /* stage 4's lookups alone */
    r->cache_hit_rate = cli_tier_hit_rate(&r->cache_st);
    diagnose(r);
    r->cache_bottleneck = !strcmp(r->bottleneck, "cache");
    cache_stage(r);
    source_stage(r);
    cold_note(r);
    /* The last hop: what a batch costs to reach the GPU (GPU hosts only). */
    char h2d_why[512];
    if (cli_h2d_measure(64u << 20, &r->h2d_pinned_gbs, &r->h2d_pageable_gbs, h2d_why,
                        sizeof h2d_why) == 0 &&
        r->h2d_pageable_gbs > 0 && r->h2d_pinned_gbs > 1.5 * r->h2d_pageable_gbs)
        add_advice(r, "pinned host memory copies to the GPU at %.1f GB/s against %.1f GB/s "
                      "pageable: a loader with device=\"cuda\" pins its batches and sends "
                      "uint8 pixels (a quarter of float32's bytes)",
                   r->h2d_pinned_gbs, r->h2d_pageable_gbs);

    if (json) {
        doctor_print_json(stdout, r);
    } else {
        printf("chute doctor: %s (%s, %llu samples, transform %s, %u workers on %u cores)\n",
               r->source, r->format, (unsigned long long)r->samples,
               r->transform, r->workers, r->cores);
        printf("  storage    %8.0f images/s  %7.1f MB/s   %s%s\n", r->storage_ips, r->storage_mbs,
               r->storage_method, delay_us ? " + injected latency" : "");
        if (r->storage_ra_ips > 0)
            printf("  + readahead %7.0f images/s  %7.1f MB/s   the same, %u reads in flight as the "
                   "read-ahead keeps (readahead %u; --readahead 0 turns it off)\n",
                   r->storage_ra_ips, r->storage_ra_mbs, r->ra_depth < 64 ? r->ra_depth : 64,
                   r->ra_depth);
        if (r->resident_frac >= 0)
            printf("  page cache %7.0f%%  of the data was cached when doctor started (mincore, "
                   "%u file(s)): a training run started now is %s\n",
                   100 * r->resident_frac, r->resident_files,
                   r->resident_frac < 0.5 ? "COLD (reads from storage)" : "warm");
        if (r->source_remote)
            printf("  source     %8.0f images/s  %7.1f MB/s   remote %s: read latency p50 %.1f ms, "
                   "p99 %.1f ms (loader's read histogram)%s\n",
                   r->storage_ips, r->storage_mbs, r->source_kind, r->read_p50_ms, r->read_p99_ms,
                   r->source_bottleneck ? "  <- bottleneck" : "");
        if (r->cache_on) {
            printf("  cache      ");
            cli_tier_text(stdout, &r->cache_st);
            printf(" (pipeline stage)%s\n", r->cache_bottleneck ? "  <- bottleneck" : "");
        }
        printf("  decode     %8.0f images/s  (%.0f per core, %.2f ms/image)\n", r->decode_ips,
               r->decode_s > 0 ? 1 / r->decode_s : 0, r->decode_s * 1e3);
        printf("  transform  %8.0f images/s  (%.0f per core, %.2f ms/image)\n", r->transform_ips,
               r->transform_s > 0 ? 1 / r->transform_s : 0, r->transform_s * 1e3);
        printf("  cpu total  %8.0f images/s  (decode+transform on %u workers)\n", r->cpu_ips,
               r->workers);
        printf("  pipeline   %8.0f images/s  measured, warm cache, no training step; "
               "consumer waited %.0f%%\n",
               r->pipeline_ips, 100 * r->pipeline_wait);
        if (r->gpu_idle_frac >= 0)
            printf("  GPU        %s idle in %.0f%% of samples\n", r->gpu_name, 100 * r->gpu_idle_frac);
        if (r->h2d_pinned_gbs > 0)
            printf("  H2D        %.1f GB/s pinned, %.1f GB/s pageable (cuda:0, 64 MiB copies)\n",
                   r->h2d_pinned_gbs, r->h2d_pageable_gbs);
        for (int i = 0; i < r->nwarnings; i++)
            printf("  WARNING    %s\n", r->warnings[i]);
        char head[128];
        printf("bottleneck: %s\n%s\n", doctor_headline(r, head, sizeof head), r->verdict);
        for (int i = 0; i < r->nadvice; i++)
            printf("  - %s\n", r->advice[i]);
    }
    int ret = 0;
    if (report) {
        if (doctor_write_report(report, r) != 0) {
            fprintf(stderr, "chute doctor: cannot write %s\n", report);
            ret = 1;
        } else if (!json) {
            printf("report: %s\n", report);
        }
    }
    chute_dataset_close(ds);
    cli_gpu_close(gpu);
    free(r);
    return ret;
}
