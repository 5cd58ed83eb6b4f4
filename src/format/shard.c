/*
 * shard.c — the chute shard format (specified in docs/FORMAT.md).
 *
 * A shard is a header, the samples' encoded bytes each at an aligned
 * offset, then an index (one fixed-size entry per sample, class names,
 * sample names) and a fixed-size trailer that locates and checksums the
 * index.  Any sample is one pread at a known offset; opening a shard is
 * two reads (trailer, index).
 *
 * The writer never lets a partial file look like a shard: it writes to
 * "<name>.tmp", and only after the trailer is written and fsync'd renames
 * it into place and fsyncs the directory.
 *
 * The reader trusts nothing: every offset, length and count from the file
 * is bounds-checked against the file size before use, and both the index
 * and each record carry a CRC-32 that is verified.
 */
#define _GNU_SOURCE
#include "format.h"
#include "fcache.h"
#include "../parse/targets.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

int ch_packfile_kind(const char *name, unsigned *out_index)
{
    size_t len = strlen(name);
    if (strcmp(name, CH_MANIFEST_NAME ".tmp") == 0 ||
        (strncmp(name, "shard-", 6) == 0 && len > 4 && strcmp(name + len - 4, ".tmp") == 0))
        return CH_PACKFILE_TEMP;
    /* "shard-" DIGITS ".chute" and nothing else: pack deletes shards whose
     * number is past its last one, so a sign, a space or a number that does
     * not fit (all of which sscanf's %u accepts) must never match. */
    if (strncmp(name, "shard-", 6) != 0)
        return CH_PACKFILE_OTHER;
    const char *p = name + 6;
    uint64_t k = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((k = k * 10 + (uint64_t)(*p - '0')) > UINT32_MAX)
            return CH_PACKFILE_OTHER;
    if (p == name + 6 || strcmp(p, ".chute") != 0)
        return CH_PACKFILE_OTHER;
    if (out_index)
        *out_index = (unsigned)k;
    return CH_PACKFILE_SHARD;
}

/* Little-endian field access, independent of host byte order. */
static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | ((uint64_t)get_u32(p + 4) << 32); }

/* ------------------------------------------------------------------ */
/* Writer                                                              */
/* ------------------------------------------------------------------ */

struct ch_shard_writer {
    int fd;
    char *final_path;
    char *tmp_path;
    uint32_t align;
    uint64_t pos;             /* next write offset */
    uint64_t data_bytes;
    ch_shard_entry *entries;
    char **names;
    uint64_t count, cap;
    uint32_t nclasses;
    char *const *class_names;
    uint8_t *zeros;
    /* Target records (issue 24), one per sample or none: tg holds them one
     * after another, tg_end[i] where sample i's ends.  has_tg: any set. */
    uint8_t *tg;
    size_t tg_n, tg_cap;
    uint64_t *tg_end;
    int has_tg;
};

int ch_shard_writer_open(const char *final_path, uint32_t align, uint32_t nclasses,
                         char *const *class_names, ch_shard_writer **out, chute_error *err)
{
    if (align < 64 || (align & (align - 1)) != 0 || align > (1u << 20))
        return ch_err(err, CHUTE_EINVAL, "alignment %u is not a power of two in 64..1M", align);
    ch_shard_writer *w = calloc(1, sizeof *w);
    if (!w)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    w->fd = -1;
    w->align = align;
    w->nclasses = nclasses;
    w->class_names = class_names;
    w->final_path = strdup(final_path);
    if (asprintf(&w->tmp_path, "%s.tmp", final_path) < 0)
        w->tmp_path = NULL;
    w->zeros = calloc(1, align);
    if (!w->final_path || !w->tmp_path || !w->zeros) {
        ch_shard_writer_abort(w);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        ch_shard_writer_abort(w);
        return ch_err_errno(err, CHUTE_EIO, e, "%s: cannot create", final_path);
    }
    /* Header, padded to one alignment unit so records start aligned. */
    uint8_t *hdr = w->zeros; /* all zero; filled and zeroed back below */
    memcpy(hdr, CH_SHARD_MAGIC, 8);
    put_u16(hdr + 8, CH_SHARD_VERSION_MAJOR);
    put_u16(hdr + 10, CH_SHARD_VERSION_MINOR);
    put_u32(hdr + 12, CH_SHARD_HEADER_BYTES);
    put_u32(hdr + 16, align);
    put_u32(hdr + 20, 0); /* flags */
    put_u32(hdr + 60, ch_crc32(hdr, 60));
    int rc = ch_write_all(w->fd, w->tmp_path, hdr, align, err);
    memset(hdr, 0, CH_SHARD_HEADER_BYTES);
    if (rc != CHUTE_OK) {
        ch_shard_writer_abort(w);
        return rc;
    }
    w->pos = align;
    *out = w;
    return CHUTE_OK;
}

int ch_shard_writer_add(ch_shard_writer *w, const void *data, uint32_t len, int32_t label,
                        uint32_t kind, const char *name, chute_error *err)
{
    if (w->count == w->cap) {
        uint64_t cap = w->cap ? w->cap * 2 : 1024;
        ch_shard_entry *e = realloc(w->entries, cap * sizeof *e);
        if (!e)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        w->entries = e;
        char **n = realloc(w->names, cap * sizeof *n);
        if (!n)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        w->names = n;
        uint64_t *te = realloc(w->tg_end, cap * sizeof *te);
        if (!te)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        w->tg_end = te;
        w->cap = cap;
    }
    char *nm = strdup(name ? name : "");
    if (!nm)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = ch_write_all(w->fd, w->tmp_path, data, len, err);
    uint32_t pad = (uint32_t)((w->align - (len % w->align)) % w->align);
    if (rc == CHUTE_OK && pad)
        rc = ch_write_all(w->fd, w->tmp_path, w->zeros, pad, err);
    if (rc != CHUTE_OK) {
        free(nm);
        return rc;
    }
    ch_shard_entry *e = &w->entries[w->count];
    e->offset = w->pos;
    e->length = len;
    e->crc32 = ch_crc32(data, len);
    e->label = label;
    e->kind = kind;
    w->names[w->count] = nm;
    w->tg_end[w->count] = w->tg_n;
    w->count++;
    w->pos += (uint64_t)len + pad;
    w->data_bytes += len;
    return CHUTE_OK;
}

