/*
 * fmt_wds.c — the "wds" format: WebDataset tar shards.
 *
 * Why it is shaped so:
 *   - A dataset is a directory of *.tar shards, in name order, or one tar.
 *     The probe reads the first shard's first header block and accepts it
 *     only if the tar walker does (checksum included), so a directory
 *     holding some stray .tar is not taken for WebDataset unless that tar
 *     is a tar.
 *   - Open walks each shard's headers once (parse.h: ustar, pax, GNU long
 *     names) and groups members into samples as webdataset does (key =
 *     name up to the first dot of the basename).  The image is the first
 *     present of the jpg, jpeg, png, bmp fields (case-insensitive, as the
 *     grouper lowercases nothing: webdataset lowercases, and so do we when
 *     comparing); the label is the `.cls` member, ASCII decimal (webdataset
 *     writes str(int)), read at open since every label is needed up front.
 *   - A sample without an image or a readable label, with a duplicated
 *     field, or whose key also names another sample in the shard (a
 *     "split" key), stays in the
 *     dataset and fails when read, CHUTE_ECORRUPT naming the shard, the
 *     sample's header offset and its key: the loader's corrupt-sample
 *     policy skips or fails it.  So does a sample with a field twice
 *     (webdataset raises ValueError on it).
 *   - read() is one positional read of the image member through the
 *     source, on a handle from the bounded cache of open files (fcache.h:
 *     all shards stay open when they fit in half of RLIMIT_NOFILE).
 *   - Class names are synthesised "0".."N-1", N = largest label + 1.
 */
#define _GNU_SOURCE
#include "format.h"
#include "parse.h"
#include "fcache.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { WDS_OK = 0, WDS_NO_IMAGE = 1, WDS_NO_LABEL = 2, WDS_BAD_LABEL = 3, WDS_SPLIT = 4,
       WDS_DUPLICATE = 5 };

typedef struct wds_sample {
    uint64_t offset;          /* image member's data (or the sample's first header) */
    uint64_t size;            /* image member's size */
    uint64_t header;          /* the sample's first member header offset */
    uint32_t file;
    uint32_t bad;             /* WDS_* */
    char *key;                /* for messages */
} wds_sample;

typedef struct wds_impl {
    const ch_source_ops *src;
    ch_ds_file *files;
    size_t nfiles;
    wds_sample *samples;
    uint64_t n;
    ch_fcache fc;             /* the shards' handles, at most RLIMIT_NOFILE/2 open */
} wds_impl;

static int wds_name(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && strcasecmp(name + n - 4, ".tar") == 0;
}

static int tar_header_ok(const ch_source_ops *src, const char *path)
{
    void *h = NULL;
    uint64_t size = 0;
    chute_error e = {0};
    if (src->open(path, &h, &size, &e) != CHUTE_OK)
        return 0;
    uint8_t blk[512];
    int ok = size >= sizeof blk &&
             src->read_at(h, path, 0, blk, sizeof blk, &e) == CHUTE_OK;
    src->close(h);
    if (!ok)
        return 0;
    fmt_reader r;
    fmt_reader_mem(&r, blk, sizeof blk, path);
    fmt_tar_index ix = {0};
    int rc = fmt_tar_index_build(&r, NULL, &ix, &e);
    fmt_tar_index_free(&ix);
    /* One block cannot hold a member's data: "truncated" (CORRUPT) past a
     * good first header is still a tar; EFORMAT is not. */
    return rc != CHUTE_EFORMAT && !(rc == CHUTE_OK && ix.count == 0 && blk[0] == 0);
}

static int wds_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                     size_t n)
{
    if (!is_dir)
        return tar_header_ok(src, path) ? CH_PROBE_LIKELY
                                   : (snprintf(why, n, "not a tar file"), CH_PROBE_NO);
    char **v = NULL;
    size_t nv = 0;
    chute_error e = {0};
    if (ch_path_list(src, path, wds_name, &v, &nv, &e) != CHUTE_OK || nv == 0) {
        ch_path_list_free(v, nv);
        snprintf(why, n, "no *.tar files");
        return CH_PROBE_NO;
    }
    int ok = tar_header_ok(src, v[0]);
    if (!ok)
        snprintf(why, n, "%s: not a tar file", v[0]);
    ch_path_list_free(v, nv);
    return ok ? CH_PROBE_LIKELY : CH_PROBE_NO;
}

static const char *const k_image_fields[] = {"jpg", "jpeg", "png", "bmp"};

