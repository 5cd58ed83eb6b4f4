/*
 * tree.c — the ImageFolder format: ROOT/<class>/.../<image>.
 *
 * The listing follows torchvision's ImageFolder exactly (classes are the
 * sorted names of ROOT's sub-directories and label = position; files are
 * visited in sorted os.walk order and kept when their extension is one of
 * torchvision's image extensions), so sample i and its label mean the same
 * thing here as in a PyTorch script reading the same tree.  Byte order of
 * UTF-8 names equals Python's code-point order, so strcmp sorts alike.
 *
 * Reading a sample is one open + fstat + pread + close: the file's size is
 * not stored at open time, because stat-ing a million files up front
 * would make opening slow on network filesystems.
 */
#define _GNU_SOURCE
#include "format.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const char *const k_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm",
                                     ".tif", ".tiff", ".webp"};

static int has_image_ext(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof k_exts / sizeof k_exts[0]; i++) {
        size_t e = strlen(k_exts[i]);
        if (n >= e && strcasecmp(name + n - e, k_exts[i]) == 0)
            return 1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

static int strvec_push(strvec *s, char *str)
{
    if (!str)
        return CHUTE_ENOMEM;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(str);
            return CHUTE_ENOMEM;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    return CHUTE_OK;
}

static void strvec_free(strvec *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

static int is_dir_at(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Is this entry of `parent` a directory?  Symbolic links are followed, as
 * os.walk(followlinks=True) and os.scandir().is_dir() do. */
static int entry_is_dir(const char *parent, const struct dirent *de)
{
    if (de->d_type == DT_DIR)
        return 1;
    if (de->d_type != DT_LNK && de->d_type != DT_UNKNOWN)
        return 0;
    char child[4096];
    if (snprintf(child, sizeof child, "%s/%s", parent, de->d_name) >= (int)sizeof child)
        return 0;
    return is_dir_at(child);
}

/* Order of torchvision's sorted(os.walk(...)) then sorted(fnames): by
 * directory path as a whole string first, then by file name.  Note this
 * puts "a/b-c/x" before "a/b/x" ('-' < '/'), which a per-level sorted walk
 * would not, so files are collected first and sorted once. */
static int cmp_walk_order(const void *pa, const void *pb)
{
    const char *a = *(char *const *)pa, *b = *(char *const *)pb;
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    size_t da = (size_t)(sa - a), db = (size_t)(sb - b);
    int c = memcmp(a, b, CH_MIN(da, db));
    if (c != 0)
        return c;
    if (da != db)
        return da < db ? -1 : 1;
    return strcmp(sa + 1, sb + 1);
}

/* Collect files with image extensions under root/rel, recursively. */
static int walk(const char *root, const char *rel, strvec *files, int depth, chute_error *err)
{
    char abs[4096];
    if (snprintf(abs, sizeof abs, "%s/%s", root, rel) >= (int)sizeof abs)
        return ch_err(err, CHUTE_EINVAL, "%s/%s: path too long", root, rel);
    if (depth > 64)
        return ch_err(err, CHUTE_ELIMIT, "%s: directories nested too deeply (link loop?)", abs);
    DIR *d = opendir(abs);
    if (!d)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list directory", abs);
    strvec dirs = {0};
    int rc = CHUTE_OK;
    struct dirent *de;
    while (rc == CHUTE_OK && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (strlen(abs) + strlen(de->d_name) + 2 > 4096) {
            rc = ch_err(err, CHUTE_EINVAL, "%s/%s: path too long", abs, de->d_name);
            break;
        }
        int isdir = entry_is_dir(abs, de);
        char *p = NULL;
        if (isdir || has_image_ext(de->d_name)) {
            if (asprintf(&p, "%s/%s", rel, de->d_name) < 0)
                p = NULL;
            rc = strvec_push(isdir ? &dirs : files, p);
            if (rc)
                ch_err(err, rc, "out of memory while listing %s", abs);
        }
    }
    closedir(d);
    for (size_t i = 0; rc == CHUTE_OK && i < dirs.n; i++)
        rc = walk(root, dirs.v[i], files, depth + 1, err);
    strvec_free(&dirs);
    return rc;
}

void ch_tree_list_free(ch_tree_list *l)
{
    if (!l)
        return;
    for (uint64_t i = 0; i < l->n; i++)
        free(l->paths[i]);
    free(l->paths);
    free(l->labels);
    for (uint32_t c = 0; c < l->nclasses; c++)
        free(l->class_names[c]);
    free(l->class_names);
    memset(l, 0, sizeof *l);
}

int ch_tree_list_build(const char *root, ch_tree_list *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(root, &st) != 0)
        return ch_err_errno(err, errno == ENOENT ? CHUTE_ENOTFOUND : CHUTE_EIO, errno, "%s",
                            root);
    if (!S_ISDIR(st.st_mode))
        return ch_err(err, CHUTE_EFORMAT, "%s: not a directory", root);
    DIR *d = opendir(root);
    if (!d)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list directory", root);
    strvec classes = {0};
    int rc = CHUTE_OK;
    struct dirent *de;
    while (rc == CHUTE_OK && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (entry_is_dir(root, de))
            rc = strvec_push(&classes, strdup(de->d_name));
    }
    closedir(d);
    if (rc != CHUTE_OK) {
        strvec_free(&classes);
        return ch_err(err, rc, "%s: out of memory while listing", root);
    }
    if (classes.n == 0) {
        strvec_free(&classes);
        return ch_err(err, CHUTE_ENOTFOUND,
                      "%s: no class directories (expected ROOT/<class>/<image files>)", root);
    }
    qsort(classes.v, classes.n, sizeof(char *), cmp_str);

    strvec files = {0};
    size_t *class_end = calloc(classes.n, sizeof *class_end);
    if (!class_end)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (size_t c = 0; rc == CHUTE_OK && c < classes.n; c++) {
        size_t start = files.n;
        rc = walk(root, classes.v[c], &files, 0, err);
        qsort(files.v + start, files.n - start, sizeof(char *), cmp_walk_order);
        class_end[c] = files.n;
    }
    if (rc == CHUTE_OK && files.n == 0)
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: no image files (.jpg .jpeg .png ...) in %zu classes",
                    root, classes.n);
    if (rc == CHUTE_OK) {
        out->labels = malloc(files.n * sizeof *out->labels);
        if (!out->labels)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %zu labels", files.n);
    }
    if (rc != CHUTE_OK) {
        free(class_end);
        strvec_free(&files);
        strvec_free(&classes);
        free(out->labels);
        out->labels = NULL;
        return rc;
    }
    size_t c = 0;
    for (size_t i = 0; i < files.n; i++) {
        while (i >= class_end[c])
            c++;
        out->labels[i] = (int32_t)c;
    }
    free(class_end);
    out->n = files.n;
    out->paths = files.v;
    out->nclasses = (uint32_t)classes.n;
    out->class_names = classes.v;
    return CHUTE_OK;
}

/* ---- the format ---- */

typedef struct tree_impl {
    ch_tree_list list;
} tree_impl;

static int tree_path(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const tree_impl *t = ds->impl;
    return snprintf(buf, n, "%s/%s", ds->root, t->list.paths[i]) < (int)n ? 0 : -1;
}

static int tree_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                     chute_error *err)
{
    char path[4096];
    if (tree_path(ds, i, path, sizeof path) != 0)
        return ch_err(err, CHUTE_EINVAL, "sample %llu: path too long", (unsigned long long)i);
    return ds->src->read_file(path, buf, cap, out_len, err);
}

