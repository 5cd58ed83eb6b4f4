/*
 * fmt_npy.c — the "npy" format: NumPy arrays as samples.
 *
 * Two layouts, told apart by what the path is:
 *   - One large `.npy` file (the path is a file): its first axis is the
 *     sample.  Only the header is read at open (ch_npy_parse_head: the same
 *     strict checks as for a value in memory, the data size against the
 *     file's size, so a header lying about its shape fails the open naming
 *     the file and offset 0).  Sample i is one positional read of
 *     prod(shape[1:]) * itemsize bytes at data_offset + i * that, through
 *     the source: the array is never read whole nor mapped, so it can be
 *     far larger than memory and live on any source.  Labels come from a
 *     second array: the dataset option label_key names its file (relative
 *     paths are taken beside the data file), else the first of
 *     labels.npy, label.npy, targets.npy, target.npy, y.npy beside the
 *     data; none is an error (never labels of 0 without a word), and
 *     label_key "" says "no labels" (every label 0).  It must be a 1-D integer
 *     array of the same length, read whole at open (n labels are what every
 *     format keeps in memory anyway).
 *       An N x H x W x 3 (or x 1) uint8 array is images: read() returns each
 *     sample as a CHRAW record (src/codec/raw.c; 16 header bytes written
 *     here, then the pixels read in place behind them), so the normal
 *     decode-free path and the train/eval transforms apply unchanged.  Any
 *     other array is a tensor field named after the file's stem
 *     ("features.npy" -> "features"), of shape shape[1:], and the samples
 *     have no image (ds->no_image): the loader delivers label + fields.
 *   - A directory of `.npy` files, one sample each (the path is a
 *     directory): the files directly inside it (only with label_key "",
 *     every label 0; a directory holding one array and its labels file,
 *     images.npy + labels.npy, is that array's N samples), or inside
 *     its subdirectories, one per class in ImageFolder's manner (classes
 *     sorted by name, files sorted by name, label = class index).  Each
 *     file is a tensor field named "npy" whose dtype and shape come from
 *     the first file; a later file that disagrees, or whose header does not
 *     parse, is corrupt content naming the file, for the loader's policy.
 *     A sample is one whole-file read into the worker's scratch buffer.
 *     `.npz` files (numpy.savez) work the same way, one field per member
 *     (npz.c finds them; only stored members, as savez writes them).
 * Never: a read that trusts a size from the file without checking it
 * against the file's size, or any allocation after open.
 */
#define _GNU_SOURCE
#include "format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_FIELD_DIR "npy"    /* the field of directory-layout samples */
#define NPY_LABELS "labels.npy"
/* Where labels are looked for when label_key is not given: NAME.npy for
 * each of ch_label_arrays (format.h), in that order; none found is an
 * error, never labels of 0: label_key "" says "this dataset has no
 * labels". */

static int is_label_name(const char *name)
{
    size_t n = strlen(name);
    for (size_t k = 0; k < CH_LABEL_NAMES_N; k++)
        if (n == strlen(ch_label_arrays[k]) + 4 && !strncmp(name, ch_label_arrays[k], n - 4) &&
            !strcmp(name + n - 4, ".npy"))
            return 1;
    return 0;
}
#define CHRAW_HDR 16

typedef struct npy_impl {
    const ch_source_ops *src;
    int single;               /* one large array, else a directory */
    /* single */
    char *path;
    void *h;
    uint64_t data_offset;
    uint64_t per;             /* bytes of one sample */
    int image;                /* uint8 N x H x W x C: CHRAW records */
    uint32_t w, hgt, ch;
    /* directory */
    char **files;             /* full paths, nfiles of them */
    uint64_t nfiles;
    int npz;                  /* .npz files: one field per member */
} npy_impl;

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int npy_name(const char *name)
{
    return name[0] != '.' && (ends_with(name, ".npy") || ends_with(name, ".npz"));
}

/* Read the head of a .npy file (at most CH_NPY_MAX_HEADER + 12 bytes) and
 * parse it against the file's size. */
