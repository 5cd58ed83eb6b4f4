/*
 * json_parse.c — which Debian JSON library parses a COCO-sized instances
 * file fastest and in the least memory (issue 24: "parse annotation JSON
 * with a well-kept library from Debian; measure which is fastest").
 *
 * Candidates: jansson (libjansson-dev), json-c (libjson-c-dev), cJSON
 * (libcjson-dev).  simdjson is C++ and not a candidate for a C11 library.
 * Each round runs every library in its own forked child, in rotating
 * order, so that each child's peak RSS (getrusage RUSAGE_SELF ru_maxrss)
 * is its own.  A child reads the whole file into memory (not timed), then
 * times parse + the walk chute's COCO reader does (every annotation's
 * image_id, category_id, bbox[4], iscrowd, id and the segmentation's
 * first value), then frees the tree (timed apart).  A "read only" child
 * gives the RSS of the file buffer alone.
 *
 *   bash bench/json_parse.sh [COCO.json] [rounds]
 *
 * Prints one line per child and a median summary; bench/results-targets.md
 * keeps the figures as ratios.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct walk {
    uint64_t n;
    double sum;
} walk;

/* The three libraries' headers clash (json_object, json_type), so this file
 * is compiled once per library (JP_LIB=1..3) and once for main (JP_LIB=0):
 * bench/json_parse.sh. */
int run_jansson(const char *buf, size_t len, walk *w, double *t_free);
int run_jsonc(const char *buf, size_t len, walk *w, double *t_free);
int run_cjson(const char *buf, size_t len, walk *w, double *t_free);
double now(void);

#if JP_LIB == 0
double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

#endif

#if JP_LIB == 1
#include <jansson.h>
int run_jansson(const char *buf, size_t len, walk *w, double *t_free)
{
    json_error_t e;
    json_t *root = json_loadb(buf, len, 0, &e);
    if (!root) {
        fprintf(stderr, "jansson: %s line %d\n", e.text, e.line);
        return -1;
    }
    json_t *anns = json_object_get(root, "annotations");
    size_t i;
    json_t *a;
    json_array_foreach(anns, i, a) {
        json_t *bb = json_object_get(a, "bbox");
        for (size_t k = 0; k < 4; k++)
            w->sum += json_number_value(json_array_get(bb, k));
        w->sum += (double)json_integer_value(json_object_get(a, "image_id"));
        w->sum += (double)json_integer_value(json_object_get(a, "category_id"));
        w->sum += (double)json_integer_value(json_object_get(a, "iscrowd"));
        w->sum += (double)json_integer_value(json_object_get(a, "id"));
        json_t *seg = json_object_get(a, "segmentation");
        if (json_is_array(seg))
            w->sum += json_number_value(json_array_get(json_array_get(seg, 0), 0));
        w->n++;
    }
    double t = now();
    json_decref(root);
    *t_free = now() - t;
    return 0;
}

#endif

#if JP_LIB == 2
#include <json-c/json.h>
int run_jsonc(const char *buf, size_t len, walk *w, double *t_free)
{
    if (len > INT32_MAX) {
        fprintf(stderr, "json-c: json_tokener_parse_ex takes an int length\n");
        return -1;
    }
    json_tokener *tok = json_tokener_new_ex(64);
    struct json_object *root = json_tokener_parse_ex(tok, buf, (int)len);
    if (!root) {
        fprintf(stderr, "json-c: %s\n", json_tokener_error_desc(json_tokener_get_error(tok)));
        return -1;
    }
    json_tokener_free(tok);
    struct json_object *anns, *v;
    json_object_object_get_ex(root, "annotations", &anns);
    size_t n = json_object_array_length(anns);
    for (size_t i = 0; i < n; i++) {
        struct json_object *a = json_object_array_get_idx(anns, i);
        if (json_object_object_get_ex(a, "bbox", &v))
            for (size_t k = 0; k < 4; k++)
                w->sum += json_object_get_double(json_object_array_get_idx(v, k));
        const char *keys[] = {"image_id", "category_id", "iscrowd", "id"};
        for (int k = 0; k < 4; k++)
            if (json_object_object_get_ex(a, keys[k], &v))
                w->sum += (double)json_object_get_int64(v);
        if (json_object_object_get_ex(a, "segmentation", &v) && json_object_is_type(v, json_type_array))
            w->sum += json_object_get_double(
                json_object_array_get_idx(json_object_array_get_idx(v, 0), 0));
        w->n++;
    }
    double t = now();
    json_object_put(root);
    *t_free = now() - t;
    return 0;
}

