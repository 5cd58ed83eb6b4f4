/*
 * shufbuf.h — a seeded shuffle buffer (TensorFlow's shuffle(buffer_size)).
 *
 * Why: formats that are read front to back (TFRecord files, WebDataset
 * tars, chute shards read shard by shard, and the streams of issue #13)
 * cannot be permuted globally without random reads, so they are mixed the
 * way tf.data does it: keep `cap` items; once full, each new item evicts a
 * uniformly chosen slot, which is emitted; when the input ends, the rest
 * is drained in uniformly random order.  With cap = 1 the output is the
 * input; with cap >= the input's length it is a uniform permutation.
 *
 * An item is a 64-bit value: a sample id (the sampler), or a handle to a
 * record the caller keeps (a stream).  The buffer never allocates after
 * ch_shufbuf_init and never locks: one owner feeds it (a stream's reader
 * thread, or the sampler at epoch start).  Its only randomness is the
 * ch_rng given to ch_shufbuf_reset, so the output is a pure function of
 * (rng, input sequence, cap): that is what lets a loader compute an epoch's
 * order up front and resume it from a batch number.
 *
 * Bound: an item never leaves more than cap - 1 positions before its
 * input position (it is not in the buffer before then); it may leave
 * arbitrarily late (each step keeps it with probability 1 - 1/cap).
 */
#ifndef CHUTE_SHUFBUF_H
#define CHUTE_SHUFBUF_H

#include "../common/common.h"

typedef struct ch_shufbuf {
    uint64_t *slot;           /* cap entries, fill of them in use */
    size_t cap, fill;
    ch_rng rng;
} ch_shufbuf;

/* Allocate a buffer of cap >= 1 items (empty, rng zeroed: reset it before
 * use).  CHUTE_EINVAL for cap 0, CHUTE_ENOMEM. */
int ch_shufbuf_init(ch_shufbuf *b, size_t cap);
/* Free the slots; b may be zeroed or already freed. */
void ch_shufbuf_free(ch_shufbuf *b);
/* Empty the buffer and start drawing from rng. */
void ch_shufbuf_reset(ch_shufbuf *b, ch_rng rng);
/* Offer the next input item.  While the buffer is filling it is stored and
 * 0 is returned; once full, a uniformly chosen slot is written to *out,
 * x takes its place, and 1 is returned. */
int ch_shufbuf_push(ch_shufbuf *b, uint64_t x, uint64_t *out);
/* After the last push: write a uniformly chosen remaining item to *out,
 * remove it and return 1; return 0 when the buffer is empty. */
int ch_shufbuf_drain(ch_shufbuf *b, uint64_t *out);

#endif
