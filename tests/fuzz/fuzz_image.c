/*
 * fuzz_image.c — fuzz target: every registered image decoder (JPEG via
 * libjpeg-turbo, PNG via libspng, BMP, CHRAW; seeds for the last two in
 * corpus/image) through chute's two-step decode, with a window and DCT
 * scale chosen from the input's last bytes.  Must never crash, hang, leak
 * or allocate beyond the pixel limit.
 */
#include "codec/codec.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ch_decoder *dec = NULL;
    if (ch_decoder_create(&dec) != CHUTE_OK)
        return 0;
    ch_buf pix = {0};
    ch_image_info info;
    chute_error err;
    if (ch_decoder_begin(dec, data, size, 1u << 22, &info, &err) == CHUTE_OK) {
        uint8_t k = size ? data[size - 1] : 0;
        uint32_t denom = 1u << (k & 3);
        uint32_t sw, sh;
        ch_decoder_scaled_size(dec, denom, &sw, &sh);
        uint32_t x = (k >> 2) & 1 ? sw / 3 : 0, y = (k >> 3) & 1 ? sh / 4 : 0;
        uint32_t w = sw - x, h = sh - y;
        if ((k >> 4) & 1 && w > 2)
            w /= 2;
        ch_image img;
        if (ch_decoder_finish(dec, denom, x, y, w, h, &pix, &img, &err) == CHUTE_OK) {
            /* Touch every delivered pixel so ASan sees any overrun. */
            volatile unsigned sum = 0;
            for (uint32_t r = 0; r < img.h; r++)
                for (uint32_t c = 0; c < img.w * 3; c++)
                    sum += img.pixels[r * img.stride + c];
            (void)sum;
        }
    }
    ch_buf_free(&pix);
    ch_decoder_destroy(dec);
    return 0;
}
