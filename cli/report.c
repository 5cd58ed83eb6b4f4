/*
 * report.c — doctor's JSON and its self-contained HTML report: inline SVG
 * only (no scripts, no external resources), so it opens anywhere, offline,
 * and renders the same in any browser.  The report replaces its file
 * atomically and never writes into anything but a regular file.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "doctor.h"
#include "io/io.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void doctor_print_json(FILE *f, const doctor_result *r)
{
    fprintf(f, "{\"source\":");
    cli_json_str(f, r->source);
    fprintf(f,
            ",\"kind\":\"%s\",\"samples\":%llu,\"transform\":\"%s\",\"cores\":%u,\"workers\":%u,"
            "\"bottleneck\":\"%s\",\"images_per_sec\":%.1f,\"pipeline_images_per_sec\":%.1f,"
            "\"pipeline_wait_fraction\":%.4f,"
            "\"ceilings\":{\"storage\":%.1f,\"decode\":%.1f,\"transform\":%.1f,\"cpu\":%.1f,"
            "\"pipeline\":%.1f},"
            "\"per_core\":{\"decode_ms\":%.4f,\"transform_ms\":%.4f,\"read_ms\":%.4f},"
            "\"storage_mb_per_sec\":%.2f,\"storage_method\":",
            r->format, (unsigned long long)r->samples, r->transform,
            r->cores, r->workers, r->bottleneck, r->deliverable_ips, r->pipeline_ips,
            r->pipeline_wait, r->storage_ceiling_ips, r->decode_ips, r->transform_ips, r->cpu_ips,
            r->pipeline_ips, r->decode_s * 1e3, r->transform_s * 1e3, r->read_cpu_s * 1e3,
            r->storage_mbs);
    cli_json_str(f, r->storage_method);
    fprintf(f, ",\"storage_own_reads\":%.1f", r->storage_ips); /* workers reading themselves */
    fprintf(f, ",\"page_cache_fraction\":%.4f,\"page_cache_files\":%u,\"readahead\":%u,"
               "\"storage_readahead\":%.1f,\"storage_readahead_mb_per_sec\":%.2f",
            r->resident_frac, r->resident_files, r->ra_depth, r->storage_ra_ips,
            r->storage_ra_mbs);
    fprintf(f, ",\"read_delay_us\":%u,\"read_p50_ms\":%.3f,\"read_p99_ms\":%.3f,", r->read_delay_us,
            r->read_p50_ms, r->read_p99_ms);
    fprintf(f,
            "\"mean_sample_bytes\":%.0f,\"mean_decoded_px\":%.0f,"
            "\"pipeline_queue_fill_avg\":%.3f,\"queue_capacity\":%u,"
            "\"storage_reads\":%llu,\"storage_read_errors\":%llu,\"storage_first_error\":",
            r->mean_bytes, r->mean_decoded_px, r->pipeline_fill_avg, r->queue_capacity,
            (unsigned long long)r->storage_samples,
            (unsigned long long)r->storage_errors);
    if (r->storage_errors)
        cli_json_str(f, r->storage_first_error);
    else
        fprintf(f, "null");
    fprintf(f,
            ",\"corrupt_skipped\":{\"cpu_stage\":%llu,\"cpu_stage_samples\":%llu,"
            "\"pipeline\":%llu,\"pipeline_samples\":%llu},\"warnings\":[",
            (unsigned long long)r->cpu_corrupt, (unsigned long long)r->cpu_samples,
            (unsigned long long)r->pipeline_corrupt, (unsigned long long)r->pipeline_samples);
    for (int i = 0; i < r->nwarnings; i++) {
        if (i)
            fputc(',', f);
        cli_json_str(f, r->warnings[i]);
    }
    fprintf(f, "],");
    if (r->gpu_rate > 0)
        fprintf(f, "\"gpu_rate\":%.1f,\"gpus_fed\":%d,", r->gpu_rate, r->gpus_fed);
    if (r->gpu_idle_frac >= 0) {
        fprintf(f, "\"gpu\":");
        cli_json_str(f, r->gpu_name);
        fprintf(f, ",\"gpu_idle_fraction\":%.3f,", r->gpu_idle_frac);
    }
    if (r->h2d_pinned_gbs > 0)
        fprintf(f, "\"h2d_pinned_gbs\":%.2f,\"h2d_pageable_gbs\":%.2f,", r->h2d_pinned_gbs,
                r->h2d_pageable_gbs);
    fprintf(f, "\"source_stage\":{\"name\":");
    cli_json_str(f, r->source_kind);
    fprintf(f, ",\"remote\":%s,\"images_per_sec\":%.1f,\"mb_per_sec\":%.2f,\"read_p50_ms\":%.3f,"
               "\"read_p99_ms\":%.3f,\"bottleneck\":%s},",
            r->source_remote ? "true" : "false", r->storage_ceiling_ips,
            r->storage_ceiling_ips > r->storage_ips ? r->storage_ra_mbs : r->storage_mbs, r->read_p50_ms,
            r->read_p99_ms, r->source_bottleneck ? "true" : "false");
    fprintf(f, "\"cache_stage\":"); /* the pipeline stage's lookups; null without a tier */
    if (r->cache_on) {
        fprintf(f, "{\"bottleneck\":%s,\"counters\":", r->cache_bottleneck ? "true" : "false");
        cli_tier_json(f, &r->cache_st);
        fprintf(f, "},");
    } else {
        fprintf(f, "null,");
    }
    fprintf(f, "\"verdict\":");
    cli_json_str(f, r->verdict);
    fprintf(f, ",\"advice\":[");
    for (int i = 0; i < r->nadvice; i++) {
        if (i)
            fputc(',', f);
        cli_json_str(f, r->advice[i]);
    }
    fprintf(f, "]}\n");
}

