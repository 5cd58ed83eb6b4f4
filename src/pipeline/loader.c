/*
 * loader.c — the pipeline: worker threads fill a fixed ring of batch
 * buffers; the consumer takes batches in order.
 *
 * Shape.  An epoch for this rank is a list of tasks, one per sample slot:
 * task t belongs to batch first_batch + t / B at position t % B.  Workers
 * claim tasks with one atomic fetch-add, so there is no lock per sample.
 * A batch needs a ring slot before its first sample can be written; slots
 * are assigned to batches strictly in batch order (so later batches can
 * never take every slot while an earlier one waits), under the mutex, but
 * a worker caches its current (batch, slot) pair and only takes the mutex
 * when it moves on to another batch.  The worker that finishes a batch's
 * last sample marks it ready and wakes the consumer.
 *
 * Determinism.  Everything random about a sample (its crop, its flip)
 * comes from an RNG seeded by (seed, epoch, sample id), and batches are
 * handed out in order, so the bytes a consumer sees depend neither on the
 * number of workers nor on their timing.
 *
 * Memory.  The ring has prefetch + max_held slots, allocated once at
 * create.  Workers' scratch buffers grow to the largest sample seen and
 * are then reused: nothing of ours is allocated per sample once warm.
 *
 * Locking.  `mu` protects every field marked (mu) below and slot states;
 * `next_task`, `cancel_gen` and the stats are atomics.  The consumer never
 * holds `mu` while it waits (condition variables release it).
 *
 * Bad samples, by kind of error (see chute.h above chute_corrupt_policy).
 * Only bad *content* (a decode or checksum failure, an image over a
 * limit) is the policy's business: SKIP replaces the sample with another
 * one from this rank's epoch, chosen deterministically from (seed, epoch,
 * position), and counts it; FAIL marks the batch failed and
 * chute_loader_next returns the sample's location and the reason.  An I/O
 * error says nothing about the sample and everything about the storage,
 * so it is never skipped: the read is retried a bounded number of times
 * with backoff (a flaky network mount), then the batch fails with the
 * I/O status.  Anything else (out of memory) fails the batch at once.
 * The status reaches the caller unchanged: EIO stays EIO.  A message
 * always pairs a sample's location with that sample's own reason.
 *
 * Batch memory.  A slot holds the pixels, then the labels, then the
 * indices, each starting on a 64-byte boundary: with uint8 or float16
 * output and an odd size, the pixel bytes end anywhere, and int64 arrays
 * right behind them would be misaligned (undefined behaviour in C, and
 * NumPy/PyTorch views flagged unaligned or slow).
 *
 * Typed fields (the `fields` option).  Each named field gets one more
 * array in every slot, after the indices, on its own 64-byte boundary
 * (bytes fields also an int64 lengths array), so a batch is still one
 * region of the ring and nothing is allocated per batch.  A sample's
 * fields are read right after its image is made, as part of the same
 * unit of work (fill_record): a field that fails is that sample failing,
 * and the corrupt-sample policy replaces or fails it like a bad image;
 * a field whose shape varies is CHUTE_EINVAL (fields.h), which fails the
 * batch under either policy rather than substitute samples for it.
 *
 * Recent figures.  chute_stats' lifetime rates count every second since
 * create, so a model build or an evaluation before or between loops
 * dilutes them.  The consumer also records, under the `mu` it already
 * holds in next(), what it was handed and how long it waited into a ring
 * of WIN_BUCKETS time buckets of WIN_BUCKET_NS each (a fixed array in the
 * loader: no allocation, no extra lock); stats() sums the buckets of the
 * last CHUTE_STATS_WINDOW_MS, never reaching back before the first
 * next().  A wait is split exactly over the buckets it spans; only the
 * oldest bucket of a full window is pro-rated (at most 1/8 s of 10 s).
 *
 * fork().  The loader records the pid that created it.  In a forked child
 * the worker threads are gone and `mu` may be held by a thread that no
 * longer exists, so every call that would wait for a worker or take the
 * lock checks the pid first: the consumer calls return CHUTE_EINVAL and a
 * message, release does nothing, destroy frees memory without joining or
 * locking.  No global state, no pthread_atfork handler.
 */
#define _GNU_SOURCE
#include "../codec/codec.h"
#include "../format/format.h"
#include "../ops/aug.h"
#include "../ops/mix.h"
#include "../ops/plan.h"
#include "../stats/hist.h"
#include "../stats/metrics.h"
#include "../stats/stats.h"
#include "../stats/tboard.h"
#include "../stats/shmstats.h"
#include "../stats/exporter.h"
#include "../common/loader_options.h"
#include "../cuda/cuda_loader.h"
#include "sampler.h"
#include "dcache.h"
#include "readahead.h"
#include "stream.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* I/O errors: attempts per sample read, and the sleeps between them. */
#define IO_ATTEMPTS 4
static const uint32_t io_backoff_ms[IO_ATTEMPTS - 1] = {10, 40, 160};
/* SKIP: replacement samples tried before the batch fails. */
#define REPLACE_ATTEMPTS 16
/* Alignment of every array in a batch. */
#define BATCH_ALIGN 64

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD };

struct chute_batch {
    chute_loader *ld;
    uint32_t index;           /* slot number */
};

typedef struct slot {
    uint8_t *data;
    int64_t *labels;
    uint64_t *indices;
    float *soft;              /* mixup/cutmix: count x classes soft labels, else NULL */
    _Atomic uint32_t remaining; /* samples still to fill */
    int state;                /* (mu) */
    uint64_t seq;             /* (mu) batch this slot holds */
    uint32_t count;           /* (mu) samples in this batch */
    uint64_t epoch;           /* (mu) */
    int failed;               /* (mu) a sample could not be made */
    uint64_t fail_pos;        /* (mu) its position: the lowest failing position wins, so
                               * the error named does not depend on which worker ran first */
    int fail_code;            /* (mu) status chute_loader_next returns for it */
    char errmsg[1280];        /* (mu) */
    chute_batch handle;
    uint32_t *recs;           /* streams: the record of each sample (stream.h), else NULL */
    uint64_t sgen;            /* (mu) streams: the run that filled it */
} slot;

typedef struct worker {
    chute_loader *ld;
    pthread_t thread;
    int started;              /* `thread` exists (destroy joins only these) */
    uint32_t id;
    ch_buf rbuf;              /* encoded bytes */
    ch_buf pbuf;              /* decoded window */
    ch_resize_scratch rs;
    ch_decoder *dec;
    ch_worker_stats *stats;
    ch_hist read_lat;         /* this worker's read latencies (its own writer) */
    uint64_t ra_task;         /* task whose read-ahead bytes are still to take, or UINT64_MAX */
    uint64_t rng_key;         /* the sample's RNG key: the dataset index (+ copy * N with
                                 repeats), streams the sample's position (run_task) */
    ch_buf mixbuf;            /* mixup/cutmix: one sample, the batch's rolled-out last */
    void *fmt_state;          /* the format's per-worker state (ds->fmt->state_free) */
} worker;

/* One delivered typed field: where it lives in a slot. */
/* One bucket of the recent-figures ring (mu): what the consumer got and
 * waited in period id - 1 (WIN_BUCKET_NS long, counted from create);
 * id 0 = never used. */
#define WIN_BUCKETS 128
#define WIN_BUCKET_NS 125000000ull /* 128 x 1/8 s = 16 s, more than the window */
typedef struct {
    uint64_t id;
    uint64_t samples, batches, wait_ns;
} win_bucket;

typedef struct lfield {
    uint32_t field;           /* into ds->fields */
    int is_bytes;
    size_t per;               /* bytes per sample (bytes fields: field_bytes) */
    size_t off;               /* of its array in a slot */
    size_t len_off;           /* bytes fields: of the lengths array */
} lfield;

struct chute_loader {
    const chute_dataset *ds;
    chute_loader_options o;
    ch_out_spec out;
    ch_aug aug;               /* option augment, parsed (immutable after create) */
    ch_mix mix;               /* options mixup/cutmix (immutable after create) */
    size_t soft_off;          /* mixing: offset of the soft labels in a slot */
    ch_geo_spec geo;          /* option geometry, parsed (immutable after create) */
    size_t sample_bytes;      /* bytes of one output sample */
    size_t batch_bytes;       /* one slot, a multiple of 2 MiB */
    size_t labels_off;        /* offsets of labels and indices in a slot */
    size_t indices_off;

    ch_sampler sampler;       /* perm rewritten only while workers are idle */
    uint64_t nbatches;        /* (mu) batches of the current run */
    uint64_t epoch_batches;   /* batches of a whole epoch (immutable after create) */

    uint32_t nslots;
    slot *slots;
    uint8_t *ring_mem;
    size_t ring_len;

    uint32_t nworkers;
    worker *workers;
    ch_worker_stats *wstats;
    ch_exporter *stats;       /* the stats thread feeding tb, metrics and the `chute top`
                                 segment (stats_shm); NULL when every one is off */

    pthread_mutex_t mu;
    pthread_cond_t work_cv;   /* workers: a run started, or shutdown */
    pthread_cond_t slot_cv;   /* workers: a slot became free, or cancel */
    pthread_cond_t ready_cv;  /* consumer: a batch became ready */
    pthread_cond_t idle_cv;   /* start_epoch: all workers left the run */

    int shutdown;             /* (mu) */
    int running;              /* (mu) a run has been started */
    uint64_t gen;             /* (mu) run generation */
    _Atomic uint64_t cancel_gen; /* workers drop out when != their gen */
    /* gen + 1 of the run in which a sample failed for good with an I/O
     * error (io_fail_run): every sample of that run not yet made fails at
     * once with io_fail_msg, so no other read spends the retries again. */
    _Atomic uint64_t io_fail_gen;
    int io_fail_code;         /* (mu) */
    char io_fail_msg[1280];   /* (mu) */
    uint32_t active;          /* (mu) workers inside the current run */
    uint64_t epoch;           /* (mu) */
    uint64_t first_batch;     /* (mu) */
    uint64_t next_assign;     /* (mu) next batch to get a slot */
    uint64_t consume_seq;     /* (mu) next batch for the consumer */
    uint32_t *seqmap;         /* (mu) batch % nslots -> slot, for [consume_seq, next_assign) */
    uint32_t held;            /* (mu) */
    _Atomic uint64_t next_task;
    uint64_t total_tasks;     /* set while workers are idle */

    /* consumer-side stats (mu) */
    uint64_t batches_out, samples_out, wait_ns, fill_sum;
    uint64_t t_created;
    /* recent figures (mu): see "Recent figures" above */
    win_bucket win[WIN_BUCKETS];
    uint64_t t_first_next;    /* first next() call, 0 before */
    uint64_t t_last_out;      /* last batch handed over, 0 before */
    uint64_t pend_wait_ns;    /* waited so far for the batch not yet handed over */
    uint64_t last_wait_ns, last_step_ns;
    pid_t pid;                /* process that created the loader (fork detection) */
    char errmsg[1400];        /* written and read on the caller's thread only */
    char skip_msg[1400];      /* (mu) last skipped sample, from workers */
    uint64_t *skip_seen;      /* (mu) one bit per sample skipped this epoch (made at the first skip) */
    int skip_new;             /* (mu) skip_msg not yet copied to errmsg */
    uint32_t nlf;             /* typed fields delivered (immutable after create) */
    lfield lf[CH_FIELD_MAX];
    ch_dcache *dc;            /* decoded-sample cache, NULL when off (lock-free; dcache.c) */
    ch_cuda_loader *gpu;      /* device "cuda[:N]": the device side (src/cuda/), else NULL */
    ch_tboard *tb;            /* option tensorboard: the event file's writer, else NULL */
    ch_ra *ra;                /* read-ahead (readahead.c), NULL when off */
    /* Streams (ds->stream; src/pipeline/stream.h): the pump, else NULL.
     * nbatches is UINT64_MAX until the run's end is known (stream_end). */
    ch_stream *st;
    int st_status;            /* (mu) how the run's stream ended: 0 or an error */
    int st_reported;          /* (mu) st_status already returned once */
    char st_msg[512];         /* (mu) its message */
};

/* ------------------------------------------------------------------ */

/* DCT-domain downscale: only power-of-two scales (they have SIMD paths)
 * and only while a crop of cw x chh stays at least the output size, so
 * the resampler still only ever shrinks. */
static uint32_t dct_denom(const chute_loader *ld, unsigned caps, double cw, double chh)
{
    uint32_t denom = 1;
    if ((caps & CH_DEC_DCT_SCALE) && !ld->o.no_dct_scale) {
        while (denom < 8 && cw / (denom * 2) >= ld->o.size && chh / (denom * 2) >= ld->o.size)
            denom *= 2;
    }
    return denom;
}

/*
 * The decoded-sample cache (decoded_cache_bytes; memory in dcache.c).
 *
 * The promise is that the cache never changes an output pixel: a run with
 * it is bit-identical to the same options without it (the reference).
 * The trap is that the reference does not decode "the image": it decodes
 * the crop's window, at a DCT scale 1/D chosen from that epoch's random
 * crop, and libjpeg-turbo's 1/2, 1/4 and 1/8 decodes are not the full
 * decode downscaled (the scaling happens inside the IDCT).  So:
 *   - TRAIN caches the whole image decoded at D_c, the scale of the
 *     smallest crop ch_geom_train can draw for this image size
 *     (train_min_side), which no random crop goes below.  An epoch's crop
 *     is served from the cache only when its own scale D equals D_c; it
 *     is then resampled with the same plan from the same pixels (the
 *     window decode delivers exactly the full decode's pixels: jpeg.c
 *     widens the window so its columns are interior, and skipped rows are
 *     re-synchronised by libjpeg-turbo), hence the same output.  A crop
 *     with D > D_c is made from the file as in the reference and counted
 *     as a miss.  ImageNet-sized images (shorter side below 2 x size)
 *     always have D = D_c = 1; large photos hit on their smaller crops.
 *   - EVAL and NONE output depends only on the file and the options, so
 *     the finished sample is cached and copied (no resampling at all;
 *     smaller than a resized image for uint8 output).  Caching the image
 *     resized to resize_size instead would change pixels: the reference
 *     resamples the source once, straight to the crop, and a second
 *     resample of an intermediate image rounds differently.
 * If the whole-image decode fails (a truncated file whose damage lies
 * below every crop window the reference would decode), the sample is
 * never cached and is made as in the reference, error or not.
 */
