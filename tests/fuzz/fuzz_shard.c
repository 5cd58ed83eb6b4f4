/*
 * fuzz_shard.c — fuzz target: the shard index parser (header, trailer,
 * index entries, class and name tables) over an in-memory source, so
 * every offset and length it trusts comes from the fuzzer.
 *
 * Each input is parsed twice: as it is, and with its header, index and
 * trailer CRCs recomputed, because a random mutation almost never passes
 * three CRC-32s and the bounds checks behind them would go unexercised.
 * A targets table (issue 24) the parser accepts must tile exactly, and each
 * record in it goes through the checked record decoder.
 */
#include "format/format.h"
#include "parse/targets.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void parse(const uint8_t *data, size_t size)
{
    mem_file m = {data, size};
    ch_shard_index ix;
    chute_error err;
    if (ch_shard_read_index(&k_mem, &m, "fuzz.chute", size, &ix, &err) == CHUTE_OK) {
        /* Every entry the parser accepted must be readable, aligned and in order. */
        uint64_t prev_end = 0;
        for (uint64_t i = 0; i < ix.count; i++) {
            const ch_shard_entry *e = &ix.entries[i];
            if (e->offset + e->length > size || e->offset < prev_end ||
                e->offset % ix.align != 0 || e->label < 0 || (uint32_t)e->label >= ix.nclasses ||
                !ix.names[i])
                __builtin_trap();
            prev_end = e->offset + e->length;
            (void)ch_crc32(data + e->offset, e->length);
        }
        for (uint64_t i = 0; ix.tg && i < ix.count; i++) {
            if (ix.tg_off[i + 1] < ix.tg_off[i])
                __builtin_trap();
            ch_tg_view v;
            size_t n = (size_t)(ix.tg_off[i + 1] - ix.tg_off[i]);
            if (n && ch_tg_decode(ix.tg + ix.tg_off[i], n, "fuzz", &v, &err) == CHUTE_OK)
                for (uint32_t o = 0; o < v.n; o++)
                    (void)ch_tg_label(&v, o);
        }
        ch_shard_index_free(&ix);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse(data, size);
    if (size < CH_SHARD_HEADER_BYTES + CH_SHARD_TRAILER_BYTES || size > (16u << 20))
        return 0;
    uint8_t *b = malloc(size);
    if (!b)
        return 0;
    memcpy(b, data, size);
    uint8_t *t = b + size - CH_SHARD_TRAILER_BYTES;
    put32(b + 60, ch_crc32(b, 60));
    uint64_t ioff = get64(t + 8), isz = get64(t + 16), toff = size - CH_SHARD_TRAILER_BYTES;
    if (ioff <= toff && isz <= toff - ioff)
        put32(t + 32, ch_crc32(b + ioff, isz));
    put32(t + 60, ch_crc32(t, 60));
    parse(b, size);
    free(b);
    return 0;
}
