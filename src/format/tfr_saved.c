/*
 * tfr_saved.c — reading, checking and writing chute's saved TFRecord
 * index (the layout and the reasons are in tfr_saved.h).
 *
 * The parser is the only part that sees bytes from disk, and it is a
 * pure function over memory so the fuzzer (tests/fuzz/fuzz_tfx.c) can
 * drive it.  Loading reads through the data's source (an index uploaded
 * beside remote data is found) and then the local index directory;
 * saving writes local files only, to a temporary name then renamed, so a
 * crash or a concurrent open never leaves a torn index under the real
 * name.
 */
#define _GNU_SOURCE
#include "tfr_saved.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define TFX_HEADER 40u
#define TFX_REC 32u
#define TFX_TRAILER 8u

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v)
{
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

static size_t keys_len(const ch_tfx_want *w)
{
    return strlen(w->image_key) + 1 + strlen(w->label_key) + 1;
}

int ch_tfx_push(ch_tfx *ix, const ch_tfx_rec *r)
{
    if (ix->count == ix->cap) {
        uint64_t nc = ix->cap ? ix->cap * 2 : 64;
        if (nc > SIZE_MAX / sizeof *ix->recs)
            return CHUTE_ENOMEM;
        ch_tfx_rec *v = realloc(ix->recs, (size_t)nc * sizeof *v);
        if (!v)
            return CHUTE_ENOMEM;
        ix->recs = v;
        ix->cap = nc;
    }
    ix->recs[ix->count++] = *r;
    return CHUTE_OK;
}

void ch_tfx_free(ch_tfx *ix)
{
    if (!ix)
        return;
    free(ix->recs);
    memset(ix, 0, sizeof *ix);
}

int ch_tfx_parse(const uint8_t *p, size_t n, const char *name, const ch_tfx_want *want,
                 ch_tfx *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    if (n < TFX_HEADER + TFX_TRAILER || memcmp(p, CH_TFX_MAGIC, 8) != 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s: not a chute TFRecord index (%zu bytes)", name, n);
    if (rd32(p + 8) != CH_TFX_VERSION)
        return ch_err(err, CHUTE_EFORMAT, "%s: index version %u, this chute writes %u", name,
                      rd32(p + 8), CH_TFX_VERSION);
    uint32_t k = rd32(p + 12);
    uint64_t kpad = ((uint64_t)k + 7) & ~(uint64_t)7;
    if (k < 2 || k > CH_TFX_MAX_KEYS || TFX_HEADER + kpad + TFX_TRAILER > n)
        return ch_err(err, CHUTE_ECORRUPT, "%s@12: key bytes %u do not fit", name, k);
    uint64_t body = n - TFX_HEADER - kpad - TFX_TRAILER;
    uint64_t count = rd64(p + 32);
    if (body % TFX_REC || count != body / TFX_REC)
        return ch_err(err, CHUTE_ECORRUPT, "%s@32: %llu records but %llu bytes of them "
                      "(truncated?)", name, (unsigned long long)count, (unsigned long long)body);
    const uint8_t *t = p + n - TFX_TRAILER;
    if (memcmp(t + 4, "TFXE", 4) != 0 || rd32(t) != ch_crc32c(0, p, n - TFX_TRAILER))
        return ch_err(err, CHUTE_ECORRUPT, "%s@%zu: checksum mismatch (damaged index)", name,
                      n - TFX_TRAILER);
    /* The keys: two NUL-terminated strings filling exactly k bytes. */
    const char *keys = (const char *)p + TFX_HEADER;
    const char *z1 = memchr(keys, '\0', k);
    if (!z1 || (size_t)(z1 - keys) + 1 >= k || keys[k - 1] != '\0' ||
        memchr(z1 + 1, '\0', k - (size_t)(z1 - keys) - 1) != keys + k - 1)
        return ch_err(err, CHUTE_ECORRUPT, "%s@40: malformed keys", name);
    for (uint64_t i = k; i < kpad; i++)
        if (p[TFX_HEADER + i])
            return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: nonzero padding", name,
                          (unsigned long long)(TFX_HEADER + i));
    if (strcmp(keys, want->image_key) != 0 || strcmp(z1 + 1, want->label_key) != 0)
        return ch_err(err, CHUTE_EFORMAT, "%s: made for keys \"%s\"/\"%s\", not \"%s\"/\"%s\"",
                      name, keys, z1 + 1, want->image_key, want->label_key);
    uint64_t size = rd64(p + 16);
    int64_t mtime = (int64_t)rd64(p + 24);
    if (size != want->data_size || mtime != want->mtime_ns)
        return ch_err(err, CHUTE_EFORMAT,
                      "%s: stale (made for a data file of %llu bytes, mtime %lld; it is now "
                      "%llu bytes, mtime %lld)",
                      name, (unsigned long long)size, (long long)mtime,
                      (unsigned long long)want->data_size, (long long)want->mtime_ns);
    if (count > size / FMT_TFR_OVERHEAD)
        return ch_err(err, CHUTE_ECORRUPT, "%s: %llu records cannot fit in %llu bytes", name,
                      (unsigned long long)count, (unsigned long long)size);
    if (count) {
        out->recs = malloc((size_t)count * sizeof *out->recs);
        if (!out->recs)
            return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %llu records", name,
                          (unsigned long long)count);
    }
    out->cap = count;
    const uint8_t *r = p + TFX_HEADER + kpad;
    uint64_t end = 0; /* where the previous record ended */
    for (uint64_t i = 0; i < count; i++, r += TFX_REC) {
        ch_tfx_rec x = {rd64(r), rd64(r + 8), (int64_t)rd64(r + 16), rd32(r + 24), rd32(r + 28)};
        uint64_t at = (uint64_t)(r - p);
        /* offset >= end, offset + 16 + length <= size, without overflow */
        if (x.offset < end || x.offset > size || x.length > size ||
            size - x.offset < FMT_TFR_OVERHEAD || x.length > size - x.offset - FMT_TFR_OVERHEAD ||
            x.image_len > x.length || x.bad > 1) {
            ch_tfx_free(out);
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: record %llu (offset %llu, length %llu) does not fit the "
                          "data file",
                          name, (unsigned long long)at, (unsigned long long)i,
                          (unsigned long long)x.offset, (unsigned long long)x.length);
        }
        end = x.offset + FMT_TFR_OVERHEAD + x.length;
        out->recs[out->count++] = x;
    }
    return CHUTE_OK;
}

