/*
 * writers.c — chute_convert: any readable dataset into any writable format.
 *
 * The engine reads the source through the public dataset API (so every
 * registered reader is a source: tree, shards, tfrecord, wds, and any
 * format added later) one sample at a time, in the source's order, and
 * hands each to a writer (writer.h).  It is single-threaded on purpose:
 * converting is a one-off job bounded by the disk, the image bytes pass
 * through unchanged (no decode unless `validate` asks), and one thread
 * keeps the output order and the memory bound (one sample, one record)
 * trivially true.  pack keeps its thread pool for the tree, where every
 * file is decode-checked.
 *
 * What is skipped and what fails follows pack: a sample the source calls
 * damaged (CHUTE_ECORRUPT/EFORMAT/ELIMIT: a bad CRC, a record over the
 * size limit) or whose image header does not parse is content, skipped
 * and counted (or fatal under `strict`); an I/O error is retried, then
 * fails the convert naming the sample.  Out of memory is fatal.
 *
 * Crash safety and concurrency are pack's: the same flock on
 * DST/chute.lock (pack.c), old output removed first (the manifest before
 * anything else, so a chute dataset stops opening at once), files written
 * under ".chute-w-*.tmp" names that no reader lists (ch_outset below),
 * renamed only when all are complete, then the result opened through its
 * reader and counted.  SRC is only ever read; DST may not be SRC, inside
 * it, or contain it.
 */
#define _GNU_SOURCE
#include "writer.h"
#include "../codec/codec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The one list of writers: a new output format is a file + a line here. */
const ch_writer_ops *const ch_writers[] = {
    &ch_writer_chute,     /* chute shards + manifest (write_chute.c) */
    &ch_writer_tfrecord,  /* TFRecord of tf.train.Example + DALI index (write_tfrecord.c) */
    &ch_writer_wds,       /* WebDataset tar shards (write_wds.c) */
    NULL,
};

const ch_writer_ops *ch_writer_find(const char *name)
{
    for (size_t k = 0; name && ch_writers[k]; k++)
        if (strcmp(ch_writers[k]->name, name) == 0)
            return ch_writers[k];
    return NULL;
}

const char *chute_writer_name(uint32_t k)
{
    for (uint32_t i = 0; ch_writers[i]; i++)
        if (i == k)
            return ch_writers[i]->name;
    return NULL;
}

/* ------------------------------------------------------------------ */
/* ch_outset                                                           */
/* ------------------------------------------------------------------ */

#define OUTSET_BUF (1u << 20)

void ch_outset_init(ch_outset *o, const char *dir)
{
    memset(o, 0, sizeof *o);
    o->dir = dir;
    o->fd = -1;
}

int ch_outset_begin(ch_outset *o, chute_error *err)
{
    if (o->fd >= 0)
        return ch_err(err, CHUTE_EINVAL, "internal: a writer file is still open");
    if (!o->buf && !(o->buf = malloc(OUTSET_BUF)))
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    o->bcap = OUTSET_BUF;
    if (o->n == o->cap) {
        uint32_t c = o->cap ? o->cap * 2 : 16;
        char **t = realloc(o->tmp, c * sizeof *t);
        if (!t)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        o->tmp = t;
        o->cap = c;
    }
    char *p = NULL;
    if (asprintf(&p, "%s/" CH_OUTSET_TMP_PREFIX "%06u.tmp", o->dir, o->n) < 0)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot create", p);
        free(p);
        return rc;
    }
    o->tmp[o->n++] = p;
    o->fd = fd;
    o->blen = 0;
    o->bytes = 0;
    return CHUTE_OK;
}

static int outset_flush(ch_outset *o, chute_error *err)
{
    int rc = ch_write_all(o->fd, o->tmp[o->n - 1], o->buf, o->blen, err);
    o->blen = 0;
    return rc;
}

