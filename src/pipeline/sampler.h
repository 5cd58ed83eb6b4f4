/*
 * sampler.h — which sample goes where, per epoch.
 *
 * Knows only sample ids.  Epoch e's order is a Fisher-Yates permutation
 * drawn from (seed, e); rank r of w takes positions r, r+w, r+2w, ... of
 * it (torch's DistributedSampler convention), after the permutation is
 * padded by repeating its head (PAD) or cut (DROP) to a multiple of w.
 * Every sample is delivered exactly once per epoch across ranks, except
 * the <= w-1 repeats PAD adds.  (epoch, position) is the whole state.
 *
 * Elastic resume (global mode only; ch_sampler_set_run).  Ranks step in
 * lockstep, so when every rank has consumed its first k positions the
 * consumed set is exactly the global positions [0, k*w) of the padded
 * permutation, and none of them is a PAD repeat unless the epoch is over
 * (k*w > n only when k = per_rank).  That prefix length P (< n mid-epoch)
 * is the whole state, whatever w was.  A run resumed at P on w' ranks
 * takes the positions left, P, P+1, ..., n-1, round-robin: rank r' gets
 * global positions P + r' + j*w', sample perm[(P + r' + j*w') mod n], for
 * j < per_rank = ceil((n-P)/w') (PAD: the tail wraps onto the epoch's
 * head, as without a resume) or floor((n-P)/w') (DROP: the last
 * (n-P) mod w' positions are cut).  With w' = w and P = k*w this is
 * exactly positions k, k+1, ... of the rank's uninterrupted order, so a
 * resumed run resumed again composes: P grows by j*w' per j positions.
 * Shards mode's rank orders are not a prefix of one sequence, so there
 * the only run is P = 0.
 *
 * Shards mode (ch_sampler_use_units; chute.h CHUTE_SHUFFLE_SHARDS), for
 * formats read front to back.  The dataset is cut into units: runs of
 * consecutive sample ids that live in one file (a shard, a TFRecord file, a
 * tar), given as unit_first[0..U] (unit u = [unit_first[u],
 * unit_first[u+1])).  Epoch e:
 *   1. the units are permuted from (seed, e) (Fisher-Yates), and their
 *      samples, each unit front to back, concatenated into a stream S of
 *      the n ids, the same on every rank;
 *   2. S is padded (PAD: S[j mod n] for j >= n, i.e. the epoch's head
 *      repeated, as in global mode) or cut (DROP) to T = w * per_rank;
 *   3. rank r's input is
 *        U >= w (by units):   S[r*per .. (r+1)*per), a contiguous run:
 *                             whole units read front to back, except that
 *                             a unit straddling a rank boundary is read in
 *                             part by each of the two ranks (at most w - 1
 *                             such units); every rank still gets exactly
 *                             per_rank samples, so DDP stays in step;
 *        U <  w (by samples): S[r], S[r+w], S[r+2w], ...: every rank walks
 *                             every unit front to back with stride w;
 *   4. the input passes through a shuffle buffer of `buffer` ids
 *      (shufbuf.h) seeded by (seed, e, r), and that output is the rank's
 *      epoch order.
 * The order is computed at set_epoch, so it is a pure function of (seed,
 * epoch, rank, world, units, buffer, remainder) — not of worker count or
 * timing — and position k of it is as addressable as in global mode.
 *
 * Repeated augmentation (ch_sampler_set_repeats; global mode only).  With
 * k repeats the epoch's sequence is the permutation of the `base` dataset
 * ids with every id written k times in a row, n = k * base positions:
 * position g holds perm[g / k], its copy g % k.  Everything above then
 * applies to those n positions unchanged (rank split, PAD/DROP, elastic
 * resume), so every (sample, copy) pair is delivered exactly once per
 * epoch across ranks, and a sample's k copies, being consecutive, go to k
 * different ranks when the world has k ranks or more: torchvision
 * references' RASampler split (without its cut of each rank's share back
 * to about base / world positions: an epoch here is k * base positions).
 * The loader keys a copy's draws by id + copy * base, so the copies get
 * different crops and augmentations and copy 0 is the sample as without
 * repeats.
 */
#ifndef CHUTE_SAMPLER_H
#define CHUTE_SAMPLER_H

#include "../common/common.h"
#include "shufbuf.h"

typedef struct ch_sampler {
    uint64_t n;               /* positions of an epoch: base * reps */
    uint64_t base;            /* dataset ids, the permutation's length */
    uint32_t reps;            /* copies of each id per epoch (1: none) */
    uint64_t seed;
    int shuffle;
    uint32_t rank, world;
    int drop;
    uint64_t per_rank;        /* positions of this rank in the current run */
    uint64_t per_epoch;       /* ... in a whole epoch (the run at P = 0) */
    uint64_t start;           /* P: global positions the current run skips */
    uint64_t epoch;
    uint64_t *perm;           /* n entries, rewritten by ch_sampler_set_epoch */
    /* Shards mode (NULL/0 in global mode); see above. */
    uint64_t *unit_first;     /* nunits + 1 entries, owned */
    uint64_t nunits;
    uint64_t *unit_perm;      /* nunits entries */
    uint64_t *order;          /* per_rank entries: this rank's epoch order */
    ch_shufbuf buf;           /* min(buffer, per_rank) slots */
} ch_sampler;

int ch_sampler_init(ch_sampler *s, uint64_t n, uint64_t seed, int shuffle, uint32_t rank,
                    uint32_t world, int drop);
void ch_sampler_free(ch_sampler *s);
/* Switch a shuffling sampler to shards mode: takes ownership of unit_first
 * (nunits + 1 ascending entries, unit_first[0] = 0, unit_first[nunits] =
 * n, every unit non-empty; freed by ch_sampler_free even on failure) and
 * recomputes the current epoch.  buffer >= 1.  CHUTE_EINVAL for bad units
 * or a sampler built without shuffle, CHUTE_ENOMEM. */
int ch_sampler_use_units(ch_sampler *s, uint64_t *unit_first, uint64_t nunits, uint64_t buffer);
void ch_sampler_set_epoch(ch_sampler *s, uint64_t epoch);
/* set_epoch, then make the run start at global position `start` (see
 * "Elastic resume" above): per_rank becomes the run's count.  start 0 is a
 * whole epoch.  CHUTE_EINVAL for start > n, or start > 0 in shards mode
 * (the sampler is then left at start 0). */
int ch_sampler_set_run(ch_sampler *s, uint64_t epoch, uint64_t start);
/* Repeat every id `reps` times per epoch (see above), and restart the
 * current epoch's run at position 0.  CHUTE_EINVAL for reps 0 or in shards
 * mode, CHUTE_ELIMIT when base * reps overflows. */
int ch_sampler_set_repeats(ch_sampler *s, uint32_t reps);
/* Dataset index of this rank's k-th sample (k < per_rank) in the epoch. */
static inline uint64_t ch_sampler_get(const ch_sampler *s, uint64_t k)
{
    if (s->order)
        return s->order[k];
    uint64_t g = s->start + s->rank + k * s->world;
    return s->perm[g % s->n / s->reps];
}
/* Which copy (0 .. reps - 1) of its id this rank's k-th sample is. */
static inline uint32_t ch_sampler_copy(const ch_sampler *s, uint64_t k)
{
    if (s->order || s->reps == 1)
        return 0;
    uint64_t g = s->start + s->rank + k * s->world;
    return (uint32_t)(g % s->n % s->reps);
}

#endif
