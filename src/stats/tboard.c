/*
 * tboard.c — TensorBoard event files, written by the stats thread (tboard.h).
 *
 * An event file is a sequence of TFRecord records, each one serialized
 * tensorflow.Event:
 *   Event   { double wall_time = 1; int64 step = 2;
 *             oneof { string file_version = 3; Summary summary = 5; } }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * TensorBoard's readers migrate simple_value into its scalars plugin,
 * so nothing else (plugin metadata) is needed.  The protos are written by
 * hand: a handful of fixed fields, no protobuf dependency.
 */
#define _GNU_SOURCE
#include "tboard.h"

#include "../common/checksum.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Snapshots queued and not yet written; more than this and the oldest
 * is dropped (the consumer never waits for the disk). */
#define TB_RING 16

typedef struct tb_item {
    uint64_t step;
    double wall_time;
    chute_stats st;
    char tag[CH_TB_TAG_MAX]; /* "": the snapshot's scalars; else one scalar */
    double value;
} tb_item;

struct ch_tboard {
    int fd;
    char path[4096];
    pthread_mutex_t mu;
    tb_item ring[TB_RING];  /* (mu) */
    uint64_t head, tail;    /* (mu) items tail..head-1 are queued */
    uint64_t dropped;       /* (mu) snapshots dropped on a full ring */
    int notify_fd;          /* a byte here wakes the stats thread; -1: none */
    atomic_int notified;    /* a wake-up byte is pending: no second one */
    int failed;             /* drainer only: a write failed, stop writing */
    uint8_t buf[4096];      /* drainer only: one framed record */
};

const char *const ch_tb_tags[CH_TB_NSCALARS] = {
    "chute/wait_ms",            "chute/wait_pct_of_step",  "chute/window_wait_pct",
    "chute/images_per_sec",     "chute/busy_pct/read",     "chute/busy_pct/decode",
    "chute/busy_pct/transform", "chute/queue_fill",        "chute/read_p50_ms",
    "chute/read_p99_ms",        "chute/cache_hit_pct",     "chute/tier_hit_pct",
    "chute/skipped",            "chute/io_retries",        "chute/batches",
};

static double ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

void ch_tboard_scalars(const chute_stats *s, double v[CH_TB_NSCALARS])
{
    double worker_ns = (double)s->wall_ns * s->workers;
    double tier_hits = (double)s->tier_ram_hits + s->tier_disk_hits;
    v[0] = s->last_wait_ns / 1e6;
    v[1] = 100.0 * ratio((double)s->last_wait_ns, (double)s->last_step_ns);
    v[2] = 100.0 * ratio((double)s->window_wait_ns, (double)s->window_ns);
    v[3] = 1e9 * ratio((double)s->window_samples, (double)s->window_ns);
    v[4] = 100.0 * ratio((double)s->read.busy_ns, worker_ns);
    v[5] = 100.0 * ratio((double)s->decode.busy_ns, worker_ns);
    v[6] = 100.0 * ratio((double)s->transform.busy_ns, worker_ns);
    v[7] = ratio((double)s->queue_fill_sum, (double)s->batches);
    v[8] = s->read_lat_p50_ns / 1e6;
    v[9] = s->read_lat_p99_ns / 1e6;
    v[10] = 100.0 * ratio((double)s->cache_hits, (double)s->cache_hits + s->cache_misses);
    v[11] = 100.0 * ratio(tier_hits, tier_hits + s->tier_fetches);
    v[12] = (double)s->corrupt;
    v[13] = (double)s->io_retries;
    v[14] = (double)s->batches;
}

/* ---- encoding ----------------------------------------------------------- */

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + n;
}

static uint8_t *put_double(uint8_t *p, uint8_t key, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, 8);
    *p++ = key;
    return put_le(p, bits, 8);
}

/* Event header: wall_time (field 1, fixed64) and step (field 2, varint). */
static uint8_t *put_event_head(uint8_t *p, double wall_time, uint64_t step)
{
    p = put_double(p, 0x09, wall_time);
    if (step) {
        *p++ = 0x10;
        p = put_varint(p, step);
    }
    return p;
}