int ch_shard_writer_set_targets(ch_shard_writer *w, const void *rec, size_t len, chute_error *err)
{
    if (w->count == 0 || w->tg_end[w->count - 1] != w->tg_n)
        return ch_err(err, CHUTE_EINVAL, "targets set twice or before any sample");
    if (len > CH_TG_MAX_BYTES || w->tg_n > (1ull << 34))
        return ch_err(err, CHUTE_ELIMIT, "%s: target records over 16 GiB in one shard",
                      w->final_path);
    if (w->tg_n + len > w->tg_cap) {
        size_t cap = w->tg_cap ? w->tg_cap : 65536;
        while (cap < w->tg_n + len)
            cap *= 2;
        uint8_t *n = realloc(w->tg, cap);
        if (!n)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for target records");
        w->tg = n;
        w->tg_cap = cap;
    }
    memcpy(w->tg + w->tg_n, rec, len);
    w->tg_n += len;
    w->tg_end[w->count - 1] = w->tg_n;
    w->has_tg = 1;
    return CHUTE_OK;
}

uint64_t ch_shard_writer_bytes(const ch_shard_writer *w) { return w->pos; }
uint64_t ch_shard_writer_count(const ch_shard_writer *w) { return w->count; }

static void writer_free(ch_shard_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    for (uint64_t i = 0; i < w->count; i++)
        free(w->names[i]);
    free(w->names);
    free(w->entries);
    free(w->tg);
    free(w->tg_end);
    free(w->final_path);
    free(w->tmp_path);
    free(w->zeros);
    free(w);
}

void ch_shard_writer_abort(ch_shard_writer *w)
{
    if (!w)
        return;
    if (w->tmp_path)
        unlink(w->tmp_path);
    writer_free(w);
}

