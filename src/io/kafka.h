/*
 * kafka.h — a Kafka consumer for the loader's streaming path (issue #13),
 * built on librdkafka and only when CMake finds it (CHUTE_HAVE_KAFKA).
 *
 * Why a module of its own, and not a ch_source_ops: a topic has no files,
 * no sizes and no random access; what the loader needs is "the next
 * message" (a stream reader feeding the seeded shuffle buffer) and "this
 * message is done" (called when the batch holding it is released).  So
 * the API is next / release, plus the two things a training job needs
 * from a stream: a resumable position (state) and a clear error when the
 * brokers are gone.
 *
 * Delivery is at-least-once.  Kafka commits a position per partition (the
 * next offset to read), not a set of messages, so a message may only be
 * covered by a commit once it and every message delivered before it from
 * the same partition have been released.  Each assigned partition keeps
 * the messages handed out, in delivery (= offset) order; a release marks
 * one done, and the released prefix of that list is popped, moving the
 * partition's position to the offset after it.  Positions are committed
 * asynchronously every commit_interval_ms (one commit for all partitions
 * that moved), synchronously when partitions are revoked and at close.
 * An unreleased message is never committed, even when later ones of its
 * partition are: after a crash, those later ones are delivered again (a
 * duplicate, never a loss).
 *
 * Offsets are tracked only for partitions this consumer owns.  On a
 * rebalance (group mode) the revoked partitions' released positions are
 * committed before they are given up, and their tracking is dropped;
 * messages of theirs still unreleased stay valid (the zero-copy bytes are
 * held until release) but their release no longer moves anything: the
 * partition's new owner starts from the committed position, so it gets
 * them again.
 *
 * Zero copy: the value a message hands out points into librdkafka's fetch
 * buffer; the rd_kafka_message_t is held until release.  Memory is bounded
 * by max_unreleased (messages handed out and not yet released); next()
 * refuses with CHUTE_EBUSY beyond it, so the loader's shuffle buffer and
 * ring, not this module, decide how much is in flight.  No allocation per
 * message: the slots are a pool made at open.
 *
 * The state (ch_kafka_state_save) is every partition's position (the
 * offset after the released prefix); a consumer opened with it seeks its
 * partitions there when they are assigned, so a restarted job resumes
 * exactly after what was released, whatever the broker's committed
 * offsets say (an async commit may not have landed before a crash).
 *
 * Threads: next() is called by one thread (the reader); release and
 * state_save may be called by any thread at the same time.  One mutex
 * protects the partition table and the slots; release_n takes it once per
 * batch.  The rebalance callback runs inside next() (librdkafka serves it
 * from the poll), so it runs on the reader thread and takes the same
 * mutex.  librdkafka's own threads never call into this module (its log
 * output is discarded: errors come back through next()).
 *
 * Credentials: client properties (kafka.sasl.password=...) are passed
 * through to librdkafka; no message this module writes contains a
 * property's value.
 */
#ifndef CHUTE_KAFKA_H
#define CHUTE_KAFKA_H

#include "../common/common.h"
#include "io.h"

#include <stddef.h>
#include <stdint.h>

/* Internal, positive: next() got no message within its timeout. */
#define CH_KAFKA_AGAIN 101

/* How partitions reach consumers. */
enum {
    CH_KAFKA_ASSIGN_GROUP = 0, /* subscribe: the group coordinator assigns and rebalances */
    CH_KAFKA_ASSIGN_RANKS = 1  /* explicit: (topic, partition) number i -> rank i % world */
};

typedef struct ch_kafka_opts {
    /* Consumer group (commits need one); overrides ?group= in the URI. */
    const char *group;
    int assign;                /* CH_KAFKA_ASSIGN_*; ?assign=group|ranks */
    uint32_t rank, world;      /* ASSIGN_RANKS: this rank of world (0 = 1) */
    /* Label: from header `label_header` (?label_header=), or from the key
     * (?label_key=): "" or "-" = the whole key is the integer, otherwise
     * the key is "name=value" pairs separated by ',', ';' or '&' and the
     * value of that name is.  Decimal int64, checked. */
    const char *label_header;
    const char *label_key;
    /* End of an epoch: when every assigned partition has reached its end
     * (?until=eof), and/or after max_samples messages (?max_samples=N).
     * Neither: never ends. */
    int until_eof;
    uint64_t max_samples;
    /* Messages handed out and not yet released; default 65536. */
    uint32_t max_unreleased;
    /* Broker/transport errors are retried by librdkafka; after this long
     * with errors and no message, next() fails with CHUTE_EIO.  Default
     * 30000. */
    uint32_t error_timeout_ms;
    /* Async commits at most this often; default 1000. */
    uint32_t commit_interval_ms;
    /* librdkafka client properties, "name=value" (a "kafka." prefix is
     * dropped), NULL-ended; the URI's ?kafka.name=value pairs come first. */
    const char *const *props;
    /* Positions to resume from (ch_kafka_state_save's bytes), or NULL. */
    const void *state;
    size_t state_len;
} ch_kafka_opts;

typedef struct ch_kafka ch_kafka;

