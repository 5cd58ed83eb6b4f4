/*
 * yolo_txt.c — one image's YOLO label file (the layout Ultralytics users
 * keep: images/x.jpg beside labels/x.txt) into a target record.
 *
 * A line is "class cx cy w h" with coordinates normalised to 0..1, or, for
 * segmentation labels, "class x1 y1 ... xn yn" (n >= 3, normalised).  The
 * rules are Ultralytics' verify_image_label: a class is a non-negative
 * integer, every coordinate is finite and within 0..1, a box has positive
 * width and height; a segment's box is its extent (segments2boxes).  A
 * bad line fails naming file:line, or under the skip policy is counted and
 * left out.  Boxes are converted to pixels of the image the caller names
 * (xywhn2xyxy: x0 = W * (cx - w / 2)), polygons to pixel coordinates, so
 * the record is in the same frame as a COCO one.  The annotation id of an
 * object is its 1-based line number.
 *
 * Bytes are never trusted as a C string: each token is copied into a
 * bounded buffer before strtod, and a NUL or a token longer than 63 bytes
 * is a bad line.
 */
#include "targets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define YOLO_MAX_FIELDS 4097 /* class + 2048 points */

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Parse one line's fields into f; returns the count, or -1 (why set). */
static long fields(const char *s, size_t n, double *f, long *cls, char *why, size_t whysz)
{
    long nf = 0;
    size_t p = 0;
    while (p < n) {
        while (p < n && is_space(s[p]))
            p++;
        if (p >= n)
            break;
        size_t q = p;
        while (q < n && !is_space(s[q]))
            q++;
        char tok[64];
        if (q - p >= sizeof tok)
            return snprintf(why, whysz, "field %ld longer than 63 bytes", nf + 1), -1;
        memcpy(tok, s + p, q - p);
        tok[q - p] = 0;
        if (strlen(tok) != q - p)
            return snprintf(why, whysz, "NUL byte in field %ld", nf + 1), -1;
        if (nf >= YOLO_MAX_FIELDS)
            return snprintf(why, whysz, "over %d fields", YOLO_MAX_FIELDS), -1;
        char *end;
        if (nf == 0) {
            if (tok[0] < '0' || tok[0] > '9')
                return snprintf(why, whysz, "class \"%s\" is not a non-negative integer", tok), -1;
            long c = strtol(tok, &end, 10);
            if (*end || c < 0 || c > INT32_MAX)
                return snprintf(why, whysz, "class \"%s\" is not an integer in 0..2^31-1", tok), -1;
            *cls = c;
        } else {
            double d = strtod(tok, &end);
            if (*end || end == tok || !isfinite(d))
                return snprintf(why, whysz, "field %ld \"%s\" is not a finite number", nf + 1, tok), -1;
            if (d < 0 || d > 1)
                return snprintf(why, whysz, "coordinate %g outside 0..1 (not normalised)", d), -1;
            f[nf - 1] = d;
        }
        nf++;
        p = q;
    }
    return nf;
}

static int line_to_obj(const double *f, long nf, long cls, uint32_t W, uint32_t H, uint32_t nclasses,
                       long line, ch_tg_obj *o, double *xy, uint32_t *plen, char *why, size_t whysz)
{
    memset(o, 0, sizeof *o);
    o->ann_id = line;
    o->label = (int32_t)cls;
    if (nclasses && (uint32_t)cls >= nclasses)
        return snprintf(why, whysz, "class %ld is not below the %u classes", cls, nclasses), -1;
    long nc = nf - 1;
    if (nc == 4) {
        double cx = f[0], cy = f[1], w = f[2], h = f[3];
        if (w <= 0 || h <= 0)
            return snprintf(why, whysz, "box of size %g x %g (must be positive)", w, h), -1;
        o->box[0] = (float)(W * (cx - w / 2));
        o->box[1] = (float)(H * (cy - h / 2));
        o->box[2] = (float)(W * (cx + w / 2));
        o->box[3] = (float)(H * (cy + h / 2));
        return 0;
    }
    if (nc >= 6 && nc % 2 == 0) {
        double x0 = 1, y0 = 1, x1 = 0, y1 = 0;
        for (long j = 0; j < nc; j += 2) {
            x0 = fmin(x0, f[j]);
            x1 = fmax(x1, f[j]);
            y0 = fmin(y0, f[j + 1]);
            y1 = fmax(y1, f[j + 1]);
            xy[j] = f[j] * W;
            xy[j + 1] = f[j + 1] * H;
        }
        o->box[0] = (float)(x0 * W);
        o->box[1] = (float)(y0 * H);
        o->box[2] = (float)(x1 * W);
        o->box[3] = (float)(y1 * H);
        if (ch_poly_check(xy, (size_t)nc / 2, why, whysz) != CHUTE_OK)
            return -1;
        *plen = (uint32_t)nc;
        o->seg = CH_SEG_POLY;
        o->npoly = 1;
        o->poly_len = plen;
        o->poly_xy = xy;
        return 0;
    }
    return snprintf(why, whysz,
                    "%ld coordinates: a box has 4, a segment an even number >= 6 (3+ points)", nc),
           -1;
}

int ch_yolo_parse(const char *text, size_t len, uint32_t width, uint32_t height, uint32_t nclasses,
                  const char *what, ch_tg_builder *b, ch_tg_policy *pol, chute_error *err)
{
    if (width == 0 || height == 0)
        return ch_err(err, CHUTE_EINVAL, "%s: image size %ux%u", what, width, height);
    ch_tg_begin(b, width, height, 0);
    double *f = malloc(sizeof(double) * YOLO_MAX_FIELDS * 2);
    if (!f)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", what);
    double *xy = f + YOLO_MAX_FIELDS;
    int rc = CHUTE_OK;
    long line = 0;
    size_t p = 0;
    char why[200];
    while (p < len && rc == CHUTE_OK) {
        const char *nl = memchr(text + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - text) : len;
        line++;
        const char *s = text + p;
        size_t n = e - p;
        p = e + 1;
        size_t q = 0;
        while (q < n && is_space(s[q]))
            q++;
        if (q == n || s[q] == '#')
            continue;
        long cls = 0;
        uint32_t plen = 0;
        ch_tg_obj o;
        long nf = fields(s, n, f, &cls, why, sizeof why);
        int bad = nf < 0 ||
                  line_to_obj(f, nf, cls, width, height, nclasses, line, &o, xy, &plen, why,
                              sizeof why) != 0;
        if (!bad) {
            rc = ch_tg_add(b, &o);
            if (rc != CHUTE_OK)
                rc = ch_err(err, rc, "%s:%ld: %s", what, line,
                            rc == CHUTE_ELIMIT ? "over the record's object limit" : "out of memory");
            continue;
        }
        if (!pol || !pol->skip) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s:%ld: %s", what, line, why);
            break;
        }
        if (pol->skipped++ == 0)
            snprintf(pol->first_skip, sizeof pol->first_skip, "%s:%ld: %s", what, line, why);
    }
    free(f);
    return rc;
}
