/*
 * metrics.c — Prometheus export: a read-only /metrics responder and a
 * node_exporter textfile writer, both run by the loader's one stats
 * thread (exporter.c) when asked for (metrics_port, metrics_file): it
 * polls the listener and connections below with its other fds.
 *
 * What it reads.  Only what chute_loader_stats() already sums from the
 * workers' relaxed-atomic counters, plus the workers' read-latency
 * histograms (ch_loader_read_hist).  Nothing is added to the hot path: a
 * scrape costs the loader one stats snapshot, taken on the stats thread.
 *
 * Why not an HTTP library.  The endpoint answers exactly one request,
 * GET /metrics, with a few kilobytes of text.  A library (libmicrohttpd,
 * civetweb, mongoose) would bring a general HTTP parser, its own threads,
 * TLS and a new build dependency into a training process for that; the
 * code below is one poll() loop whose every limit is a constant in this
 * file, small enough to read whole and to fuzz (ch_metrics_request_status:
 * tests/fuzz/fuzz_metrics_http.c).
 *
 * The responder's rules.  Bound to 127.0.0.1 unless metrics_addr says
 * otherwise.  At most MAX_CONN connections are kept; a new one over that
 * closes the oldest, so a flood of idle connections cannot lock a scraper
 * out (a scraper sends its request at once and is answered in the same
 * poll round).  A request (line and headers) longer than MAX_REQ bytes is
 * answered 431; a connection that has not sent a whole request within
 * CONN_DEADLINE_MS is closed (slowloris).  Method other than GET: 405;
 * path other than /metrics: 404; bytes that are not an HTTP/1.x request
 * line: 400.  Every answer closes the connection.  A response whose
 * render failed (cannot happen with the fixed metric set, but checked) is
 * 503.  No request body is read, nothing is ever written to disk or
 * changed by a request.
 *
 * The textfile.  Every second (ch_metrics_tick) the exposition is written to
 * "<metrics_file>.tmp.<pid>" and renamed over metrics_file, so
 * node_exporter never reads half a file.  The temp name does not end in
 * .prom, which node_exporter's textfile collector skips.  Written once at
 * start (errors fail chute_loader_create) and once at stop.
 */
#define _GNU_SOURCE
#include "metrics.h"

#include "../common/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONN (CH_METRICS_MAX_POLLFDS - 1)
#define MAX_REQ 4096
#define CONN_DEADLINE_MS 2000
#define RENDER_CAP (64u << 10)
#define LABEL_CAP 64

typedef struct conn {
    int fd;                /* -1: free */
    uint64_t deadline_ns;
    uint64_t seq;          /* accept order: to find the oldest */
    size_t in_len;
    char in[MAX_REQ];
    char *out;             /* the response, once the request is parsed */
    size_t out_len, out_off;
} conn;

struct ch_metrics {
    const chute_loader *ld;
    int listen_fd;         /* -1: no endpoint */
    char *file, *tmp;      /* NULL: no textfile */
    char labels[3 * LABEL_CAP + 64];
    conn conns[MAX_CONN];
    conn *polled[CH_METRICS_MAX_POLLFDS]; /* pollfd i's connection (ch_metrics_pollfds) */
    char *buf;             /* RENDER_CAP: the last rendering */
    ch_hist_snap *hist;
    chute_stats prev;      /* at the last tick: the fill gauge's interval */
    double fill_ratio;
    uint64_t accepted;     /* connections accepted so far */
};

void ch_metrics_label_value(char *dst, size_t cap, const char *src, int basename_only)
{
    if (!cap)
        return;
    const char *b = src ? src : "", *e = b + strlen(b);
    if (basename_only) {
        const char *q = strpbrk(b, "?#");
        if (q)
            e = q;
        while (e > b && e[-1] == '/')
            e--;
        for (const char *p = e; p > b; p--)
            if (p[-1] == '/' || p[-1] == '@') {
                b = p;
                break;
            }
    }
    size_t n = 0;
    for (const char *p = b; p < e && n + 1 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        dst[n++] = ok ? (char)c : '_';
    }
    dst[n] = 0;
}

/* ---- rendering ---------------------------------------------------- */

typedef struct out {
    char *p;
    size_t len, cap;
    int full;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    if (o->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->cap - o->len)
        o->full = 1;
    else
        o->len += (size_t)n;
}

