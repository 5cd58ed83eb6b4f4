/*
 * http.h — the inside of the S3 and HTTP sources, shared by the files of
 * src/io/remote/ and by nothing else (the rest of the tree sees
 * src/io/remote.h and the ch_source_s3 / ch_source_http tables).
 *
 * Why one folder of small files rather than one s3.c: the sources are six
 * jobs that change for different reasons, and each now sits in its own
 * file, in the order a request meets them:
 *
 *   aws_config.c   settings from the environment (AWS_*, CHUTE_REMOTE_*),
 *                  the shared credentials file, and how a path becomes a
 *                  URL (bucket rules, key encoding, the endpoint)
 *   http_client.c  one client: curl share handle + pool of easy handles;
 *                  one request with retries (setup, judge, backoff), HEAD
 *   s3_source.c    the source ops (open, read_at, read_file, stat, list:
 *                  ListObjectsV2 paging) and the two ops tables
 *   http_multi.c   the read-ahead engine: curl multi, coalesced ranges
 *   session.c      one pool over many objects (chute iobench)
 *   s3_write.c     PUT, DELETE and multipart upload (iobench --create,
 *                  pack/convert to s3://)
 *   s3_xml.c, tls_ca.c, remote_health.c   what they were before the split
 *
 * Every request goes through the same three steps whichever file starts
 * it: ch_http_easy_configure (the client's settings), ch_http_req_setup
 * (this request) and ch_http_req_judge + ch_http_retry_allowed (what came
 * back, and whether to ask again), so messages and the retry policy are
 * one policy.  What the files share is declared here; everything else in
 * them is static.
 *
 * What was s3.c's opening note, still true of the folder as a whole:
 *
 * s3.c — sources for objects behind HTTP: "s3://bucket/key" (S3 and
 * S3-compatible servers) and "http://", "https://" URLs, through libcurl.
 *
 * Why libcurl, and why this shape:
 *  - Signing is curl's CURLOPT_AWS_SIGV4; we never hand-write SigV4.  We
 *    only build the canonical URL curl signs: keys percent-encoded byte by
 *    byte (unreserved and '/' kept, so "a b/ü+x" becomes "a%20b/%C3%BC%2Bx"),
 *    query parameters encoded and already in sorted order, and
 *    CURLOPT_PATH_AS_IS so curl never folds a key's ".." or "//" (a key is
 *    not a path: "a/../b" is its own object).
 *  - An opened object owns a small pool of curl easy handles and one
 *    curl share handle (DNS cache and connection cache, with lock
 *    callbacks) so the loader's many worker threads each take a handle,
 *    reuse a kept-alive connection, and put it back: after warm-up a read
 *    allocates nothing of ours (curl itself may, per request).  The pool
 *    and share are per opened object, not process-wide, because chute
 *    keeps no global mutable state; the formats keep their shards open for
 *    the whole run, so in steady state the pool is warm.  stat, list and
 *    read_file have no handle to hang a pool on and make a short-lived one
 *    per call (one connection each): fine for listing and manifests,
 *    the cost a tree of small remote files pays until the read-ahead stage
 *    owns the connections.
 *  - The read-ahead stage drives the aio_* entries (source ops version
 *    4): one curl multi engine per read-ahead thread, see "the read-ahead
 *    engine" in http_multi.c.  A request is configured
 *    (ch_http_easy_configure), built (ch_http_req_setup) and judged
 *    (ch_http_req_judge, ch_http_retry_allowed, ch_http_backoff_ns) by the
 *    same code whichever way it is driven.
 *  - Faults.  Transient failures (connection refused/reset, timeouts, a
 *    short or cut body, HTTP 5xx and 429, S3's SlowDown / InternalError /
 *    RequestTimeout codes) are retried with capped exponential backoff and
 *    full jitter, bounded both in attempts and total time; permanent ones
 *    (403, 404, 400, a bad key or signature) fail at once.  A body that is
 *    not exactly the bytes asked for is CHUTE_EIO, never part of a sample.
 *    404 is CHUTE_ENOTFOUND, everything else CHUTE_EIO, so the loader's I/O
 *    policy (retry, then fail, never skip) applies.
 *  - Credentials live only in the easy handles' options (CURLOPT_USERNAME,
 *    CURLOPT_PASSWORD, the x-amz-security-token header) and are wiped when
 *    freed.  Messages name the path the user gave (s3://bucket/key), the
 *    HTTP status and S3's error <Code>, never the server's free-text
 *    message, a header or a credential.
 *
 * Settings come from the environment the AWS tools use (AWS_REGION,
 * AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_PROFILE,
 * AWS_SHARED_CREDENTIALS_FILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN) and a few of ours (CHUTE_REMOTE_*, the rows of
 * src/common/remote_options.def), listed in docs/REMOTE.md and OPTIONS.md; they are read when an object is opened (or stat/list
 * called), never cached process-wide.
 */
