/*
 * shufbuf.c — the seeded shuffle buffer (see shufbuf.h for why and the
 * exact semantics).  Deliberately tiny: push and drain are O(1), the
 * only state is the slot array, its fill and the RNG.
 */
#include "shufbuf.h"

#include <stdlib.h>
#include <string.h>

int ch_shufbuf_init(ch_shufbuf *b, size_t cap)
{
    memset(b, 0, sizeof *b);
    if (cap == 0)
        return CHUTE_EINVAL;
    if (cap > SIZE_MAX / sizeof *b->slot)
        return CHUTE_ENOMEM;
    b->slot = malloc(cap * sizeof *b->slot);
    if (!b->slot)
        return CHUTE_ENOMEM;
    b->cap = cap;
    return CHUTE_OK;
}

void ch_shufbuf_free(ch_shufbuf *b)
{
    free(b->slot);
    b->slot = NULL;
    b->cap = b->fill = 0;
}

void ch_shufbuf_reset(ch_shufbuf *b, ch_rng rng)
{
    b->fill = 0;
    b->rng = rng;
}

int ch_shufbuf_push(ch_shufbuf *b, uint64_t x, uint64_t *out)
{
    if (b->fill < b->cap) {
        b->slot[b->fill++] = x;
        return 0;
    }
    uint64_t j = b->cap == 1 ? 0 : ch_rng_below(&b->rng, b->cap);
    *out = b->slot[j];
    b->slot[j] = x;
    return 1;
}

int ch_shufbuf_drain(ch_shufbuf *b, uint64_t *out)
{
    if (b->fill == 0)
        return 0;
    uint64_t j = b->fill == 1 ? 0 : ch_rng_below(&b->rng, b->fill);
    *out = b->slot[j];
    b->slot[j] = b->slot[--b->fill];
    return 1;
}
