/*
 * s3_source.c — the source ops of s3:// and http(s)://: open (a HEAD,
 * then the object's own client), read_at (one ranged GET), read_file,
 * stat and list (S3's ListObjectsV2, every page), and the two ops tables
 * the source registry holds (ch_source_s3, ch_source_http).
 *
 * Why here and not in http_client.c: these are what a path means to the
 * rest of chute (a file, a directory, a missing key), while the client
 * only knows requests.  stat, list and read_file have no opened object
 * to hang a pool on and make a short-lived client per call (one
 * connection each): fine for listing and manifests.  The aio_* entries
 * of the tables are the read-ahead engine of http_multi.c.
 */
#define _GNU_SOURCE
#include "http.h"

#include <stdio.h>
#include <string.h>

/* ---- the source ops ------------------------------------------------------------ */
static int resolve(const char *path, rconf *c, char *url, size_t cap, chute_error *err)
{
    int rc = ch_rconf_load(c, !strncmp(path, "s3://", 5), err);
    if (rc != CHUTE_OK)
        return rc;
    return ch_remote_object_url(c, path, url, cap, err);
}

static int remote_open(const char *path, void **out, uint64_t *out_size, chute_error *err)
{
    rfile *f = calloc(1, sizeof *f);
    if (!f)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    rconf c;
    int rc = resolve(path, &c, f->url, sizeof f->url, err);
    if (rc == CHUTE_OK)
        rc = ch_http_client_new(&c, path, &f->cl, err);
    ch_rconf_wipe(&c);
    if (rc == CHUTE_OK)
        rc = ch_http_head(f->cl, f->url, path, &f->size, NULL, err);
    if (rc != CHUTE_OK) {
        ch_http_client_free(f->cl);
        free(f);
        return rc;
    }
    *out = f;
    if (out_size)
        *out_size = f->size;
    return CHUTE_OK;
}

