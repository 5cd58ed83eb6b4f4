/*
 * test_stream_fields.c — TFRecord records on streams (issue #13): typed
 * fields from `pipe:`/stdin TFRecord files and from Kafka message values
 * that are framed tf.train.Examples (src/pipeline/stream_tfr.c), and the
 * declared-field parser (fields.h).
 *
 * The data is tests/fixtures/fields/tfr/fields.tfrecord, written by
 * TensorFlow's TFRecordWriter (tests/fixtures/make_fixtures.py); expected
 * values are fixtures/fields/expected.txt, what tf.io.parse_single_example
 * read back (never chute's output).  Pixels must equal, byte for byte,
 * the same record read through the local "tfrecord" format with the same
 * transform, so a stream record means what the file's record means.
 *
 * Kafka (built with librdkafka): the framed records are produced as
 * message values to librdkafka's mock cluster, or to a real broker when
 * CHUTE_TEST_KAFKA_BROKERS names one.
 */
#define _GNU_SOURCE
#include "unit.h"

#include "chute.h"
#include "format/fields.h"
#include "format/parse.h"
#include "format/tfr_saved.h"
#include "pipeline/stream.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef CHUTE_TEST_KAFKA
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <time.h>
#endif

#ifndef CHUTE_PYTHON
#define CHUTE_PYTHON "/usr/bin/python3"
#endif

#define TFR CHUTE_FIXTURES "/fields/tfr/fields.tfrecord"
#define BAD CHUTE_FIXTURES "/fields/tfr_bad/bad.tfrecord"
#define NS 5
#define SZ 16
#define PX (SZ * SZ * 3)
#define DECL "bbox:float32[4], ids:int64[3],weight:float32,meta:bytes,mask.npy:uint8[4x4]"
#define FIELDS "bbox,ids,weight,meta,mask.npy"

static const char *const k_fields[] = {"bbox", "ids", "weight", "meta", "mask.npy"};
#define NF 5

/* ---- expected values (TensorFlow's) ---------------------------------- */

static char exp_hex[NS][NF][256];
static int64_t exp_label[NS];

static int load_expected(void)
{
    FILE *f = fopen(CHUTE_FIXTURES "/fields/expected.txt", "r");
    if (!f)
        return -1;
    char line[1024], ds[32], field[64], val[512];
    int idx, n = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%31s %d %63s %511s", ds, &idx, field, val) == 4 && !strcmp(ds, "tfr") &&
            idx >= 0 && idx < NS) {
            if (!strcmp(field, "label")) {
                exp_label[idx] = atoll(val);
                n++;
            }
            for (int k = 0; k < NF; k++)
                if (!strcmp(field, k_fields[k]) && strlen(val) < sizeof exp_hex[0][0]) {
                    snprintf(exp_hex[idx][k], sizeof exp_hex[0][0], "%s", val);
                    n++;
                }
        }
    fclose(f);
    return n == NS * (NF + 1) ? 0 : -1;
}

/* ---- one epoch, everything collected --------------------------------- */

typedef struct sample {
    int64_t idx, label;
    uint8_t val[NF][64];
    int64_t len[NF];          /* bytes per value (bytes fields: the length) */
    uint8_t px[PX];
} sample;

typedef struct got {
    uint32_t n;
    sample s[64];
    int end_rc;
    uint64_t corrupt;         /* samples skipped as corrupt (stats) */
    char msg[1400];
} got;

/* The field names collect() asks the batch for: the TFRecord ones unless
 * a test points this at another list of NF names. */
static const char *const *g_names = k_fields;

static void opts_base(chute_loader_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 2;
    o->size = SZ;
    o->workers = 2;
    o->dtype = CHUTE_DTYPE_UINT8;
    o->transform = CHUTE_TRANSFORM_EVAL;
    o->no_shuffle = 1;
    o->fields = FIELDS;
    o->field_bytes = 64;
    o->on_corrupt = CHUTE_CORRUPT_FAIL;
    o->seed = 3;
}

static int collect(const char *path, const char *format, const char *decl,
                   const chute_loader_options *o, got *g)
{
    memset(g, 0, sizeof *g);
    chute_dataset_options dso = {0};
    dso.format = format;
    dso.extra_keys = decl;
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open_ex(path, &dso, &ds, &err) != CHUTE_OK) {
        g->end_rc = err.code ? err.code : -1;
        snprintf(g->msg, sizeof g->msg, "open: %s", err.message);
        return -1;
    }
    chute_loader *ld = NULL;
    if (chute_loader_create(ds, o, &ld, &err) != CHUTE_OK) {
        snprintf(g->msg, sizeof g->msg, "create: %s", err.message);
        chute_dataset_close(ds);
        return -1;
    }
    chute_loader_start_epoch(ld, 0, 0);
    chute_batch *b;
    int rc;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        for (uint32_t i = 0; i < v.count && g->n < 64; i++, g->n++) {
            sample *s = &g->s[g->n];
            s->idx = (int64_t)v.indices[i];
            s->label = v.labels[i];
            memcpy(s->px, (uint8_t *)v.data + (size_t)i * PX, PX);
            for (int k = 0; k < NF; k++) {
                chute_field_view fv;
                if (!g_names[k] || chute_batch_field(b, g_names[k], &fv) != CHUTE_OK)
                    continue;
                size_t per = (size_t)(fv.nbytes / v.count);
                if (per > sizeof s->val[k])
                    continue;
                memcpy(s->val[k], (const uint8_t *)fv.data + i * per, per);
                s->len[k] = fv.kind == CHUTE_FIELD_BYTES ? fv.lengths[i] : (int64_t)per;
            }
        }
        chute_batch_release(b);
    }
    g->end_rc = rc;
    chute_stats st;
    chute_loader_stats(ld, &st);
    g->corrupt = st.corrupt;
    snprintf(g->msg, sizeof g->msg, "%s", chute_loader_errmsg(ld));
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

static int hexbyte(const char *p)
{
    int v = 0;
    for (int i = 0; i < 2; i++)
        v = v * 16 + (p[i] <= '9' ? p[i] - '0' : (p[i] | 32) - 'a' + 10);
    return v;
}

/* Sample s (record number `rec` of the file) against TensorFlow's values
 * and the local format's pixels. */
static int check_sample(const sample *s, int64_t rec, const uint8_t *ref_px)
{
    CHECK(rec >= 0 && rec < NS, "record %lld", (long long)rec);
    CHECK(s->label == exp_label[rec], "record %lld: label %lld, want %lld", (long long)rec,
          (long long)s->label, (long long)exp_label[rec]);
    for (int k = 0; k < NF; k++) {
        const char *h = exp_hex[rec][k];
        size_t n = strlen(h) / 2;
        CHECK(s->len[k] == (int64_t)n, "record %lld %s: %lld bytes, want %zu", (long long)rec,
              k_fields[k], (long long)s->len[k], n);
        for (size_t i = 0; i < n; i++)
            CHECK(s->val[k][i] == hexbyte(h + 2 * i), "record %lld %s: byte %zu is %02x, want %.2s",
                  (long long)rec, k_fields[k], i, s->val[k][i], h + 2 * i);
    }
    CHECK(!memcmp(s->px, ref_px, PX), "record %lld: pixels differ from the tfrecord format's",
          (long long)rec);
    return 0;
}

/* The local format's pixels of every record (dataset order = file order). */
static uint8_t ref_px[NS][PX];

