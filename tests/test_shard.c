/*
 * test_shard.c — unit tests for src/format: the shard writer and index
 * reader, the manifest, and chute_dataset_read on shard directories.
 *
 * Everything happens in a scratch directory (--work DIR).  Records are
 * synthetic bytes; pack runs with no_validate so no photos are needed.
 * The reader must turn every kind of damage into a status code and a
 * message naming the file (and offset where there is one), never a crash:
 * under the ASan build the mutation tests below are a small fuzzer.
 */
#include "unit.h"

#include "format/format.h"
#include "format/pack_resize.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <zlib.h>

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t get64(const uint8_t *p) { return get32(p) | ((uint64_t)get32(p + 4) << 32); }
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

TEST(crc32_known_value)
{
    CHECK(ch_crc32("123456789", 9) == 0xCBF43926u, "crc32 = %08x", ch_crc32("123456789", 9));
    CHECK(ch_crc32("", 0) == 0, "crc32 of nothing");
    return 0;
}

/* chute's CRC-32 (libdeflate's folding code where built with it) against
 * zlib's table CRC (an independent implementation): every length 0..1100
 * at every alignment 0..15, 1 MB + 7, and the running form fed in two
 * pieces, on pseudo-random bytes. */
TEST(crc32_equals_zlib)
{
    size_t big = (1u << 20) + 7 + 16;
    uint8_t *buf = malloc(big);
    CHECK(buf, "malloc");
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < big; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56);
    }
    for (size_t off = 0; off < 16; off++)
        for (size_t len = 0; len <= 1100; len++) {
            uint32_t want = (uint32_t)crc32(0L, buf + off, (uInt)len);
            uint32_t got = ch_crc32(buf + off, len);
            if (got != want) {
                free(buf);
                CHECK(0, "off %zu len %zu: %08x, zlib %08x", off, len, got, want);
            }
        }
    uint32_t want = (uint32_t)crc32(0L, buf + 3, (uInt)(big - 16));
    uint32_t got = ch_crc32(buf + 3, big - 16);
    uint32_t pieces = ch_crc32_update(ch_crc32_update(0, buf + 3, 1001), buf + 1004, big - 1017);
    free(buf);
    CHECK(got == want, "1 MB: %08x, zlib %08x", got, want);
    CHECK(pieces == want, "1 MB in two pieces: %08x, zlib %08x", pieces, want);
    return 0;
}

typedef struct rec {
    uint8_t *data;
    uint32_t len;
    int32_t label;
    uint32_t kind;
    char name[64];
} rec;

static void make_recs(rec *r, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        uint32_t len = i == 0 ? 0 : i == 1 ? 1 : (uint32_t)(unit_rand(&seed) % 9000);
        r[i].data = malloc(len ? len : 1);
        for (uint32_t k = 0; k < len; k++)
            r[i].data[k] = (uint8_t)(unit_rand(&seed) >> 56);
        r[i].len = len;
        r[i].label = i % 3;
        r[i].kind = 1 + (uint32_t)(i % 2);
        if (i == 2)
            r[i].name[0] = '\0'; /* empty name */
        else if (i == 3)
            snprintf(r[i].name, sizeof r[i].name, "cls/\xc3\xa9t\xc3\xa9 %d.jpg", i); /* UTF-8 */
        else
            snprintf(r[i].name, sizeof r[i].name, "c%d/img%05d.jpg", i % 3, i);
    }
}

static void free_recs(rec *r, int n)
{
    for (int i = 0; i < n; i++)
        free(r[i].data);
}

static char *k_classes[] = {"apple", "b\xc3\xa4r", "c c"};

static int write_shard(const char *path, uint32_t align, rec *r, int n)
{
    ch_shard_writer *w = NULL;
    chute_error err = {0};
    if (ch_shard_writer_open(path, align, 3, k_classes, &w, &err) != CHUTE_OK) {
        fprintf(stderr, "open %s: %s\n", path, err.message);
        return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    for (int i = 0; i < n; i++)
        if (ch_shard_writer_add(w, r[i].data, r[i].len, r[i].label, r[i].kind, r[i].name, &err) !=
            CHUTE_OK) {
            fprintf(stderr, "add: %s\n", err.message);
            ch_shard_writer_abort(w);
            return 1;
        }
    if (access(path, F_OK) == 0 || access(tmp, F_OK) != 0) {
        fprintf(stderr, "while writing, %s must not exist and %s must\n", path, tmp);
        ch_shard_writer_abort(w);
        return 1;
    }
    if (ch_shard_writer_count(w) != (uint64_t)n) {
        fprintf(stderr, "writer count %llu\n", (unsigned long long)ch_shard_writer_count(w));
        ch_shard_writer_abort(w);
        return 1;
    }
    if (ch_shard_writer_finish(w, &err) != CHUTE_OK) {
        fprintf(stderr, "finish: %s\n", err.message);
        return 1;
    }
    if (access(path, F_OK) != 0 || access(tmp, F_OK) == 0) {
        fprintf(stderr, "after finish, %s must exist and %s must not\n", path, tmp);
        return 1;
    }
    return 0;
}

/* Read a shard's index (status code; message into err). */
static int read_index(const char *path, ch_shard_index *ix, chute_error *err)
{
    void *h = NULL;
    uint64_t size = 0;
    int rc = ch_source_local.open(path, &h, &size, err);
    if (rc)
        return rc;
    rc = ch_shard_read_index(&ch_source_local, h, path, size, ix, err);
    ch_source_local.close(h);
    return rc;
}

TEST(writer_reader_round_trip)
{
    char dir[4096];
    unit_scratch("writer_reader_round_trip", dir, sizeof dir);
    enum { N = 40 };
    rec r[N];
    make_recs(r, N, 7);
    static const uint32_t aligns[] = {64, 4096};
    for (int a = 0; a < 2; a++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/shard-%05d.chute", dir, a);
        CHECK_OK(write_shard(path, aligns[a], r, N));
        ch_shard_index ix;
        chute_error err = {0};
        int rc = read_index(path, &ix, &err);
        CHECK(rc == CHUTE_OK, "read index: %s", err.message);
        CHECK(ix.count == N && ix.nclasses == 3 && ix.align == aligns[a], "count %llu classes %u align %u",
              (unsigned long long)ix.count, ix.nclasses, ix.align);
        for (int c = 0; c < 3; c++)
            CHECK(strcmp(ix.class_names[c], k_classes[c]) == 0, "class %d '%s'", c, ix.class_names[c]);
        size_t flen;
        uint8_t *file = unit_read_file(path, &flen);
        CHECK(file && flen == ix.file_size, "file size");
        CHECK(memcmp(file, CH_SHARD_MAGIC, 8) == 0, "header magic");
        uint64_t prev_end = aligns[a];
        for (int i = 0; i < N; i++) {
            const ch_shard_entry *e = &ix.entries[i];
            CHECK(e->length == r[i].len && e->label == r[i].label && e->kind == r[i].kind,
                  "entry %d: len %u label %d kind %u", i, e->length, e->label, e->kind);
            CHECK(e->offset % aligns[a] == 0 && e->offset >= prev_end,
                  "entry %d at %llu: unaligned or overlapping", i, (unsigned long long)e->offset);
            prev_end = e->offset + e->length;
            CHECK(e->offset + e->length <= flen, "entry %d past the end", i);
            CHECK(r[i].len == 0 || memcmp(file + e->offset, r[i].data, r[i].len) == 0,
                  "record %d bytes differ", i);
            CHECK(e->crc32 == ch_crc32(r[i].data, r[i].len), "record %d crc", i);
            CHECK(strcmp(ix.names[i], r[i].name) == 0, "name %d '%s' vs '%s'", i, ix.names[i],
                  r[i].name);
        }
        free(file);
        ch_shard_index_free(&ix);
        ch_shard_index_free(&ix); /* idempotent */
    }
    /* Abort removes the temporary file and never creates the shard. */
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/aborted.chute", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ch_shard_writer *w = NULL;
    chute_error err = {0};
    CHECK(ch_shard_writer_open(path, 4096, 3, k_classes, &w, &err) == CHUTE_OK, "open");
    CHECK(ch_shard_writer_add(w, r[5].data, r[5].len, 0, 1, "x", &err) == CHUTE_OK, "add");
    ch_shard_writer_abort(w);
    ch_shard_writer_abort(NULL);
    CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) != 0, "abort left files behind");
    /* Bad alignment is refused. */
    CHECK(ch_shard_writer_open(path, 100, 3, k_classes, &w, &err) == CHUTE_EINVAL, "align 100");
    CHECK(ch_shard_writer_open(path, 32, 3, k_classes, &w, &err) == CHUTE_EINVAL, "align 32");
    free_recs(r, N);
    return 0;
}

/* Write a shard, then apply `mutate` to a copy of its bytes and read the
 * index; returns the status.  fix_crc recomputes the index and trailer
 * checksums after mutation so the parser's bounds checks get exercised
 * rather than only the CRC check. */
