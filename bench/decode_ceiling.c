/*
 * decode_ceiling.c — how fast can this machine decode the benchmark's JPEGs?
 *
 *   cc -O2 -o decode_ceiling bench/decode_ceiling.c -ljpeg -lpthread   (no -lm needed)
 *   decode_ceiling [--mode full|scaled|crop|all] [--threads T] [--size S]
 *                  [--seconds S] [--seed N] ROOT
 *
 * The loader benchmark needs a ceiling that no pipeline can beat: the same
 * JPEGs, already in memory, decoded by libjpeg-turbo on every core, with no
 * reading, no transform, no batching and no hand-off between threads.  This
 * program is that ceiling, so it does as little as possible besides decode:
 * every file under ROOT is loaded into memory first, then T threads take
 * image indices from one atomic counter and decode into a per-thread buffer
 * that is reused.  Nothing is written anywhere.
 *
 * Modes (each prints one JSON line):
 *   full    decode every image at full size to RGB (JDCT_ISLOW, fancy
 *           upsampling: libjpeg's defaults, what PIL and torchvision do).
 *   scaled  decode at the cheapest power-of-two DCT scale M/8 (M = 1, 2, 4,
 *           8) whose shorter side is still >= --size, what a decode-then-
 *           resize eval pipeline needs.  ImageNet-sized images (shorter side
 *           ~375) mostly stay at 8/8, so this is close to `full` there.
 *   crop    the train transform's decode work: a RandomResizedCrop box
 *           (scale 0.08-1, ratio 3/4-4/3, torchvision's algorithm) is drawn
 *           per image, the cheapest power-of-two scale keeping the box >=
 *           --size on both sides is chosen, and only the box's iMCU columns
 *           (jpeg_crop_scanline) and rows (jpeg_skip_scanlines) are decoded.
 *
 * Timing: one untimed pass over the set warms caches and measures the pass
 * time; then enough whole passes to last --seconds (default 3) are timed.
 *
 * Greyscale JPEGs are decoded to RGB as well (libjpeg-turbo converts), as a
 * training loader must.  A file that fails to decode is counted in "errors"
 * and is not counted as an image.  Only .jpg/.jpeg/.JPEG files are loaded.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>

enum mode { MODE_FULL, MODE_SCALED, MODE_CROP };
static const char *const mode_names[] = {"full", "scaled", "crop"};

typedef struct blob {
    unsigned char *data;
    size_t len;
} blob;

/* The loaded set; written by main before any thread starts, then read-only. */
static blob *g_files;
static size_t g_nfiles, g_capfiles;
static uint64_t g_bytes;

typedef struct run {
    enum mode mode;
    unsigned size;
    uint64_t seed;
    uint64_t total;            /* decodes to do: passes * g_nfiles */
    atomic_uint_fast64_t next; /* next decode index; the only shared state */
} run;

typedef struct worker {
    pthread_t tid;
    run *r;
    uint64_t images, errors, pixels;
    uint64_t scale_count[4];   /* decodes at M = 1, 2, 4, 8 */
    unsigned char *buf;
    size_t bufcap;
} worker;

/* ---- loading ---------------------------------------------------------- */

static int has_jpeg_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "decode_ceiling: %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size <= 0) {
        fclose(f);
        return 0; /* empty files are not images; skip quietly */
    }
    size_t len = (size_t)st.st_size;
    unsigned char *data = malloc(len);
    if (!data || fread(data, 1, len, f) != len) {
        fprintf(stderr, "decode_ceiling: %s: short read or out of memory\n", path);
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    if (g_nfiles == g_capfiles) {
        size_t cap = g_capfiles ? g_capfiles * 2 : 1024;
        blob *nb = realloc(g_files, cap * sizeof *nb);
        if (!nb) {
            free(data);
            return -1;
        }
        g_files = nb;
        g_capfiles = cap;
    }
    g_files[g_nfiles].data = data;
    g_files[g_nfiles].len = len;
    g_nfiles++;
    g_bytes += len;
    return 0;
}

/* Depth-first, names sorted, so the order (and the crop boxes drawn per
 * index) is the same on every run. */
