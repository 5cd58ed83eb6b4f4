/*
 * tar.c — an index of the members of a tar archive (WebDataset shards).
 *
 * Tar has no index: every member is a 512-byte header followed by its
 * data rounded up to 512, so finding member i means walking the headers
 * once.  Over the years tar grew three ways to say more than a 100-byte
 * name and an 11-digit octal size fit: the ustar prefix field, GNU's 'L'
 * (long name) and 'K' (long link) pseudo-members, and POSIX pax 'x'
 * extended headers (plus 'g' global ones).  Writers in the wild use all
 * of them — Python's tarfile (and so webdataset's TarWriter) writes GNU
 * or pax depending on its format argument, GNU tar writes 'L' — so the
 * walker reads all of them and keeps the rules of Python's tarfile where
 * tools differ, because WebDataset reads shards through it:
 *
 *   - checksum: the unsigned or the signed byte sum, checksum field as
 *     spaces; numbers: octal (NUL/space padded) or base-256 (0x80/0xff);
 *   - the first extended header before a member wins its name (tarfile's
 *     nesting makes the outermost one win);
 *   - one zero block ends the archive (tarfile stops there; GNU tar
 *     warns "A lone zero block" if a second does not follow); EOF exactly
 *     at a header boundary also ends it.  What follows is not read.
 *
 * Where tarfile is lax we are stricter, because the index must be right:
 * a number field with anything but octal digits and padding, a pax size
 * that is not a decimal number, a pax record whose length does not land
 * on its newline — all are CHUTE_ECORRUPT, where tarfile would guess.
 * The ustar prefix is honoured only with the POSIX magic "ustar\0": in
 * GNU-format headers that area holds atime/ctime.  Global pax headers are
 * validated but their keys ignored (a global path or size would give
 * every member the same one; tarfile applies a global size inconsistently).
 * GNU sparse members are refused: their data is not laid out as stored.
 *
 * Must never: read past the archive, trust a size before the checksum
 * has passed, allocate in proportion to a stated size beyond the
 * configured limits, or loop without advancing (every step moves forward
 * by at least one block).
 */
#include "parse.h"

#include <string.h>

#define BLK 512u

typedef struct tar_limits {
    uint64_t max_member, max_members;
    uint32_t max_name, max_pax;
} tar_limits;

void fmt_tar_index_free(fmt_tar_index *ix)
{
    if (!ix)
        return;
    free(ix->m);
    free(ix->names);
    memset(ix, 0, sizeof *ix);
}

/* Round up to a whole block; 0 on overflow (callers check sizes first). */
static uint64_t blocks_of(uint64_t n)
{
    return n > UINT64_MAX - (BLK - 1) ? 0 : (n + BLK - 1) / BLK * BLK;
}

/* A header number field, as tarfile's nti() reads it.  0 ok; -1 invalid;
 * -2 negative or over 64 bits. */
