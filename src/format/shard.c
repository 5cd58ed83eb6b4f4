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

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

uint32_t ch_crc32(const void *data, size_t len)
{
    uLong c = crc32(0L, Z_NULL, 0);
    const uint8_t *p = data;
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)c;
}

int ch_packfile_kind(const char *name, unsigned *out_index)
{
    size_t len = strlen(name);
    unsigned k;
    char tail[16];
    if (strcmp(name, CH_MANIFEST_NAME ".tmp") == 0 ||
        (strncmp(name, "shard-", 6) == 0 && len > 4 && strcmp(name + len - 4, ".tmp") == 0))
        return CH_PACKFILE_TEMP;
    if (sscanf(name, "shard-%u.%15s", &k, tail) == 2 && strcmp(tail, "chute") == 0) {
        if (out_index)
            *out_index = k;
        return CH_PACKFILE_SHARD;
    }
    return CH_PACKFILE_OTHER;
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
    w->count++;
    w->pos += (uint64_t)len + pad;
    w->data_bytes += len;
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
    uint32_t align = get_u32(t + 40);
    if (ioff > toff || isz != toff - ioff || count > isz / CH_SHARD_ENTRY_BYTES ||
        isz > (1ull << 34))
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
    for (uint64_t i = 0; i < count; i++, p += CH_SHARD_ENTRY_BYTES) {
        ch_shard_entry *e = &out->entries[i];
        e->offset = get_u64(p);
        e->length = get_u32(p + 8);
        e->crc32 = get_u32(p + 12);
        e->label = (int32_t)get_u32(p + 16);
        e->kind = get_u32(p + 20);
        if (e->offset < CH_SHARD_HEADER_BYTES || e->offset > ioff ||
            e->length > ioff - e->offset) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s@%llu: index entry %llu points outside the data region", path,
                        (unsigned long long)(ioff + i * CH_SHARD_ENTRY_BYTES),
                        (unsigned long long)i);
            break;
        }
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
    free(ix);
    if (rc)
        ch_shard_index_free(out);
    return rc;
}

/* ------------------------------------------------------------------ */
/* The shard-directory format                                          */
/* ------------------------------------------------------------------ */

typedef struct shard_file {
    char *path;
    char *name;
    void *h;
    ch_shard_index ix;
} shard_file;

typedef struct shards_impl {
    uint32_t nshards;
    shard_file *shards;
    uint32_t *sample_shard;   /* sample -> shard */
    uint64_t *shard_first;    /* first global sample of each shard */
    const ch_source_ops *src;
} shards_impl;

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
    const shard_file *sf;
    const ch_shard_entry *e;
    uint64_t local;
    locate(ds, i, &sf, &e, &local);
    *out_len = e->length;
    if (e->length > cap)
        return CH_ESMALL;
    int rc = ds->src->read_at(sf->h, sf->path, e->offset, buf, e->length, err);
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

static void shards_close(void *impl)
{
    shards_impl *s = impl;
    if (!s)
        return;
    for (uint32_t k = 0; k < s->nshards; k++) {
        if (s->shards[k].h)
            s->src->close(s->shards[k].h);
        ch_shard_index_free(&s->shards[k].ix);
        free(s->shards[k].path);
        free(s->shards[k].name);
    }
    free(s->shards);
    free(s->sample_shard);
    free(s->shard_first);
    free(s);
}

static const ch_format_ops k_shards_ops = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "shards",
    .read = shards_read,
    .sample_size = shards_sample_size,
    .describe = shards_describe,
    .file_of = shards_file_of,
    .close = shards_close,
};

/* Manifest: "chute-dataset 1\n" then "shard NAME SAMPLES BYTES\n" lines,
 * then "end SHARDS SAMPLES\n".  Written last by pack; its presence is what
 * makes a directory a dataset. */
