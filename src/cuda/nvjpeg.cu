/*
 * nvjpeg.cu — the CUDA module's optional GPU JPEG path: nvJPEG loaded with
 * dlopen, a decode of whole JPEGs into a device scratch image, and the
 * GPU resampler that turns a crop window of it into one size x size uint8
 * RGB sample of a device batch (the ABI is src/cuda/cuda_module.h).
 *
 * Why dlopen, and why our own declarations.  nvJPEG is optional twice over:
 * the module must load on hosts without it (the toolkit's libnvjpeg.so.N
 * or PyPI's nvidia-nvjpeg wheel), and it must build where the toolkit has
 * no nvjpeg.h (this repository's CI has nvcc without it).  So the few
 * entry points used are declared below with the types of NVIDIA's
 * documented C API (nvjpegCreateSimple, nvjpegJpegStateCreate,
 * nvjpegGetImageInfo, nvjpegDecode; NVJPEG_OUTPUT_RGBI = 5;
 * nvjpegImage_t = four channel pointers and four size_t pitches) and
 * resolved with dlsym.  The search, in order, stopping at the first file
 * that opens: $CHUTE_NVJPEG (that file and no other, so a wrong setting is
 * reported, not papered over), libnvjpeg.so* beside this module, the
 * wheel's site-packages/nvidia/nvjpeg/lib seen from the Python package's
 * chute/lib/ (../../nvidia/nvjpeg/lib) and from chute/ (../nvidia/...),
 * /usr/local/cuda/lib64, then the dynamic loader's path; each with the
 * sonames libnvjpeg.so.13, .12, .11 and libnvjpeg.so.  Not found is
 * CHUTE_EUNSUPPORTED with "nvJPEG not found" and where it looked.
 *
 * The resampler.  One thread per output pixel computes its taps exactly as
 * src/ops/resample.c's axis_taps does (PIL's antialiased bilinear: a
 * triangle filter widened by the downscale factor, centres at
 * x0 + (i + 0.5) * scale in double, support clipped to the crop's clip box,
 * weights normalised in double), then sums the 2-D separable product in
 * float and rounds as the CPU does (+ 0.5, truncate, clamp).  The CPU path sums one axis first into a
 * float intermediate, so on identical pixels the two differ by rounding
 * (<= 1 per value; the host build of the same code matched resample.c
 * exactly on the test's 24 crops).  The flip is
 * applied on the output column, as the CPU resampler does.  Cost is
 * taps_x * taps_y reads per output value: fine for the usual 2-8x
 * downscales of RandomResizedCrop; a two-pass kernel is the next step for
 * extreme ones.
 *
 * Decode.  nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's,
 * so GPU-decoded samples differ from CPU ones by a little more than
 * rounding (the GPU test states its mean-abs-diff bound).  Each JPEG is
 * decoded whole (nvjpegDecode, hybrid Huffman on the host) into one
 * grow-only device scratch, then resampled; the scratch is bounded by
 * max_pixels (the loader's limit), so hostile headers cannot make it
 * allocate without bound.  Nothing else is allocated per image.
 */
#include "cuda_module.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_OK = 0, ST_EINVAL = -1, ST_ENOMEM = -2, ST_ECORRUPT = -5, ST_EUNSUPPORTED = -9 };

/* ---- the documented nvJPEG C API subset used here ---------------------- */
typedef int nvjpegStatus_t; /* NVJPEG_STATUS_SUCCESS = 0 */
typedef int nvjpegChromaSubsampling_t;
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
#define NVJ_MAX_COMPONENT 4
#define NVJ_OUTPUT_RGBI 5
typedef struct {
    unsigned char *channel[NVJ_MAX_COMPONENT];
    size_t pitch[NVJ_MAX_COMPONENT];
} nvjpegImage_t;

typedef nvjpegStatus_t (*fn_create_simple)(nvjpegHandle_t *);
typedef nvjpegStatus_t (*fn_destroy)(nvjpegHandle_t);
typedef nvjpegStatus_t (*fn_state_create)(nvjpegHandle_t, nvjpegJpegState_t *);
typedef nvjpegStatus_t (*fn_state_destroy)(nvjpegJpegState_t);
typedef nvjpegStatus_t (*fn_get_info)(nvjpegHandle_t, const unsigned char *, size_t, int *,
                                      nvjpegChromaSubsampling_t *, int *, int *);
typedef nvjpegStatus_t (*fn_decode)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *,
                                    size_t, int, nvjpegImage_t *, cudaStream_t);

