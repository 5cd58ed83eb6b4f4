/*
 * tfrecord.c — TFRecord framing: indexes of records in plain and
 * compressed files, record CRC checks, and DALI's text index files.
 *
 * A TFRecord file is a bare sequence of frames (u64 length, masked
 * CRC32C of the length, data, masked CRC32C of the data) with no header,
 * footer or index, so "where is record i" can only be answered by walking
 * the frames once.  The walk trusts a length only after its CRC matches,
 * and only if the frame it announces fits in what is left of the input;
 * a frame that fails either check ends the walk, because with a bad
 * length there is no honest way to find the next frame (scanning for
 * something that looks like a header would invent records out of image
 * bytes).  The index built so far is kept so the caller can choose to use
 * the good prefix and count the rest, or to fail.
 *
 * Compressed files (GZIP or ZLIB, as tf.io.TFRecordOptions writes them)
 * have no random access at all: they are inflated once as a stream, and
 * the frames are followed by a push-style state machine over the inflated
 * bytes, so memory stays bounded (two 256 KiB buffers) whatever the file
 * size.  The optional cache file receives the inflated stream so records
 * can then be read by offset like a plain file.
 *
 * Must never: trust a length before its CRC, read past the input, let a
 * length overflow an addition, or allocate in proportion to a number the
 * file states (the index grows by doubling as records are *found*).
 */
#define _GNU_SOURCE
#include "parse.h"

#include "../io/io.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define TFR_DEFAULT_MAX_RECORD (1ull << 30)
#define TFR_DEFAULT_MAX_RECORDS (1ull << 32)
#define TFR_DEFAULT_MAX_INFLATED (64ull << 30)
#define TFR_IO_CHUNK (256u << 10)

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct tfr_limits {
    uint64_t max_record, max_records, max_inflated;
} tfr_limits;

static tfr_limits limits_of(const fmt_tfr_opts *o)
{
    tfr_limits l;
    l.max_record = o && o->max_record ? o->max_record : TFR_DEFAULT_MAX_RECORD;
    l.max_records = o && o->max_records ? o->max_records : TFR_DEFAULT_MAX_RECORDS;
    l.max_inflated = o && o->max_inflated ? o->max_inflated : TFR_DEFAULT_MAX_INFLATED;
    return l;
}

void fmt_tfr_index_free(fmt_tfr_index *ix)
{
    if (!ix)
        return;
    free(ix->recs);
    memset(ix, 0, sizeof *ix);
}

static int index_push(fmt_tfr_index *ix, uint64_t off, uint64_t len, const tfr_limits *l,
                      const char *name, chute_error *err)
{
    if (ix->count >= l->max_records)
        return ch_err(err, CHUTE_ELIMIT, "%s@%llu: more than %llu records (the limit)", name,
                      (unsigned long long)off, (unsigned long long)l->max_records);
    if (ix->count == ix->cap) {
        uint64_t ncap = ix->cap ? ix->cap * 2 : 256;
        if (ncap > SIZE_MAX / sizeof *ix->recs)
            return ch_err(err, CHUTE_ENOMEM, "%s: index too large", name);
        fmt_tfr_record *n = realloc(ix->recs, (size_t)ncap * sizeof *n);
        if (!n)
            return ch_err(err, CHUTE_ENOMEM, "%s: no memory for %llu index entries", name,
                          (unsigned long long)ncap);
        ix->recs = n;
        ix->cap = ncap;
    }
    ix->recs[ix->count].offset = off;
    ix->recs[ix->count].length = len;
    ix->count++;
    return CHUTE_OK;
}

/* Check a header's length CRC and limit; *out_len = the data length.
 * At offset 0 a bad CRC means "not a TFRecord file" (EFORMAT). */
static int parse_header(const uint8_t *h, uint64_t off, const tfr_limits *l, const char *name,
                        uint64_t *out_len, chute_error *err)
{
    uint32_t want = get_le32(h + 8), got = ch_crc32c_mask(ch_crc32c(0, h, 8));
    if (want != got) {
        if (off == 0)
            return ch_err(err, CHUTE_EFORMAT,
                          "%s@0: not a TFRecord file (the first length's CRC is 0x%08x, "
                          "0x%08x expected; compressed? pass GZIP/ZLIB)",
                          name, want, got);
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: record length CRC mismatch (stored 0x%08x, computed 0x%08x)",
                      name, (unsigned long long)off, want, got);
    }
    uint64_t len = get_le64(h);
    if (len > l->max_record)
        return ch_err(err, CHUTE_ELIMIT,
                      "%s@%llu: record of %llu bytes is over the %llu-byte limit", name,
                      (unsigned long long)off, (unsigned long long)len,
                      (unsigned long long)l->max_record);
    *out_len = len;
    return CHUTE_OK;
}

