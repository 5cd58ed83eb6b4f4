/*
 * remote_options.h — the S3/HTTP sources' settings as table rows
 * (remote_options.def says why): their names, defaults and bounds for the
 * code that reads them (src/io/remote/) and for the docs generator.
 */
#ifndef CHUTE_COMMON_REMOTE_OPTIONS_H
#define CHUTE_COMMON_REMOTE_OPTIONS_H

#include <stdint.h>

typedef enum ch_remote_opt_id {
#define CH_REMOTE_OPT(name, def, floor, max, help) CH_RENV_##name,
#include "common/remote_options.def"
#undef CH_REMOTE_OPT
    CH_RENV_COUNT
} ch_remote_opt_id;

typedef struct ch_remote_opt {
    const char *env;   /* "CHUTE_REMOTE_RETRIES" */
    uint64_t def, floor, max;
    const char *help;
} ch_remote_opt;

/* The table, in .def order (CH_RENV_COUNT rows). */
const ch_remote_opt *ch_remote_opts(void);
/* The setting's value now: its environment variable if set to a decimal
 * number of at most max (raised to floor), else the default.  Any thread
 * (getenv; nothing cached). */
uint64_t ch_remote_opt_value(ch_remote_opt_id k);

#endif
