/*
 * cuda_loader.c — libchute's side of the optional CUDA backend: finding
 * and dlopening libchute_cuda.so, and the loader's device bookkeeping.
 *
 * Why dlopen.  One libchute must run on hosts with and without a GPU, and
 * must not fail to load where there is no driver; so it links nothing of
 * CUDA and opens the module only when a loader asks for device
 * "cuda[:N]".  The search: $CHUTE_CUDA_MODULE when set (that file and no
 * other: a test or a user pointing at a missing file gets a message, not
 * a different module); else libchute_cuda.so in the directory of the
 * binary holding this code (libchute.so, or the CLI / Python extension
 * that link it statically) and its lib/ subdirectory (the Python package's
 * layout); else the dynamic loader's path.  It is opened RTLD_NODELETE:
 * the module carries a static CUDA runtime whose exit handlers must not
 * point into unmapped code, so a dlclose keeps it mapped.
 *
 * The messages name what is missing, in the order a user can fix it:
 * the module ("not built" or "not found"), the driver (libcuda.so.1),
 * then the device.  Each is CHUTE_EUNSUPPORTED, and nothing else about the
 * loader or the library changes.
 *
 * What the loader delegates here: the options the user asked for (dtype,
 * layout, normalize) are kept for the GPU kernel while the CPU workers
 * make uint8 NHWC (a quarter of float32's bytes cross PCIe); the pinned
 * ring; the submit when a batch's last sample is done; the per-slot
 * release stream.  Per-slot state is written only by whoever owns the
 * slot at that moment (the worker finishing it, the consumer holding it),
 * so nothing here needs a lock.  No global state: each loader opens its
 * own module handle (dlopen counts references).
 *
 * Hybrid decode (gpu_decode_share = S > 0).  The first ceil(batch * S /
 * 100) positions of every batch may be decoded by nvJPEG instead of the
 * CPU: the worker making such a position parses the header and draws the
 * crop as always (so the sample's geometry, and determinism, are the CPU
 * path's), then ch_cuda_loader_route copies the JPEG's bytes into the
 * slot's staging (gpu_n x 256 KiB, allocated once; an atomic bump) and
 * skips the decode; the position is found from the destination pointer.
 * Grey and colour JPEGs go to the GPU; CMYK, other formats, and JPEGs that
 * do not fit in what is left of the staging are decoded on the CPU as
 * before.  The worker that finishes the batch gathers the routed samples
 * and submit_decoded queues, after the H2D copy of the CPU-made ones, the
 * nvJPEG decode and the GPU resampler into those positions, then the
 * conversion.  Not with decoded_cache_bytes (those loaders decode on the
 * CPU: the cache holds CPU-decoded frames).  A JPEG nvJPEG fails on fails
 * its batch (CHUTE_ECORRUPT naming the position): on_corrupt=skip applies
 * to the CPU-decoded samples only.  The split is a fixed share; choosing it
 * by measurement ("auto") is left to the caller (bench/gpu measures
 * images/s per share).
 */
#define _GNU_SOURCE
#include "cuda_loader.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ch_cuda_loader {
    const ch_cuda_module *m;
    void *handle;
    ch_cuda_ctx *ctx;
    int device;
    pid_t pid;                /* a fork() child must not touch the parent's context */
    chute_dtype dtype;        /* what the device batch is */
    chute_layout layout;
    float mul[3], add[3];
    uint32_t size, batch;
    uint32_t nslots;
    void **release_stream;    /* per slot; written by the slot's holder */
    /* Hybrid decode (gpu_decode_share): the first gpu_n positions of each
     * batch may be routed to nvJPEG (see "Hybrid decode" above). */
    uint32_t share, gpu_n;
    uint64_t max_pixels;
    ch_nvjpeg *nj;
    uint8_t *ring;
    size_t slot_stride, sample_bytes;
    struct gpu_slot *gs;      /* per slot */
};

/* One routed sample: its JPEG's bytes at stage + off, its crop. */
typedef struct gpu_entry {
    int on;
    size_t off, len;
    ch_gpu_crop crop;
} gpu_entry;

