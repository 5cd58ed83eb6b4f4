/*
 * fmt_csv.c — the "csv" format: rows of CSV files as samples of typed
 * scalar fields (the way tf.io.decode_csv reads them: a typed schema with
 * per-column defaults for empty cells), a label column, no image.
 *
 * Why it is shaped so:
 *   - A dataset is one .csv file or a directory of them (name order).  Open
 *     reads each file once, front to back, in 1 MiB chunks through the
 *     source (csv.h: ch_csv_scan is resumable across chunks), and keeps one
 *     entry per row: file, offset, length, line.  So rows are shuffled
 *     globally like any indexed format, and a read is one positional read
 *     of the row.  Blank lines are skipped, as pandas skips them.
 *   - While indexing, each row is split once (ch_csv_split): its label (an
 *     integer column named by label_key, label_offset applied) goes into
 *     ds->labels, and category columns collect their values, numbered in
 *     sorted order at the end (pandas' category codes), so ids are global
 *     and do not depend on which rows a rank reads.
 *   - A malformed row (ragged, an unterminated quote, text after a closing
 *     quote, a cell that is not the column's type, an empty cell with no
 *     default) stays a sample that fails when read: CHUTE_ECORRUPT
 *     "FILE:LINE: reason", so the loader's corrupt policy counts and skips
 *     it or fails the batch (strict).  Open fails only when nothing can be
 *     indexed (a record longer than 64 MiB: an unterminated quote that ate
 *     the file), or the schema names a column the header lacks.
 *   - read_fields re-reads and re-splits the row in the worker's scratch
 *     buffer (unquoting in place), converts the requested cells and writes
 *     them to the batch: no allocation, no lock; category values are found
 *     by binary search in the sorted values from open.
 * Never: a size or offset from a file used without a check, a row kept in
 * memory after open, the locale of the process deciding what a decimal
 * point is (floats parse in a "C" locale created at open).
 */
#define _GNU_SOURCE
#include "format.h"
#include "csv.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CSV_CHUNK (1u << 20)
#define CSV_MAX_RECORD (64u << 20)

enum { COL_SKIP = 0, COL_INT64, COL_FLOAT32, COL_CATEGORY };

typedef struct csv_str {
    char *s;
    size_t n;
} csv_str;

typedef struct csv_col {
    char name[CH_FIELD_NAME_MAX];
    int type;
    int has_def;
    char def[64];             /* the default's text, converted like a cell */
    size_t def_n;
    int64_t src;              /* column index in the files */
    int field;                /* ds->fields index */
    /* category: a hash set while indexing, then the sorted values */
    csv_str *set;
    size_t set_cap, nset;
    csv_str *sorted;
} csv_col;

typedef struct csv_row {
    uint64_t off;
    uint64_t line;
    uint32_t len;
    uint32_t file;
} csv_row;

typedef struct csv_impl {
    const ch_source_ops *src;
    ch_ds_file *files;
    size_t nfiles;
    csv_row *rows;
    uint64_t cap;
    csv_col cols[CH_FIELD_MAX];
    uint32_t ncols;
    int64_t label_src;        /* column of the label, -1: none */
    char auto_label[CH_FIELD_NAME_MAX]; /* the header's label column found by name (no schema, no label_key) */
    size_t ncells;            /* cells per row (the header's, or the first row's) */
    int header;
    int from_schema;          /* columns given by the schema option */
    locale_t loc;
    ch_csv_cell *cells;       /* CH_CSV_MAX_COLS, for open (one thread) */
    uint64_t nbad;            /* rows found malformed at open */
    char first_bad[512];
} csv_impl;

static int ends_csv(const char *name)
{
    size_t n = strlen(name);
    return name[0] != '.' && n > 4 && strcmp(name + n - 4, ".csv") == 0;
}

static int csv_probe(const ch_source_ops *src, const char *path, int is_dir, char *why,
                     size_t n)
{
    if (!is_dir) {
        if (ends_csv(strrchr(path, '/') ? strrchr(path, '/') + 1 : path))
            return CH_PROBE_LIKELY;
        snprintf(why, n, "not a .csv file");
        return CH_PROBE_NO;
    }
    char **v = NULL;
    size_t k = 0;
    chute_error e = {0};
    if (ch_path_list(src, path, ends_csv, &v, &k, &e) != CHUTE_OK || k == 0) {
        ch_path_list_free(v, k);
        snprintf(why, n, "no .csv files");
        return CH_PROBE_NO;
    }
    ch_path_list_free(v, k);
    return CH_PROBE_LIKELY;
}

