/*
 * fmt_tfrecord.c — the "tfrecord" format: TFRecord files of tf.train.Example.
 *
 * Why it is shaped so:
 *   - A dataset is a directory of TFRecord files (*.tfrecord, *.tfrecords,
 *     or imagenet_to_gcs.py's "train-00000-of-01024" names), in name order,
 *     or one such file.  The probe reads one 12-byte header and checks its
 *     length CRC, so a directory of anything else is never mistaken for
 *     TFRecords by its names alone.
 *   - The index (where each record is) comes from a DALI tfrecord2idx file
 *     beside the data when there is one ("F.idx" or F with its extension
 *     replaced by ".idx"), else from one scan of the record headers
 *     (parse.h).  Labels live inside each Example, so the first open reads
 *     every record once: it checks the data CRC, finds the image and label
 *     features, and keeps (file, offset, length, image size) per sample;
 *     then it saves all that as chute's own index (tfr_saved.h: beside the
 *     data, else in index_dir), and later opens read only that index.
 *     A record that fails there is kept as a sample that will fail to read:
 *     the loader's corrupt-sample policy decides (skip or fail), with the
 *     message naming file@offset.  Framing that cannot be followed (a bad
 *     length CRC) fails the open: no later record can be found.
 *   - read() is one positional read of the whole framed record through the
 *     source, both CRCs checked again (the file may have changed since
 *     open), the Example walked again (allocation-free views), and the
 *     image bytes moved to the front of the caller's buffer.  So the buffer
 *     must hold the record, not just the image: CH_ESMALL asks for that.
 *   - Defaults are imagenet_to_gcs.py's keys, "image/encoded" and
 *     "image/class/label"; that script's labels are 1-based (1..1000), which
 *     label_offset = -1 turns into torchvision's 0..999.  Class names are
 *     synthesised "0".."N-1" with N = largest label + 1.
 *   - Files are read through the bounded cache of open files (fcache.h):
 *     all stay open when they fit in half of RLIMIT_NOFILE, else the
 *     least recently used are closed and reopened on demand.
 *   - GZIP/ZLIB TFRecord files (told by their first bytes; names may add
 *     .gz/.zz/.zlib) are inflated once into the index directory while
 *     their records are indexed and checked, and then read like plain
 *     files from that local copy (tfr_saved.h says how a copy is trusted).
 */
#define _GNU_SOURCE
#include "format.h"
#include "parse.h"
#include "tfr_saved.h"
#include "fcache.h"

#include <stdio.h>
#include <string.h>

#define TFR_DEFAULT_IMAGE "image/encoded"
#define TFR_DEFAULT_LABEL "image/class/label"

typedef struct tfr_sample {
    uint64_t offset;          /* of the record's framing */
    uint64_t length;          /* of its data */
    uint32_t file;
    uint32_t image_len;
    uint8_t bad;              /* failed at open: read reports why */
} tfr_sample;

typedef struct tfr_impl {
    const ch_source_ops *src;
    ch_ds_file *files;
    size_t nfiles;
    tfr_sample *samples;
    char *keys[2];            /* image key, label key */
    /* Typed fields from the extra_keys option: extra[k] is ds->fields[k]'s
     * feature key (the field's name), nextra of them. */
    const char *extra[CH_FIELD_MAX];
    uint32_t nextra;
    uint32_t unknown;         /* fields whose kind/shape no record has shown yet */
    char **inflated;          /* per file: its inflated copy (compressed files), or NULL */
    ch_fcache fc;             /* the files' handles, at most RLIMIT_NOFILE/2 open */
} tfr_impl;