static int load_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "decode_ceiling: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char *path;
        if (rc == 0 && asprintf(&path, "%s/%s", dir, names[i]) >= 0) {
            struct stat st;
            if (stat(path, &st) == 0) {
                if (S_ISDIR(st.st_mode))
                    rc = load_tree(path);
                else if (S_ISREG(st.st_mode) && has_jpeg_ext(names[i]))
                    rc = load_file(path);
            }
            free(path);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

/* ---- decoding --------------------------------------------------------- */

typedef struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} err_mgr;

static void on_error(j_common_ptr cinfo)
{
    err_mgr *em = (err_mgr *)cinfo->err;
    longjmp(em->jb, 1);
}

static void on_message(j_common_ptr cinfo)
{
    (void)cinfo; /* warnings (e.g. extraneous bytes) are not failures here */
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
    return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Tiny libm-free helpers, so the build line needs no -lm.  The ranges
 * used here are small (|t| < 0.3 for exp, positive x for sqrt). */
static double exp_small(double t)
{
    double term = 1.0, sum = 1.0;
    for (int i = 1; i < 16; i++) {
        term *= t / i;
        sum += term;
    }
    return sum;
}

static double sqrt_pos(double x)
{
    if (x <= 0)
        return 0;
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 64; i++) {
        double n = 0.5 * (r + x / r);
        if (n >= r)
            break;
        r = n;
    }
    return r;
}

static long round_pos(double x)
{
    return (long)(x + 0.5);
}

/* torchvision RandomResizedCrop.get_params, scale (0.08, 1), ratio (3/4, 4/3). */
static void random_resized_crop(uint64_t *rng, unsigned W, unsigned H, unsigned *x, unsigned *y,
                                unsigned *w, unsigned *h)
{
    double area = (double)W * H;
    const double lr0 = -0.28768207245178090, lr1 = 0.28768207245178090; /* ln(3/4), ln(4/3) */
    for (int attempt = 0; attempt < 10; attempt++) {
        double ta = area * (0.08 + 0.92 * uniform(rng));
        double ar = exp_small(lr0 + (lr1 - lr0) * uniform(rng));
        long cw = round_pos(sqrt_pos(ta * ar)), ch = round_pos(sqrt_pos(ta / ar));
        if (cw > 0 && ch > 0 && cw <= (long)W && ch <= (long)H) {
            *w = (unsigned)cw;
            *h = (unsigned)ch;
            *x = (unsigned)(splitmix64(rng) % (W - *w + 1));
            *y = (unsigned)(splitmix64(rng) % (H - *h + 1));
            return;
        }
    }
    double in_ratio = (double)W / H;
    if (in_ratio < 3.0 / 4.0) {
        *w = W;
        *h = (unsigned)round_pos(W / (3.0 / 4.0));
    } else if (in_ratio > 4.0 / 3.0) {
        *h = H;
        *w = (unsigned)round_pos(H * (4.0 / 3.0));
    } else {
        *w = W;
        *h = H;
    }
    *x = (W - *w) / 2;
    *y = (H - *h) / 2;
}

static unsigned scaled_dim(unsigned d, unsigned m) /* ceil(d * m / 8), as libjpeg */
{
    return (unsigned)(((uint64_t)d * m + 7) / 8);
}

/* Cheapest M in {1,2,4,8} with both dims scaled >= need; 8 if none is. */
static unsigned pick_scale(unsigned a, unsigned b, unsigned need)
{
    for (unsigned m = 1; m < 8; m *= 2)
        if (scaled_dim(a, m) >= need && scaled_dim(b, m) >= need)
            return m;
    return 8;
}

static int ensure_buf(worker *w, size_t need)
{
    if (need <= w->bufcap)
        return 0;
    unsigned char *nb = realloc(w->buf, need);
    if (!nb)
        return -1;
    w->buf = nb;
    w->bufcap = need;
    return 0;
}

/* Decode image `idx` (decode number `k`) per the run's mode.  Returns the
 * pixels produced, or 0 on failure. */
