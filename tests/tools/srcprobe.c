/*
 * srcprobe.c — drives one source's ops directly (ch_source_for(path)), so
 * the remote-source tests (tests/test_remote.py) can check stat, list,
 * open/read_at and read_file against a real server without any format in
 * between, and compare the bytes with what a standard client uploaded.
 *
 *   srcprobe stat PATH                -> "file SIZE" | "dir"
 *   srcprobe list PATH                -> "NAME\tF|D\tSIZE" per entry
 *   srcprobe get PATH OFF LEN         -> the bytes, on stdout (open + read_at)
 *   srcprobe readfile PATH            -> the bytes (read_file, growing on CH_ESMALL)
 *   srcprobe pget PATH THREADS CHUNK  -> the whole object, read in CHUNK
 *                                        ranges by THREADS threads sharing one handle
 *   srcprobe shard PATH               -> the shard index read through the
 *                                        source, one "off len crc label ok" per record
 *                                        (ok: the record's bytes match its CRC)
 *   srcprobe put PATH                 -> create PATH from stdin (ch_remote_put: never
 *                                        overwrites; needs libcurl)
 *   srcprobe delete PATH              -> remove PATH (ch_remote_delete)
 * Errors: "ERR <status name>: <message>" on stderr, exit 3 (4 for
 * CHUTE_ENOTFOUND, 5 for CHUTE_EUNSUPPORTED).
 */
#include "format/format.h"
#include "io/io.h"
#include "io/remote.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static int fail(int rc, const chute_error *e)
{
    fprintf(stderr, "ERR %s: %s\n", chute_status_name(rc), e->message);
    return rc == CHUTE_ENOTFOUND ? 4 : rc == CHUTE_EUNSUPPORTED ? 5 : 3;
}

static int print_entry(void *u, const char *name, const ch_stat *st)
{
    printf("%s\t%c\t%llu\n", name, st->type == CH_ENT_DIR ? 'D' : st->type == CH_ENT_FILE ? 'F' : 'O',
           (unsigned long long)st->size);
    return 0;
}

typedef struct pjob {
    const ch_source_ops *src;
    void *h;
    const char *path;
    uint8_t *buf;
    uint64_t size, chunk;
    atomic_uint_fast64_t next;
    atomic_int rc;
    chute_error err;
    pthread_mutex_t mu;
} pjob;

