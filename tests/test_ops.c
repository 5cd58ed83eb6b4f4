/*
 * test_ops.c — unit tests for src/ops: crop geometry (torchvision's
 * RandomResizedCrop and Resize+CenterCrop), the fused resampler, and the
 * float16 conversion.
 *
 * The resampler is checked against an independent double-precision
 * implementation of PIL's bilinear resize written here from PIL's
 * algorithm (precompute_coeffs in Resample.c), so a wrong support, centre
 * or clip in the library shows up as a numeric difference.
 */
#include "unit.h"

#include "ops/ops.h"

#include <math.h>

/* ------------------------------------------------------------------ */
/* geometry                                                            */
/* ------------------------------------------------------------------ */

static void fallback_crop(uint32_t W, uint32_t H, int32_t *x, int32_t *y, int32_t *w, int32_t *h)
{
    double r = (double)W / H;
    int32_t cw, ch;
    if (r < 0.75) {
        cw = (int32_t)W;
        ch = (int32_t)lround(cw / 0.75);
    } else if (r > 4.0 / 3.0) {
        ch = (int32_t)H;
        cw = (int32_t)lround(ch * (4.0 / 3.0));
    } else {
        cw = (int32_t)W;
        ch = (int32_t)H;
    }
    if (cw > (int32_t)W)
        cw = (int32_t)W;
    if (ch > (int32_t)H)
        ch = (int32_t)H;
    *x = ((int32_t)W - cw) / 2;
    *y = ((int32_t)H - ch) / 2;
    *w = cw;
    *h = ch;
}

/* Is (w, h) a size RandomResizedCrop's sampling loop can produce for an
 * area fraction in [smin, smax] and aspect in [3/4, 4/3], allowing for
 * lround() of width and height? */
static int plausible_random(uint32_t W, uint32_t H, int32_t w, int32_t h, double smin, double smax)
{
    double A = (double)W * H;
    double amax = (w + 0.5) * (h + 0.5), amin = (w - 0.5) * (h - 0.5);
    double rmax = (w + 0.5) / (h - 0.5), rmin = (w - 0.5) / (h + 0.5);
    return amax >= smin * A * (1 - 1e-9) && amin <= smax * A * (1 + 1e-9) && rmax >= 0.75 - 1e-9 &&
           rmin <= 4.0 / 3.0 + 1e-9;
}

