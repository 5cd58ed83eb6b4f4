/*
 * det_list.c — the annotated layouts detection and segmentation users keep,
 * recognised at a pack's input and listed as images plus one target record
 * each (issue 24), so `chute pack` carries the targets into the shards
 * without a new option.
 *
 * Recognised, in this order (anything else is an ImageFolder tree, as
 * before):
 *   COCO       ROOT is an instances*.json / person_keypoints*.json file, or
 *              a directory holding exactly one such file at its top or in
 *              annotations/.  Images: for ANN_DIR/instances_X.json,
 *              ANN_DIR/../X/ (COCO's own layout), else ROOT/images/, else
 *              the JSON's directory.
 *   YOLO       ROOT/images/ and ROOT/labels/ holding .txt files,
 *              labels/.../x.txt for images/.../x.jpg (Ultralytics); an
 *              image without a label file has no objects.  Classes: ROOT/classes.txt (one name a
 *              line) if present, else "0".."max".
 *   mask pairs ROOT/images/ and ROOT/annotations/, annotations/.../x.png
 *              for images/.../x.jpg (ADE20K, Cityscapes-style); the record
 *              holds the mask's relative path and its encoded bytes (so the
 *              shard carries it; never decoded here), and a mask whose size
 *              differs from its image's is a bad pair.
 *
 * A bad annotation or pair is refused naming the file (and annotation id
 * or line), or under the skip policy counted and left out; YOLO needs the
 * image's size to turn normalised boxes into pixels, so it reads each
 * image's header (chute_image_header).
 *
 * Never here: geometry (src/ops/), JSON tokenising (jansson, via
 * src/parse/coco_json.c).
 */
#define _GNU_SOURCE
#include "det_list.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DET_MAX_FILE (64u << 20) /* a label file or image header read */

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int coco_name(const char *n)
{
    size_t l = strlen(n);
    return l > 5 && strcmp(n + l - 5, ".json") == 0 &&
           (strncmp(n, "instances", 9) == 0 || strncmp(n, "person_keypoints", 16) == 0);
}

static int image_name(const char *n)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm"};
    size_t l = strlen(n);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t e = strlen(ext[i]);
        if (l > e && strcasecmp(n + l - e, ext[i]) == 0)
            return 1;
    }
    return 0;
}

/* Exactly one COCO-named JSON in dir: 1 (path in out), 0 none, -1 several. */
static int one_coco_in(const char *dir, char *out, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (coco_name(de->d_name)) {
            if (found++ == 0)
                snprintf(out, n, "%s/%s", dir, de->d_name);
        }
    closedir(d);
    return found > 1 ? -1 : found;
}

/* ---- growable outputs ---------------------------------------------------- */

static int push_sample(ch_det_list *d, const char *rel, const uint8_t *rec, size_t len)
{
    if (d->list.n % 1024 == 0) {
        uint64_t cap = d->list.n + 1024;
        char **p = realloc(d->list.paths, cap * sizeof *p);
        int32_t *l = p ? realloc(d->list.labels, cap * sizeof *l) : NULL;
        uint64_t *o = l ? realloc(d->tg_off, (cap + 1) * sizeof *o) : NULL;
        if (p)
            d->list.paths = p;
        if (l)
            d->list.labels = l;
        if (o)
            d->tg_off = o;
        if (!p || !l || !o)
            return CHUTE_ENOMEM;
    }
    if (d->tg_n + len > d->tg_cap) {
        size_t cap = d->tg_cap ? d->tg_cap : 1 << 20;
        while (cap < d->tg_n + len)
            cap *= 2;
        uint8_t *t = realloc(d->tg, cap);
        if (!t)
            return CHUTE_ENOMEM;
        d->tg = t;
        d->tg_cap = cap;
    }
    char *r = strdup(rel);
    if (!r)
        return CHUTE_ENOMEM;
    if (d->list.n == 0)
        d->tg_off[0] = 0;
    memcpy(d->tg + d->tg_n, rec, len);
    d->tg_n += len;
    d->list.paths[d->list.n] = r;
    d->list.labels[d->list.n] = 0; /* the image's label: targets carry the classes */
    d->list.n++;
    d->tg_off[d->list.n] = d->tg_n;
    return CHUTE_OK;
}

