/*
 * pack_resize.c — what `pack --max-side N` and `pack --raw` do to one
 * image: resize once, at pack time, so every later epoch decodes a small
 * JPEG (or no JPEG at all) instead of the original.
 *
 * The filter is PIL's LANCZOS (a = 3, support widened by the downscale
 * factor, so it antialiases), computed the way Pillow computes it:
 * coefficients in double, normalised, rounded to 22-bit fixed point, the
 * horizontal pass first, each pass rounded and clamped to uint8.  That is
 * deliberate: the reference the tests hold this code to is Pillow's own
 * Image.resize(..., LANCZOS), so the two should agree to the last level,
 * and a pre-resized dataset is what a user who ran a Pillow resize script
 * would have made.  Lanczos rather than the loader's bilinear because
 * this resize happens once and its result is resampled again by every
 * epoch's crop: the sharper filter loses less of what the crop needs.
 *
 * Which side: the shorter one is capped (docs/FORMAT.md, "Pre-resized and
 * raw datasets", says why), and the new size follows torchvision's
 * Resize(N): shorter side N, longer side int(N * long / short).
 *
 * Re-encoding is libjpeg-turbo's compressor (4:2:0, optimised Huffman
 * tables); a raw record is chute's CHRAW (src/codec/raw.c).  Every size
 * is computed in 64 bits and checked against the caller's byte limit
 * before anything is allocated for it.  Pack-time code: buffers are
 * per-thread scratch that grows to the largest image and stays.
 */
#include "pack_resize.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <stdlib.h>
#include <string.h>

#define PR_PRECISION_BITS 22 /* Pillow's, for 8-bit images: 32 - 8 - 2 */
#define PR_SUPPORT 3.0

void ch_pr_scratch_free(ch_pr_scratch *s)
{
    if (!s)
        return;
    ch_buf_free(&s->kx);
    ch_buf_free(&s->ky);
    ch_buf_free(&s->mid);
    ch_buf_free(&s->out);
    ch_buf_free(&s->enc);
}

int ch_pr_target(uint32_t w, uint32_t h, uint32_t max_side, uint32_t *ow, uint32_t *oh)
{
    uint32_t s = w < h ? w : h, l = w < h ? h : w;
    if (max_side == 0 || s <= max_side) {
        *ow = w;
        *oh = h;
        return 0;
    }
    /* torchvision: int(size * long / short), in exact integer arithmetic */
    uint64_t nl = (uint64_t)max_side * l / s;
    if (nl < 1)
        nl = 1;
    *ow = w < h ? max_side : (uint32_t)nl;
    *oh = w < h ? (uint32_t)nl : max_side;
    return 1;
}

static double sinc(double x)
{
    if (x == 0.0)
        return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double lanczos(double x)
{
    return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0;
}

/* Taps of one axis (in -> out samples): per output pixel its first source
 * pixel, tap count and ksize fixed-point weights.  Layout in b:
 * int32 bounds[2 * out], then int32 k[out * ksize]. */
static int axis_coeffs(uint32_t in, uint32_t out, ch_buf *b, int32_t *out_ksize)
{
    double scale = (double)in / out, fs = scale < 1.0 ? 1.0 : scale;
    double support = PR_SUPPORT * fs;
    int32_t ksize = (int32_t)ceil(support) * 2 + 1;
    uint64_t n = (uint64_t)out * (2 + (uint64_t)ksize) * sizeof(int32_t);
    size_t pkb = (size_t)ksize * sizeof(double);
    if (n > SIZE_MAX / 2 || ch_buf_reserve(b, pkb + (size_t)n) != CHUTE_OK)
        return CHUTE_ENOMEM;
    double *pk = (double *)(void *)b->data; /* one row of doubles, then the taps */
    int32_t *bounds = (int32_t *)(void *)(b->data + pkb), *kk = bounds + 2 * (size_t)out;
    for (uint32_t xx = 0; xx < out; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / fs;
        int32_t xmin = (int32_t)(center - support + 0.5), xmax;
        if (xmin < 0)
            xmin = 0;
        xmax = (int32_t)(center + support + 0.5);
        if (xmax > (int32_t)in)
            xmax = (int32_t)in;
        xmax -= xmin;
        for (int32_t x = 0; x < xmax; x++) {
            pk[x] = lanczos((x + xmin - center + 0.5) * ss);
            ww += pk[x];
        }
        int32_t *k = kk + (size_t)xx * ksize;
        for (int32_t x = 0; x < ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? pk[x] / ww : pk[x]) : 0.0;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PR_PRECISION_BITS))
                         : (int32_t)(0.5 + v * (1 << PR_PRECISION_BITS));
        }
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    *out_ksize = ksize;
    return CHUTE_OK;
}