static int load_reference(void)
{
    if (load_expected())
        return -1;
    chute_loader_options o;
    opts_base(&o);
    static got g;
    if (collect(CHUTE_FIXTURES "/fields/tfr", NULL, "bbox,ids,weight,meta,mask.npy", &o, &g) ||
        g.end_rc != CHUTE_END || g.n != NS) {
        fprintf(stderr, "reference: %u samples, %s\n", g.n, g.msg);
        return -1;
    }
    for (uint32_t i = 0; i < NS; i++) {
        if (g.s[i].idx != i || check_sample(&g.s[i], i, g.s[i].px))
            return -1; /* the local format itself must agree with TensorFlow */
        memcpy(ref_px[i], g.s[i].px, PX);
    }
    return 0;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

static int no_children(void)
{
    errno = 0;
    return waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD;
}

/* ---- the declared-field parser --------------------------------------- */

TEST(declared_fields_parse_and_refuse_with_a_reason)
{
    ch_field f[8];
    int n = 0;
    chute_error e = {0};
    CHECK(ch_field_decl_parse(DECL ", s:bytes ,t.npy:float64[]", f, 8, &n, &e) == CHUTE_OK, "%s",
          e.message);
    CHECK(n == 7, "%d fields", n);
    CHECK(!strcmp(f[0].name, "bbox") && f[0].kind == CHUTE_FIELD_FLOAT32 && f[0].ndim == 1 &&
              f[0].shape[0] == 4 && f[0].known,
          "bbox");
    CHECK(f[1].kind == CHUTE_FIELD_INT64 && f[1].dtype == CHUTE_DTYPE_INT64 && f[1].shape[0] == 3,
          "ids");
    CHECK(f[2].kind == CHUTE_FIELD_FLOAT32 && f[2].ndim == 0, "weight");
    CHECK(f[3].kind == CHUTE_FIELD_BYTES && f[3].shape[0] == -1, "meta");
    CHECK(f[4].kind == CHUTE_FIELD_TENSOR && f[4].dtype == CHUTE_DTYPE_UINT8 && f[4].ndim == 2 &&
              f[4].shape[0] == 4 && f[4].shape[1] == 4,
          "mask.npy");
    CHECK(f[6].kind == CHUTE_FIELD_TENSOR && f[6].dtype == CHUTE_DTYPE_FLOAT64 && f[6].ndim == 0,
          "t.npy");
    CHECK(ch_field_decl_parse(NULL, f, 8, &n, &e) == CHUTE_OK && n == 0, "NULL is no fields");
    static const struct {
        const char *decl, *why;
    } bad[] = {
        {"bbox", "not NAME:TYPE"},
        {":int64", "empty"},
        {"a:int32", "the type is"},
        {"a:float32[0]", ">= 1"},
        {"a:float32[4x4]", "[N]"},
        {"a:float32[]", "[N]"},
        {"a:bytes[3]", "no shape"},
        {"a.npy:uint8", "needs a shape"},
        {"a.npy:bytes[3]", "a dtype"},
        {"a.npy:uint8[3x]", "ends with"},
        {"a.npy:uint8[3,4]", "separated"},
        {"a.npy:uint8[3x4", "[D0xD1"},
        {"a.npy:uint8[99999999999]", "2^31"},
        {"a.npy:float64[2147483647x2147483647x2147483647]", "2^40"},
        {"a.npy:uint8[1x1x1x1x1x1x1x1x1]", "8 dimensions"},
        {"a:int64,b:bytes,a:float32", "twice"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        e.message[0] = 0;
        CHECK(ch_field_decl_parse(bad[k].decl, f, 8, &n, &e) == CHUTE_EINVAL, "%s accepted",
              bad[k].decl);
        CHECK(strstr(e.message, bad[k].why) && strstr(e.message, "extra_keys"),
              "%s: message '%s' lacks '%s'", bad[k].decl, e.message, bad[k].why);
    }
    CHECK(ch_field_decl_parse("a:int64,b:int64,c:int64", f, 2, &n, &e) == CHUTE_EINVAL &&
              strstr(e.message, "more than 2"),
          "%s", e.message);
    return 0;
}

/* ---- pipe: and stdin --------------------------------------------------- */

TEST(tfrecord_on_a_pipe_gives_tensorflows_values_and_the_files_pixels)
{
    CHECK(load_reference() == 0, "reference");
    int fds = count_fds();
    chute_loader_options o;
    opts_base(&o);
    static got g;
    collect("pipe:cat " TFR, "tfrecord", DECL, &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == NS, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    for (uint32_t i = 0; i < g.n; i++) {
        CHECK(g.s[i].idx == i, "sample %u has input position %lld", i, (long long)g.s[i].idx);
        CHECK_OK(check_sample(&g.s[i], i, ref_px[i]));
    }
    /* Shuffled through the buffer, 1 worker: the same records, each once. */
    o.no_shuffle = 0;
    o.shuffle_buffer = 4;
    o.workers = 1;
    collect("pipe:cat " TFR, "tfrecord", DECL, &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == NS, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    unsigned seen = 0;
    for (uint32_t i = 0; i < g.n; i++) {
        CHECK_OK(check_sample(&g.s[i], g.s[i].idx, ref_px[g.s[i].idx]));
        seen |= 1u << g.s[i].idx;
    }
    CHECK(seen == (1u << NS) - 1, "records seen: %x", seen);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

TEST(tfrecord_on_stdin)
{
    CHECK(load_reference() == 0, "reference");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        FILE *f = fopen(TFR, "rb");
        if (!f || dup2(fileno(f), 0) < 0)
            _exit(2);
        chute_loader_options o;
        opts_base(&o);
        static got g;
        collect("-", "tfrecord", DECL, &o, &g);
        if (g.end_rc != CHUTE_END || g.n != NS)
            _exit(3);
        for (uint32_t i = 0; i < g.n; i++)
            if (g.s[i].idx != i || check_sample(&g.s[i], i, ref_px[i]))
                _exit(4);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stdin driver failed (status %d)", st);
    return 0;
}

/* The file's record offsets, from its framing (TensorFlow wrote it). */
static int record_offsets(const char *path, uint64_t *off, int max, int *n, uint8_t **bytes,
                          size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *bytes = malloc(*len);
    if (!*bytes || fread(*bytes, 1, *len, f) != *len) {
        fclose(f);
        return -1;
    }
    fclose(f);
    *n = 0;
    for (uint64_t p = 0; p + 16 <= *len && *n < max;) {
        uint64_t l = 0;
        for (int i = 7; i >= 0; i--)
            l = l << 8 | (*bytes)[p + (uint64_t)i];
        off[(*n)++] = p;
        p += 16 + l;
    }
    off[*n] = *len;
    return 0;
}

static int write_file(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

TEST(damaged_tfrecord_streams_fail_at_the_record_with_a_reason)
{
    CHECK(load_reference() == 0, "reference");
    int fds = count_fds();
    uint64_t off[16];
    int nrec = 0;
    uint8_t *bytes = NULL;
    size_t len = 0;
    CHECK(record_offsets(TFR, off, 15, &nrec, &bytes, &len) == 0 && nrec == NS, "framing");
    char dir[] = "/tmp/chute-stream-fields-XXXXXX", path[256], cmd[600];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof path, "%s/x.tfrecord", dir);
    chute_loader_options o;
    opts_base(&o);
    o.batch_size = 1;
    o.workers = 1;
    static got g;

    /* A data byte of record 2 flipped: records 0 and 1, then the record's
     * error (its framing holds, so it is content: the policy's). */
    uint8_t *cp = malloc(len);
    memcpy(cp, bytes, len);
    cp[off[2] + 20] ^= 0x40;
    CHECK(write_file(path, cp, len) == 0, "write");
    snprintf(cmd, sizeof cmd, "pipe:cat %s", path);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.n == 2 && g.end_rc == CHUTE_ECORRUPT, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    char want[128];
    snprintf(want, sizeof want, "@%llu (sample 'record 2'): TFRecord data CRC mismatch",
             (unsigned long long)off[2]);
    CHECK(strstr(g.msg, want), "'%s' lacks '%s'", g.msg, want);
    /* The same under skip: counted, the other four delivered. */
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    o.batch_size = 5;
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == 5, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    for (uint32_t i = 0; i < g.n; i++) {
        CHECK(g.s[i].idx != 2, "the damaged record was delivered");
        CHECK_OK(check_sample(&g.s[i], g.s[i].idx, ref_px[g.s[i].idx]));
    }
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    o.batch_size = 1;

    /* Record 3's length field damaged: framing is lost, the stream ends
     * with ECORRUPT at its offset after the three records before it. */
    memcpy(cp, bytes, len);
    cp[off[3] + 1] ^= 0x01;
    CHECK(write_file(path, cp, len) == 0, "write");
    collect(cmd, "tfrecord", DECL, &o, &g);
    snprintf(want, sizeof want, "@%llu: TFRecord length CRC mismatch (framing lost)",
             (unsigned long long)off[3]);
    CHECK(g.n == 3 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, want), "%u samples, rc %d: %s",
          g.n, g.end_rc, g.msg);

    /* Not a TFRecord stream at all: EFORMAT at offset 0. */
    collect("pipe:echo 'this is not a TFRecord stream, not at all'", "tfrecord", DECL, &o, &g);
    CHECK(g.n == 0 && g.end_rc == CHUTE_EFORMAT && strstr(g.msg, "@0: TFRecord length CRC"),
          "rc %d: %s", g.end_rc, g.msg);

    /* Cut inside record 3; then the same from a command that fails. */
    snprintf(cmd, sizeof cmd, "pipe:head -c %llu %s", (unsigned long long)(off[3] + 30), TFR);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.n == 3 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "truncated TFRecord record"),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    snprintf(cmd, sizeof cmd, "pipe:head -c %llu %s; echo 'gsutil: 503' >&2; exit 4",
             (unsigned long long)(off[3] + 30), TFR);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.n == 3 && g.end_rc == CHUTE_EIO && strstr(g.msg, "exited with status 4") &&
              strstr(g.msg, "gsutil: 503"),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);

    /* A record over max_sample_bytes is read past and is the policy's. */
    o.max_sample_bytes = off[1] - off[0] - 1;
    snprintf(cmd, sizeof cmd, "pipe:cat %s", TFR);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "over max_sample_bytes"), "rc %d: %s",
          g.end_rc, g.msg);
    o.max_sample_bytes = 0;

    free(cp);
    free(bytes);
    unlink(path);
    rmdir(dir);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

TEST(records_that_disagree_with_the_declaration_name_the_field)
{
    CHECK(load_reference() == 0, "reference");
    chute_loader_options o;
    opts_base(&o);
    o.batch_size = 1;
    o.workers = 1;
    static got g;
    /* bad.tfrecord: record 1's bbox has 3 values, record 2's mask is 4x3:
     * a list or tensor of another shape is refused (CHUTE_EINVAL, never
     * skipped), naming both shapes. */
    collect("pipe:cat " BAD, "tfrecord", DECL, &o, &g);
    CHECK(g.n == 1 && g.end_rc == CHUTE_EINVAL, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    CHECK(strstr(g.msg, "(sample 'record 1')") &&
              strstr(g.msg, "field \"bbox\": this sample's value is a float_list of 3 values, "
                            "but the field is float32[4] (as declared in extra_keys)"),
          "%s", g.msg);
    /* A declared key that no record has, and a mis-declared dtype. */
    o.fields = "nope";
    collect("pipe:cat " TFR, "tfrecord", "bbox:float32[4],nope:int64", &o, &g);
    CHECK(g.n == 0 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "feature \"nope\": missing"),
          "rc %d: %s", g.end_rc, g.msg);
    o.fields = "mask.npy";
    collect("pipe:cat " TFR, "tfrecord", "mask.npy:int16[4x4]", &o, &g);
    CHECK(g.n == 0 && g.end_rc == CHUTE_EINVAL && strstr(g.msg, "mask.npy") &&
              strstr(g.msg, "a .npy of uint8[4,4], but the field is int16[4,4]"),
          "rc %d: %s", g.end_rc, g.msg);
    /* A TFRecord declaration on a tar stream (format unset: WebDataset), a
     * bad declaration, a wrong format name. */
    chute_dataset_options dso = {0};
    chute_dataset *ds = NULL;
    chute_error e = {0};
    dso.extra_keys = "bbox:float32[4]";
    CHECK(chute_dataset_open_ex("pipe:cat " TFR, &dso, &ds, &e) == CHUTE_EINVAL &&
              strstr(e.message, "reads a .bbox member as bytes"),
          "%s", e.message);
    dso.format = "tfrecord";
    dso.extra_keys = "bbox:float32";
    CHECK(chute_dataset_open_ex("pipe:cat " TFR, &dso, &ds, &e) == CHUTE_OK, "%s", e.message);
    chute_field_info fi;
    CHECK(chute_dataset_num_fields(ds) == 1 && chute_dataset_field_info(ds, 0, &fi) == CHUTE_OK &&
              !strcmp(fi.name, "bbox") && fi.ndim == 0,
          "declared field info");
    chute_dataset_close(ds);
    dso.extra_keys = "bbox:float32[4";
    CHECK(chute_dataset_open_ex("pipe:cat " TFR, &dso, &ds, &e) == CHUTE_EINVAL &&
              strstr(e.message, "item 1"),
          "%s", e.message);
    dso.extra_keys = NULL;
    dso.format = "csv";
    CHECK(chute_dataset_open_ex("pipe:cat " TFR, &dso, &ds, &e) == CHUTE_EINVAL &&
              strstr(e.message, "format \"csv\""),
          "%s", e.message);
    CHECK(no_children(), "a child is left");
    return 0;
}

/* ---- GZIP/ZLIB TFRecord streams ------------------------------------------
 * Compressed by real tools: the gzip command (-n: no name in the header,
 * so the first deflate byte is at offset 10) and Python's zlib module. */

#define ZLIB_CMD CHUTE_PYTHON " -c 'import sys,zlib; sys.stdout.buffer.write(zlib.compress(" \
                 "open(sys.argv[1],\"rb\").read()))' "

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Every sample of g is record i of the file, in order, TensorFlow's values. */
static int all_in_order(const got *g)
{
    CHECK(g->end_rc == CHUTE_END && g->n == NS, "%u samples, rc %d: %s", g->n, g->end_rc, g->msg);
    for (uint32_t i = 0; i < g->n; i++) {
        CHECK(g->s[i].idx == i, "sample %u has input position %lld", i, (long long)g->s[i].idx);
        CHECK_OK(check_sample(&g->s[i], i, ref_px[i]));
    }
    return 0;
}

/* The number after the first "@" in msg (the stream's byte offset). */
static long long at_offset(const char *msg)
{
    const char *a = strchr(msg, '@');
    return a ? strtoll(a + 1, NULL, 10) : -1;
}

TEST(gzip_and_zlib_streams_give_the_plain_streams_samples)
{
    CHECK(load_reference() == 0, "reference");
    CHECK(access(CHUTE_PYTHON, X_OK) == 0, "%s is needed to write ZLIB data", CHUTE_PYTHON);
    int fds = count_fds();
    uint64_t off[16];
    int nrec = 0;
    uint8_t *bytes = NULL;
    size_t len = 0;
    CHECK(record_offsets(TFR, off, 15, &nrec, &bytes, &len) == 0 && nrec == NS, "framing");
    free(bytes);
    chute_loader_options o;
    opts_base(&o);
    static got g;
    char cmd[1024];
    collect("pipe:gzip -nc " TFR, "tfrecord", DECL, &o, &g);
    CHECK_OK(all_in_order(&g));
    collect("pipe:" ZLIB_CMD TFR, "tfrecord", DECL, &o, &g);
    CHECK_OK(all_in_order(&g));
    /* Three gzip members, cut inside records 1 and 3 (gzip -c's
     * concatenation is one stream), shuffled through the buffer. */
    snprintf(cmd, sizeof cmd,
             "pipe:head -c %llu %s | gzip -c; head -c %llu %s | tail -c +%llu | gzip -1c; "
             "tail -c +%llu %s | gzip -9c",
             (unsigned long long)(off[1] + 7), TFR, (unsigned long long)(off[3] + 20), TFR,
             (unsigned long long)(off[1] + 8), (unsigned long long)(off[3] + 21), TFR);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK_OK(all_in_order(&g));
    o.no_shuffle = 0;
    o.shuffle_buffer = 4;
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == NS, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    unsigned seen = 0;
    for (uint32_t i = 0; i < g.n; i++) {
        CHECK_OK(check_sample(&g.s[i], g.s[i].idx, ref_px[g.s[i].idx]));
        seen |= 1u << g.s[i].idx;
    }
    CHECK(seen == (1u << NS) - 1, "records seen: %x", seen);
    /* Two ZLIB streams back to back are one stream too. */
    snprintf(cmd, sizeof cmd,
             "pipe:head -c %llu %s | " ZLIB_CMD "/dev/stdin; tail -c +%llu %s | " ZLIB_CMD
             "/dev/stdin",
             (unsigned long long)(off[2] + 3), TFR, (unsigned long long)(off[2] + 4), TFR);
    opts_base(&o);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK_OK(all_in_order(&g));

    /* stdin: a .gz file. */
    char dir[] = "/tmp/chute-stream-gz-XXXXXX", gz[256];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(gz, sizeof gz, "%s/x.tfrecord.gz", dir);
    snprintf(cmd, sizeof cmd, "gzip -nc %s > %s", TFR, gz);
    CHECK(system(cmd) == 0, "%s", cmd);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        FILE *f = fopen(gz, "rb");
        if (!f || dup2(fileno(f), 0) < 0)
            _exit(2);
        chute_loader_options oc;
        opts_base(&oc);
        static got gc;
        collect("-", "tfrecord", DECL, &oc, &gc);
        _exit(all_in_order(&gc) ? 3 : 0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stdin driver failed (status %d)", st);
    unlink(gz);
    rmdir(dir);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

/* TensorFlow's own GZIP and ZLIB files (TFRecordOptions), piped: the same
 * records, byte for byte and at the same (uncompressed) offsets, as its
 * plain file through the pipe reader. */
TEST(tensorflows_gzip_and_zlib_files_through_a_pipe_are_its_plain_records)
{
    int fds = count_fds();
    uint64_t off[64];
    int nrec = 0;
    uint8_t *plain = NULL;
    size_t len = 0;
    CHECK(record_offsets(CHUTE_FIXTURES "/plain.tfrecord", off, 63, &nrec, &plain, &len) == 0 &&
              nrec > 1,
          "plain.tfrecord framing");
    static const char *const srcs[] = {"cat " CHUTE_FIXTURES "/plain.tfrecord",
                                       "cat " CHUTE_FIXTURES "/gzip.tfrecord.gz",
                                       "cat " CHUTE_FIXTURES "/zlib.tfrecord.zz"};
    uint64_t bad_mask[3] = {0};
    for (size_t k = 0; k < sizeof srcs / sizeof *srcs; k++) {
        ch_stream_spec spec;
        memset(&spec, 0, sizeof spec);
        spec.cmd = (char *)srcs[k];
        spec.name = (char *)srcs[k];
        spec.tfr = 1;
        spec.keys[0] = "image";
        spec.keys[1] = "label";
        void *r = NULL;
        chute_error e = {0};
        CHECK(ch_stream_tfr_ops.open(&spec, 0, 10000, 1u << 20, &r, &e) == CHUTE_OK, "%s: %s",
              srcs[k], e.message);
        ch_stream_rec rec;
        memset(&rec, 0, sizeof rec);
        int n = 0, rc;
        while ((rc = ch_stream_tfr_ops.next(r, &rec, &e)) == CHUTE_OK) {
            CHECK(n < nrec, "%s: more records than plain.tfrecord's %d", srcs[k], nrec);
            size_t whole = (size_t)(off[n + 1] - off[n]);
            CHECK(rec.offset == off[n] && rec.ordinal == (uint64_t)n, "%s: record %d at %llu",
                  srcs[k], n, (unsigned long long)rec.offset);
            /* The framed record is data[0, whole) (rec.len is the
             * image's once checked; some of TF's records have labels
             * out of range, marked bad, as from the plain file). */
            CHECK(rec.data.cap >= whole && !memcmp(rec.data.data, plain + off[n], whole) &&
                      (rec.bad || rec.ex_off + rec.ex_len + 4 == whole),
                  "%s: record %d differs from plain.tfrecord's (%s)", srcs[k], n, rec.why);
            bad_mask[k] |= (uint64_t)(rec.bad != 0) << n;
            n++;
        }
        CHECK(rc == CHUTE_END && n == nrec, "%s: %d records, rc %d: %s", srcs[k], n, rc,
              e.message);
        ch_stream_tfr_ops.close(r);
        ch_buf_free(&rec.data);
        CHECK(bad_mask[k] == bad_mask[0], "%s: bad records %llx, plain %llx", srcs[k],
              (unsigned long long)bad_mask[k], (unsigned long long)bad_mask[0]);
    }
    free(plain);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

/* ---- a plain record whose length looks like gzip/zlib magic ---------- */

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (uint8_t)(v & 0x7f) | (v >= 0x80 ? 0x80 : 0);
        v >>= 7;
    } while (v);
    return n;
}

/* A field (tag, length, bytes) of a protobuf message into p. */
static size_t put_field(uint8_t *p, int tag, const uint8_t *v, size_t n)
{
    size_t k = 0;
    p[k++] = (uint8_t)(tag << 3 | 2);
    k += put_varint(p + k, n);
    memmove(p + k, v, n);
    return k + n;
}

/* A framed TFRecord record of exactly `length` data bytes: an Example
 * with one bytes feature "image" of filler. */
static size_t framed_of_length(uint8_t *out, size_t length)
{
    static uint8_t a[1 << 17], b[1 << 17];
    for (size_t img = length > 64 ? length - 64 : 1;; img++) {
        memset(a, 0x5a, img);
        size_t n = put_field(b, 1, a, img);              /* BytesList.value */
        n = put_field(a, 1, b, n);                       /* Feature.bytes_list */
        size_t e = put_field(b, 1, (const uint8_t *)"image", 5);
        e += put_field(b + e, 2, a, n);                  /* map entry */
        n = put_field(a, 1, b, e);                       /* Features.feature */
        n = put_field(b, 1, a, n);                       /* Example.features */
        if (n < length)
            continue;
        if (n > length)
            return 0;
        for (int i = 0; i < 8; i++)
            out[i] = (uint8_t)((uint64_t)length >> (8 * i));
        uint32_t c = ch_crc32c_mask(ch_crc32c(0, out, 8));
        memcpy(out + 12, b, n);
        uint32_t d = ch_crc32c_mask(ch_crc32c(0, b, n));
        for (int i = 0; i < 4; i++) {
            out[8 + i] = (uint8_t)(c >> (8 * i));
            out[12 + n + (size_t)i] = (uint8_t)(d >> (8 * i));
        }
        return n + 16;
    }
}

/* A plain stream whose first length starts 1f 8b (gzip) or 78 9c (zlib):
 * its length CRC holds, so it is plain, as a file would be. */
TEST(a_plain_stream_that_starts_like_gzip_magic_is_plain)
{
    static const size_t lengths[] = {0x8b1f, 0x9c78};
    static uint8_t rec_bytes[1 << 17];
    char dir[] = "/tmp/chute-stream-gz-XXXXXX", path[256], cmd[400];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof path, "%s/magic.tfrecord", dir);
    for (size_t k = 0; k < 2; k++) {
        size_t n = framed_of_length(rec_bytes, lengths[k]);
        CHECK(n == lengths[k] + 16, "record of %zu bytes: %zu", lengths[k], n);
        CHECK(ch_tfx_compression(rec_bytes, 12) != 0, "the first bytes look compressed");
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(rec_bytes, 1, n, f) == n && fwrite(rec_bytes, 1, n, f) == n, "write");
        fclose(f);
        snprintf(cmd, sizeof cmd, "cat %s", path);
        ch_stream_spec spec;
        memset(&spec, 0, sizeof spec);
        spec.cmd = cmd;
        spec.name = cmd;
        spec.tfr = 1;
        spec.keys[0] = "image";
        spec.keys[1] = "label";
        void *r = NULL;
        chute_error e = {0};
        CHECK(ch_stream_tfr_ops.open(&spec, 0, 10000, 1u << 20, &r, &e) == CHUTE_OK, "%s",
              e.message);
        ch_stream_rec rec;
        memset(&rec, 0, sizeof rec);
        int got = 0, rc;
        while ((rc = ch_stream_tfr_ops.next(r, &rec, &e)) == CHUTE_OK) {
            CHECK(!rec.bad && rec.offset == got * n && !memcmp(rec.data.data, rec_bytes, n) &&
                      !strstr(rec.key, "uncompressed"),
                  "record %d: %s", got, rec.why);
            got++;
        }
        CHECK(rc == CHUTE_END && got == 2, "%d records, rc %d: %s", got, rc, e.message);
        ch_stream_tfr_ops.close(r);
        ch_buf_free(&rec.data);
    }
    unlink(path);
    rmdir(dir);
    return 0;
}

