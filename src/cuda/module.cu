/*
 * module.cu — libchute_cuda.so: the device side of a loader with
 * device="cuda[:N]" (the ABI is src/cuda/cuda_module.h).
 *
 * What it does per batch.  The CPU workers write uint8 NHWC pixels into
 * the loader's ring, which this module pinned with cudaHostRegister (no
 * second host buffer, no extra copy).  When a batch's last sample is done,
 * submit() queues on the loader's one stream: wait for the slot's last
 * release, copy the uint8 pixels to the slot's device input buffer (a
 * quarter of the bytes of float32), record h2d_done, run the conversion
 * kernel (dtype, layout, (x * mul + add) normalize) into the slot's device
 * output buffer, record ready.  The consumer waits on `ready` on its own
 * stream; releasing records `freed` on the consumer's stream, and the
 * next batch into that slot waits for it twice: on the device (the copy
 * into the slot's buffers) and on the host (host_wait, before a worker
 * rewrites the slot's pinned pixels and labels).
 *
 * Exactness.  The kernel computes pixel * mul + add with separate
 * round-to-nearest multiply and add (__fmul_rn, __fadd_rn: no FMA
 * contraction), and float16 with __float2half_rn, so each value equals
 * numpy's float32 (u8 * mul + add) of the same uint8 pixel bit for bit.
 * The flip stays on the CPU (it is free there: the resampler writes the
 * row mirrored), so the pixels are exactly the CPU uint8 path's.
 *
 * Hybrid decode (gpu_decode_share).  submit_decoded() is submit() with the
 * batch's still-encoded JPEGs: between the H2D copy and the conversion it
 * runs nvJPEG and the GPU resampler (nvjpeg.cu) into those positions of the
 * slot's uint8 input, and records h2d_done only after them, so host_wait
 * also guarantees nvJPEG has finished with the staged JPEG bytes.
 *
 * Memory.  Every device buffer is allocated once in open() and freed in
 * close(); nothing is allocated per batch.  The CUDA runtime is linked
 * statically (CMake: CUDA_RUNTIME_LIBRARY Static) and hidden by the
 * module's version script, so only chute_cuda_module_v1 is exported.
 */
#include "cuda_module.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <chrono>

/* chute.h's codes, without including the C header into C++ (the values
 * are the public ABI). */
enum { ST_OK = 0, ST_EINVAL = -1, ST_ENOMEM = -2, ST_EUNSUPPORTED = -9 };
enum { DT_F32 = 0, DT_U8 = 1, DT_F16 = 2 };
enum { LY_NCHW = 1, LY_NHWC = 2 };

struct ch_cuda_ctx {
    ch_cuda_config cfg;
    cudaStream_t stream;
    int registered;
    size_t in_bytes, out_bytes; /* per slot */
    uint8_t **d_in;
    void **d_out;               /* == d_in for uint8 NHWC (no kernel) */
    cudaEvent_t *h2d_done, *ready, *freed;
};

static int fail(cudaError_t e, int code, char *msg, size_t n, int dev, const char *what)
{
    if (msg && n)
        snprintf(msg, n, "device cuda:%d: %s: %s (%s)", dev, what, cudaGetErrorString(e),
                 cudaGetErrorName(e));
    return code;
}

static int code_for(cudaError_t e)
{
    return e == cudaErrorMemoryAllocation ? ST_ENOMEM : ST_EUNSUPPORTED;
}

#define TRY(call, what)                                                                         \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return fail(e_, code_for(e_), msg, msglen, dev, what);                             \
    } while (0)

static int mod_device_count(int *out_n, char *msg, size_t msglen)
{
    int n = 0, dev = 0;
    *out_n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
        snprintf(msg, msglen, "no CUDA device (%s)",
                 e == cudaSuccess ? "the driver lists none" : cudaGetErrorString(e));
        return ST_EUNSUPPORTED;
    }
    if (e == cudaErrorInsufficientDriver) {
        snprintf(msg, msglen, "no CUDA driver new enough for this module (%s)",
                 cudaGetErrorString(e));
        return ST_EUNSUPPORTED;
    }
    TRY(e, "cudaGetDeviceCount");
    *out_n = n;
    return ST_OK;
}

