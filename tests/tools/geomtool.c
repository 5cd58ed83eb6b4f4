/*
 * geomtool.c — the geometric plan (src/ops/plan.h) from the command line,
 * for tests/test_geometry.py (internal API: not exported).
 *
 *   geomtool apply STEPS W H PREFIX NB NK FILL_R FILL_G FILL_B MFILL [FLIPMAP]
 *       build a plan from concrete steps, "," separated:
 *         crop:top:left:h:w  resize:h:w  short:size:max  hflip  vflip
 *         pad:l:t:r:b  affine:angle:tx:ty:scale:shx:shy  rotate:angle:expand
 *         letterbox:h:w  ccrop:h:w
 *       read PREFIX.img (H x W RGB8), PREFIX.mask (H x W), PREFIX.boxes
 *       (NB xyxy float32), PREFIX.kpts (NK x, y, v float32); cut the plan's
 *       window out of the image (only it is passed on, in a buffer of its
 *       own size); write PREFIX.out.{img,mask,boxes,kpts}, and the boxes
 *       SanitizeBoundingBoxes keeps (min_size 1) as PREFIX.out.sboxes and
 *       their indices as PREFIX.out.keep (uint32).  FLIPMAP: "1:0:2" (the
 *       keypoints are objects of that many points).  Prints
 *       "W H x0 y0 x1 y1" (canvas, window).
 *   geomtool parse SPEC          the geometry string's steps, or the error (exit 2)
 *   geomtool draw SPEC W H OH OW SEED EPOCH N
 *       draw N plans; one line per step: "sample kind i0 i1 i2 i3 angle tx
 *       ty scale shx shy expand out_w out_h"
 *   geomtool convert FROM TO x0 y0 x1 y1    box format conversion (0 xyxy,
 *       1 xywh, 2 cxcywh)
 */
#include "ops/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: geomtool apply STEPS W H PREFIX NB NK R G B MFILL [FLIPMAP] | "
                    "parse SPEC | draw SPEC W H OH OW SEED EPOCH N | convert FROM TO 4xVALUE\n");
    return 2;
}

