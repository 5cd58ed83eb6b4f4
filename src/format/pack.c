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
 * What is skipped and what fails.  Only a file's *content* may be left
 * out: not an image, a damaged image, or one over the loader's limits
 * (max_sample_bytes, max_pixels — the loader's defaults, so pack never
 * writes a sample that a default loader always rejects).  Those are
 * counted apart in the result and fail the pack under `strict`.  Anything
 * else — an I/O error (EIO, EACCES, a file gone since the listing), out
 * of memory, a decoder this build lacks — says nothing about the file and
 * must not shrink the dataset silently: reads are retried, then the pack
 * fails naming the file.
 *
 * Concurrency.  Every rank of a job may run the same prep script, so
 * several packs can target one OUT_DIR.  A pack takes an flock on
 * OUT_DIR/chute.lock before it changes anything there and keeps it until
 * it returns; all temporaries, stale-file cleanup and the manifest are
 * only ever touched under that lock, so the writer's fixed temporary
 * names cannot collide and a dead process's temporaries (flock dies with
 * it) are removed by the next pack, under the lock.  A pack that had to
 * wait re-checks OUT_DIR once it holds the lock: a complete dataset of
 * the same tree is reported as already packed, one of another tree is an
 * error (not overwritten), none (the other pack died) is packed afresh.
 * The lock file is removed on the way out; a waiter that locked the
 * removed file notices (its inode is no longer the path's) and retries.
 *
 * Crash safety: the old manifest is removed first, shards are written as
 * "*.tmp" and renamed when complete and synced, and the new manifest is
 * written (tmp + fsync + rename + fsync dir) only after every shard is
 * in place.  A directory without a manifest never opens as a dataset, and
 * re-running pack after any interruption rewrites everything.  Before
 * reporting success pack opens the new dataset through the reader.
 *
 * OUT_DIR may not be ROOT, lie inside it (its shards would become a class
 * of the tree on the next pack) or contain it; both are compared after
 * resolving symlinks, OUT_DIR's missing tail lexically.
 */
#define _GNU_SOURCE
#include "../codec/codec.h"
#include "det_list.h"
#include "format.h"
#include "pack_resize.h"
#include "writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PACK_LOCK_NAME "chute.lock"
#define PACK_READ_TRIES 3

/* What the check of one file found. */
enum { ITEM_OK = 0, ITEM_UNDECODABLE, ITEM_OVER_LIMIT, ITEM_FAIL };

typedef struct pack_item {
    ch_buf data;
    size_t len;
    int status;               /* ITEM_* */
    int code;                 /* ITEM_FAIL: the chute_status to fail with */
    int retried;              /* the read succeeded only on a retry */
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
    uint64_t max_sample_bytes;
    int validate;
    uint32_t max_side;        /* pack --max-side (0: none) */
    int quality;              /* re-encoding quality */
    int raw;                  /* pack --raw */
    /* thread pool handshake */
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    uint64_t round;
    uint32_t busy;
    int quit;
} pack_job;

static void item_set(pack_item *it, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void item_set(pack_item *it, int status, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->reason, sizeof it->reason, fmt, ap);
    va_end(ap);
    it->status = status;
    it->code = code;
}

/* Read one file into the item's buffer, never growing it past the size
 * limit.  I/O errors are retried (a flaky network mount, an EIO that the
 * next read does not repeat); a file that is missing now although the
 * listing saw it is not retried.  Returns CHUTE_OK, or with the item
 * already marked (over the limit, or failed). */
static int read_item(pack_job *j, pack_item *it, const char *path)
{
    chute_error err = {0};
    int rc = CHUTE_OK;
    for (int attempt = 0; attempt < PACK_READ_TRIES; attempt++) {
        if (attempt > 0) {
            struct timespec ts = {0, attempt * 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        size_t len = 0;
        size_t cap = CH_MIN(it->data.cap, (size_t)j->max_sample_bytes);
        rc = ch_source_local.read_file(path, it->data.data, cap, &len, &err);
        if (rc == CH_ESMALL) {
            if (len > j->max_sample_bytes) {
                item_set(it, ITEM_OVER_LIMIT, CHUTE_ELIMIT,
                         "%zu bytes is over the loader's sample size limit of %llu bytes "
                         "(max_sample_bytes)",
                         len, (unsigned long long)j->max_sample_bytes);
                return CHUTE_ELIMIT;
            }
            if (ch_buf_reserve(&it->data, len) != CHUTE_OK) {
                item_set(it, ITEM_FAIL, CHUTE_ENOMEM, "out of memory for a %zu-byte file", len);
                return CHUTE_ENOMEM;
            }
            rc = ch_source_local.read_file(path, it->data.data, it->data.cap, &len, &err);
            if (rc == CH_ESMALL)
                rc = ch_err(&err, CHUTE_EIO, "%s: file changed size while being read", path);
        }
        if (rc == CHUTE_OK) {
            it->len = len;
            it->retried = attempt > 0;
            return CHUTE_OK;
        }
        if (rc == CHUTE_ENOTFOUND)
            break;
    }
    if (rc == CHUTE_ENOTFOUND)
        item_set(it, ITEM_FAIL, CHUTE_EIO, "%s (listed, but gone: the tree changed during the pack)",
                 err.message);
    else
        item_set(it, ITEM_FAIL, rc == CHUTE_ENOMEM ? CHUTE_ENOMEM : CHUTE_EIO,
                 "%s (I/O error, not a content problem; %d tries)", err.message, PACK_READ_TRIES);
    return it->code;
}

/* pack --max-side / --raw: decode the whole image, resize it if its
 * shorter side is over max_side, and replace the item's bytes with the
 * re-encoded JPEG or the CHRAW record.  An image that needs neither keeps
 * its bytes (and was validated by the caller). */
static int transform_one(pack_job *j, ch_decoder *dec, ch_buf *pix, ch_pr_scratch *prs,
                         const ch_image_info *info, pack_item *it, chute_error *err)
{
    uint32_t ow, oh;
    int resize = ch_pr_target(info->width, info->height, j->max_side, &ow, &oh);
    if (!resize && !j->raw)
        return CHUTE_OK;
    ch_image img;
    int rc = ch_decoder_finish(dec, 1, 0, 0, info->width, info->height, pix, &img, err);
    if (rc)
        return rc;
    if (img.x != 0 || img.y != 0 || img.w < info->width || img.h < info->height)
        return ch_err(err, CHUTE_EINVAL, "decoder delivered %ux%u+%u+%u for a whole %ux%u image",
                      img.w, img.h, img.x, img.y, info->width, info->height);
    const uint8_t *src = img.pixels;
    size_t stride = img.stride;
    if (resize) {
        rc = ch_pr_resize(src, stride, info->width, info->height, ow, oh, prs, &src, err);
        if (rc)
            return rc;
        stride = (size_t)ow * 3;
    }
    /* The new bytes go into the scratch buffer first: the decoded pixels may
     * point into it->data (a zero-copy CHRAW input). */
    size_t len = 0;
    rc = j->raw ? ch_pr_raw_record(src, stride, ow, oh, j->max_sample_bytes, &prs->enc, &len, err)
                : ch_pr_jpeg(src, stride, ow, oh, j->quality, j->max_sample_bytes, &prs->enc,
                             &len, err);
    if (rc)
        return rc;
    ch_buf t = it->data;
    it->data = prs->enc;
    prs->enc = t;
    it->len = len;
    it->kind = j->raw ? CH_IMG_RAW : CH_IMG_JPEG;
    return CHUTE_OK;
}

static void check_one(pack_job *j, ch_decoder *dec, ch_buf *pix, ch_pr_scratch *prs, uint64_t i)
{
    pack_item *it = &j->items[i - j->base];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", j->root, j->list->paths[i]);
    it->status = ITEM_OK;
    it->code = CHUTE_OK;
    it->retried = 0;
    it->reason[0] = '\0';
    if (read_item(j, it, path) != CHUTE_OK)
        return;
    it->kind = ch_sniff(it->data.data, it->len);
    if (it->kind == CH_IMG_UNKNOWN) {
        char names[CH_DECODER_NAMES_MAX];
        item_set(it, ITEM_UNDECODABLE, CHUTE_EFORMAT, "not a %s image (%s)",
                 ch_decoder_names(names, sizeof names), ch_sniff_name(it->data.data, it->len));
        return;
    }
    /* The pixel limit is checked even without validation: reading the
     * header costs a few hundred bytes of parsing, and a sample over the
     * limit is one the loader will always reject. */
    chute_error err = {0};
    ch_image_info info;
    int rc = ch_decoder_begin(dec, it->data.data, it->len, j->max_pixels, &info, &err);
    uint32_t tw, th;
    if (rc == CHUTE_OK &&
        (j->raw || ch_pr_target(info.width, info.height, j->max_side, &tw, &th))) {
        /* The full decode the transform needs validates the file too. */
        rc = transform_one(j, dec, pix, prs, &info, it, &err);
        if (rc == CHUTE_ELIMIT) {
            item_set(it, ITEM_OVER_LIMIT, rc, "%s", err.message);
            return;
        }
        if (rc == CHUTE_EUNSUPPORTED) /* a file this build cannot decode cannot be resized */
            rc = CHUTE_EFORMAT;
    } else if (rc == CHUTE_OK && j->validate) {
        uint32_t denom = info.caps & CH_DEC_DCT_SCALE ? 8 : 1, sw, sh;
        ch_decoder_scaled_size(dec, denom, &sw, &sh);
        ch_image img;
        rc = ch_decoder_finish(dec, denom, 0, 0, sw, sh, pix, &img, &err);
    } else if (rc == CHUTE_OK) {
        ch_decoder_abort(dec);
    }
    /* Without validation only the limit counts: a header this build cannot
     * read or parse is packed unchecked, as asked -- unless it was to be
     * resized or stored raw, which needs its pixels. */
    if (!j->validate && !j->raw && !j->max_side && (rc == CHUTE_EUNSUPPORTED || rc == CHUTE_ECORRUPT || rc == CHUTE_EFORMAT))
        rc = CHUTE_OK;
    if (rc == CHUTE_ECORRUPT || rc == CHUTE_EFORMAT)
        item_set(it, ITEM_UNDECODABLE, rc, "%s", err.message);
    else if (rc == CHUTE_ELIMIT)
        item_set(it, ITEM_OVER_LIMIT, rc, "%s (the loader's max_pixels)", err.message);
    else if (rc != CHUTE_OK)
        item_set(it, ITEM_FAIL, rc, "%s: %s", path, err.message);
}

static void *pack_thread(void *arg)
{
    pack_job *j = arg;
    ch_decoder *dec = NULL;
    ch_buf pix = {0};
    ch_pr_scratch prs;
    memset(&prs, 0, sizeof prs);
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
            if (have_dec)
                check_one(j, dec, &pix, &prs, j->base + k);
            else
                item_set(&j->items[k], ITEM_FAIL, CHUTE_ENOMEM,
                         "out of memory creating a decoder");
        }
        pthread_mutex_lock(&j->mu);
        if (--j->busy == 0)
            pthread_cond_signal(&j->cv_done);
    }
    pthread_mutex_unlock(&j->mu);
    ch_decoder_destroy(dec);
    ch_buf_free(&pix);
    ch_pr_scratch_free(&prs);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Where pack may write                                                */
/* ------------------------------------------------------------------ */

/* Absolute, symlink-free form of `path`, which need not exist yet: the
 * longest existing prefix goes through realpath(); the missing rest will
 * be created by mkdir as real directories, so folding its "." and ".."
 * lexically gives where it will be. */
static int resolve_path(const char *path, char *out, size_t outsz, chute_error *err)
{
    char head[PATH_MAX], tail[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof head)
        return ch_err(err, CHUTE_EINVAL, "bad path '%s'", path);
    memcpy(head, path, n + 1);
    tail[0] = '\0';
    char real[PATH_MAX];
    for (;;) {
        if (realpath(head, real))
            break;
        if (errno != ENOENT)
            return ch_err_errno(err, CHUTE_EINVAL, errno, "%s: cannot resolve", path);
        /* Move the last component of head to the front of tail. */
        size_t hl = strlen(head);
        while (hl > 1 && head[hl - 1] == '/')
            head[--hl] = '\0';
        char *slash = strrchr(head, '/');
        const char *comp = slash ? slash + 1 : head;
        char t2[PATH_MAX];
        if ((size_t)snprintf(t2, sizeof t2, "%s%s%s", comp, tail[0] ? "/" : "", tail) >= sizeof t2)
            return ch_err(err, CHUTE_EINVAL, "%s: path too long", path);
        memcpy(tail, t2, strlen(t2) + 1);
        if (!slash)
            snprintf(head, sizeof head, ".");
        else if (slash == head)
            snprintf(head, sizeof head, "/");
        else
            *slash = '\0';
    }
    size_t len = strlen(real);
    for (char *save = NULL, *c = strtok_r(tail, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0) {
            char *slash = strrchr(real, '/');
            len = slash && slash != real ? (size_t)(slash - real) : 1;
            real[len] = '\0';
            continue;
        }
        size_t cl = strlen(c);
        if (len + 1 + cl >= sizeof real)
            return ch_err(err, CHUTE_EINVAL, "%s: path too long", path);
        if (len > 1)
            real[len++] = '/';
        memcpy(real + len, c, cl + 1);
        len += cl;
    }
    if (len >= outsz)
        return ch_err(err, CHUTE_EINVAL, "%s: path too long", path);
    memcpy(out, real, len + 1);
    return CHUTE_OK;
}

/* Is resolved path `inner` equal to or below resolved path `outer`? */
static int path_within(const char *inner, const char *outer)
{
    size_t n = strlen(outer);
    if (n == 1 && outer[0] == '/')
        return 1;
    return strncmp(inner, outer, n) == 0 && (inner[n] == '/' || inner[n] == '\0');
}

static int check_paths(const char *root, const char *out_dir, chute_error *err)
{
    char r[PATH_MAX], o[PATH_MAX];
    int rc = resolve_path(root, r, sizeof r, err);
    if (rc == CHUTE_OK)
        rc = resolve_path(out_dir, o, sizeof o, err);
    if (rc)
        return rc;
    if (strcmp(r, o) == 0)
        return ch_err(err, CHUTE_EINVAL,
                      "OUT_DIR %s is ROOT itself (%s): pack into a directory outside the tree",
                      out_dir, r);
    if (path_within(o, r))
        return ch_err(err, CHUTE_EINVAL,
                      "OUT_DIR %s (%s) is inside ROOT %s: its files would become a class of "
                      "the tree and shift every label; pack into a directory outside the tree",
                      out_dir, o, r);
    if (path_within(r, o))
        return ch_err(err, CHUTE_EINVAL,
                      "ROOT %s (%s) is inside OUT_DIR %s: pack would write shards among the "
                      "images' parent directories; pack into a directory of its own",
                      root, r, out_dir);
    return CHUTE_OK;
}

/* ------------------------------------------------------------------ */
/* The OUT_DIR lock                                                    */
/* ------------------------------------------------------------------ */

static void read_holder(int fd, char *buf, size_t n)
{
    ssize_t got = pread(fd, buf, n - 1, 0);
    buf[got > 0 ? got : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

/* Take the exclusive lock on out_dir; *out_waited says whether another
 * process held it first.  Polls (rather than blocking in flock) so the
 * caller's on_wait can cancel, and reopens the file on each try so a
 * lock file that its holder removed is never the one locked. */
static int lock_out_dir(const char *out_dir, const chute_pack_options *o, int *out_fd,
                        int *out_waited, chute_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, PACK_LOCK_NAME);
    uint64_t t0 = ch_now_ns();
    double next_notice = 0;
    long sleep_ms = 20;
    *out_waited = 0;
    for (;;) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot create the pack lock file",
                                path);
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e != EWOULDBLOCK && e != EINTR) {
                close(fd);
                return ch_err_errno(err, CHUTE_EIO, e,
                                    "%s: cannot lock (pack needs flock on OUT_DIR to keep "
                                    "concurrent packs apart)",
                                    path);
            }
            char holder[256];
            read_holder(fd, holder, sizeof holder);
            close(fd);
            if (e == EINTR)
                continue;
            *out_waited = 1;
            if (o->no_wait)
                return ch_err(err, CHUTE_EBUSY,
                              "%s: another process is packing into it (%s); not waiting (no_wait)",
                              out_dir, holder[0] ? holder : "holder unknown");
            double waited = (ch_now_ns() - t0) / 1e9;
            if (o->on_wait && waited >= next_notice) {
                next_notice = waited + 1.0;
                if (o->on_wait(out_dir, holder, waited, o->user))
                    return ch_err(err, CHUTE_EINTERRUPTED,
                                  "pack cancelled while waiting for another pack into %s",
                                  out_dir);
            }
            struct timespec ts = {0, sleep_ms * 1000000L};
            nanosleep(&ts, NULL);
            sleep_ms = CH_MIN(sleep_ms * 2, 500);
            continue;
        }
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino) {
            close(fd); /* locked a file its holder had just removed: again */
            continue;
        }
        /* Who holds it, for the message of anyone who waits.  Best effort:
         * the lock itself does not depend on these bytes. */
        char host[128] = "";
        gethostname(host, sizeof host - 1);
        char who[256];
        int wn = snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host);
        if (ftruncate(fd, 0) == 0 && wn > 0)
            (void)!pwrite(fd, who, (size_t)wn, 0);
        *out_fd = fd;
        return CHUTE_OK;
    }
}

