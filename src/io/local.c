/*
 * local.c — the local-file source: open/pread/close.
 *
 * Reads loop until the requested length is in, retrying EINTR, and turn
 * an early end of file into CHUTE_EIO with the path and offset, because a
 * truncated shard or a file shrinking under us must not become a sample
 * made of stale buffer bytes.
 *
 * Every open is O_NONBLOCK and is followed by fstat: only regular files
 * are read.  A tree lists only regular files, but an entry can be swapped
 * for a FIFO after listing, and open() on a FIFO without O_NONBLOCK waits
 * for a writer forever (and the loader's destroy would then wait on that
 * worker).  With O_NONBLOCK the open returns at once, fstat says what it
 * is, and the caller gets CHUTE_EFORMAT "not a regular file" (not EIO:
 * retrying cannot help).  O_NONBLOCK has no effect
 * on reads from regular files.  Sockets fail open() with ENXIO, a symbolic
 * link loop with ELOOP; both are reported as such.
 *
 * Asynchronous reads (io_uring, when built with liburing).  The read-ahead
 * stage keeps many reads in flight from one thread through aio_open/
 * submit/reap (io.h, version 4) instead of one blocked thread per read.
 * One ring per engine, sized for the engine's depth; each request gets a
 * slot from a fixed pool (no allocation per read).  Positional reads are
 * IORING_OP_READ on the handle's descriptor; a short read is resubmitted
 * for the rest, -EINTR/-EAGAIN resubmitted as they are, and an early end
 * of file is the same CHUTE_EIO as pread_full's, with the same messages.
 * A whole file (h == NULL) is an IORING_OP_OPENAT (O_NONBLOCK, as above),
 * then fstat in the engine's thread (the inode is in memory once open
 * returns: no I/O), then an IORING_OP_READ of its size, then close.  The
 * open goes through the ring because on a cold tree the lookup is a disk
 * read as slow as the data's; fstat and close are not, so they are plain
 * calls rather than linked STATX/CLOSE operations (a link cannot hand the
 * new descriptor to the next operation without registered files).  If
 * the ring cannot be set up (seccomp, an old kernel, RLIMIT_MEMLOCK)
 * aio_open fails and the read-ahead quietly uses threads.  The test hook
 * CHUTE_TEST_NO_AIO=1 in the environment makes aio_open fail the same way.
 */
#define _GNU_SOURCE
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <unistd.h>

#ifdef CHUTE_HAVE_URING
#include <liburing.h>
#endif

typedef struct local_file {
    int fd;
    /* O_DIRECT descriptor of the same file, for the io_uring engine's
     * aligned reads (ch_local_aio_direct): -1 not opened yet, -2 refused
     * by the filesystem; set once by compare-and-swap. */
    _Atomic int dfd;
} local_file;

/* A failed open(2), with the way out when the limit on descriptors is
 * what failed: "Too many open files" alone does not say which limit. */
static int open_failed(chute_error *err, const char *path, int e)
{
    if (e == EMFILE) {
        struct rlimit rl;
        unsigned long long soft = 0;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
            soft = rl.rlim_cur == RLIM_INFINITY ? 0 : (unsigned long long)rl.rlim_cur;
        return ch_err_errno(err, CHUTE_EIO, e,
                            "%s: cannot open: this process has reached its limit of %llu open "
                            "files (RLIMIT_NOFILE); raise it with `ulimit -n` (or setrlimit)",
                            path, soft);
    }
    if (e == ENFILE)
        return ch_err_errno(err, CHUTE_EIO, e,
                            "%s: cannot open: the system-wide limit on open files is reached "
                            "(fs.file-max; see also RLIMIT_NOFILE / `ulimit -n`)",
                            path);
    return ch_err_errno(err, e == ENOENT ? CHUTE_ENOTFOUND : CHUTE_EIO, e, "%s: cannot open",
                        path);
}

static const char *special_name(mode_t m)
{
    return S_ISFIFO(m)  ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISDIR(m)  ? "a directory"
                         : "of an unknown type";
}

/* Open a regular file for reading, never blocking in open().  On success
 * *st is its fstat. */
static int open_regular(const char *path, int *out_fd, struct stat *st, chute_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENXIO)
            return ch_err(err, CHUTE_EFORMAT, "%s: cannot open: not a regular file (a socket?)",
                          path);
        return open_failed(err, path, e);
    }
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return ch_err_errno(err, CHUTE_EIO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return ch_err(err, CHUTE_EFORMAT, "%s: not a regular file (%s)", path,
                      special_name(st->st_mode));
    }
    *out_fd = fd;
    return CHUTE_OK;
}

