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
 * parallelism is the thread count.  Latency is submit-to-completion.  Every
 * completion is counted, including those that land after the deadline
 * (the elapsed time runs until the last one), and every thread completes
 * at least one read, so a short --time never reports a rate built from a
 * fraction of the work it timed.
 *
 * What it must never do is write to anything it did not create.  As with
 * fio's devices, an existing PATH (regular file or block device) is only
 * ever opened read-only; if it is too small for the pattern the run is
 * refused.  Test data is laid out only in files and directories that this
 * run creates itself (O_EXCL, mkdtemp), named chute-iobench-*, and only
 * those are removed afterwards (or kept with --keep; a kept file given as
 * PATH later is then read, not rewritten).  SIGINT/SIGTERM stop the run
 * and still remove what was created.
 *
 * What it must never claim is a cold read it did not measure.  The test
 * data is evicted from the page cache before measuring (posix_fadvise
 * DONTNEED), and mincore() then checks how much of it is really gone; a
 * run that re-reads what it already read (a file smaller than the data the
 * run reads) counts those reads; with --direct, the data read is checked
 * again after the run, since some filesystems accept O_DIRECT and cache
 * anyway (tmpfs keeps files in memory whatever the flags).  The report
 * says which of these happened instead of a blanket "cache dropped".
 */
#define _GNU_SOURCE
#include "cli.h"
#include "common/common.h"
#include "io/io.h"
#include "stats/hist.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>
#ifdef CHUTE_HAVE_URING
#include <liburing.h>
#endif

enum { PAT_IMAGENET = 0, PAT_SEQUENTIAL = 1, PAT_FILES = 2 };
enum { ENGINE_AUTO = 0, ENGINE_URING = 1, ENGINE_PSYNC = 2 };
enum { TGT_CREATED_FILE, TGT_CREATED_DIR, TGT_EXISTING_FILE, TGT_BLOCK_DEVICE };

#define MAX_READ (256u * 1024) /* largest read of the ImageNet mix */
#define PROBE_WINDOWS 1024     /* page-cache probes per check */
#define CACHED_WARN 0.05       /* above this fraction a read is not called cold */

static const struct {
    uint32_t kib, pct;
} k_mix[] = {{2, 1}, {4, 2}, {8, 4}, {16, 8}, {32, 13}, {64, 38}, {128, 33}, {256, 1}};
#define IMAGENET_MEAN_BYTES 110000.0 /* ImageNet's mean JPEG size (~110 KB) */

/* The one piece of process state: set by SIGINT/SIGTERM so that a run
 * interrupted while laying out or measuring still removes what it
 * created.  A signal handler can reach nothing else. */
static volatile sig_atomic_t g_iobench_stop;

static void on_stop_signal(int sig)
{
    (void)sig;
    g_iobench_stop = 1;
}

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

/* ---- the target: what is read, and what this run created ---------------- */

typedef struct io_target {
    int kind;                 /* TGT_* */
    char path[4096];          /* file or device read; files pattern: the directory */
    uint64_t size;            /* single-file patterns: bytes of `path` measured */
    char **files;             /* files pattern */
    uint32_t nfiles;
    uint32_t ncreated;        /* files[0..ncreated) were created by this run */
    uint8_t subdir_made[100]; /* files pattern: <path>/NN created by this run */
    int path_created;         /* `path` itself was created by this run */
    char fs[32];              /* filesystem name, for the report */
    int fs_in_memory;         /* tmpfs/ramfs: the "storage" is RAM */
} io_target;

static void fs_describe(const char *path, io_target *t)
{
    struct statfs sf;
    snprintf(t->fs, sizeof t->fs, "unknown");
    if (t->kind == TGT_BLOCK_DEVICE) {
        snprintf(t->fs, sizeof t->fs, "block device");
        return;
    }
    if (statfs(path, &sf) != 0)
        return;
    static const struct {
        unsigned long magic;
        const char *name;
        int mem;
    } k[] = {{0x01021994, "tmpfs", 1}, {0x858458f6, "ramfs", 1}, {0xEF53, "ext4", 0},
             {0x58465342, "xfs", 0},   {0x9123683E, "btrfs", 0}, {0x794c7630, "overlay", 0},
             {0x6969, "nfs", 0},       {0x2fc12fc1, "zfs", 0},   {0x65735546, "fuse", 0},
             {0x01161970, "gfs2", 0},  {0xF2F52010, "f2fs", 0},  {0x0BD00BD0, "lustre", 0}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if ((unsigned long)sf.f_type == k[i].magic) {
            snprintf(t->fs, sizeof t->fs, "%s", k[i].name);
            t->fs_in_memory = k[i].mem;
            return;
        }
    snprintf(t->fs, sizeof t->fs, "0x%lx", (unsigned long)sf.f_type);
}

/* Refuse a layout that cannot fit, before writing a byte of it. */
static int check_free_space(const char *dir, uint64_t need)
{
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0)
        return 0; /* unknown: the writes themselves will tell */
    uint64_t avail = (uint64_t)sv.f_bavail;
    if (sv.f_frsize && avail > UINT64_MAX / sv.f_frsize)
        return 0;
    avail *= sv.f_frsize;
    if (need > avail) {
        fprintf(stderr,
                "chute iobench: %s: the test data needs %.1f MB but the filesystem has %.1f MB "
                "free; use a smaller --size/--files\n",
                dir, need / 1e6, avail / 1e6);
        return -1;
    }
    return 0;
}

