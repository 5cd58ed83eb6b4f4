/*
 * fmt_hdf5.c — the "hdf5" format: one HDF5 file whose datasets hold the
 * samples (built only when CMake finds libhdf5; CHUTE_HAVE_HDF5).
 *
 * What it reads (dataset options, reused from TFRecord's keys):
 *   image_key   (default "images"): either N x H x W x C (C = 1, 3, 4) or
 *               N x H x W uint8 raw pixels, handed to the decoder as a
 *               CHRAW record (src/codec/raw.c: zero-copy, so the normal
 *               train/eval transforms apply), or a 1-D variable-length
 *               uint8 dataset of encoded images (JPEG/PNG/BMP bytes,
 *               h5py.vlen_dtype(np.uint8)), decoded as usual.
 *   label_key   (default: the first of labels, label, targets, target, y
 *               that exists): N integers.  None of them is an error that
 *               lists the file's datasets, never labels of 0; label_key ""
 *               means "no labels" (every label 0, one class); a named one
 *               must exist.
 *   extra_keys  further datasets with N rows, delivered as typed fields of
 *               the row's shape and dtype (little-endian ints, uint8..int64,
 *               IEEE float32/float64).
 *
 * Why it is shaped so — HDF5's global lock:
 *   Debian's libhdf5 is a thread-safe build (H5is_library_threadsafe says
 *   1): every H5* call takes one process-wide lock, so workers reading
 *   through H5Dread would run one at a time.  So libhdf5 is used only at
 *   open, from the one opening thread: to learn each dataset's shape, type,
 *   layout and filters, the file offset of a contiguous dataset
 *   (H5Dget_offset), and the address, size and filter mask of every chunk
 *   of a chunked one (H5Dget_chunk_info_by_coord, a B-tree lookup per
 *   chunk: 1.10 has no chunk iterator, and H5Dget_chunk_info by index is
 *   a linear walk).  A read is then one positional read per dataset
 *   (contiguous) or per chunk (chunked) through the source, the chunk's
 *   filters undone by h5chunk.c (deflate via zlib, shuffle) outside any
 *   lock, and the sample's part copied out: whole chunks, never element
 *   by element, no H5 call, no lock, no allocation.
 *   The one exception is variable-length data (encoded images): its bytes
 *   live in global heap collections that only libhdf5 follows, so such a
 *   read is an H5Dread of one element under the library lock, with a
 *   memory manager that makes HDF5 write the bytes straight into the
 *   worker's buffer.  bench/hdf5.py measures what that lock costs.  (A
 *   libhdf5 built without thread safety gets a lock of ours around those
 *   calls instead; datasets must then be opened from one thread at a
 *   time, as libhdf5 itself requires.)
 *   Filters other than deflate and shuffle, external storage and virtual
 *   datasets are refused at open (CHUTE_EUNSUPPORTED naming the dataset).
 * A chunk that lies past the end of the file (a truncated file) fails the
 * open; a chunk that does not inflate to its size is corrupt content for
 * the sample that needs it.
 */
#define _GNU_SOURCE
#include "format.h"
#include "h5chunk.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define H5_DEFAULT_IMAGES "images"
#define H5_DEFAULT_LABELS "labels"
#define H5_RAW_HDR 16 /* CHRAW header (src/codec/raw.c) */

typedef struct h5_chunk {
    uint64_t addr;            /* UINT64_MAX: never written (fill value) */
    uint32_t size;
    uint32_t mask;
} h5_chunk;

/* One HDF5 dataset as chute reads it. */
typedef struct h5_var {
    char name[CH_FIELD_NAME_MAX];
    ch_h5_geom g;
    int compact;              /* data held in mem */
    uint8_t *mem;
    uint64_t addr;            /* contiguous: file offset of the data */
    h5_chunk *chunks;         /* chunked: g.nchunks of them */
    uint64_t ab;              /* chunked: bytes of each of the two scratch areas */
    uint8_t fill[16];         /* one element of the fill value */
} h5_var;

/* Inflaters for chunk reads (h5chunk.h: libdeflate, ~10 KiB each).  A
 * read claims a free slot with one atomic exchange (no lock), allocates
 * its inflater the first time that slot is used and keeps it, so the
 * steady state allocates nothing; the slots in use at once are bounded by
 * the threads reading (workers + read-ahead).  When every slot is busy,
 * or chute has no libdeflate, a read inflates with zlib in its scratch
 * arena instead: the same bytes, only slower. */
#define H5_SLOTS 64
typedef struct h5_slot {
    atomic_int busy;
    int tried;                /* an inflater was asked for (inf may be NULL) */
    ch_h5_inflater *inf;      /* written only by the slot's holder */
} h5_slot;

