/*
 * main.c — `chute`: dispatch to subcommands, and the option-table parser.
 */
#include "cli.h"
#include "util.h"
#include "common/loader_options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void print_help(const char *cmd, const char *usage, const cli_opt *opts)
{
    printf("usage: chute %s %s\n\noptions:\n", cmd, usage);
    for (const cli_opt *o = opts; o->name; o++) {
        char left[64];
        const char *arg = o->type == CLI_FLAG     ? ""
                          : o->type == CLI_CHOICE ? o->choices
                          : o->type == CLI_STR    ? "STR"
                          : o->type == CLI_SIZE   ? "SIZE"
                          : o->type == CLI_F32    ? (o->min > 1 ? "X,Y,Z" : "X")
                                                  : "N";
        snprintf(left, sizeof left, "%s%s%s", o->name, *arg ? " " : "", arg);
        printf("  %-28s %s\n", left, o->help);
    }
    printf("  %-28s %s\n", "--help", "show this help");
}

int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int argc, char **argv,
              const char **pos, int npos, int *out_npos)
{
    int np = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_help(cmd, usage, opts);
            return 1;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (np >= npos) {
                fprintf(stderr, "chute %s: unexpected argument '%s' (see --help)\n", cmd, a);
                return 2;
            }
            pos[np++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = opts;
        for (; o->name; o++)
            if (strlen(o->name) == nlen && strncmp(o->name, a, nlen) == 0)
                break;
        if (!o->name) {
            fprintf(stderr, "chute %s: unknown option '%.*s' (see --help)\n", cmd, (int)nlen, a);
            return 2;
        }
        if (o->type == CLI_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            fprintf(stderr, "chute %s: %s needs a value\n", cmd, o->name);
            return 2;
        }
        if (o->type == CLI_STR) {
            *(const char **)o->dst = v;
        } else if (o->type == CLI_I32) {
            char *end = NULL;
            errno = 0;
            long long x = strtoll(v, &end, 10);
            if (errno || end == v || *end || x < (int64_t)o->min || x > (int64_t)o->max) {
                fprintf(stderr, "chute %s: %s must be an integer in %lld..%lld, not '%s'\n", cmd,
                        o->name, (long long)(int64_t)o->min, (long long)(int64_t)o->max, v);
                return 2;
            }
            *(int32_t *)o->dst = (int32_t)x;
        } else if (o->type == CLI_F32) {
            /* min comma-separated numbers (strtof: no blanks, hex or words) */
            float *f = o->dst;
            const char *p = v;
            for (uint64_t c = 0; c < o->min; c++) {
                char *end = NULL;
                int ok = (*p >= '0' && *p <= '9') || *p == '.' || *p == '-';
                f[c] = ok ? strtof(p, &end) : 0;
                if (!ok || end == p || (c + 1 < o->min ? *end != ',' : *end != '\0')) {
                    fprintf(stderr, "chute %s: %s wants %llu comma-separated number(s), not '%s'\n",
                            cmd, o->name, (unsigned long long)o->min, v);
                    return 2;
                }
                p = end + 1;
            }
        } else if (o->type == CLI_CHOICE) {
            int idx = 0, found = -1;
            const char *c = o->choices;
            while (*c) {
                size_t l = strcspn(c, "|");
                if (strlen(v) == l && strncmp(c, v, l) == 0)
                    found = idx;
                c += l;
                if (*c == '|')
                    c++;
                idx++;
            }
            if (found < 0) {
                fprintf(stderr, "chute %s: %s must be one of %s, not '%s'\n", cmd, o->name,
                        o->choices, v);
                return 2;
            }
            /* the row's C value (choices from a nonzero first value) */
            *(int *)o->dst = found + (o->row ? (int)o->row->first : 0);
        } else {
            uint64_t x;
            const char *why = NULL;
            if (o->type == CLI_SIZE) {
                if (cli_parse_size(v, &x, &why) != 0) {
                    fprintf(stderr, "chute %s: %s: '%s' is %s\n", cmd, o->name, v, why);
                    return 2;
                }
            } else {
                if (cli_parse_u64(v, &x) != 0) {
                    fprintf(stderr,
                            "chute %s: %s: '%s' is not a non-negative integer (digits only, "
                            "below 2^64)\n",
                            cmd, o->name, v);
                    return 2;
                }
            }
            if (x < o->min || x > o->max) {
                fprintf(stderr, "chute %s: %s must be in %llu..%llu, not %llu\n", cmd, o->name,
                        (unsigned long long)o->min, (unsigned long long)o->max,
                        (unsigned long long)x);
                return 2;
            }
            if (x == 0 && o->zero_off)
                x = o->type == CLI_U32 ? UINT32_MAX : UINT64_MAX;
            if (o->type == CLI_U32)
                *(uint32_t *)o->dst = (uint32_t)x;
            else
                *(uint64_t *)o->dst = x;
        }
        const ch_opt_row *d = o->type == CLI_F32 ? o->row : NULL;
        if (d) { /* a float row: the table's bounds (CLI_F32 rows come only from it) */
            chute_error e = {0};
            if (ch_opt_rows_check((const char *)o->dst - d->offset, d, 1, &e) != CHUTE_OK) {
                fprintf(stderr, "chute %s: %s: %s\n", cmd, o->name, e.message);
                return 2;
            }
        }
    }
    *out_npos = np;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "chute %s — keeps GPUs fed\n\n"
            "usage: chute COMMAND [options]\n\n"
            "commands:\n"
            "  pack ROOT OUT_DIR     pack an ImageFolder tree or COCO/YOLO/mask pairs into shards\n"
            "  bench SOURCE          run the pipeline and report images/s\n"
            "  inspect SOURCE        samples, classes, sizes, dimensions, formats, bad files\n"
            "  doctor SOURCE         measure each stage and name the bottleneck\n"
            "  iobench PATH          storage test with deep-learning access patterns\n"
            "  convert SRC DST       write a dataset as chute shards, TFRecord or WebDataset\n"
            "  top                   every chute loader on this node, live (docs/TOP.md)\n"
            "  version               print the version\n\n"
            "Run 'chute COMMAND --help' for a command's options.\n",
            chute_version());
}

