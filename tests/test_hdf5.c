/*
 * test_hdf5.c — the hdf5 format (src/format/fmt_hdf5.c) against files that
 * h5py wrote: contiguous, chunked, chunked with gzip + shuffle and chunks
 * straddling samples, grey, and variable-length PNG bytes; pixels, labels
 * and fields compared byte for byte with what h5py reads back
 * (tests/tools/make_hdf5.py writes both, never from chute).  Damaged and
 * wrong files fail with a message naming the file and the dataset.  Each
 * test makes its own files (a few ms of h5py) so tests stay independent.
 */
#include "unit.h"

#include "chute.h"

#ifndef CHUTE_SOURCE_DIR
#error "CHUTE_SOURCE_DIR must name the source tree"
#endif
#ifndef CHUTE_PYTHON
#define CHUTE_PYTHON "/usr/bin/python3"
#endif

static int have_hdf5(void)
{
    return strstr(chute_features(), "hdf5") != NULL;
}

/* Make the files in WORK/<name>; 77 when h5py is missing. */
static int make_files(const char *name, char *dir, size_t n)
{
    unit_scratch(name, dir, n);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/tools/make_hdf5.py' '%s' >/dev/null", CHUTE_PYTHON,
             CHUTE_SOURCE_DIR, dir);
    int rc = system(cmd);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
        return UNIT_SKIP;
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0 ? 0 : -1;
}

#define SETUP(name)                                                                         \
    char dir[4096];                                                                         \
    if (!have_hdf5())                                                                       \
        SKIP("built without libhdf5");                                                      \
    {                                                                                       \
        int mk = make_files(name, dir, sizeof dir);                                         \
        if (mk == UNIT_SKIP)                                                                \
            SKIP("no h5py");                                                                \
        CHECK(mk == 0, "make_hdf5.py failed");                                              \
    }

static uint8_t *expect(const char *dir, const char *file, const char *what, size_t *n)
{
    char p[8300];
    snprintf(p, sizeof p, "%s/%s.%s.bin", dir, file, what);
    return unit_read_file(p, n);
}

static int open_h5(const char *dir, const char *file, const char *extra, chute_dataset **ds,
                   chute_error *e)
{
    char p[8300];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    chute_dataset_options o = {0};
    o.extra_keys = extra;
    return chute_dataset_open_ex(p, &o, ds, e);
}

/* Raw pixels (CHRAW records) and labels of file equal h5py's. */
static int check_raw(const char *dir, const char *file, uint32_t C)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_h5(dir, file, NULL, &ds, &e) == CHUTE_OK, "%s: %s", file, e.message);
    CHECK(!strcmp(chute_dataset_format_name(ds), "hdf5"), "format");
    size_t ni = 0, nl = 0;
    uint8_t *img = expect(dir, file, "images", &ni), *lab = expect(dir, file, "labels", &nl);
    CHECK(img && lab, "expected files");
    uint64_t n = chute_dataset_size(ds);
    CHECK(n == 7 && nl == n * 8 && ni == n * 16 * 16 * C, "%s: %llu samples", file,
          (unsigned long long)n);
    size_t row = 16 * 16 * C;
    uint8_t *buf = malloc(1 << 20);
    for (uint64_t i = 0; i < n; i++) {
        size_t len = 0;
        CHECK(chute_dataset_read(ds, i, buf, 1 << 20, &len, &e) == CHUTE_OK, "read: %s",
              e.message);
        CHECK(len == 16 + row && !memcmp(buf, "CHRAW\1", 6) && buf[6] == C, "%s %llu: header",
              file, (unsigned long long)i);
        CHECK(!memcmp(buf + 16, img + i * row, row), "%s: sample %llu pixels differ from h5py",
              file, (unsigned long long)i);
        int64_t want;
        memcpy(&want, lab + i * 8, 8);
        CHECK(chute_dataset_label(ds, i) == want, "%s %llu: label", file, (unsigned long long)i);
    }
    free(buf);
    free(img);
    free(lab);
    chute_dataset_close(ds);
    return 0;
}

/* A loader with transform none at the images' own size delivers h5py's
 * pixels, and the fields h5py's values, for every sample. */
