/*
 * fcache.c — the bounded cache of open data files (fcache.h says why and
 * how it locks).  Moved here from shard.c so that the shard, TFRecord and
 * WebDataset formats share one copy.
 */
#define _GNU_SOURCE
#include "fcache.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define SLOT_FREE 0u
#define SLOT_BUSY UINT32_MAX /* reserved by a miss that is opening its file */

static const ch_source_ops *src_of(const ch_fcache *c, const ch_fcache_file *f)
{
    return f->src ? f->src : c->src;
}

static const char *open_path_of(const ch_fcache_file *f)
{
    return f->open_path ? f->open_path : f->path;
}

/* Half the soft descriptor limit: the other half is the program's. */
static uint32_t cache_capacity(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 256;
    uint64_t soft = rl.rlim_cur == RLIM_INFINITY ? (1ull << 20) : (uint64_t)rl.rlim_cur;
    uint64_t c = soft / 2;
    return (uint32_t)(c < 16 ? 16 : c > 65536 ? 65536 : c);
}

int ch_fcache_init(ch_fcache *c, const ch_source_ops *src, uint32_t nfiles, chute_error *err)
{
    memset(c, 0, sizeof *c);
    c->src = src;
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        return ch_err(err, CHUTE_ENOMEM, "cannot create a mutex");
    c->mu_ready = 1;
    c->cap = cache_capacity();
    c->files = calloc(nfiles ? nfiles : 1, sizeof *c->files);
    c->slots = calloc(c->cap, sizeof *c->slots);
    if (!c->files || !c->slots)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %u open files", nfiles);
    c->nfiles = nfiles;
    return CHUTE_OK;
}

int ch_fcache_open_scan(ch_fcache *c, uint32_t k, void **out_h, uint64_t *out_size,
                        chute_error *err)
{
    ch_fcache_file *f = &c->files[k];
    const char *path = open_path_of(f);
    int rc = ch_src_open(src_of(c, f), path, out_h, out_size, err);
    if (rc == CHUTE_EIO && c->nopen > 0) {
        uint32_t drop = (c->nopen + 1) / 2;
        for (uint32_t i = c->nopen - drop; i < c->nopen; i++) {
            ch_fcache_file *v = &c->files[c->slots[i] - 1];
            src_of(c, v)->close(atomic_exchange(&v->h, NULL));
            c->slots[i] = SLOT_FREE;
        }
        c->nopen -= drop;
        c->cap = c->nopen ? c->nopen : 1;
        rc = ch_src_open(src_of(c, f), path, out_h, out_size, err);
    }
    if (rc == CHUTE_OK)
        atomic_fetch_add_explicit(&c->opens, 1, memory_order_relaxed);
    return rc;
}

void ch_fcache_keep(ch_fcache *c, uint32_t k, void *h, uint64_t size)
{
    c->files[k].size = size;
    if (c->nopen < c->cap) {
        atomic_store(&c->files[k].h, h);
        c->slots[c->nopen++] = k + 1;
    } else {
        src_of(c, &c->files[k])->close(h);
    }
}

void ch_fcache_ready(ch_fcache *c) { c->evicting = c->nfiles > c->nopen; }

/* Under mu: a slot for a file, closing a victim if the cache is full
 * (*victim gets its handle, to close outside the lock).  Returns the slot,
 * now SLOT_BUSY, or UINT32_MAX when every open file is being read. */
static uint32_t take_slot(ch_fcache *c, void **victim, const ch_source_ops **victim_src)
{
    *victim = NULL;
    if (c->nopen < c->cap) {
        for (uint32_t i = 0; i < c->cap; i++)
            if (c->slots[i] == SLOT_FREE) {
                c->slots[i] = SLOT_BUSY;
                c->nopen++;
                return i;
            }
    }
    for (uint64_t step = 0; step < 2ull * c->cap + 1; step++) {
        uint32_t i = c->hand;
        c->hand = c->hand + 1 == c->cap ? 0 : c->hand + 1;
        if (c->slots[i] == SLOT_FREE || c->slots[i] == SLOT_BUSY)
            continue;
        ch_fcache_file *v = &c->files[c->slots[i] - 1];
        if (atomic_exchange_explicit(&v->ref, 0, memory_order_relaxed))
            continue; /* used since the hand last passed: second chance */
        void *h = atomic_exchange(&v->h, NULL);
        if (atomic_load(&v->pins) != 0) {
            atomic_store(&v->h, h); /* a read is in: leave it */
            continue;
        }
        *victim = h;
        *victim_src = src_of(c, v);
        c->slots[i] = SLOT_BUSY;
        return i;
    }
    return UINT32_MAX;
}

