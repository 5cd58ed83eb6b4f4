/*
 * registry.c — the augmentation ops' table, the augment-string parser, and
 * the augmented variant of the fused pass (aug.h says where each stage
 * runs and why).
 *
 * The string: ops separated by ',', each `name` or `name=v1:v2:...`, the
 * values the op's parameters in order (aug/<op>.c; docs/AUGMENT.md), the
 * ones left out taking their defaults.  Whitespace around tokens is
 * allowed.  Every error names the token (and its byte offset) and says
 * what is wrong: an unknown op, a missing or extra value, a value that is
 * not a finite number, out of bounds, or inconsistent with another.
 */
#include "../aug.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern const ch_aug_op ch_aug_invert, ch_aug_posterize, ch_aug_solarize, ch_aug_equalize,
    ch_aug_autocontrast, ch_aug_grayscale, ch_aug_brightness_op, ch_aug_contrast_op,
    ch_aug_saturation_op, ch_aug_hue_op, ch_aug_colorjitter, ch_aug_sharpness, ch_aug_blur,
    ch_aug_erasing, ch_aug_rotate, ch_aug_shear_x, ch_aug_shear_y, ch_aug_translate_x,
    ch_aug_translate_y, ch_aug_trivialaugment, ch_aug_randaugment, ch_aug_autoaugment;

/* One line per op. */
const ch_aug_op *const ch_aug_ops[] = {
    &ch_aug_invert,
    &ch_aug_posterize,
    &ch_aug_solarize,
    &ch_aug_equalize,
    &ch_aug_autocontrast,
    &ch_aug_grayscale,
    &ch_aug_brightness_op,
    &ch_aug_contrast_op,
    &ch_aug_saturation_op,
    &ch_aug_hue_op,
    &ch_aug_colorjitter,
    &ch_aug_sharpness,
    &ch_aug_blur,
    &ch_aug_erasing,
    &ch_aug_rotate,
    &ch_aug_shear_x,
    &ch_aug_shear_y,
    &ch_aug_translate_x,
    &ch_aug_translate_y,
    &ch_aug_trivialaugment,
    &ch_aug_randaugment,
    &ch_aug_autoaugment,
    NULL,
};

int ch_aug_draw_coin(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h, (void)args;
    return ch_aug_coin(r, p[0]);
}

