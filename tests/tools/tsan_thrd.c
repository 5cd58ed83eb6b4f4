/*
 * tsan_thrd.c — linked into the Kafka tests in TSan builds only.
 *
 * Debian's librdkafka starts its threads with C11 thrd_create.  glibc's
 * thrd_create calls pthread_create from inside libc, past TSan's
 * interceptor, so TSan never sets those threads up and the first
 * allocation on one of them crashes in the sanitizer's allocator
 * (getaddrinfo on rdk:broker-N).  Defining thrd_create here interposes
 * it (and thrd_join, thrd_detach) for librdkafka (it imports them from
 * libc through the PLT)
 * and routes the threads through the intercepted pthread_create; the
 * int result is carried in the void * the way glibc's thrd_join expects
 * ((int)(uintptr_t)result).  Test infrastructure only: the library
 * never starts threads this way.
 *
 * Suppressions (__tsan_default_suppressions, below): librdkafka is not
 * instrumented and hands objects between its threads with atomics TSan
 * cannot see (a buffer calloc'd by the app thread inside rd_kafka_new,
 * freed by rdk:broker-N; a fetch buffer filled by recv() on rdk:broker-N
 * and read by the consumer through a message's payload), so reports with
 * a librdkafka frame are suppressed, and the interceptors librdkafka
 * calls (recv, memcpy, malloc/free, its own mutexes) are not recorded:
 * librdkafka is a black box to TSan.  Races in chute's own code against chute's own code are
 * still reported (the release/next/state_save handoff in
 * kafka.release_from_another_thread); one between chute and a librdkafka
 * frame is not, which is the price of an uninstrumented library.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

typedef struct tramp {
    thrd_start_t fn;
    void *arg;
} tramp;

static void *tramp_run(void *p)
{
    tramp t = *(tramp *)p;
    free(p);
    return (void *)(uintptr_t)(unsigned)t.fn(t.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg)
{
    tramp *t = malloc(sizeof *t);
    if (!t)
        return thrd_nomem;
    t->fn = fn;
    t->arg = arg;
    int e = pthread_create((pthread_t *)thr, NULL, tramp_run, t);
    if (e) {
        free(t);
        return e == EAGAIN ? thrd_nomem : thrd_error;
    }
    return thrd_success;
}

/* Joins and detaches must go the same way, or TSan reports the threads as
 * leaked. */
int thrd_join(thrd_t thr, int *res)
{
    void *p = NULL;
    if (pthread_join((pthread_t)thr, &p))
        return thrd_error;
    if (res)
        *res = (int)(uintptr_t)p;
    return thrd_success;
}

int thrd_detach(thrd_t thr)
{
    return pthread_detach((pthread_t)thr) ? thrd_error : thrd_success;
}

const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:librdkafka.so\n"
           "called_from_lib:librdkafka.so\n";
}
