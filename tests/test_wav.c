/*
 * test_wav.c — the "wav" format (issue #12) and its RIFF parser, in C so
 * the sanitizer builds run them.
 *
 * Expected values are soundfile's (libsndfile's) float32 reading of each
 * fixture, written beside it as NAME.f32 by tests/fixtures/make_wav.py,
 * which also wrote the files with Python's `wave` module and soundfile:
 * never values computed by chute.  Every delivered frame is compared bit
 * for bit (float32 files pass through; integers map exactly), and the
 * window each transform picks is checked against the documented rule
 * (eval: start floor((frames - L) / 2); none: 0; train: some start in
 * [0, frames - L], the same for any worker count, different across epochs).
 * The damaged headers are built here from the fixtures by changing the
 * named bytes.
 */
#include "unit.h"

#include "chute.h"
#include "format/wav.h"

#include <math.h>
#include <sys/stat.h>

#ifndef CHUTE_FIXTURES
#error "CHUTE_FIXTURES must name tests/fixtures"
#endif

#define MAXF 64

/* One fixture file: soundfile's samples. */
typedef struct ref {
    char name[64];
    uint32_t frames, channels, rate;
    float *x; /* frames x channels */
} ref;

static void refs_free(ref *r, int n)
{
    for (int k = 0; k < n; k++)
        free(r[k].x);
}

/* The files of fixture directory `dir` in expected.txt, sorted by name (the
 * flat layout's order). */
static int load_refs(const char *dir, ref *out, int *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/wav/expected.txt", CHUTE_FIXTURES);
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot open %s", path);
    char d[64], name[64];
    unsigned fr, ch, rate;
    *n = 0;
    while (fscanf(f, "%63s %63s %u %u %u", d, name, &fr, &ch, &rate) == 5) {
        if (strcmp(d, dir) || *n == MAXF)
            continue;
        ref *r = &out[(*n)++];
        snprintf(r->name, sizeof r->name, "%s", name);
        r->frames = fr;
        r->channels = ch;
        r->rate = rate;
        snprintf(path, sizeof path, "%s/wav/%s/%s.f32", CHUTE_FIXTURES, dir, name);
        size_t len = 0;
        r->x = (float *)(void *)unit_read_file(path, &len);
        CHECK(r->x && len == (size_t)fr * ch * 4, "%s: %zu bytes", path, len);
    }
    fclose(f);
    for (int a = 0; a < *n; a++) /* strcmp order, as the format lists them */
        for (int b = a + 1; b < *n; b++)
            if (strcmp(out[b].name, out[a].name) < 0) {
                ref t = out[a];
                out[a] = out[b];
                out[b] = t;
            }
    CHECK(*n > 0, "no fixtures for %s", dir);
    return 0;
}

static int open_wav(const char *sub, uint32_t samples, uint32_t rate, int chfirst,
                    chute_dataset **ds, chute_error *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/wav/%s", CHUTE_FIXTURES, sub);
    chute_dataset_options o = {0};
    o.audio_samples = samples;
    o.audio_rate = rate;
    o.audio_channels_first = chfirst;
    return chute_dataset_open_ex(path, &o, ds, e);
}

