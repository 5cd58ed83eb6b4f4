/*
 * fmt_video.c — the "video" format: clips from MP4/MKV/WebM/... files,
 * demuxed and decoded with FFmpeg's libavformat/libavcodec.
 *
 * Layouts (as the wav format's): one video file; a directory of videos
 * (one class, label 0); ImageFolder-style class directories of videos
 * (Kinetics, UCF-101), listed exactly as the image tree lists them.  A
 * sample is one clip: clips_per_video samples per video, sample i is clip
 * i % clips_per_video of video i / clips_per_video.  Samples have no
 * image (ds->no_image); the fields are
 *   "video"  uint8 (frames_per_clip, 3, S, S) with video_size S, or the
 *            native (T, 3, H, W) with video_size 0;
 *   "frames" int64 (frames_per_clip): the presentation index of each
 *            frame delivered (what a test checks, what a model may use).
 *
 * The clip sampler speaks TorchCodec's vocabulary (clips_at_random_indices
 * and friends): clip_sampler random or regular, frames_per_clip,
 * num_indices_between_frames, or ms_between_frames for clips by
 * presentation time (frame t is the one shown at start + t * step: the
 * last frame whose pts <= that time, exact on variable frame rate), and a
 * sampling range [sampling_range_start, sampling_range_end).  Random
 * starts come from ch_rng_for(seed, epoch, sample): one fresh clip per
 * video per epoch by default, independent of workers and timing.  A video
 * too short for a clip repeats its last frame (TorchCodec's "repeat_last").
 *
 * Exact seeks: every video gets a keyframe index (vidindex.h: one row per
 * packet, pts, dts, byte position, key flag), built on its first read by
 * demuxing once (no decoding), saved beside the file or in index_dir as
 * the TFRecord index is, published to other workers with one atomic
 * pointer.  A clip is then: for its first frame, seek to the keyframe the
 * index names (ch_vix_seek_row: open GOPs and B-frames handled), skip
 * packets until exactly that one arrives (demuxers seek by time, in
 * different senses), decode forward, and keep the frames whose pts are the
 * ones asked for; a later frame of the clip whose keyframe lies ahead of
 * what has been decoded costs another seek instead of decoding the gap.
 * Every packet read is checked against its index row: a file swapped
 * after indexing is an error naming it, never wrong frames.
 *
 * Colour: frames are converted to RGB24 by swscale with the flags and
 * colour details `ffmpeg -pix_fmt rgb24` uses (bicubic; the frame's own
 * matrix and range, BT.601 limited when unstated), so a frame equals the
 * CLI's byte for byte; video_size then resizes with chute's own
 * antialiased filter (ops.h), one crop and one flip for the whole clip.
 *
 * Per-worker state (vstate): packet, frame, decoder context (reused while
 * the codec and its extradata stay the same, flushed between clips),
 * swscale context and RGB buffer, kept in the loader's per-worker slot and
 * freed when the loader is destroyed (state_free).  FFmpeg's demuxer
 * allocates when a file is opened, once per clip; chute's own buffers are
 * reused.  Decoders run one thread each: the loader's workers are the
 * parallelism, so the worker budget stays true.
 *
 * Bounds: video_max_side refuses huge frames before a decoder is opened,
 * video_max_decoded_bytes bounds the decoding one clip may cost, and
 * max_sample_bytes the clip delivered.  A damaged file (truncated,
 * corrupt packets, no video stream) is CHUTE_ECORRUPT naming it and, where
 * known, the byte offset: the loader's corrupt policy skips or fails it.
 */
#define _GNU_SOURCE
#include "format.h"
#include "tfr_saved.h"
#include "vidindex.h"
#include "video.h"

#include "../common/checksum.h"
#include "../ops/ops.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define VIO_BUF 65536

static const char *const video_exts[] = {".mp4", ".mkv", ".webm", ".mov", ".avi", ".m4v", NULL};

static int is_video(const char *name)
{
    size_t n = strlen(name);
    if (name[0] == '.')
        return 0;
    for (int k = 0; video_exts[k]; k++) {
        size_t e = strlen(video_exts[k]);
        if (n > e && strcasecmp(name + n - e, video_exts[k]) == 0)
            return 1;
    }
    return 0;
}

typedef struct vfile {
    char *path;
    _Atomic(ch_vix *) ix;     /* built on first use, published once */
} vfile;

typedef struct vid_impl {
    const ch_source_ops *src;
    vfile *files;
    uint64_t nfiles;
    uint32_t T, cpv, step, ms_step, range_start, range_end, size, max_side;
    int regular;
    uint64_t max_decoded;
    uint32_t out_w, out_h;    /* delivered frame size */
    char *index_dir;          /* copy of the option; NULL = default */
    int index_dir_set;
    int f_video, f_frames;
} vid_impl;

/* ---- options ---------------------------------------------------------- */

/* What a zero option means (the rows' help in dataset_options.def says so). */
#define DEF_FRAMES_PER_CLIP 16u
#define DEF_MAX_SIDE 8192u
#define DEF_MAX_DECODED (4ull << 30)

static uint32_t or_default(uint32_t v, uint32_t def) { return v ? v : def; }

/* ---- I/O through the dataset's source ---------------------------------- */

typedef struct vio {
    const ch_source_ops *src;
    void *h;
    const char *path;
    uint64_t size, pos;
    chute_error err;
    int failed;
} vio;

static int vio_read(void *u, uint8_t *buf, int n)
{
    vio *v = u;
    if (v->pos >= v->size)
        return AVERROR_EOF;
    size_t len = (size_t)CH_MIN((uint64_t)n, v->size - v->pos);
    if (v->src->read_at(v->h, v->path, v->pos, buf, len, &v->err) != CHUTE_OK) {
        v->failed = 1;
        return AVERROR(EIO);
    }
    v->pos += len;
    return (int)len;
}

static int64_t vio_seek(void *u, int64_t off, int whence)
{
    vio *v = u;
    whence &= ~AVSEEK_FORCE;
    if (whence == AVSEEK_SIZE)
        return (int64_t)v->size;
    int64_t to = whence == SEEK_SET   ? off
                 : whence == SEEK_CUR ? (int64_t)v->pos + off
                 : whence == SEEK_END ? (int64_t)v->size + off
                                      : -1;
    if (to < 0 || (uint64_t)to > v->size)
        return AVERROR(EINVAL);
    v->pos = (uint64_t)to;
    return to;
}

