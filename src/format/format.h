/*
 * format.h — how samples are laid out on a source.
 *
 * A format turns a path into a list of samples (count, label, size) and
 * reads sample i's encoded bytes.  Formats plug in through ch_format_ops;
 * the pipeline only ever calls these functions and never asks which
 * format it has.
 *
 * The dataset object is immutable after open, so any number of worker
 * threads read from it concurrently without locks.  (One exception, safe
 * for threads: the cache of open files that the shard, TFRecord and
 * WebDataset formats share, which takes a lock only on a miss, and never
 * when every file fits — see fcache.h.)
 */
#ifndef CHUTE_FORMAT_H
#define CHUTE_FORMAT_H

#include "../common/checksum.h"
#include "../common/common.h"
#include "../io/io.h"
#include "../io/remote.h"
#include "fields.h"

#include <stdatomic.h>

#define CH_FORMAT_OPS_VERSION 3

struct ch_locator;
struct ch_sample_ctx;
struct ch_media_info;

/* How sure a probe is that a path holds its format (0 = not this one). */
enum {
    CH_PROBE_NO = 0,
    CH_PROBE_FALLBACK = 10,   /* "any directory": the image tree */
    CH_PROBE_LIKELY = 60,     /* names and a valid first header */
    CH_PROBE_CERTAIN = 100    /* a marker file only this format writes */
};

/*
 * The contract a format fulfils (docs/DESIGN.md, "Adding a format"):
 *   probe  looks at a path (is_dir: what stat said) through the source that
 *          will serve the dataset, and returns how sure it is, CH_PROBE_*;
 *          it reads at most a few headers, never the data, and on 0 may
 *          write why into why[n] for the "nothing matched" message.  It has
 *          no side effects.
 * Every read-side access to the files (stat, listing, opening, reading)
 * goes through the source (ds->src, or the probe's src), never the file
 * system directly: an S3 or HTTP source then serves every format
 * unchanged.  Only writers of local files (pack, saved indexes) use the
 * file system.
 *   open   fills ds->impl, n, labels (n of them, each 0 <= l < nclasses),
 *          nclasses and class_names (synthesise "0".."N-1" when the files
 *          carry none).  ds->fmt, ds->src and ds->root are set before it is
 *          called; on failure it leaves what it allocated in ds for
 *          ch_dataset_free_fields (which calls close(impl)).
 *   read   is called from many threads at once: no locks or allocation in
 *          the steady state; a damaged sample is CHUTE_ECORRUPT with a
 *          message that begins with the file (and @offset) and names the
 *          sample, storage failures are CHUTE_EIO.
 * The registry (registry.c) is the one list of formats; nothing outside a
 * format's own file asks which format a dataset has.
 */
