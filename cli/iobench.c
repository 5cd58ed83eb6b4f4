/*
 * iobench.c — `chute iobench PATH`: can this storage feed the GPUs?
 *
 * Three deep-learning access patterns, measured the way fio would:
 *   imagenet    random reads whose sizes follow ImageNet's file-size mix
 *               (2K 1%, 4K 2%, 8K 4%, 16K 8%, 32K 13%, 64K 38%, 128K 33%,
 *               256K 1%) at 4 KiB-aligned random offsets of one file
 *   sequential  large sequential reads (--bs, default 1M), as when
 *               streaming packed shards
 *   files       open + read + close of many small files (an ImageFolder
 *               tree), sizes from the same mix, each file read once in a
 *               shuffled pass (the run ends early if the pass completes)
 * With io_uring (liburing, when the kernel allows) each thread keeps --qd
 * reads in flight; otherwise each thread issues blocking preads, and the
 * parallelism is the thread count.  Latency is submit-to-completion.
 *
 * The test file (or file set) is laid out once and reused.  Without
 * --direct, its pages are dropped from the page cache (posix_fadvise
 * DONTNEED) before measuring, so reads come from the device unless the
 * run itself re-reads them.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "common/common.h"
#include "io/io.h"
#include "stats/hist.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef CHUTE_HAVE_URING
#include <liburing.h>
#endif

enum { PAT_IMAGENET = 0, PAT_SEQUENTIAL = 1, PAT_FILES = 2 };
enum { ENGINE_AUTO = 0, ENGINE_URING = 1, ENGINE_PSYNC = 2 };

static const struct {
    uint32_t kib, pct;
} k_mix[] = {{2, 1}, {4, 2}, {8, 4}, {16, 8}, {32, 13}, {64, 38}, {128, 33}, {256, 1}};
#define IMAGENET_MEAN_BYTES 110000.0 /* ImageNet's mean JPEG size (~110 KB) */

static uint32_t mix_size(ch_rng *r)
{
    uint64_t x = ch_rng_below(r, 100), acc = 0;
    for (size_t i = 0; i < sizeof k_mix / sizeof k_mix[0]; i++) {
        acc += k_mix[i].pct;
        if (x < acc)
            return k_mix[i].kib * 1024;
    }
    return 64 * 1024;
}

typedef struct io_job {
    int pattern, engine, direct;
    const char *file;          /* imagenet / sequential */
    uint64_t file_size;
    char **files;              /* files pattern */
    uint32_t nfiles;
    uint32_t qd, threads;
    uint64_t bs;
    double seconds;
    double deadline;
    _Atomic int failed;
    _Atomic uint64_t file_next;  /* files: position in the shuffled pass */
    uint64_t *file_order;
    char errmsg[512];
    pthread_mutex_t mu;
} io_job;

typedef struct io_thread {
    io_job *job;
    uint32_t id;
    pthread_t th;
    uint64_t ios, bytes;
    ch_hist hist;
} io_thread;

static void job_fail(io_job *j, const char *fmt, const char *path, int e)
{
    pthread_mutex_lock(&j->mu);
    if (!atomic_load(&j->failed))
        snprintf(j->errmsg, sizeof j->errmsg, fmt, path, strerror(e));
    atomic_store(&j->failed, 1);
    pthread_mutex_unlock(&j->mu);
}

/* Next (offset, length) for the single-file patterns. */
static void next_io(io_thread *t, ch_rng *r, uint64_t *seq_pos, uint64_t *off, uint32_t *len)
{
    io_job *j = t->job;
    if (j->pattern == PAT_IMAGENET) {
        *len = mix_size(r);
        uint64_t slots = (j->file_size - *len) / 4096 + 1;
        *off = ch_rng_below(r, slots) * 4096;
    } else {
        /* Each thread streams its own region, wrapping around. */
        uint64_t region = j->file_size / j->threads / j->bs * j->bs;
        if (region < j->bs)
            region = j->bs;
        uint64_t base = (uint64_t)t->id * region;
        if (base + j->bs > j->file_size)
            base = 0;
        *len = (uint32_t)j->bs;
        *off = base + *seq_pos;
        *seq_pos += j->bs;
        if (*seq_pos + j->bs > region)
            *seq_pos = 0;
    }
}

