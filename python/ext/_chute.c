/*
 * _chute.c — the CPython binding of libchute (module chute._chute).
 *
 * What it does.  It wraps the public C API (include/chute.h, nothing
 * else) in four types: Dataset, _Loader, Batch and Array.  The friendly
 * chute.Loader in python/chute/loader.py is built on _Loader; everything
 * that needs speed or must run without the GIL lives here.
 *
 * Lifetimes, the one thing this file must get right.  A batch's pixels
 * live in a slot of the loader's ring; chute_loader_destroy unmaps the
 * ring and chute_dataset_close frees what the loader borrows.  Tensors
 * made from a batch (via DLPack, __array_interface__ or the buffer
 * protocol) may outlive the iteration, the Loader object, even the
 * interpreter's interest in chute.  So ownership is a chain of plain C
 * reference counts, not Python objects:
 *
 *     export / Array / Batch --> batch_ref --> ld_core --> ds_ref
 *
 * batch_ref owns one ring slot (released with chute_batch_release when
 * its count reaches zero), ld_core owns the chute_loader, ds_ref the
 * chute_dataset.  The counts are atomics, so a DLPack deleter — which
 * PyTorch may run on any thread, without the GIL — never touches Python.
 *
 * Holding many batches.  The library lends at most max_held slots to the
 * consumer.  With hold_policy "copy" (the default) the binding asks the
 * library for max_held + 1 and, when the consumer already holds max_held
 * zero-copy batches, copies the next batch out of its slot and returns the
 * slot at once.  Memory already handed out can never move, so copying
 * the *new* batch is the only fallback that keeps every tensor valid.
 * With "raise" the binding runs the garbage collector once and then
 * raises BusyError.
 *
 * Waiting.  next() releases the GIL and waits in slices of 100 ms with
 * chute_loader_next_timeout, calling PyErr_CheckSignals between slices,
 * so Ctrl-C interrupts a stalled pipeline promptly.
 *
 * Threads.  Library calls on one loader must come from one thread at a
 * time; a _Loader refuses a call that arrives while another thread is
 * inside next() (the GIL is released there) instead of racing.  Batch
 * release is thread-safe in the library and needs no guard.
 *
 * fork().  A _Loader remembers the pid that created it.  In a forked
 * child (multiprocessing with fork, a DataLoader wrapping a chute.Loader)
 * its worker threads do not exist; every call that would use them raises
 * RuntimeError saying so, and freeing it in the child frees memory
 * without joining threads (the library's destroy knows it is in a child).
 * A Dataset has no threads and works in a child.
 *
 * The module keeps its exception types in static variables, so it
 * supports one interpreter per process (no sub-interpreters).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chute.h"
#include "common/loader_options.h"
#include "stats/tboard.h"
#include "dlpack.h"

#define WAIT_SLICE_MS 100

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Unpack2 _PyFloat_Unpack2
#endif

/* ------------------------------------------------------------------ */
/* Exceptions                                                          */
/* ------------------------------------------------------------------ */

static PyObject *ChuteError;
/* Indexed by -status for CHUTE_EINVAL (-1) .. CHUTE_EINTERRUPTED (-10). */
static PyObject *status_exc[11];

static const struct {
    int code;
    const char *name;
    const char *builtin; /* second base, or NULL */
    const char *doc;
} exc_table[] = {
    {CHUTE_EINVAL, "InvalidArgumentError", "ValueError", "A bad argument or option (CHUTE_EINVAL)."},
    {CHUTE_ENOMEM, "OutOfMemoryError", "MemoryError",
     "An allocation failed or a memory budget was exceeded (CHUTE_ENOMEM)."},
    {CHUTE_EIO, "ChuteIOError", "OSError", "Opening, reading or writing failed (CHUTE_EIO)."},
    {CHUTE_EFORMAT, "FormatError", NULL,
     "Not a dataset, shard or image chute understands (CHUTE_EFORMAT)."},
    {CHUTE_ECORRUPT, "CorruptDataError", NULL,
     "A recognised format with damaged data, e.g. a corrupt sample under "
     "on_corrupt='fail' (CHUTE_ECORRUPT)."},
    {CHUTE_ELIMIT, "LimitExceededError", NULL,
     "Input exceeds a configured limit such as max_pixels (CHUTE_ELIMIT)."},
    {CHUTE_ENOTFOUND, "NotFoundError", "FileNotFoundError",
     "A path does not exist or a dataset is empty (CHUTE_ENOTFOUND)."},
    {CHUTE_EBUSY, "BusyError", NULL,
     "The consumer holds every batch buffer it may hold (CHUTE_EBUSY)."},
    {CHUTE_EUNSUPPORTED, "UnsupportedError", NULL,
     "A feature not built into this libchute (CHUTE_EUNSUPPORTED)."},
    {CHUTE_EINTERRUPTED, "CancelledError", NULL,
     "A call was cancelled before it finished (CHUTE_EINTERRUPTED)."},
};

/* Raise the ChuteError subclass for `status` with `message`. */
static PyObject *raise_status(int status, const char *message)
{
    PyObject *type = ChuteError;
    if (status < 0 && status >= -10 && status_exc[-status])
        type = status_exc[-status];
    const char *m = message && message[0] ? message : chute_status_name(status);
    PyObject *args = Py_BuildValue("(s)", m);
    if (!args)
        return NULL;
    PyObject *exc = PyObject_Call(type, args, NULL);
    Py_DECREF(args);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(status);
    PyObject *name = PyUnicode_FromString(chute_status_name(status));
    if (code && name) {
        PyObject_SetAttrString(exc, "code", code);
        PyObject_SetAttrString(exc, "status", name);
    }
    Py_XDECREF(code);
    Py_XDECREF(name);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ */
/* Reference-counted owners (no Python inside)                          */
/* ------------------------------------------------------------------ */

typedef struct ds_ref {
    atomic_long refs;
    chute_dataset *ds;
} ds_ref;

static void ds_ref_decref(ds_ref *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
        chute_dataset_close(r->ds);
        free(r);
    }
}

typedef struct ld_core {
    atomic_long refs;
    chute_loader *ld;
    ds_ref *ds;
    atomic_long zero_copy_live; /* batches currently holding a ring slot */
    atomic_ullong copied;       /* batches copied out because of the hold limit */
} ld_core;

static void ld_core_decref(ld_core *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
        chute_loader_destroy(c->ld);
        ds_ref_decref(c->ds);
        free(c);
    }
}

typedef struct batch_ref {
    atomic_long refs;
    ld_core *core;
    chute_batch *b;     /* the ring slot, or NULL once copied out */
    void *owned;        /* malloc'd copy of pixels, labels, indices */
    chute_batch_view v; /* points into the slot or into `owned` */
    chute_field_view *fv; /* the loader's typed fields (nfv), into the slot or `owned` */
    uint32_t nfv;
} batch_ref;

static void batch_ref_incref(batch_ref *r) { atomic_fetch_add(&r->refs, 1); }

static void batch_ref_decref(batch_ref *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
        if (r->b) {
            chute_batch_release(r->b);
            atomic_fetch_sub(&r->core->zero_copy_live, 1);
        }
        free(r->owned);
        free(r->fv);
        ld_core_decref(r->core);
        free(r);
    }
}

/* ------------------------------------------------------------------ */
/* Array: one tensor of a batch (images, labels or indices).            */
/* ------------------------------------------------------------------ */

enum { ARR_F32 = 0, ARR_U8 = 1, ARR_F16 = 2, ARR_I64 = 3 };
/* Typed fields: the rest of chute_dtype, in its order (ARR type == dtype). */
enum { ARR_I32 = 4, ARR_F64 = 5, ARR_I8 = 6, ARR_I16 = 7, ARR_U16 = 8, ARR_U32 = 9, ARR_U64 = 10,
       ARR_BOOL = 11 };
#define ARR_MAXDIM (CHUTE_FIELD_MAX_DIMS + 1)
#define CHUTE_DL_BOOL 6 /* kDLBool */

static const struct {
    const char *name;
    const char *typestr; /* without byte-order character */
    const char *fmt;     /* buffer protocol format */
    int code, bits;
    Py_ssize_t itemsize;
} arr_types[] = {
    {"float32", "f4", "f", CHUTE_DL_FLOAT, 32, 4},
    {"uint8", "u1", "B", CHUTE_DL_UINT, 8, 1},
    {"float16", "f2", "e", CHUTE_DL_FLOAT, 16, 2},
    {"int64", "i8", "q", CHUTE_DL_INT, 64, 8},
    {"int32", "i4", "i", CHUTE_DL_INT, 32, 4},
    {"float64", "f8", "d", CHUTE_DL_FLOAT, 64, 8},
    {"int8", "i1", "b", CHUTE_DL_INT, 8, 1},
    {"int16", "i2", "h", CHUTE_DL_INT, 16, 2},
    {"uint16", "u2", "H", CHUTE_DL_UINT, 16, 2},
    {"uint32", "u4", "I", CHUTE_DL_UINT, 32, 4},
    {"uint64", "u8", "Q", CHUTE_DL_UINT, 64, 8},
    {"bool", "b1", "?", CHUTE_DL_BOOL, 8, 1},
};

typedef struct {
    PyObject_HEAD
    batch_ref *ref;
    void *data;
    int type;
    int ndim;
    int64_t shape[ARR_MAXDIM];
    int64_t strides[ARR_MAXDIM]; /* in elements */
    Py_ssize_t shape_ss[ARR_MAXDIM], strides_ss[ARR_MAXDIM]; /* buffer protocol (bytes) */
    int dev_type, dev_id;     /* DLPack device: kDLCPU, or kDLCUDA for a CUDA loader's images */
} ArrayObject;

enum { CHUTE_DL_CUDA = 2 }; /* kDLCUDA */

/* Host-only access (buffer protocol, __array_interface__, tolist) to a
 * CUDA batch's images: an error saying how to get at them instead. */
static int host_only(const ArrayObject *a, PyObject *exc)
{
    if (a->dev_type == CHUTE_DL_CPU)
        return 0;
    PyErr_Format(exc, "this chute.Array lives in CUDA memory (cuda:%d); use torch.from_dlpack "
                      "(or any DLPack consumer) to get a CUDA tensor", a->dev_id);
    return -1;
}

static PyTypeObject ArrayType;

static PyObject *array_new(batch_ref *ref, void *data, int type, int ndim, const int64_t *shape)
{
    ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
    if (!a)
        return NULL;
    batch_ref_incref(ref);
    a->ref = ref;
    a->data = data;
    a->type = type;
    a->ndim = ndim;
    /* The images of a CUDA loader's batch are device memory; labels and
     * indices stay on the host. */
    int on_dev = ref->v.device_type == CHUTE_DL_CUDA && data == ref->v.data;
    a->dev_type = on_dev ? CHUTE_DL_CUDA : CHUTE_DL_CPU;
    a->dev_id = on_dev ? ref->v.device_id : 0;
    int64_t st = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        a->shape[i] = shape[i];
        a->strides[i] = st;
        a->shape_ss[i] = (Py_ssize_t)shape[i];
        a->strides_ss[i] = (Py_ssize_t)(st * arr_types[type].itemsize);
        st *= shape[i];
    }
    return (PyObject *)a;
}

static void Array_dealloc(ArrayObject *a)
{
    batch_ref_decref(a->ref);
    PyObject_Free(a);
}

static int64_t array_numel(const ArrayObject *a)
{
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++)
        n *= a->shape[i];
    return n;
}

static PyObject *shape_tuple(const ArrayObject *a)
{
    PyObject *t = PyTuple_New(a->ndim);
    if (!t)
        return NULL;
    for (int i = 0; i < a->ndim; i++) {
        PyObject *v = PyLong_FromLongLong(a->shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *Array_get_shape(ArrayObject *a, void *c) { return shape_tuple(a); }
static PyObject *Array_get_dtype(ArrayObject *a, void *c)
{
    return PyUnicode_FromString(arr_types[a->type].name);
}
static PyObject *Array_get_ndim(ArrayObject *a, void *c) { return PyLong_FromLong(a->ndim); }
static PyObject *Array_get_nbytes(ArrayObject *a, void *c)
{
    return PyLong_FromLongLong(array_numel(a) * arr_types[a->type].itemsize);
}
static PyObject *Array_get_data_ptr(ArrayObject *a, void *c)
{
    return PyLong_FromVoidPtr(a->data);
}
static PyObject *Array_get_device(ArrayObject *a, void *c)
{
    if (a->dev_type == CHUTE_DL_CPU)
        return PyUnicode_FromString("cpu");
    return PyUnicode_FromFormat("cuda:%d", a->dev_id);
}
static PyObject *Array_get_copied(ArrayObject *a, void *c)
{
    return PyBool_FromLong(a->ref->b == NULL);
}

static PyObject *Array_get_array_interface(ArrayObject *a, void *c)
{
    if (host_only(a, PyExc_AttributeError))
        return NULL;
    const uint16_t probe = 1;
    char typestr[4];
    typestr[0] = arr_types[a->type].itemsize == 1 ? '|' : (*(const uint8_t *)&probe ? '<' : '>');
    memcpy(typestr + 1, arr_types[a->type].typestr, 3);
    PyObject *shape = shape_tuple(a);
    if (!shape)
        return NULL;
    return Py_BuildValue("{s:N,s:s,s:(N,O),s:O,s:i}", "shape", shape, "typestr", typestr, "data",
                         PyLong_FromVoidPtr(a->data), Py_False, "strides", Py_None, "version", 3);
}

static PyObject *Array_dlpack_device(ArrayObject *a, PyObject *unused)
{
    return Py_BuildValue("(ii)", a->dev_type, a->dev_id);
}

/* What a DLPack consumer holds: the managed tensor plus shape/strides
 * storage, and either a batch reference or a private copy.              */
typedef struct export_ctx {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } m;
    int64_t shape[ARR_MAXDIM], strides[ARR_MAXDIM];
    batch_ref *ref;
    void *copy;
} export_ctx;

static void export_free(export_ctx *x)
{
    if (x->ref)
        batch_ref_decref(x->ref);
    free(x->copy);
    free(x);
}

/* The deleters may run on any thread without the GIL: no Python here. */
static void legacy_deleter(DLManagedTensor *m) { export_free((export_ctx *)m->manager_ctx); }
static void versioned_deleter(DLManagedTensorVersioned *m)
{
    export_free((export_ctx *)m->manager_ctx);
}

static void legacy_capsule_destructor(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor"))
        return; /* consumed ("used_dltensor"): the consumer calls the deleter */
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter)
        m->deleter(m);
}

static void versioned_capsule_destructor(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor_versioned"))
        return;
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m && m->deleter)
        m->deleter(m);
}

/* __dlpack__ of a CUDA batch's images (the DLPack stream protocol): the
 * consumer's `stream` (None: the legacy default stream, 1; 2: per-thread
 * default; -1: no synchronisation) waits for chute's event, and the
 * batch's slot is reused only after the work queued on that stream by the
 * time the last tensor is freed (chute_batch_use_stream).  No copy. */
static PyObject *cuda_dlpack(ArrayObject *a, PyObject *stream, PyObject *max_version,
                             PyObject *dl_device, PyObject *copy)
{
    if (dl_device != Py_None) {
        int dt = 0, di = 0;
        if (!PyArg_ParseTuple(dl_device, "ii:dl_device", &dt, &di))
            return NULL;
        if (dt != a->dev_type || di != a->dev_id) {
            PyErr_Format(PyExc_BufferError, "this chute.Array lives on cuda:%d only", a->dev_id);
            return NULL;
        }
    }
    if (copy != Py_None && PyObject_IsTrue(copy) == 1) {
        PyErr_SetString(PyExc_BufferError,
                        "copy=True of a CUDA batch: take it zero-copy and .clone() the tensor");
        return NULL;
    }
    long long sp = 1;
    if (stream != Py_None) {
        sp = PyLong_AsLongLong(stream);
        if (sp == -1 && PyErr_Occurred())
            return NULL;
        if (sp == 0) {
            PyErr_SetString(PyExc_ValueError, "stream=0 is ambiguous for CUDA (DLPack): pass 1 "
                                              "for the legacy default stream, 2 for per-thread");
            return NULL;
        }
    }
    if (!a->ref->b) {
        PyErr_SetString(PyExc_BufferError, "this CUDA batch was already released");
        return NULL;
    }
    if (sp != -1) {
        int rc = chute_batch_use_stream(a->ref->b, (void *)(intptr_t)sp);
        if (rc != CHUTE_OK)
            return raise_status(rc, "chute_batch_use_stream failed (a CUDA error on the "
                                    "consumer's stream)");
    }
    int versioned = 0;
    if (max_version != Py_None) {
        unsigned int major = 0, minor = 0;
        if (!PyArg_ParseTuple(max_version, "II:max_version", &major, &minor))
            return NULL;
        versioned = major >= 1;
    }
    export_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return PyErr_NoMemory();
    batch_ref_incref(a->ref);
    x->ref = a->ref;
    memcpy(x->shape, a->shape, sizeof x->shape);
    memcpy(x->strides, a->strides, sizeof x->strides);
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = a->data;
    t.device.device_type = CHUTE_DL_CUDA;
    t.device.device_id = a->dev_id;
    t.ndim = a->ndim;
    t.dtype.code = (uint8_t)arr_types[a->type].code;
    t.dtype.bits = (uint8_t)arr_types[a->type].bits;
    t.dtype.lanes = 1;
    t.shape = x->shape;
    t.strides = x->strides;
    PyObject *cap;
    if (versioned) {
        x->m.versioned.version.major = CHUTE_DLPACK_MAJOR;
        x->m.versioned.version.minor = CHUTE_DLPACK_MINOR;
        x->m.versioned.manager_ctx = x;
        x->m.versioned.deleter = versioned_deleter;
        x->m.versioned.dl_tensor = t;
        cap = PyCapsule_New(&x->m.versioned, "dltensor_versioned", versioned_capsule_destructor);
    } else {
        x->m.legacy.dl_tensor = t;
        x->m.legacy.manager_ctx = x;
        x->m.legacy.deleter = legacy_deleter;
        cap = PyCapsule_New(&x->m.legacy, "dltensor", legacy_capsule_destructor);
    }
    if (!cap)
        export_free(x);
    return cap;
}