int ch_shard_writer_finish(ch_shard_writer *w, chute_error *err)
{
    /* Index = entries, classes, names. */
    size_t sz = (size_t)w->count * CH_SHARD_ENTRY_BYTES + 4;
    for (uint32_t c = 0; c < w->nclasses; c++)
        sz += 4 + strlen(w->class_names[c]);
    sz += 8;
    for (uint64_t i = 0; i < w->count; i++)
        sz += 4 + strlen(w->names[i]);
    /* Targets table after the names (docs/FORMAT.md, "Targets"): older
     * readers stop at the name table and never see it. */
    if (w->has_tg)
        sz += 16 + (size_t)w->count * 4 + w->tg_n;
    uint8_t *ix = calloc(1, sz + CH_SHARD_TRAILER_BYTES);
    if (!ix) {
        ch_shard_writer_abort(w);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %zu-byte index", sz);
    }
    uint8_t *p = ix;
    for (uint64_t i = 0; i < w->count; i++, p += CH_SHARD_ENTRY_BYTES) {
        put_u64(p, w->entries[i].offset);
        put_u32(p + 8, w->entries[i].length);
        put_u32(p + 12, w->entries[i].crc32);
        put_u32(p + 16, (uint32_t)w->entries[i].label);
        put_u32(p + 20, w->entries[i].kind);
        /* 24..31 reserved, zero */
    }
    put_u32(p, w->nclasses);
    p += 4;
    for (uint32_t c = 0; c < w->nclasses; c++) {
        uint32_t n = (uint32_t)strlen(w->class_names[c]);
        put_u32(p, n);
        memcpy(p + 4, w->class_names[c], n);
        p += 4 + n;
    }
    put_u64(p, w->count);
    p += 8;
    for (uint64_t i = 0; i < w->count; i++) {
        uint32_t n = (uint32_t)strlen(w->names[i]);
        put_u32(p, n);
        memcpy(p + 4, w->names[i], n);
        p += 4 + n;
    }
    if (w->has_tg) {
        memcpy(p, CH_SHARD_TARGETS_MAGIC, 4);
        put_u32(p + 4, 1); /* table version */
        put_u64(p + 8, w->count);
        p += 16;
        for (uint64_t i = 0, at = 0; i < w->count; i++) {
            uint32_t n = (uint32_t)(w->tg_end[i] - at);
            put_u32(p, n);
            memcpy(p + 4, w->tg + at, n);
            p += 4 + n;
            at = w->tg_end[i];
        }
    }
    uint8_t *t = p; /* trailer */
    memcpy(t, CH_TRAILER_MAGIC, 8);
    put_u64(t + 8, w->pos);
    put_u64(t + 16, sz);
    put_u64(t + 24, w->count);
    put_u32(t + 32, ch_crc32(ix, sz));
    put_u16(t + 36, CH_SHARD_VERSION_MAJOR);
    put_u16(t + 38, CH_SHARD_VERSION_MINOR);
    put_u32(t + 40, w->align);
    put_u32(t + 60, ch_crc32(t, 60));
    int rc = ch_write_all(w->fd, w->tmp_path, ix, sz + CH_SHARD_TRAILER_BYTES, err);
    free(ix);
    if (rc == CHUTE_OK && fsync(w->fd) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: fsync failed", w->tmp_path);
    if (rc == CHUTE_OK && close(w->fd) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: close failed", w->tmp_path);
    w->fd = -1;
    if (rc == CHUTE_OK && rename(w->tmp_path, w->final_path) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: rename failed", w->tmp_path);
    if (rc == CHUTE_OK) {
        char *d = strdup(w->final_path);
        rc = d ? ch_fsync_dir(dirname(d), err) : CHUTE_ENOMEM;
        free(d);
        writer_free(w);
        return rc;
    }
    ch_shard_writer_abort(w);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Index reader                                                        */
/* ------------------------------------------------------------------ */

void ch_shard_index_free(ch_shard_index *ix)
{
    if (!ix)
        return;
    free(ix->entries);
    if (ix->class_names)
        for (uint32_t c = 0; c < ix->nclasses; c++)
            free(ix->class_names[c]);
    free(ix->class_names);
    if (ix->names)
        for (uint64_t i = 0; i < ix->count; i++)
            free(ix->names[i]);
    free(ix->names);
    free(ix->tg);
    free(ix->tg_off);
    memset(ix, 0, sizeof *ix);
}

/* Bounded string read from the index blob. */
static char *take_str(const uint8_t **p, const uint8_t *end)
{
    if (end - *p < 4)
        return NULL;
    uint32_t n = get_u32(*p);
    if ((uint64_t)(end - *p - 4) < n || n > 65535)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    memcpy(s, *p + 4, n);
    s[n] = '\0';
    if (memchr(s, '\0', n)) {
        free(s);
        return NULL;
    }
    *p += 4 + n;
    return s;
}

int ch_shard_read_index(const ch_source_ops *src, void *h, const char *path, uint64_t file_size,
                        ch_shard_index *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    uint8_t hdr[CH_SHARD_HEADER_BYTES], t[CH_SHARD_TRAILER_BYTES];
    if (file_size < CH_SHARD_HEADER_BYTES + CH_SHARD_TRAILER_BYTES)
        return ch_err(err, CHUTE_EFORMAT, "%s: %llu bytes is too small to be a chute shard", path,
                      (unsigned long long)file_size);
    int rc = src->read_at(h, path, 0, hdr, sizeof hdr, err);
    if (rc)
        return rc;
    if (memcmp(hdr, CH_SHARD_MAGIC, 8) != 0)
        return ch_err(err, CHUTE_EFORMAT, "%s@0: not a chute shard (bad magic)", path);
    if (get_u16(hdr + 8) != CH_SHARD_VERSION_MAJOR)
        return ch_err(err, CHUTE_EFORMAT, "%s@8: shard format version %u.%u is not supported (this is %d.%d)",
                      path, get_u16(hdr + 8), get_u16(hdr + 10), CH_SHARD_VERSION_MAJOR,
                      CH_SHARD_VERSION_MINOR);
    if (get_u32(hdr + 60) != ch_crc32(hdr, 60))
        return ch_err(err, CHUTE_ECORRUPT, "%s@0: header checksum mismatch", path);
    uint32_t align = get_u32(hdr + 16);
    if (get_u32(hdr + 12) != CH_SHARD_HEADER_BYTES)
        return ch_err(err, CHUTE_ECORRUPT, "%s@12: header size %u is not %d", path,
                      get_u32(hdr + 12), CH_SHARD_HEADER_BYTES);
    if (align < 64 || align > (1u << 20) || (align & (align - 1)) != 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s@16: alignment %u is not a power of two in 64..1M",
                      path, align);
    uint64_t toff = file_size - CH_SHARD_TRAILER_BYTES;
    rc = src->read_at(h, path, toff, t, sizeof t, err);
    if (rc)
        return rc;
    if (memcmp(t, CH_TRAILER_MAGIC, 8) != 0)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: no index trailer (truncated or incompletely written shard)", path,
                      (unsigned long long)toff);
    if (get_u32(t + 60) != ch_crc32(t, 60))
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: trailer checksum mismatch", path,
                      (unsigned long long)toff);
    uint64_t ioff = get_u64(t + 8), isz = get_u64(t + 16), count = get_u64(t + 24);
    if (get_u16(t + 36) != CH_SHARD_VERSION_MAJOR || get_u32(t + 40) != align)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: trailer (version %u, alignment %u) disagrees with the header "
                      "(version %d, alignment %u)",
                      path, (unsigned long long)toff, get_u16(t + 36), get_u32(t + 40),
                      CH_SHARD_VERSION_MAJOR, align);
    /* count * 32 <= isz <= toff - ioff: no product below can overflow. */
    if (ioff > toff || isz != toff - ioff || count > isz / CH_SHARD_ENTRY_BYTES ||
        isz > (1ull << 34) || ioff < align || ioff % align != 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: index location out of bounds", path,
                      (unsigned long long)toff);
    uint8_t *ix = malloc(isz ? isz : 1);
    if (!ix)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for the index", path);
    rc = src->read_at(h, path, ioff, ix, isz, err);
    if (rc == CHUTE_OK && ch_crc32(ix, isz) != get_u32(t + 32))
        rc = ch_err(err, CHUTE_ECORRUPT, "%s@%llu: index checksum mismatch", path,
                    (unsigned long long)ioff);
    if (rc) {
        free(ix);
        return rc;
    }
    out->count = count;
    out->align = align;
    out->file_size = file_size;
    out->entries = calloc(count ? count : 1, sizeof *out->entries);
    out->names = calloc(count ? count : 1, sizeof(char *));
    if (!out->entries || !out->names) {
        free(ix);
        ch_shard_index_free(out);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    }
    const uint8_t *p = ix, *end = ix + isz;
    /* Records lie in [align, index_offset), each at a multiple of align, in
     * index order and without overlap: the writer's layout.  Anything else
     * (an entry repeated, two entries sharing bytes) is damage. */
    uint64_t prev_end = align;
    for (uint64_t i = 0; i < count; i++, p += CH_SHARD_ENTRY_BYTES) {
        ch_shard_entry *e = &out->entries[i];
        e->offset = get_u64(p);
        e->length = get_u32(p + 8);
        e->crc32 = get_u32(p + 12);
        e->label = (int32_t)get_u32(p + 16);
        e->kind = get_u32(p + 20);
        const char *why = NULL;
        if (e->offset < align || e->offset > ioff || e->length > ioff - e->offset)
            why = "points outside the data region";
        else if (e->offset % align != 0)
            why = "is not aligned";
        else if (e->offset < prev_end)
            why = "overlaps the record before it";
        if (why) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s@%llu: index entry %llu (record at %llu+%u) %s",
                        path, (unsigned long long)(ioff + i * CH_SHARD_ENTRY_BYTES),
                        (unsigned long long)i, (unsigned long long)e->offset, e->length, why);
            break;
        }
        prev_end = e->offset + e->length;
    }
    if (rc == CHUTE_OK) {
        if (end - p < 4) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: index class table truncated", path);
        } else {
            uint32_t nc = get_u32(p);
            p += 4;
            if (nc > (uint64_t)(end - p) / 4) {
                rc = ch_err(err, CHUTE_ECORRUPT, "%s: index class count %u out of bounds", path, nc);
            } else {
                out->class_names = calloc(nc ? nc : 1, sizeof(char *));
                if (!out->class_names)
                    rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                else
                    out->nclasses = nc;
                for (uint32_t c = 0; rc == CHUTE_OK && c < nc; c++)
                    if (!(out->class_names[c] = take_str(&p, end)))
                        rc = ch_err(err, CHUTE_ECORRUPT, "%s: class name %u malformed", path, c);
            }
        }
    }
    for (uint64_t i = 0; rc == CHUTE_OK && i < count; i++)
        if (out->entries[i].label < 0 || (uint32_t)out->entries[i].label >= out->nclasses)
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: sample %llu has label %d outside 0..%u", path,
                        (unsigned long long)i, out->entries[i].label, out->nclasses);
    if (rc == CHUTE_OK) {
        if (end - p < 8 || get_u64(p) != count) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: index name table malformed", path);
        } else {
            p += 8;
            for (uint64_t i = 0; rc == CHUTE_OK && i < count; i++)
                if (!(out->names[i] = take_str(&p, end)))
                    rc = ch_err(err, CHUTE_ECORRUPT, "%s: sample name %llu malformed", path,
                                (unsigned long long)i);
        }
    }
    /* The targets table (optional): kept as one block, sample i's record
     * at tg + tg_off[i], tg_off[i + 1] - tg_off[i] bytes (0: none).  The
     * records are checked when read (ch_tg_decode); here only their
     * lengths must tile the table exactly. */
    if (rc == CHUTE_OK && end - p >= 4 && memcmp(p, CH_SHARD_TARGETS_MAGIC, 4) == 0) {
        uint64_t at = (uint64_t)(p - ix);
        if (end - p < 16 || get_u32(p + 4) != 1 || get_u64(p + 8) != count)
            rc = ch_err(err, CHUTE_ECORRUPT, "%s@%llu: targets table header malformed", path,
                        (unsigned long long)(ioff + at));
        p += 16;
        const uint8_t *q = p;
        uint64_t total = 0;
        for (uint64_t i = 0; rc == CHUTE_OK && i < count; i++) {
            if (end - q < 4 || get_u32(q) > (uint64_t)(end - q - 4)) {
                rc = ch_err(err, CHUTE_ECORRUPT, "%s@%llu: target record %llu runs past the index",
                            path, (unsigned long long)(ioff + (uint64_t)(q - ix)),
                            (unsigned long long)i);
                break;
            }
            total += get_u32(q);
            q += 4 + get_u32(q);
        }
        if (rc == CHUTE_OK) {
            out->tg = malloc(total ? total : 1);
            out->tg_off = malloc(sizeof(uint64_t) * (count + 1));
            out->tg_base = ioff + (uint64_t)(p - ix);
            if (!out->tg || !out->tg_off)
                rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory for target records", path);
        }
        uint64_t o = 0;
        for (uint64_t i = 0; rc == CHUTE_OK && i < count; i++) {
            uint32_t n = get_u32(p);
            out->tg_off[i] = o;
            memcpy(out->tg + o, p + 4, n);
            o += n;
            p += 4 + n;
        }
        if (rc == CHUTE_OK)
            out->tg_off[count] = o;
    }
    free(ix);
    if (rc)
        ch_shard_index_free(out);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Manifest                                                            */
