/*
 * infer_options.c — infer_options.def expanded into the inference session's
 * option rows, and the session's resolve step (zero fields -> defaults,
 * then every bound checked).
 *
 * Why the rows are built once at run time and not as a const initializer:
 * the fields the session shares with the loader (size, dtype, the eval
 * transform's knobs, workers, the limits) are the loader table's rows —
 * their defaults, bounds and help are written only in loader_options.def —
 * and C cannot copy one const array's members into another's initializer.
 * So the .def names the field, and ch_infer_opts copies the loader's row
 * under a pthread_once; after that the table is read-only, like the
 * others.  A field named here that the loader table lacks is a build-time
 * error only as far as the struct members go (the sizes below); the unit
 * test unit_options.infer_rows_* checks every row was found.
 */
#include "common/loader_options.h"
#include "common/common.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Shared fields have one type in both structs; the session's own rows have
 * the type their kind says (compile-time). */
#define CH_INFER_LOADER(field, layers)                                                         \
    _Static_assert(sizeof(((chute_infer_options *)0)->field) ==                                 \
                       sizeof(((chute_loader_options *)0)->field),                              \
                   #field ": chute_infer_options and chute_loader_options disagree");
#define CH_INFER_TYPE_CH_OPT_U32 uint32_t
#define CH_INFER_TYPE_CH_OPT_BOOL int
#define CH_INFER_OPT(name, kind, field, def, lo, hi, layers, help)                              \
    _Static_assert(sizeof(((chute_infer_options *)0)->field) == sizeof(CH_INFER_TYPE_##kind),  \
                   #field " has the wrong size for " #kind);                                   \
    _Static_assert((def) == 0 || ((def) >= (lo) && (def) <= (hi)), #name ": default out of bounds");
#define CH_INFER_ENUM(name, field, first, choices, layers, help)                               \
    _Static_assert(sizeof(((chute_infer_options *)0)->field) == sizeof(int), #field " is an enum");
#define CH_INFER_NEG(name, field, cli, layers, help)                                           \
    _Static_assert(sizeof(((chute_infer_options *)0)->field) == sizeof(int), #field " is an int");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#include "common/infer_options.def"
#pragma GCC diagnostic pop
#undef CH_INFER_LOADER
#undef CH_INFER_OPT
#undef CH_INFER_ENUM
#undef CH_INFER_NEG

_Static_assert(CHUTE_TRANSFORM_EVAL == 1 && CHUTE_TRANSFORM_NONE == 2,
               "the session's transform choices are eval|none from 1");

#define CH_IROW_(field_, kind_) .field = #field_, .kind = kind_,                                \
    .offset = offsetof(chute_infer_options, field_)
/* The .def's rows; a shared row holds only its field, offsets and layers
 * until ch_infer_opts fills in the loader's row. */
static const ch_opt_row defs[] = {
#define CH_INFER_LOADER(field_, layers_)                                                       \
    {CH_IROW_(field_, CH_OPT_U32), .layers = (layers_), .from_loader = 1,                       \
     .loader_offset = offsetof(chute_loader_options, field_)},
#define CH_INFER_OPT(name_, kind_, field_, def_, lo_, hi_, layers_, help_)                     \
    {.name = #name_, CH_IROW_(field_, kind_), .def = (def_), .min = (lo_), .max = (hi_),        \
     .layers = (layers_), .help = help_},
#define CH_INFER_ENUM(name_, field_, first_, choices_, layers_, help_)                         \
    {.name = #name_, CH_IROW_(field_, CH_OPT_ENUM), .first = (first_), .choices = choices_,     \
     .layers = (layers_), .help = help_},
#define CH_INFER_NEG(name_, field_, cli_, layers_, help_)                                      \
    {.name = #name_, CH_IROW_(field_, CH_OPT_NEG), .cli = cli_, .layers = (layers_),            \
     .help = help_},
#include "common/infer_options.def"
#undef CH_INFER_LOADER
#undef CH_INFER_OPT
#undef CH_INFER_ENUM
#undef CH_INFER_NEG
};
#define NROWS ((int)(sizeof defs / sizeof defs[0]))

static ch_opt_row rows[NROWS];
static pthread_once_t rows_once = PTHREAD_ONCE_INIT;

/* The loader's row whose field is at offset off: an integer row made a
 * ch_opt_row, or a copy of one of the other rows.  0 when there is none. */
static int loader_row(size_t off, ch_opt_row *out)
{
    const ch_loader_opt *t = ch_loader_opts();
    for (int i = 0; i < CH_LOPT_COUNT; i++)
        if (t[i].offset == off) {
            memset(out, 0, sizeof *out);
            out->name = t[i].name;
            out->field = t[i].field;
            out->kind = t[i].kind;
            out->offset = off;
            out->def = t[i].def;
            out->min = t[i].min;
            out->max = t[i].max;
            out->layers = t[i].layers;
            out->help = t[i].help;
            return 1;
        }
    const ch_opt_row *x = ch_loader_xopts();
    for (int i = 0; i < ch_loader_xopt_count(); i++)
        if (x[i].offset == off) {
            *out = x[i];
            return 1;
        }
    return 0;
}

static void build_rows(void)
{
    for (int i = 0; i < NROWS; i++) {
        rows[i] = defs[i];
        ch_opt_row l;
        if (!defs[i].from_loader || !loader_row(defs[i].loader_offset, &l))
            continue; /* a shared row not found keeps no name: the unit test fails */
        rows[i] = l;
        rows[i].offset = defs[i].offset;
        rows[i].layers = defs[i].layers | (l.layers & (CH_OPT_AUTO | CH_OPT_ZERO_OFF));
        rows[i].from_loader = 1;
        rows[i].loader_offset = defs[i].loader_offset;
    }
}

int ch_infer_opt_count(void)
{
    return NROWS;
}

const ch_opt_row *ch_infer_opts(void)
{
    pthread_once(&rows_once, build_rows);
    return rows;
}

size_t ch_opt_row_size(const ch_opt_row *d)
{
    switch (d->kind) {
    case CH_OPT_U64:
        return sizeof(uint64_t);
    case CH_OPT_F32:
        return d->n * sizeof(float);
    case CH_OPT_STR:
        return sizeof(const char *);
    default: /* u32, i32, and the int-sized bool, enum and negated flag */
        return sizeof(uint32_t);
    }
}

int ch_infer_options_resolve(const chute_infer_options *in, chute_infer_options *out,
                             chute_loader_options *lo_out, chute_error *err)
{
    const ch_opt_row *t = ch_infer_opts();
    chute_infer_options o = in ? *in : (chute_infer_options){0};
    /* The session's own rows: zero takes the default (an enum's first
     * choice), then the bounds, in table order. */
    for (int i = 0; i < NROWS; i++) {
        const ch_opt_row *d = &t[i];
        char *p = (char *)&o + d->offset;
        uint32_t v;
        if (d->from_loader || (d->kind != CH_OPT_U32 && d->kind != CH_OPT_ENUM) ||
            (d->layers & CH_OPT_AUTO))
            continue;
        memcpy(&v, p, sizeof v);
        if (v == 0) {
            v = d->kind == CH_OPT_ENUM ? d->first : (uint32_t)d->def;
            memcpy(p, &v, sizeof v);
        }
    }
    /* Computed: the admission queue is sized apart from the batch: at
     * max_batch 1 a queue of 4 * max_batch (4 requests) refused bursts that
     * a Poisson stream at half the workers' rate brings every second, and
     * capped the rate at a fraction of what the workers could do (session
     * 4's figures).  max_batch <= 1024 once checked; checked below first. */
    if (!o.queue_capacity)
        o.queue_capacity = o.max_batch > 16 && o.max_batch <= UINT32_MAX / 4 ? 4 * o.max_batch
                                                                              : 64;
    for (int i = 0; i < NROWS; i++)
        if (!t[i].from_loader && ch_opt_rows_check(&o, &t[i], 1, err) != CHUTE_OK)
            return CHUTE_EINVAL;
    o.unordered = o.unordered != 0;
    o.pretouch = o.pretouch != 0;
    /* The shared fields, resolved and checked as the loader's (the session
     * decodes batches of max_batch with the transform chosen above). */
    chute_loader_options lin = {0}, lres;
    lin.batch_size = o.max_batch;
    lin.transform = o.transform;
    for (int i = 0; i < NROWS; i++)
        if (t[i].from_loader)
            memcpy((char *)&lin + t[i].loader_offset, (const char *)&o + t[i].offset,
                   ch_opt_row_size(&t[i]));
    int rc = ch_loader_options_resolve(&lin, &lres, err);
    if (rc != CHUTE_OK)
        return rc;
    for (int i = 0; i < NROWS; i++)
        if (t[i].from_loader)
            memcpy((char *)&o + t[i].offset, (const char *)&lres + t[i].loader_offset,
                   ch_opt_row_size(&t[i]));
    *out = o;
    if (lo_out)
        *lo_out = lres;
    return CHUTE_OK;
}