typedef struct h5_impl {
    const ch_source_ops *src;
    char *path;
    void *h;
    uint64_t fsize;
    hid_t file;
    h5_var img;
    int vlen;                 /* images are variable-length encoded bytes */
    hid_t vdset, vtype, vxfer;
    /* A libhdf5 built without thread safety must never see two calls at
     * once: then variable-length reads take this lock (Debian's build is
     * thread-safe and serialises them itself). */
    int own_lock;
    pthread_mutex_t vlock;
    uint32_t H, W, C;
    h5_var *fields;           /* nvars of them, ds->fields' order */
    uint32_t nvars;
    h5_slot *slots;           /* H5_SLOTS of them */
} h5_impl;

/* ---- libhdf5's messages -------------------------------------------------- */

static herr_t first_err(unsigned n, const H5E_error2_t *e, void *data)
{
    char *buf = data;
    if (n == 0 && e->desc)
        snprintf(buf, 256, "%s", e->desc);
    return 0;
}

/* What HDF5 said about its last failure on this thread (its error stack is
 * per thread in a thread-safe build). */
static const char *h5_why(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_err, buf); /* innermost first */
    H5Eclear2(H5E_DEFAULT);
    if (!buf[0])
        snprintf(buf, 256, "libhdf5 gave no reason");
    return buf;
}

/* ---- probe --------------------------------------------------------------- */

