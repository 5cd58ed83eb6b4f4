/*
 * nvml.c — GPU utilisation through NVML, loaded with dlopen at run time so
 * that chute neither links against nor requires the NVIDIA driver.  Any
 * failure (no library, no device, old driver) just means "no GPU info".
 */
#include "util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_shutdown_fn)(void);
typedef int (*nvml_handle_fn)(unsigned int, void **);
typedef struct nvml_util {
    unsigned int gpu, memory;
} nvml_util;
typedef int (*nvml_util_fn)(void *, nvml_util *);
typedef int (*nvml_name_fn)(void *, char *, unsigned int);
typedef struct nvml_mem {
    unsigned long long total, free, used;
} nvml_mem;
typedef int (*nvml_mem_fn)(void *, nvml_mem *);

struct cli_gpu {
    void *lib;
    void *dev;
    nvml_shutdown_fn shutdown;
    nvml_util_fn util;
    nvml_mem_fn mem; /* NULL on a driver without it */
    char name[96];
};

cli_gpu *cli_gpu_open(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return NULL;
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml_handle_fn handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_util_fn util = (nvml_util_fn)dlsym(lib, "nvmlDeviceGetUtilizationRates");
    nvml_shutdown_fn shutdown = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
    nvml_name_fn name = (nvml_name_fn)dlsym(lib, "nvmlDeviceGetName");
    cli_gpu *g = NULL;
    void *dev = NULL;
    if (init && handle && util && shutdown && init() == 0) {
        if (handle(0, &dev) == 0 && (g = calloc(1, sizeof *g)) != NULL) {
            g->lib = lib;
            g->dev = dev;
            g->shutdown = shutdown;
            g->util = util;
            g->mem = (nvml_mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
            if (!name || name(dev, g->name, sizeof g->name) != 0)
                strcpy(g->name, "NVIDIA GPU");
            return g;
        }
        shutdown();
    }
    dlclose(lib);
    return NULL;
}

void cli_gpu_close(cli_gpu *g)
{
    if (!g)
        return;
    g->shutdown();
    dlclose(g->lib);
    free(g);
}

int cli_gpu_util(cli_gpu *g)
{
    nvml_util u;
    if (!g || g->util(g->dev, &u) != 0)
        return -1;
    return (int)u.gpu;
}

const char *cli_gpu_name(cli_gpu *g) { return g ? g->name : ""; }

int cli_gpu_mem(cli_gpu *g, uint64_t *out_used, uint64_t *out_total)
{
    nvml_mem m;
    if (!g || !g->mem || g->mem(g->dev, &m) != 0)
        return -1;
    *out_used = m.used;
    *out_total = m.total;
    return 0;
}
