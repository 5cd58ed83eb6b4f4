/*
 * readahead.c — keep reads in flight ahead of the decode workers.
 *
 * Why.  A worker that reads its own sample blocks for the storage's
 * latency: on a cold page cache that is a disk seek per sample, behind
 * HTTP or S3 a round trip of milliseconds.  With W workers at most W reads
 * are in flight, so throughput = W / latency (Little's law) and the only
 * lever was more threads than cores.  But the order is no secret: the
 * sampler fixed this rank's whole epoch at set_epoch.  So this stage walks
 * the order ahead of the workers — the sampler knows positions, the format
 * knows locators (format.h: locate), the source knows bytes — and keeps up
 * to `depth` samples read or being read into a fixed pool of buffers.  A
 * worker then finds its bytes ready and only decodes.
 *
 * Shape.  The pool has `depth` buffers; task t (the loader's task number,
 * sample sampler[base + t]) may only use buffer t % depth, and only after
 * task t - depth released it.  Each buffer has one atomic word, (turn,
 * state): `turn` is the task it serves now, state FREE (nobody started),
 * ISSUED (a read is in flight), READY (bytes or an error are there), BUSY
 * (a worker owns it) or GONE (its worker finished before the read did: the
 * reader frees it on completion).  Every change is a compare-and-swap on
 * that word, so a read-ahead thread and a worker can never both own task
 * t: if the worker comes first it takes FREE -> BUSY and reads the sample
 * itself, as without read-ahead; if the reader comes first it takes FREE
 * -> ISSUED and the worker waits for READY (the read is already under
 * way: a second one would only compete with it).  The reader never starts
 * a task that workers have already claimed (it skips below `claimed`).
 * Depth therefore bounds both memory (depth buffers, each grown once to
 * the largest sample it held, never past max_sample_bytes: no allocation
 * per sample once warm) and how far reads run ahead of decoding.
 *
 * Engine.  When the dataset's source can read asynchronously (io.h,
 * version 4: aio_open; the local source through io_uring), ONE engine
 * thread keeps up to `depth` reads in flight: it claims tasks exactly as
 * a reader thread does (FREE -> ISSUED), submits each read, and publishes
 * completions as they are reaped.  One thread is enough: per read it
 * only locates, submits and compare-and-swaps (microseconds) while the
 * device works, so it is never the bottleneck below ~100k reads/s, and a
 * single claimant keeps the cursor simple (it may peek and wait without
 * racing another reader).  It never blocks while it has reads in flight:
 * if the next task's buffer is still in use it reaps first (waiting at
 * most 1 ms, so a buffer released meanwhile is refilled promptly), and
 * only with nothing in flight does it sleep, on the word of the buffer
 * depth/8 tasks ahead (so it wakes once per depth/8 releases, not per
 * sample: warm data would otherwise cost a wakeup per sample).  read_delay_us is
 * a FIFO of not-yet-submitted requests with due times (the thread cannot
 * sleep per read).  Otherwise (the cache tier, a source without aio, an
 * io_uring the kernel refuses, or CHUTE_READAHEAD_ENGINE=threads in the
 * environment) reads are issued by `threads` = min(depth, 64) reader
 * threads, each a blocking read_at (or read_file for formats whose
 * locator is a whole file): any source works, and reads in flight =
 * threads.  Both engines run the same prepare/complete steps on a task,
 * so sizes, limits, growth and error hand-over are one code.  If the
 * engine itself fails (reap < 0: never seen), its reads still in flight
 * are abandoned to the kernel (their buffers detached and leaked, never
 * reused), their tasks become CH_RA_MISS and the thread carries on as a
 * blocking reader.  The stats count the most reads ever in flight.
 *
 * O_DIRECT (dataset option direct_io, io_uring engine on a source with
 * CH_SOURCE_CAP_DIRECT).  Chute shards put every record on a 4 KiB
 * boundary and pad it to the next one, so a record at an aligned offset
 * is read as [off, round_up(off + len, 4 KiB)) into a 4 KiB-aligned
 * buffer (ra_reserve): the sample is the buffer's first len bytes and the
 * worker takes it in place, as ever: no bounce buffer, no copy, and the
 * page cache is bypassed (the read-ahead is the cache).  A record at an
 * unaligned offset (TFRecord, tar members) is read ordinarily.  If the
 * aligned read fails (a range ending past the end of the file; a device
 * that wants more alignment) the exact range is read again ordinarily,
 * and only that read's failure is handed to the worker.
 *
 * Correctness never depends on this stage.  A sample without a locator
 * (CH_LOC_NONE), over the size limit, or one the dataset's test fault
 * injection targets is handed back as CH_RA_MISS and read by its worker
 * as always.  A read that fails hands its status and message to the
 * worker as the result of its first read attempt; the loader's retries
 * (ordinary reads) and its final failure are exactly those of a run
 * without read-ahead.  Content checks (CRCs, framing) run in the worker
 * through the format's from_bytes, with read()'s messages.
 *
 * Waiting.  The hot path (a READY buffer) takes no lock.  Anyone who must
 * wait (a worker for an in-flight read, a reader for a buffer still in
 * use) counts itself in that buffer's `waiters` under `mu` and sleeps on
 * the buffer's own `cv`; whoever changes a word broadcasts that buffer's
 * cv only when its `waiters` is nonzero (seq_cst on both sides, so no
 * wakeup is lost).  One cv per buffer, not one for the pool: with the
 * threads engine up to 64 readers sleep, each on the buffer of its next
 * task, and a single shared cv woke all of them at every release — on 2
 * cores that herd cost 40% of the warm throughput (bench/coldcache.sh:
 * threads 1,137 vs no read-ahead 1,948 images/s).
 *
 * Runs.  ch_ra_cancel bumps `gen`: readers stop after their current read,
 * waiting workers return CH_RA_MISS.  ch_ra_quiesce waits until no reader
 * is inside a run, so ch_ra_start may reset the words and the loader may
 * rewrite the sampler's order.
 */