TEST(damaged_gzip_streams_fail_naming_the_compressed_offset)
{
    CHECK(load_reference() == 0, "reference");
    int fds = count_fds();
    uint64_t off[16];
    int nrec = 0;
    uint8_t *bytes = NULL;
    size_t len = 0;
    CHECK(record_offsets(TFR, off, 15, &nrec, &bytes, &len) == 0 && nrec == NS, "framing");
    char dir[] = "/tmp/chute-stream-gz-XXXXXX", a[256], b[256], ab[256], cmd[1024];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(a, sizeof a, "%s/a.gz", dir);
    snprintf(b, sizeof b, "%s/b.gz", dir);
    snprintf(ab, sizeof ab, "%s/ab.gz", dir);
    /* Member a: records 0-1, member b: records 2-4. */
    snprintf(cmd, sizeof cmd, "head -c %llu %s | gzip -nc > %s && tail -c +%llu %s | gzip -nc > %s",
             (unsigned long long)off[2], TFR, a, (unsigned long long)(off[2] + 1), TFR, b);
    CHECK(system(cmd) == 0, "%s", cmd);
    long la = file_size(a), lb = file_size(b);
    CHECK(la > 18 && lb > 18, "gzip sizes %ld %ld", la, lb);
    uint8_t *cp = malloc((size_t)(la + lb) + len); /* room for the plain bytes too */
    CHECK(cp, "malloc");
    FILE *f = fopen(a, "rb");
    CHECK(f && fread(cp, 1, (size_t)la, f) == (size_t)la, "read a");
    fclose(f);
    f = fopen(b, "rb");
    CHECK(f && fread(cp + la, 1, (size_t)lb, f) == (size_t)lb, "read b");
    fclose(f);
    chute_loader_options o;
    opts_base(&o);
    o.batch_size = 1;
    o.workers = 1;
    static got g;
    long long at;

    /* Member b's first deflate byte made an invalid block type (BTYPE 3):
     * records 0-1, then ECORRUPT at b's offset with zlib's message. */
    cp[la + 10] |= 0x06;
    CHECK(write_file(ab, cp, (size_t)(la + lb)) == 0, "write");
    snprintf(cmd, sizeof cmd, "pipe:cat %s", ab);
    collect(cmd, "tfrecord", DECL, &o, &g);
    at = at_offset(g.msg);
    CHECK(g.n == 2 && g.end_rc == CHUTE_ECORRUPT &&
              strstr(g.msg, "(compressed): damaged GZIP data: invalid block type") &&
              at >= la + 10 && at <= la + 12,
          "%u samples, rc %d: %s (corrupt byte at %ld)", g.n, g.end_rc, g.msg, la + 10);
    /* Under skip the stream is still lost: deflate cannot resynchronise. */
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.n == 2 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "invalid block type"),
          "skip: %u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    f = fopen(b, "rb"); /* member b as gzip wrote it */
    CHECK(f && fread(cp + la, 1, 16, f) == 16, "reread b");
    fclose(f);

    /* Member a's CRC-32 (its trailer) damaged: the data inflates, and
     * zlib's check fails at the member's end, before b (in the inflate
     * call that gives record 1's last bytes, so record 1 may go too). */
    cp[la - 8] ^= 0x01;
    CHECK(write_file(ab, cp, (size_t)(la + lb)) == 0, "write");
    collect(cmd, "tfrecord", DECL, &o, &g);
    at = at_offset(g.msg);
    CHECK(g.n >= 1 && g.n <= 2 && g.end_rc == CHUTE_ECORRUPT &&
              strstr(g.msg, "incorrect data check") &&
              at > la - 8 && at <= la,
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    cp[la - 8] ^= 0x01;

    /* Cut inside member b: records 0-1 (and any b inflated whole), then
     * the truncation, not a clean end; from a failing command, its status. */
    snprintf(cmd, sizeof cmd, "pipe:head -c %ld %s", la + lb - 30, ab);
    CHECK(write_file(ab, cp, (size_t)(la + lb)) == 0, "write");
    collect(cmd, "tfrecord", DECL, &o, &g);
    snprintf(a, sizeof a, "@%ld (compressed): the GZIP stream ends early (truncated)",
             la + lb - 30);
    CHECK(g.n >= 2 && g.n < NS && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, a),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    snprintf(cmd, sizeof cmd, "pipe:head -c %ld %s; echo 'gsutil: 503' >&2; exit 4", la + lb - 30,
             ab);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.n >= 2 && g.n < NS && g.end_rc == CHUTE_EIO && strstr(g.msg, "exited with status 4") &&
              strstr(g.msg, "gsutil: 503"),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    /* A cut inside a header byte of member b (1 byte of it). */
    snprintf(cmd, sizeof cmd, "pipe:head -c %ld %s", la + 1, ab);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.n == 2 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "ends early (truncated)"),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);

    /* Trailing garbage after the last member. */
    snprintf(cmd, sizeof cmd, "pipe:cat %s; echo trailing garbage", ab);
    collect(cmd, "tfrecord", DECL, &o, &g);
    CHECK(g.n == NS && g.end_rc == CHUTE_ECORRUPT && at_offset(g.msg) >= la + lb &&
              strstr(g.msg, "damaged GZIP data"),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);

    /* Inflated bytes that are not TFRecord: EFORMAT at (uncompressed) 0. */
    collect("pipe:echo 'this is not a TFRecord stream, not at all' | gzip -c", "tfrecord", DECL,
            &o, &g);
    CHECK(g.n == 0 && g.end_rc == CHUTE_EFORMAT &&
              strstr(g.msg, "@0 (uncompressed): TFRecord length CRC mismatch (not a TFRecord"),
          "rc %d: %s", g.end_rc, g.msg);

    /* Record-level checks apply to the inflated bytes, at their offsets:
     * a data byte of record 2 flipped before compressing. */
    memcpy(cp, bytes, len);
    cp[off[2] + 20] ^= 0x40;
    CHECK(write_file(ab, cp, len) == 0, "write");
    snprintf(cmd, sizeof cmd, "pipe:gzip -c %s", ab);
    collect(cmd, "tfrecord", DECL, &o, &g);
    snprintf(a, sizeof a,
             "@%llu (sample 'record 2, uncompressed offset'): TFRecord data CRC mismatch",
             (unsigned long long)off[2]);
    CHECK(g.n == 2 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, a), "%u samples, rc %d: %s",
          g.n, g.end_rc, g.msg);
    /* ... and a truncated TFRecord inside a complete gzip stream. */
    snprintf(cmd, sizeof cmd, "pipe:head -c %llu %s | gzip -c", (unsigned long long)(off[3] + 30),
             TFR);
    collect(cmd, "tfrecord", DECL, &o, &g);
    snprintf(a, sizeof a, "@%llu (uncompressed): truncated TFRecord record",
             (unsigned long long)off[3]);
    CHECK(g.n == 3 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, a), "%u samples, rc %d: %s",
          g.n, g.end_rc, g.msg);

    free(cp);
    free(bytes);
    unlink(ab);
    snprintf(a, sizeof a, "%s/a.gz", dir);
    unlink(a);
    unlink(b);
    rmdir(dir);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

