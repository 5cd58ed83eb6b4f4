/*
 * stream_tar.c — the stream reader for `pipe:COMMAND` and stdin (`-`): a
 * WebDataset tar read front to back from a child's stdout (proc.h) through
 * the streaming tar walker (tarstream.c).
 *
 * Samples are grouped as webdataset's tariterators group them and as the
 * "wds" format does (parse.h: key = the path up to the first dot of the
 * basename; a new sample whenever the key changes; names with no key and
 * metadata names are skipped).  The field model is fmt_wds's: the image is
 * the jpg, jpeg, png or bmp member (that order of preference), the label
 * the .cls member as ASCII decimal.  Typed fields are the members the
 * dataset declares in extra_keys ("cls:int64,json:bytes,npy:float32[2x3]",
 * typed as the wds format types them: fields.h), since a stream cannot be
 * probed at open as a tar file is; other members are read past without
 * being kept.  A sample with no image, no or a bad label, a field twice,
 * or more kept bytes than max_sample_bytes is handed on marked bad: the
 * loader's corrupt policy decides, as for the same sample in a tar file.
 * A declared field's value is decoded by a worker with the wds format's
 * own decoder (fmt_wds_field_decode), so a value means the same on a
 * stream as in a file: a declared member the sample lacks, a .npy of
 * another dtype or shape, or a broken .npy header is that sample's bad
 * content, named by its key, the member and the reason.
 *
 * A sample is complete, and handed on, once the header after its last
 * member has been read with another key (or the stream ended cleanly): a
 * stream that breaks inside a sample or in the header after it loses that
 * sample, since it may be missing members.
 *
 * Only the image's and the declared fields' bytes are kept, in the pump's
 * record: a member is read straight from the pipe into it, so there is one
 * copy (kernel to record) and nothing here is allocated per sample.  With
 * declared fields the record starts with their directory (one entry per
 * field: where its member's bytes are in the record, their size, and the
 * member's offset in the stream for messages), then the kept members in
 * stream order, the image among them at img_off.  A record's buffer grows
 * keeping what it holds only while it warms up to the largest sample.
 *
 * The end: EOF at a header boundary.  Zero blocks (an archive's end
 * marker, tar's padding to 10 KiB records) are read past, so several
 * archives in a row are one stream (`cat shard-*.tar`, curl's URL globs,
 * as tar -i does).  Then the exit status is checked (ch_proc_finish).  Any error adds the
 * command's status and the tail of its stderr, and kills it.
 */
#define _GNU_SOURCE
#include "stream.h"
#include "../format/fields.h"
#include "../format/parse.h"
#include "../io/proc.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

/* One declared field's entry in a record's directory (see the essay). */
typedef struct tar_fent {
    uint64_t off;             /* in the record; UINT64_MAX: the sample has none */
    uint64_t size;
    uint64_t at;              /* the member's data offset in the stream */
} tar_fent;

typedef struct tar_reader {
    ch_proc p;
    int have_proc;            /* 0: bytes from a callback (ch_stream_tar_open_fn) */
    const ch_stream_spec *spec;
    size_t dir;               /* the directory's bytes: nfields entries */
    size_t used;              /* bytes of the record in use (the sample's) */
    uint64_t kept;            /* member bytes kept (<= max_bytes) */
    fmt_tar_stream ts;
    uint64_t max_bytes;
    uint64_t ordinal;
    int have_pend;            /* the walker's current member opens the next sample */
    const char *pend_name;    /* (the walker's buffer, valid until its next call) */
    size_t pend_len;
    uint64_t pend_size, pend_off;
    int tar_end;              /* the archive ended; end_rc is how the stream did */
    int end_rc;
    chute_error end_err;
    char *key;                /* the current sample's key */
    size_t key_cap;
    char seen[512];           /* the current sample's field names, '/'-separated */
    size_t seen_len;
} tar_reader;

static int proc_read(void *ctx, uint8_t *buf, size_t n, size_t *got, chute_error *err)
{
    return ch_proc_read(ctx, buf, n, got, err);
}

