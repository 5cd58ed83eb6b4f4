/*
 * fmt_stream.c — the dataset object of a stream: `pipe:COMMAND` (run
 * with /bin/sh -c, a WebDataset tar read from its stdout) or `-` (stdin).
 *
 * Why a format at all: the public API opens datasets and makes loaders
 * from them, and a stream should be opened the same way.  But a stream
 * has no length and no random access, so this "format" is a shell: open
 * only records the command (nothing runs until a loader starts an epoch;
 * each epoch runs it again), size is 0, and read() refuses.  It is not in
 * the registry (no probe can recognise a command); chute_dataset_open_ex
 * picks it by the path's form (ch_stream_path).  The samples flow through
 * the loader's stream path (src/pipeline/stream.h), which reads the
 * dataset's ch_stream_spec.  `kafka://...` (a Kafka consumer,
 * stream_kafka.c) is a stream dataset of the same shell; built without
 * librdkafka it is refused with CHUTE_EUNSUPPORTED saying so.
 *
 * The dataset option format = "tfrecord" makes every record a framed
 * tf.train.Example (src/pipeline/stream_tfr.c): pipe:/- read a TFRecord
 * file's bytes, a Kafka message value is one framed record.  Its typed
 * fields are declared in extra_keys with their types and shapes
 * (fields.h: a stream has no first record to learn them from at open);
 * the loader reads them through the stream record, not read_fields.
 * A tar stream's fields are declared the same way and typed as the wds
 * format types members (.cls int64, NAME.npy a tensor, others bytes).
 */
#define _GNU_SOURCE
#include "format.h"
#include "../pipeline/stream.h"
#include "../common/loader_options.h"

#include <stdio.h>
#include <string.h>

int ch_stream_path(const char *path)
{
    return path && (strcmp(path, "-") == 0 || strncmp(path, "pipe:", 5) == 0 ||
                    strncmp(path, "kafka://", 8) == 0);
}

/* kafka://...: the reader is stream_kafka.c's; the name for messages is
 * the URI without its query (which may hold client credentials). */
static int st_open_kafka(chute_dataset *ds, ch_stream_spec *sp, const char *path,
                         chute_error *err)
{
#ifdef CHUTE_HAVE_KAFKA
    sp->ops = &ch_stream_kafka_ops;
    sp->uri = strdup(path);
    sp->name = strndup(path, strcspn(path, "?"));
    if (!sp->uri || !sp->name)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    /* ds->root names the dataset in messages: without the query either. */
    char *root = strdup(sp->name);
    if (!root)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    free(ds->root);
    ds->root = root;
    if (strlen(sp->name) <= 8 || !strchr(sp->name + 8, '/'))
        return ch_err(err, CHUTE_EINVAL, "%s: a Kafka URI is kafka://HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC]?group=G",
                      sp->name);
    ds->stream = sp;
    ds->n = 0;
    ds->nclasses = 0;
    return CHUTE_OK;
#else
    (void)ds;
    (void)sp;
    return ch_err(err, CHUTE_EUNSUPPORTED,
                  "%.*s: this libchute was built without librdkafka (no Kafka streams; "
                  "install librdkafka-dev and rebuild with CHUTE_WITH_KAFKA=ON)",
                  (int)strcspn(path, "?"), path);
#endif
}

/* A WebDataset tar stream's declared fields (extra_keys): each is a
 * member extension typed as the wds format types it (fields.h,
 * fmt_wds_field_kind), so a declaration that the file format would read
 * otherwise is refused here rather than failing every sample. */
