/*
 * io.h — where bytes come from.
 *
 * A source is a table of functions (ch_source_ops) so that the formats
 * above never care whether bytes live in a local file, behind HTTP or in a
 * cache tier.  Every read is positional and either returns exactly the
 * bytes asked for or fails with a message naming the path and offset: a
 * short read is an error, never silently accepted.
 *
 * Handles returned by open() are safe to read from many threads at once
 * (pread has no shared file position).
 *
 * Reach open/read_file/stat/list through ch_src_open, ch_src_read_file,
 * ch_src_stat and ch_src_list, never through the table's pointers: since
 * version 3 a source may be an object (the cache tier wraps another
 * source), whose entries need its `self`.
 */
#ifndef CHUTE_IO_H
#define CHUTE_IO_H

#include "../common/common.h"

#define CH_SOURCE_OPS_VERSION 4

/* Internal, positive: "buffer too small, *out_len says how much". */
#define CH_ESMALL 100

enum {
    CH_SOURCE_CAP_PREAD = 1u << 0,   /* concurrent positional reads */
    CH_SOURCE_CAP_DIRECT = 1u << 1   /* O_DIRECT available */
};

/* What stat and list report about a name.  CH_ENT_OTHER is anything that
 * is neither a regular file nor a directory (FIFO, socket, device node,
 * dangling or looping link); `why` then says which, as static text
 * ("a FIFO", "a dangling symbolic link"). */
enum { CH_ENT_FILE = 1, CH_ENT_DIR = 2, CH_ENT_OTHER = 3 };
typedef struct ch_stat {
    int type;                 /* CH_ENT_* */
    uint64_t size;            /* bytes, for CH_ENT_FILE */
    int64_t mtime_ns;         /* modification time, 0 when the source has none */
    const char *why;          /* CH_ENT_OTHER: what it is (static text) */
    /* The name itself is a symbolic link (type etc. describe its target,
     * or CH_ENT_OTHER for a dangling one).  0 where the source has none. */
    int is_link;
    /* What makes a file itself, so two names of one file can be told
     * apart (local: device and inode); both 0 where the source has none. */
    uint64_t dev, ino;
} ch_stat;
/* Called once per entry of a listing with its name (no '/'), in no
 * particular order; return nonzero to stop the listing (list then
 * returns CHUTE_OK). */
typedef int (*ch_list_fn)(void *user, const char *name, const ch_stat *st);

/* --- version 4: asynchronous reads, for the read-ahead stage ---
 * One engine per read-ahead thread keeps many reads in flight (io_uring
 * for local files, curl multi for HTTP/S3).  A request is owned by the
 * caller and must stay valid from submit until reap returns it.  h is a
 * handle from open (positional read of len bytes at off into buf), or
 * NULL for a whole small file (read_file semantics: cap = len; if the
 * file is larger, status CH_ESMALL with got = its size).  On return from
 * reap: status is CHUTE_OK (got = bytes read, == len for positional
 * reads) or an error with err filled as read_at/read_file would. */