static const uint8_t H5_SIG[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

static int h5_probe(const ch_source_ops *src, const char *path, int is_dir, char *why, size_t n)
{
    if (is_dir) {
        snprintf(why, n, "a directory, not an HDF5 file");
        return CH_PROBE_NO;
    }
    void *h = NULL;
    uint64_t size = 0;
    chute_error e = {0};
    if (ch_src_open(src, path, &h, &size, &e) != CHUTE_OK) {
        snprintf(why, n, "cannot open");
        return CH_PROBE_NO;
    }
    /* The superblock is at 0 or after a user block of 512, 1024, 2048... */
    int found = 0;
    for (uint64_t off = 0; !found && off + 8 <= size && off <= 65536; off = off ? off * 2 : 512) {
        uint8_t sig[8];
        if (src->read_at(h, path, off, sig, 8, &e) != CHUTE_OK)
            break;
        found = memcmp(sig, H5_SIG, 8) == 0;
    }
    src->close(h);
    if (!found)
        snprintf(why, n, "no HDF5 signature");
    return found ? CH_PROBE_CERTAIN : CH_PROBE_NO;
}

/* ---- open ---------------------------------------------------------------- */

/* The chute dtype of an HDF5 numeric type, or -1. */
static int h5_dtype(hid_t type)
{
    H5T_class_t cls = H5Tget_class(type);
    size_t sz = H5Tget_size(type);
    if (sz > 1 && H5Tget_order(type) != H5T_ORDER_LE)
        return -1;
    if (cls == H5T_INTEGER) {
        int u = H5Tget_sign(type) == H5T_SGN_NONE;
        switch (sz) {
        case 1: return u ? CHUTE_DTYPE_UINT8 : CHUTE_DTYPE_INT8;
        case 2: return u ? CHUTE_DTYPE_UINT16 : CHUTE_DTYPE_INT16;
        case 4: return u ? CHUTE_DTYPE_UINT32 : CHUTE_DTYPE_INT32;
        case 8: return u ? CHUTE_DTYPE_UINT64 : CHUTE_DTYPE_INT64;
        default: return -1;
        }
    }
    if (cls == H5T_FLOAT) {
        if (H5Tequal(type, H5T_IEEE_F32LE) > 0)
            return CHUTE_DTYPE_FLOAT32;
        if (H5Tequal(type, H5T_IEEE_F64LE) > 0)
            return CHUTE_DTYPE_FLOAT64;
    }
    return -1;
}

/* Learn dataset d's storage into v (geometry, layout, chunk index). */
static int var_layout(h5_impl *t, hid_t d, hid_t type, h5_var *v, chute_error *err)
{
    char why[256], where[4400];
    snprintf(where, sizeof where, "%s: dataset \"%s\"", t->path, v->name);
    hid_t space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    int rc = CHUTE_OK;
    hsize_t dims[CH_H5_MAX_RANK], cd[CH_H5_MAX_RANK];
    uint64_t dd[CH_H5_MAX_RANK], cc[CH_H5_MAX_RANK];
    int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    size_t es = H5Tget_size(type);
    H5D_layout_t lay = dcpl < 0 ? H5D_LAYOUT_ERROR : H5Pget_layout(dcpl);
    if (rank < 0 || lay == H5D_LAYOUT_ERROR || es == 0) {
        rc = ch_err(err, CHUTE_EFORMAT, "%s: cannot read its shape or layout: %s", where,
                    h5_why(why));
        goto out;
    }
    if (rank < 1 || rank > CH_H5_MAX_RANK) {
        rc = ch_err(err, CHUTE_EFORMAT, "%s: rank %d, expected 1..%d with samples on axis 0",
                    where, rank, CH_H5_MAX_RANK);
        goto out;
    }
    H5Sget_simple_extent_dims(space, dims, NULL);
    for (int k = 0; k < rank; k++)
        dd[k] = dims[k];
    if (lay == H5D_CHUNKED) {
        if (H5Pget_chunk(dcpl, rank, cd) != rank) {
            rc = ch_err(err, CHUTE_EFORMAT, "%s: cannot read its chunk shape: %s", where,
                        h5_why(why));
            goto out;
        }
        for (int k = 0; k < rank; k++)
            cc[k] = cd[k];
    }
    rc = ch_h5_geom_init(&v->g, (uint32_t)rank, dd, lay == H5D_CHUNKED ? cc : NULL,
                         (uint32_t)es, where, err);
    if (rc != CHUTE_OK)
        goto out;
    if (lay == H5D_COMPACT) {
        v->compact = 1;
        uint64_t total = v->g.row_bytes * v->g.dims[0];
        v->mem = malloc(total ? (size_t)total : 1);
        if (!v->mem) {
            rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory", where);
        } else if (total && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->mem) < 0) {
            rc = ch_err(err, CHUTE_EFORMAT, "%s: cannot read its compact data: %s", where,
                        h5_why(why));
        }
        goto out;
    }
    if (H5Pget_external_count(dcpl) > 0) {
        rc = ch_err(err, CHUTE_EUNSUPPORTED, "%s: data in external files is not supported",
                    where);
        goto out;
    }
    if (lay == H5D_CONTIGUOUS) {
        haddr_t a = H5Dget_offset(d);
        uint64_t total = v->g.row_bytes * v->g.dims[0];
        if (total == 0)
            goto out;
        if (a == HADDR_UNDEF) {
            rc = ch_err(err, CHUTE_EFORMAT, "%s: no data was ever written to it", where);
        } else if (a > t->fsize || total > t->fsize - a) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s: its %llu bytes at offset %llu run past the end of the %llu-byte "
                        "file (truncated?)",
                        where, (unsigned long long)total, (unsigned long long)a,
                        (unsigned long long)t->fsize);
        }
        v->addr = a;
        goto out;
    }
    if (lay != H5D_CHUNKED) {
        rc = ch_err(err, CHUTE_EUNSUPPORTED, "%s: layout %d (virtual?) is not supported", where,
                    (int)lay);
        goto out;
    }
    /* Filters, in write order. */
    int nf = H5Pget_nfilters(dcpl);
    for (int k = 0; k < nf && rc == CHUTE_OK; k++) {
        unsigned flags = 0, cdv[8] = {0}, conf = 0;
        size_t ncd = 8;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)k, &flags, &ncd, cdv, sizeof fname, fname,
                                         &conf);
        if (id == H5Z_FILTER_DEFLATE)
            rc = ch_h5_geom_filter(&v->g, CH_H5_FILTER_DEFLATE, 0, where, err);
        else if (id == H5Z_FILTER_SHUFFLE)
            rc = ch_h5_geom_filter(&v->g, CH_H5_FILTER_SHUFFLE, ncd ? cdv[0] : (unsigned)es,
                                   where, err);
        else
            rc = ch_err(err, CHUTE_EUNSUPPORTED,
                        "%s: filter %d (\"%s\") is not supported (deflate/gzip and shuffle are)",
                        where, (int)id, fname);
    }
    if (rc != CHUTE_OK)
        goto out;
    H5D_fill_value_t fs = H5D_FILL_VALUE_DEFAULT;
    H5Pfill_value_defined(dcpl, &fs);
    if (fs == H5D_FILL_VALUE_USER_DEFINED && es <= sizeof v->fill)
        H5Pget_fill_value(dcpl, type, v->fill);
    if (v->g.nchunks > SIZE_MAX / sizeof *v->chunks ||
        !(v->chunks = malloc((size_t)(v->g.nchunks ? v->g.nchunks : 1) * sizeof *v->chunks))) {
        rc = ch_err(err, CHUTE_ENOMEM, "%s: out of memory for %llu chunks", where,
                    (unsigned long long)v->g.nchunks);
        goto out;
    }
    uint64_t maxraw = 0;
    for (uint64_t k = 0; k < v->g.nchunks; k++) {
        uint64_t gc[CH_H5_MAX_RANK];
        hsize_t off[CH_H5_MAX_RANK];
        ch_h5_chunk_coords(&v->g, k, gc);
        for (int q = 0; q < rank; q++)
            off[q] = gc[q] * v->g.cdims[q];
        unsigned mask = 0;
        haddr_t a = HADDR_UNDEF;
        hsize_t sz = 0;
        if (H5Dget_chunk_info_by_coord(d, off, &mask, &a, &sz) < 0) {
            rc = ch_err(err, CHUTE_ECORRUPT, "%s: chunk %llu: its index entry cannot be read: %s",
                        where, (unsigned long long)k, h5_why(why));
            goto out;
        }
        h5_chunk *c = &v->chunks[k];
        c->mask = mask;
        if (a == HADDR_UNDEF) {
            c->addr = UINT64_MAX;
            c->size = 0;
            continue;
        }
        if (sz > UINT32_MAX || a > t->fsize || sz > t->fsize - a) {
            rc = ch_err(err, CHUTE_ECORRUPT,
                        "%s: chunk %llu (%llu bytes at offset %llu) runs past the end of the "
                        "%llu-byte file (truncated?)",
                        where, (unsigned long long)k, (unsigned long long)sz,
                        (unsigned long long)a, (unsigned long long)t->fsize);
            goto out;
        }
        c->addr = a;
        c->size = (uint32_t)sz;
        maxraw = CH_MAX(maxraw, (uint64_t)sz);
    }
    v->ab = (CH_MAX(maxraw, v->g.chunk_bytes) + 63) & ~(uint64_t)63;
