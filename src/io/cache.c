/*
 * cache.c — the cache tier: a source that wraps another source and keeps
 * fixed-size blocks of its files in a node-local directory.
 *
 * Why blocks: a shard is gigabytes and a sample is a hundred kilobytes;
 * caching whole objects would make the first sample of a shard wait for
 * the whole shard, caching samples would make a million tiny files.  A
 * file is cut into blocks of block_bytes (8 MiB by default; a small file
 * is one block holding all of it), and each block is one cache file.
 *
 * What it must never do:
 *  - serve bytes it has not verified.  A cache file is a 64-byte header
 *    (magic, block, lengths, the origin's size and mtime, the chunk size
 *    and a CRC32C of the header and key), the key (source name + path),
 *    a table of one CRC32C per 4 KiB chunk of the data, then the data.
 *    Every read checks the header and the CRC of every chunk it touches,
 *    widened to whole chunks in one preadv (the widening lands in stack
 *    scratch, the rest straight in the caller's buffer): bytes damaged on
 *    disk after an earlier read are still caught, and a sample costs a
 *    CRC of its own bytes, not of its 8 MiB block.  (Until 2026-11 a
 *    handle verified a block's single CRC once, into an 8 MiB buffer, and
 *    trusted the inode after: every new process, so every epoch of
 *    `chute bench`, re-read each block whole, ~10% of a warm epoch's CPU,
 *    and damage after that first read went unseen.)  A damaged file is
 *    removed and the block refetched (counted as corrupt).  A changed
 *    origin (size or mtime differ) makes every old block stale, and so
 *    does a file of another format version (refilled in place).
 *  - let a key escape the directory.  File names are a 128-bit hash of
 *    (source, path, block, block size) in hex: nothing the user or a
 *    remote listing controls ("..", "/", spaces, unicode) reaches a
 *    path.  The key stored inside the file is compared on every open, so
 *    even a hash collision is a miss, never wrong bytes.
 *  - download a block twice on one node.  A miss takes one of 256 lock
 *    files (flock, by the block's hash: processes and threads alike, since
 *    each open gets its own lock), looks again, and only then fetches.
 *    Lock files are never deleted (deleting a lock file breaks flock).
 *  - tear a reader.  Files are written under a unique temporary name and
 *    renamed into place, never changed after; eviction is unlink, and a
 *    reader holding the file open keeps reading the old inode.
 *  - fail a read the origin can serve.  A full disk, a deleted directory,
 *    a read-only mount: the block is served from the inner source anyway,
 *    counted as a fallback, and the first reason is kept as the warning
 *    (ch_cache_warning) for a front end to show once.  Only the origin's
 *    own errors (and out of memory) reach the caller.  A directory deleted
 *    under a running loader is not recreated (someone meant it gone): that
 *    process reads the origin from then on; the next open recreates it.
 *
 * Budget: every process on the node shares one usage counter stored in
 * locks/evict.lock, updated under its flock at each rename.  When a fill
 * would pass the budget the directory is scanned (its true size) and
 * block files are removed oldest-mtime first.  A handle sets a file's
 * mtime to now the first time it reads it (a memo of (block, inode)
 * fingerprints per handle), and a fill creates it, so
 * mtime is a cheap access time (atime is unreliable: noatime/relatime).
 * The counter only ever over-estimates (a file removed by hand), which
 * triggers a scan that corrects it.  Temporary files older than ten
 * minutes (a killed filler) are removed by scans.  Files still open by a
 * reader after eviction take disk space until closed.
 *
 * No global state: the cache is an object and its ops table lives in it
 * (ch_source_ops version 3: `self` and the *_s entries).  Steady state (a
 * warm cache) is open + fstat + pread (header) + pread (chunk CRCs) +
 * preadv + close per read, with no lock and no allocation; misses
 * allocate one block buffer and its CRC table.
 *
 * The RAM tier (cache_ram_bytes) sits in front of the disk tier, or
 * alone when there is no cache_dir: whole blocks kept in memory, least
 * recently used evicted past the budget, looked up before the disk.  It
 * is per process (a cache object), so ranks on one node each hold their
 * own; the disk tier is the node-wide one.  One mutex guards its table
 * and LRU list and is held only for lookups and list moves, never across
 * I/O or a copy: a hit takes a reference on the entry, copies outside the
 * lock and drops the reference; an entry evicted while a reader copies
 * from it is freed by the last reference, so the budget may be passed by
 * at most one block per concurrent reader, briefly.  A miss reads the
 * whole block (from the disk tier or the origin) and inserts it.  A hit
 * allocates nothing.  Entries carry the origin's size and mtime (a
 * changed file is a miss) and their full key (a hash collision is a miss).
 *
 * stat and list are passed through uncached (every open stats the origin
 * to detect a changed file, in both tiers).
 */
#define _GNU_SOURCE
#include "io.h"
#include "../common/checksum.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR 64
#define CHUNK 4096u       /* data bytes per CRC in a cache file */
#define SEG_CHUNKS 256u   /* chunks checked per preadv (1 MiB) */
#define KEY_MAX 4000
#define MEMO 1024
#define STRIPES 256
#define STALE_TMP_S 600

