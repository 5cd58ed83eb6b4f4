/*
 * publish.c — pack and convert into s3://bucket/prefix/.
 *
 * Why staging, and why this order.  S3 has no rename and no directory
 * lock, so the local crash-safety recipe (temporary names, rename, fsync
 * of the directory, flock on OUT_DIR) does not carry over.  What carries
 * over is its one promise: a reader never sees a half-written dataset as
 * complete.  For the chute format the manifest is what makes a prefix a
 * dataset (a prefix without "chute.manifest" does not open), so:
 *
 *   1. the dataset is written by the ordinary local engine (pack.c,
 *      writers.c) into a private staging directory under $TMPDIR, with
 *      every check, skip rule and verification they make;
 *   2. an old dataset at the prefix is replaced only when asked (`force`):
 *      its manifest is deleted first (it stops opening at once), then the
 *      objects of any writer that the new dataset does not have;
 *   3. every data file is uploaded (one PUT, or a multipart upload above
 *      the part size: src/io/remote/s3_write.c), and only then the manifest;
 *   4. the result is opened from s3:// through its reader and counted.
 *
 * pack (the chute format) streams: each shard is handed over by pack.c
 * (ch_pack_to_sink) the moment it is complete, uploaded by one uploader
 * thread while the next shard is being written, and removed from the
 * staging directory once uploaded.  At most one finished shard waits or
 * uploads while the pack writes the next (the pack blocks otherwise), so
 * staging holds at most two shards, not the dataset, and the upload's
 * time hides behind the packing's.  Because shards now reach the prefix
 * before the pack ends, with `force` the old manifest is deleted before
 * the first upload (step 2 moves ahead of step 1: the old dataset stops
 * opening when the pack starts, not when it ends), and a pack that fails
 * deletes the shards it uploaded (best effort; never a manifest).
 * convert still stages the whole dataset: its writers keep every file
 * under a temporary name until all are complete (writer.h).
 *
 * A pack killed or failing anywhere before step 3's last request leaves no
 * manifest, so nothing opens; a multipart upload that fails is aborted.
 * TFRecord and WebDataset have no manifest: a reader lists the prefix,
 * so an interrupted upload of those is a smaller dataset, not a marked
 * incomplete one (their index files go after the data they index).
 *
 * Concurrency.  There is no lock on a prefix: two publishers to one
 * prefix are refused by the existence check when one has finished before
 * the other starts, and otherwise race (the last manifest wins, and it
 * only names shards its own pack uploaded under the same names, so the
 * dataset that opens is one of the two, but --force is what a user says
 * when racing is acceptable).  Staging costs local disk equal to the
 * dataset for convert, two shards for pack; a SIGKILLed pack leaves its
 * staging directory ($TMPDIR/chute-stage-*) behind, and the shards it had
 * uploaded (no manifest: nothing opens).
 */
#define _GNU_SOURCE
#include "writer.h"
#include "../io/remote.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ch_publish_is_remote(const char *dst)
{
    return dst && (!strncmp(dst, "s3://", 5) || !strncmp(dst, "http://", 7) ||
                   !strncmp(dst, "https://", 8));
}

#ifndef CHUTE_HAVE_CURL

int ch_publish_pack(const char *root, const char *dst, const chute_pack_options *o,
                    chute_pack_result *res, chute_error *err)
{
    (void)root, (void)o, (void)res;
    return ch_err(err, CHUTE_EUNSUPPORTED, "%s: this build has no S3 support (libcurl)", dst);
}

int ch_publish_convert(const char *src, const char *dst, const chute_convert_options *o,
                       chute_convert_result *res, chute_error *err)
{
    (void)src, (void)o, (void)res;
    return ch_err(err, CHUTE_EUNSUPPORTED, "%s: this build has no S3 support (libcurl)", dst);
}

int ch_publish_open(const char *dst, int force, ch_publish **out, const char **stage,
                    chute_error *err)
{
    (void)force, (void)out, (void)stage;
    return ch_err(err, CHUTE_EUNSUPPORTED, "%s: this build has no S3 support (libcurl)", dst);
}