/* ASCII decimal, optional sign, surrounding whitespace allowed. */
static int parse_cls(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    int neg = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        neg = s[i++] == '-';
    size_t d0 = i;
    int64_t v = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (s[i++] - '0');
    }
    if (i == d0)
        return -1;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    if (i != n)
        return -1;
    *out = neg ? -v : v;
    return 0;
}

/* Fill samples for one shard; grows t->samples and ds->labels. */
static int index_shard(chute_dataset *ds, wds_impl *t, uint32_t fi, uint64_t *cap,
                       const chute_dataset_options *opt, int64_t *maxlabel, chute_error *err)
{
    ch_ds_file *f = &t->files[fi];
    uint64_t size = 0;
    t->fc.files[fi].path = f->path;
    int rc = ch_fcache_open_scan(&t->fc, fi, &f->h, &size, err);
    if (rc != CHUTE_OK)
        return rc;
    fmt_reader r;
    fmt_tar_index tar = {0};
    fmt_wds_index w = {0};
    rc = fmt_reader_source(&r, t->src, f->h, size, 0, f->path, err);
    if (rc == CHUTE_OK)
        rc = fmt_tar_index_build(&r, NULL, &tar, err);
    fmt_reader_free(&r);
    if (rc == CHUTE_OK)
        rc = fmt_wds_group(&tar, FMT_WDS_LENIENT, f->path, &w, err);
    if (rc == CHUTE_OK && w.count > *cap - t->n) {
        uint64_t nc = CH_MAX(*cap * 2, t->n + w.count);
        wds_sample *ns = nc > SIZE_MAX / sizeof *ns ? NULL : realloc(t->samples, nc * sizeof *ns);
        int32_t *nl = nc > SIZE_MAX / sizeof *nl ? NULL : realloc(ds->labels, nc * sizeof *nl);
        if (ns)
            t->samples = ns;
        if (nl)
            ds->labels = nl;
        if (!ns || !nl)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %llu samples",
                        (unsigned long long)nc);
        else
            *cap = nc;
    }
    for (uint64_t k = 0; rc == CHUTE_OK && k < w.count; k++) {
        const fmt_wds_sample *ws = &w.samples[k];
        const fmt_tar_member *first = &tar.m[w.fields[ws->first_field].member];
        wds_sample *s = &t->samples[t->n];
        memset(s, 0, sizeof *s);
        s->file = fi;
        s->header = first->header_offset;
        s->key = strndup(fmt_tar_name(&tar, w.fields[ws->first_field].member), ws->key_len);
        if (!s->key) {
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
            break;
        }
        ds->labels[t->n] = 0;
        t->n++;
        const fmt_tar_member *img = NULL, *cls = NULL;
        size_t img_rank = sizeof k_image_fields / sizeof *k_image_fields;
        for (uint64_t j = 0; j < ws->nfields; j++) {
            const fmt_wds_field *fd = &w.fields[ws->first_field + j];
            const fmt_tar_member *m = &tar.m[fd->member];
            const char *ext = fmt_tar_name(&tar, fd->member) + fd->ext_off;
            for (size_t q = 0; q < img_rank; q++)
                if (fd->ext_len == strlen(k_image_fields[q]) &&
                    strncasecmp(ext, k_image_fields[q], fd->ext_len) == 0) {
                    img = m;
                    img_rank = q;
                }
            if (fd->ext_len == 3 && strncasecmp(ext, "cls", 3) == 0 && !cls)
                cls = m;
        }
        if (ws->flags & FMT_WDS_SPLIT) {
            s->bad = WDS_SPLIT;
            continue;
        }
        /* The grouper (LENIENT) dropped duplicate fields: every keyed member
         * between this sample's first and the next sample's first is this
         * sample's, so more of them than fields means a duplicate. */
        uint64_t m0 = w.fields[ws->first_field].member;
        uint64_t m1 = k + 1 < w.count ? w.fields[w.samples[k + 1].first_field].member : tar.count;
        uint64_t keyed = 0;
        for (uint64_t m = m0; m < m1; m++) {
            size_t kl, eo;
            const char *mn = fmt_tar_name(&tar, m);
            keyed += !fmt_wds_is_meta(mn, tar.m[m].name_len) &&
                     fmt_wds_split_name(mn, tar.m[m].name_len, &kl, &eo);
        }
        if (keyed > ws->nfields) {
            s->bad = WDS_DUPLICATE;
            continue;
        }
        if (!img) {
            s->bad = WDS_NO_IMAGE;
            continue;
        }
        s->offset = img->data_offset;
        s->size = img->size;
        if (!cls) {
            s->bad = WDS_NO_LABEL;
            continue;
        }
        char text[32];
        int64_t raw = 0;
        if (cls->size >= sizeof text) {
            s->bad = WDS_BAD_LABEL;
            continue;
        }
        rc = t->src->read_at(f->h, f->path, cls->data_offset, text, (size_t)cls->size, err);
        if (rc != CHUTE_OK)
            break;
        if (parse_cls(text, (size_t)cls->size, &raw) != 0) {
            s->bad = WDS_BAD_LABEL;
            continue;
        }
        char where[4400];
        snprintf(where, sizeof where, "%s@%llu: sample \"%s\"", f->path,
                 (unsigned long long)cls->header_offset, s->key);
        rc = ch_ds_label(raw, opt, where, &ds->labels[t->n - 1], err);
        if (rc == CHUTE_OK && ds->labels[t->n - 1] > *maxlabel)
            *maxlabel = ds->labels[t->n - 1];
    }
    fmt_wds_index_free(&w);
    fmt_tar_index_free(&tar);
    if (rc == CHUTE_OK) { /* the cache holds or closes it from here */
        ch_fcache_keep(&t->fc, fi, f->h, size);
        f->h = NULL;
    }
    return rc;
}

