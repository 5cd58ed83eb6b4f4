/*
 * targets.h — detection / segmentation targets as plain per-sample records
 * (issue 24): the annotation parsers (COCO JSON, YOLO text), the mask codecs
 * (COCO RLE, polygon rasterisation) and the versioned binary target record
 * that carries one image's objects.  docs/TARGETS.md specifies the record.
 *
 * Nothing here does geometry: boxes stay float xyxy in source-image pixels,
 * keypoints x, y, v in the same frame, segmentations as the annotation file
 * gave them (polygons or RLE counts), decoded to a uint8 plane only on
 * request.  src/ops/ moves them with the image.
 *
 * Every entry point takes bytes from a file a user did not write with chute
 * in mind: sizes are checked before arithmetic, counts before allocation,
 * and a refusal names the file and the annotation (id or line).
 */
#ifndef CHUTE_PARSE_TARGETS_H
#define CHUTE_PARSE_TARGETS_H

#include "../common/common.h"

#include <stddef.h>
#include <stdint.h>

/* ---- COCO RLE and polygons (pycocotools' maskApi.c semantics) ---------- */

/* Most points the dense boundary of one polygon may have (pycocotools walks
 * 5 steps per pixel along each edge): a polygon whose walk is longer is
 * refused instead of allocating for it. */
#define CH_POLY_MAX_STEPS (1u << 24)
/* Coordinates beyond this (pixels) are refused: pycocotools converts
 * 5 * coordinate to int, undefined past 2^31. */
#define CH_POLY_MAX_COORD 1.0e8
/* Largest mask plane (h * w) the codecs accept: pycocotools indexes with
 * uint and int, so larger masks are not COCO masks. */
#define CH_MASK_MAX_PIXELS ((uint64_t)INT32_MAX)

/* Growable uint32 vector (counts). */
typedef struct ch_u32v {
    uint32_t *v;
    size_t n, cap;
} ch_u32v;
int ch_u32v_push(ch_u32v *a, uint32_t x);
void ch_u32v_free(ch_u32v *a);

/* Compressed COCO RLE string (rleToString's 6-bit LEB128 variant, chars
 * 48..111) -> counts, appended to out (cleared first).  why: a reason on
 * refusal (bad character, run-on varint, a count outside 0..2^32-1). */
int ch_rle_from_string(const char *s, size_t len, ch_u32v *out, char *why, size_t whysz);
/* The counts must cover exactly h * w pixels (a lying count is refused). */
int ch_rle_check(const uint32_t *cnts, size_t m, uint32_t h, uint32_t w, char *why, size_t whysz);
/* OR the RLE's ones into a row-major h x w plane (counts run column-major,
 * as pycocotools' decode does).  Checked counts only. */
void ch_rle_paint(const uint32_t *cnts, size_t m, uint32_t h, uint32_t w, uint8_t *plane);
/* A polygon ch_rle_from_poly will accept at any mask size: >= 3 points,
 * finite coordinates within CH_POLY_MAX_COORD, a walk within
 * CH_POLY_MAX_STEPS.  Parsers call it so that painting cannot fail later. */
int ch_poly_check(const double *xy, size_t k, char *why, size_t whysz);
/* pycocotools' rleFrPoly: polygon (k points, x y interleaved doubles) ->
 * RLE counts of an h x w mask, into out (cleared first). */
int ch_rle_from_poly(const double *xy, size_t k, uint32_t h, uint32_t w, ch_u32v *out, char *why,
                     size_t whysz);

/* ---- the target record ---------------------------------------------------- */

