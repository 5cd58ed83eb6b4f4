/*
 * test_npy_format.c — the "npy" format and image-less samples (issue #12),
 * in C so the sanitizer builds run them.
 *
 * Expected values come from tests/fixtures/npy/expected.txt, written by
 * tests/fixtures/make_npy.py from what np.load reads back from files that
 * np.save and np.lib.format.open_memmap wrote, never from chute: every
 * sample is compared byte for byte (bitwise for float32, NaN included).
 */
#include "unit.h"

#include "chute.h"

#ifndef CHUTE_FIXTURES
#error "CHUTE_FIXTURES must name tests/fixtures"
#endif

static int hexbyte(const char *p)
{
    int v = 0;
    for (int k = 0; k < 2; k++) {
        char c = p[k];
        v = v * 16 + (c >= 'a' ? c - 'a' + 10 : c - '0');
    }
    return v;
}

/* Compare every value of one batch with expected.txt's lines for dataset
 * `dsn`; `what` is the field name, or "pixels" for the batch's images.
 * Counts compared values in *nvals. */
static int check_batch(chute_batch *b, const char *dsn, const char *what, int *nvals)
{
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    char path[4096];
    snprintf(path, sizeof path, "%s/npy/expected.txt", CHUTE_FIXTURES);
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot open %s", path);
    static char line[8192];
    while (fgets(line, sizeof line, f)) {
        char d[32], field[32], val[8000];
        unsigned idx;
        if (sscanf(line, "%31s %u %31s %7999s", d, &idx, field, val) != 4 || strcmp(d, dsn))
            continue;
        for (uint32_t pos = 0; pos < v.count; pos++) {
            if (v.indices[pos] != idx)
                continue;
            if (!strcmp(field, "label")) {
                CHECK(v.labels[pos] == atoll(val), "%s %u: label %lld, want %s", dsn, idx,
                      (long long)v.labels[pos], val);
                (*nvals)++;
                continue;
            }
            if (strcmp(field, what))
                continue;
            size_t n = strlen(val) / 2;
            const uint8_t *p;
            if (!strcmp(what, "pixels")) {
                CHECK(v.data && v.nbytes == (size_t)v.count * n, "image bytes %zu", v.nbytes);
                p = (const uint8_t *)v.data + pos * n;
            } else {
                chute_field_view fv;
                CHECK(chute_batch_field(b, what, &fv) == CHUTE_OK, "no field %s", what);
                CHECK(fv.nbytes == (size_t)v.count * n, "%s: %zu bytes for %u samples", what,
                      fv.nbytes, v.count);
                p = (const uint8_t *)fv.data + pos * n;
            }
            for (size_t i = 0; i < n; i++)
                CHECK(p[i] == hexbyte(val + 2 * i), "%s %u %s: byte %zu is %02x, want %.2s", dsn,
                      idx, what, i, p[i], val + 2 * i);
            (*nvals)++;
        }
    }
    fclose(f);
    return 0;
}

static int open_npy(const char *sub, chute_dataset **ds, chute_error *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/npy/%s", CHUTE_FIXTURES, sub);
    chute_dataset_options o = {0};
    return chute_dataset_open_ex(path, &o, ds, e);
}

/* One whole epoch; every sample's values checked; *seen counts deliveries
 * of each index (n of them). */
static int run_epoch(chute_dataset *ds, chute_loader_options *o, const char *dsn,
                     const char *what, int *nvals, int *seen, uint64_t n)
{
    chute_loader *ld = NULL;
    chute_error e = {0};
    CHECK(chute_loader_create(ds, o, &ld, &e) == CHUTE_OK, "create: %s", e.message);
    CHECK(chute_loader_start_epoch(ld, 1, 0) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    int rc;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        for (uint32_t k = 0; k < v.count; k++)
            if (v.indices[k] < n)
                seen[v.indices[k]]++;
        int bad = check_batch(b, dsn, what, nvals);
        chute_batch_release(b);
        if (bad) {
            chute_loader_destroy(ld);
            return 1;
        }
    }
    CHECK(rc == CHUTE_END, "next: %d %s", rc, chute_loader_errmsg(ld));
    chute_loader_destroy(ld);
    return 0;
}

TEST(single_array_tensor_field_without_images)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_npy("feat.npy", &ds, &e) == CHUTE_OK, "%s", e.message);
    CHECK(!chute_dataset_has_images(ds) && chute_dataset_size(ds) == 13, "has_images/size");
    chute_field_info fi;
    CHECK(chute_dataset_num_fields(ds) == 1 && chute_dataset_field_info(ds, 0, &fi) == CHUTE_OK,
          "fields");
    CHECK(!strcmp(fi.name, "feat") && fi.kind == CHUTE_FIELD_TENSOR &&
              fi.dtype == CHUTE_DTYPE_FLOAT32 && fi.ndim == 2 && fi.shape[0] == 2 &&
              fi.shape[1] == 3,
          "field info");
    chute_loader_options o = {0};
    o.batch_size = 4;
    o.workers = 3;
    o.seed = 7;
    o.fields = "feat";
    o.decoded_cache_bytes = 1 << 20; /* ignored: nothing to cache */
    int seen[13] = {0}, nvals = 0;
    CHECK_OK(run_epoch(ds, &o, "single", "feat", &nvals, seen, 13));
    for (int i = 0; i < 13; i++)
        CHECK(seen[i] == 1, "sample %d delivered %d times", i, seen[i]);
    CHECK(nvals == 26, "%d values compared", nvals);
    /* Without fields: labels and indices only, data NULL. */
    o.fields = NULL;
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_loader_start_epoch(ld, 0, 0) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next");
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    CHECK(v.data == NULL && v.nbytes == 0 && v.count == 4 && v.shape[0] == 4 && v.shape[1] == 0,
          "image-less view");
    chute_batch_release(b);
    chute_loader_destroy(ld);
    /* No device but the CPU for an image-less dataset. */
    o.device = "cuda";
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_EINVAL && strstr(e.message, "no image"),
          "%s", e.message);
    chute_dataset_close(ds);
    return 0;
}

