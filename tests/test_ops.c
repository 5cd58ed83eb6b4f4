/*
 * test_ops.c — unit tests for src/ops: crop geometry (torchvision's
 * RandomResizedCrop and Resize+CenterCrop), the fused resampler, and the
 * float16 conversion.
 *
 * Expected values never come from the code's own formulas: pixels and
 * crop geometry are compared with what real PIL and torchvision produce
 * (golden_pil_resize.h, written by tests/tools/make_pil_golden.py, which
 * runs them), and the rest are invariants with known answers (a flat
 * image stays flat, a ramp stays monotone, a flip mirrors, a window gives
 * what the whole image gives, outputs stay inside the source's range).
 */
#include "unit.h"

#include "ops/ops.h"

#include <math.h>
#include <time.h>

#include "golden_pil_resize.h"

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
                                        {1, 1},     {3, 700},   {700, 3},
                                        {1, 20000}, {20000, 1}, {16777216, 1}, {1, 16777216},
                                        {2147483647, 1}, {2147483647, 2147483647}};
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

/* The source image of the golden cases: make_pil_golden.py's img_px(). */
static uint8_t img_px(uint32_t x, uint32_t y, int c)
{
    uint32_t v = (x * 73856093u) ^ (y * 19349663u) ^ ((uint32_t)(c + 1) * 83492791u);
    v = (v ^ (v >> 13)) * 0x5BD1E995u;
    return (uint8_t)((v ^ (v >> 15)) & 0xFF);
}

/* Plan crop c of a W x H image of img_px() to S x S and resample it from
 * a private copy of just the plan's window (as the loader hands over a
 * decoded window; ASan sees any read outside it).  float32 HWC, values
 * 0..255; NULL with a message if the plan is refused or its window is not
 * inside the image and the clip box.  *lo_hi receives the window's value
 * range per channel when not NULL. */
static float *resize_synth(uint32_t W, uint32_t H, const ch_crop *c, uint32_t S, float lo_hi[6])
{
    ch_resize_scratch s;
    memset(&s, 0, sizeof s);
    ch_resize_plan p;
    float *dst = NULL;
    uint8_t *win = NULL;
    int rc = ch_resize_plan_make(&p, c, S, S, &s);
    if (rc != CHUTE_OK) {
        fprintf(stderr, "%ux%u: plan refused (%d) for crop %g,%g-%g,%g\n", W, H, rc, c->x0, c->y0,
                c->x1, c->y1);
        goto out;
    }
    if (p.x.lo < 0 || p.y.lo < 0 || (uint32_t)p.x.hi > W || (uint32_t)p.y.hi > H ||
        p.x.lo >= p.x.hi || p.y.lo >= p.y.hi || p.x.lo < c->clip_x0 || p.y.lo < c->clip_y0 ||
        p.x.hi > c->clip_x1 || p.y.hi > c->clip_y1) {
        fprintf(stderr, "%ux%u: plan window %d..%d x %d..%d outside the image or clip box\n", W, H,
                p.x.lo, p.x.hi, p.y.lo, p.y.hi);
        goto out;
    }
    size_t ww = (size_t)(p.x.hi - p.x.lo), wh = (size_t)(p.y.hi - p.y.lo);
    win = malloc(ww * wh * 3);
    dst = malloc((size_t)S * S * 3 * sizeof(float));
    if (!win || !dst) {
        free(dst);
        dst = NULL;
        goto out;
    }
    if (lo_hi)
        for (int ch = 0; ch < 3; ch++) {
            lo_hi[2 * ch] = 255;
            lo_hi[2 * ch + 1] = 0;
        }
    for (size_t y = 0; y < wh; y++)
        for (size_t x = 0; x < ww; x++)
            for (int ch = 0; ch < 3; ch++) {
                uint8_t v = img_px((uint32_t)(p.x.lo + (int32_t)x), (uint32_t)(p.y.lo + (int32_t)y), ch);
                win[(y * ww + x) * 3 + ch] = v;
                if (lo_hi) {
                    lo_hi[2 * ch] = fminf(lo_hi[2 * ch], v);
                    lo_hi[2 * ch + 1] = fmaxf(lo_hi[2 * ch + 1], v);
                }
            }
    ch_out_spec o = spec(S, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NHWC);
    if (ch_resize_run(&p, win, ww * 3, p.x.lo, p.y.lo, c->flip, &o, dst, &s) != CHUTE_OK) {
        free(dst);
        dst = NULL;
    }
out:
    free(win);
    ch_buf_free(&s.coef);
    ch_buf_free(&s.tmp);
    return dst;
}