static void *psync_thread(void *arg)
{
    io_thread *t = arg;
    io_job *j = t->job;
    ch_rng r = ch_rng_for(0x10b, 1, t->id);
    size_t cap = j->pattern == PAT_SEQUENTIAL ? j->bs : 256 * 1024;
    uint8_t *buf = ch_aligned_alloc(4096, cap);
    int fd = -1;
    if (!buf) {
        job_fail(j, "%s: %s", "buffer", ENOMEM);
        return NULL;
    }
    if (j->pattern != PAT_FILES) {
        fd = open(j->file, O_RDONLY | (j->direct ? O_DIRECT : 0));
        if (fd < 0) {
            job_fail(j, "%s: cannot open: %s", j->file, errno);
            free(buf);
            return NULL;
        }
    }
    uint64_t seq = 0;
    while (!atomic_load_explicit(&j->failed, memory_order_relaxed) && cli_now_s() < j->deadline) {
        uint64_t t0 = ch_now_ns(), got = 0;
        if (j->pattern == PAT_FILES) {
            /* One shuffled pass: a file is read at most once, so every
             * read is cold (its pages were dropped before the run). */
            uint64_t k = atomic_fetch_add(&j->file_next, 1);
            if (k >= j->nfiles)
                break;
            const char *p = j->files[j->file_order[k]];
            int f = open(p, O_RDONLY | (j->direct ? O_DIRECT : 0));
            if (f < 0) {
                job_fail(j, "%s: cannot open: %s", p, errno);
                break;
            }
            for (;;) {
                ssize_t n = read(f, buf, cap);
                if (n < 0) {
                    if (errno == EINTR)
                        continue;
                    job_fail(j, "%s: read failed: %s", p, errno);
                    break;
                }
                if (n == 0)
                    break;
                got += (uint64_t)n;
            }
            close(f);
        } else {
            uint64_t off;
            uint32_t len;
            next_io(t, &r, &seq, &off, &len);
            ssize_t n = pread(fd, buf, len, (off_t)off);
            if (n < 0) {
                job_fail(j, "%s: read failed: %s", j->file, errno);
                break;
            }
            got = (uint64_t)n;
        }
        ch_hist_add(&t->hist, ch_now_ns() - t0);
        t->ios++;
        t->bytes += got;
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    return NULL;
}

#ifdef CHUTE_HAVE_URING
/* Prepare (not submit) the next read into slot s's buffer. */
static void queue_read(struct io_uring *ring, io_thread *t, ch_rng *r, uint64_t *seq, int fd,
                       uint8_t *buf, uint64_t s, uint64_t *t_sub)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    uint64_t off;
    uint32_t len;
    next_io(t, r, seq, &off, &len);
    io_uring_prep_read(sqe, fd, buf, len, off);
    io_uring_sqe_set_data64(sqe, s);
    t_sub[s] = ch_now_ns();
}

static void *uring_thread(void *arg)
{
    io_thread *t = arg;
    io_job *j = t->job;
    ch_rng r = ch_rng_for(0x10b, 2, t->id);
    struct io_uring ring;
    int e = io_uring_queue_init(j->qd, &ring, 0);
    if (e < 0) {
        job_fail(j, "%s: io_uring setup failed: %s", j->file, -e);
        return NULL;
    }
    size_t cap = j->pattern == PAT_SEQUENTIAL ? j->bs : 256 * 1024;
    uint8_t *bufs = ch_aligned_alloc(4096, cap * j->qd);
    uint64_t *t_sub = calloc(j->qd, sizeof *t_sub);
    int fd = open(j->file, O_RDONLY | (j->direct ? O_DIRECT : 0));
    if (!bufs || !t_sub || fd < 0) {
        job_fail(j, "%s: cannot open: %s", j->file, fd < 0 ? errno : ENOMEM);
        goto out;
    }
    uint64_t seq = 0;
    uint32_t inflight = 0;
    for (uint32_t s = 0; s < j->qd; s++, inflight++)
        queue_read(&ring, t, &r, &seq, fd, bufs + s * cap, s, t_sub);
    io_uring_submit(&ring);
    int stop = 0;
    while (inflight > 0) {
        struct io_uring_cqe *cqe;
        e = io_uring_wait_cqe(&ring, &cqe);
        if (e < 0) {
            if (e == -EINTR)
                continue;
            job_fail(j, "%s: io_uring wait failed: %s", j->file, -e);
            break;
        }
        /* Reap every completion that is ready, refill, then one submit:
         * one system call per batch of completions, as fio does. */
        unsigned queued = 0;
        do {
            uint64_t s = io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&ring, cqe);
            inflight--;
            uint64_t now = ch_now_ns();
            if (res < 0) {
                job_fail(j, "%s: read failed: %s", j->file, -res);
                stop = 1;
            } else if (!stop) {
                ch_hist_add(&t->hist, now - t_sub[s]);
                t->ios++;
                t->bytes += (uint64_t)res;
            }
            if (!stop && (atomic_load_explicit(&j->failed, memory_order_relaxed) ||
                          cli_now_s() >= j->deadline))
                stop = 1;
            if (!stop) {
                queue_read(&ring, t, &r, &seq, fd, bufs + s * cap, s, t_sub);
                inflight++;
                queued++;
            }
        } while (io_uring_peek_cqe(&ring, &cqe) == 0);
        if (queued)
            io_uring_submit(&ring);
    }
