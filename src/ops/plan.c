/*
 * plan.c — building a sample's geometric plan: the concrete steps
 * (torchvision's functional ops with their arguments), their matrices,
 * the geometry string and the random draws that turn it into steps.
 *
 * The plan is a list, not only a matrix, because torchvision's targets
 * are not a pure function of the composed matrix: boxes are clamped after
 * some steps and not others, keypoint flips use another pivot, masks
 * resize with their own rounding.  The list reproduces each of those per
 * step; ch_geo_matrix still gives the one 2x3 affine (for a consumer that
 * wants it, and for the decoder window).  Draws copy torchvision's
 * get_params/make_params procedures step by step (the KS tests in
 * tests/test_geometry.py compare the distributions); the numbers come
 * from chute's counter-based RNG, one sub-stream per step, so a step that
 * draws more never moves the draws of the next one.
 */
#include "plan.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEG (3.14159265358979323846 / 180.0)

void ch_geo_init(ch_geo_plan *p, uint32_t w, uint32_t h)
{
    memset(p, 0, sizeof *p);
    p->src_w = p->w = w;
    p->src_h = p->h = h;
}

static int canvas_ok(int64_t w, int64_t h)
{
    return w >= 1 && h >= 1 && w <= CH_GEO_MAXSIDE && h <= CH_GEO_MAXSIDE &&
           w * h <= ((int64_t)1 << 28);
}

static ch_geo_step *push(ch_geo_plan *p, ch_geo_kind kind, int64_t out_w, int64_t out_h)
{
    if (p->n >= CH_GEO_MAXSTEPS || !canvas_ok(out_w, out_h) || !canvas_ok(p->w, p->h))
        return NULL;
    ch_geo_step *st = &p->step[p->n++];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->in_w = p->w;
    st->in_h = p->h;
    st->out_w = (uint32_t)out_w;
    st->out_h = (uint32_t)out_h;
    st->scale = 1;
    p->w = (uint32_t)out_w;
    p->h = (uint32_t)out_h;
    return st;
}

int ch_geo_crop(ch_geo_plan *p, int32_t top, int32_t left, int32_t h, int32_t w)
{
    /* offsets bounded so every later sum stays far inside int64 and double */
    if (labs((long)top) > (long)CH_GEO_MAXSIDE * 4 || labs((long)left) > (long)CH_GEO_MAXSIDE * 4)
        return CHUTE_EINVAL;
    ch_geo_step *st = push(p, CH_GEO_CROP, w, h);
    if (!st)
        return CHUTE_EINVAL;
    st->i[0] = top;
    st->i[1] = left;
    st->i[2] = h;
    st->i[3] = w;
    st->zero = 1;
    return CHUTE_OK;
}

int ch_geo_resize(ch_geo_plan *p, uint32_t h, uint32_t w)
{
    if (h == p->h && w == p->w)
        return p->n < CH_GEO_MAXSTEPS ? CHUTE_OK : CHUTE_EINVAL; /* torchvision: no-op */
    ch_geo_step *st = push(p, CH_GEO_RESIZE, w, h);
    if (!st)
        return CHUTE_EINVAL;
    st->i[0] = (int32_t)h;
    st->i[1] = (int32_t)w;
    return CHUTE_OK;
}

int ch_geo_resize_short(ch_geo_plan *p, uint32_t size, uint32_t max_size)
{
    if (size == 0 || (max_size && max_size <= size))
        return CHUTE_EINVAL;
    /* torchvision's _compute_resized_output_size, in double (exact here:
     * every product is below 2^53) */
    double w = p->w, h = p->h, s = fmin(w, h), l = fmax(w, h);
    double ns = size, nl = floor(size * l / s);
    if (max_size && nl > max_size) {
        ns = floor(max_size * ns / nl);
        nl = max_size;
    }
    if (ns < 1 || nl > CH_GEO_MAXSIDE)
        return CHUTE_EINVAL;
    return w <= h ? ch_geo_resize(p, (uint32_t)nl, (uint32_t)ns)
                  : ch_geo_resize(p, (uint32_t)ns, (uint32_t)nl);
}