#define CH_TG_MAGIC "CHTG"
#define CH_TG_MAJOR 1
#define CH_TG_MINOR 0
#define CH_TG_HEADER 32
#define CH_TG_FLAG_SEG 1u  /* a segmentation per object follows the keypoints */
#define CH_TG_FLAG_MASK 2u /* a semantic mask reference follows */
#define CH_TG_FLAG_MASK_IMAGE 4u /* the semantic mask's encoded bytes close the record */
/* Bounds a record never exceeds (a decoder refuses more). */
#define CH_TG_MAX_BYTES (256u << 20)
#define CH_TG_MAX_OBJECTS (1u << 20)
#define CH_TG_MAX_KEYPOINTS 1024u

enum { CH_SEG_NONE = 0, CH_SEG_POLY = 1, CH_SEG_RLE = 2 };

/* One object as a parser hands it to the builder. */
typedef struct ch_tg_obj {
    int64_t ann_id;
    float box[4]; /* x0 y0 x1 y1, source pixels */
    int32_t label;
    uint8_t iscrowd;
    const float *kp; /* k * 3 (x, y, v), or NULL (all zero) */
    int seg;         /* CH_SEG_* */
    /* CH_SEG_POLY: npoly polygons, poly_len[i] coordinates each (even,
     * >= 6), coordinates in poly_xy one after the other. */
    uint32_t npoly;
    const uint32_t *poly_len;
    const double *poly_xy;
    /* CH_SEG_RLE: counts of an rle_h x rle_w mask (column-major runs). */
    uint32_t rle_h, rle_w;
    const uint32_t *rle;
    uint32_t rle_m;
} ch_tg_obj;

/* Builds one record; reused across samples (no allocation once grown). */
typedef struct ch_tg_builder {
    uint8_t *objs; /* fixed-size part per object, then assembled */
    size_t objs_n, objs_cap;
    uint8_t *seg;
    size_t seg_n, seg_cap;
    uint8_t *out;
    size_t out_n, out_cap;
    uint32_t n, k, width, height, flags;
    char mask_path[4096];
    uint8_t *mask_img;
    size_t mask_img_n, mask_img_cap;
} ch_tg_builder;

void ch_tg_begin(ch_tg_builder *b, uint32_t width, uint32_t height, uint32_t keypoints);
int ch_tg_add(ch_tg_builder *b, const ch_tg_obj *o);
int ch_tg_set_mask_path(ch_tg_builder *b, const char *path);
/* The semantic mask's encoded file (PNG), copied into the record so a shard
 * carries it (1 .. CH_TG_MAX_BYTES / 2 bytes). */
int ch_tg_set_mask_image(ch_tg_builder *b, const void *data, size_t len);
/* The finished record: valid until the next ch_tg_begin / free. */
int ch_tg_finish(ch_tg_builder *b, const uint8_t **out, size_t *out_len);
void ch_tg_builder_free(ch_tg_builder *b);

/* A checked record, read in place: every offset lies inside it and every
 * segmentation is well formed (counts cover their mask, polygons have >= 3
 * points).  Arrays may be unaligned: read them with the ch_tg_* getters. */
typedef struct ch_tg_view {
    const uint8_t *rec;
    size_t len;
    uint32_t n, k, width, height, flags, minor;
    size_t off_ids, off_box, off_label, off_crowd, off_kp, off_seg;
    const char *mask_path; /* points into rec, not NUL-terminated */
    uint32_t mask_path_len;
    const uint8_t *mask_image; /* points into rec */
    uint32_t mask_image_len;
} ch_tg_view;

/* Check a record; err names `what` (file, sample) and the byte offset. */
int ch_tg_decode(const void *rec, size_t len, const char *what, ch_tg_view *v, chute_error *err);
int64_t ch_tg_ann_id(const ch_tg_view *v, uint32_t i);
void ch_tg_box(const ch_tg_view *v, uint32_t i, float out[4]);
int32_t ch_tg_label(const ch_tg_view *v, uint32_t i);
uint8_t ch_tg_crowd(const ch_tg_view *v, uint32_t i);
void ch_tg_keypoints(const ch_tg_view *v, uint32_t i, float *out); /* k * 3 */
/* Object i's segmentation: its kind, and the byte offset of its body. */
int ch_tg_seg(const ch_tg_view *v, uint32_t i, size_t *body);
/* Paint object i's mask into a zeroed row-major h x w plane, as
 * pycocotools' annToMask(ann) with the image's h and w.  An RLE of another
 * size than h x w is refused (pycocotools would return its own size). */
