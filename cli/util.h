/* util.h — small helpers shared by the CLI's subcommands. */
#ifndef CHUTE_CLI_UTIL_H
#define CHUTE_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "chute.h"

double cli_now_s(void);
double cli_cpu_s(void);
void cli_sleep_s(double s);
/* Print s as a JSON string literal (with quotes). */
void cli_json_str(FILE *f, const char *s);
/* "30s", "2m", "500ms", "10" (seconds) -> seconds; -1 on error (not a
 * number, negative, nan/inf, or longer than CLI_MAX_DURATION_S). */
#define CLI_MAX_DURATION_S (366.0 * 86400)
double cli_parse_duration(const char *s);
/* Decimal digits only -> *out; -1 if not a number or more than 2^64-1. */
int cli_parse_u64(const char *s, uint64_t *out);
/* "256M", "4G", "1KiB", "1024" -> bytes (K/M/G/T/P are powers of 1024);
 * -1 with *why set (may be NULL) if not a size or it overflows 64 bits. */
int cli_parse_size(const char *s, uint64_t *out, const char **why);

/* The block cache tier's counters (chute_stats tier_*): b - a (levels
 * from b), the hit rate ((RAM + disk hits) / lookups; -1 without any),
 * and as a JSON object / one line of text. */
void cli_tier_diff(const chute_stats *a, const chute_stats *b, chute_stats *out);
double cli_tier_hit_rate(const chute_stats *s);
void cli_tier_json(FILE *f, const chute_stats *s);
void cli_tier_text(FILE *f, const chute_stats *s);

/* Growable text buffer for building reports. */
typedef struct cli_sb {
    char *p;
    size_t n, cap;
} cli_sb;
void cli_sb_printf(cli_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_sb_free(cli_sb *b);

/* Optional NVIDIA GPU utilisation sampling through NVML, loaded at run
 * time.  cli_gpu_open returns NULL (not an error) when there is no NVML
 * or no GPU. */
typedef struct cli_gpu cli_gpu;
cli_gpu *cli_gpu_open(void);
void cli_gpu_close(cli_gpu *g);
/* Utilisation of GPU 0 in percent (0..100), or -1. */
int cli_gpu_util(cli_gpu *g);
const char *cli_gpu_name(cli_gpu *g);
/* Device memory in use and in all, bytes; -1 when NVML cannot say. */
int cli_gpu_mem(cli_gpu *g, uint64_t *out_used, uint64_t *out_total);

/* Print the entries a tree's listing left out (FIFOs, sockets, devices,
 * dangling or looping links named like images) to stderr, 20 at most. */
void cli_note_skipped(const char *cmd, const chute_dataset *ds);

/* The progress bar of pack and convert (chute_pack_options.progress,
 * chute_convert_options.progress): on stderr, redrawn at most every 0.1 s,
 * only when stderr is a terminal.  `user` points at a cli_progress (or at
 * a struct whose first member is one); unit names what is counted. */
typedef struct cli_progress {
    int tty;                /* isatty(2) */
    double last;            /* seconds of the last redraw; -1 at first */
    const char *unit;       /* "files", "samples" */
} cli_progress;
int cli_progress_cb(const chute_pack_progress *p, void *user);
/* on_skip of the same two commands (same `user`): "skipped PATH: REASON"
 * on stderr, on a line of its own when the bar is drawn. */
void cli_progress_skip(const char *path, const char *reason, void *user);

/* p50/p90/p99 of a merged latency histogram (ns), in microseconds: what
 * iobench reports for local and remote reads alike. */
struct ch_hist_snap;
void cli_hist_pcts_us(const struct ch_hist_snap *h, double *p50, double *p90, double *p99);

#endif