/* Write `size` incompressible bytes to fd, a file this run just created. */
static int fill_file(int fd, const char *path, uint64_t size, int quiet)
{
    if (!quiet)
        fprintf(stderr, "iobench: laying out %s (%.1f GB)...\n", path, size / 1e9);
    size_t chunk = 1 << 20;
    uint64_t *buf = malloc(chunk);
    if (!buf) {
        fprintf(stderr, "chute iobench: out of memory\n");
        return -1;
    }
    ch_rng r = ch_rng_for(7, 7, 7);
    for (uint64_t done = 0; done < size; done += chunk) {
        if (g_iobench_stop) {
            free(buf);
            return -1;
        }
        for (size_t i = 0; i < chunk / 8; i++)
            buf[i] = ch_rng_next(&r);
        size_t n = size - done < chunk ? (size_t)(size - done) : chunk;
        chute_error err = {0};
        if (ch_write_all(fd, path, buf, n, &err) != CHUTE_OK) {
            fprintf(stderr, "chute iobench: %s\n", err.message);
            free(buf);
            return -1;
        }
    }
    free(buf);
    if (fsync(fd) != 0) {
        fprintf(stderr, "chute iobench: %s: fsync failed: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Lay out the files pattern's set inside t->path, a directory this run
 * created: every file and subdirectory is new (O_EXCL / mkdir). */
static int layout_files(io_target *t, uint32_t n, int quiet)
{
    t->files = calloc(n, sizeof *t->files);
    uint32_t *sizes = malloc((size_t)n * sizeof *sizes);
    uint8_t *buf = malloc(MAX_READ);
    int rc = -1;
    if (!t->files || !sizes || !buf) {
        fprintf(stderr, "chute iobench: out of memory for %u files\n", n);
        goto out;
    }
    t->nfiles = n;
    ch_rng r = ch_rng_for(9, 9, 9);
    for (size_t i = 0; i < MAX_READ / 8; i++)
        ((uint64_t *)buf)[i] = ch_rng_next(&r);
    uint64_t need = 0;
    for (uint32_t i = 0; i < n; i++) {
        sizes[i] = mix_size(&r);
        need += ((uint64_t)sizes[i] + 4095) / 4096 * 4096;
    }
    if (check_free_space(t->path, need) != 0)
        goto out;
    if (!quiet)
        fprintf(stderr, "iobench: creating %u files in %s...\n", n, t->path);
    for (uint32_t i = 0; i < n; i++) {
        if (g_iobench_stop)
            goto out;
        uint32_t d = i % 100;
        if (!t->subdir_made[d]) {
            char sub[4200];
            snprintf(sub, sizeof sub, "%s/%02u", t->path, d);
            if (mkdir(sub, 0755) != 0) {
                fprintf(stderr, "chute iobench: %s: cannot create: %s\n", sub, strerror(errno));
                goto out;
            }
            t->subdir_made[d] = 1;
        }
        if (asprintf(&t->files[i], "%s/%02u/f%07u.bin", t->path, d, i) < 0) {
            t->files[i] = NULL;
            fprintf(stderr, "chute iobench: out of memory\n");
            goto out;
        }
        int fd = open(t->files[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "chute iobench: %s: cannot create: %s\n", t->files[i], strerror(errno));
            goto out;
        }
        t->ncreated = i + 1;
        chute_error err = {0};
        int wrc = ch_write_all(fd, t->files[i], buf, sizes[i], &err);
        close(fd);
        if (wrc != CHUTE_OK) {
            fprintf(stderr, "chute iobench: %s\n", err.message);
            goto out;
        }
    }
    int dfd = open(t->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        syncfs(dfd); /* clean pages are what DONTNEED can drop */
        close(dfd);
    }
    rc = 0;
out:
    free(sizes);
    free(buf);
    return rc;
}

/* Remove exactly what this run created, nothing else: the files it
 * created by name, then its (by now empty) directories with rmdir, which
 * cannot remove anything that someone else put there. */
static void target_cleanup(io_target *t, int keep, int quiet)
{
    int created = t->kind == TGT_CREATED_FILE || t->kind == TGT_CREATED_DIR;
    if (keep && created) {
        if (!quiet)
            fprintf(stderr, "iobench: kept the test data in %s\n", t->path);
    } else if (created) {
        for (uint32_t i = 0; i < t->ncreated; i++)
            if (unlink(t->files[i]) != 0)
                fprintf(stderr, "chute iobench: %s: cannot remove: %s\n", t->files[i],
                        strerror(errno));
        for (uint32_t d = 0; d < 100; d++)
            if (t->subdir_made[d]) {
                char sub[4200];
                snprintf(sub, sizeof sub, "%s/%02u", t->path, d);
                if (rmdir(sub) != 0)
                    fprintf(stderr, "chute iobench: %s: cannot remove: %s\n", sub, strerror(errno));
            }
        if (t->path_created && (t->kind == TGT_CREATED_DIR ? rmdir(t->path) : unlink(t->path)) != 0)
            fprintf(stderr, "chute iobench: %s: cannot remove: %s\n", t->path, strerror(errno));
    }
    for (uint32_t i = 0; i < t->nfiles; i++)
        free(t->files[i]);
    free(t->files);
    t->files = NULL;
    t->nfiles = t->ncreated = 0;
}

/* Create a new, clearly named test file (or, for the files pattern, a new
 * directory) for PATH: PATH itself when it does not exist yet, or a
 * chute-iobench-XXXXXX name inside PATH when it is a directory. */
static int create_target(const char *arg, int isdir, int pattern, uint64_t size, uint32_t nfiles,
                         int quiet, io_target *t)
{
    int files = pattern == PAT_FILES;
    int fd = -1;
    t->kind = files ? TGT_CREATED_DIR : TGT_CREATED_FILE;
    if (isdir) {
        int l = snprintf(t->path, sizeof t->path, "%s/%s", arg,
                         files ? "chute-iobench-files-XXXXXX" : "chute-iobench-XXXXXX.dat");
        if (l < 0 || (size_t)l >= sizeof t->path) {
            fprintf(stderr, "chute iobench: %s: path too long\n", arg);
            return -1;
        }
        if (files ? mkdtemp(t->path) == NULL : (fd = mkostemps(t->path, 4, O_CLOEXEC)) < 0) {
            fprintf(stderr, "chute iobench: %s: cannot create test %s: %s\n", arg,
                    files ? "directory" : "file", strerror(errno));
            return -1;
        }
    } else {
        if (strlen(arg) >= sizeof t->path) {
            fprintf(stderr, "chute iobench: %s: path too long\n", arg);
            return -1;
        }
        snprintf(t->path, sizeof t->path, "%s", arg);
        if (files ? mkdir(t->path, 0755) != 0
                  : (fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
            fprintf(stderr, "chute iobench: %s: cannot create: %s\n", t->path, strerror(errno));
            return -1;
        }
    }
    t->path_created = 1;
    fs_describe(t->path, t);
    if (files)
        return layout_files(t, nfiles, quiet);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", t->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    int rc = check_free_space(dir, size) == 0 ? fill_file(fd, t->path, size, quiet) : -1;
    close(fd);
    t->size = size;
    return rc;
}

/* An existing file or block device: read-only, never resized or written. */
static int existing_target(const char *arg, const struct stat *st, int pattern, uint64_t want,
                           uint64_t bs, io_target *t)
{
    if (pattern == PAT_FILES) {
        fprintf(stderr,
                "chute iobench: %s exists and is not a directory: the files pattern lays out "
                "its own small files, so give it a directory (or a path that does not exist)\n",
                arg);
        return -1;
    }
    snprintf(t->path, sizeof t->path, "%s", arg);
    uint64_t have = (uint64_t)st->st_size;
    if (S_ISBLK(st->st_mode)) {
        t->kind = TGT_BLOCK_DEVICE;
        int fd = open(arg, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "chute iobench: %s: cannot open for reading: %s\n", arg, strerror(errno));
            return -1;
        }
        if (ioctl(fd, BLKGETSIZE64, &have) != 0) {
            fprintf(stderr, "chute iobench: %s: cannot read the device size: %s\n", arg,
                    strerror(errno));
            close(fd);
            return -1;
        }
        close(fd);
    } else {
        t->kind = TGT_EXISTING_FILE;
    }
    fs_describe(arg, t);
    const char *what = t->kind == TGT_BLOCK_DEVICE ? "device" : "file";
    if (want > have) {
        fprintf(stderr,
                "chute iobench: %s: the %s holds %llu bytes, less than --size %llu; iobench "
                "only reads an existing %s and never writes to it: drop --size to use all of "
                "it, or give a directory to lay out a new test file\n",
                arg, what, (unsigned long long)have, (unsigned long long)want, what);
        return -1;
    }
    t->size = want ? want : have;
    uint64_t need = pattern == PAT_SEQUENTIAL ? bs : MAX_READ;
    if (t->size < need) {
        fprintf(stderr,
                "chute iobench: %s: the %s holds %llu bytes, too small for the %s pattern "
                "(needs at least %llu); iobench never writes to an existing %s: give a "
                "directory to lay out a new test file\n",
                arg, what, (unsigned long long)t->size,
                pattern == PAT_SEQUENTIAL ? "sequential" : "imagenet", (unsigned long long)need,
                what);
        return -1;
    }
    return 0;
}

static int open_target(const char *arg, int pattern, uint64_t want, uint64_t bs, uint32_t nfiles,
                       int quiet, io_target *t)
{
    struct stat st;
    if (stat(arg, &st) != 0) {
        if (errno != ENOENT) {
            fprintf(stderr, "chute iobench: %s: %s\n", arg, strerror(errno));
            return -1;
        }
        return create_target(arg, 0, pattern, want ? want : 1ull << 30, nfiles, quiet, t);
    }
    if (S_ISDIR(st.st_mode))
        return create_target(arg, 1, pattern, want ? want : 1ull << 30, nfiles, quiet, t);
    if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
        return existing_target(arg, &st, pattern, want, bs, t);
    fprintf(stderr,
            "chute iobench: %s is neither a directory, a regular file nor a block device\n", arg);
    return -1;
}

/* ---- page-cache checks ------------------------------------------------- */

/* mincore() reports another process's cached pages of a file only to its
 * owner, a writer or root; anyone else would read "not cached" for pages
 * that are, so then the check is not made at all. */
static int can_probe(const char *path)
{
    struct stat st;
    return geteuid() == 0 || (stat(path, &st) == 0 && st.st_uid == geteuid()) ||
           access(path, W_OK) == 0;
}

/* Count cached pages in [off, off+len) of fd. */
static int probe_window(int fd, uint64_t off, uint64_t len, uint64_t *pages, uint64_t *cached)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t a = off / pg * pg;
    len += off - a;
    if (len == 0)
        return 0;
    void *m = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd, (off_t)a);
    if (m == MAP_FAILED)
        return -1;
    size_t np = (size_t)((len + pg - 1) / pg);
    unsigned char vec[256];
    int rc = 0;
    for (size_t i = 0; i < np && rc == 0; i += sizeof vec) {
        size_t k = np - i < sizeof vec ? np - i : sizeof vec;
        size_t bytes = k * pg;
        if ((uint64_t)(i * pg + bytes) > len)
            bytes = (size_t)(len - i * pg);
        if (mincore((char *)m + i * pg, bytes, vec) != 0) {
            rc = -1;
            break;
        }
        for (size_t q = 0; q < k; q++)
            *cached += vec[q] & 1;
        *pages += k;
    }
    munmap(m, (size_t)len);
    return rc;
}

/* Fraction of one file's (or device's) pages in the page cache, probed in
 * up to PROBE_WINDOWS windows: spread over [0, size) or, given `touched`
 * (one bit per 2^shift-byte chunk), over the chunks the run read.
 * -1 when it cannot be known. */
static double cached_fraction_file(const char *path, uint64_t size, const _Atomic uint64_t *touched,
                                   unsigned shift)
{
    if (!can_probe(path))
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    uint64_t pages = 0, cached = 0, nchunks = ((size - 1) >> shift) + 1;
    uint64_t win = 1ull << shift;
    if (win > (1u << 20))
        win = 1u << 20;
    int rc = 0;
    if (touched) {
        uint64_t set = 0;
        for (uint64_t w = 0; w < (nchunks + 63) / 64; w++)
            set += (uint64_t)__builtin_popcountll(atomic_load_explicit(&touched[w], memory_order_relaxed));
        uint64_t stride = set / PROBE_WINDOWS + 1, seen = 0;
        for (uint64_t c = 0; c < nchunks && rc == 0; c++) {
            if (!(atomic_load_explicit(&touched[c >> 6], memory_order_relaxed) >> (c & 63) & 1))
                continue;
            if (seen++ % stride == 0) {
                uint64_t off = c << shift;
                rc = probe_window(fd, off, size - off < win ? size - off : win, &pages, &cached);
            }
        }
    } else {
        uint64_t step = size / PROBE_WINDOWS;
        if (step < win)
            step = win;
        for (uint64_t off = 0; off < size && rc == 0; off += step)
            rc = probe_window(fd, off, size - off < win ? size - off : win, &pages, &cached);
    }
    close(fd);
    return rc != 0 || pages == 0 ? -1 : (double)cached / (double)pages;
}

/* The same over a set of files: up to PROBE_WINDOWS of files[order[0..n)]. */
static double cached_fraction_files(char **files, const uint64_t *order, uint64_t n)
{
    uint64_t pages = 0, cached = 0, stride = n / PROBE_WINDOWS + 1;
    for (uint64_t k = 0; k < n; k += stride) {
        const char *p = files[order ? order[k] : k];
        if (!can_probe(p))
            return -1;
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            if (fd >= 0)
                close(fd);
            return -1;
        }
        int rc = probe_window(fd, 0, (uint64_t)st.st_size, &pages, &cached);
        close(fd);
        if (rc != 0)
            return -1;
    }
    return pages == 0 ? -1 : (double)cached / (double)pages;
}

