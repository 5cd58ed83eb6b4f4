/*
 * probe.c — the public one-image calls: header-only inspection and a full
 * decode check, through the same decoder the pipeline uses.
 */
#include "codec.h"

int chute_image_header(const void *data, size_t len, uint32_t *out_w, uint32_t *out_h,
                       uint32_t *out_channels, int *out_format, chute_error *err)
{
    if (!data && len)
        return ch_err(err, CHUTE_EINVAL, "chute_image_header: no data");
    ch_decoder *dec = NULL;
    if (ch_decoder_create(&dec) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ch_image_info info;
    int rc = ch_decoder_begin(dec, data, len, UINT64_MAX, &info, err);
    if (rc == CHUTE_OK) {
        if (out_w)
            *out_w = info.width;
        if (out_h)
            *out_h = info.height;
        if (out_channels)
            *out_channels = info.channels;
        if (out_format)
            *out_format = info.kind;
    }
    ch_decoder_destroy(dec);
    return rc;
}

int chute_probe_image(const void *data, size_t len, uint64_t max_pixels, uint32_t *out_w,
                      uint32_t *out_h, uint32_t *out_channels, chute_error *err)
{
    if (!data && len)
        return ch_err(err, CHUTE_EINVAL, "chute_probe_image: no data");
    if (!max_pixels)
        max_pixels = 64ull << 20;
    ch_decoder *dec = NULL;
    if (ch_decoder_create(&dec) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ch_buf pix = {0};
    ch_image_info info;
    int rc = ch_decoder_begin(dec, data, len, max_pixels, &info, err);
    if (rc == CHUTE_OK) {
        ch_image img;
        rc = ch_decoder_finish(dec, 1, 0, 0, info.width, info.height, &pix, &img, err);
    }
    if (rc == CHUTE_OK) {
        if (out_w)
            *out_w = info.width;
        if (out_h)
            *out_h = info.height;
        if (out_channels)
            *out_channels = info.channels;
    }
    ch_buf_free(&pix);
    ch_decoder_destroy(dec);
    return rc;
}
