/*
 * fcache.h — a bounded cache of open data files, for formats made of
 * many files (chute shards, TFRecord files, WebDataset tars).
 *
 * Why: one descriptor per file fails past ~1,000 files under the usual
 * `ulimit -n 1024` (ImageNet-21k in 256 MiB shards is ~4,400 files;
 * imagenet_to_gcs.py writes 1,024 + 128 TFRecord files).  So at most
 * `cap` files stay open (half the soft RLIMIT_NOFILE when the dataset was
 * opened, 16..65536); the others are opened on demand and a CLOCK policy
 * picks which open one to close.  The cache evicts *before* it opens, so
 * it never holds more than `cap` descriptors.
 *
 * Locking: when every file fits (the common case) all handles are opened
 * at dataset open and held until close, `evicting` is 0, and a read is a
 * plain load of the handle: no lock, no atomic read-modify-write.  When
 * files come and go, a read pins its file (an atomic count) and loads
 * the handle; only a miss takes the mutex.  An evictor (under the mutex)
 * swaps the handle to NULL and then looks at the pin count: if a reader
 * is in, it puts the handle back and tries another; a reader that pins
 * after the swap sees NULL and goes to the slow path (sequentially
 * consistent atomics on both sides make this Dekker-style handshake
 * sound).  A handle is closed only after it is unpublished with no pin.
 *
 * Use: ch_fcache_init, then for each file k at dataset open
 * ch_fcache_open_scan (opens it, shrinking the cache if descriptors run
 * out), read what the format needs, ch_fcache_keep (holds it if there is
 * room, else closes it), then ch_fcache_ready.  Reads: ch_fcache_acquire
 * / ch_fcache_release around each read_at.  All files go through the
 * dataset's source.
 */
#ifndef CHUTE_FORMAT_FCACHE_H
#define CHUTE_FORMAT_FCACHE_H

#include "format.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct ch_fcache_file {
    const char *path;         /* borrowed from the format; set before open_scan */
    /* Optional, set before open_scan: the file is opened as open_path
     * through src instead (a local inflated copy of a compressed file,
     * still named `path` in messages).  NULL: path, the cache's source. */
    const char *open_path;
    const ch_source_ops *src;
    uint64_t size;            /* at dataset open: a reopen must find the same */
    _Atomic(void *) h;        /* open handle, or NULL (closed) */
    atomic_uint pins;         /* reads in flight on h (evicting caches only) */
    atomic_uchar ref;         /* CLOCK reference bit */
} ch_fcache_file;

typedef struct ch_fcache {
    const ch_source_ops *src;
    uint32_t nfiles;
    ch_fcache_file *files;
    pthread_mutex_t mu;       /* protects slots, hand, nopen and every h transition */
    int mu_ready;
    uint32_t cap;
    int evicting;             /* fixed at open: nfiles > cap */
    uint32_t *slots;          /* cap entries: file index + 1, free or busy */
    uint32_t hand;
    uint32_t nopen;           /* slots not free */
    atomic_ullong misses, opens, evictions, transient;
} ch_fcache;

/* nfiles entries, paths NULL (set files[k].path before opening k). */
int ch_fcache_init(ch_fcache *c, const ch_source_ops *src, uint32_t nfiles, chute_error *err);
/* Open file k for the dataset's open (*out_size: its size).  If
 * descriptors run out part way (other files of the program, other
 * datasets), the cache closes half of what it holds, shrinks, and tries
 * again: the dataset then works through fewer descriptors. */
int ch_fcache_open_scan(ch_fcache *c, uint32_t k, void **out_h, uint64_t *out_size,
                        chute_error *err);
/* After open_scan and the format's checks: hold h for file k (whose size
 * is `size`) if there is room, else close it. */
void ch_fcache_keep(ch_fcache *c, uint32_t k, void *h, uint64_t size);
/* Every file scanned: from here reads evict only if not all were kept. */
void ch_fcache_ready(ch_fcache *c);
/* A handle for reading file k; give it back with ch_fcache_release.
 * Reopening a file whose size changed since open is CHUTE_EIO. */
int ch_fcache_acquire(ch_fcache *c, uint32_t k, void **out_h, int *out_transient,
                      chute_error *err);
void ch_fcache_release(ch_fcache *c, uint32_t k, void *h, int transient);
void ch_fcache_stats(ch_fcache *c, ch_shard_cache_stats *out);
/* Close what is open and free the cache (a zeroed cache is fine). */
void ch_fcache_free(ch_fcache *c);

#endif
