/*
 * jpeg.c — JPEG through libjpeg-turbo's libjpeg API.
 *
 * Why the libjpeg API and not TurboJPEG: TurboJPEG 2.x (Debian 12) cannot
 * decode a window, and the window is the point.  jpeg_crop_scanline()
 * skips IDCT and colour conversion left and right of the window;
 * jpeg_skip_scanlines() skips them above it; rows below it are never
 * Huffman-decoded because we abort right after the last needed row.
 *
 * Errors: libjpeg reports fatal errors through longjmp, which we catch in
 * begin() and finish().  Its "warnings" include truncation (premature
 * end of data, filled with grey) and bad Huffman codes; a training set
 * must not silently get grey pictures, so those are treated as corrupt.
 * Harmless ones (extraneous bytes before a marker, odd JFIF versions) are
 * ignored, as other decoders do.
 *
 * Settings match PIL's defaults (ISLOW IDCT, fancy upsampling) so pixels
 * equal those torchvision sees for the same file at scale 1.
 *
 * Limits beyond max_pixels.  A progressive JPEG may hold any number of
 * scans, and the decoder must process each over the whole image even
 * when it carries nothing but end-of-band runs: a few kilobytes of
 * scans can cost minutes (libjpeg-turbo's "two issues with the JPEG
 * standard" report).  A progress monitor stops the decode past
 * CH_JPEG_MAX_SCANS scans, the limit libjpeg-turbo's own fuzzers set
 * through TJPARAM_SCANLIMIT; real encoders write about 10 (jpegtran,
 * mozjpeg).  libjpeg's memory is capped through max_memory_to_use at
 * what a max_pixels image can need (coefficient buffers of 4 full-size
 * components, 2 bytes per coefficient, plus 32 MiB of tables and rows),
 * so nothing in the file can make it allocate past its pixel budget; with
 * no backing store, going over fails the image.  Markers (APPn, COM) are
 * never saved (jpeg_save_markers is not called), so their size costs
 * nothing.  All three fail with CHUTE_ELIMIT.
 */
#include "codec_impl.h"

#include <jerror.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