out:
    if (space >= 0)
        H5Sclose(space);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return rc;
}

/* Scratch bytes a chunked read of v needs beyond the sample itself. */
static uint64_t var_scratch(const h5_var *v)
{
    return v->chunks ? 2 * v->ab + CH_H5_ZARENA + 64 : 0;
}

/* Open dataset `name` (NULL type/space errors name the file and dataset). */
static hid_t open_dset(h5_impl *t, const char *name, int must, chute_error *err)
{
    char why[256];
    if (H5Lexists(t->file, name, H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        if (must)
            ch_err(err, CHUTE_ENOTFOUND, "%s: no dataset \"%s\" (name it with image_key/"
                   "label_key/extra_keys)", t->path, name);
        return -1;
    }
    hid_t d = H5Dopen2(t->file, name, H5P_DEFAULT);
    if (d < 0)
        ch_err(err, CHUTE_EFORMAT, "%s: \"%s\" is not a readable dataset: %s", t->path, name,
               h5_why(why));
    return d;
}

/* Variable-length reads write straight into the worker's buffer: HDF5 asks
 * this allocator for the element's bytes in the calling thread. */
typedef struct h5_vdst {
    uint8_t *p;
    size_t cap, need;
    int used;
} h5_vdst;
static _Thread_local h5_vdst *h5_cur; /* set only around one H5Dread */

static void *vlen_alloc(size_t size, void *info)
{
    (void)info;
    h5_vdst *v = h5_cur;
    if (!v || v->used || size > v->cap) {
        if (v)
            v->need = size;
        return NULL;
    }
    v->used = 1;
    v->need = size;
    return v->p;
}

static void vlen_free(void *p, void *info)
{
    (void)p;
    (void)info;
}

static int open_images(chute_dataset *ds, h5_impl *t, const char *name, chute_error *err)
{
    char why[256];
    snprintf(t->img.name, sizeof t->img.name, "%s", name);
    hid_t d = open_dset(t, name, 1, err);
    if (d < 0)
        return err->code;
    hid_t type = H5Dget_type(d);
    int rc = CHUTE_OK;
    if (type >= 0 && H5Tget_class(type) == H5T_VLEN) {
        hid_t super = H5Tget_super(type);
        int ok = super >= 0 && H5Tget_class(super) == H5T_INTEGER && H5Tget_size(super) == 1;
        if (super >= 0)
            H5Tclose(super);
        hid_t space = H5Dget_space(d);
        int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
        hsize_t n = 0;
        if (rank == 1)
            H5Sget_simple_extent_dims(space, &n, NULL);
        if (space >= 0)
            H5Sclose(space);
        if (!ok || rank != 1) {
            rc = ch_err(err, CHUTE_EFORMAT,
                        "%s: dataset \"%s\": variable-length, but not a 1-D dataset of uint8 "
                        "sequences (encoded images)", t->path, name);
        } else {
            hbool_t safe = 0;
            H5is_library_threadsafe(&safe);
            t->own_lock = !safe;
            t->vlen = 1;
            t->vdset = d;
            t->vtype = H5Tvlen_create(H5T_NATIVE_UCHAR);
            t->vxfer = H5Pcreate(H5P_DATASET_XFER);
            if (t->vtype < 0 || t->vxfer < 0 ||
                H5Pset_vlen_mem_manager(t->vxfer, vlen_alloc, NULL, vlen_free, NULL) < 0)
                rc = ch_err(err, CHUTE_EFORMAT, "%s: %s", t->path, h5_why(why));
            ds->n = n;
            t->img.g.dims[0] = n;
            H5Tclose(type);
            return rc;
        }
    } else if (type < 0 || H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 1 ||
               H5Tget_sign(type) != H5T_SGN_NONE) {
        rc = ch_err(err, CHUTE_EFORMAT,
                    "%s: dataset \"%s\": images must be uint8 pixels (N x H x W x C) or "
                    "variable-length uint8 (encoded images)", t->path, name);
    } else {
        rc = var_layout(t, d, type, &t->img, err);
        const ch_h5_geom *g = &t->img.g;
        if (rc == CHUTE_OK) {
            uint64_t C = g->rank == 4 ? g->dims[3] : 1;
            if ((g->rank != 3 && g->rank != 4) || (C != 1 && C != 3 && C != 4) ||
                g->dims[1] > UINT32_MAX || g->dims[2] > UINT32_MAX)
                rc = ch_err(err, CHUTE_EFORMAT,
                            "%s: dataset \"%s\": uint8 images must be N x H x W x C with C = 1, "
                            "3 or 4, or N x H x W (grey); this one has rank %u%s",
                            t->path, name, g->rank, g->rank == 4 ? " and C not in 1,3,4" : "");
            t->H = (uint32_t)g->dims[1];
            t->W = (uint32_t)(g->rank > 2 ? g->dims[2] : 0);
            t->C = (uint32_t)C;
            ds->n = g->dims[0];
        }
    }
    if (type >= 0)
        H5Tclose(type);
    H5Dclose(d);
    return rc;
}

/* Label datasets looked for when label_key is not given: ch_label_arrays
 * (format.h), in that order. */

/* H5Literate2 callback: the root group's names, comma-separated, into a
 * 1 KiB buffer (for a message; cut when long). */
static herr_t list_name(hid_t g, const char *name, const H5L_info_t *info, void *u)
{
    (void)g;
    (void)info;
    char *have = u;
    size_t l = strlen(have);
    if (l + strlen(name) + 3 < 1024)
        snprintf(have + l, 1024 - l, "%s%s", l ? ", " : "", name);
    return 0;
}

static int open_labels(chute_dataset *ds, h5_impl *t, const char *name, int must,
                       const chute_dataset_options *opt, chute_error *err)
{
    char why[256];
    int rc = CHUTE_OK;
    uint64_t n = ds->n;
    ds->labels = calloc(n ? (size_t)n : 1, sizeof *ds->labels);
    if (!ds->labels || n > SIZE_MAX / 8)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu labels", (unsigned long long)n);
    if (!name[0]) /* label_key "": no labels, by the user's choice */
        return ch_ds_synth_classes(ds, 1, err);
    hid_t d = -1;
    if (must) {
        d = open_dset(t, name, 1, err);
        if (d < 0)
            return err->code;
    } else { /* the usual names, in order; none found is an error, never labels of 0 */
        int found = 0;
        for (size_t k = 0; k < CH_LABEL_NAMES_N && !found; k++) {
            found = H5Lexists(t->file, ch_label_arrays[k], H5P_DEFAULT) > 0;
            H5Eclear2(H5E_DEFAULT);
            if (found)
                d = open_dset(t, name = ch_label_arrays[k], 1, err);
        }
        if (!found) {
            char have[1024] = "", names[128];
            H5Literate(t->file, H5_INDEX_NAME, H5_ITER_INC, NULL, list_name, have);
            H5Eclear2(H5E_DEFAULT);
            return ch_err(err, CHUTE_EFORMAT,
                          "%s: no label dataset (looked for %s; the file has: %s): name it with "
                          "label_key, or set label_key to \"\" for a dataset without labels",
                          t->path,
                          ch_label_names_text(ch_label_arrays, "", ", ", names, sizeof names),
                          have[0] ? have : "nothing else");
        }
        if (d < 0)
            return err->code;
    }
    hid_t type = H5Dget_type(d), space = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (rank == 1 || rank == 2)
        H5Sget_simple_extent_dims(space, dims, NULL);
    int64_t *raw = NULL;
    if (type < 0 || H5Tget_class(type) != H5T_INTEGER || (rank != 1 && !(rank == 2 && dims[1] == 1))) {
        rc = ch_err(err, CHUTE_EFORMAT, "%s: dataset \"%s\": labels must be N integers", t->path,
                    name);
    } else if (dims[0] != n) {
        rc = ch_err(err, CHUTE_EFORMAT, "%s: dataset \"%s\" has %llu labels for %llu images",
                    t->path, name, (unsigned long long)dims[0], (unsigned long long)n);
    } else if (!(raw = malloc(n ? (size_t)n * 8 : 1))) {
        rc = ch_err(err, CHUTE_ENOMEM, "out of memory for %llu labels", (unsigned long long)n);
    } else if (n && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: dataset \"%s\": cannot read the labels: %s",
                    t->path, name, h5_why(why));
    }
    int32_t maxl = -1;
    for (uint64_t i = 0; rc == CHUTE_OK && i < n; i++) {
        char where[4400];
        snprintf(where, sizeof where, "%s: dataset \"%s\"[%llu]", t->path, name,
                 (unsigned long long)i);
        rc = ch_ds_label(raw[i], opt, where, &ds->labels[i], err);
        maxl = CH_MAX(maxl, ds->labels[i]);
    }
    free(raw);
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    H5Dclose(d);
    return rc == CHUTE_OK ? ch_ds_synth_classes(ds, (uint32_t)(maxl + 1), err) : rc;
}

