/*
 * fuzz_example.c — fuzz target: the tf.train.Example reader.  The input
 * is parsed as one serialized Example, and, if it also frames as a
 * TFRecord stream (the fixture seeds do), each record's payload is parsed
 * too, so mutations of real TensorFlow-written Examples reach the reader
 * (data CRCs are not checked here on purpose).  Every view handed back
 * must lie inside the input and decode to exactly `count` values.
 */
#include "format/parse.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const uint8_t *p, size_t n)
{
    static const char *const keys[] = {"image", "label", "ints", "floats", "names", "empty_f",
                                       ""};
    fmt_pb_feature f[7];
    chute_error err;
    if (fmt_pb_example_find(p, n, keys, 7, f, "ex", 0, &err) != CHUTE_OK)
        return;
    int64_t iv[256];
    float fv[256];
    for (int k = 0; k < 7; k++) {
        if (f[k].kind < FMT_PB_BYTES)
            continue;
        if (f[k].list < p || f[k].list_len > n || f[k].list + f[k].list_len > p + n)
            __builtin_trap();
        uint64_t cnt = 0;
        size_t pos = 0, sn;
        const uint8_t *s;
        while (fmt_pb_bytes_next(&f[k], &pos, &s, &sn)) {
            if (s < f[k].list || s + sn > f[k].list + f[k].list_len)
                __builtin_trap();
            cnt++;
        }
        cnt += fmt_pb_int64_decode(&f[k], iv, 256) + fmt_pb_float_decode(&f[k], fv, 256);
        if (f[k].count <= 256 && cnt != f[k].count)
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);
    fmt_reader r;
    fmt_tfr_index ix;
    chute_error err;
    fmt_reader_mem(&r, data, size, "mem");
    fmt_tfr_index_build(&r, NULL, &ix, &err); /* the good prefix is enough */
    for (uint64_t i = 0; i < ix.count; i++)
        one(data + ix.recs[i].offset + 12, (size_t)ix.recs[i].length);
    fmt_tfr_index_free(&ix);
    return 0;
}