struct ch_cache {
    ch_source_ops ops; /* ops.self == this */
    const ch_source_ops *inner;
    char *dir;
    uint64_t budget, block;
    _Atomic uint64_t seq;
    _Atomic uint64_t n_hits, n_misses, n_fetches, n_bytes, n_fills, n_evict, n_corrupt,
        n_fallback, n_waits;
    _Atomic int warned; /* 0 none, 1 being written, 2 written */
    char warning[512];
    struct ram *ram;    /* the RAM tier, or NULL */
    int disk;           /* a cache_dir is set (else RAM only) */
};

typedef struct cache_file {
    ch_cache *c;
    char *path;
    uint64_t size;
    int64_t mtime;
    char key[KEY_MAX + 1]; /* source name, NUL, path */
    size_t keylen;
    int cacheable;
    pthread_mutex_t mu;        /* guards the lazy open of inner_h */
    void *_Atomic inner_h;
    /* Fingerprints of (block, inode) whose mtime this handle has set
     * (the LRU), MEMO slots; NULL (read_file) sets it on every read. */
    _Atomic uint64_t *memo;
} cache_file;

static void warn_once(ch_cache *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn_once(ch_cache *c, const char *fmt, ...)
{
    int z = 0;
    if (!atomic_compare_exchange_strong(&c->warned, &z, 1))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->warning, sizeof c->warning, fmt, ap);
    va_end(ap);
    atomic_store_explicit(&c->warned, 2, memory_order_release);
}

static void fallback(ch_cache *c, const char *what, const char *p, int e)
{
    atomic_fetch_add(&c->n_fallback, 1);
    warn_once(c, "cache %s: %s %s: %s; reading from the origin instead", c->dir, what, p,
              strerror(e));
}

/* ---- names ---------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void block_name(const cache_file *f, uint64_t k, uint64_t h[2])
{
    uint64_t tail[2] = {k, f->c->block};
    h[0] = fnv(fnv(0xcbf29ce484222325ull, f->key, f->keylen), tail, sizeof tail);
    h[1] = fnv(fnv(0x84222325cbf29ce4ull ^ 0x5bd1e995ull, tail, sizeof tail), f->key,
               f->keylen);
}

static void block_path(const cache_file *f, const uint64_t h[2], char *out, size_t n)
{
    snprintf(out, n, "%s/%016llx%016llx.blk", f->c->dir, (unsigned long long)h[0],
             (unsigned long long)h[1]);
}

/* ---- header --------------------------------------------------------- */

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static const char k_magic[8] = {'C', 'H', 'C', 'B', 'L', 'K', '2', 0};

/* Layout: magic[8] keylen u32 pad u32 block u64 block_bytes u64 len u64
 * origin_size u64 origin_mtime u64 chunk_bytes u32 hdr_crc u32 (= 64),
 * then the key, then one CRC32C (u32) per chunk of the data, then the
 * data.  hdr_crc covers the 60 bytes before it and the key. */
static uint64_t n_chunks(uint64_t len) { return (len + CHUNK - 1) / CHUNK; }

static void hdr_build(const cache_file *f, uint64_t k, uint64_t len, uint8_t *h)
{
    memset(h, 0, HDR);
    memcpy(h, k_magic, 8);
    put32(h + 8, (uint32_t)f->keylen);
    put64(h + 16, k);
    put64(h + 24, f->c->block);
    put64(h + 32, len);
    put64(h + 40, f->size);
    put64(h + 48, (uint64_t)f->mtime);
    put32(h + 56, CHUNK);
    uint32_t hc = ch_crc32c(ch_crc32c(0, h, 60), f->key, f->keylen);
    put32(h + 60, hc);
}

static uint64_t block_len(const cache_file *f, uint64_t k)
{
    uint64_t start = k * f->c->block;
    return CH_MIN(f->c->block, f->size - start);
}

/* ---- hits ----------------------------------------------------------- */

static uint64_t memo_fp(uint64_t k, uint64_t ino)
{
    uint64_t v[2] = {k, ino};
    return fnv(0xcbf29ce484222325ull, v, sizeof v) | 1;
}

/* Remove a damaged cache file, unless another filler has already
 * replaced it with a new one. */
static void drop_corrupt(cache_file *f, const char *p, const struct stat *st)
{
    struct stat now;
    if (stat(p, &now) == 0 && now.st_ino == st->st_ino && now.st_dev == st->st_dev)
        unlink(p);
    atomic_fetch_add(&f->c->n_corrupt, 1);
}

/* A read of [boff, boff+len) of a block widened to whole chunks lands in
 * up to three pieces: the head of its first chunk (scratch), the caller's
 * bytes, the tail of its last chunk (scratch).  The CRC of the block's
 * bytes [from, to), which lie in those pieces. */
typedef struct piece {
    uint64_t at, n; /* block offsets [at, at+n) */
    const uint8_t *p;
} piece;

