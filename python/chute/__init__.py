"""chute: image datasets to training batches, handed to PyTorch, NumPy or JAX without copying.

    import chute

    loader = chute.Loader("/data/imagenet-shards", batch_size=256, transform="train",
                          size=224, shuffle=True, seed=0)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:      # torch tensors via DLPack, no copy
            ...

Sources are ImageFolder trees (ROOT/<class>/<image>) and shard directories
written by :func:`pack`.  Decoding, cropping, resizing and normalising run
in libchute's native worker threads; Python only receives finished batches.

Contents
    Loader       the iterable pipeline (distributed-aware, resumable)
    Dataset      an opened source (size, classes, labels, raw samples)
    Batch, Array what Loader.next_batch() returns; Array speaks DLPack,
                 the NumPy array interface and the buffer protocol
    pack         ImageFolder tree -> shard directory
    default_workers  the default worker count and why (affinity, cgroup quota,
                 LOCAL_WORLD_SIZE)
    SkippedSamplesWarning  once per epoch when on_corrupt="skip" replaced samples
    probe_image  decode-check encoded bytes
    ChuteError   base of the exceptions (InvalidArgumentError, NotFoundError,
                 CorruptDataError, BusyError, ...)
"""
from ._chute import (  # noqa: F401
    Array,
    Batch,
    BusyError,
    CancelledError,
    ChuteError,
    ChuteIOError,
    CorruptDataError,
    Dataset,
    FormatError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    OutOfMemoryError,
    UnsupportedError,
    probe_image,
)
from ._chute import version as _lib_version
from .loader import Loader, SkippedSamplesWarning, default_workers, distributed_defaults, pack

for _obj in (Loader, pack, distributed_defaults, default_workers, SkippedSamplesWarning):
    _obj.__module__ = __name__  # help() and reprs say chute.Loader, not chute.loader.Loader
del _obj

__version__: str = _lib_version()
"""Version of the package, which is the version of the libchute compiled into it."""

__all__ = [
    "Loader",
    "Dataset",
    "Batch",
    "Array",
    "pack",
    "probe_image",
    "distributed_defaults",
    "default_workers",
    "SkippedSamplesWarning",
    "ChuteError",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "ChuteIOError",
    "FormatError",
    "CorruptDataError",
    "LimitExceededError",
    "NotFoundError",
    "BusyError",
    "UnsupportedError",
    "CancelledError",
    "__version__",
]
