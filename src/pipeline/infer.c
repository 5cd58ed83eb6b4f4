/*
 * infer.c — the inference session: live requests in, transformed tensors
 * out, each within a latency budget.
 *
 * Why a second pipeline.  The training loader (loader.c) is built for
 * throughput over a known list of samples: tasks are positions in an
 * epoch, a batch is always full but for the last one, and the ring's
 * slots are rounded to 2 MiB and pre-faulted because the loader runs for
 * hours.  A request stream has none of that: requests arrive one by one
 * from any thread, nobody knows how many will come, and a batch that waits
 * to be full waits forever at low load.  So here:
 *
 *   - a batch takes requests in submission order and is *closed* when it
 *     holds max_batch of them or when its oldest has waited max_delay_us
 *     (deadline batching, as Triton's max_queue_delay); it is handed out
 *     once every request in it is finished.  Workers start on a request
 *     the moment it is submitted, so batching adds waiting only up to the
 *     deadline, never decode time.
 *   - the deadline is enforced by the polling thread (it sleeps until the
 *     open batch's deadline or a batch is ready, whichever comes first):
 *     no timer thread, and nothing is closed that nobody is waiting for.
 *     A submit that opens a batch wakes the poller so it learns the new
 *     deadline (until session 5 a poller already asleep with no batch open
 *     slept on until a batch filled: at low rates every batch waited to be
 *     full, which is most of the 16.6x p99 measured in session 4).
 *   - ordered delivery hands batches out in submission order; unordered
 *     lets a finished batch overtake an earlier slow one (a 40 Mpx PNG
 *     must not hold up the small JPEGs behind it).
 *   - a request that fails (corrupt bytes, unreadable path, over a limit)
 *     fails alone: its status and message go into the batch, its tensor
 *     is zeroed, the others are delivered.  There is no skip/replace
 *     policy: a replacement image would be a wrong answer to a request.
 *   - batch buffers are sized for max_batch samples (64-byte aligned
 *     arrays) and not touched at create: a server with many sessions
 *     should not pay for 2 MiB rounding and pre-faulting it may never use
 *     (`pretouch` restores the loader's behaviour, for measuring).
 *   - where the workers share cores with the threads that submit and
 *     poll (2 cores: a submitter, a poller and 2 workers), a request's
 *     tail was mostly scheduling: a submitter or poller woken while both
 *     workers decoded waited out a worker's slice (1.4 ms on 2 cores)
 *     before it ran, so arrivals went out late and finished tensors sat
 *     for up to a slice before poll returned them.  EEVDF (Linux 6.12+)
 *     lets a waking thread with a shorter slice than the running one
 *     preempt at once.  The request path's threads are the caller's, so
 *     the caller gives them a short slice (the bench does); workers are
 *     put back on the kernel's default so they do not inherit it from the
 *     creating thread; `worker_slice_us` gives them a longer one instead,
 *     for callers that cannot touch their threads.
 *
 * The sample itself is made exactly as loader.c's fill_sample makes an
 * EVAL or NONE sample (same geometry, same DCT-scale rule, same fused
 * resample), so a session's tensors equal the loader's bit for bit
 * (tests/test_infer.c checks it).
 *
 * Memory and locking.  Everything is allocated at create: batch slots,
 * request records (slot * max_batch + position), the task ring, per-worker
 * scratch.  Copied request bytes and paths go into a per-record buffer
 * that grows to the largest request seen and is then reused, so steady
 * state allocates nothing.  `mu` protects every field marked (mu); a
 * request takes it twice on submit (reserve, publish; the copy happens in
 * between, unlocked), once when a worker takes it and once when it is
 * done.  Histograms have one writer each (a worker's own; the total one is
 * written under mu by the poller).
 */
#define _GNU_SOURCE
#include "../codec/codec.h"
#include "../ops/ops.h"
#include "../stats/hist.h"
#include "../stats/exporter.h"
#include "../common/loader_options.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IALIGN 64
#define PUB_RING 5 /* ticks of 250 ms kept: the newest and the one 1 s before it */
#define MSG_LEN 256

enum { IS_FREE = 0, IS_OPEN, IS_CLOSED, IS_HELD };

struct chute_infer_batch {
    chute_infer *s;
    uint32_t index;
};

typedef struct islot {
    uint8_t *data;
    uint64_t *ids;
    int32_t *status;
    int state;                /* (mu) */
    uint32_t count;           /* (mu) requests admitted into this batch */
    uint32_t done;            /* (mu) of those, finished */
    uint32_t failed;          /* (mu) */
    int by_deadline;          /* (mu) closed by max_delay_us */
    uint64_t seq;             /* (mu) */
    uint64_t t_oldest;        /* (mu) submit time of its first request */
    chute_infer_batch handle;
} islot;