int ch_geo_hflip(ch_geo_plan *p)
{
    return push(p, CH_GEO_HFLIP, p->w, p->h) ? CHUTE_OK : CHUTE_EINVAL;
}

int ch_geo_vflip(ch_geo_plan *p)
{
    return push(p, CH_GEO_VFLIP, p->w, p->h) ? CHUTE_OK : CHUTE_EINVAL;
}

int ch_geo_pad(ch_geo_plan *p, int32_t l, int32_t t, int32_t r, int32_t b)
{
    if (l < 0 || t < 0 || r < 0 || b < 0)
        return CHUTE_EINVAL;
    ch_geo_step *st = push(p, CH_GEO_PAD, (int64_t)p->w + l + r, (int64_t)p->h + t + b);
    if (!st)
        return CHUTE_EINVAL;
    st->i[0] = l;
    st->i[1] = t;
    st->i[2] = r;
    st->i[3] = b;
    return CHUTE_OK;
}

/* torchvision's RotateScaleShear (_get_inverse_affine_matrix,
 * inverted=False, without the centre and translation): the linear part. */
static void rss(double angle, double scale, double shx, double shy, double m[4])
{
    double rot = angle * DEG, sx = shx * DEG, sy = shy * DEG;
    double a = cos(rot - sy) / cos(sy);
    double b = -(a * tan(sx) + sin(rot));
    double c = sin(rot - sy) / cos(sy);
    double d = cos(rot) - c * tan(sx);
    m[0] = a * scale;
    m[1] = b * scale;
    m[2] = c * scale;
    m[3] = d * scale;
}

static int affine_step(ch_geo_plan *p, double angle, double tx, double ty, double scale,
                       double shx, double shy, int expand)
{
    if (!isfinite(angle) || !isfinite(tx) || !isfinite(ty) || !(scale > 0) || !isfinite(scale) ||
        !(fabs(shx) < 89) || !(fabs(shy) < 89) || fabs(tx) > 4.0 * CH_GEO_MAXSIDE ||
        fabs(ty) > 4.0 * CH_GEO_MAXSIDE || scale > 1e4)
        return CHUTE_EINVAL;
    int64_t ow = p->w, oh = p->h;
    double ex = 0, ey = 0;
    if (expand) {
        /* Image canvas: torchvision's _compute_affine_output_size on the
         * inverse matrix (float32, precision cut at 1e-4 before ceil and
         * floor), i.e. the extent of the rotated corners about the centre.
         * Boxes and keypoints move by the exact extent (-tr). */
        double m[4], det, inv[4];
        rss(angle, scale, shx, shy, m);
        det = m[0] * m[3] - m[1] * m[2];
        inv[0] = m[3] / det;
        inv[1] = -m[1] / det;
        inv[2] = -m[2] / det;
        inv[3] = m[0] / det;
        float hw = 0.5f * (float)p->w, hh = 0.5f * (float)p->h;
        float fm[4] = {(float)inv[0], (float)inv[1], (float)inv[2], (float)inv[3]};
        float xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
        double bxmin = INFINITY, bymin = INFINITY;
        const float cx[4] = {-hw, -hw, hw, hw}, cy[4] = {-hh, hh, hh, -hh};
        for (int k = 0; k < 4; k++) {
            /* the image's size: corners through the inverse matrix, as
             * torchvision does (for a pure rotation the same extent) */
            float x = fm[0] * cx[k] + fm[1] * cy[k], y = fm[2] * cx[k] + fm[3] * cy[k];
            xmin = fminf(xmin, x + hw);
            xmax = fmaxf(xmax, x + hw);
            ymin = fminf(ymin, y + hh);
            ymax = fmaxf(ymax, y + hh);
            double dx = m[0] * cx[k] + m[1] * cy[k], dy = m[2] * cx[k] + m[3] * cy[k];
            bxmin = fmin(bxmin, dx);
            bymin = fmin(bymin, dy);
        }
        const float tol = 1e-4f, itol = 1.0f / tol;
        float cw = ceilf(truncf(xmax * itol) * tol) - floorf(truncf(xmin * itol) * tol);
        float chh = ceilf(truncf(ymax * itol) * tol) - floorf(truncf(ymin * itol) * tol);
        if (!(cw >= 1 && chh >= 1 && cw <= CH_GEO_MAXSIDE && chh <= CH_GEO_MAXSIDE))
            return CHUTE_EINVAL;
        ow = (int64_t)cw;
        oh = (int64_t)chh;
        ex = -bxmin;
        ey = -bymin;
    }
    ch_geo_step *st = push(p, CH_GEO_AFFINE, ow, oh);
    if (!st)
        return CHUTE_EINVAL;
    st->angle = angle;
    st->tx = tx;
    st->ty = ty;
    st->scale = scale;
    st->shx = shx;
    st->shy = shy;
    st->expand = expand;
    st->ex = ex;
    st->ey = ey;
    return CHUTE_OK;
}