static int local_open(const char *path, void **out, uint64_t *out_size, chute_error *err)
{
    int fd = -1;
    struct stat st;
    int rc = open_regular(path, &fd, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    local_file *f = malloc(sizeof *f);
    if (!f) {
        close(fd);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", path);
    }
    f->fd = fd;
    atomic_init(&f->dfd, -1);
    *out = f;
    if (out_size)
        *out_size = (uint64_t)st.st_size;
    return CHUTE_OK;
}

static int pread_full(int fd, const char *path, uint64_t off, void *buf, size_t len,
                      chute_error *err)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, p + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ch_err_errno(err, CHUTE_EIO, errno, "%s@%llu: read of %zu bytes failed", path,
                                (unsigned long long)(off + done), len - done);
        }
        if (n == 0)
            return ch_err(err, CHUTE_EIO, "%s@%llu: unexpected end of file (wanted %zu more bytes)",
                          path, (unsigned long long)(off + done), len - done);
        done += (size_t)n;
    }
    return CHUTE_OK;
}

static int local_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                         chute_error *err)
{
    return pread_full(((local_file *)h)->fd, path, off, buf, len, err);
}

static void local_close(void *h)
{
    if (!h)
        return;
    local_file *f = h;
    int d = atomic_load(&f->dfd);
    if (d >= 0)
        close(d);
    close(f->fd);
    free(h);
}

static int local_read_file(const char *path, void *buf, size_t cap, size_t *out_len,
                           chute_error *err)
{
    int fd = -1;
    struct stat st;
    int rc = open_regular(path, &fd, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    *out_len = (size_t)st.st_size;
    if ((uint64_t)st.st_size > cap)
        rc = CH_ESMALL;
    else
        rc = pread_full(fd, path, 0, buf, (size_t)st.st_size, err);
    close(fd);
    return rc;
}

static void stat_fill(const struct stat *st, ch_stat *out)
{
    memset(out, 0, sizeof *out);
    if (S_ISREG(st->st_mode)) {
        out->type = CH_ENT_FILE;
        out->size = (uint64_t)st->st_size;
    } else if (S_ISDIR(st->st_mode)) {
        out->type = CH_ENT_DIR;
    } else {
        out->type = CH_ENT_OTHER;
        out->why = special_name(st->st_mode);
    }
    out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    out->dev = (uint64_t)st->st_dev;
    out->ino = (uint64_t)st->st_ino;
}

/* What `name` (in dirfd) is: lstat first, so a symbolic link is known as
 * one (is_link) at no extra cost for plain names; a link is then followed,
 * and one that leads nowhere is told apart from a missing name.  Any
 * other failure to examine an existing name is CH_ENT_OTHER too when
 * `other_ok` (a listing goes on past it, as os.walk does). */
static int stat_at(int dirfd, const char *name, const char *shown, ch_stat *out, int other_ok,
                   chute_error *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        if (other_ok && e != ENOENT) {
            memset(out, 0, sizeof *out);
            out->type = CH_ENT_OTHER;
            out->why = "cannot be examined (stat failed)";
            return CHUTE_OK;
        }
        return ch_err_errno(err, e == ENOENT ? CHUTE_ENOTFOUND : CHUTE_EIO, e, "%s: cannot stat",
                            shown);
    }
    if (!S_ISLNK(st.st_mode)) {
        stat_fill(&st, out);
        return CHUTE_OK;
    }
    if (fstatat(dirfd, name, &st, 0) == 0) {
        stat_fill(&st, out);
        out->is_link = 1;
        return CHUTE_OK;
    }
    int e = errno;
    memset(out, 0, sizeof *out);
    out->is_link = 1;
    out->type = CH_ENT_OTHER;
    if (e == ENOENT || e == ELOOP) {
        out->why = e == ELOOP ? "a symbolic link loop" : "a dangling symbolic link";
        return CHUTE_OK;
    }
    if (other_ok) {
        out->why = "cannot be examined (stat failed)";
        return CHUTE_OK;
    }
    return ch_err_errno(err, CHUTE_EIO, e, "%s: cannot stat", shown);
}

static int local_stat(const char *path, ch_stat *out, chute_error *err)
{
    return stat_at(AT_FDCWD, path, path, out, 0, err);
}

