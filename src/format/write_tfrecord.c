/*
 * write_tfrecord.c — the "tfrecord" writer: tf.train.Example records as
 * TensorFlow's imagenet_to_gcs.py (TPU tools) writes them.
 *
 * Why it is shaped so:
 *   - Same features, same names, so any reader of that script's output
 *     reads ours: image/encoded (the bytes unchanged), image/class/label,
 *     image/class/synset (the class name), image/format ("JPEG", "PNG",
 *     "BMP"), image/filename, image/height, image/width, image/channels,
 *     image/colorspace.  Labels are chute's 0-based ones plus
 *     label_offset: the script writes 1-based ImageNet labels, so
 *     label_offset = 1 reproduces it (read back with label_offset = -1).
 *   - The Example is encoded here by hand (varints, length-delimited
 *     fields, the int64 list packed as TensorFlow packs it) into one
 *     reusable buffer with its framing: u64 length, masked CRC32C of the
 *     length, data, masked CRC32C of the data (common/checksum.c).  No allocation
 *     per sample once the buffer has grown to the largest record.
 *   - Files are named PREFIX-00000-of-0000N (the script's "train-..."),
 *     N known only at the end: files are written under temporary names and
 *     named in finish.  Beside each goes DALI's tfrecord2idx index
 *     ("FILE.idx": one "offset size" line per record, size = the framed
 *     record), so DALI and chute's reader skip the header scan.
 */
#define _GNU_SOURCE
#include "writer.h"
#include "../codec/codec.h"
#include "parse.h"

#include <stdio.h>
#include <string.h>

typedef struct tfw {
    ch_writer_cfg cfg;
    ch_outset out;
    ch_buf rec;               /* one framed record */
    char *idx;                /* the open file's index text */
    size_t idx_len, idx_cap;
    uint32_t nfiles;          /* data files ended (each is outset files 2k, 2k+1) */
    int open;                 /* a data file is open */
} tfw;

/* ---- protobuf encoding ------------------------------------------------ */

