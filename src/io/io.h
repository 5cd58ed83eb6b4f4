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
 */
#ifndef CHUTE_IO_H
#define CHUTE_IO_H

#include "../common/common.h"

#define CH_SOURCE_OPS_VERSION 1

/* Internal, positive: "buffer too small, *out_len says how much". */
#define CH_ESMALL 100

enum {
    CH_SOURCE_CAP_PREAD = 1u << 0,   /* concurrent positional reads */
    CH_SOURCE_CAP_DIRECT = 1u << 1   /* O_DIRECT available */
};

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
} ch_source_ops;

/* Local files through open/pread. */
extern const ch_source_ops ch_source_local;

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