static int local_list(const char *dir, ch_list_fn fn, void *user, chute_error *err)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return ch_err_errno(err, errno == ENOENT ? CHUTE_ENOTFOUND : CHUTE_EIO, errno,
                            "%s: cannot open directory", dir);
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return ch_err_errno(err, CHUTE_EIO, e, "%s: cannot read directory", dir);
    }
    int rc = CHUTE_OK;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot read directory", dir);
            break;
        }
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        ch_stat st;
        chute_error e2;
        int src = stat_at(dirfd(d), de->d_name, de->d_name, &st, 1, &e2);
        if (src == CHUTE_ENOTFOUND)
            continue; /* removed since readdir */
        if (src != CHUTE_OK) {
            rc = ch_err(err, src, "%s/%s", dir, e2.message);
            break;
        }
        if (fn(user, de->d_name, &st))
            break;
    }
    closedir(d);
    return rc;
}


#ifdef CHUTE_HAVE_URING
/* ---- the io_uring engine (see the essay) ---- */

enum { AIO_NOP = 0, AIO_OPEN, AIO_READ };

typedef struct aio_slot {
    ch_aio_req *req;
    int phase;                /* AIO_* */
    int fd;                   /* the descriptor read */
    int own_fd;               /* opened here (whole file): close on completion */
    size_t want;              /* bytes to read */
    size_t done;              /* bytes read so far */
    struct aio_slot *next;    /* free list */
} aio_slot;

typedef struct aio_engine {
    struct io_uring ring;
    aio_slot *slots;
    aio_slot *free;
    unsigned depth;
    int direct;               /* ch_local_aio_direct */
    _Atomic uint64_t direct_reads;
} aio_engine;

/* The handle's O_DIRECT descriptor, or its ordinary one where the
 * filesystem refuses O_DIRECT (EINVAL: tmpfs before 6.6, FUSE, ...) or
 * anything else goes wrong opening it (the ordinary reads still work). */
static int direct_fd(local_file *f, const char *path)
{
    int d = atomic_load(&f->dfd);
    if (d == -1 && path) {
        int nd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_DIRECT);
        struct stat a, b;
        /* The same file as the handle's (the name may have been replaced). */
        if (nd >= 0 && (fstat(nd, &a) != 0 || fstat(f->fd, &b) != 0 || a.st_dev != b.st_dev ||
                        a.st_ino != b.st_ino)) {
            close(nd);
            nd = -1;
        }
        int want = nd >= 0 ? nd : -2;
        if (atomic_compare_exchange_strong(&f->dfd, &d, want))
            d = want;
        else if (nd >= 0)
            close(nd); /* another engine won */
    }
    return d >= 0 ? d : f->fd;
}

void ch_local_aio_direct(void *engine, int on)
{
    ((aio_engine *)engine)->direct = on;
}

uint64_t ch_local_aio_direct_reads(void *engine)
{
    return atomic_load_explicit(&((aio_engine *)engine)->direct_reads, memory_order_relaxed);
}

static void aio_close_engine(void *engine)
{
    aio_engine *e = engine;
    if (!e)
        return;
    io_uring_queue_exit(&e->ring);
    free(e->slots);
    free(e);
}

static int aio_open_engine(void *self, unsigned depth, void **engine, chute_error *err)
{
    *engine = NULL;
    const char *no = getenv("CHUTE_TEST_NO_AIO");
    if (no && *no && strcmp(no, "0") != 0)
        return ch_err(err, CHUTE_EUNSUPPORTED, "io_uring disabled (CHUTE_TEST_NO_AIO)");
    if (depth == 0)
        depth = 1;
    if (depth > 4096)
        depth = 4096;
    aio_engine *e = calloc(1, sizeof *e);
    aio_slot *slots = calloc(depth, sizeof *slots);
    if (!e || !slots) {
        free(e);
        free(slots);
        return ch_err(err, CHUTE_ENOMEM, "out of memory for an io_uring engine");
    }
    /* One SQE per slot at most is ever queued (each slot has one operation
     * in flight), so a ring of `depth` entries never runs out. */
    int rc = io_uring_queue_init(depth, &e->ring, 0);
    if (rc < 0) {
        free(e);
        free(slots);
        return ch_err_errno(err, CHUTE_EUNSUPPORTED, -rc, "io_uring unavailable");
    }
    e->slots = slots;
    e->depth = depth;
    for (unsigned i = 0; i < depth; i++) {
        slots[i].fd = -1;
        slots[i].next = i + 1 < depth ? &slots[i + 1] : NULL;
    }
    e->free = &slots[0];
    *engine = e;
    return CHUTE_OK;
}

