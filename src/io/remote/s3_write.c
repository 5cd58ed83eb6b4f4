/*
 * s3_write.c — every write the remote sources make: iobench's PUT and
 * DELETE of its own test objects, and the single PUT or multipart upload
 * of a dataset's files (pack and convert to s3://).
 *
 * Writes use a handle of their own, never returned to the pool, because
 * their options (upload, method, headers) differ from a GET's.  Bodies
 * are sent as UNSIGNED-PAYLOAD (TLS or loopback protects them).
 *
 * Uploads: pack and convert write a dataset to s3:// by staging it
 * locally and uploading each finished file (src/format/publish.c decides
 * the order: the manifest last).  Objects are replaced (no If-None-Match:
 * publish.c refuses a destination that holds a dataset unless asked to
 * replace it).  A file of at most part_bytes goes in one PUT; a larger one
 * as a multipart upload whose parts are read one at a time into a single
 * buffer of part_bytes, so memory is bounded whatever the file's size.
 * Each request goes through ch_http_req_run: transient failures are
 * retried with the read path's schedule (a part is sent again from its
 * start).  Any failure after CreateMultipartUpload aborts the upload, so
 * no orphaned parts stay stored (and billed) on the server.
 */
#define _GNU_SOURCE
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A handle for one write: the pool's settings, its own headers. */
static int write_req(ch_remote *s, req *r, const char *path, const char *what, int put,
                     chute_error *err)
{
    if (!s->s3)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: %s: only S3 objects can be written", path,
                      what);
    easy *x = ch_http_easy_get(s->cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    /* The body is not hashed: SigV4's UNSIGNED-PAYLOAD (TLS or loopback
     * protects it; the benchmark's bytes are random anyway). */
    struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD"), *t;
    if (h && put && (t = curl_slist_append(h, "If-None-Match: *")))
        h = t;
    if (h && s->cl->c.token_hdr[0] && (t = curl_slist_append(h, s->cl->c.token_hdr)))
        h = t;
    int rc;
    if (!h) {
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    } else {
        curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, h);
        rc = ch_http_req_run(s->cl, x, r, path, what, 0, 0, 0, err);
        curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, NULL);
    }
    curl_easy_cleanup(x->e);
    free(x);
    for (t = h; t; t = t->next)
        ch_rwipe(t->data, strlen(t->data));
    curl_slist_free_all(h);
    return rc;
}

int ch_remote_put(ch_remote *s, const char *path, const void *buf, size_t len, chute_error *err)
{
    char url[URL_MAX];
    int rc = ch_remote_session_url(s, path, url, sizeof url, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t have;
    chute_error e2;
    rc = ch_http_head(s->cl, url, path, &have, NULL, &e2);
    if (rc == CHUTE_OK)
        return ch_err(err, CHUTE_EINVAL, "%s: the object exists; it is never overwritten", path);
    if (rc != CHUTE_ENOTFOUND) {
        if (err)
            *err = e2;
        return rc;
    }
    req r = {.method = REQ_PUT, .url = url, .up = buf, .uplen = len};
    rc = write_req(s, &r, path, "PUT", 1, err);
    if (rc != CHUTE_OK && r.status == 412)
        return ch_err(err, CHUTE_EINVAL,
                      "%s: the object appeared while it was being written (HTTP 412); it is "
                      "never overwritten",
                      path);
    return rc;
}

int ch_remote_delete(ch_remote *s, const char *path, chute_error *err)
{
    char url[URL_MAX];
    int rc = ch_remote_session_url(s, path, url, sizeof url, err);
    if (rc != CHUTE_OK)
        return rc;
    req r = {.method = REQ_DELETE, .url = url};
    return write_req(s, &r, path, "DELETE", 0, err);
}

uint64_t ch_remote_part_bytes(void)
{
    return ch_remote_opt_value(CH_RENV_PART_MB) << 20; /* at least 5: S3's smallest part */
}

/* One write request on a handle of its own: `method` (PUT, POST, DELETE),
 * body up[uplen] (may be empty), answer into ans[anscap] (ans_len set).
 * etag: when not NULL, the answer's ETag header (quotes kept). */
static int up_req(ch_remote *s, const char *method, const char *url, const char *path,
                  const char *what, const void *up, size_t uplen, char *ans, size_t anscap,
                  size_t *ans_len, char *etag, size_t etcap, chute_error *err)
{
    easy *x = ch_http_easy_get(s->cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD"), *t;
    if (h && s->cl->c.token_hdr[0] && (t = curl_slist_append(h, s->cl->c.token_hdr)))
        h = t;
    /* (No "Expect:" to skip 100-continue: curl's SigV4 would sign the
     * header it never sends, and the server would refuse the signature.) */
    int rc;
    req r = {.method = strcmp(method, "DELETE") ? REQ_PUT : REQ_DELETE, .url = url,
             .up = up, .uplen = uplen, .buf = (uint8_t *)ans, .cap = anscap};
    if (!h) {
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    } else {
        curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, h);
        if (strcmp(method, "PUT"))
            curl_easy_setopt(x->e, CURLOPT_CUSTOMREQUEST, method);
        rc = ch_http_req_run(s->cl, x, &r, path, what, 0, 0, 0, err);
        if (rc == CHUTE_OK && r.overflow)
            rc = ch_err(err, CHUTE_EIO, "%s: %s: the answer is larger than %zu bytes", path,
                        what, anscap);
        if (ans_len)
            *ans_len = (size_t)CH_MIN(r.got, (uint64_t)anscap);
        if (rc == CHUTE_OK && etag) {
#if LIBCURL_VERSION_NUM >= 0x075400 /* curl_easy_header: 7.84 */
            struct curl_header *eh = NULL;
            etag[0] = '\0';
            if (curl_easy_header(x->e, "ETag", 0, CURLH_HEADER, -1, &eh) == CURLHE_OK && eh &&
                strlen(eh->value) < etcap && !strpbrk(eh->value, "<>&\r\n"))
                snprintf(etag, etcap, "%s", eh->value);
            else
                rc = ch_err(err, CHUTE_EIO, "%s: %s: the answer has no usable ETag", path, what);
#else
            rc = ch_err(err, CHUTE_EUNSUPPORTED,
                        "%s: %s: multipart uploads need libcurl 7.84 or later (curl_easy_header)",
                        path, what);
#endif
        }
        curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, NULL);
    }
    curl_easy_cleanup(x->e);
    free(x);
    for (t = h; t; t = t->next)
        ch_rwipe(t->data, strlen(t->data));
    curl_slist_free_all(h);
    return rc;
}

