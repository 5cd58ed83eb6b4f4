/*
 * vidframe.c — frames of a video at native size, as chute's video format
 * decodes them (src/format/video.h), for tests/test_video.py to compare
 * with what the `ffmpeg` command decodes from the start.
 *
 *   vidframe [-i INDEX_DIR] < REQUESTS > FRAMES
 *
 * Each request line is "PATH F1 F2 ..." (presentation indices, non-
 * decreasing); the answer is a line "ok N W H" followed by N x H x W x 3
 * bytes of RGB24, or a line "error STATUS MESSAGE".  "PATH ?" answers
 * "info FRAMES W H".  The dataset of the last PATH stays open.
 *
 *   vidframe --loader PATH
 *
 * runs a 2-worker train loader (video_size 32, 4-frame clips, 2 clips per
 * video) over PATH for two epochs and prints "loader SAMPLES", so that an
 * ASan build checks the per-worker decoder state is freed with the loader.
 */
#define _GNU_SOURCE
#include "format/video.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run_loader(const char *path)
{
    chute_dataset_options d = {0};
    d.format = "video";
    d.index_dir = "";
    d.video_size = 32;
    d.frames_per_clip = 4;
    d.clips_per_video = 2;
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open_ex(path, &d, &ds, &err) != CHUTE_OK) {
        printf("error %s\n", err.message);
        return 1;
    }
    chute_loader_options o = {0};
    o.batch_size = 3;
    o.workers = 2;
    o.seed = 5;
    o.transform = CHUTE_TRANSFORM_TRAIN;
    o.on_corrupt = CHUTE_CORRUPT_FAIL;
    o.fields = "video,frames";
    chute_loader *ld = NULL;
    int rc = chute_loader_create(ds, &o, &ld, &err);
    uint64_t seen = 0;
    for (uint64_t epoch = 0; rc == CHUTE_OK && epoch < 2; epoch++) {
        rc = chute_loader_start_epoch(ld, epoch, 0);
        chute_batch *b = NULL;
        while (rc == CHUTE_OK && (rc = chute_loader_next(ld, &b)) == CHUTE_OK) {
            chute_batch_view v;
            chute_batch_view_get(b, &v);
            seen += v.count;
            chute_batch_release(b);
        }
        if (rc == CHUTE_END)
            rc = CHUTE_OK;
    }
    if (rc != CHUTE_OK)
        printf("error %s %s\n", chute_status_name(rc), ld ? chute_loader_errmsg(ld) : err.message);
    else
        printf("loader %llu\n", (unsigned long long)seen);
    chute_loader_destroy(ld);
    chute_dataset_close(ds);
    return rc != CHUTE_OK;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--loader") == 0)
        return run_loader(argv[2]);
    const char *index_dir = NULL;
    if (argc == 3 && strcmp(argv[1], "-i") == 0)
        index_dir = argv[2];
    else if (argc != 1) {
        fprintf(stderr, "usage: vidframe [-i INDEX_DIR] < REQUESTS\n");
        return 2;
    }
    char *line = NULL, last[4096] = "";
    size_t cap = 0;
    chute_dataset *ds = NULL;
    uint8_t *buf = NULL;
    size_t bufcap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char *save = NULL, *path = strtok_r(line, " \n", &save);
        if (!path)
            continue;
        chute_error err = {0};
        int rc = CHUTE_OK;
        if (!ds || strcmp(path, last) != 0) {
            chute_dataset_close(ds);
            ds = NULL;
            chute_dataset_options o = {0};
            o.format = "video";
            o.frames_per_clip = 1;
            o.index_dir = index_dir;
            rc = chute_dataset_open_ex(path, &o, &ds, &err);
            snprintf(last, sizeof last, "%s", path);
        }
        uint64_t frames = 0, idx[1024];
        uint32_t w = 0, h = 0, n = 0;
        if (rc == CHUTE_OK)
            rc = ch_video_file_info(ds, 0, &frames, &w, &h, &err);
        char *tok;
        int info = 0;
        while (rc == CHUTE_OK && (tok = strtok_r(NULL, " \n", &save))) {
            if (strcmp(tok, "?") == 0)
                info = 1;
            else if (n < 1024)
                idx[n++] = strtoull(tok, NULL, 10);
        }
        if (rc == CHUTE_OK && info) {
            printf("info %llu %u %u\n", (unsigned long long)frames, w, h);
            fflush(stdout);
            continue;
        }
        size_t need = (size_t)n * w * h * 3;
        if (rc == CHUTE_OK && need > bufcap) {
            free(buf);
            bufcap = need;
            if (!(buf = malloc(bufcap)))
                return 3;
        }
        if (rc == CHUTE_OK)
            rc = ch_video_frames_rgb(ds, 0, idx, n, buf, bufcap, &err);
        if (rc != CHUTE_OK) {
            printf("error %s %s\n", chute_status_name(rc), err.message);
        } else {
            printf("ok %u %u %u\n", n, w, h);
            fwrite(buf, 1, need, stdout);
        }
        fflush(stdout);
    }
    free(line);
    free(buf);
    chute_dataset_close(ds);
    return 0;
}
