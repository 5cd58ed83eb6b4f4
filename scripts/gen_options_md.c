/*
 * gen_options_md.c — prints docs/OPTIONS.md from the option tables (the
 * loader's src/common/loader_options.def, the dataset's dataset_options.def
 * and the inference session's infer_options.def), or the tables as
 * tab-separated rows with --tsv / --rows (what the CLI tests compare --help
 * against).
 *
 * Why a program and not a script: it reads the compiled table
 * (ch_loader_opts), so the docs show exactly the defaults and bounds the
 * library applies, with no second parser of the .def to drift.  The ctest
 * options_md_is_fresh fails when the committed docs/OPTIONS.md differs;
 * regenerate with
 *     build/tests/gen_options_md > docs/OPTIONS.md
 */
#include "common/loader_options.h"
#include "common/remote_options.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void flag(char *out, size_t n, const char *name)
{
    snprintf(out, n, "--%s", name);
    for (char *c = out; *c; c++)
        if (*c == '_')
            *c = '-';
}

/* The default of a row of the other kinds, as the docs say it. */
static void row_default(const ch_opt_row *d, char *out, size_t n)
{
    size_t l = 0;
    switch (d->kind) {
    case CH_OPT_ENUM:
        ch_opt_choice(d, 0, out, n);
        break;
    case CH_OPT_BOOL:
        snprintf(out, n, "%s", d->def ? "true" : "false");
        break;
    case CH_OPT_U32:
    case CH_OPT_U64:
        if (d->layers & CH_OPT_AUTO)
            snprintf(out, n, "computed");
        else
            snprintf(out, n, "%llu", (unsigned long long)d->def);
        break;
    case CH_OPT_F32:
        if (d->layers & CH_OPT_AUTO) {
            snprintf(out, n, "computed");
            break;
        }
        out[0] = '\0';
        for (unsigned c = 0; c < d->n && l < n; c++)
            l += (size_t)snprintf(out + l, n - l, "%s%g", c ? "," : "", (double)d->fdef[c]);
        break;
    case CH_OPT_NEG:
        snprintf(out, n, "0 (%s on)", d->name);
        break;
    case CH_OPT_STR:
        snprintf(out, n, "NULL");
        break;
    case CH_OPT_I32:
        snprintf(out, n, "%lld", (long long)(int64_t)d->def);
        break;
    default:
        snprintf(out, n, "%llu", (unsigned long long)d->def);
        break;
    }
}

/* Its values: the choices, a range, or "string". */
static void row_values(const ch_opt_row *d, char *out, size_t n)
{
    switch (d->kind) {
    case CH_OPT_ENUM:
        if (d->first) /* choices from a nonzero C value (zero means the first) */
            snprintf(out, n, "%s (C %u..; 0 = %.*s)", d->choices, d->first,
                     (int)strcspn(d->choices, "|"), d->choices);
        else
            snprintf(out, n, "%s", d->choices);
        break;
    case CH_OPT_BOOL:
        snprintf(out, n, "0, 1");
        break;
    case CH_OPT_F32:
        if (isinf(d->fmin))
            snprintf(out, n, "%sfinite", d->n > 1 ? "3 x " : "");
        else if (isinf(d->fmax))
            snprintf(out, n, "%s> %g, finite", d->n > 1 ? "3 x " : "", (double)d->fmin);
        else
            snprintf(out, n, "%s(%g, %g]", d->n > 1 ? "3 x " : "", (double)d->fmin,
                     (double)d->fmax);
        break;
    case CH_OPT_NEG:
        snprintf(out, n, "0, nonzero");
        break;
    case CH_OPT_STR:
        snprintf(out, n, "string");
        break;
    case CH_OPT_I32:
        snprintf(out, n, "%lld..%lld", (long long)(int64_t)d->min, (long long)(int64_t)d->max);
        break;
    default:
        snprintf(out, n, "%s%llu..%llu",
                 d->def == 0 && d->min > 0 && !(d->layers & CH_OPT_AUTO) ? "0, or " : "",
                 (unsigned long long)d->min, (unsigned long long)d->max);
        break;
    }
}

