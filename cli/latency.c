/*
 * latency.c — `chute bench --latency SOURCE`: the inference session
 * (chute_infer_*) under an open-loop request stream.
 *
 * Why open loop.  A closed-loop driver (send, wait, send the next) slows
 * down exactly when the system does, so the requests that would have
 * waited are never sent and the tail looks better than it is ("coordinated
 * omission").  Here arrival times are fixed before the run — a Poisson
 * process at --rate, from --seed — and every request's latency is counted
 * from its *scheduled* arrival, so a submitter that falls behind (or a
 * full queue, counted as a miss) shows up in the percentiles.
 *
 * The run also measures, in the same process and on the same images, what
 * one request costs alone: decode + transform of each image through a
 * session with one worker and max_batch 1, closed loop (its histograms
 * give the mean).  And the first request after create with batch buffers
 * sized for the batch (the default) and with the training loader's 2 MiB
 * pre-faulted ring (`pretouch`), create time included, since a server
 * spawns sessions on demand.
 *
 * --find-max searches the highest rate whose p99 stays under --budget-ms
 * (bisection between 0 and twice the workers' throughput estimate, each
 * probe a run of --probe-duration), then reruns at half of it: the
 * figure bench/latency.py compares with the single-image time.
 */
#include "cli.h"
#include "util.h"
#include "common/common.h"
#include "common/loader_options.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct lat_cfg {
    chute_infer_options io;
    uint8_t **img;
    size_t *len;
    uint32_t nimg;
    uint64_t seed;
    uint64_t *idle_ns;        /* per image: its decode+transform on an idle session */
} lat_cfg;

/* Percentiles of one per-request quantity, in ms (INFINITY: a refused
 * request, which missed any budget). */
typedef struct pcts {
    double p50, p99, p999, max;
} pcts;