static void *slurp(const char *prefix, const char *ext, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", prefix, ext);
    uint8_t *b = malloc(n ? n : 1);
    FILE *f = fopen(path, "rb");
    if (!b || !f || fread(b, 1, n, f) != n) {
        fprintf(stderr, "geomtool: cannot read %zu bytes from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return b;
}

static void spill(const char *prefix, const char *ext, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.out.%s", prefix, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "geomtool: cannot write %s\n", path);
        exit(1);
    }
}

static int build(ch_geo_plan *p, char *steps)
{
    for (char *tok = strtok(steps, ","); tok; tok = strtok(NULL, ",")) {
        double v[8] = {0};
        int n = 0;
        char *name = tok, *c = strchr(tok, ':');
        if (c) {
            *c++ = 0;
            for (char *a = strtok_r(c, ":", &c); a && n < 8; a = strtok_r(NULL, ":", &c))
                v[n++] = strtod(a, NULL);
        }
        int rc;
        if (!strcmp(name, "crop"))
            rc = ch_geo_crop(p, (int32_t)v[0], (int32_t)v[1], (int32_t)v[2], (int32_t)v[3]);
        else if (!strcmp(name, "resize"))
            rc = ch_geo_resize(p, (uint32_t)v[0], (uint32_t)v[1]);
        else if (!strcmp(name, "short"))
            rc = ch_geo_resize_short(p, (uint32_t)v[0], (uint32_t)v[1]);
        else if (!strcmp(name, "hflip"))
            rc = ch_geo_hflip(p);
        else if (!strcmp(name, "vflip"))
            rc = ch_geo_vflip(p);
        else if (!strcmp(name, "pad"))
            rc = ch_geo_pad(p, (int32_t)v[0], (int32_t)v[1], (int32_t)v[2], (int32_t)v[3]);
        else if (!strcmp(name, "affine"))
            rc = ch_geo_affine(p, v[0], v[1], v[2], v[3], v[4], v[5]);
        else if (!strcmp(name, "rotate"))
            rc = ch_geo_rotate(p, v[0], v[1] != 0);
        else if (!strcmp(name, "letterbox"))
            rc = ch_geo_letterbox(p, (uint32_t)v[0], (uint32_t)v[1]);
        else if (!strcmp(name, "ccrop"))
            rc = ch_geo_center_crop(p, (uint32_t)v[0], (uint32_t)v[1]);
        else {
            fprintf(stderr, "geomtool: unknown step %s\n", name);
            return 2;
        }
        if (rc != CHUTE_OK) {
            fprintf(stderr, "geomtool: step %s refused\n", name);
            return 1;
        }
    }
    return 0;
}

static int cmd_apply(int argc, char **argv)
{
    if (argc != 12 && argc != 13)
        return usage();
    uint32_t w = (uint32_t)atoi(argv[3]), h = (uint32_t)atoi(argv[4]);
    const char *pre = argv[5];
    size_t nb = strtoul(argv[6], NULL, 10), nk = strtoul(argv[7], NULL, 10);
    uint8_t fill[3] = {(uint8_t)atoi(argv[8]), (uint8_t)atoi(argv[9]), (uint8_t)atoi(argv[10])};
    uint8_t mfill = (uint8_t)atoi(argv[11]);
    uint32_t map[64], nmap = 0;
    if (argc == 13)
        for (char *c = argv[12], *a; (a = strtok_r(c, ":", &c)) && nmap < 64;)
            map[nmap++] = (uint32_t)atoi(a);
    ch_geo_plan p;
    ch_geo_init(&p, w, h);
    int rc = build(&p, argv[2]);
    if (rc)
        return rc;
    uint8_t *img = slurp(pre, "img", (size_t)w * h * 3);
    uint8_t *mask = slurp(pre, "mask", (size_t)w * h);
    float *boxes = slurp(pre, "boxes", nb * 16);
    float *kp = slurp(pre, "kpts", nk * 12);
    int32_t x0, y0, x1, y1;
    ch_geo_window(&p, &x0, &y0, &x1, &y1);
    /* only the window travels on, in a buffer exactly its size (ASan
     * sees a read outside it) */
    size_t ww = (size_t)(x1 - x0), wh = (size_t)(y1 - y0);
    uint8_t *win = malloc(ww * wh * 3 + 1);
    for (size_t y = 0; y < wh; y++)
        memcpy(win + y * ww * 3, img + ((y0 + y) * w + (size_t)x0) * 3, ww * 3);
    uint8_t *out = malloc((size_t)p.w * p.h * 3), *mout = malloc((size_t)p.w * p.h);
    ch_resize_scratch s = {0};
    ch_buf mscratch = {0};
    if (ch_geo_run_rgb8(&p, win, ww * 3, x0, y0, (uint32_t)ww, (uint32_t)wh, fill, out, &s) !=
            CHUTE_OK ||
        ch_geo_run_mask(&p, mask, mfill, mout, &mscratch) != CHUTE_OK) {
        fprintf(stderr, "geomtool: apply failed\n");
        return 1;
    }
    ch_geo_run_boxes(&p, boxes, nb);
    ch_geo_run_kpts(&p, kp, nk, nmap ? map : NULL, nmap);
    spill(pre, "img", out, (size_t)p.w * p.h * 3);
    spill(pre, "mask", mout, (size_t)p.w * p.h);
    spill(pre, "boxes", boxes, nb * 16);
    spill(pre, "kpts", kp, nk * 12);
    uint32_t *keep = malloc(nb * 4 + 4);
    size_t nkeep = ch_geo_sanitize(boxes, nb, p.w, p.h, 1, 1, keep);
    spill(pre, "sboxes", boxes, nkeep * 16);
    spill(pre, "keep", keep, nkeep * 4);
    printf("%u %u %d %d %d %d\n", p.w, p.h, x0, y0, x1, y1);
    free(img), free(mask), free(boxes), free(kp), free(win), free(out), free(mout), free(keep);
    ch_buf_free(&s.coef), ch_buf_free(&s.tmp), ch_buf_free(&s.aug_px), ch_buf_free(&s.aug_tmp);
    ch_buf_free(&mscratch);
    return 0;
}

static const char *const KIND[] = {"crop", "resize", "hflip", "vflip", "pad", "affine"};

static int cmd_parse(int argc, char **argv)
{
    if (argc != 3)
        return usage();
    ch_geo_spec sp;
    chute_error err = {0};
    if (ch_geo_parse(argv[2], &sp, &err) != CHUTE_OK) {
        printf("error: %s\n", err.message);
        return 2;
    }
    for (uint32_t k = 0; k < sp.n; k++) {
        printf("%d", (int)sp.step[k].op);
        for (int i = 0; i < 7; i++)
            printf(" %g", sp.step[k].p[i]);
        printf("\n");
    }
    return 0;
}

static int cmd_draw(int argc, char **argv)
{
    if (argc != 10)
        return usage();
    ch_geo_spec sp;
    chute_error err = {0};
    if (ch_geo_parse(argv[2], &sp, &err) != CHUTE_OK) {
        printf("error: %s\n", err.message);
        return 2;
    }
    uint32_t w = (uint32_t)atoi(argv[3]), h = (uint32_t)atoi(argv[4]);
    uint32_t oh = (uint32_t)atoi(argv[5]), ow = (uint32_t)atoi(argv[6]);
    uint64_t seed = strtoull(argv[7], NULL, 10), epoch = strtoull(argv[8], NULL, 10);
    uint64_t n = strtoull(argv[9], NULL, 10);
    for (uint64_t s = 0; s < n; s++) {
        ch_rng r = ch_geo_rng(seed, epoch, s);
        ch_geo_plan p;
        if (ch_geo_draw(&sp, w, h, oh, ow, &r, &p) != CHUTE_OK) {
            printf("error: sample %llu\n", (unsigned long long)s);
            return 1;
        }
        for (uint32_t k = 0; k < p.n; k++) {
            const ch_geo_step *st = &p.step[k];
            printf("%llu %s %d %d %d %d %.17g %.17g %.17g %.17g %.17g %.17g %d %u %u\n",
                   (unsigned long long)s, KIND[st->kind], st->i[0], st->i[1], st->i[2], st->i[3],
                   st->angle, st->tx, st->ty, st->scale, st->shx, st->shy, st->expand, st->out_w,
                   st->out_h);
        }
    }
    return 0;
}

static int cmd_convert(int argc, char **argv)
{
    if (argc != 8)
        return usage();
    float b[4];
    for (int i = 0; i < 4; i++)
        b[i] = strtof(argv[4 + i], NULL);
    ch_box_convert(b, 1, (ch_box_fmt)atoi(argv[2]), (ch_box_fmt)atoi(argv[3]));
    printf("%.9g %.9g %.9g %.9g\n", b[0], b[1], b[2], b[3]);
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
    if (!strcmp(argv[1], "convert"))
        return cmd_convert(argc, argv);
    return usage();
}
