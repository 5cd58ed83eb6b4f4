/*
 * test_sampler.c — unit tests for src/pipeline/sampler: the per-epoch
 * permutation and the split of an epoch over ranks (PAD and DROP).
 *
 * What matters to a training job: every sample is seen exactly once per
 * epoch across ranks (plus PAD's repeats), every rank sees the same number
 * of samples, the order is a function of (seed, epoch) only, and it
 * changes from epoch to epoch.
 */
#include "unit.h"

#include "pipeline/sampler.h"

static int is_permutation(const uint64_t *p, uint64_t n)
{
    uint8_t *seen = calloc(n, 1);
    int ok = seen != NULL;
    for (uint64_t i = 0; ok && i < n; i++) {
        if (p[i] >= n || seen[p[i]])
            ok = 0;
        else
            seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

TEST(permutation_is_a_permutation)
{
    const uint64_t ns[] = {1, 2, 3, 7, 100, 1000, 4097};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (uint64_t seed = 0; seed < 3; seed++) {
            ch_sampler s;
            CHECK(ch_sampler_init(&s, ns[a], seed, 1, 0, 1, 0) == CHUTE_OK, "init n=%llu",
                  (unsigned long long)ns[a]);
            for (uint64_t e = 0; e < 5; e++) {
                ch_sampler_set_epoch(&s, e);
                CHECK(is_permutation(s.perm, s.n), "n=%llu seed=%llu epoch=%llu",
                      (unsigned long long)ns[a], (unsigned long long)seed,
                      (unsigned long long)e);
            }
            ch_sampler_free(&s);
        }
    return 0;
}

TEST(no_shuffle_is_dataset_order)
{
    ch_sampler s;
    CHECK(ch_sampler_init(&s, 50, 123, 0, 0, 1, 0) == CHUTE_OK, "init");
    for (uint64_t e = 0; e < 3; e++) {
        ch_sampler_set_epoch(&s, e);
        for (uint64_t k = 0; k < 50; k++)
            CHECK(ch_sampler_get(&s, k) == k, "epoch %llu position %llu -> %llu",
                  (unsigned long long)e, (unsigned long long)k,
                  (unsigned long long)ch_sampler_get(&s, k));
    }
    ch_sampler_free(&s);
    return 0;
}

TEST(same_seed_and_epoch_same_order)
{
    const uint64_t n = 997;
    ch_sampler a, b;
    CHECK(ch_sampler_init(&a, n, 42, 1, 0, 1, 0) == CHUTE_OK, "init a");
    CHECK(ch_sampler_init(&b, n, 42, 1, 0, 1, 0) == CHUTE_OK, "init b");
    /* b visits other epochs first: the order must depend on (seed, epoch) only. */
    ch_sampler_set_epoch(&b, 7);
    ch_sampler_set_epoch(&b, 3);
    ch_sampler_set_epoch(&a, 3);
    ch_sampler_set_epoch(&b, 3);
    CHECK(memcmp(a.perm, b.perm, n * sizeof *a.perm) == 0, "epoch 3 differs after a detour");
    /* Ranks and world size do not change the epoch's permutation. */
    ch_sampler c;
    CHECK(ch_sampler_init(&c, n, 42, 1, 4, 5, 1) == CHUTE_OK, "init c");
    ch_sampler_set_epoch(&c, 3);
    CHECK(memcmp(a.perm, c.perm, n * sizeof *a.perm) == 0, "rank 4/5 sees another permutation");
    ch_sampler_free(&a);
    ch_sampler_free(&b);
    ch_sampler_free(&c);
    return 0;
}

TEST(different_epochs_and_seeds_differ)
{
    const uint64_t n = 100;
    enum { E = 12 };
    uint64_t *orders = malloc(sizeof(uint64_t) * n * E);
    CHECK(orders != NULL, "oom");
    ch_sampler s;
    CHECK(ch_sampler_init(&s, n, 5, 1, 0, 1, 0) == CHUTE_OK, "init");
    for (uint64_t e = 0; e < E; e++) {
        ch_sampler_set_epoch(&s, e);
        memcpy(orders + e * n, s.perm, n * sizeof(uint64_t));
    }
    for (int i = 0; i < E; i++)
        for (int j = i + 1; j < E; j++)
            CHECK(memcmp(orders + i * n, orders + j * n, n * sizeof(uint64_t)) != 0,
                  "epochs %d and %d have the same order", i, j);
    ch_sampler t;
    CHECK(ch_sampler_init(&t, n, 6, 1, 0, 1, 0) == CHUTE_OK, "init");
    CHECK(memcmp(orders, t.perm, n * sizeof(uint64_t)) != 0, "seeds 5 and 6 agree on epoch 0");
    /* Epoch 0 should not be the identity either. */
    uint64_t fixed = 0;
    for (uint64_t i = 0; i < n; i++)
        fixed += orders[i] == i;
    CHECK(fixed < n / 4, "epoch 0 leaves %llu of %llu samples in place", (unsigned long long)fixed,
          (unsigned long long)n);
    ch_sampler_free(&s);
    ch_sampler_free(&t);
    free(orders);
    return 0;
}

/* A biased shuffle (Sattolo's variant, j in [0, i), or modulo bias) shows
 * up as positions that element 0 never or too often lands on. */
TEST(shuffle_is_roughly_uniform)
{
    const uint64_t n = 10, epochs = 4000;
    uint64_t hits[10] = {0}, fixed0 = 0;
    ch_sampler s;
    CHECK(ch_sampler_init(&s, n, 9, 1, 0, 1, 0) == CHUTE_OK, "init");
    for (uint64_t e = 0; e < epochs; e++) {
        ch_sampler_set_epoch(&s, e);
        for (uint64_t i = 0; i < n; i++)
            if (s.perm[i] == 0)
                hits[i]++;
        fixed0 += s.perm[0] == 0;
    }
    /* expected 400 per position, sd ~19 */
    for (uint64_t i = 0; i < n; i++)
        CHECK(hits[i] > 300 && hits[i] < 500, "sample 0 at position %llu in %llu of %llu epochs",
              (unsigned long long)i, (unsigned long long)hits[i], (unsigned long long)epochs);
    CHECK(fixed0 > 0, "sample 0 never stays in place (Sattolo-style bias)");
    ch_sampler_free(&s);
    return 0;
}

/* Collect what every rank of `world` delivers in one epoch. */
static int split_check(uint64_t n, uint32_t world, int drop, uint64_t seed, uint64_t epoch)
{
    ch_sampler *s = calloc(world, sizeof *s);
    uint32_t *count = calloc(n, sizeof *count);
    if (!s || !count) {
        fprintf(stderr, "oom\n");
        free(s);
        free(count);
        return 1;
    }
    int bad = 0;
    uint64_t per = 0, total = 0;
    for (uint32_t r = 0; r < world && !bad; r++) {
        if (ch_sampler_init(&s[r], n, seed, 1, r, world, drop) != CHUTE_OK) {
            fprintf(stderr, "init n=%llu rank %u/%u failed\n", (unsigned long long)n, r, world);
            bad = 1;
            break;
        }
        ch_sampler_set_epoch(&s[r], epoch);
        if (r == 0)
            per = s[r].per_rank;
        if (s[r].per_rank != per) {
            fprintf(stderr, "n=%llu w=%u: rank %u gets %llu samples, rank 0 gets %llu\n",
                    (unsigned long long)n, world, r, (unsigned long long)s[r].per_rank,
                    (unsigned long long)per);
            bad = 1;
        }
        for (uint64_t k = 0; k < s[r].per_rank && !bad; k++) {
            uint64_t idx = ch_sampler_get(&s[r], k);
            if (idx >= n) {
                fprintf(stderr, "index %llu out of range\n", (unsigned long long)idx);
                bad = 1;
            } else {
                count[idx]++;
                total++;
            }
        }
    }
    if (!bad) {
        uint64_t want_total = drop ? n / world * world : (n + world - 1) / world * world;
        if (total != want_total) {
            fprintf(stderr, "n=%llu w=%u %s: %llu samples delivered, want %llu\n",
                    (unsigned long long)n, world, drop ? "DROP" : "PAD", (unsigned long long)total,
                    (unsigned long long)want_total);
            bad = 1;
        }
        for (uint64_t i = 0; i < n && !bad; i++) {
            int ok;
            if (drop)
                ok = count[i] <= 1;
            else if (n >= world)
                ok = count[i] >= 1 && count[i] <= 2;
            else
                ok = count[i] >= 1;
            if (!ok) {
                fprintf(stderr, "n=%llu w=%u %s: sample %llu delivered %u times\n",
                        (unsigned long long)n, world, drop ? "DROP" : "PAD",
                        (unsigned long long)i, count[i]);
                bad = 1;
            }
        }
        /* Globally, position g = r + k*w; the first n positions are the
         * permutation itself and PAD's extra ones repeat its head. */
        for (uint64_t g = 0; g < total && !bad; g++) {
            uint64_t got = ch_sampler_get(&s[g % world], g / world);
            uint64_t want = s[0].perm[g % n];
            if (got != want) {
                fprintf(stderr, "n=%llu w=%u: global position %llu is %llu, want %llu\n",
                        (unsigned long long)n, world, (unsigned long long)g,
                        (unsigned long long)got, (unsigned long long)want);
                bad = 1;
            }
        }
    }
    for (uint32_t r = 0; r < world; r++)
        ch_sampler_free(&s[r]);
    free(s);
    free(count);
    return bad;
}

TEST(rank_split_pad)
{
    for (uint32_t w = 1; w <= 7; w++) {
        for (uint64_t n = 1; n <= 40; n++)
            CHECK_OK(split_check(n, w, 0, 11, n % 3));
        CHECK_OK(split_check(97, w, 0, 1, 0));
        CHECK_OK(split_check(100, w, 0, 2, 1));
        CHECK_OK(split_check(101, w, 0, 3, 2));
        CHECK_OK(split_check(1000, w, 0, 4, 3));
    }
    return 0;
}

TEST(rank_split_drop)
{
    for (uint32_t w = 1; w <= 7; w++) {
        for (uint64_t n = w; n <= 40; n++)
            CHECK_OK(split_check(n, w, 1, 11, n % 3));
        CHECK_OK(split_check(97, w, 1, 1, 0));
        CHECK_OK(split_check(100, w, 1, 2, 1));
        CHECK_OK(split_check(101, w, 1, 3, 2));
        CHECK_OK(split_check(1000, w, 1, 4, 3));
    }
    /* Fewer samples than ranks: nothing to deliver, but no crash. */
    ch_sampler s;
    CHECK(ch_sampler_init(&s, 3, 0, 1, 2, 5, 1) == CHUTE_OK, "init n=3 w=5 DROP");
    CHECK(s.per_rank == 0, "per_rank %llu, want 0", (unsigned long long)s.per_rank);
    ch_sampler_free(&s);
    return 0;
}

TEST(init_rejects_bad_arguments)
{
    ch_sampler s;
    CHECK(ch_sampler_init(&s, 0, 0, 1, 0, 1, 0) == CHUTE_EINVAL, "n=0 accepted");
    CHECK(ch_sampler_init(&s, 10, 0, 1, 0, 0, 0) == CHUTE_EINVAL, "world=0 accepted");
    CHECK(ch_sampler_init(&s, 10, 0, 1, 3, 3, 0) == CHUTE_EINVAL, "rank == world accepted");
    ch_sampler_free(&s); /* after a failed init: must be harmless */
    return 0;
}

/* ---- shards mode (sampler.h; chute.h CHUTE_SHUFFLE_SHARDS) ---- */

/* Units of uneven sizes about k over n samples: unit u has
 * k / 2 + 1 + (u * 7) % k samples, the last one cut at n.  Returns a
 * malloc'd unit_first array, *nu units. */
static uint64_t *make_units(uint64_t n, uint64_t k, uint64_t *nu)
{
    uint64_t *f = malloc((n + 1) * sizeof *f);
    if (!f)
        return NULL;
    uint64_t u = 0, at = 0;
    while (at < n) {
        f[u] = at;
        uint64_t len = k / 2 + 1 + (u * 7) % k;
        at = at + len > n ? n : at + len;
        u++;
    }
    f[u] = n;
    *nu = u;
    return f;
}

/* A shards-mode sampler; returns nonzero on failure. */
static int shards_init(ch_sampler *s, uint64_t n, uint64_t unit_k, uint64_t seed, uint32_t rank,
                       uint32_t world, int drop, uint64_t buffer, uint64_t *nunits)
{
    uint64_t nu = 0;
    uint64_t *f = make_units(n, unit_k, &nu);
    if (!f || ch_sampler_init(s, n, seed, 1, rank, world, drop) != CHUTE_OK) {
        free(f);
        return 1;
    }
    if (nunits)
        *nunits = nu;
    return ch_sampler_use_units(s, f, nu, buffer) != CHUTE_OK;
}

/* Unit of sample i (linear scan; tests only). */
static uint64_t unit_of(const ch_sampler *s, uint64_t i)
{
    uint64_t u = 0;
    while (s->unit_first[u + 1] <= i)
        u++;
    return u;
}

TEST(shards_exactly_once_across_ranks)
{
    /* Unit sizes ~k: k = 3 gives ~70 units (split by units), k = 40 about
     * 6 (by units for w <= 5, by samples for 8), k = 200 two (by samples
     * from w = 3). */
    const uint64_t n = 211;
    const uint32_t worlds[] = {1, 2, 3, 5, 8};
    const uint64_t ks[] = {3, 40, 200};
    uint32_t *count = malloc(n * sizeof *count);
    CHECK(count, "oom");
    int regime_seen[2] = {0, 0};
    for (int drop = 0; drop < 2; drop++)
        for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
            for (size_t b = 0; b < sizeof worlds / sizeof worlds[0]; b++)
                for (uint64_t e = 0; e < 3; e++) {
                    uint32_t w = worlds[b];
                    memset(count, 0, n * sizeof *count);
                    uint64_t per = 0, total = 0, nu = 0;
                    for (uint32_t r = 0; r < w; r++) {
                        ch_sampler s;
                        CHECK(shards_init(&s, n, ks[a], 9, r, w, drop, 17, &nu) == 0, "init");
                        ch_sampler_set_epoch(&s, e);
                        if (r == 0)
                            per = s.per_rank;
                        CHECK(s.per_rank == per, "rank %u gets %llu, rank 0 %llu", r,
                              (unsigned long long)s.per_rank, (unsigned long long)per);
                        for (uint64_t k = 0; k < s.per_rank; k++) {
                            uint64_t i = ch_sampler_get(&s, k);
                            CHECK(i < n, "id %llu", (unsigned long long)i);
                            count[i]++;
                            total++;
                        }
                        ch_sampler_free(&s);
                    }
                    regime_seen[nu >= w]++;
                    CHECK(per == (drop ? n / w : (n + w - 1) / w), "per rank %llu",
                          (unsigned long long)per);
                    CHECK(total == per * w, "total %llu", (unsigned long long)total);
                    uint64_t extra = 0;
                    for (uint64_t i = 0; i < n; i++) {
                        CHECK(count[i] <= (drop ? 1u : 2u), "k=%llu w=%u drop=%d: sample %llu %u times",
                              (unsigned long long)ks[a], w, drop, (unsigned long long)i, count[i]);
                        CHECK(drop || count[i] >= 1, "w=%u: sample %llu missing", w,
                              (unsigned long long)i);
                        extra += count[i] > 1;
                    }
                    CHECK(drop || extra == per * w - n, "PAD repeats %llu, want %llu",
                          (unsigned long long)extra, (unsigned long long)(per * w - n));
                }
    free(count);
    CHECK(regime_seen[0] && regime_seen[1], "both split regimes covered (%d by samples, %d by units)",
          regime_seen[0], regime_seen[1]);
    return 0;
}

TEST(shards_buffer_one_reads_units_front_to_back)
{
    /* Buffer 1: every unit's samples come in increasing order; split by
     * units (many units), a rank's order is whole runs of units except at
     * its two ends; split by samples, consecutive samples of a unit on one
     * rank are w apart. */
    const uint64_t n = 300;
    const uint32_t worlds[] = {1, 2, 3, 5, 8};
    const uint64_t ks[] = {4, 100};
    for (size_t a = 0; a < 2; a++)
        for (size_t b = 0; b < sizeof worlds / sizeof worlds[0]; b++)
            for (uint32_t r = 0; r < worlds[b]; r++) {
                uint32_t w = worlds[b];
                ch_sampler s;
                uint64_t nu = 0;
                CHECK(shards_init(&s, n, ks[a], 3, r, w, 1, 1, &nu) == 0, "init");
                ch_sampler_set_epoch(&s, 2);
                uint64_t changes = 0;
                for (uint64_t k = 1; k < s.per_rank; k++) {
                    uint64_t p = ch_sampler_get(&s, k - 1), q = ch_sampler_get(&s, k);
                    if (unit_of(&s, p) != unit_of(&s, q)) {
                        changes++;
                        continue;
                    }
                    uint64_t step = nu >= w ? 1 : w;
                    CHECK(q == p + step, "w=%u r=%u units=%llu: %llu then %llu in one unit", w, r,
                          (unsigned long long)nu, (unsigned long long)p, (unsigned long long)q);
                }
                /* Each unit is entered once: changes + 1 distinct units. */
                uint8_t *seen = calloc(nu, 1);
                CHECK(seen, "oom");
                uint64_t distinct = 0;
                for (uint64_t k = 0; k < s.per_rank; k++) {
                    uint64_t u = unit_of(&s, ch_sampler_get(&s, k));
                    distinct += !seen[u];
                    seen[u] = 1;
                }
                free(seen);
                CHECK(distinct == changes + 1, "w=%u r=%u: a unit was entered twice", w, r);
                ch_sampler_free(&s);
            }
    return 0;
}

TEST(shards_buffer_mixes_but_never_early)
{
    /* The unit order does not depend on the buffer, so buffer 1's order is
     * each rank's input; with buffer b an input at position i is emitted at
     * position p >= i - (b - 1), and the order differs from the input. */
    const uint64_t n = 500, bufs[] = {2, 8, 64, 1000};
    const uint32_t worlds[] = {1, 3, 8};
    uint64_t *pos = malloc(n * sizeof *pos);
    CHECK(pos, "oom");
    for (size_t a = 0; a < sizeof worlds / sizeof worlds[0]; a++)
        for (uint64_t ka = 0; ka < 2; ka++)
            for (size_t c = 0; c < sizeof bufs / sizeof bufs[0]; c++) {
                uint32_t w = worlds[a], r = w - 1;
                uint64_t k = ka ? 300 : 5;
                ch_sampler in, out;
                CHECK(shards_init(&in, n, k, 77, r, w, 1, 1, NULL) == 0, "init");
                CHECK(shards_init(&out, n, k, 77, r, w, 1, bufs[c], NULL) == 0, "init");
                ch_sampler_set_epoch(&in, 4);
                ch_sampler_set_epoch(&out, 4);
                for (uint64_t i = 0; i < in.per_rank; i++)
                    pos[ch_sampler_get(&in, i)] = i;
                uint64_t moved = 0;
                for (uint64_t p = 0; p < out.per_rank; p++) {
                    uint64_t i = pos[ch_sampler_get(&out, p)];
                    CHECK(i < p + bufs[c], "w=%u buffer %llu: input %llu emitted at %llu", w,
                          (unsigned long long)bufs[c], (unsigned long long)i,
                          (unsigned long long)p);
                    moved += i != p;
                }
                CHECK(moved > out.per_rank / 2, "buffer %llu moved only %llu of %llu",
                      (unsigned long long)bufs[c], (unsigned long long)moved,
                      (unsigned long long)out.per_rank);
                ch_sampler_free(&in);
                ch_sampler_free(&out);
            }
    free(pos);
    return 0;
}

TEST(shards_order_depends_on_seed_epoch_rank_only)
{
    const uint64_t n = 400;
    ch_sampler a, b, c;
    CHECK(shards_init(&a, n, 6, 42, 1, 3, 0, 32, NULL) == 0, "init a");
    CHECK(shards_init(&b, n, 6, 42, 1, 3, 0, 32, NULL) == 0, "init b");
    ch_sampler_set_epoch(&b, 9);
    ch_sampler_set_epoch(&b, 3);
    ch_sampler_set_epoch(&a, 3);
    CHECK(memcmp(a.order, b.order, a.per_rank * sizeof *a.order) == 0,
          "epoch 3 differs after a detour");
    ch_sampler_set_epoch(&b, 4);
    CHECK(memcmp(a.order, b.order, a.per_rank * sizeof *a.order) != 0, "epochs 3 and 4 agree");
    CHECK(shards_init(&c, n, 6, 43, 1, 3, 0, 32, NULL) == 0, "init c");
    ch_sampler_set_epoch(&c, 3);
    CHECK(memcmp(a.order, c.order, a.per_rank * sizeof *a.order) != 0, "seeds 42 and 43 agree");
    /* Epoch 0 is shuffled too (not dataset order). */
    ch_sampler_set_epoch(&c, 0);
    uint64_t inorder = 0;
    for (uint64_t k = 1; k < c.per_rank; k++)
        inorder += ch_sampler_get(&c, k) == ch_sampler_get(&c, k - 1) + 1;
    CHECK(inorder < c.per_rank / 2, "epoch 0 is mostly dataset order");
    ch_sampler_free(&a);
    ch_sampler_free(&b);
    ch_sampler_free(&c);
    return 0;
}

TEST(shards_use_units_rejects_bad_units)
{
    ch_sampler s;
    const uint64_t good[] = {0, 4, 10};
    const uint64_t bad[][3] = {{1, 4, 10}, {0, 4, 9}, {0, 4, 4}, {0, 11, 10}};
    for (size_t i = 0; i < 4; i++) {
        CHECK_OK(ch_sampler_init(&s, 10, 1, 1, 0, 1, 0));
        uint64_t *f = malloc(sizeof bad[i]);
        CHECK(f, "oom");
        memcpy(f, bad[i], sizeof bad[i]);
        CHECK(ch_sampler_use_units(&s, f, 2, 4) == CHUTE_EINVAL, "bad units %zu accepted", i);
        ch_sampler_free(&s); /* frees f */
    }
    /* No shuffle, or buffer 0: refused. */
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ch_sampler_init(&s, 10, 1, i, 0, 1, 0));
        uint64_t *f = malloc(sizeof good);
        CHECK(f, "oom");
        memcpy(f, good, sizeof good);
        CHECK(ch_sampler_use_units(&s, f, 2, i ? 0 : 4) == CHUTE_EINVAL, "case %d accepted", i);
        ch_sampler_free(&s);
    }
    return 0;
}