/* An open demuxer on one file. */
typedef struct demux {
    vio io;
    AVIOContext *avio;
    AVFormatContext *fc;
    int vs;                   /* the video stream */
} demux;

static void demux_close(demux *d)
{
    if (d->fc)
        avformat_close_input(&d->fc);
    if (d->avio) {
        av_freep(&d->avio->buffer);
        avio_context_free(&d->avio);
    }
    if (d->io.h)
        d->io.src->close(d->io.h);
    d->io.h = NULL;
}

static int av_fail(chute_error *err, int code, const char *path, int64_t pos, const char *what,
                   int averr)
{
    char msg[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(averr, msg, sizeof msg);
    if (pos >= 0)
        return ch_err(err, code, "%s@%lld: %s: %s", path, (long long)pos, what, msg);
    return ch_err(err, code, "%s: %s: %s", path, what, msg);
}

static int demux_open(const ch_source_ops *src, const char *path, demux *d, uint64_t *size,
                      chute_error *err)
{
    memset(d, 0, sizeof *d);
    d->io.src = src;
    d->io.path = path;
    int rc = ch_src_open(src, path, &d->io.h, &d->io.size, err);
    if (rc != CHUTE_OK)
        return rc;
    if (size)
        *size = d->io.size;
    uint8_t *buf = av_malloc(VIO_BUF);
    if (!buf || !(d->avio = avio_alloc_context(buf, VIO_BUF, 0, &d->io, vio_read, NULL,
                                               vio_seek))) {
        av_free(buf);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for the demuxer", path);
    }
    if (!(d->fc = avformat_alloc_context()))
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for the demuxer", path);
    d->fc->pb = d->avio;
    d->fc->flags |= AVFMT_FLAG_CUSTOM_IO;
    int r = avformat_open_input(&d->fc, path, NULL, NULL); /* frees fc on failure */
    if (r < 0) {
        if (d->io.failed) {
            *err = d->io.err;
            return err->code;
        }
        return av_fail(err, CHUTE_ECORRUPT, path, -1, "not a video container FFmpeg reads", r);
    }
    r = av_find_best_stream(d->fc, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (r < 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s: no video stream (%u streams: audio only?)", path,
                      d->fc->nb_streams);
    d->vs = r;
    for (unsigned k = 0; k < d->fc->nb_streams; k++)
        d->fc->streams[k]->discard = (int)k == d->vs ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    return CHUTE_OK;
}

/* ---- the keyframe index ------------------------------------------------ */

static int file_want(const ch_source_ops *src, const char *path, ch_vix_want *w, chute_error *err)
{
    ch_stat st;
    int rc = ch_src_stat(src, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    uint8_t *head = malloc(CH_VIX_HEAD_BYTES);
    if (!head)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    size_t n = (size_t)CH_MIN(st.size, (uint64_t)CH_VIX_HEAD_BYTES);
    rc = n ? ch_src_read_head(src, path, head, n, err) : CHUTE_OK;
    w->size = st.size;
    w->mtime_ns = st.mtime_ns;
    w->head_crc = rc == CHUTE_OK ? ch_crc32c(0, head, n) : 0;
    free(head);
    return rc;
}

static int index_build(const vid_impl *t, const char *path, ch_vix *ix, uint64_t *size,
                       chute_error *err)
{
    demux d;
    int rc = demux_open(t->src, path, &d, size, err);
    AVPacket *pkt = rc == CHUTE_OK ? av_packet_alloc() : NULL;
    if (rc == CHUTE_OK && !pkt)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    if (rc == CHUTE_OK) {
        AVStream *st = d.fc->streams[d.vs];
        ix->stream = (uint32_t)d.vs;
        ix->codec_id = (int32_t)st->codecpar->codec_id;
        ix->width = (uint32_t)CH_MAX(st->codecpar->width, 0);
        ix->height = (uint32_t)CH_MAX(st->codecpar->height, 0);
        ix->tb_num = st->time_base.num;
        ix->tb_den = st->time_base.den;
        if (ix->width == 0 || ix->height == 0 || ix->width > t->max_side ||
            ix->height > t->max_side)
            rc = ch_err(err, ix->width && ix->height ? CHUTE_ELIMIT : CHUTE_ECORRUPT,
                        "%s: frames of %ux%u (video_max_side %u)", path, ix->width, ix->height,
                        t->max_side);
    }
    while (rc == CHUTE_OK) {
        int r = av_read_frame(d.fc, pkt);
        if (r == AVERROR_EOF)
            break;
        if (r < 0) {
            rc = d.io.failed ? (*err = d.io.err, err->code)
                             : av_fail(err, CHUTE_ECORRUPT, path, (int64_t)d.io.pos,
                                       "demuxing", r);
            break;
        }
        if (pkt->stream_index == d.vs && !(pkt->flags & AV_PKT_FLAG_DISCARD)) {
            if (pkt->pts == AV_NOPTS_VALUE) {
                rc = ch_err(err, CHUTE_ECORRUPT, "%s@%lld: a video packet without a "
                            "presentation time (chute needs one per frame to seek exactly)",
                            path, (long long)pkt->pos);
            } else {
                ch_vix_row row = {pkt->pts, pkt->dts == AV_NOPTS_VALUE ? pkt->pts : pkt->dts,
                                  pkt->pos < 0 ? -1 : pkt->pos, (uint32_t)pkt->size,
                                  (pkt->flags & AV_PKT_FLAG_KEY) ? CH_VIX_KEY : 0};
                rc = ch_vix_push(ix, &row, err);
            }
        }
        av_packet_unref(pkt);
    }
    av_packet_free(&pkt);
    demux_close(&d);
    if (rc == CHUTE_OK)
        rc = ch_vix_finish(ix, *size, path, err);
    return rc;
}

static int load_saved(const vid_impl *t, const char *ipath, const ch_vix_want *want, ch_vix *ix,
                      chute_error *err)
{
    size_t len = 0;
    int rc = ch_src_read_file(t->src, ipath, NULL, 0, &len, err);
    if (rc == CHUTE_OK) /* an empty file */
        return ch_err(err, CHUTE_ECORRUPT, "%s: empty", ipath);
    if (rc != CH_ESMALL)
        return rc;
    if (len > (size_t)CH_VIX_MAX_FRAMES * 32 + 128)
        return ch_err(err, CHUTE_ECORRUPT, "%s: %zu bytes", ipath, len);
    uint8_t *buf = malloc(len);
    if (!buf)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", ipath);
    size_t got = 0;
    rc = ch_src_read_file(t->src, ipath, buf, len, &got, err);
    if (rc == CH_ESMALL)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: grew while read", ipath);
    if (rc == CHUTE_OK)
        rc = ch_vix_parse(buf, got, ipath, want, ix, err);
    free(buf);
    return rc;
}

/* The saved index's two homes: beside the file, and the index directory
 * (tfr_saved.c's hash-of-path name, with our suffix). */
static int index_paths(const vid_impl *t, const char *path, char *beside, size_t nb, char *cached,
                       size_t nc)
{
    snprintf(beside, nb, "%s%s", path, CH_VIX_SUFFIX);
    cached[0] = '\0';
    char tmp[PATH_MAX + 128];
    if (ch_tfx_cache_path(path, t->index_dir_set ? t->index_dir : NULL, tmp, sizeof tmp)) {
        size_t n = strlen(tmp), s = strlen(CH_TFX_SUFFIX);
        if (n > s)
            tmp[n - s] = '\0';
        snprintf(cached, nc, "%s%s", tmp, CH_VIX_SUFFIX);
    }
    return 0;
}

static void index_save(const vid_impl *t, const char *path, const ch_vix_want *want,
                       const ch_vix *ix)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    chute_error e = {0};
    if (ch_vix_format(ix, want, &buf, &n, &e) != CHUTE_OK)
        return;
    char beside[PATH_MAX + 16], cached[PATH_MAX + 160];
    index_paths(t, path, beside, sizeof beside, cached, sizeof cached);
    int rc = CHUTE_ENOTFOUND;
    if (t->src == &ch_source_local)
        rc = ch_write_atomic(beside, buf, n, &e);
    if (rc != CHUTE_OK && cached[0]) {
        char dir[PATH_MAX + 160];
        snprintf(dir, sizeof dir, "%s", cached);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir)
            *slash = '\0';
        if (ch_mkdir_p(dir, &e) == CHUTE_OK)
            (void)ch_write_atomic(cached, buf, n, &e);
    }
    free(buf);
}

/* File k's index: the published one, else a saved one that matches the
 * file now, else built by demuxing (and saved, best effort). */
static int index_get(const vid_impl *t, uint64_t k, const ch_vix **out, chute_error *err)
{
    vfile *f = &t->files[k];
    ch_vix *ix = atomic_load_explicit(&f->ix, memory_order_acquire);
    if (ix) {
        *out = ix;
        return CHUTE_OK;
    }
    ix = calloc(1, sizeof *ix);
    if (!ix)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ch_vix_want want;
    int rc = file_want(t->src, f->path, &want, err);
    if (rc == CHUTE_OK) {
        char beside[PATH_MAX + 16], cached[PATH_MAX + 160];
        index_paths(t, f->path, beside, sizeof beside, cached, sizeof cached);
        chute_error e = {0};
        int got = load_saved(t, beside, &want, ix, &e) == CHUTE_OK;
        if (!got && cached[0]) {
            vid_impl local = *t;
            local.src = &ch_source_local;
            got = load_saved(&local, cached, &want, ix, &e) == CHUTE_OK;
        }
        if (!got) { /* none, stale or damaged: index again */
            uint64_t size = 0;
            ch_vix_free(ix);
            rc = index_build(t, f->path, ix, &size, err);
            if (rc == CHUTE_OK)
                index_save(t, f->path, &want, ix);
        }
    }
    if (rc != CHUTE_OK) {
        ch_vix_free(ix);
        free(ix);
        return rc;
    }
    ch_vix *expect = NULL;
    if (!atomic_compare_exchange_strong_explicit(&f->ix, &expect, ix, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        ch_vix_free(ix); /* another worker published first: use theirs */
        free(ix);
        ix = expect;
    }
    *out = ix;
    return CHUTE_OK;
}

/* ---- per-worker decoding state ------------------------------------------ */

typedef struct vstate {
    AVPacket *pkt;
    AVFrame *frm;
    AVCodecContext *cc;
    int cc_codec;
    ch_buf cc_extra;          /* the extradata cc was opened with */
    size_t cc_extra_len;
    struct SwsContext *sws;
    ch_buf rgb;               /* one native RGB24 frame */
    ch_resize_scratch rs;
} vstate;

static void vstate_free(void *p)
{
    vstate *s = p;
    if (!s)
        return;
    av_packet_free(&s->pkt);
    av_frame_free(&s->frm);
    avcodec_free_context(&s->cc);
    sws_freeContext(s->sws);
    ch_buf_free(&s->cc_extra);
    ch_buf_free(&s->rgb);
    ch_buf_free(&s->rs.coef);
    ch_buf_free(&s->rs.tmp);
    ch_buf_free(&s->rs.aug_px);
    ch_buf_free(&s->rs.aug_tmp);
    free(s);
}

static vstate *vstate_new(void)
{
    vstate *s = calloc(1, sizeof *s);
    if (s && (!(s->pkt = av_packet_alloc()) || !(s->frm = av_frame_alloc()))) {
        vstate_free(s);
        s = NULL;
    }
    return s;
}

/* A decoder for stream par: the worker's own, reused (flushed) while the
 * codec and extradata are the same, else opened anew. */
static int decoder_for(vstate *s, const AVStream *st, const char *path, chute_error *err)
{
    const AVCodecParameters *par = st->codecpar;
    size_t ne = par->extradata ? (size_t)par->extradata_size : 0;
    if (s->cc && s->cc_codec == (int)par->codec_id && s->cc->width == par->width &&
        s->cc->height == par->height && s->cc_extra_len == ne &&
        (ne == 0 || memcmp(s->cc_extra.data, par->extradata, ne) == 0)) {
        avcodec_flush_buffers(s->cc);
        s->cc->pkt_timebase = st->time_base;
        return CHUTE_OK;
    }
    avcodec_free_context(&s->cc);
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: no decoder for codec %s in this FFmpeg",
                      path, avcodec_get_name(par->codec_id));
    if (!(s->cc = avcodec_alloc_context3(codec)))
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for a decoder", path);
    int r = avcodec_parameters_to_context(s->cc, par);
    if (r >= 0) {
        s->cc->thread_count = 1; /* the loader's workers are the parallelism */
        s->cc->pkt_timebase = st->time_base;
        r = avcodec_open2(s->cc, codec, NULL);
    }
    if (r < 0) {
        avcodec_free_context(&s->cc);
        return av_fail(err, CHUTE_ECORRUPT, path, -1, "opening the decoder", r);
    }
    if (ch_buf_reserve(&s->cc_extra, ne ? ne : 1) != 0) {
        avcodec_free_context(&s->cc);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    if (ne)
        memcpy(s->cc_extra.data, par->extradata, ne);
    s->cc_extra_len = ne;
    s->cc_codec = (int)par->codec_id;
    return CHUTE_OK;
}

/* Frame f as RGB24 into s->rgb (w x h x 3, tightly packed). */
static int to_rgb(vstate *s, const AVFrame *f, const char *path, chute_error *err)
{
    int w = f->width, h = f->height;
    size_t need = (size_t)w * (size_t)h * 3;
    if (ch_buf_reserve(&s->rgb, need) != 0)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for a %dx%d frame", path, w, h);
    s->sws = sws_getCachedContext(s->sws, w, h, (enum AVPixelFormat)f->format, w, h,
                                  AV_PIX_FMT_RGB24, SWS_BICUBIC, NULL, NULL, NULL);
    if (!s->sws)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: no conversion from pixel format %s to RGB",
                      path, av_get_pix_fmt_name((enum AVPixelFormat)f->format));
    /* As vf_scale does for `-pix_fmt rgb24`: the frame's own matrix and
     * range (BT.601 when unstated, sws_getCoefficients' default). */
    int *inv, *tab, in_full, out_full, bri, con, sat;
    if (sws_getColorspaceDetails(s->sws, &inv, &in_full, &tab, &out_full, &bri, &con, &sat) >= 0)
        sws_setColorspaceDetails(s->sws, sws_getCoefficients(f->colorspace),
                                 f->color_range == AVCOL_RANGE_JPEG, tab, out_full, bri, con, sat);
    uint8_t *dst[4] = {s->rgb.data};
    int dst_stride[4] = {w * 3};
    if (sws_scale(s->sws, (const uint8_t *const *)f->data, f->linesize, 0, h, dst, dst_stride) !=
        h)
        return ch_err(err, CHUTE_ECORRUPT, "%s: converting a frame to RGB failed", path);
    return CHUTE_OK;
}

/* Where the frames of one clip go. */
typedef struct sink {
    int (*put)(struct sink *k, uint32_t slot, vstate *s, const AVFrame *f, chute_error *err);
    uint8_t *dst;
    size_t cap;
    uint32_t w, h;
    /* resized delivery */
    ch_resize_plan plan;
    ch_out_spec out;
    int flip, resize;
} sink;

/* Presentation index of pts, or UINT32_MAX. */
static uint32_t frame_of_pts(const ch_vix *ix, int64_t pts)
{
    uint64_t lo = 0, hi = ix->count;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int64_t p = ix->rows[ix->by_pts[mid]].pts;
        if (p == pts)
            return (uint32_t)mid;
        if (p < pts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return UINT32_MAX;
}

/* Seek so that the next video packet read is row `row` (UINT32_MAX: the
 * first).  Demuxers seek by time, some to the keyframe at or before it,
 * some by pts, some by dts: seek to at or before the row's dts and skip
 * forward to it (read_row does the skipping). */
static int seek_row(const ch_vix *ix, demux *d, vstate *s, uint32_t row, const char *path,
                    chute_error *err)
{
    avcodec_flush_buffers(s->cc);
    int64_t ts = ix->rows[row == UINT32_MAX ? 0 : row].dts;
    int r = av_seek_frame(d->fc, d->vs, ts, AVSEEK_FLAG_BACKWARD);
    if (r < 0)
        r = av_seek_frame(d->fc, d->vs, ts, AVSEEK_FLAG_BACKWARD | AVSEEK_FLAG_ANY);
    if (r < 0)
        return av_fail(err, CHUTE_ECORRUPT, path, -1, "seeking", r);
    return CHUTE_OK;
}

/* Read the next video packet into s->pkt and say which row it is.
 * *row is where the caller expects the stream to be: packets before it
 * (after a seek) are dropped here; a packet that is not the expected row
 * is a file that changed since it was indexed.  CHUTE_END at the end. */
static int read_row(const ch_vix *ix, demux *d, vstate *s, uint32_t want, int skipping,
                    const char *path, chute_error *err)
{
    for (;;) {
        av_packet_unref(s->pkt);
        int r = av_read_frame(d->fc, s->pkt);
        if (r == AVERROR_EOF)
            return CHUTE_END;
        if (r < 0) {
            if (d->io.failed) {
                *err = d->io.err;
                return err->code;
            }
            return av_fail(err, CHUTE_ECORRUPT, path, (int64_t)d->io.pos, "demuxing", r);
        }
        if (s->pkt->stream_index != d->vs)
            continue;
        if (s->pkt->flags & AV_PKT_FLAG_DISCARD)
            return CHUTE_OK; /* decoded, never shown, not in the index */
        uint32_t k = s->pkt->pts == AV_NOPTS_VALUE ? UINT32_MAX : frame_of_pts(ix, s->pkt->pts);
        uint32_t got = k == UINT32_MAX ? UINT32_MAX : ix->by_pts[k];
        if (got == want && (ix->rows[got].pos < 0 || ix->rows[got].pos == s->pkt->pos) &&
            ix->rows[got].size == (uint32_t)s->pkt->size)
            return CHUTE_OK;
        if (skipping && got != UINT32_MAX && got < want)
            continue;
        return ch_err(err, CHUTE_ECORRUPT, "%s@%lld: packet (pts %lld, %d bytes) is not the "
                      "indexed frame %u of this video: the file changed since it was indexed, "
                      "or its container does not seek", path, (long long)s->pkt->pos,
                      (long long)s->pkt->pts, s->pkt->size, want);
    }
}

/* Decode the frames whose presentation indices are want[0..n) (non-
 * decreasing) of an open file into sink k. */
static int decode_frames(const vid_impl *t, const ch_vix *ix, demux *d, vstate *s,
                         const uint32_t *want, uint32_t n, sink *k, const char *path,
                         chute_error *err)
{
    uint64_t frame_bytes = (uint64_t)ix->width * ix->height * 3, decoded = 0;
    uint32_t next = 0;        /* the row the next packet read must be */
    int started = 0, skipping = 0, eof = 0;
    uint32_t j = 0;
    int rc = CHUTE_OK;
    while (j < n && rc == CHUTE_OK) {
        /* Seek when the keyframe this frame needs lies ahead of the next
         * packet: skipping the gap beats decoding it. */
        if (!eof) {
            uint32_t sr = ch_vix_seek_row(ix, want[j], want[j]);
            uint32_t srow = sr == UINT32_MAX ? 0 : sr;
            if (!started || srow > next) {
                rc = seek_row(ix, d, s, sr, path, err);
                if (rc != CHUTE_OK)
                    break;
                next = srow;
                skipping = 1;
                started = 1;
            }
        }
        /* Drain what the decoder has, then feed it one packet. */
        int r = avcodec_receive_frame(s->cc, s->frm);
        if (r == 0) {
            decoded += frame_bytes;
            if (decoded > t->max_decoded) {
                rc = ch_err(err, CHUTE_ELIMIT, "%s: the clip needs more than "
                            "video_max_decoded_bytes %llu of decoded frames (from the keyframe "
                            "before frame %u)", path, (unsigned long long)t->max_decoded,
                            want[j]);
                break;
            }
            int64_t pts = s->frm->best_effort_timestamp;
            uint32_t p = pts == AV_NOPTS_VALUE ? UINT32_MAX : frame_of_pts(ix, pts);
            if (p == want[j]) {
                if ((s->frm->flags & AV_FRAME_FLAG_CORRUPT) || s->frm->decode_error_flags) {
                    rc = ch_err(err, CHUTE_ECORRUPT, "%s: frame %u (pts %lld): the decoder "
                                "found it damaged", path, p, (long long)pts);
                    break;
                }
                if ((uint32_t)s->frm->width != ix->width ||
                    (uint32_t)s->frm->height != ix->height) {
                    rc = ch_err(err, CHUTE_ECORRUPT, "%s: frame %u is %dx%d, the stream said "
                                "%ux%u", path, p, s->frm->width, s->frm->height, ix->width,
                                ix->height);
                    break;
                }
                rc = to_rgb(s, s->frm, path, err);
                while (rc == CHUTE_OK && j < n && want[j] == p)
                    rc = k->put(k, j++, s, s->frm, err);
            } else if (p != UINT32_MAX && p > want[j] && !skipping) {
                rc = ch_err(err, CHUTE_ECORRUPT, "%s: frame %u (pts %lld) never came out of the "
                            "decoder (frame %u did)", path, want[j],
                            (long long)ix->rows[ix->by_pts[want[j]]].pts, p);
            }
            av_frame_unref(s->frm);
            continue;
        }
        if (r == AVERROR_EOF) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: frame %u (pts %lld) never came out of the "
                        "decoder (the stream ended first: truncated?)", path, want[j],
                        (long long)ix->rows[ix->by_pts[want[j]]].pts);
            break;
        }
        if (r != AVERROR(EAGAIN)) {
            rc = av_fail(err, CHUTE_ECORRUPT, path, -1, "decoding", r);
            break;
        }
        if (eof) { /* EAGAIN after the flush packet cannot happen; guard anyway */
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: the decoder stalled", path);
            break;
        }
        rc = read_row(ix, d, s, next, skipping, path, err);
        if (rc == CHUTE_END) {
            rc = CHUTE_OK;
            eof = 1;
            r = avcodec_send_packet(s->cc, NULL);
        } else if (rc == CHUTE_OK) {
            int shown = !(s->pkt->flags & AV_PKT_FLAG_DISCARD);
            if (shown) {
                skipping = 0;
                next++;
            }
            r = avcodec_send_packet(s->cc, s->pkt);
            if (r < 0 && r != AVERROR(EAGAIN))
                rc = av_fail(err, CHUTE_ECORRUPT, path, s->pkt->pos, "decoding a packet", r);
        }
    }
    av_packet_unref(s->pkt);
    return rc;
}

