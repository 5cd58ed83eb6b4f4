/*
 * reader.c — fmt_reader: "give me n bytes at offset off" over a memory
 * buffer or a file descriptor, for the format parsers.
 *
 * Parsers of framed formats (TFRecord, tar) mostly hop: read a small
 * header, skip a payload of a size the header claims, read the next
 * header.  Over memory that is pointer arithmetic.  Over a file, one
 * pread per header would cost a syscall per record and reading the whole
 * file would cost every payload byte; a read-ahead window (1 MiB by
 * default) reads each region once and serves every header inside it, and
 * a hop past the window starts a new one where it lands.  When the last
 * hop was long (>= 16 KiB: a copy of that much payload from the page cache
 * costs more than a syscall), a full window would mostly hold payload that
 * is skipped, so the refill shrinks to one page at what was asked: a
 * 256 MiB TFRecord of 110 KB records then costs 2,400 small preads
 * instead of reading 256 MiB (see DESIGN.md, "Format parsers").
 *
 * Offsets past the stated size are the parser's business to report (the
 * input is truncated: CHUTE_ECORRUPT); a pread that fails or comes back
 * short *inside* the size means the storage failed or the file changed
 * under us: CHUTE_EIO, never "corrupt".
 */
#define _GNU_SOURCE
#include "parse.h"
#include "../io/io.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define FMT_HOP_SMALL_READ (16u << 10)

void fmt_reader_mem(fmt_reader *r, const void *p, size_t len, const char *name)
{
    memset(r, 0, sizeof *r);
    r->name = name ? name : "(buffer)";
    r->size = len;
    r->mem = p;
    r->fd = -1;
}

int fmt_reader_fd(fmt_reader *r, int fd, uint64_t size, size_t window, const char *name,
                  chute_error *err)
{
    memset(r, 0, sizeof *r);
    r->name = name ? name : "(file)";
    r->size = size;
    r->fd = fd;
    r->win_cap = window ? window : FMT_WINDOW_DEFAULT;
    r->win = malloc(r->win_cap);
    if (!r->win)
        return ch_err(err, CHUTE_ENOMEM, "%s: no memory for a %zu-byte read window", r->name,
                      r->win_cap);
    return CHUTE_OK;
}

int fmt_reader_source(fmt_reader *r, const struct ch_source_ops *src, void *h, uint64_t size,
                      size_t window, const char *name, chute_error *err)
{
    int rc = fmt_reader_fd(r, -1, size, window, name, err);
    r->src = src;
    r->src_h = h;
    return rc;
}

void fmt_reader_free(fmt_reader *r)
{
    if (!r)
        return;
    free(r->win);
    r->win = NULL;
    r->win_cap = r->win_len = 0;
}

int fmt_reader_get(fmt_reader *r, uint64_t off, size_t n, const uint8_t **out,
                   chute_error *err)
{
    if (off > r->size || n > r->size - off)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: truncated: %zu bytes wanted, %llu left in the input", r->name,
                      (unsigned long long)off, n,
                      (unsigned long long)(off > r->size ? 0 : r->size - off));
    if (r->mem) {
        *out = r->mem + off;
        return CHUTE_OK;
    }
    uint64_t hop = off > r->last_off ? off - r->last_off : 0;
    r->last_off = off;
    if (off >= r->win_off && n <= r->win_len && off - r->win_off <= r->win_len - n) {
        *out = r->win + (off - r->win_off);
        return CHUTE_OK;
    }
    if (n > r->win_cap)
        return ch_err(err, CHUTE_EINVAL, "%s@%llu: %zu bytes asked of a %zu-byte window",
                      r->name, (unsigned long long)off, n, r->win_cap);
    uint64_t left = r->size - off;
    size_t fill = r->win_cap;
    if (hop >= FMT_HOP_SMALL_READ) /* long hops: read a page, not a window of payload */
        fill = CH_MAX(n, CH_MIN((size_t)4096, r->win_cap));
    size_t want = left < fill ? (size_t)left : fill;
    size_t got = 0;
    int tries = 0;
    r->win_len = 0; /* a failed refill must not leave a half-new window valid */
    if (r->src) {
        int rc = r->src->read_at(r->src_h, r->name, off, r->win, want, err);
        if (rc != CHUTE_OK)
            return rc;
        got = want;
    }
    while (got < want) {
        ssize_t k = pread(r->fd, r->win + got, want - got, (off_t)(off + got));
        if (k < 0 && (errno == EINTR || (errno == EAGAIN && ++tries < 3)))
            continue;
        if (k < 0)
            return ch_err_errno(err, CHUTE_EIO, errno, "%s@%llu: read failed", r->name,
                                (unsigned long long)(off + got));
        if (k == 0)
            return ch_err(err, CHUTE_EIO,
                          "%s@%llu: unexpected end of file (the file shrank while read?)",
                          r->name, (unsigned long long)(off + got));
        got += (size_t)k;
    }
    r->win_off = off;
    r->win_len = want;
    *out = r->win;
    return CHUTE_OK;
}
