/*
 * example.c — a reader for tf.train.Example, the protobuf message nearly
 * every TFRecord dataset stores:
 *
 *   Example  { Features features = 1; }
 *   Features { map<string, Feature> feature = 1; }   (entries: key=1, value=2)
 *   Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
 *                      Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }
 *   FloatList { repeated float value = 1 [packed]; }
 *   Int64List { repeated int64 value = 1 [packed]; }
 *
 * Why not libprotobuf: a generated parser copies every string and builds
 * a map per record; a loader wants two or three keys (image bytes, label)
 * per record and must not allocate per sample.  This walks the wire
 * format once, in place, and hands back views into the record buffer.
 *
 * The message structure is fixed and four levels deep, so the walk is
 * four plain functions, not a recursive descent: hostile nesting cannot
 * exhaust the stack.  Unknown fields are skipped by wire type, as
 * protobuf requires (forward compatibility), except groups (wire types
 * 3/4): deprecated, never written for these messages, and skipping one
 * correctly needs the recursion avoided above, so they are refused.
 *
 * Stricter than protobuf on one point, on purpose: a *known* field with
 * the wrong wire type (protobuf would quietly treat it as unknown) is an
 * error, because for these messages it only ever means damage.  The two
 * legal encodings of repeated scalars, packed (wire type 2) and unpacked,
 * are both accepted, even mixed in one list.
 *
 * Every length is checked against the bytes left in its enclosing
 * message before use; varints longer than 10 bytes or overflowing 64
 * bits, tags with field number 0 or above 2^29-1, are errors.
 */
#include "parse.h"

#include <string.h>

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

typedef struct pb_ctx {
    const uint8_t *buf;     /* the whole Example, for offsets */
    const char *name;
    uint64_t base;
    chute_error *err;
} pb_ctx;

static uint64_t at(const pb_ctx *c, const uint8_t *p)
{
    return c->base + (uint64_t)(p - c->buf);
}

/* Decode a varint in [*p, end); advance *p.  0 ok, -1 runs off the end,
 * -2 longer than 10 bytes or over 64 bits. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    const uint8_t *q = *p;
    uint64_t v = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (q == end)
            return -1;
        uint8_t b = *q++;
        if (i == 9 && b > 1)
            return -2;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *p = q;
            *out = v;
            return 0;
        }
    }
    return -2;
}

static int varint_err(const pb_ctx *c, const uint8_t *p, int r, const char *what)
{
    return ch_err(c->err, CHUTE_ECORRUPT, "%s@%llu: %s: %s", c->name,
                  (unsigned long long)at(c, p), what,
                  r == -1 ? "varint runs past the end of its message"
                          : "varint longer than 10 bytes or over 64 bits");
}

typedef struct pb_field {
    uint32_t num;
    int wt;
    const uint8_t *start;   /* of the tag */
    const uint8_t *body;    /* WT_LEN: the payload */
    size_t len;             /* WT_LEN: its length */
    uint64_t value;         /* WT_VARINT */
} pb_field;

/* Read one field at *p (< end) and advance past it.  Groups and invalid
 * wire types are refused here, so every caller skips unknowns correctly. */
static int next_field(const pb_ctx *c, const uint8_t **p, const uint8_t *end, const char *msg,
                      pb_field *f)
{
    const uint8_t *q = *p;
    uint64_t tag;
    f->start = q;
    int r = varint(&q, end, &tag);
    if (r)
        return varint_err(c, f->start, r, msg);
    uint64_t num = tag >> 3;
    f->wt = (int)(tag & 7);
    if (num == 0 || num > 0x1fffffff)
        return ch_err(c->err, CHUTE_ECORRUPT, "%s@%llu: %s: invalid field number %llu", c->name,
                      (unsigned long long)at(c, f->start), msg, (unsigned long long)num);
    f->num = (uint32_t)num;
    switch (f->wt) {
    case WT_VARINT:
        r = varint(&q, end, &f->value);
        if (r)
            return varint_err(c, q, r, msg);
        break;
    case WT_I64:
    case WT_I32: {
        size_t w = f->wt == WT_I64 ? 8 : 4;
        if ((size_t)(end - q) < w)
            return ch_err(c->err, CHUTE_ECORRUPT,
                          "%s@%llu: %s: field %u: %zu-byte value runs past the end", c->name,
                          (unsigned long long)at(c, f->start), msg, f->num, w);
        f->body = q;
        q += w;
        break;
    }
    case WT_LEN: {
        uint64_t len;
        const uint8_t *lp = q;
        r = varint(&q, end, &len);
        if (r)
            return varint_err(c, lp, r, msg);
        if (len > (uint64_t)(end - q))
            return ch_err(c->err, CHUTE_ECORRUPT,
                          "%s@%llu: %s: field %u claims %llu bytes, %zu left in the message",
                          c->name, (unsigned long long)at(c, f->start), msg, f->num,
                          (unsigned long long)len, (size_t)(end - q));
        f->body = q;
        f->len = (size_t)len;
        q += len;
        break;
    }
    case WT_SGROUP:
    case WT_EGROUP:
        return ch_err(c->err, CHUTE_EUNSUPPORTED,
                      "%s@%llu: %s: field %u is a group (wire type %d), not supported", c->name,
                      (unsigned long long)at(c, f->start), msg, f->num, f->wt);
    default:
        return ch_err(c->err, CHUTE_ECORRUPT, "%s@%llu: %s: field %u has invalid wire type %d",
                      c->name, (unsigned long long)at(c, f->start), msg, f->num, f->wt);
    }
    *p = q;
    return CHUTE_OK;
}