/* ---- delivering frames ------------------------------------------------- */

/* Native size: RGB24 (h, w, 3) -> (3, h, w). */
static int put_native_chw(sink *k, uint32_t slot, vstate *s, const AVFrame *f, chute_error *err)
{
    (void)f;
    (void)err;
    size_t plane = (size_t)k->w * k->h;
    uint8_t *o = k->dst + (size_t)slot * plane * 3;
    const uint8_t *p = s->rgb.data;
    for (size_t i = 0; i < plane; i++) {
        o[i] = p[3 * i];
        o[plane + i] = p[3 * i + 1];
        o[2 * plane + i] = p[3 * i + 2];
    }
    return CHUTE_OK;
}

/* Native size, RGB24 as it is (the test tool's form). */
static int put_native_hwc(sink *k, uint32_t slot, vstate *s, const AVFrame *f, chute_error *err)
{
    (void)f;
    (void)err;
    size_t n = (size_t)k->w * k->h * 3;
    memcpy(k->dst + (size_t)slot * n, s->rgb.data, n);
    return CHUTE_OK;
}

static int put_resized(sink *k, uint32_t slot, vstate *s, const AVFrame *f, chute_error *err)
{
    size_t per = (size_t)k->out.size * k->out.size * 3;
    int rc = ch_resize_run(&k->plan, s->rgb.data, (size_t)f->width * 3, 0, 0, k->flip, &k->out,
                           k->dst + (size_t)slot * per, &s->rs);
    if (rc != CHUTE_OK)
        return ch_err(err, rc, "resizing a video frame failed");
    return CHUTE_OK;
}

