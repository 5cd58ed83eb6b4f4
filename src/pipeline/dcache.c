/*
 * dcache.c — the decoded-sample cache's memory: one budgeted arena and a
 * per-sample index, filled lock-free by the workers during the first
 * epoch and read by them in every epoch after.
 *
 * Why this shape.  A training run reads every sample of its rank once per
 * epoch in a fresh random order, so the "working set" is the whole
 * dataset and every sample's next use is one epoch away.  For such a
 * cyclic full scan an LRU (or any recency policy) is the worst choice: a
 * cache smaller than the dataset evicts each sample just before it is
 * needed again and hits almost never, while spending a lock or a list
 * update per sample to do it.  Keeping whatever came first until the
 * budget is full gives a hit rate of budget / dataset size in every later
 * epoch (the best any policy can do under a random order) with no
 * eviction at all, so entries are immutable once published and readers
 * need no lock, no reference count and no epoch-based reclamation.
 *
 * Memory.  The arena is one anonymous mapping of the budget (minus the
 * index), reserved at create with MAP_NORESERVE and never touched ahead:
 * its resident size grows with the entries actually stored and can never
 * pass the budget.  An entry's space is taken with a compare-and-swap on
 * the arena's fill mark (no allocation per sample, no lock); its index
 * slot goes 0 (empty) -> CLAIMED (one worker fills it) -> offset
 * (published with a release store; readers load with acquire, so they see
 * the bytes written before it).  A sample whose bytes do not fit, or
 * whose whole-image decode failed, is marked NOFIT so later epochs do not
 * try again; space claimed by a sample that then failed to decode stays
 * spent (once per such sample).  The index is 8 bytes per sample of
 * the dataset (an ImageNet-1k rank: 10 MiB), also a lazily touched
 * mapping, and counted in the budget.
 *
 * fork(): the mappings are copied on write like the rest of the loader;
 * the child only ever frees them (destroy).  No global state.
 */
#define _GNU_SOURCE
#include "dcache.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

enum { SLOT_EMPTY = 0, SLOT_CLAIMED = 1, SLOT_NOFIT = 2, SLOT_BASE = 64 };
#define ENTRY_HDR 64u

struct ch_dcache {
    _Atomic uint64_t *slots;  /* n values: SLOT_* or SLOT_BASE + arena offset */
    size_t slots_len;         /* bytes mapped for the index */
    uint64_t n;
    uint8_t *arena;
    uint64_t arena_len;
    char pad0[CH_CACHELINE];
    _Atomic uint64_t used;    /* arena bytes claimed (only grows) */
    char pad1[CH_CACHELINE];
    _Atomic uint64_t entries; /* entries published */
};