/* "train-00000-of-01024": NAME-DIGITS-of-DIGITS at the end of the name. */
static int sharded_name(const char *s)
{
    const char *of = strstr(s, "-of-");
    if (!of)
        return 0;
    while (strstr(of + 1, "-of-"))
        of = strstr(of + 1, "-of-");
    const char *p = of;
    size_t before = 0;
    while (p > s && p[-1] >= '0' && p[-1] <= '9') {
        p--;
        before++;
    }
    if (!before || p == s || p[-1] != '-')
        return 0;
    const char *q = of + 4;
    if (!*q)
        return 0;
    for (; *q; q++)
        if (*q < '0' || *q > '9')
            return 0;
    return 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int tfr_plain_name(const char *name)
{
    return ends_with(name, ".tfrecord") || ends_with(name, ".tfrecords") || sharded_name(name);
}

/* A TFRecord name, or one with a compression suffix (.gz, .zz, .zlib:
 * GZIP or ZLIB, as the bytes say). */
static int tfr_name(const char *name)
{
    static const char *const sfx[] = {".gz", ".zz", ".zlib"};
    if (tfr_plain_name(name))
        return 1;
    for (size_t k = 0; k < sizeof sfx / sizeof *sfx; k++) {
        size_t a = strlen(name), b = strlen(sfx[k]);
        char stem[4096];
        if (a > b && a - b < sizeof stem && ends_with(name, sfx[k])) {
            memcpy(stem, name, a - b);
            stem[a - b] = '\0';
            if (tfr_plain_name(stem))
                return 1;
        }
    }
    return 0;
}

/* 1 if a GZIP/ZLIB file (first bytes in hdr) inflates to a TFRecord
 * header whose length CRC holds; reads at most 64 KiB. */
static int compressed_header_ok(const ch_source_ops *src, void *h, const char *path,
                                uint64_t size, const uint8_t *hdr)
{
    int comp = ch_tfx_compression(hdr, FMT_TFR_HEADER);
    if (comp == FMT_TFR_NONE)
        return 0;
    static const size_t cap = 64 << 10;
    size_t n = size < cap ? (size_t)size : cap;
    uint8_t *buf = malloc(n), out[FMT_TFR_HEADER];
    chute_error e = {0};
    int ok = buf && src->read_at(h, path, 0, buf, n, &e) == CHUTE_OK &&
             ch_tfx_inflate_head(buf, n, comp, out);
    free(buf);
    uint64_t len = 0;
    memcpy(&len, out, 8);
    return ok && fmt_tfr_check_header(out, len, path, 0, &e) == CHUTE_OK;
}

/* 1 if the file at path starts with a TFRecord header whose length CRC
 * holds, plain or after inflating (an empty file is not evidence of
 * anything: 0). */
static int header_ok(const ch_source_ops *src, const char *path)
{
    void *h = NULL;
    uint64_t size = 0;
    chute_error e = {0};
    if (ch_src_open(src, path, &h, &size, &e) != CHUTE_OK)
        return 0;
    uint8_t hdr[FMT_TFR_HEADER];
    int ok = size >= FMT_TFR_OVERHEAD &&
             src->read_at(h, path, 0, hdr, sizeof hdr, &e) == CHUTE_OK;
    uint64_t len = 0;
    memcpy(&len, hdr, 8); /* little-endian hosts only, as the rest of chute */
    if (ok && fmt_tfr_check_header(hdr, len, path, 0, &e) != CHUTE_OK)
        ok = compressed_header_ok(src, h, path, size, hdr);
    src->close(h);
    return ok;
}

static int tfr_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                     size_t n)
{
    char **v = NULL;
    size_t nv = 0;
    chute_error e = {0};
    if (!is_dir)
        return header_ok(src, path) ? CH_PROBE_LIKELY
                               : (snprintf(why, n, "no TFRecord header"), CH_PROBE_NO);
    if (ch_path_list(src, path, tfr_name, &v, &nv, &e) != CHUTE_OK || nv == 0) {
        ch_path_list_free(v, nv);
        snprintf(why, n, "no *.tfrecord, *.tfrecords or NAME-N-of-M files");
        return CH_PROBE_NO;
    }
    int ok = header_ok(src, v[0]);
    if (!ok)
        snprintf(why, n, "%s: no TFRecord header", v[0]);
    ch_path_list_free(v, nv);
    return ok ? CH_PROBE_LIKELY : CH_PROBE_NO;
}

/* The DALI index beside path, if any: into ix (CHUTE_ENOTFOUND if none). */
static int load_dali_index(const ch_source_ops *src, const char *path, uint64_t size,
                           fmt_tfr_index *ix, chute_error *err)
{
    char cand[2][4200];
    snprintf(cand[0], sizeof cand[0], "%s.idx", path);
    snprintf(cand[1], sizeof cand[1], "%s", path);
    char *dot = strrchr(cand[1], '.'), *slash = strrchr(cand[1], '/');
    int two = dot && (!slash || dot > slash) && strlen(cand[1]) + 4 < sizeof cand[1];
    if (two)
        strcpy(dot, ".idx");
    for (int k = 0; k < 1 + two; k++) {
        size_t len = 0;
        chute_error e = {0};
        int rc = ch_src_read_file(src, cand[k], NULL, 0, &len, &e);
        if (rc != CH_ESMALL && rc != CHUTE_OK)
            continue; /* absent or unreadable: scan instead */
        char *text = malloc(len + 1);
        if (!text)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for %s", cand[k]);
        rc = len ? ch_src_read_file(src, cand[k], text, len, &len, err) : CHUTE_OK;
        if (rc == CHUTE_OK) {
            text[len] = '\0';
            rc = fmt_tfr_index_parse_dali(text, len, cand[k], size, ix, err);
        }
        free(text);
        return rc;
    }
    return CHUTE_ENOTFOUND;
}

/* Check one record's bytes (the whole framed record in rec[16 + length])
 * and find its image and label.  Message names file@offset. */
