/*
 * pack.c — chute_pack: an ImageFolder tree becomes a shard directory.
 *
 * Files are taken in the tree's sample order (so sample i of the shards
 * is sample i of the tree, minus skipped files) in windows: a pool of
 * threads reads and decode-checks one window while nothing else runs,
 * then this thread appends the window's good files to the current shard
 * in order.  Checking decodes JPEGs at 1/8 scale: every Huffman code is
 * still decoded, so truncation and corruption are caught, at a fraction
 * of a full decode's cost.
 *
 * Only files whose *content* is bad (undecodable, over a limit) are left
 * out and reported; a file that cannot be read (I/O error, vanished) or
 * memory running out fails the pack with that status, since leaving such
 * a file out would silently make a smaller dataset.
 *
 * Crash safety: the old manifest is removed first, shards are written as
 * "*.tmp" and renamed when complete and synced, and the new manifest is
 * written (tmp + fsync + rename + fsync dir) only after every shard is
 * in place.  A directory without a manifest never opens as a dataset, and
 * re-running pack after any interruption rewrites everything.
 */
#define _GNU_SOURCE
#include "../codec/codec.h"
#include "format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct pack_item {
    ch_buf data;
    size_t len;
    int ok;
    int code;                 /* status when !ok: content errors skip, others fail */
    int kind;
    char reason[512];
} pack_item;

typedef struct pack_job {
    const ch_tree_list *list;
    const char *root;
    uint64_t base, count;     /* current window */
    pack_item *items;
    _Atomic uint64_t next;
    uint64_t max_pixels;
    int validate;
    /* thread pool handshake */
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    uint64_t round;
    uint32_t busy;
    int quit;
} pack_job;

static void check_one(pack_job *j, ch_decoder *dec, ch_buf *pix, uint64_t i)
{
    pack_item *it = &j->items[i - j->base];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", j->root, j->list->paths[i]);
    chute_error err = {0};
    it->ok = 0;
    it->code = CHUTE_OK;
    it->reason[0] = '\0';
    size_t len = 0;
    int rc = ch_source_local.read_file(path, it->data.data, it->data.cap, &len, &err);
    if (rc == CH_ESMALL) {
        if (len > 0xFFFFFFFFu) {
            it->code = CHUTE_ELIMIT;
            snprintf(it->reason, sizeof it->reason, "%zu bytes is too large for a shard record",
                     len);
            return;
        }
        if (ch_buf_reserve(&it->data, len) != CHUTE_OK) {
            it->code = CHUTE_ENOMEM;
            snprintf(it->reason, sizeof it->reason, "out of memory for %zu bytes", len);
            return;
        }
        rc = ch_source_local.read_file(path, it->data.data, it->data.cap, &len, &err);
    }
    if (rc != CHUTE_OK) {
        it->code = rc == CH_ESMALL ? CHUTE_EIO : rc;
        snprintf(it->reason, sizeof it->reason, "%s", rc == CH_ESMALL ? "file changed size" : err.message);
        return;
    }
    it->len = len;
    it->kind = ch_sniff(it->data.data, len);
    if (it->kind == CH_IMG_UNKNOWN) {
        it->code = CHUTE_EFORMAT;
        snprintf(it->reason, sizeof it->reason, "not a JPEG or PNG image (%s)",
                 ch_sniff_name(it->data.data, len));
        return;
    }
    if (j->validate) {
        ch_image_info info;
        rc = ch_decoder_begin(dec, it->data.data, len, j->max_pixels, &info, &err);
        if (rc == CHUTE_OK) {
            uint32_t denom = info.kind == CH_IMG_JPEG ? 8 : 1, sw, sh;
            ch_decoder_scaled_size(dec, denom, &sw, &sh);
            ch_image img;
            rc = ch_decoder_finish(dec, denom, 0, 0, sw, sh, pix, &img, &err);
        }
        if (rc != CHUTE_OK) {
            it->code = rc;
            snprintf(it->reason, sizeof it->reason, "%s", err.message);
            return;
        }
    }
    it->ok = 1;
}

static void *pack_thread(void *arg)
{
    pack_job *j = arg;
    ch_decoder *dec = NULL;
    ch_buf pix = {0};
    int have_dec = ch_decoder_create(&dec) == CHUTE_OK;
    uint64_t seen = 0;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->quit && j->round == seen)
            pthread_cond_wait(&j->cv_start, &j->mu);
        if (j->quit)
            break;
        seen = j->round;
        pthread_mutex_unlock(&j->mu);
        for (;;) {
            uint64_t k = atomic_fetch_add(&j->next, 1);
            if (k >= j->count)
                break;
            if (have_dec) {
                check_one(j, dec, &pix, j->base + k);
            } else {
                j->items[k].ok = 0;
                j->items[k].code = CHUTE_ENOMEM;
                snprintf(j->items[k].reason, sizeof j->items[k].reason,
                         "out of memory for a decoder");
            }
        }
        pthread_mutex_lock(&j->mu);
        if (--j->busy == 0)
            pthread_cond_signal(&j->cv_done);
    }
    pthread_mutex_unlock(&j->mu);
    ch_decoder_destroy(dec);
    ch_buf_free(&pix);
    return NULL;
}

