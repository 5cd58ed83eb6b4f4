/*
 * test_cuda.c — the optional CUDA backend as seen from a host without a
 * GPU (CI here): the module libchute_cuda.so exports its ABI and hides the
 * CUDA runtime it links statically; a loader asking for a CUDA device
 * fails with CHUTE_EUNSUPPORTED and a message naming what is missing (the
 * module, the driver, the device); bad device strings are CHUTE_EINVAL;
 * host loaders describe their batches as host memory.  Linked against
 * libchute only: nothing here links CUDA.  The GPU behaviour is in
 * test_cuda_gpu.c.
 *
 * Environment (from tests/CMakeLists.txt): CHUTE_TEST_CUDA_MODULE, the
 * built module's path ("" when it was not built).
 */
#include "unit.h"

#include "chute.h"
#include "cuda/cuda_module.h"

#include <dlfcn.h>

static char g_tree[4096];

static int have_data(void)
{
    if (!g_data)
        return 0;
    snprintf(g_tree, sizeof g_tree, "%s/tree", g_data);
    char ready[4200];
    snprintf(ready, sizeof ready, "%s/READY", g_data);
    return access(ready, F_OK) == 0;
}

static const char *module_path(void)
{
    const char *p = getenv("CHUTE_TEST_CUDA_MODULE");
    return p && p[0] ? p : NULL;
}

/* Whether this host has a driver the module can use. */
static int have_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h)
        dlclose(h);
    return h != NULL;
}

static chute_dataset *open_tree(void)
{
    chute_dataset *ds = NULL;
    chute_error err = {0};
    if (chute_dataset_open(g_tree, CHUTE_SOURCE_AUTO, &ds, &err) != CHUTE_OK)
        fprintf(stderr, "open %s: %s\n", g_tree, err.message);
    return ds;
}

/* Create a loader on the test's dataset (g_ds, opened by the caller). */
static chute_dataset *g_ds;

static int create_with_device(const char *device, chute_error *err, chute_loader **out)
{
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 32;
    o.workers = 2;
    o.device = device;
    chute_loader *ld = NULL;
    int rc = chute_loader_create(g_ds, &o, &ld, err);
    if (out && rc == CHUTE_OK)
        *out = ld;
    else
        chute_loader_destroy(ld);
    return rc;
}

#define NEED_DS()                                                                         \
    do {                                                                                  \
        if (!have_data())                                                                 \
            SKIP("fixture data missing (run the data_setup test)");                       \
        CHECK((g_ds = open_tree()) != NULL, "open the tree");                             \
    } while (0)

TEST(module_exports_abi)
{
    const char *path = module_path();
    if (!path)
        SKIP("the CUDA module was not built (no nvcc, or CHUTE_CUDA=OFF)");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(h, "dlopen %s: %s", path, dlerror());
    ch_cuda_module_fn fn = (ch_cuda_module_fn)dlsym(h, CH_CUDA_SYMBOL);
    CHECK(fn, "%s does not export %s", path, CH_CUDA_SYMBOL);
    const ch_cuda_module *m = fn();
    CHECK(m, "%s returned NULL", CH_CUDA_SYMBOL);
    CHECK(m->abi_version == CH_CUDA_ABI_VERSION, "abi_version %u", m->abi_version);
    CHECK(m->size == sizeof *m, "size %u, expected %zu", m->size, sizeof *m);
    CHECK(m->device_count && m->open && m->submit && m->host_wait && m->stream_wait &&
              m->release && m->slot_info && m->close && m->mem_info && m->h2d_bandwidth,
          "a function of the table is NULL");
    /* The static CUDA runtime stays inside: no cuda* symbol is visible to
     * whoever loads the module (it would clash with a process's own). */
    const char *hidden[] = {"cudaMalloc", "cudaGetDeviceCount", "cudaMemcpyAsync",
                            "__cudaRegisterFatBinary"};
    for (size_t i = 0; i < sizeof hidden / sizeof *hidden; i++)
        CHECK(dlsym(h, hidden[i]) == NULL, "the module exports %s", hidden[i]);
    /* Asking for devices never crashes; without a driver it says so. */
    int n = -1;
    char msg[512] = "";
    int rc = m->device_count(&n, msg, sizeof msg);
    if (!have_driver()) {
        CHECK(rc == CHUTE_EUNSUPPORTED && n == 0, "device_count without a driver: rc %d n %d", rc,
              n);
        CHECK(msg[0] != '\0', "no message for rc %d", rc);
    }
    fprintf(stderr, "device_count: rc %d, n %d, %s\n", rc, n, msg);
    dlclose(h);
    return 0;
}

