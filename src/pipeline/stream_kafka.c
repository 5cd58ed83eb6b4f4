/*
 * stream_kafka.c — the stream reader (stream.h) for `kafka://...`: the
 * loader's pump pulls messages from a Kafka consumer (src/io/kafka.h), one
 * message value = one sample's encoded image, decoded and transformed by
 * the workers like any other sample.  Built only with librdkafka.
 *
 * Why it is this thin.  Everything Kafka-specific that matters for a
 * training job — at-least-once offsets, a resumable position, partitions
 * per rank — is ch_kafka's; everything about samples — shuffle buffer,
 * batches, the corrupt policy — is the stream pump's and the loader's.
 * This file only maps one onto the other:
 *
 *   - next(): ch_kafka_next, the value copied into the pump's record (the
 *     record's buffer is reused, so nothing is allocated per message), the
 *     message's token kept in rec->token.  The Kafka message itself stays
 *     held (unreleased) until the batch holding it is released.
 *   - release(token): ch_kafka_release — the offset moves only over the
 *     released prefix of a partition, so a crash re-delivers exactly the
 *     messages of unreleased batches (and of the shuffle buffer).
 *   - format "tfrecord" (the dataset option): the value is one
 *     tf.train.Example, TFRecord-framed (a record copied out of a TFRecord
 *     file) or bare (what example.SerializeToString() gives a producer),
 *     told apart per message and read by stream_tfr.c (image,
 *     label, declared typed fields), the same record model as a TFRecord
 *     file's; a label in the Example wins over a header/key label.
 *   - label: from the header or key field the URI names (label_header=,
 *     label_key=); none configured: -1.  A label that is missing or not
 *     an integer, or a value over max_sample_bytes, makes the record bad,
 *     its message naming topic, partition and offset: the corrupt policy
 *     skips it (counted) or fails.  A value that is not an image fails in
 *     the decoder, named the same way through rec->key.
 *   - the end of an epoch: ch_kafka's (until=eof: every assigned partition
 *     at its end; max_samples=N) or the loader's stream_samples.  Each
 *     epoch opens a consumer again; the previous one committed what was
 *     released when it closed, so the next epoch continues after it.
 *   - ranks: the loader's rank/world are the consumer's (assign=ranks in
 *     the URI: partition i to rank i % world; group mode ignores them).
 *   - resume: the consumer is opened with the state bytes the loader was
 *     given (ch_stream_set_state), and state_save reports the live
 *     consumer's positions.  The reader resumes by position, so the pump
 *     does not skip samples on a resumed start (open_at is set).
 *
 * stream_timeout_ms: no message for that long ends the run with CHUTE_EIO
 * (0, the default: an idle topic is waited on forever, as a live feed
 * should be; unreachable brokers still fail after ch_kafka's
 * error_timeout_ms).
 *
 * Threads: next/open/close on the pump or control thread as stream.h says;
 * release from the consumer (ch_kafka_release is thread-safe); cancel from
 * any thread (an atomic flag that next() polls every 100 ms).
 */
#define _GNU_SOURCE
#include "stream.h"
#include "../io/kafka.h"

#include <stdio.h>
#include <string.h>

typedef struct kafka_reader {
    ch_kafka *k;
    const ch_stream_spec *spec;
    atomic_int cancel;
    uint64_t ordinal;
    uint64_t max_bytes;
    int timeout_ms;
} kafka_reader;

static int kr_open_at(const void *spec_, uint64_t epoch, int timeout_ms, uint64_t max_bytes,
                      const ch_stream_where *w, void **out, chute_error *err)
{
    const ch_stream_spec *spec = spec_;
    (void)epoch;
    *out = NULL;
    kafka_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ch_kafka_opts o = {0};
    o.rank = w ? w->rank : 0;
    o.world = w && w->world ? w->world : 1;
    if (w && w->nrec > 65536)
        o.max_unreleased = w->nrec; /* never fewer than the pump can hold */
    if (w && w->state_len) {
        o.state = w->state;
        o.state_len = w->state_len;
    }
    int rc = ch_kafka_open(spec->uri, &o, &r->k, err);
    if (rc != CHUTE_OK) {
        free(r);
        return rc;
    }
    atomic_init(&r->cancel, 0);
    r->spec = spec;
    r->max_bytes = max_bytes;
    r->timeout_ms = timeout_ms;
    *out = r;
    return CHUTE_OK;
}