const ch_aug_op *ch_aug_find(const char *name, size_t len)
{
    for (const ch_aug_op *const *op = ch_aug_ops; *op; op++)
        if (strlen((*op)->name) == len && memcmp((*op)->name, name, len) == 0)
            return *op;
    return NULL;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* Parse one token s[0..len) at byte offset `at` into step. */
static int parse_token(const char *s, size_t len, size_t at, ch_aug_step *step,
                       chute_error *err)
{
    while (len && is_space(*s))
        s++, len--, at++;
    while (len && is_space(s[len - 1]))
        len--;
    const int tl = len > 80 ? 80 : (int)len; /* how much of the token a message quotes */
    if (len == 0)
        return ch_err(err, CHUTE_EINVAL, "augment: empty op at offset %zu", at);
    const char *eq = memchr(s, '=', len);
    size_t nl = eq ? (size_t)(eq - s) : len;
    while (nl && is_space(s[nl - 1]))
        nl--;
    const ch_aug_op *op = ch_aug_find(s, nl);
    if (!op) {
        char known[512] = "";
        size_t k = 0;
        for (const ch_aug_op *const *o = ch_aug_ops; *o && k < sizeof known; o++)
            k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "",
                                  (*o)->name);
        return ch_err(err, CHUTE_EINVAL, "augment: unknown op '%.*s' at offset %zu (ops: %s)",
                      nl > 80 ? 80 : (int)nl, s, at, known);
    }
    step->op = op;
    for (int i = 0; i < CH_AUG_MAXP; i++)
        step->p[i] = op->def[i];
    int given = 0;
    if (eq) {
        const char *v = eq + 1, *end = s + len;
        for (;;) {
            const char *c = memchr(v, ':', (size_t)(end - v));
            const char *ve = c ? c : end;
            if (given == op->nparams)
                return ch_err(err, CHUTE_EINVAL,
                              "augment: '%.*s' at offset %zu: %s takes at most %d value%s", tl,
                              s, at, op->name, op->nparams, op->nparams == 1 ? "" : "s");
            char num[64];
            size_t vl = (size_t)(ve - v);
            while (vl && is_space(*v))
                v++, vl--;
            while (vl && is_space(v[vl - 1]))
                vl--;
            if (vl == 0 || vl >= sizeof num)
                return ch_err(err, CHUTE_EINVAL,
                              "augment: '%.*s' at offset %zu: %s of %s is %s", tl, s, at,
                              op->pname[given], op->name, vl ? "too long" : "empty");
            memcpy(num, v, vl);
            num[vl] = 0;
            if (op->word[given] && strcmp(num, op->word[given]) == 0) {
                step->p[given++] = NAN;
                if (!c)
                    break;
                v = c + 1;
                continue;
            }
            char *ne;
            errno = 0;
            double d = strtod(num, &ne);
            if (*ne || errno || !isfinite(d))
                return ch_err(err, CHUTE_EINVAL,
                              "augment: '%.*s' at offset %zu: %s of %s is '%s', not a number%s%s",
                              tl, s, at, op->pname[given], op->name, num,
                              op->word[given] ? " or " : "",
                              op->word[given] ? op->word[given] : "");
            if (!(d >= op->lo[given] && d <= op->hi[given]))
                return ch_err(err, CHUTE_EINVAL,
                              "augment: '%.*s' at offset %zu: %s of %s is %s, outside [%g, %g]",
                              tl, s, at, op->pname[given], op->name, num, op->lo[given],
                              op->hi[given]);
            step->p[given++] = (float)d;
            if (!c)
                break;
            v = c + 1;
        }
    }
    if (given < op->nrequired)
        return ch_err(err, CHUTE_EINVAL,
                      "augment: '%.*s' at offset %zu: %s needs %s (%s=%s%s)", tl, s, at,
                      op->name, op->pname[given], op->name, op->pname[0],
                      op->nparams > 1 ? "[:...]" : "");
    char why[128];
    if (op->check && op->check(step->p, why, sizeof why))
        return ch_err(err, CHUTE_EINVAL, "augment: '%.*s' at offset %zu: %s", tl, s, at, why);
    return CHUTE_OK;
}

int ch_aug_parse(const char *spec, ch_aug *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    if (!spec)
        return CHUTE_OK;
    size_t len = strlen(spec), at = 0;
    int blank = 1;
    for (size_t i = 0; i < len; i++)
        blank &= is_space(spec[i]);
    if (blank)
        return CHUTE_OK;
    for (;;) {
        const char *c = memchr(spec + at, ',', len - at);
        size_t tl = c ? (size_t)(c - (spec + at)) : len - at;
        if (out->n == CH_AUG_MAXSTEPS)
            return ch_err(err, CHUTE_EINVAL, "augment: more than %d ops (offset %zu)",
                          CH_AUG_MAXSTEPS, at);
        int rc = parse_token(spec + at, tl, at, &out->step[out->n], err);
        if (rc != CHUTE_OK) {
            memset(out, 0, sizeof *out);
            return rc;
        }
        out->n++;
        if (!c)
            return CHUTE_OK;
        at += tl + 1;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CH_AUG_AVX512 __attribute__((target("avx512f")))
/* float32 NCHW from RGB8 HWC, 16 pixels a step: three loads widened to
 * float, a two-permute deinterleave per channel (resample.c's), then
 * px * mul + add unfused, as the scalar loop below computes it. */
CH_AUG_AVX512 static void write_planar_avx512(const uint8_t *px, size_t n, const ch_out_spec *o,
                                              float *dst)
{
    __m512i i1[3], i2[3];
    for (int c = 0; c < 3; c++) {
        int32_t a[16], b[16];
        for (int i = 0; i < 16; i++) {
            int q = 3 * i + c;
            a[i] = q < 32 ? q : 0;
            b[i] = q < 32 ? i : 16 + (q - 32);
        }
        i1[c] = _mm512_loadu_si512(a);
        i2[c] = _mm512_loadu_si512(b);
    }
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8_t *q = px + i * 3;
        __m512 v[3];
        for (int k = 0; k < 3; k++)
            v[k] = _mm512_cvtepi32_ps(
                _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * k))));
        for (int c = 0; c < 3; c++) {
            __m512 t = _mm512_permutex2var_ps(v[0], i1[c], v[1]);
            t = _mm512_permutex2var_ps(t, i2[c], v[2]);
            t = _mm512_add_ps(_mm512_mul_ps(t, _mm512_set1_ps(o->mul[c])),
                              _mm512_set1_ps(o->add[c]));
            _mm512_storeu_ps(dst + (size_t)c * n + i, t);
        }
    }
    for (; i < n; i++)
        for (int c = 0; c < 3; c++)
            dst[(size_t)c * n + i] = (float)px[i * 3 + c] * o->mul[c] + o->add[c];
}

