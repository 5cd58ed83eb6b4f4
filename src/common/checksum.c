/*
 * checksum.c — CRC-32 (shards, PNG) and CRC-32C (TFRecord, event files,
 * the node cache): checksum.h.
 *
 * CRC-32 is libdeflate's when chute is built with it (PCLMULQDQ/AVX
 * folding picked at run time: ~8 GB/s here against zlib 1.2's ~2 GB/s
 * table loop, which was a quarter of a raw shard sample's CPU), else
 * zlib's; both give zlib's value bit for bit (unit_shard.crc32_equals_zlib).
 * Until 2026-11 a hand-written PCLMULQDQ fold (crc32_clmul.c) did what
 * libdeflate does; measured side by side it was no faster.
 *
 * CRC-32C (Castagnoli), the checksum TFRecord frames carry:
 *
 * Two implementations with one contract: the SSE4.2 crc32 instruction,
 * eight bytes per step, and a portable slicing-by-8 table loop.  The
 * hardware path is picked per call with __builtin_cpu_supports (one load
 * of a flag libgcc fills at start-up), so there is no function pointer or
 * other state of ours to initialise, and a build for any x86-64 still runs
 * on a CPU without SSE4.2.  Debian ships no C library for CRC32C (only
 * Python and Go packages), so it lives here; tests check the two paths
 * against each other and against the published check value.
 *
 * The hardware loop is one dependent chain (3-cycle latency per 8 bytes,
 * ~8 GB/s); interleaving three streams would triple that, but indexing
 * only checksums 8-byte headers and a record's data CRC is checked once
 * per read, next to a JPEG decode that costs far more.  See DESIGN.md.
 */
#include "checksum.h"
#include "common.h"

#include "crc32c_table.h"

#include <string.h>
#include <zlib.h>
#ifdef CHUTE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

uint32_t ch_crc32_update(uint32_t crc, const void *data, size_t len)
{
#ifdef CHUTE_HAVE_LIBDEFLATE
    return libdeflate_crc32(crc, data, len);
#else
    const uint8_t *p = data;
    uLong c = crc;
    while (len > 0) { /* zlib takes a uInt length */
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)c;
#endif
}

uint32_t ch_crc32(const void *data, size_t len)
{
    return ch_crc32_update(0, data, len);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CH_CRC32C_X86 1
#endif

uint32_t ch_crc32c_sw(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ ch_crc32c_table[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = ch_crc32c_table[7][lo & 0xff] ^ ch_crc32c_table[6][(lo >> 8) & 0xff] ^
            ch_crc32c_table[5][(lo >> 16) & 0xff] ^ ch_crc32c_table[4][lo >> 24] ^
            ch_crc32c_table[3][hi & 0xff] ^ ch_crc32c_table[2][(hi >> 8) & 0xff] ^
            ch_crc32c_table[1][(hi >> 16) & 0xff] ^ ch_crc32c_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ ch_crc32c_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#ifdef CH_CRC32C_X86
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *data,
                                                                size_t n)
{
    const uint8_t *p = data;
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 32) {
        uint64_t a, b, d, e;
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, 8);
        memcpy(&d, p + 16, 8);
        memcpy(&e, p + 24, 8);
        c = _mm_crc32_u64(c, a);
        c = _mm_crc32_u64(c, b);
        c = _mm_crc32_u64(c, d);
        c = _mm_crc32_u64(c, e);
        p += 32;
        n -= 32;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c = _mm_crc32_u64(c, a);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

int ch_crc32c_hw(uint32_t crc, const void *p, size_t n, uint32_t *out)
{
#ifdef CH_CRC32C_X86
    if (__builtin_cpu_supports("sse4.2")) {
        *out = crc32c_sse42(crc, p, n);
        return CHUTE_OK;
    }
#endif
    (void)crc;
    (void)p;
    (void)n;
    (void)out;
    return CHUTE_EUNSUPPORTED;
}

uint32_t ch_crc32c(uint32_t crc, const void *p, size_t n)
{
#ifdef CH_CRC32C_X86
    if (__builtin_cpu_supports("sse4.2"))
        return crc32c_sse42(crc, p, n);
#endif
    return ch_crc32c_sw(crc, p, n);
}
