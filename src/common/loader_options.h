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

typedef enum ch_opt_kind {
    CH_OPT_U32,
    CH_OPT_U64,
    CH_OPT_BOOL,
    /* The other rows' kinds (ch_opt_row): */
    CH_OPT_I32,  /* int32_t */
    CH_OPT_ENUM, /* an int-sized C enum, values 0.. named by choices */
    CH_OPT_F32,  /* float or float[n] */
    CH_OPT_NEG,  /* int no_<name>: nonzero turns <name> off */
    CH_OPT_STR   /* const char *, borrowed */
} ch_opt_kind;

enum {
    CH_OPT_CLI = 1,  /* the CLI takes --name (bench and doctor; infer rows: bench --latency) */
    CH_OPT_PY = 2,   /* chute.Loader takes name= */
    CH_OPT_AUTO = 4, /* default 0: computed when the loader is created */
    /* The default is on (nonzero) and 0 means off: the CLI and Python take
     * 0 for off; C cannot (a zero field takes the default), so C spells
     * off as all ones (CHUTE_READAHEAD_OFF), which the resolve makes 0. */
    CH_OPT_ZERO_OFF = 8,
};

typedef struct ch_loader_opt {
    const char *name;
    ch_opt_kind kind;
    size_t offset; /* of the field in chute_loader_options */
    uint64_t def, min, max;
    unsigned layers;
    const char *help;
    const char *field; /* the member's name */
} ch_loader_opt;

/* Index of each option in the table: CH_LOPT_batch_size, ... */
#define CH_LOADER_ENUM(name, field, choices, layers, help)
#define CH_LOADER_FLOAT(name, field, n, def, lo, hi, layers, help)
#define CH_LOADER_NEG(name, field, layers, help)
#define CH_LOADER_STR(name, field, layers, help)
enum {
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help) CH_LOPT_##name,
#include "common/loader_options.def"
#undef CH_LOADER_OPT
    CH_LOPT_COUNT
};
#undef CH_LOADER_ENUM
#undef CH_LOADER_FLOAT
#undef CH_LOADER_NEG
#undef CH_LOADER_STR

/* The rows of the other kinds (enum, float, negated flag, string) of
 * loader_options.def, and every row of dataset_options.def and of
 * infer_options.def (ch_infer_opts). */
typedef struct ch_opt_row {
    const char *name;  /* C/Python name; CLI --name ('_' as '-'), --no-name for NEG */
    const char *field; /* the struct member */
    ch_opt_kind kind;
    size_t offset;
    unsigned n;          /* F32: components (1 or 3) */
    const char *choices; /* ENUM: "a|b|c", values 0, 1, 2 */
    uint64_t def, min, max; /* U32/U64/I32 (I32 as int64_t bits) */
    float fdef[3], fmin, fmax; /* F32: value finite, > fmin, <= fmax */
    unsigned layers;
    const char *help;
    /* The inference session's table (infer_options.def) only: */
    unsigned first;        /* ENUM: the C value of the first choice (zero means it too) */
    const char *cli;       /* NEG: the CLI flag when not --no-<name> */
    int from_loader;       /* the loader table's row for the same field: */
    size_t loader_offset;  /* the field's offset in chute_loader_options */
} ch_opt_row;

int ch_loader_xopt_count(void);
const ch_opt_row *ch_loader_xopts(void);
int ch_dataset_opt_count(void);
const ch_opt_row *ch_dataset_opts(void);
/* ENUM: the k-th choice's name into buf (NUL-terminated); 0, or -1 past
 * the last.  ch_opt_choice_find: the value named s, or -1. */
int ch_opt_choice(const ch_opt_row *d, int k, char *buf, size_t cap);
int ch_opt_choice_find(const ch_opt_row *d, const char *s);
/* A row's help (or any help line) with "{formats}" replaced by the
 * registered formats' names ("tree, shards, ... or wav", chute_format_name)
 * and "{writers}" by the writers' ("chute, tfrecord or wds",
 * chute_writer_name): no help line, doc or message lists them by hand, so
 * a format added to the registry shows up in the CLI's --help, Python's
 * option rows and docs/OPTIONS.md with no other edit.  Returns buf (cap
 * bytes, truncated to fit), or help itself when it names neither list. */
const char *ch_opt_help(const char *help, char *buf, size_t cap);
/* Check the rows' enums, floats and integers of one struct (o is a
 * chute_loader_options or a chute_dataset_options, matching rows): zero
 * floats are taken as their default; CHUTE_EINVAL naming the option
 * otherwise ("transform 7 is not one of train|eval|none"). */
int ch_opt_rows_check(const void *o, const ch_opt_row *rows, int n, chute_error *err);
int ch_dataset_options_check(const chute_dataset_options *o, chute_error *err);

/* The inference session's options (infer_options.def), every row
 * materialised as a ch_opt_row with its offset in chute_infer_options: the
 * session's own rows, and for each field shared with the loader a copy of
 * the loader table's row (kind, default, bounds, help; the session's
 * layers).  Built once, then const; any thread. */
int ch_infer_opt_count(void);
const ch_opt_row *ch_infer_opts(void);
/* Bytes of the field a row describes (a float[3] is 12). */
size_t ch_opt_row_size(const ch_opt_row *d);
/* Copy in (NULL = all defaults) to out with every zero field given its
 * default (the computed ones too: queue_capacity, and through
 * ch_loader_options_resolve the shared fields: workers, layout, mean, ...),
 * then check every bound; CHUTE_EINVAL naming the option otherwise.  lo
 * (may be NULL) gets the loader options the session decodes with
 * (batch_size = max_batch).  chute_infer_create's first step. */
int ch_infer_options_resolve(const chute_infer_options *in, chute_infer_options *out,
                             chute_loader_options *lo, chute_error *err);

/* The table, in .def order (CH_LOPT_COUNT entries). */
const ch_loader_opt *ch_loader_opts(void);
/* The field an option describes, widened to 64 bits; and stored back
 * (narrowed to the field's type: callers check bounds first). */
uint64_t ch_loader_opt_get(const chute_loader_options *o, const ch_loader_opt *d);
void ch_loader_opt_set(chute_loader_options *o, const ch_loader_opt *d, uint64_t v);
/* A CH_OPT_ZERO_OFF row's C spelling of off: all ones of its width. */
uint64_t ch_opt_off_value(const ch_loader_opt *d);
/* "kind" as a word: "u32", "u64", "bool". */
const char *ch_opt_kind_name(ch_opt_kind k);

/* Copy in (NULL = all defaults) to out, fill every zero field with its
 * default (computed ones included: workers, the eval resize side, layout,
 * mean/std), then check every bound; CHUTE_EINVAL with a message that
 * names the option otherwise.  chute_loader_create's first step. */
int ch_loader_options_resolve(const chute_loader_options *in, chute_loader_options *out,
                              chute_error *err);

#endif
