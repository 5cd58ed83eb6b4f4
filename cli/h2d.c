/*
 * h2d.c — `chute doctor`'s host-to-device copy rate, pinned against
 * pageable memory, measured through the CUDA module (libchute_cuda.so,
 * dlopened as a loader with device="cuda" would; nothing CUDA is linked
 * into the CLI).  On a host without the module, the driver or a device it
 * says why and doctor leaves the line out: that is the common case, not an
 * error.
 */
#include "doctor.h"

#include "cuda/cuda_loader.h"

#include <dlfcn.h>
#include <stdio.h>

int cli_h2d_measure(size_t bytes, double *out_pinned, double *out_pageable, char *why,
                    size_t why_len)
{
    *out_pinned = *out_pageable = 0;
    const ch_cuda_module *m = NULL;
    void *h = NULL;
    chute_error err = {0};
    if (ch_cuda_module_load("device cuda:0", &m, &h, &err) != CHUTE_OK) {
        snprintf(why, why_len, "%s", err.message);
        return -1;
    }
    char msg[512] = "";
    int rc = m->h2d_bandwidth(0, bytes, 1, out_pinned, msg, sizeof msg);
    if (rc == CHUTE_OK)
        rc = m->h2d_bandwidth(0, bytes, 0, out_pageable, msg, sizeof msg);
    dlclose(h);
    if (rc != CHUTE_OK) {
        snprintf(why, why_len, "%s", msg);
        *out_pinned = *out_pageable = 0;
        return -1;
    }
    return 0;
}