template <typename T> __device__ __forceinline__ T to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
template <> __device__ __forceinline__ __half to_out<__half>(float v)
{
    return __float2half_rn(v);
}

/* One thread per output element; in: uint8 NHWC; out: NCHW or NHWC. */
template <typename T>
__global__ void normalize_kernel(const uint8_t *__restrict__ in, T *__restrict__ out, size_t n,
                                 uint32_t S, int nchw, float m0, float m1, float m2, float a0,
                                 float a1, float a2)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    size_t plane = (size_t)S * S;
    size_t src, c;
    if (nchw) { /* i = ((b * 3 + c) * S + y) * S + x */
        size_t b = i / (3 * plane), r = i % (3 * plane);
        c = r / plane;
        src = (b * plane + r % plane) * 3 + c;
    } else {
        c = i % 3;
        src = i;
    }
    float m = c == 0 ? m0 : c == 1 ? m1 : m2;
    float a = c == 0 ? a0 : c == 1 ? a1 : a2;
    out[i] = to_out<T>(__fadd_rn(__fmul_rn((float)in[src], m), a));
}

/* uint8 NCHW: a transpose only (the CPU path ignores normalize for uint8). */
__global__ void transpose_u8_kernel(const uint8_t *__restrict__ in, uint8_t *__restrict__ out,
                                    size_t n, uint32_t S)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    size_t plane = (size_t)S * S;
    size_t b = i / (3 * plane), r = i % (3 * plane), c = r / plane;
    out[i] = in[(b * plane + r % plane) * 3 + c];
}

static void mod_close(ch_cuda_ctx *c)
{
    if (!c)
        return;
    cudaSetDevice(c->cfg.device);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    for (uint32_t i = 0; i < c->cfg.nslots; i++) {
        if (c->d_out && c->d_in && c->d_out[i] && c->d_out[i] != c->d_in[i])
            cudaFree(c->d_out[i]);
        if (c->d_in && c->d_in[i])
            cudaFree(c->d_in[i]);
        if (c->h2d_done && c->h2d_done[i])
            cudaEventDestroy(c->h2d_done[i]);
        if (c->ready && c->ready[i])
            cudaEventDestroy(c->ready[i]);
        if (c->freed && c->freed[i])
            cudaEventDestroy(c->freed[i]);
    }
    if (c->registered)
        cudaHostUnregister(c->cfg.host);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c->d_in);
    free(c->d_out);
    free(c->h2d_done);
    free(c->ready);
    free(c->freed);
    free(c);
}

