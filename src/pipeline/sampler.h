/*
 * sampler.h — which sample goes where, per epoch.
 *
 * Knows only sample ids.  Epoch e's order is a Fisher-Yates permutation
 * drawn from (seed, e); rank r of w takes positions r, r+w, r+2w, ... of
 * it (torch's DistributedSampler convention), after the permutation is
 * padded by repeating its head (PAD) or cut (DROP) to a multiple of w.
 * Every sample is delivered exactly once per epoch across ranks, except
 * the <= w-1 repeats PAD adds.  (epoch, position) is the whole state.
 */
#ifndef CHUTE_SAMPLER_H
#define CHUTE_SAMPLER_H

#include "../common/common.h"

typedef struct ch_sampler {
    uint64_t n;
    uint64_t seed;
    int shuffle;
    uint32_t rank, world;
    int drop;
    uint64_t per_rank;
    uint64_t epoch;
    uint64_t *perm;           /* n entries, rewritten by ch_sampler_set_epoch */
} ch_sampler;

int ch_sampler_init(ch_sampler *s, uint64_t n, uint64_t seed, int shuffle, uint32_t rank,
                    uint32_t world, int drop);
void ch_sampler_free(ch_sampler *s);
void ch_sampler_set_epoch(ch_sampler *s, uint64_t epoch);
/* Dataset index of this rank's k-th sample (k < per_rank) in the epoch. */
static inline uint64_t ch_sampler_get(const ch_sampler *s, uint64_t k)
{
    uint64_t g = s->rank + k * s->world;
    return s->perm[g % s->n];
}

#endif