static int read_head(const ch_source_ops *src, void *h, const char *path, uint64_t size,
                     ch_npy_info *out, chute_error *err)
{
    size_t want = (size_t)CH_MIN(size, (uint64_t)CH_NPY_MAX_HEADER + 12);
    uint8_t *b = malloc(want ? want : 1);
    if (!b)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = src->read_at(h, path, 0, b, want, err);
    if (rc == CHUTE_OK)
        rc = ch_npy_parse_head(b, want, size, path, 0, out, err);
    free(b);
    return rc;
}

/* ---- probe ------------------------------------------------------------ */

/* The probe looks at the magic only: a file that has it but whose header
 * is bad must reach open, whose message names the file, the offset and
 * what is wrong, rather than "no format matched". */
static int head_ok(const ch_source_ops *src, const char *path)
{
    uint8_t m[6];
    chute_error e = {0};
    return ch_src_read_head(src, path, m, sizeof m, &e) == CHUTE_OK &&
           (ends_with(path, ".npz") ? memcmp(m, "PK\x03\x04", 4) == 0
                                    : memcmp(m, "\x93NUMPY", 6) == 0);
}

static int npy_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                     size_t n)
{
    if (!is_dir) {
        if (!ends_with(path, ".npy")) {
            snprintf(why, n, "not a .npy file");
            return CH_PROBE_NO;
        }
        if (!head_ok(src, path)) {
            snprintf(why, n, "no \\x93NUMPY magic");
            return CH_PROBE_NO;
        }
        return CH_PROBE_LIKELY;
    }
    char first[4096];
    chute_error e = {0};
    if (ch_probe_first(src, path, npy_name, first, sizeof first, &e) != CHUTE_OK)
        return CH_PROBE_NO;
    if (!first[0]) {
        snprintf(why, n, "no .npy file in it or its first subdirectory");
        return CH_PROBE_NO;
    }
    if (!head_ok(src, first)) {
        snprintf(why, n, "%s: no \\x93NUMPY magic", first);
        return CH_PROBE_NO;
    }
    return CH_PROBE_LIKELY;
}

/* ---- open: one large array -------------------------------------------- */

static int load_labels(chute_dataset *ds, npy_impl *t, const char *lpath,
                       const chute_dataset_options *opt, int64_t *maxlabel, chute_error *err)
{
    void *h = NULL;
    uint64_t size = 0;
    int rc = ch_src_open(t->src, lpath, &h, &size, err);
    if (rc != CHUTE_OK)
        return rc;
    ch_npy_info a;
    rc = read_head(t->src, h, lpath, size, &a, err);
    size_t isz = ch_dtype_size(a.dtype);
    int is_int = a.dtype == CHUTE_DTYPE_INT64 || a.dtype == CHUTE_DTYPE_INT32 ||
                 a.dtype == CHUTE_DTYPE_INT16 || a.dtype == CHUTE_DTYPE_INT8 ||
                 a.dtype == CHUTE_DTYPE_UINT8 || a.dtype == CHUTE_DTYPE_UINT16 ||
                 a.dtype == CHUTE_DTYPE_UINT32 || a.dtype == CHUTE_DTYPE_UINT64;
    if (rc == CHUTE_OK && (a.ndim != 1 || !is_int))
        rc = ch_err(err, CHUTE_EFORMAT, "%s: labels must be a 1-D integer array", lpath);
    if (rc == CHUTE_OK && (uint64_t)a.shape[0] != ds->n)
        rc = ch_err(err, CHUTE_EFORMAT, "%s: %lld labels for %llu samples in %s", lpath,
                    (long long)a.shape[0], (unsigned long long)ds->n, t->path);
    uint8_t *b = NULL;
    if (rc == CHUTE_OK && (a.data_bytes > SIZE_MAX || !(b = malloc(a.data_bytes ? a.data_bytes : 1))))
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %llu labels", lpath,
                    (unsigned long long)ds->n);
    if (rc == CHUTE_OK)
        rc = t->src->read_at(h, lpath, a.data_offset, b, (size_t)a.data_bytes, err);
    for (uint64_t i = 0; rc == CHUTE_OK && i < ds->n; i++) {
        const uint8_t *p = b + i * isz;
        int64_t v = 0;
        switch (a.dtype) {
        case CHUTE_DTYPE_INT8: v = (int8_t)p[0]; break;
        case CHUTE_DTYPE_UINT8: v = p[0]; break;
        case CHUTE_DTYPE_INT16: { int16_t x; memcpy(&x, p, 2); v = x; break; }
        case CHUTE_DTYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
        case CHUTE_DTYPE_INT32: { int32_t x; memcpy(&x, p, 4); v = x; break; }
        case CHUTE_DTYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
        case CHUTE_DTYPE_INT64: memcpy(&v, p, 8); break;
        default: { uint64_t x; memcpy(&x, p, 8); v = x > INT64_MAX ? -1 : (int64_t)x; break; }
        }
        char where[4200];
        snprintf(where, sizeof where, "%s: label %llu", lpath, (unsigned long long)i);
        rc = ch_ds_label(v, opt, where, &ds->labels[i], err);
        if (rc == CHUTE_OK && ds->labels[i] > *maxlabel)
            *maxlabel = ds->labels[i];
    }
    free(b);
    t->src->close(h);
    return rc;
}

