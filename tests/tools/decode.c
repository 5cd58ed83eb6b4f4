/*
 * decode.c — test helper: one image file through chute's decoder registry
 * (ch_decoder_begin/finish, as the loader calls them), its RGB8 pixels
 * written to OUT, so Python tests can compare them with PIL's decode.
 *
 * usage: decode FILE OUT [X Y W H]
 * Decodes the window [X, X+W) x [Y, Y+H) (default: the whole image) at
 * scale 1 and writes exactly those W*H*3 bytes, rows top first.  Prints
 * "format=F width=W height=H channels=C caps=K" on success; exit 1 with
 * the decoder's message on failure.
 *
 * usage: decode --png0 FILE OUT
 * Only the PNG level-0 fast path (src/codec/png0.c), without libspng's
 * fallback: exit 3 when it declines the file, so tests can tell which
 * files it takes.
 */
#include "codec/codec.h"
#include "codec/png0.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int png0_only(const char *path, const char *outp)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static uint8_t in[64 << 20];
    size_t len = fread(in, 1, sizeof in, f);
    fclose(f);
    if (len < 24)
        return 1;
    uint32_t w = (uint32_t)in[16] << 24 | (uint32_t)in[17] << 16 | (uint32_t)in[18] << 8 | in[19];
    uint32_t h = (uint32_t)in[20] << 24 | (uint32_t)in[21] << 16 | (uint32_t)in[22] << 8 | in[23];
    if (!w || !h || (uint64_t)w * h > (1u << 26))
        return 1;
    size_t px = (size_t)w * h * 3;
    uint8_t *out = malloc(px + ch_png0_scratch(w));
    if (!out)
        return 1;
    int ok = ch_png0_decode(in, len, w, h, 0, out, out + px, 0);
    int status = 3;
    if (ok) {
        FILE *o = fopen(outp, "wb");
        status = o && fwrite(out, 1, px, o) == px && fclose(o) == 0 ? 0 : 1;
        printf("width=%u height=%u\n", w, h);
    } else {
        fprintf(stderr, "%s: declined by the level-0 path\n", path);
    }
    free(out);
    return status;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--png0") == 0)
        return png0_only(argv[2], argv[3]);
    if (argc != 3 && argc != 7) {
        fprintf(stderr, "usage: decode FILE OUT [X Y W H]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    ch_buf in = {0};
    size_t len = 0;
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < 0)
        return 1;
    size_t size = (size_t)ftell(f);
    rewind(f);
    if (ch_buf_reserve(&in, size + 1) != CHUTE_OK)
        return 1;
    len = fread(in.data, 1, size, f);
    fclose(f);
    if (len != size)
        return 1;
    ch_decoder *d = NULL;
    if (ch_decoder_create(&d) != CHUTE_OK)
        return 1;
    chute_error err = {0};
    ch_image_info info;
    int rc = ch_decoder_begin(d, in.data, len, 1ull << 32, &info, &err);
    uint32_t x = 0, y = 0, w = info.width, h = info.height;
    if (rc == CHUTE_OK && argc == 7) {
        x = (uint32_t)strtoul(argv[3], NULL, 10);
        y = (uint32_t)strtoul(argv[4], NULL, 10);
        w = (uint32_t)strtoul(argv[5], NULL, 10);
        h = (uint32_t)strtoul(argv[6], NULL, 10);
    }
    ch_buf pix = {0};
    ch_image im;
    if (rc == CHUTE_OK)
        rc = ch_decoder_finish(d, 1, x, y, w, h, &pix, &im, &err);
    int status = 0;
    if (rc != CHUTE_OK) {
        fprintf(stderr, "%s: %s: %s\n", argv[1], chute_status_name(rc), err.message);
        status = 1;
    } else {
        FILE *o = fopen(argv[2], "wb");
        /* The decoder may deliver more than asked (out->x/y/w/h): cut the window. */
        for (uint32_t r = 0; o && r < h; r++)
            fwrite(im.pixels + (size_t)(y - im.y + r) * im.stride + (size_t)(x - im.x) * 3, 1,
                   (size_t)w * 3, o);
        if (!o || fclose(o) != 0) {
            perror(argv[2]);
            status = 1;
        } else {
            printf("format=%d width=%u height=%u channels=%u caps=%u\n", info.kind, info.width,
                   info.height, info.channels, info.caps);
        }
    }
    ch_decoder_destroy(d);
    ch_buf_free(&pix);
    ch_buf_free(&in);
    return status;
}
