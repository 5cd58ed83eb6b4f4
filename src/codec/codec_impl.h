/* codec_impl.h — private to src/codec: per-format decoder state. */
#ifndef CHUTE_CODEC_IMPL_H
#define CHUTE_CODEC_IMPL_H

#include "codec.h"

#include <setjmp.h>
#include <stdio.h>
#include <jpeglib.h>

typedef struct ch_jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;             /* corrupt-data warnings seen in this image */
    int limit;                /* the failure was one of our limits (scans, memory) */
    char msg[JMSG_LENGTH_MAX];
} ch_jpeg_err;

struct ch_decoder {
    int kind;                 /* of the image in progress */
    ch_image_info info;
    const uint8_t *data;
    size_t len;
    /* JPEG */
    struct jpeg_decompress_struct cinfo;
    ch_jpeg_err jerr;
    struct jpeg_progress_mgr jprogress; /* enforces the scan limit */
    int jpeg_started;         /* header read, decompress not finished */
    int adobe_inverted;
    /* PNG: the libspng context of the image in progress (begin -> finish) */
    void *png_ctx;
};

int ch_jpeg_begin(ch_decoder *d, uint64_t max_pixels, chute_error *err);
int ch_jpeg_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                   ch_buf *buf, ch_image *out, chute_error *err);
void ch_jpeg_scaled_size(const ch_decoder *d, uint32_t denom, uint32_t *w, uint32_t *h);
void ch_jpeg_abort(ch_decoder *d);

int ch_png_begin(ch_decoder *d, uint64_t max_pixels, chute_error *err);
void ch_png_abort(ch_decoder *d);
int ch_png_finish(ch_decoder *d, ch_buf *buf, ch_image *out, chute_error *err);

#endif