/* ---- schema ------------------------------------------------------------ */

static int parse_schema(csv_impl *t, const char *s, chute_error *err)
{
    const char *p = s;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        while (len && p[0] == ' ') {
            p++;
            len--;
        }
        if (len == 0) {
            p = end ? end + 1 : p + len;
            continue;
        }
        if (!colon || t->ncols == CH_FIELD_MAX)
            return ch_err(err, CHUTE_EINVAL, "schema: \"%.*s\" is not NAME:TYPE[=DEFAULT] (at "
                          "most %d columns)", (int)CH_MIN(len, 80), p, CH_FIELD_MAX);
        size_t nl = (size_t)(colon - p);
        while (nl && p[nl - 1] == ' ')
            nl--;
        csv_col *c = &t->cols[t->ncols];
        if (nl == 0 || nl >= CH_FIELD_NAME_MAX)
            return ch_err(err, CHUTE_EINVAL, "schema: bad column name in \"%.*s\"",
                          (int)CH_MIN(len, 80), p);
        memcpy(c->name, p, nl);
        c->name[nl] = '\0';
        const char *ty = colon + 1, *eq = memchr(ty, '=', len - (size_t)(ty - p));
        size_t tl = (eq ? (size_t)(eq - ty) : len - (size_t)(ty - p));
        while (tl && ty[0] == ' ') {
            ty++;
            tl--;
        }
        while (tl && ty[tl - 1] == ' ')
            tl--;
        static const char *names[] = {"skip", "int64", "float32", "category"};
        c->type = -1;
        for (int k = 0; k < 4; k++)
            if (strlen(names[k]) == tl && !memcmp(ty, names[k], tl))
                c->type = k;
        if (c->type < 0)
            return ch_err(err, CHUTE_EINVAL, "schema: column %s: type \"%.*s\" is not int64, "
                          "float32, category or skip", c->name, (int)CH_MIN(tl, 40), ty);
        if (eq) {
            size_t dl = len - (size_t)(eq + 1 - p);
            if (dl >= sizeof c->def)
                return ch_err(err, CHUTE_EINVAL, "schema: column %s: default is too long",
                              c->name);
            memcpy(c->def, eq + 1, dl);
            c->def[dl] = '\0';
            c->def_n = dl;
            c->has_def = 1;
            int64_t iv;
            float fv;
            if ((c->type == COL_INT64 && ch_csv_int64(c->def, dl, &iv)) ||
                (c->type == COL_FLOAT32 && ch_csv_float32(c->def, dl, t->loc, &fv)))
                return ch_err(err, CHUTE_EINVAL, "schema: column %s: default \"%s\" is not %s",
                              c->name, c->def, names[c->type]);
        }
        c->src = -1;
        c->field = -1;
        t->ncols++;
        p = end ? end + 1 : p + len;
    }
    return CHUTE_OK;
}

/* ---- category sets ----------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < n; k++)
        h = (h ^ (uint8_t)s[k]) * 1099511628211ull;
    return h;
}

static int set_add(csv_col *c, const char *s, size_t n)
{
    if (c->nset * 2 >= c->set_cap) {
        size_t nc = c->set_cap ? c->set_cap * 2 : 64;
        csv_str *ns = calloc(nc, sizeof *ns);
        if (!ns)
            return -1;
        for (size_t k = 0; k < c->set_cap; k++)
            if (c->set[k].s) {
                size_t j = hash_bytes(c->set[k].s, c->set[k].n) & (nc - 1);
                while (ns[j].s)
                    j = (j + 1) & (nc - 1);
                ns[j] = c->set[k];
            }
        free(c->set);
        c->set = ns;
        c->set_cap = nc;
    }
    size_t j = hash_bytes(s, n) & (c->set_cap - 1);
    while (c->set[j].s) {
        if (c->set[j].n == n && !memcmp(c->set[j].s, s, n))
            return 0;
        j = (j + 1) & (c->set_cap - 1);
    }
    char *d = malloc(n + 1);
    if (!d)
        return -1;
    memcpy(d, s, n);
    d[n] = '\0';
    c->set[j].s = d;
    c->set[j].n = n;
    c->nset++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    const csv_str *x = a, *y = b;
    int r = memcmp(x->s, y->s, CH_MIN(x->n, y->n));
    return r ? r : (x->n > y->n) - (x->n < y->n);
}

static int set_finish(csv_col *c)
{
    c->sorted = malloc((c->nset ? c->nset : 1) * sizeof *c->sorted);
    if (!c->sorted)
        return -1;
    size_t m = 0;
    for (size_t k = 0; k < c->set_cap; k++)
        if (c->set[k].s)
            c->sorted[m++] = c->set[k];
    if (m > 1)
        qsort(c->sorted, m, sizeof *c->sorted, cmp_str);
    free(c->set);
    c->set = NULL;
    c->set_cap = 0;
    return 0;
}

/* ---- indexing ---------------------------------------------------------- */