static int mod_open(const ch_cuda_config *cfg, ch_cuda_ctx **out, char *msg, size_t msglen)
{
    *out = NULL;
    int dev = cfg->device;
    if (cfg->dtype < DT_F32 || cfg->dtype > DT_F16 || (cfg->layout != LY_NCHW && cfg->layout != LY_NHWC)) {
        snprintf(msg, msglen, "device cuda:%d: bad output dtype %d / layout %d", dev, cfg->dtype,
                 cfg->layout);
        return ST_EINVAL;
    }
    int n = 0;
    int rc = mod_device_count(&n, msg, msglen);
    if (rc != ST_OK)
        return rc;
    if (dev < 0 || dev >= n) {
        snprintf(msg, msglen, "device cuda:%d: no such device (%d CUDA device%s: cuda:0..cuda:%d)",
                 dev, n, n == 1 ? "" : "s", n - 1);
        return ST_EINVAL;
    }
    TRY(cudaSetDevice(dev), "cudaSetDevice");
    ch_cuda_ctx *c = (ch_cuda_ctx *)calloc(1, sizeof *c);
    if (!c) {
        snprintf(msg, msglen, "device cuda:%d: out of host memory", dev);
        return ST_ENOMEM;
    }
    c->cfg = *cfg;
    size_t esz = cfg->dtype == DT_F32 ? 4 : cfg->dtype == DT_F16 ? 2 : 1;
    c->in_bytes = (size_t)cfg->batch_size * cfg->size * cfg->size * 3;
    c->out_bytes = c->in_bytes * esz;
    uint32_t ns = cfg->nslots;
    c->d_in = (uint8_t **)calloc(ns, sizeof *c->d_in);
    c->d_out = (void **)calloc(ns, sizeof *c->d_out);
    c->h2d_done = (cudaEvent_t *)calloc(ns, sizeof(cudaEvent_t));
    c->ready = (cudaEvent_t *)calloc(ns, sizeof(cudaEvent_t));
    c->freed = (cudaEvent_t *)calloc(ns, sizeof(cudaEvent_t));
    if (!c->d_in || !c->d_out || !c->h2d_done || !c->ready || !c->freed) {
        mod_close(c);
        snprintf(msg, msglen, "device cuda:%d: out of host memory", dev);
        return ST_ENOMEM;
    }
#define TRYC(call, what)                                                                        \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            mod_close(c);                                                              \
            return fail(e_, code_for(e_), msg, msglen, dev, what);                             \
        }                                                                                      \
    } while (0)
    TRYC(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    TRYC(cudaHostRegister(cfg->host, cfg->host_len, cudaHostRegisterDefault),
         "cudaHostRegister (pinning the batch ring)");
    c->registered = 1;
    int same = cfg->dtype == DT_U8 && cfg->layout == LY_NHWC;
    for (uint32_t i = 0; i < ns; i++) {
        TRYC(cudaMalloc((void **)&c->d_in[i], c->in_bytes), "cudaMalloc (batch input)");
        if (same)
            c->d_out[i] = c->d_in[i];
        else
            TRYC(cudaMalloc(&c->d_out[i], c->out_bytes), "cudaMalloc (batch output)");
        TRYC(cudaEventCreateWithFlags(&c->h2d_done[i], cudaEventDisableTiming), "cudaEventCreate");
        TRYC(cudaEventCreateWithFlags(&c->ready[i], cudaEventDisableTiming), "cudaEventCreate");
        TRYC(cudaEventCreateWithFlags(&c->freed[i], cudaEventDisableTiming), "cudaEventCreate");
    }
#undef TRYC
    *out = c;
    return ST_OK;
}

extern "C" int ch_nvjpeg_decode_resize(ch_nvjpeg *j, const uint8_t *const *jpegs,
                                       const size_t *lens, const ch_gpu_crop *crops,
                                       const uint32_t *pos, uint32_t n, uint32_t size,
                                       uint8_t *dst_dev, size_t dst_stride, void *stream,
                                       char *msg, size_t msglen);

/* The batch's GPU-decoded samples (hybrid decode), or none (j NULL). */
typedef struct gpu_part {
    ch_nvjpeg *j;
    const uint8_t *const *jpegs;
    const size_t *lens;
    const ch_gpu_crop *crops;
    const uint32_t *pos;
    uint32_t n;
} gpu_part;

