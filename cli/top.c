/*
 * top.c — `chute top`: every chute loader of this user on this node, live.
 *
 * Each loader keeps a stats segment in /dev/shm (src/stats/shmstats.h);
 * top reads them (pread, read-only: it never maps or writes one), keeps
 * the previous copy of each, and shows per process the loader's own
 * 10-second window (images/s, % of it the consumer waited) with what the
 * deltas since the last refresh say (the busiest stage, queue fill), and
 * per node CPU from /proc/stat, disks from /proc/diskstats and the GPU
 * through NVML (dlopen; none here is "no GPU").  Events are glances'
 * idea: a rank that waits at least --warn percent of its window opens an
 * event that stays listed after it ends.
 *
 * Plain ANSI (clear, bold, colour) and no ncurses: the screen is redrawn
 * whole each refresh from one buffer, so curses' diffing buys nothing,
 * and the same formatter writes --line and --json for logs and tests.
 * Colour only when stdout is a terminal.  Segments that fail any check
 * (a link, another owner, group/other permission bits, wrong magic or
 * version, truncated) are listed under "ignored" with the reason; stale
 * segments of dead processes are removed at start (ch_shm_sweep).
 */
#include "cli.h"
#include "util.h"
#include "stats/shmstats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOP_MAX_PROCS 1024
#define TOP_MAX_NOTES 32
#define TOP_MAX_EVENTS 10
#define TOP_MAX_DISKS 64

typedef struct top_proc {
    char name[64];          /* the segment's file name */
    ch_shm_view cur, prev;
    int have_prev, seen;
    /* derived at each refresh */
    double ips, wait_pct, fill, cache_pct, tier_pct;
    const char *bottleneck;
    int stale;              /* no publish for 3 s: stopped or stuck */
    int event;              /* index+1 of its open event, 0 if none */
} top_proc;

typedef struct top_event {
    time_t start, end;      /* end 0: ongoing */
    double peak;
    char text[200];
} top_event;

typedef struct top_disk {
    char name[32];
    uint64_t rd_ios, wr_ios, rd_sec, wr_sec;
} top_disk;

typedef struct top_node {
    uint64_t cpu[8]; /* user nice system idle iowait irq softirq steal */
    int ndisks;
    top_disk disks[TOP_MAX_DISKS];
} top_node;

typedef struct top_state {
    const char *dir;
    double interval, warn;
    top_proc *procs;
    int nprocs;
    struct {
        char name[64], why[160];
    } notes[TOP_MAX_NOTES];
    int nnotes;
    top_event events[TOP_MAX_EVENTS];
    int nevents;
    top_node node, node_prev;
    cli_gpu *gpu;
    char host[64];
} top_state;

static volatile sig_atomic_t top_stop;
static void on_signal(int sig)
{
    (void)sig;
    top_stop = 1;
}

/* ---- node figures ------------------------------------------------------ */

static void read_node(top_node *n)
{
    memset(n, 0, sizeof *n);
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        char line[512];
        if (fgets(line, sizeof line, f) && strncmp(line, "cpu ", 4) == 0) {
            unsigned long long v[8] = {0};
            sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]);
            for (int i = 0; i < 8; i++)
                n->cpu[i] = v[i];
        }
        fclose(f);
    }
    f = fopen("/proc/diskstats", "r");
    if (!f)
        return;
    char line[512];
    while (n->ndisks < TOP_MAX_DISKS && fgets(line, sizeof line, f)) {
        unsigned maj, min;
        char name[32];
        unsigned long long rio, rmerge, rsec, rms, wio, wmerge, wsec;
        if (sscanf(line, "%u %u %31s %llu %llu %llu %llu %llu %llu %llu", &maj, &min, name, &rio,
                   &rmerge, &rsec, &rms, &wio, &wmerge, &wsec) != 10)
            continue;
        /* Whole devices only (a partition would count its disk twice), no
         * loop or RAM devices. */
        char sys[96];
        snprintf(sys, sizeof sys, "/sys/block/%s", name);
        if (access(sys, F_OK) != 0 || !strncmp(name, "loop", 4) || !strncmp(name, "ram", 3) ||
            !strncmp(name, "zram", 4))
            continue;
        top_disk *d = &n->disks[n->ndisks++];
        snprintf(d->name, sizeof d->name, "%s", name);
        d->rd_ios = rio;
        d->wr_ios = wio;
        d->rd_sec = rsec;
        d->wr_sec = wsec;
    }
    fclose(f);
}

