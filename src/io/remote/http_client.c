/*
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
 *    engine" below.  A request is configured (easy_configure), built
 *    (req_setup) and judged (req_judge, retry_allowed, backoff_ns) by the
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
 * AWS_SESSION_TOKEN) and a few of ours (CHUTE_REMOTE_*), listed in
 * docs/REMOTE.md; they are read when an object is opened (or stat/list
 * called), never cached process-wide.
 */
#define _GNU_SOURCE
#include "../remote.h"
#include "remote_health.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define POOL_MAX 64
#define URL_MAX 4096
#define RECV_BUF_KB 512 /* CURLOPT_BUFFERSIZE; see easy_new */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---- configuration ---------------------------------------------------------- */

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
    long recv_buf;           /* CURLOPT_BUFFERSIZE: at most this much per recv() (easy_new) */
    ch_tls_ca ca;            /* CURLOPT_CAINFO / CAPATH (tls_ca.c) */
} rconf;

static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

static uint64_t env_u64(const char *name, uint64_t dflt, uint64_t max)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > max)
        return dflt;
    return v;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    size_t k = 0;
    while (s[k] == ' ' || s[k] == '\t')
        k++;
    memmove(s, s + k, n - k + 1);
}

/* The shared credentials file (INI): [profile] then key = value lines. */
static int creds_from_file(rconf *c, chute_error *err)
{
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
    char path[1024];
    if (!file || !*file) {
        const char *home = getenv("HOME");
        if (!home)
            return CHUTE_OK;
        snprintf(path, sizeof path, "%s/.aws/credentials", home);
        file = path;
    }
    const char *profile = getenv("AWS_PROFILE");
    int named = profile && *profile;
    if (!named)
        profile = "default";
    FILE *f = fopen(file, "re");
    if (!f) {
        if (named)
            return ch_err(err, CHUTE_EINVAL,
                          "AWS_PROFILE=%s is set but the credentials file %s cannot be read",
                          profile, file);
        return CHUTE_OK; /* no file: anonymous */
    }
    char line[4096], tok[4096] = "";
    int in = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        trim(line);
        if (line[0] == '#' || line[0] == ';' || !line[0])
            continue;
        if (line[0] == '[') {
            char *close = strchr(line, ']');
            if (close)
                *close = '\0';
            char *name = line + 1;
            trim(name);
            in = !strcmp(name, profile);
            found |= in;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in || !eq)
            continue;
        *eq = '\0';
        char *k = line, *v = eq + 1;
        trim(k);
        trim(v);
        if (!strcasecmp(k, "aws_access_key_id"))
            snprintf(c->user, sizeof c->user, "%s", v);
        else if (!strcasecmp(k, "aws_secret_access_key"))
            snprintf(c->secret, sizeof c->secret, "%s", v);
        else if (!strcasecmp(k, "aws_session_token"))
            snprintf(tok, sizeof tok, "%s", v);
    }
    fclose(f);
    wipe(line, sizeof line);
    if (named && !found)
        return ch_err(err, CHUTE_EINVAL, "AWS_PROFILE=%s: no such profile in %s", profile, file);
    if (found && (!c->user[0] || !c->secret[0])) {
        wipe(c->secret, sizeof c->secret);
        wipe(tok, sizeof tok);
        return ch_err(err, CHUTE_EINVAL,
                      "%s: profile [%s] lacks aws_access_key_id or aws_secret_access_key", file,
                      profile);
    }
    int rc = CHUTE_OK;
    if (strlen(tok) + 32 >= sizeof c->token_hdr)
        rc = ch_err(err, CHUTE_EINVAL, "%s: profile [%s]: aws_session_token is too long", file,
                    profile);
    else if (tok[0])
        snprintf(c->token_hdr, sizeof c->token_hdr, "x-amz-security-token: %.4000s", tok);
    wipe(tok, sizeof tok);
    return rc;
}

static int conf_load(rconf *c, int s3, chute_error *err)
{
    memset(c, 0, sizeof *c);
    c->s3 = s3;
    c->retries = (unsigned)env_u64("CHUTE_REMOTE_RETRIES", 10, 1000);
    c->retry_total_ns = env_u64("CHUTE_REMOTE_RETRY_TOTAL_MS", 60000, 86400000) * 1000000ull;
    c->backoff_ns = env_u64("CHUTE_REMOTE_BACKOFF_MS", 100, 60000) * 1000000ull;
    c->backoff_cap_ns = env_u64("CHUTE_REMOTE_BACKOFF_CAP_MS", 5000, 600000) * 1000000ull;
    c->connect_ms = (long)env_u64("CHUTE_REMOTE_CONNECT_TIMEOUT_MS", 5000, 600000);
    c->stall_s = (long)env_u64("CHUTE_REMOTE_STALL_S", 30, 3600);
    c->recv_buf =
        (long)CH_MAX(env_u64("CHUTE_REMOTE_RECV_BUFFER_KB", RECV_BUF_KB, 10240), 16) * 1024;
    int carc = ch_tls_ca_resolve(&c->ca, err);
    if (carc != CHUTE_OK)
        return carc;
    if (!s3)
        return CHUTE_OK;
    const char *r = getenv("AWS_REGION");
    if (!r || !*r)
        r = getenv("AWS_DEFAULT_REGION");
    if (!r || !*r)
        r = "us-east-1";
    for (const char *q = r; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-'))
            return ch_err(err, CHUTE_EINVAL, "AWS_REGION \"%s\" is not a region name", r);
    snprintf(c->region, sizeof c->region, "%s", r);
    const char *ep = getenv("AWS_ENDPOINT_URL_S3");
    if (!ep || !*ep)
        ep = getenv("AWS_ENDPOINT_URL");
    if (ep && *ep) {
        if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8))
            return ch_err(err, CHUTE_EINVAL, "S3 endpoint \"%s\" is not an http(s):// URL", ep);
        if (strlen(ep) >= sizeof c->endpoint)
            return ch_err(err, CHUTE_EINVAL, "S3 endpoint URL is too long");
        snprintf(c->endpoint, sizeof c->endpoint, "%s", ep);
        size_t n = strlen(c->endpoint);
        while (n && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = '\0';
    }
    const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    if (ak && *ak && sk && *sk) {
        if (strlen(ak) >= sizeof c->user || strlen(sk) >= sizeof c->secret)
            return ch_err(err, CHUTE_EINVAL, "AWS credentials in the environment are too long");
        snprintf(c->user, sizeof c->user, "%s", ak);
        snprintf(c->secret, sizeof c->secret, "%s", sk);
        const char *tok = getenv("AWS_SESSION_TOKEN");
        if (tok && *tok) {
            if (strlen(tok) + 32 >= sizeof c->token_hdr)
                return ch_err(err, CHUTE_EINVAL, "AWS_SESSION_TOKEN is too long");
            snprintf(c->token_hdr, sizeof c->token_hdr, "x-amz-security-token: %s", tok);
        }
    } else {
        int rc = creds_from_file(c, err);
        if (rc != CHUTE_OK)
            return rc;
    }
    if (c->user[0])
        snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", c->region);
    return CHUTE_OK;
}

static void conf_wipe(rconf *c) { wipe(c, sizeof *c); }

/* ---- names ------------------------------------------------------------------- */

