/*
 * readahead.h — reads issued ahead of the workers, from the sampler's
 * order (the essay is in readahead.c).
 *
 * Positions are this run's task numbers t = 0..total-1 (the loader's
 * `next_task` counter); the sample at t is sampler[base + t].
 */
#ifndef CHUTE_READAHEAD_H
#define CHUTE_READAHEAD_H

#include "../format/format.h"
#include "sampler.h"

#include <stdatomic.h>

typedef struct ch_ra ch_ra;

/* Nothing ready for this task: read it yourself (ch_ra_take). */
#define CH_RA_MISS 102

/* Read-ahead counters (tests, diagnostics). */
typedef struct ch_ra_stats {
    uint64_t hits;            /* tasks served from a ready buffer */
    uint64_t misses;          /* tasks the worker read itself */
    uint64_t failed;          /* read-ahead reads that failed (handed on as the first attempt) */
    uint64_t pool_bytes;      /* bytes held by the buffer pool now */
    uint32_t depth;           /* buffers in the pool */
    uint32_t threads;         /* reader threads (1 engine thread when async) */
    uint32_t async;           /* 1: reads through the source's async engine (io_uring) */
    uint64_t inflight_max;    /* the most reads ever in flight at once */
    uint64_t direct_reads;    /* reads done through O_DIRECT (direct_io) */
    uint64_t direct_retried;  /* aligned ranges that failed, read again exactly */
} ch_ra_stats;

/* A read-ahead of `depth` samples over ds, in the order of `sampler`
 * (read-only here; rewritten by the loader only between runs).  `claimed`
 * is the loader's task counter (how far workers got: never read ahead of
 * tasks already taken).  Buffers never grow past max_bytes (a larger
 * sample is left to the worker, which reports the limit).  *out = NULL and
 * CHUTE_OK when the format has no locate op or depth is 0. */
int ch_ra_create(ch_ra **out, const chute_dataset *ds, const ch_sampler *sampler, uint32_t depth,
                 uint64_t max_bytes, const _Atomic uint64_t *claimed, chute_error *err);
/* Stops and joins the threads.  NULL is fine. */
void ch_ra_destroy(ch_ra *ra);

/* A run of `total` tasks starting at sampler position `base`.  Workers
 * and read-ahead threads must be idle (after ch_ra_cancel + ch_ra_quiesce,
 * or before the first run). */
void ch_ra_start(ch_ra *ra, uint64_t base, uint64_t total);
/* Stop issuing and wake every worker waiting in ch_ra_take (they get
 * CH_RA_MISS).  Does not wait; any thread. */
void ch_ra_cancel(ch_ra *ra);
/* Wait until no read-ahead read is in flight (after ch_ra_cancel). */
void ch_ra_quiesce(ch_ra *ra);

/* Worker, task t: the bytes the format located for it, once.  CHUTE_OK:
 * *raw and *len are the located range (valid until ch_ra_done(t)); an error
 * status: the read-ahead read failed, err says why (treat it as the first
 * read attempt); CH_RA_MISS: read it yourself.  May wait while t's read is
 * in flight. */
int ch_ra_take(ch_ra *ra, uint64_t t, const uint8_t **raw, size_t *len, chute_error *err);
/* Worker: task t is finished (whether or not it took anything); its buffer
 * goes back to the pool.  Must be called once for every task run. */
void ch_ra_done(ch_ra *ra, uint64_t t);

void ch_ra_get_stats(const ch_ra *ra, ch_ra_stats *out);

/* In a fork() child (the reader threads do not exist there and the lock
 * may be held): free the memory, touch no lock, join nothing. */
void ch_ra_free_forked(ch_ra *ra);

/* The loader's read-ahead counters (loader.c); all zero when it is off. */
void ch_loader_ra_stats(const chute_loader *ld, ch_ra_stats *out);

#endif
