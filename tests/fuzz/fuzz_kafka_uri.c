/*
 * fuzz_kafka_uri.c — fuzz target: the kafka:// URI and its query (brokers,
 * %-escaped topics, group, assign, label_header, label_key, until and max_... values, kafka.<prop>
 * client properties and the reserved ones), i.e. everything
 * ch_kafka_open checks before it makes a client (ch_kafka_uri_check in
 * src/io/kafka.c).  A URI is user text (a config file, a command line),
 * so whatever the bytes: no crash or leak, and either CHUTE_OK or a clean
 * CHUTE_EINVAL/CHUTE_ENOMEM with a message.  An input with a NUL byte
 * feeds the part after it as the consumer's state bytes, so the URI and
 * state checks meet.  Nothing touches the network.
 */
#include "io/kafka.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *uri = malloc(size + 1); /* a private copy: ASan flags any read past it */
    if (!uri)
        return 0;
    memcpy(uri, data, size);
    uri[size] = '\0';
    size_t ul = strlen(uri);
    ch_kafka_opts o = {0};
    if (ul < size) {
        o.state = uri + ul + 1;
        o.state_len = size - ul - 1;
    }
    chute_error err;
    err.message[0] = 0;
    int rc = ch_kafka_uri_check(uri, &o, &err);
    if (rc != CHUTE_OK && ((rc != CHUTE_EINVAL && rc != CHUTE_ENOMEM && rc != CHUTE_ECORRUPT) ||
                           !err.message[0]))
        __builtin_trap();
    free(uri);
    return 0;
}
