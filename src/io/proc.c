/*
 * proc.c — a child's stdout as a byte stream (see proc.h for why).
 *
 * The child: posix_spawn of /bin/sh -c COMMAND, POSIX_SPAWN_SETPGROUP
 * (its own group, so the whole pipeline can be signalled), stdin from
 * /dev/null, stdout/stderr dup'ed from pipe2(O_CLOEXEC) ends (dup2 clears
 * the flag on the child's copy only), default signal dispositions and an
 * empty signal mask (a training job may block SIGCHLD or ignore SIGPIPE;
 * the child must not inherit that).
 */
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void tail_add(ch_proc *p, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p->tail[p->tail_pos] = b[i];
        p->tail_pos = (p->tail_pos + 1) % CH_PROC_TAIL;
        if (p->tail_len < CH_PROC_TAIL)
            p->tail_len++;
    }
}

/* Drain what stderr has without blocking; closes it at its end. */
static void drain_stderr(ch_proc *p)
{
    char b[1024];
    while (p->err_fd >= 0) {
        ssize_t r = read(p->err_fd, b, sizeof b);
        if (r > 0) {
            tail_add(p, b, (size_t)r);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            close(p->err_fd);
            p->err_fd = -1;
        }
        break; /* EAGAIN or an error */
    }
}

int ch_proc_open(ch_proc *p, const char *cmd, int timeout_ms, chute_error *err)
{
    memset(p, 0, sizeof *p);
    p->err_fd = -1;
    p->cancel_fd = -1;
    p->timeout_ms = timeout_ms;
    if (cmd)
        snprintf(p->name, sizeof p->name, "pipe:%s", cmd);
    else
        snprintf(p->name, sizeof p->name, "-");
    p->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->cancel_fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: eventfd", p->name);
    if (!cmd) {
        p->is_open = 1;
        p->out_fd = 0;
        return CHUTE_OK;
    }
    int out[2] = {-1, -1}, er[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(er, O_CLOEXEC | O_NONBLOCK) != 0) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            if (out[i] >= 0)
                close(out[i]);
        }
        close(p->cancel_fd);
        p->cancel_fd = -1;
        return ch_err_errno(err, CHUTE_EIO, e, "%s: pipe", p->name);
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, er[1], 2);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid = 0;
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(out[1]);
    close(er[1]);
    if (rc != 0) {
        close(out[0]);
        close(er[0]);
        close(p->cancel_fd);
        p->cancel_fd = -1;
        p->is_open = 0;
        return ch_err_errno(err, CHUTE_EIO, rc, "%s: cannot start /bin/sh", p->name);
    }
    p->pid = pid;
    p->is_open = 1;
    p->out_fd = out[0];
    p->err_fd = er[0];
    return CHUTE_OK;
}

/* Try to reap without waiting; 1 once reaped. */
static int try_reap(ch_proc *p)
{
    if (!p->pid || p->exited)
        return p->exited;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
        p->exited = 1;
        p->status = st;
    }
    return p->exited;
}

static void kill_and_reap(ch_proc *p)
{
    if (!p->pid || p->exited)
        return;
    kill(-p->pid, SIGTERM);
    for (int i = 0; i < 40 && !try_reap(p); i++) {
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!p->exited) {
        kill(-p->pid, SIGKILL);
        int st;
        while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
            ;
        p->exited = 1;
        p->status = st;
    }
    /* Whatever else of the group is left (a grandchild that ignored
     * SIGTERM) gets the same end. */
    kill(-p->pid, SIGKILL);
}

int ch_proc_read(ch_proc *p, uint8_t *buf, size_t n, size_t *got, chute_error *err)
{
    *got = 0;
    uint64_t t0 = ch_now_ns();
    for (;;) {
        struct pollfd f[3] = {{p->out_fd, POLLIN, 0}, {p->cancel_fd, POLLIN, 0},
                              {p->err_fd, POLLIN, 0}};
        int nf = p->err_fd >= 0 ? 3 : 2;
        int wait = -1;
        if (p->timeout_ms > 0) {
            uint64_t el = (ch_now_ns() - t0) / 1000000u;
            wait = el >= (uint64_t)p->timeout_ms ? 0 : p->timeout_ms - (int)el;
        }
        int r = poll(f, (nfds_t)nf, wait);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return ch_err_errno(err, CHUTE_EIO, errno, "%s: poll", p->name);
        }
        if (f[1].revents)
            return ch_err(err, CHUTE_EINTERRUPTED, "%s: reading was stopped", p->name);
        if (nf == 3 && f[2].revents)
            drain_stderr(p);
        if (f[0].revents) {
            ssize_t k = read(p->out_fd, buf, n);
            if (k < 0) {
                if (errno == EINTR || errno == EAGAIN)
                    continue;
                return ch_err_errno(err, CHUTE_EIO, errno, "%s: read", p->name);
            }
            *got = (size_t)k;
            return CHUTE_OK;
        }
        if (r == 0 && p->timeout_ms > 0 &&
            (ch_now_ns() - t0) / 1000000u >= (uint64_t)p->timeout_ms) {
            kill_and_reap(p);
            int rc = ch_err(err, CHUTE_EIO, "%s: no data for %d ms (stream_timeout_ms)%s",
                            p->name, p->timeout_ms, p->pid ? ", so it was stopped" : "");
            ch_proc_explain(p, err->message, sizeof err->message);
            return rc;
        }
    }
}

