/*
 * coco_json.c — a COCO instances file (images, annotations, categories)
 * read into per-image target records.
 *
 * The JSON itself is parsed by jansson (Debian's libjansson): measured
 * against json-c and cJSON on a 458 MiB COCO-shaped file it needs the
 * least memory (3.9 GiB peak vs cJSON's 5.6 and json-c's 7.3), parses
 * about as fast as json-c (cJSON is 1.4-3x faster: parsing is once per
 * pack, memory is what binds), reports errors with line and column per
 * call, keeps integers as 64-bit integers and rejects duplicate keys;
 * cJSON's error pointer is a process-wide global and its numbers are all
 * doubles.  bench/results-targets.md.  This file never tokenises JSON.
 *
 * Shape.  One pass over the tree checks everything once: images (unique
 * integer ids, a relative file name without "..", positive width and
 * height), categories (unique ids; label = position in id order, as
 * detectron2 and torchvision's detection references map them) and each
 * annotation (its image and category exist, a finite box of non-negative
 * size touching its image, a segmentation that decodes to a mask of its
 * image's size, keypoints of the file's one length).  A bad annotation
 * fails the parse naming the file and its id, or under the skip policy is
 * counted and left out.  Kept annotations are grouped by image in file
 * order (a stable counting sort), so ch_coco_record builds an image's
 * record without searching and cannot fail on content.
 *
 * The tree stays alive until ch_coco_free: records are built from it on
 * demand (pack walks images in order), so no second copy of the polygons
 * is made.
 */
#include "targets.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef CHUTE_HAVE_JANSSON
#include <jansson.h>

typedef struct cat {
    int64_t id;
    const char *name;
} cat;

typedef struct img_key {
    int64_t id;
    uint32_t idx;
} img_key;

struct ch_coco {
    json_t *root;
    char what[256];
    ch_coco_image *images;
    size_t nimages;
    img_key *by_id; /* images sorted by id */
    cat *cats;
    uint32_t ncats;
    uint32_t k; /* keypoints per object (0: none in the file) */
    json_t **anns; /* kept annotations, grouped by image, file order within */
    uint32_t *ann_label;
    uint64_t nanns;
};

static int cmp_img(const void *a, const void *b)
{
    int64_t x = ((const img_key *)a)->id, y = ((const img_key *)b)->id;
    return (x > y) - (x < y);
}