#ifndef CHUTE_IO_REMOTE_HTTP_H
#define CHUTE_IO_REMOTE_HTTP_H

#include "../remote.h"
#include "remote_health.h"
#include "common/remote_options.h"

#include <curl/curl.h>
#include <pthread.h>

#define POOL_MAX 64
#define URL_MAX 4096

/* ---- configuration (aws_config.c) ------------------------------------------- */

typedef struct rconf {
    int s3;
    char region[64];
    char endpoint[512];      /* S3: "" = AWS virtual-hosted */
    char sigv4[96];          /* "aws:amz:REGION:s3"; "" = anonymous */
    char user[256];          /* access key id */
    char secret[256];
    char token_hdr[4096];    /* "x-amz-security-token: ..." or "" */
    unsigned retries;        /* retries after the first attempt */
    uint64_t retry_total_ns; /* give up once this much time has passed */
    uint64_t backoff_ns, backoff_cap_ns;
    long connect_ms, stall_s;
    long recv_buf;           /* CURLOPT_BUFFERSIZE: at most this per recv() (ch_http_easy_new) */
    ch_tls_ca ca;            /* CURLOPT_CAINFO / CAPATH (tls_ca.c) */
} rconf;

/* Zero n bytes so that the compiler cannot drop the stores (secrets). */
void ch_rwipe(void *p, size_t n);
/* Strip blanks (and line ends) from both ends of s, in place. */
void ch_rtrim(char *s);
/* Load the settings for an s3:// (s3 = 1) or http(s):// object from the
 * environment and the credentials file; ch_rconf_wipe when done. */
int ch_rconf_load(rconf *c, int s3, chute_error *err);
void ch_rconf_wipe(rconf *c);
/* "s3://bucket/key" -> bucket (bcap >= 64) and key (may be ""). */
int ch_s3_split(const char *path, char *bucket, size_t bcap, const char **key,
                chute_error *err);
/* The URL of bucket (+ encoded key, + query) under configuration c. */
int ch_s3_url(const rconf *c, const char *path, const char *bucket, const char *key,
              const char *query, char *url, size_t cap, chute_error *err);
/* An http(s) URL as given, with what a URL cannot hold percent-encoded. */
int ch_http_url(const char *path, char *url, size_t cap, chute_error *err);
/* The URL of an object path under configuration c (s3:// or http(s)://). */
int ch_remote_object_url(const rconf *c, const char *path, char *url, size_t cap,
                         chute_error *err);

/* ---- one client and its requests (http_client.c) ------------------------------ */

typedef struct easy {
    CURL *e;
    char errbuf[CURL_ERROR_SIZE];
} easy;

typedef struct client {
    rconf c;
    CURLSH *share;
    pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
    struct curl_slist *hdrs;
    pthread_mutex_t pool_mu; /* protects pool[], npool */
    easy *pool[POOL_MAX];
    int npool;
} client;

enum { REQ_GET, REQ_HEAD, REQ_PUT, REQ_DELETE };