typedef struct shard_img {
    uint8_t *bytes;
    size_t len;
} shard_img;

static int load_template(const char *dir, shard_img *s, int nrec)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/template.chute", dir);
    rec r[64];
    make_recs(r, nrec, 3);
    int bad = write_shard(path, 64, r, nrec);
    free_recs(r, nrec);
    if (bad)
        return 1;
    s->bytes = unit_read_file(path, &s->len);
    return s->bytes ? 0 : 1;
}

static void fix_crcs(uint8_t *b, size_t len)
{
    uint8_t *t = b + len - CH_SHARD_TRAILER_BYTES;
    uint64_t ioff = get64(t + 8), isz = get64(t + 16);
    if (ioff <= len && isz <= len - ioff)
        put32(t + 32, ch_crc32(b + ioff, isz));
    put32(t + 60, ch_crc32(t, 60));
}

static int try_index(const char *dir, const uint8_t *b, size_t len, chute_error *err,
                     int check_invariants)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/mutant.chute", dir);
    if (unit_write_file(path, b, len) != 0)
        return -100;
    ch_shard_index ix;
    int rc = read_index(path, &ix, err);
    if (rc == CHUTE_OK && check_invariants) {
        for (uint64_t i = 0; i < ix.count; i++) {
            const ch_shard_entry *e = &ix.entries[i];
            if (e->offset + e->length > len || e->label < 0 || (uint32_t)e->label >= ix.nclasses ||
                !ix.names[i]) {
                fprintf(stderr, "accepted index has entry %llu at %llu+%u label %d\n",
                        (unsigned long long)i, (unsigned long long)e->offset, e->length, e->label);
                rc = -101;
            }
        }
        for (uint32_t c = 0; c < ix.nclasses; c++)
            if (!ix.class_names[c])
                rc = -102;
    }
    if (rc == CHUTE_OK || rc < -99)
        ch_shard_index_free(&ix);
    return rc;
}

TEST(truncated_or_foreign_shard_is_an_error)
{
    char dir[4096];
    unit_scratch("truncated_or_foreign_shard", dir, sizeof dir);
    shard_img s;
    CHECK_OK(load_template(dir, &s, 12));
    chute_error err;
    /* Every truncation is an error with a message naming the file. */
    for (size_t n = 0; n < s.len; n += (n < 256 || n > s.len - 512) ? 1 : 37) {
        memset(&err, 0, sizeof err);
        int rc = try_index(dir, s.bytes, n, &err, 1);
        CHECK(rc == CHUTE_EFORMAT || rc == CHUTE_ECORRUPT,
              "shard truncated to %zu of %zu bytes: %s (%s)", n, s.len, chute_status_name(rc),
              err.message);
        CHECK(strstr(err.message, "mutant.chute") != NULL, "message does not name the file: %s",
              err.message);
    }
    /* Bad magic. */
    uint8_t *b = malloc(s.len);
    memcpy(b, s.bytes, s.len);
    memcpy(b, "NOTASHRD", 8);
    int rc = try_index(dir, b, s.len, &err, 1);
    CHECK(rc == CHUTE_EFORMAT && strstr(err.message, "magic"), "bad magic: %s (%s)",
          chute_status_name(rc), err.message);
    /* A newer major version is refused, with the version in the message. */
    memcpy(b, s.bytes, s.len);
    b[8] = 2;
    rc = try_index(dir, b, s.len, &err, 1);
    CHECK(rc == CHUTE_EFORMAT && strstr(err.message, "2.0"), "version 2: %s (%s)",
          chute_status_name(rc), err.message);
    /* Header checksum. */
    memcpy(b, s.bytes, s.len);
    b[20] ^= 1;
    rc = try_index(dir, b, s.len, &err, 1);
    CHECK(rc == CHUTE_ECORRUPT, "header flip: %s (%s)", chute_status_name(rc), err.message);
    /* Garbage of the same size, and tiny files. */
    uint64_t seed = 5;
    for (size_t i = 0; i < s.len; i++)
        b[i] = (uint8_t)(unit_rand(&seed) >> 56);
    rc = try_index(dir, b, s.len, &err, 1);
    CHECK(rc == CHUTE_EFORMAT, "garbage: %s (%s)", chute_status_name(rc), err.message);
    rc = try_index(dir, b, 10, &err, 1);
    CHECK(rc == CHUTE_EFORMAT && strstr(err.message, "too small"), "10-byte file: %s (%s)",
          chute_status_name(rc), err.message);
    /* Trailer and index checksums are verified. */
    memcpy(b, s.bytes, s.len);
    b[s.len - 40] ^= 0x10; /* inside the trailer */
    rc = try_index(dir, b, s.len, &err, 1);
    CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, "trailer"), "trailer flip: %s (%s)",
          chute_status_name(rc), err.message);
    memcpy(b, s.bytes, s.len);
    b[s.len - CH_SHARD_TRAILER_BYTES - 3] ^= 0x10; /* inside the index */
    rc = try_index(dir, b, s.len, &err, 1);
    CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, "index checksum"), "index flip: %s (%s)",
          chute_status_name(rc), err.message);
    free(b);
    free(s.bytes);
    return 0;
}

TEST(index_mutations_never_crash)
{
    char dir[4096];
    unit_scratch("index_mutations_never_crash", dir, sizeof dir);
    shard_img s;
    CHECK_OK(load_template(dir, &s, 9));
    uint8_t *t = s.bytes + s.len - CH_SHARD_TRAILER_BYTES;
    uint64_t ioff = get64(t + 8);
    uint8_t *b = malloc(s.len);
    static const uint8_t xors[] = {0x01, 0x80, 0xFF, 0x7F};
    int accepted = 0, total = 0;
    /* Every byte of the index and trailer, several ways, CRCs fixed up. */
    for (size_t at = ioff; at < s.len; at++)
        for (int x = 0; x < 4; x++) {
            memcpy(b, s.bytes, s.len);
            b[at] ^= xors[x];
            if (at < s.len - 4) /* leave the trailer CRC field itself mutated */
                fix_crcs(b, s.len);
            chute_error err = {0};
            int rc = try_index(dir, b, s.len, &err, 1);
            CHECK(rc == CHUTE_OK || rc == CHUTE_ECORRUPT || rc == CHUTE_EFORMAT ||
                      rc == CHUTE_ENOMEM,
                  "byte %zu ^ 0x%02x: status %d (%s)", at, xors[x], rc, err.message);
            CHECK(rc == CHUTE_OK || err.message[0], "byte %zu: error without a message", at);
            accepted += rc == CHUTE_OK;
            total++;
        }
    /* Hostile trailer fields: huge counts and sizes. */
    static const uint64_t evil[] = {0, 1, 31, 32, 0xFFFFFFFFull, 0x7FFFFFFFFFFFFFFFull,
                                    0xFFFFFFFFFFFFFFFFull, 1ull << 34, (1ull << 34) + 1};
    for (int field = 8; field <= 24; field += 8)
        for (size_t e = 0; e < sizeof evil / sizeof evil[0]; e++) {
            memcpy(b, s.bytes, s.len);
            put64(b + s.len - CH_SHARD_TRAILER_BYTES + field, evil[e]);
            fix_crcs(b, s.len);
            chute_error err = {0};
            int rc = try_index(dir, b, s.len, &err, 1);
            CHECK(rc != CHUTE_OK || evil[e] == get64(t + field),
                  "trailer field %d = %llu accepted", field, (unsigned long long)evil[e]);
        }
    /* Entry fields pointing outside the data region, labels out of range. */
    for (int i = 0; i < 9; i++) {
        static const uint64_t offs[] = {0, 63, 1ull << 40};
        for (int k = 0; k < 3; k++) {
            memcpy(b, s.bytes, s.len);
            put64(b + ioff + (size_t)i * CH_SHARD_ENTRY_BYTES, offs[k]);
            fix_crcs(b, s.len);
            chute_error err = {0};
            int rc = try_index(dir, b, s.len, &err, 1);
            CHECK(rc == CHUTE_ECORRUPT, "entry %d offset %llu: %s", i, (unsigned long long)offs[k],
                  chute_status_name(rc));
        }
        memcpy(b, s.bytes, s.len);
        put32(b + ioff + (size_t)i * CH_SHARD_ENTRY_BYTES + 8, 0xFFFFFFFFu); /* length */
        fix_crcs(b, s.len);
        chute_error err = {0};
        CHECK(try_index(dir, b, s.len, &err, 1) == CHUTE_ECORRUPT, "entry %d huge length", i);
        memcpy(b, s.bytes, s.len);
        put32(b + ioff + (size_t)i * CH_SHARD_ENTRY_BYTES + 16, 3); /* label == nclasses */
        fix_crcs(b, s.len);
        CHECK(try_index(dir, b, s.len, &err, 1) == CHUTE_ECORRUPT, "entry %d label 3", i);
        CHECK(strstr(err.message, "label") != NULL, "label message: %s", err.message);
    }
    fprintf(stderr, "%d of %d single-byte index mutations parsed (names/reserved bytes)\n",
            accepted, total);
    free(b);
    free(s.bytes);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Shard directories through the public API                            */
/* ------------------------------------------------------------------ */

/* Tree of fake JPEGs (magic + random bytes), 3 classes; returns n. */
static int make_fake_tree(const char *root, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        char d[4200], p[4300];
        snprintf(d, sizeof d, "%s/class%d", root, i % 3);
        unit_mkdirs(d);
        snprintf(p, sizeof p, "%s/f%04d.jpg", d, i);
        uint32_t len = 100 + (uint32_t)(unit_rand(&seed) % 30000);
        uint8_t *b = malloc(len);
        for (uint32_t k = 0; k < len; k++)
            b[k] = (uint8_t)(unit_rand(&seed) >> 56);
        b[0] = 0xFF;
        b[1] = 0xD8;
        b[2] = 0xFF;
        int rc = unit_write_file(p, b, len);
        free(b);
        if (rc)
            return -1;
    }
    return n;
}