#define _GNU_SOURCE
#include "readahead.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define RA_MAX_THREADS 64u

enum { ST_FREE = 0, ST_ISSUED, ST_READY, ST_BUSY, ST_GONE };
#define WORD(turn, st) (((uint64_t)(turn) << 3) | (uint64_t)(st))
#define TURN(w) ((w) >> 3)
#define STATE(w) ((int)((w) & 7u))

typedef struct ra_buf {
    _Atomic uint64_t word;
    ch_buf data;              /* owned by whoever owns the word (ISSUED: its reader) */
    size_t len;               /* bytes of the sample (READY) */
    int rc;                   /* READY: CHUTE_OK, CH_RA_MISS or the read's error */
    chute_error err;          /* the read's message when rc is an error */
    ch_locator loc;           /* the reader's scratch */
    ch_aio_req req;           /* the read being done for this task */
    int grown;                /* whole file: the buffer was grown once for it */
    int submitted;            /* async: req is with the engine */
    int direct_req;           /* req is the O_DIRECT-aligned range (direct_io) */
    uint64_t due_ns;          /* async with read_delay_us: submit at */
    pthread_cond_t cv;        /* this buffer's word changed, or gen changed */
    _Atomic uint32_t waiters; /* sleepers on cv */
} ra_buf;

typedef struct ra_thread {
    ch_ra *ra;
    pthread_t thread;
    int started;
} ra_thread;

struct ch_ra {
    const chute_dataset *ds;
    const ch_sampler *sampler;
    const _Atomic uint64_t *claimed;
    uint64_t max_bytes;
    uint32_t depth;
    ra_buf *bufs;
    uint32_t nthreads;
    ra_thread *threads;

    pthread_mutex_t mu;
    pthread_cond_t run_cv;    /* readers: a run started, or shutdown */
    pthread_cond_t idle_cv;   /* quiesce: busy reached 0 */
    _Atomic uint64_t gen;     /* changed by start and cancel */
    int running;              /* (mu) */
    int shutdown;             /* (mu) */
    uint32_t busy;            /* (mu) readers inside a run */
    uint64_t base, total;     /* set while readers are idle */
    _Atomic uint64_t cursor;  /* next task a reader looks at */

    _Atomic uint64_t hits, misses, failed, pool_bytes;
    _Atomic uint64_t in_reads, inflight_max; /* reads in flight now / at most */
    _Atomic uint64_t direct_retried; /* aligned O_DIRECT ranges read again exactly */

    void *aio;                /* the source's async engine, or NULL (threads) */
    int direct;               /* O_DIRECT reads asked of the engine (direct_io) */
    int aio_failed;           /* (engine thread) the engine broke: read blocking */
    ch_aio_req **done;        /* depth completion slots (engine thread) */
    uint32_t *pend;           /* depth: FIFO of delayed, unsubmitted buffers */
};

