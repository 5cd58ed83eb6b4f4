/*
 * test_arrow.c — chute_dataset_open_arrow (src/format/fmt_arrow.c) with
 * Arrow arrays built by hand (tests/arrow_build.h), in C so the sanitizer
 * builds run it: values of every column kind out of two batches (one
 * sliced), ownership (every schema, array and the stream released exactly
 * once, on success and on each failure), and producers that lie —
 * offsets going backwards or negative, children shorter than their
 * parent, wrong buffer or child counts, null counts without a bitmap,
 * huge offsets, a failing get_next, a null label — each a clear error
 * naming the column and batch, never a crash (ASan) or a leak (LSan).
 * The values pyarrow writes are checked in tests/python/test_arrow.py.
 */
#define _GNU_SOURCE
#include "unit.h"
#include "arrow_build.h"

#include "chute.h"
#include "format/format.h"

#include <pthread.h>

enum { LIE_NONE, LIE_OFFSETS_BACK, LIE_NEG_OFFSET, LIE_FSL_SHORT, LIE_NBUF, LIE_NULLS_NO_BITMAP,
       LIE_CHILD_SHORT, LIE_NCHILD, LIE_NEG_LEN, LIE_HUGE_OFFSET, LIE_NULL_LABEL, LIE_GET_NEXT,
       LIE_BAD_FSL_FORMAT };

/* One batch of 4 rows: label, x (int32, row 2 null), b (binary), v
 * (fixed_size_list<float32>[2]).  base shifts the values per batch. */
static struct ArrowArray batch(int base, int64_t top_len, int64_t top_off, int lie, int last)
{
    int64_t label[4] = {base, base + 1, base + 2, base + 3};
    int32_t x[4] = {10 * base, 10 * base + 1, -7, 10 * base + 3};
    uint8_t xvalid = 0x0b; /* rows 0, 1, 3 */
    int32_t off[5] = {0, 3, 3, 5, 9};
    if (lie == LIE_OFFSETS_BACK && last)
        off[2] = 1, off[3] = 0;
    if (lie == LIE_NEG_OFFSET && last)
        off[0] = -4;
    const char data[] = "abcdefghi";
    float v[8];
    for (int k = 0; k < 8; k++)
        v[k] = (float)base + (float)k * 0.25f;
    uint8_t lvalid = 0x0d; /* row 1 null */
    struct ArrowArray *cl = ab_heap_array(ab_array(4, 0, lie == LIE_NULL_LABEL && last, 2, 0,
                                                   lie == LIE_NULL_LABEL && last ? &lvalid : NULL,
                                                   (size_t)1, label, sizeof label));
    int64_t xlen = lie == LIE_CHILD_SHORT && last ? 3 : 4;
    int64_t xoff = lie == LIE_HUGE_OFFSET && last ? (int64_t)1 << 62 : 0;
    struct ArrowArray *cx;
    if (lie == LIE_NBUF && last)
        cx = ab_heap_array(ab_array(xlen, xoff, 1, 1, 0, &xvalid, (size_t)1));
    else
        cx = ab_heap_array(ab_array(xlen, xoff, 1, 2, 0,
                                    lie == LIE_NULLS_NO_BITMAP && last ? NULL : &xvalid,
                                    (size_t)1, x, sizeof x));
    struct ArrowArray *cb = ab_heap_array(ab_array(4, 0, 0, 3, 0, NULL, (size_t)0, off,
                                                   sizeof off, data, sizeof data - 1));
    struct ArrowArray *leaf = ab_heap_array(
        ab_array(lie == LIE_FSL_SHORT && last ? 7 : 8, 0, 0, 2, 0, NULL, (size_t)0, v, sizeof v));
    struct ArrowArray *cv = ab_heap_array(ab_array(4, 0, 0, 1, 1, NULL, (size_t)0, leaf));
    if (lie == LIE_NCHILD && last) {
        cv->release(cv);
        free(cv);
        return ab_array(top_len, top_off, 0, 1, 3, NULL, (size_t)0, cl, cx, cb);
    }
    return ab_array(lie == LIE_NEG_LEN && last ? -1 : top_len, top_off, 0, 1, 4, NULL,
                    (size_t)0, cl, cx, cb, cv);
}

