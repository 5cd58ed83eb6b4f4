/*
 * chute.h — the one public header of libchute.
 *
 * libchute turns a dataset on disk (an ImageFolder tree or a directory of
 * packed chute shards) into a stream of training batches:
 *
 *   sampler -> reader -> decoder -> fused transform -> batch ring -> consumer
 *
 * Conventions
 *   - Every fallible call returns a chute_status (CHUTE_OK == 0).
 *   - Create calls take an optional chute_error* that receives a readable
 *     message (with file and offset where there is one) when they fail.
 *     Calls on a handle keep their last message: chute_loader_errmsg().
 *   - Options structs are zero-initialised by the caller; zero means
 *     "default".  New fields are only ever appended.
 *   - Handles are opaque; every create has a destroy, and destroy accepts
 *     NULL.  Memory the library hands out (batches) goes back through a
 *     library call (chute_batch_release).
 *   - Thread-safety is stated per call.  Unless stated, a handle may be used
 *     from one thread at a time.
 *   - The library never calls exit() or abort(), installs no signal handler
 *     and keeps no global mutable state.
 */
#ifndef CHUTE_H
#define CHUTE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHUTE_VERSION_MAJOR 0
#define CHUTE_VERSION_MINOR 1
#define CHUTE_VERSION_PATCH 0
#define CHUTE_VERSION_NUMBER \
    (CHUTE_VERSION_MAJOR * 10000 + CHUTE_VERSION_MINOR * 100 + CHUTE_VERSION_PATCH)

#if defined(__GNUC__)
#define CHUTE_API __attribute__((visibility("default")))
#else
#define CHUTE_API
#endif

/* Runtime version string ("0.1.0") and number (CHUTE_VERSION_NUMBER). */
CHUTE_API const char *chute_version(void);
CHUTE_API int chute_version_number(void);

/* The optional features compiled into this libchute, as space-separated
 * names: "jpeg" (always), "png" (built with libspng; without it PNG samples
 * fail with CHUTE_EUNSUPPORTED), "cuda" (the CUDA module libchute_cuda.so
 * was built beside it; using it still needs the driver and a device, see
 * chute_loader_options.device), "s3 http" (libcurl), "hdf5" (libhdf5),
 * "kafka" (librdkafka), "libdeflate" (gzip HDF5 chunks and PNG checksums
 * through libdeflate; without it zlib: the same bytes, more CPU), "coco"
 * (COCO annotation JSON through libjansson).  A static string; any thread. */
CHUTE_API const char *chute_features(void);

/* ------------------------------------------------------------------ */
/* Status codes                                                        */
/* ------------------------------------------------------------------ */
typedef enum chute_status {
    CHUTE_OK = 0,
    CHUTE_END = 1,          /* no more batches in this epoch (not an error) */
    CHUTE_EINVAL = -1,      /* bad argument or option */
    CHUTE_ENOMEM = -2,      /* allocation failed or memory budget exceeded */
    CHUTE_EIO = -3,         /* open/read/write failed (errno in message) */
    CHUTE_EFORMAT = -4,     /* not a dataset/shard/image chute understands */
    CHUTE_ECORRUPT = -5,    /* recognised format but damaged data */
    CHUTE_ELIMIT = -6,      /* input exceeds a configured limit */
    CHUTE_ENOTFOUND = -7,   /* path does not exist / dataset is empty */
    CHUTE_EBUSY = -8,       /* every batch buffer is held by the consumer */
    CHUTE_EUNSUPPORTED = -9,/* feature not built in (e.g. no PNG library) */
    CHUTE_EINTERRUPTED = -10/* a cancel request stopped the call */
} chute_status;

/* Static name of a status ("CHUTE_ECORRUPT"); never NULL. */
CHUTE_API const char *chute_status_name(int status);

/* Filled by create calls that fail.  `message` is always NUL-terminated. */
typedef struct chute_error {
    int code;
    char message[512];
} chute_error;

/* ------------------------------------------------------------------ */
/* Dataset: an opened source (tree or shard directory).                 */
/* ------------------------------------------------------------------ */
typedef struct chute_dataset chute_dataset;

typedef enum chute_source_kind {
    CHUTE_SOURCE_AUTO = 0,   /* detect: a directory with chute.manifest is shards */
    CHUTE_SOURCE_TREE = 1,   /* ImageFolder: ROOT/<class>/<file> */
    CHUTE_SOURCE_SHARDS = 2  /* a directory written by chute_pack */
} chute_source_kind;

/* Open a dataset.  The returned handle is immutable and may be shared by
 * any number of threads and loaders; destroy it after them.             */
CHUTE_API int chute_dataset_open(const char *path, chute_source_kind kind,
                                 chute_dataset **out_ds, chute_error *err);

/* Zero means default for every field. */
typedef struct chute_dataset_options {
    chute_source_kind kind;   /* default AUTO */
    uint32_t read_delay_us;   /* add this latency to every sample read: for tests and
                                 "what if my storage were slower" runs; default 0 */
    /* Fault injection, for tests only (like read_delay_us): the first
     * inject_fail_reads reads of sample inject_fail_sample fail with status
     * inject_fail_status (0 = CHUTE_EIO; CHUTE_ENOMEM, CHUTE_ECORRUPT,
     * CHUTE_ELIMIT, ... are accepted) and a message naming the sample.
     * inject_fail_reads = 0 (the default) injects nothing.  The count is
     * per dataset, shared by every loader and thread reading it. */
    uint32_t inject_fail_reads;
    int32_t inject_fail_status;
    uint64_t inject_fail_sample;
    /* The format by its registered name ("tree", "shards", "tfrecord",
     * "wds"; see chute_format_name), or NULL to probe the path: the format
     * most sure of it wins; none, or two equally sure, is CHUTE_EFORMAT
     * with a message listing what each said.  A name and a kind other than
     * AUTO must agree. */
    const char *format;
    /* Added to every label read from the files (TFRecord, WebDataset):
     * imagenet_to_gcs.py writes ImageNet labels 1..1000, so label_offset =
     * -1 gives torchvision's 0..999.  A label still negative after it is
     * an error at open naming the record.  Default 0. */
    int32_t label_offset;
    /* TFRecord feature keys (NULL: imagenet_to_gcs.py's "image/encoded"
     * and "image/class/label"). */
    const char *image_key;
    const char *label_key;
    /* TFRecord: extra feature keys delivered as typed fields, comma-
     * separated ("bbox,weights,mask.npy"), NULL for none.  An int64_list
     * becomes an int64 field, a float_list a float32 field, each a fixed-
     * length list (length from the first record that has the key); a
     * bytes_list (one value) a bytes field, or a tensor field parsed as
     * .npy when the key ends in ".npy".  See chute_dataset_field_info.
     * Streams (pipe:COMMAND, -, kafka://) with format "tfrecord": every record
     * is a tf.train.Example (pipe:/-: a TFRecord file's bytes, CRCs checked;
     * Kafka: one Example per message value, TFRecord-framed or bare as
     * SerializeToString() gives it), and since a stream has no first record to
     * learn from at open, each key declares its type: "NAME:int64",
     * "NAME:float32[4]", "NAME:bytes", "NAME.npy:uint8[4x4]" (a .npy tensor's
     * dtype and shape).  A record lacking a declared key, or with a damaged
     * value, is corrupt content (the loader's on_corrupt policy); one whose
     * value has another shape or dtype than declared is CHUTE_EINVAL from
     * chute_loader_next whatever the policy (see `fields` below).
     * pipe:COMMAND and - carrying a WebDataset
     * tar (format unset or "wds") declare members the same way, named and
     * typed as the "wds" format names them: "cls:int64", "NAME:bytes" (.json,
     * .txt, ...), "NAME.npy:DTYPE[DIMS]" or "npy:DTYPE[DIMS]"; a sample
     * lacking a declared member or holding it twice is corrupt content too,
     * a .npy of another shape CHUTE_EINVAL. */
    const char *extra_keys;
    /* Where TFRecord indexes are saved when the data's own directory is
     * not writable (or not local): the first open of a TFRecord file
     * reads every record to learn the labels and saves an index
     * ("F.chuteidx": offsets, lengths, labels, the file's size and mtime)
     * beside the data, else here; later opens read only that, and rebuild
     * it if the data changed or the index is damaged.  NULL: the default,
     * $XDG_CACHE_HOME/chute or ~/.cache/chute; "": beside the data only.
     * Borrowed during chute_dataset_open_ex only. */
    const char *index_dir;
    /* Node-local cache tier (src/io/cache.c): when cache_dir is set, every
     * byte the format reads goes through a cache of cache_block_bytes
     * blocks (0 = 8 MiB; 4 KiB..1 GiB) kept in cache_dir (created if
     * missing), within cache_bytes of disk (0 = 10 GiB), evicted least
     * recently used first.  Every process on the node may share one
     * cache_dir: each block is fetched once per node, files appear whole
     * (temporary name + rename) and are checksum-verified before use; a
     * damaged one is refetched.  A full or vanished cache_dir falls back
     * to reading the origin, never failing a read.  NULL = no cache. */
    const char *cache_dir;
    uint64_t cache_bytes;
    uint64_t cache_block_bytes;
    /* CSV (format "csv"): the typed columns, comma-separated
     * "NAME:TYPE[=DEFAULT]" with TYPE int64, float32 or category (strings
     * numbered 0.. in sorted order of the values the files hold, as
     * pandas' astype("category").cat.codes), each a scalar field of that
     * name (category: int64).  DEFAULT fills an empty cell; without one an
     * empty cell is a malformed row.  With a header, names pick columns by
     * name and other columns are ignored; without one (csv_no_header),
     * the schema lists every column in order (TYPE "skip" ignores one).
     * NULL: every column but the label's is float32.  label_key names the
     * label column (integers, or strings numbered as a category); none
     * gives label 0.  Also label_key for format "npy": the labels array. */
    const char *schema;
    int32_t csv_no_header;    /* 1: the first row is data, not a header */
    /* HDF5 (format "hdf5", present when libhdf5 was found at build time:
     * chute_features() lists "hdf5"; without it an HDF5 file is
     * CHUTE_EUNSUPPORTED): one .h5 file.  image_key names the images
     * dataset (default "images": N x H x W x C or N x H x W uint8 pixels,
     * or 1-D variable-length uint8 encoded images), label_key the labels
     * (default "labels", N integers; absent under the default name: all
     * 0), extra_keys further datasets of N rows delivered as fields of the
     * row's shape and dtype.  Reads are thread-safe and take no HDF5 lock
     * except for variable-length images (docs/DESIGN.md, "HDF5"). */
    /* s3:// and http(s):// datasets, read ahead asynchronously: reads of
     * one object in flight together whose byte ranges lie at most this
     * many bytes apart are fetched by one ranged GET (at most 8 MiB), the
     * bytes between them dropped.  0 = 64 KiB; at most 8 MiB. */
    uint64_t coalesce_gap_bytes;
    /* WAV (format "wav": a directory of .wav files, flat (label 0) or in
     * ImageFolder-style class directories).  Samples have no image; the
     * fields are "audio" (float32, (audio_samples, channels), or
     * (channels, audio_samples) with audio_channels_first, values as
     * soundfile.read(dtype="float32")) and "length" (int32: the real
     * frames in it; the rest is zeros).  The loader's transform picks the
     * window: train a random one from (seed, epoch, sample), eval the
     * centre, none the start; a shorter file is padded at the end.
     * audio_samples: frames per sample (0: the first file's length).
     * audio_rate: the sample rate every file must have (0: the first
     * file's); a file with another rate is CHUTE_EINVAL naming it and both
     * rates (chute never resamples). */
    uint32_t audio_samples;
    uint32_t audio_rate;
    uint32_t audio_channels_first; /* 1: (channels, frames) */
    /* 1: the loader's read-ahead (readahead > 0) reads local records that
     * start on a 4 KiB boundary (chute shards packed with the default
     * alignment) through O_DIRECT, bypassing the page cache: the aligned
     * range enclosing the record goes straight into the read-ahead's
     * buffer and the sample is its first bytes (no copy).  Needs the
     * io_uring engine; where the filesystem refuses O_DIRECT, or a record
     * is not aligned, the read is an ordinary one.  0 (default): never. */
    uint32_t direct_io;
    /* RAM tier of the cache (src/io/cache.c): up to cache_ram_bytes of
     * whole cache_block_bytes blocks kept in this process's memory, least
     * recently used evicted, consulted before cache_dir's disk tier; with
     * no cache_dir it is the only tier (a remote dataset's second epoch
     * then comes from memory).  Per dataset handle, not shared between
     * processes.  0 = none. */
    uint64_t cache_ram_bytes;
    /* Video (format "video", present when built with FFmpeg's libraries:
     * chute_features() lists "video"): a video file, a directory of them
     * (one class) or ImageFolder-style class directories of them
     * (Kinetics/UCF).  A sample is one clip: clips_per_video samples per
     * video.  Fields "video" (uint8, (frames_per_clip, 3, H, W), RGB as
     * `ffmpeg -pix_fmt rgb24` converts) and "frames" (int64, the
     * presentation index of each frame delivered).  A keyframe index is
     * built on a video's first read and saved beside it ("F.chutevix") or
     * in index_dir.  Zero means the default docs/OPTIONS.md lists. */
    uint32_t video_size;      /* 0: native size */
    uint32_t frames_per_clip;
    uint32_t clips_per_video;
    int clip_sampler;         /* chute_clip_sampler */
    uint32_t num_indices_between_frames;
    uint32_t ms_between_frames; /* nonzero: clips by presentation time */
    uint32_t sampling_range_start;
    uint32_t sampling_range_end;
    uint32_t video_max_side;
    uint64_t video_max_decoded_bytes;
} chute_dataset_options;

