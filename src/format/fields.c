/*
 * fields.c — typed-record helpers: dtype sizes, field shapes, and a strict
 * parser for NumPy's .npy header.
 *
 * Why a parser of our own: a .npy file is a 10- or 12-byte preamble and a
 * Python dict literal, and the loader reads one per sample per tensor
 * field from many threads; a general Python-literal parser would be far
 * more surface than the three keys numpy.save writes.  So this accepts
 * exactly what numpy.lib.format writes (any key order, either quote,
 * optional trailing commas, space padding, a final newline) and refuses
 * everything else with a reason, before any size read from the header is
 * used: every dimension and the product with the item size are checked for
 * overflow and against the bytes that are really there.  Allocation-free
 * and stateless, so it is safe on any thread and easy to fuzz
 * (tests/fuzz/fuzz_npy.c).
 */
#include "fields.h"

#include "chute.h"

#include <stdio.h>
#include <string.h>

_Static_assert(CH_FIELD_MAX_DIMS == CHUTE_FIELD_MAX_DIMS, "fields.h and chute.h disagree");

size_t ch_dtype_size(int dtype)
{
    switch (dtype) {
    case CHUTE_DTYPE_UINT8: case CHUTE_DTYPE_INT8: case CHUTE_DTYPE_BOOL: return 1;
    case CHUTE_DTYPE_FLOAT16: case CHUTE_DTYPE_INT16: case CHUTE_DTYPE_UINT16: return 2;
    case CHUTE_DTYPE_FLOAT32: case CHUTE_DTYPE_INT32: case CHUTE_DTYPE_UINT32: return 4;
    case CHUTE_DTYPE_FLOAT64: case CHUTE_DTYPE_INT64: case CHUTE_DTYPE_UINT64: return 8;
    default: return 0;
    }
}

static const char *dtype_name(int dtype)
{
    static const char *const n[] = {"float32", "uint8",  "float16", "int64",  "int32", "float64",
                                    "int8",    "int16",  "uint16",  "uint32", "uint64", "bool"};
    return dtype >= 0 && dtype < (int)(sizeof n / sizeof *n) ? n[dtype] : "?";
}

uint64_t ch_field_sample_bytes(const ch_field *f)
{
    if (f->kind == CHUTE_FIELD_BYTES)
        return 0;
    uint64_t b = ch_dtype_size(f->dtype);
    for (uint32_t d = 0; d < f->ndim; d++)
        if (f->shape[d] < 0 || __builtin_mul_overflow(b, (uint64_t)f->shape[d], &b))
            return 0;
    return b;
}

