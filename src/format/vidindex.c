/*
 * vidindex.c — the keyframe index of a video file: rows, presentation
 * order, the seek rule, and the saved form (vidindex.h has the layout).
 *
 * Why it is shaped this way: the decode side (fmt_video.c) needs three
 * questions answered without FFmpeg — which frame is the k-th shown, which
 * packet to seek to for it, and does this packet still match what was
 * indexed — and the saved form is hostile input like any other file, so
 * the parser lives here, apart from the decoder, where a fuzzer reaches
 * it.  Every count is checked against the bytes before anything is
 * allocated from it.
 */
#include "vidindex.h"

#include "../common/checksum.h"

#include <stdlib.h>
#include <string.h>

#define HDR 64u
#define ROW 32u
#define TAIL 8u

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}
static void wr64(uint8_t *p, uint64_t v)
{
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

int ch_vix_push(ch_vix *ix, const ch_vix_row *r, chute_error *err)
{
    if (ix->count == ix->cap) {
        if (ix->cap >= CH_VIX_MAX_FRAMES)
            return ch_err(err, CHUTE_ELIMIT, "more than %u video frames", CH_VIX_MAX_FRAMES);
        uint64_t nc = ix->cap ? ix->cap * 2 : 256;
        ch_vix_row *nr = realloc(ix->rows, (size_t)nc * sizeof *nr);
        if (!nr)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu index rows",
                          (unsigned long long)nc);
        ix->rows = nr;
        ix->cap = nc;
    }
    ix->rows[ix->count++] = *r;
    return CHUTE_OK;
}

void ch_vix_free(ch_vix *ix)
{
    if (!ix)
        return;
    free(ix->rows);
    free(ix->by_pts);
    free(ix->rank);
    free(ix->keys);
    memset(ix, 0, sizeof *ix);
}

/* Sorting rows by pts: the row numbers, compared through a context-free
 * qsort by sorting (pts, row) pairs. */
typedef struct pts_row {
    int64_t pts;
    uint32_t row;
} pts_row;

static int cmp_pts(const void *a, const void *b)
{
    const pts_row *x = a, *y = b;
    return x->pts < y->pts ? -1 : x->pts > y->pts;
}

int ch_vix_finish(ch_vix *ix, uint64_t size, const char *name, chute_error *err)
{
    if (ix->count == 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s: the video stream has no frames", name);
    if (ix->count > CH_VIX_MAX_FRAMES)
        return ch_err(err, CHUTE_ELIMIT, "%s: %llu frames, over %u", name,
                      (unsigned long long)ix->count, CH_VIX_MAX_FRAMES);
    if (ix->tb_num <= 0 || ix->tb_den <= 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s: time base %d/%d", name, ix->tb_num, ix->tb_den);
    size_t n = (size_t)ix->count;
    free(ix->by_pts);
    free(ix->rank);
    free(ix->keys);
    ix->by_pts = malloc(n * sizeof *ix->by_pts);
    ix->rank = malloc(n * sizeof *ix->rank);
    ix->keys = malloc(n * sizeof *ix->keys);
    pts_row *s = malloc(n * sizeof *s);
    if (!ix->by_pts || !ix->rank || !ix->keys || !s) {
        free(s);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %zu index rows", name, n);
    }
    ix->nkeys = 0;
    for (size_t k = 0; k < n; k++) {
        const ch_vix_row *r = &ix->rows[k];
        if (r->pts == INT64_MIN)
            return free(s), ch_err(err, CHUTE_ECORRUPT, "%s: frame %zu (decode order) has no "
                                   "presentation time", name, k);
        if (r->pos < -1 || (r->pos >= 0 && (uint64_t)r->pos >= size))
            return free(s), ch_err(err, CHUTE_ECORRUPT, "%s: frame %zu at byte %lld, past the "
                                   "file's %llu bytes", name, k, (long long)r->pos,
                                   (unsigned long long)size);
        if (r->flags & ~CH_VIX_KEY)
            return free(s), ch_err(err, CHUTE_ECORRUPT, "%s: frame %zu: unknown flags 0x%x", name,
                                   k, r->flags);
        if (r->flags & CH_VIX_KEY)
            ix->keys[ix->nkeys++] = (uint32_t)k;
        s[k].pts = r->pts;
        s[k].row = (uint32_t)k;
    }
    qsort(s, n, sizeof *s, cmp_pts);
    for (size_t k = 0; k < n; k++) {
        if (k && s[k].pts == s[k - 1].pts) {
            long long dup = (long long)s[k].pts;
            free(s);
            return ch_err(err, CHUTE_ECORRUPT, "%s: two frames with pts %lld", name, dup);
        }
        ix->by_pts[k] = s[k].row;
        ix->rank[s[k].row] = (uint32_t)k;
    }
    free(s);
    return CHUTE_OK;
}

uint32_t ch_vix_seek_row(const ch_vix *ix, uint64_t first, uint64_t last)
{
    if (first >= ix->count || last < first)
        return UINT32_MAX;
    if (last >= ix->count)
        last = ix->count - 1;
    uint32_t dmin = UINT32_MAX;
    for (uint64_t k = first; k <= last; k++)
        dmin = CH_MIN(dmin, ix->by_pts[k]);
    int64_t pmin = ix->rows[ix->by_pts[first]].pts; /* presentation order: first is earliest */
    /* The last keyframe row <= dmin: binary search, then back off past any
     * whose pts is later than pmin (an open GOP's leading pictures). */
    uint32_t lo = 0, hi = ix->nkeys; /* keys[lo..hi) */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ix->keys[mid] <= dmin)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo > 0) {
        uint32_t row = ix->keys[--lo];
        if (ix->rows[row].pts <= pmin)
            return row;
    }
    return UINT32_MAX;
}