UNIT_MAIN

/* Elastic resume (ch_sampler_set_run): W ranks each consume their first k
 * positions, then W' ranks run from P = k*W.  Over both parts every sample
 * appears, the consumed part holds no repeat, the new ranks get equal
 * counts, PAD's extra deliveries are fewer than W', each a second
 * delivery of a sample of the consumed part (when it has W'-1 or more),
 * DROP delivers no sample twice and leaves fewer than W' out.  The check counts deliveries per sample id; it does not use the
 * run's formula. */
TEST(elastic_run_is_the_rest_of_the_epoch)
{
    const uint64_t ns[] = {1, 7, 23, 100};
    uint32_t *count = calloc(100, sizeof *count);
    CHECK(count != NULL, "alloc");
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (uint32_t w = 1; w <= 5; w++)
            for (uint32_t w2 = 1; w2 <= 9; w2++)
                for (int drop = 0; drop <= 1; drop++) {
                    const uint64_t n = ns[a];
                    if (drop && (n < w || n < w2))
                        continue;
                    uint64_t per = drop ? n / w : (n + w - 1) / w;
                    for (uint64_t k = 0; k < per && k * w < n; k++) {
                        memset(count, 0, 100 * sizeof *count);
                        ch_sampler s;
                        for (uint32_t r = 0; r < w; r++) {
                            CHECK(ch_sampler_init(&s, n, 9, 1, r, w, drop) == CHUTE_OK, "init");
                            ch_sampler_set_epoch(&s, 4);
                            for (uint64_t j = 0; j < k; j++)
                                count[ch_sampler_get(&s, j)]++;
                            ch_sampler_free(&s);
                        }
                        for (uint64_t i = 0; i < n; i++)
                            CHECK(count[i] <= 1, "n=%llu w=%u k=%llu: consumed twice",
                                  (unsigned long long)n, w, (unsigned long long)k);
                        uint32_t *before = malloc(n * sizeof *before);
                        CHECK(before != NULL, "alloc");
                        memcpy(before, count, n * sizeof *before);
                        uint64_t got = UINT64_MAX, total = 0;
                        for (uint32_t r = 0; r < w2; r++) {
                            CHECK(ch_sampler_init(&s, n, 9, 1, r, w2, drop) == CHUTE_OK, "init");
                            CHECK(ch_sampler_set_run(&s, 4, k * w) == CHUTE_OK, "set_run");
                            CHECK(got == UINT64_MAX || got == s.per_rank,
                                  "n=%llu %u->%u: unequal ranks", (unsigned long long)n, w, w2);
                            got = s.per_rank;
                            for (uint64_t j = 0; j < s.per_rank; j++)
                                count[ch_sampler_get(&s, j)]++;
                            total += s.per_rank;
                            ch_sampler_free(&s);
                        }
                        uint64_t missing = 0, extra = 0;
                        for (uint64_t i = 0; i < n; i++) {
                            if (count[i] == 0)
                                missing++;
                            else if (count[i] > 1) {
                                extra += count[i] - 1;
                                /* From the epoch's head: consumed before the
                                 * resume once at least W' - 1 positions were. */
                                CHECK((count[i] == 2 || n < w2) && (before[i] == 1 || k * w < w2 - 1),
                                      "n=%llu %u->%u k=%llu: sample %llu delivered %u times",
                                      (unsigned long long)n, w, w2, (unsigned long long)k,
                                      (unsigned long long)i, count[i]);
                            }
                        }
                        free(before);
                        uint64_t left = n - k * w;
                        CHECK(drop ? extra == 0 && missing == left % w2 && total == left - missing
                                   : missing == 0 && extra < w2 && total == left + extra,
                              "n=%llu %u->%u k=%llu drop=%d: missing %llu extra %llu",
                              (unsigned long long)n, w, w2, (unsigned long long)k, drop,
                              (unsigned long long)missing, (unsigned long long)extra);
                    }
                }
    free(count);
    return 0;
}