static int open_fields(chute_dataset *ds, h5_impl *t, const chute_dataset_options *opt,
                       chute_error *err)
{
    if (!opt || !opt->extra_keys)
        return CHUTE_OK;
    char names[CH_FIELD_MAX][CH_FIELD_NAME_MAX];
    int n = ch_split_names(opt->extra_keys, names, CH_FIELD_MAX);
    if (n < 0)
        return ch_err(err, CHUTE_EINVAL,
                      "extra_keys: more than %d datasets, or a name longer than %d bytes",
                      CH_FIELD_MAX, CH_FIELD_NAME_MAX - 1);
    t->fields = calloc((size_t)(n ? n : 1), sizeof *t->fields);
    if (!t->fields)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    t->nvars = (uint32_t)n;
    for (int k = 0; k < n; k++) {
        if (ch_ds_field_find(ds, names[k]) >= 0)
            return ch_err(err, CHUTE_EINVAL, "extra_keys: \"%s\" is listed twice", names[k]);
        h5_var *v = &t->fields[k];
        memcpy(v->name, names[k], sizeof v->name);
        hid_t d = open_dset(t, names[k], 1, err);
        if (d < 0)
            return err->code;
        hid_t type = H5Dget_type(d);
        int dt = type >= 0 ? h5_dtype(type) : -1;
        int rc = dt < 0 ? ch_err(err, CHUTE_EUNSUPPORTED,
                                 "%s: dataset \"%s\": its type is not a little-endian integer or "
                                 "IEEE float32/float64", t->path, names[k])
                        : var_layout(t, d, type, v, err);
        if (type >= 0)
            H5Tclose(type);
        H5Dclose(d);
        if (rc != CHUTE_OK)
            return rc;
        if (v->g.dims[0] != ds->n)
            return ch_err(err, CHUTE_EFORMAT, "%s: dataset \"%s\" has %llu rows for %llu images",
                          t->path, names[k], (unsigned long long)v->g.dims[0],
                          (unsigned long long)ds->n);
        int kind = v->g.rank <= 2 && dt == CHUTE_DTYPE_INT64     ? CHUTE_FIELD_INT64
                   : v->g.rank <= 2 && dt == CHUTE_DTYPE_FLOAT32 ? CHUTE_FIELD_FLOAT32
                                                                 : CHUTE_FIELD_TENSOR;
        int fi = ch_ds_field_add(ds, names[k], strlen(names[k]), kind, dt, err);
        if (fi < 0)
            return err->code;
        ch_field *f = &ds->fields[fi];
        f->ndim = v->g.rank - 1;
        for (uint32_t q = 1; q < v->g.rank; q++) {
            if (v->g.dims[q] > INT64_MAX)
                return ch_err(err, CHUTE_EFORMAT, "%s: dataset \"%s\": dimension too large",
                              t->path, names[k]);
            f->shape[q - 1] = (int64_t)v->g.dims[q];
        }
        f->known = 1;
        ds->nfields = (uint32_t)fi + 1;
    }
    return CHUTE_OK;
}

