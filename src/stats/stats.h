/*
 * stats.h — counters.
 *
 * Each worker owns one ch_worker_stats on its own cache line and is the
 * only writer; readers (chute_loader_stats, any thread) sum them.  Relaxed
 * atomics make those cross-thread reads well-defined without costing the
 * writer more than a plain add.
 */
#ifndef CHUTE_STATS_H
#define CHUTE_STATS_H

#include "../common/common.h"

#include <stdatomic.h>

typedef struct ch_stage {
    _Atomic uint64_t items, bytes, busy_ns;
} ch_stage;

typedef struct ch_worker_stats {
    ch_stage read, decode, transform;
    _Atomic uint64_t corrupt;
    _Atomic uint64_t dct_scaled;
    _Atomic uint64_t io_retries;
    _Atomic uint64_t cache_hits;
    _Atomic uint64_t cache_misses;
    char pad[CH_CACHELINE];
} __attribute__((aligned(CH_CACHELINE))) ch_worker_stats;

static inline void ch_stage_add(ch_stage *s, uint64_t items, uint64_t bytes, uint64_t ns)
{
    atomic_store_explicit(&s->items, atomic_load_explicit(&s->items, memory_order_relaxed) + items,
                          memory_order_relaxed);
    atomic_store_explicit(&s->bytes, atomic_load_explicit(&s->bytes, memory_order_relaxed) + bytes,
                          memory_order_relaxed);
    atomic_store_explicit(&s->busy_ns,
                          atomic_load_explicit(&s->busy_ns, memory_order_relaxed) + ns,
                          memory_order_relaxed);
}

static inline void ch_counter_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static inline void ch_stage_sum(chute_stage_stats *dst, const ch_stage *s)
{
    dst->items += atomic_load_explicit(&s->items, memory_order_relaxed);
    dst->bytes += atomic_load_explicit(&s->bytes, memory_order_relaxed);
    dst->busy_ns += atomic_load_explicit(&s->busy_ns, memory_order_relaxed);
}

#endif