static int check_train_sizes(double smin, double smax, uint64_t draws)
{
    static const uint32_t sizes[][2] = {{500, 375}, {375, 500}, {224, 224}, {1000, 200},
                                        {200, 1000}, {640, 161}, {4000, 3000}, {101, 99},
                                        {1, 1},     {3, 700},   {700, 3}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint32_t W = sizes[s][0], H = sizes[s][1];
        uint64_t fallbacks = 0, flips = 0;
        for (uint64_t id = 0; id < draws; id++) {
            ch_rng r = ch_rng_for(77, 1, id);
            ch_crop c;
            ch_geom_train(W, H, smin, smax, &r, &c);
            int32_t x = (int32_t)c.x0, y = (int32_t)c.y0;
            int32_t w = (int32_t)(c.x1 - c.x0), h = (int32_t)(c.y1 - c.y0);
            if (c.x0 != x || c.y0 != y || c.x1 != x + w || c.y1 != y + h || w <= 0 || h <= 0 ||
                x < 0 || y < 0 || (uint32_t)(x + w) > W || (uint32_t)(y + h) > H) {
                fprintf(stderr, "%ux%u draw %llu: crop %g,%g-%g,%g is not an integer box inside\n",
                        W, H, (unsigned long long)id, c.x0, c.y0, c.x1, c.y1);
                return 1;
            }
            if (c.clip_x0 != x || c.clip_y0 != y || c.clip_x1 != x + w || c.clip_y1 != y + h) {
                fprintf(stderr, "%ux%u: clip box differs from the crop (filter reads outside it)\n",
                        W, H);
                return 1;
            }
            int32_t fx, fy, fw, fh;
            fallback_crop(W, H, &fx, &fy, &fw, &fh);
            int is_fallback = x == fx && y == fy && w == fw && h == fh;
            if (!plausible_random(W, H, w, h, smin, smax) && !is_fallback) {
                fprintf(stderr,
                        "%ux%u draw %llu: crop %dx%d (area %.4f, aspect %.4f) is neither a valid "
                        "random crop nor the fallback %dx%d+%d+%d\n",
                        W, H, (unsigned long long)id, w, h, (double)w * h / ((double)W * H),
                        (double)w / h, fw, fh, fx, fy);
                return 1;
            }
            fallbacks += is_fallback;
            flips += c.flip != 0;
        }
        /* 1000x200 (aspect 5) fails the random draw often enough that the
         * fallback must show up; 500x375 should almost never need it. */
        if (W == 1000 && H == 200 && smin < 0.2 && fallbacks == 0) {
            fprintf(stderr, "1000x200: the fallback crop never happened in %llu draws\n",
                    (unsigned long long)draws);
            return 1;
        }
        if (W == 500 && H == 375 && fallbacks > draws / 50 && smax - smin > 0.5) {
            fprintf(stderr, "500x375: fallback in %llu of %llu draws\n",
                    (unsigned long long)fallbacks, (unsigned long long)draws);
            return 1;
        }
        if (draws >= 1000 && (flips < draws * 4 / 10 || flips > draws * 6 / 10)) {
            fprintf(stderr, "%ux%u: %llu flips in %llu draws\n", W, H, (unsigned long long)flips,
                    (unsigned long long)draws);
            return 1;
        }
    }
    return 0;
}

TEST(train_crop_inside_area_aspect)
{
    CHECK_OK(check_train_sizes(0.08, 1.0, 3000));
    CHECK_OK(check_train_sizes(0.5, 0.5, 500));
    CHECK_OK(check_train_sizes(1.0, 1.0, 300));
    return 0;
}

TEST(train_crop_area_distribution)
{
    /* For a square image the draw rarely fails, so the kept area fraction
     * should spread over [0.08, 1] with a mean near 0.54. */
    const uint64_t draws = 4000;
    double sum = 0, lo = 1, hi = 0;
    for (uint64_t id = 0; id < draws; id++) {
        ch_rng r = ch_rng_for(3, 0, id);
        ch_crop c;
        ch_geom_train(1000, 1000, 0.08, 1.0, &r, &c);
        double f = (c.x1 - c.x0) * (c.y1 - c.y0) / 1e6;
        sum += f;
        lo = f < lo ? f : lo;
        hi = f > hi ? f : hi;
    }
    double mean = sum / draws;
    CHECK(mean > 0.45 && mean < 0.60, "mean area fraction %.3f", mean);
    CHECK(lo < 0.12 && hi > 0.9, "area fractions span only %.3f..%.3f", lo, hi);
    return 0;
}

TEST(train_crop_deterministic)
{
    for (uint64_t id = 0; id < 100; id++) {
        ch_rng a = ch_rng_for(5, 2, id), b = ch_rng_for(5, 2, id);
        ch_crop ca, cb;
        ch_geom_train(640, 480, 0.08, 1.0, &a, &ca);
        ch_geom_train(640, 480, 0.08, 1.0, &b, &cb);
        CHECK(ca.x0 == cb.x0 && ca.y0 == cb.y0 && ca.x1 == cb.x1 && ca.y1 == cb.y1 &&
                  ca.clip_x0 == cb.clip_x0 && ca.clip_y0 == cb.clip_y0 &&
                  ca.clip_x1 == cb.clip_x1 && ca.clip_y1 == cb.clip_y1 && ca.flip == cb.flip,
              "same RNG stream, different crop (id %llu)", (unsigned long long)id);
    }
    return 0;
}

