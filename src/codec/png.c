/*
 * png.c — PNG through libspng (or nothing, when built without it).
 *
 * PNG has no windowed decode, so the whole image is decoded to RGB8
 * (16-bit samples are reduced, palette and grey expanded, alpha dropped
 * without compositing, which is what PIL's convert("RGB") does).  The
 * size limit is checked from the header before the pixel buffer exists.
 *
 * Ancillary chunks.  max_pixels bounds the pixels, not the metadata: a
 * 1 MB PNG whose zTXt or iCCP inflates to 1 GB would cost every worker a
 * gigabyte and seconds of zlib per decode, because libspng's defaults
 * inflate and keep such chunks without limit.  We need none of them (no
 * text, no colour management: PIL's convert("RGB") ignores the profile),
 * so they are capped the way PIL caps text: 1 MiB inflated per chunk
 * (PIL's MAX_TEXT_CHUNK, which PIL also applies to iCCP) and 8 MiB of
 * stored chunk data in all (PIL allows 64 MiB of text; 8 keeps a worker's
 * extra memory small).  Past the cap the image fails with CHUTE_ELIMIT,
 * as PIL fails it with "Decompressed Data Too Large"; libspng stops
 * inflating at the cap, so the cost is bounded by it.  Unknown chunks are
 * skipped unread (libspng's default, set explicitly), CRCs stay checked.
 *
 * Level 0.  A PNG whose zlib stream is only stored blocks (the issue's
 * "store images uncompressed") is first offered to png0.c, which copies
 * and unfilters the payload straight into the output with every CRC and
 * the adler32 still checked; it declines anything but the plainest
 * 8-bit files, and libspng then decodes as below (png0.h says why).
 */
#include "codec_impl.h"

#include <string.h>

static int ch_png_sniff(const uint8_t *p, size_t len)
{
    return len >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0;
}

#ifdef CHUTE_HAVE_SPNG
#include "png0.h"

#include <spng.h>

enum {
    CH_PNG_CHUNK_LIMIT = 1 << 20, /* inflated bytes of one zTXt/iTXt/iCCP */
    CH_PNG_CACHE_LIMIT = 8 << 20  /* stored ancillary chunk bytes in all */
};

/* A libspng failure as a chute status: a chunk over our caps is a limit,
 * anything else damaged content. */
static int png_fail(chute_error *err, const char *what, int e)
{
    if (e == SPNG_ECHUNK_LIMITS)
        return ch_err(err, CHUTE_ELIMIT,
                      "PNG %s: ancillary chunks (text, ICC profile, EXIF) over the limit of %d KiB "
                      "inflated per chunk, %d MiB in all, or too many chunks",
                      what, CH_PNG_CHUNK_LIMIT >> 10, CH_PNG_CACHE_LIMIT >> 20);
    if (e == SPNG_EMEM)
        return ch_err(err, CHUTE_ENOMEM, "PNG %s: out of memory", what);
    return ch_err(err, CHUTE_ECORRUPT, "PNG %s: %s", what, spng_strerror(e));
}

static void ch_png_abort(ch_decoder *d)
{
    if (d->png_ctx) {
        spng_ctx_free(d->png_ctx);
        d->png_ctx = NULL;
    }
}

static int ch_png_begin(ch_decoder *d, uint64_t max_pixels, chute_error *err)
{
    /* One context per image, kept from the header to the pixels. */
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx)
        return ch_err(err, CHUTE_ENOMEM, "out of memory creating a PNG decoder");
    struct spng_ihdr ihdr;
    int e = spng_set_chunk_limits(ctx, CH_PNG_CHUNK_LIMIT, CH_PNG_CACHE_LIMIT);
    if (!e)
        e = spng_set_option(ctx, SPNG_KEEP_UNKNOWN_CHUNKS, 0);
    if (!e)
        e = spng_set_png_buffer(ctx, d->data, d->len);
    if (!e)
        e = spng_get_ihdr(ctx, &ihdr);
    if (e) {
        spng_ctx_free(ctx);
        return png_fail(err, "header", e);
    }
    if ((uint64_t)ihdr.width * ihdr.height > max_pixels) {
        spng_ctx_free(ctx);
        return ch_err(err, CHUTE_ELIMIT, "PNG %ux%u exceeds the limit of %llu pixels", ihdr.width,
                      ihdr.height, (unsigned long long)max_pixels);
    }
    d->png_ctx = ctx;
    d->info.width = ihdr.width;
    d->info.height = ihdr.height;
    d->info.channels = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ? 1
                       : ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ? 2
                       : ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA ? 4
                                                                            : 3;
    return CHUTE_OK;
}

