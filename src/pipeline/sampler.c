/*
 * sampler.c — per-epoch order and rank split, global or by shards (see
 * sampler.h).
 */
#include "sampler.h"

#include <string.h>

int ch_sampler_init(ch_sampler *s, uint64_t n, uint64_t seed, int shuffle, uint32_t rank,
                    uint32_t world, int drop)
{
    memset(s, 0, sizeof *s);
    if (n == 0 || world == 0 || rank >= world)
        return CHUTE_EINVAL;
    s->n = s->base = n;
    s->reps = 1;
    s->seed = seed;
    s->shuffle = shuffle;
    s->rank = rank;
    s->world = world;
    s->drop = drop;
    s->per_rank = drop ? n / world : (n + world - 1) / world;
    s->per_epoch = s->per_rank;
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
    free(s->unit_first);
    free(s->unit_perm);
    free(s->order);
    s->unit_first = s->unit_perm = s->order = NULL;
    s->nunits = 0;
    ch_shufbuf_free(&s->buf);
}

/* Shards mode's epoch (sampler.h): units permuted and concatenated into
 * perm (the stream S), this rank's share of S through the shuffle buffer
 * into order. */
static void shards_epoch(ch_sampler *s, uint64_t epoch)
{
    ch_rng r = ch_rng_for(s->seed, 0x554e495453ull /* "UNITS" */, epoch);
    ch_permutation(s->unit_perm, s->nunits, &r);
    uint64_t j = 0;
    for (uint64_t u = 0; u < s->nunits; u++) {
        uint64_t a = s->unit_first[s->unit_perm[u]], b = s->unit_first[s->unit_perm[u] + 1];
        for (uint64_t i = a; i < b; i++)
            s->perm[j++] = i;
    }
    ch_shufbuf_reset(&s->buf, ch_rng_for(s->seed ^ 0x5348554642554646ull /* "SHUFBUFF" */,
                                         epoch, s->rank));
    const uint64_t per = s->per_rank;
    uint64_t out = 0, x;
    for (uint64_t k = 0; k < per; k++) {
        uint64_t g = s->nunits >= s->world ? s->rank * per + k : s->rank + k * s->world;
        if (ch_shufbuf_push(&s->buf, s->perm[g % s->n], &x))
            s->order[out++] = x;
    }
    while (ch_shufbuf_drain(&s->buf, &x))
        s->order[out++] = x;
}

int ch_sampler_use_units(ch_sampler *s, uint64_t *unit_first, uint64_t nunits, uint64_t buffer)
{
    s->unit_first = unit_first;
    s->nunits = nunits;
    if (!s->perm || !s->shuffle || nunits == 0 || buffer == 0 || !unit_first ||
        unit_first[0] != 0 || unit_first[nunits] != s->n)
        return CHUTE_EINVAL;
    for (uint64_t u = 0; u < nunits; u++)
        if (unit_first[u] >= unit_first[u + 1])
            return CHUTE_EINVAL;
    if (nunits > SIZE_MAX / sizeof(uint64_t) || s->per_rank > SIZE_MAX / sizeof(uint64_t))
        return CHUTE_ENOMEM;
    s->unit_perm = malloc(nunits * sizeof *s->unit_perm);
    s->order = malloc((s->per_rank ? s->per_rank : 1) * sizeof *s->order);
    if (!s->unit_perm || !s->order)
        return CHUTE_ENOMEM;
    uint64_t cap = buffer < s->per_rank ? buffer : s->per_rank;
    int rc = ch_shufbuf_init(&s->buf, cap ? cap : 1);
    if (rc)
        return rc;
    shards_epoch(s, s->epoch);
    return CHUTE_OK;
}

void ch_sampler_set_epoch(ch_sampler *s, uint64_t epoch)
{
    if (s->epoch == epoch)
        return;
    s->epoch = epoch;
    if (s->order) {
        shards_epoch(s, epoch);
        return;
    }
    if (!s->shuffle) {
        for (uint64_t i = 0; i < s->base; i++)
            s->perm[i] = i;
        return;
    }
    /* Same (seed, epoch) gives the same order on every rank: that is what
     * lets ranks split the epoch without talking to each other. */
    ch_rng r = ch_rng_for(s->seed, 0x5348554646ull /* "SHUFF" */, epoch);
    ch_permutation(s->perm, s->base, &r);
}

int ch_sampler_set_repeats(ch_sampler *s, uint32_t reps)
{
    if (reps == 0 || (s->order && reps != 1))
        return CHUTE_EINVAL;
    uint64_t n;
    if (__builtin_mul_overflow(s->base, (uint64_t)reps, &n))
        return CHUTE_ELIMIT;
    s->reps = reps;
    s->n = n;
    s->per_rank = s->drop ? n / s->world : (n + s->world - 1) / s->world;
    s->per_epoch = s->per_rank;
    s->start = 0;
    return CHUTE_OK;
}

int ch_sampler_set_run(ch_sampler *s, uint64_t epoch, uint64_t start)
{
    ch_sampler_set_epoch(s, epoch);
    s->start = 0;
    s->per_rank = s->per_epoch;
    if (start == 0)
        return CHUTE_OK;
    if (start > s->n || s->order)
        return CHUTE_EINVAL;
    uint64_t left = s->n - start;
    s->start = start;
    s->per_rank = s->drop ? left / s->world : left / s->world + (left % s->world != 0);
    return CHUTE_OK;
}
