/*
 * blur.c — GaussianBlur(kernel_size, sigma=(lo, hi)): sigma drawn
 * uniformly from [lo, hi], the 2-D kernel as torchvision builds it (float32
 * linspace(-lim, lim, k) with lim = (k - 1) / (2 sqrt 2), softmax of
 * -(x / sigma)^2, outer product), reflect padding, the k x k taps summed
 * in float32, rounded half to even.  Differences from torchvision are the
 * order of the float sum inside its conv2d and its vectorised exp: a value
 * within float error of a half may round the other way (1 level).
 */
#include "../aug.h"

#include <math.h>

#define BLUR_KMAX 31

static int check(const float *p, char *why, size_t n)
{
    int k = (int)p[0];
    if ((float)k != p[0] || k % 2 == 0)
        return snprintf(why, n, "kernel size must be an odd whole number"), 1;
    if (!(p[1] > 0.0f) || p[2] < p[1])
        return snprintf(why, n, "sigma range must be 0 < lo <= hi"), 1;
    return 0;
}

static int draw(const float *p, uint32_t w, uint32_t h, ch_rng *r, float *args)
{
    (void)w, (void)h;
    args[0] = p[0];
    args[1] = ch_aug_uniform(r, p[1], p[2]);
    return 1;
}

void ch_aug_gauss_kernel(int k, float sigma, float *out)
{
    const double lim = (k - 1) / (2.0 * sqrt(2.0));
    const float start = (float)-lim, end = (float)lim;
    const float step = k > 1 ? (end - start) / (float)(k - 1) : 0.0f;
    float x[BLUR_KMAX], mx = -INFINITY, sum = 0.0f;
    for (int i = 0; i < k; i++) {
        float v = i < k / 2 ? start + step * (float)i : end - step * (float)(k - i - 1);
        v = v / sigma;
        x[i] = -(v * v);
        mx = fmaxf(mx, x[i]);
    }
    for (int i = 0; i < k; i++) {
        out[i] = expf(x[i] - mx);
        sum += out[i];
    }
    for (int i = 0; i < k; i++)
        out[i] = out[i] / sum;
}

static uint32_t reflect(int64_t i, uint32_t n)
{
    if (n == 1)
        return 0;
    const int64_t period = 2 * ((int64_t)n - 1);
    i %= period;
    if (i < 0)
        i += period;
    return (uint32_t)(i < n ? i : period - i);
}

/* One channel: the plane padded by reflection (as torch's pad "reflect"),
 * then the k x k taps accumulated over a whole output row at a time, so the
 * inner loop runs along x and vectorises; each output still sums its taps
 * in the same order (row i, then column j, from 0), as the per-pixel loop
 * did. */
CH_AUG_CLONES
static void blur_channel(uint8_t *px, uint32_t w, uint32_t h, int c, int k, const float *k2,
                         float *pad, float *acc)
{
    const int r = k / 2;
    const size_t pw = (size_t)w + 2 * (size_t)r;
    for (size_t y = 0; y < (size_t)h + 2 * (size_t)r; y++) {
        const uint8_t *src = px + (size_t)reflect((int64_t)y - r, h) * w * 3 + c;
        for (size_t x = 0; x < pw; x++)
            pad[y * pw + x] = (float)src[(size_t)reflect((int64_t)x - r, w) * 3];
    }
    for (uint32_t y = 0; y < h; y++) {
        for (uint32_t x = 0; x < w; x++)
            acc[x] = 0.0f;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                const float kk = k2[i * k + j];
                const float *row = pad + ((size_t)y + i) * pw + j;
                for (uint32_t x = 0; x < w; x++)
                    acc[x] += kk * row[x];
            }
        uint8_t *out = px + (size_t)y * w * 3 + c;
        for (uint32_t x = 0; x < w; x++)
            out[(size_t)x * 3] = ch_aug_u8_trunc(rintf(acc[x]));
    }
}

static int apply(uint8_t *px, uint32_t w, uint32_t h, const float *args, ch_buf *s)
{
    const int k = (int)args[0], r = k / 2;
    float k1[BLUR_KMAX], k2[BLUR_KMAX * BLUR_KMAX];
    ch_aug_gauss_kernel(k, args[1], k1);
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
            k2[i * k + j] = k1[i] * k1[j];
    /* Scratch: one padded plane and one row of sums (checked: w, h < 2^31). */
    const size_t pw = (size_t)w + 2 * (size_t)r, ph = (size_t)h + 2 * (size_t)r;
    if (pw > SIZE_MAX / sizeof(float) / ph - w)
        return CHUTE_ENOMEM;
    if (ch_aug_scratch(s, (pw * ph + w) * sizeof(float)) != CHUTE_OK)
        return CHUTE_ENOMEM;
    float *pad = (float *)(void *)s->data, *acc = pad + pw * ph;
    /* Channels one after another: a channel's plane is copied before it is
     * written, and the others are not read. */
    for (int c = 0; c < 3; c++)
        blur_channel(px, w, h, c, k, k2, pad, acc);
    return CHUTE_OK;
}

const ch_aug_op ch_aug_blur = {
    .name = "blur", .torchvision = "GaussianBlur(kernel_size, sigma=(lo, hi))",
    .stage = CH_AUG_PIXELS, .nparams = 3, .nrequired = 1, .pname = {"kernel", "lo", "hi"},
    .def = {0, 0.1f, 2.0f}, .lo = {1, 0, 0}, .hi = {BLUR_KMAX, 100, 100},
    .check = check, .draw = draw, .apply = apply,
};