int ch_tfx_format(const ch_tfx *ix, const ch_tfx_want *want, uint8_t **out, size_t *out_len,
                  chute_error *err)
{
    size_t k = keys_len(want);
    if (k > CH_TFX_MAX_KEYS)
        return ch_err(err, CHUTE_ELIMIT, "feature keys too long for an index");
    size_t kpad = (k + 7) & ~(size_t)7;
    if (ix->count > (SIZE_MAX - TFX_HEADER - kpad - TFX_TRAILER) / TFX_REC)
        return ch_err(err, CHUTE_ENOMEM, "index too large");
    size_t n = TFX_HEADER + kpad + (size_t)ix->count * TFX_REC + TFX_TRAILER;
    uint8_t *p = calloc(1, n);
    if (!p)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %zu-byte index", n);
    memcpy(p, CH_TFX_MAGIC, 8);
    wr32(p + 8, CH_TFX_VERSION);
    wr32(p + 12, (uint32_t)k);
    wr64(p + 16, want->data_size);
    wr64(p + 24, (uint64_t)want->mtime_ns);
    wr64(p + 32, ix->count);
    size_t a = strlen(want->image_key) + 1;
    memcpy(p + TFX_HEADER, want->image_key, a);
    memcpy(p + TFX_HEADER + a, want->label_key, k - a);
    uint8_t *r = p + TFX_HEADER + kpad;
    for (uint64_t i = 0; i < ix->count; i++, r += TFX_REC) {
        const ch_tfx_rec *x = &ix->recs[i];
        wr64(r, x->offset);
        wr64(r + 8, x->length);
        wr64(r + 16, (uint64_t)x->raw_label);
        wr32(r + 24, x->image_len);
        wr32(r + 28, x->bad);
    }
    wr32(p + n - TFX_TRAILER, ch_crc32c(0, p, n - TFX_TRAILER));
    memcpy(p + n - 4, "TFXE", 4);
    *out = p;
    *out_len = n;
    return CHUTE_OK;
}