/* The object's URL with an (already encoded, sorted) query. */
static int up_url(ch_remote *s, const char *path, const char *query, char *url, size_t cap,
                  chute_error *err)
{
    if (!s->s3)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: only S3 objects can be written", path);
    char bucket[64];
    const char *key;
    int rc = ch_s3_split(path, bucket, sizeof bucket, &key, err);
    if (rc == CHUTE_OK && strcmp(bucket, s->bucket))
        rc = ch_err(err, CHUTE_EINVAL, "%s: not in bucket %s", path, s->bucket);
    if (rc == CHUTE_OK && !key[0])
        rc = ch_err(err, CHUTE_EINVAL, "%s: names a bucket, not an object", path);
    if (rc == CHUTE_OK)
        rc = ch_s3_url(&s->cl->c, path, bucket, key, query, url, cap, err);
    return rc;
}

int ch_remote_exists(ch_remote *s, const char *path, int *out, chute_error *err)
{
    char url[URL_MAX];
    int rc = up_url(s, path, NULL, url, sizeof url, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t size;
    chute_error e2 = {0};
    rc = ch_http_head(s->cl, url, path, &size, NULL, &e2);
    *out = rc == CHUTE_OK;
    if (rc == CHUTE_ENOTFOUND || rc == CHUTE_OK)
        return CHUTE_OK;
    if (err)
        *err = e2;
    return rc;
}

/* Exactly n bytes of fd at off into buf. */
static int up_pread(int fd, const char *file, uint64_t off, void *buf, size_t n, chute_error *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return ch_err_errno(err, CHUTE_EIO, errno, "%s: read at %llu failed", file,
                                (unsigned long long)(off + got));
        if (k == 0)
            return ch_err(err, CHUTE_EIO, "%s: %llu bytes at %llu: the file ended early", file,
                          (unsigned long long)(n - got), (unsigned long long)(off + got));
        got += (size_t)k;
    }
    return CHUTE_OK;
}

