/*
 * wav.c — the RIFF/WAVE walk and the float32 conversion (wav.h says what
 * is accepted and why).
 *
 * The walk reads only chunk headers and the fmt chunk's first 40 bytes;
 * every other chunk body is skipped by arithmetic, so a file with a large
 * LIST or JUNK chunk before its data costs one extra small read, not a
 * read of the chunk.  All offsets are uint64_t sums of 32-bit sizes, so
 * nothing here can overflow; each is compared with the file's size before
 * anything at it is read.
 */
#include "wav.h"

#include <string.h>

/* KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT after their first two bytes (the
 * format code): the GUID tail every WAVE_FORMAT_EXTENSIBLE subformat
 * derived from a WAVE format tag shares. */
static const uint8_t k_guid_tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                        0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

typedef struct walker {
    const uint8_t *head;
    size_t head_len;
    uint64_t size;
    ch_wav_read_fn rd;
    void *user;
    const char *name;
} walker;

/* len bytes at off (off + len <= size, checked by the caller) into buf. */
static int get(const walker *w, uint64_t off, void *buf, size_t len, chute_error *err)
{
    if (off + len <= w->head_len) {
        memcpy(buf, w->head + off, len);
        return CHUTE_OK;
    }
    if (!w->rd)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: header bytes past the %zu given",
                      w->name, (unsigned long long)off, w->head_len);
    return w->rd(w->user, off, buf, len, err);
}

static int ascii_id(const uint8_t *id)
{
    for (int k = 0; k < 4; k++)
        if (id[k] < 0x20 || id[k] > 0x7e)
            return 0;
    return 1;
}

/* The fmt chunk's body b[n] (n = min(its size, 40)) at file offset off. */
static int parse_fmt(const walker *w, const uint8_t *b, uint32_t size, uint64_t off,
                     ch_wav_info *out, chute_error *err)
{
    const char *nm = w->name;
    unsigned long long o = (unsigned long long)off;
    if (size < 16)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: fmt chunk of %u bytes (at least 16)",
                      nm, o - 4, size);
    uint32_t tag = le16(b), ch = le16(b + 2), rate = le32(b + 4), align = le16(b + 12),
             bits = le16(b + 14);
    out->tag = tag;
    out->format = tag;
    out->valid_bits = bits;
    if (tag == CH_WAV_EXTENSIBLE) {
        if (size < 40)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: wav: WAVE_FORMAT_EXTENSIBLE fmt chunk of %u bytes (40 needed)",
                          nm, o - 4, size);
        uint32_t cb = le16(b + 16), valid = le16(b + 18);
        if (cb < 22)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: wav: WAVE_FORMAT_EXTENSIBLE extension of %u bytes (22 needed)",
                          nm, o + 16, cb);
        if (memcmp(b + 26, k_guid_tail, sizeof k_guid_tail) != 0)
            return ch_err(err, CHUTE_EUNSUPPORTED,
                          "%s@%llu: wav: WAVE_FORMAT_EXTENSIBLE subformat GUID is not a WAVE "
                          "format tag's (not PCM or IEEE float)", nm, o + 24);
        if (valid > bits)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: wav: %u valid bits in a %u-bit container", nm, o + 18, valid,
                          bits);
        out->format = le16(b + 24);
        out->valid_bits = valid ? valid : bits;
    }
    if (out->format != CH_WAV_PCM && out->format != CH_WAV_FLOAT)
        return ch_err(err, CHUTE_EUNSUPPORTED,
                      "%s@%llu: wav: format 0x%04x (only PCM 0x0001 and IEEE float 0x0003, "
                      "plain or WAVE_FORMAT_EXTENSIBLE)", nm, o, out->format);
    if (ch == 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: 0 channels", nm, o + 2);
    if (ch > CH_WAV_MAX_CHANNELS)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s@%llu: wav: %u channels (at most %u)", nm,
                      o + 2, ch, CH_WAV_MAX_CHANNELS);
    if (rate == 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: sample rate 0", nm, o + 4);
    int ok = out->format == CH_WAV_PCM
                 ? (bits == 8 || bits == 16 || bits == 24 || bits == 32)
                 : (bits == 32 || bits == 64);
    if (!ok)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s@%llu: wav: %u-bit %s samples (PCM: 8, 16, 24 "
                      "or 32; float: 32 or 64)", nm, o + 14, bits,
                      out->format == CH_WAV_PCM ? "PCM" : "float");
    uint32_t fb = ch * (bits / 8); /* <= 1024 * 8 */
    if (align != fb)
        return ch_err(err, CHUTE_ECORRUPT,
                      "%s@%llu: wav: block align %u, but %u channels of %u bits make %u", nm,
                      o + 12, align, ch, bits, fb);
    out->channels = ch;
    out->rate = rate;
    out->bits = bits;
    out->frame_bytes = fb;
    return CHUTE_OK;
}