static int pack_fake(const char *root, const char *out, uint64_t shard_size, chute_pack_result *res)
{
    chute_pack_options o = {0};
    o.shard_size = shard_size;
    o.threads = 2;
    o.align = 512;
    o.no_validate = 1;
    chute_error err = {0};
    int rc = chute_pack(root, out, &o, res, &err);
    if (rc)
        fprintf(stderr, "pack: %s\n", err.message);
    return rc;
}

static int count_files(const char *dir, const char *suffix)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '%s$'", dir, suffix);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

TEST(dataset_round_trip_and_flipped_record)
{
    char dir[4096], root[4200], out[4200];
    unit_scratch("dataset_round_trip", dir, sizeof dir);
    snprintf(root, sizeof root, "%s/tree", dir);
    snprintf(out, sizeof out, "%s/shards", dir);
    const int N = 60;
    CHECK(make_fake_tree(root, N, 11) == N, "make tree");
    chute_pack_result res = {0};
    CHECK(pack_fake(root, out, 200 << 10, &res) == CHUTE_OK, "pack");
    CHECK(res.files == (uint64_t)N && res.skipped == 0 && res.classes == 3 && res.shards > 2,
          "pack result: %llu files, %u shards", (unsigned long long)res.files, res.shards);
    CHECK(count_files(out, ".chute") == (int)res.shards && count_files(out, ".tmp") == 0,
          "shard files on disk");
    chute_dataset *tree = NULL, *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(root, CHUTE_SOURCE_AUTO, &tree, &err) == CHUTE_OK, "open tree: %s",
          err.message);
    CHECK(chute_dataset_open(out, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "open shards: %s",
          err.message);
    CHECK(chute_dataset_kind(ds) == CHUTE_SOURCE_SHARDS && chute_dataset_size(ds) == (uint64_t)N &&
              chute_dataset_num_classes(ds) == 3,
          "shard dataset shape");
    static uint8_t a[40000], b[40000];
    for (uint64_t i = 0; i < (uint64_t)N; i++) {
        size_t la = 0, lb = 0;
        CHECK(chute_dataset_read(tree, i, a, sizeof a, &la, &err) == CHUTE_OK, "tree read %llu",
              (unsigned long long)i);
        CHECK(chute_dataset_read(ds, i, b, sizeof b, &lb, &err) == CHUTE_OK, "shard read %llu: %s",
              (unsigned long long)i, err.message);
        CHECK(la == lb && memcmp(a, b, la) == 0, "sample %llu bytes differ", (unsigned long long)i);
        CHECK(chute_dataset_label(tree, i) == chute_dataset_label(ds, i), "label %llu",
              (unsigned long long)i);
        CHECK(chute_dataset_sample_size(ds, i) == lb, "sample_size %llu", (unsigned long long)i);
    }
    CHECK(strcmp(chute_dataset_class_name(ds, 2), "class2") == 0, "class name");
    CHECK(chute_dataset_class_name(ds, 3) == NULL, "class 3 exists");
    CHECK(chute_dataset_label(ds, N) == -1, "label out of range");
    /* A too-small buffer is a clean ELIMIT with the size needed. */
    size_t need = 0;
    CHECK(chute_dataset_read(ds, 5, b, 10, &need, &err) == CHUTE_ELIMIT &&
              need == chute_dataset_sample_size(ds, 5),
          "small buffer: need %zu", need);
    CHECK(chute_dataset_read(ds, N, b, sizeof b, &need, &err) == CHUTE_EINVAL, "index N");

    /* Flip one byte inside sample 25's record. */
    char where[1024];
    chute_dataset_describe(ds, 25, where, sizeof where);
    char shard_name[256] = "";
    unsigned long long off = 0;
    const char *at = strstr(where, "shard-");
    CHECK(at && sscanf(at, "%255[^@]@%llu", shard_name, &off) == 2, "describe gave '%s'", where);
    CHECK(strstr(where, "(class") != NULL, "describe lacks the original name: %s", where);
    chute_dataset_close(ds);
    char sp[4400];
    snprintf(sp, sizeof sp, "%s/%s", out, shard_name);
    int fd = open(sp, O_RDWR);
    CHECK(fd >= 0, "open %s", sp);
    uint8_t byte;
    CHECK(pread(fd, &byte, 1, (off_t)off + 50) == 1, "pread");
    byte ^= 0x20;
    CHECK(pwrite(fd, &byte, 1, (off_t)off + 50) == 1, "pwrite");
    close(fd);
    CHECK(chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &ds, &err) == CHUTE_OK,
          "a damaged record must not stop the dataset from opening: %s", err.message);
    size_t len = 0;
    memset(&err, 0, sizeof err);
    int rc = chute_dataset_read(ds, 25, b, sizeof b, &len, &err);
    CHECK(rc == CHUTE_ECORRUPT, "flipped record: %s", chute_status_name(rc));
    char want[512];
    snprintf(want, sizeof want, "%s@%llu", shard_name, off);
    CHECK(strstr(err.message, want) != NULL, "message '%s' does not name %s", err.message, want);
    CHECK(chute_dataset_read(ds, 24, b, sizeof b, &len, &err) == CHUTE_OK &&
              chute_dataset_read(ds, 26, b, sizeof b, &len, &err) == CHUTE_OK,
          "neighbours of the damaged record must still read");
    chute_dataset_close(ds);
    chute_dataset_close(tree);
    return 0;
}

static void write_text(const char *path, const char *text)
{
    unit_write_file(path, text, strlen(text));
}

