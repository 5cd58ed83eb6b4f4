/*
 * stream.h — samples from a source with no length and no random access:
 * `pipe:COMMAND`, stdin (`-`), and later Kafka (issue #13).
 *
 * Why it is shaped so.  The loader (loader.c) was built for a dataset of
 * N samples it can read in any order; a stream can only be read once,
 * front to back, and its end is known only when it comes.  Rather than a
 * second pipeline, a stream plugs into the same workers, ring and
 * consumer through two pieces:
 *
 *   1. A *stream reader* (ch_stream_reader_ops below): "give me the next
 *      sample" — its bytes and its fields — or "the stream ended", or an
 *      error; plus a release hook.  That is all a source of a stream has
 *      to be.  The pipe/stdin reader (stream_tar.c) reads a WebDataset tar
 *      from a child's stdout; a Kafka consumer (src/io/kafka.c) fills the
 *      same table with a message value and offset.
 *   2. The *pump* (ch_stream, stream.c): one thread per loader that pulls
 *      samples from the reader into a bounded arena of records, mixes
 *      them through the seeded shuffle buffer (shufbuf.h) and publishes
 *      them, in order, to the workers in whole batches.
 *
 * Determinism.  Only the pump thread touches the reader and the shuffle
 * buffer, so the order is a function of (seed, epoch, the stream's bytes,
 * shuffle_buffer) alone; the workers claim positions 0, 1, 2, ... of that
 * order with an atomic compare-and-swap, and everything random about a
 * sample is keyed by its position (never by the record that holds it), so
 * the batches do not depend on the number of workers or their timing.
 *
 * Memory.  The arena has a fixed number of records, allocated at create:
 * shuffle_buffer + (ring slots + 2) x batch_size.  Each record owns one
 * growable buffer that keeps the largest sample it has held (never more
 * than max_sample_bytes) and is reused: once warm, nothing is allocated
 * per sample.  A record is taken by the pump, sits in the shuffle buffer,
 * is published, decoded by a worker, and returns to the free list when
 * the consumer releases the batch that holds it (or when the run stops).
 * The pump waits for a free record, so a slow consumer stops the reading
 * (and, through the pipe, the command) instead of growing memory.
 *
 * The release hook.  A reader's release(token) is called for each sample
 * when the batch that holds it is released by the consumer (and for the
 * samples a resumed run skips), never earlier: a Kafka reader commits its
 * offsets there, which is what makes delivery at-least-once.  Samples
 * dropped without being delivered (a stopped run, the records still in
 * the shuffle buffer, drop_last's tail) are not released.  For pipe: and
 * stdin the hook is NULL.
 *
 * Errors.  A sample whose *content* is bad (no image, a bad .cls) is still
 * a record, marked bad: the worker's read reports it as CHUTE_ECORRUPT and
 * the corrupt policy skips (replacing it with another sample of the same
 * batch) or fails.  A stream that breaks (not a tar, truncated, the command
 * failed or hung) ends the run as its end would: every sample read whole
 * before the break is delivered (the shuffle buffer drained, the last
 * batch short unless drop_last), then chute_loader_next returns the error
 * once.  Deliver-then-fail keeps a flaky `curl` from costing the samples
 * it did send, and the error still stops the epoch loudly.
 *
 * Threads: ch_stream_start/stop/free from the loader's control thread
 * (under no loader lock the pump could wait on); claim/handle_at/bytes
 * from workers; release from the consumer.  The stream's own mutex guards
 * the free list and the waits; the published order is lock-free.
 */
#ifndef CHUTE_PIPELINE_STREAM_H
#define CHUTE_PIPELINE_STREAM_H

#include "../common/common.h"
#include "shufbuf.h"

#include <pthread.h>
#include <stdatomic.h>

/* One sample as a reader hands it over; the record's buffer is the
 * pump's (the reader grows it through ch_buf_reserve, up to max_bytes). */