int fmt_tfr_check_header(const uint8_t hdr[12], uint64_t expect_length, const char *name,
                         uint64_t offset, chute_error *err)
{
    uint32_t want = get_le32(hdr + 8), got = ch_crc32c_mask(ch_crc32c(0, hdr, 8));
    if (want != got)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: record length CRC mismatch (stored 0x%08x, computed 0x%08x)",
                      name, (unsigned long long)offset, want, got);
    uint64_t len = get_le64(hdr);
    if (len != expect_length)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: record holds %llu bytes, the index says %llu", name,
                      (unsigned long long)offset, (unsigned long long)len,
                      (unsigned long long)expect_length);
    return CHUTE_OK;
}

int fmt_tfr_check_data(const uint8_t *data, uint64_t length, const char *name, uint64_t offset,
                       chute_error *err)
{
    if (length > SIZE_MAX - 4)
        return ch_err(err, CHUTE_ELIMIT, "%s@%llu: record too large for this machine", name,
                      (unsigned long long)offset);
    uint32_t want = get_le32(data + length);
    uint32_t got = ch_crc32c_mask(ch_crc32c(0, data, (size_t)length));
    if (want != got)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: record data CRC mismatch (stored 0x%08x, computed 0x%08x, "
                      "%llu bytes)",
                      name, (unsigned long long)offset, want, got,
                      (unsigned long long)length);
    return CHUTE_OK;
}

/* Data CRC of a record read through the reader in window-sized pieces. */
static int verify_through(fmt_reader *r, uint64_t off, uint64_t len, chute_error *err)
{
    uint64_t p = off + FMT_TFR_HEADER, left = len;
    uint32_t crc = 0;
    size_t step = r->mem ? SIZE_MAX : r->win_cap;
    while (left) {
        size_t k = left < step ? (size_t)left : step;
        const uint8_t *v;
        int rc = fmt_reader_get(r, p, k, &v, err);
        if (rc)
            return rc;
        crc = ch_crc32c(crc, v, k);
        p += k;
        left -= k;
    }
    const uint8_t *t;
    int rc = fmt_reader_get(r, p, 4, &t, err);
    if (rc)
        return rc;
    uint32_t want = get_le32(t);
    if (want != ch_crc32c_mask(crc))
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: record data CRC mismatch (stored 0x%08x, computed 0x%08x, "
                      "%llu bytes)",
                      r->name, (unsigned long long)off, want, ch_crc32c_mask(crc),
                      (unsigned long long)len);
    return CHUTE_OK;
}

int fmt_tfr_index_build(fmt_reader *r, const fmt_tfr_opts *opts, fmt_tfr_index *ix,
                        chute_error *err)
{
    tfr_limits l = limits_of(opts);
    int verify = opts && opts->verify_data;
    memset(ix, 0, sizeof *ix);
    uint64_t pos = 0;
    int rc = CHUTE_OK;
    while (pos < r->size) {
        uint64_t left = r->size - pos;
        if (left < FMT_TFR_HEADER) {
            rc = ch_err(err, pos == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                        "%s@%llu: %llu stray bytes at the end, too short for a record "
                        "header (truncated?)",
                        r->name, (unsigned long long)pos, (unsigned long long)left);
            break;
        }
        const uint8_t *h;
        uint64_t len;
        if ((rc = fmt_reader_get(r, pos, FMT_TFR_HEADER, &h, err)) != CHUTE_OK)
            break;
        if ((rc = parse_header(h, pos, &l, r->name, &len, err)) != CHUTE_OK)
            break;
        /* len <= max_record, but the caller may have raised that to 2^64-1. */
        if (len > left - FMT_TFR_HEADER || left - FMT_TFR_HEADER - len < 4) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s@%llu: record claims %llu data bytes but only %llu bytes are "
                        "left (truncated)",
                        r->name, (unsigned long long)pos, (unsigned long long)len,
                        (unsigned long long)left);
            break;
        }
        if (verify && (rc = verify_through(r, pos, len, err)) != CHUTE_OK)
            break;
        if ((rc = index_push(ix, pos, len, &l, r->name, err)) != CHUTE_OK)
            break;
        pos += FMT_TFR_OVERHEAD + len;
    }
    ix->end = pos;
    return rc;
}