static int have_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
#endif

void ch_out_write_u8(const uint8_t *px, const ch_out_spec *o, void *dst)
{
    const size_t n = (size_t)o->size * o->size, plane = n;
    if (o->dtype == CHUTE_DTYPE_UINT8) {
        if (o->layout == CHUTE_LAYOUT_NHWC) {
            memcpy(dst, px, n * 3);
            return;
        }
        uint8_t *d = dst;
        for (size_t i = 0; i < n; i++)
            for (int c = 0; c < 3; c++)
                d[c * plane + i] = px[i * 3 + c];
        return;
    }
    /* The same float expression as the plain pass's write: pixel * mul + add. */
    if (o->dtype == CHUTE_DTYPE_FLOAT32 && o->layout == CHUTE_LAYOUT_NCHW) { /* training's */
#ifdef CH_AUG_AVX512
        if (have_avx512()) {
            write_planar_avx512(px, n, o, dst);
            return;
        }
#endif
        for (int c = 0; c < 3; c++) {
            float *d = (float *)dst + c * plane;
            const float m = o->mul[c], a = o->add[c];
            for (size_t i = 0; i < n; i++)
                d[i] = (float)px[i * 3 + c] * m + a;
        }
        return;
    }
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            float v = (float)px[i * 3 + c] * o->mul[c] + o->add[c];
            size_t at = o->layout == CHUTE_LAYOUT_NHWC ? i * 3 + c : c * plane + i;
            if (o->dtype == CHUTE_DTYPE_FLOAT32)
                ((float *)dst)[at] = v;
            else
                ((uint16_t *)dst)[at] = ch_f32_to_f16(v);
        }
}

int ch_transform_run(const ch_resize_plan *p, const uint8_t *pix, size_t stride, int32_t px,
                     int32_t py, int flip, const ch_out_spec *o, const ch_aug *aug,
                     ch_aug_key key, void *dst, ch_resize_scratch *s)
{
    if (!aug || aug->n == 0)
        return ch_resize_run(p, pix, stride, px, py, flip, o, dst, s);
    const uint32_t S = o->size;
    const size_t bytes = (size_t)S * S * 3;
    if (ch_buf_reserve(&s->aug_px, bytes) != CHUTE_OK)
        return CHUTE_ENOMEM;
    ch_out_spec u8 = *o;
    u8.dtype = CHUTE_DTYPE_UINT8;
    u8.layout = CHUTE_LAYOUT_NHWC;
    int rc = ch_resize_run(p, pix, stride, px, py, flip, &u8, s->aug_px.data, s);
    if (rc != CHUTE_OK)
        return rc;
    const ch_rng r = ch_aug_rng(key.seed, key.epoch, key.sample);
    float args[CH_AUG_MAXSTEPS][CH_AUG_MAXARGS];
    uint8_t on[CH_AUG_MAXSTEPS];
    for (uint32_t k = 0; k < aug->n; k++) { /* every draw first: a failed apply draws nothing */
        ch_rng sr = ch_aug_step_rng(&r, k);
        on[k] = (uint8_t)aug->step[k].op->draw(aug->step[k].p, S, S, &sr, args[k]);
    }
    for (uint32_t k = 0; k < aug->n; k++)
        if (on[k] && aug->step[k].op->stage == CH_AUG_PIXELS) {
            rc = aug->step[k].op->apply(s->aug_px.data, S, S, args[k], &s->aug_tmp);
            if (rc != CHUTE_OK)
                return rc;
        }
    ch_out_write_u8(s->aug_px.data, o, dst);
    for (uint32_t k = 0; k < aug->n; k++)
        if (on[k] && aug->step[k].op->stage == CH_AUG_OUTPUT)
            aug->step[k].op->apply_out(dst, o, args[k]);
    return CHUTE_OK;
}
