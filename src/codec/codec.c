/*
 * codec.c — format sniffing and dispatch to the JPEG and PNG decoders.
 */
#include "codec_impl.h"

#include <stdlib.h>
#include <string.h>

int ch_sniff(const void *data, size_t len)
{
    const uint8_t *p = data;
    if (len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        return CH_IMG_JPEG;
    if (len >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
        return CH_IMG_PNG;
    return CH_IMG_UNKNOWN;
}

const char *ch_sniff_name(const void *data, size_t len)
{
    const uint8_t *p = data;
    switch (ch_sniff(data, len)) {
    case CH_IMG_JPEG: return "JPEG";
    case CH_IMG_PNG: return "PNG";
    default: break;
    }
    if (len >= 2 && p[0] == 'B' && p[1] == 'M')
        return "BMP";
    if (len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
        return "WebP";
    if (len >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0))
        return "TIFF";
    if (len >= 2 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6')
        return "PNM";
    if (len >= 6 && memcmp(p, "GIF8", 4) == 0)
        return "GIF";
    if (len == 0)
        return "empty file";
    return "unknown data";
}

int ch_decoder_create(ch_decoder **out)
{
    ch_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return CHUTE_ENOMEM;
    *out = d;
    return CHUTE_OK;
}

void ch_decoder_abort(ch_decoder *d)
{
    if (d && d->kind == CH_IMG_JPEG)
        ch_jpeg_abort(d);
    if (d)
        ch_png_abort(d);
    if (d)
        d->kind = CH_IMG_UNKNOWN;
}

void ch_decoder_destroy(ch_decoder *d)
{
    if (!d)
        return;
    ch_decoder_abort(d);
    if (d->jpeg_started >= 0 && d->cinfo.mem)
        jpeg_destroy_decompress(&d->cinfo);
    free(d);
}

int ch_decoder_begin(ch_decoder *d, const void *data, size_t len, uint64_t max_pixels,
                     ch_image_info *out, chute_error *err)
{
    ch_decoder_abort(d);
    d->data = data;
    d->len = len;
    d->kind = ch_sniff(data, len);
    memset(&d->info, 0, sizeof d->info);
    int rc;
    switch (d->kind) {
    case CH_IMG_JPEG: rc = ch_jpeg_begin(d, max_pixels, err); break;
    case CH_IMG_PNG: rc = ch_png_begin(d, max_pixels, err); break;
    default:
        rc = ch_err(err, CHUTE_EFORMAT, "not a JPEG or PNG image (%s)", ch_sniff_name(data, len));
        break;
    }
    if (rc != CHUTE_OK) {
        ch_decoder_abort(d);
        return rc;
    }
    d->info.kind = d->kind;
    *out = d->info;
    return CHUTE_OK;
}

void ch_decoder_scaled_size(const ch_decoder *d, uint32_t denom, uint32_t *w, uint32_t *h)
{
    if (d->kind == CH_IMG_JPEG) {
        ch_jpeg_scaled_size(d, denom, w, h);
    } else {
        *w = d->info.width;
        *h = d->info.height;
    }
}

int ch_decoder_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                      uint32_t h, ch_buf *buf, ch_image *out, chute_error *err)
{
    int rc;
    if (d->kind == CH_IMG_JPEG)
        rc = ch_jpeg_finish(d, denom, x, y, w, h, buf, out, err);
    else if (d->kind == CH_IMG_PNG)
        rc = ch_png_finish(d, buf, out, err);
    else
        rc = ch_err(err, CHUTE_EINVAL, "decoder: finish without a successful begin");
    d->kind = CH_IMG_UNKNOWN;
    return rc;
}