out:
    if (fd >= 0)
        close(fd);
    free(bufs);
    free(t_sub);
    io_uring_queue_exit(&ring);
    return NULL;
}

static int uring_usable(void)
{
    struct io_uring ring;
    if (io_uring_queue_init(2, &ring, 0) < 0)
        return 0;
    io_uring_queue_exit(&ring);
    return 1;
}
#endif

/* Fill a file with incompressible bytes up to `size` (reused if big enough). */
static int layout_file(const char *path, uint64_t size, int quiet)
{
    struct stat st;
    if (stat(path, &st) == 0 && (uint64_t)st.st_size >= size)
        return 0;
    if (!quiet)
        fprintf(stderr, "iobench: laying out %s (%.1f GB)...\n", path, size / 1e9);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "chute iobench: %s: cannot create: %s\n", path, strerror(errno));
        return -1;
    }
    size_t chunk = 1 << 20;
    uint64_t *buf = malloc(chunk);
    if (!buf) {
        close(fd);
        return -1;
    }
    ch_rng r = ch_rng_for(7, 7, 7);
    for (uint64_t done = 0; done < size; done += chunk) {
        for (size_t i = 0; i < chunk / 8; i++)
            buf[i] = ch_rng_next(&r);
        size_t n = size - done < chunk ? (size_t)(size - done) : chunk;
        if (ch_write_all(fd, path, buf, n, NULL) != CHUTE_OK) {
            fprintf(stderr, "chute iobench: %s: write failed: %s\n", path, strerror(errno));
            free(buf);
            close(fd);
            unlink(path);
            return -1;
        }
    }
    free(buf);
    fsync(fd);
    close(fd);
    return 0;
}

static int layout_files(const char *dir, uint32_t n, char ***out, int quiet)
{
    char marker[4200];
    snprintf(marker, sizeof marker, "%s/.complete-%u", dir, n);
    int have = access(marker, F_OK) == 0;
    if (!have) {
        if (!quiet)
            fprintf(stderr, "iobench: creating %u files in %s...\n", n, dir);
        if (ch_mkdir_p(dir, NULL) != CHUTE_OK) {
            fprintf(stderr, "chute iobench: %s: cannot create directory\n", dir);
            return -1;
        }
    }
    char **files = calloc(n, sizeof *files);
    uint8_t *buf = malloc(256 * 1024);
    if (!files || !buf) {
        free(files);
        free(buf);
        return -1;
    }
    ch_rng r = ch_rng_for(9, 9, 9);
    for (size_t i = 0; i < 256 * 1024 / 8; i++)
        ((uint64_t *)buf)[i] = ch_rng_next(&r);
    for (uint32_t i = 0; i < n; i++) {
        if (asprintf(&files[i], "%s/%02u/f%07u.bin", dir, i % 100, i) < 0) {
            free(buf);
            return -1;
        }
        if (!have) {
            char sub[4200];
            snprintf(sub, sizeof sub, "%s/%02u", dir, i % 100);
            mkdir(sub, 0755);
            int fd = open(files[i], O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || ch_write_all(fd, files[i], buf, mix_size(&r), NULL) != CHUTE_OK) {
                fprintf(stderr, "chute iobench: %s: cannot write: %s\n", files[i], strerror(errno));
                if (fd >= 0)
                    close(fd);
                free(buf);
                return -1;
            }
            close(fd);
        }
    }
    free(buf);
    if (!have) {
        sync();
        int fd = open(marker, O_WRONLY | O_CREAT, 0644);
        if (fd >= 0)
            close(fd);
    }
    *out = files;
    return 0;
}