int ch_vix_parse(const uint8_t *p, size_t n, const char *name, const ch_vix_want *want,
                 ch_vix *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    if (n < HDR + TAIL || memcmp(p, CH_VIX_MAGIC, 8) != 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s: not a chute video index (%zu bytes, no %s magic)",
                      name, n, CH_VIX_MAGIC);
    if (memcmp(p + n - 4, "VIXE", 4) != 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%zu: no VIXE end marker (truncated?)", name, n - 4);
    uint32_t crc = ch_crc32c(0, p, n - TAIL);
    if (crc != rd32(p + n - TAIL))
        return ch_err(err, CHUTE_ECORRUPT, "%s@%zu: CRC32C 0x%08x, stored 0x%08x", name,
                      n - TAIL, crc, rd32(p + n - TAIL));
    if (rd32(p + 8) != CH_VIX_VERSION)
        return ch_err(err, CHUTE_EFORMAT, "%s: index version %u, this chute writes %u", name,
                      rd32(p + 8), CH_VIX_VERSION);
    uint64_t count = rd64(p + 56);
    if (count > (n - HDR - TAIL) / ROW || count * ROW != n - HDR - TAIL)
        return ch_err(err, CHUTE_ECORRUPT, "%s@56: %llu rows in %zu bytes", name,
                      (unsigned long long)count, n);
    if (count == 0 || count > CH_VIX_MAX_FRAMES)
        return ch_err(err, CHUTE_ECORRUPT, "%s@56: %llu rows", name, (unsigned long long)count);
    uint64_t size = rd64(p + 16);
    int64_t mtime = (int64_t)rd64(p + 24);
    uint32_t head = rd32(p + 32);
    if (want && (size != want->size || mtime != want->mtime_ns || head != want->head_crc))
        return ch_err(err, CHUTE_EFORMAT, "%s: stale: indexed a file of %llu bytes, mtime %lld, "
                      "head CRC 0x%08x; it is now %llu bytes, mtime %lld, head CRC 0x%08x", name,
                      (unsigned long long)size, (long long)mtime, head,
                      (unsigned long long)want->size, (long long)want->mtime_ns, want->head_crc);
    out->stream = rd32(p + 12);
    out->codec_id = (int32_t)rd32(p + 36);
    out->width = rd32(p + 40);
    out->height = rd32(p + 44);
    out->tb_num = (int32_t)rd32(p + 48);
    out->tb_den = (int32_t)rd32(p + 52);
    if (out->width == 0 || out->height == 0 || out->width > 65536 || out->height > 65536)
        return ch_err(err, CHUTE_ECORRUPT, "%s@40: frame size %ux%u", name, out->width,
                      out->height);
    out->rows = malloc((size_t)count * sizeof *out->rows);
    if (!out->rows)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %llu rows", name,
                      (unsigned long long)count);
    out->count = out->cap = count;
    for (uint64_t k = 0; k < count; k++) {
        const uint8_t *q = p + HDR + k * ROW;
        ch_vix_row *r = &out->rows[k];
        r->pts = (int64_t)rd64(q);
        r->dts = (int64_t)rd64(q + 8);
        r->pos = (int64_t)rd64(q + 16);
        r->size = rd32(q + 24);
        r->flags = rd32(q + 28);
    }
    int rc = ch_vix_finish(out, size, name, err);
    if (rc != CHUTE_OK)
        ch_vix_free(out);
    return rc;
}

int ch_vix_format(const ch_vix *ix, const ch_vix_want *want, uint8_t **out, size_t *out_len,
                  chute_error *err)
{
    if (ix->count == 0 || ix->count > CH_VIX_MAX_FRAMES)
        return ch_err(err, CHUTE_EINVAL, "an index of %llu rows", (unsigned long long)ix->count);
    size_t n = HDR + (size_t)ix->count * ROW + TAIL;
    uint8_t *p = calloc(1, n);
    if (!p)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %zu-byte index", n);
    memcpy(p, CH_VIX_MAGIC, 8);
    wr32(p + 8, CH_VIX_VERSION);
    wr32(p + 12, ix->stream);
    wr64(p + 16, want->size);
    wr64(p + 24, (uint64_t)want->mtime_ns);
    wr32(p + 32, want->head_crc);
    wr32(p + 36, (uint32_t)ix->codec_id);
    wr32(p + 40, ix->width);
    wr32(p + 44, ix->height);
    wr32(p + 48, (uint32_t)ix->tb_num);
    wr32(p + 52, (uint32_t)ix->tb_den);
    wr64(p + 56, ix->count);
    for (uint64_t k = 0; k < ix->count; k++) {
        uint8_t *q = p + HDR + k * ROW;
        const ch_vix_row *r = &ix->rows[k];
        wr64(q, (uint64_t)r->pts);
        wr64(q + 8, (uint64_t)r->dts);
        wr64(q + 16, (uint64_t)r->pos);
        wr32(q + 24, r->size);
        wr32(q + 28, r->flags);
    }
    wr32(p + n - TAIL, ch_crc32c(0, p, n - TAIL));
    memcpy(p + n - 4, "VIXE", 4);
    *out = p;
    *out_len = n;
    return CHUTE_OK;
}