int ch_outset_write(ch_outset *o, const void *p, size_t n, chute_error *err)
{
    if (o->fd < 0)
        return ch_err(err, CHUTE_EINVAL, "internal: no writer file is open");
    o->bytes += n;
    if (o->blen + n <= o->bcap) {
        memcpy(o->buf + o->blen, p, n);
        o->blen += n;
        return CHUTE_OK;
    }
    int rc = outset_flush(o, err);
    if (rc)
        return rc;
    if (n >= o->bcap)
        return ch_write_all(o->fd, o->tmp[o->n - 1], p, n, err);
    memcpy(o->buf, p, n);
    o->blen = n;
    return CHUTE_OK;
}

int ch_outset_end(ch_outset *o, chute_error *err)
{
    if (o->fd < 0)
        return CHUTE_OK;
    const char *path = o->tmp[o->n - 1];
    int rc = outset_flush(o, err);
    if (rc == CHUTE_OK && fsync(o->fd) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: fsync failed", path);
    if (close(o->fd) != 0 && rc == CHUTE_OK)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: close failed", path);
    o->fd = -1;
    return rc;
}

int ch_outset_publish(ch_outset *o, uint32_t k, const char *final_name, chute_error *err)
{
    if (k >= o->n || !o->tmp[k])
        return ch_err(err, CHUTE_EINVAL, "internal: writer file %u is not there to publish", k);
    char fin[4096];
    if ((size_t)snprintf(fin, sizeof fin, "%s/%s", o->dir, final_name) >= sizeof fin)
        return ch_err(err, CHUTE_EINVAL, "%s/%s: path too long", o->dir, final_name);
    if (rename(o->tmp[k], fin) != 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: rename to %s failed", o->tmp[k], fin);
    free(o->tmp[k]);
    o->tmp[k] = NULL;
    return CHUTE_OK;
}

void ch_outset_free(ch_outset *o)
{
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    for (uint32_t k = 0; k < o->n; k++)
        if (o->tmp[k]) {
            unlink(o->tmp[k]);
            free(o->tmp[k]);
        }
    free(o->tmp);
    free(o->buf);
    o->tmp = NULL;
    o->buf = NULL;
    o->n = o->cap = 0;
}

/* ------------------------------------------------------------------ */
/* The engine                                                          */
/* ------------------------------------------------------------------ */

#define CONVERT_READ_TRIES 3

/* Is `name` something a writer leaves in a directory: any writer's
 * output, an outset temporary, or one of pack's temporaries? */
static int writer_file(const char *name)
{
    unsigned k;
    if (strncmp(name, CH_OUTSET_TMP_PREFIX, strlen(CH_OUTSET_TMP_PREFIX)) == 0 ||
        ch_packfile_kind(name, &k) == CH_PACKFILE_TEMP)
        return 1;
    for (size_t i = 0; ch_writers[i]; i++)
        if (ch_writers[i]->owns(name))
            return 1;
    return 0;
}

/* Remove every writer's files from dir (under the lock): the manifest
 * first and durably, so a chute dataset there stops opening before any
 * of its shards goes. */
static int remove_output(const char *dir, chute_error *err)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, CH_MANIFEST_NAME);
    if (unlink(p) != 0 && errno != ENOENT)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot remove the old manifest", p);
    int rc = ch_fsync_dir(dir, err);
    if (rc)
        return rc;
    DIR *d = opendir(dir);
    if (!d)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list", dir);
    struct dirent *de;
    errno = 0;
    while (rc == CHUTE_OK && (de = readdir(d)) != NULL) {
        if (!writer_file(de->d_name)) {
            errno = 0;
            continue;
        }
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0 && errno != ENOENT)
            rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot remove an old output file", p);
        errno = 0;
    }
    if (rc == CHUTE_OK && errno != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list", dir);
    closedir(d);
    if (rc == CHUTE_OK)
        rc = ch_fsync_dir(dir, err);
    return rc;
}

typedef struct convert_run {
    const chute_convert_options *o;
    const ch_writer_ops *wr;
    chute_dataset *ds;
    const char *src, *dst;
    uint64_t t0;
    ch_buf buf;
    uint64_t written, bytes, skipped;
    uint32_t files;
} convert_run;

static int is_content(int rc)
{
    return rc == CHUTE_ECORRUPT || rc == CHUTE_EFORMAT || rc == CHUTE_ELIMIT ||
           rc == CHUTE_EUNSUPPORTED;
}

