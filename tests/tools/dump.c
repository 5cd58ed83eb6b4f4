/*
 * dump.c — test helper: run a loader over a dataset and write every
 * sample of one epoch to a file as raw bytes, in delivery order:
 *   per sample: u64 index, i64 label, then the sample's output bytes.
 *
 * usage: dump SOURCE OUT --transform train|eval|none --dtype uint8|float32|float16
 *             [--size N] [--batch-size N] [--workers N] [--seed S] [--epoch E]
 *             [--rank R --world W] [--drop-last] [--remainder-drop] [--no-shuffle]
 *             [--no-dct-scale] [--strict] [--start-batch B] [--layout nchw|nhwc]
 *             [--scale-pct MIN MAX] [--no-normalize] [--max-pixels N]
 *             [--crop-pct F] [--resize-size N] [--format NAME] [--augment SPEC]
 *             [--decoded-cache-bytes N] [--mixup A] [--cutmix A] [--mix-switch P]
 *             [--num-classes N] [--repeats K] [--soft FILE]
 * --soft FILE: the batches' soft labels (mixup/cutmix), float32 rows of
 * num_classes in delivery order.
 *             [--geometry SPEC] [--decoded-cache-bytes N]
 * Prints "samples=N batches=B corrupt=C" on success; exit 1 with the
 * library's message on failure.
 */
#include "chute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dump SOURCE OUT [options]\n");
        return 2;
    }
    chute_loader_options o = {0};
    chute_dataset_options dso = {0};
    uint64_t epoch = 0, start = 0;
    const char *soft_path = NULL;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--transform")) {
            o.transform = !strcmp(v, "train") ? CHUTE_TRANSFORM_TRAIN
                          : !strcmp(v, "eval") ? CHUTE_TRANSFORM_EVAL
                                               : CHUTE_TRANSFORM_NONE;
            i++;
        } else if (!strcmp(a, "--dtype")) {
            o.dtype = !strcmp(v, "uint8") ? CHUTE_DTYPE_UINT8
                      : !strcmp(v, "float16") ? CHUTE_DTYPE_FLOAT16
                                              : CHUTE_DTYPE_FLOAT32;
            i++;
        } else if (!strcmp(a, "--layout")) {
            o.layout = !strcmp(v, "nhwc") ? CHUTE_LAYOUT_NHWC : CHUTE_LAYOUT_NCHW;
            i++;
        } else if (!strcmp(a, "--size")) { o.size = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--batch-size")) { o.batch_size = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--workers")) { o.workers = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--seed")) { o.seed = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "--epoch")) { epoch = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "--start-batch")) { start = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "--rank")) { o.rank = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--world")) { o.world_size = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--drop-last")) o.drop_last = 1;
        else if (!strcmp(a, "--remainder-drop")) o.remainder = CHUTE_REMAINDER_DROP;
        else if (!strcmp(a, "--no-shuffle")) o.no_shuffle = 1;
        else if (!strcmp(a, "--no-dct-scale")) o.no_dct_scale = 1;
        else if (!strcmp(a, "--strict")) o.on_corrupt = CHUTE_CORRUPT_FAIL;
        else if (!strcmp(a, "--no-normalize")) o.no_normalize = 1;
        else if (!strcmp(a, "--format")) { dso.format = v; i++; }
        else if (!strcmp(a, "--augment")) { o.augment = v; i++; }
        else if (!strcmp(a, "--mixup")) { o.mixup = strtof(v, NULL); i++; }
        else if (!strcmp(a, "--cutmix")) { o.cutmix = strtof(v, NULL); i++; }
        else if (!strcmp(a, "--mix-switch")) { o.mix_switch = strtof(v, NULL); i++; }
        else if (!strcmp(a, "--num-classes")) { o.num_classes = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--repeats")) { o.repeats = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--soft")) { soft_path = v; i++; }
        else if (!strcmp(a, "--geometry")) { o.geometry = v; i++; }
        else if (!strcmp(a, "--decoded-cache-bytes")) { o.decoded_cache_bytes = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "--max-pixels")) { o.max_pixels = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "--crop-pct")) { o.crop_pct = strtof(v, NULL); i++; }
        else if (!strcmp(a, "--resize-size")) { o.resize_size = (uint32_t)atoi(v); i++; }
        else if (!strcmp(a, "--scale-pct") && i + 2 < argc) {
            o.scale_min_pct = (uint32_t)atoi(argv[i + 1]);
            o.scale_max_pct = (uint32_t)atoi(argv[i + 2]);
            i += 2;
        }
        else {
            fprintf(stderr, "dump: unknown option %s\n", a);
            return 2;
        }
    }
    chute_error err = {0};
    chute_dataset *ds = NULL;
    if (chute_dataset_open_ex(argv[1], &dso, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "dump: %s\n", err.message);
        return 1;
    }
    chute_loader *ld = NULL;
    if (chute_loader_create(ds, &o, &ld, &err) != CHUTE_OK) {
        fprintf(stderr, "dump: %s\n", err.message);
        chute_dataset_close(ds);
        return 1;
    }
    FILE *f = fopen(argv[2], "wb");
    FILE *sf = soft_path ? fopen(soft_path, "wb") : NULL;
    if (!f || (soft_path && !sf)) {
        perror(f ? soft_path : argv[2]);
        return 1;
    }
    chute_loader_start_epoch(ld, epoch, start);
    uint64_t samples = 0, batches = 0;
    int rc;
    chute_batch *b;
    while ((rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        size_t per = v.nbytes / v.count;
        for (uint32_t k = 0; k < v.count; k++) {
            fwrite(&v.indices[k], 8, 1, f);
            fwrite(&v.labels[k], 8, 1, f);
            fwrite((const char *)v.data + k * per, 1, per, f);
        }
        if (sf && (!v.soft_labels || fwrite(v.soft_labels, sizeof(float) * v.num_classes,
                                             v.count, sf) != v.count)) {
            fprintf(stderr, "dump: no soft labels to write\n");
            return 1;
        }
        samples += v.count;
        batches++;
        chute_batch_release(b);
    }
    fclose(f);
    if (sf)
        fclose(sf);
    chute_stats s;
    chute_loader_stats(ld, &s);
    if (rc != CHUTE_END) {
        fprintf(stderr, "dump: %s: %s\n", chute_status_name(rc), chute_loader_errmsg(ld));
        chute_loader_destroy(ld);
        chute_dataset_close(ds);
        return 1;
    }
    printf("samples=%llu batches=%llu corrupt=%llu\n", (unsigned long long)samples,
           (unsigned long long)batches, (unsigned long long)s.corrupt);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return 0;
}
