/*
 * csv.c — RFC 4180 scanning, splitting and cell conversion (csv.h says
 * what each does and why it is shaped so).  Every function works on the
 * bytes it is given and never reads past them.
 */
#define _GNU_SOURCE
#include "csv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ch_csv_scan(const uint8_t *p, size_t len, size_t *pos, int *inq, uint64_t *lines)
{
    size_t i = *pos;
    int q = *inq;
    for (; i < len; i++) {
        uint8_t c = p[i];
        if (c == '"') {
            q = !q; /* "" inside quotes toggles twice: still inside */
        } else if (c == '\n') {
            (*lines)++;
            if (!q) {
                *pos = i;
                *inq = 0;
                return 1;
            }
        }
    }
    *pos = len;
    *inq = q;
    return 0;
}

int ch_csv_split(char *r, size_t len, ch_csv_cell *cells, size_t max, size_t *n,
                 const char **why)
{
    *n = 0;
    if (len && r[len - 1] == '\r')
        len--;
    size_t i = 0;
    for (;;) {
        if (*n == max) {
            *why = "more cells than the limit";
            return -1;
        }
        ch_csv_cell *c = &cells[(*n)++];
        c->quoted = 0;
        if (i < len && r[i] == '"') {
            c->quoted = 1;
            size_t w = i, k = i + 1; /* unquote in place: w <= k always */
            c->p = r + i;
            for (;;) {
                if (k >= len) {
                    *why = "unterminated quote";
                    return -1;
                }
                if (r[k] == '"') {
                    if (k + 1 < len && r[k + 1] == '"') {
                        r[w++] = '"';
                        k += 2;
                        continue;
                    }
                    k++;
                    break;
                }
                r[w++] = r[k++];
            }
            c->n = w - i;
            if (k < len && r[k] != ',') {
                *why = "text after a closing quote";
                return -1;
            }
            i = k;
        } else {
            size_t k = i;
            while (k < len && r[k] != ',')
                k++;
            c->p = r + i;
            c->n = k - i;
            i = k;
        }
        if (i >= len)
            return 0;
        i++; /* the comma */
    }
}

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

int ch_csv_int64(const char *s, size_t n, int64_t *out)
{
    trim(&s, &n);
    if (n == 0 || n > 24)
        return -1;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '-' || s[0] == '+') {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n)
        return -1;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

int ch_csv_float32(const char *s, size_t n, locale_t c_locale, float *out)
{
    trim(&s, &n);
    char b[64];
    if (n == 0 || n >= sizeof b)
        return -1;
    memcpy(b, s, n);
    b[n] = '\0';
    char *end = NULL;
    errno = 0;
    double d = strtod_l(b, &end, c_locale);
    if (end != b + n)
        return -1;
    /* hex floats are not CSV numbers (pandas does not read them) */
    for (size_t k = 0; k < n; k++)
        if (b[k] == 'x' || b[k] == 'X')
            return -1;
    *out = (float)d; /* inf when out of float range, as astype(float32) */
    return 0;
}