int ch_geo_affine(ch_geo_plan *p, double angle, double tx, double ty, double scale, double shx,
                  double shy)
{
    return affine_step(p, angle, tx, ty, scale, shx, shy, 0);
}

int ch_geo_rotate(ch_geo_plan *p, double angle, int expand)
{
    /* rotate_*: "due to current incoherence of rotation angle direction
     * between affine and rotate implementations we need to set -angle" */
    return affine_step(p, -angle, 0, 0, 1, 0, 0, expand != 0);
}

int ch_geo_letterbox(ch_geo_plan *p, uint32_t h, uint32_t w)
{
    if (h == 0 || w == 0)
        return CHUTE_EINVAL;
    ch_geo_plan save = *p;
    double r = fmin((double)h / p->h, (double)w / p->w);
    double nw = fmin(fmax(nearbyint(p->w * r), 1), w), nh = fmin(fmax(nearbyint(p->h * r), 1), h);
    double dw = (w - nw) / 2, dh = (h - nh) / 2;
    int32_t top = (int32_t)nearbyint(dh - 0.1), left = (int32_t)nearbyint(dw - 0.1);
    if (ch_geo_resize(p, (uint32_t)nh, (uint32_t)nw) != CHUTE_OK ||
        ch_geo_pad(p, left, top, (int32_t)(w - nw) - left, (int32_t)(h - nh) - top) != CHUTE_OK) {
        *p = save;
        return CHUTE_EINVAL;
    }
    return CHUTE_OK;
}

int ch_geo_center_crop(ch_geo_plan *p, uint32_t h, uint32_t w)
{
    if (h == 0 || w == 0 || h > CH_GEO_MAXSIDE || w > CH_GEO_MAXSIDE)
        return CHUTE_EINVAL;
    ch_geo_plan save = *p;
    /* torchvision's center_crop: pad first when the crop is larger */
    if (w > p->w || h > p->h) {
        int32_t dw = w > p->w ? (int32_t)(w - p->w) : 0, dh = h > p->h ? (int32_t)(h - p->h) : 0;
        if (ch_geo_pad(p, dw / 2, dh / 2, (dw + 1) / 2, (dh + 1) / 2) != CHUTE_OK)
            return CHUTE_EINVAL;
        p->step[p->n - 1].zero = 1;
        if (p->w == w && p->h == h)
            return CHUTE_OK;
    }
    int32_t top = (int32_t)nearbyint(((double)p->h - h) / 2.0);
    int32_t left = (int32_t)nearbyint(((double)p->w - w) / 2.0);
    if (ch_geo_crop(p, top, left, (int32_t)h, (int32_t)w) != CHUTE_OK) {
        *p = save;
        return CHUTE_EINVAL;
    }
    return CHUTE_OK;
}

/* --- matrices */