enum { DC_MISS = 1 };

/* Lower bound of min(crop width, crop height) over every crop
 * ch_geom_train can give a W x H image: accepted crops have an area of at
 * least smin * W * H and an aspect ratio in [3/4, 4/3], so their shorter
 * side is at least round(sqrt(smin * W * H * 3/4)); the central fallback
 * keeps the image's shorter side. */
static double train_min_side(uint32_t W, uint32_t H, double smin)
{
    double m = floor(sqrt(smin * (double)W * (double)H * 0.75));
    return fmin(m, fmin((double)W, (double)H));
}

/* Resample `crop` (original coordinates) from a whole image decoded at
 * 1/denom, sw x sh RGB8 rows. */
static int resize_frame(chute_loader *ld, worker *w, const ch_crop *crop, uint32_t denom,
                        const uint8_t *pix, uint32_t sw, uint32_t sh, uint64_t aug_key,
                        uint8_t *dst, chute_error *err)
{
    ch_crop sc = *crop;
    if (denom > 1)
        ch_crop_scale(crop, denom, sw, sh, &sc);
    ch_resize_plan plan;
    int rc = ch_resize_plan_make(&plan, &sc, ld->o.size, ld->o.size, &w->rs);
    if (rc == CHUTE_EINVAL)
        return ch_err(err, CHUTE_EINVAL, "no valid crop of a %ux%u image", sw, sh);
    if (rc == CHUTE_OK) {
        ch_aug_key key = {ld->o.seed, ld->sampler.epoch, aug_key};
        rc = ch_transform_run(&plan, pix, (size_t)sw * 3, 0, 0, crop->flip, &ld->out, &ld->aug,
                              key, dst, &w->rs);
    }
    if (rc != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for resize rows");
    return CHUTE_OK;
}

/* Make sample idx from the cache: CHUTE_OK, DC_MISS, or an error. */
static int cache_hit(chute_loader *ld, worker *w, uint64_t idx, uint8_t *dst, chute_error *err)
{
    const ch_dcache_entry *e = ch_dcache_get(ld->dc, idx);
    if (!e)
        return DC_MISS;
    uint64_t t0 = ch_now_ns();
    if (e->kind == CH_DCACHE_SAMPLE) {
        memcpy(dst, ch_dcache_data(e), ld->sample_bytes);
    } else {
        ch_crop crop;
        ch_rng r = ch_rng_for(ld->o.seed, ld->sampler.epoch, w->rng_key);
        ch_geom_train(e->width, e->height, ld->o.scale_min_pct / 100.0,
                      ld->o.scale_max_pct / 100.0, &r, &crop);
        uint32_t denom = dct_denom(ld, e->caps, crop.x1 - crop.x0, crop.y1 - crop.y0);
        if (denom != e->denom)
            return DC_MISS; /* the reference decodes this crop at another scale */
        int rc = resize_frame(ld, w, &crop, denom, ch_dcache_data(e), e->sw, e->sh,
                             w->rng_key, dst, err);
        if (rc != CHUTE_OK)
            return rc;
    }
    ch_counter_inc(&w->stats->cache_hits);
    ch_stage_add(&w->stats->transform, 1, ld->sample_bytes, ch_now_ns() - t0);
    return CHUTE_OK;
}

/* TRAIN, first sight of sample idx (header parsed, crop drawn, its scale
 * `denom`): decode the whole image at D_c into the cache if it fits.
 * CHUTE_OK when dst was made from the new entry; DC_MISS when the caller
 * must make it as without a cache (the decoder is then ready again, as
 * begin() left it); or an error. */
static int cache_frame(chute_loader *ld, worker *w, uint64_t idx, const ch_image_info *info,
                       const uint8_t *enc, size_t len, const ch_crop *crop, uint32_t denom,
                       uint8_t *dst, chute_error *err)
{
    double m = train_min_side(info->width, info->height, ld->o.scale_min_pct / 100.0);
    uint32_t dc = dct_denom(ld, info->caps, m, m);
    uint32_t sw = info->width, sh = info->height;
    if (dc > 1)
        ch_decoder_scaled_size(w->dec, dc, &sw, &sh);
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)sw * sh, (uint64_t)3, &bytes))
        return DC_MISS;
    ch_dcache_entry *e = ch_dcache_claim(ld->dc, idx, bytes);
    if (!e)
        return DC_MISS;
    uint64_t t0 = ch_now_ns();
    ch_image img;
    chute_error derr = {0};
    int rc = ch_decoder_finish(w->dec, dc, 0, 0, sw, sh, &w->pbuf, &img, &derr);
    if (rc != CHUTE_OK || img.x != 0 || img.y != 0 || img.w != sw || img.h != sh) {
        ch_dcache_abandon(ld->dc, idx);
        ch_image_info again;
        rc = ch_decoder_begin(w->dec, enc, len, ld->o.max_pixels, &again, err);
        return rc == CHUTE_OK ? DC_MISS : rc;
    }
    uint8_t *out = (uint8_t *)ch_dcache_data(e);
    size_t row = (size_t)sw * 3;
    for (uint32_t y = 0; y < sh; y++)
        memcpy(out + y * row, img.pixels + y * img.stride, row);
    e->width = info->width;
    e->height = info->height;
    e->sw = sw;
    e->sh = sh;
    e->denom = dc;
    e->kind = CH_DCACHE_FRAME;
    e->caps = info->caps;
    ch_dcache_publish(ld->dc, idx, e);
    uint64_t t1 = ch_now_ns();
    ch_stage_add(&w->stats->decode, 1, bytes, t1 - t0);
    if (dc > 1)
        ch_counter_inc(&w->stats->dct_scaled);
    if (denom == dc) {
        rc = resize_frame(ld, w, crop, dc, out, sw, sh, w->rng_key, dst, err);
        if (rc == CHUTE_OK)
            ch_stage_add(&w->stats->transform, 1, ld->sample_bytes, ch_now_ns() - t1);
        return rc;
    }
    ch_image_info again;
    rc = ch_decoder_begin(w->dec, enc, len, ld->o.max_pixels, &again, err);
    return rc == CHUTE_OK ? DC_MISS : rc;
}

/* EVAL, NONE: keep the finished sample if it fits. */
static void cache_sample(chute_loader *ld, uint64_t idx, const uint8_t *dst)
{
    ch_dcache_entry *e = ch_dcache_claim(ld->dc, idx, ld->sample_bytes);
    if (!e)
        return;
    memcpy((uint8_t *)ch_dcache_data(e), dst, ld->sample_bytes);
    e->kind = CH_DCACHE_SAMPLE;
    ch_dcache_publish(ld->dc, idx, e);
}

/* Sample idx's encoded bytes: from the read-ahead when this is the task's
 * first read and its bytes were read ahead (checked by the format's
 * from_bytes), else read into the worker's buffer as always.  A failed
 * read-ahead read is returned as this (first) attempt's result. */
static int read_bytes(chute_loader *ld, worker *w, uint64_t idx, const uint8_t **bytes,
                      size_t *len, chute_error *err)
{
    const chute_dataset *ds = ld->ds;
    if (ld->st) { /* the record's bytes, in place (valid until its batch is released) */
        const ch_stream_rec *r = ch_stream_rec_of(ld->st, (uint32_t)idx);
        if (r->bad)
            return ch_err(err, CHUTE_ECORRUPT, "%s@%llu (sample '%s'): %s",
                          ch_stream_name(ld->st), (unsigned long long)r->offset, r->key, r->why);
        *bytes = r->data.data + r->img_off; /* TFRecord records: the image inside */
        *len = r->len;
        return CHUTE_OK;
    }
    if (ld->ra && w->ra_task != UINT64_MAX) {
        uint64_t t = w->ra_task;
        w->ra_task = UINT64_MAX;
        const uint8_t *raw = NULL;
        size_t rl = 0;
        int rc = ch_ra_take(ld->ra, t, &raw, &rl, err);
        if (rc == CHUTE_OK)
            return ds->fmt->from_bytes(ds, idx, raw, rl, bytes, len, err);
        if (rc != CH_RA_MISS)
            return rc;
    }
    int rc = ch_ds_read_buf(ds, idx, &w->rbuf, ld->o.max_sample_bytes, len, err);
    *bytes = w->rbuf.data;
    return rc;
}

/* Option geometry: the sample's plan, its window decoded (at a DCT scale
 * when the first pass allows, as below),
 * the plan's uint8 pixels, then the slot's normalize/cast/layout.  The
 * classification path (fill_sample below) does not pass here. */
