/*
 * tarstream.c — tar headers read front to back from input that cannot
 * seek (a pipe, stdin): the streaming sources of issue #13.
 *
 * Why a second walker: fmt_tar_index_build (tar.c) indexes a file whose
 * size is known and which it may re-read at any offset; a stream has
 * neither, and its members must be consumed as they pass.  The header
 * rules are the same and the pieces that embody them (number fields,
 * checksum, pax records) are tar.c's own, exported for this file, so the
 * two walkers cannot drift apart on what a valid header is.
 *
 * The walk: read a 512-byte block; zero block = end; else check the
 * checksum before trusting anything in it; extended headers ('L', 'x',
 * 'g', 'K') are read whole (bounded by max_name / max_pax) and qualify
 * the next member (the first extended header's name wins, as in tar.c);
 * directories, links and devices are skipped; a regular member is
 * returned with its size, and its data is the caller's to read or skip.
 *
 * Must never: trust a size before the checksum passed, allocate in
 * proportion to a stated size beyond the limits (member data is never
 * buffered here: the caller reads it into its own bounded buffer or
 * discards it through a fixed scratch block), or stop without having
 * consumed at least one block per step.
 */
#include "parse.h"

#include <string.h>

#define BLK 512u

void fmt_tar_stream_free(fmt_tar_stream *s)
{
    if (!s)
        return;
    free(s->nbuf);
    free(s->ext);
    s->nbuf = NULL;
    s->ext = NULL;
    s->nbuf_cap = s->ext_cap = 0;
}

/* Exactly n bytes, or *got < n at the end of input. */
static int rd(fmt_tar_stream *s, uint8_t *buf, size_t n, size_t *got, chute_error *err)
{
    size_t have = 0;
    while (have < n) {
        size_t g = 0;
        int rc = s->read(s->ctx, buf + have, n - have, &g, err);
        if (rc != CHUTE_OK)
            return rc;
        if (g == 0)
            break;
        have += g;
    }
    s->pos += have;
    *got = have;
    return CHUTE_OK;
}

static int skip_bytes(fmt_tar_stream *s, uint64_t n, const char *what, chute_error *err)
{
    uint8_t scratch[4096];
    while (n) {
        size_t want = n < sizeof scratch ? (size_t)n : sizeof scratch, got;
        uint64_t at = s->pos;
        int rc = rd(s, scratch, want, &got, err);
        if (rc != CHUTE_OK)
            return rc;
        if (got < want)
            return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: the stream ends inside %s (truncated)",
                          s->name, (unsigned long long)(at + got), what);
        n -= want;
    }
    return CHUTE_OK;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static int set_name(fmt_tar_stream *s, const uint8_t *p, size_t n, chute_error *err)
{
    if (n + 1 > s->nbuf_cap) {
        char *b = realloc(s->nbuf, n + 1);
        if (!b)
            return ch_err(err, CHUTE_ENOMEM, "%s: no memory for a member name", s->name);
        s->nbuf = b;
        s->nbuf_cap = n + 1;
    }
    if (n)
        memcpy(s->nbuf, p, n);
    s->nbuf[n] = '\0';
    return CHUTE_OK;
}

int fmt_tar_stream_data(fmt_tar_stream *s, void *dst, uint64_t n, chute_error *err)
{
    if (n > s->data_left)
        return ch_err(err, CHUTE_EINVAL, "%s: asked for %llu bytes, the member has %llu left",
                      s->name, (unsigned long long)n, (unsigned long long)s->data_left);
    int rc;
    if (dst) {
        size_t got;
        uint64_t at = s->pos;
        if ((rc = rd(s, dst, (size_t)n, &got, err)) != CHUTE_OK)
            return rc;
        if (got < n)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: the stream ends inside a member's data (truncated)",
                          s->name, (unsigned long long)(at + got));
    } else if ((rc = skip_bytes(s, n, "a member's data", err)) != CHUTE_OK) {
        return rc;
    }
    s->data_left -= n;
    if (s->data_left == 0 && s->pad_left) {
        /* The last member's padding may be cut off by the end: tarfile
         * accepts that, and so does tar.c. */
        uint8_t pad[BLK];
        size_t got;
        if ((rc = rd(s, pad, (size_t)s->pad_left, &got, err)) != CHUTE_OK)
            return rc;
        if (got < s->pad_left)
            s->ended = 1;
        s->pad_left = 0;
    }
    return CHUTE_OK;
}

