/* doctor.h — what `chute doctor` measured, shared with its report writer. */
#ifndef CHUTE_CLI_DOCTOR_H
#define CHUTE_CLI_DOCTOR_H

#include <stdint.h>
#include <stdio.h>

#define DOCTOR_MAX_SERIES 4096
#define DOCTOR_MAX_ADVICE 8

typedef struct doctor_point {
    double t, ips, wait;
    int gpu_util;             /* -1: no GPU info */
} doctor_point;

typedef struct doctor_result {
    char source[1024];
    char transform[16];
    int is_shards;
    uint64_t samples;
    uint32_t cores, workers, read_delay_us;
    /* stage 1 */
    double storage_ips, storage_mbs, storage_warm_ips;
    uint64_t storage_samples, storage_errors;
    char storage_method[256];
    /* stages 2-3: seconds per image on one core */
    double read_cpu_s, decode_s, transform_s;
    double mean_bytes, mean_decoded_px;
    /* derived ceilings, images/s with `workers` cores */
    double decode_ips, transform_ips, cpu_ips;
    /* stage 4 */
    double pipeline_ips, pipeline_wait, read_p50_ms, read_p99_ms;
    double deliverable_ips;
    double gpu_rate;
    int gpus_fed;
    char gpu_name[96];
    double gpu_idle_frac;     /* -1 without NVML */
    char bottleneck[16];
    char verdict[512];
    char advice[DOCTOR_MAX_ADVICE][512];
    int nadvice;
    doctor_point series[DOCTOR_MAX_SERIES];
    int nseries;
} doctor_result;

void doctor_print_json(FILE *f, const doctor_result *r);
int doctor_write_report(const char *path, const doctor_result *r);
int cmd_doctor(int argc, char **argv);

#endif
