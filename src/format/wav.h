/*
 * wav.h — a strict RIFF/WAVE header parser and the sample conversion to
 * float32 that the "wav" format (fmt_wav.c) is built on.
 *
 * Why a parser of our own (and not libsndfile): the format must read only
 * the header and then the crop's window of frames with one positional
 * read through the dataset's source (local, S3, cache tier), from many
 * worker threads, with no allocation; libsndfile wants a file descriptor
 * or virtual I/O callbacks per handle and allocates per open.  WAV's
 * layout is small enough to walk exactly: "RIFF" size "WAVE", then chunks
 * (id, 32-bit size, body, one pad byte after an odd body), of which only
 * "fmt " and "data" matter.
 *
 * What "strict" means here (each a CHUTE_ECORRUPT "NAME@OFFSET: wav:
 * reason", the offset of the field that is wrong): every chunk must lie
 * inside the file (checked in 64-bit arithmetic: sizes are 32-bit, offsets
 * grow past 4 GiB only by adding them); a chunk id must be four printable
 * ASCII bytes (garbage there means a writer forgot a pad byte); "fmt " must
 * come before "data" and appear once; the data must hold a whole number
 * of frames; the RIFF size must cover the data and not run past the file.
 * The pad byte after an odd data chunk at the very end of the file may be
 * missing (Python's `wave` module does not write it; libsndfile accepts
 * that too).  Valid but unhandled encodings (ADPCM, mu-law, 12-bit PCM,
 * RF64, big-endian RIFX) are CHUTE_EUNSUPPORTED naming the tag.
 * The byte rate field is not checked: nothing here uses it, and writers
 * that get it wrong write correct samples.
 *
 * Conversion matches libsndfile's (and so soundfile.read(dtype='float32'))
 * exactly: integers are scaled by a power of two (8-bit: (x - 128) / 128,
 * 16-bit: x / 32768, 24-bit: x / 8388608, 32-bit: (float)x / 2^31, the
 * rounding to float happening before the exact scaling, as libsndfile's
 * i2f does), float32 is copied bit for bit, float64 is rounded to float.
 *
 * Nothing here allocates, keeps state, or touches a file: bytes come from
 * the caller's head buffer or its read callback.
 */
#ifndef CHUTE_FORMAT_WAV_H
#define CHUTE_FORMAT_WAV_H

#include "../common/common.h"

#include <stddef.h>
#include <stdint.h>

#define CH_WAV_PCM 1
#define CH_WAV_FLOAT 3
#define CH_WAV_EXTENSIBLE 0xFFFE
#define CH_WAV_MAX_CHANNELS 1024u   /* libsndfile's SF_MAX_CHANNELS */
#define CH_WAV_MAX_CHUNKS 4096u     /* chunks walked before "data"; more is refused */

typedef struct ch_wav_info {
    uint32_t format;          /* CH_WAV_PCM or CH_WAV_FLOAT (EXTENSIBLE resolved) */
    uint32_t tag;             /* the fmt chunk's own format tag (1, 3 or 0xFFFE) */
    uint32_t channels;        /* 1..CH_WAV_MAX_CHANNELS */
    uint32_t rate;            /* frames per second, > 0 */
    uint32_t bits;            /* container bits per sample: 8/16/24/32 PCM, 32/64 float */
    uint32_t valid_bits;      /* EXTENSIBLE's valid bits (== bits otherwise) */
    uint32_t frame_bytes;     /* channels * bits / 8 (the block align) */
    uint64_t data_offset;     /* first byte of the first frame */
    uint64_t data_bytes;      /* frames * frame_bytes */
    uint64_t frames;
} ch_wav_info;

/* Reads exactly len bytes at off (the source's read_at); returns a
 * chute_status and fills err on failure. */
typedef int (*ch_wav_read_fn)(void *user, uint64_t off, void *buf, size_t len, chute_error *err);

/*
 * Walk the RIFF header of a WAV file of file_size bytes whose first
 * head_len bytes are in head (head_len <= file_size).  Bytes past the head
 * (a large chunk before "data") are read through rd(user, ...) when rd is
 * not NULL; with rd NULL they are an error, so a caller holding the whole
 * file passes it as the head.  On success *out describes the data; no
 * sample byte is read.  Errors as the essay says, naming `name`.
 */
int ch_wav_parse(const uint8_t *head, size_t head_len, uint64_t file_size, ch_wav_read_fn rd,
                 void *user, const char *name, ch_wav_info *out, chute_error *err);

/*
 * Convert nframes frames at src (w's encoding, interleaved) to float32,
 * into frames [0, nframes) of an output of out_frames frames:
 * channels_first 0: dst[t * channels + c] (soundfile's (frames, channels));
 * channels_first 1: dst[c * out_frames + t] (torchaudio's (channels, frames)).
 * Frames past nframes are left as they are (the caller zeroes them).
 */
void ch_wav_to_float(const ch_wav_info *w, const uint8_t *src, uint64_t nframes, float *dst,
                     uint64_t out_frames, int channels_first);

#endif