typedef struct ireq {
    const uint8_t *data;      /* the bytes (borrowed, or own.data) */
    size_t len;
    int is_path;              /* own.data holds a NUL-terminated path */
    ch_buf own;
    uint64_t t_submit;
    /* Written by the worker before it takes mu to count the request done
     * (so published by mu): start, decoded, done.  Zero if never run. */
    uint64_t t_start, t_decoded, t_done;
} ireq;

typedef struct iworker {
    chute_infer *s;
    pthread_t thread;
    int started;
    ch_decoder *dec;
    ch_buf rbuf, pbuf;
    ch_resize_scratch rs;
    ch_hist queue, decode, transform;
    uint32_t slice_us;        /* (mu) its slice as the kernel reports it */
} iworker;

struct chute_infer {
    chute_loader_options o;   /* resolved (the loader's resolver checks them) */
    uint32_t B, delay_us, cap, slice_us;
    int unordered, pretouch;
    ch_out_spec out;
    size_t sample_bytes, slot_bytes, ids_off, status_off;

    uint32_t nslots;
    islot *slots;
    uint8_t *ring;
    size_t ring_len;
    int ring_mapped;
    ireq *reqs;               /* nslots * B */
    char *msgs;               /* nslots * B * MSG_LEN */

    uint32_t *tq;             /* (mu) ring of request indices */
    uint32_t tq_cap, tq_head, tq_len;

    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv;
    int closed, shutdown;     /* (mu) */
    int open_slot;            /* (mu) slot accepting requests, -1 if none */
    uint64_t next_seq;        /* (mu) batches opened */
    uint64_t out_seq;         /* (mu) ordered: next batch to hand out */
    uint32_t admitted;        /* (mu) requests not yet released */
    uint32_t unhanded;        /* (mu) requests not yet handed out */
    uint32_t held;            /* (mu) batches the caller holds */

    uint64_t submitted, rejected, completed, failed, batches, by_deadline; /* (mu) */
    ch_hist total;            /* written under mu */

    uint32_t nworkers;
    iworker *workers;

    /* `chute top`'s segment (stats_shm) and the stats thread that fills it;
     * NULL when off.  pub_*: that thread's own (infer_fill): the total
     * latency histogram and requests handed out at its last PUB_RING ticks,
     * for the last second's rate and quantiles. */
    ch_exporter *stats;
    uint64_t created_ns;
    ch_hist_snap *pub_hist;   /* PUB_RING + 1 (the last: scratch) */
    uint64_t pub_t[PUB_RING], pub_done[PUB_RING], pub_n;
};

/* ------------------------------------------------------------------ */

static size_t align_up(size_t v) { return (v + IALIGN - 1) & ~(size_t)(IALIGN - 1); }

