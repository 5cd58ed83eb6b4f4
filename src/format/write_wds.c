/*
 * write_wds.c — the "wds" writer: WebDataset tar shards.
 *
 * Why it is shaped so:
 *   - What webdataset's ShardWriter makes: POSIX ustar tars named
 *     shard-000000.tar, shard-000001.tar, ... (its "shard-%06d.tar"
 *     pattern), each closed once it reaches shard_size.  One sample is
 *     KEY.jpg (or .png/.bmp, by the image's real type) with the bytes
 *     unchanged, KEY.cls (the label plus label_offset as ASCII decimal, as
 *     webdataset encodes an int) and KEY.txt (the class name, so the names
 *     survive the trip: WebDataset has no other place for them).
 *   - KEY is the sample's position in the output, zero-padded to one width
 *     for the whole dataset (at least 6 digits), so keys sort in dataset
 *     order in every shard and across shards, and no key is a prefix of
 *     another; after key_prefix when one is given (a dataset written in
 *     pieces, one prefix per piece, "p00003-": keys unique dataset-wide).  Names are far below ustar's 100 bytes, so no pax or GNU
 *     long-name records are ever needed; every header carries a valid
 *     checksum, mode 0644, mtime 0 (the output is a function of the input
 *     alone), and each tar ends with the two zero blocks.
 */
#define _GNU_SOURCE
#include "writer.h"
#include "../codec/codec.h"

#include <stdio.h>
#include <string.h>

#define TAR_BLOCK 512

typedef struct wdsw {
    ch_writer_cfg cfg;
    ch_outset out;
    int width;                /* key digits */
    uint32_t nfiles;
    int open;
} wdsw;

/* "shard-" DIGITS ".tar" */
static int wdsw_owns(const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, "shard-", 6) != 0 || n <= 10 || strcmp(name + n - 4, ".tar") != 0)
        return 0;
    for (const char *p = name + 6; p < name + n - 4; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

static int wdsw_open(const ch_writer_cfg *cfg, void **out, chute_error *err)
{
    wdsw *w = calloc(1, sizeof *w);
    if (!w)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    w->cfg = *cfg;
    ch_outset_init(&w->out, cfg->dir);
    w->width = 6;
    for (uint64_t t = cfg->total; t >= 1000000; t /= 10)
        w->width++;
    *out = w;
    return CHUTE_OK;
}

static int put_member(wdsw *w, const char *name, const void *data, size_t len, chute_error *err)
{
    if (len > 077777777777ull) /* 11 octal digits: 8 GiB - 1 */
        return ch_err(err, CHUTE_ELIMIT, "%s: %zu bytes is over a ustar member's limit", name,
                      len);
    uint8_t h[TAR_BLOCK];
    memset(h, 0, sizeof h);
    size_t nl = strlen(name);
    if (nl >= 100)
        return ch_err(err, CHUTE_EINVAL, "internal: tar member name '%s' too long", name);
    memcpy(h, name, nl);
    memcpy(h + 100, "0000644", 7);          /* mode */
    memcpy(h + 108, "0000000", 7);          /* uid */
    memcpy(h + 116, "0000000", 7);          /* gid */
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)len);
    memcpy(h + 136, "00000000000", 11);     /* mtime */
    h[156] = '0';                           /* regular file */
    memcpy(h + 257, "ustar", 6);            /* magic "ustar\0" */
    memcpy(h + 263, "00", 2);               /* version */
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof h; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum); /* six digits, NUL, then the space left */
    h[155] = ' ';
    int rc = ch_outset_write(&w->out, h, sizeof h, err);
    if (rc == CHUTE_OK)
        rc = ch_outset_write(&w->out, data, len, err);
    static const uint8_t zeros[TAR_BLOCK];
    if (rc == CHUTE_OK && len % TAR_BLOCK)
        rc = ch_outset_write(&w->out, zeros, TAR_BLOCK - len % TAR_BLOCK, err);
    return rc;
}

static int end_tar(wdsw *w, chute_error *err)
{
    static const uint8_t zeros[2 * TAR_BLOCK];
    int rc = ch_outset_write(&w->out, zeros, sizeof zeros, err);
    if (rc == CHUTE_OK)
        rc = ch_outset_end(&w->out, err);
    w->open = 0;
    w->nfiles++;
    return rc;
}

static int wdsw_add(void *vw, const ch_writer_sample *s, chute_error *err)
{
    wdsw *w = vw;
    const char *ext = s->kind == CH_IMG_JPEG  ? "jpg"
                      : s->kind == CH_IMG_PNG ? "png"
                      : s->kind == CH_IMG_BMP ? "bmp"
                                              : NULL;
    if (!ext)
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "%s: WebDataset has no image field for this sample's type (jpg, png or bmp "
                      "only)",
                      s->origin ? s->origin : "sample");
    int rc;
    if (!w->open) {
        if ((rc = ch_outset_begin(&w->out, err)) != CHUTE_OK)
            return rc;
        w->open = 1;
    }
    /* the key: at most 64 (key_prefix, checked by the engine) + 20 digits */
    const char *kp = w->cfg.key_prefix ? w->cfg.key_prefix : "";
    char name[100], cls[32];
    snprintf(name, sizeof name, "%s%0*llu.%s", kp, w->width, (unsigned long long)s->index, ext);
    rc = put_member(w, name, s->data, s->len, err);
    int cl = snprintf(cls, sizeof cls, "%lld", (long long)s->label + w->cfg.label_offset);
    snprintf(name, sizeof name, "%s%0*llu.cls", kp, w->width, (unsigned long long)s->index);
    if (rc == CHUTE_OK)
        rc = put_member(w, name, cls, (size_t)cl, err);
    const char *cn = s->class_name ? s->class_name : "";
    snprintf(name, sizeof name, "%s%0*llu.txt", kp, w->width, (unsigned long long)s->index);
    if (rc == CHUTE_OK)
        rc = put_member(w, name, cn, strlen(cn), err);
    if (rc == CHUTE_OK && w->out.bytes >= w->cfg.shard_size)
        rc = end_tar(w, err);
    return rc;
}

static void wdsw_abort(void *vw)
{
    wdsw *w = vw;
    if (!w)
        return;
    ch_outset_free(&w->out);
    free(w);
}

static int wdsw_finish(void *vw, uint32_t *out_files, chute_error *err)
{
    wdsw *w = vw;
    int rc = w->open ? end_tar(w, err) : CHUTE_OK;
    for (uint32_t k = 0; rc == CHUTE_OK && k < w->nfiles; k++) {
        char name[64];
        snprintf(name, sizeof name, "shard-%06u.tar", k);
        rc = ch_outset_publish(&w->out, k, name, err);
    }
    if (rc == CHUTE_OK)
        *out_files = w->nfiles;
    wdsw_abort(w);
    return rc;
}

const ch_writer_ops ch_writer_wds = {
    .name = "wds",
    .reader = "wds",
    .owns = wdsw_owns,
    .open = wdsw_open,
    .add = wdsw_add,
    .finish = wdsw_finish,
    .abort = wdsw_abort,
};
