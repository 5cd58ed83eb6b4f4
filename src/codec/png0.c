/*
 * png0.c — PNG level 0 (stored deflate blocks) straight to RGB8; png0.h
 * says what it accepts and why anything else goes to libspng.
 *
 * Shape: one pass over the chunks.  Each chunk's CRC is checked before its
 * bytes are used; IDAT payloads feed a small state machine over the zlib
 * stream (2-byte header, then per stored block a header byte + LEN/NLEN,
 * LEN payload bytes, finally the 4-byte adler32), whose headers may be
 * split across IDAT chunks at any byte.  Payload bytes go to the row
 * unfilterer, which undoes PNG's five filters piecewise (a piece may end
 * mid-row), keeping the previous row: for RGB the rows are unfiltered in
 * place in the output, for the other colour types into two scratch rows
 * and converted to RGB as each row completes.  Every length read from the
 * file is checked against what is left of the file and of the image.
 */
#include "png0.h"
#include "../common/checksum.h"

#include <string.h>
#include <zlib.h>
#ifdef CHUTE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

static uint32_t png0_adler(uint32_t a, const uint8_t *p, size_t n)
{
#ifdef CHUTE_HAVE_LIBDEFLATE
    return libdeflate_adler32(a, p, n);
#else
    while (n) {
        uInt m = n > (1u << 30) ? (1u << 30) : (uInt)n;
        a = (uint32_t)adler32(a, p, m);
        p += m;
        n -= m;
    }
    return a;
#endif
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

size_t ch_png0_scratch(uint32_t w)
{
    return 2 * (size_t)w * 4 + 16;
}

/* ---- rows ----------------------------------------------------------------- */

typedef struct rows {
    uint32_t w, h, ch;
    size_t rb;        /* bytes of one unfiltered row: w * ch */
    uint8_t *out;     /* RGB8, w * h * 3 */
    uint8_t *sa, *sb; /* scratch rows (ch != 3) */
    uint8_t *cur;     /* the row being unfiltered */
    const uint8_t *prev; /* the row above (NULL on row 0) */
    uint32_t y;
    uint32_t need;    /* rows [need, h) are checked (filter type, length) but not unfiltered */
    size_t pos;       /* bytes of cur done; SIZE_MAX: the filter byte is next */
    int ft;
} rows;

static void row_begin(rows *r)
{
    if (r->ch == 3) {
        r->cur = r->out + (size_t)r->y * r->rb;
        r->prev = r->y ? r->cur - r->rb : NULL;
    } else {
        r->prev = r->y ? r->cur : NULL;
        r->cur = (r->y & 1) ? r->sb : r->sa;
    }
    r->pos = SIZE_MAX;
}

static void row_end(rows *r)
{
    if (r->ch != 3 && r->y < r->need) {
        uint8_t *o = r->out + (size_t)r->y * r->w * 3;
        const uint8_t *s = r->cur;
        uint32_t w = r->w;
        if (r->ch == 1) {
            for (uint32_t x = 0; x < w; x++, o += 3)
                o[0] = o[1] = o[2] = s[x];
        } else if (r->ch == 2) {
            for (uint32_t x = 0; x < w; x++, o += 3)
                o[0] = o[1] = o[2] = s[2 * x];
        } else {
            for (uint32_t x = 0; x < w; x++, o += 3, s += 4) {
                o[0] = s[0];
                o[1] = s[1];
                o[2] = s[2];
            }
        }
    }
    r->y++;
    if (r->y < r->h)
        row_begin(r);
}

/* Selects, not branches: which neighbour wins is data, unpredictable
 * (a branchy version ran 1.6x slower on photos). */
static inline int paeth_one(int a, int b, int cc)
{
    int p = b - cc, q = a - cc;
    int pa = p < 0 ? -p : p, pb = q < 0 ? -q : q, pc = p + q < 0 ? -(p + q) : p + q;
    int pred = pb < pa ? b : a;
    pa = pb < pa ? pb : pa;
    return pc < pa ? cc : pred;
}

/* Unfilter bytes [o, o + m) of the current row from in.  The first bpp
 * bytes of a row have no left neighbour (and row 0 no upper one: the
 * spec's zeros); past them the loops are branch-free, the Paeth
 * predictor in libpng's form (pa = |b - c|, pb = |a - c|, pc = |a + b -
 * 2c|, ties to a, then b), which is the spec's choice. */
static void unfilter(rows *r, size_t o, const uint8_t *in, size_t m)
{
    uint8_t *restrict c = r->cur;
    const uint8_t *restrict up = r->prev;
    const size_t bpp = r->ch, e = o + m;
    size_t i = o;
    switch (r->ft) {
    case 0:
        memcpy(c + o, in, m);
        return;
    case 1:
        for (; i < e && i < bpp; i++)
            c[i] = in[i - o];
        if (bpp == 3) { /* the left pixel in registers, as for Paeth below */
            for (; i < e && i % 3; i++)
                c[i] = (uint8_t)(in[i - o] + c[i - 3]);
            if (i + 3 <= e) {
                uint8_t a0 = c[i - 3], a1 = c[i - 2], a2 = c[i - 1];
                for (; i + 3 <= e; i += 3) {
                    a0 = (uint8_t)(a0 + in[i - o]);
                    a1 = (uint8_t)(a1 + in[i + 1 - o]);
                    a2 = (uint8_t)(a2 + in[i + 2 - o]);
                    c[i] = a0;
                    c[i + 1] = a1;
                    c[i + 2] = a2;
                }
            }
        }
        for (; i < e; i++)
            c[i] = (uint8_t)(in[i - o] + c[i - bpp]);
        return;
    case 2:
        if (!up)
            memcpy(c + o, in, m);
        else
            for (; i < e; i++)
                c[i] = (uint8_t)(in[i - o] + up[i]);
        return;
    case 3:
        if (!up) {
            for (; i < e && i < bpp; i++)
                c[i] = in[i - o];
            for (; i < e; i++)
                c[i] = (uint8_t)(in[i - o] + (c[i - bpp] >> 1));
            return;
        }
        for (; i < e && i < bpp; i++)
            c[i] = (uint8_t)(in[i - o] + (up[i] >> 1));
        for (; i < e; i++)
            c[i] = (uint8_t)(in[i - o] + ((c[i - bpp] + up[i]) >> 1));
        return;
    default:
        if (!up) { /* b = c = 0: Paeth picks a, i.e. Sub */
            for (; i < e && i < bpp; i++)
                c[i] = in[i - o];
            for (; i < e; i++)
                c[i] = (uint8_t)(in[i - o] + c[i - bpp]);
            return;
        }
        for (; i < e && i < bpp; i++)
            c[i] = (uint8_t)(in[i - o] + up[i]); /* a = c = 0: Paeth picks b */
        if (bpp == 3 && i < e) {
            /* Whole pixels with the left neighbours in registers: three
             * independent chains, no store-to-load round trip per byte. */
            for (; i < e && i % 3; i++)
                c[i] = (uint8_t)(in[i - o] + paeth_one(c[i - 3], up[i], up[i - 3]));
            if (i + 3 <= e) {
                int a0 = c[i - 3], a1 = c[i - 2], a2 = c[i - 1];
                int c0 = up[i - 3], c1 = up[i - 2], c2 = up[i - 1];
                for (; i + 3 <= e; i += 3) {
                    int b0 = up[i], b1 = up[i + 1], b2 = up[i + 2];
                    a0 = (uint8_t)(in[i - o] + paeth_one(a0, b0, c0));
                    a1 = (uint8_t)(in[i + 1 - o] + paeth_one(a1, b1, c1));
                    a2 = (uint8_t)(in[i + 2 - o] + paeth_one(a2, b2, c2));
                    c[i] = (uint8_t)a0;
                    c[i + 1] = (uint8_t)a1;
                    c[i + 2] = (uint8_t)a2;
                    c0 = b0;
                    c1 = b1;
                    c2 = b2;
                }
            }
        }
        for (; i < e; i++)
            c[i] = (uint8_t)(in[i - o] + paeth_one(c[i - bpp], up[i], up[i - bpp]));
        return;
    }
}

/* Feed n filtered bytes; 0 when they are more than the image or a filter
 * type is not 0..4. */
static int rows_feed(rows *r, const uint8_t *p, size_t n)
{
    while (n) {
        if (r->y >= r->h)
            return 0;
        if (r->pos == SIZE_MAX) {
            if (*p > 4)
                return 0;
            r->ft = *p++;
            n--;
            r->pos = 0;
            continue;
        }
        size_t m = r->rb - r->pos;
        if (m > n)
            m = n;
        if (r->y < r->need)
            unfilter(r, r->pos, p, m);
        r->pos += m;
        p += m;
        n -= m;
        if (r->pos == r->rb)
            row_end(r);
    }
    return 1;
}

/* ---- the zlib stream of stored blocks ------------------------------------- */

enum { Z_HDR, Z_BLOCK_HDR, Z_PAYLOAD, Z_TRAILER, Z_DONE };

typedef struct zs {
    int state;
    uint8_t hdr[5];
    size_t have;      /* header bytes gathered */
    size_t left;      /* payload bytes left in this block */
    int final;
    uint32_t adler;
    unsigned flags;
} zs;

/* Feed IDAT bytes; 0 to decline. */
static int zs_feed(zs *z, rows *r, const uint8_t *p, size_t n)
{
    while (n) {
        switch (z->state) {
        case Z_HDR:
        case Z_BLOCK_HDR:
        case Z_TRAILER: {
            size_t need = z->state == Z_HDR ? 2 : z->state == Z_BLOCK_HDR ? 5 : 4;
            size_t m = need - z->have;
            if (m > n)
                m = n;
            memcpy(z->hdr + z->have, p, m);
            z->have += m;
            p += m;
            n -= m;
            if (z->have < need)
                break;
            z->have = 0;
            const uint8_t *h = z->hdr;
            if (z->state == Z_HDR) {
                /* CM 8, window <= 32 KiB, no preset dictionary, check bits. */
                if ((h[0] & 15) != 8 || (h[0] >> 4) > 7 || (h[1] & 0x20) ||
                    ((unsigned)h[0] << 8 | h[1]) % 31)
                    return 0;
                z->state = Z_BLOCK_HDR;
            } else if (z->state == Z_BLOCK_HDR) {
                if ((h[0] >> 1 & 3) != 0) /* not a stored block */
                    return 0;
                unsigned len = h[1] | (unsigned)h[2] << 8, nlen = h[3] | (unsigned)h[4] << 8;
                if ((len ^ 0xffffu) != nlen)
                    return 0;
                z->final = h[0] & 1;
                z->left = len;
                z->state = len ? Z_PAYLOAD : z->final ? Z_TRAILER : Z_BLOCK_HDR;
            } else {
                if (!(z->flags & CH_PNG0_NO_ADLER) && be32(h) != z->adler)
                    return 0;
                z->state = Z_DONE;
            }
            break;
        }
        case Z_PAYLOAD: {
            size_t m = z->left < n ? z->left : n;
            if (!rows_feed(r, p, m))
                return 0;
            if (!(z->flags & CH_PNG0_NO_ADLER))
                z->adler = png0_adler(z->adler, p, m);
            z->left -= m;
            p += m;
            n -= m;
            if (!z->left)
                z->state = z->final ? Z_TRAILER : Z_BLOCK_HDR;
            break;
        }
        default: /* bytes after the stream */
            return 0;
        }
    }
    return 1;
}

/* ---- chunks --------------------------------------------------------------- */

int ch_png0_decode(const uint8_t *p, size_t len, uint32_t w, uint32_t h, uint32_t rows_needed,
                   uint8_t *out, uint8_t *scratch, unsigned flags)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 8 + 25 || memcmp(p, sig, 8) != 0 || w == 0 || h == 0)
        return 0;
    /* IHDR: exactly 13 bytes, first, matching the caller's size. */
    const uint8_t *c = p + 8;
    if (be32(c) != 13 || memcmp(c + 4, "IHDR", 4) != 0 || be32(c + 8) != w ||
        be32(c + 12) != h || ch_crc32_update(0, c + 4, 17) != be32(c + 21))
        return 0;
    uint8_t depth = c[16], ctype = c[17];
    if (depth != 8 || c[18] != 0 || c[19] != 0 || c[20] != 0) /* compression, filter, interlace */
        return 0;
    uint32_t ch = ctype == 0 ? 1 : ctype == 2 ? 3 : ctype == 4 ? 2 : ctype == 6 ? 4 : 0;
    if (!ch || w > (UINT32_MAX - 16) / 8)
        return 0;
    rows r = {.w = w, .h = h, .ch = ch, .rb = (size_t)w * ch, .out = out};
    r.need = rows_needed && rows_needed < h ? rows_needed : h;
    r.sa = scratch;
    r.sb = scratch + (size_t)w * 4;
    r.cur = r.sa;
    row_begin(&r);
    zs z = {.state = Z_HDR, .adler = 1, .flags = flags};
    size_t at = 8 + 25;
    int seen_idat = 0;
    for (;;) {
        if (len - at < 12)
            return 0; /* no IEND */
        uint32_t n = be32(p + at);
        const uint8_t *type = p + at + 4;
        if (n > 0x7fffffffu || n > len - at - 12)
            return 0;
        if (ch_crc32_update(0, type, 4 + (size_t)n) != be32(type + 4 + n))
            return 0;
        if (memcmp(type, "IDAT", 4) == 0) {
            if (z.state == Z_DONE || !zs_feed(&z, &r, type + 4, n))
                return 0;
            seen_idat = 1;
        } else if (memcmp(type, "IEND", 4) == 0) {
            return n == 0 && seen_idat && z.state == Z_DONE && r.y == h;
        } else {
            return 0; /* any other chunk: libspng's business */
        }
        at += 12 + (size_t)n;
    }
}
