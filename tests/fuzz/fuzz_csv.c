/*
 * fuzz_csv.c — fuzz target: the CSV scanner, splitter and cell converters
 * (src/format/csv.c) that the "csv" format runs on every row.  The input
 * is scanned in two chunks (the split point from its first byte), as open
 * indexes a file chunk by chunk, and must find the same record ends as one
 * scan of the whole; each record is split, every cell must lie inside the
 * record, and each cell goes through both converters.
 */
#define _GNU_SOURCE
#include "format/csv.h"

#include <locale.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ch_csv_cell cells[CH_CSV_MAX_COLS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static locale_t loc;
    if (!loc)
        loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    size_t cut = size ? data[0] % (size + 1) : 0;
    size_t start = 0, pos = 0, pos2 = 0;
    int inq = 0, inq2 = 0;
    uint64_t lines = 0, lines2 = 0;
    for (;;) {
        /* one scan over everything left ... */
        int found = ch_csv_scan(data, size, &pos, &inq, &lines);
        /* ... and the same in two chunks */
        int f2 = 0;
        if (pos2 < cut)
            f2 = ch_csv_scan(data, cut, &pos2, &inq2, &lines2);
        if (!f2)
            f2 = ch_csv_scan(data, size, &pos2, &inq2, &lines2);
        if (f2 != found || pos2 != pos || inq2 != inq || lines2 != lines)
            __builtin_trap();
        size_t end = found ? pos : size;
        size_t n = 0;
        const char *why = NULL;
        if (ch_csv_split(buf + start, end - start, cells, CH_CSV_MAX_COLS, &n, &why) == 0) {
            for (size_t k = 0; k < n; k++) {
                if (cells[k].p < buf + start || cells[k].p + cells[k].n > buf + end)
                    __builtin_trap();
                int64_t iv;
                float fv;
                (void)ch_csv_int64(cells[k].p, cells[k].n, &iv);
                (void)ch_csv_float32(cells[k].p, cells[k].n, loc, &fv);
            }
        } else if (!why) {
            __builtin_trap();
        }
        if (!found)
            break;
        start = pos = pos2 = pos + 1;
    }
    free(buf);
    return 0;
}