/* ---- WebDataset tar streams (stream_tar.c) ---------------------------
 * fixtures/fields/wds: two shards webdataset's ShardWriter wrote (.jpg
 * .cls .json .txt .npy .ids.npy); expected.txt's "wds" lines are what
 * webdataset and numpy read back.  A stream must give those values, and
 * the values and pixels the "wds" format gives for the same tars. */

#define WDIR CHUTE_FIXTURES "/fields/wds"
#define W0 WDIR "/fields-000000.tar"
#define W1 WDIR "/fields-000001.tar"
#define WBAD CHUTE_FIXTURES "/fields/wds_bad"
#define WNS 6
#define WDECL "cls:int64, json:bytes,txt:bytes,npy:float32[2x3] ,ids.npy:int64[4]"
#define WFIELDS "cls,json,txt,npy,ids.npy"

static const char *const k_wfields[NF] = {"cls", "json", "txt", "npy", "ids.npy"};
static const char *const k_npy_only[NF] = {NULL, NULL, NULL, "npy", NULL};
static char wexp_hex[WNS][NF][256];
static int64_t wexp_label[WNS];
static char wbad_hex[5][256]; /* wds_bad: the npy of samples 0 and 4 */

static int load_wds_expected(void)
{
    FILE *f = fopen(CHUTE_FIXTURES "/fields/expected.txt", "r");
    if (!f)
        return -1;
    char line[1024], ds[32], field[64], val[512];
    int idx, n = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%31s %d %63s %511s", ds, &idx, field, val) != 4 || idx < 0 ||
            strlen(val) >= sizeof wexp_hex[0][0])
            continue;
        if (!strcmp(ds, "wds_bad") && idx < 5 && !strcmp(field, "npy")) {
            snprintf(wbad_hex[idx], sizeof wbad_hex[0], "%s", val);
            n++;
        }
        if (strcmp(ds, "wds") != 0 || idx >= WNS)
            continue;
        if (!strcmp(field, "label")) {
            wexp_label[idx] = atoll(val);
            n++;
        }
        for (int k = 0; k < NF; k++)
            if (!strcmp(field, k_wfields[k])) {
                snprintf(wexp_hex[idx][k], sizeof wexp_hex[0][0], "%s", val);
                n++;
            }
    }
    fclose(f);
    return n == WNS * (NF + 1) + 2 ? 0 : -1;
}

