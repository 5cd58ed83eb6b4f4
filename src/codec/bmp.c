/*
 * bmp.c — Windows BMP, hand-written (Debian has no small BMP library we
 * would trust more than 200 lines we test against PIL).
 *
 * What is read: a BITMAPFILEHEADER followed by a BITMAPCOREHEADER (OS/2
 * 1.x, 12 bytes) or a BITMAPINFOHEADER and its V2..V5 extensions (40, 52,
 * 56, 108, 124 bytes); 1-, 4- and 8-bit palettized, 24-bit BGR and 32-bit
 * BI_RGB (BGRX, the fourth byte ignored as PIL ignores it), and 32-bit
 * BI_BITFIELDS whose masks are whole bytes (every mask PIL's writer and
 * the common tools emit).  Rows are stored bottom-up, or top-down when
 * the height is negative, each padded to 4 bytes.  Everything else —
 * RLE4/RLE8, JPEG- or PNG-in-BMP, 16-bit, odd masks, OS/2 2.x headers —
 * fails with CHUTE_EUNSUPPORTED and a message naming what it is.
 *
 * Trust nothing in the header: sizes are checked before they are used
 * (64-bit row arithmetic, the palette and every stored row inside the
 * buffer, the pixel data not overlapping the headers), and width*height
 * is held against max_pixels before anything is allocated.  The data
 * must hold every row (padding included): a truncated BMP is corrupt, as
 * PIL fails it rather than decode part.
 *
 * Windowed decode: BMP rows are at fixed offsets, so finish() converts
 * only the rows and columns of the window (CH_DEC_CROP_WINDOW).
 *
 * Palette entries the file does not define are grey (i, i, i), which is
 * what Pillow's palette holds there, so out-of-range indices match PIL.
 */
#include "codec_impl.h"

#include <string.h>

enum {
    BMP_FILE_HDR = 14,
    BI_RGB = 0,
    BI_RLE8 = 1,
    BI_RLE4 = 2,
    BI_BITFIELDS = 3,
    BI_JPEG = 4,
    BI_PNG = 5,
    BI_ALPHABITFIELDS = 6
};

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int known_header(uint32_t hs)
{
    return hs == 12 || hs == 40 || hs == 52 || hs == 56 || hs == 64 || hs == 108 || hs == 124;
}

static int ch_bmp_sniff(const uint8_t *p, size_t len)
{
    return len >= BMP_FILE_HDR + 4 && p[0] == 'B' && p[1] == 'M' &&
           known_header(rd32(p + BMP_FILE_HDR));
}

static const char *compression_name(uint32_t c)
{
    switch (c) {
    case BI_RLE8: return "RLE8";
    case BI_RLE4: return "RLE4";
    case BI_JPEG: return "JPEG-in-BMP";
    case BI_PNG: return "PNG-in-BMP";
    case BI_ALPHABITFIELDS: return "BI_ALPHABITFIELDS";
    default: return "unknown";
    }
}

/* Bit offset of a whole-byte mask (0xFF << 8k), or -1. */
static int byte_mask_shift(uint32_t m)
{
    for (int k = 0; k < 4; k++)
        if (m == 0xFFu << (8 * k))
            return 8 * k;
    return -1;
}