typedef struct ch_format_ops {
    uint32_t version;
    const char *name;
    int (*probe)(const ch_source_ops *src, const char *path, int is_dir, char *why, size_t n);
    int (*open)(chute_dataset *ds, const char *path, const chute_dataset_options *opt,
                chute_error *err);
    /* Read sample i into buf.  If cap is too small: CH_ESMALL, *out_len = need. */
    int (*read)(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
                chute_error *err);
    uint64_t (*sample_size)(const chute_dataset *ds, uint64_t i);
    void (*describe)(const chute_dataset *ds, uint64_t i, char *buf, size_t n);
    /* Path of the file that holds sample i (for cache control). */
    void (*file_of)(const chute_dataset *ds, uint64_t i, char *buf, size_t n);
    void (*close)(void *impl);
    /* Optional (NULL: none): entries the listing left out; see
     * chute_dataset_skipped. */
    uint64_t (*skipped)(const chute_dataset *ds, uint64_t k, char *buf, size_t n);
    /* Optional (NULL: fixed runs of CH_UNIT_FALLBACK_SAMPLES consecutive
     * samples, e.g. the image tree): the unit that holds sample i, i.e.
     * the file read front to back (a shard, a TFRecord file, a tar).  Used
     * by the shards shuffle mode (src/pipeline/sampler.h); units should be
     * runs of consecutive ids (a unit that reappears later just counts as
     * another run).  Called from one thread at loader create; no I/O. */
    uint64_t (*unit_of)(const chute_dataset *ds, uint64_t i);
    /* Version 3, optional (NULL: the format has no typed fields).  Read the
     * nreq fields req[] of sample i into the caller's buffers (fields.h:
     * a fixed field gets exactly ch_field_sample_bytes bytes, a bytes field
     * at most req->cap and its length).  open() has filled ds->fields and
     * ds->nfields.  Same threading and error contract as read; a missing
     * field or one whose value disagrees with ds->fields is CHUTE_ECORRUPT,
     * a bytes value over cap CHUTE_ELIMIT, both naming file and sample.
     * scratch is the calling worker's growable buffer, never grown past
     * max_bytes. */
    int (*read_fields)(const chute_dataset *ds, uint64_t i, const ch_field_req *req, size_t nreq,
                       ch_buf *scratch, uint64_t max_bytes, chute_error *err);
    /* --- read-ahead (src/pipeline/readahead.c), optional: NULL in locate
     * means the format gets no read-ahead and workers read as always. ---
     * locate: where sample i's bytes are, without reading them: fills
     *   *out (ch_locator below) and returns CHUTE_OK, or CH_LOC_NONE when
     *   this sample has no plain byte range (a sample already known to be
     *   bad: the worker's own read reports why), or an error (opening a
     *   file).  Called from the read-ahead threads, concurrently.
     * unlocate (may be NULL): give back what locate took (a pinned handle).
     * from_bytes: the sample's bytes out of the located range raw[len]
     *   (exactly what the source returned), checked as read() checks them
     *   (CRC, framing), with the same messages: *out points into raw (no
     *   copy).  Called from workers, concurrently.  With these, reading the
     *   locator's range and calling from_bytes is read() split in two. */
    int (*locate)(const chute_dataset *ds, uint64_t i, struct ch_locator *out, chute_error *err);
    void (*unlocate)(const chute_dataset *ds, struct ch_locator *loc);
    int (*from_bytes)(const chute_dataset *ds, uint64_t i, const uint8_t *raw, size_t len,
                      const uint8_t **out, size_t *out_len, chute_error *err);
    /* Optional (NULL: the loader calls read_fields): read_fields with the
     * loader's per-sample context, for formats whose fields are transformed
     * per epoch (the WAV format's random crop).  Same contract as
     * read_fields; a format that has it keeps read_fields too (meaning
     * CHUTE_TRANSFORM_EVAL) for callers without a loader. */
    int (*read_fields_ctx)(const chute_dataset *ds, uint64_t i, const ch_field_req *req,
                           size_t nreq, const struct ch_sample_ctx *ctx, ch_buf *scratch,
                           uint64_t max_bytes, chute_error *err);
    /* Optional (NULL: none): sample i's media properties from its header
     * alone (audio: frames, rate, channels), for `chute inspect`.  Same
     * threading and error contract as read. */
    int (*media_info)(const chute_dataset *ds, uint64_t i, struct ch_media_info *out,
                      chute_error *err);
    /* Optional (NULL: the format carries no targets): sample i's target
     * record (src/parse/targets.h), unchecked bytes valid while the dataset
     * is open; *len 0 when the sample has none.  Any thread; no I/O. */
    int (*targets)(const chute_dataset *ds, uint64_t i, const uint8_t **rec, size_t *len,
                   char *what, size_t whatsz, chute_error *err);
    /* Optional (NULL: none): free the per-worker state read_fields_ctx
     * keeps in *ctx->state (decoder contexts, the video format); the
     * loader calls it once per worker when it is destroyed. */
    void (*state_free)(void *state);
} ch_format_ops;

/* What media_info reports. */
typedef struct ch_media_info {
    uint64_t frames;          /* audio frames (samples per channel) */
    uint32_t rate;            /* frames per second */
    uint32_t channels;
} ch_media_info;

/* What the loader knows about the sample being made (read_fields_ctx):
 * everything random must come from ch_rng_for(seed, epoch, sample id). */
typedef struct ch_sample_ctx {
    uint64_t seed, epoch;
    int transform;            /* chute_transform */
    /* The calling worker's slot for the format's own state (NULL: none;
     * the format then makes and frees a temporary), freed by state_free. */
    void **state;
} ch_sample_ctx;