static int set_classes(ch_det_list *d, uint32_t n, const char *(*name)(void *, uint32_t), void *u)
{
    d->list.class_names = calloc(n ? n : 1, sizeof(char *));
    if (!d->list.class_names)
        return CHUTE_ENOMEM;
    for (uint32_t c = 0; c < n; c++) {
        if (!(d->list.class_names[c] = strdup(name(u, c))))
            return CHUTE_ENOMEM;
        d->list.nclasses = c + 1;
    }
    return CHUTE_OK;
}

static void skip_note(ch_det_list *d, const char *msg)
{
    if (d->skipped++ == 0)
        ch_str_fit(d->first_skip, sizeof d->first_skip, msg);
}

/* ---- COCO ---------------------------------------------------------------- */

static const char *coco_cat(void *u, uint32_t c) { return ch_coco_category_name(u, c); }

static int build_coco(const char *json, const char *images, int skip, ch_det_list *d,
                      chute_error *err)
{
    ch_tg_policy pol = {.skip = skip};
    ch_coco *c;
    int rc = ch_coco_load(json, 0, &pol, &c, err);
    if (rc != CHUTE_OK)
        return rc;
    d->skipped = pol.skipped;
    ch_str_fit(d->first_skip, sizeof d->first_skip, pol.first_skip);
    if (ch_coco_ncategories(c) == 0)
        rc = ch_err(err, CHUTE_EFORMAT, "%s: no categories", json);
    if (rc == CHUTE_OK && set_classes(d, ch_coco_ncategories(c), coco_cat, c) != CHUTE_OK)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    ch_tg_builder b = {0};
    for (size_t i = 0; rc == CHUTE_OK && i < ch_coco_nimages(c); i++) {
        const uint8_t *rec;
        size_t len;
        /* An image the JSON lists but the folder lacks is an id pointing
         * nowhere: named (with its annotations' count), or left out. */
        const ch_coco_image *im = ch_coco_image_at(c, i);
        char ip[8400];
        snprintf(ip, sizeof ip, "%s/%s", images, im->file_name);
        if (!is_file(ip)) {
            char why[9000];
            snprintf(why, sizeof why, "%s: image id %lld: no file %.4096s (its %u annotations left out)",
                     json, (long long)im->id, ip, im->count);
            if (!skip) {
                rc = ch_err(err, CHUTE_ENOTFOUND, "%s", why);
                break;
            }
            skip_note(d, why);
            d->skipped += im->count; /* skip_note counted the image, this its annotations */
            continue;
        }
        rc = ch_coco_record(c, i, &b, err);
        if (rc == CHUTE_OK && (rc = ch_tg_finish(&b, &rec, &len)) != CHUTE_OK)
            rc = ch_err(err, rc, "%s: image id %lld: record over its limits", json,
                        (long long)ch_coco_image_at(c, i)->id);
        if (rc == CHUTE_OK && push_sample(d, ch_coco_image_at(c, i)->file_name, rec, len) != CHUTE_OK)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    d->annotations = ch_coco_nannotations(c);  /* before images left out */
    ch_tg_builder_free(&b);
    ch_coco_free(c);
    snprintf(d->image_root, sizeof d->image_root, "%s", images);
    d->layout = "coco";
    return rc;
}

/* ---- directory pairs (YOLO, masks) --------------------------------------- */

typedef struct walk {
    char **rel;
    size_t n, cap;
} walk;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every image under base/sub, relative to base, sorted. */
static int walk_images(const char *base, const char *sub, walk *w, chute_error *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", base, sub);
    DIR *d = opendir(dir);
    if (!d)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s: cannot list", dir);
    struct dirent *de;
    int rc = CHUTE_OK;
    while (rc == CHUTE_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char rel[4096], full[8200];
        if ((size_t)snprintf(rel, sizeof rel, "%s/%s", sub, de->d_name) >= sizeof rel) {
            rc = ch_err(err, CHUTE_ELIMIT, "%s/%s: path too long", dir, de->d_name);
            break;
        }
        snprintf(full, sizeof full, "%s/%s", base, rel);
        if (is_dir(full))
            rc = walk_images(base, rel, w, err);
        else if (image_name(de->d_name) && is_file(full)) {
            if (w->n == w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 256;
                char **r = realloc(w->rel, cap * sizeof *r);
                if (!r) {
                    rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                    break;
                }
                w->rel = r;
                w->cap = cap;
            }
            if (!(w->rel[w->n] = strdup(rel)))
                rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
            else
                w->n++;
        }
    }
    closedir(d);
    return rc;
}

static void walk_free(walk *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->rel[i]);
    free(w->rel);
}

