/*
 * webdataset.c — WebDataset's sample rule over a tar index: consecutive
 * members whose names share a key form one sample, one field per
 * extension.
 *
 * The rule is webdataset's own (1.0.2, tariterators.py), reproduced
 * exactly rather than approximated, because a loader that groups even one
 * name differently silently pairs the wrong label with an image:
 *
 *   base_plus_ext: ^((?:.*\/|)[^.]+)[.]([^/]*)$
 *
 * Worked through, that regex always splits at the first dot of the
 * basename (key = everything before it, directories included; field =
 * everything after it), and it fails to match when the basename has no
 * dot, or when no prefix of the key ending in '/' (or the empty prefix)
 * leaves a non-empty, dot-free remainder — e.g. ".jpg" at top level, or
 * "a.b/.jpg"; a '.' in the regex's ".*" does not match a newline, which
 * matters only for names containing one.  fmt_wds_split_name implements
 * that characterisation; the tests compare it with Python's re on a list
 * of awkward names.  Metadata names (__key__-style) are skipped as
 * webdataset's tar_file_iterator does.  Field names are compared
 * case-insensitively (webdataset lowercases them; ASCII only here).
 *
 * Two things webdataset leaves loose are reported by policy (see
 * fmt_wds_policy): a field repeated within one sample (webdataset raises
 * ValueError) and a key that comes back after other members (webdataset
 * yields two samples with one key, which breaks "a key names a sample").
 */
#define _GNU_SOURCE
#include "parse.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

int fmt_wds_split_name(const char *name, size_t len, size_t *key_len, size_t *ext_off)
{
    size_t b = 0; /* basename start */
    for (size_t i = len; i > 0; i--)
        if (name[i - 1] == '/') {
            b = i;
            break;
        }
    const char *dot = memchr(name + b, '.', len - b);
    if (!dot)
        return 0;
    size_t d = (size_t)(dot - name);
    if (d == 0)
        return 0;
    /* The regex needs key = P Q: P empty or "anything-without-newline/",
     * Q non-empty and dot-free.  Q must start after the key's last dot. */
    const char *last = NULL;
    for (size_t i = d; i > 0; i--)
        if (name[i - 1] == '.') {
            last = name + i - 1;
            break;
        }
    if (last) {
        size_t from = (size_t)(last - name) + 1, s = SIZE_MAX;
        for (size_t i = from; i + 1 < d; i++) /* Q = name[s+1, d) non-empty */
            if (name[i] == '/') {
                s = i;
                break;
            }
        if (s == SIZE_MAX || memchr(name, '\n', s))
            return 0;
    }
    *key_len = d;
    *ext_off = d + 1;
    return 1;
}

int fmt_wds_is_meta(const char *name, size_t len)
{
    if (len < 2 || name[0] != '_' || name[1] != '_')
        return 0;
    const char *slash = memchr(name, '/', len);
    /* "/" not in fname and fname.startswith("__") and fname.endswith("__") */
    if (!slash && name[len - 2] == '_' && name[len - 1] == '_')
        return 1;
    /* re.match(r"__[^/]*__($|/)", fname) */
    size_t c = slash ? (size_t)(slash - name) : len;
    if (c >= 4 && name[c - 2] == '_' && name[c - 1] == '_')
        return 1;
    /* '$' also matches before a final newline */
    if (!slash && c >= 5 && name[c - 1] == '\n' && name[c - 3] == '_' && name[c - 2] == '_')
        return 1;
    return 0;
}

void fmt_wds_index_free(fmt_wds_index *w)
{
    if (!w)
        return;
    free(w->samples);
    free(w->fields);
    memset(w, 0, sizeof *w);
}

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint64_t nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    if (nc > SIZE_MAX / elem)
        return -1;
    void *n = realloc(*p, (size_t)nc * elem);
    if (!n)
        return -1;
    *p = n;
    *cap = nc;
    return 0;
}

typedef struct key_ref {
    const char *key;
    uint32_t len;
    uint64_t sample;
} key_ref;

static int cmp_key(const void *a, const void *b)
{
    const key_ref *x = a, *y = b;
    size_t n = CH_MIN(x->len, y->len);
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->sample < y->sample ? -1 : x->sample > y->sample;
}