/* Where a sample's bytes live (see locate above).  h is the source's handle
 * for the file (valid until unlocate), or NULL: then the range is the whole
 * file at `path` (len CH_LOC_WHOLE), read with the source's read_file.
 * `file` numbers the format's files (neighbours: same file, adjacent
 * ranges); `pin` and `path_buf` are the format's. */
#define CH_LOC_NONE 101
#define CH_LOC_WHOLE UINT64_MAX
#define CH_LOC_PATH 4096
typedef struct ch_locator {
    void *h;
    const char *path;         /* for messages; the file when h is NULL */
    uint64_t off, len;
    uint64_t file;
    uint32_t pin;
    char path_buf[CH_LOC_PATH];
} ch_locator;

struct chute_dataset {
    const ch_format_ops *fmt;
    const ch_source_ops *src;
    void *impl;
    char *root;
    uint64_t n;
    int32_t *labels;          /* n labels */
    uint32_t nclasses;
    char **class_names;       /* nclasses NUL-terminated names */
    uint32_t read_delay_us;   /* injected latency per read (tests, what-if runs) */
    /* Injected read failures (tests): the first inject_left reads of
     * inject_sample fail with inject_status.  The one mutable field of an
     * otherwise immutable dataset, hence atomic. */
    _Atomic uint32_t inject_left;
    int inject_status;
    uint64_t inject_sample;
    /* Typed fields (fields.h), filled by open; malloc'd, freed with the
     * dataset.  Immutable after open. */
    ch_field *fields;
    uint32_t nfields;
    /* The cache tier wrapping the source (cache_dir set), else NULL;
     * ds->src is then its ops.  Destroyed after the format closes. */
    struct ch_cache *cache;
    /* Set by open when samples carry no image (fields and label only):
     * the loader then skips read/decode/transform (chute_dataset_has_images). */
    int no_image;
    /* s3:// and http(s)://: the source's table with self = &remote_aio,
     * so its read-ahead engines use the dataset's coalesce_gap_bytes
     * (ch_remote_tuned, src/io/remote.h); ds->src points here (or at the
     * cache wrapping it). */
    ch_source_ops remote_src;
    ch_remote_aio_opts remote_aio;
    /* A stream (`pipe:COMMAND`, `-`; fmt_stream.c): what to read, else
     * NULL.  n is 0 and the loader takes its samples through
     * src/pipeline/stream.h instead of read(). */
    const struct ch_stream_spec *stream;
    /* chute_dataset_options.direct_io: the read-ahead may use O_DIRECT. */
    int direct_io;
};

/* The index of field `name` in ds->fields, or -1. */
int ch_ds_field_find(const chute_dataset *ds, const char *name);
/* Append a field to ds->fields (name copied; kind/dtype as given, shape
 * unknown unless ndim is set later): its index, or -1 when the name is too
 * long, CH_FIELD_MAX is reached, or memory ran out (err says which). */
int ch_ds_field_add(chute_dataset *ds, const char *name, size_t name_len, int kind, int dtype,
                    chute_error *err);

/* Read sample i through the format, adding the injected delay if any.
 * Same contract as ch_format_ops.read. */
int ch_ds_read(const chute_dataset *ds, uint64_t i, void *buf, size_t cap, size_t *out_len,
               chute_error *err);

/* Read sample i into a worker's growable buffer: grows it when the sample
 * is larger, but never past max_bytes (CHUTE_ELIMIT then, whatever the
 * buffer has already grown to).  *out_len gets the sample's size. */
int ch_ds_read_buf(const chute_dataset *ds, uint64_t i, ch_buf *buf, uint64_t max_bytes,
                   size_t *out_len, chute_error *err);

/* The message for a failure on sample i, into out[n]: "<where>: <reason>"
 * with where = describe(i), or the reason alone when it already begins
 * with the sample's file (read errors name it: they come from the layer
 * that has the path), so no message says "p: p: cannot open".  Long
 * messages lose their middle, not the reason (ch_str_fit). */
void ch_ds_failure_message(const chute_dataset *ds, uint64_t i, const char *reason, char *out,
                           size_t n);