/* A slot's routed samples.  `used` is the only field workers share while
 * the slot fills (an atomic bump); entry p is written by the worker making
 * position p; the worker that finishes the batch reads them all (after the
 * slot's acq_rel countdown) and resets them. */
typedef struct gpu_slot {
    uint8_t *stage;
    size_t cap;
    _Atomic size_t used;
    gpu_entry *e;             /* gpu_n */
    const uint8_t **jp;       /* gpu_n, gathered at submit */
    size_t *lens;
    ch_gpu_crop *crops;
    uint32_t *pos;
} gpu_slot;

/* Staging per routed position: a JPEG bigger than what is left of its
 * slot's gpu_n * this is decoded on the CPU instead. */
#define GPU_STAGE_PER_SAMPLE (256u << 10)

int ch_cuda_parse_device(const char *device, int *out_dev, chute_error *err)
{
    *out_dev = -1;
    if (!device || !device[0] || strcmp(device, "cpu") == 0)
        return CHUTE_OK;
    if (strcmp(device, "cuda") == 0) {
        *out_dev = 0;
        return CHUTE_OK;
    }
    if (strncmp(device, "cuda:", 5) == 0 && device[5] >= '0' && device[5] <= '9') {
        char *end = NULL;
        unsigned long n = strtoul(device + 5, &end, 10);
        if (*end == '\0' && n < 1024) {
            *out_dev = (int)n;
            return CHUTE_OK;
        }
    }
    return ch_err(err, CHUTE_EINVAL,
                  "device \"%.64s\" is not one of \"cpu\", \"cuda\", \"cuda:N\"", device);
}

static void *try_open(const char *path, char *why, size_t n)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, n, "%s", e ? e : "dlopen failed");
    }
    return h;
}