static void note_bad(csv_impl *t, const char *file, uint64_t line, const char *why)
{
    if (!t->nbad++)
        snprintf(t->first_bad, sizeof t->first_bad, "%s:%llu: %s", file,
                 (unsigned long long)line, why);
}

/* The label column of a header when neither label_key nor a schema says:
 * the first of these names (any case), in this order.  None is an error
 * naming the columns, never labels of 0 without a word. */
/* (ch_label_columns, format.h) */

static int find_label_column(csv_impl *t, const char *file, const ch_csv_cell *cells, size_t n,
                             chute_error *err)
{
    for (size_t j = 0; j < CH_LABEL_NAMES_N; j++)
        for (size_t k = 0; k < n; k++)
            if (cells[k].n == strlen(ch_label_columns[j]) && cells[k].n < sizeof t->auto_label &&
                !strncasecmp(cells[k].p, ch_label_columns[j], cells[k].n)) {
                memcpy(t->auto_label, cells[k].p, cells[k].n);
                t->auto_label[cells[k].n] = '\0';
                return CHUTE_OK;
            }
    char have[400] = "";
    for (size_t k = 0; k < n; k++) {
        size_t l = strlen(have);
        if (l + cells[k].n + 8 >= sizeof have) {
            snprintf(have + l, sizeof have - l, ", ...");
            break;
        }
        snprintf(have + l, sizeof have - l, "%s%.*s", k ? ", " : "", (int)cells[k].n, cells[k].p);
    }
    char names[128];
    return ch_err(err, CHUTE_EFORMAT,
                  "%s:1: no label column: the header has %s, and a column named %s (any case) "
                  "is the label; name another with label_key, give a schema, or set label_key "
                  "to \"\" for rows without labels",
                  file, have, ch_label_names_text(ch_label_columns, "", " or ", names, sizeof names));
}

