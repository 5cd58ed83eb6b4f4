/*
 * test_parse.c — unit tests of the format parsers (src/format/parse.h):
 * CRC32C, TFRecord framing (plain, GZIP/ZLIB, DALI index files), the
 * tf.train.Example reader, the tar walker and WebDataset grouping.
 *
 * Inputs are built here by independent little writers (a bitwise CRC32C,
 * a protobuf encoder, a ustar header writer, zlib's own deflate), never by
 * the code under test; expected values come from those inputs, published
 * check values, or (tests/fixtures) the real tools.  Hostile inputs are
 * generated exhaustively where that is cheap (every truncation, every
 * header byte flipped) and must give a status code, never a crash.
 */
#include "unit.h"

#include "common/crc32c_table.h"
#include "format/parse.h"

#include <fcntl.h>
#include <zlib.h>

/* ---- independent helpers ------------------------------------------------ */

static uint32_t ref_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t ref_mask(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_le(bytes *b, uint64_t v, int n)
{
    uint8_t t[8];
    for (int i = 0; i < n; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)n);
}

static void tfr_put(bytes *b, const uint8_t *data, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    put(b, len, 8);
    put_le(b, ref_mask(ref_crc32c(len, 8)), 4);
    put(b, data, n);
    put_le(b, ref_mask(ref_crc32c(data, n)), 4);
}

/* A TFRecord file of records with the given lengths; data byte j of
 * record i is (i * 31 + j) & 255. */
static bytes tfr_file(const size_t *lens, int n)
{
    bytes b = {0};
    for (int i = 0; i < n; i++) {
        uint8_t *d = malloc(lens[i] + 1);
        for (size_t j = 0; j < lens[i]; j++)
            d[j] = (uint8_t)(i * 31 + j);
        tfr_put(&b, d, lens[i]);
        free(d);
    }
    return b;
}

static int write_tmp(const char *test, const char *fname, const void *p, size_t n, char *path,
                     size_t cap)
{
    char dir[4096];
    unit_scratch(test, dir, sizeof dir);
    snprintf(path, cap, "%s/%s", dir, fname);
    return unit_write_file(path, p, n);
}

/* ---- CRC32C ------------------------------------------------------------- */

TEST(crc32c_known_values)
{
    /* The CRC catalogue's check value and RFC 3720 B.4's test vectors. */
    const char *check = "123456789";
    CHECK(ch_crc32c(0, check, 9) == 0xE3069283u, "check value %08x", ch_crc32c(0, check, 9));
    CHECK(ch_crc32c_sw(0, check, 9) == 0xE3069283u, "sw check value");
    uint8_t z[32] = {0}, f[32], up[32], down[32];
    for (int i = 0; i < 32; i++) {
        f[i] = 0xff;
        up[i] = (uint8_t)i;
        down[i] = (uint8_t)(31 - i);
    }
    CHECK(ch_crc32c(0, z, 32) == 0x8A9136AAu, "zeros");
    CHECK(ch_crc32c(0, f, 32) == 0x62A8AB43u, "ones");
    CHECK(ch_crc32c(0, up, 32) == 0x46DD794Eu, "ascending");
    CHECK(ch_crc32c(0, down, 32) == 0x113FDB5Cu, "descending");
    CHECK(ch_crc32c(0, NULL, 0) == 0, "empty");
    /* The generated tables, entry by entry, against a bitwise derivation. */
    for (int i = 0; i < 256; i++) {
        uint32_t c = (uint32_t)i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        CHECK(ch_crc32c_table[0][i] == c, "table[0][%d]", i);
        for (int t = 1; t < 8; t++) {
            c = (c >> 8) ^ ch_crc32c_table[0][c & 0xff];
            CHECK(ch_crc32c_table[t][i] == c, "table[%d][%d]", t, i);
        }
    }
    return 0;
}

TEST(crc32c_hw_equals_sw)
{
    uint8_t buf[4096 + 16];
    uint64_t s = 12345;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)unit_rand(&s);
    uint32_t hw;
    int have_hw = ch_crc32c_hw(0, buf, 1, &hw) == CHUTE_OK;
    for (size_t off = 0; off < 16; off++)
        for (size_t n = 0; n <= 600; n += (n < 80 ? 1 : 37)) {
            uint32_t want = ref_crc32c(buf + off, n);
            CHECK(ch_crc32c_sw(0, buf + off, n) == want, "sw off %zu n %zu", off, n);
            CHECK(ch_crc32c(0, buf + off, n) == want, "dispatch off %zu n %zu", off, n);
            if (have_hw) {
                CHECK(ch_crc32c_hw(0, buf + off, n, &hw) == CHUTE_OK && hw == want,
                      "hw off %zu n %zu", off, n);
            }
            /* Running CRC over two pieces equals the whole. */
            size_t cut = n / 3;
            CHECK(ch_crc32c(ch_crc32c(0, buf + off, cut), buf + off + cut, n - cut) == want,
                  "pieces off %zu n %zu", off, n);
            CHECK(ch_crc32c_sw(ch_crc32c_sw(0, buf + off, cut), buf + off + cut, n - cut) ==
                      want,
                  "sw pieces");
        }
    CHECK(ch_crc32c(0, buf, sizeof buf) == ref_crc32c(buf, sizeof buf), "4 KiB");
    if (!have_hw)
        fprintf(stderr, "note: no SSE4.2 here; only the table path was checked\n");
    return 0;
}

/* ---- TFRecord ------------------------------------------------------------ */

static const size_t k_lens[] = {0, 1, 7, 12, 1000, 70000, 3};
#define NLENS ((int)(sizeof k_lens / sizeof k_lens[0]))

static int check_index(const fmt_tfr_index *ix, const size_t *lens, int n)
{
    CHECK(ix->count == (uint64_t)n, "count %llu, want %d", (unsigned long long)ix->count, n);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        CHECK(ix->recs[i].offset == off && ix->recs[i].length == lens[i],
              "record %d: %llu+%llu, want %llu+%zu", i, (unsigned long long)ix->recs[i].offset,
              (unsigned long long)ix->recs[i].length, (unsigned long long)off, lens[i]);
        off += 16 + lens[i];
    }
    CHECK(ix->end == off, "end %llu want %llu", (unsigned long long)ix->end,
          (unsigned long long)off);
    return 0;
}

TEST(tfr_index_memory_and_file)
{
    bytes b = tfr_file(k_lens, NLENS);
    chute_error err;
    fmt_reader r;
    fmt_tfr_index ix;
    for (int verify = 0; verify < 2; verify++) {
        fmt_tfr_opts o = {.verify_data = verify};
        fmt_reader_mem(&r, b.p, b.n, "mem");
        CHECK(fmt_tfr_index_build(&r, &o, &ix, &err) == CHUTE_OK, "%s", err.message);
        CHECK_OK(check_index(&ix, k_lens, NLENS));
        fmt_tfr_index_free(&ix);
    }
    /* Through a file with windows smaller than records and headers. */
    char path[4096];
    CHECK(write_tmp("tfr_index_memory_and_file", "a.tfrecord", b.p, b.n, path, sizeof path) == 0,
          "write");
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "open");
    size_t wins[] = {12, 13, 64, 4096, 0};
    for (size_t w = 0; w < sizeof wins / sizeof wins[0]; w++)
        for (int verify = 0; verify < 2; verify++) {
            fmt_tfr_opts o = {.verify_data = verify};
            CHECK(fmt_reader_fd(&r, fd, b.n, wins[w], path, &err) == CHUTE_OK, "reader");
            int rc = fmt_tfr_index_build(&r, &o, &ix, &err);
            fmt_reader_free(&r);
            CHECK(rc == CHUTE_OK, "window %zu verify %d: %s", wins[w], verify, err.message);
            CHECK_OK(check_index(&ix, k_lens, NLENS));
            /* Every record's data CRC, read back by offset. */
            for (uint64_t i = 0; i < ix.count; i++)
                CHECK(fmt_tfr_check_data(b.p + ix.recs[i].offset + 12, ix.recs[i].length, "m",
                                         ix.recs[i].offset, &err) == CHUTE_OK &&
                          fmt_tfr_check_header(b.p + ix.recs[i].offset, ix.recs[i].length, "m",
                                               ix.recs[i].offset, &err) == CHUTE_OK,
                      "record %llu", (unsigned long long)i);
            fmt_tfr_index_free(&ix);
        }
    /* A file that is shorter than the size we were told: EIO, not corrupt. */
    CHECK(fmt_reader_fd(&r, fd, b.n + 100000, 64, path, &err) == CHUTE_OK, "reader");
    fmt_tfr_opts o = {.verify_data = 1};
    int rc = fmt_tfr_index_build(&r, &o, &ix, &err);
    fmt_reader_free(&r);
    fmt_tfr_index_free(&ix);
    CHECK(rc == CHUTE_EIO || rc == CHUTE_ECORRUPT, "shrunk file: %d", rc);
    CHECK(fmt_reader_fd(&r, fd, b.n + 100000, 64, path, &err) == CHUTE_OK, "reader");
    const uint8_t *v;
    rc = fmt_reader_get(&r, b.n - 10, 40, &v, &err);
    fmt_reader_free(&r);
    CHECK(rc == CHUTE_EIO && strstr(err.message, path), "short pread: %d %s", rc, err.message);
    close(fd);
    /* Empty input: no records, no error. */
    fmt_reader_mem(&r, b.p, 0, "empty");
    CHECK(fmt_tfr_index_build(&r, NULL, &ix, &err) == CHUTE_OK && ix.count == 0, "empty");
    fmt_tfr_index_free(&ix);
    free(b.p);
    return 0;
}