static int same_bits(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

/* Check sample `idx`'s delivered audio a (L frames) against r's frames
 * [start, start + min(F, L)), zeros after.  start < 0: find it (train). */
static int check_window(const ref *r, const float *a, int32_t length, uint32_t L, int chfirst,
                        int64_t start, int64_t *found)
{
    uint32_t C = r->channels, n = r->frames < L ? r->frames : L;
    CHECK(length == (int32_t)n, "%s: length %d, want %u", r->name, length, n);
    if (start < 0) {
        for (int64_t s = 0; s + n <= r->frames && start < 0; s++) {
            int ok = 1;
            for (uint32_t t = 0; t < n && ok; t++)
                for (uint32_t c = 0; c < C && ok; c++)
                    ok = same_bits(a[chfirst ? c * L + t : t * C + c], r->x[(s + t) * C + c]);
            if (ok)
                start = s;
        }
        CHECK(start >= 0, "%s: the train window matches no window of the file", r->name);
    }
    if (found)
        *found = start;
    for (uint32_t t = 0; t < L; t++)
        for (uint32_t c = 0; c < C; c++) {
            float got = a[chfirst ? c * L + t : t * C + c];
            float want = t < n ? r->x[(start + t) * C + c] : 0.0f;
            CHECK(same_bits(got, want), "%s: frame %u channel %u (file frame %lld): %.9g, "
                  "soundfile %.9g", r->name, t, c, (long long)(start + t), got, want);
        }
    return 0;
}

/* One epoch of dataset `dir`; checks every sample; starts[i] gets each
 * sample's window start. */
static int run(const char *dir, uint32_t L, int chfirst, chute_transform tf, uint64_t epoch,
               uint32_t workers, int64_t *starts)
{
    ref r[MAXF];
    int nr = 0;
    CHECK_OK(load_refs(dir, r, &nr));
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_wav(dir, L, 0, chfirst, &ds, &e) == CHUTE_OK, "%s: %s", dir, e.message);
    CHECK(!strcmp(chute_dataset_format_name(ds), "wav") && !chute_dataset_has_images(ds) &&
              chute_dataset_size(ds) == (uint64_t)nr,
          "%s: format %s, %llu samples", dir, chute_dataset_format_name(ds),
          (unsigned long long)chute_dataset_size(ds));
    chute_field_info fi;
    CHECK(chute_dataset_num_fields(ds) == 2 && chute_dataset_field_info(ds, 0, &fi) == CHUTE_OK &&
              !strcmp(fi.name, "audio") && fi.dtype == CHUTE_DTYPE_FLOAT32 && fi.ndim == 2 &&
              fi.shape[chfirst ? 1 : 0] == L && fi.shape[chfirst ? 0 : 1] == r[0].channels,
          "audio field");
    chute_loader_options o = {0};
    o.batch_size = 3;
    o.workers = workers;
    o.seed = 11;
    o.transform = tf;
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    o.fields = "audio,length";
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "create: %s", e.message);
    CHECK(chute_loader_start_epoch(ld, epoch, 0) == CHUTE_OK, "start");
    chute_batch *b = NULL;
    int rc, seen = 0;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_field_view fa, fl;
        chute_batch_view_get(b, &v);
        CHECK(chute_batch_field(b, "audio", &fa) == CHUTE_OK &&
                  chute_batch_field(b, "length", &fl) == CHUTE_OK,
              "fields");
        CHECK(fa.ndim == 3 && fa.shape[0] == v.count && fl.ndim == 1 &&
                  fl.dtype == CHUTE_DTYPE_INT32,
              "field views: ndim %u/%u", fa.ndim, fl.ndim);
        for (uint32_t k = 0; k < v.count; k++) {
            uint64_t i = v.indices[k];
            const ref *x = &r[i];
            uint32_t F = x->frames;
            int64_t want = F <= L ? 0
                           : tf == CHUTE_TRANSFORM_EVAL ? (int64_t)(F - L) / 2
                           : tf == CHUTE_TRANSFORM_NONE ? 0
                                                        : -1;
            int bad = check_window(x, (const float *)fa.data + (size_t)k * L * x->channels,
                                   ((const int32_t *)fl.data)[k], L, chfirst, want, &starts[i]);
            if (bad) {
                chute_batch_release(b);
                chute_loader_destroy(ld);
                return 1;
            }
            seen++;
        }
        chute_batch_release(b);
    }
    CHECK(rc == CHUTE_END, "next: %d %s", rc, chute_loader_errmsg(ld));
    CHECK(seen == nr, "%d of %d samples", seen, nr);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    refs_free(r, nr);
    return 0;
}

TEST(every_encoding_matches_soundfile_bit_for_bit)
{
    int64_t st[MAXF];
    /* L over every length: whole files, zero-padded, window at 0. */
    CHECK_OK(run("mono", 400, 0, CHUTE_TRANSFORM_NONE, 0, 2, st));
    CHECK_OK(run("stereo", 400, 0, CHUTE_TRANSFORM_EVAL, 0, 2, st));
    CHECK_OK(run("six", 400, 0, CHUTE_TRANSFORM_EVAL, 0, 1, st));
    CHECK_OK(run("six", 400, 1, CHUTE_TRANSFORM_EVAL, 0, 1, st));
    return 0;
}