static void head(out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(out *o, const char *lb, const char *name, const char *help, uint64_t v)
{
    head(o, name, "counter", help);
    put(o, "%s{%s} %llu\n", name, lb, (unsigned long long)v);
}

/* Nanoseconds as exact decimal seconds. */
static void put_seconds(out *o, uint64_t ns)
{
    put(o, "%llu.%09llu\n", (unsigned long long)(ns / 1000000000ull),
        (unsigned long long)(ns % 1000000000ull));
}

static void gauge(out *o, const char *lb, const char *name, const char *help, double v)
{
    head(o, name, "gauge", help);
    put(o, "%s{%s} %.9g\n", name, lb, v);
}

/* Histogram bounds: 2^k - 1 ns for these k.  The internal histogram
 * (hist.h) has bucket edges at every power of two, so "reads <= 2^k - 1
 * ns" is an exact count, not an interpolation. */
static const unsigned hist_pow2[] = {10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34};

size_t ch_metrics_render(const char *lb, const chute_stats *s, const ch_hist_snap *h,
                         double fill_ratio, char *buf, size_t cap)
{
    out o = {buf, 0, cap, cap == 0};
    const double ns = 1e-9;
    counter(&o, lb, "chute_samples_total", "Samples handed to the consumer.", s->samples);
    counter(&o, lb, "chute_batches_total", "Batches handed to the consumer.", s->batches);
    counter(&o, lb, "chute_bytes_read_total", "Encoded sample bytes read from the dataset.",
            s->read.bytes);
    head(&o, "chute_consumer_wait_seconds_total", "counter",
         "Time the consumer spent blocked waiting for a batch.");
    put(&o, "chute_consumer_wait_seconds_total{%s} ", lb);
    put_seconds(&o, s->wait_ns);
    counter(&o, lb, "chute_skipped_samples_total", "Samples skipped as corrupt (on_corrupt=skip).",
            s->corrupt);
    counter(&o, lb, "chute_io_retries_total", "Sample reads retried after an I/O error.",
            s->io_retries);
    counter(&o, lb, "chute_decoded_cache_hits_total",
            "Samples made from the decoded-sample cache.", s->cache_hits);
    counter(&o, lb, "chute_decoded_cache_misses_total",
            "Samples made from the file while the decoded-sample cache was on.",
            s->cache_misses);
    head(&o, "chute_block_cache_hits_total", "counter",
         "Block cache tier lookups served from RAM or from cache_dir.");
    put(&o, "chute_block_cache_hits_total{%s,tier=\"ram\"} %llu\n", lb,
        (unsigned long long)s->tier_ram_hits);
    put(&o, "chute_block_cache_hits_total{%s,tier=\"disk\"} %llu\n", lb,
        (unsigned long long)s->tier_disk_hits);
    counter(&o, lb, "chute_block_cache_misses_total",
            "Block cache tier lookups read from the origin.", s->tier_fetches);
    head(&o, "chute_stage_busy_seconds_total", "counter",
         "Worker time spent in each pipeline stage, summed over workers.");
    const chute_stage_stats *st[3] = {&s->read, &s->decode, &s->transform};
    static const char *const stn[3] = {"read", "decode", "transform"};
    for (int i = 0; i < 3; i++)
    {
        put(&o, "chute_stage_busy_seconds_total{%s,stage=\"%s\"} ", lb, stn[i]);
        put_seconds(&o, st[i]->busy_ns);
    }
    counter(&o, lb, "chute_queue_ready_batches_total",
            "Sum over batches handed over of the ready batches found in the queue.",
            s->queue_fill_sum);
    gauge(&o, lb, "chute_queue_capacity_batches", "Batch buffers in the ring.",
          (double)s->queue_capacity);
    gauge(&o, lb, "chute_queue_fill_ratio",
          "Mean ready batches found per batch handed over in the last second, over capacity.",
          fill_ratio);
    gauge(&o, lb, "chute_samples_per_second",
          "Samples handed over per second in the stats window (CHUTE_STATS_WINDOW_MS).",
          s->window_ns ? (double)s->window_samples / ((double)s->window_ns * ns) : 0.0);
    gauge(&o, lb, "chute_consumer_wait_ratio",
          "Fraction of the stats window the consumer spent waiting.",
          s->window_ns ? (double)s->window_wait_ns / (double)s->window_ns : 0.0);
    gauge(&o, lb, "chute_workers", "Worker threads.", (double)s->workers);
    gauge(&o, lb, "chute_uptime_seconds", "Time since the loader was created.",
          (double)s->wall_ns * ns);
    head(&o, "chute_read_latency_seconds", "histogram",
         "Latency of one sample's read (bounds are 2^k - 1 ns).");
    uint64_t acc = 0;
    unsigned bi = 0;
    for (size_t k = 0; k < sizeof hist_pow2 / sizeof *hist_pow2; k++) {
        uint64_t edge = 1ull << hist_pow2[k];
        for (; bi < CH_HIST_BUCKETS && ch_hist_lower(bi) < edge; bi++)
            acc += h ? h->b[bi] : 0;
        put(&o, "chute_read_latency_seconds_bucket{%s,le=\"%.9f\"} %llu\n", lb,
            (double)(edge - 1) * ns, (unsigned long long)acc);
    }
    uint64_t n = h ? h->n : 0;
    put(&o, "chute_read_latency_seconds_bucket{%s,le=\"+Inf\"} %llu\n", lb,
        (unsigned long long)n);
    put(&o, "chute_read_latency_seconds_sum{%s} ", lb);
    put_seconds(&o, s->read.busy_ns);
    put(&o, "chute_read_latency_seconds_count{%s} %llu\n", lb, (unsigned long long)n);
    return o.full ? 0 : o.len;
}

/* Snapshot st (NULL: take one now), rendered into m->buf. */
static size_t render(ch_metrics *m, const chute_stats *st)
{
    chute_stats s;
    if (!st) {
        chute_loader_stats(m->ld, &s);
        st = &s;
    }
    memset(m->hist, 0, sizeof *m->hist);
    ch_loader_read_hist(m->ld, m->hist);
    return ch_metrics_render(m->labels, st, m->hist, m->fill_ratio, m->buf, RENDER_CAP);
}

static int write_file(ch_metrics *m, const chute_stats *st, chute_error *err)
{
    size_t n = render(m, st);
    int fd = open(m->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "metrics_file %s: cannot create %s", m->file,
                            m->tmp);
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, m->buf + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            unlink(m->tmp);
            return ch_err_errno(err, CHUTE_EIO, e, "metrics_file %s: writing %s", m->file,
                                m->tmp);
        }
        off += (size_t)w;
    }
    if (close(fd) != 0 || rename(m->tmp, m->file) != 0) {
        int e = errno;
        unlink(m->tmp);
        return ch_err_errno(err, CHUTE_EIO, e, "metrics_file %s: cannot replace it", m->file);
    }
    return CHUTE_OK;
}

