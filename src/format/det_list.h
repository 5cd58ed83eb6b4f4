/*
 * det_list.h — annotated inputs (COCO, YOLO, image + mask pairs) listed for
 * `chute pack` as images plus target records (det_list.c says which
 * layouts and how they are recognised).
 */
#ifndef CHUTE_FORMAT_DET_LIST_H
#define CHUTE_FORMAT_DET_LIST_H

#include "../parse/targets.h"
#include "format.h"

/* Returned by ch_det_list_build when ROOT is none of the layouts. */
#define CH_DET_NONE 102

typedef struct ch_det_list {
    ch_tree_list list;        /* image paths relative to image_root, labels 0,
                               * class table = the annotation's classes */
    char image_root[3800];
    uint8_t *tg;              /* sample i's record: tg[tg_off[i] .. tg_off[i+1]) */
    uint64_t *tg_off;
    size_t tg_n, tg_cap;
    const char *layout;       /* "coco", "yolo", "masks" */
    uint64_t annotations;     /* objects kept */
    uint64_t skipped;         /* annotations, images and pairs left out (skip policy) */
    char first_skip[512];
} ch_det_list;

/* skip: count and leave out bad annotations instead of failing. */
int ch_det_list_build(const char *root, int skip, ch_det_list *d, chute_error *err);
void ch_det_list_free(ch_det_list *d);

#endif