/* Frame the Event in buf[12 .. 12+n) as a TFRecord record: returns its
 * total length.  buf has room for the 4-byte data CRC after it. */
static size_t frame(uint8_t *buf, size_t n)
{
    put_le(buf, n, 8);
    put_le(buf + 8, ch_crc32c_mask(ch_crc32c(0, buf, 8)), 4);
    put_le(buf + 12 + n, ch_crc32c_mask(ch_crc32c(0, buf + 12, n)), 4);
    return 12 + n + 4;
}

/* The summary event of one snapshot; every length fits one varint byte
 * (a Value is at most 2 + 40 + 5 bytes, a Summary 15 of them, checked
 * below), so fields are written in place. */
static size_t encode_scalars(uint8_t *buf, size_t cap, const tb_item *it)
{
    double v[CH_TB_NSCALARS];
    const char *tags[CH_TB_NSCALARS];
    int nv = 1;
    if (it->tag[0]) {
        tags[0] = it->tag;
        v[0] = it->value;
    } else {
        ch_tboard_scalars(&it->st, v);
        memcpy(tags, ch_tb_tags, sizeof tags);
        nv = CH_TB_NSCALARS;
    }
    uint8_t sum[CH_TB_NSCALARS * 64];
    uint8_t *q = sum;
    for (int i = 0; i < nv; i++) {
        size_t tl = strlen(tags[i]);
        float f = (float)v[i];
        uint32_t fb;
        memcpy(&fb, &f, 4);
        *q++ = 0x0a;                       /* Summary.value */
        *q++ = (uint8_t)(2 + tl + 5);      /* < 128: tags are < CH_TB_TAG_MAX bytes */
        *q++ = 0x0a;                       /* Value.tag */
        *q++ = (uint8_t)tl;
        memcpy(q, tags[i], tl);
        q += tl;
        *q++ = 0x15;                       /* Value.simple_value */
        q = put_le(q, fb, 4);
    }
    size_t sn = (size_t)(q - sum);
    uint8_t *p = buf + 12;
    p = put_event_head(p, it->wall_time, it->step);
    *p++ = 0x2a;                           /* Event.summary */
    p = put_varint(p, sn);
    if ((size_t)(p - buf) + sn + 4 > cap)
        return 0;
    memcpy(p, sum, sn);
    p += sn;
    return frame(buf, (size_t)(p - buf - 12));
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- draining (the stats thread, exporter.c) --------------------------- */

void ch_tboard_drain(ch_tboard *tb)
{
    atomic_store_explicit(&tb->notified, 0, memory_order_relaxed);
    pthread_mutex_lock(&tb->mu);
    while (tb->tail != tb->head) {
        tb_item it = tb->ring[tb->tail % TB_RING];
        tb->tail++;
        pthread_mutex_unlock(&tb->mu);
        if (!tb->failed) {
            size_t n = encode_scalars(tb->buf, sizeof tb->buf, &it);
            if (n && write_all(tb->fd, tb->buf, n) != 0) {
                /* A full or vanished disk: say so once, stop writing, keep training. */
                fprintf(stderr, "chute: tensorboard: writing %s failed (%s); no more scalars "
                        "are written\n", tb->path, strerror(errno));
                tb->failed = 1;
            }
        }
        pthread_mutex_lock(&tb->mu);
    }
    pthread_mutex_unlock(&tb->mu);
}

void ch_tboard_set_notify(ch_tboard *tb, int fd) { tb->notify_fd = fd; }

/* mkdir -p: each missing component of dir is created (0777 & ~umask). */
static int make_dirs(const char *dir, chute_error *err)
{
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p - 128)
        return ch_err(err, CHUTE_EINVAL, "tensorboard: log directory '%s' is empty or too long",
                      dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return ch_err_errno(err, CHUTE_EIO, errno,
                                "tensorboard: cannot create log directory '%s'", p);
        p[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ch_err(err, CHUTE_EIO, "tensorboard: log directory '%s' is not a directory", dir);
    return CHUTE_OK;
}

int ch_tboard_open(const char *dir, ch_tboard **out, chute_error *err)
{
    static _Atomic uint32_t seq;
    *out = NULL;
    int rc = make_dirs(dir, err);
    if (rc)
        return rc;
    ch_tboard *tb = calloc(1, sizeof *tb);
    if (!tb)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "localhost");
    for (char *c = host; *c; c++) /* a file name, whatever the host is called */
        if (*c == '/')
            *c = '_';
    double now = wall_now();
    int pn = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%d.%u.chute",
                      dir, (long long)now, host, (int)getpid(),
                      (unsigned)atomic_fetch_add(&seq, 1));
    if (pn < 0 || (size_t)pn >= sizeof tb->path) {
        free(tb);
        return ch_err(err, CHUTE_EINVAL, "tensorboard: log directory '%s' is too long", dir);
    }
    tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (tb->fd < 0) {
        rc = ch_err_errno(err, CHUTE_EIO, errno, "tensorboard: cannot create event file '%s'",
                          tb->path);
        free(tb);
        return rc;
    }
    /* The first event names the file's version; readers check it. */
    static const char version[] = "brain.Event:2";
    uint8_t *p = put_event_head(tb->buf + 12, now, 0);
    *p++ = 0x1a;
    *p++ = (uint8_t)(sizeof version - 1);
    memcpy(p, version, sizeof version - 1);
    p += sizeof version - 1;
    size_t n = frame(tb->buf, (size_t)(p - tb->buf - 12));
    if (write_all(tb->fd, tb->buf, n) != 0) {
        rc = ch_err_errno(err, CHUTE_EIO, errno, "tensorboard: cannot write event file '%s'",
                          tb->path);
        close(tb->fd);
        unlink(tb->path);
        free(tb);
        return rc;
    }
    pthread_mutex_init(&tb->mu, NULL);
    tb->notify_fd = -1;
    *out = tb;
    return CHUTE_OK;
}

