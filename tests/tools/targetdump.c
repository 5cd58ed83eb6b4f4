/*
 * targetdump.c — print the targets chute reads from an annotation file, one
 * JSON object per line, for tests/test_targets.py to compare with what
 * pycocotools reads from the same file (tests/fixtures/targets/golden.json).
 *
 *   targetdump coco FILE.json [skip]
 *   targetdump records FILE.json DIR   (each image's record as DIR/N.chtg:
 *                                       the fuzz corpus seeds)
 *   targetdump shards DIR              (a packed directory, through the
 *                                       public API: chute_dataset_targets,
 *                                       chute_targets_mask)
 *
 * Every object goes the whole way a packed sample's does: COCO JSON ->
 * ch_coco_record -> record bytes -> ch_tg_decode -> getters, and its mask
 * is painted from the decoded record (ch_tg_mask) at the image's size.
 * Boxes print as %.17g of the float32 (exact); masks as row-major
 * np.packbits hex.  The first line lists the categories; a skip run ends
 * with a "skipped" line.
 */
#include "parse/targets.h"

#include <chute.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_str(const char *s)
{
    putchar('"');
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    putchar('"');
}

static const char *g_records; /* records mode: where to write them */

static int dump_coco(const char *path, int skip)
{
    chute_error err = {0};
    ch_tg_policy pol = {.skip = skip};
    ch_coco *c;
    if (ch_coco_load(path, 0, &pol, &c, &err) != CHUTE_OK) {
        fprintf(stderr, "targetdump: %s\n", err.message);
        return 1;
    }
    printf("{\"categories\": [");
    for (uint32_t l = 0; l < ch_coco_ncategories(c); l++) {
        printf(l ? ", " : "");
        put_str(ch_coco_category_name(c, l));
    }
    printf("], \"keypoints\": %u}\n", ch_coco_keypoints(c));
    ch_tg_builder b = {0};
    int rc = 0;
    for (size_t i = 0; i < ch_coco_nimages(c) && !rc; i++) {
        const ch_coco_image *im = ch_coco_image_at(c, i);
        const uint8_t *rec;
        size_t len;
        ch_tg_view v;
        if (ch_coco_record(c, i, &b, &err) != CHUTE_OK || ch_tg_finish(&b, &rec, &len) != CHUTE_OK ||
            ch_tg_decode(rec, len, im->file_name, &v, &err) != CHUTE_OK) {
            fprintf(stderr, "targetdump: %s\n", err.message);
            rc = 1;
            break;
        }
        if (g_records) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%zu.chtg", g_records, i);
            FILE *f = fopen(p, "wb");
            if (!f || fwrite(rec, 1, len, f) != len || fclose(f) != 0) {
                fprintf(stderr, "targetdump: cannot write %s\n", p);
                rc = 1;
            }
            continue;
        }
        size_t plane_n = (size_t)v.width * v.height;
        uint8_t *plane = malloc(plane_n ? plane_n : 1);
        float *kp = malloc(sizeof(float) * (v.k ? v.k * 3 : 1));
        for (uint32_t o = 0; o < v.n && plane && kp; o++) {
            float box[4];
            ch_tg_box(&v, o, box);
            printf("{\"image_id\": %lld, \"file_name\": ", (long long)im->id);
            put_str(im->file_name);
            printf(", \"width\": %u, \"height\": %u, \"id\": %lld, \"label\": %d, \"iscrowd\": %u, "
                   "\"box\": [%.17g, %.17g, %.17g, %.17g]",
                   v.width, v.height, (long long)ch_tg_ann_id(&v, o), ch_tg_label(&v, o),
                   ch_tg_crowd(&v, o), box[0], box[1], box[2], box[3]);
            if (v.k) {
                ch_tg_keypoints(&v, o, kp);
                printf(", \"keypoints\": [");
                for (uint32_t t = 0; t < v.k * 3; t++)
                    printf("%s%.17g", t ? ", " : "", kp[t]);
                printf("]");
            }
            size_t body;
            if (ch_tg_seg(&v, o, &body) != CH_SEG_NONE) {
                memset(plane, 0, plane_n);
                if (ch_tg_mask(&v, o, v.height, v.width, plane, &err) != CHUTE_OK) {
                    printf("}\n");
                    fprintf(stderr, "targetdump: %s\n", err.message);
                    rc = 1;
                    break;
                }
                uint64_t sum = 0;
                printf(", \"mask_shape\": [%u, %u], \"mask_bits\": \"", v.height, v.width);
                for (size_t p = 0; p < plane_n; p += 8) {
                    unsigned byte = 0;
                    for (size_t q = 0; q < 8; q++) {
                        unsigned bit = p + q < plane_n ? plane[p + q] : 0;
                        byte |= bit << (7 - q);
                        sum += bit;
                    }
                    printf("%02x", byte);
                }
                printf("\", \"mask_sum\": %llu", (unsigned long long)sum);
            }
            printf("}\n");
        }
        free(plane);
        free(kp);
    }
    if (skip)
        printf("{\"skipped\": %llu, \"first\": ", (unsigned long long)pol.skipped), put_str(pol.first_skip),
            printf("}\n");
    ch_tg_builder_free(&b);
    ch_coco_free(c);
    return rc;
}