typedef struct ch_aio_req {
    void *h;
    const char *path;
    uint64_t off;
    size_t len;
    void *buf;
    uint64_t tag;
    int status;
    size_t got;
    chute_error err;
} ch_aio_req;
typedef struct ch_source_ops {
    uint32_t version;
    uint32_t caps;
    const char *name;
    /* Open a file for reading; *out is the backend's handle. */
    int (*open)(const char *path, void **out, uint64_t *out_size, chute_error *err);
    /* Read exactly len bytes at off. Thread-safe. `path` is for messages. */
    int (*read_at)(void *h, const char *path, uint64_t off, void *buf, size_t len,
                   chute_error *err);
    void (*close)(void *h);
    /* Read a whole small file (open + read + close), for trees of files.
     * If it is larger than cap, returns CH_ESMALL with *out_len = its size
     * and reads nothing, so the caller can grow its buffer and retry. */
    int (*read_file)(const char *path, void *buf, size_t cap, size_t *out_len,
                     chute_error *err);
    /* --- version 2 --- */
    /* URI prefixes this source serves ("s3://", "https://"), NULL-ended;
     * NULL for the local source, which serves every other path. */
    const char *const *schemes;
    /* What `path` is, following symbolic links; a missing path is
     * CHUTE_ENOTFOUND, a failure to ask CHUTE_EIO. */
    int (*stat)(const char *path, ch_stat *out, chute_error *err);
    /* Every entry directly inside directory `dir` ("." and ".." left out;
     * for object stores: the keys and common prefixes one level below
     * "dir/"), each with what stat would say of it. */
    int (*list)(const char *dir, ch_list_fn fn, void *user, chute_error *err);
    /* --- version 3: sources that are objects ---
     * A source with per-instance state (the cache tier wraps another
     * source and owns a directory, a budget and counters) cannot be a
     * static table: open/read_file/stat/list above get no context.  Such
     * a source sets `self` and the *_s entries below, and callers reach
     * every source through ch_src_open/ch_src_read_file/ch_src_stat/
     * ch_src_list, which pick the *_s entry when there is one.  read_at
     * and close need nothing new: the handle open returns carries the
     * instance.  Static sources (local, s3, http) leave all of this zero
     * and keep working unchanged. */
    void *self;
    int (*open_s)(void *self, const char *path, void **out, uint64_t *out_size,
                  chute_error *err);
    int (*read_file_s)(void *self, const char *path, void *buf, size_t cap, size_t *out_len,
                       chute_error *err);
    int (*stat_s)(void *self, const char *path, ch_stat *out, chute_error *err);
    int (*list_s)(void *self, const char *dir, ch_list_fn fn, void *user, chute_error *err);
    /* --- version 4: asynchronous reads (NULL: read-ahead uses threads) ---
     * aio_open makes an engine for up to `depth` requests in flight (one
     * per read-ahead thread, used by that thread only); aio_submit queues
     * one request (CHUTE_OK, or an error meaning nothing was queued);
     * aio_reap waits up to wait_ms (-1: until at least one) and stores up
     * to max completed requests in done[], returning how many (>= 0) or a
     * negative chute status on a failure of the engine itself. */
    int (*aio_open)(void *self, unsigned depth, void **engine, chute_error *err);
    int (*aio_submit)(void *engine, ch_aio_req *req);
    int (*aio_reap)(void *engine, ch_aio_req **done, unsigned max, int wait_ms);
    void (*aio_close)(void *engine);
} ch_source_ops;

/* Calls through a source, object or static (see version 3 above). */
static inline int ch_src_open(const ch_source_ops *s, const char *path, void **out,
                              uint64_t *out_size, chute_error *err)
{
    return s->open_s ? s->open_s(s->self, path, out, out_size, err)
                     : s->open(path, out, out_size, err);
}
static inline int ch_src_read_file(const ch_source_ops *s, const char *path, void *buf,
                                   size_t cap, size_t *out_len, chute_error *err)
{
    return s->read_file_s ? s->read_file_s(s->self, path, buf, cap, out_len, err)
                          : s->read_file(path, buf, cap, out_len, err);
}
static inline int ch_src_stat(const ch_source_ops *s, const char *path, ch_stat *out,
                              chute_error *err)
{
    if (s->stat_s)
        return s->stat_s(s->self, path, out, err);
    if (!s->stat)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: source '%s' cannot stat", path, s->name);
    return s->stat(path, out, err);
}
static inline int ch_src_list(const ch_source_ops *s, const char *dir, ch_list_fn fn, void *user,
                              chute_error *err)
{
    if (s->list_s)
        return s->list_s(s->self, dir, fn, user, err);
    if (!s->list)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: source '%s' cannot list", dir, s->name);
    return s->list(dir, fn, user, err);
}
/* The first n bytes of `path` into buf (open, one positional read,
 * close): what a format's probe compares with its magic.  A file shorter
 * than n bytes is CHUTE_EFORMAT naming it; open/read errors as the source
 * gives them. */
static inline int ch_src_read_head(const ch_source_ops *s, const char *path, void *buf,
                                   size_t n, chute_error *err)
{
    void *h = NULL;
    uint64_t size = 0;
    int rc = ch_src_open(s, path, &h, &size, err);
    if (rc != CHUTE_OK)
        return rc;
    if (size < n)
        rc = ch_err(err, CHUTE_EFORMAT, "%s: %llu bytes, shorter than its %zu-byte header", path,
                    (unsigned long long)size, n);
    else
        rc = s->read_at(h, path, 0, buf, n, err);
    s->close(h);
    return rc;
}