int fmt_tar_stream_next(fmt_tar_stream *s, const char **name, size_t *name_len, uint64_t *size,
                        uint64_t *hdr_off, chute_error *err)
{
    const uint64_t max_member = s->max_member ? s->max_member : 64ull << 30;
    const uint32_t max_name = s->max_name ? s->max_name : 64u << 10;
    const uint32_t max_pax = s->max_pax ? s->max_pax : 1u << 20;
    int rc;
    if (s->data_left && (rc = fmt_tar_stream_data(s, NULL, s->data_left, err)) != CHUTE_OK)
        return rc;
    if (s->ended)
        return FMT_TAR_STREAM_END;
    int in_ext = 0, have_name = 0, have_size = 0;
    uint64_t pax_size = 0, member_start = s->pos;
    for (;;) {
        uint8_t h[BLK];
        size_t got;
        uint64_t pos = s->pos;
        if ((rc = rd(s, h, BLK, &got, err)) != CHUTE_OK)
            return rc;
        if (got == 0) {
            if (in_ext)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@%llu: the stream ends after an extended header, before its "
                              "member",
                              s->name, (unsigned long long)member_start);
            s->ended = 1;
            return FMT_TAR_STREAM_END;
        }
        if (got < BLK)
            return ch_err(err, pos == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                          "%s@%llu: %zu bytes left, too few for a tar header (truncated)",
                          s->name, (unsigned long long)pos, got);
        if (all_zero(h, BLK)) {
            if (in_ext)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@%llu: end-of-archive block right after an extended header",
                              s->name, (unsigned long long)pos);
            if (s->ignore_zeros)
                continue;
            s->ended = 1;
            return FMT_TAR_STREAM_END;
        }
        uint64_t stored, sz;
        int nr = fmt_tar_hdr_number(h + 148, 8, &stored);
        if (nr != 0 || !fmt_tar_hdr_checksum_ok(h, stored))
            return ch_err(err, pos == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                          pos == 0 ? "%s@%llu: not a tar stream (header checksum does not match)"
                                   : "%s@%llu: not a tar header (checksum mismatch: damaged, or "
                                     "not tar data)",
                          s->name, (unsigned long long)pos);
        nr = fmt_tar_hdr_number(h + 124, 12, &sz);
        if (nr != 0)
            return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: tar header size field is %s", s->name,
                          (unsigned long long)pos,
                          nr == -1 ? "not an octal number" : "negative or too large");
        char type = (char)h[156];
        if (!in_ext)
            member_start = pos;
        if (type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g') {
            int gnu = type == 'L' || type == 'K';
            uint64_t lim = gnu ? max_name : max_pax;
            if (sz > lim)
                return ch_err(err, CHUTE_ELIMIT,
                              "%s@%llu: %s of %llu bytes is over the %llu-byte limit", s->name,
                              (unsigned long long)pos, gnu ? "GNU long name" : "pax header",
                              (unsigned long long)sz, (unsigned long long)lim);
            if (sz + 1 > s->ext_cap) {
                uint8_t *b = realloc(s->ext, (size_t)sz + 1);
                if (!b)
                    return ch_err(err, CHUTE_ENOMEM, "%s: no memory for an extended header",
                                  s->name);
                s->ext = b;
                s->ext_cap = (size_t)sz + 1;
            }
            uint64_t at = s->pos;
            if ((rc = rd(s, s->ext, (size_t)sz, &got, err)) != CHUTE_OK)
                return rc;
            if (got < sz)
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@%llu: extended header of %llu bytes runs past the end "
                              "(truncated)",
                              s->name, (unsigned long long)pos, (unsigned long long)sz);
            (void)at;
            uint64_t pad = (BLK - sz % BLK) % BLK;
            if ((rc = skip_bytes(s, pad, "a header's padding", err)) != CHUTE_OK)
                return rc;
            if (type == 'L') {
                const uint8_t *nul = sz ? memchr(s->ext, 0, (size_t)sz) : NULL;
                size_t n = nul ? (size_t)(nul - s->ext) : (size_t)sz;
                if (!have_name) {
                    if ((rc = set_name(s, s->ext, n, err)) != CHUTE_OK)
                        return rc;
                    have_name = 1;
                }
            } else if (type != 'K') {
                const uint8_t *path;
                size_t path_len;
                rc = fmt_tar_pax_parse(s->ext, (size_t)sz, type == 'g', &pax_size, &have_size,
                                       &path, &path_len, s->name, pos, err);
                if (rc != CHUTE_OK)
                    return rc;
                if (path && !have_name) {
                    if ((rc = set_name(s, path, path_len, err)) != CHUTE_OK)
                        return rc;
                    have_name = 1;
                }
            }
            in_ext = type != 'g';
            continue;
        }
        if (type == 'S')
            return ch_err(err, CHUTE_EUNSUPPORTED, "%s@%llu: GNU sparse member: not supported",
                          s->name, (unsigned long long)pos);
        if (have_size)
            sz = pax_size;
        if (!have_name) {
            uint8_t nb[256 + 2];
            size_t nl = 0, pl = 0, len = 0;
            while (nl < 100 && h[nl])
                nl++;
            if (memcmp(h + 257, "ustar\0", 6) == 0)
                while (pl < 155 && h[345 + pl])
                    pl++;
            if (pl) {
                memcpy(nb, h + 345, pl);
                nb[pl] = '/';
                len = pl + 1;
            }
            memcpy(nb + len, h, nl);
            len += nl;
            if ((rc = set_name(s, nb, len, err)) != CHUTE_OK)
                return rc;
        }
        size_t nlen = strlen(s->nbuf);
        if (nlen > max_name)
            return ch_err(err, CHUTE_ELIMIT, "%s@%llu: member name of %zu bytes over the limit",
                          s->name, (unsigned long long)member_start, nlen);
        int regular = type == '0' || type == '7' ||
                      (type == '\0' && !(nlen && s->nbuf[nlen - 1] == '/'));
        int has_data = regular ? 1 : type == '\0' ? 0 : memchr("123456", type, 6) == NULL;
        uint64_t data_len = has_data ? sz : 0;
        if (data_len > max_member)
            return ch_err(err, CHUTE_ELIMIT,
                          "%s@%llu: member '%.200s' of %llu bytes is over the %llu-byte limit",
                          s->name, (unsigned long long)member_start, s->nbuf,
                          (unsigned long long)data_len, (unsigned long long)max_member);
        s->data_left = data_len;
        s->pad_left = (BLK - data_len % BLK) % BLK;
        if (!regular) {
            if (data_len && (rc = fmt_tar_stream_data(s, NULL, data_len, err)) != CHUTE_OK)
                return rc;
            if (s->ended)
                return FMT_TAR_STREAM_END;
            in_ext = have_name = have_size = 0;
            continue;
        }
        *name = s->nbuf;
        *name_len = nlen;
        *size = data_len;
        *hdr_off = member_start;
        if (data_len == 0) {
            s->pad_left = 0;
        }
        return CHUTE_OK;
    }
}