/* ---- the clip sampler -------------------------------------------------- */

static int64_t pts_of(const ch_vix *ix, uint64_t k) { return ix->rows[ix->by_pts[k]].pts; }

/* The last frame shown at time pts (the one whose pts <= it). */
static uint32_t frame_at(const ch_vix *ix, int64_t pts)
{
    uint64_t lo = 0, hi = ix->count;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (pts_of(ix, mid) <= pts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? (uint32_t)(lo - 1) : 0;
}

/* Clip c of a video with index ix into want[0..T), from the rng g. */
static void sample_clip(const vid_impl *t, const ch_vix *ix, uint32_t c, ch_rng *g,
                        uint32_t *want)
{
    uint64_t n = ix->count;
    uint64_t lo = CH_MIN((uint64_t)t->range_start, n - 1);
    uint64_t hi = t->range_end ? CH_MIN((uint64_t)t->range_end, n) : n; /* exclusive */
    if (hi <= lo)
        hi = lo + 1;
    if (!t->ms_step) {
        uint64_t span = (uint64_t)(t->T - 1) * t->step + 1;
        uint64_t last = hi - lo >= span ? hi - span : lo; /* the last start that fits */
        uint64_t start;
        if (!t->regular)
            start = lo + ch_rng_below(g, last - lo + 1);
        else
            start = t->cpv > 1 ? lo + (uint64_t)c * (last - lo) / (t->cpv - 1) : lo;
        for (uint32_t k = 0; k < t->T; k++)
            want[k] = (uint32_t)CH_MIN(start + (uint64_t)k * t->step, hi - 1);
        return;
    }
    /* By presentation time, in the stream's time base. */
    double tb = (double)ix->tb_num / ix->tb_den;
    double step = t->ms_step / 1000.0 / tb;
    int64_t p0 = pts_of(ix, lo), p1 = pts_of(ix, hi - 1);
    double span = step * (t->T - 1);
    double room = (double)(p1 - p0) - span;
    double start = (double)p0;
    if (room > 0) {
        if (!t->regular)
            start += ch_rng_uniform(g) * room;
        else if (t->cpv > 1)
            start += room * c / (t->cpv - 1);
    }
    for (uint32_t k = 0; k < t->T; k++) {
        double at = start + step * k;
        uint32_t f = frame_at(ix, (int64_t)(at + 1e-6));
        want[k] = (uint32_t)CH_MIN(CH_MAX((uint64_t)f, lo), hi - 1);
    }
}

/* ---- probe, open ------------------------------------------------------- */

static int video_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                       size_t n)
{
    if (!is_dir) {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (!is_video(base)) {
            snprintf(why, n, "not a video file (.mp4 .mkv .webm .mov .avi .m4v)");
            return CH_PROBE_NO;
        }
        return CH_PROBE_LIKELY;
    }
    char first[4096];
    chute_error e = {0};
    if (ch_probe_first(src, path, is_video, first, sizeof first, &e) != CHUTE_OK)
        return CH_PROBE_NO;
    if (!first[0]) {
        snprintf(why, n, "no video file in it or its first subdirectory");
        return CH_PROBE_NO;
    }
    return CH_PROBE_LIKELY;
}