/* Queue slot s's next operation (the SQ has room: see aio_open_engine). */
static void aio_queue(aio_engine *e, aio_slot *s)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
    if (!sqe) { /* cannot happen; flush and retry rather than lose it */
        io_uring_submit(&e->ring);
        sqe = io_uring_get_sqe(&e->ring);
    }
    ch_aio_req *r = s->req;
    if (s->phase == AIO_NOP)
        io_uring_prep_nop(sqe);
    else if (s->phase == AIO_OPEN)
        io_uring_prep_openat(sqe, AT_FDCWD, r->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
                             0);
    else
        io_uring_prep_read(sqe, s->fd, (uint8_t *)r->buf + s->done,
                           (unsigned)(s->want - s->done < (1u << 30) ? s->want - s->done : 1u << 30),
                           (uint64_t)((s->phase == AIO_READ && r->h ? r->off : 0) + s->done));
    io_uring_sqe_set_data(sqe, s);
}

static int aio_submit_req(void *engine, ch_aio_req *req)
{
    aio_engine *e = engine;
    aio_slot *s = e->free;
    if (!s)
        return ch_err(&req->err, CHUTE_EBUSY, "%s: io_uring engine full (%u in flight)",
                      req->path ? req->path : "?", e->depth);
    e->free = s->next;
    s->req = req;
    s->done = 0;
    s->own_fd = 0;
    s->fd = -1;
    req->status = CHUTE_OK;
    req->got = 0;
    if (req->h) {
        local_file *f = req->h;
        s->fd = f->fd;
        const uint64_t A = CH_DIRECT_ALIGN;
        if (e->direct && req->len && req->off % A == 0 && req->len % A == 0 &&
            (uintptr_t)req->buf % A == 0) {
            s->fd = direct_fd(f, req->path);
            if (s->fd != f->fd)
                atomic_fetch_add_explicit(&e->direct_reads, 1, memory_order_relaxed);
        }
        s->want = req->len;
        s->phase = req->len ? AIO_READ : AIO_NOP;
    } else {
        s->want = 0;
        s->phase = AIO_OPEN;
    }
    aio_queue(e, s);
    return CHUTE_OK;
}

/* Slot s's request is finished (status and err set): give the slot back. */
static ch_aio_req *aio_finish(aio_engine *e, aio_slot *s, int status)
{
    ch_aio_req *r = s->req;
    if (s->own_fd)
        close(s->fd);
    s->own_fd = 0;
    s->fd = -1;
    r->status = status;
    if (status == CHUTE_OK)
        r->got = s->want;
    s->req = NULL;
    s->next = e->free;
    e->free = s;
    return r;
}

/* One completion for slot s: the request, when it is finished now, else
 * NULL (its next operation is queued). */
static ch_aio_req *aio_step(aio_engine *e, aio_slot *s, int res)
{
    ch_aio_req *r = s->req;
    const char *path = r->path ? r->path : "?";
    if (s->phase == AIO_NOP)
        return aio_finish(e, s, CHUTE_OK);
    if (s->phase == AIO_OPEN) {
        if (res == -EINTR || res == -EAGAIN) {
            aio_queue(e, s);
            return NULL;
        }
        if (res < 0) {
            if (res == -ENXIO)
                return aio_finish(e, s, ch_err(&r->err, CHUTE_EFORMAT,
                                               "%s: cannot open: not a regular file (a socket?)",
                                               path));
            return aio_finish(e, s, open_failed(&r->err, path, -res));
        }
        s->fd = res;
        s->own_fd = 1;
        struct stat st;
        if (fstat(s->fd, &st) != 0)
            return aio_finish(e, s, ch_err_errno(&r->err, CHUTE_EIO, errno, "%s: cannot stat", path));
        if (!S_ISREG(st.st_mode))
            return aio_finish(e, s, ch_err(&r->err, CHUTE_EFORMAT, "%s: not a regular file (%s)",
                                           path, special_name(st.st_mode)));
        r->got = (size_t)st.st_size;
        if ((uint64_t)st.st_size > r->len)
            return aio_finish(e, s, CH_ESMALL); /* got = its size, nothing read */
        s->want = (size_t)st.st_size;
        if (s->want == 0)
            return aio_finish(e, s, CHUTE_OK);
        s->phase = AIO_READ;
        aio_queue(e, s);
        return NULL;
    }
    /* AIO_READ: the messages are pread_full's. */
    uint64_t at = (r->h ? r->off : 0) + s->done;
    if (res == -EINTR || res == -EAGAIN) {
        aio_queue(e, s);
        return NULL;
    }
    if (res < 0)
        return aio_finish(e, s, ch_err_errno(&r->err, CHUTE_EIO, -res,
                                             "%s@%llu: read of %zu bytes failed", path,
                                             (unsigned long long)at, s->want - s->done));
    if (res == 0)
        return aio_finish(e, s, ch_err(&r->err, CHUTE_EIO,
                                       "%s@%llu: unexpected end of file (wanted %zu more bytes)",
                                       path, (unsigned long long)at, s->want - s->done));
    s->done += (size_t)res;
    if (s->done < s->want) {
        aio_queue(e, s); /* a short read: the rest */
        return NULL;
    }
    return aio_finish(e, s, CHUTE_OK);
}

