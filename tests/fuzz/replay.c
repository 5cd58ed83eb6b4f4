/*
 * replay.c — runs a fuzz target without a fuzzing engine, for CI: every
 * file given (or every file under a directory given) is fed as is, then
 * in N deterministic mutations (byte flips, truncations, insertions), so
 * the suite exercises the target on real seeds plus damage to them.
 *
 *   usage: replay [--mutations N] FILE|DIR ...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long g_inputs;

static uint64_t next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t x = *s;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void run_file(const char *path, int mutations)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (64l << 20)) {
        fclose(f);
        return;
    }
    uint8_t *buf = malloc((size_t)n + 64), *mut = malloc((size_t)n + 64);
    if (!buf || !mut || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        free(mut);
        return;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    g_inputs++;
    uint64_t s = (uint64_t)n * 2654435761u;
    for (int m = 0; m < mutations; m++) {
        size_t len = (size_t)n;
        memcpy(mut, buf, len);
        switch (next(&s) % 4) {
        case 0: /* flip bytes */
            for (int k = 0; k < 1 + (int)(next(&s) % 8) && len; k++)
                mut[next(&s) % len] ^= (uint8_t)(1u << (next(&s) % 8));
            break;
        case 1: /* truncate */
            len = len ? next(&s) % len : 0;
            break;
        case 2: /* overwrite a 4-byte field with an extreme value */
            if (len >= 4) {
                uint32_t v = (next(&s) & 1) ? 0xFFFFFFFFu : (uint32_t)next(&s);
                memcpy(mut + next(&s) % (len - 3), &v, 4);
            }
            break;
        default: /* duplicate a chunk over another place */
            if (len >= 32) {
                size_t a = next(&s) % (len - 16), b = next(&s) % (len - 16);
                memmove(mut + b, mut + a, 16);
            }
            break;
        }
        LLVMFuzzerTestOneInput(mut, len);
        g_inputs++;
    }
    free(buf);
    free(mut);
}

static void run_path(const char *path, int mutations)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: not found\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        run_file(path, mutations);
        return;
    }
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    char **names = NULL;
    size_t n = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n] = malloc(strlen(path) + strlen(de->d_name) + 2);
        sprintf(names[n], "%s/%s", path, de->d_name);
        n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        run_path(names[i], mutations);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    int mutations = 20;
    int i = 1;
    if (argc > 2 && strcmp(argv[1], "--mutations") == 0) {
        mutations = atoi(argv[2]);
        i = 3;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: replay [--mutations N] FILE|DIR ...\n");
        return 2;
    }
    for (; i < argc; i++)
        run_path(argv[i], mutations);
    printf("replayed %lu inputs\n", g_inputs);
    return g_inputs ? 0 : 77;
}