typedef struct name_list {
    char **v;
    size_t n, cap;
    int oom;
} name_list;

static int collect(void *user, const char *name, const ch_stat *st)
{
    name_list *l = user;
    if (st->type != CH_ENT_FILE || !is_video(name))
        return 0;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return l->oom = 1;
        l->v = nv;
        l->cap = nc;
    }
    if (!(l->v[l->n] = strdup(name)))
        return l->oom = 1;
    l->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int set_files(vid_impl *t, const char *dir, char **rel, uint64_t n, chute_error *err)
{
    t->files = calloc(n ? n : 1, sizeof *t->files);
    if (!t->files)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu files", (unsigned long long)n);
    for (uint64_t k = 0; k < n; k++) {
        if (dir ? asprintf(&t->files[k].path, "%s/%s", dir, rel[k]) < 0
                : !(t->files[k].path = strdup(rel[k]))) {
            t->files[k].path = NULL;
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        }
        t->nfiles = k + 1;
    }
    return CHUTE_OK;
}

/* The videos and their classes (labels per video, into *vlabels). */
static int list_files(chute_dataset *ds, vid_impl *t, const char *path, int32_t **vlabels,
                      chute_error *err)
{
    ch_stat st;
    int rc = ch_src_stat(t->src, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    if (st.type != CH_ENT_DIR) {
        char *one = (char *)path;
        rc = set_files(t, NULL, &one, 1, err);
        if (rc == CHUTE_OK && !(*vlabels = calloc(1, sizeof **vlabels)))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        return rc == CHUTE_OK ? ch_ds_synth_classes(ds, 1, err) : rc;
    }
    name_list top = {0};
    rc = ch_src_list(t->src, path, collect, &top, err);
    if (rc == CHUTE_OK && top.oom)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory listing %s", path);
    if (rc == CHUTE_OK && top.n) { /* flat: one class */
        qsort(top.v, top.n, sizeof *top.v, cmp_str);
        rc = set_files(t, path, top.v, top.n, err);
        if (rc == CHUTE_OK && !(*vlabels = calloc(top.n, sizeof **vlabels)))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        if (rc == CHUTE_OK)
            rc = ch_ds_synth_classes(ds, 1, err);
    }
    for (size_t k = 0; k < top.n; k++)
        free(top.v[k]);
    free(top.v);
    if (rc != CHUTE_OK || t->nfiles)
        return rc;
    ch_tree_list l;
    rc = ch_tree_list_build_ext(t->src, path, is_video, ".mp4/.mkv/.webm/.mov/.avi/.m4v", &l,
                                err);
    if (rc != CHUTE_OK)
        return rc;
    rc = set_files(t, path, l.paths, l.n, err);
    if (rc == CHUTE_OK) {
        *vlabels = l.labels;
        l.labels = NULL;
        ds->class_names = l.class_names;
        ds->nclasses = l.nclasses;
        l.class_names = NULL;
        l.nclasses = 0;
    }
    ch_tree_list_free(&l);
    return rc;
}

/* FFmpeg logs to stderr at "info" by default, and its decoders report
 * what chute already turns into errors or ignores on purpose (the leading
 * pictures of an open GOP after a seek log "mmco: unref short failure").
 * Quiet it once, only while the process has left the level at FFmpeg's
 * default (an application that set its own keeps it). */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static void quiet_ffmpeg(void)
{
    if (av_log_get_level() == AV_LOG_INFO)
        av_log_set_level(AV_LOG_FATAL);
}

static int video_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                      chute_error *err)
{
    pthread_once(&log_once, quiet_ffmpeg);
    vid_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = t;
    t->src = ds->src;
    t->T = or_default(opt->frames_per_clip, DEF_FRAMES_PER_CLIP);
    t->cpv = or_default(opt->clips_per_video, 1);
    t->step = or_default(opt->num_indices_between_frames, 1);
    t->ms_step = opt->ms_between_frames;
    t->range_start = opt->sampling_range_start;
    t->range_end = opt->sampling_range_end;
    t->size = opt->video_size;
    t->max_side = or_default(opt->video_max_side, DEF_MAX_SIDE);
    t->max_decoded = opt->video_max_decoded_bytes ? opt->video_max_decoded_bytes
                                                  : DEF_MAX_DECODED;
    t->regular = opt->clip_sampler == CHUTE_CLIP_REGULAR;
    if (opt->index_dir) {
        t->index_dir_set = 1;
        if (!(t->index_dir = strdup(opt->index_dir)))
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    if (t->range_end && t->range_end <= t->range_start)
        return ch_err(err, CHUTE_EINVAL, "sampling_range_end %u is not after "
                      "sampling_range_start %u", t->range_end, t->range_start);
    int32_t *vlabels = NULL;
    int rc = list_files(ds, t, path, &vlabels, err);
    if (rc == CHUTE_OK && t->nfiles == 0)
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: no video files", path);
    if (rc == CHUTE_OK && t->nfiles > UINT64_MAX / t->cpv)
        rc = ch_err(err, CHUTE_ELIMIT, "%s: too many clips", path);
    if (rc == CHUTE_OK) {
        ds->n = t->nfiles * t->cpv;
        if (!(ds->labels = malloc((size_t)ds->n * sizeof *ds->labels)))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %llu labels",
                        (unsigned long long)ds->n);
        for (uint64_t i = 0; rc == CHUTE_OK && i < ds->n; i++)
            ds->labels[i] = vlabels[i / t->cpv];
    }
    free(vlabels);
    if (rc != CHUTE_OK)
        return rc;
    ds->no_image = 1;
    if (t->size) {
        t->out_w = t->out_h = t->size;
    } else { /* native: the first video's size, which every video must share */
        const ch_vix *ix = NULL;
        rc = index_get(t, 0, &ix, err);
        if (rc != CHUTE_OK)
            return rc;
        t->out_w = ix->width;
        t->out_h = ix->height;
    }
    int fv = ch_ds_field_add(ds, "video", 5, CHUTE_FIELD_TENSOR, CHUTE_DTYPE_UINT8, err);
    if (fv < 0)
        return err->code ? err->code : CHUTE_EINVAL;
    ch_field *f = &ds->fields[fv];
    f->ndim = 4;
    f->shape[0] = t->T;
    f->shape[1] = 3;
    f->shape[2] = t->out_h;
    f->shape[3] = t->out_w;
    f->known = 1;
    int ff = ch_ds_field_add(ds, "frames", 6, CHUTE_FIELD_TENSOR, CHUTE_DTYPE_INT64, err);
    if (ff < 0)
        return err->code ? err->code : CHUTE_EINVAL;
    ds->fields[ff].ndim = 1;
    ds->fields[ff].shape[0] = t->T;
    ds->fields[ff].known = 1;
    t->f_video = fv;
    t->f_frames = ff;
    return CHUTE_OK;
}

