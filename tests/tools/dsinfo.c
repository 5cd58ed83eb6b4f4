/*
 * dsinfo.c — test helper: open a dataset through the public API and list
 * it, optionally writing every sample's encoded bytes.
 *
 * usage: dsinfo SOURCE [--kind auto|tree|shards] [--format NAME] [--label-offset N]
 *               [--image-key K] [--label-key K] [--bytes OUT] [--probe]
 *
 * stdout:
 *   n=N classes=K kind=FORMAT            (chute_dataset_format_name)
 *   class LABEL NAME                      (K lines)
 *   sample INDEX LABEL SIZE DESCRIBE      (N lines)
 * --bytes OUT writes, per sample: u64 length, then the bytes that
 * chute_dataset_read returned (length 0 and no bytes if it failed).
 * --probe runs chute_probe_image on each sample too.
 * A failed read/probe prints "dsinfo: read I: STATUS: message" on stderr
 * and the exit status is 1; all samples are still visited.  An open
 * failure prints "dsinfo: STATUS: message" and exits 1.
 */
#include "chute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: dsinfo SOURCE [--kind auto|tree|shards] [--bytes OUT] [--probe]\n");
        return 2;
    }
    chute_source_kind kind = CHUTE_SOURCE_AUTO;
    const char *bytes_path = NULL;
    int probe = 0;
    chute_dataset_options o = {0};
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
            const char *v = argv[++i];
            kind = !strcmp(v, "tree")     ? CHUTE_SOURCE_TREE
                   : !strcmp(v, "shards") ? CHUTE_SOURCE_SHARDS
                                          : CHUTE_SOURCE_AUTO;
        } else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            o.format = argv[++i];
        } else if (!strcmp(argv[i], "--label-offset") && i + 1 < argc) {
            o.label_offset = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--image-key") && i + 1 < argc) {
            o.image_key = argv[++i];
        } else if (!strcmp(argv[i], "--label-key") && i + 1 < argc) {
            o.label_key = argv[++i];
        } else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) {
            bytes_path = argv[++i];
        } else if (!strcmp(argv[i], "--probe")) {
            probe = 1;
        } else {
            fprintf(stderr, "dsinfo: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    chute_error err = {0};
    chute_dataset *ds = NULL;
    o.kind = kind;
    int rc = chute_dataset_open_ex(argv[1], &o, &ds, &err);
    if (rc != CHUTE_OK) {
        fprintf(stderr, "dsinfo: %s: %s\n", chute_status_name(rc), err.message);
        return 1;
    }
    uint64_t n = chute_dataset_size(ds);
    uint32_t k = chute_dataset_num_classes(ds);
    printf("n=%llu classes=%u kind=%s\n", (unsigned long long)n, k,
           chute_dataset_format_name(ds));
    for (uint32_t c = 0; c < k; c++)
        printf("class %u %s\n", c, chute_dataset_class_name(ds, c));
    FILE *out = NULL;
    if (bytes_path && !(out = fopen(bytes_path, "wb"))) {
        perror(bytes_path);
        chute_dataset_close(ds);
        return 1;
    }
    int failed = 0;
    size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap);
    for (uint64_t i = 0; i < n && buf; i++) {
        char where[1024];
        uint64_t size = chute_dataset_sample_size(ds, i);
        printf("sample %llu %lld %llu %s\n", (unsigned long long)i,
               (long long)chute_dataset_label(ds, i), (unsigned long long)size,
               chute_dataset_describe(ds, i, where, sizeof where));
        if (!out && !probe)
            continue;
        if (size > cap) {
            unsigned char *b2 = realloc(buf, size);
            if (!b2) {
                fprintf(stderr, "dsinfo: out of memory\n");
                failed = 1;
                break;
            }
            buf = b2;
            cap = size;
        }
        size_t len = 0;
        chute_error e = {0};
        rc = chute_dataset_read(ds, i, buf, cap, &len, &e);
        if (rc != CHUTE_OK) {
            fprintf(stderr, "dsinfo: read %llu: %s: %s\n", (unsigned long long)i,
                    chute_status_name(rc), e.message);
            failed = 1;
            len = 0;
        } else if (probe) {
            uint32_t w = 0, h = 0, ch = 0;
            rc = chute_probe_image(buf, len, 0, &w, &h, &ch, &e);
            if (rc != CHUTE_OK) {
                fprintf(stderr, "dsinfo: probe %llu: %s: %s\n", (unsigned long long)i,
                        chute_status_name(rc), e.message);
                failed = 1;
            } else {
                printf("image %llu %ux%u %u\n", (unsigned long long)i, w, h, ch);
            }
        }
        if (out) {
            uint64_t l64 = len;
            fwrite(&l64, 8, 1, out);
            if (len)
                fwrite(buf, 1, len, out);
        }
    }
    free(buf);
    if (out && fclose(out) != 0)
        failed = 1;
    chute_dataset_close(ds);
    return failed ? 1 : 0;
}
