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
    Infer        a low-latency inference session: submit(bytes|path, id), poll()
    Dataset      an opened source (size, classes, labels, raw samples)
    Batch, Array what Loader.next_batch() returns; Array speaks DLPack,
                 the NumPy array interface and the buffer protocol
    pack         ImageFolder tree -> shard directory
    default_workers  the default worker count and why (affinity, cgroup quota,
                 LOCAL_WORLD_SIZE)
    SkippedSamplesWarning  once per epoch when on_corrupt="skip" replaced samples
    probe_image  decode-check encoded bytes
    features     what this build can do (png, io_uring, nvml, ...)
    get_include, get_lib  chute.h and libchute.so for C users
    chute.ray    (import it yourself; needs ray[data]) Ray Data datasource
                 and datasink
    ChuteError   base of the exceptions (InvalidArgumentError, NotFoundError,
                 CorruptDataError, BusyError, ...)
"""
import os as _os
from typing import Dict as _Dict

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
from ._chute import Infer  # noqa: F401  (the inference session; see its docstring)
from .loader import Loader, SkippedSamplesWarning, default_workers, distributed_defaults, pack
from .writer import Writer
from .targets import target_mask, targets

for _obj in (Loader, Writer, pack, distributed_defaults, default_workers, SkippedSamplesWarning):
    _obj.__module__ = __name__  # help() and reprs say chute.Loader, not chute.loader.Loader
del _obj

__version__: str = _lib_version()
"""Version of the package, which is the version of the libchute compiled into it."""


def get_include() -> str:
    """Directory holding chute.h, for C/C++ code built against the bundled libchute
    (like numpy.get_include()): ``cc -I$(python -c 'import chute; print(chute.get_include())')``."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


def get_lib() -> str:
    """Directory holding the bundled libchute.so (link with ``-L<dir> -lchute
    -Wl,-rpath,<dir>``); lib/pkgconfig/chute.pc is there too."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "lib")


_FUTURE = ("hdf5", "kafka")  # each set from the library below


def features() -> _Dict[str, bool]:
    """What this build of chute can do: ``{"jpeg": True, "png": ..., "io_uring": ...,
    "nvml": ..., "s3": False, "hdf5": False, "kafka": False, "cuda": ...,
    "libdeflate": ..., "coco": ...}``.

    ``jpeg``/``png`` are the codecs compiled into libchute (without libspng, PNG
    samples fail with UnsupportedError).  ``io_uring`` is whether the bundled
    ``chute`` command was built with liburing (``chute iobench``); ``nvml``
    whether the NVIDIA management library can be loaded now (``chute doctor``'s
    GPU utilisation).  ``s3`` is whether libchute was built with libcurl (the
    s3:// and http(s):// sources); ``hdf5``: the HDF5 format (libhdf5 found
    at build time); ``kafka``: kafka:// stream datasets (librdkafka found at
    build time); ``libdeflate``: gzip HDF5 chunks and PNG checksums go through
    libdeflate (found at build time; without it zlib gives the same bytes for
    ~1.6x the CPU, which bench/hdf5.py's figures depend on); ``coco``: COCO
    annotation JSON (libjansson found at build time); ``video``: the
    video format (FFmpeg's libavformat/libavcodec/libswscale found at build
    time).
    Never raises: what cannot be determined is reported as False.
    """
    from ._chute import features as _lib_features

    have = set(_lib_features().split())
    out = {"jpeg": "jpeg" in have, "png": "png" in have, "s3": "s3" in have}
    cli = set()
    from .__main__ import cli_path

    import subprocess

    try:
        r = subprocess.run([cli_path(), "version"], capture_output=True, text=True, timeout=30)
        for line in r.stdout.splitlines():
            if line.startswith("features:"):
                cli = set(line.split()[1:])
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    out["io_uring"] = "io_uring" in cli
    out["nvml"] = "nvml" in cli
    for name in _FUTURE:
        out[name] = False
    # The hdf5 format: libhdf5 was found when libchute was built.
    out["hdf5"] = "hdf5" in have
    # kafka:// stream datasets: librdkafka was found when libchute was built.
    out["kafka"] = "kafka" in have
    # The CUDA module was built with this package (lib/libchute_cuda.so);
    # using it needs the driver and a device too (Loader(device="cuda")).
    out["cuda"] = "cuda" in have
    # The inflater for gzip HDF5 chunks and PNG checks: libdeflate or zlib.
    out["libdeflate"] = "libdeflate" in have
    # COCO annotation JSON: libjansson was found when libchute was built.
    out["coco"] = "coco" in have
    # The video format: FFmpeg's libraries were found when libchute was built.
    out["video"] = "video" in have
    return out

__all__ = [
    "Loader",
    "Infer",
    "Writer",
    "Dataset",
    "Batch",
    "Array",
    "pack",
    "targets",
    "target_mask",
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
    "features",
    "get_include",
    "get_lib",
    "__version__",
]