int ch_dcache_create(ch_dcache **out, uint64_t budget, uint64_t n, chute_error *err)
{
    *out = NULL;
    ch_dcache *c = ch_aligned_alloc(CH_CACHELINE, sizeof *c);
    if (!c)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for the decoded cache");
    memset(c, 0, sizeof *c);
    c->n = n;
    const uint64_t page = 4096;
    uint64_t idx_bytes = 0;
    if (__builtin_mul_overflow(n ? n : 1, (uint64_t)sizeof(uint64_t), &idx_bytes) ||
        idx_bytes > UINT64_MAX - page || (idx_bytes = (idx_bytes + page - 1) & ~(page - 1)) > SIZE_MAX) {
        free(c);
        return ch_err(err, CHUTE_ENOMEM, "a decoded-cache index for %llu samples is too large",
                      (unsigned long long)n);
    }
    void *s = mmap(NULL, (size_t)idx_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) {
        free(c);
        return ch_err(err, CHUTE_ENOMEM, "cannot map a decoded-cache index of %llu MiB",
                      (unsigned long long)(idx_bytes >> 20));
    }
    c->slots = s;
    c->slots_len = (size_t)idx_bytes;
    /* What is left of the budget, in whole pages, is the arena. */
    uint64_t arena = budget > idx_bytes ? (budget - idx_bytes) & ~(page - 1) : 0;
    if (arena > SIZE_MAX)
        arena = (uint64_t)SIZE_MAX & ~(page - 1);
    if (arena) {
        void *a = mmap(NULL, (size_t)arena, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (a == MAP_FAILED) {
            ch_dcache_destroy(c);
            return ch_err(err, CHUTE_ENOMEM,
                          "cannot reserve %llu MiB of address space for decoded_cache_bytes",
                          (unsigned long long)(arena >> 20));
        }
#ifdef MADV_HUGEPAGE
        madvise(a, (size_t)arena, MADV_HUGEPAGE); /* fewer first-touch faults; optional */
#endif
        c->arena = a;
        c->arena_len = arena;
    }
    atomic_init(&c->used, 0);
    atomic_init(&c->entries, 0);
    *out = c;
    return CHUTE_OK;
}

void ch_dcache_destroy(ch_dcache *c)
{
    if (!c)
        return;
    if (c->arena)
        munmap(c->arena, (size_t)c->arena_len);
    if (c->slots)
        munmap((void *)c->slots, c->slots_len);
    free(c);
}

const ch_dcache_entry *ch_dcache_get(const ch_dcache *c, uint64_t idx)
{
    if (idx >= c->n)
        return NULL;
    uint64_t v = atomic_load_explicit(&c->slots[idx], memory_order_acquire);
    if (v < SLOT_BASE)
        return NULL;
    return (const ch_dcache_entry *)(const void *)(c->arena + (v - SLOT_BASE));
}

ch_dcache_entry *ch_dcache_claim(ch_dcache *c, uint64_t idx, uint64_t bytes)
{
    if (idx >= c->n || !c->arena)
        return NULL;
    uint64_t v = atomic_load_explicit(&c->slots[idx], memory_order_relaxed);
    if (v != SLOT_EMPTY ||
        !atomic_compare_exchange_strong_explicit(&c->slots[idx], &v, SLOT_CLAIMED,
                                                 memory_order_relaxed, memory_order_relaxed))
        return NULL;
    uint64_t need = bytes;
    if (need > UINT64_MAX - 2 * ENTRY_HDR) {
        atomic_store_explicit(&c->slots[idx], SLOT_NOFIT, memory_order_relaxed);
        return NULL;
    }
    need = ENTRY_HDR + ((need + ENTRY_HDR - 1) & ~(uint64_t)(ENTRY_HDR - 1));
    uint64_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
    do {
        if (need > c->arena_len - used) {
            atomic_store_explicit(&c->slots[idx], SLOT_NOFIT, memory_order_relaxed);
            return NULL;
        }
    } while (!atomic_compare_exchange_weak_explicit(&c->used, &used, used + need,
                                                    memory_order_relaxed, memory_order_relaxed));
    ch_dcache_entry *e = (ch_dcache_entry *)(void *)(c->arena + used);
    memset(e, 0, sizeof *e);
    e->bytes = bytes;
    return e;
}

void ch_dcache_publish(ch_dcache *c, uint64_t idx, ch_dcache_entry *e)
{
    uint64_t off = (uint64_t)((uint8_t *)e - c->arena);
    atomic_store_explicit(&c->slots[idx], SLOT_BASE + off, memory_order_release);
    atomic_fetch_add_explicit(&c->entries, 1, memory_order_relaxed);
}

void ch_dcache_abandon(ch_dcache *c, uint64_t idx)
{
    atomic_store_explicit(&c->slots[idx], SLOT_NOFIT, memory_order_relaxed);
}

uint64_t ch_dcache_bytes(const ch_dcache *c)
{
    return c ? c->slots_len + atomic_load_explicit(&c->used, memory_order_relaxed) : 0;
}

uint64_t ch_dcache_entries(const ch_dcache *c)
{
    return c ? atomic_load_explicit(&c->entries, memory_order_relaxed) : 0;
}