static void status_text(const ch_proc *p, char *b, size_t n)
{
    if (!p->exited)
        snprintf(b, n, "still running");
    else if (WIFEXITED(p->status))
        snprintf(b, n, "exited with status %d", WEXITSTATUS(p->status));
    else if (WIFSIGNALED(p->status))
        snprintf(b, n, "was killed by signal %d", WTERMSIG(p->status));
    else
        snprintf(b, n, "ended (wait status %d)", p->status);
}

void ch_proc_explain(ch_proc *p, char *msg, size_t n)
{
    if (!p->pid)
        return;
    for (int i = 0; i < 20 && !try_reap(p); i++) {
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    drain_stderr(p);
    size_t m = strnlen(msg, n);
    char st[64];
    status_text(p, st, sizeof st);
    m += (size_t)snprintf(msg + m, m < n ? n - m : 0, "; the command %s", st);
    if (p->tail_len && m < n) {
        /* The tail's last line(s), trimmed of the final newline. */
        char t[CH_PROC_TAIL + 1];
        size_t s0 = (p->tail_pos + CH_PROC_TAIL - p->tail_len) % CH_PROC_TAIL, len = p->tail_len;
        for (size_t i = 0; i < len; i++)
            t[i] = p->tail[(s0 + i) % CH_PROC_TAIL];
        while (len && (t[len - 1] == '\n' || t[len - 1] == '\r'))
            len--;
        t[len] = '\0';
        /* chute_error holds 512 bytes: the end of stderr says most. */
        size_t keep = 200, from = len > keep ? len - keep : 0;
        snprintf(msg + m, n - m, "; stderr: %s%s", from ? "\u2026" : "", t + from);
    }
}

int ch_proc_finish(ch_proc *p, chute_error *err)
{
    if (!p->pid)
        return CHUTE_OK;
    /* stderr ends when the child (and whatever shares its stderr) exits. */
    uint64_t t0 = ch_now_ns();
    while (!try_reap(p)) {
        struct pollfd f[2] = {{p->cancel_fd, POLLIN, 0}, {p->err_fd, POLLIN, 0}};
        int nf = p->err_fd >= 0 ? 2 : 1;
        int r = poll(f, (nfds_t)nf, 10);
        if (r > 0 && f[0].revents)
            return ch_err(err, CHUTE_EINTERRUPTED, "%s: reading was stopped", p->name);
        if (nf == 2 && r > 0 && f[1].revents)
            drain_stderr(p);
        if (p->timeout_ms > 0 && (ch_now_ns() - t0) / 1000000u >= (uint64_t)p->timeout_ms) {
            kill_and_reap(p);
            char m[600];
            snprintf(m, sizeof m, "%s: closed its output but did not exit within %d ms "
                                  "(stream_timeout_ms)", p->name, p->timeout_ms);
            ch_proc_explain(p, m, sizeof m);
            return ch_err(err, CHUTE_EIO, "%s", m);
        }
    }
    if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0)
        return CHUTE_OK;
    char m[sizeof err->message];
    ch_str_fit(m, sizeof m - 200, p->name);
    ch_proc_explain(p, m, sizeof m);
    return ch_err(err, CHUTE_EIO, "%s", m);
}

void ch_proc_cancel(ch_proc *p)
{
    if (p->cancel_fd >= 0) { /* valid until ch_proc_close (not ch_proc_end) */
        uint64_t one = 1;
        ssize_t r = write(p->cancel_fd, &one, sizeof one);
        (void)r;
    }
}

void ch_proc_end(ch_proc *p)
{
    if (!p->is_open)
        return;
    p->is_open = 0;
    kill_and_reap(p);
    if (p->pid && p->out_fd > 0)
        close(p->out_fd);
    if (p->err_fd >= 0)
        close(p->err_fd);
    p->out_fd = -1;
    p->err_fd = -1;
    p->pid = 0;
}

void ch_proc_close(ch_proc *p)
{
    ch_proc_end(p);
    if (p->cancel_fd >= 0)
        close(p->cancel_fd);
    p->cancel_fd = -1;
}