/* The header (first record of a file): where each schema column is. */
static int use_header(chute_dataset *ds, csv_impl *t, const char *file, ch_csv_cell *cells,
                      size_t n, const chute_dataset_options *opt, chute_error *err)
{
    if (t->ncells && n != t->ncells)
        return ch_err(err, CHUTE_EFORMAT, "%s:1: the header has %zu columns, the first file's "
                      "has %zu", file, n, t->ncells);
    t->ncells = n;
    /* The label column's name: label_key; "" = none; else, without a
     * schema, found by name in the first file's header. */
    const char *lk = opt->label_key && opt->label_key[0] ? opt->label_key : NULL;
    if (!opt->label_key && !t->from_schema) {
        if (!t->auto_label[0]) {
            int rc = find_label_column(t, file, cells, n, err);
            if (rc != CHUTE_OK)
                return rc;
        }
        lk = t->auto_label;
    }
    if (!t->from_schema && t->ncols == 0) { /* every column but the label's: float32 */
        for (size_t k = 0; k < n && t->ncols < CH_FIELD_MAX; k++) {
            if (lk && cells[k].n == strlen(lk) && !memcmp(cells[k].p, lk, cells[k].n))
                continue;
            if (cells[k].n == 0 || cells[k].n >= CH_FIELD_NAME_MAX)
                return ch_err(err, CHUTE_EFORMAT, "%s:1: header column %zu: an empty or too "
                              "long name", file, k);
            csv_col *c = &t->cols[t->ncols++];
            memcpy(c->name, cells[k].p, cells[k].n);
            c->name[cells[k].n] = '\0';
            c->type = COL_FLOAT32;
            c->field = -1;
            c->src = -1; /* found by name below */
        }
    }
    for (uint32_t j = 0; j < t->ncols; j++) {
        csv_col *c = &t->cols[j];
        int64_t at = -1;
        for (size_t k = 0; k < n && at < 0; k++)
            if (cells[k].n == strlen(c->name) && !memcmp(cells[k].p, c->name, cells[k].n))
                at = (int64_t)k;
        if (at < 0 && c->type != COL_SKIP)
            return ch_err(err, CHUTE_EFORMAT, "%s:1: the header has no column \"%s\"", file,
                          c->name);
        if (c->src >= 0 && c->src != at)
            return ch_err(err, CHUTE_EFORMAT, "%s:1: column \"%s\" is column %lld here and %lld "
                          "in the first file", file, c->name, (long long)at, (long long)c->src);
        c->src = at;
    }
    if (lk) {
        int64_t at = -1;
        for (size_t k = 0; k < n && at < 0; k++)
            if (cells[k].n == strlen(lk) && !memcmp(cells[k].p, lk, cells[k].n))
                at = (int64_t)k;
        if (at < 0)
            return ch_err(err, CHUTE_EFORMAT, "%s:1: the header has no label column \"%s\"",
                          file, lk);
        t->label_src = at;
    }
    (void)ds;
    return CHUTE_OK;
}

static int add_row(chute_dataset *ds, csv_impl *t, uint32_t fi, uint64_t off, size_t len,
                   uint64_t line, int32_t label, chute_error *err)
{
    if (len > UINT32_MAX)
        return ch_err(err, CHUTE_ELIMIT, "%s:%llu: a row of %zu bytes", t->files[fi].path,
                      (unsigned long long)line, len);
    if (ds->n == t->cap) {
        uint64_t nc = t->cap ? t->cap * 2 : 4096;
        csv_row *nr = nc > SIZE_MAX / sizeof *nr ? NULL : realloc(t->rows, nc * sizeof *nr);
        if (nr)
            t->rows = nr;
        int32_t *nl = nc > SIZE_MAX / sizeof *nl ? NULL : realloc(ds->labels, nc * sizeof *nl);
        if (nl)
            ds->labels = nl;
        if (!nr || !nl)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu rows", (unsigned long long)nc);
        t->cap = nc;
    }
    t->rows[ds->n] = (csv_row){off, line, (uint32_t)len, fi};
    ds->labels[ds->n] = label;
    ds->n++;
    return CHUTE_OK;
}

/* One record found while indexing file fi (bytes r[len], modified). */
static int index_record(chute_dataset *ds, csv_impl *t, uint32_t fi, char *r, size_t len,
                        uint64_t off, uint64_t line, int *first, int64_t *maxlabel,
                        const chute_dataset_options *opt, chute_error *err)
{
    if (len == 0 || (len == 1 && r[0] == '\r'))
        return CHUTE_OK; /* blank line */
    const char *file = t->files[fi].path;
    ch_csv_cell *cells = t->cells;
    size_t n = 0;
    const char *why = NULL;
    int bad = ch_csv_split(r, len, cells, CH_CSV_MAX_COLS, &n, &why);
    if (*first && t->header) {
        *first = 0;
        if (bad)
            return ch_err(err, CHUTE_EFORMAT, "%s:%llu: header: %s", file,
                          (unsigned long long)line, why);
        return use_header(ds, t, file, cells, n, opt, err);
    }
    *first = 0;
    if (!t->ncells && !bad) { /* no header: the first row sets the width */
        t->ncells = n;
        if (!t->from_schema)
            for (size_t k = 0; k < n && t->ncols < CH_FIELD_MAX; k++) {
                if (opt->label_key && opt->label_key[0] && (size_t)atoll(opt->label_key) == k)
                    continue;
                csv_col *c = &t->cols[t->ncols++];
                snprintf(c->name, sizeof c->name, "c%zu", k);
                c->type = COL_FLOAT32;
                c->src = (int64_t)k;
                c->field = -1;
            }
    }
    char msg[160];
    if (!bad && n != t->ncells) {
        snprintf(msg, sizeof msg, "%zu cells, the rows have %zu", n, t->ncells);
        why = msg;
        bad = 1;
    }
    int32_t label = 0;
    if (!bad && t->label_src >= 0) {
        int64_t v;
        const ch_csv_cell *c = &cells[t->label_src];
        char where[4200];
        snprintf(where, sizeof where, "%s:%llu", file, (unsigned long long)line);
        if (ch_csv_int64(c->p, c->n, &v)) {
            why = "the label is not an integer";
            bad = 1;
        } else if (ch_ds_label(v, opt, where, &label, err) != CHUTE_OK) {
            return err->code; /* a negative label: the options are wrong, not the row */
        }
        if (!bad && label > *maxlabel)
            *maxlabel = label;
    }
    for (uint32_t j = 0; !bad && j < t->ncols; j++) {
        csv_col *c = &t->cols[j];
        if (c->type != COL_CATEGORY || c->src < 0)
            continue;
        const ch_csv_cell *x = &cells[c->src];
        int rc = x->n ? set_add(c, x->p, x->n) : c->has_def ? set_add(c, c->def, c->def_n) : 0;
        if (rc)
            return ch_err(err, CHUTE_ENOMEM, "out of memory for the values of column %s", c->name);
    }
    if (bad)
        note_bad(t, file, line, why);
    return add_row(ds, t, fi, off, len, line, label, err);
}