/* ---- the responder ------------------------------------------------ */

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    c->fd = -1;
    c->out = NULL;
    c->in_len = c->out_len = c->out_off = 0;
}

static void respond(ch_metrics *m, conn *c, int code, const char *reason, const char *body,
                    size_t blen)
{
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                      "Connection: close\r\n\r\n",
                      code, reason,
                      code == 200 ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain",
                      blen, code == 405 ? "Allow: GET\r\n" : "");
    (void)m;
    c->out = malloc((size_t)hl + blen);
    if (!c->out) {
        conn_close(c);
        return;
    }
    memcpy(c->out, hdr, (size_t)hl);
    memcpy(c->out + hl, body, blen);
    c->out_len = (size_t)hl + blen;
    c->out_off = 0;
    shutdown(c->fd, SHUT_RD); /* nothing more is read */
}

static void respond_text(ch_metrics *m, conn *c, int code, const char *reason)
{
    char body[64];
    int n = snprintf(body, sizeof body, "%d %s\n", code, reason);
    respond(m, c, code, reason, body, (size_t)n);
}

/* The end of the request's headers, or NULL. */
static const char *request_end(const char *p, size_t n)
{
    const char *e = memmem(p, n, "\r\n\r\n", 4);
    return e ? e : memmem(p, n, "\n\n", 2);
}