static uint32_t pieces_crc(const piece *pc, int np, uint64_t from, uint64_t to)
{
    uint32_t crc = 0;
    for (int i = 0; i < np && from < to; i++) {
        uint64_t e = pc[i].at + pc[i].n;
        if (from >= e || pc[i].n == 0)
            continue;
        uint64_t x = CH_MIN(to, e);
        crc = ch_crc32c(crc, pc[i].p + (from - pc[i].at), (size_t)(x - from));
        from = x;
    }
    return crc;
}

/* Read [boff, boff+len) of the block whose data starts at file offset
 * doff into dst, verifying every chunk it touches against the table at
 * file offset toff.  0 when every chunk matched. */
static int read_verified(int fd, uint64_t toff, uint64_t doff, uint64_t bl, uint64_t boff,
                         uint8_t *dst, size_t len)
{
    uint8_t head[CHUNK], tail[CHUNK], tab[4 * SEG_CHUNKS];
    uint64_t end = boff + len;
    uint64_t c = boff / CHUNK, cend = n_chunks(end);
    while (c < cend) {
        uint64_t cn = CH_MIN(cend - c, (uint64_t)SEG_CHUNKS);
        uint64_t s0 = c * CHUNK, s1 = CH_MIN((c + cn) * CHUNK, bl);
        if (pread(fd, tab, (size_t)(4 * cn), (off_t)(toff + 4 * c)) != (ssize_t)(4 * cn))
            return -1;
        piece pc[3];
        struct iovec iov[3];
        int np = 0;
        uint64_t a = CH_MAX(s0, boff), b = CH_MIN(s1, end);
        if (s0 < a) /* only in the first segment: a == boff, a - s0 < CHUNK */
            pc[np++] = (piece){s0, a - s0, head};
        pc[np++] = (piece){a, b - a, dst + (a - boff)};
        if (b < s1) /* only in the last segment: s1 - b < CHUNK */
            pc[np++] = (piece){b, s1 - b, tail};
        for (int i = 0; i < np; i++)
            iov[i] = (struct iovec){(void *)pc[i].p, (size_t)pc[i].n};
        if (preadv(fd, iov, np, (off_t)(doff + s0)) != (ssize_t)(s1 - s0))
            return -1;
        for (uint64_t i = 0; i < cn; i++) {
            uint64_t from = (c + i) * CHUNK, to = CH_MIN(from + CHUNK, bl);
            if (pieces_crc(pc, np, from, to) != get32(tab + 4 * i))
                return -1;
        }
        c += cn;
    }
    return 0;
}

/* Serve [boff, boff+len) of block k from its cache file.  1 served,
 * 0 not there / stale / damaged (the caller fetches; on damage dst may
 * hold junk, which the refetch overwrites). */
static int try_hit(cache_file *f, uint64_t k, const char *p, uint64_t boff, void *dst,
                   size_t len)
{
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return 0;
    int served = 0;
    struct stat st;
    uint8_t h[HDR + KEY_MAX];
    size_t hl = HDR + f->keylen;
    uint64_t bl = block_len(f, k);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        goto out;
    ssize_t n = pread(fd, h, hl, 0);
    if (n == (ssize_t)hl && memcmp(h, k_magic, 6) == 0 && h[6] != k_magic[6])
        goto out; /* another version of the format: refilled in place */
    if (n != (ssize_t)hl || memcmp(h, k_magic, 8) ||
        get32(h + 60) != ch_crc32c(ch_crc32c(0, h, 60), h + HDR, f->keylen)) {
        drop_corrupt(f, p, &st); /* truncated, torn or overwritten */
        goto out;
    }
    if (get32(h + 8) != f->keylen || memcmp(h + HDR, f->key, f->keylen) || get64(h + 16) != k ||
        get64(h + 24) != f->c->block || get64(h + 32) != bl || get64(h + 40) != f->size ||
        (int64_t)get64(h + 48) != f->mtime || get32(h + 56) != CHUNK)
        goto out; /* another key (hash collision) or a changed origin: refill */
    /* bl <= block <= 1 GiB and hl is small: no overflow below. */
    uint64_t toff = hl, doff = hl + 4 * n_chunks(bl);
    if ((uint64_t)st.st_size != doff + bl ||
        read_verified(fd, toff, doff, bl, boff, dst, len) != 0) {
        drop_corrupt(f, p, &st);
        goto out;
    }
    /* LRU: used now (best effort), once per handle and cache file. */
    uint64_t fp = memo_fp(k, (uint64_t)st.st_ino);
    _Atomic uint64_t *m = f->memo ? &f->memo[k % MEMO] : NULL;
    if (!m || atomic_load_explicit(m, memory_order_relaxed) != fp) {
        futimens(fd, NULL);
        if (m)
            atomic_store_explicit(m, fp, memory_order_relaxed);
    }
    served = 1;
out:
    close(fd);
    if (served)
        atomic_fetch_add(&f->c->n_hits, 1);
    return served;
}

/* ---- the inner source ----------------------------------------------- */