static void compose(const ch_affine *first, const ch_affine *then, ch_affine *out)
{
    ch_affine r;
    r.a = then->a * first->a + then->b * first->d;
    r.b = then->a * first->b + then->b * first->e;
    r.c = then->a * first->c + then->b * first->f + then->c;
    r.d = then->d * first->a + then->e * first->d;
    r.e = then->d * first->b + then->e * first->e;
    r.f = then->d * first->c + then->e * first->f + then->f;
    *out = r;
}

void ch_geo_step_matrix(const ch_geo_step *st, int target, ch_affine *m)
{
    *m = (ch_affine){1, 0, 0, 0, 1, 0};
    double kp = target == 2 ? 1 : 0;
    switch (st->kind) {
    case CH_GEO_CROP:
        m->c = -st->i[1];
        m->f = -st->i[0];
        break;
    case CH_GEO_RESIZE:
        m->a = (double)st->out_w / st->in_w;
        m->e = (double)st->out_h / st->in_h;
        break;
    case CH_GEO_HFLIP:
        m->a = -1;
        m->c = st->in_w - kp;
        break;
    case CH_GEO_VFLIP:
        m->e = -1;
        m->f = st->in_h - kp;
        break;
    case CH_GEO_PAD:
        m->c = st->i[0];
        m->f = st->i[1];
        break;
    case CH_GEO_AFFINE: {
        double l[4], cx = st->in_w * 0.5, cy = st->in_h * 0.5, ox, oy;
        rss(st->angle, st->scale, st->shx, st->shy, l);
        if (!st->expand) {
            ox = cx + st->tx;
            oy = cy + st->ty;
        } else if (target == 0) {
            ox = st->out_w * 0.5;
            oy = st->out_h * 0.5;
        } else {
            ox = st->ex;
            oy = st->ey;
        }
        m->a = l[0];
        m->b = l[1];
        m->d = l[2];
        m->e = l[3];
        m->c = ox - l[0] * cx - l[1] * cy;
        m->f = oy - l[2] * cx - l[3] * cy;
        break;
    }
    }
}

void ch_geo_matrix(const ch_geo_plan *p, int kp, ch_affine *out)
{
    ch_affine m = {1, 0, 0, 0, 1, 0}, s;
    for (uint32_t k = 0; k < p->n; k++) {
        ch_geo_step_matrix(&p->step[k], kp ? 2 : 1, &s);
        compose(&m, &s, &m);
    }
    *out = m;
}

int ch_affine_invert(const ch_affine *m, ch_affine *out)
{
    double det = m->a * m->e - m->b * m->d;
    if (!(fabs(det) > 1e-300) || !isfinite(det))
        return CHUTE_EINVAL;
    ch_affine r;
    r.a = m->e / det;
    r.b = -m->b / det;
    r.d = -m->d / det;
    r.e = m->a / det;
    r.c = -(r.a * m->c + r.b * m->f);
    r.f = -(r.d * m->c + r.e * m->f);
    *out = r;
    return CHUTE_OK;
}

int ch_geo_axis_aligned(const ch_geo_plan *p)
{
    for (uint32_t k = 0; k < p->n; k++)
        if (p->step[k].kind == CH_GEO_AFFINE)
            return 0;
    return 1;
}

/* --- the geometry string */

typedef struct op_desc {
    const char *name;
    ch_geo_op op;
    int minv, maxv;  /* how many values it takes */
    double def[7];   /* defaults for those not given */
} op_desc;

static const op_desc OPS[] = {
    {"rrc", CH_GOP_RRC, 0, 2, {0.08, 1}},
    {"resize", CH_GOP_RESIZE, 0, 2, {0, 0}},
    {"letterbox", CH_GOP_LETTERBOX, 0, 0, {0}},
    {"centercrop", CH_GOP_CCROP, 0, 0, {0}},
    {"crop", CH_GOP_CROP, 0, 0, {0}},
    {"hflip", CH_GOP_HFLIP, 0, 1, {0.5}},
    {"vflip", CH_GOP_VFLIP, 0, 1, {0.5}},
    {"rotate", CH_GOP_ROTATE, 1, 2, {0, 0}},
    {"affine", CH_GOP_AFFINE, 1, 7, {0, 0, 0, 1, 1, 0, 0}},
    {"lsj", CH_GOP_LSJ, 0, 2, {0.1, 2.0}},
    {"zoomout", CH_GOP_ZOOMOUT, 0, 3, {1, 4, 0.5}},
};

