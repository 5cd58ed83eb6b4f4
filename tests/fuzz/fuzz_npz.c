/*
 * fuzz_npz.c — fuzz target: the .npz member reader (src/format/npz.c) the
 * "npy" format runs on every .npz sample.  Members it accepts must lie
 * inside the input, and each member's bytes then go through the .npy
 * parser as the format does.
 */
#include "format/fields.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ch_npz_member m[CH_FIELD_MAX];
    size_t n = 0;
    chute_error err;
    if (ch_npz_members(data, size, "fuzz", m, CH_FIELD_MAX, &n, &err) != CHUTE_OK)
        return 0;
    if (n > CH_FIELD_MAX)
        __builtin_trap();
    for (size_t k = 0; k < n; k++) {
        if (m[k].offset > size || m[k].size > size - m[k].offset ||
            (const uint8_t *)m[k].name < data || (const uint8_t *)m[k].name + m[k].name_len > data + size)
            __builtin_trap();
        ch_npy_info a;
        (void)ch_npy_parse(data + m[k].offset, (size_t)m[k].size, "fuzz", m[k].offset, &a, &err);
    }
    return 0;
}
