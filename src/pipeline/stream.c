/*
 * stream.c — the pump: one thread that reads a stream's samples into a
 * bounded arena, mixes them through the seeded shuffle buffer and
 * publishes them in order (see stream.h for the why and the contracts).
 *
 * Publication.  Position t's record handle is written to ring[t % nrec]
 * before `avail` is raised past t with a release store; a worker that
 * sees avail > t with an acquire load may read the slot and the record.
 * avail moves in whole batches (or to the final count), so a worker that
 * claims a position knows how many samples its batch has.  The ring
 * cannot overwrite an unclaimed or still-used entry: every entry from the
 * oldest unreleased position on names a distinct live record, and there
 * are only nrec records.
 *
 * Locks: `mu` guards the free list and the two waits (the pump for a free
 * record, workers for a published position); the claim itself is a CAS.
 */
#include "stream.h"
#include "../io/io.h"

#include <stdio.h>
#include <string.h>

struct ch_stream {
    ch_stream_config cfg;
    uint32_t nrec;
    ch_stream_rec *recs;
    uint32_t *ring;           /* position % nrec -> handle */
    uint32_t *freelist;       /* (mu) nfree handles */
    uint32_t nfree;
    uint32_t *stash;          /* the pump's own free handles */
    uint32_t nstash;
    ch_shufbuf sb;            /* pump only */

    pthread_mutex_t mu;
    pthread_cond_t pump_cv;   /* pump: a record came back, or stop */
    pthread_cond_t work_cv;   /* workers: more published, the end, or a wake */
    _Atomic uint64_t avail;   /* positions published */
    _Atomic uint64_t next;    /* next position to claim */
    _Atomic int final;        /* total is the run's sample count */
    uint64_t total;
    _Atomic int stop;

    pthread_t thread;
    int have_thread;
    void *reader;             /* the open reader (pump only while running) */
    int open_rc;
    chute_error open_err;
    uint64_t epoch, skip;
    uint64_t gen;             /* (mu) the run's; UINT64_MAX between runs */
    int inited;               /* the locks exist */
    uint8_t *state;           /* (mu) resume bytes: set_state's, or the last run's at close */
    size_t state_len;
    int state_pinned;         /* (mu) set_state's, kept until the next open */
};

int ch_stream_create(const ch_stream_config *cfg, ch_stream **out, chute_error *err)
{
    *out = NULL;
    uint64_t n = (uint64_t)cfg->buffer + ((uint64_t)cfg->nslots + 2) * cfg->batch_size;
    if (n > (1u << 30))
        return ch_err(err, CHUTE_EINVAL,
                      "stream: shuffle_buffer + (prefetch + max_held + 2) x batch_size = %llu "
                      "records is over the limit of 2^30",
                      (unsigned long long)n);
    ch_stream *st = calloc(1, sizeof *st);
    if (!st)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    st->cfg = *cfg;
    st->nrec = (uint32_t)n;
    st->recs = calloc(n, sizeof *st->recs);
    st->ring = calloc(n, sizeof *st->ring);
    st->freelist = calloc(n, sizeof *st->freelist);
    st->stash = calloc(n, sizeof *st->stash);
    if (!st->recs || !st->ring || !st->freelist || !st->stash ||
        ch_shufbuf_init(&st->sb, cfg->buffer) != CHUTE_OK) {
        ch_stream_free(st);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu stream records",
                      (unsigned long long)n);
    }
    for (uint32_t i = 0; i < st->nrec; i++)
        st->freelist[i] = i;
    st->nfree = st->nrec;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->pump_cv, NULL);
    pthread_cond_init(&st->work_cv, NULL);
    st->inited = 1;
    st->gen = UINT64_MAX;
    *out = st;
    return CHUTE_OK;
}

const char *ch_stream_name(const ch_stream *st) { return st->cfg.spec->name; }

