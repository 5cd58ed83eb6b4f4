/*
 * test_codec.c — unit tests for src/codec: sniffing, windowed JPEG decode,
 * limits and damaged input.
 *
 * Real photos come from the fixture tree (--data DIR, made by
 * tests/setup_data.py); without it the photo tests skip.  Hostile inputs
 * (decode bombs, truncations, garbage) are derived from those photos or
 * built here byte by byte.
 */
#include "unit.h"

#include "codec/codec.h"
#include "format/format.h" /* ch_crc32 for hand-made PNGs */

#include <dirent.h>
#include <jpeglib.h>
#include <time.h>
#include <zlib.h>

typedef struct file_list {
    char **paths;
    size_t n;
} file_list;

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Image files of the fixture tree whose name ends in one of exts ("|"-separated). */
static int list_tree(const char *exts, size_t max, file_list *out)
{
    memset(out, 0, sizeof *out);
    if (!g_data)
        return -1;
    char root[4096];
    snprintf(root, sizeof root, "%s/tree", g_data);
    DIR *d = opendir(root);
    if (!d)
        return -1;
    struct dirent *de;
    char **classes = NULL;
    size_t nc = 0;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.') {
            classes = realloc(classes, (nc + 1) * sizeof *classes);
            classes[nc++] = strdup(de->d_name);
        }
    closedir(d);
    qsort(classes, nc, sizeof *classes, cmp_strp);
    for (size_t c = 0; c < nc; c++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", root, classes[c]);
        DIR *cd = opendir(dir);
        while (cd && (de = readdir(cd)) != NULL) {
            const char *dot = strrchr(de->d_name, '.');
            if (!dot || de->d_name[0] == '.')
                continue;
            char pat[64];
            snprintf(pat, sizeof pat, "|%s|", dot + 1);
            char hay[128];
            snprintf(hay, sizeof hay, "|%s|", exts);
            if (!strstr(hay, pat))
                continue;
            out->paths = realloc(out->paths, (out->n + 1) * sizeof *out->paths);
            char *p = NULL;
            if (asprintf(&p, "%s/%s", dir, de->d_name) < 0)
                p = NULL;
            out->paths[out->n++] = p;
        }
        if (cd)
            closedir(cd);
        free(classes[c]);
    }
    free(classes);
    qsort(out->paths, out->n, sizeof *out->paths, cmp_strp);
    if (out->n > max) {
        for (size_t i = max; i < out->n; i++)
            free(out->paths[i]);
        out->n = max;
    }
    return out->n ? 0 : -1;
}

static void free_list(file_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->paths[i]);
    free(l->paths);
    memset(l, 0, sizeof *l);
}

#define NEED_PHOTOS(list, exts, max)                                                      \
    do {                                                                                  \
        if (list_tree(exts, max, list) != 0)                                              \
            SKIP("no fixture photos (--data DIR with tree/; run the data_setup test)");   \
    } while (0)

/* Decode the whole image at 1/denom into a malloc'd RGB8 buffer. */
static uint8_t *decode_full(ch_decoder *d, const uint8_t *data, size_t len, uint32_t denom,
                            uint32_t *w, uint32_t *h, ch_image_info *info, chute_error *err)
{
    ch_buf buf = {0};
    ch_image im;
    uint8_t *out = NULL;
    if (ch_decoder_begin(d, data, len, 1ull << 30, info, err) != CHUTE_OK)
        return NULL;
    ch_decoder_scaled_size(d, denom, w, h);
    if (ch_decoder_finish(d, denom, 0, 0, *w, *h, &buf, &im, err) == CHUTE_OK &&
        im.w == *w && im.h == *h && im.x == 0 && im.y == 0) {
        out = malloc((size_t)*w * *h * 3);
        for (uint32_t y = 0; y < *h; y++)
            memcpy(out + (size_t)y * *w * 3, im.pixels + y * im.stride, (size_t)*w * 3);
    }
    ch_buf_free(&buf);
    return out;
}

/* ------------------------------------------------------------------ */

