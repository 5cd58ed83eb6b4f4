/*
 * dlpack.h — the few DLPack definitions the chute extension produces.
 *
 * These mirror the DLPack ABI (https://dmlc.github.io/dlpack/latest/,
 * dlpack.h v1.0): the legacy DLManagedTensor carried in a "dltensor"
 * capsule, and DLManagedTensorVersioned carried in "dltensor_versioned".
 * Only the CPU device and the dtypes chute emits are named.  The layouts
 * are part of a stable ABI shared by PyTorch, NumPy and JAX; they must
 * never be changed here.
 */
#ifndef CHUTE_PY_DLPACK_H
#define CHUTE_PY_DLPACK_H

#include <stdint.h>

enum { CHUTE_DL_CPU = 1 };                       /* kDLCPU */
enum { CHUTE_DL_INT = 0, CHUTE_DL_UINT = 1, CHUTE_DL_FLOAT = 2 };

#define CHUTE_DLPACK_MAJOR 1
#define CHUTE_DLPACK_MINOR 0
#define CHUTE_DLPACK_FLAG_READ_ONLY (1ull << 0)
#define CHUTE_DLPACK_FLAG_IS_COPIED (1ull << 1)

typedef struct {
    int32_t device_type; /* an enum (int-sized) in dlpack.h */
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif
