/*
 * common.c — error formatting and small utilities shared by all layers.
 *
 * The CPU budget lives here because the loader's workers, pack's threads
 * and the CLI all need the same answer to "how many threads by default".
 * The online core count is the wrong answer wherever a process may not
 * use every core: a container with a CPU quota, a process under taskset,
 * or eight torchrun ranks per host — each would start one thread per host
 * core and the machine would spend its time switching between them.  The
 * cgroup parsing takes its root and /proc/self/cgroup paths as arguments
 * so that tests can feed it fixture files.
 */
#define _GNU_SOURCE
#include "common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

/* A message longer than its buffer loses its middle, not its end: "PATH:
 * reason" with a 5000-byte path must still say why.  The cut is marked
 * with U+2026 and falls on UTF-8 sequence boundaries, so the result is as
 * valid (or invalid) UTF-8 as the input.  A third of the room goes to the
 * head (which usually says where), the rest to the tail (which says why). */
void ch_str_fit(char *dst, size_t n, const char *src)
{
    if (!dst || n == 0)
        return;
    size_t len = strlen(src);
    if (len < n) {
        memmove(dst, src, len + 1);
        return;
    }
    static const char ell[] = "\xe2\x80\xa6";
    size_t el = sizeof ell - 1;
    if (n <= el + 2) {
        memmove(dst, src + len - (n - 1), n - 1);
        dst[n - 1] = '\0';
        return;
    }
    size_t room = n - 1 - el, head = room / 3, tail = room - head;
    /* Back off to sequence starts: never keep a lead byte without its
     * continuation bytes, never start the tail on a continuation byte. */
    while (head > 0 && ((unsigned char)src[head] & 0xC0) == 0x80)
        head--;
    size_t from = len - tail;
    while (from < len && ((unsigned char)src[from] & 0xC0) == 0x80)
        from++;
    memmove(dst, src, head);
    memcpy(dst + head, ell, el);
    memmove(dst + head + el, src + from, len - from + 1);
}

/* Format into a buffer big enough for any path (PATH_MAX is 4096) plus a
 * reason, then fit it into the message with ch_str_fit. */
static void err_vformat(chute_error *err, int with_errno, int errnum, const char *fmt,
                        va_list ap)
{
    char big[12288];
    int n = vsnprintf(big, sizeof big, fmt, ap);
    if (n < 0) {
        snprintf(big, sizeof big, "(unformattable message)");
        n = (int)strlen(big);
    } else if ((size_t)n >= sizeof big) {
        n = (int)sizeof big - 256; /* keep room for the errno text */
        big[n] = '\0';
    }
    if (with_errno)
        snprintf(big + n, sizeof big - (size_t)n, ": %s", strerror(errnum));
    ch_str_fit(err->message, sizeof err->message, big);
}

