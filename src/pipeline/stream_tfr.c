/*
 * stream_tfr.c — TFRecord records on streams: `pipe:COMMAND` / `-` reading
 * a TFRecord file's bytes front to back, and the record model shared with
 * Kafka (a message value that is one tf.train.Example, TFRecord-framed or
 * bare: a producer's SerializeToString() bytes, told apart per message).  Chosen by
 * the dataset option format = "tfrecord" on a stream path.
 *
 * Why one record model.  The issue asks for stream values that are "an
 * encoded image or a record (same field model)": the same Example a
 * TFRecord file holds, with the same image/label keys and the same typed
 * fields (int64/float lists, bytes, .npy tensors) reaching the batch view.
 * So a stream record holds the whole framed record in the pump's buffer;
 * ch_stream_tfr_fill checks it (length CRC, length, data CRC — the
 * checks the TFRecord format makes on a file) and finds the image and the
 * label once, in the pump thread; a worker decodes the image in place
 * (data + img_off) and reads the fields with the TFRecord format's own
 * decoder (fmt_tfr_fields_decode), so a value means the same on a stream
 * as in a file.
 *
 * Why fields are declared.  A file's field shapes are learned at open from
 * its first record; a stream cannot be read at open (a command runs per
 * epoch, stdin once, Kafka commits offsets), so extra_keys names each
 * field with its type and shape ("bbox:float32[4],mask.npy:uint8[4x4]",
 * fields.h), and a record that disagrees is corrupt content under the
 * loader's policy, as a file's would be.
 *
 * Errors.  A record whose framing is intact but whose data CRC, Example,
 * image or label is bad is a bad record (the policy skips or fails).  A
 * bad length CRC or a truncated record breaks the stream: framing cannot
 * be recovered past a length that cannot be trusted (ECORRUPT naming the
 * byte offset; EFORMAT at offset 0: not a TFRecord stream).  A record
 * over max_sample_bytes whose length CRC holds is read past, marked bad.
 * As for tar streams, a command that exits nonzero is CHUTE_EIO naming
 * its status and the tail of its stderr.
 *
 * GZIP/ZLIB streams.  A pipe may carry what TFRecordWriter writes with
 * compression_type GZIP or ZLIB.  The first 12 bytes decide, as for a file
 * (fmt_tfrecord.c): a plain header whose length CRC holds is plain (the
 * fast path, unchanged), else gzip/zlib magic (ch_tfx_compression) starts
 * an inflater and those bytes are its first input.  zlib inflates straight
 * into the record's buffer (libdeflate has no streaming API); concatenated
 * members are one stream (inflateReset after each, as the file format's
 * inflater does).  Damaged deflate data, a cut inside a member or bytes
 * after the last member end the stream with ECORRUPT at the compressed
 * offset and zlib's message: deflate cannot be resynchronised.  Record
 * checks are unchanged on the inflated bytes; their offsets are inflated
 * ones, and messages say "(uncompressed)".  Kafka values are single
 * uncompressed records.
 *
 * Memory: the record is read straight into the pump's reused buffer; a
 * record read past uses a 64 KiB stack buffer; a compressed stream has one
 * inflater with a 64 KiB input buffer, allocated at its first bytes;
 * nothing per record.
 */
#define _GNU_SOURCE
#include "stream.h"
#include "../format/fields.h"
#include "../format/parse.h"
#include "../format/tfr_saved.h"
#include "../io/proc.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <zlib.h>

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A TFRecord header's length CRC holds (hdr: FMT_TFR_HEADER bytes). */
static int header_crc_ok(const uint8_t *hdr)
{
    return ch_crc32c_mask(ch_crc32c(0, hdr, 8)) == le32(hdr + 8);
}

static void bad(ch_stream_rec *rec, const char *where, const char *why)
{
    rec->bad = 1;
    if (*where)
        snprintf(rec->why, sizeof rec->why, "%.100s: %.95s", where, why);
    else
        snprintf(rec->why, sizeof rec->why, "%.199s", why);
}

/* The image and label of the Example at data + off (length bytes) into
 * rec; off 0 is a bare Example (no framing to blame if it does not parse). */
