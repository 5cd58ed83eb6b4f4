/*
 * shmstats.c — the stats segment `chute top` reads: its writer (one small
 * thread per loader that copies the loader's counters in every 250 ms),
 * its checked reader, and the sweep of segments left by killed processes.
 *
 * Who writes: the stats thread (exporter.c), every 250 ms.  No thread of
 * the pipeline ticks on a clock (the workers block on reads, slots and
 * work, the consumer may sit in a model step for seconds), and the
 * moments top matters most are exactly those when the workers are stuck
 * in storage or the consumer is not calling next().  Publishing is a
 * seqlock'd copy of ~30 words of the tick's one stats snapshot.  Nothing
 * is added per sample or per batch.
 *
 * What it must never do: follow a link, open a file someone else made
 * (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), unlink a segment of a live
 * process, or fail the loader (every failure just leaves stats off).
 */
#include "stats/shmstats.h"
#include "common/common.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(ch_shm_head) == CH_SHM_HEAD_BYTES, "version 1 header is 256 bytes");
_Static_assert(CH_SHM_HEAD_BYTES + 8 * CH_SHM_NCOUNTERS <= CH_SHM_SIZE, "counters fit");

static void why_set(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t cap, const char *fmt, ...)
{
    if (!why || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* A fixed field as a printable string: cut at the first NUL or the field's
 * end, anything outside printable ASCII replaced by '?' (top prints these
 * to a terminal: no escape sequence gets through). */
static void field_str(char *dst, const uint8_t *src, size_t n)
{
    size_t i = 0;
    for (; i < n - 1 && src[i]; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? (char)src[i] : '?';
    dst[i] = '\0';
}

int ch_shm_parse(const void *p, size_t len, ch_shm_view *out, char *why, size_t why_len)
{
    const uint8_t *b = p;
    memset(out, 0, sizeof *out);
    if (len < CH_SHM_HEAD_BYTES) {
        why_set(why, why_len, "truncated: %zu bytes, a header is %u", len, CH_SHM_HEAD_BYTES);
        return -1;
    }
    if (memcmp(b, CH_SHM_MAGIC, 8) != 0) {
        why_set(why, why_len, "wrong magic (not a chute stats segment)");
        return -1;
    }
    uint32_t version = rd32(b + 8), size = rd32(b + 12), head = rd32(b + 16), n = rd32(b + 20);
    if (version != CH_SHM_VERSION) {
        why_set(why, why_len, "version %u (this chute reads %u)", version, CH_SHM_VERSION);
        return -1;
    }
    if (size < CH_SHM_HEAD_BYTES || size > CH_SHM_MAX_SIZE) {
        why_set(why, why_len, "size field %u outside %u..%u", size, CH_SHM_HEAD_BYTES,
                CH_SHM_MAX_SIZE);
        return -1;
    }
    if (size > len) {
        why_set(why, why_len, "truncated: %zu of %u bytes", len, size);
        return -1;
    }
    if (head < CH_SHM_HEAD_BYTES || head % 8 || head > size) {
        why_set(why, why_len, "counters offset %u outside %u..%u or unaligned", head,
                CH_SHM_HEAD_BYTES, size);
        return -1;
    }
    /* n counters of 8 bytes after head, inside size (64-bit: no overflow). */
    if ((uint64_t)n * 8 > (uint64_t)(size - head)) {
        why_set(why, why_len, "%u counters at offset %u overrun the %u-byte segment", n, head,
                size);
        return -1;
    }
    int32_t pid;
    memcpy(&pid, b + 24, 4);
    if (pid <= 0) {
        why_set(why, why_len, "pid %d is not a process id", pid);
        return -1;
    }
    out->version = version;
    out->pid = pid;
    out->kind = rd32(b + 28);
    out->start_ticks = rd64(b + 32);
    out->created_ns = rd64(b + 40);
    out->rank = rd32(b + 48);
    out->world = rd32(b + 52);
    field_str(out->host, b + 56, sizeof out->host);
    field_str(out->dataset, b + 120, sizeof out->dataset);
    field_str(out->comm, b + 184, sizeof out->comm);
    out->seq = rd64(b + 200);
    out->ncounters = n;
    for (uint32_t i = 0; i < n && i < CH_SHM_NCOUNTERS; i++) {
        out->c[i] = rd64(b + head + 8 * (size_t)i);
        out->has[i] = 1;
    }
    return 0;
}

int ch_shm_read(int dfd, const char *name, ch_shm_view *out, char *why, size_t why_len)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        why_set(why, why_len, errno == ELOOP ? "a symbolic link (not followed)" : "cannot open: %s",
                strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0) {
        why_set(why, why_len, "cannot stat: %s", strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        why_set(why, why_len, "not a regular file");
        goto out;
    }
    if (st.st_uid != getuid()) {
        why_set(why, why_len, "owned by uid %u, not this user's %u", (unsigned)st.st_uid,
                (unsigned)getuid());
        goto out;
    }
    if (st.st_mode & 077) {
        why_set(why, why_len, "mode %04o: readable or writable by others (a segment is 0600)",
                (unsigned)(st.st_mode & 07777));
        goto out;
    }
    if (st.st_size < CH_SHM_HEAD_BYTES || st.st_size > CH_SHM_MAX_SIZE) {
        why_set(why, why_len, "truncated or oversized: %lld bytes", (long long)st.st_size);
        goto out;
    }
    size_t len = (size_t)st.st_size;
    buf = malloc(len);
    if (!buf) {
        why_set(why, why_len, "out of memory");
        goto out;
    }
    /* Seqlock over syscalls: the copy is whole when the sequence read
     * before and after it is the same even number. */
    for (int tries = 0; tries < 20; tries++) {
        uint64_t s0 = 0, s1 = 1;
        if (pread(fd, &s0, 8, 200) != 8) {
            why_set(why, why_len, "truncated: no header");
            goto out;
        }
        ssize_t got = pread(fd, buf, len, 0);
        if (got < 0) {
            why_set(why, why_len, "cannot read: %s", strerror(errno));
            goto out;
        }
        if (pread(fd, &s1, 8, 200) != 8) {
            why_set(why, why_len, "truncated: no header");
            goto out;
        }
        /* A header that fails its checks is refused at once: only a
         * segment that is one waits for its sequence to settle (garbage
         * has an odd "sequence" half the time). */
        rc = ch_shm_parse(buf, (size_t)got, out, why, why_len);
        if (rc != 0 || (s0 % 2 == 0 && s0 == s1))
            goto out;
        rc = -1;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    why_set(why, why_len, "being written (sequence never settled)");
out:
    free(buf);
    close(fd);
    return rc;
}

int ch_shm_name_match(const char *name, uid_t uid, pid_t *out_pid)
{
    char pre[32];
    int n = snprintf(pre, sizeof pre, "chute-%u-", (unsigned)uid);
    if (strncmp(name, pre, (size_t)n) != 0)
        return 0;
    const char *p = name + n;
    char *end = NULL;
    if (!isdigit((unsigned char)*p))
        return 0;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (errno || pid <= 0 || pid > 0x7fffffff || *end != '-' || !isdigit((unsigned char)end[1]))
        return 0;
    for (const char *q = end + 1; *q; q++)
        if (!isdigit((unsigned char)*q))
            return 0;
    if (out_pid)
        *out_pid = (pid_t)pid;
    return 1;
}

uint64_t ch_shm_proc_start(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* Field 2 (comm) may hold spaces and parentheses: count from the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return 0;
    }
    return strtoull(p + 1, NULL, 10);
}

int ch_shm_sweep(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    int removed = 0;
    uid_t uid = getuid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        pid_t pid;
        if (!ch_shm_name_match(e->d_name, uid, &pid) || pid == getpid())
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != uid)
            continue; /* not ours: never touched */
        int stale = kill(pid, 0) != 0 && errno == ESRCH;
        if (!stale && S_ISREG(st.st_mode)) {
            /* Alive: stale only if the pid now names another process. */
            ch_shm_view v;
            uint64_t now = ch_shm_proc_start(pid);
            if (ch_shm_read(dfd, e->d_name, &v, NULL, 0) == 0 && v.pid == pid && now &&
                v.start_ticks != now)
                stale = 1;
        }
        if (stale && unlinkat(dfd, e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* ---- the writer -------------------------------------------------------- */

struct ch_shm {
    char path[128];
    uint8_t *map;
    pid_t pid;
    struct ch_shm *next;  /* (reg_mu) the live segments, for the exit hook */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static ch_shm *reg_head;      /* (reg_mu) */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static atomic_uint reg_counter; /* the <n> of this process's names */

/* At exit: unlink this process's segments whose loaders were never
 * destroyed (a Python interpreter exiting with a Loader alive). */
static void reg_atexit(void)
{
    pthread_mutex_lock(&reg_mu);
    for (ch_shm *s = reg_head; s; s = s->next)
        if (s->pid == getpid())
            unlink(s->path);
    pthread_mutex_unlock(&reg_mu);
}

static void reg_init(void) { atexit(reg_atexit); }

static void reg_remove(ch_shm *s)
{
    pthread_mutex_lock(&reg_mu);
    for (ch_shm **pp = &reg_head; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

void ch_shm_publish(ch_shm *s, uint64_t *c)
{
    c[CH_SHM_PUBLISHED_NS] = ch_now_ns();
    _Atomic uint64_t *seq = (_Atomic uint64_t *)(s->map + 200);
    _Atomic uint64_t *dst = (_Atomic uint64_t *)(s->map + CH_SHM_HEAD_BYTES);
    uint64_t q = atomic_load_explicit(seq, memory_order_relaxed);
    atomic_store_explicit(seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (int i = 0; i < CH_SHM_NCOUNTERS; i++)
        atomic_store_explicit(&dst[i], c[i], memory_order_relaxed);
    atomic_store_explicit(seq, q + 2, memory_order_release);
}

/* dst (cap bytes): the basename of path, [A-Za-z0-9._-] kept, others '_'. */
static void sanitize_base(char *dst, size_t cap, const char *path)
{
    const char *b = path ? path : "";
    size_t len = strlen(b);
    while (len > 1 && b[len - 1] == '/')
        len--;
    const char *start = b;
    for (size_t i = 0; i < len; i++)
        if (b[i] == '/')
            start = b + i + 1;
    size_t n = (size_t)(b + len - start), o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        char ch = start[i];
        dst[o++] = (isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '-') ? ch : '_';
    }
    dst[o] = '\0';
}

ch_shm *ch_shm_create(uint32_t kind, uint32_t rank, uint32_t world, const char *dataset_path,
                      ch_shm_fill_fn fill, void *user)
{
    pthread_once(&reg_once, reg_init);
    ch_shm_sweep(CH_SHM_DIR);
    ch_shm *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->pid = getpid();
    snprintf(s->path, sizeof s->path, CH_SHM_DIR "/chute-%u-%d-%u", (unsigned)getuid(),
             (int)s->pid, atomic_fetch_add(&reg_counter, 1));
    int fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        free(s);
        return NULL;
    }
    /* fchmod: the umask may have cleared bits, never added any; make it exact. */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, CH_SHM_SIZE) != 0) {
        close(fd);
        unlink(s->path);
        free(s);
        return NULL;
    }
    void *m = mmap(NULL, CH_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        unlink(s->path);
        free(s);
        return NULL;
    }
    s->map = m;
    ch_shm_head h;
    memset(&h, 0, sizeof h);
    h.version = CH_SHM_VERSION;
    h.size = CH_SHM_SIZE;
    h.head_bytes = CH_SHM_HEAD_BYTES;
    h.ncounters = CH_SHM_NCOUNTERS;
    h.pid = (int32_t)s->pid;
    h.kind = kind;
    h.start_ticks = ch_shm_proc_start(s->pid);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    h.created_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    h.rank = rank;
    h.world = world;
    if (gethostname(h.host, sizeof h.host - 1) != 0)
        h.host[0] = '\0';
    sanitize_base(h.dataset, sizeof h.dataset, dataset_path);
    char comm[32] = {0};
    int cfd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (cfd >= 0) {
        ssize_t n = read(cfd, comm, sizeof comm - 1);
        close(cfd);
        if (n > 0)
            comm[strcspn(comm, "\n")] = '\0';
    }
    snprintf(h.comm, sizeof h.comm, "%.15s", comm);
    memcpy(s->map, &h, sizeof h); /* magic last: a reader sees a whole header or none */
    uint64_t c[CH_SHM_NCOUNTERS] = {0};
    if (fill)
        fill(user, c);
    ch_shm_publish(s, c);
    atomic_thread_fence(memory_order_release);
    memcpy(s->map, CH_SHM_MAGIC, 8);
    pthread_mutex_lock(&reg_mu);
    s->next = reg_head;
    reg_head = s;
    pthread_mutex_unlock(&reg_mu);
    return s;
}

void ch_shm_close(ch_shm *s)
{
    if (!s)
        return;
    reg_remove(s);
    unlink(s->path);
    munmap(s->map, CH_SHM_SIZE);
    free(s);
}

void ch_shm_abandon(ch_shm *s)
{
    if (!s)
        return;
    munmap(s->map, CH_SHM_SIZE);
    s->map = NULL;
    /* reg_mu may have been held by a parent's thread at the fork: take it
     * only if free, else leave s listed (its pid is not ours, so the exit
     * hook skips it) and leak these few bytes. */
    if (pthread_mutex_trylock(&reg_mu) != 0)
        return;
    for (ch_shm **pp = &reg_head; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    free(s);
}

const char *ch_shm_path(const ch_shm *s) { return s ? s->path : ""; }