/* Expected values from torchvision 0.14 on PIL images:
 * F.resize(img, 256).size and CenterCrop(224)'s offsets (Python round). */
TEST(eval_crop_matches_torchvision)
{
    static const struct {
        uint32_t W, H, rw, rh, top, left;
    } t[] = {
        {500, 375, 341, 256, 16, 58},   {375, 500, 256, 341, 58, 16},
        {224, 224, 256, 256, 16, 16},   {1000, 200, 1280, 256, 16, 528},
        {333, 333, 256, 256, 16, 16},   {257, 256, 257, 256, 16, 16},
        {640, 161, 1017, 256, 16, 396}, {161, 640, 256, 1017, 396, 16},
        {299, 300, 256, 256, 16, 16},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ch_crop c;
        ch_geom_eval(t[i].W, t[i].H, 256, 224, &c);
        double sx = (double)t[i].W / t[i].rw, sy = (double)t[i].H / t[i].rh;
        double want[4] = {t[i].left * sx, t[i].top * sy, (t[i].left + 224) * sx,
                          (t[i].top + 224) * sy};
        double got[4] = {c.x0, c.y0, c.x1, c.y1};
        for (int k = 0; k < 4; k++)
            CHECK(fabs(got[k] - want[k]) < 1e-9,
                  "%ux%u: crop coordinate %d is %.6f, torchvision's is %.6f (resize to %ux%u, "
                  "crop at +%u+%u)",
                  t[i].W, t[i].H, k, got[k], want[k], t[i].rw, t[i].rh, t[i].left, t[i].top);
        CHECK(c.clip_x0 == 0 && c.clip_y0 == 0 && c.clip_x1 == (int32_t)t[i].W &&
                  c.clip_y1 == (int32_t)t[i].H,
              "%ux%u: eval must let the filter read the whole image", t[i].W, t[i].H);
        CHECK(c.flip == 0, "eval flips");
    }
    return 0;
}

TEST(full_and_scaled_crop)
{
    ch_crop c, s;
    ch_geom_full(501, 377, &c);
    CHECK(c.x0 == 0 && c.y0 == 0 && c.x1 == 501 && c.y1 == 377 && c.clip_x1 == 501 &&
              c.clip_y1 == 377 && !c.flip,
          "full crop wrong");
    /* 1/2 scale of 501x377 is 251x189 (libjpeg rounds up). */
    c.x0 = 10;
    c.y0 = 21;
    c.x1 = 311;
    c.y1 = 200;
    c.clip_x0 = 11;
    c.clip_y0 = 21;
    c.clip_x1 = 311;
    c.clip_y1 = 377;
    c.flip = 1;
    ch_crop_scale(&c, 2, 251, 189, &s);
    CHECK(s.x0 == 5 && s.y0 == 10.5 && s.x1 == 155.5 && s.y1 == 100, "scaled box %g,%g-%g,%g", s.x0,
          s.y0, s.x1, s.y1);
    /* The clip box may only grow outward, and never past the scaled image. */
    CHECK(s.clip_x0 == 5 && s.clip_y0 == 10 && s.clip_x1 == 156 && s.clip_y1 == 189,
          "scaled clip %d,%d-%d,%d", s.clip_x0, s.clip_y0, s.clip_x1, s.clip_y1);
    CHECK(s.flip == 1, "flip lost");
    return 0;
}

/* ------------------------------------------------------------------ */
/* resample                                                            */
/* ------------------------------------------------------------------ */

typedef struct img {
    uint32_t w, h;
    uint8_t *p; /* RGB8 */
} img;

static img make_img(uint32_t w, uint32_t h, int kind, uint64_t seed)
{
    img m = {w, h, malloc((size_t)w * h * 3)};
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                uint8_t v;
                if (kind == 0)
                    v = (uint8_t)(c == 0 ? 17 : c == 1 ? 200 : 99); /* constant */
                else if (kind == 1)
                    v = (uint8_t)(w > 1 ? (x * 255 + (w - 1) / 2) / (w - 1) : 0); /* h-gradient */
                else
                    v = (uint8_t)(unit_rand(&seed) >> 56); /* noise */
                m.p[((size_t)y * w + x) * 3 + c] = v;
            }
    return m;
}