int fmt_wds_group(const fmt_tar_index *tar, fmt_wds_policy policy, const char *name,
                  fmt_wds_index *w, chute_error *err)
{
    memset(w, 0, sizeof *w);
    name = name ? name : "(tar)";
    fmt_wds_sample *cur = NULL;
    const char *cur_key = NULL;
    for (uint64_t i = 0; i < tar->count; i++) {
        const fmt_tar_member *m = &tar->m[i];
        const char *mn = tar->names + m->name_off;
        size_t kl, eo;
        if (fmt_wds_is_meta(mn, m->name_len) || !fmt_wds_split_name(mn, m->name_len, &kl, &eo)) {
            w->skipped_names++;
            continue;
        }
        const char *ext = mn + eo;
        size_t el = m->name_len - eo;
        if (!cur || cur->key_len != kl || memcmp(cur_key, mn, kl) != 0) {
            if (grow((void **)&w->samples, &w->cap, w->count + 1, sizeof *w->samples))
                return ch_err(err, CHUTE_ENOMEM, "%s: no memory for the sample index", name);
            cur = &w->samples[w->count++];
            cur->first_field = w->nfields;
            cur->nfields = 0;
            cur->key_off = m->name_off;
            cur->key_len = (uint32_t)kl;
            cur->flags = 0;
            cur_key = mn;
        } else {
            int dup = 0;
            uint64_t first = 0;
            for (uint64_t f = cur->first_field; f < w->nfields; f++) {
                const fmt_wds_field *o = &w->fields[f];
                if (o->ext_len == el &&
                    strncasecmp(tar->names + tar->m[o->member].name_off + o->ext_off, ext, el) ==
                        0) {
                    dup = 1;
                    first = tar->m[o->member].header_offset;
                    break;
                }
            }
            if (dup) {
                if (policy == FMT_WDS_STRICT)
                    return ch_err(err, CHUTE_ECORRUPT,
                                  "%s@%llu: '%.200s' repeats field '%.*s' of sample '%.*s' "
                                  "(first at %llu)",
                                  name, (unsigned long long)m->header_offset, mn, (int)el, ext,
                                  (int)kl, mn, (unsigned long long)first);
                w->duplicates++;
                continue;
            }
        }
        if (grow((void **)&w->fields, &w->fields_cap, w->nfields + 1, sizeof *w->fields))
            return ch_err(err, CHUTE_ENOMEM, "%s: no memory for the sample index", name);
        fmt_wds_field *f = &w->fields[w->nfields++];
        f->member = i;
        f->ext_off = (uint32_t)eo;
        f->ext_len = (uint32_t)el;
        cur->nfields++;
    }
    /* Split keys: sort (key, sample) pairs and look at neighbours. */
    if (w->count > 1) {
        if (w->count > SIZE_MAX / sizeof(key_ref))
            return ch_err(err, CHUTE_ENOMEM, "%s: too many samples", name);
        key_ref *refs = malloc((size_t)w->count * sizeof *refs);
        if (!refs)
            return ch_err(err, CHUTE_ENOMEM, "%s: no memory to check sample keys", name);
        for (uint64_t s = 0; s < w->count; s++) {
            refs[s].key = tar->names + w->samples[s].key_off;
            refs[s].len = w->samples[s].key_len;
            refs[s].sample = s;
        }
        qsort(refs, (size_t)w->count, sizeof *refs, cmp_key);
        int rc = CHUTE_OK;
        for (uint64_t s = 1; s < w->count; s++) {
            const key_ref *a = &refs[s - 1], *b = &refs[s];
            if (a->len != b->len || memcmp(a->key, b->key, a->len) != 0)
                continue;
            if (policy == FMT_WDS_STRICT) {
                const fmt_wds_sample *sa = &w->samples[a->sample], *sb = &w->samples[b->sample];
                rc = ch_err(err, CHUTE_ECORRUPT,
                            "%s@%llu: sample key '%.*s' appears again after other members "
                            "(first sample at %llu)",
                            name,
                            (unsigned long long)tar->m[w->fields[sb->first_field].member]
                                .header_offset,
                            (int)CH_MIN(a->len, 200u), a->key,
                            (unsigned long long)tar->m[w->fields[sa->first_field].member]
                                .header_offset);
                break;
            }
            for (int k = 0; k < 2; k++) {
                fmt_wds_sample *x = &w->samples[(k ? b : a)->sample];
                if (!(x->flags & FMT_WDS_SPLIT)) {
                    x->flags |= FMT_WDS_SPLIT;
                    w->split++;
                }
            }
        }
        free(refs);
        if (rc)
            return rc;
    }
    return CHUTE_OK;
}
