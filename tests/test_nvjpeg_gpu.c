/*
 * test_nvjpeg_gpu.c — the CUDA module's GPU JPEG path against chute's CPU
 * path, on a GPU host (each test skips, 77, without a CUDA device or
 * without nvJPEG; built wherever the module is, ready to run).
 *
 * host_build_of_gpu_resampler_matches_cpu needs no GPU: it runs the
 * kernel's per-pixel code compiled for the host.  The others compare,
 * each against the CPU code that makes today's batches
 * (linked from chute_obj, not re-implemented here):
 *   - the GPU resampler alone (resize_u8) against ch_resize_plan_make +
 *     ch_resize_run on the same pixels and crops (train crops from
 *     ch_geom_train, eval, full, flipped, upscaled): the filters are the
 *     same and only the summation order differs (the CPU keeps a float
 *     intermediate per row), so every value must be within 1 and at most
 *     1% of values may differ at all;
 *   - nvJPEG decode + GPU resample (nvjpeg_decode_resize into device
 *     memory) against libjpeg-turbo decode + CPU resample of every colour
 *     JPEG of the fixture tree: nvJPEG's IDCT and chroma upsampling are not
 *     libjpeg-turbo's, so the bound is on the mean absolute difference per
 *     sample, <= 2.0 (of 255), and the batch mean <= 1.0.  These bounds
 *     were set before a GPU run (none was available when this was
 *     written); the test prints the measured values so the first GPU run
 *     can tighten them.
 */
#include "unit.h"

#include "chute.h"
#include "codec/codec.h"
#include "common/common.h"
#include "cuda/cuda_module.h"
#include "ops/ops.h"

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>

static const ch_cuda_module *g_m;
static void *g_h;

/* 0 with g_m set when the module loads and sees a device; else why. */
static int module_usable(char *why, size_t n)
{
    const char *p = getenv("CHUTE_TEST_CUDA_MODULE");
    if (!p || !p[0]) {
        snprintf(why, n, "the CUDA module was not built");
        return -1;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0");
        return -1;
    }
    g_h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    ch_cuda_module_fn fn = g_h ? (ch_cuda_module_fn)dlsym(g_h, CH_CUDA_SYMBOL) : NULL;
    g_m = fn ? fn() : NULL;
    if (!g_m) {
        snprintf(why, n, "cannot load %s", p);
        return -1;
    }
    return 0;
}

/* The module alone (no device): g_m set, or why not. */
static int module_loaded(char *why, size_t n)
{
    const char *p = getenv("CHUTE_TEST_CUDA_MODULE");
    if (!p || !p[0]) {
        snprintf(why, n, "the CUDA module was not built");
        return -1;
    }
    g_h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    ch_cuda_module_fn fn = g_h ? (ch_cuda_module_fn)dlsym(g_h, CH_CUDA_SYMBOL) : NULL;
    g_m = fn ? fn() : NULL;
    if (!g_m) {
        snprintf(why, n, "cannot load %s", p);
        return -1;
    }
    return 0;
}

#define NEED_GPU()                                                                        \
    do {                                                                                  \
        char why_[600];                                                                   \
        if (module_usable(why_, sizeof why_) != 0)                                        \
            SKIP("%s", why_);                                                             \
    } while (0)

static void to_gpu_crop(const ch_crop *c, ch_gpu_crop *g)
{
    g->x0 = c->x0;
    g->y0 = c->y0;
    g->x1 = c->x1;
    g->y1 = c->y1;
    g->clip_x0 = c->clip_x0;
    g->clip_y0 = c->clip_y0;
    g->clip_x1 = c->clip_x1;
    g->clip_y1 = c->clip_y1;
    g->flip = c->flip;
}

/* The CPU path's uint8 NHWC sample of `crop` of a w x h RGB8 image. */
static int cpu_sample(const uint8_t *pix, size_t stride, uint32_t w, uint32_t h,
                      const ch_crop *crop, uint32_t size, uint8_t *out, ch_resize_scratch *s)
{
    (void)w;
    (void)h;
    ch_resize_plan plan;
    if (ch_resize_plan_make(&plan, crop, size, size, s) != CHUTE_OK)
        return -1;
    ch_out_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.size = size;
    spec.dtype = CHUTE_DTYPE_UINT8;
    spec.layout = CHUTE_LAYOUT_NHWC;
    return ch_resize_run(&plan, pix, stride, 0, 0, crop->flip, &spec, out, s) == CHUTE_OK ? 0
                                                                                          : -1;
}

typedef int (*resize_fn)(const uint8_t *rgb, uint32_t w, uint32_t h, const ch_gpu_crop *crop,
                         uint32_t size, uint8_t *out, char *msg, size_t msglen);

static int g_on_host; /* compare_resamplers: the host build of the kernel's code */