static int index_file(chute_dataset *ds, csv_impl *t, uint32_t fi, uint64_t size, ch_buf *b,
                      int64_t *maxlabel, const chute_dataset_options *opt, chute_error *err)
{
    ch_ds_file *f = &t->files[fi];
    size_t have = 0, start = 0, pos = 0; /* b->data[0, have): bytes from file offset base */
    uint64_t base = 0, lines = 0, start_line = 1, next = 0;
    int inq = 0, first = 1;
    for (;;) {
        size_t p = pos;
        if (ch_csv_scan((const uint8_t *)b->data, have, &p, &inq, &lines)) {
            int rc = index_record(ds, t, fi, (char *)b->data + start, p - start, base + start,
                                  start_line, &first, maxlabel, opt, err);
            if (rc != CHUTE_OK)
                return rc;
            start = pos = p + 1;
            start_line = lines + 1;
            continue;
        }
        pos = p;
        if (next >= size) { /* the last record, with no newline */
            if (have > start)
                return index_record(ds, t, fi, (char *)b->data + start, have - start,
                                    base + start, start_line, &first, maxlabel, opt, err);
            return CHUTE_OK;
        }
        if (have - start > CSV_MAX_RECORD)
            return ch_err(err, CHUTE_EFORMAT, "%s:%llu: a record longer than %u MiB (an "
                          "unterminated quote?)", f->path, (unsigned long long)start_line,
                          CSV_MAX_RECORD >> 20);
        if (have > start && start > 0)
            memmove(b->data, (char *)b->data + start, have - start);
        have -= start;
        pos -= start;
        base += start;
        start = 0;
        size_t want = (size_t)CH_MIN((uint64_t)CSV_CHUNK, size - next);
        if (ch_buf_reserve(b, have + want) != CHUTE_OK)
            return ch_err(err, CHUTE_ENOMEM, "out of memory indexing %s", f->path);
        int rc = t->src->read_at(f->h, f->path, next, (char *)b->data + have, want, err);
        if (rc != CHUTE_OK)
            return rc;
        have += want;
        next += want;
    }
}