static PyObject *Array_dlpack(ArrayObject *a, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist, &stream, &max_version,
                                     &dl_device, &copy))
        return NULL;
    /* stream is meaningless for CPU memory; consumers pass None or -1. */
    if (a->dev_type == CHUTE_DL_CUDA)
        return cuda_dlpack(a, stream, max_version, dl_device, copy);
    if (dl_device != Py_None) {
        int dt = 0, di = 0;
        if (!PyArg_ParseTuple(dl_device, "ii:dl_device", &dt, &di))
            return NULL;
        if (dt != CHUTE_DL_CPU || di != 0) {
            PyErr_SetString(PyExc_BufferError, "chute arrays live in CPU memory only");
            return NULL;
        }
    }
    int do_copy = 0;
    if (copy != Py_None) {
        do_copy = PyObject_IsTrue(copy);
        if (do_copy < 0)
            return NULL;
    }
    int versioned = 0;
    if (max_version != Py_None) {
        unsigned int major = 0, minor = 0;
        if (!PyArg_ParseTuple(max_version, "II:max_version", &major, &minor))
            return NULL;
        versioned = major >= 1;
    }

    export_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return PyErr_NoMemory();
    void *data = a->data;
    if (do_copy) {
        size_t nb = (size_t)array_numel(a) * (size_t)arr_types[a->type].itemsize;
        x->copy = malloc(nb ? nb : 1);
        if (!x->copy) {
            free(x);
            return PyErr_NoMemory();
        }
        memcpy(x->copy, a->data, nb);
        data = x->copy;
    } else {
        batch_ref_incref(a->ref);
        x->ref = a->ref;
    }
    memcpy(x->shape, a->shape, sizeof x->shape);
    memcpy(x->strides, a->strides, sizeof x->strides);
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = CHUTE_DL_CPU;
    t.device.device_id = 0;
    t.ndim = a->ndim;
    t.dtype.code = (uint8_t)arr_types[a->type].code;
    t.dtype.bits = (uint8_t)arr_types[a->type].bits;
    t.dtype.lanes = 1;
    t.shape = x->shape;
    t.strides = x->strides;
    t.byte_offset = 0;

    PyObject *cap;
    if (versioned) {
        x->m.versioned.version.major = CHUTE_DLPACK_MAJOR;
        x->m.versioned.version.minor = CHUTE_DLPACK_MINOR;
        x->m.versioned.manager_ctx = x;
        x->m.versioned.deleter = versioned_deleter;
        x->m.versioned.flags = do_copy ? CHUTE_DLPACK_FLAG_IS_COPIED : 0;
        x->m.versioned.dl_tensor = t;
        cap = PyCapsule_New(&x->m.versioned, "dltensor_versioned", versioned_capsule_destructor);
    } else {
        x->m.legacy.dl_tensor = t;
        x->m.legacy.manager_ctx = x;
        x->m.legacy.deleter = legacy_deleter;
        cap = PyCapsule_New(&x->m.legacy, "dltensor", legacy_capsule_destructor);
    }
    if (!cap)
        export_free(x);
    return cap;
}

static int Array_getbuffer(ArrayObject *a, Py_buffer *view, int flags)
{
    if (host_only(a, PyExc_BufferError)) {
        view->obj = NULL;
        return -1;
    }
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && a->ndim > 1) {
        PyErr_SetString(PyExc_BufferError, "chute arrays are C-contiguous, not Fortran-contiguous");
        view->obj = NULL;
        return -1;
    }
    view->obj = (PyObject *)a;
    Py_INCREF(a);
    view->buf = a->data;
    view->itemsize = arr_types[a->type].itemsize;
    view->len = (Py_ssize_t)array_numel(a) * view->itemsize;
    view->readonly = 0;
    view->ndim = a->ndim;
    view->format = (flags & PyBUF_FORMAT) ? (char *)arr_types[a->type].fmt : NULL;
    view->shape = (flags & PyBUF_ND) ? a->shape_ss : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? a->strides_ss : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs Array_as_buffer = {(getbufferproc)Array_getbuffer, NULL};

static PyObject *elem_to_py(const ArrayObject *a, int64_t i)
{
    switch (a->type) {
    case ARR_F32:
        return PyFloat_FromDouble(((const float *)a->data)[i]);
    case ARR_U8:
        return PyLong_FromLong(((const uint8_t *)a->data)[i]);
    case ARR_F16: {
        double d = PyFloat_Unpack2((const char *)a->data + 2 * i, 1);
        return d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    }
    case ARR_I32:
        return PyLong_FromLong(((const int32_t *)a->data)[i]);
    case ARR_F64:
        return PyFloat_FromDouble(((const double *)a->data)[i]);
    case ARR_I8:
        return PyLong_FromLong(((const int8_t *)a->data)[i]);
    case ARR_I16:
        return PyLong_FromLong(((const int16_t *)a->data)[i]);
    case ARR_U16:
        return PyLong_FromLong(((const uint16_t *)a->data)[i]);
    case ARR_U32:
        return PyLong_FromUnsignedLong(((const uint32_t *)a->data)[i]);
    case ARR_U64:
        return PyLong_FromUnsignedLongLong(((const uint64_t *)a->data)[i]);
    case ARR_BOOL:
        return PyBool_FromLong(((const uint8_t *)a->data)[i] != 0);
    default:
        return PyLong_FromLongLong(((const int64_t *)a->data)[i]);
    }
}

static PyObject *tolist_rec(const ArrayObject *a, int dim, int64_t off)
{
    if (dim >= a->ndim || dim >= ARR_MAXDIM)
        return elem_to_py(a, off);
    PyObject *l = PyList_New((Py_ssize_t)a->shape[dim]);
    if (!l)
        return NULL;
    for (int64_t i = 0; i < a->shape[dim]; i++) {
        PyObject *v = tolist_rec(a, dim + 1, off + i * a->strides[dim]);
        if (!v) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

static PyObject *Array_tolist(ArrayObject *a, PyObject *unused)
{
    return host_only(a, PyExc_TypeError) ? NULL : tolist_rec(a, 0, 0);
}

static PyObject *Array_numpy(ArrayObject *a, PyObject *unused)
{
    if (host_only(a, PyExc_TypeError))
        return NULL;
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return NULL;
    PyObject *r = PyObject_CallMethod(np, "asarray", "O", (PyObject *)a);
    Py_DECREF(np);
    return r;
}

static Py_ssize_t Array_len(ArrayObject *a) { return a->ndim ? (Py_ssize_t)a->shape[0] : 0; }

static PyObject *Array_repr(ArrayObject *a)
{
    PyObject *shape = shape_tuple(a);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("chute.Array(shape=%R, dtype=%s%s)", shape,
                                       arr_types[a->type].name, a->ref->b ? "" : ", copied");
    Py_DECREF(shape);
    return r;
}

static PyMethodDef Array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))Array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "Export as a DLPack capsule without copying (unless copy=True).  The capsule keeps the\n"
     "batch's buffer alive until the consumer's tensor is freed."},
    {"__dlpack_device__", (PyCFunction)Array_dlpack_device, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(kDLCPU, 0): chute batches live in host memory."},
    {"numpy", (PyCFunction)Array_numpy, METH_NOARGS,
     "numpy()\n--\n\nA NumPy array viewing this memory (no copy); needs numpy."},
    {"tolist", (PyCFunction)Array_tolist, METH_NOARGS,
     "tolist()\n--\n\nThe values as (nested) Python lists."},
    {NULL},
};

static PyGetSetDef Array_getset[] = {
    {"shape", (getter)Array_get_shape, NULL, "Shape tuple, in the batch's layout order.", NULL},
    {"dtype", (getter)Array_get_dtype, NULL, "'float32', 'uint8', 'float16' or 'int64'.", NULL},
    {"ndim", (getter)Array_get_ndim, NULL, "Number of dimensions.", NULL},
    {"nbytes", (getter)Array_get_nbytes, NULL, "Bytes of data.", NULL},
    {"data_ptr", (getter)Array_get_data_ptr, NULL,
     "Address of the first element (inside the loader's ring unless copied).", NULL},
    {"copied", (getter)Array_get_copied, NULL,
     "True if the batch was copied out of the ring (hold limit reached).", NULL},
    {"device", (getter)Array_get_device, NULL, "'cpu', or 'cuda:N' for a CUDA loader's images.",
     NULL},
    {"__array_interface__", (getter)Array_get_array_interface, NULL,
     "NumPy array interface (version 3); numpy.asarray() views the memory without copying.",
     NULL},
    {NULL},
};

static PySequenceMethods Array_as_sequence = {.sq_length = (lenfunc)Array_len};

static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chute.Array",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_dealloc = (destructor)Array_dealloc,
    .tp_repr = (reprfunc)Array_repr,
    .tp_as_sequence = &Array_as_sequence,
    .tp_as_buffer = &Array_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zero-copy view of part of a batch (images, labels or indices).\n\n"
              "Implements __dlpack__/__dlpack_device__ (torch.from_dlpack, numpy.from_dlpack,\n"
              "jax.dlpack), the NumPy __array_interface__ and the buffer protocol.  The memory\n"
              "stays valid while this object or any tensor made from it is alive.",
    .tp_methods = Array_methods,
    .tp_getset = Array_getset,
};

/* ------------------------------------------------------------------ */
/* Batch                                                                */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    batch_ref *ref;
} BatchObject;

static PyTypeObject BatchType;

static void Batch_dealloc(BatchObject *b)
{
    batch_ref_decref(b->ref);
    PyObject_Free(b);
}

static PyObject *Batch_get_images(BatchObject *b, void *c)
{
    const chute_batch_view *v = &b->ref->v;
    if (!v->data) /* an image-less dataset (chute_dataset_has_images) */
        Py_RETURN_NONE;
    int type = v->dtype == CHUTE_DTYPE_UINT8 ? ARR_U8 : v->dtype == CHUTE_DTYPE_FLOAT16 ? ARR_F16
                                                                                       : ARR_F32;
    return array_new(b->ref, v->data, type, 4, v->shape);
}
static PyObject *Batch_get_labels(BatchObject *b, void *c)
{
    int64_t n = b->ref->v.count;
    return array_new(b->ref, b->ref->v.labels, ARR_I64, 1, &n);
}
/* Options mixup/cutmix: the float32 (N, num_classes) soft labels; None when off. */
static PyObject *Batch_get_soft_labels(BatchObject *b, void *c)
{
    if (!b->ref->v.soft_labels)
        Py_RETURN_NONE;
    int64_t shape[2] = {b->ref->v.count, b->ref->v.num_classes};
    return array_new(b->ref, b->ref->v.soft_labels, ARR_F32, 2, shape);
}
static PyObject *Batch_get_indices(BatchObject *b, void *c)
{
    /* uint64 in the library; sample indices are < 2^63, so int64 is exact
     * and is what PyTorch can represent. */
    int64_t n = b->ref->v.count;
    return array_new(b->ref, b->ref->v.indices, ARR_I64, 1, &n);
}
static PyObject *Batch_get_count(BatchObject *b, void *c) { return PyLong_FromUnsignedLong(b->ref->v.count); }
static PyObject *Batch_get_epoch(BatchObject *b, void *c)
{
    return PyLong_FromUnsignedLongLong(b->ref->v.epoch);
}
static PyObject *Batch_get_index(BatchObject *b, void *c)
{
    return PyLong_FromUnsignedLongLong(b->ref->v.batch_index);
}
static PyObject *Batch_get_copied(BatchObject *b, void *c) { return PyBool_FromLong(b->ref->b == NULL); }
static PyObject *Batch_get_data_ptr(BatchObject *b, void *c) { return PyLong_FromVoidPtr(b->ref->v.data); }
static PyObject *Batch_get_nbytes(BatchObject *b, void *c) { return PyLong_FromSize_t(b->ref->v.nbytes); }

static const chute_field_view *batch_field(BatchObject *b, PyObject *name)
{
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!n) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a field name must be a str");
        return NULL;
    }
    for (uint32_t k = 0; k < b->ref->nfv; k++)
        if (strcmp(b->ref->fv[k].name, n) == 0)
            return &b->ref->fv[k];
    PyErr_Format(PyExc_KeyError, "%s: not one of the loader's fields", n);
    return NULL;
}
static PyObject *Batch_field(BatchObject *b, PyObject *name)
{
    const chute_field_view *f = batch_field(b, name);
    return f ? array_new(b->ref, f->data, (int)f->dtype, (int)f->ndim, f->shape) : NULL;
}
static PyObject *Batch_field_lengths(BatchObject *b, PyObject *name)
{
    const chute_field_view *f = batch_field(b, name);
    if (!f)
        return NULL;
    if (!f->lengths) {
        PyErr_Format(PyExc_ValueError, "%s is not a bytes field", f->name);
        return NULL;
    }
    int64_t n = b->ref->v.count;
    return array_new(b->ref, f->lengths, ARR_I64, 1, &n);
}
static PyObject *Batch_get_fields(BatchObject *b, void *c)
{
    PyObject *t = PyTuple_New(b->ref->nfv);
    for (uint32_t k = 0; t && k < b->ref->nfv; k++) {
        PyObject *s = PyUnicode_FromString(b->ref->fv[k].name);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k, s);
    }
    return t;
}

static PyMethodDef Batch_methods[] = {
    {"field", (PyCFunction)Batch_field, METH_O,
     "field(name)\n--\n\nA typed field of the batch as a chute.Array (N, *shape); bytes "
     "fields are (N, field_bytes) uint8, sample j's value in its first field_lengths(name)[j] "
     "bytes.  Zero-copy, alive as long as the batch."},
    {"field_lengths", (PyCFunction)Batch_field_lengths, METH_O,
     "field_lengths(name)\n--\n\nA bytes field's lengths, int64 (N,)."},
    {NULL},
};

static PyObject *Batch_repr(BatchObject *b)
{
    const chute_batch_view *v = &b->ref->v;
    return PyUnicode_FromFormat("chute.Batch(epoch=%llu, index=%llu, count=%u%s)",
                                (unsigned long long)v->epoch, (unsigned long long)v->batch_index,
                                v->count, b->ref->b ? "" : ", copied");
}

static PyGetSetDef Batch_getset[] = {
    {"images", (getter)Batch_get_images, NULL, "The pixels as a chute.Array (N,C,H,W or N,H,W,C).",
     NULL},
    {"labels", (getter)Batch_get_labels, NULL, "int64 labels as a chute.Array of shape (N,).", NULL},
    {"soft_labels", (getter)Batch_get_soft_labels, NULL,
     "mixup/cutmix: float32 soft labels as a chute.Array of shape (N, num_classes) (the "
     "mixed one-hot labels); None when mixing is off.", NULL},
    {"indices", (getter)Batch_get_indices, NULL,
     "Dataset sample indices as an int64 chute.Array of shape (N,).", NULL},
    {"count", (getter)Batch_get_count, NULL, "Samples in this batch (N).", NULL},
    {"epoch", (getter)Batch_get_epoch, NULL, "Epoch this batch belongs to.", NULL},
    {"index", (getter)Batch_get_index, NULL, "Position of this batch within its epoch.", NULL},
    {"copied", (getter)Batch_get_copied, NULL,
     "True if the batch was copied out of the ring because max_held batches were held.", NULL},
    {"data_ptr", (getter)Batch_get_data_ptr, NULL, "Address of the pixel buffer.", NULL},
    {"nbytes", (getter)Batch_get_nbytes, NULL, "Bytes of pixel data.", NULL},
    {"fields", (getter)Batch_get_fields, NULL, "Names of the typed fields this batch has.", NULL},
    {NULL},
};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chute.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_repr = (reprfunc)Batch_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch from a loader.  Its buffer goes back to the loader's ring when this\n"
              "object and every array or tensor made from it have been freed.",
    .tp_getset = Batch_getset,
    .tp_methods = Batch_methods,
};

/* ------------------------------------------------------------------ */
/* Dataset                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    ds_ref *ref;
    PyObject *path;
} DatasetObject;

static PyTypeObject DatasetType;

static PyObject *opt_uint_from_py(const char *name, PyObject *v, unsigned long long *x, int *bad);

/* The integer keywords of Dataset, checked against their rows of
 * dataset_options.def before PyArg_ParseTupleAndKeywords converts them:
 * its "I" and "K" take True as 1 and cut an out-of-range value without a
 * word (read_delay_us=2**32 + 5 was 5).  An int within the row's bounds,
 * a bool only for a 0..1 row; else TypeError / ValueError naming it. */
static int ds_check_int_kwargs(PyObject *kw)
{
    const ch_opt_row *r = ch_dataset_opts();
    for (int i = 0; kw && i < ch_dataset_opt_count(); i++) {
        ch_opt_kind k = r[i].kind;
        if (k != CH_OPT_U32 && k != CH_OPT_U64 && k != CH_OPT_I32)
            continue;
        PyObject *v = PyDict_GetItemString(kw, r[i].name); /* borrowed */
        if (!v || v == Py_None || (PyBool_Check(v) && r[i].min == 0 && r[i].max == 1))
            continue;
        if (k == CH_OPT_I32) {
            if (PyBool_Check(v) || !PyIndex_Check(v)) {
                PyErr_Format(PyExc_TypeError, "%s must be an int, not %s", r[i].name,
                             Py_TYPE(v)->tp_name);
                return -1;
            }
            PyObject *o = PyNumber_Index(v);
            if (!o)
                return -1;
            int over = 0;
            long long x = PyLong_AsLongLongAndOverflow(o, &over);
            long long lo = (long long)(int64_t)r[i].min, hi = (long long)(int64_t)r[i].max;
            if (over || x < lo || x > hi) {
                PyErr_Format(PyExc_ValueError, "%s must be in %lld..%lld, got %S", r[i].name, lo,
                             hi, o);
                Py_DECREF(o);
                return -1;
            }
            Py_DECREF(o);
            continue;
        }
        unsigned long long x;
        int bad;
        PyObject *o = opt_uint_from_py(r[i].name, v, &x, &bad);
        if (!o)
            return -1;
        int zero_ok = r[i].def == 0 && r[i].min > 0; /* 0 = the default, as in C */
        if (bad || (x < r[i].min && !(zero_ok && x == 0)) || x > r[i].max) {
            PyErr_Format(PyExc_ValueError, "%s must be in %s%llu..%llu, got %S", r[i].name,
                         zero_ok ? "0, or " : "",
                         (unsigned long long)r[i].min, (unsigned long long)r[i].max, o);
            Py_DECREF(o);
            return -1;
        }
        Py_DECREF(o);
    }
    return 0;
}

