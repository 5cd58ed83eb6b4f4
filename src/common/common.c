/*
 * common.c — error formatting and small utilities shared by all layers.
 */
#define _GNU_SOURCE
#include "common.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A message longer than its buffer loses its middle, not its end: "PATH:
 * reason" with a 5000-byte path must still say why.  The cut is marked
 * with U+2026 and falls on UTF-8 sequence boundaries, so the result is as
 * valid (or invalid) UTF-8 as the input.  A third of the room goes to the
 * head (which usually says where), the rest to the tail (which says why). */
void ch_str_fit(char *dst, size_t n, const char *src)
{
    if (!dst || n == 0)
        return;
    size_t len = strlen(src);
    if (len < n) {
        memmove(dst, src, len + 1);
        return;
    }
    static const char ell[] = "\xe2\x80\xa6";
    size_t el = sizeof ell - 1;
    if (n <= el + 2) {
        memmove(dst, src + len - (n - 1), n - 1);
        dst[n - 1] = '\0';
        return;
    }
    size_t room = n - 1 - el, head = room / 3, tail = room - head;
    /* Back off to sequence starts: never keep a lead byte without its
     * continuation bytes, never start the tail on a continuation byte. */
    while (head > 0 && ((unsigned char)src[head] & 0xC0) == 0x80)
        head--;
    size_t from = len - tail;
    while (from < len && ((unsigned char)src[from] & 0xC0) == 0x80)
        from++;
    memmove(dst, src, head);
    memcpy(dst + head, ell, el);
    memmove(dst + head + el, src + from, len - from + 1);
}

/* Format into a buffer big enough for any path (PATH_MAX is 4096) plus a
 * reason, then fit it into the message with ch_str_fit. */
static void err_vformat(chute_error *err, int with_errno, int errnum, const char *fmt,
                        va_list ap)
{
    char big[12288];
    int n = vsnprintf(big, sizeof big, fmt, ap);
    if (n < 0) {
        snprintf(big, sizeof big, "(unformattable message)");
        n = (int)strlen(big);
    } else if ((size_t)n >= sizeof big) {
        n = (int)sizeof big - 256; /* keep room for the errno text */
        big[n] = '\0';
    }
    if (with_errno)
        snprintf(big + n, sizeof big - (size_t)n, ": %s", strerror(errnum));
    ch_str_fit(err->message, sizeof err->message, big);
}

int ch_err(chute_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err_vformat(err, 0, 0, fmt, ap);
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
        err_vformat(err, 1, errnum, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

/* One unit of os.fsdecode: a well-formed UTF-8 sequence (Unicode Table
 * 3-7: no overlongs, no surrogates, nothing past U+10FFFF), or else one
 * byte, escaped to U+DC00 + byte.  Returns its length (>= 1, <= n). */
size_t ch_fsdecode_unit(const unsigned char *p, size_t n, uint32_t *cp)
{
    unsigned c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    }
    int ok = len != 0 && len <= n;
    for (size_t k = 1; ok && k < len; k++) {
        unsigned b = p[k];
        ok = k == 1 ? b >= lo && b <= hi : (b & 0xC0) == 0x80;
    }
    if (!ok) {
        *cp = 0xDC00u + c;
        return 1;
    }
    uint32_t v = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < len; k++)
        v = (v << 6) | (p[k] & 0x3F);
    *cp = v;
    return len;
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