#endif

#if JP_LIB == 3
#include <cjson/cJSON.h>
int run_cjson(const char *buf, size_t len, walk *w, double *t_free)
{
    cJSON *root = cJSON_ParseWithLength(buf, len);
    if (!root) {
        fprintf(stderr, "cJSON: parse error near byte %td\n", cJSON_GetErrorPtr() - buf);
        return -1;
    }
    cJSON *anns = cJSON_GetObjectItemCaseSensitive(root, "annotations");
    cJSON *a;
    cJSON_ArrayForEach(a, anns) {
        cJSON *bb = cJSON_GetObjectItemCaseSensitive(a, "bbox");
        for (int k = 0; k < 4; k++)
            w->sum += cJSON_GetNumberValue(cJSON_GetArrayItem(bb, k));
        const char *keys[] = {"image_id", "category_id", "iscrowd", "id"};
        for (int k = 0; k < 4; k++)
            w->sum += cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a, keys[k]));
        cJSON *seg = cJSON_GetObjectItemCaseSensitive(a, "segmentation");
        if (cJSON_IsArray(seg))
            w->sum += cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetArrayItem(seg, 0), 0));
        w->n++;
    }
    double t = now();
    cJSON_Delete(root);
    *t_free = now() - t;
    return 0;
}

#endif

#if JP_LIB == 0
typedef int (*run_fn)(const char *, size_t, walk *, double *);
static const struct {
    const char *name;
    run_fn fn;
} LIBS[] = {{"read-only", NULL}, {"jansson", run_jansson}, {"json-c", run_jsonc}, {"cJSON", run_cjson}};
enum { NLIBS = sizeof LIBS / sizeof LIBS[0] };

/* One child: parse + walk, report through a pipe. */
typedef struct result {
    double t_parse, t_free;
    long rss_kb;
    uint64_t n;
    double sum;
    int ok;
} result;

static result child(const char *path, int lib)
{
    int fd[2];
    result r = {0};
    if (pipe(fd) != 0)
        exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        size_t len;
        char *buf = slurp(path, &len);
        walk w = {0};
        double tf = 0, t0 = now();
        int rc = LIBS[lib].fn ? LIBS[lib].fn(buf, len, &w, &tf) : 0;
        r.t_parse = now() - t0 - tf;
        r.t_free = tf;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        r.rss_kb = ru.ru_maxrss;
        r.n = w.n;
        r.sum = w.sum;
        r.ok = rc == 0;
        if (write(fd[1], &r, sizeof r) != sizeof r)
            _exit(3);
        _exit(0);
    }
    close(fd[1]);
    if (read(fd[0], &r, sizeof r) != sizeof r)
        r.ok = 0;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    return r;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s COCO.json [rounds]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (rounds < 1 || rounds > 50)
        rounds = 3;
    double t[NLIBS][50], tf[NLIBS][50];
    long rss[NLIBS] = {0};
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < NLIBS; k++) {
            int lib = (k + r) % NLIBS;
            result res = child(argv[1], lib);
            if (!res.ok) {
                fprintf(stderr, "%s failed\n", LIBS[lib].name);
                return 1;
            }
            t[lib][r] = res.t_parse;
            tf[lib][r] = res.t_free;
            if (res.rss_kb > rss[lib])
                rss[lib] = res.rss_kb;
            printf("round %d %-9s parse+walk %.3f s  free %.3f s  peak RSS %ld MiB  annotations %llu  "
                   "checksum %.6g\n",
                   r, LIBS[lib].name, res.t_parse, res.t_free, res.rss_kb / 1024,
                   (unsigned long long)res.n, res.sum);
            fflush(stdout);
        }
    printf("\nmedian of %d rounds (RSS over the file buffer = peak - read-only peak)\n", rounds);
    for (int k = 0; k < NLIBS; k++) {
        qsort(t[k], (size_t)rounds, sizeof(double), cmp_d);
        qsort(tf[k], (size_t)rounds, sizeof(double), cmp_d);
        printf("%-9s parse+walk %.3f s  free %.3f s  peak RSS %ld MiB (+%ld MiB)\n", LIBS[k].name,
               t[k][rounds / 2], tf[k][rounds / 2], rss[k] / 1024, (rss[k] - rss[0]) / 1024);
    }
    return 0;
}
#endif
