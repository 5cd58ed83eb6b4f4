/*
 * test_stream.c — streams (issue #13): `pipe:COMMAND` and `-` through the
 * loader.
 *
 * The reference for what a stream must deliver is the same tar read as a
 * file through the "wds" format (itself checked against webdataset and
 * PIL elsewhere): the tars are tests/fixtures/fields/wds/ (two tars), written by
 * webdataset's ShardWriter (6 samples, real JPEGs, .cls labels).  Member
 * offsets used below (sample k's first header at 12800 * k in
 * fields-000000.tar) are from Python's tarfile.
 *
 * Every test also checks process hygiene afterwards: no child left (not
 * even a zombie: waitpid(-1) says ECHILD) and the same open descriptors
 * as before.
 */
#include "unit.h"

#include "chute.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define FIX CHUTE_FIXTURES "/fields/wds"
#define F0 FIX "/fields-000000.tar"
#define F1 FIX "/fields-000001.tar"
#define NS 6 /* samples in F0 + F1 */
#define SZ 24

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the DIR's own */
}

/* No child process at all (a zombie would be one). */
static int no_children(void)
{
    errno = 0;
    return waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD;
}

static void opts_base(chute_loader_options *o, uint32_t workers)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 2;
    o->size = SZ;
    o->workers = workers;
    o->dtype = CHUTE_DTYPE_UINT8;
    o->transform = CHUTE_TRANSFORM_EVAL;
    o->seed = 11;
}

typedef struct got {
    uint32_t n;
    uint64_t idx[64];
    int64_t label[64];
    uint8_t px[64][SZ * SZ * 3];
    int end_rc;
    char msg[1400];
} got;

/* Run one epoch of `path` and collect every sample in delivery order. */
static int run_epoch(const char *path, const chute_loader_options *o, uint64_t epoch,
                     uint64_t start_batch, got *g)
{
    memset(g, 0, sizeof *g);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open_ex(path, NULL, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "open %s: %s\n", path, err.message);
        return -1;
    }
    chute_loader *ld = NULL;
    if (chute_loader_create(ds, o, &ld, &err) != CHUTE_OK) {
        fprintf(stderr, "create: %s\n", err.message);
        chute_dataset_close(ds);
        return -1;
    }
    chute_loader_start_epoch(ld, epoch, start_batch);
    chute_batch *b;
    int rc;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        for (uint32_t i = 0; i < v.count && g->n < 64; i++, g->n++) {
            g->idx[g->n] = v.indices[i];
            g->label[g->n] = v.labels[i];
            memcpy(g->px[g->n], (uint8_t *)v.data + (size_t)i * SZ * SZ * 3, SZ * SZ * 3);
        }
        chute_batch_release(b);
    }
    g->end_rc = rc;
    snprintf(g->msg, sizeof g->msg, "%s", chute_loader_errmsg(ld));
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}

