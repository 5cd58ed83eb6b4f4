/*
 * plan.h — one geometric plan per sample, and the math that makes the
 * image, its masks, boxes and keypoints follow it (issue 24).
 *
 * A plan is the list of concrete geometric steps drawn for one sample
 * (crop, resize, flips, pad, rotation/affine with their drawn numbers),
 * with the canvas size after each.  Everything that follows the plan is
 * computed from that one list, so pixels and targets cannot disagree:
 *
 *   ch_geo_run_rgb8    the image (bilinear; antialiased resampler for the
 *                      axis-aligned part, a bilinear warp for rotation/affine)
 *   ch_geo_run_mask    an 8-bit label plane (nearest, never blended)
 *   ch_geo_run_boxes   xyxy boxes: corners mapped, enclosing box, clamped
 *   ch_geo_sanitize    drop degenerate/outside boxes, with an index map
 *   ch_geo_run_kpts    keypoints (x, y, visibility), flip map for L/R
 *   ch_geo_matrix      the plan as one 2x3 affine (source -> output)
 *   ch_geo_window      the source rectangle the image pass reads
 *
 * Coordinates.  Continuous pixel coordinates: pixel (row i, column j)
 * covers [j, j+1) x [i, i+1) and its centre is (j + 0.5, i + 0.5); an image
 * W wide spans [0, W].  A matrix maps SOURCE coordinates to OUTPUT ones
 * (x' = a x + b y + c, y' = d x + e y + f), the direction torchvision's
 * box and keypoint kernels use (_get_inverse_affine_matrix(...,
 * inverted=False)); the image pass samples the inverse at output pixel
 * centres.  Rotation and affine pivot on the canvas centre (W/2, H/2) in
 * these coordinates, which is torchvision's convention for tensors (its
 * affine_grid puts output pixel j at j + 0.5 - W/2 relative to the centre,
 * i.e. the "half-pixel centre"); PIL's path pivots at the same point.
 *
 * Where torchvision is not self-consistent we follow it, per target, and
 * say so: keypoint flips are x' = W - 1 - x (pixel indices; boxes use
 * W - x); rotate(expand) places boxes/keypoints by the exact extent of the
 * rotated corners, the image on an integer canvas centred on it (they
 * differ by < 0.5 px); boxes are clamped to the canvas after crop, pad,
 * rotate and affine but not after resize or flips; masks resize with
 * torch's "nearest" (floor(dst * in / out), in float), and warp with
 * grid_sample's nearest.  docs/GEOMETRY.md lists the measured differences.
 *
 * Randomness.  ch_geo_draw draws every number from ch_geo_rng(seed,
 * epoch, sample), one sub-stream per step (as aug.h does), so a sample's
 * plan depends on (seed, epoch, sample) and the image size only.
 *
 * Memory.  A plan is a fixed-size struct; the passes take their
 * intermediates from the worker's ch_resize_scratch (grown, then reused).
 */
#ifndef CHUTE_OPS_PLAN_H
#define CHUTE_OPS_PLAN_H

#include "ops.h"

#define CH_GEO_MAXSTEPS 24 /* concrete steps in one plan */
#define CH_GEO_MAXSPEC 16  /* steps in a geometry string */
/* Largest canvas side any step may produce, and every canvas is at most
 * 2^28 pixels: bounds every intermediate (a hostile string cannot ask for
 * a 2^31-pixel pad); a plan past them is refused (CHUTE_EINVAL). */
#define CH_GEO_MAXSIDE 65536u

typedef struct ch_affine {
    double a, b, c, d, e, f; /* x' = a x + b y + c;  y' = d x + e y + f */
} ch_affine;

typedef enum ch_geo_kind {
    CH_GEO_CROP,   /* top, left, h, w (may reach outside: filled) */
    CH_GEO_RESIZE, /* to h x w */
    CH_GEO_HFLIP,
    CH_GEO_VFLIP,
    CH_GEO_PAD,    /* left, top, right, bottom */
    CH_GEO_AFFINE, /* angle, tx, ty, scale, shear x, shear y (F.affine / F.rotate) */
} ch_geo_kind;

typedef struct ch_geo_step {
    ch_geo_kind kind;
    int32_t i[4];           /* crop: top left h w; resize: h w; pad: l t r b */
    double angle, tx, ty, scale, shx, shy; /* affine, torchvision's F.affine arguments */
    int expand;             /* rotate(expand=True): canvas grows to the rotated corners */
    int zero;               /* crop, pad: outside is 0, not the fill value (torchvision's
                             * F.crop and F.center_crop pad with zeros, F.pad with fill) */
    double ex, ey;          /* expand: offsets boxes/keypoints take (torchvision's -tr) */
    uint32_t in_w, in_h;    /* canvas before the step */
    uint32_t out_w, out_h;  /* and after */
} ch_geo_step;