int ch_metrics_request_status(const char *p, size_t n, size_t cap)
{
    if (!request_end(p, n))
        return n >= cap ? 431 : 0;
    const char *eol = memchr(p, '\n', n); /* there is one: request_end found it */
    size_t ll = (size_t)(eol - p);
    if (ll && p[ll - 1] == '\r')
        ll--;
    const char *end = p + ll;
    const char *sp1 = memchr(p, ' ', ll);
    if (!sp1 || sp1 == p)
        return 400;
    const char *t = sp1 + 1, *sp2 = memchr(t, ' ', (size_t)(end - t));
    if (!sp2 || sp2 == t)
        return 400;
    const char *v = sp2 + 1;
    size_t vl = (size_t)(end - v);
    if (vl < 7 || memcmp(v, "HTTP/1.", 7) != 0 || memchr(v, ' ', vl))
        return 400;
    for (const char *q = p; q < sp1; q++)
        if (*q < 'A' || *q > 'Z')
            return 400;
    size_t tl = (size_t)(sp2 - t);
    const char *qm = memchr(t, '?', tl);
    if (qm)
        tl = (size_t)(qm - t);
    if (tl != 8 || memcmp(t, "/metrics", 8) != 0)
        return 404;
    if (sp1 - p != 3 || memcmp(p, "GET", 3) != 0)
        return 405;
    return 200;
}

/* A whole request is in c->in (or MAX_REQ bytes without one): answer. */
static void handle_request(ch_metrics *m, conn *c, int code)
{
    switch (code) {
    case 200: {
        size_t n = render(m, NULL); /* a scrape sees the figures of now */
        if (n)
            respond(m, c, 200, "OK", m->buf, n);
        else
            respond_text(m, c, 503, "Service Unavailable");
        break;
    }
    case 404: respond_text(m, c, 404, "Not Found"); break;
    case 405: respond_text(m, c, 405, "Method Not Allowed"); break;
    case 431: respond_text(m, c, 431, "Request Header Fields Too Large"); break;
    default: respond_text(m, c, 400, "Bad Request"); break;
    }
}

static void conn_read(ch_metrics *m, conn *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->in + c->in_len, MAX_REQ - c->in_len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) {
            conn_close(c); /* closed or failed before a whole request */
            return;
        }
        c->in_len += (size_t)r;
        int code = ch_metrics_request_status(c->in, c->in_len, MAX_REQ);
        if (code) {
            handle_request(m, c, code);
            return;
        }
    }
}

static void conn_write(conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (w <= 0)
            break;
        c->out_off += (size_t)w;
    }
    conn_close(c);
}

static void accept_all(ch_metrics *m, uint64_t now)
{
    for (int k = 0; k < 4 * MAX_CONN; k++) {
        int fd = accept4(m->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or a transient error: poll again */
        conn *slot = NULL, *oldest = NULL;
        for (int i = 0; i < MAX_CONN; i++) {
            conn *c = &m->conns[i];
            if (c->fd < 0) {
                slot = c;
                break;
            }
            if (!oldest || c->seq < oldest->seq)
                oldest = c;
        }
        if (!slot) { /* full: the oldest goes (see the essay) */
            conn_close(oldest);
            slot = oldest;
        }
        slot->fd = fd;
        slot->seq = ++m->accepted;
        slot->deadline_ns = now + (uint64_t)CONN_DEADLINE_MS * 1000000ull;
    }
}

void ch_metrics_tick(ch_metrics *m, const chute_stats *s)
{
    uint64_t db = s->batches - m->prev.batches, df = s->queue_fill_sum - m->prev.queue_fill_sum;
    m->fill_ratio = db && s->queue_capacity
                        ? (double)df / (double)db / (double)s->queue_capacity
                        : 0.0;
    m->prev = *s;
    if (m->file)
        write_file(m, s, NULL); /* a failure is retried next tick */
}

int ch_metrics_pollfds(ch_metrics *m, struct pollfd *pf, uint64_t now, uint64_t *wake_at)
{
    int n = 0;
    if (m->listen_fd >= 0)
        pf[n++] = (struct pollfd){.fd = m->listen_fd, .events = POLLIN};
    for (int i = 0; i < MAX_CONN; i++) {
        conn *c = &m->conns[i];
        if (c->fd < 0)
            continue;
        if (c->deadline_ns <= now) {
            conn_close(c); /* slowloris: its time is up */
            continue;
        }
        *wake_at = CH_MIN(*wake_at, c->deadline_ns);
        m->polled[n] = c;
        pf[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
    }
    return n;
}

void ch_metrics_serve(ch_metrics *m, const struct pollfd *pf, int n, uint64_t now)
{
    int base = m->listen_fd >= 0 ? 1 : 0;
    for (int i = base; i < n; i++) {
        if (!pf[i].revents)
            continue;
        conn *c = m->polled[i];
        if (c->out)
            conn_write(c);
        else if (pf[i].revents & POLLIN)
            conn_read(m, c);
        else
            conn_close(c); /* error or hang-up with nothing to read */
        if (c->fd >= 0 && c->out)
            conn_write(c); /* answer at once; the rest on POLLOUT */
    }
    if (base && pf[0].revents)
        accept_all(m, now);
}

/* ---- start / stop ------------------------------------------------- */

static int open_listener(ch_metrics *m, const char *addr, uint32_t port, chute_error *err)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        sl = sizeof *a6;
    } else {
        return ch_err(err, CHUTE_EINVAL,
                      "metrics_addr \"%s\" is not an IPv4 or IPv6 address (a host name is not "
                      "resolved)",
                      addr);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "metrics_port %u: socket", port);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 128) != 0) {
        int e = errno;
        close(fd);
        return ch_err_errno(err, CHUTE_EIO, e, "metrics_port %u on %s", port, addr);
    }
    m->listen_fd = fd;
    return CHUTE_OK;
}

