/*
 * npz.c — the members of a `.npz` file (what numpy.savez writes: a zip
 * archive of `.npy` members), found in memory.
 *
 * Why it is shaped so: a one-sample `.npz` is small, and the "npy" format
 * reads it whole into the worker's scratch buffer anyway, so the reader
 * works on bytes in memory (no I/O, nothing allocated, fuzzable:
 * tests/fuzz/fuzz_npz.c).  It trusts only the central directory, as zip
 * readers do (numpy's own np.load goes through Python's zipfile, which
 * does the same): the end record is found scanning back over at most a
 * 64 KiB comment, each central entry gives the member's name, method,
 * sizes and local header offset (zip64 extra fields honoured, as
 * numpy.savez writes its local headers with force_zip64), and the local
 * header is checked (signature, name length, extra length) to find where
 * the data begins.  Every offset and size is checked against the buffer
 * before it is used.  Only stored members (method 0) are read:
 * numpy.savez_compressed's deflated members are CHUTE_EUNSUPPORTED with a
 * message saying so, never decompressed here.
 */
#include "fields.h"

#include <stdio.h>
#include <string.h>

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

#define BAD(code, ...)                                                                         \
    do {                                                                                       \
        char why_[160];                                                                        \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                              \
        return ch_err(err, code, "%s: npz: %s", name, why_);                                  \
    } while (0)

int ch_npz_members(const uint8_t *p, size_t len, const char *name, ch_npz_member *out,
                   size_t max, size_t *out_n, chute_error *err)
{
    *out_n = 0;
    if (len < 22)
        BAD(CHUTE_ECORRUPT, "%zu bytes is too short for a zip archive", len);
    size_t eocd = SIZE_MAX;
    for (size_t k = len - 22 + 1, lim = len - 22 > 65535 ? len - 22 - 65535 : 0; k-- > lim;)
        if (rd32(p + k) == 0x06054b50 && k + 22 + rd16(p + k + 20) == len) {
            eocd = k;
            break;
        }
    if (eocd == SIZE_MAX)
        BAD(CHUTE_ECORRUPT, "no zip end-of-central-directory record");
    uint32_t nent = rd16(p + eocd + 10);
    uint64_t cd_size = rd32(p + eocd + 12), cd_off = rd32(p + eocd + 16);
    if (nent == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu)
        BAD(CHUTE_EUNSUPPORTED, "a zip64 archive directory (more than 65535 members or 4 GiB) "
            "is not read");
    if (rd16(p + eocd + 4) != 0 || rd16(p + eocd + 6) != 0 || rd16(p + eocd + 8) != nent)
        BAD(CHUTE_ECORRUPT, "multi-disk zip archives are not read");
    if (cd_off > eocd || cd_size > eocd - cd_off)
        BAD(CHUTE_ECORRUPT, "central directory at %llu+%llu lies outside the archive",
            (unsigned long long)cd_off, (unsigned long long)cd_size);
    if (nent > max)
        BAD(CHUTE_ELIMIT, "%u members (at most %zu)", nent, max);
    size_t q = (size_t)cd_off, end = (size_t)(cd_off + cd_size);
    for (uint32_t k = 0; k < nent; k++) {
        if (end - q < 46 || rd32(p + q) != 0x02014b50)
            BAD(CHUTE_ECORRUPT, "central directory entry %u at %zu is damaged", k, q);
        uint32_t method = rd16(p + q + 10), flags = rd16(p + q + 8);
        uint64_t csize = rd32(p + q + 20), usize = rd32(p + q + 24);
        size_t nlen = rd16(p + q + 28), xlen = rd16(p + q + 30), clen = rd16(p + q + 32);
        uint64_t loff = rd32(p + q + 42);
        if (46 + nlen + xlen + clen > end - q)
            BAD(CHUTE_ECORRUPT, "central directory entry %u runs past the directory", k);
        const uint8_t *nm = p + q + 46;
        /* zip64 extra: the fields whose 32-bit value is all ones, in order */
        for (size_t x = 0; x + 4 <= xlen;) {
            const uint8_t *e = nm + nlen + x;
            size_t id = rd16(e), sz = rd16(e + 2), o = 4;
            if (sz > xlen - x - 4)
                BAD(CHUTE_ECORRUPT, "member %u: extra field runs past its entry", k);
            if (id == 1) {
                uint64_t *f[3] = {&usize, &csize, &loff};
                for (int j = 0; j < 3; j++)
                    if (*f[j] == 0xffffffffu) {
                        if (o + 8 > 4 + sz)
                            BAD(CHUTE_ECORRUPT, "member %u: short zip64 extra field", k);
                        *f[j] = rd64(e + o);
                        o += 8;
                    }
            }
            x += 4 + sz;
        }
        if (flags & 1)
            BAD(CHUTE_EUNSUPPORTED, "member %u is encrypted", k);
        if (method != 0)
            BAD(CHUTE_EUNSUPPORTED, "member '%.*s' is compressed (method %u: numpy.savez_"
                "compressed?); only numpy.savez's stored members are read", (int)(nlen < 64 ? nlen : 64),
                (const char *)nm, method);
        if (csize != usize)
            BAD(CHUTE_ECORRUPT, "stored member %u: sizes %llu and %llu differ", k,
                (unsigned long long)csize, (unsigned long long)usize);
        if (loff > cd_off || cd_off - loff < 30)
            BAD(CHUTE_ECORRUPT, "member %u: local header at %llu is outside the data", k,
                (unsigned long long)loff);
        const uint8_t *lh = p + loff;
        size_t lnlen = rd16(lh + 26), lxlen = rd16(lh + 28);
        if (rd32(lh) != 0x04034b50 || lnlen != nlen || 30 + lnlen + lxlen > cd_off - loff ||
            memcmp(lh + 30, nm, nlen) != 0)
            BAD(CHUTE_ECORRUPT, "member %u: local header at %llu does not match the directory", k,
                (unsigned long long)loff);
        uint64_t doff = loff + 30 + lnlen + lxlen;
        if (csize > cd_off - doff)
            BAD(CHUTE_ECORRUPT, "member %u: %llu bytes at %llu run into the directory", k,
                (unsigned long long)csize, (unsigned long long)doff);
        out[k].name = (const char *)nm;
        out[k].name_len = nlen;
        out[k].offset = doff;
        out[k].size = csize;
        q += 46 + nlen + xlen + clen;
    }
    *out_n = nent;
    return CHUTE_OK;
}
