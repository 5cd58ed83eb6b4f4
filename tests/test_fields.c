/*
 * test_fields.c — typed records (issue #9): the .npy header parser, and
 * the fields a loader delivers from WebDataset and TFRecord files.
 *
 * Expected values come from tests/fixtures/fields/expected.txt, written by
 * tests/fixtures/make_fixtures.py from what numpy, json and TensorFlow
 * read back from files that webdataset's ShardWriter and TensorFlow's
 * TFRecordWriter wrote, never from chute: each value is compared byte for
 * byte (exact for ints, bitwise for float32).  The .npy seeds are
 * numpy.save outputs (tests/fuzz/corpus/npy).
 */
#include "unit.h"

#include "chute.h"
#include "format/fields.h"

#ifndef CHUTE_FIXTURES
#error "CHUTE_FIXTURES must name tests/fixtures"
#endif

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* ---- .npy ------------------------------------------------------------- */

TEST(npy_numpy_outputs)
{
    static const struct {
        const char *file;
        int dtype;
        uint32_t ndim;
        int64_t shape[3];
    } c[] = {{"f4_2x3", CHUTE_DTYPE_FLOAT32, 2, {2, 3}},  {"i8_scalar", CHUTE_DTYPE_INT64, 0, {0}},
             {"u1_4x4", CHUTE_DTYPE_UINT8, 2, {4, 4}},    {"f8_empty", CHUTE_DTYPE_FLOAT64, 1, {0}},
             {"b1_3", CHUTE_DTYPE_BOOL, 1, {3}},          {"i2_1x1x1", CHUTE_DTYPE_INT16, 3, {1, 1, 1}},
             {"f2_5", CHUTE_DTYPE_FLOAT16, 1, {5}},       {"i4_v2", CHUTE_DTYPE_INT32, 1, {3}}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/../fuzz/corpus/npy/%s.npy", CHUTE_FIXTURES, c[k].file);
        size_t n = 0;
        uint8_t *p = slurp(path, &n);
        CHECK(p, "cannot read %s", path);
        ch_npy_info a;
        chute_error e = {0};
        int rc = ch_npy_parse(p, n, c[k].file, 0, &a, &e);
        CHECK(rc == CHUTE_OK, "%s: %s", c[k].file, e.message);
        CHECK(a.dtype == c[k].dtype && a.ndim == c[k].ndim, "%s: dtype %d ndim %u", c[k].file,
              a.dtype, a.ndim);
        for (uint32_t d = 0; d < a.ndim; d++)
            CHECK(a.shape[d] == c[k].shape[d], "%s: dim %u is %lld", c[k].file, d,
                  (long long)a.shape[d]);
        CHECK(a.data_offset % 16 == 0 && a.data_offset + a.data_bytes == n, "%s: layout",
              c[k].file);
        /* Every truncation and every flipped header byte: a status, never a crash;
         * a truncation is never accepted. */
        for (size_t t = 0; t < n; t++) {
            CHECK(ch_npy_parse(p, t, "cut", 0, &a, &e) != CHUTE_OK, "%s cut at %zu accepted",
                  c[k].file, t);
        }
        uint8_t *q = malloc(n);
        for (size_t i = 0; i < a.data_offset; i++) {
            memcpy(q, p, n);
            q[i] ^= 0x5a;
            (void)ch_npy_parse(q, n, "flip", 0, &a, &e);
        }
        free(q);
        free(p);
    }
    return 0;
}

/* A .npy built here: v1 header text padded to a multiple of 64 bytes. */
static size_t make_npy(uint8_t *out, const char *dict, size_t data)
{
    size_t dl = strlen(dict), total = 10 + dl + 1;
    size_t pad = (64 - total % 64) % 64, hl = dl + pad + 1;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)hl;
    out[9] = (uint8_t)(hl >> 8);
    memcpy(out + 10, dict, dl);
    memset(out + 10 + dl, ' ', pad);
    out[10 + dl + pad] = '\n';
    memset(out + 10 + hl, 0, data);
    return 10 + hl + data;
}