/* Remove leftovers of earlier runs: temporary files and shards that the
 * new manifest will not list (names at or past `keep`). */
static void remove_stale(const char *dir, uint32_t keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        unsigned k = 0;
        int kind = ch_packfile_kind(n, &k);
        int stale = kind == CH_PACKFILE_TEMP || (kind == CH_PACKFILE_SHARD && k >= keep);
        if (stale) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, n);
            unlink(p);
        }
    }
    closedir(d);
}

typedef struct shard_rec {
    uint64_t samples, bytes;
} shard_rec;

static int write_manifest(const char *dir, const shard_rec *recs, uint32_t n, chute_error *err)
{
    char tmp[4096], fin[4096];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, CH_MANIFEST_NAME);
    snprintf(fin, sizeof fin, "%s/%s", dir, CH_MANIFEST_NAME);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot create", tmp);
    size_t cap = 64 + (size_t)n * 80, len = 0;
    char *txt = malloc(cap);
    if (!txt) {
        close(fd);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    uint64_t total = 0;
    len += (size_t)snprintf(txt + len, cap - len, "chute-dataset 1\n");
    for (uint32_t k = 0; k < n; k++) {
        len += (size_t)snprintf(txt + len, cap - len, "shard shard-%05u.chute %llu %llu\n", k,
                                (unsigned long long)recs[k].samples,
                                (unsigned long long)recs[k].bytes);
        total += recs[k].samples;
    }
    len += (size_t)snprintf(txt + len, cap - len, "end %u %llu\n", n, (unsigned long long)total);
    int rc = ch_write_all(fd, tmp, txt, len, err);
    free(txt);
    if (rc == CHUTE_OK && fsync(fd) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: fsync failed", tmp);
    close(fd);
    if (rc == CHUTE_OK && rename(tmp, fin) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: rename failed", tmp);
    if (rc == CHUTE_OK)
        rc = ch_fsync_dir(dir, err);
    if (rc != CHUTE_OK)
        unlink(tmp);
    return rc;
}

/* Finish the open shard number k and record its sample count and size. */
static int close_shard(ch_shard_writer *w, const char *out_dir, uint32_t k, shard_rec **recs,
                       uint32_t *nrecs, uint32_t *cap, chute_error *err)
{
    uint64_t count = ch_shard_writer_count(w);
    if (*nrecs == *cap) {
        uint32_t c = *cap ? *cap * 2 : 16;
        shard_rec *r2 = realloc(*recs, c * sizeof *r2);
        if (!r2) {
            ch_shard_writer_abort(w);
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        }
        *recs = r2;
        *cap = c;
    }
    int rc = ch_shard_writer_finish(w, err);
    if (rc)
        return rc;
    char sp[4096];
    snprintf(sp, sizeof sp, "%s/shard-%05u.chute", out_dir, k);
    struct stat st;
    if (stat(sp, &st) != 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot stat the new shard", sp);
    (*recs)[*nrecs].samples = count;
    (*recs)[*nrecs].bytes = (uint64_t)st.st_size;
    (*nrecs)++;
    return CHUTE_OK;
}

int chute_pack(const char *root, const char *out_dir, const chute_pack_options *opt,
               chute_pack_result *out_result, chute_error *err)
{
    if (!root || !out_dir)
        return ch_err(err, CHUTE_EINVAL, "chute_pack: root and out_dir are required");
    chute_pack_options o = opt ? *opt : (chute_pack_options){0};
    if (!o.shard_size)
        o.shard_size = 256ull << 20;
    if (!o.threads) {
        ch_cpu_budget cpu; /* what this process may use, not the host's cores */
        ch_cpu_budget_get(&cpu);
        o.threads = cpu.cpus;
    }
    if (o.threads > 256)
        o.threads = 256;
    if (!o.align)
        o.align = 4096;
    if (!o.max_pixels)
        o.max_pixels = 64ull << 20;
    if (o.align < 64 || (o.align & (o.align - 1)))
        return ch_err(err, CHUTE_EINVAL, "--align %u is not a power of two >= 64", o.align);
    uint64_t t_start = ch_now_ns();

    ch_tree_list list;
    int rc = ch_tree_list_build(root, &list, err);
    if (rc)
        return rc;
    rc = ch_mkdir_p(out_dir, err);
    if (rc) {
        ch_tree_list_free(&list);
        return rc;
    }
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s/%s", out_dir, CH_MANIFEST_NAME);
    if (unlink(mpath) != 0 && errno != ENOENT) {
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot remove the old manifest", mpath);
        ch_tree_list_free(&list);
        return rc;
    }
    ch_fsync_dir(out_dir, NULL);
    remove_stale(out_dir, UINT32_MAX);

    const uint64_t window = (uint64_t)o.threads * 32;
    pack_job job;
    memset(&job, 0, sizeof job);
    job.list = &list;
    job.root = root;
    job.max_pixels = o.max_pixels;
    job.validate = !o.no_validate;
    job.items = calloc(window, sizeof *job.items);
    pthread_mutex_init(&job.mu, NULL);
    pthread_cond_init(&job.cv_start, NULL);
    pthread_cond_init(&job.cv_done, NULL);
    pthread_t *th = calloc(o.threads, sizeof *th);
    uint32_t nth = 0;
    if (!job.items || !th)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (; rc == CHUTE_OK && nth < o.threads; nth++)
        if (pthread_create(&th[nth], NULL, pack_thread, &job) != 0) {
            if (nth == 0)
                rc = ch_err(err, CHUTE_ENOMEM, "cannot start pack threads");
            break;
        }

    chute_pack_progress pr = {0};
    pr.files_total = list.n;
    shard_rec *recs = NULL;
    uint32_t nrecs = 0, reccap = 0;
    ch_shard_writer *w = NULL;
    uint64_t written = 0, bytes = 0, skipped = 0;

    for (uint64_t base = 0; rc == CHUTE_OK && base < list.n; base += window) {
        pthread_mutex_lock(&job.mu);
        job.base = base;
        job.count = CH_MIN(window, list.n - base);
        atomic_store(&job.next, 0);
        job.busy = nth;
        job.round++;
        pthread_cond_broadcast(&job.cv_start);
        while (job.busy > 0)
            pthread_cond_wait(&job.cv_done, &job.mu);
        pthread_mutex_unlock(&job.mu);

        for (uint64_t k = 0; rc == CHUTE_OK && k < job.count; k++) {
            pack_item *it = &job.items[k];
            uint64_t i = base + k;
            pr.files_done++;
            if (!it->ok) {
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", root, list.paths[i]);
                if (ch_error_kind(it->code) != CH_ERR_CONTENT) {
                    /* Not the file's content: leaving it out would hide
                     * the failure in a smaller dataset. */
                    if (strstr(it->reason, path))
                        rc = ch_err(err, it->code, "%s", it->reason);
                    else
                        rc = ch_err(err, it->code, "%s: %s", path, it->reason);
                    break;
                }
                skipped++;
                if (o.on_skip)
                    o.on_skip(path, it->reason, o.user);
                if (o.strict)
                    rc = ch_err(err, CHUTE_ECORRUPT, "%s: %s (--strict)", path, it->reason);
                continue;
            }
            if (!w) {
                char sp[4096];
                snprintf(sp, sizeof sp, "%s/shard-%05u.chute", out_dir, nrecs);
                rc = ch_shard_writer_open(sp, o.align, list.nclasses, list.class_names, &w, err);
                if (rc)
                    break;
            }
            rc = ch_shard_writer_add(w, it->data.data, (uint32_t)it->len, list.labels[i],
                                     (uint32_t)it->kind, list.paths[i], err);
            if (rc)
                break;
            written++;
            bytes += it->len;
            pr.bytes_done += it->len;
            if (ch_shard_writer_bytes(w) >= o.shard_size) {
                rc = close_shard(w, out_dir, nrecs, &recs, &nrecs, &reccap, err);
                w = NULL;
                if (rc)
                    break;
                pr.shards_done = nrecs;
            }
            if (o.progress) {
                pr.skipped = skipped;
                pr.seconds = (ch_now_ns() - t_start) / 1e9;
                if (o.progress(&pr, o.user)) {
                    rc = ch_err(err, CHUTE_EINTERRUPTED, "pack cancelled");
                    break;
                }
            }
        }
    }
    /* The last shard is still open unless it just reached its size. */
    if (rc == CHUTE_OK && w) {
        rc = close_shard(w, out_dir, nrecs, &recs, &nrecs, &reccap, err);
        w = NULL;
    }
    ch_shard_writer_abort(w);

    pthread_mutex_lock(&job.mu);
    job.quit = 1;
    pthread_cond_broadcast(&job.cv_start);
    pthread_mutex_unlock(&job.mu);
    for (uint32_t t = 0; t < nth; t++)
        pthread_join(th[t], NULL);
    free(th);
    if (job.items)
        for (uint64_t k = 0; k < window; k++)
            ch_buf_free(&job.items[k].data);
    free(job.items);
    pthread_mutex_destroy(&job.mu);
    pthread_cond_destroy(&job.cv_start);
    pthread_cond_destroy(&job.cv_done);

    if (rc == CHUTE_OK && written == 0)
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: no decodable images (%llu files skipped)", root,
                    (unsigned long long)skipped);
    if (rc == CHUTE_OK)
        rc = write_manifest(out_dir, recs, nrecs, err);
    if (rc == CHUTE_OK)
        remove_stale(out_dir, nrecs);
    if (rc == CHUTE_OK && out_result) {
        out_result->files = written;
        out_result->bytes = bytes;
        out_result->skipped = skipped;
        out_result->shards = nrecs;
        out_result->classes = list.nclasses;
        out_result->seconds = (ch_now_ns() - t_start) / 1e9;
    }
    free(recs);
    ch_tree_list_free(&list);
    return rc;
}
