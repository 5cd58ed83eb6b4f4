/*
 * pack.c — `chute pack ROOT OUT_DIR`: the CLI face of chute_pack, with a
 * progress bar on a terminal and a one-line summary otherwise.
 */
#include "cli.h"
#include "util.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

static int on_wait(const char *out_dir, const char *holder, double waited_s, void *user)
{
    (void)user;
    if (waited_s < 1.0) /* the first call; later ones only offer a chance to cancel */
        fprintf(stderr, "chute pack: %s is being packed by another process (%s); waiting for it "
                        "(--no-wait to fail instead)\n",
                out_dir, holder[0] ? holder : "holder unknown");
    return 0;
}

int cmd_pack(int argc, char **argv)
{
    chute_pack_options o = {0};
    int strict = 0, no_validate = 0, no_wait = 0;
    const char *format = NULL;
    int raw = 0;
    const cli_opt opts[] = {
        {"--shard-size", CLI_SIZE, &o.shard_size, NULL, 1 << 16, 1ull << 40,
         "target bytes per shard (default 256M)"},
        {"--threads", CLI_U32, &o.threads, NULL, 1, CHUTE_PACK_MAX_THREADS,
         "reading/checking threads (default: cores)"},
        {"--align", CLI_U32, &o.align, NULL, 64, 1 << 20, "record alignment in bytes (default 4096)"},
        {"--strict", CLI_FLAG, &strict, NULL, 0, 0,
         "fail on the first undecodable or over-limit file"},
        {"--no-validate", CLI_FLAG, &no_validate, NULL, 0, 0,
         "don't decode files while packing (only check their type and the size and pixel limits)"},
        {"--max-sample-bytes", CLI_SIZE, &o.max_sample_bytes, NULL, 1, 0xFFFFFFFFull,
         "skip files larger than this (default 64M, the loader's default limit)"},
        {"--max-pixels", CLI_U64, &o.max_pixels, NULL, 1, 1ull << 40,
         "skip images with more pixels (default 64Mi, the loader's default limit)"},
        {"--no-wait", CLI_FLAG, &no_wait, NULL, 0, 0,
         "fail at once if another process is packing into OUT_DIR (default: wait)"},
        {"--format", CLI_STR, &format, NULL, 0, 0,
         cli_writer_help("output format: {writers} (default chute; see chute convert)")},
        {"--max-side", CLI_U32, &o.max_side, NULL, 1, 65500,
         "resize images whose shorter side is over N to N (Lanczos) and store them as JPEG"},
        {"--quality", CLI_U32, &o.quality, NULL, 1, 100,
         "JPEG quality of --max-side's re-encoded images (default 90)"},
        {"--raw", CLI_FLAG, &raw, NULL, 0, 0,
         "store decoded RGB pixels (CHRAW records; after --max-side's resize if given)"},
        {"--force", CLI_FLAG, &o.force, NULL, 0, 0,
         "OUT_DIR s3://bucket/prefix/: replace a dataset already there (default: refuse)"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    const char *pos[2];
    int np = 0;
    int rc = cli_parse("pack", "ROOT OUT_DIR [options]", opts, argc, argv, pos, 2, &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 2) {
        fprintf(stderr, "chute pack: need ROOT and OUT_DIR (see --help)\n");
        return 2;
    }
    if (format && strcmp(format, "chute") != 0 && (o.max_side || o.quality || raw)) {
        fprintf(stderr, "chute pack: --max-side, --quality and --raw are for --format chute "
                        "only\n");
        return 2;
    }
    if (format && strcmp(format, "chute") != 0) {
        /* Other formats go through chute_convert from the tree, every
         * image decode-checked as pack does (unless --no-validate). */
        chute_dataset_options so = {0};
        so.format = "tree";
        chute_convert_options co = {0};
        co.format = format;
        co.shard_size = o.shard_size;
        co.validate = !no_validate;
        co.strict = strict;
        co.no_wait = no_wait;
        co.force = o.force;
        co.source = &so;
        return cli_convert_run("pack", pos[0], pos[1], &co);
    }
    cli_progress ui = {isatty(2), -1, "files"};
    o.strict = strict;
    o.no_validate = no_validate;
    o.raw = raw;
    o.progress = cli_progress_cb;
    o.on_skip = cli_progress_skip;
    o.no_wait = no_wait;
    o.on_wait = on_wait;
    o.user = &ui;
    chute_pack_result r = {0};
    chute_error err = {0};
    rc = chute_pack(pos[0], pos[1], &o, &r, &err);
    if (ui.tty)
        fprintf(stderr, "\n");
    if (rc != CHUTE_OK) {
        fprintf(stderr, "chute pack: %s\n", err.message);
        return 1;
    }
    if (r.already_packed) {
        printf("already packed: %s holds %llu files (%.1f MB) of %u classes in %u shards, "
               "packed from %s by another process while this one waited; it left out %llu "
               "undecodable files and %llu over the loader's limits\n",
               pos[1], (unsigned long long)r.files, r.bytes / 1e6, r.classes, r.shards, pos[0],
               (unsigned long long)(r.skipped - r.skipped_over_limit),
               (unsigned long long)r.skipped_over_limit);
        return 0;
    }
    printf("packed %llu files (%.1f MB) of %u classes into %u shards in %s in %.2f s; "
           "skipped %llu undecodable files and %llu over the loader's limits",
           (unsigned long long)r.files, r.bytes / 1e6, r.classes, r.shards, pos[1], r.seconds,
           (unsigned long long)(r.skipped - r.skipped_over_limit),
           (unsigned long long)r.skipped_over_limit);
    if (r.reads_retried)
        printf("; %llu files read only on a retry", (unsigned long long)r.reads_retried);
    printf("\n");
    return 0;
}