TEST(npy_refuses_what_numpy_does_not_write)
{
    static const struct {
        const char *dict;
        size_t data;
        int want;
        const char *why;
    } c[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, CHUTE_OK, ""},
        {"{\"shape\": (3,), \"descr\": \"|u1\", \"fortran_order\": False}", 3, CHUTE_OK, ""},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, CHUTE_EUNSUPPORTED, "dtype"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, CHUTE_EUNSUPPORTED, "fortran"},
        {"{'descr': '<f4', 'fortran_order': False, }", 8, CHUTE_ECORRUPT, "lacks shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9, CHUTE_ECORRUPT, "data bytes"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 7, CHUTE_ECORRUPT, "data bytes"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0,
         CHUTE_ECORRUPT, "overflows"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0, CHUTE_ECORRUPT, "number"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4,
         CHUTE_ECORRUPT, "repeated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4, CHUTE_ECORRUPT,
         "unexpected"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4, CHUTE_ECORRUPT,
         "structured"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8, CHUTE_ECORRUPT, "descr"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
         CHUTE_ECORRUPT, "dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x", 4, CHUTE_ECORRUPT, "after"},
    };
    uint8_t buf[1024];
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        size_t n = make_npy(buf, c[k].dict, c[k].data);
        ch_npy_info a;
        chute_error e = {0};
        int rc = ch_npy_parse(buf, n, "m.tar", 1536, &a, &e);
        CHECK(rc == c[k].want, "case %zu (%s): %d, want %d: %s", k, c[k].dict, rc, c[k].want,
              e.message);
        if (rc != CHUTE_OK) {
            CHECK(strstr(e.message, "m.tar@1536: npy: ") == e.message, "message %s", e.message);
            CHECK(strstr(e.message, c[k].why), "case %zu: message \"%s\" lacks \"%s\"", k,
                  e.message, c[k].why);
        }
    }
    return 0;
}

/* ---- fields through the loader ----------------------------------------- */

static int hexbyte(const char *h)
{
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char ch = h[i];
        v = v * 16 + (ch >= 'a' ? ch - 'a' + 10 : ch - '0');
    }
    return v;
}

/* Compare the batch (all of dataset `ds_name`, in order) with expected.txt;
 * *nvals counts the values compared. */
static int check_expected(const chute_batch *b, const char *ds_name, int *nvals)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/fields/expected.txt", CHUTE_FIXTURES);
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot open %s", path);
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        char dsn[64], field[64], val[8000];
        unsigned idx;
        if (sscanf(line, "%63s %u %63s %7999s", dsn, &idx, field, val) != 4 ||
            strcmp(dsn, ds_name) != 0)
            continue;
        int64_t pos = -1;
        for (uint32_t j = 0; j < v.count; j++)
            if (v.indices[j] == idx)
                pos = j;
        if (pos < 0)
            continue; /* not delivered (a skipped sample's slot) */
        if (!strcmp(field, "label")) {
            CHECK(v.labels[pos] == atoll(val), "%s %u: label %lld, want %s", ds_name, idx,
                  (long long)v.labels[pos], val);
            (*nvals)++;
            continue;
        }
        chute_field_view fv;
        if (chute_batch_field(b, field, &fv) != CHUTE_OK)
            continue; /* not asked for: the callers count what was compared */
        size_t n = strlen(val) / 2;
        int64_t per = 1;
        for (uint32_t d = 1; d < fv.ndim; d++)
            per *= fv.shape[d];
        size_t esz = fv.kind == CHUTE_FIELD_BYTES ? 1 : (size_t)(fv.nbytes / v.count / per);
        const uint8_t *p = (const uint8_t *)fv.data + (size_t)pos * (size_t)per * esz;
        CHECK(((uintptr_t)fv.data & 63) == 0, "field %s not 64-byte aligned", field);
        CHECK(fv.strides[fv.ndim - 1] == 1 && fv.strides[0] == per, "field %s strides", field);
        if (fv.kind == CHUTE_FIELD_BYTES) {
            CHECK(fv.lengths && ((uintptr_t)fv.lengths & 63) == 0, "lengths");
            CHECK(fv.lengths[pos] == (int64_t)n, "%s %u %s: length %lld, want %zu", ds_name, idx,
                  field, (long long)fv.lengths[pos], n);
        } else {
            CHECK((size_t)per * esz == n, "%s %u %s: %zu bytes per sample, want %zu", ds_name, idx,
                  field, (size_t)per * esz, n);
        }
        for (size_t i = 0; i < n; i++)
            CHECK(p[i] == hexbyte(val + 2 * i), "%s %u %s: byte %zu is %02x, want %.2s", ds_name,
                  idx, field, i, p[i], val + 2 * i);
        (*nvals)++;
    }
    fclose(f);
    return 0;
}

