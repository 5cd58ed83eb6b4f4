/*
 * test_csv.c — the CSV parser (src/format/csv.c) and the "csv" format
 * (issue #12), in C so the sanitizer builds run them.
 *
 * Splitting cases are compared with what Python's csv.reader returns for
 * the same bytes (written next to each case); the format's values with
 * tests/fixtures/csv/expected.txt, which tests/fixtures/make_csv.py writes
 * from what pandas reads back from files Python's csv module wrote.
 */
#define _GNU_SOURCE
#include "unit.h"

#include "chute.h"
#include "format/csv.h"

#ifndef CHUTE_FIXTURES
#error "CHUTE_FIXTURES must name tests/fixtures"
#endif

/* `rec` split must give the cells `want` ("|"-separated), or fail. */
static int split_is(const char *rec, const char *want)
{
    char buf[256];
    size_t len = strlen(rec);
    memcpy(buf, rec, len + 1);
    ch_csv_cell c[16];
    size_t n = 0;
    const char *why = NULL;
    int rc = ch_csv_split(buf, len, c, 16, &n, &why);
    if (!want) {
        CHECK(rc != 0 && why, "\"%s\" was accepted", rec);
        return 0;
    }
    CHECK(rc == 0, "\"%s\": %s", rec, why);
    char got[256] = "";
    size_t g = 0;
    for (size_t k = 0; k < n; k++)
        g += (size_t)snprintf(got + g, sizeof got - g, "%s%.*s", k ? "|" : "", (int)c[k].n, c[k].p);
    CHECK(!strcmp(got, want), "\"%s\": got \"%s\", want \"%s\"", rec, got, want);
    return 0;
}

TEST(split_matches_python_csv_reader)
{
    CHECK_OK(split_is("a,b,c", "a|b|c"));              /* ['a', 'b', 'c'] */
    CHECK_OK(split_is("a,b,c\r", "a|b|c"));            /* CRLF */
    CHECK_OK(split_is("\"a,b\",c", "a,b|c"));          /* ['a,b', 'c'] */
    CHECK_OK(split_is("\"say \"\"hi\"\"\",", "say \"hi\"|")); /* ['say "hi"', ''] */
    CHECK_OK(split_is("\"two\nlines\",x", "two\nlines|x"));
    CHECK_OK(split_is(",,", "||"));                     /* ['', '', ''] */
    CHECK_OK(split_is("a\"b,c", "a\"b|c"));            /* a quote inside a cell is a char */
    CHECK_OK(split_is("\"\"", ""));                     /* [''] */
    CHECK_OK(split_is("\"open,x", NULL));               /* unterminated quote */
    CHECK_OK(split_is("\"ab\"c,d", NULL));              /* text after a closing quote */
    return 0;
}

TEST(scan_resumes_across_chunks)
{
    const char *s = "a,\"x\ny\"\r\nb,c\n\"\"\"\",d";
    size_t len = strlen(s);
    for (size_t cut = 0; cut <= len; cut++) {
        size_t pos = 0, ends[4], ne = 0;
        int inq = 0;
        uint64_t lines = 0;
        for (;;) {
            int f = pos < cut ? ch_csv_scan((const uint8_t *)s, cut, &pos, &inq, &lines) : 0;
            if (!f)
                f = ch_csv_scan((const uint8_t *)s, len, &pos, &inq, &lines);
            if (!f)
                break;
            ends[ne++] = pos++;
        }
        CHECK(ne == 2 && ends[0] == 8 && ends[1] == 12 && lines == 3 && !inq,
              "cut %zu: %zu ends", cut, ne);
    }
    return 0;
}

TEST(converters)
{
    locale_t loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    int64_t v;
    float f;
    CHECK(!ch_csv_int64(" -9223372036854775808 ", 22, &v) && v == INT64_MIN, "min");
    CHECK(ch_csv_int64("9223372036854775808", 19, &v), "overflow accepted");
    CHECK(ch_csv_int64("1.0", 3, &v) && ch_csv_int64("", 0, &v) && ch_csv_int64("-", 1, &v),
          "junk accepted");
    CHECK(!ch_csv_float32("0.1", 3, loc, &f) && f == 0.1f, "0.1");
    CHECK(ch_csv_float32("1,5", 3, loc, &f) && ch_csv_float32("0x10", 4, loc, &f) &&
              ch_csv_float32("2.5x", 4, loc, &f),
          "junk accepted");
    freelocale(loc);
    return 0;
}

static int open_csv(const char *sub, const char *schema, chute_dataset **ds, chute_error *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/csv/%s", CHUTE_FIXTURES, sub);
    chute_dataset_options o = {0};
    o.schema = schema;
    o.label_key = "label";
    return chute_dataset_open_ex(path, &o, ds, e);
}

#define SCHEMA "id:int64,x:float32=-1.5,name:category=none"

/* expected.txt's value for (dataset, index, field), as text. */
static int expected(const char *dsn, uint64_t idx, const char *field, char *out, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/csv/expected.txt", CHUTE_FIXTURES);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512], d[16], fl[16], val[128];
    unsigned long long i;
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "%15s %llu %15s %127s", d, &i, fl, val) == 4 && !strcmp(d, dsn) &&
            i == idx && !strcmp(fl, field)) {
            snprintf(out, n, "%s", val);
            found = 0;
        }
    fclose(f);
    return found;
}