/* "s3://bucket/key" -> bucket and key (key may be ""). */
static int s3_split(const char *path, char *bucket, size_t bcap, const char **key,
                    chute_error *err)
{
    const char *b = path + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl < 3 || bl > 63 || bl >= bcap)
        return ch_err(err, CHUTE_EINVAL, "%s: a bucket name has 3 to 63 characters", path);
    for (size_t i = 0; i < bl; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' ||
              b[i] == '.'))
            return ch_err(err, CHUTE_EINVAL,
                          "%s: a bucket name has only lower-case letters, digits, '-' and '.'",
                          path);
    memcpy(bucket, b, bl);
    bucket[bl] = '\0';
    *key = slash ? slash + 1 : "";
    return CHUTE_OK;
}

/* The URL of bucket (+ encoded key, + query) for this configuration. */
static int s3_url(const rconf *c, const char *path, const char *bucket, const char *key,
                  const char *query, char *url, size_t cap, chute_error *err)
{
    char ek[URL_MAX];
    if (ch_s3_encode(key, 1, ek, sizeof ek) == (size_t)-1)
        return ch_err(err, CHUTE_EINVAL, "%s: the key is too long", path);
    int n;
    if (c->endpoint[0])
        n = snprintf(url, cap, "%s/%s%s%s%s", c->endpoint, bucket, key[0] || !query ? "/" : "", ek,
                     query ? query : "");
    else
        n = snprintf(url, cap, "https://%s.s3.%s.amazonaws.com/%s%s", bucket, c->region, ek,
                     query ? query : "");
    if (n < 0 || (size_t)n >= cap)
        return ch_err(err, CHUTE_EINVAL, "%s: the URL is too long", path);
    return CHUTE_OK;
}

/* An http(s) URL as given, with the bytes a URL cannot hold (space,
 * controls, non-ASCII, quotes and brackets) percent-encoded. */
static int http_url(const char *path, char *url, size_t cap, chute_error *err)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (const unsigned char *s = (const unsigned char *)path; *s; s++) {
        int esc = *s <= 0x20 || *s >= 0x7f || strchr("\"<>\\^`{|}", *s);
        if (k + 4 >= cap)
            return ch_err(err, CHUTE_EINVAL, "%s: the URL is too long", path);
        if (esc) {
            url[k++] = '%';
            url[k++] = hex[*s >> 4];
            url[k++] = hex[*s & 15];
        } else {
            url[k++] = (char)*s;
        }
    }
    url[k] = '\0';
    return CHUTE_OK;
}

/* ---- one client: share handle + pool of easy handles ------------------------- */

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT; /* curl_global_init, once */
static CURLcode g_curl_init_rc = CURLE_FAILED_INIT;
static void curl_init_once(void) { g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

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

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *u)
{
    pthread_mutex_lock(&((client *)u)->locks[d]);
}
static void share_unlock(CURL *h, curl_lock_data d, void *u)
{
    pthread_mutex_unlock(&((client *)u)->locks[d]);
}

static void client_free(client *cl)
{
    if (!cl)
        return;
    for (int i = 0; i < cl->npool; i++) {
        curl_easy_cleanup(cl->pool[i]->e);
        free(cl->pool[i]);
    }
    if (cl->share)
        curl_share_cleanup(cl->share);
    for (struct curl_slist *h = cl->hdrs; h; h = h->next)
        wipe(h->data, strlen(h->data)); /* the token header */
    curl_slist_free_all(cl->hdrs);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&cl->locks[i]);
    pthread_mutex_destroy(&cl->pool_mu);
    conf_wipe(&cl->c);
    free(cl);
}