TEST(tfr_truncation_and_damage)
{
    const size_t lens[] = {5, 40, 9};
    bytes b = tfr_file(lens, 3);
    size_t ends[] = {0, 16 + 5, 16 + 5 + 16 + 40, b.n};
    chute_error err;
    fmt_reader r;
    fmt_tfr_index ix;
    /* Every truncation: OK only at record boundaries; else an error naming
     * the offset of the broken record, with the records before it kept. */
    for (size_t cut = 0; cut <= b.n; cut++) {
        fmt_reader_mem(&r, b.p, cut, "t.tfrecord");
        int rc = fmt_tfr_index_build(&r, NULL, &ix, &err);
        int at_boundary = 0, good = 0;
        for (int k = 0; k < 4; k++)
            if (cut == ends[k])
                at_boundary = 1;
        for (int k = 1; k < 4; k++)
            if (ends[k] <= cut)
                good = k;
        if (at_boundary) {
            CHECK(rc == CHUTE_OK, "cut %zu: %s", cut, err.message);
        } else {
            CHECK(rc == (cut < 12 ? CHUTE_EFORMAT : CHUTE_ECORRUPT), "cut %zu: rc %d", cut, rc);
            char want[64];
            snprintf(want, sizeof want, "t.tfrecord@%zu:", ends[good]);
            CHECK(strstr(err.message, want), "cut %zu: message '%s' lacks '%s'", cut,
                  err.message, want);
        }
        CHECK(ix.count == (uint64_t)good, "cut %zu: kept %llu records", cut,
              (unsigned long long)ix.count);
        fmt_tfr_index_free(&ix);
    }
    /* Every byte flipped in turn. */
    for (size_t i = 0; i < b.n; i++) {
        b.p[i] ^= 0x10;
        for (int verify = 0; verify < 2; verify++) {
            fmt_tfr_opts o = {.verify_data = verify};
            fmt_reader_mem(&r, b.p, b.n, "f");
            int rc = fmt_tfr_index_build(&r, &o, &ix, &err);
            int rec = i < ends[1] ? 0 : i < ends[2] ? 1 : 2;
            size_t in = i - ends[rec];
            int in_header = in < 12;
            if (in_header)
                CHECK(rc == (rec == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT), "flip %zu: %d", i, rc);
            else if (verify)
                CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, "data CRC"), "flip %zu", i);
            else
                CHECK(rc == CHUTE_OK && ix.count == 3, "flip %zu (data, unverified): %d", i,
                      rc);
            CHECK(ix.count == (rc == CHUTE_OK ? 3u : (uint64_t)rec), "flip %zu count", i);
            fmt_tfr_index_free(&ix);
        }
        if (i >= ends[1] + 12 && i < ends[2]) {
            CHECK(fmt_tfr_check_data(b.p + ends[1] + 12, 40, "f", ends[1], &err) ==
                      CHUTE_ECORRUPT,
                  "check_data flip %zu", i);
        }
        b.p[i] ^= 0x10;
    }
    /* A length with a *valid* CRC that points past the end, one over a
     * limit, and 2^64-1 (addition must not wrap). */
    uint64_t bad[] = {1000, 1ull << 40, UINT64_MAX, UINT64_MAX - 15};
    for (int k = 0; k < 4; k++) {
        bytes c = {0};
        put(&c, b.p, ends[1]);
        put_le(&c, bad[k], 8);
        put_le(&c, ref_mask(ref_crc32c(c.p + ends[1], 8)), 4);
        put(&c, b.p + ends[1] + 12, b.n - ends[1] - 12);
        fmt_reader_mem(&r, c.p, c.n, "L");
        fmt_tfr_opts big = {.max_record = UINT64_MAX};
        int rc = fmt_tfr_index_build(&r, k == 0 ? NULL : &big, &ix, &err);
        CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, "L@21:"), "len %llu: %d %s",
              (unsigned long long)bad[k], rc, err.message);
        fmt_tfr_index_free(&ix);
        rc = fmt_tfr_index_build(&r, NULL, &ix, &err);
        CHECK(rc == (k == 0 ? CHUTE_ECORRUPT : CHUTE_ELIMIT), "default limit, len %llu: %d",
              (unsigned long long)bad[k], rc);
        fmt_tfr_index_free(&ix);
        free(c.p);
    }
    fmt_tfr_opts few = {.max_records = 2};
    fmt_reader_mem(&r, b.p, b.n, "n");
    CHECK(fmt_tfr_index_build(&r, &few, &ix, &err) == CHUTE_ELIMIT && ix.count == 2,
          "max_records");
    fmt_tfr_index_free(&ix);
    free(b.p);
    return 0;
}

static bytes deflate_bytes(const uint8_t *p, size_t n, int gzip)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, gzip ? 16 + 15 : 15, 8, Z_DEFAULT_STRATEGY);
    bytes out = {0};
    out.cap = deflateBound(&z, (uLong)n) + 64;
    out.p = malloc(out.cap);
    z.next_in = (uint8_t *)p;
    z.avail_in = (uInt)n;
    z.next_out = out.p;
    z.avail_out = (uInt)out.cap;
    deflate(&z, Z_FINISH);
    out.n = out.cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static int index_compressed_bytes(const char *test, const bytes *c, fmt_tfr_compression comp,
                                  const fmt_tfr_opts *o, fmt_tfr_index *ix, bytes *cache,
                                  chute_error *err)
{
    char path[4096], cpath[4096];
    write_tmp(test, "c.tfrecord.gz", c->p, c->n, path, sizeof path);
    snprintf(cpath, sizeof cpath, "%s.cache", path);
    int fd = open(path, O_RDONLY);
    int cfd = cache ? open(cpath, O_RDWR | O_CREAT | O_TRUNC, 0644) : -1;
    int rc = fmt_tfr_index_compressed(fd, path, comp, o, cfd, ix, err);
    close(fd);
    if (cfd >= 0) {
        close(cfd);
        cache->p = unit_read_file(cpath, &cache->n);
    }
    return rc;
}