/* FNV-1a of the path: the index directory's file name for it. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

int ch_tfx_cache_path(const char *path, const char *index_dir, char *buf, size_t n)
{
    char dir[PATH_MAX];
    if (index_dir) {
        if (!index_dir[0])
            return 0;
        snprintf(dir, sizeof dir, "%s", index_dir);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && xdg[0] == '/')
            snprintf(dir, sizeof dir, "%s/chute", xdg);
        else if (home && home[0])
            snprintf(dir, sizeof dir, "%s/.cache/chute", home);
        else
            return 0;
    }
    /* The key is the path as absolute as we can make it: a relative path
     * means different files from different working directories. */
    char absp[PATH_MAX];
    const char *key = path;
    if (!strstr(path, "://") && realpath(path, absp))
        key = absp;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int w = snprintf(buf, n, "%s/%016llx-%.64s%s", dir, (unsigned long long)fnv1a(key), base,
                     CH_TFX_SUFFIX);
    return w > 0 && (size_t)w < n;
}

static int load_from(const ch_source_ops *src, const char *ipath, const ch_tfx_want *want,
                     ch_tfx *out, chute_error *err)
{
    size_t len = 0;
    int rc = ch_src_read_file(src, ipath, NULL, 0, &len, err);
    if (rc == CHUTE_OK && len == 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s: empty", ipath);
    if (rc != CH_ESMALL)
        return rc == CHUTE_OK ? CHUTE_ECORRUPT : rc;
    if (len > ((uint64_t)1 << 40))
        return ch_err(err, CHUTE_ELIMIT, "%s: %zu bytes", ipath, len);
    uint8_t *buf = malloc(len);
    if (!buf)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", ipath);
    size_t got = 0;
    rc = ch_src_read_file(src, ipath, buf, len, &got, err);
    if (rc == CH_ESMALL)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: grew while read", ipath);
    if (rc == CHUTE_OK)
        rc = ch_tfx_parse(buf, got, ipath, want, out, err);
    free(buf);
    return rc;
}

int ch_tfx_load(const ch_source_ops *src, const char *path, const char *index_dir,
                const ch_tfx_want *want, ch_tfx *out, char *why, size_t why_n)
{
    char beside[PATH_MAX + 16], cached[PATH_MAX + 128];
    chute_error e = {0};
    if (why && why_n)
        why[0] = '\0';
    if ((size_t)snprintf(beside, sizeof beside, "%s%s", path, CH_TFX_SUFFIX) < sizeof beside &&
        load_from(src, beside, want, out, &e) == CHUTE_OK)
        return CHUTE_OK;
    if (why && why_n && e.code != CHUTE_ENOTFOUND)
        snprintf(why, why_n, "%s", e.message);
    if (ch_tfx_cache_path(path, index_dir, cached, sizeof cached)) {
        chute_error e2 = {0};
        if (load_from(&ch_source_local, cached, want, out, &e2) == CHUTE_OK)
            return CHUTE_OK;
        if (why && why_n && !why[0] && e2.code != CHUTE_ENOTFOUND)
            snprintf(why, why_n, "%s", e2.message);
    }
    return CHUTE_ENOTFOUND;
}

/* Write buf as `final` atomically: a unique temporary in the same
 * directory, fsync, rename.  CHUTE_EIO with errno kept in *out_errno. */
static int write_atomic(const char *final, const uint8_t *buf, size_t n, int *out_errno,
                        chute_error *err)
{
    char tmp[PATH_MAX + 160];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", final) >= sizeof tmp)
        return ch_err(err, CHUTE_EINVAL, "%s: path too long", final);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        *out_errno = errno;
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot create", tmp);
    }
    int rc = ch_write_all(fd, tmp, buf, n, err);
    if (rc == CHUTE_OK)
        (void)fchmod(fd, 0644); /* mkstemp's 0600 would hide it from other users */
    if (rc == CHUTE_OK && fsync(fd) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: fsync failed", tmp);
    if (close(fd) != 0 && rc == CHUTE_OK)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: close failed", tmp);
    if (rc == CHUTE_OK && rename(tmp, final) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: rename failed", tmp);
    if (rc != CHUTE_OK)
        unlink(tmp);
    return rc;
}

int ch_write_atomic(const char *final, const uint8_t *buf, size_t n, chute_error *err)
{
    int e = 0;
    return write_atomic(final, buf, n, &e, err);
}

int ch_tfx_save(const ch_source_ops *src, const char *path, const char *index_dir,
                const ch_tfx_want *want, const ch_tfx *ix, chute_error *err)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    int rc = ch_tfx_format(ix, want, &buf, &n, err);
    if (rc != CHUTE_OK)
        return rc;
    rc = CHUTE_ENOTFOUND;
    if (src == &ch_source_local) {
        char beside[PATH_MAX + 16];
        int e = 0;
        if ((size_t)snprintf(beside, sizeof beside, "%s%s", path, CH_TFX_SUFFIX) < sizeof beside)
            rc = write_atomic(beside, buf, n, &e, err);
    }
    if (rc != CHUTE_OK) {
        char cached[PATH_MAX + 128];
        if (ch_tfx_cache_path(path, index_dir, cached, sizeof cached)) {
            char dir[PATH_MAX + 128];
            snprintf(dir, sizeof dir, "%s", cached);
            char *slash = strrchr(dir, '/');
            if (slash && slash != dir)
                *slash = '\0';
            int e = 0;
            rc = ch_mkdir_p(dir, err);
            if (rc == CHUTE_OK)
                rc = write_atomic(cached, buf, n, &e, err);
        }
    }
    free(buf);
    return rc;
}

/* ---- compressed TFRecord files ---- */

int ch_tfx_compression(const uint8_t *p, size_t n)
{
    if (n < 2)
        return FMT_TFR_NONE;
    if (p[0] == 0x1f && p[1] == 0x8b)
        return FMT_TFR_GZIP;
    if ((p[0] & 0x0f) == 8 && (p[0] >> 4) <= 7 && ((unsigned)p[0] << 8 | p[1]) % 31 == 0)
        return FMT_TFR_ZLIB;
    return FMT_TFR_NONE;
}

int ch_tfx_inflate_head(const uint8_t *p, size_t n, int comp, uint8_t out[12])
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, comp == FMT_TFR_GZIP ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK)
        return 0;
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)(n > (1u << 30) ? (1u << 30) : n);
    z.next_out = out;
    z.avail_out = 12;
    int zr = inflate(&z, Z_SYNC_FLUSH);
    int ok = (zr == Z_OK || zr == Z_STREAM_END || zr == Z_BUF_ERROR) && z.avail_out == 0;
    inflateEnd(&z);
    return ok;
}

