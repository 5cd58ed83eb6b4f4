/*
 * test_cache.c — the cache tier (src/io/cache.c) around a counting origin.
 *
 * The origin is the real local source behind a thin counter (in shared
 * memory, so forked processes add to one count): "one download per
 * block" and "second pass from the cache" are read off that count, not
 * off the cache's own statistics.  Bytes are always compared with a plain
 * pread of the origin file.
 */
#define _GNU_SOURCE
#include "unit.h"

#include "../src/format/format.h"
#include "../src/io/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define BLK 65536u
#define FSIZE (17u * BLK + 12345u) /* 18 blocks, the last one short */
#define NBLK 18u

static _Atomic uint64_t *g_origin_reads; /* shared with fork children */

static int cnt_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                       chute_error *err)
{
    atomic_fetch_add(g_origin_reads, 1);
    return ch_source_local.read_at(h, path, off, buf, len, err);
}

static ch_source_ops g_counting; /* ch_source_local with a counting read_at */

static void setup(void)
{
    if (!g_origin_reads) {
        g_origin_reads = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                              -1, 0);
        g_counting = ch_source_local;
        g_counting.name = "counting";
        g_counting.read_at = cnt_read_at;
    }
    atomic_store(g_origin_reads, 0);
}

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_work ? g_work : "/tmp", name);
}

static int rm_rf(const char *p)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    return system(cmd);
}

/* A fresh origin file of FSIZE random bytes; its content in *out. */
static int make_origin(const char *p, uint8_t **out, uint64_t seed)
{
    uint8_t *b = malloc(FSIZE);
    if (!b)
        return -1;
    for (size_t i = 0; i < FSIZE; i++)
        b[i] = (uint8_t)(unit_rand(&seed) >> 56);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, FSIZE, f) != FSIZE || fclose(f) != 0) {
        free(b);
        return -1;
    }
    *out = b;
    return 0;
}

static int mkwork(const char *name, char *origin, char *cdir, uint8_t **data)
{
    char d[4096];
    path_in(d, sizeof d, name);
    rm_rf(d);
    chute_error e;
    if (ch_mkdir_p(d, &e) != CHUTE_OK)
        return -1;
    snprintf(origin, 4096, "%s/origin.bin", d);
    snprintf(cdir, 4096, "%s/cache", d);
    return make_origin(origin, data, 0x1234 + strlen(name));
}

/* Read the whole file through the cache in uneven pieces, crossing block
 * edges; 0 when every byte equals `want`. */
static int read_all(const ch_source_ops *s, const char *p, const uint8_t *want, uint64_t seed)
{
    void *h = NULL;
    uint64_t size = 0;
    chute_error e;
    if (ch_src_open(s, p, &h, &size, &e) != CHUTE_OK) {
        fprintf(stderr, "open: %s\n", e.message);
        return -1;
    }
    if (size != FSIZE) {
        s->close(h);
        return -1;
    }
    uint8_t *buf = malloc(FSIZE);
    int bad = 0;
    uint64_t off = 0;
    while (off < FSIZE && !bad) {
        size_t n = (size_t)(1 + unit_rand(&seed) % (BLK + BLK / 2));
        if (n > FSIZE - off)
            n = FSIZE - off;
        if (s->read_at(h, p, off, buf, n, &e) != CHUTE_OK) {
            fprintf(stderr, "read_at %llu: %s\n", (unsigned long long)off, e.message);
            bad = 1;
        } else if (memcmp(buf, want + off, n)) {
            fprintf(stderr, "bytes differ in [%llu, +%zu)\n", (unsigned long long)off, n);
            bad = 1;
        }
        off += n;
    }
    s->close(h);
    free(buf);
    return bad ? -1 : 0;
}

static int open_cache(const char *dir, uint64_t bytes, ch_cache **c)
{
    ch_cache_options o = {.dir = dir, .bytes = bytes, .block_bytes = BLK};
    chute_error e;
    int rc = ch_cache_create(&g_counting, &o, c, &e);
    if (rc != CHUTE_OK)
        fprintf(stderr, "ch_cache_create: %s\n", e.message);
    return rc;
}

/* Sum of block file sizes and names that are not ours. */
static uint64_t dir_usage(const char *dir, int *n_files, int *n_foreign)
{
    uint64_t total = 0;
    *n_files = 0;
    *n_foreign = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            !strcmp(de->d_name, "locks"))
            continue;
        size_t nl = strlen(de->d_name);
        int hex = nl == 36 && !strcmp(de->d_name + 32, ".blk");
        for (size_t i = 0; hex && i < 32; i++)
            hex = strchr("0123456789abcdef", de->d_name[i]) != NULL;
        if (!hex) {
            fprintf(stderr, "unexpected entry in cache dir: '%s'\n", de->d_name);
            (*n_foreign)++;
            continue;
        }
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0) {
            total += (uint64_t)st.st_size;
            (*n_files)++;
        }
    }
    closedir(d);
    return total;
}

