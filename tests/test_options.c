/*
 * test_options.c — ch_loader_options_resolve, the one place the loader's
 * option table (src/common/loader_options.def) becomes defaults and
 * bounds: zero fields take the defaults chute.h documents, every value
 * past a bound is refused with a message naming the option, every bound
 * itself is accepted, and the checks that span options still hold.  The
 * same for the inference session's table (src/common/infer_options.def,
 * ch_infer_options_resolve): chute.h's documented defaults, its own rows'
 * bounds, and its shared rows being the loader's rows.
 */
#include "unit.h"

#include "common/common.h"
#include "common/loader_options.h"
#include "common/remote_options.h"

#include <stdlib.h>

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
    CHECK(o.readahead == 64, "readahead %u: on by default, 64 samples (issue 22.1)", o.readahead);
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

/* readahead: 0 is the default (64), CHUTE_READAHEAD_OFF is off, and the
 * CLI's and Python's 0 arrive as CHUTE_READAHEAD_OFF (tests/test_cli.py,
 * tests/python/test_loader_options.py). */
TEST(readahead_off_is_all_ones)
{
    chute_loader_options in = {0}, o;
    chute_error err = {0};
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_OK && o.readahead == 64,
          "zero: %u", o.readahead);
    in.readahead = CHUTE_READAHEAD_OFF;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_OK, "off: %s", err.message);
    CHECK(o.readahead == 0, "off resolves to %u", o.readahead);
    in.readahead = 4096;
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_OK && o.readahead == 4096, "max");
    in.readahead = CHUTE_READAHEAD_OFF - 1; /* not off: out of range */
    CHECK(ch_loader_options_resolve(&in, &o, &err) == CHUTE_EINVAL &&
              strstr(err.message, "readahead"), "all ones - 1: %s", err.message);
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

/* ---- the inference session's table (infer_options.def) ---- */

/* Zero options resolve to what include/chute.h promises for
 * chute_infer_options (literals from its comments), and the shared fields
 * to the loader's defaults. */
TEST(infer_zero_means_documented_default)
{
    chute_infer_options o;
    chute_loader_options lo;
    chute_error err = {0};
    CHECK(ch_infer_options_resolve(NULL, &o, &lo, &err) == CHUTE_OK, "%s", err.message);
    CHECK(o.max_batch == 8 && o.max_delay_us == 1000 && o.queue_capacity == 64,
          "max_batch %u max_delay_us %u queue_capacity %u", o.max_batch, o.max_delay_us,
          o.queue_capacity);
    CHECK(o.worker_slice_us == 0 && o.unordered == 0 && o.pretouch == 0, "slice %u",
          o.worker_slice_us);
    CHECK(o.transform == CHUTE_TRANSFORM_EVAL, "transform %d: 0 (TRAIN) is EVAL",
          (int)o.transform);
    CHECK(o.size == 224 && o.dtype == CHUTE_DTYPE_FLOAT32 && o.layout == CHUTE_LAYOUT_NCHW,
          "size %u dtype %d layout %d", o.size, (int)o.dtype, (int)o.layout);
    CHECK(o.max_pixels == CHUTE_DEFAULT_MAX_PIXELS &&
              o.max_sample_bytes == CHUTE_DEFAULT_MAX_SAMPLE_BYTES, "limits");
    CHECK(o.resize_size == 256 && o.crop_pct == 0.875f && o.mean[0] == 0.485f &&
              o.std[2] == 0.225f, "eval resize %u crop %g", o.resize_size, (double)o.crop_pct);
    CHECK(o.workers == chute_default_workers(NULL, 0), "workers %u", o.workers);
    CHECK(lo.batch_size == 8 && lo.transform == CHUTE_TRANSFORM_EVAL && lo.size == 224,
          "loader options batch %u", lo.batch_size);
    /* The computed queue: max(4 x max_batch, 64). */
    static const uint32_t batch[] = {1, 16, 17, 32, 1024}, want[] = {64, 64, 68, 128, 4096};
    for (int i = 0; i < 5; i++) {
        chute_infer_options in = {0};
        in.max_batch = batch[i];
        CHECK_OK(ch_infer_options_resolve(&in, &o, NULL, &err));
        CHECK(o.queue_capacity == want[i], "max_batch %u: queue %u, want %u", batch[i],
              o.queue_capacity, want[i]);
        in.queue_capacity = 3; /* given: kept */
        CHECK_OK(ch_infer_options_resolve(&in, &o, NULL, &err));
        CHECK(o.queue_capacity == 3, "given queue %u", o.queue_capacity);
    }
    return 0;
}

/* Every row has a name; each shared row is the loader table's row for
 * the same field (same kind, default, bounds, help), at the session's
 * offset; the session's own rows are the ones chute.h gives it. */