static void html_text(cli_sb *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            cli_sb_printf(b, "&lt;");
        else if (*s == '>')
            cli_sb_printf(b, "&gt;");
        else if (*s == '&')
            cli_sb_printf(b, "&amp;");
        else if (*s == '"')
            cli_sb_printf(b, "&quot;");
        else
            cli_sb_printf(b, "%c", *s);
    }
}

/* Bar chart: one bar per stage ceiling, dashed lines for GPU demand. */
static void bar_chart(cli_sb *b, const doctor_result *r)
{
    const char *names[] = {"storage (cold)", "decode", "transform", "CPU total", "pipeline"};
    double vals[] = {r->storage_ceiling_ips, r->decode_ips, r->transform_ips, r->cpu_ips, r->pipeline_ips};
    int n = 5;
    double vmax = 1;
    for (int i = 0; i < n; i++)
        if (vals[i] > vmax)
            vmax = vals[i];
    if (r->gpu_rate > vmax)
        vmax = r->gpu_rate;
    vmax *= 1.15;
    const int W = 720, H = 300, L = 130, R = 20, T = 20, B = 40;
    const double pw = W - L - R, bh = (H - T - B) / (double)n;
    cli_sb_printf(b, "<svg id=\"ceilings\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
                     "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
                     "aria-label=\"stage ceilings in images per second\">\n",
                  W, H, W, H);
    for (int i = 0; i < n; i++) {
        double w = pw * vals[i] / vmax, y = T + i * bh + bh * 0.15;
        int is_bn = (i == 0 && !strcmp(r->bottleneck, "storage")) ||
                    (i == 1 && !strcmp(r->bottleneck, "decode")) ||
                    (i == 2 && !strcmp(r->bottleneck, "transform"));
        cli_sb_printf(b,
                      "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"13\">%s</text>\n"
                      "<rect class=\"bar\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                      "fill=\"%s\"><title>%s: %.0f images/s</title></rect>\n"
                      "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%.0f img/s</text>\n",
                      L - 8, y + bh * 0.45, names[i], L, y, w, bh * 0.7,
                      is_bn ? "#d9534f" : (i == 4 ? "#5b8def" : "#7fb77e"), names[i], vals[i],
                      L + w + 5, y + bh * 0.45, vals[i]);
    }
    if (r->gpu_rate > 0) {
        for (int k = 1; k <= 8 && k * r->gpu_rate <= vmax; k++) {
            double x = L + pw * k * r->gpu_rate / vmax;
            cli_sb_printf(b,
                          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\" "
                          "stroke-dasharray=\"5,4\"/><text x=\"%.1f\" y=\"%d\" font-size=\"11\" "
                          "text-anchor=\"middle\">%d GPU%s</text>\n",
                          x, T, x, H - B, x, H - B + 14, k, k > 1 ? "s" : "");
        }
    }
    cli_sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"12\">images/s (with %u workers)</text>\n",
                  L, H - 6, r->workers);
    cli_sb_printf(b, "</svg>\n");
}

