/*
 * fuzz_cachefile.c — fuzz target: the cache tier's block files
 * (src/io/cache.c), whose header and data come from a directory any
 * process on the node can write.  The input is placed where the cache
 * looks for block 0 of a fixed in-memory object; then a read through a
 * handle and a whole-file read must both return the origin's bytes
 * exactly — a damaged, truncated or forged file is detected and
 * refetched, never served — and never crash.
 */
#define _GNU_SOURCE
#include "io/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OBJ 3000u
#define BLOCK 4096u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t byte_at(uint64_t i) { return (uint8_t)(i * 7 + (i >> 8) + 1); }

static int m_stat(const char *p, ch_stat *o, chute_error *e)
{
    (void)p;
    (void)e;
    memset(o, 0, sizeof *o);
    o->type = CH_ENT_FILE;
    o->size = OBJ;
    o->mtime_ns = 42;
    return CHUTE_OK;
}
static int m_open(const char *p, void **h, uint64_t *sz, chute_error *e)
{
    (void)p;
    (void)e;
    *h = (void *)1;
    *sz = OBJ;
    return CHUTE_OK;
}
static int m_read(void *h, const char *p, uint64_t off, void *buf, size_t len, chute_error *e)
{
    (void)h;
    (void)p;
    (void)e;
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)buf)[i] = byte_at(off + i);
    return CHUTE_OK;
}
static void m_close(void *h) { (void)h; }

static const ch_source_ops k_mem = {.version = CH_SOURCE_OPS_VERSION, .name = "mem",
                                    .open = m_open, .read_at = m_read, .close = m_close,
                                    .stat = m_stat};

static char g_dir[256], g_blk[512];

static void cleanup(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) {
    }
}

/* Fill the cache once to learn block 0's file name. */
static int setup(void)
{
    if (g_blk[0])
        return 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/chute-fuzz-cachefile-%ld", (long)getpid());
    atexit(cleanup);
    ch_cache_options o = {.dir = g_dir, .block_bytes = BLOCK};
    ch_cache *c;
    chute_error e;
    uint8_t b[OBJ];
    size_t len;
    if (ch_cache_create(&k_mem, &o, &c, &e) != CHUTE_OK ||
        ch_src_read_file(ch_cache_source(c), "fuzz/object", b, sizeof b, &len, &e) != CHUTE_OK)
        __builtin_trap();
    ch_cache_destroy(c);
    DIR *d = opendir(g_dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".blk"))
            snprintf(g_blk, sizeof g_blk, "%s/%s", g_dir, de->d_name);
    if (d)
        closedir(d);
    if (!g_blk[0])
        __builtin_trap();
    /* CHUTE_FUZZ_SEED=FILE: save the valid file as a seed. */
    const char *seed = getenv("CHUTE_FUZZ_SEED");
    if (seed) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", g_blk, seed);
        if (system(cmd) != 0)
            __builtin_trap();
    }
    return 0;
}

static void check(const uint8_t *b, size_t n, uint64_t off)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != byte_at(off + i))
            __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    ch_cache_options o = {.dir = g_dir, .block_bytes = BLOCK};
    ch_cache *c;
    chute_error e;
    if (ch_cache_create(&k_mem, &o, &c, &e) != CHUTE_OK)
        __builtin_trap();
    const ch_source_ops *s = ch_cache_source(c);
    uint8_t b[OBJ];
    for (int pass = 0; pass < 2; pass++) {
        /* The input replaces block 0's file (as another process would). */
        int fd = open(g_blk, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
            __builtin_trap();
        close(fd);
        if (pass == 0) {
            void *h;
            uint64_t sz;
            if (ch_src_open(s, "fuzz/object", &h, &sz, &e) != CHUTE_OK || sz != OBJ ||
                s->read_at(h, "fuzz/object", 100, b, 1000, &e) != CHUTE_OK)
                __builtin_trap();
            check(b, 1000, 100);
            s->close(h);
        } else {
            size_t len = 0;
            if (ch_src_read_file(s, "fuzz/object", b, sizeof b, &len, &e) != CHUTE_OK ||
                len != OBJ)
                __builtin_trap();
            check(b, OBJ, 0);
        }
    }
    ch_cache_destroy(c);
    return 0;
}
