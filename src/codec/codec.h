/*
 * codec.h — turning encoded bytes into RGB pixels.
 *
 * Decoding is split in two so the caller can choose what to decode after
 * seeing the image's size: begin() parses the header, then the caller
 * computes its crop window and picks a DCT scale, then finish() decodes
 * only that window (JPEG: libjpeg-turbo's crop/skip-scanline calls), at
 * 1/D of the size when D > 1.  PNG has no such shortcut and is decoded
 * whole.  Formats are a registry (codec.c, one line each: JPEG, PNG, BMP,
 * chute's raw pixel record); what a format can do is in info.caps.
 *
 * A ch_decoder is one worker's reusable state (libjpeg handle, message
 * buffer); it is not thread-safe and must not be shared.  Pixels go into
 * the caller's ch_buf, which grows to the largest window seen and then
 * stays, so steady state allocates nothing of ours.
 */
#ifndef CHUTE_CODEC_H
#define CHUTE_CODEC_H

#include "../common/common.h"

/* Format ids: chute_image_header's out_format (stable, public). */
enum { CH_IMG_UNKNOWN = 0, CH_IMG_JPEG = 1, CH_IMG_PNG = 2, CH_IMG_BMP = 3, CH_IMG_RAW = 4 };

/* Capabilities of a decoder (ch_image_info.caps). */
enum {
    CH_DEC_CROP_WINDOW = 1u << 0, /* finish() decodes only the window */
    CH_DEC_DCT_SCALE = 1u << 1    /* finish() can decode at 1/2, 1/4, 1/8 */
};

/* Which decoder a byte string needs, from its magic (0 if none). */
int ch_sniff(const void *data, size_t len);
/* Name of the format detected from magic: a registered decoder's ("JPEG"),
 * else an unsupported one's ("WebP", ...), "empty file" or "unknown data". */
const char *ch_sniff_name(const void *data, size_t len);
/* Name of a format id ("JPEG"), NULL for one no decoder has. */
const char *ch_format_name(int format);
/* "JPEG, PNG, BMP or CHRAW": the registered formats, for messages;
 * writes buf (CH_DECODER_NAMES_MAX bytes suffice) and returns it. */
enum { CH_DECODER_NAMES_MAX = 128 };
const char *ch_decoder_names(char *buf, size_t cap);

typedef struct ch_image_info {
    uint32_t width, height;
    uint32_t channels;        /* in the file: 1 grey, 3 colour, 4 CMYK/RGBA */
    int kind;                 /* CH_IMG_* */
    unsigned caps;            /* CH_DEC_* of its decoder */
} ch_image_info;

/* Decoded RGB8 window: pixel (0,0) sits at (x, y) of the image scaled by
 * 1/scale_denom, whose size is scaled_w x scaled_h. */
typedef struct ch_image {
    const uint8_t *pixels;
    uint32_t w, h;
    size_t stride;            /* bytes per row */
    uint32_t x, y;
    uint32_t scaled_w, scaled_h;
    uint32_t scale_denom;
} ch_image;

typedef struct ch_decoder ch_decoder;

int ch_decoder_create(ch_decoder **out);
void ch_decoder_destroy(ch_decoder *d);

/* Parse the header.  Fails with CHUTE_ELIMIT (before any pixel buffer is
 * allocated) if width*height exceeds max_pixels. */
int ch_decoder_begin(ch_decoder *d, const void *data, size_t len, uint64_t max_pixels,
                     ch_image_info *out, chute_error *err);

/* Scaled size of the image for a DCT scale denominator in {1,2,4,8}
 * (the full size for a decoder without CH_DEC_DCT_SCALE). */
void ch_decoder_scaled_size(const ch_decoder *d, uint32_t denom, uint32_t *w, uint32_t *h);

/* Decode the window [x, x+w) x [y, y+h) of the image scaled by 1/denom
 * (denom > 1 only with CH_DEC_DCT_SCALE).  The decoder may widen the
 * window (to an iMCU boundary, or to the whole image without
 * CH_DEC_CROP_WINDOW); `out` says what it delivered, which always contains
 * the requested window.  `pixels` points into `buf`, or into the encoded
 * data (raw records: a zero-copy view, valid while that data is). */
int ch_decoder_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                      uint32_t h, ch_buf *buf, ch_image *out, chute_error *err);

/* Release per-image state if finish() is not called (error paths). */
void ch_decoder_abort(ch_decoder *d);

#endif