static int ch_png_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                         uint32_t h, ch_buf *buf, ch_image *out, chute_error *err)
{
    (void)denom;
    (void)x;
    (void)w;
    spng_ctx *ctx = d->png_ctx;
    if (!ctx)
        return ch_err(err, CHUTE_EINVAL, "PNG: finish without begin");
    /* Level 0 first (png0.h), only the rows down to the window's bottom
     * (delivered as rows [0, y + h): a window widened upwards, which the
     * finish() contract allows); its scratch rows follow the pixels. */
    size_t px = (size_t)d->info.width * d->info.height * 3;
    uint32_t rows = h && y < d->info.height && h <= d->info.height - y ? y + h : d->info.height;
    if (ch_buf_reserve(buf, px + ch_png0_scratch(d->info.width)) == CHUTE_OK &&
        ch_png0_decode(d->data, d->len, d->info.width, d->info.height, rows, buf->data,
                       (uint8_t *)buf->data + px, 0)) {
        ch_png_abort(d);
        out->pixels = buf->data;
        out->w = d->info.width;
        out->h = rows;
        out->stride = (size_t)d->info.width * 3;
        out->x = out->y = 0;
        out->scaled_w = d->info.width;
        out->scaled_h = d->info.height;
        out->scale_denom = 1;
        return CHUTE_OK;
    }
    size_t need = 0;
    int e = spng_set_image_limits(ctx, d->info.width, d->info.height);
    if (!e)
        e = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &need);
    if (!e && ch_buf_reserve(buf, need) != CHUTE_OK) {
        ch_png_abort(d);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %ux%u PNG", d->info.width,
                      d->info.height);
    }
    if (!e)
        e = spng_decode_image(ctx, buf->data, need, SPNG_FMT_RGB8, 0);
    ch_png_abort(d);
    if (e)
        return png_fail(err, "data", e);
    out->pixels = buf->data;
    out->w = d->info.width;
    out->h = d->info.height;
    out->stride = (size_t)d->info.width * 3;
    out->x = out->y = 0;
    out->scaled_w = d->info.width;
    out->scaled_h = d->info.height;
    out->scale_denom = 1;
    return CHUTE_OK;
}

#else

static void ch_png_abort(ch_decoder *d) { (void)d; }

static int ch_png_begin(ch_decoder *d, uint64_t max_pixels, chute_error *err)
{
    (void)d;
    (void)max_pixels;
    return ch_err(err, CHUTE_EUNSUPPORTED, "PNG support was not built in (libspng missing)");
}

static int ch_png_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                         uint32_t h, ch_buf *buf, ch_image *out, chute_error *err)
{
    (void)denom;
    (void)x;
    (void)y;
    (void)w;
    (void)h;
    (void)d;
    (void)buf;
    (void)out;
    (void)denom;
    (void)x;
    (void)y;
    (void)w;
    (void)h;
    return ch_err(err, CHUTE_EUNSUPPORTED, "PNG support was not built in (libspng missing)");
}

#endif

/* No windowed decode: finish() decodes the whole image. */
const ch_decoder_ops ch_png_ops = {
    .name = "PNG",
    .format = CH_IMG_PNG,
    .caps = 0,
    .sniff = ch_png_sniff,
    .begin = ch_png_begin,
    .finish = ch_png_finish,
    .abort = ch_png_abort,
};