TEST(sniff_magic_numbers)
{
    static const struct {
        const char *bytes;
        size_t len;
        int kind;
        const char *name;
    } t[] = {
        {"\xFF\xD8\xFF\xE0", 4, CH_IMG_JPEG, "JPEG"},
        {"\xFF\xD8\xFF", 3, CH_IMG_JPEG, "JPEG"},
        {"\xFF\xD8", 2, CH_IMG_UNKNOWN, "unknown data"},
        {"\x89PNG\r\n\x1a\n\0\0", 10, CH_IMG_PNG, "PNG"},
        {"\x89PNG\r\n\x1a", 7, CH_IMG_UNKNOWN, "unknown data"},
        {"BM\x36\0\0\0", 6, CH_IMG_UNKNOWN, "BMP"},
        {"BM\x36\0\0\0\0\0\0\0\x36\0\0\0\x28\0\0\0", 18, CH_IMG_BMP, "BMP"},
        {"BM\x36\0\0\0\0\0\0\0\x36\0\0\0\x29\0\0\0", 18, CH_IMG_UNKNOWN, "BMP"},
        {"CHRAW\1\3\0", 8, CH_IMG_RAW, "CHRAW"},
        {"CHRA", 4, CH_IMG_UNKNOWN, "unknown data"},
        {"RIFF\0\0\0\0WEBPVP8 ", 16, CH_IMG_UNKNOWN, "WebP"},
        {"II*\0", 4, CH_IMG_UNKNOWN, "TIFF"},
        {"MM\0*", 4, CH_IMG_UNKNOWN, "TIFF"},
        {"GIF89a", 6, CH_IMG_UNKNOWN, "GIF"},
        {"P6\n", 3, CH_IMG_UNKNOWN, "PNM"},
        {"", 0, CH_IMG_UNKNOWN, "empty file"},
        {"hello world", 11, CH_IMG_UNKNOWN, "unknown data"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        CHECK(ch_sniff(t[i].bytes, t[i].len) == t[i].kind, "case %zu: sniff %d, want %d", i,
              ch_sniff(t[i].bytes, t[i].len), t[i].kind);
        CHECK(strcmp(ch_sniff_name(t[i].bytes, t[i].len), t[i].name) == 0,
              "case %zu: named '%s', want '%s'", i, ch_sniff_name(t[i].bytes, t[i].len), t[i].name);
    }
    /* NULL with length 0 must be safe. */
    CHECK(ch_sniff(NULL, 0) == CH_IMG_UNKNOWN, "NULL sniff");
    return 0;
}

/* Differences between windowed and full decodes, by where they are. */
typedef struct win_stats {
    uint64_t windows, bad_windows;
    uint64_t diff_edge_cols;  /* in the first/last column libjpeg delivered */
    uint64_t diff_inner;      /* anywhere else */
    int max_delta;
    char first[512];
} win_stats;

/* Compare the requested window of a windowed decode with the full decode.
 * Returns 1 on a hard failure (decode error, wrong geometry). */
static int check_window(ch_decoder *d, const uint8_t *data, size_t len, uint32_t denom,
                        const uint8_t *full, uint32_t fw, uint32_t fh, uint32_t x, uint32_t y,
                        uint32_t w, uint32_t h, const char *path, win_stats *ws)
{
    ch_image_info info;
    chute_error err = {0};
    ch_buf buf = {0};
    ch_image im;
    int rc = ch_decoder_begin(d, data, len, 1ull << 30, &info, &err);
    if (rc == CHUTE_OK)
        rc = ch_decoder_finish(d, denom, x, y, w, h, &buf, &im, &err);
    if (rc != CHUTE_OK) {
        fprintf(stderr, "%s 1/%u window %ux%u+%u+%u: %s\n", path, denom, w, h, x, y, err.message);
        ch_buf_free(&buf);
        return 1;
    }
    if (im.x > x || im.x + im.w < x + w || im.y > y || im.y + im.h < y + h ||
        im.scaled_w != fw || im.scaled_h != fh || im.scale_denom != denom) {
        fprintf(stderr, "%s 1/%u: asked %ux%u+%u+%u, got %ux%u+%u+%u of %ux%u (1/%u)\n", path,
                denom, w, h, x, y, im.w, im.h, im.x, im.y, im.scaled_w, im.scaled_h,
                im.scale_denom);
        ch_buf_free(&buf);
        return 1;
    }
    ws->windows++;
    int bad = 0;
    for (uint32_t r = 0; r < h; r++) {
        const uint8_t *a = im.pixels + (size_t)(y + r - im.y) * im.stride + (size_t)(x - im.x) * 3;
        const uint8_t *b = full + ((size_t)(y + r) * fw + x) * 3;
        if (memcmp(a, b, (size_t)w * 3) == 0)
            continue;
        for (uint32_t c = 0; c < w * 3; c++) {
            if (a[c] == b[c])
                continue;
            uint32_t col = x + c / 3;
            int delta = abs((int)a[c] - (int)b[c]);
            if (delta > ws->max_delta)
                ws->max_delta = delta;
            if (col == im.x || col == im.x + im.w - 1)
                ws->diff_edge_cols++;
            else
                ws->diff_inner++;
            if (!bad && !ws->first[0])
                snprintf(ws->first, sizeof ws->first,
                         "%s 1/%u window %ux%u+%u+%u (libjpeg delivered %ux%u+%u+%u): pixel "
                         "(%u,%u) channel %u is %u, full decode %u",
                         path, denom, w, h, x, y, im.w, im.h, im.x, im.y, col, y + r, c % 3, a[c],
                         b[c]);
            bad = 1;
        }
    }
    ws->bad_windows += bad;
    ch_buf_free(&buf);
    return 0;
}

TEST(jpeg_window_equals_full_decode)
{
    file_list l;
    NEED_PHOTOS(&l, "jpg|jpeg", 60);
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    uint64_t seed = 12345;
    int bad = 0;
    win_stats ws;
    memset(&ws, 0, sizeof ws);
    for (size_t f = 0; f < l.n && !bad; f++) {
        size_t len;
        uint8_t *data = unit_read_file(l.paths[f], &len);
        CHECK(data != NULL, "read %s", l.paths[f]);
        static const uint32_t denoms[] = {1, 2, 4, 8};
        for (int di = 0; di < 4 && !bad; di++) {
            uint32_t denom = denoms[di], W, H;
            ch_image_info info;
            chute_error err = {0};
            uint8_t *full = decode_full(d, data, len, denom, &W, &H, &info, &err);
            if (!full) {
                fprintf(stderr, "%s: full decode at 1/%u failed: %s\n", l.paths[f], denom,
                        err.message);
                bad = 1;
                break;
            }
            uint32_t win[10][4] = {
                {0, 0, 1, 1},
                {W - 1, H - 1, 1, 1},
                {W / 2, 0, W - W / 2, H},
                {0, H / 2, W, H - H / 2},
                {W / 3, H / 3, W / 3 + 1, H / 3 + 1},
            };
            int nwin = denom == 1 ? 10 : 6;
            for (int k = 5; k < nwin; k++) { /* random windows, like train crops */
                uint32_t ww = 1 + (uint32_t)(unit_rand(&seed) % W);
                uint32_t hh = 1 + (uint32_t)(unit_rand(&seed) % H);
                win[k][0] = (uint32_t)(unit_rand(&seed) % (W - ww + 1));
                win[k][1] = (uint32_t)(unit_rand(&seed) % (H - hh + 1));
                win[k][2] = ww;
                win[k][3] = hh;
            }
            for (int k = 0; k < nwin && !bad; k++)
                bad = check_window(d, data, len, denom, full, W, H, win[k][0], win[k][1],
                                   win[k][2], win[k][3], l.paths[f], &ws);
            /* A grey JPEG decodes to R == G == B. */
            if (!bad && info.channels == 1)
                for (size_t p = 0; p < (size_t)W * H && !bad; p++)
                    if (full[p * 3] != full[p * 3 + 1] || full[p * 3] != full[p * 3 + 2]) {
                        fprintf(stderr, "%s: grey JPEG decoded to colour\n", l.paths[f]);
                        bad = 1;
                    }
            free(full);
        }
        free(data);
    }
    ch_decoder_destroy(d);
    free_list(&l);
    CHECK(!bad, "windowed decode failed");
    CHECK(ws.bad_windows == 0,
          "%llu of %llu windowed decodes differ from the full decode inside the requested "
          "window (%llu values in the first/last column libjpeg delivered, %llu elsewhere; "
          "max difference %d). First: %s",
          (unsigned long long)ws.bad_windows, (unsigned long long)ws.windows,
          (unsigned long long)ws.diff_edge_cols, (unsigned long long)ws.diff_inner, ws.max_delta,
          ws.first);
    return 0;
}

TEST(png_decodes_whole)
{
    file_list l;
    NEED_PHOTOS(&l, "png", 12);
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    for (size_t f = 0; f < l.n; f++) {
        size_t len;
        uint8_t *data = unit_read_file(l.paths[f], &len);
        CHECK(data != NULL, "read");
        uint32_t W, H;
        ch_image_info info;
        chute_error err = {0};
        uint8_t *full = decode_full(d, data, len, 1, &W, &H, &info, &err);
        CHECK(full != NULL, "%s: %s", l.paths[f], err.message);
        CHECK(info.kind == CH_IMG_PNG && info.width == W && info.height == H && W > 0,
              "%s: info %ux%u kind %d", l.paths[f], info.width, info.height, info.kind);
        if (info.channels == 1)
            for (size_t p = 0; p < (size_t)W * H; p++)
                CHECK(full[p * 3] == full[p * 3 + 1] && full[p * 3] == full[p * 3 + 2],
                      "%s: grey PNG decoded to colour", l.paths[f]);
        free(full);
        free(data);
    }
    ch_decoder_destroy(d);
    free_list(&l);
    return 0;
}

/* Offset of the SOFn marker segment (FF C0..C2) in a JPEG, or 0. */
static size_t find_sof(const uint8_t *p, size_t len)
{
    size_t i = 2;
    while (i + 4 < len) {
        if (p[i] != 0xFF)
            return 0;
        uint8_t m = p[i + 1];
        size_t seglen = ((size_t)p[i + 2] << 8) | p[i + 3];
        if (m >= 0xC0 && m <= 0xC2)
            return i;
        i += 2 + seglen;
    }
    return 0;
}

static uint8_t *first_jpeg(size_t *len, char *path, size_t pathlen)
{
    file_list l;
    if (list_tree("jpg", 1, &l) != 0)
        return NULL;
    snprintf(path, pathlen, "%s", l.paths[0]);
    uint8_t *data = unit_read_file(l.paths[0], len);
    free_list(&l);
    return data;
}

TEST(jpeg_decode_bomb_rejected_by_limit)
{
    size_t len;
    char path[4096];
    uint8_t *data = first_jpeg(&len, path, sizeof path);
    if (!data)
        SKIP("no fixture photos");
    size_t sof = find_sof(data, len);
    CHECK(sof > 0, "%s: no SOF marker found", path);
    /* Claim 65000 x 65000 (4.2 Gpx): must fail in begin(), from the header. */
    data[sof + 5] = 0xFD;
    data[sof + 6] = 0xE8;
    data[sof + 7] = 0xFD;
    data[sof + 8] = 0xE8;
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    ch_image_info info;
    chute_error err = {0};
    int rc = ch_decoder_begin(d, data, len, 64ull << 20, &info, &err);
    CHECK(rc == CHUTE_ELIMIT, "65000x65000 JPEG: begin returned %s (%s), want CHUTE_ELIMIT",
          chute_status_name(rc), err.message);
    CHECK(strstr(err.message, "65000x65000") != NULL, "message '%s' does not give the size",
          err.message);
    /* The public probe call applies the same limit (default 64 Mpx). */
    memset(&err, 0, sizeof err);
    rc = chute_probe_image(data, len, 0, NULL, NULL, NULL, &err);
    CHECK(rc == CHUTE_ELIMIT, "chute_probe_image: %s (%s)", chute_status_name(rc), err.message);
    /* A limit below a real image's size rejects it too, and the decoder
     * stays usable afterwards. */
    free(data);
    data = first_jpeg(&len, path, sizeof path);
    rc = ch_decoder_begin(d, data, len, 1000, &info, &err);
    CHECK(rc == CHUTE_ELIMIT, "real image with max_pixels 1000: %s", chute_status_name(rc));
    uint32_t W, H;
    uint8_t *full = decode_full(d, data, len, 1, &W, &H, &info, &err);
    CHECK(full != NULL, "decoder unusable after a limit rejection: %s", err.message);
    free(full);
    free(data);
    ch_decoder_destroy(d);
    return 0;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A PNG whose IHDR claims w x h, with one tiny IDAT and IEND, CRCs right. */
static size_t make_png(uint8_t *out, uint32_t w, uint32_t h)
{
    size_t n = 0;
    memcpy(out, "\x89PNG\r\n\x1a\n", 8);
    n = 8;
    put_be32(out + n, 13);
    memcpy(out + n + 4, "IHDR", 4);
    put_be32(out + n + 8, w);
    put_be32(out + n + 12, h);
    out[n + 16] = 8; /* depth */
    out[n + 17] = 2; /* RGB */
    out[n + 18] = 0;
    out[n + 19] = 0;
    out[n + 20] = 0;
    put_be32(out + n + 21, ch_crc32(out + n + 4, 17));
    n += 25;
    static const uint8_t z[] = {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01};
    put_be32(out + n, sizeof z);
    memcpy(out + n + 4, "IDAT", 4);
    memcpy(out + n + 8, z, sizeof z);
    put_be32(out + n + 8 + sizeof z, ch_crc32(out + n + 4, 4 + sizeof z));
    n += 12 + sizeof z;
    put_be32(out + n, 0);
    memcpy(out + n + 4, "IEND", 4);
    put_be32(out + n + 8, ch_crc32(out + n + 4, 4));
    n += 12;
    return n;
}

TEST(png_decode_bomb_rejected_by_limit)
{
    uint8_t png[128];
    size_t len = make_png(png, 100000, 100000);
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    ch_image_info info;
    chute_error err = {0};
    int rc = ch_decoder_begin(d, png, len, 64ull << 20, &info, &err);
    if (rc == CHUTE_EUNSUPPORTED) {
        ch_decoder_destroy(d);
        SKIP("built without PNG support");
    }
    CHECK(rc == CHUTE_ELIMIT, "100000x100000 PNG: begin returned %s (%s)", chute_status_name(rc),
          err.message);
    rc = chute_probe_image(png, len, 0, NULL, NULL, NULL, &err);
    CHECK(rc == CHUTE_ELIMIT, "chute_probe_image: %s (%s)", chute_status_name(rc), err.message);
    /* A 1x1 PNG with a too-short IDAT: recognised, but damaged. */
    len = make_png(png, 1, 1);
    rc = ch_decoder_begin(d, png, len, 64ull << 20, &info, &err);
    CHECK(rc == CHUTE_OK && info.width == 1 && info.height == 1, "1x1 PNG header: %s",
          chute_status_name(rc));
    ch_buf buf = {0};
    ch_image im;
    rc = ch_decoder_finish(d, 1, 0, 0, 1, 1, &buf, &im, &err);
    CHECK(rc == CHUTE_OK || rc == CHUTE_ECORRUPT, "1x1 PNG data: %s", chute_status_name(rc));
    ch_buf_free(&buf);
    ch_decoder_destroy(d);
    return 0;
}

static int decode_status(ch_decoder *d, const uint8_t *data, size_t len, chute_error *err)
{
    ch_image_info info;
    ch_buf buf = {0};
    ch_image im;
    int rc = ch_decoder_begin(d, data, len, 64ull << 20, &info, err);
    if (rc == CHUTE_OK)
        rc = ch_decoder_finish(d, 1, 0, 0, info.width, info.height, &buf, &im, err);
    ch_buf_free(&buf);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Ancillary-chunk and scan bombs                                      */
/* ------------------------------------------------------------------ */

typedef struct growbuf {
    uint8_t *p;
    size_t n, cap;
} growbuf;

static void gb_put(growbuf *g, const void *src, size_t len)
{
    if (len == 0)
        return;
    if (g->n + len > g->cap) {
        g->cap = (g->n + len) * 2;
        g->p = realloc(g->p, g->cap);
    }
    memcpy(g->p + g->n, src, len);
    g->n += len;
}

static void gb_chunk(growbuf *g, const char *type, const uint8_t *data, size_t len)
{
    uint8_t hdr[8];
    put_be32(hdr, (uint32_t)len);
    memcpy(hdr + 4, type, 4);
    gb_put(g, hdr, 8);
    gb_put(g, data, len);
    uint32_t crc = (uint32_t)crc32(crc32(0, (const Bytef *)type, 4), data, (uInt)len);
    uint8_t c[4];
    put_be32(c, crc);
    gb_put(g, c, 4);
}

/* zlib stream of `zeros` zero bytes, compressed at level 9 without ever
 * holding them (1 GiB of zeros deflates to about 1 MiB). */
static void deflate_zeros(growbuf *g, uint64_t zeros)
{
    static uint8_t zin[1 << 16], zout[1 << 16];
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit(&z, 9);
    for (;;) {
        uint64_t left = zeros;
        z.next_in = zin;
        z.avail_in = (uInt)(left < sizeof zin ? left : sizeof zin);
        zeros -= z.avail_in;
        int flush = zeros == 0 ? Z_FINISH : Z_NO_FLUSH;
        int rc;
        do {
            z.next_out = zout;
            z.avail_out = sizeof zout;
            rc = deflate(&z, flush);
            gb_put(g, zout, sizeof zout - z.avail_out);
        } while (z.avail_out == 0);
        if (rc == Z_STREAM_END)
            break;
    }
    deflateEnd(&z);
}

/* A valid 16x16 RGB PNG carrying one ancillary chunk before IDAT:
 * "zTXt"/"iCCP" with `inflated` zero bytes compressed, or "tEXt" with
 * `inflated` bytes stored as is. */
static growbuf png_with_chunk(const char *type, uint64_t inflated)
{
    growbuf g = {0};
    gb_put(&g, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13] = {0};
    put_be32(ihdr, 16);
    put_be32(ihdr + 4, 16);
    ihdr[8] = 8;
    ihdr[9] = 2;
    gb_chunk(&g, "IHDR", ihdr, 13);
    growbuf c = {0};
    if (!strcmp(type, "tEXt")) {
        gb_put(&c, "Comment", 8); /* keyword + NUL */
        uint8_t a[4096];
        memset(a, 'a', sizeof a);
        for (uint64_t k = 0; k < inflated; k += sizeof a)
            gb_put(&c, a, inflated - k < sizeof a ? inflated - k : sizeof a);
    } else {
        gb_put(&c, !strcmp(type, "iCCP") ? "ICC profile" : "Comment", !strcmp(type, "iCCP") ? 12 : 8);
        gb_put(&c, "\0", 1); /* compression method 0 */
        deflate_zeros(&c, inflated);
    }
    gb_chunk(&g, type, c.p, c.n);
    free(c.p);
    uint8_t raw[16 * (1 + 16 * 3)];
    for (int y = 0; y < 16; y++) {
        raw[y * 49] = 0;
        for (int x = 0; x < 48; x++)
            raw[y * 49 + 1 + x] = (uint8_t)(x * 5 + y * 3);
    }
    uLongf zl = compressBound(sizeof raw);
    uint8_t *z = malloc(zl);
    compress2(z, &zl, raw, sizeof raw, 9);
    gb_chunk(&g, "IDAT", z, zl);
    free(z);
    gb_chunk(&g, "IEND", NULL, 0);
    return g;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* zTXt / iCCP that inflate to 64 MiB (a few KiB in the file) and a 9 MiB
 * tEXt fail with CHUTE_ELIMIT instead of costing memory and zlib time on
 * every decode; modest ones (200 KiB text, a 3 KiB profile) still decode,
 * with the pixels of the same image without them.  PIL fails the same
 * bombs ("Decompressed Data Too Large", 1 MiB per chunk). */
TEST(png_ancillary_chunk_bombs_limited)
{
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    chute_error err = {0};
    growbuf plain = png_with_chunk("tEXt", 10);
    int rc = decode_status(d, plain.p, plain.n, &err);
    if (rc == CHUTE_EUNSUPPORTED) {
        free(plain.p);
        ch_decoder_destroy(d);
        SKIP("built without PNG support");
    }
    CHECK(rc == CHUTE_OK, "plain PNG: %s (%s)", chute_status_name(rc), err.message);
    static const struct {
        const char *type;
        uint64_t bytes;
        int want;
    } cases[] = {
        {"zTXt", 64ull << 20, CHUTE_ELIMIT}, {"iCCP", 64ull << 20, CHUTE_ELIMIT},
        {"tEXt", 9ull << 20, CHUTE_ELIMIT},  {"zTXt", 200u << 10, CHUTE_OK},
        {"iCCP", 3u << 10, CHUTE_OK},        {"tEXt", 200u << 10, CHUTE_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        growbuf g = png_with_chunk(cases[i].type, cases[i].bytes);
        double t0 = mono_s();
        ch_image_info info;
        ch_buf buf = {0};
        ch_image im;
        rc = ch_decoder_begin(d, g.p, g.n, 64ull << 20, &info, &err);
        if (rc == CHUTE_OK)
            rc = ch_decoder_finish(d, 1, 0, 0, info.width, info.height, &buf, &im, &err);
        double t = mono_s() - t0;
        fprintf(stderr, "%s of %llu bytes (%zu in the file): %s in %.1f ms%s%s\n", cases[i].type,
                (unsigned long long)cases[i].bytes, g.n, chute_status_name(rc), t * 1e3,
                rc ? ": " : "", rc ? err.message : "");
        int same = 1;
        if (rc == CHUTE_OK) {
            ch_buf pb = {0};
            ch_image pim;
            ch_image_info pinfo;
            same = ch_decoder_begin(d, plain.p, plain.n, 64ull << 20, &pinfo, &err) == CHUTE_OK &&
                   ch_decoder_finish(d, 1, 0, 0, 16, 16, &pb, &pim, &err) == CHUTE_OK &&
                   memcmp(pim.pixels, im.pixels, 16 * 16 * 3) == 0;
            ch_buf_free(&pb);
        }
        ch_buf_free(&buf);
        free(g.p);
        CHECK(rc == cases[i].want, "%s of %llu bytes: %s, want %s (%s)", cases[i].type,
              (unsigned long long)cases[i].bytes, chute_status_name(rc),
              chute_status_name(cases[i].want), err.message);
        CHECK(same, "%s of %llu bytes: pixels differ from the same PNG without it", cases[i].type,
              (unsigned long long)cases[i].bytes);
    }
    /* The decoder still works after a limit. */
    rc = decode_status(d, plain.p, plain.n, &err);
    CHECK(rc == CHUTE_OK, "plain PNG after the bombs: %s", chute_status_name(rc));
    free(plain.p);
    ch_decoder_destroy(d);
    return 0;
}

/* A valid progressive greyscale JPEG of w x h (flat grey) whose scan
 * script refines every coefficient band one bit at a time: 11 DC scans
 * plus 11 for each of the 63 AC coefficients (libjpeg's encoder allows
 * successive approximation from bit 10 for 8-bit samples), 704 scans,
 * almost all of
 * them end-of-band runs: a few KiB that every decoder must process scan
 * by scan over the whole image (libjpeg-turbo's documented DoS). */
static growbuf jpeg_many_scans(uint32_t w, uint32_t h, int *nscans)
{
    static jpeg_scan_info script[11 + 63 * 11];
    int n = 0;
    for (int al = 10; al >= 0; al--) {
        script[n] = (jpeg_scan_info){1, {0}, 0, 0, al == 10 ? 0 : al + 1, al};
        n++;
    }
    for (int k = 1; k < 64; k++)
        for (int al = 10; al >= 0; al--) {
            script[n] = (jpeg_scan_info){1, {0}, k, k, al == 10 ? 0 : al + 1, al};
            n++;
        }
    *nscans = n;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *mem = NULL;
    unsigned long memlen = 0;
    jpeg_mem_dest(&c, &mem, &memlen);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 1;
    c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    c.scan_info = script;
    c.num_scans = n;
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc(w);
    memset(row, 128, w);
    while (c.next_scanline < h) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    growbuf g = {0};
    gb_put(&g, mem, memlen);
    free(mem);
    return g;
}

/* More scans than any encoder writes: CHUTE_ELIMIT, fast, and the decoder
 * stays usable; a normal progressive JPEG (10 scans) still decodes. */
TEST(jpeg_scan_bomb_limited)
{
    int nscans = 0;
    growbuf g = jpeg_many_scans(2048, 2048, &nscans);
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    chute_error err = {0};
    double t0 = mono_s();
    int rc = decode_status(d, g.p, g.n, &err);
    double t = mono_s() - t0;
    fprintf(stderr, "%d-scan progressive 2048x2048 JPEG (%zu bytes): %s in %.0f ms (%s)\n", nscans,
            g.n, chute_status_name(rc), t * 1e3, err.message);
    free(g.p);
    CHECK(rc == CHUTE_ELIMIT, "%d-scan JPEG: %s, want ELIMIT (%s)", nscans, chute_status_name(rc),
          err.message);
    CHECK(strstr(err.message, "scans") != NULL, "message does not say why: %s", err.message);

    /* jpeg_simple_progression's script (10 scans for colour) is fine. */
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *mem = NULL;
    unsigned long memlen = 0;
    jpeg_mem_dest(&c, &mem, &memlen);
    c.image_width = 64;
    c.image_height = 48;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t row[64 * 3];
    for (int x = 0; x < 64 * 3; x++)
        row[x] = (uint8_t)(x * 7);
    while (c.next_scanline < 48) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    rc = decode_status(d, mem, memlen, &err);
    free(mem);
    ch_decoder_destroy(d);
    CHECK(rc == CHUTE_OK, "normal progressive JPEG after the bomb: %s (%s)", chute_status_name(rc),
          err.message);
    return 0;
}

TEST(truncated_jpeg_is_corrupt)
{
    file_list l;
    NEED_PHOTOS(&l, "jpg|jpeg", 40);
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    for (size_t f = 0; f < l.n; f += 4) {
        size_t len;
        uint8_t *data = unit_read_file(l.paths[f], &len);
        CHECK(data != NULL, "read");
        size_t sof = find_sof(data, len);
        const size_t cuts[] = {2, 3, 20, sof ? sof + 4 : 30, len / 10, len / 2, len * 9 / 10,
                               len - 300};
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            chute_error err = {0};
            int rc = decode_status(d, data, cuts[c], &err);
            int want = cuts[c] < 3 ? CHUTE_EFORMAT : CHUTE_ECORRUPT;
            CHECK(rc == want, "%s cut to %zu of %zu bytes: %s (%s), want %s", l.paths[f], cuts[c],
                  len, chute_status_name(rc), err.message, chute_status_name(want));
            CHECK(err.message[0] != '\0', "no message");
        }
        /* Whole file decodes with the same decoder afterwards. */
        chute_error err = {0};
        CHECK(decode_status(d, data, len, &err) == CHUTE_OK, "%s after errors: %s", l.paths[f],
              err.message);
        free(data);
    }
    ch_decoder_destroy(d);
    free_list(&l);
    return 0;
}

TEST(garbage_is_eformat)
{
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    uint8_t junk[4096];
    uint64_t s = 99;
    for (int t = 0; t < 50; t++) {
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)(unit_rand(&s) >> 56);
        if (ch_sniff(junk, sizeof junk) != CH_IMG_UNKNOWN)
            continue;
        chute_error err = {0};
        int rc = decode_status(d, junk, (size_t)(t * 80 + 1), &err);
        CHECK(rc == CHUTE_EFORMAT, "garbage: %s (%s)", chute_status_name(rc), err.message);
    }
    chute_error err = {0};
    CHECK(decode_status(d, (const uint8_t *)"", 0, &err) == CHUTE_EFORMAT, "empty input");
    CHECK(strstr(err.message, "empty") != NULL, "message for empty input: '%s'", err.message);
    CHECK(decode_status(d, (const uint8_t *)"BM\x36\x00\x00\x00\x00\x00", 8, &err) == CHUTE_EFORMAT,
          "BMP accepted");
    CHECK(strstr(err.message, "BMP") != NULL, "message for BMP: '%s'", err.message);
    /* Valid magic followed by garbage: recognised format, damaged data. */
    for (int t = 0; t < 50; t++) {
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)(unit_rand(&s) >> 56);
        junk[0] = 0xFF;
        junk[1] = 0xD8;
        junk[2] = 0xFF;
        int rc = decode_status(d, junk, sizeof junk, &err);
        CHECK(rc == CHUTE_ECORRUPT || rc == CHUTE_ELIMIT || rc == CHUTE_EFORMAT,
              "JPEG magic + garbage: %s", chute_status_name(rc));
        memcpy(junk, "\x89PNG\r\n\x1a\n", 8);
        rc = decode_status(d, junk, sizeof junk, &err);
        CHECK(rc == CHUTE_ECORRUPT || rc == CHUTE_EUNSUPPORTED, "PNG magic + garbage: %s",
              chute_status_name(rc));
    }
    ch_decoder_destroy(d);
    return 0;
}

TEST(decoder_reusable_after_errors)
{
    file_list l;
    NEED_PHOTOS(&l, "jpg|jpeg|png", 30);
    ch_decoder *d = NULL, *fresh = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK && ch_decoder_create(&fresh) == CHUTE_OK, "create");
    for (size_t f = 0; f < l.n; f++) {
        size_t len;
        uint8_t *data = unit_read_file(l.paths[f], &len);
        CHECK(data != NULL, "read");
        chute_error err = {0};
        /* Leave d in every awkward state: failed mid-data, begun but never
         * finished, failed header. */
        decode_status(d, data, len / 2, &err);
        ch_image_info info;
        ch_decoder_begin(d, data, len, 64ull << 20, &info, &err);
        decode_status(d, data, 5, &err);
        uint32_t W1, H1, W2, H2;
        uint8_t *a = decode_full(d, data, len, 1, &W1, &H1, &info, &err);
        uint8_t *b = decode_full(fresh, data, len, 1, &W2, &H2, &info, &err);
        CHECK(a && b && W1 == W2 && H1 == H2 && memcmp(a, b, (size_t)W1 * H1 * 3) == 0,
              "%s: reused decoder gives a different image", l.paths[f]);
        free(a);
        free(b);
        free(data);
    }
    /* begin() then destroy without finish must not leak or crash. */
    size_t len = 0;
    uint8_t *data = unit_read_file(l.paths[0], &len);
    CHECK(data != NULL, "read");
    ch_image_info info;
    chute_error err = {0};
    CHECK(ch_decoder_begin(d, data, len, 64ull << 20, &info, &err) == CHUTE_OK, "begin");
    ch_decoder_destroy(d);
    ch_decoder_destroy(fresh);
    ch_decoder_destroy(NULL);
    free(data);
    free_list(&l);
    return 0;
}

TEST(header_mutations_never_crash)
{
    file_list l;
    NEED_PHOTOS(&l, "jpg|jpeg|png", 60);
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    uint64_t s = 4242;
    int n = 0;
    /* A few files of each kind; mutate bytes in the first 1 KiB (headers,
     * tables) and decode at a random scale and window. */
    for (size_t f = 0; f < l.n; f += 7) {
        size_t len;
        uint8_t *orig = unit_read_file(l.paths[f], &len);
        uint8_t *data = malloc(len);
        CHECK(orig && data, "read");
        for (int it = 0; it < 150; it++) {
            memcpy(data, orig, len);
            int muts = 1 + (int)(unit_rand(&s) % 4);
            for (int m = 0; m < muts; m++) {
                size_t at = (size_t)(unit_rand(&s) % (len < 1024 ? len : 1024));
                data[at] = (uint8_t)(unit_rand(&s) >> 56);
            }
            ch_image_info info;
            chute_error err = {0};
            int rc = ch_decoder_begin(d, data, len, 16ull << 20, &info, &err);
            if (rc != CHUTE_OK)
                continue;
            uint32_t denom = 1u << (unit_rand(&s) % 4), W, H;
            ch_decoder_scaled_size(d, denom, &W, &H);
            if (W == 0 || H == 0) {
                ch_decoder_abort(d);
                continue;
            }
            uint32_t x = (uint32_t)(unit_rand(&s) % W), y = (uint32_t)(unit_rand(&s) % H);
            ch_buf buf = {0};
            ch_image im;
            rc = ch_decoder_finish(d, denom, x, y, W - x, H - y, &buf, &im, &err);
            if (rc == CHUTE_OK && (im.h < H - y || im.w < W - x)) {
                ch_buf_free(&buf);
                CHECK(0, "%s: mutated decode returned a short window", l.paths[f]);
            }
            ch_buf_free(&buf);
            n++;
        }
        free(orig);
        free(data);
    }
    ch_decoder_destroy(d);
    free_list(&l);
    fprintf(stderr, "%d mutated images got past the header\n", n);
    return 0;
}

UNIT_MAIN

/* The registry names every decoder once, with its public format id. */
TEST(registry_lists_decoders)
{
    char names[CH_DECODER_NAMES_MAX];
    CHECK(strcmp(ch_decoder_names(names, sizeof names), "JPEG, PNG, BMP or CHRAW") == 0,
          "names: %s", names);
    static const char *const want[] = {NULL, "JPEG", "PNG", "BMP", "CHRAW", NULL};
    for (int id = 0; id <= 5; id++)
        CHECK((want[id] == NULL && ch_format_name(id) == NULL) ||
                  (want[id] && ch_format_name(id) && strcmp(ch_format_name(id), want[id]) == 0),
              "format %d: %s", id, ch_format_name(id) ? ch_format_name(id) : "(null)");
    return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* A 54-byte BMP header (40-byte info header) + `extra` bytes of data. */
static size_t bmp_header(uint8_t *b, int32_t w, int32_t h, uint16_t bpp, uint32_t comp,
                         size_t extra)
{
    memset(b, 0, 54 + extra);
    b[0] = 'B';
    b[1] = 'M';
    put32(b + 2, (uint32_t)(54 + extra));
    put32(b + 10, 54);
    put32(b + 14, 40);
    put32(b + 18, (uint32_t)w);
    put32(b + 22, (uint32_t)h);
    b[26] = 1;
    b[28] = (uint8_t)bpp;
    put32(b + 30, comp);
    return 54 + extra;
}

/* Sizes from a BMP header: limits before allocation, 64-bit row
 * arithmetic (no wrap past a small buffer), offsets inside the file,
 * compressed variants refused as unsupported. */
TEST(bmp_hostile_headers)
{
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    static uint8_t b[54 + 4096];
    static const struct {
        int32_t w, h;
        uint16_t bpp;
        uint32_t comp;
        uint64_t max_pixels;
        int want;
        const char *says;
    } t[] = {
        {0x7FFFFFFF, INT32_MIN, 32, 0, UINT64_MAX, CHUTE_ECORRUPT, "do not fit"},
        {0x7FFFFFFF, 0x7FFFFFFF, 24, 0, UINT64_MAX, CHUTE_ECORRUPT, "do not fit"},
        {0x7FFFFFFF, INT32_MIN, 1, 0, 64ull << 20, CHUTE_ELIMIT, "exceeds the limit"},
        {16, 16, 24, 0, 255, CHUTE_ELIMIT, "exceeds the limit"},
        {16, 16, 24, 1, UINT64_MAX, CHUTE_EUNSUPPORTED, "RLE8"},
        {16, 16, 4, 2, UINT64_MAX, CHUTE_EUNSUPPORTED, "RLE4"},
        {16, 16, 24, 4, UINT64_MAX, CHUTE_EUNSUPPORTED, "JPEG-in-BMP"},
        {16, 16, 24, 5, UINT64_MAX, CHUTE_EUNSUPPORTED, "PNG-in-BMP"},
        {16, 16, 16, 0, UINT64_MAX, CHUTE_EUNSUPPORTED, "16-bit"},
        {16, 16, 24, 3, UINT64_MAX, CHUTE_EUNSUPPORTED, "BI_BITFIELDS at 24"},
        {16, 16, 7, 0, UINT64_MAX, CHUTE_ECORRUPT, "7 bits per pixel"},
        {-16, 16, 24, 0, UINT64_MAX, CHUTE_ECORRUPT, "bad image size"},
        {16, 0, 24, 0, UINT64_MAX, CHUTE_ECORRUPT, "bad image size"},
        {16, -16, 24, 0, UINT64_MAX, CHUTE_OK, ""},
        {16, 16, 8, 0, UINT64_MAX, CHUTE_ECORRUPT, "pixel data offset"}, /* palette at 54 */
        {8, 8, 32, 3, UINT64_MAX, CHUTE_EUNSUPPORTED, "bit masks"},      /* masks all zero */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t len = bmp_header(b, t[i].w, t[i].h, t[i].bpp, t[i].comp, 4096);
        chute_error err = {0};
        ch_image_info info;
        int rc = ch_decoder_begin(d, b, len, t[i].max_pixels, &info, &err);
        CHECK(rc == t[i].want && strstr(err.message, t[i].says) &&
                  (rc == CHUTE_OK || strstr(err.message, "BMP")),
              "case %zu: %s (%s), want %s saying '%s'", i, chute_status_name(rc), err.message,
              chute_status_name(t[i].want), t[i].says);
        if (rc == CHUTE_OK) {
            ch_buf buf = {0};
            ch_image im;
            CHECK(info.kind == CH_IMG_BMP && info.caps == CH_DEC_CROP_WINDOW, "info");
            CHECK(ch_decoder_finish(d, 1, 15, 15, 2, 1, &buf, &im, &err) == CHUTE_EINVAL,
                  "window outside accepted");
            ch_buf_free(&buf);
        }
        ch_decoder_abort(d);
    }
    /* Palette past the end of a short file; offset inside the headers. */
    size_t len = bmp_header(b, 4, 4, 8, 0, 0);
    put32(b + 46, 256);
    chute_error err = {0};
    ch_image_info info;
    CHECK(ch_decoder_begin(d, b, len + 100, UINT64_MAX, &info, &err) == CHUTE_ECORRUPT &&
              strstr(err.message, "palette"),
          "palette past end: %s", err.message);
    len = bmp_header(b, 4, 4, 24, 0, 64);
    put32(b + 10, 20);
    CHECK(ch_decoder_begin(d, b, len, UINT64_MAX, &info, &err) == CHUTE_ECORRUPT &&
              strstr(err.message, "offset 20"),
          "offset in headers: %s", err.message);
    ch_decoder_destroy(d);
    return 0;
}

/* CHRAW: an RGB window is a view into the record; sizes that overflow
 * 32 bits are refused by the length check, not wrapped. */
TEST(raw_window_and_sizes)
{
    ch_decoder *d = NULL;
    CHECK(ch_decoder_create(&d) == CHUTE_OK, "create");
    uint8_t rec[16 + 5 * 4 * 3];
    memcpy(rec, "CHRAW\1\3\0", 8);
    put32(rec + 8, 5);
    put32(rec + 12, 4);
    for (size_t i = 16; i < sizeof rec; i++)
        rec[i] = (uint8_t)i;
    chute_error err = {0};
    ch_image_info info;
    ch_buf buf = {0};
    ch_image im;
    CHECK(ch_decoder_begin(d, rec, sizeof rec, 20, &info, &err) == CHUTE_OK &&
              info.kind == CH_IMG_RAW && info.width == 5 && info.height == 4,
          "begin: %s", err.message);
    CHECK(ch_decoder_finish(d, 4, 1, 2, 3, 2, &buf, &im, &err) == CHUTE_OK, "finish: %s",
          err.message);
    CHECK(im.pixels == rec + 16 + (2 * 5 + 1) * 3 && im.stride == 15 && im.x == 1 && im.y == 2 &&
              im.scale_denom == 1 && buf.data == NULL,
          "zero-copy view");
    CHECK(ch_decoder_begin(d, rec, sizeof rec, 19, &info, &err) == CHUTE_ELIMIT, "limit");
    put32(rec + 8, 0x80000000u);
    put32(rec + 12, 0x80000000u); /* w*h*3 = 3 * 2^62 wraps in 64 bits without care */
    CHECK(ch_decoder_begin(d, rec, sizeof rec, UINT64_MAX, &info, &err) == CHUTE_ECORRUPT,
          "overflowing size: %s", err.message);
    ch_buf_free(&buf);
    ch_decoder_destroy(d);
    return 0;
}
