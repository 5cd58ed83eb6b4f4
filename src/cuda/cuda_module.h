/*
 * cuda_module.h — the C ABI between libchute and its optional CUDA module
 * (libchute_cuda.so, built from module.cu when nvcc is found).
 *
 * Why a separate module.  libchute must build, link and run on machines
 * with no CUDA at all, and one build must serve hosts with and without a
 * GPU.  So nothing CUDA is linked into libchute: the module links the CUDA
 * runtime statically (it needs only the driver, libcuda.so.1, at run time)
 * and exports exactly one symbol, chute_cuda_module_v1, which returns a
 * table of plain C functions.  libchute dlopens the module only when a
 * loader asks for a CUDA device (src/cuda/cuda_loader.c).  The table is
 * versioned (abi_version, and `size` so fields can be appended); this
 * header is the whole contract and uses no CUDA type: streams and events
 * travel as void * (cudaStream_t / cudaEvent_t), devices as ints.
 *
 * Every call returns a chute_status and, on failure, writes a one-line
 * reason (the CUDA error's name and text) into msg.  Calls on one context
 * for different slots may run concurrently (workers finish batches in
 * parallel, releases come from any thread); the CUDA runtime API is
 * thread-safe and each call sets its device first.
 */
#ifndef CHUTE_CUDA_MODULE_H
#define CHUTE_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CH_CUDA_ABI_VERSION 1u
#define CH_CUDA_SYMBOL "chute_cuda_module_v1"
/* The CUDA runtime's cudaStreamLegacy (the legacy default stream). */
#define CH_CUDA_STREAM_LEGACY ((void *)0x1)

typedef struct ch_cuda_ctx ch_cuda_ctx;
typedef struct ch_nvjpeg ch_nvjpeg;

/* A crop window in source-image coordinates, the same fields as
 * src/ops/ops.h's ch_crop (the resampler's taps are computed from them the
 * same way on the GPU; see nvjpeg.cu). */
typedef struct ch_gpu_crop {
    double x0, y0, x1, y1;
    int32_t clip_x0, clip_y0, clip_x1, clip_y1;
    int32_t flip;
} ch_gpu_crop;

/* What one loader's device side is: the host ring to pin and, per slot,
 * the batch to produce on the device. */
typedef struct ch_cuda_config {
    int device;
    void *host;               /* the loader's ring (mmapped, page aligned) */
    size_t host_len;
    uint32_t nslots;
    size_t slot_stride;       /* slot i's pixels start at host + i * slot_stride */
    uint32_t batch_size;
    uint32_t size;            /* host pixels: uint8 NHWC, size x size x 3 per sample */
    int dtype;                /* device output: chute_dtype */
    int layout;               /* CHUTE_LAYOUT_NCHW or _NHWC (never DEFAULT) */
    float mul[3], add[3];     /* float outputs: value = pixel * mul + add */
} ch_cuda_config;