TEST(pipe_cat_gives_every_sample_once_as_the_wds_format_reads_it)
{
    int fds = count_fds();
    chute_loader_options o;
    opts_base(&o, 2);
    o.shuffle_buffer = 4;
    static got s, w;
    CHECK(run_epoch("pipe:cat " F0 " " F1, &o, 0, 0, &s) == 0, "stream");
    CHECK(s.end_rc == CHUTE_END, "end %d: %s", s.end_rc, s.msg);
    CHECK(s.n == NS, "%u samples", s.n);
    o.no_shuffle = 1;
    CHECK(run_epoch(FIX, &o, 0, 0, &w) == 0, "wds");
    CHECK(w.n == NS, "wds %u", w.n);
    int seen[NS] = {0};
    int moved = 0;
    for (uint32_t k = 0; k < s.n; k++) {
        uint64_t i = s.idx[k];
        CHECK(i < NS && !seen[i], "sample %llu twice or out of range", (unsigned long long)i);
        seen[i] = 1;
        moved += i != k;
        CHECK(s.label[k] == w.label[i], "label of %llu", (unsigned long long)i);
        CHECK(memcmp(s.px[k], w.px[i], SZ * SZ * 3) == 0, "pixels of sample %llu differ",
              (unsigned long long)i);
    }
    CHECK(moved, "a shuffle buffer of 4 left all 6 samples in place");
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

TEST(same_seed_same_order_with_1_and_3_workers)
{
    chute_loader_options o;
    static got a, b, c;
    opts_base(&o, 1);
    o.transform = CHUTE_TRANSFORM_TRAIN; /* random crops keyed by position */
    o.shuffle_buffer = 3;
    o.batch_size = 4;
    CHECK(run_epoch("pipe:cat " F0 " " F1, &o, 1, 0, &a) == 0, "1 worker");
    o.workers = 3;
    CHECK(run_epoch("pipe:cat " F0 " " F1, &o, 1, 0, &b) == 0, "3 workers");
    CHECK(a.n == NS && b.n == NS, "%u %u", a.n, b.n);
    for (uint32_t k = 0; k < NS; k++) {
        CHECK(a.idx[k] == b.idx[k], "position %u: %llu vs %llu", k,
              (unsigned long long)a.idx[k], (unsigned long long)b.idx[k]);
        CHECK(memcmp(a.px[k], b.px[k], SZ * SZ * 3) == 0, "pixels at %u", k);
    }
    /* The last batch is short (6 = 4 + 2); drop_last drops it. */
    o.drop_last = 1;
    CHECK(run_epoch("pipe:cat " F0 " " F1, &o, 1, 0, &c) == 0, "drop_last");
    CHECK(c.n == 4 && c.end_rc == CHUTE_END, "drop_last: %u samples", c.n);
    for (uint32_t k = 0; k < 4; k++)
        CHECK(c.idx[k] == a.idx[k], "drop_last order at %u", k);
    CHECK(no_children(), "a child is left");
    return 0;
}

TEST(resume_skips_the_first_batches_and_stream_samples_ends_the_epoch)
{
    chute_loader_options o;
    static got full, res, lim;
    opts_base(&o, 2);
    o.shuffle_buffer = 3;
    CHECK(run_epoch("pipe:cat " F0 " " F1, &o, 2, 0, &full) == 0, "full");
    CHECK(run_epoch("pipe:cat " F0 " " F1, &o, 2, 1, &res) == 0, "resumed");
    CHECK(full.n == NS && res.n == NS - 2, "%u %u", full.n, res.n);
    for (uint32_t k = 0; k < res.n; k++) {
        CHECK(res.idx[k] == full.idx[k + 2], "resumed position %u", k);
        CHECK(memcmp(res.px[k], full.px[k + 2], SZ * SZ * 3) == 0, "resumed pixels %u", k);
    }
    o.stream_samples = 3; /* the command is stopped after 3 samples: no error */
    CHECK(run_epoch("pipe:cat " F0 " " F1 "; sleep 20", &o, 0, 0, &lim) == 0, "limited");
    CHECK(lim.end_rc == CHUTE_END && lim.n == 3, "rc %d, %u samples: %s", lim.end_rc, lim.n,
          lim.msg);
    for (uint32_t k = 0; k < 3; k++)
        CHECK(lim.idx[k] < 3, "sample %llu is past the first 3 read",
              (unsigned long long)lim.idx[k]);
    CHECK(no_children(), "a child is left");
    return 0;
}

TEST(records_are_recycled_over_a_long_stream)
{
    /* 20 copies of F0 (80 samples) through 5 + (2 + 2 + 2) x 2 = 17
     * records: every record is reused several times; with 3 workers and
     * 2 epochs the samples must still be exactly the 4 of F0, 20 times each,
     * with the wds format's pixels. */
    char cmd[8192] = "pipe:cat";
    for (int i = 0; i < 20; i++)
        strcat(cmd, " " F0);
    chute_loader_options o;
    opts_base(&o, 3);
    o.shuffle_buffer = 5;
    static got w;
    o.no_shuffle = 1;
    CHECK(run_epoch(FIX, &o, 0, 0, &w) == 0, "wds");
    o.no_shuffle = 0;
    chute_dataset *ds = NULL;
    chute_loader *ld = NULL;
    CHECK(chute_dataset_open_ex(cmd, NULL, &ds, NULL) == CHUTE_OK, "open");
    CHECK(chute_loader_create(ds, &o, &ld, NULL) == CHUTE_OK, "create");
    static uint8_t px[SZ * SZ * 3];
    for (uint64_t e = 0; e < 2; e++) {
        uint32_t count[80] = {0}, n = 0;
        chute_loader_start_epoch(ld, e, 0);
        chute_batch *b;
        int rc;
        while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
            chute_batch_view v;
            chute_batch_view_get(b, &v);
            for (uint32_t i = 0; i < v.count; i++, n++) {
                uint64_t ord = v.indices[i];
                CHECK(ord < 80, "ordinal %llu", (unsigned long long)ord);
                count[ord]++;
                memcpy(px, (uint8_t *)v.data + (size_t)i * SZ * SZ * 3, sizeof px);
                CHECK(memcmp(px, w.px[ord % 4], sizeof px) == 0, "pixels of ordinal %llu",
                      (unsigned long long)ord);
                CHECK(v.labels[i] == w.label[ord % 4], "label");
            }
            chute_batch_release(b);
        }
        CHECK(rc == CHUTE_END, "epoch %llu: %d %s", (unsigned long long)e, rc,
              chute_loader_errmsg(ld));
        CHECK(n == 80, "epoch %llu: %u samples", (unsigned long long)e, n);
        for (int k = 0; k < 80; k++)
            CHECK(count[k] == 1, "ordinal %d delivered %u times", k, count[k]);
    }
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    CHECK(no_children(), "a child is left");
    return 0;
}