static int Dataset_init(DatasetObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "kind", "read_delay_us", "inject_fail_sample",
                             "inject_fail_reads", "inject_fail_status", "format",
                             "label_offset", "image_key", "label_key", "extra_keys",
                             "cache_dir", "cache_bytes", "cache_block_bytes", "schema",
                             "csv_no_header", "index_dir", "audio_samples", "audio_rate",
                             "audio_channels_first", "cache_ram_bytes", "direct_io",
                             "coalesce_gap_bytes", "video_size", "frames_per_clip",
                             "clips_per_video", "clip_sampler", "num_indices_between_frames",
                             "ms_between_frames", "sampling_range_start",
                             "sampling_range_end", "video_max_side",
                             "video_max_decoded_bytes", NULL};
    const char *format = NULL, *image_key = NULL, *label_key = NULL, *extra_keys = NULL;
    const char *cache_dir = NULL;
    unsigned long long cache_bytes = 0, cache_block = 0;
    const char *schema = NULL;
    int csv_no_header = 0;
    const char *index_dir = NULL;
    unsigned int audio_samples = 0, audio_rate = 0;
    int audio_channels_first = 0;
    unsigned long long cache_ram = 0;
    unsigned int direct_io = 0;
    unsigned long long coalesce_gap = 0;
    unsigned int video_size = 0, frames_per_clip = 0, clips_per_video = 0, step = 0, ms_step = 0;
    unsigned int range_start = 0, range_end = 0, max_side = 0;
    const char *clip_sampler = NULL;
    unsigned long long max_decoded = 0;
    int label_offset = 0;
    PyObject *path = NULL;
    int kind = CHUTE_SOURCE_AUTO, fail_status = 0;
    unsigned int delay = 0, fail_reads = 0;
    unsigned long long fail_sample = 0;
    if (ds_check_int_kwargs(kw))
        return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|i$IKIizizzzzKKzpzIIpKIKIIIzIIIIIK:Dataset",
                                     kwlist,
                                     PyUnicode_FSConverter, &path, &kind, &delay, &fail_sample,
                                     &fail_reads, &fail_status, &format, &label_offset,
                                     &image_key, &label_key, &extra_keys, &cache_dir,
                                     &cache_bytes, &cache_block, &schema, &csv_no_header,
                                     &index_dir, &audio_samples, &audio_rate,
                                     &audio_channels_first, &cache_ram, &direct_io,
                                     &coalesce_gap, &video_size, &frames_per_clip,
                                     &clips_per_video, &clip_sampler, &step, &ms_step,
                                     &range_start, &range_end, &max_side, &max_decoded))
        return -1;
    int sampler = 0;
    if (clip_sampler) {
        const ch_opt_row *rows = ch_dataset_opts();
        for (int k = 0; k < ch_dataset_opt_count(); k++)
            if (strcmp(rows[k].name, "clip_sampler") == 0)
                sampler = ch_opt_choice_find(&rows[k], clip_sampler);
        if (sampler < 0) {
            Py_DECREF(path);
            PyErr_Format(PyExc_ValueError, "clip_sampler must be random or regular, not %s",
                         clip_sampler);
            return -1;
        }
    }
    if (self->ref) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_RuntimeError, "Dataset is already open");
        return -1;
    }
    chute_dataset *ds = NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    const char *p = PyBytes_AS_STRING(path);
    int rc;
    chute_dataset_options o;
    memset(&o, 0, sizeof o);
    o.kind = (chute_source_kind)kind;
    o.read_delay_us = delay;
    o.inject_fail_sample = fail_sample;
    o.inject_fail_reads = fail_reads;
    o.inject_fail_status = fail_status;
    o.format = format;
    o.label_offset = label_offset;
    o.image_key = image_key;
    o.label_key = label_key;
    o.extra_keys = extra_keys;
    o.cache_dir = cache_dir;
    o.cache_bytes = cache_bytes;
    o.cache_block_bytes = cache_block;
    o.schema = schema;
    o.csv_no_header = csv_no_header;
    o.index_dir = index_dir;
    o.audio_samples = audio_samples;
    o.audio_rate = audio_rate;
    o.audio_channels_first = (uint32_t)audio_channels_first;
    o.cache_ram_bytes = cache_ram;
    o.direct_io = direct_io;
    o.coalesce_gap_bytes = coalesce_gap;
    o.video_size = video_size;
    o.frames_per_clip = frames_per_clip;
    o.clips_per_video = clips_per_video;
    o.clip_sampler = sampler;
    o.num_indices_between_frames = step;
    o.ms_between_frames = ms_step;
    o.sampling_range_start = range_start;
    o.sampling_range_end = range_end;
    o.video_max_side = max_side;
    o.video_max_decoded_bytes = max_decoded;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_dataset_open_ex(p, &o, &ds, &err);
    Py_END_ALLOW_THREADS
    if (rc != CHUTE_OK) {
        Py_DECREF(path);
        raise_status(rc, err.message);
        return -1;
    }
    ds_ref *r = malloc(sizeof *r);
    if (!r) {
        chute_dataset_close(ds);
        Py_DECREF(path);
        PyErr_NoMemory();
        return -1;
    }
    atomic_init(&r->refs, 1);
    r->ds = ds;
    self->ref = r;
    self->path = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path));
    Py_DECREF(path);
    return self->path ? 0 : -1;
}

static void Dataset_dealloc(DatasetObject *self)
{
    ds_ref_decref(self->ref);
    Py_XDECREF(self->path);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ds_check(DatasetObject *self)
{
    if (!self->ref) {
        PyErr_SetString(PyExc_RuntimeError, "Dataset is not open");
        return -1;
    }
    return 0;
}

static int ds_index(DatasetObject *self, PyObject *arg, uint64_t *out)
{
    if (ds_check(self))
        return -1;
    long long i = PyLong_AsLongLong(arg);
    if (i == -1 && PyErr_Occurred())
        return -1;
    uint64_t n = chute_dataset_size(self->ref->ds);
    if (i < 0)
        i += (long long)n;
    if (i < 0 || (uint64_t)i >= n) {
        PyErr_Format(PyExc_IndexError, "sample index out of range (dataset has %llu samples)",
                     (unsigned long long)n);
        return -1;
    }
    *out = (uint64_t)i;
    return 0;
}

static Py_ssize_t Dataset_len(DatasetObject *self)
{
    if (ds_check(self))
        return -1;
    return (Py_ssize_t)chute_dataset_size(self->ref->ds);
}

static PyObject *Dataset_get_classes(DatasetObject *self, void *c)
{
    if (ds_check(self))
        return NULL;
    uint32_t n = chute_dataset_num_classes(self->ref->ds);
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        const char *name = chute_dataset_class_name(self->ref->ds, i);
        PyObject *s = PyUnicode_DecodeFSDefault(name ? name : "");
        if (!s) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static PyObject *Dataset_get_has_images(DatasetObject *self, void *c)
{
    return PyBool_FromLong(chute_dataset_has_images(self->ref->ds));
}
static PyObject *Dataset_get_is_stream(DatasetObject *self, void *c)
{
    return PyBool_FromLong(chute_dataset_is_stream(self->ref->ds));
}
static PyObject *Dataset_get_num_classes(DatasetObject *self, void *c)
{
    if (ds_check(self))
        return NULL;
    return PyLong_FromUnsignedLong(chute_dataset_num_classes(self->ref->ds));
}

static PyObject *Dataset_get_kind(DatasetObject *self, void *c)
{
    if (ds_check(self))
        return NULL;
    return PyUnicode_FromString(chute_dataset_format_name(self->ref->ds));
}

static PyObject *Dataset_get_path(DatasetObject *self, void *c)
{
    if (!self->path)
        Py_RETURN_NONE;
    Py_INCREF(self->path);
    return self->path;
}

static PyObject *Dataset_label(DatasetObject *self, PyObject *arg)
{
    uint64_t i;
    if (ds_index(self, arg, &i))
        return NULL;
    return PyLong_FromLongLong(chute_dataset_label(self->ref->ds, i));
}

static PyObject *Dataset_labels(DatasetObject *self, PyObject *unused)
{
    if (ds_check(self))
        return NULL;
    uint64_t n = chute_dataset_size(self->ref->ds);
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l)
        return NULL;
    for (uint64_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(chute_dataset_label(self->ref->ds, i));
        if (!v) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

static PyObject *Dataset_describe(DatasetObject *self, PyObject *arg)
{
    uint64_t i;
    if (ds_index(self, arg, &i))
        return NULL;
    char buf[4096];
    chute_dataset_describe(self->ref->ds, i, buf, sizeof buf);
    return PyUnicode_DecodeFSDefault(buf);
}

static PyObject *Dataset_sample_size(DatasetObject *self, PyObject *arg)
{
    uint64_t i;
    if (ds_index(self, arg, &i))
        return NULL;
    uint64_t sz;
    const chute_dataset *ds = self->ref->ds;
    Py_BEGIN_ALLOW_THREADS /* a units-mode Arrow dataset may load (through Python) */
    sz = chute_dataset_sample_size(ds, i);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(sz);
}

static PyObject *Dataset_read(DatasetObject *self, PyObject *arg)
{
    uint64_t i;
    if (ds_index(self, arg, &i))
        return NULL;
    uint64_t sz;
    const chute_dataset *dsz = self->ref->ds;
    Py_BEGIN_ALLOW_THREADS /* see Dataset_sample_size */
    sz = chute_dataset_sample_size(dsz, i);
    Py_END_ALLOW_THREADS
    if (sz > (uint64_t)PY_SSIZE_T_MAX)
        return PyErr_NoMemory();
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sz);
    if (!b)
        return NULL;
    size_t len = 0;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc;
    char *dst = PyBytes_AS_STRING(b);
    const chute_dataset *ds = self->ref->ds;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_dataset_read(ds, i, dst, (size_t)sz, &len, &err);
    Py_END_ALLOW_THREADS
    if (rc == CHUTE_ELIMIT && len > sz && len <= (size_t)PY_SSIZE_T_MAX) {
        /* A TFRecord sample is read whole (framing, Example) and the image
         * cut out of it in place: the buffer needs the record's size, which
         * the first call reported in len (chute.h). */
        if (_PyBytes_Resize(&b, (Py_ssize_t)len) < 0)
            return NULL;
        sz = len;
        dst = PyBytes_AS_STRING(b);
        memset(&err, 0, sizeof err);
        Py_BEGIN_ALLOW_THREADS
        rc = chute_dataset_read(ds, i, dst, (size_t)sz, &len, &err);
        Py_END_ALLOW_THREADS
    }
    if (rc != CHUTE_OK) {
        Py_DECREF(b);
        return raise_status(rc, err.message);
    }
    if ((Py_ssize_t)len != (Py_ssize_t)sz)
        _PyBytes_Resize(&b, (Py_ssize_t)len);
    return b;
}

static PyObject *Dataset_repr(DatasetObject *self)
{
    if (!self->ref)
        return PyUnicode_FromString("chute.Dataset(<closed>)");
    return PyUnicode_FromFormat("chute.Dataset(%R, kind='%s', samples=%llu, classes=%u)", self->path,
                                chute_dataset_format_name(self->ref->ds),
                                (unsigned long long)chute_dataset_size(self->ref->ds),
                                chute_dataset_num_classes(self->ref->ds));
}

/* Typed fields (chute_dataset_field_info) as a list of dicts. */
static PyObject *Dataset_fields(DatasetObject *self, PyObject *unused)
{
    if (ds_check(self))
        return NULL;
    static const char *const kinds[] = {"", "int64", "float32", "tensor", "bytes"};
    const chute_dataset *ds = self->ref->ds;
    uint32_t n = chute_dataset_num_fields(ds);
    PyObject *l = PyList_New(n);
    for (uint32_t k = 0; l && k < n; k++) {
        chute_field_info fi;
        chute_dataset_field_info(ds, k, &fi);
        PyObject *shape = PyTuple_New(fi.ndim);
        for (uint32_t d = 0; shape && d < fi.ndim; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(fi.shape[d]));
        PyObject *dct = shape ? Py_BuildValue("{s:s,s:s,s:s,s:N}", "name", fi.name, "kind",
                                              kinds[fi.kind <= 4 ? fi.kind : 0], "dtype",
                                              arr_types[fi.dtype].name, "shape", shape)
                              : NULL;
        if (!dct) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, k, dct);
    }
    return l;
}

/* Sample i's detection / segmentation targets (chute_dataset_targets) as a
 * dict of counts and little-endian arrays as bytes; chute.targets() wraps
 * them as NumPy arrays.  None when the dataset carries no targets. */
static PyObject *Dataset_targets(DatasetObject *self, PyObject *arg)
{
    uint64_t i;
    if (ds_index(self, arg, &i))
        return NULL;
    chute_targets *t = NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc = chute_dataset_targets(self->ref->ds, i, &t, &err);
    if (rc == CHUTE_ENOTFOUND)
        Py_RETURN_NONE;
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    Py_ssize_t n = t->count, k = t->keypoints;
    PyObject *d = Py_BuildValue(
        "{s:I,s:I,s:I,s:I,s:y#,s:y#,s:y#,s:y#,s:y#,s:y#}", "count", t->count, "keypoints",
        t->keypoints, "width", t->width, "height", t->height, "ann_ids", (const char *)t->ann_ids,
        n * 8, "boxes", (const char *)t->boxes, n * 16, "labels", (const char *)t->labels, n * 4,
        "iscrowd", (const char *)t->iscrowd, n, "keypoints_xyv", (const char *)t->keypoints_xyv,
        n * k * 12, "has_mask", (const char *)t->has_mask, n);
    if (d && t->mask_path) {
        PyObject *mp = PyUnicode_DecodeFSDefault(t->mask_path);
        PyObject *mi = PyBytes_FromStringAndSize((const char *)t->mask_image,
                                                 (Py_ssize_t)t->mask_image_bytes);
        if (!mp || !mi || PyDict_SetItemString(d, "mask_path", mp) ||
            PyDict_SetItemString(d, "mask_image", mi))
            Py_CLEAR(d);
        Py_XDECREF(mp);
        Py_XDECREF(mi);
    }
    chute_targets_free(t);
    return d;
}

/* Object k's instance mask of sample i: height * width bytes, row-major. */
static PyObject *Dataset_target_mask(DatasetObject *self, PyObject *args)
{
    unsigned long long i;
    unsigned int k;
    if (ds_check(self) || !PyArg_ParseTuple(args, "KI", &i, &k))
        return NULL;
    if (i >= chute_dataset_size(self->ref->ds))
        return PyErr_Format(PyExc_IndexError, "sample %llu out of range", i);
    chute_targets *t = NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc = chute_dataset_targets(self->ref->ds, i, &t, &err);
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    size_t need = (size_t)t->width * t->height;
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)need);
    if (b) {
        rc = chute_targets_mask(t, k, (uint8_t *)PyBytes_AS_STRING(b), need, &err);
        if (rc != CHUTE_OK) {
            Py_CLEAR(b);
            raise_status(rc, err.message);
        }
    }
    chute_targets_free(t);
    return b;
}

static PyMethodDef Dataset_methods[] = {
    {"fields", (PyCFunction)Dataset_fields, METH_NOARGS,
     "fields()\n--\n\nThe dataset's typed fields: dicts of name, kind ('int64', 'float32', "
     "'tensor', 'bytes'), dtype and per-sample shape (-1: variable, bytes)."},
    {"label", (PyCFunction)Dataset_label, METH_O, "label(i)\n--\n\nLabel of sample i."},
    {"labels", (PyCFunction)Dataset_labels, METH_NOARGS,
     "labels()\n--\n\nEvery sample's label, in dataset order (torchvision's ImageFolder targets)."},
    {"describe", (PyCFunction)Dataset_describe, METH_O,
     "describe(i)\n--\n\nWhere sample i lives ('ROOT/cls/x.jpg' or 'shard-00003.chute@1048576')."},
    {"sample_size", (PyCFunction)Dataset_sample_size, METH_O,
     "sample_size(i)\n--\n\nEncoded size of sample i in bytes."},
    {"read", (PyCFunction)Dataset_read, METH_O,
     "read(i)\n--\n\nThe encoded bytes of sample i (shard records are checksum-verified)."},
    {"targets", (PyCFunction)Dataset_targets, METH_O,
     "targets(i)\n--\n\nSample i's detection/segmentation targets as counts and raw arrays "
     "(chute.targets() gives NumPy arrays); None without targets."},
    {"target_mask", (PyCFunction)Dataset_target_mask, METH_VARARGS,
     "target_mask(i, k)\n--\n\nObject k's instance mask of sample i (height*width bytes, "
     "pycocotools' annToMask)."},
    {NULL},
};

static PyGetSetDef Dataset_getset[] = {
    {"classes", (getter)Dataset_get_classes, NULL, "Class names, indexed by label.", NULL},
    {"num_classes", (getter)Dataset_get_num_classes, NULL, "Number of classes.", NULL},
    {"has_images", (getter)Dataset_get_has_images, NULL,
     "False when samples are only a label and typed fields (NumPy tensors, CSV rows).", NULL},
    {"is_stream", (getter)Dataset_get_is_stream, NULL,
     "True for 'pipe:COMMAND' and '-': no length, read in order through a shuffle buffer.",
     NULL},
    {"kind", (getter)Dataset_get_kind, NULL, "'tree' (ImageFolder) or 'shards'.", NULL},
    {"path", (getter)Dataset_get_path, NULL, "The path it was opened from.", NULL},
    {NULL},
};

static PySequenceMethods Dataset_as_sequence = {.sq_length = (lenfunc)Dataset_len};

static PyTypeObject DatasetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chute.Dataset",
    .tp_basicsize = sizeof(DatasetObject),
    .tp_dealloc = (destructor)Dataset_dealloc,
    .tp_repr = (reprfunc)Dataset_repr,
    .tp_as_sequence = &Dataset_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Dataset(path, kind=0, *, read_delay_us=0, inject_fail_sample=0, "
              "inject_fail_reads=0, inject_fail_status=0)\n--\n\n"
              "An opened source: an ImageFolder tree (ROOT/<class>/<file>) or a shard directory\n"
              "written by chute.pack.  kind: 0 detect, 1 tree, 2 shards.  read_delay_us adds\n"
              "latency to every sample read (tests; 'what if storage were slower').  Immutable;\n"
              "any number of loaders may share it.\n\n"
              "inject_fail_*: fault injection for tests only: the first inject_fail_reads reads\n"
              "of sample inject_fail_sample fail with the library status inject_fail_status\n"
              "(0 = CHUTE_EIO, e.g. -2 CHUTE_ENOMEM, -5 CHUTE_ECORRUPT).\n\n"
              "cache_dir, cache_bytes, cache_block_bytes: the node-local cache tier\n"
              "(chute_dataset_options in chute.h).",
    .tp_methods = Dataset_methods,
    .tp_getset = Dataset_getset,
    .tp_init = (initproc)Dataset_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* _Loader                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    ld_core *core;
    PyObject *dataset;  /* the Dataset object, for attribute access */
    uint32_t max_held;  /* batches the consumer may hold zero-copy */
    int copy_on_limit;  /* hold policy: 1 copy, 0 raise */
    int busy;           /* a thread is inside a library call (GIL released) */
    uint64_t epoch;     /* last epoch started */
    pid_t pid;          /* process that created it (fork detection) */
    PyObject *field_names; /* tuple of str: the typed fields asked for (may be empty) */
} LoaderObject;

static PyTypeObject LoaderType;

static int parse_rgb(PyObject *o, float out[3], const char *what)
{
    if (o == Py_None)
        return 0;
    if (!PyArg_ParseTuple(o, "fff", &out[0], &out[1], &out[2])) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of 3 floats", what);
        return -1;
    }
    return 0;
}

/* v as an unsigned integer for option `name`: the index object (a new
 * reference, for messages) with *x its value and *bad set when it is
 * negative or over 2^64 - 1; NULL with TypeError when v is not an int
 * (a bool is not). */
