/*
 * video.h — what the video format (fmt_video.c) offers besides its
 * ch_format_ops: frames at native size by presentation index, for the
 * exactness test tool (tests/tools/vidframe.c) and `chute inspect`.
 */
#ifndef CHUTE_FORMAT_VIDEO_H
#define CHUTE_FORMAT_VIDEO_H

#include "format.h"

/* The number of video files, and file k's frame count and native size
 * (indexing it first if needed).  Any thread. */
uint64_t ch_video_nfiles(const chute_dataset *ds);
int ch_video_file_info(const chute_dataset *ds, uint64_t file, uint64_t *frames, uint32_t *w,
                       uint32_t *h, chute_error *err);
/* Decode frames idx[0..n) (presentation order, non-decreasing) of file k
 * at native size as RGB24 (sws_scale, the conversion `ffmpeg -pix_fmt
 * rgb24` does: the frame's own matrix and range, BT.601 when unstated)
 * into dst, n x h x w x 3.  One seek per keyframe reached, decoding only
 * up to the last frame asked for. */
int ch_video_frames_rgb(const chute_dataset *ds, uint64_t file, const uint64_t *idx, uint32_t n,
                        uint8_t *dst, size_t cap, chute_error *err);

#endif