/* ---- compressed: a push-style frame follower over inflated bytes ---- */

typedef struct tfr_stream {
    tfr_limits l;
    fmt_tfr_index *ix;
    const char *name;
    uint64_t pos;       /* uncompressed offset of the next byte fed */
    int phase;          /* 0 header, 1 data, 2 data CRC */
    uint8_t buf[FMT_TFR_HEADER];
    unsigned have;
    uint64_t rec_off, rec_len, left;
    uint32_t crc;
} tfr_stream;

static int stream_feed(tfr_stream *s, const uint8_t *p, size_t n, chute_error *err)
{
    while (n) {
        if (s->phase == 0) {
            size_t k = CH_MIN(n, (size_t)(FMT_TFR_HEADER - s->have));
            memcpy(s->buf + s->have, p, k);
            s->have += (unsigned)k;
            p += k;
            n -= k;
            s->pos += k;
            if (s->have < FMT_TFR_HEADER)
                continue;
            s->rec_off = s->pos - FMT_TFR_HEADER;
            int rc = parse_header(s->buf, s->rec_off, &s->l, s->name, &s->rec_len, err);
            if (rc)
                return rc;
            s->left = s->rec_len;
            s->crc = 0;
            s->have = 0;
            s->phase = s->left ? 1 : 2;
        } else if (s->phase == 1) {
            size_t k = s->left < n ? (size_t)s->left : n;
            s->crc = ch_crc32c(s->crc, p, k);
            s->left -= k;
            p += k;
            n -= k;
            s->pos += k;
            if (!s->left)
                s->phase = 2;
        } else {
            size_t k = CH_MIN(n, (size_t)(4 - s->have));
            memcpy(s->buf + s->have, p, k);
            s->have += (unsigned)k;
            p += k;
            n -= k;
            s->pos += k;
            if (s->have < 4)
                continue;
            uint32_t want = get_le32(s->buf), got = ch_crc32c_mask(s->crc);
            if (want != got)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@%llu (uncompressed): record data CRC mismatch (stored "
                              "0x%08x, computed 0x%08x, %llu bytes)",
                              s->name, (unsigned long long)s->rec_off, want, got,
                              (unsigned long long)s->rec_len);
            int rc = index_push(s->ix, s->rec_off, s->rec_len, &s->l, s->name, err);
            if (rc)
                return rc;
            s->ix->end = s->pos;
            s->have = 0;
            s->phase = 0;
        }
    }
    return CHUTE_OK;
}

static int stream_finish(const tfr_stream *s, chute_error *err)
{
    if (s->phase == 0 && s->have == 0)
        return CHUTE_OK;
    uint64_t at = s->phase == 0 ? s->pos - s->have : s->rec_off;
    return ch_err(err, at == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                  "%s@%llu (uncompressed): the stream ends inside a record (truncated)",
                  s->name, (unsigned long long)at);
}

/* Where compressed bytes come from: a file descriptor, or a file opened
 * through a source (then `size` bounds the reads). */
typedef struct tfr_input {
    int fd;
    const struct ch_source_ops *src;
    void *h;
    uint64_t size;
} tfr_input;

static int index_compressed(const tfr_input *input, const char *name, fmt_tfr_compression comp,
                            const fmt_tfr_opts *opts, int cache_fd, fmt_tfr_index *ix,
                            chute_error *err);

int fmt_tfr_index_compressed(int fd, const char *name, fmt_tfr_compression comp,
                             const fmt_tfr_opts *opts, int cache_fd, fmt_tfr_index *ix,
                             chute_error *err)
{
    tfr_input in = {fd, NULL, NULL, 0};
    return index_compressed(&in, name, comp, opts, cache_fd, ix, err);
}

int fmt_tfr_index_compressed_src(const struct ch_source_ops *src, void *h, uint64_t size,
                                 const char *name, fmt_tfr_compression comp,
                                 const fmt_tfr_opts *opts, int cache_fd, fmt_tfr_index *ix,
                                 chute_error *err)
{
    tfr_input in = {-1, src, h, size};
    return index_compressed(&in, name, comp, opts, cache_fd, ix, err);
}