static int wds_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                    chute_error *err)
{
    wds_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = t;
    t->src = ds->src;
    int rc = ch_ds_files_list(ds->src, path, wds_name, "WebDataset shards (*.tar)", &t->files, &t->nfiles, err);
    if (rc == CHUTE_OK)
        rc = ch_fcache_init(&t->fc, t->src, (uint32_t)t->nfiles, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t cap = 0;
    int64_t maxlabel = -1;
    for (uint32_t fi = 0; fi < t->nfiles && rc == CHUTE_OK; fi++)
        rc = index_shard(ds, t, fi, &cap, opt, &maxlabel, err);
    ch_fcache_ready(&t->fc);
    ds->n = t->n;
    if (rc != CHUTE_OK)
        return rc;
    if (t->n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no samples in %zu shard%s", path, t->nfiles,
                      t->nfiles == 1 ? "" : "s");
    if (maxlabel < 0)
        return ch_err(err, CHUTE_EFORMAT,
                      "%s: no sample has both an image (.jpg/.jpeg/.png/.bmp) and a .cls label",
                      path);
    return ch_ds_synth_classes(ds, (uint32_t)(maxlabel + 1), err);
}

static int wds_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                    chute_error *err)
{
    const wds_impl *t = ds->impl;
    const wds_sample *s = &t->samples[i];
    const ch_ds_file *f = &t->files[s->file];
    static const char *const why[] = {
        "", "no image member (.jpg, .jpeg, .png or .bmp)", "no .cls label member",
        "the .cls member is not a decimal integer", "its key also names another sample in the shard",
        "a field appears twice (webdataset refuses such a sample)"};
    if (s->bad)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: sample \"%s\": %s", f->path,
                      (unsigned long long)s->header, s->key, why[s->bad]);
    if (s->size > cap) {
        *out_len = (size_t)s->size;
        return CH_ESMALL;
    }
    *out_len = (size_t)s->size;
    void *h = NULL;
    int transient = 0;
    int rc = ch_fcache_acquire((ch_fcache *)&t->fc, s->file, &h, &transient, err);
    if (rc != CHUTE_OK)
        return rc;
    rc = t->src->read_at(h, f->path, s->offset, buf, (size_t)s->size, err);
    ch_fcache_release((ch_fcache *)&t->fc, s->file, h, transient);
    return rc;
}

static uint64_t wds_sample_size(const chute_dataset *ds, uint64_t i)
{
    const wds_impl *t = ds->impl;
    return t->samples[i].size;
}

static void wds_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const wds_impl *t = ds->impl;
    const wds_sample *s = &t->samples[i];
    snprintf(buf, n, "%s@%llu:%s", t->files[s->file].path, (unsigned long long)s->header, s->key);
}

static void wds_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const wds_impl *t = ds->impl;
    snprintf(buf, n, "%s", t->files[t->samples[i].file].path);
}

static void wds_close(void *impl)
{
    wds_impl *t = impl;
    if (!t)
        return;
    ch_fcache_free(&t->fc);
    ch_ds_files_close(t->src, t->files, t->nfiles);
    for (uint64_t i = 0; i < t->n; i++)
        free(t->samples[i].key);
    free(t->samples);
    free(t);
}

const ch_format_ops ch_format_wds = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "wds",
    .probe = wds_probe,
    .open = wds_open,
    .read = wds_read,
    .sample_size = wds_sample_size,
    .describe = wds_describe,
    .file_of = wds_file_of,
    .close = wds_close,
};