TEST(uint8_nhwc_array_is_images)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    /* No labels beside it: refused unless label_key "" says so. */
    CHECK(open_npy("img/rgb.npy", &ds, &e) == CHUTE_EFORMAT && strstr(e.message, "no labels") &&
              strstr(e.message, "label.npy"),
          "%s", e.message);
    char path[4096];
    snprintf(path, sizeof path, "%s/npy/img/rgb.npy", CHUTE_FIXTURES);
    chute_dataset_options no = {0};
    no.label_key = "";
    CHECK(chute_dataset_open_ex(path, &no, &ds, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_dataset_has_images(ds) && chute_dataset_num_fields(ds) == 0, "images");
    chute_loader_options o = {0};
    o.batch_size = 3;
    o.size = 8;
    o.transform = CHUTE_TRANSFORM_NONE;
    o.dtype = CHUTE_DTYPE_UINT8;
    o.layout = CHUTE_LAYOUT_NHWC;
    o.workers = 2;
    int seen[4] = {0}, nvals = 0;
    CHECK_OK(run_epoch(ds, &o, "img", "pixels", &nvals, seen, 4));
    CHECK(nvals == 4, "%d images compared", nvals);
    chute_dataset_close(ds);
    return 0;
}

TEST(header_lying_about_shape_names_file_and_offset)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    int rc = open_npy("lie/lie.npy", &ds, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "lie.npy@0") &&
              strstr(e.message, "480 data bytes") && strstr(e.message, "312"),
          "%d %s", rc, e.message);
    return 0;
}

/* The "dir" fixture's b/s1.npy (int64[5]) refused by chute_loader_next. */
static int refused_as_varying(chute_loader *ld, int rc)
{
    const char *m = chute_loader_errmsg(ld);
    CHECK(rc == CHUTE_EINVAL && strstr(m, "b/s1.npy: field \"npy\"") &&
              strstr(m, "a .npy of int64[5], but the field is int64[4] (learned from ") &&
              strstr(m, "a/s0.npy)"),
          "%d %s", rc, m);
    return 0;
}

TEST(directory_of_npy_files_in_class_dirs)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_npy("dir", &ds, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_dataset_size(ds) == 6 && chute_dataset_num_classes(ds) == 2 &&
              !strcmp(chute_dataset_class_name(ds, 1), "b"),
          "classes");
    chute_loader_options o = {0};
    o.batch_size = 6;
    o.workers = 2;
    o.no_shuffle = 1;
    o.fields = "npy";
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_loader_start_epoch(ld, 0, 0) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    int rc = chute_loader_next(ld, &b);
    /* b/s1.npy is int64[5], the others int64[4]: a shape that varies is
     * refused naming both and the file the first came from, under FAIL
     * and SKIP alike (never replaced by other samples, never counted as
     * corrupt). */
    CHECK_OK(refused_as_varying(ld, rc));
    chute_loader_destroy(ld);
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_loader_start_epoch(ld, 0, 0) == CHUTE_OK, "start");
    rc = chute_loader_next(ld, &b);
    CHECK_OK(refused_as_varying(ld, rc));
    chute_stats st;
    chute_loader_stats(ld, &st);
    CHECK(st.corrupt == 0, "skip: %llu counted as corrupt", (unsigned long long)st.corrupt);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(directory_of_npz_files_one_field_per_member)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_npy("npzdir", &ds, &e) == CHUTE_OK, "%s", e.message);
    chute_field_info x, y;
    CHECK(chute_dataset_num_fields(ds) == 2 && chute_dataset_field_info(ds, 0, &x) == CHUTE_OK &&
              chute_dataset_field_info(ds, 1, &y) == CHUTE_OK,
          "fields");
    CHECK(!strcmp(x.name, "x") && x.dtype == CHUTE_DTYPE_FLOAT32 && x.ndim == 2 &&
              !strcmp(y.name, "y") && y.dtype == CHUTE_DTYPE_INT64 && y.ndim == 0,
          "x %s/%d/%u y %s/%d/%u", x.name, x.dtype, x.ndim, y.name, y.dtype, y.ndim);
    chute_loader_options o = {0};
    o.batch_size = 3;
    o.workers = 2;
    o.seed = 3;
    o.fields = "y,x";
    int seen[4] = {0}, nx = 0, ny = 0;
    CHECK_OK(run_epoch(ds, &o, "npz", "x", &nx, seen, 4));
    CHECK_OK(run_epoch(ds, &o, "npz", "y", &ny, seen, 4));
    for (int i = 0; i < 4; i++)
        CHECK(seen[i] == 2, "sample %d delivered %d times in 2 epochs", i, seen[i]);
    CHECK(nx == 8 && ny == 8, "%d/%d values (labels included) compared", nx, ny);
    chute_dataset_close(ds);
    return 0;
}

UNIT_MAIN