static int tr_open(const void *spec_, uint64_t epoch, int timeout_ms, uint64_t max_bytes,
                   void **out, chute_error *err)
{
    const ch_stream_spec *spec = spec_;
    *out = NULL;
    int rc0 = ch_stream_spec_reopen_check(spec, epoch, err);
    if (rc0 != CHUTE_OK)
        return rc0;
    tar_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = ch_proc_open(&r->p, spec->cmd, timeout_ms, err);
    if (rc != CHUTE_OK) {
        free(r);
        return rc;
    }
    r->have_proc = 1;
    r->ts.read = proc_read;
    r->ts.ctx = &r->p;
    r->ts.name = r->p.name;
    r->ts.ignore_zeros = 1; /* concatenated tars: `cat shard-*.tar`, curl URL globs */
    r->max_bytes = max_bytes;
    r->spec = spec;
    r->dir = spec->nfields * sizeof(tar_fent);
    *out = r;
    return CHUTE_OK;
}

int ch_stream_tar_open_fn(const ch_stream_spec *spec, uint64_t max_bytes,
                          int (*read)(void *ctx, uint8_t *buf, size_t n, size_t *got,
                                      chute_error *err),
                          void *ctx, void **out, chute_error *err)
{
    *out = NULL;
    if (spec->nfields > CH_FIELD_MAX)
        return ch_err(err, CHUTE_EINVAL, "more than %d declared fields", CH_FIELD_MAX);
    tar_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    r->p.cancel_fd = -1;
    r->ts.read = read;
    r->ts.ctx = ctx;
    r->ts.name = spec->name ? spec->name : "-";
    r->ts.ignore_zeros = 1;
    r->max_bytes = max_bytes;
    r->spec = spec;
    r->dir = spec->nfields * sizeof(tar_fent);
    *out = r;
    return CHUTE_OK;
}

/* A stream error: add what the command says and stop it. */
static int broke(tar_reader *r, int rc, chute_error *err)
{
    if (rc != CHUTE_EINTERRUPTED && r->have_proc) {
        if (!strstr(err->message, "; the command ")) /* a timeout already says */
            ch_proc_explain(&r->p, err->message, sizeof err->message);
        /* A command that failed is the cause, whatever its bytes looked
         * like when they stopped (truncated): an I/O error, not content. */
        if (r->p.exited && !(WIFEXITED(r->p.status) && WEXITSTATUS(r->p.status) == 0))
            rc = err->code = CHUTE_EIO;
        ch_proc_end(&r->p);
    }
    return rc;
}

/* The archive ended: drain stdout, check the exit status. */
static void at_tar_end(tar_reader *r)
{
    r->tar_end = 1;
    if (!r->have_proc) {
        r->end_rc = CHUTE_END;
        return;
    }
    uint8_t b[4096];
    size_t got;
    int rc;
    do
        rc = ch_proc_read(&r->p, b, sizeof b, &got, &r->end_err);
    while (rc == CHUTE_OK && got > 0);
    if (rc == CHUTE_OK)
        rc = ch_proc_finish(&r->p, &r->end_err);
    r->end_rc = rc == CHUTE_OK ? CHUTE_END : rc;
    if (rc != CHUTE_OK && rc != CHUTE_EINTERRUPTED)
        ch_proc_end(&r->p);
}

/* The next member with a sample key; FMT_TAR_STREAM_END at the end. */
static int next_member(tar_reader *r, const char **name, size_t *len, uint64_t *size,
                       uint64_t *off, size_t *key_len, size_t *ext_off, chute_error *err)
{
    for (;;) {
        int rc = fmt_tar_stream_next(&r->ts, name, len, size, off, err);
        if (rc != CHUTE_OK)
            return rc;
        if (fmt_wds_split_name(*name, *len, key_len, ext_off) && !fmt_wds_is_meta(*name, *len))
            return CHUTE_OK;
    }
}

static const char *const k_images[] = {"jpg", "jpeg", "png", "bmp"};

static int parse_cls(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    int neg = 0;
    if (i < n && (s[i] == '-' || s[i] == '+'))
        neg = s[i++] == '-';
    size_t d0 = i;
    int64_t v = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (s[i++] - '0');
    }
    if (i == d0)
        return -1;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    if (i != n)
        return -1;
    *out = neg ? -v : v;
    return 0;
}