TEST(elastic_run_refused_past_the_end_and_in_shards_mode)
{
    ch_sampler s;
    CHECK(ch_sampler_init(&s, 10, 1, 1, 0, 2, 0) == CHUTE_OK, "init");
    CHECK(ch_sampler_set_run(&s, 0, 11) == CHUTE_EINVAL, "position past N accepted");
    CHECK(ch_sampler_set_run(&s, 0, 10) == CHUTE_OK && s.per_rank == 0, "P = N: empty run");
    CHECK(ch_sampler_set_run(&s, 1, 0) == CHUTE_OK && s.per_rank == 5, "P = 0: whole epoch");
    uint64_t *units = malloc(3 * sizeof *units);
    CHECK(units != NULL, "alloc");
    units[0] = 0, units[1] = 4, units[2] = 10;
    CHECK(ch_sampler_use_units(&s, units, 2, 4) == CHUTE_OK, "units");
    CHECK(ch_sampler_set_run(&s, 1, 4) == CHUTE_EINVAL, "shards mode took a position");
    CHECK(s.per_rank == 5 && s.start == 0, "refused run left the sampler changed");
    ch_sampler_free(&s);
    return 0;
}

/* Repeated augmentation: every (sample, copy) pair exactly once per epoch
 * across ranks (PAD: plus fewer than world repeats of the head; DROP:
 * fewer than world pairs cut), copies of a sample on consecutive global
 * positions (so on different ranks when world >= reps), and a resumed run
 * the rest of the rank's order. */