/* A free record for the pump, waiting for one; UINT32_MAX on stop. */
static uint32_t take_free(ch_stream *st)
{
    if (st->nstash == 0) {
        pthread_mutex_lock(&st->mu);
        while (st->nfree == 0 && !atomic_load(&st->stop))
            pthread_cond_wait(&st->pump_cv, &st->mu);
        memcpy(st->stash, st->freelist, st->nfree * sizeof *st->stash);
        st->nstash = st->nfree;
        st->nfree = 0;
        pthread_mutex_unlock(&st->mu);
        if (st->nstash == 0)
            return UINT32_MAX;
    }
    return st->stash[--st->nstash];
}

static void publish(ch_stream *st, uint64_t avail)
{
    atomic_store_explicit(&st->avail, avail, memory_order_release);
    pthread_mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->work_cv);
    pthread_mutex_unlock(&st->mu);
}

typedef struct pump_pos {
    uint64_t emitted;         /* positions of the epoch's order so far (skipped included) */
    uint64_t published;       /* run positions written to the ring */
} pump_pos;

static void emit(ch_stream *st, pump_pos *pp, uint32_t h)
{
    uint64_t p = pp->emitted++;
    if (p < st->skip) { /* resumed run: this sample was delivered before */
        if (st->cfg.spec->ops->release)
            st->cfg.spec->ops->release(st->reader, st->recs[h].token);
        st->stash[st->nstash++] = h;
        return;
    }
    uint64_t t = pp->published++;
    st->ring[t % st->nrec] = h;
    if (pp->published % st->cfg.batch_size == 0)
        publish(st, pp->published);
}

static void finish(ch_stream *st, uint64_t published, int status, const chute_error *err)
{
    uint64_t B = st->cfg.batch_size;
    uint64_t total = published;
    if (st->cfg.drop_last)
        total -= published % B; /* only complete batches */
    st->total = total;
    atomic_store(&st->final, 1);
    publish(st, total);
    if (!st->cfg.spec->ops->release) {
        /* Nothing will be released to it: stop the command now. */
        pthread_mutex_lock(&st->mu);
        void *r = st->reader;
        st->reader = NULL;
        pthread_mutex_unlock(&st->mu);
        if (r)
            st->cfg.spec->ops->close(r);
    }
    if (st->cfg.on_end && !atomic_load(&st->stop))
        st->cfg.on_end(st->cfg.ctx, st->gen, (total + B - 1) / B, status, err);
}

static void *pump_main(void *arg)
{
    ch_stream *st = arg;
    const ch_stream_reader_ops *ops = st->cfg.spec->ops;
    pump_pos pp = {0, 0};
    chute_error err = {0};
    if (st->open_rc != CHUTE_OK) {
        finish(st, 0, st->open_rc, &st->open_err);
        return NULL;
    }
    uint64_t read = 0;
    int rc = CHUTE_OK;
    for (;;) {
        if (st->cfg.max_samples && read >= st->cfg.max_samples) {
            rc = CHUTE_END;
            break;
        }
        uint32_t h = take_free(st);
        if (h == UINT32_MAX)
            return NULL; /* stopped */
        st->recs[h].img_off = 0; /* stream.h: only TFRecord readers set these */
        st->recs[h].ex_len = 0;
        rc = ops->next(st->reader, &st->recs[h], &err);
        if (rc != CHUTE_OK) {
            st->stash[st->nstash++] = h;
            break;
        }
        read++;
        uint64_t out;
        if (ch_shufbuf_push(&st->sb, h, &out))
            emit(st, &pp, (uint32_t)out);
    }
    if (atomic_load(&st->stop))
        return NULL;
    /* What was read is delivered, even when the stream broke: the buffer
     * is drained, then the end (or the error) is published. */
    uint64_t out;
    while (ch_shufbuf_drain(&st->sb, &out))
        emit(st, &pp, (uint32_t)out);
    finish(st, pp.published, rc == CHUTE_END ? CHUTE_OK : rc, rc == CHUTE_END ? NULL : &err);
    return NULL;
}