static int parse_record(const tfr_impl *t, const char *path, uint64_t offset, uint64_t length,
                        const uint8_t *rec, const uint8_t **img, size_t *img_len, int64_t *label,
                        chute_error *err)
{
    int rc = fmt_tfr_check_header(rec, length, path, offset, err);
    if (rc == CHUTE_OK)
        rc = fmt_tfr_check_data(rec + FMT_TFR_HEADER, length, path, offset, err);
    if (rc != CHUTE_OK)
        return rc;
    fmt_pb_feature f[2];
    rc = fmt_pb_example_find(rec + FMT_TFR_HEADER, (size_t)length, (const char *const *)t->keys,
                             2, f, path, offset + FMT_TFR_HEADER, err);
    if (rc != CHUTE_OK)
        return rc;
    size_t pos = 0;
    if (f[0].kind != FMT_PB_BYTES || f[0].count < 1 || !fmt_pb_bytes_next(&f[0], &pos, img, img_len))
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: no bytes feature \"%s\" (the image)", path,
                      (unsigned long long)offset, t->keys[0]);
    if (label) {
        if (f[1].kind != FMT_PB_INT64 || f[1].count < 1 || fmt_pb_int64_decode(&f[1], label, 1) != 1)
            return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: no int64 feature \"%s\" (the label)",
                          path, (unsigned long long)offset, t->keys[1]);
    }
    return CHUTE_OK;
}

static int index_file(tfr_impl *t, uint32_t fi, uint64_t size, fmt_tfr_index *ix,
                      chute_error *err)
{
    ch_ds_file *f = &t->files[fi];
    int rc = load_dali_index(t->src, f->path, size, ix, err);
    if (rc != CHUTE_ENOTFOUND)
        return rc;
    fmt_reader r;
    rc = fmt_reader_source(&r, t->src, f->h, size, 0, f->path, err);
    fmt_tfr_opts o = {0};
    if (rc == CHUTE_OK)
        rc = fmt_tfr_index_build(&r, &o, ix, err);
    fmt_reader_free(&r);
    return rc;
}

static int fields_setup(chute_dataset *ds, tfr_impl *t, const chute_dataset_options *opt,
                        chute_error *err);
static int fields_learn(chute_dataset *ds, tfr_impl *t, const char *path, uint64_t offset,
                        uint64_t length, const uint8_t *rec, chute_error *err);
static int fields_check_learned(const chute_dataset *ds, const tfr_impl *t, const char *path,
                                chute_error *err);
/* What a saved index of the data file at path must match: its size (from
 * open), its mtime (from the source's stat) and the feature keys. */
