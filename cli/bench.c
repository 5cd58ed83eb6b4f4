/*
 * bench.c — `chute bench SOURCE`: run the pipeline, consume and discard
 * batches, report throughput and how long the consumer waited.
 */
#include "cli.h"
#include "util.h"
#include "common/loader_options.h"
#include "pipeline/readahead.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *busiest(const chute_stats *s)
{
    uint64_t r = s->read.busy_ns, d = s->decode.busy_ns, t = s->transform.busy_ns;
    return r >= d && r >= t ? "read" : d >= t ? "decode" : "transform";
}

int cmd_bench(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) /* the inference mode has its own options (latency.c) */
        if (strcmp(argv[i], "--latency") == 0)
            return cmd_bench_latency(argc, argv);
    chute_loader_options o = {0};
    int json = 0, quiet = 0, latency_mode = 0;
    chute_dataset_options dopt = {0};
    uint32_t epochs = 1, step_ms = 0;
    uint64_t max_batches = 0;
    uint64_t parquet_mem = 0; /* passed on to chute.cli with argv (cli/parquet.c) */
    /* The loader's and the dataset's rows come from the option table
     * (src/common/loader_options.def, dataset_options.def); these are
     * bench's own. */
    const cli_opt own[] = {
        {"--epochs", CLI_U32, &epochs, NULL, 1, 1000000, "epochs to run (default 1)"},
        {"--max-batches", CLI_U64, &max_batches, NULL, 0, UINT64_MAX,
         "stop after this many batches in total (default: no limit)"},
        {"--step-ms", CLI_U32, &step_ms, NULL, 0, 3600000,
         "simulate a training step: the consumer spends this long on each batch"},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "print one JSON object"},
        {"--latency", CLI_FLAG, &latency_mode, NULL, 0, 0,
         "inference-latency mode, its own options: chute bench --latency --help"},
        {"--quiet", CLI_FLAG, &quiet, NULL, 0, 0, "no live progress line"},
        {"--parquet-memory-bytes", CLI_U64, &parquet_mem, NULL, 1, UINT64_MAX,
         "Parquet sources (read by the Python package, cli/parquet.c): decoded row groups "
         "held at once (default 1 GiB)"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    cli_opt opts[CLI_LOADER_OPTS_MAX + CLI_DATASET_OPTS_MAX + sizeof own / sizeof own[0]];
    cli_opt_text text[CLI_LOADER_OPTS_MAX + CLI_DATASET_OPTS_MAX];
    int nl = cli_loader_opts(&o, opts, text, CLI_LOADER_OPTS_MAX);
    nl += cli_dataset_opts(&dopt, opts + nl, text + nl, CLI_DATASET_OPTS_MAX);
    memcpy(opts + nl, own, sizeof own);
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("bench", "SOURCE [options]", opts, argc, argv, pos, 1, &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 1) {
        fprintf(stderr, "chute bench: need SOURCE, an image tree or a shard directory (see --help)\n");
        return 2;
    }
    if (cli_is_parquet(pos[0], dopt.format)) /* cli/parquet.c: the Python package reads it */
        return cli_parquet_exec("bench", pos[0], argc, argv);
    int transform = (int)o.transform; /* checked by the parser: 0..2 */
    /* The library picks the same count for workers = 0; say why. */
    char workers_why[256] = "--workers";
    if (!o.workers)
        chute_default_workers(workers_why, sizeof workers_why);

    chute_error err = {0};
    chute_dataset *ds = NULL;
    double t_open = cli_now_s();
    rc = chute_dataset_open_ex(pos[0], &dopt, &ds, &err);
    if (rc != CHUTE_OK) {
        fprintf(stderr, "chute bench: %s\n", err.message);
        return 1;
    }
    t_open = cli_now_s() - t_open;
    cli_note_skipped("chute bench", ds);
    chute_loader *ld = NULL;
    rc = chute_loader_create(ds, &o, &ld, &err);
    if (rc != CHUTE_OK) {
        fprintf(stderr, "chute bench: %s\n", err.message);
        chute_dataset_close(ds);
        return 1;
    }
    int live = !json && !quiet && isatty(2);
    cli_gpu *gpu = cli_gpu_open();
    uint64_t gpu_samples = 0, gpu_idle = 0;
    double last_gpu = 0;
    uint64_t images = 0, batches = 0;
    double cpu0 = cli_cpu_s(), t0 = cli_now_s(), last = t0;
    chute_stats s0;
    chute_loader_stats(ld, &s0);
    int failed = 0;
    for (uint32_t e = 0; e < epochs && !failed; e++) {
        chute_loader_start_epoch(ld, e, 0);
        for (;;) {
            if (max_batches && batches >= max_batches)
                break;
            chute_batch *b = NULL;
            rc = chute_loader_next(ld, &b);
            if (rc == CHUTE_END)
                break;
            if (rc != CHUTE_OK) {
                fprintf(stderr, "%schute bench: %s: %s\n", live ? "\r\033[K" : "",
                        chute_status_name(rc), chute_loader_errmsg(ld));
                failed = 1;
                break;
            }
            chute_batch_view v;
            chute_batch_view_get(b, &v);
            images += v.count;
            batches++;
            if (step_ms)
                cli_sleep_s(step_ms / 1000.0);
            chute_batch_release(b);
            double t = cli_now_s();
            if (gpu && t - last_gpu >= 0.1) {
                int u = cli_gpu_util(gpu);
                if (u >= 0) {
                    gpu_samples++;
                    gpu_idle += u < 5;
                }
                last_gpu = t;
            }
            if (live && t - last >= 0.25) {
                chute_stats s;
                chute_loader_stats(ld, &s);
                double el = t - t0;
                fprintf(stderr,
                        "\repoch %u  %llu images  %.0f img/s  %.1f MB/s  wait %.0f%%  busiest: %s   ",
                        e, (unsigned long long)images, images / el,
                        (s.read.bytes - s0.read.bytes) / 1e6 / el,
                        100.0 * (s.wait_ns - s0.wait_ns) / 1e9 / el, busiest(&s));
                fflush(stderr);
                last = t;
            }
        }
        if (max_batches && batches >= max_batches)
            break;
    }
    double secs = cli_now_s() - t0, cpu = cli_cpu_s() - cpu0;
    if (live)
        fprintf(stderr, "\r\033[K");
    chute_stats s;
    chute_loader_stats(ld, &s);
    double ips = secs > 0 ? images / secs : 0;
    double mbs = secs > 0 ? (s.read.bytes - s0.read.bytes) / 1e6 / secs : 0;
    double wait = (s.wait_ns - s0.wait_ns) / 1e9;
    const char *kind = chute_dataset_format_name(ds);
    static const char *tnames[] = {"train", "eval", "none"};
    if (json) {
        printf("{\"system\":\"chute\",\"source\":");
        cli_json_str(stdout, pos[0]); /* the path; its kind is "format" */
        printf(",\"format\":\"%s\",\"transform\":\"%s\",\"images\":%llu,"
               "\"batches\":%llu,\"seconds\":%.4f,\"images_per_sec\":%.2f,\"mb_per_sec\":%.2f,"
               "\"workers\":%u,\"workers_reason\":",
               kind, tnames[transform], (unsigned long long)images, (unsigned long long)batches,
               secs, ips, mbs, s.workers);
        cli_json_str(stdout, workers_why); /* names files: escaped */
        /* The read-ahead's engine and the most reads it had in flight
         * (bench/coldcache.sh reports them). */
        ch_ra_stats ras;
        ch_loader_ra_stats(ld, &ras);
        printf(",\"readahead_engine\":\"%s\",\"readahead_inflight_max\":%llu,"
               "\"readahead_direct_reads\":%llu",
               !ras.depth ? "off"
               : !ras.async ? "threads"
               : (strncmp(pos[0], "s3://", 5) == 0 || strncmp(pos[0], "http://", 7) == 0 ||
                  strncmp(pos[0], "https://", 8) == 0)
                   ? "curl_multi" /* the S3/HTTP source's async engine */
                   : "io_uring",
               (unsigned long long)ras.inflight_max, (unsigned long long)ras.direct_reads);
        printf(",\"batch_size\":%u,\"wait_seconds\":%.4f,\"wait_fraction\":%.4f,"
               "\"cpu_seconds\":%.3f,\"cpu_seconds_per_1k\":%.4f,\"corrupt\":%llu,"
               "\"dct_scaled\":%llu,\"read_busy_s\":%.3f,\"decode_busy_s\":%.3f,"
               "\"transform_busy_s\":%.3f,\"open_seconds\":%.4f,\"read_lat_p50_us\":%.1f,"
               "\"read_lat_p90_us\":%.1f,\"read_lat_p99_us\":%.1f,\"queue_fill_avg\":%.3f,"
               "\"queue_capacity\":%u,\"samples_delivered\":%llu,\"wall_seconds\":%.4f,"
               "\"gpu_idle_fraction\":%.3f,\"failed\":%s",
               o.batch_size ? o.batch_size : (uint32_t)ch_loader_opts()[CH_LOPT_batch_size].def, wait,
               secs > 0 ? wait / secs : 0, cpu, images ? cpu / images * 1000 : 0,
               (unsigned long long)s.corrupt, (unsigned long long)s.dct_scaled,
               s.read.busy_ns / 1e9, s.decode.busy_ns / 1e9, s.transform.busy_ns / 1e9, t_open,
               s.read_lat_p50_ns / 1e3, s.read_lat_p90_ns / 1e3, s.read_lat_p99_ns / 1e3,
               s.batches ? (double)s.queue_fill_sum / s.batches : 0.0, s.queue_capacity,
               (unsigned long long)s.samples, s.wall_ns / 1e9,
               gpu_samples ? (double)gpu_idle / gpu_samples : -1.0, failed ? "true" : "false");
        /* The block cache tier (cache_dir / cache_ram_bytes), counted over
         * the whole run: null without one. */
        printf(",\"cache\":");
        if (dopt.cache_dir || dopt.cache_ram_bytes)
            cli_tier_json(stdout, &s);
        else
            printf("null");
        printf("}\n");
    } else {
        printf("%s (%s, %s): %llu images in %.2f s = %.1f images/s, %.1f MB/s, %u workers (%s)\n",
               pos[0], kind, tnames[transform], (unsigned long long)images, secs, ips, mbs,
               s.workers, workers_why);
        printf("  consumer waited %.2f s (%.1f%%); cpu %.2f s (%.3f s per 1000 images); "
               "busy: read %.2f s, decode %.2f s, transform %.2f s; corrupt %llu\n",
               wait, secs > 0 ? 100 * wait / secs : 0, cpu, images ? cpu / images * 1000 : 0,
               s.read.busy_ns / 1e9, s.decode.busy_ns / 1e9, s.transform.busy_ns / 1e9,
               (unsigned long long)s.corrupt);
        printf("  reads: p50 %.0f us, p99 %.0f us; ready batches found per next(): %.2f of %u\n",
               s.read_lat_p50_ns / 1e3, s.read_lat_p99_ns / 1e3,
               s.batches ? (double)s.queue_fill_sum / s.batches : 0.0, s.queue_capacity);
        /* Without a step the loop asks for the next batch the moment it has
         * one, so it always waits and finds the queue empty: those two
         * figures then say the input ran flat out, not that it is slow. */
        if (!step_ms)
            printf("  note: no training step (--step-ms 0), so the consumer always waits and "
                   "finds few batches ready; this measures the input alone. Next: --step-ms "
                   "YOUR_STEP_MS to see whether it keeps up with your model, or chute doctor "
                   "%s --gpu-rate IMAGES_PER_S for the bottleneck\n",
                   pos[0]);
        if (dopt.cache_dir || dopt.cache_ram_bytes) {
            printf("  cache tier: ");
            cli_tier_text(stdout, &s);
            printf("\n");
        }
        if (gpu_samples)
            printf("  GPU %s idle in %.0f%% of %llu samples\n", cli_gpu_name(gpu),
                   100.0 * gpu_idle / gpu_samples, (unsigned long long)gpu_samples);
    }
    cli_gpu_close(gpu);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return failed ? 1 : 0;
}