/* Remove the lock file, then release: a waiter holding the old file open
 * sees that it is no longer at the path and retries. */
static void unlock_out_dir(const char *out_dir, int fd)
{
    if (fd < 0)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, PACK_LOCK_NAME);
    unlink(path);
    close(fd);
}

/* ------------------------------------------------------------------ */
/* Files in OUT_DIR                                                    */
/* ------------------------------------------------------------------ */

/* Remove leftovers of earlier runs (only ever called under the lock):
 * temporary files and shards that the new manifest will not list (names
 * at or past `keep`).  A leftover that cannot be removed is an error: it
 * would stay beside (or, for a stale shard, look like part of) the
 * dataset. */
static int remove_stale(const char *dir, uint32_t keep, chute_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list", dir);
    int rc = CHUTE_OK;
    struct dirent *de;
    errno = 0;
    while (rc == CHUTE_OK && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        unsigned k = 0;
        int kind = ch_packfile_kind(n, &k);
        int stale = kind == CH_PACKFILE_TEMP || (kind == CH_PACKFILE_SHARD && k >= keep);
        if (stale) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, n);
            if (unlink(p) != 0 && errno != ENOENT)
                rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot remove a stale pack file", p);
        }
        errno = 0;
    }
    if (rc == CHUTE_OK && errno != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list", dir);
    closedir(d);
    return rc;
}

