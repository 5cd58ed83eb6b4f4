/*
 * test_cuda_gpu.c — the CUDA backend on a GPU: device batches against the
 * CPU path, the stream/event contract, and no device memory kept across
 * loaders.  Each test skips (77) where no CUDA device is usable (CI here),
 * so the file is built and registered everywhere the module is, ready
 * for a GPU host.  Linked against libchute and the CUDA runtime (the
 * test itself copies device memory back to compare it); compiled with
 * -ffp-contract=off so the host reference below is plain float32
 * multiply-then-add, as numpy computes it.
 *
 * The references are the CPU path's own outputs, made by a second loader
 * with the same seed on the host: its uint8 NHWC batch (then
 * pixel * mul + add in float32, mul = 1 / (255 std), add = -mean / std,
 * the constants chute.h documents) must match the device float32 batch
 * to 1e-6, and its float32 batch (normalized before rounding to uint8)
 * to 0.5 / (255 std).
 */
#include "unit.h"

#include "chute.h"

#include "cuda/cuda_module.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>

static char g_tree[4096];
static const float MEAN[3] = {0.485f, 0.456f, 0.406f}, STD[3] = {0.229f, 0.224f, 0.225f};

static int have_data(void)
{
    if (!g_data)
        return 0;
    snprintf(g_tree, sizeof g_tree, "%s/tree", g_data);
    char ready[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    return access(ready, F_OK) == 0;
}

/* 0 when a loader can use cuda:0 here; else the skip reason in why. */
static int gpu_usable(chute_dataset *ds, char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0");
        return -1;
    }
    chute_loader_options o = {0};
    o.batch_size = 4;
    o.size = 16;
    o.workers = 1;
    o.device = "cuda";
    chute_loader *ld = NULL;
    chute_error err = {0};
    if (chute_loader_create(ds, &o, &ld, &err) != CHUTE_OK) {
        snprintf(why, n, "cuda loader: %s", err.message);
        return -1;
    }
    chute_loader_destroy(ld);
    return 0;
}

#define NEED_GPU(ds)                                                                      \
    do {                                                                                  \
        if (!have_data())                                                                 \
            SKIP("fixture data missing (run the data_setup test)");                       \
        if (!((ds) = open_tree()))                                                        \
            return 1;                                                                     \
        char why_[600];                                                                   \
        if (gpu_usable((ds), why_, sizeof why_) != 0) {                                   \
            chute_dataset_close(ds);                                                      \
            SKIP("%s", why_);                                                             \
        }                                                                                 \
    } while (0)

static chute_dataset *open_tree(void)
{
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) != CHUTE_OK)
        fprintf(stderr, "open %s: %s\n", g_tree, err.message);
    return ds;
}

static chute_loader *make(chute_dataset *ds, const char *device, chute_dtype dt, chute_layout ly,
                          uint32_t bs)
{
    chute_loader_options o = {0};
    o.batch_size = bs;
    o.size = 48;
    o.workers = 3;
    o.seed = 7;
    o.dtype = dt;
    o.layout = ly;
    o.device = device;
    chute_loader *ld = NULL;
    chute_error err = {0};
    if (chute_loader_create(ds, &o, &ld, &err) != CHUTE_OK)
        fprintf(stderr, "create (%s): %s\n", device ? device : "cpu", err.message);
    return ld;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, x;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return s ? -v : v;
    }
    x = e == 31 ? s | 0x7F800000u | (m << 13) : s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Element (n, c, y, x) of a batch in its layout, as float. */
static float elem(const void *p, chute_dtype dt, chute_layout ly, size_t S, size_t n, int c,
                  size_t y, size_t x)
{
    size_t i = ly == CHUTE_LAYOUT_NCHW ? ((n * 3 + (size_t)c) * S + y) * S + x
                                       : ((n * S + y) * S + x) * 3 + (size_t)c;
    if (dt == CHUTE_DTYPE_FLOAT32)
        return ((const float *)p)[i];
    if (dt == CHUTE_DTYPE_FLOAT16)
        return f16_to_f32(((const uint16_t *)p)[i]);
    return ((const uint8_t *)p)[i];
}