TEST(features_list_cuda_when_built)
{
    const char *f = chute_features();
    int listed = strstr(f, "cuda") != NULL;
    CHECK(listed == (module_path() != NULL), "features \"%s\", module %s", f,
          module_path() ? module_path() : "(not built)");
    return 0;
}

TEST(bad_device_strings_are_einval)
{
    NEED_DS();
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:0x", "CUDA", "cuda:99999",
                         "cuda0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        chute_error err = {0};
        int rc = create_with_device(bad[i], &err, NULL);
        CHECK(rc == CHUTE_EINVAL, "device \"%s\": rc %d (%s)", bad[i], rc, err.message);
        CHECK(strstr(err.message, bad[i]) && strstr(err.message, "cuda:N"),
              "device \"%s\": message \"%s\"", bad[i], err.message);
    }
    chute_dataset_close(g_ds);
    return 0;
}

TEST(no_gpu_is_a_clear_unsupported)
{
    NEED_DS();
    unsetenv("CHUTE_CUDA_MODULE");
    chute_error err = {0};
    chute_loader *ld = NULL;
    int rc = create_with_device("cuda", &err, &ld);
    if (rc == CHUTE_OK) {
        chute_loader_destroy(ld);
        chute_dataset_close(g_ds);
        SKIP("a CUDA device is usable here: see test_cuda_gpu.c");
    }
    CHECK(rc == CHUTE_EUNSUPPORTED, "rc %d (%s)", rc, err.message);
    fprintf(stderr, "message: %s\n", err.message);
    if (!module_path()) {
        CHECK(strstr(err.message, "device cuda:0: CUDA module not built"), "%s", err.message);
    } else if (!have_driver()) {
        CHECK(strcmp(err.message, "device cuda:0: no CUDA driver (libcuda.so.1 not found)") == 0,
              "%s", err.message);
    } else {
        CHECK(strstr(err.message, "device cuda:0: no CUDA device"), "%s", err.message);
    }
    /* "cuda:3" names device 3. */
    rc = create_with_device("cuda:3", &err, NULL);
    CHECK(rc == CHUTE_EUNSUPPORTED || rc == CHUTE_EINVAL, "cuda:3: rc %d", rc);
    CHECK(strstr(err.message, "device cuda:3: "), "%s", err.message);
    /* Everything else still works: a host loader from the same dataset. */
    rc = create_with_device("cpu", &err, &ld);
    CHECK(rc == CHUTE_OK, "cpu: rc %d (%s)", rc, err.message);
    chute_batch *b = NULL;
    CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next: %s", chute_loader_errmsg(ld));
    chute_batch_release(b);
    chute_loader_destroy(ld);
    chute_dataset_close(g_ds);
    return 0;
}

TEST(missing_module_named_by_env)
{
    NEED_DS();
    const char *p = "/nonexistent/chute-test/libchute_cuda.so";
    setenv("CHUTE_CUDA_MODULE", p, 1);
    chute_error err = {0};
    int rc = create_with_device("cuda:0", &err, NULL);
    unsetenv("CHUTE_CUDA_MODULE");
    CHECK(rc == CHUTE_EUNSUPPORTED, "rc %d (%s)", rc, err.message);
    CHECK(strstr(err.message, "device cuda:0: CUDA module not found (CHUTE_CUDA_MODULE=") &&
              strstr(err.message, p),
          "%s", err.message);
    /* A file that is not a module: named too, not loaded. */
    char notmod[] = "/tmp/chute-not-a-module-XXXXXX";
    int fd = mkstemp(notmod);
    CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
    CHECK(write(fd, "not an ELF file\n", 16) == 16, "write");
    close(fd);
    setenv("CHUTE_CUDA_MODULE", notmod, 1);
    rc = create_with_device("cuda", &err, NULL);
    unsetenv("CHUTE_CUDA_MODULE");
    unlink(notmod);
    CHECK(rc == CHUTE_EUNSUPPORTED && strstr(err.message, notmod), "rc %d: %s", rc, err.message);
    chute_dataset_close(g_ds);
    return 0;
}