static int wrong_wt(const pb_ctx *c, const pb_field *f, const char *what, int want)
{
    return ch_err(c->err, CHUTE_ECORRUPT, "%s@%llu: %s has wire type %d, %d expected", c->name,
                  (unsigned long long)at(c, f->start), what, f->wt, want);
}

/* Validate a *List body of the given kind and count its values. */
static int parse_list(const pb_ctx *c, fmt_pb_kind kind, const uint8_t *p, size_t n,
                      uint64_t *count)
{
    static const char *const names[] = {"", "", "BytesList", "FloatList", "Int64List"};
    const char *msg = names[kind];
    const uint8_t *end = p + n;
    uint64_t cnt = 0;
    while (p < end) {
        pb_field f;
        int rc = next_field(c, &p, end, msg, &f);
        if (rc)
            return rc;
        if (f.num != 1)
            continue; /* unknown field, skipped */
        if (kind == FMT_PB_BYTES) {
            if (f.wt != WT_LEN)
                return wrong_wt(c, &f, "BytesList.value", WT_LEN);
            cnt++;
        } else if (kind == FMT_PB_FLOAT) {
            if (f.wt == WT_I32)
                cnt++;
            else if (f.wt == WT_LEN) {
                if (f.len % 4)
                    return ch_err(c->err, CHUTE_ECORRUPT,
                                  "%s@%llu: packed FloatList of %zu bytes, not a multiple of 4",
                                  c->name, (unsigned long long)at(c, f.start), f.len);
                cnt += f.len / 4;
            } else
                return wrong_wt(c, &f, "FloatList.value", WT_I32);
        } else {
            if (f.wt == WT_VARINT)
                cnt++;
            else if (f.wt == WT_LEN) {
                const uint8_t *q = f.body, *qe = f.body + f.len;
                while (q < qe) {
                    uint64_t v;
                    const uint8_t *vp = q;
                    int r = varint(&q, qe, &v);
                    if (r)
                        return varint_err(c, vp, r, "packed Int64List");
                    cnt++;
                }
            } else
                return wrong_wt(c, &f, "Int64List.value", WT_VARINT);
        }
    }
    *count = cnt;
    return CHUTE_OK;
}

/* Validate a Feature; describe its list in *out. */
static int parse_feature(const pb_ctx *c, const uint8_t *p, size_t n, fmt_pb_feature *out)
{
    const uint8_t *end = p + n;
    memset(out, 0, sizeof *out);
    out->kind = FMT_PB_NONE;
    while (p < end) {
        pb_field f;
        int rc = next_field(c, &p, end, "Feature", &f);
        if (rc)
            return rc;
        if (f.num < 1 || f.num > 3)
            continue;
        fmt_pb_kind kind = f.num == 1 ? FMT_PB_BYTES : f.num == 2 ? FMT_PB_FLOAT : FMT_PB_INT64;
        if (f.wt != WT_LEN)
            return wrong_wt(c, &f, "Feature's list", WT_LEN);
        if (kind == out->kind)
            return ch_err(c->err, CHUTE_EUNSUPPORTED,
                          "%s@%llu: Feature has its list split over two messages (legal "
                          "protobuf, never written by TensorFlow; not supported)",
                          c->name, (unsigned long long)at(c, f.start));
        uint64_t count = 0;
        if ((rc = parse_list(c, kind, f.body, f.len, &count)) != CHUTE_OK)
            return rc;
        /* A later oneof member replaces an earlier one. */
        out->kind = kind;
        out->count = count;
        out->list = f.body;
        out->list_len = f.len;
        out->list_offset = at(c, f.body);
    }
    return CHUTE_OK;
}