/* ---- reads ------------------------------------------------------------- */

static int open_for_decode(const vid_impl *t, uint64_t file, const ch_vix *ix, demux *d,
                           vstate *s, chute_error *err)
{
    const char *path = t->files[file].path;
    uint64_t size = 0;
    int rc = demux_open(t->src, path, d, &size, err);
    if (rc != CHUTE_OK)
        return rc;
    const AVStream *st = d->fc->streams[d->vs];
    if ((uint32_t)d->vs != ix->stream || (int32_t)st->codecpar->codec_id != ix->codec_id)
        return ch_err(err, CHUTE_ECORRUPT, "%s: its video stream is not the one indexed (the "
                      "file changed since)", path);
    if (ix->width > t->max_side || ix->height > t->max_side)
        return ch_err(err, CHUTE_ELIMIT, "%s: frames of %ux%u (video_max_side %u)", path,
                      ix->width, ix->height, t->max_side);
    return decoder_for(s, st, path, err);
}

static int read_clip(const chute_dataset *ds, uint64_t i, const ch_field_req *req, size_t nreq,
                     const ch_sample_ctx *ctx, chute_error *err)
{
    const vid_impl *t = ds->impl;
    uint64_t file = i / t->cpv;
    uint32_t clip = (uint32_t)(i % t->cpv);
    const char *path = t->files[file].path;
    uint8_t *video = NULL;
    int64_t *frames = NULL;
    for (size_t r = 0; r < nreq; r++) {
        if ((int)req[r].field == t->f_video)
            video = req[r].dst;
        else if ((int)req[r].field == t->f_frames)
            frames = req[r].dst;
    }
    const ch_vix *ix = NULL;
    int rc = index_get(t, file, &ix, err);
    if (rc != CHUTE_OK)
        return rc;
    if (!t->size && (ix->width != t->out_w || ix->height != t->out_h))
        return ch_err(err, CHUTE_ECORRUPT, "%s: frames of %ux%u, the dataset's are %ux%u (set "
                      "video_size to resize)", path, ix->width, ix->height, t->out_w, t->out_h);
    vstate *own = NULL, *s = ctx->state ? *ctx->state : NULL;
    if (!s) {
        if (!(s = vstate_new()))
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        if (ctx->state)
            *ctx->state = s;
        else
            own = s;
    }
    uint32_t want[1024];
    ch_rng g = ch_rng_for(ctx->seed, ctx->epoch, i);
    sample_clip(t, ix, clip, &g, want);
    if (frames)
        for (uint32_t k = 0; k < t->T; k++)
            frames[k] = want[k];
    if (video) {
        sink k = {.dst = video, .w = ix->width, .h = ix->height};
        if (t->size) {
            ch_crop c;
            if (ctx->transform == CHUTE_TRANSFORM_TRAIN)
                ch_geom_train(ix->width, ix->height, 0.08, 1.0, &g, &c);
            else if (ctx->transform == CHUTE_TRANSFORM_EVAL)
                ch_geom_eval(ix->width, ix->height, t->size, t->size, &c);
            else
                ch_geom_full(ix->width, ix->height, &c);
            k.put = put_resized;
            k.flip = c.flip;
            k.out.size = t->size;
            k.out.dtype = CHUTE_DTYPE_UINT8;
            k.out.layout = CHUTE_LAYOUT_NCHW;
            rc = ch_resize_plan_make(&k.plan, &c, t->size, t->size, &s->rs);
            if (rc != CHUTE_OK)
                rc = ch_err(err, rc, "%s: planning the resize failed", path);
        } else {
            k.put = put_native_chw;
        }
        demux d = {0};
        if (rc == CHUTE_OK)
            rc = open_for_decode(t, file, ix, &d, s, err);
        if (rc == CHUTE_OK)
            rc = decode_frames(t, ix, &d, s, want, t->T, &k, path, err);
        demux_close(&d);
    }
    vstate_free(own);
    return rc;
}

