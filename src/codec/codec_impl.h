/*
 * codec_impl.h — private to src/codec: the decoder registry's ops table
 * and the per-format decoder state.
 *
 * Each format is one file (jpeg.c, png.c, bmp.c, raw.c) that defines a
 * const ch_decoder_ops; codec.c lists them in its one registry array and
 * dispatches through it.  See docs/DESIGN.md, "Adding a decoder".
 */
#ifndef CHUTE_CODEC_IMPL_H
#define CHUTE_CODEC_IMPL_H

#include "codec.h"

#include <setjmp.h>
#include <stdio.h>
#include <jpeglib.h>

/* One decoder.  begin() parses the header of d->data/d->len, fills
 * d->info (width, height, channels) and fails with CHUTE_ELIMIT before
 * allocating pixels if width*height > max_pixels.  finish() decodes the
 * window (or, without CH_DEC_CROP_WINDOW, the whole image) and always
 * ends the image; abort() ends it without decoding (may be called when no
 * image is in progress).  scaled_size is NULL unless CH_DEC_DCT_SCALE. */
typedef struct ch_decoder_ops {
    const char *name;         /* "JPEG": messages, inspect */
    int format;               /* CH_IMG_*: the public format id */
    unsigned caps;            /* CH_DEC_* */
    int (*sniff)(const uint8_t *p, size_t len);
    int (*begin)(ch_decoder *d, uint64_t max_pixels, chute_error *err);
    void (*scaled_size)(const ch_decoder *d, uint32_t denom, uint32_t *w, uint32_t *h);
    int (*finish)(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                  ch_buf *buf, ch_image *out, chute_error *err);
    void (*abort)(ch_decoder *d);
} ch_decoder_ops;

extern const ch_decoder_ops ch_jpeg_ops, ch_png_ops, ch_bmp_ops, ch_raw_ops;

typedef struct ch_jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;             /* corrupt-data warnings seen in this image */
    int limit;                /* the failure was one of our limits (scans, memory) */
    char msg[JMSG_LENGTH_MAX];
} ch_jpeg_err;

/* BMP geometry from the header, for finish(). */
typedef struct ch_bmp_state {
    size_t pix_off;           /* first byte of the first stored row */
    size_t stride;            /* bytes per stored row, padded to 4 */
    uint32_t bpp;             /* 1, 4, 8, 24, 32 */
    int top_down;             /* rows stored top first (negative height) */
    uint32_t shift[3];        /* 32-bit: bit offset of R, G, B bytes */
    uint8_t palette[256][3];  /* RGB; entries past the file's are black */
} ch_bmp_state;

struct ch_decoder {
    const ch_decoder_ops *ops; /* of the image in progress, NULL if none */
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
    /* BMP */
    ch_bmp_state bmp;
    /* raw: where the pixels start */
    size_t raw_off;
};

/* Teardown of a format's long-lived state at ch_decoder_destroy. */
void ch_jpeg_destroy(ch_decoder *d);

/* A window [x, x+w) x [y, y+h) inside a W x H image? */
static inline int ch_window_ok(uint32_t x, uint32_t y, uint32_t w, uint32_t h, uint32_t W,
                               uint32_t H)
{
    return w && h && x < W && y < H && w <= W - x && h <= H - y;
}

#endif
