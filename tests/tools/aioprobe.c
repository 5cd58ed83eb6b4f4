/*
 * aioprobe.c — drives a remote source's asynchronous reads (aio_open /
 * aio_submit / aio_reap, source ops version 4) directly, the way the
 * read-ahead stage will, and checks every byte against a local copy of
 * each object (the file the test uploaded).  tests/test_remote_aio.py
 * runs it against SeaweedFS, a loopback HTTP server and a fault proxy.
 *
 *   aioprobe [options] URL=LOCAL... [--missing URL]...
 *     --n N        reads in all (default 200)
 *     --depth D    engine depth = most reads held at once (default 32)
 *     --seed S     the ranges' random seed (default 1)
 *     --gap B      coalesce_gap_bytes (default: the source's default)
 *     --max B      coalesce_max_bytes (default: the source's default)
 *     --dataset R  take the source from chute_dataset_open_ex(R) with
 *                  coalesce_gap_bytes = --gap (the dataset's option
 *                  reaching the engine), not from ch_remote_tuned
 *
 * The reads: half come as runs of 2..8 neighbouring records (touching or
 * a few hundred bytes apart, what a shard's consecutive samples look
 * like), the rest are random ranges; every tenth is a whole-object read
 * (h == NULL), some with a buffer one byte short (CH_ESMALL expected,
 * got = the size).  Each --missing URL is read whole once, among the
 * others; its error goes to stderr as "ERR <status>: <message>".
 * Reads are submitted while fewer than D are held, then reaped, so
 * everything submitted between two reaps may coalesce.
 * stdout: "requests R gets G coalesced C gap_bytes B retries T failed F".
 * Exit 0 when every read of a URL=LOCAL object returned exactly its
 * bytes, 2 on a byte mismatch or a wrong status, 3 on a setup error.
 */
#include "format/format.h"
#include "io/io.h"
#include "io/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct obj {
    const char *url;
    uint8_t *bytes;
    uint64_t size;
    void *h;
} obj;

typedef struct plan {
    int o;           /* object index, or -1 - missing index */
    int whole;       /* 1: whole read, 2: whole read one byte short */
    uint64_t off;
    size_t len;
} plan;

static uint64_t rng(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return ch_mix64(*s);
}