static int open_single(chute_dataset *ds, npy_impl *t, const char *path,
                       const chute_dataset_options *opt, chute_error *err)
{
    t->single = 1;
    t->path = strdup(path);
    if (!t->path)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    uint64_t size = 0;
    int rc = ch_src_open(t->src, path, &t->h, &size, err);
    if (rc != CHUTE_OK)
        return rc;
    ch_npy_info a;
    rc = read_head(t->src, t->h, path, size, &a, err);
    if (rc != CHUTE_OK)
        return rc;
    if (a.ndim < 1)
        return ch_err(err, CHUTE_EFORMAT, "%s: a 0-d array has no samples (the first axis is "
                      "the sample)", path);
    ds->n = (uint64_t)a.shape[0];
    if (ds->n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: the array has no samples (shape[0] is 0)", path);
    t->data_offset = a.data_offset;
    t->per = a.data_bytes / ds->n; /* exact: data_bytes = n * prod(rest) * itemsize */
    if (t->per > (uint64_t)SIZE_MAX / 2)
        return ch_err(err, CHUTE_ELIMIT, "%s: %llu bytes per sample", path,
                      (unsigned long long)t->per);
    t->image = a.dtype == CHUTE_DTYPE_UINT8 && a.ndim == 4 && (a.shape[3] == 3 || a.shape[3] == 1) &&
               a.shape[1] > 0 && a.shape[2] > 0 && a.shape[1] <= UINT32_MAX &&
               a.shape[2] <= UINT32_MAX;
    if (t->image) {
        t->hgt = (uint32_t)a.shape[1];
        t->w = (uint32_t)a.shape[2];
        t->ch = (uint32_t)a.shape[3];
    } else {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t len = strlen(base) - 4; /* ".npy" */
        int fi = ch_ds_field_add(ds, base, len, CHUTE_FIELD_TENSOR, a.dtype, err);
        if (fi < 0)
            return err->code ? err->code : CHUTE_EINVAL;
        ch_field *f = &ds->fields[fi];
        f->ndim = a.ndim - 1;
        for (uint32_t d = 1; d < a.ndim; d++)
            f->shape[d - 1] = a.shape[d];
        f->known = 1;
        ds->no_image = 1;
    }
    ds->labels = calloc(ds->n, sizeof *ds->labels);
    if (!ds->labels)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu labels",
                      (unsigned long long)ds->n);
    /* Labels: label_key (beside the data when relative), else labels.npy. */
    char lpath[4200] = "";
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) : 1;
    const char *dir = slash ? path : ".";
    if (opt->label_key && !opt->label_key[0])
        lpath[0] = '\0'; /* label_key "": no labels, by the user's choice */
    else if (opt->label_key && opt->label_key[0] == '/')
        snprintf(lpath, sizeof lpath, "%s", opt->label_key);
    else if (opt->label_key)
        snprintf(lpath, sizeof lpath, "%.*s/%s", dirlen, dir, opt->label_key);
    else {
        size_t k = 0;
        for (; k < CH_LABEL_NAMES_N; k++) {
            snprintf(lpath, sizeof lpath, "%.*s/%s.npy", dirlen, dir, ch_label_arrays[k]);
            ch_stat st;
            chute_error e = {0};
            if (ch_src_stat(t->src, lpath, &st, &e) == CHUTE_OK && st.type == CH_ENT_FILE &&
                strcmp(lpath, path) != 0)
                break;
        }
        char names[128];
        if (k == CH_LABEL_NAMES_N)
            return ch_err(err, CHUTE_EFORMAT,
                          "%s: no labels: none of %s is beside it in %.*s; name the label file "
                          "with label_key, or set label_key to \"\" for a dataset without labels",
                          path, ch_label_names_text(ch_label_arrays, ".npy", " or ", names,
                                                    sizeof names),
                          dirlen, dir);
    }
    int64_t maxlabel = 0;
    if (lpath[0]) {
        rc = load_labels(ds, t, lpath, opt, &maxlabel, err);
        if (rc != CHUTE_OK)
            return rc;
    }
    return ch_ds_synth_classes(ds, (uint32_t)(maxlabel + 1), err);
}