TEST(eval_centre_crop_and_padding)
{
    int64_t st[MAXF];
    CHECK_OK(run("mono", 100, 0, CHUTE_TRANSFORM_EVAL, 0, 2, st));
    CHECK_OK(run("stereo", 100, 1, CHUTE_TRANSFORM_EVAL, 0, 2, st));
    CHECK_OK(run("six", 100, 0, CHUTE_TRANSFORM_EVAL, 5, 3, st));
    CHECK_OK(run("mono", 100, 0, CHUTE_TRANSFORM_NONE, 0, 1, st));
    return 0;
}

TEST(train_crop_deterministic_per_seed_and_new_each_epoch)
{
    int64_t a[MAXF], b[MAXF], c[MAXF];
    CHECK_OK(run("mono", 50, 0, CHUTE_TRANSFORM_TRAIN, 3, 1, a));
    CHECK_OK(run("mono", 50, 0, CHUTE_TRANSFORM_TRAIN, 3, 4, b));
    CHECK_OK(run("mono", 50, 0, CHUTE_TRANSFORM_TRAIN, 4, 2, c));
    int n = 13, same_epoch = 0, differs = 0, off_centre = 0;
    for (int i = 0; i < n; i++) {
        same_epoch += a[i] == b[i];
        differs += a[i] != c[i];
        off_centre += a[i] != 0;
    }
    CHECK(same_epoch == n, "epoch 3 with 1 and 4 workers: %d of %d windows equal", same_epoch, n);
    CHECK(differs >= 8, "epoch 3 vs 4: only %d of %d windows moved", differs, n);
    CHECK(off_centre >= 8, "only %d train windows away from 0", off_centre);
    return 0;
}

TEST(class_directories_give_labels)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(open_wav("cls", 100, 16000, 0, &ds, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_dataset_size(ds) == 3 && chute_dataset_num_classes(ds) == 2 &&
              !strcmp(chute_dataset_class_name(ds, 0), "a") &&
              !strcmp(chute_dataset_class_name(ds, 1), "b"),
          "classes");
    CHECK(chute_dataset_label(ds, 0) == 0 && chute_dataset_label(ds, 1) == 0 &&
              chute_dataset_label(ds, 2) == 1,
          "labels");
    char buf[4096];
    CHECK(strstr(chute_dataset_describe(ds, 2, buf, sizeof buf), "cls/b/3.wav"), "%s", buf);
    chute_dataset_close(ds);
    return 0;
}