static int tfx_want_for(const tfr_impl *t, const ch_source_ops *src, const char *path,
                        uint64_t size, ch_tfx_want *w, chute_error *err)
{
    ch_stat st;
    int rc = ch_src_stat(src, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    w->data_size = size;
    w->mtime_ns = st.mtime_ns;
    w->image_key = t->keys[0];
    w->label_key = t->keys[1];
    return CHUTE_OK;
}

/* GZIP, ZLIB or plain, by the first bytes of the open file f: a valid
 * plain header wins over a look-alike magic number. */
static int detect_compression(const tfr_impl *t, const ch_ds_file *f, uint64_t size, int *comp,
                              chute_error *err)
{
    uint8_t hdr[FMT_TFR_HEADER];
    *comp = FMT_TFR_NONE;
    if (size < sizeof hdr)
        return CHUTE_OK; /* too short for either: the scan says so */
    int rc = t->src->read_at(f->h, f->path, 0, hdr, sizeof hdr, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t len = 0;
    memcpy(&len, hdr, 8);
    chute_error e = {0};
    if (fmt_tfr_check_header(hdr, len, f->path, 0, &e) != CHUTE_OK)
        *comp = ch_tfx_compression(hdr, sizeof hdr);
    return CHUTE_OK;
}

/* A compressed file fi (open in f->h through t->src, fsize bytes): switch
 * f->h to its inflated copy (tfr_saved.h), reusing a copy whose saved
 * index holds (*have_saved, *saved), else inflating it now (*ix).
 * *out_size and *want are then the copy's. */
static int use_inflated(tfr_impl *t, uint32_t fi, int comp, uint64_t fsize, const char *index_dir,
                        uint64_t *out_size, ch_tfx_want *want, ch_tfx *saved, int *have_saved,
                        fmt_tfr_index *ix, chute_error *err)
{
    ch_ds_file *f = &t->files[fi];
    ch_stat st;
    int rc = ch_src_stat(t->src, f->path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    char copy[4600];
    if (!ch_tfx_inflated_path(f->path, index_dir, fsize, st.mtime_ns, copy, sizeof copy))
        return ch_err(err, CHUTE_EINVAL,
                      "%s: a %s-compressed TFRecord file is inflated once into the index "
                      "directory, and there is none (index_dir is \"\", or no HOME)",
                      f->path, comp == FMT_TFR_GZIP ? "GZIP" : "ZLIB");
    if (!t->inflated && !(t->inflated = calloc(t->nfiles, sizeof *t->inflated)))
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    if (!(t->inflated[fi] = strdup(copy)))
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    void *hc = NULL;
    uint64_t csize = 0;
    chute_error e = {0};
    if (ch_source_local.open(copy, &hc, &csize, &e) == CHUTE_OK) {
        rc = tfx_want_for(t, &ch_source_local, copy, csize, want, err);
        if (rc == CHUTE_OK &&
            ch_tfx_load(&ch_source_local, copy, "", want, saved, NULL, 0) == CHUTE_OK) {
            t->src->close(f->h);
            f->h = hc;
            t->fc.files[fi].open_path = t->inflated[fi]; /* f->h is the copy's now */
            *out_size = csize;
            *have_saved = 1;
            return CHUTE_OK;
        }
        ch_source_local.close(hc);
        if (rc != CHUTE_OK)
            return rc;
    }
    rc = ch_tfx_inflate(t->src, f->h, f->path, fsize, comp, copy, ix, err);
    if (rc != CHUTE_OK)
        return rc;
    t->src->close(f->h);
    f->h = NULL;
    rc = ch_source_local.open(copy, &f->h, &csize, err);
    if (rc == CHUTE_OK) {
        t->fc.files[fi].open_path = t->inflated[fi]; /* f->h is the copy's now */
        rc = tfx_want_for(t, &ch_source_local, copy, csize, want, err);
    }
    *out_size = csize;
    return rc;
}

static int tfr_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                    chute_error *err)
{
    tfr_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = t;
    t->src = ds->src;
    t->keys[0] = strdup(opt->image_key ? opt->image_key : TFR_DEFAULT_IMAGE);
    t->keys[1] = strdup(opt->label_key ? opt->label_key : TFR_DEFAULT_LABEL);
    if (!t->keys[0] || !t->keys[1])
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc0 = fields_setup(ds, t, opt, err);
    if (rc0 != CHUTE_OK)
        return rc0;
    int rc = ch_ds_files_list(ds->src, path, tfr_name,
                              "TFRecord files (*.tfrecord, *.tfrecords, NAME-N-of-M)", &t->files,
                              &t->nfiles, err);
    if (rc == CHUTE_OK)
        rc = ch_fcache_init(&t->fc, t->src, (uint32_t)t->nfiles, err);
    if (rc != CHUTE_OK)
        return rc;

    ch_buf buf = {0};
    uint64_t n = 0, cap = 0, nbad = 0;
    int64_t maxlabel = -1;
    chute_error first_bad = {0};
    for (uint32_t fi = 0; fi < t->nfiles && rc == CHUTE_OK; fi++) {
        ch_ds_file *f = &t->files[fi];
        uint64_t size = 0;
        t->fc.files[fi].path = f->path;
        rc = ch_fcache_open_scan(&t->fc, fi, &f->h, &size, err);
        /* A saved index (tfr_saved.h) spares reading every record. */
        ch_tfx saved = {0}, fresh = {0};
        ch_tfx_want want = {0};
        int have_saved = 0, comp = FMT_TFR_NONE;
        fmt_tfr_index ix = {0};
        const ch_source_ops *fsrc = t->src; /* where the records are read from */
        const char *ipath = f->path;        /* the file they are in */
        /* A saved index of the file itself first: then no byte of it is
         * read (a compressed file's index is its inflated copy's). */
        if (rc == CHUTE_OK)
            rc = tfx_want_for(t, fsrc, ipath, size, &want, err);
        if (rc == CHUTE_OK)
            have_saved = ch_tfx_load(fsrc, ipath, opt->index_dir, &want, &saved, NULL, 0) ==
                         CHUTE_OK;
        if (rc == CHUTE_OK && !have_saved)
            rc = detect_compression(t, f, size, &comp, err);
        if (rc == CHUTE_OK && comp != FMT_TFR_NONE) {
            t->fc.files[fi].src = fsrc = &ch_source_local;
            rc = use_inflated(t, fi, comp, size, opt->index_dir, &size, &want, &saved,
                              &have_saved, &ix, err);
            if (rc == CHUTE_OK)
                ipath = t->inflated[fi];
        } else if (rc == CHUTE_OK && !have_saved) {
            rc = index_file(t, fi, size, &ix, err);
        }
        uint64_t count = have_saved ? saved.count : ix.count;
        if (rc == CHUTE_OK && count > cap - n) {
            uint64_t nc = CH_MAX(cap * 2, n + count);
            tfr_sample *ns = nc > SIZE_MAX / sizeof *ns ? NULL : realloc(t->samples, nc * sizeof *ns);
            int32_t *nl = nc > SIZE_MAX / sizeof *nl ? NULL : realloc(ds->labels, nc * sizeof *nl);
            if (ns)
                t->samples = ns;
            if (nl)
                ds->labels = nl;
            if (!ns || !nl)
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %llu records",
                            (unsigned long long)nc);
            else
                cap = nc;
        }
        for (uint64_t k = 0; rc == CHUTE_OK && k < count; k++) {
            tfr_sample *s = &t->samples[n];
            s->offset = have_saved ? saved.recs[k].offset : ix.recs[k].offset;
            s->length = have_saved ? saved.recs[k].length : ix.recs[k].length;
            s->file = fi;
            s->bad = 0;
            ds->labels[n] = 0;
            const uint8_t *img;
            size_t img_len = 0;
            int64_t raw = 0;
            chute_error e = {0};
            int prc = CHUTE_OK;
            /* Typed fields whose shape is not known yet are learned from
             * the records themselves, which the saved index does not hold. */
            if (have_saved && !saved.recs[k].bad && !t->unknown) {
                raw = saved.recs[k].raw_label;
                img_len = saved.recs[k].image_len;
            } else {
                /* Scanning, or a record the index says is bad: read it
                 * (the latter for its message). */
                uint64_t whole = s->length + FMT_TFR_OVERHEAD; /* checked against the file size */
                if (whole > SIZE_MAX || ch_buf_reserve(&buf, (size_t)whole) != CHUTE_OK) {
                    rc = ch_err(err, CHUTE_ENOMEM, "%s@%llu: no memory for a %llu-byte record",
                                f->path, (unsigned long long)s->offset, (unsigned long long)whole);
                    break;
                }
                rc = fsrc->read_at(f->h, f->path, s->offset, buf.data, (size_t)whole, err);
                if (rc != CHUTE_OK)
                    break;
                prc = parse_record(t, f->path, s->offset, s->length, (const uint8_t *)buf.data,
                                   &img, &img_len, &raw, &e);
            }
            if (prc == CHUTE_OK && img_len > UINT32_MAX)
                prc = ch_err(&e, CHUTE_ELIMIT, "%s@%llu: image of %zu bytes", f->path,
                             (unsigned long long)s->offset, img_len);
            if (prc == CHUTE_OK) {
                char where[4300];
                snprintf(where, sizeof where, "%s@%llu", f->path, (unsigned long long)s->offset);
                rc = ch_ds_label(raw, opt, where, &ds->labels[n], err);
                if (rc != CHUTE_OK)
                    break;
                s->image_len = (uint32_t)img_len;
                if (ds->labels[n] > maxlabel)
                    maxlabel = ds->labels[n];
                if (t->unknown)
                    rc = fields_learn(ds, t, f->path, s->offset, s->length,
                                      (const uint8_t *)buf.data, err);
                if (rc != CHUTE_OK)
                    break;
            } else if (ch_error_kind(prc) == CH_ERR_CONTENT) {
                s->bad = 1;
                if (!nbad++)
                    first_bad = e;
            } else {
                *err = e;
                rc = prc;
            }
            if (!have_saved && rc == CHUTE_OK) {
                ch_tfx_rec r = {s->offset, s->length, raw, s->bad ? 0 : s->image_len, s->bad};
                if (ch_tfx_push(&fresh, &r) != CHUTE_OK)
                    rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
            }
            n++;
        }
        if (rc == CHUTE_OK && !have_saved) {
            chute_error se = {0}; /* best effort: an unsaved index is rebuilt next time */
            ch_tfx_save(fsrc, ipath, opt->index_dir, &want, &fresh, &se);
        }
        ch_tfx_free(&saved);
        ch_tfx_free(&fresh);
        fmt_tfr_index_free(&ix);
        if (rc == CHUTE_OK) { /* the cache holds or closes it from here */
            ch_fcache_keep(&t->fc, fi, f->h, size);
            f->h = NULL;
        }
    }
    ch_fcache_ready(&t->fc);
    ch_buf_free(&buf);
    ds->n = n;
    if (rc != CHUTE_OK)
        return rc;
    if (n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no records in %zu TFRecord file%s", path,
                      t->nfiles, t->nfiles == 1 ? "" : "s");
    if (nbad == n) {
        *err = first_bad;
        return ch_err(err, CHUTE_EFORMAT,
                      "%s: no record is readable as an image sample; the first: %s (feature keys "
                      "\"%s\" and \"%s\": set image_key/label_key if yours differ)",
                      path, first_bad.message, t->keys[0], t->keys[1]);
    }
    rc = fields_check_learned(ds, t, path, err);
    if (rc != CHUTE_OK)
        return rc;
    return ch_ds_synth_classes(ds, (uint32_t)(maxlabel + 1), err);
}

static int tfr_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                    chute_error *err)
{
    const tfr_impl *t = ds->impl;
    const tfr_sample *s = &t->samples[i];
    const ch_ds_file *f = &t->files[s->file];
    uint64_t whole = s->length + FMT_TFR_OVERHEAD;
    if (whole > cap) {
        *out_len = (size_t)whole;
        return CH_ESMALL;
    }
    void *h = NULL;
    int transient = 0;
    int rc = ch_fcache_acquire((ch_fcache *)&t->fc, s->file, &h, &transient, err);
    if (rc != CHUTE_OK)
        return rc;
    const ch_source_ops *fs = t->inflated && t->inflated[s->file] ? &ch_source_local : t->src;
    rc = fs->read_at(h, f->path, s->offset, buf, (size_t)whole, err);
    ch_fcache_release((ch_fcache *)&t->fc, s->file, h, transient);
    if (rc != CHUTE_OK)
        return rc;
    const uint8_t *img;
    size_t img_len = 0;
    rc = parse_record(t, f->path, s->offset, s->length, buf, &img, &img_len, NULL, err);
    if (rc != CHUTE_OK)
        return rc;
    memmove(buf, img, img_len);
    *out_len = img_len;
    return CHUTE_OK;
}

