/*
 * augtool.c — the augmentation registry from the command line, for
 * tests/test_augment.py (chute_obj internals: the ops are not public API).
 *
 *   augtool apply OP W H IN OUT [ARG...]   apply OP with the given drawn
 *       args (what the op's draw would produce: aug/<op>.c) to W x H RGB8
 *       HWC bytes read from IN, write the result to OUT; output-stage ops
 *       run on a uint8 NHWC slot
 *   augtool parse SPEC                     parse an augment string: print
 *       each step and its parameters, or the error (exit 2)
 *   augtool draw SPEC W H SEED EPOCH N     draw N samples' args: one line
 *       per sample and step, "sample step on arg0 arg1 ..."
 *   augtool table wide|rand NBINS W H      the policies' magnitude tables:
 *       one line per op, "Name v0 v1 ..." or "Name none", then "signed 0|1"
 */
#include "ops/aug.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: augtool apply OP W H IN OUT [ARG...] | parse SPEC | "
                    "draw SPEC W H SEED EPOCH N | table wide|rand NBINS W H\n");
    return 2;
}

static int cmd_apply(int argc, char **argv)
{
    if (argc < 7)
        return usage();
    const ch_aug_op *op = ch_aug_find(argv[2], strlen(argv[2]));
    if (!op) {
        fprintf(stderr, "augtool: no op '%s'\n", argv[2]);
        return 2;
    }
    uint32_t w = (uint32_t)atoi(argv[3]), h = (uint32_t)atoi(argv[4]);
    size_t n = (size_t)w * h * 3;
    float args[CH_AUG_MAXARGS] = {0};
    for (int i = 7; i < argc && i - 7 < CH_AUG_MAXARGS; i++)
        args[i - 7] = strtof(argv[i], NULL);
    uint8_t *px = malloc(n ? n : 1);
    FILE *f = fopen(argv[5], "rb");
    if (!px || !f || fread(px, 1, n, f) != n) {
        fprintf(stderr, "augtool: cannot read %zu bytes from %s\n", n, argv[5]);
        return 1;
    }
    fclose(f);
    ch_buf scratch = {0};
    if (op->stage == CH_AUG_PIXELS) {
        if (op->apply(px, w, h, args, &scratch) != CHUTE_OK) {
            fprintf(stderr, "augtool: %s failed\n", op->name);
            return 1;
        }
    } else {
        if (w != h) {
            fprintf(stderr, "augtool: output-stage ops need a square image\n");
            return 2;
        }
        ch_out_spec o = {.size = w, .dtype = CHUTE_DTYPE_UINT8, .layout = CHUTE_LAYOUT_NHWC};
        op->apply_out(px, &o, args);
    }
    ch_buf_free(&scratch);
    f = fopen(argv[6], "wb");
    if (!f || fwrite(px, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "augtool: cannot write %s\n", argv[6]);
        return 1;
    }
    free(px);
    return 0;
}

static int cmd_parse(int argc, char **argv)
{
    if (argc != 3)
        return usage();
    ch_aug a;
    chute_error err = {0};
    if (ch_aug_parse(argv[2], &a, &err) != CHUTE_OK) {
        printf("error: %s\n", err.message);
        return 2;
    }
    for (uint32_t k = 0; k < a.n; k++) {
        printf("%s", a.step[k].op->name);
        for (int i = 0; i < a.step[k].op->nparams; i++)
            printf(" %s=%g", a.step[k].op->pname[i], a.step[k].p[i]);
        printf("\n");
    }
    return 0;
}

static int cmd_draw(int argc, char **argv)
{
    if (argc != 8)
        return usage();
    ch_aug a;
    chute_error err = {0};
    if (ch_aug_parse(argv[2], &a, &err) != CHUTE_OK) {
        printf("error: %s\n", err.message);
        return 2;
    }
    uint32_t w = (uint32_t)atoi(argv[3]), h = (uint32_t)atoi(argv[4]);
    uint64_t seed = strtoull(argv[5], NULL, 10), epoch = strtoull(argv[6], NULL, 10);
    uint64_t n = strtoull(argv[7], NULL, 10);
    for (uint64_t s = 0; s < n; s++) {
        ch_rng r = ch_aug_rng(seed, epoch, s);
        for (uint32_t k = 0; k < a.n; k++) {
            float args[CH_AUG_MAXARGS] = {0};
            ch_rng sr = ch_aug_step_rng(&r, k);
            int on = a.step[k].op->draw(a.step[k].p, w, h, &sr, args);
            printf("%llu %u %d", (unsigned long long)s, k, on);
            for (int i = 0; i < CH_AUG_MAXARGS; i++)
                printf(" %.9g", args[i]);
            printf("\n");
        }
    }
    return 0;
}

static int cmd_table(int argc, char **argv)
{
    if (argc != 6)
        return usage();
    const int space = !strcmp(argv[2], "wide") ? CH_AUG_SPACE_WIDE : CH_AUG_SPACE_RAND;
    const int nbins = atoi(argv[3]);
    const uint32_t w = (uint32_t)atoi(argv[4]), h = (uint32_t)atoi(argv[5]);
    for (int op = 0; op < CH_AUG_P_COUNT; op++) {
        int has, sgn;
        printf("%s", ch_aug_policy_names[op]);
        ch_aug_policy_magnitude(space, op, nbins, 0, w, h, &has, &sgn);
        if (!has)
            printf(" none");
        for (int i = 0; has && i < nbins; i++)
            printf(" %.9g", ch_aug_policy_magnitude(space, op, nbins, i, w, h, &has, &sgn));
        printf(" signed %d\n", sgn);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "apply"))
        return cmd_apply(argc, argv);
    if (!strcmp(argv[1], "parse"))
        return cmd_parse(argc, argv);
    if (!strcmp(argv[1], "draw"))
        return cmd_draw(argc, argv);
    if (!strcmp(argv[1], "table"))
        return cmd_table(argc, argv);
    return usage();
}