typedef struct nvj_api {
    void *lib;
    fn_create_simple create_simple;
    fn_destroy destroy;
    fn_state_create state_create;
    fn_state_destroy state_destroy;
    fn_get_info get_info;
    fn_decode decode;
} nvj_api;

struct ch_nvjpeg {
    nvj_api api;
    int device;
    uint64_t max_pixels;
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    uint8_t *scratch; /* device, one decoded RGBI image */
    size_t scratch_len;
    pthread_mutex_t mu; /* one nvJPEG state and scratch: one decode at a time */
};

static int resolve(nvj_api *a)
{
    a->create_simple = (fn_create_simple)dlsym(a->lib, "nvjpegCreateSimple");
    a->destroy = (fn_destroy)dlsym(a->lib, "nvjpegDestroy");
    a->state_create = (fn_state_create)dlsym(a->lib, "nvjpegJpegStateCreate");
    a->state_destroy = (fn_state_destroy)dlsym(a->lib, "nvjpegJpegStateDestroy");
    a->get_info = (fn_get_info)dlsym(a->lib, "nvjpegGetImageInfo");
    a->decode = (fn_decode)dlsym(a->lib, "nvjpegDecode");
    return a->create_simple && a->destroy && a->state_create && a->state_destroy &&
           a->get_info && a->decode;
}

/* Appends "; <what>: <why>" to the list of places tried. */
static void tried(char *list, size_t n, const char *what, const char *why)
{
    size_t l = strlen(list);
    if (l < n)
        snprintf(list + l, n - l, "%s%s: %s", l ? "; " : "", what, why);
}

static int open_at(nvj_api *a, const char *path, char *out_path, size_t pathlen, char *list,
                   size_t listlen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        /* Keep the list short: a missing file is the expected miss. */
        tried(list, listlen, path, e && strstr(e, "No such file") ? "absent" : e ? e : "?");
        return 0;
    }
    a->lib = h;
    if (!resolve(a)) {
        tried(list, listlen, path, "opened but lacks the nvjpeg* entry points");
        dlclose(h);
        a->lib = NULL;
        return 0;
    }
    if (out_path && pathlen)
        snprintf(out_path, pathlen, "%s", path);
    return 1;
}

static int nvj_load(nvj_api *a, char *out_path, size_t pathlen, char *msg, size_t msglen)
{
    memset(a, 0, sizeof *a);
    char list[2048] = "";
    const char *env = getenv("CHUTE_NVJPEG");
    if (env && env[0]) {
        if (open_at(a, env, out_path, pathlen, list, sizeof list))
            return ST_OK;
        snprintf(msg, msglen, "nvJPEG not found (CHUTE_NVJPEG=%s: %s)", env, list);
        return ST_EUNSUPPORTED;
    }
    static const char *const sonames[] = {"libnvjpeg.so.13", "libnvjpeg.so.12",
                                          "libnvjpeg.so.11", "libnvjpeg.so"};
    char dir[4096] = "";
    Dl_info info;
    if (dladdr((void *)nvj_load, &info) && info.dli_fname) {
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            dir[0] = '\0';
    }
    const char *subs[] = {"", "/../../nvidia/nvjpeg/lib", "/../nvidia/nvjpeg/lib"};
    char path[4300];
    for (int d = 0; d < 4; d++) {
        for (int s = 0; s < 4; s++) {
            if (d < 3 && !dir[0])
                continue;
            if (d < 3)
                snprintf(path, sizeof path, "%s%s/%s", dir, subs[d], sonames[s]);
            else
                snprintf(path, sizeof path, "/usr/local/cuda/lib64/%s", sonames[s]);
            if (open_at(a, path, out_path, pathlen, list, sizeof list))
                return ST_OK;
        }
    }
    for (int s = 0; s < 4; s++)
        if (open_at(a, sonames[s], out_path, pathlen, list, sizeof list))
            return ST_OK;
    snprintf(msg, msglen,
             "nvJPEG not found: install the CUDA toolkit's libnvjpeg or `pip install "
             "nvidia-nvjpeg`, or set CHUTE_NVJPEG to the library's path (tried: %.1500s)",
             list);
    return ST_EUNSUPPORTED;
}

extern "C" int ch_nvjpeg_find(char *out_path, size_t pathlen, char *msg, size_t msglen)
{
    nvj_api a;
    int rc = nvj_load(&a, out_path, pathlen, msg, msglen);
    if (rc == ST_OK)
        dlclose(a.lib); /* RTLD_NODELETE: stays mapped, reopening is cheap */
    return rc;
}