/* chute_dataset_options.clip_sampler (the video format). */
typedef enum chute_clip_sampler {
    CHUTE_CLIP_RANDOM = 0,    /* starts from (seed, epoch, sample) */
    CHUTE_CLIP_REGULAR = 1    /* clips_per_video starts evenly spaced */
} chute_clip_sampler;

/* chute_dataset_open with options. */
CHUTE_API int chute_dataset_open_ex(const char *path, const chute_dataset_options *opt,
                                    chute_dataset **out_ds, chute_error *err);
CHUTE_API void chute_dataset_close(chute_dataset *ds);

CHUTE_API uint64_t chute_dataset_size(const chute_dataset *ds);
CHUTE_API uint32_t chute_dataset_num_classes(const chute_dataset *ds);
/* Class name for a label, borrowed from the dataset; NULL if out of range. */
CHUTE_API const char *chute_dataset_class_name(const chute_dataset *ds, uint32_t label);
/* AUTO for formats other than the tree and shards (kept for ABI
 * compatibility; prefer chute_dataset_format_name). */
CHUTE_API chute_source_kind chute_dataset_kind(const chute_dataset *ds);
/* The registered name of the dataset's format ("tree", "shards",
 * "tfrecord", "wds"); static storage.  NULL for a NULL dataset. */
CHUTE_API const char *chute_dataset_format_name(const chute_dataset *ds);
/* The k-th registered format's name (k from 0), NULL past the last. */
CHUTE_API const char *chute_format_name(uint32_t k);
/* Label of sample i (the torchvision convention: classes sorted by name). */
CHUTE_API int64_t chute_dataset_label(const chute_dataset *ds, uint64_t i);
/* Encoded size in bytes of sample i (its file or its shard record). */
CHUTE_API uint64_t chute_dataset_sample_size(const chute_dataset *ds, uint64_t i);
/* Human-readable location of sample i ("ROOT/cls/x.jpg" or
 * "shard-00003.chute@1048576"), written to buf.  Returns buf.           */
CHUTE_API const char *chute_dataset_describe(const chute_dataset *ds, uint64_t i,
                                             char *buf, size_t buflen);
/* Read the encoded bytes of sample i into buf (cap bytes).  Shard records
 * are checked against their checksum.  Thread-safe.  A format may need
 * more room than chute_dataset_sample_size while reading (TFRecord reads
 * the whole record, then moves the image to the front): then it returns
 * CHUTE_ELIMIT with *out_len set to the room needed.                     */
CHUTE_API int chute_dataset_read(const chute_dataset *ds, uint64_t i, void *buf,
                                 size_t cap, size_t *out_len, chute_error *err);
/* Entries an image tree's listing left out although their names end in an
 * image extension: FIFOs, sockets, device nodes, dangling or looping
 * symbolic links (torchvision's ImageFolder would list them, then hang or
 * fail reading them).  Returns how many (0 for shard directories); for k
 * below min(that, 1000) writes "class/x.jpg: a FIFO, left out" into buf
 * (else an empty string).  Thread-safe.                                  */
CHUTE_API uint64_t chute_dataset_skipped(const chute_dataset *ds, uint64_t k, char *buf,
                                         size_t buflen);

/* Detection / segmentation targets (issue 24; docs/TARGETS.md).  A shard
 * directory packed from COCO JSON, YOLO labels or image + mask pairs
 * carries one target record per image; these calls read it back.  Boxes
 * and keypoints are in the source image's pixels (the frame before any
 * transform); labels index the dataset's class table.  Arrays are
 * library-owned, aligned, valid until chute_targets_free.               */
typedef struct chute_targets {
    uint32_t count;               /* objects */
    uint32_t keypoints;           /* keypoints per object (0: none) */
    uint32_t width, height;       /* the source image's size */
    const int64_t *ann_ids;       /* [count] annotation id (COCO "id"; YOLO: line) */
    const float *boxes;           /* [count][4] x0 y0 x1 y1, source pixels */
    const int32_t *labels;        /* [count] class, 0 <= label < classes */
    const uint8_t *iscrowd;       /* [count] */
    const float *keypoints_xyv;   /* [count][keypoints][3] x, y, visibility */
    const uint8_t *has_mask;      /* [count] 1: chute_targets_mask paints it */
    const char *mask_path;        /* semantic mask image (relative to the packed
                                   * root), or NULL */
    const uint8_t *mask_image;    /* that mask file's bytes (PNG as packed; decode
                                   * with any PNG reader: class ids survive), or NULL */
    size_t mask_image_bytes;
} chute_targets;
/* Sample i's targets: CHUTE_OK (count may be 0), CHUTE_ENOTFOUND when the
 * dataset carries no targets, CHUTE_ECORRUPT naming the shard and sample
 * for a damaged record.  Allocates (not for a training loop: the loader
 * delivers targets itself); thread-safe.                                  */
CHUTE_API int chute_dataset_targets(const chute_dataset *ds, uint64_t i, chute_targets **out,
                                    chute_error *err);
/* Decode a target record held elsewhere (bytes as docs/TARGETS.md says). */
CHUTE_API int chute_targets_decode(const void *record, size_t len, chute_targets **out,
                                   chute_error *err);
/* Paint object k's instance mask into plane (height x width bytes,
 * row-major, written whole: 1 inside, 0 outside), as pycocotools'
 * annToMask does.  CHUTE_ENOTFOUND when the object has no segmentation. */
CHUTE_API int chute_targets_mask(const chute_targets *t, uint32_t k, uint8_t *plane,
                                 size_t plane_bytes, chute_error *err);
CHUTE_API void chute_targets_free(chute_targets *t);

/* ------------------------------------------------------------------ */
/* Loader: the pipeline.                                                */
/* ------------------------------------------------------------------ */
typedef enum chute_transform {
    CHUTE_TRANSFORM_TRAIN = 0, /* RandomResizedCrop(scale .08-1, ratio 3/4-4/3) + hflip p=.5 */
    CHUTE_TRANSFORM_EVAL = 1,  /* resize shorter side to floor(size/crop_pct), center crop size */
    CHUTE_TRANSFORM_NONE = 2   /* resize the whole image to size x size */
} chute_transform;

typedef enum chute_dtype {
    CHUTE_DTYPE_FLOAT32 = 0,
    CHUTE_DTYPE_UINT8 = 1,
    CHUTE_DTYPE_FLOAT16 = 2,
    /* Dtypes of typed fields (chute_field_info; never an image's dtype). */
    CHUTE_DTYPE_INT64 = 3,
    CHUTE_DTYPE_INT32 = 4,
    CHUTE_DTYPE_FLOAT64 = 5,
    CHUTE_DTYPE_INT8 = 6,
    CHUTE_DTYPE_INT16 = 7,
    CHUTE_DTYPE_UINT16 = 8,
    CHUTE_DTYPE_UINT32 = 9,
    CHUTE_DTYPE_UINT64 = 10,
    CHUTE_DTYPE_BOOL = 11
} chute_dtype;

typedef enum chute_layout {
    CHUTE_LAYOUT_DEFAULT = 0, /* NCHW for float dtypes, NHWC for uint8 */
    CHUTE_LAYOUT_NCHW = 1,
    CHUTE_LAYOUT_NHWC = 2
} chute_layout;

/* What a sample that cannot be made does to the run depends on why:
 *
 *   bad content  CHUTE_ECORRUPT, CHUTE_EFORMAT (decode or checksum),
 *                CHUTE_ELIMIT (over max_pixels / max_sample_bytes: a
 *                property of the sample, the same on every read) and
 *                CHUTE_EUNSUPPORTED (an image this build cannot decode):
 *                skipped and counted (stats.corrupt) or failed, per the
 *                policy below.  Under FAIL, chute_loader_next returns
 *                CHUTE_ECORRUPT with the sample's location and reason.
 *   I/O          CHUTE_EIO, CHUTE_ENOTFOUND (a listed file vanished):
 *                retried 3 times with backoff (10, 40, 160 ms;
 *                stats.io_retries counts them); if the read still fails,
 *                chute_loader_next returns that status with the location
 *                and reason.  Never skipped: a substitute sample would
 *                hide a failing disk or mount.
 *   anything else, e.g. CHUTE_ENOMEM: chute_loader_next returns it at
 *                once, whatever the policy.
 *
 * After an error from chute_loader_next the epoch is over (CHUTE_END
 * until the next chute_loader_start_epoch).                              */
typedef enum chute_corrupt_policy {
    CHUTE_CORRUPT_SKIP = 0,   /* count it, fill its slot with a replacement sample */
    CHUTE_CORRUPT_FAIL = 1    /* chute_loader_next fails with the location of the batch's
                               * first bad sample (the lowest position, whichever
                               * worker reached it first) */
} chute_corrupt_policy;