static tb_item *post_begin(ch_tboard *tb)
{
    pthread_mutex_lock(&tb->mu);
    if (tb->head - tb->tail == TB_RING) {
        tb->tail++; /* the writer is behind: the oldest item goes */
        tb->dropped++;
    }
    return &tb->ring[tb->head % TB_RING];
}

static void post_end(ch_tboard *tb)
{
    tb->head++;
    pthread_mutex_unlock(&tb->mu);
    /* One byte per wake-up, not per post: a post while one is pending
     * (the thread has not drained yet) makes no system call. */
    if (tb->notify_fd >= 0 && !atomic_exchange_explicit(&tb->notified, 1, memory_order_relaxed)) {
        uint64_t one = 1;
        ssize_t w = write(tb->notify_fd, &one, sizeof one);
        (void)w; /* a full eventfd is already a wake-up */
    }
}

int ch_tboard_post_scalar(ch_tboard *tb, const char *tag, double value, uint64_t step)
{
    size_t tl = strlen(tag);
    if (tl == 0 || tl >= CH_TB_TAG_MAX)
        return CHUTE_EINVAL;
    double now = wall_now();
    tb_item *it = post_begin(tb);
    it->step = step;
    it->wall_time = now;
    memcpy(it->tag, tag, tl + 1);
    it->value = value;
    post_end(tb);
    return CHUTE_OK;
}

void ch_tboard_post(ch_tboard *tb, uint64_t step, const chute_stats *st)
{
    double now = wall_now();
    tb_item *it = post_begin(tb);
    it->step = step;
    it->wall_time = now;
    it->st = *st;
    it->tag[0] = '\0';
    post_end(tb);
}

void ch_tboard_close(ch_tboard *tb)
{
    if (!tb)
        return;
    ch_tboard_drain(tb); /* what is still queued */
    close(tb->fd);
    pthread_mutex_destroy(&tb->mu);
    free(tb);
}
