/*
 * tree.c — the ImageFolder format: ROOT/<class>/.../<image>.
 *
 * The listing follows torchvision's ImageFolder exactly, so sample i and
 * its label mean the same thing here as in a PyTorch script reading the
 * same tree:
 *   - classes are the sorted names of ROOT's sub-directories (symbolic
 *     links followed, names starting with '.' included) and label =
 *     position;
 *   - files are visited in sorted(os.walk(class, followlinks=True)) order,
 *     names sorted within a directory, and kept when their name ends in one
 *     of torchvision's IMG_EXTENSIONS (ASCII case-insensitive);
 *   - "sorted" is Python's: names are str from os.fsdecode (UTF-8 with
 *     surrogateescape, each byte of an invalid sequence becoming
 *     U+DC80..U+DCFF) compared by code point.  For valid UTF-8 that is
 *     byte order, but not once escaped bytes meet other non-ASCII
 *     characters (b"\x80" sorts after "é" in Python, before it in strcmp),
 *     so names are compared by decoding, see fsname_cmp;
 *   - a class directory with no image file is refused, naming it, as
 *     ImageFolder refuses it ("Found no valid file for the classes ...").
 * One deliberate difference: an entry whose name looks like an image but
 * which is not a regular file (a FIFO, socket or device node, a dangling or
 * looping symbolic link) is left out of the listing and recorded in
 * `skipped`, where ImageFolder would list it and then hang or fail when
 * loading it.  The listing comes from the dataset's source (list + stat,
 * io.h), which says what each entry is with links followed, so a tree
 * behind any source lists the same way; the local source pays one lstat
 * per entry for it (two for a symbolic link).
 *
 * Reading a sample is one open + fstat + pread + close: the file's size is
 * not stored at open time, because stat-ing a million files up front
 * would make opening slow on network filesystems.
 */
#define _GNU_SOURCE
#include "format.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const k_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm",
                                     ".tif", ".tiff", ".webp"};
#define K_EXTS_TEXT ".jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp"

/* At most this many skipped entries are kept by name (all are counted). */
#define MAX_SKIPPED_NAMED 1000

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

/* Python's order of os.fsdecode(a) and os.fsdecode(b), at about strcmp's
 * cost: skip the common bytes, back up to the start of the code point
 * the first difference falls in (UTF-8 is self-synchronising: a byte that
 * is not 10xxxxxx always starts a unit, and no unit is longer than four
 * bytes), then decode from there until the code points differ. */
static int fsname_cmp(const char *sa, size_t al, const char *sb, size_t bl)
{
    const unsigned char *a = (const unsigned char *)sa, *b = (const unsigned char *)sb;
    size_t m = CH_MIN(al, bl), k = 0;
    while (k < m && a[k] == b[k])
        k++;
    size_t s = k;
    for (size_t t = 1; t <= 3 && t <= k; t++)
        if ((a[k - t] & 0xC0) != 0x80) {
            s = k - t;
            break;
        }
    size_t ia = s, ib = s;
    for (;;) {
        if (ia >= al || ib >= bl)
            return ia >= al ? (ib >= bl ? 0 : -1) : 1;
        uint32_t ca, cb;
        ia += ch_fsdecode_unit(a + ia, al - ia, &ca);
        ib += ch_fsdecode_unit(b + ib, bl - ib, &cb);
        if (ca != cb)
            return ca < cb ? -1 : 1;
    }
}

