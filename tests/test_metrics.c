/*
 * test_metrics.c — the Prometheus exporter (src/stats/metrics.c): label
 * sanitizing, the histogram's exact bucket counts, and the /metrics
 * responder's rules under hostile clients (docs/METRICS.md, "Serving").
 * Expected values are worked out by hand in the comments, not taken from
 * the code under test.  tests/python/test_metrics.py runs a real
 * Prometheus and promtool against the same exporter.
 *
 * Uses the fixture data (--data DIR: shards/); the endpoint tests skip
 * without it.
 */
#include "unit.h"

#include "chute.h"
#include "../src/stats/metrics.h"

#include <stdatomic.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

static char g_shards[4096];

static int have_data(void)
{
    if (!g_data)
        return 0;
    snprintf(g_shards, sizeof g_shards, "%s/shards", g_data);
    char ready[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    return access(ready, F_OK) == 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

TEST(label_values_keep_no_path_credential_or_query)
{
    char b[64];
    ch_metrics_label_value(b, sizeof b, "/home/alice/secret-project/imagenet-train/", 1);
    CHECK(!strcmp(b, "imagenet-train"), "%s", b);
    ch_metrics_label_value(b, sizeof b, "s3://AKIAKEY:hunter2@bucket/prefix/shards?X-Amz-Sig=z", 1);
    CHECK(!strcmp(b, "shards"), "%s", b);
    ch_metrics_label_value(b, sizeof b, "http://user:pw@host", 1);
    CHECK(!strcmp(b, "host"), "%s", b);
    ch_metrics_label_value(b, sizeof b, "a\"b\\c\nd{e}", 0); /* escapes cannot leave the value */
    CHECK(!strcmp(b, "a_b_c_d_e_"), "%s", b);
    char s4[4];
    ch_metrics_label_value(s4, sizeof s4, "abcdef", 0);
    CHECK(!strcmp(s4, "abc"), "%s", s4);
    return 0;
}

/* Line `prefix` ... of the exposition: its value, or -1. */
static double value_of(const char *text, const char *prefix)
{
    const char *p = text;
    size_t pl = strlen(prefix);
    while (p && *p) {
        if (!strncmp(p, prefix, pl))
            return strtod(p + pl, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

TEST(histogram_buckets_are_exact_counts)
{
    /* Reads of 10 us, 20 us, 1 ms, 1.1 ms and 2 s. */
    static ch_hist_snap h;
    memset(&h, 0, sizeof h);
    const uint64_t v[] = {10000, 20000, 1000000, 1100000, 2000000000ull};
    for (size_t i = 0; i < 5; i++) {
        h.b[ch_hist_bucket(v[i])]++;
        h.n++;
    }
    chute_stats s = {0};
    s.read.busy_ns = 2002130000ull; /* the sum of the five */
    s.samples = 7;
    s.wait_ns = 1500000001ull;
    static char buf[65536];
    size_t n = ch_metrics_render("rank=\"0\",host=\"h\",dataset=\"d\"", &s, &h, 0.5, buf,
                                 sizeof buf);
    CHECK(n > 0 && n < sizeof buf, "render %zu", n);
#define LB "chute_read_latency_seconds_bucket{rank=\"0\",host=\"h\",dataset=\"d\",le="
    /* le = 2^14 - 1 ns = 16.383 us: 10 us.  2^16 - 1 = 65.535 us: + 20 us.
     * 2^18 - 1 = 262 us: same.  2^20 - 1 = 1.048575 ms: + 1 ms (1.1 ms is
     * over).  2^22 - 1 = 4.19 ms: + 1.1 ms.  ... 2^30 - 1 = 1.07 s: still 4.
     * 2^32 - 1 = 4.29 s: + 2 s. */
    CHECK(value_of(buf, LB "\"0.000016383\"} ") == 1, "16383");
    CHECK(value_of(buf, LB "\"0.000065535\"} ") == 2, "65535");
    CHECK(value_of(buf, LB "\"0.000262143\"} ") == 2, "262143");
    CHECK(value_of(buf, LB "\"0.001048575\"} ") == 3, "1048575");
    CHECK(value_of(buf, LB "\"0.004194303\"} ") == 4, "4194303");
    CHECK(value_of(buf, LB "\"1.073741823\"} ") == 4, "2^30");
    CHECK(value_of(buf, LB "\"4.294967295\"} ") == 5, "2^32");
    CHECK(value_of(buf, LB "\"+Inf\"} ") == 5, "+Inf");
    CHECK(strstr(buf, "chute_read_latency_seconds_sum{rank=\"0\",host=\"h\",dataset=\"d\"} "
                      "2.002130000\n"), "sum");
    CHECK(strstr(buf, "chute_read_latency_seconds_count{rank=\"0\",host=\"h\",dataset=\"d\"} 5\n"),
          "count");
    CHECK(strstr(buf, "chute_consumer_wait_seconds_total{rank=\"0\",host=\"h\",dataset=\"d\"} "
                      "1.500000001\n"), "wait");
    CHECK(strstr(buf, "# TYPE chute_read_latency_seconds histogram\n"), "type");
    CHECK(ch_metrics_render("x=\"1\"", &s, &h, 0, buf, 100) == 0, "a small buffer fails");
#undef LB
    return 0;
}

/* ---- the endpoint -------------------------------------------------- */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, l) || getsockname(fd, (struct sockaddr *)&a, &l))
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send req (len bytes), read the answer until close or timeout_s. */
static int exchange(int port, const char *req, size_t len, char *resp, size_t cap,
                    double timeout_s)
{
    int fd = dial(port);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the server may answer and close early (431) */
        off += (size_t)w;
    }
    size_t n = 0;
    double end = now_s() + timeout_s;
    while (n + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = (int)((end - now_s()) * 1000);
        if (ms <= 0 || poll(&p, 1, ms) <= 0)
            break;
        ssize_t r = recv(fd, resp + n, cap - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    resp[n] = 0;
    close(fd);
    return (int)n;
}

static int status_of(const char *resp)
{
    int code = 0;
    return sscanf(resp, "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

static chute_loader *open_loader(chute_dataset **ds, int port, const char *file, chute_error *err)
{
    *ds = NULL;
    if (chute_dataset_open(g_shards, CHUTE_SOURCE_AUTO, ds, err) != CHUTE_OK)
        return NULL;
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 32;
    o.workers = 1;
    o.rank = 3;
    o.world_size = 4;
    o.metrics_port = (uint32_t)port;
    o.metrics_file = file;
    chute_loader *ld = NULL;
    if (chute_loader_create(*ds, &o, &ld, err) != CHUTE_OK)
        return NULL;
    return ld;
}

static char g_resp[1 << 17];

TEST(endpoint_serves_only_get_metrics)
{
    if (!have_data())
        SKIP("fixture data missing (run the data_setup test)");
    int port = free_port();
    chute_dataset *ds;
    chute_error err = {0};
    chute_loader *ld = open_loader(&ds, port, NULL, &err);
    CHECK(ld, "create: %s", err.message);
    chute_batch *b = NULL;
    CHECK_OK(chute_loader_next(ld, &b));
    chute_batch_release(b);

    const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(exchange(port, get, sizeof get - 1, g_resp, sizeof g_resp, 5) > 0, "no answer");
    CHECK(status_of(g_resp) == 200, "%.80s", g_resp);
    CHECK(strstr(g_resp, "Content-Type: text/plain; version=0.0.4"), "content type");
    CHECK(strstr(g_resp, "chute_samples_total{rank=\"3\",host=\""), "labels: %.300s", g_resp);
    CHECK(strstr(g_resp, "dataset=\"shards\"} 8\n"), "one batch of 8: %.600s", g_resp);
    CHECK(!strstr(g_resp, g_data), "the data path leaked into the exposition");
    /* The bound address (loopback by default), from /proc/net/tcp: local
     * address 0100007F:PORT in state 0A (LISTEN). */
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f) {
        char line[512], want[32];
        snprintf(want, sizeof want, ":%04X ", port);
        int found = 0;
        while (fgets(line, sizeof line, f))
            if (strstr(line, want) && strstr(line, " 0A ")) {
                found = 1;
                CHECK(strstr(line, "0100007F:"), "not loopback: %s", line);
            }
        fclose(f);
        CHECK(found, "listener on port %d not in /proc/net/tcp", port);
    }
    struct {
        const char *req;
        int code;
    } cases[] = {
        {"POST /metrics HTTP/1.1\r\n\r\n", 405},
        {"HEAD /metrics HTTP/1.1\r\n\r\n", 405},
        {"GET / HTTP/1.1\r\n\r\n", 404},
        {"GET /metrics/../etc/passwd HTTP/1.1\r\n\r\n", 404},
        {"GET /metricsx HTTP/1.0\r\n\r\n", 404},
        {"\x16\x03\x01\x02\x01\x01\x7f\x01\xfc\x03\x03\r\n\r\n", 400},
        {"GET /metrics\r\n\r\n", 400},
        {"get /metrics HTTP/1.1\r\n\r\n", 400},
        {"GET /metrics SPDY/3\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(exchange(port, cases[i].req, strlen(cases[i].req), g_resp, sizeof g_resp, 5) > 0,
              "case %zu: no answer", i);
        CHECK(status_of(g_resp) == cases[i].code, "case %zu: want %d: %.60s", i, cases[i].code,
              g_resp);
    }
    /* 10 KB of headers with no end: 431 once 4 KiB are in. */
    static char big[10240];
    memcpy(big, "GET /metrics HTTP/1.1\r\n", 23);
    memset(big + 23, 'a', sizeof big - 23);
    CHECK(exchange(port, big, sizeof big, g_resp, sizeof g_resp, 5) > 0, "big: no answer");
    CHECK(status_of(g_resp) == 431, "big: %.60s", g_resp);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

typedef struct slow_arg {
    int port;
    atomic_int stop;          /* set by the test's thread, read by the client's */
    int bytes_sent;
} slow_arg;

/* A slowloris client: one byte a second of a request that never ends. */
static void *slowloris(void *p)
{
    slow_arg *a = p;
    const char *req = "GET /metrics HTTP/1.1\r\nX-a: b\r\nX-c: d\r\n";
    while (!atomic_load(&a->stop)) {
        int fd = dial(a->port);
        if (fd < 0)
            return NULL;
        for (size_t i = 0; req[i] && !atomic_load(&a->stop); i++) {
            if (send(fd, req + i, 1, MSG_NOSIGNAL) != 1)
                break; /* closed by the server's deadline: start over */
            a->bytes_sent++;
            for (int k = 0; k < 10 && !atomic_load(&a->stop); k++)
                usleep(100000);
        }
        close(fd);
    }
    return NULL;
}

TEST(endpoint_survives_floods_and_slowloris)
{
    if (!have_data())
        SKIP("fixture data missing (run the data_setup test)");
    int port = free_port();
    chute_dataset *ds;
    chute_error err = {0};
    chute_loader *ld = open_loader(&ds, port, NULL, &err);
    CHECK(ld, "create: %s", err.message);
    slow_arg sa = {.port = port};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, slowloris, &sa) == 0, "thread");
    /* 100 idle connections, some with garbage half-requests. */
    int fds[100];
    for (int i = 0; i < 100; i++) {
        fds[i] = dial(port);
        CHECK(fds[i] >= 0, "connection %d refused", i);
        if (i % 3 == 0)
            send(fds[i], "\xff\xfe garbage", 10, MSG_NOSIGNAL);
    }
    const char get[] = "GET /metrics HTTP/1.1\r\n\r\n";
    for (int k = 0; k < 5; k++) { /* scrapes across the slowloris's deadline */
        double t0 = now_s();
        int n = exchange(port, get, sizeof get - 1, g_resp, sizeof g_resp, 5);
        double dt = now_s() - t0;
        CHECK(n > 0 && status_of(g_resp) == 200, "scrape %d: %d bytes: %.60s", k, n, g_resp);
        CHECK(dt < 0.5, "scrape %d took %.3f s", k, dt);
        CHECK(strstr(g_resp, "chute_read_latency_seconds_count{"), "scrape %d: body", k);
        usleep(700000);
    }
    atomic_store(&sa.stop, 1);
    pthread_join(th, NULL);
    /* The slowloris connection was cut by the 2 s deadline and started
     * over: its request never completed, so it never got more than the
     * deadline's worth of bytes on one connection. */
    CHECK(sa.bytes_sent >= 3, "slowloris sent %d bytes", sa.bytes_sent);
    for (int i = 0; i < 100; i++)
        close(fds[i]);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(endpoint_closes_an_unfinished_request_at_its_deadline)
{
    if (!have_data())
        SKIP("fixture data missing (run the data_setup test)");
    int port = free_port();
    chute_dataset *ds;
    chute_error err = {0};
    chute_loader *ld = open_loader(&ds, port, NULL, &err);
    CHECK(ld, "create: %s", err.message);
    /* Half a request, then silence: the server closes it 2 s after the
     * accept (CONN_DEADLINE_MS), with no answer. */
    int fd = dial(port);
    CHECK(fd >= 0, "dial");
    double t0 = now_s();
    CHECK(send(fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL) == 23, "send");
    char b[64];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 6000) == 1, "not closed within 6 s");
    ssize_t r = recv(fd, b, sizeof b, 0);
    double dt = now_s() - t0;
    CHECK(r == 0, "got %zd bytes, not a close", r);
    CHECK(dt > 1.5 && dt < 3.5, "closed after %.2f s, want about 2", dt);
    close(fd);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(endpoint_errors_name_the_option)
{
    if (!have_data())
        SKIP("fixture data missing (run the data_setup test)");
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK_OK(chute_dataset_open(g_shards, CHUTE_SOURCE_AUTO, &ds, &err));
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 32;
    o.workers = 1;
    o.metrics_port = (uint32_t)free_port();
    o.metrics_addr = "localhost";
    chute_loader *ld = NULL;
    int rc = chute_loader_create(ds, &o, &ld, &err);
    CHECK(rc == CHUTE_EINVAL && !ld && strstr(err.message, "metrics_addr \"localhost\""), "%d %s",
          rc, err.message);
    /* A port in use. */
    int busy = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    CHECK(bind(busy, (struct sockaddr *)&a, l) == 0 && listen(busy, 1) == 0 &&
              getsockname(busy, (struct sockaddr *)&a, &l) == 0, "busy socket");
    o.metrics_addr = NULL;
    o.metrics_port = ntohs(a.sin_port);
    rc = chute_loader_create(ds, &o, &ld, &err);
    CHECK(rc == CHUTE_EIO && !ld && strstr(err.message, "metrics_port") &&
              strstr(err.message, "in use"), "%d %s", rc, err.message);
    close(busy);
    o.metrics_port = 65536;
    rc = chute_loader_create(ds, &o, &ld, &err);
    CHECK(rc == CHUTE_EINVAL && !ld && strstr(err.message, "metrics_port"), "%d %s", rc,
          err.message);
    /* An unwritable textfile directory. */
    o.metrics_port = 0;
    o.metrics_file = "/nonexistent-dir/chute.prom";
    rc = chute_loader_create(ds, &o, &ld, &err);
    CHECK(rc == CHUTE_EIO && !ld && strstr(err.message, "/nonexistent-dir/chute.prom"), "%d %s",
          rc, err.message);
    chute_dataset_close(ds);
    return 0;
}

TEST(textfile_is_replaced_atomically)
{
    if (!have_data())
        SKIP("fixture data missing (run the data_setup test)");
    char path[4200], tmp[4300];
    mkdir(g_work, 0755);
    snprintf(path, sizeof path, "%s/textfile", g_work);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/textfile/chute.prom", g_work);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(path);
    chute_dataset *ds;
    chute_error err = {0};
    chute_loader *ld = open_loader(&ds, 0, path, &err);
    CHECK(ld, "create: %s", err.message);
    struct stat st0, st1;
    CHECK(stat(path, &st0) == 0, "not written at create");
    /* Each second the file is a new inode (rename), never truncated in
     * place: a reader holding the old one sees a whole file. */
    usleep(1300000);
    CHECK(stat(path, &st1) == 0 && st1.st_ino != st0.st_ino, "not replaced by rename");
    chute_batch *b = NULL;
    CHECK_OK(chute_loader_next(ld, &b));
    chute_batch_release(b);
    chute_loader_destroy(ld); /* writes the final figures */
    FILE *f = fopen(path, "r");
    CHECK(f, "gone after destroy");
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    CHECK(strstr(text, "chute_samples_total{rank=\"3\",host=\""), "%.200s", text);
    CHECK(strstr(text, "dataset=\"shards\"} 8\n"), "final figures: %.400s", text);
    CHECK(access(tmp, F_OK) != 0, "temp file left behind");
    chute_dataset_close(ds);
    return 0;
}

/* Threads of this process now: the entries of /proc/self/task. */
static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* A loader with the given exporters, one batch taken; the threads it
 * added to the process (counted while it lives) into *added. */
static int threads_of_loader(int tb, int port, int file, int shm, int *added)
{
    char tbdir[4200], prom[4200];
    mkdir(g_work, 0755);
    snprintf(tbdir, sizeof tbdir, "%s/threads_tb", g_work);
    snprintf(prom, sizeof prom, "%s/threads.prom", g_work);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK_OK(chute_dataset_open(g_shards, CHUTE_SOURCE_AUTO, &ds, &err));
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 32;
    o.workers = 2;
    o.readahead = CHUTE_READAHEAD_OFF;
    o.tensorboard = tb ? tbdir : NULL;
    o.tensorboard_every = 1;
    o.metrics_port = (uint32_t)port;
    o.metrics_file = file ? prom : NULL;
    o.stats_shm = shm ? 1 : CHUTE_STATS_SHM_OFF;
    int before = count_threads();
    chute_loader *ld = NULL;
    CHECK(chute_loader_create(ds, &o, &ld, &err) == CHUTE_OK, "create: %s", err.message);
    chute_batch *b = NULL;
    CHECK_OK(chute_loader_next(ld, &b));
    chute_batch_release(b);
    usleep(300000); /* a tick of the stats thread: nothing starts late */
    *added = count_threads() - before;
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    CHECK(count_threads() == before, "threads left after destroy: %d, were %d", count_threads(),
          before);
    return 0;
}

static void *noop_thread(void *arg) { return arg; }

TEST(exporters_share_one_stats_thread)
{
    /* Until session 10 the TensorBoard writer, the metrics responder and
     * top's publisher each had a thread: all on was 3 more than all off.
     * Now one thread feeds them all, and none runs when all are off. */
    if (!have_data())
        SKIP("fixture data missing (run the data_setup test)");
    CHECK(count_threads() > 0, "no /proc/self/task");
    /* A sanitizer's runtime starts a helper thread at the first
     * pthread_create: let that happen before anything is counted. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, noop_thread, NULL) == 0, "pthread_create");
    pthread_join(t, NULL);
    int off = 0, all = 0, shm_only = 0, tb_only = 0, port_only = 0;
    if (threads_of_loader(0, 0, 0, 0, &off))
        return 1;
    if (threads_of_loader(1, free_port(), 1, 1, &all))
        return 1;
    if (threads_of_loader(0, 0, 0, 1, &shm_only))
        return 1;
    if (threads_of_loader(1, 0, 0, 0, &tb_only))
        return 1;
    if (threads_of_loader(0, free_port(), 0, 0, &port_only))
        return 1;
    CHECK(off == 2, "all exporters off: %d threads added, want the 2 workers only", off);
    CHECK(all == off + 1, "all exporters on: %d threads, want %d (one stats thread)", all,
          off + 1);
    CHECK(shm_only == off + 1 && tb_only == off + 1 && port_only == off + 1,
          "one exporter: shm %d, tensorboard %d, metrics %d threads; want %d each", shm_only,
          tb_only, port_only, off + 1);
    return 0;
}

UNIT_MAIN
