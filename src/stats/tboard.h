/*
 * tboard.h — the loader's TensorBoard export (option tensorboard).
 *
 * Every tensorboard_every batches the consumer's next() copies one
 * chute_stats snapshot into a fixed ring (one lock and a memcpy per N
 * steps, nothing per sample); the loader's stats thread (exporter.h)
 * turns each snapshot into the scalars below and appends them to an event file TensorBoard
 * reads: TFRecord framing (u64 length, masked CRC32C of it, data, masked
 * CRC32C of the data) around hand-encoded Event protos, the first of
 * them file_version "brain.Event:2".  A slow disk never stalls training:
 * when the ring is full the oldest snapshot not yet written is dropped.
 */
#ifndef CHUTE_TBOARD_H
#define CHUTE_TBOARD_H

#include "../common/common.h"

typedef struct ch_tboard ch_tboard;

/* The scalars written per step, in the order ch_tboard_scalars fills them. */
enum { CH_TB_NSCALARS = 15 };
extern const char *const ch_tb_tags[CH_TB_NSCALARS];

/* The scalars of one snapshot (see ch_tb_tags and docs/WAITING.md). */
void ch_tboard_scalars(const chute_stats *st, double out[CH_TB_NSCALARS]);

/* Create dir (and its parents) if needed and an event file in it named
 * events.out.tfevents.<unix time>.<host>.<pid>.<n>.chute and write the
 * file_version event.  No thread: ch_tboard_drain writes what is queued
 * (the stats thread calls it when notified).  Errors name the path. */
int ch_tboard_open(const char *dir, ch_tboard **out, chute_error *err);

/* Queue one snapshot at `step` (consumer thread; never blocks on I/O). */
void ch_tboard_post(ch_tboard *tb, uint64_t step, const chute_stats *st);

/* Queue one scalar of the caller's (tag shorter than CH_TB_TAG_MAX bytes,
 * else CHUTE_EINVAL) at `step`: Loader.rank_report's summary. */
enum { CH_TB_TAG_MAX = 64 };
int ch_tboard_post_scalar(ch_tboard *tb, const char *tag, double value, uint64_t step);

/* The loader's writer (loader.c): ch_tboard_post_scalar on it, or
 * CHUTE_EINVAL when the loader has no tensorboard directory. */
int ch_loader_tb_scalar(chute_loader *ld, const char *tag, double value, uint64_t step);

/* Write the queued items to the file (the stats thread; one drainer at
 * a time). */
void ch_tboard_drain(ch_tboard *tb);

/* After each post, an 8-byte 1 is written to fd (an eventfd of the stats
 * thread) unless one is pending since the last drain.  -1 (the default):
 * nothing is written, items wait for a drain or the close. */
void ch_tboard_set_notify(ch_tboard *tb, int fd);

/* Write what is queued and close the file (NULL ok).  No drain may run. */
void ch_tboard_close(ch_tboard *tb);

#endif