typedef struct ch_geo_plan {
    uint32_t src_w, src_h; /* the decoded image */
    uint32_t w, h;         /* the canvas now (after the last step) */
    uint32_t n;
    ch_geo_step step[CH_GEO_MAXSTEPS];
    /* The image pass reads an image decoded at 1/denom (a JPEG DCT scale),
     * scaled_w x scaled_h; 0 or 1: full scale.  Set by ch_geo_set_denom;
     * targets (masks, boxes, keypoints) always use source coordinates. */
    uint32_t denom, scaled_w, scaled_h;
} ch_geo_plan;

/* --- building a plan from concrete parameters (torchvision's functional
 * ops, same argument meaning).  Each returns CHUTE_EINVAL, leaving the plan
 * as it was, when the canvas would be empty or exceed CH_GEO_MAXSIDE, an
 * argument is not finite, or the plan is full. */
void ch_geo_init(ch_geo_plan *p, uint32_t w, uint32_t h);
/* F.crop: where it reaches outside the canvas, zeros (as torchvision). */
int ch_geo_crop(ch_geo_plan *p, int32_t top, int32_t left, int32_t h, int32_t w);
int ch_geo_resize(ch_geo_plan *p, uint32_t h, uint32_t w);
/* F.resize([size], max_size): shorter side to size, longer int(size *
 * long / short), capped at max_size (0: no cap) as torchvision caps it. */
int ch_geo_resize_short(ch_geo_plan *p, uint32_t size, uint32_t max_size);
int ch_geo_hflip(ch_geo_plan *p);
int ch_geo_vflip(ch_geo_plan *p);
int ch_geo_pad(ch_geo_plan *p, int32_t left, int32_t top, int32_t right, int32_t bottom);
/* F.affine(angle, [tx, ty], scale, [shx, shy]) about the canvas centre. */
int ch_geo_affine(ch_geo_plan *p, double angle, double tx, double ty, double scale, double shx,
                  double shy);
/* F.rotate(angle, expand): counter-clockwise degrees, as torchvision. */
int ch_geo_rotate(ch_geo_plan *p, double angle, int expand);
/* Fit inside h x w keeping the aspect ratio, then centre-pad to h x w
 * (Ultralytics' LetterBox arithmetic: the scaled side round(side * r);
 * top = round(dh - 0.1), left = round(dw - 0.1), the rest below/right). */
int ch_geo_letterbox(ch_geo_plan *p, uint32_t h, uint32_t w);
/* F.center_crop((h, w)): pads with zeros when the canvas is smaller, as
 * torchvision does. */
int ch_geo_center_crop(ch_geo_plan *p, uint32_t h, uint32_t w);

/* --- the plan as numbers. */
/* Source -> output for boxes (kp = 0) or keypoints (kp = 1, their flips
 * are about W - 1).  The image's matrix is the boxes' one except after
 * rotate(expand) (< 0.5 px apart, see above). */
void ch_geo_matrix(const ch_geo_plan *p, int kp, ch_affine *out);
/* One step's matrix; target 0 the image, 1 boxes, 2 keypoints. */
void ch_geo_step_matrix(const ch_geo_step *st, int target, ch_affine *m);
int ch_affine_invert(const ch_affine *m, ch_affine *out);
/* Whether no step rotates or shears (the plan maps axes onto axes). */
int ch_geo_axis_aligned(const ch_geo_plan *p);
/* The source rectangle [x0, x1) x [y0, y1) the image pass reads (inside
 * the image; empty, x0 == x1, when it reads nothing, e.g. padded away):
 * what the decoder must deliver, so JPEG decodes only that region. */
void ch_geo_window(const ch_geo_plan *p, int32_t *x0, int32_t *y0, int32_t *x1, int32_t *y1);

/* The first pass (the leading crops, resize and flips, which the
 * resampler does in one go): the source rectangle it maps (crop_w x
 * crop_h source pixels) and the canvas it makes; 0 when the plan starts
 * with a pad or a warp (then it reads the whole image at full scale). */
int ch_geo_lead(const ch_geo_plan *p, double *crop_w, double *crop_h, uint32_t *out_w,
                uint32_t *out_h);
/* Let the image pass read the image decoded at 1/denom (sw x sh), as the
 * classification path does (ch_crop_scale): only the first pass reads the
 * source, at the scaled coordinates.  CHUTE_EINVAL when the plan has no
 * first pass or denom is not 1, 2, 4 or 8. */
int ch_geo_set_denom(ch_geo_plan *p, uint32_t denom, uint32_t sw, uint32_t sh);

/* Whether the whole plan is that one resampler pass with no vertical flip
 * (RandomResizedCrop + flip, resize + centre crop, ...): then *c is its
 * crop (in the scaled image after ch_geo_set_denom), for
 * ch_resize_plan_make + ch_resize_run straight into an output slot, the
 * classification path's fused write. */
int ch_geo_one_pass(const ch_geo_plan *p, ch_crop *c);

/* --- applying the plan. */
/* The image: `pix` is the window (ww x wh RGB8, rows of `stride` bytes,
 * top-left at source (px, py), in the scaled image's pixels after
 * ch_geo_set_denom); it must contain ch_geo_window's rectangle.
 * dst receives p->h x p->w RGB8 HWC.  fill: the value of pixels that come
 * from outside the image (pads, rotation corners), torchvision's fill.
 * Intermediates come from s (tmp, aug_px, aug_tmp). */