int ch_stream_start(ch_stream *st, uint64_t epoch, uint64_t skip, uint64_t gen)
{
    ch_stream_stop(st);
    st->epoch = epoch;
    st->skip = skip;
    pthread_mutex_lock(&st->mu);
    st->gen = gen;
    pthread_mutex_unlock(&st->mu);
    ch_shufbuf_reset(&st->sb, ch_rng_for(st->cfg.seed ^ 0x53545245414dull, epoch, 0));
    memset(&st->open_err, 0, sizeof st->open_err);
    void *reader = NULL;
    if (st->cfg.spec->ops->open_at) {
        /* The reader resumes by its own position: nothing to skip.  (The
         * state is only changed by set_state, on this same thread.) */
        st->skip = 0;
        ch_stream_where w = {st->cfg.rank, st->cfg.world, st->nrec, st->state, st->state_len};
        st->open_rc = st->cfg.spec->ops->open_at(st->cfg.spec, epoch, st->cfg.timeout_ms,
                                                 st->cfg.max_bytes, &w, &reader, &st->open_err);
    } else {
        st->open_rc = st->cfg.spec->ops->open(st->cfg.spec, epoch, st->cfg.timeout_ms,
                                              st->cfg.max_bytes, &reader, &st->open_err);
    }
    pthread_mutex_lock(&st->mu);
    st->reader = st->open_rc == CHUTE_OK ? reader : NULL;
    st->state_pinned = 0;
    pthread_mutex_unlock(&st->mu);
    int rc = pthread_create(&st->thread, NULL, pump_main, st);
    if (rc != 0) {
        if (st->reader)
            st->cfg.spec->ops->close(st->reader);
        st->reader = NULL;
        st->total = 0;
        atomic_store(&st->final, 1);
        return CHUTE_ENOMEM;
    }
    st->have_thread = 1;
    return CHUTE_OK;
}

void ch_stream_wake(ch_stream *st)
{
    pthread_mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->work_cv);
    pthread_mutex_unlock(&st->mu);
}