int ch_tg_mask(const ch_tg_view *v, uint32_t i, uint32_t h, uint32_t w, uint8_t *plane,
               chute_error *err);

/* ---- parsers -------------------------------------------------------------- */

/* How a bad annotation is handled: refused (the parse fails naming it) or
 * counted and left out. */
typedef struct ch_tg_policy {
    int skip;                /* 0: fail on the first bad annotation */
    uint64_t skipped;        /* out: annotations left out */
    char first_skip[512];    /* out: why the first one was */
} ch_tg_policy;

/* YOLO text labels of one image: lines "class cx cy w h" (normalised to
 * 0..1), or "class x1 y1 x2 y2 ... xn yn" (a segment polygon, >= 3 points,
 * normalised).  Boxes become pixels of a width x height image; a polygon's
 * box is its extent.  Blank lines and lines starting with '#' are skipped.
 * nclasses bounds class ids (0: unbounded).  what: the file, for messages. */
int ch_yolo_parse(const char *text, size_t len, uint32_t width, uint32_t height, uint32_t nclasses,
                  const char *what, ch_tg_builder *b, ch_tg_policy *pol, chute_error *err);

#endif

/* ---- COCO instances JSON (needs libjansson: CHUTE_HAVE_JANSSON) ---------- */

/* Default cap on an annotation file's size: jansson's tree takes ~8x the
 * file (bench/results-targets.md: 3.9 GiB peak for a 458 MiB file), so a
 * 1 GiB file already needs ~9 GiB.  Larger files are refused up front with
 * the figure, not parsed into an out-of-memory kill. */
#define CH_COCO_MAX_BYTES_DEFAULT (1ull << 30)

typedef struct ch_coco_image {
    int64_t id;
    const char *file_name; /* owned by the ch_coco */
    uint32_t width, height;
    uint32_t first, count; /* its annotations: ann_order[first .. first+count) */
} ch_coco_image;

typedef struct ch_coco ch_coco;

/* Parse a COCO instances file (len bytes at text; `what` names it in
 * messages).  Structural damage (not JSON, no images array, duplicate
 * image / category / annotation ids, an image without a usable id, size
 * or file name) fails; a bad annotation (box NaN/inf/negative or wholly
 * outside its image, a polygon under 3 points, an RLE whose counts lie or
 * whose size is not its image's, keypoints of the wrong length, an
 * image_id or category_id that points nowhere) fails too, or under
 * pol->skip is counted and left out. */
int ch_coco_parse(const char *text, size_t len, const char *what, ch_tg_policy *pol, ch_coco **out,
                  chute_error *err);
/* Read and parse a file, refusing one over max_bytes (0: the default). */
int ch_coco_load(const char *path, uint64_t max_bytes, ch_tg_policy *pol, ch_coco **out,
                 chute_error *err);
void ch_coco_free(ch_coco *c);
size_t ch_coco_nimages(const ch_coco *c);
const ch_coco_image *ch_coco_image_at(const ch_coco *c, size_t i);
/* Categories, sorted by id: label = position. */
uint32_t ch_coco_ncategories(const ch_coco *c);
int64_t ch_coco_category_id(const ch_coco *c, uint32_t label);
const char *ch_coco_category_name(const ch_coco *c, uint32_t label);
uint32_t ch_coco_keypoints(const ch_coco *c);
uint64_t ch_coco_nannotations(const ch_coco *c); /* kept (after skips) */
/* Image i's record (its annotations in file order) into b. */
int ch_coco_record(const ch_coco *c, size_t i, ch_tg_builder *b, chute_error *err);