static int index_compressed(const tfr_input *input, const char *name, fmt_tfr_compression comp,
                            const fmt_tfr_opts *opts, int cache_fd, fmt_tfr_index *ix,
                            chute_error *err)
{
    memset(ix, 0, sizeof *ix);
    name = name ? name : "(file)";
    if (comp != FMT_TFR_GZIP && comp != FMT_TFR_ZLIB)
        return ch_err(err, CHUTE_EINVAL, "%s: compression must be GZIP or ZLIB", name);
    tfr_stream s;
    memset(&s, 0, sizeof s);
    s.l = limits_of(opts);
    s.ix = ix;
    s.name = name;
    uint8_t *in = malloc(TFR_IO_CHUNK), *out = malloc(TFR_IO_CHUNK);
    z_stream z;
    memset(&z, 0, sizeof z);
    int zinit = 0, rc = CHUTE_OK;
    if (!in || !out) {
        rc = ch_err(err, CHUTE_ENOMEM, "%s: no memory for inflate buffers", name);
        goto done;
    }
    if (inflateInit2(&z, comp == FMT_TFR_GZIP ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
        rc = ch_err(err, CHUTE_ENOMEM, "%s: inflateInit2 failed", name);
        goto done;
    }
    zinit = 1;
    uint64_t in_off = 0;     /* compressed bytes read so far */
    int at_member_start = 1; /* no byte of the current member consumed yet */
    int eof = 0;
    for (;;) {
        if (z.avail_in == 0 && !eof) {
            ssize_t k;
            if (input->src) {
                uint64_t left = input->size > in_off ? input->size - in_off : 0;
                k = (ssize_t)(left < TFR_IO_CHUNK ? left : TFR_IO_CHUNK);
                if (k > 0 && (rc = input->src->read_at(input->h, name, in_off, in, (size_t)k,
                                                       err)) != CHUTE_OK)
                    goto done;
            } else {
                do
                    k = pread(input->fd, in, TFR_IO_CHUNK, (off_t)in_off);
                while (k < 0 && errno == EINTR);
            }
            if (k < 0) {
                rc = ch_err_errno(err, CHUTE_EIO, errno, "%s@%llu: read failed", name,
                                  (unsigned long long)in_off);
                goto done;
            }
            if (k == 0)
                eof = 1;
            in_off += (uint64_t)k;
            z.next_in = in;
            z.avail_in = (uInt)k;
        }
        if (z.avail_in == 0 && eof) {
            if (at_member_start)
                break; /* clean end between members (or an empty file) */
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s@%llu: the compressed stream ends early (truncated file)", name,
                        (unsigned long long)in_off);
            goto done;
        }
        z.next_out = out;
        z.avail_out = TFR_IO_CHUNK;
        uint64_t consumed_before = in_off - z.avail_in;
        int zr = inflate(&z, Z_NO_FLUSH);
        size_t produced = TFR_IO_CHUNK - z.avail_out;
        if (zr == Z_MEM_ERROR) {
            rc = ch_err(err, CHUTE_ENOMEM, "%s: inflate out of memory", name);
            goto done;
        }
        if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT || zr == Z_STREAM_ERROR) {
            int first = consumed_before == 0;
            rc = ch_err(err, first ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                        "%s@%llu (compressed): %s: %s", name,
                        (unsigned long long)consumed_before,
                        first ? (comp == FMT_TFR_GZIP ? "not a gzip file" : "not a zlib stream")
                              : "damaged compressed data",
                        z.msg ? z.msg : "inflate failed");
            goto done;
        }
        if (in_off - z.avail_in != consumed_before || produced)
            at_member_start = 0;
        if (produced) {
            if (s.pos + produced > s.l.max_inflated || s.pos + produced < s.pos) {
                rc = ch_err(err, CHUTE_ELIMIT,
                            "%s: inflates to more than %llu bytes (the limit; a gzip bomb?)",
                            name, (unsigned long long)s.l.max_inflated);
                goto done;
            }
            if (cache_fd >= 0 &&
                (rc = ch_write_all(cache_fd, "(inflate cache)", out, produced, err)) != CHUTE_OK)
                goto done;
            if ((rc = stream_feed(&s, out, produced, err)) != CHUTE_OK)
                goto done;
        }
        if (zr == Z_STREAM_END) {
            /* Another member may follow (concatenated gzip/zlib streams). */
            if (inflateReset(&z) != Z_OK) {
                rc = ch_err(err, CHUTE_ENOMEM, "%s: inflateReset failed", name);
                goto done;
            }
            at_member_start = 1;
        }
    }
    rc = stream_finish(&s, err);