/* One configuration: every batch of an epoch, device vs CPU uint8 (+
 * float32 normalize here) and vs the CPU path of the same dtype. */
static int compare_epoch(chute_dataset *ds, chute_dtype dt, chute_layout ly)
{
    chute_loader *g = make(ds, "cuda", dt, ly, 16);
    chute_loader *u8 = make(ds, NULL, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NHWC, 16);
    chute_loader *cpu = make(ds, NULL, dt, ly, 16);
    CHECK(g && u8 && cpu, "loaders");
    const size_t S = 48;
    float mul[3], add[3];
    for (int c = 0; c < 3; c++) {
        mul[c] = 1.0f / (255.0f * STD[c]);
        add[c] = -MEAN[c] / STD[c];
    }
    double max_u8 = 0, max_cpu = 0;
    void *host = NULL;
    chute_batch *bg, *bu, *bc;
    int batches = 0;
    while (chute_loader_next(g, &bg) == CHUTE_OK) {
        CHECK(chute_loader_next(u8, &bu) == CHUTE_OK, "u8 next");
        CHECK(chute_loader_next(cpu, &bc) == CHUTE_OK, "cpu next");
        chute_batch_view vg, vu, vc;
        chute_batch_view_get(bg, &vg);
        chute_batch_view_get(bu, &vu);
        chute_batch_view_get(bc, &vc);
        CHECK(vg.device_type == 2 && vg.device_id == 0 && vg.cuda_stream && vg.cuda_event,
              "device view: type %d", vg.device_type);
        CHECK(vg.dtype == dt && vg.layout == ly && vg.count == vu.count &&
                  vg.nbytes == vc.nbytes,
              "device view: dtype %d layout %d nbytes %zu vs %zu", vg.dtype, vg.layout,
              vg.nbytes, vc.nbytes);
        for (int k = 0; k < 4; k++)
            CHECK(vg.shape[k] == vc.shape[k] && vg.strides[k] == vc.strides[k], "shape[%d]", k);
        CHECK(memcmp(vg.labels, vc.labels, vg.count * 8) == 0 &&
                  memcmp(vg.indices, vc.indices, vg.count * 8) == 0,
              "labels/indices differ");
        /* The pinned staging pixels are the CPU uint8 path's, byte for byte. */
        CHECK(memcmp(vg.host_data, vu.data, vu.nbytes) == 0, "host_data != CPU uint8 batch");
        free(host);
        host = malloc(vg.nbytes);
        CHECK(host, "malloc");
        CHECK(cudaEventSynchronize((cudaEvent_t)vg.cuda_event) == cudaSuccess, "event sync");
        CHECK(cudaMemcpy(host, vg.data, vg.nbytes, cudaMemcpyDeviceToHost) == cudaSuccess,
              "D2H");
        for (size_t n = 0; n < vg.count; n++)
            for (int c = 0; c < 3; c++)
                for (size_t y = 0; y < S; y++)
                    for (size_t x = 0; x < S; x++) {
                        float d = elem(host, dt, ly, S, n, c, y, x);
                        float px = elem(vu.data, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NHWC, S, n, c, y, x);
                        /* float32: multiply, then add (no FMA: -ffp-contract=off) */
                        float ref = dt == CHUTE_DTYPE_UINT8 ? px : px * mul[c] + add[c];
                        double e1 = fabs((double)d - (double)ref);
                        double e2 = fabs((double)d - (double)elem(vc.data, dt, ly, S, n, c, y, x));
                        if (e1 > max_u8)
                            max_u8 = e1;
                        if (e2 > max_cpu)
                            max_cpu = e2;
                    }
        chute_batch_release(bg);
        chute_batch_release(bu);
        chute_batch_release(bc);
        batches++;
    }
    free(host);
    chute_loader_destroy(g);
    chute_loader_destroy(u8);
    chute_loader_destroy(cpu);
    /* float16 keeps 11 significant bits: one unit in the last place of
     * |v| < 4 is 2^-9 */
    double tol = dt == CHUTE_DTYPE_FLOAT16 ? 1.0 / 512 : dt == CHUTE_DTYPE_UINT8 ? 0 : 1e-6;
    double tol_cpu = dt == CHUTE_DTYPE_UINT8 ? 0 : 0.5 / (255 * 0.224) + tol;
    fprintf(stderr, "dtype %d layout %d: %d batches, max |device - cpu uint8 normalized| %.3g, "
                    "max |device - cpu path| %.3g\n",
            dt, ly, batches, max_u8, max_cpu);
    CHECK(batches > 0, "no batches");
    CHECK(max_u8 <= tol, "device vs CPU uint8 + float32 normalize: %.3g > %.3g", max_u8, tol);
    CHECK(max_cpu <= tol_cpu, "device vs CPU path: %.3g > %.3g", max_cpu, tol_cpu);
    return 0;
}

