/* util.c — CLI helpers: clocks, JSON strings, durations, text buffers. */
#define _GNU_SOURCE
#include "util.h"
#include "common/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

double cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

double cli_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

void cli_sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* JSON string for any bytes: valid UTF-8 is written as is; each byte that
 * is not part of a well-formed sequence becomes \udcXX, the code point
 * Python's os.fsdecode gives it (surrogateescape), so json.loads() then
 * os.fsencode() gives back the exact bytes of a path.  (A lone surrogate
 * escape is valid JSON syntax; strict parsers that reject it would reject
 * the only lossless alternative too.) */
void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t u = ch_fsdecode_unit(p + i, n - i, &cp);
        if (cp == '"' || cp == '\\')
            fprintf(f, "\\%c", (int)cp);
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0xDC80 && cp <= 0xDCFF))
            fprintf(f, "\\u%04x", (unsigned)cp);
        else
            fwrite(p + i, 1, u, f);
        i += u;
    }
    fputc('"', f);
}

double cli_parse_duration(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    if (*end == '\0' || strcmp(end, "s") == 0)
        return v;
    if (strcmp(end, "ms") == 0)
        return v / 1000;
    if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        return v * 60;
    if (strcmp(end, "h") == 0)
        return v * 3600;
    return -1;
}

void cli_sb_printf(cli_sb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if (b->n + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->n + (size_t)n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            va_end(ap2);
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->n += (size_t)n;
}

void cli_sb_free(cli_sb *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void cli_note_skipped(const char *cmd, const chute_dataset *ds)
{
    uint64_t n = chute_dataset_skipped(ds, 0, NULL, 0);
    for (uint64_t k = 0; k < n && k < 20; k++) {
        char note[1024];
        chute_dataset_skipped(ds, k, note, sizeof note);
        fprintf(stderr, "%s: %s\n", cmd, note);
    }
    if (n > 20)
        fprintf(stderr, "%s: ... and %llu more entries left out (not regular files)\n", cmd,
                (unsigned long long)(n - 20));
}