static void fill_example(const ch_stream_spec *spec, ch_stream_rec *rec, const char *where,
                         size_t off, size_t length)
{
    const uint8_t *d = rec->data.data;
    char why[200];
    fmt_pb_feature f[2];
    chute_error e = {0};
    if (fmt_pb_example_find(d + off, length, spec->keys, 2, f, "Example", 0, &e) != CHUTE_OK) {
        if (off != 0)
            return bad(rec, where, e.message);
        snprintf(why, sizeof why,
                 "not a TFRecord record (length CRC mismatch) nor a tf.train.Example: %.120s",
                 e.message);
        return bad(rec, where, why);
    }
    const uint8_t *v = NULL;
    size_t vn = 0, pos = 0;
    if (f[0].kind != FMT_PB_BYTES || f[0].count != 1 || !fmt_pb_bytes_next(&f[0], &pos, &v, &vn) ||
        vn == 0) {
        snprintf(why, sizeof why, "no image: feature \"%.60s\" is not a bytes_list of one value",
                 spec->keys[0]);
        return bad(rec, where, why);
    }
    if (f[1].kind == FMT_PB_INT64 && f[1].count == 1) {
        int64_t l = 0;
        fmt_pb_int64_decode(&f[1], &l, 1);
        if (__builtin_add_overflow(l, (int64_t)spec->label_offset, &l) || l < 0 || l >= INT32_MAX) {
            snprintf(why, sizeof why, "label %lld (label_offset %d) is out of range",
                     (long long)l, (int)spec->label_offset);
            return bad(rec, where, why);
        }
        rec->label = l;
    } else if (f[1].kind != FMT_PB_MISSING) {
        snprintf(why, sizeof why, "label feature \"%.60s\" is not an int64_list of one value",
                 spec->keys[1]);
        return bad(rec, where, why);
    }
    rec->ex_off = off;
    rec->ex_len = length;
    rec->img_off = (size_t)(v - d);
    rec->len = vn;
}

void ch_stream_tfr_fill(const ch_stream_spec *spec, ch_stream_rec *rec, const char *where,
                        int bare_ok)
{
    const uint8_t *d = rec->data.data;
    size_t n = rec->len;
    char why[200];
    rec->ex_len = 0;
    rec->img_off = 0;
    rec->len = 0;
    /* Framed: a header whose length CRC holds and whose length is the
     * value's.  Anything else is a bare Example where one may come (a
     * Kafka value: what example.SerializeToString() gives a producer); a
     * bare Example's first 12 bytes pass the CRC and the length check by
     * chance with odds of 2^-32 at most. */
    int crc_ok = n >= FMT_TFR_OVERHEAD && d && header_crc_ok(d);
    int framed = crc_ok && le64(d) == n - FMT_TFR_OVERHEAD;
    if (!framed && bare_ok && n && d)
        return fill_example(spec, rec, where, 0, n);
    if (n < FMT_TFR_OVERHEAD || !d) {
        snprintf(why, sizeof why, "%zu bytes are shorter than a TFRecord record (16)", n);
        return bad(rec, where, why);
    }
    if (!crc_ok)
        return bad(rec, where, "TFRecord length CRC mismatch (not a TFRecord record)");
    uint64_t length = le64(d);
    if (length != n - FMT_TFR_OVERHEAD) {
        snprintf(why, sizeof why, "TFRecord length %llu, but the value holds %zu data bytes",
                 (unsigned long long)length, n - FMT_TFR_OVERHEAD);
        return bad(rec, where, why);
    }
    if (ch_crc32c_mask(ch_crc32c(0, d + FMT_TFR_HEADER, (size_t)length)) !=
        le32(d + FMT_TFR_HEADER + length))
        return bad(rec, where, "TFRecord data CRC mismatch");
    fill_example(spec, rec, where, FMT_TFR_HEADER, (size_t)length);
}

int ch_stream_tfr_fields(const ch_stream_spec *spec, const ch_field *fields,
                         const ch_stream_rec *rec, const ch_field_req *req, size_t nreq,
                         const char *where, chute_error *err)
{
    if (!rec->ex_len || spec->nfields > CH_FIELD_MAX)
        return ch_err(err, CHUTE_ECORRUPT, "%s: no record to read fields from", where);
    fmt_pb_feature f[CH_FIELD_MAX];
    int rc = fmt_pb_example_find(rec->data.data + rec->ex_off, rec->ex_len, spec->keys + 2,
                                 spec->nfields, f, where, 0, err);
    if (rc != CHUTE_OK)
        return rc;
    return fmt_tfr_fields_decode(fields, f, req, nreq, where, where, 0, err);
}