static const int32_t *axis_bounds(const ch_buf *b, int32_t ksize)
{
    return (const int32_t *)(const void *)(b->data + (size_t)ksize * sizeof(double));
}

static inline uint8_t clip8(int64_t v)
{
    if (v >= ((int64_t)1 << PR_PRECISION_BITS << 8))
        return 255;
    if (v <= 0)
        return 0;
    return (uint8_t)(v >> PR_PRECISION_BITS);
}

int ch_pr_resize(const uint8_t *src, size_t stride, uint32_t w, uint32_t h, uint32_t ow,
                 uint32_t oh, ch_pr_scratch *s, const uint8_t **out_pix, chute_error *err)
{
    int32_t kxs = 0, kys = 0;
    int hpass = ow != w, vpass = oh != h;
    if ((hpass && axis_coeffs(w, ow, &s->kx, &kxs) != CHUTE_OK) ||
        (vpass && axis_coeffs(h, oh, &s->ky, &kys) != CHUTE_OK))
        return ch_err(err, CHUTE_ENOMEM, "out of memory for resize taps (%ux%u -> %ux%u)", w, h,
                      ow, oh);
    const uint8_t *cur = src;
    size_t cur_stride = stride;
    if (hpass) {
        size_t n = (size_t)ow * 3 * h; /* ow <= w: no larger than the decoded image */
        if (ch_buf_reserve(&s->mid, n) != CHUTE_OK)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for a %ux%u resize", ow, h);
        const int32_t *bounds = axis_bounds(&s->kx, kxs), *kk = bounds + 2 * (size_t)ow;
        for (uint32_t y = 0; y < h; y++) {
            const uint8_t *row = src + (size_t)y * stride;
            uint8_t *o = s->mid.data + (size_t)y * ow * 3;
            for (uint32_t xx = 0; xx < ow; xx++) {
                const int32_t *k = kk + (size_t)xx * kxs;
                int32_t xmin = bounds[2 * xx], xmax = bounds[2 * xx + 1];
                int64_t a0 = 1 << (PR_PRECISION_BITS - 1), a1 = a0, a2 = a0;
                const uint8_t *p = row + (size_t)xmin * 3;
                for (int32_t x = 0; x < xmax; x++, p += 3) {
                    a0 += (int64_t)p[0] * k[x];
                    a1 += (int64_t)p[1] * k[x];
                    a2 += (int64_t)p[2] * k[x];
                }
                o[3 * xx] = clip8(a0);
                o[3 * xx + 1] = clip8(a1);
                o[3 * xx + 2] = clip8(a2);
            }
        }
        cur = s->mid.data;
        cur_stride = (size_t)ow * 3;
    }
    if (!vpass) {
        *out_pix = cur;
        return CHUTE_OK;
    }
    size_t n = (size_t)ow * 3 * oh;
    if (ch_buf_reserve(&s->out, n) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %ux%u resize", ow, oh);
    const int32_t *bounds = axis_bounds(&s->ky, kys), *kk = bounds + 2 * (size_t)oh;
    for (uint32_t yy = 0; yy < oh; yy++) {
        const int32_t *k = kk + (size_t)yy * kys;
        int32_t ymin = bounds[2 * yy], ymax = bounds[2 * yy + 1];
        uint8_t *o = s->out.data + (size_t)yy * ow * 3;
        for (size_t i = 0; i < (size_t)ow * 3; i++) {
            int64_t a = 1 << (PR_PRECISION_BITS - 1);
            const uint8_t *p = cur + (size_t)ymin * cur_stride + i;
            for (int32_t y = 0; y < ymax; y++, p += cur_stride)
                a += (int64_t)*p * k[y];
            o[i] = clip8(a);
        }
    }
    *out_pix = s->out.data;
    return CHUTE_OK;
}

int ch_pr_raw_record(const uint8_t *pix, size_t stride, uint32_t w, uint32_t h,
                     uint64_t max_bytes, ch_buf *dst, size_t *out_len, chute_error *err)
{
    /* 16 + w*h*3 in 64 bits: w, h < 2^32 so w*h < 2^64 only if checked */
    uint64_t npix = (uint64_t)w * h, len;
    if (npix > (UINT64_MAX - CH_PR_RAW_HEADER) / 3)
        return ch_err(err, CHUTE_ELIMIT, "a %ux%u raw record's size overflows", w, h);
    len = CH_PR_RAW_HEADER + npix * 3;
    if (len > max_bytes)
        return ch_err(err, CHUTE_ELIMIT,
                      "its %ux%u raw record would be %llu bytes, over the loader's sample size "
                      "limit of %llu bytes (max_sample_bytes)",
                      w, h, (unsigned long long)len, (unsigned long long)max_bytes);
    if (len > SIZE_MAX || ch_buf_reserve(dst, (size_t)len) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %llu-byte raw record",
                      (unsigned long long)len);
    uint8_t *p = dst->data;
    memcpy(p, "CHRAW", 5);
    p[5] = 1; /* version */
    p[6] = 3; /* RGB */
    p[7] = 0; /* uint8 */
    for (int i = 0; i < 4; i++) {
        p[8 + i] = (uint8_t)(w >> (8 * i));
        p[12 + i] = (uint8_t)(h >> (8 * i));
    }
    for (uint32_t y = 0; y < h; y++)
        memcpy(p + CH_PR_RAW_HEADER + (size_t)y * w * 3, pix + (size_t)y * stride, (size_t)w * 3);
    *out_len = (size_t)len;
    return CHUTE_OK;
}

typedef struct pr_jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} pr_jerr;