TEST(tfr_compressed)
{
    bytes b = tfr_file(k_lens, NLENS);
    chute_error err;
    fmt_tfr_index ix;
    for (int gz = 0; gz < 2; gz++) {
        fmt_tfr_compression comp = gz ? FMT_TFR_GZIP : FMT_TFR_ZLIB;
        bytes c = deflate_bytes(b.p, b.n, gz);
        bytes cache = {0};
        CHECK(index_compressed_bytes("tfr_compressed", &c, comp, NULL, &ix, &cache, &err) ==
                  CHUTE_OK,
              "%s", err.message);
        CHECK_OK(check_index(&ix, k_lens, NLENS));
        CHECK(cache.n == b.n && memcmp(cache.p, b.p, b.n) == 0, "cache = the plain stream");
        fmt_tfr_index_free(&ix);
        free(cache.p);
        /* Every truncation of the compressed file is an error, never a crash
         * and never a silently shorter index (except at 0 bytes). */
        for (size_t cut = 1; cut < c.n; cut += (cut < 64 ? 1 : 97)) {
            bytes t = {c.p, cut, cut};
            int rc = index_compressed_bytes("tfr_compressed", &t, comp, NULL, &ix, NULL, &err);
            CHECK(rc == CHUTE_ECORRUPT || rc == CHUTE_EFORMAT, "%s cut %zu: %d (%s)",
                  gz ? "gzip" : "zlib", cut, rc, err.message);
            fmt_tfr_index_free(&ix);
        }
        /* The limit on inflated bytes (gzip bombs). */
        fmt_tfr_opts small = {.max_inflated = 1000};
        CHECK(index_compressed_bytes("tfr_compressed", &c, comp, &small, &ix, NULL, &err) ==
                  CHUTE_ELIMIT,
              "max_inflated");
        fmt_tfr_index_free(&ix);
        /* A plain file offered as compressed: not that format. */
        CHECK(index_compressed_bytes("tfr_compressed", &b, comp, NULL, &ix, NULL, &err) ==
                  CHUTE_EFORMAT,
              "plain as %s: %s", gz ? "gzip" : "zlib", err.message);
        fmt_tfr_index_free(&ix);
        free(c.p);
    }
    /* Two gzip members back to back (cat a.gz b.gz), split mid-record. */
    size_t half = 16 + 0 + 16 + 1 + 5; /* inside record 2 */
    bytes g1 = deflate_bytes(b.p, half, 1), g2 = deflate_bytes(b.p + half, b.n - half, 1);
    bytes cat = {0};
    put(&cat, g1.p, g1.n);
    put(&cat, g2.p, g2.n);
    CHECK(index_compressed_bytes("tfr_compressed", &cat, FMT_TFR_GZIP, NULL, &ix, NULL, &err) ==
              CHUTE_OK,
          "concatenated: %s", err.message);
    CHECK_OK(check_index(&ix, k_lens, NLENS));
    fmt_tfr_index_free(&ix);
    /* Garbage after the last member. */
    put(&cat, "JUNKJUNK", 8);
    CHECK(index_compressed_bytes("tfr_compressed", &cat, FMT_TFR_GZIP, NULL, &ix, NULL, &err) ==
              CHUTE_ECORRUPT,
          "trailing garbage");
    fmt_tfr_index_free(&ix);
    /* A data CRC error inside the compressed stream names the record. */
    b.p[16 + 16 + 1 + 12 + 3] ^= 1; /* record 2 (len 7), data byte 3 */
    bytes c = deflate_bytes(b.p, b.n, 1);
    CHECK(index_compressed_bytes("tfr_compressed", &c, FMT_TFR_GZIP, NULL, &ix, NULL, &err) ==
                  CHUTE_ECORRUPT &&
              strstr(err.message, "@33 (uncompressed)") && ix.count == 2,
          "crc in gzip: %s", err.message);
    fmt_tfr_index_free(&ix);
    free(c.p);
    free(cat.p);
    free(g1.p);
    free(g2.p);
    free(b.p);
    return 0;
}

TEST(tfr_dali_index)
{
    bytes b = tfr_file(k_lens, NLENS);
    chute_error err;
    fmt_reader r;
    fmt_tfr_index ix, back;
    fmt_reader_mem(&r, b.p, b.n, "m");
    CHECK(fmt_tfr_index_build(&r, NULL, &ix, &err) == CHUTE_OK, "build");
    char *text;
    size_t len;
    CHECK(fmt_tfr_index_format_dali(&ix, &text, &len, &err) == CHUTE_OK, "format");
    /* The layout tfrecord2idx writes: "offset whole-size\n". */
    CHECK(strncmp(text, "0 16\n16 17\n33 23\n", 17) == 0, "text starts '%.20s'", text);
    CHECK(fmt_tfr_index_parse_dali(text, len, "i", b.n, &back, &err) == CHUTE_OK, "%s",
          err.message);
    CHECK_OK(check_index(&back, k_lens, NLENS));
    fmt_tfr_index_free(&back);
    free(text);
    fmt_tfr_index_free(&ix);
    /* CRLF, tabs, no final newline: fine. */
    const char *ok = "0 16\r\n16\t17\n  33 23";
    CHECK(fmt_tfr_index_parse_dali(ok, strlen(ok), "i", b.n, &back, &err) == CHUTE_OK &&
              back.count == 3,
          "%s", err.message);
    fmt_tfr_index_free(&back);
    struct {
        const char *text, *msg;
    } bad[] = {
        {"0 16\n16", "line 2: an offset without a size"},
        {"0 16\n16 x7", "line 2: expected a decimal number"},
        {"0 16\n16 17a", "line 2: expected a space"},
        {"0 16\n8 17\n", "line 2: record at 8 overlaps"},
        {"0 15\n", "line 1: record size 15 is smaller"},
        {"0 99999999\n", "line 1: record 0+99999999 runs past the end"},
        {"18446744073709551615 16", "runs past"},
        {"99999999999999999999 16", "number too large"},
        {"-1 16", "expected a decimal number"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int rc = fmt_tfr_index_parse_dali(bad[k].text, strlen(bad[k].text), "x.idx", b.n, &back,
                                          &err);
        CHECK(rc == CHUTE_ECORRUPT && strstr(err.message, bad[k].msg) &&
                  strstr(err.message, "x.idx"),
              "'%s': %d '%s'", bad[k].text, rc, err.message);
        fmt_tfr_index_free(&back);
    }
    /* A stale index: the header at its offset holds another length. */
    CHECK(fmt_tfr_check_header(b.p + 16, 2, "s", 16, &err) == CHUTE_ECORRUPT &&
              strstr(err.message, "index says 2"),
          "%s", err.message);
    free(b.p);
    return 0;
}

/* ---- protobuf (tf.train.Example) ------------------------------------------ */

static void pb_varint(bytes *b, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            c |= 0x80;
        put(b, &c, 1);
    } while (v);
}

static void pb_tag(bytes *b, uint32_t num, int wt)
{
    pb_varint(b, ((uint64_t)num << 3) | (uint64_t)wt);
}

static void pb_lenfield(bytes *b, uint32_t num, const bytes *body)
{
    pb_tag(b, num, 2);
    pb_varint(b, body->n);
    put(b, body->p, body->n);
}

/* A Feature whose list field `kind` (1 bytes, 2 float, 3 int64) has body. */
static void pb_entry(bytes *features, const char *key, int kind, const bytes *list)
{
    bytes feat = {0}, entry = {0}, k = {(uint8_t *)key, strlen(key), 0};
    if (kind)
        pb_lenfield(&feat, (uint32_t)kind, list);
    pb_lenfield(&entry, 1, &k);
    pb_lenfield(&entry, 2, &feat);
    pb_lenfield(features, 1, &entry);
    free(feat.p);
    free(entry.p);
}

static bytes pb_example(const bytes *features)
{
    bytes ex = {0};
    pb_lenfield(&ex, 1, features);
    return ex;
}