typedef struct ch_stream_rec {
    ch_buf data;              /* the image's encoded bytes at [0, len) */
    size_t len;
    int64_t label;            /* -1 when the sample has none */
    uint64_t ordinal;         /* input position in this epoch's stream (0, 1, ...) */
    uint64_t offset;          /* where it starts in the stream (messages) */
    uint64_t token;           /* the reader's, given back to release() */
    int bad;                  /* nonzero: content error, `why` says which */
    char key[160];            /* the sample's key, for messages */
    char why[200];
    /* TFRecord records (stream_tfr.c): the image is data[img_off, +len),
     * the serialized tf.train.Example data[ex_off, +ex_len).  Tar records
     * with declared fields (stream_tar.c): data starts with the fields'
     * directory (ch_stream_tar_fields), the image at img_off.  The pump
     * zeroes img_off and ex_len before each next(), so readers of plain
     * images need not know about them. */
    size_t img_off;
    size_t ex_off, ex_len;
} ch_stream_rec;

/* Where a reader with positions of its own (Kafka) starts: the loader's
 * rank/world, the arena's record count (the most samples held at once),
 * and state bytes to resume from (ch_stream_set_state; len 0: none). */
typedef struct ch_stream_where {
    uint32_t rank, world;
    uint32_t nrec;
    const void *state;
    size_t state_len;
} ch_stream_where;

/* What a stream's source provides (see the essay). */
typedef struct ch_stream_reader_ops {
    const char *name;         /* "pipe", "stdin", "kafka" */
    /* Start reading epoch `epoch` of the stream described by spec (the
     * dataset's; its meaning is the reader's).  timeout_ms: no byte for
     * that long is an error (0: none).  *out is the reader's state. */
    int (*open)(const void *spec, uint64_t epoch, int timeout_ms, uint64_t max_bytes,
                void **out, chute_error *err);
    /* Fill rec with the next sample: CHUTE_OK, CHUTE_END at the end of the
     * stream (after checking how it ended: a command's exit status), or an
     * error that ends the stream.  Called from the pump thread only. */
    int (*next)(void *r, ch_stream_rec *rec, chute_error *err);
    /* Make a blocked next() return CHUTE_EINTERRUPTED soon.  Any thread. */
    void (*cancel)(void *r);
    /* The consumer released the batch holding the sample with `token`
     * (NULL: nothing to do).  Called from the consumer's thread, under
     * the stream's mutex, in release order. */
    void (*release)(void *r, uint64_t token);
    /* Stop and free everything (a child killed and reaped).  The pump
     * has stopped calling next() when this runs. */
    void (*close)(void *r);
    /* Optional (Kafka).  open_at, when set, is used instead of open: the
     * reader resumes by its own position (state bytes), so a resumed
     * start skips nothing.  state_save reports that position (CH_ESMALL
     * with *len when cap is short); called under the stream's mutex. */
    int (*open_at)(const void *spec, uint64_t epoch, int timeout_ms, uint64_t max_bytes,
                   const ch_stream_where *w, void **out, chute_error *err);
    int (*state_save)(void *r, void *buf, size_t cap, size_t *len, chute_error *err);
} ch_stream_reader_ops;

struct ch_field;
struct ch_field_req;

/* The pipe/stdin reader (stream_tar.c): spec is a ch_stream_spec. */
typedef struct ch_stream_spec {
    const ch_stream_reader_ops *ops;
    char *cmd;                /* pipe: the command; NULL: stdin */
    char *name;               /* "pipe:CMD" or "-", for messages */
    char *uri;                /* kafka: the whole URI (name is without the query) */
    /* Dataset option format "tfrecord" (stream_tfr.c): each record is a
     * TFRecord-framed tf.train.Example (pipe:/-: a TFRecord file's bytes;
     * Kafka: one framed record per message value); the image and label
     * from keys[0] and keys[1] (image_key/label_key, defaults as the
     * TFRecord format's), plus label_offset; the declared fields
     * (extra_keys, fields.h) are keys[2..2+nfields), the dataset's
     * ds->fields in the same order. */
    int tfr;
    int32_t label_offset;
    const char *keys[2 + 64];
    uint32_t nfields;
    char *key_store[2];       /* the image/label key copies keys[0..1] point at */
    /* Tar streams (format unset or "wds"): the declared fields are also
     * keys[2..2+nfields) (names of members, as the wds format names
     * them).  read_fields is how a worker reads a record's declared
     * fields: ch_stream_tfr_fields or ch_stream_tar_fields (NULL: none
     * declared). */
    int (*read_fields)(const struct ch_stream_spec *spec, const struct ch_field *fields,
                       const struct ch_stream_rec *rec, const struct ch_field_req *req,
                       size_t nreq, const char *where, chute_error *err);
} ch_stream_spec;

