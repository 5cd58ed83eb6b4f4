/*
 * metrics.h — Prometheus export of a loader's counters (metrics.c): an
 * HTTP endpoint (metrics_port) and/or a node_exporter textfile
 * (metrics_file), both served by the loader's stats thread (exporter.h),
 * which polls the fds ch_metrics_pollfds gives it.
 * docs/METRICS.md lists the metric set.
 */
#ifndef CHUTE_METRICS_H
#define CHUTE_METRICS_H

#include "chute.h"
#include "hist.h"

#include <poll.h>
#include <stddef.h>

/* At most this many pollfds: the listener and its connections. */
#define CH_METRICS_MAX_POLLFDS 17

typedef struct ch_metrics ch_metrics;

/* Set up the exporter of `ld` as its options ask (o->metrics_port,
 * metrics_addr, metrics_file, metrics_name; the strings are copied).
 * dataset_root: the dataset's path or URL (only a sanitized basename of it
 * becomes a label), NULL for a stream.  Binds the port and writes the file
 * once before returning, so a busy port or an unwritable directory is an
 * error here (CHUTE_EIO, naming it), not a silent failure later.  Starts
 * no thread: the stats thread drives it with the three calls below. */
int ch_metrics_start(const chute_loader *ld, const chute_loader_options *o,
                     const char *dataset_root, ch_metrics **out, chute_error *err);

/* The once-a-second tick with that tick's snapshot: the queue-fill
 * gauge's interval, and the textfile written (a failure is retried). */
void ch_metrics_tick(ch_metrics *m, const chute_stats *s);

/* The fds to poll (pf has CH_METRICS_MAX_POLLFDS): the listener, then the
 * open connections; a connection past its deadline is closed here, the
 * earliest deadline lowers *wake_at.  Returns how many. */
int ch_metrics_pollfds(ch_metrics *m, struct pollfd *pf, uint64_t now, uint64_t *wake_at);

/* Handle the revents of the n fds ch_metrics_pollfds gave (accept, read,
 * answer, write). */
void ch_metrics_serve(ch_metrics *m, const struct pollfd *pf, int n, uint64_t now);

/* Write the file a last time, close everything.  NULL is fine.  Call
 * with the stats thread stopped and before the loader's workers go. */
void ch_metrics_stop(ch_metrics *m);

/* Provided by loader.c: the read latency histogram summed over workers. */
void ch_loader_read_hist(const chute_loader *ld, ch_hist_snap *out);

/* The exposition (text format 0.0.4) of one snapshot, into buf[cap].
 * labels: `rank="0",host="h",dataset="d"` (already escaped).  fill_ratio:
 * the queue-fill gauge.  Returns the length, or 0 if cap is too small.
 * Pure: the tests render with it directly. */
size_t ch_metrics_render(const char *labels, const chute_stats *s, const ch_hist_snap *h,
                         double fill_ratio, char *buf, size_t cap);

/* A label value made safe: bytes outside [A-Za-z0-9._-] become '_', at
 * most cap - 1 of them are kept.  For a path or URL only what follows the
 * last '/' (trailing slashes dropped), '@' and before any '?' or '#' is
 * used, so no directory, credential or query string reaches a label. */
void ch_metrics_label_value(char *dst, size_t cap, const char *src, int basename_only);

/* What the responder answers to the n bytes a client sent so far (cap:
 * the request size limit): 0 (no whole request yet: read on), 200 (GET
 * /metrics, a query string allowed), 400 (not an HTTP/1.x request line),
 * 404 (another path), 405 (another method), 431 (cap bytes and no end
 * of headers).  Pure; the fuzz target drives it. */
int ch_metrics_request_status(const char *p, size_t n, size_t cap);

#endif