static uint64_t dsub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* CPU shares of the last interval, percent: user (+nice), system (+irq,
 * softirq), iowait. */
static void cpu_pct(const top_state *t, double *user, double *sys, double *iow)
{
    uint64_t d[8], total = 0;
    for (int i = 0; i < 8; i++) {
        d[i] = dsub(t->node.cpu[i], t->node_prev.cpu[i]);
        total += d[i];
    }
    double k = total ? 100.0 / (double)total : 0;
    *user = (double)(d[0] + d[1]) * k;
    *sys = (double)(d[2] + d[5] + d[6]) * k;
    *iow = (double)d[4] * k;
}

static const top_disk *disk_prev(const top_state *t, const char *name)
{
    for (int i = 0; i < t->node_prev.ndisks; i++)
        if (!strcmp(t->node_prev.disks[i].name, name))
            return &t->node_prev.disks[i];
    return NULL;
}

/* ---- segments ---------------------------------------------------------- */

static void add_note(top_state *t, const char *name, const char *why)
{
    if (t->nnotes >= TOP_MAX_NOTES)
        return;
    snprintf(t->notes[t->nnotes].name, sizeof t->notes[0].name, "%.63s", name);
    snprintf(t->notes[t->nnotes].why, sizeof t->notes[0].why, "%s", why);
    t->nnotes++;
}

static void add_event(top_state *t, top_proc *p, const char *text)
{
    if (t->nevents == TOP_MAX_EVENTS) { /* drop the oldest ended one, else the oldest */
        int drop = 0;
        for (int i = 0; i < t->nevents; i++)
            if (t->events[i].end) {
                drop = i;
                break;
            }
        memmove(&t->events[drop], &t->events[drop + 1],
                (size_t)(t->nevents - drop - 1) * sizeof t->events[0]);
        t->nevents--;
        for (int i = 0; i < t->nprocs; i++) /* re-point the open ones */
            if (t->procs[i].event > drop + 1)
                t->procs[i].event--;
            else if (t->procs[i].event == drop + 1)
                t->procs[i].event = 0;
    }
    top_event *e = &t->events[t->nevents++];
    memset(e, 0, sizeof *e);
    e->start = time(NULL);
    snprintf(e->text, sizeof e->text, "%s", text);
    if (p)
        p->event = t->nevents;
    else
        e->end = e->start;
}

static int is_infer(const top_proc *p) { return p->cur.kind == CH_SHM_KIND_INFER; }

static void proc_label(const top_proc *p, char *buf, size_t cap)
{
    if (is_infer(p))
        snprintf(buf, cap, "%s pid %d (infer)", p->cur.comm[0] ? p->cur.comm : "infer",
                 (int)p->cur.pid);
    else if (p->cur.world > 1)
        snprintf(buf, cap, "rank %u (pid %d)", p->cur.rank, (int)p->cur.pid);
    else
        snprintf(buf, cap, "%s pid %d", p->cur.comm[0] ? p->cur.comm : "loader", (int)p->cur.pid);
}