TEST(pb_example_values)
{
    bytes fs = {0}, l = {0};
    /* image: two strings, with an unknown varint field between them */
    bytes s1 = {(uint8_t *)"jpegdata", 8, 0}, s2 = {(uint8_t *)"", 0, 0};
    pb_lenfield(&l, 1, &s1);
    pb_tag(&l, 7, 0);
    pb_varint(&l, 12345);
    pb_lenfield(&l, 1, &s2);
    pb_entry(&fs, "image", 1, &l);
    l.n = 0;
    /* label: unpacked int64 -1 (a 10-byte varint) then packed 5, 2^63-1 */
    pb_tag(&l, 1, 0);
    pb_varint(&l, UINT64_MAX);
    bytes packed = {0};
    pb_varint(&packed, 5);
    pb_varint(&packed, INT64_MAX);
    pb_lenfield(&l, 1, &packed);
    pb_entry(&fs, "label", 3, &l);
    l.n = 0;
    /* floats: packed 1.5, -2 then unpacked 0.25; unknown fixed64 + fixed32 */
    float fv[3] = {1.5f, -2.0f, 0.25f};
    bytes pf = {0};
    put(&pf, fv, 8);
    pb_lenfield(&l, 1, &pf);
    pb_tag(&l, 9, 1);
    put_le(&l, 0x1122334455667788ull, 8);
    pb_tag(&l, 1, 5);
    put(&l, &fv[2], 4);
    pb_tag(&l, 10, 5);
    put_le(&l, 7, 4);
    pb_entry(&fs, "floats", 2, &l);
    l.n = 0;
    pb_entry(&fs, "none", 0, &l);                 /* Feature with no list */
    pb_entry(&fs, "empty", 3, &l);                /* empty Int64List */
    bytes pl = {0};
    pb_lenfield(&pl, 1, &packed);
    pb_entry(&fs, "dup", 3, &pl);                 /* replaced below */
    free(pl.p);
    bytes one = {0};
    pb_tag(&one, 1, 0);
    pb_varint(&one, 42);
    pb_entry(&fs, "dup", 3, &one);                /* a repeated map key: last wins */
    /* Unknown fields at the Example and Features levels. */
    bytes ex = pb_example(&fs);
    pb_tag(&ex, 2, 2);
    pb_varint(&ex, 3);
    put(&ex, "xyz", 3);
    pb_tag(&ex, 5, 0);
    pb_varint(&ex, 1);

    const char *keys[] = {"image", "label", "floats", "none", "empty", "dup", "missing"};
    fmt_pb_feature f[7];
    chute_error err;
    CHECK(fmt_pb_example_find(ex.p, ex.n, keys, 7, f, "ex", 0, &err) == CHUTE_OK, "%s",
          err.message);
    CHECK(f[0].kind == FMT_PB_BYTES && f[0].count == 2, "image kind %d count %llu", f[0].kind,
          (unsigned long long)f[0].count);
    size_t pos = 0, n;
    const uint8_t *p;
    CHECK(fmt_pb_bytes_next(&f[0], &pos, &p, &n) == 1 && n == 8 && memcmp(p, "jpegdata", 8) == 0,
          "first string");
    CHECK(p >= ex.p && p + n <= ex.p + ex.n, "a view into the buffer");
    CHECK(fmt_pb_bytes_next(&f[0], &pos, &p, &n) == 1 && n == 0, "second (empty) string");
    CHECK(fmt_pb_bytes_next(&f[0], &pos, &p, &n) == 0, "end");
    int64_t iv[4];
    CHECK(f[1].kind == FMT_PB_INT64 && f[1].count == 3, "label count");
    CHECK(fmt_pb_int64_decode(&f[1], iv, 4) == 3 && iv[0] == -1 && iv[1] == 5 &&
              iv[2] == INT64_MAX,
          "int64 values %lld %lld %lld", (long long)iv[0], (long long)iv[1], (long long)iv[2]);
    CHECK(fmt_pb_int64_decode(&f[1], iv, 2) == 2, "cap respected");
    float out[4];
    CHECK(f[2].kind == FMT_PB_FLOAT && f[2].count == 3, "floats count");
    CHECK(fmt_pb_float_decode(&f[2], out, 4) == 3 && out[0] == 1.5f && out[1] == -2.0f &&
              out[2] == 0.25f,
          "float values");
    CHECK(fmt_pb_int64_decode(&f[2], iv, 4) == 0, "kind mismatch decodes nothing");
    CHECK(f[3].kind == FMT_PB_NONE && f[3].count == 0, "no list: %d", f[3].kind);
    CHECK(f[4].kind == FMT_PB_INT64 && f[4].count == 0, "empty list");
    CHECK(f[5].kind == FMT_PB_INT64 && f[5].count == 1 && fmt_pb_int64_decode(&f[5], iv, 4) == 1 &&
              iv[0] == 42,
          "last map entry wins");
    CHECK(f[6].kind == FMT_PB_MISSING, "missing key");
    /* Empty Example: everything missing. */
    CHECK(fmt_pb_example_find(ex.p, 0, keys, 7, f, "ex", 0, &err) == CHUTE_OK &&
              f[0].kind == FMT_PB_MISSING,
          "empty example");
    /* A later oneof member replaces an earlier one (bytes, then int64). */
    bytes feat = {0}, entry = {0}, fs2 = {0}, k = {(uint8_t *)"k", 1, 0};
    bytes bl = {0};
    pb_lenfield(&bl, 1, &s1);
    pb_lenfield(&feat, 1, &bl);
    pb_lenfield(&feat, 3, &one);
    free(bl.p);
    pb_lenfield(&entry, 1, &k);
    pb_lenfield(&entry, 2, &feat);
    pb_lenfield(&fs2, 1, &entry);
    bytes ex2 = pb_example(&fs2);
    const char *k1[] = {"k"};
    CHECK(fmt_pb_example_find(ex2.p, ex2.n, k1, 1, f, "ex2", 0, &err) == CHUTE_OK &&
              f[0].kind == FMT_PB_INT64,
          "oneof: %d", f[0].kind);
    free(feat.p);
    free(entry.p);
    free(fs2.p);
    free(ex2.p);
    free(ex.p);
    free(fs.p);
    free(l.p);
    free(packed.p);
    free(pf.p);
    free(one.p);
    return 0;
}

/* Expect status `want` and `msg` in the message for a hostile Example. */
static int pb_expect(const bytes *ex, int want, const char *msg)
{
    const char *keys[] = {"a", "b"};
    fmt_pb_feature f[2];
    chute_error err = {0};
    int rc = fmt_pb_example_find(ex->p, ex->n, keys, 2, f, "rec", 1000, &err);
    CHECK(rc == want && strstr(err.message, msg), "want %d '%s', got %d '%s'", want, msg, rc,
          err.message);
    return 0;
}