static int fill_geometry(chute_loader *ld, worker *w, uint64_t idx, const ch_image_info *info,
                         uint8_t *dst, uint64_t t1, chute_error *err)
{
    ch_worker_stats *st = w->stats;
    const uint32_t S = ld->o.size;
    ch_rng r = ch_geo_rng(ld->o.seed, ld->sampler.epoch, ld->st ? w->rng_key : idx);
    ch_geo_plan plan;
    int rc = ch_geo_draw(&ld->geo, info->width, info->height, S, S, &r, &plan);
    if (rc != CHUTE_OK) {
        ch_decoder_abort(w->dec);
        return ch_err(err, CHUTE_EINVAL, "geometry: no plan for a %ux%u image (a step's canvas "
                      "would pass %u pixels a side or 2^28 pixels)", info->width, info->height,
                      CH_GEO_MAXSIDE);
    }
    /* The first pass may read a 1/2, 1/4 or 1/8 JPEG decode when its crop
     * still covers its output after it, the classification path's rule
     * (dct_denom) applied to that pass's own output size. */
    double cw, chh;
    uint32_t lw, lh, denom = 1;
    if (ch_geo_lead(&plan, &cw, &chh, &lw, &lh) && (info->caps & CH_DEC_DCT_SCALE) &&
        !ld->o.no_dct_scale)
        while (denom < 8 && cw / (denom * 2) >= lw && chh / (denom * 2) >= lh)
            denom *= 2;
    if (denom > 1) {
        uint32_t sw = info->width, sh = info->height;
        ch_decoder_scaled_size(w->dec, denom, &sw, &sh);
        if (ch_geo_set_denom(&plan, denom, sw, sh) != CHUTE_OK)
            denom = 1;
    }
    int32_t x0, y0, x1, y1;
    ch_geo_window(&plan, &x0, &y0, &x1, &y1);
    ch_image img;
    rc = ch_decoder_finish(w->dec, denom, (uint32_t)x0, (uint32_t)y0, (uint32_t)(x1 - x0),
                           (uint32_t)(y1 - y0), &w->pbuf, &img, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t t2 = ch_now_ns();
    ch_stage_add(&st->decode, 1, (uint64_t)img.w * img.h * 3, t2 - t1);
    if (denom > 1)
        ch_counter_inc(&st->dct_scaled);
    ch_crop one;
    if (ch_geo_one_pass(&plan, &one)) { /* axis-aligned: fused into the slot, as transform */
        ch_resize_plan rp;
        if (ch_resize_plan_make(&rp, &one, S, S, &w->rs) != CHUTE_OK ||
            ch_resize_run(&rp, img.pixels, img.stride, (int32_t)img.x, (int32_t)img.y, one.flip,
                          &ld->out, dst, &w->rs) != CHUTE_OK)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for resize rows");
        ch_stage_add(&st->transform, 1, ld->sample_bytes, ch_now_ns() - t2);
        return CHUTE_OK;
    }
    if (ch_buf_reserve(&w->rs.geo_px, (size_t)S * S * 3) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for the geometry output");
    static const uint8_t fill[3] = {0, 0, 0};
    rc = ch_geo_run_rgb8(&plan, img.pixels, img.stride, (int32_t)img.x, (int32_t)img.y, img.w,
                         img.h, fill, w->rs.geo_px.data, &w->rs);
    if (rc == CHUTE_EINVAL)
        return ch_err(err, CHUTE_EINVAL, "geometry: the decoder gave %ux%u at (%u, %u), not the "
                      "window the plan reads", img.w, img.h, img.x, img.y);
    if (rc != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for the geometry pass");
    ch_out_write_u8(w->rs.geo_px.data, &ld->out, dst);
    ch_stage_add(&st->transform, 1, ld->sample_bytes, ch_now_ns() - t2);
    return CHUTE_OK;
}

static int fill_sample(chute_loader *ld, worker *w, uint64_t idx, uint8_t *dst, chute_error *err)
{
    ch_worker_stats *st = w->stats;
    if (ld->dc) {
        int hrc = cache_hit(ld, w, idx, dst, err);
        if (hrc != DC_MISS)
            return hrc;
        ch_counter_inc(&st->cache_misses);
    }
    uint64_t t0 = ch_now_ns();
    size_t len = 0;
    const uint8_t *bytes = NULL;
    int rc = read_bytes(ld, w, idx, &bytes, &len, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t t1 = ch_now_ns();
    ch_stage_add(&st->read, 1, len, t1 - t0);
    ch_hist_add(&w->read_lat, t1 - t0);

    ch_image_info info;
    rc = ch_decoder_begin(w->dec, bytes, len, ld->o.max_pixels, &info, err);
    if (rc != CHUTE_OK)
        return rc;
    if (ld->geo.n)
        return fill_geometry(ld, w, idx, &info, dst, t1, err);
    ch_crop crop;
    if (ld->o.transform == CHUTE_TRANSFORM_TRAIN) {
        ch_rng r = ch_rng_for(ld->o.seed, ld->sampler.epoch, w->rng_key);
        ch_geom_train(info.width, info.height, ld->o.scale_min_pct / 100.0,
                      ld->o.scale_max_pct / 100.0, &r, &crop);
    } else if (ld->o.transform == CHUTE_TRANSFORM_EVAL) {
        ch_geom_eval(info.width, info.height, ld->o.resize_size, ld->o.size, &crop);
    } else {
        ch_geom_full(info.width, info.height, &crop);
    }
    /* gpu_decode_share: this position's JPEG may go to nvJPEG (src/cuda/). */
    if (ld->gpu && !ld->dc &&
        ch_cuda_loader_route(ld->gpu, dst, info.kind == CH_IMG_JPEG, info.channels, bytes, len,
                             &crop)) {
        ch_decoder_abort(w->dec);
        return CHUTE_OK;
    }
    uint32_t denom = dct_denom(ld, info.caps, crop.x1 - crop.x0, crop.y1 - crop.y0);
    if (ld->dc && ld->o.transform == CHUTE_TRANSFORM_TRAIN) {
        rc = cache_frame(ld, w, idx, &info, bytes, len, &crop, denom, dst, err);
        if (rc != DC_MISS)
            return rc;
    }
    ch_crop sc = crop;
    uint32_t sw = info.width, sh = info.height;
    if (denom > 1) {
        ch_decoder_scaled_size(w->dec, denom, &sw, &sh);
        ch_crop_scale(&crop, denom, sw, sh, &sc);
    }
    ch_resize_plan plan;
    rc = ch_resize_plan_make(&plan, &sc, ld->o.size, ld->o.size, &w->rs);
    if (rc != CHUTE_OK) {
        ch_decoder_abort(w->dec);
        if (rc == CHUTE_EINVAL) /* geometry promises never to give one */
            return ch_err(err, CHUTE_EINVAL, "no valid crop of a %ux%u image", info.width,
                          info.height);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for resize taps");
    }
    ch_image img;
    rc = ch_decoder_finish(w->dec, denom, (uint32_t)plan.x.lo, (uint32_t)plan.y.lo,
                           (uint32_t)(plan.x.hi - plan.x.lo), (uint32_t)(plan.y.hi - plan.y.lo),
                           &w->pbuf, &img, err);
    if (rc != CHUTE_OK)
        return rc;
    uint64_t t2 = ch_now_ns();
    ch_stage_add(&st->decode, 1, (uint64_t)img.w * img.h * 3, t2 - t1);
    if (denom > 1)
        ch_counter_inc(&st->dct_scaled);
    ch_aug_key key = {ld->o.seed, ld->sampler.epoch, w->rng_key};
    rc = ch_transform_run(&plan, img.pixels, img.stride, (int32_t)img.x, (int32_t)img.y,
                          crop.flip, &ld->out, &ld->aug, key, dst, &w->rs);
    if (rc != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for resize rows");
    ch_stage_add(&st->transform, 1, ld->sample_bytes, ch_now_ns() - t2);
    if (ld->dc && ld->o.transform != CHUTE_TRANSFORM_TRAIN)
        cache_sample(ld, idx, dst);
    return CHUTE_OK;
}

/* The sample's image, then its typed fields into the slot (see the essay). */
static int fill_record(chute_loader *ld, worker *w, uint64_t idx, uint8_t *dst, slot *s,
                       uint64_t pos, chute_error *err)
{
    /* Image-less datasets (ds->no_image): no image to read or make. */
    int rc = ld->ds->no_image ? CHUTE_OK : fill_sample(ld, w, idx, dst, err);
    if (rc != CHUTE_OK || (ld->nlf == 0 && (!ld->ds->no_image || !ld->ds->fmt->read_fields)))
        return rc; /* image-less samples are still read (checked) with no fields asked */
    ch_field_req req[CH_FIELD_MAX];
    for (uint32_t k = 0; k < ld->nlf; k++) {
        const lfield *f = &ld->lf[k];
        req[k].field = f->field;
        req[k].dst = s->data + f->off + pos * f->per;
        req[k].cap = f->per;
        req[k].len = f->is_bytes ? (int64_t *)(void *)(s->data + f->len_off) + pos : NULL;
    }
    if (ld->st) { /* streams: the record's declared fields (its Example, or its tar members) */
        const ch_stream_rec *r = ch_stream_rec_of(ld->st, (uint32_t)idx);
        const ch_stream_spec *sp = ld->ds->stream;
        char where[400];
        snprintf(where, sizeof where, "%s@%llu (sample '%s')", ch_stream_name(ld->st),
                 (unsigned long long)r->offset, r->key);
        if (!sp->read_fields)
            return ch_err(err, CHUTE_EINVAL, "%s: the stream declares no fields", where);
        return sp->read_fields(sp, ld->ds->fields, r, req, ld->nlf, where, err);
    }
    if (ld->ds->fmt->read_fields_ctx) { /* fields transformed per epoch (audio crops) */
        ch_sample_ctx c = {ld->o.seed, ld->sampler.epoch, (int)ld->o.transform, &w->fmt_state};
        return ld->ds->fmt->read_fields_ctx(ld->ds, idx, req, ld->nlf, &c, &w->rbuf,
                                            ld->o.max_sample_bytes, err);
    }
    return ld->ds->fmt->read_fields(ld->ds, idx, req, ld->nlf, &w->rbuf, ld->o.max_sample_bytes,
                                    err);
}

/* Slot for batch seq, assigning slots in batch order; NULL on cancel. */
static slot *acquire_slot(chute_loader *ld, uint64_t seq, uint64_t gen)
{
    pthread_mutex_lock(&ld->mu);
    slot *s = NULL;
    for (;;) {
        if (ld->gen != gen || ld->shutdown)
            break;
        if (seq < ld->next_assign) {
            s = &ld->slots[ld->seqmap[seq % ld->nslots]];
            break;
        }
        /* Assign the next batch in order to a free slot, if any. */
        uint32_t f = UINT32_MAX;
        for (uint32_t i = 0; i < ld->nslots; i++)
            if (ld->slots[i].state == SLOT_FREE) {
                f = i;
                break;
            }
        if (f == UINT32_MAX) {
            pthread_cond_wait(&ld->slot_cv, &ld->mu);
            continue;
        }
        uint64_t b = ld->next_assign++;
        slot *n = &ld->slots[f];
        uint64_t per = ld->sampler.per_rank, B = ld->o.batch_size;
        uint64_t cnt = per - b * B < B ? per - b * B : B;
        if (ld->st) {
            cnt = ch_stream_batch_count(ld->st, b - ld->first_batch);
            n->sgen = ld->gen;
        }
        n->state = SLOT_FILLING;
        n->seq = b;
        n->count = (uint32_t)cnt;
        n->epoch = ld->epoch;
        n->failed = 0;
        n->fail_pos = UINT64_MAX;
        n->fail_code = 0;
        n->errmsg[0] = '\0';
        atomic_store(&n->remaining, (uint32_t)cnt);
        ld->seqmap[b % ld->nslots] = f;
    }
    pthread_mutex_unlock(&ld->mu);
    return s;
}

static void fail_slot(chute_loader *ld, slot *s, uint64_t pos, int code, const char *where,
                      const char *reason, const char *extra);
static void describe_sample(chute_loader *ld, uint64_t idx, char *where, size_t n);

/*
 * MixUp / CutMix (options mixup, cutmix; src/ops/mix.c).  They need the
 * whole batch (sample i is mixed with sample i - 1), so they run once per
 * batch, in the worker that finishes its last sample, before the batch is
 * marked ready: the consumer's thread (the training loop) never pays for
 * them, and the other workers meanwhile go on filling the next slots.
 * The draw is keyed by (seed, epoch, the global position of the batch's
 * first sample: start + rank + first * world), the same whichever worker
 * finishes the batch, and the same after a resume that starts the batch
 * at the same position.  A failed batch is not mixed (its error is what
 * the consumer gets).
 */
static void mix_batch(chute_loader *ld, worker *w, slot *s)
{
    pthread_mutex_lock(&ld->mu);
    int failed = s->failed;
    pthread_mutex_unlock(&ld->mu);
    if (failed || s->count == 0)
        return;
    uint64_t first = s->seq * ld->o.batch_size;
    uint64_t key = ld->sampler.start + ld->o.rank + first * ld->o.world_size;
    ch_mix_draw d;
    ch_mix_draw_batch(&ld->mix, ld->o.seed, ld->sampler.epoch, key, ld->o.size, ld->o.size, &d);
    if (ch_buf_reserve(&w->mixbuf, ld->sample_bytes) != CHUTE_OK) { /* once per worker */
        fail_slot(ld, s, UINT64_MAX, CHUTE_ENOMEM, "", "out of memory for mixing", NULL);
        return;
    }
    uint64_t t0 = ch_now_ns();
    int64_t bad = ch_mix_apply(&d, &ld->out, s->data, s->count, s->labels, ld->mix.classes,
                               s->soft, w->mixbuf.data);
    /* The transform stage's busy time (doctor, bench) includes mixing;
     * its sample count does not change. */
    ch_stage_add(&w->stats->transform, 0, 0, ch_now_ns() - t0);
    if (bad >= 0) {
        char where[512], why[160];
        uint64_t idx = s->indices[bad];
        describe_sample(ld, ld->st ? s->recs[bad] : idx, where, sizeof where);
        snprintf(why, sizeof why, "label %lld is outside 0..%u (num_classes %u) for mixup/cutmix",
                 (long long)s->labels[bad], ld->mix.classes - 1, ld->mix.classes);
        fail_slot(ld, s, (uint64_t)bad, CHUTE_EINVAL, where, why, NULL);
    }
}

static void finish_task(chute_loader *ld, worker *w, slot *s)
{
    if (atomic_fetch_sub_explicit(&s->remaining, 1, memory_order_acq_rel) == 1) {
        if (ld->mix.classes)
            mix_batch(ld, w, s);
        chute_error gerr = {0};
        if (ld->gpu && ch_cuda_loader_submit(ld->gpu, s->handle.index, s->count, &gerr))
            fail_slot(ld, s, UINT64_MAX, gerr.code, "copying the batch to the device",
                      gerr.message, NULL);
        pthread_mutex_lock(&ld->mu);
        s->state = SLOT_READY;
        pthread_cond_broadcast(&ld->ready_cv);
        pthread_mutex_unlock(&ld->mu);
    }
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* fill_sample, retrying I/O errors with backoff; the last status. */
static int make_sample(chute_loader *ld, worker *w, uint64_t idx, uint8_t *dst, slot *s,
                       uint64_t pos, uint64_t gen, chute_error *err)
{
    int rc = fill_record(ld, w, idx, dst, s, pos, err);
    int attempts = 1;
    while (rc != CHUTE_OK && ch_error_kind(rc) == CH_ERR_IO && attempts < IO_ATTEMPTS &&
           atomic_load_explicit(&ld->cancel_gen, memory_order_acquire) == gen &&
           atomic_load_explicit(&ld->io_fail_gen, memory_order_acquire) != gen + 1) {
        sleep_ms(io_backoff_ms[attempts - 1]);
        ch_counter_inc(&w->stats->io_retries);
        attempts++;
        rc = fill_record(ld, w, idx, dst, s, pos, err);
    }
    if (rc != CHUTE_OK && ch_error_kind(rc) == CH_ERR_IO && attempts > 1) {
        size_t n = strnlen(err->message, sizeof err->message);
        snprintf(err->message + n, sizeof err->message - n, " (failed %d times)", attempts);
    }
    return rc;
}

/* "where: reason", without repeating the location when the reason already
 * names it (I/O messages carry the path; a WebDataset sample described as
 * "FILE@OFFSET:KEY" says "FILE@OFFSET: sample \"KEY\"" in its reasons). */
static void locate(char *out, size_t n, const char *where, const char *reason)
{
    /* "FILE@DIGITS:KEY": the reason may begin "FILE@DIGITS: " */
    const char *colon = strrchr(where, ':'), *at = colon ? colon : where;
    while (at > where && at[-1] >= '0' && at[-1] <= '9')
        at--;
    size_t head = colon && at < colon && at > where && at[-1] == '@' ? (size_t)(colon - where) : 0;
    if (!where[0] || strstr(reason, where) ||
        (head && !strncmp(reason, where, head) && reason[head] == ':'))
        snprintf(out, n, "%s", reason);
    else
        snprintf(out, n, "%s: %s", where, reason);
}

/* Mark the batch failed with `code` unless an earlier sample already did. */
static void fail_slot(chute_loader *ld, slot *s, uint64_t pos, int code, const char *where,
                      const char *reason, const char *extra)
{
    pthread_mutex_lock(&ld->mu);
    if (!s->failed || pos < s->fail_pos) {
        s->failed = 1;
        s->fail_pos = pos;
        s->fail_code = code;
        locate(s->errmsg, sizeof s->errmsg, where, reason);
        size_t n = strnlen(s->errmsg, sizeof s->errmsg);
        if (extra)
            snprintf(s->errmsg + n, sizeof s->errmsg - n, "%s", extra);
    }
    pthread_mutex_unlock(&ld->mu);
}

/* A sample of run `gen` failed for good with an I/O error: the run has
 * failed (the storage, not the sample, is at fault), and its other
 * samples fail at once with this message (run_task) instead of each
 * retrying the storage again: the time to an error is one read's retry
 * budget, not one per sample. */
static void io_fail_run(chute_loader *ld, uint64_t gen, int code, const char *where,
                        const char *reason)
{
    pthread_mutex_lock(&ld->mu);
    if (ld->gen == gen && atomic_load_explicit(&ld->io_fail_gen, memory_order_relaxed) != gen + 1) {
        ld->io_fail_code = code;
        locate(ld->io_fail_msg, sizeof ld->io_fail_msg, where, reason);
        atomic_store_explicit(&ld->io_fail_gen, gen + 1, memory_order_release);
    }
    pthread_mutex_unlock(&ld->mu);
}

/* A skipped sample: count it and leave its message for the consumer.
 * The count is of samples, not attempts: a bad sample drawn again as
 * another's replacement in the same epoch is not counted twice, so the
 * count never exceeds the samples the epoch holds (issue 31.5).  The
 * bitset is made at the first skip (skips are rare; this path takes the
 * mutex anyway) and cleared at each epoch; streams, whose handles are not
 * dataset indices, count every skip. */
static void note_skip(chute_loader *ld, worker *w, uint64_t idx, const char *where,
                      const char *reason)
{
    char m[1100];
    locate(m, sizeof m, where, reason);
    pthread_mutex_lock(&ld->mu);
    int count = 1;
    if (!ld->st && idx < ld->ds->n) {
        if (!ld->skip_seen)
            ld->skip_seen = calloc((size_t)(ld->ds->n + 63) / 64, sizeof *ld->skip_seen);
        if (ld->skip_seen) {
            uint64_t bit = 1ull << (idx % 64);
            count = !(ld->skip_seen[idx / 64] & bit);
            ld->skip_seen[idx / 64] |= bit;
        }
    }
    if (count)
        ch_counter_inc(&w->stats->corrupt);
    snprintf(ld->skip_msg, sizeof ld->skip_msg, "skipped %s", m);
    ld->skip_new = 1;
    pthread_mutex_unlock(&ld->mu);
}

/* Where sample idx is, for messages: the format's description, or for a
 * stream "NAME@OFFSET (sample 'KEY')", which the record's own messages
 * begin with. */
static void describe_sample(chute_loader *ld, uint64_t idx, char *where, size_t n)
{
    if (ld->st) {
        const ch_stream_rec *r = ch_stream_rec_of(ld->st, (uint32_t)idx);
        snprintf(where, n, "%s@%llu (sample '%s')", ch_stream_name(ld->st),
                 (unsigned long long)r->offset, r->key);
    } else {
        ld->ds->fmt->describe(ld->ds, idx, where, n);
    }
}

static void run_task(chute_loader *ld, worker *w, slot *s, uint64_t seq, uint64_t pos,
                     uint64_t gen, uint64_t sh)
{
    const uint64_t B = ld->o.batch_size;
    uint64_t k = seq * B + pos; /* this rank's position in the epoch */
    uint64_t idx = ld->st ? sh : ch_sampler_get(&ld->sampler, k);
    if (ld->st) {
        s->recs[pos] = (uint32_t)sh;
        w->rng_key = k;
    } else { /* copy c of a repeated sample draws as sample idx + c * N (sampler.h) */
        w->rng_key = idx + ch_sampler_copy(&ld->sampler, k) * ld->sampler.base;
    }
    uint8_t *dst = s->data + pos * ld->sample_bytes;
    if (atomic_load_explicit(&ld->io_fail_gen, memory_order_acquire) == gen + 1) {
        pthread_mutex_lock(&ld->mu); /* the run has failed (io_fail_run): nothing to read */
        int code = ld->io_fail_code;
        char msg[sizeof ld->io_fail_msg];
        memcpy(msg, ld->io_fail_msg, sizeof msg);
        pthread_mutex_unlock(&ld->mu);
        fail_slot(ld, s, pos, code, "", msg, NULL);
        finish_task(ld, w, s);
        return;
    }
    chute_error err = {0};
    int rc = make_sample(ld, w, idx, dst, s, pos, gen, &err);
    w->ra_task = UINT64_MAX; /* replacements read for themselves */
    uint64_t used = idx;
    if (rc != CHUTE_OK) {
        char where[512];
        describe_sample(ld, idx, where, sizeof where);
        int kind = ch_error_kind(rc);
        if (kind != CH_ERR_CONTENT) {
            fail_slot(ld, s, pos, rc, where, err.message, NULL);
            if (kind == CH_ERR_IO)
                io_fail_run(ld, gen, rc, where, err.message);
        } else if (ld->o.on_corrupt == CHUTE_CORRUPT_FAIL) {
            ch_counter_inc(&w->stats->corrupt);
            fail_slot(ld, s, pos, CHUTE_ECORRUPT, where, err.message, NULL);
        } else {
            note_skip(ld, w, idx, where, err.message);
            /* Deterministic replacement from this rank's epoch.  Each
             * replacement's failure is reported with its own location and
             * reason; `err` keeps the original sample's. */
            ch_rng r = ch_rng_for(ld->o.seed ^ 0x5245504cull, ld->sampler.epoch, k);
            chute_error rerr = {0};
            char rwhere[512] = "";
            int done = 0;
            for (int attempt = 0; attempt < REPLACE_ATTEMPTS && !done; attempt++) {
                uint64_t k2;
                if (ld->st) { /* streams: another sample of the same batch (all published) */
                    k2 = seq * B + ch_rng_below(&r, s->count);
                    used = ch_stream_handle_at(ld->st, k2 - ld->first_batch * B);
                    w->rng_key = k2;
                } else {
                    k2 = ch_rng_below(&r, ld->sampler.per_rank);
                    used = ch_sampler_get(&ld->sampler, k2);
                    w->rng_key = used + ch_sampler_copy(&ld->sampler, k2) * ld->sampler.base;
                }
                rc = make_sample(ld, w, used, dst, s, pos, gen, &rerr);
                if (rc == CHUTE_OK)
                    break;
                describe_sample(ld, used, rwhere, sizeof rwhere);
                if (ch_error_kind(rc) != CH_ERR_CONTENT) {
                    char extra[600];
                    snprintf(extra, sizeof extra, " (while replacing skipped sample %s)", where);
                    fail_slot(ld, s, pos, rc, rwhere, rerr.message, extra);
                    if (ch_error_kind(rc) == CH_ERR_IO)
                        io_fail_run(ld, gen, rc, rwhere, rerr.message);
                    done = 1;
                } else {
                    note_skip(ld, w, used, rwhere, rerr.message);
                }
            }
            if (rc != CHUTE_OK && !done) {
                char extra[1100];
                int n = snprintf(extra, sizeof extra,
                                 " (and %d replacement samples failed too; the last, ",
                                 REPLACE_ATTEMPTS);
                locate(extra + n, sizeof extra - (size_t)n - 1, rwhere, rerr.message);
                strcat(extra, ")");
                fail_slot(ld, s, pos, CHUTE_ECORRUPT, where, err.message, extra);
            }
        }
    }
    if (ld->st) { /* label and input position of the record (stream.h) */
        const ch_stream_rec *r = ch_stream_rec_of(ld->st, (uint32_t)used);
        s->labels[pos] = r->label;
        s->indices[pos] = r->ordinal;
    } else {
        s->labels[pos] = ld->ds->labels[used];
        s->indices[pos] = used;
    }
    finish_task(ld, w, s);
}

/* Streams: whether run `gen` is still on (ch_stream_claim's wait). */
struct run_alive {
    chute_loader *ld;
    uint64_t gen;
};
static int run_alive_fn(void *p)
{
    const struct run_alive *a = p;
    return atomic_load_explicit(&a->ld->cancel_gen, memory_order_acquire) == a->gen;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    chute_loader *ld = w->ld;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->shutdown &&
               (!ld->running || atomic_load(&ld->next_task) >= ld->total_tasks))
            pthread_cond_wait(&ld->work_cv, &ld->mu);
        if (ld->shutdown)
            break;
        uint64_t gen = ld->gen;
        uint64_t first = ld->first_batch, total = ld->total_tasks;
        ld->active++;
        pthread_mutex_unlock(&ld->mu);

        const uint64_t B = ld->o.batch_size;
        uint64_t cur_seq = UINT64_MAX;
        slot *s = NULL;
        for (;;) {
            if (atomic_load_explicit(&ld->cancel_gen, memory_order_acquire) != gen)
                break;
            uint64_t t, sh = 0;
            if (ld->st) { /* streams: the next published position (stream.h) */
                struct run_alive ra = {ld, gen};
                uint32_t h;
                if (ch_stream_claim(ld->st, run_alive_fn, &ra, &t, &h) != CHUTE_OK)
                    break;
                sh = h;
            } else {
                t = atomic_fetch_add_explicit(&ld->next_task, 1, memory_order_relaxed);
            }
            if (t >= total)
                break;
            uint64_t seq = first + t / B;
            if (seq != cur_seq) {
                s = acquire_slot(ld, seq, gen);
                if (!s)
                    break;
                if (ld->gpu) /* the slot's last copy to the device has read it */
                    ch_cuda_loader_host_wait(ld->gpu, s->handle.index);
                cur_seq = seq;
            }
            w->ra_task = ld->ra ? t : UINT64_MAX;
            run_task(ld, w, s, seq, t % B, gen, sh);
            if (ld->ra)
                ch_ra_done(ld->ra, t);
        }

        pthread_mutex_lock(&ld->mu);
        if (--ld->active == 0)
            pthread_cond_broadcast(&ld->idle_cv);
        /* Wait for the next run before looking for work again. */
        while (!ld->shutdown && ld->gen == gen)
            pthread_cond_wait(&ld->work_cv, &ld->mu);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* ------------------------------------------------------------------ */

int ch_loader_options_resolve(const chute_loader_options *in, chute_loader_options *o,
                              chute_error *err)
{
    *o = in ? *in : (chute_loader_options){0};
    /* The table's rows (loader_options.def): a zero field takes the
     * default, then every value must be within its bounds. */
    const ch_loader_opt *t = ch_loader_opts();
    for (int i = 0; i < CH_LOPT_COUNT; i++) {
        const ch_loader_opt *d = &t[i];
        if ((d->layers & CH_OPT_ZERO_OFF) && ch_loader_opt_get(o, d) == ch_opt_off_value(d)) {
            ch_loader_opt_set(o, d, 0); /* off, asked for explicitly */
            continue;
        }
        if (d->kind == CH_OPT_BOOL || ch_loader_opt_get(o, d) != 0)
            continue;
        if (d->layers & CH_OPT_AUTO) {
            if (i == CH_LOPT_workers) {
                ch_cpu_budget cpu;
                ch_cpu_budget_get(&cpu);
                ch_loader_opt_set(o, d, CH_MIN(CH_MAX(cpu.cpus, 1u), (uint32_t)d->max));
            }
            continue; /* resize_size: below, from size and crop_pct */
        }
        ch_loader_opt_set(o, d, d->def);
    }
    for (int i = 0; i < CH_LOPT_COUNT; i++) {
        const ch_loader_opt *d = &t[i];
        uint64_t v = ch_loader_opt_get(o, d);
        if (d->kind == CH_OPT_BOOL || ((d->layers & CH_OPT_AUTO) && v == 0))
            continue;
        if (v < d->min || v > d->max)
            return ch_err(err, CHUTE_EINVAL, "%s %llu is out of range (%llu..%llu)", d->name,
                          (unsigned long long)v, (unsigned long long)d->min,
                          (unsigned long long)d->max);
    }
    /* The other rows (enums, floats): each checked, then a float left
     * all zero takes its default (crop_pct, computed, below). */
    int rc = ch_opt_rows_check(o, ch_loader_xopts(), ch_loader_xopt_count(), err);
    if (rc != CHUTE_OK)
        return rc;
    for (int i = 0; i < ch_loader_xopt_count(); i++) {
        const ch_opt_row *d = &ch_loader_xopts()[i];
        if (d->kind != CH_OPT_F32 || (d->layers & CH_OPT_AUTO))
            continue;
        float *v = (float *)(void *)((char *)o + d->offset);
        int zero = 1;
        for (unsigned c = 0; c < d->n; c++)
            zero &= v[c] == 0;
        if (zero)
            memcpy(v, d->fdef, d->n * sizeof *v);
    }
    if (o->layout == CHUTE_LAYOUT_DEFAULT)
        o->layout = o->dtype == CHUTE_DTYPE_UINT8 ? CHUTE_LAYOUT_NHWC : CHUTE_LAYOUT_NCHW;
    if (o->rank >= o->world_size)
        return ch_err(err, CHUTE_EINVAL, "rank %u must be below world_size %u", o->rank,
                      o->world_size);
    if (o->scale_min_pct > o->scale_max_pct)
        return ch_err(err, CHUTE_EINVAL, "scale_min_pct %u is above scale_max_pct %u",
                      o->scale_min_pct, o->scale_max_pct);
    for (int c = 0; c < 3; c++) {
        /* The normalize constants themselves must be finite too (a std of
         * 1e-40 is positive, but 1 / (255 * std) is inf in float). */
        float mul = 1.0f / (255.0f * o->std[c]), add = -o->mean[c] / o->std[c];
        if (!isfinite(mul) || !isfinite(add))
            return ch_err(err, CHUTE_EINVAL,
                          "mean[%d] = %g, std[%d] = %g give a non-finite normalization", c,
                          (double)o->mean[c], c, (double)o->std[c]);
    }
    /* Eval resize side: timm's floor(size / crop_pct), or given. */
    if (o->crop_pct != 0 && o->resize_size != 0)
        return ch_err(err, CHUTE_EINVAL, "set crop_pct or resize_size, not both");
    if (!o->resize_size) {
        if (!o->crop_pct)
            o->crop_pct = 0.875f;
        o->resize_size = ch_eval_resize_size(o->size, o->crop_pct);
    }
    if (o->resize_size < o->size || o->resize_size > ch_loader_opts()[CH_LOPT_resize_size].max)
        return ch_err(err, CHUTE_EINVAL, "resize_size %u (the eval resize side) must be in [size %u, %llu]",
                      o->resize_size, o->size,
                      (unsigned long long)ch_loader_opts()[CH_LOPT_resize_size].max);
    return CHUTE_OK;
}

/* The `fields` option: look each name up and lay its arrays out in a slot
 * after *end (advanced past them).  Sizes are bounded (64 fields, each at
 * most max_sample_bytes per sample) but every product is still checked. */
static int plan_fields(chute_loader *ld, size_t *end, chute_error *err)
{
    const chute_dataset *ds = ld->ds;
    const size_t A = BATCH_ALIGN;
    const uint64_t B = ld->o.batch_size;
    ld->nlf = 0;
    if (!ld->o.fields || !*ld->o.fields)
        return CHUTE_OK;
    char names[CH_FIELD_MAX][CH_FIELD_NAME_MAX];
    int n = ch_split_names(ld->o.fields, names, CH_FIELD_MAX);
    if (n < 0)
        return ch_err(err, CHUTE_EINVAL, "fields: more than %d names, or one longer than %d bytes",
                      CH_FIELD_MAX, CH_FIELD_NAME_MAX - 1);
    for (int k = 0; k < n; k++) {
        int fi = ch_ds_field_find(ds, names[k]);
        if (fi < 0 || !ds->fmt->read_fields) {
            char have[600] = "";
            size_t hl = 0;
            for (uint32_t j = 0; j < ds->nfields && hl + 2 < sizeof have; j++)
                hl += (size_t)snprintf(have + hl, sizeof have - hl, "%s%s", j ? ", " : "",
                                       ds->fields[j].name);
            return ch_err(err, CHUTE_EINVAL, "fields: the dataset has no field \"%s\" (it has: %s)",
                          names[k], ds->nfields ? have : "none");
        }
        for (int j = 0; j < k; j++)
            if (!strcmp(names[j], names[k]))
                return ch_err(err, CHUTE_EINVAL, "fields: \"%s\" is listed twice", names[k]);
        const ch_field *f = &ds->fields[fi];
        lfield *l = &ld->lf[ld->nlf++];
        l->field = (uint32_t)fi;
        l->is_bytes = f->kind == CHUTE_FIELD_BYTES;
        uint64_t per = l->is_bytes ? ld->o.field_bytes : ch_field_sample_bytes(f);
        if (!l->is_bytes && !f->known)
            return ch_err(err, CHUTE_EINVAL,
                          "fields: \"%s\": its shape is unknown (no sample's value could be read "
                          "at open)", f->name);
        uint64_t arr;
        if ((!l->is_bytes && per == 0) || per > ld->o.max_sample_bytes ||
            __builtin_mul_overflow(per, B, &arr) || arr > SIZE_MAX / 4 ||
            *end > SIZE_MAX / 4 - arr - 2 * A - B * 8)
            return ch_err(err, CHUTE_ENOMEM, "fields: \"%s\": %llu bytes per sample are too many",
                          f->name, (unsigned long long)per);
        l->per = (size_t)per;
        l->off = (*end + A - 1) & ~(A - 1);
        *end = l->off + (size_t)arr;
        if (l->is_bytes) {
            l->len_off = (*end + A - 1) & ~(A - 1);
            *end = l->len_off + (size_t)B * sizeof(int64_t);
        }
    }
    return CHUTE_OK;
}

/* The pump tells us the run's end (stream.h): its number of batches and
 * how the stream ended.  A stale run's news is dropped. */
static void stream_end(void *ctx, uint64_t gen, uint64_t nbatches, int status,
                       const chute_error *err)
{
    chute_loader *ld = ctx;
    pthread_mutex_lock(&ld->mu);
    if (gen == ld->gen && ld->running) {
        ld->nbatches = ld->first_batch + nbatches;
        ld->st_status = status;
        ld->st_reported = 0;
        snprintf(ld->st_msg, sizeof ld->st_msg, "%s", err ? err->message : "");
        pthread_cond_broadcast(&ld->ready_cv);
    }
    pthread_mutex_unlock(&ld->mu);
}

static int stream_create(chute_loader *ld, chute_error *err)
{
    const chute_loader_options *o = &ld->o;
    ch_stream_config c = {
        .spec = ld->ds->stream,
        .batch_size = o->batch_size,
        .nslots = ld->nslots,
        .buffer = o->no_shuffle ? 1 : o->shuffle_buffer,
        .seed = o->seed,
        .max_samples = o->stream_samples,
        .drop_last = o->drop_last,
        .timeout_ms = (int)o->stream_timeout_ms,
        .max_bytes = o->max_sample_bytes,
        .on_end = stream_end,
        .ctx = ld,
        .rank = o->rank,
        .world = o->world_size,
    };
    int rc = ch_stream_create(&c, &ld->st, err);
    if (rc != CHUTE_OK)
        return rc;
    for (uint32_t i = 0; i < ld->nslots; i++) {
        ld->slots[i].recs = calloc(o->batch_size, sizeof *ld->slots[i].recs);
        if (!ld->slots[i].recs)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    return CHUTE_OK;
}

/* Batches of the sampler's current run (its per_rank positions). */
static uint64_t run_batches_of(const chute_loader *ld)
{
    uint64_t per = ld->sampler.per_rank, B = ld->o.batch_size;
    return ld->o.drop_last ? per / B : per / B + (per % B != 0);
}

/* The stats thread's tick (exporter.c, every 250 ms): one snapshot... */
static void stats_snap(void *user, chute_stats *st) { chute_loader_stats(user, st); }

/* ...into the segment's counter slots. */
static void stats_fill(void *user, const chute_stats *sp, uint64_t *c)
{
    (void)user;
    const chute_stats st = *sp;
    c[CH_SHM_WALL_NS] = st.wall_ns;
    c[CH_SHM_SAMPLES] = st.samples;
    c[CH_SHM_BATCHES] = st.batches;
    c[CH_SHM_WAIT_NS] = st.wait_ns;
    c[CH_SHM_WINDOW_NS] = st.window_ns;
    c[CH_SHM_WINDOW_SAMPLES] = st.window_samples;
    c[CH_SHM_WINDOW_WAIT_NS] = st.window_wait_ns;
    c[CH_SHM_READ_BUSY_NS] = st.read.busy_ns;
    c[CH_SHM_DECODE_BUSY_NS] = st.decode.busy_ns;
    c[CH_SHM_TRANSFORM_BUSY_NS] = st.transform.busy_ns;
    c[CH_SHM_READ_ITEMS] = st.read.items;
    c[CH_SHM_READ_BYTES] = st.read.bytes;
    c[CH_SHM_QUEUE_FILL_SUM] = st.queue_fill_sum;
    c[CH_SHM_QUEUE_CAPACITY] = st.queue_capacity;
    c[CH_SHM_WORKERS] = st.workers;
    c[CH_SHM_CORRUPT] = st.corrupt;
    c[CH_SHM_IO_RETRIES] = st.io_retries;
    c[CH_SHM_CACHE_HITS] = st.cache_hits;
    c[CH_SHM_CACHE_MISSES] = st.cache_misses;
    c[CH_SHM_TIER_HITS] = st.tier_ram_hits + st.tier_disk_hits;
    c[CH_SHM_TIER_FETCHES] = st.tier_fetches;
    c[CH_SHM_READ_P50_NS] = st.read_lat_p50_ns;
    c[CH_SHM_READ_P99_NS] = st.read_lat_p99_ns;
    c[CH_SHM_LAST_WAIT_NS] = st.last_wait_ns;
    c[CH_SHM_LAST_STEP_NS] = st.last_step_ns;
}

/* Option augment: parsed once; the combinations it cannot serve refused.
 * The string is borrowed and not kept. */
static int loader_aug_open(chute_loader *ld, chute_error *err)
{
    chute_loader_options *o = &ld->o;
    int rc = ch_aug_parse(o->augment, &ld->aug, err);
    o->augment = NULL;
    if (rc != CHUTE_OK || ld->aug.n == 0)
        return rc;
    if (o->gpu_decode_share)
        return ch_err(err, CHUTE_EINVAL, "augment: not with gpu_decode_share (nvJPEG's "
                      "samples are resized on the GPU, where the ops do not run yet)");
    if (o->decoded_cache_bytes && o->transform != CHUTE_TRANSFORM_TRAIN)
        return ch_err(err, CHUTE_EINVAL, "augment: decoded_cache_bytes keeps finished samples "
                      "under transform eval/none, which would freeze their augmentation; "
                      "use transform train or no cache");
    for (uint32_t k = 0; k < ld->aug.n; k++) {
        const ch_aug_step *st = &ld->aug.step[k];
        char why[200];
        if (st->op->check_dtype && st->op->check_dtype(st->p, o->dtype, why, sizeof why))
            return ch_err(err, CHUTE_EINVAL, "augment: %s: %s", st->op->name, why);
    }
    int on_gpu = o->device && *o->device && strcmp(o->device, "cpu") != 0;
    for (uint32_t k = 0; k < ld->aug.n && on_gpu; k++)
        if (ld->aug.step[k].op->stage == CH_AUG_OUTPUT)
            return ch_err(err, CHUTE_EINVAL, "augment: %s acts after normalize, which device "
                          "%s does on the GPU: not supported yet", ld->aug.step[k].op->name,
                          o->device);
    return CHUTE_OK;
}

/* Options mixup/cutmix and repeats: the combinations they cannot serve
 * refused (mixing runs on the host's finished batch, see mix_batch). */
static int loader_mix_open(chute_loader *ld, chute_error *err)
{
    const chute_loader_options *o = &ld->o;
    if (o->repeats > 1 && (ld->ds->stream || (o->shuffle == CHUTE_SHUFFLE_SHARDS && !o->no_shuffle)))
        return ch_err(err, CHUTE_EINVAL, "repeats: not with %s (the copies of a sample are "
                      "consecutive positions of one global order)",
                      ld->ds->stream ? "a stream" : "shuffle shards");
    if (!(o->mixup > 0) && !(o->cutmix > 0))
        return CHUTE_OK;
    const char *what = o->mixup > 0 ? "mixup" : "cutmix";
    if (o->mixup > 0 && o->dtype == CHUTE_DTYPE_UINT8)
        return ch_err(err, CHUTE_EINVAL, "mixup: needs a float dtype (a blend of uint8 "
                      "images is not uint8; torchvision's MixUp refuses uint8 too); cutmix "
                      "works on uint8");
    if (o->device && *o->device && strcmp(o->device, "cpu") != 0)
        return ch_err(err, CHUTE_EINVAL, "%s: not with device %s (the batch is mixed on the "
                      "host after it is finished; docs/AUGMENT.md says how to mix on the "
                      "device)", what, o->device);
    if (ld->ds->no_image)
        return ch_err(err, CHUTE_EINVAL, "%s: the dataset's samples have no image", what);
    uint32_t classes = o->num_classes ? o->num_classes : chute_dataset_num_classes(ld->ds);
    if (classes == 0)
        return ch_err(err, CHUTE_EINVAL, "%s: num_classes is needed (the dataset has no class "
                      "count to take it from)", what);
    ld->mix.mixup = o->mixup;
    ld->mix.cutmix = o->cutmix;
    ld->mix.switch_p = o->mix_switch;
    ld->mix.classes = classes;
    ld->o.num_classes = classes;
    return CHUTE_OK;
}

/* Option geometry: parsed once; the combinations it cannot serve yet
 * refused.  The string is borrowed and not kept. */
static int loader_geo_open(chute_loader *ld, chute_error *err)
{
    chute_loader_options *o = &ld->o;
    int rc = ch_geo_parse(o->geometry, &ld->geo, err);
    o->geometry = NULL;
    if (rc != CHUTE_OK || ld->geo.n == 0)
        return rc;
    if (ld->aug.n)
        return ch_err(err, CHUTE_EINVAL, "geometry: not with augment yet");
    if (o->gpu_decode_share)
        return ch_err(err, CHUTE_EINVAL, "geometry: not with gpu_decode_share (nvJPEG's "
                      "samples are resized on the GPU)");
    if (o->decoded_cache_bytes)
        return ch_err(err, CHUTE_EINVAL, "geometry: not with decoded_cache_bytes yet");
    return CHUTE_OK;
}

/* Open the exporters the options ask for and start the one stats thread
 * that feeds them; no thread when every one is off.  The segment is
 * optional (NULL: no /dev/shm, ...); a tensorboard or metrics failure
 * fails the create. */
static int start_exporters(chute_loader *ld, const chute_loader_options *o, const char *root,
                           chute_error *err)
{
    ch_tboard *tb = NULL;
    ch_metrics *m = NULL;
    ch_shm *shm = NULL;
    int rc = CHUTE_OK;
    if (o->tensorboard && *o->tensorboard && (rc = ch_tboard_open(o->tensorboard, &tb, err)))
        return rc;
    if (o->metrics_port || (o->metrics_file && *o->metrics_file)) {
        rc = ch_metrics_start(ld, o, root, &m, err);
        if (rc != CHUTE_OK) {
            ch_tboard_close(tb);
            return rc;
        }
    }
    if (o->stats_shm) {
        chute_stats st;
        uint64_t c[CH_SHM_NCOUNTERS] = {0};
        chute_loader_stats(ld, &st);
        stats_fill(ld, &st, c);
        shm = ch_shm_create(CH_SHM_KIND_LOADER, o->rank, o->world_size, root, NULL, NULL);
        if (shm)
            ch_shm_publish(shm, c);
    }
    if (!tb && !m && !shm)
        return CHUTE_OK;
    ch_exporter_src src = {.user = ld, .snap = stats_snap, .fill = stats_fill};
    rc = ch_exporter_start(&src, tb, m, shm, &ld->stats, err);
    if (rc != CHUTE_OK) {
        ch_shm_close(shm);
        ch_metrics_stop(m);
        ch_tboard_close(tb);
        return rc;
    }
    ld->tb = tb;
    return CHUTE_OK;
}

int chute_loader_create(const chute_dataset *ds, const chute_loader_options *opt,
                        chute_loader **out_loader, chute_error *err)
{
    if (!ds || !out_loader)
        return ch_err(err, CHUTE_EINVAL, "chute_loader_create: ds and out_loader are required");
    *out_loader = NULL;
    chute_loader *ld = calloc(1, sizeof *ld);
    if (!ld)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ld->t_created = ch_now_ns();
    ld->pid = getpid();
    ld->ds = ds;
    int rc = ch_loader_options_resolve(opt, &ld->o, err);
    if (rc) {
        free(ld);
        return rc;
    }
    chute_loader_options *o = &ld->o;
    rc = loader_aug_open(ld, err);
    if (rc == CHUTE_OK)
        rc = loader_mix_open(ld, err);
    if (rc == CHUTE_OK)
        rc = loader_geo_open(ld, err);
    if (rc) {
        free(ld);
        return rc;
    }
    if (ds->stream) {
        /* A stream has no N: the sampler is unused (one placeholder sample);
         * each rank reads its own stream; no read-ahead or decoded cache
         * (both key on sample ids, and a stream's records are reused). */
        o->shuffle = CHUTE_SHUFFLE_GLOBAL;
        o->readahead = 0;
        o->decoded_cache_bytes = 0;
    }
    rc = ch_sampler_init(&ld->sampler, ds->stream ? 1 : ds->n, o->seed, !o->no_shuffle,
                         ds->stream ? 0 : o->rank, ds->stream ? 1 : o->world_size,
                         o->remainder == CHUTE_REMAINDER_DROP);
    if (rc) {
        free(ld);
        return ch_err(err, rc, rc == CHUTE_ENOMEM ? "out of memory for the sampler"
                                                  : "invalid sampler settings");
    }
    if (o->repeats > 1 && (rc = ch_sampler_set_repeats(&ld->sampler, o->repeats)) != CHUTE_OK) {
        uint32_t reps = o->repeats;
        ch_sampler_free(&ld->sampler);
        free(ld);
        return ch_err(err, rc, "repeats: %u copies of %llu samples are too many", reps,
                      (unsigned long long)ds->n);
    }
    if (ld->sampler.per_rank == 0) {
        uint32_t world = o->world_size;
        ch_sampler_free(&ld->sampler);
        free(ld);
        return ch_err(err, CHUTE_EINVAL, "%llu samples cannot be split over %u ranks with DROP",
                      (unsigned long long)ds->n, world);
    }
    if (o->shuffle == CHUTE_SHUFFLE_SHARDS && !o->no_shuffle) {
        /* Shards mode: the format's units, then the order per epoch
         * (sampler.h).  Done here, once; set_epoch reuses the buffers. */
        uint64_t *first = NULL, nunits = 0;
        rc = ch_ds_units(ds, &first, &nunits, err);
        if (rc == CHUTE_OK) {
            rc = ch_sampler_use_units(&ld->sampler, first, nunits, o->shuffle_buffer);
            if (rc)
                ch_err(err, rc, rc == CHUTE_ENOMEM ? "out of memory for the shards sampler"
                                                   : "invalid units from the format");
        }
        if (rc) {
            ch_sampler_free(&ld->sampler);
            free(ld);
            return rc;
        }
    }
    ld->nbatches = ld->epoch_batches = run_batches_of(ld);
    if (ds->stream)
        ld->nbatches = UINT64_MAX; /* until the stream ends */

    ld->out.size = o->size;
    ld->out.dtype = o->dtype;
    ld->out.layout = o->layout;
    for (int c = 0; c < 3; c++) {
        if (o->no_normalize) {
            ld->out.mul[c] = 1.0f / 255.0f;
            ld->out.add[c] = 0;
        } else {
            ld->out.mul[c] = 1.0f / (255.0f * o->std[c]);
            ld->out.add[c] = -o->mean[c] / o->std[c];
        }
    }
    /* device "cuda[:N]": the workers make uint8 NHWC, the GPU the rest. */
    if (ds->no_image && o->device && *o->device && strcmp(o->device, "cpu") != 0) {
        ch_sampler_free(&ld->sampler);
        free(ld);
        return ch_err(err, CHUTE_EINVAL, "device: the dataset's samples have no image, so there "
                      "is nothing for the device to make; use the CPU (device \"cpu\")");
    }
    rc = ch_cuda_loader_open(o, &ld->out, &ld->gpu, err);
    if (rc) {
        ch_sampler_free(&ld->sampler);
        free(ld);
        return rc;
    }
    size_t esz = o->dtype == CHUTE_DTYPE_FLOAT32 ? 4 : o->dtype == CHUTE_DTYPE_FLOAT16 ? 2 : 1;
    ld->sample_bytes = (size_t)o->size * o->size * 3 * esz;
    if (ds->no_image) /* no pixels in a slot: labels, indices and fields */
        ld->sample_bytes = 0;
    /* Slot layout: pixels | labels | indices, each on a BATCH_ALIGN
     * boundary; slots start on 2 MiB boundaries so they can be backed by
     * huge pages.  The options are bounded (size <= 8192, batch <= 2^20,
     * slots <= 128), but the products are still checked. */
    const size_t A = BATCH_ALIGN, HUGE = 2u << 20;
    size_t pix = 0, ring_total = 0;
    size_t ids = ((size_t)o->batch_size * sizeof(int64_t) + A - 1) & ~(A - 1);
    ld->nslots = o->prefetch + o->max_held;
    if (__builtin_mul_overflow(ld->sample_bytes, (size_t)o->batch_size, &pix) ||
        pix > SIZE_MAX / 2 - 2 * ids - 2 * HUGE) {
        uint32_t bs = o->batch_size, sz = o->size;
        ch_sampler_free(&ld->sampler);
        free(ld);
        return ch_err(err, CHUTE_ENOMEM, "a batch of %u x %u x %u pixels is too large", bs, sz,
                      sz);
    }
    ld->labels_off = (pix + A - 1) & ~(A - 1);
    ld->indices_off = ld->labels_off + ids;
    size_t end = ld->indices_off + ids;
    rc = plan_fields(ld, &end, err);
    ld->o.fields = NULL; /* borrowed: read only here */
    if (rc == CHUTE_OK && ld->mix.classes) { /* soft labels: batch x classes float32, last */
        size_t soft;
        ld->soft_off = (end + A - 1) & ~(A - 1);
        if (__builtin_mul_overflow((size_t)o->batch_size * sizeof(float), (size_t)ld->mix.classes,
                                   &soft) ||
            soft > SIZE_MAX / 2 - ld->soft_off - HUGE)
            rc = ch_err(err, CHUTE_ENOMEM, "soft labels of %u x %u are too large",
                        o->batch_size, ld->mix.classes);
        else
            end = ld->soft_off + soft;
    }
    if (rc != CHUTE_OK) {
        ch_sampler_free(&ld->sampler);
        free(ld);
        return rc;
    }
    ld->batch_bytes = (end + HUGE - 1) & ~(HUGE - 1);
    if (__builtin_mul_overflow(ld->batch_bytes, (size_t)ld->nslots, &ring_total)) {
        uint32_t ns = ld->nslots;
        size_t bb = ld->batch_bytes;
        ch_sampler_free(&ld->sampler);
        free(ld);
        return ch_err(err, CHUTE_ENOMEM, "batch buffers of %u x %zu bytes are too large", ns, bb);
    }
    ld->ring_len = ring_total;

    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->work_cv, NULL);
    pthread_cond_init(&ld->slot_cv, NULL);
    pthread_cond_init(&ld->ready_cv, NULL);
    pthread_cond_init(&ld->idle_cv, NULL);

    ld->slots = calloc(ld->nslots, sizeof *ld->slots);
    ld->seqmap = calloc(ld->nslots, sizeof *ld->seqmap);
    void *ring = mmap(NULL, ld->ring_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                      0);
    if (ring == MAP_FAILED || !ld->slots || !ld->seqmap) {
        if (ring != MAP_FAILED)
            munmap(ring, ld->ring_len);
        ld->ring_mem = NULL;
        size_t mib = ld->ring_len >> 20;
        chute_loader_destroy(ld);
        return ch_err(err, CHUTE_ENOMEM, "cannot allocate %zu MiB of batch buffers", mib);
    }
    ld->ring_mem = ring;
#ifdef MADV_HUGEPAGE
    madvise(ring, ld->ring_len, MADV_HUGEPAGE); /* fewer faults and TLB misses; optional */
#endif
    /* Fault the ring in now rather than inside the first batches. */
    ch_pretouch(ring, ld->ring_len);
    for (uint32_t i = 0; i < ld->nslots; i++) {
        slot *s = &ld->slots[i];
        s->data = ld->ring_mem + i * ld->batch_bytes;
        s->labels = (int64_t *)(void *)(s->data + ld->labels_off);
        s->indices = (uint64_t *)(void *)(s->data + ld->indices_off);
        s->soft = ld->mix.classes ? (float *)(void *)(s->data + ld->soft_off) : NULL;
        s->handle.ld = ld;
        s->handle.index = i;
    }
    if (ld->gpu && (rc = ch_cuda_loader_attach(ld->gpu, ring, ld->ring_len, ld->nslots,
                                               ld->batch_bytes, err)) != CHUTE_OK) {
        chute_loader_destroy(ld);
        return rc;
    }

    if (o->decoded_cache_bytes && !ds->no_image) { /* caches images only */
        rc = ch_dcache_create(&ld->dc, o->decoded_cache_bytes, ds->n, err);
        if (rc != CHUTE_OK) {
            chute_loader_destroy(ld);
            return rc;
        }
    }
    /* The read-ahead's memory is bounded (it is on by default): a pool
     * buffer grows to at most max(256 MiB / depth, 1 MiB), 4 MiB at the
     * default depth 64, so 256 MiB in all, and never past max_sample_bytes;
     * a larger sample is read by its worker, as without read-ahead. */
    uint64_t ra_cap = o->readahead ? CH_MAX((256ull << 20) / o->readahead, 1ull << 20) : 0;
    rc = ch_ra_create(&ld->ra, ds, &ld->sampler, o->readahead,
                      CH_MIN(ra_cap, o->max_sample_bytes), &ld->next_task, err);
    if (rc != CHUTE_OK) {
        chute_loader_destroy(ld);
        return rc;
    }
    if (ds->stream && (rc = stream_create(ld, err)) != CHUTE_OK) {
        chute_loader_destroy(ld);
        return rc;
    }
    ld->nworkers = o->workers;
    ld->workers = calloc(ld->nworkers, sizeof *ld->workers);
    ld->wstats = ch_aligned_alloc(CH_CACHELINE, ld->nworkers * sizeof *ld->wstats);
    if (!ld->workers || !ld->wstats) {
        ld->nworkers = 0;
        chute_loader_destroy(ld);
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    memset(ld->wstats, 0, ld->nworkers * sizeof *ld->wstats);
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        worker *w = &ld->workers[i];
        w->ld = ld;
        w->id = i;
        w->stats = &ld->wstats[i];
        if (ch_decoder_create(&w->dec) != CHUTE_OK ||
            ch_buf_reserve(&w->rbuf, 512u << 10) != CHUTE_OK ||
            (ld->mix.classes && ch_buf_reserve(&w->mixbuf, ld->sample_bytes) != CHUTE_OK)) {
            ld->nworkers = i + 1;
            chute_loader_destroy(ld);
            return ch_err(err, CHUTE_ENOMEM, "out of memory for worker scratch");
        }
    }
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        rc = pthread_create(&ld->workers[i].thread, NULL, worker_main, &ld->workers[i]);
        if (rc != 0) {
            /* Threads 0..i-1 exist; destroy joins exactly those. */
            chute_loader_destroy(ld);
            return ch_err_errno(err, CHUTE_ENOMEM, rc, "cannot start worker thread %u", i);
        }
        ld->workers[i].started = 1;
    }
    rc = start_exporters(ld, o, ds->stream ? NULL : ds->root, err);
    if (rc != CHUTE_OK) {
        chute_loader_destroy(ld);
        return rc;
    }
    ld->o.tensorboard = NULL; /* borrowed: read only here */
    o->metrics_addr = o->metrics_file = o->metrics_name = NULL; /* borrowed: copied above */
    *out_loader = ld;
    return CHUTE_OK;
}

/* Stop the current run and wait until no worker touches a slot. (mu held) */
static void cancel_run_locked(chute_loader *ld)
{
    /* Clear `running` first: a worker leaving the run must not see the old
     * run as still open and re-join it while we wait for it to go idle. */
    ld->running = 0;
    ld->gen++;
    atomic_store_explicit(&ld->cancel_gen, ld->gen, memory_order_release);
    pthread_cond_broadcast(&ld->slot_cv);
    pthread_cond_broadcast(&ld->work_cv);
    ch_ra_cancel(ld->ra); /* wakes workers waiting for a read-ahead read */
    if (ld->st)
        ch_stream_wake(ld->st); /* and those waiting for a stream's sample */
    while (ld->active > 0)
        pthread_cond_wait(&ld->idle_cv, &ld->mu);
    ch_ra_quiesce(ld->ra);
    for (uint32_t i = 0; i < ld->nslots; i++)
        if (ld->slots[i].state == SLOT_FILLING || ld->slots[i].state == SLOT_READY)
            ld->slots[i].state = SLOT_FREE;
}

/* True in a fork() child of the process that created the loader. */
static int in_forked_child(const chute_loader *ld) { return getpid() != ld->pid; }

static int refuse_in_child(chute_loader *ld, const char *call)
{
    snprintf(ld->errmsg, sizeof ld->errmsg,
             "%s: this loader was created by process %ld and this is process %ld, a fork() "
             "child: the loader's worker threads exist only in the parent; create a new "
             "loader in the child",
             call, (long)ld->pid, (long)getpid());
    return CHUTE_EINVAL;
}

/* Destroy in a fork() child: the threads are gone and `mu` may be held
 * by one of them, so free the memory and touch no lock. */
static void free_worker(worker *w)
{
    ch_decoder_destroy(w->dec);
    if (w->fmt_state && w->ld->ds->fmt->state_free)
        w->ld->ds->fmt->state_free(w->fmt_state);
    w->fmt_state = NULL;
    ch_buf_free(&w->rbuf);
    ch_buf_free(&w->pbuf);
    ch_buf_free(&w->mixbuf);
    ch_buf_free(&w->rs.coef);
    ch_buf_free(&w->rs.tmp);
    ch_buf_free(&w->rs.aug_px);
    ch_buf_free(&w->rs.aug_tmp);
    ch_buf_free(&w->rs.geo_px);
}

/* Everything but the threads and the locks (the workers are joined, or
 * gone with a fork). */
static void free_memory(chute_loader *ld)
{
    ch_cuda_loader_close(ld->gpu); /* unpins the ring: before the munmap */
    for (uint32_t i = 0; ld->workers && i < ld->nworkers; i++)
        free_worker(&ld->workers[i]);
    free(ld->workers);
    free(ld->wstats);
    if (ld->ring_mem)
        munmap(ld->ring_mem, ld->ring_len);
    for (uint32_t i = 0; ld->slots && i < ld->nslots; i++)
        free(ld->slots[i].recs);
    free(ld->slots);
    free(ld->seqmap);
    ch_sampler_free(&ld->sampler);
    ch_dcache_destroy(ld->dc);
    ld->dc = NULL;
}

static void destroy_in_child(chute_loader *ld)
{
    ch_exporter_abandon(ld->stats); /* the parent's segment: not unlinked here */
    ch_ra_free_forked(ld->ra);
    free_memory(ld);
    free(ld);
}

void chute_loader_destroy(chute_loader *ld)
{
    if (!ld)
        return;
    if (in_forked_child(ld)) {
        destroy_in_child(ld);
        return;
    }
    ch_exporter_stop(ld->stats); /* reads the stats: before the workers go; drains the
                                    TensorBoard ring, writes the textfile a last time */
    ld->stats = NULL;
    ld->tb = NULL;
    if (ld->workers) {
        pthread_mutex_lock(&ld->mu);
        cancel_run_locked(ld);
        ld->shutdown = 1;
        pthread_cond_broadcast(&ld->work_cv);
        pthread_mutex_unlock(&ld->mu);
        for (uint32_t i = 0; i < ld->nworkers; i++)
            if (ld->workers[i].started)
                pthread_join(ld->workers[i].thread, NULL);
    }
    ch_stream_free(ld->st); /* kills and reaps a command; no loader lock held */
    ld->st = NULL;
    ch_ra_destroy(ld->ra);
    ld->ra = NULL;
    free_memory(ld);
    free(ld->skip_seen);
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->work_cv);
    pthread_cond_destroy(&ld->slot_cv);
    pthread_cond_destroy(&ld->ready_cv);
    pthread_cond_destroy(&ld->idle_cv);
    free(ld);
}

/* A run of epoch `epoch`: from global position `start_pos` (elastic
 * resume, sampler.h; validated by the caller), skipping the run's first
 * start_batch batches. */
static void start_locked(chute_loader *ld, uint64_t epoch, uint64_t start_pos,
                         uint64_t start_batch)
{
    cancel_run_locked(ld);
    ld->pend_wait_ns = 0; /* a wait for the old run's batch is no new batch's */
    if (ld->st) {
        /* Streams: stop the old run's pump (and command) with mu released,
         * since the pump may be waiting for mu to report its end; the run
         * is off (running == 0), so nothing else starts meanwhile.  Then
         * the new run: the command again, the first start_batch batches of
         * its order read and skipped (stream.h). */
        pthread_mutex_unlock(&ld->mu);
        ch_stream_stop(ld->st);
        pthread_mutex_lock(&ld->mu);
        ld->nbatches = UINT64_MAX;
        ld->st_status = 0;
        ld->st_reported = 0;
        ld->st_msg[0] = '\0';
        ld->epoch = epoch;
        ld->sampler.epoch = epoch;
        ld->first_batch = start_batch;
        ld->next_assign = start_batch;
        ld->consume_seq = start_batch;
        ld->total_tasks = UINT64_MAX;
        atomic_store(&ld->next_task, 0);
        ld->running = 1;
        ld->errmsg[0] = '\0';
        if (ch_stream_start(ld->st, epoch, start_batch * ld->o.batch_size, ld->gen) !=
            CHUTE_OK) {
            ld->nbatches = start_batch;
            ld->st_status = CHUTE_ENOMEM;
            snprintf(ld->st_msg, sizeof ld->st_msg, "%s: cannot start the reader thread",
                     ch_stream_name(ld->st));
        }
        pthread_cond_broadcast(&ld->work_cv);
        return;
    }
    /* workers are idle: safe */
    if (ch_sampler_set_run(&ld->sampler, epoch, start_pos) != CHUTE_OK)
        start_pos = 0; /* not reached: callers validate */
    ld->nbatches = run_batches_of(ld);
    if (ld->skip_seen) /* a new epoch counts its skipped samples afresh */
        memset(ld->skip_seen, 0, (size_t)(ld->ds->n + 63) / 64 * sizeof *ld->skip_seen);
    ld->epoch = epoch;
    if (start_batch > ld->nbatches)
        start_batch = ld->nbatches;
    ld->first_batch = start_batch;
    ld->next_assign = start_batch;
    ld->consume_seq = start_batch;
    uint64_t per = ld->sampler.per_rank, B = ld->o.batch_size;
    uint64_t end = CH_MIN(ld->nbatches * B, per);
    ld->total_tasks = end > start_batch * B ? end - start_batch * B : 0;
    atomic_store(&ld->next_task, 0);
    ch_ra_start(ld->ra, start_batch * B, ld->total_tasks);
    ld->running = 1;
    ld->errmsg[0] = '\0';
    pthread_cond_broadcast(&ld->work_cv);
}

int chute_loader_start_epoch(chute_loader *ld, uint64_t epoch, uint64_t start_batch)
{
    if (!ld)
        return CHUTE_EINVAL;
    if (in_forked_child(ld))
        return refuse_in_child(ld, "chute_loader_start_epoch");
    pthread_mutex_lock(&ld->mu);
    start_locked(ld, epoch, 0, start_batch);
    pthread_mutex_unlock(&ld->mu);
    return CHUTE_OK;
}

int chute_loader_start_epoch_at(chute_loader *ld, uint64_t epoch, uint64_t position,
                                chute_error *err)
{
    if (!ld)
        return ch_err(err, CHUTE_EINVAL, "chute_loader_start_epoch_at: no loader");
    if (in_forked_child(ld)) {
        int rc = refuse_in_child(ld, "chute_loader_start_epoch_at");
        return ch_err(err, rc, "%s", ld->errmsg);
    }
    if (ld->st)
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "%s: a stream has no epoch permutation to resume at a position in; "
                      "resume it at the same world size with chute_loader_start_epoch",
                      ch_stream_name(ld->st));
    if (position > ld->sampler.n)
        return ch_err(err, CHUTE_EINVAL,
                      "resume position %llu is past the end of the epoch (%llu samples): "
                      "a state from another dataset?",
                      (unsigned long long)position, (unsigned long long)ld->sampler.n);
    if (position > 0 && ld->sampler.order)
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "shuffle=shards: each rank's order passes its own shuffle buffer, so the "
                      "samples consumed are not a prefix of one sequence and a position cannot "
                      "be resumed on another world size; resume at the world size and batch "
                      "size it was saved at (chute_loader_start_epoch), or use shuffle=global");
    pthread_mutex_lock(&ld->mu);
    start_locked(ld, epoch, position, 0);
    pthread_mutex_unlock(&ld->mu);
    return CHUTE_OK;
}

uint64_t chute_loader_run_batches(const chute_loader *ld)
{
    if (!ld || ld->st)
        return 0;
    return ld->nbatches; /* written by start/create only: the caller's thread */
}

uint64_t chute_loader_position(const chute_loader *ld, uint64_t batches)
{
    if (!ld || ld->st)
        return 0;
    /* nbatches and the sampler's run change in start/create only: the
     * caller's thread, so no lock. */
    uint64_t start = ld->sampler.start, world = ld->sampler.world;
    if (batches >= ld->nbatches)
        return ld->sampler.n; /* the run is complete: so is its epoch */
    /* batches < nb, so batches * B < per_rank and start + k * world < n
     * (sampler.h): no overflow, and never into the PAD tail. */
    return start + batches * ld->o.batch_size * world;
}

int chute_loader_stop(chute_loader *ld)
{
    if (!ld)
        return CHUTE_EINVAL;
    if (in_forked_child(ld))
        return refuse_in_child(ld, "chute_loader_stop");
    pthread_mutex_lock(&ld->mu);
    cancel_run_locked(ld);
    ld->consume_seq = ld->nbatches;
    pthread_mutex_unlock(&ld->mu);
    if (ld->st)
        ch_stream_stop(ld->st); /* the command killed and reaped */
    return CHUTE_OK;
}

uint64_t chute_loader_num_batches(const chute_loader *ld)
{
    return ld && !ld->st ? ld->epoch_batches : 0; /* a stream's is unknown */
}
/* Kafka resume (stream.h: ch_stream_get_state / set_state). */
int chute_loader_stream_state(chute_loader *ld, void *buf, size_t cap, size_t *len,
                              chute_error *err)
{
    if (!ld || !len)
        return ch_err(err, CHUTE_EINVAL, "chute_loader_stream_state: ld and len are required");
    *len = 0;
    if (!ld->st)
        return CHUTE_OK;
    int rc = ch_stream_get_state(ld->st, buf, cap, len, err);
    if (rc == CH_ESMALL)
        return ch_err(err, CHUTE_ELIMIT, "stream state is %zu bytes, the buffer %zu", *len, cap);
    return rc;
}

int chute_loader_set_stream_state(chute_loader *ld, const void *buf, size_t len,
                                  chute_error *err)
{
    if (!ld || (len && !buf))
        return ch_err(err, CHUTE_EINVAL, "chute_loader_set_stream_state: bad arguments");
    if (!ld->st || !ld->ds->stream->ops->state_save)
        return len ? ch_err(err, CHUTE_EINVAL,
                            "%s: only a Kafka stream resumes from state bytes",
                            ld->st ? ch_stream_name(ld->st) : "not a stream")
                   : CHUTE_OK;
    if (ch_stream_set_state(ld->st, buf, len) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    return CHUTE_OK;
}

uint64_t chute_loader_num_samples(const chute_loader *ld)
{
    if (!ld || ld->st)
        return 0;
    return ld->o.drop_last ? ld->epoch_batches * ld->o.batch_size : ld->sampler.per_epoch;
}

/* At the end of a stream's run: its error once (then CHUTE_END), else
 * CHUTE_END.  (mu held) */
static int stream_end_status(chute_loader *ld)
{
    if (!ld->st || ld->st_status == CHUTE_OK || ld->st_reported)
        return CHUTE_END;
    ld->st_reported = 1;
    snprintf(ld->errmsg, sizeof ld->errmsg, "%s", ld->st_msg);
    return ld->st_status;
}

/* The recent-figures bucket of time t (mu), emptied if it last held an
 * older period.  Times only grow (one consumer, under mu). */
static win_bucket *win_at(chute_loader *ld, uint64_t t)
{
    uint64_t id = (t - ld->t_created) / WIN_BUCKET_NS + 1;
    win_bucket *b = &ld->win[id % WIN_BUCKETS];
    if (b->id != id) {
        memset(b, 0, sizeof *b);
        b->id = id;
    }
    return b;
}

/* Account the consumer's wait [t0, t1) (mu): split over the buckets it
 * spans, the part older than the ring dropped. */
static void win_add_wait(chute_loader *ld, uint64_t t0, uint64_t t1)
{
    const uint64_t span = (uint64_t)WIN_BUCKETS * WIN_BUCKET_NS;
    if (t1 - t0 > span)
        t0 = t1 - span;
    while (t0 < t1) {
        uint64_t end = ld->t_created + ((t0 - ld->t_created) / WIN_BUCKET_NS + 1) * WIN_BUCKET_NS;
        if (end > t1)
            end = t1;
        win_at(ld, t0)->wait_ns += end - t0;
        t0 = end;
    }
}

/* The window's figures into out (mu): the last CHUTE_STATS_WINDOW_MS
 * before now, from the first next() at the earliest. */
static void win_read(const chute_loader *ld, uint64_t now, chute_stats *out)
{
    const uint64_t wlen = (uint64_t)CHUTE_STATS_WINDOW_MS * 1000000u;
    if (!ld->t_first_next || now <= ld->t_first_next)
        return;
    uint64_t from = now - ld->t_first_next > wlen ? now - wlen : ld->t_first_next;
    int clipped = from != ld->t_first_next; /* buckets before `from` may hold activity */
    double samples = 0, batches = 0, wait = 0;
    for (uint32_t i = 0; i < WIN_BUCKETS; i++) {
        const win_bucket *b = &ld->win[i];
        if (!b->id)
            continue;
        uint64_t b0 = ld->t_created + (b->id - 1) * WIN_BUCKET_NS, b1 = b0 + WIN_BUCKET_NS;
        if (b1 <= from || b0 > now)
            continue;
        /* The bucket `from` cuts: its share after `from`, taken as even. */
        double f = clipped && b0 < from ? (double)(b1 - from) / WIN_BUCKET_NS : 1.0;
        samples += f * (double)b->samples;
        batches += f * (double)b->batches;
        wait += f * (double)b->wait_ns;
    }
    out->window_ns = now - from;
    out->window_samples = (uint64_t)(samples + 0.5);
    out->window_batches = (uint64_t)(batches + 0.5);
    out->window_wait_ns = CH_MIN((uint64_t)(wait + 0.5), out->window_ns);
}

int chute_loader_next_timeout(chute_loader *ld, int timeout_ms, chute_batch **out_batch)
{
    if (!ld || !out_batch)
        return CHUTE_EINVAL;
    *out_batch = NULL;
    if (in_forked_child(ld))
        return refuse_in_child(ld, "chute_loader_next");
    pthread_mutex_lock(&ld->mu);
    if (!ld->running && ld->gen == 0)
        start_locked(ld, 0, 0, 0); /* first use without start_epoch: epoch 0 */
    if (ld->consume_seq >= ld->nbatches || !ld->running) {
        int code = stream_end_status(ld);
        pthread_mutex_unlock(&ld->mu);
        return code;
    }
    if (ld->held >= ld->o.max_held) {
        snprintf(ld->errmsg, sizeof ld->errmsg,
                 "the consumer holds %u batches (max_held); release one before asking for more",
                 ld->held);
        pthread_mutex_unlock(&ld->mu);
        return CHUTE_EBUSY;
    }
    uint64_t t0 = ch_now_ns();
    if (!ld->t_first_next)
        ld->t_first_next = t0;
    struct timespec deadline;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    uint32_t ready = 0;
    for (uint32_t i = 0; i < ld->nslots; i++)
        ready += ld->slots[i].state == SLOT_READY;
    slot *s = NULL;
    int rc = CHUTE_OK;
    for (;;) {
        uint64_t seq = ld->consume_seq;
        if (ld->st && seq >= ld->nbatches) { /* the stream ended meanwhile */
            rc = stream_end_status(ld);
            break;
        }
        if (seq < ld->next_assign) {
            slot *c = &ld->slots[ld->seqmap[seq % ld->nslots]];
            if (c->state == SLOT_READY) {
                s = c;
                break;
            }
        }
        if (timeout_ms >= 0) {
            if (pthread_cond_timedwait(&ld->ready_cv, &ld->mu, &deadline) == ETIMEDOUT) {
                rc = CHUTE_EINTERRUPTED;
                break;
            }
        } else {
            pthread_cond_wait(&ld->ready_cv, &ld->mu);
        }
    }
    uint64_t t1 = ch_now_ns();
    ld->wait_ns += t1 - t0;
    win_add_wait(ld, t0, t1);
    ld->pend_wait_ns += t1 - t0; /* a timed-out call's wait counts toward the next batch */
    if (s && s->failed) {
        ld->pend_wait_ns = 0;
        snprintf(ld->errmsg, sizeof ld->errmsg, "%s", s->errmsg);
        int code = s->fail_code ? s->fail_code : CHUTE_ECORRUPT;
        s->state = SLOT_FREE;
        ld->consume_seq = ld->nbatches; /* the epoch cannot continue */
        cancel_run_locked(ld);
        pthread_mutex_unlock(&ld->mu);
        return code;
    }
    if (ld->skip_new) {
        memcpy(ld->errmsg, ld->skip_msg, sizeof ld->errmsg);
        ld->skip_new = 0;
    }
    if (s) {
        s->state = SLOT_HELD;
        ld->held++;
        ld->consume_seq++;
        ld->batches_out++;
        ld->samples_out += s->count;
        ld->fill_sum += ready;
        win_bucket *wb = win_at(ld, t1);
        wb->samples += s->count;
        wb->batches++;
        ld->last_wait_ns = ld->pend_wait_ns;
        ld->pend_wait_ns = 0;
        ld->last_step_ns = ld->t_last_out ? t1 - ld->t_last_out : 0;
        ld->t_last_out = t1;
        *out_batch = &s->handle;
    } else if (rc != CHUTE_EINTERRUPTED) {
        ld->pend_wait_ns = 0; /* the end, or an error: no batch is waited for any more */
    }
    uint64_t step = ld->batches_out;
    pthread_mutex_unlock(&ld->mu);
    if (s && ld->tb && step % ld->o.tensorboard_every == 0) {
        chute_stats snap; /* once per tensorboard_every batches: a copy, no I/O */
        chute_loader_stats(ld, &snap);
        ch_tboard_post(ld->tb, step, &snap);
    }
    return rc;
}

int ch_loader_tb_scalar(chute_loader *ld, const char *tag, double value, uint64_t step)
{
    return ld->tb ? ch_tboard_post_scalar(ld->tb, tag, value, step) : CHUTE_EINVAL;
}

int chute_loader_next(chute_loader *ld, chute_batch **out_batch)
{
    return chute_loader_next_timeout(ld, -1, out_batch);
}

void chute_batch_view_get(const chute_batch *b, chute_batch_view *v)
{
    if (!b || !v)
        return;
    chute_loader *ld = b->ld;
    slot *s = &ld->slots[b->index];
    const chute_loader_options *o = &ld->o;
    memset(v, 0, sizeof *v);
    v->data = s->data;
    v->dtype = o->dtype;
    v->layout = o->layout;
    v->count = s->count;
    int64_t S = o->size;
    v->shape[0] = s->count;
    if (o->layout == CHUTE_LAYOUT_NCHW) {
        v->shape[1] = 3;
        v->shape[2] = S;
        v->shape[3] = S;
    } else {
        v->shape[1] = S;
        v->shape[2] = S;
        v->shape[3] = 3;
    }
    v->strides[3] = 1;
    v->strides[2] = v->shape[3];
    v->strides[1] = v->shape[2] * v->shape[3];
    v->strides[0] = v->shape[1] * v->strides[1];
    v->nbytes = ld->sample_bytes * s->count;
    if (ld->ds->no_image) { /* chute_dataset_has_images: no pixels */
        v->data = NULL;
        memset(v->shape + 1, 0, 3 * sizeof v->shape[0]);
        memset(v->strides, 0, sizeof v->strides);
    }
    v->labels = s->labels;
    v->indices = s->indices;
    v->soft_labels = s->soft;
    v->num_classes = s->soft ? ld->mix.classes : 0;
    v->epoch = s->epoch;
    v->batch_index = s->seq;
    v->device_type = 1; /* kDLCPU */
    if (ld->gpu)
        ch_cuda_loader_view(ld->gpu, b->index, s->count, v);
}

int chute_batch_field(const chute_batch *b, const char *name, chute_field_view *v)
{
    if (!b || !name || !v)
        return CHUTE_EINVAL;
    chute_loader *ld = b->ld;
    slot *s = &ld->slots[b->index];
    for (uint32_t k = 0; k < ld->nlf; k++) {
        const lfield *l = &ld->lf[k];
        const ch_field *f = &ld->ds->fields[l->field];
        if (strcmp(f->name, name) != 0)
            continue;
        memset(v, 0, sizeof *v);
        v->name = f->name;
        v->kind = (chute_field_kind)f->kind;
        v->dtype = (chute_dtype)f->dtype;
        v->data = s->data + l->off;
        v->shape[0] = s->count;
        if (l->is_bytes) {
            v->ndim = 2;
            v->shape[1] = (int64_t)l->per;
            v->lengths = (int64_t *)(void *)(s->data + l->len_off);
        } else {
            v->ndim = f->ndim + 1;
            for (uint32_t d = 0; d < f->ndim; d++)
                v->shape[d + 1] = f->shape[d];
        }
        int64_t st = 1;
        for (uint32_t d = v->ndim; d-- > 0;) {
            v->strides[d] = st;
            st *= v->shape[d];
        }
        v->nbytes = l->per * s->count;
        return CHUTE_OK;
    }
    return CHUTE_ENOTFOUND;
}

void chute_batch_release(chute_batch *b)
{
    if (!b)
        return;
    chute_loader *ld = b->ld;
    if (in_forked_child(ld))
        return; /* the slot is the parent's; this process's copy goes with destroy */
    if (ld->gpu)
        ch_cuda_loader_release(ld->gpu, b->index);
    pthread_mutex_lock(&ld->mu);
    slot *s = &ld->slots[b->index];
    if (s->state == SLOT_HELD) {
        if (ld->st) /* the records go back (and a reader's release hook runs) */
            ch_stream_release(ld->st, s->sgen, s->recs, s->count);
        s->state = SLOT_FREE;
        ld->held--;
        pthread_cond_broadcast(&ld->slot_cv);
    }
    pthread_mutex_unlock(&ld->mu);
}

const char *chute_loader_errmsg(const chute_loader *ld) { return ld ? ld->errmsg : ""; }

uint32_t chute_default_workers(char *why, size_t why_len)
{
    ch_cpu_budget b;
    ch_cpu_budget_get(&b);
    uint32_t n = CH_MIN(b.cpus, 1024u); /* the workers bound (loader_options.def) */
    if (why && why_len)
        snprintf(why, why_len, "%s", b.why);
    return n;
}

void chute_loader_stats(const chute_loader *ld, chute_stats *out)
{
    if (!ld || !out)
        return;
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < ld->nworkers; i++) {
        const ch_worker_stats *w = &ld->wstats[i];
        ch_stage_sum(&out->read, &w->read);
        ch_stage_sum(&out->decode, &w->decode);
        ch_stage_sum(&out->transform, &w->transform);
        out->corrupt += atomic_load_explicit(&w->corrupt, memory_order_relaxed);
        out->dct_scaled += atomic_load_explicit(&w->dct_scaled, memory_order_relaxed);
        out->io_retries += atomic_load_explicit(&w->io_retries, memory_order_relaxed);
        out->cache_hits += atomic_load_explicit(&w->cache_hits, memory_order_relaxed);
        out->cache_misses += atomic_load_explicit(&w->cache_misses, memory_order_relaxed);
    }
    out->cache_bytes = ch_dcache_bytes(ld->dc);
    out->cache_entries = ch_dcache_entries(ld->dc);
    /* In a fork() child no other thread exists, and `mu` may have been
     * held by one that did: read without it. */
    int lock = !in_forked_child(ld);
    pthread_mutex_t *mu = (pthread_mutex_t *)&ld->mu; /* locking does not change the loader */
    if (lock)
        pthread_mutex_lock(mu);
    out->batches = ld->batches_out;
    out->samples = ld->samples_out;
    out->wait_ns = ld->wait_ns;
    out->queue_fill_sum = ld->fill_sum;
    uint64_t now = ch_now_ns();
    win_read(ld, now, out);
    out->last_wait_ns = ld->last_wait_ns;
    out->last_step_ns = ld->last_step_ns;
    if (lock)
        pthread_mutex_unlock(mu);
    out->wall_ns = now - ld->t_created;
    out->workers = ld->nworkers;
    out->queue_capacity = ld->nslots;
    /* On the stack (4 KiB), not calloc'd: next() takes a snapshot every
     * tensorboard_every batches and the stats thread every tick, and
     * neither may allocate (tests/test_hotpath.c). */
    ch_hist_snap h;
    memset(&h, 0, sizeof h);
    for (uint32_t i = 0; i < ld->nworkers; i++)
        ch_hist_merge(&h, &ld->workers[i].read_lat);
    out->read_lat_p50_ns = ch_hist_quantile(&h, 0.50);
    out->read_lat_p90_ns = ch_hist_quantile(&h, 0.90);
    out->read_lat_p99_ns = ch_hist_quantile(&h, 0.99);
    out->read_lat_max_ns = ch_hist_quantile(&h, 1.0);
    if (ld->ds->cache) { /* the block cache tier (src/io/cache.c) */
        ch_cache_stats cs;
        ch_cache_stats_get(ld->ds->cache, &cs);
        out->tier_ram_hits = cs.ram_hits;
        out->tier_disk_hits = cs.hits;
        out->tier_fetches = cs.fetches;
        out->tier_fetched_bytes = cs.bytes_fetched;
        out->tier_ram_evictions = cs.ram_evictions;
        out->tier_disk_evictions = cs.evictions;
        out->tier_corrupt = cs.corrupt;
        out->tier_fallbacks = cs.fallbacks;
        out->tier_ram_bytes = cs.ram_bytes;
        out->tier_ram_budget = cs.ram_budget;
    }
}

void ch_loader_read_hist(const chute_loader *ld, ch_hist_snap *out)
{
    for (uint32_t i = 0; i < ld->nworkers; i++)
        ch_hist_merge(out, &ld->workers[i].read_lat);
}

int chute_batch_use_stream(chute_batch *b, void *cuda_stream)
{
    if (!b)
        return CHUTE_EINVAL;
    chute_loader *ld = b->ld;
    if (!ld->gpu)
        return CHUTE_OK;
    if (in_forked_child(ld))
        return refuse_in_child(ld, "chute_batch_use_stream");
    chute_error err = {0};
    int rc = ch_cuda_loader_stream_wait(ld->gpu, b->index, cuda_stream, &err);
    if (rc == CHUTE_OK)
        ch_cuda_loader_set_release_stream(ld->gpu, b->index, cuda_stream);
    return rc;
}

void ch_loader_ra_stats(const chute_loader *ld, ch_ra_stats *out)
{
    ch_ra_get_stats(ld ? ld->ra : NULL, out);
}
