/*
 * fuzz_tarstream.c — fuzz target: the streaming tar walker (tarstream.c),
 * differentially against the indexing walker (tar.c) on the same bytes.
 *
 * The input is read through a callback that hands out small, varying
 * pieces (sizes drawn from the input itself), as a pipe does.  Both
 * walkers must agree on whether the archive is good; where it is, they
 * must list the same regular members (name, size, header and data
 * offsets), and the data the stream hands out must be the bytes the index
 * points at.  Then the input is walked once more with ignore_zeros (the
 * concatenated-archives mode of streams), which must terminate with every
 * offset inside the input.  Last, the stream reader's sample assembly
 * (stream_tar.c, through ch_stream_tar_open_fn) walks the input with
 * fields declared as a WebDataset stream declares them, and every field
 * of every good sample is decoded (ch_stream_tar_fields): OK or a clean
 * error, never a read outside the record.
 */
#define _GNU_SOURCE
#include "format/fields.h"
#include "format/parse.h"
#include "pipeline/stream.h"

#include "chute.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

/* The names fixtures/fields/wds and corpus/tarstream use. */
#define DECL "cls:int64,json:bytes,txt:bytes,npy:float32[2x3],ids.npy:int64[4],mask.npy:uint8[4x4]"

static void samples(const uint8_t *data, size_t size)
{
    ch_field fields[8];
    int nf = 0;
    chute_error err;
    if (ch_field_decl_parse(DECL, fields, 8, &nf, &err) != CHUTE_OK)
        __builtin_trap();
    ch_stream_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.name = "mem";
    for (int k = 0; k < nf; k++)
        spec.keys[2 + k] = fields[k].name;
    spec.nfields = (uint32_t)nf;
    feed h = {data, size, 0, 5};
    void *rd = NULL;
    if (ch_stream_tar_open_fn(&spec, 1u << 20, feed_read, &h, &rd, &err) != CHUTE_OK)
        return;
    ch_stream_rec rec;
    memset(&rec, 0, sizeof rec);
    static uint8_t val[8][64];
    int64_t blen[8];
    ch_field_req req[8];
    for (int k = 0; k < nf; k++)
        req[k] = (ch_field_req){(uint32_t)k, val[k], sizeof val[k], &blen[k]};
    for (int guard = 0; guard < 1 << 16; guard++) {
        rec.img_off = 0; /* as the pump does */
        rec.ex_len = 0;
        if (ch_stream_tar_ops.next(rd, &rec, &err) != CHUTE_OK)
            break;
        if (rec.bad) {
            if (!rec.why[0])
                __builtin_trap();
            continue;
        }
        if (rec.img_off > rec.data.cap || rec.len > rec.data.cap - rec.img_off || rec.len > size)
            __builtin_trap();
        for (int k = 0; k < nf; k++) { /* one at a time: a missing one stops only itself */
            err.message[0] = 0;
            blen[k] = -1;
            int rc = ch_stream_tar_fields(&spec, fields, &rec, &req[k], 1, "fuzz", &err);
            if (rc != CHUTE_OK && !err.message[0])
                __builtin_trap();
            if (rc == CHUTE_OK && fields[k].kind == CHUTE_FIELD_BYTES &&
                (blen[k] < 0 || blen[k] > (int64_t)sizeof val[k]))
                __builtin_trap();
        }
    }
    ch_stream_tar_ops.close(rd);
    ch_buf_free(&rec.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chute_error err;
    fmt_reader r;
    fmt_tar_index ix;
    fmt_tar_opts o = {.max_member = 1u << 20, .max_name = 4096, .max_pax = 8192};
    fmt_reader_mem(&r, data, size, "mem");
    int rci = fmt_tar_index_build(&r, &o, &ix, &err);

    feed f = {data, size, 0, size ? data[0] : 7};
    fmt_tar_stream s = {.read = feed_read, .ctx = &f, .name = "mem", .max_member = 1u << 20,
                        .max_name = 4096, .max_pax = 8192};
    uint8_t *buf = malloc(1u << 20);
    if (!buf)
        return 0;
    uint64_t k = 0;
    int rcs;
    for (;;) {
        const char *name;
        size_t nl;
        uint64_t sz, ho;
        rcs = fmt_tar_stream_next(&s, &name, &nl, &sz, &ho, &err);
        if (rcs != CHUTE_OK)
            break;
        /* A header may claim more data than the input holds (a stream
         * cannot know its length): then reading the data must fail. */
        if (ho >= size)
            __builtin_trap();
        if (rci == CHUTE_OK) {
            if (k >= ix.count)
                __builtin_trap(); /* the stream found a member the index did not */
            const fmt_tar_member *m = &ix.m[k];
            if (m->header_offset != ho || m->size != sz || m->name_len != nl ||
                memcmp(fmt_tar_name(&ix, k), name, nl) != 0)
                __builtin_trap();
        }
        uint64_t at = s.pos;
        int rd = (k & 1) ? fmt_tar_stream_data(&s, buf, sz, &err)
                         : fmt_tar_stream_data(&s, NULL, sz, &err);
        if (rd != CHUTE_OK) {
            rcs = rd;
            break;
        }
        if (at > size || sz > size - at)
            __builtin_trap(); /* data handed out past the input's end */
        if (rci == CHUTE_OK && (k & 1) &&
            (ix.m[k].data_offset != at || memcmp(buf, data + at, (size_t)sz) != 0))
            __builtin_trap();
        k++;
    }
    if (rci == CHUTE_OK && (rcs != FMT_TAR_STREAM_END || k != ix.count))
        __builtin_trap(); /* a good archive the stream could not walk */
    if (rci != CHUTE_OK && rcs == FMT_TAR_STREAM_END && rci != CHUTE_ELIMIT)
        __builtin_trap(); /* a bad archive the stream found good */
    fmt_tar_stream_free(&s);

    /* Concatenated-archives mode: must end, offsets in bounds. */
    feed g = {data, size, 0, 3};
    fmt_tar_stream t = {.read = feed_read, .ctx = &g, .name = "mem", .ignore_zeros = 1,
                        .max_member = 1u << 20, .max_name = 4096, .max_pax = 8192};
    for (int guard = 0; guard < 1 << 20; guard++) {
        const char *name;
        size_t nl;
        uint64_t sz, ho;
        if (fmt_tar_stream_next(&t, &name, &nl, &sz, &ho, &err) != CHUTE_OK)
            break;
        if (ho >= size || t.pos > size)
            __builtin_trap();
    }
    fmt_tar_stream_free(&t);
    free(buf);
    fmt_tar_index_free(&ix);
    samples(data, size);
    return 0;
}
