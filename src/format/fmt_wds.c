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
    uint64_t first_fref;      /* typed fields: wds_impl.frefs[first_fref, +nfref) */
    uint32_t nfref;
} wds_sample;

/* Where one typed field of one sample lives (fields.h). */
typedef struct wds_fref {
    uint64_t offset;          /* member data */
    uint64_t size;
    uint32_t field;           /* into ds->fields */
} wds_fref;

typedef struct wds_impl {
    const ch_source_ops *src;
    ch_ds_file *files;
    size_t nfiles;
    wds_sample *samples;
    uint64_t n;
    wds_fref *frefs;          /* typed fields of every sample, in sample order */
    uint64_t nfrefs, cap_frefs;
    ch_fcache fc;             /* the shards' handles, at most RLIMIT_NOFILE/2 open */
    char first_bad_cls[640];  /* the first unreadable .cls: where, what it holds, why */
} wds_impl;

static int wds_name(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && strcasecmp(name + n - 4, ".tar") == 0;
}

static int tar_header_ok(const ch_source_ops *src, const char *path)
{
    chute_error e = {0};
    uint8_t blk[512];
    if (ch_src_read_head(src, path, blk, sizeof blk, &e) != CHUTE_OK)
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

static int note_fields(chute_dataset *ds, wds_impl *t, const fmt_tar_index *tar,
                       const fmt_wds_index *w, const fmt_wds_sample *ws, wds_sample *s,
                       chute_error *err);

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
        rc = note_fields(ds, t, &tar, &w, ws, s, err);
        if (rc != CHUTE_OK)
            break;
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
            if (!t->first_bad_cls[0])
                snprintf(t->first_bad_cls, sizeof t->first_bad_cls,
                         "%.400s@%llu: sample \"%.100s\": its .cls member is %llu bytes, too long "
                         "for an integer", f->path, (unsigned long long)cls->header_offset,
                         s->key, (unsigned long long)cls->size);
            continue;
        }
        rc = t->src->read_at(f->h, f->path, cls->data_offset, text, (size_t)cls->size, err);
        if (rc != CHUTE_OK)
            break;
        if (parse_cls(text, (size_t)cls->size, &raw) != 0) {
            s->bad = WDS_BAD_LABEL;
            if (!t->first_bad_cls[0]) {
                size_t k = 0, d = 0;
                while (k < (size_t)cls->size && (text[k] == '-' || text[k] == '+' ||
                                                  (text[k] >= '0' && text[k] <= '9') ||
                                                  text[k] == ' ' || text[k] == '\n'))
                    d += text[k++] >= '0';
                snprintf(t->first_bad_cls, sizeof t->first_bad_cls,
                         "%.400s@%llu: sample \"%.100s\": its .cls member \"%.*s\" is %s",
                         f->path, (unsigned long long)cls->header_offset, s->key,
                         (int)cls->size, text,
                         k == (size_t)cls->size && d
                             ? "outside the int64 range"
                             : "not a decimal integer (webdataset's .cls is ASCII digits)");
            }
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

static int learn_shapes(chute_dataset *ds, wds_impl *t, chute_error *err);

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
    if (rc == CHUTE_OK)
        rc = learn_shapes(ds, t, err);
    if (rc != CHUTE_OK)
        return rc;
    if (t->n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no samples in %zu shard%s", path, t->nfiles,
                      t->nfiles == 1 ? "" : "s");
    if (maxlabel < 0 && t->first_bad_cls[0])
        return ch_err(err, CHUTE_EFORMAT,
                      "%s: no sample has both an image and a readable .cls label; the first "
                      ".cls that could not be read: %s",
                      path, t->first_bad_cls);
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

/* Unit of sample i for the shards shuffle mode: its file. */
static uint64_t wds_unit_of(const chute_dataset *ds, uint64_t i)
{
    const wds_impl *t = ds->impl;
    return t->samples[i].file;
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
    free(t->frefs);
    free(t);
}

/* ---- typed fields ------------------------------------------------------
 * Every member of a sample other than an image (.jpg/.jpeg/.png/.bmp,
 * whichever the sample uses or not) is a field named by its extension,
 * lowercased, as webdataset names them: "cls" an int64 scalar (ASCII
 * decimal, the label's raw value, label_offset not applied), a name
 * ending in "npy" a tensor (dtype and shape from the first sample's .npy
 * whose header parses), anything else ("json", "txt", ...) bytes. */

static int is_image_ext(const char *ext, size_t n)
{
    for (size_t q = 0; q < sizeof k_image_fields / sizeof *k_image_fields; q++)
        if (n == strlen(k_image_fields[q]) && strncasecmp(ext, k_image_fields[q], n) == 0)
            return 1;
    return 0;
}

static int note_fields(chute_dataset *ds, wds_impl *t, const fmt_tar_index *tar,
                       const fmt_wds_index *w, const fmt_wds_sample *ws, wds_sample *s,
                       chute_error *err)
{
    s->first_fref = t->nfrefs;
    s->nfref = 0;
    for (uint64_t j = 0; j < ws->nfields; j++) {
        const fmt_wds_field *fd = &w->fields[ws->first_field + j];
        const char *ext = fmt_tar_name(tar, fd->member) + fd->ext_off;
        if (is_image_ext(ext, fd->ext_len))
            continue;
        char name[CH_FIELD_NAME_MAX];
        if (fd->ext_len >= sizeof name)
            return ch_err(err, CHUTE_ELIMIT, "%s: member \"%s\": field name longer than %d bytes",
                          t->files[s->file].path, fmt_tar_name(tar, fd->member),
                          CH_FIELD_NAME_MAX - 1);
        for (size_t c = 0; c < fd->ext_len; c++)
            name[c] = (char)((ext[c] >= 'A' && ext[c] <= 'Z') ? ext[c] + 32 : ext[c]);
        name[fd->ext_len] = '\0';
        int k = ch_ds_field_find(ds, name);
        if (k < 0) {
            size_t nl = fd->ext_len;
            int kind = fmt_wds_field_kind(name, nl);
            k = ch_ds_field_add(ds, name, nl, kind,
                                kind == CHUTE_FIELD_BYTES ? CHUTE_DTYPE_UINT8 : CHUTE_DTYPE_INT64,
                                err);
            if (k < 0)
                return err->code;
            if (kind == CHUTE_FIELD_INT64)
                ds->fields[k].known = 1; /* a scalar: ndim 0 */
        }
        if (t->nfrefs == t->cap_frefs) {
            uint64_t nc = t->cap_frefs ? t->cap_frefs * 2 : 1024;
            wds_fref *nf = nc > SIZE_MAX / sizeof *nf ? NULL : realloc(t->frefs, nc * sizeof *nf);
            if (!nf)
                return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu field references",
                              (unsigned long long)nc);
            t->frefs = nf;
            t->cap_frefs = nc;
        }
        const fmt_tar_member *m = &tar->m[fd->member];
        t->frefs[t->nfrefs++] = (wds_fref){m->data_offset, m->size, (uint32_t)k};
        s->nfref++;
    }
    return CHUTE_OK;
}