static int remote_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                          chute_error *err)
{
    rfile *f = h;
    if (len == 0)
        return CHUTE_OK;
    if (off > f->size || len > f->size - off)
        return ch_err(err, CHUTE_EIO, "%s@%llu: read of %zu bytes past the end (%llu bytes)",
                      path, (unsigned long long)off, len, (unsigned long long)f->size);
    easy *x = ch_http_easy_get(f->cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    char range[64], what[96];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    snprintf(what, sizeof what, "GET bytes=%s", range);
    req r = {.method = REQ_GET, .url = f->url, .range = range, .buf = buf, .cap = len};
    int rc = ch_http_req_run(f->cl, x, &r, path, what, off, len, 1, err);
    ch_http_easy_put(f->cl, x);
    return rc;
}

static void remote_close(void *h)
{
    rfile *f = h;
    if (!f)
        return;
    ch_http_client_free(f->cl);
    free(f);
}

static int remote_read_file(const char *path, void *buf, size_t cap, size_t *out_len,
                            chute_error *err)
{
    rconf c;
    char url[URL_MAX];
    client *cl = NULL;
    int rc = resolve(path, &c, url, sizeof url, err);
    if (rc == CHUTE_OK)
        rc = ch_http_client_new(&c, path, &cl, err);
    ch_rconf_wipe(&c);
    if (rc != CHUTE_OK)
        return rc;
    easy *x = ch_http_easy_get(cl);
    if (!x) {
        ch_http_client_free(cl);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    }
    req r = {.method = REQ_GET, .url = url, .buf = buf, .cap = cap};
    rc = ch_http_req_run(cl, x, &r, path, "GET", 0, 0, 0, err);
    if (rc == CHUTE_OK)
        rc = ch_http_whole_check(x, &r, path, out_len, err);
    ch_http_easy_put(cl, x);
    ch_http_client_free(cl);
    return rc;
}

/* ---- S3 listing ---------------------------------------------------------------- */

typedef struct list_fwd {
    ch_list_fn fn;
    void *user;
    uint64_t n;
} list_fwd;

static int fwd_entry(void *u, const char *name, int is_dir, uint64_t size)
{
    list_fwd *l = u;
    ch_stat st = {.type = is_dir ? CH_ENT_DIR : CH_ENT_FILE, .size = size};
    l->n++;
    return l->fn(l->user, name, &st);
}

/* ListObjectsV2 of "prefix" with delimiter '/', every page.  max_keys 0 =
 * the server's default (1000). */
static int s3_list_prefix(client *cl, const char *path, const char *bucket, const char *prefix,
                          unsigned max_keys, ch_s3_entry_fn fn, void *user, chute_error *err)
{
    char eprefix[URL_MAX], etoken[3 * 1024 + 1], query[URL_MAX + 3200], url[URL_MAX + 4096];
    if (ch_s3_encode(prefix, 0, eprefix, sizeof eprefix) == (size_t)-1)
        return ch_err(err, CHUTE_EINVAL, "%s: the prefix is too long", path);
    easy *x = ch_http_easy_get(cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    ch_s3_page page;
    page.next_token[0] = '\0';
    req r = {.method = REQ_GET, .grow = 1};
    int rc = CHUTE_OK;
    for (unsigned pageno = 0;; pageno++) {
        char mk[32] = "";
        if (max_keys)
            snprintf(mk, sizeof mk, "&max-keys=%u", max_keys);
        etoken[0] = '\0';
        if (page.next_token[0] &&
            ch_s3_encode(page.next_token, 0, etoken, sizeof etoken) == (size_t)-1) {
            rc = ch_err(err, CHUTE_EFORMAT, "%s: continuation token too long", path);
            break;
        }
        /* sorted by name: SigV4's canonical query is the sorted one */
        snprintf(query, sizeof query, "?%s%s%sdelimiter=%%2F&list-type=2%s&prefix=%s",
                 etoken[0] ? "continuation-token=" : "", etoken, etoken[0] ? "&" : "", mk,
                 eprefix);
        rc = ch_s3_url(&cl->c, path, bucket, "", query, url, sizeof url, err);
        if (rc != CHUTE_OK)
            break;
        r.url = url;
        char what[64];
        snprintf(what, sizeof what, "ListObjectsV2 page %u", pageno + 1);
        rc = ch_http_req_run(cl, x, &r, path, what, 0, 0, 0, err);
        if (rc != CHUTE_OK)
            break;
        rc = ch_s3_parse_list((const char *)r.dyn, (size_t)r.got, prefix, fn, user, &page, path,
                              err);
        if (rc != CHUTE_OK || page.stopped || !page.truncated)
            break;
    }
    free(r.dyn);
    ch_http_easy_put(cl, x);
    return rc;
}

static int s3_session(const char *path, client **cl, char *bucket, const char **key,
                      chute_error *err)
{
    rconf c;
    int rc = ch_rconf_load(&c, 1, err);
    if (rc == CHUTE_OK)
        rc = ch_s3_split(path, bucket, 64, key, err);
    if (rc == CHUTE_OK)
        rc = ch_http_client_new(&c, path, cl, err);
    ch_rconf_wipe(&c);
    return rc;
}

/* "dir" as a key prefix: "" for the bucket, else the key with one '/'. */
static int dir_prefix(const char *path, const char *key, char *out, size_t cap, chute_error *err)
{
    size_t n = strlen(key);
    while (n && key[n - 1] == '/')
        n--;
    if (n + 2 > cap)
        return ch_err(err, CHUTE_EINVAL, "%s: the key is too long", path);
    memcpy(out, key, n);
    if (n)
        out[n++] = '/';
    out[n] = '\0';
    return CHUTE_OK;
}

static int s3_list(const char *dir, ch_list_fn fn, void *user, chute_error *err)
{
    client *cl = NULL;
    char bucket[64], prefix[URL_MAX];
    const char *key;
    int rc = s3_session(dir, &cl, bucket, &key, err);
    if (rc == CHUTE_OK)
        rc = dir_prefix(dir, key, prefix, sizeof prefix, err);
    list_fwd l = {fn, user, 0};
    if (rc == CHUTE_OK)
        rc = s3_list_prefix(cl, dir, bucket, prefix, 0, fwd_entry, &l, err);
    if (rc == CHUTE_OK && l.n == 0 && prefix[0])
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: no objects under s3://%s/%s", dir, bucket, prefix);
    ch_http_client_free(cl);
    return rc;
}

static int any_entry(void *u, const char *name, int is_dir, uint64_t size)
{
    *(int *)u = 1;
    return 1;
}

static int s3_stat(const char *path, ch_stat *out, chute_error *err)
{
    client *cl = NULL;
    char bucket[64], prefix[URL_MAX], url[URL_MAX];
    const char *key;
    memset(out, 0, sizeof *out);
    int rc = s3_session(path, &cl, bucket, &key, err);
    if (rc != CHUTE_OK)
        return rc;
    size_t kl = strlen(key);
    if (kl && key[kl - 1] != '/') {
        rc = ch_s3_url(&cl->c, path, bucket, key, NULL, url, sizeof url, err);
        if (rc == CHUTE_OK)
            rc = ch_http_head(cl, url, path, &out->size, &out->mtime_ns, err);
        if (rc == CHUTE_OK) {
            out->type = CH_ENT_FILE;
            ch_http_client_free(cl);
            return CHUTE_OK;
        }
        if (rc != CHUTE_ENOTFOUND) {
            ch_http_client_free(cl);
            return rc;
        }
    }
    /* not an object: a "directory" when some key lies below it */
    chute_error e2;
    int any = 0;
    rc = dir_prefix(path, key, prefix, sizeof prefix, err);
    if (rc == CHUTE_OK)
        rc = s3_list_prefix(cl, path, bucket, prefix, 1, any_entry, &any, &e2);
    if (rc != CHUTE_OK)
        ch_err(err, rc, "%s", e2.message);
    else if (any || !prefix[0])
        out->type = CH_ENT_DIR;
    else
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: no such key or prefix in bucket %s", path, bucket);
    ch_http_client_free(cl);
    return rc;
}

static int http_stat(const char *path, ch_stat *out, chute_error *err)
{
    rconf c;
    char url[URL_MAX];
    client *cl = NULL;
    memset(out, 0, sizeof *out);
    /* HTTP has no directories: a URL ending in '/' is one by how it is
     * written, and a HEAD of it tells nothing (servers answer it with an
     * index page, 403 or 404).  What lies inside is found by name: a
     * shard directory's manifest; other formats need a listing and fail
     * in list with a message saying so. */
    size_t pl = strlen(path);
    if (pl && path[pl - 1] == '/') {
        out->type = CH_ENT_DIR;
        return CHUTE_OK;
    }
    int rc = resolve(path, &c, url, sizeof url, err);
    if (rc == CHUTE_OK)
        rc = ch_http_client_new(&c, path, &cl, err);
    ch_rconf_wipe(&c);
    if (rc == CHUTE_OK)
        rc = ch_http_head(cl, url, path, &out->size, &out->mtime_ns, err);
    if (rc == CHUTE_OK)
        out->type = CH_ENT_FILE;
    else if (rc == CHUTE_ENOTFOUND && err)
        ch_err(err, rc, "%s (if it is a directory, its URL must end in '/')", err->message);
    ch_http_client_free(cl);
    return rc;
}

static int http_list(const char *dir, ch_list_fn fn, void *user, chute_error *err)
{
    return ch_err(err, CHUTE_EUNSUPPORTED,
                  "%s: HTTP has no directory listing: a URL ending in '/' opens only as a chute "
                  "shard directory (its manifest names the files); name one TFRecord or tar file, "
                  "or use s3://",
                  dir);
}

static const char *const s3_schemes[] = {"s3://", NULL};
static const char *const http_schemes[] = {"http://", "https://", NULL};

const ch_source_ops ch_source_s3 = {
    .version = CH_SOURCE_OPS_VERSION,
    .caps = CH_SOURCE_CAP_PREAD,
    .name = "s3",
    .open = remote_open,
    .read_at = remote_read_at,
    .close = remote_close,
    .read_file = remote_read_file,
    .schemes = s3_schemes,
    .stat = s3_stat,
    .list = s3_list,
    .aio_open = ch_http_multi_open,
    .aio_submit = ch_http_multi_submit,
    .aio_reap = ch_http_multi_reap,
    .aio_close = ch_http_multi_close,
};

const ch_source_ops ch_source_http = {
    .version = CH_SOURCE_OPS_VERSION,
    .caps = CH_SOURCE_CAP_PREAD,
    .name = "http",
    .open = remote_open,
    .read_at = remote_read_at,
    .close = remote_close,
    .read_file = remote_read_file,
    .schemes = http_schemes,
    .stat = http_stat,
    .list = http_list,
    .aio_open = ch_http_multi_open,
    .aio_submit = ch_http_multi_submit,
    .aio_reap = ch_http_multi_reap,
    .aio_close = ch_http_multi_close,
};