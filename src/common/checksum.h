/*
 * checksum.h — the two CRCs chute's files carry, in one place below every
 * layer that checks them.
 *
 * CRC-32 (zlib's polynomial) guards chute shards, PNG chunks and the
 * formats' indexes; CRC-32C (Castagnoli) frames TFRecord records and
 * TensorBoard event files, and keys the node cache's entries.  Both are
 * pure functions of their bytes: no state, safe from any thread.
 */
#ifndef CHUTE_CHECKSUM_H
#define CHUTE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32 of a whole buffer (zlib's crc32 convention), and the running
 * form: start with crc = 0, feed pieces in order.  libdeflate's
 * PCLMULQDQ/AVX code where chute was built with it, else zlib's. */
uint32_t ch_crc32(const void *data, size_t len);
uint32_t ch_crc32_update(uint32_t crc, const void *data, size_t len);

/* Running CRC-32C: start with crc = 0, feed pieces in order.  Uses the
 * SSE4.2 crc32 instruction when the CPU has it, else a table. */
uint32_t ch_crc32c(uint32_t crc, const void *p, size_t n);
/* The portable table implementation (always available). */
uint32_t ch_crc32c_sw(uint32_t crc, const void *p, size_t n);
/* The hardware implementation: CHUTE_EUNSUPPORTED if this CPU (or build)
 * lacks it, else CHUTE_OK with *out set. */
int ch_crc32c_hw(uint32_t crc, const void *p, size_t n, uint32_t *out);
/* TFRecord's masked CRC: rotate right 15, add a constant. */
static inline uint32_t ch_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