/* ---- records from bytes: plain, or inflated on the fly --------------- */

/* Compressed input is read through one buffer of this size, allocated
 * with zlib's state when the first bytes say GZIP or ZLIB. */
#define TFR_ZIN (64u << 10)

struct ch_tfr_inflater {
    z_stream z;
    int comp;                 /* FMT_TFR_GZIP or FMT_TFR_ZLIB */
    int member_start;         /* no byte of the current member consumed yet */
    int eof;                  /* the source ended */
    uint64_t in_off;          /* compressed bytes read from the source */
    uint8_t in[TFR_ZIN];
};

/* Start inflating: the first n bytes (already read, at hdr) are the
 * compressed stream's first bytes. */
static int z_start(ch_tfr_in *in, int comp, const uint8_t *hdr, size_t n, chute_error *err)
{
    struct ch_tfr_inflater *zi = calloc(1, sizeof *zi);
    if (!zi)
        return ch_err(err, CHUTE_ENOMEM, "%s: no memory for an inflater", in->name);
    if (inflateInit2(&zi->z, comp == FMT_TFR_GZIP ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
        free(zi);
        return ch_err(err, CHUTE_ENOMEM, "%s: inflateInit2 failed", in->name);
    }
    zi->comp = comp;
    zi->member_start = 1;
    memcpy(zi->in, hdr, n);
    zi->z.next_in = zi->in;
    zi->z.avail_in = (uInt)n;
    zi->in_off = n;
    in->z = zi;
    return CHUTE_OK;
}

/* Up to n inflated bytes into buf; *got < n only at a clean end (the
 * source ended between members).  Concatenated members are one stream
 * (gzip -c's, and what the TFRecord format's inflater accepts). */
static int z_read(ch_tfr_in *in, uint8_t *buf, size_t n, size_t *got, chute_error *err)
{
    struct ch_tfr_inflater *zi = in->z;
    z_stream *z = &zi->z;
    const char *kind = zi->comp == FMT_TFR_GZIP ? "GZIP" : "ZLIB";
    *got = 0;
    while (*got < n) {
        if (z->avail_in == 0) {
            if (zi->eof) {
                if (zi->member_start)
                    return CHUTE_OK;
                return ch_err(err, CHUTE_ECORRUPT,
                              "%s@%llu (compressed): the %s stream ends early (truncated)",
                              in->name, (unsigned long long)zi->in_off, kind);
            }
            size_t g = 0;
            int rc = in->read(in->ctx, zi->in, sizeof zi->in, &g, err);
            if (rc != CHUTE_OK)
                return rc;
            zi->eof = g == 0;
            zi->in_off += g;
            z->next_in = zi->in;
            z->avail_in = (uInt)g;
            continue;
        }
        uInt in0 = z->avail_in, out0 = (uInt)CH_MIN(n - *got, (size_t)UINT_MAX);
        z->next_out = buf + *got;
        z->avail_out = out0;
        int zr = inflate(z, Z_NO_FLUSH);
        *got += out0 - z->avail_out;
        if (zr == Z_MEM_ERROR)
            return ch_err(err, CHUTE_ENOMEM, "%s: inflate out of memory", in->name);
        if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT || zr == Z_STREAM_ERROR ||
            (zr == Z_BUF_ERROR && z->avail_in == in0 && z->avail_out == out0))
            /* Deflate cannot be resynchronised: the stream ends here. */
            return ch_err(err, CHUTE_ECORRUPT, "%s@%llu (compressed): damaged %s data: %s",
                          in->name, (unsigned long long)(zi->in_off - z->avail_in), kind,
                          z->msg ? z->msg : zr == Z_NEED_DICT ? "needs a dictionary"
                                                              : "inflate failed");
        if (z->avail_in != in0 || z->avail_out != out0)
            zi->member_start = 0;
        if (zr == Z_STREAM_END) { /* another member may follow */
            if (inflateReset(z) != Z_OK)
                return ch_err(err, CHUTE_ENOMEM, "%s: inflateReset failed", in->name);
            zi->member_start = 1;
        }
    }
    return CHUTE_OK;
}