TEST(infer_rows_shared_are_the_loader_rows)
{
    const ch_opt_row *t = ch_infer_opts();
    const ch_loader_opt *l = ch_loader_opts();
    const ch_opt_row *x = ch_loader_xopts();
    int shared = 0, own = 0;
    for (int i = 0; i < ch_infer_opt_count(); i++) {
        CHECK(t[i].name && t[i].field && t[i].help, "row %d has no name", i);
        if (!t[i].from_loader) {
            own++;
            continue;
        }
        shared++;
        int found = 0;
        for (int k = 0; k < CH_LOPT_COUNT; k++)
            if (l[k].offset == t[i].loader_offset) {
                found = 1;
                CHECK(t[i].kind == l[k].kind && t[i].def == l[k].def && t[i].min == l[k].min &&
                          t[i].max == l[k].max && t[i].help == l[k].help &&
                          !strcmp(t[i].name, l[k].name),
                      "%s differs from the loader's row", t[i].name);
            }
        for (int k = 0; k < ch_loader_xopt_count(); k++)
            if (x[k].offset == t[i].loader_offset) {
                found = 1;
                CHECK(t[i].kind == x[k].kind && t[i].n == x[k].n && t[i].help == x[k].help &&
                          !strcmp(t[i].name, x[k].name) &&
                          (!x[k].choices || !strcmp(t[i].choices, x[k].choices)) &&
                          !memcmp(t[i].fdef, x[k].fdef, sizeof x[k].fdef),
                      "%s differs from the loader's row", t[i].name);
            }
        CHECK(found, "%s: no loader row at offset %zu", t[i].field, t[i].loader_offset);
        CHECK(!strcmp(t[i].field, t[i].name) || !strncmp(t[i].field, "no_", 3),
              "%s / %s", t[i].name, t[i].field);
    }
    /* chute.h: max_batch, max_delay_us, unordered, queue_capacity, pretouch,
     * worker_slice_us and the transform are the session's own. */
    CHECK(own == 7, "%d own rows", own);
    CHECK(shared == 13, "%d shared rows", shared);
    return 0;
}