static int resize_with_module(const uint8_t *rgb, uint32_t w, uint32_t h,
                              const ch_gpu_crop *crop, uint32_t size, uint8_t *out, char *msg,
                              size_t msglen)
{
    return g_on_host ? g_m->resize_u8_host(rgb, w, h, crop, size, out, msg, msglen)
                     : g_m->resize_u8(0, rgb, w, h, crop, size, out, msg, msglen);
}

static int compare_resamplers(void);

/* The same per-pixel code as the CUDA kernel, run on the host: its taps,
 * weights and rounding against resample.c, on every CI host with nvcc. */
TEST(host_build_of_gpu_resampler_matches_cpu)
{
    char why[600];
    if (module_loaded(why, sizeof why) != 0)
        SKIP("%s", why);
    g_on_host = 1;
    return compare_resamplers();
}

TEST(gpu_resize_matches_cpu_resampler)
{
    NEED_GPU();
    g_on_host = 0;
    return compare_resamplers();
}

static int compare_resamplers(void)
{
    const uint32_t W = 331, H = 217, S = 64;
    uint8_t *img = malloc((size_t)W * H * 3);
    uint8_t *a = malloc((size_t)S * S * 3), *b = malloc((size_t)S * S * 3);
    CHECK(img && a && b, "malloc");
    /* Smooth gradients plus hashed noise: every filter tap matters. */
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                uint64_t r = ch_mix64(((uint64_t)y * W + x) * 3 + c);
                img[((size_t)y * W + x) * 3 + c] =
                    (uint8_t)((x * (c + 1) + y * 2) / 3 % 200 + (r & 55));
            }
    ch_resize_scratch s;
    memset(&s, 0, sizeof s);
    uint64_t total = 0, differ = 0;
    int maxd = 0;
    for (int k = 0; k < 24; k++) {
        ch_crop crop;
        if (k < 20) {
            ch_rng rng = ch_rng_for(7, 1, (uint64_t)k);
            ch_geom_train(W, H, 0.08, 1.0, &rng, &crop);
        } else if (k == 20) {
            ch_geom_eval(W, H, 73, S, &crop);
        } else if (k == 21) {
            ch_geom_full(W, H, &crop);
        } else { /* upscaling a small window, flipped */
            ch_geom_full(W, H, &crop);
            crop.x0 = 10.5;
            crop.x1 = 40;
            crop.y0 = 3;
            crop.y1 = 30.25;
            crop.flip = 1;
        }
        if (k == 23)
            crop.flip = 0;
        CHECK(cpu_sample(img, (size_t)W * 3, W, H, &crop, S, a, &s) == 0, "cpu crop %d", k);
        ch_gpu_crop g;
        to_gpu_crop(&crop, &g);
        char msg[512] = "";
        int rc = resize_with_module(img, W, H, &g, S, b, msg, sizeof msg);
        CHECK(rc == CHUTE_OK, "resize_u8 crop %d: %s", k, msg);
        for (size_t i = 0; i < (size_t)S * S * 3; i++) {
            int d = abs((int)a[i] - (int)b[i]);
            if (d > maxd)
                maxd = d;
            differ += d != 0;
            total++;
        }
    }
    fprintf(stderr, "%s vs CPU resampler: max abs diff %d, %.4f%% of values differ\n",
            g_on_host ? "GPU code on the host" : "GPU", maxd,
            100.0 * (double)differ / (double)total);
    CHECK(maxd <= 1, "max abs diff %d", maxd);
    CHECK(differ * 100 <= total, "%llu of %llu values differ", (unsigned long long)differ,
          (unsigned long long)total);
    /* A crop outside the image is refused, not read out of bounds. */
    ch_gpu_crop bad = {0, 0, (double)W + 1, 10, 0, 0, (int32_t)W + 1, 10, 0};
    char msg[512] = "";
    CHECK(resize_with_module(img, W, H, &bad, S, b, msg, sizeof msg) == CHUTE_EINVAL,
          "bad crop accepted");
    ch_buf_free(&s.coef);
    ch_buf_free(&s.tmp);
    free(img);
    free(a);
    free(b);
    return 0;
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = n > 0 ? malloc((size_t)n) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = p ? (size_t)n : 0;
    return p;
}