typedef struct req {
    int method;
    const char *url;
    const char *range;       /* "a-b" or NULL */
    /* body: into buf[cap] (fixed), or growing in dyn (listing) */
    uint8_t *buf;
    size_t cap;
    int grow;
    uint8_t *dyn;
    size_t dcap;
    uint64_t got;            /* body bytes received (counted past cap) */
    int overflow;            /* more than cap arrived (fixed buffer) */
    long status;
    char ebody[2048];        /* an error's body, for its <Code> */
    size_t elen;
    char crange[128];        /* Content-Range header */
    int have_crange;
    const uint8_t *up;       /* REQ_PUT: the body, uplen bytes (upos sent so far) */
    size_t uplen, upos;
} req;

/* curl_global_init, once per process; its result. */
CURLcode ch_http_curl_init(void);
int ch_http_client_new(const rconf *c, const char *path, client **out, chute_error *err);
void ch_http_client_free(client *cl); /* NULL is fine */
/* Set every client-dependent option of x; share: cl's, or NULL (multi). */
void ch_http_easy_configure(easy *x, const client *cl, CURLSH *share);
/* A new curl handle with c's receive buffer (CURLOPT_BUFFERSIZE). */
CURL *ch_http_easy_new(const rconf *c);
/* A configured handle from cl's pool (or a new one); NULL when out of
 * memory.  ch_http_easy_put gives it back (NULL is fine). */
easy *ch_http_easy_get(client *cl);
void ch_http_easy_put(client *cl, easy *x);
/* The write callback that stores a body (or an error document) in r. */
size_t ch_http_on_body(char *p, size_t sz, size_t nm, void *u);
/* Set r's request on x, with `body` as the write callback. */
void ch_http_req_setup(easy *x, req *r, curl_write_callback body, void *body_user);
/* After a try: the status curl saw, if the header callback missed it. */
void ch_http_req_finish(easy *x, req *r);
/* Judge one finished try: CHUTE_OK, a final error, or CH_ESMALL (not
 * settled: why[256] says what happened, *transient whether to retry). */
int ch_http_req_judge(const rconf *c, easy *x, req *r, CURLcode cc, const char *path,
                      const char *what, uint64_t off, size_t len, int ranged, char *why,
                      int *transient, chute_error *err);
/* After CH_ESMALL: CHUTE_OK if another try is allowed, else the final
 * CHUTE_EIO message (attempts, time); *deadline may move forward. */
int ch_http_retry_allowed(const rconf *c, const char *url, unsigned attempt, uint64_t start,
                          uint64_t *deadline, int transient, const char *path,
                          const char *what, const char *why, chute_error *err);
/* How long to wait before try attempt+1 (capped, full jitter). */
uint64_t ch_http_backoff_ns(const rconf *c, unsigned attempt, uint64_t deadline,
                            const void *salt);
/* Run r on x with retries (the blocking path). */
int ch_http_req_run(client *cl, easy *x, req *r, const char *path, const char *what,
                    uint64_t off, size_t len, int ranged, chute_error *err);
/* HEAD: size and (when mtime_ns) modification time. */
int ch_http_head(client *cl, const char *url, const char *path, uint64_t *size,
                 int64_t *mtime_ns, chute_error *err);
/* A whole-object GET that succeeded: all of it arrived (CHUTE_OK, or
 * CH_ESMALL when larger than the buffer), *out_len = its size. */
int ch_http_whole_check(easy *x, const req *r, const char *path, size_t *out_len,
                        chute_error *err);

/* ---- an opened object (s3_source.c; read by http_multi.c) --------------------- */

typedef struct rfile {
    client *cl;
    char url[URL_MAX];
    uint64_t size;
} rfile;

/* ---- the read-ahead engine (http_multi.c): source ops aio_* ------------------- */

int ch_http_multi_open(void *self, unsigned depth, void **engine, chute_error *err);
int ch_http_multi_submit(void *engine, ch_aio_req *q);
int ch_http_multi_reap(void *engine, ch_aio_req **done, unsigned max, int wait_ms);
void ch_http_multi_close(void *engine);

/* ---- a session over many objects (session.c; written by s3_write.c) ----------- */

struct ch_remote {
    client *cl;
    int s3;
    char bucket[64];
};

/* The URL of an object path of s's bucket (or any http URL). */
int ch_remote_session_url(ch_remote *s, const char *path, char *url, size_t cap,
                          chute_error *err);

#endif
