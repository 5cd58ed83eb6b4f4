/*
 * test_dcache_unit.c — the decoded cache's memory (src/pipeline/dcache.c)
 * with writers and readers on the same samples at once, which the loader
 * itself rarely does (a sample is made once per epoch, and epochs are
 * separated by the loader's mutex): readers spin on entries while writers
 * claim, fill and publish them.  Under TSan this checks that publication
 * orders the entry's bytes before its index slot; everywhere it checks that
 * a reader sees every byte a writer wrote, that a slot is claimed once, and
 * that the budget holds.
 */
#include "unit.h"

#include "pipeline/dcache.h"

#include <pthread.h>
#include <stdatomic.h>

enum { N = 4096, WRITERS = 3, READERS = 3, BYTES = 1000 };

typedef struct shared {
    ch_dcache *c;
    _Atomic uint64_t claimed;
    _Atomic int bad;
} shared;

static void *writer(void *arg)
{
    shared *s = arg;
    for (uint64_t i = 0; i < N; i++) {
        ch_dcache_entry *e = ch_dcache_claim(s->c, i, BYTES);
        if (!e)
            continue;
        atomic_fetch_add(&s->claimed, 1);
        uint8_t *p = (uint8_t *)ch_dcache_data(e);
        for (int k = 0; k < BYTES; k++)
            p[k] = (uint8_t)(i * 31 + k);
        e->width = (uint32_t)i;
        e->kind = CH_DCACHE_SAMPLE;
        ch_dcache_publish(s->c, i, e);
    }
    return NULL;
}

static void *reader(void *arg)
{
    shared *s = arg;
    for (int round = 0; round < 4; round++)
        for (uint64_t i = 0; i < N; i++) {
            const ch_dcache_entry *e = ch_dcache_get(s->c, i);
            if (!e)
                continue;
            const uint8_t *p = ch_dcache_data(e);
            int ok = e->width == i && e->bytes == BYTES;
            for (int k = 0; ok && k < BYTES; k++)
                ok = p[k] == (uint8_t)(i * 31 + k);
            if (!ok)
                atomic_store(&s->bad, 1);
        }
    return NULL;
}

/* Budget for half the samples: each is claimed at most once, what was
 * published reads back intact, and the bytes stay within the budget. */
TEST(concurrent_fill_and_read)
{
    const uint64_t entry = 64 + 1024; /* header + BYTES rounded to 64 */
    const uint64_t budget = 8192 * 4 + (N / 2) * entry; /* index (8 pages) + N/2 entries */
    shared s = {0};
    chute_error err = {0};
    CHECK_OK(ch_dcache_create(&s.c, budget, N, &err));
    pthread_t t[WRITERS + READERS];
    for (int i = 0; i < WRITERS + READERS; i++)
        CHECK(pthread_create(&t[i], NULL, i < WRITERS ? writer : reader, &s) == 0, "thread");
    for (int i = 0; i < WRITERS + READERS; i++)
        pthread_join(t[i], NULL);
    uint64_t claimed = atomic_load(&s.claimed);
    CHECK(!atomic_load(&s.bad), "a reader saw an entry's bytes before they were written");
    CHECK(claimed == ch_dcache_entries(s.c), "claimed %llu, published %llu",
          (unsigned long long)claimed, (unsigned long long)ch_dcache_entries(s.c));
    CHECK(claimed >= N / 2 - 8 && claimed < N, "%llu entries for a budget of ~%d",
          (unsigned long long)claimed, N / 2);
    CHECK(ch_dcache_bytes(s.c) <= budget, "bytes %llu over budget %llu",
          (unsigned long long)ch_dcache_bytes(s.c), (unsigned long long)budget);
    /* What did not fit is never retried, and nothing past n exists. */
    uint64_t last = N - 1;
    CHECK(ch_dcache_get(s.c, last) == NULL && ch_dcache_claim(s.c, last, 1) == NULL, "no fit");
    CHECK(ch_dcache_get(s.c, N) == NULL && ch_dcache_claim(s.c, N, 1) == NULL, "past n");
    ch_dcache_destroy(s.c);
    ch_dcache_destroy(NULL);
    return 0;
}

/* A budget below the index holds nothing. */
TEST(budget_below_index_holds_nothing)
{
    ch_dcache *c = NULL;
    chute_error err = {0};
    CHECK_OK(ch_dcache_create(&c, 100, N, &err));
    CHECK(ch_dcache_claim(c, 0, 1) == NULL && ch_dcache_get(c, 0) == NULL, "claimed");
    ch_dcache_destroy(c);
    return 0;
}

UNIT_MAIN