int ch_err(chute_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err_vformat(err, 0, 0, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int ch_err_errno(chute_error *err, int code, int errnum, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err_vformat(err, 1, errnum, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int ch_error_kind(int status)
{
    switch (status) {
    case CHUTE_ECORRUPT:
    case CHUTE_EFORMAT:
    case CHUTE_ELIMIT:       /* same answer on every read: a property of the sample */
    case CHUTE_EUNSUPPORTED: /* an image this build cannot decode */
        return CH_ERR_CONTENT;
    case CHUTE_EIO:
    case CHUTE_ENOTFOUND:    /* a file listed at open has gone */
        return CH_ERR_IO;
    default:
        return CH_ERR_FATAL;
    }
}

/* One unit of os.fsdecode: a well-formed UTF-8 sequence (Unicode Table
 * 3-7: no overlongs, no surrogates, nothing past U+10FFFF), or else one
 * byte, escaped to U+DC00 + byte.  Returns its length (>= 1, <= n). */
size_t ch_fsdecode_unit(const unsigned char *p, size_t n, uint32_t *cp)
{
    unsigned c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    }
    int ok = len != 0 && len <= n;
    for (size_t k = 1; ok && k < len; k++) {
        unsigned b = p[k];
        ok = k == 1 ? b >= lo && b <= hi : (b & 0xC0) == 0x80;
    }
    if (!ok) {
        *cp = 0xDC00u + c;
        return 1;
    }
    uint32_t v = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < len; k++)
        v = (v << 6) | (p[k] & 0x3F);
    *cp = v;
    return len;
}

void ch_permutation(uint64_t *v, uint64_t n, ch_rng *r)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = i;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = ch_rng_below(r, i);
        uint64_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

void *ch_aligned_alloc(size_t align, size_t size)
{
    void *p = NULL;
    if (size == 0)
        size = align;
    if (posix_memalign(&p, align, size) != 0)
        return NULL;
    return p;
}

void ch_pretouch(void *p, size_t n)
{
    volatile uint8_t *b = p;
    for (size_t i = 0; i < n; i += 4096)
        b[i] = 0;
}

int ch_buf_reserve(ch_buf *b, size_t n)
{
    if (n <= b->cap)
        return CHUTE_OK;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < n)
        cap *= 2;
    /* 64-byte alignment keeps SIMD loads in decoders happy; +64 slack lets
     * vector loops overrun the end harmlessly. */
    uint8_t *d = ch_aligned_alloc(64, cap + 64);
    if (!d)
        return CHUTE_ENOMEM;
    free(b->data);
    b->data = d;
    b->cap = cap;
    return CHUTE_OK;
}

void ch_buf_free(ch_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->cap = 0;
}

int ch_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Read a small text file into buf (NUL-terminated); 0 on success. */
static int read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* Parse a decimal integer that fits in int64 and is followed only by
 * whitespace or `stop`; 0 on success. */
static int parse_i64(const char *s, const char **end, long long *out)
{
    errno = 0;
    char *e = NULL;
    long long v = strtoll(s, &e, 10);
    if (e == s || errno == ERANGE)
        return -1;
    *out = v;
    if (end)
        *end = e;
    return 0;
}

/* Quota in CPUs set by the files in one cgroup directory; 0 = none. */
static double quota_in_dir(const char *dir, int v2, char *src, size_t srclen)
{
    char path[4200], text[256];
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        if (read_small(path, text, sizeof text) != 0)
            return 0;
        /* "max 100000" (no limit) or "QUOTA PERIOD" in microseconds */
        const char *p = text;
        while (isspace((unsigned char)*p))
            p++;
        if (strncmp(p, "max", 3) == 0)
            return 0;
        long long q = 0, per = 100000;
        const char *e;
        if (parse_i64(p, &e, &q) != 0 || q <= 0)
            return 0;
        if (*e && !isspace((unsigned char)*e))
            return 0;
        while (isspace((unsigned char)*e) && *e != '\n')
            e++;
        if (*e && *e != '\n' && (parse_i64(e, NULL, &per) != 0 || per <= 0))
            return 0;
        if (src)
            snprintf(src, srclen, "%s", path);
        return (double)q / (double)per;
    }
    char ppath[4200], ptext[64];
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    snprintf(ppath, sizeof ppath, "%s/cpu.cfs_period_us", dir);
    long long q = 0, per = 0;
    if (read_small(path, text, sizeof text) != 0 || parse_i64(text, NULL, &q) != 0 || q <= 0)
        return 0; /* -1: no limit */
    if (read_small(ppath, ptext, sizeof ptext) != 0 || parse_i64(ptext, NULL, &per) != 0 ||
        per <= 0)
        return 0;
    if (src)
        snprintf(src, srclen, "%s", path);
    return (double)q / (double)per;
}

/* Smallest quota from base+rel up through its ancestors to base itself. */
static double quota_walk(const char *base, const char *rel, int v2, double best, char *src,
                         size_t srclen)
{
    char dir[4096];
    int n = snprintf(dir, sizeof dir, "%s%s%s", base, rel[0] == '/' ? "" : "/", rel);
    if (n < 0 || (size_t)n >= sizeof dir)
        return best;
    size_t blen = strlen(base);
    for (;;) {
        size_t len = strlen(dir);
        while (len > blen && dir[len - 1] == '/')
            dir[--len] = '\0';
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
            char s[4200];
            double q = quota_in_dir(dir, v2, s, sizeof s);
            if (q > 0 && (best == 0 || q < best)) {
                best = q;
                if (src)
                    snprintf(src, srclen, "%s", s);
            }
        }
        if (len <= blen)
            break;
        char *slash = strrchr(dir + blen, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    return best;
}

/* Whether comma-separated list `list` contains `name`. */
static int has_token(const char *list, size_t len, const char *name)
{
    size_t nl = strlen(name);
    const char *p = list, *end = list + len;
    while (p < end) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        size_t tl = (size_t)((c ? c : end) - p);
        if (tl == nl && memcmp(p, name, nl) == 0)
            return 1;
        p = c ? c + 1 : end;
    }
    return 0;
}

double ch_cgroup_cpu_quota(const char *root, const char *self_cgroup, char *src, size_t srclen)
{
    char text[8192];
    if (src && srclen)
        src[0] = '\0';
    if (!root || !self_cgroup || read_small(self_cgroup, text, sizeof text) != 0)
        return 0;
    double best = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        /* "ID:CONTROLLERS:PATH"; v2 is "0::PATH" */
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        const char *ctl = c1 + 1, *rel = c2 + 1;
        size_t ctl_len = (size_t)(c2 - ctl);
        if (ctl_len == 0) {
            /* cgroup v2: mounted at root (unified) or root/unified (hybrid) */
            char base[4096], probe[4200];
            snprintf(probe, sizeof probe, "%s/cgroup.controllers", root);
            if (access(probe, F_OK) == 0)
                snprintf(base, sizeof base, "%s", root);
            else
                snprintf(base, sizeof base, "%s/unified", root);
            best = quota_walk(base, rel, 1, best, src, srclen);
        } else if (has_token(ctl, ctl_len, "cpu")) {
            /* cgroup v1: the cpu controller's mount is named after its
             * controller list ("cpu,cpuacct"), often with a "cpu" link */
            char base[4096];
            int n = snprintf(base, sizeof base, "%s/%.*s", root, (int)ctl_len, ctl);
            if (n > 0 && (size_t)n < sizeof base)
                best = quota_walk(base, rel, 0, best, src, srclen);
            snprintf(base, sizeof base, "%s/cpu", root);
            best = quota_walk(base, rel, 0, best, src, srclen);
        }
    }
    return best;
}

/* CPUs in this thread's affinity mask (0 if it cannot be read). */
static uint32_t affinity_cpus(void)
{
    for (int ncpu = 1024; ncpu <= (1 << 16); ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC((size_t)ncpu);
        if (!set)
            return 0;
        size_t sz = CPU_ALLOC_SIZE((size_t)ncpu);
        CPU_ZERO_S(sz, set);
        if (sched_getaffinity(0, sz, set) == 0) {
            int n = CPU_COUNT_S(sz, set);
            CPU_FREE(set);
            return n > 0 ? (uint32_t)n : 0;
        }
        int e = errno;
        CPU_FREE(set);
        if (e != EINVAL)
            return 0;
    }
    return 0;
}

void ch_cpu_budget_get(ch_cpu_budget *b)
{
    memset(b, 0, sizeof *b);
    b->online = (uint32_t)ch_online_cores();
    b->affinity = affinity_cpus();
    char qsrc[4200];
    double q = ch_cgroup_cpu_quota("/sys/fs/cgroup", "/proc/self/cgroup", qsrc, sizeof qsrc);
    if (q > 0)
        b->quota = q >= 65536 ? 65536u : (uint32_t)ceil(q - 1e-9);
    if (b->quota == 0 && q > 0)
        b->quota = 1;
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    long long l = 0;
    const char *e = NULL;
    if (lws && parse_i64(lws, &e, &l) == 0 && *e == '\0' && l >= 1 && l <= 65536)
        b->local_world = (uint32_t)l;

    uint32_t n = b->online;
    int len = snprintf(b->why, sizeof b->why, "%u online CPUs", b->online);
    if (b->affinity && b->affinity < n) {
        n = b->affinity;
        len = snprintf(b->why, sizeof b->why, "affinity mask: %u of %u online CPUs", n,
                       b->online);
    }
    if (b->quota && b->quota < n) {
        n = b->quota;
        len = snprintf(b->why, sizeof b->why, "cgroup CPU quota %.2f CPUs (%s) of %u online", q,
                       qsrc, b->online);
    }
    if (b->local_world > 1) {
        uint32_t per = n / b->local_world;
        if (len > 0 && (size_t)len < sizeof b->why)
            snprintf(b->why + len, sizeof b->why - (size_t)len, ", / LOCAL_WORLD_SIZE=%u",
                     b->local_world);
        n = per;
    }
    b->cpus = n ? n : 1;
}

/* The kernel's struct sched_attr (include/uapi/linux/sched/types.h), v1
 * layout: glibc before 2.41 has no declaration of its own. */
typedef struct ch_sched_attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period; /* runtime: the fair slice (6.12+) */
    uint32_t util_min, util_max;
} ch_sched_attr;

static uint32_t thread_slice(uint32_t us, int set)
{
#if defined(__linux__) && defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
    enum { POLICY_OTHER = 0, POLICY_BATCH = 3, FLAG_RESET_ON_FORK = 1 };
    ch_sched_attr a;
    memset(&a, 0, sizeof a);
    if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0u) != 0)
        return 0;
    if (set && (a.policy == POLICY_OTHER || a.policy == POLICY_BATCH)) {
        ch_sched_attr w;
        memset(&w, 0, sizeof w);
        w.size = sizeof w;
        w.policy = a.policy;
        w.flags = a.flags & FLAG_RESET_ON_FORK; /* no util clamp: leave it as it is */
        w.nice = a.nice;
        w.runtime = (uint64_t)us * 1000u; /* 0: the kernel's default again */
        if (syscall(SYS_sched_setattr, 0, &w, 0u) != 0)
            return 0;
        memset(&a, 0, sizeof a);
        if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0u) != 0)
            return 0;
    }
    if (a.policy != POLICY_OTHER && a.policy != POLICY_BATCH)
        return 0;
    uint64_t got = a.runtime / 1000u;
    return got > UINT32_MAX ? UINT32_MAX : (uint32_t)got;
#else
    (void)us;
    (void)set;
    return 0;
#endif
}

uint32_t ch_thread_slice(uint32_t us) { return thread_slice(us, us != 0); }

uint32_t ch_thread_slice_default(void) { return thread_slice(0, 1); }
