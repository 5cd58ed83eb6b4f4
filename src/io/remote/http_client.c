/*
 * http_client.c — one client (a curl share handle and a pool of easy
 * handles) and one request through it, with retries.
 *
 * Why this shape: the loader's many worker threads each take a handle
 * from an opened object's pool, reuse a kept-alive connection and put it
 * back, so after warm-up a read allocates nothing of ours.  The request
 * machinery (setup, judge, retry_allowed, backoff) is shared with the
 * read-ahead engine (http_multi.c), which drives the same steps from a
 * curl multi handle instead of curl_easy_perform; so what counts as
 * transient, the backoff schedule and every message are decided here
 * once.  http.h's opening note has the fault policy in full.
 */
#define _GNU_SOURCE
#include "http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ---- one client: share handle + pool of easy handles ------------------------- */

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT; /* curl_global_init, once */
static CURLcode g_curl_init_rc = CURLE_FAILED_INIT;
static void curl_init_once(void) { g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

CURLcode ch_http_curl_init(void)
{
    pthread_once(&g_curl_once, curl_init_once);
    return g_curl_init_rc;
}

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *u)
{
    pthread_mutex_lock(&((client *)u)->locks[d]);
}
static void share_unlock(CURL *h, curl_lock_data d, void *u)
{
    pthread_mutex_unlock(&((client *)u)->locks[d]);
}

void ch_http_client_free(client *cl)
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
        ch_rwipe(h->data, strlen(h->data)); /* the token header */
    curl_slist_free_all(cl->hdrs);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&cl->locks[i]);
    pthread_mutex_destroy(&cl->pool_mu);
    ch_rconf_wipe(&cl->c);
    free(cl);
}

int ch_http_client_new(const rconf *c, const char *path, client **out, chute_error *err)
{
    CURLcode init_rc = ch_http_curl_init();
    if (init_rc != CURLE_OK)
        return ch_err(err, CHUTE_EIO, "%s: libcurl failed to initialise (%s)", path,
                      curl_easy_strerror(init_rc));
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
    ch_http_client_free(cl);
    return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
}

/* Every option of a GET/HEAD handle that depends on the client: the
 * blocking pool sets them once per handle; the read-ahead engine
 * (http_multi.c) sets them per request, because one engine's handles
 * serve every object it is given.  Everything is set, never left over
 * from another client (an http:// request after an s3:// one carries no
 * signature).  share: the client's share handle, or NULL where the
 * connections belong to a multi handle. */
void ch_http_easy_configure(easy *x, const client *cl, CURLSH *share)
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
CURL *ch_http_easy_new(const rconf *c)
{
    CURL *e = curl_easy_init();
    if (e)
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, c->recv_buf);
    return e;
}

easy *ch_http_easy_get(client *cl)
{
    pthread_mutex_lock(&cl->pool_mu);
    easy *x = cl->npool ? cl->pool[--cl->npool] : NULL;
    pthread_mutex_unlock(&cl->pool_mu);
    if (x)
        return x;
    x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->e = ch_http_easy_new(&cl->c);
    if (!x->e) {
        free(x);
        return NULL;
    }
    ch_http_easy_configure(x, cl, cl->share);
    return x;
}

void ch_http_easy_put(client *cl, easy *x)
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


size_t ch_http_on_body(char *p, size_t sz, size_t nm, void *u)
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
        ch_rtrim(r->crange);
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
uint64_t ch_http_backoff_ns(const rconf *c, unsigned attempt, uint64_t deadline, const void *salt)
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
    uint64_t d = ch_http_backoff_ns(c, attempt, deadline, salt);
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
void ch_http_req_setup(easy *x, req *r, curl_write_callback body, void *body_user)
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
void ch_http_req_finish(easy *x, req *r)
{
    long st = 0;
    curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &st);
    if (st)
        r->status = st;
}

/* One try: 0 done (r->status says what came back), or the CURLcode. */
static CURLcode req_setup_and_run(easy *x, req *r)
{
    ch_http_req_setup(x, r, ch_http_on_body, r);
    CURLcode cc = curl_easy_perform(x->e);
    ch_http_req_finish(x, r);
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
 * asking again may help (ch_http_retry_allowed decides).  The blocking
 * path (ch_http_req_run) and the read-ahead engine
 * (xfer_done in http_multi.c) judge with this one function. */
int ch_http_req_judge(const rconf *c, easy *x, req *r, CURLcode cc, const char *path,
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

/* After a try ch_http_req_judge did not settle (CH_ESMALL): CHUTE_OK if another
 * try is allowed, else the final CHUTE_EIO message (attempts, time).
 * The budget is the server's outage's (remote_health.h): *deadline is
 * brought forward to the outage's, and a request that gives up on a
 * transient failure declares the server dead, so no other request
 * spends the budget again. */
int ch_http_retry_allowed(const rconf *c, const char *url, unsigned attempt, uint64_t start,
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
int ch_http_req_run(client *cl, easy *x, req *r, const char *path, const char *what,
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
        rc = ch_http_req_judge(c, x, r, cc, path, what, off, len, ranged, why, &transient, err);
        if (rc == CHUTE_OK)
            ch_rhealth_ok(r->url);
        if (rc != CH_ESMALL)
            return rc;
        rc = ch_http_retry_allowed(c, r->url, attempt, start, &deadline, transient, path, what,
                                   why, err);
        if (rc != CHUTE_OK)
            return rc;
        backoff(c, attempt, deadline, r);
    }
}

/* HEAD: size and modification time. */
int ch_http_head(client *cl, const char *url, const char *path, uint64_t *size, int64_t *mtime_ns,
                chute_error *err)
{
    easy *x = ch_http_easy_get(cl);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    req r = {.method = REQ_HEAD, .url = url};
    int rc = ch_http_req_run(cl, x, &r, path, "HEAD", 0, 0, 0, err);
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
        if (ch_http_req_run(cl, x, &g, path, "HEAD", 0, 0, 0, &e2) != CHUTE_OK &&
            g.status == r.status && err)
            *err = e2;
    }
    ch_http_easy_put(cl, x);
    return rc;
}

/* A whole-object GET that succeeded: all of it arrived (CHUTE_OK, or
 * CH_ESMALL when it is larger than the buffer), *out_len = its size. */
int ch_http_whole_check(easy *x, const req *r, const char *path, size_t *out_len, chute_error *err)
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