/*
 * pack_resize.h — pack-time image transforms (pack --max-side, --raw):
 * a Pillow-exact LANCZOS resize, libjpeg-turbo re-encoding, and CHRAW
 * record writing.  One ch_pr_scratch per packing thread; not thread-safe.
 */
#ifndef CHUTE_PACK_RESIZE_H
#define CHUTE_PACK_RESIZE_H

#include "../common/common.h"

enum { CH_PR_RAW_HEADER = 16 };

typedef struct ch_pr_scratch {
    ch_buf kx, ky;            /* filter taps per axis */
    ch_buf mid, out;          /* after the horizontal pass; after both */
    ch_buf enc;               /* the new record, swapped into the item */
} ch_pr_scratch;

void ch_pr_scratch_free(ch_pr_scratch *s);

/* Size after capping the shorter side at max_side (torchvision's
 * Resize(max_side) arithmetic); returns 1 if that is a change, 0 if the
 * image is kept (max_side 0, or shorter side <= max_side). */
int ch_pr_target(uint32_t w, uint32_t h, uint32_t max_side, uint32_t *ow, uint32_t *oh);

/* Resize RGB8 w x h (rows `stride` apart) to ow x oh (each <= the input's
 * side) with Pillow's LANCZOS; *out_pix points into s (rows ow*3 apart). */
int ch_pr_resize(const uint8_t *src, size_t stride, uint32_t w, uint32_t h, uint32_t ow,
                 uint32_t oh, ch_pr_scratch *s, const uint8_t **out_pix, chute_error *err);

/* A CHRAW record (RGB, uint8) of the pixels into dst; CHUTE_ELIMIT if it
 * would be over max_bytes (checked before allocating). */
int ch_pr_raw_record(const uint8_t *pix, size_t stride, uint32_t w, uint32_t h,
                     uint64_t max_bytes, ch_buf *dst, size_t *out_len, chute_error *err);

/* A baseline JPEG (quality 1..100, 4:2:0, optimised Huffman) into dst;
 * CHUTE_ELIMIT if it is over max_bytes. */
int ch_pr_jpeg(const uint8_t *pix, size_t stride, uint32_t w, uint32_t h, int quality,
               uint64_t max_bytes, ch_buf *dst, size_t *out_len, chute_error *err);

#endif