typedef enum chute_remainder {
    CHUTE_REMAINDER_PAD = 0,  /* pad ranks to equal length by repeating the epoch's first samples */
    CHUTE_REMAINDER_DROP = 1  /* drop the tail so every rank gets floor(N / world) samples */
} chute_remainder;

/* How a shuffled epoch is ordered.
 *   GLOBAL  one uniform permutation of all samples per epoch; rank r takes
 *           positions r, r+w, ... (random reads: right for indexed formats).
 *   SHARDS  for files read front to back (TFRecord, WebDataset tars, chute
 *           shards; an image tree is cut into runs of 1024 samples): per
 *           epoch a seeded permutation of the files; ranks split it by
 *           files when there are at least world_size of them (contiguous
 *           runs of the permuted files; a file on a rank boundary is shared
 *           by two ranks), else by samples (stride world_size); within a
 *           rank the samples, each file front to back, pass through a
 *           seeded shuffle buffer of shuffle_buffer samples (tf.data's
 *           shuffle(buffer_size)).  Every rank gets the same count as in
 *           GLOBAL under the same remainder policy.  The order depends only
 *           on (seed, epoch, rank, world_size, dataset, shuffle_buffer),
 *           so resume by start_batch works as in GLOBAL.
 * docs/DESIGN.md "Shuffling sequential formats" has the details and the
 * mixing measured against the buffer size.                              */
typedef enum chute_shuffle {
    CHUTE_SHUFFLE_GLOBAL = 0,
    CHUTE_SHUFFLE_SHARDS = 1
} chute_shuffle;

/* chute_loader_options.readahead's value for "off" (0 there takes the
 * default depth, as every zero field takes its default). */
#define CHUTE_READAHEAD_OFF 0xffffffffu

/* Zero means default for every field.  The numeric options' defaults and
 * bounds are one table (src/common/loader_options.def, listed in
 * docs/OPTIONS.md) shared by C, the CLI and Python.                    */
typedef struct chute_loader_options {
    uint32_t batch_size;      /* default 256 */
    uint32_t size;            /* output height = width, default 224 */
    chute_transform transform;/* default TRAIN */
    chute_dtype dtype;        /* default FLOAT32 */
    chute_layout layout;      /* default NCHW for floats, NHWC for uint8 */
    uint32_t workers;         /* worker threads; default: chute_default_workers() */
    uint32_t prefetch;        /* batches prepared ahead of the consumer; default 2 */
    uint32_t max_held;        /* batches the consumer may hold at once; default 2, max 64 */
    uint64_t seed;            /* shuffle + augmentation seed; default 0 */
    int no_shuffle;           /* nonzero: dataset order */
    int drop_last;            /* nonzero: drop a final partial batch */
    uint32_t rank;            /* this process's rank; default 0 */
    uint32_t world_size;      /* number of ranks; default 1 */
    chute_remainder remainder;/* how ranks split N % world samples; default PAD */
    chute_corrupt_policy on_corrupt; /* default SKIP */
    int no_normalize;         /* float dtypes: nonzero gives 0..1 values instead of (x-mean)/std */
    float mean[3];            /* RGB in 0..1; all zero = ImageNet (0.485, 0.456, 0.406) */
    float std[3];             /* RGB in 0..1; all zero = ImageNet (0.229, 0.224, 0.225) */
    int no_dct_scale;         /* nonzero: never use libjpeg-turbo's DCT-domain downscale */
    uint64_t max_pixels;      /* decoded pixel limit per image; default 64 Mpx */
    uint64_t max_sample_bytes;/* encoded size limit per sample; default 64 MiB */
    uint32_t scale_min_pct;   /* TRAIN crop area range in percent; default 8..100 */
    uint32_t scale_max_pct;
    /* EVAL: Resize(resize_size) + CenterCrop(size), as timm's eval transform.
     * crop_pct: 0 = 0.875; must be in (0, 1].  resize_size: 0 =
     * floor(size / crop_pct) (224 -> 256, 299 -> 341); otherwise used as
     * given and must be >= size.  Setting both is an error.             */
    float crop_pct;
    uint32_t resize_size;
    /* How an epoch is shuffled (ignored with no_shuffle); default GLOBAL.
     * SHARDS permutes the dataset's files and reads each front to back
     * through a shuffle buffer of shuffle_buffer samples (below).       */
    chute_shuffle shuffle;
    uint32_t shuffle_buffer;  /* SHARDS: samples in the shuffle buffer; default 10000 */
    /* Typed fields to deliver besides the image and the label: a comma-
     * separated list of field names (chute_dataset_field_info), NULL or ""
     * for none (the image + label batches of before).  An unknown name is
     * CHUTE_EINVAL at create.  Borrowed: copied at create.  A sample that
     * lacks a named field, or whose value is damaged, is corrupt content
     * (on_corrupt decides).  A well-formed value of another shape or dtype
     * than the field's (learned from the first sample, or declared) is not
     * damage but data this layout cannot hold: chute_loader_next returns
     * CHUTE_EINVAL naming the field, the sample and both shapes, under
     * either policy (never a replacement sample).                         */
    const char *fields;
    /* Capacity in bytes of one sample's value of a bytes field (JSON,
     * text, raw); a longer value is CHUTE_ELIMIT naming the sample (a
     * property of the sample: on_corrupt decides).  Default 4096.        */
    uint32_t field_bytes;
    /* Decoded-sample cache: a RAM budget in bytes; 0 = off.  The first
     * time a sample is made (first epoch), what it decodes to is kept
     * while the budget lasts, and later epochs make the sample from
     * that copy without reading or decoding:
     *   TRAIN: the whole image decoded at a DCT scale chosen from its size
     *     only (the smallest scale any random crop of it can take); the
     *     crop and flip are drawn fresh every epoch from (seed, epoch,
     *     sample), and a crop whose own DCT scale differs from the
     *     cached one is decoded from the file as without the cache;
     *   EVAL, NONE: the finished sample (its output is the same every
     *     epoch), copied into the batch.
     * The output is bit-identical to the same options with
     * decoded_cache_bytes = 0 (the reference run), for any budget:
     * what does not fit is made exactly as without a cache.  The
     * budget bounds the cache's resident memory, its index (8 bytes per
     * dataset sample) included; first come, first kept, never evicted
     * (for epoch-wise random scans, recency policies only cost).  It is
     * reserved at create (address space) and freed by destroy.
     * stats: cache_hits, cache_misses, cache_bytes.                  */
    uint64_t decoded_cache_bytes;
    /* Where batches are delivered: NULL, "" or "cpu" (host memory, the
     * default), "cuda" (= "cuda:0") or "cuda:N".  A CUDA device needs the
     * optional module libchute_cuda.so (chute_features() lists "cuda" when
     * it was built), the NVIDIA driver and a device; without any of them
     * chute_loader_create fails with CHUTE_EUNSUPPORTED and a message
     * saying which ("device cuda:0: no CUDA driver (libcuda.so.1 not
     * found)").  See "CUDA batches" below chute_batch_view.  The string is
     * read during chute_loader_create only. */
    const char *device;
    /* Read-ahead (0, the default: 64 samples; CHUTE_READAHEAD_OFF: off):
     * up to this many samples of this rank's epoch order are read ahead
     * of the workers into a pool of as many buffers (each grown to the
     * largest sample it held, at most max(256 MiB / readahead, 1 MiB) and
     * max_sample_bytes: 256 MiB in all at the default; a larger sample is
     * read by its worker), so decode threads
     * find their bytes ready instead of waiting on storage; reads in
     * flight are readahead through io_uring (local files), else
     * min(readahead, 64) threads.  Formats without a locator (format.h)
     * and streams read as before.  Output is identical with or without
     * it; I/O errors are retried and fail exactly as without it.  On by
     * default since a cold page cache cost 20-40% of images/s without it
     * (docs/DESIGN.md "Measured choices"); the CLI's --readahead 0 and
     * Python's readahead=0 turn it off.  docs/DESIGN.md "Read-ahead" says
     * how to size it (in flight = throughput x latency). */
    uint32_t readahead;
    /* Streams (a dataset opened from "pipe:COMMAND" or "-", see
     * chute_dataset_is_stream): stream_samples ends each epoch after that
     * many samples (0, the default: at the end of the stream; the command
     * is then killed); stream_timeout_ms makes a stream that delivers no
     * byte for that long an error, the command killed (0: wait forever).
     * Ignored for other datasets. */
    uint64_t stream_samples;
    uint32_t stream_timeout_ms;
    /* Hybrid CPU/GPU decode (0, the default: off): the percentage 0..100
     * of each batch's JPEGs to decode with nvJPEG on the loader's device.
     * Needs device "cuda[:N]" (else CHUTE_EINVAL) and nvJPEG, loaded with
     * dlopen ($CHUTE_NVJPEG, else beside libchute_cuda.so, the Python
     * wheel nvidia-nvjpeg's nvidia/nvjpeg/lib, /usr/local/cuda/lib64, the
     * loader's path); without it CHUTE_EUNSUPPORTED "nvJPEG not found" and
     * the places tried.  The first ceil(batch_size * share / 100)
     * positions of each batch whose image is a grey or colour JPEG are
     * decoded whole by nvJPEG and resampled on the GPU (same crop and
     * flip as the CPU would draw; values within a few levels of the CPU
     * path's, not bit-identical).  Ignored with decoded_cache_bytes.  An
     * image nvJPEG cannot decode fails its batch (on_corrupt=skip covers
     * the CPU-decoded samples only). */
    uint32_t gpu_decode_share;
    /* TensorBoard export: a log directory (created with its parents if
     * missing; NULL or "" = off).  chute_loader_create makes an event
     * file events.out.tfevents.<time>.<host>.<pid>.<n>.chute in it and
     * fails naming the path if it cannot.  Every tensorboard_every
     * (default 100) batches handed over, next() copies one chute_stats
     * snapshot into a fixed ring (no allocation, no I/O) and the
     * loader's stats thread writes its scalars (docs/WAITING.md lists them)
     * at step = batches handed over so far; destroy writes what is
     * queued.  The string is read during chute_loader_create only.    */
    const char *tensorboard;
    uint32_t tensorboard_every;
    /* The TensorBoard, Prometheus and `chute top` exports share one
     * background thread per loader, "chute-stats" (none when all three
     * are off).
     * `chute top` (docs/TOP.md): 1 (the default) keeps a 4 KiB stats
     * segment /dev/shm/chute-<uid>-<pid>-<n> (mode 0600) that the stats
     * thread refreshes every 250 ms and the loader removes when destroyed
     * or at exit; off: CHUTE_STATS_SHM_OFF (the CLI's and Python's 0). */
    uint32_t stats_shm;
    /* Prometheus export (docs/METRICS.md), off by default.  metrics_port
     * nonzero: the stats thread serves GET /metrics (exposition format
     * 0.0.4) on metrics_addr (NULL or "": 127.0.0.1; an IPv4 or IPv6
     * literal), answering nothing else.  metrics_file: the same text
     * written every second to that path (temp file + rename) for
     * node_exporter's textfile collector.  Labels: rank, host and dataset
     * (metrics_name, else the dataset's base name; sanitized to
     * [A-Za-z0-9._-]).  A busy port or an unwritable file fails
     * chute_loader_create with CHUTE_EIO.  The strings are copied at
     * create.  The thread reads the counters chute_loader_stats reads:
     * nothing is added per sample. */
    uint32_t metrics_port;
    const char *metrics_addr;
    const char *metrics_file;
    const char *metrics_name;
    /* Augmentation (docs/AUGMENT.md): NULL or "" for none, else ops in
     * the order applied, "op[=v1:v2...],...", e.g.
     * "colorjitter=0.4:0.4:0.4:0.1,grayscale=0.2,erasing=0.25", with
     * torchvision.transforms.v2's semantics on the uint8 output pixels
     * (erasing after normalize, as torchvision).  Each sample's draws
     * depend on (seed, epoch, sample) only.  A bad string fails
     * chute_loader_create with CHUTE_EINVAL naming the token.  Not with
     * gpu_decode_share, nor with decoded_cache_bytes unless transform is
     * train.  The string is read during chute_loader_create only. */
    const char *augment;
    /* Batch mixing (docs/AUGMENT.md "Batch mixing"), torchvision v2's
     * MixUp / CutMix: alpha > 0 turns each on (0: off); with both on a
     * batch gets CutMix with probability mix_switch (0: 0.5), else MixUp.
     * The batch's view then carries soft_labels, count x num_classes
     * float32 (num_classes 0: the dataset's class count).  Each batch's
     * draw depends on (seed, epoch, the batch's first position) only.
     * MixUp needs a float dtype (CutMix takes uint8 too); not with
     * device cuda (mixing runs on the host's finished batch, in the
     * worker that completes it). */
    float mixup;
    float cutmix;
    float mix_switch;
    uint32_t num_classes;
    /* Repeated augmentation: each sample `repeats` times per epoch (0 or
     * 1: once), each copy with its own crop and augmentation draws; the
     * copies sit on consecutive positions of the epoch's order, so the
     * ranks split them (torchvision references' RASampler).  An epoch has
     * repeats x N positions.  Not with shuffle SHARDS or streams. */
    uint32_t repeats;
    /* Option geometry (docs/GEOMETRY.md): a geometric plan per sample
     * instead of transform's crop, "step[=v1:v2...],...", e.g.
     * "rrc=0.08:1,hflip,rotate=15" or "lsj=0.1:2,crop,hflip", with
     * torchvision.transforms.v2's semantics, ending at size x size
     * (outside pixels 0).  Draws depend on (seed, epoch, sample) only.
     * A bad string fails chute_loader_create with CHUTE_EINVAL naming the
     * token.  Not with augment, gpu_decode_share or decoded_cache_bytes
     * yet.  NULL or "": transform decides, as before.  Read during
     * chute_loader_create only. */
    const char *geometry;
} chute_loader_options;

