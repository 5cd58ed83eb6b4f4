/*
 * fuzz_tar.c — fuzz target: the tar walker and WebDataset grouping.  Each
 * input is indexed from memory and through a file with a small read
 * window (the two must agree), then grouped under both policies; every
 * member must lie inside the input and every sample's fields must be
 * members with the sample's key.
 */
#define _GNU_SOURCE
#include "format/parse.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chute_error err;
    fmt_reader r;
    fmt_tar_index a, b;
    fmt_tar_opts o = {.max_name = 4096, .max_pax = 8192};
    fmt_reader_mem(&r, data, size, "mem");
    int rca = fmt_tar_index_build(&r, &o, &a, &err);
    for (uint64_t i = 0; i < a.count; i++) {
        const fmt_tar_member *m = &a.m[i];
        if (m->data_offset > size || m->size > size - m->data_offset ||
            m->header_offset + 512 > m->data_offset ||
            strlen(fmt_tar_name(&a, i)) != m->name_len)
            __builtin_trap();
    }
    int fd = memfd_create("fuzz", 0);
    if (fd >= 0 && (size == 0 || write(fd, data, size) == (ssize_t)size) &&
        fmt_reader_fd(&r, fd, size, 8192 + 512 * (size % 7), "fd", &err) == CHUTE_OK) {
        int rcb = fmt_tar_index_build(&r, &o, &b, &err);
        fmt_reader_free(&r);
        if (rcb != rca || a.count != b.count || a.names_len != b.names_len ||
            (a.names_len && memcmp(a.names, b.names, a.names_len)))
            __builtin_trap();
        for (uint64_t i = 0; i < a.count; i++) /* field by field: structs have padding */
            if (a.m[i].header_offset != b.m[i].header_offset ||
                a.m[i].data_offset != b.m[i].data_offset || a.m[i].size != b.m[i].size ||
                a.m[i].name_off != b.m[i].name_off || a.m[i].name_len != b.m[i].name_len)
                __builtin_trap();
        fmt_tar_index_free(&b);
    }
    if (fd >= 0)
        close(fd);
    for (int pol = 0; pol < 2; pol++) {
        fmt_wds_index w;
        if (fmt_wds_group(&a, pol ? FMT_WDS_LENIENT : FMT_WDS_STRICT, "mem", &w, &err) ==
            CHUTE_OK) {
            for (uint64_t s = 0; s < w.count; s++) {
                const fmt_wds_sample *sm = &w.samples[s];
                if (sm->nfields == 0 || sm->first_field + sm->nfields > w.nfields)
                    __builtin_trap();
                for (uint64_t f = 0; f < sm->nfields; f++) {
                    const fmt_wds_field *fl = &w.fields[sm->first_field + f];
                    const char *mn = fmt_tar_name(&a, fl->member);
                    if (fl->member >= a.count || fl->ext_off != sm->key_len + 1 ||
                        memcmp(mn, a.names + sm->key_off, sm->key_len) != 0)
                        __builtin_trap();
                }
            }
        }
        fmt_wds_index_free(&w);
    }
    fmt_tar_index_free(&a);
    return 0;
}