/* The figures a row shows, from the loader's window and the deltas. */
static void derive(top_proc *p)
{
    const uint64_t *c = p->cur.c;
    double win = (double)c[CH_SHM_WINDOW_NS];
    p->ips = win > 0 ? (double)c[CH_SHM_WINDOW_SAMPLES] * 1e9 / win : 0;
    p->wait_pct = win > 0 ? 100.0 * (double)c[CH_SHM_WINDOW_WAIT_NS] / win : 0;
    const uint64_t *o = p->have_prev ? p->prev.c : NULL;
    uint64_t db = o ? dsub(c[CH_SHM_BATCHES], o[CH_SHM_BATCHES]) : c[CH_SHM_BATCHES];
    uint64_t df = o ? dsub(c[CH_SHM_QUEUE_FILL_SUM], o[CH_SHM_QUEUE_FILL_SUM])
                    : c[CH_SHM_QUEUE_FILL_SUM];
    p->fill = db ? (double)df / (double)db : -1;
    uint64_t ch = c[CH_SHM_CACHE_HITS], cm = c[CH_SHM_CACHE_MISSES];
    p->cache_pct = ch + cm ? 100.0 * (double)ch / (double)(ch + cm) : -1;
    uint64_t th = c[CH_SHM_TIER_HITS], tf = c[CH_SHM_TIER_FETCHES];
    p->tier_pct = th + tf ? 100.0 * (double)th / (double)(th + tf) : -1;
    if (is_infer(p)) {
        /* An inference session: requests handed out per second, nobody
         * waits on it (its latency takes the wait's place), no bottleneck. */
        p->wait_pct = 0;
        p->fill = -1;
        p->bottleneck = "serving";
        return;
    }
    /* The bottleneck: a consumer that waits under 5% of its window is fed
     * (TensorBoard's input-pipeline analyzer calls > 5% input-bound): the
     * training step is the limit.  Otherwise the stage whose workers were
     * busiest since the last refresh (lifetime before the second); read
     * time is storage.  Workers mostly idle while the consumer waits:
     * they are waiting for the read-ahead, i.e. storage too. */
    if (!c[CH_SHM_WINDOW_NS] || !c[CH_SHM_BATCHES]) {
        p->bottleneck = "starting";
        return;
    }
    if (p->wait_pct < 5) {
        p->bottleneck = "compute";
        return;
    }
    uint64_t r = c[CH_SHM_READ_BUSY_NS], d = c[CH_SHM_DECODE_BUSY_NS],
             x = c[CH_SHM_TRANSFORM_BUSY_NS];
    double span = (double)c[CH_SHM_WALL_NS];
    if (o) {
        r = dsub(r, o[CH_SHM_READ_BUSY_NS]);
        d = dsub(d, o[CH_SHM_DECODE_BUSY_NS]);
        x = dsub(x, o[CH_SHM_TRANSFORM_BUSY_NS]);
        span = (double)dsub(c[CH_SHM_PUBLISHED_NS], o[CH_SHM_PUBLISHED_NS]);
    }
    double cap = span * (double)(c[CH_SHM_WORKERS] ? c[CH_SHM_WORKERS] : 1);
    if (cap > 0 && (double)(r + d + x) < 0.5 * cap)
        p->bottleneck = "storage";
    else if (r >= d && r >= x)
        p->bottleneck = "storage";
    else
        p->bottleneck = d >= x ? "decode" : "transform";
}

static top_proc *find_proc(top_state *t, const char *name)
{
    for (int i = 0; i < t->nprocs; i++)
        if (!strcmp(t->procs[i].name, name))
            return &t->procs[i];
    return NULL;
}

static int proc_cmp(const void *a, const void *b)
{
    const top_proc *x = a, *y = b;
    if (x->cur.world != y->cur.world)
        return x->cur.world > y->cur.world ? -1 : 1;
    if (x->cur.rank != y->cur.rank)
        return x->cur.rank < y->cur.rank ? -1 : 1;
    return x->cur.pid < y->cur.pid ? -1 : x->cur.pid > y->cur.pid;
}

/* One pass over the directory: update the known segments, add new ones,
 * drop the vanished (an event), note the ignored. */