/* Time series: throughput (left axis) and consumer wait % (right axis). */
static void series_chart(cli_sb *b, const doctor_result *r)
{
    const int W = 720, H = 260, L = 60, R = 60, T = 20, B = 35;
    double tmax = 0.001, imax = 1;
    for (int i = 0; i < r->nseries; i++) {
        if (r->series[i].t > tmax)
            tmax = r->series[i].t;
        if (r->series[i].ips > imax)
            imax = r->series[i].ips;
    }
    imax *= 1.15;
    const double pw = W - L - R, ph = H - T - B;
    cli_sb_printf(b, "<svg id=\"timeseries\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
                     "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
                     "aria-label=\"throughput and consumer wait over time\">\n",
                  W, H, W, H);
    cli_sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
                     "stroke=\"#999\"/>\n",
                  L, T, pw, ph);
    cli_sb_printf(b, "<polyline class=\"ips\" fill=\"none\" stroke=\"#5b8def\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < r->nseries; i++)
        cli_sb_printf(b, "%.1f,%.1f ", L + pw * r->series[i].t / tmax,
                      T + ph - ph * r->series[i].ips / imax);
    cli_sb_printf(b, "\"/>\n<polyline class=\"wait\" fill=\"none\" stroke=\"#d9534f\" "
                     "stroke-width=\"2\" points=\"");
    for (int i = 0; i < r->nseries; i++) {
        double w = r->series[i].wait;
        if (w > 1)
            w = 1;
        cli_sb_printf(b, "%.1f,%.1f ", L + pw * r->series[i].t / tmax, T + ph - ph * w);
    }
    cli_sb_printf(b, "\"/>\n");
    cli_sb_printf(b,
                  "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">%.0f</text>"
                  "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">0</text>"
                  "<text x=\"%d\" y=\"%d\" font-size=\"11\">100%%</text>"
                  "<text x=\"%d\" y=\"%d\" font-size=\"11\">0%%</text>"
                  "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"#5b8def\">images/s</text>"
                  "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"#d9534f\">consumer wait</text>"
                  "<text x=\"%.0f\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">seconds "
                  "(0-%.1f)</text>\n",
                  L - 4, T + 10, imax, L - 4, T + (int)ph, W - R + 4, T + 10, W - R + 4,
                  T + (int)ph, L + 5, T + 14, L + 80, T + 14, L + pw / 2, H - 8, tmax);
    cli_sb_printf(b, "</svg>\n");
}

int doctor_report_path_ok(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr,
                "chute doctor: --report %s exists and is not a regular file; the report "
                "only creates or replaces a regular file\n",
                path);
        return -1;
    }
    return 0;
}

/* Write next to `path` under a new name, then rename over it: a reader
 * never sees half a report, a failed write leaves the old file alone, and
 * something that is not a regular file (a device, a directory) is never
 * opened for writing. */
static int write_replacing(const char *path, const char *data, size_t n)
{
    if (doctor_report_path_ok(path) != 0)
        return -1;
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp-XXXXXX", path) < 0)
        return -1;
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "chute doctor: %s: cannot create: %s\n", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    chute_error err = {0};
    int rc = ch_write_all(fd, tmp, data, n, &err) == CHUTE_OK ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "chute doctor: %s\n", err.message);
    /* mkostemp makes the file 0600; a report is for reading. */
    if (rc == 0 && fchmod(fd, 0644) != 0)
        rc = -1;
    if (close(fd) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, path) != 0) {
        fprintf(stderr, "chute doctor: %s: cannot rename to %s: %s\n", tmp, path, strerror(errno));
        rc = -1;
    }
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

