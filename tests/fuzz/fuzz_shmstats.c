/*
 * fuzz_shmstats.c — fuzz target: the stats segment parser `chute top`
 * runs on every file of /dev/shm it reads (src/stats/shmstats.c,
 * ch_shm_parse).  Whatever the bytes, the parse stays inside them (ASan),
 * and what it accepts is consistent: the counters it reports lie inside
 * the declared size, which lies inside the input, and every string it
 * returns is printable ASCII (top writes them to a terminal).
 */
#include "stats/shmstats.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void printable(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == cap)
        __builtin_trap(); /* unterminated */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
            __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes: ASan flags any read past it. */
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    ch_shm_view v;
    char why[200];
    if (ch_shm_parse(p, size, &v, why, sizeof why) == 0) {
        uint32_t seg, head;
        memcpy(&seg, p + 12, 4);
        memcpy(&head, p + 16, 4);
        if (seg > size || (uint64_t)head + 8ull * v.ncounters > seg || v.pid <= 0)
            __builtin_trap();
        printable(v.host, sizeof v.host);
        printable(v.dataset, sizeof v.dataset);
        printable(v.comm, sizeof v.comm);
    } else if (!why[0]) {
        __builtin_trap(); /* a refusal always says why */
    }
    free(p);
    return 0;
}