static void *pworker(void *u)
{
    pjob *j = u;
    for (;;) {
        uint64_t i = atomic_fetch_add(&j->next, 1);
        uint64_t off = i * j->chunk;
        if (off >= j->size || atomic_load(&j->rc))
            return NULL;
        size_t len = (size_t)CH_MIN(j->chunk, j->size - off);
        chute_error e;
        int rc = j->src->read_at(j->h, j->path, off, j->buf + off, len, &e);
        if (rc != CHUTE_OK) {
            pthread_mutex_lock(&j->mu);
            if (!atomic_load(&j->rc)) {
                j->err = e;
                atomic_store(&j->rc, rc);
            }
            pthread_mutex_unlock(&j->mu);
            return NULL;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: srcprobe stat|list|get|readfile|pget|shard PATH ...\n");
        return 2;
    }
    const char *cmd = argv[1], *path = argv[2];
    const ch_source_ops *src = ch_source_for(path);
    chute_error e;
    int rc;
    if (!strcmp(cmd, "stat")) {
        ch_stat st;
        rc = src->stat(path, &st, &e);
        if (rc)
            return fail(rc, &e);
        if (st.type == CH_ENT_FILE)
            printf("file %llu\n", (unsigned long long)st.size);
        else
            printf("%s\n", st.type == CH_ENT_DIR ? "dir" : "other");
        return 0;
    }
    if (!strcmp(cmd, "list")) {
        rc = src->list(path, print_entry, NULL, &e);
        return rc ? fail(rc, &e) : 0;
    }
    if (!strcmp(cmd, "readfile")) {
        size_t cap = 16, len = 0;
        uint8_t *buf = malloc(cap);
        for (;;) {
            rc = src->read_file(path, buf, cap, &len, &e);
            if (rc != CH_ESMALL)
                break;
            free(buf);
            cap = len;
            buf = malloc(cap ? cap : 1);
        }
        if (rc == CHUTE_OK)
            fwrite(buf, 1, len, stdout);
        free(buf);
        return rc ? fail(rc, &e) : 0;
    }
#ifdef CHUTE_HAVE_CURL
    if (!strcmp(cmd, "put") || !strcmp(cmd, "delete")) {
        ch_remote *s = NULL;
        size_t cap = 1 << 16, len = 0, n;
        uint8_t *buf = malloc(cap);
        while (buf && (n = fread(buf + len, 1, cap - len, stdin)) > 0)
            if ((len += n) == cap) {
                uint8_t *nb = realloc(buf, cap *= 2);
                if (!nb)
                    free(buf);
                buf = nb;
            }
        if (!buf)
            return 2;
        rc = ch_remote_new(path, &s, &e);
        if (rc == CHUTE_OK)
            rc = cmd[0] == 'p' ? ch_remote_put(s, path, buf, len, &e)
                               : ch_remote_delete(s, path, &e);
        ch_remote_free(s);
        free(buf);
        return rc ? fail(rc, &e) : 0;
    }
#endif
    void *h = NULL;
    uint64_t size = 0;
    rc = src->open(path, &h, &size, &e);
    if (rc)
        return fail(rc, &e);
    if (!strcmp(cmd, "get") && argc == 5) {
        uint64_t off = strtoull(argv[3], NULL, 10);
        size_t len = (size_t)strtoull(argv[4], NULL, 10);
        uint8_t *buf = malloc(len ? len : 1);
        rc = src->read_at(h, path, off, buf, len, &e);
        if (rc == CHUTE_OK)
            fwrite(buf, 1, len, stdout);
        free(buf);
    } else if (!strcmp(cmd, "pget") && argc == 5) {
        int nt = atoi(argv[3]);
        pjob j = {.src = src, .h = h, .path = path, .size = size,
                  .chunk = strtoull(argv[4], NULL, 10)};
        pthread_mutex_init(&j.mu, NULL);
        j.buf = malloc(size ? size : 1);
        pthread_t t[64];
        nt = nt < 1 ? 1 : nt > 64 ? 64 : nt;
        for (int i = 0; i < nt; i++)
            pthread_create(&t[i], NULL, pworker, &j);
        for (int i = 0; i < nt; i++)
            pthread_join(t[i], NULL);
        rc = atomic_load(&j.rc);
        e = j.err;
        if (rc == CHUTE_OK)
            fwrite(j.buf, 1, size, stdout);
        free(j.buf);
        pthread_mutex_destroy(&j.mu);
    } else if (!strcmp(cmd, "shard")) {
        ch_shard_index ix;
        rc = ch_shard_read_index(src, h, path, size, &ix, &e);
        if (rc == CHUTE_OK) {
            for (uint64_t i = 0; i < ix.count && rc == CHUTE_OK; i++) {
                const ch_shard_entry *en = &ix.entries[i];
                uint8_t *b = malloc(en->length ? en->length : 1);
                rc = src->read_at(h, path, en->offset, b, en->length, &e);
                if (rc == CHUTE_OK)
                    printf("%llu %u %08x %d %d\n", (unsigned long long)en->offset, en->length,
                           en->crc32, en->label, ch_crc32(b, en->length) == en->crc32);
                free(b);
            }
            ch_shard_index_free(&ix);
        }
    } else {
        fprintf(stderr, "srcprobe: bad command\n");
        rc = CHUTE_EINVAL;
        snprintf(e.message, sizeof e.message, "bad command");
    }
    src->close(h);
    return rc ? fail(rc, &e) : 0;
}