static int submit_impl(ch_cuda_ctx *c, uint32_t slot, uint32_t count, const gpu_part *g,
                       char *msg, size_t msglen)
{
    int dev = c->cfg.device;
    if (slot >= c->cfg.nslots || count > c->cfg.batch_size) {
        snprintf(msg, msglen, "device cuda:%d: slot %u / count %u out of range", dev, slot, count);
        return ST_EINVAL;
    }
    TRY(cudaSetDevice(dev), "cudaSetDevice");
    const uint32_t S = c->cfg.size;
    size_t elems = (size_t)count * S * S * 3;
    const uint8_t *host = (const uint8_t *)c->cfg.host + (size_t)slot * c->cfg.slot_stride;
    TRY(cudaStreamWaitEvent(c->stream, c->freed[slot], 0), "cudaStreamWaitEvent (slot release)");
    TRY(cudaMemcpyAsync(c->d_in[slot], host, elems, cudaMemcpyHostToDevice, c->stream),
        "cudaMemcpyAsync (batch to device)");
    if (g && g->n) {
        for (uint32_t i = 0; i < g->n; i++)
            if (g->pos[i] >= count) {
                snprintf(msg, msglen, "device cuda:%d: GPU-decoded position %u >= count %u",
                         dev, g->pos[i], count);
                return ST_EINVAL;
            }
        int rc = ch_nvjpeg_decode_resize(g->j, g->jpegs, g->lens, g->crops, g->pos, g->n, S,
                                         c->d_in[slot], (size_t)S * S * 3, c->stream, msg,
                                         msglen);
        if (rc != ST_OK)
            return rc;
    }
    /* After the decodes: host_wait then also covers the JPEG bytes. */
    TRY(cudaEventRecord(c->h2d_done[slot], c->stream), "cudaEventRecord");
    if (elems && c->d_out[slot] != (void *)c->d_in[slot]) {
        const unsigned T = 256;
        unsigned blocks = (unsigned)((elems + T - 1) / T);
        int nchw = c->cfg.layout == LY_NCHW;
        const float *m = c->cfg.mul, *a = c->cfg.add;
        if (c->cfg.dtype == DT_F32)
            normalize_kernel<float><<<blocks, T, 0, c->stream>>>(
                c->d_in[slot], (float *)c->d_out[slot], elems, S, nchw, m[0], m[1], m[2], a[0],
                a[1], a[2]);
        else if (c->cfg.dtype == DT_F16)
            normalize_kernel<__half><<<blocks, T, 0, c->stream>>>(
                c->d_in[slot], (__half *)c->d_out[slot], elems, S, nchw, m[0], m[1], m[2], a[0],
                a[1], a[2]);
        else
            transpose_u8_kernel<<<blocks, T, 0, c->stream>>>(c->d_in[slot],
                                                             (uint8_t *)c->d_out[slot], elems, S);
        TRY(cudaGetLastError(), "conversion kernel launch");
    }
    TRY(cudaEventRecord(c->ready[slot], c->stream), "cudaEventRecord");
    return ST_OK;
}

static int mod_submit(ch_cuda_ctx *c, uint32_t slot, uint32_t count, char *msg, size_t msglen)
{
    return submit_impl(c, slot, count, NULL, msg, msglen);
}

static int mod_submit_decoded(ch_cuda_ctx *c, ch_nvjpeg *j, uint32_t slot, uint32_t count,
                              const uint8_t *const *jpegs, const size_t *lens,
                              const ch_gpu_crop *crops, const uint32_t *pos, uint32_t n,
                              char *msg, size_t msglen)
{
    gpu_part g = {j, jpegs, lens, crops, pos, n};
    return submit_impl(c, slot, count, j ? &g : NULL, msg, msglen);
}

static int mod_host_wait(ch_cuda_ctx *c, uint32_t slot, char *msg, size_t msglen)
{
    int dev = c->cfg.device;
    if (slot >= c->cfg.nslots)
        return ST_EINVAL;
    TRY(cudaEventSynchronize(c->h2d_done[slot]), "cudaEventSynchronize (H2D copy)");
    /* And the consumer's stream has passed the slot's release: an async
     * copy of the labels (pinned too) queued before the release is done. */
    TRY(cudaEventSynchronize(c->freed[slot]), "cudaEventSynchronize (slot release)");
    return ST_OK;
}

static int mod_stream_wait(ch_cuda_ctx *c, uint32_t slot, void *stream, char *msg, size_t msglen)
{
    int dev = c->cfg.device;
    if (slot >= c->cfg.nslots)
        return ST_EINVAL;
    TRY(cudaSetDevice(dev), "cudaSetDevice");
    cudaStream_t s = stream ? (cudaStream_t)stream : cudaStreamLegacy;
    TRY(cudaStreamWaitEvent(s, c->ready[slot], 0), "cudaStreamWaitEvent (batch ready)");
    return ST_OK;
}

static int mod_release(ch_cuda_ctx *c, uint32_t slot, void *stream, char *msg, size_t msglen)
{
    int dev = c->cfg.device;
    if (slot >= c->cfg.nslots)
        return ST_EINVAL;
    TRY(cudaSetDevice(dev), "cudaSetDevice");
    cudaStream_t s = stream ? (cudaStream_t)stream : cudaStreamLegacy;
    TRY(cudaEventRecord(c->freed[slot], s), "cudaEventRecord (batch release)");
    return ST_OK;
}

