/*
 * fuzz_npy.c — fuzz target: the .npy header parser (src/format/fields.c)
 * that tensor fields go through for every sample.  A header it accepts
 * must describe exactly the bytes that follow it: the data offset inside
 * the input, prod(shape) * itemsize == the bytes left, at most
 * CH_FIELD_MAX_DIMS dimensions; and the check against a field must accept
 * the info it was learned from.  The head-only entry (ch_npy_parse_head,
 * the "npy" format's large arrays) must agree with it when given the
 * whole input, and must never read past the head it is given when told the
 * file is larger.
 */
#include "format/fields.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ch_npy_info a, h;
    chute_error err;
    size_t head = size < 64 ? size : size / 2; /* a head only; the file "goes on" */
    if (ch_npy_parse_head(data, head, (uint64_t)size * 3, "fuzz", 0, &h, &err) == CHUTE_OK &&
        (h.data_offset > head || h.data_offset + h.data_bytes != (uint64_t)size * 3))
        __builtin_trap();
    int whole = ch_npy_parse(data, size, "fuzz", 0, &a, &err);
    if ((ch_npy_parse_head(data, size, size, "fuzz", 0, &h, &err) == CHUTE_OK) !=
        (whole == CHUTE_OK))
        __builtin_trap();
    if (whole != CHUTE_OK)
        return 0;
    if (a.data_offset > size || a.data_bytes != size - a.data_offset ||
        a.ndim > CH_FIELD_MAX_DIMS)
        __builtin_trap();
    ch_field f;
    memset(&f, 0, sizeof f);
    ch_field_from_npy(&f, &a, "fuzz");
    if (ch_npy_check(&a, &f, "fuzz", &err) != CHUTE_OK)
        __builtin_trap();
    uint64_t per = ch_field_sample_bytes(&f);
    if (per != a.data_bytes && per != 0)
        __builtin_trap();
    return 0;
}
