/*
 * inspect.c — `chute inspect SOURCE`: what is in this dataset?
 *
 * Reads every sample once (threads = usable CPUs) and parses only its header:
 * counts per class, file sizes in power-of-two bins, image dimensions,
 * formats and colour spaces, and the samples that do not parse (path and
 * reason).  --verify decodes every image fully instead, and exits 1 if
 * any sample fails or the listing left entries out.
 *
 * A failure is shown once as "where: reason": read errors already name
 * their file, so the location is not put in front a second time
 * (ch_ds_failure_message).  --json output is valid JSON for any path
 * bytes (cli_json_str).
 */
#define _GNU_SOURCE
#include "cli.h"
#include "common/common.h"
#include "format/format.h"
#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SIZE_BINS 40
#define MAX_BAD 50

typedef struct dim_count {
    uint32_t w, h;
    uint64_t n;
} dim_count;

typedef struct insp {
    const chute_dataset *ds;
    uint64_t n;
    int verify;
    _Atomic uint64_t next;
    pthread_mutex_t mu;
    /* results (mu) */
    uint64_t size_bins[SIZE_BINS];
    uint64_t bytes;
    uint64_t side_bins[8];    /* shorter side: <64,<128,<256,<512,<1024,<2048,<4096,>= */
    uint64_t fmt[5];          /* by format id: 0 undecodable, JPEG, PNG, BMP, CHRAW */
    uint64_t refused;         /* samples the format could not give (no label, damaged record): not "undecodable" */
    uint64_t cs[5];           /* grey, grey+alpha, RGB, RGBA/CMYK(4) , other */
    uint64_t *per_class;
    dim_count *dims;
    size_t ndims, capdims;
    uint64_t bad;
    char *bad_where[MAX_BAD]; /* describe(i) */
    char *bad_msg[MAX_BAD];   /* "where: reason", the location once */
    int oom;                  /* a thread could not get memory: results incomplete */
    double sum_w, sum_h;
} insp;

static unsigned log2_bin(uint64_t v)
{
    unsigned b = 0;
    while (b + 1 < SIZE_BINS && (1ull << (b + 1)) <= v)
        b++;
    return b;
}