static size_t vlen(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *vput(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

typedef struct feat {
    const char *key;
    int is_int;
    int64_t v;
    const void *p;
    size_t n;
} feat;

/* Length of the Feature message. */
static size_t feat_len(const feat *f)
{
    size_t inner = f->is_int ? vlen((uint64_t)f->v) : f->n; /* packed values / bytes */
    size_t list = 1 + vlen(inner) + inner;                   /* Int64List / BytesList */
    return 1 + vlen(list) + list;
}

static size_t entry_len(const feat *f)
{
    size_t kl = strlen(f->key), fl = feat_len(f);
    return 1 + vlen(kl) + kl + 1 + vlen(fl) + fl;
}

static uint8_t *feat_put(uint8_t *p, const feat *f)
{
    size_t kl = strlen(f->key), fl = feat_len(f), el = entry_len(f);
    p = vput(p, 0x0A); /* Features.feature (map entry), field 1 */
    p = vput(p, el);
    p = vput(p, 0x0A); /* key */
    p = vput(p, kl);
    memcpy(p, f->key, kl);
    p += kl;
    p = vput(p, 0x12); /* value: Feature */
    p = vput(p, fl);
    size_t inner = f->is_int ? vlen((uint64_t)f->v) : f->n;
    size_t list = 1 + vlen(inner) + inner;
    p = vput(p, f->is_int ? 0x1A : 0x0A); /* int64_list = 3, bytes_list = 1 */
    p = vput(p, list);
    p = vput(p, 0x0A); /* value, field 1 (packed for int64) */
    p = vput(p, inner);
    if (f->is_int) {
        p = vput(p, (uint64_t)f->v);
    } else {
        memcpy(p, f->p, f->n);
        p += f->n;
    }
    return p;
}

static void le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The last path component of a sample's origin: "root/c/x.jpg" -> x.jpg,
 * "shard@off (c/x.jpg)" -> x.jpg.  Best effort: a name for humans. */
static void origin_name(const char *origin, char *out, size_t n)
{
    const char *s = origin ? origin : "";
    size_t len = strlen(s);
    const char *open = len && s[len - 1] == ')' ? strrchr(s, '(') : NULL;
    if (open) {
        s = open + 1;
        len = strlen(s) - 1;
    }
    const char *slash = memrchr(s, '/', len);
    if (slash) {
        len -= (size_t)(slash + 1 - s);
        s = slash + 1;
    }
    snprintf(out, n, "%.*s", (int)len, s);
}

/* ---- the writer ------------------------------------------------------- */

/* "<anything>-DIGITS-of-DIGITS", optionally ".idx": what this writer
 * names its files, and what the tfrecord reader lists. */
static int tfw_owns(const char *name)
{
    size_t n = strlen(name);
    if (n > 4 && strcmp(name + n - 4, ".idx") == 0)
        n -= 4;
    const char *e = name + n, *p = e;
    while (p > name && p[-1] >= '0' && p[-1] <= '9')
        p--;
    if (p == e || p - name < 4 || memcmp(p - 4, "-of-", 4) != 0)
        return 0;
    const char *q = p - 4, *d = q;
    while (d > name && d[-1] >= '0' && d[-1] <= '9')
        d--;
    return d != q && d > name && d[-1] == '-' && d - 1 > name;
}

static int tfw_open(const ch_writer_cfg *cfg, void **out, chute_error *err)
{
    tfw *w = calloc(1, sizeof *w);
    if (!w)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    w->cfg = *cfg;
    ch_outset_init(&w->out, cfg->dir);
    *out = w;
    return CHUTE_OK;
}

/* End the open data file and write its index file. */
static int tfw_end_file(tfw *w, chute_error *err)
{
    int rc = ch_outset_end(&w->out, err);
    if (rc == CHUTE_OK)
        rc = ch_outset_begin(&w->out, err);
    if (rc == CHUTE_OK)
        rc = ch_outset_write(&w->out, w->idx, w->idx_len, err);
    if (rc == CHUTE_OK)
        rc = ch_outset_end(&w->out, err);
    w->idx_len = 0;
    w->open = 0;
    w->nfiles++;
    return rc;
}

static const char *format_name(int kind)
{
    return kind == CH_IMG_JPEG ? "JPEG" : kind == CH_IMG_PNG ? "PNG" : kind == CH_IMG_BMP ? "BMP"
                                                                                         : "RAW";
}

static const char *colorspace(uint32_t channels)
{
    return channels == 1 ? "Grayscale" : channels == 4 ? "RGBA" : "RGB";
}

static int tfw_add(void *vw, const ch_writer_sample *s, chute_error *err)
{
    tfw *w = vw;
    int rc;
    if (!w->open) {
        if ((rc = ch_outset_begin(&w->out, err)) != CHUTE_OK)
            return rc;
        w->open = 1;
    }
    char fname[256];
    origin_name(s->origin, fname, sizeof fname);
    const char *fmt = format_name(s->kind), *cs = colorspace(s->channels);
    const char *syn = s->class_name ? s->class_name : "";
    feat f[] = {
        {"image/height", 1, s->height, NULL, 0},
        {"image/width", 1, s->width, NULL, 0},
        {"image/colorspace", 0, 0, cs, strlen(cs)},
        {"image/channels", 1, s->channels, NULL, 0},
        {"image/class/label", 1, (int64_t)s->label + w->cfg.label_offset, NULL, 0},
        {"image/class/synset", 0, 0, syn, strlen(syn)},
        {"image/format", 0, 0, fmt, strlen(fmt)},
        {"image/filename", 0, 0, fname, strlen(fname)},
        {"image/encoded", 0, 0, s->data, s->len},
    };
    const size_t nf = sizeof f / sizeof *f;
    size_t feats = 0;
    for (size_t k = 0; k < nf; k++) {
        size_t el = entry_len(&f[k]);
        feats += 1 + vlen(el) + el;
    }
    size_t data = 1 + vlen(feats) + feats; /* Example.features, field 1 */
    size_t total = 12 + data + 4;
    if ((rc = ch_buf_reserve(&w->rec, total)) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for a %zu-byte record", total);
    uint8_t *b = w->rec.data;
    le64(b, data);
    le32(b + 8, ch_crc32c_mask(ch_crc32c(0, b, 8)));
    uint8_t *p = b + 12;
    p = vput(p, 0x0A);
    p = vput(p, feats);
    for (size_t k = 0; k < nf; k++)
        p = feat_put(p, &f[k]);
    if ((size_t)(p - (b + 12)) != data)
        return ch_err(err, CHUTE_EINVAL, "internal: Example size %zu, computed %zu",
                      (size_t)(p - (b + 12)), data);
    le32(p, ch_crc32c_mask(ch_crc32c(0, b + 12, data)));

    /* The DALI index line: offset of the framing, framed size. */
    char line[64];
    int ll = snprintf(line, sizeof line, "%llu %zu\n", (unsigned long long)w->out.bytes, total);
    if (w->idx_len + (size_t)ll > w->idx_cap) {
        size_t c = w->idx_cap ? w->idx_cap * 2 : 4096;
        char *t = realloc(w->idx, c);
        if (!t)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        w->idx = t;
        w->idx_cap = c;
    }
    memcpy(w->idx + w->idx_len, line, (size_t)ll);
    w->idx_len += (size_t)ll;
    if ((rc = ch_outset_write(&w->out, b, total, err)) != CHUTE_OK)
        return rc;
    if (w->out.bytes >= w->cfg.shard_size)
        return tfw_end_file(w, err);
    return CHUTE_OK;
}

static void tfw_abort(void *vw)
{
    tfw *w = vw;
    if (!w)
        return;
    ch_outset_free(&w->out);
    ch_buf_free(&w->rec);
    free(w->idx);
    free(w);
}

static int tfw_finish(void *vw, uint32_t *out_files, chute_error *err)
{
    tfw *w = vw;
    int rc = w->open ? tfw_end_file(w, err) : CHUTE_OK;
    for (uint32_t k = 0; rc == CHUTE_OK && k < w->nfiles; k++) {
        char name[512];
        snprintf(name, sizeof name, "%s-%05u-of-%05u.idx", w->cfg.prefix, k, w->nfiles);
        rc = ch_outset_publish(&w->out, 2 * k + 1, name, err);
        name[strlen(name) - 4] = '\0';
        if (rc == CHUTE_OK)
            rc = ch_outset_publish(&w->out, 2 * k, name, err);
    }
    if (rc == CHUTE_OK)
        *out_files = w->nfiles;
    tfw_abort(w);
    return rc;
}

const ch_writer_ops ch_writer_tfrecord = {
    .name = "tfrecord",
    .reader = "tfrecord",
    .owns = tfw_owns,
    .open = tfw_open,
    .add = tfw_add,
    .finish = tfw_finish,
    .abort = tfw_abort,
};