static uint64_t tree_sample_size(const chute_dataset *ds, uint64_t i)
{
    char path[4096];
    struct stat st;
    if (tree_path(ds, i, path, sizeof path) != 0 || stat(path, &st) != 0)
        return 0;
    return (uint64_t)st.st_size;
}

static void tree_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    if (tree_path(ds, i, buf, n) != 0 && n)
        buf[n - 1] = '\0';
}

static void tree_close(void *impl)
{
    tree_impl *t = impl;
    if (!t)
        return;
    ch_tree_list_free(&t->list);
    free(t);
}

static const ch_format_ops k_tree_ops = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "tree",
    .read = tree_read,
    .sample_size = tree_sample_size,
    .describe = tree_describe,
    .file_of = tree_describe,
    .close = tree_close,
};

int ch_tree_open(chute_dataset *ds, const char *root, chute_error *err)
{
    tree_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = ch_tree_list_build(root, &t->list, err);
    if (rc != CHUTE_OK) {
        free(t);
        return rc;
    }
    ds->kind = CHUTE_SOURCE_TREE;
    ds->fmt = &k_tree_ops;
    ds->impl = t;
    ds->n = t->list.n;
    /* The dataset keeps its own copies so that formats stay independent. */
    ds->labels = malloc(ds->n * sizeof *ds->labels);
    ds->class_names = calloc(t->list.nclasses, sizeof(char *));
    if (!ds->labels || !ds->class_names)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    memcpy(ds->labels, t->list.labels, ds->n * sizeof *ds->labels);
    ds->nclasses = t->list.nclasses;
    for (uint32_t c = 0; c < ds->nclasses; c++) {
        ds->class_names[c] = strdup(t->list.class_names[c]);
        if (!ds->class_names[c])
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    return CHUTE_OK;
}
