/*
 * common.c — error formatting and small utilities shared by all layers.
 */
#define _GNU_SOURCE
#include "common.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int ch_err(chute_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int ch_err_errno(chute_error *err, int code, int errnum, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof err->message)
            snprintf(err->message + n, sizeof err->message - (size_t)n, ": %s", strerror(errnum));
        err->code = code;
    }
    return code;
}

void ch_permutation(uint64_t *v, uint64_t n, ch_rng *r)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = i;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = ch_rng_below(r, i);
        uint64_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

void *ch_aligned_alloc(size_t align, size_t size)
{
    void *p = NULL;
    if (size == 0)
        size = align;
    if (posix_memalign(&p, align, size) != 0)
        return NULL;
    return p;
}

void ch_pretouch(void *p, size_t n)
{
    volatile uint8_t *b = p;
    for (size_t i = 0; i < n; i += 4096)
        b[i] = 0;
}

int ch_buf_reserve(ch_buf *b, size_t n)
{
    if (n <= b->cap)
        return CHUTE_OK;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < n)
        cap *= 2;
    /* 64-byte alignment keeps SIMD loads in decoders happy; +64 slack lets
     * vector loops overrun the end harmlessly. */
    uint8_t *d = ch_aligned_alloc(64, cap + 64);
    if (!d)
        return CHUTE_ENOMEM;
    free(b->data);
    b->data = d;
    b->cap = cap;
    return CHUTE_OK;
}

void ch_buf_free(ch_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->cap = 0;
}

int ch_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