static void scan(top_state *t)
{
    t->nnotes = 0;
    for (int i = 0; i < t->nprocs; i++)
        t->procs[i].seen = 0;
    DIR *d = opendir(t->dir);
    if (d) {
        uid_t uid = getuid();
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            pid_t pid;
            if (!ch_shm_name_match(e->d_name, uid, &pid))
                continue; /* not a segment of this user: not ours to read */
            if (strlen(e->d_name) >= sizeof t->procs[0].name) {
                add_note(t, e->d_name, "name too long");
                continue;
            }
            ch_shm_view v;
            char why[160];
            if (ch_shm_read(dirfd(d), e->d_name, &v, why, sizeof why) != 0) {
                add_note(t, e->d_name, why);
                continue;
            }
            if (v.pid != pid) {
                snprintf(why, sizeof why, "pid %d inside, %d in the name", (int)v.pid, (int)pid);
                add_note(t, e->d_name, why);
                continue;
            }
            if (kill(pid, 0) != 0 && errno == ESRCH)
                continue; /* died since the sweep: removed at the next one */
            top_proc *p = find_proc(t, e->d_name);
            if (!p) {
                if (t->nprocs == TOP_MAX_PROCS) {
                    add_note(t, e->d_name, "more than 1024 loaders: not shown");
                    continue;
                }
                p = &t->procs[t->nprocs++];
                memset(p, 0, sizeof *p);
                snprintf(p->name, sizeof p->name, "%s", e->d_name);
            } else {
                p->prev = p->cur;
                p->have_prev = 1;
            }
            p->cur = v;
            p->seen = 1;
        }
        closedir(d);
    }
    uint64_t now = cli_now_s() * 1e9;
    for (int i = 0; i < t->nprocs;) {
        top_proc *p = &t->procs[i];
        char label[96], text[200];
        proc_label(p, label, sizeof label);
        if (!p->seen) {
            if (p->event)
                t->events[p->event - 1].end = time(NULL);
            snprintf(text, sizeof text, "%s is gone (loader closed or process ended)", label);
            add_event(t, NULL, text);
            t->procs[i] = t->procs[--t->nprocs];
            continue;
        }
        derive(p);
        p->stale = now > p->cur.c[CH_SHM_PUBLISHED_NS] + 3000000000ull;
        int waiting = p->bottleneck && strcmp(p->bottleneck, "starting") &&
                      p->wait_pct >= t->warn;
        if (waiting && !p->event) {
            snprintf(text, sizeof text, "%s waited %.0f%% of the last %.0f s: %s-bound", label,
                     p->wait_pct, (double)p->cur.c[CH_SHM_WINDOW_NS] / 1e9, p->bottleneck);
            add_event(t, p, text);
        }
        if (p->event) {
            top_event *ev = &t->events[p->event - 1];
            if (p->wait_pct > ev->peak)
                ev->peak = p->wait_pct;
            if (!waiting) {
                ev->end = time(NULL);
                p->event = 0;
            }
        }
        i++;
    }
    /* Rows point at their events (p->event), so sorting them is safe. */
    qsort(t->procs, (size_t)t->nprocs, sizeof *t->procs, proc_cmp);
}

/* ---- output ------------------------------------------------------------ */

static void fmt_pct(char *buf, size_t cap, double v)
{
    if (v < 0)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.0f%%", v);
}