/* chute_loader_options.stats_shm's value for "off". */
#define CHUTE_STATS_SHM_OFF 0xffffffffu

typedef struct chute_loader chute_loader;

/* Create a loader over an open dataset (borrowed: keep `ds` open until the
 * loader is destroyed).  Worker threads start idle; batches are produced
 * once an epoch is started.
 *
 * fork(): a loader belongs to the process that created it; its worker
 * threads do not exist in a forked child.  In a child, next, next_timeout,
 * start_epoch and stop return CHUTE_EINVAL with a message saying so,
 * chute_batch_release does nothing, chute_loader_stats reads without
 * locking, and chute_loader_destroy frees the memory without joining or
 * locking anything.  Create loaders in the child instead (e.g. in a
 * DataLoader's worker_init_fn).                                          */
CHUTE_API int chute_loader_create(const chute_dataset *ds, const chute_loader_options *opt,
                                  chute_loader **out_loader, chute_error *err);
/* Stops workers, frees buffers.  Batches not yet released become invalid.
 * In a forked child: frees memory only (see chute_loader_create).        */
CHUTE_API void chute_loader_destroy(chute_loader *ld);

/* Begin (or restart) epoch `epoch`, skipping the first `start_batch`
 * batches of this rank (resume; a start_batch past the end is clamped to
 * num_batches, so the epoch is empty).  Any batch still in preparation is
 * discarded; batches the consumer holds stay valid until released.      */
CHUTE_API int chute_loader_start_epoch(chute_loader *ld, uint64_t epoch, uint64_t start_batch);

/* Stop preparing batches: workers go idle, batches still in preparation
 * are discarded, held batches stay valid until released, and
 * chute_loader_next returns CHUTE_END until the next start_epoch.       */
CHUTE_API int chute_loader_stop(chute_loader *ld);

/* Number of batches per epoch for this rank (identical on every rank). */
CHUTE_API uint64_t chute_loader_num_batches(const chute_loader *ld);
/* Samples this rank delivers per epoch. */
CHUTE_API uint64_t chute_loader_num_samples(const chute_loader *ld);

/* Elastic resume: continue an epoch on a different number of ranks (or
 * workers, or batch size).  Shuffle GLOBAL (or no_shuffle) only.
 *
 * The state is one number per epoch, the same on every rank: the
 * position P, how many leading positions of epoch `epoch`'s permutation
 * are consumed across all ranks.  Ranks step in lockstep (DDP), so after
 * each rank has consumed `batches` batches of its run, chute_loader_
 * position(ld, batches) is that prefix: start + batches * batch_size *
 * world_size, or the dataset size N once the run is complete (the epoch
 * is over: resume with the next epoch).  A mid-epoch P is always < N and
 * covers no PAD repeat.  Ranks saved at different positions are not a
 * consistent state: use the smallest P of all ranks (what every rank has
 * consumed), then the samples the others consumed past it run again.
 *
 * chute_loader_start_epoch_at(ld, epoch, P) begins a run of epoch
 * `epoch` that delivers positions P .. N-1 of its permutation
 * round-robin over this loader's ranks: rank r gets positions P + r,
 * P + r + world_size, ..., each with the same augmentation draws as
 * without a resume (they are keyed by seed, epoch and sample); all ranks
 * get the same count, ceil((N-P)/world_size) under PAD (the last row is
 * filled from the epoch's head, as without a resume) or floor(...) under
 * DROP (the permutation's last (N-P) % world_size samples are cut).  No
 * divisibility of N or of the global batch is needed.  With the saving
 * world size and P a multiple of world_size * batch_size this is
 * chute_loader_start_epoch(ld, epoch, P / (world_size * batch_size)).
 * The next chute_loader_start_epoch runs whole epochs again.  Samples
 * replacing skipped ones (on_corrupt SKIP) are drawn from the run, so
 * they may differ from an uninterrupted run's.
 * CHUTE_EINVAL for P > N; CHUTE_EUNSUPPORTED for a stream (resume it by
 * start_batch at its own world size) and for P > 0 under shuffle SHARDS
 * (each rank's order passes its own shuffle buffer, so what was consumed
 * is not a prefix of one sequence; resume at the saved world size and
 * batch size with start_batch).  Control thread only.
 *
 * chute_loader_run_batches: batches of this rank in the current run (the
 * remainder after start_epoch_at, else num_batches).  0 for streams.  */
CHUTE_API int chute_loader_start_epoch_at(chute_loader *ld, uint64_t epoch, uint64_t position,
                                          chute_error *err);
CHUTE_API uint64_t chute_loader_position(const chute_loader *ld, uint64_t batches);
CHUTE_API uint64_t chute_loader_run_batches(const chute_loader *ld);

/* Resume of a Kafka stream (kafka://...): its position is the consumer's
 * offsets past what the consumer of this loader released (at-least-once),
 * not a batch number.  chute_loader_stream_state copies that position's
 * bytes (opaque, versioned) into buf: CHUTE_OK with *len, *len = 0 for
 * loaders over other datasets, CHUTE_ELIMIT with *len = the size needed
 * when cap is short (buf may be NULL then).  Any thread.
 * chute_loader_set_stream_state gives a new loader (same URI and group)
 * those bytes: the next chute_loader_start_epoch (or first next) opens the
 * consumer there, and start_batch is then not used to skip samples.  The
 * bytes are copied.  Control thread, before starting; CHUTE_EINVAL for a
 * loader that is not over a Kafka stream (len 0 is always accepted).   */
CHUTE_API int chute_loader_stream_state(chute_loader *ld, void *buf, size_t cap, size_t *len,
                                        chute_error *err);
CHUTE_API int chute_loader_set_stream_state(chute_loader *ld, const void *buf, size_t len,
                                            chute_error *err);

typedef struct chute_batch chute_batch;

/* A batch's memory description.  Pointers stay valid until the batch is
 * released.  `shape` is in `layout` order (N,C,H,W or N,H,W,C); `count`
 * (== shape[0]) may be below batch_size for a final partial batch.      */
typedef struct chute_batch_view {
    void *data;
    chute_dtype dtype;
    chute_layout layout;
    int64_t shape[4];
    int64_t strides[4];       /* in elements */
    size_t nbytes;            /* bytes of `data` in use */
    int64_t *labels;          /* `count` int64 labels */
    uint64_t *indices;        /* `count` dataset sample indices */
                              /* data, labels and indices each start on a
                                 64-byte boundary */
    uint32_t count;
    uint64_t epoch;
    uint64_t batch_index;     /* position of this batch within the epoch */
    /* Where `data` lives.  Host batches: device_type 1, the rest 0/NULL. */
    int32_t device_type;      /* 1 = host memory (DLPack kDLCPU), 2 = CUDA (kDLCUDA) */
    int32_t device_id;        /* the CUDA device (device_type 2), else 0 */
    void *cuda_stream;        /* cudaStream_t the batch was made on (device_type 2) */
    void *cuda_event;         /* cudaEvent_t recorded after the batch's last GPU operation */
    void *host_data;          /* device_type 2: the pinned host pixels the device batch was
                                 made from, uint8 NHWC (count x size x size x 3) */
    /* Options mixup/cutmix: count x num_classes float32 soft labels
     * (row-major, 64-byte aligned; `labels` keeps the unmixed ones);
     * NULL and 0 when mixing is off. */
    float *soft_labels;
    uint32_t num_classes;
} chute_batch_view;

/* ------------------------------------------------------------------ */
/* Typed fields: named values a sample carries besides image and label.  */
/* ------------------------------------------------------------------ */
#define CHUTE_FIELD_MAX_DIMS 8

typedef enum chute_field_kind {
    CHUTE_FIELD_INT64 = 1,   /* int64 scalar (ndim 0) or fixed-length list (ndim 1) */
    CHUTE_FIELD_FLOAT32 = 2, /* float32 scalar or fixed-length list */
    CHUTE_FIELD_TENSOR = 3,  /* fixed-shape tensor from .npy bytes (dtype from the file) */
    CHUTE_FIELD_BYTES = 4    /* raw bytes passed through (JSON, text, ...): uint8, ndim 1,
                                shape[0] = -1 (variable; the loader's field_bytes caps it) */
} chute_field_kind;

/* A dataset's field.  `name` is borrowed from the dataset.  Shapes are per
 * sample (without the batch dimension), learned at open from the first
 * sample that has the field.                                            */
