/*
 * shmstats.h — the per-loader shared-memory stats segment that `chute top`
 * reads (docs/TOP.md has the layout and its versioning rules).
 *
 * A loader (stats_shm on, the default) creates /dev/shm/chute-<uid>-<pid>-<n>
 * (mode 0600, O_EXCL|O_NOFOLLOW: a name someone else planted is never
 * opened) and its stats thread (exporter.h) copies a stats snapshot into
 * it every CH_SHM_PUBLISH_MS under a seqlock: the hot path does nothing new.
 * The file is unlinked when the loader is destroyed and, for loaders still
 * open, at exit (atexit); a process killed by SIGKILL leaves its file, which
 * the next loader start or `chute top` removes (ch_shm_sweep: its pid is
 * gone, or has been reused by a process started at another time).
 *
 * Readers never map the file: they pread it (ch_shm_read), so a segment
 * truncated under them is a short read, not a SIGBUS, and a reader cannot
 * write to it.  ch_shm_parse checks every field of a copy and is the fuzz
 * target's entry point.
 */
#ifndef CHUTE_SHMSTATS_H
#define CHUTE_SHMSTATS_H

#include "chute.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CH_SHM_MAGIC "CHUTESTA" /* 8 bytes, no NUL */
#define CH_SHM_VERSION 1u       /* bumped only on an incompatible change */
#define CH_SHM_HEAD_BYTES 256u  /* version 1's header; counters follow */
#define CH_SHM_SIZE 4096u       /* what a loader creates */
#define CH_SHM_MAX_SIZE (1u << 20) /* readers refuse larger files */
#define CH_SHM_PUBLISH_MS 250
#define CH_SHM_DIR "/dev/shm"

enum { CH_SHM_KIND_LOADER = 1, CH_SHM_KIND_INFER = 2 };

/* Counter slots, in order; new ones are appended (ncounters grows, the
 * version does not): a reader treats slots past ncounters as absent. */
enum {
    CH_SHM_PUBLISHED_NS, /* CLOCK_MONOTONIC of this copy */
    CH_SHM_WALL_NS,
    CH_SHM_SAMPLES,
    CH_SHM_BATCHES,
    CH_SHM_WAIT_NS,
    CH_SHM_WINDOW_NS,
    CH_SHM_WINDOW_SAMPLES,
    CH_SHM_WINDOW_WAIT_NS,
    CH_SHM_READ_BUSY_NS,
    CH_SHM_DECODE_BUSY_NS,
    CH_SHM_TRANSFORM_BUSY_NS,
    CH_SHM_READ_ITEMS,
    CH_SHM_READ_BYTES,
    CH_SHM_QUEUE_FILL_SUM,
    CH_SHM_QUEUE_CAPACITY,
    CH_SHM_WORKERS,
    CH_SHM_CORRUPT,
    CH_SHM_IO_RETRIES,
    CH_SHM_CACHE_HITS,
    CH_SHM_CACHE_MISSES,
    CH_SHM_TIER_HITS,
    CH_SHM_TIER_FETCHES,
    CH_SHM_READ_P50_NS,
    CH_SHM_READ_P99_NS,
    CH_SHM_LAST_WAIT_NS,
    CH_SHM_LAST_STEP_NS,
    /* An inference session's (kind CH_SHM_KIND_INFER; a loader leaves them
     * 0).  SAMPLES/BATCHES are its requests/batches handed out, WINDOW_*
     * the last second's handed-out requests, CORRUPT its failed requests,
     * QUEUE_CAPACITY its queue_capacity. */
    CH_SHM_INFER_QUEUED,    /* requests admitted and not yet released */
    CH_SHM_INFER_SUBMITTED, /* requests admitted, ever */
    CH_SHM_INFER_REJECTED,  /* submits refused with CHUTE_EBUSY */
    CH_SHM_LAT_P50_NS,      /* submit-to-poll latency of the last second's requests */
    CH_SHM_LAT_P99_NS,
    CH_SHM_NCOUNTERS
};

