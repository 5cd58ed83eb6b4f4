/*
 * remote_health.h — what this process knows about each remote server
 * (scheme://host:port) it reads from: whether its requests are failing,
 * since when, and whether it has been given up on.
 *
 * Why it exists.  Each request has a retry budget (docs/REMOTE.md).  A
 * budget per request alone lets a dead server cost it many times over:
 * every sample of a batch, every worker, every read-ahead transfer and
 * every one of the loader's own attempts started a fresh budget, so the
 * time to an error grew with the batch (issue 31.1).  Here the budget
 * belongs to the server's outage instead:
 *  - the outage starts at the first failed try of any request to the
 *    server and ends at the first request that succeeds;
 *  - no retry starts once the outage is older than the budget
 *    (ch_rhealth_deadline), so every request in flight at the time ends
 *    within the budget plus the try it is in (one stall or connect
 *    timeout);
 *  - the first request that gives up declares the server dead, with its
 *    own message (object and last error): for the next budget-long
 *    window every request to that server fails at once with that message
 *    and no try (ch_rhealth_check), so no other read starts the budget
 *    again.  After the window one request may try again (a new outage).
 *
 * This is the one piece of process-wide mutable state in the sources: a
 * server's health is a fact about the server, shared by every object,
 * pool and read-ahead engine that talks to it.  It holds timestamps and
 * a message, never configuration or credentials.  While every server is
 * healthy a call is one relaxed atomic load: no lock per request.
 */
#ifndef CHUTE_IO_REMOTE_HEALTH_H
#define CHUTE_IO_REMOTE_HEALTH_H

#include "../../common/common.h"

/* CHUTE_OK when a request to url may be tried; else CHUTE_EIO, err
 * naming `path`, `what` and the message the server was given up with. */
int ch_rhealth_check(const char *url, const char *path, const char *what, chute_error *err);
/* A request to url succeeded: its server's outage, if any, is over. */
void ch_rhealth_ok(const char *url);
/* A try to url failed in a way worth retrying (at time now): the
 * deadline for retries of this outage, the outage's start + budget_ns. */
uint64_t ch_rhealth_failed(const char *url, uint64_t now, uint64_t budget_ns);
/* A request to url gave up after a transient failure: the server is
 * dead for the next budget_ns (at least 1 s); e is kept for the others. */
void ch_rhealth_dead(const char *url, const chute_error *e, uint64_t budget_ns);

#endif