int ch_publish_finish(ch_publish *p, const char *reader, int32_t label_offset, uint64_t samples,
                      chute_error *err)
{
    (void)p, (void)reader, (void)label_offset, (void)samples;
    return ch_err(err, CHUTE_EUNSUPPORTED, "this build has no S3 support (libcurl)");
}

void ch_publish_free(ch_publish *p)
{
    (void)p;
}

#else

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int names_add(names *s, const char *name)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 32;
        char **t = realloc(s->v, c * sizeof *t);
        if (!t)
            return -1;
        s->v = t;
        s->cap = c;
    }
    if (!(s->v[s->n] = strdup(name)))
        return -1;
    s->n++;
    return 0;
}

static int names_has(const names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], name))
            return 1;
    return 0;
}

static void names_free(names *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A name some writer puts in a dataset directory. */
static int dataset_name(const char *name)
{
    if (!strcmp(name, CH_MANIFEST_NAME))
        return 1;
    for (size_t i = 0; ch_writers[i]; i++)
        if (ch_writers[i]->owns(name))
            return 1;
    return 0;
}

typedef struct publish {
    char base[4096];   /* "s3://bucket/prefix" without trailing '/' */
    char stage[4096];  /* local staging directory */
    ch_remote *rs;
    names old;         /* dataset objects already at the prefix */
    int force;
    int old_manifest_gone; /* deleted before streaming uploads began */
    names up;          /* uploaded by the streaming uploader (removed from stage) */
} publish;

static int old_entry(void *user, const char *name, const ch_stat *st)
{
    names *s = user;
    if (st->type == CH_ENT_FILE && dataset_name(name))
        return names_add(s, name) ? -1 : 0;
    return 0;
}

static void rm_stage(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char p[8192];
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void publish_end(publish *p)
{
    if (p->stage[0])
        rm_stage(p->stage);
    ch_remote_free(p->rs);
    names_free(&p->old);
    names_free(&p->up);
}

/* Check the destination, make the staging directory. */
static int publish_begin(publish *p, const char *src, const char *dst, int force,
                         chute_error *err)
{
    memset(p, 0, sizeof *p);
    p->force = force;
    if (strncmp(dst, "s3://", 5))
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "%s: only s3:// destinations can be written (HTTP has no upload)", dst);
    size_t n = strlen(dst);
    while (n > 5 && dst[n - 1] == '/')
        n--;
    if (n >= sizeof p->base - 300)
        return ch_err(err, CHUTE_EINVAL, "%s: the destination is too long", dst);
    memcpy(p->base, dst, n);
    p->base[n] = '\0';
    if (!strchr(p->base + 5, '/'))
        return ch_err(err, CHUTE_EINVAL,
                      "%s: give a prefix inside the bucket (s3://bucket/prefix/), not the bucket",
                      dst);
    if (src) { /* convert s3://a/x -> s3://a/x/y (or the other way) would eat its source */
        size_t sn = strlen(src);
        while (sn > 5 && src[sn - 1] == '/')
            sn--;
        size_t m = CH_MIN(sn, n);
        if (!strncmp(src, p->base, m) && (sn == n || (sn > n ? src[n] : p->base[sn]) == '/'))
            return ch_err(err, CHUTE_EINVAL,
                          "%s: the destination may not be the source, inside it or contain it",
                          dst);
    }
    int rc = ch_remote_new(p->base, &p->rs, err);
    if (rc)
        return rc;
    const ch_source_ops *s3 = ch_source_for(p->base);
    chute_error e = {0};
    rc = s3 ? ch_src_list(s3, p->base, old_entry, &p->old, &e) : CHUTE_EUNSUPPORTED;
    if (rc == CHUTE_ENOTFOUND) {
        rc = CHUTE_OK; /* an empty prefix */
    } else if (rc) {
        if (err)
            *err = e;
        return rc;
    }
    if (p->old.n && !force)
        return ch_err(err, CHUTE_EINVAL,
                      "%s: holds a dataset already (%zu of its objects, e.g. '%s'); it is never "
                      "replaced unless asked (--force)",
                      p->base, p->old.n, p->old.v[0]);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    if ((size_t)snprintf(p->stage, sizeof p->stage, "%s/chute-stage-XXXXXX", tmp) >=
        sizeof p->stage - 300) {
        p->stage[0] = '\0';
        return ch_err(err, CHUTE_EINVAL, "TMPDIR %s: too long", tmp);
    }
    if (!mkdtemp(p->stage)) {
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot make a staging directory", p->stage);
        p->stage[0] = '\0';
        return rc;
    }
    return CHUTE_OK;
}

static int key_of(const publish *p, const char *name, char *out, size_t cap, chute_error *err)
{
    if ((size_t)snprintf(out, cap, "%s/%s", p->base, name) >= cap)
        return ch_err(err, CHUTE_EINVAL, "%s/%s: too long", p->base, name);
    return CHUTE_OK;
}

/* Upload the staged dataset: old dataset out of the way (force), data,
 * then the manifest; then open it from s3:// and count its samples. */
static int publish_commit(publish *p, const char *reader, int32_t label_offset, uint64_t samples,
                          chute_error *err)
{
    names now = {0};
    int rc = CHUTE_OK;
    DIR *d = opendir(p->stage);
    if (!d)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list", p->stage);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && rc == CHUTE_OK)
        if (dataset_name(de->d_name) && names_add(&now, de->d_name))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    closedir(d);
    for (size_t i = 0; rc == CHUTE_OK && i < p->up.n; i++)
        if (!names_has(&now, p->up.v[i]) && names_add(&now, p->up.v[i]))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    if (rc == CHUTE_OK && now.n == 0)
        rc = ch_err(err, CHUTE_EINVAL, "%s: nothing was written to upload", p->stage);
    if (rc == CHUTE_OK)
        qsort(now.v, now.n, sizeof *now.v, cmp_str);
    char key[8192], file[8192];
    /* 2. The old manifest first, then what the new dataset will not overwrite. */
    if (rc == CHUTE_OK && names_has(&p->old, CH_MANIFEST_NAME) && !p->old_manifest_gone &&
        (rc = key_of(p, CH_MANIFEST_NAME, key, sizeof key, err)) == CHUTE_OK)
        rc = ch_remote_delete(p->rs, key, err);
    for (size_t i = 0; rc == CHUTE_OK && i < p->old.n; i++)
        if (strcmp(p->old.v[i], CH_MANIFEST_NAME) && !names_has(&now, p->old.v[i]) &&
            (rc = key_of(p, p->old.v[i], key, sizeof key, err)) == CHUTE_OK)
            rc = ch_remote_delete(p->rs, key, err);
    /* 3. Data (TFRecord index files sort after their data files), manifest last. */
    uint64_t part = ch_remote_part_bytes();
    for (int pass = 0; pass < 2 && rc == CHUTE_OK; pass++)
        for (size_t i = 0; rc == CHUTE_OK && i < now.n; i++) {
            int is_manifest = !strcmp(now.v[i], CH_MANIFEST_NAME);
            if (is_manifest != pass || names_has(&p->up, now.v[i]))
                continue;
            snprintf(file, sizeof file, "%s/%s", p->stage, now.v[i]);
            rc = key_of(p, now.v[i], key, sizeof key, err);
            if (rc == CHUTE_OK)
                rc = ch_remote_upload_file(p->rs, key, file, part, err);
        }
    names_free(&now);
    if (rc)
        return rc;
    /* 4. It opens from where readers will open it, with every sample. */
    chute_dataset_options dso = {0};
    dso.format = reader;
    dso.label_offset = label_offset;
    chute_dataset *ds = NULL;
    chute_error e = {0};
    char url[4200];
    snprintf(url, sizeof url, "%s/", p->base);
    rc = chute_dataset_open_ex(url, &dso, &ds, &e);
    if (rc)
        return ch_err(err, rc, "the uploaded dataset does not open: %s", e.message);
    if (chute_dataset_size(ds) != samples)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: the uploaded dataset has %llu samples, %llu were "
                                         "written",
                    url, (unsigned long long)chute_dataset_size(ds), (unsigned long long)samples);
    chute_dataset_close(ds);
    return rc;
}

