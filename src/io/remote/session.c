/*
 * session.c — a session over many objects (chute iobench): one client
 * for all of them and no HEAD per object, the sizes coming from the
 * listing.
 *
 * The source ops open one object at a time (a HEAD, then a pool of its
 * own); a benchmark over thousands of small objects wants one pool for
 * all of them.  It also needs to write and remove its own test objects:
 * PUT refuses a key that exists (a HEAD first, and If-None-Match: * so
 * that a server that knows conditional writes refuses a race too),
 * DELETE removes one key; those, and the uploads pack and convert make
 * through the same session, are in s3_write.c.
 */
#define _GNU_SOURCE
#include "http.h"

#include <stdio.h>
#include <string.h>

int ch_remote_new(const char *path, ch_remote **out, chute_error *err)
{
    ch_remote *s = calloc(1, sizeof *s);
    if (!s)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    s->s3 = !strncmp(path, "s3://", 5);
    rconf c;
    const char *key;
    int rc = ch_rconf_load(&c, s->s3, err);
    if (rc == CHUTE_OK && s->s3)
        rc = ch_s3_split(path, s->bucket, sizeof s->bucket, &key, err);
    if (rc == CHUTE_OK)
        rc = ch_http_client_new(&c, path, &s->cl, err);
    ch_rconf_wipe(&c);
    if (rc != CHUTE_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return CHUTE_OK;
}

void ch_remote_free(ch_remote *s)
{
    if (!s)
        return;
    ch_http_client_free(s->cl);
    free(s);
}

/* The URL of an object path of this session's bucket (or any http URL). */
int ch_remote_session_url(ch_remote *s, const char *path, char *url, size_t cap, chute_error *err)
{
    if (!s->s3)
        return ch_http_url(path, url, cap, err);
    char bucket[64];
    const char *key;
    int rc = ch_s3_split(path, bucket, sizeof bucket, &key, err);
    if (rc == CHUTE_OK && strcmp(bucket, s->bucket))
        rc = ch_err(err, CHUTE_EINVAL, "%s: not in bucket %s", path, s->bucket);
    if (rc == CHUTE_OK && !key[0])
        rc = ch_err(err, CHUTE_EINVAL, "%s: names a bucket, not an object", path);
    if (rc == CHUTE_OK)
        rc = ch_s3_url(&s->cl->c, path, bucket, key, NULL, url, cap, err);
    return rc;
}

int ch_remote_get(ch_remote *s, const char *path, uint64_t off, void *buf, size_t len,
                  chute_error *err)
{
    if (len == 0)
        return CHUTE_OK;
    if (off > UINT64_MAX - len)
        return ch_err(err, CHUTE_EINVAL, "%s: range overflows", path);
    char url[URL_MAX];
    int rc = ch_remote_session_url(s, path, url, sizeof url, err);
    if (rc != CHUTE_OK)
        return rc;
    easy *x = ch_http_easy_get(s->cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    char range[64], what[96];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    snprintf(what, sizeof what, "GET bytes=%s", range);
    req r = {.method = REQ_GET, .url = url, .range = range, .buf = buf, .cap = len};
    rc = ch_http_req_run(s->cl, x, &r, path, what, off, len, 1, err);
    ch_http_easy_put(s->cl, x);
    return rc;
}