TEST(gpu_nvjpeg_decode_matches_cpu_path)
{
    NEED_GPU();
    char path[4096], msg[2048] = "";
    snprintf(path, sizeof path, "%s/READY", g_data ? g_data : "");
    if (!g_data || access(path, F_OK) != 0)
        SKIP("fixture data missing (run the data_setup test)");
    ch_nvjpeg *j = NULL;
    int rc = g_m->nvjpeg_open(0, 1ull << 28, &j, msg, sizeof msg);
    if (rc == CHUTE_EUNSUPPORTED && strstr(msg, "nvJPEG not found"))
        SKIP("%s", msg);
    CHECK(rc == CHUTE_OK, "nvjpeg_open: %s", msg);
    const uint32_t S = 96;
    const size_t sb = (size_t)S * S * 3;
    uint8_t *dev = NULL, *gpu = malloc(sb), *cpu = malloc(sb);
    CHECK(gpu && cpu, "malloc");
    CHECK(cudaMalloc((void **)&dev, sb) == cudaSuccess, "cudaMalloc");
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "decoder");
    ch_resize_scratch s;
    memset(&s, 0, sizeof s);
    ch_buf pb;
    memset(&pb, 0, sizeof pb);
    double sum_mean = 0, worst = 0;
    int compared = 0;
    char tree[4200];
    snprintf(tree, sizeof tree, "%s/tree", g_data);
    DIR *top = opendir(tree);
    CHECK(top, "opendir %s", tree);
    struct dirent *ce;
    while ((ce = readdir(top))) {
        if (ce->d_name[0] == '.')
            continue;
        char cls[4400];
        snprintf(cls, sizeof cls, "%s/%s", tree, ce->d_name);
        DIR *dd = opendir(cls);
        if (!dd)
            continue;
        struct dirent *fe;
        while ((fe = readdir(dd))) {
            size_t nl = strlen(fe->d_name);
            if (nl < 5 || strcmp(fe->d_name + nl - 4, ".jpg") != 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", cls, fe->d_name);
            size_t len = 0;
            uint8_t *enc = read_file(path, &len);
            CHECK(enc, "read %s", path);
            ch_image_info info;
            chute_error err = {0};
            if (ch_decoder_begin(d, enc, len, 1ull << 28, &info, &err) != CHUTE_OK ||
                info.channels != 3) { /* grey and CMYK: the GPU path takes colour only */
                ch_decoder_abort(d);
                free(enc);
                continue;
            }
            ch_image im;
            CHECK(ch_decoder_finish(d, 1, 0, 0, info.width, info.height, &pb, &im, &err) ==
                      CHUTE_OK,
                  "cpu decode %s: %s", path, err.message);
            ch_crop crop;
            ch_rng rng = ch_rng_for(3, 0, (uint64_t)compared);
            ch_geom_train(info.width, info.height, 0.08, 1.0, &rng, &crop);
            CHECK(cpu_sample(im.pixels, im.stride, info.width, info.height, &crop, S, cpu, &s) ==
                      0,
                  "cpu resample %s", path);
            ch_gpu_crop g;
            to_gpu_crop(&crop, &g);
            const uint8_t *encs[1] = {enc};
            size_t lens[1] = {len};
            rc = g_m->nvjpeg_decode_resize(j, encs, lens, &g, NULL, 1, S, dev, sb, NULL, msg,
                                           sizeof msg);
            CHECK(rc == CHUTE_OK, "nvjpeg %s: %s", path, msg);
            CHECK(cudaMemcpy(gpu, dev, sb, cudaMemcpyDeviceToHost) == cudaSuccess, "D2H");
            double m = 0;
            for (size_t i = 0; i < sb; i++)
                m += fabs((double)gpu[i] - (double)cpu[i]);
            m /= (double)sb;
            if (m > worst)
                worst = m;
            sum_mean += m;
            compared++;
            CHECK(m <= 2.0, "%s: mean abs diff %.3f > 2.0", path, m);
            free(enc);
        }
        closedir(dd);
    }
    closedir(top);
    fprintf(stderr, "nvJPEG+GPU resample vs CPU: %d colour JPEGs, mean abs diff %.3f, worst %.3f\n",
            compared, compared ? sum_mean / compared : 0.0, worst);
    CHECK(compared >= 10, "only %d colour JPEGs compared", compared);
    CHECK(sum_mean / compared <= 1.0, "mean abs diff %.3f > 1.0", sum_mean / compared);
    /* Not a JPEG: a clear content error naming the sample, no crash. */
    const uint8_t junk[64] = {0xFF, 0xD8, 0xFF, 0x00};
    const uint8_t *encs[1] = {junk};
    size_t lens[1] = {sizeof junk};
    ch_gpu_crop g = {0, 0, 1, 1, 0, 0, 1, 1, 0};
    rc = g_m->nvjpeg_decode_resize(j, encs, lens, &g, NULL, 1, S, dev, sb, NULL, msg, sizeof msg);
    CHECK(rc == CHUTE_ECORRUPT && strstr(msg, "GPU-decoded sample 0"), "junk: rc %d: %s", rc,
          msg);
    g_m->nvjpeg_close(j);
    ch_decoder_destroy(d);
    ch_buf_free(&pb);
    ch_buf_free(&s.coef);
    ch_buf_free(&s.tmp);
    cudaFree(dev);
    free(gpu);
    free(cpu);
    return 0;
}

