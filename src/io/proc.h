/*
 * proc.h — bytes from a child process's stdout (the `pipe:COMMAND`
 * source, WebDataset's convention) or from this process's stdin (`-`).
 *
 * Why it is shaped so:
 *   - The command runs under /bin/sh -c (so `curl ... | zstd -d`, shell
 *     braces and $RANK work as in WebDataset), started with posix_spawn in
 *     its own process group, stdin /dev/null, stdout and stderr on pipes
 *     made O_CLOEXEC (no other descriptor of ours leaks into it, and none
 *     of its pipes leak into later children).  Killing it kills the group:
 *     `sh -c 'curl | tar'` leaves no orphaned curl.
 *   - Every read waits in poll() on three things at once: stdout, stderr
 *     (its last CH_PROC_TAIL bytes are kept for the error message) and a
 *     cancel descriptor (an eventfd the owner writes to stop a read from
 *     another thread).  A read that sees no byte on stdout for timeout_ms
 *     is an error, and the child is killed: a hung `curl` becomes a
 *     message, not a stuck job.
 *   - The child is always reaped: ch_proc_close sends SIGTERM to the
 *     group, waits up to 200 ms, then SIGKILL, then waitpid.  No zombie,
 *     no descriptor survives close.
 *   - At the end of stdout, ch_proc_finish waits for the exit status (same
 *     timeout); a status other than 0 is an error naming the command, the
 *     status and the stderr tail.
 *
 * Not thread-safe except ch_proc_cancel, which any thread may call.
 */
#ifndef CHUTE_IO_PROC_H
#define CHUTE_IO_PROC_H

#include "../common/common.h"

#include <sys/types.h>

#define CH_PROC_TAIL 4096

typedef struct ch_proc {
    pid_t pid;               /* 0: reading stdin (or nothing) */
    int out_fd;              /* stdout's read end, or 0 for stdin */
    int err_fd;              /* stderr's read end, or -1 */
    int cancel_fd;           /* eventfd: readable once cancelled */
    int timeout_ms;          /* 0: wait forever */
    int exited, status;      /* waitpid result, once reaped */
    char tail[CH_PROC_TAIL]; /* last stderr bytes, a ring */
    size_t tail_len, tail_pos;
    char name[512];          /* "pipe:COMMAND" or "-", for messages */
    int is_open;
} ch_proc;

/* Start `sh -c cmd` (cmd != NULL) or read stdin (cmd == NULL).  timeout_ms:
 * see above.  On failure nothing is left running or open. */
int ch_proc_open(ch_proc *p, const char *cmd, int timeout_ms, chute_error *err);
/* Up to n bytes of stdout into buf; *got = 0 at its end.  CHUTE_EIO on a
 * timeout (child killed), CHUTE_EINTERRUPTED once cancelled. */
int ch_proc_read(ch_proc *p, uint8_t *buf, size_t n, size_t *got, chute_error *err);
/* After stdout ended: wait for the child's exit and check its status. */
int ch_proc_finish(ch_proc *p, chute_error *err);
/* Append "; <status>; stderr: <tail>" to a message (what a failure of a
 * stream adds); waits at most 100 ms for a child that is exiting. */
void ch_proc_explain(ch_proc *p, char *msg, size_t n);
/* Make any blocked or later read return CHUTE_EINTERRUPTED.  Any thread. */
void ch_proc_cancel(ch_proc *p);
/* Kill (group, SIGTERM then SIGKILL) and reap the child, close its pipes;
 * the cancel eventfd stays open, so a ch_proc_cancel racing with this (the
 * reading thread ending the stream while another cancels it) only writes
 * to a descriptor nobody reads.  Accepts a zeroed or ended struct. */
void ch_proc_end(ch_proc *p);
/* ch_proc_end, then close the cancel eventfd too: only once no thread can
 * call ch_proc_cancel any more.  Accepts a zeroed or closed struct. */
void ch_proc_close(ch_proc *p);

#endif