/* ---- streaming pack: one uploader thread behind the packer ---- */

/* Finished shards waiting for or in upload at once; the pack blocks on a
 * further one.  1: one shard uploads while the next is written. */
#define PUBLISH_MAX_PENDING 1

typedef struct uploader {
    publish *p;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* queue changed, or an upload ended */
    char *q[PUBLISH_MAX_PENDING]; /* bare names in the staging dir, FIFO */
    unsigned qh, qn;        /* queued, not yet taken */
    unsigned pending;       /* queued + uploading */
    int quit;
    int rc;                 /* the first upload failure */
    chute_error err;
    pthread_t th;
    int started;
} uploader;

static void *uploader_main(void *arg)
{
    uploader *u = arg;
    pthread_mutex_lock(&u->mu);
    for (;;) {
        while (!u->qn && !u->quit)
            pthread_cond_wait(&u->cv, &u->mu);
        if (!u->qn)
            break;
        char *name = u->q[u->qh];
        u->qh = (u->qh + 1) % PUBLISH_MAX_PENDING;
        u->qn--;
        int failed = u->rc != CHUTE_OK;
        pthread_mutex_unlock(&u->mu);
        int rc = CHUTE_OK;
        chute_error e = {0};
        if (!failed) { /* after a failure the rest is dropped: the pack is ending */
            char key[8192], file[8192];
            snprintf(file, sizeof file, "%s/%s", u->p->stage, name);
            rc = key_of(u->p, name, key, sizeof key, &e);
            if (rc == CHUTE_OK)
                rc = ch_remote_upload_file(u->p->rs, key, file, ch_remote_part_bytes(), &e);
            if (rc == CHUTE_OK) {
                unlink(file); /* uploaded: staging holds no more than it must */
                if (names_add(&u->p->up, name))
                    rc = ch_err(&e, CHUTE_ENOMEM, "out of memory");
            }
        }
        free(name);
        pthread_mutex_lock(&u->mu);
        if (rc != CHUTE_OK && u->rc == CHUTE_OK) {
            u->rc = rc;
            u->err = e;
        }
        u->pending--;
        pthread_cond_broadcast(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

/* ch_pack_sink.shard_done: queue the shard, waiting while one is pending. */
static int uploader_shard_done(void *user, const char *path, const char *name, chute_error *err)
{
    uploader *u = user;
    (void)path;
    char *dup = strdup(name);
    if (!dup)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    pthread_mutex_lock(&u->mu);
    while (u->pending >= PUBLISH_MAX_PENDING && u->rc == CHUTE_OK)
        pthread_cond_wait(&u->cv, &u->mu);
    int rc = u->rc;
    if (rc != CHUTE_OK) {
        if (err)
            *err = u->err;
        free(dup);
    } else {
        u->q[(u->qh + u->qn) % PUBLISH_MAX_PENDING] = dup;
        u->qn++;
        u->pending++;
        pthread_cond_signal(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    return rc;
}

static int uploader_start(uploader *u, publish *p, chute_error *err)
{
    memset(u, 0, sizeof *u);
    u->p = p;
    if (pthread_mutex_init(&u->mu, NULL))
        return ch_err(err, CHUTE_ENOMEM, "cannot make a mutex");
    if (pthread_cond_init(&u->cv, NULL)) {
        pthread_mutex_destroy(&u->mu);
        return ch_err(err, CHUTE_ENOMEM, "cannot make a condition variable");
    }
    int e = pthread_create(&u->th, NULL, uploader_main, u);
    if (e) {
        pthread_cond_destroy(&u->cv);
        pthread_mutex_destroy(&u->mu);
        return ch_err_errno(err, CHUTE_ENOMEM, e, "cannot start the uploader thread");
    }
    u->started = 1;
    return CHUTE_OK;
}

/* Wait for every queued upload; the first failure, if any. */
static int uploader_finish(uploader *u, chute_error *err)
{
    if (!u->started)
        return CHUTE_OK;
    pthread_mutex_lock(&u->mu);
    u->quit = 1;
    pthread_cond_broadcast(&u->cv);
    pthread_mutex_unlock(&u->mu);
    pthread_join(u->th, NULL);
    pthread_cond_destroy(&u->cv);
    pthread_mutex_destroy(&u->mu);
    u->started = 0;
    if (u->rc != CHUTE_OK && err)
        *err = u->err;
    return u->rc;
}

/* A failed streaming pack: take back what it uploaded (best effort). */
static void unpublish(publish *p)
{
    char key[8192];
    if (!p->up.n)
        return;
    /* A manifest there now is this pack's (an old one was deleted before
     * the first upload): it goes first, so nothing half-deleted opens. */
    if (key_of(p, CH_MANIFEST_NAME, key, sizeof key, NULL) == CHUTE_OK)
        ch_remote_delete(p->rs, key, NULL);
    for (size_t i = 0; i < p->up.n; i++)
        if (key_of(p, p->up.v[i], key, sizeof key, NULL) == CHUTE_OK)
            ch_remote_delete(p->rs, key, NULL);
}

int ch_publish_pack(const char *root, const char *dst, const chute_pack_options *o,
                    chute_pack_result *res, chute_error *err)
{
    publish p;
    chute_pack_result r = {0};
    int rc = publish_begin(&p, NULL, dst, o ? o->force : 0, err);
    /* Shards reach the prefix while packing: an old manifest must not
     * name them first (force; without it publish_begin refused). */
    char key[8192];
    if (rc == CHUTE_OK && names_has(&p.old, CH_MANIFEST_NAME) &&
        (rc = key_of(&p, CH_MANIFEST_NAME, key, sizeof key, err)) == CHUTE_OK &&
        (rc = ch_remote_delete(p.rs, key, err)) == CHUTE_OK)
        p.old_manifest_gone = 1;
    uploader u = {0};
    if (rc == CHUTE_OK)
        rc = uploader_start(&u, &p, err);
    if (rc == CHUTE_OK) {
        ch_pack_sink sink = {uploader_shard_done, &u};
        rc = ch_pack_to_sink(root, p.stage, o, &sink, &r, err);
        chute_error ue = {0};
        int urc = uploader_finish(&u, &ue);
        if (rc == CHUTE_OK && urc != CHUTE_OK) {
            rc = urc;
            if (err)
                *err = ue;
        }
    }
    if (rc == CHUTE_OK)
        rc = publish_commit(&p, "shards", 0, r.files, err);
    if (rc != CHUTE_OK && p.rs)
        unpublish(&p);
    publish_end(&p);
    if (rc == CHUTE_OK && res)
        *res = r;
    return rc;
}

/* ---- the streaming writer (chute_writer_open): stage, then commit ---- */

struct ch_publish {
    publish p;
};

int ch_publish_open(const char *dst, int force, ch_publish **out, const char **stage,
                    chute_error *err)
{
    ch_publish *h = malloc(sizeof *h);
    if (!h)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = publish_begin(&h->p, NULL, dst, force, err);
    if (rc) {
        publish_end(&h->p);
        free(h);
        return rc;
    }
    *out = h;
    *stage = h->p.stage;
    return CHUTE_OK;
}

int ch_publish_finish(ch_publish *h, const char *reader, int32_t label_offset, uint64_t samples,
                      chute_error *err)
{
    return publish_commit(&h->p, reader, label_offset, samples, err);
}

void ch_publish_free(ch_publish *h)
{
    if (!h)
        return;
    publish_end(&h->p);
    free(h);
}

int ch_publish_convert(const char *src, const char *dst, const chute_convert_options *o,
                       chute_convert_result *res, chute_error *err)
{
    publish p;
    chute_convert_result r = {0};
    int rc = publish_begin(&p, src, dst, o ? o->force : 0, err);
    if (rc == CHUTE_OK)
        rc = chute_convert(src, p.stage, o, &r, err);
    if (rc == CHUTE_OK) {
        const ch_writer_ops *wr = ch_writer_find(r.format);
        int chute_fmt = !strcmp(r.format, "chute");
        rc = publish_commit(&p, wr ? wr->reader : NULL, chute_fmt || !o ? 0 : -o->label_offset,
                            r.samples, err);
    }
    publish_end(&p);
    if (rc == CHUTE_OK && res)
        *res = r;
    return rc;
}

#endif
