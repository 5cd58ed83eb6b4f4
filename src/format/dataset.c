/*
 * dataset.c — the public chute_dataset_* calls: pick the format (by name
 * or by probing every registered one, registry.c), open the path through
 * it, and answer questions about samples.  Also the small helpers formats
 * share (file lists, synthesised class names, label checks).
 */
#define _GNU_SOURCE
#include "format.h"
#include "common/loader_options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void ch_dataset_free_fields(chute_dataset *ds)
{
    if (ds->fmt && ds->impl)
        ds->fmt->close(ds->impl);
    else if (ds->impl)
        free(ds->impl);
    free(ds->labels);
    if (ds->class_names)
        for (uint32_t c = 0; c < ds->nclasses; c++)
            free(ds->class_names[c]);
    free(ds->class_names);
    free(ds->root);
    free(ds->fields);
    ch_cache_destroy(ds->cache);
    memset(ds, 0, sizeof *ds);
}

int chute_dataset_open(const char *path, chute_source_kind kind, chute_dataset **out_ds,
                       chute_error *err)
{
    chute_dataset_options o = {0};
    o.kind = kind;
    return chute_dataset_open_ex(path, &o, out_ds, err);
}

int ch_ds_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
               chute_error *err)
{
    if (ds->read_delay_us) {
        struct timespec ts = {ds->read_delay_us / 1000000, (long)(ds->read_delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    if (i == ds->inject_sample && atomic_load_explicit(&ds->inject_left, memory_order_relaxed)) {
        /* Take one injected failure if any is left (CAS: exactly n fail). */
        _Atomic uint32_t *left = (_Atomic uint32_t *)&ds->inject_left;
        uint32_t n = atomic_load_explicit(left, memory_order_relaxed);
        while (n && !atomic_compare_exchange_weak_explicit(left, &n, n - 1, memory_order_relaxed,
                                                          memory_order_relaxed))
            ;
        if (n) {
            char where[512];
            ds->fmt->describe(ds, i, where, sizeof where);
            return ch_err(err, ds->inject_status, "%s: injected %s (test fault, %u more to come)",
                          where, chute_status_name(ds->inject_status), n - 1);
        }
    }
    return ds->fmt->read(ds, i, buf, cap, out_len, err);
}

int ch_ds_read_buf(const chute_dataset *ds, uint64_t i, ch_buf *buf, uint64_t max_bytes,
                   size_t *out_len, chute_error *err)
{
    /* Never offer the format more room than the limit, so an over-limit
     * sample comes back as "too small" whatever the buffer has grown to. */
    size_t cap = buf->cap < max_bytes ? buf->cap : (size_t)max_bytes;
    int rc = ch_ds_read(ds, i, buf->data, cap, out_len, err);
    if (rc == CH_ESMALL) {
        if (*out_len > max_bytes)
            return ch_err(err, CHUTE_ELIMIT, "%zu bytes exceeds the sample size limit of %llu",
                          *out_len, (unsigned long long)max_bytes);
        if (ch_buf_reserve(buf, *out_len) != CHUTE_OK)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for a %zu-byte sample", *out_len);
        rc = ch_ds_read(ds, i, buf->data, buf->cap, out_len, err);
    }
    if (rc == CH_ESMALL)
        return ch_err(err, CHUTE_EIO, "sample changed size while being read");
    return rc;
}

void ch_ds_failure_message(const chute_dataset *ds, uint64_t i, const char *reason, char *out,
                           size_t n)
{
    char file[4096], where[4096], big[8192];
    file[0] = where[0] = '\0';
    if (ds && i < ds->n) {
        ds->fmt->file_of(ds, i, file, sizeof file);
        ds->fmt->describe(ds, i, where, sizeof where);
    }
    size_t fl = strlen(file);
    if (!where[0] || (fl && strncmp(reason, file, fl) == 0 &&
                      (reason[fl] == ':' || reason[fl] == '@')))
        ch_str_fit(out, n, reason);
    else {
        snprintf(big, sizeof big, "%s: %s", where, reason);
        ch_str_fit(out, n, big);
    }
}

void ch_ds_drop_cache(const chute_dataset *ds, uint64_t i)
{
    char path[4096];
    /* Only local files have a page cache of ours to drop. */
    if (i >= ds->n || ds->src != &ch_source_local)
        return;
    ds->fmt->file_of(ds, i, path, sizeof path);
    ch_drop_page_cache(path);
}

#ifndef CHUTE_HAVE_HDF5
/* Built without libhdf5: an HDF5 path (by name or signature) or the format
 * named "hdf5" gets CHUTE_EUNSUPPORTED saying so, not "no format". */
static int hdf5_missing(const char *path, int is_dir, const char *name, chute_error *err)
{
    static const uint8_t sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    size_t l = strlen(path);
    if (name && strcmp(name, "hdf5") != 0)
        return CHUTE_OK;
    int hit = name != NULL;
    hit = hit || (!is_dir && l > 3 && (!strcmp(path + l - 3, ".h5") ||
                                      (l > 5 && !strcmp(path + l - 5, ".hdf5"))));
    FILE *f = !hit && !is_dir ? fopen(path, "rb") : NULL;
    if (f) {
        uint8_t b[8];
        hit = fread(b, 1, 8, f) == 8 && memcmp(b, sig, 8) == 0;
        fclose(f);
    }
    if (!hit)
        return CHUTE_OK;
    return ch_err(err, CHUTE_EUNSUPPORTED,
                  "%s: an HDF5 file, but this libchute was built without libhdf5 (install "
                  "libhdf5-dev and rebuild; chute_features() lists \"hdf5\" when present)",
                  path);
}
#endif

/* The format for path: the one named (opt->format, or the legacy kind),
 * else the one whose probe is most sure.  Nothing sure, or a tie at the
 * top, is an error listing every format and what its probe said. */
static int pick_format(const ch_source_ops *src, const char *path, int is_dir,
                       const chute_dataset_options *opt, const ch_format_ops **out,
                       int *out_best, chute_error *err)
{
    *out_best = CH_PROBE_CERTAIN; /* a named format */
    static const char *const legacy[] = {NULL, "tree", "shards"};
    chute_source_kind kind = opt ? opt->kind : CHUTE_SOURCE_AUTO;
    const char *name = opt ? opt->format : NULL;
    if ((unsigned)kind >= sizeof legacy / sizeof *legacy)
        return ch_err(err, CHUTE_EINVAL, "unknown source kind %d", (int)kind);
    if (name && legacy[kind] && strcmp(name, legacy[kind]) != 0)
        return ch_err(err, CHUTE_EINVAL, "format \"%s\" and source kind \"%s\" disagree", name,
                      legacy[kind]);
    if (!name)
        name = legacy[kind];
    char names[512] = "";
    for (size_t k = 0; ch_formats[k]; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                 ch_formats[k]->name);
#ifndef CHUTE_HAVE_HDF5
    if (hdf5_missing(path, is_dir, name, err) != CHUTE_OK)
        return err->code;
#endif
    if (name) {
        *out = ch_format_find(name);
        if (!*out)
            return ch_err(err, CHUTE_EINVAL, "unknown format \"%s\" (known: %s)", name, names);
        return CHUTE_OK;
    }
    int best = CH_PROBE_NO, ties = 0;
    char tried[2048] = "";
    for (size_t k = 0; ch_formats[k]; k++) {
        char why[512] = "";
        int c = ch_formats[k]->probe(src, path, is_dir, why, sizeof why);
        size_t l = strlen(tried);
        snprintf(tried + l, sizeof tried - l, "%s%s: %s", k ? "; " : "", ch_formats[k]->name,
                 c > CH_PROBE_NO ? (c == CH_PROBE_FALLBACK ? "matches as a fallback" : "matches") : why[0] ? why : "no match");
        if (c > best) {
            best = c;
            ties = 0;
            *out = ch_formats[k];
        } else if (c == best && c > CH_PROBE_NO) {
            ties++;
        }
    }
    if (best == CH_PROBE_NO)
        return ch_err(err, CHUTE_EFORMAT, "%s: no format recognises it (%s)", path, tried);
    if (ties)
        return ch_err(err, CHUTE_EFORMAT,
                      "%s: more than one format matches equally (%s): name one with the format "
                      "option",
                      path, tried);
    *out_best = best;
    return CHUTE_OK;
}

static int stop_at_first(void *user, const char *name, const ch_stat *st)
{
    (void)user, (void)name, (void)st;
    return 1;
}

/* Only the fallback (a tree of files) matched a directory.  A source that
 * cannot list (HTTP) could not have let any probe see inside it, so say
 * that rather than failing later on a HEAD of the directory's URL. */
static int fallback_needs_listing(const ch_source_ops *src, const char *dir, chute_error *err)
{
    chute_error e = {0};
    if (src->list(dir, stop_at_first, NULL, &e) == CHUTE_EUNSUPPORTED)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s", e.message);
    return CHUTE_OK;
}

int chute_dataset_open_ex(const char *path, const chute_dataset_options *opt,
                          chute_dataset **out_ds, chute_error *err)
{
    if (ch_stream_path(path)) /* pipe:COMMAND or -: a stream (fmt_stream.c) */
        return out_ds ? ch_stream_dataset_open(path, opt, out_ds, err)
                      : ch_err(err, CHUTE_EINVAL, "chute_dataset_open: out_ds is required");
    return ch_dataset_open_src(ch_source_for(path), path, opt, out_ds, err);
}

int ch_dataset_open_src(const ch_source_ops *src, const char *path,
                        const chute_dataset_options *opt, chute_dataset **out_ds,
                        chute_error *err)
{
    if (!path || !out_ds || !src)
        return ch_err(err, CHUTE_EINVAL, "chute_dataset_open: path and out_ds are required");
    *out_ds = NULL;
    /* The option table's bounds and enum choices (dataset_options.def). */
    if (opt && ch_dataset_options_check(opt, err) != CHUTE_OK)
        return CHUTE_EINVAL;
    ch_stat st;
    int rc = ch_src_stat(src, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    /* Strip trailing slashes so messages read "root/cls/x.jpg" -- and
     * before probing: the probes join names onto the path, and on S3
     * "prefix//manifest" is another key than "prefix/manifest". */
    char *root = strdup(path);
    if (!root)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        root[--n] = '\0';
    const ch_format_ops *fmt = NULL;
    int best;
    rc = pick_format(src, root, st.type == CH_ENT_DIR, opt, &fmt, &best, err);
    if (rc == CHUTE_OK && best == CH_PROBE_FALLBACK)
        rc = fallback_needs_listing(src, root, err);
    if (rc != CHUTE_OK) {
        free(root);
        return rc;
    }
    chute_dataset_options zero = {0};
    chute_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) {
        free(root);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    ds->src = src;
#ifdef CHUTE_HAVE_CURL
    if (src == &ch_source_s3 || src == &ch_source_http) {
        ds->remote_aio.coalesce_gap_bytes =
            opt && opt->coalesce_gap_bytes ? opt->coalesce_gap_bytes : CH_REMOTE_COALESCE_GAP;
        ds->remote_aio.coalesce_max_bytes = CH_REMOTE_COALESCE_MAX;
        ch_remote_tuned(src, &ds->remote_aio, &ds->remote_src);
        ds->src = &ds->remote_src;
    }
#endif
    if (opt && (opt->cache_dir || opt->cache_ram_bytes)) {
        ch_cache_options co = {.dir = opt->cache_dir, .bytes = opt->cache_bytes,
                               .block_bytes = opt->cache_block_bytes,
                               .ram_bytes = opt->cache_ram_bytes};
        rc = ch_cache_create(ds->src, &co, &ds->cache, err);
        if (rc != CHUTE_OK) {
            free(ds);
            return rc;
        }
        ds->src = ch_cache_source(ds->cache);
    }
    ds->fmt = fmt;
    ds->root = root;
    rc = fmt->open(ds, ds->root, opt ? opt : &zero, err);
    if (rc != CHUTE_OK) {
        ch_dataset_free_fields(ds);
        free(ds);
        return rc;
    }
    ds->read_delay_us = opt ? opt->read_delay_us : 0;
    ds->direct_io = opt ? (int)opt->direct_io : 0;
    if (opt && opt->inject_fail_reads) {
        int st = opt->inject_fail_status ? opt->inject_fail_status : CHUTE_EIO;
        if (st >= 0 || st < CHUTE_EINTERRUPTED) {
            chute_dataset_close(ds);
            return ch_err(err, CHUTE_EINVAL, "inject_fail_status %d is not an error status",
                          opt->inject_fail_status);
        }
        atomic_store(&ds->inject_left, opt->inject_fail_reads);
        ds->inject_status = st;
        ds->inject_sample = opt->inject_fail_sample;
    }
    *out_ds = ds;
    return CHUTE_OK;
}

void chute_dataset_close(chute_dataset *ds)
{
    if (!ds)
        return;
    ch_dataset_free_fields(ds);
    free(ds);
}

uint64_t chute_dataset_size(const chute_dataset *ds) { return ds ? ds->n : 0; }
uint32_t chute_dataset_num_classes(const chute_dataset *ds) { return ds ? ds->nclasses : 0; }
chute_source_kind chute_dataset_kind(const chute_dataset *ds)
{
    if (ds && ds->fmt == &ch_format_tree)
        return CHUTE_SOURCE_TREE;
    if (ds && ds->fmt == &ch_format_shards)
        return CHUTE_SOURCE_SHARDS;
    return CHUTE_SOURCE_AUTO;
}

const char *chute_dataset_format_name(const chute_dataset *ds)
{
    return ds && ds->fmt ? ds->fmt->name : NULL;
}

const char *chute_dataset_class_name(const chute_dataset *ds, uint32_t label)
{
    return ds && label < ds->nclasses ? ds->class_names[label] : NULL;
}

int64_t chute_dataset_label(const chute_dataset *ds, uint64_t i)
{
    return ds && i < ds->n ? ds->labels[i] : -1;
}

uint64_t chute_dataset_sample_size(const chute_dataset *ds, uint64_t i)
{
    return ds && i < ds->n ? ds->fmt->sample_size(ds, i) : 0;
}

const char *chute_dataset_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t buflen)
{
    if (!buf || buflen == 0)
        return buf;
    if (!ds || i >= ds->n)
        snprintf(buf, buflen, "(no sample %llu)", (unsigned long long)i);
    else
        ds->fmt->describe(ds, i, buf, buflen);
    return buf;
}

uint64_t chute_dataset_skipped(const chute_dataset *ds, uint64_t k, char *buf, size_t buflen)
{
    if (buf && buflen)
        buf[0] = '\0';
    if (!ds || !ds->fmt->skipped)
        return 0;
    return ds->fmt->skipped(ds, k, buf, buflen);
}

int chute_dataset_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                       chute_error *err)
{
    if (!ds || !out_len || (!buf && cap))
        return ch_err(err, CHUTE_EINVAL, "chute_dataset_read: bad arguments");
    if (i >= ds->n)
        return ch_err(err, CHUTE_EINVAL, "sample %llu out of range (dataset has %llu)",
                      (unsigned long long)i, (unsigned long long)ds->n);
    int rc = ch_ds_read(ds, i, buf, cap, out_len, err);
    if (rc == CH_ESMALL)
        return ch_err(err, CHUTE_ELIMIT, "sample %llu needs %zu bytes, buffer has %zu",
                      (unsigned long long)i, *out_len, cap);
    return rc;
}

/* ---- helpers shared by the formats ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void ch_path_list_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

typedef struct path_list_ctx {
    const char *dir;
    int (*keep)(const char *name);
    char **v;
    size_t n, cap;
    int rc;
} path_list_ctx;

static int path_list_add(void *user, const char *name, const ch_stat *st)
{
    path_list_ctx *c = user;
    (void)st; /* kept whatever it is: open says "not a regular file" */
    if (name[0] == '.' || !c->keep(name))
        return 0;
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 16;
        char **nv = realloc(c->v, nc * sizeof *nv);
        if (!nv)
            return (c->rc = CHUTE_ENOMEM);
        c->v = nv;
        c->cap = nc;
    }
    if (asprintf(&c->v[c->n], "%s/%s", c->dir, name) < 0)
        return (c->rc = CHUTE_ENOMEM);
    c->n++;
    return 0;
}