int ch_cuda_module_load(const char *who, const ch_cuda_module **out_mod, void **out_handle,
                        chute_error *err)
{
    *out_mod = NULL;
    *out_handle = NULL;
    char why[512] = "", path[4096];
    void *h = NULL;
    const char *env = getenv("CHUTE_CUDA_MODULE");
    if (env && env[0]) {
        h = try_open(env, why, sizeof why);
        if (!h)
            return ch_err(err, CHUTE_EUNSUPPORTED,
                          "%s: CUDA module not found (CHUTE_CUDA_MODULE=%s: %s)", who, env, why);
    } else {
        Dl_info info;
        char dir[4096] = "";
        if (dladdr((void *)ch_cuda_module_load, &info) && info.dli_fname) {
            snprintf(dir, sizeof dir, "%s", info.dli_fname);
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = '\0';
            else
                dir[0] = '\0';
        }
        const char *subs[] = {"", "/lib"};
        for (int i = 0; i < 2 && !h && dir[0]; i++) {
            snprintf(path, sizeof path, "%s%s/libchute_cuda.so", dir, subs[i]);
            if (access(path, F_OK) == 0)
                h = try_open(path, why, sizeof why);
        }
        if (!h && !why[0])
            h = try_open("libchute_cuda.so", why, sizeof why);
        if (!h) {
#ifdef CHUTE_HAVE_CUDA_MODULE
            return ch_err(err, CHUTE_EUNSUPPORTED,
                          "%s: CUDA module libchute_cuda.so not found beside %s or on the "
                          "loader path (%s); set CHUTE_CUDA_MODULE to its path",
                          who, dir[0] ? dir : "libchute", why);
#else
            return ch_err(err, CHUTE_EUNSUPPORTED,
                          "%s: CUDA module not built (this libchute was configured without "
                          "nvcc or with -DCHUTE_CUDA=OFF; %s)",
                          who, why);
#endif
        }
    }
    ch_cuda_module_fn fn = (ch_cuda_module_fn)dlsym(h, CH_CUDA_SYMBOL);
    const ch_cuda_module *m = fn ? fn() : NULL;
    if (!m || m->abi_version != CH_CUDA_ABI_VERSION || m->size < sizeof *m) {
        dlclose(h);
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "%s: the CUDA module has no %s of ABI version %u (a module from another "
                      "chute version?)",
                      who, CH_CUDA_SYMBOL, CH_CUDA_ABI_VERSION);
    }
    /* The driver: the module's static runtime loads libcuda.so.1 lazily and
     * would only say "insufficient driver"; name the file instead. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
        dlclose(h);
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s: no CUDA driver (libcuda.so.1 not found)",
                      who);
    }
    dlclose(drv);
    *out_mod = m;
    *out_handle = h;
    return CHUTE_OK;
}

int ch_cuda_nvjpeg_find(const ch_cuda_module *m, char *msg, size_t msglen)
{
    if (m->size < offsetof(ch_cuda_module, resize_u8_host) + sizeof m->resize_u8_host ||
        !m->nvjpeg_find) {
        snprintf(msg, msglen, "nvJPEG not supported by this CUDA module (an older build)");
        return CHUTE_EUNSUPPORTED;
    }
    char path[1024] = "";
    int rc = m->nvjpeg_find(path, sizeof path, msg, msglen);
    if (rc == CHUTE_OK)
        snprintf(msg, msglen, "nvJPEG found at %s", path);
    return rc;
}

int ch_cuda_loader_open(chute_loader_options *o, ch_out_spec *spec, ch_cuda_loader **out,
                        chute_error *err)
{
    *out = NULL;
    int dev = -1;
    int rc = ch_cuda_parse_device(o->device, &dev, err);
    if (rc == CHUTE_OK && dev < 0 && o->gpu_decode_share)
        return ch_err(err, CHUTE_EINVAL,
                      "gpu_decode_share %u needs device \"cuda\" or \"cuda:N\" (device is "
                      "\"%.32s\")",
                      o->gpu_decode_share, o->device ? o->device : "cpu");
    if (rc != CHUTE_OK || dev < 0)
        return rc;
    char who[32];
    snprintf(who, sizeof who, "device cuda:%d", dev);
    ch_cuda_loader *g = calloc(1, sizeof *g);
    if (!g)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    rc = ch_cuda_module_load(who, &g->m, &g->handle, err);
    if (rc != CHUTE_OK) {
        free(g);
        return rc;
    }
    int n = 0;
    char msg[2048] = "";
    if (o->gpu_decode_share) {
        /* nvJPEG first: finding it needs no device, so the message is the
         * same on a GPU-less host as on a GPU host that lacks the library. */
        rc = ch_cuda_nvjpeg_find(g->m, msg, sizeof msg);
        if (rc != CHUTE_OK) {
            dlclose(g->handle);
            free(g);
            return ch_err(err, rc, "%s: gpu_decode_share %u: %s", who, o->gpu_decode_share,
                          msg);
        }
        g->share = o->gpu_decode_share;
        g->gpu_n = (uint32_t)(((uint64_t)o->batch_size * g->share + 99) / 100);
        g->max_pixels = o->max_pixels;
    }
    rc = g->m->device_count(&n, msg, sizeof msg);
    if (rc == CHUTE_OK && dev >= n) {
        rc = CHUTE_EINVAL;
        snprintf(msg, sizeof msg, "no such device (%d CUDA device%s)", n, n == 1 ? "" : "s");
    }
    if (rc != CHUTE_OK) {
        dlclose(g->handle);
        free(g);
        return ch_err(err, rc, "%s: %s", who, msg);
    }
    g->device = dev;
    g->pid = getpid();
    g->dtype = spec->dtype;
    g->layout = spec->layout;
    memcpy(g->mul, spec->mul, sizeof g->mul);
    memcpy(g->add, spec->add, sizeof g->add);
    g->size = spec->size;
    g->batch = o->batch_size;
    /* The CPU workers make what crosses PCIe: uint8 NHWC. */
    o->dtype = CHUTE_DTYPE_UINT8;
    o->layout = CHUTE_LAYOUT_NHWC;
    spec->dtype = CHUTE_DTYPE_UINT8;
    spec->layout = CHUTE_LAYOUT_NHWC;
    *out = g;
    return CHUTE_OK;
}