int fmt_wds_field_kind(const char *name, size_t nl)
{
    return nl == 3 && memcmp(name, "cls", 3) == 0                  ? CHUTE_FIELD_INT64
           : nl >= 3 && memcmp(name + nl - 3, "npy", 3) == 0 ? CHUTE_FIELD_TENSOR
                                                              : CHUTE_FIELD_BYTES;
}

int fmt_wds_field_decode(const ch_field *f, const ch_field_req *rq, const uint8_t *p,
                         uint64_t size, uint64_t max_bytes, const char *where, const char *name,
                         uint64_t base, chute_error *err)
{
    if (f->kind == CHUTE_FIELD_BYTES) {
        if (size > rq->cap)
            return ch_err(err, CHUTE_ELIMIT,
                          "%s: .%s member of %llu bytes is over field_bytes (%zu)", where,
                          f->name, (unsigned long long)size, rq->cap);
        if (p != rq->dst)
            memcpy(rq->dst, p, (size_t)size);
        memset((uint8_t *)rq->dst + size, 0, rq->cap - (size_t)size);
        *rq->len = (int64_t)size;
        return CHUTE_OK;
    }
    if (f->kind == CHUTE_FIELD_INT64) {
        int64_t v = 0;
        if (size >= 32)
            return ch_err(err, CHUTE_ECORRUPT, "%s: .%s member of %llu bytes is not an integer",
                          where, f->name, (unsigned long long)size);
        if (parse_cls((const char *)p, (size_t)size, &v) != 0)
            return ch_err(err, CHUTE_ECORRUPT, "%s: .%s member is not a decimal integer", where,
                          f->name);
        memcpy(rq->dst, &v, sizeof v);
        return CHUTE_OK;
    }
    if (size > max_bytes || size > SIZE_MAX)
        return ch_err(err, CHUTE_ELIMIT, "%s: .%s member of %llu bytes is over %llu", where,
                      f->name, (unsigned long long)size, (unsigned long long)max_bytes);
    ch_npy_info a;
    chute_error e = {0};
    int rc = ch_npy_parse(p, (size_t)size, name, base, &a, &e);
    if (rc != CHUTE_OK)
        return ch_err(err, ch_error_kind(rc) == CH_ERR_CONTENT ? rc : CHUTE_ECORRUPT,
                      "%s: .%s: %s", where, f->name, e.message);
    rc = ch_npy_check(&a, f, where, err);
    if (rc != CHUTE_OK)
        return rc;
    memcpy(rq->dst, p + a.data_offset, (size_t)a.data_bytes);
    return CHUTE_OK;
}

