/*
 * exporter.h — the one stats thread of a loader or an inference session.
 *
 * Every exporter (TensorBoard event file, Prometheus endpoint and
 * textfile, `chute top`'s segment) is fed by this thread: every
 * CH_SHM_PUBLISH_MS it takes one snapshot (snap) and hands it to the
 * segment (fill + ch_shm_publish) and, once a second, to the metrics
 * tick; in between it sleeps in poll() on an eventfd (stop, and the
 * TensorBoard ring's "a snapshot was posted") and on the metrics
 * listener and its connections.  One thread, whatever is enabled; none
 * when nothing is (ch_exporter_start is not called).
 */
#ifndef CHUTE_EXPORTER_H
#define CHUTE_EXPORTER_H

#include "metrics.h"
#include "shmstats.h"
#include "tboard.h"

typedef struct ch_exporter ch_exporter;

typedef struct ch_exporter_src {
    void *user;
    /* The tick's snapshot (NULL: none; fill gets NULL, metrics need it). */
    void (*snap)(void *user, chute_stats *st);
    /* The segment's counters from that snapshot (NULL when no segment). */
    void (*fill)(void *user, const chute_stats *st, uint64_t *counters);
} ch_exporter_src;

/* Start the thread over the exporters given (any may be NULL, not all);
 * it owns them from here: ch_exporter_stop closes them.  On failure
 * (CHUTE_ENOMEM/EIO, in err) the caller still owns and closes them. */
int ch_exporter_start(const ch_exporter_src *src, ch_tboard *tb, ch_metrics *m, ch_shm *shm,
                      ch_exporter **out, chute_error *err);

/* Stop and join the thread, then close every exporter (the TensorBoard
 * ring drained, the textfile written a last time).  NULL is fine. */
void ch_exporter_stop(ch_exporter *x);

/* In a fork() child: the thread is the parent's; unmap the segment (not
 * unlinked), leak the rest (its locks may be held by the gone thread). */
void ch_exporter_abandon(ch_exporter *x);

#endif
