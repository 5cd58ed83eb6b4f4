/*
 * delayproxy.c — a TCP proxy that adds a fixed one-way latency to what a
 * client sends, cheaply enough to measure a loader's throughput through it.
 *
 *   delayproxy --upstream HOST:PORT [--delay-ms D] [--port P]
 *              [--port-file F] [--max-pending BYTES] [--stats F]
 *
 * Why it exists: issue #10 asks how much of chute's S3 throughput survives
 * 20 ms of latency per request.  The kernel's netem qdisc would be the
 * usual tool, but this machine's kernel has no sch_netem, and the Python
 * fault proxy (faultproxy.py, which stays for the tests that inject 503s
 * and resets) parses every HTTP request in a thread: on a 2-core machine it
 * cost so much CPU that with no delay at all it let through only 0.19x of
 * chute's direct speed, so a "20 ms / 0 ms" ratio measured through it said
 * nothing about the read-ahead.  This proxy does one thing at the TCP
 * level, on one thread with epoll, so it costs a few syscalls per request.
 *
 * What it does: listens on 127.0.0.1:P (0 = any free port), and for each
 * accepted client opens a connection to the upstream.  Bytes from the
 * upstream go to the client as soon as they arrive.  Bytes from the client
 * are held D ms from their arrival, then sent upstream in arrival order, so
 * every HTTP request reaches the server D ms late: one-way latency, as
 * netem on the path to the server would add (unlike netem, the TCP
 * handshake with the proxy itself is not delayed; clients reusing
 * connections, as curl does, never see the difference).  A client's FIN
 * is delayed like its data (it is forwarded after its last byte); the
 * upstream's FIN is forwarded at once.  Many connections are delayed in
 * parallel: one timerfd set to the earliest pending release drives them
 * all, and since the delay is the same for everyone, a single list of
 * held chunks in arrival order is also in release order.
 *
 * What it must never do: buffer without bound (reading from a client stops
 * while more than --max-pending bytes of it are held or unsent, and
 * reading from the upstream stops while the client has not taken the last
 * chunk), reorder bytes, or leak a descriptor or a chunk when either side
 * closes or resets (a reset on one side resets the other, as a dead
 * server's would).  It prints "port N" on stdout (and writes N to
 * --port-file, atomically) once it listens, and on SIGTERM or SIGINT it
 * closes everything, frees everything and exits 0.
 *
 * --stats F: at exit, one line "connections C sends S bytes B held_max M
 * held_mean A" — the client reads held (S; an HTTP request is one send
 * unless it is large), the most held at once (M) and their time-average
 * from the first to the last release (A).  Through this proxy every
 * request spends D ms held, so M and A are the requests a client kept in
 * flight (Little's law: A = request rate x D).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define READ_BYTES (64 * 1024)

/* One read from a client, held until `due` and then written upstream.  A
 * chunk with len 0 is the client's FIN.  It sits on its connection's queue
 * (until fully written) and, until due, on the global held list too. */
struct chunk {
    struct chunk *next;                /* connection's queue */
    struct chunk *gprev, *gnext;       /* global held list (arrival order) */
    struct conn *conn;
    uint64_t due;                      /* CLOCK_MONOTONIC ns */
    int held;                          /* still on the held list */
    size_t len, off;
    unsigned char data[];
};

/* One side of a connection, as registered with epoll. */
struct end {
    struct conn *conn;
    int fd;
    uint32_t events;                   /* current epoll interest */
    int parked;                        /* out of the epoll set, see park() */
};

struct conn {
    struct end cli, up;
    int connecting;                    /* upstream connect in progress */
    int cli_eof, up_eof;               /* read side saw EOF */
    int up_shut, cli_shut;             /* shutdown(SHUT_WR) sent that way */
    struct chunk *qhead, *qtail;       /* client -> upstream, arrival order */
    size_t pending;                    /* bytes on the queue */
    unsigned char *s2c;                /* upstream -> client, unsent bytes */
    size_t s2c_len, s2c_off;
    int dead;                          /* closed, freed after this batch */
    struct conn *prev, *next;          /* live connections, or the dead list */
};