/* Read len bytes at off of file `file` through the cache of open files
 * (fcache.h): after open, handles live there, not in t->files. */
static int wds_read_member(const wds_impl *t, uint32_t file, uint64_t off, void *dst, size_t len,
                           chute_error *err)
{
    void *h = NULL;
    int transient = 0;
    int rc = ch_fcache_acquire((ch_fcache *)&t->fc, file, &h, &transient, err);
    if (rc != CHUTE_OK)
        return rc;
    rc = t->src->read_at(h, t->files[file].path, off, dst, len, err);
    ch_fcache_release((ch_fcache *)&t->fc, file, h, transient);
    return rc;
}

/* Tensor fields: dtype and shape from the first sample whose .npy parses
 * (a field none parses stays unknown, and reading it is corrupt); a later
 * sample of another shape is refused when read (ch_field_varies). */
static int learn_shapes(chute_dataset *ds, wds_impl *t, chute_error *err)
{
    ch_buf b = {0};
    int rc = CHUTE_OK;
    for (uint32_t k = 0; k < ds->nfields && rc == CHUTE_OK; k++) {
        ch_field *f = &ds->fields[k];
        if (f->kind != CHUTE_FIELD_TENSOR)
            continue;
        for (uint64_t i = 0; i < t->n && !f->known && rc == CHUTE_OK; i++) {
            const wds_sample *s = &t->samples[i];
            for (uint32_t q = 0; q < s->nfref; q++) {
                const wds_fref *r = &t->frefs[s->first_fref + q];
                if (r->field != k || r->size > CHUTE_DEFAULT_MAX_SAMPLE_BYTES)
                    continue;
                if (ch_buf_reserve(&b, (size_t)r->size + 1) != CHUTE_OK) {
                    rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                    break;
                }
                const ch_ds_file *fl = &t->files[s->file];
                rc = wds_read_member(t, s->file, r->offset, b.data, (size_t)r->size, err);
                if (rc != CHUTE_OK)
                    break;
                ch_npy_info a;
                chute_error e = {0};
                char origin[4400];
                snprintf(origin, sizeof origin, "%s@%llu: sample \"%s\"", fl->path,
                         (unsigned long long)s->header, s->key);
                if (ch_npy_parse((const uint8_t *)b.data, (size_t)r->size, fl->path, r->offset,
                                 &a, &e) == CHUTE_OK)
                    ch_field_from_npy(f, &a, origin);
                break;
            }
        }
    }
    ch_buf_free(&b);
    return rc;
}