typedef struct ch_cuda_module {
    uint32_t abi_version;     /* CH_CUDA_ABI_VERSION */
    uint32_t size;            /* sizeof(ch_cuda_module) of the module's build */
    /* CUDA devices visible; CHUTE_EUNSUPPORTED and a reason when none. */
    int (*device_count)(int *out_n, char *msg, size_t msglen);
    /* Pin the ring, create the stream, and allocate one input (uint8) and
     * one output buffer per slot, once. */
    int (*open)(const ch_cuda_config *cfg, ch_cuda_ctx **out, char *msg, size_t msglen);
    /* Slot `slot` holds `count` finished samples: queue the H2D copy and
     * the conversion kernel, then record the slot's ready event.  Waits
     * (on the device) for the slot's last release first. */
    int (*submit)(ch_cuda_ctx *c, uint32_t slot, uint32_t count, char *msg, size_t msglen);
    /* Block until the last H2D copy out of slot's host memory finished and
     * the consumer's stream passed the slot's last release (before workers
     * overwrite it). */
    int (*host_wait)(ch_cuda_ctx *c, uint32_t slot, char *msg, size_t msglen);
    /* Make `stream` wait for slot's ready event (NULL: legacy stream). */
    int (*stream_wait)(ch_cuda_ctx *c, uint32_t slot, void *stream, char *msg, size_t msglen);
    /* The consumer is done with slot once work queued on `stream` so far
     * completes (NULL: the legacy default stream). */
    int (*release)(ch_cuda_ctx *c, uint32_t slot, void *stream, char *msg, size_t msglen);
    /* Slot's device output buffer, the context's stream and slot's event. */
    void (*slot_info)(ch_cuda_ctx *c, uint32_t slot, void **out_dev, void **out_stream,
                      void **out_event);
    /* Wait for the stream, free every buffer, unpin the ring.  NULL ok. */
    void (*close)(ch_cuda_ctx *c);
    /* cudaMemGetInfo on `device` (tests: leaks across loaders). */
    int (*mem_info)(int device, size_t *out_free, size_t *out_total, char *msg, size_t msglen);
    /* Host-to-device copy rate of `bytes` from pinned or pageable memory,
     * best of a few copies, in GB/s (doctor). */
    int (*h2d_bandwidth)(int device, size_t bytes, int pinned, double *out_gbps, char *msg,
                         size_t msglen);
    /* ---- appended: nvJPEG (optional), present when size covers them ---- */
    /* Find and dlopen libnvjpeg (no device needed): $CHUTE_NVJPEG (that file
     * only), else beside this module, the Python wheel's nvidia/nvjpeg/lib
     * relative to it, /usr/local/cuda/lib64, then the loader's path.  On
     * success the file opened is written to out_path.  CHUTE_EUNSUPPORTED
     * with "nvJPEG not found ..." and every place tried otherwise. */
    int (*nvjpeg_find)(char *out_path, size_t pathlen, char *msg, size_t msglen);
    /* A decoder on `device`: the library, an nvJPEG handle and state, a
     * grow-only device scratch for one decoded image (max_pixels bounds it). */
    int (*nvjpeg_open)(int device, uint64_t max_pixels, ch_nvjpeg **out, char *msg,
                       size_t msglen);
    /* Decode n JPEGs (host memory, valid for the call) on the GPU and
     * resample crops[i] of each to size x size uint8 RGB at
     * dst_dev + pos[i] * dst_stride (pos NULL: i; device memory), queued on `stream` (NULL:
     * legacy); the host buffers may be reused when it returns.  A JPEG
     * nvJPEG cannot decode is CHUTE_ECORRUPT naming its index. */
    int (*nvjpeg_decode_resize)(ch_nvjpeg *j, const uint8_t *const *jpegs, const size_t *lens,
                                const ch_gpu_crop *crops, const uint32_t *pos, uint32_t n,
                                uint32_t size, uint8_t *dst_dev, size_t dst_stride,
                                void *stream, char *msg, size_t msglen);
    void (*nvjpeg_close)(ch_nvjpeg *j); /* NULL ok */
    /* The GPU resampler alone, host to host (tests: against the CPU
     * resampler on the same pixels): a w x h RGB8 image (stride w * 3). */
    int (*resize_u8)(int device, const uint8_t *rgb, uint32_t w, uint32_t h,
                     const ch_gpu_crop *crop, uint32_t size, uint8_t *out, char *msg,
                     size_t msglen);
    /* submit() for a batch of which n samples are still encoded JPEGs
     * (hybrid decode): after the H2D copy of the CPU-made samples, decode
     * and resample sample i into position pos[i] of the slot's device input,
     * then convert as submit() does.  The slot's h2d_done event is recorded
     * after the decodes, so host_wait also covers the JPEG bytes: the
     * caller may reuse them once host_wait(slot) returns.  Calls on one
     * ch_nvjpeg are serialised inside. */
    int (*submit_decoded)(ch_cuda_ctx *c, ch_nvjpeg *j, uint32_t slot, uint32_t count,
                          const uint8_t *const *jpegs, const size_t *lens,
                          const ch_gpu_crop *crops, const uint32_t *pos, uint32_t n, char *msg,
                          size_t msglen);
    /* resize_u8's per-pixel code compiled for the host (no device needed):
     * the GPU resampler's arithmetic, testable where there is no GPU. */
    int (*resize_u8_host)(const uint8_t *rgb, uint32_t w, uint32_t h, const ch_gpu_crop *crop,
                          uint32_t size, uint8_t *out, char *msg, size_t msglen);
} ch_cuda_module;

typedef const ch_cuda_module *(*ch_cuda_module_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