static int client_new(const rconf *c, const char *path, client **out, chute_error *err)
{
    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init_rc != CURLE_OK)
        return ch_err(err, CHUTE_EIO, "%s: libcurl failed to initialise (%s)", path,
                      curl_easy_strerror(g_curl_init_rc));
    client *cl = calloc(1, sizeof *cl);
    if (!cl)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    cl->c = *c;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&cl->locks[i], NULL);
    pthread_mutex_init(&cl->pool_mu, NULL);
    cl->share = curl_share_init();
    if (!cl->share)
        goto oom;
    curl_share_setopt(cl->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(cl->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(cl->share, CURLSHOPT_USERDATA, cl);
    curl_share_setopt(cl->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(cl->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(cl->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    if (c->s3) {
        struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
        if (!h)
            goto oom;
        cl->hdrs = h;
        if (c->token_hdr[0]) {
            h = curl_slist_append(cl->hdrs, c->token_hdr);
            if (!h)
                goto oom;
            cl->hdrs = h;
        }
    }
    *out = cl;
    return CHUTE_OK;
oom:
    client_free(cl);
    return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
}

/* Every option of a GET/HEAD handle that depends on the client: the
 * blocking pool sets them once per handle; the read-ahead engine
 * (aio_* below) sets them per request, because one engine's handles
 * serve every object it is given.  Everything is set, never left over
 * from another client (an http:// request after an s3:// one carries no
 * signature).  share: the client's share handle, or NULL where the
 * connections belong to a multi handle. */
static void easy_configure(easy *x, const client *cl, CURLSH *share)
{
    CURL *e = x->e;
    const rconf *c = &cl->c;
    curl_easy_setopt(e, CURLOPT_SHARE, share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, c->stall_s);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->ca.file[0] || c->ca.dir[0]) { /* else libcurl's built-in default */
        curl_easy_setopt(e, CURLOPT_CAINFO, c->ca.file[0] ? c->ca.file : NULL);
        curl_easy_setopt(e, CURLOPT_CAPATH, c->ca.dir[0] ? c->ca.dir : NULL);
    }
    curl_easy_setopt(e, CURLOPT_FILETIME, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, c->s3 ? 0L : 1L);
    if (!c->s3) {
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, cl->hdrs);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, c->sigv4[0] ? c->sigv4 : NULL);
    curl_easy_setopt(e, CURLOPT_USERNAME, c->sigv4[0] ? c->user : NULL);
    curl_easy_setopt(e, CURLOPT_PASSWORD, c->sigv4[0] ? c->secret : NULL);
}

/* A new handle with the receive buffer of c.  libcurl's default buffer
 * is 16 KiB: one poll + recv() + write callback per 16 KiB, and on large
 * ranges those round trips, not the bytes, were most of chute's CPU
 * (chute iobench s3 --pattern sequential, 16 MiB ranges from SeaweedFS on
 * loopback, median CPU ms per MB of 5 runs: 0.40 at 16 KiB, 0.32 at 64 KiB,
 * 0.23 at 256 KiB, 0.21 at 512 KiB, 0.22 at 1 MiB; boto3's thread pool,
 * whose http.client reads the body in MiB-sized recv()s, 0.23-0.27).
 * The buffer is allocated at a handle's first transfer and kept; only
 * the pages a recv() writes become resident, so a handle that reads
 * small objects holds no more than their size.  Set here, once: curl
 * refuses a new size once the buffer exists. */
static CURL *easy_new(const rconf *c)
{
    CURL *e = curl_easy_init();
    if (e)
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, c->recv_buf);
    return e;
}

static easy *easy_get(client *cl)
{
    pthread_mutex_lock(&cl->pool_mu);
    easy *x = cl->npool ? cl->pool[--cl->npool] : NULL;
    pthread_mutex_unlock(&cl->pool_mu);
    if (x)
        return x;
    x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->e = easy_new(&cl->c);
    if (!x->e) {
        free(x);
        return NULL;
    }
    easy_configure(x, cl, cl->share);
    return x;
}

static void easy_put(client *cl, easy *x)
{
    if (!x)
        return;
    pthread_mutex_lock(&cl->pool_mu);
    int kept = cl->npool < POOL_MAX;
    if (kept)
        cl->pool[cl->npool++] = x;
    pthread_mutex_unlock(&cl->pool_mu);
    if (!kept) {
        curl_easy_cleanup(x->e);
        free(x);
    }
}

/* ---- one request, with retries ---------------------------------------------- */

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

static size_t on_body(char *p, size_t sz, size_t nm, void *u)
{
    req *r = u;
    size_t n = sz * nm;
    if (r->status >= 300 || r->status < 200) {
        size_t k = CH_MIN(n, sizeof r->ebody - 1 - r->elen);
        memcpy(r->ebody + r->elen, p, k);
        r->elen += k;
        return n;
    }
    if (r->grow) {
        if (r->got + n > (64u << 20))
            return 0; /* a listing page is a few hundred KiB at most */
        if (r->got + n > r->dcap) {
            size_t nc = CH_MAX((size_t)r->got + n, r->dcap * 2 + 4096);
            uint8_t *d = realloc(r->dyn, nc);
            if (!d)
                return 0;
            r->dyn = d;
            r->dcap = nc;
        }
        memcpy(r->dyn + r->got, p, n);
    } else if (r->got + n <= r->cap) {
        memcpy(r->buf + r->got, p, n);
    } else {
        r->overflow = 1;
    }
    r->got += n;
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u)
{
    req *r = u;
    size_t n = sz * nm;
    if (n > 9 && !strncmp(p, "HTTP/", 5)) { /* a new response (redirect, 100) */
        r->status = 0;
        r->have_crange = 0;
        r->got = 0;
        r->elen = 0;
        r->overflow = 0;
        const char *sp = memchr(p, ' ', n);
        if (sp)
            r->status = strtol(sp + 1, NULL, 10);
    } else if (n > 14 && !strncasecmp(p, "content-range:", 14)) {
        size_t k = CH_MIN(n - 14, sizeof r->crange - 1);
        memcpy(r->crange, p + 14, k);
        r->crange[k] = '\0';
        trim(r->crange);
        r->have_crange = 1;
    }
    return n;
}

static int code_transient(const char *code)
{
    return !strcmp(code, "SlowDown") || !strcmp(code, "InternalError") ||
           !strcmp(code, "RequestTimeout") || !strcmp(code, "ServiceUnavailable") ||
           !strcmp(code, "RequestTimeTooSkewed");
}

static int curl_transient(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

/* How long to wait before try attempt+1: capped exponential backoff
 * with full jitter, never past the deadline. */
static uint64_t backoff_ns(const rconf *c, unsigned attempt, uint64_t deadline, const void *salt)
{
    uint64_t ceil = c->backoff_ns;
    for (unsigned i = 0; i < attempt && ceil < c->backoff_cap_ns; i++)
        ceil *= 2;
    ceil = CH_MIN(ceil, c->backoff_cap_ns);
    /* full jitter: uniform in [0, ceil) */
    uint64_t now = ch_now_ns();
    uint64_t d = ceil ? ch_mix64(now ^ (uint64_t)(uintptr_t)salt ^ attempt) % ceil : 0;
    if (now + d > deadline)
        d = deadline > now ? deadline - now : 0;
    return d;
}

static void backoff(const rconf *c, unsigned attempt, uint64_t deadline, const void *salt)
{
    uint64_t d = backoff_ns(c, attempt, deadline, salt);
    struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static size_t on_upload(char *p, size_t sz, size_t nm, void *u)
{
    req *r = u;
    size_t n = CH_MIN(sz * nm, r->uplen - r->upos);
    memcpy(p, r->up + r->upos, n);
    r->upos += n;
    return n;
}

/* PUT / DELETE (chute iobench --create): set on a handle used once. */
static void req_setup_write(CURL *e, req *r)
{
    if (r->method == REQ_DELETE) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
        return;
    }
    r->upos = 0; /* a retry sends the body again */
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_upload);
    curl_easy_setopt(e, CURLOPT_READDATA, r);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->uplen);
}

/* Set r's request on x (every try starts from here). */
static void req_setup(easy *x, req *r, curl_write_callback body, void *body_user)
{
    CURL *e = x->e;
    x->errbuf[0] = '\0';
    r->status = 0;
    r->got = 0;
    r->elen = 0;
    r->overflow = 0;
    r->have_crange = 0;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_NOBODY, r->method == REQ_HEAD ? 1L : 0L);
    if (r->method == REQ_GET)
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (r->method == REQ_PUT || r->method == REQ_DELETE)
        req_setup_write(e, r); /* handles that never go back to the pool */
    curl_easy_setopt(e, CURLOPT_RANGE, r->range);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, body_user);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
}

/* After a try: the status line curl saw, if the header callback missed it. */
static void req_finish(easy *x, req *r)
{
    long st = 0;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &st);
    if (st)
        r->status = st;
}

/* One try: 0 done (r->status says what came back), or the CURLcode. */
static CURLcode req_setup_and_run(easy *x, req *r)
{
    req_setup(x, r, on_body, r);
    CURLcode cc = curl_easy_perform(x->e);
    req_finish(x, r);
    return cc;
}

/* Check a successful ranged GET: exactly [off, off+len) came back.
 * 1 yes, 0 no (worth asking again), -1 never (the server ignores Range). */
static int range_ok(const req *r, uint64_t off, size_t len, uint64_t *total, char *why,
                    size_t wl)
{
    if (r->status == 200 && (off != 0 || r->overflow)) {
        snprintf(why, wl, "the server ignored the Range request (HTTP 200)");
        return -1;
    }
    if (r->overflow || r->got != len) {
        snprintf(why, wl, "the body has %llu bytes where %zu were asked for",
                 (unsigned long long)r->got, len);
        return 0;
    }
    if (r->status == 200)
        return 1; /* the whole object, and it is exactly len long */
    unsigned long long a, b, t;
    char tail;
    if (!r->have_crange || sscanf(r->crange, "bytes %llu-%llu/%llu%c", &a, &b, &t, &tail) != 3 ||
        a != off || b + 1 - a != len) {
        snprintf(why, wl, "Content-Range \"%s\" does not match bytes %llu-%llu",
                 r->have_crange ? r->crange : "(none)", (unsigned long long)off,
                 (unsigned long long)(off + len - 1));
        return 0;
    }
    if (total)
        *total = t;
    return 1;
}

/* Judge one finished try (cc from curl, r->status from the server).
 * CHUTE_OK: done; an error status: final, message in err; CH_ESMALL:
 * not settled, why[256] says what happened and *transient whether
 * asking again may help (retry_allowed decides).  The blocking path (req_run) and the read-ahead engine
 * (aio_done) judge with this one function. */