TEST(host_batches_say_host)
{
    NEED_DS();
    chute_error err = {0};
    chute_loader *ld = NULL;
    const char *devs[] = {NULL, "", "cpu"};
    for (int i = 0; i < 3; i++) {
        int rc = create_with_device(devs[i], &err, &ld);
        CHECK(rc == CHUTE_OK, "device %s: rc %d (%s)", devs[i] ? devs[i] : "NULL", rc, err.message);
        chute_batch *b = NULL;
        CHECK(chute_loader_next(ld, &b) == CHUTE_OK, "next: %s", chute_loader_errmsg(ld));
        chute_batch_view v;
        chute_batch_view_get(b, &v);
        CHECK(v.device_type == 1 && v.device_id == 0 && !v.cuda_stream && !v.cuda_event &&
                  !v.host_data,
              "host view: device_type %d", v.device_type);
        CHECK(v.dtype == CHUTE_DTYPE_FLOAT32 && v.layout == CHUTE_LAYOUT_NCHW &&
                  v.nbytes == (size_t)v.count * 32 * 32 * 3 * 4,
              "host view: dtype %d layout %d nbytes %zu", v.dtype, v.layout, v.nbytes);
        /* No CUDA involved: a no-op that succeeds. */
        CHECK(chute_batch_use_stream(b, NULL) == CHUTE_OK, "use_stream on a host batch");
        chute_batch_release(b);
        chute_loader_destroy(ld);
        ld = NULL;
    }
    CHECK(chute_batch_use_stream(NULL, NULL) == CHUTE_EINVAL, "use_stream(NULL)");
    chute_dataset_close(g_ds);
    return 0;
}

/* ---- nvJPEG (optional): the search and its messages, no device needed --- */

static const ch_cuda_module *open_module(void **out_h)
{
    *out_h = NULL;
    const char *path = module_path();
    if (!path)
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return NULL;
    ch_cuda_module_fn fn = (ch_cuda_module_fn)dlsym(h, CH_CUDA_SYMBOL);
    *out_h = h;
    return fn ? fn() : NULL;
}

TEST(nvjpeg_missing_named_by_env)
{
    void *h = NULL;
    const ch_cuda_module *m = open_module(&h);
    if (!m)
        SKIP("the CUDA module was not built (no nvcc, or CHUTE_CUDA=OFF)");
    CHECK(m->nvjpeg_find && m->nvjpeg_open && m->nvjpeg_decode_resize && m->nvjpeg_close &&
              m->resize_u8,
          "the module's nvJPEG entries are NULL");
    char path[1024] = "", msg[2048] = "";
    const char *missing = "/nonexistent/chute-test/libnvjpeg.so.12";
    setenv("CHUTE_NVJPEG", missing, 1);
    int rc = m->nvjpeg_find(path, sizeof path, msg, sizeof msg);
    CHECK(rc == CHUTE_EUNSUPPORTED, "rc %d (%s)", rc, msg);
    CHECK(strstr(msg, "nvJPEG not found (CHUTE_NVJPEG=/nonexistent/chute-test/libnvjpeg.so.12"),
          "%s", msg);
    /* A library that is not nvJPEG: opened, then refused by name. */
    char self[4096];
    snprintf(self, sizeof self, "%s", module_path());
    setenv("CHUTE_NVJPEG", self, 1);
    rc = m->nvjpeg_find(path, sizeof path, msg, sizeof msg);
    CHECK(rc == CHUTE_EUNSUPPORTED && strstr(msg, "lacks the nvjpeg* entry points") &&
              strstr(msg, self),
          "rc %d: %s", rc, msg);
    /* Opening a decoder fails the same way, before touching any device. */
    setenv("CHUTE_NVJPEG", missing, 1);
    ch_nvjpeg *j = (ch_nvjpeg *)1;
    rc = m->nvjpeg_open(0, 0, &j, msg, sizeof msg);
    unsetenv("CHUTE_NVJPEG");
    CHECK(rc == CHUTE_EUNSUPPORTED && j == NULL && strstr(msg, "nvJPEG not found"), "rc %d: %s",
          rc, msg);
    dlclose(h);
    return 0;
}

