"""chute.Writer: write a dataset one sample at a time (chute_writer_* in C).

The samples come from the caller (a Spark partition, a Ray block, a
program) instead of a source directory; everything else is
``chute convert``: the same writers (``chute`` shards + manifest,
``tfrecord`` files + DALI index, ``wds`` tar shards), the same header
check on every sample, the same crash safety (files under temporary names
until :meth:`Writer.close`, the result opened and counted before close
returns) and ``s3://bucket/prefix/`` destinations (staged locally,
uploaded at close, the manifest last).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence

from . import _chute


class Writer:
    """Write encoded images and labels into ``dst`` as one dataset.

    ``dst``: a local directory (made if absent; files any chute writer
    writes there are removed first; it is locked while the writer is open)
    or ``s3://bucket/prefix/`` (refused if a dataset is there, unless
    ``force=True``).  ``format``: ``"chute"``, ``"tfrecord"`` or ``"wds"``.
    ``shard_size``: bytes per output file (default 256 MiB).  ``prefix``:
    TFRecord names PREFIX-00000-of-0000N (default ``"train"``).
    ``label_offset``: added to the labels stored in TFRecord and tar files
    (the chute format stores labels as given).  ``classes``: optional class
    names, label k is ``classes[k]``: the class table every chute shard
    stores (required for ``format="chute"``), the tars' ``.txt`` (optional
    for ``tfrecord`` and ``wds``); with them a label outside
    ``0..len(classes)-1`` is refused.
    ``validate=True`` decodes every image fully instead of checking its
    header.  ``key_prefix`` (``wds`` only): put before every sample's key
    (letters, digits, ``_``, ``-``); a dataset written in pieces gives each
    piece its own (``chute.spark.write`` and ``chute.ray.write`` use
    ``"pPPPPP-"``), so keys are unique across the dataset.

    :meth:`write` refuses a damaged image (``CorruptDataError``,
    ``FormatError``, ``LimitExceededError``, ``UnsupportedError``, the
    message names the sample) without writing any of it, and the writer
    goes on: the caller chooses to skip it or give up.  Any other error
    leaves the writer failed; :meth:`abort` it.  :meth:`close` publishes
    and returns ``dict(samples=, files=[final file names, sorted], bytes=,
    seconds=, format=)``; ``files`` holds every file written except the
    chute manifest (TFRecord's ``.idx`` files included).  Used as a
    context manager, an exception aborts the writer: nothing is left in a
    local ``dst``.  The GIL is released while a sample is written.
    """

    def __init__(
        self,
        dst: "str | os.PathLike[str]",
        format: str = "chute",
        *,
        shard_size: Optional[int] = None,
        prefix: Optional[str] = None,
        label_offset: int = 0,
        classes: Optional[Sequence[str]] = None,
        validate: bool = False,
        force: bool = False,
        key_prefix: Optional[str] = None,
    ) -> None:
        self.dst = os.fspath(dst)
        self.format = format
        self._w: Optional[Any] = _chute._Writer(
            self.dst,
            format,
            shard_size=shard_size or 0,
            prefix=prefix,
            label_offset=label_offset,
            classes=None if classes is None else list(classes),
            validate=validate,
            force=force,
            key_prefix=key_prefix,
        )
        self.result: Optional[Dict[str, Any]] = None

    def write(self, data: Any, label: int) -> None:
        """Add one encoded image (bytes-like: bytes, memoryview, numpy uint8)."""
        if self._w is None:
            raise ValueError("the writer is closed")
        self._w.write(data, int(label))

    def close(self) -> Dict[str, Any]:
        """Finish every file, give them their final names, open and count the result."""
        if self._w is None:
            if self.result is not None:
                return self.result
            raise ValueError("the writer was aborted")
        w, self._w = self._w, None
        self.result = w.close()
        return self.result

    def abort(self) -> None:
        """Drop what was written (nothing stays in a local dst).  Idempotent."""
        w, self._w = self._w, None
        if w is not None:
            w.abort()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        elif self._w is not None:
            self.close()

    def __del__(self) -> None:
        w = getattr(self, "_w", None)
        if w is not None:
            w.abort()


def write_manifest(dst: "str | os.PathLike[str]", samples: Sequence[int], sizes: Sequence[int]) -> None:
    """Write ``dst/chute.manifest`` for shard-00000.chute.. (chute_manifest_write)."""
    _chute.write_manifest(os.fspath(dst), list(samples), list(sizes))