TEST(gpu_batches_match_cpu_path)
{
    chute_dataset *ds;
    NEED_GPU(ds);
    int rc = compare_epoch(ds, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW);
    if (!rc)
        rc = compare_epoch(ds, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NHWC);
    if (!rc)
        rc = compare_epoch(ds, CHUTE_DTYPE_FLOAT16, CHUTE_LAYOUT_NCHW);
    if (!rc)
        rc = compare_epoch(ds, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NCHW);
    if (!rc)
        rc = compare_epoch(ds, CHUTE_DTYPE_UINT8, CHUTE_LAYOUT_NHWC);
    chute_dataset_close(ds);
    return rc;
}

static void CUDART_CB sleep_host(void *arg) { usleep((useconds_t)(uintptr_t)arg); }

/* The contract of chute.h's "CUDA batches": a consumer stream made to
 * wait with chute_batch_use_stream sees the whole batch; releasing right
 * after queueing the read is safe, because chute's next copy into that
 * slot waits for the consumer stream's work (here held back 300 ms by a
 * host callback while the loader cycles every slot of its ring). */
TEST(gpu_stream_event_contract)
{
    chute_dataset *ds;
    NEED_GPU(ds);
    chute_loader *ref = make(ds, NULL, CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW, 8);
    chute_loader *g = make(ds, "cuda", CHUTE_DTYPE_FLOAT32, CHUTE_LAYOUT_NCHW, 8);
    CHECK(ref && g, "loaders");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    chute_batch *b, *br;
    CHECK(chute_loader_next(g, &b) == CHUTE_OK, "next");
    chute_batch_view v;
    chute_batch_view_get(b, &v);
    size_t nb = v.nbytes;
    float *out = NULL;
    CHECK(cudaMallocHost((void **)&out, nb) == cudaSuccess, "pinned out");
    memset(out, 0xff, nb);
    CHECK(chute_batch_use_stream(b, s) == CHUTE_OK, "use_stream");
    CHECK(cudaLaunchHostFunc(s, sleep_host, (void *)(uintptr_t)300000) == cudaSuccess, "hostfn");
    CHECK(cudaMemcpyAsync(out, v.data, nb, cudaMemcpyDeviceToHost, s) == cudaSuccess, "D2H");
    chute_batch_release(b); /* ordered after the D2H above, on s */
    /* Cycle the ring (prefetch 2 + max_held 2 = 4 slots) several times. */
    for (int i = 0; i < 8; i++) {
        chute_batch *x;
        if (chute_loader_next(g, &x) != CHUTE_OK)
            break;
        chute_batch_release(x);
    }
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    /* What was read equals the CPU path's first batch, to the uint8
     * rounding (the device batch is made from rounded pixels). */
    CHECK(chute_loader_next(ref, &br) == CHUTE_OK, "ref next");
    chute_batch_view vr;
    chute_batch_view_get(br, &vr);
    CHECK(vr.nbytes == nb, "sizes");
    double worst = 0;
    for (size_t i = 0; i < nb / 4; i++) {
        double d = fabs((double)out[i] - ((const float *)vr.data)[i]);
        if (!(d <= worst))
            worst = d;
    }
    chute_batch_release(br);
    fprintf(stderr, "max |read on consumer stream - cpu| = %.3g\n", worst);
    CHECK(worst <= 0.5 / (255 * 0.224) + 1e-6, "consumer stream saw another batch: %.3g", worst);
    cudaFreeHost(out);
    cudaStreamDestroy(s);
    chute_loader_destroy(g);
    chute_loader_destroy(ref);
    chute_dataset_close(ds);
    return 0;
}