int ch_path_list(const ch_source_ops *src, const char *path, int (*keep)(const char *name),
                 char ***out, size_t *out_n, chute_error *err)
{
    *out = NULL;
    *out_n = 0;
    ch_stat st;
    int rc = ch_src_stat(src, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    if (st.type != CH_ENT_DIR) {
        char **v = malloc(sizeof *v);
        if (!v || !(v[0] = strdup(path))) {
            free(v);
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        }
        *out = v;
        *out_n = 1;
        return CHUTE_OK;
    }
    path_list_ctx c = {path, keep, NULL, 0, 0, CHUTE_OK};
    rc = ch_src_list(src, path, path_list_add, &c, err);
    if (rc == CHUTE_OK && c.rc != CHUTE_OK)
        rc = ch_err(err, c.rc, "%s: out of memory while listing", path);
    if (rc != CHUTE_OK) {
        ch_path_list_free(c.v, c.n);
        return rc;
    }
    if (c.n > 1)
        qsort(c.v, c.n, sizeof *c.v, cmp_str);
    *out = c.v;
    *out_n = c.n;
    return CHUTE_OK;
}

int ch_ds_files_list(const ch_source_ops *src, const char *path, int (*keep)(const char *name),
                     const char *what, ch_ds_file **out, size_t *out_n, chute_error *err)
{
    *out = NULL;
    *out_n = 0;
    char **paths = NULL;
    size_t np = 0;
    int rc = ch_path_list(src, path, keep, &paths, &np, err);
    if (rc != CHUTE_OK)
        return rc;
    if (np == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no %s", path, what);
    if (np > UINT32_MAX) {
        ch_path_list_free(paths, np);
        return ch_err(err, CHUTE_ELIMIT, "%s: too many files", path);
    }
    ch_ds_file *files = calloc(np, sizeof *files);
    if (!files) {
        ch_path_list_free(paths, np);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < np; i++)
        files[i].path = paths[i];
    free(paths);
    *out = files;
    *out_n = np;
    return CHUTE_OK;
}

void ch_ds_files_close(const ch_source_ops *src, ch_ds_file *files, size_t n)
{
    for (size_t i = 0; files && i < n; i++) {
        if (files[i].h)
            src->close(files[i].h);
        free(files[i].path);
    }
    free(files);
}

int ch_ds_synth_classes(chute_dataset *ds, uint32_t n, chute_error *err)
{
    if (n > CH_MAX_SYNTH_CLASSES)
        return ch_err(err, CHUTE_ELIMIT, "%s: %u classes is more than %u", ds->root, n,
                      CH_MAX_SYNTH_CLASSES);
    ds->class_names = calloc(n ? n : 1, sizeof(char *));
    if (!ds->class_names)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %u class names", n);
    for (uint32_t c = 0; c < n; c++) {
        if (asprintf(&ds->class_names[c], "%u", c) < 0) {
            ds->class_names[c] = NULL;
            ds->nclasses = c; /* what free_fields releases */
            return ch_err(err, CHUTE_ENOMEM, "out of memory for %u class names", n);
        }
    }
    ds->nclasses = n;
    return CHUTE_OK;
}

const char *const ch_label_columns[CH_LABEL_NAMES_N] = {"label", "labels", "target", "targets",
                                                         "class"};
const char *const ch_label_arrays[CH_LABEL_NAMES_N] = {"labels", "label", "targets", "target", "y"};

const char *ch_label_names_text(const char *const *names, const char *suffix, const char *last,
                                char *buf, size_t n)
{
    size_t l = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < CH_LABEL_NAMES_N && l < n; k++) {
        int w = snprintf(buf + l, n - l, "%s%s%s",
                         !k ? "" : k + 1 == CH_LABEL_NAMES_N ? last : ", ", names[k], suffix);
        if (w < 0)
            break;
        l += (size_t)w;
    }
    return buf;
}

int ch_ds_label(int64_t raw, const chute_dataset_options *opt, const char *where, int32_t *out,
                chute_error *err)
{
    int64_t off = opt ? opt->label_offset : 0;
    if (raw < INT64_MIN / 2 || raw > INT64_MAX / 2 || raw + off < 0 ||
        raw + off >= (int64_t)CH_MAX_SYNTH_CLASSES)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s: label %lld%s is outside 0..%u (label_offset %lld; imagenet_to_gcs.py "
                      "labels are 1-based: use label_offset -1)",
                      where, (long long)raw, off ? " plus the offset" : "",
                      CH_MAX_SYNTH_CLASSES - 1, (long long)off);
    *out = (int32_t)(raw + off);
    return CHUTE_OK;
}

/* ---- typed fields (fields.h) ---- */

int ch_ds_field_find(const chute_dataset *ds, const char *name)
{
    for (uint32_t k = 0; k < ds->nfields; k++)
        if (strcmp(ds->fields[k].name, name) == 0)
            return (int)k;
    return -1;
}

int ch_ds_field_add(chute_dataset *ds, const char *name, size_t name_len, int kind, int dtype,
                    chute_error *err)
{
    if (name_len == 0 || name_len >= CH_FIELD_NAME_MAX) {
        ch_err(err, CHUTE_ELIMIT, "field name \"%.*s\" is empty or longer than %d bytes",
               (int)(name_len < 80 ? name_len : 80), name, CH_FIELD_NAME_MAX - 1);
        return -1;
    }
    if (ds->nfields == CH_FIELD_MAX) {
        ch_err(err, CHUTE_ELIMIT, "more than %d distinct fields (\"%.*s\")", CH_FIELD_MAX,
               (int)name_len, name);
        return -1;
    }
    ch_field *nf = realloc(ds->fields, (ds->nfields + 1) * sizeof *nf);
    if (!nf) {
        ch_err(err, CHUTE_ENOMEM, "out of memory");
        return -1;
    }
    ds->fields = nf;
    ch_field *f = &nf[ds->nfields];
    memset(f, 0, sizeof *f);
    memcpy(f->name, name, name_len);
    f->kind = kind;
    f->dtype = dtype;
    if (kind == CHUTE_FIELD_BYTES) {
        f->ndim = 1;
        f->shape[0] = -1;
        f->known = 1;
    }
    return (int)ds->nfields++;
}

uint32_t chute_dataset_num_fields(const chute_dataset *ds) { return ds ? ds->nfields : 0; }

int chute_dataset_field_info(const chute_dataset *ds, uint32_t k, chute_field_info *out)
{
    if (!ds || !out || k >= ds->nfields)
        return CHUTE_EINVAL;
    const ch_field *f = &ds->fields[k];
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->kind = (chute_field_kind)f->kind;
    out->dtype = (chute_dtype)f->dtype;
    out->ndim = f->ndim;
    memcpy(out->shape, f->shape, sizeof out->shape);
    return CHUTE_OK;
}

int chute_dataset_has_images(const chute_dataset *ds) { return ds && !ds->no_image; }
int chute_dataset_is_stream(const chute_dataset *ds) { return ds && ds->stream; }

/* ---- ch_probe_first (format.h): the probe of npy, wav and the like ---- */

typedef struct probe_walk {
    const char *dir;
    int (*match)(const char *name);
    char *first;              /* first match seen (listing order), cap bytes */
    size_t cap;
    char first_dir[4096];     /* smallest subdirectory name */
} probe_walk;

static int probe_entry(void *user, const char *name, const ch_stat *st)
{
    probe_walk *p = user;
    if (name[0] == '.')
        return 0;
    if (st->type == CH_ENT_FILE && !p->first[0] && p->match(name))
        snprintf(p->first, p->cap, "%s/%s", p->dir, name);
    if (st->type == CH_ENT_DIR && (!p->first_dir[0] || strcmp(name, p->first_dir) < 0))
        snprintf(p->first_dir, sizeof p->first_dir, "%s", name);
    return 0;
}

int ch_probe_first(const ch_source_ops *src, const char *dir, int (*match)(const char *name),
                   char *out, size_t cap, chute_error *err)
{
    if (cap)
        out[0] = 0;
    if (cap < 2)
        return ch_err(err, CHUTE_EINVAL, "%s: no room for a path", dir);
    probe_walk p = {.dir = dir, .match = match, .first = out, .cap = cap};
    int rc = ch_src_list(src, dir, probe_entry, &p, err);
    if (rc != CHUTE_OK)
        return rc;
    if (!out[0] && p.first_dir[0]) {
        char sub[4200];
        snprintf(sub, sizeof sub, "%s/%s", dir, p.first_dir);
        probe_walk q = {.dir = sub, .match = match, .first = out, .cap = cap};
        chute_error e = {0}; /* an unlistable class directory: nothing found */
        if (ch_src_list(src, sub, probe_entry, &q, &e) != CHUTE_OK)
            out[0] = 0;
    }
    return CHUTE_OK;
}