static PyObject *opt_uint_from_py(const char *name, PyObject *v, unsigned long long *x, int *bad)
{
    if (PyBool_Check(v) || !PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %s", name, Py_TYPE(v)->tp_name);
        return NULL;
    }
    PyObject *i = PyNumber_Index(v);
    if (!i)
        return NULL;
    *x = PyLong_AsUnsignedLongLong(i);
    *bad = *x == (unsigned long long)-1 && PyErr_Occurred();
    if (*bad)
        PyErr_Clear(); /* out of range: the caller's message says so */
    return i;
}

/* One option of the table (src/common/loader_options.def) from a Python
 * value into o: None (or absent) leaves the field zero, the C default;
 * otherwise an int within the table's bounds (a bool for flags).  The
 * message names the option, as C's and the CLI's do. */
static int opt_from_py(const ch_loader_opt *d, PyObject *v, chute_loader_options *o)
{
    if (!v || v == Py_None)
        return 0;
    if (d->kind == CH_OPT_BOOL) {
        int t = PyObject_IsTrue(v);
        if (t < 0)
            return -1;
        ch_loader_opt_set(o, d, (uint64_t)t);
        return 0;
    }
    unsigned long long x;
    int bad;
    PyObject *i = opt_uint_from_py(d->name, v, &x, &bad);
    if (!i)
        return -1;
    if (bad || x < d->min || x > d->max) {
        PyErr_Format(PyExc_ValueError, "%s must be in %llu..%llu, got %S", d->name,
                     (unsigned long long)d->min, (unsigned long long)d->max, i);
        Py_DECREF(i);
        return -1;
    }
    Py_DECREF(i);
    if (x == 0 && (d->layers & CH_OPT_ZERO_OFF))
        x = ch_opt_off_value(d); /* 0 is off; a zero field would be the default */
    ch_loader_opt_set(o, d, x);
    return 0;
}

static int opts_from_py(PyObject *const vals[CH_LOPT_COUNT], chute_loader_options *o)
{
    const ch_loader_opt *t = ch_loader_opts();
    for (int i = 0; i < CH_LOPT_COUNT; i++)
        if (opt_from_py(&t[i], vals[i], o))
            return -1;
    return 0;
}

/* The integer rows only (the other kinds are keywords of their own below). */
#define CH_LOADER_ENUM(name, field, choices, layers, help)
#define CH_LOADER_FLOAT(name, field, n, def, lo, hi, layers, help)
#define CH_LOADER_NEG(name, field, layers, help)
#define CH_LOADER_STR(name, field, layers, help)
static int Loader_init(LoaderObject *self, PyObject *args, PyObject *kw)
{
    /* The table's options first (as objects, checked by opts_from_py),
     * then the ones it does not describe yet. */
    static char *kwlist[] = {"dataset",
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help) #name,
#include "common/loader_options.def"
#undef CH_LOADER_OPT
                             "transform", "dtype", "layout", "shuffle", "remainder", "on_corrupt",
                             "normalize", "mean", "std", "dct_scale", "copy_on_hold_limit",
                             "crop_pct", "shuffle_mode", "fields", "device", "tensorboard",
                             "metrics_addr", "metrics_file", "metrics_name", "augment", "mixup",
                             "cutmix", "mix_switch", "geometry", NULL};
    static const char fmt[] = "O!|$"
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help) "O"
#include "common/loader_options.def"
#undef CH_LOADER_OPT
                              "iiipiipOOppfiOzzzzzzfffz:_Loader";
    PyObject *vals[CH_LOPT_COUNT] = {0};
    PyObject *dataset = NULL, *mean = Py_None, *std = Py_None, *fields = Py_None;
    chute_loader_options o;
    memset(&o, 0, sizeof o);
    int transform = 0, dtype = 0, layout = 0, remainder = 0, on_corrupt = 0;
    int shuffle = 1, normalize = 1, dct_scale = 1, copy_on_limit = 1;
    int shuffle_mode = 0; /* chute_shuffle */
    float crop_pct = 0, mixup = 0, cutmix = 0, mix_switch = 0;
    const char *device = NULL, *tensorboard = NULL, *metrics_addr = NULL;
    const char *metrics_file = NULL, *metrics_name = NULL, *augment = NULL, *geometry = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &DatasetType, &dataset,
#define CH_LOADER_OPT(name, kind, field, def, lo, hi, layers, help) &vals[CH_LOPT_##name],
#include "common/loader_options.def"
#undef CH_LOADER_OPT
                                     &transform, &dtype, &layout, &shuffle, &remainder,
                                     &on_corrupt, &normalize, &mean, &std, &dct_scale,
                                     &copy_on_limit, &crop_pct, &shuffle_mode, &fields,
                                     &device, &tensorboard, &metrics_addr, &metrics_file,
                                     &metrics_name, &augment, &mixup, &cutmix, &mix_switch,
                                     &geometry))
        return -1;
#undef CH_LOADER_ENUM
#undef CH_LOADER_FLOAT
#undef CH_LOADER_NEG
#undef CH_LOADER_STR
    /* A CUDA batch cannot be copied out of its slot on the host: the hold
     * limit raises BusyError instead (hold_policy "raise"). */
    if (device && strncmp(device, "cuda", 4) == 0)
        copy_on_limit = 0;
    o.device = device;
    o.tensorboard = tensorboard;
    o.metrics_addr = metrics_addr; /* copied by chute_loader_create */
    o.metrics_file = metrics_file;
    o.metrics_name = metrics_name;
    o.augment = augment; /* parsed by chute_loader_create */
    o.mixup = mixup;     /* checked against the table's bounds by chute_loader_create */
    o.cutmix = cutmix;
    o.mix_switch = mix_switch;
    o.geometry = geometry;
    if (self->core) {
        PyErr_SetString(PyExc_RuntimeError, "_Loader is already initialised");
        return -1;
    }
    DatasetObject *dso = (DatasetObject *)dataset;
    if (ds_check(dso))
        return -1;
    if (opts_from_py(vals, &o))
        return -1;
    const ch_loader_opt *mh = &ch_loader_opts()[CH_LOPT_max_held];
    uint32_t max_held = o.max_held ? o.max_held : (uint32_t)mh->def;
    if (copy_on_limit && max_held >= mh->max) {
        PyErr_Format(PyExc_ValueError,
                     "max_held must be in %llu..%llu with hold_policy=\"copy\" (one ring slot is "
                     "kept spare for the copy), got %u",
                     (unsigned long long)mh->min, (unsigned long long)mh->max - 1, max_held);
        return -1;
    }
    o.transform = (chute_transform)transform;
    o.dtype = (chute_dtype)dtype;
    o.layout = (chute_layout)layout;
    /* One spare slot lets "copy" take a batch while max_held are held. */
    o.max_held = max_held + (copy_on_limit ? 1 : 0);
    o.no_shuffle = !shuffle;
    o.remainder = (chute_remainder)remainder;
    o.on_corrupt = (chute_corrupt_policy)on_corrupt;
    o.no_normalize = !normalize;
    o.no_dct_scale = !dct_scale;
    o.crop_pct = crop_pct;
    o.shuffle = (chute_shuffle)shuffle_mode;
    if (parse_rgb(mean, o.mean, "mean") || parse_rgb(std, o.std, "std"))
        return -1;
    /* fields: a sequence of str, joined with commas for the library. */
    if (PyUnicode_Check(fields)) {
        PyErr_SetString(PyExc_TypeError, "fields must be a sequence of str, not a str");
        return -1;
    }
    PyObject *names = fields == Py_None ? PyTuple_New(0) : PySequence_Tuple(fields);
    if (!names)
        return -1;
    char csv[64 * 64 + 64] = ""; /* 64 names of < 64 bytes (CH_FIELD_MAX) */
    size_t cl = 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names); k++) {
        PyObject *it = PyTuple_GET_ITEM(names, k);
        const char *nm = PyUnicode_Check(it) ? PyUnicode_AsUTF8(it) : NULL;
        if (!nm || strchr(nm, ',') || strlen(nm) + cl + 2 > sizeof csv) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError,
                                "fields must be a sequence of at most 64 field names (str "
                                "without commas)");
            Py_DECREF(names);
            return -1;
        }
        cl += (size_t)snprintf(csv + cl, sizeof csv - cl, "%s%s", k ? "," : "", nm);
    }
    o.fields = csv;

    ld_core *c = calloc(1, sizeof *c);
    if (!c) {
        Py_DECREF(names);
        PyErr_NoMemory();
        return -1;
    }
    chute_error err;
    memset(&err, 0, sizeof err);
    chute_loader *ld = NULL;
    int rc;
    const chute_dataset *ds = dso->ref->ds;
    Py_BEGIN_ALLOW_THREADS /* allocates and pre-faults the ring, starts threads */
    rc = chute_loader_create(ds, &o, &ld, &err);
    Py_END_ALLOW_THREADS
    if (rc != CHUTE_OK) {
        free(c);
        Py_DECREF(names);
        raise_status(rc, err.message);
        return -1;
    }
    Py_XSETREF(self->field_names, names);
    atomic_init(&c->refs, 1);
    atomic_init(&c->zero_copy_live, 0);
    atomic_init(&c->copied, 0);
    c->ld = ld;
    atomic_fetch_add(&dso->ref->refs, 1);
    c->ds = dso->ref;
    self->core = c;
    Py_INCREF(dataset);
    self->dataset = dataset;
    self->max_held = max_held;
    self->copy_on_limit = copy_on_limit;
    self->pid = getpid();
    return 0;
}

/* Nonzero (with RuntimeError set) in a fork() child of the creator. */
static int loader_forked(LoaderObject *self)
{
    if (!self->core || self->pid == getpid())
        return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "this chute.Loader was created in process %ld and cannot be used in process "
                 "%ld, a fork() child (such as a torch DataLoader worker): its worker threads "
                 "exist only in the parent. Do not wrap a chute.Loader in a DataLoader with "
                 "num_workers > 0: iterate the chute.Loader itself, its `workers` threads "
                 "already decode in parallel. For other multiprocessing, create the Loader in "
                 "the child process",
                 (long)self->pid, (long)getpid());
    return -1;
}

/* Stop producing: batches still held by tensors stay valid. */
static void loader_release_core(LoaderObject *self)
{
    ld_core *c = self->core;
    if (!c)
        return;
    self->core = NULL;
    if (atomic_load(&c->refs) > 1) {
        /* Tensors outlive us; idle the workers until the last one dies. */
        chute_loader *ld = c->ld;
        Py_BEGIN_ALLOW_THREADS
        chute_loader_stop(ld);
        Py_END_ALLOW_THREADS
    }
    Py_BEGIN_ALLOW_THREADS /* may join worker threads */
    ld_core_decref(c);
    Py_END_ALLOW_THREADS
}

static void Loader_dealloc(LoaderObject *self)
{
    loader_release_core(self);
    Py_XDECREF(self->dataset);
    Py_XDECREF(self->field_names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int loader_enter(LoaderObject *self)
{
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return -1;
    }
    if (loader_forked(self))
        return -1;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the loader is in use by another thread (one consumer at a time)");
        return -1;
    }
    self->busy = 1;
    return 0;
}

static PyObject *Loader_close(LoaderObject *self, PyObject *unused)
{
    if (self->busy && !(self->core && self->pid != getpid())) {
        PyErr_SetString(PyExc_RuntimeError, "cannot close the loader while another thread uses it");
        return NULL;
    }
    loader_release_core(self);
    Py_RETURN_NONE;
}

static PyObject *Loader_start_epoch(LoaderObject *self, PyObject *args)
{
    unsigned long long epoch = 0, start = 0;
    if (!PyArg_ParseTuple(args, "KK:start_epoch", &epoch, &start))
        return NULL;
    if (loader_enter(self))
        return NULL;
    chute_loader *ld = self->core->ld;
    int rc;
    Py_BEGIN_ALLOW_THREADS /* waits for workers to leave the previous run */
    rc = chute_loader_start_epoch(ld, epoch, start);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc != CHUTE_OK)
        return raise_status(rc, chute_loader_errmsg(ld));
    self->epoch = epoch;
    Py_RETURN_NONE;
}

/* Elastic resume (chute_loader_start_epoch_at): epoch `epoch` from global
 * position `position` of its permutation, split over this loader's ranks. */
static PyObject *Loader_start_epoch_at(LoaderObject *self, PyObject *args)
{
    unsigned long long epoch = 0, position = 0;
    if (!PyArg_ParseTuple(args, "KK:start_epoch_at", &epoch, &position))
        return NULL;
    if (loader_enter(self))
        return NULL;
    chute_loader *ld = self->core->ld;
    chute_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS /* waits for workers to leave the previous run */
    rc = chute_loader_start_epoch_at(ld, epoch, position, &err);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    self->epoch = epoch;
    Py_RETURN_NONE;
}

static PyObject *Loader_position(LoaderObject *self, PyObject *args)
{
    unsigned long long batches = 0;
    if (!PyArg_ParseTuple(args, "K:position", &batches))
        return NULL;
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(chute_loader_position(self->core->ld, batches));
}

/* Kafka resume (chute_loader_stream_state): the position as bytes (b""
 * for other datasets). */
static PyObject *Loader_stream_state(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (loader_enter(self))
        return NULL;
    chute_loader *ld = self->core->ld;
    chute_error err = {0};
    size_t len = 0;
    int rc = chute_loader_stream_state(ld, NULL, 0, &len, &err);
    PyObject *out = NULL;
    if (rc == CHUTE_OK || rc == CHUTE_ELIMIT) {
        for (int tries = 0; tries < 4 && !out; tries++) { /* it may grow meanwhile */
            out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
            if (!out)
                break;
            size_t got = 0;
            rc = len ? chute_loader_stream_state(ld, PyBytes_AS_STRING(out), len, &got, &err)
                     : CHUTE_OK;
            if (rc == CHUTE_OK) {
                if (got < len && _PyBytes_Resize(&out, (Py_ssize_t)got) != 0)
                    out = NULL;
                break;
            }
            Py_CLEAR(out);
            len = got;
            if (rc != CHUTE_ELIMIT)
                break;
        }
    }
    self->busy = 0;
    if (!out && !PyErr_Occurred())
        return raise_status(rc, err.message);
    return out;
}

static PyObject *Loader_set_stream_state(LoaderObject *self, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*:set_stream_state", &b))
        return NULL;
    if (loader_enter(self)) {
        PyBuffer_Release(&b);
        return NULL;
    }
    chute_error err = {0};
    int rc = chute_loader_set_stream_state(self->core->ld, b.buf, (size_t)b.len, &err);
    self->busy = 0;
    PyBuffer_Release(&b);
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    Py_RETURN_NONE;
}

static PyObject *Loader_next(LoaderObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *tobj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:next", kwlist, &tobj))
        return NULL;
    double timeout = -1;
    if (tobj != Py_None) {
        timeout = PyFloat_AsDouble(tobj);
        if (timeout == -1 && PyErr_Occurred())
            return NULL;
        if (timeout < 0) {
            PyErr_SetString(PyExc_ValueError, "timeout must be >= 0 or None");
            return NULL;
        }
    }
    if (loader_enter(self))
        return NULL;
    ld_core *c = self->core;
    chute_loader *ld = c->ld;
    double t0 = mono_s();
    int gc_tried = 0, rc;
    chute_batch *b = NULL;
    for (;;) {
        int slice = WAIT_SLICE_MS;
        if (timeout >= 0) {
            double left = timeout - (mono_s() - t0);
            slice = left <= 0 ? 0 : left * 1000 < WAIT_SLICE_MS ? (int)(left * 1000) + 1
                                                                 : WAIT_SLICE_MS;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = chute_loader_next_timeout(ld, slice, &b);
        Py_END_ALLOW_THREADS
        if (rc == CHUTE_EINTERRUPTED) {
            if (PyErr_CheckSignals() < 0)
                goto fail;
            if (timeout >= 0 && mono_s() - t0 >= timeout) {
                /* PyErr_Format has no %f: format here. */
                char msg[96];
                snprintf(msg, sizeof msg, "no batch within %.3f s (timeout)", timeout);
                PyErr_SetString(PyExc_TimeoutError, msg);
                goto fail;
            }
            continue;
        }
        if (rc == CHUTE_EBUSY && !gc_tried) {
            /* Tensors caught in reference cycles may be all that holds
             * the slots: collect once before giving up. */
            gc_tried = 1;
            PyGC_Collect();
            continue;
        }
        break;
    }
    if (rc == CHUTE_END) {
        self->busy = 0;
        Py_RETURN_NONE;
    }
    if (rc != CHUTE_OK) {
        char msg[1800];
        if (rc == CHUTE_EBUSY)
            snprintf(msg, sizeof msg,
                     "%s. Keep fewer batches alive, .clone() the tensors you keep, raise max_held "
                     "(now %u), or use hold_policy='copy'",
                     chute_loader_errmsg(ld), self->max_held);
        else
            snprintf(msg, sizeof msg, "%s", chute_loader_errmsg(ld));
        raise_status(rc, msg);
        goto fail;
    }

    batch_ref *r = calloc(1, sizeof *r);
    BatchObject *bo = r ? PyObject_New(BatchObject, &BatchType) : NULL;
    if (!bo) {
        free(r);
        chute_batch_release(b);
        PyErr_NoMemory();
        goto fail;
    }
    atomic_init(&r->refs, 1);
    atomic_fetch_add(&c->refs, 1);
    r->core = c;
    r->b = b;
    chute_batch_view_get(b, &r->v);
    atomic_fetch_add(&c->zero_copy_live, 1);
    bo->ref = r;
    Py_ssize_t nf = self->field_names ? PyTuple_GET_SIZE(self->field_names) : 0;
    if (nf > 0) {
        r->fv = calloc((size_t)nf, sizeof *r->fv);
        if (!r->fv) {
            Py_DECREF(bo);
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t k = 0; k < nf; k++)
            if (chute_batch_field(b, PyUnicode_AsUTF8(PyTuple_GET_ITEM(self->field_names, k)),
                                  &r->fv[k]) == CHUTE_OK)
                r->nfv++;
    }
    if (self->copy_on_limit && atomic_load(&c->zero_copy_live) > (long)self->max_held) {
        /* Over the hold limit: move this batch out of the ring, keeping
         * the library's layout promise: every array 64-byte aligned. */
        size_t n = r->v.count;
        size_t lab = n * sizeof(int64_t), idx = n * sizeof(uint64_t);
        size_t off = (r->v.nbytes + 63) & ~(size_t)63;
        size_t off2 = off + ((lab + 63) & ~(size_t)63);
        /* Typed fields after the indices, each array on its own 64 bytes. */
        size_t fend = off2 + ((idx + 63) & ~(size_t)63);
        for (uint32_t k = 0; k < r->nfv; k++)
            fend += ((r->fv[k].nbytes + 63) & ~(size_t)63) + (r->fv[k].lengths ? ((lab + 63) & ~(size_t)63) : 0);
        size_t soft = r->v.soft_labels ? n * r->v.num_classes * sizeof(float) : 0, soft_off = fend;
        fend += (soft + 63) & ~(size_t)63; /* mixup/cutmix soft labels, last */
        void *mem = NULL;
        if (posix_memalign(&mem, 64, fend + 64) != 0) {
            Py_DECREF(bo);
            PyErr_NoMemory();
            goto fail;
        }
        uint8_t *m = mem;
        Py_BEGIN_ALLOW_THREADS
        memcpy(m, r->v.data, r->v.nbytes);
        memcpy(m + off, r->v.labels, lab);
        memcpy(m + off2, r->v.indices, idx);
        size_t fo = off2 + ((idx + 63) & ~(size_t)63);
        for (uint32_t k = 0; k < r->nfv; k++) {
            chute_field_view *f = &r->fv[k];
            memcpy(m + fo, f->data, f->nbytes);
            f->data = m + fo;
            fo += (f->nbytes + 63) & ~(size_t)63;
            if (f->lengths) {
                memcpy(m + fo, f->lengths, lab);
                f->lengths = (int64_t *)(void *)(m + fo);
                fo += (lab + 63) & ~(size_t)63;
            }
        }
        if (soft)
            memcpy(m + soft_off, r->v.soft_labels, soft);
        Py_END_ALLOW_THREADS
        if (soft)
            r->v.soft_labels = (float *)(void *)(m + soft_off);
        r->owned = m;
        r->v.data = m;
        r->v.labels = (int64_t *)(void *)(m + off);
        r->v.indices = (uint64_t *)(void *)(m + off2);
        r->b = NULL;
        chute_batch_release(b);
        atomic_fetch_sub(&c->zero_copy_live, 1);
        atomic_fetch_add(&c->copied, 1);
    }
    self->busy = 0;
    return (PyObject *)bo;
fail:
    self->busy = 0;
    return NULL;
}

static PyObject *Loader_get_run_batches(LoaderObject *self, void *c)
{
    (void)c;
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(chute_loader_run_batches(self->core->ld));
}

static PyObject *Loader_get_num_batches(LoaderObject *self, void *c)
{
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(chute_loader_num_batches(self->core->ld));
}

static PyObject *Loader_get_num_samples(LoaderObject *self, void *c)
{
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(chute_loader_num_samples(self->core->ld));
}

static PyObject *Loader_get_dataset(LoaderObject *self, void *c)
{
    if (!self->dataset)
        Py_RETURN_NONE;
    Py_INCREF(self->dataset);
    return self->dataset;
}

static PyObject *Loader_get_closed(LoaderObject *self, void *c) { return PyBool_FromLong(self->core == NULL); }

static PyObject *Loader_get_held(LoaderObject *self, void *c)
{
    return PyLong_FromLong(self->core ? atomic_load(&self->core->zero_copy_live) : 0);
}

static PyObject *Loader_errmsg(LoaderObject *self, PyObject *unused)
{
    if (!self->core)
        return PyUnicode_FromString("");
    return PyUnicode_FromString(chute_loader_errmsg(self->core->ld));
}

static int dict_set(PyObject *d, const char *k, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return rc;
}

/* The TensorBoard scalars of a snapshot taken now, as the native writer
 * computes them (src/stats/tboard.c): a list of (tag, value) pairs.  The
 * SummaryWriter path of chute.Loader(tensorboard=writer) writes these. */
static PyObject *Loader_tb_scalars(LoaderObject *self, PyObject *unused)
{
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    chute_stats s;
    chute_loader_stats(self->core->ld, &s);
    double v[CH_TB_NSCALARS];
    ch_tboard_scalars(&s, v);
    PyObject *l = PyList_New(CH_TB_NSCALARS);
    for (int i = 0; l && i < CH_TB_NSCALARS; i++) {
        PyObject *t = Py_BuildValue("(sd)", ch_tb_tags[i], v[i]);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, t);
    }
    return l;
}