/* Version 1's header, at offset 0; every field at a fixed offset. */
typedef struct ch_shm_head {
    char magic[8];          /*   0 CH_SHM_MAGIC */
    uint32_t version;       /*   8 */
    uint32_t size;          /*  12 bytes of the segment */
    uint32_t head_bytes;    /*  16 offset of the counters, a multiple of 8 */
    uint32_t ncounters;     /*  20 */
    int32_t pid;            /*  24 */
    uint32_t kind;          /*  28 CH_SHM_KIND_* */
    uint64_t start_ticks;   /*  32 the process's start, /proc/PID/stat field 22 */
    uint64_t created_ns;    /*  40 CLOCK_REALTIME */
    uint32_t rank, world;   /*  48, 52 */
    char host[64];          /*  56 NUL-terminated */
    char dataset[64];       /* 120 the dataset's basename, [A-Za-z0-9._-] */
    char comm[16];          /* 184 the process's name (/proc/self/comm) */
    uint64_t seq;           /* 200 seqlock: odd while the counters change */
    uint8_t reserved[48];   /* 208 zero */
} ch_shm_head;

/* A checked copy of a segment. */
typedef struct ch_shm_view {
    int32_t pid;
    uint32_t version, kind, rank, world, ncounters;
    uint64_t start_ticks, created_ns, seq;
    char host[64], dataset[64], comm[16]; /* printable ASCII only */
    uint64_t c[CH_SHM_NCOUNTERS];         /* absent slots are 0 */
    int has[CH_SHM_NCOUNTERS];
} ch_shm_view;

/* Check a copy of a segment (len bytes at p, any alignment) and fill out.
 * 0, or -1 with the reason in why ("wrong magic", "version 9 (this chute
 * reads 1)", "truncated: 100 of 4096 bytes", ...).  Never reads outside
 * [p, p + len).  Strings are cut at their field and made printable. */
int ch_shm_parse(const void *p, size_t len, ch_shm_view *out, char *why, size_t why_len);

/* Read the segment file at path (dir fd dfd, name) for a reader: opened
 * O_RDONLY|O_NOFOLLOW, refused unless a regular file of this uid with no
 * group/other permission bits, read with pread under the seqlock (retries
 * a few times while a copy is being published).  0, or -1 with why. */
int ch_shm_read(int dfd, const char *name, ch_shm_view *out, char *why, size_t why_len);

/* Whether name is a segment name of uid ("chute-<uid>-<pid>-<n>"); its
 * pid into *out_pid. */
int ch_shm_name_match(const char *name, uid_t uid, pid_t *out_pid);

/* The start time of process pid (/proc/PID/stat field 22), 0 if gone. */
uint64_t ch_shm_proc_start(pid_t pid);

/* Remove this uid's stale segments in dir (pid gone, or a pid reused by a
 * process started at another time).  Returns how many were removed. */
int ch_shm_sweep(const char *dir);

/* The writer (a loader or an inference session). */
typedef struct ch_shm ch_shm;
typedef void (*ch_shm_fill_fn)(void *user, uint64_t *counters);
/* Create a segment in CH_SHM_DIR and publish fill(user, counters) (fill
 * may be NULL: zeros) once; later copies come from ch_shm_publish (the
 * owner's stats thread, every CH_SHM_PUBLISH_MS).  No thread of its own.
 * NULL when it cannot (no /dev/shm, a planted name, no memory): stats are
 * optional, the loader runs on.  Sweeps stale segments first. */
ch_shm *ch_shm_create(uint32_t kind, uint32_t rank, uint32_t world, const char *dataset_path,
                      ch_shm_fill_fn fill, void *user);
/* Publish counters[CH_SHM_NCOUNTERS] under the seqlock (its PUBLISHED_NS
 * slot is set to now).  One publisher at a time. */
void ch_shm_publish(ch_shm *s, uint64_t *counters);
/* Unlink and unmap.  NULL is fine.  No publish may run. */
void ch_shm_close(ch_shm *s);
/* In a forked child: unmap without unlinking (the parent owns the file). */
void ch_shm_abandon(ch_shm *s);
/* The segment's file name (for tests and messages). */
const char *ch_shm_path(const ch_shm *s);

#endif