/* Evict sample i's bytes from the page cache (posix_fadvise DONTNEED on
 * its file, or on the whole shard that holds it).  Best effort. */
void ch_ds_drop_cache(const chute_dataset *ds, uint64_t i);

/* The registry (registry.c): every format, NULL-terminated, in the order
 * probes run and names are listed. */
extern const ch_format_ops *const ch_formats[];
extern const ch_format_ops ch_format_tree, ch_format_shards, ch_format_tfrecord, ch_format_wds;
extern const ch_format_ops ch_format_npy, ch_format_csv;
extern const ch_format_ops ch_format_hdf5; /* only with CHUTE_HAVE_HDF5 */
extern const ch_format_ops ch_format_wav;
#ifdef CHUTE_HAVE_FFMPEG
extern const ch_format_ops ch_format_video;
#endif
/* Opened only by chute_dataset_open_arrow (fmt_arrow.c), so not in ch_formats. */
extern const ch_format_ops ch_format_arrow;
/* The registered format called name, or NULL. */
const ch_format_ops *ch_format_find(const char *name);

void ch_dataset_free_fields(chute_dataset *ds);

/* Units for the shards shuffle mode (units.c): runs of consecutive samples
 * with the same fmt->unit_of, or fixed runs of CH_UNIT_FALLBACK_SAMPLES
 * when the format has no unit_of (1024: an image tree lists a class's
 * files together, so a run is mostly one class, the worst case for mixing
 * and the case bench/mixing.py measures).  *out_first (malloc'd, free())
 * gets *out_n + 1 entries: unit u is [first[u], first[u+1]). */
#define CH_UNIT_FALLBACK_SAMPLES 1024u
int ch_ds_units(const chute_dataset *ds, uint64_t **out_first, uint64_t *out_n,
                chute_error *err);
/* chute_dataset_open_ex through a given source instead of the one
 * ch_source_for(path) picks: for tests that wrap a source (to count or
 * refuse accesses) without any global registration. */
int ch_dataset_open_src(const ch_source_ops *src, const char *path,
                        const chute_dataset_options *opt, chute_dataset **out_ds,
                        chute_error *err);

/* Helpers for formats made of many files in one directory (tfrecord, wds):
 * the names in dir for which keep(name) is true, sorted bytewise, as
 * "dir/name" paths (malloc'd array of malloc'd strings; free with
 * ch_path_list_free).  A path that is a regular file is a list of one.
 * Returns CHUTE_OK with *out_n = 0 when none matched. */
int ch_path_list(const ch_source_ops *src, const char *path, int (*keep)(const char *name),
                 char ***out, size_t *out_n, chute_error *err);
void ch_path_list_free(char **v, size_t n);
/* For a format's probe of a directory: the first entry (listing order)
 * of dir for which match(name) is true, else the first one inside dir's
 * smallest-named subdirectory (an ImageFolder-style class), as "dir/name"
 * into out[cap] (out[0] == 0 when there is none).  Names starting with '.'
 * are never matched.  Not an error when nothing matches; an error only
 * when dir itself cannot be listed. */
int ch_probe_first(const ch_source_ops *src, const char *dir, int (*match)(const char *name),
                   char *out, size_t cap, chute_error *err);
/* A format's data files: a path, and the source's handle once opened. */
typedef struct ch_ds_file {
    char *path;
    void *h;
} ch_ds_file;
/* ch_path_list into an array of files (handles NULL); none matching is
 * CHUTE_ENOTFOUND "PATH: no WHAT".  Free with ch_ds_files_close. */
int ch_ds_files_list(const ch_source_ops *src, const char *path, int (*keep)(const char *name),
                     const char *what, ch_ds_file **out, size_t *out_n, chute_error *err);
/* Close the open handles through src and free the paths and the array. */
void ch_ds_files_close(const ch_source_ops *src, ch_ds_file *files, size_t n);
/* Synthesised class names "0".."n-1" into ds (n <= CH_MAX_SYNTH_CLASSES). */
#define CH_MAX_SYNTH_CLASSES (1u << 24)
int ch_ds_synth_classes(chute_dataset *ds, uint32_t n, chute_error *err);
/* Apply opt->label_offset to a label read from a file and check it: a
 * label must end up in [0, CH_MAX_SYNTH_CLASSES).  `where` names the
 * record for the message. */