static int aio_reap_engine(void *engine, ch_aio_req **done, unsigned max, int wait_ms)
{
    aio_engine *e = engine;
    unsigned n = 0;
    if (max == 0)
        return 0;
    for (;;) {
        int rc = io_uring_submit(&e->ring);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
            return ch_err(NULL, CHUTE_EIO, "io_uring_submit: %s", strerror(-rc));
        struct io_uring_cqe *cqe = NULL;
        if (n > 0 || wait_ms == 0) {
            rc = io_uring_peek_cqe(&e->ring, &cqe);
            if (rc == -EAGAIN)
                return (int)n;
        } else if (wait_ms < 0) {
            rc = io_uring_wait_cqe(&e->ring, &cqe);
        } else {
            struct __kernel_timespec ts = {wait_ms / 1000, (long long)(wait_ms % 1000) * 1000000};
            rc = io_uring_wait_cqe_timeout(&e->ring, &cqe, &ts);
            if (rc == -ETIME)
                return (int)n;
        }
        if (rc == -EINTR || rc == -EAGAIN)
            continue;
        if (rc < 0)
            return ch_err(NULL, CHUTE_EIO, "io_uring wait: %s", strerror(-rc));
        aio_slot *s = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&e->ring, cqe);
        ch_aio_req *r = aio_step(e, s, res);
        if (r) {
            done[n++] = r;
            if (n == max)
                return (int)n;
        }
    }
}
#else
/* Without liburing the local source has no engine and no
 * CH_SOURCE_CAP_DIRECT, so nothing calls these. */
void ch_local_aio_direct(void *engine, int on)
{
    (void)engine;
    (void)on;
}

uint64_t ch_local_aio_direct_reads(void *engine)
{
    (void)engine;
    return 0;
}
#endif

const ch_source_ops ch_source_local = {
    .version = CH_SOURCE_OPS_VERSION,
#ifdef CHUTE_HAVE_URING
    .caps = CH_SOURCE_CAP_PREAD | CH_SOURCE_CAP_DIRECT,
#else
    .caps = CH_SOURCE_CAP_PREAD,
#endif
    .name = "local",
    .open = local_open,
    .read_at = local_read_at,
    .close = local_close,
    .read_file = local_read_file,
    .schemes = NULL,
    .stat = local_stat,
    .list = local_list,
#ifdef CHUTE_HAVE_URING
    .aio_open = aio_open_engine,
    .aio_submit = aio_submit_req,
    .aio_reap = aio_reap_engine,
    .aio_close = aio_close_engine,
#endif
};

int ch_pwrite_all(int fd, const char *path, const void *buf, size_t len, uint64_t off,
                  chute_error *err)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, p + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ch_err_errno(err, CHUTE_EIO, errno, "%s@%llu: write failed", path,
                                (unsigned long long)(off + done));
        }
        done += (size_t)n;
    }
    return CHUTE_OK;
}

int ch_write_all(int fd, const char *path, const void *buf, size_t len, chute_error *err)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ch_err_errno(err, CHUTE_EIO, errno, "%s: write failed", path);
        }
        done += (size_t)n;
    }
    return CHUTE_OK;
}

int ch_fsync_dir(const char *dir, chute_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot open directory", dir);
    int rc = CHUTE_OK;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = ch_err_errno(err, CHUTE_EIO, errno, "%s: fsync failed", dir);
    close(fd);
    return rc;
}

int ch_mkdir_p(const char *dir, chute_error *err)
{
    char tmp[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp)
        return ch_err(err, CHUTE_EINVAL, "bad directory path '%s'", dir);
    memcpy(tmp, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == '\0') {
            char c = tmp[i];
            tmp[i] = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot create directory", tmp);
            tmp[i] = c;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ch_err(err, CHUTE_EIO, "%s: not a directory", dir);
    return CHUTE_OK;
}

void ch_drop_page_cache(const char *path)
{
    /* O_NONBLOCK: a FIFO put in a file's place must not stall us here. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}
