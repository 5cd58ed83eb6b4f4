/*
 * inspect_targets.c — `chute inspect`'s summary of a dataset's detection /
 * segmentation targets (issue 24): objects per image, box sizes (COCO's
 * small / medium / large areas and a histogram of sqrt(area)), crowd and
 * masked objects, keypoints, objects per class.  Read through the public
 * API (chute_dataset_targets), one sample after another; a damaged record
 * is counted and its first message shown, as inspect does for images.
 */
#include "cli.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIDE_BINS 8 /* sqrt(area): <8, 8-15, ..., 256-511, >=512 */

int insp_targets(const chute_dataset *ds, int json)
{
    uint64_t n = chute_dataset_size(ds), objects = 0, images_with = 0, max_per = 0, crowd = 0,
             masked = 0, bad = 0, area_cls[3] = {0}, side[SIDE_BINS] = {0};
    uint32_t nc = chute_dataset_num_classes(ds), keypoints = 0;
    uint64_t *per_class = calloc(nc ? nc : 1, sizeof *per_class);
    char first_bad[600] = "";
    chute_error err = {0};
    chute_targets *t;
    if (!per_class)
        return 0;
    if (n == 0 || chute_dataset_targets(ds, 0, &t, &err) == CHUTE_ENOTFOUND) {
        free(per_class);
        return 0; /* not a target dataset: nothing to say */
    }
    if (err.code == CHUTE_OK)
        chute_targets_free(t);
    for (uint64_t i = 0; i < n; i++) {
        if (chute_dataset_targets(ds, i, &t, &err) != CHUTE_OK) {
            if (bad++ == 0)
                snprintf(first_bad, sizeof first_bad, "%s", err.message);
            continue;
        }
        objects += t->count;
        images_with += t->count > 0;
        max_per = t->count > max_per ? t->count : max_per;
        keypoints = t->keypoints > keypoints ? t->keypoints : keypoints;
        for (uint32_t k = 0; k < t->count; k++) {
            const float *b = t->boxes + (size_t)k * 4;
            double w = b[2] - b[0], h = b[3] - b[1], a = w > 0 && h > 0 ? w * h : 0;
            area_cls[a < 32 * 32 ? 0 : a < 96 * 96 ? 1 : 2]++;
            unsigned s = 0;
            for (double r = sqrt(a); r >= 8 && s < SIDE_BINS - 1; r /= 2)
                s++;
            side[s]++;
            crowd += t->iscrowd[k];
            masked += t->has_mask[k];
            if (t->labels[k] >= 0 && (uint32_t)t->labels[k] < nc)
                per_class[t->labels[k]]++;
        }
        chute_targets_free(t);
    }
    static const char *side_names[SIDE_BINS] = {"<8", "8-15", "16-31", "32-63", "64-127",
                                                "128-255", "256-511", ">=512"};
    if (json) {
        printf(",\"targets\":{\"objects\":%llu,\"images_with_objects\":%llu,"
               "\"mean_per_image\":%.3f,\"max_per_image\":%llu,\"crowd\":%llu,\"masks\":%llu,"
               "\"keypoints\":%u,\"area\":{\"small\":%llu,\"medium\":%llu,\"large\":%llu},"
               "\"box_side_histogram\":{",
               (unsigned long long)objects, (unsigned long long)images_with,
               n ? (double)objects / n : 0, (unsigned long long)max_per, (unsigned long long)crowd,
               (unsigned long long)masked, keypoints, (unsigned long long)area_cls[0],
               (unsigned long long)area_cls[1], (unsigned long long)area_cls[2]);
        for (unsigned b = 0; b < SIDE_BINS; b++)
            printf("%s\"%s\":%llu", b ? "," : "", side_names[b], (unsigned long long)side[b]);
        printf("},\"objects_per_class\":{");
        for (uint32_t c = 0; c < nc; c++) {
            printf("%s", c ? "," : "");
            cli_json_str(stdout, chute_dataset_class_name(ds, c));
            printf(":%llu", (unsigned long long)per_class[c]);
        }
        printf("},\"damaged_records\":%llu}", (unsigned long long)bad);
    } else {
        printf("targets: %llu objects in %llu of %llu images (mean %.2f, max %llu per image); "
               "%llu crowd, %llu with masks%s",
               (unsigned long long)objects, (unsigned long long)images_with,
               (unsigned long long)n, n ? (double)objects / n : 0, (unsigned long long)max_per,
               (unsigned long long)crowd, (unsigned long long)masked,
               keypoints ? "" : "\n");
        if (keypoints)
            printf(", %u keypoints per object\n", keypoints);
        printf("  box area: %llu small (<32^2), %llu medium, %llu large (>=96^2)\n  box side "
               "(sqrt area, px):",
               (unsigned long long)area_cls[0], (unsigned long long)area_cls[1],
               (unsigned long long)area_cls[2]);
        for (unsigned b = 0; b < SIDE_BINS; b++)
            printf(" %s:%llu", side_names[b], (unsigned long long)side[b]);
        printf("\n  objects per class:");
        for (uint32_t c = 0; c < nc; c++)
            printf(" %s:%llu", chute_dataset_class_name(ds, c), (unsigned long long)per_class[c]);
        printf("\n");
        if (bad)
            printf("  %llu damaged target records; the first: %s\n", (unsigned long long)bad,
                   first_bad);
    }
    free(per_class);
    return bad != 0;
}