int ch_ds_label(int64_t raw, const chute_dataset_options *opt, const char *where, int32_t *out,
                chute_error *err);

/* The names a label is looked for under when label_key is not given, in
 * this order (issues 22.2, 31.2: none found is an error naming them, never
 * labels of 0 without a word; label_key "" says "no labels").  Columns of a
 * table (CSV header, any case; Parquet/Arrow) and arrays (HDF5 datasets,
 * NAME.npy beside a .npy) follow what their users name them. */
#define CH_LABEL_NAMES_N 5
extern const char *const ch_label_columns[CH_LABEL_NAMES_N];
extern const char *const ch_label_arrays[CH_LABEL_NAMES_N];
/* names[] as text for a message, each followed by `suffix` and the last
 * after `last` (" or ", ", "): "labels.npy, label.npy, ... or y.npy". */
const char *ch_label_names_text(const char *const *names, const char *suffix, const char *last,
                                char *buf, size_t n);

/* Tree listing shared by the tree format and pack: classes sorted by name,
 * files in os.walk order (sorted dirs, sorted names), torchvision's image
 * extensions, all in Python's order (tree.c).  Paths are relative to root.
 * Image-named entries that are not regular files are left out and listed
 * in `skipped` (the first 1000 by name, all counted in nskipped). */
typedef struct ch_tree_list {
    uint64_t n;
    char **paths;             /* relative "class/sub/file.jpg" */
    int32_t *labels;
    uint32_t nclasses;
    char **class_names;
    uint64_t nskipped;        /* entries left out */
    struct ch_tree_skip {
        char *rel;            /* relative path */
        const char *why;      /* static text: "a FIFO", ... */
    } *skipped;               /* nskipped_named of them, in listing order */
    size_t nskipped_named, cap_skipped;
} ch_tree_list;
int ch_tree_list_build(const ch_source_ops *src, const char *root, ch_tree_list *out,
                       chute_error *err);
/* The same listing for files other than images (the WAV format's .wav):
 * keep(name) says which names are samples, exts_text names them in the
 * "class directory has no ... files" message.  Entries keep() refuses are
 * ignored; ones it accepts that are not regular files go to `skipped`. */
int ch_tree_list_build_ext(const ch_source_ops *src, const char *root,
                           int (*keep)(const char *name), const char *exts_text,
                           ch_tree_list *out, chute_error *err);
void ch_tree_list_free(ch_tree_list *l);

/* ---- chute shard format (docs/FORMAT.md) ---- */
#define CH_SHARD_MAGIC "CHUTESHD"
#define CH_TRAILER_MAGIC "CHUTEIDX"
#define CH_SHARD_VERSION_MAJOR 1
#define CH_SHARD_VERSION_MINOR 0
#define CH_SHARD_HEADER_BYTES 64
#define CH_SHARD_TRAILER_BYTES 64
#define CH_SHARD_ENTRY_BYTES 32
#define CH_MANIFEST_NAME "chute.manifest"

enum { CH_KIND_UNKNOWN = 0, CH_KIND_JPEG = 1, CH_KIND_PNG = 2 };

typedef struct ch_shard_entry {
    uint64_t offset;
    uint32_t length;
    uint32_t crc32;
    int32_t label;
    uint32_t kind;
} ch_shard_entry;

/* Parsed shard: entries, class names and per-sample origin names. */
typedef struct ch_shard_index {
    uint64_t count;
    ch_shard_entry *entries;
    uint32_t nclasses;
    char **class_names;
    char **names;             /* original relative paths (may be NULL entries) */
    uint32_t align;
    uint64_t file_size;
    /* Target records (NULL: the shard has none): sample i's is
     * tg[tg_off[i] .. tg_off[i + 1]), empty for a sample without targets. */
    uint8_t *tg;
    uint64_t *tg_off;
    uint64_t tg_base;         /* file offset of the table's first record (messages) */
} ch_shard_index;