/* Read exactly n bytes (buf NULL: read past them); *got < n only at the
 * end (of the source, or of the last compressed member). */
static int read_full(ch_tfr_in *in, uint8_t *buf, uint64_t n, uint64_t *got, chute_error *err)
{
    uint8_t sink[65536];
    *got = 0;
    while (*got < n) {
        size_t want = (size_t)CH_MIN(n - *got, buf ? (uint64_t)SIZE_MAX : sizeof sink);
        uint8_t *to = buf ? buf + *got : sink;
        size_t g = 0;
        int rc = in->z ? z_read(in, to, want, &g, err) : in->read(in->ctx, to, want, &g, err);
        if (rc != CHUTE_OK)
            return rc;
        if (g == 0)
            break;
        *got += g;
        in->pos += g;
    }
    return CHUTE_OK;
}

/* The stream's first header: plain, or the first bytes of a GZIP/ZLIB
 * stream (told as the TFRecord format tells a file: a plain header whose
 * length CRC holds wins over a look-alike magic number), then the first
 * inflated header. */
static int first_header(ch_tfr_in *in, uint8_t *hdr, uint64_t *got, chute_error *err)
{
    in->started = 1;
    int rc = read_full(in, hdr, FMT_TFR_HEADER, got, err);
    if (rc != CHUTE_OK || *got < FMT_TFR_HEADER || header_crc_ok(hdr))
        return rc;
    int comp = ch_tfx_compression(hdr, FMT_TFR_HEADER);
    if (comp == FMT_TFR_NONE)
        return CHUTE_OK; /* the caller says: not a TFRecord stream */
    if ((rc = z_start(in, comp, hdr, FMT_TFR_HEADER, err)) != CHUTE_OK)
        return rc;
    in->pos = 0;
    return read_full(in, hdr, FMT_TFR_HEADER, got, err);
}

int ch_tfr_in_next(ch_tfr_in *in, const ch_stream_spec *spec, ch_stream_rec *rec,
                   chute_error *err)
{
    uint64_t at = in->pos, got = 0;
    uint8_t hdr[FMT_TFR_HEADER];
    int rc = in->started ? read_full(in, hdr, sizeof hdr, &got, err)
                         : first_header(in, hdr, &got, err);
    if (rc != CHUTE_OK)
        return rc;
    if (got == 0)
        return CHUTE_END; /* a clean end between records */
    /* Offsets in a compressed stream's messages are in its inflated bytes. */
    const char *unc = in->z ? " (uncompressed)" : "";
    if (got < sizeof hdr)
        return ch_err(err, CHUTE_ECORRUPT, "%s@%llu%s: truncated TFRecord header", in->name,
                      (unsigned long long)at, unc);
    if (!header_crc_ok(hdr))
        return ch_err(err, at == 0 ? CHUTE_EFORMAT : CHUTE_ECORRUPT,
                      "%s@%llu%s: TFRecord length CRC mismatch%s", in->name,
                      (unsigned long long)at, unc,
                      at == 0 ? " (not a TFRecord stream)" : " (framing lost)");
    uint64_t length = le64(hdr), whole;
    rec->offset = at;
    rec->ordinal = in->ordinal++;
    rec->token = rec->ordinal;
    rec->label = -1;
    rec->bad = 0;
    rec->why[0] = '\0';
    snprintf(rec->key, sizeof rec->key, "record %llu%s", (unsigned long long)rec->ordinal,
             in->z ? ", uncompressed offset" : "");
    if (__builtin_add_overflow(length, (uint64_t)FMT_TFR_OVERHEAD, &whole) ||
        whole > in->max_bytes || whole > SIZE_MAX) {
        rec->len = 0;
        rec->bad = 1;
        snprintf(rec->why, sizeof rec->why, "record of %llu bytes is over max_sample_bytes %llu",
                 (unsigned long long)length, (unsigned long long)in->max_bytes);
        uint64_t rest = length + 4 < length ? UINT64_MAX : length + 4;
        rc = read_full(in, NULL, rest, &got, err);
        if (rc == CHUTE_OK && got < rest)
            rc = ch_err(err, CHUTE_ECORRUPT, "%s@%llu%s: truncated TFRecord record", in->name,
                        (unsigned long long)at, unc);
        return rc;
    }
    if (ch_buf_reserve(&rec->data, (size_t)whole) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "%s: no memory for a %llu-byte record", in->name,
                      (unsigned long long)whole);
    memcpy(rec->data.data, hdr, sizeof hdr);
    rc = read_full(in, rec->data.data + FMT_TFR_HEADER, whole - FMT_TFR_HEADER, &got, err);
    if (rc == CHUTE_OK && got < whole - FMT_TFR_HEADER)
        rc = ch_err(err, CHUTE_ECORRUPT,
                    "%s@%llu%s: truncated TFRecord record (%llu of %llu bytes)", in->name,
                    (unsigned long long)at, unc, (unsigned long long)(got + FMT_TFR_HEADER),
                    (unsigned long long)whole);
    if (rc != CHUTE_OK)
        return rc;
    rec->len = (size_t)whole;
    ch_stream_tfr_fill(spec, rec, "", 0);
    return CHUTE_OK;
}