TEST(identical_then_served_from_cache)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("identical", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "create");
    const ch_source_ops *s = ch_cache_source(c);
    CHECK(read_all(s, origin, want, 1) == 0, "first pass differs from the origin");
    CHECK(atomic_load(g_origin_reads) == NBLK, "first pass: %llu origin reads, want one per block (%u)",
          (unsigned long long)atomic_load(g_origin_reads), NBLK);
    CHECK(read_all(s, origin, want, 2) == 0, "second pass differs");
    CHECK(atomic_load(g_origin_reads) == NBLK, "second pass read the origin again");
    ch_cache_destroy(c);
    /* A restarted process reuses the directory after verifying it. */
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "re-create");
    CHECK(read_all(ch_cache_source(c), origin, want, 3) == 0, "after restart differs");
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(atomic_load(g_origin_reads) == NBLK && st.fetches == 0 && st.hits > 0,
          "after restart: %llu origin reads, %llu hits",
          (unsigned long long)atomic_load(g_origin_reads), (unsigned long long)st.hits);
    /* read_file goes through the cache too. */
    uint8_t *buf = malloc(FSIZE);
    size_t len = 0;
    chute_error e;
    CHECK(ch_src_read_file(ch_cache_source(c), origin, buf, 10, &len, &e) == CH_ESMALL &&
              len == FSIZE,
          "read_file with a small buffer must say the size");
    CHECK(ch_src_read_file(ch_cache_source(c), origin, buf, FSIZE, &len, &e) == CHUTE_OK &&
              len == FSIZE && !memcmp(buf, want, FSIZE),
          "read_file differs");
    CHECK(atomic_load(g_origin_reads) == NBLK, "read_file went to the origin");
    /* Reads past the end are errors, as the local source's. */
    void *h;
    uint64_t size;
    CHECK(ch_src_open(ch_cache_source(c), origin, &h, &size, &e) == CHUTE_OK, "open");
    CHECK(ch_cache_source(c)->read_at(h, origin, FSIZE - 10, buf, 11, &e) == CHUTE_EIO,
          "read past the end must fail");
    ch_cache_source(c)->close(h);
    free(buf);
    ch_cache_destroy(c);
    free(want);
    return 0;
}

/* Opens the `which`-th block file of cdir in directory order for writing
 * and gives its size: the one walk the damaging helpers below share.  -1
 * when there is no such file (or it cannot be opened). */
static int blk_open(const char *cdir, int which, off_t *out_size)
{
    DIR *d = opendir(cdir);
    if (!d)
        return -1;
    struct dirent *de;
    int fd = -1;
    while ((de = readdir(d))) {
        if (!strstr(de->d_name, ".blk") || which-- > 0)
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", cdir, de->d_name);
        fd = open(p, O_RDWR);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) != 0) {
            close(fd);
            fd = -1;
        }
        if (fd >= 0)
            *out_size = st.st_size;
        break;
    }
    closedir(d);
    return fd;
}

/* Flips one bit of the byte at `at`; 0 when done. */
static int flip_byte(int fd, off_t at)
{
    uint8_t b;
    if (pread(fd, &b, 1, at) != 1)
        return -1;
    b ^= 0x40;
    return pwrite(fd, &b, 1, at) == 1 ? 0 : -1;
}

/* Damage the `which`-th block file in directory order. */
static int corrupt_one(const char *cdir, int truncate_it, int which)
{
    off_t size;
    int fd = blk_open(cdir, which, &size);
    if (fd < 0)
        return -1;
    int done = truncate_it ? ftruncate(fd, size - 1) : flip_byte(fd, size - 100); /* inside the data */
    close(fd);
    return done;
}

TEST(corrupt_file_detected_and_refetched)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("corrupt", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "create");
    CHECK(read_all(ch_cache_source(c), origin, want, 1) == 0, "fill");
    ch_cache_destroy(c);
    CHECK(corrupt_one(cdir, 0, 0) == 0, "flip a byte");
    CHECK(corrupt_one(cdir, 1, 1) == 0, "truncate one");
    atomic_store(g_origin_reads, 0);
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "re-create");
    CHECK(read_all(ch_cache_source(c), origin, want, 2) == 0, "a damaged file was served");
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(st.corrupt == 2 && atomic_load(g_origin_reads) == 2,
          "corrupt %llu, origin reads %llu: want 2 and 2", (unsigned long long)st.corrupt,
          (unsigned long long)atomic_load(g_origin_reads));
    /* Refilled: the next pass is all hits. */
    CHECK(read_all(ch_cache_source(c), origin, want, 3) == 0, "after refill");
    CHECK(atomic_load(g_origin_reads) == 2, "refilled blocks were fetched again");
    /* read_file (no handle) verifies straight into the caller's buffer. */
    CHECK(corrupt_one(cdir, 0, 3) == 0 && corrupt_one(cdir, 1, 5) == 0, "damage two more");
    uint8_t *buf = malloc(FSIZE);
    size_t len = 0;
    chute_error e;
    CHECK(ch_src_read_file(ch_cache_source(c), origin, buf, FSIZE, &len, &e) == CHUTE_OK &&
              len == FSIZE && !memcmp(buf, want, FSIZE),
          "read_file served a damaged block");
    free(buf);
    ch_cache_stats_get(c, &st);
    CHECK(st.corrupt == 4 && atomic_load(g_origin_reads) == 4,
          "read_file: corrupt %llu, origin reads %llu: want 4 and 4",
          (unsigned long long)st.corrupt, (unsigned long long)atomic_load(g_origin_reads));
    ch_cache_destroy(c);

    /* A changed origin (new content, new mtime) makes the blocks stale. */
    uint8_t *want2;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK(make_origin(origin, &want2, 999) == 0, "rewrite origin");
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "re-create");
    CHECK(read_all(ch_cache_source(c), origin, want2, 4) == 0, "stale blocks served");
    ch_cache_destroy(c);
    free(want);
    free(want2);
    return 0;
}

/* Flip one byte `back` bytes before the end of every block file: the
 * last chunk of each block's data.  How many were damaged. */
static int corrupt_all(const char *cdir, off_t back)
{
    int n = 0, fd;
    off_t size;
    for (int k = 0; (fd = blk_open(cdir, k, &size)) >= 0; k++) {
        n += flip_byte(fd, size - back) == 0;
        close(fd);
    }
    return n;
}

/* Read [0, FSIZE) through handle h in pieces of `step` bytes; 0 when
 * every byte equals `want`. */
static int read_handle(const ch_source_ops *s, void *h, const char *p, const uint8_t *want,
                       size_t step)
{
    uint8_t *buf = malloc(step);
    chute_error e;
    int bad = !buf;
    for (uint64_t off = 0; off < FSIZE && !bad; off += step) {
        size_t n = (size_t)CH_MIN((uint64_t)step, FSIZE - off);
        bad = s->read_at(h, p, off, buf, n, &e) != CHUTE_OK || memcmp(buf, want + off, n);
    }
    free(buf);
    return bad ? -1 : 0;
}