static int cmp_name(const void *pa, const void *pb)
{
    const char *a = *(char *const *)pa, *b = *(char *const *)pb;
    return fsname_cmp(a, strlen(a), b, strlen(b));
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

/* Record an image-named entry that is left out; takes rel. */
static int note_skipped(ch_tree_list *out, char *rel, const char *why)
{
    out->nskipped++;
    if (out->nskipped > MAX_SKIPPED_NAMED) {
        free(rel);
        return CHUTE_OK;
    }
    if (out->nskipped_named == out->cap_skipped) {
        size_t cap = out->cap_skipped ? out->cap_skipped * 2 : 16;
        struct ch_tree_skip *v = realloc(out->skipped, cap * sizeof *v);
        if (!v) {
            free(rel);
            return CHUTE_ENOMEM;
        }
        out->skipped = v;
        out->cap_skipped = cap;
    }
    out->skipped[out->nskipped_named].rel = rel;
    out->skipped[out->nskipped_named].why = why;
    out->nskipped_named++;
    return CHUTE_OK;
}

/* Order of torchvision's sorted(os.walk(...)) then sorted(fnames): by
 * directory path as a whole string first, then by file name.  Note this
 * puts "a/b-c/x" before "a/b/sub/x" ('-' < '/'), which a per-level sorted
 * walk would not, so files are collected first and sorted once. */
static int cmp_walk_order(const void *pa, const void *pb)
{
    const char *a = *(char *const *)pa, *b = *(char *const *)pb;
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    int c = fsname_cmp(a, (size_t)(sa - a), b, (size_t)(sb - b));
    if (c != 0)
        return c;
    return fsname_cmp(sa + 1, strlen(sa + 1), sb + 1, strlen(sb + 1));
}

/* One directory's listing, as walk wants it. */
typedef struct walk_ctx {
    const char *abs, *rel;
    strvec dirs, *files;
    ch_tree_list *out;
    int rc;
    chute_error *err;
    int (*keep)(const char *name); /* which file names are samples */
} walk_ctx;

static int walk_entry(void *user, const char *name, const ch_stat *st)
{
    walk_ctx *c = user;
    if (strlen(c->abs) + strlen(name) + 2 > 4096) {
        c->rc = ch_err(c->err, CHUTE_EINVAL, "%s/%s: path too long", c->abs, name);
        return 1;
    }
    int image = c->keep(name);
    if (st->type == CH_ENT_OTHER || (st->type == CH_ENT_FILE && !image)) {
        if (st->type == CH_ENT_OTHER && image) {
            char *p = NULL;
            if (asprintf(&p, "%s/%s", c->rel, name) < 0 ||
                note_skipped(c->out, p, st->why ? st->why : "not a regular file") != CHUTE_OK) {
                c->rc = ch_err(c->err, CHUTE_ENOMEM, "out of memory while listing %s", c->abs);
                return 1;
            }
        }
        return 0;
    }
    char *p = NULL;
    if (asprintf(&p, "%s/%s", c->rel, name) < 0)
        p = NULL;
    int rc = strvec_push(st->type == CH_ENT_DIR ? &c->dirs : c->files, p);
    if (rc) {
        c->rc = ch_err(c->err, rc, "out of memory while listing %s", c->abs);
        return 1;
    }
    return 0;
}

/* Collect files with image extensions under root/rel, recursively. */
static int walk(const ch_source_ops *src, const char *root, const char *rel, strvec *files,
                ch_tree_list *out, int depth, int (*keep)(const char *), chute_error *err)
{
    char abs[4096];
    if (snprintf(abs, sizeof abs, "%s/%s", root, rel) >= (int)sizeof abs)
        return ch_err(err, CHUTE_EINVAL, "%s/%s: path too long", root, rel);
    if (depth > 64)
        return ch_err(err, CHUTE_ELIMIT, "%s: directories nested too deeply (link loop?)", abs);
    walk_ctx c = {abs, rel, {0}, files, out, CHUTE_OK, err, keep};
    int rc = ch_src_list(src, abs, walk_entry, &c, err);
    if (rc == CHUTE_OK)
        rc = c.rc;
    for (size_t i = 0; rc == CHUTE_OK && i < c.dirs.n; i++)
        rc = walk(src, root, c.dirs.v[i], files, out, depth + 1, keep, err);
    strvec_free(&c.dirs);
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
    for (size_t k = 0; k < l->nskipped_named; k++)
        free(l->skipped[k].rel);
    free(l->skipped);
    memset(l, 0, sizeof *l);
}

/* "ROOT: class directory 'x' has no image files ...", naming up to eight
 * of the empty classes (in class order, as torchvision names them). */
static int empty_classes_error(const char *root, const strvec *classes, const size_t *class_end,
                               const char *exts_text, chute_error *err)
{
    size_t nempty = 0, prev = 0;
    char list[2048];
    size_t used = 0;
    list[0] = '\0';
    for (size_t c = 0; c < classes->n; c++) {
        if (class_end[c] == prev) {
            if (nempty < 8 && used < sizeof list) {
                int w = snprintf(list + used, sizeof list - used, "%s'%s'", nempty ? ", " : "",
                                 classes->v[c]);
                used = w < 0 ? used : CH_MIN(sizeof list - 1, used + (size_t)w);
            }
            nempty++;
        }
        prev = class_end[c];
    }
    if (nempty == 0)
        return CHUTE_OK;
    char more[64] = "";
    if (nempty > 8)
        snprintf(more, sizeof more, " and %zu more", nempty - 8);
    return ch_err(err, CHUTE_ENOTFOUND,
                  "%s: %s %s%s %s no image files (%s); torchvision's ImageFolder refuses this "
                  "too: remove the director%s or add images",
                  root, nempty == 1 ? "class directory" : "class directories", list, more,
                  nempty == 1 ? "has" : "have", exts_text, nempty == 1 ? "y" : "ies");
}

/* The root's sub-directories (links followed), the classes. */
typedef struct class_ctx {
    strvec classes;
    int rc;
} class_ctx;

static int class_entry(void *user, const char *name, const ch_stat *st)
{
    class_ctx *c = user;
    if (st->type != CH_ENT_DIR)
        return 0;
    c->rc = strvec_push(&c->classes, strdup(name));
    return c->rc != CHUTE_OK;
}

int ch_tree_list_build(const ch_source_ops *src, const char *root, ch_tree_list *out,
                       chute_error *err)
{
    return ch_tree_list_build_ext(src, root, has_image_ext, K_EXTS_TEXT, out, err);
}

int ch_tree_list_build_ext(const ch_source_ops *src, const char *root,
                           int (*keep)(const char *name), const char *exts_text,
                           ch_tree_list *out, chute_error *err)
{
    memset(out, 0, sizeof *out);
    ch_stat st;
    int rc = ch_src_stat(src, root, &st, err);
    if (rc != CHUTE_OK)
        return rc;
    if (st.type != CH_ENT_DIR)
        return ch_err(err, CHUTE_EFORMAT, "%s: not a directory", root);
    class_ctx cc = {{0}, CHUTE_OK};
    rc = ch_src_list(src, root, class_entry, &cc, err);
    strvec classes = cc.classes;
    if (rc != CHUTE_OK) {
        strvec_free(&classes);
        return rc;
    }
    if (cc.rc != CHUTE_OK) {
        strvec_free(&classes);
        return ch_err(err, cc.rc, "%s: out of memory while listing", root);
    }
    if (classes.n == 0) {
        strvec_free(&classes);
        return ch_err(err, CHUTE_ENOTFOUND,
                      "%s: no class directories (expected ROOT/<class>/<image files>)", root);
    }
    qsort(classes.v, classes.n, sizeof(char *), cmp_name);

    strvec files = {0};
    size_t *class_end = calloc(classes.n, sizeof *class_end);
    if (!class_end)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (size_t c = 0; rc == CHUTE_OK && c < classes.n; c++) {
        size_t start = files.n;
        rc = walk(src, root, classes.v[c], &files, out, 0, keep, err);
        /* files.v is NULL until the first file: no qsort(NULL, 0, ...). */
        if (rc == CHUTE_OK && files.n - start > 1)
            qsort(files.v + start, files.n - start, sizeof(char *), cmp_walk_order);
        class_end[c] = files.n;
    }
    if (rc == CHUTE_OK)
        rc = empty_classes_error(root, &classes, class_end, exts_text, err);
    if (rc == CHUTE_OK) {
        out->labels = malloc(files.n * sizeof *out->labels);
        if (!out->labels)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %zu labels", files.n);
    }
    if (rc != CHUTE_OK) {
        free(class_end);
        strvec_free(&files);
        strvec_free(&classes);
        ch_tree_list_free(out);
        return rc;
    }
    if (out->nskipped_named > 1) /* rel is the first member: sort as the files are */
        qsort(out->skipped, out->nskipped_named, sizeof *out->skipped, cmp_walk_order);
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
    return ch_src_read_file(ds->src, path, buf, cap, out_len, err);
}

static uint64_t tree_sample_size(const chute_dataset *ds, uint64_t i)
{
    char path[4096];
    ch_stat st;
    chute_error e;
    if (tree_path(ds, i, path, sizeof path) != 0 || ch_src_stat(ds->src, path, &st, &e) != CHUTE_OK)
        return 0;
    return st.type == CH_ENT_FILE ? st.size : 0;
}

static void tree_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    if (tree_path(ds, i, buf, n) != 0 && n)
        buf[n - 1] = '\0';
}