static int cmp_cat(const void *a, const void *b)
{
    int64_t x = ((const cat *)a)->id, y = ((const cat *)b)->id;
    return (x > y) - (x < y);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int find_image(const ch_coco *c, int64_t id)
{
    size_t lo = 0, hi = c->nimages;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->by_id[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nimages && c->by_id[lo].id == id ? (int)c->by_id[lo].idx : -1;
}

static int find_cat(const ch_coco *c, int64_t id)
{
    uint32_t lo = 0, hi = c->ncats;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->cats[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->ncats && c->cats[lo].id == id ? (int)lo : -1;
}

static int get_int(json_t *o, const char *key, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return -1;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* A file name that stays inside the image folder. */
static int safe_name(const char *s)
{
    if (!s[0] || s[0] == '/' || strlen(s) > 4095)
        return 0;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if ((n == 2 && p[0] == '.' && p[1] == '.') || n == 0)
            return 0;
        p += n + (e ? 1 : 0);
    }
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20)
            return 0;
    return 1;
}

/* Number arrays: all finite numbers. */
static int numbers(json_t *a, size_t want)
{
    if (!json_is_array(a) || (want && json_array_size(a) != want))
        return 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            return 0;
    }
    return 1;
}

/* The RLE of a segmentation dict into cnts; h, w from its "size". */
static int rle_of(json_t *seg, ch_u32v *cnts, uint32_t *h, uint32_t *w, char *why, size_t whysz)
{
    json_t *size = json_object_get(seg, "size"), *counts = json_object_get(seg, "counts");
    if (!json_is_array(size) || json_array_size(size) != 2 ||
        !json_is_integer(json_array_get(size, 0)) || !json_is_integer(json_array_get(size, 1))) {
        snprintf(why, whysz, "RLE without an integer [h, w] size");
        return CHUTE_ECORRUPT;
    }
    json_int_t hh = json_integer_value(json_array_get(size, 0)),
               ww = json_integer_value(json_array_get(size, 1));
    if (hh <= 0 || ww <= 0 || hh > UINT32_MAX || ww > UINT32_MAX) {
        snprintf(why, whysz, "RLE size [%lld, %lld] is not positive", (long long)hh, (long long)ww);
        return CHUTE_ECORRUPT;
    }
    *h = (uint32_t)hh;
    *w = (uint32_t)ww;
    cnts->n = 0;
    if (json_is_string(counts)) {
        int rc = ch_rle_from_string(json_string_value(counts), json_string_length(counts), cnts, why,
                                    whysz);
        if (rc != CHUTE_OK)
            return rc;
    } else if (json_is_array(counts)) {
        for (size_t i = 0; i < json_array_size(counts); i++) {
            json_t *v = json_array_get(counts, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > UINT32_MAX) {
                snprintf(why, whysz, "RLE count %zu is not an integer in 0..2^32-1", i);
                return CHUTE_ECORRUPT;
            }
            if (ch_u32v_push(cnts, (uint32_t)json_integer_value(v)) != CHUTE_OK)
                return CHUTE_ENOMEM;
        }
    } else {
        snprintf(why, whysz, "RLE counts neither a string nor a list");
        return CHUTE_ECORRUPT;
    }
    return ch_rle_check(cnts->v, cnts->n, *h, *w, why, whysz);
}

/* Check one annotation; *img and *label on success.  CHUTE_ECORRUPT with
 * why for a bad one, CHUTE_ENOMEM otherwise. */
static int ann_check(ch_coco *c, json_t *a, ch_u32v *scratch, int *img, uint32_t *label, char *why,
                     size_t whysz)
{
    int64_t iid, cid, crowd = 0;
    if (get_int(a, "image_id", &iid) != 0)
        return snprintf(why, whysz, "no integer image_id"), CHUTE_ECORRUPT;
    if ((*img = find_image(c, iid)) < 0)
        return snprintf(why, whysz, "image_id %lld is not an image of the file", (long long)iid),
               CHUTE_ECORRUPT;
    if (get_int(a, "category_id", &cid) != 0)
        return snprintf(why, whysz, "no integer category_id"), CHUTE_ECORRUPT;
    int l = find_cat(c, cid);
    if (l < 0)
        return snprintf(why, whysz, "category_id %lld is not a category of the file", (long long)cid),
               CHUTE_ECORRUPT;
    *label = (uint32_t)l;
    json_t *cr = json_object_get(a, "iscrowd");
    if (cr && (get_int(a, "iscrowd", &crowd) != 0 || (crowd != 0 && crowd != 1)))
        return snprintf(why, whysz, "iscrowd is not 0 or 1"), CHUTE_ECORRUPT;
    json_t *bb = json_object_get(a, "bbox");
    if (!numbers(bb, 4))
        return snprintf(why, whysz, "bbox is not 4 finite numbers"), CHUTE_ECORRUPT;
    double x = json_number_value(json_array_get(bb, 0)), y = json_number_value(json_array_get(bb, 1)),
           bw = json_number_value(json_array_get(bb, 2)), bh = json_number_value(json_array_get(bb, 3));
    const ch_coco_image *im = &c->images[*img];
    if (bw < 0 || bh < 0)
        return snprintf(why, whysz, "bbox has a negative size (%g x %g)", bw, bh), CHUTE_ECORRUPT;
    if (x > im->width || y > im->height || x + bw < 0 || y + bh < 0)
        return snprintf(why, whysz, "bbox [%g, %g, %g, %g] lies outside its %ux%u image", x, y, bw,
                        bh, im->width, im->height),
               CHUTE_ECORRUPT;
    /* stored as float32: a double past its range would convert undefined */
    if (fabs(x) > 3.0e38 || fabs(y) > 3.0e38 || !isfinite(x + bw) || !isfinite(y + bh) ||
        fabs(x + bw) > 3.0e38 || fabs(y + bh) > 3.0e38)
        return snprintf(why, whysz, "bbox corner beyond float range"), CHUTE_ECORRUPT;
    json_t *seg = json_object_get(a, "segmentation");
    if (json_is_array(seg)) {
        for (size_t p = 0; p < json_array_size(seg); p++) {
            json_t *poly = json_array_get(seg, p);
            if (!numbers(poly, 0))
                return snprintf(why, whysz, "polygon %zu is not a list of finite numbers", p),
                       CHUTE_ECORRUPT;
            size_t L = json_array_size(poly);
            if (L < 6 || (L & 1) || L > UINT32_MAX / 2)
                return snprintf(why, whysz, "polygon %zu has %zu coordinates (an even number >= 6)",
                                p, L),
                       CHUTE_ECORRUPT;
            double *xy = malloc(sizeof(double) * L);
            if (!xy)
                return CHUTE_ENOMEM;
            for (size_t j = 0; j < L; j++)
                xy[j] = json_number_value(json_array_get(poly, j));
            char pwhy[160];
            int rc = ch_poly_check(xy, L / 2, pwhy, sizeof pwhy);
            free(xy);
            if (rc != CHUTE_OK)
                return snprintf(why, whysz, "polygon %zu: %s", p, pwhy), CHUTE_ECORRUPT;
        }
    } else if (json_is_object(seg)) {
        uint32_t h, w;
        int rc = rle_of(seg, scratch, &h, &w, why, whysz);
        if (rc != CHUTE_OK)
            return rc;
        if (h != im->height || w != im->width)
            return snprintf(why, whysz, "RLE mask is %ux%u, its image %ux%u", w, h, im->width,
                            im->height),
                   CHUTE_ECORRUPT;
    } else if (seg && !json_is_null(seg)) {
        return snprintf(why, whysz, "segmentation neither polygons nor RLE"), CHUTE_ECORRUPT;
    }
    json_t *kp = json_object_get(a, "keypoints");
    if (kp && !json_is_null(kp)) {
        if (!numbers(kp, 0) || json_array_size(kp) % 3 || json_array_size(kp) / 3 > CH_TG_MAX_KEYPOINTS)
            return snprintf(why, whysz, "keypoints are not x, y, v triples of finite numbers"),
                   CHUTE_ECORRUPT;
        uint32_t k = (uint32_t)(json_array_size(kp) / 3);
        if (c->k == 0)
            c->k = k;
        if (k != c->k)
            return snprintf(why, whysz, "%u keypoints where the file has %u", k, c->k),
                   CHUTE_ECORRUPT;
        for (uint32_t j = 0; j < k; j++) {
            double v = json_number_value(json_array_get(kp, j * 3 + 2));
            if (fabs(json_number_value(json_array_get(kp, j * 3))) > 3.0e38 ||
                fabs(json_number_value(json_array_get(kp, j * 3 + 1))) > 3.0e38)
                return snprintf(why, whysz, "keypoint %u beyond float range", j), CHUTE_ECORRUPT;
            if (v != 0 && v != 1 && v != 2)
                return snprintf(why, whysz, "keypoint %u visibility %g (0, 1 or 2)", j, v),
                       CHUTE_ECORRUPT;
        }
    }
    return CHUTE_OK;
}

static int parse_images(ch_coco *c, chute_error *err)
{
    json_t *ims = json_object_get(c->root, "images");
    if (!json_is_array(ims))
        return ch_err(err, CHUTE_EFORMAT, "%s: no \"images\" array (not a COCO instances file)",
                      c->what);
    c->nimages = json_array_size(ims);
    if (c->nimages > INT32_MAX)
        return ch_err(err, CHUTE_ELIMIT, "%s: over 2^31 images", c->what);
    c->images = calloc(c->nimages ? c->nimages : 1, sizeof *c->images);
    c->by_id = calloc(c->nimages ? c->nimages : 1, sizeof *c->by_id);
    if (!c->images || !c->by_id)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %zu images", c->what, c->nimages);
    for (size_t i = 0; i < c->nimages; i++) {
        json_t *o = json_array_get(ims, i);
        ch_coco_image *im = &c->images[i];
        int64_t w, h;
        json_t *fn = json_object_get(o, "file_name");
        if (!json_is_object(o) || get_int(o, "id", &im->id) != 0)
            return ch_err(err, CHUTE_EFORMAT, "%s: images[%zu] has no integer id", c->what, i);
        if (get_int(o, "width", &w) != 0 || get_int(o, "height", &h) != 0 || w <= 0 || h <= 0 ||
            w > UINT32_MAX || h > UINT32_MAX)
            return ch_err(err, CHUTE_EFORMAT, "%s: image id %lld has no positive integer width/height",
                          c->what, (long long)im->id);
        if (!json_is_string(fn) || !safe_name(json_string_value(fn)) ||
            strlen(json_string_value(fn)) != json_string_length(fn))
            return ch_err(err, CHUTE_EFORMAT,
                          "%s: image id %lld has no relative file_name inside the image folder",
                          c->what, (long long)im->id);
        im->file_name = json_string_value(fn);
        im->width = (uint32_t)w;
        im->height = (uint32_t)h;
        c->by_id[i].id = im->id;
        c->by_id[i].idx = (uint32_t)i;
    }
    qsort(c->by_id, c->nimages, sizeof *c->by_id, cmp_img);
    for (size_t i = 1; i < c->nimages; i++)
        if (c->by_id[i].id == c->by_id[i - 1].id)
            return ch_err(err, CHUTE_EFORMAT, "%s: image id %lld appears twice", c->what,
                          (long long)c->by_id[i].id);
    return CHUTE_OK;
}

static int parse_categories(ch_coco *c, chute_error *err)
{
    json_t *cs = json_object_get(c->root, "categories");
    if (!json_is_array(cs))
        return ch_err(err, CHUTE_EFORMAT, "%s: no \"categories\" array", c->what);
    size_t n = json_array_size(cs);
    if (n > INT32_MAX)
        return ch_err(err, CHUTE_ELIMIT, "%s: over 2^31 categories", c->what);
    c->cats = calloc(n ? n : 1, sizeof *c->cats);
    if (!c->cats)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", c->what);
    c->ncats = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(cs, i), *name = json_object_get(o, "name");
        if (!json_is_object(o) || get_int(o, "id", &c->cats[i].id) != 0 || !json_is_string(name))
            return ch_err(err, CHUTE_EFORMAT, "%s: categories[%zu] lacks an integer id or a name",
                          c->what, i);
        c->cats[i].name = json_string_value(name);
    }
    qsort(c->cats, n, sizeof *c->cats, cmp_cat);
    for (size_t i = 1; i < n; i++)
        if (c->cats[i].id == c->cats[i - 1].id)
            return ch_err(err, CHUTE_EFORMAT, "%s: category id %lld appears twice", c->what,
                          (long long)c->cats[i].id);
    return CHUTE_OK;
}