/* ------------------------------------------------------------------ */

/* The manifest is text a person may edit and a stranger may hand us, and
 * every number in it ends up sizing or indexing something.  So it is
 * parsed by hand, not with sscanf (whose %llu takes "-1" as 2^64-1, skips
 * blanks and ignores what follows): fields are separated by exactly one
 * space, numbers are digits only with overflow checked, every line ends
 * in '\n', and each error names the file and the line. */

int ch_shard_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > 255 || name[0] == '.')
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '/' || c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

void ch_manifest_free(ch_manifest *m)
{
    if (!m)
        return;
    for (uint32_t k = 0; k < m->nshards; k++)
        free(m->shards[k].name);
    free(m->shards);
    memset(m, 0, sizeof *m);
}

/* A field quoted for a message: at most 40 bytes, control bytes as '?'. */
static const char *quote_field(const char *p, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap && i < 40; i++)
        buf[o++] = ((unsigned char)p[i] < 0x20 || p[i] == 0x7f) ? '?' : p[i];
    if (n > 40 && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* Decimal digits only: no sign, no blank, no leading zero, no overflow. */
static const char *parse_u64(const char *p, size_t n, uint64_t *out)
{
    if (n == 0)
        return "an empty number";
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return p[0] == '-' ? "a negative number" : "not a decimal number";
    if (n > 1 && p[0] == '0')
        return "a number with a leading zero";
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return "a number too large (over 2^64-1)";
        v = v * 10 + d;
    }
    *out = v;
    return NULL;
}

typedef struct field {
    const char *p;
    size_t n;
} field;

/* Split a line (without its '\n') at single spaces into at most `max`
 * fields; returns the count, or -1 for an empty field (a leading or
 * trailing space, two spaces) or more than max. */
static int split_fields(const char *line, size_t n, field *f, int max)
{
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || line[i] == ' ') {
            if (i == start || k == max)
                return -1;
            f[k].p = line + start;
            f[k].n = i - start;
            k++;
            start = i + 1;
        }
    }
    return k;
}

static int field_is(const field *f, const char *word)
{
    size_t n = strlen(word);
    return f->n == n && memcmp(f->p, word, n) == 0;
}

