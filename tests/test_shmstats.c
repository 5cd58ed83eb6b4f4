/*
 * test_shmstats.c — the stats segment `chute top` reads
 * (src/stats/shmstats.c): the reader's checks against hostile files, the
 * writer's file (name, mode, removal), and the sweep of stale segments.
 *
 * Segments are built here byte by byte from docs/TOP.md's layout table
 * (offsets written out, not taken from the header struct), so a layout
 * change that the doc does not follow fails here.
 */
#include "unit.h"

#include "stats/shmstats.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void put32(uint8_t *b, size_t off, uint32_t v) { memcpy(b + off, &v, 4); }
static void put64(uint8_t *b, size_t off, uint64_t v) { memcpy(b + off, &v, 8); }

/* A valid version-1 segment per docs/TOP.md: 4096 bytes, counters at 256,
 * counter i = 1000 + i. */
static void make_seg(uint8_t *b, int32_t pid, uint32_t ncounters)
{
    memset(b, 0, 4096);
    memcpy(b, "CHUTESTA", 8);
    put32(b, 8, 1);
    put32(b, 12, 4096);
    put32(b, 16, 256);
    put32(b, 20, ncounters);
    memcpy(b + 24, &pid, 4);
    put32(b, 28, 1);
    put64(b, 32, 777);
    put32(b, 48, 3);
    put32(b, 52, 8);
    memcpy(b + 56, "node7", 5);
    memcpy(b + 120, "imagenet", 8);
    memcpy(b + 184, "python3", 7);
    for (uint32_t i = 0; i < ncounters && 256 + 8 * i + 8 <= 4096; i++)
        put64(b, 256 + 8 * (size_t)i, 1000 + i);
}

static int parse_fails_with(const uint8_t *b, size_t len, const char *word)
{
    ch_shm_view v;
    char why[200] = "";
    if (ch_shm_parse(b, len, &v, why, sizeof why) == 0) {
        fprintf(stderr, "parse accepted a segment that should fail with '%s'\n", word);
        return 1;
    }
    if (!strstr(why, word)) {
        fprintf(stderr, "reason '%s' does not say '%s'\n", why, word);
        return 1;
    }
    return 0;
}

TEST(parse_reads_the_documented_layout)
{
    static uint8_t b[4096];
    make_seg(b, 4242, CH_SHM_NCOUNTERS);
    ch_shm_view v;
    char why[200] = "";
    CHECK(ch_shm_parse(b, sizeof b, &v, why, sizeof why) == 0, "%s", why);
    CHECK(v.pid == 4242 && v.rank == 3 && v.world == 8 && v.kind == 1 && v.start_ticks == 777,
          "header fields pid %d rank %u world %u", v.pid, v.rank, v.world);
    CHECK(!strcmp(v.host, "node7") && !strcmp(v.dataset, "imagenet") && !strcmp(v.comm, "python3"),
          "strings '%s' '%s' '%s'", v.host, v.dataset, v.comm);
    CHECK(v.c[CH_SHM_SAMPLES] == 1000 + CH_SHM_SAMPLES && v.has[CH_SHM_SAMPLES], "samples");
    CHECK(v.c[CH_SHM_LAST_STEP_NS] == 1000 + CH_SHM_LAST_STEP_NS, "last counter");
    return 0;
}

TEST(parse_takes_fewer_and_more_counters)
{
    /* A writer with fewer slots (older) leaves the rest absent; one with
     * more (newer, same version) is read up to what this reader knows. */
    static uint8_t b[4096];
    make_seg(b, 5, 3);
    ch_shm_view v;
    char why[200];
    CHECK(ch_shm_parse(b, sizeof b, &v, why, sizeof why) == 0, "%s", why);
    CHECK(v.has[2] && !v.has[3] && v.c[3] == 0, "slot 3 absent");
    make_seg(b, 5, 400);
    CHECK(ch_shm_parse(b, sizeof b, &v, why, sizeof why) == 0, "%s", why);
    CHECK(v.ncounters == 400 && v.has[CH_SHM_NCOUNTERS - 1], "400 counters");
    return 0;
}

