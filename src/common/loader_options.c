/*
 * loader_options.c — loader_options.def expanded into a const table of
 * descriptors (name, kind, field offset, default, bounds, layers, help).
 * Why a table and not only macros: the CLI builds its flag rows from it at
 * run time, the Python extension exports it to chute/loader.py, and the
 * docs generator prints it; each reads the same bytes.  The defaults and
 * bounds are applied by ch_loader_options_resolve (src/pipeline/loader.c).
 */
#include "common/loader_options.h"
#include "common/common.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

/* Each field has exactly the type its kind says, and each default is
 * within its bounds (compile-time checks; a bound of 0 makes gcc note that
 * one comparison always holds, which is the point). */
/* The integer rows' consumers below leave the other kinds empty. */
#define CH_LOADER_ENUM(name, field, choices, layers, help)
#define CH_LOADER_FLOAT(name, field, n, def, lo, hi, layers, help)
#define CH_LOADER_NEG(name, field, layers, help)
#define CH_LOADER_STR(name, field, layers, help)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#define CH_FIELD_TYPE_CH_OPT_U32 uint32_t
#define CH_FIELD_TYPE_CH_OPT_U64 uint64_t
#define CH_FIELD_TYPE_CH_OPT_BOOL int
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help)                             \
    _Static_assert(sizeof(((chute_loader_options *)0)->field) ==                                \
                       sizeof(CH_FIELD_TYPE_##kind),                                            \
                   #field " has the wrong size for " #kind);                                   \
    _Static_assert((uint64_t)(def) == 0 ||                                                      \
                       ((uint64_t)(def) >= (uint64_t)(lo) && (uint64_t)(def) <= (uint64_t)(hi)), \
                   #name ": default out of its bounds");
#include "common/loader_options.def"
#undef CH_LOADER_OPT
#pragma GCC diagnostic pop

static const ch_loader_opt table[CH_LOPT_COUNT] = {
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help)                             \
    {#name, kind, offsetof(chute_loader_options, field), (uint64_t)(def), (uint64_t)(lo),       \
     (uint64_t)(hi), (layers), help, #field},
#include "common/loader_options.def"
#undef CH_LOADER_OPT
};

#undef CH_LOADER_ENUM
#undef CH_LOADER_FLOAT
#undef CH_LOADER_NEG
#undef CH_LOADER_STR

const ch_loader_opt *ch_loader_opts(void)
{
    return table;
}

uint64_t ch_loader_opt_get(const chute_loader_options *o, const ch_loader_opt *d)
{
    const char *p = (const char *)o + d->offset;
    switch (d->kind) {
    case CH_OPT_U32: {
        uint32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case CH_OPT_U64: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case CH_OPT_BOOL:
    default: {
        int v;
        memcpy(&v, p, sizeof v);
        return v != 0;
    }
    }
}

void ch_loader_opt_set(chute_loader_options *o, const ch_loader_opt *d, uint64_t v)
{
    char *p = (char *)o + d->offset;
    if (d->kind == CH_OPT_U32) {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, sizeof x);
    } else if (d->kind == CH_OPT_U64) {
        memcpy(p, &v, sizeof v);
    } else {
        int x = v != 0;
        memcpy(p, &x, sizeof x);
    }
}

uint64_t ch_opt_off_value(const ch_loader_opt *d)
{
    return d->kind == CH_OPT_U32 ? UINT32_MAX : UINT64_MAX;
}

const char *ch_opt_kind_name(ch_opt_kind k)
{
    return k == CH_OPT_U32 ? "u32" : k == CH_OPT_U64 ? "u64" : "bool";
}

/* ---- the other kinds, and the dataset table ---- */

/* Choice k of an enum names the C value k: checked here for every enum. */
_Static_assert(CHUTE_TRANSFORM_TRAIN == 0 && CHUTE_TRANSFORM_EVAL == 1 &&
                   CHUTE_TRANSFORM_NONE == 2, "transform choices are train|eval|none");
_Static_assert(CHUTE_DTYPE_FLOAT32 == 0 && CHUTE_DTYPE_UINT8 == 1 && CHUTE_DTYPE_FLOAT16 == 2,
               "dtype choices are float32|uint8|float16");
_Static_assert(CHUTE_LAYOUT_DEFAULT == 0 && CHUTE_LAYOUT_NCHW == 1 && CHUTE_LAYOUT_NHWC == 2,
               "layout choices are default|nchw|nhwc");
_Static_assert(CHUTE_REMAINDER_PAD == 0 && CHUTE_REMAINDER_DROP == 1, "remainder: pad|drop");
_Static_assert(CHUTE_CORRUPT_SKIP == 0 && CHUTE_CORRUPT_FAIL == 1, "on_corrupt: skip|fail");
_Static_assert(CHUTE_SHUFFLE_GLOBAL == 0 && CHUTE_SHUFFLE_SHARDS == 1, "shuffle: global|shards");
_Static_assert(CHUTE_SOURCE_AUTO == 0 && CHUTE_SOURCE_TREE == 1 && CHUTE_SOURCE_SHARDS == 2,
               "kind: auto|tree|shards");

#define CH_UNPAREN_(...) __VA_ARGS__
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help)
#define CH_SIZE_IS_(S, field, T, what)                                                         \
    _Static_assert(sizeof(((S *)0)->field) == sizeof(T), #field " is not " what);
/* Field types, at compile time. */
#define CH_LOADER_ENUM(name, field, choices, layers, help)                                     \
    CH_SIZE_IS_(chute_loader_options, field, int, "an int-sized enum")
#define CH_LOADER_FLOAT(name, field, n, def, lo, hi, layers, help)                             \
    CH_SIZE_IS_(chute_loader_options, field, float[n], "float[" #n "]")
#define CH_LOADER_NEG(name, field, layers, help) CH_SIZE_IS_(chute_loader_options, field, int, "int")
#define CH_LOADER_STR(name, field, layers, help)                                               \
    CH_SIZE_IS_(chute_loader_options, field, const char *, "a string")
#include "common/loader_options.def"
#undef CH_LOADER_ENUM
#undef CH_LOADER_FLOAT
#undef CH_LOADER_NEG
#undef CH_LOADER_STR

#define CH_ROW_(field_, kind_, S)                                                              \
    .field = #field_, .kind = kind_, .offset = offsetof(S, field_)
static const ch_opt_row xrows[] = {
#define CH_LOADER_ENUM(name_, field_, choices_, layers_, help_)                                \
    {.name = #name_, CH_ROW_(field_, CH_OPT_ENUM, chute_loader_options), .choices = choices_,   \
     .layers = (layers_), .help = help_},
#define CH_LOADER_FLOAT(name_, field_, n_, def_, lo_, hi_, layers_, help_)                     \
    {.name = #name_, CH_ROW_(field_, CH_OPT_F32, chute_loader_options), .n = n_,                \
     .fdef = {CH_UNPAREN_ def_}, .fmin = lo_, .fmax = hi_, .layers = (layers_), .help = help_},
#define CH_LOADER_NEG(name_, field_, layers_, help_)                                           \
    {.name = #name_, CH_ROW_(field_, CH_OPT_NEG, chute_loader_options), .layers = (layers_),    \
     .help = help_},
#define CH_LOADER_STR(name_, field_, layers_, help_)                                           \
    {.name = #name_, CH_ROW_(field_, CH_OPT_STR, chute_loader_options), .layers = (layers_),    \
     .help = help_},
#include "common/loader_options.def"
#undef CH_LOADER_ENUM
#undef CH_LOADER_FLOAT
#undef CH_LOADER_NEG
#undef CH_LOADER_STR
};
#undef CH_LOADER_OPT

#define CH_FIELD_TYPE_CH_OPT_I32 int32_t
#define CH_DATASET_OPT(name, kind, field, def, lo, hi, layers, help)                            \
    CH_SIZE_IS_(chute_dataset_options, field, CH_FIELD_TYPE_##kind, #kind)
#define CH_DATASET_ENUM(name, field, choices, layers, help)                                    \
    CH_SIZE_IS_(chute_dataset_options, field, int, "an int-sized enum")
#define CH_DATASET_STR(name, field, layers, help)                                              \
    CH_SIZE_IS_(chute_dataset_options, field, const char *, "a string")
#include "common/dataset_options.def"
#undef CH_DATASET_OPT
#undef CH_DATASET_ENUM
#undef CH_DATASET_STR

static const ch_opt_row drows[] = {
#define CH_DATASET_OPT(name_, kind_, field_, def_, lo_, hi_, layers_, help_)                   \
    {.name = #name_, CH_ROW_(field_, kind_, chute_dataset_options), .def = (uint64_t)(def_),    \
     .min = (uint64_t)(int64_t)(lo_), .max = (uint64_t)(hi_), .layers = (layers_),             \
     .help = help_},
#define CH_DATASET_ENUM(name_, field_, choices_, layers_, help_)                               \
    {.name = #name_, CH_ROW_(field_, CH_OPT_ENUM, chute_dataset_options), .choices = choices_,  \
     .layers = (layers_), .help = help_},
#define CH_DATASET_STR(name_, field_, layers_, help_)                                          \
    {.name = #name_, CH_ROW_(field_, CH_OPT_STR, chute_dataset_options), .layers = (layers_),   \
     .help = help_},
#include "common/dataset_options.def"
#undef CH_DATASET_OPT
#undef CH_DATASET_ENUM
#undef CH_DATASET_STR
};

int ch_loader_xopt_count(void)
{
    return (int)(sizeof xrows / sizeof xrows[0]);
}

const ch_opt_row *ch_loader_xopts(void)
{
    return xrows;
}

int ch_dataset_opt_count(void)
{
    return (int)(sizeof drows / sizeof drows[0]);
}

const ch_opt_row *ch_dataset_opts(void)
{
    return drows;
}

int ch_opt_choice(const ch_opt_row *d, int k, char *buf, size_t cap)
{
    const char *c = d->choices ? d->choices : "";
    for (int i = 0; *c; i++) {
        size_t l = strcspn(c, "|");
        if (i == k) {
            snprintf(buf, cap, "%.*s", (int)l, c);
            return 0;
        }
        c += l;
        if (*c == '|')
            c++;
    }
    return -1;
}

int ch_opt_choice_find(const ch_opt_row *d, const char *s)
{
    char b[64];
    for (int k = 0; ch_opt_choice(d, k, b, sizeof b) == 0; k++)
        if (strcmp(b, s) == 0)
            return k;
    return -1;
}

int ch_opt_rows_check(const void *o, const ch_opt_row *rows, int n, chute_error *err)
{
    for (int i = 0; i < n; i++) {
        const ch_opt_row *d = &rows[i];
        const char *p = (const char *)o + d->offset;
        if (d->kind == CH_OPT_ENUM) {
            int v;
            char b[64];
            memcpy(&v, p, sizeof v);
            /* A row whose choices start at a nonzero value takes zero as
             * the first choice (the session's transform). */
            int k = d->first && v == 0 ? 0 : v - (int)d->first;
            if (k < 0 || ch_opt_choice(d, k, b, sizeof b) != 0) {
                if (d->first) {
                    int n = 0;
                    while (ch_opt_choice(d, n, b, sizeof b) == 0)
                        n++;
                    return ch_err(err, CHUTE_EINVAL, "%s %d is not one of %s (%u..%u)",
                                  d->name, v, d->choices, d->first, d->first + n - 1);
                }
                return ch_err(err, CHUTE_EINVAL, "%s %d is not one of %s", d->name, v,
                              d->choices);
            }
        } else if (d->kind == CH_OPT_F32) {
            float v[3];
            memcpy(v, p, d->n * sizeof(float));
            int zero = 1;
            for (unsigned c = 0; c < d->n; c++)
                zero &= v[c] == 0;
            if (zero)
                continue; /* the default */
            for (unsigned c = 0; c < d->n; c++)
                if (!isfinite(v[c]) || !(v[c] > d->fmin) || !(v[c] <= d->fmax)) {
                    char at[16] = "";
                    if (d->n > 1)
                        snprintf(at, sizeof at, "[%u]", c);
                    return ch_err(err, CHUTE_EINVAL, "%s%s = %g must be finite, > %g and <= %g",
                                  d->name, at, (double)v[c], (double)d->fmin, (double)d->fmax);
                }
        } else if (d->kind == CH_OPT_U32 || d->kind == CH_OPT_I32 || d->kind == CH_OPT_U64) {
            if (d->kind == CH_OPT_I32) {
                int32_t v;
                memcpy(&v, p, sizeof v);
                if (v < (int64_t)d->min || v > (int64_t)d->max)
                    return ch_err(err, CHUTE_EINVAL, "%s %d is out of range (%lld..%lld)",
                                  d->name, (int)v, (long long)(int64_t)d->min,
                                  (long long)(int64_t)d->max);
                continue;
            }
            uint64_t v;
            if (d->kind == CH_OPT_U32) {
                uint32_t x;
                memcpy(&x, p, sizeof x);
                v = x;
            } else {
                memcpy(&v, p, sizeof v);
            }
            if (v == 0 && d->def != 0) /* zero means the default (dataset rows) */
                v = d->def;
            /* A default of 0 below the bounds (and not computed) is a
             * value of its own: "0, or min..max". */
            int zero_ok = d->def == 0 && d->min > 0 && !(d->layers & CH_OPT_AUTO);
            if ((v < d->min || v > d->max) && !(zero_ok && v == 0))
                return ch_err(err, CHUTE_EINVAL, "%s %llu is out of range (%s%llu..%llu)",
                              d->name, (unsigned long long)v, zero_ok ? "0, or " : "",
                              (unsigned long long)d->min, (unsigned long long)d->max);
        }
    }
    return CHUTE_OK;
}

int ch_dataset_options_check(const chute_dataset_options *o, chute_error *err)
{
    return ch_opt_rows_check(o, drows, ch_dataset_opt_count(), err);
}

/* ---- help lines that name a registry --------------------------------------- */

/* "a, b or c" from a registry's public name call (name(k), NULL past the last). */
static size_t registry_names(const char *(*name)(uint32_t), char *out, size_t cap)
{
    size_t l = 0, n = 0;
    while (name((uint32_t)n))
        n++;
    for (size_t k = 0; k < n && l < cap; k++)
        l += (size_t)snprintf(out + l, cap - l, "%s%s", k == 0 ? "" : k + 1 < n ? ", " : " or ",
                              name((uint32_t)k));
    return CH_MIN(l, cap - 1);
}

const char *ch_opt_help(const char *help, char *buf, size_t cap)
{
    static const struct {
        const char *token;
        const char *(*name)(uint32_t);
    } lists[] = {{"{formats}", chute_format_name}, {"{writers}", chute_writer_name}};
    const size_t nlists = sizeof lists / sizeof *lists;
    if (!help || !strchr(help, '{') || cap == 0)
        return help;
    size_t l = 0;
    buf[0] = '\0';
    for (const char *p = help; *p && l + 1 < cap;) {
        size_t k = 0;
        while (k < nlists && strncmp(p, lists[k].token, strlen(lists[k].token)) != 0)
            k++;
        if (k < nlists) {
            l += registry_names(lists[k].name, buf + l, cap - l);
            p += strlen(lists[k].token);
        } else {
            buf[l++] = *p++;
            buf[l] = '\0';
        }
    }
    return buf;
}