static uint64_t tfr_sample_size(const chute_dataset *ds, uint64_t i)
{
    const tfr_impl *t = ds->impl;
    return t->samples[i].bad ? t->samples[i].length : t->samples[i].image_len;
}

static void tfr_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const tfr_impl *t = ds->impl;
    snprintf(buf, n, "%s@%llu", t->files[t->samples[i].file].path,
             (unsigned long long)t->samples[i].offset);
}

static void tfr_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const tfr_impl *t = ds->impl;
    snprintf(buf, n, "%s", t->files[t->samples[i].file].path);
}

/* Unit of sample i for the shards shuffle mode: its file. */
static uint64_t tfr_unit_of(const chute_dataset *ds, uint64_t i)
{
    const tfr_impl *t = ds->impl;
    return t->samples[i].file;
}

static void tfr_close(void *impl)
{
    tfr_impl *t = impl;
    if (!t)
        return;
    for (size_t fi = 0; t->fc.files && fi < t->nfiles; fi++)
        if (t->fc.files[fi].open_path && t->files[fi].h) { /* an inflated copy's, mid-open */
            ch_source_local.close(t->files[fi].h);
            t->files[fi].h = NULL;
        }
    ch_fcache_free(&t->fc);
    for (size_t fi = 0; t->inflated && fi < t->nfiles; fi++)
        free(t->inflated[fi]);
    free(t->inflated);
    ch_ds_files_close(t->src, t->files, t->nfiles);
    free(t->samples);
    free(t->keys[0]);
    free(t->keys[1]);
    free(t);
}