static int st_tar_setup(chute_dataset *ds, ch_stream_spec *sp, const chute_dataset_options *opt,
                        chute_error *err)
{
    static const char *const images[] = {"jpg", "jpeg", "png", "bmp"};
    ch_field decl[CH_FIELD_MAX];
    int n = 0;
    int rc = ch_field_decl_parse(opt->extra_keys, decl, CH_FIELD_MAX, &n, err);
    if (rc != CHUTE_OK)
        return rc;
    for (int k = 0; k < n; k++) {
        const ch_field *f = &decl[k];
        size_t nl = strlen(f->name);
        for (size_t c = 0; c < nl; c++)
            if (f->name[c] >= 'A' && f->name[c] <= 'Z')
                return ch_err(err, CHUTE_EINVAL,
                              "extra_keys: \"%s\": a WebDataset field is named by its member's "
                              "extension in lower case (webdataset lowercases it)", f->name);
        for (size_t q = 0; q < sizeof images / sizeof *images; q++)
            if (!strcmp(f->name, images[q]))
                return ch_err(err, CHUTE_EINVAL,
                              "extra_keys: \"%s\" is an image member (the image comes as the "
                              "image)", f->name);
        int kind = fmt_wds_field_kind(f->name, nl);
        int ok = kind == f->kind && (kind != CHUTE_FIELD_INT64 || f->ndim == 0);
        if (!ok) {
            char have[96];
            if (f->kind == CHUTE_FIELD_BYTES)
                snprintf(have, sizeof have, "bytes");
            else
                ch_field_describe(f, have, sizeof have);
            return ch_err(err, CHUTE_EINVAL,
                          "extra_keys: \"%s\" is declared %s, but the wds format reads a .%s "
                          "member as %s (.cls: \"cls:int64\"; NAME.npy: a tensor, "
                          "\"NAME.npy:DTYPE[DIMS]\"; any other member: \"NAME:bytes\")",
                          f->name, have, f->name,
                          kind == CHUTE_FIELD_INT64    ? "an int64 scalar"
                          : kind == CHUTE_FIELD_TENSOR ? "a .npy tensor"
                                                       : "bytes");
        }
        int fi = ch_ds_field_add(ds, f->name, nl, f->kind, f->dtype, err);
        if (fi < 0)
            return err->code;
        ds->fields[fi] = *f;
    }
    for (int k = 0; k < n; k++) /* after every add: ds->fields moves as it grows */
        sp->keys[2 + k] = ds->fields[k].name;
    sp->nfields = (uint32_t)n;
    sp->read_fields = n ? ch_stream_tar_fields : NULL;
    return CHUTE_OK;
}

/* format "tfrecord": the keys, label_offset and declared fields. */
static int st_tfr_setup(chute_dataset *ds, ch_stream_spec *sp, const chute_dataset_options *opt,
                        chute_error *err)
{
    const char *fmt = opt->format;
    int kafka = strncmp(ds->root, "kafka://", 8) == 0;
    if (fmt && strcmp(fmt, "tfrecord") != 0 && !(strcmp(fmt, "wds") == 0 && !kafka))
        return ch_err(err, CHUTE_EINVAL,
                      "%s: format \"%s\": a stream's records are %s or \"tfrecord\" "
                      "(TFRecord-framed tf.train.Example)", ds->root, fmt,
                      kafka ? "encoded images (format unset)" : "a WebDataset tar (\"wds\")");
    if (!fmt || strcmp(fmt, "tfrecord") != 0) {
        if (opt->extra_keys && *opt->extra_keys && kafka)
            return ch_err(err, CHUTE_EINVAL,
                          "%s: extra_keys on a Kafka stream needs format \"tfrecord\" (typed "
                          "fields come from its Example records)", ds->root);
        return st_tar_setup(ds, sp, opt, err);
    }
    sp->tfr = 1;
    sp->label_offset = opt->label_offset;
    sp->key_store[0] = strdup(opt->image_key ? opt->image_key : "image/encoded");
    sp->key_store[1] = strdup(opt->label_key ? opt->label_key : "image/class/label");
    if (!sp->key_store[0] || !sp->key_store[1])
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    sp->keys[0] = sp->key_store[0];
    sp->keys[1] = sp->key_store[1];
    ch_field decl[CH_FIELD_MAX];
    int n = 0;
    int rc = ch_field_decl_parse(opt->extra_keys, decl, CH_FIELD_MAX, &n, err);
    if (rc != CHUTE_OK)
        return rc;
    for (int k = 0; k < n; k++) {
        if (!strcmp(decl[k].name, sp->keys[0]) || !strcmp(decl[k].name, sp->keys[1]))
            return ch_err(err, CHUTE_EINVAL,
                          "extra_keys: \"%s\" is the image or label key (those come as images "
                          "and labels)", decl[k].name);
        int fi = ch_ds_field_add(ds, decl[k].name, strlen(decl[k].name), decl[k].kind,
                                 decl[k].dtype, err);
        if (fi < 0)
            return err->code;
        ds->fields[fi] = decl[k];
    }
    for (int k = 0; k < n; k++) /* after every add: ds->fields moves as it grows */
        sp->keys[2 + k] = ds->fields[k].name;
    sp->nfields = (uint32_t)n;
    sp->read_fields = n ? ch_stream_tfr_fields : NULL;
    if (!kafka)
        sp->ops = &ch_stream_tfr_ops;
    return CHUTE_OK;
}