static int open_ds(const char *sub, const char *extra, chute_dataset **ds)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/fields/%s", CHUTE_FIXTURES, sub);
    chute_dataset_options o = {0};
    o.extra_keys = extra;
    chute_error e = {0};
    CHECK(chute_dataset_open_ex(path, &o, ds, &e) == CHUTE_OK, "%s: %s", path, e.message);
    return 0;
}

static int make_loader(chute_dataset *ds, const char *fields, uint32_t batch, int fail,
                       uint32_t field_bytes, chute_loader **ld)
{
    chute_loader_options o = {0};
    o.batch_size = batch;
    o.size = 8;
    o.transform = CHUTE_TRANSFORM_NONE;
    o.no_shuffle = 1;
    o.workers = 2;
    o.fields = fields;
    o.field_bytes = field_bytes;
    o.on_corrupt = fail ? CHUTE_CORRUPT_FAIL : CHUTE_CORRUPT_SKIP;
    chute_error e = {0};
    CHECK(chute_loader_create(ds, &o, ld, &e) == CHUTE_OK, "create: %s", e.message);
    CHECK(chute_loader_start_epoch(*ld, 0, 0) == CHUTE_OK, "start");
    return 0;
}

static int field_is(const chute_dataset *ds, const char *name, int kind, int dtype, uint32_t ndim,
                    int64_t d0, int64_t d1)
{
    for (uint32_t k = 0; k < chute_dataset_num_fields(ds); k++) {
        chute_field_info fi;
        CHECK(chute_dataset_field_info(ds, k, &fi) == CHUTE_OK, "info %u", k);
        if (strcmp(fi.name, name))
            continue;
        CHECK((int)fi.kind == kind && (int)fi.dtype == dtype && fi.ndim == ndim,
              "%s: kind %d dtype %d ndim %u", name, fi.kind, fi.dtype, fi.ndim);
        CHECK(ndim < 1 || fi.shape[0] == d0, "%s: shape[0] %lld", name, (long long)fi.shape[0]);
        CHECK(ndim < 2 || fi.shape[1] == d1, "%s: shape[1] %lld", name, (long long)fi.shape[1]);
        return 0;
    }
    CHECK(0, "no field %s", name);
}