/* The file at `path` into w->rbuf (at most max bytes). */
static int read_path(iworker *w, const char *path, uint64_t max, size_t *out_len,
                     chute_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ch_err_errno(err, errno == ENOENT ? CHUTE_ENOTFOUND : CHUTE_EIO, errno,
                            "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ch_err_errno(err, CHUTE_EIO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ch_err(err, CHUTE_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return ch_err(err, CHUTE_ELIMIT, "%s: %llu bytes is over max_sample_bytes %llu", path,
                      (unsigned long long)st.st_size, (unsigned long long)max);
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (ch_buf_reserve(&w->rbuf, n) != CHUTE_OK) {
        close(fd);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    while (got < n) {
        ssize_t r = pread(fd, w->rbuf.data + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            if (r == 0)
                return ch_err(err, CHUTE_EIO, "%s: file shrank to %zu bytes while read", path,
                              got);
            return ch_err_errno(err, CHUTE_EIO, e, "%s: read failed at offset %zu", path, got);
        }
        got += (size_t)r;
    }
    close(fd);
    *out_len = n;
    return CHUTE_OK;
}

/* One EVAL or NONE sample, as loader.c's fill_sample makes it. */
static int make_sample(chute_infer *s, iworker *w, const uint8_t *data, size_t len, uint8_t *dst,
                       uint64_t *t_decoded, chute_error *err)
{
    const chute_loader_options *o = &s->o;
    if (len > o->max_sample_bytes)
        return ch_err(err, CHUTE_ELIMIT, "%zu bytes is over max_sample_bytes %llu", len,
                      (unsigned long long)o->max_sample_bytes);
    ch_image_info info;
    int rc = ch_decoder_begin(w->dec, data, len, o->max_pixels, &info, err);
    if (rc != CHUTE_OK)
        return rc;
    ch_crop crop;
    if (o->transform == CHUTE_TRANSFORM_EVAL)
        ch_geom_eval(info.width, info.height, o->resize_size, o->size, &crop);
    else
        ch_geom_full(info.width, info.height, &crop);
    uint32_t denom = 1;
    if ((info.caps & CH_DEC_DCT_SCALE) && !o->no_dct_scale) {
        double cw = crop.x1 - crop.x0, chh = crop.y1 - crop.y0;
        while (denom < 8 && cw / (denom * 2) >= o->size && chh / (denom * 2) >= o->size)
            denom *= 2;
    }
    ch_crop sc = crop;
    uint32_t sw = info.width, sh = info.height;
    if (denom > 1) {
        ch_decoder_scaled_size(w->dec, denom, &sw, &sh);
        ch_crop_scale(&crop, denom, sw, sh, &sc);
    }
    ch_resize_plan plan;
    rc = ch_resize_plan_make(&plan, &sc, o->size, o->size, &w->rs);
    if (rc != CHUTE_OK) {
        ch_decoder_abort(w->dec);
        if (rc == CHUTE_EINVAL)
            return ch_err(err, CHUTE_EINVAL, "no valid crop of a %ux%u image", info.width,
                          info.height);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for resize taps");
    }
    ch_image img;
    rc = ch_decoder_finish(w->dec, denom, (uint32_t)plan.x.lo, (uint32_t)plan.y.lo,
                           (uint32_t)(plan.x.hi - plan.x.lo), (uint32_t)(plan.y.hi - plan.y.lo),
                           &w->pbuf, &img, err);
    if (rc != CHUTE_OK)
        return rc;
    *t_decoded = ch_now_ns();
    rc = ch_resize_run(&plan, img.pixels, img.stride, (int32_t)img.x, (int32_t)img.y, crop.flip,
                       &s->out, dst, &w->rs);
    if (rc != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for resize rows");
    return CHUTE_OK;
}

static int deliverable(const islot *sl) { return sl->state == IS_CLOSED && sl->done == sl->count; }

static void run_request(chute_infer *s, iworker *w, uint32_t ri)
{
    ireq *r = &s->reqs[ri];
    uint32_t si = ri / s->B, pos = ri % s->B;
    islot *sl = &s->slots[si];
    uint8_t *dst = sl->data + (size_t)pos * s->sample_bytes;
    uint64_t t0 = ch_now_ns();
    ch_hist_add(&w->queue, t0 - r->t_submit);
    chute_error err = {0};
    const uint8_t *data = r->data;
    size_t len = r->len;
    int rc = CHUTE_OK;
    if (r->is_path) {
        rc = read_path(w, (const char *)r->own.data, s->o.max_sample_bytes, &len, &err);
        data = w->rbuf.data;
    }
    uint64_t t1 = t0;
    if (rc == CHUTE_OK)
        rc = make_sample(s, w, data, len, dst, &t1, &err);
    uint64_t t2 = ch_now_ns();
    r->t_start = t0;
    r->t_decoded = t1;
    r->t_done = t2;
    char *msg = s->msgs + (size_t)ri * MSG_LEN;
    if (rc == CHUTE_OK) {
        ch_hist_add(&w->decode, t1 - t0);
        ch_hist_add(&w->transform, t2 - t1);
        msg[0] = '\0';
    } else {
        memset(dst, 0, s->sample_bytes);
        ch_str_fit(msg, MSG_LEN, err.message[0] ? err.message : chute_status_name(rc));
    }
    pthread_mutex_lock(&s->mu);
    sl->status[pos] = rc;
    sl->failed += rc != CHUTE_OK;
    sl->done++;
    int wake = deliverable(sl);
    pthread_mutex_unlock(&s->mu);
    /* Signalled after unlocking: the poller wakes to a free mutex
     * instead of blocking on it at once (one context switch less per
     * batch, which is per request at max_batch 1). */
    if (wake)
        pthread_cond_broadcast(&s->ready_cv);
}

static void *worker_main(void *arg)
{
    iworker *w = arg;
    chute_infer *s = w->s;
    /* Threads inherit their creator's slice: without worker_slice_us the
     * workers go back to the kernel's default, so a caller that gave its
     * own (polling) thread a short slice does not pass it on to them. */
    uint32_t slice = s->slice_us ? ch_thread_slice(s->slice_us) : ch_thread_slice_default();
    pthread_mutex_lock(&s->mu);
    w->slice_us = slice;
    for (;;) {
        while (!s->shutdown && s->tq_len == 0)
            pthread_cond_wait(&s->work_cv, &s->mu);
        if (s->shutdown)
            break;
        uint32_t ri = s->tq[s->tq_head];
        s->tq_head = (s->tq_head + 1) % s->tq_cap;
        s->tq_len--;
        pthread_mutex_unlock(&s->mu);
        run_request(s, w, ri);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ------------------------------------------------------------------ */

/* The options, resolved by the session's option table
 * (src/common/infer_options.def): defaults, bounds, and the shared fields
 * through the loader's resolve step into s->o. */
static int resolve(const chute_infer_options *in, chute_infer *s, chute_error *err)
{
    chute_infer_options r;
    int rc = ch_infer_options_resolve(in, &r, &s->o, err);
    if (rc != CHUTE_OK)
        return rc;
    s->B = r.max_batch;
    s->delay_us = r.max_delay_us;
    s->cap = r.queue_capacity;
    s->unordered = r.unordered;
    s->pretouch = r.pretouch;
    s->slice_us = r.worker_slice_us;
    return CHUTE_OK;
}

/* The stats thread's tick (exporter.c, every 250 ms): the session's
 * figures into the segment's slots (shmstats.h); the rate and latency
 * quantiles are those of the requests handed out in the last second. */
static void infer_fill(void *user, const chute_stats *unused, uint64_t *c)
{
    (void)unused;
    chute_infer *s = user;
    unsigned k = (unsigned)(s->pub_n % PUB_RING);
    ch_hist_snap *cur = &s->pub_hist[k], *win = &s->pub_hist[PUB_RING];
    memset(cur, 0, sizeof *cur);
    pthread_mutex_lock(&s->mu);
    c[CH_SHM_SAMPLES] = s->completed;
    c[CH_SHM_BATCHES] = s->batches;
    c[CH_SHM_CORRUPT] = s->failed;
    c[CH_SHM_INFER_QUEUED] = s->admitted;
    c[CH_SHM_INFER_SUBMITTED] = s->submitted;
    c[CH_SHM_INFER_REJECTED] = s->rejected;
    ch_hist_merge(cur, &s->total);
    pthread_mutex_unlock(&s->mu);
    uint64_t now = ch_now_ns();
    s->pub_t[k] = now;
    s->pub_done[k] = c[CH_SHM_SAMPLES];
    /* The oldest kept tick (1 s back once PUB_RING ticks ran), else the start. */
    uint64_t t0 = s->created_ns, d0 = 0;
    memset(win, 0, sizeof *win);
    if (s->pub_n >= PUB_RING - 1) {
        unsigned o = (unsigned)((s->pub_n - (PUB_RING - 1)) % PUB_RING);
        if (o != k) {
            t0 = s->pub_t[o];
            d0 = s->pub_done[o];
            for (unsigned i = 0; i < CH_HIST_BUCKETS; i++) {
                win->b[i] = cur->b[i] - s->pub_hist[o].b[i];
                win->n += win->b[i];
            }
        }
    }
    if (t0 == s->created_ns)
        *win = *cur;
    s->pub_n++;
    c[CH_SHM_WALL_NS] = now - s->created_ns;
    c[CH_SHM_WINDOW_NS] = now - t0;
    c[CH_SHM_WINDOW_SAMPLES] = c[CH_SHM_SAMPLES] - d0;
    c[CH_SHM_WORKERS] = s->nworkers;
    c[CH_SHM_QUEUE_CAPACITY] = s->cap;
    c[CH_SHM_LAT_P50_NS] = ch_hist_quantile(win, 0.50);
    c[CH_SHM_LAT_P99_NS] = ch_hist_quantile(win, 0.99);
}

/* The session's segment and its stats thread (stats_shm; optional: a
 * session without /dev/shm runs on without). */
static void start_stats(chute_infer *s)
{
    s->pub_hist = calloc(PUB_RING + 1, sizeof *s->pub_hist);
    if (!s->pub_hist)
        return;
    uint64_t c[CH_SHM_NCOUNTERS] = {0};
    infer_fill(s, NULL, c);
    ch_shm *shm = ch_shm_create(CH_SHM_KIND_INFER, 0, 1, NULL, NULL, NULL);
    if (!shm)
        return;
    ch_shm_publish(shm, c);
    ch_exporter_src src = {.user = s, .snap = NULL, .fill = infer_fill};
    if (ch_exporter_start(&src, NULL, NULL, shm, &s->stats, NULL) != CHUTE_OK)
        ch_shm_close(shm);
}

int chute_infer_create(const chute_infer_options *opt, chute_infer **out, chute_error *err)
{
    if (!out)
        return ch_err(err, CHUTE_EINVAL, "chute_infer_create: out is required");
    *out = NULL;
    chute_infer *s = calloc(1, sizeof *s);
    if (!s)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = resolve(opt, s, err);
    if (rc) {
        free(s);
        return rc;
    }
    const chute_loader_options *o = &s->o;
    s->out.size = o->size;
    s->out.dtype = o->dtype;
    s->out.layout = o->layout;
    for (int c = 0; c < 3; c++) {
        s->out.mul[c] = o->no_normalize ? 1.0f / 255.0f : 1.0f / (255.0f * o->std[c]);
        s->out.add[c] = o->no_normalize ? 0 : -o->mean[c] / o->std[c];
    }
    size_t esz = o->dtype == CHUTE_DTYPE_FLOAT32 ? 4 : o->dtype == CHUTE_DTYPE_FLOAT16 ? 2 : 1;
    /* size <= 8192 and B <= 1024: these products fit in 64 bits; the ring
     * (a few slots) is checked below. */
    s->sample_bytes = (size_t)o->size * o->size * 3 * esz;
    s->ids_off = align_up(s->sample_bytes * s->B);
    s->status_off = s->ids_off + align_up(sizeof(uint64_t) * s->B);
    s->slot_bytes = s->status_off + align_up(sizeof(int32_t) * s->B);
    if (s->pretouch)
        s->slot_bytes = (s->slot_bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    /* Enough slots for a full queue of full batches, plus two the caller
     * may hold while the queue is full. */
    s->nslots = (s->cap + s->B - 1) / s->B + 2;
    size_t nreq = (size_t)s->nslots * s->B;
    if (__builtin_mul_overflow(s->slot_bytes, (size_t)s->nslots, &s->ring_len)) {
        free(s);
        return ch_err(err, CHUTE_ENOMEM, "batch buffers are too large");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->ready_cv, NULL);
    s->open_slot = -1;
    s->slots = calloc(s->nslots, sizeof *s->slots);
    s->reqs = calloc(nreq, sizeof *s->reqs);
    s->msgs = calloc(nreq, MSG_LEN);
    s->tq_cap = (uint32_t)nreq;
    s->tq = calloc(nreq, sizeof *s->tq);
    if (s->pretouch) {
        void *m = mmap(NULL, s->ring_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (m != MAP_FAILED) {
            s->ring = m;
            s->ring_mapped = 1;
#ifdef MADV_HUGEPAGE
            madvise(m, s->ring_len, MADV_HUGEPAGE);
#endif
            ch_pretouch(m, s->ring_len);
        }
    } else {
        s->ring = ch_aligned_alloc(IALIGN, s->ring_len);
    }
    if (!s->slots || !s->reqs || !s->msgs || !s->tq || !s->ring) {
        size_t mib = s->ring_len >> 20;
        chute_infer_destroy(s);
        return ch_err(err, CHUTE_ENOMEM, "cannot allocate %zu MiB of batch buffers", mib);
    }
    for (uint32_t i = 0; i < s->nslots; i++) {
        islot *sl = &s->slots[i];
        sl->data = s->ring + (size_t)i * s->slot_bytes;
        sl->ids = (uint64_t *)(void *)(sl->data + s->ids_off);
        sl->status = (int32_t *)(void *)(sl->data + s->status_off);
        sl->handle.s = s;
        sl->handle.index = i;
    }
    s->nworkers = o->workers;
    s->workers = calloc(s->nworkers, sizeof *s->workers);
    if (!s->workers) {
        s->nworkers = 0;
        chute_infer_destroy(s);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < s->nworkers; i++) {
        s->workers[i].s = s;
        if (ch_decoder_create(&s->workers[i].dec) != CHUTE_OK) {
            chute_infer_destroy(s);
            return ch_err(err, CHUTE_ENOMEM, "out of memory for worker scratch");
        }
    }
    for (uint32_t i = 0; i < s->nworkers; i++) {
        rc = pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
        if (rc != 0) {
            chute_infer_destroy(s);
            return ch_err_errno(err, CHUTE_ENOMEM, rc, "cannot start worker thread %u", i);
        }
        s->workers[i].started = 1;
    }
    s->created_ns = ch_now_ns();
    if (s->o.stats_shm)
        start_stats(s);
    *out = s;
    return CHUTE_OK;
}

void chute_infer_close(chute_infer *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    if (s->open_slot >= 0) {
        islot *sl = &s->slots[s->open_slot];
        sl->state = IS_CLOSED;
        s->open_slot = -1;
    }
    pthread_cond_broadcast(&s->ready_cv);
    pthread_mutex_unlock(&s->mu);
}

void chute_infer_destroy(chute_infer *s)
{
    if (!s)
        return;
    ch_exporter_stop(s->stats); /* its tick takes mu and reads the workers */
    free(s->pub_hist);
    pthread_mutex_lock(&s->mu);
    s->shutdown = 1;
    s->closed = 1;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < s->nworkers; i++) {
        iworker *w = &s->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        ch_decoder_destroy(w->dec);
        ch_buf_free(&w->rbuf);
        ch_buf_free(&w->pbuf);
        ch_buf_free(&w->rs.coef);
        ch_buf_free(&w->rs.tmp);
    }
    free(s->workers);
    if (s->reqs)
        for (size_t i = 0; i < (size_t)s->nslots * s->B; i++)
            ch_buf_free(&s->reqs[i].own);
    if (s->ring_mapped)
        munmap(s->ring, s->ring_len);
    else
        free(s->ring);
    free(s->slots);
    free(s->reqs);
    free(s->msgs);
    free(s->tq);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->ready_cv);
    free(s);
}

/* Reserve a record in the open batch (opening one if needed).  *opened
 * is set when this opened a batch that stays open (its deadline is new:
 * the poller must hear of it).  (mu) */
static int reserve_locked(chute_infer *s, uint32_t *out_ri, int *opened, chute_error *err)
{
    *opened = 0;
    if (s->closed)
        return ch_err(err, CHUTE_EINVAL, "the inference session is closed; no more requests");
    if (s->admitted >= s->cap) {
        s->rejected++;
        return ch_err(err, CHUTE_EBUSY, "the queue is full (%u requests admitted and not "
                      "released; queue_capacity %u)", s->admitted, s->cap);
    }
    if (s->open_slot < 0) {
        int f = -1;
        for (uint32_t i = 0; i < s->nslots; i++)
            if (s->slots[i].state == IS_FREE) {
                f = (int)i;
                break;
            }
        if (f < 0) {
            s->rejected++;
            return ch_err(err, CHUTE_EBUSY, "every batch buffer (%u) is in use", s->nslots);
        }
        islot *sl = &s->slots[f];
        sl->state = IS_OPEN;
        sl->count = sl->done = sl->failed = 0;
        sl->by_deadline = 0;
        sl->seq = s->next_seq++;
        sl->t_oldest = ch_now_ns();
        s->open_slot = f;
    }
    islot *sl = &s->slots[s->open_slot];
    uint32_t pos = sl->count++;
    *out_ri = (uint32_t)s->open_slot * s->B + pos;
    if (sl->count == s->B) {
        sl->state = IS_CLOSED;
        s->open_slot = -1;
    } else if (sl->count == 1) {
        *opened = 1;
    }
    s->admitted++;
    s->unhanded++;
    s->submitted++;
    return CHUTE_OK;
}

/* Queue request ri for the workers.  (mu) */
static void enqueue_locked(chute_infer *s, uint32_t ri)
{
    s->tq[(s->tq_head + s->tq_len) % s->tq_cap] = ri;
    s->tq_len++;
}

static int submit(chute_infer *s, const void *data, size_t len, uint64_t id, int copy,
                  int is_path, chute_error *err)
{
    uint32_t ri = 0;
    chute_error cerr = {0};
    uint64_t t_submit = ch_now_ns();
    int opened = 0;
    pthread_mutex_lock(&s->mu);
    int rc = reserve_locked(s, &ri, &opened, err);
    if (rc == CHUTE_OK && !copy && !is_path) {
        /* Borrowed bytes: nothing to copy, so reserve and publish under
         * one hold of mu (a request stream at max_batch 1 takes the lock
         * once per submit, not twice). */
        ireq *r = &s->reqs[ri];
        r->is_path = 0;
        r->t_submit = t_submit;
        r->t_start = r->t_decoded = r->t_done = 0;
        r->data = data;
        r->len = len;
        s->slots[ri / s->B].ids[ri % s->B] = id;
        enqueue_locked(s, ri);
        pthread_mutex_unlock(&s->mu);
        pthread_cond_signal(&s->work_cv);
        if (opened)
            pthread_cond_broadcast(&s->ready_cv);
        return CHUTE_OK;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != CHUTE_OK)
        return rc;
    ireq *r = &s->reqs[ri];
    islot *sl = &s->slots[ri / s->B];
    /* The record is ours until it is published below: copy unlocked. */
    r->is_path = is_path;
    r->t_submit = t_submit;
    r->t_start = r->t_decoded = r->t_done = 0;
    size_t need = len + (is_path ? 1 : 0);
    if (ch_buf_reserve(&r->own, need) != CHUTE_OK) {
        rc = ch_err(&cerr, CHUTE_ENOMEM, "out of memory copying a %zu-byte request", len);
    } else {
        if (len)
            memcpy(r->own.data, data, len);
        if (is_path)
            r->own.data[len] = '\0';
        r->data = r->own.data;
    }
    r->len = len;
    int wake_poller = 0;
    pthread_mutex_lock(&s->mu);
    sl->ids[ri % s->B] = id;
    if (rc != CHUTE_OK) {
        /* The position is taken: finish it as a failed request, so the
         * batch still closes and the caller still sees its id once. */
        sl->status[ri % s->B] = rc;
        ch_str_fit(s->msgs + (size_t)ri * MSG_LEN, MSG_LEN, cerr.message);
        memset(sl->data + (size_t)(ri % s->B) * s->sample_bytes, 0, s->sample_bytes);
        sl->failed++;
        sl->done++;
        wake_poller = deliverable(sl);
        rc = CHUTE_OK; /* admitted (and failed): its result comes through poll */
    } else {
        enqueue_locked(s, ri);
    }
    pthread_mutex_unlock(&s->mu);
    if (wake_poller || opened)
        pthread_cond_broadcast(&s->ready_cv);
    if (!wake_poller)
        pthread_cond_signal(&s->work_cv);
    return rc;
}

int chute_infer_submit(chute_infer *s, const void *data, size_t len, uint64_t id, unsigned flags,
                       chute_error *err)
{
    if (!s || (!data && len))
        return ch_err(err, CHUTE_EINVAL, "chute_infer_submit: session and data are required");
    if (flags & ~CHUTE_INFER_COPY)
        return ch_err(err, CHUTE_EINVAL, "chute_infer_submit: unknown flags 0x%x", flags);
    return submit(s, data, len, id, (flags & CHUTE_INFER_COPY) != 0, 0, err);
}

int chute_infer_submit_path(chute_infer *s, const char *path, uint64_t id, chute_error *err)
{
    if (!s || !path)
        return ch_err(err, CHUTE_EINVAL, "chute_infer_submit_path: session and path are required");
    return submit(s, path, strlen(path), id, 1, 1, err);
}

/* A batch to hand out now, or NULL.  Closes the open batch when its
 * deadline has passed.  (mu) */
static islot *ready_locked(chute_infer *s, uint64_t now)
{
    if (s->open_slot >= 0) {
        islot *o = &s->slots[s->open_slot];
        if (now - o->t_oldest >= (uint64_t)s->delay_us * 1000) {
            o->state = IS_CLOSED;
            o->by_deadline = 1;
            s->open_slot = -1;
        }
    }
    islot *best = NULL;
    for (uint32_t i = 0; i < s->nslots; i++) {
        islot *sl = &s->slots[i];
        if (!deliverable(sl))
            continue;
        if (!s->unordered && sl->seq != s->out_seq)
            continue;
        if (!best || sl->seq < best->seq)
            best = sl;
    }
    return best;
}

int chute_infer_poll(chute_infer *s, int64_t timeout_us, chute_infer_batch **out)
{
    if (!s || !out)
        return CHUTE_EINVAL;
    *out = NULL;
    uint64_t start = ch_now_ns();
    /* Past ~146 years a timeout is forever (and start + it would wrap). */
    uint64_t until = timeout_us < 0 || timeout_us > ((int64_t)1 << 52)
                         ? UINT64_MAX
                         : start + (uint64_t)timeout_us * 1000;
    pthread_mutex_lock(&s->mu);
    islot *sl = NULL;
    int rc = CHUTE_OK;
    for (;;) {
        uint64_t now = ch_now_ns();
        sl = ready_locked(s, now);
        if (sl)
            break;
        if (s->closed && s->unhanded == 0) {
            rc = CHUTE_END;
            break;
        }
        if (s->held == s->nslots) {
            rc = CHUTE_EBUSY;
            break;
        }
        if (now >= until) {
            rc = CHUTE_EINTERRUPTED;
            break;
        }
        uint64_t wake = until;
        if (s->open_slot >= 0) {
            uint64_t dl = s->slots[s->open_slot].t_oldest + (uint64_t)s->delay_us * 1000;
            if (dl < wake)
                wake = dl;
        }
        if (wake == UINT64_MAX) {
            pthread_cond_wait(&s->ready_cv, &s->mu);
        } else {
            /* ready_cv uses CLOCK_REALTIME; convert the monotonic wait. */
            uint64_t d = wake > now ? wake - now : 0;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + d % 1000000000ull;
            ts.tv_sec += (time_t)(d / 1000000000ull + ns / 1000000000ull);
            ts.tv_nsec = (long)(ns % 1000000000ull);
            pthread_cond_timedwait(&s->ready_cv, &s->mu, &ts);
        }
    }
    if (sl) {
        uint64_t now = ch_now_ns();
        sl->state = IS_HELD;
        s->held++;
        s->unhanded -= sl->count;
        if (sl->seq == s->out_seq)
            s->out_seq++;
        s->batches++;
        s->completed += sl->count;
        s->failed += sl->failed;
        s->by_deadline += sl->by_deadline;
        uint32_t base = sl->handle.index * s->B;
        for (uint32_t k = 0; k < sl->count; k++)
            ch_hist_add(&s->total, now - s->reqs[base + k].t_submit);
        *out = &sl->handle;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void chute_infer_batch_view(const chute_infer_batch *b, chute_infer_view *v)
{
    if (!b || !v)
        return;
    chute_infer *s = b->s;
    const islot *sl = &s->slots[b->index];
    memset(v, 0, sizeof *v);
    int64_t S = s->o.size;
    v->data = sl->data;
    v->dtype = s->o.dtype;
    v->layout = s->o.layout;
    v->count = sl->count;
    v->failed = sl->failed;
    v->shape[0] = sl->count;
    if (s->o.layout == CHUTE_LAYOUT_NCHW) {
        v->shape[1] = 3;
        v->shape[2] = S;
        v->shape[3] = S;
    } else {
        v->shape[1] = S;
        v->shape[2] = S;
        v->shape[3] = 3;
    }
    v->strides[3] = 1;
    v->strides[2] = v->shape[3];
    v->strides[1] = v->shape[2] * v->shape[3];
    v->strides[0] = v->shape[1] * v->strides[1];
    v->nbytes = s->sample_bytes * sl->count;
    v->ids = sl->ids;
    v->status = sl->status;
    v->batch_index = sl->seq;
}

const char *chute_infer_batch_errmsg(const chute_infer_batch *b, uint32_t k)
{
    if (!b)
        return "";
    chute_infer *s = b->s;
    const islot *sl = &s->slots[b->index];
    if (k >= sl->count || sl->status[k] == CHUTE_OK)
        return "";
    return s->msgs + ((size_t)b->index * s->B + k) * MSG_LEN;
}

int chute_infer_batch_timing(const chute_infer_batch *b, uint32_t k, chute_infer_timing *out)
{
    if (!b || !out)
        return CHUTE_EINVAL;
    const chute_infer *s = b->s;
    const islot *sl = &s->slots[b->index];
    if (k >= sl->count)
        return CHUTE_EINVAL;
    const ireq *r = &s->reqs[(size_t)b->index * s->B + k];
    out->submit_ns = r->t_submit;
    out->start_ns = r->t_start;
    out->decoded_ns = r->t_decoded;
    out->done_ns = r->t_done;
    return CHUTE_OK;
}

void chute_infer_batch_release(chute_infer_batch *b)
{
    if (!b)
        return;
    chute_infer *s = b->s;
    pthread_mutex_lock(&s->mu);
    islot *sl = &s->slots[b->index];
    if (sl->state == IS_HELD) {
        sl->state = IS_FREE;
        s->held--;
        s->admitted -= sl->count;
    }
    pthread_mutex_unlock(&s->mu);
}

static void latency_of(chute_latency *out, const ch_hist_snap *h)
{
    out->count = h->n;
    out->p50_ns = ch_hist_quantile(h, 0.50);
    out->p90_ns = ch_hist_quantile(h, 0.90);
    out->p99_ns = ch_hist_quantile(h, 0.99);
    out->p999_ns = ch_hist_quantile(h, 0.999);
    out->max_ns = ch_hist_quantile(h, 1.0);
    long double sum = 0;
    for (unsigned i = 0; i < CH_HIST_BUCKETS; i++)
        if (h->b[i]) {
            uint64_t lo = ch_hist_lower(i), hi = i + 1 < CH_HIST_BUCKETS ? ch_hist_lower(i + 1) : lo;
            sum += (long double)h->b[i] * (long double)(lo + (hi - lo) / 2);
        }
    out->mean_ns = h->n ? (uint64_t)(sum / h->n) : 0;
}

void chute_infer_get_stats(const chute_infer *cs, chute_infer_stats *out)
{
    if (!cs || !out)
        return;
    chute_infer *s = (chute_infer *)cs; /* locking does not change the session */
    memset(out, 0, sizeof *out);
    ch_hist_snap *h = calloc(4, sizeof *h);
    pthread_mutex_lock(&s->mu);
    out->submitted = s->submitted;
    out->rejected_busy = s->rejected;
    out->completed = s->completed;
    out->failed = s->failed;
    out->batches = s->batches;
    out->closed_by_deadline = s->by_deadline;
    if (h)
        ch_hist_merge(&h[3], &s->total);
    for (uint32_t i = 0; i < s->nworkers; i++)
        if (s->workers[i].slice_us) {
            out->worker_slice_us = s->workers[i].slice_us;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    out->workers = s->nworkers;
    out->slots = s->nslots;
    out->slot_bytes = s->slot_bytes;
    if (!h)
        return;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        ch_hist_merge(&h[0], &s->workers[i].queue);
        ch_hist_merge(&h[1], &s->workers[i].decode);
        ch_hist_merge(&h[2], &s->workers[i].transform);
    }
    latency_of(&out->queue, &h[0]);
    latency_of(&out->decode, &h[1]);
    latency_of(&out->transform, &h[2]);
    latency_of(&out->total, &h[3]);
    free(h);
}