static int tar_number(const uint8_t *f, size_t n, uint64_t *out)
{
    if (f[0] == 0x80 || f[0] == 0xff) {
        if (f[0] == 0xff)
            return -2; /* negative: no size or checksum may be */
        uint64_t v = 0;
        for (size_t i = 1; i < n; i++) {
            if (v >> 56)
                return -2;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    size_t end = 0;
    while (end < n && f[end] != 0)
        end++;
    size_t i = 0;
    while (i < end && (f[i] == ' ' || (f[i] >= '\t' && f[i] <= '\r')))
        i++;
    while (end > i && (f[end - 1] == ' ' || (f[end - 1] >= '\t' && f[end - 1] <= '\r')))
        end--;
    uint64_t v = 0;
    for (; i < end; i++) {
        if (f[i] < '0' || f[i] > '7')
            return -1;
        if (v >> 61)
            return -2;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    *out = v;
    return 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static int checksum_ok(const uint8_t *h, uint64_t stored)
{
    uint64_t u = 8 * ' ';
    int64_t s = 8 * ' ';
    for (size_t i = 0; i < BLK; i++) {
        if (i >= 148 && i < 156)
            continue;
        u += h[i];
        s += (int8_t)h[i];
    }
    return stored == u || (int64_t)stored == s;
}

static int add_member(fmt_tar_index *ix, const tar_limits *l, const char *rname,
                      uint64_t hdr_off, uint64_t data_off, uint64_t size, const char *name,
                      size_t name_len, chute_error *err)
{
    if (ix->count >= l->max_members)
        return ch_err(err, CHUTE_ELIMIT, "%s@%llu: more than %llu members (the limit)", rname,
                      (unsigned long long)hdr_off, (unsigned long long)l->max_members);
    if (ix->count == ix->cap) {
        uint64_t nc = ix->cap ? ix->cap * 2 : 64;
        fmt_tar_member *m = realloc(ix->m, (size_t)nc * sizeof *m);
        if (!m)
            return ch_err(err, CHUTE_ENOMEM, "%s: no memory for the member index", rname);
        ix->m = m;
        ix->cap = nc;
    }
    if (name_len + 1 > (size_t)UINT32_MAX - ix->names_len)
        return ch_err(err, CHUTE_ELIMIT, "%s@%llu: member names exceed 4 GiB in total", rname,
                      (unsigned long long)hdr_off);
    if (ix->names_len + name_len + 1 > ix->names_cap) {
        size_t nc = ix->names_cap ? ix->names_cap : 4096;
        while (nc < ix->names_len + name_len + 1)
            nc *= 2;
        char *n = realloc(ix->names, nc);
        if (!n)
            return ch_err(err, CHUTE_ENOMEM, "%s: no memory for member names", rname);
        ix->names = n;
        ix->names_cap = nc;
    }
    fmt_tar_member *m = &ix->m[ix->count++];
    m->header_offset = hdr_off;
    m->data_offset = data_off;
    m->size = size;
    m->name_off = (uint32_t)ix->names_len;
    m->name_len = (uint32_t)name_len;
    m->type = '0';
    memcpy(ix->names + ix->names_len, name, name_len);
    ix->names[ix->names_len + name_len] = '\0';
    ix->names_len += name_len + 1;
    return CHUTE_OK;
}

/* Pending name from an extended header, owned by the walk. */
typedef struct pend {
    char *name;
    size_t len, cap;
    int have_name;
    uint64_t size;
    int have_size;
} pend;

static int pend_set_name(pend *p, const uint8_t *s, size_t n, const char *rname, uint64_t off,
                         chute_error *err)
{
    if (p->have_name)
        return CHUTE_OK; /* the first (outermost) extended header wins */
    if (n + 1 > p->cap) {
        char *b = realloc(p->name, n + 1);
        if (!b)
            return ch_err(err, CHUTE_ENOMEM, "%s@%llu: no memory for a long name", rname,
                          (unsigned long long)off);
        p->name = b;
        p->cap = n + 1;
    }
    if (n)
        memcpy(p->name, s, n);
    p->name[n] = '\0';
    p->len = n;
    p->have_name = 1;
    return CHUTE_OK;
}

/* Parse pax records "LEN KEY=VALUE\n" in d[0, n).  Per-file ('x') keys
 * path and size go to *p; global ('g') ones are only validated. */
static int parse_pax(const uint8_t *d, size_t n, int global, pend *p, const uint8_t **path,
                     size_t *path_len, const char *rname, uint64_t off, chute_error *err)
{
    *path = NULL;
    *path_len = 0;
    size_t i = 0;
    while (i < n && d[i] != 0) {
        size_t start = i;
        uint64_t len = 0;
        while (i < n && d[i] >= '0' && d[i] <= '9') {
            if (len > (uint64_t)n)
                break;
            len = len * 10 + (uint64_t)(d[i] - '0');
            i++;
        }
        if (i == start || i >= n || d[i] != ' ' || len > n - start || len < 5 ||
            d[start + len - 1] != '\n')
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: malformed pax record at byte %zu of the extended header",
                          rname, (unsigned long long)off, start);
        size_t kstart = i + 1, rend = start + (size_t)len - 1; /* rend: the '\n' */
        const uint8_t *eq = memchr(d + kstart, '=', rend - kstart);
        if (!eq || eq == d + kstart)
            return ch_err(err, CHUTE_ECORRUPT,
                          "%s@%llu: pax record at byte %zu has no key=value", rname,
                          (unsigned long long)off, start);
        size_t klen = (size_t)(eq - (d + kstart));
        const uint8_t *v = eq + 1;
        size_t vlen = (size_t)(d + rend - v);
        const char *k = (const char *)d + kstart;
        if (klen >= 10 && memcmp(k, "GNU.sparse", 10) == 0)
            return ch_err(err, CHUTE_EUNSUPPORTED,
                          "%s@%llu: GNU sparse file (pax %.*s): not supported", rname,
                          (unsigned long long)off, (int)klen, k);
        if (!global && klen == 4 && memcmp(k, "path", 4) == 0) {
            if (memchr(v, 0, vlen))
                return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: pax path contains a NUL byte",
                              rname, (unsigned long long)off);
            /* A later record in the same header overrides an earlier one. */
            *path = v;
            *path_len = vlen;
        } else if (!global && klen == 4 && memcmp(k, "size", 4) == 0) {
            uint64_t s = 0;
            if (vlen == 0 || vlen > 20)
                return ch_err(err, CHUTE_ECORRUPT, "%s@%llu: pax size '%.*s' is not a number",
                              rname, (unsigned long long)off, (int)CH_MIN(vlen, 32), v);
            for (size_t j = 0; j < vlen; j++) {
                if (v[j] < '0' || v[j] > '9' || s > (UINT64_MAX - 9) / 10)
                    return ch_err(err, CHUTE_ECORRUPT,
                                  "%s@%llu: pax size '%.*s' is not a number", rname,
                                  (unsigned long long)off, (int)CH_MIN(vlen, 32), v);
                s = s * 10 + (uint64_t)(v[j] - '0');
            }
            if (!p->have_size) { /* the first extended header wins */
                p->size = s;
                p->have_size = 1;
            }
        }
        i = start + (size_t)len;
    }
    return CHUTE_OK;
}

int fmt_tar_index_build(fmt_reader *r, const fmt_tar_opts *opts, fmt_tar_index *ix,
                        chute_error *err)
{
    tar_limits l;
    l.max_member = opts && opts->max_member ? opts->max_member : 64ull << 30;
    l.max_members = opts && opts->max_members ? opts->max_members : 1ull << 31;
    l.max_name = opts && opts->max_name ? opts->max_name : 64u << 10;
    l.max_pax = opts && opts->max_pax ? opts->max_pax : 1u << 20;
    /* Extended headers are read whole through the window. */
    if (!r->mem) {
        if (l.max_name > r->win_cap)
            l.max_name = (uint32_t)r->win_cap;
        if (l.max_pax > r->win_cap)
            l.max_pax = (uint32_t)r->win_cap;
    }
    memset(ix, 0, sizeof *ix);
    pend p;
    memset(&p, 0, sizeof p);
    uint64_t pos = 0, member_start = 0;
    int in_ext = 0, rc = CHUTE_OK;
    const char *rn = r->name;
    for (;;) {
        if (pos >= r->size) {
            if (in_ext) {
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s@%llu: the archive ends after an extended header, before its "
                            "member",
                            rn, (unsigned long long)member_start);
                break;
            }
            ix->end = FMT_TAR_END_EOF;
            ix->end_offset = r->size;
            break;
        }
        if (r->size - pos < BLK) {
            rc = ch_err(err, pos == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                        "%s@%llu: %llu bytes left, too few for a tar header (truncated)", rn,
                        (unsigned long long)pos, (unsigned long long)(r->size - pos));
            break;
        }
        const uint8_t *h;
        if ((rc = fmt_reader_get(r, pos, BLK, &h, err)) != CHUTE_OK)
            break;
        if (all_zero(h, BLK)) {
            if (in_ext) {
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s@%llu: end-of-archive block right after an extended header",
                            rn, (unsigned long long)pos);
                break;
            }
            ix->end_offset = pos;
            ix->end = FMT_TAR_END_ONE_ZERO;
            if (r->size - pos >= 2 * BLK) {
                const uint8_t *h2;
                if ((rc = fmt_reader_get(r, pos + BLK, BLK, &h2, err)) != CHUTE_OK)
                    break;
                if (all_zero(h2, BLK))
                    ix->end = FMT_TAR_END_TWO_ZERO;
            }
            break;
        }
        uint64_t stored, size;
        int nr = tar_number(h + 148, 8, &stored);
        if (nr != 0 || !checksum_ok(h, stored)) {
            rc = ch_err(err, pos == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                        pos == 0 ? "%s@%llu: not a tar archive (header checksum does not match)"
                                 : "%s@%llu: tar header checksum mismatch (damaged header)",
                        rn, (unsigned long long)pos);
            break;
        }
        nr = tar_number(h + 124, 12, &size);
        if (nr != 0) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s@%llu: tar header size field is %s", rn,
                        (unsigned long long)pos,
                        nr == -1 ? "not an octal number" : "negative or too large");
            break;
        }
        char type = (char)h[156];
        uint64_t data_off = pos + BLK;
        uint64_t avail = r->size - data_off;
        if (!in_ext)
            member_start = pos;

        if (type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g') {
            int gnu = type == 'L' || type == 'K';
            uint64_t lim = gnu ? l.max_name : l.max_pax;
            if (size > lim) {
                rc = ch_err(err, CHUTE_ELIMIT,
                            "%s@%llu: %s of %llu bytes is over the %llu-byte limit", rn,
                            (unsigned long long)pos, gnu ? "GNU long name" : "pax header",
                            (unsigned long long)size, (unsigned long long)lim);
                break;
            }
            if (size > avail) {
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s@%llu: extended header of %llu bytes runs past the end "
                            "(truncated)",
                            rn, (unsigned long long)pos, (unsigned long long)size);
                break;
            }
            const uint8_t *d = NULL;
            if (size && (rc = fmt_reader_get(r, data_off, (size_t)size, &d, err)) != CHUTE_OK)
                break;
            if (type == 'L') {
                const uint8_t *nul = size ? memchr(d, 0, (size_t)size) : NULL;
                size_t n = nul ? (size_t)(nul - d) : (size_t)size;
                if ((rc = pend_set_name(&p, d, n, rn, pos, err)) != CHUTE_OK)
                    break;
            } else if (type != 'K') {
                const uint8_t *path;
                size_t path_len;
                if ((rc = parse_pax(d, (size_t)size, type == 'g', &p, &path, &path_len, rn, pos,
                                    err)) != CHUTE_OK)
                    break;
                if (path && (rc = pend_set_name(&p, path, path_len, rn, pos, err)) != CHUTE_OK)
                    break;
            }
            pos = data_off + blocks_of(size);
            /* A global header stands alone; the others qualify the next member. */
            in_ext = type != 'g';
            continue;
        }
        if (type == 'S') {
            rc = ch_err(err, CHUTE_EUNSUPPORTED,
                        "%s@%llu: GNU sparse member: not supported", rn,
                        (unsigned long long)pos);
            break;
        }
        if (p.have_size)
            size = p.size;
        /* Name: extended header's, else ustar prefix + name. */
        char nbuf[256 + 2];
        const char *name;
        size_t name_len;
        if (p.have_name) {
            name = p.name;
            name_len = p.len;
        } else {
            size_t nl = 0, pl = 0;
            while (nl < 100 && h[nl])
                nl++;
            int posix = memcmp(h + 257, "ustar\0", 6) == 0;
            if (posix)
                while (pl < 155 && h[345 + pl])
                    pl++;
            name_len = 0;
            if (pl) {
                memcpy(nbuf, h + 345, pl);
                nbuf[pl] = '/';
                name_len = pl + 1;
            }
            memcpy(nbuf + name_len, h, nl);
            name_len += nl;
            nbuf[name_len] = '\0';
            name = nbuf;
        }
        if (name_len > l.max_name) {
            rc = ch_err(err, CHUTE_ELIMIT, "%s@%llu: member name of %zu bytes over the limit",
                        rn, (unsigned long long)member_start, name_len);
            break;
        }
        /* Which types carry data blocks: as tarfile, regular files and any
         * type it does not know; links, devices, directories, fifos none. */
        int regular = type == '0' || type == '7' ||
                      (type == '\0' && !(name_len && name[name_len - 1] == '/'));
        int has_data;
        if (regular)
            has_data = 1;
        else if (type == '\0')
            has_data = 0; /* an old-style directory: "name/" */
        else
            has_data = memchr("123456", type, 6) == NULL;
        uint64_t data_len = has_data ? size : 0;
        if (data_len > l.max_member) {
            rc = ch_err(err, CHUTE_ELIMIT,
                        "%s@%llu: member '%.200s' of %llu bytes is over the %llu-byte limit", rn,
                        (unsigned long long)member_start, name, (unsigned long long)data_len,
                        (unsigned long long)l.max_member);
            break;
        }
        if (data_len > avail) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s@%llu: member '%.200s' claims %llu bytes, %llu left (truncated)", rn,
                        (unsigned long long)member_start, name, (unsigned long long)data_len,
                        (unsigned long long)avail);
            break;
        }
        if (regular) {
            rc = add_member(ix, &l, rn, member_start, data_off, size, name, name_len, err);
            if (rc)
                break;
        } else {
            ix->skipped++;
        }
        /* data_len <= avail < 2^64 - 512, so rounding cannot overflow; the
         * padding of the last member may be cut off by EOF (then: EOF end). */
        uint64_t padded = blocks_of(data_len);
        pos = padded > avail ? r->size : data_off + padded;
        in_ext = 0;
        p.have_name = 0;
        p.have_size = 0;
    }
    free(p.name);
    return rc;
}

/* ---- pieces shared with the streaming walker (tarstream.c) ------------ */

int fmt_tar_hdr_number(const uint8_t *f, size_t n, uint64_t *out) { return tar_number(f, n, out); }

int fmt_tar_hdr_checksum_ok(const uint8_t *h, uint64_t stored) { return checksum_ok(h, stored); }

int fmt_tar_pax_parse(const uint8_t *d, size_t n, int global, uint64_t *size, int *have_size,
                      const uint8_t **path, size_t *path_len, const char *rname, uint64_t off,
                      chute_error *err)
{
    pend p;
    memset(&p, 0, sizeof p);
    p.size = *size;
    p.have_size = *have_size;
    int rc = parse_pax(d, n, global, &p, path, path_len, rname, off, err);
    *size = p.size;
    *have_size = p.have_size;
    return rc;
}
