/*
 * fuzz_shard.c — fuzz target: the shard index parser (header, trailer,
 * index entries, class and name tables) over an in-memory source, so
 * every offset and length it trusts comes from the fuzzer.
 */
#include "format/format.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct mem_file {
    const uint8_t *p;
    size_t n;
} mem_file;

static int mem_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                       chute_error *err)
{
    mem_file *m = h;
    if (off > m->n || len > m->n - off)
        return ch_err(err, CHUTE_EIO, "%s@%llu: past the end", path, (unsigned long long)off);
    memcpy(buf, m->p + off, len);
    return CHUTE_OK;
}

static const ch_source_ops k_mem = {.version = CH_SOURCE_OPS_VERSION, .name = "mem",
                                    .read_at = mem_read_at};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mem_file m = {data, size};
    ch_shard_index ix;
    chute_error err;
    if (ch_shard_read_index(&k_mem, &m, "fuzz.chute", size, &ix, &err) == CHUTE_OK) {
        /* Every entry the parser accepted must be readable. */
        for (uint64_t i = 0; i < ix.count; i++) {
            const ch_shard_entry *e = &ix.entries[i];
            if (e->offset + e->length > size)
                __builtin_trap();
            (void)ch_crc32(data + e->offset, e->length);
        }
        ch_shard_index_free(&ix);
    }
    return 0;
}