static int wds_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                           size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    const wds_impl *t = ds->impl;
    const wds_sample *s = &t->samples[i];
    const ch_ds_file *fl = &t->files[s->file];
    char where[4400];
    snprintf(where, sizeof where, "%s@%llu: sample \"%s\"", fl->path,
             (unsigned long long)s->header, s->key);
    for (size_t q = 0; q < nreq; q++) {
        const ch_field *f = &ds->fields[req[q].field];
        const wds_fref *r = NULL;
        for (uint32_t j = 0; j < s->nfref && !r; j++)
            if (t->frefs[s->first_fref + j].field == req[q].field)
                r = &t->frefs[s->first_fref + j];
        if (!r)
            return ch_err(err, CHUTE_ECORRUPT, "%s: no .%s member", where, f->name);
        if (f->kind == CHUTE_FIELD_TENSOR && !f->known)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s: field \"%s\": no sample's .npy header could be read at open",
                          where, f->name);
        /* The member's bytes where the decoder wants them: a bytes value
         * straight into its slot, a .cls into a stack buffer, a .npy into
         * the worker's scratch; over the field's limit, nothing is read
         * and the decoder says why. */
        uint64_t lim = f->kind == CHUTE_FIELD_BYTES   ? req[q].cap
                       : f->kind == CHUTE_FIELD_INT64 ? 31
                                                      : CH_MIN(max_bytes, (uint64_t)SIZE_MAX);
        char text[32];
        uint8_t *p = NULL;
        if (r->size <= lim) {
            if (f->kind == CHUTE_FIELD_BYTES) {
                p = req[q].dst;
            } else if (f->kind == CHUTE_FIELD_INT64) {
                p = (uint8_t *)text;
            } else {
                if (ch_buf_reserve(scratch, (size_t)r->size) != CHUTE_OK)
                    return ch_err(err, CHUTE_ENOMEM, "out of memory for a %llu-byte .npy",
                                  (unsigned long long)r->size);
                p = scratch->data;
            }
            int rc = wds_read_member(t, s->file, r->offset, p, (size_t)r->size, err);
            if (rc != CHUTE_OK)
                return rc;
        }
        int rc = fmt_wds_field_decode(f, &req[q], p, r->size, max_bytes, where, fl->path,
                                      r->offset, err);
        if (rc != CHUTE_OK)
            return rc;
    }
    return CHUTE_OK;
}

/* Read-ahead (format.h): the image member's bytes.  A sample found bad at
 * open has none: the worker's read reports why. */
static int wds_locate(const chute_dataset *ds, uint64_t i, ch_locator *out, chute_error *err)
{
    const wds_impl *t = ds->impl;
    const wds_sample *s = &t->samples[i];
    const ch_ds_file *f = &t->files[s->file];
    if (s->bad)
        return CH_LOC_NONE;
    void *h = NULL;
    int transient = 0;
    int rc = ch_fcache_acquire((ch_fcache *)&t->fc, s->file, &h, &transient, err);
    if (rc != CHUTE_OK)
        return rc;
    out->h = h;
    out->path = f->path;
    out->off = s->offset;
    out->len = s->size;
    out->file = s->file;
    out->pin = (uint32_t)transient;
    return CHUTE_OK;
}

/* The handle wds_locate took from the open-file cache goes back. */
static void wds_unlocate(const chute_dataset *ds, ch_locator *loc)
{
    const wds_impl *t = ds->impl;
    ch_fcache_release((ch_fcache *)&t->fc, (uint32_t)loc->file, loc->h, (int)loc->pin);
    loc->h = NULL;
}

static int wds_from_bytes(const chute_dataset *ds, uint64_t i, const uint8_t *raw, size_t len,
                          const uint8_t **out, size_t *out_len, chute_error *err)
{
    const wds_impl *t = ds->impl;
    const wds_sample *s = &t->samples[i];
    if (len != s->size)
        return ch_err(err, CHUTE_EIO, "%s@%llu: read %zu bytes of a %llu-byte member",
                      t->files[s->file].path, (unsigned long long)s->offset, len,
                      (unsigned long long)s->size);
    *out = raw;
    *out_len = len;
    return CHUTE_OK;
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
    .unit_of = wds_unit_of,
    .read_fields = wds_read_fields,
    .locate = wds_locate,
    .unlocate = wds_unlocate,
    .from_bytes = wds_from_bytes,
};