/* name is one of the space-separated words of list. */
static int has_feature(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The version, then what this build can do: the library's compiled-in
 * codecs, io_uring for iobench (compiled in), NVML for doctor (looked up
 * now), and the sources this build does not have.  Python's
 * chute.features() reads the "features:" line, so keep its form. */
static int print_version(void)
{
    printf("chute %s\n", chute_version());
    printf("features: %s", chute_features());
#ifdef CHUTE_HAVE_URING
    printf(" io_uring");
#endif
    cli_gpu *g = cli_gpu_open();
    int have_nvml = g != NULL;
    cli_gpu_close(g);
    if (have_nvml)
        printf(" nvml");
    printf("\nunavailable:");
#ifndef CHUTE_HAVE_URING
    printf(" io_uring (built without liburing; iobench uses threads);");
#endif
    if (!have_nvml)
        printf(" nvml (no NVIDIA driver; doctor runs without GPU utilisation);");
    /* Only what this build lacks (it printed "s3, hdf5, kafka (not in this
     * build)" whatever the build had). */
    const char *f = chute_features();
    if (!has_feature(f, "s3"))
        printf(" s3, http (built without libcurl);");
    if (!has_feature(f, "hdf5"))
        printf(" hdf5 (built without libhdf5);");
    if (!has_feature(f, "kafka"))
        printf(" kafka (built without librdkafka);");
    if (!has_feature(f, "libdeflate"))
        printf(" libdeflate (built without it: gzip HDF5 chunks and PNG checks use zlib, more CPU);");
    if (!has_feature(f, "coco"))
        printf(" coco (built without libjansson: COCO annotation JSON is refused);");
    printf("\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (strcmp(c, "pack") == 0)
        return cmd_pack(argc - 2, argv + 2);
    if (strcmp(c, "convert") == 0)
        return cmd_convert(argc - 2, argv + 2);
    if (strcmp(c, "bench") == 0)
        return cmd_bench(argc - 2, argv + 2);
    if (strcmp(c, "inspect") == 0)
        return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(c, "iobench") == 0)
        return cmd_iobench(argc - 2, argv + 2);
    if (strcmp(c, "doctor") == 0)
        return cmd_doctor(argc - 2, argv + 2);
    if (strcmp(c, "top") == 0)
        return cmd_top(argc - 2, argv + 2);
    if (strcmp(c, "version") == 0 || strcmp(c, "--version") == 0)
        return print_version();
    if (strcmp(c, "help") == 0 || strcmp(c, "--help") == 0 || strcmp(c, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "chute: unknown command '%s'\n\n", c);
    usage(stderr);
    return 2;
}