static int kr_open(const void *spec, uint64_t epoch, int timeout_ms, uint64_t max_bytes,
                   void **out, chute_error *err)
{
    return kr_open_at(spec, epoch, timeout_ms, max_bytes, NULL, out, err);
}

static int kr_next(void *r_, ch_stream_rec *rec, chute_error *err)
{
    kafka_reader *r = r_;
    ch_kafka_msg m;
    uint64_t idle_ms = 0;
    for (;;) {
        if (atomic_load(&r->cancel))
            return ch_err(err, CHUTE_EINTERRUPTED, "kafka: reading stopped");
        int rc = ch_kafka_next(r->k, &m, 100, err);
        if (rc == CHUTE_OK)
            break;
        if (rc == CH_KAFKA_AGAIN || rc == CHUTE_EBUSY) {
            /* EBUSY cannot last: the pump's records bound what is held,
             * and releases free slots; wait for them as for a message. */
            idle_ms += 100;
            if (r->timeout_ms > 0 && idle_ms >= (uint64_t)r->timeout_ms)
                return ch_err(err, CHUTE_EIO, "kafka: no message for %d ms (stream_timeout_ms)",
                              r->timeout_ms);
            continue;
        }
        return rc; /* CHUTE_END or an error that ends the stream */
    }
    rec->token = (uint64_t)(uintptr_t)m.token;
    rec->ordinal = r->ordinal++;
    rec->offset = (uint64_t)m.offset;
    rec->len = 0;
    rec->bad = 0;
    rec->why[0] = '\0';
    snprintf(rec->key, sizeof rec->key, "%.100s/%d/%lld", m.topic, (int)m.partition,
             (long long)m.offset);
    char where[200];
    ch_kafka_msg_where(&m, where, sizeof where);
    rec->label = -1;
    if (m.label_status == CHUTE_OK) {
        rec->label = m.label;
    } else if (m.label_status != CHUTE_ENOTFOUND) {
        rec->bad = 1;
        snprintf(rec->why, sizeof rec->why, "%.120s: bad label: %.40s", where,
                 m.label_why ? m.label_why : "?");
        return CHUTE_OK;
    }
    if (m.value_len == 0 || !m.value) {
        rec->bad = 1;
        snprintf(rec->why, sizeof rec->why, "%.150s: empty message value (no image)", where);
        return CHUTE_OK;
    }
    if (r->max_bytes && m.value_len > r->max_bytes) {
        rec->bad = 1;
        snprintf(rec->why, sizeof rec->why, "%.100s: value of %zu bytes is over max_sample_bytes %llu",
                 where, m.value_len, (unsigned long long)r->max_bytes);
        return CHUTE_OK;
    }
    if (ch_buf_reserve(&rec->data, m.value_len) != 0) {
        rec->bad = 1;
        snprintf(rec->why, sizeof rec->why, "%.150s: out of memory for %zu bytes", where, m.value_len);
        return CHUTE_OK;
    }
    memcpy(rec->data.data, m.value, m.value_len);
    rec->len = m.value_len;
    if (r->spec->tfr) /* format "tfrecord": one Example, framed or bare (stream_tfr.c) */
        ch_stream_tfr_fill(r->spec, rec, where, 1);
    return CHUTE_OK;
}

static void kr_cancel(void *r_)
{
    kafka_reader *r = r_;
    atomic_store(&r->cancel, 1);
}

static void kr_release(void *r_, uint64_t token)
{
    kafka_reader *r = r_;
    ch_kafka_release(r->k, (void *)(uintptr_t)token);
}

static int kr_state_save(void *r_, void *buf, size_t cap, size_t *len, chute_error *err)
{
    kafka_reader *r = r_;
    return ch_kafka_state_save(r->k, buf, cap, len, err);
}

static void kr_close(void *r_)
{
    kafka_reader *r = r_;
    if (!r)
        return;
    chute_error e = {0};
    (void)ch_kafka_close(r->k, &e); /* commits what was released */
    free(r);
}

const ch_stream_reader_ops ch_stream_kafka_ops = {
    .name = "kafka",
    .open = kr_open,
    .next = kr_next,
    .cancel = kr_cancel,
    .release = kr_release,
    .close = kr_close,
    .open_at = kr_open_at,
    .state_save = kr_state_save,
};
