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

#include <fcntl.h>

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
        {"wrong version", "chute-dataset 2\nend 0 0\n", CHUTE_EFORMAT, "manifest"},
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

UNIT_MAIN
