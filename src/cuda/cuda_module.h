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
} ch_cuda_module;

typedef const ch_cuda_module *(*ch_cuda_module_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