static int parse_annotations(ch_coco *c, ch_tg_policy *pol, chute_error *err)
{
    json_t *as = json_object_get(c->root, "annotations");
    if (!json_is_array(as))
        return ch_err(err, CHUTE_EFORMAT, "%s: no \"annotations\" array", c->what);
    size_t n = json_array_size(as);
    int rc = CHUTE_OK;
    int *img = malloc(sizeof(int) * (n ? n : 1));
    uint32_t *lab = malloc(sizeof(uint32_t) * (n ? n : 1));
    int64_t *ids = malloc(sizeof(int64_t) * (n ? n : 1));
    ch_u32v scratch = {0};
    char why[200];
    if (!img || !lab || !ids) {
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %zu annotations", c->what, n);
        goto done;
    }
    size_t nid = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(as, i);
        int64_t id;
        if (!json_is_object(a) || get_int(a, "id", &id) != 0) {
            rc = ch_err(err, CHUTE_EFORMAT, "%s: annotations[%zu] has no integer id", c->what, i);
            goto done;
        }
        ids[nid++] = id;
        int r = ann_check(c, a, &scratch, &img[i], &lab[i], why, sizeof why);
        if (r == CHUTE_ENOMEM) {
            rc = ch_err(err, r, "%s: out of memory", c->what);
            goto done;
        }
        if (r != CHUTE_OK) {
            if (!pol || !pol->skip) {
                rc = ch_err(err, CHUTE_ECORRUPT, "%s: annotation id %lld: %s", c->what,
                            (long long)id, why);
                goto done;
            }
            if (pol->skipped++ == 0)
                snprintf(pol->first_skip, sizeof pol->first_skip, "%s: annotation id %lld: %s",
                         c->what, (long long)id, why);
            img[i] = -1;
        }
    }
    qsort(ids, nid, sizeof *ids, cmp_i64);
    for (size_t i = 1; i < nid; i++)
        if (ids[i] == ids[i - 1]) {
            rc = ch_err(err, CHUTE_EFORMAT, "%s: annotation id %lld appears twice", c->what,
                        (long long)ids[i]);
            goto done;
        }
    /* stable counting sort of the kept annotations by image */
    for (size_t i = 0; i < n; i++)
        if (img[i] >= 0)
            c->images[img[i]].count++, c->nanns++;
    uint32_t at = 0;
    for (size_t i = 0; i < c->nimages; i++) {
        c->images[i].first = at;
        at += c->images[i].count;
        c->images[i].count = 0;
    }
    c->anns = malloc(sizeof(json_t *) * (c->nanns ? c->nanns : 1));
    c->ann_label = malloc(sizeof(uint32_t) * (c->nanns ? c->nanns : 1));
    if (!c->anns || !c->ann_label) {
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory", c->what);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (img[i] >= 0) {
            ch_coco_image *im = &c->images[img[i]];
            c->anns[im->first + im->count] = json_array_get(as, i);
            c->ann_label[im->first + im->count] = lab[i];
            im->count++;
        }