typedef struct chute_field_info {
    const char *name;
    chute_field_kind kind;
    chute_dtype dtype;
    uint32_t ndim;
    int64_t shape[CHUTE_FIELD_MAX_DIMS];
} chute_field_info;

/* Number of typed fields of a dataset (0 for formats without any: the
 * image tree, chute shards).  WebDataset: every member extension other
 * than the image's ("cls", "json", "txt", "npy", ...); TFRecord: the
 * dataset option extra_keys.  Thread-safe.                               */
CHUTE_API uint32_t chute_dataset_num_fields(const chute_dataset *ds);
/* Field k (0 <= k < chute_dataset_num_fields) into *out: CHUTE_OK, or
 * CHUTE_EINVAL past the end.  Thread-safe.                               */
CHUTE_API int chute_dataset_field_info(const chute_dataset *ds, uint32_t k,
                                       chute_field_info *out);

/* One field of a batch: count values of the field's per-sample shape,
 * stacked.  ndim and shape include the batch dimension (shape[0] ==
 * count); strides are in elements, C order.  Bytes fields: a (count,
 * field_bytes) uint8 array, sample j's value in its first lengths[j]
 * bytes (the rest zero).  data and lengths start on 64-byte boundaries in
 * the batch's ring buffer: valid until the batch is released, nothing is
 * allocated.                                                              */
typedef struct chute_field_view {
    const char *name;         /* borrowed from the dataset */
    chute_field_kind kind;
    chute_dtype dtype;
    uint32_t ndim;
    int64_t shape[CHUTE_FIELD_MAX_DIMS + 1];
    int64_t strides[CHUTE_FIELD_MAX_DIMS + 1];
    void *data;
    size_t nbytes;            /* bytes of `data` in use */
    int64_t *lengths;         /* bytes fields: count lengths; else NULL */
} chute_field_view;

/* The view of field `name` (one of the loader's `fields`) in batch b:
 * CHUTE_OK, or CHUTE_ENOTFOUND when the loader was not asked for it.  Any
 * thread that may use the batch; the view lives as long as the batch.   */
CHUTE_API int chute_batch_field(const chute_batch *b, const char *name, chute_field_view *out);
/* Whether the dataset's samples carry an image: 1 for the image formats
 * (tree, shards, TFRecord, WebDataset), 0 for formats whose samples are
 * only a label and typed fields (a NumPy array of tensors, CSV rows).  A
 * loader over an image-less dataset reads no image, decodes and
 * transforms nothing: its batch views have data NULL, nbytes 0, shape
 * {count, 0, 0, 0} (labels, indices and count as usual), the fields
 * carry the samples, and a device other than the CPU is refused.  The
 * image options (size, transform, dtype...) are ignored.  Thread-safe. */
CHUTE_API int chute_dataset_has_images(const chute_dataset *ds);
/* Whether the dataset is a stream: opened from "pipe:COMMAND" (the
 * command runs under /bin/sh -c and writes a WebDataset tar to stdout,
 * WebDataset's convention) or "-" (a tar on stdin).  A stream has no
 * length (chute_dataset_size 0, chute_dataset_read CHUTE_EUNSUPPORTED);
 * nothing runs until a loader starts an epoch, and each epoch runs the
 * command again (stdin can be read by epoch 0 only).  Over a stream a
 * loader reads samples in order into a shuffle buffer of shuffle_buffer
 * samples (seeded by seed and the epoch; no_shuffle: stream order), its
 * num_batches and num_samples are 0 (unknown), an epoch ends at the end
 * of the stream or after stream_samples, and start_epoch(e, b) skips the
 * first b batches of the order (it re-reads them; the same bytes give the
 * same order).  Each rank runs its own command: write it with the rank in
 * it ("pipe:curl -s https://host/shard-$RANK.tar").  A stream that breaks
 * (not a tar, truncated, a nonzero exit status, no data for
 * stream_timeout_ms) ends the epoch: every sample read whole before the
 * break is delivered (a short last batch unless drop_last), then
 * chute_loader_next returns the error once (CHUTE_EIO for the
 * command's failures, CHUTE_EFORMAT/ECORRUPT for the bytes) with the
 * command's exit status and the end of its stderr in the message.
 * Stopping or destroying the loader kills the command (its process group,
 * SIGTERM then SIGKILL) and reaps it.  Thread-safe. */
CHUTE_API int chute_dataset_is_stream(const chute_dataset *ds);
/* CUDA batches (options.device = "cuda[:N]").
 *
 * The CPU workers write uint8 NHWC pixels into the ring, whose buffers are
 * pinned (cudaHostRegister) once at create.  When a batch's last sample is
 * done, chute queues on its own stream (view.cuda_stream): the copy of the
 * uint8 pixels to device memory, then a kernel that makes the dtype and
 * layout asked for, with (pixel / 255 - mean) / std for float dtypes, then
 * records view.cuda_event.  Each value equals what numpy computes in
 * float32 from the same uint8 pixel (pixel * (1 / (255 std)) + (-mean /
 * std), no fused multiply-add), so a CUDA float batch differs from the CPU
 * float path (which normalizes before rounding to uint8) by at most
 * 0.5 / (255 std) and from the CPU uint8 path normalized in float32 not at
 * all.  The flip is made on the CPU, as before.
 *
 *   valid      view.data is a device pointer on view.device_id; its
 *              contents are valid once view.cuda_event has completed.
 *              Do not read it on another stream before making that stream
 *              wait: chute_batch_use_stream(b, stream), or
 *              cudaStreamWaitEvent(stream, view.cuda_event) yourself, or
 *              cudaEventSynchronize(view.cuda_event) on the host.
 *   who syncs  the consumer; chute never blocks the consumer's stream.
 *   lifetime   device memory is one buffer per ring slot, allocated at
 *              create and freed at destroy; a batch's buffer is reused
 *              only after chute_batch_release, and then only after the
 *              work queued on the batch's release stream (the last stream
 *              given to chute_batch_use_stream, else the legacy default
 *              stream, which also covers the blocking streams) completes,
 *              so releasing right after queueing the last kernel that
 *              reads the batch is safe.  view.host_data stays valid until
 *              release too.
 *
 * labels and indices stay in host memory, pinned like the pixels; the
 * workers rewrite a slot's host memory only once the release stream has
 * passed the release, so an asynchronous copy of the labels queued on
 * that stream before the release is safe as well.                        */

/* Make `cuda_stream` (a cudaStream_t; NULL: the legacy default stream)
 * wait for batch b's device data, and order b's release after the work
 * queued on that stream up to the release.  The last stream given is the
 * one the release waits for: a batch read on several streams should be
 * synchronised onto one first.  A host batch: nothing to do, CHUTE_OK.
 * Callable from any thread for a batch it holds; CHUTE_EUNSUPPORTED with
 * the CUDA error's text if the driver refuses. */
CHUTE_API int chute_batch_use_stream(chute_batch *b, void *cuda_stream);

/* Wait for the next batch of the current epoch.  Returns CHUTE_OK and a
 * batch, CHUTE_END after the last one, CHUTE_EBUSY if the consumer holds
 * max_held batches, or an error (corrupt sample under FAIL policy, ...).
 * Blocks without holding any lock the workers need.                      */
CHUTE_API int chute_loader_next(chute_loader *ld, chute_batch **out_batch);
/* Like chute_loader_next but gives up after timeout_ms with
 * CHUTE_EINTERRUPTED so a caller can poll for Ctrl-C; negative = forever. */
CHUTE_API int chute_loader_next_timeout(chute_loader *ld, int timeout_ms, chute_batch **out_batch);
CHUTE_API void chute_batch_view_get(const chute_batch *b, chute_batch_view *out_view);
/* Return a batch's buffer to the ring.  May be called from any thread,
 * concurrently with chute_loader_next and the workers (e.g. from a
 * DLPack deleter); release each batch exactly once, before
 * chute_loader_destroy.                                                  */
CHUTE_API void chute_batch_release(chute_batch *b);

/* Last message of this loader: why the last call failed, or the last
 * corrupt sample skipped (updated by chute_loader_next).  Empty if none.
 * Read it on the thread that calls chute_loader_next; it stays valid
 * until the next call on this loader.                                    */
CHUTE_API const char *chute_loader_errmsg(const chute_loader *ld);

/* The worker count a loader uses when `workers` is 0: the CPUs this
 * process may use (the smaller of its affinity mask and its cgroup CPU
 * quota, cgroup v1 or v2), divided by the LOCAL_WORLD_SIZE environment
 * variable when that is set (torchrun: ranks per host), at least 1.
 * Writes a one-line reason ("affinity mask: 1 of 16 online CPUs") to
 * `why` when it is not NULL.  Pack's default thread count is the same.
 * Thread-safe.                                                           */
CHUTE_API uint32_t chute_default_workers(char *why, size_t why_len);

/* ------------------------------------------------------------------ */
/* Statistics.  Busy times are summed over workers.                      */
/* ------------------------------------------------------------------ */
typedef struct chute_stage_stats {
    uint64_t items;
    uint64_t bytes;
    uint64_t busy_ns;
} chute_stage_stats;

typedef struct chute_stats {
    chute_stage_stats read;
    chute_stage_stats decode;
    chute_stage_stats transform;
    uint64_t batches;          /* batches handed to the consumer */
    uint64_t samples;          /* samples in those batches */
    uint64_t corrupt;          /* bad samples skipped, each once per epoch
                                  however often it is drawn as a
                                  replacement: at most the samples seen */
    uint64_t dct_scaled;       /* JPEG decodes that used a DCT downscale */
    uint64_t wait_ns;          /* time the consumer spent blocked in next() */
    uint64_t wall_ns;          /* time since the loader was created */
    uint64_t queue_fill_sum;   /* sum over next() calls of ready batches found */
    uint32_t workers;
    uint32_t queue_capacity;   /* batch buffers in the ring (prefetch + max_held) */
    uint64_t read_lat_p50_ns;  /* sample read latency percentiles */
    uint64_t read_lat_p90_ns;
    uint64_t read_lat_p99_ns;
    uint64_t read_lat_max_ns;  /* upper bound of the slowest read's bucket */
    uint64_t io_retries;       /* sample reads retried after an I/O error */
    /* Decoded-sample cache (decoded_cache_bytes; zero when off): samples
     * made from the cache, samples made from the file while the cache
     * was on (first sight, over the budget, or a train crop at another
     * DCT scale), bytes of the budget in use and entries stored. */
    uint64_t cache_hits;
    uint64_t cache_misses;
    uint64_t cache_bytes;
    uint64_t cache_entries;
    /* The block cache tier (chute_dataset_options cache_dir /
     * cache_ram_bytes; all zero when the dataset has none), counted since
     * the dataset was opened (every loader on it adds to the same
     * counters).  A block lookup is served from RAM (tier_ram_hits), else
     * from a verified cache_dir file (tier_disk_hits), else read from the
     * origin: tier_fetches blocks, tier_fetched_bytes bytes.  Evictions
     * per tier; tier_corrupt cache files found damaged and refetched;
     * tier_fallbacks blocks read from the origin because cache_dir failed
     * (full, deleted); tier_ram_bytes / tier_ram_budget the RAM tier's
     * use.  Hit rate = (ram + disk hits) / (ram + disk hits + fetches). */
    uint64_t tier_ram_hits;
    uint64_t tier_disk_hits;
    uint64_t tier_fetches;
    uint64_t tier_fetched_bytes;
    uint64_t tier_ram_evictions;
    uint64_t tier_disk_evictions;
    uint64_t tier_corrupt;
    uint64_t tier_fallbacks;
    uint64_t tier_ram_bytes;
    uint64_t tier_ram_budget;
    /* Recent figures.  The rates above are lifetime averages: time before
     * the first next() (model build) and between loops (evaluation,
     * checkpoints) dilutes them.  The window is the last
     * CHUTE_STATS_WINDOW_MS before this call, starting no earlier than the
     * first chute_loader_next*() call (window_ns 0 before it):
     * window_samples and window_batches were handed over in it and
     * window_wait_ns of it were spent blocked in next(), so
     * window_samples / window_ns is the loop's current rate and
     * window_wait_ns / window_ns its current wait fraction.  Per batch:
     * last_wait_ns is how long the consumer waited for the last batch
     * handed over (summed over the timed-out next_timeout calls that
     * asked for it), last_step_ns the time between the last two batches
     * handed over (one step of the consumer's loop, its wait included; 0
     * before the second).  Kept by next() under the lock it already
     * takes, in a fixed ring: nothing allocated.                       */
    uint64_t window_ns;
    uint64_t window_samples;
    uint64_t window_batches;
    uint64_t window_wait_ns;
    uint64_t last_wait_ns;
    uint64_t last_step_ns;
} chute_stats;

