/*
 * test_targets.c — the target parsers and record (src/parse/) on inputs
 * whose expected values are computed by hand here: YOLO boxes in pixels,
 * hostile lines and RLE strings named, the record's every truncation and
 * a foreign major version refused, an over-sized annotation file refused
 * before it is read.  pycocotools agreement is tests/test_targets.py.
 */
#include "parse/targets.h"
#include "unit.h"

#include <fcntl.h>
#include <math.h>

/* "class cx cy w h" on a 200 x 100 image: x0 = 200 * (cx - w/2) etc. */
TEST(yolo_boxes_hand_computed)
{
    const char *t = "0 0.5 0.5 0.25 0.5\n"
                    "\n"
                    "# a comment line\n"
                    "7 0.1 0.2 0.1 0.2\r\n"
                    "3 0.25 0.25 0.75 0.25 0.5 0.75\n"; /* a segment: its extent */
    ch_tg_builder b = {0};
    chute_error err = {0};
    CHECK(ch_yolo_parse(t, strlen(t), 200, 100, 8, "a.txt", &b, NULL, &err) == CHUTE_OK, "%s",
          err.message);
    const uint8_t *rec;
    size_t len;
    ch_tg_view v;
    CHECK(ch_tg_finish(&b, &rec, &len) == CHUTE_OK, "finish");
    CHECK(ch_tg_decode(rec, len, "a.txt", &v, &err) == CHUTE_OK, "%s", err.message);
    CHECK(v.n == 3 && v.width == 200 && v.height == 100, "n %u", v.n);
    const float want[3][4] = {{75, 25, 125, 75}, {10, 10, 30, 30}, {50, 25, 150, 75}};
    const int32_t labels[3] = {0, 7, 3};
    const int64_t lines[3] = {1, 4, 5};
    for (uint32_t i = 0; i < 3; i++) {
        float box[4];
        ch_tg_box(&v, i, box);
        for (int j = 0; j < 4; j++)
            CHECK(fabsf(box[j] - want[i][j]) < 1e-4f, "object %u coord %d: %g vs %g", i, j, box[j],
                  want[i][j]);
        CHECK(ch_tg_label(&v, i) == labels[i], "label %u", i);
        CHECK(ch_tg_ann_id(&v, i) == lines[i], "id %u", i);
    }
    size_t body;
    CHECK(ch_tg_seg(&v, 0, &body) == CH_SEG_NONE && ch_tg_seg(&v, 2, &body) == CH_SEG_POLY, "seg");
    /* the segment triangle (50,25) (150,25) (100,75), painted with
     * rleFrPoly's rules: row 25 is inside from x = 50 to 149 */
    uint8_t *plane = calloc(200 * 100, 1);
    CHECK(plane && ch_tg_mask(&v, 2, 100, 200, plane, &err) == CHUTE_OK, "%s", err.message);
    CHECK(plane[30 * 200 + 100] == 1 && plane[30 * 200 + 40] == 0 && plane[80 * 200 + 100] == 0,
          "triangle interior/exterior");
    free(plane);
    ch_tg_builder_free(&b);
    return 0;
}