static int h5_open(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                   chute_error *err)
{
    char why[256];
    h5_impl *t = calloc(1, sizeof *t);
    if (!t)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    ds->impl = t;
    t->src = ds->src;
    t->file = t->vdset = t->vtype = t->vxfer = -1;
    pthread_mutex_init(&t->vlock, NULL);
    t->path = strdup(path);
    t->slots = calloc(H5_SLOTS, sizeof *t->slots);
    if (!t->path || !t->slots)
        return ch_err(err, CHUTE_ENOMEM, "out of memory");
    int rc = ch_src_open(t->src, path, &t->h, &t->fsize, err);
    if (rc != CHUTE_OK)
        return rc;
    /* libhdf5 prints its error stack by default; chute reports through err
     * instead.  The setting is per thread in a thread-safe build, and is
     * restored before returning. */
    H5E_auto2_t old_fn = NULL;
    void *old_data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    t->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (t->file < 0)
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: libhdf5 cannot open it: %s", path, h5_why(why));
    const char *img = opt && opt->image_key ? opt->image_key : H5_DEFAULT_IMAGES;
    const char *lab = opt && opt->label_key ? opt->label_key : H5_DEFAULT_LABELS;
    if (rc == CHUTE_OK)
        rc = open_images(ds, t, img, err);
    if (rc == CHUTE_OK)
        rc = open_labels(ds, t, lab, opt && opt->label_key, opt, err);
    if (rc == CHUTE_OK)
        rc = open_fields(ds, t, opt, err);
    if (rc == CHUTE_OK && ds->n == 0)
        rc = ch_err(err, CHUTE_ENOTFOUND, "%s: dataset \"%s\" holds no samples", path, img);
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return rc;
}

/* ---- reads --------------------------------------------------------------- */

static int var_read_chunks(const h5_impl *t, const h5_var *v, uint64_t i, uint8_t *dst,
                           uint8_t *a, uint8_t *b, uint8_t *z, ch_h5_inflater *inf,
                           chute_error *err);

/* Sample i of v into dst (row_bytes), using scratch (var_scratch bytes,
 * 64-byte aligned).  No H5 call. */
