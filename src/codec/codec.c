/*
 * codec.c — the decoder registry: format sniffing and dispatch.
 *
 * Why a registry: a decoder is one file defining a ch_decoder_ops (name,
 * public format id, capabilities, sniff/begin/finish/abort) and one line
 * in k_decoders below; nothing else in chute names a format.  The loader
 * and pack ask info.caps whether a decoder windows or DCT-scales instead
 * of testing for JPEG.  Sniffing tries the decoders in registry order;
 * their magics are disjoint, so the order only matters for speed (JPEG,
 * the common case, first).
 */
#include "codec_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registry: one line per decoder. */
static const ch_decoder_ops *const k_decoders[] = {
    &ch_jpeg_ops,
    &ch_png_ops,
    &ch_bmp_ops,
    &ch_raw_ops,
};
enum { N_DECODERS = sizeof k_decoders / sizeof k_decoders[0] };

static const ch_decoder_ops *find(const void *data, size_t len)
{
    if (!data)
        return NULL;
    for (size_t i = 0; i < N_DECODERS; i++)
        if (k_decoders[i]->sniff(data, len))
            return k_decoders[i];
    return NULL;
}

int ch_sniff(const void *data, size_t len)
{
    const ch_decoder_ops *ops = find(data, len);
    return ops ? ops->format : CH_IMG_UNKNOWN;
}

const char *ch_format_name(int format)
{
    for (size_t i = 0; i < N_DECODERS; i++)
        if (k_decoders[i]->format == format)
            return k_decoders[i]->name;
    return NULL;
}

const char *ch_decoder_names(char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_DECODERS && n < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == N_DECODERS ? " or " : ", ";
        int k = snprintf(buf + n, cap - n, "%s%s", sep, k_decoders[i]->name);
        n = k < 0 ? cap : n + (size_t)k;
    }
    return buf;
}

const char *ch_sniff_name(const void *data, size_t len)
{
    const uint8_t *p = data;
    const ch_decoder_ops *ops = find(data, len);
    if (ops)
        return ops->name;
    if (len >= 2 && p[0] == 'B' && p[1] == 'M')
        return "BMP"; /* too short or an unknown DIB header */
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
    if (!d)
        return;
    if (d->ops && d->ops->abort)
        d->ops->abort(d);
    d->ops = NULL;
}

void ch_decoder_destroy(ch_decoder *d)
{
    if (!d)
        return;
    ch_decoder_abort(d);
    ch_jpeg_destroy(d);
    free(d);
}

int ch_decoder_begin(ch_decoder *d, const void *data, size_t len, uint64_t max_pixels,
                     ch_image_info *out, chute_error *err)
{
    ch_decoder_abort(d);
    d->data = data;
    d->len = len;
    memset(&d->info, 0, sizeof d->info);
    const ch_decoder_ops *ops = find(data, len);
    if (!ops) {
        char names[CH_DECODER_NAMES_MAX];
        return ch_err(err, CHUTE_EFORMAT, "not a %s image (%s)",
                      ch_decoder_names(names, sizeof names), ch_sniff_name(data, len));
    }
    d->ops = ops;
    int rc = ops->begin(d, max_pixels, err);
    if (rc != CHUTE_OK) {
        ch_decoder_abort(d);
        return rc;
    }
    d->info.kind = ops->format;
    d->info.caps = ops->caps;
    *out = d->info;
    return CHUTE_OK;
}

void ch_decoder_scaled_size(const ch_decoder *d, uint32_t denom, uint32_t *w, uint32_t *h)
{
    if (d->ops && d->ops->scaled_size) {
        d->ops->scaled_size(d, denom, w, h);
    } else {
        *w = d->info.width;
        *h = d->info.height;
    }
}

int ch_decoder_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                      uint32_t h, ch_buf *buf, ch_image *out, chute_error *err)
{
    const ch_decoder_ops *ops = d->ops;
    if (!ops)
        return ch_err(err, CHUTE_EINVAL, "decoder: finish without a successful begin");
    if (!(ops->caps & CH_DEC_DCT_SCALE))
        denom = 1;
    int rc = ops->finish(d, denom, x, y, w, h, buf, out, err);
    d->ops = NULL;
    return rc;
}
