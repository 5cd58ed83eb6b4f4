/*
 * sources.c — the one list of sources, and the choice of one for a path.
 *
 * A path names its source by its URI scheme ("s3://bucket/x"); anything
 * without a registered scheme is a local path.  Adding a source is one
 * file with a ch_source_ops and one line below.
 */
#include "io.h"

#include <string.h>

#ifndef CHUTE_HAVE_CURL
/* Built without libcurl: s3:// and http(s):// paths are claimed anyway, so
 * that they fail with "not built in" rather than "no such local file". */
static int absent(const char *path, chute_error *err)
{
    return ch_err(err, CHUTE_EUNSUPPORTED,
                  "%s: this libchute was built without libcurl, so it has no S3/HTTP source "
                  "(install libcurl's development files and rebuild)",
                  path);
}
static int absent_open(const char *path, void **out, uint64_t *out_size, chute_error *err)
{
    return absent(path, err);
}
static int absent_read_at(void *h, const char *path, uint64_t off, void *buf, size_t len,
                          chute_error *err)
{
    return absent(path, err);
}
static void absent_close(void *h) {}
static int absent_read_file(const char *path, void *buf, size_t cap, size_t *out_len,
                            chute_error *err)
{
    return absent(path, err);
}
static int absent_stat(const char *path, ch_stat *out, chute_error *err)
{
    return absent(path, err);
}
static int absent_list(const char *dir, ch_list_fn fn, void *user, chute_error *err)
{
    return absent(dir, err);
}
static const char *const absent_schemes[] = {"s3://", "http://", "https://", NULL};
static const ch_source_ops ch_source_absent_remote = {
    .version = CH_SOURCE_OPS_VERSION,
    .name = "remote (not built)",
    .open = absent_open,
    .read_at = absent_read_at,
    .close = absent_close,
    .read_file = absent_read_file,
    .schemes = absent_schemes,
    .stat = absent_stat,
    .list = absent_list,
};
#endif

const ch_source_ops *const ch_sources[] = {
    &ch_source_local,
#ifdef CHUTE_HAVE_CURL
    &ch_source_s3,
    &ch_source_http,
#else
    &ch_source_absent_remote,
#endif
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