TEST(parse_refuses_hostile_headers)
{
    static uint8_t b[4096];
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    CHECK_OK(parse_fails_with(b, 100, "truncated"));
    CHECK_OK(parse_fails_with(b, 2000, "truncated")); /* size says 4096 */
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    b[0] = 'X';
    CHECK_OK(parse_fails_with(b, sizeof b, "magic"));
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    put32(b, 8, 2);
    CHECK_OK(parse_fails_with(b, sizeof b, "version 2"));
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    put32(b, 12, 0xffffffffu);
    CHECK_OK(parse_fails_with(b, sizeof b, "size"));
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    put32(b, 16, 260); /* unaligned */
    CHECK_OK(parse_fails_with(b, sizeof b, "offset"));
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    put32(b, 16, 4096 + 8);
    CHECK_OK(parse_fails_with(b, sizeof b, "offset"));
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    put32(b, 20, 0x20000000u); /* 2^29 counters: * 8 wraps 32 bits */
    CHECK_OK(parse_fails_with(b, sizeof b, "overrun"));
    make_seg(b, 5, 481); /* 256 + 481 * 8 = 4104 > 4096 */
    CHECK_OK(parse_fails_with(b, sizeof b, "overrun"));
    make_seg(b, -3, CH_SHM_NCOUNTERS);
    CHECK_OK(parse_fails_with(b, sizeof b, "pid"));
    /* Garbage: every byte 0xff, and random bytes, never accepted. */
    memset(b, 0xff, sizeof b);
    CHECK_OK(parse_fails_with(b, sizeof b, "magic"));
    return 0;
}

TEST(parse_makes_strings_printable)
{
    /* A terminal escape in the host or an unterminated name must not
     * reach top's screen. */
    static uint8_t b[4096];
    make_seg(b, 5, CH_SHM_NCOUNTERS);
    memcpy(b + 56, "\033[2Jx", 5);
    memset(b + 120, 'A', 64); /* no NUL in the field */
    memset(b + 184, 0x80, 16);
    ch_shm_view v;
    char why[200];
    CHECK(ch_shm_parse(b, sizeof b, &v, why, sizeof why) == 0, "%s", why);
    CHECK(!strcmp(v.host, "?[2Jx"), "host '%s'", v.host);
    CHECK(strlen(v.dataset) == 63, "dataset cut at its field: %zu", strlen(v.dataset));
    for (size_t i = 0; v.comm[i]; i++)
        CHECK(v.comm[i] == '?', "comm byte %zu", i);
    return 0;
}

static int write_file(const char *path, const void *p, size_t n, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return -1;
    int ok = write(fd, p, n) == (ssize_t)n && fchmod(fd, mode) == 0;
    close(fd);
    return ok ? 0 : -1;
}

static int read_fails_with(int dfd, const char *name, const char *word)
{
    ch_shm_view v;
    char why[200] = "";
    if (ch_shm_read(dfd, name, &v, why, sizeof why) == 0) {
        fprintf(stderr, "%s was read, should fail with '%s'\n", name, word);
        return 1;
    }
    if (!strstr(why, word)) {
        fprintf(stderr, "%s: reason '%s' does not say '%s'\n", name, why, word);
        return 1;
    }
    return 0;
}