static int up_multipart(ch_remote *s, const char *path, const char *file, int fd, uint64_t size,
                        uint64_t part, uint8_t *buf, chute_error *err)
{
    char url[URL_MAX], ans[4096], upid[1024], eid[3 * 1024 + 1], q[3 * 1024 + 64], what[96];
    size_t alen = 0;
    int rc = up_url(s, path, "?uploads=", url, sizeof url, err);
    if (rc == CHUTE_OK)
        rc = up_req(s, "POST", url, path, "CreateMultipartUpload", "", 0, ans, sizeof ans - 1,
                    &alen, NULL, 0, err);
    if (rc != CHUTE_OK)
        return rc;
    if (ch_s3_upload_id(ans, alen, upid, sizeof upid) != 0 ||
        ch_s3_encode(upid, 0, eid, sizeof eid) == (size_t)-1)
        return ch_err(err, CHUTE_EIO, "%s: CreateMultipartUpload: the answer has no UploadId",
                      path);
    uint64_t nparts = (size + part - 1) / part;
    if (nparts > 10000) /* S3's limit */
        return ch_err(err, CHUTE_ELIMIT,
                      "%s: %llu bytes need %llu parts of %llu bytes; S3 allows 10000 (raise "
                      "CHUTE_REMOTE_PART_MB)",
                      path, (unsigned long long)size, (unsigned long long)nparts,
                      (unsigned long long)part);
    /* <Part><PartNumber>N</PartNumber><ETag>"..."</ETag></Part>: ~ 160 bytes each */
    size_t xcap = 64 + (size_t)nparts * 200, xlen = 0;
    char *xml = malloc(xcap);
    if (!xml)
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    else
        xlen = (size_t)snprintf(xml, xcap, "<CompleteMultipartUpload>");
    for (uint64_t k = 0; rc == CHUTE_OK && k < nparts; k++) {
        uint64_t off = k * part;
        size_t n = (size_t)CH_MIN(part, size - off);
        char etag[256];
        rc = up_pread(fd, file, off, buf, n, err);
        snprintf(q, sizeof q, "?partNumber=%llu&uploadId=%s", (unsigned long long)(k + 1), eid);
        snprintf(what, sizeof what, "UploadPart %llu of %llu", (unsigned long long)(k + 1),
                 (unsigned long long)nparts);
        if (rc == CHUTE_OK)
            rc = up_url(s, path, q, url, sizeof url, err);
        if (rc == CHUTE_OK)
            rc = up_req(s, "PUT", url, path, what, buf, n, ans, sizeof ans, NULL, etag, sizeof etag,
                        err);
        if (rc == CHUTE_OK)
            xlen += (size_t)snprintf(xml + xlen, xcap - xlen,
                                     "<Part><PartNumber>%llu</PartNumber><ETag>%s</ETag></Part>",
                                     (unsigned long long)(k + 1), etag);
    }
    if (rc == CHUTE_OK) {
        xlen += (size_t)snprintf(xml + xlen, xcap - xlen, "</CompleteMultipartUpload>");
        snprintf(q, sizeof q, "?uploadId=%s", eid);
        rc = up_url(s, path, q, url, sizeof url, err);
        if (rc == CHUTE_OK)
            rc = up_req(s, "POST", url, path, "CompleteMultipartUpload", xml, xlen, ans,
                        sizeof ans - 1, &alen, NULL, 0, err);
        /* S3 may answer 200 and still report an error in the body. */
        char code[64];
        if (rc == CHUTE_OK && (ch_s3_error_code(ans, alen, code, sizeof code), code[0]))
            rc = ch_err(err, CHUTE_EIO, "%s: CompleteMultipartUpload: failed (%s)", path, code);
    }
    free(xml);
    if (rc != CHUTE_OK) {
        snprintf(q, sizeof q, "?uploadId=%s", eid);
        if (up_url(s, path, q, url, sizeof url, NULL) == CHUTE_OK)
            up_req(s, "DELETE", url, path, "AbortMultipartUpload", "", 0, ans, sizeof ans - 1,
                   NULL, NULL, 0, NULL);
    }
    return rc;
}

int ch_remote_upload_file(ch_remote *s, const char *path, const char *file, uint64_t part_bytes,
                          chute_error *err)
{
    if (part_bytes < 4096 || part_bytes > (5ull << 30))
        return ch_err(err, CHUTE_EINVAL, "%s: part size %llu is not in 4 KiB..5 GiB", path,
                      (unsigned long long)part_bytes);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot open", file);
    struct stat st;
    int rc = CHUTE_OK;
    if (fstat(fd, &st) != 0)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot stat", file);
    uint64_t size = rc == CHUTE_OK ? (uint64_t)st.st_size : 0;
    size_t blen = (size_t)CH_MIN(size, part_bytes);
    uint8_t *buf = rc == CHUTE_OK ? malloc(blen ? blen : 1) : NULL;
    if (rc == CHUTE_OK && !buf)
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory for a %zu-byte upload buffer", path,
                    blen);
    if (rc == CHUTE_OK && size <= part_bytes) {
        char url[URL_MAX], ans[1024];
        rc = up_pread(fd, file, 0, buf, blen, err);
        if (rc == CHUTE_OK)
            rc = up_url(s, path, NULL, url, sizeof url, err);
        if (rc == CHUTE_OK)
            rc = up_req(s, "PUT", url, path, "PUT", buf, blen, ans, sizeof ans, NULL, NULL, 0, err);
    } else if (rc == CHUTE_OK) {
        rc = up_multipart(s, path, file, fd, size, part_bytes, buf, err);
    }
    free(buf);
    close(fd);
    return rc;
}