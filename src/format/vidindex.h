/*
 * vidindex.h — the keyframe index of one video file ("F.chutevix").
 *
 * A clip costs one seek to the right keyframe and decoding up to its last
 * frame only if chute knows, before decoding anything, every frame's
 * presentation time, decode position and whether it is a keyframe.
 * Containers keep that in different shapes (MP4's sample tables, MKV's
 * cues, nothing at all in some WebM files), so the first read of a video
 * demuxes its packets once (no decoding) and keeps one row per video
 * packet, in decode order; later opens read the saved rows instead.
 * This file is the index alone: no FFmpeg here, so the parser is fuzzed
 * without it (tests/fuzz/fuzz_vidindex.c).
 *
 * Layout (little-endian, docs/FORMAT.md "Video keyframe index"):
 *   0  "CHUTEVIX"        8  u32 version (1)     12 u32 stream index
 *   16 u64 file size     24 i64 file mtime (ns) 32 u32 CRC32C of the file's
 *                                                  first min(size, 64 KiB)
 *   36 i32 codec id      40 u32 width           44 u32 height
 *   48 i32 time base num 52 i32 time base den   56 u64 count
 *   64 count x 32: i64 pts, i64 dts, i64 byte position (-1: unknown),
 *                  u32 packet size, u32 flags (bit 0 keyframe)
 *   then u32 CRC32C of everything before it, "VIXE".
 *
 * Everything in a saved index is a claim: it is used only when its CRC
 * holds, its file size, mtime and head CRC equal the file's now (a file
 * swapped for another after indexing is indexed again: a copy that keeps
 * size and mtime still changes the head CRC unless its first 64 KiB are
 * the same, and then reads check every packet against the rows), its
 * counts fit the bytes, every pts is distinct and every position lies
 * inside the file.  Anything else and the file is indexed again.
 */
#ifndef CHUTE_FORMAT_VIDINDEX_H
#define CHUTE_FORMAT_VIDINDEX_H

#include "../common/common.h"

#define CH_VIX_MAGIC "CHUTEVIX"
#define CH_VIX_VERSION 1u
#define CH_VIX_SUFFIX ".chutevix"
#define CH_VIX_HEAD_BYTES 65536u     /* the head CRC's span */
#define CH_VIX_MAX_FRAMES (1u << 26) /* 67M frames: 25 days at 30 fps */
#define CH_VIX_KEY 1u

typedef struct ch_vix_row {
    int64_t pts, dts, pos;
    uint32_t size, flags;
} ch_vix_row;

/* What a saved index must match to be used: the file as it is now. */
typedef struct ch_vix_want {
    uint64_t size;
    int64_t mtime_ns;
    uint32_t head_crc;
} ch_vix_want;

typedef struct ch_vix {
    uint32_t stream;          /* the video stream's index in the container */
    int32_t codec_id;         /* FFmpeg's AVCodecID (checked again at decode) */
    uint32_t width, height;
    int32_t tb_num, tb_den;   /* the stream's time base: pts * num / den seconds */
    uint64_t count, cap;      /* rows */
    ch_vix_row *rows;         /* decode order */
    /* Built by ch_vix_finish, never saved: */
    uint32_t *by_pts;         /* presentation index -> row */
    uint32_t *rank;           /* row -> presentation index */
    uint32_t *keys;           /* rows that are keyframes, ascending */
    uint32_t nkeys;
} ch_vix;

/* Append one row (grows by doubling; CHUTE_ELIMIT past CH_VIX_MAX_FRAMES). */
int ch_vix_push(ch_vix *ix, const ch_vix_row *r, chute_error *err);
/* Check the rows (distinct pts, positions inside `size`) and build the
 * presentation order and keyframe list.  CHUTE_ECORRUPT naming `name`. */
int ch_vix_finish(ch_vix *ix, uint64_t size, const char *name, chute_error *err);
void ch_vix_free(ch_vix *ix);

/* Parse and check a saved index held in memory (fuzzed: trusts nothing)
 * and finish it.  CHUTE_OK with *out filled; CHUTE_ECORRUPT (damaged) or
 * CHUTE_EFORMAT (another version; a file changed since: stale) with a
 * message naming `name`: the caller indexes the file again. */
int ch_vix_parse(const uint8_t *p, size_t n, const char *name, const ch_vix_want *want,
                 ch_vix *out, chute_error *err);
/* Serialise ix for `want` into a malloc'd buffer. */
int ch_vix_format(const ch_vix *ix, const ch_vix_want *want, uint8_t **out, size_t *out_len,
                  chute_error *err);

/* The row to start decoding at so that every frame whose presentation
 * index is in [first, last] comes out right: the last keyframe at or
 * before the earliest of them in decode order whose pts is at or before
 * the earliest of their pts (open GOPs: a keyframe's leading pictures
 * need the GOP before it).  UINT32_MAX: none (decode from the start). */
uint32_t ch_vix_seek_row(const ch_vix *ix, uint64_t first, uint64_t last);

#endif