/* Epoch `epoch` of a pipe:/stdin stream may start: stdin (no cmd) can be
 * read only once, a command runs again each epoch.  CHUTE_OK or
 * CHUTE_EINVAL with the reason in err.  Shared by the stream readers. */
int ch_stream_spec_reopen_check(const ch_stream_spec *spec, uint64_t epoch, chute_error *err);
extern const ch_stream_reader_ops ch_stream_tar_ops;
/* The pipe/stdin reader of TFRecord files (stream_tfr.c; spec->tfr). */
extern const ch_stream_reader_ops ch_stream_tfr_ops;

/* TFRecord records read front to back from any byte source: the core of
 * the pipe/stdin reader, fed by the fuzz target from memory.  read is
 * ch_proc_read's shape (*got = 0 at the end).  The first bytes say plain,
 * GZIP or ZLIB (as for a file: a valid plain header wins); compressed
 * bytes are inflated on the fly through one input buffer per stream. */
typedef int (*ch_stream_read_fn)(void *ctx, uint8_t *buf, size_t n, size_t *got,
                                 chute_error *err);
struct ch_tfr_inflater;
typedef struct ch_tfr_in {
    ch_stream_read_fn read;
    void *ctx;
    const char *name;         /* for messages */
    uint64_t max_bytes;       /* a longer record is read past, marked bad */
    uint64_t ordinal;
    uint64_t pos;             /* TFRecord bytes consumed (inflated ones if compressed) */
    int started;              /* the first bytes were looked at */
    struct ch_tfr_inflater *z;/* GZIP/ZLIB: zlib's state and the input buffer */
} ch_tfr_in;
/* The next record into rec (rec->bad for a content error): CHUTE_OK,
 * CHUTE_END at a clean end of the bytes, or an error that ends them. */
int ch_tfr_in_next(ch_tfr_in *in, const ch_stream_spec *spec, ch_stream_rec *rec,
                   chute_error *err);
/* Free the inflater (if any); in may be read again only after zeroing. */
void ch_tfr_in_free(ch_tfr_in *in);

/* spec->tfr: check the framed record in rec->data[0, rec->len) (exactly
 * one record: length CRC, length, data CRC) and find its image and label
 * (stream_tfr.c); sets img_off/len, ex_off/ex_len and the label, or marks
 * the record bad (a content error naming `where`).  bare_ok (a Kafka
 * value): bytes that are not one framed record are read as a bare
 * tf.train.Example.  Pump thread. */
void ch_stream_tfr_fill(const ch_stream_spec *spec, ch_stream_rec *rec, const char *where,
                        int bare_ok);
/* A worker's read of a record's declared fields (spec->tfr; fields.h):
 * fields are the dataset's (spec->keys[2..] are their names).  Any
 * thread; allocates nothing.  `where` starts messages. */
int ch_stream_tfr_fields(const ch_stream_spec *spec, const struct ch_field *fields,
                         const ch_stream_rec *rec, const struct ch_field_req *req, size_t nreq,
                         const char *where, chute_error *err);
/* The same for a tar record (stream_tar.c): the members kept for the
 * declared fields, decoded by the wds format's decoder
 * (fmt_wds_field_decode); a declared member the sample lacks is
 * CHUTE_ECORRUPT.  Any thread; allocates nothing. */
