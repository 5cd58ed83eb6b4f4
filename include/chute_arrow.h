/*
 * chute_arrow.h — the Arrow C Data Interface and C Stream Interface, the
 * stable C ABI that any Arrow producer (Arrow C++, pyarrow, arrow-rs,
 * nanoarrow, DuckDB, Polars...) exports, so chute can take its record
 * batches without linking libarrow.
 *
 * Why a copy: the specification
 * (https://arrow.apache.org/docs/format/CDataInterface.html and
 * CStreamInterface.html) asks consumers to copy these definitions verbatim,
 * each guarded by its macro so that a program which also includes Arrow's
 * own abi.h (or nanoarrow's) sees each struct defined exactly once.  Include
 * it before or after include/chute.h, which only forward-declares
 * struct ArrowArrayStream for chute_dataset_open_arrow.
 */
#ifndef CHUTE_ARROW_H
#define CHUTE_ARROW_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    /* Array type description */
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;

    /* Release callback */
    void (*release)(struct ArrowSchema *);
    /* Opaque producer-specific data */
    void *private_data;
};

struct ArrowArray {
    /* Array data description */
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;

    /* Release callback */
    void (*release)(struct ArrowArray *);
    /* Opaque producer-specific data */
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
    /* Callbacks providing stream functionality */
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);

    /* Release callback */
    void (*release)(struct ArrowArrayStream *);

    /* Opaque producer-specific data */
    void *private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

#ifdef __cplusplus
}
#endif
#endif /* CHUTE_ARROW_H */
