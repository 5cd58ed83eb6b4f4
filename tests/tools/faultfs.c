/*
 * faultfs.c — an LD_PRELOAD fault injector for file I/O (tests only).
 *
 * Running as root, a test cannot get EACCES from chmod 000, and no test
 * can ask a disk for EIO or ENOSPC.  This shim makes chosen libc file
 * calls fail with a chosen errno, for files whose path contains a chosen
 * string, so any binary (chute, the test tools, Python) can be driven
 * through the error paths of its real code.  It is SQLite's fault hooks
 * done from outside: nothing in libchute knows about it.
 *
 * Configured by the environment (read once, at the first intercepted call):
 *   CHUTE_FAULT_PATH   substring of the path to hit (required; unset = inert);
 *                      "=PATH" hits exactly PATH as the program spells it
 *   CHUTE_FAULT_OP     open | read | write | fsync | rename   (default read)
 *                      read/write/fsync hit fds opened from a matching path
 *                      (read, pread, write, pwrite, fsync, fdatasync);
 *                      rename hits a matching source or target path
 *   CHUTE_FAULT_ERRNO  EIO, ENOSPC, EACCES, EROFS, EDQUOT, ENOMEM, EISDIR
 *                      or a number                        (default EIO);
 *                      STALL: the call never returns (the thread sleeps
 *                      until the process is killed), for tests that must
 *                      stop a program at a known point, e.g. kill -9
 *                      mid-pack
 *   CHUTE_FAULT_AFTER  let this many matching calls succeed first (default 0)
 *   CHUTE_FAULT_COUNT  fail this many calls, then succeed again
 *                      (default: fail all)
 *   CHUTE_FAULT_LOG    if set, append one line per injected fault to this file
 *
 * Build: a shared library linked with -ldl; the test environment variable
 * CHUTE_FAULTFS names it (tests/CMakeLists.txt).  In sanitizer builds set
 * ASAN_OPTIONS=verify_asan_link_order=0 beside LD_PRELOAD.
 *
 * The shim keeps its state in file-scope variables (a test tool, not the
 * library: the no-globals rule is libchute's).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum { OP_OPEN, OP_READ, OP_WRITE, OP_FSYNC, OP_RENAME };
#define MAX_FD 65536

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const char *g_path;
static int g_op = OP_READ, g_errno = EIO, g_stall;
static long g_after, g_count = -1;
static const char *g_log;
static _Atomic long g_calls;            /* matching calls seen */
static _Atomic unsigned char g_fd[MAX_FD]; /* fd was opened from a matching path */

static void init(void)
{
    g_path = getenv("CHUTE_FAULT_PATH");
    if (g_path && !*g_path)
        g_path = NULL;
    const char *op = getenv("CHUTE_FAULT_OP");
    if (op) {
        static const char *names[] = {"open", "read", "write", "fsync", "rename"};
        for (int i = 0; i < 5; i++)
            if (strcmp(op, names[i]) == 0)
                g_op = i;
    }
    const char *e = getenv("CHUTE_FAULT_ERRNO");
    if (e) {
        static const struct { const char *n; int v; } tab[] = {
            {"EIO", EIO},       {"ENOSPC", ENOSPC}, {"EACCES", EACCES}, {"EROFS", EROFS},
            {"EDQUOT", EDQUOT}, {"ENOMEM", ENOMEM}, {"EISDIR", EISDIR},
        };
        g_errno = atoi(e) > 0 ? atoi(e) : EIO;
        g_stall = strcmp(e, "STALL") == 0;
        for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
            if (strcmp(e, tab[i].n) == 0)
                g_errno = tab[i].v;
    }
    if (getenv("CHUTE_FAULT_AFTER"))
        g_after = atol(getenv("CHUTE_FAULT_AFTER"));
    if (getenv("CHUTE_FAULT_COUNT"))
        g_count = atol(getenv("CHUTE_FAULT_COUNT"));
    g_log = getenv("CHUTE_FAULT_LOG");
}

