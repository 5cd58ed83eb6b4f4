/*
 * fuzz_wav.c — fuzz target: the RIFF/WAVE header walk (src/format/wav.c)
 * that every WAV sample goes through, and the conversion behind it.
 * Every input is parsed twice, whole from memory and from a small head plus
 * positional reads (how the format reads a file through its source), and
 * the two must agree exactly.  Whatever the parse accepts must describe
 * bytes inside the input: the data offset and size within it, a whole
 * number of frames of channels x bits / 8 bytes; the accepted frames are
 * then converted (all of them, both layouts) so ASan/UBSan see every read.
 */
#include "format/wav.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct mem {
    const uint8_t *p;
    size_t len;
} mem;

static int rd(void *user, uint64_t off, void *buf, size_t len, chute_error *err)
{
    const mem *m = user;
    if (off > m->len || len > m->len - off)
        __builtin_trap(); /* the walk must check offsets against the size first */
    memcpy(buf, m->p + off, len);
    (void)err;
    return CHUTE_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ch_wav_info a, b;
    chute_error ea, eb;
    memset(&ea, 0, sizeof ea);
    memset(&eb, 0, sizeof eb);
    mem m = {data, size};
    int ra = ch_wav_parse(data, size, size, NULL, NULL, "fuzz", &a, &ea);
    int rb = ch_wav_parse(data, size < 20 ? size : 20, size, rd, &m, "fuzz", &b, &eb);
    if (ra != rb || (ra == CHUTE_OK && memcmp(&a, &b, sizeof a) != 0) ||
        (ra != CHUTE_OK && strcmp(ea.message, eb.message) != 0))
        __builtin_trap();
    if (ra != CHUTE_OK)
        return 0;
    if (a.data_offset > size || a.data_bytes > size - a.data_offset || a.frame_bytes == 0 ||
        a.frame_bytes != a.channels * (a.bits / 8) || a.frames * a.frame_bytes != a.data_bytes ||
        a.channels == 0 || a.channels > CH_WAV_MAX_CHANNELS || a.rate == 0)
        __builtin_trap();
    uint64_t n = a.frames < 4096 ? a.frames : 4096;
    float *out = malloc((size_t)(n ? n : 1) * a.channels * sizeof(float));
    if (!out)
        return 0;
    ch_wav_to_float(&a, data + a.data_offset, n, out, n, 0);
    ch_wav_to_float(&a, data + a.data_offset, n, out, n, 1);
    free(out);
    return 0;
}
