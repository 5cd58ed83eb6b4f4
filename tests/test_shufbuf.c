/*
 * test_shufbuf.c — unit tests for src/pipeline/shufbuf: the seeded shuffle
 * buffer that mixes sequentially read samples (the shards shuffle mode,
 * and the streams of issue #13).
 *
 * The expected values come from the semantics of tf.data's
 * shuffle(buffer_size), not from this implementation: cap 1 passes the
 * input through; nothing leaves before it has entered (output position p
 * holds an input from positions < p + cap); the first output is uniform
 * over the first cap inputs; a buffer at least as long as the input gives
 * every permutation equally often; an item waits a geometric number of
 * steps with mean cap - 1.
 */
#include "unit.h"

#include "pipeline/shufbuf.h"

#include <math.h>

/* Run 0..n-1 through a buffer of cap seeded with s; out gets n items. */
static int run(uint64_t n, size_t cap, uint64_t s, uint64_t *out)
{
    ch_shufbuf b;
    if (ch_shufbuf_init(&b, cap))
        return -1;
    ch_shufbuf_reset(&b, ch_rng_for(s, 7, 11));
    uint64_t k = 0, x;
    for (uint64_t i = 0; i < n; i++)
        if (ch_shufbuf_push(&b, i, &x))
            out[k++] = x;
    while (ch_shufbuf_drain(&b, &x))
        out[k++] = x;
    ch_shufbuf_free(&b);
    return k == n ? 0 : -1;
}

TEST(cap_one_is_the_input_order)
{
    uint64_t out[100];
    CHECK(run(100, 1, 5, out) == 0, "run");
    for (uint64_t i = 0; i < 100; i++)
        CHECK(out[i] == i, "position %llu holds %llu", (unsigned long long)i,
              (unsigned long long)out[i]);
    return 0;
}

TEST(output_is_a_permutation_never_early)
{
    const uint64_t ns[] = {1, 2, 5, 64, 1000};
    const size_t caps[] = {1, 2, 3, 16, 999, 1000, 5000};
    uint64_t *out = malloc(1000 * sizeof *out);
    uint8_t *seen = malloc(1000);
    CHECK(out && seen, "oom");
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++)
            for (uint64_t s = 0; s < 3; s++) {
                uint64_t n = ns[a];
                CHECK(run(n, caps[c], s, out) == 0, "run n=%llu", (unsigned long long)n);
                memset(seen, 0, n);
                for (uint64_t p = 0; p < n; p++) {
                    CHECK(out[p] < n && !seen[out[p]], "n=%llu cap=%zu: %llu twice or out of range",
                          (unsigned long long)n, caps[c], (unsigned long long)out[p]);
                    seen[out[p]] = 1;
                    /* Not in the buffer before cap - 1 emissions... */
                    CHECK(out[p] < p + caps[c], "n=%llu cap=%zu: input %llu left at %llu",
                          (unsigned long long)n, caps[c], (unsigned long long)out[p],
                          (unsigned long long)p);
                }
            }
    free(out);
    free(seen);
    return 0;
}

/* Pearson chi-square of counts against a uniform expectation. */
static double chi2(const uint64_t *count, size_t k, double expect)
{
    double x = 0;
    for (size_t i = 0; i < k; i++)
        x += (count[i] - expect) * (count[i] - expect) / expect;
    return x;
}

TEST(first_output_is_uniform_over_the_first_cap)
{
    enum { CAP = 8, N = 40, TRIALS = 16000 };
    uint64_t count[N] = {0}, out[N];
    for (uint64_t t = 0; t < TRIALS; t++) {
        CHECK(run(N, CAP, t, out) == 0, "run");
        count[out[0]]++;
    }
    for (int i = CAP; i < N; i++)
        CHECK(count[i] == 0, "input %d came out first (buffer %d)", i, CAP);
    /* 7 degrees of freedom: p = 0.001 at 24.3. */
    double x = chi2(count, CAP, TRIALS / (double)CAP);
    CHECK(x < 24.3, "first output not uniform over the first %d inputs: chi2 %.1f", CAP, x);
    return 0;
}