static int video_read_fields_ctx(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                                 size_t nreq, const ch_sample_ctx *ctx, ch_buf *scratch,
                                 uint64_t max_bytes, chute_error *err)
{
    (void)scratch;
    const vid_impl *t = ds->impl;
    uint64_t bytes = (uint64_t)t->T * 3 * t->out_w * t->out_h;
    if (bytes > max_bytes)
        return ch_err(err, CHUTE_ELIMIT, "%s: a clip of %u frames %ux%u is %llu bytes, over "
                      "max_sample_bytes %llu", t->files[i / t->cpv].path, t->T, t->out_w,
                      t->out_h, (unsigned long long)bytes, (unsigned long long)max_bytes);
    return read_clip(ds, i, req, nreq, ctx, err);
}

static int video_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                             size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    ch_sample_ctx c = {0, 0, CHUTE_TRANSFORM_EVAL, NULL};
    return video_read_fields_ctx(ds, i, req, nreq, &c, scratch, max_bytes, err);
}

/* The encoded sample: the whole file (inspect --verify, chute_dataset_read). */
static int video_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                      chute_error *err)
{
    const vid_impl *t = ds->impl;
    return ch_src_read_file(t->src, t->files[i / t->cpv].path, buf, cap, out_len, err);
}

static uint64_t video_sample_size(const chute_dataset *ds, uint64_t i)
{
    const vid_impl *t = ds->impl;
    ch_stat st;
    chute_error e = {0};
    return ch_src_stat(t->src, t->files[i / t->cpv].path, &st, &e) == CHUTE_OK ? st.size : 0;
}