done:
    if (zinit)
        inflateEnd(&z);
    free(in);
    free(out);
    if (rc == CHUTE_OK)
        ix->end = s.pos;
    return rc;
}

/* ---- DALI index files ---------------------------------------------------- */

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int fmt_tfr_index_parse_dali(const char *text, size_t len, const char *name, uint64_t file_size,
                             fmt_tfr_index *ix, chute_error *err)
{
    memset(ix, 0, sizeof *ix);
    name = name ? name : "(index)";
    tfr_limits l = limits_of(NULL);
    size_t i = 0;
    uint64_t line = 1, prev_end = 0;
    int rc = CHUTE_OK;
    for (;;) {
        uint64_t v[2];
        uint64_t vline = line;
        int k;
        for (k = 0; k < 2; k++) {
            while (i < len && is_space(text[i])) {
                if (text[i] == '\n')
                    line++;
                i++;
            }
            if (i == len)
                break;
            if (k == 0)
                vline = line;
            if (text[i] < '0' || text[i] > '9') {
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s: line %llu: expected a decimal number, found byte 0x%02x", name,
                            (unsigned long long)line, (unsigned char)text[i]);
                goto out;
            }
            uint64_t x = 0;
            while (i < len && text[i] >= '0' && text[i] <= '9') {
                unsigned d = (unsigned)(text[i] - '0');
                if (x > (UINT64_MAX - d) / 10) {
                    rc = ch_err(err, CHUTE_ECORRUPT, "%s: line %llu: number too large", name,
                                (unsigned long long)line);
                    goto out;
                }
                x = x * 10 + d;
                i++;
            }
            if (i < len && !is_space(text[i])) {
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s: line %llu: expected a space after a number, found byte 0x%02x",
                            name, (unsigned long long)line, (unsigned char)text[i]);
                goto out;
            }
            v[k] = x;
        }
        if (k == 0)
            break;
        if (k == 1) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: line %llu: an offset without a size", name,
                        (unsigned long long)vline);
            goto out;
        }
        uint64_t off = v[0], size = v[1];
        if (size < FMT_TFR_OVERHEAD) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s: line %llu: record size %llu is smaller than TFRecord framing (16)",
                        name, (unsigned long long)vline, (unsigned long long)size);
            goto out;
        }
        if (off > file_size || size > file_size - off) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s: line %llu: record %llu+%llu runs past the end of the %llu-byte "
                        "file (stale index?)",
                        name, (unsigned long long)vline, (unsigned long long)off,
                        (unsigned long long)size, (unsigned long long)file_size);
            goto out;
        }
        if (off < prev_end) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s: line %llu: record at %llu overlaps or precedes the previous one "
                        "(ends at %llu)",
                        name, (unsigned long long)vline, (unsigned long long)off,
                        (unsigned long long)prev_end);
            goto out;
        }
        if ((rc = index_push(ix, off, size - FMT_TFR_OVERHEAD, &l, name, err)) != CHUTE_OK)
            goto out;
        prev_end = off + size;
    }
out:
    ix->end = prev_end;
    return rc;
}

int fmt_tfr_index_format_dali(const fmt_tfr_index *ix, char **out_text, size_t *out_len,
                              chute_error *err)
{
    *out_text = NULL;
    *out_len = 0;
    /* Two 20-digit numbers, a space and a newline per record. */
    if (ix->count > (SIZE_MAX - 1) / 42)
        return ch_err(err, CHUTE_ENOMEM, "index of %llu records too large to format",
                      (unsigned long long)ix->count);
    size_t cap = (size_t)ix->count * 42 + 1, n = 0;
    char *t = malloc(cap);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "no memory to format an index of %llu records",
                      (unsigned long long)ix->count);
    for (uint64_t i = 0; i < ix->count; i++)
        n += (size_t)snprintf(t + n, cap - n, "%llu %llu\n",
                              (unsigned long long)ix->recs[i].offset,
                              (unsigned long long)(ix->recs[i].length + FMT_TFR_OVERHEAD));
    t[n] = '\0';
    *out_text = t;
    *out_len = n;
    return CHUTE_OK;
}