/* Every read checks the bytes it serves, not only the first read of a
 * block by a handle: a cache file damaged on disk after a handle has
 * read (and verified) it is still never served through that handle.
 * A read checks the 4 KiB chunks it touches, so a read away from the
 * damage is still a hit. */
TEST(damaged_after_verified_never_served)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("reverify", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "create");
    const ch_source_ops *s = ch_cache_source(c);
    CHECK(read_all(s, origin, want, 1) == 0, "fill");
    CHECK(atomic_load(g_origin_reads) == NBLK, "fill: %llu origin reads",
          (unsigned long long)atomic_load(g_origin_reads));
    void *h;
    uint64_t size;
    chute_error e;
    CHECK(ch_src_open(s, origin, &h, &size, &e) == CHUTE_OK, "open");
    CHECK(read_handle(s, h, origin, want, BLK) == 0, "whole blocks from the cache differ");
    CHECK(atomic_load(g_origin_reads) == NBLK, "the warm pass read the origin");
    CHECK(corrupt_all(cdir, 100) == (int)NBLK, "damage every block file");
    /* The first 4 KiB of each block: away from the damage, still hits. */
    uint8_t b[4096];
    for (uint64_t k = 0; k < NBLK; k++)
        CHECK(s->read_at(h, origin, k * BLK, b, sizeof b, &e) == CHUTE_OK &&
                  !memcmp(b, want + k * BLK, sizeof b),
              "block %llu: first 4 KiB differ", (unsigned long long)k);
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(atomic_load(g_origin_reads) == NBLK && st.corrupt == 0,
          "reads away from the damage: %llu origin reads (want %u), corrupt %llu (want 0)",
          (unsigned long long)atomic_load(g_origin_reads), NBLK,
          (unsigned long long)st.corrupt);
    /* Whole blocks again through the same handle: each damaged one is
     * detected and refetched. */
    CHECK(read_handle(s, h, origin, want, BLK) == 0, "a damaged block was served");
    ch_cache_stats_get(c, &st);
    CHECK(atomic_load(g_origin_reads) == 2 * NBLK && st.corrupt == NBLK,
          "after damage: %llu origin reads (want %u), corrupt %llu (want %u)",
          (unsigned long long)atomic_load(g_origin_reads), 2 * NBLK,
          (unsigned long long)st.corrupt, NBLK);
    s->close(h);
    ch_cache_destroy(c);
    free(want);
    return 0;
}

/* Set byte 6 of every block file (the format version in its magic) to
 * v.  How many were changed. */
static int set_version(const char *cdir, char v)
{
    int n = 0, fd;
    off_t size;
    for (int k = 0; (fd = blk_open(cdir, k, &size)) >= 0; k++) {
        n += pwrite(fd, &v, 1, 6) == 1;
        close(fd);
    }
    return n;
}

/* A cache directory written by another version of the format (CHCBLK1:
 * one CRC per block) is neither served nor counted as corrupt: each block
 * is refetched once and its file replaced, then served. */
TEST(old_format_files_refilled)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("oldfmt", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "create");
    CHECK(read_all(ch_cache_source(c), origin, want, 1) == 0, "fill");
    ch_cache_destroy(c);
    CHECK(set_version(cdir, '1') == (int)NBLK, "mark every file as version 1");
    atomic_store(g_origin_reads, 0);
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "re-create");
    CHECK(read_all(ch_cache_source(c), origin, want, 2) == 0, "differs after refill");
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(atomic_load(g_origin_reads) == NBLK && st.corrupt == 0 && st.fills == NBLK,
          "old files: %llu origin reads (want %u), corrupt %llu (want 0), fills %llu",
          (unsigned long long)atomic_load(g_origin_reads), NBLK,
          (unsigned long long)st.corrupt, (unsigned long long)st.fills);
    CHECK(read_all(ch_cache_source(c), origin, want, 3) == 0, "differs when served");
    CHECK(atomic_load(g_origin_reads) == NBLK, "the refilled files were not served");
    int nf, nforeign;
    dir_usage(cdir, &nf, &nforeign);
    CHECK(nf == (int)NBLK && nforeign == 0, "%d block files, %d foreign: want %u and 0", nf,
          nforeign, NBLK);
    ch_cache_destroy(c);
    free(want);
    return 0;
}

TEST(budget_respected_lru)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("budget", origin, cdir, &want) == 0, "setup");
    uint64_t budget = 5 * (BLK + 200);
    ch_cache *c;
    CHECK(open_cache(cdir, budget, &c) == CHUTE_OK, "create");
    CHECK(read_all(ch_cache_source(c), origin, want, 1) == 0, "pass 1");
    CHECK(read_all(ch_cache_source(c), origin, want, 2) == 0, "pass 2");
    int nf, nx;
    uint64_t used = dir_usage(cdir, &nf, &nx);
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(used <= budget && nf >= 4 && nx == 0,
          "%llu bytes in %d files for a budget of %llu", (unsigned long long)used, nf,
          (unsigned long long)budget);
    CHECK(st.evictions >= NBLK - 5, "evictions %llu", (unsigned long long)st.evictions);
    /* LRU: the last blocks read are the ones kept. */
    uint64_t before = atomic_load(g_origin_reads);
    void *h;
    uint64_t size;
    chute_error e;
    uint8_t b[16];
    CHECK(ch_src_open(ch_cache_source(c), origin, &h, &size, &e) == CHUTE_OK, "open");
    CHECK(ch_cache_source(c)->read_at(h, origin, FSIZE - 16, b, 16, &e) == CHUTE_OK &&
              !memcmp(b, want + FSIZE - 16, 16),
          "tail");
    ch_cache_source(c)->close(h);
    CHECK(atomic_load(g_origin_reads) == before, "the most recent block was evicted");
    ch_cache_destroy(c);
    free(want);
    return 0;
}