/* Read sample i, retrying I/O errors.  CHUTE_OK, a content status (err
 * says why), or a fatal one. */
static int read_sample(convert_run *r, uint64_t i, size_t *len, chute_error *err)
{
    int rc = CHUTE_OK;
    for (int attempt = 0; attempt < CONVERT_READ_TRIES; attempt++) {
        if (attempt) {
            struct timespec ts = {0, attempt * 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        rc = ch_ds_read_buf(r->ds, i, &r->buf, CHUTE_DEFAULT_MAX_SAMPLE_BYTES, len, err);
        if (rc == CHUTE_OK || is_content(rc) || rc == CHUTE_ENOMEM)
            return rc;
    }
    char msg[sizeof err->message];
    snprintf(msg, sizeof msg, "%s", err->message);
    return ch_err(err, rc, "%s (I/O error, not a content problem; %d tries)", msg,
                  CONVERT_READ_TRIES);
}

/* A damaged sample: skipped and reported, or fatal under strict. */
static int skip_sample(convert_run *r, uint64_t i, const char *reason, chute_error *err)
{
    char where[4096];
    chute_dataset_describe(r->ds, i, where, sizeof where);
    if (r->o->strict)
        return ch_err(err, CHUTE_ECORRUPT, "%s: %s (strict)", where, reason);
    r->skipped++;
    if (r->o->on_skip)
        r->o->on_skip(where, reason, r->o->user);
    return CHUTE_OK;
}

static int convert_samples(convert_run *r, void *w, chute_error *err)
{
    const chute_convert_options *o = r->o;
    uint64_t n = chute_dataset_size(r->ds);
    chute_pack_progress pr = {0};
    pr.files_total = n;
    char where[4096];
    for (uint64_t i = 0; i < n; i++) {
        size_t len = 0;
        chute_error e = {0};
        int rc = read_sample(r, i, &len, &e);
        pr.files_done++;
        if (rc == CHUTE_OK) {
            ch_writer_sample s = {0};
            s.data = r->buf.data;
            s.len = len;
            s.kind = ch_sniff(s.data, len);
            int fmt = 0;
            rc = chute_image_header(s.data, len, &s.width, &s.height, &s.channels, &fmt, &e);
            if (rc == CHUTE_OK && o->validate)
                rc = chute_probe_image(s.data, len, CHUTE_DEFAULT_MAX_PIXELS, NULL, NULL, NULL,
                                       &e);
            if (rc == CHUTE_OK) {
                int64_t lab = chute_dataset_label(r->ds, i);
                s.index = r->written;
                s.label = (int32_t)lab;
                s.class_name = chute_dataset_class_name(r->ds, (uint32_t)lab);
                chute_dataset_describe(r->ds, i, where, sizeof where);
                s.origin = where;
                rc = r->wr->add(w, &s, err);
                if (rc)
                    return rc;
                r->written++;
                r->bytes += len;
                pr.bytes_done += len;
            } else if (is_content(rc)) {
                rc = skip_sample(r, i, e.message, err);
            } else {
                chute_dataset_describe(r->ds, i, where, sizeof where);
                return ch_err(err, rc, "%s: %s", where, e.message);
            }
        } else if (is_content(rc)) {
            rc = skip_sample(r, i, e.message, err);
        } else {
            return ch_err(err, rc, "%s", e.message);
        }
        if (rc)
            return rc;
        if (o->progress) {
            pr.skipped = r->skipped;
            pr.seconds = (ch_now_ns() - r->t0) / 1e9;
            if (o->progress(&pr, o->user))
                return ch_err(err, CHUTE_EINTERRUPTED, "convert cancelled");
        }
    }
    if (r->written == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no sample to write (%llu skipped as damaged)",
                      r->src, (unsigned long long)r->skipped);
    return CHUTE_OK;
}

/* The output opens through its reader and has every sample written. */
static int verify_output(convert_run *r, chute_error *err)
{
    chute_dataset_options dso = {0};
    dso.format = r->wr->reader;
    dso.label_offset = -r->o->label_offset;
    if (strcmp(r->wr->name, "chute") == 0)
        dso.label_offset = 0;
    chute_dataset *out = NULL;
    chute_error e = {0};
    int rc = chute_dataset_open_ex(r->dst, &dso, &out, &e);
    if (rc != CHUTE_OK)
        return ch_err(err, rc, "the written dataset does not open: %s", e.message);
    if (chute_dataset_size(out) != r->written)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: the written dataset has %llu samples, %llu were written",
                    r->dst, (unsigned long long)chute_dataset_size(out),
                    (unsigned long long)r->written);
    chute_dataset_close(out);
    return rc;
}

static int convert_locked(convert_run *r, chute_error *err)
{
    int rc = remove_output(r->dst, err);
    if (rc)
        return rc;
    ch_writer_cfg cfg = {0};
    cfg.dir = r->dst;
    cfg.shard_size = r->o->shard_size;
    cfg.label_offset = r->o->label_offset;
    cfg.prefix = r->o->prefix;
    cfg.key_prefix = r->o->key_prefix;
    cfg.align = r->o->align;
    cfg.total = chute_dataset_size(r->ds);
    cfg.nclasses = chute_dataset_num_classes(r->ds);
    char **names = calloc(cfg.nclasses ? cfg.nclasses : 1, sizeof *names);
    if (!names)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (uint32_t c = 0; c < cfg.nclasses; c++)
        names[c] = (char *)chute_dataset_class_name(r->ds, c);
    cfg.class_names = names;
    void *w = NULL;
    rc = r->wr->open(&cfg, &w, err);
    if (rc == CHUTE_OK) {
        rc = convert_samples(r, w, err);
        if (rc == CHUTE_OK)
            rc = r->wr->finish(w, &r->files, err);
        else
            r->wr->abort(w);
    }
    free(names);
    if (rc == CHUTE_OK)
        rc = ch_fsync_dir(r->dst, err);
    if (rc == CHUTE_OK)
        rc = verify_output(r, err);
    if (rc != CHUTE_OK)
        remove_output(r->dst, NULL); /* never leave a half-written dataset that opens */
    return rc;
}

/* The options convert applies, checked the same way. */
static int convert_defaults(chute_convert_options *o, const ch_writer_ops **out_wr,
                            chute_error *err)
{
    const char *fname = o->format ? o->format : "chute";
    const ch_writer_ops *wr = ch_writer_find(fname);
    if (!wr) {
        char names[256] = "";
        size_t len = 0;
        for (size_t k = 0; ch_writers[k] && len < sizeof names; k++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "",
                                    ch_writers[k]->name);
        return ch_err(err, CHUTE_EINVAL, "unknown output format '%s' (chute writes: %s)", fname,
                      names);
    }
    if (!o->shard_size)
        o->shard_size = 256ull << 20;
    if (!o->align)
        o->align = 4096;
    if (!o->prefix || !*o->prefix)
        o->prefix = "train";
    if (strchr(o->prefix, '/') || strlen(o->prefix) > 200)
        return ch_err(err, CHUTE_EINVAL, "prefix '%s': a file name (no '/', at most 200 bytes)",
                      o->prefix);
    if (o->align < 64 || (o->align & (o->align - 1)))
        return ch_err(err, CHUTE_EINVAL, "align %u is not a power of two >= 64", o->align);
    if (!o->key_prefix)
        o->key_prefix = "";
    if (*o->key_prefix && wr != &ch_writer_wds)
        return ch_err(err, CHUTE_EINVAL, "key_prefix '%s': only the wds format has sample keys",
                      o->key_prefix);
    size_t kl = strlen(o->key_prefix);
    if (kl > 64 || strspn(o->key_prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-") != kl)
        return ch_err(err, CHUTE_EINVAL,
                      "key_prefix '%.80s': letters, digits, '_' and '-' only, at most 64 bytes "
                      "(a WebDataset key ends at its first '.', and '/' would be a directory)",
                      o->key_prefix);
    *out_wr = wr;
    return CHUTE_OK;
}

int chute_convert(const char *src, const char *dst, const chute_convert_options *opt,
                  chute_convert_result *out_result, chute_error *err)
{
    if (!src || !dst)
        return ch_err(err, CHUTE_EINVAL, "chute_convert: src and dst are required");
    chute_convert_options o = opt ? *opt : (chute_convert_options){0};
    const ch_writer_ops *wr = NULL;
    int rc = convert_defaults(&o, &wr, err);
    if (rc)
        return rc;

    if (ch_publish_is_remote(dst)) /* s3://: staged here, uploaded (publish.c) */
        return ch_publish_convert(src, dst, &o, out_result, err);
    convert_run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.wr = wr;
    r.src = src;
    r.dst = dst;
    r.t0 = ch_now_ns();
    rc = ch_pack_check_paths(src, dst, err);
    if (rc)
        return rc;
    chute_dataset_options dso = o.source ? *o.source : (chute_dataset_options){0};
    rc = chute_dataset_open_ex(src, &dso, &r.ds, err);
    if (rc)
        return rc;
    rc = ch_mkdir_p(dst, err);
    int fd = -1, waited = 0;
    if (rc == CHUTE_OK)
        rc = ch_pack_lock(dst, o.no_wait, o.on_wait, o.user, &fd, &waited, err);
    if (rc == CHUTE_OK)
        rc = convert_locked(&r, err);
    ch_pack_unlock(dst, fd);
    if (rc == CHUTE_OK && out_result) {
        chute_convert_result res = {0};
        res.samples = r.written;
        res.bytes = r.bytes;
        res.skipped = r.skipped;
        res.files = r.files;
        res.classes = chute_dataset_num_classes(r.ds);
        res.seconds = (ch_now_ns() - r.t0) / 1e9;
        res.format = wr->name;
        *out_result = res;
    }
    ch_buf_free(&r.buf);
    chute_dataset_close(r.ds);
    return rc;
}

/* ------------------------------------------------------------------ */
/* The streaming writer: the engine with the caller as the source      */
/* ------------------------------------------------------------------ */

/* chute_writer_open .. finish drive the same ch_writer_ops the convert
 * drives, with the same directory contract (lock, old output removed,
 * temporaries renamed only at finish, the result opened through its
 * reader and counted), the same per-sample header check, and for s3://
 * the same staging and upload (publish.c).  What changes is who supplies
 * the samples: the caller, one at a time, with its own labels. */
struct chute_writer {
    chute_convert_options o;
    const ch_writer_ops *wr;
    void *w;                 /* the format writer; NULL once finished or failed */
    char *dst;               /* as given */
    char *dir;               /* the local directory written: dst, or the stage */
    char *prefix;
    char *key_prefix;
    ch_publish *pub;         /* s3:// dst: the staging and upload */
    int lock_fd;
    int failed;              /* a write failed: only abort is left */
    int finished;
    uint32_t nclasses;
    char **class_names;
    uint64_t written, bytes;
    uint32_t files;
    char **names;            /* after finish: the files written, sorted */
    uint32_t nnames;
    uint64_t t0;
    char origin[48];         /* "sample N": the record's name and error prefix */
};

static void writer_free(chute_writer *w)
{
    for (uint32_t c = 0; c < w->nclasses; c++)
        free(w->class_names[c]);
    free(w->class_names);
    for (uint32_t k = 0; k < w->nnames; k++)
        free(w->names[k]);
    free(w->names);
    free(w->dst);
    free(w->dir);
    free(w->prefix);
    free(w->key_prefix);
    free(w);
}

int chute_writer_open(const char *dst, const chute_convert_options *opt, uint32_t nclasses,
                      const char *const *class_names, chute_writer **out, chute_error *err)
{
    if (!dst || !out)
        return ch_err(err, CHUTE_EINVAL, "chute_writer_open: dst and out are required");
    *out = NULL;
    if (nclasses && !class_names)
        return ch_err(err, CHUTE_EINVAL, "chute_writer_open: %u classes and no names", nclasses);
    chute_writer *w = calloc(1, sizeof *w);
    if (!w)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    w->lock_fd = -1;
    w->t0 = ch_now_ns();
    w->o = opt ? *opt : (chute_convert_options){0};
    w->o.source = NULL;
    int rc = convert_defaults(&w->o, &w->wr, err);
    if (rc == CHUTE_OK && (!(w->prefix = strdup(w->o.prefix)) || !(w->dst = strdup(dst)) ||
                           !(w->key_prefix = strdup(w->o.key_prefix)) ||
                           !(w->class_names = calloc(nclasses ? nclasses : 1, sizeof(char *)))))
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    w->o.prefix = w->prefix;
    w->o.key_prefix = w->key_prefix;
    for (uint32_t c = 0; rc == CHUTE_OK && c < nclasses; c++) {
        if (!class_names[c])
            rc = ch_err(err, CHUTE_EINVAL, "chute_writer_open: class %u has no name", c);
        else if (!(w->class_names[c] = strdup(class_names[c])))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        else
            w->nclasses = c + 1;
    }
    if (rc == CHUTE_OK && !nclasses && w->wr == &ch_writer_chute)
        rc = ch_err(err, CHUTE_EINVAL,
                    "%s: the chute format stores a class table in every shard: give the class "
                    "names (label k is name k)", dst);
    const char *dir = dst;
    if (rc == CHUTE_OK && ch_publish_is_remote(dst))
        rc = ch_publish_open(dst, w->o.force, &w->pub, &dir, err);
    if (rc == CHUTE_OK && !(w->dir = strdup(dir)))
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    if (rc == CHUTE_OK && !w->pub) {
        int waited = 0;
        rc = ch_mkdir_p(dst, err);
        if (rc == CHUTE_OK)
            rc = ch_pack_lock(dst, w->o.no_wait, w->o.on_wait, w->o.user, &w->lock_fd, &waited,
                              err);
        if (rc == CHUTE_OK)
            rc = remove_output(dst, err);
    }
    if (rc == CHUTE_OK) {
        ch_writer_cfg cfg = {0};
        cfg.dir = w->dir;
        cfg.shard_size = w->o.shard_size;
        cfg.label_offset = w->o.label_offset;
        cfg.prefix = w->prefix;
        cfg.key_prefix = w->key_prefix;
        cfg.align = w->o.align;
        cfg.total = 0; /* not known: the caller streams */
        cfg.nclasses = w->nclasses;
        cfg.class_names = w->class_names;
        rc = w->wr->open(&cfg, &w->w, err);
    }
    if (rc != CHUTE_OK) {
        w->failed = 1;
        chute_writer_abort(w);
        return rc;
    }
    *out = w;
    return CHUTE_OK;
}

int chute_writer_add(chute_writer *w, const void *data, size_t len, int32_t label,
                     chute_error *err)
{
    if (!w || (!data && len))
        return ch_err(err, CHUTE_EINVAL, "chute_writer_add: writer and data are required");
    if (w->finished || w->failed || !w->w)
        return ch_err(err, CHUTE_EINVAL, "%s: the writer is %s", w->dst,
                      w->finished ? "finished" : "failed (abort it)");
    snprintf(w->origin, sizeof w->origin, "sample %llu", (unsigned long long)w->written);
    if (w->nclasses && (label < 0 || (uint32_t)label >= w->nclasses))
        return ch_err(err, CHUTE_EINVAL, "%s: label %d is not a class (0..%u)", w->origin,
                      (int)label, w->nclasses - 1);
    ch_writer_sample s = {0};
    s.data = data;
    s.len = len;
    s.kind = ch_sniff(data, len);
    int fmt = 0;
    chute_error e = {0};
    int rc = chute_image_header(data, len, &s.width, &s.height, &s.channels, &fmt, &e);
    if (rc == CHUTE_OK && w->o.validate)
        rc = chute_probe_image(data, len, CHUTE_DEFAULT_MAX_PIXELS, NULL, NULL, NULL, &e);
    if (rc != CHUTE_OK) /* refused, not written: the writer goes on */
        return ch_err(err, rc, "%s (%zu bytes): %s", w->origin, len, e.message);
    s.index = w->written;
    s.label = label;
    s.class_name = w->nclasses ? w->class_names[label] : NULL;
    s.origin = w->origin;
    rc = w->wr->add(w->w, &s, err);
    if (rc != CHUTE_OK) { /* the open file may hold part of it: no more writes */
        w->failed = 1;
        return rc;
    }
    w->written++;
    w->bytes += len;
    return CHUTE_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The writer's files in its directory (the manifest is not a data file). */
static int list_written(chute_writer *w, chute_error *err)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list", w->dir);
    uint32_t cap = 0;
    int rc = CHUTE_OK;
    struct dirent *de;
    while (rc == CHUTE_OK && (de = readdir(d)) != NULL) {
        if (!w->wr->owns(de->d_name) || !strcmp(de->d_name, CH_MANIFEST_NAME))
            continue;
        if (w->nnames == cap) {
            uint32_t c = cap ? cap * 2 : 16;
            char **t = realloc(w->names, c * sizeof *t);
            if (!t) {
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                break;
            }
            w->names = t;
            cap = c;
        }
        if (!(w->names[w->nnames] = strdup(de->d_name)))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        else
            w->nnames++;
    }
    closedir(d);
    if (rc == CHUTE_OK && w->nnames)
        qsort(w->names, w->nnames, sizeof *w->names, cmp_name);
    return rc;
}

int chute_writer_finish(chute_writer *w, chute_convert_result *out_result, chute_error *err)
{
    if (!w)
        return ch_err(err, CHUTE_EINVAL, "chute_writer_finish: no writer");
    if (w->finished || w->failed || !w->w)
        return ch_err(err, CHUTE_EINVAL, "%s: the writer is %s", w->dst,
                      w->finished ? "finished" : "failed (abort it)");
    w->failed = 1; /* until it has all worked */
    if (w->written == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no sample was written", w->dst);
    void *fw = w->w;
    w->w = NULL; /* finish frees it, whatever it returns */
    int rc = w->wr->finish(fw, &w->files, err);
    if (rc == CHUTE_OK)
        rc = ch_fsync_dir(w->dir, err);
    if (rc == CHUTE_OK)
        rc = list_written(w, err);
    int32_t lo = strcmp(w->wr->name, "chute") ? -w->o.label_offset : 0;
    if (rc == CHUTE_OK && w->pub) {
        rc = ch_publish_finish(w->pub, w->wr->reader, lo, w->written, err);
    } else if (rc == CHUTE_OK) {
        convert_run r;
        memset(&r, 0, sizeof r);
        r.o = &w->o;
        r.wr = w->wr;
        r.dst = w->dst;
        r.written = w->written;
        rc = verify_output(&r, err);
    }
    if (rc != CHUTE_OK)
        return rc;
    w->failed = 0;
    w->finished = 1;
    if (out_result) {
        chute_convert_result res = {0};
        res.samples = w->written;
        res.bytes = w->bytes;
        res.files = w->files;
        res.classes = w->nclasses;
        res.seconds = (ch_now_ns() - w->t0) / 1e9;
        res.format = w->wr->name;
        *out_result = res;
    }
    return CHUTE_OK;
}

uint32_t chute_writer_file_count(const chute_writer *w)
{
    return w && w->finished ? w->nnames : 0;
}

const char *chute_writer_file(const chute_writer *w, uint32_t k)
{
    return w && w->finished && k < w->nnames ? w->names[k] : NULL;
}

void chute_writer_abort(chute_writer *w)
{
    if (!w)
        return;
    if (w->w)
        w->wr->abort(w->w);
    w->w = NULL;
    /* Not finished: nothing it wrote may stay (a chute shard is renamed
     * when complete, before the manifest; a failed finish may have
     * renamed some files).  Old output was removed at open, so every
     * writer file in dst is this writer's. */
    if (!w->finished && !w->pub && w->lock_fd >= 0)
        remove_output(w->dst, NULL);
    if (w->lock_fd >= 0)
        ch_pack_unlock(w->dst, w->lock_fd);
    ch_publish_free(w->pub); /* the stage goes; uploads made by a failed finish stay (publish.c) */
    writer_free(w);
}
