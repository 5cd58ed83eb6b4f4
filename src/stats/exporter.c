/*
 * exporter.c — the stats thread (exporter.h).
 *
 * Until session 10 each exporter ran a thread of its own per loader
 * (TensorBoard writer, Prometheus responder, top publisher): three
 * threads, three stats snapshots per period, three wake-ups on a 2-core
 * machine.  They share one now.  The loop:
 *
 *   poll(eventfd, metrics listener + connections) until the next tick or
 *   the earliest connection deadline;
 *   eventfd: stop, or the consumer posted a TensorBoard snapshot (drain);
 *   tick (every CH_SHM_PUBLISH_MS): one snapshot -> segment; every 4th
 *   tick (1 s) -> metrics (fill gauge, textfile);
 *   metrics fds: accept / read / answer (a scrape renders a fresh
 *   snapshot: it asks for the figures of now).
 *
 * The responder's limits (loopback default, GET /metrics only, request
 * size, connection count, per-connection deadline) live in metrics.c and
 * are unchanged; only the loop that polls them moved here.
 */
#define _GNU_SOURCE
#include "exporter.h"

#include "../common/common.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define METRICS_EVERY 4 /* ticks: 4 x 250 ms, the metrics' one second */

struct ch_exporter {
    ch_exporter_src src;
    ch_tboard *tb;
    ch_metrics *m;
    ch_shm *shm;
    int efd;            /* eventfd: posts and stop */
    atomic_int stop;
    pthread_t thread;
};

static void tick(ch_exporter *x, uint64_t n)
{
    chute_stats st;
    const chute_stats *sp = NULL;
    if (x->src.snap) {
        x->src.snap(x->src.user, &st);
        sp = &st;
    }
    if (x->shm && x->src.fill) {
        uint64_t c[CH_SHM_NCOUNTERS] = {0};
        x->src.fill(x->src.user, sp, c);
        ch_shm_publish(x->shm, c);
    }
    if (x->m && sp && n % METRICS_EVERY == 0)
        ch_metrics_tick(x->m, sp);
}

static void *exporter_main(void *arg)
{
    ch_exporter *x = arg;
    /* Threads inherit their creator's scheduler slice; a request path that
     * gave itself a short one (infer.c) does not pass it on to this one. */
    ch_thread_slice_default();
    pthread_setname_np(pthread_self(), "chute-stats"); /* for top, perf and the tests */
    const uint64_t period = (uint64_t)CH_SHM_PUBLISH_MS * 1000000ull;
    uint64_t next_tick = ch_now_ns() + period, ticks = 0;
    struct pollfd pf[1 + CH_METRICS_MAX_POLLFDS];
    while (!atomic_load_explicit(&x->stop, memory_order_acquire)) {
        uint64_t now = ch_now_ns();
        if (now >= next_tick) {
            tick(x, ++ticks);
            next_tick += period;
            if (next_tick <= now) /* asleep (SIGSTOP, a loaded host): no catch-up burst */
                next_tick = now + period;
        }
        uint64_t wake_at = next_tick;
        pf[0] = (struct pollfd){.fd = x->efd, .events = POLLIN};
        int nm = x->m ? ch_metrics_pollfds(x->m, pf + 1, now, &wake_at) : 0;
        int ms = wake_at > now ? (int)((wake_at - now) / 1000000ull) + 1 : 0;
        int r = poll(pf, (nfds_t)(1 + nm), ms);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (pf[0].revents) {
            uint64_t v;
            ssize_t got = read(x->efd, &v, sizeof v);
            (void)got;
            if (x->tb)
                ch_tboard_drain(x->tb);
        }
        if (nm)
            ch_metrics_serve(x->m, pf + 1, nm, ch_now_ns());
    }
    return NULL;
}

int ch_exporter_start(const ch_exporter_src *src, ch_tboard *tb, ch_metrics *m, ch_shm *shm,
                      ch_exporter **out, chute_error *err)
{
    *out = NULL;
    ch_exporter *x = calloc(1, sizeof *x);
    if (!x)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for the stats thread");
    x->src = *src;
    x->tb = tb;
    x->m = m;
    x->shm = shm;
    x->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (x->efd < 0) {
        int rc = ch_err_errno(err, CHUTE_EIO, errno, "stats thread: eventfd");
        free(x);
        return rc;
    }
    if (tb)
        ch_tboard_set_notify(tb, x->efd);
    int e = pthread_create(&x->thread, NULL, exporter_main, x);
    if (e != 0) {
        if (tb)
            ch_tboard_set_notify(tb, -1);
        close(x->efd);
        free(x);
        return ch_err_errno(err, CHUTE_ENOMEM, e, "cannot start the stats thread");
    }
    *out = x;
    return CHUTE_OK;
}

void ch_exporter_stop(ch_exporter *x)
{
    if (!x)
        return;
    atomic_store_explicit(&x->stop, 1, memory_order_release);
    uint64_t one = 1;
    while (write(x->efd, &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_join(x->thread, NULL);
    ch_shm_close(x->shm);
    ch_metrics_stop(x->m); /* the textfile's final figures */
    if (x->tb)
        ch_tboard_set_notify(x->tb, -1);
    ch_tboard_close(x->tb); /* drains what is still queued */
    close(x->efd);
    free(x);
}

void ch_exporter_abandon(ch_exporter *x)
{
    if (x)
        ch_shm_abandon(x->shm);
}