static ch_out_spec spec(uint32_t size, chute_dtype dt, chute_layout lay)
{
    ch_out_spec o;
    memset(&o, 0, sizeof o);
    o.size = size;
    o.dtype = dt;
    o.layout = lay;
    for (int c = 0; c < 3; c++) {
        o.mul[c] = 1.0f;
        o.add[c] = 0.0f;
    }
    return o;
}

static size_t esize(chute_dtype dt) { return dt == CHUTE_DTYPE_UINT8 ? 1 : dt == CHUTE_DTYPE_FLOAT16 ? 2 : 4; }

/* Resample crop c of image m into a fresh buffer (NULL on failure).  When
 * window is set, only the plan's [lo, hi) window is passed, as the loader
 * does with a windowed decode. */
static void *run_resize(const img *m, const ch_crop *c, const ch_out_spec *o, int window)
{
    ch_resize_scratch s;
    memset(&s, 0, sizeof s);
    ch_resize_plan p;
    void *dst = NULL;
    if (ch_resize_plan_make(&p, c, o->size, o->size, &s) != CHUTE_OK)
        goto out;
    if (p.x.lo < 0 || p.y.lo < 0 || p.x.hi > (int32_t)m->w || p.y.hi > (int32_t)m->h ||
        p.x.lo >= p.x.hi || p.y.lo >= p.y.hi) {
        fprintf(stderr, "plan window %d..%d x %d..%d outside the %ux%u image\n", p.x.lo, p.x.hi,
                p.y.lo, p.y.hi, m->w, m->h);
        goto out;
    }
    if (p.x.lo < c->clip_x0 || p.y.lo < c->clip_y0 || p.x.hi > c->clip_x1 || p.y.hi > c->clip_y1) {
        fprintf(stderr, "plan window %d..%d x %d..%d exceeds the clip box\n", p.x.lo, p.x.hi,
                p.y.lo, p.y.hi);
        goto out;
    }
    dst = calloc((size_t)o->size * o->size * 3, esize(o->dtype));
    if (!dst)
        goto out;
    size_t stride = (size_t)m->w * 3;
    const uint8_t *pix = m->p;
    int32_t px = 0, py = 0;
    uint8_t *win = NULL;
    if (window) {
        /* A private copy of just the window, so reads outside it are caught
         * by ASan rather than silently hitting the full image. */
        uint32_t ww = (uint32_t)(p.x.hi - p.x.lo), wh = (uint32_t)(p.y.hi - p.y.lo);
        win = malloc((size_t)ww * wh * 3);
        for (uint32_t y = 0; y < wh; y++)
            memcpy(win + (size_t)y * ww * 3, m->p + ((size_t)(p.y.lo + y) * m->w + p.x.lo) * 3,
                   (size_t)ww * 3);
        pix = win;
        stride = (size_t)ww * 3;
        px = p.x.lo;
        py = p.y.lo;
    }
    if (ch_resize_run(&p, pix, stride, px, py, c->flip, o, dst, &s) != CHUTE_OK) {
        free(dst);
        dst = NULL;
    }
    free(win);
out:
    ch_buf_free(&s.coef);
    ch_buf_free(&s.tmp);
    return dst;
}

static float out_at(const void *d, const ch_out_spec *o, uint32_t y, uint32_t x, int c);

static float half_to_float(uint16_t h)
{
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400), (int)e - 25);
    return s ? -v : v;
}

