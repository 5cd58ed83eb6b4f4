/*
 * fuzz_manifest.c — fuzz target: the manifest parser (ch_manifest_parse),
 * from memory.  Every number in a manifest sizes or indexes something
 * later, so beyond "no crash" the target checks what an accepted manifest
 * promises: bare names, no name twice, a total that is the sum of the
 * counts without overflow; and that every refusal names the manifest.
 */
#include "format/format.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ch_manifest m;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc = ch_manifest_parse("fuzz.manifest", (const char *)data, size, &m, &err);
    if (rc != CHUTE_OK) {
        if (!strstr(err.message, "fuzz.manifest") || m.shards || m.nshards)
            __builtin_trap();
        return 0;
    }
    uint64_t sum = 0;
    if (m.nshards == 0 || m.total == 0)
        __builtin_trap();
    for (uint32_t k = 0; k < m.nshards; k++) {
        const ch_manifest_shard *s = &m.shards[k];
        if (!ch_shard_name_ok(s->name, strlen(s->name)) || strchr(s->name, '/') ||
            s->samples > UINT64_MAX - sum)
            __builtin_trap();
        sum += s->samples;
        for (uint32_t j = 0; j < k && m.nshards <= 256; j++)
            if (strcmp(m.shards[j].name, s->name) == 0)
                __builtin_trap();
    }
    if (sum != m.total)
        __builtin_trap();
    ch_manifest_free(&m);
    return 0;
}