static int ep = -1, lfd = -1, tfd = -1, sfd = -1;
static uint64_t delay_ns;
static size_t max_pending = 1 << 20;
static struct sockaddr_storage up_addr;
static socklen_t up_len;
static struct chunk *held_head, *held_tail;
static struct conn *conns, *dead;
static uint64_t timer_armed;           /* due time the timerfd is set to, 0 none */
/* --stats: totals, and the held count integrated over time */
static uint64_t st_conns, st_sends, st_bytes, st_held, st_held_max, st_first, st_last;
static long double st_area;            /* sum of held x ns */

static uint64_t now_ns(void);

/* The held count changes by d at time t: integrate the old count. */
static void held_change(int d)
{
    uint64_t t = now_ns();
    if (st_first)
        st_area += (long double)st_held * (long double)(t - st_last);
    else
        st_first = t;
    st_last = t;
    st_held = d > 0 ? st_held + 1 : st_held - 1;
    if (st_held > st_held_max)
        st_held_max = st_held;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "delayproxy: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void set_events(struct end *e, uint32_t want)
{
    if (e->fd < 0 || e->events == want)
        return;
    struct epoll_event ev = {.events = want, .data.ptr = e};
    if (epoll_ctl(ep, e->parked ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, e->fd, &ev) != 0)
        die("epoll_ctl");
    e->events = want;
    e->parked = 0;
}

/* epoll reports a hang-up whatever the interest, and keeps reporting it
 * (level-triggered) while this side cannot act on it: a peer that closed
 * while its data waits behind a full queue.  Such an end leaves the set
 * until its interest changes (set_events adds it back), instead of waking
 * the loop in a spin. */
static void park(struct end *e)
{
    if (e->fd < 0 || e->parked)
        return;
    if (epoll_ctl(ep, EPOLL_CTL_DEL, e->fd, NULL) != 0)
        die("epoll_ctl DEL");
    e->parked = 1;
}

/* Recompute both sides' interest from the connection's state: read a side
 * only while there is room to keep what it sends, write only while
 * something is waiting to go. */
static void update(struct conn *c)
{
    uint32_t ci = 0, ui = 0;
    if (!c->cli_eof && c->pending < max_pending)
        ci |= EPOLLIN;
    if (c->s2c_len > c->s2c_off)
        ci |= EPOLLOUT;
    if (c->connecting)
        ui |= EPOLLOUT;
    else {
        if (!c->up_eof && c->s2c_len == c->s2c_off)
            ui |= EPOLLIN;
        if (c->qhead && !c->qhead->held)
            ui |= EPOLLOUT;
    }
    set_events(&c->cli, ci);
    set_events(&c->up, ui);
}

static void close_end(struct end *e, int reset);

/* The client's end is finished when both its directions are (its FIN
 * read, ours sent): close it while delayed bytes still go upstream. */
static void update_or_close(struct conn *c)
{
    if (c->cli_eof && c->cli_shut)
        close_end(&c->cli, 0);
    update(c);
}

static void unhold(struct chunk *k)
{
    if (!k->held)
        return;
    if (k->gprev)
        k->gprev->gnext = k->gnext;
    else
        held_head = k->gnext;
    if (k->gnext)
        k->gnext->gprev = k->gprev;
    else
        held_tail = k->gprev;
    k->gprev = k->gnext = NULL;
    k->held = 0;
    held_change(-1);
}

static void close_end(struct end *e, int reset)
{
    if (e->fd < 0)
        return;
    if (reset) {
        struct linger lg = {1, 0};
        (void)setsockopt(e->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(e->fd); /* also leaves the epoll set */
    e->fd = -1;
}

/* Closes both ends and frees what the connection holds; the struct itself
 * goes to the dead list, freed after the current batch of events (a later
 * event of the batch may still point at one of its ends). */
static void conn_free(struct conn *c, int reset)
{
    if (c->dead)
        return;
    c->dead = 1;
    close_end(&c->cli, reset);
    close_end(&c->up, reset);
    while (c->qhead) {
        struct chunk *k = c->qhead;
        c->qhead = k->next;
        unhold(k);
        free(k);
    }
    free(c->s2c);
    c->s2c = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = NULL;
    c->next = dead;
    dead = c;
}

static void reap_dead(void)
{
    while (dead) {
        struct conn *c = dead;
        dead = c->next;
        free(c);
    }
}

/* Both directions finished (each FIN forwarded, nothing left to send). */
static int conn_done(const struct conn *c)
{
    return c->up_shut && c->cli_shut;
}

static int add_fd(struct end *e, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = e};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, e->fd, &ev) != 0)
        return -1;
    e->events = events;
    return 0;
}