static struct ArrowArrayStream stream(int lie)
{
    struct ArrowSchema *kids[4] = {
        ab_heap_schema(ab_schema("l", "label", 0)), ab_heap_schema(ab_schema("i", "x", 0)),
        ab_heap_schema(ab_schema("z", "b", 0)),
        ab_heap_schema(ab_schema(lie == LIE_BAD_FSL_FORMAT ? "+w:99999999999999999999" : "+w:2",
                                 "v", 1, ab_heap_schema(ab_schema("f", "item", 0))))};
    struct ArrowSchema s = ab_schema("+s", "", 4, kids[0], kids[1], kids[2], kids[3]);
    struct ArrowArray b[2] = {batch(0, 4, 0, lie, 0), batch(100, 3, 1, lie, 1)};
    struct ArrowArrayStream st = ab_stream_of(s, 2, b);
    if (lie == LIE_GET_NEXT)
        ((ab_stream *)st.private_data)->fail_at = 1;
    return st;
}

static int expect_open_fails(int lie, int code, const char *needle)
{
    struct ArrowArrayStream st = stream(lie);
    chute_dataset *ds = (chute_dataset *)1;
    chute_error err = {0};
    int rc = chute_dataset_open_arrow(&st, NULL, &ds, &err);
    CHECK(rc == code, "lie %d: rc %s, want %s (%s)", lie, chute_status_name(rc),
          chute_status_name(code), err.message);
    CHECK(ds == NULL, "lie %d: out_ds set on failure", lie);
    CHECK(strstr(err.message, needle), "lie %d: \"%s\" lacks \"%s\"", lie, err.message, needle);
    CHECK(st.release == NULL, "lie %d: the stream was not released", lie);
    CHECK(ab_live == 0, "lie %d: %ld schemas/arrays never released", lie, ab_live);
    return 0;
}

TEST(values_and_ownership)
{
    struct ArrowArrayStream st = stream(LIE_NONE);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    chute_dataset_options o = {0};
    o.label_offset = 1;
    CHECK(chute_dataset_open_arrow(&st, &o, &ds, &err) == CHUTE_OK, "%s", err.message);
    CHECK(st.release == NULL && ab_live > 0, "stream not released or batches not kept");
    CHECK(chute_dataset_size(ds) == 7, "%llu rows", (unsigned long long)chute_dataset_size(ds));
    CHECK(!chute_dataset_has_images(ds), "no image column, yet images");
    CHECK(!strcmp(chute_dataset_format_name(ds), "arrow"), "format");
    CHECK(chute_dataset_num_fields(ds) == 3, "%u fields", chute_dataset_num_fields(ds));
    chute_field_info fi;
    CHECK(chute_dataset_field_info(ds, 2, &fi) == CHUTE_OK && !strcmp(fi.name, "v") &&
              fi.kind == CHUTE_FIELD_TENSOR && fi.dtype == CHUTE_DTYPE_FLOAT32 && fi.ndim == 1 &&
              fi.shape[0] == 2, "field v");
    /* sample 4..6 are batch 1 rows 0..2, physical rows 1..3 (offset 1) */
    static const int64_t want_label[7] = {1, 2, 3, 4, 102, 103, 104};
    static const char *want_b[7] = {"abc", "", "de", "fghi", "", "de", "fghi"};
    ch_buf scratch = {0};
    for (uint64_t i = 0; i < 7; i++) {
        CHECK(chute_dataset_label(ds, i) == want_label[i], "label %llu", (unsigned long long)i);
        int64_t x = 0, blen = -1;
        float v[2];
        uint8_t b[16];
        ch_field_req req[3] = {{0, &x, 0, NULL}, {1, b, sizeof b, &blen}, {2, v, 0, NULL}};
        int rc = ds->fmt->read_fields(ds, i, req, 3, &scratch, 1 << 20, &err);
        int phys = i < 4 ? (int)i : (int)i - 3, base = i < 4 ? 0 : 100;
        if (phys == 2) {
            CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, "column x is null") &&
                      strstr(err.message, i < 4 ? "batch 0 row 2" : "batch 1 row 1"),
                  "null x at %llu: %s", (unsigned long long)i, err.message);
            continue;
        }
        CHECK(rc == CHUTE_OK, "%llu: %s", (unsigned long long)i, err.message);
        CHECK(x == 10 * base + phys, "x[%llu] = %lld", (unsigned long long)i, (long long)x);
        CHECK(blen == (int64_t)strlen(want_b[i]) && !memcmp(b, want_b[i], (size_t)blen),
              "b[%llu]", (unsigned long long)i);
        CHECK(v[0] == (float)base + (float)(2 * phys) * 0.25f &&
                  v[1] == (float)base + (float)(2 * phys + 1) * 0.25f, "v[%llu]",
              (unsigned long long)i);
    }
    /* a bytes value over the caller's capacity is ELIMIT, not an overrun */
    int64_t blen;
    uint8_t small[2];
    ch_field_req r1 = {1, small, sizeof small, &blen};
    CHECK(ds->fmt->read_fields(ds, 3, &r1, 1, &scratch, 1 << 20, &err) == CHUTE_ELIMIT,
          "4 bytes into 2");
    size_t n;
    CHECK(chute_dataset_read(ds, 0, small, sizeof small, &n, &err) == CHUTE_EUNSUPPORTED,
          "read without an image column");
    ch_buf_free(&scratch);
    chute_dataset_close(ds);
    CHECK(ab_live == 0, "%ld nodes never released", ab_live);
    return 0;
}