/* The span of chute_stats' window figures, in milliseconds. */
#define CHUTE_STATS_WINDOW_MS 10000

/* Snapshot of the counters; callable from any thread. */
CHUTE_API void chute_loader_stats(const chute_loader *ld, chute_stats *out);

/* ------------------------------------------------------------------ */
/* Pack: ImageFolder tree -> shard directory.                           */
/* ------------------------------------------------------------------ */
/* The loader's default limits (chute_loader_options.max_pixels and
 * .max_sample_bytes).  chute_pack applies the same limits by default, so
 * it never packs a sample that a default loader would always reject.    */
#define CHUTE_DEFAULT_MAX_PIXELS (64ull << 20)
#define CHUTE_DEFAULT_MAX_SAMPLE_BYTES (64ull << 20)

typedef struct chute_pack_progress {
    uint64_t files_done, files_total;
    uint64_t bytes_done, bytes_total;
    uint64_t skipped;          /* files left out (undecodable, or over a limit) */
    uint32_t shards_done;
    double seconds;
} chute_pack_progress;

/* Called from the packing thread; return nonzero to cancel. */
typedef int (*chute_pack_progress_fn)(const chute_pack_progress *p, void *user);
/* Called for each file left out (path, reason). */
typedef void (*chute_pack_skip_fn)(const char *path, const char *reason, void *user);

/* Called when another process holds out_dir's pack lock: once at once,
 * then about once a second while this pack waits (holder: "pid N on HOST",
 * or "" if unknown).  Return nonzero to stop waiting (CHUTE_EINTERRUPTED). */
typedef int (*chute_pack_wait_fn)(const char *out_dir, const char *holder, double waited_s,
                                  void *user);

typedef struct chute_pack_options {
    uint64_t shard_size;       /* target bytes per shard; default 256 MiB */
    uint32_t threads;          /* validating threads, at most CHUTE_PACK_MAX_THREADS (more is
                                  refused); default chute_default_workers() */
    uint32_t align;            /* record alignment, power of two; default 4096 */
    int strict;                /* nonzero: an undecodable or over-limit file fails the pack */
    int no_validate;           /* nonzero: don't decode files, only sniff type */
    uint64_t max_pixels;       /* validation limit; default 64 Mpx */
    chute_pack_progress_fn progress;
    chute_pack_skip_fn on_skip;
    void *user;
    uint64_t max_sample_bytes; /* encoded size limit per file; default 64 MiB (the loader's);
                                  at most 4 GiB - 1 (a shard record's limit) */
    int no_wait;               /* nonzero: fail with CHUTE_EBUSY at once if another process
                                  is packing into out_dir, instead of waiting for it */
    chute_pack_wait_fn on_wait;
    /* Pre-resized and raw datasets (docs/FORMAT.md, "Pre-resized and raw
     * datasets").  max_side: images whose SHORTER side exceeds it are
     * resized once, shorter side to max_side (Pillow's LANCZOS, longer side
     * int(max_side * long / short) as torchvision's Resize), and re-encoded
     * as JPEG at `quality` (PNGs too); smaller ones are stored as they are.
     * 0: no resize.  quality: 1..100, 0 = CHUTE_PACK_DEFAULT_QUALITY.
     * raw: nonzero stores every image as decoded RGB8 pixels (a CHRAW
     * record; after the max_side resize if one is set): no decode at load
     * time, about w*h*3 bytes each on disk.  The manifest records all
     * three (chute_pack_info). */
    uint32_t max_side;
    uint32_t quality;
    int raw;
    /* out_dir "s3://bucket/prefix/" (docs/REMOTE.md, "Writing to S3"): a
     * prefix that already holds a dataset's objects is refused
     * (CHUTE_EINVAL) unless force is nonzero; then the old manifest is
     * deleted first, the old objects the new dataset does not overwrite
     * next, and the new manifest uploaded last.  Ignored for local
     * out_dirs (a local pack always replaces, under its lock). */
    int force;
} chute_pack_options;

/* Default JPEG quality of pack --max-side (chosen by measurement:
 * docs/DESIGN.md, "Pre-resized shards"). */
#define CHUTE_PACK_DEFAULT_QUALITY 90
/* The most validating threads chute_pack takes: the one bound of
 * threads in C, `chute pack --threads` and chute.pack(threads=). */
#define CHUTE_PACK_MAX_THREADS 256

typedef struct chute_pack_result {
    uint64_t files;            /* samples written */
    uint64_t bytes;            /* sample bytes written */
    uint64_t skipped;
    uint32_t shards;
    uint32_t classes;
    double seconds;
    uint64_t skipped_over_limit; /* of `skipped`: over max_sample_bytes or max_pixels */
    uint64_t reads_retried;    /* files whose read failed, then succeeded when retried */
    int already_packed;        /* 1: this call waited for another pack of the same tree into
                                  out_dir and reports that pack's dataset (nothing written) */
} chute_pack_result;

/* Pack the tree at `root` into `out_dir` (created if missing).  Shards
 * are written under temporary names, synced and renamed; the manifest
 * that makes the directory a dataset is written last, so an interrupted
 * pack never leaves a directory that opens as a dataset.  Success means
 * the new dataset has been opened and checked.
 *
 * Files whose content is not a decodable JPEG/PNG, or is over the
 * loader's limits (max_sample_bytes, max_pixels), are skipped and counted
 * (or fail the pack with `strict`).  An I/O error reading a file is never
 * a skip: the read is retried, then the pack fails naming the file.
 *
 * out_dir may not be root, inside root, or contain root (paths compared
 * after resolving symlinks): CHUTE_EINVAL.
 *
 * Concurrent packs into one out_dir (every rank running the same prep
 * script): a pack holds an flock on out_dir/chute.lock from before it
 * touches anything there until it returns.  Another pack waits for that
 * lock (or fails at once with CHUTE_EBUSY under `no_wait`); once it has
 * it, if out_dir now holds a complete dataset of the same tree (same
 * classes, samples a subsequence of its files with the same labels) it
 * returns CHUTE_OK with out_result->already_packed = 1 and writes
 * nothing; if it holds a dataset of a different tree it fails
 * (CHUTE_EBUSY) rather than overwrite what the other process just made;
 * if it holds none (the other pack failed or was killed) it packs.  A pack
 * that did not have to wait always packs afresh.                          */
CHUTE_API int chute_pack(const char *root, const char *out_dir, const chute_pack_options *opt,
                         chute_pack_result *out_result, chute_error *err);

/* How a shard directory's images were transformed at pack time, from its
 * manifest: all zero for a dataset stored as its files were (version-1
 * manifest).  max_side/quality/raw as in chute_pack_options (quality is
 * 0 unless images were re-encoded).                                      */
typedef struct chute_pack_info {
    uint32_t manifest_version; /* 1 or 2 */
    uint32_t max_side;
    uint32_t quality;
    int raw;
} chute_pack_info;

/* Read dir/chute.manifest (a shard directory written by chute_pack) and
 * fill *out.  Errors as chute_dataset_open's for a bad manifest.
 * Thread-safe; allocates nothing the caller owns. */
CHUTE_API int chute_pack_info_read(const char *dir, chute_pack_info *out, chute_error *err);

/* Header-only look at one encoded image in memory: size, channels and
 * format (1 = JPEG, 2 = PNG, 3 = BMP, 4 = CHRAW raw pixel record, one id
 * per registered decoder) without decoding pixels.  Thread-safe.         */
CHUTE_API int chute_image_header(const void *data, size_t len, uint32_t *out_w, uint32_t *out_h,
                                 uint32_t *out_channels, int *out_format, chute_error *err);

/* Decode-check one encoded image in memory (type sniffed).  Writes its
 * width/height/channels when not NULL.  Thread-safe.                     */
CHUTE_API int chute_probe_image(const void *data, size_t len, uint64_t max_pixels,
                                uint32_t *out_w, uint32_t *out_h, uint32_t *out_channels,
                                chute_error *err);

/* ------------------------------------------------------------------ */
/* Convert: any readable dataset into any writable format.              */
/* ------------------------------------------------------------------ */

/* The k-th output format chute can write (k from 0), NULL past the last:
 * "chute" (chute shards + manifest, docs/FORMAT.md), "tfrecord"
 * (tf.train.Example as TensorFlow's imagenet_to_gcs.py writes it, with a
 * DALI tfrecord2idx index beside each file) and "wds" (WebDataset tar
 * shards as webdataset's ShardWriter names them).  Static storage.       */
CHUTE_API const char *chute_writer_name(uint32_t k);

/* Zero means default for every field. */
typedef struct chute_convert_options {
    const char *format;        /* a chute_writer_name; NULL = "chute" */
    uint64_t shard_size;       /* target bytes per output file (default 256 MiB): a file is
                                  closed once it reaches this size */
    /* Added to every label written into TFRecord and WebDataset files.
     * chute's labels are 0-based (torchvision's ImageFolder order);
     * imagenet_to_gcs.py writes 1-based ImageNet labels, so label_offset =
     * 1 gives files that script's readers expect (read them back with
     * chute_dataset_options.label_offset = -1).  Default 0: the files hold
     * chute's 0-based labels.  The chute format stores labels as they are. */
    int32_t label_offset;
    const char *prefix;        /* TFRecord file names PREFIX-00000-of-0000N (default "train",
                                  as imagenet_to_gcs.py) */
    uint32_t align;            /* chute shards' record alignment (default 4096) */
    int validate;              /* nonzero: decode every image fully; undecodable ones are
                                  skipped (counted) or fail under strict */
    int strict;                /* nonzero: a damaged sample fails the convert */
    int no_wait;               /* as chute_pack_options.no_wait */
    chute_pack_progress_fn progress; /* files_* count samples; shards_done files written */
    chute_pack_skip_fn on_skip;
    chute_pack_wait_fn on_wait;
    void *user;
    const chute_dataset_options *source; /* how to open src (NULL: probe the path) */
    int force;                 /* as chute_pack_options.force (s3:// dst only) */
    /* WebDataset only: each sample's key is KEY_PREFIX + its position in
     * this output, zero-padded (default "": the position alone).  Letters,
     * digits, '_' and '-', at most 64 bytes.  Writers of one dataset in
     * pieces (chute.spark.write, chute.ray.write: "p00003-" for part 3)
     * give each piece its own prefix, so keys are unique dataset-wide. */
    const char *key_prefix;
} chute_convert_options;

