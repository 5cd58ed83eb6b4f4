/* doctor.h — what `chute doctor` measured, shared with its report writer. */
#ifndef CHUTE_CLI_DOCTOR_H
#define CHUTE_CLI_DOCTOR_H

#include <stdint.h>
#include <stdio.h>

#include "chute.h"

#define DOCTOR_MAX_SERIES 4096
#define DOCTOR_MAX_ADVICE 8
#define DOCTOR_MAX_WARNINGS 4

typedef struct doctor_point {
    double t, ips, wait;
    int gpu_util;             /* -1: no GPU info */
} doctor_point;

typedef struct doctor_result {
    char source[1024];
    char transform[16];
    char format[32];          /* chute_dataset_format_name */
    uint64_t samples;
    uint32_t cores, workers, read_delay_us;
    /* stage 1 */
    double storage_ips, storage_mbs, storage_warm_ips;
    uint64_t storage_samples, storage_errors; /* reads tried; of them failed */
    char storage_first_error[512];            /* the first failure, naming the sample */
    char storage_method[256];
    /* Cold or warm (local files): the share of the pages of the files of
     * up to 2,000 samples in the page cache when doctor started (mincore;
     * -1: not local or not measured), over resident_files files; and stage
     * 1 again with the read-ahead's reads in flight (ra_depth, 0: the
     * read-ahead is off): the cold ceiling a run with it gets. */
    double resident_frac;
    uint32_t resident_files, ra_depth;
    double storage_ra_ips, storage_ra_mbs;
    /* the storage ceiling the verdict uses: the larger of the two (a run
     * with the read-ahead reads cold at storage_ra_ips) */
    double storage_ceiling_ips;
    /* stages 2-3: seconds per image on one core */
    double read_cpu_s, decode_s, transform_s;
    double mean_bytes, mean_decoded_px;
    /* derived ceilings, images/s with `workers` cores */
    double decode_ips, transform_ips, cpu_ips;
    /* stage 4 */
    double pipeline_ips, pipeline_wait, read_p50_ms, read_p99_ms;
    double pipeline_fill_avg;  /* ready batches found per next() */
    uint32_t queue_capacity;
    /* corrupt samples skipped (policy SKIP) by the one-worker run (stages
     * 2-3) and the full pipeline (stage 4), over the samples each delivered */
    uint64_t cpu_corrupt, cpu_samples, pipeline_corrupt, pipeline_samples;
    char skip_example[512];   /* the loader's message for one skipped sample */
    double deliverable_ips;
    double gpu_rate;
    int gpus_fed;
    char gpu_name[96];
    double gpu_idle_frac;     /* -1 without NVML */
    char bottleneck[16];
    char verdict[512];
    char advice[DOCTOR_MAX_ADVICE][512];
    int nadvice;
    /* errors and skips of every stage, in words; the verdict names them */
    char warnings[DOCTOR_MAX_WARNINGS][640];
    int nwarnings;
    doctor_point series[DOCTOR_MAX_SERIES];
    int nseries;
    /* host-to-device copy rate on cuda:0 (cli/h2d.c); 0: not measured */
    double h2d_pinned_gbs, h2d_pageable_gbs;
    /* the source the bytes come from, as a stage: its name ("local", or a
     * remote one: "s3", "http"), 1 when remote, 1 when it is the bottleneck */
    char source_kind[16];
    int source_remote, source_bottleneck;
    /* the block cache tier as a stage (dataset options cache_dir /
     * cache_ram_bytes): on or not, the full pipeline stage's lookups
     * (chute_stats tier_* over stage 4 alone), their hit rate (-1: none),
     * 1 when it is the bottleneck (storage is, and stage 4 still went to
     * the origin for more than 10% of its blocks) */
    int cache_on, cache_bottleneck;
    double cache_hit_rate;
    chute_stats cache_st;
} doctor_result;

/* H2D copy rate of `bytes` from pinned and from pageable memory on
 * cuda:0, GB/s, through the CUDA module; -1 and why when it cannot. */
int cli_h2d_measure(size_t bytes, double *out_pinned, double *out_pageable, char *why,
                    size_t why_len);

void doctor_print_json(FILE *f, const doctor_result *r);
/* The text and HTML "bottleneck" line: the consumer when a --gpu-rate is
 * given and the input keeps up, else the slowest input stage. */
const char *doctor_headline(const doctor_result *r, char *buf, size_t n);
/* 0 if --report PATH may be written: new, or an existing regular file
 * (else prints why and returns -1).  Checked before measuring. */
int doctor_report_path_ok(const char *path);
int doctor_write_report(const char *path, const doctor_result *r);
int cmd_doctor(int argc, char **argv);

#endif