TEST(read_refuses_links_modes_owners_and_fifos)
{
    char dir[4096], path[4200];
    unit_scratch("read_refuses", dir, sizeof dir);
    static uint8_t b[4096];
    make_seg(b, (int32_t)getpid(), CH_SHM_NCOUNTERS);
    snprintf(path, sizeof path, "%s/good", dir);
    CHECK(write_file(path, b, sizeof b, 0600) == 0, "write good");
    snprintf(path, sizeof path, "%s/open", dir);
    CHECK(write_file(path, b, sizeof b, 0644) == 0, "write open");
    snprintf(path, sizeof path, "%s/short", dir);
    CHECK(write_file(path, b, 300, 0600) == 0, "write short");
    char target[4200];
    /* Garbage whose bytes at the sequence's offset are odd: refused for
     * what it is (no magic), not retried as a segment being written. */
    static uint8_t g[4096];
    memset(g, 0x5a, sizeof g);
    put64(g, 200, 12345);
    snprintf(path, sizeof path, "%s/oddseq", dir);
    CHECK(write_file(path, g, sizeof g, 0600) == 0, "write oddseq");
    snprintf(target, sizeof target, "%s/good", dir);
    snprintf(path, sizeof path, "%s/link", dir);
    CHECK(symlink(target, path) == 0, "symlink: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0, "open dir");
    ch_shm_view v;
    char why[200];
    CHECK(ch_shm_read(dfd, "good", &v, why, sizeof why) == 0, "good: %s", why);
    CHECK(v.c[CH_SHM_BATCHES] == 1000 + CH_SHM_BATCHES, "good's counters");
    CHECK_OK(read_fails_with(dfd, "open", "mode 0644"));
    CHECK_OK(read_fails_with(dfd, "short", "truncated"));
    CHECK_OK(read_fails_with(dfd, "link", "link"));
    CHECK_OK(read_fails_with(dfd, "oddseq", "magic"));
    CHECK_OK(read_fails_with(dfd, "fifo", "regular")); /* and did not block */
    if (getuid() == 0) { /* root can make a file of another user */
        snprintf(path, sizeof path, "%s/other", dir);
        CHECK(write_file(path, b, sizeof b, 0600) == 0 && chown(path, 65534, 65534) == 0,
              "chown");
        CHECK_OK(read_fails_with(dfd, "other", "owned by uid 65534"));
    }
    close(dfd);
    return 0;
}

TEST(name_match_takes_only_this_users_names)
{
    pid_t pid = 0;
    CHECK(ch_shm_name_match("chute-1000-42-0", 1000, &pid) && pid == 42, "plain");
    CHECK(!ch_shm_name_match("chute-1000-42-0", 1001, &pid), "other uid");
    CHECK(!ch_shm_name_match("chute-1000-42", 1000, &pid), "no index");
    CHECK(!ch_shm_name_match("chute-1000-42-0x", 1000, &pid), "suffix");
    CHECK(!ch_shm_name_match("chute-1000--42-0", 1000, &pid), "sign");
    CHECK(!ch_shm_name_match("chute-1000-99999999999-0", 1000, &pid), "huge pid");
    return 0;
}

static uint64_t fill_calls;
static void fill(void *user, uint64_t *c)
{
    (void)user;
    fill_calls++;
    c[CH_SHM_SAMPLES] = 12345;
}

TEST(writer_file_is_private_published_and_removed)
{
    ch_shm *s = ch_shm_create(CH_SHM_KIND_LOADER, 1, 2, "/data/sets/my set/", fill, NULL);
    if (!s)
        SKIP("cannot create a segment in " CH_SHM_DIR);
    const char *p = ch_shm_path(s);
    struct stat st;
    CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode), "segment %s exists", p);
    CHECK((st.st_mode & 07777) == 0600 && st.st_uid == getuid(), "mode %o", st.st_mode & 07777);
    int dfd = open(CH_SHM_DIR, O_RDONLY | O_DIRECTORY);
    ch_shm_view v;
    char why[200];
    CHECK(ch_shm_read(dfd, strrchr(p, '/') + 1, &v, why, sizeof why) == 0, "%s", why);
    close(dfd);
    CHECK(v.pid == getpid() && v.rank == 1 && v.world == 2, "header");
    CHECK(!strcmp(v.dataset, "my_set"), "dataset basename sanitized: '%s'", v.dataset);
    CHECK(v.c[CH_SHM_SAMPLES] == 12345 && v.seq % 2 == 0, "published");
    char path[200];
    snprintf(path, sizeof path, "%s", p);
    ch_shm_close(s);
    CHECK(lstat(path, &st) != 0 && errno == ENOENT, "removed at close");
    return 0;
}

TEST(exit_removes_segments_never_closed)
{
    /* A child creates a segment and exits without closing it (a program
     * that never destroys its loader): the exit hook unlinks it.  A
     * second child is killed by SIGKILL: its file stays (no hook runs). */
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t c = fork();
    if (c == 0) {
        close(fds[0]);
        ch_shm *s = ch_shm_create(CH_SHM_KIND_LOADER, 0, 1, "x", fill, NULL);
        char path[200] = "";
        if (s)
            snprintf(path, sizeof path, "%s", ch_shm_path(s));
        if (write(fds[1], path, sizeof path) != (ssize_t)sizeof path)
            _exit(3);
        exit(0); /* not _exit: atexit hooks run */
    }
    close(fds[1]);
    char path[200] = "";
    ssize_t n = read(fds[0], path, sizeof path);
    close(fds[0]);
    int st = 0;
    waitpid(c, &st, 0);
    if (n != (ssize_t)sizeof path || !path[0])
        SKIP("cannot create a segment in " CH_SHM_DIR);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    struct stat sb;
    CHECK(lstat(path, &sb) != 0 && errno == ENOENT, "%s left behind at exit", path);

    CHECK(pipe(fds) == 0, "pipe");
    c = fork();
    if (c == 0) {
        close(fds[0]);
        ch_shm *s = ch_shm_create(CH_SHM_KIND_LOADER, 0, 1, "x", fill, NULL);
        char p2[200] = "";
        if (s)
            snprintf(p2, sizeof p2, "%s", ch_shm_path(s));
        if (write(fds[1], p2, sizeof p2) != (ssize_t)sizeof p2)
            _exit(3);
        pause();
        _exit(0);
    }
    close(fds[1]);
    n = read(fds[0], path, sizeof path);
    close(fds[0]);
    kill(c, SIGKILL);
    waitpid(c, &st, 0);
    CHECK(n == (ssize_t)sizeof path && lstat(path, &sb) == 0, "a SIGKILLed writer's file stays");
    CHECK(ch_shm_sweep(CH_SHM_DIR) >= 1 && lstat(path, &sb) != 0, "and the sweep removes it");
    return 0;
}

