/*
 * parse_speed.c — how fast are the format parsers (src/format/parse.h)?
 *
 *   build/tests/parse_speed [--mb 256] [--dir /tmp]
 *
 * Prints one JSON line per measurement:
 *   crc32c          GB/s of the SSE4.2 path and of the table path (64 MiB,
 *                   in cache-cold 64 MiB buffer, best of 5)
 *   tfr_index       ms to index a --mb MiB TFRecord file of 110 KB records
 *                   (ImageNet-sized JPEGs) and of 1 KB records: from memory,
 *                   from the file through the 1 MiB window (page cache warm),
 *                   and with every data CRC verified
 *   tfr_gzip_index  MB/s of uncompressed stream indexed through inflate
 *   example_find    ns per tf.train.Example (image bytes + label + 3 more)
 *   tar_index       ms to index a --mb MiB tar of 110 KB members
 *
 * The files are written under --dir and removed at the end.  Numbers in
 * docs/DESIGN.md ("Format parsers") come from this program.
 */
#define _GNU_SOURCE
#include "format/parse.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static double now_s(void)
{
    return (double)ch_now_ns() * 1e-9;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A TFRecord stream of ~total bytes with records of rec bytes. */
static uint8_t *make_tfr(size_t total, size_t rec, size_t *out_n)
{
    uint8_t *b = malloc(total + rec + 64);
    size_t n = 0;
    uint64_t s = 1;
    while (n + rec + 16 <= total) {
        put_le(b + n, rec, 8);
        put_le(b + n + 8, ch_crc32c_mask(ch_crc32c(0, b + n, 8)), 4);
        for (size_t i = 0; i < rec; i += 8) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            memcpy(b + n + 12 + i, &s, CH_MIN(8, rec - i));
        }
        put_le(b + n + 12 + rec, ch_crc32c_mask(ch_crc32c(0, b + n + 12, rec)), 4);
        n += rec + 16;
    }
    *out_n = n;
    return b;
}

static int write_file(const char *path, const uint8_t *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    size_t w = 0;
    while (w < n) {
        ssize_t k = write(fd, p + w, n - w);
        if (k <= 0)
            break;
        w += (size_t)k;
    }
    close(fd);
    return w == n ? 0 : -1;
}