TEST(yolo_bad_lines_named_or_counted)
{
    static const struct {
        const char *line, *says;
    } cases[] = {
        {"x 0.5 0.5 0.1 0.1", "class \"x\""},
        {"-1 0.5 0.5 0.1 0.1", "class \"-1\""},
        {"0 1.5 0.5 0.1 0.1", "outside 0..1"},
        {"0 nan 0.5 0.1 0.1", "not a finite number"},
        {"0 inf 0.5 0.1 0.1", "not a finite number"},
        {"0 0.5 0.5 0 0.1", "must be positive"},
        {"0 0.5 0.5 -0.1 0.1", "outside 0..1"},
        {"0 0.1 0.1 0.2", "3 coordinates"},
        {"0 0.1 0.1 0.2 0.2 0.3", "5 coordinates"},
        {"0 0.1 0.1 0.2 0.2", "must be positive"}, /* a box w=0.2 h=0.2 is fine: see next */
        {"9 0.5 0.5 0.1 0.1", "not below the 8 classes"},
        {"0 0.5 0.5 0.1 0.1 0.2 0.2 0.3 0.3 0.4", "9 coordinates"},
    };
    ch_tg_builder b = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(cases[i].line, "0 0.1 0.1 0.2 0.2") == 0)
            continue; /* a valid box, listed to keep the table honest */
        char text[256];
        snprintf(text, sizeof text, "0 0.5 0.5 0.1 0.1\n%s\n1 0.5 0.5 0.2 0.2\n", cases[i].line);
        chute_error err = {0};
        int rc = ch_yolo_parse(text, strlen(text), 64, 48, 8, "dir/x.txt", &b, NULL, &err);
        CHECK(rc == CHUTE_ECORRUPT, "case %zu rc %d", i, rc);
        CHECK(strstr(err.message, "dir/x.txt:2: ") && strstr(err.message, cases[i].says),
              "case %zu: %s", i, err.message);
        ch_tg_policy pol = {.skip = 1};
        rc = ch_yolo_parse(text, strlen(text), 64, 48, 8, "dir/x.txt", &b, &pol, &err);
        CHECK(rc == CHUTE_OK && pol.skipped == 1 && b.n == 2, "case %zu skip: rc %d n %u", i, rc,
              b.n);
        CHECK(strstr(pol.first_skip, "dir/x.txt:2: "), "%s", pol.first_skip);
    }
    /* a NUL inside the text is a bad line, never a C-string cut */
    chute_error err = {0};
    const char nul[] = "0 0.5 0.5 0.1 0.1\n0 0.5\0 0.5 0.1 0.1\n";
    CHECK(ch_yolo_parse(nul, sizeof nul - 1, 64, 48, 0, "n.txt", &b, NULL, &err) == CHUTE_ECORRUPT &&
              strstr(err.message, "n.txt:2: NUL"),
          "%s", err.message);
    ch_tg_builder_free(&b);
    return 0;
}

TEST(rle_string_hostile_refused)
{
    ch_u32v c = {0};
    char why[160];
    /* counts [5, 2, 29, 1] (a 37 x 1 mask): pycocotools.mask.encode gives
     * b"52m0O".  By hand: '5' = 5, '2' = 2; 'm' = 61 = 29 | 0x20 (more)
     * then '0' = 0: 29 (no delta before the 4th count); 'O' = 31: sign bit
     * 0x10 set, 31 - 32 = -1, plus counts[1] = 2: 1. */
    CHECK(ch_rle_from_string("52m0O", 5, &c, why, sizeof why) == CHUTE_OK, "%s", why);
    CHECK(c.n == 4 && c.v[0] == 5 && c.v[1] == 2 && c.v[2] == 29 && c.v[3] == 1, "%u %u %u %u",
          c.v[0], c.v[1], c.v[2], c.v[3]);
    CHECK(ch_rle_check(c.v, c.n, 37, 1, why, sizeof why) == CHUTE_OK, "%s", why);
    CHECK(ch_rle_check(c.v, c.n, 38, 1, why, sizeof why) == CHUTE_ECORRUPT && strstr(why, "cover 37"),
          "%s", why);
    CHECK(ch_rle_check(c.v, c.n, 6, 6, why, sizeof why) == CHUTE_ECORRUPT && strstr(why, "run past"),
          "%s", why);
    /* the third count negative: 'O' alone is -1 with no delta to lift it */
    CHECK(ch_rle_from_string("52O", 3, &c, why, sizeof why) == CHUTE_ECORRUPT && strstr(why, "outside 0"),
          "%s", why);
    CHECK(ch_rle_from_string("5~", 2, &c, why, sizeof why) == CHUTE_ECORRUPT && strstr(why, "outside"),
          "%s", why);
    CHECK(ch_rle_from_string("5o", 2, &c, why, sizeof why) == CHUTE_ECORRUPT && strstr(why, "ends inside"),
          "%s", why);
    CHECK(ch_rle_from_string("oooooooo0", 9, &c, why, sizeof why) == CHUTE_ECORRUPT &&
              strstr(why, "longer than 7"),
          "%s", why);
    /* a delta that makes the 4th count negative: 5, 2, 29, then -3 + 2 */
    CHECK(ch_rle_from_string("52m0M", 5, &c, why, sizeof why) == CHUTE_ECORRUPT &&
              strstr(why, "-1 is outside 0"),
          "%s", why);
    /* polygons under 3 points, NaN, coordinates too far */
    double two[4] = {1, 1, 5, 5}, nanp[6] = {1, 1, NAN, 5, 3, 3}, far[6] = {0, 0, 9e7, 0, 0, 9e7};
    CHECK(ch_rle_from_poly(two, 2, 10, 10, &c, why, sizeof why) == CHUTE_ECORRUPT, "two points");
    CHECK(ch_rle_from_poly(nanp, 3, 10, 10, &c, why, sizeof why) == CHUTE_ECORRUPT, "NaN");
    CHECK(ch_rle_from_poly(far, 3, 10, 10, &c, why, sizeof why) == CHUTE_ECORRUPT &&
              strstr(why, "walk over"),
          "%s", why);
    ch_u32v_free(&c);
    return 0;
}