static uint64_t tree_skipped(const chute_dataset *ds, uint64_t k, char *buf, size_t n)
{
    const tree_impl *t = ds->impl;
    if (buf && n && k < t->list.nskipped_named) {
        char m[8192];
        snprintf(m, sizeof m, "%s/%s: %s, left out", ds->root, t->list.skipped[k].rel,
                 t->list.skipped[k].why);
        ch_str_fit(buf, n, m);
    }
    return t->list.nskipped;
}

static void tree_close(void *impl)
{
    tree_impl *t = impl;
    if (!t)
        return;
    ch_tree_list_free(&t->list);
    free(t);
}

/* A directory holding shard files (or pack's temporaries) but no manifest
 * is an interrupted pack, not an image tree: say so instead of "no class
 * directories". */
static int partial_pack_entry(void *user, const char *name, const ch_stat *st)
{
    (void)st;
    if (ch_packfile_kind(name, NULL) == CH_PACKFILE_OTHER)
        return 0;
    *(int *)user = 1;
    return 1;
}

static int looks_like_partial_pack(const ch_source_ops *src, const char *dir)
{
    int found = 0;
    chute_error e;
    ch_src_list(src, dir, partial_pack_entry, &found, &e);
    return found;
}

/* Any directory may be an image tree: the fallback when nothing surer
 * matches (an empty directory then fails in open with "no classes"). */
