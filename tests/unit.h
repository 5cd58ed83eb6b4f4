/*
 * unit.h — the tiny test runner every C test file includes (once).
 *
 * A test is a function declared with TEST(name) that returns 0 (pass),
 * 1 (fail) or UNIT_SKIP (77, "can't run here").  CHECK() prints where and
 * why a condition failed and returns 1 from the test.  tests/CMakeLists.txt
 * finds the TEST(...) lines in each file and registers every test as its
 * own ctest entry (`runner NAME`), so each runs in its own process with its
 * own timeout; running the binary with no name runs all of them.
 *
 * Options every runner accepts:  --work DIR (scratch space, created),
 * --data DIR (the fixture data directory with tree/ and shards/).
 *
 * A watchdog (CHUTE_TEST_WATCHDOG seconds, default 60) turns a hung test
 * into a prompt failure that says so, instead of a ctest timeout.
 */
#ifndef CHUTE_TEST_UNIT_H
#define CHUTE_TEST_UNIT_H

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define UNIT_SKIP 77
#define UNIT_MAX_TESTS 128

typedef int (*unit_fn)(void);
static struct {
    const char *name;
    unit_fn fn;
} unit_tests[UNIT_MAX_TESTS];
static int unit_ntests;
static const char *g_work = NULL; /* --work */
static const char *g_data = NULL; /* --data */

static void unit_register(const char *name, unit_fn fn)
{
    if (unit_ntests < UNIT_MAX_TESTS) {
        unit_tests[unit_ntests].name = name;
        unit_tests[unit_ntests].fn = fn;
        unit_ntests++;
    }
}

#define TEST(name)                                                                        \
    static int test_##name(void);                                                         \
    __attribute__((constructor)) static void unit_reg_##name(void)                       \
    {                                                                                     \
        unit_register(#name, test_##name);                                                \
    }                                                                                     \
    static int test_##name(void)

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

#define SKIP(...)                                                                         \
    do {                                                                                  \
        fprintf(stderr, "skipped: ");                                                     \
        fprintf(stderr, __VA_ARGS__);                                                     \
        fputc('\n', stderr);                                                              \
        return UNIT_SKIP;                                                                 \
    } while (0)

/* Run a sub-check (a helper returning 0/1) and propagate failure. */
#define CHECK_OK(expr)                                                                    \
    do {                                                                                  \
        if ((expr) != 0) {                                                                \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #expr);             \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

/* ---- small helpers shared by test files ---- */

static inline void unit_mkdirs(const char *dir)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0777);
            *p = '/';
        }
    mkdir(tmp, 0777);
}

/* Fresh scratch directory for one test: WORK/name, emptied first. */
static inline const char *unit_scratch(const char *name, char *buf, size_t n)
{
    const char *base = g_work ? g_work : "/tmp/chute-unit";
    snprintf(buf, n, "%s/%s", base, name);
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", buf);
    if (system(cmd) != 0) { /* best effort */
    }
    unit_mkdirs(buf);
    return buf;
}

static inline int unit_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    int rc = fclose(f);
    return w == len && rc == 0 ? 0 : -1;
}

/* Whole file into a malloc'd buffer (NULL on failure). */
static inline uint8_t *unit_read_file(const char *path, size_t *out_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    uint8_t *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b)
        *out_len = (size_t)n;
    return b;
}

/* Deterministic test RNG (xorshift64*), independent of the library's. */
static inline uint64_t unit_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static const char *unit_current = "";

static void unit_on_alarm(int sig)
{
    (void)sig;
    static const char a[] = "\nFAIL: test '";
    static const char b[] = "' still running when the watchdog fired: hang or deadlock\n";
    if (write(2, a, sizeof a - 1) < 0 || write(2, unit_current, strlen(unit_current)) < 0 ||
        write(2, b, sizeof b - 1) < 0) {
    }
    _exit(1);
}

static int unit_main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) {
            for (int t = 0; t < unit_ntests; t++)
                printf("%s\n", unit_tests[t].name);
            return 0;
        } else if (!strcmp(argv[i], "--work") && i + 1 < argc) {
            g_work = argv[++i];
        } else if (!strcmp(argv[i], "--data") && i + 1 < argc) {
            g_data = argv[++i];
        } else if (argv[i][0] != '-' && !only) {
            only = argv[i];
        } else {
            fprintf(stderr, "usage: %s [--list] [--work DIR] [--data DIR] [TEST]\n", argv[0]);
            return 2;
        }
    }
    int failed = 0, ran = 0, skipped = 0;
    for (int t = 0; t < unit_ntests; t++) {
        if (only && strcmp(only, unit_tests[t].name) != 0)
            continue;
        ran++;
        const char *wd = getenv("CHUTE_TEST_WATCHDOG");
        unit_current = unit_tests[t].name;
        signal(SIGALRM, unit_on_alarm);
        alarm(wd && atoi(wd) > 0 ? (unsigned)atoi(wd) : 60u);
        int rc = unit_tests[t].fn();
        alarm(0);
        const char *what = rc == 0 ? "ok" : rc == UNIT_SKIP ? "skip" : "FAIL";
        fprintf(stderr, "[%s] %s\n", what, unit_tests[t].name);
        if (rc == UNIT_SKIP)
            skipped++;
        else if (rc != 0)
            failed++;
    }
    if (only && ran == 0) {
        fprintf(stderr, "%s: no test named '%s' (see --list)\n", argv[0], only);
        return 2;
    }
    if (failed)
        return 1;
    return skipped == ran && ran > 0 ? UNIT_SKIP : 0;
}

#define UNIT_MAIN                                                                         \
    int main(int argc, char **argv) { return unit_main(argc, argv); }

#endif