/* ---- typed fields (extra_keys) -----------------------------------------
 * Each key in the dataset option extra_keys ("a,b,c") is a field named by
 * the key.  Its kind and shape come from the first readable record that
 * has it: an int64_list is an int64 field, a float_list a float32 field,
 * of that record's length (a length of 1 is a scalar, ndim 0, as
 * tf.io.FixedLenFeature([]) gives); a bytes_list holds one value, a bytes
 * field, or a .npy tensor when the key ends in ".npy".  A key no record
 * has fails the open.  Reading re-reads the record (both CRCs checked
 * again) and finds the keys again; a record whose value disagrees is
 * corrupt content naming file@offset and the key. */

static int ends_npy(const char *k)
{
    return ends_with(k, ".npy");
}

static int fields_setup(chute_dataset *ds, tfr_impl *t, const chute_dataset_options *opt,
                        chute_error *err)
{
    if (!opt->extra_keys)
        return CHUTE_OK;
    char names[CH_FIELD_MAX][CH_FIELD_NAME_MAX];
    int n = ch_split_names(opt->extra_keys, names, CH_FIELD_MAX);
    if (n < 0)
        return ch_err(err, CHUTE_EINVAL,
                      "extra_keys: more than %d keys, or one longer than %d bytes", CH_FIELD_MAX,
                      CH_FIELD_NAME_MAX - 1);
    for (int k = 0; k < n; k++) {
        if (ch_ds_field_find(ds, names[k]) >= 0)
            return ch_err(err, CHUTE_EINVAL, "extra_keys: \"%s\" is listed twice", names[k]);
        if (!strcmp(names[k], t->keys[0]) || !strcmp(names[k], t->keys[1]))
            return ch_err(err, CHUTE_EINVAL,
                          "extra_keys: \"%s\" is the image or label key (those come as images "
                          "and labels)", names[k]);
        if (ch_ds_field_add(ds, names[k], strlen(names[k]), 0, 0, err) < 0)
            return err->code;
    }
    for (int k = 0; k < n; k++) /* after every add: ds->fields moves as it grows */
        t->extra[k] = ds->fields[k].name;
    t->nextra = (uint32_t)n;
    t->unknown = (uint32_t)n;
    return CHUTE_OK;
}

static int fields_learn(chute_dataset *ds, tfr_impl *t, const char *path, uint64_t offset,
                        uint64_t length, const uint8_t *rec, chute_error *err)
{
    fmt_pb_feature f[CH_FIELD_MAX];
    chute_error e = {0};
    if (fmt_pb_example_find(rec + FMT_TFR_HEADER, (size_t)length, t->extra, t->nextra, f, path,
                            offset + FMT_TFR_HEADER, &e) != CHUTE_OK)
        return CHUTE_OK; /* it parsed for the image; a failure here is not this record's to learn */
    (void)err;
    for (uint32_t k = 0; k < t->nextra; k++) {
        ch_field *fd = &ds->fields[k];
        if (fd->known)
            continue;
        if (f[k].kind == FMT_PB_INT64 || f[k].kind == FMT_PB_FLOAT) {
            fd->kind = f[k].kind == FMT_PB_INT64 ? CHUTE_FIELD_INT64 : CHUTE_FIELD_FLOAT32;
            fd->dtype = f[k].kind == FMT_PB_INT64 ? CHUTE_DTYPE_INT64 : CHUTE_DTYPE_FLOAT32;
            if (f[k].count == 0 || f[k].count > (uint64_t)INT32_MAX)
                continue; /* an empty list says nothing of the length */
            fd->ndim = f[k].count == 1 ? 0 : 1;
            fd->shape[0] = f[k].count == 1 ? 0 : (int64_t)f[k].count;
        } else if (f[k].kind == FMT_PB_BYTES && f[k].count == 1) {
            size_t pos = 0, vn = 0;
            const uint8_t *v;
            fmt_pb_bytes_next(&f[k], &pos, &v, &vn);
            if (ends_npy(fd->name)) {
                ch_npy_info a;
                if (ch_npy_parse(v, vn, path, offset, &a, &e) != CHUTE_OK)
                    continue;
                fd->kind = CHUTE_FIELD_TENSOR;
                ch_field_from_npy(fd, &a, NULL);
            } else {
                fd->kind = CHUTE_FIELD_BYTES;
                fd->dtype = CHUTE_DTYPE_UINT8;
                fd->ndim = 1;
                fd->shape[0] = -1;
            }
        } else {
            continue;
        }
        fd->known = 1;
        snprintf(fd->origin, sizeof fd->origin, "learned from %s@%llu", path,
                 (unsigned long long)offset);
        t->unknown--;
    }
    return CHUTE_OK;
}