static int check_step(const ch_geo_spec_step *s, const char *name, int given, chute_error *err)
{
    const double *p = s->p;
    switch (s->op) {
    case CH_GOP_RRC:
        if (!(p[0] > 0 && p[0] <= p[1] && p[1] <= 1))
            return ch_err(err, CHUTE_EINVAL, "rrc: scale range must be 0 < lo <= hi <= 1");
        break;
    case CH_GOP_RESIZE:
        for (int i = 0; i < given; i++)
            if (p[i] != floor(p[i]) || p[i] < 1 || p[i] > CH_GEO_MAXSIDE)
                return ch_err(err, CHUTE_EINVAL, "resize: sizes must be whole numbers in [1, %u]",
                              CH_GEO_MAXSIDE);
        if (given == 2 && p[1] <= p[0])
            return ch_err(err, CHUTE_EINVAL, "resize: max_size must be larger than the size");
        break;
    case CH_GOP_HFLIP:
    case CH_GOP_VFLIP:
        if (!(p[0] >= 0 && p[0] <= 1))
            return ch_err(err, CHUTE_EINVAL, "%s: p must be in [0, 1]", name);
        break;
    case CH_GOP_ROTATE:
        if (!(p[0] >= 0 && p[0] <= 180) || (p[1] != 0 && p[1] != 1))
            return ch_err(err, CHUTE_EINVAL, "rotate: degrees must be in [0, 180], expand 0 or 1");
        break;
    case CH_GOP_AFFINE:
        if (!(p[0] >= 0 && p[0] <= 180))
            return ch_err(err, CHUTE_EINVAL, "affine: degrees must be in [0, 180]");
        if (!(p[1] >= 0 && p[1] <= 1 && p[2] >= 0 && p[2] <= 1))
            return ch_err(err, CHUTE_EINVAL, "affine: translate fractions must be in [0, 1]");
        if (!(p[3] > 0 && p[3] <= p[4] && p[4] <= 10))
            return ch_err(err, CHUTE_EINVAL, "affine: scale range must be 0 < lo <= hi <= 10");
        if (!(p[5] >= 0 && p[5] <= 60 && p[6] >= 0 && p[6] <= 60))
            return ch_err(err, CHUTE_EINVAL, "affine: shear must be in [0, 60] degrees");
        break;
    case CH_GOP_LSJ:
        if (!(p[0] > 0 && p[0] <= p[1] && p[1] <= 10))
            return ch_err(err, CHUTE_EINVAL, "lsj: scale range must be 0 < lo <= hi <= 10");
        break;
    case CH_GOP_ZOOMOUT:
        if (!(p[0] >= 1 && p[0] <= p[1] && p[1] <= 10) || !(p[2] >= 0 && p[2] <= 1))
            return ch_err(err, CHUTE_EINVAL,
                          "zoomout: side range must be 1 <= lo <= hi <= 10, p in [0, 1]");
        break;
    default:
        break;
    }
    return CHUTE_OK;
}