static void video_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const vid_impl *t = ds->impl;
    if (t->cpv > 1)
        snprintf(buf, n, "%s (clip %llu)", t->files[i / t->cpv].path,
                 (unsigned long long)(i % t->cpv));
    else
        snprintf(buf, n, "%s", t->files[i].path);
}

static void video_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const vid_impl *t = ds->impl;
    snprintf(buf, n, "%s", t->files[i / t->cpv].path);
}

static uint64_t video_unit_of(const chute_dataset *ds, uint64_t i)
{
    const vid_impl *t = ds->impl;
    return i / t->cpv;
}

static void video_close(void *impl)
{
    vid_impl *t = impl;
    if (!t)
        return;
    for (uint64_t k = 0; k < t->nfiles; k++) {
        ch_vix *ix = atomic_load(&t->files[k].ix);
        ch_vix_free(ix);
        free(ix);
        free(t->files[k].path);
    }
    free(t->files);
    free(t->index_dir);
    free(t);
}

/* ---- video.h ----------------------------------------------------------- */

uint64_t ch_video_nfiles(const chute_dataset *ds)
{
    return ds->fmt == &ch_format_video ? ((const vid_impl *)ds->impl)->nfiles : 0;
}

int ch_video_file_info(const chute_dataset *ds, uint64_t file, uint64_t *frames, uint32_t *w,
                       uint32_t *h, chute_error *err)
{
    if (file >= ch_video_nfiles(ds))
        return ch_err(err, CHUTE_EINVAL, "no video file %llu", (unsigned long long)file);
    const ch_vix *ix = NULL;
    int rc = index_get(ds->impl, file, &ix, err);
    if (rc == CHUTE_OK) {
        *frames = ix->count;
        *w = ix->width;
        *h = ix->height;
    }
    return rc;
}

int ch_video_frames_rgb(const chute_dataset *ds, uint64_t file, const uint64_t *idx, uint32_t n,
                        uint8_t *dst, size_t cap, chute_error *err)
{
    uint64_t frames = 0;
    uint32_t w = 0, h = 0;
    int rc = ch_video_file_info(ds, file, &frames, &w, &h, err);
    if (rc != CHUTE_OK)
        return rc;
    const vid_impl *t = ds->impl;
    const ch_vix *ix = atomic_load(&t->files[file].ix);
    if (n == 0 || n > 1024 || (uint64_t)n * w * h * 3 > cap)
        return ch_err(err, CHUTE_EINVAL, "%u frames of %ux%u do not fit %zu bytes", n, w, h, cap);
    uint32_t want[1024];
    for (uint32_t k = 0; k < n; k++) {
        if (idx[k] >= frames || (k && idx[k] < idx[k - 1]))
            return ch_err(err, CHUTE_EINVAL, "frame %llu: out of range or out of order",
                          (unsigned long long)idx[k]);
        want[k] = (uint32_t)idx[k];
    }
    vstate *s = vstate_new();
    if (!s)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    sink k = {.put = put_native_hwc, .dst = dst, .cap = cap, .w = w, .h = h};
    demux d = {0};
    rc = open_for_decode(t, file, ix, &d, s, err);
    if (rc == CHUTE_OK)
        rc = decode_frames(t, ix, &d, s, want, n, &k, t->files[file].path, err);
    demux_close(&d);
    vstate_free(s);
    return rc;
}

const ch_format_ops ch_format_video = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "video",
    .probe = video_probe,
    .open = video_open,
    .read = video_read,
    .sample_size = video_sample_size,
    .describe = video_describe,
    .file_of = video_file_of,
    .close = video_close,
    .unit_of = video_unit_of,
    .read_fields = video_read_fields,
    .read_fields_ctx = video_read_fields_ctx,
    .state_free = vstate_free,
};