static int fields_check_learned(const chute_dataset *ds, const tfr_impl *t, const char *path,
                                chute_error *err)
{
    for (uint32_t k = 0; k < t->nextra; k++)
        if (!ds->fields[k].known)
            return ch_err(err, CHUTE_EFORMAT,
                          "%s: extra key \"%s\": no readable record has it as an int64_list, a "
                          "float_list or a bytes_list of one value%s",
                          path, t->extra[k], ends_npy(t->extra[k]) ? " holding a valid .npy" : "");
    return CHUTE_OK;
}

/* Decode the features f[] (found by fmt_pb_example_find for the fields'
 * names, in field order) into the caller's buffers: shared by the
 * TFRecord format and TFRecord records on streams (parse.h).  `where`
 * ("file@offset") starts every message. */
int fmt_tfr_fields_decode(const ch_field *fields, const fmt_pb_feature *f, const ch_field_req *req,
                          size_t nreq, const char *where, const char *name, uint64_t offset,
                          chute_error *err)
{
    for (size_t q = 0; q < nreq; q++) {
        uint32_t k = req[q].field;
        const ch_field *fd = &fields[k];
        const fmt_pb_feature *ft = &f[k];
        if (fd->kind == CHUTE_FIELD_INT64 || fd->kind == CHUTE_FIELD_FLOAT32) {
            int is_int = fd->kind == CHUTE_FIELD_INT64;
            uint64_t want = fd->ndim ? (uint64_t)fd->shape[0] : 1;
            if ((ft->kind == FMT_PB_INT64 || ft->kind == FMT_PB_FLOAT) &&
                (ft->kind != (is_int ? FMT_PB_INT64 : FMT_PB_FLOAT) || ft->count != want)) {
                /* a list of another length or type is the data varying, not damage */
                char got[80];
                snprintf(got, sizeof got, "%s of %llu value%s",
                         ft->kind == FMT_PB_INT64 ? "an int64_list" : "a float_list",
                         (unsigned long long)ft->count, ft->count == 1 ? "" : "s");
                return ch_field_varies(fd, where, got, err);
            }
            if (ft->kind != (is_int ? FMT_PB_INT64 : FMT_PB_FLOAT))
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s: feature \"%s\": %s of %llu values, the dataset's field "
                              "is %s of %llu",
                              where, fd->name,
                              ft->kind == FMT_PB_MISSING ? "missing, not a list"
                              : ft->kind == FMT_PB_INT64 ? "an int64_list"
                              : ft->kind == FMT_PB_FLOAT ? "a float_list"
                                                         : "another list",
                              (unsigned long long)ft->count, is_int ? "int64" : "float32",
                              (unsigned long long)want);
            if (is_int)
                fmt_pb_int64_decode(ft, req[q].dst, (size_t)want);
            else
                fmt_pb_float_decode(ft, req[q].dst, (size_t)want);
            continue;
        }
        const uint8_t *v = NULL;
        size_t vn = 0, pos = 0;
        if (ft->kind != FMT_PB_BYTES || ft->count != 1 || !fmt_pb_bytes_next(ft, &pos, &v, &vn))
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s: feature \"%s\": not a bytes_list of one value", where,
                          fd->name);
        if (fd->kind == CHUTE_FIELD_BYTES) {
            if (vn > req[q].cap)
                return ch_err(err, CHUTE_ELIMIT,
                              "%s: feature \"%s\" of %zu bytes is over field_bytes (%zu)",
                              where, fd->name, vn, req[q].cap);
            memcpy(req[q].dst, v, vn);
            memset((uint8_t *)req[q].dst + vn, 0, req[q].cap - vn);
            *req[q].len = (int64_t)vn;
        } else {
            ch_npy_info a;
            chute_error e = {0};
            int rc = ch_npy_parse(v, vn, name, offset, &a, &e);
            if (rc != CHUTE_OK)
                return ch_err(err, rc, "%s: feature \"%s\": %s", where, fd->name, e.message);
            rc = ch_npy_check(&a, fd, where, err);
            if (rc != CHUTE_OK)
                return rc;
            memcpy(req[q].dst, v + a.data_offset, (size_t)a.data_bytes);
        }
    }
    return CHUTE_OK;
}