/* ---- the resampler ------------------------------------------------------ */
struct axis_geom {
    double in0, scale, support;
    float ss;
    int32_t clip0, clip1;
};

static axis_geom make_axis(double in0, double in1, uint32_t out, int32_t clip0, int32_t clip1)
{
    axis_geom g;
    g.in0 = in0;
    g.scale = (in1 - in0) / out;
    double fscale = g.scale < 1.0 ? 1.0 : g.scale;
    g.support = fscale;
    g.ss = (float)(1.0 / fscale);
    g.clip0 = clip0;
    g.clip1 = clip1;
    return g;
}

__host__ __device__ __forceinline__ float tri_d(float x)
{
    x = fabsf(x);
    return x < 1.0f ? 1.0f - x : 0.0f;
}

/* Output i's first tap, count and the sum of its weights, as axis_taps. */
__host__ __device__ void taps(const axis_geom &g, uint32_t i, int32_t *xmin_out, int32_t *n_out,
                     double *center_out, double *sum_out)
{
    double center = g.in0 + (i + 0.5) * g.scale;
    int32_t xmin = (int32_t)fmax(floor(center - g.support + 0.5), (double)g.clip0);
    int32_t xmax = (int32_t)fmin(floor(center + g.support + 0.5), (double)g.clip1);
    if (xmax <= xmin) {
        xmin = (int32_t)fmin(fmax(floor(center), (double)g.clip0), (double)(g.clip1 - 1));
        xmax = xmin + 1;
    }
    int32_t n = xmax - xmin;
    double sum = 0;
    for (int32_t t = 0; t < n; t++)
        sum += tri_d((float)((xmin + t) - center + 0.5) * g.ss);
    *xmin_out = xmin;
    *n_out = n;
    *center_out = center;
    *sum_out = sum;
}

__host__ __device__ __forceinline__ float weight(const axis_geom &g, int32_t x, double center, double sum)
{
    if (sum <= 0)
        return 1.0f; /* axis_taps: a single tap of weight 1 */
    return (float)(tri_d((float)(x - center + 0.5) * g.ss) / sum);
}

/* Output pixel (ox, oy): src RGB8 (stride sstride) -> dst size x size RGB8.
 * Host and device: the host build of the same code (resize_u8_host) lets
 * the arithmetic be checked against resample.c where there is no GPU. */
__host__ __device__ void resize_pixel(const uint8_t *__restrict__ src, size_t sstride,
                                      const axis_geom &gx, const axis_geom &gy, int flip,
                                      uint32_t size, uint8_t *__restrict__ dst, uint32_t ox,
                                      uint32_t oy)
{
    int32_t x0, nx, y0, ny;
    double cx, sx, cy, sy;
    taps(gx, ox, &x0, &nx, &cx, &sx);
    taps(gy, oy, &y0, &ny, &cy, &sy);
    if (sx <= 0)
        nx = 1;
    if (sy <= 0)
        ny = 1;
    float acc[3] = {0, 0, 0};
    for (int32_t t = 0; t < ny; t++) {
        float wy = weight(gy, y0 + t, cy, sy);
        const uint8_t *row = src + (size_t)(y0 + t) * sstride;
        float r[3] = {0, 0, 0};
        for (int32_t u = 0; u < nx; u++) {
            float wx = weight(gx, x0 + u, cx, sx);
            const uint8_t *p = row + (size_t)(x0 + u) * 3;
            r[0] += wx * p[0];
            r[1] += wx * p[1];
            r[2] += wx * p[2];
        }
        acc[0] += wy * r[0];
        acc[1] += wy * r[1];
        acc[2] += wy * r[2];
    }
    uint32_t col = flip ? size - 1 - ox : ox;
    uint8_t *o = dst + ((size_t)oy * size + col) * 3;
    for (int c = 0; c < 3; c++) { /* as resample.c: + 0.5, truncate, clamp (NaN -> 0) */
        float v = acc[c] + 0.5f;
        o[c] = !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
    }
}

/* One thread per output pixel. */
__global__ void resize_kernel(const uint8_t *__restrict__ src, size_t sstride, axis_geom gx,
                              axis_geom gy, int flip, uint32_t size, uint8_t *__restrict__ dst)
{
    uint32_t ox = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t oy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ox < size && oy < size)
        resize_pixel(src, sstride, gx, gy, flip, size, dst, ox, oy);
}