static void mark_bad(ch_stream_rec *rec, const char *fmt, const char *a)
{
    if (!rec->bad) {
        rec->bad = 1;
        snprintf(rec->why, sizeof rec->why, fmt, a);
    }
}

/* The sample's .cls text (a member's whole data) as its label; text is
 * not read when size >= 32 (too long for one).  A .cls that is no label
 * makes the sample bad with what it holds and why, as the wds format's
 * open says it (fmt_wds.c first_bad_cls): "holds \"3.0\", not a decimal
 * integer". */
static void set_label(ch_stream_rec *rec, const char *text, uint64_t size)
{
    int64_t v;
    if (size < 32 && parse_cls(text, (size_t)size, &v) == 0 && v >= 0 && v < INT32_MAX) {
        rec->label = v;
        return;
    }
    char why[96];
    if (size >= 32) {
        snprintf(why, sizeof why, "is %llu bytes, too long for an integer",
                 (unsigned long long)size);
    } else {
        char q[32];
        size_t digits = 0, k;
        for (k = 0; k < size; k++) { /* the text, printable, for the message */
            char c = text[k];
            q[k] = c >= 0x20 && c < 0x7f ? c : '?';
            digits += c >= '0' && c <= '9';
        }
        q[k] = '\0';
        size_t i = 0;
        while (i < size && (text[i] == '-' || text[i] == '+' || (text[i] >= '0' && text[i] <= '9') ||
                            text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
            i++;
        if (parse_cls(text, (size_t)size, &v) == 0)
            snprintf(why, sizeof why, "holds \"%s\", a label outside 0..%d", q, INT32_MAX - 1);
        else if (i == size && digits)
            snprintf(why, sizeof why, "holds \"%s\", outside the int64 range", q);
        else
            snprintf(why, sizeof why, "holds \"%s\", not a decimal integer", q);
    }
    mark_bad(rec, "the .cls member %s", why);
}

/* Room for `need` bytes in the record, keeping its first r->used: a
 * record's buffer grows only while it warms up to the largest sample. */
static int rec_room(tar_reader *r, ch_stream_rec *rec, size_t need)
{
    if (need <= rec->data.cap)
        return CHUTE_OK;
    ch_buf nb = {0};
    if (ch_buf_reserve(&nb, need) != CHUTE_OK)
        return CHUTE_ENOMEM;
    if (r->used)
        memcpy(nb.data, rec->data.data, r->used);
    ch_buf_free(&rec->data);
    rec->data = nb;
    return CHUTE_OK;
}

/* Keep the current member's data (size bytes) after the record's kept
 * bytes: *at is where it went, or SIZE_MAX when it was read past (the
 * sample is already bad, or keeping it would take the sample over
 * max_sample_bytes: then it is marked bad). */
static int keep_member(tar_reader *r, ch_stream_rec *rec, const char *ext, uint64_t size,
                       size_t *at, chute_error *err)
{
    *at = SIZE_MAX;
    if (rec->bad)
        return fmt_tar_stream_data(&r->ts, NULL, size, err);
    size_t need;
    if (size > r->max_bytes - r->kept || __builtin_add_overflow(r->used, size, &need)) {
        mark_bad(rec,
                 r->spec->nfields ? "the image and declared fields are over max_sample_bytes "
                                    "(at member .%s)"
                                  : "image member .%s is over max_sample_bytes",
                 ext);
        return fmt_tar_stream_data(&r->ts, NULL, size, err);
    }
    if (rec_room(r, rec, need ? need : 1) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "%s: no memory for a %zu-byte sample", r->ts.name, need);
    int rc = fmt_tar_stream_data(&r->ts, rec->data.data + r->used, size, err);
    if (rc != CHUTE_OK)
        return rc;
    *at = r->used;
    r->used = need;
    r->kept += size;
    return CHUTE_OK;
}

/* Fold one member (the walker's current one) into rec. */
static int take_member(tar_reader *r, ch_stream_rec *rec, const char *name, size_t len,
                       uint64_t size, size_t ext_off, int *img_rank, int *have_cls,
                       chute_error *err)
{
    char ext[64];
    size_t el = len - ext_off;
    snprintf(ext, sizeof ext, "%.*s", (int)CH_MIN(el, sizeof ext - 1), name + ext_off);
    for (char *c = ext; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    /* A field twice: webdataset raises ValueError. */
    char probe[70];
    int pl = snprintf(probe, sizeof probe, "/%s/", ext);
    if (r->seen_len && memmem(r->seen, r->seen_len, probe, (size_t)pl))
        mark_bad(rec, "field .%s appears twice in the sample", ext);
    else if (r->seen_len + (size_t)pl < sizeof r->seen) {
        memcpy(r->seen + (r->seen_len ? r->seen_len - 1 : 0), probe, (size_t)pl);
        r->seen_len = (r->seen_len ? r->seen_len - 1 : 0) + (size_t)pl;
    }
    int rank = -1;
    for (int k = 0; k < 4; k++)
        if (strcmp(ext, k_images[k]) == 0)
            rank = k;
    size_t at;
    int rc;
    if (rank >= 0 && (*img_rank < 0 || rank < *img_rank)) {
        /* A better image replaces the one kept: its bytes are given back
         * when they are the last kept. */
        if (*img_rank >= 0 && rec->len && rec->img_off + rec->len == r->used) {
            r->used = rec->img_off;
            r->kept -= rec->len;
        }
        rec->len = 0;
        *img_rank = rank;
        rc = keep_member(r, rec, ext, size, &at, err);
        if (rc == CHUTE_OK && at != SIZE_MAX) {
            rec->img_off = at;
            rec->len = (size_t)size;
        }
        return rc;
    }
    int is_cls = strcmp(ext, "cls") == 0;
    int fk = -1; /* a declared field: kept (the name in full, never a truncated one) */
    for (uint32_t k = 0; el < sizeof ext && k < r->spec->nfields && fk < 0; k++)
        if (strcmp(r->spec->keys[2 + k], ext) == 0)
            fk = (int)k;
    if (fk >= 0) {
        tar_fent e;
        memcpy(&e, rec->data.data + (size_t)fk * sizeof e, sizeof e);
        if (e.off != UINT64_MAX) /* (the name check above misses it past 512 bytes of names) */
            mark_bad(rec, "field .%s appears twice in the sample", ext);
        uint64_t data_at = r->ts.pos;
        rc = keep_member(r, rec, ext, size, &at, err);
        if (rc != CHUTE_OK || at == SIZE_MAX)
            return rc;
        e = (tar_fent){at, size, data_at};
        memcpy(rec->data.data + (size_t)fk * sizeof e, &e, sizeof e);
        if (is_cls && !*have_cls) {
            *have_cls = 1;
            set_label(rec, (const char *)rec->data.data + at, size);
        }
        return CHUTE_OK;
    }
    if (is_cls && !*have_cls) {
        char text[32];
        *have_cls = 1;
        if (size >= sizeof text) {
            set_label(rec, NULL, size); /* too long: says so without reading it */
            return fmt_tar_stream_data(&r->ts, NULL, size, err);
        }
        rc = fmt_tar_stream_data(&r->ts, text, size, err);
        if (rc == CHUTE_OK)
            set_label(rec, text, size);
        return rc;
    }
    return fmt_tar_stream_data(&r->ts, NULL, size, err);
}

int ch_stream_tar_fields(const ch_stream_spec *spec, const ch_field *fields,
                         const ch_stream_rec *rec, const ch_field_req *req, size_t nreq,
                         const char *where, chute_error *err)
{
    size_t dir = spec->nfields * sizeof(tar_fent);
    if (rec->bad || spec->nfields > CH_FIELD_MAX || !rec->data.data || rec->data.cap < dir)
        return ch_err(err, CHUTE_ECORRUPT, "%s: no record to read fields from", where);
    for (size_t q = 0; q < nreq; q++) {
        uint32_t k = req[q].field;
        if (k >= spec->nfields)
            return ch_err(err, CHUTE_EINVAL, "%s: field %u is not declared", where, k);
        tar_fent e;
        memcpy(&e, rec->data.data + (size_t)k * sizeof e, sizeof e);
        if (e.off == UINT64_MAX)
            return ch_err(err, CHUTE_ECORRUPT, "%s: no .%s member", where, fields[k].name);
        int rc = fmt_wds_field_decode(&fields[k], &req[q], rec->data.data + e.off, e.size,
                                      UINT64_MAX, where, spec->name ? spec->name : "-", e.at,
                                      err);
        if (rc != CHUTE_OK)
            return rc;
    }
    return CHUTE_OK;
}

static int tr_next(void *r_, ch_stream_rec *rec, chute_error *err)
{
    tar_reader *r = r_;
    if (r->tar_end) {
        if (r->end_rc != CHUTE_END)
            *err = r->end_err;
        return r->end_rc;
    }
    const char *name;
    size_t len, key_len, ext_off;
    uint64_t size, off;
    int rc;
    if (r->have_pend) {
        name = r->pend_name;
        len = r->pend_len;
        size = r->pend_size;
        off = r->pend_off;
        fmt_wds_split_name(name, len, &key_len, &ext_off);
        r->have_pend = 0;
    } else {
        rc = next_member(r, &name, &len, &size, &off, &key_len, &ext_off, err);
        if (rc == FMT_TAR_STREAM_END) {
            at_tar_end(r);
            if (r->end_rc != CHUTE_END)
                *err = r->end_err;
            return r->end_rc;
        }
        if (rc != CHUTE_OK)
            return broke(r, rc, err);
    }
    if (key_len + 1 > r->key_cap) {
        char *k = realloc(r->key, key_len + 1);
        if (!k)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        r->key = k;
        r->key_cap = key_len + 1;
    }
    memcpy(r->key, name, key_len);
    r->key[key_len] = '\0';
    rec->len = 0;
    rec->img_off = 0;
    rec->label = -1;
    rec->bad = 0;
    rec->why[0] = '\0';
    rec->offset = off;
    snprintf(rec->key, sizeof rec->key, "%s", r->key);
    r->seen_len = 0;
    r->used = 0;
    r->kept = 0;
    if (r->dir) { /* the declared fields' directory, every entry "none yet" */
        if (ch_buf_reserve(&rec->data, r->dir) != CHUTE_OK)
            return broke(r, ch_err(err, CHUTE_ENOMEM, "out of memory"), err);
        tar_fent none = {UINT64_MAX, 0, 0};
        for (size_t k = 0; k < r->dir; k += sizeof none)
            memcpy(rec->data.data + k, &none, sizeof none);
        r->used = r->dir;
    }
    int img_rank = -1, have_cls = 0;
    for (;;) {
        rc = take_member(r, rec, name, len, size, ext_off, &img_rank, &have_cls, err);
        if (rc != CHUTE_OK)
            return broke(r, rc, err);
        rc = next_member(r, &name, &len, &size, &off, &key_len, &ext_off, err);
        if (rc == FMT_TAR_STREAM_END) {
            at_tar_end(r);
            break;
        }
        if (rc != CHUTE_OK) /* the sample may miss members: not delivered */
            return broke(r, rc, err);
        if (key_len != strlen(r->key) || memcmp(name, r->key, key_len) != 0) {
            r->have_pend = 1;
            r->pend_name = name;
            r->pend_len = len;
            r->pend_size = size;
            r->pend_off = off;
            break;
        }
    }
    if (img_rank < 0)
        mark_bad(rec, "no image member (.jpg, .jpeg, .png or .bmp)%s", "");
    else if (!have_cls)
        mark_bad(rec, "no .cls label member%s", "");
    rec->ordinal = r->ordinal++;
    rec->token = rec->ordinal;
    return CHUTE_OK;
}

static void tr_cancel(void *r_)
{
    tar_reader *r = r_;
    if (r->have_proc)
        ch_proc_cancel(&r->p);
}

static void tr_close(void *r_)
{
    tar_reader *r = r_;
    if (!r)
        return;
    if (r->have_proc)
        ch_proc_close(&r->p);
    fmt_tar_stream_free(&r->ts);
    free(r->key);
    free(r);
}

const ch_stream_reader_ops ch_stream_tar_ops = {
    .name = "pipe",
    .open = tr_open,
    .next = tr_next,
    .cancel = tr_cancel,
    .release = NULL,
    .close = tr_close,
};
