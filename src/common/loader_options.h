/*
 * loader_options.h — the loader's option table (loader_options.def) as
 * data: one descriptor per option, so C validation, the CLI's flags and
 * --help, the Python keywords and docs/OPTIONS.md all read the same
 * defaults and bounds.  The table is const; nothing here has state.
 */
#ifndef CHUTE_LOADER_OPTIONS_H
#define CHUTE_LOADER_OPTIONS_H

#include "chute.h"

#include <stddef.h>
#include <stdint.h>

typedef enum ch_opt_kind { CH_OPT_U32, CH_OPT_U64, CH_OPT_BOOL } ch_opt_kind;

enum {
    CH_OPT_CLI = 1,  /* `chute bench` and `chute doctor` take --name */
    CH_OPT_PY = 2,   /* chute.Loader takes name= */
    CH_OPT_AUTO = 4, /* default 0: computed when the loader is created */
};

typedef struct ch_loader_opt {
    const char *name;
    ch_opt_kind kind;
    size_t offset; /* of the field in chute_loader_options */
    uint64_t def, min, max;
    unsigned layers;
    const char *help;
} ch_loader_opt;

/* Index of each option in the table: CH_LOPT_batch_size, ... */
enum {
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help) CH_LOPT_##name,
#include "common/loader_options.def"
#undef CH_LOADER_OPT
    CH_LOPT_COUNT
};

/* The table, in .def order (CH_LOPT_COUNT entries). */
const ch_loader_opt *ch_loader_opts(void);
/* The field an option describes, widened to 64 bits; and stored back
 * (narrowed to the field's type: callers check bounds first). */
uint64_t ch_loader_opt_get(const chute_loader_options *o, const ch_loader_opt *d);
void ch_loader_opt_set(chute_loader_options *o, const ch_loader_opt *d, uint64_t v);
/* "kind" as a word: "u32", "u64", "bool". */
const char *ch_opt_kind_name(ch_opt_kind k);

/* Copy in (NULL = all defaults) to out, fill every zero field with its
 * default (computed ones included: workers, the eval resize side, layout,
 * mean/std), then check every bound; CHUTE_EINVAL with a message that
 * names the option otherwise.  chute_loader_create's first step. */
int ch_loader_options_resolve(const chute_loader_options *in, chute_loader_options *out,
                              chute_error *err);

#endif