/* A value against its expected hex (the bytes numpy/webdataset gave). */
static int check_hex(const sample *s, int k, const char *h, const char *what)
{
    size_t n = strlen(h) / 2;
    CHECK(s->len[k] == (int64_t)n, "%s: %lld bytes, want %zu", what, (long long)s->len[k], n);
    for (size_t i = 0; i < n; i++)
        CHECK(s->val[k][i] == hexbyte(h + 2 * i), "%s: byte %zu is %02x, want %.2s", what, i,
              s->val[k][i], h + 2 * i);
    return 0;
}

static int check_wsample(const sample *s, int64_t i, const sample *file)
{
    CHECK(i >= 0 && i < WNS, "sample %lld", (long long)i);
    CHECK(s->label == wexp_label[i], "sample %lld: label %lld, want %lld", (long long)i,
          (long long)s->label, (long long)wexp_label[i]);
    for (int k = 0; k < NF; k++) {
        char what[64];
        snprintf(what, sizeof what, "sample %lld .%s", (long long)i, k_wfields[k]);
        CHECK_OK(check_hex(s, k, wexp_hex[i][k], what));
        if (file)
            CHECK(s->len[k] == file->len[k] && !memcmp(s->val[k], file->val[k], (size_t)s->len[k]),
                  "%s differs from the wds format's", what);
    }
    if (file)
        CHECK(!memcmp(s->px, file->px, PX), "sample %lld: pixels differ from the wds format's",
              (long long)i);
    return 0;
}