/* Geometry + resampling against PIL/torchvision on the same pixels: eval
 * (Resize + CenterCrop, extreme aspect ratios and upscaling included),
 * RandomResizedCrop's crop-then-resize, whole-image resize, and a
 * fractional box.  PIL's float path has no intermediate rounding, so the
 * only difference is float vs double accumulation. */
TEST(resize_matches_pil_golden)
{
    double worst = 0;
    for (size_t i = 0; i < sizeof gold_cases / sizeof gold_cases[0]; i++) {
        const struct gold_case *g = &gold_cases[i];
        ch_crop c;
        switch (g->kind) {
        case GOLD_EVAL: ch_geom_eval(g->W, g->H, g->R, g->S, &c); break;
        case GOLD_FULL: ch_geom_full(g->W, g->H, &c); break;
        case GOLD_CROP:
            c = (ch_crop){g->box[0], g->box[1], g->box[0] + g->box[2], g->box[1] + g->box[3],
                          g->box[0], g->box[1], g->box[0] + g->box[2], g->box[1] + g->box[3], 0};
            break;
        default:
            c = (ch_crop){g->fbox[0], g->fbox[1], g->fbox[2], g->fbox[3],
                          g->box[0], g->box[1], g->box[2], g->box[3], 0};
            break;
        }
        float *got = resize_synth(g->W, g->H, &c, g->S, NULL);
        CHECK(got != NULL, "case %zu (%ux%u): resize failed", i, g->W, g->H);
        double maxerr = 0;
        size_t at = 0, n = (size_t)g->S * g->S * 3;
        for (size_t k = 0; k < n; k++) {
            double e = fabs((double)got[k] - g->want[k]);
            if (e > maxerr) {
                maxerr = e;
                at = k;
            }
        }
        float gv = got[at];
        free(got);
        worst = maxerr > worst ? maxerr : worst;
        CHECK(maxerr < 2e-3, "case %zu (%ux%u -> %u, kind %d): pixel (%zu,%zu,%zu) is %.5f, PIL's %.5f",
              i, g->W, g->H, g->S, g->kind, at / 3 % g->S, at / 3 / g->S, at % 3, (double)gv,
              (double)g->want[at]);
    }
    fprintf(stderr, "largest difference from PIL over %zu cases: %.2e\n",
            sizeof gold_cases / sizeof gold_cases[0], worst);
    return 0;
}

/* Resize(R) + CenterCrop(S) of shapes whose resized side is huge (past
 * 2^32 for 16777216 x 1) or whose shorter side is one pixel: the crop in
 * source pixels equals torchvision's resized size and crop offset mapped
 * back, and resampling it gives finite values inside the source's range. */
TEST(eval_extreme_shapes_match_torchvision)
{
    for (size_t i = 0; i < sizeof gold_geoms / sizeof gold_geoms[0]; i++) {
        const struct gold_geom *g = &gold_geoms[i];
        ch_crop c;
        ch_geom_eval(g->W, g->H, g->R, g->S, &c);
        double want[4] = {(double)g->left * g->W / (double)g->rw,
                          (double)g->top * g->H / (double)g->rh,
                          (double)(g->left + g->S) * g->W / (double)g->rw,
                          (double)(g->top + g->S) * g->H / (double)g->rh};
        double got[4] = {c.x0, c.y0, c.x1, c.y1};
        for (int k = 0; k < 4; k++)
            CHECK(fabs(got[k] - want[k]) <= 1e-9 * fmax(1.0, fabs(want[k])),
                  "%ux%u R=%u S=%u: crop coordinate %d is %.10g, torchvision's %.10g (resized to "
                  "%llux%llu, crop at +%llu+%llu)",
                  g->W, g->H, g->R, g->S, k, got[k], want[k], (unsigned long long)g->rw,
                  (unsigned long long)g->rh, (unsigned long long)g->left,
                  (unsigned long long)g->top);
        CHECK(c.clip_x0 == 0 && c.clip_y0 == 0 && c.clip_x1 == (int32_t)g->W &&
                  c.clip_y1 == (int32_t)g->H,
              "%ux%u: eval must let the filter read the whole image", g->W, g->H);
        float range[6];
        uint32_t S = g->S > 64 ? 64 : g->S; /* pixels: a smaller output, same crop */
        float *out = resize_synth(g->W, g->H, &c, S, range);
        CHECK(out != NULL, "%ux%u: resize failed", g->W, g->H);
        int bad = 0;
        for (size_t k = 0; k < (size_t)S * S * 3 && !bad; k++) {
            int ch = (int)(k % 3);
            if (!isfinite(out[k]) || out[k] < range[2 * ch] - 1e-3f || out[k] > range[2 * ch + 1] + 1e-3f) {
                fprintf(stderr, "%ux%u: value %g at %zu outside the source range %g..%g\n", g->W,
                        g->H, (double)out[k], k, (double)range[2 * ch], (double)range[2 * ch + 1]);
                bad = 1;
            }
        }
        free(out);
        CHECK(!bad, "%ux%u: resampled values not a blend of source pixels", g->W, g->H);
    }
    return 0;
}