static void *insp_thread(void *arg)
{
    insp *s = arg;
    size_t cap = 1 << 20;
    void *buf = malloc(cap);
    if (!buf) {
        pthread_mutex_lock(&s->mu);
        s->oom = 1;
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    for (;;) {
        uint64_t i = atomic_fetch_add(&s->next, 1);
        if (i >= s->n)
            break;
        chute_error err = {0};
        size_t len = 0;
        int rc = chute_dataset_read(s->ds, i, buf, cap, &len, &err);
        if (rc == CHUTE_ELIMIT && len > cap) {
            void *nb = realloc(buf, len);
            if (!nb) {
                pthread_mutex_lock(&s->mu);
                s->oom = 1;
                pthread_mutex_unlock(&s->mu);
                break;
            }
            buf = nb;
            cap = len;
            rc = chute_dataset_read(s->ds, i, buf, cap, &len, &err);
        }
        int read_failed = rc != CHUTE_OK;
        uint32_t w = 0, h = 0, ch = 0;
        int fmt = 0;
        if (rc == CHUTE_OK)
            rc = chute_image_header(buf, len, &w, &h, &ch, &fmt, &err);
        if (rc == CHUTE_OK && s->verify)
            rc = chute_probe_image(buf, len, 0, NULL, NULL, NULL, &err);
        pthread_mutex_lock(&s->mu);
        if (len) {
            s->size_bins[log2_bin(len)]++;
            s->bytes += len;
        }
        int64_t label = chute_dataset_label(s->ds, i);
        if (label >= 0 && !read_failed) /* a refused sample has no real label */
            s->per_class[label]++;
        if (rc != CHUTE_OK) {
            if (s->bad < MAX_BAD) {
                char where[4096], msg[1024];
                chute_dataset_describe(s->ds, i, where, sizeof where);
                ch_ds_failure_message(s->ds, i, err.message, msg, sizeof msg);
                s->bad_where[s->bad] = strdup(where);
                s->bad_msg[s->bad] = strdup(msg);
            }
            s->bad++;
            if (read_failed) /* e.g. a WebDataset sample without .cls: its image is fine */
                s->refused++;
            else
                s->fmt[0]++;
        } else {
            s->fmt[fmt >= 1 && fmt <= 4 ? fmt : 0]++;
            s->cs[ch == 1 ? 0 : ch == 2 ? 1 : ch == 3 ? 2 : ch == 4 ? 3 : 4]++;
            uint32_t side = w < h ? w : h;
            unsigned sb = 0;
            while (sb < 7 && side >= (64u << sb))
                sb++;
            s->side_bins[sb]++;
            s->sum_w += w;
            s->sum_h += h;
            size_t k = 0;
            for (; k < s->ndims; k++)
                if (s->dims[k].w == w && s->dims[k].h == h)
                    break;
            if (k == s->ndims && s->ndims < 100000) {
                if (s->ndims == s->capdims) {
                    size_t c = s->capdims ? s->capdims * 2 : 64;
                    dim_count *d = realloc(s->dims, c * sizeof *d);
                    if (d) {
                        s->dims = d;
                        s->capdims = c;
                    }
                }
                if (s->ndims < s->capdims)
                    s->dims[s->ndims++] = (dim_count){w, h, 0};
            }
            if (k < s->ndims)
                s->dims[k].n++;
        }
        pthread_mutex_unlock(&s->mu);
    }
    free(buf);
    return NULL;
}

static int cmp_dims(const void *a, const void *b)
{
    const dim_count *x = a, *y = b;
    return x->n < y->n ? 1 : x->n > y->n ? -1 : 0;
}

static const char *bin_label(unsigned b, char *buf, size_t n)
{
    static const char *u[] = {"B", "K", "M", "G", "T"};
    uint64_t v = 1ull << b;
    int k = 0;
    while (v >= 1024 && k < 4) {
        v /= 1024;
        k++;
    }
    snprintf(buf, n, "%llu%s", (unsigned long long)v, u[k]);
    return buf;
}

/* Everything an inspection holds, the dataset included. */
static void insp_free(insp *s)
{
    for (uint64_t k = 0; k < s->bad && k < MAX_BAD; k++) {
        free(s->bad_where[k]);
        free(s->bad_msg[k]);
    }
    free(s->dims);
    free(s->per_class);
    pthread_mutex_destroy(&s->mu);
    chute_dataset_close((chute_dataset *)s->ds);
}

/* Audio (formats with media_info: WAV): every sample's header read once,
 * in order, on this thread (a header is one small read): the sample rates
 * and channel counts found, durations (min/mean/max and a histogram in
 * doubling bins from 0.5 s) and the headers that do not parse.  JSON: the
 * "audio" member, printed inside the caller's object. */
#define AUDIO_BINS 8
static void insp_media(const chute_dataset *ds, int json)
{
    uint64_t n = chute_dataset_size(ds), bad = 0, good = 0, bins[AUDIO_BINS] = {0};
    uint32_t rates[8] = {0}, chans[8] = {0};
    uint64_t nrate[8] = {0}, nchan[8] = {0};
    double sum = 0, lo = 0, hi = 0;
    char first_bad[1024] = "";
    for (uint64_t i = 0; i < n; i++) {
        ch_media_info m;
        chute_error e = {0};
        if (ds->fmt->media_info(ds, i, &m, &e) != CHUTE_OK) {
            if (!bad++)
                snprintf(first_bad, sizeof first_bad, "%s", e.message);
            continue;
        }
        double s = (double)m.frames / m.rate;
        sum += s;
        lo = good ? CH_MIN(lo, s) : s;
        hi = good ? CH_MAX(hi, s) : s;
        good++;
        int b = 0;
        while (b + 1 < AUDIO_BINS && s >= 0.5 * (1 << b))
            b++;
        bins[b]++;
        for (int k = 0; k < 8; k++)
            if (!nrate[k] || rates[k] == m.rate) {
                rates[k] = m.rate;
                nrate[k]++;
                break;
            }
        for (int k = 0; k < 8; k++)
            if (!nchan[k] || chans[k] == m.channels) {
                chans[k] = m.channels;
                nchan[k]++;
                break;
            }
    }
    if (json) {
        printf(",\"audio\":{\"files\":%llu,\"bad\":%llu,\"rates\":{", (unsigned long long)good,
               (unsigned long long)bad);
        for (int k = 0; k < 8 && nrate[k]; k++)
            printf("%s\"%u\":%llu", k ? "," : "", rates[k], (unsigned long long)nrate[k]);
        printf("},\"channels\":{");
        for (int k = 0; k < 8 && nchan[k]; k++)
            printf("%s\"%u\":%llu", k ? "," : "", chans[k], (unsigned long long)nchan[k]);
        printf("},\"seconds\":{\"min\":%.6f,\"mean\":%.6f,\"max\":%.6f},"
               "\"duration_histogram\":{", lo, good ? sum / good : 0, hi);
        for (int b = 0, f = 1; b < AUDIO_BINS; b++)
            if (bins[b]) {
                printf("%s\"%g\":%llu", f ? "" : ",", b ? 0.5 * (1 << (b - 1)) : 0.0,
                       (unsigned long long)bins[b]);
                f = 0;
            }
        printf("}");
        if (bad) {
            printf(",\"first_bad\":");
            cli_json_str(stdout, first_bad);
        }
        printf("}");
        return;
    }
    printf("audio: %llu files, %.1f s (min %.3f s, mean %.3f s, max %.3f s)\n",
           (unsigned long long)good, sum, lo, good ? sum / good : 0, hi);
    printf("  sample rates:");
    for (int k = 0; k < 8 && nrate[k]; k++)
        printf(" %u Hz (%llu)", rates[k], (unsigned long long)nrate[k]);
    printf("\n  channels:");
    for (int k = 0; k < 8 && nchan[k]; k++)
        printf(" %u (%llu)", chans[k], (unsigned long long)nchan[k]);
    printf("\n  durations:\n");
    for (int b = 0; b < AUDIO_BINS; b++)
        if (bins[b])
            printf("    >= %-6g s %8llu %5.1f%%\n", b ? 0.5 * (1 << (b - 1)) : 0.0,
                   (unsigned long long)bins[b], 100.0 * bins[b] / (good ? good : 1));
    if (bad)
        printf("  %llu headers do not parse; first: %s\n", (unsigned long long)bad, first_bad);
}

/* Image-less datasets (NumPy tensors, CSV rows): nothing to decode, so
 * the summary is the count, the classes, each field's kind, dtype and
 * per-sample shape, and the histogram of sample sizes (sizes from the
 * format's index, no data read). */
static void insp_fields(const char *src, const chute_dataset *ds, int json)
{
    static const char *kinds[] = {"?", "int64", "float32", "tensor", "bytes"};
    static const char *dtypes[] = {"float32", "uint8", "float16", "int64", "int32", "float64",
                                   "int8", "int16", "uint16", "uint32", "uint64", "bool"};
    uint64_t n = chute_dataset_size(ds), bins[64] = {0}, bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t z = chute_dataset_sample_size(ds, i);
        bytes += z;
        bins[z ? 63 - __builtin_clzll(z) : 0]++;
    }
    uint32_t nf = chute_dataset_num_fields(ds), nc = chute_dataset_num_classes(ds);
    if (json) {
        printf("{\"source\":");
        cli_json_str(stdout, src);
        printf(",\"format\":\"%s\",\"samples\":%llu,\"classes\":%u,\"images\":false,"
               "\"bytes\":%llu,\"fields\":[", chute_dataset_format_name(ds),
               (unsigned long long)n, nc, (unsigned long long)bytes);
    } else {
        printf("%s: %s, %llu samples in %u classes, no images, %.1f MB (mean %.1f B)\n", src,
               chute_dataset_format_name(ds), (unsigned long long)n, nc, bytes / 1e6,
               n ? (double)bytes / n : 0);
        printf("fields:\n");
    }
    for (uint32_t k = 0; k < nf; k++) {
        chute_field_info f;
        if (chute_dataset_field_info(ds, k, &f) != CHUTE_OK)
            continue;
        const char *kd = (unsigned)f.kind < 5 ? kinds[f.kind] : "?";
        const char *dt = (unsigned)f.dtype < 12 ? dtypes[f.dtype] : "?";
        if (json) {
            printf("%s{\"name\":", k ? "," : "");
            cli_json_str(stdout, f.name);
            printf(",\"kind\":\"%s\",\"dtype\":\"%s\",\"shape\":[", kd, dt);
        } else {
            printf("  %-20s %-7s %s[", f.name, kd, dt);
        }
        for (uint32_t d = 0; d < f.ndim && d < CHUTE_FIELD_MAX_DIMS; d++)
            printf("%s%lld", d ? "," : "", (long long)f.shape[d]);
        printf(json ? "]}" : "]\n");
    }
    if (json) {
        printf("],\"size_histogram\":{");
        int first = 1;
        for (int b = 0; b < 64; b++)
            if (bins[b]) {
                printf("%s\"%llu\":%llu", first ? "" : ",", 1ull << b, (unsigned long long)bins[b]);
                first = 0;
            }
        printf("}");
        if (ds->fmt->media_info)
            insp_media(ds, 1);
        printf("}\n");
        return;
    }
    printf("sample sizes:\n");
    for (int b = 0; b < 64; b++)
        if (bins[b])
            printf("  >= %-12llu %8llu %5.1f%%\n", 1ull << b, (unsigned long long)bins[b],
                   100.0 * bins[b] / (n ? n : 1));
    printf("classes:");
    for (uint32_t c = 0; c < nc && c < 10; c++)
        printf(" %s", chute_dataset_class_name(ds, c));
    printf("%s\n", nc > 10 ? " ..." : "");
    if (ds->fmt->media_info)
        insp_media(ds, 0);
}