typedef struct shard_rec {
    uint64_t samples, bytes;
} shard_rec;

/* Version 1 for a dataset stored as its files were (what every reader
 * reads); version 2 with a "pack" line once pack changed the images, so a
 * version-1 reader refuses by version instead of describing pixels it
 * never saw as the originals' (docs/FORMAT.md). */
static int write_manifest(const char *dir, const shard_rec *recs, uint32_t n,
                          const chute_pack_options *o, chute_error *err)
{
    char tmp[4096], fin[4096];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, CH_MANIFEST_NAME);
    snprintf(fin, sizeof fin, "%s/%s", dir, CH_MANIFEST_NAME);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot create", tmp);
    size_t cap = 160 + (size_t)n * 80, len = 0;
    char *txt = malloc(cap);
    if (!txt) {
        close(fd);
        unlink(tmp);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    uint64_t total = 0;
    if (o && (o->max_side || o->raw))
        len += (size_t)snprintf(txt + len, cap - len,
                                "chute-dataset 2\npack max_side=%u quality=%u raw=%d\n",
                                o->max_side, o->raw ? 0u : o->quality, o->raw ? 1 : 0);
    else
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
    if (close(fd) != 0 && rc == CHUTE_OK)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: close failed", tmp);
    if (rc == CHUTE_OK && rename(tmp, fin) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: rename failed", tmp);
    if (rc == CHUTE_OK)
        rc = ch_fsync_dir(dir, err);
    if (rc != CHUTE_OK) {
        unlink(tmp);
        unlink(fin); /* a manifest whose rename was not made durable is not trusted */
    }
    return rc;
}

/* Finish the open shard number k and record its sample count and size. */
static int close_shard(ch_shard_writer *w, const char *out_dir, uint32_t k, shard_rec **recs,
                       uint32_t *nrecs, uint32_t *cap, const ch_pack_sink *sink,
                       chute_error *err)
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
    if (sink) { /* complete and renamed: hand it on (publish.c uploads it) */
        char name[64];
        snprintf(name, sizeof name, "shard-%05u.chute", k);
        return sink->shard_done(sink->user, sp, name, err);
    }
    return CHUTE_OK;
}