TEST(manifest_and_directory_errors)
{
    char dir[4096], root[4200], out[4200], mpath[4300], saved[4300];
    unit_scratch("manifest_errors", dir, sizeof dir);
    snprintf(root, sizeof root, "%s/tree", dir);
    snprintf(out, sizeof out, "%s/shards", dir);
    CHECK(make_fake_tree(root, 30, 2) == 30, "tree");
    chute_pack_result res = {0};
    CHECK(pack_fake(root, out, 100 << 10, &res) == CHUTE_OK && res.shards >= 2, "pack");
    snprintf(mpath, sizeof mpath, "%s/%s", out, CH_MANIFEST_NAME);
    size_t mlen;
    char *good = (char *)unit_read_file(mpath, &mlen);
    CHECK(good != NULL, "read manifest");
    snprintf(saved, sizeof saved, "%.*s", (int)mlen, good);
    free(good);

    struct {
        const char *what;
        const char *text; /* NULL: remove the manifest */
        int want;
        const char *in_msg;
    } cases[] = {
        {"missing manifest", NULL, CHUTE_EFORMAT, "manifest"},
        {"empty manifest", "", CHUTE_EFORMAT, "manifest"},
        {"wrong version", "chute-dataset 3\nend 0 0\n", CHUTE_EFORMAT, "manifest"},
        {"no end line", "chute-dataset 1\nshard shard-00000.chute 1 1\n", CHUTE_ECORRUPT, "end"},
        {"end disagrees", "chute-dataset 1\nend 3 3\n", CHUTE_ECORRUPT, "end"},
        {"unknown line", "chute-dataset 1\nfoo bar\nend 0 0\n", CHUTE_ECORRUPT, ":2"},
        {"path in name", "chute-dataset 1\nshard ../x.chute 1 1\nend 1 1\n", CHUTE_ECORRUPT, "name"},
        {"hidden name", "chute-dataset 1\nshard .x 1 1\nend 1 1\n", CHUTE_ECORRUPT, "name"},
        {"no samples", "chute-dataset 1\nend 0 0\n", CHUTE_ENOTFOUND, "no samples"},
        {"missing shard", "chute-dataset 1\nshard shard-00099.chute 1 1\nend 1 1\n",
         CHUTE_ENOTFOUND, "shard-00099.chute"},
        {"text after end", "chute-dataset 1\nend 0 0\nmore\n", CHUTE_ECORRUPT, "after"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(mpath);
        if (cases[i].text)
            write_text(mpath, cases[i].text);
        chute_dataset *ds = NULL;
        chute_error err = {0};
        int rc = chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &ds, &err);
        CHECK(rc == cases[i].want && ds == NULL, "%s: %s (%s), want %s", cases[i].what,
              chute_status_name(rc), err.message, chute_status_name(cases[i].want));
        CHECK(strstr(err.message, cases[i].in_msg) != NULL, "%s: message '%s' lacks '%s'",
              cases[i].what, err.message, cases[i].in_msg);
    }
    /* Manifest's sizes/counts must match the shards. */
    char first[256];
    unsigned long long cnt, sz;
    CHECK(sscanf(saved, "chute-dataset 1\nshard %255s %llu %llu", first, &cnt, &sz) == 3,
          "manifest format: %s", saved);
    char edited[8192];
    {
        /* wrong byte count for the first shard */
        char from[512], to[512];
        snprintf(from, sizeof from, "shard %s %llu %llu\n", first, cnt, sz);
        snprintf(to, sizeof to, "shard %s %llu %llu\n", first, cnt, sz + 1);
        const char *p = strstr(saved, from);
        CHECK(p != NULL, "find line");
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(p - saved), saved, to, p + strlen(from));
        write_text(mpath, edited);
        chute_dataset *ds = NULL;
        chute_error err = {0};
        int rc = chute_dataset_open(out, CHUTE_SOURCE_AUTO, &ds, &err);
        CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, first), "size mismatch: %s (%s)",
              chute_status_name(rc), err.message);
    }
    /* Restored manifest opens again. */
    write_text(mpath, saved);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(out, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "restored: %s",
          err.message);
    chute_dataset_close(ds);
    /* Paths that are not datasets. */
    ds = NULL;
    int rc = chute_dataset_open(mpath, CHUTE_SOURCE_AUTO, &ds, &err);
    CHECK(rc == CHUTE_EFORMAT && !ds, "a file: %s", chute_status_name(rc));
    char missing[4300];
    snprintf(missing, sizeof missing, "%s/does-not-exist", dir);
    rc = chute_dataset_open(missing, CHUTE_SOURCE_AUTO, &ds, &err);
    CHECK(rc == CHUTE_ENOTFOUND && strstr(err.message, "does-not-exist"), "missing: %s (%s)",
          chute_status_name(rc), err.message);
    char empty[4300];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    unit_mkdirs(empty);
    rc = chute_dataset_open(empty, CHUTE_SOURCE_AUTO, &ds, &err);
    CHECK(rc == CHUTE_ENOTFOUND, "empty dir: %s (%s)", chute_status_name(rc), err.message);
    rc = chute_dataset_open(NULL, CHUTE_SOURCE_AUTO, &ds, &err);
    CHECK(rc == CHUTE_EINVAL, "NULL path");
    rc = chute_dataset_open(out, (chute_source_kind)9, &ds, &err);
    CHECK(rc == CHUTE_EINVAL, "bad kind: %s", chute_status_name(rc));
    return 0;
}

TEST(mixed_class_tables_rejected)
{
    char dir[4096], root1[4200], root2[4200], out1[4200], out2[4200];
    unit_scratch("mixed_class_tables", dir, sizeof dir);
    snprintf(root1, sizeof root1, "%s/t1", dir);
    snprintf(root2, sizeof root2, "%s/t2", dir);
    snprintf(out1, sizeof out1, "%s/s1", dir);
    snprintf(out2, sizeof out2, "%s/s2", dir);
    CHECK(make_fake_tree(root1, 12, 1) == 12, "tree 1");
    CHECK(make_fake_tree(root2, 12, 2) == 12, "tree 2");
    char extra[4300];
    snprintf(extra, sizeof extra, "%s/zzz", root2);
    unit_mkdirs(extra);
    snprintf(extra, sizeof extra, "%s/zzz/a.jpg", root2);
    unit_write_file(extra, "\xFF\xD8\xFF\x00", 4);
    chute_pack_result r1, r2;
    CHECK(pack_fake(root1, out1, 1 << 30, &r1) == 0 && pack_fake(root2, out2, 1 << 30, &r2) == 0,
          "pack");
    /* A manifest naming shards of both datasets. */
    char m[4300], s2[4300], cmd[9000];
    snprintf(s2, sizeof s2, "%s/shard-00001.chute", out1);
    snprintf(cmd, sizeof cmd, "cp '%s/shard-00000.chute' '%s'", out2, s2);
    CHECK(system(cmd) == 0, "cp");
    struct stat st1, st2;
    char s1[4300];
    snprintf(s1, sizeof s1, "%s/shard-00000.chute", out1);
    CHECK(stat(s1, &st1) == 0 && stat(s2, &st2) == 0, "stat");
    char text[1024];
    snprintf(text, sizeof text,
             "chute-dataset 1\nshard shard-00000.chute 12 %lld\nshard shard-00001.chute 13 %lld\n"
             "end 2 25\n",
             (long long)st1.st_size, (long long)st2.st_size);
    snprintf(m, sizeof m, "%s/%s", out1, CH_MANIFEST_NAME);
    write_text(m, text);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    int rc = chute_dataset_open(out1, CHUTE_SOURCE_AUTO, &ds, &err);
    CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, "class table"), "mixed: %s (%s)",
          chute_status_name(rc), err.message);
    return 0;
}


/* ------------------------------------------------------------------ */
/* Hostile manifests (issue #8 item 5)                                 */
/* ------------------------------------------------------------------ */

/* Open `out` with `text` as its manifest; 0 if the status is `want`, the
 * dataset is not returned and the message holds `in_msg`. */
static int expect_open(const char *out, const char *mpath, const char *what, const char *text,
                       size_t len, int want, const char *in_msg)
{
    unlink(mpath);
    unit_write_file(mpath, text, len);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    int rc = chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &ds, &err);
    int bad = rc != want || ds != NULL || !strstr(err.message, in_msg);
    if (bad)
        fprintf(stderr, "FAIL %s: %s (%s), want %s with '%s'\n", what, chute_status_name(rc),
                err.message, chute_status_name(want), in_msg);
    else
        fprintf(stderr, "ok   %s: %s\n", what, err.message);
    chute_dataset_close(ds);
    return bad;
}