TEST(rows_match_pandas_every_value_once)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_csv("good", SCHEMA, &ds, &e) == CHUTE_OK, "%s", e.message);
    CHECK(!chute_dataset_has_images(ds) && chute_dataset_size(ds) == 12 &&
              chute_dataset_num_fields(ds) == 3,
          "size %llu", (unsigned long long)chute_dataset_size(ds));
    chute_loader_options o = {0};
    o.batch_size = 5;
    o.workers = 2;
    o.seed = 11;
    o.fields = "name,x,id";
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_loader_start_epoch(ld, 0, 0) == CHUTE_OK, "start");
    int seen[12] = {0}, nvals = 0;
    chute_batch *b = NULL;
    int rc;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_field_view id, x, name;
        chute_batch_view_get(b, &v);
        CHECK(chute_batch_field(b, "id", &id) == CHUTE_OK &&
                  chute_batch_field(b, "x", &x) == CHUTE_OK &&
                  chute_batch_field(b, "name", &name) == CHUTE_OK && id.ndim == 1,
              "fields");
        for (uint32_t k = 0; k < v.count; k++) {
            uint64_t i = v.indices[k];
            char want[128];
            seen[i]++;
            CHECK(!expected("good", i, "label", want, sizeof want) && v.labels[k] == atoll(want),
                  "%llu label %lld want %s", (unsigned long long)i, (long long)v.labels[k], want);
            CHECK(!expected("good", i, "id", want, sizeof want) &&
                      ((int64_t *)id.data)[k] == atoll(want),
                  "%llu id", (unsigned long long)i);
            CHECK(!expected("good", i, "name", want, sizeof want) &&
                      ((int64_t *)name.data)[k] == atoll(want),
                  "%llu name %lld want %s", (unsigned long long)i,
                  (long long)((int64_t *)name.data)[k], want);
            CHECK(!expected("good", i, "x", want, sizeof want), "x");
            char hex[16];
            const uint8_t *p = (const uint8_t *)x.data + 4 * k;
            snprintf(hex, sizeof hex, "%02x%02x%02x%02x", p[0], p[1], p[2], p[3]);
            CHECK(!strcmp(hex, want), "%llu x %s want %s", (unsigned long long)i, hex, want);
            nvals += 4;
        }
        chute_batch_release(b);
    }
    CHECK(rc == CHUTE_END, "next %d: %s", rc, chute_loader_errmsg(ld));
    for (int i = 0; i < 12; i++)
        CHECK(seen[i] == 1, "row %d seen %d times", i, seen[i]);
    CHECK(nvals == 48, "%d values", nvals);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(malformed_rows_fail_with_file_line_or_are_skipped)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_csv("bad", SCHEMA, &ds, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_dataset_size(ds) == 5, "%llu rows", (unsigned long long)chute_dataset_size(ds));
    static const char *want[] = {NULL, "bad.csv:3: 3 cells, the rows have 4",
                                 "bad.csv:4: column x: \"abc\" is not a float32", NULL,
                                 "bad.csv:6: unterminated quote"};
    for (int i = 0; i < 5; i++) { /* strict: batch i (one row each) fails naming file:line */
        chute_loader_options o = {0};
        o.batch_size = 1;
        o.workers = 1;
        o.no_shuffle = 1;
        o.fields = "x";
        o.on_corrupt = CHUTE_CORRUPT_FAIL;
        chute_loader *ld = NULL;
        CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
        CHECK(chute_loader_start_epoch(ld, 0, (uint64_t)i) == CHUTE_OK, "start");
        chute_batch *b = NULL;
        int rc = chute_loader_next(ld, &b);
        if (want[i])
            CHECK(rc == CHUTE_ECORRUPT && strstr(chute_loader_errmsg(ld), want[i]), "row %d: %d %s",
                  i, rc, chute_loader_errmsg(ld));
        else
            CHECK(rc == CHUTE_OK, "row %d: %s", i, chute_loader_errmsg(ld));
        if (rc == CHUTE_OK)
            chute_batch_release(b);
        chute_loader_destroy(ld);
    }
    /* SKIP: the three are counted, only good rows come out */
    chute_loader_options o = {0};
    o.batch_size = 5;
    o.workers = 2;
    o.no_shuffle = 1;
    o.fields = "x";
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_loader_start_epoch(ld, 0, 0) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "%s", chute_loader_errmsg(ld));
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    for (uint32_t k = 0; k < v.count; k++)
        CHECK(v.indices[k] == 0 || v.indices[k] == 3, "bad row %llu delivered",
              (unsigned long long)v.indices[k]);
    chute_batch_release(b);
    chute_stats st;
    chute_loader_stats(ld, &st);
    CHECK(st.corrupt >= 3, "%llu corrupt", (unsigned long long)st.corrupt);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    /* A schema column the header lacks fails the open naming it. */
    CHECK(open_csv("good", "id:int64,nope:float32", &ds, &e) == CHUTE_EFORMAT &&
              strstr(e.message, "part-0.csv:1") && strstr(e.message, "\"nope\""),
          "%s", e.message);
    return 0;
}

UNIT_MAIN