int ch_cuda_loader_attach(ch_cuda_loader *g, void *ring, size_t ring_len, uint32_t nslots,
                          size_t slot_stride, chute_error *err)
{
    g->release_stream = calloc(nslots, sizeof *g->release_stream);
    if (!g->release_stream)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    g->nslots = nslots;
    ch_cuda_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.device = g->device;
    cfg.host = ring;
    cfg.host_len = ring_len;
    cfg.nslots = nslots;
    cfg.slot_stride = slot_stride;
    cfg.batch_size = g->batch;
    cfg.size = g->size;
    cfg.dtype = (int)g->dtype;
    cfg.layout = (int)g->layout;
    memcpy(cfg.mul, g->mul, sizeof cfg.mul);
    memcpy(cfg.add, g->add, sizeof cfg.add);
    char msg[2048] = "";
    int rc = g->m->open(&cfg, &g->ctx, msg, sizeof msg);
    if (rc != CHUTE_OK)
        return ch_err(err, rc, "%s", msg);
    g->ring = ring;
    g->slot_stride = slot_stride;
    g->sample_bytes = (size_t)g->size * g->size * 3;
    if (!g->gpu_n)
        return CHUTE_OK;
    rc = g->m->nvjpeg_open(g->device, g->max_pixels, &g->nj, msg, sizeof msg);
    if (rc != CHUTE_OK)
        return ch_err(err, rc, "device cuda:%d: gpu_decode_share %u: %s", g->device, g->share,
                      msg);
    g->gs = calloc(nslots, sizeof *g->gs);
    if (!g->gs)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    uint32_t n = g->gpu_n;
    for (uint32_t i = 0; i < nslots; i++) {
        gpu_slot *q = &g->gs[i];
        q->cap = (size_t)n * GPU_STAGE_PER_SAMPLE;
        q->stage = malloc(q->cap);
        q->e = calloc(n, sizeof *q->e);
        q->jp = calloc(n, sizeof *q->jp);
        q->lens = calloc(n, sizeof *q->lens);
        q->crops = calloc(n, sizeof *q->crops);
        q->pos = calloc(n, sizeof *q->pos);
        atomic_init(&q->used, 0);
        if (!q->stage || !q->e || !q->jp || !q->lens || !q->crops || !q->pos)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for %zu MiB of JPEG staging",
                          (q->cap * nslots) >> 20);
    }
    return CHUTE_OK;
}

int ch_cuda_loader_route(ch_cuda_loader *g, uint8_t *dst, int is_jpeg, uint32_t channels,
                         const uint8_t *enc, size_t len, const ch_crop *crop)
{
    if (!g->gs || dst < g->ring)
        return 0;
    size_t off = (size_t)(dst - g->ring);
    size_t slot = off / g->slot_stride, p = off % g->slot_stride / g->sample_bytes;
    if (slot >= g->nslots || p >= g->gpu_n)
        return 0;
    gpu_slot *q = &g->gs[slot];
    gpu_entry *e = &q->e[p];
    e->on = 0; /* whatever an abandoned fill of this slot left here */
    if (!is_jpeg || (channels != 3 && channels != 1)) /* nvJPEG: no CMYK */
        return 0;
    size_t u = atomic_load_explicit(&q->used, memory_order_relaxed);
    do {
        if (len > q->cap - u)
            return 0; /* staging full: the CPU decodes this one */
    } while (!atomic_compare_exchange_weak_explicit(&q->used, &u, u + len, memory_order_relaxed,
                                                    memory_order_relaxed));
    memcpy(q->stage + u, enc, len);
    e->off = u;
    e->len = len;
    e->crop.x0 = crop->x0;
    e->crop.y0 = crop->y0;
    e->crop.x1 = crop->x1;
    e->crop.y1 = crop->y1;
    e->crop.clip_x0 = crop->clip_x0;
    e->crop.clip_y0 = crop->clip_y0;
    e->crop.clip_x1 = crop->clip_x1;
    e->crop.clip_y1 = crop->clip_y1;
    e->crop.flip = crop->flip;
    e->on = 1;
    return 1;
}