TEST(lying_producers_are_refused)
{
    CHECK_OK(expect_open_fails(LIE_OFFSETS_BACK, CHUTE_ECORRUPT,
                               "column b, batch 1: offsets go backwards at element 2"));
    CHECK_OK(expect_open_fails(LIE_NEG_OFFSET, CHUTE_ECORRUPT, "column b, batch 1: a negative"));
    CHECK_OK(expect_open_fails(LIE_FSL_SHORT, CHUTE_ECORRUPT,
                               "column v, batch 1: a child array has 7 elements, its parent "
                               "indexes 8"));
    CHECK_OK(expect_open_fails(LIE_NBUF, CHUTE_ECORRUPT, "column x, batch 1: 1 buffers"));
    CHECK_OK(expect_open_fails(LIE_NULLS_NO_BITMAP, CHUTE_ECORRUPT,
                               "column x, batch 1: null_count > 0 and no validity buffer"));
    CHECK_OK(expect_open_fails(LIE_CHILD_SHORT, CHUTE_ECORRUPT,
                               "column x, batch 1: a child array has 3 elements"));
    CHECK_OK(expect_open_fails(LIE_NCHILD, CHUTE_ECORRUPT, "3 children where the type has 4"));
    CHECK_OK(expect_open_fails(LIE_NEG_LEN, CHUTE_ECORRUPT, "negative or huge length"));
    CHECK_OK(expect_open_fails(LIE_HUGE_OFFSET, CHUTE_ECORRUPT, "column x, batch 1: a negative "
                               "or huge"));
    CHECK_OK(expect_open_fails(LIE_NULL_LABEL, CHUTE_ECORRUPT, "column label is null"));
    CHECK_OK(expect_open_fails(LIE_GET_NEXT, CHUTE_EIO, "get_next failed (errno 5): the "
                               "producer says: disk on fire"));
    return 0;
}

TEST(unsupported_columns_are_left_out_or_refused)
{
    /* v's list size is not a number chute accepts: left out, as a column
     * of an unsupported type is, unless it is named as image or label. */
    struct ArrowArrayStream st = stream(LIE_BAD_FSL_FORMAT);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open_arrow(&st, NULL, &ds, &err) == CHUTE_OK, "%s", err.message);
    CHECK(chute_dataset_num_fields(ds) == 2, "%u fields", chute_dataset_num_fields(ds));
    chute_dataset_close(ds);
    st = stream(LIE_NONE);
    chute_dataset_options o = {0};
    o.image_key = "x";
    CHECK(chute_dataset_open_arrow(&st, &o, &ds, &err) == CHUTE_EUNSUPPORTED &&
              strstr(err.message, "image column x has format \"i\""), "%s", err.message);
    st = stream(LIE_NONE);
    o.image_key = NULL;
    o.label_key = "nope";
    CHECK(chute_dataset_open_arrow(&st, &o, &ds, &err) == CHUTE_ENOTFOUND &&
              strstr(err.message, "no column nope"), "%s", err.message);
    CHECK(chute_dataset_open_arrow(NULL, &o, &ds, &err) == CHUTE_EINVAL, "NULL stream");
    CHECK(ab_live == 0, "%ld nodes never released", ab_live);
    return 0;
}

/* ---- units mode (chute_dataset_open_arrow_units): larger than memory ---- */

/* ab_live is a plain counter: the producer's loads and the library's
 * releases (from any reading thread) go through this lock. */
static pthread_mutex_t units_mu = PTHREAD_MUTEX_INITIALIZER;
static long units_loads;

static void units_release_array(struct ArrowArray *a)
{
    pthread_mutex_lock(&units_mu);
    ab_array_release(a);
    pthread_mutex_unlock(&units_mu);
}

