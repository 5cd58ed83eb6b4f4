/*
 * fmt_wav.c — the "wav" format: a directory of .wav files as audio samples.
 *
 * Layouts (the path is a directory): `.wav` files directly inside it (a
 * flat set: one class, every label 0, as the npy format's flat layout),
 * or ImageFolder-style class directories listed exactly as the image tree
 * lists them (ch_tree_list_build_ext: sorted classes, os.walk order,
 * through the dataset's source), with ".wav" instead of the image
 * extensions.  A single .wav file is a dataset of one sample.
 *
 * Samples have no image (ds->no_image); they are two typed fields:
 *   "audio"  float32 (audio_samples, channels), the layout soundfile.read
 *            returns and the one the file already has (interleaved frames:
 *            the conversion is a straight pass); audio_channels_first gives
 *            torchaudio's (channels, audio_samples) instead, transposed in
 *            the same pass.
 *   "length" int32, the frames of the file in the window (< audio_samples
 *            only for a shorter file, whose window is zero-padded at the
 *            end, so `length` is a prefix mask as pack_padded_sequence and
 *            attention masks want; the window is therefore never centred
 *            inside padding, only inside a longer file).
 * Values are soundfile.read(dtype="float32")'s (wav.h).  The window:
 * TRAIN a uniform start in [0, frames - audio_samples] from
 * ch_rng_for(seed, epoch, sample), the image crop's stream (so it depends on
 * neither workers nor timing, and changes with the epoch); EVAL the centre
 * (start floor((frames - audio_samples) / 2)); NONE the start.  The
 * loader's context arrives through read_fields_ctx; read_fields alone (no
 * loader) means EVAL.
 *
 * Reading a sample: open through the source, one positional read of the
 * head (4 KiB, on the worker's stack: the header of a plain file and, for
 * short files, the whole window), the RIFF walk (wav.c; a large chunk
 * before "data" costs one more small read), then one positional read of
 * exactly the window's frames into the worker's scratch buffer (bounded by
 * max_sample_bytes) — never the whole file.  Nothing is allocated per
 * sample once the scratch has grown.  With no field asked for, the header
 * is still read and checked, so a damaged file is never delivered silently.
 *
 * Open reads only the first file's header: channels, sample rate and (when
 * audio_samples is 0) the length come from it.  A later file with another
 * channel count is corrupt content (the loader's policy skips or fails it,
 * as a .npy of another shape); one with another sample rate is CHUTE_EINVAL
 * naming the file and both rates, whatever the policy: the option (or the
 * first file) is wrong for the data, and chute never resamples.
 */
#define _GNU_SOURCE
#include "format.h"
#include "wav.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define WAV_HEAD 4096u

typedef struct wav_impl {
    const ch_source_ops *src;
    char **files;             /* full paths */
    uint64_t nfiles;
    uint32_t len;             /* audio_samples: frames per sample */
    uint32_t rate, channels;
    int channels_first;
    int f_audio, f_length;    /* indices into ds->fields */
} wav_impl;

static int is_wav(const char *name)
{
    size_t n = strlen(name);
    return name[0] != '.' && n > 4 && strcasecmp(name + n - 4, ".wav") == 0;
}

/* ---- probe ------------------------------------------------------------ */

/* The magic only: a file that has it but a bad header must reach open,
 * whose message names the file, offset and reason. */
static int magic_ok(const ch_source_ops *src, const char *path)
{
    uint8_t m[12];
    chute_error e = {0};
    return ch_src_read_head(src, path, m, sizeof m, &e) == CHUTE_OK &&
           memcmp(m, "RIFF", 4) == 0 && memcmp(m + 8, "WAVE", 4) == 0;
}

static int wav_probe(const ch_source_ops *src, const char *path, int is_dir, char *why, size_t n)
{
    if (!is_dir) {
        if (!is_wav(strrchr(path, '/') ? strrchr(path, '/') + 1 : path) || !magic_ok(src, path)) {
            snprintf(why, n, "not a .wav file with RIFF/WAVE magic");
            return CH_PROBE_NO;
        }
        return CH_PROBE_LIKELY;
    }
    char first[4096];
    chute_error e = {0};
    if (ch_probe_first(src, path, is_wav, first, sizeof first, &e) != CHUTE_OK)
        return CH_PROBE_NO;
    if (!first[0]) {
        snprintf(why, n, "no .wav file in it or its first subdirectory");
        return CH_PROBE_NO;
    }
    if (!magic_ok(src, first)) {
        snprintf(why, n, "%s: no RIFF/WAVE magic", first);
        return CH_PROBE_NO;
    }
    return CH_PROBE_LIKELY;
}