static int cmp_by_name(const void *a, const void *b)
{
    const ch_manifest_shard *x = *(const ch_manifest_shard *const *)a;
    const ch_manifest_shard *y = *(const ch_manifest_shard *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

static int manifest_no_duplicates(const char *path, const ch_manifest *m, chute_error *err)
{
    if (m->nshards < 2)
        return CHUTE_OK;
    const ch_manifest_shard **v = malloc((size_t)m->nshards * sizeof *v);
    if (!v)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    for (uint32_t k = 0; k < m->nshards; k++)
        v[k] = &m->shards[k];
    qsort(v, m->nshards, sizeof *v, cmp_by_name);
    int rc = CHUTE_OK;
    for (uint32_t k = 1; k < m->nshards && rc == CHUTE_OK; k++)
        if (strcmp(v[k - 1]->name, v[k]->name) == 0)
            rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: shard %s is listed twice (first on line %u)",
                        path, v[k]->line, v[k]->name, v[k - 1]->line);
    free(v);
    return rc;
}

/* The first line is not "chute-dataset 1" or "2": a newer writer's
 * manifest is refused by its version, anything else as not a manifest. */
static int manifest_bad_head(const char *path, const char *text, size_t len, chute_error *err)
{
    static const char pre[] = "chute-dataset ";
    size_t n = sizeof pre - 1, d = n;
    if (len > n && memcmp(text, pre, n) == 0) {
        while (d < len && d < n + 9 && text[d] >= '0' && text[d] <= '9')
            d++;
        if (d > n && d < len && text[d] == '\n')
            return ch_err(err, CHUTE_EFORMAT,
                          "%s:1: manifest version %.*s is newer than this reader (it reads "
                          "versions 1 and 2): upgrade chute to read this dataset",
                          path, (int)(d - n), text + n);
    }
    return ch_err(err, CHUTE_EFORMAT, "%s:1: not a chute manifest (version 1 or 2)", path);
}

/* "pack KEY=VALUE ..." (version 2): max_side, quality, raw as decimal
 * numbers; keys this reader does not know are skipped (the line only
 * describes what pack did, it never changes how records are read). */
static int manifest_pack_line(const char *path, uint32_t lineno, const char *line, size_t n,
                              ch_manifest *out, chute_error *err)
{
    char q[64];
    size_t at = 4;
    while (at < n) {
        size_t start = ++at, end = start;
        while (end < n && line[end] != ' ')
            end++;
        const char *eq = memchr(line + start, '=', end - start);
        if (end == start || !eq || eq == line + start)
            return ch_err(err, CHUTE_ECORRUPT, "%s:%u: pack line: '%s' is not KEY=VALUE", path,
                          lineno, quote_field(line + start, end - start, q, sizeof q));
        size_t kl = (size_t)(eq - (line + start));
        const char *v = eq + 1;
        size_t vl = (size_t)(line + end - v);
        uint64_t val = 0;
        uint32_t *dst = NULL;
        int is_raw = kl == 3 && memcmp(line + start, "raw", 3) == 0;
        if (kl == 8 && memcmp(line + start, "max_side", 8) == 0)
            dst = &out->max_side;
        else if (kl == 7 && memcmp(line + start, "quality", 7) == 0)
            dst = &out->quality;
        if (is_raw || dst) {
            const char *why = parse_u64(v, vl, &val);
            if (!why && val > (dst ? UINT32_MAX : 1))
                why = "out of range";
            if (why)
                return ch_err(err, CHUTE_ECORRUPT, "%s:%u: pack line: value '%s' is %s", path,
                              lineno, quote_field(v, vl, q, sizeof q), why);
            if (dst)
                *dst = (uint32_t)val;
            else
                out->raw = (int)val;
        }
        at = end;
    }
    return CHUTE_OK;
}

int ch_manifest_parse(const char *path, const char *text, size_t len, ch_manifest *out,
                      chute_error *err)
{
    memset(out, 0, sizeof *out);
    static const char k_head[] = "chute-dataset 1\n";
    if (len < sizeof k_head - 1 || memcmp(text, k_head, sizeof k_head - 3) != 0 ||
        text[sizeof k_head - 2] != '\n')
        return manifest_bad_head(path, text, len, err);
    out->version = (uint32_t)(text[sizeof k_head - 3] - '0');
    if (out->version != 1 && out->version != 2)
        return manifest_bad_head(path, text, len, err);
    size_t at = sizeof k_head - 1;
    uint32_t lineno = 1, cap = 0;
    int rc = CHUTE_OK, ended = 0, packed = 0;
    char q[64];
    while (rc == CHUTE_OK && at < len) {
        lineno++;
        const char *line = text + at;
        const char *nl = memchr(line, '\n', len - at);
        if (!nl) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: last line has no newline (truncated?)", path,
                        lineno);
            break;
        }
        size_t n = (size_t)(nl - line);
        at += n + 1;
        field f[4];
        int nf = split_fields(line, n, f, 4);
        if (ended) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: text after the end line", path, lineno);
        } else if (out->version >= 2 && n >= 4 && memcmp(line, "pack", 4) == 0 &&
                   (n == 4 || line[4] == ' ')) {
            if (packed || out->nshards)
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s:%u: the pack line must come once, before the shard lines", path,
                            lineno);
            else
                rc = manifest_pack_line(path, lineno, line, n, out, err);
            packed = 1;
        } else if (nf < 1) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s:%u: unrecognised line (fields are separated by one space)", path,
                        lineno);
        } else if (field_is(&f[0], "shard")) {
            uint64_t samples = 0, bytes = 0;
            const char *why = NULL;
            if (nf != 4)
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s:%u: want 'shard NAME SAMPLES BYTES' (one space apart)", path,
                            lineno);
            else if (!ch_shard_name_ok(f[1].p, f[1].n))
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s:%u: bad shard name '%s' (a file in the dataset's directory: no "
                            "'/', no leading '.', no control characters, 1..255 bytes)",
                            path, lineno, quote_field(f[1].p, f[1].n, q, sizeof q));
            else if ((why = parse_u64(f[2].p, f[2].n, &samples)) != NULL)
                rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: sample count '%s' is %s", path, lineno,
                            quote_field(f[2].p, f[2].n, q, sizeof q), why);
            else if ((why = parse_u64(f[3].p, f[3].n, &bytes)) != NULL)
                rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: byte count '%s' is %s", path, lineno,
                            quote_field(f[3].p, f[3].n, q, sizeof q), why);
            else if (samples > UINT64_MAX - out->total)
                rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: total sample count overflows", path,
                            lineno);
            else if (out->nshards == CH_MANIFEST_MAX_SHARDS)
                rc = ch_err(err, CHUTE_ELIMIT, "%s:%u: more than %u shards", path, lineno,
                            CH_MANIFEST_MAX_SHARDS);
            if (rc)
                break;
            if (out->nshards == cap) {
                uint32_t ncap = cap ? cap * 2 : 16; /* <= 2 * CH_MANIFEST_MAX_SHARDS */
                ch_manifest_shard *v = realloc(out->shards, (size_t)ncap * sizeof *v);
                if (!v) {
                    rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
                    break;
                }
                out->shards = v;
                cap = ncap;
            }
            ch_manifest_shard *e = &out->shards[out->nshards];
            /* Not strndup: the text need not be NUL-terminated anywhere. */
            if (!(e->name = malloc(f[1].n + 1))) {
                rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
                break;
            }
            memcpy(e->name, f[1].p, f[1].n);
            e->name[f[1].n] = '\0';
            e->samples = samples;
            e->bytes = bytes;
            e->line = lineno;
            out->nshards++;
            out->total += samples;
        } else if (field_is(&f[0], "end")) {
            uint64_t a = 0, b = 0;
            const char *why = NULL;
            if (nf != 3)
                rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: want 'end SHARDS SAMPLES'", path, lineno);
            else if ((why = parse_u64(f[1].p, f[1].n, &a)) != NULL ||
                     (why = parse_u64(f[2].p, f[2].n, &b)) != NULL)
                rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: end line: %s", path, lineno, why);
            else if (a != out->nshards || b != out->total)
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s:%u: end line disagrees with the shard lines (%llu shards, %llu "
                            "samples listed)",
                            path, lineno, (unsigned long long)out->nshards,
                            (unsigned long long)out->total);
            ended = 1;
        } else {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: unrecognised line '%s'", path, lineno,
                        quote_field(line, n, q, sizeof q));
        }
    }
    if (rc == CHUTE_OK && !ended)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: manifest has no end line (truncated)", path);
    if (rc == CHUTE_OK)
        rc = manifest_no_duplicates(path, out, err);
    if (rc == CHUTE_OK && out->total == 0)
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: dataset has no samples", path);
    if (rc)
        ch_manifest_free(out);
    return rc;
}