static int check_loader(const char *dir, const char *file, const char *fields)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_h5(dir, file, fields, &ds, &e) == CHUTE_OK, "%s: %s", file, e.message);
    chute_loader_options o = {0};
    o.batch_size = 7;
    o.size = 16;
    o.transform = CHUTE_TRANSFORM_NONE;
    o.dtype = CHUTE_DTYPE_UINT8;
    o.layout = CHUTE_LAYOUT_NHWC;
    o.no_shuffle = 1;
    o.workers = 3;
    o.fields = fields;
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "create: %s", e.message);
    CHECK(chute_loader_start_epoch(ld, 0, 0) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next: %s", chute_loader_errmsg(ld));
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    CHECK(v.count == 7, "count %u", v.count);
    size_t ni = 0;
    uint8_t *img = expect(dir, file, "images", &ni);
    if (img) { /* raw pixels: the identity resize gives them back exactly */
        CHECK(!memcmp(v.data, img, ni), "%s: loader pixels differ from h5py", file);
        free(img);
    }
    char list[256];
    snprintf(list, sizeof list, "%s", fields ? fields : "");
    for (char *save = NULL, *f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
        size_t nf = 0;
        uint8_t *want = expect(dir, file, f, &nf);
        CHECK(want, "%s: no expected %s", file, f);
        chute_field_view fv;
        CHECK(chute_batch_field(b, f, &fv) == CHUTE_OK, "field %s", f);
        CHECK(fv.nbytes >= nf && !memcmp(fv.data, want, nf), "%s: field %s differs from h5py",
              file, f);
        free(want);
    }
    chute_batch_release(b);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(contiguous_matches_h5py)
{
    SETUP("contiguous");
    CHECK_OK(check_raw(dir, "contig.h5", 3));
    CHECK_OK(check_loader(dir, "contig.h5", "boxes,ids,mask"));
    return 0;
}

TEST(chunked_matches_h5py)
{
    SETUP("chunked");
    CHECK_OK(check_raw(dir, "chunked.h5", 3));
    CHECK_OK(check_loader(dir, "chunked.h5", "boxes,ids,mask"));
    return 0;
}

TEST(gzip_shuffle_straddling_chunks_match_h5py)
{
    SETUP("gzip");
    CHECK_OK(check_raw(dir, "gzip.h5", 3));
    CHECK_OK(check_loader(dir, "gzip.h5", "mask,boxes,ids"));
    CHECK_OK(check_raw(dir, "grey.h5", 1));
    CHECK_OK(check_raw(dir, "sparse.h5", 3)); /* unwritten chunks: h5py's fill value */
    return 0;
}

/* One sample per gzip chunk: inflated straight into the sample (with
 * libdeflate when built with it), one chunk stored raw under filter mask
 * 2 (deflate skipped); all equal h5py's values. */
TEST(gzip_chunk_per_sample_matches_h5py)
{
    SETUP("gzip_sample");
    CHECK_OK(check_raw(dir, "gzip_sample.h5", 3));
    CHECK_OK(check_loader(dir, "gzip_sample.h5", "mask"));
    return 0;
}

TEST(fields_listed_with_h5py_dtypes)
{
    SETUP("fields");
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_h5(dir, "gzip.h5", "boxes,ids,mask", &ds, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_dataset_num_fields(ds) == 3, "nfields");
    chute_field_info fi;
    CHECK(chute_dataset_field_info(ds, 0, &fi) == CHUTE_OK && !strcmp(fi.name, "boxes") &&
              fi.dtype == CHUTE_DTYPE_FLOAT32 && fi.ndim == 1 && fi.shape[0] == 4,
          "boxes");
    CHECK(chute_dataset_field_info(ds, 1, &fi) == CHUTE_OK && fi.dtype == CHUTE_DTYPE_INT64 &&
              fi.ndim == 0,
          "ids");
    CHECK(chute_dataset_field_info(ds, 2, &fi) == CHUTE_OK && fi.dtype == CHUTE_DTYPE_INT16 &&
              fi.ndim == 2 && fi.shape[0] == 5 && fi.shape[1] == 6,
          "mask");
    chute_dataset_close(ds);
    CHECK(open_h5(dir, "gzip.h5", "boxes,nope", &ds, &e) == CHUTE_ENOTFOUND &&
              strstr(e.message, "gzip.h5") && strstr(e.message, "\"nope\""),
          "%s", e.message);
    return 0;
}

TEST(vlen_png_bytes_match_h5py)
{
    SETUP("vlen");
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_h5(dir, "vlen.h5", NULL, &ds, &e) == CHUTE_OK, "%s", e.message);
    size_t nv = 0;
    uint8_t *want = expect(dir, "vlen.h5", "vlen", &nv), *p = want;
    CHECK(want, "expected");
    uint8_t small[64], *buf = malloc(1 << 20);
    for (uint64_t i = 0; i < chute_dataset_size(ds); i++) {
        uint32_t len;
        CHECK(p + 4 <= want + nv, "expected file short");
        memcpy(&len, p, 4);
        size_t got = 0;
        CHECK(chute_dataset_sample_size(ds, i) == len, "sample_size %llu",
              (unsigned long long)chute_dataset_sample_size(ds, i));
        /* too small a buffer: a clean "too small", no write past it */
        CHECK(chute_dataset_read(ds, i, small, sizeof small, &got, &e) != CHUTE_OK, "small");
        CHECK(chute_dataset_read(ds, i, buf, 1 << 20, &got, &e) == CHUTE_OK, "read: %s",
              e.message);
        CHECK(got == len && !memcmp(buf, p + 4, len), "sample %llu bytes differ from h5py",
              (unsigned long long)i);
        p += 4 + len;
    }
    free(buf);
    free(want);
    chute_dataset_close(ds);
    /* PNG decodes losslessly: the loader gives contig's pixels back. */
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s/contig.h5.images.bin' '%s/vlen.h5.images.bin'", dir, dir);
    CHECK(system(cmd) == 0, "cp");
    CHECK_OK(check_loader(dir, "vlen.h5", "ids"));
    return 0;
}