int ch_wav_parse(const uint8_t *head, size_t head_len, uint64_t file_size, ch_wav_read_fn rd,
                 void *user, const char *name, ch_wav_info *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    walker w = {head, CH_MIN(head_len, (size_t)CH_MIN(file_size, (uint64_t)SIZE_MAX)), file_size,
                rd, user, name};
    if (file_size < 12)
        return ch_err(err, CHUTE_ECORRUPT, "%s@0: wav: %llu bytes, too short for a RIFF header",
                      name, (unsigned long long)file_size);
    uint8_t b[40];
    int rc = get(&w, 0, b, 12, err);
    if (rc != CHUTE_OK)
        return rc;
    if (memcmp(b, "RF64", 4) == 0 || memcmp(b, "RIFX", 4) == 0)
        return ch_err(err, CHUTE_EUNSUPPORTED, "%s@0: wav: %.4s files are not supported "
                      "(only little-endian RIFF)", name, (const char *)b);
    if (memcmp(b, "RIFF", 4) != 0 || memcmp(b + 8, "WAVE", 4) != 0)
        return ch_err(err, CHUTE_ECORRUPT, "%s@0: wav: no RIFF/WAVE magic", name);
    uint64_t riff_end = 8 + (uint64_t)le32(b + 4);
    int have_fmt = 0;
    uint64_t off = 12;
    for (uint32_t k = 0; k < CH_WAV_MAX_CHUNKS; k++) {
        unsigned long long o = (unsigned long long)off;
        if (off + 8 > file_size)
            return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: the file ends before a%s chunk",
                          name, o, have_fmt ? " data" : " fmt");
        rc = get(&w, off, b, 8, err);
        if (rc != CHUTE_OK)
            return rc;
        uint32_t size = le32(b + 4);
        uint64_t body = off + 8, end = body + size;
        if (!ascii_id(b))
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: wav: chunk id %02x %02x %02x %02x is not ASCII (a missing "
                          "pad byte after an odd-sized chunk?)", name, o, b[0], b[1], b[2], b[3]);
        if (memcmp(b, "data", 4) == 0) {
            if (!have_fmt)
                return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: data chunk before the fmt chunk",
                              name, o);
            if (end > file_size)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@%llu: wav: data chunk claims %u bytes, the file has %llu after "
                              "its header (truncated file or lying header)", name, o + 4, size,
                              (unsigned long long)(file_size - body));
            if (size % out->frame_bytes)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@%llu: wav: data size %u is not a whole number of %u-byte frames",
                              name, o + 4, size, out->frame_bytes);
            if (riff_end < end || riff_end > file_size)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@4: wav: RIFF size says the file is %llu bytes, but its data "
                              "ends at %llu and the file has %llu", name,
                              (unsigned long long)riff_end, (unsigned long long)end,
                              (unsigned long long)file_size);
            out->data_offset = body;
            out->data_bytes = size;
            out->frames = size / out->frame_bytes;
            return CHUTE_OK;
        }
        if (end > file_size)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: wav: '%.4s' chunk of %u bytes runs past the end of the file "
                          "(%llu bytes)", name, o, (const char *)b, size,
                          (unsigned long long)file_size);
        if (memcmp(b, "fmt ", 4) == 0) {
            if (have_fmt)
                return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: a second fmt chunk", name, o);
            size_t n = CH_MIN(size, 40u);
            rc = get(&w, body, b, n, err);
            if (rc == CHUTE_OK)
                rc = parse_fmt(&w, b, size, body, out, err);
            if (rc != CHUTE_OK)
                return rc;
            have_fmt = 1;
        }
        off = end + (size & 1u);
    }
    return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: wav: no data chunk in the first %u chunks", name,
                  (unsigned long long)off, CH_WAV_MAX_CHUNKS);
}

void ch_wav_to_float(const ch_wav_info *w, const uint8_t *src, uint64_t nframes, float *dst,
                     uint64_t out_frames, int channels_first)
{
    const size_t C = w->channels;
    const uint64_t n = nframes * C;
    /* Sample s = t * C + c of the input goes to dst[at(s)]. */
#define AT(s) (channels_first ? ((s) % C) * out_frames + (s) / C : (s))
    if (w->format == CH_WAV_FLOAT && w->bits == 32) {
        if (!channels_first || C == 1) {
            memcpy(dst, src, (size_t)n * 4); /* bit for bit (little-endian hosts) */
            return;
        }
        for (uint64_t s = 0; s < n; s++)
            memcpy(&dst[AT(s)], src + s * 4, 4);
        return;
    }
    switch (w->format == CH_WAV_FLOAT ? 64 : w->bits) {
    case 8:
        for (uint64_t s = 0; s < n; s++)
            dst[AT(s)] = (float)((int)src[s] - 128) * (1.0f / 128.0f);
        break;
    case 16:
        for (uint64_t s = 0; s < n; s++)
            dst[AT(s)] = (float)(int16_t)le16(src + 2 * s) * (1.0f / 32768.0f);
        break;
    case 24:
        for (uint64_t s = 0; s < n; s++) {
            const uint8_t *p = src + 3 * s;
            int32_t v = (int32_t)(((uint32_t)p[0] << 8) | ((uint32_t)p[1] << 16) |
                                  ((uint32_t)p[2] << 24)) >> 8;
            dst[AT(s)] = (float)v * (1.0f / 8388608.0f);
        }
        break;
    case 32:
        for (uint64_t s = 0; s < n; s++)
            dst[AT(s)] = (float)(int32_t)le32(src + 4 * s) * (1.0f / 2147483648.0f);
        break;
    default: /* float64 */
        for (uint64_t s = 0; s < n; s++) {
            double d;
            memcpy(&d, src + 8 * s, 8);
            dst[AT(s)] = (float)d;
        }
        break;
    }
#undef AT
}