static void on_accept(void)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                return;
            /* EMFILE and the like: say so and drop this round; the
             * listener stays readable, so it is tried again. */
            fprintf(stderr, "delayproxy: accept: %s\n", strerror(errno));
            return;
        }
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int u = socket(up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct conn *c = calloc(1, sizeof *c);
        if (u < 0 || !c) {
            fprintf(stderr, "delayproxy: no socket or memory for a connection\n");
            if (u >= 0)
                close(u);
            free(c);
            struct linger lg = {1, 0};
            (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(fd);
            continue;
        }
        (void)setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->cli = (struct end){c, fd, 0, 0};
        c->up = (struct end){c, u, 0, 0};
        c->next = conns;
        if (conns)
            conns->prev = c;
        conns = c;
        st_conns++;
        if (connect(u, (struct sockaddr *)&up_addr, up_len) == 0)
            c->connecting = 0;
        else if (errno == EINPROGRESS)
            c->connecting = 1;
        else { /* upstream down: the client sees a reset, as from a dead server */
            close(u);
            c->up.fd = -1;
            conn_free(c, 1);
            continue;
        }
        if (add_fd(&c->cli, 0) != 0 || add_fd(&c->up, 0) != 0)
            die("epoll_ctl ADD");
        update(c);
    }
}

static void arm_timer(void)
{
    uint64_t due = held_head ? held_head->due : 0;
    if (due == timer_armed)
        return;
    struct itimerspec its = {0};
    if (due) {
        its.it_value.tv_sec = (time_t)(due / 1000000000u);
        its.it_value.tv_nsec = (long)(due % 1000000000u);
    }
    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        die("timerfd_settime");
    timer_armed = due;
}

/* Reads what the client sent onto the queue, due D ms from now.
 * Returns -1 when the connection was freed. */
static int on_client_read(struct conn *c)
{
    unsigned char buf[READ_BYTES];
    while (c->pending < max_pending) {
        ssize_t n = recv(c->cli.fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            conn_free(c, 1); /* reset by the client: reset the upstream */
            return -1;
        }
        struct chunk *k = malloc(sizeof *k + (size_t)n);
        if (!k) {
            fprintf(stderr, "delayproxy: out of memory\n");
            conn_free(c, 1);
            return -1;
        }
        *k = (struct chunk){.conn = c, .due = now_ns() + delay_ns, .held = 1, .len = (size_t)n};
        memcpy(k->data, buf, (size_t)n);
        k->gprev = held_tail;
        if (held_tail)
            held_tail->gnext = k;
        else
            held_head = k;
        held_tail = k;
        held_change(+1);
        st_sends += n > 0;
        st_bytes += (uint64_t)n;
        if (c->qtail)
            c->qtail->next = k;
        else
            c->qhead = k;
        c->qtail = k;
        c->pending += (size_t)n;
        if (n == 0) {
            c->cli_eof = 1;
            break;
        }
        if ((size_t)n < sizeof buf)
            break;
    }
    return 0;
}

/* Sends buf[*off, len) on a non-blocking socket, advancing *off: 1 when
 * all of it went, 0 when the socket is full (EAGAIN), -1 on an error. */
static int send_from(int fd, const unsigned char *buf, size_t len, size_t *off)
{
    while (*off < len) {
        ssize_t n = send(fd, buf + *off, len - *off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? 0 : -1;
        }
        *off += (size_t)n;
    }
    return 1;
}