TEST(writer_never_opens_a_planted_name)
{
    /* The next name this process would use is taken by a symlink to a
     * file of ours: create must refuse it and leave the target alone. */
    ch_shm *s = ch_shm_create(CH_SHM_KIND_LOADER, 0, 1, "x", fill, NULL);
    if (!s)
        SKIP("cannot create a segment in " CH_SHM_DIR);
    char path[200], next[200];
    snprintf(path, sizeof path, "%s", ch_shm_path(s));
    ch_shm_close(s);
    char *dash = strrchr(path, '-');
    snprintf(next, sizeof next, "%.*s-%ld", (int)(dash - path), path,
             strtol(dash + 1, NULL, 10) + 1);
    char dir[4096], target[4200];
    unit_scratch("planted", dir, sizeof dir);
    snprintf(target, sizeof target, "%s/victim", dir);
    CHECK(write_file(target, "keep", 4, 0600) == 0, "victim");
    CHECK(symlink(target, next) == 0, "plant %s", next);
    s = ch_shm_create(CH_SHM_KIND_LOADER, 0, 1, "x", fill, NULL);
    CHECK(s == NULL, "create followed or replaced the planted %s", next);
    struct stat st;
    CHECK(stat(target, &st) == 0 && st.st_size == 4, "victim untouched");
    unlink(next);
    return 0;
}

TEST(sweep_removes_dead_and_reused_pids_only)
{
    char dir[4096], path[4200];
    unit_scratch("sweep", dir, sizeof dir);
    /* A pid that is surely gone: a child that has exited and been reaped. */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    pid_t live = getppid(); /* alive, and not us (sweep skips its own pid) */
    uid_t u = getuid();
    static uint8_t b[4096];
    make_seg(b, (int32_t)dead, CH_SHM_NCOUNTERS);
    snprintf(path, sizeof path, "%s/chute-%u-%d-0", dir, (unsigned)u, (int)dead);
    CHECK(write_file(path, b, sizeof b, 0600) == 0, "dead");
    make_seg(b, (int32_t)live, CH_SHM_NCOUNTERS);
    put64(b, 32, ch_shm_proc_start(live));
    snprintf(path, sizeof path, "%s/chute-%u-%d-0", dir, (unsigned)u, (int)live);
    CHECK(write_file(path, b, sizeof b, 0600) == 0, "live");
    put64(b, 32, ch_shm_proc_start(live) + 1); /* the pid, started at another time */
    snprintf(path, sizeof path, "%s/chute-%u-%d-1", dir, (unsigned)u, (int)live);
    CHECK(write_file(path, b, sizeof b, 0600) == 0, "reused");
    snprintf(path, sizeof path, "%s/unrelated", dir);
    CHECK(write_file(path, b, sizeof b, 0600) == 0, "unrelated");
    CHECK(ch_shm_sweep(dir) == 2, "two stale segments removed");
    struct stat st;
    snprintf(path, sizeof path, "%s/chute-%u-%d-0", dir, (unsigned)u, (int)dead);
    CHECK(stat(path, &st) != 0, "dead pid's segment removed");
    snprintf(path, sizeof path, "%s/chute-%u-%d-1", dir, (unsigned)u, (int)live);
    CHECK(stat(path, &st) != 0, "reused pid's segment removed");
    snprintf(path, sizeof path, "%s/chute-%u-%d-0", dir, (unsigned)u, (int)live);
    CHECK(stat(path, &st) == 0, "live segment kept");
    snprintf(path, sizeof path, "%s/unrelated", dir);
    CHECK(stat(path, &st) == 0, "other names kept");
    return 0;
}

UNIT_MAIN