TEST(stdin_is_a_stream)
{
    int fds = count_fds();
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        FILE *f = fopen(F0, "rb");
        if (!f || dup2(fileno(f), 0) < 0)
            _exit(2);
        chute_loader_options o;
        opts_base(&o, 2);
        static got g;
        if (run_epoch("-", &o, 0, 0, &g) != 0)
            _exit(3);
        if (g.end_rc != CHUTE_END || g.n != 4)
            _exit(4);
        /* A second epoch cannot read stdin again: a clear error. */
        chute_dataset *ds = NULL;
        chute_loader *ld = NULL;
        chute_batch *b;
        if (chute_dataset_open("-", CHUTE_SOURCE_AUTO, &ds, NULL) ||
            chute_loader_create(ds, &o, &ld, NULL))
            _exit(5);
        chute_loader_start_epoch(ld, 1, 0);
        int rc = chute_loader_next(ld, &b);
        if (rc != CHUTE_EINVAL || !strstr(chute_loader_errmsg(ld), "stdin can be read only once"))
            _exit(6);
        chute_loader_destroy(ld);
        chute_dataset_close(ds);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stdin driver failed (status %d)", st);
    CHECK(count_fds() == fds, "fds");
    return 0;
}

TEST(a_command_failing_midway_is_an_error_with_status_and_stderr)
{
    int fds = count_fds();
    chute_loader_options o;
    opts_base(&o, 2);
    o.no_shuffle = 1;
    o.batch_size = 1;
    static got g;
    /* 30000 bytes: samples 0 and 1 whole (sample 2 starts at 25600). */
    CHECK(run_epoch("pipe:head -c 30000 " F0 "; echo 'curl: (56) connection reset' >&2; exit 3",
                    &o, 0, 0, &g) == 0,
          "run");
    CHECK(g.n == 2 && g.idx[0] == 0 && g.idx[1] == 1, "%u samples delivered before the error",
          g.n);
    CHECK(g.end_rc == CHUTE_EIO, "rc %d: %s", g.end_rc, g.msg);
    CHECK(strstr(g.msg, "exited with status 3"), "no status in: %s", g.msg);
    CHECK(strstr(g.msg, "curl: (56) connection reset"), "no stderr in: %s", g.msg);
    CHECK(strstr(g.msg, "pipe:head -c 30000"), "no command in: %s", g.msg);
    /* A clean stream whose command still fails: the same error at its end. */
    CHECK(run_epoch("pipe:cat " F0 "; exit 7", &o, 0, 0, &g) == 0, "run");
    CHECK(g.n == 4 && g.end_rc == CHUTE_EIO && strstr(g.msg, "exited with status 7"),
          "%u samples, rc %d: %s", g.n, g.end_rc, g.msg);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

TEST(garbage_is_an_error_with_its_offset)
{
    int fds = count_fds();
    chute_loader_options o;
    opts_base(&o, 2);
    o.no_shuffle = 1;
    o.batch_size = 1;
    static got g;
    CHECK(run_epoch("pipe:echo 'this is not a tar stream'; head -c 2000 /dev/zero | tr '\\0' x",
                    &o, 0, 0, &g) == 0,
          "run");
    CHECK(g.n == 0 && g.end_rc == CHUTE_EFORMAT, "rc %d: %s", g.end_rc, g.msg);
    CHECK(strstr(g.msg, "@0: not a tar stream"), "%s", g.msg);
    /* Garbage after two samples: the offset where it starts. */
    CHECK(run_epoch("pipe:head -c 25600 " F0 "; head -c 3000 /dev/zero | tr '\\0' x", &o, 0, 0,
                    &g) == 0,
          "run");
    /* Sample 0 is delivered; sample 1 is not (its end was never seen). */
    CHECK(g.n == 1 && g.idx[0] == 0 && g.end_rc == CHUTE_ECORRUPT, "%u samples, rc %d: %s", g.n,
          g.end_rc, g.msg);
    CHECK(strstr(g.msg, "@25600: not a tar header"), "%s", g.msg);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

/* Running: exists and not a zombie (an orphaned grandchild is reaped by
 * whatever init the container has, maybe never). */
static int alive(pid_t pid)
{
    char p[64], st[512];
    snprintf(p, sizeof p, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = '\0';
    const char *c = strrchr(st, ')');
    return c && c[1] == ' ' && c[2] != 'Z' && c[2] != 'X';
}

/* mkdir -p g_work */
static int make_work(void)
{
    char p[4096];
    if (!g_work || snprintf(p, sizeof p, "%s", g_work) >= (int)sizeof p)
        return 0;
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = '\0';
            mkdir(p, 0755);
            *c = '/';
        }
    return mkdir(p, 0755) == 0 || errno == EEXIST;
}

static pid_t read_pid(const char *path)
{
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "r");
        long p = 0;
        if (f) {
            int ok = fscanf(f, "%ld", &p) == 1;
            fclose(f);
            if (ok && p > 0)
                return (pid_t)p;
        }
        usleep(10000);
    }
    return -1;
}