static int csv_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                    chute_error *err)
{
    csv_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = t;
    t->src = ds->src;
    t->label_src = -1;
    t->header = !opt->csv_no_header;
    ds->no_image = 1;
    t->loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    t->cells = malloc(CH_CSV_MAX_COLS * sizeof *t->cells);
    if (!t->loc || !t->cells)
        return ch_err(err, CHUTE_ENOMEM, "cannot create the C locale");
    if (opt->schema) {
        int rc = parse_schema(t, opt->schema, err);
        if (rc != CHUTE_OK)
            return rc;
        t->from_schema = 1;
        if (!t->header) /* the schema lists every column in order */
            for (uint32_t j = 0; j < t->ncols; j++)
                t->cols[j].src = j;
    }
    if (!t->header && opt->label_key && opt->label_key[0]) {
        int64_t v;
        if (ch_csv_int64(opt->label_key, strlen(opt->label_key), &v) || v < 0)
            return ch_err(err, CHUTE_EINVAL, "label_key \"%s\": without a header, the label "
                          "column is given by its number (0 = the first)", opt->label_key);
        t->label_src = v;
    }
    int rc = ch_ds_files_list(ds->src, path, ends_csv, "CSV files (*.csv)", &t->files, &t->nfiles, err);
    if (rc != CHUTE_OK)
        return rc;
    ch_buf b = {0};
    int64_t maxlabel = 0;
    for (uint32_t fi = 0; fi < t->nfiles && rc == CHUTE_OK; fi++) {
        uint64_t size = 0;
        rc = ch_src_open(t->src, t->files[fi].path, &t->files[fi].h, &size, err);
        if (rc == CHUTE_OK)
            rc = index_file(ds, t, fi, size, &b, &maxlabel, opt, err);
    }
    ch_buf_free(&b);
    if (rc != CHUTE_OK)
        return rc;
    if (ds->n == 0)
        return ch_err(err, CHUTE_ENOTFOUND, "%s: no data rows in %zu CSV file%s", path, t->nfiles,
                      t->nfiles == 1 ? "" : "s");
    if (t->label_src >= 0 && (size_t)t->label_src >= t->ncells)
        return ch_err(err, CHUTE_EFORMAT, "%s: label column %lld, the rows have %zu cells", path,
                      (long long)t->label_src, t->ncells);
    for (uint32_t j = 0; j < t->ncols; j++) {
        csv_col *c = &t->cols[j];
        if (c->type == COL_SKIP)
            continue;
        if (c->src < 0 || (size_t)c->src >= t->ncells)
            return ch_err(err, CHUTE_EFORMAT, "%s: schema column %s is past the rows' %zu cells",
                          path, c->name, t->ncells);
        if (c->type == COL_CATEGORY && set_finish(c))
            return ch_err(err, CHUTE_ENOMEM, "out of memory");
        int kind = c->type == COL_FLOAT32 ? CHUTE_FIELD_FLOAT32 : CHUTE_FIELD_INT64;
        int dt = c->type == COL_FLOAT32 ? CHUTE_DTYPE_FLOAT32 : CHUTE_DTYPE_INT64;
        c->field = ch_ds_field_add(ds, c->name, strlen(c->name), kind, dt, err);
        if (c->field < 0)
            return err->code ? err->code : CHUTE_EINVAL;
        ds->fields[c->field].ndim = 0;
        ds->fields[c->field].known = 1;
    }
    return ch_ds_synth_classes(ds, (uint32_t)(maxlabel + 1), err);
}

/* ---- reads ------------------------------------------------------------- */

static int csv_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                    chute_error *err)
{
    const csv_impl *t = ds->impl;
    const csv_row *r = &t->rows[i];
    if (r->len > cap) {
        *out_len = r->len;
        return CH_ESMALL;
    }
    const ch_ds_file *f = &t->files[r->file];
    int rc = t->src->read_at(f->h, f->path, r->off, buf, r->len, err);
    if (rc == CHUTE_OK)
        *out_len = r->len;
    return rc;
}

static int cell_value(const csv_impl *t, const csv_col *c, const ch_csv_cell *x, void *dst,
                      const char *file, uint64_t line, chute_error *err)
{
    const char *s = x->p;
    size_t n = x->n;
    if (n == 0) {
        if (!c->has_def)
            return ch_err(err, CHUTE_ECORRUPT, "%s:%llu: column %s: an empty cell and no "
                          "default", file, (unsigned long long)line, c->name);
        s = c->def;
        n = c->def_n;
    }
    if (c->type == COL_INT64) {
        int64_t v;
        if (ch_csv_int64(s, n, &v))
            goto bad;
        memcpy(dst, &v, 8);
    } else if (c->type == COL_FLOAT32) {
        float v;
        if (ch_csv_float32(s, n, t->loc, &v))
            goto bad;
        memcpy(dst, &v, 4);
    } else {
        csv_str key = {(char *)s, n};
        const csv_str *hit = bsearch(&key, c->sorted, c->nset, sizeof *c->sorted, cmp_str);
        if (!hit)
            return ch_err(err, CHUTE_ECORRUPT, "%s:%llu: column %s: \"%.*s\" was not in the "
                          "file when it was opened", file, (unsigned long long)line, c->name,
                          (int)CH_MIN(n, 40), s);
        int64_t v = hit - c->sorted;
        memcpy(dst, &v, 8);
    }
    return CHUTE_OK;
bad:
    return ch_err(err, CHUTE_ECORRUPT, "%s:%llu: column %s: \"%.*s\" is not %s", file,
                  (unsigned long long)line, c->name, (int)CH_MIN(n, 40), s,
                  c->type == COL_INT64 ? "an int64" : "a float32");
}