static void on_error_exit(j_common_ptr c)
{
    ch_jpeg_err *e = (ch_jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void on_emit_message(j_common_ptr c, int level)
{
    ch_jpeg_err *e = (ch_jpeg_err *)c->err;
    if (level >= 0)
        return; /* trace messages */
    int code = c->err->msg_code;
    if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
        code == JWRN_MUST_RESYNC || code == JWRN_BOGUS_PROGRESSION) {
        if (e->warnings++ == 0)
            c->err->format_message(c, e->msg);
    }
}

static void on_output_message(j_common_ptr c) { (void)c; }

static int ch_jpeg_sniff(const uint8_t *p, size_t len)
{
    return len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

enum { CH_JPEG_MAX_SCANS = 100 };

/* Called by libjpeg while it absorbs the input (once per iMCU row of
 * each scan) and while it outputs rows. */
static void on_progress(j_common_ptr c)
{
    if (!c->is_decompressor)
        return;
    int scans = ((j_decompress_ptr)c)->input_scan_number;
    if (scans > CH_JPEG_MAX_SCANS) {
        ch_jpeg_err *e = (ch_jpeg_err *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d scans (a progressive-JPEG CPU bomb)",
                 CH_JPEG_MAX_SCANS);
        e->limit = 1;
        longjmp(e->jb, 1);
    }
}

/* Status for a longjmp out of libjpeg. */
static int jpeg_fail(ch_decoder *d, chute_error *err, const char *what)
{
    int code = d->jerr.pub.msg_code;
    if (d->jerr.limit)
        return ch_err(err, CHUTE_ELIMIT, "JPEG %s: %s", what, d->jerr.msg);
    if (code == JERR_NO_BACKING_STORE)
        return ch_err(err, CHUTE_ELIMIT, "JPEG %s: needs more than %ld MiB of decoder memory", what,
                      d->cinfo.mem ? d->cinfo.mem->max_memory_to_use >> 20 : 0L);
    if (code == JERR_OUT_OF_MEMORY)
        return ch_err(err, CHUTE_ENOMEM, "JPEG %s: %s", what, d->jerr.msg);
    return ch_err(err, CHUTE_ECORRUPT, "JPEG %s: %s", what, d->jerr.msg);
}

static int ensure_created(ch_decoder *d)
{
    if (d->cinfo.mem)
        return CHUTE_OK;
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = on_error_exit;
    d->jerr.pub.emit_message = on_emit_message;
    d->jerr.pub.output_message = on_output_message;
    if (setjmp(d->jerr.jb)) {
        /* jpeg_create_decompress only fails on out-of-memory */
        memset(&d->cinfo, 0, sizeof d->cinfo);
        return CHUTE_ENOMEM;
    }
    jpeg_create_decompress(&d->cinfo);
    d->jprogress.progress_monitor = on_progress;
    d->cinfo.progress = &d->jprogress;
    return CHUTE_OK;
}

static void ch_jpeg_abort(ch_decoder *d)
{
    if (d->jpeg_started && d->cinfo.mem)
        jpeg_abort_decompress(&d->cinfo);
    d->jpeg_started = 0;
}

static int ch_jpeg_begin(ch_decoder *d, uint64_t max_pixels, chute_error *err)
{
    if (ensure_created(d) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory creating a JPEG decoder");
    struct jpeg_decompress_struct *ci = &d->cinfo;
    d->jerr.warnings = 0;
    d->jerr.limit = 0;
    d->jerr.msg[0] = '\0';
    d->jerr.pub.msg_code = 0;
    /* What a max_pixels image can need; see the top of this file. */
    uint64_t cap = max_pixels > (UINT64_MAX >> 4) ? UINT64_MAX : max_pixels * 8 + (32u << 20);
    ci->mem->max_memory_to_use = cap > (uint64_t)LONG_MAX ? LONG_MAX : (long)cap;
    if (setjmp(d->jerr.jb)) {
        ch_jpeg_abort(d);
        return jpeg_fail(d, err, "header");
    }
    d->jpeg_started = 1;
    jpeg_mem_src(ci, d->data, (unsigned long)d->len);
    jpeg_read_header(ci, TRUE);
    d->info.width = ci->image_width;
    d->info.height = ci->image_height;
    d->info.channels = (uint32_t)ci->num_components;
    d->adobe_inverted = ci->saw_Adobe_marker;
    if (ci->image_width == 0 || ci->image_height == 0) {
        ch_jpeg_abort(d);
        return ch_err(err, CHUTE_ECORRUPT, "JPEG header: zero image size");
    }
    if ((uint64_t)ci->image_width * ci->image_height > max_pixels) {
        ch_jpeg_abort(d);
        return ch_err(err, CHUTE_ELIMIT, "JPEG %ux%u exceeds the limit of %llu pixels",
                      ci->image_width, ci->image_height, (unsigned long long)max_pixels);
    }
    if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) {
        ci->out_color_space = JCS_CMYK;
    } else if (ci->num_components == 1 || ci->num_components == 3) {
        ci->out_color_space = JCS_RGB;
    } else {
        ch_jpeg_abort(d);
        return ch_err(err, CHUTE_EFORMAT, "JPEG with %d components is not supported",
                      ci->num_components);
    }
    return CHUTE_OK;
}

static void ch_jpeg_scaled_size(const ch_decoder *d, uint32_t denom, uint32_t *w, uint32_t *h)
{
    *w = (d->info.width + denom - 1) / denom;
    *h = (d->info.height + denom - 1) / denom;
}

/* Adobe CMYK JPEGs store inverted values; both forms become RGB in place
 * (3 bytes written never overtake the 4 bytes being read). */
static void cmyk_to_rgb(uint8_t *p, size_t npix, int inverted)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < npix; i++, s += 4, p += 3) {
        unsigned c = s[0], m = s[1], y = s[2], k = s[3];
        if (!inverted) {
            c = 255 - c;
            m = 255 - m;
            y = 255 - y;
            k = 255 - k;
        }
        p[0] = (uint8_t)((c * k + 127) / 255);
        p[1] = (uint8_t)((m * k + 127) / 255);
        p[2] = (uint8_t)((y * k + 127) / 255);
    }
}