static int parse_manifest(const char *dir, shards_impl *s, uint64_t *out_total, chute_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CH_MANIFEST_NAME);
    FILE *f = fopen(path, "re");
    if (!f)
        return ch_err_errno(err, errno == ENOENT ? CHUTE_EFORMAT : CHUTE_EIO, errno,
                            "%s: cannot open the dataset manifest (not a complete chute shard "
                            "directory; was 'chute pack' interrupted?)",
                            path);
    char line[4096];
    int rc = CHUTE_OK, ended = 0;
    uint32_t cap = 0;
    unsigned lineno = 0;
    uint64_t total = 0;
    if (!fgets(line, sizeof line, f) || strcmp(line, "chute-dataset 1\n") != 0)
        rc = ch_err(err, CHUTE_EFORMAT, "%s:1: not a chute manifest (version 1)", path);
    lineno = 1;
    while (rc == CHUTE_OK && fgets(line, sizeof line, f)) {
        lineno++;
        char name[1024];
        unsigned long long a, b;
        if (ended) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: text after the end line", path, lineno);
        } else if (sscanf(line, "shard %1023s %llu %llu", name, &a, &b) == 3) {
            if (strchr(name, '/') || name[0] == '.') {
                rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: bad shard name", path, lineno);
                break;
            }
            if (s->nshards == cap) {
                cap = cap ? cap * 2 : 16;
                shard_file *v = realloc(s->shards, cap * sizeof *v);
                if (!v) {
                    rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                    break;
                }
                s->shards = v;
            }
            shard_file *sf = &s->shards[s->nshards++];
            memset(sf, 0, sizeof *sf);
            sf->name = strdup(name);
            if (asprintf(&sf->path, "%s/%s", dir, name) < 0)
                sf->path = NULL;
            if (!sf->name || !sf->path)
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
            sf->ix.count = a; /* expected; checked against the shard below */
            sf->ix.file_size = b;
            total += a;
        } else if (sscanf(line, "end %llu %llu", &a, &b) == 2) {
            if (a != s->nshards || b != total)
                rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: end line disagrees with the shard lines",
                            path, lineno);
            ended = 1;
        } else {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s:%u: unrecognised line", path, lineno);
        }
    }
    fclose(f);
    if (rc == CHUTE_OK && !ended)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: manifest has no end line (truncated)", path);
    if (rc == CHUTE_OK && total == 0)
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: dataset has no samples", path);
    *out_total = total;
    return rc;
}

int ch_shards_open(chute_dataset *ds, const char *dir, chute_error *err)
{
    shards_impl *s = calloc(1, sizeof *s);
    if (!s)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    s->src = ds->src;
    ds->kind = CHUTE_SOURCE_SHARDS;
    ds->fmt = &k_shards_ops;
    ds->impl = s;
    uint64_t total = 0;
    int rc = parse_manifest(dir, s, &total, err);
    if (rc)
        return rc;
    s->shard_first = calloc(s->nshards, sizeof *s->shard_first);
    s->sample_shard = malloc(total * sizeof *s->sample_shard);
    ds->labels = malloc(total * sizeof *ds->labels);
    if (!s->shard_first || !s->sample_shard || !ds->labels)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu samples",
                      (unsigned long long)total);
    uint64_t at = 0;
    for (uint32_t k = 0; k < s->nshards; k++) {
        shard_file *sf = &s->shards[k];
        uint64_t want_count = sf->ix.count, want_size = sf->ix.file_size, size = 0;
        memset(&sf->ix, 0, sizeof sf->ix);
        rc = s->src->open(sf->path, &sf->h, &size, err);
        if (rc)
            return rc;
        if (size != want_size)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s: size %llu differs from the manifest's %llu (truncated or replaced)",
                          sf->path, (unsigned long long)size, (unsigned long long)want_size);
        rc = ch_shard_read_index(s->src, sf->h, sf->path, size, &sf->ix, err);
        if (rc)
            return rc;
        if (sf->ix.count != want_count)
            return ch_err(err, CHUTE_ECORRUPT, "%s: %llu samples but the manifest says %llu",
                          sf->path, (unsigned long long)sf->ix.count,
                          (unsigned long long)want_count);
        if (k == 0) {
            ds->nclasses = sf->ix.nclasses;
            ds->class_names = calloc(ds->nclasses ? ds->nclasses : 1, sizeof(char *));
            if (!ds->class_names)
                return ch_err(err, CHUTE_ENOMEM, "out of memory");
            for (uint32_t c = 0; c < ds->nclasses; c++)
                if (!(ds->class_names[c] = strdup(sf->ix.class_names[c])))
                    return ch_err(err, CHUTE_ENOMEM, "out of memory");
        } else {
            int same = sf->ix.nclasses == ds->nclasses;
            for (uint32_t c = 0; same && c < ds->nclasses; c++)
                same = strcmp(sf->ix.class_names[c], ds->class_names[c]) == 0;
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