/* tb_scalar(tag, value, step): one scalar into the loader's native event
 * file (tensorboard=DIR); False when it has none. */
static PyObject *Loader_tb_scalar(LoaderObject *self, PyObject *args)
{
    const char *tag;
    double value;
    unsigned long long step;
    if (!PyArg_ParseTuple(args, "sdK:tb_scalar", &tag, &value, &step))
        return NULL;
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    int rc = ch_loader_tb_scalar(self->core->ld, tag, value, (uint64_t)step);
    return PyBool_FromLong(rc == CHUTE_OK);
}

static PyObject *Loader_stats(LoaderObject *self, PyObject *unused)
{
    if (!self->core) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    chute_stats s;
    chute_loader_stats(self->core->ld, &s);
    double wall = s.wall_ns / 1e9;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
#define U(k, v) dict_set(d, k, PyLong_FromUnsignedLongLong((unsigned long long)(v)))
#define F(k, v) dict_set(d, k, PyFloat_FromDouble(v))
    if (F("images_per_sec", wall > 0 ? s.samples / wall : 0.0) ||
        F("mb_per_sec", wall > 0 ? s.read.bytes / 1e6 / wall : 0.0) || U("batches", s.batches) ||
        U("samples", s.samples) || U("bytes_read", s.read.bytes) || U("corrupt", s.corrupt) ||
        U("io_retries", s.io_retries) ||
        U("cache_hits", s.cache_hits) || U("cache_misses", s.cache_misses) ||
        U("cache_bytes", s.cache_bytes) || U("cache_entries", s.cache_entries) ||
        U("dct_scaled", s.dct_scaled) || U("workers", s.workers) ||
        U("read_items", s.read.items) || U("read_bytes", s.read.bytes) ||
        F("read_busy_s", s.read.busy_ns / 1e9) || U("decode_items", s.decode.items) ||
        U("decode_bytes", s.decode.bytes) || F("decode_busy_s", s.decode.busy_ns / 1e9) ||
        U("transform_items", s.transform.items) || U("transform_bytes", s.transform.bytes) ||
        F("transform_busy_s", s.transform.busy_ns / 1e9) || F("wait_s", s.wait_ns / 1e9) ||
        F("wait_fraction", wall > 0 ? s.wait_ns / 1e9 / wall : 0.0) || F("wall_s", wall) ||
        U("queue_fill_sum", s.queue_fill_sum) ||
        F("queue_fill_avg", s.batches ? (double)s.queue_fill_sum / s.batches : 0.0) ||
        U("copied_batches", atomic_load(&self->core->copied)) ||
        U("held_batches", atomic_load(&self->core->zero_copy_live)) ||
        U("queue_capacity", s.queue_capacity) || F("read_lat_p50_ms", s.read_lat_p50_ns / 1e6) ||
        F("read_lat_p90_ms", s.read_lat_p90_ns / 1e6) ||
        F("read_lat_p99_ms", s.read_lat_p99_ns / 1e6) ||
        F("read_lat_max_ms", s.read_lat_max_ns / 1e6)) {
        Py_DECREF(d);
        return NULL;
    }
    /* Recent figures (chute_stats window_* and last_*): the loop's rate and
     * wait over the last CHUTE_STATS_WINDOW_MS, not diluted by idle time
     * before the first next() or long ago. */
    double win = s.window_ns / 1e9;
    if (F("window_s", win) ||
        F("window_images_per_sec", win > 0 ? s.window_samples / win : 0.0) ||
        F("window_wait_fraction", win > 0 ? s.window_wait_ns / 1e9 / win : 0.0) ||
        U("window_batches", s.window_batches) || U("window_samples", s.window_samples) ||
        F("last_wait_s", s.last_wait_ns / 1e9) || F("last_step_s", s.last_step_ns / 1e9)) {
        Py_DECREF(d);
        return NULL;
    }
    /* The block cache tier (cache_dir / cache_ram_bytes): chute_stats tier_*. */
    if (U("tier_ram_hits", s.tier_ram_hits) || U("tier_disk_hits", s.tier_disk_hits) ||
        U("tier_fetches", s.tier_fetches) || U("tier_fetched_bytes", s.tier_fetched_bytes) ||
        U("tier_ram_evictions", s.tier_ram_evictions) ||
        U("tier_disk_evictions", s.tier_disk_evictions) || U("tier_corrupt", s.tier_corrupt) ||
        U("tier_fallbacks", s.tier_fallbacks) || U("tier_ram_bytes", s.tier_ram_bytes) ||
        U("tier_ram_budget", s.tier_ram_budget)) {
        Py_DECREF(d);
        return NULL;
    }
#undef U
#undef F
    return d;
}

static PyMethodDef Loader_methods[] = {
    {"stream_state", (PyCFunction)Loader_stream_state, METH_NOARGS,
     "stream_state()\n--\n\nA Kafka stream's position (bytes; b'' for other datasets)."},
    {"set_stream_state", (PyCFunction)Loader_set_stream_state, METH_VARARGS,
     "set_stream_state(state)\n--\n\nResume a Kafka stream from stream_state()'s bytes at "
     "the next start."},
    {"start_epoch_at", (PyCFunction)Loader_start_epoch_at, METH_VARARGS,
     "start_epoch_at(epoch, position)\n--\n\nBegin epoch `epoch` at global position "
     "`position` of its permutation, split over this loader's ranks (elastic resume)."},
    {"position", (PyCFunction)Loader_position, METH_VARARGS,
     "position(batches)\n--\n\nGlobal positions of the epoch consumed once every rank has "
     "consumed `batches` batches of the current run (the dataset size when it is complete)."},
    {"start_epoch", (PyCFunction)Loader_start_epoch, METH_VARARGS,
     "start_epoch(epoch, start_batch)\n--\n\nBegin epoch `epoch`, skipping its first "
     "`start_batch` batches."},
    {"next", (PyCFunction)(void (*)(void))Loader_next, METH_VARARGS | METH_KEYWORDS,
     "next(timeout=None)\n--\n\nThe next Batch of the epoch, or None after the last one."},
    {"stats", (PyCFunction)Loader_stats, METH_NOARGS, "stats()\n--\n\nPipeline counters."},
    {"tb_scalar", (PyCFunction)Loader_tb_scalar, METH_VARARGS,
     "tb_scalar(tag, value, step)\n--\n\nOne scalar into the native event file (False: none)."},
    {"tb_scalars", (PyCFunction)Loader_tb_scalars, METH_NOARGS,
     "tb_scalars()\n--\n\nThe TensorBoard scalars of a snapshot taken now: [(tag, value)]."},
    {"errmsg", (PyCFunction)Loader_errmsg, METH_NOARGS,
     "errmsg()\n--\n\nThe library's last message for this loader (e.g. a skipped sample)."},
    {"close", (PyCFunction)Loader_close, METH_NOARGS,
     "close()\n--\n\nStop the workers; held batches stay valid until freed."},
    {NULL},
};

static PyGetSetDef Loader_getset[] = {
    {"num_batches", (getter)Loader_get_num_batches, NULL, "Batches per epoch for this rank.", NULL},
    {"run_batches", (getter)Loader_get_run_batches, NULL,
     "Batches of this rank in the current run (an elastic resume's remainder).", NULL},
    {"num_samples", (getter)Loader_get_num_samples, NULL, "Samples per epoch for this rank.", NULL},
    {"dataset", (getter)Loader_get_dataset, NULL, "The Dataset.", NULL},
    {"closed", (getter)Loader_get_closed, NULL, "True after close().", NULL},
    {"held", (getter)Loader_get_held, NULL, "Batches currently holding a ring slot.", NULL},
    {NULL},
};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chute._chute._Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)Loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Low-level loader; use chute.Loader.",
    .tp_methods = Loader_methods,
    .tp_getset = Loader_getset,
    .tp_init = (initproc)Loader_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* pack                                                                  */
/* ------------------------------------------------------------------ */

typedef struct pack_ctx {
    PyObject *progress; /* callable or NULL */
    PyObject *skipped;  /* list of (path, reason) */
    PyObject *exc_type, *exc_value, *exc_tb; /* error raised inside a callback */
    double last;
} pack_ctx;

static void pack_keep_error(pack_ctx *p)
{
    if (!p->exc_type)
        PyErr_Fetch(&p->exc_type, &p->exc_value, &p->exc_tb);
    else
        PyErr_Clear();
}

static int pack_progress_cb(const chute_pack_progress *pr, void *user)
{
    pack_ctx *p = user;
    double t = mono_s();
    /* Look at Python at most every 100 ms (and at the end). */
    if (t - p->last < 0.1 && pr->files_done != pr->files_total)
        return 0;
    p->last = t;
    PyGILState_STATE g = PyGILState_Ensure();
    int cancel = 0;
    if (p->exc_type || PyErr_CheckSignals() < 0) {
        cancel = 1;
        if (PyErr_Occurred())
            pack_keep_error(p);
    } else if (p->progress) {
        PyObject *d = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:I,s:d}", "files_done",
                                    (unsigned long long)pr->files_done, "files_total",
                                    (unsigned long long)pr->files_total, "bytes_done",
                                    (unsigned long long)pr->bytes_done, "bytes_total",
                                    (unsigned long long)pr->bytes_total, "skipped",
                                    (unsigned long long)pr->skipped, "shards_done",
                                    (unsigned int)pr->shards_done, "seconds", pr->seconds);
        PyObject *r = d ? PyObject_CallOneArg(p->progress, d) : NULL;
        Py_XDECREF(d);
        if (!r) {
            cancel = 1;
            pack_keep_error(p);
        } else {
            int truth = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (truth < 0) {
                cancel = 1;
                pack_keep_error(p);
            } else if (truth) {
                cancel = 1;
            }
        }
    }
    PyGILState_Release(g);
    return cancel;
}

static void pack_skip_cb(const char *path, const char *reason, void *user)
{
    pack_ctx *p = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *t = Py_BuildValue("(NN)", PyUnicode_DecodeFSDefault(path),
                                PyUnicode_DecodeLocale(reason, "surrogateescape"));
    if (!t || PyList_Append(p->skipped, t) < 0)
        pack_keep_error(p);
    Py_XDECREF(t);
    PyGILState_Release(g);
}

/* While another pack holds out_dir: let Ctrl-C (or an earlier callback
 * error) stop the wait. */
static int pack_wait_cb(const char *out_dir, const char *holder, double waited_s, void *user)
{
    (void)out_dir, (void)holder, (void)waited_s;
    pack_ctx *p = user;
    PyGILState_STATE g = PyGILState_Ensure();
    int cancel = p->exc_type != NULL;
    if (!cancel && PyErr_CheckSignals() < 0) {
        cancel = 1;
        pack_keep_error(p);
    }
    PyGILState_Release(g);
    return cancel;
}

static PyObject *mod_pack(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"root",     "out_dir",    "shard_size", "threads", "strict",
                             "validate", "align",      "max_pixels", "progress",
                             "max_sample_bytes", "wait", "max_side", "quality", "raw", NULL};
    PyObject *root = NULL, *out = NULL, *progress = Py_None;
    unsigned long long shard_size = 0, max_pixels = 0, max_sample_bytes = 0;
    unsigned int threads = 0, align = 0, max_side = 0, quality = 0;
    int strict = 0, validate = 1, wait = 1, raw = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|$KIppIKOKpIIp:pack", kwlist,
                                     PyUnicode_FSConverter, &root, PyUnicode_FSConverter, &out,
                                     &shard_size, &threads, &strict, &validate, &align,
                                     &max_pixels, &progress, &max_sample_bytes, &wait, &max_side,
                                     &quality, &raw))
        return NULL; /* the converters clean up after themselves (Py_CLEANUP_SUPPORTED) */
    if (progress != Py_None && !PyCallable_Check(progress)) {
        Py_DECREF(root);
        Py_DECREF(out);
        PyErr_SetString(PyExc_TypeError, "progress must be callable or None");
        return NULL;
    }
    pack_ctx p;
    memset(&p, 0, sizeof p);
    p.progress = progress == Py_None ? NULL : progress;
    p.skipped = PyList_New(0);
    if (!p.skipped) {
        Py_DECREF(root);
        Py_DECREF(out);
        return NULL;
    }
    p.last = mono_s();
    chute_pack_options o;
    memset(&o, 0, sizeof o);
    o.shard_size = shard_size;
    o.threads = threads;
    o.align = align;
    o.strict = strict;
    o.no_validate = !validate;
    o.max_pixels = max_pixels;
    o.progress = pack_progress_cb;
    o.on_skip = pack_skip_cb;
    o.user = &p;
    o.max_sample_bytes = max_sample_bytes;
    o.no_wait = !wait;
    o.on_wait = pack_wait_cb;
    o.max_side = max_side;
    o.quality = quality;
    o.raw = raw;
    chute_pack_result res;
    memset(&res, 0, sizeof res);
    chute_error err;
    memset(&err, 0, sizeof err);
    const char *rp = PyBytes_AS_STRING(root), *op = PyBytes_AS_STRING(out);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_pack(rp, op, &o, &res, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(root);
    Py_DECREF(out);
    if (p.exc_type) {
        PyErr_Restore(p.exc_type, p.exc_value, p.exc_tb);
        Py_DECREF(p.skipped);
        return NULL;
    }
    if (rc != CHUTE_OK) {
        Py_DECREF(p.skipped);
        return raise_status(rc, err.message);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:I,s:I,s:d,s:N,s:K,s:K,s:O}", "files",
                         (unsigned long long)res.files, "bytes", (unsigned long long)res.bytes,
                         "skipped", (unsigned long long)res.skipped, "shards",
                         (unsigned int)res.shards, "classes", (unsigned int)res.classes,
                         "seconds", res.seconds, "skipped_files", p.skipped,
                         "skipped_over_limit", (unsigned long long)res.skipped_over_limit,
                         "reads_retried", (unsigned long long)res.reads_retried,
                         "already_packed", res.already_packed ? Py_True : Py_False);
}

static PyObject *mod_probe_image(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "max_pixels", NULL};
    Py_buffer buf;
    unsigned long long max_pixels = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|K:probe_image", kwlist, &buf, &max_pixels))
        return NULL;
    uint32_t w = 0, h = 0, ch = 0;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_probe_image(buf.buf, (size_t)buf.len, max_pixels, &w, &h, &ch, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    return Py_BuildValue("(III)", w, h, ch);
}

static PyObject *mod_image_header(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", NULL};
    Py_buffer buf;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*:image_header", kwlist, &buf))
        return NULL;
    uint32_t w = 0, h = 0, ch = 0;
    int fmt = 0;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc = chute_image_header(buf.buf, (size_t)buf.len, &w, &h, &ch, &fmt, &err);
    PyBuffer_Release(&buf);
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    return Py_BuildValue("(IIIi)", w, h, ch, fmt);
}

static PyObject *mod_version(PyObject *m, PyObject *unused) { return PyUnicode_FromString(chute_version()); }

