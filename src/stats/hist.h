/*
 * hist.h — a latency histogram with ~6% resolution over 1 ns .. 2^63 ns.
 *
 * Bucket = (floor(log2 v), next 3 bits of v): 512 buckets, 4 KiB.  One
 * writer per histogram (a worker's own), any number of readers; counts are
 * relaxed atomics so cross-thread snapshots are well-defined.
 */
#ifndef CHUTE_HIST_H
#define CHUTE_HIST_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define CH_HIST_BUCKETS 512

typedef struct ch_hist {
    _Atomic uint64_t b[CH_HIST_BUCKETS];
} ch_hist;

static inline unsigned ch_hist_bucket(uint64_t v)
{
    if (v < 8)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 3 */
    unsigned sub = (unsigned)(v >> (e - 3)) & 7u;
    return (e - 2) * 8 + sub;
}

/* Lower bound of a bucket's range. */
static inline uint64_t ch_hist_lower(unsigned i)
{
    if (i < 8)
        return i;
    unsigned e = i / 8 + 2, sub = i % 8;
    return (8ull + sub) << (e - 3);
}

static inline void ch_hist_add(ch_hist *h, uint64_t v)
{
    _Atomic uint64_t *c = &h->b[ch_hist_bucket(v)];
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Plain snapshot for summing and querying. */
typedef struct ch_hist_snap {
    uint64_t b[CH_HIST_BUCKETS];
    uint64_t n;
} ch_hist_snap;

static inline void ch_hist_merge(ch_hist_snap *dst, const ch_hist *h)
{
    for (unsigned i = 0; i < CH_HIST_BUCKETS; i++) {
        uint64_t c = atomic_load_explicit(&h->b[i], memory_order_relaxed);
        dst->b[i] += c;
        dst->n += c;
    }
}

/* Value at quantile q (0..1): the middle of the bucket holding it. */
static inline uint64_t ch_hist_quantile(const ch_hist_snap *s, double q)
{
    if (s->n == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)(s->n - 1)) + 1, acc = 0;
    for (unsigned i = 0; i < CH_HIST_BUCKETS; i++) {
        acc += s->b[i];
        if (acc >= rank) {
            uint64_t lo = ch_hist_lower(i), hi = i + 1 < CH_HIST_BUCKETS ? ch_hist_lower(i + 1) : lo;
            return lo + (hi - lo) / 2;
        }
    }
    return ch_hist_lower(CH_HIST_BUCKETS - 1);
}

#endif