static int inner_handle(cache_file *f, void **out, chute_error *err)
{
    void *h = atomic_load(&f->inner_h);
    if (!h) {
        pthread_mutex_lock(&f->mu);
        h = atomic_load(&f->inner_h);
        if (!h) {
            uint64_t sz = 0;
            int rc = ch_src_open(f->c->inner, f->path, &h, &sz, err);
            if (rc != CHUTE_OK) {
                pthread_mutex_unlock(&f->mu);
                return rc;
            }
            if (sz != f->size) {
                f->c->inner->close(h);
                pthread_mutex_unlock(&f->mu);
                return ch_err(err, CHUTE_EIO, "%s: changed while open (size %llu, now %llu)",
                              f->path, (unsigned long long)f->size, (unsigned long long)sz);
            }
            atomic_store(&f->inner_h, h);
        }
        pthread_mutex_unlock(&f->mu);
    }
    *out = h;
    return CHUTE_OK;
}

static int fetch(cache_file *f, uint64_t k, uint8_t *buf, uint64_t bl, chute_error *err)
{
    void *h = NULL;
    int rc = inner_handle(f, &h, err);
    if (rc == CHUTE_OK)
        rc = f->c->inner->read_at(h, f->path, k * f->c->block, buf, (size_t)bl, err);
    if (rc == CHUTE_OK) {
        atomic_fetch_add(&f->c->n_fetches, 1);
        atomic_fetch_add(&f->c->n_bytes, bl);
    }
    return rc;
}

/* ---- budget --------------------------------------------------------- */

typedef struct ent {
    int64_t mtime;
    uint64_t size;
    char name[40];
} ent;

static int ent_cmp(const void *a, const void *b)
{
    const ent *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* The directory's true usage; removes stale temporaries, and block files
 * oldest first until usage + need fits.  Caller holds the evict lock. */
static uint64_t scan_evict(ch_cache *c, uint64_t need)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return 0;
    ent *v = NULL;
    size_t nv = 0, cap = 0;
    uint64_t total = 0;
    int64_t now = (int64_t)time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        struct stat st;
        if (nl < 5 || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (strstr(de->d_name, ".blk.tmp.")) {
            if (now - (int64_t)st.st_mtime > STALE_TMP_S)
                unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        if (strcmp(de->d_name + nl - 4, ".blk") || nl >= sizeof v->name)
            continue;
        if (nv == cap) {
            size_t nc = cap ? cap * 2 : 256;
            ent *nv2 = realloc(v, nc * sizeof *v);
            if (!nv2)
                break;
            v = nv2;
            cap = nc;
        }
        v[nv].mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        v[nv].size = (uint64_t)st.st_size;
        memcpy(v[nv].name, de->d_name, nl + 1);
        total += v[nv].size;
        nv++;
    }
    if (total + need > c->budget && nv) {
        qsort(v, nv, sizeof *v, ent_cmp);
        for (size_t i = 0; i < nv && total + need > c->budget; i++)
            if (unlinkat(dirfd(d), v[i].name, 0) == 0) {
                total -= v[i].size;
                atomic_fetch_add(&c->n_evict, 1);
            }
    }
    closedir(d);
    free(v);
    return total;
}

static int lock_open(ch_cache *c, const char *name, int *out_errno)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/locks/%s", c->dir, name);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0)
        *out_errno = errno;
    return fd;
}

static int flock_wait(int fd, int op)
{
    while (flock(fd, op) != 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

/* Move the finished temporary file into place within the budget. */
static int publish(ch_cache *c, const char *tmp, const char *final, uint64_t need)
{
    int e = 0;
    int fd = lock_open(c, "evict.lock", &e);
    if (fd < 0) {
        errno = e;
        return -1;
    }
    if (flock_wait(fd, LOCK_EX) != 0) {
        e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    uint8_t b[8] = {0};
    uint64_t used = pread(fd, b, 8, 0) == 8 ? get64(b) : UINT64_MAX;
    if (used == UINT64_MAX || used + need > c->budget)
        used = scan_evict(c, need);
    int rc = 0;
    if (used + need > c->budget) {
        rc = -1;
        e = ENOSPC; /* files held by other processes' locks? never: all removable */
    } else if (rename(tmp, final) != 0) {
        rc = -1;
        e = errno;
    } else {
        put64(b, used + need);
        if (pwrite(fd, b, 8, 0) != 8) { /* the next publish rescans */
        }
        atomic_fetch_add(&c->n_fills, 1);
    }
    flock(fd, LOCK_UN);
    close(fd);
    errno = e;
    return rc;
}

/* 0, or the errno of the failed write. */
static int write_full(int fd, const void *p, uint64_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, (size_t)CH_MIN(n, (uint64_t)1 << 30));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return EIO;
        b += w;
        n -= (uint64_t)w;
    }
    return 0;
}

static void fill(cache_file *f, uint64_t k, const char *final, const uint8_t *data,
                 uint64_t bl)
{
    ch_cache *c = f->c;
    uint64_t nc = n_chunks(bl);
    uint64_t need = HDR + f->keylen + 4 * nc + bl; /* bl <= 1 GiB: no overflow */
    if (need > c->budget)
        return; /* larger than the whole budget: never cached */
    uint8_t *tab = malloc(nc ? 4 * nc : 1);
    if (!tab) {
        fallback(c, "out of memory for the checksums of", final, ENOMEM);
        return;
    }
    for (uint64_t i = 0; i < nc; i++) {
        uint64_t at = i * CHUNK;
        put32(tab + 4 * i, ch_crc32c(0, data + at, (size_t)CH_MIN((uint64_t)CHUNK, bl - at)));
    }
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%llu", final, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&c->seq, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        fallback(c, "cannot create", tmp, errno);
        free(tab);
        return;
    }
    uint8_t h[HDR];
    hdr_build(f, k, bl, h);
    int werr = write_full(fd, h, HDR);
    if (!werr)
        werr = write_full(fd, f->key, f->keylen);
    if (!werr)
        werr = write_full(fd, tab, 4 * nc);
    free(tab);
    if (!werr)
        werr = write_full(fd, data, bl);
    if (close(fd) != 0 && !werr)
        werr = errno;
    if (werr) {
        unlink(tmp);
        fallback(c, "cannot write", tmp, werr);
        return;
    }
    if (publish(c, tmp, final, need) != 0) {
        int pe = errno;
        unlink(tmp);
        fallback(c, "cannot publish", final, pe);
    }
}

