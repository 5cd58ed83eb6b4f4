/*
 * test_options.c — ch_loader_options_resolve, the one place the loader's
 * option table (src/common/loader_options.def) becomes defaults and
 * bounds: zero fields take the defaults chute.h documents, every value
 * past a bound is refused with a message naming the option, every bound
 * itself is accepted, and the checks that span options still hold.
 */
#include "unit.h"

#include "common/common.h"
#include "common/loader_options.h"

#include <stdint.h>
#include <string.h>

/* Zero options resolve to what include/chute.h promises (literal values
 * from its comments, not from the table), and each table row's default. */
TEST(zero_means_documented_default)
{
    chute_loader_options o;
    chute_error err = {0};
    CHECK(ch_loader_options_resolve(NULL, &o, &err) == CHUTE_OK, "%s", err.message);
    CHECK(o.batch_size == 256 && o.size == 224 && o.prefetch == 2 && o.max_held == 2,
          "batch %u size %u prefetch %u max_held %u", o.batch_size, o.size, o.prefetch,
          o.max_held);
    CHECK(o.seed == 0 && o.drop_last == 0 && o.rank == 0 && o.world_size == 1, "seed/ranks");
    CHECK(o.max_pixels == CHUTE_DEFAULT_MAX_PIXELS &&
              o.max_sample_bytes == CHUTE_DEFAULT_MAX_SAMPLE_BYTES,
          "limits %llu %llu", (unsigned long long)o.max_pixels,
          (unsigned long long)o.max_sample_bytes);
    CHECK(o.scale_min_pct == 8 && o.scale_max_pct == 100, "scale %u..%u", o.scale_min_pct,
          o.scale_max_pct);
    CHECK(o.resize_size == 256, "eval resize side %u, timm's floor(224 / 0.875) = 256",
          o.resize_size);
    CHECK(o.workers == chute_default_workers(NULL, 0), "workers %u", o.workers);
    const ch_loader_opt *t = ch_loader_opts();
    for (int i = 0; i < CH_LOPT_COUNT; i++)
        if (!(t[i].layers & CH_OPT_AUTO))
            CHECK(ch_loader_opt_get(&o, &t[i]) == t[i].def, "%s: %llu, table default %llu",
                  t[i].name, (unsigned long long)ch_loader_opt_get(&o, &t[i]),
                  (unsigned long long)t[i].def);
    return 0;
}

/* Options given are kept (a nonzero field is never replaced). */
TEST(given_values_kept)
{
    chute_loader_options in = {0}, o;
    in.batch_size = 7;
    in.max_held = 5;
    in.drop_last = 1;
    in.scale_min_pct = 50; /* the other end of the range still defaults */
    chute_error err = {0};
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_OK, "%s", err.message);
    CHECK(o.batch_size == 7 && o.max_held == 5 && o.drop_last == 1, "kept");
    CHECK(o.scale_min_pct == 50 && o.scale_max_pct == 100, "scale %u..%u", o.scale_min_pct,
          o.scale_max_pct);
    return 0;
}

/* Set one option (rank with a world_size large enough for it). */
static void set_one(chute_loader_options *o, int i, uint64_t v)
{
    memset(o, 0, sizeof *o);
    ch_loader_opt_set(o, &ch_loader_opts()[i], v);
    if (i == CH_LOPT_rank)
        o->world_size = UINT32_MAX;
    if (i == CH_LOPT_scale_max_pct)
        o->scale_min_pct = 1;
}

TEST(bounds_name_the_option)
{
    const ch_loader_opt *t = ch_loader_opts();
    int tried = 0;
    for (int i = 0; i < CH_LOPT_COUNT; i++) {
        const ch_loader_opt *d = &t[i];
        if (d->kind == CH_OPT_BOOL)
            continue;
        uint64_t type_max = d->kind == CH_OPT_U32 ? UINT32_MAX : UINT64_MAX;
        chute_loader_options in, o;
        chute_error err = {0};
        /* The bounds themselves are accepted. */
        uint64_t ok[2] = {d->min ? d->min : 1, d->max};
        for (int k = 0; k < 2; k++) {
            if (i == CH_LOPT_resize_size && ok[k] < 224)
                continue; /* must be >= size: checked below */
            set_one(&in, i, ok[k]);
            CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_OK, "%s = %llu: %s",
                  d->name, (unsigned long long)ok[k], err.message);
            CHECK(ch_loader_opt_get(&o, d) == ok[k], "%s kept", d->name);
        }
        /* max + 1, where the field can hold it (min - 1 is 0, the default). */
        if (d->max < type_max) {
            set_one(&in, i, d->max + 1);
            memset(&err, 0, sizeof err);
            CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL, "%s = max + 1 accepted",
                  d->name);
            CHECK(strstr(err.message, d->name) != NULL, "message '%s' does not name %s",
                  err.message, d->name);
            tried++;
        }
    }
    CHECK(tried >= 8, "only %d options have a reachable upper bound", tried);
    /* Known bounds, as literals: batch 2^20, size 8192, workers 1024, 64. */
    chute_loader_options in = {0}, o;
    chute_error err = {0};
    in.batch_size = (1u << 20) + 1;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "batch_size"), "batch 2^20 + 1: %s", err.message);
    in = (chute_loader_options){0};
    in.prefetch = 65;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "prefetch 65"), "prefetch 65: %s", err.message);
    return 0;
}

TEST(cross_option_checks)
{
    chute_loader_options in = {0}, o;
    chute_error err = {0};
    in.rank = 2;
    in.world_size = 2;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "rank 2 must be below world_size 2"), "%s", err.message);
    in = (chute_loader_options){0};
    in.scale_min_pct = 60;
    in.scale_max_pct = 50;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "scale_min_pct"), "%s", err.message);
    in = (chute_loader_options){0};
    in.resize_size = 100; /* below size 224 */
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "resize_size"), "%s", err.message);
    return 0;
}

TEST(shuffle_mode_checked)
{
    /* chute.h: GLOBAL = 0 is the default, SHARDS = 1, anything else refused
     * naming the option; shuffle_buffer defaults to 10000. */
    chute_loader_options in = {0}, o;
    chute_error err = {0};
    CHECK_OK(ch_loader_options_resolve(&in, &o, &err));
    CHECK(o.shuffle == CHUTE_SHUFFLE_GLOBAL && o.shuffle_buffer == 10000, "%d %u", (int)o.shuffle,
          o.shuffle_buffer);
    in.shuffle = CHUTE_SHUFFLE_SHARDS;
    CHECK_OK(ch_loader_options_resolve(&in, &o, &err));
    in.shuffle = (chute_shuffle)2;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "shuffle"), "%s", err.message);
    return 0;
}

UNIT_MAIN