static int check_crop(const ch_gpu_crop *c, uint32_t w, uint32_t h, char *msg, size_t msglen)
{
    if (!(c->x0 >= 0 && c->x0 < c->x1 && c->x1 <= w && c->y0 >= 0 && c->y0 < c->y1 &&
          c->y1 <= h) ||
        c->clip_x0 < 0 || c->clip_x0 >= c->clip_x1 || (uint32_t)c->clip_x1 > w ||
        c->clip_y0 < 0 || c->clip_y0 >= c->clip_y1 || (uint32_t)c->clip_y1 > h) {
        snprintf(msg, msglen, "crop (%g,%g)-(%g,%g) is not inside the %ux%u image", c->x0,
                 c->y0, c->x1, c->y1, w, h);
        return ST_EINVAL;
    }
    return ST_OK;
}

static void launch_resize(const uint8_t *src, size_t sstride, const ch_gpu_crop *c,
                          uint32_t size, uint8_t *dst, cudaStream_t s)
{
    axis_geom gx = make_axis(c->x0, c->x1, size, c->clip_x0, c->clip_x1);
    axis_geom gy = make_axis(c->y0, c->y1, size, c->clip_y0, c->clip_y1);
    dim3 blk(16, 16), grd((size + 15) / 16, (size + 15) / 16);
    resize_kernel<<<grd, blk, 0, s>>>(src, sstride, gx, gy, c->flip, size, dst);
}

#define CK(call, what)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            snprintf(msg, msglen, "device cuda:%d: %s: %s (%s)", dev, what,                    \
                     cudaGetErrorString(e_), cudaGetErrorName(e_));                           \
            rc = e_ == cudaErrorMemoryAllocation ? ST_ENOMEM : ST_EUNSUPPORTED;                \
            goto out;                                                                          \
        }                                                                                      \
    } while (0)

extern "C" int ch_gpu_resize_u8(int dev, const uint8_t *rgb, uint32_t w, uint32_t h,
                                const ch_gpu_crop *crop, uint32_t size, uint8_t *out, char *msg,
                                size_t msglen)
{
    int rc = check_crop(crop, w, h, msg, msglen);
    if (rc != ST_OK || size == 0)
        return rc != ST_OK ? rc : ST_EINVAL;
    uint8_t *d_src = NULL, *d_dst = NULL;
    size_t sbytes = (size_t)w * h * 3, dbytes = (size_t)size * size * 3;
    rc = ST_OK;
    CK(cudaSetDevice(dev), "cudaSetDevice");
    CK(cudaMalloc((void **)&d_src, sbytes), "cudaMalloc");
    CK(cudaMalloc((void **)&d_dst, dbytes), "cudaMalloc");
    CK(cudaMemcpy(d_src, rgb, sbytes, cudaMemcpyHostToDevice), "H2D copy");
    launch_resize(d_src, (size_t)w * 3, crop, size, d_dst, 0);
    CK(cudaGetLastError(), "resize kernel launch");
    CK(cudaMemcpy(out, d_dst, dbytes, cudaMemcpyDeviceToHost), "D2H copy");
out:
    cudaFree(d_src);
    cudaFree(d_dst);
    return rc;
}

extern "C" int ch_gpu_resize_u8_host(const uint8_t *rgb, uint32_t w, uint32_t h,
                                     const ch_gpu_crop *crop, uint32_t size, uint8_t *out,
                                     char *msg, size_t msglen)
{
    int rc = check_crop(crop, w, h, msg, msglen);
    if (rc != ST_OK || size == 0)
        return rc != ST_OK ? rc : ST_EINVAL;
    axis_geom gx = make_axis(crop->x0, crop->x1, size, crop->clip_x0, crop->clip_x1);
    axis_geom gy = make_axis(crop->y0, crop->y1, size, crop->clip_y0, crop->clip_y1);
    for (uint32_t oy = 0; oy < size; oy++)
        for (uint32_t ox = 0; ox < size; ox++)
            resize_pixel(rgb, (size_t)w * 3, gx, gy, crop->flip, size, out, ox, oy);
    return ST_OK;
}