/* base/rel read whole (at most DET_MAX_FILE bytes) into *buf. */
static int slurp(const char *base, const char *rel, char **buf, size_t *len, chute_error *err)
{
    char p[8200];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s", p);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > DET_MAX_FILE) {
        close(fd);
        return ch_err(err, CHUTE_ELIMIT, "%s: not a regular file of at most 64 MiB", p);
    }
    char *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (b && got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!b || got != (size_t)st.st_size) {
        free(b);
        return ch_err(err, b ? CHUTE_EIO : CHUTE_ENOMEM, "%s: short read", p);
    }
    b[got] = 0;
    *buf = b;
    *len = got;
    return CHUTE_OK;
}

static int image_size(const char *base, const char *rel, uint32_t *w, uint32_t *h,
                      chute_error *err)
{
    char *b;
    size_t n;
    int rc = slurp(base, rel, &b, &n, err);
    if (rc != CHUTE_OK)
        return rc;
    rc = chute_image_header(b, n, w, h, NULL, NULL, err);
    free(b);
    if (rc != CHUTE_OK)
        rc = ch_err(err, rc, "%s/%s: %s", base, rel, err->message);
    return rc;
}

/* images/a/x.jpg -> <dir>/a/x<ext> */
static void pair_path(const char *rel, const char *dir, const char *ext, char *out, size_t n)
{
    const char *tail = rel + strlen("images");
    const char *dot = strrchr(tail, '.');
    snprintf(out, n, "%s%.*s%s", dir, (int)(dot - tail), tail, ext);
}

typedef struct names {
    char **v;
    uint32_t n;
} names;

static const char *names_at(void *u, uint32_t c) { return ((names *)u)->v[c]; }