TEST(dir_removed_midrun_falls_back)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("removed", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "create");
    const ch_source_ops *s = ch_cache_source(c);
    void *h;
    uint64_t size;
    chute_error e;
    CHECK(ch_src_open(s, origin, &h, &size, &e) == CHUTE_OK, "open");
    uint8_t *buf = malloc(FSIZE);
    CHECK(s->read_at(h, origin, 0, buf, FSIZE / 2, &e) == CHUTE_OK, "first half");
    CHECK(rm_rf(cdir) == 0, "rm -rf");
    CHECK(s->read_at(h, origin, FSIZE / 2, buf + FSIZE / 2, FSIZE - FSIZE / 2, &e) == CHUTE_OK,
          "second half after the directory vanished: %s", e.message);
    CHECK(s->read_at(h, origin, 0, buf, FSIZE / 2, &e) == CHUTE_OK, "first half again");
    CHECK(!memcmp(buf, want, FSIZE), "bytes differ");
    s->close(h);
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(st.fallbacks > 0 && *ch_cache_warning(c), "fallbacks %llu, warning '%s'",
          (unsigned long long)st.fallbacks, ch_cache_warning(c));
    fprintf(stderr, "warning: %s\n", ch_cache_warning(c));
    ch_cache_destroy(c);
    free(buf);
    free(want);
    return 0;
}

/* An origin that serves any name: `..`, slashes, spaces and unicode go
 * straight into the key. */
static int mem_stat(const char *path, ch_stat *out, chute_error *err)
{
    (void)path;
    (void)err;
    memset(out, 0, sizeof *out);
    out->type = CH_ENT_FILE;
    out->size = 3 * BLK;
    out->mtime_ns = 42;
    return CHUTE_OK;
}
static int mem_open(const char *path, void **out, uint64_t *size, chute_error *err)
{
    (void)err;
    *out = (void *)path;
    *size = 3 * BLK;
    return CHUTE_OK;
}
static int mem_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                       chute_error *err)
{
    (void)h;
    (void)err;
    size_t pl = strlen(path);
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)buf)[i] = (uint8_t)(path[(off + i) % pl] + (off + i));
    return CHUTE_OK;
}
static void mem_close(void *h) { (void)h; }

TEST(keys_cannot_escape_cache_dir)
{
    ch_source_ops mem = {.version = CH_SOURCE_OPS_VERSION, .name = "mem", .open = mem_open,
                         .read_at = mem_read_at, .close = mem_close, .stat = mem_stat};
    char base[4096], cdir[4096];
    path_in(base, sizeof base, "escape");
    rm_rf(base);
    snprintf(cdir, sizeof cdir, "%s/a/cache", base);
    ch_cache_options o = {.dir = cdir, .block_bytes = BLK};
    ch_cache *c;
    chute_error e;
    CHECK(ch_cache_create(&mem, &o, &c, &e) == CHUTE_OK, "%s", e.message);
    const char *keys[] = {"../../../escaped", "../x", "..", "/etc/passwd", "a b/c d",
                          "s3://bkt/../../\xc3\xbc\xe2\x82\xac name", "x/../../../../../../tmp/y",
                          "%2e%2e/%2e%2e/z", "\xff\xfe"};
    uint8_t *buf = malloc(3 * BLK), *ref = malloc(3 * BLK);
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        for (int pass = 0; pass < 2; pass++) {
            void *h;
            uint64_t size;
            CHECK(ch_src_open(ch_cache_source(c), keys[k], &h, &size, &e) == CHUTE_OK, "open");
            CHECK(ch_cache_source(c)->read_at(h, keys[k], 0, buf, 3 * BLK, &e) == CHUTE_OK,
                  "read");
            ch_cache_source(c)->close(h);
            mem_read_at(NULL, keys[k], 0, ref, 3 * BLK, &e);
            CHECK(!memcmp(buf, ref, 3 * BLK), "key '%s' pass %d: wrong bytes", keys[k], pass);
        }
    }
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    size_t nk = sizeof keys / sizeof *keys;
    CHECK(st.fills == 3 * nk && st.fetches == 3 * nk, "fills %llu fetches %llu",
          (unsigned long long)st.fills, (unsigned long long)st.fetches);
    int nf, nx;
    dir_usage(cdir, &nf, &nx);
    CHECK(nf == (int)(3 * nk) && nx == 0, "%d block files, %d foreign entries", nf, nx);
    /* Nothing appeared beside or above the cache directory. */
    char cmd[4400];
    snprintf(cmd, sizeof cmd,
             "test \"$(find '%s' -mindepth 1 -not -path '%s' -not -path '%s/*' | wc -l)\" = 1",
             base, cdir, cdir);
    CHECK(system(cmd) == 0, "files outside %s (only '%s/a' may exist)", cdir, base);
    ch_cache_destroy(c);
    free(buf);
    free(ref);
    return 0;
}

typedef struct th_arg {
    const ch_source_ops *s;
    const char *origin;
    const uint8_t *want;
    uint64_t seed;
    int bad;
} th_arg;

static void *th_main(void *p)
{
    th_arg *a = p;
    a->bad = read_all(a->s, a->origin, a->want, a->seed) != 0;
    return NULL;
}

/* `threads` threads reading everything through one cache object. */
static int run_threads(const char *cdir, const char *origin, const uint8_t *want, int threads,
                       uint64_t seed)
{
    ch_cache *c;
    if (open_cache(cdir, 0, &c) != CHUTE_OK)
        return -1;
    pthread_t t[8];
    th_arg a[8];
    for (int i = 0; i < threads; i++) {
        a[i] = (th_arg){ch_cache_source(c), origin, want, seed + (uint64_t)i, 0};
        pthread_create(&t[i], NULL, th_main, &a[i]);
    }
    int bad = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        bad |= a[i].bad;
    }
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    fprintf(stderr,
            "pid %d: hits %llu misses %llu fetches %llu fills %llu waits %llu corrupt %llu "
            "fallbacks %llu '%s'\n",
            (int)getpid(), (unsigned long long)st.hits, (unsigned long long)st.misses,
            (unsigned long long)st.fetches, (unsigned long long)st.fills,
            (unsigned long long)st.waits, (unsigned long long)st.corrupt,
            (unsigned long long)st.fallbacks, ch_cache_warning(c));
    ch_cache_destroy(c);
    return bad ? -1 : 0;
}