int ch_tfx_inflated_path(const char *path, const char *index_dir, uint64_t size,
                         int64_t mtime_ns, char *buf, size_t n)
{
    char idx[PATH_MAX + 128];
    if (!ch_tfx_cache_path(path, index_dir, idx, sizeof idx))
        return 0;
    /* idx is DIR/HASH-NAME.chuteidx: put size and mtime after the hash. */
    char *slash = strrchr(idx, '/');
    char *dash = slash ? strchr(slash, '-') : NULL;
    size_t sl = strlen(idx);
    if (!dash || sl < strlen(CH_TFX_SUFFIX))
        return 0;
    idx[sl - strlen(CH_TFX_SUFFIX)] = '\0';
    *dash = '\0';
    int w = snprintf(buf, n, "%s-%llu-%lld-%s.tfrecord", idx, (unsigned long long)size,
                     (long long)mtime_ns, dash + 1);
    return w > 0 && (size_t)w < n;
}

int ch_tfx_inflate(const ch_source_ops *src, void *h, const char *path, uint64_t size, int comp,
                   const char *copy, fmt_tfr_index *ix, chute_error *err)
{
    char dir[PATH_MAX + 128], tmp[PATH_MAX + 160];
    snprintf(dir, sizeof dir, "%s", copy);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir)
        *slash = '\0';
    int rc = ch_mkdir_p(dir, err);
    if (rc != CHUTE_OK)
        return rc;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", copy) >= sizeof tmp)
        return ch_err(err, CHUTE_EINVAL, "%s: path too long", copy);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot create the inflated copy of %s",
                            tmp, path);
    fmt_tfr_opts o = {0};
    rc = fmt_tfr_index_compressed_src(src, h, size, path, (fmt_tfr_compression)comp, &o, fd, ix,
                                      err);
    if (rc == CHUTE_OK)
        (void)fchmod(fd, 0644);
    if (rc == CHUTE_OK && fsync(fd) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: fsync failed", tmp);
    if (close(fd) != 0 && rc == CHUTE_OK)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: close failed", tmp);
    if (rc == CHUTE_OK && rename(tmp, copy) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: rename failed", tmp);
    if (rc != CHUTE_OK) {
        unlink(tmp);
        fmt_tfr_index_free(ix);
    }
    return rc;
}