/* Writes the released head of the queue upstream.  -1: freed. */
static int flush_up(struct conn *c)
{
    if (c->connecting || c->up.fd < 0)
        return 0;
    while (c->qhead && !c->qhead->held) {
        struct chunk *k = c->qhead;
        if (k->len == 0) { /* the client's FIN, after its last byte */
            if (shutdown(c->up.fd, SHUT_WR) != 0 && errno != ENOTCONN) {
                conn_free(c, 1);
                return -1;
            }
            c->up_shut = 1;
        } else {
            size_t was = k->off;
            int r = send_from(c->up.fd, k->data, k->len, &k->off);
            c->pending -= k->off - was;
            if (r < 0) {
                conn_free(c, 1);
                return -1;
            }
            if (r == 0)
                return 0;
        }
        c->qhead = k->next;
        if (!c->qhead)
            c->qtail = NULL;
        free(k);
    }
    if (conn_done(c)) {
        conn_free(c, 0);
        return -1;
    }
    return 0;
}

/* Moves what the upstream sent to the client now.  -1: freed. */
static int flush_down(struct conn *c)
{
    int r = send_from(c->cli.fd, c->s2c, c->s2c_len, &c->s2c_off);
    if (r < 0) {
        conn_free(c, 1);
        return -1;
    }
    if (r == 0)
        return 0;
    c->s2c_off = c->s2c_len = 0;
    if (c->up_eof && !c->cli_shut) {
        if (shutdown(c->cli.fd, SHUT_WR) != 0 && errno != ENOTCONN) {
            conn_free(c, 1);
            return -1;
        }
        c->cli_shut = 1;
    }
    if (conn_done(c)) {
        conn_free(c, 0);
        return -1;
    }
    return 0;
}

static int on_up_read(struct conn *c)
{
    if (!c->s2c && !(c->s2c = malloc(READ_BYTES))) {
        fprintf(stderr, "delayproxy: out of memory\n");
        conn_free(c, 1);
        return -1;
    }
    for (;;) {
        ssize_t n = recv(c->up.fd, c->s2c, READ_BYTES, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 0;
            conn_free(c, 1); /* the server reset: so does the client's end */
            return -1;
        }
        if (n == 0)
            c->up_eof = 1;
        c->s2c_off = 0;
        c->s2c_len = (size_t)n;
        if (flush_down(c) != 0)
            return -1;
        if (c->s2c_len || c->up_eof || n < READ_BYTES)
            return 0; /* client full (EPOLLOUT will resume), or done */
    }
}

static void on_event(struct end *e, uint32_t ev)
{
    struct conn *c = e->conn;
    if (c->dead || e->fd < 0)
        return;
    if (e == &c->up && c->connecting) {
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(c->up.fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err) {
            conn_free(c, 1); /* upstream unreachable: reset the client */
            return;
        }
        c->connecting = 0;
        if (flush_up(c) == 0)
            update_or_close(c);
        return;
    }
    int can_read = (e->events & EPOLLIN) != 0;
    if (e == &c->cli) {
        if ((ev & EPOLLOUT) && flush_down(c) != 0)
            return;
        if (can_read && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && on_client_read(c) != 0)
            return;
    } else {
        if ((ev & EPOLLOUT) && flush_up(c) != 0)
            return;
        if (can_read && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && on_up_read(c) != 0)
            return;
    }
    if (ev & EPOLLERR) { /* a reset this side could not read yet */
        conn_free(c, 1);
        return;
    }
    if ((ev & EPOLLHUP) && !can_read)
        park(e);
    update_or_close(c);
}

/* Hands every chunk whose time has come to its connection. */
static void release_due(void)
{
    uint64_t t = now_ns();
    while (held_head && held_head->due <= t) {
        struct chunk *k = held_head;
        struct conn *c = k->conn;
        unhold(k);
        /* a connection's chunks are released in its order, so k is at or
         * behind its queue's released prefix: flush from the head */
        if (flush_up(c) == 0)
            update_or_close(c);
    }
    arm_timer();
}

static void usage(void)
{
    fprintf(stderr, "usage: delayproxy --upstream HOST:PORT [--delay-ms D] [--port P] "
                    "[--port-file F] [--max-pending BYTES] [--stats F]\n");
    exit(2);
}