int ch_geo_parse(const char *spec, ch_geo_spec *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    const char *s = spec;
    if (!s)
        return CHUTE_OK;
    while (isspace((unsigned char)*s))
        s++;
    if (!*s)
        return CHUTE_OK;
    for (;;) {
        while (isspace((unsigned char)*s))
            s++;
        size_t off = (size_t)(s - spec);
        const char *name = s;
        while (*s && *s != ',' && *s != '=' && !isspace((unsigned char)*s))
            s++;
        size_t nlen = (size_t)(s - name);
        while (isspace((unsigned char)*s))
            s++;
        if (nlen == 0)
            return ch_err(err, CHUTE_EINVAL, "geometry: empty step at offset %zu", off);
        const op_desc *d = NULL;
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++)
            if (strlen(OPS[k].name) == nlen && !memcmp(OPS[k].name, name, nlen))
                d = &OPS[k];
        if (!d)
            return ch_err(err, CHUTE_EINVAL, "geometry: unknown step '%.*s' at offset %zu",
                          (int)CH_MIN(nlen, 40), name, off);
        if (out->n >= CH_GEO_MAXSPEC)
            return ch_err(err, CHUTE_EINVAL, "geometry: more than %d steps", CH_GEO_MAXSPEC);
        ch_geo_spec_step *st = &out->step[out->n++];
        st->op = d->op;
        memcpy(st->p, d->def, sizeof st->p);
        int given = 0;
        if (*s == '=') {
            s++;
            for (;;) {
                while (isspace((unsigned char)*s))
                    s++;
                size_t voff = (size_t)(s - spec);
                if (given >= d->maxv)
                    return ch_err(err, CHUTE_EINVAL, "geometry: %s takes at most %d value%s "
                                  "(offset %zu)", d->name, d->maxv, d->maxv == 1 ? "" : "s", voff);
                char *end;
                errno = 0;
                double v = strtod(s, &end);
                if (end == s || !isfinite(v))
                    return ch_err(err, CHUTE_EINVAL, "geometry: value %d of %s at offset %zu is "
                                  "not a finite number", given + 1, d->name, voff);
                st->p[given++] = v;
                s = end;
                while (isspace((unsigned char)*s))
                    s++;
                if (*s != ':')
                    break;
                s++;
            }
        }
        if (given < d->minv)
            return ch_err(err, CHUTE_EINVAL, "geometry: %s needs at least %d value%s (offset %zu)",
                          d->name, d->minv, d->minv == 1 ? "" : "s", off);
        if (d->op == CH_GOP_RESIZE && given < 2)
            st->p[1] = 0;
        if (d->op == CH_GOP_RESIZE)
            st->p[2] = given;
        if (check_step(st, d->name, given, err) != CHUTE_OK) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "%s", err->message);
            return ch_err(err, CHUTE_EINVAL, "geometry: %s (offset %zu)", msg, off);
        }
        if (!*s)
            return CHUTE_OK;
        if (*s != ',')
            return ch_err(err, CHUTE_EINVAL, "geometry: unexpected '%c' at offset %zu", *s,
                          (size_t)(s - spec));
        s++;
    }
}

/* --- drawing a plan */

static ch_rng step_rng(const ch_rng *r, uint32_t k)
{
    ch_rng s;
    s.s = ch_mix64(r->s ^ ((uint64_t)(k + 1) * 0xD1B54A32D192ED03ull));
    return s;
}

static double unif(ch_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ch_rng_uniform(r);
}