/* The shorter side's bins and the colour spaces, as reports name them. */
static const char *const side_names[] = {"<64", "64-127", "128-255", "256-511", "512-1023",
                                   "1024-2047", "2048-4095", ">=4096"};
static const char *const cs_names[] = {"grey", "grey+alpha", "rgb", "4-channel (rgba/cmyk)",
                                       "other"};

/* What a run gathered, as one JSON object (--json). */
static void insp_report_json(const insp *s, chute_dataset *ds, const char *src, double el,
                             int verify, const chute_pack_info *pinfo, int have_pinfo,
                             uint64_t nskipped)
{
    uint32_t nc = chute_dataset_num_classes(ds);
    uint64_t good = s->n - s->bad;
    const char *kind = chute_dataset_format_name(ds);
    printf("{\"source\":");
    cli_json_str(stdout, src);
    printf(",\"kind\":\"%s\",\"samples\":%llu,\"classes\":%u,\"bytes\":%llu,"
           "\"mean_bytes\":%.1f,\"undecodable\":%llu,\"seconds\":%.3f,",
           kind, (unsigned long long)s->n, nc, (unsigned long long)s->bytes,
           s->n ? (double)s->bytes / s->n : 0, (unsigned long long)s->bad, el);
    printf("\"size_histogram\":{");
    int first = 1;
    for (unsigned b = 0; b < SIZE_BINS; b++)
        if (s->size_bins[b]) {
            char lb[32], hb[32];
            printf("%s\"%s-%s\":%llu", first ? "" : ",", bin_label(b, lb, sizeof lb),
                   bin_label(b + 1, hb, sizeof hb), (unsigned long long)s->size_bins[b]);
            first = 0;
        }
    printf("},\"shorter_side_histogram\":{");
    for (unsigned b = 0; b < 8; b++)
        printf("%s\"%s\":%llu", b ? "," : "", side_names[b], (unsigned long long)s->side_bins[b]);
    printf("},\"top_dimensions\":[");
    for (size_t k = 0; k < s->ndims && k < 10; k++)
        printf("%s{\"width\":%u,\"height\":%u,\"count\":%llu}", k ? "," : "", s->dims[k].w,
               s->dims[k].h, (unsigned long long)s->dims[k].n);
    printf("],\"mean_width\":%.1f,\"mean_height\":%.1f,", good ? s->sum_w / good : 0,
           good ? s->sum_h / good : 0);
    printf("\"formats\":{\"jpeg\":%llu,\"png\":%llu,\"bmp\":%llu,\"raw\":%llu,"
           "\"undecodable\":%llu},\"refused\":%llu,",
           (unsigned long long)s->fmt[1], (unsigned long long)s->fmt[2],
           (unsigned long long)s->fmt[3], (unsigned long long)s->fmt[4],
           (unsigned long long)s->fmt[0], (unsigned long long)s->refused);
    printf("\"color_spaces\":{");
    for (unsigned b = 0; b < 5; b++)
        printf("%s\"%s\":%llu", b ? "," : "", cs_names[b], (unsigned long long)s->cs[b]);
    printf("},\"class_counts\":{");
    for (uint32_t c = 0; c < nc; c++) {
        printf("%s", c ? "," : "");
        cli_json_str(stdout, chute_dataset_class_name(ds, c));
        printf(":%llu", (unsigned long long)s->per_class[c]);
    }
    printf("},\"undecodable_samples\":[");
    for (uint64_t k = 0; k < s->bad && k < MAX_BAD; k++) {
        const char *w = s->bad_where[k] ? s->bad_where[k] : "";
        const char *m = s->bad_msg[k] ? s->bad_msg[k] : "";
        /* reason = the message without "where: " in front */
        size_t wl = strlen(w);
        const char *why = wl && strncmp(m, w, wl) == 0 && m[wl] == ':' && m[wl + 1] == ' '
                              ? m + wl + 2 : m;
        printf("%s{\"where\":", k ? "," : "");
        cli_json_str(stdout, w);
        printf(",\"reason\":");
        cli_json_str(stdout, why);
        printf("}");
    }
    printf("],\"skipped_at_listing\":%llu,\"skipped_entries\":[",
           (unsigned long long)nskipped);
    for (uint64_t k = 0; k < nskipped && k < MAX_BAD; k++) {
        char note[1024];
        chute_dataset_skipped(ds, k, note, sizeof note);
        printf("%s", k ? "," : "");
        cli_json_str(stdout, note);
    }
    printf("]");
    if (verify)
        printf(",\"verify_ok\":%s", s->bad || nskipped ? "false" : "true");
    if (have_pinfo)
        printf(",\"pack\":{\"manifest_version\":%u,\"max_side\":%u,\"quality\":%u,"
               "\"raw\":%s}",
               pinfo->manifest_version, pinfo->max_side, pinfo->quality,
               pinfo->raw ? "true" : "false");
    insp_targets(ds, 1);
    printf("}\n");
}