/* Buffer b's word changed: wake whoever sleeps on it. */
static void wake(ch_ra *ra, ra_buf *b)
{
    if (atomic_load(&b->waiters) > 0) {
        pthread_mutex_lock(&ra->mu);
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&ra->mu);
    }
}

/* gen changed or shutdown (mu held): wake every sleeper. */
static void wake_all_locked(ch_ra *ra)
{
    for (uint32_t i = 0; ra->bufs && i < ra->depth; i++)
        pthread_cond_broadcast(&ra->bufs[i].cv);
}

/* Sleep until buffer b's word differs from `seen` or gen moves on. */
static void wait_change(ch_ra *ra, ra_buf *b, uint64_t seen, uint64_t gen)
{
    pthread_mutex_lock(&ra->mu);
    atomic_fetch_add(&b->waiters, 1);
    while (atomic_load(&b->word) == seen && atomic_load(&ra->gen) == gen && !ra->shutdown)
        pthread_cond_wait(&b->cv, &ra->mu);
    atomic_fetch_sub(&b->waiters, 1);
    pthread_mutex_unlock(&ra->mu);
}

static void ra_sleep_us(uint32_t us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ch_buf_reserve, but 4 KiB-aligned for O_DIRECT when ra->direct (same
 * growth, freed the same way: ch_buf_free). */
static int ra_reserve(ch_ra *ra, ch_buf *b, size_t n)
{
    if (!ra->direct)
        return ch_buf_reserve(b, n);
    if (n <= b->cap)
        return CHUTE_OK;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < n) {
        if (cap > SIZE_MAX / 4)
            return CHUTE_ENOMEM;
        cap *= 2;
    }
    uint8_t *d = ch_aligned_alloc(CH_DIRECT_ALIGN, cap + 64);
    if (!d)
        return CHUTE_ENOMEM;
    free(b->data);
    b->data = d;
    b->cap = cap;
    return CHUTE_OK;
}

static void note_inflight(ch_ra *ra, uint64_t now)
{
    uint64_t m = atomic_load_explicit(&ra->inflight_max, memory_order_relaxed);
    while (now > m && !atomic_compare_exchange_weak(&ra->inflight_max, &m, now))
        ;
}

/* Step one of task t, whose buffer the caller owns (ISSUED): 1 when b->req
 * is a read to do (locator held), 0 when b->rc is final already. */
static int task_prepare(ch_ra *ra, ra_buf *b, uint64_t t)
{
    const chute_dataset *ds = ra->ds;
    uint64_t idx = ch_sampler_get(ra->sampler, ra->base + t);
    b->rc = CH_RA_MISS;
    b->len = 0;
    b->grown = 0;
    /* The dataset's test faults are injected in ch_ds_read: leave the
     * target to its worker so they count exactly as without read-ahead. */
    if (idx == ds->inject_sample && atomic_load_explicit(&ds->inject_left, memory_order_relaxed))
        return 0;
    ch_locator *loc = &b->loc;
    chute_error err = {0};
    int rc = ds->fmt->locate(ds, idx, loc, &err);
    if (rc == CH_LOC_NONE)
        return 0;
    if (rc != CHUTE_OK) {
        b->err = err;
        b->rc = rc;
        atomic_fetch_add_explicit(&ra->failed, 1, memory_order_relaxed);
        return 0;
    }
    ch_aio_req *q = &b->req;
    memset(q, 0, sizeof *q);
    q->h = loc->h;
    q->path = loc->path;
    q->tag = t;
    size_t before = b->data.cap;
    b->direct_req = 0;
    if (loc->h) {
        /* Over the limit, or no memory: the worker's own read says so. */
        if (loc->len > ra->max_bytes)
            goto miss;
        q->off = loc->off;
        q->len = (size_t)loc->len;
        /* direct_io: a record starting on a 4 KiB boundary is read as the
         * aligned range [off, round_up(off + len)) into the aligned buffer;
         * the sample is its first len bytes, so nothing moves. */
        const uint64_t A = CH_DIRECT_ALIGN;
        uint64_t alen = (loc->len + A - 1) / A * A;
        if (ra->direct && loc->len && loc->off % A == 0 && alen <= ra->max_bytes + A &&
            loc->off <= UINT64_MAX - alen) {
            q->len = (size_t)alen;
            b->direct_req = 1;
        }
        if (ra_reserve(ra, &b->data, q->len) != CHUTE_OK)
            goto miss;
    } else {
        if (ra_reserve(ra, &b->data, 1) != CHUTE_OK)
            goto miss;
        q->len = b->data.cap < ra->max_bytes ? b->data.cap : (size_t)ra->max_bytes;
    }
    atomic_fetch_add(&ra->pool_bytes, b->data.cap - before);
    q->buf = b->data.data;
    return 1;
miss:
    if (ds->fmt->unlocate)
        ds->fmt->unlocate(ds, loc);
    return 0;
}