static int ch_bmp_begin(ch_decoder *d, uint64_t max_pixels, chute_error *err)
{
    const uint8_t *p = d->data;
    size_t len = d->len;
    ch_bmp_state *b = &d->bmp;
    uint32_t off = rd32(p + 10), hs = rd32(p + BMP_FILE_HDR);
    if ((uint64_t)BMP_FILE_HDR + hs > len)
        return ch_err(err, CHUTE_ECORRUPT,
                      "BMP header: the %u-byte info header runs past the end of the %zu-byte file",
                      hs, len);
    if (hs == 64)
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "BMP with an OS/2 2.x (64-byte) header is not supported");
    int64_t w, h;
    uint32_t bpp, comp = BI_RGB, ncolors = 0, entry;
    if (hs == 12) {
        w = rd16(p + 18);
        h = rd16(p + 20);
        bpp = rd16(p + 24);
        entry = 3;
    } else {
        w = (int32_t)rd32(p + 18);
        h = (int32_t)rd32(p + 22);
        bpp = rd16(p + 28);
        comp = rd32(p + 30);
        ncolors = rd32(p + 46);
        entry = 4;
    }
    if (comp != BI_RGB && comp != BI_BITFIELDS)
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "BMP compression %s (%u) is not supported (only uncompressed BI_RGB and "
                      "BI_BITFIELDS)",
                      compression_name(comp), comp);
    if (w <= 0 || h == 0)
        return ch_err(err, CHUTE_ECORRUPT, "BMP header: bad image size %lldx%lld", (long long)w,
                      (long long)h);
    b->top_down = h < 0;
    if (h < 0)
        h = -h; /* int64: no overflow at INT32_MIN */
    if (bpp == 16)
        return ch_err(err, CHUTE_EUNSUPPORTED, "16-bit BMP is not supported");
    if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 24 && bpp != 32)
        return ch_err(err, CHUTE_ECORRUPT, "BMP header: %u bits per pixel", bpp);
    if (comp == BI_BITFIELDS && bpp != 32)
        return ch_err(err, CHUTE_EUNSUPPORTED, "BMP BI_BITFIELDS at %u bits per pixel is not "
                      "supported (only 32)", bpp);
    if ((uint64_t)w * (uint64_t)h > max_pixels)
        return ch_err(err, CHUTE_ELIMIT, "BMP %lldx%lld exceeds the limit of %llu pixels",
                      (long long)w, (long long)h, (unsigned long long)max_pixels);

    /* Where the headers end: masks follow a 40-byte header. */
    uint64_t hdr_end = (uint64_t)BMP_FILE_HDR + hs;
    b->bpp = bpp;
    b->shift[0] = 16;
    b->shift[1] = 8;
    b->shift[2] = 0;
    if (comp == BI_BITFIELDS) {
        if (hs == 40)
            hdr_end += 12;
        if (hdr_end > len)
            return ch_err(err, CHUTE_ECORRUPT, "BMP header: bit masks past the end of the file");
        uint32_t m[3] = {rd32(p + 54), rd32(p + 58), rd32(p + 62)};
        for (int k = 0; k < 3; k++) {
            int s = byte_mask_shift(m[k]);
            if (s < 0 || (k > 0 && m[k] == m[0]) || (k == 2 && m[2] == m[1]))
                return ch_err(err, CHUTE_EUNSUPPORTED,
                              "BMP bit masks R=%08x G=%08x B=%08x are not supported (only one "
                              "whole byte per colour)",
                              m[0], m[1], m[2]);
            b->shift[k] = (uint32_t)s;
        }
    }
    if (bpp <= 8) {
        uint32_t max = 1u << bpp;
        if (ncolors > 65536)
            return ch_err(err, CHUTE_ECORRUPT, "BMP header: palette of %u colours", ncolors);
        uint32_t n = ncolors && ncolors < max ? ncolors : max;
        uint64_t pal_end = hdr_end + (uint64_t)n * entry;
        if (pal_end > len)
            return ch_err(err, CHUTE_ECORRUPT,
                          "BMP palette: %u entries at offset %llu run past the end of the "
                          "%zu-byte file",
                          n, (unsigned long long)hdr_end, len);
        for (uint32_t i = 0; i < 256; i++)
            b->palette[i][0] = b->palette[i][1] = b->palette[i][2] = (uint8_t)i;
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *e = p + hdr_end + (size_t)i * entry;
            b->palette[i][0] = e[2];
            b->palette[i][1] = e[1];
            b->palette[i][2] = e[0];
        }
        hdr_end = pal_end;
    }
    if (off < hdr_end || off > len)
        return ch_err(err, CHUTE_ECORRUPT,
                      "BMP header: pixel data offset %u is outside [%llu, %zu] (the headers end "
                      "at %llu, the file at %zu)",
                      off, (unsigned long long)hdr_end, len, (unsigned long long)hdr_end, len);
    uint64_t stride = ((uint64_t)w * bpp + 31) / 32 * 4; /* w < 2^31, bpp <= 32: no overflow */
    uint64_t avail = len - off;
    if (stride > avail / (uint64_t)h)
        return ch_err(err, CHUTE_ECORRUPT,
                      "BMP data: %lld rows of %llu bytes from offset %u do not fit in the "
                      "%zu-byte file (truncated?)",
                      (long long)h, (unsigned long long)stride, off, len);
    b->pix_off = off;
    b->stride = (size_t)stride;
    d->info.width = (uint32_t)w;
    d->info.height = (uint32_t)h;
    d->info.channels = 3;
    return CHUTE_OK;
}

static int ch_bmp_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                         uint32_t h, ch_buf *buf, ch_image *out, chute_error *err)
{
    (void)denom;
    const ch_bmp_state *b = &d->bmp;
    uint32_t W = d->info.width, H = d->info.height;
    if (!ch_window_ok(x, y, w, h, W, H))
        return ch_err(err, CHUTE_EINVAL, "BMP window %ux%u+%u+%u outside the %ux%u image", w, h, x,
                      y, W, H);
    size_t ostride = (size_t)w * 3;
    if (ch_buf_reserve(buf, ostride * h) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %ux%u BMP window", w, h);
    for (uint32_t r = 0; r < h; r++) {
        uint32_t iy = y + r;
        size_t fr = b->top_down ? iy : H - 1 - iy;
        const uint8_t *src = d->data + b->pix_off + fr * b->stride;
        uint8_t *dst = buf->data + (size_t)r * ostride;
        switch (b->bpp) {
        case 24:
            for (const uint8_t *s = src + (size_t)x * 3, *e = s + (size_t)w * 3; s < e;
                 s += 3, dst += 3) {
                dst[0] = s[2];
                dst[1] = s[1];
                dst[2] = s[0];
            }
            break;
        case 32:
            for (const uint8_t *s = src + (size_t)x * 4, *e = s + (size_t)w * 4; s < e;
                 s += 4, dst += 3) {
                uint32_t v = rd32(s);
                dst[0] = (uint8_t)(v >> b->shift[0]);
                dst[1] = (uint8_t)(v >> b->shift[1]);
                dst[2] = (uint8_t)(v >> b->shift[2]);
            }
            break;
        default: /* 1, 4, 8: palette indices, most significant bits first */
            for (uint32_t c = x; c < x + w; c++, dst += 3) {
                size_t bit = (size_t)c * b->bpp;
                unsigned idx = (src[bit >> 3] >> (8 - b->bpp - (bit & 7))) & ((1u << b->bpp) - 1);
                memcpy(dst, b->palette[idx], 3);
            }
            break;
        }
    }
    out->pixels = buf->data;
    out->w = w;
    out->h = h;
    out->stride = ostride;
    out->x = x;
    out->y = y;
    out->scaled_w = W;
    out->scaled_h = H;
    out->scale_denom = 1;
    return CHUTE_OK;
}

const ch_decoder_ops ch_bmp_ops = {
    .name = "BMP",
    .format = CH_IMG_BMP,
    .caps = CH_DEC_CROP_WINDOW,
    .sniff = ch_bmp_sniff,
    .begin = ch_bmp_begin,
    .finish = ch_bmp_finish,
};