/* 100 loaders created, used and destroyed: cudaMemGetInfo's free memory
 * is back where it was (the context's own memory is made by the first). */
TEST(gpu_no_device_memory_leak_over_100_loaders)
{
    chute_dataset *ds;
    NEED_GPU(ds);
    size_t free0 = 0, free1 = 0, total = 0;
    CHECK(cudaSetDevice(0) == cudaSuccess, "set device");
    CHECK(cudaMemGetInfo(&free0, &total) == cudaSuccess, "mem info");
    for (int i = 0; i < 100; i++) {
        chute_loader *g = make(ds, "cuda", i % 2 ? CHUTE_DTYPE_FLOAT16 : CHUTE_DTYPE_FLOAT32,
                               CHUTE_LAYOUT_NCHW, 32);
        CHECK(g, "loader %d", i);
        chute_batch *b;
        CHECK(chute_loader_next(g, &b) == CHUTE_OK, "next %d", i);
        chute_batch_release(b);
        if (i % 3 == 0) { /* and some destroyed while holding nothing mid-epoch */
            CHECK(chute_loader_next(g, &b) == CHUTE_OK, "next %d", i);
            chute_batch_release(b);
        }
        chute_loader_destroy(g);
    }
    CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess, "mem info");
    fprintf(stderr, "free device memory before %zu, after %zu\n", free0, free1);
    /* A loader here holds 4 slots x (32 x 48 x 48 x 3) x (1 + 4) bytes =
     * 4.4 MiB; 100 leaked would be 440 MiB.  Allow 2 MiB of driver noise. */
    CHECK(free1 + (2u << 20) >= free0, "lost %zu bytes over 100 loaders", free0 - free1);
    chute_dataset_close(ds);
    return 0;
}

/* doctor's H2D measurement (the module's h2d_bandwidth): both rates are
 * measured and positive, and pinned memory is not slower than pageable. */
TEST(gpu_h2d_bandwidth_pinned_vs_pageable)
{
    chute_dataset *ds;
    NEED_GPU(ds);
    chute_dataset_close(ds);
    const char *path = getenv("CHUTE_TEST_CUDA_MODULE");
    CHECK(path && path[0], "CHUTE_TEST_CUDA_MODULE is not set");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(h, "dlopen %s: %s", path, dlerror());
    ch_cuda_module_fn fn = (ch_cuda_module_fn)dlsym(h, CH_CUDA_SYMBOL);
    CHECK(fn, "no %s", CH_CUDA_SYMBOL);
    const ch_cuda_module *m = fn();
    double pinned = 0, pageable = 0;
    char msg[512] = "";
    CHECK(m->h2d_bandwidth(0, 64u << 20, 1, &pinned, msg, sizeof msg) == CHUTE_OK, "%s", msg);
    CHECK(m->h2d_bandwidth(0, 64u << 20, 0, &pageable, msg, sizeof msg) == CHUTE_OK, "%s", msg);
    fprintf(stderr, "H2D: pinned %.2f GB/s, pageable %.2f GB/s\n", pinned, pageable);
    CHECK(pinned > 0.5 && pageable > 0.1, "implausible rates");
    CHECK(pinned >= 0.9 * pageable, "pinned %.2f slower than pageable %.2f", pinned, pageable);
    return 0;
}

UNIT_MAIN