static int req_judge(const rconf *c, easy *x, req *r, CURLcode cc, const char *path,
                     const char *what, uint64_t off, size_t len, int ranged, char *why,
                     int *transient, chute_error *err)
{
    char code[64] = "";
    *transient = 0;
    if (cc == CURLE_WRITE_ERROR && r->grow)
        return ch_err(err, CHUTE_ENOMEM, "%s: %s: the answer is too large or memory ran out",
                      path, what);
    if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE)
        return ch_tls_ca_fail(&c->ca, cc == CURLE_SSL_CACERT_BADFILE, path, what,
                              x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc), err);
    if (cc != CURLE_OK) {
        *transient = curl_transient(cc);
        snprintf(why, 256, "%s", x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc));
        size_t wl = strlen(why);
        while (wl && why[wl - 1] == '\n')
            why[--wl] = '\0';
    } else if (r->status >= 200 && r->status < 300) {
        int ok = ranged ? range_ok(r, off, len, NULL, why, 256) : 1;
        if (ok > 0)
            return CHUTE_OK;
        *transient = ok == 0; /* a cut or mismatched body: ask again */
    } else {
        if (c->s3)
            ch_s3_error_code(r->ebody, r->elen, code, sizeof code);
        snprintf(why, 256, "HTTP %ld%s%s%s", r->status, code[0] ? " (" : "", code,
                 code[0] ? ")" : "");
        if (r->status == 404)
            return ch_err(err, CHUTE_ENOTFOUND, "%s: %s: not found (%s)", path, what, why);
        if (r->status == 416)
            return ch_err(err, CHUTE_EIO, "%s: %s: range not satisfiable (%s)", path, what, why);
        *transient = r->status >= 500 || r->status == 429 || code_transient(code);
        if (!*transient) {
            const char *hint = r->status == 403 || r->status == 401
                                   ? ": check the credentials, the region and the bucket's policy"
                                   : "";
            return ch_err(err, CHUTE_EIO, "%s: %s: refused (%s)%s", path, what, why, hint);
        }
    }
    return CH_ESMALL; /* not final: why says what happened, *transient whether to retry */
}

/* After a try req_judge did not settle (CH_ESMALL): CHUTE_OK if another
 * try is allowed, else the final CHUTE_EIO message (attempts, time).
 * The budget is the server's outage's (remote_health.h): *deadline is
 * brought forward to the outage's, and a request that gives up on a
 * transient failure declares the server dead, so no other request
 * spends the budget again. */
static int retry_allowed(const rconf *c, const char *url, unsigned attempt, uint64_t start,
                         uint64_t *deadline, int transient, const char *path, const char *what,
                         const char *why, chute_error *err)
{
    uint64_t now = ch_now_ns();
    if (transient)
        *deadline = CH_MIN(*deadline, ch_rhealth_failed(url, now, c->retry_total_ns));
    if (transient && attempt < c->retries && now < *deadline)
        return CHUTE_OK;
    int rc = ch_err(err, CHUTE_EIO, "%s: %s: %s%s (after %u attempt%s in %.1f s)", path, what,
                    transient ? "failed: " : "", why, attempt + 1, attempt ? "s" : "",
                    (double)(now - start) / 1e9);
    if (transient)
        ch_rhealth_dead(url, err, c->retry_total_ns);
    return rc;
}

/* Run r with retries; classifies the outcome.  `what` names the request
 * for messages ("GET bytes=0-99"), `path` the object. */
static int req_run(client *cl, easy *x, req *r, const char *path, const char *what,
                   uint64_t off, size_t len, int ranged, chute_error *err)
{
    const rconf *c = &cl->c;
    uint64_t start = ch_now_ns(), deadline = start + c->retry_total_ns;
    char why[256];
    /* A server given up on fails reads at once (remote_health.h); writes
     * and deletes are still tried: after a failed upload the abort of its
     * multipart upload is what keeps the bucket clean. */
    int rc = r->method == REQ_GET || r->method == REQ_HEAD
                 ? ch_rhealth_check(r->url, path, what, err)
                 : CHUTE_OK;
    if (rc != CHUTE_OK)
        return rc;
    for (unsigned attempt = 0;; attempt++) {
        CURLcode cc = req_setup_and_run(x, r);
        int transient;
        rc = req_judge(c, x, r, cc, path, what, off, len, ranged, why, &transient, err);
        if (rc == CHUTE_OK)
            ch_rhealth_ok(r->url);
        if (rc != CH_ESMALL)
            return rc;
        rc = retry_allowed(c, r->url, attempt, start, &deadline, transient, path, what, why, err);
        if (rc != CHUTE_OK)
            return rc;
        backoff(c, attempt, deadline, r);
    }
}

/* ---- the source ops ------------------------------------------------------------ */

typedef struct rfile {
    client *cl;
    char url[URL_MAX];
    uint64_t size;
} rfile;

/* Configuration + URL of an object path (s3:// or http(s)://). */
/* The URL of an object path under configuration c (s3:// or http(s)://). */
static int object_url(const rconf *c, const char *path, char *url, size_t cap, chute_error *err)
{
    if (!c->s3)
        return http_url(path, url, cap, err);
    char bucket[64];
    const char *key;
    int rc = s3_split(path, bucket, sizeof bucket, &key, err);
    if (rc == CHUTE_OK && !key[0])
        rc = ch_err(err, CHUTE_EINVAL, "%s: names a bucket, not an object", path);
    if (rc == CHUTE_OK)
        rc = s3_url(c, path, bucket, key, NULL, url, cap, err);
    return rc;
}

static int resolve(const char *path, rconf *c, char *url, size_t cap, chute_error *err)
{
    int rc = conf_load(c, !strncmp(path, "s3://", 5), err);
    if (rc != CHUTE_OK)
        return rc;
    return object_url(c, path, url, cap, err);
}