static int load(const char *path, uint8_t **out, uint64_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc(n > 0 ? (size_t)n : 1);
    if (!*out || fread(*out, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return -1;
    }
    fclose(f);
    *size = (uint64_t)n;
    return 0;
}

int main(int argc, char **argv)
{
    unsigned n = 200, depth = 32;
    uint64_t seed = 1;
    ch_remote_aio_opts opts = {CH_REMOTE_COALESCE_GAP, CH_REMOTE_COALESCE_MAX};
    obj objs[16];
    const char *missing[8];
    const char *dataset = NULL;
    int nobj = 0, nmiss = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 < argc && !strcmp(a, "--n"))
            n = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--depth"))
            depth = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--seed"))
            seed = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--gap"))
            opts.coalesce_gap_bytes = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--max"))
            opts.coalesce_max_bytes = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--dataset"))
            dataset = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--missing") && nmiss < 8)
            missing[nmiss++] = argv[++i];
        else if (strchr(a, '=') && nobj < 16) {
            char *eq = strrchr(argv[i], '=');
            *eq = '\0';
            objs[nobj].url = argv[i];
            if (load(eq + 1, &objs[nobj].bytes, &objs[nobj].size) != 0) {
                fprintf(stderr, "cannot read %s\n", eq + 1);
                return 3;
            }
            nobj++;
        } else {
            fprintf(stderr, "usage: aioprobe [--n N] [--depth D] [--seed S] [--gap B] [--max B] "
                            "URL=LOCAL... [--missing URL]...\n");
            return 3;
        }
    }
    if (!nobj || !depth || !n)
        return 3;
    const ch_source_ops *base = ch_source_for(objs[0].url);
    if (!base->aio_open) {
        fprintf(stderr, "source %s has no aio_open\n", base->name);
        return 3;
    }
    ch_source_ops src;
    ch_remote_tuned(base, &opts, &src);
    chute_error err;
    chute_dataset *ds = NULL;
    if (dataset) {
        chute_dataset_options dopt = {0};
        dopt.coalesce_gap_bytes = opts.coalesce_gap_bytes;
        if (chute_dataset_open_ex(dataset, &dopt, &ds, &err) != CHUTE_OK) {
            fprintf(stderr, "dataset %s: %s\n", dataset, err.message);
            return 3;
        }
        src = *ds->src;
    }
    for (int i = 0; i < nobj; i++) {
        uint64_t size = 0;
        int rc = ch_src_open(&src, objs[i].url, &objs[i].h, &size, &err);
        if (rc != CHUTE_OK || size != objs[i].size) {
            fprintf(stderr, "open %s: %s (size %llu, local %llu)\n", objs[i].url,
                    rc ? err.message : "ok", (unsigned long long)size,
                    (unsigned long long)objs[i].size);
            return 3;
        }
    }
    /* the plan: runs of neighbours, random ranges, whole reads */
    plan *p = calloc(n + (unsigned)nmiss, sizeof *p);
    ch_aio_req *reqs = calloc(n + (unsigned)nmiss, sizeof *reqs);
    if (!p || !reqs)
        return 3;
    uint64_t s = seed;
    unsigned k = 0;
    while (k < n) {
        int o = (int)(rng(&s) % (uint64_t)nobj);
        uint64_t size = objs[o].size;
        uint64_t r = rng(&s) % 10;
        if (r == 0) {
            p[k].o = o;
            p[k].whole = 1 + (int)(rng(&s) % 3 == 0 && size > 0);
            k++;
        } else if (r < 5) {
            unsigned run = 2 + (unsigned)(rng(&s) % 7);
            uint64_t off = rng(&s) % size;
            for (unsigned j = 0; j < run && k < n && off < size; j++) {
                size_t len = 1 + (size_t)(rng(&s) % 20000);
                if (len > size - off)
                    len = (size_t)(size - off);
                p[k++] = (plan){o, 0, off, len};
                off += len + (rng(&s) % 2 ? 0 : rng(&s) % 700);
            }
        } else {
            uint64_t off = rng(&s) % size;
            size_t len = 1 + (size_t)(rng(&s) % CH_MIN(size - off, (uint64_t)300000));
            p[k++] = (plan){o, 0, off, len};
        }
    }
    for (int m = 0; m < nmiss; m++) { /* spread among the others */
        unsigned at = (unsigned)(rng(&s) % (k + 1));
        memmove(p + at + 1, p + at, (k - at) * sizeof *p);
        p[at] = (plan){-1 - m, 1, 0, 0};
        k++;
    }
    for (unsigned i = 0; i < k; i++) {
        ch_aio_req *q = &reqs[i];
        q->tag = i;
        if (p[i].o < 0) {
            q->path = missing[-1 - p[i].o];
            q->len = 4096;
        } else if (p[i].whole) {
            q->path = objs[p[i].o].url;
            q->len = (size_t)objs[p[i].o].size - (p[i].whole == 2);
        } else {
            q->path = objs[p[i].o].url;
            q->h = objs[p[i].o].h;
            q->off = p[i].off;
            q->len = p[i].len;
        }
        q->buf = malloc(q->len ? q->len : 1);
        if (!q->buf)
            return 3;
    }
    void *eng = NULL;
    if (src.aio_open(src.self, depth, &eng, &err) != CHUTE_OK) {
        fprintf(stderr, "aio_open: %s\n", err.message);
        return 3;
    }
    ch_aio_req **done = calloc(depth, sizeof *done);
    unsigned next = 0, held = 0, finished = 0;
    int bad = 0;
    while (finished < k) {
        while (held < depth && next < k) {
            if (src.aio_submit(eng, &reqs[next]) != CHUTE_OK) {
                fprintf(stderr, "aio_submit: %s\n", reqs[next].err.message);
                return 3;
            }
            next++;
            held++;
        }
        int got = src.aio_reap(eng, done, depth, -1);
        if (got < 0) {
            fprintf(stderr, "aio_reap: engine failure %d\n", got);
            return 3;
        }
        for (int j = 0; j < got; j++) {
            ch_aio_req *q = done[j];
            const plan *pl = &p[q->tag];
            held--;
            finished++;
            if (pl->o < 0) {
                if (q->status == CHUTE_OK) {
                    fprintf(stderr, "read %llu of missing %s succeeded\n",
                            (unsigned long long)q->tag, q->path);
                    bad = 1;
                } else {
                    fprintf(stderr, "ERR %s: %s\n", chute_status_name(q->status), q->err.message);
                }
                continue;
            }
            const obj *ob = &objs[pl->o];
            if (pl->whole == 2) {
                if (q->status != CH_ESMALL || q->got != ob->size) {
                    fprintf(stderr, "read %llu: whole %s into %zu bytes: status %d got %zu, want "
                                    "CH_ESMALL and %llu\n",
                            (unsigned long long)q->tag, q->path, q->len, q->status, q->got,
                            (unsigned long long)ob->size);
                    bad = 1;
                }
                continue;
            }
            if (q->status != CHUTE_OK) {
                fprintf(stderr, "read %llu (%s @%llu+%zu): %s: %s\n", (unsigned long long)q->tag,
                        q->path, (unsigned long long)q->off, q->len,
                        chute_status_name(q->status), q->err.message);
                bad = 1;
                continue;
            }
            uint64_t off = pl->whole ? 0 : pl->off;
            if (q->got != q->len || memcmp(q->buf, ob->bytes + off, q->len) != 0) {
                fprintf(stderr, "read %llu (%s @%llu+%zu): got %zu bytes, %s\n",
                        (unsigned long long)q->tag, q->path, (unsigned long long)off, q->len,
                        q->got, q->got == q->len ? "they differ from the object's" : "short");
                bad = 1;
            }
        }
    }
    ch_remote_aio_stats st;
    ch_remote_aio_stats_get(eng, &st);
    printf("requests %llu gets %llu coalesced %llu gap_bytes %llu retries %llu failed %llu\n",
           (unsigned long long)st.requests, (unsigned long long)st.gets,
           (unsigned long long)st.coalesced, (unsigned long long)st.gap_bytes,
           (unsigned long long)st.retries, (unsigned long long)st.failed);
    src.aio_close(eng);
    for (unsigned i = 0; i < k; i++)
        free(reqs[i].buf);
    for (int i = 0; i < nobj; i++) {
        src.close(objs[i].h);
        free(objs[i].bytes);
    }
    chute_dataset_close(ds);
    free(done);
    free(reqs);
    free(p);
    return bad ? 2 : 0;
}