static int open_fails(const char *dir, const char *file, int code, const char *a, const char *b)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    int rc = open_h5(dir, file, NULL, &ds, &e);
    CHECK(rc == code && strstr(e.message, file) && strstr(e.message, a) &&
              (!b || strstr(e.message, b)),
          "%s: %s (%s), want %s with \"%s\"", file, chute_status_name(rc), e.message,
          chute_status_name(code), a);
    return 0;
}

TEST(wrong_files_fail_naming_file_and_dataset)
{
    SETUP("wrong");
    CHECK_OK(open_fails(dir, "truncated.h5", CHUTE_ECORRUPT, "truncated", NULL));
    CHECK_OK(open_fails(dir, "float_images.h5", CHUTE_EFORMAT, "\"images\"", "uint8"));
    CHECK_OK(open_fails(dir, "two_channels.h5", CHUTE_EFORMAT, "\"images\"", "C = 1, 3 or 4"));
    CHECK_OK(open_fails(dir, "few_labels.h5", CHUTE_EFORMAT, "\"labels\"", "5 labels for 7"));
    CHECK_OK(open_fails(dir, "lzf.h5", CHUTE_EUNSUPPORTED, "\"images\"", "lzf"));
    chute_dataset_options o = {0};
    o.image_key = "pixels";
    chute_dataset *ds = NULL;
    chute_error e = {0};
    char p[8300];
    snprintf(p, sizeof p, "%s/contig.h5", dir);
    CHECK(chute_dataset_open_ex(p, &o, &ds, &e) == CHUTE_ENOTFOUND &&
              strstr(e.message, "\"pixels\""),
          "%s", e.message);
    return 0;
}

TEST(damaged_chunk_is_corrupt_sample_named)
{
    SETUP("badchunk");
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_h5(dir, "badchunk.h5", NULL, &ds, &e) == CHUTE_OK, "%s", e.message);
    char p[8300];
    snprintf(p, sizeof p, "%s/badchunk.offset", dir);
    size_t n = 0;
    char *off = (char *)unit_read_file(p, &n);
    CHECK(off && n > 1, "offset");
    off[n - 1] = '\0';
    char want[200];
    snprintf(want, sizeof want, "badchunk.h5@%s: dataset \"images\", sample 4", off);
    free(off);
    uint8_t *buf = malloc(1 << 20);
    size_t len = 0;
    CHECK(chute_dataset_read(ds, 3, buf, 1 << 20, &len, &e) == CHUTE_OK, "sample 3: %s",
          e.message);
    int rc = chute_dataset_read(ds, 4, buf, 1 << 20, &len, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, want) && strstr(e.message, "deflate"),
          "%s: %s", chute_status_name(rc), e.message);
    free(buf);
    /* The loader's policy: skip it and count it. */
    chute_loader_options o = {0};
    o.batch_size = 6;
    o.size = 16;
    o.no_shuffle = 1;
    o.workers = 2;
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "create: %s", e.message);
    CHECK(chute_loader_start_epoch(ld, 0, 0) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next: %s", chute_loader_errmsg(ld));
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    for (uint32_t j = 0; j < v.count; j++)
        CHECK(v.indices[j] != 4, "bad sample delivered");
    chute_batch_release(b);
    chute_stats st;
    chute_loader_stats(ld, &st);
    CHECK(st.corrupt >= 1, "corrupt %llu", (unsigned long long)st.corrupt);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

/* Built without libhdf5: an HDF5 file is a clear CHUTE_EUNSUPPORTED. */
TEST(without_libhdf5_unsupported)
{
    if (have_hdf5())
        SKIP("built with libhdf5 (the CHUTE_WITH_HDF5=OFF build runs this)");
    char dir[4096];
    unit_scratch("nohdf5", dir, sizeof dir);
    char p[8300];
    snprintf(p, sizeof p, "%s/x.h5", dir);
    static const uint8_t sig[16] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    CHECK(unit_write_file(p, sig, sizeof sig) == 0, "write");
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(chute_dataset_open(p, CHUTE_SOURCE_AUTO, &ds, &e) == CHUTE_EUNSUPPORTED &&
              strstr(e.message, "without libhdf5"),
          "%s", e.message);
    return 0;
}

UNIT_MAIN