done:
    free(img);
    free(lab);
    free(ids);
    ch_u32v_free(&scratch);
    return rc;
}

int ch_coco_parse(const char *text, size_t len, const char *what, ch_tg_policy *pol, ch_coco **out,
                  chute_error *err)
{
    *out = NULL;
    if (len > INT32_MAX * 4ull)
        return ch_err(err, CHUTE_ELIMIT, "%s: over 8 GiB", what);
    ch_coco *c = calloc(1, sizeof *c);
    if (!c)
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory", what);
    ch_str_fit(c->what, sizeof c->what, what);
    json_error_t je;
    c->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (!c->root)
        rc = ch_err(err, CHUTE_EFORMAT, "%s: line %d column %d (byte %d): %s", c->what, je.line,
                    je.column, je.position, je.text);
    else if (!json_is_object(c->root))
        rc = ch_err(err, CHUTE_EFORMAT, "%s: not a JSON object (not a COCO file)", c->what);
    else if ((rc = parse_images(c, err)) == CHUTE_OK && (rc = parse_categories(c, err)) == CHUTE_OK)
        rc = parse_annotations(c, pol, err);
    if (rc != CHUTE_OK) {
        ch_coco_free(c);
        return rc;
    }
    *out = c;
    return CHUTE_OK;
}