TEST(sample_rate_mismatch_is_an_error_naming_file_and_rates)
{
    chute_dataset *ds = NULL;
    chute_error e = {0};
    int rc = open_wav("rate", 100, 22050, 0, &ds, &e);
    CHECK(rc == CHUTE_EINVAL && strstr(e.message, "a16k.wav") && strstr(e.message, "16000") &&
              strstr(e.message, "22050"),
          "%d %s", rc, e.message);
    /* Rate from the first file: the second fails, even under SKIP. */
    CHECK(open_wav("rate", 100, 0, 0, &ds, &e) == CHUTE_OK, "%s", e.message);
    chute_loader_options o = {0};
    o.batch_size = 2;
    o.workers = 1;
    o.no_shuffle = 1;
    o.fields = "audio";
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    chute_batch *b = NULL;
    rc = chute_loader_next(ld, &b);
    const char *m = chute_loader_errmsg(ld);
    CHECK(rc == CHUTE_EINVAL && strstr(m, "b22k.wav") && strstr(m, "22050") &&
              strstr(m, "16000"),
          "%d %s", rc, m);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

/* ---- the parser on damaged headers -------------------------------------- */

static uint8_t *fixture(const char *rel, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/wav/%s", CHUTE_FIXTURES, rel);
    return unit_read_file(path, len);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* Parse p[len] whole and through a 16-byte head + reads: same answer. */
typedef struct mem {
    const uint8_t *p;
    size_t len;
} mem;
static int rd_mem(void *user, uint64_t off, void *buf, size_t len, chute_error *err)
{
    const mem *m = user;
    if (off + len > m->len)
        return ch_err(err, CHUTE_EIO, "read past the end");
    memcpy(buf, m->p + off, len);
    return CHUTE_OK;
}

static int parse(const uint8_t *p, size_t len, ch_wav_info *w, chute_error *e)
{
    mem m = {p, len};
    ch_wav_info w2;
    chute_error e2 = {0};
    int rc = ch_wav_parse(p, len, len, NULL, NULL, "t.wav", w, e);
    int rc2 = ch_wav_parse(p, len < 16 ? len : 16, len, rd_mem, &m, "t.wav", &w2, &e2);
    if (rc != rc2 || (rc == CHUTE_OK && memcmp(w, &w2, sizeof w2)) ||
        (rc != CHUTE_OK && strcmp(e->message, e2.message))) {
        fprintf(stderr, "whole %d '%s' vs head+reads %d '%s'\n", rc, e->message, rc2,
                e2.message);
        return 12345;
    }
    return rc;
}

TEST(parser_accepts_every_fixture_as_soundfile_reads_it)
{
    static const char *const names[] = {"mono/w08", "mono/w24", "mono/sfd", "mono/x16",
                                        "mono/xf", "mono/odd", "six/xd", "stereo/sf24"};
    static const uint32_t frames[] = {151, 210, 120, 200, 180, 111, 105, 90};
    static const uint32_t fmt[] = {1, 1, 3, 1, 3, 1, 3, 1};
    static const uint32_t tag[] = {1, 1, 3, 0xFFFE, 0xFFFE, 1, 0xFFFE, 1};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "%s.wav", names[k]);
        size_t len = 0;
        uint8_t *p = fixture(rel, &len);
        CHECK(p, "%s", rel);
        ch_wav_info w;
        chute_error e = {0};
        int rc = parse(p, len, &w, &e);
        free(p);
        CHECK(rc == CHUTE_OK && w.frames == frames[k] && w.format == fmt[k] && w.tag == tag[k] &&
                  w.rate == 16000,
              "%s: %d %s frames %llu format %u tag %x", rel, rc, e.message,
              (unsigned long long)w.frames, w.format, w.tag);
    }
    return 0;
}

/* Each damage: (fixture, byte offset, new 32-bit value or a cut length),
 * the status and the words the message must hold. */