/* Unit u is batch(100 * u): 4 rows, x null in row 2; unit 5 fails. */
static int units_load(void *ctx, uint64_t u, struct ArrowArray *out, char *msg, size_t cap)
{
    (void)ctx;
    if (u == 5) {
        snprintf(msg, cap, "row group 5 is unreadable");
        return 1;
    }
    pthread_mutex_lock(&units_mu);
    *out = batch(100 * (int)u, 4, 0, LIE_NONE, 0);
    out->release = units_release_array;
    units_loads++;
    pthread_mutex_unlock(&units_mu);
    return 0;
}

enum { NUNITS = 12 };

static chute_dataset *open_units(uint32_t max_resident, const char *schema, chute_error *err)
{
    struct ArrowSchema *kids[4] = {
        ab_heap_schema(ab_schema("l", "label", 0)), ab_heap_schema(ab_schema("i", "x", 0)),
        ab_heap_schema(ab_schema("z", "b", 0)),
        ab_heap_schema(ab_schema("+w:2", "v", 1, ab_heap_schema(ab_schema("f", "item", 0))))};
    struct ArrowSchema s = ab_schema("+s", "", 4, kids[0], kids[1], kids[2], kids[3]);
    static uint64_t rows[NUNITS];
    static int64_t labels[NUNITS * 4];
    static const char *names[NUNITS];
    static char namebuf[NUNITS][32];
    for (int u = 0; u < NUNITS; u++) {
        rows[u] = 4;
        snprintf(namebuf[u], sizeof namebuf[u], "f.parquet row group %d", u);
        names[u] = namebuf[u];
        for (int r = 0; r < 4; r++)
            labels[u * 4 + r] = 100 * u + r;
    }
    chute_arrow_units src = {0};
    src.schema = &s;
    src.n_units = NUNITS;
    src.rows = rows;
    src.labels = labels;
    src.max_resident = max_resident;
    src.load = units_load;
    src.unit_names = names;
    chute_dataset_options o = {0};
    o.schema = schema;
    chute_dataset *ds = NULL;
    int rc = chute_dataset_open_arrow_units(&src, &o, &ds, err);
    if (s.release)
        return NULL; /* not moved: a bug the caller reports */
    return rc == CHUTE_OK ? ds : NULL;
}

/* Sample i's x and v, checked against what batch() built. */
static int check_row(chute_dataset *ds, uint64_t i, int with_default, chute_error *err)
{
    ch_buf scratch = {0};
    int64_t x = 0;
    float v[2];
    ch_field_req req[2] = {{0, &x, 0, NULL}, {2, v, 0, NULL}};
    int rc = ds->fmt->read_fields(ds, i, req, 2, &scratch, 1 << 20, err);
    ch_buf_free(&scratch);
    uint64_t u = i / 4;
    int phys = (int)(i % 4), base = 100 * (int)u;
    if (u == 5) {
        CHECK(rc == CHUTE_EIO && strstr(err->message, "unit 5") &&
                  strstr(err->message, "row group 5 is unreadable"), "unit 5: %s", err->message);
        return 0;
    }
    if (phys == 2 && !with_default) {
        CHECK(rc == CHUTE_ECORRUPT && strstr(err->message, "column x is null") &&
                  strstr(err->message, "f.parquet row group") && strstr(err->message, "row 2"),
              "null x at %llu: %s", (unsigned long long)i, err->message);
        return 0;
    }
    CHECK(rc == CHUTE_OK, "%llu: %s", (unsigned long long)i, err->message);
    CHECK(x == (phys == 2 ? -5 : 10 * base + phys), "x[%llu] = %lld", (unsigned long long)i,
          (long long)x);
    CHECK(v[0] == (float)base + (float)(2 * phys) * 0.25f, "v[%llu]", (unsigned long long)i);
    return 0;
}

typedef struct units_job {
    chute_dataset *ds;
    int id, failed;
} units_job;

static void *units_reader(void *arg)
{
    units_job *j = arg;
    chute_error err = {0};
    /* each thread walks the rows in its own order, so units are loaded,
     * shared, evicted and re-loaded under contention */
    for (int rep = 0; rep < 3 && !j->failed; rep++)
        for (uint64_t k = 0; k < NUNITS * 4 && !j->failed; k++) {
            uint64_t i = (k * (uint64_t)(2 * j->id + 1) + (uint64_t)rep * 7) % (NUNITS * 4);
            if (check_row(j->ds, i, 1, &err) != 0)
                j->failed = 1;
        }
    return NULL;
}