void ch_stream_stop(ch_stream *st)
{
    atomic_store(&st->stop, 1);
    pthread_mutex_lock(&st->mu);
    if (st->reader) /* under mu: finish() takes the reader out under it */
        st->cfg.spec->ops->cancel(st->reader);
    pthread_cond_broadcast(&st->pump_cv);
    pthread_cond_broadcast(&st->work_cv);
    pthread_mutex_unlock(&st->mu);
    if (st->have_thread) {
        pthread_join(st->thread, NULL);
        st->have_thread = 0;
    }
    /* Keep the run's last position (state asked for between runs), and
     * take the reader out under mu: get_state must not see it closing. */
    pthread_mutex_lock(&st->mu);
    void *r = st->reader;
    st->reader = NULL;
    if (r && st->cfg.spec->ops->state_save && !st->state_pinned) {
        size_t len = 0;
        chute_error e = {0};
        int src = st->cfg.spec->ops->state_save(r, NULL, 0, &len, &e);
        if (src == CH_ESMALL || (src == CHUTE_OK && len == 0)) {
            uint8_t *b = len ? malloc(len) : NULL;
            if (!len || (b && st->cfg.spec->ops->state_save(r, b, len, &len, &e) == CHUTE_OK)) {
                free(st->state);
                st->state = b;
                st->state_len = len;
            } else {
                free(b);
            }
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (r)
        st->cfg.spec->ops->close(r);
    /* Every record is free again; releases of this run are stale. */
    pthread_mutex_lock(&st->mu);
    for (uint32_t i = 0; i < st->nrec; i++)
        st->freelist[i] = i;
    st->nfree = st->nrec;
    st->gen = UINT64_MAX;
    pthread_mutex_unlock(&st->mu);
    st->nstash = 0;
    atomic_store(&st->avail, 0);
    atomic_store(&st->next, 0);
    atomic_store(&st->final, 0);
    st->total = 0;
    atomic_store(&st->stop, 0);
}

void ch_stream_free(ch_stream *st)
{
    if (!st)
        return;
    if (st->inited)
        ch_stream_stop(st);
    if (st->recs)
        for (uint32_t i = 0; i < st->nrec; i++)
            ch_buf_free(&st->recs[i].data);
    if (st->inited) {
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->pump_cv);
        pthread_cond_destroy(&st->work_cv);
    }
    ch_shufbuf_free(&st->sb);
    free(st->state);
    free(st->recs);
    free(st->ring);
    free(st->freelist);
    free(st->stash);
    free(st);
}

int ch_stream_claim(ch_stream *st, int (*alive)(void *), void *actx, uint64_t *t, uint32_t *h)
{
    for (;;) {
        uint64_t cur = atomic_load_explicit(&st->next, memory_order_relaxed);
        uint64_t a = atomic_load_explicit(&st->avail, memory_order_acquire);
        if (cur < a) {
            if (atomic_compare_exchange_weak(&st->next, &cur, cur + 1)) {
                *t = cur;
                *h = st->ring[cur % st->nrec];
                return CHUTE_OK;
            }
            continue;
        }
        if (atomic_load(&st->final) || !alive(actx))
            return CHUTE_END;
        pthread_mutex_lock(&st->mu);
        while (atomic_load(&st->avail) <= cur && !atomic_load(&st->final) && alive(actx))
            pthread_cond_wait(&st->work_cv, &st->mu);
        pthread_mutex_unlock(&st->mu);
    }
}

uint32_t ch_stream_handle_at(const ch_stream *st, uint64_t t) { return st->ring[t % st->nrec]; }

uint32_t ch_stream_batch_count(const ch_stream *st, uint64_t b)
{
    uint64_t B = st->cfg.batch_size;
    if (atomic_load_explicit(&st->avail, memory_order_acquire) >= (b + 1) * B)
        return (uint32_t)B;
    if (atomic_load(&st->final) && st->total > b * B)
        return (uint32_t)CH_MIN(B, st->total - b * B);
    return (uint32_t)B;
}

const ch_stream_rec *ch_stream_rec_of(const ch_stream *st, uint32_t h) { return &st->recs[h]; }

void ch_stream_release(ch_stream *st, uint64_t gen, const uint32_t *h, uint32_t n)
{
    pthread_mutex_lock(&st->mu);
    if (gen == st->gen) {
        for (uint32_t i = 0; i < n; i++) {
            if (st->cfg.spec->ops->release && st->reader)
                st->cfg.spec->ops->release(st->reader, st->recs[h[i]].token);
            st->freelist[st->nfree++] = h[i];
        }
        pthread_cond_signal(&st->pump_cv);
    }
    pthread_mutex_unlock(&st->mu);
}

int ch_stream_set_state(ch_stream *st, const void *buf, size_t len)
{
    uint8_t *b = NULL;
    if (len) {
        b = malloc(len);
        if (!b)
            return CHUTE_ENOMEM;
        memcpy(b, buf, len);
    }
    pthread_mutex_lock(&st->mu);
    free(st->state);
    st->state = b;
    st->state_len = len;
    st->state_pinned = 1;
    pthread_mutex_unlock(&st->mu);
    return CHUTE_OK;
}

int ch_stream_get_state(ch_stream *st, void *buf, size_t cap, size_t *len, chute_error *err)
{
    int rc = CHUTE_OK;
    *len = 0;
    pthread_mutex_lock(&st->mu);
    if (st->reader && st->cfg.spec->ops->state_save && !st->state_pinned) {
        rc = st->cfg.spec->ops->state_save(st->reader, buf, cap, len, err);
    } else if (st->cfg.spec->ops->state_save) {
        *len = st->state_len;
        if (st->state_len > cap)
            rc = CH_ESMALL;
        else if (st->state_len)
            memcpy(buf, st->state, st->state_len);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int ch_stream_spec_reopen_check(const ch_stream_spec *spec, uint64_t epoch, chute_error *err)
{
    if (!spec->cmd && epoch > 0)
        return ch_err(err, CHUTE_EINVAL,
                      "-: stdin can be read only once; a second epoch needs a pipe: command "
                      "(which runs again for each epoch)");
    return CHUTE_OK;
}