TEST(threads_one_download_per_block)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("threads", origin, cdir, &want) == 0, "setup");
    CHECK(run_threads(cdir, origin, want, 6, 10) == 0, "a thread read wrong bytes");
    CHECK(atomic_load(g_origin_reads) == NBLK, "%llu origin reads for %u blocks",
          (unsigned long long)atomic_load(g_origin_reads), NBLK);
    free(want);
    return 0;
}

typedef struct sh_arg {
    const ch_source_ops *s;
    void *h;
    const char *origin;
    const uint8_t *want;
    uint64_t seed;
    int bad;
} sh_arg;

static void *sh_main(void *p)
{
    sh_arg *a = p;
    uint8_t *buf = malloc(2 * BLK);
    chute_error e;
    for (int i = 0; i < 200 && !a->bad; i++) {
        uint64_t off = unit_rand(&a->seed) % FSIZE;
        size_t n = (size_t)(1 + unit_rand(&a->seed) % (2 * BLK));
        if (n > FSIZE - off)
            n = FSIZE - off;
        a->bad = a->s->read_at(a->h, a->origin, off, buf, n, &e) != CHUTE_OK ||
                 memcmp(buf, a->want + off, n) != 0;
    }
    free(buf);
    return NULL;
}

/* One handle read by many threads at once (as shards share theirs): the
 * lazy inner open and the per-handle LRU memo are shared. */
TEST(shared_handle_many_threads)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("shared", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "create");
    void *h;
    uint64_t size;
    chute_error e;
    CHECK(ch_src_open(ch_cache_source(c), origin, &h, &size, &e) == CHUTE_OK, "open");
    pthread_t t[6];
    sh_arg a[6];
    for (int i = 0; i < 6; i++) {
        a[i] = (sh_arg){ch_cache_source(c), h, origin, want, 77 + (uint64_t)i, 0};
        pthread_create(&t[i], NULL, sh_main, &a[i]);
    }
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        bad |= a[i].bad;
    }
    ch_cache_source(c)->close(h);
    ch_cache_destroy(c);
    free(want);
    CHECK(!bad, "a thread read wrong bytes through the shared handle");
    CHECK(atomic_load(g_origin_reads) <= NBLK, "%llu origin reads for %u blocks",
          (unsigned long long)atomic_load(g_origin_reads), NBLK);
    return 0;
}

TEST(two_processes_one_download_per_block)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("procs", origin, cdir, &want) == 0, "setup");
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        pid[i] = fork();
        CHECK(pid[i] >= 0, "fork");
        if (pid[i] == 0)
            _exit(run_threads(cdir, origin, want, 3, 100 * (uint64_t)(i + 1)) == 0 ? 0 : 1);
    }
    for (int i = 0; i < 2; i++) {
        int ws = 0;
        CHECK(waitpid(pid[i], &ws, 0) == pid[i] && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "child %d read wrong bytes", i);
    }
    CHECK(atomic_load(g_origin_reads) == NBLK, "%llu origin reads for %u blocks by 2 processes",
          (unsigned long long)atomic_load(g_origin_reads), NBLK);
    free(want);
    return 0;
}

/* ENOSPC on every write under the cache directory (tests/tools/faultfs.c,
 * preloaded into a re-run of this test): reads still succeed. */