static int csv_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                           size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    const csv_impl *t = ds->impl;
    const csv_row *r = &t->rows[i];
    const char *file = t->files[r->file].path;
    size_t len = 0;
    int rc = ch_ds_read_buf(ds, i, scratch, max_bytes, &len, err);
    if (rc != CHUTE_OK)
        return rc;
    ch_csv_cell cells[CH_CSV_MAX_COLS];
    size_t n = 0;
    const char *why = NULL;
    if (ch_csv_split((char *)scratch->data, len, cells, CH_CSV_MAX_COLS, &n, &why))
        return ch_err(err, CHUTE_ECORRUPT, "%s:%llu: %s", file, (unsigned long long)r->line, why);
    if (n != t->ncells)
        return ch_err(err, CHUTE_ECORRUPT, "%s:%llu: %zu cells, the rows have %zu", file,
                      (unsigned long long)r->line, n, t->ncells);
    if (t->label_src >= 0) {
        int64_t v;
        const ch_csv_cell *c = &cells[t->label_src];
        if (ch_csv_int64(c->p, c->n, &v))
            return ch_err(err, CHUTE_ECORRUPT, "%s:%llu: the label \"%.*s\" is not an integer",
                          file, (unsigned long long)r->line, (int)CH_MIN(c->n, 40), c->p);
    }
    for (size_t k = 0; k < nreq; k++) {
        const csv_col *c = NULL;
        for (uint32_t j = 0; j < t->ncols && !c; j++)
            if (t->cols[j].field == (int)req[k].field)
                c = &t->cols[j];
        if (!c)
            return ch_err(err, CHUTE_EINVAL, "csv: field %u is not a column", req[k].field);
        rc = cell_value(t, c, &cells[c->src], req[k].dst, file, r->line, err);
        if (rc != CHUTE_OK)
            return rc;
    }
    return CHUTE_OK;
}

static uint64_t csv_sample_size(const chute_dataset *ds, uint64_t i)
{
    const csv_impl *t = ds->impl;
    return t->rows[i].len;
}

static void csv_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const csv_impl *t = ds->impl;
    snprintf(buf, n, "%s:%llu", t->files[t->rows[i].file].path,
             (unsigned long long)t->rows[i].line);
}

static void csv_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const csv_impl *t = ds->impl;
    snprintf(buf, n, "%s", t->files[t->rows[i].file].path);
}

static uint64_t csv_unit_of(const chute_dataset *ds, uint64_t i)
{
    const csv_impl *t = ds->impl;
    return t->rows[i].file;
}

static void csv_close(void *impl)
{
    csv_impl *t = impl;
    if (!t)
        return;
    ch_ds_files_close(t->src, t->files, t->nfiles);
    for (uint32_t j = 0; j < t->ncols; j++) {
        csv_col *c = &t->cols[j];
        for (size_t k = 0; k < c->set_cap; k++)
            free(c->set[k].s);
        free(c->set);
        for (size_t k = 0; c->sorted && k < c->nset; k++)
            free(c->sorted[k].s);
        free(c->sorted);
    }
    if (t->loc)
        freelocale(t->loc);
    free(t->rows);
    free(t->cells);
    free(t);
}

const ch_format_ops ch_format_csv = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "csv",
    .probe = csv_probe,
    .open = csv_open,
    .read = csv_read,
    .sample_size = csv_sample_size,
    .describe = csv_describe,
    .file_of = csv_file_of,
    .close = csv_close,
    .unit_of = csv_unit_of,
    .read_fields = csv_read_fields,
};