static int build_yolo(const char *root, int skip, ch_det_list *d, chute_error *err)
{
    walk w = {0};
    int rc = walk_images(root, "images", &w, err);
    qsort(w.rel, w.n, sizeof *w.rel, cmp_str);
    names cls = {0};
    char *text = NULL;
    size_t len;
    uint32_t max_class = 0;
    ch_tg_builder b = {0};
    /* classes.txt: one name a line */
    char cp[4200];
    snprintf(cp, sizeof cp, "%s/classes.txt", root);
    if (rc == CHUTE_OK && is_file(cp) && (rc = slurp(root, "classes.txt", &text, &len, err)) == CHUTE_OK) {
        for (char *s = text, *e; *s; s = e + (*e != 0)) {
            e = s + strcspn(s, "\r\n");
            if (e > s) {
                char **v = realloc(cls.v, (cls.n + 1) * sizeof *v);
                if (!v || !(v[cls.n] = strndup(s, (size_t)(e - s)))) {
                    cls.v = v ? v : cls.v;
                    rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
                    break;
                }
                cls.v = v;
                cls.n++;
            }
            if (!*e)
                break;
        }
        free(text);
        text = NULL;
    }
    for (size_t i = 0; rc == CHUTE_OK && i < w.n; i++) {
        char lab[4200], what[8400];
        uint32_t iw, ih;
        pair_path(w.rel[i], "labels", ".txt", lab, sizeof lab);
        snprintf(what, sizeof what, "%s/%s", root, lab);
        if ((rc = image_size(root, w.rel[i], &iw, &ih, err)) != CHUTE_OK)
            break;
        ch_tg_begin(&b, iw, ih, 0);
        char lp[8400];
        snprintf(lp, sizeof lp, "%s/%s", root, lab);
        if (is_file(lp)) {
            if ((rc = slurp(root, lab, &text, &len, err)) != CHUTE_OK)
                break;
            ch_tg_policy pol = {.skip = skip};
            rc = ch_yolo_parse(text, len, iw, ih, cls.n, what, &b, &pol, err);
            free(text);
            text = NULL;
            if (pol.skipped)
                d->skipped += pol.skipped - 1, skip_note(d, pol.first_skip);
            if (rc != CHUTE_OK)
                break;
        }
        const uint8_t *rec;
        size_t rl;
        ch_tg_view v;
        if ((rc = ch_tg_finish(&b, &rec, &rl)) != CHUTE_OK ||
            (rc = ch_tg_decode(rec, rl, what, &v, err)) != CHUTE_OK) {
            rc = ch_err(err, rc, "%s: record over its limits", what);
            break;
        }
        for (uint32_t o = 0; o < v.n; o++)
            if ((uint32_t)ch_tg_label(&v, o) + 1 > max_class)
                max_class = (uint32_t)ch_tg_label(&v, o) + 1;
        d->annotations += v.n;
        if (push_sample(d, w.rel[i], rec, rl) != CHUTE_OK)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    if (rc == CHUTE_OK && !cls.n) { /* no classes.txt: "0".."max" */
        uint32_t n = max_class ? max_class : 1;
        cls.v = calloc(n, sizeof *cls.v);
        for (uint32_t c = 0; cls.v && c < n; c++, cls.n++)
            if (asprintf(&cls.v[c], "%u", c) < 0) {
                cls.v[c] = NULL;
                break;
            }
        if (!cls.v || cls.n != n)
            rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    }
    if (rc == CHUTE_OK && set_classes(d, cls.n, names_at, &cls) != CHUTE_OK)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (uint32_t c = 0; c < cls.n; c++)
        free(cls.v[c]);
    free(cls.v);
    ch_tg_builder_free(&b);
    walk_free(&w);
    snprintf(d->image_root, sizeof d->image_root, "%s", root);
    d->layout = "yolo";
    return rc;
}

static const char *mask_class(void *u, uint32_t c) { return "mask"; }

static int build_masks(const char *root, int skip, ch_det_list *d, chute_error *err)
{
    walk w = {0};
    int rc = walk_images(root, "images", &w, err);
    qsort(w.rel, w.n, sizeof *w.rel, cmp_str);
    ch_tg_builder b = {0};
    if (rc == CHUTE_OK && set_classes(d, 1, mask_class, NULL) != CHUTE_OK)
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory");
    for (size_t i = 0; rc == CHUTE_OK && i < w.n; i++) {
        char m[4200], mp[8400], why[9000];
        pair_path(w.rel[i], "annotations", ".png", m, sizeof m);
        snprintf(mp, sizeof mp, "%s/%s", root, m);
        uint32_t iw, ih, mw, mh;
        char *mbytes = NULL;
        size_t mlen = 0;
        if ((rc = image_size(root, w.rel[i], &iw, &ih, err)) != CHUTE_OK)
            break;
        why[0] = 0;
        if (!is_file(mp))
            snprintf(why, sizeof why, "%s/%s: no mask %s", root, w.rel[i], mp);
        else if (slurp(root, m, &mbytes, &mlen, err) != CHUTE_OK ||
                 chute_image_header(mbytes, mlen, &mw, &mh, NULL, NULL, err) != CHUTE_OK)
            snprintf(why, sizeof why, "%s: %s", mp, err->message);
        else if (mw != iw || mh != ih)
            snprintf(why, sizeof why, "%s: mask is %ux%u, its image %s %ux%u", mp, mw, mh,
                     w.rel[i], iw, ih);
        if (why[0]) {
            free(mbytes);
            if (!skip) {
                rc = ch_err(err, CHUTE_ECORRUPT, "%s", why);
                break;
            }
            skip_note(d, why);
            continue;
        }
        /* the mask travels in the record: the shard carries it */
        const uint8_t *rec;
        size_t rl;
        ch_tg_begin(&b, iw, ih, 0);
        if (ch_tg_set_mask_path(&b, m) != CHUTE_OK || ch_tg_set_mask_image(&b, mbytes, mlen) != CHUTE_OK ||
            ch_tg_finish(&b, &rec, &rl) != CHUTE_OK || push_sample(d, w.rel[i], rec, rl) != CHUTE_OK)
            rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory or over the record limit", mp);
        free(mbytes);
    }
    ch_tg_builder_free(&b);
    walk_free(&w);
    snprintf(d->image_root, sizeof d->image_root, "%s", root);
    d->layout = "masks";
    return rc;
}

/* ---- detection ------------------------------------------------------------ */

/* Some file ending in ext under dir (depth <= 3): an ImageFolder whose
 * classes happen to be named "images" and "labels" holds images there,
 * not label text, and stays an ImageFolder. */
static int has_ext_under(const char *dir, const char *ext, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    size_t el = strlen(ext);
    while (!found && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        size_t l = strlen(de->d_name);
        char sub[4200];
        if (l > el && strcasecmp(de->d_name + l - el, ext) == 0)
            found = 1;
        else if (depth > 0 && (size_t)snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) < sizeof sub &&
                 is_dir(sub))
            found = has_ext_under(sub, ext, depth - 1);
    }
    closedir(d);
    return found;
}