typedef struct chute_convert_result {
    uint64_t samples;          /* samples written */
    uint64_t bytes;            /* encoded image bytes written */
    uint64_t skipped;          /* damaged samples left out (never I/O errors) */
    uint32_t files;            /* data files written (shards, TFRecord files, tars) */
    uint32_t classes;          /* the source's class count */
    double seconds;
    const char *format;        /* the writer's name, static storage */
} chute_convert_result;

/* Write every sample of the dataset at `src` (any format
 * chute_dataset_open reads) into `dst` in opt->format, in the source's
 * sample order, with the image bytes unchanged.  Each sample's header is
 * checked (chute_image_header); one that does not parse, or that the
 * source reports damaged (CHUTE_ECORRUPT, CHUTE_EFORMAT, CHUTE_ELIMIT), is
 * skipped and counted, or fails under strict; an I/O error fails the
 * convert.
 *
 * Crash safety, as chute_pack: dst holds the flock dst/chute.lock from
 * before anything there changes until return; files that any chute writer
 * writes there (chute shards and manifest, PREFIX-N-of-M TFRecord files
 * and their .idx, shard-N.tar) are removed first, new files are written
 * under temporary names (".chute-w-*.tmp", which no format reads), each
 * fsync'd, and renamed to their final names only when every file is
 * complete; then the directory is fsync'd and the result opened through
 * the reader and its sample count checked.  (The chute format renames
 * its manifest last instead.)  A kill before the rename pass leaves no
 * dataset that opens; a kill inside it (after every file is durable, a
 * few renames long) can leave the first files renamed, so after any
 * interruption run the convert again: it rewrites everything.
 * dst may not be src, inside it, or contain it (CHUTE_EINVAL).
 *
 * Single-threaded (the caller's thread; callbacks on it).  Bounded
 * memory: one sample and one output record at a time.                   */
CHUTE_API int chute_convert(const char *src, const char *dst, const chute_convert_options *opt,
                            chute_convert_result *out_result, chute_error *err);

/* A streaming writer: chute_convert with the caller as the source, for
 * samples that come from elsewhere (a Spark partition, a Ray block, a
 * program).  The same writers, options (format, shard_size, prefix,
 * label_offset, align, validate, no_wait/on_wait, force) and crash
 * safety as chute_convert:
 *
 *   open    dst is a local directory (made if absent; its flock held until
 *           abort; files any chute writer writes there removed first) or
 *           s3://bucket/prefix/ (staged in a private $TMPDIR directory;
 *           an existing dataset there is refused unless opt->force).
 *           nclasses/class_names (copied): the class table the chute
 *           format stores in every shard (required there: CHUTE_EINVAL
 *           without) and the .txt of WebDataset samples (optional for
 *           tfrecord and wds); with it, a label outside 0..nclasses-1 is
 *           refused (CHUTE_EINVAL).
 *   add     one encoded image (JPEG, PNG, ...) and its label.  Its header
 *           is checked as convert checks (decoded fully under validate);
 *           a sample that fails is refused with CHUTE_ECORRUPT,
 *           CHUTE_EFORMAT, CHUTE_ELIMIT or CHUTE_EUNSUPPORTED and a
 *           message naming it ("sample N"), nothing of it is written, and
 *           the writer goes on: the caller decides whether to skip it.
 *           Any other failure (I/O, ENOMEM) leaves the writer failed:
 *           only abort is left.
 *   finish  completes every file, gives them their final names (fsync'd;
 *           the chute manifest last), opens the result through its reader
 *           and counts it (from s3:// after the upload).  At least one
 *           sample must have been added (CHUTE_ENOTFOUND).  The writer
 *           must still be freed with abort.
 *   file    after a successful finish: the k-th of file_count files
 *           written (bare names, sorted; TFRecord's .idx files included,
 *           the chute manifest not), valid until abort.
 *   abort   frees the writer (NULL ok).  One not finished, or whose finish
 *           failed, leaves nothing in a local dst: temporaries and files
 *           already renamed are removed.  For s3://, a finish that failed
 *           during its upload may leave objects (never the manifest).
 *
 * One thread at a time per writer; no allocation per sample once the
 * first output file is open (past the writers' growth of their own
 * buffers).  Memory: one output record and the writer's file buffer.  */
/* Write DIR/chute.manifest (version 1: temporary name, fsync, rename,
 * fsync of DIR) for shards DIR/shard-00000.chute .. shard-(n-1) with
 * these sample counts and file sizes: how a job that wrote shards in
 * pieces (chute.spark.write) commits them as one dataset after renaming
 * them.  Nothing is checked here; chute_dataset_open checks every shard
 * against it.                                                         */
CHUTE_API int chute_manifest_write(const char *dir, uint32_t n, const uint64_t *samples,
                                   const uint64_t *bytes, chute_error *err);
typedef struct chute_writer chute_writer;
CHUTE_API int chute_writer_open(const char *dst, const chute_convert_options *opt,
                                uint32_t nclasses, const char *const *class_names,
                                chute_writer **out, chute_error *err);
CHUTE_API int chute_writer_add(chute_writer *w, const void *data, size_t len, int32_t label,
                               chute_error *err);
CHUTE_API int chute_writer_finish(chute_writer *w, chute_convert_result *out_result,
                                  chute_error *err);
CHUTE_API uint32_t chute_writer_file_count(const chute_writer *w);
CHUTE_API const char *chute_writer_file(const chute_writer *w, uint32_t k);
CHUTE_API void chute_writer_abort(chute_writer *w);
/* Inference: a submit/poll session for live requests.                  */
/* ------------------------------------------------------------------ */
/* A session turns encoded images (bytes or a path, each with the
 * caller's uint64 request id) into transformed tensors, in batches formed
 * by deadline: a batch takes requests in submission order and is closed
 * when it holds max_batch requests or when its oldest request has waited
 * max_delay_us; it is handed out once every request in it is finished.
 * Workers start on a request as soon as it is submitted.  A request whose
 * image cannot be made (corrupt, over a limit, unreadable path) fails
 * alone: its status and message are in the batch, its tensor is zeros,
 * and the other requests of its batch are delivered normally.
 *
 * Memory is fixed at create: ceil(queue_capacity / max_batch) + 2 batch
 * buffers, each sized for max_batch samples (64-byte aligned arrays, not
 * rounded to 2 MiB, not pre-faulted unless pretouch is set), and
 * per-request records; copied request bytes live in per-record buffers
 * that grow to the largest request seen and are then reused.         */
typedef struct chute_infer chute_infer;
typedef struct chute_infer_batch chute_infer_batch;

/* Zero means default for every field.  The defaults and bounds are one
 * table (src/common/infer_options.def, listed in docs/OPTIONS.md) shared
 * by C, `chute bench --latency` and chute.Infer; the fields shared with
 * chute_loader_options are that table's rows.                          */
typedef struct chute_infer_options {
    uint32_t size;            /* output height = width; default 224 */
    chute_transform transform;/* EVAL or NONE; 0 (TRAIN, random: meaningless here) = EVAL */
    chute_dtype dtype;        /* default FLOAT32 */
    chute_layout layout;      /* default NCHW for floats, NHWC for uint8 */
    int no_normalize;         /* float dtypes: 0..1 instead of (x-mean)/std */
    float mean[3];            /* all zero = ImageNet */
    float std[3];             /* all zero = ImageNet */
    float crop_pct;           /* EVAL, as chute_loader_options; 0 = 0.875 */
    uint32_t resize_size;     /* EVAL, as chute_loader_options */
    int no_dct_scale;         /* as chute_loader_options */
    uint64_t max_pixels;      /* default 64 Mpx */
    uint64_t max_sample_bytes;/* default 64 MiB */
    uint32_t max_batch;       /* requests per batch, 1..1024; default 8 */
    uint32_t max_delay_us;    /* deadline of a batch's oldest request; default 1000,
                                 at most 10 s.  For no batching set max_batch = 1. */
    uint32_t workers;         /* decode threads; default chute_default_workers() */
    int unordered;            /* nonzero: a finished batch is handed out even if an
                                 earlier one is still in progress (default: batches,
                                 and so requests, come out in submission order) */
    uint32_t queue_capacity;  /* requests admitted and not yet released; default
                                 the larger of 4 * max_batch and 64, at most 65536 */
    int pretouch;             /* nonzero: batch buffers rounded up to 2 MiB and
                                 pre-faulted at create, as the training loader's
                                 ring (for comparing first-request latency) */
    uint32_t worker_slice_us; /* the CPU slice each worker asks the scheduler for,
                                 100..100000 us; 0 = the kernel's default (also
                                 when the thread that creates the session has a
                                 slice of its own: it is not passed on).  Linux
                                 6.12+ (EEVDF; sched_setattr's sched_runtime, nice
                                 and policy kept), a no-op elsewhere.  When the
                                 workers share the cores with the threads that
                                 submit and poll, a thread woken while the workers
                                 decode waits out a worker's slice (0.7 ms x
                                 (1 + log2 CPUs, at most 8)) unless its own slice
                                 is shorter: give the request path a short slice
                                 (sched_setattr on those threads, as `chute bench
                                 --preset latency` does, after creating the
                                 session) or, where the caller cannot, the workers
                                 a longer one here.  Shares of CPU do not change. */
    uint32_t stats_shm;       /* as chute_loader_options.stats_shm: 1 (the default)
                                 publishes the session's requests/s, queue and
                                 latency for `chute top` (docs/TOP.md);
                                 CHUTE_STATS_SHM_OFF: no segment, no thread */
} chute_infer_options;

/* Create a session; its worker threads start at once and wait for
 * requests.  Any thread; returns the handle in *out.                   */
CHUTE_API int chute_infer_create(const chute_infer_options *opt, chute_infer **out,
                                 chute_error *err);

/* Flag for chute_infer_submit: copy the bytes (the caller may reuse them
 * as soon as submit returns).  Without it the bytes are borrowed: keep
 * them unchanged until the request's batch has been handed out by
 * chute_infer_poll. */
#define CHUTE_INFER_COPY 1u

/* Submit one encoded image with the caller's id (ids need not be unique
 * for the library; they are handed back as given).  Never blocks on
 * decoding: returns CHUTE_EBUSY at once when queue_capacity requests are
 * admitted and not yet released (or every batch buffer is in use),
 * CHUTE_EINVAL after chute_infer_close.  Once admitted (CHUTE_OK) a
 * request comes back through chute_infer_poll exactly once, failed if
 * need be (a copy that finds no memory fails it with CHUTE_ENOMEM, an
 * undecodable image with its decoder's status).  Thread-safe: any number of threads may submit at once.
 * `err` (may be NULL) gets the reason of a refusal.                    */