static void mod_slot_info(ch_cuda_ctx *c, uint32_t slot, void **dev, void **stream, void **event)
{
    int ok = c && slot < c->cfg.nslots;
    if (dev)
        *dev = ok ? c->d_out[slot] : NULL;
    if (stream)
        *stream = ok ? (void *)c->stream : NULL;
    if (event)
        *event = ok ? (void *)c->ready[slot] : NULL;
}

static int mod_mem_info(int dev, size_t *out_free, size_t *out_total, char *msg, size_t msglen)
{
    int n = 0;
    int rc = mod_device_count(&n, msg, msglen);
    if (rc != ST_OK)
        return rc;
    TRY(cudaSetDevice(dev), "cudaSetDevice");
    TRY(cudaMemGetInfo(out_free, out_total), "cudaMemGetInfo");
    return ST_OK;
}

static int mod_h2d_bandwidth(int dev, size_t bytes, int pinned, double *out_gbps, char *msg,
                             size_t msglen)
{
    *out_gbps = 0;
    int n = 0;
    int rc = mod_device_count(&n, msg, msglen);
    if (rc != ST_OK)
        return rc;
    TRY(cudaSetDevice(dev), "cudaSetDevice");
    void *h = NULL, *d = NULL;
    cudaError_t e = pinned ? cudaMallocHost(&h, bytes) : cudaSuccess;
    if (!pinned && !(h = malloc(bytes)))
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cudaMalloc(&d, bytes);
    if (e == cudaSuccess)
        memset(h, 1, bytes); /* fault the pages in: a first touch is not a copy cost */
    double best = 0;
    for (int rep = 0; rep < 5 && e == cudaSuccess; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        e = cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
        auto t1 = std::chrono::steady_clock::now();
        double s = std::chrono::duration<double>(t1 - t0).count();
        if (e == cudaSuccess && rep > 0 && s > 0 && bytes / s / 1e9 > best)
            best = bytes / s / 1e9;
    }
    if (d)
        cudaFree(d);
    if (h)
        pinned ? (void)cudaFreeHost(h) : free(h);
    TRY(e, pinned ? "H2D copy from pinned memory" : "H2D copy from pageable memory");
    *out_gbps = best;
    return ST_OK;
}

/* nvjpeg.cu */
extern "C" int ch_nvjpeg_find(char *out_path, size_t pathlen, char *msg, size_t msglen);
extern "C" int ch_nvjpeg_open(int dev, uint64_t max_pixels, ch_nvjpeg **out, char *msg,
                              size_t msglen);
extern "C" void ch_nvjpeg_close(ch_nvjpeg *j);
extern "C" int ch_gpu_resize_u8_host(const uint8_t *rgb, uint32_t w, uint32_t h,
                                     const ch_gpu_crop *crop, uint32_t size, uint8_t *out,
                                     char *msg, size_t msglen);
extern "C" int ch_gpu_resize_u8(int dev, const uint8_t *rgb, uint32_t w, uint32_t h,
                                const ch_gpu_crop *crop, uint32_t size, uint8_t *out, char *msg,
                                size_t msglen);

static const ch_cuda_module the_module = {
    CH_CUDA_ABI_VERSION, sizeof(ch_cuda_module), mod_device_count, mod_open, mod_submit,
    mod_host_wait,       mod_stream_wait,        mod_release,      mod_slot_info, mod_close,
    mod_mem_info,        mod_h2d_bandwidth,
    ch_nvjpeg_find,      ch_nvjpeg_open,         ch_nvjpeg_decode_resize, ch_nvjpeg_close,
    ch_gpu_resize_u8,    mod_submit_decoded,     ch_gpu_resize_u8_host,
};

extern "C" __attribute__((visibility("default"))) const ch_cuda_module *chute_cuda_module_v1(void)
{
    return &the_module;
}
