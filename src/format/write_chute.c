/*
 * write_chute.c — the "chute" writer: chute shards and their manifest
 * (docs/FORMAT.md), from any dataset.
 *
 * The same files chute_pack writes from a tree, through the same shard
 * writer (shard.c: each shard under "NAME.tmp", fsync'd and renamed when
 * complete) and the same manifest writer (pack.c).  The manifest is the
 * commit point: it is written last, so shards renamed before a crash
 * never open as a dataset.  Labels are stored as the source has them
 * (label_offset applies to the formats that store labels as numbers for
 * other tools); the source's class names become the shards' class table.
 */
#define _GNU_SOURCE
#include "writer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct chw {
    ch_writer_cfg cfg;
    ch_shard_writer *w;
    uint64_t *samples, *bytes;
    uint32_t n, cap;
} chw;

static int chw_owns(const char *name)
{
    unsigned k;
    return strcmp(name, CH_MANIFEST_NAME) == 0 || ch_packfile_kind(name, &k) == CH_PACKFILE_SHARD;
}

static int chw_open(const ch_writer_cfg *cfg, void **out, chute_error *err)
{
    chw *w = calloc(1, sizeof *w);
    if (!w)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    w->cfg = *cfg;
    *out = w;
    return CHUTE_OK;
}

static void shard_path(const chw *w, uint32_t k, char *buf, size_t n)
{
    snprintf(buf, n, "%s/shard-%05u.chute", w->cfg.dir, k);
}

static int close_shard(chw *w, chute_error *err)
{
    if (w->n == w->cap) {
        uint32_t c = w->cap ? w->cap * 2 : 16;
        uint64_t *s = realloc(w->samples, c * sizeof *s);
        if (s)
            w->samples = s;
        uint64_t *b = s ? realloc(w->bytes, c * sizeof *b) : NULL;
        if (!b)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        w->bytes = b;
        w->cap = c;
    }
    uint64_t count = ch_shard_writer_count(w->w);
    int rc = ch_shard_writer_finish(w->w, err);
    w->w = NULL;
    if (rc)
        return rc;
    char p[4096];
    shard_path(w, w->n, p, sizeof p);
    struct stat st;
    if (stat(p, &st) != 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot stat the new shard", p);
    w->samples[w->n] = count;
    w->bytes[w->n] = (uint64_t)st.st_size;
    w->n++;
    return CHUTE_OK;
}

static int chw_add(void *vw, const ch_writer_sample *s, chute_error *err)
{
    chw *w = vw;
    int rc;
    if (s->len > 0xFFFFFFFFu)
        return ch_err(err, CHUTE_ELIMIT, "%s: %zu bytes is over a shard record's limit",
                      s->origin, s->len);
    if (!w->w) {
        char p[4096];
        shard_path(w, w->n, p, sizeof p);
        rc = ch_shard_writer_open(p, w->cfg.align, w->cfg.nclasses, w->cfg.class_names, &w->w,
                                  err);
        if (rc)
            return rc;
    }
    /* The record's name: the sample's origin, as pack stores the tree's
     * relative path (describe strings of other formats are as good). */
    rc = ch_shard_writer_add(w->w, s->data, (uint32_t)s->len, s->label, (uint32_t)s->kind,
                             s->origin, err);
    if (rc == CHUTE_OK && ch_shard_writer_bytes(w->w) >= w->cfg.shard_size)
        rc = close_shard(w, err);
    return rc;
}

static void chw_abort(void *vw)
{
    chw *w = vw;
    if (!w)
        return;
    ch_shard_writer_abort(w->w);
    free(w->samples);
    free(w->bytes);
    free(w);
}

static int chw_finish(void *vw, uint32_t *out_files, chute_error *err)
{
    chw *w = vw;
    int rc = w->w ? close_shard(w, err) : CHUTE_OK;
    if (rc == CHUTE_OK)
        rc = ch_pack_write_manifest(w->cfg.dir, w->samples, w->bytes, w->n, err);
    if (rc == CHUTE_OK)
        *out_files = w->n;
    chw_abort(w);
    return rc;
}

const ch_writer_ops ch_writer_chute = {
    .name = "chute",
    .reader = "shards",
    .owns = chw_owns,
    .open = chw_open,
    .add = chw_add,
    .finish = chw_finish,
    .abort = chw_abort,
};
