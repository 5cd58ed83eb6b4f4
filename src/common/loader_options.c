/*
 * loader_options.c — loader_options.def expanded into a const table of
 * descriptors (name, kind, field offset, default, bounds, layers, help).
 * Why a table and not only macros: the CLI builds its flag rows from it at
 * run time, the Python extension exports it to chute/loader.py, and the
 * docs generator prints it; each reads the same bytes.  The defaults and
 * bounds are applied by ch_loader_options_resolve (src/pipeline/loader.c).
 */
#include "common/loader_options.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Each field has exactly the type its kind says, and each default is
 * within its bounds (compile-time checks; a bound of 0 makes gcc note that
 * one comparison always holds, which is the point). */
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
     (uint64_t)(hi), (layers), help},
#include "common/loader_options.def"
#undef CH_LOADER_OPT
};

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

const char *ch_opt_kind_name(ch_opt_kind k)
{
    return k == CH_OPT_U32 ? "u32" : k == CH_OPT_U64 ? "u64" : "bool";
}