TEST(a_hung_command_times_out_and_is_killed)
{
    int fds = count_fds();
    char pidf[4200], cmd[8600];
    CHECK(make_work(), "no --work dir");
    snprintf(pidf, sizeof pidf, "%s/hung.pid", g_work);
    unlink(pidf);
    snprintf(cmd, sizeof cmd, "pipe:echo $$ > %s; exec sleep 60", pidf);
    chute_loader_options o;
    opts_base(&o, 2);
    o.stream_timeout_ms = 300;
    static got g;
    uint64_t t0 = (uint64_t)time(NULL);
    CHECK(run_epoch(cmd, &o, 0, 0, &g) == 0, "run");
    CHECK(g.end_rc == CHUTE_EIO && strstr(g.msg, "no data for 300 ms"), "rc %d: %s", g.end_rc,
          g.msg);
    CHECK(strstr(g.msg, "killed by signal"), "%s", g.msg);
    CHECK((uint64_t)time(NULL) - t0 < 20, "took too long");
    pid_t pid = read_pid(pidf);
    CHECK(pid > 0, "no pid file");
    CHECK(kill(pid, 0) == -1 && errno == ESRCH, "the command (pid %ld) still exists",
          (long)pid);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

TEST(destroy_kills_the_command_and_its_group)
{
    int fds = count_fds();
    char pidf[4200], cmd[8600];
    CHECK(make_work(), "no --work dir");
    snprintf(pidf, sizeof pidf, "%s/group.pid", g_work);
    unlink(pidf);
    /* A grandchild (the backgrounded sleep) in the command's group. */
    snprintf(cmd, sizeof cmd, "pipe:sleep 60 & echo $! > %s; wait", pidf);
    chute_dataset *ds = NULL;
    chute_loader *ld = NULL;
    chute_loader_options o;
    opts_base(&o, 2);
    CHECK(chute_dataset_open_ex(cmd, NULL, &ds, NULL) == CHUTE_OK, "open");
    CHECK(chute_dataset_is_stream(ds) && chute_dataset_size(ds) == 0, "a stream");
    CHECK(chute_loader_create(ds, &o, &ld, NULL) == CHUTE_OK, "create");
    CHECK(chute_loader_num_batches(ld) == 0, "unknown length");
    chute_batch *b = NULL;
    CHECK(chute_loader_next_timeout(ld, 200, &b) == CHUTE_EINTERRUPTED, "no batch yet");
    pid_t pid = read_pid(pidf);
    CHECK(pid > 0, "no pid file");
    CHECK(kill(pid, 0) == 0, "the grandchild is not running");
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    for (int i = 0; i < 100 && alive(pid); i++)
        usleep(10000);
    CHECK(!alive(pid), "the grandchild %ld survived", (long)pid);
    CHECK(no_children(), "a child is left");
    CHECK(count_fds() == fds, "fds %d -> %d", fds, count_fds());
    return 0;
}

TEST(corrupt_content_follows_the_policy)
{
    /* wds-000000.tar's .jpg members are not images (tests/fixtures). */
    chute_loader_options o;
    opts_base(&o, 2);
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    static got g;
    CHECK(run_epoch("pipe:cat " CHUTE_FIXTURES "/wds-000000.tar", &o, 0, 0, &g) == 0, "run");
    CHECK(g.end_rc == CHUTE_ECORRUPT && strstr(g.msg, "(sample 'train/0000"), "rc %d: %s",
          g.end_rc, g.msg);
    CHECK(strstr(g.msg, "pipe:cat "), "%s", g.msg);
    /* skip: the 3 bad samples (ordinals 4..6, after F0's 4 good ones) are
     * replaced by good samples of the same batch (one batch of 7). */
    o.on_corrupt = CHUTE_CORRUPT_SKIP;
    o.batch_size = 7;
    o.no_shuffle = 1;
    static got w;
    CHECK(run_epoch(FIX, &o, 0, 0, &w) == 0, "wds");
    CHECK(run_epoch("pipe:cat " F0 " " CHUTE_FIXTURES "/wds-000000.tar", &o, 0, 0, &g) == 0,
          "run");
    CHECK(g.end_rc == CHUTE_END && g.n == 7, "rc %d, %u samples: %s", g.end_rc, g.n, g.msg);
    for (uint32_t k = 0; k < 7; k++) {
        CHECK(g.idx[k] < 4, "position %u holds bad sample %llu", k,
              (unsigned long long)g.idx[k]);
        CHECK(memcmp(g.px[k], w.px[g.idx[k]], SZ * SZ * 3) == 0, "replacement pixels at %u", k);
        if (k < 4)
            CHECK(g.idx[k] == k, "good sample %u moved", k);
    }
    CHECK(no_children(), "a child is left");
    return 0;
}

UNIT_MAIN