/* Step two: b->req finished with status rc (got bytes, message err).  1
 * when it must be done again (a whole file larger than the buffer: grown
 * once, never past max_bytes), else 0 with b->rc final and the locator
 * given back. */
static int task_complete(ch_ra *ra, ra_buf *b, int rc, size_t got, const chute_error *err)
{
    const chute_dataset *ds = ra->ds;
    ch_locator *loc = &b->loc;
    if (b->direct_req && rc != CHUTE_OK && rc != CH_RA_MISS) {
        /* The aligned range failed (it may end past the end of the file,
         * or the device wants a larger alignment): the exact range,
         * ordinarily; its failure is the read's. */
        b->direct_req = 0;
        atomic_fetch_add_explicit(&ra->direct_retried, 1, memory_order_relaxed);
        b->req.off = loc->off;
        b->req.len = (size_t)loc->len;
        return 1;
    }
    if (!loc->h && rc == CH_ESMALL && !b->grown && got <= ra->max_bytes) {
        size_t before = b->data.cap;
        b->grown = 1;
        if (ra_reserve(ra, &b->data, got ? got : 1) == CHUTE_OK) {
            atomic_fetch_add(&ra->pool_bytes, b->data.cap - before);
            b->req.buf = b->data.data;
            b->req.len = b->data.cap < ra->max_bytes ? b->data.cap : (size_t)ra->max_bytes;
            return 1;
        }
        rc = CH_RA_MISS; /* the worker's own read reports memory */
    }
    if (rc == CH_ESMALL)
        rc = CH_RA_MISS; /* over the limit, or grew meanwhile: the worker's read */
    b->len = loc->h ? (size_t)loc->len : got;
    if (ds->fmt->unlocate)
        ds->fmt->unlocate(ds, loc);
    if (rc != CHUTE_OK && rc != CH_RA_MISS) {
        b->err = *err;
        atomic_fetch_add_explicit(&ra->failed, 1, memory_order_relaxed);
    }
    b->rc = rc;
    return 0;
}

/* The reader's part for task t, whose buffer it now owns (ISSUED):
 * blocking reads through the source. */
static void read_task(ch_ra *ra, ra_buf *b, uint64_t t)
{
    const chute_dataset *ds = ra->ds;
    if (!task_prepare(ra, b, t))
        return;
    note_inflight(ra, atomic_fetch_add(&ra->in_reads, 1) + 1);
    if (ds->read_delay_us)
        ra_sleep_us(ds->read_delay_us);
    for (;;) {
        ch_aio_req *q = &b->req;
        chute_error err = {0};
        size_t got = q->len;
        int rc = q->h ? ds->src->read_at(q->h, q->path, q->off, q->buf, q->len, &err)
                      : ch_src_read_file(ds->src, q->path, q->buf, q->len, &got, &err);
        if (!task_complete(ra, b, rc, got, &err))
            break;
    }
    atomic_fetch_sub(&ra->in_reads, 1);
}

/* Task t is final (b->rc): READY for its worker, or free if it left. */
static void publish(ch_ra *ra, ra_buf *b, uint64_t t)
{
    uint64_t exp = WORD(t, ST_ISSUED);
    if (!atomic_compare_exchange_strong(&b->word, &exp, WORD(t, ST_READY)))
        atomic_store(&b->word, WORD(t + ra->depth, ST_FREE)); /* GONE: its worker is done */
    wake(ra, b);
}