/* HEAD: size and modification time. */
static int head(client *cl, const char *url, const char *path, uint64_t *size, int64_t *mtime_ns,
                chute_error *err)
{
    easy *x = easy_get(cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    req r = {.method = REQ_HEAD, .url = url};
    int rc = req_run(cl, x, &r, path, "HEAD", 0, 0, 0, err);
    if (rc == CHUTE_OK) {
        curl_off_t cl_len = -1, ft = -1;
        curl_easy_getinfo(x->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl_len);
        curl_easy_getinfo(x->e, CURLINFO_FILETIME_T, &ft);
        if (cl_len < 0)
            rc = ch_err(err, CHUTE_EIO, "%s: HEAD: the server gave no Content-Length", path);
        else
            *size = (uint64_t)cl_len;
        if (mtime_ns)
            *mtime_ns = ft > 0 ? (int64_t)ft * 1000000000 : 0;
    } else if (rc == CHUTE_EIO && r.status >= 400 && r.status < 500 && cl->c.s3) {
        /* A HEAD answer has no body, so no <Code>: ask for one byte to learn
         * why (SignatureDoesNotMatch, AccessDenied, ...).  That GET fails
         * too and its message replaces this one. */
        uint8_t one;
        req g = {.method = REQ_GET, .url = url, .range = "0-0", .buf = &one, .cap = 1};
        chute_error e2;
        if (req_run(cl, x, &g, path, "HEAD", 0, 0, 0, &e2) != CHUTE_OK && g.status == r.status &&
            err)
            *err = e2;
    }
    easy_put(cl, x);
    return rc;
}

static int remote_open(const char *path, void **out, uint64_t *out_size, chute_error *err)
{
    rfile *f = calloc(1, sizeof *f);
    if (!f)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    rconf c;
    int rc = resolve(path, &c, f->url, sizeof f->url, err);
    if (rc == CHUTE_OK)
        rc = client_new(&c, path, &f->cl, err);
    conf_wipe(&c);
    if (rc == CHUTE_OK)
        rc = head(f->cl, f->url, path, &f->size, NULL, err);
    if (rc != CHUTE_OK) {
        client_free(f->cl);
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
    easy *x = easy_get(f->cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    char range[64], what[96];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    snprintf(what, sizeof what, "GET bytes=%s", range);
    req r = {.method = REQ_GET, .url = f->url, .range = range, .buf = buf, .cap = len};
    int rc = req_run(f->cl, x, &r, path, what, off, len, 1, err);
    easy_put(f->cl, x);
    return rc;
}

static void remote_close(void *h)
{
    rfile *f = h;
    if (!f)
        return;
    client_free(f->cl);
    free(f);
}

/* A whole-object GET that succeeded: all of it arrived (CHUTE_OK, or
 * CH_ESMALL when it is larger than the buffer), *out_len = its size. */
static int whole_check(easy *x, const req *r, const char *path, size_t *out_len, chute_error *err)
{
    curl_off_t clen = -1;
    curl_easy_getinfo(x->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &clen);
    if (clen >= 0 && (uint64_t)clen != r->got)
        return ch_err(err, CHUTE_EIO, "%s: GET: %llu bytes arrived of %lld", path,
                      (unsigned long long)r->got, (long long)clen);
    if (r->got > SIZE_MAX)
        return ch_err(err, CHUTE_ELIMIT, "%s: too large", path);
    *out_len = (size_t)r->got;
    return r->overflow ? CH_ESMALL : CHUTE_OK;
}

static int remote_read_file(const char *path, void *buf, size_t cap, size_t *out_len,
                            chute_error *err)
{
    rconf c;
    char url[URL_MAX];
    client *cl = NULL;
    int rc = resolve(path, &c, url, sizeof url, err);
    if (rc == CHUTE_OK)
        rc = client_new(&c, path, &cl, err);
    conf_wipe(&c);
    if (rc != CHUTE_OK)
        return rc;
    easy *x = easy_get(cl);
    if (!x) {
        client_free(cl);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    }
    req r = {.method = REQ_GET, .url = url, .buf = buf, .cap = cap};
    rc = req_run(cl, x, &r, path, "GET", 0, 0, 0, err);
    if (rc == CHUTE_OK)
        rc = whole_check(x, &r, path, out_len, err);
    easy_put(cl, x);
    client_free(cl);
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
    easy *x = easy_get(cl);
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
        rc = s3_url(&cl->c, path, bucket, "", query, url, sizeof url, err);
        if (rc != CHUTE_OK)
            break;
        r.url = url;
        char what[64];
        snprintf(what, sizeof what, "ListObjectsV2 page %u", pageno + 1);
        rc = req_run(cl, x, &r, path, what, 0, 0, 0, err);
        if (rc != CHUTE_OK)
            break;
        rc = ch_s3_parse_list((const char *)r.dyn, (size_t)r.got, prefix, fn, user, &page, path,
                              err);
        if (rc != CHUTE_OK || page.stopped || !page.truncated)
            break;
    }
    free(r.dyn);
    easy_put(cl, x);
    return rc;
}

static int s3_session(const char *path, client **cl, char *bucket, const char **key,
                      chute_error *err)
{
    rconf c;
    int rc = conf_load(&c, 1, err);
    if (rc == CHUTE_OK)
        rc = s3_split(path, bucket, 64, key, err);
    if (rc == CHUTE_OK)
        rc = client_new(&c, path, cl, err);
    conf_wipe(&c);
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
    client_free(cl);
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
        rc = s3_url(&cl->c, path, bucket, key, NULL, url, sizeof url, err);
        if (rc == CHUTE_OK)
            rc = head(cl, url, path, &out->size, &out->mtime_ns, err);
        if (rc == CHUTE_OK) {
            out->type = CH_ENT_FILE;
            client_free(cl);
            return CHUTE_OK;
        }
        if (rc != CHUTE_ENOTFOUND) {
            client_free(cl);
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
    client_free(cl);
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
        rc = client_new(&c, path, &cl, err);
    conf_wipe(&c);
    if (rc == CHUTE_OK)
        rc = head(cl, url, path, &out->size, &out->mtime_ns, err);
    if (rc == CHUTE_OK)
        out->type = CH_ENT_FILE;
    else if (rc == CHUTE_ENOTFOUND && err)
        ch_err(err, rc, "%s (if it is a directory, its URL must end in '/')", err->message);
    client_free(cl);
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

/* ---- the read-ahead engine: curl multi (source ops version 4) -----------------
 *
 * One engine per read-ahead thread, used by that thread only, so it has
 * no lock.  It owns a CURLM and up to `depth` easy handles (made on first
 * use and reused for the engine's life), and the multi handle owns the
 * connections: every object on one host shares them, kept alive between
 * requests, at most `depth` per host (CURLMOPT_MAX_HOST_CONNECTIONS) so a
 * wide read-ahead never opens more sockets than it has requests.  Over
 * HTTP/1.1 one connection carries one request at a time (pipelining is
 * dead: curl removed it in 7.62 and servers and proxies never agreed on
 * it), so `depth` requests in flight means up to `depth` connections;
 * an HTTP/2 server gets them multiplexed on one (CURLPIPE_MULTIPLEX).
 * The engine's handles do not use an object's share handle: the multi's
 * connection cache is the wider one.  Each request takes the settings
 * (signature, credentials, timeouts) of the object it reads through
 * easy_configure, the same code the blocking path's handles go through,
 * and is judged by req_judge, so messages and the retry policy are the
 * blocking path's to the letter.
 *
 * Submission only queues.  reap first turns what was queued into HTTP
 * requests: reads of one opened object whose byte ranges touch or lie
 * at most `gap` bytes apart become ONE ranged GET of at most `max` bytes
 * (a read larger than that goes alone), and the body is scattered by the
 * write callback straight into each read's buffer (the gap's bytes are
 * dropped; no staging copy).  Why a gap at all: a GET costs a round trip
 * (0.1 ms on a LAN, 20+ ms to a far region) plus S3's per-request price,
 * while 64 KiB more body costs ~0.1 ms at 5 Gb/s; why a cap: one lost
 * response must not stall the first record for long, and the bytes
 * fetched-and-dropped stay bounded.  A transient failure (the list in
 * req_judge) puts the transfer aside until its backoff has passed; the
 * other transfers keep moving meanwhile (the poll's timeout is the
 * earliest due retry).  A permanent one fails every read of that GET
 * (they all name the same object) and no other.
 *
 * Memory: everything is allocated at aio_open (depth slots, depth
 * transfers with their URL buffers); steady state allocates nothing of
 * ours (curl may, per request, as in the blocking path).
 */
typedef struct xfer {
    easy x;                 /* made on first use, then reused */
    req r;
    struct aio *a;
    client *cl;             /* whose settings: the object's or the engine's */
    const char *path;       /* for messages: the first read's path */
    char url[URL_MAX];      /* whole-object GETs: their URL */
    char range[64], what[96];
    uint64_t off;           /* the bytes asked for: [off, off + len) */
    size_t len;
    int ranged;
    int head;               /* first read's slot; the rest follow snext[], by offset */
    int cur;                /* scatter: first read not yet filled */
    unsigned attempt;
    uint64_t start, deadline, due;
    struct xfer *link;      /* free list, or the retry list */
} xfer;

typedef struct aio {
    CURLM *m;
    unsigned depth;
    ch_remote_aio_opts o;
    ch_aio_req **sreq;      /* slot -> read */
    int *snext;             /* slot -> next read of the same transfer, -1 */
    int *sfree;             /* free slots (a stack) */
    unsigned nfree;
    int *pend;              /* submitted, not yet started */
    unsigned npend;
    int *done;              /* finished, not yet reaped (a ring) */
    unsigned dhead, ndone;
    xfer *xf;               /* depth transfers */
    xfer *xfree;
    xfer *retry;            /* waiting for their backoff to pass */
    unsigned active;        /* transfers in the multi handle */
    client *whole[2];       /* whole-object reads (h == NULL): http, s3 settings */
    ch_remote_aio_stats st;
} aio;

static void aio_finish_slot(aio *a, int s)
{
    a->done[(a->dhead + a->ndone++) % a->depth] = s;
    if (a->sreq[s]->status != CHUTE_OK && a->sreq[s]->status != CH_ESMALL)
        a->st.failed++;
}

/* Every read of t gets status rc (err: its message); t is free again. */
static void xfer_complete(aio *a, xfer *t, int rc, const chute_error *e, size_t whole_got)
{
    for (int s = t->head, next; s >= 0; s = next) {
        next = a->snext[s];
        ch_aio_req *q = a->sreq[s];
        q->status = rc;
        if (rc == CHUTE_OK || rc == CH_ESMALL)
            q->got = t->ranged ? q->len : whole_got;
        else
            q->err = *e;
        aio_finish_slot(a, s);
    }
    t->head = -1;
    t->link = a->xfree;
    a->xfree = t;
}

/* The body of a ranged GET: each byte to every read that wants it. */
static size_t on_scatter(char *p, size_t sz, size_t nm, void *u)
{
    xfer *t = u;
    req *r = &t->r;
    aio *a = t->a;
    size_t n = sz * nm;
    if (r->status >= 300 || r->status < 200)
        return on_body(p, sz, nm, r); /* an error document, for its <Code> */
    if (r->overflow || n > t->len - r->got) {
        r->overflow = 1;
        r->got += n;
        return n;
    }
    uint64_t a0 = t->off + r->got, a1 = a0 + n;
    for (int s = t->cur; s >= 0; s = a->snext[s]) {
        ch_aio_req *q = a->sreq[s];
        if (q->off >= a1)
            break;
        uint64_t qe = q->off + q->len;
        if (qe <= a0)
            continue;
        uint64_t lo = CH_MAX(q->off, a0), hi = CH_MIN(qe, a1);
        memcpy((uint8_t *)q->buf + (lo - q->off), p + (lo - a0), (size_t)(hi - lo));
    }
    while (t->cur >= 0 && a->sreq[t->cur]->off + a->sreq[t->cur]->len <= a1)
        t->cur = a->snext[t->cur];
    r->got += n;
    return n;
}

/* Hand t's current try to the multi handle. */
static void xfer_go(aio *a, xfer *t)
{
    t->cur = t->head;
    if (t->ranged)
        req_setup(&t->x, &t->r, on_scatter, t);
    else
        req_setup(&t->x, &t->r, on_body, &t->r);
    CURLMcode mc = curl_multi_add_handle(a->m, t->x.e);
    if (mc != CURLM_OK) {
        chute_error e;
        ch_err(&e, CHUTE_EIO, "%s: %s: curl_multi_add_handle: %s", t->path, t->what,
               curl_multi_strerror(mc));
        xfer_complete(a, t, CHUTE_EIO, &e, 0);
        return;
    }
    a->active++;
    a->st.gets++;
}

/* Start a transfer for the reads chained from slot head. */
static void xfer_start(aio *a, int head, client *cl, const char *url, uint64_t off, size_t len,
                       int ranged)
{
    xfer *t = a->xfree;
    a->xfree = t->link;
    t->head = head;
    t->cl = cl;
    t->path = a->sreq[head]->path;
    t->off = off;
    t->len = len;
    t->ranged = ranged;
    t->attempt = 0;
    t->start = ch_now_ns();
    t->deadline = t->start + cl->c.retry_total_ns;
    memset(&t->r, 0, sizeof t->r);
    t->r.method = REQ_GET;
    t->r.url = url;
    if (ranged) {
        snprintf(t->range, sizeof t->range, "%llu-%llu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1));
        snprintf(t->what, sizeof t->what, "GET bytes=%s", t->range);
        t->r.range = t->range;
    } else {
        snprintf(t->what, sizeof t->what, "GET");
        t->r.buf = a->sreq[head]->buf;
        t->r.cap = a->sreq[head]->len;
    }
    if (!t->x.e && !(t->x.e = easy_new(&cl->c))) {
        chute_error e;
        ch_err(&e, CHUTE_ENOMEM, "%s: out of memory", t->path);
        xfer_complete(a, t, CHUTE_ENOMEM, &e, 0);
        return;
    }
    chute_error e;
    if (ch_rhealth_check(url, t->path, t->what, &e) != CHUTE_OK) { /* given up on: no GET */
        xfer_complete(a, t, CHUTE_EIO, &e, 0);
        return;
    }
    easy_configure(&t->x, cl, NULL);
    curl_easy_setopt(t->x.e, CURLOPT_PRIVATE, t);
    xfer_go(a, t);
}

/* A whole-object read: the engine's client for its scheme, its URL. */
static void aio_start_whole(aio *a, int s)
{
    ch_aio_req *q = a->sreq[s];
    int s3 = !strncmp(q->path, "s3://", 5);
    chute_error e;
    int rc = CHUTE_OK;
    if (!a->whole[s3]) {
        rconf c;
        rc = conf_load(&c, s3, &e);
        if (rc == CHUTE_OK)
            rc = client_new(&c, q->path, &a->whole[s3], &e);
        conf_wipe(&c);
    }
    xfer *t = a->xfree; /* the one xfer_start will take */
    if (rc == CHUTE_OK)
        rc = object_url(&a->whole[s3]->c, q->path, t->url, sizeof t->url, &e);
    if (rc != CHUTE_OK) {
        q->status = rc;
        q->err = e;
        aio_finish_slot(a, s);
        return;
    }
    xfer_start(a, s, a->whole[s3], t->url, 0, 0, 0);
}

static int pend_cmp(const void *x, const void *y, void *u)
{
    const aio *a = u;
    const ch_aio_req *p = a->sreq[*(const int *)x], *q = a->sreq[*(const int *)y];
    uintptr_t hp = (uintptr_t)p->h, hq = (uintptr_t)q->h;
    if (hp != hq)
        return hp < hq ? -1 : 1;
    if (p->off != q->off)
        return p->off < q->off ? -1 : 1;
    return p->len < q->len ? -1 : p->len > q->len;
}

/* Turn what was submitted since the last reap into transfers. */
static void aio_flush(aio *a)
{
    unsigned n = 0;
    for (unsigned i = 0; i < a->npend; i++) { /* settle what needs no GET */
        int s = a->pend[i];
        ch_aio_req *q = a->sreq[s];
        if (!q->h) {
            aio_start_whole(a, s);
            continue;
        }
        rfile *f = q->h;
        if (q->len == 0) {
            q->status = CHUTE_OK;
            q->got = 0;
            aio_finish_slot(a, s);
        } else if (q->off > f->size || q->len > f->size - q->off) {
            q->status = ch_err(&q->err, CHUTE_EIO,
                               "%s@%llu: read of %zu bytes past the end (%llu bytes)", q->path,
                               (unsigned long long)q->off, q->len, (unsigned long long)f->size);
            aio_finish_slot(a, s);
        } else {
            a->pend[n++] = s;
        }
    }
    a->npend = 0;
    qsort_r(a->pend, n, sizeof *a->pend, pend_cmp, a);
    for (unsigned i = 0; i < n;) {
        int head = a->pend[i];
        ch_aio_req *q = a->sreq[head];
        uint64_t start = q->off, end = q->off + q->len;
        int tail = head;
        unsigned j = i + 1;
        for (; j < n; j++) {
            ch_aio_req *q2 = a->sreq[a->pend[j]];
            uint64_t e2 = CH_MAX(end, q2->off + q2->len);
            if (q2->h != q->h || (q2->off > end && q2->off - end > a->o.coalesce_gap_bytes) ||
                e2 - start > a->o.coalesce_max_bytes)
                break;
            if (q2->off > end)
                a->st.gap_bytes += q2->off - end;
            a->snext[tail] = a->pend[j];
            tail = a->pend[j];
            end = e2;
            a->st.coalesced++;
        }
        a->snext[tail] = -1;
        rfile *f = q->h;
        if (end - start > SIZE_MAX) { /* 32-bit size_t only */
            chute_error e;
            ch_err(&e, CHUTE_ELIMIT, "%s: range too large", q->path);
            for (int s = head; s >= 0; s = a->snext[s]) {
                a->sreq[s]->status = CHUTE_ELIMIT;
                a->sreq[s]->err = e;
                aio_finish_slot(a, s);
            }
        } else {
            xfer_start(a, head, f->cl, f->url, start, (size_t)(end - start), 1);
        }
        i = j;
    }
}

/* A transfer's try has ended: done, retry later, or fail its reads. */
static void xfer_done(aio *a, xfer *t, CURLcode cc)
{
    curl_multi_remove_handle(a->m, t->x.e);
    a->active--;
    req_finish(&t->x, &t->r);
    const rconf *c = &t->cl->c;
    char why[256];
    int transient;
    chute_error e;
    size_t got = 0;
    int rc = req_judge(c, &t->x, &t->r, cc, t->path, t->what, t->off, t->len, t->ranged, why,
                       &transient, &e);
    if (rc == CHUTE_OK)
        ch_rhealth_ok(t->r.url);
    if (rc == CH_ESMALL) {
        rc = retry_allowed(c, t->r.url, t->attempt, t->start, &t->deadline, transient, t->path,
                           t->what, why, &e);
        if (rc == CHUTE_OK) {
            t->due = ch_now_ns() + backoff_ns(c, t->attempt, t->deadline, t);
            t->attempt++;
            t->link = a->retry;
            a->retry = t;
            a->st.retries++;
            return;
        }
    } else if (rc == CHUTE_OK && !t->ranged) {
        rc = whole_check(&t->x, &t->r, t->path, &got, &e);
        if (rc == CH_ESMALL)
            got = t->r.got > SIZE_MAX ? SIZE_MAX : (size_t)t->r.got;
    }
    xfer_complete(a, t, rc, &e, got);
}

/* Start the retries whose backoff has passed; the earliest still waiting. */
static uint64_t aio_retries_due(aio *a)
{
    uint64_t now = ch_now_ns(), next = UINT64_MAX;
    for (xfer **pp = &a->retry; *pp;) {
        xfer *t = *pp;
        if (t->due <= now) {
            *pp = t->link;
            xfer_go(a, t);
        } else {
            next = CH_MIN(next, t->due);
            pp = &t->link;
        }
    }
    return next;
}

static void aio_close_(void *engine)
{
    aio *a = engine;
    if (!a)
        return;
    for (unsigned i = 0; a->xf && i < a->depth; i++) {
        if (!a->xf[i].x.e)
            continue;
        if (a->m)
            curl_multi_remove_handle(a->m, a->xf[i].x.e); /* fine if not added */
        curl_easy_cleanup(a->xf[i].x.e);
    }
    if (a->m)
        curl_multi_cleanup(a->m);
    client_free(a->whole[0]);
    client_free(a->whole[1]);
    free(a->xf);
    free(a->sreq);
    free(a->snext);
    free(a->sfree);
    free(a->pend);
    free(a->done);
    free(a);
}

static int aio_open_(void *self, unsigned depth, void **engine, chute_error *err)
{
    const ch_remote_aio_opts *o = self;
    *engine = NULL;
    if (depth == 0 || depth > 65536)
        return ch_err(err, CHUTE_EINVAL, "read-ahead depth %u is out of range (1..65536)", depth);
    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init_rc != CURLE_OK)
        return ch_err(err, CHUTE_EIO, "libcurl failed to initialise (%s)",
                      curl_easy_strerror(g_curl_init_rc));
    aio *a = calloc(1, sizeof *a);
    if (!a)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    a->depth = depth;
    a->o.coalesce_gap_bytes = o ? o->coalesce_gap_bytes : CH_REMOTE_COALESCE_GAP;
    a->o.coalesce_max_bytes = o ? o->coalesce_max_bytes : CH_REMOTE_COALESCE_MAX;
    a->sreq = calloc(depth, sizeof *a->sreq);
    a->snext = calloc(depth, sizeof *a->snext);
    a->sfree = calloc(depth, sizeof *a->sfree);
    a->pend = calloc(depth, sizeof *a->pend);
    a->done = calloc(depth, sizeof *a->done);
    a->xf = calloc(depth, sizeof *a->xf);
    a->m = curl_multi_init();
    if (!a->sreq || !a->snext || !a->sfree || !a->pend || !a->done || !a->xf || !a->m) {
        aio_close_(a);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    for (unsigned i = 0; i < depth; i++) {
        a->sfree[i] = (int)(depth - 1 - i);
        a->xf[i].a = a;
        a->xf[i].head = -1;
        a->xf[i].link = i + 1 < depth ? &a->xf[i + 1] : NULL;
    }
    a->nfree = depth;
    a->xfree = &a->xf[0];
    curl_multi_setopt(a->m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)depth);
    curl_multi_setopt(a->m, CURLMOPT_MAXCONNECTS, (long)depth);
    curl_multi_setopt(a->m, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    *engine = a;
    return CHUTE_OK;
}

static int aio_submit_(void *engine, ch_aio_req *q)
{
    aio *a = engine;
    if (!a->nfree)
        return ch_err(&q->err, CHUTE_ELIMIT,
                      "%s: the read-ahead engine already holds %u reads (its depth)", q->path,
                      a->depth);
    int s = a->sfree[--a->nfree];
    a->sreq[s] = q;
    a->snext[s] = -1;
    q->status = CHUTE_OK;
    q->got = 0;
    a->pend[a->npend++] = s;
    a->st.requests++;
    return CHUTE_OK;
}

static int aio_reap_(void *engine, ch_aio_req **done, unsigned max, int wait_ms)
{
    aio *a = engine;
    uint64_t t0 = ch_now_ns();
    aio_flush(a);
    for (;;) {
        int running;
        CURLMcode mc = curl_multi_perform(a->m, &running);
        if (mc != CURLM_OK)
            return CHUTE_EIO;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(a->m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            xfer *t = NULL;
            CURLcode cc = msg->data.result;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
            xfer_done(a, t, cc);
        }
        uint64_t next = aio_retries_due(a);
        if (a->ndone || (!a->active && !a->retry))
            break;
        uint64_t now = ch_now_ns();
        long timeout = 1000;
        if (wait_ms >= 0) {
            uint64_t spent = (now - t0) / 1000000u;
            if (spent >= (uint64_t)wait_ms)
                break;
            timeout = (long)((uint64_t)wait_ms - spent);
        }
        if (next != UINT64_MAX)
            timeout = CH_MIN(timeout, (long)((next > now ? next - now : 0) / 1000000u) + 1);
        if (curl_multi_poll(a->m, NULL, 0, (int)timeout, NULL) != CURLM_OK)
            return CHUTE_EIO;
    }
    unsigned n = 0;
    while (n < max && a->ndone) {
        int s = a->done[a->dhead];
        a->dhead = (a->dhead + 1) % a->depth;
        a->ndone--;
        done[n++] = a->sreq[s];
        a->sreq[s] = NULL;
        a->sfree[a->nfree++] = s;
    }
    return (int)n;
}

void ch_remote_aio_stats_get(void *engine, ch_remote_aio_stats *out) { *out = ((aio *)engine)->st; }

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
    .aio_open = aio_open_,
    .aio_submit = aio_submit_,
    .aio_reap = aio_reap_,
    .aio_close = aio_close_,
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
    .aio_open = aio_open_,
    .aio_submit = aio_submit_,
    .aio_reap = aio_reap_,
    .aio_close = aio_close_,
};

/* ---- a session over many objects (chute iobench) --------------------------------
 *
 * The source ops open one object at a time (a HEAD, then a pool of its
 * own); a benchmark over thousands of small objects wants one pool for
 * all of them and no HEAD per object, the sizes coming from the listing.
 * It also needs to write and remove its own test objects: PUT refuses a
 * key that exists (a HEAD first, and If-None-Match: * so that a server
 * that knows conditional writes refuses a race too), DELETE removes one
 * key.  Writes use a handle of their own, never returned to the pool,
 * because their options (upload, method, headers) differ from a GET's.
 */
struct ch_remote {
    client *cl;
    int s3;
    char bucket[64];
};

int ch_remote_new(const char *path, ch_remote **out, chute_error *err)
{
    ch_remote *s = calloc(1, sizeof *s);
    if (!s)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    s->s3 = !strncmp(path, "s3://", 5);
    rconf c;
    const char *key;
    int rc = conf_load(&c, s->s3, err);
    if (rc == CHUTE_OK && s->s3)
        rc = s3_split(path, s->bucket, sizeof s->bucket, &key, err);
    if (rc == CHUTE_OK)
        rc = client_new(&c, path, &s->cl, err);
    conf_wipe(&c);
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
    client_free(s->cl);
    free(s);
}

/* The URL of an object path of this session's bucket (or any http URL). */
static int session_url(ch_remote *s, const char *path, char *url, size_t cap, chute_error *err)
{
    if (!s->s3)
        return http_url(path, url, cap, err);
    char bucket[64];
    const char *key;
    int rc = s3_split(path, bucket, sizeof bucket, &key, err);
    if (rc == CHUTE_OK && strcmp(bucket, s->bucket))
        rc = ch_err(err, CHUTE_EINVAL, "%s: not in bucket %s", path, s->bucket);
    if (rc == CHUTE_OK && !key[0])
        rc = ch_err(err, CHUTE_EINVAL, "%s: names a bucket, not an object", path);
    if (rc == CHUTE_OK)
        rc = s3_url(&s->cl->c, path, bucket, key, NULL, url, cap, err);
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
    int rc = session_url(s, path, url, sizeof url, err);
    if (rc != CHUTE_OK)
        return rc;
    easy *x = easy_get(s->cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    char range[64], what[96];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    snprintf(what, sizeof what, "GET bytes=%s", range);
    req r = {.method = REQ_GET, .url = url, .range = range, .buf = buf, .cap = len};
    rc = req_run(s->cl, x, &r, path, what, off, len, 1, err);
    easy_put(s->cl, x);
    return rc;
}

/* A handle for one write: the pool's settings, its own headers. */
static int write_req(ch_remote *s, req *r, const char *path, const char *what, int put,
                     chute_error *err)
{
    if (!s->s3)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: %s: only S3 objects can be written", path,
                      what);
    easy *x = easy_get(s->cl);
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
        rc = req_run(s->cl, x, r, path, what, 0, 0, 0, err);
        curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, NULL);
    }
    curl_easy_cleanup(x->e);
    free(x);
    for (t = h; t; t = t->next)
        wipe(t->data, strlen(t->data));
    curl_slist_free_all(h);
    return rc;
}

int ch_remote_put(ch_remote *s, const char *path, const void *buf, size_t len, chute_error *err)
{
    char url[URL_MAX];
    int rc = session_url(s, path, url, sizeof url, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t have;
    chute_error e2;
    rc = head(s->cl, url, path, &have, NULL, &e2);
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
    int rc = session_url(s, path, url, sizeof url, err);
    if (rc != CHUTE_OK)
        return rc;
    req r = {.method = REQ_DELETE, .url = url};
    return write_req(s, &r, path, "DELETE", 0, err);
}

void ch_remote_tuned(const ch_source_ops *base, const ch_remote_aio_opts *opts,
                     ch_source_ops *out)
{
    *out = *base;
    out->self = (void *)opts;
}

/* ---- writing datasets: single PUT and multipart upload ---------------------------
 *
 * pack and convert write a dataset to s3:// by staging it locally and
 * uploading each finished file (src/format/publish.c decides the order:
 * the manifest last).  Objects are replaced (no If-None-Match: publish.c
 * refuses a destination that holds a dataset unless asked to replace it).
 * A file of at most part_bytes goes in one PUT; a larger one as a
 * multipart upload whose parts are read one at a time into a single
 * buffer of part_bytes, so memory is bounded whatever the file's size.
 * Each request goes through req_run: transient failures are retried with
 * the read path's schedule (a part is sent again from its start).  Any
 * failure after CreateMultipartUpload aborts the upload, so no orphaned
 * parts stay stored (and billed) on the server.  Bodies are sent as
 * UNSIGNED-PAYLOAD, as ch_remote_put does.
 *
 * (The includes below sit here rather than at the top so that this
 * section stays one appended block.)
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t ch_remote_part_bytes(void)
{
    uint64_t mb = env_u64("CHUTE_REMOTE_PART_MB", 16, 5120);
    return (mb < 5 ? 5 : mb) << 20; /* S3 (and SeaweedFS) refuse smaller parts */
}

/* One write request on a handle of its own: `method` (PUT, POST, DELETE),
 * body up[uplen] (may be empty), answer into ans[anscap] (ans_len set).
 * etag: when not NULL, the answer's ETag header (quotes kept). */
static int up_req(ch_remote *s, const char *method, const char *url, const char *path,
                  const char *what, const void *up, size_t uplen, char *ans, size_t anscap,
                  size_t *ans_len, char *etag, size_t etcap, chute_error *err)
{
    easy *x = easy_get(s->cl);
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
        rc = req_run(s->cl, x, &r, path, what, 0, 0, 0, err);
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
        wipe(t->data, strlen(t->data));
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
    int rc = s3_split(path, bucket, sizeof bucket, &key, err);
    if (rc == CHUTE_OK && strcmp(bucket, s->bucket))
        rc = ch_err(err, CHUTE_EINVAL, "%s: not in bucket %s", path, s->bucket);
    if (rc == CHUTE_OK && !key[0])
        rc = ch_err(err, CHUTE_EINVAL, "%s: names a bucket, not an object", path);
    if (rc == CHUTE_OK)
        rc = s3_url(&s->cl->c, path, bucket, key, query, url, cap, err);
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
    rc = head(s->cl, url, path, &size, NULL, &e2);
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