/* Local files through open/pread. */
extern const ch_source_ops ch_source_local;
/* O_DIRECT through the local source's io_uring engine (it has
 * CH_SOURCE_CAP_DIRECT when built with liburing).  After
 * ch_local_aio_direct(engine, 1), a positional request whose off, len and
 * buf are multiples of CH_DIRECT_ALIGN is read through an O_DIRECT
 * descriptor of the handle's file (opened once per handle; where the
 * filesystem refuses O_DIRECT, the ordinary descriptor).  An O_DIRECT
 * read that ends past the end of the file fails as a short read would:
 * the caller retries the exact range.  ch_local_aio_direct_reads: how many
 * reads went through O_DIRECT (any thread). */
#define CH_DIRECT_ALIGN 4096u
void ch_local_aio_direct(void *engine, int on);
uint64_t ch_local_aio_direct_reads(void *engine);

/* S3 (s3://bucket/key) and HTTP (http://, https://) through libcurl
 * (src/io/remote/); present when built with CHUTE_HAVE_CURL. */
extern const ch_source_ops ch_source_s3;
extern const ch_source_ops ch_source_http;

/* The registry of sources (src/io/sources.c), NULL-terminated. */
extern const ch_source_ops *const ch_sources[];
/* The source that serves `path`: the first whose scheme prefixes it, else
 * the local source.  Never NULL. */
const ch_source_ops *ch_source_for(const char *path);

/* ---- The cache tier (cache.c) ----
 * A source that wraps another: blocks of the inner source's files are
 * kept in a node-local directory shared by every process on the node. */
typedef struct ch_cache ch_cache;
typedef struct ch_cache_options {
    const char *dir;        /* created if missing; NULL = no disk tier (ram_bytes
                               then required) */
    uint64_t bytes;         /* disk budget for block files; 0 = 10 GiB */
    uint64_t block_bytes;   /* block size, 4 KiB..1 GiB; 0 = 8 MiB */
    uint64_t ram_bytes;     /* RAM tier in front of the disk (or alone when dir
                               is NULL): whole blocks, LRU; 0 = none */
} ch_cache_options;
typedef struct ch_cache_stats {
    uint64_t hits;          /* blocks served from a verified cache file */
    uint64_t misses;        /* blocks not in the cache (or stale) when asked */
    uint64_t fetches;       /* blocks read from the inner source */
    uint64_t bytes_fetched; /* bytes read from the inner source */
    uint64_t fills;         /* cache files written */
    uint64_t evictions;     /* cache files removed to stay within the budget */
    uint64_t corrupt;       /* cache files found damaged, removed, refetched */
    uint64_t fallbacks;     /* blocks served from the inner source because the
                               cache directory failed (full, deleted, ...) */
    uint64_t waits;         /* misses that waited for another filler's lock */
    /* The RAM tier (zero without one).  Its misses go on to the disk
     * tier (hits/misses above) or, without one, the origin. */
    uint64_t ram_hits, ram_misses, ram_evictions;
    uint64_t ram_bytes;     /* block bytes held now (<= ram_budget) */
    uint64_t ram_entries;   /* blocks held now */
    uint64_t ram_budget;
} ch_cache_stats;
/* Wrap `inner` (borrowed; must outlive the cache).  The source to use is
 * ch_cache_source(c), valid until ch_cache_destroy, which must come after
 * every handle opened through it is closed.  Thread-safe after create. */
int ch_cache_create(const ch_source_ops *inner, const ch_cache_options *opt, ch_cache **out,
                    chute_error *err);
const ch_source_ops *ch_cache_source(ch_cache *c);
void ch_cache_stats_get(ch_cache *c, ch_cache_stats *out);
/* The first reason the cache fell back to the inner source ("" if none):
 * the warning a front end shows once.  Borrowed, valid until destroy. */
const char *ch_cache_warning(ch_cache *c);
void ch_cache_destroy(ch_cache *c);

/* Write helpers for producers of files (pack): full writes, fsync, and
 * rename-then-fsync-directory so a file appears complete or not at all. */
int ch_write_all(int fd, const char *path, const void *buf, size_t len, chute_error *err);
int ch_pwrite_all(int fd, const char *path, const void *buf, size_t len, uint64_t off,
                  chute_error *err);
int ch_fsync_dir(const char *dir, chute_error *err);
int ch_mkdir_p(const char *dir, chute_error *err);
/* Evict a file's pages from the page cache (flushing dirty ones first),
 * so the next read comes from the device.  Best effort, no privileges. */
void ch_drop_page_cache(const char *path);

#endif
