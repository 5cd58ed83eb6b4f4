/*
 * png0.h — a fast path for PNGs written with compression level 0, whose
 * zlib stream is nothing but stored blocks (Pillow's compress_level=0,
 * zlib level 0, libspng/libpng with level 0).  The advice for a
 * starving GPU is "store images uncompressed"; through libspng such a PNG
 * cost twice the CPU of a JPEG (bench/results-breadth.md: 0.51x the JPEG
 * rate), because libspng pushes every row through zlib's inflate (a copy
 * per row plus its bookkeeping), checks the adler32 and every chunk's
 * CRC-32 with zlib's table code, and converts each row in a second pass.
 * Here the stored payload is unfiltered straight from the file bytes into
 * the RGB8 output, and the CRC-32s and the adler32 are still all checked,
 * with libdeflate's SIMD code when chute has it (zlib's otherwise).
 *
 * What it must never do: give pixels libspng would not give.  So it takes
 * only the plainest files — 8-bit grey, grey+alpha, RGB or RGBA, not
 * interlaced, chunks exactly IHDR, IDAT..., IEND with every CRC right, a
 * zlib stream of stored blocks only whose adler32 is right and which holds
 * exactly the image — and declines everything else (palette, 16-bit,
 * ancillary chunks, any damage) without a message, so libspng decodes (or
 * refuses) it as before.  A damaged file therefore costs a fast-path
 * attempt plus libspng, and gets libspng's error.  Pure: no allocation,
 * no I/O; tests/fuzz/fuzz_png0.c checks it against libspng.
 */
#ifndef CHUTE_CODEC_PNG0_H
#define CHUTE_CODEC_PNG0_H

#include <stddef.h>
#include <stdint.h>

/* Scratch bytes ch_png0_decode needs for an image w pixels wide. */
size_t ch_png0_scratch(uint32_t w);

/* Flags: skip the adler32 check (only the fuzz target uses it, to reach
 * the unfilter code with mutated payloads; libspng is then told the same). */
enum { CH_PNG0_NO_ADLER = 1 };

/*
 * Decode the PNG in p[0, len) to RGB8 at out (w * h * 3 bytes, rows
 * packed), where w and h are the IHDR's (the caller has read and bounded
 * them); scratch is ch_png0_scratch(w) bytes.  Only rows [0, rows_needed)
 * are written (0 or >= h: all): a crop needs nothing below its window,
 * but rows above it must be unfiltered (Up, Avg and Paeth predict from
 * the row above).  The rows below are still checked as libspng would —
 * filter types, lengths, every CRC and the adler32 — just not unfiltered.
 * Returns 1 when it decoded the image, 0 when it declined (out and
 * scratch then hold garbage).
 */
int ch_png0_decode(const uint8_t *p, size_t len, uint32_t w, uint32_t h, uint32_t rows_needed,
                   uint8_t *out, uint8_t *scratch, unsigned flags);

#endif