/* One message, valid until ch_kafka_release(token). */
typedef struct ch_kafka_msg {
    const uint8_t *value;      /* zero-copy: librdkafka's buffer */
    size_t value_len;
    const uint8_t *key;        /* NULL if none */
    size_t key_len;
    const char *topic;         /* valid while the message is */
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms;      /* -1 if none */
    /* Label: label_status CHUTE_OK with label, or CHUTE_EFORMAT (header
     * or key field missing, not a decimal int64) with label_why (static
     * text); CHUTE_ENOTFOUND when no label source is configured. */
    int label_status;
    int64_t label;
    const char *label_why;
    void *token;               /* for ch_kafka_release */
} ch_kafka_msg;

/* Open a consumer for `uri`:
 *   kafka://host1:9092,host2:9092/topicA,topicB?group=G&assign=ranks&...
 * Query keys: group, assign (group|ranks), label_header, label_key,
 * until (eof), max_samples, max_unreleased, error_timeout_ms,
 * commit_interval_ms, kafka.<property>.  `opts` (may be NULL) overrides
 * the URI.  Errors: CHUTE_EINVAL (bad URI/option/property; the message
 * names the property, never its value), CHUTE_EIO (ASSIGN_RANKS: the
 * topics' metadata could not be read within error_timeout_ms),
 * CHUTE_ENOTFOUND (ASSIGN_RANKS: a topic does not exist). */
int ch_kafka_open(const char *uri, const ch_kafka_opts *opts, ch_kafka **out, chute_error *err);
/* Everything ch_kafka_open checks before it makes a client — the URI, its
 * query keys and values, the options, client property names (reserved
 * ones refused), state bytes — without making one: CHUTE_OK or the error
 * ch_kafka_open would give.  Allocates and frees; no network; any thread.
 * For the fuzzer (tests/fuzz/fuzz_kafka_uri.c) and early checks. */
int ch_kafka_uri_check(const char *uri, const ch_kafka_opts *opts, chute_error *err);

/* Next message, waiting at most timeout_ms.  CHUTE_OK (msg filled),
 * CHUTE_END (end condition reached; later calls keep serving rebalances
 * and may return messages again if new partitions are assigned),
 * CH_KAFKA_AGAIN (nothing within timeout), CHUTE_EBUSY (max_unreleased
 * messages unreleased), CHUTE_EIO (brokers unreachable / fatal client
 * error; message says which and for how long), CHUTE_ENOTFOUND (a topic
 * does not exist).  One thread at a time. */
int ch_kafka_next(ch_kafka *k, ch_kafka_msg *msg, int timeout_ms, chute_error *err);

/* "kafka topic T partition P offset O", for messages about a message. */
void ch_kafka_msg_where(const ch_kafka_msg *msg, char *buf, size_t n);

/* Header `name` of a message (the last one if repeated): CHUTE_OK with
 * *val and *len (val NULL for a null header), CHUTE_ENOTFOUND. */
int ch_kafka_header(const ch_kafka_msg *msg, const char *name, const void **val, size_t *len);
/* Header number idx: CHUTE_OK with name/value, CHUTE_END past the last. */
int ch_kafka_header_at(const ch_kafka_msg *msg, size_t idx, const char **name,
                       const void **val, size_t *len);

/* A message is done (its batch was released): frees its bytes, and moves
 * its partition's position over the released prefix.  Any thread. */
void ch_kafka_release(ch_kafka *k, void *token);
void ch_kafka_release_n(ch_kafka *k, void *const *tokens, size_t n);

/* Commit the released positions now (synchronously); CHUTE_EIO on a
 * failed commit. */
int ch_kafka_commit(ch_kafka *k, chute_error *err);

/* The positions of the partitions owned now (and of restored ones not
 * yet assigned), as bytes (layout in kafka.c).  *len is set to the size;
 * if cap is smaller, nothing is written and CH_ESMALL (io.h) is returned.
 * Revoked partitions are left out: their positions were committed when
 * they were revoked, and their new owner's state has them.  Any thread. */
int ch_kafka_state_save(ch_kafka *k, void *buf, size_t cap, size_t *len, chute_error *err);
/* Parse state bytes (checked; CHUTE_ECORRUPT naming the offset) and call
 * fn for each (topic, partition, position); for tests and the fuzzer. */
int ch_kafka_state_parse(const void *buf, size_t len,
                         int (*fn)(void *user, const char *topic, size_t topic_len,
                                   int32_t partition, int64_t offset),
                         void *user, chute_error *err);

/* Messages delivered / released / redelivery-causing revokes so far. */
typedef struct ch_kafka_stats {
    uint64_t delivered, released, commits, commit_errors, revoked_unreleased;
    uint32_t assigned;         /* partitions assigned now */
} ch_kafka_stats;
void ch_kafka_get_stats(ch_kafka *k, ch_kafka_stats *out);

/* Commit released positions synchronously, leave the group, free all
 * (unreleased messages are dropped: their tokens become invalid).
 * NULL is fine.  Returns the commit's status. */
int ch_kafka_close(ch_kafka *k, chute_error *err);

#endif