static float out_at(const void *d, const ch_out_spec *o, uint32_t y, uint32_t x, int c)
{
    size_t S = o->size;
    size_t at = o->layout == CHUTE_LAYOUT_NHWC ? ((size_t)y * S + x) * 3 + (size_t)c
                                               : (size_t)c * S * S + (size_t)y * S + x;
    if (o->dtype == CHUTE_DTYPE_UINT8)
        return ((const uint8_t *)d)[at];
    if (o->dtype == CHUTE_DTYPE_FLOAT16)
        return half_to_float(((const uint16_t *)d)[at]);
    return ((const float *)d)[at];
}

/* Crops exercised by the resampler tests: eval/train/full on several
 * shapes, including upscaling (crop smaller than the output). */
static int n_cases(void) { return 7; }
static void case_crop(int i, img *m, ch_crop *c, uint32_t *size)
{
    switch (i) {
    case 0: *m = (img){500, 375, NULL}; ch_geom_eval(500, 375, 256, 224, c); *size = 224; break;
    case 1: *m = (img){375, 500, NULL}; ch_geom_eval(375, 500, 109, 96, c); *size = 96; break;
    case 2: {
        *m = (img){640, 480, NULL};
        ch_rng r = ch_rng_for(1, 2, 3);
        ch_geom_train(640, 480, 0.08, 1, &r, c);
        *size = 64;
        break;
    }
    case 3: *m = (img){50, 40, NULL}; ch_geom_full(50, 40, c); *size = 96; break; /* upscale */
    case 4: *m = (img){1000, 200, NULL}; ch_geom_eval(1000, 200, 256, 224, c); *size = 224; break;
    case 5: {
        *m = (img){300, 300, NULL};
        ch_geom_full(300, 300, c);
        c->x0 = 100.25; c->y0 = 31.5; c->x1 = 131.75; c->y1 = 60.0; /* fractional, upscale */
        c->clip_x0 = 100; c->clip_y0 = 31; c->clip_x1 = 132; c->clip_y1 = 60;
        *size = 40;
        break;
    }
    default: *m = (img){7, 5, NULL}; ch_geom_full(7, 5, c); *size = 3; break;
    }
}

TEST(resize_constant_stays_constant)
{
    static const chute_dtype dts[] = {CHUTE_DTYPE_UINT8, CHUTE_DTYPE_FLOAT32, CHUTE_DTYPE_FLOAT16};
    static const chute_layout lays[] = {CHUTE_LAYOUT_NHWC, CHUTE_LAYOUT_NCHW};
    const float want[3] = {17, 200, 99};
    for (int i = 0; i < n_cases(); i++) {
        img shape;
        ch_crop c;
        uint32_t size;
        case_crop(i, &shape, &c, &size);
        img m = make_img(shape.w, shape.h, 0, 0);
        for (int d = 0; d < 3; d++)
            for (int l = 0; l < 2; l++) {
                ch_out_spec o = spec(size, dts[d], lays[l]);
                void *out = run_resize(&m, &c, &o, 1);
                CHECK(out != NULL, "case %d: resize failed", i);
                for (uint32_t y = 0; y < size; y++)
                    for (uint32_t x = 0; x < size; x++)
                        for (int ch = 0; ch < 3; ch++) {
                            float v = out_at(out, &o, y, x, ch);
                            float tol = dts[d] == CHUTE_DTYPE_FLOAT32 ? 1e-3f : dts[d] == CHUTE_DTYPE_FLOAT16 ? 0.126f : 0.0f;
                            if (fabsf(v - want[ch]) > tol) {
                                free(out);
                                CHECK(0, "case %d dtype %d layout %d: pixel (%u,%u,%d) = %g, want %g",
                                      i, d, l, x, y, ch, v, want[ch]);
                            }
                        }
                free(out);
            }
        free(m.p);
    }
    return 0;
}