/* The file-size histogram as bars of '#', the fullest bin 40 wide. */
static void insp_size_bars(const insp *s)
{
    uint64_t maxbin = 1;
    for (unsigned b = 0; b < SIZE_BINS; b++)
        if (s->size_bins[b] > maxbin)
            maxbin = s->size_bins[b];
    for (unsigned b = 0; b < SIZE_BINS; b++) {
        if (!s->size_bins[b])
            continue;
        char lo[32], hi[32];
        int bar = (int)(40.0 * s->size_bins[b] / maxbin);
        printf("  %6s-%-6s %8llu %5.1f%% ", bin_label(b, lo, sizeof lo),
               bin_label(b + 1, hi, sizeof hi), (unsigned long long)s->size_bins[b],
               100.0 * s->size_bins[b] / (s->n ? s->n : 1));
        for (int k = 0; k < bar; k++)
            putchar('#');
        putchar('\n');
    }
}

/* The same as text for a person: counts, histograms, what failed. */
static void insp_report_text(const insp *s, chute_dataset *ds, const char *src,
                             const chute_pack_info *pinfo, int have_pinfo, uint64_t nskipped)
{
    uint32_t nc = chute_dataset_num_classes(ds);
    uint64_t good = s->n - s->bad;
    const char *kind = chute_dataset_format_name(ds);
    printf("%s: %s, %llu samples in %u classes, %.1f MB (mean %.1f KB)\n", src, kind,
           (unsigned long long)s->n, nc, s->bytes / 1e6, s->n ? s->bytes / 1e3 / s->n : 0);
    printf("formats: %llu JPEG, %llu PNG, ", (unsigned long long)s->fmt[1],
           (unsigned long long)s->fmt[2]);
    if (s->fmt[3] || s->fmt[4])
        printf("%llu BMP, %llu CHRAW, ", (unsigned long long)s->fmt[3],
               (unsigned long long)s->fmt[4]);
    printf("%llu undecodable", (unsigned long long)s->fmt[0]);
    if (s->refused)
        printf(", %llu samples the format could not give (no label, a damaged record: "
               "listed below)", (unsigned long long)s->refused);
    printf("\n");
    if (have_pinfo && (pinfo->max_side || pinfo->raw)) {
        printf("packed: ");
        if (pinfo->max_side)
            printf("shorter side capped at %u px (Lanczos)%s", pinfo->max_side,
                   pinfo->raw ? ", " : "");
        if (pinfo->raw)
            printf("raw RGB pixels (CHRAW)");
        else
            printf(", re-encoded as JPEG quality %u", pinfo->quality);
        printf("\n");
    }
    printf("colour: ");
    for (unsigned b = 0; b < 5; b++)
        if (s->cs[b])
            printf("%s %llu  ", cs_names[b], (unsigned long long)s->cs[b]);
    printf("\nfile sizes:\n");
    insp_size_bars(s);
    printf("shorter side (px):\n");
    for (unsigned b = 0; b < 8; b++)
        if (s->side_bins[b])
            printf("  %-10s %8llu %5.1f%%\n", side_names[b], (unsigned long long)s->side_bins[b],
                   100.0 * s->side_bins[b] / (good ? good : 1));
    printf("most common dimensions:");
    for (size_t k = 0; k < s->ndims && k < 5; k++)
        printf("  %ux%u (%.1f%%)", s->dims[k].w, s->dims[k].h, 100.0 * s->dims[k].n / good);
    printf("\nclasses:");
    for (uint32_t c = 0; c < nc && c < 10; c++)
        printf(" %s=%llu", chute_dataset_class_name(ds, c), (unsigned long long)s->per_class[c]);
    printf("%s\n", nc > 10 ? " ..." : "");
    if (s->bad) {
        printf("%s (%llu):\n", s->refused ? "samples that failed" : "undecodable",
               (unsigned long long)s->bad);
        for (uint64_t k = 0; k < s->bad && k < MAX_BAD; k++)
            printf("  %s\n", s->bad_msg[k] ? s->bad_msg[k] : "?");
        if (s->bad > MAX_BAD)
            printf("  ... and %llu more\n", (unsigned long long)(s->bad - MAX_BAD));
    }
    if (nskipped) {
        printf("left out of the listing, not regular files (%llu):\n",
               (unsigned long long)nskipped);
        for (uint64_t k = 0; k < nskipped && k < MAX_BAD; k++) {
            char note[1024];
            printf("  %s\n", (chute_dataset_skipped(ds, k, note, sizeof note), note));
        }
        if (nskipped > MAX_BAD)
            printf("  ... and %llu more\n", (unsigned long long)(nskipped - MAX_BAD));
    }
    insp_targets(ds, 0);
}