/* Whole manifest into memory through the source (bounded). */
static int read_manifest(const ch_source_ops *src, const char *path, char **out, size_t *out_len,
                         chute_error *err)
{
    size_t cap = 64 << 10;
    char *buf = NULL;
    for (int tries = 0; tries < 4; tries++) {
        char *nb = realloc(buf, cap);
        if (!nb) {
            free(buf);
            return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
        }
        buf = nb;
        size_t len = 0;
        int rc = ch_src_read_file(src, path, buf, cap, &len, err);
        if (rc == CHUTE_OK) {
            *out = buf;
            *out_len = len;
            return CHUTE_OK;
        }
        if (rc != CH_ESMALL) {
            free(buf);
            if (rc == CHUTE_ENOTFOUND)
                return ch_err(err, CHUTE_EFORMAT,
                              "%s: cannot open the dataset manifest (not a complete chute shard "
                              "directory; was 'chute pack' interrupted?)",
                              path);
            return rc;
        }
        if (len > CH_MANIFEST_MAX_BYTES) {
            free(buf);
            return ch_err(err, CHUTE_ELIMIT, "%s: %zu bytes is larger than a manifest may be (%u)",
                          path, len, CH_MANIFEST_MAX_BYTES);
        }
        cap = len + 1; /* the file grew: read again at its new size */
    }
    free(buf);
    return ch_err(err, CHUTE_EIO, "%s: keeps changing size while being read", path);
}

/* ------------------------------------------------------------------ */
/* The shard-directory format and its open-file cache                  */
/* ------------------------------------------------------------------ */

/* Shards are read through the bounded cache of open files in fcache.c
 * (its header says why and how it locks). */

typedef struct shard_file {
    char *path;
    char *name;
    uint64_t want_count, want_size; /* from the manifest */
    ch_shard_index ix;
} shard_file;

typedef struct shards_impl {
    uint32_t nshards;
    shard_file *shards;
    uint32_t *sample_shard;   /* sample -> shard */
    uint64_t *shard_first;    /* first global sample of each shard */
    const ch_source_ops *src;
    ch_fcache cache;
} shards_impl;

int ch_shards_cache_stats(const chute_dataset *ds, ch_shard_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!ds || ds->fmt != &ch_format_shards || !ds->impl)
        return CHUTE_EINVAL;
    shards_impl *s = ds->impl;
    ch_fcache_stats(&s->cache, out);
    return CHUTE_OK;
}

static void locate(const chute_dataset *ds, uint64_t i, const shard_file **sf,
                   const ch_shard_entry **e, uint64_t *local)
{
    const shards_impl *s = ds->impl;
    uint32_t k = s->sample_shard[i];
    *sf = &s->shards[k];
    *local = i - s->shard_first[k];
    *e = &(*sf)->ix.entries[*local];
}

static int shards_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                       chute_error *err)
{
    shards_impl *s = ds->impl;
    uint32_t k = s->sample_shard[i];
    const shard_file *sf = &s->shards[k];
    uint64_t local = i - s->shard_first[k];
    const ch_shard_entry *e = &sf->ix.entries[local];
    *out_len = e->length;
    if (e->length > cap)
        return CH_ESMALL;
    void *h = NULL;
    int transient = 0;
    int rc = ch_fcache_acquire(&s->cache, k, &h, &transient, err);
    if (rc)
        return rc;
    rc = s->src->read_at(h, sf->path, e->offset, buf, e->length, err);
    ch_fcache_release(&s->cache, k, h, transient);
    if (rc)
        return rc;
    if (ch_crc32(buf, e->length) != e->crc32)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: record %llu (%s) fails its checksum", sf->path,
                      (unsigned long long)e->offset, (unsigned long long)local, sf->ix.names[local]);
    return CHUTE_OK;
}

static uint64_t shards_sample_size(const chute_dataset *ds, uint64_t i)
{
    const shard_file *sf;
    const ch_shard_entry *e;
    uint64_t local;
    locate(ds, i, &sf, &e, &local);
    return e->length;
}

static void shards_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const shard_file *sf;
    const ch_shard_entry *e;
    uint64_t local;
    locate(ds, i, &sf, &e, &local);
    snprintf(buf, n, "%s@%llu (%s)", sf->path, (unsigned long long)e->offset, sf->ix.names[local]);
}

static void shards_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const shard_file *sf;
    const ch_shard_entry *e;
    uint64_t local;
    locate(ds, i, &sf, &e, &local);
    snprintf(buf, n, "%s", sf->path);
}

