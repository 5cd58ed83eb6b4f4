/*
 * raw.c — chute's raw pixel record (CHRAW): already-decoded pixels with a
 * 16-byte header, what `pack --raw` writes for datasets where decode is
 * the bottleneck and disk is cheap.  Layout (docs/FORMAT.md, "Raw pixel
 * records"), little-endian:
 *
 *   0  "CHRAW"   5 bytes of magic
 *   5  version   u8, 1
 *   6  channels  u8: 1 grey, 3 RGB, 4 RGBA (alpha dropped, as PIL's
 *                convert("RGB") drops it)
 *   7  dtype     u8: 0 = uint8 (the only one in version 1)
 *   8  width     u32
 *  12  height    u32
 *  16  pixels    height rows of width*channels bytes, top row first,
 *                no padding; the record ends exactly there
 *
 * Decoding is no work: an RGB window is a zero-copy view into the record
 * (out->pixels points into the encoded data, out->stride is the record's
 * row), grey and RGBA are expanded for the window only.  The size is
 * checked against max_pixels and against the record's length (exact, in
 * 64-bit arithmetic) in begin().
 */
#include "codec_impl.h"

#include <string.h>

enum { RAW_HDR = 16, RAW_VERSION = 1, RAW_DTYPE_U8 = 0 };

static int ch_raw_sniff(const uint8_t *p, size_t len)
{
    return len >= 5 && memcmp(p, "CHRAW", 5) == 0;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int ch_raw_begin(ch_decoder *d, uint64_t max_pixels, chute_error *err)
{
    const uint8_t *p = d->data;
    if (d->len < RAW_HDR)
        return ch_err(err, CHUTE_ECORRUPT, "CHRAW record of %zu bytes is shorter than its %d-byte "
                      "header", d->len, RAW_HDR);
    unsigned version = p[5], channels = p[6], dtype = p[7];
    uint32_t w = rd32(p + 8), h = rd32(p + 12);
    if (version != RAW_VERSION)
        return ch_err(err, CHUTE_EUNSUPPORTED, "CHRAW version %u is not supported (only %d)",
                      version, RAW_VERSION);
    if (dtype != RAW_DTYPE_U8)
        return ch_err(err, CHUTE_EUNSUPPORTED, "CHRAW dtype %u is not supported (only 0 = uint8)",
                      dtype);
    if (channels != 1 && channels != 3 && channels != 4)
        return ch_err(err, CHUTE_ECORRUPT, "CHRAW header: %u channels (1, 3 or 4)", channels);
    if (w == 0 || h == 0)
        return ch_err(err, CHUTE_ECORRUPT, "CHRAW header: bad image size %ux%u", w, h);
    uint64_t npix = (uint64_t)w * h; /* < 2^64: both are 32-bit */
    if (npix > max_pixels)
        return ch_err(err, CHUTE_ELIMIT, "CHRAW %ux%u exceeds the limit of %llu pixels", w, h,
                      (unsigned long long)max_pixels);
    /* npix * channels overflows only past 2^62 pixels; compare by division. */
    uint64_t body = d->len - RAW_HDR;
    if (npix > body / channels || body != npix * channels)
        return ch_err(err, CHUTE_ECORRUPT,
                      "CHRAW %ux%ux%u: the record holds %llu pixel bytes after its header, not "
                      "width*height*channels",
                      w, h, channels, (unsigned long long)body);
    d->raw_off = RAW_HDR;
    d->info.width = w;
    d->info.height = h;
    d->info.channels = channels;
    return CHUTE_OK;
}

static int ch_raw_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                         uint32_t h, ch_buf *buf, ch_image *out, chute_error *err)
{
    (void)denom;
    uint32_t W = d->info.width, H = d->info.height, ch = d->info.channels;
    if (!ch_window_ok(x, y, w, h, W, H))
        return ch_err(err, CHUTE_EINVAL, "CHRAW window %ux%u+%u+%u outside the %ux%u image", w, h,
                      x, y, W, H);
    size_t rstride = (size_t)W * ch;
    const uint8_t *first = d->data + d->raw_off + (size_t)y * rstride + (size_t)x * ch;
    if (ch == 3) {
        out->pixels = first; /* zero copy */
        out->stride = rstride;
    } else {
        size_t ostride = (size_t)w * 3;
        if (ch_buf_reserve(buf, ostride * h) != CHUTE_OK)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for a %ux%u CHRAW window", w, h);
        for (uint32_t r = 0; r < h; r++) {
            const uint8_t *s = first + (size_t)r * rstride;
            uint8_t *o = buf->data + (size_t)r * ostride;
            for (uint32_t c = 0; c < w; c++, s += ch, o += 3) {
                o[0] = s[0];
                o[1] = s[ch == 1 ? 0 : 1];
                o[2] = s[ch == 1 ? 0 : 2];
            }
        }
        out->pixels = buf->data;
        out->stride = ostride;
    }
    out->w = w;
    out->h = h;
    out->x = x;
    out->y = y;
    out->scaled_w = W;
    out->scaled_h = H;
    out->scale_denom = 1;
    return CHUTE_OK;
}

const ch_decoder_ops ch_raw_ops = {
    .name = "CHRAW",
    .format = CH_IMG_RAW,
    .caps = CH_DEC_CROP_WINDOW,
    .sniff = ch_raw_sniff,
    .begin = ch_raw_begin,
    .finish = ch_raw_finish,
};
