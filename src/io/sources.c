/*
 * sources.c — the one list of sources, and the choice of one for a path.
 *
 * A path names its source by its URI scheme ("s3://bucket/x"); anything
 * without a registered scheme is a local path.  Adding a source is one
 * file with a ch_source_ops and one line below.
 */
#include "io.h"

#include <string.h>

const ch_source_ops *const ch_sources[] = {
    &ch_source_local,
    NULL,
};

const ch_source_ops *ch_source_for(const char *path)
{
    if (path)
        for (size_t i = 0; ch_sources[i]; i++)
            for (const char *const *s = ch_sources[i]->schemes; s && *s; s++)
                if (!strncmp(path, *s, strlen(*s)))
                    return ch_sources[i];
    return &ch_source_local;
}