/* A loader on the fixture tree: batch 16, 48 px, uint8 NHWC, seed 7, no DCT scaling. */
static chute_loader *make_loader(chute_dataset *ds, const char *device, uint32_t share,
                                 chute_error *err)
{
    chute_loader_options o = {0};
    o.batch_size = 16;
    o.size = 48;
    o.workers = 3;
    o.seed = 7;
    o.dtype = CHUTE_DTYPE_UINT8;
    o.layout = CHUTE_LAYOUT_NHWC;
    o.device = device;
    o.gpu_decode_share = share;
    o.no_dct_scale = 1; /* both decode at full size: the difference is the decoders' */
    chute_loader *ld = NULL;
    if (chute_loader_create(ds, &o, &ld, err) != CHUTE_OK)
        return NULL;
    return ld;
}

TEST(gpu_hybrid_loader_matches_cpu_loader)
{
    NEED_GPU();
    char path[4200];
    snprintf(path, sizeof path, "%s/READY", g_data ? g_data : "");
    if (!g_data || access(path, F_OK) != 0)
        SKIP("fixture data missing (run the data_setup test)");
    snprintf(path, sizeof path, "%s/tree", g_data);
    chute_dataset *ds = NULL;
    chute_error err = {0};
    CHECK(chute_dataset_open(path, CHUTE_SOURCE_AUTO, &ds, &err) == CHUTE_OK, "%s",
          err.message);
    chute_loader *g = make_loader(ds, "cuda", 50, &err);
    if (!g && strstr(err.message, "nvJPEG not found")) {
        chute_dataset_close(ds);
        SKIP("%s", err.message);
    }
    CHECK(g, "hybrid loader: %s", err.message);
    chute_loader *c = make_loader(ds, NULL, 0, &err);
    CHECK(c, "cpu loader: %s", err.message);
    const size_t sb = 48 * 48 * 3;
    uint8_t *host = malloc(16 * sb);
    CHECK(host, "malloc");
    double sum = 0, worst = 0;
    long gpu_pos = 0, gpu_differs = 0, cpu_pos = 0;
    chute_batch *bg, *bc;
    while (chute_loader_next(g, &bg) == CHUTE_OK) {
        CHECK(chute_loader_next(c, &bc) == CHUTE_OK, "cpu next: %s", chute_loader_errmsg(c));
        chute_batch_view vg, vc;
        chute_batch_view_get(bg, &vg);
        chute_batch_view_get(bc, &vc);
        CHECK(vg.count == vc.count && memcmp(vg.labels, vc.labels, vg.count * 8) == 0 &&
                  memcmp(vg.indices, vc.indices, vg.count * 8) == 0,
              "labels/indices differ");
        CHECK(cudaEventSynchronize((cudaEvent_t)vg.cuda_event) == cudaSuccess, "event sync");
        CHECK(cudaMemcpy(host, vg.data, vg.nbytes, cudaMemcpyDeviceToHost) == cudaSuccess,
              "D2H");
        for (uint32_t p = 0; p < vg.count; p++) {
            const uint8_t *a = host + p * sb, *b = (const uint8_t *)vc.data + p * sb;
            double m = 0;
            for (size_t i = 0; i < sb; i++)
                m += fabs((double)a[i] - (double)b[i]);
            m /= (double)sb;
            if (p >= 8) { /* past ceil(16 * 50%): the CPU path's pixels, exactly */
                CHECK(m == 0, "position %u (CPU-decoded) differs: %.3f", p, m);
                cpu_pos++;
            } else {
                CHECK(m <= 2.0, "position %u: mean abs diff %.3f > 2.0", p, m);
                sum += m;
                worst = m > worst ? m : worst;
                gpu_pos++;
                gpu_differs += m > 0; /* grey / CMYK / PNG positions stay on the CPU: 0 */
            }
        }
        chute_batch_release(bg);
        chute_batch_release(bc);
    }
    fprintf(stderr,
            "hybrid loader vs CPU: %ld GPU-eligible positions (%ld differ: nvJPEG-decoded), "
            "mean abs diff %.3f, worst %.3f; %ld CPU positions exact\n",
            gpu_pos, gpu_differs, gpu_pos ? sum / gpu_pos : 0.0, worst, cpu_pos);
    CHECK(gpu_differs > 0, "no position was decoded by nvJPEG (routing did nothing)");
    CHECK(sum / gpu_pos <= 1.0, "mean abs diff %.3f > 1.0", sum / gpu_pos);
    free(host);
    chute_loader_destroy(g);
    chute_loader_destroy(c);
    chute_dataset_close(ds);
    return 0;
}

UNIT_MAIN