int ch_cuda_loader_submit(ch_cuda_loader *g, uint32_t slot, uint32_t count, chute_error *err)
{
    char msg[512] = "";
    gpu_slot *q = g->gs && slot < g->nslots ? &g->gs[slot] : NULL;
    uint32_t n = 0;
    for (uint32_t p = 0; q && p < g->gpu_n; p++) {
        gpu_entry *e = &q->e[p];
        if (e->on && p < count) {
            q->jp[n] = q->stage + e->off;
            q->lens[n] = e->len;
            q->crops[n] = e->crop;
            q->pos[n] = p;
            n++;
        }
        e->on = 0;
    }
    int rc = n ? g->m->submit_decoded(g->ctx, g->nj, slot, count, q->jp, q->lens, q->crops,
                                      q->pos, n, msg, sizeof msg)
               : g->m->submit(g->ctx, slot, count, msg, sizeof msg);
    if (q) /* reused after host_wait(slot), which waits for the decodes */
        atomic_store_explicit(&q->used, 0, memory_order_relaxed);
    return rc == CHUTE_OK ? CHUTE_OK : ch_err(err, rc, "%s", msg);
}

void ch_cuda_loader_host_wait(ch_cuda_loader *g, uint32_t slot)
{
    /* An error here is the device's (a sticky CUDA error): the next submit
     * reports it with the batch. */
    char msg[256];
    g->m->host_wait(g->ctx, slot, msg, sizeof msg);
}

void ch_cuda_loader_view(const ch_cuda_loader *g, uint32_t slot, uint32_t count,
                         chute_batch_view *v)
{
    void *dev = NULL, *stream = NULL, *event = NULL;
    g->m->slot_info(g->ctx, slot, &dev, &stream, &event);
    const int64_t S = g->size;
    size_t esz = g->dtype == CHUTE_DTYPE_FLOAT32 ? 4 : g->dtype == CHUTE_DTYPE_FLOAT16 ? 2 : 1;
    v->host_data = v->data;
    v->data = dev;
    v->dtype = g->dtype;
    v->layout = g->layout;
    v->shape[0] = count;
    if (g->layout == CHUTE_LAYOUT_NCHW) {
        v->shape[1] = 3;
        v->shape[2] = S;
        v->shape[3] = S;
    } else {
        v->shape[1] = S;
        v->shape[2] = S;
        v->shape[3] = 3;
    }
    v->strides[3] = 1;
    v->strides[2] = v->shape[3];
    v->strides[1] = v->shape[2] * v->shape[3];
    v->strides[0] = v->shape[1] * v->strides[1];
    v->nbytes = (size_t)count * (size_t)(S * S * 3) * esz;
    v->device_type = 2; /* kDLCUDA */
    v->device_id = g->device;
    v->cuda_stream = stream;
    v->cuda_event = event;
}

int ch_cuda_loader_stream_wait(ch_cuda_loader *g, uint32_t slot, void *stream, chute_error *err)
{
    char msg[512] = "";
    int rc = g->m->stream_wait(g->ctx, slot, stream, msg, sizeof msg);
    return rc == CHUTE_OK ? CHUTE_OK : ch_err(err, rc, "%s", msg);
}

void ch_cuda_loader_set_release_stream(ch_cuda_loader *g, uint32_t slot, void *stream)
{
    if (slot < g->nslots)
        g->release_stream[slot] = stream;
}

void ch_cuda_loader_release(ch_cuda_loader *g, uint32_t slot)
{
    if (slot >= g->nslots || getpid() != g->pid)
        return;
    char msg[256];
    g->m->release(g->ctx, slot, g->release_stream[slot], msg, sizeof msg);
    g->release_stream[slot] = NULL;
}

void ch_cuda_loader_close(ch_cuda_loader *g)
{
    if (!g)
        return;
    if (getpid() == g->pid) {
        g->m->close(g->ctx); /* waits for the stream: no decode still reads the stage */
        if (g->nj)
            g->m->nvjpeg_close(g->nj);
        dlclose(g->handle);
    }
    for (uint32_t i = 0; g->gs && i < g->nslots; i++) {
        gpu_slot *q = &g->gs[i];
        free(q->stage);
        free(q->e);
        free(q->jp);
        free(q->lens);
        free(q->crops);
        free(q->pos);
    }
    free(g->gs);
    free(g->release_stream);
    free(g);
}