static const ch_opt_row *infer_row(const char *name)
{
    const ch_opt_row *t = ch_infer_opts();
    for (int i = 0; i < ch_infer_opt_count(); i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

/* The session's own integer rows: each bound accepted and kept, max + 1
 * refused naming the option; the messages tests and users rely on. */
TEST(infer_bounds_name_the_option)
{
    const ch_opt_row *t = ch_infer_opts();
    int tried = 0;
    for (int i = 0; i < ch_infer_opt_count(); i++) {
        const ch_opt_row *d = &t[i];
        if (d->from_loader || d->kind != CH_OPT_U32)
            continue;
        uint32_t ok[2] = {(uint32_t)d->min, (uint32_t)d->max}, got;
        for (int k = 0; k < 2; k++) {
            chute_infer_options in = {0}, o;
            chute_error err = {0};
            memcpy((char *)&in + d->offset, &ok[k], sizeof ok[k]);
            CHECK(ch_infer_options_resolve(&in, &o, NULL, &err) == CHUTE_OK, "%s = %u: %s",
                  d->name, ok[k], err.message);
            memcpy(&got, (char *)&o + d->offset, sizeof got);
            CHECK(got == ok[k], "%s kept", d->name);
        }
        chute_infer_options in = {0}, o;
        chute_error err = {0};
        uint32_t v = (uint32_t)d->max + 1;
        memcpy((char *)&in + d->offset, &v, sizeof v);
        CHECK(ch_infer_options_resolve(&in, &o, NULL, &err) == CHUTE_EINVAL &&
                  strstr(err.message, d->name), "%s = max + 1: %s", d->name, err.message);
        tried++;
    }
    CHECK(tried == 4, "%d own integer rows", tried);
    CHECK(ch_opt_row_size(infer_row("mean")) == sizeof(float[3]) &&
              ch_opt_row_size(infer_row("max_pixels")) == sizeof(uint64_t) &&
              ch_opt_row_size(infer_row("ordered")) == sizeof(int), "row sizes");
    /* Literals: chute.h's bounds and the messages as before the table. */
    static const struct {
        const char *name;
        uint32_t v;
        const char *msg;
    } bad[] = {
        {"max_batch", 1025, "max_batch 1025 is out of range (1..1024)"},
        {"max_delay_us", 10000001, "max_delay_us 10000001 is out of range (1..10000000)"},
        {"queue_capacity", 65537, "queue_capacity 65537 is out of range (1..65536)"},
        {"worker_slice_us", 99, "worker_slice_us 99 is out of range (0, or 100..100000)"},
        {"worker_slice_us", 100001, "worker_slice_us 100001 is out of range (0, or 100..100000)"},
        {"transform", 3, "transform 3 is not one of eval|none"},
        {"size", 8193, "size"},
        {"workers", 1025, "workers"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const ch_opt_row *d = infer_row(bad[k].name);
        CHECK(d != NULL, "no row %s", bad[k].name);
        if (!d)
            continue;
        chute_infer_options in = {0}, o;
        chute_error err = {0};
        memcpy((char *)&in + d->offset, &bad[k].v, sizeof bad[k].v);
        CHECK(ch_infer_options_resolve(&in, &o, NULL, &err) == CHUTE_EINVAL &&
                  strstr(err.message, bad[k].msg), "%s = %u: '%s'", bad[k].name, bad[k].v,
              err.message);
        /* chute_infer_create refuses it the same way, before any thread. */
        chute_infer *s = NULL;
        chute_error e2 = {0};
        CHECK(chute_infer_create(&in, &s, &e2) == CHUTE_EINVAL && !s &&
                  !strcmp(e2.message, err.message), "create: '%s'", e2.message);
    }
    chute_infer_options in = {0}, o;
    chute_error err = {0};
    in.transform = CHUTE_TRANSFORM_NONE;
    in.worker_slice_us = 100;
    CHECK_OK(ch_infer_options_resolve(&in, &o, NULL, &err));
    CHECK(o.transform == CHUTE_TRANSFORM_NONE && o.worker_slice_us == 100, "kept");
    in.crop_pct = 0.9f;
    in.resize_size = 300; /* a cross-option check of the loader's, through its resolve */
    CHECK(ch_infer_options_resolve(&in, &o, NULL, &err) == CHUTE_EINVAL &&
              strstr(err.message, "crop_pct or resize_size"), "%s", err.message);
    return 0;
}

UNIT_MAIN

/* The S3/HTTP settings' table (remote_options.def) gives what the
 * sources read before it existed: the defaults docs/REMOTE.md listed
 * (10, 60000, 100, 5000, 5000, 30, 512 KiB, 16 MiB), a value over the old
 * maximum or not a number is the default, and the two floors (a 16 KiB
 * receive buffer, S3's 5 MiB part) still apply. */
TEST(remote_settings_defaults_and_bounds)
{
    static const struct {
        ch_remote_opt_id k;
        const char *env;
        uint64_t def, max, floor;
    } want[] = {
        {CH_RENV_RETRIES, "CHUTE_REMOTE_RETRIES", 10, 1000, 0},
        {CH_RENV_RETRY_TOTAL_MS, "CHUTE_REMOTE_RETRY_TOTAL_MS", 60000, 86400000, 0},
        {CH_RENV_BACKOFF_MS, "CHUTE_REMOTE_BACKOFF_MS", 100, 60000, 0},
        {CH_RENV_BACKOFF_CAP_MS, "CHUTE_REMOTE_BACKOFF_CAP_MS", 5000, 600000, 0},
        {CH_RENV_CONNECT_TIMEOUT_MS, "CHUTE_REMOTE_CONNECT_TIMEOUT_MS", 5000, 600000, 0},
        {CH_RENV_STALL_S, "CHUTE_REMOTE_STALL_S", 30, 3600, 0},
        {CH_RENV_RECV_BUFFER_KB, "CHUTE_REMOTE_RECV_BUFFER_KB", 512, 10240, 16},
        {CH_RENV_PART_MB, "CHUTE_REMOTE_PART_MB", 16, 5120, 5},
    };
    CHECK(sizeof want / sizeof *want == CH_RENV_COUNT, "%d rows", (int)CH_RENV_COUNT);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const ch_remote_opt *d = &ch_remote_opts()[want[i].k];
        char v[32];
        CHECK(strcmp(d->env, want[i].env) == 0, "row %zu is %s", i, d->env);
        unsetenv(want[i].env);
        CHECK(ch_remote_opt_value(want[i].k) == want[i].def, "%s unset", want[i].env);
        setenv(want[i].env, "", 1);
        CHECK(ch_remote_opt_value(want[i].k) == want[i].def, "%s empty", want[i].env);
        setenv(want[i].env, "12x", 1);
        CHECK(ch_remote_opt_value(want[i].k) == want[i].def, "%s=12x", want[i].env);
        snprintf(v, sizeof v, "%llu", (unsigned long long)want[i].max);
        setenv(want[i].env, v, 1);
        CHECK(ch_remote_opt_value(want[i].k) == want[i].max, "%s=max", want[i].env);
        snprintf(v, sizeof v, "%llu", (unsigned long long)want[i].max + 1);
        setenv(want[i].env, v, 1);
        CHECK(ch_remote_opt_value(want[i].k) == want[i].def, "%s=max+1", want[i].env);
        setenv(want[i].env, "0", 1);
        CHECK(ch_remote_opt_value(want[i].k) == want[i].floor, "%s=0", want[i].env);
        unsetenv(want[i].env);
    }
    return 0;
}

/* chute_pack refuses more validating threads than `chute pack --threads`
 * takes (1..256), naming the option, before it touches any path (before:
 * it clamped 300 to 256 and went on). */
TEST(pack_threads_over_the_bound_refused)
{
    chute_pack_options o;
    memset(&o, 0, sizeof o);
    o.threads = 257;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc = chute_pack("/nonexistent/chute-pack-root", "/nonexistent/chute-pack-out", &o, NULL,
                        &err);
    CHECK(rc == CHUTE_EINVAL, "rc %d: %s", rc, err.message);
    CHECK(strstr(err.message, "threads 257") && strstr(err.message, "1..256"), "%s", err.message);
    return 0;
}