static uint64_t decode_one(worker *w, struct jpeg_decompress_struct *ci, err_mgr *em, size_t idx,
                           uint64_t k)
{
    const blob *b = &g_files[idx];
    if (setjmp(em->jb)) {
        jpeg_abort_decompress(ci);
        return 0;
    }
    jpeg_mem_src(ci, b->data, (unsigned long)b->len);
    if (jpeg_read_header(ci, TRUE) != JPEG_HEADER_OK) {
        jpeg_abort_decompress(ci);
        return 0;
    }
    ci->out_color_space = JCS_RGB;
    ci->dct_method = JDCT_ISLOW;
    unsigned W = ci->image_width, H = ci->image_height;
    unsigned m = 8, cx = 0, cy = 0, cw = W, chh = H;
    if (w->r->mode == MODE_SCALED) {
        unsigned s = W < H ? W : H;
        m = pick_scale(s, s, w->r->size);
    } else if (w->r->mode == MODE_CROP) {
        uint64_t rng = w->r->seed ^ (k * 0xD1B54A32D192ED03ull) ^ idx;
        random_resized_crop(&rng, W, H, &cx, &cy, &cw, &chh);
        m = pick_scale(cw, chh, w->r->size);
    }
    ci->scale_num = m;
    ci->scale_denom = 8;
    w->scale_count[m == 1 ? 0 : m == 2 ? 1 : m == 4 ? 2 : 3]++;
    jpeg_start_decompress(ci);

    JDIMENSION rows = ci->output_height;
    if (w->r->mode == MODE_CROP) {
        /* Box in scaled coordinates, clamped to the scaled image. */
        JDIMENSION sx = (JDIMENSION)((uint64_t)cx * m / 8);
        JDIMENSION sy = (JDIMENSION)((uint64_t)cy * m / 8);
        JDIMENSION sw = scaled_dim(cw, m), sh = scaled_dim(chh, m);
        if (sx + sw > ci->output_width)
            sw = ci->output_width - sx;
        if (sy + sh > ci->output_height)
            sh = ci->output_height - sy;
        JDIMENSION xoff = sx, width = sw;
        if (width < ci->output_width)
            jpeg_crop_scanline(ci, &xoff, &width); /* widens to iMCU edges */
        if (sy > 0 && jpeg_skip_scanlines(ci, sy) != sy) {
            jpeg_abort_decompress(ci);
            return 0;
        }
        rows = sh;
    }
    size_t stride = (size_t)ci->output_width * (size_t)ci->output_components;
    if (ensure_buf(w, stride * ci->rec_outbuf_height)) {
        jpeg_abort_decompress(ci);
        return 0;
    }
    JDIMENSION done = 0;
    while (done < rows && ci->output_scanline < ci->output_height) {
        JSAMPROW rowp[16];
        int n = ci->rec_outbuf_height > 16 ? 16 : ci->rec_outbuf_height;
        for (int i = 0; i < n; i++)
            rowp[i] = w->buf + (size_t)i * stride;
        done += jpeg_read_scanlines(ci, rowp, (JDIMENSION)n);
    }
    uint64_t px = (uint64_t)ci->output_width * done;
    if (ci->output_scanline < ci->output_height)
        jpeg_abort_decompress(ci); /* crop: the rows below the box are never decoded */
    else
        jpeg_finish_decompress(ci);
    return px ? px : 1;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    struct jpeg_decompress_struct ci;
    err_mgr em;
    ci.err = jpeg_std_error(&em.pub);
    em.pub.error_exit = on_error;
    em.pub.output_message = on_message;
    jpeg_create_decompress(&ci);
    for (;;) {
        uint64_t k = atomic_fetch_add_explicit(&w->r->next, 1, memory_order_relaxed);
        if (k >= w->r->total)
            break;
        uint64_t px = decode_one(w, &ci, &em, (size_t)(k % g_nfiles), k);
        if (px) {
            w->images++;
            w->pixels += px;
        } else {
            w->errors++;
        }
    }
    jpeg_destroy_decompress(&ci);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct result {
    uint64_t images, errors, pixels, scale_count[4];
    double seconds;
} result;

static int run_passes(enum mode mode, unsigned threads, unsigned size, uint64_t seed,
                      uint64_t passes, worker *ws, result *out)
{
    run r = {.mode = mode, .size = size, .seed = seed, .total = passes * g_nfiles};
    atomic_init(&r.next, 0);
    memset(out, 0, sizeof *out);
    double t0 = now();
    unsigned started = 0;
    for (unsigned t = 0; t < threads; t++) {
        ws[t].r = &r;
        ws[t].images = ws[t].errors = ws[t].pixels = 0;
        memset(ws[t].scale_count, 0, sizeof ws[t].scale_count);
        if (pthread_create(&ws[t].tid, NULL, worker_main, &ws[t]) != 0) {
            fprintf(stderr, "decode_ceiling: pthread_create failed\n");
            atomic_store(&r.next, r.total); /* stop the ones already running */
            break;
        }
        started++;
    }
    for (unsigned t = 0; t < started; t++) {
        pthread_join(ws[t].tid, NULL);
        out->images += ws[t].images;
        out->errors += ws[t].errors;
        out->pixels += ws[t].pixels;
        for (int i = 0; i < 4; i++)
            out->scale_count[i] += ws[t].scale_count[i];
    }
    out->seconds = now() - t0;
    return started == threads ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: decode_ceiling [--mode full|scaled|crop|all] [--threads T] [--size S]\n"
               "                      [--seconds S] [--seed N] ROOT\n");
}