static PyObject *mod_default_workers(PyObject *m, PyObject *unused)
{
    char why[256];
    uint32_t n = chute_default_workers(why, sizeof why);
    return Py_BuildValue("(Is)", (unsigned int)n, why);
}

static PyObject *mod_status_name(PyObject *m, PyObject *arg)
{
    long s = PyLong_AsLong(arg);
    if (s == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(chute_status_name((int)s));
}

static PyObject *mod_features(PyObject *m, PyObject *unused)
{
    return PyUnicode_FromString(chute_features());
}

/* loader_options(): the option table, one tuple per option:
 * (name, kind, default, min, max, layers, help) with kind "u32", "u64" or
 * "bool", default 0 for a computed default ("auto" in layers), and layers
 * a tuple of "c", "cli", "python", "auto", "zero_off" (a nonzero default
 * that 0 turns off).  chute/loader.py takes its
 * defaults and bounds from it. */
static PyObject *mod_loader_options(PyObject *m, PyObject *unused)
{
    const ch_loader_opt *t = ch_loader_opts();
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (int i = 0; i < CH_LOPT_COUNT; i++) {
        const ch_loader_opt *d = &t[i];
        const char *lay[5];
        int nl = 0;
        lay[nl++] = "c";
        if (d->layers & CH_OPT_CLI)
            lay[nl++] = "cli";
        if (d->layers & CH_OPT_PY)
            lay[nl++] = "python";
        if (d->layers & CH_OPT_AUTO)
            lay[nl++] = "auto";
        if (d->layers & CH_OPT_ZERO_OFF)
            lay[nl++] = "zero_off"; /* 0 is off, not the default */
        PyObject *layers = PyTuple_New(nl);
        if (!layers)
            goto fail;
        for (int k = 0; k < nl; k++) {
            PyObject *w = PyUnicode_FromString(lay[k]);
            if (!w) {
                Py_DECREF(layers);
                goto fail;
            }
            PyTuple_SET_ITEM(layers, k, w);
        }
        PyObject *row = Py_BuildValue("(ssKKKNs)", d->name, ch_opt_kind_name(d->kind),
                                      (unsigned long long)d->def, (unsigned long long)d->min,
                                      (unsigned long long)d->max, layers, d->help);
        if (!row || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            goto fail;
        }
        Py_DECREF(row);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* option_rows(): the option table's other rows (loader_options.def's
 * enums, floats, negated flags and strings; every row of
 * dataset_options.def), one tuple per row:
 * (table, name, field, kind, default, choices, layers, help, min, max) with table
 * "loader" or "dataset", kind "enum", "float", "neg", "str", "u32", "u64"
 * or "i32", default as Python spells it (an enum's first choice, a float
 * or a 3-tuple or None when computed, True for a negated flag, None for a
 * string), choices a tuple of names (enums; value = position) or None,
 * layers as loader_options(), min and max the bounds of an integer row
 * (else None).  chute/loader.py builds its choice tables
 * and defaults from it. */
static PyObject *opt_row_py(const char *table, const ch_opt_row *d)
{
    static const char *kinds[] = {"u32", "u64", "bool", "i32", "enum", "float", "neg", "str"};
    PyObject *def = NULL, *choices = NULL, *layers = NULL;
    if (d->kind == CH_OPT_ENUM) {
        choices = PyList_New(0);
        char b[64];
        for (int k = 0; choices && ch_opt_choice(d, k, b, sizeof b) == 0; k++) {
            PyObject *w = PyUnicode_FromString(b);
            if (!w || PyList_Append(choices, w) < 0) {
                Py_XDECREF(w);
                Py_CLEAR(choices);
            } else {
                Py_DECREF(w);
            }
        }
        if (!choices)
            return NULL;
        PyObject *t = PyList_AsTuple(choices);
        Py_DECREF(choices);
        choices = t;
        if (!choices)
            return NULL;
        def = PyTuple_GetItem(choices, 0);
        Py_XINCREF(def);
    } else {
        choices = Py_None;
        Py_INCREF(choices);
        if (d->kind == CH_OPT_F32)
            def = (d->layers & CH_OPT_AUTO) ? (Py_INCREF(Py_None), Py_None)
                  : d->n == 1 ? PyFloat_FromDouble(d->fdef[0])
                              : Py_BuildValue("(ddd)", (double)d->fdef[0], (double)d->fdef[1],
                                              (double)d->fdef[2]);
        else if (d->kind == CH_OPT_NEG)
            def = (Py_INCREF(Py_True), Py_True);
        else if (d->kind == CH_OPT_STR)
            def = (Py_INCREF(Py_None), Py_None);
        else if (d->kind == CH_OPT_I32)
            def = PyLong_FromLongLong((long long)(int64_t)d->def);
        else if (d->kind == CH_OPT_BOOL)
            def = PyBool_FromLong(d->def != 0);
        else
            def = PyLong_FromUnsignedLongLong(d->def);
    }
    layers = Py_BuildValue("(s)", "c");
    if (layers && (d->layers & CH_OPT_CLI)) {
        PyObject *t = Py_BuildValue("(s)", "cli"), *u = t ? PySequence_Concat(layers, t) : NULL;
        Py_XDECREF(t);
        Py_DECREF(layers);
        layers = u;
    }
    if (layers && (d->layers & CH_OPT_PY)) {
        PyObject *t = Py_BuildValue("(s)", "python"), *u = t ? PySequence_Concat(layers, t) : NULL;
        Py_XDECREF(t);
        Py_DECREF(layers);
        layers = u;
    }
    if (layers && (d->layers & CH_OPT_AUTO)) {
        PyObject *t = Py_BuildValue("(s)", "auto"), *u = t ? PySequence_Concat(layers, t) : NULL;
        Py_XDECREF(t);
        Py_DECREF(layers);
        layers = u;
    }
    if (layers && (d->layers & CH_OPT_ZERO_OFF)) { /* 0 is off, not the default */
        PyObject *t = Py_BuildValue("(s)", "zero_off"), *u = t ? PySequence_Concat(layers, t) : NULL;
        Py_XDECREF(t);
        Py_DECREF(layers);
        layers = u;
    }
    if (layers && d->from_loader) { /* the session's row is the loader table's */
        PyObject *t = Py_BuildValue("(s)", "loader"), *u = t ? PySequence_Concat(layers, t) : NULL;
        Py_XDECREF(t);
        Py_DECREF(layers);
        layers = u;
    }
    if (!def || !layers) {
        Py_XDECREF(def);
        Py_XDECREF(layers);
        Py_DECREF(choices);
        return NULL;
    }
    PyObject *lo = Py_None, *hi = Py_None; /* integer rows' bounds */
    if (d->kind == CH_OPT_I32) {
        lo = PyLong_FromLongLong((long long)(int64_t)d->min);
        hi = PyLong_FromLongLong((long long)(int64_t)d->max);
    } else if (d->kind == CH_OPT_U32 || d->kind == CH_OPT_U64) {
        lo = PyLong_FromUnsignedLongLong(d->min);
        hi = PyLong_FromUnsignedLongLong(d->max);
    } else {
        Py_INCREF(lo);
        Py_INCREF(hi);
    }
    if (!lo || !hi) {
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        Py_DECREF(def);
        Py_DECREF(layers);
        Py_DECREF(choices);
        return NULL;
    }
    char hb[512]; /* "{formats}" in a help line: the registry's names */
    return Py_BuildValue("(ssssNNNsNN)", table, d->name, d->field, kinds[d->kind], def, choices,
                         layers, ch_opt_help(d->help, hb, sizeof hb), lo, hi);
}

static PyObject *mod_option_rows(PyObject *m, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    for (int t = 0; out && t < 2; t++) {
        const ch_opt_row *d = t ? ch_dataset_opts() : ch_loader_xopts();
        int n = t ? ch_dataset_opt_count() : ch_loader_xopt_count();
        for (int i = 0; i < n; i++) {
            PyObject *row = opt_row_py(t ? "dataset" : "loader", &d[i]);
            if (!row || PyList_Append(out, row) < 0) {
                Py_XDECREF(row);
                Py_CLEAR(out);
                break;
            }
            Py_DECREF(row);
        }
    }
    return out;
}

/* infer_options(): the inference session's table (infer_options.def), one
 * tuple per row as option_rows() with table "infer"; a row shared with the
 * loader has "loader" in its layers. */
static PyObject *mod_infer_options(PyObject *m, PyObject *unused)
{
    const ch_opt_row *t = ch_infer_opts();
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < ch_infer_opt_count(); i++) {
        PyObject *row = opt_row_py("infer", &t[i]);
        if (!row || PyList_Append(out, row) < 0)
            Py_CLEAR(out);
        Py_XDECREF(row);
    }
    return out;
}

static int infer_opts_from_py(const char *who, PyObject *args, PyObject *kw,
                              chute_infer_options *o);

/* resolve_infer_options(**options): what chute_infer_create makes of these
 * options (chute.Infer's keywords): a dict of every Python-exposed row's
 * resolved value as Python spells it (ints, bools, choice names, floats);
 * InvalidArgumentError with C's message when one is refused. */
static PyObject *mod_resolve_infer_options(PyObject *m, PyObject *args, PyObject *kw)
{
    chute_infer_options in, out;
    if (infer_opts_from_py("resolve_infer_options()", args, kw, &in))
        return NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc = ch_infer_options_resolve(&in, &out, NULL, &err);
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    const ch_opt_row *t = ch_infer_opts();
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < ch_infer_opt_count(); i++) {
        const ch_opt_row *r = &t[i];
        const char *p = (const char *)&out + r->offset;
        if (!(r->layers & CH_OPT_PY))
            continue;
        PyObject *x = NULL;
        uint32_t u32;
        uint64_t u64;
        float f[3];
        char b[64];
        switch (r->kind) {
        case CH_OPT_U64:
            memcpy(&u64, p, sizeof u64);
            x = PyLong_FromUnsignedLongLong(u64);
            break;
        case CH_OPT_BOOL:
        case CH_OPT_NEG:
            memcpy(&u32, p, sizeof u32);
            x = PyBool_FromLong(r->kind == CH_OPT_NEG ? u32 == 0 : u32 != 0);
            break;
        case CH_OPT_ENUM:
            memcpy(&u32, p, sizeof u32);
            x = ch_opt_choice(r, (int)u32 - (int)r->first, b, sizeof b) == 0
                    ? PyUnicode_FromString(b)
                    : PyLong_FromUnsignedLong(u32);
            break;
        case CH_OPT_F32:
            memcpy(f, p, r->n * sizeof(float));
            x = r->n == 1 ? PyFloat_FromDouble(f[0])
                          : Py_BuildValue("(ddd)", (double)f[0], (double)f[1], (double)f[2]);
            break;
        default:
            memcpy(&u32, p, sizeof u32);
            x = PyLong_FromUnsignedLong(u32);
            break;
        }
        if (!x || PyDict_SetItemString(d, r->name, x) < 0)
            Py_CLEAR(d);
        Py_XDECREF(x);
    }
    return d;
}

/* check_options(**options): the C check of the other rows (enums as
 * ints, floats) on a chute_loader_options / chute_dataset_options holding
 * just these values; None, or ValueError with C's message naming the
 * option.  For tests: the C layer's refusal, without a dataset. */
static PyObject *mod_check_options(PyObject *m, PyObject *args, PyObject *kw)
{
    chute_loader_options lo;
    chute_dataset_options dso;
    memset(&lo, 0, sizeof lo);
    memset(&dso, 0, sizeof dso);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (kw && PyDict_Next(kw, &pos, &k, &v)) {
        const char *name = PyUnicode_AsUTF8(k);
        if (!name)
            return NULL;
        const ch_opt_row *d = NULL;
        char *base = NULL;
        for (int t = 0; t < 2 && !d; t++) {
            const ch_opt_row *r = t ? ch_dataset_opts() : ch_loader_xopts();
            int n = t ? ch_dataset_opt_count() : ch_loader_xopt_count();
            for (int i = 0; i < n; i++)
                if (!strcmp(r[i].name, name) && r[i].kind != CH_OPT_NEG &&
                    r[i].kind != CH_OPT_STR) {
                    d = &r[i];
                    base = t ? (char *)&dso : (char *)&lo;
                    break;
                }
        }
        if (!d) {
            PyErr_Format(PyExc_TypeError, "check_options: no enum/float/int row %s", name);
            return NULL;
        }
        if (d->kind == CH_OPT_F32) {
            float f[3] = {0, 0, 0};
            if (d->n == 1) {
                f[0] = (float)PyFloat_AsDouble(v);
            } else if (parse_rgb(v, f, d->name)) {
                return NULL;
            }
            if (PyErr_Occurred())
                return NULL;
            memcpy(base + d->offset, f, d->n * sizeof(float));
        } else {
            long long x = PyLong_AsLongLong(v);
            if (x == -1 && PyErr_Occurred())
                return NULL;
            if (d->kind == CH_OPT_U64) {
                uint64_t u = (uint64_t)x;
                memcpy(base + d->offset, &u, sizeof u);
            } else {
                int32_t i32 = (int32_t)x;
                memcpy(base + d->offset, &i32, sizeof i32);
            }
        }
    }
    chute_error err;
    memset(&err, 0, sizeof err);
    if (ch_opt_rows_check(&lo, ch_loader_xopts(), ch_loader_xopt_count(), &err) != CHUTE_OK ||
        ch_dataset_options_check(&dso, &err) != CHUTE_OK) {
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* resolve_loader_options(**options): what chute_loader_create makes of
 * these table options (the rest zero): a dict of every table option's
 * resolved value, or ValueError with C's message. */
static PyObject *mod_resolve_loader_options(PyObject *m, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "resolve_loader_options takes keyword arguments only");
        return NULL;
    }
    const ch_loader_opt *t = ch_loader_opts();
    PyObject *vals[CH_LOPT_COUNT] = {0};
    Py_ssize_t found = 0;
    for (int i = 0; i < CH_LOPT_COUNT; i++) {
        vals[i] = kw ? PyDict_GetItemString(kw, t[i].name) : NULL; /* borrowed */
        found += vals[i] != NULL;
    }
    if (kw && found != PyDict_Size(kw)) {
        PyErr_SetString(PyExc_TypeError, "resolve_loader_options: an unknown option name");
        return NULL;
    }
    chute_loader_options in, out;
    memset(&in, 0, sizeof in);
    if (opts_from_py(vals, &in))
        return NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc = ch_loader_options_resolve(&in, &out, &err);
    if (rc != CHUTE_OK) {
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    for (int i = 0; i < CH_LOPT_COUNT; i++) {
        uint64_t v = ch_loader_opt_get(&out, &t[i]);
        PyObject *x = t[i].kind == CH_OPT_BOOL ? PyBool_FromLong((long)v)
                                                : PyLong_FromUnsignedLongLong(v);
        if (!x || PyDict_SetItemString(d, t[i].name, x) < 0) {
            Py_XDECREF(x);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(x);
    }
    return d;
}

/* _dataset_from_arrow(capsule, ...): a Dataset over an Arrow C stream (the
 * PyCapsule "arrow_array_stream" that __arrow_c_stream__ returns).  The
 * stream is moved out of the capsule (its release set to NULL, as the
 * PyCapsule protocol asks of a consumer) and consumed with the GIL
 * released: a producer written in Python (pyarrow's RecordBatchReader over
 * a generator of Parquet row groups) takes the GIL back for each batch,
 * and pyarrow's own reads run without it. */
#include "chute_arrow.h"

static PyObject *mod_dataset_from_arrow(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *kwlist[] = {"stream", "image_key", "label_key", "label_offset", "read_delay_us",
                             "name", "schema", NULL};
    PyObject *cap = NULL, *name = NULL;
    const char *image_key = NULL, *label_key = NULL, *schema = NULL;
    int label_offset = 0;
    unsigned int delay = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$zziIUz:_dataset_from_arrow", kwlist, &cap,
                                     &image_key, &label_key, &label_offset, &delay, &name,
                                     &schema))
        return NULL;
    struct ArrowArrayStream *src = PyCapsule_GetPointer(cap, "arrow_array_stream");
    if (!src)
        return NULL;
    if (!src->release) {
        PyErr_SetString(PyExc_ValueError, "the Arrow stream was already consumed");
        return NULL;
    }
    struct ArrowArrayStream st = *src;
    src->release = NULL; /* moved */
    chute_dataset_options o;
    memset(&o, 0, sizeof o);
    o.image_key = image_key;
    o.label_key = label_key;
    o.label_offset = label_offset;
    o.read_delay_us = delay;
    o.schema = schema;
    chute_dataset *ds = NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_dataset_open_arrow(&st, &o, &ds, &err);
    Py_END_ALLOW_THREADS
    if (rc != CHUTE_OK) {
        raise_status(rc, err.message);
        return NULL;
    }
    DatasetObject *self = (DatasetObject *)DatasetType.tp_alloc(&DatasetType, 0);
    ds_ref *r = self ? malloc(sizeof *r) : NULL;
    if (!r) {
        Py_XDECREF(self);
        chute_dataset_close(ds);
        return self ? PyErr_NoMemory() : NULL;
    }
    atomic_init(&r->refs, 1);
    r->ds = ds;
    self->ref = r;
    self->path = name ? (Py_INCREF(name), name) : PyUnicode_FromString("<arrow stream>");
    if (!self->path) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* _dataset_from_arrow_units(schema, rows, labels, load, ...): a Dataset
 * over units (Parquet row groups) loaded on demand through load(u), a
 * Python callable returning a pyarrow RecordBatch (anything with
 * __arrow_c_array__).  The library calls it from worker threads: the
 * trampoline takes the GIL for the call (pyarrow drops it while it reads
 * and decompresses) and moves the array out of the returned capsule.  A
 * ValueError (pyarrow's ArrowInvalid: damaged data) is CHUTE_ECORRUPT,
 * anything else CHUTE_EIO, with the exception's text. */
typedef struct py_units {
    PyObject *load;
} py_units;

static int py_units_load(void *ctx, uint64_t u, struct ArrowArray *out, char *msg, size_t cap)
{
    py_units *pu = ctx;
#if PY_VERSION_HEX >= 0x030D0000
    int fin = Py_IsFinalizing();
#else
    int fin = _Py_IsFinalizing();
#endif
    if (fin) { /* taking the GIL now would never return (chute.arrow closes loaders at exit) */
        snprintf(msg, cap, "the Python interpreter is shutting down");
        return CHUTE_EIO;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = CHUTE_EIO;
    PyObject *b = PyObject_CallFunction(pu->load, "K", (unsigned long long)u);
    PyObject *pair = b ? PyObject_CallMethod(b, "__arrow_c_array__", NULL) : NULL;
    if (pair && (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)) {
        PyErr_SetString(PyExc_TypeError, "__arrow_c_array__ did not return a pair");
    } else if (pair) {
        struct ArrowArray *a = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 1), "arrow_array");
        if (a && !a->release)
            PyErr_SetString(PyExc_ValueError, "the Arrow array was already consumed");
        else if (a) {
            *out = *a;
            a->release = NULL; /* moved */
            rc = 0;
        }
    }
    if (rc) {
        PyObject *t = NULL, *v = NULL, *tb = NULL;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (t && PyErr_GivenExceptionMatches(t, PyExc_ValueError))
            rc = CHUTE_ECORRUPT;
        PyObject *str = v ? PyObject_Str(v) : NULL;
        const char *c = str ? PyUnicode_AsUTF8(str) : NULL;
        snprintf(msg, cap, "%s", c ? c : "the load callback failed");
        Py_XDECREF(str);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        PyErr_Clear();
    }
    Py_XDECREF(pair);
    Py_XDECREF(b);
    PyGILState_Release(g);
    return rc;
}

static void py_units_release(void *ctx)
{
    py_units *pu = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(pu->load);
    PyGILState_Release(g);
    free(pu);
}

static PyObject *mod_dataset_from_arrow_units(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *kwlist[] = {"schema", "rows", "labels", "load", "max_resident", "unit_names",
                             "image_key", "label_key", "label_offset", "read_delay_us", "name",
                             "null_defaults", NULL};
    PyObject *scap = NULL, *load = NULL, *labels_obj = Py_None, *names = Py_None, *name = NULL;
    Py_buffer rows = {0};
    const char *image_key = NULL, *label_key = NULL, *defaults = NULL;
    int label_offset = 0;
    unsigned int delay = 0, max_resident = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oy*OO|$IOzziIUz:_dataset_from_arrow_units",
                                     kwlist, &scap, &rows, &labels_obj, &load, &max_resident,
                                     &names, &image_key, &label_key, &label_offset, &delay,
                                     &name, &defaults))
        return NULL;
    PyObject *ret = NULL;
    Py_buffer labels = {0};
    const char **unames = NULL;
    Py_ssize_t nunits = rows.len / (Py_ssize_t)sizeof(uint64_t);
    if (rows.len % (Py_ssize_t)sizeof(uint64_t) || !PyCallable_Check(load)) {
        PyErr_SetString(PyExc_ValueError, "rows must be uint64 bytes and load a callable");
        goto done;
    }
    if (labels_obj != Py_None && PyObject_GetBuffer(labels_obj, &labels, PyBUF_SIMPLE) < 0)
        goto done;
    if (labels.buf) {
        /* one int64 per row: the library reads sum(rows) of them */
        uint64_t total = 0;
        const uint64_t *rv = rows.buf;
        for (Py_ssize_t k = 0; k < nunits; k++) {
            uint64_t r;
            memcpy(&r, rv + k, sizeof r);
            if (r > (uint64_t)1 << 48 || total > UINT64_MAX / 16)
                break;
            total += r;
        }
        if ((uint64_t)labels.len / 8 != total || labels.len % 8) {
            PyErr_SetString(PyExc_ValueError, "labels must hold one int64 per row");
            goto done;
        }
    }
    if (names != Py_None) {
        if (!PyList_Check(names) || PyList_GET_SIZE(names) != nunits) {
            PyErr_SetString(PyExc_ValueError, "unit_names must be a list, one per unit");
            goto done;
        }
        unames = calloc((size_t)nunits + 1, sizeof *unames);
        if (!unames) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < nunits; k++)
            if (!(unames[k] = PyUnicode_AsUTF8(PyList_GET_ITEM(names, k))))
                goto done;
    }
    struct ArrowSchema *sp = PyCapsule_GetPointer(scap, "arrow_schema");
    if (!sp)
        goto done;
    if (!sp->release) {
        PyErr_SetString(PyExc_ValueError, "the Arrow schema was already consumed");
        goto done;
    }
    py_units *pu = malloc(sizeof *pu);
    if (!pu) {
        PyErr_NoMemory();
        goto done;
    }
    Py_INCREF(load);
    pu->load = load;
    struct ArrowSchema sch = *sp;
    sp->release = NULL; /* moved */
    chute_arrow_units src;
    memset(&src, 0, sizeof src);
    src.schema = &sch;
    src.n_units = (uint64_t)nunits;
    src.rows = rows.buf;
    src.labels = labels.buf && labels.len ? labels.buf : NULL;
    src.max_resident = max_resident;
    src.load = py_units_load;
    src.release = py_units_release;
    src.ctx = pu;
    src.unit_names = unames;
    chute_dataset_options o;
    memset(&o, 0, sizeof o);
    o.image_key = image_key;
    o.label_key = label_key;
    o.label_offset = label_offset;
    o.read_delay_us = delay;
    o.schema = defaults;
    chute_dataset *ds = NULL;
    chute_error err;
    memset(&err, 0, sizeof err);
    /* Open does not call load (labels come from the caller); the GIL stays
     * held, and release (on failure) takes it re-entrantly. */
    int rc = chute_dataset_open_arrow_units(&src, &o, &ds, &err);
    if (rc != CHUTE_OK) {
        raise_status(rc, err.message);
        goto done;
    }
    DatasetObject *self = (DatasetObject *)DatasetType.tp_alloc(&DatasetType, 0);
    ds_ref *r = self ? malloc(sizeof *r) : NULL;
    if (!r) {
        Py_XDECREF(self);
        chute_dataset_close(ds);
        if (self)
            PyErr_NoMemory();
        goto done;
    }
    atomic_init(&r->refs, 1);
    r->ds = ds;
    self->ref = r;
    self->path = name ? (Py_INCREF(name), name) : PyUnicode_FromString("<arrow units>");
    if (!self->path) {
        Py_DECREF(self);
        goto done;
    }
    ret = (PyObject *)self;