static int st_probe(const ch_source_ops *src, const char *path, int is_dir, char *why, size_t n)
{
    (void)src;
    (void)path;
    (void)is_dir;
    snprintf(why, n, "only pipe:COMMAND and - are streams");
    return CH_PROBE_NO;
}

static int st_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                   chute_error *err)
{
    (void)opt;
    ch_stream_spec *sp = calloc(1, sizeof *sp);
    if (!sp)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = sp;
    if (strncmp(path, "kafka://", 8) == 0) {
        int rc = st_open_kafka(ds, sp, path, err);
        return rc == CHUTE_OK ? st_tfr_setup(ds, sp, opt, err) : rc;
    }
    sp->ops = &ch_stream_tar_ops;
    sp->name = strdup(path);
    if (strcmp(path, "-") != 0) {
        const char *c = path + 5;
        while (*c == ' ' || *c == '\t')
            c++;
        if (!*c)
            return ch_err(err, CHUTE_EINVAL, "%s: pipe: needs a command", path);
        sp->cmd = strdup(c);
        if (!sp->cmd)
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    if (!sp->name)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = st_tfr_setup(ds, sp, opt, err);
    if (rc != CHUTE_OK)
        return rc;
    ds->stream = sp;
    ds->n = 0;
    ds->nclasses = 0;
    return CHUTE_OK;
}

static int st_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                   chute_error *err)
{
    (void)buf;
    (void)cap;
    (void)out_len;
    return ch_err(err, CHUTE_EUNSUPPORTED,
                  "%s: a stream has no sample %llu to read by number; read it through a loader",
                  ds->root, (unsigned long long)i);
}

/* Declared fields are read by the loader from the stream's records
 * (ch_stream_tfr_fields); there is no sample to read by number. */
static int st_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                          size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    (void)req;
    (void)nreq;
    (void)scratch;
    (void)max_bytes;
    return st_read(ds, i, NULL, 0, NULL, err);
}

static uint64_t st_sample_size(const chute_dataset *ds, uint64_t i)
{
    (void)ds;
    (void)i;
    return 0;
}

static void st_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    snprintf(buf, n, "%s: sample %llu", ds->root, (unsigned long long)i);
}

static void st_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    (void)i;
    snprintf(buf, n, "%s", ds->root);
}

static void st_close(void *impl)
{
    ch_stream_spec *sp = impl;
    if (!sp)
        return;
    free(sp->cmd);
    free(sp->name);
    free(sp->uri);
    free(sp->key_store[0]);
    free(sp->key_store[1]);
    free(sp);
}

const ch_format_ops ch_format_stream = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "stream",
    .probe = st_probe,
    .open = st_open,
    .read = st_read,
    .read_fields = st_read_fields,
    .sample_size = st_sample_size,
    .describe = st_describe,
    .file_of = st_file_of,
    .close = st_close,
};

int ch_stream_dataset_open(const char *path, const chute_dataset_options *opt,
                           chute_dataset **out_ds, chute_error *err)
{
    if (opt && ch_dataset_options_check(opt, err) != CHUTE_OK)
        return CHUTE_EINVAL;
    chute_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->fmt = &ch_format_stream;
    ds->src = ch_source_for(path);
    ds->root = strdup(path);
    chute_dataset_options zero = {0};
    int rc = ds->root ? st_open(ds, path, opt ? opt : &zero, err)
                      : ch_err(err, CHUTE_ENOMEM, "out of memory");
    if (rc != CHUTE_OK) {
        ch_dataset_free_fields(ds);
        free(ds);
        return rc;
    }
    *out_ds = ds;
    return CHUTE_OK;
}
