/*
 * fuzz_stream_tfr.c — fuzz target: TFRecord records on streams
 * (src/pipeline/stream_tfr.c) and the declared-field parser behind them
 * (ch_field_decl_parse, src/format/fields.c).  A Kafka message value or a
 * piped TFRecord record is untrusted bytes; a declaration is user text.
 *
 * The first byte picks the mode:
 *   0  the rest is a declaration ("a:int64,b.npy:uint8[2x3]"): parsed;
 *      every field it gives is known, named, and has a sane shape.
 *   1  the rest is a serialized Example: framed here with correct CRCs
 *      (so the Example parser is reached, not just the CRC check), then
 *   2  the rest is a Kafka value as is (a framed record, a bare Example,
 *      or anything), checked by ch_stream_tfr_fill; when it is accepted, the image view
 *      lies inside the value and the declared fields are read with
 *      ch_stream_tfr_fields into fixed buffers: OK or a clean error.
 *   3  the rest is a pipe's bytes (plain TFRecord, or GZIP/ZLIB, which
 *      the first bytes tell), read record by record through ch_tfr_in
 *      in short pieces as from a pipe: every record is OK or bad with a
 *      reason, offsets only grow, and the stream ends (END or an error
 *      with a message) within a bounded number of records.
 */
#include "format/fields.h"
#include "format/parse.h"
#include "pipeline/stream.h"

#include "chute.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DECL "bbox:float32[4],ids:int64[3],weight:float32,meta:bytes,mask.npy:uint8[4x4]"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void decl_mode(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return;
    memcpy(s, data, size);
    s[size] = '\0';
    ch_field f[8];
    int n = -1;
    chute_error err;
    err.message[0] = 0;
    int rc = ch_field_decl_parse(s, f, 8, &n, &err);
    if (rc != CHUTE_OK && (rc != CHUTE_EINVAL || !err.message[0]))
        __builtin_trap();
    for (int k = 0; rc == CHUTE_OK && k < n; k++) {
        if (!f[k].known || !f[k].name[0] || f[k].ndim > CH_FIELD_MAX_DIMS)
            __builtin_trap();
        if (f[k].kind != CHUTE_FIELD_BYTES && ch_field_sample_bytes(&f[k]) == 0)
            __builtin_trap();
    }
    free(s);
}

typedef struct feed {
    const uint8_t *p;
    size_t n, off;
    uint32_t step;
} feed;

static int feed_read(void *ctx, uint8_t *buf, size_t n, size_t *got, chute_error *err)
{
    (void)err;
    feed *f = ctx;
    f->step = f->step * 1103515245u + 12345u;
    size_t piece = 1 + (f->step >> 16) % 700; /* short reads, like a pipe's */
    size_t k = CH_MIN(CH_MIN(n, piece), f->n - f->off);
    memcpy(buf, f->p + f->off, k);
    f->off += k;
    *got = k;
    return CHUTE_OK;
}

static void stream_mode(const ch_stream_spec *spec, const uint8_t *data, size_t size)
{
    feed f = {data, size, 0, size ? data[size - 1] : 7};
    ch_tfr_in in;
    memset(&in, 0, sizeof in);
    in.read = feed_read;
    in.ctx = &f;
    in.name = "fuzz";
    in.max_bytes = 1u << 16;
    ch_stream_rec rec;
    memset(&rec, 0, sizeof rec);
    chute_error err;
    uint64_t last = 0;
    int rc = CHUTE_OK;
    /* A deflate bomb of empty records could run long: a bound, not a check. */
    for (int k = 0; k < 4096; k++) {
        err.message[0] = 0;
        rc = ch_tfr_in_next(&in, spec, &rec, &err);
        if (rc != CHUTE_OK)
            break;
        if (rec.offset < last || (k && rec.offset == last) || (rec.bad && !rec.why[0]))
            __builtin_trap();
        if (!rec.bad && (rec.img_off + rec.len > rec.data.cap || rec.len == 0 ||
                         rec.ex_off + rec.ex_len + 4 > rec.data.cap))
            __builtin_trap();
        last = rec.offset;
    }
    if (rc != CHUTE_OK && rc != CHUTE_END && !err.message[0])
        __builtin_trap();
    if (rc == CHUTE_END && f.off != f.n)
        __builtin_trap(); /* a clean end reads everything */
    ch_tfr_in_free(&in);
    ch_buf_free(&rec.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1 << 20))
        return 0;
    int mode = data[0] % 4;
    data++, size--;
    if (mode == 0) {
        decl_mode(data, size);
        return 0;
    }
    /* The spec and the dataset's fields a "tfrecord" stream would have. */
    ch_stream_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.tfr = 1;
    spec.keys[0] = "image/encoded";
    spec.keys[1] = "image/class/label";
    ch_field fields[8];
    int nf = 0;
    chute_error err;
    if (ch_field_decl_parse(DECL, fields, 8, &nf, &err) != CHUTE_OK)
        __builtin_trap();
    for (int k = 0; k < nf; k++)
        spec.keys[2 + k] = fields[k].name;
    spec.nfields = (uint32_t)nf;
    if (mode == 3) {
        if (size <= (64u << 10)) /* inflated, up to ~1000x */
            stream_mode(&spec, data, size);
        return 0;
    }

    ch_stream_rec rec;
    memset(&rec, 0, sizeof rec);
    size_t whole = mode == 1 ? size + FMT_TFR_OVERHEAD : size;
    if (ch_buf_reserve(&rec.data, whole ? whole : 1) != CHUTE_OK)
        return 0;
    uint8_t *d = rec.data.data;
    if (mode == 1) {
        uint64_t len = size;
        for (int i = 0; i < 8; i++)
            d[i] = (uint8_t)(len >> (8 * i));
        put32(d + 8, ch_crc32c_mask(ch_crc32c(0, d, 8)));
        memcpy(d + FMT_TFR_HEADER, data, size);
        put32(d + FMT_TFR_HEADER + size, ch_crc32c_mask(ch_crc32c(0, data, size)));
    } else {
        memcpy(d, data, size);
    }
    rec.len = whole;
    rec.label = -1;
    ch_stream_tfr_fill(&spec, &rec, "fuzz", mode == 2);
    if (!rec.bad) {
        if (rec.img_off > whole || rec.len > whole - rec.img_off || rec.len == 0 ||
            rec.ex_off + rec.ex_len > whole)
            __builtin_trap();
        static uint8_t buf[5][64];
        int64_t blen = 0;
        ch_field_req req[5];
        for (int k = 0; k < nf; k++) {
            req[k].field = (uint32_t)k;
            req[k].dst = buf[k];
            req[k].cap = 64;
            req[k].len = fields[k].kind == CHUTE_FIELD_BYTES ? &blen : NULL;
        }
        err.message[0] = 0;
        int rc = ch_stream_tfr_fields(&spec, fields, &rec, req, (size_t)nf, "fuzz", &err);
        if (rc != CHUTE_OK && !err.message[0])
            __builtin_trap();
        if (rc == CHUTE_OK && (blen < 0 || blen > 64))
            __builtin_trap();
    } else if (!rec.why[0]) {
        __builtin_trap();
    }
    ch_buf_free(&rec.data);
    return 0;
}