/* --verify's verdict: 1 (and why, on stderr) when a sample could not be
 * read or decoded or an entry was left out of the listing, else 0. */
static int insp_verdict(const insp *s, uint64_t nskipped, int json)
{
    if (s->bad || nskipped) {
        fprintf(stderr,
                "chute inspect: verify FAILED: %llu of %llu samples could not be read or "
                "decoded, %llu entries left out of the listing\n",
                (unsigned long long)s->bad, (unsigned long long)s->n,
                (unsigned long long)nskipped);
        return 1;
    }
    if (!json)
        printf("verify: all %llu samples decode\n", (unsigned long long)s->n);
    return 0;
}

/* Read every sample on `threads` threads into s; *el: the seconds taken.
 * 0, or 1 after printing why the run is incomplete. */
static int insp_run(insp *s, uint32_t threads, double *el)
{
    double t0 = cli_now_s();
    pthread_t *th = s->per_class ? calloc(threads, sizeof *th) : NULL;
    uint32_t started = 0;
    for (uint32_t i = 0; th && i < threads; i++)
        if (pthread_create(&th[i], NULL, insp_thread, s) == 0)
            started++;
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    *el = cli_now_s() - t0;
    if (started == 0 || s->oom) {
        fprintf(stderr, "chute inspect: %s\n",
                started == 0 ? "cannot start threads (out of memory?)"
                             : "out of memory while reading samples; results would be incomplete");
        return 1;
    }
    return 0;
}

