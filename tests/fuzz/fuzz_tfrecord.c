/*
 * fuzz_tfrecord.c — fuzz target: TFRecord framing.  Every input is
 * indexed as a plain TFRecord stream twice, from memory and through a
 * file with a tiny read window, and the two indexes must agree (the
 * window's refill logic is the part most likely to be subtly wrong); it
 * is parsed as a DALI index file; and if it starts like a gzip or zlib
 * stream it goes through the streaming inflate path.
 */
#define _GNU_SOURCE
#include "format/parse.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd_of(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz", 0);
    if (fd < 0)
        return -1;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return -1;
    }
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chute_error err;
    fmt_reader r;
    fmt_tfr_index a, b;
    fmt_tfr_opts o = {.verify_data = size & 1, .max_record = 1u << 20};
    fmt_reader_mem(&r, data, size, "mem");
    int rca = fmt_tfr_index_build(&r, &o, &a, &err);
    for (uint64_t i = 0; i < a.count; i++) {
        const fmt_tfr_record *e = &a.recs[i];
        if (e->offset > size || e->length > size || e->offset + 16 + e->length > size)
            __builtin_trap();
        int rc = fmt_tfr_check_data(data + e->offset + 12, e->length, "mem", e->offset, &err);
        if (o.verify_data && rc != CHUTE_OK)
            __builtin_trap(); /* verified while indexing, must verify again */
        if (fmt_tfr_check_header(data + e->offset, e->length, "mem", e->offset, &err))
            __builtin_trap();
    }
    int fd = memfd_of(data, size);
    if (fd >= 0) {
        if (fmt_reader_fd(&r, fd, size, 16 + (size % 50), "fd", &err) == CHUTE_OK) {
            int rcb = fmt_tfr_index_build(&r, &o, &b, &err);
            fmt_reader_free(&r);
            if (rcb != rca || a.count != b.count || a.end != b.end ||
                (a.count && memcmp(a.recs, b.recs, (size_t)a.count * sizeof *a.recs)))
                __builtin_trap();
            fmt_tfr_index_free(&b);
        }
        if (size >= 2 && ((data[0] == 0x1f && data[1] == 0x8b) ||
                          ((data[0] & 0x0f) == 8 && ((data[0] << 8) | data[1]) % 31 == 0))) {
            fmt_tfr_opts c = {.max_inflated = 1u << 24};
            int rc = fmt_tfr_index_compressed(fd, "gz", data[0] == 0x1f ? FMT_TFR_GZIP
                                                                         : FMT_TFR_ZLIB,
                                              &c, -1, &b, &err);
            (void)rc;
            fmt_tfr_index_free(&b);
        }
        close(fd);
    }
    fmt_tfr_index_free(&a);
    /* The same bytes as a DALI index of a file of `size` bytes. */
    if (fmt_tfr_index_parse_dali((const char *)data, size, "idx", size, &a, &err) == CHUTE_OK) {
        uint64_t prev = 0;
        for (uint64_t i = 0; i < a.count; i++) {
            if (a.recs[i].offset < prev || a.recs[i].offset + a.recs[i].length + 16 > size)
                __builtin_trap();
            prev = a.recs[i].offset + a.recs[i].length + 16;
        }
        char *t;
        size_t n;
        if (fmt_tfr_index_format_dali(&a, &t, &n, &err) == CHUTE_OK) {
            fmt_tfr_index_free(&b);
            if (fmt_tfr_index_parse_dali(t, n, "idx2", size, &b, &err) != CHUTE_OK ||
                b.count != a.count)
                __builtin_trap();
            fmt_tfr_index_free(&b);
            free(t);
        }
    }
    fmt_tfr_index_free(&a);
    return 0;
}