TEST(resize_gradient_stays_monotone)
{
    for (int i = 0; i < n_cases(); i++) {
        img shape;
        ch_crop c;
        uint32_t size;
        case_crop(i, &shape, &c, &size);
        img m = make_img(shape.w, shape.h, 1, 0);
        for (int flip = 0; flip < 2; flip++) {
            c.flip = flip;
            ch_out_spec o = spec(size, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW);
            float *out = run_resize(&m, &c, &o, 1);
            CHECK(out != NULL, "case %d: resize failed", i);
            int bad = 0;
            for (uint32_t y = 0; y < size && !bad; y++)
                for (uint32_t x = 1; x < size && !bad; x++)
                    for (int ch = 0; ch < 3 && !bad; ch++) {
                        float a = out_at(out, &o, y, x - 1, ch), b = out_at(out, &o, y, x, ch);
                        if (flip ? b > a + 1e-3f : b < a - 1e-3f) {
                            fprintf(stderr, "case %d flip %d: row %u: x=%u %g then %g\n", i, flip,
                                    y, x, a, b);
                            bad = 1;
                        }
                    }
            /* Vertically nothing changes in a horizontal gradient. */
            for (uint32_t y = 1; y < size && !bad; y++)
                for (uint32_t x = 0; x < size && !bad; x++)
                    if (fabsf(out_at(out, &o, y, x, 0) - out_at(out, &o, 0, x, 0)) > 1e-3f) {
                        fprintf(stderr, "case %d: column %u varies down the rows\n", i, x);
                        bad = 1;
                    }
            free(out);
            CHECK(!bad, "case %d: gradient not preserved", i);
        }
        free(m.p);
    }
    return 0;
}

TEST(resize_flip_mirrors)
{
    static const chute_dtype dts[] = {CHUTE_DTYPE_UINT8, CHUTE_DTYPE_FLOAT32, CHUTE_DTYPE_FLOAT16};
    static const chute_layout lays[] = {CHUTE_LAYOUT_NHWC, CHUTE_LAYOUT_NCHW};
    for (int i = 0; i < n_cases(); i++) {
        img shape;
        ch_crop c;
        uint32_t size;
        case_crop(i, &shape, &c, &size);
        img m = make_img(shape.w, shape.h, 2, (uint64_t)i + 1);
        for (int d = 0; d < 3; d++)
            for (int l = 0; l < 2; l++) {
                ch_out_spec o = spec(size, dts[d], lays[l]);
                c.flip = 0;
                void *a = run_resize(&m, &c, &o, 1);
                c.flip = 1;
                void *b = run_resize(&m, &c, &o, 1);
                CHECK(a && b, "resize failed");
                int bad = 0;
                for (uint32_t y = 0; y < size && !bad; y++)
                    for (uint32_t x = 0; x < size && !bad; x++)
                        for (int ch = 0; ch < 3 && !bad; ch++)
                            if (out_at(a, &o, y, x, ch) != out_at(b, &o, y, size - 1 - x, ch))
                                bad = 1;
                free(a);
                free(b);
                CHECK(!bad, "case %d dtype %d layout %d: flipped output is not the mirror image", i,
                      d, l);
            }
        free(m.p);
    }
    return 0;
}

TEST(resize_window_equals_full_image)
{
    /* The loader hands the resampler only the decoded window; that must
     * give exactly what the whole image gives. */
    for (int i = 0; i < n_cases(); i++) {
        img shape;
        ch_crop c;
        uint32_t size;
        case_crop(i, &shape, &c, &size);
        img m = make_img(shape.w, shape.h, 2, (uint64_t)i + 7);
        ch_out_spec o = spec(size, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW);
        float *a = run_resize(&m, &c, &o, 0), *b = run_resize(&m, &c, &o, 1);
        CHECK(a && b, "resize failed");
        int same = memcmp(a, b, (size_t)size * size * 3 * 4) == 0;
        free(a);
        free(b);
        free(m.p);
        CHECK(same, "case %d: windowed input gives different output", i);
    }
    return 0;
}