typedef struct lat_result {
    double rate, duration_s;
    uint64_t requests, rejected, failed;
    double p50_ms, p99_ms, p999_ms, max_ms, mean_ms;
    double late_submit_p99_ms; /* how far behind schedule submits were */
    /* Per request, from the session's own timestamps
     * (chute_infer_batch_timing): */
    pcts added;               /* total - the idle time of the same image */
    pcts late;                /* submit - scheduled arrival (the generator) */
    pcts queue;               /* worker start - submit (the generator's send) */
    pcts service;             /* done - worker start: decode+transform under load */
    pcts deliver;             /* poll handed it out - done */
    /* What the tail consists of: over the requests whose added latency is
     * at or above its p99, the mean of each part (generator late, queue
     * wait, decode+transform beyond the image's idle time, hand-out);
     * they add up to those requests' mean added latency. */
    struct {
        uint64_t n;
        double added, late, queue, extra, deliver;
    } tail;
    chute_infer_stats st;
} lat_result;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Poisson arrivals at `rate` per second for `dur` seconds, in ns from 0. */
static uint64_t *arrivals(double rate, double dur, uint64_t seed, uint64_t *out_n)
{
    uint64_t cap = (uint64_t)(rate * dur * 1.5) + 64, n = 0, st = seed ^ 0x6c6174656e6379ull;
    uint64_t *t = malloc(cap * sizeof *t);
    double now = 0;
    while (t) {
        double u = ((splitmix(&st) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        now += -log(u) / rate;
        if (now >= dur)
            break;
        if (n == cap) {
            uint64_t *g = realloc(t, 2 * cap * sizeof *t);
            if (!g) {
                free(t);
                return NULL;
            }
            t = g;
            cap *= 2;
        }
        t[n++] = (uint64_t)(now * 1e9);
    }
    *out_n = n;
    return t;
}

typedef struct driver {
    chute_infer *s;
    const lat_cfg *c;
    const uint64_t *at;
    uint64_t n, t0;
    uint64_t *lat;            /* per request: ns from scheduled arrival; UINT64_MAX = missed */
    uint64_t *late;           /* per request: submit time - scheduled time */
    uint64_t rejected;
} driver;

/* Sleep to an absolute time (the schedule never drifts: a late wakeup
 * does not push the next arrival back), then spin at most the last
 * SPIN_NS: with the thread's timer slack at 1 ns the kernel wakes it
 * within tens of microseconds, and a short spin costs the workers far
 * less CPU than the 50 us spin before every request did.  How late each
 * submit still was is recorded and reported (late_*). */
#define SPIN_NS 20000ull
#define GEN_SLICE_US 100u /* the request path: generator and poller */
static void sleep_until(uint64_t t)
{
    if (t > SPIN_NS) {
        uint64_t w = t - SPIN_NS;
        struct timespec ts = {(time_t)(w / 1000000000ull), (long)(w % 1000000000ull)};
        while (mono_ns() < w && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
    while (mono_ns() < t)
        ;
}

static void *submit_main(void *p)
{
    driver *d = p;
#ifdef PR_SET_TIMERSLACK
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* this thread only */
#endif
    /* The shortest scheduler slice (Linux 6.12+; a no-op elsewhere): woken
     * for an arrival while the cores run decode workers or other
     * processes, the generator preempts at once instead of waiting out
     * the running thread's slice (1.4 ms on 2 cores).  The arrival times
     * are the same; they only go out closer to them, and how late each
     * still went out counts (late_*).  Its CPU share is unchanged.  The
     * polling thread does the same (run_rate). */
    ch_thread_slice(GEN_SLICE_US);
    for (uint64_t i = 0; i < d->n; i++) {
        uint64_t due = d->t0 + d->at[i];
        sleep_until(due);
        uint32_t k = (uint32_t)(i % d->c->nimg);
        d->late[i] = mono_ns() - due;
        if (chute_infer_submit(d->s, d->c->img[k], d->c->len[k], i, 0, NULL) != CHUTE_OK) {
            d->lat[i] = UINT64_MAX; /* a refused request missed any budget */
            __atomic_fetch_add(&d->rejected, 1, __ATOMIC_RELAXED);
        }
    }
    chute_infer_close(d->s);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(const uint64_t *sorted, uint64_t n, double q)
{
    if (!n)
        return 0;
    uint64_t i = (uint64_t)ceil(q * (double)n);
    i = i ? i - 1 : 0;
    if (i >= n)
        i = n - 1;
    return sorted[i] == UINT64_MAX ? INFINITY : sorted[i] / 1e6;
}

/* Sorts v. */
static void pcts_of(pcts *p, uint64_t *v, uint64_t n)
{
    qsort(v, n, sizeof *v, cmp_u64);
    p->p50 = pct_ms(v, n, 0.50);
    p->p99 = pct_ms(v, n, 0.99);
    p->p999 = pct_ms(v, n, 0.999);
    p->max = pct_ms(v, n, 1.0);
}

/* r->tail from the unsorted per-request arrays (before pcts_of sorts
 * them); requests refused or never run are left out. */
static void tail_of(lat_result *r, const uint64_t *added, const uint64_t *late, const uint64_t *qw,
                    const uint64_t *sv, const uint64_t *dl, const lat_cfg *c,
                    uint64_t n)
{
    uint64_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp || !n) {
        free(tmp);
        return;
    }
    memcpy(tmp, added, n * sizeof *tmp);
    qsort(tmp, n, sizeof *tmp, cmp_u64);
    uint64_t i99 = (uint64_t)ceil(0.99 * (double)n);
    uint64_t thr = tmp[(i99 ? i99 - 1 : 0) < n ? (i99 ? i99 - 1 : 0) : n - 1];
    free(tmp);
    long double sa = 0, sl = 0, sq = 0, se = 0, sd = 0;
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (added[i] < thr || added[i] == UINT64_MAX || sv[i] == UINT64_MAX)
            continue;
        uint64_t idle = c->idle_ns[i % c->nimg];
        k++;
        sa += added[i];
        sl += late[i];
        sq += qw[i];
        se += (long double)sv[i] - (long double)idle;
        sd += dl[i];
    }
    r->tail.n = k;
    if (k) {
        r->tail.added = (double)(sa / k) / 1e6;
        r->tail.late = (double)(sl / k) / 1e6;
        r->tail.queue = (double)(sq / k) / 1e6;
        r->tail.extra = (double)(se / k) / 1e6;
        r->tail.deliver = (double)(sd / k) / 1e6;
    }
}

static int run_rate(const lat_cfg *c, double rate, double dur, lat_result *r, chute_error *err)
{
    memset(r, 0, sizeof *r);
    r->rate = rate;
    r->duration_s = dur;
    uint64_t n = 0;
    uint64_t *at = arrivals(rate, dur, c->seed, &n);
    if (!at)
        return CHUTE_ENOMEM;
    driver d = {0};
    d.c = c;
    d.at = at;
    d.n = n;
    d.lat = calloc(n ? n : 1, sizeof *d.lat);
    d.late = calloc(n ? n : 1, sizeof *d.late);
    /* Per request, filled by the polling thread: added, queue, service,
     * deliver (all allocated before the run starts). */
    uint64_t *per = calloc(4 * (n ? n : 1), sizeof *per);
    uint64_t *added = per, *qw = per ? per + n : NULL, *sv = per ? per + 2 * n : NULL,
             *dl = per ? per + 3 * n : NULL;
    int rc = d.lat && d.late && per ? chute_infer_create(&c->io, &d.s, err) : CHUTE_ENOMEM;
    if (rc != CHUTE_OK) {
        free(at);
        free(d.lat);
        free(d.late);
        free(per);
        return rc;
    }
    for (uint64_t i = 0; i < n; i++)
        added[i] = qw[i] = sv[i] = dl[i] = UINT64_MAX; /* refused unless handed out */
    d.t0 = mono_ns() + 20000000ull; /* 20 ms for the threads to start */
    pthread_t th;
    if (pthread_create(&th, NULL, submit_main, &d) != 0) {
        chute_infer_destroy(d.s);
        free(at);
        free(d.lat);
        free(d.late);
        free(per);
        snprintf(err->message, sizeof err->message, "cannot start the submitting thread");
        return CHUTE_ENOMEM;
    }
    /* The polling thread is the request path too (it stands for a
     * server's thread that hands tensors to the model): the same short
     * slice as the generator, asked for after the session's workers and
     * the generator were created (threads inherit their creator's slice)
     * and given back after the run. */
    ch_thread_slice(GEN_SLICE_US);
    chute_infer_batch *b;
    while ((rc = chute_infer_poll(d.s, -1, &b)) == CHUTE_OK) {
        uint64_t now = mono_ns();
        chute_infer_view v;
        chute_infer_batch_view(b, &v);
        for (uint32_t k = 0; k < v.count; k++) {
            uint64_t i = v.ids[k];
            uint64_t due = d.t0 + at[i];
            d.lat[i] = now - due;
            r->failed += v.status[k] != CHUTE_OK;
            chute_infer_timing tm;
            uint64_t idle = c->idle_ns[i % c->nimg];
            added[i] = d.lat[i] > idle ? d.lat[i] - idle : 0;
            if (chute_infer_batch_timing(b, k, &tm) == CHUTE_OK && tm.start_ns) {
                /* From the generator's own reading (late), not the
                 * session's submit stamp taken a moment later inside
                 * chute_infer_submit: the parts then add up exactly to
                 * the added latency (the call's own time is queue wait). */
                uint64_t sent = due + d.late[i];
                qw[i] = tm.start_ns > sent ? tm.start_ns - sent : 0;
                sv[i] = tm.done_ns - tm.start_ns;
                dl[i] = now - tm.done_ns;
            }
        }
        chute_infer_batch_release(b);
    }
    ch_thread_slice_default();
    pthread_join(th, NULL);
    chute_infer_get_stats(d.s, &r->st);
    chute_infer_destroy(d.s);
    qsort(d.lat, n, sizeof *d.lat, cmp_u64);
    r->requests = n;
    r->rejected = d.rejected;
    r->p50_ms = pct_ms(d.lat, n, 0.50);
    r->p99_ms = pct_ms(d.lat, n, 0.99);
    r->p999_ms = pct_ms(d.lat, n, 0.999);
    r->max_ms = pct_ms(d.lat, n, 1.0);
    long double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += d.lat[i] == UINT64_MAX ? 0 : d.lat[i];
    r->mean_ms = n > r->rejected ? (double)(sum / (n - r->rejected)) / 1e6 : 0;
    tail_of(r, added, d.late, qw, sv, dl, c, n);
    pcts_of(&r->late, d.late, n); /* sorts d.late */
    r->late_submit_p99_ms = pct_ms(d.late, n, 0.99);
    pcts_of(&r->added, added, n);
    pcts_of(&r->queue, qw, n);
    pcts_of(&r->service, sv, n);
    pcts_of(&r->deliver, dl, n);
    free(at);
    free(d.lat);
    free(d.late);
    free(per);
    return rc == CHUTE_END ? CHUTE_OK : rc;
}

/* The reference: each image alone, one at a time, through a 1-worker,
 * batch-of-1 session (closed loop: nothing else queued or running in the
 * session).  Each image's idle time is the median, over SINGLE_ROUNDS
 * rounds, of its done_ns - start_ns (chute_infer_batch_timing): exactly
 * its decode + transform, no queueing or hand-off.  single_ms = the mean
 * of those over the image set; p50/p99 their spread (image sizes vary). */
#define SINGLE_ROUNDS 3
static int single_image(lat_cfg *c, double *out_ms, double *p50_ms, double *p99_ms,
                        chute_error *err)
{
    chute_infer_options o = c->io;
    o.workers = 1;
    o.max_batch = 1;
    chute_infer *s = NULL;
    uint64_t *t = calloc((size_t)c->nimg * SINGLE_ROUNDS, sizeof *t);
    uint64_t *sorted = calloc(c->nimg, sizeof *sorted);
    int rc = t && sorted ? chute_infer_create(&o, &s, err) : CHUTE_ENOMEM;
    /* a warm-up pass first (first-touch of the worker's buffers) */
    for (uint32_t r = 0; r <= SINGLE_ROUNDS && rc == CHUTE_OK; r++)
        for (uint32_t k = 0; k < c->nimg && rc == CHUTE_OK; k++) {
            chute_infer_batch *b;
            rc = chute_infer_submit(s, c->img[k], c->len[k], k, 0, err);
            if (rc == CHUTE_OK)
                rc = chute_infer_poll(s, -1, &b);
            if (rc != CHUTE_OK)
                break;
            chute_infer_timing tm;
            chute_infer_view v;
            chute_infer_batch_view(b, &v);
            if (v.status[0] != CHUTE_OK) {
                rc = v.status[0];
                snprintf(err->message, sizeof err->message, "image %u: %s", k,
                         chute_infer_batch_errmsg(b, 0));
            } else if (r > 0 && chute_infer_batch_timing(b, 0, &tm) == CHUTE_OK) {
                t[(size_t)k * SINGLE_ROUNDS + r - 1] = tm.done_ns - tm.start_ns;
            }
            chute_infer_batch_release(b);
        }
    chute_infer_destroy(s);
    if (rc == CHUTE_OK) {
        long double sum = 0;
        for (uint32_t k = 0; k < c->nimg; k++) {
            uint64_t *m = t + (size_t)k * SINGLE_ROUNDS;
            qsort(m, SINGLE_ROUNDS, sizeof *m, cmp_u64);
            c->idle_ns[k] = sorted[k] = m[SINGLE_ROUNDS / 2];
            sum += c->idle_ns[k];
        }
        qsort(sorted, c->nimg, sizeof *sorted, cmp_u64);
        *out_ms = (double)(sum / c->nimg) / 1e6;
        *p50_ms = pct_ms(sorted, c->nimg, 0.50);
        *p99_ms = pct_ms(sorted, c->nimg, 0.99);
    }
    free(t);
    free(sorted);
    return rc;
}

/* Create time and first-request latency (closed loop) with or without
 * the loader-style pre-faulted 2 MiB ring. */
static int first_request(const lat_cfg *c, int pretouch, double *create_ms, double *first_ms,
                         chute_error *err)
{
    chute_infer_options o = c->io;
    o.pretouch = pretouch;
    o.max_batch = 1; /* no batching deadline to wait out */
    o.queue_capacity = 4; /* a few slots (6): pretouch costs 2 MiB each */
    chute_infer *s = NULL;
    uint64_t t0 = mono_ns();
    int rc = chute_infer_create(&o, &s, err);
    uint64_t t1 = mono_ns();
    if (rc)
        return rc;
    chute_infer_batch *b;
    rc = chute_infer_submit(s, c->img[0], c->len[0], 0, 0, err);
    if (rc == CHUTE_OK)
        rc = chute_infer_poll(s, -1, &b);
    uint64_t t2 = mono_ns();
    if (rc == CHUTE_OK)
        chute_infer_batch_release(b);
    chute_infer_stats st;
    chute_infer_get_stats(s, &st);
    chute_infer_destroy(s);
    *create_ms = (t1 - t0) / 1e6;
    *first_ms = (t2 - t1) / 1e6;
    return rc;
}

static double fin(double v) { return isfinite(v) ? v : -1; }

static void print_result(FILE *f, const char *name, const lat_result *r, int json)
{
    if (json) {
        fprintf(f,
                "\"%s\": {\"rate\": %.3f, \"duration_s\": %.3f, \"requests\": %llu, "
                "\"rejected\": %llu, \"failed\": %llu, \"p50_ms\": %.4f, \"p99_ms\": %.4f, "
                "\"p999_ms\": %.4f, \"max_ms\": %.4f, \"mean_ms\": %.4f, "
                "\"late_submit_p99_ms\": %.4f, \"batches\": %llu, \"closed_by_deadline\": %llu, "
                "\"queue_p99_ms\": %.4f, \"decode_p99_ms\": %.4f, \"transform_p99_ms\": %.4f, "
                "\"worker_slice_us\": %u",
                name, r->rate, r->duration_s, (unsigned long long)r->requests,
                (unsigned long long)r->rejected, (unsigned long long)r->failed,
                isfinite(r->p50_ms) ? r->p50_ms : -1, isfinite(r->p99_ms) ? r->p99_ms : -1,
                isfinite(r->p999_ms) ? r->p999_ms : -1, isfinite(r->max_ms) ? r->max_ms : -1,
                r->mean_ms, isfinite(r->late_submit_p99_ms) ? r->late_submit_p99_ms : -1,
                (unsigned long long)r->st.batches, (unsigned long long)r->st.closed_by_deadline,
                r->st.queue.p99_ns / 1e6, r->st.decode.p99_ns / 1e6, r->st.transform.p99_ns / 1e6,
                r->st.worker_slice_us);
        const struct {
            const char *k;
            const pcts *p;
        } part[] = {{"added", &r->added}, {"late", &r->late}, {"queue_wait", &r->queue},
                    {"service", &r->service}, {"deliver", &r->deliver}};
        for (size_t i = 0; i < sizeof part / sizeof *part; i++)
            fprintf(f, ", \"%s_p50_ms\": %.4f, \"%s_p99_ms\": %.4f, \"%s_p999_ms\": %.4f", part[i].k,
                    fin(part[i].p->p50), part[i].k, fin(part[i].p->p99), part[i].k,
                    fin(part[i].p->p999));
        fprintf(f,
                ", \"tail_requests\": %llu, \"tail_added_ms\": %.4f, \"tail_late_ms\": %.4f, "
                "\"tail_queue_wait_ms\": %.4f, \"tail_service_extra_ms\": %.4f, "
                "\"tail_deliver_ms\": %.4f}",
                (unsigned long long)r->tail.n, r->tail.added, r->tail.late, r->tail.queue,
                r->tail.extra, r->tail.deliver);
    } else {
        fprintf(f,
                "%-10s %9.1f req/s  %6llu requests  p50 %8.3f ms  p99 %8.3f ms  p99.9 %8.3f ms"
                "  max %8.3f ms  rejected %llu  failed %llu\n",
                name, r->rate, (unsigned long long)r->requests, r->p50_ms, r->p99_ms,
                r->p999_ms, r->max_ms, (unsigned long long)r->rejected,
                (unsigned long long)r->failed);
        fprintf(f,
                "%-10s added p50 %.3f / p99 %.3f / p99.9 %.3f ms; p99 of its parts: generator "
                "late %.3f, queue wait %.3f, decode+transform %.3f, hand-out %.3f ms\n",
                "", r->added.p50, r->added.p99, r->added.p999, r->late.p99, r->queue.p99,
                r->service.p99, r->deliver.p99);
        fprintf(f,
                "%-10s the %llu requests at or over the p99 added: mean added %.3f ms = generator "
                "late %.3f + queue wait %.3f + decode+transform over idle %.3f + hand-out %.3f\n",
                "", (unsigned long long)r->tail.n, r->tail.added, r->tail.late, r->tail.queue,
                r->tail.extra, r->tail.deliver);
    }
}

static int parse_pos_double(const char *flag, const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0) || !isfinite(v)) {
        fprintf(stderr, "chute bench --latency: %s %s: want a positive number\n", flag, s);
        return 2;
    }
    *out = v;
    return 0;
}

int cmd_bench_latency(int argc, char **argv)
{
    chute_infer_options io = {0};
    int latency = 0, json = 0, find_max = 0, preset = 0;
    const char *rate_s = NULL, *dur_s = "5", *budget_s = "50", *probe_s = "2", *format = NULL;
    uint32_t nimg = 256, probes = 10;
    uint64_t seed = 1;
    /* The session's options (--size, --max-batch, --unordered, ...) are the
     * table's rows (src/common/infer_options.def), after this command's own. */
    const cli_opt own[] = {
        {"--latency", CLI_FLAG, &latency, NULL, 0, 0, "inference-latency mode (this command)"},
        {"--rate", CLI_STR, &rate_s, NULL, 0, 0, "requests per second, Poisson arrivals (required "
                                                 "unless --find-max)"},
        {"--duration", CLI_STR, &dur_s, NULL, 0, 0, "seconds of arrivals per run (default 5)"},
        {"--budget-ms", CLI_STR, &budget_s, NULL, 0, 0, "--find-max: p99 budget (default 50)"},
        {"--find-max", CLI_FLAG, &find_max, NULL, 0, 0,
         "search the highest rate whose p99 stays under --budget-ms, then run at half of it"},
        {"--probe-duration", CLI_STR, &probe_s, NULL, 0, 0,
         "--find-max: seconds per probe (default 2)"},
        {"--probes", CLI_U32, &probes, NULL, 1, 100, "--find-max: bisection steps (default 10)"},
        {"--seed", CLI_U64, &seed, NULL, 0, UINT64_MAX, "arrival-time seed (default 1)"},
        {"--images", CLI_U32, &nimg, NULL, 1, 100000, "images of SOURCE cycled through (default 256)"},
        {"--format", CLI_STR, &format, NULL, 0, 0, cli_format_help()},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "print one JSON object"},
        {"--preset", CLI_CHOICE, &preset, "batch|latency", 0, 0,
         "batch: the session's defaults (--max-batch, --max-delay-us, ordered); latency: "
         "max batch 1 (each request handed out as soon as it is done) and unordered; "
         "explicit --max-batch wins (default batch)"},
        {NULL, 0, NULL, NULL, 0, 0, NULL, NULL},
    };
    cli_opt opts[sizeof own / sizeof own[0] + CLI_INFER_OPTS_MAX];
    cli_opt_text text[CLI_INFER_OPTS_MAX];
    size_t nown = sizeof own / sizeof own[0] - 1;
    memcpy(opts, own, nown * sizeof *own);
    int ni = cli_infer_opts(&io, opts + nown, text, CLI_INFER_OPTS_MAX);
    opts[nown + (size_t)ni] = own[nown]; /* the terminator */
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("bench --latency", "SOURCE --rate R [options]", opts, argc, argv, pos, 1,
                       &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 1) {
        fprintf(stderr, "chute bench --latency: need SOURCE, a dataset whose images to send\n");
        return 2;
    }
    double rate = 0, dur = 0, budget = 0, probe = 0;
    if ((!rate_s && !find_max)) {
        fprintf(stderr, "chute bench --latency: need --rate R or --find-max\n");
        return 2;
    }
    if ((rate_s && parse_pos_double("--rate", rate_s, &rate)) ||
        parse_pos_double("--duration", dur_s, &dur) ||
        parse_pos_double("--budget-ms", budget_s, &budget) ||
        parse_pos_double("--probe-duration", probe_s, &probe))
        return 2;
    if (rate * dur > 5e7) {
        fprintf(stderr, "chute bench --latency: --rate x --duration over 50 million requests\n");
        return 2;
    }
    if (preset == 1) {
        if (!io.max_batch)
            io.max_batch = 1;
        io.unordered = 1;
    }

    chute_error err = {0};
    chute_dataset *ds = NULL;
    chute_dataset_options dopt = {0};
    dopt.format = format;
    if (chute_dataset_open_ex(pos[0], &dopt, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "chute bench --latency: %s\n", err.message);
        return 1;
    }
    lat_cfg c = {0};
    c.io = io;
    c.seed = seed;
    uint64_t n = chute_dataset_size(ds);
    c.nimg = (uint32_t)(n < nimg ? n : nimg);
    c.img = calloc(c.nimg, sizeof *c.img);
    c.len = calloc(c.nimg, sizeof *c.len);
    int fail = !c.img || !c.len;
    for (uint32_t k = 0; k < c.nimg && !fail; k++) {
        uint64_t sz = chute_dataset_sample_size(ds, k);
        c.img[k] = malloc(sz ? sz : 1);
        if (!c.img[k] || chute_dataset_read(ds, k, c.img[k], sz, &c.len[k], &err) != CHUTE_OK) {
            fprintf(stderr, "chute bench --latency: %s\n", c.img[k] ? err.message : "out of memory");
            fail = 1;
        }
    }
    chute_dataset_close(ds);

    double single_ms = 0, single_p50 = 0, single_p99 = 0, create_ms[2] = {0}, first_ms[2] = {0};
    c.idle_ns = calloc(c.nimg ? c.nimg : 1, sizeof *c.idle_ns);
    fail |= !c.idle_ns;
    lat_result at_rate = {0}, at_half = {0};
    double max_rate = 0;
    int have_rate = 0, have_half = 0;
    if (!fail && (rc = single_image(&c, &single_ms, &single_p50, &single_p99, &err)) != CHUTE_OK) {
        fprintf(stderr, "chute bench --latency: single image: %s\n", err.message);
        fail = 1;
    }
    for (int p = 0; p < 2 && !fail; p++)
        if (first_request(&c, p, &create_ms[p], &first_ms[p], &err) != CHUTE_OK) {
            fprintf(stderr, "chute bench --latency: first request: %s\n", err.message);
            fail = 1;
        }
    if (!fail && rate_s) {
        if (run_rate(&c, rate, dur, &at_rate, &err) != CHUTE_OK) {
            fprintf(stderr, "chute bench --latency: %s\n", err.message);
            fail = 1;
        }
        have_rate = 1;
    }
    uint32_t workers = 1; /* what the sessions use (the default: the CPUs) */
    {
        chute_infer *tmp = NULL;
        if (chute_infer_create(&c.io, &tmp, NULL) == CHUTE_OK) {
            chute_infer_stats st;
            chute_infer_get_stats(tmp, &st);
            workers = st.workers;
            chute_infer_destroy(tmp);
        }
    }
    if (!fail && find_max) {
        double lo = 0, hi = 2.0 * workers * 1000.0 / (single_ms > 0.001 ? single_ms : 0.001);
        for (uint32_t it = 0; it < probes && !fail; it++) {
            double mid = (lo + hi) / 2;
            lat_result r;
            if (run_rate(&c, mid, probe, &r, &err) != CHUTE_OK) {
                fail = 1;
                break;
            }
            int ok = r.rejected == 0 && r.p99_ms <= budget;
            if (!json)
                fprintf(stderr, "probe %5.0f req/s: p99 %.3f ms%s -> %s\n", mid, r.p99_ms,
                        r.rejected ? " (rejections)" : "", ok ? "under budget" : "over");
            if (ok)
                lo = mid;
            else
                hi = mid;
        }
        max_rate = lo;
        if (!fail && max_rate > 0) {
            if (run_rate(&c, max_rate / 2, dur, &at_half, &err) != CHUTE_OK)
                fail = 1;
            have_half = 1;
        }
    }
    for (uint32_t k = 0; k < c.nimg && c.img; k++)
        free(c.img[k]);
    free(c.img);
    free(c.len);
    if (fail) {
        free(c.idle_ns);
        return 1;
    }

    /* The target, at half the max rate: p99 added latency <=
     * TARGET x the single-image decode+transform time. */
    const double TARGET = 2.0;
    double added_ratio = have_half ? at_half.added.p99 / single_ms : NAN;
    double total_ratio = have_half ? (at_half.p99_ms - single_ms) / single_ms : NAN;
    /* What the sessions ran with: the table's defaults where not given. */
    chute_infer_options rio = c.io;
    ch_infer_options_resolve(&c.io, &rio, NULL, NULL);
    if (json) {
        printf("{\"images\": %u, \"workers\": %u, \"preset\": \"%s\", \"max_batch\": %u, "
               "\"max_delay_us\": %u, \"unordered\": %d, \"queue_capacity\": %u, "
               "\"single_image_ms\": %.4f, \"single_image_p50_ms\": %.4f, "
               "\"single_image_p99_ms\": %.4f, \"create_ms\": %.4f, "
               "\"first_request_ms\": %.4f, \"create_ms_pretouch\": %.4f, "
               "\"first_request_ms_pretouch\": %.4f, \"budget_ms\": %.3f, "
               "\"worker_slice_us\": %u, \"transform\": \"%s\"",
               c.nimg, workers, preset ? "latency" : "batch", rio.max_batch,
               rio.max_delay_us, c.io.unordered,
               c.io.queue_capacity, single_ms, single_p50, single_p99, create_ms[0], first_ms[0],
               create_ms[1], first_ms[1], budget, c.io.worker_slice_us,
               rio.transform == CHUTE_TRANSFORM_NONE ? "none" : "eval");
        if (have_rate) {
            printf(", ");
            print_result(stdout, "at_rate", &at_rate, 1);
        }
        if (find_max) {
            printf(", \"max_rate\": %.3f", max_rate);
            if (have_half) {
                printf(", ");
                print_result(stdout, "at_half_max", &at_half, 1);
                printf(", \"p99_over_single\": %.4f", at_half.p99_ms / single_ms);
                printf(", \"added_p99_over_single\": %.4f, \"total_p99_minus_single_over_single\": "
                       "%.4f, \"target_ratio\": %.1f, \"target_met\": %s",
                       fin(added_ratio), fin(total_ratio), TARGET,
                       isfinite(added_ratio) && added_ratio <= TARGET ? "true" : "false");
            }
        }
        /* Each image's idle time (what bench/latency.py's ideal-queue
         * model serves the same arrivals with). */
        printf(", \"single_image_each_ms\": [");
        for (uint32_t k = 0; k < c.nimg; k++)
            printf("%s%.4f", k ? ", " : "", c.idle_ns[k] / 1e6);
        printf("]}\n");
    } else {
        char slice[48] = "the kernel's";
        if (c.io.worker_slice_us)
            snprintf(slice, sizeof slice, "%u us", c.io.worker_slice_us);
        printf("preset %s: max batch %u, deadline %u us, %s, queue capacity %s, %u workers, "
               "worker slice %s\n",
               preset ? "latency" : "batch", rio.max_batch,
               rio.max_delay_us,
               c.io.unordered ? "unordered" : "ordered",
               c.io.queue_capacity ? "as given" : "default", workers, slice);
        printf("single image decode+transform (idle session, 1 worker, one at a time; median of %d "
               "per image): mean %.3f ms over %u images (p50 %.3f, p99 %.3f)\n",
               SINGLE_ROUNDS, single_ms, c.nimg, single_p50, single_p99);
        printf("first request after create: %.3f ms (create %.3f ms); with a pre-faulted 2 MiB "
               "ring: %.3f ms (create %.3f ms)\n",
               first_ms[0], create_ms[0], first_ms[1], create_ms[1]);
        printf("latency of a request = poll handed it out - its scheduled (Poisson) arrival; "
               "added latency = that - the idle decode+transform time of the same image\n");
        if (have_rate)
            print_result(stdout, "rate", &at_rate, 0);
        if (find_max) {
            printf("max rate with p99 <= %.1f ms: %.1f req/s\n", budget, max_rate);
            if (have_half) {
                print_result(stdout, "half max", &at_half, 0);
                printf("p99 at half the max rate / single image: %.2f\n",
                       at_half.p99_ms / single_ms);
                printf("TARGET p99 added latency at half max / single image: %.2f (target <= "
                       "%.1f: %s); (p99 latency - single) / single: %.2f\n",
                       added_ratio, TARGET, added_ratio <= TARGET ? "met" : "missed", total_ratio);
            }
        }
    }
    free(c.idle_ns);
    return 0;
}