static void wopts(chute_loader_options *o)
{
    opts_base(o);
    o->fields = WFIELDS;
    g_names = k_wfields;
}

/* The wds format's samples of the same tars (checked against webdataset). */
static got g_wfile;

static int load_wds_reference(void)
{
    if (load_wds_expected())
        return -1;
    chute_loader_options o;
    wopts(&o);
    if (collect(WDIR, "wds", NULL, &o, &g_wfile) || g_wfile.end_rc != CHUTE_END ||
        g_wfile.n != WNS) {
        fprintf(stderr, "wds reference: %u samples, %s\n", g_wfile.n, g_wfile.msg);
        return -1;
    }
    for (uint32_t i = 0; i < WNS; i++)
        if (g_wfile.s[i].idx != i || check_wsample(&g_wfile.s[i], i, NULL))
            return -1;
    return 0;
}

TEST(tar_stream_fields_equal_webdatasets_and_the_wds_formats)
{
    CHECK(load_wds_reference() == 0, "reference");
    int fds = count_fds();
    chute_loader_options o;
    wopts(&o);
    static got g;
    /* Format unset (a tar stream) and "wds" named: the same. */
    for (int named = 0; named < 2; named++) {
        collect("pipe:cat " W0 " " W1, named ? "wds" : NULL, WDECL, &o, &g);
        CHECK(g.end_rc == CHUTE_END && g.n == WNS, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
        for (uint32_t i = 0; i < g.n; i++) {
            CHECK(g.s[i].idx == i, "sample %u has input position %lld", i, (long long)g.s[i].idx);
            CHECK_OK(check_wsample(&g.s[i], i, &g_wfile.s[i]));
        }
    }
    /* Shuffled through the buffer, 1 worker, only some fields asked. */
    o.no_shuffle = 0;
    o.shuffle_buffer = 4;
    o.workers = 1;
    collect("pipe:cat " W0 " " W1, NULL, WDECL, &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == WNS, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    unsigned seen = 0;
    for (uint32_t i = 0; i < g.n; i++) {
        CHECK_OK(check_wsample(&g.s[i], g.s[i].idx, &g_wfile.s[g.s[i].idx]));
        seen |= 1u << g.s[i].idx;
    }
    CHECK(seen == (1u << WNS) - 1, "samples seen: %x", seen);
    o.fields = "npy";
    g_names = k_npy_only;
    collect("pipe:cat " W0 " " W1, NULL, WDECL, &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == WNS, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    for (uint32_t i = 0; i < g.n; i++)
        CHECK_OK(check_hex(&g.s[i], 3, wexp_hex[g.s[i].idx][3], "npy alone"));
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

TEST(tar_stream_fields_on_stdin)
{
    CHECK(load_wds_reference() == 0, "reference");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        FILE *f = fopen(W0, "rb");
        if (!f || dup2(fileno(f), 0) < 0)
            _exit(2);
        chute_loader_options o;
        wopts(&o);
        static got g;
        collect("-", NULL, WDECL, &o, &g);
        if (g.end_rc != CHUTE_END || g.n != 4) /* the first shard holds 4 */
            _exit(3);
        for (uint32_t i = 0; i < g.n; i++)
            if (g.s[i].idx != i || check_wsample(&g.s[i], i, &g_wfile.s[i]))
                _exit(4);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stdin driver failed (status %d)", st);
    return 0;
}

TEST(tar_stream_fields_that_disagree_are_the_policys)
{
    CHECK(load_wds_reference() == 0, "reference");
    int fds = count_fds();
    chute_loader_options o;
    opts_base(&o);
    o.fields = "npy";
    g_names = k_npy_only;
    o.batch_size = 1;
    o.workers = 1;
    static got g, file;
    /* wds_bad: sample 1's .npy is 3x2, sample 2's magic is broken, sample
     * 3's .json is 312 bytes.  A .npy of another shape is not damage: the
     * epoch fails with CHUTE_EINVAL naming both shapes, under either
     * policy, on the stream as in the wds format (never replaced). */
    collect("pipe:cat " WBAD "/bad-000000.tar", NULL, "npy:float32[2x3],json:bytes", &o, &g);
    CHECK(g.n == 1 && g.end_rc == CHUTE_EINVAL, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    CHECK(strstr(g.msg, "(sample 'b00001')") &&
              strstr(g.msg, "field \"npy\": this sample's value is a .npy of float32[3,2], but "
                            "the field is float32[2,3] (as declared in extra_keys)"),
          "%s", g.msg);
    CHECK_OK(check_hex(&g.s[0], 3, wbad_hex[0], "b00000 .npy"));
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    o.batch_size = 5;
    collect("pipe:cat " WBAD "/bad-000000.tar", NULL, "npy:float32[2x3],json:bytes", &o, &g);
    CHECK(g.n == 0 && g.end_rc == CHUTE_EINVAL && strstr(g.msg, "(sample 'b00001')") &&
              strstr(g.msg, "float32[3,2]"),
          "skip: %u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    collect(WBAD, "wds", NULL, &o, &file);
    CHECK(file.n == 0 && file.end_rc == CHUTE_EINVAL && strstr(file.msg, "\"b00001\"") &&
              strstr(file.msg, "float32[3,2], but the field is float32[2,3] (learned from ") &&
              strstr(file.msg, "bad-000000.tar@0: sample \"b00000\")"),
          "file: %u samples, rc %d: %s", file.n, file.end_rc, file.msg);
    /* Skip: bad content (the long .json) is counted once and replaced in
     * its batch, as the wds format does for the same tar. */
    static const char *const k_json_only[NF] = {NULL, "json", NULL, NULL, NULL};
    g_names = k_json_only;
    o.fields = "json";
    collect("pipe:cat " WBAD "/bad-000000.tar", NULL, "npy:float32[2x3],json:bytes", &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == 5 && g.corrupt == 1, "%u samples, %llu corrupt, rc %d: %s",
          g.n, (unsigned long long)g.corrupt, g.end_rc, g.msg);
    collect(WBAD, "wds", NULL, &o, &file);
    CHECK(file.end_rc == CHUTE_END && file.n == 5 && file.corrupt == 1, "file: %u, %llu: %s",
          file.n, (unsigned long long)file.corrupt, file.msg);
    for (uint32_t i = 0; i < g.n; i++) {
        int64_t x = g.s[i].idx;
        CHECK(x != 3, "position %u holds sample %lld", i, (long long)x);
        CHECK(file.s[i].idx == x, "position %u: stream sample %lld, file sample %lld", i,
              (long long)x, (long long)file.s[i].idx);
        CHECK(g.s[i].len[1] == 9 && !memcmp(g.s[i].val[1], "{\"ok\": 1}", 9) &&
                  file.s[i].len[1] == 9 && !memcmp(file.s[i].val[1], "{\"ok\": 1}", 9),
              "position %u: .json differs", i);
    }
    g_names = k_npy_only;
    /* A declared field a sample lacks: named with the sample. */
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    o.batch_size = 1;
    o.fields = "seg.npy";
    collect("pipe:cat " W0, NULL, "npy:float32[2x3],seg.npy:uint8[2]", &o, &g);
    CHECK(g.n == 0 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "(sample 's00000')") &&
              strstr(g.msg, "no .seg.npy member"),
          "rc %d: %s", g.end_rc, g.msg);
    /* Kept fields count toward max_sample_bytes (the images alone fit). */
    o.fields = "npy";
    o.max_sample_bytes = 1010; /* W0: .jpg <= 855, .npy 152 bytes */
    collect("pipe:cat " W0, NULL, "npy:float32[2x3]", &o, &g);
    CHECK(g.n == 4 && g.end_rc == CHUTE_END, "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    collect("pipe:cat " W0, NULL, WDECL, &o, &g);
    CHECK(g.n == 0 && g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "over max_sample_bytes"),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    o.max_sample_bytes = 0;
    /* Declarations the wds format would read otherwise, refused at open. */
    static const struct {
        const char *decl, *why;
    } bad[] = {
        {"cls:bytes", "reads a .cls member as an int64 scalar"},
        {"cls:int64[2]", "reads a .cls member as an int64 scalar"},
        {"json:int64", "reads a .json member as bytes"},
        {"npy:bytes", "a .npy field's type is a dtype"},
        {"segnpy:bytes", "reads a .segnpy member as a .npy tensor"},
        {"jpg:bytes", "is an image member"},
        {"Txt:bytes", "lower case"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        chute_dataset_options dso = {0};
        chute_dataset *ds = NULL;
        chute_error e = {0};
        dso.extra_keys = bad[k].decl;
        CHECK(chute_dataset_open_ex("pipe:cat " W0, &dso, &ds, &e) == CHUTE_EINVAL &&
                  strstr(e.message, bad[k].why),
              "%s: %s", bad[k].decl, e.message);
    }
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    g_names = k_fields;
    return 0;
}

/* ---- Kafka ------------------------------------------------------------- */
#ifdef CHUTE_TEST_KAFKA

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk, (void)level, (void)fac, (void)buf;
}

static int kafka_tfr(void)
{
    CHECK(load_reference() == 0, "reference");
    uint64_t off[16];
    int nrec = 0;
    uint8_t *bytes = NULL;
    size_t len = 0;
    CHECK(record_offsets(TFR, off, 15, &nrec, &bytes, &len) == 0 && nrec == NS, "framing");
    /* The producer: a real broker when named, else the mock cluster. */
    const char *real = getenv("CHUTE_TEST_KAFKA_BROKERS");
    char es[512], boot[512], topic[200], uri[1400];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (real && *real)
        rd_kafka_conf_set(conf, "bootstrap.servers", real, es, sizeof es);
    else if (rd_kafka_conf_set(conf, "test.mock.num.brokers", "1", es, sizeof es)) {
        rd_kafka_conf_destroy(conf);
        free(bytes);
        SKIP("librdkafka has no mock cluster");
    }
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    rd_kafka_t *prod = rd_kafka_new(RD_KAFKA_PRODUCER, conf, es, sizeof es);
    CHECK(prod, "producer: %s", es);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(topic, sizeof topic, "chute-tfr-%d-%ld", (int)getpid(), (long)ts.tv_nsec);
    if (real && *real) {
        snprintf(boot, sizeof boot, "%s", real);
        rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, 1, 1, es, sizeof es);
        rd_kafka_queue_t *q = rd_kafka_queue_new(prod);
        rd_kafka_CreateTopics(prod, &nt, 1, NULL, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
        CHECK(ev, "CreateTopics timed out");
        rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_NewTopic_destroy(nt);
    } else {
        rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(prod);
        CHECK(mc && rd_kafka_mock_topic_create(mc, topic, 1, 1) == 0, "mock topic");
        snprintf(boot, sizeof boot, "%s", rd_kafka_mock_cluster_bootstraps(mc));
    }
    /* Each value is one framed record as TensorFlow wrote it, then each
     * record's Example bare (the record without its 12-byte header and
     * 4-byte footer: TensorFlow's own SerializeToString() bytes, what a
     * producer sends), then one value that is neither. */
    static const char junk[] = "not a framed record";
    for (int i = 0; i <= 2 * NS; i++) {
        const uint8_t *v = (const uint8_t *)junk;
        size_t vl = sizeof junk - 1;
        if (i < NS) {
            v = bytes + off[i];
            vl = (size_t)(off[i + 1] - off[i]);
        } else if (i < 2 * NS) {
            v = bytes + off[i - NS] + 12;
            vl = (size_t)(off[i - NS + 1] - off[i - NS]) - 16;
        }
        CHECK(rd_kafka_producev(prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                                RD_KAFKA_V_VALUE((void *)v, vl),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) == 0,
              "produce");
    }
    CHECK(rd_kafka_flush(prod, 30000) == 0, "flush");
    chute_loader_options o;
    opts_base(&o);
    o.batch_size = 1;
    static got g;
    /* Fail policy: the five framed records and the five bare Examples, in
     * order, then the junk value's error naming its offset. */
    snprintf(uri, sizeof uri, "kafka://%s/%s?group=g-%ld&until=eof", boot, topic,
             (long)ts.tv_nsec);
    collect(uri, "tfrecord", DECL, &o, &g);
    CHECK(g.n == 2 * NS && g.end_rc == CHUTE_ECORRUPT, "%u samples, rc %d: %s", g.n, g.end_rc,
          g.msg);
    CHECK(strstr(g.msg, topic) && strstr(g.msg, "/0/10") && strstr(g.msg, "length CRC mismatch") &&
              strstr(g.msg, "nor a tf.train.Example"),
          "%s", g.msg);
    for (uint32_t i = 0; i < g.n; i++)
        CHECK_OK(check_sample(&g.s[i], i % NS, ref_px[i % NS]));
    /* Skip policy, a second group: the same ten, the junk counted. */
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    o.batch_size = 2 * NS + 1;
    snprintf(uri, sizeof uri, "kafka://%s/%s?group=g2-%ld&until=eof", boot, topic,
             (long)ts.tv_nsec);
    collect(uri, "tfrecord", DECL, &o, &g);
    CHECK(g.end_rc == CHUTE_END && g.n == 2 * NS + 1 && g.corrupt == 1, "%u samples, rc %d, %llu corrupt: %s",
          g.n, g.end_rc, (unsigned long long)g.corrupt, g.msg);
    unsigned times[NS + 1] = {0};
    for (uint32_t i = 0; i < g.n; i++) {
        CHECK(g.s[i].label >= 1 && g.s[i].label <= NS, "label %lld", (long long)g.s[i].label);
        CHECK_OK(check_sample(&g.s[i], g.s[i].label - 1, ref_px[g.s[i].label - 1]));
        times[g.s[i].label]++;
    }
    for (int k = 1; k <= NS; k++)
        CHECK(times[k] >= 2, "record %d delivered %u times (framed and bare: 2)", k, times[k]);
    rd_kafka_destroy(prod);
    free(bytes);
    return 0;
}
#endif

TEST(kafka_values_that_are_tfrecord_examples_give_tensorflows_values)
{
#ifdef CHUTE_TEST_KAFKA
    return kafka_tfr();
#else
    SKIP("built without librdkafka");
#endif
}

/* kafka:// in a build with librdkafka opens (nothing connects before an
 * epoch); in one without (CHUTE_WITH_KAFKA=OFF, or librdkafka missing) it
 * is CHUTE_EUNSUPPORTED saying so, without the URI's query (credentials).
 * scripts/test.sh runs this test in a CHUTE_WITH_KAFKA=OFF build too. */
TEST(kafka_scheme_says_whether_this_build_has_librdkafka)
{
    const char *uri = "kafka://127.0.0.1:9/t?group=g&kafka.sasl.password=hunter2";
    chute_dataset *ds = NULL;
    chute_error e = {0};
    int rc = chute_dataset_open_ex(uri, NULL, &ds, &e);
    int has = strstr(chute_features(), "kafka") != NULL;
#ifdef CHUTE_TEST_KAFKA
    CHECK(has, "features '%s' lack kafka", chute_features());
    CHECK(rc == CHUTE_OK && chute_dataset_is_stream(ds), "open: %s", e.message);
    chute_dataset_close(ds);
#else
    CHECK(!has, "features '%s' say kafka in a build without librdkafka", chute_features());
    CHECK(rc == CHUTE_EUNSUPPORTED && strstr(e.message, "built without librdkafka") &&
              strstr(e.message, "kafka://127.0.0.1:9/t") && !strstr(e.message, "hunter2"),
          "rc %d: %s", rc, e.message);
    chute_dataset_options dso = {0};
    dso.format = "tfrecord";
    dso.extra_keys = "bbox:float32[4]";
    CHECK(chute_dataset_open_ex(uri, &dso, &ds, &e) == CHUTE_EUNSUPPORTED, "tfrecord: %s",
          e.message);
#endif
    return 0;
}

UNIT_MAIN