static void shape_str(int dtype, uint32_t ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%s[", dtype_name(dtype));
    for (uint32_t d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

void ch_field_describe(const ch_field *f, char *buf, size_t n)
{
    shape_str(f->dtype, f->ndim, f->shape, buf, n);
}

/* ---- .npy -------------------------------------------------------------- */

typedef struct npy_lex {
    const char *p, *end;
} npy_lex;

static void skip_ws(npy_lex *x)
{
    while (x->p < x->end && *x->p == ' ')
        x->p++;
}

static int eat(npy_lex *x, char c)
{
    skip_ws(x);
    if (x->p < x->end && *x->p == c) {
        x->p++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes: *s, *n; 0 if none. */
static int quoted(npy_lex *x, const char **s, size_t *n)
{
    skip_ws(x);
    if (x->p >= x->end || (*x->p != '\'' && *x->p != '"'))
        return 0;
    char q = *x->p++;
    const char *b = x->p;
    while (x->p < x->end && *x->p != q) {
        if (*x->p == '\\' || (unsigned char)*x->p < 0x20)
            return 0;
        x->p++;
    }
    if (x->p >= x->end)
        return 0;
    *s = b;
    *n = (size_t)(x->p - b);
    x->p++;
    return 1;
}

static int word(npy_lex *x, const char *w)
{
    skip_ws(x);
    size_t n = strlen(w);
    if ((size_t)(x->end - x->p) >= n && memcmp(x->p, w, n) == 0) {
        x->p += n;
        return 1;
    }
    return 0;
}

/* descr -> dtype: '<' or '|' (or '=' on little-endian hosts) + kind + size. */
static int descr_dtype(const char *s, size_t n, int *out)
{
    static const struct {
        const char *d;
        int t;
    } k[] = {{"u1", CHUTE_DTYPE_UINT8},  {"i1", CHUTE_DTYPE_INT8},    {"b1", CHUTE_DTYPE_BOOL},
             {"i2", CHUTE_DTYPE_INT16},  {"u2", CHUTE_DTYPE_UINT16},  {"f2", CHUTE_DTYPE_FLOAT16},
             {"i4", CHUTE_DTYPE_INT32},  {"u4", CHUTE_DTYPE_UINT32},  {"f4", CHUTE_DTYPE_FLOAT32},
             {"i8", CHUTE_DTYPE_INT64},  {"u8", CHUTE_DTYPE_UINT64},  {"f8", CHUTE_DTYPE_FLOAT64}};
    if (n != 3)
        return -1;
    if (s[0] == '>')
        return -2; /* big-endian */
    if (s[0] != '<' && s[0] != '|' && s[0] != '=')
        return -1;
    for (size_t i = 0; i < sizeof k / sizeof *k; i++)
        if (memcmp(s + 1, k[i].d, 2) == 0) {
            /* numpy writes '|' for one-byte types, '<' for wider ones; a
             * wider type with '|' (no byte order) is not something it writes */
            if (s[0] == '|' && k[i].d[1] != '1')
                return -1;
            *out = k[i].t;
            return 0;
        }
    return -2;
}

/* The parser behind ch_npy_parse and ch_npy_parse_head: the header is in
 * p[len]; the whole value is `total` bytes (== len for a value in memory). */
static int npy_parse(const uint8_t *p, size_t len, uint64_t total, const char *name,
                     uint64_t base, ch_npy_info *out, chute_error *err)
{
#define NPY_BAD(code, ...)                                                                      \
    do {                                                                                         \
        char why_[160];                                                                          \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                                \
        return ch_err(err, code, "%s@%llu: npy: %s", name, (unsigned long long)base, why_);     \
    } while (0)
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(p, "\x93NUMPY", 6) != 0)
        NPY_BAD(CHUTE_ECORRUPT, "no \\x93NUMPY magic");
    uint8_t major = p[6], minor = p[7];
    uint64_t hlen, pre;
    if (major == 1 && minor == 0) {
        hlen = (uint64_t)p[8] | (uint64_t)p[9] << 8;
        pre = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12)
            NPY_BAD(CHUTE_ECORRUPT, "truncated preamble");
        hlen = (uint64_t)p[8] | (uint64_t)p[9] << 8 | (uint64_t)p[10] << 16 | (uint64_t)p[11] << 24;
        pre = 12;
    } else {
        NPY_BAD(CHUTE_ECORRUPT, "unknown version %u.%u", major, minor);
    }
    if (hlen > CH_NPY_MAX_HEADER)
        NPY_BAD(CHUTE_ECORRUPT, "header of %llu bytes (at most %u)", (unsigned long long)hlen,
                CH_NPY_MAX_HEADER);
    if (hlen > len - pre)
        NPY_BAD(CHUTE_ECORRUPT, "header of %llu bytes runs past the %zu-byte value",
                (unsigned long long)hlen, len);
    const char *h = (const char *)p + pre;
    if (hlen == 0 || h[hlen - 1] != '\n')
        NPY_BAD(CHUTE_ECORRUPT, "header does not end in a newline");
    npy_lex x = {h, h + hlen - 1};
    int have_descr = 0, have_fo = 0, have_shape = 0;
    if (!eat(&x, '{'))
        NPY_BAD(CHUTE_ECORRUPT, "header is not a dict");
    for (;;) {
        if (eat(&x, '}'))
            break;
        const char *k;
        size_t kn;
        if (!quoted(&x, &k, &kn) || !eat(&x, ':'))
            NPY_BAD(CHUTE_ECORRUPT, "expected 'key': in the header dict");
        if (kn == 5 && memcmp(k, "descr", 5) == 0 && !have_descr) {
            const char *d;
            size_t dn;
            if (!quoted(&x, &d, &dn))
                NPY_BAD(CHUTE_ECORRUPT, "descr is not a string (structured arrays are not read)");
            int r = descr_dtype(d, dn, &out->dtype);
            if (r == -2)
                NPY_BAD(CHUTE_EUNSUPPORTED, "dtype '%.*s' is not read (little-endian bool, "
                        "int8..64, uint8..64, float16/32/64 are)", (int)(dn < 16 ? dn : 16), d);
            if (r)
                NPY_BAD(CHUTE_ECORRUPT, "bad descr '%.*s'", (int)(dn < 16 ? dn : 16), d);
            have_descr = 1;
        } else if (kn == 13 && memcmp(k, "fortran_order", 13) == 0 && !have_fo) {
            if (word(&x, "True"))
                NPY_BAD(CHUTE_EUNSUPPORTED, "fortran_order True is not read");
            if (!word(&x, "False"))
                NPY_BAD(CHUTE_ECORRUPT, "fortran_order is not True or False");
            have_fo = 1;
        } else if (kn == 5 && memcmp(k, "shape", 5) == 0 && !have_shape) {
            if (!eat(&x, '('))
                NPY_BAD(CHUTE_ECORRUPT, "shape is not a tuple");
            for (;;) {
                if (eat(&x, ')'))
                    break;
                skip_ws(&x);
                if (x.p >= x.end || *x.p < '0' || *x.p > '9')
                    NPY_BAD(CHUTE_ECORRUPT, "shape holds something other than a number");
                uint64_t v = 0;
                while (x.p < x.end && *x.p >= '0' && *x.p <= '9') {
                    if (v > ((uint64_t)INT64_MAX - 9) / 10)
                        NPY_BAD(CHUTE_ECORRUPT, "dimension overflows");
                    v = v * 10 + (uint64_t)(*x.p++ - '0');
                }
                if (out->ndim == CH_FIELD_MAX_DIMS)
                    NPY_BAD(CHUTE_ECORRUPT, "more than %d dimensions", CH_FIELD_MAX_DIMS);
                out->shape[out->ndim++] = (int64_t)v;
                if (eat(&x, ','))
                    continue;
                if (eat(&x, ')'))
                    break;
                NPY_BAD(CHUTE_ECORRUPT, "shape tuple is malformed");
            }
            /* (n) without a comma is an int in Python, not a tuple */
            have_shape = 1;
        } else {
            NPY_BAD(CHUTE_ECORRUPT, "unexpected or repeated key '%.*s'", (int)(kn < 20 ? kn : 20), k);
        }
        if (eat(&x, ','))
            continue;
        if (eat(&x, '}'))
            break;
        NPY_BAD(CHUTE_ECORRUPT, "header dict is malformed");
    }
    skip_ws(&x);
    if (x.p != x.end)
        NPY_BAD(CHUTE_ECORRUPT, "bytes after the header dict");
    if (!have_descr || !have_fo || !have_shape)
        NPY_BAD(CHUTE_ECORRUPT, "header lacks %s", !have_descr ? "descr"
                                                    : !have_fo ? "fortran_order" : "shape");
    uint64_t bytes = ch_dtype_size(out->dtype);
    for (uint32_t d = 0; d < out->ndim; d++)
        if (__builtin_mul_overflow(bytes, (uint64_t)out->shape[d], &bytes))
            NPY_BAD(CHUTE_ECORRUPT, "shape's size overflows");
    out->data_offset = pre + hlen;
    if (total < out->data_offset || bytes != total - out->data_offset)
        NPY_BAD(CHUTE_ECORRUPT, "shape needs %llu data bytes, the value has %llu",
                (unsigned long long)bytes,
                (unsigned long long)(total < out->data_offset ? 0 : total - out->data_offset));
    out->data_bytes = bytes;
    return CHUTE_OK;
#undef NPY_BAD
}

int ch_npy_parse(const uint8_t *p, size_t len, const char *name, uint64_t base,
                 ch_npy_info *out, chute_error *err)
{
    return npy_parse(p, len, len, name, base, out, err);
}

int ch_npy_parse_head(const uint8_t *p, size_t len, uint64_t total, const char *name,
                      uint64_t base, ch_npy_info *out, chute_error *err)
{
    return npy_parse(p, len, total, name, base, out, err);
}

int ch_npy_check(const ch_npy_info *a, const ch_field *f, const char *where, chute_error *err)
{
    int same = a->dtype == f->dtype && a->ndim == f->ndim;
    for (uint32_t d = 0; same && d < a->ndim; d++)
        same = a->shape[d] == f->shape[d];
    if (same)
        return CHUTE_OK;
    char got[140];
    snprintf(got, sizeof got, "a .npy of ");
    shape_str(a->dtype, a->ndim, a->shape, got + 10, sizeof got - 10);
    return ch_field_varies(f, where, got, err);
}

int ch_field_varies(const ch_field *f, const char *where, const char *got, chute_error *err)
{
    char want[128];
    ch_field_describe(f, want, sizeof want);
    return ch_err(err, CHUTE_EINVAL,
                  "%s: field \"%s\": this sample's value is %s, but the field is %s (%s). A "
                  "field's shape is fixed, so one that varies is refused, never skipped: leave "
                  "it out of fields, or store it at one shape (padded, with a count) or as bytes",
                  where, f->name, got, want,
                  f->origin[0] ? f->origin : "learned from the first sample with it");
}

void ch_field_from_npy(ch_field *f, const ch_npy_info *a, const char *origin)
{
    f->dtype = a->dtype;
    f->ndim = a->ndim;
    memcpy(f->shape, a->shape, sizeof f->shape);
    f->known = 1;
    if (origin)
        snprintf(f->origin, sizeof f->origin, "learned from %s", origin);
}

int ch_split_names(const char *list, char names[][CH_FIELD_NAME_MAX], int max)
{
    int k = 0;
    const char *p = list;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *b = p;
        while (n && *b == ' ') {
            b++;
            n--;
        }
        while (n && b[n - 1] == ' ')
            n--;
        if (n) {
            if (n >= CH_FIELD_NAME_MAX || k == max)
                return -1;
            memcpy(names[k], b, n);
            names[k][n] = '\0';
            k++;
        }
        p = e ? e + 1 : NULL;
    }
    return k;
}

/* ---- declared fields (streams; fields.h) ------------------------------- */

static int decl_dtype(const char *p, size_t n)
{
    for (int d = 0; d <= CHUTE_DTYPE_BOOL; d++) {
        const char *nm = dtype_name(d);
        if (strlen(nm) == n && !memcmp(nm, p, n))
            return d;
    }
    return -1;
}

static int decl_bad(chute_error *err, int k, const char *p, size_t n, const char *why)
{
    return ch_err(err, CHUTE_EINVAL, "extra_keys: item %d (\"%.*s\"): %s", k + 1,
                  (int)(n > 80 ? 80 : n), p, why);
}

/* One item p[0..n), spaces trimmed, into *f. */
static int decl_item(const char *p, size_t n, int k, ch_field *f, chute_error *err)
{
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return decl_bad(err, k, p, n, "not NAME:TYPE");
    size_t nl = (size_t)(colon - p);
    if (nl == 0 || nl >= CH_FIELD_NAME_MAX)
        return decl_bad(err, k, p, n, "the name is empty or too long");
    memset(f, 0, sizeof *f);
    memcpy(f->name, p, nl);
    const char *t = colon + 1, *end = p + n;
    const char *br = memchr(t, '[', (size_t)(end - t));
    size_t tl = (size_t)((br ? br : end) - t);
    int dtype = decl_dtype(t, tl);
    /* "x.npy", or a WebDataset sample's bare ".npy" member (field "npy") */
    int npy = (nl >= 4 && !memcmp(p + nl - 4, ".npy", 4)) || (nl == 3 && !memcmp(p, "npy", 3));
    int dims = -1; /* -1: no brackets */
    int64_t shape[CH_FIELD_MAX_DIMS];
    if (br) {
        if (end[-1] != ']')
            return decl_bad(err, k, p, n, "a shape is [D0xD1x...]");
        const char *q = br + 1, *qe = end - 1;
        dims = 0;
        while (q < qe) {
            if (dims == CH_FIELD_MAX_DIMS)
                return decl_bad(err, k, p, n, "more than 8 dimensions");
            uint64_t v = 0;
            const char *q0 = q;
            while (q < qe && *q >= '0' && *q <= '9') {
                v = v * 10 + (uint64_t)(*q - '0');
                if (v > INT32_MAX)
                    return decl_bad(err, k, p, n, "a dimension over 2^31-1");
                q++;
            }
            if (q == q0 || v == 0)
                return decl_bad(err, k, p, n, "a dimension is a number >= 1");
            shape[dims++] = (int64_t)v;
            if (q < qe && *q++ != 'x')
                return decl_bad(err, k, p, n, "dimensions are separated by 'x'");
            if (q == qe && q[-1] == 'x')
                return decl_bad(err, k, p, n, "a shape ends with a dimension");
        }
    }
    if (npy) {
        if (dtype < 0)
            return decl_bad(err, k, p, n, "a .npy field's type is a dtype (uint8, float32, ...)");
        if (dims < 0)
            return decl_bad(err, k, p, n, "a .npy field needs a shape ([] for a 0-d array)");
        f->kind = CHUTE_FIELD_TENSOR;
        f->dtype = dtype;
        f->ndim = (uint32_t)dims;
        uint64_t b = ch_dtype_size(dtype);
        for (int d = 0; d < dims; d++) {
            f->shape[d] = shape[d];
            if (__builtin_mul_overflow(b, (uint64_t)shape[d], &b) || b > (1ull << 40))
                return decl_bad(err, k, p, n, "the tensor is over 2^40 bytes");
        }
    } else if (tl == 5 && !memcmp(t, "bytes", 5)) {
        if (dims >= 0)
            return decl_bad(err, k, p, n, "a bytes field has no shape");
        f->kind = CHUTE_FIELD_BYTES;
        f->dtype = CHUTE_DTYPE_UINT8;
        f->ndim = 1;
        f->shape[0] = -1;
    } else if (dtype == CHUTE_DTYPE_INT64 || dtype == CHUTE_DTYPE_FLOAT32) {
        if (dims > 1 || dims == 0)
            return decl_bad(err, k, p, n, "a list field's shape is [N]");
        f->kind = dtype == CHUTE_DTYPE_INT64 ? CHUTE_FIELD_INT64 : CHUTE_FIELD_FLOAT32;
        f->dtype = dtype;
        f->ndim = dims == 1 ? 1 : 0;
        f->shape[0] = dims == 1 ? shape[0] : 0;
    } else {
        return decl_bad(err, k, p, n,
                        "the type is int64, float32 or bytes (a NAME.npy field: a dtype and shape)");
    }
    f->known = 1;
    snprintf(f->origin, sizeof f->origin, "as declared in extra_keys");
    return CHUTE_OK;
}

int ch_field_decl_parse(const char *list, ch_field *out, int max, int *n, chute_error *err)
{
    *n = 0;
    const char *p = list ? list : "";
    int k = 0;
    for (;;) {
        size_t len = 0; /* to the next comma outside brackets ("[3,4]" gets its own reason) */
        for (int depth = 0; p[len] && (p[len] != ',' || depth > 0); len++)
            depth += p[len] == '[' ? 1 : p[len] == ']' ? -1 : 0;
        const char *a = p, *b = p + len;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (b > a) {
            if (*n >= max)
                return ch_err(err, CHUTE_EINVAL, "extra_keys: more than %d fields", max);
            int rc = decl_item(a, (size_t)(b - a), k, &out[*n], err);
            if (rc != CHUTE_OK)
                return rc;
            for (int j = 0; j < *n; j++)
                if (!strcmp(out[j].name, out[*n].name))
                    return decl_bad(err, k, a, (size_t)(b - a), "the name is listed twice");
            (*n)++;
        }
        k++;
        if (!p[len])
            break;
        p += len + 1;
    }
    return CHUTE_OK;
}