/* The eval resize side: timm's floor(size / crop_pct) as Python computes
 * it, for the crop_pct a user writes as a decimal. */
TEST(eval_resize_size_matches_timm)
{
    for (size_t i = 0; i < sizeof gold_pcts / sizeof gold_pcts[0]; i++) {
        uint32_t r = ch_eval_resize_size(gold_pcts[i].size, gold_pcts[i].crop_pct);
        CHECK(r == gold_pcts[i].resize, "floor(%u / %g) = %u, Python says %u", gold_pcts[i].size,
              (double)gold_pcts[i].crop_pct, r, gold_pcts[i].resize);
    }
    CHECK(ch_eval_resize_size(224, 0.0f) == 0 && ch_eval_resize_size(224, -1.0f) == 0 &&
              ch_eval_resize_size(224, NAN) == 0 && ch_eval_resize_size(224, INFINITY) == 0 &&
              ch_eval_resize_size(8192, 1e-30f) == 0,
          "invalid crop_pct must give 0");
    return 0;
}

/* Crops no geometry call makes (NaN, infinite, empty, reversed, outside
 * their clip box) are refused with EINVAL, before any float-to-int
 * conversion could overflow. */
TEST(plan_rejects_invalid_crops)
{
    ch_crop ok;
    ch_geom_full(100, 50, &ok);
    ch_crop bad[10];
    for (int i = 0; i < 10; i++)
        bad[i] = ok;
    bad[0].x0 = NAN;
    bad[1].x1 = INFINITY;
    bad[2].y1 = -INFINITY;
    bad[3].x1 = bad[3].x0; /* empty */
    bad[4].y0 = 60, bad[4].y1 = 10; /* reversed */
    bad[5].clip_x1 = 0; /* empty clip */
    bad[6].clip_y0 = -5; /* negative clip */
    bad[7].x0 = -1e12; /* far outside the clip box */
    bad[8].x1 = 1e300, bad[8].x0 = -1e300;
    bad[9].y1 = 3e9, bad[9].clip_y1 = INT32_MAX; /* past int32, outside its clip */
    ch_resize_scratch s;
    memset(&s, 0, sizeof s);
    ch_resize_plan p;
    int rc = ch_resize_plan_make(&p, &ok, 32, 32, &s);
    CHECK(rc == CHUTE_OK, "valid crop refused");
    for (int i = 0; i < 10; i++) {
        rc = ch_resize_plan_make(&p, &bad[i], 32, 32, &s);
        if (rc != CHUTE_EINVAL) {
            ch_buf_free(&s.coef);
            CHECK(0, "bad crop %d accepted (rc %d)", i, rc);
        }
    }
    rc = ch_resize_plan_make(&p, &ok, 0, 32, &s);
    ch_buf_free(&s.coef);
    CHECK(rc == CHUTE_EINVAL, "zero output width accepted");
    return 0;
}

/* Every transform's geometry on extreme shapes gives a plan whose
 * resampled output is finite and inside the source's value range. */