/* ---- reading one file's header ------------------------------------------ */

typedef struct src_reader {
    const ch_source_ops *src;
    void *h;
    const char *path;
} src_reader;

static int rd_src(void *user, uint64_t off, void *buf, size_t len, chute_error *err)
{
    const src_reader *r = user;
    return r->src->read_at(r->h, r->path, off, buf, len, err);
}

/* Open `path`, read its head into head[WAV_HEAD] and parse it.  *h stays
 * open for the window's read (the caller closes it, also on failure). */
static int open_parse(const ch_source_ops *src, const char *path, uint8_t *head, size_t *head_len,
                      void **h, ch_wav_info *w, chute_error *err)
{
    uint64_t size = 0;
    int rc = ch_src_open(src, path, h, &size, err);
    if (rc != CHUTE_OK)
        return rc;
    *head_len = (size_t)CH_MIN(size, (uint64_t)WAV_HEAD);
    rc = src->read_at(*h, path, 0, head, *head_len, err);
    if (rc != CHUTE_OK)
        return rc;
    src_reader r = {src, *h, path};
    return ch_wav_parse(head, *head_len, size, rd_src, &r, path, w, err);
}

/* ---- open ------------------------------------------------------------- */

typedef struct name_list {
    char **v;
    size_t n, cap;
    int oom;
} name_list;

static int collect(void *user, const char *name, const ch_stat *st)
{
    name_list *l = user;
    if (st->type != CH_ENT_FILE || !is_wav(name))
        return 0;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) {
            l->oom = 1;
            return 1;
        }
        l->v = nv;
        l->cap = nc;
    }
    if (!(l->v[l->n] = strdup(name))) {
        l->oom = 1;
        return 1;
    }
    l->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int set_files(chute_dataset *ds, wav_impl *t, const char *dir, char **rel, uint64_t n,
                     chute_error *err)
{
    t->files = calloc(n, sizeof *t->files);
    if (!t->files)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu files", (unsigned long long)n);
    for (uint64_t k = 0; k < n; k++) {
        if (dir ? asprintf(&t->files[k], "%s/%s", dir, rel[k]) < 0
                : !(t->files[k] = strdup(rel[k]))) {
            t->files[k] = NULL;
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        }
        t->nfiles = k + 1;
    }
    ds->n = n;
    return CHUTE_OK;
}