/* Open file k again (it was open when the dataset was). */
static int reopen(ch_fcache *c, ch_fcache_file *f, void **out, chute_error *err)
{
    uint64_t size = 0;
    int rc = ch_src_open(src_of(c, f), open_path_of(f), out, &size, err);
    if (rc)
        return rc;
    atomic_fetch_add_explicit(&c->opens, 1, memory_order_relaxed);
    if (size != f->size) {
        src_of(c, f)->close(*out);
        *out = NULL;
        return ch_err(err, CHUTE_EIO,
                      "%s: size %llu, was %llu when the dataset was opened (replaced or "
                      "truncated while in use)",
                      f->path, (unsigned long long)size, (unsigned long long)f->size);
    }
    return CHUTE_OK;
}

static int acquire_slow(ch_fcache *c, uint32_t k, void **out_h, int *out_transient,
                        chute_error *err)
{
    ch_fcache_file *f = &c->files[k];
    atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
    pthread_mutex_lock(&c->mu);
    void *h = atomic_load(&f->h);
    if (h) { /* opened by another reader meanwhile; evictors hold mu */
        atomic_fetch_add(&f->pins, 1);
        pthread_mutex_unlock(&c->mu);
        *out_h = h;
        return CHUTE_OK;
    }
    void *victim = NULL;
    const ch_source_ops *victim_src = NULL;
    uint32_t slot = take_slot(c, &victim, &victim_src);
    pthread_mutex_unlock(&c->mu);
    if (victim) {
        victim_src->close(victim);
        atomic_fetch_add_explicit(&c->evictions, 1, memory_order_relaxed);
    }
    void *nh = NULL;
    int rc = reopen(c, f, &nh, err);
    if (slot == UINT32_MAX) { /* every cached file is being read: use this once */
        if (rc == CHUTE_OK) {
            atomic_fetch_add_explicit(&c->transient, 1, memory_order_relaxed);
            *out_h = nh;
            *out_transient = 1;
        }
        return rc;
    }
    void *extra = NULL;
    pthread_mutex_lock(&c->mu);
    if (rc != CHUTE_OK) {
        c->slots[slot] = SLOT_FREE;
        c->nopen--;
    } else if ((h = atomic_load(&f->h)) != NULL) { /* lost a race to another miss */
        c->slots[slot] = SLOT_FREE;
        c->nopen--;
        extra = nh;
        atomic_fetch_add(&f->pins, 1);
        *out_h = h;
    } else {
        c->slots[slot] = k + 1;
        atomic_store_explicit(&f->ref, 1, memory_order_relaxed);
        atomic_fetch_add(&f->pins, 1);
        atomic_store(&f->h, nh);
        *out_h = nh;
    }
    pthread_mutex_unlock(&c->mu);
    if (extra)
        src_of(c, f)->close(extra);
    return rc;
}

int ch_fcache_acquire(ch_fcache *c, uint32_t k, void **out_h, int *out_transient,
                      chute_error *err)
{
    ch_fcache_file *f = &c->files[k];
    *out_transient = 0;
    if (!c->evicting) {
        /* Set before the dataset was handed out, never changed until close. */
        *out_h = atomic_load_explicit(&f->h, memory_order_relaxed);
        return CHUTE_OK;
    }
    atomic_fetch_add(&f->pins, 1);
    void *h = atomic_load(&f->h);
    if (h) {
        if (!atomic_load_explicit(&f->ref, memory_order_relaxed))
            atomic_store_explicit(&f->ref, 1, memory_order_relaxed);
        *out_h = h;
        return CHUTE_OK;
    }
    atomic_fetch_sub(&f->pins, 1);
    return acquire_slow(c, k, out_h, out_transient, err);
}

void ch_fcache_release(ch_fcache *c, uint32_t k, void *h, int transient)
{
    if (transient)
        src_of(c, &c->files[k])->close(h);
    else if (c->evicting)
        atomic_fetch_sub_explicit(&c->files[k].pins, 1, memory_order_release);
}

void ch_fcache_stats(ch_fcache *c, ch_shard_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    out->capacity = c->cap;
    out->open_now = c->nopen;
    out->evicting = c->evicting;
    pthread_mutex_unlock(&c->mu);
    out->misses = atomic_load(&c->misses);
    out->opens = atomic_load(&c->opens);
    out->evictions = atomic_load(&c->evictions);
    out->transient = atomic_load(&c->transient);
}

void ch_fcache_free(ch_fcache *c)
{
    if (!c)
        return;
    for (uint32_t k = 0; c->files && k < c->nfiles; k++) {
        void *h = atomic_load(&c->files[k].h);
        if (h)
            src_of(c, &c->files[k])->close(h);
    }
    if (c->mu_ready)
        pthread_mutex_destroy(&c->mu);
    free(c->files);
    free(c->slots);
    memset(c, 0, sizeof *c);
}