TEST(damaged_headers_are_clear_errors_naming_the_offset)
{
    size_t len = 0;
    uint8_t *w16 = fixture("mono/w16.wav", &len); /* RIFF fmt(16) data at 36, 97 frames */
    CHECK(w16 && len == 44 + 194, "w16: %zu bytes", len);
    uint8_t *b = malloc(8192); /* every fixture used here is smaller */
    ch_wav_info w;
    chute_error e = {0};
    int rc;

    /* Truncated data: the header claims more than the file has. */
    rc = parse(w16, len - 31, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "t.wav@40") &&
              strstr(e.message, "claims 194 bytes") && strstr(e.message, "163"),
          "%d %s", rc, e.message);
    /* A lying data size in a whole file. */
    memcpy(b, w16, len);
    put32(b + 40, 0x7ffffff0u);
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "@40") && strstr(e.message, "claims"),
          "%d %s", rc, e.message);
    /* A RIFF size past the file's end. */
    memcpy(b, w16, len);
    put32(b + 4, (uint32_t)len + 100);
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "@4") && strstr(e.message, "RIFF size"),
          "%d %s", rc, e.message);
    /* A partial frame (stereo 16-bit with 3 data bytes more). */
    memcpy(b, w16, len);
    b[22] = 2, b[32] = 4;          /* channels 2, block align 4 */
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "@40") && strstr(e.message, "whole number"),
          "%d %s", rc, e.message);
    /* Block align that does not match channels x bits. */
    memcpy(b, w16, len);
    b[32] = 3;
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "@32") && strstr(e.message, "block align"),
          "%d %s", rc, e.message);
    /* ADPCM and 12-bit: valid but unsupported, naming the tag / bits. */
    memcpy(b, w16, len);
    b[20] = 2;
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_EUNSUPPORTED && strstr(e.message, "0x0002"), "%d %s", rc, e.message);
    memcpy(b, w16, len);
    b[34] = 12;
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_EUNSUPPORTED && strstr(e.message, "12-bit"), "%d %s", rc, e.message);
    /* data before fmt: swap the two chunks' ids. */
    memcpy(b, w16, len);
    memcpy(b + 12, "data", 4);
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "@12") && strstr(e.message, "before the fmt"),
          "%d %s", rc, e.message);
    /* Not RIFF / RF64 / too short. */
    rc = parse(w16, 11, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "too short"), "%d %s", rc, e.message);
    memcpy(b, w16, len);
    memcpy(b, "RF64", 4);
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_EUNSUPPORTED && strstr(e.message, "RF64"), "%d %s", rc, e.message);
    free(w16);

    /* Odd-sized chunks: odd.wav has 'junk' (3 bytes + pad) and an odd LIST
     * before data.  Without the pad byte the next id is garbage. */
    uint8_t *odd = fixture("mono/odd.wav", &len);
    CHECK(odd && len <= 8192 && !memcmp(odd + 36, "junk", 4), "odd.wav layout");
    memcpy(b, odd, 47);            /* RIFF .. junk body (3 bytes), no pad */
    memcpy(b + 47, odd + 48, len - 48);
    put32(b + 4, (uint32_t)(len - 1 - 8));
    rc = parse(b, len - 1, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "@48") && strstr(e.message, "pad byte"),
          "%d %s", rc, e.message);
    /* A chunk running past the end of the file. */
    memcpy(b, odd, len);
    put32(b + 40, 0x10000000u);
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_ECORRUPT && strstr(e.message, "@36") && strstr(e.message, "'junk'") &&
              strstr(e.message, "runs past"),
          "%d %s", rc, e.message);
    free(odd);

    /* EXTENSIBLE with another subformat GUID (e.g. Ambisonic B-format). */
    uint8_t *x = fixture("mono/x16.wav", &len);
    CHECK(x && len <= 8192 && x[20] == 0xFE && x[21] == 0xFF, "x16.wav is extensible");
    memcpy(b, x, len);
    b[44 + 4] ^= 0x5a;            /* a byte of the GUID's tail (fmt body at 20, GUID at +24) */
    rc = parse(b, len, &w, &e);
    CHECK(rc == CHUTE_EUNSUPPORTED && strstr(e.message, "@44") && strstr(e.message, "GUID"),
          "%d %s", rc, e.message);
    free(x);
    free(b);
    return 0;
}

TEST(truncated_file_in_a_dataset_follows_the_corrupt_policy)
{
    char dir[4096], path[4200];
    unit_scratch("wav_trunc", dir, sizeof dir);
    static const char *const names[] = {"w16", "w24", "x16", "sff"};
    for (int k = 0; k < 4; k++) {
        size_t len = 0;
        char rel[64];
        snprintf(rel, sizeof rel, "mono/%s.wav", names[k]);
        uint8_t *p = fixture(rel, &len);
        CHECK(p, "%s", rel);
        snprintf(path, sizeof path, "%s/%s.wav", dir, names[k]);
        CHECK(unit_write_file(path, p, k == 2 ? len - 100 : len) == 0, "write %s", path);
        free(p);
    }
    chute_dataset_options dopt = {0};
    dopt.audio_samples = 64;
    chute_dataset *ds = NULL;
    chute_error e = {0};
    CHECK(chute_dataset_open_ex(dir, &dopt, &ds, &e) == CHUTE_OK, "%s", e.message);
    chute_loader_options o = {0};
    o.batch_size = 4;
    o.workers = 2;
    o.no_shuffle = 1;
    o.fields = "audio";
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    chute_batch *b = NULL;
    int rc = chute_loader_next(ld, &b);
    const char *m = chute_loader_errmsg(ld);
    CHECK(rc == CHUTE_ECORRUPT && strstr(m, "x16.wav@") && strstr(m, "claims"), "%d %s", rc, m);
    chute_loader_destroy(ld);
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    CHECK(chute_loader_create(ds, &o, &ld, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "%s", chute_loader_errmsg(ld));
    chute_batch_release(b);
    chute_stats s;
    chute_loader_stats(ld, &s);
    CHECK(s.corrupt >= 1, "corrupt %llu", (unsigned long long)s.corrupt);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

UNIT_MAIN