static void metrics_free(ch_metrics *m, int final);

int ch_metrics_start(const chute_loader *ld, const chute_loader_options *o,
                     const char *dataset_root, ch_metrics **out, chute_error *err)
{
    *out = NULL;
    ch_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    m->ld = ld;
    m->listen_fd = -1;
    for (int i = 0; i < MAX_CONN; i++)
        m->conns[i].fd = -1;
    int rc = CHUTE_ENOMEM;
    m->buf = malloc(RENDER_CAP);
    m->hist = calloc(1, sizeof *m->hist);
    if (!m->buf || !m->hist)
        goto fail;
    char host[256] = "", hv[LABEL_CAP], dv[LABEL_CAP];
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "unknown");
    ch_metrics_label_value(hv, sizeof hv, host, 0);
    if (o->metrics_name && *o->metrics_name)
        ch_metrics_label_value(dv, sizeof dv, o->metrics_name, 0);
    else
        ch_metrics_label_value(dv, sizeof dv, dataset_root ? dataset_root : "stream", 1);
    if (!dv[0])
        snprintf(dv, sizeof dv, "dataset");
    snprintf(m->labels, sizeof m->labels, "rank=\"%u\",host=\"%s\",dataset=\"%s\"", o->rank, hv,
             dv);
    if (o->metrics_port) {
        const char *addr = o->metrics_addr && *o->metrics_addr ? o->metrics_addr : "127.0.0.1";
        if ((rc = open_listener(m, addr, o->metrics_port, err)) != CHUTE_OK)
            goto fail_quiet;
    }
    if (o->metrics_file && *o->metrics_file) {
        size_t fl = strlen(o->metrics_file);
        m->file = strdup(o->metrics_file);
        m->tmp = malloc(fl + 32);
        if (!m->file || !m->tmp)
            goto fail;
        snprintf(m->tmp, fl + 32, "%s.tmp.%ld", m->file, (long)getpid());
        if ((rc = write_file(m, NULL, err)) != CHUTE_OK)
            goto fail_quiet;
    }
    *out = m;
    return CHUTE_OK;
fail:
    rc = ch_err(err, CHUTE_ENOMEM, "out of memory for the metrics exporter");
fail_quiet:
    metrics_free(m, 0);
    return rc;
}

static void metrics_free(ch_metrics *m, int final)
{
    if (final && m->file)
        write_file(m, NULL, NULL); /* the final figures */
    for (int i = 0; i < MAX_CONN; i++)
        conn_close(&m->conns[i]);
    if (m->listen_fd >= 0)
        close(m->listen_fd);
    free(m->file);
    free(m->tmp);
    free(m->buf);
    free(m->hist);
    free(m);
}

void ch_metrics_stop(ch_metrics *m)
{
    if (m)
        metrics_free(m, 1);
}