static long long num(const char *s, long long lo, long long hi, const char *what)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "delayproxy: %s must be a number in [%lld, %lld], not '%s'\n", what, lo,
                hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *upstream = NULL, *port_file = NULL, *stats = NULL;
    int port = 0;
    long long delay_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--upstream"))
            upstream = argv[++i];
        else if (!strcmp(argv[i], "--delay-ms"))
            delay_ms = num(argv[++i], 0, 3600000, "--delay-ms");
        else if (!strcmp(argv[i], "--port"))
            port = (int)num(argv[++i], 0, 65535, "--port");
        else if (!strcmp(argv[i], "--port-file"))
            port_file = argv[++i];
        else if (!strcmp(argv[i], "--stats"))
            stats = argv[++i];
        else if (!strcmp(argv[i], "--max-pending"))
            max_pending = (size_t)num(argv[++i], 1, (long long)1 << 40, "--max-pending");
        else
            usage();
    }
    if (!upstream)
        usage();
    delay_ns = (uint64_t)delay_ms * 1000000u;

    char host[256];
    const char *colon = strrchr(upstream, ':');
    if (!colon || (size_t)(colon - upstream) >= sizeof host || colon == upstream) {
        fprintf(stderr, "delayproxy: --upstream must be HOST:PORT, not '%s'\n", upstream);
        return 2;
    }
    memcpy(host, upstream, (size_t)(colon - upstream));
    host[colon - upstream] = 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    int gai = getaddrinfo(host, colon + 1, &hints, &ai);
    if (gai) {
        fprintf(stderr, "delayproxy: upstream '%s': %s\n", upstream, gai_strerror(gai));
        return 2;
    }
    memcpy(&up_addr, ai->ai_addr, ai->ai_addrlen);
    up_len = ai->ai_addrlen;
    freeaddrinfo(ai);

    /* two descriptors per connection: take the hard limit */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    if (sigprocmask(SIG_BLOCK, &ss, NULL) != 0 || (sfd = signalfd(-1, &ss, SFD_CLOEXEC)) < 0)
        die("signalfd");
    signal(SIGPIPE, SIG_IGN);

    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
        || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 1024) != 0)
        die("listen on 127.0.0.1");
    socklen_t sl = sizeof sa;
    if (getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
        die("getsockname");
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("epoll_create1");
    if ((tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0)
        die("timerfd_create");
    /* the listener, timer and signal fds are told apart by these tags */
    static struct end lend, tend, send_;
    lend.fd = lfd;
    tend.fd = tfd;
    send_.fd = sfd;
    if (add_fd(&lend, EPOLLIN) != 0 || add_fd(&tend, EPOLLIN) != 0 || add_fd(&send_, EPOLLIN) != 0)
        die("epoll_ctl ADD");

    int bound = ntohs(sa.sin_port);
    if (port_file) {
        char tmp[PATH_MAX];
        if (snprintf(tmp, sizeof tmp, "%s.tmp", port_file) >= (int)sizeof tmp) {
            fprintf(stderr, "delayproxy: --port-file path too long\n");
            return 2;
        }
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", bound) < 0 || fclose(f) != 0 || rename(tmp, port_file) != 0)
            die("writing the port file");
    }
    printf("port %d\n", bound);
    fflush(stdout);

    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        int stop = 0;
        for (int i = 0; i < n; i++) {
            struct end *e = evs[i].data.ptr;
            if (e == &lend)
                on_accept();
            else if (e == &tend) {
                uint64_t x;
                (void)!read(tfd, &x, sizeof x);
                timer_armed = 0; /* fired (or about to be reset below) */
            } else if (e == &send_)
                stop = 1;
            else
                on_event(e, evs[i].events);
        }
        release_due();
        reap_dead();
        if (stop)
            break;
    }
    while (conns)
        conn_free(conns, 0);
    reap_dead();
    if (stats) {
        /* chunks still held at SIGTERM were unheld by conn_free above */
        FILE *f = fopen(stats, "w");
        double mean = st_last > st_first ? (double)(st_area / (long double)(st_last - st_first)) : 0;
        if (!f || fprintf(f, "connections %llu sends %llu bytes %llu held_max %llu held_mean %.2f\n",
                          (unsigned long long)st_conns, (unsigned long long)st_sends,
                          (unsigned long long)st_bytes, (unsigned long long)st_held_max, mean) < 0
            || fclose(f) != 0)
            die("writing the stats file");
    }
    close(lfd);
    close(tfd);
    close(sfd);
    close(ep);
    return 0;
}