/* Unit of sample i for the shards shuffle mode: its shard. */
static uint64_t shards_unit_of(const chute_dataset *ds, uint64_t i)
{
    const shards_impl *s = ds->impl;
    return s->sample_shard[i];
}

static void shards_close(void *impl)
{
    shards_impl *s = impl;
    if (!s)
        return;
    ch_fcache_free(&s->cache);
    for (uint32_t k = 0; k < s->nshards; k++) {
        ch_shard_index_free(&s->shards[k].ix);
        free(s->shards[k].path);
        free(s->shards[k].name);
    }
    free(s->shards);
    free(s->sample_shard);
    free(s->shard_first);
    free(s);
}


typedef struct file_id {
    uint64_t dev;
    uint64_t ino;
    uint32_t k;
} file_id;

static int cmp_file_id(const void *a, const void *b)
{
    const file_id *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

/* Every listed shard must be a regular file in the directory itself: not
 * a symlink (which could lead anywhere), not the same file twice under
 * two names (a hard link; skipped where a filesystem reports inode 0).
 * Names were already checked to be bare. */
static int check_shard_files(const char *mpath, const ch_manifest *m, shards_impl *s,
                             chute_error *err)
{
    file_id *ids = malloc((size_t)s->nshards * sizeof *ids);
    if (!ids)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = CHUTE_OK;
    for (uint32_t k = 0; k < s->nshards && rc == CHUTE_OK; k++) {
        ch_stat st;
        chute_error e2;
        const char *p = s->shards[k].path;
        int src = ch_src_stat(s->src, p, &st, &e2);
        if (src != CHUTE_OK)
            rc = ch_err(err, src, "%s (listed on %s:%u)", e2.message, mpath, m->shards[k].line);
        else if (st.is_link)
            rc = ch_err(err, CHUTE_EFORMAT,
                        "%s: is a symbolic link; a manifest may only list regular files in its "
                        "own directory (%s:%u)",
                        p, mpath, m->shards[k].line);
        else if (st.type != CH_ENT_FILE)
            rc = ch_err(err, CHUTE_EFORMAT, "%s: not a regular file (%s:%u)", p, mpath,
                        m->shards[k].line);
        ids[k] = (file_id){rc == CHUTE_OK ? st.dev : 0, rc == CHUTE_OK ? st.ino : 0, k};
    }
    if (rc == CHUTE_OK && s->nshards > 1) {
        qsort(ids, s->nshards, sizeof *ids, cmp_file_id);
        for (uint32_t i = 1; i < s->nshards && rc == CHUTE_OK; i++)
            if (ids[i].ino != 0 && ids[i].dev == ids[i - 1].dev && ids[i].ino == ids[i - 1].ino)
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s:%u: %s is the same file as %s (line %u): a shard listed twice",
                            mpath, m->shards[ids[i].k].line, s->shards[ids[i].k].name,
                            s->shards[ids[i - 1].k].name, m->shards[ids[i - 1].k].line);
    }
    free(ids);
    return rc;
}

/* Open every shard once to read and check its index; the cache keeps
 * the first `cap` open. */
static int scan_shards(shards_impl *s, chute_error *err)
{
    for (uint32_t k = 0; k < s->nshards; k++) {
        shard_file *sf = &s->shards[k];
        uint64_t size = 0;
        void *h = NULL;
        s->cache.files[k].path = sf->path;
        int rc = ch_fcache_open_scan(&s->cache, k, &h, &size, err);
        if (rc)
            return rc;
        if (size != sf->want_size) {
            s->src->close(h);
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s: size %llu differs from the manifest's %llu (truncated or replaced)",
                          sf->path, (unsigned long long)size, (unsigned long long)sf->want_size);
        }
        rc = ch_shard_read_index(s->src, h, sf->path, size, &sf->ix, err);
        if (rc == CHUTE_OK && sf->ix.count != sf->want_count)
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: %llu samples but the manifest says %llu",
                        sf->path, (unsigned long long)sf->ix.count,
                        (unsigned long long)sf->want_count);
        if (rc) {
            s->src->close(h);
            return rc;
        }
        ch_fcache_keep(&s->cache, k, h, size);
    }
    ch_fcache_ready(&s->cache);
    return CHUTE_OK;
}

static int shards_open(chute_dataset *ds, const char *dir, const chute_dataset_options *opt,
                       chute_error *err)
{
    (void)opt;
    shards_impl *s = calloc(1, sizeof *s);
    if (!s)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    s->src = ds->src;
    ds->impl = s;

    char mpath[4096];
    if ((size_t)snprintf(mpath, sizeof mpath, "%s/%s", dir, CH_MANIFEST_NAME) >= sizeof mpath)
        return ch_err(err, CHUTE_EINVAL, "%s: path too long", dir);
    char *text = NULL;
    size_t len = 0;
    int rc = read_manifest(s->src, mpath, &text, &len, err);
    if (rc)
        return rc;
    ch_manifest m;
    rc = ch_manifest_parse(mpath, text, len, &m, err);
    free(text);
    if (rc)
        return rc;
    s->shards = calloc(m.nshards, sizeof *s->shards);
    if (!s->shards) {
        ch_manifest_free(&m);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %u shards", m.nshards);
    }
    s->nshards = m.nshards;
    for (uint32_t k = 0; k < m.nshards; k++) {
        shard_file *sf = &s->shards[k];
        sf->name = m.shards[k].name;
        m.shards[k].name = NULL;
        sf->want_count = m.shards[k].samples;
        sf->want_size = m.shards[k].bytes;
        if (asprintf(&sf->path, "%s/%s", dir, sf->name) < 0)
            sf->path = NULL;
        if (!sf->path) {
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
            break;
        }
    }
    if (rc == CHUTE_OK)
        rc = check_shard_files(mpath, &m, s, err);
    ch_manifest_free(&m);
    if (rc)
        return rc;

    rc = ch_fcache_init(&s->cache, s->src, s->nshards, err);
    if (rc)
        return rc;
    rc = scan_shards(s, err);
    if (rc)
        return rc;

    /* Sizes from here on come from the shards' checked indexes. */
    uint64_t total = 0;
    for (uint32_t k = 0; k < s->nshards; k++)
        total += s->shards[k].ix.count; /* each < 2^29 (index <= 16 GiB), nshards < 2^24 */
    if (total > SIZE_MAX / sizeof *s->sample_shard)
        return ch_err(err, CHUTE_ENOMEM, "%llu samples do not fit in memory",
                      (unsigned long long)total);
    s->shard_first = calloc(s->nshards, sizeof *s->shard_first);
    s->sample_shard = malloc(total * sizeof *s->sample_shard);
    ds->labels = malloc(total * sizeof *ds->labels);
    if (!s->shard_first || !s->sample_shard || !ds->labels)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu samples",
                      (unsigned long long)total);
    uint64_t at = 0;
    for (uint32_t k = 0; k < s->nshards; k++) {
        shard_file *sf = &s->shards[k];
        if (k == 0) {
            ds->nclasses = sf->ix.nclasses;
            ds->class_names = calloc(ds->nclasses ? ds->nclasses : 1, sizeof(char *));
            if (!ds->class_names)
                return ch_err(err, CHUTE_ENOMEM, "out of memory");
            for (uint32_t cl = 0; cl < ds->nclasses; cl++)
                if (!(ds->class_names[cl] = strdup(sf->ix.class_names[cl])))
                    return ch_err(err, CHUTE_ENOMEM, "out of memory");
        } else {
            int same = sf->ix.nclasses == ds->nclasses;
            for (uint32_t cl = 0; same && cl < ds->nclasses; cl++)
                same = strcmp(sf->ix.class_names[cl], ds->class_names[cl]) == 0;
            if (!same)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s: class table differs from the first shard's (mixed datasets?)",
                              sf->path);
        }
        s->shard_first[k] = at;
        for (uint64_t i = 0; i < sf->ix.count; i++, at++) {
            s->sample_shard[at] = k;
            ds->labels[at] = sf->ix.entries[i].label;
        }
    }
    ds->n = total;
    return CHUTE_OK;
}