TEST(manifest_hostile_numbers_and_names)
{
    char dir[4096], root[4200], out[4200], mpath[4300], outside[4300];
    unit_scratch("manifest_hostile", dir, sizeof dir);
    snprintf(root, sizeof root, "%s/tree", dir);
    snprintf(out, sizeof out, "%s/shards", dir);
    CHECK(make_fake_tree(root, 30, 4) == 30, "tree");
    chute_pack_result res = {0};
    CHECK(pack_fake(root, out, 100 << 10, &res) == CHUTE_OK && res.shards >= 3, "pack: %u shards",
          res.shards);
    snprintf(mpath, sizeof mpath, "%s/%s", out, CH_MANIFEST_NAME);
    size_t mlen;
    char *good = (char *)unit_read_file(mpath, &mlen);
    CHECK(good != NULL, "read manifest");
    char saved[8192];
    snprintf(saved, sizeof saved, "%.*s", (int)mlen, good);
    free(good);
    /* The first two shards' lines, as pack wrote them. */
    char n0[64], n1[64];
    unsigned long long c0, z0, c1, z1;
    CHECK(sscanf(saved, "chute-dataset 1\nshard %63s %llu %llu\nshard %63s %llu %llu", n0, &c0,
                 &z0, n1, &c1, &z1) == 6 && c0 > 1,
          "manifest: %s", saved);
    /* Files the manifest may point at: a symlink to a shard, a symlink out
     * of the directory, a hard link, a directory. */
    char p[4400], q[4400];
    snprintf(p, sizeof p, "%s/%s", out, n0);
    snprintf(q, sizeof q, "%s/link.chute", out);
    CHECK(symlink(n0, q) == 0, "symlink");
    snprintf(outside, sizeof outside, "%s/elsewhere.chute", dir);
    CHECK(link(p, outside) == 0, "link outside");
    snprintf(q, sizeof q, "%s/escape.chute", out);
    CHECK(symlink("../elsewhere.chute", q) == 0, "symlink out");
    snprintf(q, sizeof q, "%s/hard.chute", out);
    CHECK(link(p, q) == 0, "hard link");
    snprintf(q, sizeof q, "%s/adir", out);
    unit_mkdirs(q);

    unsigned long long wrap = 0ull - (c0 - 1); /* c0 + wrap == 1 (mod 2^64) */
    char t[64][1024];
    size_t tl[64];
    struct {
        const char *what;
        int want;
        const char *in_msg;
    } cases[64];
    int n = 0;
#define CASE(WHAT, WANT, MSG, ...)                                                              \
    do {                                                                                        \
        tl[n] = (size_t)snprintf(t[n], sizeof t[n], __VA_ARGS__);                               \
        cases[n].what = WHAT;                                                                   \
        cases[n].want = WANT;                                                                   \
        cases[n].in_msg = MSG;                                                                  \
        n++;                                                                                    \
    } while (0)
    const char *H = "chute-dataset 1\n";
    CASE("negative count wraps the total to 1", CHUTE_ECORRUPT, "chute.manifest:3",
         "%sshard %s %llu %llu\nshard %s -%llu %llu\nend 2 1\n", H, n0, c0, z0, n1, c0 - 1, z1);
    CASE("sum overflows 2^64", CHUTE_ECORRUPT, "chute.manifest:3",
         "%sshard %s %llu %llu\nshard %s %llu %llu\nend 2 1\n", H, n0, c0, z0, n1, wrap, z1);
    CASE("plus sign", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard %s +%llu %llu\nend 1 %llu\n", H,
         n0, c0, z0, c0);
    CASE("trailing junk", CHUTE_ECORRUPT, "chute.manifest:2",
         "%sshard %s %llux %llu\nend 1 %llu\n", H, n0, c0, z0, c0);
    CASE("hex", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard %s 0x%llx %llu\nend 1 %llu\n", H, n0,
         c0, z0, c0);
    CASE("leading zero", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard %s 0%llu %llu\nend 1 %llu\n",
         H, n0, c0, z0, c0);
    CASE("20-digit count", CHUTE_ECORRUPT, "chute.manifest:2",
         "%sshard %s 99999999999999999999 %llu\nend 1 1\n", H, n0, z0);
    CASE("negative size", CHUTE_ECORRUPT, "chute.manifest:2",
         "%sshard %s %llu -%llu\nend 1 %llu\n", H, n0, c0, z0, c0);
    CASE("two spaces", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard  %s %llu %llu\nend 1 %llu\n",
         H, n0, c0, z0, c0);
    CASE("tab", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard\t%s %llu %llu\nend 1 %llu\n", H, n0,
         c0, z0, c0);
    CASE("CRLF", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard %s %llu %llu\r\nend 1 %llu\r\n", H,
         n0, c0, z0, c0);
    CASE("missing field", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard %s %llu\nend 1 %llu\n", H,
         n0, c0, c0);
    CASE("extra field", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard %s %llu %llu 7\nend 1 %llu\n",
         H, n0, c0, z0, c0);
    CASE("end negative", CHUTE_ECORRUPT, "chute.manifest:3",
         "%sshard %s %llu %llu\nend 1 -%llu\n", H, n0, c0, z0, 0ull - c0);
    CASE("end junk", CHUTE_ECORRUPT, "chute.manifest:3", "%sshard %s %llu %llu\nend 1 %llu x\n", H,
         n0, c0, z0, c0);
    CASE("no final newline", CHUTE_ECORRUPT, "chute.manifest:3",
         "%sshard %s %llu %llu\nend 1 %llu", H, n0, c0, z0, c0);
    CASE("listed twice", CHUTE_ECORRUPT, "chute.manifest:3",
         "%sshard %s %llu %llu\nshard %s %llu %llu\nend 2 %llu\n", H, n0, c0, z0, n0, c0, z0,
         2 * c0);
    CASE("parent path", CHUTE_ECORRUPT, "chute.manifest:2",
         "%sshard ../shards/%s %llu %llu\nend 1 %llu\n", H, n0, c0, z0, c0);
    CASE("absolute path", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard %s %llu %llu\nend 1 %llu\n",
         H, p, c0, z0, c0);
    CASE("dot-dot", CHUTE_ECORRUPT, "chute.manifest:2", "%sshard .. %llu %llu\nend 1 %llu\n", H,
         c0, z0, c0);
    CASE("control byte in name", CHUTE_ECORRUPT, "chute.manifest:2",
         "%sshard %s\x01 %llu %llu\nend 1 %llu\n", H, n0, c0, z0, c0);
    CASE("symlink to a shard", CHUTE_EFORMAT, "symbolic link",
         "%sshard link.chute %llu %llu\nend 1 %llu\n", H, c0, z0, c0);
    CASE("symlink out of the directory", CHUTE_EFORMAT, "symbolic link",
         "%sshard escape.chute %llu %llu\nend 1 %llu\n", H, c0, z0, c0);
    CASE("hard link listed as a second shard", CHUTE_ECORRUPT, "same file",
         "%sshard %s %llu %llu\nshard hard.chute %llu %llu\nend 2 %llu\n", H, n0, c0, z0, c0, z0,
         2 * c0);
    CASE("a directory", CHUTE_EFORMAT, "regular file", "%sshard adir %llu %llu\nend 1 %llu\n", H,
         c0, z0, c0);
    CASE("count larger than the shard's", CHUTE_ECORRUPT, "manifest says",
         "%sshard %s %llu %llu\nend 1 %llu\n", H, n0, c0 + 1, z0, c0 + 1);
    CASE("end counts one shard too many", CHUTE_ECORRUPT, "chute.manifest:3",
         "%sshard %s %llu %llu\nend 2 %llu\n", H, n0, c0, z0, c0);
    CASE("header only", CHUTE_ECORRUPT, "end line", "%s", H);
    CASE("CRLF header", CHUTE_EFORMAT, "chute.manifest:1", "chute-dataset 1\r\nend 0 0\n");
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed += expect_open(out, mpath, cases[i].what, t[i], tl[i], cases[i].want,
                              cases[i].in_msg);
    /* A NUL inside a name, and a line far longer than any name. */
    char nul[256];
    int nl = snprintf(nul, sizeof nul, "%sshard %sX %llu %llu\nend 1 %llu\n", H, n0, c0, z0, c0);
    nul[strlen(H) + 6 + strlen(n0)] = '\0';
    failed += expect_open(out, mpath, "NUL in name", nul, (size_t)nl, CHUTE_ECORRUPT,
                          "chute.manifest:2");
    size_t big = 20000;
    char *longl = malloc(big + 200);
    size_t ll = (size_t)snprintf(longl, 200, "%sshard ", H);
    memset(longl + ll, 'a', big);
    ll += big;
    ll += (size_t)snprintf(longl + ll, 200, " %llu %llu\nend 1 %llu\n", c0, z0, c0);
    failed += expect_open(out, mpath, "20000-byte name", longl, ll, CHUTE_ECORRUPT,
                          "chute.manifest:2");
    free(longl);
    CHECK(failed == 0, "%d of %d hostile manifests not refused as they should be", failed, n + 2);
    /* The real manifest still opens, and reads back every sample. */
    unlink(mpath);
    write_text(mpath, saved);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(out, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "restored: %s",
          err.message);
    CHECK(chute_dataset_size(ds) == 30, "30 samples");
    chute_dataset_close(ds);
    return 0;
}