CHUTE_API int chute_infer_submit(chute_infer *s, const void *data, size_t len, uint64_t id,
                                 unsigned flags, chute_error *err);
/* The same for a file: the path is copied; the file is read by a worker
 * (an unreadable file fails that request with CHUTE_EIO/ENOTFOUND).    */
CHUTE_API int chute_infer_submit_path(chute_infer *s, const char *path, uint64_t id,
                                      chute_error *err);

/* Next batch of finished requests.  Waits up to timeout_us (0: do not
 * wait; negative: forever).  Returns CHUTE_OK and a batch, CHUTE_EINTERRUPTED
 * when none was ready in time, CHUTE_END once the session is closed and
 * every request has been handed out, CHUTE_EBUSY if the caller holds
 * every batch buffer.  One polling thread at a time.                   */
CHUTE_API int chute_infer_poll(chute_infer *s, int64_t timeout_us, chute_infer_batch **out);

typedef struct chute_infer_view {
    void *data;               /* count samples, as chute_batch_view */
    chute_dtype dtype;
    chute_layout layout;
    int64_t shape[4];
    int64_t strides[4];       /* in elements */
    size_t nbytes;
    const uint64_t *ids;      /* count request ids */
    const int32_t *status;    /* count statuses: CHUTE_OK, or why that request failed */
    uint32_t count;
    uint32_t failed;          /* requests with status != CHUTE_OK */
    uint64_t batch_index;     /* batches of this session numbered in submission order */
} chute_infer_view;

/* Views and messages stay valid until the batch is released. */
CHUTE_API void chute_infer_batch_view(const chute_infer_batch *b, chute_infer_view *out);
/* Why request k of the batch failed ("" if it did not). */
CHUTE_API const char *chute_infer_batch_errmsg(const chute_infer_batch *b, uint32_t k);
/* Give a batch back; any thread, exactly once, before destroy. */
CHUTE_API void chute_infer_batch_release(chute_infer_batch *b);

/* Stop accepting requests: later submits fail with CHUTE_EINVAL;
 * requests already admitted are finished and handed out; then poll
 * returns CHUTE_END.  Any thread; idempotent.                          */
CHUTE_API void chute_infer_close(chute_infer *s);
/* Join the workers and free everything.  No submit or poll may be in
 * progress or follow (close first to turn late submits into errors).
 * Accepts NULL.                                                         */
CHUTE_API void chute_infer_destroy(chute_infer *s);

/* Per-request latencies, in ns: queue (submit to a worker starting it),
 * decode, transform, total (submit to the poll that hands it out).     */
typedef struct chute_latency {
    uint64_t count;
    uint64_t p50_ns, p90_ns, p99_ns, p999_ns, max_ns; /* bucket midpoints, ~6% */
    uint64_t mean_ns;
} chute_latency;

typedef struct chute_infer_stats {
    uint64_t submitted;       /* requests admitted */
    uint64_t rejected_busy;   /* submits refused with CHUTE_EBUSY */
    uint64_t completed;       /* requests handed out (failed ones included) */
    uint64_t failed;
    uint64_t batches;         /* batches handed out */
    uint64_t closed_by_deadline; /* of those: closed by max_delay_us, not full */
    uint32_t workers;
    uint32_t slots;           /* batch buffers */
    size_t slot_bytes;        /* bytes of one batch buffer */
    chute_latency queue, decode, transform, total;
    uint32_t worker_slice_us; /* the slice the workers run with, as the kernel reports
                                 it (worker_slice_us or the kernel's default) once
                                 they have started; 0 where it reports none (before
                                 Linux 6.12) */
} chute_infer_stats;

/* Snapshot; any thread. */
CHUTE_API void chute_infer_get_stats(const chute_infer *s, chute_infer_stats *out);

/* When request k of a handed-out batch went through the session, in
 * CLOCK_MONOTONIC nanoseconds (the clock of clock_gettime, so a caller
 * can subtract its own timestamps): submit_ns when chute_infer_submit
 * was entered, start_ns when a worker took it, decoded_ns when its
 * pixels were decoded, done_ns when its tensor was written.  done_ns -
 * start_ns is that request's decode+transform (read included for a
 * path); a request that never reached a worker (a failed copy) has
 * start/decoded/done 0.  Returns CHUTE_EINVAL for k >= count.  Valid
 * until the batch is released; the thread holding the batch.         */
typedef struct chute_infer_timing {
    uint64_t submit_ns, start_ns, decoded_ns, done_ns;
} chute_infer_timing;
CHUTE_API int chute_infer_batch_timing(const chute_infer_batch *b, uint32_t k,
                                       chute_infer_timing *out);

/* Arrow record batches as a dataset (src/format/fmt_arrow.c).        */
/* ------------------------------------------------------------------ */
struct ArrowArrayStream; /* include/chute_arrow.h (the Arrow C Stream Interface) */
struct ArrowSchema;
struct ArrowArray;

/* A dataset over the record batches of an Arrow C stream, one sample per
 * row, rows numbered across batches in stream order; format name "arrow".
 * The stream is consumed to its end during the call and released (its
 * release callback called; it is left with release == NULL) whatever the
 * outcome.  The batches are MOVED into the dataset, never copied: their
 * buffers stay the producer's until chute_dataset_close, which calls each
 * batch's and the schema's release (from whichever thread closes it).
 * Columns (the top-level struct's children), by Arrow format:
 *   int8..int64, uint8..uint64, bool   int64 scalar field (a uint64 above
 *                                      INT64_MAX is corrupt when read)
 *   float32, float64                   float32 scalar field (float64 rounded)
 *   fixed_size_list<...<numeric>>      tensor field, the leaf's dtype, shape
 *                                      the list sizes (nested lists: dims)
 *   binary, large_binary, utf8, large_utf8   bytes field
 *   struct<bytes: binary, path: utf8>  (a Hugging Face datasets Image
 *                                      column) or binary, named by
 *                                      opt->image_key: the sample's image,
 *                                      decoded (JPEG, PNG, ...) and
 *                                      transformed as any image
 * opt->image_key (NULL: "image" when such a column exists; without one the
 * dataset has no images, chute_dataset_has_images 0) and opt->label_key
 * (NULL: "label" when present; an integer column; label_offset applies;
 * none: every label 0) pick the two columns; every other supported column
 * is a field of its name; a column of another type is CHUTE_EUNSUPPORTED
 * unless it is neither image nor label and then it is left out.  A null
 * label is CHUTE_ECORRUPT at open naming batch and row; a null value in a
 * field or the image is CHUTE_ECORRUPT when the sample is read (the
 * loader's on_corrupt policy counts and skips it, or fails), naming the
 * column, batch and row.
 * Trust boundary: the C Data Interface carries no buffer sizes.  Open
 * checks everything it can (format strings, n_buffers and n_children per
 * type, non-negative lengths/offsets/null_count with checked arithmetic,
 * a validity buffer wherever null_count > 0, non-NULL data buffers, child
 * lengths covering the parent's rows, and every offsets entry in range and
 * monotone), so a lying producer gets CHUTE_ECORRUPT naming the column and
 * batch, never a read out of those bounds; that each buffer really holds
 * the bytes these numbers imply (the last offset for a data buffer) is the
 * producer's promise, as for every Arrow consumer.  Errors from the stream
 * itself are CHUTE_EIO with get_last_error's text.
 * Thread-safety: the call uses the stream from the calling thread only;
 * the dataset is then immutable and as thread-safe as any other.  The
 * fields "format", "kind" and "cache_*" of opt are ignored.
 * Null defaults: opt->schema, if set, is "NAME[:TYPE]=DEFAULT,..." (the
 * shape of CSV's schema; TYPE, optional, must be what the column is
 * delivered as: int64, float32 or bytes) and gives a value for the null
 * cells of column NAME: a null label, scalar, bytes value or fixed-size
 * list row reads as DEFAULT (a null element of a list as DEFAULT in that
 * element only; DEFAULT range-checked against the list's element type at
 * open).  A null with no default is the CHUTE_ECORRUPT above, its message
 * naming the sample, batch (or unit), row and column.  A column that is not
 * in the schema is CHUTE_ENOTFOUND, an image column or one left out
 * CHUTE_EUNSUPPORTED/CHUTE_EINVAL, a DEFAULT that does not parse
 * CHUTE_EINVAL. */
CHUTE_API int chute_dataset_open_arrow(struct ArrowArrayStream *stream,
                                       const chute_dataset_options *opt,
                                       chute_dataset **out_ds, chute_error *err);

/* Arrow data larger than memory: a producer of units (Parquet row groups)
 * loaded on demand.  schema: the batches' schema, MOVED in (left with
 * release == NULL).  rows[u] (1..2^48) the rows of unit u, n_units of them,
 * copied; rows are numbered across units in order.  labels: one int64 per
 * row, copied, required when the schema has a label column (see
 * chute_dataset_open_arrow for how columns are picked), else ignored.
 * load(ctx, u, out, msg, msg_cap) fills *out with unit u as one batch (a
 * struct array of schema's shape, exactly rows[u] rows, ownership passed to
 * the library) and returns 0, or nonzero with a message in msg (the read
 * fails with CHUTE_EIO naming the unit, CHUTE_ECORRUPT if it returned
 * that); it is called from worker threads, several at once for different
 * units, so it must be thread-safe.  Each loaded batch is checked like a
 * streamed one (chute_dataset_open_arrow's trust boundary).  At most
 * max_resident units (0: 2) are held; a load past that releases the least
 * recently used unit no read is using, waiting for one if all are in use.
 * release(ctx), if set, is called once when the dataset closes (or when
 * this call fails).  The unit is the shuffle unit (shuffle "shards":
 * row-group granularity plus the seeded shuffle buffer).
 * Thread-safety: the dataset may be read from any number of threads;
 * close it after every loader over it is destroyed. */
typedef struct chute_arrow_units {
    struct ArrowSchema *schema;
    uint64_t n_units;
    const uint64_t *rows;
    const int64_t *labels;
    uint32_t max_resident;
    int (*load)(void *ctx, uint64_t unit, struct ArrowArray *out, char *msg, size_t msg_cap);
    void (*release)(void *ctx);
    void *ctx;
    const char *const *unit_names; /* n_units names for messages ("f.parquet row group
                                      3"), copied; NULL: "unit N" */
} chute_arrow_units;

CHUTE_API int chute_dataset_open_arrow_units(chute_arrow_units *src,
                                             const chute_dataset_options *opt,
                                             chute_dataset **out_ds, chute_error *err);

/* Units mode counters: loads so far, the most units ever resident at once,
 * those resident now (any out_ may be NULL).  CHUTE_EINVAL if ds was not
 * opened by chute_dataset_open_arrow_units.  Any thread. */
CHUTE_API int chute_dataset_arrow_units_stats(const chute_dataset *ds, uint64_t *out_loads,
                                              uint32_t *out_peak_resident,
                                              uint32_t *out_resident);

#ifdef __cplusplus
}
#endif
#endif /* CHUTE_H */
