/*
 * csv.h — RFC 4180 CSV, the pieces the "csv" format is made of, each a
 * pure function on bytes in memory so it can be fuzzed without files
 * (tests/fuzz/fuzz_csv.c).
 *
 *   - ch_csv_scan finds where a record ends: the first '\n' outside
 *     quotes.  It is resumable (the position and the quote state are the
 *     caller's), so the format can index a file of any size in fixed-size
 *     chunks, once, at open: that is what lets rows be shuffled globally.
 *   - ch_csv_split cuts one record (without its '\n'; a final '\r' is
 *     dropped: CRLF) into cells, removing quotes and undoubling "" in
 *     place.  A quote opens a quoted cell only at the cell's start (inside
 *     an unquoted cell it is a plain character, as Python's csv module
 *     reads it); after a closing quote only a comma or the end may follow.
 *   - ch_csv_int64 / ch_csv_float32 convert a cell: surrounding blanks
 *     allowed, anything else that is not the number is an error.  Floats
 *     are parsed as a double in the "C" locale and rounded to float32,
 *     what pandas' read_csv followed by astype(float32) gives.
 * Nothing here allocates or keeps state.
 */
#ifndef CHUTE_FORMAT_CSV_H
#define CHUTE_FORMAT_CSV_H

#include <locale.h>
#include <stddef.h>
#include <stdint.h>

#define CH_CSV_MAX_COLS 1024

typedef struct ch_csv_cell {
    char *p;                  /* into the record; not NUL-terminated */
    size_t n;
    int quoted;
} ch_csv_cell;

/* Scan p[*pos, len) with *inq the quote state (0 at a record's start).
 * Returns 1 with *pos at the '\n' that ends the record, or 0 with *pos =
 * len when the record goes on past the input; *lines counts every '\n'
 * passed (also inside quotes), for line numbers. */
int ch_csv_scan(const uint8_t *p, size_t len, size_t *pos, int *inq, uint64_t *lines);

/* Split record r[len] into at most max cells (*n of them).  0, or -1 with
 * *why a static reason ("unterminated quote", "text after a closing
 * quote", "more than N cells"). */
int ch_csv_split(char *r, size_t len, ch_csv_cell *cells, size_t max, size_t *n,
                 const char **why);

/* 0, or -1: empty, not a number, or out of range. */
int ch_csv_int64(const char *s, size_t n, int64_t *out);
int ch_csv_float32(const char *s, size_t n, locale_t c_locale, float *out);

#endif