TEST(full_buffer_gives_every_permutation_equally)
{
    /* 5 items, buffer >= 5: each of the 120 orders with p = 1/120. */
    enum { N = 5, PERMS = 120, TRIALS = 120 * 200 };
    uint64_t count[PERMS] = {0}, out[N];
    for (uint64_t t = 0; t < TRIALS; t++) {
        CHECK(run(N, 8, t, out) == 0, "run");
        /* Lehmer code of the permutation: its rank in 0..119. */
        uint64_t r = 0;
        for (int i = 0; i < N; i++) {
            uint64_t smaller = 0;
            for (int j = i + 1; j < N; j++)
                smaller += out[j] < out[i];
            r = r * (uint64_t)(N - i) + smaller;
        }
        count[r]++;
    }
    for (int i = 0; i < PERMS; i++)
        CHECK(count[i] > 0, "permutation %d never drawn", i);
    /* 119 degrees of freedom: p = 0.001 at 173.6. */
    double x = chi2(count, PERMS, TRIALS / (double)PERMS);
    CHECK(x < 173.6, "orders not uniform: chi2 %.1f", x);
    return 0;
}

TEST(wait_is_geometric_with_mean_cap_minus_one)
{
    /* Input 0 survives each emission with probability 1 - 1/cap, so its
     * output position is geometric with mean cap - 1 (n >> cap). */
    enum { CAP = 16, N = 2000, TRIALS = 4000 };
    uint64_t *out = malloc(N * sizeof *out);
    CHECK(out, "oom");
    double sum = 0, sum2 = 0;
    for (uint64_t t = 0; t < TRIALS; t++) {
        CHECK(run(N, CAP, t, out) == 0, "run");
        uint64_t p = 0;
        while (out[p] != 0)
            p++;
        sum += (double)p;
        sum2 += (double)p * (double)p;
    }
    free(out);
    double mean = sum / TRIALS, var = sum2 / TRIALS - mean * mean;
    /* Geometric: variance (1-q)/q^2 = 240; standard error of the mean
     * sqrt(240 / 4000) = 0.245; allow 5 of them. */
    CHECK(fabs(mean - (CAP - 1)) < 1.25, "mean wait %.2f, want %d", mean, CAP - 1);
    CHECK(fabs(var - 240) < 60, "wait variance %.1f, want 240", var);
    return 0;
}

TEST(same_rng_same_order_other_rng_differs)
{
    uint64_t a[500], b[500], c[500];
    CHECK(run(500, 50, 1, a) == 0 && run(500, 50, 1, b) == 0 && run(500, 50, 2, c) == 0, "run");
    CHECK(memcmp(a, b, sizeof a) == 0, "same rng, different order");
    CHECK(memcmp(a, c, sizeof a) != 0, "different rng, same order");
    return 0;
}

TEST(reset_empties_and_init_rejects_zero)
{
    ch_shufbuf b;
    CHECK(ch_shufbuf_init(&b, 0) == CHUTE_EINVAL, "cap 0 accepted");
    ch_shufbuf_free(&b); /* after a failed init: harmless */
    CHECK_OK(ch_shufbuf_init(&b, 4));
    uint64_t x;
    ch_shufbuf_reset(&b, ch_rng_for(1, 2, 3));
    CHECK(ch_shufbuf_push(&b, 9, &x) == 0 && ch_shufbuf_push(&b, 9, &x) == 0, "push");
    ch_shufbuf_reset(&b, ch_rng_for(1, 2, 3));
    CHECK(ch_shufbuf_drain(&b, &x) == 0, "reset left items behind");
    ch_shufbuf_free(&b);
    ch_shufbuf_free(&b);
    return 0;
}

UNIT_MAIN