TEST(pb_example_errors)
{
    bytes ex = {0};
    /* varint of 11 bytes */
    for (int i = 0; i < 10; i++)
        put(&ex, "\xff", 1);
    put(&ex, "\x01", 1);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "rec@1000: Example: varint longer than 10"));
    /* 10th byte > 1: over 64 bits */
    ex.n = 0;
    put(&ex, "\x08", 1);
    for (int i = 0; i < 9; i++)
        put(&ex, "\xff", 1);
    put(&ex, "\x02", 1);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "over 64 bits"));
    /* varint cut by the end */
    ex.n = 0;
    put(&ex, "\x08\x80", 2);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "rec@1001: Example: varint runs past the end"));
    /* a length past the end */
    ex.n = 0;
    put(&ex, "\x0a\x05" "abc", 5);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "rec@1000: Example: field 1 claims 5 bytes, 3 left"));
    /* a huge length */
    ex.n = 0;
    put(&ex, "\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "claims"));
    /* Example.features as a varint */
    ex.n = 0;
    put(&ex, "\x08\x01", 2);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "Example.features has wire type 0, 2 expected"));
    /* a group anywhere */
    ex.n = 0;
    put(&ex, "\x13\x14", 2);
    CHECK_OK(pb_expect(&ex, CHUTE_EUNSUPPORTED, "group"));
    /* wire types 6 and 7, field number 0 */
    ex.n = 0;
    put(&ex, "\x0e", 1);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "invalid wire type 6"));
    ex.n = 0;
    put(&ex, "\x02\x00", 2);
    CHECK_OK(pb_expect(&ex, CHUTE_ECORRUPT, "invalid field number 0"));
    /* Deeper: a map value that is a varint, a BytesList value as varint, a
     * packed float of 5 bytes, a packed int64 with a cut varint, a list
     * split over two messages, an entry with two values. */
    struct {
        int kind;
        const char *list;
        size_t n;
        int want;
        const char *msg;
    } lists[] = {
        {1, "\x08\x01", 2, CHUTE_ECORRUPT, "BytesList.value has wire type 0"},
        {2, "\x0a\x05" "abcde", 7, CHUTE_ECORRUPT, "not a multiple of 4"},
        {2, "\x08\x01", 2, CHUTE_ECORRUPT, "FloatList.value has wire type 0"},
        {3, "\x0a\x02\x80\x80", 4, CHUTE_ECORRUPT, "packed Int64List: varint runs past"},
        {3, "\x0d\x00\x00\x00\x00", 5, CHUTE_ECORRUPT, "Int64List.value has wire type 5"},
        {3, "\x0a\x0b\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 13, CHUTE_ECORRUPT,
         "longer than 10"},
    };
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++) {
        bytes fs = {0}, l = {(uint8_t *)lists[k].list, lists[k].n, 0};
        pb_entry(&fs, "b", lists[k].kind, &l);
        bytes e = pb_example(&fs);
        CHECK_OK(pb_expect(&e, lists[k].want, lists[k].msg));
        free(e.p);
        free(fs.p);
    }
    {
        bytes feat = {0}, entry = {0}, fs = {0}, key = {(uint8_t *)"a", 1, 0}, one = {0};
        pb_tag(&one, 1, 0);
        pb_varint(&one, 1);
        pb_lenfield(&feat, 3, &one);
        pb_lenfield(&feat, 3, &one);
        pb_lenfield(&entry, 1, &key);
        pb_lenfield(&entry, 2, &feat);
        pb_lenfield(&fs, 1, &entry);
        bytes e = pb_example(&fs);
        CHECK_OK(pb_expect(&e, CHUTE_EUNSUPPORTED, "split over two messages"));
        free(e.p);
        entry.n = fs.n = 0;
        feat.n = 0;
        pb_lenfield(&feat, 3, &one);
        pb_lenfield(&entry, 1, &key);
        pb_lenfield(&entry, 2, &feat);
        pb_lenfield(&entry, 2, &feat);
        pb_lenfield(&fs, 1, &entry);
        e = pb_example(&fs);
        CHECK_OK(pb_expect(&e, CHUTE_EUNSUPPORTED, "two values"));
        /* and a map value given as a varint */
        entry.n = fs.n = 0;
        pb_lenfield(&entry, 1, &key);
        pb_tag(&entry, 2, 0);
        pb_varint(&entry, 3);
        pb_lenfield(&fs, 1, &entry);
        free(e.p);
        e = pb_example(&fs);
        CHECK_OK(pb_expect(&e, CHUTE_ECORRUPT, "map value has wire type 0"));
        free(e.p);
        free(feat.p);
        free(entry.p);
        free(fs.p);
        free(one.p);
    }
    free(ex.p);
    return 0;
}

TEST(pb_example_mutations_never_crash)
{
    /* A valid Example, cut at every length and with every byte set to a
     * few hostile values: always a status, and OK results stay inside. */
    bytes fs = {0}, l = {0}, s1 = {(uint8_t *)"0123456789", 10, 0};
    pb_lenfield(&l, 1, &s1);
    pb_lenfield(&l, 1, &s1);
    pb_entry(&fs, "a", 1, &l);
    l.n = 0;
    bytes pk = {0};
    for (int i = 0; i < 5; i++)
        pb_varint(&pk, (uint64_t)i * 1000003u);
    pb_lenfield(&l, 1, &pk);
    pb_entry(&fs, "b", 3, &l);
    bytes ex = pb_example(&fs);
    const char *keys[] = {"a", "b"};
    fmt_pb_feature f[2];
    chute_error err;
    uint8_t *m = malloc(ex.n);
    static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x0a, 0x0b, 0x0c, 0x0d, 0x12};
    for (size_t cut = 0; cut <= ex.n; cut++) {
        memcpy(m, ex.p, ex.n);
        int rc = fmt_pb_example_find(m, cut, keys, 2, f, "m", 0, &err);
        CHECK(rc == CHUTE_OK || rc == CHUTE_ECORRUPT || rc == CHUTE_EUNSUPPORTED, "cut %zu: %d",
              cut, rc);
    }
    for (size_t i = 0; i < ex.n; i++)
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(m, ex.p, ex.n);
            m[i] = vals[v];
            int rc = fmt_pb_example_find(m, ex.n, keys, 2, f, "m", 0, &err);
            CHECK(rc == CHUTE_OK || rc == CHUTE_ECORRUPT || rc == CHUTE_EUNSUPPORTED,
                  "byte %zu = %02x: %d", i, vals[v], rc);
            for (int k = 0; rc == CHUTE_OK && k < 2; k++) {
                if (f[k].kind < FMT_PB_BYTES)
                    continue;
                CHECK(f[k].list >= m && f[k].list + f[k].list_len <= m + ex.n, "view inside");
                int64_t iv[64];
                float fv[64];
                size_t pos = 0, n;
                const uint8_t *p;
                uint64_t cnt = 0;
                while (fmt_pb_bytes_next(&f[k], &pos, &p, &n)) {
                    CHECK(p >= m && p + n <= m + ex.n, "string inside");
                    cnt++;
                }
                cnt += fmt_pb_int64_decode(&f[k], iv, 64) + fmt_pb_float_decode(&f[k], fv, 64);
                CHECK(cnt == f[k].count || f[k].count > 64, "decoded %llu of %llu",
                      (unsigned long long)cnt, (unsigned long long)f[k].count);
            }
        }
    free(m);
    free(ex.p);
    free(fs.p);
    free(l.p);
    free(pk.p);
    return 0;
}

/* ---- tar ------------------------------------------------------------------ */

/* A ustar header; size < 0 writes a base-256 negative. `sum_signed`
 * stores the signed sum instead of the unsigned one. */
static void tar_hdr(bytes *b, const char *name, const char *prefix, char type, int64_t size,
                    int base256, int sum_signed, int gnu_magic)
{
    uint8_t h[512];
    memset(h, 0, sizeof h);
    memcpy(h, name, CH_MIN(strlen(name), 100));
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    if (base256) {
        h[124] = size < 0 ? 0xff : 0x80;
        uint64_t v = (uint64_t)size;
        for (int i = 0; i < 8; i++)
            h[135 - i] = (uint8_t)(v >> (8 * i));
        if (size < 0)
            for (int i = 8; i < 11; i++)
                h[135 - i] = 0xff;
    } else {
        snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    }
    memcpy(h + 136, "00000000000", 11);
    h[156] = (uint8_t)type;
    if (gnu_magic)
        memcpy(h + 257, "ustar  ", 8);
    else
        memcpy(h + 257, "ustar\0" "00", 8);
    if (prefix)
        memcpy(h + 345, prefix, CH_MIN(strlen(prefix), 155));
    memset(h + 148, ' ', 8);
    long sum = 0;
    for (int i = 0; i < 512; i++)
        sum += sum_signed ? (long)(int8_t)h[i] : (long)h[i];
    if (sum < 0)
        sum &= 0777777; /* not representable: tar would not write it */
    snprintf((char *)h + 148, 8, "%06lo", sum);
    h[155] = ' ';
    put(b, h, 512);
}

static void tar_data(bytes *b, const void *d, size_t n)
{
    put(b, d, n);
    static const uint8_t z[512] = {0};
    if (n % 512)
        put(b, z, 512 - n % 512);
}

static void tar_file(bytes *b, const char *name, const char *data)
{
    tar_hdr(b, name, NULL, '0', (int64_t)strlen(data), 0, 0, 0);
    tar_data(b, data, strlen(data));
}