/* ---- one block ------------------------------------------------------ */

static int block_read_disk(cache_file *f, uint64_t k, uint64_t boff, void *dst, size_t len,
                           chute_error *err)
{
    ch_cache *c = f->c;
    uint64_t bl = block_len(f, k);
    uint64_t h[2];
    char p[4200];
    int lfd = -1;
    if (f->cacheable && c->disk) {
        block_name(f, k, h);
        block_path(f, h, p, sizeof p);
        if (try_hit(f, k, p, boff, dst, len))
            return CHUTE_OK;
        atomic_fetch_add(&c->n_misses, 1);
        char ln[16];
        snprintf(ln, sizeof ln, "%02x.lock", (unsigned)(h[0] % STRIPES));
        int e = 0;
        lfd = lock_open(c, ln, &e);
        if (lfd < 0) {
            fallback(c, "cannot open lock in", c->dir, e);
        } else {
            if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
                atomic_fetch_add(&c->n_waits, 1);
                if (flock_wait(lfd, LOCK_EX) != 0) {
                    fallback(c, "cannot lock in", c->dir, errno);
                    close(lfd);
                    lfd = -1;
                }
            }
            /* Someone else may have filled it while we waited. */
            if (lfd >= 0 && try_hit(f, k, p, boff, dst, len)) {
                flock(lfd, LOCK_UN);
                close(lfd);
                return CHUTE_OK;
            }
        }
    }
    uint8_t *buf = malloc(bl ? bl : 1);
    if (!buf) {
        if (lfd >= 0)
            close(lfd);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for a %llu-byte cache block",
                      f->path, (unsigned long long)bl);
    }
    int rc = fetch(f, k, buf, bl, err);
    if (rc == CHUTE_OK) {
        memcpy(dst, buf + boff, len);
        if (lfd >= 0)
            fill(f, k, p, buf, bl);
    }
    free(buf);
    if (lfd >= 0) {
        flock(lfd, LOCK_UN);
        close(lfd);
    }
    return rc;
}

/* ---- the RAM tier ----------------------------------------------------- */

typedef struct ram_ent {
    struct ram_ent *hnext;         /* hash chain */
    struct ram_ent *prev, *next;   /* LRU list, most recent first */
    uint64_t h0, h1;               /* block_name */
    uint64_t size;                 /* the origin's size and mtime when read */
    int64_t mtime;
    uint64_t len;                  /* data bytes */
    _Atomic uint32_t refs;         /* the table's (while linked) + readers' */
    size_t keylen;
    char *key;                     /* source name, NUL, path (+ block in h) */
    uint8_t *data;
} ram_ent;

typedef struct ram {
    pthread_mutex_t mu;            /* guards everything below */
    ram_ent **tab;
    size_t nb;                     /* buckets, a power of two */
    ram_ent *head, *tail;
    uint64_t budget, used, entries;
    _Atomic uint64_t hits, misses, evictions, inserts;
} ram;

static void ram_ent_free(ram_ent *e)
{
    free(e->key);
    free(e->data);
    free(e);
}

static void ram_ent_put(ram_ent *e)
{
    if (atomic_fetch_sub(&e->refs, 1) == 1)
        ram_ent_free(e);
}

/* Under mu: take e out of the table and the list; the table's reference
 * is dropped by the caller (outside the lock is fine). */
