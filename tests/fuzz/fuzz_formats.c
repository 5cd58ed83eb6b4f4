/*
 * fuzz_formats.c — fuzz target: the tfrecord and wds formats end to end
 * (probe, open, every read) on one file whose bytes come from the fuzzer.
 *
 * The parsers underneath have their own targets (fuzz_tfrecord, fuzz_tar,
 * fuzz_example); this one covers what the formats add on top: turning an
 * index into samples, the .cls label text, label offsets, samples found
 * bad at open, and the read path's re-checks.  The input lives in a memfd
 * opened by its /proc/self/fd path, so nothing is written to disk and the
 * formats read it through the same source ops as any file.
 *
 * Invariants: open either fails cleanly or gives labels in [0, nclasses);
 * every read either succeeds with at most sample_size bytes (TFRecord:
 * the record's image; WebDataset: the member) or fails with a content
 * error (never I/O: the memfd cannot fail) whose message names the file.
 */
#define _GNU_SOURCE
#include "chute.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run(const char *path, const char *format)
{
    chute_dataset_options o;
    memset(&o, 0, sizeof o);
    o.format = format;
    o.image_key = "image"; /* the committed fixtures' keys */
    o.label_key = "label";
    o.label_offset = 64;
    o.index_dir = ""; /* never save a TFRecord index for a fuzz input */
    chute_dataset *ds = NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    if (chute_dataset_open_ex(path, &o, &ds, &err) != CHUTE_OK)
        return;
    uint64_t n = chute_dataset_size(ds);
    uint32_t k = chute_dataset_num_classes(ds);
    static uint8_t buf[1 << 20];
    for (uint64_t i = 0; i < n; i++) {
        int64_t lab = chute_dataset_label(ds, i);
        if (lab < 0 || lab >= (int64_t)k)
            __builtin_trap();
        size_t len = 0;
        int rc = chute_dataset_read(ds, i, buf, sizeof buf, &len, &err);
        if (rc == CHUTE_OK && len > chute_dataset_sample_size(ds, i))
            __builtin_trap();
        if (rc == CHUTE_EIO || (rc != CHUTE_OK && !strstr(err.message, path)))
            __builtin_trap();
    }
    chute_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_formats", 0);
    if (fd < 0)
        return 0;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (done == size) {
        run(path, "tfrecord");
        run(path, "wds");
        run(path, NULL);
    }
    close(fd);
    return 0;
}