static void tar_end(bytes *b, int blocks)
{
    static const uint8_t z[512] = {0};
    for (int i = 0; i < blocks; i++)
        put(b, z, 512);
}

static void pax_rec(bytes *b, const char *kv)
{
    /* "LEN kv\n" where LEN counts itself */
    size_t n = strlen(kv) + 3;
    char t[4200];
    int len;
    for (;;) {
        len = snprintf(t, sizeof t, "%zu %s\n", n, kv);
        if ((size_t)len == n)
            break;
        n = (size_t)len;
    }
    put(b, t, (size_t)len);
}

static int tar_index(const bytes *b, fmt_tar_index *ix, chute_error *err)
{
    fmt_reader r;
    fmt_reader_mem(&r, b->p, b->n, "t.tar");
    return fmt_tar_index_build(&r, NULL, ix, err);
}

TEST(tar_formats)
{
    bytes b = {0};
    chute_error err;
    fmt_tar_index ix;
    /* 1: plain ustar member, 2: with a prefix, 3: directory (skipped),
     * 4: GNU long name, 5: pax path + size (header size is wrong on
     * purpose: pax wins), 6: base-256 size, 7: signed checksum, 8: symlink
     * with a GNU long link (skipped), 9: a global pax header, then a
     * member, 10: old-style '\0' type regular file, 11: contiguous '7'. */
    tar_file(&b, "a.jpg", "AAAA");
    tar_hdr(&b, "b.jpg", "some/dir", '0', 3, 0, 0, 0);
    tar_data(&b, "BBB", 3);
    tar_hdr(&b, "d/", NULL, '5', 0, 0, 0, 0);
    char longname[300];
    memset(longname, 'n', 250);
    strcpy(longname + 250, ".cls");
    tar_hdr(&b, "././@LongLink", NULL, 'L', (int64_t)strlen(longname) + 1, 0, 0, 1);
    tar_data(&b, longname, strlen(longname) + 1);
    tar_hdr(&b, "truncated-name", NULL, '0', 2, 0, 0, 1);
    tar_data(&b, "LL", 2);
    bytes pax = {0};
    pax_rec(&pax, "path=päx/long.json");
    pax_rec(&pax, "size=5");
    pax_rec(&pax, "mtime=1.5");
    tar_hdr(&b, "PaxHeader", NULL, 'x', (int64_t)pax.n, 0, 0, 0);
    tar_data(&b, pax.p, pax.n);
    tar_hdr(&b, "ignored", NULL, '0', 99, 0, 0, 0);
    tar_data(&b, "PPPPP", 5);
    tar_hdr(&b, "big.bin", NULL, '0', 600, 1, 0, 0);
    uint8_t six[600];
    memset(six, 6, sizeof six);
    tar_data(&b, six, 600);
    tar_hdr(&b, "\xe9\xe8signed.txt", NULL, '0', 1, 0, 1, 0);
    tar_data(&b, "S", 1);
    tar_hdr(&b, "././@LongLink", NULL, 'K', 150, 0, 0, 1);
    char target[150];
    memset(target, 't', 150);
    tar_data(&b, target, 150);
    tar_hdr(&b, "link.jpg", NULL, '2', 0, 0, 0, 1);
    pax.n = 0;
    pax_rec(&pax, "comment=global");
    tar_hdr(&b, "GlobalHead", NULL, 'g', (int64_t)pax.n, 0, 0, 0);
    tar_data(&b, pax.p, pax.n);
    tar_hdr(&b, "old.txt", NULL, '\0', 2, 0, 0, 0);
    tar_data(&b, "OO", 2);
    tar_hdr(&b, "cont.txt", NULL, '7', 2, 0, 0, 0);
    tar_data(&b, "CC", 2);
    tar_end(&b, 2);
    CHECK(tar_index(&b, &ix, &err) == CHUTE_OK, "%s", err.message);
    struct {
        const char *name;
        const char *data;
        uint64_t size;
    } want[] = {{"a.jpg", "AAAA", 4},   {"some/dir/b.jpg", "BBB", 3}, {longname, "LL", 2},
                {"päx/long.json", "PPPPP", 5}, {"big.bin", NULL, 600},
                {"\xe9\xe8signed.txt", "S", 1}, {"old.txt", "OO", 2}, {"cont.txt", "CC", 2}};
    CHECK(ix.count == 8, "members %llu", (unsigned long long)ix.count);
    for (int i = 0; i < 8; i++) {
        CHECK(strcmp(fmt_tar_name(&ix, i), want[i].name) == 0, "member %d name '%s'", i,
              fmt_tar_name(&ix, i));
        CHECK(ix.m[i].size == want[i].size, "member %d size %llu", i,
              (unsigned long long)ix.m[i].size);
        CHECK(ix.m[i].data_offset % 512 == 0 && ix.m[i].data_offset + ix.m[i].size <= b.n,
              "member %d offset", i);
        if (want[i].data)
            CHECK(memcmp(b.p + ix.m[i].data_offset, want[i].data, ix.m[i].size) == 0,
                  "member %d data", i);
        else
            CHECK(b.p[ix.m[i].data_offset] == 6 && b.p[ix.m[i].data_offset + 599] == 6, "big");
    }
    CHECK(ix.m[2].header_offset < ix.m[2].data_offset - 512, "long name: header of the L");
    CHECK(ix.skipped == 2, "dir + symlink skipped: %llu", (unsigned long long)ix.skipped);
    CHECK(ix.end == FMT_TAR_END_TWO_ZERO && ix.end_offset == b.n - 1024, "end %d", ix.end);
    fmt_tar_index_free(&ix);
    /* Through a file with a small window, the same index. */
    char path[4096];
    write_tmp("tar_formats", "t.tar", b.p, b.n, path, sizeof path);
    int fd = open(path, O_RDONLY);
    fmt_reader r;
    fmt_reader_fd(&r, fd, b.n, 1024, path, &err);
    CHECK(fmt_tar_index_build(&r, NULL, &ix, &err) == CHUTE_OK && ix.count == 8, "fd: %s",
          err.message);
    CHECK(strcmp(fmt_tar_name(&ix, 2), longname) == 0, "fd long name");
    fmt_reader_free(&r);
    fmt_tar_index_free(&ix);
    close(fd);
    /* Ends: one zero block then EOF; one zero block then junk; plain EOF. */
    bytes e = {0};
    tar_file(&e, "x.a", "1");
    size_t body = e.n;
    CHECK(tar_index(&e, &ix, &err) == CHUTE_OK && ix.end == FMT_TAR_END_EOF && ix.count == 1,
          "EOF end");
    fmt_tar_index_free(&ix);
    tar_end(&e, 1);
    CHECK(tar_index(&e, &ix, &err) == CHUTE_OK && ix.end == FMT_TAR_END_ONE_ZERO &&
              ix.end_offset == body,
          "one zero block");
    fmt_tar_index_free(&ix);
    tar_file(&e, "after.a", "2");
    CHECK(tar_index(&e, &ix, &err) == CHUTE_OK && ix.end == FMT_TAR_END_ONE_ZERO && ix.count == 1,
          "a lone zero block ends the archive: %llu", (unsigned long long)ix.count);
    fmt_tar_index_free(&ix);
    /* An empty GNU long name (size 0, no data block) names the next member
     * "" — tarfile does the same.  (Was a memcpy from NULL: UBSan.) */
    e.n = 0;
    tar_hdr(&e, "././@LongLink", NULL, 'L', 0, 0, 0, 1);
    tar_file(&e, "shadowed.jpg", "12");
    CHECK(tar_index(&e, &ix, &err) == CHUTE_OK && ix.count == 1 &&
              fmt_tar_name(&ix, 0)[0] == '\0' && ix.m[0].size == 2,
          "empty long name: %s", err.message);
    fmt_tar_index_free(&ix);
    /* Last member's padding cut off by EOF: accepted. */
    e.n = 0;
    tar_file(&e, "x.a", "123");
    e.n -= 509 - 100;
    CHECK(tar_index(&e, &ix, &err) == CHUTE_OK && ix.count == 1 && ix.end == FMT_TAR_END_EOF,
          "cut padding: %s", err.message);
    fmt_tar_index_free(&ix);
    free(e.p);
    free(pax.p);
    free(b.p);
    return 0;
}