TEST(repeats_every_copy_once_across_ranks)
{
    const uint64_t ns[] = {1, 7, 100};
    const uint32_t reps[] = {2, 3, 5}, worlds[] = {1, 2, 3, 7};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < 4; c++)
                for (int drop = 0; drop < 2; drop++) {
                    uint64_t n = ns[a], k = reps[b], w = worlds[c], pairs = n * k;
                    if (drop && pairs < w)
                        continue;
                    uint32_t *seen = calloc(pairs, sizeof *seen);
                    uint64_t total = 0;
                    for (uint32_t r = 0; r < w; r++) {
                        ch_sampler s;
                        CHECK(ch_sampler_init(&s, n, 9, 1, r, (uint32_t)w, drop) == CHUTE_OK &&
                                  ch_sampler_set_repeats(&s, (uint32_t)k) == CHUTE_OK,
                              "init");
                        CHECK(s.per_rank == (drop ? pairs / w : (pairs + w - 1) / w),
                              "n=%llu k=%llu w=%llu: per_rank %llu", (unsigned long long)n,
                              (unsigned long long)k, (unsigned long long)w,
                              (unsigned long long)s.per_rank);
                        for (uint64_t j = 0; j < s.per_rank; j++) {
                            uint64_t id = ch_sampler_get(&s, j), cp = ch_sampler_copy(&s, j);
                            CHECK(id < n && cp < k, "pair (%llu, %llu)", (unsigned long long)id,
                                  (unsigned long long)cp);
                            /* global position r + j w holds perm[g / k], copy g % k */
                            uint64_t g = (r + j * w) % pairs;
                            CHECK(id == s.perm[g / k] && cp == g % k, "position %llu",
                                  (unsigned long long)g);
                            seen[id * k + cp]++;
                            total++;
                        }
                        if (s.per_rank > 2 && !drop) { /* resume at P = 2w: the rest */
                            ch_sampler t;
                            CHECK(ch_sampler_init(&t, n, 9, 1, r, (uint32_t)w, drop) == 0 &&
                                      ch_sampler_set_repeats(&t, (uint32_t)k) == 0 &&
                                      ch_sampler_set_run(&t, 0, 2 * w) == 0,
                                  "resume");
                            for (uint64_t j = 0; j < t.per_rank; j++)
                                CHECK(ch_sampler_get(&t, j) == ch_sampler_get(&s, j + 2) &&
                                          ch_sampler_copy(&t, j) == ch_sampler_copy(&s, j + 2),
                                      "resumed position %llu", (unsigned long long)j);
                            ch_sampler_free(&t);
                        }
                        ch_sampler_free(&s);
                    }
                    uint64_t missing = 0, extra = 0;
                    for (uint64_t p = 0; p < pairs; p++) {
                        missing += seen[p] == 0;
                        extra += seen[p] > 1 ? seen[p] - 1 : 0;
                    }
                    CHECK(drop ? extra == 0 && missing < w && total == pairs - missing
                               : missing == 0 && extra < w,
                          "n=%llu k=%llu w=%llu drop=%d: %llu missing, %llu extra",
                          (unsigned long long)n, (unsigned long long)k, (unsigned long long)w,
                          drop, (unsigned long long)missing, (unsigned long long)extra);
                    free(seen);
                }
    return 0;
}

TEST(repeats_refused_in_shards_mode_and_zero)
{
    ch_sampler s;
    CHECK(ch_sampler_init(&s, 10, 1, 1, 0, 1, 0) == CHUTE_OK, "init");
    CHECK(ch_sampler_set_repeats(&s, 0) == CHUTE_EINVAL, "0 repeats accepted");
    uint64_t *units = malloc(3 * sizeof *units);
    CHECK(units != NULL, "alloc");
    units[0] = 0, units[1] = 4, units[2] = 10;
    CHECK(ch_sampler_use_units(&s, units, 2, 4) == CHUTE_OK, "units");
    CHECK(ch_sampler_set_repeats(&s, 2) == CHUTE_EINVAL, "shards mode took repeats");
    CHECK(ch_sampler_set_repeats(&s, 1) == CHUTE_OK && s.n == 10, "1 repeat refused");
    ch_sampler_free(&s);
    return 0;
}