/* ---- open: a directory of one-sample files ---------------------------- */

typedef struct name_list {
    char **v;
    size_t n, cap;
    int dirs;                 /* collect directories, else .npy files */
    int oom;
} name_list;

static int collect(void *user, const char *name, const ch_stat *st)
{
    name_list *l = user;
    if (name[0] == '.')
        return 0;
    if (l->dirs ? st->type != CH_ENT_DIR : (st->type != CH_ENT_FILE || !npy_name(name)))
        return 0;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) {
            l->oom = 1;
            return 1;
        }
        l->v = nv;
        l->cap = nc;
    }
    if (!(l->v[l->n] = strdup(name))) {
        l->oom = 1;
        return 1;
    }
    l->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(name_list *l)
{
    for (size_t k = 0; k < l->n; k++)
        free(l->v[k]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int list_sorted(const ch_source_ops *src, const char *dir, int dirs, name_list *out,
                       chute_error *err)
{
    memset(out, 0, sizeof *out);
    out->dirs = dirs;
    int rc = ch_src_list(src, dir, collect, out, err);
    if (rc == CHUTE_OK && out->oom)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory listing %s", dir);
    if (rc != CHUTE_OK) {
        names_free(out);
        return rc;
    }
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return CHUTE_OK;
}

static int add_file(npy_impl *t, chute_dataset *ds, uint64_t *cap, char *full, int32_t label,
                    chute_error *err)
{
    if (ds->n == *cap) {
        uint64_t nc = *cap ? *cap * 2 : 1024;
        char **nf = realloc(t->files, nc * sizeof *nf);
        if (nf)
            t->files = nf;
        int32_t *nl = realloc(ds->labels, nc * sizeof *nl);
        if (nl)
            ds->labels = nl;
        if (!nf || !nl) {
            free(full);
            return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu files",
                          (unsigned long long)nc);
        }
        *cap = nc;
    }
    t->files[ds->n] = full;
    t->nfiles = ds->n + 1;
    ds->labels[ds->n] = label;
    ds->n++;
    return CHUTE_OK;
}

/* A member's field name: its name without ".npy" (what np.load calls it). */
static size_t member_stem(const ch_npz_member *m)
{
    size_t n = m->name_len;
    return n > 4 && memcmp(m->name + n - 4, ".npy", 4) == 0 ? n - 4 : n;
}

/* .npz samples: the fields are the first file's members. */
static int learn_npz(chute_dataset *ds, npy_impl *t, chute_error *err)
{
    ch_buf b = {0};
    size_t len = 0;
    int rc = ch_ds_read_buf(ds, 0, &b, (uint64_t)1 << 30, &len, err);
    ch_npz_member m[CH_FIELD_MAX];
    size_t nm = 0;
    if (rc == CHUTE_OK)
        rc = ch_npz_members((const uint8_t *)b.data, len, t->files[0], m, CH_FIELD_MAX, &nm, err);
    for (size_t k = 0; rc == CHUTE_OK && k < nm; k++) {
        ch_npy_info a;
        char where[4200];
        snprintf(where, sizeof where, "%s:%.*s", t->files[0], (int)m[k].name_len, m[k].name);
        rc = ch_npy_parse((const uint8_t *)b.data + m[k].offset, (size_t)m[k].size, where,
                          m[k].offset, &a, err);
        if (rc != CHUTE_OK)
            break;
        int fi = ch_ds_field_add(ds, m[k].name, member_stem(&m[k]), CHUTE_FIELD_TENSOR, a.dtype,
                                 err);
        if (fi < 0)
            rc = err->code ? err->code : CHUTE_EINVAL;
        else
            ch_field_from_npy(&ds->fields[fi], &a, t->files[0]);
    }
    if (rc == CHUTE_OK && nm == 0)
        rc = ch_err(err, CHUTE_EFORMAT, "%s: an .npz without members", t->files[0]);
    ch_buf_free(&b);
    return rc;
}

static int open_dir(chute_dataset *ds, npy_impl *t, const char *path,
                    const chute_dataset_options *opt, chute_error *err)
{
    name_list top;
    int rc = list_sorted(t->src, path, 0, &top, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t cap = 0;
    uint32_t nclasses = 1;
    size_t nlab = 0, other = 0, lab = 0;
    for (size_t k = 0; k < top.n; k++) {
        if (is_label_name(top.v[k]))
            lab = nlab++ ? lab : k;
        else
            other = k;
    }
    if (nlab && top.n - nlab == 1 && !strstr(top.v[other], ".npz")) {
        /* images.npy + labels.npy: NumPy's usual layout is one array of N
         * samples and its labels beside it, not two one-sample files. */
        char *full = NULL;
        if (asprintf(&full, "%s/%s", path, top.v[other]) < 0)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        names_free(&top);
        if (rc != CHUTE_OK)
            return rc;
        rc = open_single(ds, t, full, opt, err);
        free(full);
        return rc;
    }
    if (nlab) {
        rc = ch_err(err, CHUTE_EFORMAT,
                    "%s: holds %s beside %zu other arrays: for one array of N samples with its "
                    "labels, open the array's file (labels are found beside it); for one file "
                    "per sample, put the files in class directories",
                    path, top.v[lab], top.n - nlab);
        names_free(&top);
        return rc;
    }
    if (top.n && !(opt->label_key && !opt->label_key[0])) {
        rc = ch_err(err, CHUTE_EFORMAT,
                    "%s: %zu .npy files and no class directories: no labels. Put the files in "
                    "one directory per class, or set label_key to \"\" for a dataset without "
                    "labels",
                    path, top.n);
        names_free(&top);
        return rc;
    }
    if (top.n) { /* flat, label_key "": every label 0 */
        for (size_t k = 0; k < top.n && rc == CHUTE_OK; k++) {
            char *full = NULL;
            if (asprintf(&full, "%s/%s", path, top.v[k]) < 0)
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
            else
                rc = add_file(t, ds, &cap, full, 0, err);
        }
        names_free(&top);
        if (rc == CHUTE_OK)
            rc = ch_ds_synth_classes(ds, 1, err);
    } else { /* class directories */
        names_free(&top);
        name_list cls;
        rc = list_sorted(t->src, path, 1, &cls, err);
        if (rc != CHUTE_OK)
            return rc;
        nclasses = (uint32_t)CH_MIN(cls.n, (size_t)CH_MAX_SYNTH_CLASSES);
        for (size_t c = 0; c < nclasses && rc == CHUTE_OK; c++) {
            char *sub = NULL;
            name_list files;
            if (asprintf(&sub, "%s/%s", path, cls.v[c]) < 0) {
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                break;
            }
            rc = list_sorted(t->src, sub, 0, &files, err);
            for (size_t k = 0; rc == CHUTE_OK && k < files.n; k++) {
                char *full = NULL;
                if (asprintf(&full, "%s/%s", sub, files.v[k]) < 0)
                    rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                else
                    rc = add_file(t, ds, &cap, full, (int32_t)c, err);
            }
            names_free(&files);
            free(sub);
        }
        if (rc == CHUTE_OK) {
            ds->class_names = calloc(nclasses ? nclasses : 1, sizeof(char *));
            if (!ds->class_names)
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
            for (uint32_t c = 0; rc == CHUTE_OK && c < nclasses; c++) {
                ds->class_names[c] = cls.v[c];
                cls.v[c] = NULL;
                ds->nclasses = c + 1;
            }
        }
        names_free(&cls);
    }
    if (rc != CHUTE_OK)
        return rc;
    if (ds->n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no .npy files in it or its subdirectories", path);
    ds->no_image = 1;
    if (ends_with(t->files[0], ".npz")) {
        t->npz = 1;
        return learn_npz(ds, t, err);
    }
    /* The field's dtype and shape: the first file's. */
    int fi = ch_ds_field_add(ds, NPY_FIELD_DIR, strlen(NPY_FIELD_DIR), CHUTE_FIELD_TENSOR, 0, err);
    if (fi < 0)
        return err->code ? err->code : CHUTE_EINVAL;
    void *h = NULL;
    uint64_t size = 0;
    rc = ch_src_open(t->src, t->files[0], &h, &size, err);
    if (rc != CHUTE_OK)
        return rc;
    ch_npy_info a;
    rc = read_head(t->src, h, t->files[0], size, &a, err);
    t->src->close(h);
    if (rc != CHUTE_OK)
        return rc;
    ch_field_from_npy(&ds->fields[fi], &a, t->files[0]);
    return CHUTE_OK;
}

static int npy_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                    chute_error *err)
{
    npy_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = t;
    t->src = ds->src;
    ch_stat st;
    int rc = ch_src_stat(t->src, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    if (st.type == CH_ENT_DIR)
        return open_dir(ds, t, path, opt, err);
    return open_single(ds, t, path, opt, err);
}

/* ---- reads ------------------------------------------------------------- */

static int npy_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                    chute_error *err)
{
    const npy_impl *t = ds->impl;
    if (!t->single)
        return ch_src_read_file(t->src, t->files[i], buf, cap, out_len, err);
    size_t hdr = t->image ? CHRAW_HDR : 0, need = hdr + (size_t)t->per;
    if (need > cap) {
        *out_len = need;
        return CH_ESMALL;
    }
    uint8_t *b = buf;
    if (t->image) {
        memcpy(b, "CHRAW", 5);
        b[5] = 1;
        b[6] = (uint8_t)t->ch;
        b[7] = 0;
        for (int k = 0; k < 4; k++) {
            b[8 + k] = (uint8_t)(t->w >> (8 * k));
            b[12 + k] = (uint8_t)(t->hgt >> (8 * k));
        }
    }
    int rc = t->src->read_at(t->h, t->path, t->data_offset + i * t->per, b + hdr, (size_t)t->per,
                             err);
    if (rc == CHUTE_OK)
        *out_len = need;
    return rc;
}

/* The requested members of one .npz held in p[len]. */
static int read_npz(const chute_dataset *ds, const char *file, const uint8_t *p, size_t len,
                    const ch_field_req *req, size_t nreq, chute_error *err)
{
    ch_npz_member m[CH_FIELD_MAX];
    size_t nm = 0;
    int rc = ch_npz_members(p, len, file, m, CH_FIELD_MAX, &nm, err);
    if (rc != CHUTE_OK)
        return ch_error_kind(rc) == CH_ERR_CONTENT || rc == CHUTE_EUNSUPPORTED ? CHUTE_ECORRUPT : rc;
    for (size_t r = 0; r < nreq; r++) {
        const ch_field *f = &ds->fields[req[r].field];
        size_t k = 0, fl = strlen(f->name);
        while (k < nm && !(member_stem(&m[k]) == fl && memcmp(m[k].name, f->name, fl) == 0))
            k++;
        if (k == nm)
            return ch_err(err, CHUTE_ECORRUPT, "%s: npz: no member \"%s\"", file, f->name);
        char where[4200];
        snprintf(where, sizeof where, "%s:%s", file, f->name);
        ch_npy_info a;
        rc = ch_npy_parse(p + m[k].offset, (size_t)m[k].size, where, m[k].offset, &a, err);
        if (rc == CHUTE_OK)
            rc = ch_npy_check(&a, f, where, err);
        if (rc != CHUTE_OK)
            return ch_error_kind(rc) == CH_ERR_CONTENT ? CHUTE_ECORRUPT : rc;
        memcpy(req[r].dst, p + m[k].offset + a.data_offset, (size_t)a.data_bytes);
    }
    return CHUTE_OK;
}

static int npy_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                           size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    const npy_impl *t = ds->impl;
    if (nreq == 0)
        return CHUTE_OK;
    /* The one field (ds->fields[0]); the loader asks for it at most once. */
    const ch_field *f = &ds->fields[req[0].field];
    if (t->single)
        return t->src->read_at(t->h, t->path, t->data_offset + i * t->per, req[0].dst,
                               (size_t)t->per, err);
    size_t len = 0;
    int rc = ch_ds_read_buf(ds, i, scratch, max_bytes, &len, err);
    if (rc != CHUTE_OK)
        return rc;
    if (t->npz)
        return read_npz(ds, t->files[i], (const uint8_t *)scratch->data, len, req, nreq, err);
    ch_npy_info a;
    rc = ch_npy_parse((const uint8_t *)scratch->data, len, t->files[i], 0, &a, err);
    if (rc == CHUTE_OK)
        rc = ch_npy_check(&a, f, t->files[i], err);
    if (rc != CHUTE_OK)
        return ch_error_kind(rc) == CH_ERR_CONTENT ? CHUTE_ECORRUPT : rc;
    memcpy(req[0].dst, (const uint8_t *)scratch->data + a.data_offset, (size_t)a.data_bytes);
    return CHUTE_OK;
}

static uint64_t npy_sample_size(const chute_dataset *ds, uint64_t i)
{
    const npy_impl *t = ds->impl;
    if (t->single)
        return (t->image ? CHRAW_HDR : 0) + t->per;
    ch_stat st;
    chute_error e = {0};
    return ch_src_stat(t->src, t->files[i], &st, &e) == CHUTE_OK ? st.size : 0;
}

static void npy_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const npy_impl *t = ds->impl;
    if (t->single)
        snprintf(buf, n, "%s@%llu (sample %llu)", t->path,
                 (unsigned long long)(t->data_offset + i * t->per), (unsigned long long)i);
    else
        snprintf(buf, n, "%s", t->files[i]);
}

static void npy_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const npy_impl *t = ds->impl;
    snprintf(buf, n, "%s", t->single ? t->path : t->files[i]);
}

static void npy_close(void *impl)
{
    npy_impl *t = impl;
    if (!t)
        return;
    if (t->h)
        t->src->close(t->h);
    free(t->path);
    for (uint64_t k = 0; k < t->nfiles; k++)
        free(t->files[k]);
    free(t->files);
    free(t);
}

const ch_format_ops ch_format_npy = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "npy",
    .probe = npy_probe,
    .open = npy_open,
    .read = npy_read,
    .sample_size = npy_sample_size,
    .describe = npy_describe,
    .file_of = npy_file_of,
    .close = npy_close,
    .read_fields = npy_read_fields,
};
