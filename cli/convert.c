/*
 * convert.c — `chute convert SRC DST --format chute|tfrecord|wds`: the CLI
 * face of chute_convert (any dataset chute reads, into any format it
 * writes), with a progress bar on a terminal and pack's one-line summary.
 * `chute pack ROOT OUT --format tfrecord|wds` comes here too
 * (cli_convert_run), so both commands report alike.
 */
#include "cli.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct conv_ui {
    cli_progress bar;       /* first: cli_progress_cb's user */
    const char *cmd;
} conv_ui;

static int on_wait(const char *out_dir, const char *holder, double waited_s, void *user)
{
    conv_ui *ui = user;
    if (waited_s < 1.0)
        fprintf(stderr, "chute %s: %s is being written by another process (%s); waiting for it "
                        "(--no-wait to fail instead)\n",
                ui->cmd, out_dir, holder[0] ? holder : "holder unknown");
    return 0;
}

int cli_convert_run(const char *cmd, const char *src, const char *dst, chute_convert_options *o)
{
    conv_ui ui = {{isatty(2), -1, "samples"}, cmd};
    o->progress = cli_progress_cb;
    o->on_skip = cli_progress_skip;
    o->on_wait = on_wait;
    o->user = &ui;
    chute_convert_result r = {0};
    chute_error err = {0};
    int rc = chute_convert(src, dst, o, &r, &err);
    if (ui.bar.tty)
        fprintf(stderr, "\n");
    if (rc != CHUTE_OK) {
        fprintf(stderr, "chute %s: %s\n", cmd, err.message);
        return 1;
    }
    printf("%s %llu samples (%.1f MB) of %u classes into %u %s files in %s in %.2f s; "
           "skipped %llu damaged samples\n",
           strcmp(cmd, "pack") == 0 ? "packed" : "converted", (unsigned long long)r.samples,
           r.bytes / 1e6, r.classes, r.files, r.format, dst, r.seconds,
           (unsigned long long)r.skipped);
    return 0;
}

/* --label-offset: a signed 32-bit integer. */
static int parse_offset(const char *s, int32_t *out)
{
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < -1000000000L || v > 1000000000L) {
        fprintf(stderr, "chute convert: --label-offset '%s' is not an integer in +-1e9\n", s);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

int cmd_convert(int argc, char **argv)
{
    chute_convert_options o = {0};
    chute_dataset_options so = {0};
    const char *label_offset = NULL, *src_label_offset = NULL;
    int strict = 0, validate = 0, no_wait = 0;
    const cli_opt opts[] = {
        {"--format", CLI_STR, &o.format, NULL, 0, 0,
         cli_writer_help("output format: {writers} (default chute)")},
        {"--shard-size", CLI_SIZE, &o.shard_size, NULL, 1 << 16, 1ull << 40,
         "target bytes per output file (default 256M)"},
        {"--label-offset", CLI_STR, &label_offset, NULL, 0, 0,
         "added to labels written to tfrecord/wds (default 0: chute's 0-based labels; "
         "1 writes imagenet_to_gcs.py's 1-based ones)"},
        {"--prefix", CLI_STR, &o.prefix, NULL, 0, 0,
         "TFRecord file names PREFIX-00000-of-0000N (default train)"},
        {"--key-prefix", CLI_STR, &o.key_prefix, NULL, 0, 0,
         "wds: put before every sample key (letters, digits, _ and -; default none)"},
        {"--align", CLI_U32, &o.align, NULL, 64, 1 << 20,
         "chute shards' record alignment in bytes (default 4096)"},
        {"--validate", CLI_FLAG, &validate, NULL, 0, 0,
         "decode every image; skip (or with --strict fail on) undecodable ones"},
        {"--strict", CLI_FLAG, &strict, NULL, 0, 0, "fail on the first damaged sample"},
        {"--no-wait", CLI_FLAG, &no_wait, NULL, 0, 0,
         "fail at once if another process is writing into DST (default: wait)"},
        {"--force", CLI_FLAG, &o.force, NULL, 0, 0,
         "DST s3://bucket/prefix/: replace a dataset already there (default: refuse)"},
        {"--source-format", CLI_STR, &so.format, NULL, 0, 0, cli_format_help()},
        {"--source-label-offset", CLI_STR, &src_label_offset, NULL, 0, 0,
         "added to labels read from SRC's files (-1 for imagenet_to_gcs.py's TFRecords)"},
        {"--image-key", CLI_STR, &so.image_key, NULL, 0, 0,
         "SRC TFRecord image feature (default image/encoded)"},
        {"--label-key", CLI_STR, &so.label_key, NULL, 0, 0,
         "SRC TFRecord label feature (default image/class/label)"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    const char *pos[2];
    int np = 0;
    int rc = cli_parse("convert", "SRC DST [options]", opts, argc, argv, pos, 2, &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 2) {
        fprintf(stderr, "chute convert: need SRC and DST (see --help)\n");
        return 2;
    }
    if (parse_offset(label_offset, &o.label_offset) || parse_offset(src_label_offset, &so.label_offset))
        return 2;
    o.strict = strict;
    o.validate = validate;
    o.no_wait = no_wait;
    o.source = &so;
    return cli_convert_run("convert", pos[0], pos[1], &o);
}