/* A directory with a manifest is a shard directory: only pack writes one. */
static int shards_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                        size_t n)
{
    char m[4096];
    ch_stat st;
    chute_error e;
    if (!is_dir) {
        snprintf(why, n, "not a directory");
        return CH_PROBE_NO;
    }
    if ((size_t)snprintf(m, sizeof m, "%s/%s", path, CH_MANIFEST_NAME) >= sizeof m) {
        snprintf(why, n, "no %s", CH_MANIFEST_NAME);
        return CH_PROBE_NO;
    }
    int rc = ch_src_stat(src, m, &st, &e);
    /* Only "not found" means "not a shard directory".  Any other failure
     * (an I/O error after retries, a TLS server chute may not trust, a bad
     * remote setting) says nothing about the format: claim the directory,
     * so that open reads the manifest and reports that very error instead
     * of a later "no format recognises it" or "no directory listing". */
    if (rc != CHUTE_OK && rc != CHUTE_ENOTFOUND)
        return CH_PROBE_CERTAIN;
    if (rc != CHUTE_OK || (st.is_link && st.type == CH_ENT_OTHER)) {
        snprintf(why, n, "no %s", CH_MANIFEST_NAME);
        return CH_PROBE_NO;
    }
    return CH_PROBE_CERTAIN;
}

/* Read-ahead (format.h): the record's bytes, its handle pinned while the
 * read is in flight (the open-file cache must not close it under us). */
static int shards_locate(const chute_dataset *ds, uint64_t i, ch_locator *out, chute_error *err)
{
    shards_impl *s = ds->impl;
    uint32_t k = s->sample_shard[i];
    const shard_file *sf = &s->shards[k];
    const ch_shard_entry *e = &sf->ix.entries[i - s->shard_first[k]];
    int transient = 0;
    void *h = NULL;
    int rc = ch_fcache_acquire(&s->cache, k, &h, &transient, err);
    if (rc)
        return rc;
    out->h = h;
    out->path = sf->path;
    out->off = e->offset;
    out->len = e->length;
    out->file = k;
    out->pin = (uint32_t)transient;
    return CHUTE_OK;
}

static void shards_unlocate(const chute_dataset *ds, ch_locator *loc)
{
    ch_fcache_release(&((shards_impl *)ds->impl)->cache, (uint32_t)loc->file, loc->h, (int)loc->pin);
    loc->h = NULL;
}

static int shards_from_bytes(const chute_dataset *ds, uint64_t i, const uint8_t *raw, size_t len,
                             const uint8_t **out, size_t *out_len, chute_error *err)
{
    const shard_file *sf;
    const ch_shard_entry *e;
    uint64_t local;
    locate(ds, i, &sf, &e, &local);
    if (len != e->length)
        return ch_err(err, CHUTE_EIO, "%s@%llu: record %llu: read %zu bytes, expected %u",
                      sf->path, (unsigned long long)e->offset, (unsigned long long)local, len,
                      e->length);
    if (ch_crc32(raw, e->length) != e->crc32)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: record %llu (%s) fails its checksum", sf->path,
                      (unsigned long long)e->offset, (unsigned long long)local, sf->ix.names[local]);
    *out = raw;
    *out_len = len;
    return CHUTE_OK;
}

static int shards_targets(const chute_dataset *ds, uint64_t i, const uint8_t **rec, size_t *len,
                          char *what, size_t whatsz, chute_error *err)
{
    const shard_file *sf;
    const ch_shard_entry *e;
    uint64_t local;
    locate(ds, i, &sf, &e, &local);
    *rec = NULL;
    *len = 0;
    if (what)
        snprintf(what, whatsz, "%s (%s)", sf->path, sf->ix.names[local]);
    if (!sf->ix.tg)
        return CHUTE_OK;
    *rec = sf->ix.tg + sf->ix.tg_off[local];
    *len = (size_t)(sf->ix.tg_off[local + 1] - sf->ix.tg_off[local]);
    (void)err;
    return CHUTE_OK;
}

const ch_format_ops ch_format_shards = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "shards",
    .probe = shards_probe,
    .open = shards_open,
    .read = shards_read,
    .sample_size = shards_sample_size,
    .describe = shards_describe,
    .file_of = shards_file_of,
    .close = shards_close,
    .unit_of = shards_unit_of,
    .locate = shards_locate,
    .unlocate = shards_unlocate,
    .from_bytes = shards_from_bytes,
    .targets = shards_targets,
};
