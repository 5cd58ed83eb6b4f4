/*
 * http_multi.c — the read-ahead engine of the remote sources (source ops
 * version 4: aio_open, aio_submit, aio_reap, aio_close): one curl multi
 * handle per read-ahead thread, neighbouring reads of one object
 * coalesced into one ranged GET whose body is scattered into each read's
 * buffer.  The essay below says why each choice.
 *
 * Why a file of its own: it is the one part of the remote sources with a
 * state machine (slots, transfers, a retry list) and no locks; it shares
 * with the blocking path only the request steps of http_client.c.
 */
#define _GNU_SOURCE
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * ch_http_easy_configure, the same code the blocking path's handles go through,
 * and is judged by ch_http_req_judge, so messages and the retry policy are the
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
 * ch_http_req_judge) puts the transfer aside until its backoff has passed; the
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
        return ch_http_on_body(p, sz, nm, r); /* an error document, for its <Code> */
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
        ch_http_req_setup(&t->x, &t->r, on_scatter, t);
    else
        ch_http_req_setup(&t->x, &t->r, ch_http_on_body, &t->r);
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
    if (!t->x.e && !(t->x.e = ch_http_easy_new(&cl->c))) {
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
    ch_http_easy_configure(&t->x, cl, NULL);
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
        rc = ch_rconf_load(&c, s3, &e);
        if (rc == CHUTE_OK)
            rc = ch_http_client_new(&c, q->path, &a->whole[s3], &e);
        ch_rconf_wipe(&c);
    }
    xfer *t = a->xfree; /* the one xfer_start will take */
    if (rc == CHUTE_OK)
        rc = ch_remote_object_url(&a->whole[s3]->c, q->path, t->url, sizeof t->url, &e);
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
    ch_http_req_finish(&t->x, &t->r);
    const rconf *c = &t->cl->c;
    char why[256];
    int transient;
    chute_error e;
    size_t got = 0;
    int rc = ch_http_req_judge(c, &t->x, &t->r, cc, t->path, t->what, t->off, t->len, t->ranged,
                               why, &transient, &e);
    if (rc == CHUTE_OK)
        ch_rhealth_ok(t->r.url);
    if (rc == CH_ESMALL) {
        rc = ch_http_retry_allowed(c, t->r.url, t->attempt, t->start, &t->deadline, transient,
                                   t->path, t->what, why, &e);
        if (rc == CHUTE_OK) {
            t->due = ch_now_ns() + ch_http_backoff_ns(c, t->attempt, t->deadline, t);
            t->attempt++;
            t->link = a->retry;
            a->retry = t;
            a->st.retries++;
            return;
        }
    } else if (rc == CHUTE_OK && !t->ranged) {
        rc = ch_http_whole_check(&t->x, &t->r, t->path, &got, &e);
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

void ch_http_multi_close(void *engine)
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
    ch_http_client_free(a->whole[0]);
    ch_http_client_free(a->whole[1]);
    free(a->xf);
    free(a->sreq);
    free(a->snext);
    free(a->sfree);
    free(a->pend);
    free(a->done);
    free(a);
}

int ch_http_multi_open(void *self, unsigned depth, void **engine, chute_error *err)
{
    const ch_remote_aio_opts *o = self;
    *engine = NULL;
    if (depth == 0 || depth > 65536)
        return ch_err(err, CHUTE_EINVAL, "read-ahead depth %u is out of range (1..65536)", depth);
    CURLcode init_rc = ch_http_curl_init();
    if (init_rc != CURLE_OK)
        return ch_err(err, CHUTE_EIO, "libcurl failed to initialise (%s)",
                      curl_easy_strerror(init_rc));
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
        ch_http_multi_close(a);
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

int ch_http_multi_submit(void *engine, ch_aio_req *q)
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

int ch_http_multi_reap(void *engine, ch_aio_req **done, unsigned max, int wait_ms)
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

void ch_remote_tuned(const ch_source_ops *base, const ch_remote_aio_opts *opts,
                     ch_source_ops *out)
{
    *out = *base;
    out->self = (void *)opts;
}