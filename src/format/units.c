/*
 * units.c — how a dataset's samples group into the files that are read
 * front to back, for the shards shuffle mode (src/pipeline/sampler.h).
 *
 * A format says which unit holds sample i (ch_format_ops.unit_of); this
 * turns that into the boundaries of runs of consecutive ids, once, when a
 * loader is created.  Formats without the op (the image tree: every
 * sample is its own file, so there is no sequential unit to respect) get
 * fixed runs of CH_UNIT_FALLBACK_SAMPLES, so the mode still means "read
 * in long runs of dataset order and mix through the buffer" everywhere.
 */
#include "format.h"

#include <stdlib.h>

int ch_ds_units(const chute_dataset *ds, uint64_t **out_first, uint64_t *out_n,
                chute_error *err)
{
    *out_first = NULL;
    *out_n = 0;
    const uint64_t n = ds->n;
    if (n == 0)
        return ch_err(err, CHUTE_EINVAL, "%s: no samples to group into units", ds->root);
    uint64_t (*unit_of)(const chute_dataset *, uint64_t) = ds->fmt->unit_of;
    uint64_t count = 1;
    if (!unit_of) {
        count = n / CH_UNIT_FALLBACK_SAMPLES + (n % CH_UNIT_FALLBACK_SAMPLES != 0);
    } else {
        uint64_t prev = unit_of(ds, 0);
        for (uint64_t i = 1; i < n; i++) {
            uint64_t u = unit_of(ds, i);
            count += u != prev;
            prev = u;
        }
    }
    if (count >= SIZE_MAX / sizeof(uint64_t))
        return ch_err(err, CHUTE_ENOMEM, "%s: too many units (%llu)", ds->root,
                      (unsigned long long)count);
    uint64_t *first = malloc((count + 1) * sizeof *first);
    if (!first)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu unit boundaries",
                      (unsigned long long)count);
    if (!unit_of) {
        for (uint64_t u = 0; u < count; u++)
            first[u] = u * CH_UNIT_FALLBACK_SAMPLES;
    } else {
        uint64_t k = 0, prev = unit_of(ds, 0);
        first[k++] = 0;
        for (uint64_t i = 1; i < n; i++) {
            uint64_t u = unit_of(ds, i);
            if (u != prev)
                first[k++] = i;
            prev = u;
        }
    }
    first[count] = n;
    *out_first = first;
    *out_n = count;
    return CHUTE_OK;
}