TEST(nvjpeg_search_lists_where_it_looked)
{
    void *h = NULL;
    const ch_cuda_module *m = open_module(&h);
    if (!m)
        SKIP("the CUDA module was not built (no nvcc, or CHUTE_CUDA=OFF)");
    unsetenv("CHUTE_NVJPEG");
    char path[1024] = "", msg[2048] = "";
    int rc = m->nvjpeg_find(path, sizeof path, msg, sizeof msg);
    fprintf(stderr, "nvjpeg_find: rc %d path '%s' msg '%s'\n", rc, path, msg);
    if (rc == CHUTE_OK) {
        CHECK(strstr(path, "libnvjpeg.so"), "found '%s'", path);
    } else {
        CHECK(rc == CHUTE_EUNSUPPORTED, "rc %d", rc);
        CHECK(strstr(msg, "nvJPEG not found: install the CUDA toolkit's libnvjpeg or `pip "
                          "install nvidia-nvjpeg`, or set CHUTE_NVJPEG"),
              "%s", msg);
        CHECK(strstr(msg, "/usr/local/cuda/lib64/libnvjpeg.so.13: absent") &&
                  strstr(msg, "/nvidia/nvjpeg/lib/libnvjpeg.so.12"),
              "the places tried are not listed: %s", msg);
    }
    dlclose(h);
    return 0;
}

TEST(gpu_decode_share_validation)
{
    NEED_DS();
    chute_error err = {0};
    chute_loader_options o = {0};
    o.batch_size = 8;
    o.size = 32;
    o.workers = 1;
    o.gpu_decode_share = 50;
    chute_loader *ld = NULL;
    int rc = chute_loader_create(g_ds, &o, &ld, &err);
    CHECK(rc == CHUTE_EINVAL && !ld, "share on the host: rc %d", rc);
    CHECK(strstr(err.message, "gpu_decode_share 50 needs device \"cuda\" or \"cuda:N\""), "%s",
          err.message);
    o.device = "cuda";
    o.gpu_decode_share = 101;
    rc = chute_loader_create(g_ds, &o, &ld, &err);
    CHECK(rc == CHUTE_EINVAL && !ld && strstr(err.message, "gpu_decode_share"), "101: rc %d: %s",
          rc, err.message);
    /* nvJPEG missing: named, whatever else this host has. */
    o.gpu_decode_share = 25;
    setenv("CHUTE_NVJPEG", "/nonexistent/libnvjpeg.so.12", 1);
    rc = chute_loader_create(g_ds, &o, &ld, &err);
    unsetenv("CHUTE_NVJPEG");
    CHECK(rc == CHUTE_EUNSUPPORTED && !ld, "rc %d (%s)", rc, err.message);
    fprintf(stderr, "message: %s\n", err.message);
    if (module_path() && have_driver())
        CHECK(strstr(err.message, "device cuda:0: gpu_decode_share 25: nvJPEG not found "
                                  "(CHUTE_NVJPEG=/nonexistent/libnvjpeg.so.12"),
              "%s", err.message);
    else if (!module_path())
        CHECK(strstr(err.message, "CUDA module not built"), "%s", err.message);
    else
        CHECK(strstr(err.message, "no CUDA driver"), "%s", err.message);
    /* Share 0 is the CPU path, untouched. */
    o.device = NULL;
    o.gpu_decode_share = 0;
    rc = chute_loader_create(g_ds, &o, &ld, &err);
    CHECK(rc == CHUTE_OK, "share 0: %s", err.message);
    chute_loader_destroy(ld);
    chute_dataset_close(g_ds);
    return 0;
}

UNIT_MAIN