static int tar_expect(const bytes *b, int want, const char *msg)
{
    fmt_tar_index ix;
    chute_error err = {0};
    int rc = tar_index(b, &ix, &err);
    fmt_tar_index_free(&ix);
    CHECK(rc == want && strstr(err.message, msg), "want %d '%s', got %d '%s'", want, msg, rc,
          err.message);
    return 0;
}

TEST(tar_errors)
{
    bytes b = {0};
    tar_file(&b, "a.jpg", "AAAA");
    tar_file(&b, "b.jpg", "BBBB");
    tar_end(&b, 2);
    bytes m = {0};
    put(&m, b.p, b.n);
    m.p[10] ^= 1; /* first header's name: checksum now wrong */
    CHECK_OK(tar_expect(&m, CHUTE_EFORMAT, "t.tar@0: not a tar archive"));
    memcpy(m.p, b.p, b.n);
    m.p[1024 + 5] ^= 1;
    CHECK_OK(tar_expect(&m, CHUTE_ECORRUPT, "t.tar@1024: tar header checksum mismatch"));
    /* truncated data, truncated header, non-octal and negative sizes */
    memcpy(m.p, b.p, b.n);
    m.n = 1024 + 512 + 2;
    CHECK_OK(tar_expect(&m, CHUTE_ECORRUPT, "t.tar@1024: member 'b.jpg' claims 4 bytes, 2 left"));
    m.n = 1024 + 100;
    CHECK_OK(tar_expect(&m, CHUTE_ECORRUPT, "t.tar@1024: 100 bytes left"));
    bytes t = {0};
    tar_hdr(&t, "neg", NULL, '0', -5, 1, 0, 0);
    CHECK_OK(tar_expect(&t, CHUTE_ECORRUPT, "negative or too large"));
    t.n = 0;
    tar_hdr(&t, "huge", NULL, '0', 1000000, 0, 0, 0);
    memcpy(t.p + 124, "0000009999x", 11); /* fix the checksum by hand below */
    memset(t.p + 148, ' ', 8);
    long sum = 0;
    for (int i = 0; i < 512; i++)
        sum += t.p[i];
    snprintf((char *)t.p + 148, 8, "%06lo", sum);
    CHECK_OK(tar_expect(&t, CHUTE_ECORRUPT, "not an octal number"));
    t.n = 0;
    tar_hdr(&t, "sparse", NULL, 'S', 0, 0, 0, 1);
    CHECK_OK(tar_expect(&t, CHUTE_EUNSUPPORTED, "GNU sparse member"));
    /* pax: malformed records, sparse keys, bad size, NUL in path */
    const char *paxes[][2] = {
        {"5 a=b\n", "malformed pax record"},  /* length 5 != 6 */
        {"99 path=x\n", "malformed pax record"},
        {"x path=x\n", "malformed pax record"},
        {"6 abc\n", "no key=value"},
        {"12 size=12x\n", "pax size '12x' is not a number"},
        {"22 GNU.sparse.major=1\n", "GNU sparse file"},
    };
    for (size_t k = 0; k < sizeof paxes / sizeof paxes[0]; k++) {
        t.n = 0;
        tar_hdr(&t, "PaxHeader", NULL, 'x', (int64_t)strlen(paxes[k][0]), 0, 0, 0);
        tar_data(&t, paxes[k][0], strlen(paxes[k][0]));
        tar_file(&t, "f.txt", "x");
        int want = strstr(paxes[k][1], "sparse") ? CHUTE_EUNSUPPORTED : CHUTE_ECORRUPT;
        CHECK_OK(tar_expect(&t, want, paxes[k][1]));
    }
    t.n = 0;
    tar_hdr(&t, "PaxHeader", NULL, 'x', 12, 0, 0, 0);
    tar_data(&t, "12 path=a\0b\n", 12);
    tar_file(&t, "f.txt", "x");
    CHECK_OK(tar_expect(&t, CHUTE_ECORRUPT, "NUL"));
    /* an extended header with no member after it */
    t.n = 0;
    tar_hdr(&t, "././@LongLink", NULL, 'L', 4, 0, 0, 1);
    tar_data(&t, "abc", 4);
    CHECK_OK(tar_expect(&t, CHUTE_ECORRUPT, "ends after an extended header"));
    tar_end(&t, 2);
    CHECK_OK(tar_expect(&t, CHUTE_ECORRUPT, "end-of-archive block right after"));
    /* limits */
    t.n = 0;
    tar_file(&t, "x.a", "1234");
    fmt_tar_index ix;
    fmt_reader r;
    chute_error err;
    fmt_reader_mem(&r, t.p, t.n, "lim");
    fmt_tar_opts o = {.max_member = 3};
    CHECK(fmt_tar_index_build(&r, &o, &ix, &err) == CHUTE_ELIMIT, "max_member");
    fmt_tar_index_free(&ix);
    t.n = 0;
    tar_hdr(&t, "././@LongLink", NULL, 'L', 100000, 0, 0, 1);
    CHECK_OK(tar_expect(&t, CHUTE_ELIMIT, "GNU long name of 100000 bytes"));
    free(t.p);
    free(m.p);
    free(b.p);
    return 0;
}

TEST(tar_mutations_never_crash)
{
    bytes b = {0};
    tar_file(&b, "a.jpg", "AAAA");
    bytes pax = {0};
    pax_rec(&pax, "path=p/q.cls");
    tar_hdr(&b, "PaxHeader", NULL, 'x', (int64_t)pax.n, 0, 0, 0);
    tar_data(&b, pax.p, pax.n);
    tar_file(&b, "ignored", "12");
    tar_hdr(&b, "././@LongLink", NULL, 'L', 20, 0, 0, 1);
    tar_data(&b, "long/name/here.json", 20);
    tar_file(&b, "x", "{}");
    tar_end(&b, 2);
    uint8_t *m = malloc(b.n);
    static const uint8_t vals[] = {0x00, 0xff, 0x80, '7', ' ', 'x', 'L', 'g', '\n', '9'};
    uint64_t s = 99;
    for (size_t cut = 0; cut <= b.n; cut += 7) {
        bytes t = {b.p, cut, cut};
        fmt_tar_index ix;
        chute_error err;
        int rc = tar_index(&t, &ix, &err);
        CHECK(rc == CHUTE_OK || rc == CHUTE_ECORRUPT || rc == CHUTE_EFORMAT, "cut %zu: %d", cut,
              rc);
        fmt_tar_index_free(&ix);
    }
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(m, b.p, b.n);
        int nflip = 1 + (int)(unit_rand(&s) % 3);
        for (int k = 0; k < nflip; k++) {
            /* mostly header blocks, where the parsing is */
            size_t blk = (size_t)(unit_rand(&s) % (b.n / 512)) * 512;
            m[blk + unit_rand(&s) % 512] = vals[unit_rand(&s) % sizeof vals];
        }
        /* fix the checksum of every header-looking block half the time */
        if (iter & 1)
            for (size_t o = 0; o + 512 <= b.n; o += 512) {
                long sum = 256;
                for (int i = 0; i < 512; i++)
                    if (i < 148 || i >= 156)
                        sum += m[o + i];
                if (m[o + 257] == 'u')
                    snprintf((char *)m + o + 148, 8, "%06lo", sum & 0777777);
            }
        bytes t = {m, b.n, b.n};
        fmt_tar_index ix;
        chute_error err;
        int rc = tar_index(&t, &ix, &err);
        CHECK(rc == CHUTE_OK || rc == CHUTE_ECORRUPT || rc == CHUTE_EFORMAT ||
                  rc == CHUTE_EUNSUPPORTED || rc == CHUTE_ELIMIT,
              "iter %d: %d", iter, rc);
        for (uint64_t i = 0; i < ix.count; i++)
            CHECK(ix.m[i].data_offset <= b.n && ix.m[i].size <= b.n - ix.m[i].data_offset &&
                      strlen(fmt_tar_name(&ix, i)) == ix.m[i].name_len,
                  "iter %d: member %llu out of bounds", iter, (unsigned long long)i);
        fmt_tar_index_free(&ix);
    }
    free(m);
    free(pax.p);
    free(b.p);
    return 0;
}