/* Shard count from the manifest's end line (0 if unreadable). */
static uint32_t manifest_shard_count(const char *dir)
{
    char p[4096], line[256];
    snprintf(p, sizeof p, "%s/%s", dir, CH_MANIFEST_NAME);
    FILE *f = fopen(p, "re");
    unsigned n = 0;
    unsigned long long total;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "end %u %llu", &n, &total) == 2)
            break;
    fclose(f);
    return n;
}

/* Would this pack leave file j out too?  1: yes (its content is
 * undecodable or over a limit), 0: no (it packs), <0: checking it failed
 * (an I/O error), or `strict` would fail on it: err says why. */
static int would_skip(pack_job *j, ch_decoder *dec, ch_buf *pix, ch_pr_scratch *prs, uint64_t i,
                      int strict, chute_error *err)
{
    j->base = i;
    check_one(j, dec, pix, prs, i);
    const pack_item *it = &j->items[0];
    if (it->status == ITEM_OK)
        return 0;
    if (it->status == ITEM_FAIL)
        return ch_err(err, it->code, "%s", it->reason);
    if (strict)
        return ch_err(err, it->status == ITEM_OVER_LIMIT ? CHUTE_ELIMIT : CHUTE_ECORRUPT,
                      "%s/%s: %s (--strict)", j->root, j->list->paths[i], it->reason);
    return 1;
}