static void write_json(const top_state *t, FILE *f)
{
    double u, s, w;
    cpu_pct(t, &u, &s, &w);
    fprintf(f, "{\"time\":%.3f,\"host\":", (double)time(NULL));
    cli_json_str(f, t->host);
    fprintf(f, ",\"interval_s\":%.3f,\"node\":{\"cpu\":{\"user_pct\":%.1f,\"system_pct\":%.1f,"
               "\"iowait_pct\":%.1f},\"disks\":[",
            t->interval, u, s, w);
    for (int i = 0, first = 1; i < t->node.ndisks; i++) {
        const top_disk *d = &t->node.disks[i], *o = disk_prev(t, d->name);
        if (!o)
            continue;
        double rd = (double)dsub(d->rd_sec, o->rd_sec) * 512 / 1e6 / t->interval;
        double wr = (double)dsub(d->wr_sec, o->wr_sec) * 512 / 1e6 / t->interval;
        double iops = (double)(dsub(d->rd_ios, o->rd_ios) + dsub(d->wr_ios, o->wr_ios)) /
                      t->interval;
        fprintf(f, "%s{\"name\":", first ? "" : ",");
        cli_json_str(f, d->name);
        fprintf(f, ",\"read_mb_s\":%.2f,\"write_mb_s\":%.2f,\"iops\":%.1f}", rd, wr, iops);
        first = 0;
    }
    fprintf(f, "],\"gpu\":");
    uint64_t used, total;
    if (t->gpu) {
        fprintf(f, "{\"name\":");
        cli_json_str(f, cli_gpu_name(t->gpu));
        fprintf(f, ",\"util_pct\":%d", cli_gpu_util(t->gpu));
        if (cli_gpu_mem(t->gpu, &used, &total) == 0)
            fprintf(f, ",\"mem_used_mb\":%.0f,\"mem_total_mb\":%.0f", used / 1e6, total / 1e6);
        fprintf(f, "}");
    } else {
        fprintf(f, "null,\"gpu_note\":\"no GPU (libnvidia-ml not loadable)\"");
    }
    fprintf(f, "},\"processes\":[");
    for (int i = 0; i < t->nprocs; i++) {
        const top_proc *p = &t->procs[i];
        const uint64_t *c = p->cur.c;
        fprintf(f, "%s{\"pid\":%d,\"rank\":%u,\"world\":%u,\"kind\":\"%s\",\"comm\":",
                i ? "," : "", (int)p->cur.pid, p->cur.rank, p->cur.world,
                p->cur.kind == CH_SHM_KIND_INFER ? "infer" : "loader");
        cli_json_str(f, p->cur.comm);
        fprintf(f, ",\"dataset\":");
        cli_json_str(f, p->cur.dataset);
        fprintf(f, ",\"segment\":");
        cli_json_str(f, p->name);
        fprintf(f,
                ",\"images_per_s\":%.1f,\"wait_pct\":%.1f,\"window_s\":%.2f,\"bottleneck\":\"%s\","
                "\"queue_fill\":",
                p->ips, p->wait_pct, (double)c[CH_SHM_WINDOW_NS] / 1e9, p->bottleneck);
        if (p->fill < 0)
            fprintf(f, "null");
        else
            fprintf(f, "%.2f", p->fill);
        fprintf(f, ",\"queue_capacity\":%llu,\"cache_hit_pct\":",
                (unsigned long long)c[CH_SHM_QUEUE_CAPACITY]);
        if (p->cache_pct < 0)
            fprintf(f, "null");
        else
            fprintf(f, "%.1f", p->cache_pct);
        fprintf(f, ",\"tier_hit_pct\":");
        if (p->tier_pct < 0)
            fprintf(f, "null");
        else
            fprintf(f, "%.1f", p->tier_pct);
        fprintf(f,
                ",\"corrupt\":%llu,\"io_retries\":%llu,\"samples\":%llu,\"batches\":%llu,"
                "\"workers\":%llu,\"wait_ms_last_batch\":%.3f,\"stale\":%s",
                (unsigned long long)c[CH_SHM_CORRUPT], (unsigned long long)c[CH_SHM_IO_RETRIES],
                (unsigned long long)c[CH_SHM_SAMPLES], (unsigned long long)c[CH_SHM_BATCHES],
                (unsigned long long)c[CH_SHM_WORKERS], (double)c[CH_SHM_LAST_WAIT_NS] / 1e6,
                p->stale ? "true" : "false");
        if (is_infer(p)) /* the session's own figures */
            fprintf(f,
                    ",\"requests_per_s\":%.1f,\"latency_p50_ms\":%.3f,\"latency_p99_ms\":%.3f,"
                    "\"queued\":%llu,\"submitted\":%llu,\"completed\":%llu,\"failed\":%llu,"
                    "\"rejected_busy\":%llu",
                    p->ips, (double)c[CH_SHM_LAT_P50_NS] / 1e6, (double)c[CH_SHM_LAT_P99_NS] / 1e6,
                    (unsigned long long)c[CH_SHM_INFER_QUEUED],
                    (unsigned long long)c[CH_SHM_INFER_SUBMITTED],
                    (unsigned long long)c[CH_SHM_SAMPLES], (unsigned long long)c[CH_SHM_CORRUPT],
                    (unsigned long long)c[CH_SHM_INFER_REJECTED]);
        fprintf(f, "}");
    }
    fprintf(f, "],\"events\":[");
    for (int i = 0; i < t->nevents; i++) {
        fprintf(f, "%s{\"start\":%lld,\"end\":", i ? "," : "", (long long)t->events[i].start);
        if (t->events[i].end)
            fprintf(f, "%lld", (long long)t->events[i].end);
        else
            fprintf(f, "null");
        fprintf(f, ",\"text\":");
        cli_json_str(f, t->events[i].text);
        fprintf(f, "}");
    }
    fprintf(f, "],\"ignored\":[");
    for (int i = 0; i < t->nnotes; i++) {
        fprintf(f, "%s{\"name\":", i ? "," : "");
        cli_json_str(f, t->notes[i].name);
        fprintf(f, ",\"reason\":");
        cli_json_str(f, t->notes[i].why);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
}

static void write_line(const top_state *t, FILE *f)
{
    double u, s, w;
    cpu_pct(t, &u, &s, &w);
    char ts[32];
    time_t now = time(NULL);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", localtime(&now));
    fprintf(f, "%s chute top: cpu user %.0f%% sys %.0f%% iowait %.0f%%", ts, u, s, w);
    for (int i = 0; i < t->nprocs; i++) {
        const top_proc *p = &t->procs[i];
        char label[96];
        proc_label(p, label, sizeof label);
        if (is_infer(p))
            fprintf(f, " | %s %.0f req/s p99 %.1f ms queue %llu/%llu", label, p->ips,
                    (double)p->cur.c[CH_SHM_LAT_P99_NS] / 1e6,
                    (unsigned long long)p->cur.c[CH_SHM_INFER_QUEUED],
                    (unsigned long long)p->cur.c[CH_SHM_QUEUE_CAPACITY]);
        else
            fprintf(f, " | %s %s %.0f img/s wait %.0f%% %s", label, p->cur.dataset, p->ips,
                    p->wait_pct, p->bottleneck);
    }
    if (!t->nprocs)
        fprintf(f, " | no chute loaders");
    if (t->nnotes)
        fprintf(f, " | %d segment(s) ignored", t->nnotes);
    fprintf(f, "\n");
}

static void write_screen(const top_state *t, FILE *f, int color)
{
    const char *B = color ? "\033[1m" : "", *R = color ? "\033[0m" : "",
               *RED = color ? "\033[31m" : "", *YEL = color ? "\033[33m" : "";
    double u, s, w;
    cpu_pct(t, &u, &s, &w);
    char ts[32];
    time_t now = time(NULL);
    strftime(ts, sizeof ts, "%H:%M:%S", localtime(&now));
    if (color)
        fprintf(f, "\033[H\033[2J");
    fprintf(f, "%schute top%s  %s  %s  refresh %.1f s  (Ctrl-C quits)\n", B, R, t->host, ts,
            t->interval);
    fprintf(f, "%sCPU%s  user %5.1f%%  system %5.1f%%  %siowait %5.1f%%%s\n", B, R, u, s,
            w >= 20 ? RED : w >= 5 ? YEL : "", w, R);
    for (int i = 0; i < t->node.ndisks; i++) {
        const top_disk *d = &t->node.disks[i], *o = disk_prev(t, d->name);
        if (!o)
            continue;
        fprintf(f, "%sDISK%s %-8s read %7.1f MB/s  write %7.1f MB/s  IOPS %7.0f\n", B, R,
                d->name, (double)dsub(d->rd_sec, o->rd_sec) * 512 / 1e6 / t->interval,
                (double)dsub(d->wr_sec, o->wr_sec) * 512 / 1e6 / t->interval,
                (double)(dsub(d->rd_ios, o->rd_ios) + dsub(d->wr_ios, o->wr_ios)) / t->interval);
    }
    uint64_t used, total;
    if (t->gpu) {
        fprintf(f, "%sGPU%s  %s  util %d%%", B, R, cli_gpu_name(t->gpu), cli_gpu_util(t->gpu));
        if (cli_gpu_mem(t->gpu, &used, &total) == 0)
            fprintf(f, "  memory %.0f / %.0f MB", used / 1e6, total / 1e6);
        fprintf(f, "\n");
    } else {
        fprintf(f, "%sGPU%s  no GPU (libnvidia-ml not loadable)\n", B, R);
    }
    fprintf(f, "\n%s%-8s %-6s %-10s %-14s %9s %6s %-10s %-7s %6s %7s%s\n", B, "PID", "RANK",
            "COMMAND", "DATASET", "IMG/S", "WAIT", "BOTTLENECK", "QUEUE", "CACHE", "ERRORS", R);
    for (int i = 0; i < t->nprocs; i++) {
        const top_proc *p = &t->procs[i];
        const uint64_t *c = p->cur.c;
        char rank[24], queue[24], cache[16];
        snprintf(rank, sizeof rank, p->cur.world > 1 ? "%u/%u" : "-", p->cur.rank, p->cur.world);
        if (p->fill < 0)
            snprintf(queue, sizeof queue, "-/%llu", (unsigned long long)c[CH_SHM_QUEUE_CAPACITY]);
        else
            snprintf(queue, sizeof queue, "%.1f/%llu", p->fill,
                     (unsigned long long)c[CH_SHM_QUEUE_CAPACITY]);
        fmt_pct(cache, sizeof cache, p->cache_pct >= 0 ? p->cache_pct : p->tier_pct);
        if (is_infer(p)) {
            /* IMG/S: requests/s; WAIT: the last second's p99 latency;
             * QUEUE: requests in flight / queue_capacity. */
            char lat[16];
            snprintf(queue, sizeof queue, "%llu/%llu",
                     (unsigned long long)c[CH_SHM_INFER_QUEUED],
                     (unsigned long long)c[CH_SHM_QUEUE_CAPACITY]);
            double p99 = (double)c[CH_SHM_LAT_P99_NS] / 1e6;
            snprintf(lat, sizeof lat, p99 < 100 ? "%.1fms" : "%.0fms", p99);
            fprintf(f, "%-8d %-6s %-10.10s %-14.14s %9.1f %6s %-10s %-7s %6s %7llu%s\n",
                    (int)p->cur.pid, "infer", p->cur.comm, "(p99 latency)", p->ips, lat,
                    p->bottleneck, queue, "-",
                    (unsigned long long)(c[CH_SHM_CORRUPT] + c[CH_SHM_INFER_REJECTED]),
                    p->stale ? "  (no update for 3 s)" : "");
            continue;
        }
        const char *wc = p->wait_pct >= t->warn ? RED : p->wait_pct >= 5 ? YEL : "";
        fprintf(f, "%-8d %-6s %-10.10s %-14.14s %9.1f %s%5.1f%%%s %-10s %-7s %6s %7llu%s\n",
                (int)p->cur.pid, rank, p->cur.comm, p->cur.dataset, p->ips, wc, p->wait_pct, R,
                p->bottleneck, queue, cache,
                (unsigned long long)(c[CH_SHM_CORRUPT] + c[CH_SHM_IO_RETRIES]),
                p->stale ? "  (no update for 3 s)" : "");
    }
    if (!t->nprocs)
        fprintf(f, "(no chute loaders of this user on this node)\n");
    if (t->nevents) {
        fprintf(f, "\n%sEVENTS%s\n", B, R);
        for (int i = t->nevents - 1; i >= 0; i--) {
            const top_event *e = &t->events[i];
            char when[16];
            strftime(when, sizeof when, "%H:%M:%S", localtime(&e->start));
            if (e->end)
                fprintf(f, "%s  %s (ended, %lld s)\n", when, e->text,
                        (long long)(e->end - e->start));
            else
                fprintf(f, "%s  %s%s (ongoing, peak %.0f%%)%s\n", when, RED, e->text, e->peak, R);
        }
    }
    if (t->nnotes) {
        fprintf(f, "\n%sIGNORED%s\n", B, R);
        for (int i = 0; i < t->nnotes; i++)
            fprintf(f, "%s/%s: %s\n", t->dir, t->notes[i].name, t->notes[i].why);
    }
}

int cmd_top(int argc, char **argv)
{
    int once = 0, json = 0, line = 0;
    uint32_t count = 0;
    const char *interval_s = "1", *dir = CH_SHM_DIR;
    uint32_t warn = 20;
    const cli_opt opts[] = {
        {"--interval", CLI_STR, &interval_s, NULL, 0, 0,
         "seconds between refreshes: 2, 0.5, 500ms (default 1)"},
        {"--once", CLI_FLAG, &once, NULL, 0, 0,
         "one refresh (one interval after the first look, for the rates) and exit"},
        {"--count", CLI_U32, &count, NULL, 0, UINT32_MAX,
         "exit after this many refreshes (default 0: until Ctrl-C)"},
        {"--json", CLI_FLAG, &json, NULL, 0, 0, "one JSON document per refresh"},
        {"--line", CLI_FLAG, &line, NULL, 0, 0, "one line per refresh, for logs"},
        {"--warn", CLI_U32, &warn, NULL, 1, 100,
         "a consumer waiting this percent of its window opens an event (default 20)"},
        {"--dir", CLI_STR, &dir, NULL, 0, 0, "where the segments are (default /dev/shm)"},
        {NULL, 0, NULL, NULL, 0, 0, NULL},
    };
    const char *pos[1];
    int np = 0;
    int rc = cli_parse("top", "[options]", opts, argc, argv, pos, 0, &np);
    if (rc)
        return rc == 1 ? 0 : rc;
    double interval = cli_parse_duration(interval_s);
    if (interval < 0.05 || interval > 3600) {
        fprintf(stderr, "chute top: --interval must be a duration in 0.05..3600 s, not '%s'\n",
                interval_s);
        return 2;
    }
    if (json && line) {
        fprintf(stderr, "chute top: --json and --line are two output forms: pick one\n");
        return 2;
    }
    if (once)
        count = 1;
    top_state t;
    memset(&t, 0, sizeof t);
    t.dir = dir;
    t.interval = interval;
    t.warn = warn;
    t.procs = calloc(TOP_MAX_PROCS, sizeof *t.procs);
    if (!t.procs) {
        fprintf(stderr, "chute top: out of memory\n");
        return 1;
    }
    if (gethostname(t.host, sizeof t.host - 1) != 0)
        snprintf(t.host, sizeof t.host, "?");
    t.gpu = cli_gpu_open();
    ch_shm_sweep(dir);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int color = !json && !line && isatty(1);
    if (color)
        fputs("\033[?25l", stdout); /* hide the cursor while redrawing */
    read_node(&t.node);
    scan(&t);
    for (uint32_t n = 0; !top_stop && (count == 0 || n < count); n++) {
        cli_sleep_s(interval);
        if (top_stop)
            break;
        t.node_prev = t.node;
        read_node(&t.node);
        scan(&t);
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (!m)
            break;
        if (json)
            write_json(&t, m);
        else if (line)
            write_line(&t, m);
        else
            write_screen(&t, m, color);
        fclose(m);
        fwrite(buf, 1, len, stdout);
        fflush(stdout);
        free(buf);
    }
    if (color)
        fputs("\033[?25h", stdout);
    cli_gpu_close(t.gpu);
    free(t.procs);
    return 0;
}