static int var_read(const h5_impl *t, const h5_var *v, uint64_t i, uint8_t *dst,
                    uint8_t *scratch, chute_error *err)
{
    const ch_h5_geom *g = &v->g;
    if (v->compact) {
        memcpy(dst, v->mem + i * g->row_bytes, (size_t)g->row_bytes);
        return CHUTE_OK;
    }
    if (!v->chunks)
        return t->src->read_at(t->h, t->path, v->addr + i * g->row_bytes, dst,
                               (size_t)g->row_bytes, err);
    uint8_t *a = scratch, *b = scratch + v->ab, *z = scratch + 2 * v->ab;
    h5_slot *slot = NULL;
    for (int k = 0; k < H5_SLOTS && g->nfilters; k++) {
        h5_slot *s = &t->slots[k];
        if (!atomic_load_explicit(&s->busy, memory_order_relaxed) &&
            !atomic_exchange_explicit(&s->busy, 1, memory_order_acquire)) {
            slot = s;
            break;
        }
    }
    if (slot && !slot->tried) {
        slot->tried = 1;
        slot->inf = ch_h5_inflater_new();
    }
    int rc = var_read_chunks(t, v, i, dst, a, b, z, slot ? slot->inf : NULL, err);
    if (slot)
        atomic_store_explicit(&slot->busy, 0, memory_order_release);
    return rc;
}

static int var_read_chunks(const h5_impl *t, const h5_var *v, uint64_t i, uint8_t *dst,
                           uint8_t *a, uint8_t *b, uint8_t *z, ch_h5_inflater *inf,
                           chute_error *err)
{
    const ch_h5_geom *g = &v->g;
    uint64_t first = ch_h5_first_chunk(g, i);
    for (uint64_t k = first; k < first + g->per_row; k++) {
        const h5_chunk *c = &v->chunks[k];
        const uint8_t *data;
        uint64_t gc[CH_H5_MAX_RANK];
        ch_h5_chunk_coords(g, k, gc);
        if (c->addr == UINT64_MAX) {
            for (uint64_t e = 0; e < g->chunk_bytes; e += g->es)
                memcpy(a + e, v->fill, g->es);
            data = a;
        } else {
            int rc = t->src->read_at(t->h, t->path, c->addr, a, c->size, err);
            if (rc != CHUTE_OK)
                return rc;
            chute_error e = {0};
            if (ch_h5_direct(g, c->mask)) { /* one chunk = the sample: inflate into dst */
                rc = ch_h5_inflate_direct(g, a, c->size, dst, z, inf, "", &e);
                if (rc == CHUTE_OK)
                    continue;
            } else {
                rc = ch_h5_unfilter(g, c->mask, a, b, (size_t)v->ab, c->size, z, inf, &data, "",
                                    &e);
            }
            if (rc != CHUTE_OK)
                return ch_err(err, rc, "%s@%llu: dataset \"%s\", sample %llu, chunk %llu%s",
                              t->path, (unsigned long long)c->addr, v->name,
                              (unsigned long long)i, (unsigned long long)k, e.message);
        }
        ch_h5_copy_chunk(g, i, gc, data, dst);
    }
    return CHUTE_OK;
}

static uint8_t *align64(uint8_t *p)
{
    return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

static int vlen_read(const h5_impl *t, uint64_t i, void *buf, size_t cap, size_t *out_len,
                     chute_error *err)
{
    char why[256];
    hsize_t start = i, one = 1;
    hid_t fs = H5Dget_space(t->vdset), ms = H5Screate_simple(1, &one, NULL);
    h5_vdst dst = {buf, cap, 0, 0};
    hvl_t v = {0, NULL};
    herr_t hr = -1;
    if (t->own_lock)
        pthread_mutex_lock((pthread_mutex_t *)&t->vlock);
    h5_cur = &dst;
    H5E_BEGIN_TRY
    {
        if (fs >= 0 && ms >= 0 &&
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL) >= 0)
            hr = H5Dread(t->vdset, t->vtype, ms, fs, t->vxfer, &v);
    }
    H5E_END_TRY;
    h5_cur = NULL;
    if (t->own_lock)
        pthread_mutex_unlock((pthread_mutex_t *)&t->vlock);
    int rc = CHUTE_OK;
    if (hr < 0 && dst.need > cap) {
        H5Eclear2(H5E_DEFAULT);
        *out_len = dst.need;
        rc = CH_ESMALL;
    } else if (hr < 0) {
        rc = ch_err(err, CHUTE_ECORRUPT, "%s: dataset \"%s\"[%llu]: %s", t->path, t->img.name,
                    (unsigned long long)i, h5_why(why));
    } else {
        *out_len = v.len;
    }
    if (fs >= 0)
        H5Sclose(fs);
    if (ms >= 0)
        H5Sclose(ms);
    return rc;
}