TEST(units_bounded_and_values)
{
    chute_error err = {0};
    units_loads = 0;
    chute_dataset *ds = open_units(3, "x:int64=-5", &err);
    CHECK(ds, "open: %s", err.message);
    CHECK(chute_dataset_size(ds) == NUNITS * 4, "%llu rows",
          (unsigned long long)chute_dataset_size(ds));
    CHECK(chute_dataset_label(ds, 4 * 7 + 3) == 703, "label");
    uint64_t loads;
    uint32_t peak, now;
    CHECK(chute_dataset_arrow_units_stats(ds, &loads, &peak, &now) == CHUTE_OK && loads == 0 &&
              now == 0, "nothing is loaded at open (%llu loads)", (unsigned long long)loads);
    pthread_t th[4];
    units_job jobs[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (units_job){ds, k, 0};
        CHECK(pthread_create(&th[k], NULL, units_reader, &jobs[k]) == 0, "thread");
    }
    int failed = 0;
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        failed |= jobs[k].failed;
    }
    CHECK(!failed, "a reader saw a wrong value");
    CHECK(chute_dataset_arrow_units_stats(ds, &loads, &peak, &now) == CHUTE_OK, "stats");
    CHECK(peak <= 3 && now <= 3, "%u units resident at once (bound 3)", peak);
    CHECK(loads > NUNITS - 1, "%llu loads: units were not evicted and re-loaded",
          (unsigned long long)loads);
    pthread_mutex_lock(&units_mu);
    long live_before = ab_live;
    pthread_mutex_unlock(&units_mu);
    CHECK(live_before > 0, "resident units hold arrays");
    /* describe names the producer's unit */
    char d[160];
    ds->fmt->describe(ds, 9, d, sizeof d);
    CHECK(strstr(d, "f.parquet row group 2 row 1"), "describe: %s", d);
    chute_dataset_close(ds);
    CHECK(ab_live == 0, "%ld nodes never released", ab_live);
    return 0;
}

TEST(units_null_without_default_names_unit_and_row)
{
    chute_error err = {0};
    chute_dataset *ds = open_units(1, NULL, &err);
    CHECK(ds, "open: %s", err.message);
    for (uint64_t i = 0; i < 12; i++)
        CHECK_OK(check_row(ds, i, 0, &err));
    uint32_t peak;
    CHECK(chute_dataset_arrow_units_stats(ds, NULL, &peak, NULL) == CHUTE_OK && peak == 1,
          "peak %u with max_resident 1", peak);
    chute_dataset_close(ds);
    CHECK(ab_live == 0, "%ld nodes never released", ab_live);
    return 0;
}

TEST(null_defaults_parse_and_refuse)
{
    chute_error err = {0};
    /* a default for the tensor column fills only null rows; type checked */
    CHECK(!open_units(2, "x:float32=1", &err) && strstr(err.message, "delivered as int64"),
          "%s", err.message);
    CHECK(!open_units(2, "x=abc", &err) && strstr(err.message, "not an integer"), "%s",
          err.message);
    CHECK(!open_units(2, "nope=1", &err) && strstr(err.message, "no column nope"), "%s",
          err.message);
    CHECK(!open_units(2, "x", &err) && strstr(err.message, "NAME[:TYPE]=DEFAULT"), "%s",
          err.message);
    chute_dataset *ds = open_units(2, " b:bytes=zz , v=2.5", &err);
    CHECK(ds, "%s", err.message);
    chute_dataset_close(ds);
    CHECK(ab_live == 0, "%ld nodes never released", ab_live);
    /* stream mode: the null x in batch 0 row 2 reads as the default */
    struct ArrowArrayStream st = stream(LIE_NULL_LABEL);
    chute_dataset_options o = {0};
    o.schema = "label=77,x=-5";
    CHECK(chute_dataset_open_arrow(&st, &o, &ds, &err) == CHUTE_OK, "%s", err.message);
    /* sample 4 is batch 1's physical row 1, whose label is null */
    CHECK(chute_dataset_label(ds, 4) == 77, "null label -> default, got %lld",
          (long long)chute_dataset_label(ds, 4));
    CHECK(chute_dataset_label(ds, 5) == 102, "label 5 %lld", (long long)chute_dataset_label(ds, 5));
    CHECK_OK(check_row(ds, 2, 1, &err));
    chute_dataset_close(ds);
    CHECK(ab_live == 0, "%ld nodes never released", ab_live);
    return 0;
}

UNIT_MAIN
