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

#include <math.h>
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

/* Every enum row of the table: its choices are the names chute.h gives
 * the C values (literals here), each value 0..n-1 resolves, value n is
 * CHUTE_EINVAL naming the option and its choices, and each name finds its
 * value again (the CLI and Python look names up the same way). */
TEST(enum_rows_choices_round_trip)
{
    static const struct {
        const char *name, *choices;
        int count;
    } want[] = {
        {"transform", "train|eval|none", CHUTE_TRANSFORM_NONE + 1},
        {"dtype", "float32|uint8|float16", CHUTE_DTYPE_FLOAT16 + 1},
        {"layout", "default|nchw|nhwc", CHUTE_LAYOUT_NHWC + 1},
        {"remainder", "pad|drop", CHUTE_REMAINDER_DROP + 1},
        {"on_corrupt", "skip|fail", CHUTE_CORRUPT_FAIL + 1},
        {"shuffle", "global|shards", CHUTE_SHUFFLE_SHARDS + 1},
    };
    const ch_opt_row *x = ch_loader_xopts();
    int seen = 0;
    for (int i = 0; i < ch_loader_xopt_count(); i++) {
        if (x[i].kind != CH_OPT_ENUM)
            continue;
        seen++;
        int w = -1;
        for (int k = 0; k < (int)(sizeof want / sizeof want[0]); k++)
            if (!strcmp(want[k].name, x[i].name))
                w = k;
        CHECK(w >= 0, "enum row %s not expected", x[i].name);
        CHECK(!strcmp(x[i].choices, want[w].choices), "%s: %s", x[i].name, x[i].choices);
        for (int v = 0; v <= want[w].count; v++) {
            chute_loader_options in = {0}, o;
            chute_error err = {0};
            memcpy((char *)&in + x[i].offset, &v, sizeof v);
            int rc = ch_loader_options_resolve(&in, &o, &err);
            if (v < want[w].count) {
                CHECK(rc == CHUTE_OK, "%s = %d: %s", x[i].name, v, err.message);
                char b[64];
                CHECK(ch_opt_choice(&x[i], v, b, sizeof b) == 0 &&
                          ch_opt_choice_find(&x[i], b) == v, "%s %d", x[i].name, v);
            } else {
                CHECK(rc == CHUTE_EINVAL && strstr(err.message, x[i].name) &&
                          strstr(err.message, want[w].choices), "%s = %d: %s", x[i].name, v,
                      err.message);
            }
        }
        CHECK(ch_opt_choice_find(&x[i], "bogus") == -1, "%s", x[i].name);
    }
    CHECK(seen == (int)(sizeof want / sizeof want[0]), "%d enum rows", seen);
    return 0;
}

/* Float rows: all zero takes chute.h's documented default; a value out of
 * range or not finite is CHUTE_EINVAL naming the option. */
TEST(float_rows_bounded)
{
    chute_loader_options in = {0}, o;
    chute_error err = {0};
    CHECK_OK(ch_loader_options_resolve(&in, &o, &err));
    CHECK(o.mean[0] == 0.485f && o.mean[1] == 0.456f && o.mean[2] == 0.406f, "mean %g",
          (double)o.mean[0]);
    CHECK(o.std[0] == 0.229f && o.std[1] == 0.224f && o.std[2] == 0.225f, "std %g",
          (double)o.std[0]);
    CHECK(o.crop_pct == 0.875f, "crop_pct %g", (double)o.crop_pct);
    in.crop_pct = 1.5f;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "crop_pct"), "%s", err.message);
    in = (chute_loader_options){0};
    in.crop_pct = 1.0f;
    CHECK_OK(ch_loader_options_resolve(&in, &o, &err));
    in = (chute_loader_options){0};
    in.std[1] = 1;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "std[0]"), "%s", err.message);
    in = (chute_loader_options){0};
    in.mean[2] = NAN;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "mean[2]"), "%s", err.message);
    return 0;
}

/* The dataset table: a bad kind, read_delay_us past its bound or an
 * inject_fail_status that is no error is refused naming the option, by
 * the check and by chute_dataset_open_ex before the path is looked at. */
TEST(dataset_rows_checked)
{
    chute_dataset_options d = {0};
    chute_error err = {0};
    CHECK_OK(ch_dataset_options_check(&d, &err));
    d.label_offset = -1;
    d.read_delay_us = 10000000;
    CHECK_OK(ch_dataset_options_check(&d, &err));
    d.kind = (chute_source_kind)3;
    CHECK(ch_dataset_options_check(&d, &err) == CHUTE_EINVAL && strstr(err.message, "kind") &&
              strstr(err.message, "auto|tree|shards"), "%s", err.message);
    chute_dataset *ds = NULL;
    CHECK(chute_dataset_open_ex("/nonexistent/chute-opt", &d, &ds, &err) == CHUTE_EINVAL &&
              strstr(err.message, "kind") && !ds, "%s", err.message);
    d.kind = CHUTE_SOURCE_AUTO;
    d.read_delay_us = 10000001;
    CHECK(ch_dataset_options_check(&d, &err) == CHUTE_EINVAL &&
              strstr(err.message, "read_delay_us"), "%s", err.message);
    d.read_delay_us = 0;
    d.inject_fail_status = 1;
    CHECK(ch_dataset_options_check(&d, &err) == CHUTE_EINVAL &&
              strstr(err.message, "inject_fail_status"), "%s", err.message);
    return 0;
}

UNIT_MAIN
