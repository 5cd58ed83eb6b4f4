/*
 * dcache.h — the decoded-sample cache: a RAM budget of decoded images
 * (train) or finished samples (eval, none) kept from the first epoch so
 * later epochs skip reading and decoding.  See dcache.c for why it is
 * shaped this way and loader.c (fill_sample) for what is cached and why
 * the output never changes.
 *
 * Thread-safety: get, claim, publish and abandon may be called by any
 * number of workers at once (lock-free); create and destroy by one thread
 * while no worker runs.  An entry, once published, is immutable and lives
 * until destroy.
 */
#ifndef CHUTE_DCACHE_H
#define CHUTE_DCACHE_H

#include "../common/common.h"

/* What an entry holds; followed (64-byte aligned) by its bytes. */
typedef struct ch_dcache_entry {
    uint32_t width, height;   /* the image's size in the file */
    uint32_t sw, sh;          /* the cached frame's size (decoded at 1/denom) */
    uint32_t denom;           /* DCT scale denominator of the frame (1, 2, 4, 8) */
    uint32_t kind;            /* CH_DCACHE_FRAME or CH_DCACHE_SAMPLE */
    uint32_t caps;            /* CH_DEC_* of the image's decoder */
    uint64_t bytes;           /* bytes after the header */
} ch_dcache_entry;

enum { CH_DCACHE_FRAME = 1, CH_DCACHE_SAMPLE = 2 };

typedef struct ch_dcache ch_dcache;

/* A cache of at most `budget` bytes (index included) for sample ids
 * below n.  CHUTE_ENOMEM when the address space cannot be reserved. */
int ch_dcache_create(ch_dcache **out, uint64_t budget, uint64_t n, chute_error *err);
void ch_dcache_destroy(ch_dcache *c);

/* The published entry of sample idx, or NULL. */
const ch_dcache_entry *ch_dcache_get(const ch_dcache *c, uint64_t idx);
static inline const uint8_t *ch_dcache_data(const ch_dcache_entry *e)
{
    return (const uint8_t *)e + 64;
}

/* Claim sample idx's slot and `bytes` of the budget for it.  NULL when the
 * sample is cached or being cached already, or the bytes do not fit (then
 * never again: the budget only fills).  The caller fills the entry and
 * calls publish, or abandon if it could not. */
ch_dcache_entry *ch_dcache_claim(ch_dcache *c, uint64_t idx, uint64_t bytes);
void ch_dcache_publish(ch_dcache *c, uint64_t idx, ch_dcache_entry *e);
/* Never cache sample idx (its decode failed; its bytes stay spent: the
 * arena never frees). */
void ch_dcache_abandon(ch_dcache *c, uint64_t idx);

/* Bytes of the budget in use (index plus claimed entries) and entries
 * published. */
uint64_t ch_dcache_bytes(const ch_dcache *c);
uint64_t ch_dcache_entries(const ch_dcache *c);

#endif
