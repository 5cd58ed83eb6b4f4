/*
 * remote_health.c — per-server outage state shared by every remote
 * request of the process; see remote_health.h.
 *
 * A small fixed table (HOSTS entries, found by the origin of the URL)
 * under one mutex, taken only while some server is in trouble (`trouble`
 * counts the entries that are): a healthy run never locks.  An entry
 * whose server is healthy again is reused; a process with more than
 * HOSTS servers failing at once keeps the per-request budget for the
 * ones without an entry (no fast failure for those, never a hang).
 */
#define _GNU_SOURCE
#include "remote_health.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define HOSTS 16
#define ORIGIN_MAX 256
#define MIN_DEAD_NS 1000000000ull

typedef struct host {
    char origin[ORIGIN_MAX];
    uint64_t down_since;  /* first failed try of this outage; 0 = up */
    uint64_t deadline;    /* down_since + budget */
    uint64_t dead_until;  /* requests fail untried before this; 0 = not dead */
    chute_error why;      /* the request that gave up */
} host;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static host g_hosts[HOSTS];
static _Atomic int g_trouble; /* entries with down_since or dead_until set */

/* "scheme://authority" of url, the key of its server. */
static void origin_of(const char *url, char *out)
{
    const char *p = strstr(url, "://");
    size_t n = p ? (size_t)(p + 3 - url) : 0;
    if (p)
        n += strcspn(p + 3, "/?#");
    else
        n = strlen(url);
    if (n >= ORIGIN_MAX)
        n = ORIGIN_MAX - 1;
    memcpy(out, url, n);
    out[n] = '\0';
}

static int in_trouble(const host *h)
{
    return h->down_since || h->dead_until;
}

/* The entry for url (g_mu held); create: make one if there is none. */
static host *find(const char *url, int create)
{
    char o[ORIGIN_MAX];
    origin_of(url, o);
    host *free_slot = NULL;
    for (int i = 0; i < HOSTS; i++) {
        if (!strcmp(g_hosts[i].origin, o))
            return &g_hosts[i];
        if (!free_slot && !in_trouble(&g_hosts[i]))
            free_slot = &g_hosts[i];
    }
    if (!create || !free_slot)
        return NULL;
    memset(free_slot, 0, sizeof *free_slot);
    snprintf(free_slot->origin, sizeof free_slot->origin, "%s", o);
    return free_slot;
}

static void set_trouble(host *h, int was)
{
    int now = in_trouble(h);
    if (now != was)
        atomic_fetch_add_explicit(&g_trouble, now ? 1 : -1, memory_order_relaxed);
}

int ch_rhealth_check(const char *url, const char *path, const char *what, chute_error *err)
{
    if (!atomic_load_explicit(&g_trouble, memory_order_relaxed))
        return CHUTE_OK;
    int rc = CHUTE_OK;
    pthread_mutex_lock(&g_mu);
    host *h = find(url, 0);
    if (h && h->dead_until) {
        uint64_t now = ch_now_ns();
        if (now < h->dead_until) {
            char why[320];
            ch_str_fit(why, sizeof why, h->why.message);
            rc = ch_err(err, CHUTE_EIO, "%s: %s: not tried, the server was given up on: %s", path,
                        what, why);
        } else { /* the window is over: this request starts a new outage */
            int was = in_trouble(h);
            h->dead_until = 0;
            h->down_since = 0;
            set_trouble(h, was);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void ch_rhealth_ok(const char *url)
{
    if (!atomic_load_explicit(&g_trouble, memory_order_relaxed))
        return;
    pthread_mutex_lock(&g_mu);
    host *h = find(url, 0);
    if (h && in_trouble(h)) {
        h->down_since = 0;
        h->dead_until = 0;
        set_trouble(h, 1);
    }
    pthread_mutex_unlock(&g_mu);
}

uint64_t ch_rhealth_failed(const char *url, uint64_t now, uint64_t budget_ns)
{
    pthread_mutex_lock(&g_mu);
    host *h = find(url, 1);
    if (!h) { /* no entry to spare: this request's own budget */
        pthread_mutex_unlock(&g_mu);
        return now + budget_ns;
    }
    if (!h->down_since) {
        int was = in_trouble(h);
        h->down_since = now;
        h->deadline = now + budget_ns;
        set_trouble(h, was);
    }
    uint64_t d = h->deadline;
    pthread_mutex_unlock(&g_mu);
    return d;
}

void ch_rhealth_dead(const char *url, const chute_error *e, uint64_t budget_ns)
{
    pthread_mutex_lock(&g_mu);
    host *h = find(url, 1);
    uint64_t now = ch_now_ns();
    if (h && (!h->dead_until || now >= h->dead_until)) {
        int was = in_trouble(h);
        h->dead_until = now + (budget_ns > MIN_DEAD_NS ? budget_ns : MIN_DEAD_NS);
        if (!h->down_since)
            h->down_since = now;
        h->why = *e;
        set_trouble(h, was);
    }
    pthread_mutex_unlock(&g_mu);
}