static void pr_error_exit(j_common_ptr c)
{
    pr_jerr *e = (pr_jerr *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

int ch_pr_jpeg(const uint8_t *pix, size_t stride, uint32_t w, uint32_t h, int quality,
               uint64_t max_bytes, ch_buf *dst, size_t *out_len, chute_error *err)
{
    if (w > JPEG_MAX_DIMENSION || h > JPEG_MAX_DIMENSION)
        return ch_err(err, CHUTE_ELIMIT, "%ux%u is over JPEG's %ld-pixel side limit", w, h,
                      (long)JPEG_MAX_DIMENSION);
    struct jpeg_compress_struct c;
    pr_jerr je;
    memset(&c, 0, sizeof c);
    c.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = pr_error_exit;
    /* volatile: read after a longjmp */
    unsigned char *volatile mem = NULL;
    unsigned long memsize = 0;
    if (setjmp(je.jb)) {
        jpeg_destroy_compress(&c);
        free(mem);
        return ch_err(err, CHUTE_ENOMEM, "JPEG encoder: %s", je.msg);
    }
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, (unsigned char **)&mem, &memsize);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    c.optimize_coding = TRUE;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)c.next_scanline * stride);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    int rc = CHUTE_OK;
    if ((uint64_t)memsize > max_bytes)
        rc = ch_err(err, CHUTE_ELIMIT,
                    "re-encoded at %ux%u it is %lu bytes, over the loader's sample size limit "
                    "of %llu bytes (max_sample_bytes)",
                    w, h, memsize, (unsigned long long)max_bytes);
    else if (ch_buf_reserve(dst, memsize) != CHUTE_OK)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory for a %lu-byte JPEG", memsize);
    if (rc == CHUTE_OK) {
        memcpy(dst->data, mem, memsize);
        *out_len = memsize;
    }
    free(mem);
    return rc;
}