/* ---- the decoder -------------------------------------------------------- */
extern "C" void ch_nvjpeg_close(ch_nvjpeg *j)
{
    if (!j)
        return;
    cudaSetDevice(j->device);
    cudaDeviceSynchronize(); /* the scratch may still be read by a queued resize */
    if (j->st)
        j->api.state_destroy(j->st);
    if (j->h)
        j->api.destroy(j->h);
    cudaFree(j->scratch);
    if (j->api.lib)
        dlclose(j->api.lib);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

extern "C" int ch_nvjpeg_open(int dev, uint64_t max_pixels, ch_nvjpeg **out, char *msg,
                              size_t msglen)
{
    *out = NULL;
    ch_nvjpeg *j = (ch_nvjpeg *)calloc(1, sizeof *j);
    if (!j) {
        snprintf(msg, msglen, "out of host memory");
        return ST_ENOMEM;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->device = dev;
    j->max_pixels = max_pixels ? max_pixels : (1ull << 28);
    int rc = nvj_load(&j->api, NULL, 0, msg, msglen);
    if (rc != ST_OK) {
        free(j);
        return rc;
    }
    rc = ST_OK;
    CK(cudaSetDevice(dev), "cudaSetDevice");
    if (j->api.create_simple(&j->h) != 0 || j->api.state_create(j->h, &j->st) != 0) {
        snprintf(msg, msglen, "device cuda:%d: nvjpegCreateSimple/nvjpegJpegStateCreate failed",
                 dev);
        rc = ST_EUNSUPPORTED;
        goto out;
    }
    *out = j;
    return ST_OK;
out:
    ch_nvjpeg_close(j);
    return rc;
}

static int decode_resize_locked(ch_nvjpeg *j, const uint8_t *const *jpegs,
                                const size_t *lens, const ch_gpu_crop *crops,
                                const uint32_t *pos, uint32_t n, uint32_t size,
                                uint8_t *dst_dev, size_t dst_stride, void *stream, char *msg,
                                size_t msglen)
{
    int dev = j->device, rc = ST_OK;
    cudaStream_t s = stream ? (cudaStream_t)stream : (cudaStream_t)0;
    CK(cudaSetDevice(dev), "cudaSetDevice");
    for (uint32_t i = 0; i < n; i++) {
        int nc = 0, ws[NVJ_MAX_COMPONENT] = {0}, hs[NVJ_MAX_COMPONENT] = {0};
        nvjpegChromaSubsampling_t css = 0;
        if (j->api.get_info(j->h, jpegs[i], lens[i], &nc, &css, ws, hs) != 0 || ws[0] <= 0 ||
            hs[0] <= 0) {
            snprintf(msg, msglen, "GPU-decoded sample %u: nvJPEG cannot read its header", i);
            return ST_ECORRUPT;
        }
        uint64_t px = (uint64_t)ws[0] * (uint64_t)hs[0];
        if (px > j->max_pixels) {
            snprintf(msg, msglen, "GPU-decoded sample %u: %dx%d is over max_pixels (%llu)", i,
                     ws[0], hs[0], (unsigned long long)j->max_pixels);
            return ST_ECORRUPT;
        }
        rc = check_crop(&crops[i], (uint32_t)ws[0], (uint32_t)hs[0], msg, msglen);
        if (rc != ST_OK)
            return rc;
        size_t need = (size_t)px * 3;
        if (need > j->scratch_len) {
            CK(cudaStreamSynchronize(s), "cudaStreamSynchronize");
            cudaFree(j->scratch);
            j->scratch = NULL;
            j->scratch_len = 0;
            CK(cudaMalloc((void **)&j->scratch, need), "cudaMalloc (nvJPEG scratch)");
            j->scratch_len = need;
        }
        nvjpegImage_t img;
        memset(&img, 0, sizeof img);
        img.channel[0] = j->scratch;
        img.pitch[0] = (size_t)ws[0] * 3;
        if (j->api.decode(j->h, j->st, jpegs[i], lens[i], NVJ_OUTPUT_RGBI, &img, s) != 0) {
            snprintf(msg, msglen, "GPU-decoded sample %u: nvjpegDecode failed", i);
            return ST_ECORRUPT;
        }
        launch_resize(j->scratch, (size_t)ws[0] * 3, &crops[i], size,
                      dst_dev + (size_t)(pos ? pos[i] : i) * dst_stride, s);
        CK(cudaGetLastError(), "resize kernel launch");
    }
out:
    return rc;
}

extern "C" int ch_nvjpeg_decode_resize(ch_nvjpeg *j, const uint8_t *const *jpegs,
                                       const size_t *lens, const ch_gpu_crop *crops,
                                       const uint32_t *pos, uint32_t n, uint32_t size,
                                       uint8_t *dst_dev, size_t dst_stride, void *stream,
                                       char *msg, size_t msglen)
{
    pthread_mutex_lock(&j->mu);
    int rc = decode_resize_locked(j, jpegs, lens, crops, pos, n, size, dst_dev, dst_stride,
                                  stream, msg, msglen);
    pthread_mutex_unlock(&j->mu);
    return rc;
}