static double best_index(fmt_reader *r, const fmt_tfr_opts *o, uint64_t *count)
{
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        fmt_tfr_index ix;
        chute_error err;
        double t = now_s();
        int rc = fmt_tfr_index_build(r, o, &ix, &err);
        t = now_s() - t;
        if (rc) {
            fprintf(stderr, "index: %s\n", err.message);
            exit(1);
        }
        *count = ix.count;
        fmt_tfr_index_free(&ix);
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t mb = 256;
    const char *dir = "/tmp";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb"))
            mb = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
    }
    size_t total = mb << 20;

    /* CRC32C */
    {
        size_t n = 64u << 20;
        uint8_t *b = malloc(n);
        for (size_t i = 0; i < n; i++)
            b[i] = (uint8_t)(i * 131 + (i >> 9));
        double bh = 1e9, bs = 1e9;
        uint32_t c1 = 0, c2 = 0;
        int hw = ch_crc32c_hw(0, b, 1, &c1) == CHUTE_OK;
        for (int rep = 0; rep < 5; rep++) {
            double t = now_s();
            if (hw)
                ch_crc32c_hw(0, b, n, &c1);
            bh = CH_MIN(bh, now_s() - t);
            t = now_s();
            c2 = ch_crc32c_sw(0, b, n);
            bs = CH_MIN(bs, now_s() - t);
        }
        printf("{\"bench\": \"crc32c\", \"hw_gbs\": %.2f, \"sw_gbs\": %.2f, \"agree\": %s}\n",
               hw ? n / bh / 1e9 : 0.0, n / bs / 1e9, !hw || c1 == c2 ? "true" : "false");
        free(b);
    }

    char path[4096];
    snprintf(path, sizeof path, "%s/parse_speed-%d.tfrecord", dir, (int)getpid());
    size_t recs[] = {110000, 1000};
    for (int k = 0; k < 2; k++) {
        size_t n;
        uint8_t *b = make_tfr(total, recs[k], &n);
        if (write_file(path, b, n)) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        fmt_reader r;
        uint64_t count;
        fmt_reader_mem(&r, b, n, "mem");
        double tm = best_index(&r, NULL, &count);
        fmt_tfr_opts v = {.verify_data = 1};
        double tmv = best_index(&r, &v, &count);
        int fd = open(path, O_RDONLY);
        fmt_reader_fd(&r, fd, n, 0, path, NULL);
        double tf = best_index(&r, NULL, &count);
        double tfv = best_index(&r, &v, &count);
        fmt_reader_free(&r);
        close(fd);
        printf("{\"bench\": \"tfr_index\", \"mib\": %.0f, \"record_bytes\": %zu, \"records\": "
               "%llu, \"mem_ms\": %.2f, \"mem_verify_ms\": %.1f, \"file_ms\": %.2f, "
               "\"file_verify_ms\": %.1f}\n",
               n / 1048576.0, recs[k], (unsigned long long)count, tm * 1e3, tmv * 1e3, tf * 1e3,
               tfv * 1e3);
        if (k == 0) {
            /* gzip of the first 64 MiB */
            size_t gn = CH_MIN(n, (size_t)64 << 20);
            uLongf cap = compressBound(gn) + 64;
            uint8_t *g = malloc(cap);
            z_stream z;
            memset(&z, 0, sizeof z);
            deflateInit2(&z, 1, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY);
            /* cut at a record boundary */
            gn = gn / (recs[k] + 16) * (recs[k] + 16);
            z.next_in = b;
            z.avail_in = (uInt)gn;
            z.next_out = g;
            z.avail_out = (uInt)cap;
            deflate(&z, Z_FINISH);
            size_t glen = cap - z.avail_out;
            deflateEnd(&z);
            char gpath[4200];
            snprintf(gpath, sizeof gpath, "%s.gz", path);
            write_file(gpath, g, glen);
            int gfd = open(gpath, O_RDONLY);
            fmt_tfr_index ix;
            chute_error err;
            double t = now_s();
            int rc = fmt_tfr_index_compressed(gfd, gpath, FMT_TFR_GZIP, NULL, -1, &ix, &err);
            t = now_s() - t;
            printf("{\"bench\": \"tfr_gzip_index\", \"uncompressed_mib\": %.0f, \"ok\": %s, "
                   "\"ms\": %.1f, \"mbs\": %.0f}\n",
                   gn / 1048576.0, rc ? "false" : "true", t * 1e3, gn / t / 1e6);
            fmt_tfr_index_free(&ix);
            close(gfd);
            unlink(gpath);
            free(g);
        }
        free(b);
    }
    unlink(path);

    /* Example: an ImageNet-like record. */
    {
        uint8_t ex[120000];
        size_t n = 0;
        /* hand-encoded: features { feature { key, value } ... } */
        uint8_t fs[119000];
        size_t fn = 0;
        const char *keys[] = {"image/encoded", "image/class/label", "image/height",
                              "image/width", "image/format"};
        for (int k = 0; k < 5; k++) {
            uint8_t list[111000], feat[111100], entry[111200];
            size_t ln = 0, fl = 0, en = 0;
            if (k == 0 || k == 4) {
                size_t sz = k == 0 ? 110000 : 4;
                list[ln++] = 0x0a;
                size_t v = sz;
                do {
                    list[ln++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                    v >>= 7;
                } while (v);
                memset(list + ln, 'j', sz);
                ln += sz;
                feat[fl++] = 0x0a;
            } else {
                list[ln++] = 0x0a;
                list[ln++] = 2;
                list[ln++] = 0xac;
                list[ln++] = 0x02;
                feat[fl++] = 0x1a;
            }
            size_t v = ln;
            do {
                feat[fl++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
            } while (v);
            memcpy(feat + fl, list, ln);
            fl += ln;
            entry[en++] = 0x0a;
            entry[en++] = (uint8_t)strlen(keys[k]);
            memcpy(entry + en, keys[k], strlen(keys[k]));
            en += strlen(keys[k]);
            entry[en++] = 0x12;
            v = fl;
            do {
                entry[en++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
            } while (v);
            memcpy(entry + en, feat, fl);
            en += fl;
            fs[fn++] = 0x0a;
            v = en;
            do {
                fs[fn++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
            } while (v);
            memcpy(fs + fn, entry, en);
            fn += en;
        }
        ex[n++] = 0x0a;
        size_t v = fn;
        do {
            ex[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
            v >>= 7;
        } while (v);
        memcpy(ex + n, fs, fn);
        n += fn;
        const char *want[] = {"image/encoded", "image/class/label"};
        fmt_pb_feature f[2];
        chute_error err;
        int iters = 2000000;
        double t = now_s();
        uint64_t sink = 0;
        for (int i = 0; i < iters; i++) {
            if (fmt_pb_example_find(ex, n, want, 2, f, "ex", 0, &err) != CHUTE_OK) {
                fprintf(stderr, "example: %s\n", err.message);
                return 1;
            }
            sink += f[0].list_len;
        }
        t = now_s() - t;
        printf("{\"bench\": \"example_find\", \"example_bytes\": %zu, \"ns\": %.0f, \"ok\": %s}\n",
               n, t / iters * 1e9, sink ? "true" : "false");
    }

    /* tar of 110 KB members */
    {
        size_t msz = 110000, blk = 512 + (msz + 511) / 512 * 512;
        size_t cnt = total / blk, n = cnt * blk + 1024;
        uint8_t *b = calloc(1, n);
        for (size_t i = 0; i < cnt; i++) {
            uint8_t *h = b + i * blk;
            snprintf((char *)h, 100, "%08zu.jpg", i);
            memcpy(h + 100, "0000644", 7);
            snprintf((char *)h + 124, 12, "%011zo", msz);
            h[156] = '0';
            memcpy(h + 257, "ustar\0" "00", 8);
            memset(h + 148, ' ', 8);
            unsigned sum = 0;
            for (int k = 0; k < 512; k++)
                sum += h[k];
            snprintf((char *)h + 148, 8, "%06o", sum);
        }
        snprintf(path, sizeof path, "%s/parse_speed-%d.tar", dir, (int)getpid());
        write_file(path, b, n);
        int fd = open(path, O_RDONLY);
        double bm = 1e9, bf = 1e9;
        uint64_t members = 0;
        for (int rep = 0; rep < 5; rep++) {
            fmt_reader r;
            fmt_tar_index ix;
            chute_error err;
            fmt_reader_mem(&r, b, n, "mem");
            double t = now_s();
            if (fmt_tar_index_build(&r, NULL, &ix, &err)) {
                fprintf(stderr, "tar: %s\n", err.message);
                return 1;
            }
            bm = CH_MIN(bm, now_s() - t);
            members = ix.count;
            fmt_tar_index_free(&ix);
            fmt_reader_fd(&r, fd, n, 0, path, &err);
            t = now_s();
            fmt_tar_index_build(&r, NULL, &ix, &err);
            bf = CH_MIN(bf, now_s() - t);
            fmt_tar_index_free(&ix);
            fmt_reader_free(&r);
        }
        close(fd);
        unlink(path);
        printf("{\"bench\": \"tar_index\", \"mib\": %.0f, \"members\": %llu, \"mem_ms\": %.2f, "
               "\"file_ms\": %.2f}\n",
               n / 1048576.0, (unsigned long long)members, bm * 1e3, bf * 1e3);
        free(b);
    }
    return 0;
}