int ch_coco_load(const char *path, uint64_t max_bytes, ch_tg_policy *pol, ch_coco **out,
                 chute_error *err)
{
    *out = NULL;
    if (!max_bytes)
        max_bytes = CH_COCO_MAX_BYTES_DEFAULT;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return ch_err_errno(err, CHUTE_EIO, errno, "%s", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ch_err(err, CHUTE_EFORMAT, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return ch_err(err, CHUTE_ELIMIT,
                      "%s: %llu bytes is over the %llu-byte limit for an annotation file (parsing "
                      "takes ~8x the file in memory)",
                      path, (unsigned long long)st.st_size, (unsigned long long)max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return ch_err_errno(err, CHUTE_EIO, e, "%s: read at byte %zu", path, got);
        }
        got += (size_t)r;
    }
    close(fd);
    int rc = ch_coco_parse(buf, n, path, pol, out, err);
    free(buf);
    return rc;
}

void ch_coco_free(ch_coco *c)
{
    if (!c)
        return;
    if (c->root)
        json_decref(c->root);
    free(c->images);
    free(c->by_id);
    free(c->cats);
    free(c->anns);
    free(c->ann_label);
    free(c);
}

int ch_coco_record(const ch_coco *c, size_t i, ch_tg_builder *b, chute_error *err)
{
    const ch_coco_image *im = &c->images[i];
    ch_tg_begin(b, im->width, im->height, c->k);
    ch_u32v cnts = {0}, plen = {0};
    double *xy = NULL;
    size_t xy_cap = 0;
    float *kp = NULL;
    int rc = CHUTE_OK;
    char why[256];
    if (c->k && !(kp = malloc(sizeof(float) * c->k * 3)))
        rc = CHUTE_ENOMEM;
    for (uint32_t j = 0; rc == CHUTE_OK && j < im->count; j++) {
        json_t *a = c->anns[im->first + j], *bb = json_object_get(a, "bbox"),
               *seg = json_object_get(a, "segmentation"), *k = json_object_get(a, "keypoints");
        ch_tg_obj o = {0};
        int64_t crowd = 0;
        get_int(a, "id", &o.ann_id);
        get_int(a, "iscrowd", &crowd);
        o.iscrowd = (uint8_t)crowd;
        o.label = (int32_t)c->ann_label[im->first + j];
        double x = json_number_value(json_array_get(bb, 0)), y = json_number_value(json_array_get(bb, 1));
        o.box[0] = (float)x;
        o.box[1] = (float)y;
        o.box[2] = (float)(x + json_number_value(json_array_get(bb, 2)));
        o.box[3] = (float)(y + json_number_value(json_array_get(bb, 3)));
        if (json_is_array(k) && kp) {
            for (uint32_t t = 0; t < c->k * 3; t++)
                kp[t] = (float)json_number_value(json_array_get(k, t));
            o.kp = kp;
        }
        if (json_is_array(seg) && json_array_size(seg) > 0) {
            size_t total = 0;
            plen.n = 0;
            for (size_t p = 0; p < json_array_size(seg); p++) {
                size_t L = json_array_size(json_array_get(seg, p));
                total += L;
                if ((rc = ch_u32v_push(&plen, (uint32_t)L)) != CHUTE_OK)
                    break;
            }
            if (rc == CHUTE_OK && total > xy_cap) {
                double *n = realloc(xy, total * sizeof(double));
                if (!n)
                    rc = CHUTE_ENOMEM;
                else
                    xy = n, xy_cap = total;
            }
            size_t at = 0;
            for (size_t p = 0; rc == CHUTE_OK && p < json_array_size(seg); p++) {
                json_t *poly = json_array_get(seg, p);
                for (size_t t = 0; t < json_array_size(poly); t++)
                    xy[at++] = json_number_value(json_array_get(poly, t));
            }
            o.seg = CH_SEG_POLY;
            o.npoly = (uint32_t)plen.n;
            o.poly_len = plen.v;
            o.poly_xy = xy;
        } else if (json_is_object(seg)) {
            uint32_t h, w;
            if (rc == CHUTE_OK && (rc = rle_of(seg, &cnts, &h, &w, why, sizeof why)) == CHUTE_OK) {
                o.seg = CH_SEG_RLE;
                o.rle_h = h;
                o.rle_w = w;
                o.rle = cnts.v;
                o.rle_m = (uint32_t)cnts.n;
            }
        }
        if (rc == CHUTE_OK)
            rc = ch_tg_add(b, &o);
    }
    free(xy);
    free(kp);
    ch_u32v_free(&cnts);
    ch_u32v_free(&plen);
    if (rc != CHUTE_OK)
        return ch_err(err, rc, "%s: image id %lld: cannot build its target record (%s)", c->what,
                      (long long)im->id, chute_status_name(rc));
    return CHUTE_OK;
}

size_t ch_coco_nimages(const ch_coco *c) { return c->nimages; }
const ch_coco_image *ch_coco_image_at(const ch_coco *c, size_t i) { return &c->images[i]; }
uint32_t ch_coco_ncategories(const ch_coco *c) { return c->ncats; }
int64_t ch_coco_category_id(const ch_coco *c, uint32_t l) { return c->cats[l].id; }
const char *ch_coco_category_name(const ch_coco *c, uint32_t l) { return c->cats[l].name; }
uint32_t ch_coco_keypoints(const ch_coco *c) { return c->k; }
uint64_t ch_coco_nannotations(const ch_coco *c) { return c->nanns; }

#else /* no libjansson */

int ch_coco_parse(const char *text, size_t len, const char *what, ch_tg_policy *pol, ch_coco **out,
                  chute_error *err)
{
    *out = NULL;
    return ch_err(err, CHUTE_EUNSUPPORTED,
                  "%s: COCO JSON needs libjansson: install libjansson-dev and rebuild "
                  "(chute_features() lists \"coco\" when present)",
                  what);
}

int ch_coco_load(const char *path, uint64_t max_bytes, ch_tg_policy *pol, ch_coco **out,
                 chute_error *err)
{
    return ch_coco_parse(NULL, 0, path, pol, out, err);
}

void ch_coco_free(ch_coco *c) { (void)c; }
size_t ch_coco_nimages(const ch_coco *c) { return 0; }
const ch_coco_image *ch_coco_image_at(const ch_coco *c, size_t i) { return NULL; }
uint32_t ch_coco_ncategories(const ch_coco *c) { return 0; }
int64_t ch_coco_category_id(const ch_coco *c, uint32_t l) { return 0; }
const char *ch_coco_category_name(const ch_coco *c, uint32_t l) { return NULL; }
uint32_t ch_coco_keypoints(const ch_coco *c) { return 0; }
uint64_t ch_coco_nannotations(const ch_coco *c) { return 0; }
int ch_coco_record(const ch_coco *c, size_t i, ch_tg_builder *b, chute_error *err)
{
    return ch_err(err, CHUTE_EUNSUPPORTED, "COCO JSON needs libjansson");
}
#endif