int ch_shard_read_index(const ch_source_ops *src, void *h, const char *path, uint64_t file_size,
                        ch_shard_index *out, chute_error *err);
void ch_shard_index_free(ch_shard_index *ix);

/* Writer: append records, then finish (index + trailer + fsync + rename). */
typedef struct ch_shard_writer ch_shard_writer;
int ch_shard_writer_open(const char *final_path, uint32_t align, uint32_t nclasses,
                         char *const *class_names, ch_shard_writer **out, chute_error *err);
int ch_shard_writer_add(ch_shard_writer *w, const void *data, uint32_t len, int32_t label,
                        uint32_t kind, const char *name, chute_error *err);
/* The last added sample's target record (src/parse/targets.h), stored in
 * the index's targets table; samples without one get an empty entry. */
#define CH_SHARD_TARGETS_MAGIC "TGTS"
int ch_shard_writer_set_targets(ch_shard_writer *w, const void *rec, size_t len, chute_error *err);
uint64_t ch_shard_writer_bytes(const ch_shard_writer *w);
uint64_t ch_shard_writer_count(const ch_shard_writer *w);
int ch_shard_writer_finish(ch_shard_writer *w, chute_error *err);
void ch_shard_writer_abort(ch_shard_writer *w);

/* ch_crc32 (shards' checksum) is in common/checksum.h. */

/* Manifest ("chute.manifest", docs/FORMAT.md), parsed from memory so the
 * parser can be fuzzed without files.  Numbers are plain decimal digits
 * (no sign, no leading zeros, no overflow); names are bare file names in
 * the dataset's directory; a name listed twice is an error.  `path` is for
 * messages ("PATH:LINE: reason"). */
#define CH_MANIFEST_MAX_BYTES (256u << 20)
#define CH_MANIFEST_MAX_SHARDS (1u << 24)
typedef struct ch_manifest_shard {
    char *name;
    uint64_t samples;         /* as listed; checked against the shard's index */
    uint64_t bytes;           /* as listed; checked against the file's size */
    uint32_t line;
} ch_manifest_shard;
typedef struct ch_manifest {
    uint32_t nshards;
    ch_manifest_shard *shards;
    uint64_t total;           /* sum of samples, overflow-checked */
    /* Version 2 (docs/FORMAT.md): the optional "pack" line, how pack
     * transformed the images; all 0 in a version-1 manifest. */
    uint32_t version;
    uint32_t max_side, quality;
    int raw;
} ch_manifest;
int ch_manifest_parse(const char *path, const char *text, size_t len, ch_manifest *out,
                      chute_error *err);
void ch_manifest_free(ch_manifest *m);
/* A name a manifest may list: 1..255 bytes, no '/', no leading '.', no
 * control bytes. */
int ch_shard_name_ok(const char *name, size_t len);

/* The shard directory's open-file cache (fcache.h; tests, diagnostics).  Handles
 * are opened lazily and at most `capacity` stay open (half the soft
 * RLIMIT_NOFILE when the dataset was opened, 16..65536).  When every shard
 * fits, `evicting` is 0 and reads take no lock; `misses` counts reads that
 * went through the cache's lock. */
typedef struct ch_shard_cache_stats {
    uint32_t capacity;
    uint32_t open_now;
    int evicting;
    uint64_t misses, opens, evictions, transient;
} ch_shard_cache_stats;
int ch_shards_cache_stats(const chute_dataset *ds, ch_shard_cache_stats *out);

/* What a file name in a shard directory is to pack: one of its shards
 * ("shard-N.chute", N in *out_index), one of its temporaries (a shard or
 * manifest being written), or anything else. */
enum { CH_PACKFILE_OTHER = 0, CH_PACKFILE_SHARD = 1, CH_PACKFILE_TEMP = 2 };
int ch_packfile_kind(const char *name, unsigned *out_index);

/* Streams (fmt_stream.c): whether a path names one ("pipe:..." or "-"),
 * and opening it (nothing runs until a loader starts an epoch). */
extern const ch_format_ops ch_format_stream;
int ch_stream_path(const char *path);
int ch_stream_dataset_open(const char *path, const chute_dataset_options *opt,
                           chute_dataset **out_ds, chute_error *err);

#endif