/* Is `ds` this tree as this pack would write it: the same classes; its
 * samples the tree's files in order with the same labels and sizes; and
 * every file it lacks one that this pack would skip too?  1: yes, 0: no,
 * <0: an error (err set) that packing would have hit as well. */
static int dataset_is_tree(const chute_dataset *ds, const char *root, const ch_tree_list *list,
                           const chute_pack_options *o, uint64_t *over_limit, chute_error *err)
{
    *over_limit = 0;
    if (chute_dataset_num_classes(ds) != list->nclasses || chute_dataset_size(ds) > list->n)
        return 0;
    for (uint32_t c = 0; c < list->nclasses; c++)
        if (strcmp(chute_dataset_class_name(ds, c), list->class_names[c]) != 0)
            return 0;
    pack_item item;
    memset(&item, 0, sizeof item);
    pack_job job;
    memset(&job, 0, sizeof job);
    job.list = list;
    job.root = root;
    job.items = &item;
    job.max_pixels = o->max_pixels;
    job.max_sample_bytes = o->max_sample_bytes;
    job.validate = !o->no_validate;
    job.max_side = o->max_side;
    job.quality = (int)o->quality;
    job.raw = o->raw;
    ch_pr_scratch prs;
    memset(&prs, 0, sizeof prs);
    ch_decoder *dec = NULL;
    ch_buf pix = {0};
    if (ch_decoder_create(&dec) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory creating a decoder");
    int rc = 1;
    char where[8192], path[4096];
    uint64_t j = 0, n = chute_dataset_size(ds);
    for (uint64_t i = 0; rc == 1 && i <= n; i++) {
        const char *want = NULL;
        size_t wl = 0;
        int64_t lab = -1;
        if (i < n) {
            chute_dataset_describe(ds, i, where, sizeof where);
            wl = strlen(where);
            want = where;
            lab = chute_dataset_label(ds, i);
        }
        /* Advance through the tree to sample i's file; each file passed
         * over must be one this pack skips. */
        for (; rc == 1; j++) {
            if (j >= list->n) {
                rc = want ? 0 : 1;
                break;
            }
            size_t pl = strlen(list->paths[j]);
            /* describe: "<shard>@<offset> (<relative path>)" */
            if (want && lab == list->labels[j] && wl >= pl + 3 && where[wl - 1] == ')' &&
                memcmp(where + wl - 1 - pl, list->paths[j], pl) == 0 &&
                memcmp(where + wl - 3 - pl, " (", 2) == 0)
                break;
            int sk = would_skip(&job, dec, &pix, &prs, j, o->strict, err);
            rc = sk < 0 ? sk : sk == 1 ? 1 : 0;
            *over_limit += sk == 1 && item.status == ITEM_OVER_LIMIT;
        }
        if (rc != 1 || !want)
            break;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", root, list->paths[j]);
        if (stat(path, &st) != 0 ||
            (!o->max_side && !o->raw && (uint64_t)st.st_size != chute_dataset_sample_size(ds, i)))
            rc = 0;
        j++;
    }
    ch_decoder_destroy(dec);
    ch_buf_free(&pix);
    ch_pr_scratch_free(&prs);
    ch_buf_free(&item.data);
    return rc;
}

/* After waiting for another pack: CHUTE_OK with *found = 1 if out_dir now
 * holds a complete dataset of this tree (result filled), *found = 0 if it
 * holds none that opens (then this pack packs), an error if it holds a
 * dataset of another tree (or checking the tree hit an error that packing
 * it would hit too). */
static int check_existing(const char *root, const char *out_dir, const ch_tree_list *list,
                          const chute_pack_options *o, int *found, chute_pack_result *res,
                          chute_error *err)
{
    *found = 0;
    chute_dataset *ds = NULL;
    chute_error e2 = {0};
    if (chute_dataset_open(out_dir, CHUTE_SOURCE_SHARDS, &ds, &e2) != CHUTE_OK)
        return CHUTE_OK;
    uint64_t over_limit = 0;
    chute_pack_info pi;
    int rc = chute_pack_info_read(out_dir, &pi, &e2);
    if (rc == CHUTE_OK && (pi.max_side != o->max_side || pi.raw != o->raw ||
                           (pi.quality && pi.quality != o->quality)))
        rc = 0; /* the same tree packed another way is another dataset */
    else if (rc == CHUTE_OK)
        rc = dataset_is_tree(ds, root, list, o, &over_limit, err);
    else
        rc = 0;
    if (rc < 0) {
        /* packing would hit the same error */
    } else if (rc == 0) {
        rc = ch_err(err, CHUTE_EBUSY,
                    "%s: while this pack waited for its lock, another process packed a "
                    "different tree into it (%llu samples, %u classes; %s has %llu files, %u "
                    "classes); not overwriting it (run pack again to replace it)",
                    out_dir, (unsigned long long)chute_dataset_size(ds),
                    chute_dataset_num_classes(ds), root, (unsigned long long)list->n,
                    list->nclasses);
    } else {
        rc = CHUTE_OK;
        *found = 1;
        memset(res, 0, sizeof *res);
        res->files = chute_dataset_size(ds);
        for (uint64_t i = 0; i < res->files; i++)
            res->bytes += chute_dataset_sample_size(ds, i);
        res->skipped = list->n - res->files;
        res->skipped_over_limit = over_limit;
        res->shards = manifest_shard_count(out_dir);
        res->classes = list->nclasses;
        res->already_packed = 1;
    }
    chute_dataset_close(ds);
    return rc;
}

/* The new dataset opens through the reader and holds what was written. */
static int verify_output(const char *out_dir, uint64_t written, uint32_t nclasses,
                         chute_error *err)
{
    chute_dataset *ds = NULL;
    chute_error e2 = {0};
    int rc = chute_dataset_open(out_dir, CHUTE_SOURCE_SHARDS, &ds, &e2);
    if (rc != CHUTE_OK)
        return ch_err(err, rc, "the packed dataset does not open: %s", e2.message);
    if (chute_dataset_size(ds) != written || chute_dataset_num_classes(ds) != nclasses)
        rc = ch_err(err, CHUTE_ECORRUPT,
                    "%s: the packed dataset has %llu samples and %u classes, pack wrote %llu "
                    "and %u",
                    out_dir, (unsigned long long)chute_dataset_size(ds),
                    chute_dataset_num_classes(ds), (unsigned long long)written, nclasses);
    chute_dataset_close(ds);
    return rc;
}

/* ------------------------------------------------------------------ */
/* chute_pack                                                          */
/* ------------------------------------------------------------------ */

/* Write the shards of `list` into out_dir (locked, cleaned); fills the
 * counts of *res on success. */
static int pack_shards(const char *root, const char *out_dir, const ch_tree_list *list,
                       const ch_det_list *det, const chute_pack_options *o,
                       const ch_pack_sink *sink, uint64_t t_start, chute_pack_result *res,
                       chute_error *err)
{
    int rc = CHUTE_OK;
    /* Items keep their buffers from window to window; raw records can be
     * tens of MB each (w*h*3), so a raw pack keeps fewer of them. */
    const uint64_t window = (uint64_t)o->threads * (o->raw ? 4 : 32);
    pack_job job;
    memset(&job, 0, sizeof job);
    job.list = list;
    job.root = root;
    job.max_pixels = o->max_pixels;
    job.max_sample_bytes = o->max_sample_bytes;
    job.validate = !o->no_validate;
    job.max_side = o->max_side;
    job.quality = (int)o->quality;
    job.raw = o->raw;
    job.items = calloc(window, sizeof *job.items);
    pthread_mutex_init(&job.mu, NULL);
    pthread_cond_init(&job.cv_start, NULL);
    pthread_cond_init(&job.cv_done, NULL);
    pthread_t *th = calloc(o->threads, sizeof *th);
    uint32_t nth = 0;
    if (!job.items || !th)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (; rc == CHUTE_OK && nth < o->threads; nth++)
        if (pthread_create(&th[nth], NULL, pack_thread, &job) != 0) {
            if (nth == 0)
                rc = ch_err(err, CHUTE_ENOMEM, "cannot start pack threads");
            break;
        }

    chute_pack_progress pr = {0};
    pr.files_total = list->n;
    shard_rec *recs = NULL;
    uint32_t nrecs = 0, reccap = 0;
    ch_shard_writer *w = NULL;
    uint64_t written = 0, bytes = 0, skipped = 0, over_limit = 0, retried = 0;

    for (uint64_t base = 0; rc == CHUTE_OK && base < list->n; base += window) {
        pthread_mutex_lock(&job.mu);
        job.base = base;
        job.count = CH_MIN(window, list->n - base);
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
            if (it->status == ITEM_FAIL) {
                rc = ch_err(err, it->code, "%s", it->reason);
                break;
            }
            if (it->status != ITEM_OK) {
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", root, list->paths[i]);
                skipped++;
                over_limit += it->status == ITEM_OVER_LIMIT;
                if (o->on_skip)
                    o->on_skip(path, it->reason, o->user);
                if (o->strict)
                    rc = ch_err(err, it->status == ITEM_OVER_LIMIT ? CHUTE_ELIMIT : CHUTE_ECORRUPT,
                                "%s: %s (--strict)", path, it->reason);
                continue;
            }
            retried += it->retried;
            if (!w) {
                char sp[4096];
                snprintf(sp, sizeof sp, "%s/shard-%05u.chute", out_dir, nrecs);
                rc = ch_shard_writer_open(sp, o->align, list->nclasses, list->class_names, &w,
                                          err);
                if (rc)
                    break;
            }
            rc = ch_shard_writer_add(w, it->data.data, (uint32_t)it->len, list->labels[i],
                                     (uint32_t)it->kind, list->paths[i], err);
            if (rc == CHUTE_OK && det) /* its targets, into the shard's index */
                rc = ch_shard_writer_set_targets(w, det->tg + det->tg_off[i],
                                                 (size_t)(det->tg_off[i + 1] - det->tg_off[i]), err);
            if (rc)
                break;
            written++;
            bytes += it->len;
            pr.bytes_done += it->len;
            if (ch_shard_writer_bytes(w) >= o->shard_size) {
                rc = close_shard(w, out_dir, nrecs, &recs, &nrecs, &reccap, sink, err);
                w = NULL;
                if (rc)
                    break;
                pr.shards_done = nrecs;
            }
            if (o->progress) {
                pr.skipped = skipped;
                pr.seconds = (ch_now_ns() - t_start) / 1e9;
                if (o->progress(&pr, o->user)) {
                    rc = ch_err(err, CHUTE_EINTERRUPTED, "pack cancelled");
                    break;
                }
            }
        }
    }
    /* The last shard is still open unless it just reached its size. */
    if (rc == CHUTE_OK && w) {
        rc = close_shard(w, out_dir, nrecs, &recs, &nrecs, &reccap, sink, err);
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
        rc = ch_err(err, CHUTE_ENOTFOUND,
                    "%s: no packable images (%llu files skipped: %llu undecodable, %llu over the "
                    "loader's limits)",
                    root, (unsigned long long)skipped, (unsigned long long)(skipped - over_limit),
                    (unsigned long long)over_limit);
    if (rc == CHUTE_OK)
        rc = write_manifest(out_dir, recs, nrecs, o, err);
    if (rc == CHUTE_OK)
        rc = remove_stale(out_dir, nrecs, err);
    if (rc == CHUTE_OK && !sink) /* a sink's owner verifies where the shards went */
        rc = verify_output(out_dir, written, list->nclasses, err);
    if (rc == CHUTE_OK) {
        res->files = written;
        res->bytes = bytes;
        res->skipped = skipped;
        res->skipped_over_limit = over_limit;
        res->reads_retried = retried;
        res->shards = nrecs;
        res->classes = list->nclasses;
    } else {
        /* Whatever failed after the manifest was written, the directory
         * must not open as a dataset; and what this run wrote (finished
         * shards, the shard in progress) goes too: a failed pack -- a full
         * disk above all -- must not leave hundreds of MB that no manifest
         * lists (issue 31.4), as the wds and tfrecord writers do not.  The
         * old manifest was removed before writing began, so no complete
         * dataset is lost here; a re-run writes everything again. */
        char mpath[4096];
        snprintf(mpath, sizeof mpath, "%s/%s", out_dir, CH_MANIFEST_NAME);
        unlink(mpath);
        remove_stale(out_dir, 0, NULL);
        ch_fsync_dir(out_dir, NULL);
    }
    free(recs);
    return rc;
}

int chute_pack(const char *root, const char *out_dir, const chute_pack_options *opt,
               chute_pack_result *out_result, chute_error *err)
{
    if (!root || !out_dir)
        return ch_err(err, CHUTE_EINVAL, "chute_pack: root and out_dir are required");
    if (ch_publish_is_remote(out_dir)) /* s3://: staged here, uploaded (publish.c) */
        return ch_publish_pack(root, out_dir, opt, out_result, err);
    return ch_pack_to_sink(root, out_dir, opt, NULL, out_result, err);
}

int ch_pack_to_sink(const char *root, const char *out_dir, const chute_pack_options *opt,
                    const ch_pack_sink *sink, chute_pack_result *out_result, chute_error *err)
{
    if (!root || !out_dir)
        return ch_err(err, CHUTE_EINVAL, "chute_pack: root and out_dir are required");
    chute_pack_options o = opt ? *opt : (chute_pack_options){0};
    if (!o.shard_size)
        o.shard_size = 256ull << 20;
    if (o.threads > CHUTE_PACK_MAX_THREADS) /* refused, as the CLI and Python refuse it */
        return ch_err(err, CHUTE_EINVAL, "threads %u is out of range (1..%u)", o.threads,
                      CHUTE_PACK_MAX_THREADS);
    if (!o.threads) {
        ch_cpu_budget cpu; /* what this process may use, not the host's cores */
        ch_cpu_budget_get(&cpu);
        o.threads = CH_MIN(cpu.cpus, CHUTE_PACK_MAX_THREADS); /* a default is never refused */
    }
    if (!o.align)
        o.align = 4096;
    if (!o.max_pixels)
        o.max_pixels = CHUTE_DEFAULT_MAX_PIXELS;
    if (!o.max_sample_bytes)
        o.max_sample_bytes = CHUTE_DEFAULT_MAX_SAMPLE_BYTES;
    if (o.quality && (!o.max_side || o.raw))
        return ch_err(err, CHUTE_EINVAL,
                      "--quality %u: the quality applies only to the JPEGs --max-side "
                      "re-encodes (not to --raw records, nor without --max-side)",
                      o.quality);
    if (!o.quality)
        o.quality = CHUTE_PACK_DEFAULT_QUALITY;
    if (o.quality > 100)
        return ch_err(err, CHUTE_EINVAL, "--quality %u is not in 1..100", o.quality);
    if (o.max_side > 65500) /* JPEG's side limit */
        return ch_err(err, CHUTE_EINVAL, "--max-side %u is over JPEG's side limit of 65500",
                      o.max_side);
    o.raw = o.raw != 0;
    if (o.align < 64 || (o.align & (o.align - 1)))
        return ch_err(err, CHUTE_EINVAL, "--align %u is not a power of two >= 64", o.align);
    if (o.max_sample_bytes > 0xFFFFFFFFull)
        return ch_err(err, CHUTE_EINVAL,
                      "max_sample_bytes %llu is over a shard record's limit of 4 GiB - 1",
                      (unsigned long long)o.max_sample_bytes);
    uint64_t t_start = ch_now_ns();

    /* COCO JSON, YOLO labels or image + mask pairs (det_list.c): the
     * images come with target records, and their folder may not be ROOT. */
    ch_det_list det;
    int rc = ch_det_list_build(root, !o.strict, &det, err);
    int have_det = rc == CHUTE_OK;
    if (rc != CHUTE_OK && rc != CH_DET_NONE) {
        ch_det_list_free(&det);
        return rc;
    }
    if (have_det) {
        root = det.image_root;
        if (o.on_skip && det.skipped) {
            char why[700];
            snprintf(why, sizeof why, "%llu annotations, images or mask pairs left out; the first: %s",
                     (unsigned long long)det.skipped, det.first_skip);
            o.on_skip(root, why, o.user);
        }
    }
    rc = check_paths(root, out_dir, err);
    if (rc) {
        ch_det_list_free(&det);
        return rc;
    }
    ch_tree_list list;
    if (have_det) {
        list = det.list; /* moved: freed below as the list */
        memset(&det.list, 0, sizeof det.list);
    } else {
        rc = ch_tree_list_build(&ch_source_local, root, &list, err);
    }
    if (rc)
        return rc;
    /* Image-named entries that are not regular files (FIFOs, sockets,
     * dangling links) were left out by the listing: say so, by name. */
    for (size_t k = 0; o.on_skip && k < list.nskipped_named; k++) {
        char path[4096], why[128];
        snprintf(path, sizeof path, "%s/%s", root, list.skipped[k].rel);
        snprintf(why, sizeof why, "not a regular file (%s)", list.skipped[k].why);
        o.on_skip(path, why, o.user);
    }
    if (o.on_skip && list.nskipped > list.nskipped_named) {
        char why[128];
        snprintf(why, sizeof why, "%llu more entries that are not regular files",
                 (unsigned long long)(list.nskipped - list.nskipped_named));
        o.on_skip(root, why, o.user);
    }
    rc = ch_mkdir_p(out_dir, err);
    int lock_fd = -1, waited = 0;
    if (rc == CHUTE_OK)
        rc = lock_out_dir(out_dir, &o, &lock_fd, &waited, err);
    chute_pack_result res = {0};
    int done = 0;
    if (rc == CHUTE_OK && waited)
        rc = check_existing(root, out_dir, &list, &o, &done, &res, err);
    if (rc == CHUTE_OK && !done) {
        char mpath[4096];
        snprintf(mpath, sizeof mpath, "%s/%s", out_dir, CH_MANIFEST_NAME);
        if (unlink(mpath) != 0 && errno != ENOENT)
            rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot remove the old manifest", mpath);
        if (rc == CHUTE_OK)
            rc = ch_fsync_dir(out_dir, err);
        if (rc == CHUTE_OK)
            rc = remove_stale(out_dir, UINT32_MAX, err);
        if (rc == CHUTE_OK)
            rc = pack_shards(root, out_dir, &list, have_det ? &det : NULL, &o, sink, t_start, &res,
                             err);
    }
    unlock_out_dir(out_dir, lock_fd);
    if (rc == CHUTE_OK && out_result) {
        res.seconds = (ch_now_ns() - t_start) / 1e9;
        *out_result = res;
    }
    ch_tree_list_free(&list);
    ch_det_list_free(&det);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Shared with the writers (writer.h): chute_convert takes the same    */
/* lock, makes the same path check and writes the same manifest.       */
/* ------------------------------------------------------------------ */
#include "writer.h"

int ch_pack_check_paths(const char *root, const char *out_dir, chute_error *err)
{
    return check_paths(root, out_dir, err);
}

int ch_pack_lock(const char *out_dir, int no_wait, chute_pack_wait_fn on_wait, void *user,
                 int *out_fd, int *out_waited, chute_error *err)
{
    chute_pack_options o = {0};
    o.no_wait = no_wait;
    o.on_wait = on_wait;
    o.user = user;
    return lock_out_dir(out_dir, &o, out_fd, out_waited, err);
}

void ch_pack_unlock(const char *out_dir, int fd)
{
    unlock_out_dir(out_dir, fd);
}

int ch_pack_write_manifest(const char *dir, const uint64_t *samples, const uint64_t *bytes,
                           uint32_t n, chute_error *err)
{
    shard_rec *recs = calloc(n ? n : 1, sizeof *recs);
    if (!recs)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (uint32_t k = 0; k < n; k++) {
        recs[k].samples = samples[k];
        recs[k].bytes = bytes[k];
    }
    int rc = write_manifest(dir, recs, n, NULL, err); /* files as they were: version 1 */
    free(recs);
    return rc;
}

int chute_manifest_write(const char *dir, uint32_t n, const uint64_t *samples,
                         const uint64_t *bytes, chute_error *err)
{
    if (!dir || !n || !samples || !bytes)
        return ch_err(err, CHUTE_EINVAL, "chute_manifest_write: dir and at least one shard");
    if (n > (1u << 24))
        return ch_err(err, CHUTE_ELIMIT, "%s: %u shards is over the manifest's 2^24", dir, n);
    int rc = ch_pack_write_manifest(dir, samples, bytes, n, err);
    return rc ? rc : ch_fsync_dir(dir, err);
}

int chute_pack_info_read(const char *dir, chute_pack_info *out, chute_error *err)
{
    if (!dir || !out)
        return ch_err(err, CHUTE_EINVAL, "chute_pack_info_read: dir and out are required");
    memset(out, 0, sizeof *out);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, CH_MANIFEST_NAME) >= sizeof path)
        return ch_err(err, CHUTE_EINVAL, "%s: path too long", dir);
    ch_buf b = {0};
    size_t len = 0;
    int rc = ch_source_local.read_file(path, NULL, 0, &len, err);
    if (rc == CH_ESMALL) {
        if (len > CH_MANIFEST_MAX_BYTES)
            rc = ch_err(err, CHUTE_ELIMIT, "%s: %zu bytes is larger than a manifest may be",
                        path, len);
        else if (ch_buf_reserve(&b, len ? len : 1) != CHUTE_OK)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        else
            rc = ch_source_local.read_file(path, b.data, b.cap, &len, err);
        if (rc == CH_ESMALL)
            rc = ch_err(err, CHUTE_EIO, "%s: file changed size while being read", path);
    }
    if (rc == CHUTE_OK) {
        ch_manifest m;
        rc = ch_manifest_parse(path, (const char *)b.data, len, &m, err);
        if (rc == CHUTE_OK) {
            out->manifest_version = m.version;
            out->max_side = m.max_side;
            out->quality = m.quality;
            out->raw = m.raw;
            ch_manifest_free(&m);
        }
    }
    ch_buf_free(&b);
    return rc;
}