TEST(wds_fields_match_webdataset)
{
    chute_dataset *ds = NULL;
    CHECK_OK(open_ds("wds", NULL, &ds));
    CHECK(chute_dataset_num_fields(ds) == 5, "%u fields", chute_dataset_num_fields(ds));
    CHECK_OK(field_is(ds, "cls", CHUTE_FIELD_INT64, CHUTE_DTYPE_INT64, 0, 0, 0));
    CHECK_OK(field_is(ds, "json", CHUTE_FIELD_BYTES, CHUTE_DTYPE_UINT8, 1, -1, 0));
    CHECK_OK(field_is(ds, "txt", CHUTE_FIELD_BYTES, CHUTE_DTYPE_UINT8, 1, -1, 0));
    CHECK_OK(field_is(ds, "npy", CHUTE_FIELD_TENSOR, CHUTE_DTYPE_FLOAT32, 2, 2, 3));
    CHECK_OK(field_is(ds, "ids.npy", CHUTE_FIELD_TENSOR, CHUTE_DTYPE_INT64, 1, 4, 0));
    chute_loader *ld = NULL;
    CHECK_OK(make_loader(ds, "cls, json,txt,npy,ids.npy", 6, 1, 0, &ld));
    chute_batch *b = NULL;
    int rc = chute_loader_next(ld, &b);
    CHECK(rc == CHUTE_OK, "next: %s", chute_loader_errmsg(ld));
    int nvals = 0;
    CHECK_OK(check_expected(b, "wds", &nvals));
    CHECK(nvals == 6 * 6, "%d values compared", nvals);
    chute_field_view fv;
    CHECK(chute_batch_field(b, "jpg", &fv) == CHUTE_ENOTFOUND, "jpg is the image, not a field");
    chute_batch_release(b);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(tfrecord_extra_keys_match_tensorflow)
{
    chute_dataset *ds = NULL;
    CHECK_OK(open_ds("tfr", "bbox,ids , weight,meta,mask.npy", &ds));
    CHECK(chute_dataset_num_fields(ds) == 5, "%u fields", chute_dataset_num_fields(ds));
    CHECK_OK(field_is(ds, "bbox", CHUTE_FIELD_FLOAT32, CHUTE_DTYPE_FLOAT32, 1, 4, 0));
    CHECK_OK(field_is(ds, "ids", CHUTE_FIELD_INT64, CHUTE_DTYPE_INT64, 1, 3, 0));
    CHECK_OK(field_is(ds, "weight", CHUTE_FIELD_FLOAT32, CHUTE_DTYPE_FLOAT32, 0, 0, 0));
    CHECK_OK(field_is(ds, "meta", CHUTE_FIELD_BYTES, CHUTE_DTYPE_UINT8, 1, -1, 0));
    CHECK_OK(field_is(ds, "mask.npy", CHUTE_FIELD_TENSOR, CHUTE_DTYPE_UINT8, 2, 4, 4));
    chute_loader *ld = NULL;
    CHECK_OK(make_loader(ds, "bbox,ids,weight,meta,mask.npy", 5, 1, 0, &ld));
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next: %s", chute_loader_errmsg(ld));
    int nvals = 0;
    CHECK_OK(check_expected(b, "tfr", &nvals));
    CHECK(nvals == 5 * 6, "%d values compared", nvals);
    chute_batch_release(b);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    /* A key no record has fails the open, naming it. */
    char path[4096];
    snprintf(path, sizeof path, "%s/fields/tfr", CHUTE_FIXTURES);
    chute_dataset_options o = {0};
    o.extra_keys = "bbox,nope";
    chute_error e = {0};
    CHECK(chute_dataset_open_ex(path, &o, &ds, &e) == CHUTE_EFORMAT && strstr(e.message, "\"nope\""),
          "%s", e.message);
    return 0;
}

/* Under FAIL (or SKIP with `skip`), batch k (batch size 1, dataset order)
 * must fail with status `code` and want1, want2 in its message; want1
 * NULL: succeed. */
static int batch_fails_as(chute_dataset *ds, const char *fields, uint64_t k, uint32_t fb,
                          int skip, int code, const char *want1, const char *want2)
{
    chute_loader *ld = NULL;
    CHECK_OK(make_loader(ds, fields, 1, skip ? 0 : 1, fb, &ld));
    CHECK(chute_loader_start_epoch(ld, 0, k) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    int rc = chute_loader_next(ld, &b);
    if (!want1) {
        CHECK(rc == CHUTE_OK, "batch %llu: %s", (unsigned long long)k, chute_loader_errmsg(ld));
        chute_batch_release(b);
    } else {
        const char *m = chute_loader_errmsg(ld);
        CHECK(rc == code, "batch %llu: rc %d (%s)", (unsigned long long)k, rc, m);
        CHECK(strstr(m, want1) && strstr(m, want2), "batch %llu: \"%s\" lacks \"%s\"/\"%s\"",
              (unsigned long long)k, m, want1, want2);
    }
    chute_loader_destroy(ld);
    return 0;
}

static int batch_fails_with(chute_dataset *ds, const char *fields, uint64_t k, uint32_t fb,
                            const char *want1, const char *want2)
{
    return batch_fails_as(ds, fields, k, fb, 0, CHUTE_ECORRUPT, want1, want2);
}

/* A value of another shape than the field's: CHUTE_EINVAL under either
 * policy, never a skipped (replaced) sample. */
static int batch_refuses_shape(chute_dataset *ds, const char *fields, uint64_t k,
                               const char *want1, const char *want2)
{
    CHECK_OK(batch_fails_as(ds, fields, k, 0, 0, CHUTE_EINVAL, want1, want2));
    return batch_fails_as(ds, fields, k, 0, 1, CHUTE_EINVAL, want1, want2);
}

TEST(wds_bad_fields_fail_naming_file_and_sample)
{
    chute_dataset *ds = NULL;
    CHECK_OK(open_ds("wds_bad", NULL, &ds));
    CHECK_OK(batch_fails_with(ds, "npy,json", 0, 64, NULL, NULL));
    CHECK_OK(batch_refuses_shape(ds, "npy,json", 1, "sample \"b00001\": field \"npy\": this sample's value is a .npy of float32[3,2], but the field is float32[2,3]",
                                 "(learned from " CHUTE_FIXTURES "/fields/wds_bad/bad-000000.tar@0: sample \"b00000\")"));
    CHECK_OK(batch_fails_with(ds, "npy,json", 2, 64, "\"b00002\"", "npy: no \\x93NUMPY magic"));
    CHECK_OK(batch_fails_with(ds, "npy,json", 3, 64, "\"b00003\"", ".json member of 312 bytes is over field_bytes (64)"));
    CHECK_OK(batch_fails_with(ds, "npy,json", 3, 0, NULL, NULL)); /* fits the default 4096 */
    CHECK_OK(batch_fails_with(ds, "npy,json", 4, 64, NULL, NULL));
    chute_dataset_close(ds);
    return 0;
}

TEST(wds_bad_fields_skipped_and_counted)
{
    chute_dataset *ds = NULL;
    CHECK_OK(open_ds("wds_bad", NULL, &ds));
    /* b00003's .json is over 64 bytes: bad content, skipped (replaced by
     * another sample of the epoch) and counted once.  (b00001's .npy of
     * another shape is refused instead, and b00002's broken .npy fails:
     * wds_bad_fields_fail_naming_file_and_sample.) */
    chute_loader *ld = NULL;
    CHECK_OK(make_loader(ds, "json", 5, 0, 64, &ld));
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next: %s", chute_loader_errmsg(ld));
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    CHECK(v.count == 5, "%u samples", v.count);
    for (uint32_t j = 0; j < v.count; j++) {
        CHECK(v.indices[j] != 3, "slot %u holds bad sample 3", j);
        chute_field_view fv;
        CHECK(chute_batch_field(b, "json", &fv) == CHUTE_OK && fv.lengths[j] == 9 &&
                  !memcmp((const uint8_t *)fv.data + (size_t)j * 64, "{\"ok\": 1}", 9),
              "slot %u: .json", j);
    }
    chute_batch_release(b);
    chute_stats st;
    chute_loader_stats(ld, &st);
    CHECK(st.corrupt == 1, "corrupt %llu", (unsigned long long)st.corrupt);
    CHECK(strstr(chute_loader_errmsg(ld), "skipped ") && strstr(chute_loader_errmsg(ld), "b00003"),
          "%s", chute_loader_errmsg(ld));
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(tfrecord_bad_fields_fail_naming_record)
{
    chute_dataset *ds = NULL;
    CHECK_OK(open_ds("tfr_bad", "bbox,mask.npy", &ds));
    CHECK_OK(batch_fails_with(ds, "bbox,mask.npy", 0, 0, NULL, NULL));
    CHECK_OK(batch_refuses_shape(ds, "bbox,mask.npy", 1, "bad.tfrecord@", "field \"bbox\": this sample's value is a float_list of 3 values, but the field is float32[4] (learned from "));
    CHECK_OK(batch_refuses_shape(ds, "bbox,mask.npy", 2, "bad.tfrecord@", "field \"mask.npy\": this sample's value is a .npy of uint8[4,3], but the field is uint8[4,4]"));
    CHECK_OK(batch_fails_with(ds, "bbox", 2, 0, NULL, NULL));
    chute_dataset_close(ds);
    return 0;
}

TEST(fields_option_checked_and_default_unchanged)
{
    chute_dataset *ds = NULL;
    CHECK_OK(open_ds("wds", NULL, &ds));
    chute_loader_options o = {0};
    o.batch_size = 2;
    o.size = 8;
    o.fields = "json,nope";
    chute_loader *ld = NULL;
    chute_error e = {0};
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_EINVAL &&
              strstr(e.message, "no field \"nope\"") && strstr(e.message, "ids.npy"),
          "%s", e.message);
    o.fields = "json,json";
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_EINVAL && strstr(e.message, "twice"),
          "%s", e.message);
    CHECK_OK(make_loader(ds, NULL, 6, 1, 0, &ld));
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next");
    chute_field_view fv;
    CHECK(chute_batch_field(b, "json", &fv) == CHUTE_ENOTFOUND, "fields without asking");
    int nvals = 0;
    CHECK_OK(check_expected(b, "wds", &nvals)); /* labels only */
    CHECK(nvals == 6, "%d labels", nvals);
    chute_batch_release(b);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

UNIT_MAIN