static void *next(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

static int path_hits(const char *p)
{
    pthread_once(&g_once, init);
    if (!g_path || !p)
        return 0;
    return g_path[0] == '=' ? strcmp(p, g_path + 1) == 0 : strstr(p, g_path) != NULL;
}

/* A matching call: fail it (errno set, returns 1) or let it through. */
static int fire(const char *what, const char *p, int fd)
{
    long n = atomic_fetch_add(&g_calls, 1);
    if (n < g_after || (g_count >= 0 && n >= g_after + g_count))
        return 0;
    if (g_log) {
        FILE *f = fopen(g_log, "a");
        if (f) {
            fprintf(f, "%s %s fd=%d errno=%d\n", what, p ? p : "-", fd, g_errno);
            fclose(f);
        }
    }
    while (g_stall)
        pause();
    errno = g_errno;
    return 1;
}

static int fd_hits(int fd, int op)
{
    pthread_once(&g_once, init);
    return g_path && g_op == op && fd >= 0 && fd < MAX_FD && atomic_load(&g_fd[fd]);
}

static int after_open(const char *p, int fd)
{
    if (fd >= 0 && fd < MAX_FD)
        atomic_store(&g_fd[fd], (unsigned char)(path_hits(p) ? 1 : 0));
    return fd;
}

#define OPEN_WRAPPER(NAME)                                                       \
    int NAME(const char *p, int flags, ...)                                     \
    {                                                                            \
        mode_t mode = 0;                                                         \
        if (flags & (O_CREAT | __O_TMPFILE)) {                                   \
            va_list ap;                                                          \
            va_start(ap, flags);                                                 \
            mode = va_arg(ap, mode_t);                                           \
            va_end(ap);                                                          \
        }                                                                        \
        if (path_hits(p) && g_op == OP_OPEN && fire(#NAME, p, -1))               \
            return -1;                                                           \
        int (*real)(const char *, int, ...) = next(#NAME);                       \
        return after_open(p, real(p, flags, mode));                             \
    }
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)

#define OPENAT_WRAPPER(NAME)                                                     \
    int NAME(int dirfd, const char *p, int flags, ...)                          \
    {                                                                            \
        mode_t mode = 0;                                                         \
        if (flags & (O_CREAT | __O_TMPFILE)) {                                   \
            va_list ap;                                                          \
            va_start(ap, flags);                                                 \
            mode = va_arg(ap, mode_t);                                           \
            va_end(ap);                                                          \
        }                                                                        \
        if (path_hits(p) && g_op == OP_OPEN && fire(#NAME, p, -1))               \
            return -1;                                                           \
        int (*real)(int, const char *, int, ...) = next(#NAME);                  \
        return after_open(p, real(dirfd, p, flags, mode));                      \
    }
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

int __open_2(const char *p, int flags)
{
    return open(p, flags);
}
int __open64_2(const char *p, int flags)
{
    return open64(p, flags);
}

int close(int fd)
{
    if (fd >= 0 && fd < MAX_FD)
        atomic_store(&g_fd[fd], 0);
    int (*real)(int) = next("close");
    return real(fd);
}

ssize_t read(int fd, void *buf, size_t n)
{
    if (fd_hits(fd, OP_READ) && fire("read", NULL, fd))
        return -1;
    ssize_t (*real)(int, void *, size_t) = next("read");
    return real(fd, buf, n);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    if (fd_hits(fd, OP_READ) && fire("pread", NULL, fd))
        return -1;
    ssize_t (*real)(int, void *, size_t, off_t) = next("pread");
    return real(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
    if (fd_hits(fd, OP_READ) && fire("pread64", NULL, fd))
        return -1;
    ssize_t (*real)(int, void *, size_t, off64_t) = next("pread64");
    return real(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    if (fd_hits(fd, OP_WRITE) && fire("write", NULL, fd))
        return -1;
    ssize_t (*real)(int, const void *, size_t) = next("write");
    return real(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (fd_hits(fd, OP_WRITE) && fire("pwrite", NULL, fd))
        return -1;
    ssize_t (*real)(int, const void *, size_t, off_t) = next("pwrite");
    return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    if (fd_hits(fd, OP_WRITE) && fire("pwrite64", NULL, fd))
        return -1;
    ssize_t (*real)(int, const void *, size_t, off64_t) = next("pwrite64");
    return real(fd, buf, n, off);
}

int fsync(int fd)
{
    if (fd_hits(fd, OP_FSYNC) && fire("fsync", NULL, fd))
        return -1;
    int (*real)(int) = next("fsync");
    return real(fd);
}

int fdatasync(int fd)
{
    if (fd_hits(fd, OP_FSYNC) && fire("fdatasync", NULL, fd))
        return -1;
    int (*real)(int) = next("fdatasync");
    return real(fd);
}

int rename(const char *a, const char *b)
{
    if ((path_hits(a) || path_hits(b)) && g_op == OP_RENAME && fire("rename", a, -1))
        return -1;
    int (*real)(const char *, const char *) = next("rename");
    return real(a, b);
}