static const char *row_ctype(const ch_opt_row *d)
{
    switch (d->kind) {
    case CH_OPT_ENUM: return "enum";
    case CH_OPT_F32: return d->n > 1 ? "float[3]" : "float";
    case CH_OPT_NEG: return "int";
    case CH_OPT_BOOL: return "int";
    case CH_OPT_STR: return "const char *";
    case CH_OPT_I32: return "int32_t";
    case CH_OPT_U64: return "uint64_t";
    default: return "uint32_t";
    }
}

static void row_flag(const ch_opt_row *d, char *out, size_t n)
{
    if (d->cli) {
        snprintf(out, n, "%s", d->cli);
        return;
    }
    snprintf(out, n, "--%s%s", d->kind == CH_OPT_NEG ? "no-" : "", d->name);
    for (char *c = out; *c; c++)
        if (*c == '_')
            *c = '-';
}

static void row_py(const ch_opt_row *d, char *out, size_t n)
{
    if (d->kind == CH_OPT_NEG)
        snprintf(out, n, "%s=True", d->name);
    else
        snprintf(out, n, "%s", d->name);
}

/* One markdown table of rows. */
static void rows_md(const ch_opt_row *d, int nd)
{
    printf("| option | C field | C type | default | values | CLI | Python | meaning |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nd; i++, d++) {
        char def[64], val[96], f[64], py[64], hb[512];
        row_default(d, def, sizeof def);
        row_values(d, val, sizeof val);
        for (char *c = val; *c; c++) /* a '|' would end the markdown cell */
            if (*c == '|')
                *c = '/';
        row_flag(d, f, sizeof f);
        row_py(d, py, sizeof py);
        printf("| `%s` | `%s` | %s | %s | %s | %s%s%s | %s%s%s | %s%s |\n", d->name, d->field,
               row_ctype(d), def, val, (d->layers & CH_OPT_CLI) ? "`" : "",
               (d->layers & CH_OPT_CLI) ? f : "-", (d->layers & CH_OPT_CLI) ? "`" : "",
               (d->layers & CH_OPT_PY) ? "`" : "", (d->layers & CH_OPT_PY) ? py : "-",
               (d->layers & CH_OPT_PY) ? "`" : "", ch_opt_help(d->help, hb, sizeof hb),
               d->from_loader ? " (the loader's row)" : "");
    }
}

/* --rows: every row of both tables, tab-separated:
 * table name field kind default values cli-flag python-name
 * (cli-flag and python-name "-" where not exposed). */
static void rows_tsv(const char *table, const ch_opt_row *d, int nd)
{
    for (int i = 0; i < nd; i++, d++) {
        char def[64], val[96], f[64], py[64];
        row_default(d, def, sizeof def);
        row_values(d, val, sizeof val);
        row_flag(d, f, sizeof f);
        row_py(d, py, sizeof py);
        printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", table, d->name, d->field, row_ctype(d), def,
               val, (d->layers & CH_OPT_CLI) ? f : "-", (d->layers & CH_OPT_PY) ? py : "-");
    }
}