int cmd_iobench(int argc, char **argv)
{
    io_job j;
    memset(&j, 0, sizeof j);
    int pattern = 0, engine = 0, direct = 0, json = 0;
    uint32_t qd = 32, threads = 1, nfiles = 20000;
    uint64_t size = 1ull << 30, bs = 1ull << 20;
    const char *time_s = "10s";
    const cli_opt opts[] = {
        {"--pattern", CLI_CHOICE, &pattern, "imagenet|sequential|files", 0, 0,
         "access pattern (default imagenet)"},
        {"--direct", CLI_FLAG, &direct, NULL, 0, 0, "O_DIRECT: bypass the page cache"},
        {"--qd", CLI_U32, &qd, NULL, 1, 4096, "reads in flight per thread with io_uring (default 32)"},
        {"--threads", CLI_U32, &threads, NULL, 1, 1024, "threads (default 1)"},
        {"--size", CLI_SIZE, &size, NULL, 1 << 20, 1ull << 50, "test file size (default 1G)"},
        {"--bs", CLI_SIZE, &bs, NULL, 4096, 64ull << 20, "block size for sequential (default 1M)"},
        {"--files", CLI_U32, &nfiles, NULL, 1, 10000000, "file count for 'files' (default 20000)"},
        {"--time", CLI_STR, &time_s, NULL, 0, 0, "how long to measure (default 10s)"},
        {"--engine", CLI_CHOICE, &engine, "auto|io_uring|psync", 0, 0,
         "I/O engine (default auto: io_uring if usable)"},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "print one JSON object"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("iobench", "PATH [options]   (PATH: a directory or a test file)", opts,
                       argc, argv, pos, 1, &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 1) {
        fprintf(stderr, "chute iobench: need PATH (see --help)\n");
        return 2;
    }
    double secs = cli_parse_duration(time_s);
    if (secs <= 0) {
        fprintf(stderr, "chute iobench: --time: '%s' is not a duration (e.g. 30s, 2m)\n", time_s);
        return 2;
    }
    if (bs % 4096) {
        fprintf(stderr, "chute iobench: --bs must be a multiple of 4096\n");
        return 2;
    }
    struct stat st;
    int isdir = stat(pos[0], &st) == 0 && S_ISDIR(st.st_mode);
    char path[4096];
    char **files = NULL;
    if (pattern == PAT_FILES) {
        snprintf(path, sizeof path, "%s%s", pos[0], isdir ? "/chute-iobench-files" : "");
        if (layout_files(path, nfiles, &files, json) != 0)
            return 1;
        if (!direct)
            for (uint32_t i = 0; i < nfiles; i++)
                ch_drop_page_cache(files[i]);
    } else {
        snprintf(path, sizeof path, "%s%s", pos[0], isdir ? "/chute-iobench.dat" : "");
        if (layout_file(path, size, json) != 0)
            return 1;
        if (stat(path, &st) != 0)
            return 1;
        size = (uint64_t)st.st_size;
        if (size < 256 * 1024 || (pattern == PAT_SEQUENTIAL && size < bs)) {
            fprintf(stderr, "chute iobench: %s is too small for this pattern\n", path);
            return 1;
        }
        if (!direct)
            ch_drop_page_cache(path);
    }
    int use_uring = 0;
#ifdef CHUTE_HAVE_URING
    if (engine != ENGINE_PSYNC && pattern != PAT_FILES)
        use_uring = uring_usable();
#endif
    if (engine == ENGINE_URING && !use_uring) {
        fprintf(stderr, "chute iobench: io_uring is not available here%s\n",
                pattern == PAT_FILES ? " for the files pattern" : "");
        return 1;
    }
    j.pattern = pattern;
    j.direct = direct;
    j.file = path;
    j.file_size = size;
    j.files = files;
    j.nfiles = nfiles;
    j.qd = qd;
    j.threads = threads;
    j.bs = bs;
    j.seconds = secs;
    pthread_mutex_init(&j.mu, NULL);
    if (files) {
        j.file_order = malloc(nfiles * sizeof *j.file_order);
        if (!j.file_order)
            return 1;
        ch_rng sr = ch_rng_for(0x5eed, 3, 3);
        ch_permutation(j.file_order, nfiles, &sr);
    }
    io_thread *ts = calloc(threads, sizeof *ts);
    if (!ts)
        return 1;
    double t0 = cli_now_s();
    j.deadline = t0 + secs;
    uint32_t started = 0;
    for (uint32_t i = 0; i < threads; i++) {
        ts[i].job = &j;
        ts[i].id = i;
#ifdef CHUTE_HAVE_URING
        void *(*fn)(void *) = use_uring ? uring_thread : psync_thread;
#else
        void *(*fn)(void *) = psync_thread;
#endif
        if (pthread_create(&ts[i].th, NULL, fn, &ts[i]) != 0)
            break;
        started++;
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(ts[i].th, NULL);
    double el = cli_now_s() - t0;
    if (atomic_load(&j.failed)) {
        fprintf(stderr, "chute iobench: %s\n", j.errmsg);
        return 1;
    }
    uint64_t ios = 0, bytes = 0;
    ch_hist_snap *h = calloc(1, sizeof *h);
    if (!h)
        return 1;
    for (uint32_t i = 0; i < started; i++) {
        ios += ts[i].ios;
        bytes += ts[i].bytes;
        ch_hist_merge(h, &ts[i].hist);
    }
    double iops = ios / el, mbs = bytes / 1e6 / el;
    double p50 = ch_hist_quantile(h, 0.5) / 1e3, p90 = ch_hist_quantile(h, 0.9) / 1e3,
           p99 = ch_hist_quantile(h, 0.99) / 1e3;
    double imgs = pattern == PAT_SEQUENTIAL ? bytes / IMAGENET_MEAN_BYTES / el : iops;
    static const char *pn[] = {"imagenet", "sequential", "files"};
    const char *eng = use_uring ? "io_uring" : "psync";
    const char *cache = direct ? "bypassed (O_DIRECT)"
                               : "dropped before the run (posix_fadvise DONTNEED)";
    if (json) {
        printf("{\"pattern\":\"%s\",\"engine\":\"%s\",\"direct\":%s,\"threads\":%u,\"qd\":%u,"
               "\"seconds\":%.3f,\"ios\":%llu,\"bytes\":%llu,\"iops\":%.1f,\"mb_per_sec\":%.2f,"
               "\"lat_p50_us\":%.1f,\"lat_p90_us\":%.1f,\"lat_p99_us\":%.1f,"
               "\"images_per_sec\":%.1f,\"file\":",
               pn[pattern], eng, direct ? "true" : "false", threads, use_uring ? qd : 1, el,
               (unsigned long long)ios, (unsigned long long)bytes, iops, mbs, p50, p90, p99, imgs);
        cli_json_str(stdout, path);
        printf(",\"page_cache\":");
        cli_json_str(stdout, cache);
        printf("}\n");
    } else {
        printf("iobench %s on %s: %s, %u thread(s), %s%u in flight per thread, %.1f s\n",
               pn[pattern], path, eng, threads, use_uring ? "" : "", use_uring ? qd : 1, el);
        printf("  %.0f IOPS  %.1f MB/s  latency p50 %.0f us  p90 %.0f us  p99 %.0f us\n", iops,
               mbs, p50, p90, p99);
        printf("  could sustain about %.0f images/s%s; page cache %s\n", imgs,
               pattern == PAT_SEQUENTIAL ? " at ImageNet's mean 110 KB per image"
                                         : " (one read per image)",
               cache);
    }
    free(h);
    free(ts);
    if (files) {
        for (uint32_t i = 0; i < nfiles; i++)
            free(files[i]);
        free(files);
    }
    free(j.file_order);
    pthread_mutex_destroy(&j.mu);
    return 0;
}