static int build_sample(ch_tg_builder *b, const uint8_t **rec, size_t *len)
{
    const float kp[6] = {1, 2, 2, 3, 4, 1};
    const uint32_t plen[2] = {6, 8};
    const double xy[14] = {1, 1, 6, 1, 3, 5, 0, 0, 2, 0, 2, 2, 0, 2};
    const uint32_t rle[3] = {10, 20, 18};
    ch_tg_begin(b, 8, 6, 2);
    ch_tg_obj a = {.ann_id = 1ll << 40, .box = {1, 1, 6, 5}, .label = 3, .kp = kp,
                   .seg = CH_SEG_POLY, .npoly = 2, .poly_len = plen, .poly_xy = xy};
    ch_tg_obj c = {.ann_id = -7, .box = {0, 0, 8, 6}, .label = 0, .iscrowd = 1, .seg = CH_SEG_RLE,
                   .rle_h = 6, .rle_w = 8, .rle = rle, .rle_m = 3};
    ch_tg_obj d = {.ann_id = 9, .box = {2, 2, 2, 3}, .label = 1};
    if (ch_tg_add(b, &a) || ch_tg_add(b, &c) || ch_tg_add(b, &d) ||
        ch_tg_set_mask_path(b, "annotations/x.png") || ch_tg_set_mask_image(b, "\x89PNG\r\n\x1a\n", 8))
        return 1;
    return ch_tg_finish(b, rec, len) != CHUTE_OK;
}