done:
    free(unames);
    if (labels.buf)
        PyBuffer_Release(&labels);
    PyBuffer_Release(&rows);
    return ret;
}

/* _arrow_units_stats(ds): (loads, peak_resident, resident) of a units-mode
 * Arrow dataset. */
static PyObject *mod_arrow_units_stats(PyObject *mod, PyObject *arg)
{
    (void)mod;
    if (!PyObject_TypeCheck(arg, &DatasetType) || !((DatasetObject *)arg)->ref) {
        PyErr_SetString(PyExc_TypeError, "a chute Dataset is required");
        return NULL;
    }
    uint64_t loads = 0;
    uint32_t peak = 0, now = 0;
    if (chute_dataset_arrow_units_stats(((DatasetObject *)arg)->ref->ds, &loads, &peak, &now) !=
        CHUTE_OK) {
        PyErr_SetString(PyExc_ValueError, "not an Arrow units dataset");
        return NULL;
    }
    return Py_BuildValue("(KII)", (unsigned long long)loads, peak, now);
}

/* ------------------------------------------------------------------ */
/* _Writer: chute_writer_open/add/finish/abort (chute.Writer wraps it)  */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD chute_writer *w;
    int busy;  /* a call is in C without the GIL: no second one */
} WriterObject;

static int Writer_init(WriterObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dst",   "format",   "shard_size", "prefix", "label_offset",
                             "align", "validate", "classes",    "force",  "key_prefix", NULL};
    PyObject *dst = NULL, *classes = Py_None;
    const char *format = "chute", *prefix = NULL, *key_prefix = NULL;
    unsigned long long shard_size = 0;
    int label_offset = 0, validate = 0, force = 0;
    unsigned int align = 0;
    if (self->w) {
        PyErr_SetString(PyExc_RuntimeError, "_Writer is already open");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|s$KziIpOpz:_Writer", kwlist,
                                     PyUnicode_FSConverter, &dst, &format, &shard_size, &prefix,
                                     &label_offset, &align, &validate, &classes, &force,
                                     &key_prefix))
        return -1;
    PyObject *seq = NULL;
    const char **names = NULL;
    Py_ssize_t nc = 0;
    if (classes != Py_None) {
        seq = PySequence_Fast(classes, "classes must be a sequence of str");
        if (!seq)
            goto fail;
        nc = PySequence_Fast_GET_SIZE(seq);
        if (nc > 0xFFFFFF) {
            PyErr_SetString(PyExc_ValueError, "classes: more than 2^24 names");
            goto fail;
        }
        names = PyMem_Calloc(nc ? (size_t)nc : 1, sizeof *names);
        if (!names) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < nc; i++) {
            PyObject *s = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyUnicode_Check(s) || !(names[i] = PyUnicode_AsUTF8(s))) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "classes[%zd] is not a str", i);
                goto fail;
            }
        }
    }
    chute_convert_options o;
    memset(&o, 0, sizeof o);
    o.format = format;
    o.shard_size = shard_size;
    o.prefix = prefix;
    o.label_offset = label_offset;
    o.align = align;
    o.validate = validate;
    o.force = force;
    o.key_prefix = key_prefix;
    chute_error err;
    memset(&err, 0, sizeof err);
    chute_writer *w = NULL;
    int rc;
    const char *dp = PyBytes_AS_STRING(dst);
    Py_BEGIN_ALLOW_THREADS
    rc = chute_writer_open(dp, &o, (uint32_t)nc, names, &w, &err);
    Py_END_ALLOW_THREADS
    if (rc != CHUTE_OK) {
        raise_status(rc, err.message);
        goto fail;
    }
    self->w = w;
    PyMem_Free(names);
    Py_XDECREF(seq);
    Py_DECREF(dst);
    return 0;
fail:
    PyMem_Free(names);
    Py_XDECREF(seq);
    Py_DECREF(dst);
    return -1;
}

static int writer_usable(WriterObject *self)
{
    if (!self->w) {
        PyErr_SetString(PyExc_ValueError, "the writer is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the writer is in use by another thread");
        return 0;
    }
    return 1;
}

static PyObject *Writer_write(WriterObject *self, PyObject *args)
{
    Py_buffer buf;
    int label = 0;
    if (!PyArg_ParseTuple(args, "y*i:write", &buf, &label))
        return NULL;
    if (!writer_usable(self)) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    chute_error err;
    err.message[0] = '\0';
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_writer_add(self->w, buf.buf, (size_t)buf.len, label, &err);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&buf);
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    Py_RETURN_NONE;
}

static PyObject *Writer_close(WriterObject *self, PyObject *unused)
{
    (void)unused;
    if (!writer_usable(self))
        return NULL;
    chute_convert_result res;
    memset(&res, 0, sizeof res);
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_writer_finish(self->w, &res, &err);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *files = NULL;
    if (rc == CHUTE_OK && (files = PyList_New(0)) != NULL) {
        for (uint32_t k = 0; k < chute_writer_file_count(self->w); k++) {
            PyObject *s = PyUnicode_DecodeFSDefault(chute_writer_file(self->w, k));
            if (!s || PyList_Append(files, s) < 0) {
                Py_XDECREF(s);
                Py_CLEAR(files);
                break;
            }
            Py_DECREF(s);
        }
    }
    chute_writer *w = self->w;
    self->w = NULL;
    Py_BEGIN_ALLOW_THREADS
    chute_writer_abort(w); /* frees; a failed finish leaves nothing behind */
    Py_END_ALLOW_THREADS
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    if (!files)
        return NULL;
    return Py_BuildValue("{s:K,s:N,s:K,s:d,s:s}", "samples", (unsigned long long)res.samples,
                         "files", files, "bytes", (unsigned long long)res.bytes, "seconds",
                         res.seconds, "format", res.format);
}

static PyObject *Writer_abort(WriterObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the writer is in use by another thread");
        return NULL;
    }
    chute_writer *w = self->w;
    self->w = NULL;
    if (w) {
        Py_BEGIN_ALLOW_THREADS
        chute_writer_abort(w);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static void Writer_dealloc(WriterObject *self)
{
    chute_writer_abort(self->w); /* never closed: nothing it wrote stays */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Writer_methods[] = {
    {"write", (PyCFunction)Writer_write, METH_VARARGS,
     "write(data, label)\n--\n\nAdd one encoded image (bytes-like) and its label."},
    {"close", (PyCFunction)Writer_close, METH_NOARGS,
     "close()\n--\n\nFinish and publish; returns dict(samples, files, bytes, seconds, format)."},
    {"abort", (PyCFunction)Writer_abort, METH_NOARGS,
     "abort()\n--\n\nDrop everything written (idempotent)."},
    {NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chute._chute._Writer",
    .tp_basicsize = sizeof(WriterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Low-level chute_writer_*; see chute.Writer.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Writer_init,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
};

static PyObject *mod_write_manifest(PyObject *m, PyObject *args)
{
    PyObject *dir = NULL, *samples = NULL, *bytes = NULL;
    (void)m;
    if (!PyArg_ParseTuple(args, "O&OO:write_manifest", PyUnicode_FSConverter, &dir, &samples,
                          &bytes))
        return NULL;
    PyObject *ss = PySequence_Fast(samples, "samples must be a sequence of int");
    PyObject *bs = ss ? PySequence_Fast(bytes, "bytes must be a sequence of int") : NULL;
    uint64_t *v = NULL;
    Py_ssize_t n = bs ? PySequence_Fast_GET_SIZE(ss) : 0;
    PyObject *ret = NULL;
    if (!bs)
        goto out;
    if (PySequence_Fast_GET_SIZE(bs) != n || n > 0xFFFFFF) {
        PyErr_SetString(PyExc_ValueError, "samples and bytes: one entry per shard (at most 2^24)");
        goto out;
    }
    if (!(v = PyMem_Calloc(n ? 2 * (size_t)n : 1, sizeof *v))) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(ss, i));
        v[n + i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(bs, i));
        if (PyErr_Occurred())
            goto out;
    }
    chute_error err;
    memset(&err, 0, sizeof err);
    int rc;
    const char *dp = PyBytes_AS_STRING(dir);
    Py_BEGIN_ALLOW_THREADS
    rc = chute_manifest_write(dp, (uint32_t)n, v, v + n, &err);
    Py_END_ALLOW_THREADS
    if (rc != CHUTE_OK)
        raise_status(rc, err.message);
    else
        ret = Py_None, Py_INCREF(Py_None);
out:
    PyMem_Free(v);
    Py_XDECREF(ss);
    Py_XDECREF(bs);
    Py_DECREF(dir);
    return ret;
}

static PyMethodDef module_methods[] = {
    {"write_manifest", (PyCFunction)mod_write_manifest, METH_VARARGS,
     "write_manifest(dir, samples, bytes)\n--\n\n"
     "chute_manifest_write: DIR/chute.manifest for shard-00000.chute.. with these counts."},
    {"pack", (PyCFunction)(void (*)(void))mod_pack, METH_VARARGS | METH_KEYWORDS,
     "pack(root, out_dir, *, shard_size=0, threads=0, strict=False, validate=True, align=0,\n"
     "     max_pixels=0, progress=None, max_sample_bytes=0, wait=True, max_side=0, quality=0, raw=False)\n--\n\n"
     "Low-level chute_pack; see chute.pack."},
    {"image_header", (PyCFunction)(void (*)(void))mod_image_header, METH_VARARGS | METH_KEYWORDS,
     "Header-only look at an encoded image: (width, height, channels, format), format 1 = JPEG, "
     "2 = PNG, 3 = BMP, 4 = CHRAW; no pixels decoded."},
    {"probe_image", (PyCFunction)(void (*)(void))mod_probe_image, METH_VARARGS | METH_KEYWORDS,
     "probe_image(data, max_pixels=0)\n--\n\n"
     "Decode-check an encoded image; returns (width, height, channels)."},
    {"default_workers", (PyCFunction)mod_default_workers, METH_NOARGS,
     "default_workers()\n--\n\n(count, reason): the worker count a Loader uses when workers is\n"
     "None: the CPUs this process may use (affinity mask, cgroup CPU quota) divided by\n"
     "LOCAL_WORLD_SIZE when set."},
    {"option_rows", (PyCFunction)mod_option_rows, METH_NOARGS,
     "option_rows()\n--\n\nThe option table's enum, float, flag and string rows and the dataset\n"
     "table (src/common/loader_options.def, dataset_options.def): a list of\n"
     "(table, name, field, kind, default, choices, layers, help)."},
    {"check_options", (PyCFunction)(void (*)(void))mod_check_options,
     METH_VARARGS | METH_KEYWORDS,
     "check_options(**options)\n--\n\nThe C check of enum (as int), float and dataset int options;\n"
     "ValueError with C's message."},
    {"infer_options", (PyCFunction)mod_infer_options, METH_NOARGS,
     "infer_options()\n--\n\nThe inference session's option table (src/common/infer_options.def):\n"
     "a list of (table, name, field, kind, default, choices, layers, help, min, max) as\n"
     "option_rows(); \"loader\" in layers: the loader table's row for that field."},
    {"resolve_infer_options", (PyCFunction)(void (*)(void))mod_resolve_infer_options,
     METH_VARARGS | METH_KEYWORDS,
     "resolve_infer_options(**options)\n--\n\nWhat chute_infer_create makes of chute.Infer's\n"
     "keywords: a dict of every keyword's resolved value; InvalidArgumentError when refused."},
    {"loader_options", (PyCFunction)mod_loader_options, METH_NOARGS,
     "loader_options()\n--\n\nThe loader's option table (src/common/loader_options.def): a list of\n"
     "(name, kind, default, min, max, layers, help)."},
    {"resolve_loader_options", (PyCFunction)(void (*)(void))mod_resolve_loader_options,
     METH_VARARGS | METH_KEYWORDS,
     "resolve_loader_options(**options)\n--\n\nWhat the C library makes of these table options:\n"
     "a dict of every table option's resolved value; ValueError when one is refused."},
    {"version", (PyCFunction)mod_version, METH_NOARGS,
     "version()\n--\n\nThe linked libchute's version string."},
    {"features", (PyCFunction)mod_features, METH_NOARGS,
     "features()\n--\n\nThe optional features compiled into libchute (chute_features())."},
    {"status_name", (PyCFunction)mod_status_name, METH_O,
     "status_name(code)\n--\n\nName of a chute status code."},
    {"_dataset_from_arrow", (PyCFunction)(void (*)(void))mod_dataset_from_arrow,
     METH_VARARGS | METH_KEYWORDS,
     "_dataset_from_arrow(stream, *, image_key=None, label_key=None, label_offset=0,\n"
     "                    read_delay_us=0, name=None)\n--\n\n"
     "A Dataset over an Arrow C stream capsule (__arrow_c_stream__()); see chute.arrow."},
    {"_dataset_from_arrow_units", (PyCFunction)(void (*)(void))mod_dataset_from_arrow_units,
     METH_VARARGS | METH_KEYWORDS,
     "_dataset_from_arrow_units(schema, rows, labels, load, *, max_resident=0, unit_names=None,\n"
     "    image_key=None, label_key=None, label_offset=0, read_delay_us=0, name=None,\n"
     "    null_defaults=None)\n--\n\n"
     "A Dataset over units loaded on demand (chute_dataset_open_arrow_units); see chute.arrow."},
    {"_arrow_units_stats", (PyCFunction)mod_arrow_units_stats, METH_O,
     "_arrow_units_stats(ds)\n--\n\n(loads, peak_resident, resident) of a units-mode Arrow "
     "dataset."},
    {NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "chute._chute",
    "CPython binding of libchute's public C API.  Use the chute package.", -1, module_methods,
};

/* ------------------------------------------------------------------ */
/* Infer: the inference session (chute_infer_*).                        */
/* ------------------------------------------------------------------ */
/* poll() copies each handed-out batch into one private buffer and gives
 * the ring slot straight back: a Python caller may keep results for as
 * long as it likes without holding the session's few batch buffers (and
 * so its queue capacity).  The copy is one memcpy per batch.           */
typedef struct {
    PyObject_HEAD
    chute_infer *s;
    int polling;              /* a poll() is waiting (one poller at a time) */
} InferObject;

static PyTypeObject InferType;

/* The ChuteError subclass instance for a failed request (not raised). */
static PyObject *status_exception(int status, const char *message)
{
    PyObject *type = ChuteError;
    if (status < 0 && status >= -10 && status_exc[-status])
        type = status_exc[-status];
    const char *m = message && message[0] ? message : chute_status_name(status);
    PyObject *exc = PyObject_CallFunction(type, "s", m);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(status);
    PyObject *name = PyUnicode_FromString(chute_status_name(status));
    if (code && name) {
        PyObject_SetAttrString(exc, "code", code);
        PyObject_SetAttrString(exc, "status", name);
    }
    Py_XDECREF(code);
    Py_XDECREF(name);
    return exc;
}

/* One option of the session's table (src/common/infer_options.def) from a
 * Python value into o.  None leaves the field zero, the C default; ints
 * must fit the field (0 is the default too) and C checks the bounds, so
 * the refusal is C's InvalidArgumentError naming the option; enums are
 * their choices' names (any case); flags are truth values (a negated row:
 * name=False sets no_<name>). */
static int infer_opt_from_py(const ch_opt_row *d, PyObject *v, chute_infer_options *o)
{
    char *p = (char *)o + d->offset;
    if (v == Py_None)
        return 0;
    switch (d->kind) {
    case CH_OPT_BOOL:
    case CH_OPT_NEG: {
        int t = PyObject_IsTrue(v);
        if (t < 0)
            return -1;
        int x = d->kind == CH_OPT_NEG ? !t : t;
        memcpy(p, &x, sizeof x);
        return 0;
    }
    case CH_OPT_ENUM: {
        const char *str = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        char low[64];
        size_t n = str ? strlen(str) : 0;
        if (!str || n >= sizeof low) {
            if (!PyErr_Occurred())
                PyErr_Format(str ? PyExc_ValueError : PyExc_TypeError,
                             "%s must be one of %s, not %R", d->name, d->choices, v);
            return -1;
        }
        for (size_t i = 0; i <= n; i++)
            low[i] = (char)(str[i] >= 'A' && str[i] <= 'Z' ? str[i] - 'A' + 'a' : str[i]);
        int k = ch_opt_choice_find(d, low);
        if (k < 0) {
            PyErr_Format(PyExc_ValueError, "%s must be one of %s, not %R", d->name, d->choices,
                         v);
            return -1;
        }
        int x = (int)d->first + k;
        memcpy(p, &x, sizeof x);
        return 0;
    }
    case CH_OPT_F32: {
        float f[3] = {0, 0, 0};
        if (d->n == 3) {
            if (parse_rgb(v, f, d->name))
                return -1;
        } else {
            double x = PyFloat_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s must be a float, not %s", d->name,
                             Py_TYPE(v)->tp_name);
                return -1;
            }
            f[0] = (float)x;
        }
        memcpy(p, f, d->n * sizeof(float));
        return 0;
    }
    case CH_OPT_U32:
    case CH_OPT_U64: {
        unsigned long long x;
        int bad;
        PyObject *i = opt_uint_from_py(d->name, v, &x, &bad);
        if (!i)
            return -1;
        unsigned long long top = d->kind == CH_OPT_U32 ? UINT32_MAX : UINT64_MAX;
        if (bad || x > top) {
            PyErr_Format(PyExc_ValueError, "%s must be 0 (the default) or in %llu..%llu, got %S",
                         d->name, (unsigned long long)d->min, (unsigned long long)d->max, i);
            Py_DECREF(i);
            return -1;
        }
        Py_DECREF(i);
        if (x == 0 && (d->layers & CH_OPT_ZERO_OFF))
            x = top; /* 0 is off (stats_shm); a zero field would be the default */
        if (d->kind == CH_OPT_U32) {
            uint32_t u = (uint32_t)x;
            memcpy(p, &u, sizeof u);
        } else {
            uint64_t u = x;
            memcpy(p, &u, sizeof u);
        }
        return 0;
    }
    default:
        PyErr_Format(PyExc_TypeError, "%s: no Python form", d->name);
        return -1;
    }
}

/* Keyword arguments only, each a Python-exposed row of the session's table
 * (chute.Infer and _chute.resolve_infer_options). */
static int infer_opts_from_py(const char *who, PyObject *args, PyObject *kw,
                              chute_infer_options *o)
{
    memset(o, 0, sizeof *o);
    if (args && PyTuple_GET_SIZE(args) != 0) {
        PyErr_Format(PyExc_TypeError, "%s takes keyword arguments only", who);
        return -1;
    }
    const ch_opt_row *t = ch_infer_opts();
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (kw && PyDict_Next(kw, &pos, &k, &v)) {
        const char *name = PyUnicode_AsUTF8(k);
        if (!name)
            return -1;
        int i = 0;
        while (i < ch_infer_opt_count() &&
               (!(t[i].layers & CH_OPT_PY) || strcmp(t[i].name, name) != 0))
            i++;
        if (i == ch_infer_opt_count()) {
            PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword argument '%s'", who,
                         name);
            return -1;
        }
        if (infer_opt_from_py(&t[i], v, o))
            return -1;
    }
    return 0;
}