int ch_geo_run_rgb8(const ch_geo_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                    int32_t py, uint32_t ww, uint32_t wh, const uint8_t fill[3], uint8_t *dst,
                    ch_resize_scratch *s);
/* One 8-bit plane (semantic labels or one instance), src_w x src_h,
 * nearest-neighbour through every step; outside pixels get `fill`.  dst is
 * p->h x p->w.  scratch: two planes' worth, grown and reused. */
int ch_geo_run_mask(const ch_geo_plan *p, const uint8_t *src, uint8_t fill, uint8_t *dst,
                    ch_buf *scratch);
/* n boxes, xyxy float (4 per box), in place, through every step. */
void ch_geo_run_boxes(const ch_geo_plan *p, float *xyxy, size_t n);
/* Keep boxes with width and height >= min_size, area >= min_area and
 * every coordinate inside [0, W] x [0, H] (torchvision's
 * SanitizeBoundingBoxes), compacting xyxy in place; keep[k] receives the
 * original index of the k-th kept box, so labels follow.  Returns the
 * number kept. */
size_t ch_geo_sanitize(float *xyxy, size_t n, uint32_t w, uint32_t h, float min_size,
                       float min_area, uint32_t *keep);
/* n keypoints (x, y, visibility) in place.  flip_map (nk entries, or NULL):
 * for keypoint k of an object, the index of its mirror (left eye <->
 * right eye); applied on every hflip/vflip to each object's nk points
 * (n must then be a multiple of nk).  A point that ends outside [0, W) x
 * [0, H) gets visibility 0; an invisible one stays invisible. */
void ch_geo_run_kpts(const ch_geo_plan *p, float *xyv, size_t n, const uint32_t *flip_map,
                     uint32_t nk);

/* Box format conversion, in place (n boxes of 4 floats). */
typedef enum ch_box_fmt { CH_BOX_XYXY, CH_BOX_XYWH, CH_BOX_CXCYWH } ch_box_fmt;
void ch_box_convert(float *b, size_t n, ch_box_fmt from, ch_box_fmt to);

/* --- random plans from a geometry string. */
typedef enum ch_geo_op {
    CH_GOP_RRC,       /* rrc=smin:smax          RandomResizedCrop((H, W), scale) */
    CH_GOP_RESIZE,    /* resize[=S[:MAX]]       Resize((H, W)) or Resize(S, max_size=MAX) */
    CH_GOP_LETTERBOX, /* letterbox              fit in (H, W), centre-pad */
    CH_GOP_CCROP,     /* centercrop             CenterCrop((H, W)) */
    CH_GOP_CROP,      /* crop                   RandomCrop((H, W), pad_if_needed=True) */
    CH_GOP_HFLIP,     /* hflip[=p]              RandomHorizontalFlip(p), p 0.5 */
    CH_GOP_VFLIP,     /* vflip[=p]              RandomVerticalFlip(p) */
    CH_GOP_ROTATE,    /* rotate=deg[:expand]    RandomRotation((-deg, deg), expand) */
    CH_GOP_AFFINE,    /* affine=deg:tx:ty:smin:smax:shx[:shy]   RandomAffine */
    CH_GOP_LSJ,       /* lsj[=lo:hi]            ScaleJitter((H, W), (lo, hi)), 0.1:2 */
    CH_GOP_ZOOMOUT,   /* zoomout[=lo:hi:p]      RandomZoomOut(side_range, p), 1:4:0.5 */
} ch_geo_op;

typedef struct ch_geo_spec_step {
    ch_geo_op op;
    double p[7];
} ch_geo_spec_step;

typedef struct ch_geo_spec {
    uint32_t n;
    ch_geo_spec_step step[CH_GEO_MAXSPEC];
} ch_geo_spec;

/* Parse "rrc=0.08:1,hflip,rotate=15" (whitespace around tokens ignored).
 * CHUTE_EINVAL with a message naming the token and its offset. */
int ch_geo_parse(const char *spec, ch_geo_spec *out, chute_error *err);

/* The sample's geometry stream: (seed, epoch, sample) only. */
static inline ch_rng ch_geo_rng(uint64_t seed, uint64_t epoch, uint64_t sample)
{
    return ch_rng_for(seed ^ 0x67656f6d65747279ull /* "geometry" */, epoch, sample);
}

/* Draw a plan for a w x h image and an out_h x out_w output: each step's
 * numbers from its own sub-stream of r, then, if the canvas is not
 * out_h x out_w yet, a final resize to it.  CHUTE_EINVAL when a step
 * cannot apply (a canvas past CH_GEO_MAXSIDE). */
int ch_geo_draw(const ch_geo_spec *s, uint32_t w, uint32_t h, uint32_t out_h, uint32_t out_w,
                const ch_rng *r, ch_geo_plan *p);

#endif