/* ---- measuring --------------------------------------------------------- */

typedef struct io_job {
    int pattern, direct;
    const char *file;          /* imagenet / sequential */
    uint64_t file_size;
    char **files;              /* files pattern */
    uint32_t nfiles;
    uint32_t qd, threads;
    uint64_t bs;
    double deadline;
    _Atomic int failed;
    _Atomic uint64_t file_next;  /* files: position in the shuffled pass */
    uint64_t *file_order;
    _Atomic uint64_t *touched;   /* one bit per 2^chunk_shift bytes read so far */
    unsigned chunk_shift;
    char errmsg[512];
    pthread_mutex_t mu;
} io_job;

typedef struct io_thread {
    io_job *job;
    uint32_t id;
    pthread_t th;
    uint64_t ios, bytes, rereads;
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

static int job_should_stop(io_job *j)
{
    return g_iobench_stop || atomic_load_explicit(&j->failed, memory_order_relaxed) ||
           cli_now_s() >= j->deadline;
}

/* Mark [off, off+len) as read; 1 if all of it had been read before in
 * this run (so the page cache probably served it). */
static int mark_read(io_job *j, uint64_t off, uint32_t len)
{
    uint64_t c0 = off >> j->chunk_shift, c1 = (off + len - 1) >> j->chunk_shift;
    int all = 1;
    for (uint64_t c = c0; c <= c1; c++) {
        uint64_t bit = 1ull << (c & 63);
        if (!(atomic_fetch_or_explicit(&j->touched[c >> 6], bit, memory_order_relaxed) & bit))
            all = 0;
    }
    return all;
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
    size_t cap = j->pattern == PAT_SEQUENTIAL ? j->bs : MAX_READ;
    uint8_t *buf = ch_aligned_alloc(4096, cap);
    int fd = -1;
    if (!buf) {
        job_fail(j, "%s: %s", "read buffer", ENOMEM);
        return NULL;
    }
    if (j->pattern != PAT_FILES) {
        fd = open(j->file, O_RDONLY | O_CLOEXEC | (j->direct ? O_DIRECT : 0));
        if (fd < 0) {
            job_fail(j, "%s: cannot open: %s", j->file, errno);
            free(buf);
            return NULL;
        }
    }
    uint64_t seq = 0;
    /* At least one read per thread, however short --time is. */
    do {
        uint64_t t0 = ch_now_ns(), got = 0;
        int reread = 0;
        if (j->pattern == PAT_FILES) {
            /* One shuffled pass: a file is read at most once, so every
             * read is cold (its pages were dropped before the run). */
            uint64_t k = atomic_fetch_add(&j->file_next, 1);
            if (k >= j->nfiles)
                break;
            const char *p = j->files[j->file_order[k]];
            int f = open(p, O_RDONLY | O_CLOEXEC | (j->direct ? O_DIRECT : 0));
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
            reread = mark_read(j, off, len);
            ssize_t n;
            do
                n = pread(fd, buf, len, (off_t)off);
            while (n < 0 && errno == EINTR && !g_iobench_stop);
            if (n < 0) {
                job_fail(j, "%s: read failed: %s", j->file, errno);
                break;
            }
            got = (uint64_t)n;
        }
        ch_hist_add(&t->hist, ch_now_ns() - t0);
        t->ios++;
        t->bytes += got;
        t->rereads += (uint64_t)reread;
    } while (!job_should_stop(j));
    if (fd >= 0)
        close(fd);
    free(buf);
    return NULL;
}

#ifdef CHUTE_HAVE_URING
/* Prepare (not submit) the next read into slot s's buffer. */
static void queue_read(struct io_uring *ring, io_thread *t, ch_rng *r, uint64_t *seq, int fd,
                       uint8_t *buf, uint64_t s, uint64_t *t_sub, uint8_t *slot_reread)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    uint64_t off;
    uint32_t len;
    next_io(t, r, seq, &off, &len);
    slot_reread[s] = (uint8_t)mark_read(t->job, off, len);
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
    size_t cap = j->pattern == PAT_SEQUENTIAL ? j->bs : MAX_READ;
    uint8_t *bufs = ch_aligned_alloc(4096, cap * j->qd);
    uint64_t *t_sub = calloc(j->qd, sizeof *t_sub);
    uint8_t *slot_reread = calloc(j->qd, 1);
    int fd = -1;
    if (!bufs || !t_sub || !slot_reread) {
        job_fail(j, "%s: %s", "read buffers (--qd x block size)", ENOMEM);
        goto out;
    }
    fd = open(j->file, O_RDONLY | O_CLOEXEC | (j->direct ? O_DIRECT : 0));
    if (fd < 0) {
        job_fail(j, "%s: cannot open: %s", j->file, errno);
        goto out;
    }
    uint64_t seq = 0;
    uint32_t inflight = 0;
    for (uint32_t s = 0; s < j->qd; s++, inflight++)
        queue_read(&ring, t, &r, &seq, fd, bufs + s * cap, s, t_sub, slot_reread);
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
         * one system call per batch of completions, as fio does.  Every
         * completion counts, also those reaped after the deadline: the
         * elapsed time runs until the last of them. */
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
            } else {
                ch_hist_add(&t->hist, now - t_sub[s]);
                t->ios++;
                t->bytes += (uint64_t)res;
                t->rereads += slot_reread[s];
            }
            if (!stop && job_should_stop(j))
                stop = 1;
            if (!stop) {
                queue_read(&ring, t, &r, &seq, fd, bufs + s * cap, s, t_sub, slot_reread);
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
    free(slot_reread);
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

/* ---- the command ------------------------------------------------------- */

typedef struct io_result {
    double seconds, iops, mbs, p50, p90, p99, imgs;
    uint64_t ios, bytes, rereads;
    double cached_before;      /* after the drop, before the run; -1 unknown */
    double cached_after;       /* --direct: data read, after the run; -1 unknown/not checked */
    double reread_frac;
    int cold;                  /* 1 cold, 0 not cold, -1 not verified */
    char cache[512];
} io_result;

/* Say truthfully where the bytes came from. */
static void judge_cache(const io_target *t, int direct, io_result *res)
{
    res->cold = -1;
    if (t->fs_in_memory) {
        snprintf(res->cache, sizeof res->cache,
                 "not bypassed: %.200s is on %s, which keeps files in memory%s; these are memory "
                 "speeds, not storage",
                 t->path, t->fs, direct ? " (O_DIRECT has no effect there)" : "");
        res->cold = 0;
    } else if (direct && res->cached_after > CACHED_WARN) {
        snprintf(res->cache, sizeof res->cache,
                 "not bypassed: O_DIRECT was accepted but %.0f%% of the data read is in the page "
                 "cache after the run (the %s filesystem ignores it)",
                 100 * res->cached_after, t->fs);
        res->cold = 0;
    } else if (res->cached_before > CACHED_WARN) {
        snprintf(res->cache, sizeof res->cache,
                 "NOT dropped: %.0f%% of the test data was still cached after posix_fadvise "
                 "DONTNEED; reads may have come from memory",
                 100 * res->cached_before);
        res->cold = 0;
    } else if (!direct && res->reread_frac > CACHED_WARN) {
        snprintf(res->cache, sizeof res->cache,
                 "dropped before the run, but %.0f%% of the reads re-read data this run had "
                 "already read (the test data is small for this run) and likely came from the "
                 "page cache: use a larger --size, or --direct",
                 100 * res->reread_frac);
        res->cold = 0;
    } else if (res->cached_before < 0 || (direct && res->cached_after < 0)) {
        snprintf(res->cache, sizeof res->cache, "%s (not verified: cannot query the page cache for %.200s)",
                 direct ? "bypassed (O_DIRECT)" : "dropped before the run (posix_fadvise DONTNEED)",
                 t->path);
    } else {
        snprintf(res->cache, sizeof res->cache, "%s, verified with mincore",
                 direct ? "bypassed (O_DIRECT)" : "dropped before the run (posix_fadvise DONTNEED)");
        res->cold = 1;
    }
}

/* Evict the test data and measure how much of it is really gone. */
static double drop_and_check(const io_target *t, int pattern)
{
    if (pattern == PAT_FILES) {
        for (uint32_t i = 0; i < t->nfiles; i++)
            ch_drop_page_cache(t->files[i]);
        return cached_fraction_files(t->files, NULL, t->nfiles);
    }
    ch_drop_page_cache(t->path);
    return cached_fraction_file(t->path, t->size, NULL, 12);
}

/* Refuse --direct where the filesystem refuses O_DIRECT, up front. */
static int check_direct(const io_target *t, int pattern)
{
    const char *p = pattern == PAT_FILES ? t->files[0] : t->path;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == EINVAL)
        fprintf(stderr,
                "chute iobench: %s: the %s filesystem refuses O_DIRECT (EINVAL), so the page "
                "cache cannot be bypassed here; run without --direct\n",
                p, t->fs);
    else
        fprintf(stderr, "chute iobench: %s: cannot open with O_DIRECT: %s\n", p, strerror(errno));
    return -1;
}