static void ram_unlink(ram *r, ram_ent *e)
{
    ram_ent **pp = &r->tab[e->h0 & (r->nb - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        r->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        r->tail = e->prev;
    e->prev = e->next = e->hnext = NULL;
    r->used -= e->len;
    r->entries--;
}

static void ram_front(ram *r, ram_ent *e)
{
    if (r->head == e)
        return;
    e->prev->next = e->next; /* e is not the head, so it has a prev */
    if (e->next)
        e->next->prev = e->prev;
    else
        r->tail = e->prev;
    e->prev = NULL;
    e->next = r->head;
    r->head->prev = e;
    r->head = e;
}

static int ram_create(ram **out, uint64_t budget, uint64_t block)
{
    ram *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    uint64_t want = budget / block + 1;
    size_t nb = 64;
    while (nb < want && nb < (1u << 20))
        nb *= 2;
    r->tab = calloc(nb, sizeof *r->tab);
    if (!r->tab) {
        free(r);
        return -1;
    }
    r->nb = nb;
    r->budget = budget;
    pthread_mutex_init(&r->mu, NULL);
    *out = r;
    return 0;
}

static void ram_destroy(ram *r)
{
    if (!r)
        return;
    for (ram_ent *e = r->head, *n; e; e = n) {
        n = e->next;
        ram_ent_free(e); /* no reader is left: every handle is closed */
    }
    free(r->tab);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static int ram_match(const ram_ent *e, const cache_file *f, const uint64_t h[2])
{
    return e->h0 == h[0] && e->h1 == h[1] && e->keylen == f->keylen &&
           !memcmp(e->key, f->key, f->keylen);
}

/* Copy [boff, boff+len) of block k from RAM.  1 served, 0 a miss. */
static int ram_get(ram *r, const cache_file *f, const uint64_t h[2], uint64_t boff, void *dst,
                   size_t len)
{
    pthread_mutex_lock(&r->mu);
    ram_ent *e = r->tab[h[0] & (r->nb - 1)];
    while (e && !ram_match(e, f, h))
        e = e->hnext;
    if (e && (e->size != f->size || e->mtime != f->mtime || boff + len > e->len))
        e = NULL; /* a changed origin: the refill replaces it */
    if (e) {
        atomic_fetch_add(&e->refs, 1);
        ram_front(r, e);
    }
    pthread_mutex_unlock(&r->mu);
    if (!e) {
        atomic_fetch_add(&r->misses, 1);
        return 0;
    }
    memcpy(dst, e->data + boff, len);
    ram_ent_put(e);
    atomic_fetch_add(&r->hits, 1);
    return 1;
}

/* Insert block k (data: bl bytes, taken over) and evict past the budget. */
static void ram_insert(ram *r, const cache_file *f, const uint64_t h[2], uint8_t *data,
                       uint64_t bl)
{
    ram_ent *e = bl <= r->budget ? calloc(1, sizeof *e) : NULL;
    char *key = e ? malloc(f->keylen ? f->keylen : 1) : NULL;
    if (!e || !key) {
        free(e);
        free(key);
        free(data);
        return;
    }
    memcpy(key, f->key, f->keylen);
    e->h0 = h[0];
    e->h1 = h[1];
    e->size = f->size;
    e->mtime = f->mtime;
    e->len = bl;
    e->keylen = f->keylen;
    e->key = key;
    e->data = data;
    atomic_init(&e->refs, 1);
    ram_ent *gone = NULL; /* unlinked entries, chained through hnext */
    pthread_mutex_lock(&r->mu);
    ram_ent **b = &r->tab[h[0] & (r->nb - 1)];
    ram_ent *old = *b;
    while (old && !ram_match(old, f, h))
        old = old->hnext;
    if (old && old->size == f->size && old->mtime == f->mtime) {
        /* another thread filled it meanwhile: keep that one */
        pthread_mutex_unlock(&r->mu);
        ram_ent_free(e);
        return;
    }
    if (old) {
        ram_unlink(r, old);
        old->hnext = gone;
        gone = old;
    }
    e->hnext = *b;
    *b = e;
    e->next = r->head;
    if (r->head)
        r->head->prev = e;
    r->head = e;
    if (!r->tail)
        r->tail = e;
    r->used += bl;
    r->entries++;
    atomic_fetch_add(&r->inserts, 1);
    while (r->used > r->budget && r->tail && r->tail != e) {
        ram_ent *t = r->tail;
        ram_unlink(r, t);
        t->hnext = gone;
        gone = t;
        atomic_fetch_add(&r->evictions, 1);
    }
    pthread_mutex_unlock(&r->mu);
    while (gone) { /* freed now, or by the last reader still copying */
        ram_ent *n = gone->hnext;
        ram_ent_put(gone);
        gone = n;
    }
}

static int block_read(cache_file *f, uint64_t k, uint64_t boff, void *dst, size_t len,
                      chute_error *err)
{
    ram *r = f->c->ram;
    if (!r || !f->cacheable)
        return block_read_disk(f, k, boff, dst, len, err);
    uint64_t h[2];
    block_name(f, k, h);
    if (ram_get(r, f, h, boff, dst, len))
        return CHUTE_OK;
    uint64_t bl = block_len(f, k);
    uint8_t *blk = malloc(bl ? bl : 1);
    if (!blk)
        return block_read_disk(f, k, boff, dst, len, err);
    int rc = block_read_disk(f, k, 0, blk, (size_t)bl, err);
    if (rc != CHUTE_OK) {
        free(blk);
        return rc;
    }
    memcpy(dst, blk + boff, len);
    ram_insert(r, f, h, blk, bl);
    return CHUTE_OK;
}

/* ---- the ops -------------------------------------------------------- */

static int file_init(ch_cache *c, const char *path, cache_file *f, chute_error *err)
{
    ch_stat st;
    int rc = ch_src_stat(c->inner, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    if (st.type != CH_ENT_FILE)
        return ch_err(err, CHUTE_EFORMAT, "%s: not a regular file (%s)", path,
                      st.type == CH_ENT_DIR ? "a directory" : st.why ? st.why : "other");
    f->c = c;
    f->size = st.size;
    f->mtime = st.mtime_ns;
    size_t nl = strlen(c->inner->name), pl = strlen(path);
    f->cacheable = nl + 1 + pl <= KEY_MAX;
    if (f->cacheable) {
        memcpy(f->key, c->inner->name, nl + 1);
        memcpy(f->key + nl + 1, path, pl);
        f->keylen = nl + 1 + pl;
    }
    pthread_mutex_init(&f->mu, NULL);
    atomic_init(&f->inner_h, NULL);
    f->memo = NULL;
    return CHUTE_OK;
}

static void file_fini(cache_file *f)
{
    void *h = atomic_load(&f->inner_h);
    if (h)
        f->c->inner->close(h);
    pthread_mutex_destroy(&f->mu);
    free(f->memo);
}

static int file_read(cache_file *f, const char *path, uint64_t off, void *buf, size_t len,
                     chute_error *err)
{
    if (off > f->size || len > f->size - off)
        return ch_err(err, CHUTE_EIO, "%s@%llu: unexpected end of file (wanted %zu bytes, size %llu)",
                      path, (unsigned long long)off, len, (unsigned long long)f->size);
    uint8_t *d = buf;
    uint64_t B = f->c->block;
    while (len) {
        uint64_t k = off / B, boff = off % B;
        size_t n = (size_t)CH_MIN((uint64_t)len, B - boff);
        int rc = block_read(f, k, boff, d, n, err);
        if (rc != CHUTE_OK)
            return rc;
        d += n;
        off += n;
        len -= n;
    }
    return CHUTE_OK;
}

static int cache_open(void *self, const char *path, void **out, uint64_t *out_size,
                      chute_error *err)
{
    ch_cache *c = self;
    cache_file *f = malloc(sizeof *f);
    if (!f)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    int rc = file_init(c, path, f, err);
    if (rc != CHUTE_OK) {
        free(f);
        return rc;
    }
    f->path = strdup(path);
    f->memo = malloc(MEMO * sizeof *f->memo);
    if (f->memo)
        for (size_t i = 0; i < MEMO; i++)
            atomic_init(&f->memo[i], 0);
    if (!f->path || !f->memo) {
        file_fini(f);
        free(f->path);
        free(f);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    }
    *out = f;
    if (out_size)
        *out_size = f->size;
    return CHUTE_OK;
}

static int cache_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                         chute_error *err)
{
    return file_read(h, path, off, buf, len, err);
}

static void cache_close(void *h)
{
    cache_file *f = h;
    if (!f)
        return;
    file_fini(f);
    free(f->path);
    free(f);
}

static int cache_read_file(void *self, const char *path, void *buf, size_t cap,
                           size_t *out_len, chute_error *err)
{
    /* On the stack: a tree reads every sample this way, and steady state
     * allocates nothing (no memo: each read sets the files' mtime). */
    cache_file fs, *f = &fs;
    int rc = file_init(self, path, f, err);
    if (rc != CHUTE_OK)
        return rc;
    f->path = (char *)path;
    if (f->size > SIZE_MAX) {
        rc = ch_err(err, CHUTE_ELIMIT, "%s: too large to read whole", path);
    } else {
        *out_len = (size_t)f->size;
        rc = f->size > cap ? CH_ESMALL : file_read(f, path, 0, buf, (size_t)f->size, err);
    }
    file_fini(f);
    return rc;
}

static int cache_stat(void *self, const char *path, ch_stat *out, chute_error *err)
{
    return ch_src_stat(((ch_cache *)self)->inner, path, out, err);
}

static int cache_list(void *self, const char *dir, ch_list_fn fn, void *user, chute_error *err)
{
    return ch_src_list(((ch_cache *)self)->inner, dir, fn, user, err);
}

/* Reached only by a caller that skipped ch_src_open/ch_src_read_file:
 * a clear error instead of a crash. */
static int cache_open_static(const char *path, void **out, uint64_t *out_size, chute_error *err)
{
    (void)out;
    (void)out_size;
    return ch_err(err, CHUTE_EINVAL,
                  "%s: internal: the cache source must be opened through ch_src_open", path);
}
static int cache_read_file_static(const char *path, void *buf, size_t cap, size_t *out_len,
                                  chute_error *err)
{
    (void)buf;
    (void)cap;
    (void)out_len;
    return ch_err(err, CHUTE_EINVAL,
                  "%s: internal: the cache source must be read through ch_src_read_file", path);
}

int ch_cache_create(const ch_source_ops *inner, const ch_cache_options *opt, ch_cache **out,
                    chute_error *err)
{
    int disk = opt && opt->dir && *opt->dir;
    if (!inner || !opt || !out || (!disk && !opt->ram_bytes))
        return ch_err(err, CHUTE_EINVAL,
                      "cache: an inner source and cache_dir or cache_ram_bytes are required");
    *out = NULL;
    uint64_t block = opt->block_bytes ? opt->block_bytes : (8ull << 20);
    if (block < 4096 || block > (1ull << 30))
        return ch_err(err, CHUTE_EINVAL,
                      "cache_block_bytes %llu is out of range (4 KiB to 1 GiB)",
                      (unsigned long long)block);
    if (disk && strlen(opt->dir) > 3000)
        return ch_err(err, CHUTE_EINVAL, "cache_dir is too long (%zu bytes)", strlen(opt->dir));
    ch_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ch_err(err, CHUTE_ENOMEM, "cache: out of memory");
    if (opt->ram_bytes && ram_create(&c->ram, opt->ram_bytes, block) != 0) {
        free(c);
        return ch_err(err, CHUTE_ENOMEM, "cache: out of memory");
    }
    c->disk = disk;
    c->dir = strdup(disk ? opt->dir : "(memory)");
    size_t n = c->dir ? strlen(c->dir) : 0;
    while (n > 1 && c->dir[n - 1] == '/')
        c->dir[--n] = '\0';
    char locks[4200];
    snprintf(locks, sizeof locks, "%s/locks", c->dir ? c->dir : "");
    int rc = !c->dir ? ch_err(err, CHUTE_ENOMEM, "cache: out of memory")
             : disk  ? ch_mkdir_p(locks, err)
                     : CHUTE_OK;
    if (rc != CHUTE_OK) {
        ram_destroy(c->ram);
        free(c->dir);
        free(c);
        return rc;
    }
    c->inner = inner;
    c->block = block;
    c->budget = opt->bytes ? opt->bytes : (10ull << 30);
    c->ops = (ch_source_ops){
        .version = CH_SOURCE_OPS_VERSION,
        .caps = CH_SOURCE_CAP_PREAD,
        .name = "cache",
        .open = cache_open_static,
        .read_at = cache_read_at,
        .close = cache_close,
        .read_file = cache_read_file_static,
        .schemes = inner->schemes,
        .self = c,
        .open_s = cache_open,
        .read_file_s = cache_read_file,
        .stat_s = cache_stat,
        .list_s = cache_list,
    };
    /* A restart starts from the directory's true usage (and clears the
     * temporaries of a killed filler). */
    int e = 0;
    int fd = disk ? lock_open(c, "evict.lock", &e) : -1;
    if (fd >= 0 && flock_wait(fd, LOCK_EX) == 0) {
        uint8_t b[8];
        put64(b, scan_evict(c, 0));
        if (pwrite(fd, b, 8, 0) != 8) { /* the next publish rescans */
        }
        flock(fd, LOCK_UN);
    }
    if (fd >= 0)
        close(fd);
    *out = c;
    return CHUTE_OK;
}

const ch_source_ops *ch_cache_source(ch_cache *c) { return c ? &c->ops : NULL; }

void ch_cache_stats_get(ch_cache *c, ch_cache_stats *o)
{
    memset(o, 0, sizeof *o);
    if (!c)
        return;
    o->hits = atomic_load(&c->n_hits);
    o->misses = atomic_load(&c->n_misses);
    o->fetches = atomic_load(&c->n_fetches);
    o->bytes_fetched = atomic_load(&c->n_bytes);
    o->fills = atomic_load(&c->n_fills);
    o->evictions = atomic_load(&c->n_evict);
    o->corrupt = atomic_load(&c->n_corrupt);
    o->fallbacks = atomic_load(&c->n_fallback);
    o->waits = atomic_load(&c->n_waits);
    if (c->ram) {
        ram *r = c->ram;
        o->ram_hits = atomic_load(&r->hits);
        o->ram_misses = atomic_load(&r->misses);
        o->ram_evictions = atomic_load(&r->evictions);
        pthread_mutex_lock(&r->mu);
        o->ram_bytes = r->used;
        o->ram_entries = r->entries;
        pthread_mutex_unlock(&r->mu);
        o->ram_budget = r->budget;
    }
}

const char *ch_cache_warning(ch_cache *c)
{
    if (!c || atomic_load_explicit(&c->warned, memory_order_acquire) != 2)
        return "";
    return c->warning;
}

void ch_cache_destroy(ch_cache *c)
{
    if (!c)
        return;
    ram_destroy(c->ram);
    free(c->dir);
    free(c);
}
