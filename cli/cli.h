/*
 * cli.h — the `chute` command's shared pieces: one declarative option
 * table per subcommand drives parsing, validation and --help, so adding a
 * flag is one line.
 */
#ifndef CHUTE_CLI_H
#define CHUTE_CLI_H

#include "chute.h"

#include <stdint.h>
#include <stdio.h>

typedef enum cli_type {
    CLI_FLAG, CLI_U32, CLI_U64, CLI_SIZE, CLI_STR, CLI_CHOICE,
    CLI_I32, /* int32_t*; min/max hold int64_t bits */
    CLI_F32  /* float[min] (min = 1 or 3 comma-separated values) */
} cli_type;

/* --format's help line where a command takes it outside the dataset rows
 * (convert --source-format, bench --latency): the dataset table's `format`
 * row, the registry's names filled in.  cli_writer_help: a help line with
 * "{writers}" replaced by the writers' names.  Static storage (the CLI is
 * one thread; one call of each per option table); see ch_opt_help. */
const char *cli_format_help(void);
const char *cli_writer_help(const char *help);

struct ch_opt_row;
typedef struct cli_opt {
    const char *name;         /* "--batch-size" */
    cli_type type;
    void *dst;                /* int*, uint32_t*, uint64_t*, const char** or int* (choice index) */
    const char *choices;      /* CLI_CHOICE: "train|eval|none" */
    uint64_t min, max;        /* numeric bounds (inclusive) */
    const char *help;
    /* The option-table row the flag was made from (NULL for a command's own
     * flags): a float is checked against its bounds, a choice's index
     * becomes the row's C value. */
    const struct ch_opt_row *row;
    /* A loader row with CH_OPT_ZERO_OFF: 0 on the command line is stored
     * as the C spelling of off (all ones), since a zero field is the
     * default. */
    int zero_off;
} cli_opt;

/* The loader options of src/common/loader_options.def that the CLI exposes
 * (CH_OPT_CLI), as rows writing into *o: --batch-size, --workers, ...
 * with the table's bounds, and its help line ending in "(default N)".  The
 * rows' names and help lines are written into text (one per row).  Appends
 * at most cap rows to out and returns how many it wrote (all of them when
 * cap >= CLI_LOADER_OPTS_MAX). */
#define CLI_LOADER_OPTS_MAX 64
typedef struct cli_opt_text {
    char name[40];
    char help[400];
} cli_opt_text;
int cli_loader_opts(chute_loader_options *o, cli_opt *out, cli_opt_text *text, int cap);
/* The same for the dataset's options of src/common/dataset_options.def
 * (CH_OPT_CLI: --format, --label-offset, --image-key, ...): bench,
 * inspect and doctor, wherever a dataset is opened. */
#define CLI_DATASET_OPTS_MAX 32
int cli_dataset_opts(chute_dataset_options *o, cli_opt *out, cli_opt_text *text, int cap);
/* The same for the inference session's options of
 * src/common/infer_options.def (`chute bench --latency`): its own rows and
 * the loader's rows it shares, writing into *o. */
#define CLI_INFER_OPTS_MAX 32
int cli_infer_opts(chute_infer_options *o, cli_opt *out, cli_opt_text *text, int cap);

/* Parse argv against the table; positional arguments are collected into
 * pos (up to npos).  Prints a message and returns 2 on error, 1 if --help
 * was printed, 0 on success. */
int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int argc, char **argv,
              const char **pos, int npos, int *out_npos);

/* Parquet (cli/parquet.c): whether SOURCE is Parquet (a .parquet file, a
 * directory of them, or --format parquet/arrow), and the hand-off that
 * replaces the process with the Python package's chute.cli running cmd
 * over the same arguments; returns only on failure (exit status). */
int cli_is_parquet(const char *src, const char *format);
int cli_parquet_exec(const char *cmd, const char *src, int argc, char **argv);

int cmd_pack(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
/* inspect's targets summary (cli/inspect_targets.c): prints nothing for a
 * dataset without targets; in JSON a ",\"targets\":{...}" member.  Returns
 * 1 when a record was damaged. */
int insp_targets(const chute_dataset *ds, int json);
int cmd_iobench(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_top(int argc, char **argv);
/* chute_convert with the CLI's progress bar, skip lines and summary
 * (convert.c); `cmd` names the command in messages.  pack --format uses it
 * for the formats other than chute.  Returns the exit status. */
int cli_convert_run(const char *cmd, const char *src, const char *dst,
                    chute_convert_options *o);
/* `chute bench --latency` (cli/latency.c). */
int cmd_bench_latency(int argc, char **argv);

#endif
