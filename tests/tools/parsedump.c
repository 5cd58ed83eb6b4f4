/*
 * parsedump.c — prints what the format parsers (src/format/parse.h) read
 * from a file, as JSON, so tests/test_parse_fixtures.py can compare it
 * with what TensorFlow and webdataset wrote (tests/fixtures/expected.json).
 *
 *   parsedump tfr FILE [none|gzip|zlib] KEY:KIND ...   records + features
 *   parsedump dali IDX TFRECORD                         records from a .idx
 *   parsedump tar FILE                                  regular members
 *   parsedump wds FILE [strict|lenient]                 samples
 *   parsedump split - NAME ...                          base_plus_ext + meta rule
 *
 * KIND is bytes, int64 or float.  Errors: {"error": STATUS, "message": ...}
 * and exit status 1.  Bytes are printed as hex (the fixtures are small).
 */
#define _GNU_SOURCE
#include "format/parse.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void hex(const uint8_t *p, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
    putchar('"');
}

static void jstr(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int fail(const chute_error *err, int rc)
{
    printf("{\"error\": \"%s\", \"message\": ", chute_status_name(rc));
    jstr(err->message, strlen(err->message));
    printf("}\n");
    return 1;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static void print_records(const fmt_tfr_index *ix, const uint8_t *data, int nkeys,
                          char **keys, char **kinds)
{
    printf("{\"records\": [");
    for (uint64_t i = 0; i < ix->count; i++) {
        const fmt_tfr_record *r = &ix->recs[i];
        printf("%s{\"offset\": %llu, \"length\": %llu", i ? ", " : "",
               (unsigned long long)r->offset, (unsigned long long)r->length);
        if (nkeys && data) {
            chute_error err;
            int rc = fmt_tfr_check_data(data + r->offset + 12, r->length, "rec", r->offset, &err);
            fmt_pb_feature f[64];
            if (rc == CHUTE_OK)
                rc = fmt_pb_example_find(data + r->offset + 12, r->length,
                                         (const char *const *)keys, (size_t)nkeys, f, "rec",
                                         r->offset + 12, &err);
            if (rc != CHUTE_OK) {
                printf(", \"error\": ");
                jstr(err.message, strlen(err.message));
            } else {
                printf(", \"features\": {");
                for (int k = 0; k < nkeys; k++) {
                    static const char *kn[] = {"missing", "none", "bytes", "float", "int64"};
                    printf("%s\"%s\": {\"kind\": \"%s\", \"values\": [", k ? ", " : "", keys[k],
                           kn[f[k].kind]);
                    if (f[k].kind == FMT_PB_BYTES) {
                        size_t pos = 0, n;
                        const uint8_t *p;
                        int first = 1;
                        while (fmt_pb_bytes_next(&f[k], &pos, &p, &n)) {
                            printf(first ? "" : ", ");
                            hex(p, n);
                            first = 0;
                        }
                    } else if (f[k].kind == FMT_PB_INT64) {
                        int64_t *v = malloc((size_t)f[k].count * 8 + 8);
                        size_t n = fmt_pb_int64_decode(&f[k], v, (size_t)f[k].count);
                        for (size_t j = 0; j < n; j++)
                            printf("%s%lld", j ? ", " : "", (long long)v[j]);
                        free(v);
                    } else if (f[k].kind == FMT_PB_FLOAT) {
                        float *v = malloc((size_t)f[k].count * 4 + 4);
                        size_t n = fmt_pb_float_decode(&f[k], v, (size_t)f[k].count);
                        for (size_t j = 0; j < n; j++)
                            printf("%s%.9g", j ? ", " : "", (double)v[j]);
                        free(v);
                    }
                    printf("], \"count\": %llu}", (unsigned long long)f[k].count);
                }
                printf("}");
            }
        }
        printf("}");
    }
    printf("]}\n");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: parsedump tfr|dali|tar|wds FILE ...\n");
        return 2;
    }
    const char *cmd = argv[1], *path = argv[2];
    chute_error err;
    if (!strcmp(cmd, "split")) {
        printf("[");
        for (int i = 3; i < argc; i++) {
            size_t kl, eo, len = strlen(argv[i]);
            printf("%s[", i > 3 ? ", " : "");
            if (fmt_wds_split_name(argv[i], len, &kl, &eo)) {
                jstr(argv[i], kl);
                printf(", ");
                jstr(argv[i] + eo, len - eo);
            } else {
                printf("null, null");
            }
            printf(", %s]", fmt_wds_is_meta(argv[i], len) ? "true" : "false");
        }
        printf("]\n");
        return 0;
    }
    size_t n;
    uint8_t *data = slurp(path, &n);
    if (!data) {
        fprintf(stderr, "parsedump: cannot read %s\n", path);
        return 2;
    }
    int rc;
    if (!strcmp(cmd, "tfr")) {
        const char *comp = argc > 3 ? argv[3] : "none";
        int nkeys = argc > 4 ? argc - 4 : 0;
        char *keys[64];
        for (int k = 0; k < nkeys && k < 64; k++)
            keys[k] = argv[4 + k];
        fmt_tfr_index ix;
        uint8_t *plain = data;
        size_t pn = n;
        if (!strcmp(comp, "none")) {
            /* through the fd path, with a small window */
            int fd = open(path, O_RDONLY);
            fmt_reader r;
            fmt_reader_fd(&r, fd, n, 256, path, &err);
            fmt_tfr_opts o = {.verify_data = 1};
            rc = fmt_tfr_index_build(&r, &o, &ix, &err);
            fmt_reader_free(&r);
            close(fd);
        } else {
            char cache[] = "/tmp/parsedump-XXXXXX";
            int cfd = mkstemp(cache);
            unlink(cache);
            int fd = open(path, O_RDONLY);
            rc = fmt_tfr_index_compressed(fd, path,
                                          !strcmp(comp, "gzip") ? FMT_TFR_GZIP : FMT_TFR_ZLIB,
                                          NULL, cfd, &ix, &err);
            close(fd);
            struct stat st;
            fstat(cfd, &st);
            pn = (size_t)st.st_size;
            plain = malloc(pn + 1);
            if (pread(cfd, plain, pn, 0) != (ssize_t)pn)
                pn = 0;
            close(cfd);
        }
        if (rc)
            fail(&err, rc);
        else
            print_records(&ix, plain, nkeys, keys, NULL);
        if (plain != data)
            free(plain);
        fmt_tfr_index_free(&ix);
    } else if (!strcmp(cmd, "dali")) {
        struct stat st;
        if (argc < 4 || stat(argv[3], &st) != 0) {
            free(data);
            return 2;
        }
        fmt_tfr_index ix;
        rc = fmt_tfr_index_parse_dali((const char *)data, n, path, (uint64_t)st.st_size, &ix,
                                      &err);
        if (rc)
            fail(&err, rc);
        else
            print_records(&ix, NULL, 0, NULL, NULL);
        fmt_tfr_index_free(&ix);
    } else if (!strcmp(cmd, "tar") || !strcmp(cmd, "wds")) {
        fmt_reader r;
        fmt_reader_mem(&r, data, n, path);
        fmt_tar_index ix;
        rc = fmt_tar_index_build(&r, NULL, &ix, &err);
        if (rc) {
            fail(&err, rc);
        } else if (!strcmp(cmd, "tar")) {
            printf("{\"end\": %d, \"skipped\": %llu, \"members\": [", (int)ix.end,
                   (unsigned long long)ix.skipped);
            for (uint64_t i = 0; i < ix.count; i++) {
                printf("%s{\"name\": ", i ? ", " : "");
                jstr(fmt_tar_name(&ix, i), ix.m[i].name_len);
                printf(", \"data_offset\": %llu, \"size\": %llu, \"data\": ",
                       (unsigned long long)ix.m[i].data_offset, (unsigned long long)ix.m[i].size);
                hex(data + ix.m[i].data_offset, (size_t)ix.m[i].size);
                printf("}");
            }
            printf("]}\n");
        } else {
            fmt_wds_policy pol =
                argc > 3 && !strcmp(argv[3], "lenient") ? FMT_WDS_LENIENT : FMT_WDS_STRICT;
            fmt_wds_index w;
            rc = fmt_wds_group(&ix, pol, path, &w, &err);
            if (rc) {
                fmt_wds_index_free(&w);
                fmt_tar_index_free(&ix);
                free(data);
                return fail(&err, rc);
            }
            printf("{\"skipped_names\": %llu, \"duplicates\": %llu, \"split\": %llu, "
                   "\"samples\": [",
                   (unsigned long long)w.skipped_names, (unsigned long long)w.duplicates,
                   (unsigned long long)w.split);
            for (uint64_t s = 0; s < w.count; s++) {
                const fmt_wds_sample *sm = &w.samples[s];
                printf("%s{\"key\": ", s ? ", " : "");
                jstr(ix.names + sm->key_off, sm->key_len);
                printf(", \"fields\": {");
                for (uint64_t f = 0; f < sm->nfields; f++) {
                    const fmt_wds_field *fl = &w.fields[sm->first_field + f];
                    const fmt_tar_member *m = &ix.m[fl->member];
                    printf("%s", f ? ", " : "");
                    jstr(fmt_tar_name(&ix, fl->member) + fl->ext_off, fl->ext_len);
                    printf(": ");
                    hex(data + m->data_offset, (size_t)m->size);
                }
                printf("}}");
            }
            printf("]}\n");
            fmt_wds_index_free(&w);
        }
        fmt_tar_index_free(&ix);
    } else {
        fprintf(stderr, "parsedump: unknown command %s\n", cmd);
        free(data);
        return 2;
    }
    free(data);
    return rc ? 1 : 0;
}