TEST(enospc_falls_back_to_origin)
{
    char origin[4096], cdir[4096];
    if (!getenv("CHUTE_FAULT_PATH")) {
        const char *lib = getenv("CHUTE_FAULTFS");
        if (!lib || access(lib, R_OK) != 0)
            SKIP("CHUTE_FAULTFS (tests/tools/faultfs.c) not available");
#if defined(__SANITIZE_THREAD__)
        SKIP("faultfs is not preloaded into TSan builds");
#endif
        path_in(cdir, sizeof cdir, "enospc/cache");
        setenv("LD_PRELOAD", lib, 1);
        setenv("CHUTE_FAULT_PATH", cdir, 1);
        setenv("CHUTE_FAULT_OP", "write", 1);
        setenv("CHUTE_FAULT_ERRNO", "ENOSPC", 1);
        const char *ao = getenv("ASAN_OPTIONS");
        char asan[1024];
        snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", ao ? ao : "", ao ? ":" : "");
        setenv("ASAN_OPTIONS", asan, 1);
        char *av[] = {(char *)"cache_test", (char *)"enospc_falls_back_to_origin",
                      (char *)"--work", (char *)(g_work ? g_work : "/tmp"), NULL};
        execv("/proc/self/exe", av);
        CHECK(0, "execv: %s", strerror(errno));
    }
    setup();
    uint8_t *want;
    CHECK(mkwork("enospc", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_cache(cdir, 0, &c) == CHUTE_OK, "create");
    CHECK(read_all(ch_cache_source(c), origin, want, 1) == 0, "reads must succeed on ENOSPC");
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(st.fills == 0 && st.fallbacks >= NBLK &&
              st.fallbacks == atomic_load(g_origin_reads) && strstr(ch_cache_warning(c), "No space"),
          "fills %llu fallbacks %llu warning '%s'", (unsigned long long)st.fills,
          (unsigned long long)st.fallbacks, ch_cache_warning(c));
    int nf, nx;
    dir_usage(cdir, &nf, &nx);
    CHECK(nf == 0 && nx == 0, "left %d files, %d foreign (temporaries?)", nf, nx);
    ch_cache_destroy(c);
    free(want);
    return 0;
}

/* A dataset opened with cache_dir reads every sample byte for byte as
 * without it, for the tree (read_file) and shards (open + read_at); a
 * second open of the same directory (a restarted process) fetches nothing. */
static int ds_compare(const char *root, const char *cdir, int expect_cached)
{
    chute_dataset_options plain = {0}, cached = {0};
    cached.cache_dir = cdir;
    cached.cache_bytes = 64ull << 20;
    cached.cache_block_bytes = 256 << 10;
    chute_dataset *a = NULL, *b = NULL;
    chute_error e;
    CHECK(chute_dataset_open_ex(root, &plain, &a, &e) == CHUTE_OK, "%s", e.message);
    CHECK(chute_dataset_open_ex(root, &cached, &b, &e) == CHUTE_OK, "%s", e.message);
    CHECK(b->cache && chute_dataset_size(a) == chute_dataset_size(b) && chute_dataset_size(a),
          "sizes");
    size_t cap = 1 << 24;
    uint8_t *x = malloc(cap), *y = malloc(cap);
    for (uint64_t i = 0; i < chute_dataset_size(a); i++) {
        size_t lx = 0, ly = 0;
        CHECK(chute_dataset_read(a, i, x, cap, &lx, &e) == CHUTE_OK, "%s", e.message);
        CHECK(chute_dataset_read(b, i, y, cap, &ly, &e) == CHUTE_OK, "%s", e.message);
        CHECK(lx == ly && !memcmp(x, y, lx), "%s: sample %llu differs through the cache", root,
              (unsigned long long)i);
    }
    ch_cache_stats st;
    ch_cache_stats_get(b->cache, &st);
    fprintf(stderr, "%s: hits %llu misses %llu fetches %llu fills %llu\n", root,
            (unsigned long long)st.hits, (unsigned long long)st.misses,
            (unsigned long long)st.fetches, (unsigned long long)st.fills);
    CHECK(expect_cached ? st.fetches == 0 && st.hits > 0 : st.fetches > 0 && st.fills > 0,
          "%s: fetches %llu hits %llu (second open: %d)", root, (unsigned long long)st.fetches,
          (unsigned long long)st.hits, expect_cached);
    chute_dataset_close(a);
    chute_dataset_close(b);
    free(x);
    free(y);
    return 0;
}

TEST(dataset_through_cache_identical)
{
    if (!g_data)
        SKIP("no --data");
    char ready[4200], root[4200], cdir[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    if (access(ready, F_OK) != 0)
        SKIP("fixture data missing (run the data_setup test)");
    const char *kinds[] = {"tree", "shards"};
    for (int k = 0; k < 2; k++) {
        snprintf(root, sizeof root, "%s/%s", g_data, kinds[k]);
        path_in(cdir, sizeof cdir, kinds[k]);
        rm_rf(cdir);
        for (int pass = 0; pass < 2; pass++)
            if (ds_compare(root, cdir, pass))
                return 1;
    }
    return 0;
}

/* ---- the RAM tier (cache_ram_bytes) ---------------------------------- */

static int open_ram(const char *dir, uint64_t ram, ch_cache **c)
{
    ch_cache_options o = {.dir = dir, .block_bytes = BLK, .ram_bytes = ram};
    chute_error e;
    int rc = ch_cache_create(&g_counting, &o, c, &e);
    if (rc != CHUTE_OK)
        fprintf(stderr, "ch_cache_create: %s\n", e.message);
    return rc;
}

/* Read blocks [a, b) whole, in order, through one handle; 0 if right. */
static int read_blocks(const ch_source_ops *s, const char *p, const uint8_t *want, unsigned a,
                       unsigned b)
{
    void *h = NULL;
    uint64_t size = 0;
    chute_error e;
    if (ch_src_open(s, p, &h, &size, &e) != CHUTE_OK)
        return -1;
    uint8_t *buf = malloc(BLK);
    int bad = 0;
    for (unsigned k = a; k < b && !bad; k++) {
        uint64_t off = (uint64_t)k * BLK;
        size_t n = (size_t)(FSIZE - off < BLK ? FSIZE - off : BLK);
        bad = s->read_at(h, p, off, buf, n, &e) != CHUTE_OK || memcmp(buf, want + off, n) != 0;
    }
    s->close(h);
    free(buf);
    return bad ? -1 : 0;
}

#define ORIGIN() ((unsigned long long)atomic_load(g_origin_reads))

TEST(ram_tier_serves_repeats_without_origin)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("ram_only", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_ram(NULL, FSIZE + BLK, &c) == CHUTE_OK, "create a RAM-only cache");
    const ch_source_ops *s = ch_cache_source(c);
    CHECK(read_all(s, origin, want, 1) == 0, "first pass differs from the origin");
    CHECK(ORIGIN() == NBLK, "first pass: %llu origin reads, want %u", ORIGIN(), NBLK);
    CHECK(read_all(s, origin, want, 2) == 0, "second pass differs");
    uint8_t *buf = malloc(FSIZE);
    size_t len = 0;
    chute_error e;
    CHECK(ch_src_read_file(s, origin, buf, FSIZE, &len, &e) == CHUTE_OK && len == FSIZE &&
              !memcmp(buf, want, FSIZE),
          "read_file differs");
    CHECK(ORIGIN() == NBLK, "the second pass / read_file read the origin (%llu reads)", ORIGIN());
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(st.ram_entries == NBLK && st.ram_bytes == FSIZE && st.ram_evictions == 0 &&
              st.ram_misses == NBLK && st.ram_hits > NBLK && st.hits == 0 && st.fills == 0,
          "stats: %llu entries, %llu bytes, %llu evictions, %llu misses, %llu hits, disk %llu/%llu",
          (unsigned long long)st.ram_entries, (unsigned long long)st.ram_bytes,
          (unsigned long long)st.ram_evictions, (unsigned long long)st.ram_misses,
          (unsigned long long)st.ram_hits, (unsigned long long)st.hits,
          (unsigned long long)st.fills);
    struct stat fs;
    CHECK(stat(cdir, &fs) != 0, "a RAM-only cache made a directory");
    /* A changed origin (same size, new bytes and mtime) is a miss. */
    for (size_t i = 0; i < FSIZE; i++)
        want[i] ^= 0x5a;
    FILE *f = fopen(origin, "wb");
    CHECK(f && fwrite(want, 1, FSIZE, f) == FSIZE && fclose(f) == 0, "rewrite the origin");
    struct timespec ts[2] = {{0, UTIME_OMIT}, {time(NULL) + 100, 0}};
    CHECK(utimensat(AT_FDCWD, origin, ts, 0) == 0, "set the origin's mtime");
    CHECK(read_blocks(s, origin, want, 0, NBLK) == 0, "a changed origin served stale bytes");
    CHECK(ORIGIN() == 2 * NBLK, "a changed origin: %llu origin reads, want %u", ORIGIN(),
          2 * NBLK);
    ch_cache_stats_get(c, &st);
    CHECK(st.ram_entries == NBLK && st.ram_bytes == FSIZE, "stale entries not replaced: %llu",
          (unsigned long long)st.ram_entries);
    free(buf);
    ch_cache_destroy(c);
    free(want);
    return 0;
}

TEST(ram_tier_budget_lru)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("ram_lru", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_ram(NULL, 4 * BLK, &c) == CHUTE_OK, "create");
    const ch_source_ops *s = ch_cache_source(c);
    ch_cache_stats st;
    CHECK(read_blocks(s, origin, want, 0, NBLK) == 0, "pass differs");
    ch_cache_stats_get(c, &st);
    CHECK(ORIGIN() == NBLK && st.ram_entries == 4 && st.ram_bytes <= 4 * BLK &&
              st.ram_evictions == NBLK - 4,
          "after one pass: %llu origin reads, %llu entries, %llu bytes, %llu evictions", ORIGIN(),
          (unsigned long long)st.ram_entries, (unsigned long long)st.ram_bytes,
          (unsigned long long)st.ram_evictions);
    /* The last four blocks are held: no origin read. */
    CHECK(read_blocks(s, origin, want, NBLK - 4, NBLK) == 0 && ORIGIN() == NBLK,
          "the most recent blocks went to the origin (%llu reads)", ORIGIN());
    /* Block 0 was evicted; it now evicts the least recently used (NBLK-4). */
    CHECK(read_blocks(s, origin, want, 0, 1) == 0 && ORIGIN() == NBLK + 1, "block 0: %llu",
          ORIGIN());
    /* Touch NBLK-3, then a new block evicts NBLK-2 (least recently used),
     * not NBLK-3 (the oldest inserted): LRU, not FIFO. */
    CHECK(read_blocks(s, origin, want, NBLK - 3, NBLK - 2) == 0 && ORIGIN() == NBLK + 1, "touch");
    CHECK(read_blocks(s, origin, want, 1, 2) == 0 && ORIGIN() == NBLK + 2, "block 1");
    CHECK(read_blocks(s, origin, want, NBLK - 3, NBLK - 2) == 0 && ORIGIN() == NBLK + 2,
          "the touched block was evicted (FIFO, not LRU)");
    CHECK(read_blocks(s, origin, want, NBLK - 2, NBLK - 1) == 0 && ORIGIN() == NBLK + 3,
          "the least recently used block was kept");
    ch_cache_stats_get(c, &st);
    CHECK(st.ram_entries == 4 && st.ram_bytes <= 4 * BLK, "over budget: %llu bytes",
          (unsigned long long)st.ram_bytes);
    ch_cache_destroy(c);
    /* A budget under the smallest block (the last, 12345 bytes) holds
     * nothing and still reads right. */
    CHECK(open_ram(NULL, 4096, &c) == CHUTE_OK, "create");
    CHECK(read_all(ch_cache_source(c), origin, want, 5) == 0, "tiny budget: bytes differ");
    ch_cache_stats_get(c, &st);
    CHECK(st.ram_entries == 0 && st.ram_bytes == 0, "tiny budget holds %llu bytes",
          (unsigned long long)st.ram_bytes);
    ch_cache_destroy(c);
    free(want);
    return 0;
}

