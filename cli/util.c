/* util.c — CLI helpers: clocks, JSON strings, numbers, sizes, durations,
 * text buffers.  The number parsers take digits only (no sign, no blanks,
 * no nan/inf) and check every multiplication: a value that does not fit is
 * refused with a reason, never wrapped into a different, valid-looking one
 * ("16777217T" once became 1T). */
#define _GNU_SOURCE
#include "util.h"
#include "cli.h"
#include "common/common.h"
#include "common/loader_options.h"
#include "stats/hist.h"

#include <errno.h>
#include <math.h>
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
    /* strtod would also take "nan", "inf", hex and leading blanks: a
     * duration starts with a digit or a point. */
    if (!((*s >= '0' && *s <= '9') || *s == '.') || s[1] == 'x' || s[1] == 'X')
        return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return -1;
    double mul;
    if (*end == '\0' || strcmp(end, "s") == 0)
        mul = 1;
    else if (strcmp(end, "ms") == 0)
        mul = 1e-3;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        mul = 60;
    else if (strcmp(end, "h") == 0)
        mul = 3600;
    else
        return -1;
    v *= mul;
    /* A year is longer than any measurement; beyond it deadlines lose
     * their meaning (and inf never arrives). */
    if (!isfinite(v) || v > CLI_MAX_DURATION_S)
        return -1;
    return v;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    /* strtoull skips blanks and accepts a sign ("-1" is 2^64-1): only
     * digits are a number here. */
    if (!(*s >= '0' && *s <= '9'))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    *why = "not a size (e.g. 256M, 4G)";
    if (!(*s >= '0' && *s <= '9'))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) {
        *why = "too large (more than 2^64 bytes)";
        return -1;
    }
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    case 'p': case 'P': shift = 50; end++; break;
    default: break;
    }
    if (shift && *end == 'i') /* KiB, MiB, ... */
        end++;
    if (*end == 'B' || (!shift && *end == 'b'))
        end++;
    if (*end)
        return -1;
    if (shift && v > (UINT64_MAX >> shift)) {
        *why = "too large (more than 2^64 bytes)";
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
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

/* A row's flag: its own spelling, else --name (--no-name for a negated
 * flag) with '_' spelled '-'. */
static void row_flag_name(const ch_opt_row *d, char *out, size_t cap)
{
    if (d->cli) {
        snprintf(out, cap, "%s", d->cli);
        return;
    }
    snprintf(out, cap, "--%s%s", d->kind == CH_OPT_NEG ? "no-" : "", d->name);
    for (char *c = out; *c; c++)
        if (*c == '_')
            *c = '-';
}

/* CLI rows for the table rows d[0..nd) of the struct at base. */
static int cli_rows(void *base, const ch_opt_row *d, int nd, cli_opt *out, cli_opt_text *text,
                    int cap)
{
    int n = 0;
    for (int i = 0; i < nd && n < cap; i++, d++) {
        if (!(d->layers & CH_OPT_CLI))
            continue;
        cli_opt_text *tx = &text[n];
        char hb[sizeof tx->help];
        const char *help = ch_opt_help(d->help, hb, sizeof hb); /* {formats}: the registry's */
        row_flag_name(d, tx->name, sizeof tx->name);
        cli_opt *r = &out[n++];
        memset(r, 0, sizeof *r);
        r->name = tx->name;
        r->dst = (char *)base + d->offset;
        r->help = tx->help;
        r->row = d;
        char b[64] = "";
        switch (d->kind) {
        case CH_OPT_ENUM:
            r->type = CLI_CHOICE;
            r->choices = d->choices;
            ch_opt_choice(d, 0, b, sizeof b);
            snprintf(tx->help, sizeof tx->help, "%s (default %s)", help, b);
            break;
        case CH_OPT_F32:
            r->type = CLI_F32;
            r->min = d->n;
            if (d->layers & CH_OPT_AUTO) {
                snprintf(tx->help, sizeof tx->help, "%s", help);
            } else {
                size_t l = 0;
                for (unsigned c = 0; c < d->n; c++)
                    l += (size_t)snprintf(b + l, sizeof b - l, "%s%g", c ? "," : "",
                                          (double)d->fdef[c]);
                snprintf(tx->help, sizeof tx->help, "%s (default %s)", help, b);
            }
            break;
        case CH_OPT_NEG:
            r->type = CLI_FLAG;
            snprintf(tx->help, sizeof tx->help, "turn off: %s", help);
            break;
        case CH_OPT_STR:
            r->type = CLI_STR;
            snprintf(tx->help, sizeof tx->help, "%s", help);
            break;
        case CH_OPT_BOOL: /* a flag, off by default */
            r->type = CLI_FLAG;
            snprintf(tx->help, sizeof tx->help, "%s", help);
            break;
        case CH_OPT_I32:
            r->type = CLI_I32;
            r->min = d->min;
            r->max = d->max;
            snprintf(tx->help, sizeof tx->help, "%s (default %lld)", help,
                     (long long)(int64_t)d->def);
            break;
        default:
            r->type = d->kind == CH_OPT_U32 ? CLI_U32 : CLI_U64;
            r->min = d->min;
            r->max = d->max;
            r->zero_off = (d->layers & CH_OPT_ZERO_OFF) != 0;
            /* Computed defaults, and a 0 below the bounds, are told in the
             * help itself. */
            if ((d->layers & CH_OPT_AUTO) || (d->def == 0 && d->min > 0))
                snprintf(tx->help, sizeof tx->help, "%s", help);
            else
                snprintf(tx->help, sizeof tx->help, "%s (default %llu)", help,
                         (unsigned long long)d->def);
            break;
        }
    }
    return n;
}

const char *cli_format_help(void)
{
    static char buf[400];
    const ch_opt_row *d = ch_dataset_opts();
    for (int i = 0; i < ch_dataset_opt_count(); i++, d++)
        if (strcmp(d->name, "format") == 0)
            return ch_opt_help(d->help, buf, sizeof buf);
    return "the dataset's format";
}

const char *cli_writer_help(const char *help)
{
    static char buf[400];
    return ch_opt_help(help, buf, sizeof buf);
}

int cli_dataset_opts(chute_dataset_options *o, cli_opt *out, cli_opt_text *text, int cap)
{
    return cli_rows(o, ch_dataset_opts(), ch_dataset_opt_count(), out, text, cap);
}

int cli_infer_opts(chute_infer_options *o, cli_opt *out, cli_opt_text *text, int cap)
{
    return cli_rows(o, ch_infer_opts(), ch_infer_opt_count(), out, text, cap);
}

int cli_loader_opts(chute_loader_options *o, cli_opt *out, cli_opt_text *text, int cap)
{
    const ch_loader_opt *t = ch_loader_opts();
    int n = 0;
    for (int i = 0; i < CH_LOPT_COUNT && n < cap; i++) {
        const ch_loader_opt *d = &t[i];
        if (!(d->layers & CH_OPT_CLI))
            continue;
        /* --name, with '_' spelled '-' */
        cli_opt_text *tx = &text[n];
        char *f = tx->name;
        snprintf(f, sizeof tx->name, "--%s", d->name);
        for (char *c = f; *c; c++)
            if (*c == '_')
                *c = '-';
        cli_opt *r = &out[n++];
        memset(r, 0, sizeof *r);
        r->name = f;
        r->type = d->kind == CH_OPT_BOOL ? CLI_FLAG : d->kind == CH_OPT_U32 ? CLI_U32 : CLI_U64;
        r->dst = (char *)o + d->offset;
        r->min = d->min;
        r->max = d->max;
        r->zero_off = (d->layers & CH_OPT_ZERO_OFF) != 0;
        /* Flags are off by default; computed defaults are told in the help. */
        if (d->kind != CH_OPT_BOOL && !(d->layers & CH_OPT_AUTO))
            snprintf(tx->help, sizeof tx->help, "%s (default %llu)", d->help,
                     (unsigned long long)d->def);
        else
            snprintf(tx->help, sizeof tx->help, "%s", d->help);
        r->help = tx->help;
    }
    /* The other kinds: enums, floats, negated flags, strings. */
    n += cli_rows(o, ch_loader_xopts(), ch_loader_xopt_count(), out + n, text + n, cap - n);
    return n;
}

/* ---- the block cache tier's counters (chute_stats tier_*) ---- */

void cli_tier_diff(const chute_stats *a, const chute_stats *b, chute_stats *out)
{
    memset(out, 0, sizeof *out);
    out->tier_ram_hits = b->tier_ram_hits - a->tier_ram_hits;
    out->tier_disk_hits = b->tier_disk_hits - a->tier_disk_hits;
    out->tier_fetches = b->tier_fetches - a->tier_fetches;
    out->tier_fetched_bytes = b->tier_fetched_bytes - a->tier_fetched_bytes;
    out->tier_ram_evictions = b->tier_ram_evictions - a->tier_ram_evictions;
    out->tier_disk_evictions = b->tier_disk_evictions - a->tier_disk_evictions;
    out->tier_corrupt = b->tier_corrupt - a->tier_corrupt;
    out->tier_fallbacks = b->tier_fallbacks - a->tier_fallbacks;
    out->tier_ram_bytes = b->tier_ram_bytes; /* levels, not counters */
    out->tier_ram_budget = b->tier_ram_budget;
}

double cli_tier_hit_rate(const chute_stats *s)
{
    uint64_t hits = s->tier_ram_hits + s->tier_disk_hits, all = hits + s->tier_fetches;
    return all ? (double)hits / all : -1;
}

void cli_tier_json(FILE *f, const chute_stats *s)
{
    double hr = cli_tier_hit_rate(s);
    fprintf(f,
            "{\"ram_hits\":%llu,\"disk_hits\":%llu,\"fetches\":%llu,\"fetched_bytes\":%llu,"
            "\"ram_evictions\":%llu,\"disk_evictions\":%llu,\"corrupt\":%llu,\"fallbacks\":%llu,"
            "\"ram_bytes\":%llu,\"ram_budget\":%llu,\"hit_rate\":",
            (unsigned long long)s->tier_ram_hits, (unsigned long long)s->tier_disk_hits,
            (unsigned long long)s->tier_fetches, (unsigned long long)s->tier_fetched_bytes,
            (unsigned long long)s->tier_ram_evictions, (unsigned long long)s->tier_disk_evictions,
            (unsigned long long)s->tier_corrupt, (unsigned long long)s->tier_fallbacks,
            (unsigned long long)s->tier_ram_bytes, (unsigned long long)s->tier_ram_budget);
    if (hr >= 0)
        fprintf(f, "%.4f}", hr);
    else
        fprintf(f, "null}");
}

void cli_tier_text(FILE *f, const chute_stats *s)
{
    double hr = cli_tier_hit_rate(s);
    fprintf(f,
            "hit rate %s%.1f%s: RAM %llu, disk %llu hits; %llu blocks (%.1f MB) from the "
            "origin; evicted RAM %llu, disk %llu",
            hr >= 0 ? "" : "(no lookups) ", hr >= 0 ? 100 * hr : 0.0, hr >= 0 ? "%" : "",
            (unsigned long long)s->tier_ram_hits, (unsigned long long)s->tier_disk_hits,
            (unsigned long long)s->tier_fetches, s->tier_fetched_bytes / 1e6,
            (unsigned long long)s->tier_ram_evictions,
            (unsigned long long)s->tier_disk_evictions);
    if (s->tier_ram_budget)
        fprintf(f, "; RAM %.1f of %.1f MB", s->tier_ram_bytes / 1e6, s->tier_ram_budget / 1e6);
    if (s->tier_corrupt || s->tier_fallbacks)
        fprintf(f, "; %llu damaged files refetched, %llu blocks past a failing cache_dir",
                (unsigned long long)s->tier_corrupt, (unsigned long long)s->tier_fallbacks);
}

int cli_progress_cb(const chute_pack_progress *p, void *user)
{
    cli_progress *ui = user;
    if (!ui->tty)
        return 0;
    if (p->seconds - ui->last < 0.1 && p->files_done != p->files_total)
        return 0;
    ui->last = p->seconds;
    double frac = p->files_total ? (double)p->files_done / p->files_total : 1.0;
    double rate = p->seconds > 0 ? p->files_done / p->seconds : 0;
    double mbs = p->seconds > 0 ? p->bytes_done / 1e6 / p->seconds : 0;
    double eta = rate > 0 ? (p->files_total - p->files_done) / rate : 0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[30] = '\0';
    fprintf(stderr, "\r[%s] %5.1f%% %llu/%llu %s  %.0f %s/s  %.1f MB/s  ETA %d:%02d  ", bar,
            frac * 100, (unsigned long long)p->files_done, (unsigned long long)p->files_total,
            ui->unit, rate, ui->unit, mbs, (int)eta / 60, (int)eta % 60);
    fflush(stderr);
    return 0;
}

void cli_progress_skip(const char *path, const char *reason, void *user)
{
    const cli_progress *ui = user;
    fprintf(stderr, "%sskipped %s: %s\n", ui->tty ? "\r\033[K" : "", path, reason);
}

void cli_hist_pcts_us(const struct ch_hist_snap *h, double *p50, double *p90, double *p99)
{
    *p50 = ch_hist_quantile(h, 0.5) / 1e3;
    *p90 = ch_hist_quantile(h, 0.9) / 1e3;
    *p99 = ch_hist_quantile(h, 0.99) / 1e3;
}