static int tfr_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                           size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    const tfr_impl *t = ds->impl;
    const tfr_sample *s = &t->samples[i];
    const ch_ds_file *fl = &t->files[s->file];
    uint64_t whole = s->length + FMT_TFR_OVERHEAD;
    if (whole > max_bytes || whole > SIZE_MAX)
        return ch_err(err, CHUTE_ELIMIT, "%s@%llu: record of %llu bytes is over %llu", fl->path,
                      (unsigned long long)s->offset, (unsigned long long)whole,
                      (unsigned long long)max_bytes);
    if (ch_buf_reserve(scratch, (size_t)whole) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %llu-byte record",
                      (unsigned long long)whole);
    const uint8_t *rec = scratch->data;
    void *h = NULL;
    int transient = 0;
    int rc = ch_fcache_acquire((ch_fcache *)&t->fc, s->file, &h, &transient, err);
    if (rc != CHUTE_OK)
        return rc;
    const ch_source_ops *fs = t->inflated && t->inflated[s->file] ? &ch_source_local : t->src;
    rc = fs->read_at(h, fl->path, s->offset, scratch->data, (size_t)whole, err);
    ch_fcache_release((ch_fcache *)&t->fc, s->file, h, transient);
    if (rc == CHUTE_OK)
        rc = fmt_tfr_check_header(rec, s->length, fl->path, s->offset, err);
    if (rc == CHUTE_OK)
        rc = fmt_tfr_check_data(rec + FMT_TFR_HEADER, s->length, fl->path, s->offset, err);
    fmt_pb_feature f[CH_FIELD_MAX];
    if (rc == CHUTE_OK)
        rc = fmt_pb_example_find(rec + FMT_TFR_HEADER, (size_t)s->length, t->extra, t->nextra, f,
                                 fl->path, s->offset + FMT_TFR_HEADER, err);
    if (rc != CHUTE_OK)
        return rc;
    char where[4400];
    snprintf(where, sizeof where, "%s@%llu", fl->path, (unsigned long long)s->offset);
    return fmt_tfr_fields_decode(ds->fields, f, req, nreq, where, fl->path, s->offset, err);
}

/* Read-ahead (format.h): the whole framed record; from_bytes checks both
 * CRCs and walks the Example as read() does. */
static int tfr_locate(const chute_dataset *ds, uint64_t i, ch_locator *out, chute_error *err)
{
    const tfr_impl *t = ds->impl;
    const tfr_sample *s = &t->samples[i];
    const ch_ds_file *f = &t->files[s->file];
    if (t->inflated && t->inflated[s->file])
        return CH_LOC_NONE; /* read from a local copy, not through ds->src */
    void *h = NULL;
    int transient = 0;
    int rc = ch_fcache_acquire((ch_fcache *)&t->fc, s->file, &h, &transient, err);
    if (rc != CHUTE_OK)
        return rc;
    out->h = h;
    out->path = f->path;
    out->off = s->offset;
    out->len = s->length + FMT_TFR_OVERHEAD;
    out->file = s->file;
    out->pin = (uint32_t)transient;
    return CHUTE_OK;
}

/* The handle tfr_locate took from the open-file cache goes back. */
static void tfr_unlocate(const chute_dataset *ds, ch_locator *loc)
{
    const tfr_impl *t = ds->impl;
    ch_fcache_release((ch_fcache *)&t->fc, (uint32_t)loc->file, loc->h, (int)loc->pin);
    loc->h = NULL;
}

static int tfr_from_bytes(const chute_dataset *ds, uint64_t i, const uint8_t *raw, size_t len,
                          const uint8_t **out, size_t *out_len, chute_error *err)
{
    const tfr_impl *t = ds->impl;
    const tfr_sample *s = &t->samples[i];
    const ch_ds_file *f = &t->files[s->file];
    if (len != s->length + FMT_TFR_OVERHEAD)
        return ch_err(err, CHUTE_EIO, "%s@%llu: read %zu bytes of a %llu-byte record", f->path,
                      (unsigned long long)s->offset, len,
                      (unsigned long long)(s->length + FMT_TFR_OVERHEAD));
    return parse_record(t, f->path, s->offset, s->length, raw, out, out_len, NULL, err);
}

const ch_format_ops ch_format_tfrecord = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "tfrecord",
    .probe = tfr_probe,
    .open = tfr_open,
    .read = tfr_read,
    .sample_size = tfr_sample_size,
    .describe = tfr_describe,
    .file_of = tfr_file_of,
    .close = tfr_close,
    .unit_of = tfr_unit_of,
    .read_fields = tfr_read_fields,
    .locate = tfr_locate,
    .unlocate = tfr_unlocate,
    .from_bytes = tfr_from_bytes,
};