int main(int argc, char **argv)
{
    const char *root = NULL;
    const char *mode_arg = "all";
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    long size = 224;
    double min_seconds = 3.0;
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--mode") && v) {
            mode_arg = v;
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            threads = strtol(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--size") && v) {
            size = strtol(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--seconds") && v) {
            min_seconds = strtod(v, NULL);
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            seed = strtoull(v, NULL, 10);
            i++;
        } else if (a[0] == '-' || root) {
            usage(stderr);
            return 2;
        } else {
            root = a;
        }
    }
    int modes[3] = {0, 0, 0};
    if (!strcmp(mode_arg, "all"))
        modes[0] = modes[1] = modes[2] = 1;
    else if (!strcmp(mode_arg, "full"))
        modes[MODE_FULL] = 1;
    else if (!strcmp(mode_arg, "scaled"))
        modes[MODE_SCALED] = 1;
    else if (!strcmp(mode_arg, "crop"))
        modes[MODE_CROP] = 1;
    else {
        usage(stderr);
        return 2;
    }
    if (!root || threads < 1 || threads > 1024 || size < 1 || !(min_seconds >= 0)) {
        usage(stderr);
        return 2;
    }
    if (load_tree(root) != 0)
        return 1;
    if (g_nfiles == 0) {
        fprintf(stderr, "decode_ceiling: no .jpg/.jpeg files under %s\n", root);
        return 1;
    }
    worker *ws = calloc((size_t)threads, sizeof *ws);
    if (!ws)
        return 1;
    int rc = 0;
    for (int m = 0; m < 3; m++) {
        if (!modes[m])
            continue;
        result warm, res;
        if (run_passes((enum mode)m, (unsigned)threads, (unsigned)size, seed, 1, ws, &warm)) {
            rc = 1;
            break;
        }
        uint64_t passes = 1;
        if (warm.seconds > 0 && min_seconds > warm.seconds)
            passes = (uint64_t)(min_seconds / warm.seconds) + 1;
        if (run_passes((enum mode)m, (unsigned)threads, (unsigned)size, seed, passes, ws, &res)) {
            rc = 1;
            break;
        }
        printf("{\"mode\":\"%s\",\"threads\":%ld,\"images\":%llu,\"seconds\":%.3f,"
               "\"images_per_sec\":%.1f,\"mpix_per_sec\":%.1f,\"mb_per_sec\":%.1f,"
               "\"dataset_images\":%zu,\"dataset_mb\":%.1f,\"passes\":%llu,\"errors\":%llu,"
               "\"scale_counts\":{\"1/8\":%llu,\"2/8\":%llu,\"4/8\":%llu,\"8/8\":%llu}}\n",
               mode_names[m], threads, (unsigned long long)res.images, res.seconds,
               res.images / res.seconds, res.pixels / res.seconds / 1e6,
               (double)g_bytes * passes / res.seconds / 1e6, g_nfiles, g_bytes / 1e6,
               (unsigned long long)passes, (unsigned long long)res.errors,
               (unsigned long long)res.scale_count[0], (unsigned long long)res.scale_count[1],
               (unsigned long long)res.scale_count[2], (unsigned long long)res.scale_count[3]);
        fflush(stdout);
        if (res.errors)
            fprintf(stderr, "decode_ceiling: %llu decode errors in mode %s\n",
                    (unsigned long long)res.errors, mode_names[m]);
    }
    for (long t = 0; t < threads; t++)
        free(ws[t].buf);
    free(ws);
    for (size_t i = 0; i < g_nfiles; i++)
        free(g_files[i].data);
    free(g_files);
    return rc;
}