static int Infer_init(InferObject *self, PyObject *args, PyObject *kw)
{
    if (self->s) {
        PyErr_SetString(PyExc_RuntimeError, "Infer.__init__ called twice");
        return -1;
    }
    chute_infer_options o;
    if (infer_opts_from_py("Infer()", args, kw, &o))
        return -1;
    chute_error err = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = chute_infer_create(&o, &self->s, &err);
    Py_END_ALLOW_THREADS
    if (rc != CHUTE_OK) {
        raise_status(rc, err.message);
        return -1;
    }
    return 0;
}

static void Infer_dealloc(InferObject *self)
{
    chute_infer *s = self->s;
    self->s = NULL;
    if (s) {
        Py_BEGIN_ALLOW_THREADS /* joins the workers */
        chute_infer_destroy(s);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int infer_ready(InferObject *self)
{
    if (!self->s) {
        PyErr_SetString(PyExc_ValueError, "the Infer session is not initialised");
        return -1;
    }
    return 0;
}

static PyObject *Infer_submit(InferObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "id", NULL};
    PyObject *data;
    unsigned long long id;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OK", kwlist, &data, &id) || infer_ready(self))
        return NULL;
    chute_error err = {0};
    int rc;
    if (PyUnicode_Check(data) || PyObject_HasAttrString(data, "__fspath__")) {
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(data, &b))
            return NULL;
        rc = chute_infer_submit_path(self->s, PyBytes_AS_STRING(b), id, &err);
        Py_DECREF(b);
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        /* Copied: the object may change or go once submit returns. */
        rc = chute_infer_submit(self->s, view.buf, (size_t)view.len, id, CHUTE_INFER_COPY, &err);
        PyBuffer_Release(&view);
    }
    if (rc != CHUTE_OK)
        return raise_status(rc, err.message);
    Py_RETURN_NONE;
}

/* One finished batch -> [(id, Array or ChuteError), ...]. */
static PyObject *infer_results(chute_infer_batch *b)
{
    chute_infer_view v;
    chute_infer_batch_view(b, &v);
    batch_ref *ref = calloc(1, sizeof *ref);
    void *copy = malloc(v.nbytes ? v.nbytes : 1);
    if (!ref || !copy) {
        free(ref);
        free(copy);
        chute_infer_batch_release(b);
        return PyErr_NoMemory();
    }
    memcpy(copy, v.data, v.nbytes);
    atomic_store(&ref->refs, 1);
    ref->owned = copy;
    int type = v.dtype == CHUTE_DTYPE_FLOAT32 ? ARR_F32 : v.dtype == CHUTE_DTYPE_UINT8 ? ARR_U8
                                                                                  : ARR_F16;
    size_t sb = v.count ? v.nbytes / v.count : 0;
    PyObject *out = PyList_New(v.count);
    for (uint32_t k = 0; out && k < v.count; k++) {
        PyObject *res = v.status[k] == CHUTE_OK
                            ? array_new(ref, (uint8_t *)copy + k * sb, type, 3, v.shape + 1)
                            : status_exception(v.status[k], chute_infer_batch_errmsg(b, k));
        PyObject *t = res ? Py_BuildValue("(KN)", (unsigned long long)v.ids[k], res) : NULL;
        if (!t) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, k, t);
    }
    chute_infer_batch_release(b);
    batch_ref_decref(ref); /* the arrays hold their own references */
    return out;
}

static PyObject *Infer_poll(InferObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &timeout) || infer_ready(self))
        return NULL;
    double t = -1;
    if (timeout != Py_None) {
        t = PyFloat_AsDouble(timeout);
        if (t == -1 && PyErr_Occurred())
            return NULL;
        if (!(t >= 0)) {
            PyErr_SetString(PyExc_ValueError, "timeout must be None or a number >= 0");
            return NULL;
        }
    }
    if (self->polling) {
        PyErr_SetString(PyExc_RuntimeError, "another thread is in Infer.poll(): one poller at "
                                            "a time");
        return NULL;
    }
    self->polling = 1;
    double end = t < 0 ? 0 : mono_s() + t;
    chute_infer_batch *b = NULL;
    int rc;
    for (;;) {
        /* Wait in slices so Ctrl-C is seen. */
        int64_t slice_us = (int64_t)WAIT_SLICE_MS * 1000;
        if (t >= 0) {
            double left = end - mono_s();
            int64_t l = left > 0 ? (int64_t)(left * 1e6) : 0;
            if (l < slice_us)
                slice_us = l;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = chute_infer_poll(self->s, slice_us, &b);
        Py_END_ALLOW_THREADS
        if (rc != CHUTE_EINTERRUPTED)
            break;
        if (PyErr_CheckSignals() < 0) {
            self->polling = 0;
            return NULL;
        }
        if (t >= 0 && mono_s() >= end)
            break;
    }
    self->polling = 0;
    if (rc == CHUTE_OK)
        return infer_results(b);
    if (rc == CHUTE_EINTERRUPTED)
        return PyList_New(0);
    if (rc == CHUTE_END)
        Py_RETURN_NONE;
    return raise_status(rc, "chute_infer_poll failed");
}

static PyObject *Infer_close(InferObject *self, PyObject *unused)
{
    if (self->s)
        chute_infer_close(self->s);
    Py_RETURN_NONE;
}

static PyObject *latency_dict(const chute_latency *l)
{
    return Py_BuildValue("{s:K,s:d,s:d,s:d,s:d,s:d,s:d}", "count", (unsigned long long)l->count,
                         "p50_ms", l->p50_ns / 1e6, "p90_ms", l->p90_ns / 1e6, "p99_ms",
                         l->p99_ns / 1e6, "p999_ms", l->p999_ns / 1e6, "max_ms",
                         l->max_ns / 1e6, "mean_ms", l->mean_ns / 1e6);
}

static PyObject *Infer_stats(InferObject *self, PyObject *unused)
{
    if (infer_ready(self))
        return NULL;
    chute_infer_stats st;
    chute_infer_get_stats(self->s, &st);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:n,s:N,s:N,s:N,s:N,s:I}", "submitted",
                         (unsigned long long)st.submitted, "rejected_busy",
                         (unsigned long long)st.rejected_busy, "completed",
                         (unsigned long long)st.completed, "failed",
                         (unsigned long long)st.failed, "batches",
                         (unsigned long long)st.batches, "closed_by_deadline",
                         (unsigned long long)st.closed_by_deadline, "workers", st.workers,
                         "slots", st.slots, "slot_bytes", (Py_ssize_t)st.slot_bytes, "queue",
                         latency_dict(&st.queue), "decode", latency_dict(&st.decode),
                         "transform", latency_dict(&st.transform), "total",
                         latency_dict(&st.total), "worker_slice_us", st.worker_slice_us);
}

static PyObject *Infer_enter(PyObject *self, PyObject *unused)
{
    Py_INCREF(self);
    return self;
}

static PyObject *Infer_exit(InferObject *self, PyObject *args)
{
    return Infer_close(self, NULL);
}

static PyMethodDef Infer_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Infer_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(data, id)\n--\n\nQueue one request: data is encoded image bytes (any buffer; "
     "copied) or a path (str or os.PathLike; read by a worker).  id is a uint64 handed back "
     "by poll().  Never waits: raises BusyError when the queue is full, InvalidArgumentError "
     "after close().  Thread-safe."},
    {"poll", (PyCFunction)(void (*)(void))Infer_poll, METH_VARARGS | METH_KEYWORDS,
     "poll(timeout=None)\n--\n\nThe next finished batch as a list of (id, result): result is "
     "an Array (C,H,W or H,W,C; DLPack, NumPy) or, for a request that failed alone, the "
     "ChuteError saying why.  Waits up to timeout seconds (None: until a batch is ready); [] "
     "if none was; None once the session is closed and everything was handed out.  One "
     "polling thread at a time."},
    {"close", (PyCFunction)Infer_close, METH_NOARGS,
     "close()\n--\n\nAccept no more requests; those admitted still come out of poll()."},
    {"stats", (PyCFunction)Infer_stats, METH_NOARGS,
     "stats()\n--\n\nCounters and per-request latency percentiles (queue, decode, transform, "
     "total) in milliseconds."},
    {"__enter__", (PyCFunction)Infer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Infer_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyTypeObject InferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chute.Infer",
    .tp_basicsize = sizeof(InferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    /* .tp_doc: infer_doc(), its signature from the option table */
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Infer_init,
    .tp_dealloc = (destructor)Infer_dealloc,
    .tp_methods = Infer_methods,
};

/* chute.Infer's docstring: the signature line (its __text_signature__, so
 * inspect.signature sees the keywords) made from the option table, each
 * default as Python spells it, then the prose. */
static char infer_doc_buf[4096];
static const char *infer_doc(void)
{
    static const char prose[] =
        "\n--\n\n"
        "A low-latency inference session: submit(bytes or path, id) from any thread,\n"
        "poll() for finished requests.  A batch is handed out when it holds max_batch\n"
        "requests or its oldest has waited max_delay_us.  The eval transform is the\n"
        "Loader's (Resize + CenterCrop, bit for bit).  None (or 0) means the C default\n"
        "(workers: the CPUs this process may use; queue_capacity: max(4*max_batch, 64)).\n"
        "worker_slice_us (100..100000; Linux 6.12+): the scheduler slice the workers\n"
        "ask for; longer than the default lets the submitting and polling threads\n"
        "preempt a decoding worker at once (stats()['worker_slice_us']: what they got).\n"
        "Every keyword, its default and bounds: docs/OPTIONS.md (src/common/infer_options.def).";
    const ch_opt_row *t = ch_infer_opts();
    size_t cap = sizeof infer_doc_buf - sizeof prose, l = 0;
    l += (size_t)snprintf(infer_doc_buf + l, cap - l, "Infer(*");
    for (int i = 0; i < ch_infer_opt_count() && l < cap; i++) {
        const ch_opt_row *d = &t[i];
        char b[64] = "None";
        if (!(d->layers & CH_OPT_PY))
            continue;
        if (d->kind == CH_OPT_ENUM) {
            char c[48];
            ch_opt_choice(d, 0, c, sizeof c);
            snprintf(b, sizeof b, "'%s'", c);
        } else if (d->kind == CH_OPT_NEG) {
            snprintf(b, sizeof b, "True");
        } else if (d->kind == CH_OPT_BOOL) {
            snprintf(b, sizeof b, "%s", d->def ? "True" : "False");
        } else if ((d->kind == CH_OPT_U32 || d->kind == CH_OPT_U64) &&
                   !(d->layers & CH_OPT_AUTO)) {
            snprintf(b, sizeof b, "%llu", (unsigned long long)d->def);
        } /* computed, floats: None */
        l += (size_t)snprintf(infer_doc_buf + l, cap - l, ", %s=%s", d->name, b);
    }
    if (l < cap)
        l += (size_t)snprintf(infer_doc_buf + l, cap - l, ")");
    memcpy(infer_doc_buf + (l < cap ? l : cap), prose, sizeof prose);
    return infer_doc_buf;
}

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__chute(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    if (add_type(m, &ArrayType, "Array") || add_type(m, &BatchType, "Batch") ||
        add_type(m, &DatasetType, "Dataset") || add_type(m, &LoaderType, "_Loader"))
        goto fail;
    InferType.tp_doc = infer_doc();
    if (add_type(m, &InferType, "Infer"))
        goto fail;
    if (add_type(m, &WriterType, "_Writer"))
        goto fail;
    ChuteError = PyErr_NewExceptionWithDoc(
        "chute.ChuteError",
        "Base class of libchute errors.  `code` is the chute status (negative int), `status`\n"
        "its name (e.g. 'CHUTE_ECORRUPT'); the message is the library's, with file and offset\n"
        "where there is one.",
        NULL, NULL);
    if (!ChuteError)
        goto fail;
    Py_INCREF(ChuteError);
    if (PyModule_AddObject(m, "ChuteError", ChuteError) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof exc_table / sizeof exc_table[0]; i++) {
        PyObject *bases;
        if (exc_table[i].builtin) {
            PyObject *builtins = PyEval_GetBuiltins();
            PyObject *b = PyDict_GetItemString(builtins, exc_table[i].builtin);
            if (!b)
                goto fail;
            bases = PyTuple_Pack(2, ChuteError, b);
        } else {
            bases = PyTuple_Pack(1, ChuteError);
        }
        if (!bases)
            goto fail;
        char qual[96];
        snprintf(qual, sizeof qual, "chute.%s", exc_table[i].name);
        PyObject *e = PyErr_NewExceptionWithDoc(qual, exc_table[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!e)
            goto fail;
        status_exc[-exc_table[i].code] = e;
        Py_INCREF(e);
        if (PyModule_AddObject(m, exc_table[i].name, e) < 0) {
            Py_DECREF(e);
            goto fail;
        }
    }
    if (PyModule_AddIntConstant(m, "VERSION_NUMBER", CHUTE_VERSION_NUMBER) < 0 ||
        PyModule_AddIntConstant(m, "WAIT_SLICE_MS", WAIT_SLICE_MS) < 0 ||
        PyModule_AddIntConstant(m, "PACK_MAX_THREADS", CHUTE_PACK_MAX_THREADS) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
