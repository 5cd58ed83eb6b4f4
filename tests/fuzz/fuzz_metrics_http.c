/*
 * fuzz_metrics_http.c — fuzz target: what the /metrics responder
 * (src/stats/metrics.c) makes of a client's bytes, and the label
 * sanitizer.  Whatever the bytes: no crash, no read past them, a status in
 * {0, 200, 400, 404, 405, 431} (0 only while under the size limit and
 * without an end of headers), 200 only for a request line starting
 * "GET /metrics"; a label value holds only [A-Za-z0-9._-].
 */
#include "stats/metrics.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *req = malloc(size + 1); /* a private copy: ASan flags any read past it */
    if (!req)
        return 0;
    memcpy(req, data, size);
    req[size] = 0;
    const size_t cap = 4096;
    int st = ch_metrics_request_status(req, size, cap);
    if (st != 0 && st != 200 && st != 400 && st != 404 && st != 405 && st != 431)
        __builtin_trap();
    if (st == 0 && size >= cap)
        __builtin_trap();
    if (st == 200 && (size < 12 || memcmp(req, "GET /metrics", 12) != 0))
        __builtin_trap();
    char lv[64];
    for (int b = 0; b < 2; b++) {
        ch_metrics_label_value(lv, sizeof lv, req, b);
        for (const char *q = lv; *q; q++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", *q))
                __builtin_trap();
        if (strlen(lv) >= sizeof lv)
            __builtin_trap();
    }
    free(req);
    return 0;
}