TEST(geometry_extreme_shapes_resample_sanely)
{
    static const uint32_t shapes[][2] = {{1, 1}, {1, 2}, {2, 1}, {1, 20000}, {20000, 1},
                                         {16777216, 1}, {1, 16777216}, {65535, 3}, {3, 65535},
                                         {2147483647, 1}, {1, 2147483647}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        uint32_t W = shapes[i][0], H = shapes[i][1];
        for (int t = 0; t < 4; t++) {
            ch_crop c;
            ch_rng r = ch_rng_for(9, 0, i * 4 + (size_t)t);
            if (t == 0)
                ch_geom_eval(W, H, 256, 224, &c);
            else if (t == 1)
                ch_geom_train(W, H, 0.08, 1.0, &r, &c);
            else if (t == 2)
                ch_geom_eval(W, H, 9362, 8192, &c);
            else if ((uint64_t)W * H <= (1u << 22))
                ch_geom_full(W, H, &c); /* the whole image is the window: bound memory */
            else
                continue;
            float range[6];
            float *out = resize_synth(W, H, &c, 16, range);
            CHECK(out != NULL, "%ux%u transform %d: no valid plan", W, H, t);
            int bad = 0;
            for (size_t k = 0; k < 16 * 16 * 3 && !bad; k++) {
                int ch = (int)(k % 3);
                bad = !isfinite(out[k]) || out[k] < range[2 * ch] - 1e-3f ||
                      out[k] > range[2 * ch + 1] + 1e-3f;
            }
            free(out);
            CHECK(!bad, "%ux%u transform %d: output outside the source's range", W, H, t);
        }
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Fastest of 3 whole-image resizes of a W x H image to 224. */
static double time_full_resize(uint32_t W, uint32_t H, const uint8_t *pix)
{
    ch_crop c;
    ch_geom_full(W, H, &c);
    ch_resize_scratch s;
    memset(&s, 0, sizeof s);
    ch_out_spec o = spec(224, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW);
    float *dst = malloc((size_t)224 * 224 * 3 * sizeof(float));
    double best = 1e9;
    for (int rep = 0; rep < 3 && dst; rep++) {
        double t0 = now_s();
        ch_resize_plan p;
        if (ch_resize_plan_make(&p, &c, 224, 224, &s) != CHUTE_OK ||
            ch_resize_run(&p, pix, (size_t)W * 3, 0, 0, 0, &o, dst, &s) != CHUTE_OK) {
            best = -1;
            break;
        }
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    free(dst);
    ch_buf_free(&s.coef);
    ch_buf_free(&s.tmp);
    return best;
}

/* Resizing a whole image costs the same order of time for every shape of
 * the same pixel count: a 4-Mpx image 1 or 2 pixels tall must not cost a
 * thousand times what a 2048 x 2048 one does (vertical-first runs the
 * full width once per output row: measured 5.5 s against 3.3 ms; with the
 * order chosen by cost, 40-80 ms, the long scalar tap lists of a 1-pixel
 * tall image being the rest). */
TEST(resize_cost_independent_of_aspect)
{
    const size_t npx = (size_t)1 << 22;
    uint8_t *pix = malloc(npx * 3);
    CHECK(pix != NULL, "out of memory");
    uint64_t seed = 3;
    for (size_t i = 0; i < npx * 3; i++)
        pix[i] = (uint8_t)(unit_rand(&seed) >> 56);
    /* The fastest of 3 tries of each (a loaded machine stalls single runs;
     * the regression this guards costs 1000x, every time). */
    double square = 0, wide1 = 0, wide2 = 0, tall = 0;
    for (int t = 0; t < 3; t++) {
        double s = time_full_resize(2048, 2048, pix);
        double w1 = time_full_resize(1u << 22, 1, pix);
        double w2 = time_full_resize(1u << 21, 2, pix);
        double tl = time_full_resize(2, 1u << 21, pix);
        if (t == 0 || s < square)
            square = s;
        if (t == 0 || w1 < wide1)
            wide1 = w1;
        if (t == 0 || w2 < wide2)
            wide2 = w2;
        if (t == 0 || tl < tall)
            tall = tl;
    }
    free(pix);
    CHECK(square > 0 && wide1 > 0 && wide2 > 0 && tall > 0, "resize failed");
    fprintf(stderr, "2048x2048 %.1f ms, 4194304x1 %.1f ms, 2097152x2 %.1f ms, 2x2097152 %.1f ms\n",
            square * 1e3, wide1 * 1e3, wide2 * 1e3, tall * 1e3);
    double bound = 30 * square + 0.25;
    CHECK(wide1 < bound && wide2 < bound && tall < bound,
          "extreme shapes cost %.1f / %.1f / %.1f ms against %.1f ms for a square image", wide1 * 1e3,
          wide2 * 1e3, tall * 1e3, square * 1e3);
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