static int run_job(io_job *j, uint32_t threads, int use_uring, double secs, io_result *res)
{
    io_thread *ts = calloc(threads, sizeof *ts);
    ch_hist_snap *h = calloc(1, sizeof *h);
    if (!ts || !h) {
        free(ts);
        free(h);
        fprintf(stderr, "chute iobench: out of memory\n");
        return -1;
    }
    double t0 = cli_now_s();
    j->deadline = t0 + secs;
    uint32_t started = 0;
    for (uint32_t i = 0; i < threads; i++) {
        ts[i].job = j;
        ts[i].id = i;
#ifdef CHUTE_HAVE_URING
        void *(*fn)(void *) = use_uring ? uring_thread : psync_thread;
#else
        (void)use_uring;
        void *(*fn)(void *) = psync_thread;
#endif
        int e = pthread_create(&ts[i].th, NULL, fn, &ts[i]);
        if (e != 0) {
            job_fail(j, "%s: %s", "cannot start a reader thread", e);
            break;
        }
        started++;
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(ts[i].th, NULL);
    res->seconds = cli_now_s() - t0;
    for (uint32_t i = 0; i < started; i++) {
        res->ios += ts[i].ios;
        res->bytes += ts[i].bytes;
        res->rereads += ts[i].rereads;
        ch_hist_merge(h, &ts[i].hist);
    }
    cli_hist_pcts_us(h, &res->p50, &res->p90, &res->p99);
    free(h);
    free(ts);
    if (g_iobench_stop)
        return -1; /* said by the caller, after cleaning up */
    if (atomic_load(&j->failed)) {
        fprintf(stderr, "chute iobench: %s\n", j->errmsg);
        return -1;
    }
    if (res->ios == 0) {
        fprintf(stderr, "chute iobench: no read completed\n");
        return -1;
    }
    return 0;
}

static void print_result(const io_target *t, int pattern, int use_uring, int direct,
                         uint32_t threads, uint32_t qd, int keep, int json, const io_result *r)
{
    static const char *pn[] = {"imagenet", "sequential", "files"};
    static const char *tk[] = {"created", "created", "existing file", "block device"};
    const char *eng = use_uring ? "io_uring" : "psync";
    if (json) {
        printf("{\"pattern\":\"%s\",\"engine\":\"%s\",\"direct\":%s,\"threads\":%u,\"qd\":%u,"
               "\"seconds\":%.3f,\"ios\":%llu,\"bytes\":%llu,\"iops\":%.1f,\"mb_per_sec\":%.2f,"
               "\"lat_p50_us\":%.1f,\"lat_p90_us\":%.1f,\"lat_p99_us\":%.1f,"
               "\"images_per_sec\":%.1f,\"file\":",
               pn[pattern], eng, direct ? "true" : "false", threads, use_uring ? qd : 1, r->seconds,
               (unsigned long long)r->ios, (unsigned long long)r->bytes, r->iops, r->mbs, r->p50,
               r->p90, r->p99, r->imgs);
        cli_json_str(stdout, t->path);
        printf(",\"target\":\"%s\",\"kept\":%s,\"filesystem\":", tk[t->kind],
               keep && t->kind <= TGT_CREATED_DIR ? "true" : "false");
        cli_json_str(stdout, t->fs);
        printf(",\"page_cache\":");
        cli_json_str(stdout, r->cache);
        printf(",\"cold\":%s,\"rereads\":%llu,\"reread_fraction\":%.4f",
               r->cold < 0 ? "null" : r->cold ? "true" : "false", (unsigned long long)r->rereads,
               r->reread_frac);
        if (r->cached_before >= 0)
            printf(",\"cached_before_run_fraction\":%.4f", r->cached_before);
        else
            printf(",\"cached_before_run_fraction\":null");
        if (r->cached_after >= 0)
            printf(",\"cached_after_run_fraction\":%.4f", r->cached_after);
        printf("}\n");
    } else {
        printf("iobench %s on %s (%s%s%s): %s, %u thread(s), %u in flight per thread, %.1f s\n",
               pn[pattern], t->path, tk[t->kind], t->kind == TGT_BLOCK_DEVICE ? "" : ", ",
               t->kind == TGT_BLOCK_DEVICE ? "" : t->fs, eng, threads, use_uring ? qd : 1,
               r->seconds);
        printf("  %.0f IOPS  %.1f MB/s  latency p50 %.0f us  p90 %.0f us  p99 %.0f us\n", r->iops,
               r->mbs, r->p50, r->p90, r->p99);
        printf("  could sustain about %.0f images/s%s\n", r->imgs,
               pattern == PAT_SEQUENTIAL ? " at ImageNet's mean 110 KB per image"
                                         : " (one read per image)");
        printf("  page cache %s\n", r->cache);
    }
}

int cmd_iobench_remote(int argc, char **argv); /* iobench_remote.c */

int cmd_iobench(int argc, char **argv)
{
    /* s3:// and http(s):// targets: object-store GETs (iobench_remote.c). */
    for (int a = 0; a < argc; a++)
        if (!strncmp(argv[a], "s3://", 5) || !strncmp(argv[a], "http://", 7) ||
            !strncmp(argv[a], "https://", 8))
            return cmd_iobench_remote(argc, argv);
    int pattern = 0, engine = 0, direct = 0, json = 0, keep = 0;
    uint32_t qd = 32, threads = 1, nfiles = 20000;
    uint64_t size = 0, bs = 1ull << 20; /* size 0: not given */
    const char *time_s = "10s";
    const cli_opt opts[] = {
        {"--pattern", CLI_CHOICE, &pattern, "imagenet|sequential|files", 0, 0,
         "access pattern (default imagenet)"},
        {"--direct", CLI_FLAG, &direct, NULL, 0, 0, "O_DIRECT: bypass the page cache"},
        {"--qd", CLI_U32, &qd, NULL, 1, 4096, "reads in flight per thread with io_uring (default 32)"},
        {"--threads", CLI_U32, &threads, NULL, 1, 1024, "threads (default 1)"},
        {"--size", CLI_SIZE, &size, NULL, 1 << 20, 1ull << 50,
         "test file size (default 1G; of an existing file or device: the part read, default all)"},
        {"--bs", CLI_SIZE, &bs, NULL, 4096, 64ull << 20, "block size for sequential (default 1M)"},
        {"--files", CLI_U32, &nfiles, NULL, 1, 10000000, "file count for 'files' (default 20000)"},
        {"--time", CLI_STR, &time_s, NULL, 0, 0, "how long to measure (default 10s)"},
        {"--engine", CLI_CHOICE, &engine, "auto|io_uring|psync", 0, 0,
         "I/O engine (default auto: io_uring if usable)"},
        {"--keep", CLI_FLAG, &keep, NULL, 0, 0,
         "keep the test data this run creates (default: removed at the end)"},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "print one JSON object"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("iobench",
                       "PATH [options]\n\n"
                       "PATH: a directory (a new chute-iobench-* test file or file set is laid out\n"
                       "in it and removed afterwards), a path that does not exist yet (created as\n"
                       "the test file or directory), or an existing file or block device, which is\n"
                       "only read, never written.  s3://BUCKET/PREFIX and http(s):// targets:\n"
                       "see `chute iobench s3:// --help`",
                       opts, argc, argv, pos, 1, &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 1) {
        fprintf(stderr, "chute iobench: need PATH (see --help)\n");
        return 2;
    }
    double secs = cli_parse_duration(time_s);
    if (secs <= 0) {
        fprintf(stderr, "chute iobench: --time: '%s' is not a positive duration (e.g. 30s, 2m)\n",
                time_s);
        return 2;
    }
    if (bs % 4096) {
        fprintf(stderr, "chute iobench: --bs must be a multiple of 4096\n");
        return 2;
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
    /* Read buffers: threads x qd x block, each filled by the reads; refuse
     * what would not fit in half the RAM rather than be killed for it. */
    uint64_t per = pattern == PAT_SEQUENTIAL ? bs : MAX_READ;
    uint64_t bufs = (uint64_t)threads * (use_uring ? qd : 1) * per; /* <= 2^10 * 2^12 * 2^26 */
    uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    if (ram && bufs > ram / 2) {
        fprintf(stderr,
                "chute iobench: --threads %u x --qd %u x %llu-byte reads need %.1f GB of read "
                "buffers, more than half of this machine's %.1f GB: lower --qd, --threads or --bs\n",
                threads, use_uring ? qd : 1, (unsigned long long)per, bufs / 1e9, ram / 1e9);
        return 2;
    }

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    g_iobench_stop = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    io_target t;
    memset(&t, 0, sizeof t);
    io_job j;
    memset(&j, 0, sizeof j);
    pthread_mutex_init(&j.mu, NULL);
    io_result res;
    memset(&res, 0, sizeof res);
    res.cached_after = -1;
    int ret = 1;
    if (open_target(pos[0], pattern, size, bs, nfiles, json, &t) != 0)
        goto out;
    if (direct && check_direct(&t, pattern) != 0)
        goto out;
    /* Evicted also with --direct: what is cached after the run is then
     * what the run itself put there. */
    res.cached_before = drop_and_check(&t, pattern);

    j.pattern = pattern;
    j.direct = direct;
    j.file = t.path;
    j.file_size = t.size;
    j.files = t.files;
    j.nfiles = t.nfiles;
    j.qd = qd;
    j.threads = threads;
    j.bs = bs;
    if (pattern == PAT_FILES) {
        j.file_order = malloc((size_t)t.nfiles * sizeof *j.file_order);
        if (!j.file_order) {
            fprintf(stderr, "chute iobench: out of memory\n");
            goto out;
        }
        ch_rng sr = ch_rng_for(0x5eed, 3, 3);
        ch_permutation(j.file_order, t.nfiles, &sr);
    } else {
        /* One bit per 4 KiB up to 512 GiB (16 MiB of bits), coarser beyond. */
        j.chunk_shift = 12;
        while ((t.size >> j.chunk_shift) > (1ull << 27))
            j.chunk_shift++;
        uint64_t words = ((t.size >> j.chunk_shift) + 64) / 64;
        j.touched = calloc(words, sizeof *j.touched);
        if (!j.touched) {
            fprintf(stderr, "chute iobench: out of memory\n");
            goto out;
        }
    }
    if (run_job(&j, threads, use_uring, secs, &res) != 0)
        goto out;
    if (direct)
        res.cached_after = pattern == PAT_FILES
                               ? cached_fraction_files(t.files, j.file_order,
                                                       atomic_load(&j.file_next) < t.nfiles
                                                           ? atomic_load(&j.file_next)
                                                           : t.nfiles)
                               : cached_fraction_file(t.path, t.size, j.touched, j.chunk_shift);
    res.iops = res.ios / res.seconds;
    res.mbs = res.bytes / 1e6 / res.seconds;
    res.imgs = pattern == PAT_SEQUENTIAL ? res.bytes / IMAGENET_MEAN_BYTES / res.seconds : res.iops;
    res.reread_frac = (double)res.rereads / (double)res.ios;
    judge_cache(&t, direct, &res);
    print_result(&t, pattern, use_uring, direct, threads, qd, keep, json, &res);
    ret = 0;
out:
    target_cleanup(&t, keep && ret == 0 && !g_iobench_stop, json);
    free(j.file_order);
    free((void *)j.touched);
    pthread_mutex_destroy(&j.mu);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (g_iobench_stop) {
        fprintf(stderr, "chute iobench: interrupted; removed the test data it had created\n");
        return 130;
    }
    return ret;
}
