/*
 * sampler.c — per-epoch permutation and rank split (see sampler.h).
 */
#include "sampler.h"

#include <string.h>

int ch_sampler_init(ch_sampler *s, uint64_t n, uint64_t seed, int shuffle, uint32_t rank,
                    uint32_t world, int drop)
{
    memset(s, 0, sizeof *s);
    if (n == 0 || world == 0 || rank >= world)
        return CHUTE_EINVAL;
    s->n = n;
    s->seed = seed;
    s->shuffle = shuffle;
    s->rank = rank;
    s->world = world;
    s->drop = drop;
    s->per_rank = drop ? n / world : (n + world - 1) / world;
    s->perm = malloc(n * sizeof *s->perm);
    if (!s->perm)
        return CHUTE_ENOMEM;
    s->epoch = UINT64_MAX;
    ch_sampler_set_epoch(s, 0);
    return CHUTE_OK;
}

void ch_sampler_free(ch_sampler *s)
{
    free(s->perm);
    s->perm = NULL;
}

void ch_sampler_set_epoch(ch_sampler *s, uint64_t epoch)
{
    if (s->epoch == epoch)
        return;
    s->epoch = epoch;
    if (!s->shuffle) {
        for (uint64_t i = 0; i < s->n; i++)
            s->perm[i] = i;
        return;
    }
    /* Same (seed, epoch) gives the same order on every rank: that is what
     * lets ranks split the epoch without talking to each other. */
    ch_rng r = ch_rng_for(s->seed, 0x5348554646ull /* "SHUFF" */, epoch);
    ch_permutation(s->perm, s->n, &r);
}
