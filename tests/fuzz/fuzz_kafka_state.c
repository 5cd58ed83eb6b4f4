/*
 * fuzz_kafka_state.c — fuzz target: the Kafka consumer's state bytes
 * (ch_kafka_state_parse in src/io/kafka.c), which come back from a
 * user's saved state_dict and so are untrusted.  Whatever the bytes, the
 * parser stays inside them and either fails cleanly (CHUTE_ECORRUPT with
 * a message) or hands out only entries with a 1..249-byte topic of topic
 * characters lying inside the input, a partition >= 0 and an offset >= 0.
 */
#include "io/kafka.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct span {
    const uint8_t *b;
    size_t n;
} span;

static int entry(void *user, const char *topic, size_t tl, int32_t partition, int64_t offset)
{
    const span *s = user;
    const uint8_t *t = (const uint8_t *)topic;
    if (tl == 0 || tl > 249 || t < s->b || t + tl > s->b + s->n || partition < 0 || offset < 0)
        __builtin_trap();
    for (size_t i = 0; i < tl; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", t[i]) || !t[i])
            __builtin_trap();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy: ASan then flags any read past the input. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    span s = {copy, size};
    chute_error err;
    err.message[0] = 0;
    int rc = ch_kafka_state_parse(copy, size, entry, &s, &err);
    if (rc != CHUTE_OK && (rc != CHUTE_ECORRUPT || !err.message[0]))
        __builtin_trap();
    free(copy);
    return 0;
}