static int parse_entry(const pb_ctx *c, const uint8_t *p, size_t n, const char *const *keys,
                       size_t nkeys, fmt_pb_feature *out)
{
    const uint8_t *end = p + n, *key = (const uint8_t *)"", *val = NULL, *entry = p;
    size_t key_len = 0, val_len = 0;
    while (p < end) {
        pb_field f;
        int rc = next_field(c, &p, end, "Features map entry", &f);
        if (rc)
            return rc;
        if (f.num == 1) {
            if (f.wt != WT_LEN)
                return wrong_wt(c, &f, "map key", WT_LEN);
            key = f.body; /* a repeated scalar field: the last one wins */
            key_len = f.len;
        } else if (f.num == 2) {
            if (f.wt != WT_LEN)
                return wrong_wt(c, &f, "map value", WT_LEN);
            if (val)
                return ch_err(c->err, CHUTE_EUNSUPPORTED,
                              "%s@%llu: map entry with two values (a protobuf merge; not "
                              "supported)",
                              c->name, (unsigned long long)at(c, f.start));
            val = f.body;
            val_len = f.len;
        }
    }
    fmt_pb_feature feat;
    /* A missing value is an empty Feature (protobuf's default). */
    int rc = parse_feature(c, val ? val : entry, val ? val_len : 0, &feat);
    if (rc)
        return rc;
    for (size_t i = 0; i < nkeys; i++)
        if (strlen(keys[i]) == key_len && memcmp(keys[i], key, key_len) == 0)
            out[i] = feat; /* a repeated map key: the last one wins */
    return CHUTE_OK;
}

int fmt_pb_example_find(const uint8_t *buf, size_t len, const char *const *keys, size_t nkeys,
                        fmt_pb_feature *out, const char *name, uint64_t base,
                        chute_error *err)
{
    pb_ctx c = {buf, name ? name : "(example)", base, err};
    for (size_t i = 0; i < nkeys; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].kind = FMT_PB_MISSING;
    }
    const uint8_t *p = buf, *end = buf + len;
    while (p < end) {
        pb_field f;
        int rc = next_field(&c, &p, end, "Example", &f);
        if (rc)
            return rc;
        if (f.num != 1)
            continue;
        if (f.wt != WT_LEN)
            return wrong_wt(&c, &f, "Example.features", WT_LEN);
        /* Features may repeat: protobuf merges the maps, later keys win. */
        const uint8_t *q = f.body, *qe = f.body + f.len;
        while (q < qe) {
            pb_field e;
            if ((rc = next_field(&c, &q, qe, "Features", &e)) != CHUTE_OK)
                return rc;
            if (e.num != 1)
                continue;
            if (e.wt != WT_LEN)
                return wrong_wt(&c, &e, "Features.feature", WT_LEN);
            if ((rc = parse_entry(&c, e.body, e.len, keys, nkeys, out)) != CHUTE_OK)
                return rc;
        }
    }
    return CHUTE_OK;
}

/* The decoders walk a list parse_list has already validated, so they
 * cannot fail; each still bounds every step by the list's end. */

int fmt_pb_bytes_next(const fmt_pb_feature *f, size_t *pos, const uint8_t **out_p,
                      size_t *out_n)
{
    if (f->kind != FMT_PB_BYTES)
        return 0;
    const uint8_t *p = f->list + *pos, *end = f->list + f->list_len;
    pb_ctx c = {f->list, "", 0, NULL};
    while (p < end) {
        pb_field fl;
        if (next_field(&c, &p, end, "", &fl) != CHUTE_OK)
            return 0;
        if (fl.num == 1 && fl.wt == WT_LEN) {
            *out_p = fl.body;
            *out_n = fl.len;
            *pos = (size_t)(p - f->list);
            return 1;
        }
    }
    *pos = f->list_len;
    return 0;
}

size_t fmt_pb_int64_decode(const fmt_pb_feature *f, int64_t *dst, size_t cap)
{
    if (f->kind != FMT_PB_INT64)
        return 0;
    const uint8_t *p = f->list, *end = f->list + f->list_len;
    pb_ctx c = {f->list, "", 0, NULL};
    size_t k = 0;
    while (p < end && k < cap) {
        pb_field fl;
        if (next_field(&c, &p, end, "", &fl) != CHUTE_OK)
            break;
        if (fl.num != 1)
            continue;
        if (fl.wt == WT_VARINT) {
            dst[k++] = (int64_t)fl.value;
        } else if (fl.wt == WT_LEN) {
            const uint8_t *q = fl.body, *qe = fl.body + fl.len;
            uint64_t v;
            while (q < qe && k < cap && varint(&q, qe, &v) == 0)
                dst[k++] = (int64_t)v;
        }
    }
    return k;
}

static float get_f32(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

size_t fmt_pb_float_decode(const fmt_pb_feature *f, float *dst, size_t cap)
{
    if (f->kind != FMT_PB_FLOAT)
        return 0;
    const uint8_t *p = f->list, *end = f->list + f->list_len;
    pb_ctx c = {f->list, "", 0, NULL};
    size_t k = 0;
    while (p < end && k < cap) {
        pb_field fl;
        if (next_field(&c, &p, end, "", &fl) != CHUTE_OK)
            break;
        if (fl.num != 1)
            continue;
        if (fl.wt == WT_I32) {
            dst[k++] = get_f32(fl.body);
        } else if (fl.wt == WT_LEN) {
            for (size_t i = 0; i + 4 <= fl.len && k < cap; i += 4)
                dst[k++] = get_f32(fl.body + i);
        }
    }
    return k;
}