TEST(ram_tier_in_front_of_disk)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("ram_disk", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_ram(cdir, FSIZE + BLK, &c) == CHUTE_OK, "create");
    CHECK(read_all(ch_cache_source(c), origin, want, 1) == 0, "first pass differs");
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    CHECK(ORIGIN() == NBLK && st.fills == NBLK, "first pass: %llu origin reads, %llu fills",
          ORIGIN(), (unsigned long long)st.fills);
    ch_cache_destroy(c);
    /* A new process: RAM is empty, the disk tier serves, RAM fills. */
    CHECK(open_ram(cdir, FSIZE + BLK, &c) == CHUTE_OK, "re-create");
    CHECK(read_all(ch_cache_source(c), origin, want, 2) == 0, "disk pass differs");
    ch_cache_stats_get(c, &st);
    CHECK(ORIGIN() == NBLK && st.hits == NBLK && st.ram_misses == NBLK,
          "disk pass: %llu origin reads, %llu disk hits, %llu RAM misses", ORIGIN(),
          (unsigned long long)st.hits, (unsigned long long)st.ram_misses);
    /* Then RAM serves: the disk tier is not asked again. */
    CHECK(read_all(ch_cache_source(c), origin, want, 3) == 0, "RAM pass differs");
    ch_cache_stats s2;
    ch_cache_stats_get(c, &s2);
    CHECK(ORIGIN() == NBLK && s2.hits == NBLK && s2.misses == st.misses &&
              s2.ram_hits > st.ram_hits && s2.ram_misses == NBLK,
          "RAM pass: disk hits %llu -> %llu, RAM hits %llu -> %llu", (unsigned long long)st.hits,
          (unsigned long long)s2.hits, (unsigned long long)st.ram_hits,
          (unsigned long long)s2.ram_hits);
    ch_cache_destroy(c);
    free(want);
    return 0;
}