void ch_tfr_in_free(ch_tfr_in *in)
{
    if (in->z) {
        inflateEnd(&in->z->z);
        free(in->z);
        in->z = NULL;
    }
}

/* ---- the pipe/stdin reader ------------------------------------------ */

typedef struct tfr_reader {
    ch_proc p;
    const ch_stream_spec *spec;
    ch_tfr_in in;
    int ended;
} tfr_reader;

static int proc_read(void *p, uint8_t *buf, size_t n, size_t *got, chute_error *err)
{
    return ch_proc_read(p, buf, n, got, err);
}

static int tf_open(const void *spec_, uint64_t epoch, int timeout_ms, uint64_t max_bytes,
                   void **out, chute_error *err)
{
    const ch_stream_spec *spec = spec_;
    *out = NULL;
    int rc0 = ch_stream_spec_reopen_check(spec, epoch, err);
    if (rc0 != CHUTE_OK)
        return rc0;
    tfr_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = ch_proc_open(&r->p, spec->cmd, timeout_ms, err);
    if (rc != CHUTE_OK) {
        free(r);
        return rc;
    }
    r->spec = spec;
    r->in.read = proc_read;
    r->in.ctx = &r->p;
    r->in.name = r->p.name;
    r->in.max_bytes = max_bytes;
    *out = r;
    return CHUTE_OK;
}

/* The stream broke: add what the command says and stop it (stream_tar.c's). */
static int broke(tfr_reader *r, int rc, chute_error *err)
{
    r->ended = 1;
    if (rc != CHUTE_EINTERRUPTED) {
        if (!strstr(err->message, "; the command "))
            ch_proc_explain(&r->p, err->message, sizeof err->message);
        if (r->p.exited && !(WIFEXITED(r->p.status) && WEXITSTATUS(r->p.status) == 0))
            rc = err->code = CHUTE_EIO;
        ch_proc_end(&r->p);
    }
    return rc;
}

static int tf_next(void *r_, ch_stream_rec *rec, chute_error *err)
{
    tfr_reader *r = r_;
    if (r->ended)
        return ch_err(err, CHUTE_EINVAL, "%s: read after the end", r->p.name);
    int rc = ch_tfr_in_next(&r->in, r->spec, rec, err);
    if (rc == CHUTE_END) {
        r->ended = 1;
        rc = ch_proc_finish(&r->p, err);
        if (rc != CHUTE_OK) {
            ch_proc_end(&r->p);
            return rc;
        }
        return CHUTE_END;
    }
    return rc == CHUTE_OK ? CHUTE_OK : broke(r, rc, err);
}

static void tf_cancel(void *r_) { ch_proc_cancel(&((tfr_reader *)r_)->p); }

static void tf_close(void *r_)
{
    tfr_reader *r = r_;
    if (!r)
        return;
    ch_proc_close(&r->p);
    ch_tfr_in_free(&r->in);
    free(r);
}

const ch_stream_reader_ops ch_stream_tfr_ops = {
    .name = "pipe",
    .open = tf_open,
    .next = tf_next,
    .cancel = tf_cancel,
    .release = NULL,
    .close = tf_close,
};
