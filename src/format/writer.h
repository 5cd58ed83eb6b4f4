/*
 * writer.h — how a dataset is written in a format (chute_convert, pack).
 *
 * Reading and writing are separate tables on purpose: a format may be
 * readable and not writable (the image tree), and the writer needs no
 * part of the reader's state.  A writer is one file that fills a
 * ch_writer_ops and one line in ch_writers[] (writers.c); the convert
 * engine (writers.c) does everything the writers share — opening the
 * source, the lock on the output directory, removing old output,
 * per-sample checks, progress, verifying the result — and never asks
 * which writer it drives.
 *
 * Crash safety is the engine's contract with the writers: a writer
 * creates files only through ch_outset (temporary names no reader lists,
 * fsync'd when closed) and gives them their final names only in finish,
 * after every file is complete.
 */
#ifndef CHUTE_WRITER_H
#define CHUTE_WRITER_H

#include "format.h"

/* One sample as the engine hands it to a writer. */
typedef struct ch_writer_sample {
    uint64_t index;           /* position in the output, 0.. */
    const void *data;         /* the encoded image, len bytes */
    size_t len;
    int kind;                 /* CH_IMG_* (codec.h) */
    uint32_t width, height, channels;
    int32_t label;            /* the source's label (0-based) */
    const char *class_name;   /* the source's name for it */
    const char *origin;       /* where the sample came from (describe) */
} ch_writer_sample;

typedef struct ch_writer_cfg {
    const char *dir;
    uint64_t shard_size;
    int32_t label_offset;
    const char *prefix;
    uint32_t align;
    uint64_t total;           /* samples the source has (an upper bound on those written) */
    const char *key_prefix;   /* wds: put before every key ("" none; checked by the engine) */
    uint32_t nclasses;
    char *const *class_names;
} ch_writer_cfg;

/*
 * open    allocates the writer's state (nothing is created in dir yet, or
 *         only through ch_outset).
 * add     appends one sample; called in output order.
 * finish  completes every file and publishes them under their final
 *         names (rename + fsync of dir); *out_files = data files written.
 *         The writer is freed whatever it returns.
 * abort   frees the writer, removing every temporary it made (NULL ok).
 * owns    is `name` a file this writer writes into a directory (final
 *         names only)?  The engine removes those before writing, so a
 *         smaller output never leaves old files beside the new ones.
 * reader  the registered reader (format.h) that opens the output.
 */
typedef struct ch_writer_ops {
    const char *name;
    const char *reader;
    int (*owns)(const char *name);
    int (*open)(const ch_writer_cfg *cfg, void **out, chute_error *err);
    int (*add)(void *w, const ch_writer_sample *s, chute_error *err);
    int (*finish)(void *w, uint32_t *out_files, chute_error *err);
    void (*abort)(void *w);
} ch_writer_ops;

extern const ch_writer_ops *const ch_writers[];
extern const ch_writer_ops ch_writer_chute, ch_writer_tfrecord, ch_writer_wds;
const ch_writer_ops *ch_writer_find(const char *name);

/* ---- ch_outset: a writer's files, written under temporary names ---- */
#define CH_OUTSET_TMP_PREFIX ".chute-w-"
typedef struct ch_outset {
    const char *dir;
    char **tmp;               /* temporary paths, in creation order */
    uint32_t n, cap;
    int fd;                   /* the open file, or -1 */
    uint8_t *buf;             /* write buffer for the open file */
    size_t blen, bcap;
    uint64_t bytes;           /* written to the open file so far */
} ch_outset;
void ch_outset_init(ch_outset *o, const char *dir);
/* Start a new file (the previous one must be ended); its number is o->n-1. */
int ch_outset_begin(ch_outset *o, chute_error *err);
int ch_outset_write(ch_outset *o, const void *p, size_t n, chute_error *err);
/* Flush, fsync and close the open file. */
int ch_outset_end(ch_outset *o, chute_error *err);
/* Give file k its final name (a bare name in dir). */
int ch_outset_publish(ch_outset *o, uint32_t k, const char *final_name, chute_error *err);
/* Close and remove every temporary not yet published; free. */
void ch_outset_free(ch_outset *o);

/* Shared with pack.c: its path check, OUT_DIR lock and manifest. */
int ch_pack_check_paths(const char *root, const char *out_dir, chute_error *err);
int ch_pack_lock(const char *out_dir, int no_wait, chute_pack_wait_fn on_wait, void *user,
                 int *out_fd, int *out_waited, chute_error *err);
void ch_pack_unlock(const char *out_dir, int fd);
int ch_pack_write_manifest(const char *dir, const uint64_t *samples, const uint64_t *bytes,
                           uint32_t n, chute_error *err);

/* chute_pack into a local out_dir with every finished shard handed to a
 * sink as soon as it is complete and has its final name (path in out_dir,
 * bare name), in order, on the pack's thread; the sink may remove the
 * file.  A sink's error ends the pack with it.  With a sink the pack does
 * not reopen out_dir to verify it (its shards may be gone): the sink's
 * owner verifies where they went.  publish.c uploads through one. */
typedef struct ch_pack_sink {
    int (*shard_done)(void *user, const char *path, const char *name, chute_error *err);
    void *user;
} ch_pack_sink;
int ch_pack_to_sink(const char *root, const char *out_dir, const chute_pack_options *o,
                    const ch_pack_sink *sink, chute_pack_result *res, chute_error *err);

/* pack/convert into s3:// (publish.c): stage locally, upload, manifest last. */
int ch_publish_is_remote(const char *dst);
int ch_publish_pack(const char *root, const char *dst, const chute_pack_options *o,
                    chute_pack_result *res, chute_error *err);
int ch_publish_convert(const char *src, const char *dst, const chute_convert_options *o,
                       chute_convert_result *res, chute_error *err);

/* The streaming writer's s3:// dst (publish.c): open makes the private
 * staging directory (*stage, owned by the handle) after the checks
 * convert makes (a prefix inside a bucket; an existing dataset only
 * replaced under force); finish uploads what the stage holds, data
 * before the manifest, and opens the result from s3:// to count it;
 * free removes the stage whatever happened. */
typedef struct ch_publish ch_publish;
int ch_publish_open(const char *dst, int force, ch_publish **out, const char **stage,
                    chute_error *err);
int ch_publish_finish(ch_publish *p, const char *reader, int32_t label_offset, uint64_t samples,
                      chute_error *err);
void ch_publish_free(ch_publish *p);

#endif