int main(int argc, char **argv)
{
    const ch_loader_opt *t = ch_loader_opts();
    int tsv = argc > 1 && strcmp(argv[1], "--tsv") == 0;
    int rows = argc > 1 && strcmp(argv[1], "--rows") == 0;
    if (argc > 1 && !tsv && !rows) {
        fprintf(stderr, "usage: gen_options_md [--tsv | --rows]\n");
        return 2;
    }
    if (rows) {
        for (int i = 0; i < CH_LOPT_COUNT; i++) {
            char f[64];
            flag(f, sizeof f, t[i].name);
            printf("loader\t%s\t%s\t%s\t%llu\t%llu..%llu\t%s\t%s\n", t[i].name,
                   t[i].field, ch_opt_kind_name(t[i].kind), (unsigned long long)t[i].def,
                   (unsigned long long)t[i].min, (unsigned long long)t[i].max,
                   (t[i].layers & CH_OPT_CLI) ? f : "-", (t[i].layers & CH_OPT_PY) ? t[i].name : "-");
        }
        rows_tsv("loader", ch_loader_xopts(), ch_loader_xopt_count());
        rows_tsv("dataset", ch_dataset_opts(), ch_dataset_opt_count());
        rows_tsv("infer", ch_infer_opts(), ch_infer_opt_count());
        for (int i = 0; i < CH_RENV_COUNT; i++) /* no C field, no flag: the environment */
            printf("remote\t%s\t-\tu64\t%llu\t%llu..%llu\t-\t-\n", ch_remote_opts()[i].env,
                   (unsigned long long)ch_remote_opts()[i].def,
                   (unsigned long long)ch_remote_opts()[i].floor,
                   (unsigned long long)ch_remote_opts()[i].max);
        return 0;
    }
    if (tsv) {
        /* name kind default min max cli python auto */
        for (int i = 0; i < CH_LOPT_COUNT; i++)
            printf("%s\t%s\t%llu\t%llu\t%llu\t%d\t%d\t%d\n", t[i].name,
                   ch_opt_kind_name(t[i].kind), (unsigned long long)t[i].def,
                   (unsigned long long)t[i].min, (unsigned long long)t[i].max,
                   !!(t[i].layers & CH_OPT_CLI), !!(t[i].layers & CH_OPT_PY),
                   !!(t[i].layers & CH_OPT_AUTO));
        return 0;
    }
    printf("# Loader options\n\n"
           "<!-- Generated by scripts/gen_options_md.c from src/common/loader_options.def,\n"
           "     dataset_options.def and infer_options.def;\n"
           "     do not edit: run build/tests/gen_options_md > docs/OPTIONS.md -->\n\n"
           "One table gives every numeric loader option its default and bounds, for the C\n"
           "library (`chute_loader_options`, where a zero field means the default), the CLI\n"
           "(`chute bench` and `chute doctor`) and Python (`chute.Loader`).  A value outside\n"
           "its bounds is refused with a message naming the option in all three.\n\n"
           "| option | C type | default | min | max | CLI | Python | meaning |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < CH_LOPT_COUNT; i++) {
        const ch_loader_opt *d = &t[i];
        char f[64], def[32];
        flag(f, sizeof f, d->name);
        if (d->layers & CH_OPT_AUTO)
            snprintf(def, sizeof def, "computed");
        else if (d->kind == CH_OPT_BOOL)
            snprintf(def, sizeof def, "%s", d->def ? "true" : "false");
        else
            snprintf(def, sizeof def, "%llu", (unsigned long long)d->def);
        const char *ctype = d->kind == CH_OPT_U32 ? "uint32_t" : d->kind == CH_OPT_U64 ? "uint64_t"
                                                                                        : "int";
        printf("| `%s` | %s | %s | %llu | %llu | %s%s%s | %s | %s |\n", d->name, ctype, def,
               (unsigned long long)d->min, (unsigned long long)d->max,
               (d->layers & CH_OPT_CLI) ? "`" : "", (d->layers & CH_OPT_CLI) ? f : "-",
               (d->layers & CH_OPT_CLI) ? "`" : "", (d->layers & CH_OPT_PY) ? "yes" : "-",
               d->help);
    }
    printf("\nNotes:\n\n"
           "- \"computed\": zero asks the library to compute the value when the loader is\n"
           "  created (`workers`: `chute_default_workers()`; `resize_size`:\n"
           "  floor(size / crop_pct)).  In Python these default to `None`.\n"
           "- Python: `rank` and `world_size` default to `None`, which means torch.distributed,\n"
           "  then RANK/WORLD_SIZE, then SLURM_PROCID/SLURM_NTASKS, then the values above.\n"
           "  `scale_min_pct`/`scale_max_pct` are given as `scale=(min, max)` in fractions.\n"
           "  With `hold_policy=\"copy\"` (the default) `max_held` is at most one below its\n"
           "  maximum: one ring slot is kept spare for the copy.\n"
           "- One default everywhere: `drop_last` is false in C, the CLI and Python (as\n"
           "  torch's DataLoader), `max_held` is 2, and `chute doctor` uses the same batch\n"
           "  size as `chute bench`.\n"
           "- Python's own keywords (`hold_policy`, `as_torch`, ...): `help(chute.Loader)`.\n");
    printf("\n## Enum, float, flag and string options\n\n"
           "An enum's choices name its C values 0, 1, 2, ... in order; the first is the\n"
           "default (a zero field).  A float option left all zero takes its default; any\n"
           "other value must be finite and in the range shown.  A negated flag is the C\n"
           "field `no_X` (zero: X on), `--no-X` on the CLI and `X=True` (default) in\n"
           "Python.  Strings are borrowed for the create call; NULL is the default.\n"
           "A bad value is refused in C (CHUTE_EINVAL), the CLI (exit 2) and Python\n"
           "(ValueError) with a message naming the option.\n\n");
    rows_md(ch_loader_xopts(), ch_loader_xopt_count());
    printf("\nNotes:\n\n"
           "- `shuffle` is two rows: the flag (`no_shuffle`, Python `shuffle=False`) and\n"
           "  the mode (`shuffle`, Python `shuffle=\"shards\"`; `shuffle=True` is global).\n"
           "- Python's `dtype` also takes numpy/torch dtypes and the aliases `float`,\n"
           "  `f4`, `u1`, `half`, `f2`; `mean`/`std` default to `None` (the values above)\n"
           "  and are refused with `normalize=False`; `fields` is a sequence of names.\n"
           "- `crop_pct` (computed): 0.875 unless `resize_size` is given; not both.\n");
    printf("\n## Dataset options\n\n"
           "`chute_dataset_options` (`chute_dataset_open_ex`), the CLI's `chute bench`,\n"
           "`chute inspect` and `chute doctor`, and Python's `chute.Loader` (which opens\n"
           "the dataset).  From src/common/dataset_options.def.\n\n");
    rows_md(ch_dataset_opts(), ch_dataset_opt_count());
    printf("\n## Inference session options\n\n"
           "`chute_infer_options` (`chute_infer_create`), the CLI's `chute bench --latency`\n"
           "and Python's `chute.Infer`.  From src/common/infer_options.def.  A row marked\n"
           "\"the loader's row\" is the loader's option of the same field (its default,\n"
           "bounds and help above; resolved by the same code), not described again.  A\n"
           "zero field means the default; a value outside its bounds is refused with a\n"
           "message naming the option in C (CHUTE_EINVAL), the CLI (exit 2) and Python\n"
           "(`InvalidArgumentError`, from C; a value that does not fit the field, or a\n"
           "bad choice name: `ValueError`).\n\n");
    rows_md(ch_infer_opts(), ch_infer_opt_count());
    printf("\nNotes:\n\n"
           "- `transform`: the loader's choices without `train` (random crops have no\n"
           "  place at inference): the C value 0 (`CHUTE_TRANSFORM_TRAIN`) is taken as\n"
           "  `eval`.\n"
           "- `queue_capacity` (computed): max(4 x max_batch, 64).  Memory is fixed at\n"
           "  create: ceil(queue_capacity / max_batch) + 2 batch buffers.\n"
           "- `worker_slice_us`: 0 keeps the kernel's default slice (the CLI takes only\n"
           "  100..100000; leave the flag out for 0).\n"
           "- Python: every keyword also takes `None` for its default; `workers`,\n"
           "  `queue_capacity`, `resize_size`, `crop_pct`, `mean` and `std` default to\n"
           "  `None` (computed in C); enum names are matched in any case.\n");
    printf("\n## Remote settings\n\n"
           "The S3 and HTTP sources (docs/REMOTE.md) take these from the environment,\n"
           "read each time an object is opened, so a job sets them without code.  From\n"
           "src/common/remote_options.def.  A value that is not a decimal number, or is\n"
           "above the maximum, is ignored (the default applies); one below the minimum\n"
           "is raised to it.\n\n"
           "| variable | default | min | max | meaning |\n"
           "|---|---|---|---|---|\n");
    for (int i = 0; i < CH_RENV_COUNT; i++) {
        const ch_remote_opt *d = &ch_remote_opts()[i];
        printf("| `%s` | %llu | %llu | %llu | %s |\n", d->env, (unsigned long long)d->def,
               (unsigned long long)d->floor, (unsigned long long)d->max, d->help);
    }
    return 0;
}
