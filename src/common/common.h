/*
 * common.h — small helpers every layer uses: error reporting into a
 * chute_error, monotonic time, a counter-based RNG, checked allocation.
 *
 * Nothing here holds state between calls; there are no globals.
 */
#ifndef CHUTE_COMMON_H
#define CHUTE_COMMON_H

#include "chute.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define CH_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CH_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CH_CACHELINE 64

/* Write a formatted message and code into err (may be NULL); returns code. */
int ch_err(chute_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, but appends ": strerror(errnum)". */
int ch_err_errno(chute_error *err, int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Copy src into dst[n]; if it does not fit, drop its middle (marked with
 * "\u2026") so that both the start (where) and the end (why) survive. */
void ch_str_fit(char *dst, size_t n, const char *src);
/* One unit of Python's os.fsdecode (UTF-8, errors="surrogateescape") of
 * the n > 0 bytes at p: a well-formed UTF-8 sequence, or one byte that is
 * not part of one, escaped to U+DC00 + byte.  Returns its length. */
size_t ch_fsdecode_unit(const unsigned char *p, size_t n, uint32_t *cp);

/* What an error that stopped one sample says about the run (chute.h,
 * above chute_corrupt_policy): bad content of that sample (skip or fail
 * per policy), an I/O problem (retry, then fail; never skip), or anything
 * else (fail). */
enum { CH_ERR_CONTENT = 0, CH_ERR_IO = 1, CH_ERR_FATAL = 2 };
int ch_error_kind(int status);

static inline uint64_t ch_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* splitmix64: a counter-based mixer; used to derive per-sample streams
 * from (seed, epoch, sample id) so results never depend on scheduling. */
static inline uint64_t ch_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

typedef struct ch_rng {
    uint64_t s;
} ch_rng;

static inline ch_rng ch_rng_for(uint64_t seed, uint64_t stream, uint64_t id)
{
    ch_rng r;
    r.s = ch_mix64(ch_mix64(seed ^ 0x6368757465ull) ^ ch_mix64(stream + 0x1234567ull) ^ id);
    return r;
}

static inline uint64_t ch_rng_next(ch_rng *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    uint64_t x = r->s;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Uniform double in [0, 1). */
static inline double ch_rng_uniform(ch_rng *r)
{
    return (double)(ch_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n) without modulo bias worth mentioning (n < 2^32). */
static inline uint64_t ch_rng_below(ch_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)ch_rng_next(r) * n) >> 64);
}

/* Fill v with a uniformly random permutation of 0..n-1 (Fisher-Yates
 * drawing from r), so the same stream always gives the same order. */
void ch_permutation(uint64_t *v, uint64_t n, ch_rng *r);

/* Allocation aligned to `align` bytes (power of two); free with free(). */
void *ch_aligned_alloc(size_t align, size_t size);
/* Touch every page of a fresh buffer once so the first batch doesn't pay
 * the page-fault cost inside the hot loop (see ARCHITECTURE.md, lever 6). */
void ch_pretouch(void *p, size_t n);

/* Growable byte buffer owned by one thread (worker scratch). */
typedef struct ch_buf {
    uint8_t *data;
    size_t cap;
} ch_buf;
/* Make room for n bytes.  Growing does not keep the old contents: the
 * buffers are scratch, refilled after every reserve. */
int ch_buf_reserve(ch_buf *b, size_t n);
void ch_buf_free(ch_buf *b);

int ch_online_cores(void);

/* The scheduler slice of the calling thread, in us.  Linux 6.12+ (EEVDF)
 * lets a SCHED_OTHER/SCHED_BATCH thread ask for its own slice
 * (sched_setattr's sched_runtime, clamped by the kernel to 0.1..100 ms).
 * Nothing else about the thread changes (policy, nice, reset-on-fork are
 * read first and given back as they were); a thread under a real-time or
 * deadline policy is left alone.  `us` 0 asks for nothing.  Returns the
 * slice in force afterwards as the kernel reports it (its default where
 * none was set: 0.7 ms x (1 + log2 of the CPUs, at most 8) on 6.12+), or
 * 0 where it reports none (an older kernel, another OS, a seccomp filter
 * refusing the call). */
uint32_t ch_thread_slice(uint32_t us);
/* Back to the kernel's default slice (a thread inherits its creator's
 * slice: a worker started by a thread that asked for a short one would
 * otherwise run with it).  Returns the slice in force, as above. */
uint32_t ch_thread_slice_default(void);

/* How many CPUs this process may use, and why: the default for worker
 * and pack thread counts.  Starts from the online cores, takes the
 * smaller of that and the affinity mask (taskset, numactl, a launcher's
 * pinning) and the cgroup CPU quota (containers: cgroup v2 cpu.max or v1
 * cpu.cfs_quota_us / cpu.cfs_period_us, rounded up), then divides by
 * LOCAL_WORLD_SIZE when the environment sets it (torchrun starts that
 * many processes per host, each of which would otherwise start one
 * thread per core).  Never below 1. */
typedef struct ch_cpu_budget {
    uint32_t cpus;            /* the answer, >= 1 */
    uint32_t online;          /* sysconf(_SC_NPROCESSORS_ONLN) */
    uint32_t affinity;        /* CPUs in the affinity mask; 0 if unknown */
    uint32_t quota;           /* cgroup quota rounded up; 0 if none */
    uint32_t local_world;     /* LOCAL_WORLD_SIZE; 0 if unset or unusable */
    char why[256];            /* e.g. "affinity 2 of 16 online CPUs / LOCAL_WORLD_SIZE=2" */
} ch_cpu_budget;
void ch_cpu_budget_get(ch_cpu_budget *out);

/* CPU quota of the cgroup named in `self_cgroup` (a file in the format of
 * /proc/self/cgroup) under the cgroup file system mounted at `root`
 * (/sys/fs/cgroup): the smallest quota of that cgroup and its ancestors,
 * v2 (cpu.max) or v1 (cpu.cfs_quota_us over cpu.cfs_period_us), in CPUs.
 * Returns 0.0 when there is no quota or nothing could be read.  If the
 * path from self_cgroup does not exist under root (a cgroup namespace
 * shows "/"), root itself is what is checked.  Writes which file set the
 * limit into src (may be NULL). */
double ch_cgroup_cpu_quota(const char *root, const char *self_cgroup, char *src, size_t srclen);

#endif