int ch_det_list_build(const char *root, int skip, ch_det_list *d, chute_error *err)
{
    memset(d, 0, sizeof *d);
    char json[4200], images[sizeof d->image_root];
    if (is_file(root) && coco_name(strrchr(root, '/') ? strrchr(root, '/') + 1 : root)) {
        snprintf(json, sizeof json, "%s", root);
    } else if (is_dir(root)) {
        char ann[4200];
        snprintf(ann, sizeof ann, "%s/annotations", root);
        int top = one_coco_in(root, json, sizeof json);
        int sub = top ? 0 : one_coco_in(ann, json, sizeof json);
        if (top < 0 || sub < 0)
            return ch_err(err, CHUTE_EINVAL,
                          "%s: several COCO annotation files: pack one of them by its path", root);
        if (!top && !sub) {
            char a[4200], b[4200];
            snprintf(a, sizeof a, "%s/images", root);
            snprintf(b, sizeof b, "%s/labels", root);
            if (is_dir(a) && is_dir(b) && has_ext_under(b, ".txt", 3))
                return build_yolo(root, skip, d, err);
            if (is_dir(a) && is_dir(ann) && has_ext_under(ann, ".png", 3))
                return build_masks(root, skip, d, err);
            return CH_DET_NONE;
        }
    } else {
        return CH_DET_NONE;
    }
    /* COCO: where are its images? */
    char dir[2048];
    if ((size_t)snprintf(dir, sizeof dir, "%s", json) >= sizeof dir)
        return ch_err(err, CHUTE_ELIMIT, "%s: path too long", json);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    char split[256] = "";
    const char *us = strchr(base, '_');
    if (us && strlen(us + 1) > 5)
        snprintf(split, sizeof split, "%.*s", (int)(strlen(us + 1) - 5), us + 1);
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    images[0] = 0;
    if (split[0]) {
        snprintf(images, sizeof images, "%s/../%s", dir, split);
        if (!is_dir(images))
            images[0] = 0;
    }
    if (!images[0]) {
        const char *top = is_dir(root) ? root : dir;
        snprintf(images, sizeof images, "%s/images", top);
        if (!is_dir(images))
            snprintf(images, sizeof images, "%s", top);
    }
    return build_coco(json, images, skip, d, err);
}

void ch_det_list_free(ch_det_list *d)
{
    ch_tree_list_free(&d->list);
    free(d->tg);
    free(d->tg_off);
    memset(d, 0, sizeof *d);
}