static int tree_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                      size_t n)
{
    if (!is_dir) {
        snprintf(why, n, "not a directory");
        return CH_PROBE_NO;
    }
    if (looks_like_partial_pack(src, path)) {
        snprintf(why, n,
                 "shard files but no %s: an incomplete chute shard directory (was 'chute pack' "
                 "interrupted? run it again)",
                 CH_MANIFEST_NAME);
        return CH_PROBE_NO;
    }
    return CH_PROBE_FALLBACK;
}

static int tree_open(chute_dataset *ds, const char *root, const chute_dataset_options *opt,
                     chute_error *err)
{
    (void)opt;
    tree_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = ch_tree_list_build(ds->src, root, &t->list, err);
    if (rc != CHUTE_OK) {
        free(t);
        return rc;
    }
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

/* Read-ahead (format.h): the whole file, read by path. */
static int tree_locate(const chute_dataset *ds, uint64_t i, ch_locator *out, chute_error *err)
{
    if (tree_path(ds, i, out->path_buf, sizeof out->path_buf) != 0)
        return ch_err(err, CHUTE_EINVAL, "sample %llu: path too long", (unsigned long long)i);
    out->h = NULL;
    out->path = out->path_buf;
    out->off = 0;
    out->len = CH_LOC_WHOLE;
    out->file = i;
    out->pin = 0;
    return CHUTE_OK;
}

static int tree_from_bytes(const chute_dataset *ds, uint64_t i, const uint8_t *raw, size_t len,
                           const uint8_t **out, size_t *out_len, chute_error *err)
{
    (void)ds, (void)i, (void)err;
    *out = raw;
    *out_len = len;
    return CHUTE_OK;
}

const ch_format_ops ch_format_tree = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "tree",
    .probe = tree_probe,
    .open = tree_open,
    .read = tree_read,
    .sample_size = tree_sample_size,
    .describe = tree_describe,
    .file_of = tree_describe,
    .close = tree_close,
    .skipped = tree_skipped,
    .locate = tree_locate,
    .from_bytes = tree_from_bytes,
};