/* The parser itself, from memory: what it accepts and the line it blames. */
TEST(manifest_parser_exact)
{
    ch_manifest m;
    chute_error err = {0};
    const char *ok = "chute-dataset 1\nshard a 18446744073709551614 5\nshard b 1 0\n"
                     "shard c 0 18446744073709551615\nend 3 18446744073709551615\n";
    CHECK(ch_manifest_parse("M", ok, strlen(ok), &m, &err) == CHUTE_OK, "valid: %s", err.message);
    CHECK(m.nshards == 3 && m.total == UINT64_MAX && strcmp(m.shards[2].name, "c") == 0 &&
              m.shards[0].samples == UINT64_MAX - 1 && m.shards[2].bytes == UINT64_MAX &&
              m.shards[1].line == 3,
          "parsed %u shards, total %llu", m.nshards, (unsigned long long)m.total);
    ch_manifest_free(&m);
    ch_manifest_free(&m); /* idempotent */
    struct {
        const char *text;
        int want;
        const char *in_msg;
    } bad[] = {
        {"chute-dataset 1\nshard a 18446744073709551615 1\nshard b 1 1\nend 2 0\n", CHUTE_ECORRUPT,
         "M:3: total sample count overflows"},
        {"chute-dataset 1\nshard a 18446744073709551616 1\nend 1 0\n", CHUTE_ECORRUPT,
         "M:2: sample count '18446744073709551616' is a number too large"},
        {"chute-dataset 1\nshard a -1 1\nend 1 0\n", CHUTE_ECORRUPT,
         "M:2: sample count '-1' is a negative"},
        {"chute-dataset 1\nshard a 1 1\nshard b 1 1\nshard a 1 1\nend 3 3\n", CHUTE_ECORRUPT,
         "M:4: shard a is listed twice (first on line 2)"},
        {"chute-dataset 1\nshard a 1 1\nend 1 1\n\n", CHUTE_ECORRUPT, "M:4: text after the end"},
        {"chute-dataset 1\n\nend 0 0\n", CHUTE_ECORRUPT, "M:2:"},
        {"chute-dataset 1\nend 0 0\n", CHUTE_ENOTFOUND, "no samples"},
        {"chute-dataset 10\nend 0 0\n", CHUTE_EFORMAT, "M:1:"},
        {"chute-dataset 1", CHUTE_EFORMAT, "M:1:"},
        {"", CHUTE_EFORMAT, "M:1:"},
        {"chute-dataset 1\nshard a/b 1 1\nend 1 1\n", CHUTE_ECORRUPT, "M:2: bad shard name 'a/b'"},
        {"chute-dataset 1\nshard . 1 1\nend 1 1\n", CHUTE_ECORRUPT, "M:2: bad shard name"},
        {"chute-dataset 1\nshard a 1 1\nend 01 1\n", CHUTE_ECORRUPT,
         "M:3: end line: a number with a leading zero"},
        {"chute-dataset 1\nshard a 1 1\nEND 1 1\n", CHUTE_ECORRUPT,
         "M:3: unrecognised line 'END 1 1'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = ch_manifest_parse("M", bad[i].text, strlen(bad[i].text), &m, &err);
        CHECK(rc == bad[i].want && strstr(err.message, bad[i].in_msg) != NULL,
              "case %zu: %s (%s), want %s with '%s'", i, chute_status_name(rc), err.message,
              chute_status_name(bad[i].want), bad[i].in_msg);
        CHECK(m.nshards == 0 && m.shards == NULL, "case %zu: failed parse left shards", i);
    }
    /* Names: bare file names only. */
    CHECK(ch_shard_name_ok("shard-00000.chute", 17) && ch_shard_name_ok("a b", 3) == 1,
          "good names");
    CHECK(!ch_shard_name_ok("", 0) && !ch_shard_name_ok("..", 2) && !ch_shard_name_ok("/x", 2) &&
              !ch_shard_name_ok("x\n", 2) && !ch_shard_name_ok("x\x7f", 2),
          "bad names accepted");
    return 0;
}

/* pack deletes "stale" shards by this test, so it must match only the
 * names pack writes. */
/* Version 2 (pack --max-side/--raw): the "pack" line is read, keys this
 * reader does not know are skipped, bad values and misplaced lines are
 * refused with their line, and a newer version is refused by its number. */
TEST(manifest_v2_pack_line)
{
    ch_manifest m;
    chute_error err = {0};
    const char *ok = "chute-dataset 2\npack max_side=256 quality=90 raw=0 future=x\n"
                     "shard a 2 10\nend 1 2\n";
    CHECK(ch_manifest_parse("M", ok, strlen(ok), &m, &err) == CHUTE_OK, "v2: %s", err.message);
    CHECK(m.version == 2 && m.max_side == 256 && m.quality == 90 && m.raw == 0 &&
              m.nshards == 1 && m.total == 2,
          "v2 parsed as version %u max_side %u quality %u raw %d", m.version, m.max_side,
          m.quality, m.raw);
    ch_manifest_free(&m);
    const char *raw = "chute-dataset 2\npack raw=1\nshard a 1 1\nend 1 1\n";
    CHECK(ch_manifest_parse("M", raw, strlen(raw), &m, &err) == CHUTE_OK && m.raw == 1 &&
              m.max_side == 0,
          "v2 raw: %s", err.message);
    ch_manifest_free(&m);
    const char *v1 = "chute-dataset 1\nshard a 1 1\nend 1 1\n";
    CHECK(ch_manifest_parse("M", v1, strlen(v1), &m, &err) == CHUTE_OK && m.version == 1 &&
              m.max_side == 0 && m.quality == 0 && m.raw == 0,
          "v1: %s", err.message);
    ch_manifest_free(&m);
    struct {
        const char *text;
        int want;
        const char *in_msg;
    } bad[] = {
        {"chute-dataset 1\npack max_side=256\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "M:2: unrecognised line"},
        {"chute-dataset 2\nshard a 1 1\npack raw=1\nend 1 1\n", CHUTE_ECORRUPT,
         "M:3: the pack line must come once"},
        {"chute-dataset 2\npack raw=1\npack raw=1\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "M:3: the pack line must come once"},
        {"chute-dataset 2\npack raw=2\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "M:2: pack line: value '2' is out of range"},
        {"chute-dataset 2\npack max_side=-1\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "M:2: pack line: value '-1' is a negative"},
        {"chute-dataset 2\npack max_side=4294967296\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "out of range"},
        {"chute-dataset 2\npack  raw=1\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "M:2: pack line: '' is not KEY=VALUE"},
        {"chute-dataset 2\npack raw\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "M:2: pack line: 'raw' is not KEY=VALUE"},
        {"chute-dataset 2\npack =1\nshard a 1 1\nend 1 1\n", CHUTE_ECORRUPT,
         "is not KEY=VALUE"},
        {"chute-dataset 3\nshard a 1 1\nend 1 1\n", CHUTE_EFORMAT,
         "M:1: manifest version 3 is newer than this reader"},
        {"chute-dataset 2x\nshard a 1 1\nend 1 1\n", CHUTE_EFORMAT, "not a chute manifest"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = ch_manifest_parse("M", bad[i].text, strlen(bad[i].text), &m, &err);
        CHECK(rc == bad[i].want && strstr(err.message, bad[i].in_msg) != NULL,
              "case %zu: %s (%s), want %s with '%s'", i, chute_status_name(rc), err.message,
              chute_status_name(bad[i].want), bad[i].in_msg);
    }
    return 0;
}

/* pack --raw / --max-side sizes: the record size is computed in 64 bits
 * and checked before anything is allocated (2^32-1 squared would wrap a
 * size_t product); torchvision's Resize arithmetic for the new size. */
TEST(pack_raw_record_and_target_sizes)
{
    chute_error err = {0};
    ch_buf b = {0};
    size_t len = 0;
    uint8_t px[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    CHECK(ch_pr_raw_record(px, 6, 0xFFFFFFFFu, 0xFFFFFFFFu, UINT64_MAX, &b, &len, &err) ==
                  CHUTE_ELIMIT &&
              b.data == NULL,
          "4G x 4G: %s", err.message);
    CHECK(ch_pr_raw_record(px, 6, 2, 2, 16 + 11, &b, &len, &err) == CHUTE_ELIMIT &&
              strstr(err.message, "28 bytes") && b.data == NULL,
          "one byte over: %s", err.message);
    CHECK(ch_pr_raw_record(px, 6, 2, 2, 16 + 12, &b, &len, &err) == CHUTE_OK && len == 28 &&
              memcmp(b.data, "CHRAW\x01\x03\x00\x02\x00\x00\x00\x02\x00\x00\x00", 16) == 0 &&
              memcmp(b.data + 16, px, 12) == 0,
          "exact fit: %s", err.message);
    ch_buf_free(&b);
    uint32_t w, h;
    /* torchvision.transforms.Resize(256) on (W, H): (256, int(256 * H / W)) */
    CHECK(ch_pr_target(500, 375, 256, &w, &h) == 1 && w == 341 && h == 256, "500x375 -> %ux%u",
          w, h);
    CHECK(ch_pr_target(375, 500, 256, &w, &h) == 1 && w == 256 && h == 341, "375x500 -> %ux%u",
          w, h);
    CHECK(ch_pr_target(256, 4000, 256, &w, &h) == 0 && w == 256 && h == 4000, "kept: %ux%u", w,
          h);
    CHECK(ch_pr_target(100000, 257, 256, &w, &h) == 1 && w == 99610 && h == 256,
          "panorama -> %ux%u", w, h);
    CHECK(ch_pr_target(640, 480, 0, &w, &h) == 0 && w == 640 && h == 480, "no max side");
    return 0;
}

TEST(packfile_names_are_strict)
{
    struct {
        const char *name;
        int kind;
        unsigned index;
    } c[] = {
        {"shard-00000.chute", CH_PACKFILE_SHARD, 0},
        {"shard-00042.chute", CH_PACKFILE_SHARD, 42},
        {"shard-4294967295.chute", CH_PACKFILE_SHARD, 4294967295u},
        {"shard-00001.chute.tmp", CH_PACKFILE_TEMP, 0},
        {"chute.manifest.tmp", CH_PACKFILE_TEMP, 0},
        {"shard--1.chute", CH_PACKFILE_OTHER, 0},
        {"shard-+1.chute", CH_PACKFILE_OTHER, 0},
        {"shard- 1.chute", CH_PACKFILE_OTHER, 0},
        {"shard-4294967296.chute", CH_PACKFILE_OTHER, 0},
        {"shard-99999999999999999999.chute", CH_PACKFILE_OTHER, 0},
        {"shard-.chute", CH_PACKFILE_OTHER, 0},
        {"shard-1x.chute", CH_PACKFILE_OTHER, 0},
        {"shard-1.chutex", CH_PACKFILE_OTHER, 0},
        {"shard-1.chute.bak", CH_PACKFILE_OTHER, 0},
        {"shard-1", CH_PACKFILE_OTHER, 0},
        {"chute.manifest", CH_PACKFILE_OTHER, 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        unsigned k = 12345;
        int kind = ch_packfile_kind(c[i].name, &k);
        CHECK(kind == c[i].kind, "'%s' is kind %d, want %d", c[i].name, kind, c[i].kind);
        CHECK(kind != CH_PACKFILE_SHARD || k == c[i].index, "'%s' index %u", c[i].name, k);
    }
    return 0;
}

/* Fields of the header and trailer that the reader used to take on trust,
 * and index entries that repeat or overlap (CRCs fixed up each time). */
TEST(index_header_and_entry_siblings)
{
    char dir[4096];
    unit_scratch("index_siblings", dir, sizeof dir);
    shard_img s;
    CHECK_OK(load_template(dir, &s, 9)); /* align 64 */
    uint8_t *t = s.bytes + s.len - CH_SHARD_TRAILER_BYTES;
    uint64_t ioff = get64(t + 8);
    uint8_t *b = malloc(s.len);
    chute_error err = {0};
    int rc;
#define MUTATE(WHAT, WANT_MSG, EDIT)                                                             \
    do {                                                                                         \
        memcpy(b, s.bytes, s.len);                                                               \
        EDIT;                                                                                    \
        put32(b + 60, ch_crc32(b, 60));                                                          \
        fix_crcs(b, s.len);                                                                      \
        memset(&err, 0, sizeof err);                                                             \
        rc = try_index(dir, b, s.len, &err, 1);                                                  \
        CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, WANT_MSG) &&                           \
                  strstr(err.message, "mutant.chute"),                                           \
              "%s: %s (%s)", WHAT, chute_status_name(rc), err.message);                          \
    } while (0)
    MUTATE("header size 65", "header size", put32(b + 12, 65));
    MUTATE("header align 100", "alignment", (put32(b + 16, 100), put32(b + s.len - 24, 100)));
    MUTATE("header align 32", "alignment", (put32(b + 16, 32), put32(b + s.len - 24, 32)));
    MUTATE("header align 2 MiB", "alignment",
           (put32(b + 16, 2u << 20), put32(b + s.len - 24, 2u << 20)));
    MUTATE("trailer align differs", "disagrees", put32(b + s.len - 24, 128));
    MUTATE("trailer major 2", "disagrees", b[s.len - 28] = 2);
    uint8_t *e2 = b + ioff + 2 * CH_SHARD_ENTRY_BYTES;
    MUTATE("unaligned record", "not aligned", put64(e2, get64(e2) + 1));
    MUTATE("entry repeated", "overlaps",
           memcpy(b + ioff + 4 * CH_SHARD_ENTRY_BYTES, b + ioff + 3 * CH_SHARD_ENTRY_BYTES,
                  CH_SHARD_ENTRY_BYTES));
    MUTATE("entries swapped", "overlaps",
           (memcpy(b + ioff + 5 * CH_SHARD_ENTRY_BYTES, s.bytes + ioff + 6 * CH_SHARD_ENTRY_BYTES,
                   CH_SHARD_ENTRY_BYTES),
            memcpy(b + ioff + 6 * CH_SHARD_ENTRY_BYTES, s.bytes + ioff + 5 * CH_SHARD_ENTRY_BYTES,
                   CH_SHARD_ENTRY_BYTES)));
    MUTATE("record inside the header", "outside", put64(b + ioff, 0));
    /* Unmutated, it still reads. */
    memcpy(b, s.bytes, s.len);
    CHECK(try_index(dir, b, s.len, &err, 1) == CHUTE_OK, "template: %s", err.message);
    free(b);
    free(s.bytes);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Many shards, few descriptors (issue #8 item 17)                     */
/* ------------------------------------------------------------------ */

/* Sample j of shard k of a synthetic dataset: 20..219 bytes that depend
 * only on (k, j), so readers can check every byte without the writer. */
static uint32_t tiny_sample(uint32_t k, uint32_t j, uint8_t *buf)
{
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ ((uint64_t)k << 20) ^ j;
    unit_rand(&seed);
    uint32_t len = 20 + (uint32_t)(unit_rand(&seed) % 200);
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(unit_rand(&seed) >> 56);
    return len;
}

/* nshards shards of `per` samples each, written with the shard writer,
 * and a manifest written here (the format's text, not pack's code). */
static int write_tiny_dataset(const char *out, uint32_t nshards, uint32_t per)
{
    unit_mkdirs(out);
    size_t cap = 64 + (size_t)nshards * 64, len = 0;
    char *m = malloc(cap);
    len += (size_t)snprintf(m + len, cap - len, "chute-dataset 1\n");
    uint8_t buf[256];
    for (uint32_t k = 0; k < nshards; k++) {
        char path[4200], name[64];
        snprintf(name, sizeof name, "shard-%05u.chute", k);
        snprintf(path, sizeof path, "%s/%s", out, name);
        ch_shard_writer *w = NULL;
        chute_error err = {0};
        if (ch_shard_writer_open(path, 64, 3, k_classes, &w, &err) != CHUTE_OK) {
            fprintf(stderr, "%s\n", err.message);
            free(m);
            return 1;
        }
        for (uint32_t j = 0; j < per; j++) {
            uint32_t n = tiny_sample(k, j, buf);
            char sname[64];
            snprintf(sname, sizeof sname, "s%u/%u.jpg", k, j);
            if (ch_shard_writer_add(w, buf, n, (int32_t)((k + j) % 3), 1, sname, &err) !=
                CHUTE_OK) {
                fprintf(stderr, "%s\n", err.message);
                ch_shard_writer_abort(w);
                free(m);
                return 1;
            }
        }
        if (ch_shard_writer_finish(w, &err) != CHUTE_OK) {
            fprintf(stderr, "%s\n", err.message);
            free(m);
            return 1;
        }
        struct stat st;
        if (stat(path, &st) != 0) {
            free(m);
            return 1;
        }
        len += (size_t)snprintf(m + len, cap - len, "shard %s %u %lld\n", name, per,
                                (long long)st.st_size);
    }
    len += (size_t)snprintf(m + len, cap - len, "end %u %llu\n", nshards,
                            (unsigned long long)nshards * per);
    char mp[4300];
    snprintf(mp, sizeof mp, "%s/%s", out, CH_MANIFEST_NAME);
    int rc = unit_write_file(mp, m, len);
    free(m);
    return rc ? 1 : 0;
}

/* Read sample i and compare with tiny_sample; 0 = equal. */
static int check_tiny(const chute_dataset *ds, uint64_t i, uint32_t per, char *why, size_t wn)
{
    uint8_t want[256], got[256];
    uint32_t k = (uint32_t)(i / per), j = (uint32_t)(i % per);
    uint32_t n = tiny_sample(k, j, want);
    size_t len = 0;
    chute_error err = {0};
    int rc = chute_dataset_read(ds, i, got, sizeof got, &len, &err);
    if (rc != CHUTE_OK) {
        snprintf(why, wn, "sample %llu: %s (%s)", (unsigned long long)i, chute_status_name(rc),
                 err.message);
        return 1;
    }
    if (len != n || memcmp(got, want, n) != 0 || chute_dataset_label(ds, i) != (k + j) % 3) {
        snprintf(why, wn, "sample %llu: wrong bytes or label", (unsigned long long)i);
        return 1;
    }
    return 0;
}

/* Lower the soft descriptor limit (the hard one stays). */
static int set_nofile(rlim_t soft)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < soft)
        return -1;
    rl.rlim_cur = soft;
    return setrlimit(RLIMIT_NOFILE, &rl);
}

static int count_open_fds(void)
{
    char cmd[64];
    snprintf(cmd, sizeof cmd, "ls /proc/%d/fd | wc -l", (int)getpid());
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n - 1; /* the pipe */
}

typedef struct reader_arg {
    const chute_dataset *ds;
    uint64_t n, start, stride;
    uint32_t per;
    int passes;
    int failed;
    char why[600];
} reader_arg;

/* Every sample, in the order start, start+stride, ... (mod n). */
static void *reader_thread(void *p)
{
    reader_arg *a = p;
    for (int pass = 0; pass < a->passes && !a->failed; pass++)
        for (uint64_t i = 0, at = a->start % a->n; i < a->n && !a->failed;
             i++, at = (at + a->stride) % a->n)
            a->failed = check_tiny(a->ds, at, a->per, a->why, sizeof a->why);
    return NULL;
}

/* Read every sample from `threads` threads at once (strides coprime to n). */
static int read_all_threaded(const chute_dataset *ds, uint64_t n, uint32_t per, int threads,
                             int passes)
{
    pthread_t th[16];
    reader_arg a[16];
    static const uint64_t strides[] = {1, 7919, 104729, 15485863, 3, 5, 11, 13,
                                       17, 19, 23, 29, 31, 37, 41, 43};
    for (int t = 0; t < threads; t++) {
        uint64_t st = strides[t];
        while (n % st == 0 && st > 1) /* keep it a permutation */
            st += 2;
        a[t] = (reader_arg){ds, n, (uint64_t)t * 97, st, per, passes, 0, ""};
        pthread_create(&th[t], NULL, reader_thread, &a[t]);
    }
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        if (a[t].failed) {
            fprintf(stderr, "thread %d: %s\n", t, a[t].why);
            failed = 1;
        }
    }
    return failed;
}

TEST(many_shards_under_low_fd_limit)
{
    char dir[4096], out[4200];
    unit_scratch("many_shards_low_fd", dir, sizeof dir);
    snprintf(out, sizeof out, "%s/shards", dir);
    enum { NSHARDS = 1100, PER = 2 };
    CHECK_OK(write_tiny_dataset(out, NSHARDS, PER));
    if (set_nofile(256) != 0)
        SKIP("cannot set RLIMIT_NOFILE to 256 here");
    chute_dataset *ds = NULL;
    chute_error err = {0};
    int rc = chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &ds, &err);
    CHECK(rc == CHUTE_OK, "%u shards under ulimit -n 256: %s (%s)", NSHARDS,
          chute_status_name(rc), err.message);
    const uint64_t n = (uint64_t)NSHARDS * PER;
    CHECK(chute_dataset_size(ds) == n, "size %llu", (unsigned long long)chute_dataset_size(ds));
    char why[600];
    for (uint64_t i = 0; i < n; i++)
        CHECK(check_tiny(ds, i, PER, why, sizeof why) == 0, "%s", why);
    CHECK(read_all_threaded(ds, n, PER, 4, 2) == 0, "threaded reads");
    ch_shard_cache_stats cs;
    CHECK(ch_shards_cache_stats(ds, &cs) == CHUTE_OK, "stats");
    fprintf(stderr, "cache: capacity %u, open %u, misses %llu, opens %llu, evictions %llu, "
                    "transient %llu\n",
            cs.capacity, cs.open_now, (unsigned long long)cs.misses, (unsigned long long)cs.opens,
            (unsigned long long)cs.evictions, (unsigned long long)cs.transient);
    CHECK(cs.evicting && cs.capacity == 128 && cs.open_now <= cs.capacity && cs.evictions > 0,
          "cache state");
    int fds = count_open_fds();
    CHECK(fds > 0 && fds <= 128 + 16, "%d descriptors open", fds);
    chute_dataset_close(ds);
    CHECK(count_open_fds() < 16, "close left %d descriptors", count_open_fds());
    return 0;
}

/* Descriptors nearly or wholly used up by the rest of the program: a
 * dataset still opens with what is left and reads everything; when none
 * is left, the message names the limit and how to raise it. */
TEST(fd_exhaustion_is_survived_or_named)
{
    char dir[4096], out[4200];
    unit_scratch("fd_exhaustion", dir, sizeof dir);
    snprintf(out, sizeof out, "%s/shards", dir);
    enum { NSHARDS = 40, PER = 3 };
    const uint64_t n = (uint64_t)NSHARDS * PER;
    CHECK_OK(write_tiny_dataset(out, NSHARDS, PER));
    if (set_nofile(64) != 0)
        SKIP("cannot set RLIMIT_NOFILE to 64 here");
    chute_dataset *a = NULL, *b = NULL, *c = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &a, &err) == CHUTE_OK, "open a: %s",
          err.message);
    /* Use up every descriptor but two. */
    int dups[128], nd = 0;
    while (nd < 128 && (dups[nd] = dup(2)) >= 0)
        nd++;
    CHECK(nd < 128 && errno == EMFILE, "fd table never filled");
    if (nd < 2) { /* the process came with more than 62 descriptors open */
        while (nd > 0)
            close(dups[--nd]);
        chute_dataset_close(a);
        SKIP("too many descriptors inherited to test with a limit of 64");
    }
    close(dups[--nd]);
    close(dups[--nd]);
    int rc = chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &b, &err);
    CHECK(rc == CHUTE_OK, "open with 2 free descriptors: %s (%s)", chute_status_name(rc),
          err.message);
    ch_shard_cache_stats cs;
    CHECK(ch_shards_cache_stats(b, &cs) == CHUTE_OK && cs.evicting && cs.capacity >= 1 &&
              cs.capacity <= 2,
          "cache shrank to what was free: capacity %u", cs.capacity);
    char why[600];
    for (uint64_t i = 0; i < n; i++) {
        CHECK(check_tiny(b, (i * 7) % n, PER, why, sizeof why) == 0, "b: %s", why);
        CHECK(check_tiny(a, (i * 11) % n, PER, why, sizeof why) == 0, "a: %s", why);
    }
    /* No descriptor left at all: a new dataset cannot open, and says why. */
    while (nd < 128 && (dups[nd] = dup(2)) >= 0)
        nd++;
    memset(&err, 0, sizeof err);
    rc = chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &c, &err);
    CHECK(rc == CHUTE_EIO && c == NULL, "open with none free: %s (%s)", chute_status_name(rc),
          err.message);
    CHECK(strstr(err.message, "RLIMIT_NOFILE") && strstr(err.message, "ulimit -n") &&
              strstr(err.message, "64"),
          "message does not name the limit: %s", err.message);
    fprintf(stderr, "message: %s\n", err.message);
    /* The open datasets keep working: eviction closes before it opens. */
    for (uint64_t i = 0; i < n; i++) {
        CHECK(check_tiny(a, (i * 13) % n, PER, why, sizeof why) == 0, "a, none free: %s", why);
        CHECK(check_tiny(b, (i * 17) % n, PER, why, sizeof why) == 0, "b, none free: %s", why);
    }
    while (nd > 0)
        close(dups[--nd]);
    chute_dataset_close(a);
    chute_dataset_close(b);
    return 0;
}

static double read_rate_ns(const chute_dataset *ds, uint64_t n, uint32_t per, int threads,
                           int passes)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (read_all_threaded(ds, n, per, threads, passes) != 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    return ns / ((double)n * passes * threads);
}

/* When every shard fits the cache, reads take no lock at all: after many
 * concurrent reads the cache's lock-taking path was never entered.  With
 * CHUTE_FDCACHE_BENCH=1 it also prints ns per read for 1..16 threads, all
 * shards cached vs a cache 1/4 the size of the dataset. */
TEST(fd_cache_no_lock_when_shards_fit)
{
    char dir[4096], out[4200];
    unit_scratch("fd_cache_fit", dir, sizeof dir);
    snprintf(out, sizeof out, "%s/shards", dir);
    enum { NSHARDS = 120, PER = 20 };
    const uint64_t n = (uint64_t)NSHARDS * PER;
    CHECK_OK(write_tiny_dataset(out, NSHARDS, PER));
    /* First the same dataset with a cache of 30 (soft limit 60): evicting. */
    if (set_nofile(60) != 0 || set_nofile(1024) != 0 || set_nofile(60) != 0)
        SKIP("cannot set RLIMIT_NOFILE to 60 and 1024 here");
    chute_dataset *ds = NULL, *ev = NULL;
    chute_error err = {0};
    ch_shard_cache_stats cs;
    CHECK(chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &ev, &err) == CHUTE_OK, "open: %s",
          err.message);
    CHECK(ch_shards_cache_stats(ev, &cs) == CHUTE_OK && cs.evicting && cs.capacity == 30,
          "evicting cache: capacity %u", cs.capacity);
    CHECK(read_all_threaded(ev, n, PER, 4, 1) == 0, "threaded reads, evicting");
    CHECK(set_nofile(1024) == 0, "setrlimit 1024");
    CHECK(chute_dataset_open(out, CHUTE_SOURCE_SHARDS, &ds, &err) == CHUTE_OK, "open: %s",
          err.message);
    CHECK(ch_shards_cache_stats(ds, &cs) == CHUTE_OK && !cs.evicting && cs.capacity == 512 &&
              cs.open_now == NSHARDS && cs.opens == NSHARDS,
          "all shards cached at open: capacity %u open %u", cs.capacity, cs.open_now);
    CHECK(read_all_threaded(ds, n, PER, 4, 3) == 0, "threaded reads");
    CHECK(ch_shards_cache_stats(ds, &cs) == CHUTE_OK && cs.misses == 0 && cs.opens == NSHARDS,
          "%llu reads took the lock, %llu opens", (unsigned long long)cs.misses,
          (unsigned long long)cs.opens);
    const char *bench = getenv("CHUTE_FDCACHE_BENCH");
    if (bench && *bench == '1') {
        int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
        for (int th = 1; th <= 16 && th <= ncpu; th *= 2) {
            ch_shard_cache_stats a0, a1;
            ch_shards_cache_stats(ev, &a0);
            double fit = read_rate_ns(ds, n, PER, th, 20);
            double evict = read_rate_ns(ev, n, PER, th, 20);
            ch_shards_cache_stats(ev, &a1);
            printf("fdcache threads %2d: all cached %7.1f ns/read, evicting %7.1f ns/read "
                   "(%.1f%% misses)\n",
                   th, fit, evict,
                   100.0 * (double)(a1.misses - a0.misses) / ((double)n * 20 * th));
        }
        ch_shards_cache_stats(ds, &cs);
        printf("fdcache all-cached dataset: %llu lock acquisitions in all runs\n",
               (unsigned long long)cs.misses);
    }
    chute_dataset_close(ev);
    chute_dataset_close(ds);
    return 0;
}

UNIT_MAIN
