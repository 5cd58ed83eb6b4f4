/*
 * remote_options.c — the rows of remote_options.def and the one reader of
 * their environment variables.  Why here and not in src/io/remote/: the
 * docs generator and the tests read the table without libcurl, and the
 * rule "unset, garbage or over max means the default" is written once.
 */
#include "common/remote_options.h"

#include <stdlib.h>

static const ch_remote_opt g_rows[CH_RENV_COUNT] = {
#define CH_REMOTE_OPT(name, def, floor, max, help) {"CHUTE_REMOTE_" #name, def, floor, max, help},
#include "common/remote_options.def"
#undef CH_REMOTE_OPT
};

const ch_remote_opt *ch_remote_opts(void) { return g_rows; }

uint64_t ch_remote_opt_value(ch_remote_opt_id k)
{
    const ch_remote_opt *d = &g_rows[k];
    const char *s = getenv(d->env);
    if (!s || !*s)
        return d->def;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > d->max)
        return d->def;
    return v < d->floor ? d->floor : v;
}