int doctor_write_report(const char *path, const doctor_result *r)
{
    cli_sb b = {0};
    cli_sb_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                      "<title>chute doctor report</title>\n<style>body{font-family:sans-serif;"
                      "max-width:780px;margin:2em auto;color:#222}h1{font-size:1.4em}"
                      "table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}"
                      "td:first-child,th:first-child{text-align:left}.bn{color:#d9534f;"
                      "font-weight:bold}</style></head><body>\n<h1>chute doctor: ");
    html_text(&b, r->source);
    cli_sb_printf(&b, "</h1>\n<p>%s format, %llu samples, transform <b>%s</b>, %u workers on %u cores.</p>\n",
                  r->format, (unsigned long long)r->samples,
                  r->transform, r->workers, r->cores);
    char head[128];
    cli_sb_printf(&b, "<p class=\"bn\" id=\"bottleneck\">Bottleneck: %s</p>\n<p>",
                  doctor_headline(r, head, sizeof head));
    html_text(&b, r->verdict);
    cli_sb_printf(&b, "</p>\n");
    if (r->nwarnings) {
        cli_sb_printf(&b, "<h2>Errors and skipped samples</h2>\n<ul id=\"warnings\" class=\"bn\">\n");
        for (int i = 0; i < r->nwarnings; i++) {
            cli_sb_printf(&b, "<li>");
            html_text(&b, r->warnings[i]);
            cli_sb_printf(&b, "</li>\n");
        }
        cli_sb_printf(&b, "</ul>\n");
    }
    cli_sb_printf(&b, "<h2>Stage ceilings</h2>\n");
    bar_chart(&b, r);
    cli_sb_printf(&b, "<table id=\"stages\"><tr><th>stage</th><th>images/s</th><th>per image, one core</th>"
                      "<th>errors / skipped</th></tr>\n"
                      "<tr><td>storage</td><td>%.0f</td><td>%.1f MB/s</td><td>%llu of %llu reads failed</td></tr>\n"
                      "<tr><td>decode</td><td>%.0f</td><td>%.2f ms</td><td rowspan=\"3\">%llu of %llu skipped</td></tr>\n"
                      "<tr><td>transform</td><td>%.0f</td><td>%.2f ms</td></tr>\n"
                      "<tr><td>CPU total</td><td>%.0f</td><td>%.2f ms</td></tr>\n"
                      "<tr><td>pipeline (measured)</td><td>%.0f</td><td>wait %.0f%%</td>"
                      "<td>%llu of %llu skipped</td></tr></table>\n",
                  r->storage_ips, r->storage_mbs, (unsigned long long)r->storage_errors,
                  (unsigned long long)r->storage_samples, r->decode_ips, r->decode_s * 1e3,
                  (unsigned long long)r->cpu_corrupt, (unsigned long long)r->cpu_samples,
                  r->transform_ips, r->transform_s * 1e3, r->cpu_ips,
                  (r->decode_s + r->transform_s) * 1e3, r->pipeline_ips, 100 * r->pipeline_wait,
                  (unsigned long long)r->pipeline_corrupt, (unsigned long long)r->pipeline_samples);
    cli_sb_printf(&b, "<p>Storage: ");
    html_text(&b, r->storage_method);
    if (r->read_delay_us)
        cli_sb_printf(&b, "; with %u us injected per read (what-if)", r->read_delay_us);
    cli_sb_printf(&b, ".</p>\n<h2>Full pipeline over time</h2>\n");
    series_chart(&b, r);
    if (r->gpu_idle_frac >= 0) {
        cli_sb_printf(&b, "<p>GPU ");
        html_text(&b, r->gpu_name);
        cli_sb_printf(&b, " was idle in %.0f%% of samples.</p>\n", 100 * r->gpu_idle_frac);
    }
    cli_sb_printf(&b, "<h2>Advice</h2>\n<ul>\n");
    for (int i = 0; i < r->nadvice; i++) {
        cli_sb_printf(&b, "<li>");
        html_text(&b, r->advice[i]);
        cli_sb_printf(&b, "</li>\n");
    }
    cli_sb_printf(&b, "</ul>\n<p><small>chute %s</small></p>\n</body></html>\n", chute_version());
    int rc = -1;
    if (b.p)
        rc = write_replacing(path, b.p, b.n);
    cli_sb_free(&b);
    return rc;
}
