/*
 * dataset.c — the public chute_dataset_* calls: detect the source kind,
 * open it through its format, and answer questions about samples.
 */
#define _GNU_SOURCE
#include "format.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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
    memset(ds, 0, sizeof *ds);
}

/* A directory holding shard files (or pack's temporaries) but no manifest
 * is an interrupted pack, not an image tree: say so instead of "no class
 * directories". */
static int looks_like_partial_pack(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        found = ch_packfile_kind(de->d_name, NULL) != CH_PACKFILE_OTHER;
    }
    closedir(d);
    return found;
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
    if (i >= ds->n)
        return;
    ds->fmt->file_of(ds, i, path, sizeof path);
    ch_drop_page_cache(path);
}

int chute_dataset_open_ex(const char *path, const chute_dataset_options *opt,
                          chute_dataset **out_ds, chute_error *err)
{
    chute_source_kind kind = opt ? opt->kind : CHUTE_SOURCE_AUTO;
    if (!path || !out_ds)
        return ch_err(err, CHUTE_EINVAL, "chute_dataset_open: path and out_ds are required");
    *out_ds = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return ch_err_errno(err, errno == ENOENT ? CHUTE_ENOTFOUND : CHUTE_EIO, errno, "%s",
                            path);
    if (!S_ISDIR(st.st_mode))
        return ch_err(err, CHUTE_EFORMAT,
                      "%s: not a directory (expected an image tree or a chute shard directory)",
                      path);
    if (kind == CHUTE_SOURCE_AUTO) {
        char m[4096];
        snprintf(m, sizeof m, "%s/%s", path, CH_MANIFEST_NAME);
        kind = access(m, F_OK) == 0 ? CHUTE_SOURCE_SHARDS : CHUTE_SOURCE_TREE;
        if (kind == CHUTE_SOURCE_TREE && looks_like_partial_pack(path))
            return ch_err(err, CHUTE_EFORMAT,
                          "%s: shard files but no %s: an incomplete chute shard directory (was "
                          "'chute pack' interrupted? run it again)",
                          path, CH_MANIFEST_NAME);
    }
    chute_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->src = &ch_source_local;
    ds->root = strdup(path);
    /* Strip trailing slashes so messages read "root/cls/x.jpg". */
    size_t n = ds->root ? strlen(ds->root) : 0;
    while (n > 1 && ds->root[n - 1] == '/')
        ds->root[--n] = '\0';
    int rc;
    if (!ds->root)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    else if (kind == CHUTE_SOURCE_SHARDS)
        rc = ch_shards_open(ds, ds->root, err);
    else if (kind == CHUTE_SOURCE_TREE)
        rc = ch_tree_open(ds, ds->root, err);
    else
        rc = ch_err(err, CHUTE_EINVAL, "unknown source kind %d", (int)kind);
    if (rc != CHUTE_OK) {
        ch_dataset_free_fields(ds);
        free(ds);
        return rc;
    }
    ds->read_delay_us = opt ? opt->read_delay_us : 0;
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
    return ds ? ds->kind : CHUTE_SOURCE_AUTO;
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