static int h5_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                   chute_error *err)
{
    const h5_impl *t = ds->impl;
    if (t->vlen)
        return vlen_read(t, i, buf, cap, out_len, err);
    uint64_t rec = H5_RAW_HDR + t->img.g.row_bytes;
    uint64_t need = rec + (t->img.chunks ? 64 + var_scratch(&t->img) : 0);
    if (need > cap) {
        *out_len = (size_t)need;
        return CH_ESMALL;
    }
    uint8_t *p = buf;
    memcpy(p, "CHRAW\1", 6);
    p[6] = (uint8_t)t->C;
    p[7] = 0;
    uint32_t w = t->W, h = t->H;
    memcpy(p + 8, &w, 4); /* little-endian hosts only, as the rest of chute */
    memcpy(p + 12, &h, 4);
    int rc = var_read(t, &t->img, i, p + H5_RAW_HDR, align64(p + rec), err);
    if (rc == CHUTE_OK)
        *out_len = (size_t)rec;
    return rc;
}

static int h5_read_fields(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                          size_t nreq, ch_buf *scratch, uint64_t max_bytes, chute_error *err)
{
    const h5_impl *t = ds->impl;
    uint64_t need = 64;
    for (size_t q = 0; q < nreq; q++)
        need = CH_MAX(need, 64 + var_scratch(&t->fields[req[q].field]));
    if (need > max_bytes || need > SIZE_MAX)
        return ch_err(err, CHUTE_ELIMIT, "%s: fields of sample %llu need %llu bytes of scratch, "
                      "over %llu", t->path, (unsigned long long)i, (unsigned long long)need,
                      (unsigned long long)max_bytes);
    if (ch_buf_reserve(scratch, (size_t)need) != CHUTE_OK)
        return ch_err(err, CHUTE_ENOMEM, "out of memory for %llu bytes of scratch",
                      (unsigned long long)need);
    for (size_t q = 0; q < nreq; q++) {
        const h5_var *v = &t->fields[req[q].field];
        int rc = var_read(t, v, i, req[q].dst, align64(scratch->data), err);
        if (rc != CHUTE_OK)
            return rc;
    }
    return CHUTE_OK;
}

static uint64_t h5_sample_size(const chute_dataset *ds, uint64_t i)
{
    const h5_impl *t = ds->impl;
    if (!t->vlen)
        return H5_RAW_HDR + t->img.g.row_bytes;
    hsize_t start = i, one = 1, size = 0;
    if (t->own_lock)
        pthread_mutex_lock((pthread_mutex_t *)&t->vlock);
    H5E_BEGIN_TRY
    {
        hid_t fs = H5Dget_space(t->vdset);
        if (fs >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL) >= 0 &&
            H5Dvlen_get_buf_size(t->vdset, t->vtype, fs, &size) < 0)
            size = 0;
        if (fs >= 0)
            H5Sclose(fs);
        H5Eclear2(H5E_DEFAULT);
    }
    H5E_END_TRY;
    if (t->own_lock)
        pthread_mutex_unlock((pthread_mutex_t *)&t->vlock);
    return size;
}

static void h5_describe(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    const h5_impl *t = ds->impl;
    snprintf(buf, n, "%s:%s[%llu]", t->path, t->img.name, (unsigned long long)i);
}

static void h5_file_of(const chute_dataset *ds, uint64_t i, char *buf, size_t n)
{
    (void)i;
    const h5_impl *t = ds->impl;
    snprintf(buf, n, "%s", t->path);
}

/* Unit for the shards shuffle mode: the row of image chunks (samples that
 * share chunks are read together), or runs of 1024 when not chunked. */
static uint64_t h5_unit_of(const chute_dataset *ds, uint64_t i)
{
    const h5_impl *t = ds->impl;
    return t->img.chunks ? i / t->img.g.cdims[0] : i / CH_UNIT_FALLBACK_SAMPLES;
}

static void var_free(h5_var *v)
{
    free(v->mem);
    free(v->chunks);
}

static void h5_close_impl(void *impl)
{
    h5_impl *t = impl;
    if (!t)
        return;
    if (t->vxfer >= 0)
        H5Pclose(t->vxfer);
    if (t->vtype >= 0)
        H5Tclose(t->vtype);
    if (t->vdset >= 0)
        H5Dclose(t->vdset);
    if (t->file >= 0)
        H5Fclose(t->file);
    H5Eclear2(H5E_DEFAULT);
    var_free(&t->img);
    for (uint32_t k = 0; t->fields && k < t->nvars; k++)
        var_free(&t->fields[k]);
    free(t->fields);
    for (int k = 0; t->slots && k < H5_SLOTS; k++)
        ch_h5_inflater_free(t->slots[k].inf);
    free(t->slots);
    if (t->h)
        t->src->close(t->h);
    free(t->path);
    pthread_mutex_destroy(&t->vlock);
    free(t);
}

const ch_format_ops ch_format_hdf5 = {
    .version = CH_FORMAT_OPS_VERSION,
    .name = "hdf5",
    .probe = h5_probe,
    .open = h5_open,
    .read = h5_read,
    .sample_size = h5_sample_size,
    .describe = h5_describe,
    .file_of = h5_file_of,
    .close = h5_close_impl,
    .unit_of = h5_unit_of,
    .read_fields = h5_read_fields,
};