/* PIL's bilinear (triangle) filter taps for one axis, in double. */
static void pil_taps(double in0, double in1, int out, int clip0, int clip1, int i, int *xmin,
                     int *n, double *k)
{
    double scale = (in1 - in0) / out;
    double fs = scale < 1 ? 1 : scale;
    double support = fs;
    double center = in0 + (i + 0.5) * scale;
    int a = (int)floor(center - support + 0.5), b = (int)floor(center + support + 0.5);
    if (a < clip0)
        a = clip0;
    if (b > clip1)
        b = clip1;
    double sum = 0;
    *xmin = a;
    *n = b - a;
    for (int t = 0; t < *n; t++) {
        double x = ((a + t) - center + 0.5) / fs;
        x = fabs(x);
        k[t] = x < 1 ? 1 - x : 0;
        sum += k[t];
    }
    for (int t = 0; t < *n; t++)
        k[t] /= sum;
}

TEST(resize_matches_pil_algorithm)
{
    for (int i = 0; i < n_cases(); i++) {
        img shape;
        ch_crop c;
        uint32_t S;
        case_crop(i, &shape, &c, &S);
        if (shape.w < 10)
            continue; /* degenerate tiny case: PIL has no taps to compare */
        img m = make_img(shape.w, shape.h, 2, (uint64_t)i + 99);
        c.flip = 0; /* the reference does not mirror; resize_flip_mirrors covers that */
        ch_out_spec o = spec(S, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW);
        float *got = run_resize(&m, &c, &o, 1);
        CHECK(got != NULL, "resize failed");
        double kx[4096], ky[4096];
        double maxerr = 0;
        for (uint32_t y = 0; y < S; y++) {
            int y0, ny;
            pil_taps(c.y0, c.y1, (int)S, c.clip_y0, c.clip_y1, (int)y, &y0, &ny, ky);
            for (uint32_t x = 0; x < S; x++) {
                int x0, nx;
                pil_taps(c.x0, c.x1, (int)S, c.clip_x0, c.clip_x1, (int)x, &x0, &nx, kx);
                for (int ch = 0; ch < 3; ch++) {
                    double v = 0;
                    for (int a = 0; a < ny; a++) {
                        double row = 0;
                        for (int b = 0; b < nx; b++)
                            row += kx[b] * m.p[((size_t)(y0 + a) * m.w + (size_t)(x0 + b)) * 3 + ch];
                        v += ky[a] * row;
                    }
                    double e = fabs(v - out_at(got, &o, y, x, ch));
                    maxerr = e > maxerr ? e : maxerr;
                }
            }
        }
        free(got);
        free(m.p);
        CHECK(maxerr < 0.01, "case %d: max difference from PIL's algorithm %.4f", i, maxerr);
    }
    return 0;
}

TEST(resize_normalize_and_uint8_rounding)
{
    img m = make_img(64, 48, 2, 5);
    ch_crop c;
    ch_geom_full(64, 48, &c);
    ch_out_spec f = spec(32, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW);
    ch_out_spec n = f;
    ch_out_spec u = spec(32, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NCHW);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    for (int ch = 0; ch < 3; ch++) {
        n.mul[ch] = 1.0f / (255.0f * sd[ch]);
        n.add[ch] = -mean[ch] / sd[ch];
    }
    float *raw = run_resize(&m, &c, &f, 1), *norm = run_resize(&m, &c, &n, 1);
    uint8_t *u8 = run_resize(&m, &c, &u, 1);
    CHECK(raw && norm && u8, "resize failed");
    int bad = 0;
    for (size_t i = 0; i < 32 * 32 * 3 && !bad; i++) {
        int ch = (int)(i / (32 * 32));
        float want = (raw[i] / 255.0f - mean[ch]) / sd[ch];
        if (fabsf(norm[i] - want) > 1e-4f) {
            fprintf(stderr, "element %zu: normalized %g, want %g\n", i, norm[i], want);
            bad = 1;
        }
        float r = floorf(raw[i] + 0.5f);
        r = r < 0 ? 0 : r > 255 ? 255 : r;
        if (fabsf((float)u8[i] - r) > 1.0f || (fabsf(raw[i] - r) < 0.49f && u8[i] != r)) {
            fprintf(stderr, "element %zu: uint8 %u for value %g\n", i, u8[i], raw[i]);
            bad = 1;
        }
    }
    free(raw);
    free(norm);
    free(u8);
    free(m.p);
    CHECK(!bad, "normalize/uint8 outputs disagree with the raw resample");
    return 0;
}