/* A packed shard directory, through the public API only. */
static int dump_shards(const char *dir)
{
    chute_dataset *ds;
    chute_error err = {0};
    if (chute_dataset_open(dir, CHUTE_SOURCE_SHARDS, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "targetdump: %s\n", err.message);
        return 1;
    }
    printf("{\"categories\": [");
    for (uint32_t l = 0; l < chute_dataset_num_classes(ds); l++) {
        printf(l ? ", " : "");
        put_str(chute_dataset_class_name(ds, l));
    }
    printf("]}\n");
    int rc = 0;
    for (uint64_t i = 0; i < chute_dataset_size(ds) && !rc; i++) {
        chute_targets *t;
        char where[4096];
        if (chute_dataset_targets(ds, i, &t, &err) != CHUTE_OK) {
            fprintf(stderr, "targetdump: %s\n", err.message);
            rc = 1;
            break;
        }
        chute_dataset_describe(ds, i, where, sizeof where);
        size_t plane_n = (size_t)t->width * t->height;
        uint8_t *plane = malloc(plane_n ? plane_n : 1);
        for (uint32_t o = 0; o < t->count && plane; o++) {
            const float *box = t->boxes + (size_t)o * 4;
            printf("{\"sample\": %llu, \"where\": ", (unsigned long long)i);
            put_str(where);
            printf(", \"width\": %u, \"height\": %u, \"id\": %lld, \"label\": %d, "
                   "\"iscrowd\": %u, \"box\": [%.17g, %.17g, %.17g, %.17g]",
                   t->width, t->height, (long long)t->ann_ids[o], t->labels[o], t->iscrowd[o],
                   box[0], box[1], box[2], box[3]);
            if (t->keypoints) {
                printf(", \"keypoints\": [");
                for (uint32_t k = 0; k < t->keypoints * 3; k++)
                    printf("%s%.17g", k ? ", " : "", t->keypoints_xyv[(size_t)o * t->keypoints * 3 + k]);
                printf("]");
            }
            if (t->has_mask[o]) {
                if (chute_targets_mask(t, o, plane, plane_n, &err) != CHUTE_OK) {
                    printf("}\n");
                    fprintf(stderr, "targetdump: %s\n", err.message);
                    rc = 1;
                    break;
                }
                uint64_t sum = 0;
                printf(", \"mask_shape\": [%u, %u], \"mask_bits\": \"", t->height, t->width);
                for (size_t p = 0; p < plane_n; p += 8) {
                    unsigned byte = 0;
                    for (size_t q = 0; q < 8; q++) {
                        unsigned bit = p + q < plane_n ? plane[p + q] : 0;
                        byte |= bit << (7 - q);
                        sum += bit;
                    }
                    printf("%02x", byte);
                }
                printf("\", \"mask_sum\": %llu", (unsigned long long)sum);
            }
            printf("}\n");
        }
        if (t->mask_path) {
            printf("{\"sample\": %llu, \"mask_path\": ", (unsigned long long)i);
            put_str(t->mask_path);
            printf(", \"mask_image\": \"");
            for (size_t b = 0; b < t->mask_image_bytes; b++)
                printf("%02x", t->mask_image[b]);
            printf("\"}\n");
        }
        free(plane);
        chute_targets_free(t);
    }
    chute_dataset_close(ds);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "shards") == 0)
        return dump_shards(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "coco") == 0)
        return dump_coco(argv[2], argc > 3 && strcmp(argv[3], "skip") == 0);
    if (argc == 4 && strcmp(argv[1], "records") == 0) {
        g_records = argv[3];
        return dump_coco(argv[2], 0);
    }
    fprintf(stderr, "usage: targetdump coco FILE.json [skip] | records FILE.json DIR\n");
    return 2;
}