static int ch_jpeg_finish(ch_decoder *d, uint32_t denom, uint32_t x, uint32_t y, uint32_t w,
                          uint32_t h, ch_buf *buf, ch_image *out, chute_error *err)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8)
        denom = 1;
    volatile uint32_t vdenom = denom; /* survives longjmp */
    ci->scale_num = 1;
    ci->scale_denom = denom;
    ci->dct_method = JDCT_ISLOW;
    ci->do_fancy_upsampling = TRUE;
    uint32_t sw, sh;
    ch_jpeg_scaled_size(d, denom, &sw, &sh);
    if (!ch_window_ok(x, y, w, h, sw, sh)) {
        ch_jpeg_abort(d);
        return ch_err(err, CHUTE_EINVAL, "JPEG window %ux%u+%u+%u outside the %ux%u image", w, h, x,
                      y, sw, sh);
    }
    int cmyk = ci->out_color_space == JCS_CMYK;
    /* volatile: modified between setjmp and a possible longjmp */
    volatile JDIMENSION xoff = x, cw = w;
    volatile size_t stride = 0;
    if (setjmp(d->jerr.jb)) {
        ch_jpeg_abort(d);
        return jpeg_fail(d, err, "data");
    }
    jpeg_start_decompress(ci);
    if (ci->output_width != sw || ci->output_height != sh) {
        ch_jpeg_abort(d);
        return ch_err(err, CHUTE_EINVAL, "JPEG scaled size mismatch");
    }
    if (x != 0 || w != sw) {
        /* Fancy upsampling replicates chroma at the crop's edges, so the
         * outermost delivered columns can differ from a full decode by a
         * level or two: widen by two columns each side (where the image
         * has them) so every requested column is an interior one. */
        JDIMENSION x0 = x >= 2 ? x - 2 : 0;
        JDIMENSION x1 = x + w + 2 <= sw ? x + w + 2 : sw;
        JDIMENSION xo = x0, wo = x1 - x0;
        jpeg_crop_scanline(ci, &xo, &wo);
        xoff = xo;
        cw = wo;
    }
    stride = (size_t)cw * (cmyk ? 4 : 3);
    if (ch_buf_reserve(buf, stride * h) != CHUTE_OK) {
        ch_jpeg_abort(d);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %ux%u window", (unsigned)cw, h);
    }
    if (y > 0)
        jpeg_skip_scanlines(ci, y);
    uint8_t *base = buf->data;
    while (ci->output_scanline < y + h) {
        JSAMPROW row = base + (size_t)(ci->output_scanline - y) * stride;
        if (jpeg_read_scanlines(ci, &row, 1) != 1)
            break;
    }
    int got = ci->output_scanline >= y + h;
    int warnings = d->jerr.warnings;
    /* Rows below the window are never decoded. */
    if (ci->output_scanline < ci->output_height)
        jpeg_abort_decompress(ci);
    else
        jpeg_finish_decompress(ci);
    d->jpeg_started = 0;
    if (warnings)
        return ch_err(err, CHUTE_ECORRUPT, "JPEG data: %s", d->jerr.msg);
    if (!got)
        return ch_err(err, CHUTE_ECORRUPT, "JPEG data: stopped at row %u of %u",
                      (unsigned)ci->output_scanline, y + h);
    if (cmyk) {
        cmyk_to_rgb(base, (size_t)cw * h, d->adobe_inverted);
        stride = (size_t)cw * 3;
    }
    out->pixels = base;
    out->w = cw;
    out->h = h;
    out->stride = stride;
    out->x = xoff;
    out->y = y;
    out->scaled_w = sw;
    out->scaled_h = sh;
    out->scale_denom = vdenom;
    return CHUTE_OK;
}

void ch_jpeg_destroy(ch_decoder *d)
{
    ch_jpeg_abort(d);
    if (d->cinfo.mem)
        jpeg_destroy_decompress(&d->cinfo);
}

const ch_decoder_ops ch_jpeg_ops = {
    .name = "JPEG",
    .format = CH_IMG_JPEG,
    .caps = CH_DEC_CROP_WINDOW | CH_DEC_DCT_SCALE,
    .sniff = ch_jpeg_sniff,
    .begin = ch_jpeg_begin,
    .scaled_size = ch_jpeg_scaled_size,
    .finish = ch_jpeg_finish,
    .abort = ch_jpeg_abort,
};