/* Many threads on one handle with a budget of three blocks: entries are
 * evicted while other threads copy from them. */
TEST(ram_tier_threads_small_budget)
{
    setup();
    char origin[4096], cdir[4096];
    uint8_t *want;
    CHECK(mkwork("ram_threads", origin, cdir, &want) == 0, "setup");
    ch_cache *c;
    CHECK(open_ram(NULL, 3 * BLK, &c) == CHUTE_OK, "create");
    void *h;
    uint64_t size;
    chute_error e;
    CHECK(ch_src_open(ch_cache_source(c), origin, &h, &size, &e) == CHUTE_OK, "open");
    pthread_t t[6];
    sh_arg a[6];
    for (int i = 0; i < 6; i++) {
        a[i] = (sh_arg){ch_cache_source(c), h, origin, want, 91 + (uint64_t)i, 0};
        pthread_create(&t[i], NULL, sh_main, &a[i]);
    }
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        bad |= a[i].bad;
    }
    ch_cache_source(c)->close(h);
    ch_cache_stats st;
    ch_cache_stats_get(c, &st);
    ch_cache_destroy(c);
    free(want);
    CHECK(!bad, "a thread read wrong bytes through the RAM tier");
    CHECK(st.ram_bytes <= 3 * BLK && st.ram_entries <= 3 && st.ram_evictions > 0 &&
              st.ram_hits > 0,
          "budget 3 blocks: %llu bytes, %llu entries, %llu evictions, %llu hits",
          (unsigned long long)st.ram_bytes, (unsigned long long)st.ram_entries,
          (unsigned long long)st.ram_evictions, (unsigned long long)st.ram_hits);
    return 0;
}

/* ---- the tier's counters in chute_stats (chute_loader_stats) ---------- */

static uint64_t run_epoch(chute_loader *ld, uint64_t epoch)
{
    uint64_t n = 0;
    if (chute_loader_start_epoch(ld, epoch, 0) != CHUTE_OK)
        return 0;
    chute_batch *b;
    while (chute_loader_next(ld, &b) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        n += v.count;
        chute_batch_release(b);
    }
    return n;
}

/* The shard fixture with blocks larger than any file and RAM for all of
 * it: the origin is read once per file (the directory's own listing and
 * sizes say how much), and every sample read of a later epoch is one RAM
 * hit, nothing else.  Without a tier the counters stay zero. */
TEST(loader_stats_count_tier)
{
    if (!g_data)
        SKIP("no --data");
    char ready[4200], root[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    if (access(ready, F_OK) != 0)
        SKIP("fixture data missing (run the data_setup test)");
    snprintf(root, sizeof root, "%s/shards", g_data);
    uint64_t files = 0, bytes = 0;
    DIR *d = opendir(root);
    CHECK(d, "opendir %s", root);
    struct dirent *de;
    while ((de = readdir(d))) {
        char p[8400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        if (de->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            files++;
            bytes += (uint64_t)st.st_size;
        }
    }
    closedir(d);
    for (int tier = 0; tier < 2; tier++) {
        chute_dataset_options dopt = {0};
        if (tier) {
            dopt.cache_ram_bytes = 1ull << 30;
            dopt.cache_block_bytes = 1ull << 30;
        }
        chute_dataset *ds = NULL;
        chute_error e;
        CHECK(chute_dataset_open_ex(root, &dopt, &ds, &e) == CHUTE_OK, "%s", e.message);
        chute_loader_options lo = {0};
        lo.batch_size = 16;
        lo.size = 32;
        lo.workers = 2;
        lo.readahead = CHUTE_READAHEAD_OFF; /* one read per sample: one lookup each */
        chute_loader *ld = NULL;
        CHECK(chute_loader_create(ds, &lo, &ld, &e) == CHUTE_OK, "%s", e.message);
        uint64_t n0 = run_epoch(ld, 0);
        chute_stats s1, s2;
        chute_loader_stats(ld, &s1);
        uint64_t n1 = run_epoch(ld, 1);
        chute_loader_stats(ld, &s2);
        chute_loader_destroy(ld);
        chute_dataset_close(ds);
        CHECK(n0 > 0, "epoch 0 delivered nothing");
        if (!tier) {
            CHECK(s2.tier_ram_hits == 0 && s2.tier_disk_hits == 0 && s2.tier_fetches == 0 &&
                      s2.tier_fetched_bytes == 0 && s2.tier_ram_budget == 0,
                  "no tier, yet counters: %llu hits %llu fetches",
                  (unsigned long long)s2.tier_ram_hits, (unsigned long long)s2.tier_fetches);
            continue;
        }
        CHECK(s1.tier_fetches == files && s1.tier_fetched_bytes == bytes,
              "first epoch: %llu blocks (%llu bytes) from the origin, the directory has %llu "
              "files (%llu bytes)",
              (unsigned long long)s1.tier_fetches, (unsigned long long)s1.tier_fetched_bytes,
              (unsigned long long)files, (unsigned long long)bytes);
        CHECK(s2.tier_fetches == files && s2.tier_fetched_bytes == bytes,
              "the second epoch went to the origin: %llu blocks",
              (unsigned long long)s2.tier_fetches);
        CHECK(s2.tier_ram_hits - s1.tier_ram_hits == n1 && n1 > 0,
              "second epoch: %llu RAM hits for %llu samples read",
              (unsigned long long)(s2.tier_ram_hits - s1.tier_ram_hits), (unsigned long long)n1);
        CHECK(s2.tier_ram_bytes == bytes && s2.tier_ram_budget == (1ull << 30) &&
                  s2.tier_disk_hits == 0 && s2.tier_ram_evictions == 0,
              "RAM holds %llu bytes (want %llu), disk hits %llu, evictions %llu",
              (unsigned long long)s2.tier_ram_bytes, (unsigned long long)bytes,
              (unsigned long long)s2.tier_disk_hits, (unsigned long long)s2.tier_ram_evictions);
    }
    return 0;
}

UNIT_MAIN