static int draw_step(const ch_geo_spec_step *s, uint32_t H, uint32_t W, ch_rng *r,
                     ch_geo_plan *p)
{
    const double *a = s->p;
    switch (s->op) {
    case CH_GOP_RRC: {
        ch_crop c;
        ch_geom_train(p->w, p->h, a[0], a[1], r, &c); /* RandomResizedCrop.get_params */
        int rc = ch_geo_crop(p, c.clip_y0, c.clip_x0, c.clip_y1 - c.clip_y0, c.clip_x1 - c.clip_x0);
        return rc ? rc : ch_geo_resize(p, H, W);
    }
    case CH_GOP_RESIZE:
        if (a[2] == 0)
            return ch_geo_resize(p, H, W);
        return ch_geo_resize_short(p, (uint32_t)a[0], (uint32_t)a[1]);
    case CH_GOP_LETTERBOX:
        return ch_geo_letterbox(p, H, W);
    case CH_GOP_CCROP:
        return ch_geo_center_crop(p, H, W);
    case CH_GOP_CROP: {
        /* RandomCrop((H, W), pad_if_needed=True): pad both sides by the
         * shortfall, then a uniform offset on each axis */
        int32_t dh = p->h < H ? (int32_t)(H - p->h) : 0, dw = p->w < W ? (int32_t)(W - p->w) : 0;
        if ((dh || dw) && ch_geo_pad(p, dw, dh, dw, dh) != CHUTE_OK)
            return CHUTE_EINVAL;
        int32_t top = p->h > H ? (int32_t)ch_rng_below(r, p->h - H + 1) : 0;
        int32_t left = p->w > W ? (int32_t)ch_rng_below(r, p->w - W + 1) : 0;
        return ch_geo_crop(p, top, left, (int32_t)H, (int32_t)W);
    }
    case CH_GOP_HFLIP:
        return ch_rng_uniform(r) < a[0] ? ch_geo_hflip(p) : CHUTE_OK;
    case CH_GOP_VFLIP:
        return ch_rng_uniform(r) < a[0] ? ch_geo_vflip(p) : CHUTE_OK;
    case CH_GOP_ROTATE:
        return ch_geo_rotate(p, unif(r, -a[0], a[0]), a[1] != 0);
    case CH_GOP_AFFINE: {
        /* RandomAffine.make_params: angle, then integer translations
         * (round half to even, as Python's round), scale, shear x, y */
        double angle = unif(r, -a[0], a[0]);
        double mdx = a[1] * p->w, mdy = a[2] * p->h;
        double tx = nearbyint(unif(r, -mdx, mdx)), ty = nearbyint(unif(r, -mdy, mdy));
        double sc = unif(r, a[3], a[4]);
        double shx = unif(r, -a[5], a[5]), shy = a[6] > 0 ? unif(r, -a[6], a[6]) : 0;
        return ch_geo_affine(p, angle, tx, ty, sc, shx, shy);
    }
    case CH_GOP_LSJ: {
        /* ScaleJitter: r = min(H / h, W / w) * U(lo, hi); sides truncated */
        double f = fmin((double)H / p->h, (double)W / p->w) * unif(r, a[0], a[1]);
        double nw = fmax(floor(p->w * f), 1), nh = fmax(floor(p->h * f), 1);
        if (nw > CH_GEO_MAXSIDE || nh > CH_GEO_MAXSIDE)
            return CHUTE_EINVAL;
        return ch_geo_resize(p, (uint32_t)nh, (uint32_t)nw);
    }
    case CH_GOP_ZOOMOUT: {
        if (!(ch_rng_uniform(r) < a[2]))
            return CHUTE_OK;
        double f = unif(r, a[0], a[1]);
        double cw = floor(p->w * f), chh = floor(p->h * f);
        if (cw > CH_GEO_MAXSIDE || chh > CH_GEO_MAXSIDE)
            return CHUTE_EINVAL;
        int32_t left = (int32_t)floor((cw - p->w) * ch_rng_uniform(r));
        int32_t top = (int32_t)floor((chh - p->h) * ch_rng_uniform(r));
        return ch_geo_pad(p, left, top, (int32_t)(cw - p->w) - left, (int32_t)(chh - p->h) - top);
    }
    }
    return CHUTE_EINVAL;
}

int ch_geo_draw(const ch_geo_spec *s, uint32_t w, uint32_t h, uint32_t out_h, uint32_t out_w,
                const ch_rng *r, ch_geo_plan *p)
{
    ch_geo_init(p, w, h);
    if (!canvas_ok(w, h) || !canvas_ok(out_w, out_h))
        return CHUTE_EINVAL;
    for (uint32_t k = 0; k < s->n; k++) {
        ch_rng sr = step_rng(r, k);
        int rc = draw_step(&s->step[k], out_h, out_w, &sr, p);
        if (rc != CHUTE_OK)
            return rc;
    }
    return ch_geo_resize(p, out_h, out_w);
}