static int list_files(chute_dataset *ds, wav_impl *t, const char *path, chute_error *err)
{
    ch_stat st;
    int rc = ch_src_stat(t->src, path, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    if (st.type != CH_ENT_DIR) { /* one file */
        char *one = (char *)path;
        rc = set_files(ds, t, NULL, &one, 1, err);
        if (rc == CHUTE_OK && !(ds->labels = calloc(1, sizeof *ds->labels)))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
        return rc == CHUTE_OK ? ch_ds_synth_classes(ds, 1, err) : rc;
    }
    name_list top = {0};
    rc = ch_src_list(t->src, path, collect, &top, err);
    if (rc == CHUTE_OK && top.oom)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory listing %s", path);
    if (rc == CHUTE_OK && top.n) { /* flat: one class, every label 0 */
        qsort(top.v, top.n, sizeof *top.v, cmp_str);
        rc = set_files(ds, t, path, top.v, top.n, err);
        if (rc == CHUTE_OK && !(ds->labels = calloc(top.n, sizeof *ds->labels)))
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %zu labels", top.n);
        if (rc == CHUTE_OK)
            rc = ch_ds_synth_classes(ds, 1, err);
    }
    for (size_t k = 0; k < top.n; k++)
        free(top.v[k]);
    free(top.v);
    if (rc != CHUTE_OK || ds->n)
        return rc;
    /* Class directories, listed as the image tree lists them. */
    ch_tree_list l;
    rc = ch_tree_list_build_ext(t->src, path, is_wav, ".wav", &l, err);
    if (rc != CHUTE_OK)
        return rc;
    rc = set_files(ds, t, path, l.paths, l.n, err);
    if (rc == CHUTE_OK) {
        ds->labels = l.labels;
        l.labels = NULL;
        ds->class_names = l.class_names;
        ds->nclasses = l.nclasses;
        l.class_names = NULL;
        l.nclasses = 0;
    }
    ch_tree_list_free(&l);
    return rc;
}

static int wav_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                    chute_error *err)
{
    wav_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = t;
    t->src = ds->src;
    int rc = list_files(ds, t, path, err);
    if (rc != CHUTE_OK)
        return rc;
    if (ds->n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no .wav files", path);
    ds->no_image = 1;
    /* Channels, rate and the default length: the first file's header. */
    uint8_t head[WAV_HEAD];
    size_t hl = 0;
    void *h = NULL;
    ch_wav_info w;
    rc = open_parse(t->src, t->files[0], head, &hl, &h, &w, err);
    if (h)
        t->src->close(h);
    if (rc != CHUTE_OK)
        return rc;
    if (opt->audio_rate && opt->audio_rate != w.rate)
        return ch_err(err, CHUTE_EINVAL, "%s: sample rate %u Hz, but audio_rate is %u Hz (chute "
                      "does not resample)", t->files[0], w.rate, opt->audio_rate);
    t->rate = w.rate;
    t->channels = w.channels;
    t->channels_first = opt->audio_channels_first != 0;
    if (opt->audio_samples)
        t->len = opt->audio_samples;
    else if (w.frames == 0 || w.frames > (1u << 30))
        return ch_err(err, CHUTE_EINVAL, "%s: %llu frames: set audio_samples (the frames per "
                      "sample; 0 takes the first file's length)", t->files[0],
                      (unsigned long long)w.frames);
    else
        t->len = (uint32_t)w.frames;
    int fa = ch_ds_field_add(ds, "audio", 5, CHUTE_FIELD_TENSOR, CHUTE_DTYPE_FLOAT32, err);
    if (fa < 0)
        return err->code ? err->code : CHUTE_EINVAL;
    ch_field *f = &ds->fields[fa];
    f->ndim = 2;
    f->shape[0] = t->channels_first ? t->channels : t->len;
    f->shape[1] = t->channels_first ? t->len : t->channels;
    f->known = 1;
    int fl = ch_ds_field_add(ds, "length", 6, CHUTE_FIELD_TENSOR, CHUTE_DTYPE_INT32, err);
    if (fl < 0)
        return err->code ? err->code : CHUTE_EINVAL;
    ds->fields[fl].ndim = 0;
    ds->fields[fl].known = 1;
    t->f_audio = fa;
    t->f_length = fl;
    return CHUTE_OK;
}

/* ---- reads ------------------------------------------------------------ */

static int read_sample(const chute_dataset *ds, uint64_t i, const ch_field_req *req, size_t nreq,
                       int transform, uint64_t seed, uint64_t epoch, ch_buf *scratch,
                       uint64_t max_bytes, chute_error *err)
{
    const wav_impl *t = ds->impl;
    const char *path = t->files[i];
    float *audio = NULL;
    int32_t *length = NULL;
    for (size_t r = 0; r < nreq; r++) {
        if ((int)req[r].field == t->f_audio)
            audio = req[r].dst;
        else if ((int)req[r].field == t->f_length)
            length = req[r].dst;
    }
    uint8_t head[WAV_HEAD]; /* on the worker's stack: 4 KiB */
    size_t hl = 0;
    void *h = NULL;
    ch_wav_info w = {0};
    int rc = open_parse(t->src, path, head, &hl, &h, &w, err);
    if (rc == CHUTE_OK && w.rate != t->rate)
        rc = ch_err(err, CHUTE_EINVAL, "%s: sample rate %u Hz, the dataset's is %u Hz (%s; chute "
                    "does not resample)", path, w.rate, t->rate,
                    "audio_rate, or the first file's");
    if (rc == CHUTE_OK && w.channels != t->channels)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: wav: %u channels, the dataset's audio has %u", path,
                    w.channels, t->channels);
    uint64_t n = CH_MIN(w.frames, (uint64_t)t->len), start = 0;
    if (rc == CHUTE_OK && w.frames > t->len) {
        uint64_t slack = w.frames - t->len;
        if (transform == CHUTE_TRANSFORM_TRAIN) {
            ch_rng g = ch_rng_for(seed, epoch, i);
            start = ch_rng_below(&g, slack + 1);
        } else if (transform == CHUTE_TRANSFORM_EVAL) {
            start = slack / 2;
        }
    }
    if (rc == CHUTE_OK && audio) {
        uint64_t off = w.data_offset + start * w.frame_bytes, bytes = n * w.frame_bytes;
        const uint8_t *src = NULL;
        if (off + bytes <= hl) {
            src = head + off;
        } else { /* the window is past the head: one read of exactly it */
            if (bytes > max_bytes)
                rc = ch_err(err, CHUTE_ELIMIT, "%s: a window of %llu frames is %llu bytes, over "
                            "max_sample_bytes %llu", path, (unsigned long long)n,
                            (unsigned long long)bytes, (unsigned long long)max_bytes);
            else if (bytes > SIZE_MAX || ch_buf_reserve(scratch, (size_t)bytes) != 0)
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %llu bytes",
                            (unsigned long long)bytes);
            else
                rc = t->src->read_at(h, path, off, scratch->data, (size_t)bytes, err);
            src = scratch->data;
        }
        if (rc == CHUTE_OK) {
            ch_wav_to_float(&w, src, n, audio, t->len, t->channels_first);
            if (n < t->len) {
                size_t pad = (size_t)(t->len - n);
                if (t->channels_first)
                    for (uint32_t c = 0; c < t->channels; c++)
                        memset(audio + (size_t)c * t->len + n, 0, pad * sizeof(float));
                else
                    memset(audio + (size_t)n * t->channels, 0,
                           pad * t->channels * sizeof(float));
            }
        }
    }
    if (h)
        t->src->close(h);
    if (rc == CHUTE_OK && length)
        *length = (int32_t)n;
    return rc;
}