int ch_stream_tar_fields(const ch_stream_spec *spec, const struct ch_field *fields,
                         const ch_stream_rec *rec, const struct ch_field_req *req, size_t nreq,
                         const char *where, chute_error *err);
/* The tar reader over bytes from `read` instead of a command (the fuzz
 * target): the same sample assembly, no process; close with
 * ch_stream_tar_ops.close, read with .next. */
int ch_stream_tar_open_fn(const ch_stream_spec *spec, uint64_t max_bytes,
                          int (*read)(void *ctx, uint8_t *buf, size_t n, size_t *got,
                                      chute_error *err),
                          void *ctx, void **out, chute_error *err);
/* The Kafka reader (stream_kafka.c; only with CHUTE_HAVE_KAFKA): spec->uri. */
extern const ch_stream_reader_ops ch_stream_kafka_ops;

/* Called by the pump when the run's sample count is known (the stream
 * ended or broke): nbatches is the number of batches the run publishes,
 * status CHUTE_OK or the error (message in err).  From the pump thread. */
typedef void (*ch_stream_end_fn)(void *ctx, uint64_t gen, uint64_t nbatches, int status,
                                 const chute_error *err);

typedef struct ch_stream ch_stream;

typedef struct ch_stream_config {
    const ch_stream_spec *spec;
    uint32_t batch_size;
    uint32_t nslots;          /* loader ring slots (records held in batches) */
    uint32_t buffer;          /* shuffle buffer capacity, >= 1 */
    uint64_t seed;
    uint64_t max_samples;     /* per epoch, 0 = until the end */
    int drop_last;
    int timeout_ms;
    uint64_t max_bytes;       /* per sample */
    ch_stream_end_fn on_end;
    void *ctx;
    uint32_t rank, world;     /* the loader's (readers with open_at) */
} ch_stream_config;

int ch_stream_create(const ch_stream_config *cfg, ch_stream **out, chute_error *err);
/* Stop any run, then start reading epoch `epoch`, skipping the first
 * `skip` samples of its order (resume from a batch).  gen tags the run. */
int ch_stream_start(ch_stream *st, uint64_t epoch, uint64_t skip, uint64_t gen);
/* Stop the run: cancel the reader, join the pump, close the reader,
 * return every record to the free list.  Workers must be out of the run. */
void ch_stream_stop(ch_stream *st);
void ch_stream_free(ch_stream *st);
/* Wake workers waiting in claim (the loader cancels a run). */
void ch_stream_wake(ch_stream *st);

/* Claim the next position t of the run (0-based) and its record handle.
 * CHUTE_OK, CHUTE_END when the run has no more (ended, broken or
 * cancelled: `alive` returns 0). */
int ch_stream_claim(ch_stream *st, int (*alive)(void *), void *actx, uint64_t *t,
                    uint32_t *h);
/* Handle of a published position t (its batch must not be released). */
uint32_t ch_stream_handle_at(const ch_stream *st, uint64_t t);
/* Number of samples in batch b of the run (B, or fewer for the last). */
uint32_t ch_stream_batch_count(const ch_stream *st, uint64_t b);
/* The record behind a handle (valid until its batch is released). */
const ch_stream_rec *ch_stream_rec_of(const ch_stream *st, uint32_t h);
/* Give back the records of a released batch of run `gen` (stale
 * generations are ignored: that run's records were reclaimed). */
void ch_stream_release(ch_stream *st, uint64_t gen, const uint32_t *h, uint32_t n);
/* "pipe:CMD" or "-". */
const char *ch_stream_name(const ch_stream *st);
/* Resume (readers with state_save): the state bytes the next run's reader
 * opens with (copied; len 0 clears).  Control thread, between runs. */
int ch_stream_set_state(ch_stream *st, const void *buf, size_t len);
/* The position now: the open reader's, else the last run's at its close,
 * else what set_state gave.  *len = 0 for readers without state.  Any
 * thread.  CH_ESMALL (io.h) with *len when cap is short. */
int ch_stream_get_state(ch_stream *st, void *buf, size_t cap, size_t *len, chute_error *err);

#endif
