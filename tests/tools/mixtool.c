/*
 * mixtool.c — MixUp / CutMix (src/ops/mix.c) from the command line, for
 * tests/test_mix.py (chute_obj internals: not public API).
 *
 *   mixtool draw MIXUP CUTMIX SWITCH SIZE SEED N
 *       N batch draws (keys 0..N-1 of epoch 0) for SIZE x SIZE images:
 *       one line each, "kind lam x1 y1 x2 y2 lam_adj" (kind 1 MixUp,
 *       2 CutMix; lam and lam_adj printed exactly, %.17g)
 *   mixtool apply KIND LAM X1 Y1 X2 Y2 DTYPE LAYOUT SIZE N CLASSES IN LABELS OUT SOFT
 *       mix the N-sample batch in IN (DTYPE float32|float16|uint8, LAYOUT
 *       nchw|nhwc) with the given lambda (and CutMix box), labels from
 *       LABELS (N int64), write the batch to OUT and the N x CLASSES
 *       float32 soft labels to SOFT; exit 3 naming a label out of range
 */
#include "ops/mix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: mixtool draw MIXUP CUTMIX SWITCH SIZE SEED N | apply KIND LAM X1 Y1 "
                    "X2 Y2 DTYPE LAYOUT SIZE N CLASSES IN LABELS OUT SOFT\n");
    return 2;
}

static int read_file(const char *path, void *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    int ok = f && fread(buf, 1, n, f) == n;
    if (f)
        fclose(f);
    if (!ok)
        fprintf(stderr, "mixtool: cannot read %zu bytes from %s\n", n, path);
    return ok ? 0 : -1;
}

static int write_file(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "mixtool: cannot write %s\n", path);
    return ok ? 0 : -1;
}

static int cmd_draw(int argc, char **argv)
{
    if (argc != 8)
        return usage();
    ch_mix m = {strtof(argv[2], NULL), strtof(argv[3], NULL), strtof(argv[4], NULL), 1};
    uint32_t size = (uint32_t)strtoul(argv[5], NULL, 10);
    uint64_t seed = strtoull(argv[6], NULL, 10), n = strtoull(argv[7], NULL, 10);
    for (uint64_t k = 0; k < n; k++) {
        ch_mix_draw d;
        ch_mix_draw_batch(&m, seed, 0, k, size, size, &d);
        printf("%d %.17g %u %u %u %u %.17g\n", d.kind, (double)d.lam, d.x1, d.y1, d.x2, d.y2,
               d.lam_adj);
    }
    return 0;
}

static int cmd_apply(int argc, char **argv)
{
    if (argc != 17)
        return usage();
    ch_mix_draw d = {0};
    d.kind = strcmp(argv[2], "cutmix") == 0 ? CH_MIX_CUTMIX : CH_MIX_MIXUP;
    d.lam = strtof(argv[3], NULL);
    d.x1 = (uint32_t)atoi(argv[4]);
    d.y1 = (uint32_t)atoi(argv[5]);
    d.x2 = (uint32_t)atoi(argv[6]);
    d.y2 = (uint32_t)atoi(argv[7]);
    ch_out_spec o = {0};
    o.dtype = !strcmp(argv[8], "float16") ? CHUTE_DTYPE_FLOAT16
              : !strcmp(argv[8], "uint8") ? CHUTE_DTYPE_UINT8 : CHUTE_DTYPE_FLOAT32;
    o.layout = !strcmp(argv[9], "nhwc") ? CHUTE_LAYOUT_NHWC : CHUTE_LAYOUT_NCHW;
    o.size = (uint32_t)atoi(argv[10]);
    uint32_t n = (uint32_t)atoi(argv[11]), classes = (uint32_t)atoi(argv[12]);
    /* torchvision's CutMix: lambda corrected to the box's area */
    d.lam_adj = d.kind == CH_MIX_CUTMIX
                    ? 1.0 - (double)((d.x2 - d.x1) * (d.y2 - d.y1)) / ((double)o.size * o.size)
                    : (double)d.lam;
    size_t esz = o.dtype == CHUTE_DTYPE_FLOAT32 ? 4 : o.dtype == CHUTE_DTYPE_FLOAT16 ? 2 : 1;
    size_t sample = (size_t)o.size * o.size * 3 * esz, bytes = sample * n;
    uint8_t *px = malloc(bytes ? bytes : 1), *scratch = malloc(sample ? sample : 1);
    int64_t *labels = malloc(n * sizeof *labels + 1);
    float *soft = malloc((size_t)n * classes * sizeof *soft + 1);
    if (!px || !scratch || !labels || !soft)
        return 1;
    if (read_file(argv[13], px, bytes) || read_file(argv[14], labels, n * sizeof *labels))
        return 1;
    int64_t bad = ch_mix_apply(&d, &o, px, n, labels, classes, soft, scratch);
    if (bad >= 0) {
        fprintf(stderr, "mixtool: label %lld of sample %lld is outside 0..%u\n",
                (long long)labels[bad], (long long)bad, classes - 1);
        return 3;
    }
    if (write_file(argv[15], px, bytes) || write_file(argv[16], soft, (size_t)n * classes * 4))
        return 1;
    free(px);
    free(scratch);
    free(labels);
    free(soft);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "draw"))
        return cmd_draw(argc, argv);
    if (!strcmp(argv[1], "apply"))
        return cmd_apply(argc, argv);
    return usage();
}