/* One reader's share of the current run (generation gen). */
static void run_reader(ch_ra *ra, uint64_t gen)
{
    const uint64_t D = ra->depth;
    for (;;) {
        if (atomic_load(&ra->gen) != gen)
            return;
        uint64_t t = atomic_fetch_add(&ra->cursor, 1);
        if (t >= ra->total)
            return;
        uint64_t c = atomic_load_explicit(ra->claimed, memory_order_relaxed);
        if (t < c) {
            /* Workers got here first: jump to where they are. */
            uint64_t cur = t + 1;
            while (cur < c && !atomic_compare_exchange_weak(&ra->cursor, &cur, c))
                ;
            continue;
        }
        ra_buf *b = &ra->bufs[t % D];
        uint64_t w = atomic_load(&b->word);
        while (TURN(w) < t) { /* buffer still serves task t - depth (or older) */
            wait_change(ra, b, w, gen);
            if (atomic_load(&ra->gen) != gen)
                return;
            w = atomic_load(&b->word);
        }
        if (w != WORD(t, ST_FREE) ||
            !atomic_compare_exchange_strong(&b->word, &w, WORD(t, ST_ISSUED)))
            continue; /* its worker took it */
        read_task(ra, b, t);
        publish(ra, b, t);
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Hand b's prepared read to the engine; on refusal the task is the
 * worker's (CH_RA_MISS).  1 when it is in flight. */
static int aio_issue(ch_ra *ra, ra_buf *b, uint64_t t)
{
    const ch_source_ops *src = ra->ds->src;
    if (src->aio_submit(ra->aio, &b->req) == CHUTE_OK) {
        b->submitted = 1;
        return 1;
    }
    task_complete(ra, b, CH_RA_MISS, 0, NULL);
    publish(ra, b, t);
    return 0;
}

/* The engine broke: abandon what it holds (see the essay). */
static void aio_abandon(ch_ra *ra)
{
    for (uint32_t i = 0; i < ra->depth; i++) {
        ra_buf *b = &ra->bufs[i];
        if (!b->submitted)
            continue;
        b->submitted = 0;
        memset(&b->data, 0, sizeof b->data); /* the kernel may still write there */
        task_complete(ra, b, CH_RA_MISS, 0, NULL);
        publish(ra, b, b->req.tag);
    }
}

/* The engine thread's share of the current run (generation gen): the
 * claiming of run_reader, with up to depth reads in flight.  Only this
 * thread moves the cursor (it is the only reader), so it may look at a
 * task and leave it for later. */
static void run_async(ch_ra *ra, uint64_t gen)
{
    const uint64_t D = ra->depth;
    const ch_source_ops *src = ra->ds->src;
    const uint64_t delay = (uint64_t)ra->ds->read_delay_us * 1000u;
    uint64_t inflight = 0;             /* submitted + delayed */
    uint32_t phead = 0, pcount = 0;    /* delayed FIFO (due times ascend) */
    int stop = 0, exhausted = 0;
    uint64_t waited = UINT64_MAX;      /* the task whose buffer we slept on */
    for (;;) {
        if (!stop && atomic_load(&ra->gen) != gen)
            stop = 1;
        int blocked = 0;               /* a buffer still in use stopped the fill */
        while (!stop && !exhausted && inflight < D) {
            uint64_t t = atomic_load(&ra->cursor);
            if (t >= ra->total) {
                exhausted = 1;
                break;
            }
            uint64_t c = atomic_load_explicit(ra->claimed, memory_order_relaxed);
            /* Workers got here first: jump to where they are.  Not for a
             * task whose buffer we waited on: as run_reader, race its
             * worker for it (else with few buffers and many workers the
             * engine, always behind `claimed`, would never read). */
            if (t < c && t != waited) {
                atomic_store(&ra->cursor, c);
                continue;
            }
            ra_buf *b = &ra->bufs[t % D];
            uint64_t w = atomic_load(&b->word);
            if (TURN(w) < t) { /* buffer still serves task t - depth (or older) */
                if (inflight > 0) {
                    blocked = 1;
                    break; /* reap first; never sleep with reads in flight */
                }
                /* Nothing in flight, the pool full: sleep until a batch of
                 * D / 8 buffers is free (the one that many tasks ahead
                 * released), not one.  On warm data every read completes
                 * at once, and a wakeup per sample cost ~5% of a 2-core
                 * pipeline's images/s (bench/coldcache.sh --defaults:
                 * 10,000 context switches per 4,000 samples). */
                uint64_t tw = t + (D >= 16 ? D / 8 : 1) - 1;
                ra_buf *bw = tw < ra->total ? &ra->bufs[tw % D] : b;
                uint64_t ww = atomic_load(&bw->word);
                if (bw != b && TURN(ww) < tw)
                    wait_change(ra, bw, ww, gen);
                else
                    wait_change(ra, b, w, gen);
                waited = t;
                if (atomic_load(&ra->gen) != gen)
                    stop = 1;
                continue;
            }
            atomic_store(&ra->cursor, t + 1);
            if (w != WORD(t, ST_FREE) ||
                !atomic_compare_exchange_strong(&b->word, &w, WORD(t, ST_ISSUED)))
                continue; /* its worker took it */
            if (!task_prepare(ra, b, t)) {
                publish(ra, b, t);
                continue;
            }
            if (delay) {
                b->due_ns = now_ns() + delay;
                ra->pend[(phead + pcount) % D] = (uint32_t)(t % D);
                pcount++;
                inflight++;
            } else {
                inflight += (uint64_t)aio_issue(ra, b, t);
            }
            note_inflight(ra, inflight);
        }
        /* Delayed reads: submit the due ones; a cancelled run drops them. */
        int wait_ms = -1;
        while (pcount > 0) {
            ra_buf *b = &ra->bufs[ra->pend[phead]];
            uint64_t now = now_ns();
            if (!stop && b->due_ns > now) {
                uint64_t ms = (b->due_ns - now + 999999u) / 1000000u;
                wait_ms = ms > 1000 ? 1000 : (int)ms;
                break;
            }
            phead = (phead + 1) % (uint32_t)D;
            pcount--;
            if (stop) {
                inflight--;
                task_complete(ra, b, CH_RA_MISS, 0, NULL);
                publish(ra, b, b->req.tag);
            } else if (!aio_issue(ra, b, b->req.tag)) {
                inflight--;
            }
        }
        if (inflight == 0) {
            if (stop || exhausted)
                return;
            continue;
        }
        /* Stopped by a buffer in use: its worker will release it at any
         * moment, and a reap that waits for our own (slow) reads would not
         * notice; look again within a millisecond. */
        if (blocked && !stop && (wait_ms < 0 || wait_ms > 1))
            wait_ms = 1;
        int n = src->aio_reap(ra->aio, ra->done, (unsigned)D, wait_ms);
        if (n < 0) {
            for (; pcount > 0; pcount--, phead = (phead + 1) % (uint32_t)D) {
                ra_buf *b = &ra->bufs[ra->pend[phead]];
                task_complete(ra, b, CH_RA_MISS, 0, NULL);
                publish(ra, b, b->req.tag);
            }
            aio_abandon(ra);
            ra->aio_failed = 1;
            if (!stop)
                run_reader(ra, gen);
            return;
        }
        for (int i = 0; i < n; i++) {
            ch_aio_req *q = ra->done[i];
            ra_buf *b = &ra->bufs[q->tag % D];
            if (task_complete(ra, b, q->status, q->got, &q->err)) {
                if (!stop && src->aio_submit(ra->aio, q) == CHUTE_OK)
                    continue;
                task_complete(ra, b, CH_RA_MISS, 0, NULL);
            }
            b->submitted = 0;
            inflight--;
            publish(ra, b, q->tag);
        }
    }
}

static void *reader_main(void *arg)
{
    ra_thread *th = arg;
    ch_ra *ra = th->ra;
    uint64_t done_gen = UINT64_MAX;
    pthread_mutex_lock(&ra->mu);
    for (;;) {
        while (!ra->shutdown && !(ra->running && atomic_load(&ra->gen) != done_gen))
            pthread_cond_wait(&ra->run_cv, &ra->mu);
        if (ra->shutdown)
            break;
        uint64_t gen = atomic_load(&ra->gen);
        ra->busy++;
        pthread_mutex_unlock(&ra->mu);
        if (ra->aio && !ra->aio_failed)
            run_async(ra, gen);
        else
            run_reader(ra, gen);
        pthread_mutex_lock(&ra->mu);
        done_gen = gen;
        if (--ra->busy == 0)
            pthread_cond_broadcast(&ra->idle_cv);
    }
    pthread_mutex_unlock(&ra->mu);
    return NULL;
}

int ch_ra_create(ch_ra **out, const chute_dataset *ds, const ch_sampler *sampler, uint32_t depth,
                 uint64_t max_bytes, const _Atomic uint64_t *claimed, chute_error *err)
{
    *out = NULL;
    if (depth == 0 || !ds->fmt->locate || !ds->fmt->from_bytes)
        return CHUTE_OK;
    ch_ra *ra = calloc(1, sizeof *ra);
    if (!ra)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for the read-ahead");
    ra->ds = ds;
    ra->sampler = sampler;
    ra->claimed = claimed;
    ra->max_bytes = max_bytes < SIZE_MAX / 2 ? max_bytes : SIZE_MAX / 2;
    ra->depth = depth;
    ra->nthreads = depth < RA_MAX_THREADS ? depth : RA_MAX_THREADS;
    /* The asynchronous engine when the source has one (the essay);
     * CHUTE_READAHEAD_ENGINE=threads asks for the threads (tests, bench). */
    const char *want = getenv("CHUTE_READAHEAD_ENGINE");
    const ch_source_ops *src = ds->src;
    if (!(want && strcmp(want, "threads") == 0) && src->aio_open && src->aio_submit &&
        src->aio_reap && src->aio_close) {
        chute_error e2 = {0};
        ra->done = calloc(depth, sizeof *ra->done);
        ra->pend = calloc(depth, sizeof *ra->pend);
        if (ra->done && ra->pend && src->aio_open(src->self, depth, &ra->aio, &e2) == CHUTE_OK)
            ra->nthreads = 1;
        else
            ra->aio = NULL; /* no ring here: the threads, silently */
    }
    /* The engine must be the local source's: ch_local_aio_direct is its. */
    if (ra->aio && ds->direct_io && (src->caps & CH_SOURCE_CAP_DIRECT) &&
        src->aio_open == ch_source_local.aio_open) {
        ch_local_aio_direct(ra->aio, 1);
        ra->direct = 1;
    }
    pthread_mutex_init(&ra->mu, NULL);
    pthread_cond_init(&ra->run_cv, NULL);
    pthread_cond_init(&ra->idle_cv, NULL);
    atomic_store(&ra->gen, 1);
    ra->bufs = calloc(depth, sizeof *ra->bufs);
    for (uint32_t i = 0; ra->bufs && i < depth; i++)
        pthread_cond_init(&ra->bufs[i].cv, NULL);
    ra->threads = calloc(ra->nthreads, sizeof *ra->threads);
    if (!ra->bufs || !ra->threads) {
        ch_ra_destroy(ra);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %u read-ahead buffers", depth);
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256u << 10); /* readers only call read paths */
    for (uint32_t i = 0; i < ra->nthreads; i++) {
        ra->threads[i].ra = ra;
        int rc = pthread_create(&ra->threads[i].thread, &attr, reader_main, &ra->threads[i]);
        if (rc != 0) {
            pthread_attr_destroy(&attr);
            ch_ra_destroy(ra);
            return ch_err_errno(err, CHUTE_ENOMEM, rc, "cannot start read-ahead thread %u", i);
        }
        ra->threads[i].started = 1;
    }
    pthread_attr_destroy(&attr);
    *out = ra;
    return CHUTE_OK;
}

void ch_ra_destroy(ch_ra *ra)
{
    if (!ra)
        return;
    pthread_mutex_lock(&ra->mu);
    ra->shutdown = 1;
    atomic_fetch_add(&ra->gen, 1);
    pthread_cond_broadcast(&ra->run_cv);
    wake_all_locked(ra);
    pthread_mutex_unlock(&ra->mu);
    for (uint32_t i = 0; ra->threads && i < ra->nthreads; i++)
        if (ra->threads[i].started)
            pthread_join(ra->threads[i].thread, NULL);
    if (ra->aio)
        ra->ds->src->aio_close(ra->aio); /* nothing in flight: the thread drained it */
    for (uint32_t i = 0; ra->bufs && i < ra->depth; i++) {
        ch_buf_free(&ra->bufs[i].data);
        pthread_cond_destroy(&ra->bufs[i].cv);
    }
    free(ra->bufs);
    free(ra->threads);
    free(ra->done);
    free(ra->pend);
    pthread_mutex_destroy(&ra->mu);
    pthread_cond_destroy(&ra->run_cv);
    pthread_cond_destroy(&ra->idle_cv);
    free(ra);
}

void ch_ra_start(ch_ra *ra, uint64_t base, uint64_t total)
{
    if (!ra)
        return;
    pthread_mutex_lock(&ra->mu);
    ra->base = base;
    ra->total = total;
    for (uint32_t i = 0; i < ra->depth; i++)
        atomic_store(&ra->bufs[i].word, WORD(i, ST_FREE));
    atomic_store(&ra->cursor, 0);
    atomic_fetch_add(&ra->gen, 1);
    ra->running = 1;
    pthread_cond_broadcast(&ra->run_cv);
    pthread_mutex_unlock(&ra->mu);
}

void ch_ra_cancel(ch_ra *ra)
{
    if (!ra)
        return;
    pthread_mutex_lock(&ra->mu);
    ra->running = 0;
    atomic_fetch_add(&ra->gen, 1);
    wake_all_locked(ra);
    pthread_mutex_unlock(&ra->mu);
}

void ch_ra_quiesce(ch_ra *ra)
{
    if (!ra)
        return;
    pthread_mutex_lock(&ra->mu);
    while (ra->busy > 0)
        pthread_cond_wait(&ra->idle_cv, &ra->mu);
    pthread_mutex_unlock(&ra->mu);
}

int ch_ra_take(ch_ra *ra, uint64_t t, const uint8_t **raw, size_t *len, chute_error *err)
{
    ra_buf *b = &ra->bufs[t % ra->depth];
    uint64_t gen = atomic_load(&ra->gen);
    for (;;) {
        uint64_t w = atomic_load(&b->word);
        if (TURN(w) > t)
            break; /* cannot happen for a task being run; be safe */
        if (TURN(w) == t) {
            int st = STATE(w);
            if (st == ST_FREE) {
                if (atomic_compare_exchange_strong(&b->word, &w, WORD(t, ST_BUSY)))
                    break; /* the reader has not come yet: read it yourself */
                continue;
            }
            if (st == ST_READY) {
                if (!atomic_compare_exchange_strong(&b->word, &w, WORD(t, ST_BUSY)))
                    continue;
                if (b->rc == CH_RA_MISS)
                    break;
                if (b->rc != CHUTE_OK) {
                    if (err)
                        *err = b->err;
                    return b->rc;
                }
                atomic_fetch_add_explicit(&ra->hits, 1, memory_order_relaxed);
                *raw = b->data.data;
                *len = b->len;
                return CHUTE_OK;
            }
            if (st != ST_ISSUED)
                break; /* BUSY: taken already (a retry) */
        }
        /* In flight, or the buffer still serves an older task. */
        if (atomic_load(&ra->gen) != gen)
            break;
        wait_change(ra, b, w, gen);
        if (atomic_load(&ra->gen) != gen)
            break;
    }
    atomic_fetch_add_explicit(&ra->misses, 1, memory_order_relaxed);
    return CH_RA_MISS;
}

void ch_ra_done(ch_ra *ra, uint64_t t)
{
    ra_buf *b = &ra->bufs[t % ra->depth];
    const uint64_t D = ra->depth;
    for (;;) {
        uint64_t w = atomic_load(&b->word);
        if (TURN(w) != t)
            return;
        int st = STATE(w);
        if (st == ST_GONE)
            return;
        uint64_t to = st == ST_ISSUED ? WORD(t, ST_GONE) : WORD(t + D, ST_FREE);
        if (atomic_compare_exchange_strong(&b->word, &w, to))
            break;
    }
    wake(ra, b);
}

void ch_ra_get_stats(const ch_ra *ra, ch_ra_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!ra)
        return;
    ch_ra *m = (ch_ra *)ra; /* atomics only */
    out->hits = atomic_load(&m->hits);
    out->misses = atomic_load(&m->misses);
    out->failed = atomic_load(&m->failed);
    out->pool_bytes = atomic_load(&m->pool_bytes);
    out->depth = ra->depth;
    out->threads = ra->nthreads;
    out->async = ra->aio && !ra->aio_failed;
    out->inflight_max = atomic_load(&m->inflight_max);
    out->direct_reads = ra->direct ? ch_local_aio_direct_reads(ra->aio) : 0;
    out->direct_retried = atomic_load(&m->direct_retried);
}

void ch_ra_free_forked(ch_ra *ra)
{
    if (!ra)
        return;
    for (uint32_t i = 0; ra->bufs && i < ra->depth; i++)
        ch_buf_free(&ra->bufs[i].data);
    free(ra->bufs);
    free(ra->threads);
    free(ra->done);
    free(ra->pend);
    free(ra);
}