TEST(target_record_roundtrip_every_truncation_refused)
{
    ch_tg_builder b = {0};
    const uint8_t *rec;
    size_t len;
    CHECK(build_sample(&b, &rec, &len) == 0, "build");
    ch_tg_view v;
    chute_error err = {0};
    CHECK(ch_tg_decode(rec, len, "s.chute#3", &v, &err) == CHUTE_OK, "%s", err.message);
    CHECK(v.n == 3 && v.k == 2 && v.width == 8 && v.height == 6, "header");
    CHECK(ch_tg_ann_id(&v, 0) == (1ll << 40) && ch_tg_ann_id(&v, 1) == -7, "ids");
    CHECK(ch_tg_crowd(&v, 1) == 1 && ch_tg_crowd(&v, 0) == 0 && ch_tg_label(&v, 0) == 3, "crowd");
    float kp[6];
    ch_tg_keypoints(&v, 0, kp);
    CHECK(kp[0] == 1 && kp[5] == 1, "kp");
    ch_tg_keypoints(&v, 2, kp);
    CHECK(kp[0] == 0 && kp[5] == 0, "absent keypoints are zero");
    CHECK(v.mask_path_len == 17 && memcmp(v.mask_path, "annotations/x.png", 17) == 0, "mask path");
    CHECK(v.mask_image_len == 8 && memcmp(v.mask_image, "\x89PNG\r\n\x1a\n", 8) == 0, "mask image");
    /* RLE [10, 20, 18] on 6 x 8: column-major pixels 10..29 are ones:
     * column 1 rows 4 and 5, columns 2, 3 and 4 whole, nothing from 5 on */
    uint8_t plane[48] = {0};
    CHECK(ch_tg_mask(&v, 1, 6, 8, plane, &err) == CHUTE_OK, "%s", err.message);
    int ones = 0;
    for (int i = 0; i < 48; i++)
        ones += plane[i];
    CHECK(ones == 20 && plane[4 * 8 + 1] && plane[5 * 8 + 1] && !plane[3 * 8 + 1] && plane[0 * 8 + 4] &&
              plane[5 * 8 + 4] && !plane[0 * 8 + 5],
          "RLE paint (%d ones)", ones);
    CHECK(ch_tg_mask(&v, 1, 8, 6, plane, &err) == CHUTE_EFORMAT && strstr(err.message, "annotation -7"),
          "another size: %s", err.message);
    CHECK(ch_tg_mask(&v, 2, 6, 8, plane, &err) == CHUTE_ENOTFOUND, "no segmentation");
    /* every shorter length, and one byte more, is refused with the name */
    uint8_t *copy = malloc(len + 1);
    for (size_t n = 0; n < len; n++) {
        memcpy(copy, rec, n);
        CHECK(ch_tg_decode(copy, n, "s.chute#3", &v, &err) == CHUTE_ECORRUPT, "length %zu accepted", n);
        CHECK(strstr(err.message, "s.chute#3: target record byte"), "%s", err.message);
    }
    memcpy(copy, rec, len);
    copy[len] = 0;
    uint32_t l1 = (uint32_t)len + 1;
    memcpy(copy + 8, &l1, 4);
    CHECK(ch_tg_decode(copy, len + 1, "s", &v, &err) == CHUTE_ECORRUPT && strstr(err.message, "after the last"),
          "%s", err.message);
    /* a lying RLE count, a 2-point polygon, a NaN box: each refused */
    memcpy(copy, rec, len);
    size_t body;
    CHECK(ch_tg_decode(copy, len, "s", &v, &err) == CHUTE_OK, "copy");
    CHECK(ch_tg_seg(&v, 1, &body) == CH_SEG_RLE, "seg kind");
    uint32_t lie = 21;
    memcpy(copy + body + 12 + 4, &lie, 4);
    CHECK(ch_tg_decode(copy, len, "s", &v, &err) == CHUTE_ECORRUPT && strstr(err.message, "exactly h*w"),
          "%s", err.message);
    memcpy(copy, rec, len);
    CHECK(ch_tg_decode(copy, len, "s", &v, &err) == CHUTE_OK && ch_tg_seg(&v, 0, &body) == CH_SEG_POLY, "poly");
    uint32_t four = 4;
    memcpy(copy + body + 4, &four, 4);
    CHECK(ch_tg_decode(copy, len, "s", &v, &err) == CHUTE_ECORRUPT && strstr(err.message, "fewer than 3"),
          "%s", err.message);
    memcpy(copy, rec, len);
    float nanv = NAN;
    memcpy(copy + 32 + 3 * 8 + 4, &nanv, 4);
    CHECK(ch_tg_decode(copy, len, "s", &v, &err) == CHUTE_ECORRUPT && strstr(err.message, "not finite"),
          "%s", err.message);
    /* another major version is "unsupported", not "corrupt" */
    memcpy(copy, rec, len);
    copy[4] = 2;
    CHECK(ch_tg_decode(copy, len, "s", &v, &err) == CHUTE_EUNSUPPORTED && strstr(err.message, "version 2.0"),
          "%s", err.message);
    free(copy);
    ch_tg_builder_free(&b);
    return 0;
}

/* A 3 GiB annotation file (sparse: no disk used) is refused by size before
 * a byte is read: jansson would need ~25 GiB for it. */
TEST(coco_file_over_limit_refused_unread)
{
    char dir[4096], path[4200];
    unit_scratch("coco_limit", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/huge.json", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 3ll << 30) == 0, "sparse file");
    close(fd);
    ch_tg_policy pol = {0};
    ch_coco *c = NULL;
    chute_error err = {0};
    int rc = ch_coco_load(path, 0, &pol, &c, &err);
    if (rc == CHUTE_EUNSUPPORTED)
        SKIP("no libjansson in this build");
    CHECK(rc == CHUTE_ELIMIT && c == NULL, "rc %d", rc);
    CHECK(strstr(err.message, path) && strstr(err.message, "3221225472 bytes") &&
              strstr(err.message, "1073741824-byte limit"),
          "%s", err.message);
    unlink(path);
    return 0;
}

UNIT_MAIN
