/*
 * fuzz_png0.c — fuzz target: the PNG level-0 fast path (src/codec/png0.c)
 * against libspng.  The fast path may decline anything, but whatever it
 * decodes libspng must decode to the same RGB8 bytes, or the fast path
 * gave pixels the real decoder would not.  Mutated inputs almost never
 * keep their CRCs, so the harness first rewrites every chunk's CRC (the
 * walk stops at the first chunk that does not fit) and then runs the fast
 * path twice: on those bytes as they are, and with the adler32 check off
 * (libspng then told SPNG_CTX_IGNORE_ADLER32), which lets mutations of
 * the stored payload reach the unfilter code.  ASan checks the bounds.
 */
#include "codec/png0.h"

#include <spng.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void fix_crcs(uint8_t *p, size_t len)
{
    size_t at = 8;
    while (len >= 12 && at <= len - 12) {
        uint32_t n = be32(p + at);
        if (n > len - at - 12)
            return;
        uint32_t c = (uint32_t)crc32(0, p + at + 4, 4 + n);
        uint8_t *q = p + at + 8 + n;
        q[0] = (uint8_t)(c >> 24);
        q[1] = (uint8_t)(c >> 16);
        q[2] = (uint8_t)(c >> 8);
        q[3] = (uint8_t)c;
        at += 12 + (size_t)n;
    }
}

/* libspng's RGB8 decode of p, into *out (malloc'd); 0 when it fails. */
static int spng_rgb8(const uint8_t *p, size_t len, int flags, uint8_t **out, size_t *n)
{
    spng_ctx *ctx = spng_ctx_new(flags);
    if (!ctx)
        return 0;
    int e = spng_set_png_buffer(ctx, p, len);
    if (!e)
        e = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, n);
    if (!e && !(*out = malloc(*n)))
        e = 1;
    if (!e)
        e = spng_decode_image(ctx, *out, *n, SPNG_FMT_RGB8, 0);
    spng_ctx_free(ctx);
    return !e;
}

/* rows: how many rows the fast path is asked for (0: all); only those are
 * compared, but acceptance must not depend on it. */
static void one(const uint8_t *p, size_t len, unsigned flags, uint32_t rows)
{
    if (len < 24)
        return;
    uint32_t w = be32(p + 16), h = be32(p + 20);
    if (!w || !h || w > 4096 || (uint64_t)w * h > (1u << 18))
        return;
    size_t px = (size_t)w * h * 3;
    uint8_t *out = malloc(px + ch_png0_scratch(w));
    size_t cmp = rows && rows < h ? (size_t)w * rows * 3 : px;
    if (out && ch_png0_decode(p, len, w, h, rows, out, out + px, flags)) {
        uint8_t *ref = NULL;
        size_t n = 0;
        if (!spng_rgb8(p, len, flags & CH_PNG0_NO_ADLER ? SPNG_CTX_IGNORE_ADLER32 : 0, &ref,
                       &n) ||
            n != px || memcmp(out, ref, cmp) != 0)
            __builtin_trap(); /* pixels libspng does not give */
        free(ref);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (8u << 20))
        return 0;
    one(data, size, 0, 0);
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    fix_crcs(p, size);
    uint32_t rows = size ? 1 + data[size - 1] % 8 : 0; /* the top rows only */
    one(p, size, 0, 0);
    one(p, size, 0, rows);
    one(p, size, CH_PNG0_NO_ADLER, 0);
    one(p, size, CH_PNG0_NO_ADLER, rows);
    free(p);
    return 0;
}