/* ------------------------------------------------------------------ */
/* float16                                                             */
/* ------------------------------------------------------------------ */

TEST(f16_exact_values)
{
    static const struct {
        float f;
        uint16_t h;
    } t[] = {
        {0.0f, 0x0000},      {-0.0f, 0x8000},          {1.0f, 0x3C00},        {-2.0f, 0xC000},
        {0.5f, 0x3800},      {65504.0f, 0x7BFF},       {65519.0f, 0x7BFF},    {65520.0f, 0x7C00},
        {1e9f, 0x7C00},      {-1e9f, 0xFC00},          {0.1f, 0x2E66},        {-2.1179f, 0xC03C},
        {2.64f, 0x4148},     {6.103515625e-05f, 0x0400}, /* smallest normal */
        {5.9604644775390625e-08f, 0x0001},               /* smallest subnormal, 2^-24 */
        {2.98023223876953125e-08f, 0x0000},              /* 2^-25: tie, rounds to even 0 */
        {4.470348358154297e-08f, 0x0001},                /* 1.5 * 2^-25 rounds up */
        {1e-10f, 0x0000},    {1.00048828125f, 0x3C00}, /* 1 + 2^-11: tie, to even */
        {1.00146484375f, 0x3C02},                      /* 1 + 3*2^-11: tie, to even (up) */
        {1.000732421875f, 0x3C01},                     /* 1 + 1.5*2^-11: nearest */
        {INFINITY, 0x7C00},  {-INFINITY, 0xFC00},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        uint16_t h = ch_f32_to_f16(t[i].f);
        CHECK(h == t[i].h, "f16(%.10g) = 0x%04X, want 0x%04X", (double)t[i].f, h, t[i].h);
    }
    uint16_t nan = ch_f32_to_f16(NAN);
    CHECK((nan & 0x7C00) == 0x7C00 && (nan & 0x03FF) != 0, "f16(NaN) = 0x%04X is not a NaN", nan);
    return 0;
}

TEST(f16_all_halves_and_midpoints)
{
    /* Every finite half converts back to itself, and every midpoint
     * between neighbours rounds to the even one (IEEE round-to-nearest). */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00)
            continue;
        float f = half_to_float((uint16_t)h);
        uint16_t back = ch_f32_to_f16(f);
        CHECK(back == h, "half 0x%04X -> %.10g -> 0x%04X", h, (double)f, back);
        uint32_t next = h + 1;
        if ((h & 0x7FFF) == 0x7BFF) /* largest finite: midpoint to "65536" -> inf */
            next = (h & 0x8000) | 0x7C00;
        else if ((next & 0x7C00) == 0x7C00)
            continue;
        float g = (next & 0x7C00) == 0x7C00 ? ((h & 0x8000) ? -65536.0f : 65536.0f)
                                              : half_to_float((uint16_t)next);
        float mid = (f + g) / 2; /* exact in float */
        uint16_t want = (h & 1) ? (uint16_t)next : (uint16_t)h;
        uint16_t got = ch_f32_to_f16(mid);
        CHECK(got == want, "midpoint %.12g of 0x%04X/0x%04X -> 0x%04X, want 0x%04X", (double)mid,
              h, next, got, want);
        /* just above the midpoint rounds away from h */
        float above = nextafterf(mid, g);
        CHECK(ch_f32_to_f16(above) == next, "%.12g -> 0x%04X, want 0x%04X", (double)above,
              ch_f32_to_f16(above), next);
    }
    return 0;
}

UNIT_MAIN