static int wav_read_fields_ctx(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                               size_t nreq, const ch_sample_ctx *ctx, ch_buf *scratch,
                               uint64_t max_bytes, chute_error *err)
{
    return read_sample(ds, i, req, nreq, ctx->transform, ctx->seed, ctx->epoch, scratch,
                       max_bytes, err);
}

static int wav_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                           size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    return read_sample(ds, i, req, nreq, CHUTE_TRANSFORM_EVAL, 0, 0, scratch, max_bytes, err);
}

static int wav_media_info(const chute_dataset *ds, uint64_t i, ch_media_info *out,
                          chute_error *err)
{
    const wav_impl *t = ds->impl;
    uint8_t head[WAV_HEAD];
    size_t hl = 0;
    void *h = NULL;
    ch_wav_info w;
    int rc = open_parse(t->src, t->files[i], head, &hl, &h, &w, err);
    if (h)
        t->src->close(h);
    if (rc == CHUTE_OK) {
        out->frames = w.frames;
        out->rate = w.rate;
        out->channels = w.channels;
    }
    return rc;
}

/* The encoded sample: the whole file (inspect --verify, chute_dataset_read). */
static int wav_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                    chute_error *err)
{
    const wav_impl *t = ds->impl;
    return ch_src_read_file(t->src, t->files[i], buf, cap, out_len, err);
}

static uint64_t wav_sample_size(const chute_dataset *ds, uint64_t i)
{
    const wav_impl *t = ds->impl;
    ch_stat st;
    chute_error e = {0};
    return ch_src_stat(t->src, t->files[i], &st, &e) == CHUTE_OK ? st.size : 0;
}

static void wav_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const wav_impl *t = ds->impl;
    snprintf(buf, n, "%s", t->files[i]);
}

static void wav_close(void *impl)
{
    wav_impl *t = impl;
    if (!t)
        return;
    for (uint64_t k = 0; k < t->nfiles; k++)
        free(t->files[k]);
    free(t->files);
    free(t);
}

const ch_format_ops ch_format_wav = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "wav",
    .probe = wav_probe,
    .open = wav_open,
    .read = wav_read,
    .sample_size = wav_sample_size,
    .describe = wav_describe,
    .file_of = wav_describe,
    .close = wav_close,
    .read_fields = wav_read_fields,
    .read_fields_ctx = wav_read_fields_ctx,
    .media_info = wav_media_info,
};