int cmd_inspect(int argc, char **argv)
{
    int json = 0, verify = 0;
    uint32_t threads = 0;
    uint64_t parquet_mem = 0; /* passed on to chute.cli with argv (cli/parquet.c) */
    chute_dataset_options dopt = {0};
    const cli_opt own[] = {
        {"--verify", CLI_FLAG, &verify, NULL, 0, 0, "decode every image fully (slower)"},
        {"--threads", CLI_U32, &threads, NULL, 1, 1024, "threads (default: the CPUs this process may use)"},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "print one JSON object"},
        {"--parquet-memory-bytes", CLI_U64, &parquet_mem, NULL, 1, UINT64_MAX,
         "Parquet sources (read by the Python package, cli/parquet.c): decoded row groups "
         "held at once (default 1 GiB)"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    /* The dataset's rows come from the option table
     * (src/common/dataset_options.def); these are inspect's own. */
    cli_opt opts[CLI_DATASET_OPTS_MAX + sizeof own / sizeof own[0]];
    cli_opt_text text[CLI_DATASET_OPTS_MAX];
    int nd = cli_dataset_opts(&dopt, opts, text, CLI_DATASET_OPTS_MAX);
    memcpy(opts + nd, own, sizeof own);
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("inspect", "SOURCE [options]", opts, argc, argv, pos, 1, &np);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (np != 1) {
        fprintf(stderr, "chute inspect: need SOURCE, an image tree or a shard directory\n");
        return 2;
    }
    if (cli_is_parquet(pos[0], dopt.format)) /* cli/parquet.c: the Python package reads it */
        return cli_parquet_exec("inspect", pos[0], argc, argv);
    chute_error err = {0};
    chute_dataset *ds = NULL;
    if (chute_dataset_open_ex(pos[0], &dopt, &ds, &err) != CHUTE_OK) {
        fprintf(stderr, "chute inspect: %s\n", err.message);
        return 1;
    }
    if (!chute_dataset_has_images(ds)) {
        insp_fields(pos[0], ds, json);
        chute_dataset_close(ds);
        return 0;
    }
    insp s;
    memset(&s, 0, sizeof s);
    s.ds = ds;
    s.n = chute_dataset_size(ds);
    s.verify = verify;
    uint32_t nc = chute_dataset_num_classes(ds);
    s.per_class = calloc(nc ? nc : 1, sizeof *s.per_class);
    pthread_mutex_init(&s.mu, NULL);
    if (!threads) /* the CPUs this process may use, as the loader's workers */
        threads = chute_default_workers(NULL, 0);
    double el = 0;
    if (insp_run(&s, threads, &el) != 0) {
        insp_free(&s);
        return 1;
    }
    if (s.ndims > 1) /* s.dims is NULL when no sample decoded: no qsort(NULL, 0) */
        qsort(s.dims, s.ndims, sizeof *s.dims, cmp_dims);
    uint64_t nskipped = chute_dataset_skipped(ds, 0, NULL, 0);
    /* How pack transformed a shard directory's images (manifest v2). */
    chute_pack_info pinfo = {0};
    chute_error perr = {0};
    int have_pinfo = chute_pack_info_read(pos[0], &pinfo, &perr) == CHUTE_OK;
    if (json)
        insp_report_json(&s, ds, pos[0], el, verify, &pinfo, have_pinfo, nskipped);
    else
        insp_report_text(&s, ds, pos[0], &pinfo, have_pinfo, nskipped);
    int rc2 = verify ? insp_verdict(&s, nskipped, json) : 0;
    insp_free(&s);
    return rc2;
}