/* ---- WebDataset ----------------------------------------------------------- */

TEST(wds_split_name_matches_webdataset)
{
    /* Results of webdataset 1.0.2's base_plus_ext (Python re) on these
     * names, recorded from Python; tests/fixtures/expected.json has the
     * same list generated by the tool itself. */
    struct {
        const char *name, *key, *ext;
    } k[] = {
        {"a.jpg", "a", "jpg"},          {"a.b.c", "a", "b.c"},
        {"dir/x.y.z", "dir/x", "y.z"},  {"a.b/c.d", "a.b/c", "d"},
        {"a/b.c/d", NULL, NULL},        {"a/.hidden", "a/", "hidden"},
        {".hidden", NULL, NULL},        {"a.b/.c", NULL, NULL},
        {"a.b/c/.d", "a.b/c/", "d"},    {"a.b//.x", "a.b//", "x"},
        {"x", NULL, NULL},              {"x.", "x", ""},
        {".", NULL, NULL},              {"..", NULL, NULL},
        {"a/b", NULL, NULL},            {"a/b.", "a/b", ""},
        {"/x.jpg", "/x", "jpg"},        {"//.x", "//", "x"},
        {"a//b.c", "a//b", "c"},        {"a\nb/.jpg", "a\nb/", "jpg"},
        {"x.y\nz/w/.jpg", NULL, NULL},  {"x.y/z\nw/.jpg", "x.y/z\nw/", "jpg"},
        {"key.tar.gz", "key", "tar.gz"}, {"a./b.c", "a./b", "c"},
        {"a./.c", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        size_t kl, eo, n = strlen(k[i].name);
        int ok = fmt_wds_split_name(k[i].name, n, &kl, &eo);
        CHECK(ok == (k[i].key != NULL), "'%s': match %d", k[i].name, ok);
        if (ok)
            CHECK(kl == strlen(k[i].key) && memcmp(k[i].name, k[i].key, kl) == 0 &&
                      strcmp(k[i].name + eo, k[i].ext) == 0,
                  "'%s': key '%.*s' ext '%s'", k[i].name, (int)kl, k[i].name, k[i].name + eo);
    }
    struct {
        const char *name;
        int meta;
    } mk[] = {{"____", 1},       {"__a__/b.jpg", 1}, {"__key__.jpg", 0}, {"d/__x__.jpg", 0},
              {"___", 1},        {"__", 1},          {"__x__\n", 1},     {"_x_.jpg", 0},
              {"__x__", 1},      {"__x_/y", 0}};
    for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++)
        CHECK(fmt_wds_is_meta(mk[i].name, strlen(mk[i].name)) == mk[i].meta, "meta '%s'",
              mk[i].name);
    return 0;
}

static int wds_of(const bytes *b, fmt_wds_policy pol, fmt_tar_index *ix, fmt_wds_index *w,
                  chute_error *err)
{
    int rc = tar_index(b, ix, err);
    if (rc)
        return rc;
    return fmt_wds_group(ix, pol, "w.tar", w, err);
}

TEST(wds_grouping_and_policies)
{
    bytes b = {0};
    tar_file(&b, "s/0001.jpg", "j1");
    tar_file(&b, "s/0001.CLS", "1");
    tar_file(&b, "__meta__", "m");        /* skipped, sample continues */
    tar_file(&b, "s/0001.seg.png", "p1");
    tar_file(&b, "README", "no dot");    /* skipped */
    tar_file(&b, "s/0002.jpg", "j2");
    tar_file(&b, "t/0002.jpg", "j3");    /* another directory: another key */
    tar_end(&b, 2);
    fmt_tar_index ix;
    fmt_wds_index w;
    chute_error err;
    CHECK(wds_of(&b, FMT_WDS_STRICT, &ix, &w, &err) == CHUTE_OK, "%s", err.message);
    CHECK(w.count == 3 && w.skipped_names == 2 && w.split == 0, "samples %llu skipped %llu",
          (unsigned long long)w.count, (unsigned long long)w.skipped_names);
    const char *keys[] = {"s/0001", "s/0002", "t/0002"};
    uint64_t nf[] = {3, 1, 1};
    for (int i = 0; i < 3; i++) {
        const fmt_wds_sample *s = &w.samples[i];
        CHECK(s->key_len == strlen(keys[i]) &&
                  memcmp(ix.names + s->key_off, keys[i], s->key_len) == 0 && s->nfields == nf[i],
              "sample %d", i);
    }
    const char *exts[] = {"jpg", "CLS", "seg.png"};
    for (int f = 0; f < 3; f++) {
        const fmt_wds_field *fl = &w.fields[w.samples[0].first_field + (uint64_t)f];
        CHECK(fl->ext_len == strlen(exts[f]) &&
                  memcmp(fmt_tar_name(&ix, fl->member) + fl->ext_off, exts[f], fl->ext_len) == 0,
              "field %d", f);
    }
    fmt_wds_index_free(&w);
    fmt_tar_index_free(&ix);
    /* Duplicate field (case-insensitive, as webdataset lowercases). */
    bytes d = {0};
    tar_file(&d, "k.jpg", "1");
    tar_file(&d, "k.JPG", "2");
    tar_file(&d, "l.jpg", "3");
    CHECK(wds_of(&d, FMT_WDS_STRICT, &ix, &w, &err) == CHUTE_ECORRUPT &&
              strstr(err.message, "w.tar@1024: 'k.JPG' repeats field 'JPG' of sample 'k' (first "
                                  "at 0)"),
          "strict dup: %s", err.message);
    fmt_wds_index_free(&w);
    fmt_tar_index_free(&ix);
    CHECK(wds_of(&d, FMT_WDS_LENIENT, &ix, &w, &err) == CHUTE_OK && w.count == 2 &&
              w.duplicates == 1 && w.samples[0].nfields == 1 &&
              w.fields[w.samples[0].first_field].member == 0,
          "lenient dup");
    fmt_wds_index_free(&w);
    fmt_tar_index_free(&ix);
    /* Split key: a, b, a. */
    bytes s = {0};
    tar_file(&s, "a.jpg", "1");
    tar_file(&s, "b.jpg", "2");
    tar_file(&s, "a.cls", "3");
    CHECK(wds_of(&s, FMT_WDS_STRICT, &ix, &w, &err) == CHUTE_ECORRUPT &&
              strstr(err.message, "w.tar@2048: sample key 'a' appears again") &&
              strstr(err.message, "(first sample at 0)"),
          "strict split: %s", err.message);
    fmt_wds_index_free(&w);
    fmt_tar_index_free(&ix);
    CHECK(wds_of(&s, FMT_WDS_LENIENT, &ix, &w, &err) == CHUTE_OK && w.count == 3 && w.split == 2 &&
              (w.samples[0].flags & FMT_WDS_SPLIT) && !(w.samples[1].flags & FMT_WDS_SPLIT) &&
              (w.samples[2].flags & FMT_WDS_SPLIT),
          "lenient split");
    fmt_wds_index_free(&w);
    fmt_tar_index_free(&ix);
    /* Empty archive: no samples. */
    bytes e = {0};
    tar_end(&e, 2);
    CHECK(wds_of(&e, FMT_WDS_STRICT, &ix, &w, &err) == CHUTE_OK && w.count == 0, "empty");
    fmt_wds_index_free(&w);
    fmt_tar_index_free(&ix);
    free(e.p);
    free(s.p);
    free(d.p);
    free(b.p);
    return 0;
}

UNIT_MAIN
