"""chute.ray — Ray Data reads datasets through chute, and writes them with chute.Writer.

    import chute.ray
    ds = chute.ray.read("s3://bucket/train-shards/", size=224)   # a ray.data.Dataset
    ds.map_batches(model, batch_size=256)                         # columns image, label, index

Reading.  :func:`read` returns a ``ray.data.Dataset`` whose read tasks each
open the dataset with chute (chute shards, TFRecord, WebDataset, a tree:
whatever ``chute.Loader`` opens, local or s3://) and run a
``chute.Loader`` over their share.  Read task ``r`` of ``W`` is the
Loader's rank ``r`` of world size ``W`` without shuffling: samples
``r, r + W, r + 2W, ...``; the Loader pads each rank to the same count
(``remainder="pad"``) and the task cuts that padding off again, so every
sample is in exactly one row for any parallelism.  Each task checks the
indices the Loader delivered against that plan and fails rather than
deliver a duplicate or miss a sample.  Decoding, resizing and cropping
run in libchute's threads (``workers`` per task, default the CPUs Ray
gives the task); Python only wraps each batch as an Arrow block.

Writing.  :func:`write` (a :class:`ChuteDatasink` for
``Dataset.write_datasink``) hands each write task's rows to its own
:class:`chute.Writer` in a staging directory; the driver commits the
successful attempts as one dataset, or removes them all
(:class:`ChuteDatasink`; the protocol is chute._commit's, shared with
``chute.spark.write``), local or s3://.

Ray is imported by this module, never by ``import chute``: Ray is an
integration, not a dependency (``pip install 'ray[data]'``).
"""
import os
import shutil
import uuid
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

try:
    import ray.data  # noqa: F401  (the top-level package; this module is chute.ray)
    from ray.data.block import Block, BlockAccessor, BlockMetadata
    from ray.data.datasource import Datasink, Datasource, ReadTask
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError("chute.ray needs Ray Data (pip install 'ray[data]'): %s" % _e) from _e

from . import _chute, _commit
from .loader import Loader

__all__ = ["read", "write", "ChuteDatasource", "ChuteDatasink"]

COLUMNS = ("image", "bytes", "label", "index")
"""The columns :func:`read` can produce: ``image`` (decoded HWC uint8,
``size`` x ``size``), ``bytes`` (the sample's encoded bytes as stored),
``label`` (int64) and ``index`` (int64, the sample's position in the
dataset: the key that makes "exactly once" checkable)."""

# chute.Dataset's keywords (python/ext/_chute.c Dataset_init): these open
# the dataset; every other keyword goes to the Loader.
_DATASET_KEYS = frozenset((
    "format", "label_offset", "image_key", "label_key", "extra_keys", "cache_dir",
    "cache_bytes", "cache_block_bytes", "schema", "csv_no_header", "index_dir",
    "audio_samples", "audio_rate", "audio_channels_first", "cache_ram_bytes", "direct_io",
    "coalesce_gap_bytes", "video_size", "frames_per_clip", "clips_per_video", "clip_sampler",
    "num_indices_between_frames", "ms_between_frames", "sampling_range_start",
    "sampling_range_end", "video_max_side", "video_max_decoded_bytes"))
# Loader keywords the datasource sets itself: the split and the batch layout.
_FIXED_KEYS = frozenset((
    "rank", "world_size", "shuffle", "remainder", "return_indices", "dtype", "layout",
    "as_torch", "drop_last", "normalize", "mean", "std", "fields", "device"))


def _open(path: str, ds_kw: Dict[str, Any]) -> "_chute.Dataset":
    kw = dict(ds_kw)
    if kw.get("cache_dir") is not None:
        kw["cache_dir"] = os.fspath(kw["cache_dir"])
    if isinstance(kw.get("extra_keys"), (list, tuple)):
        kw["extra_keys"] = ",".join(kw["extra_keys"])
    return _chute.Dataset(path, **kw)


def _share(n: int, rank: int, world: int) -> np.ndarray:
    """The dataset indices read task `rank` of `world` owns: rank, rank + world, ..."""
    return np.arange(rank, n, world, dtype=np.int64)


def _read_share(path: str, ds_kw: Dict[str, Any], loader_kw: Dict[str, Any],
                columns: Sequence[str], rank: int, world: int,
                batch_size: int) -> Iterable[Block]:
    """Runs in a Ray read task: this task's share of the dataset, as blocks."""
    ds = _open(path, ds_kw)
    want = _share(len(ds), rank, world)
    if len(want) == 0:
        return
    if "image" in columns:
        loader = Loader(ds, batch_size=batch_size, rank=rank, world_size=world,
                        shuffle=False, remainder="pad", return_indices=True, dtype="uint8",
                        layout="nhwc", as_torch=False, drop_last=False, **loader_kw)
        try:
            done = dropped = 0
            for images, labels, idx in loader:
                idx = np.asarray(idx)
                keep = min(len(idx), len(want) - done)  # the rest is the Loader's padding
                if keep <= 0:
                    continue
                # A row whose index is not the planned one is a replacement
                # (on_corrupt="skip" put another sample in a corrupt one's
                # place): dropped, so a skipped sample is missing, never twice.
                ok = idx[:keep] == want[done:done + keep]
                done += keep
                dropped += int(keep - ok.sum())
                if ok.any():
                    yield _block(ds, columns, idx[:keep][ok], np.asarray(labels)[:keep][ok],
                                 np.asarray(images)[:keep][ok])
            corrupt = int(loader.stats().get("corrupt", 0))
        finally:
            loader.close()
        if done != len(want) or dropped > corrupt:
            raise RuntimeError(
                "chute.ray.read: read task %d of %d got %d samples with %d not the planned "
                "ones (%d corrupt), expected %d: the Loader's rank split is not the one this "
                "datasource relies on" % (rank, world, done, dropped, corrupt, len(want)))
        return
    labels_all = None
    for a in range(0, len(want), batch_size):
        idx = want[a:a + batch_size]
        if "label" in columns:
            if labels_all is None:
                labels_all = np.asarray(ds.labels(), dtype=np.int64)
            labels = labels_all[idx]
        else:
            labels = None
        yield _block(ds, columns, idx, labels, None)


def _block(ds: "_chute.Dataset", columns: Sequence[str], idx: np.ndarray,
           labels: Optional[np.ndarray], images: Optional[np.ndarray]) -> Block:
    cols: Dict[str, Any] = {}
    for c in columns:
        if c == "image":
            # images arrive selected by a boolean mask: a copy, so the
            # Loader's ring slot the batch lived in can be reused.
            cols[c] = np.ascontiguousarray(images)
        elif c == "bytes":
            cols[c] = np.array([ds.read(int(i)) for i in idx], dtype=object)
        elif c == "label":
            cols[c] = np.asarray(labels, dtype=np.int64).copy()
        else:
            cols[c] = idx.astype(np.int64, copy=True)
    return BlockAccessor.batch_to_block(cols)


class ChuteDatasource(Datasource):
    """A ``ray.data`` Datasource over a dataset chute opens (see :func:`read`)."""

    def __init__(self, path: Any, *, columns: Sequence[str] = ("image", "label", "index"),
                 size: int = 224, batch_size: int = 64, workers: Optional[int] = None,
                 **options: Any) -> None:
        super().__init__()
        self._path = os.fspath(path)
        cols = [columns] if isinstance(columns, str) else list(columns)
        bad = [c for c in cols if c not in COLUMNS]
        if bad or not cols or len(set(cols)) != len(cols):
            raise ValueError("columns must be distinct names from %s, got %r"
                             % (", ".join(COLUMNS), columns))
        fixed = sorted(k for k in options if k in _FIXED_KEYS)
        if fixed:
            raise ValueError("chute.ray.read sets %s itself (the split and an HWC uint8 "
                             "image column); remove %s" % (", ".join(fixed), ", ".join(fixed)))
        self._columns = tuple(cols)
        self._batch_size = int(batch_size)
        if self._batch_size < 1:
            raise ValueError("batch_size must be >= 1, got %r" % (batch_size,))
        self._ds_kw = {k: v for k, v in options.items() if k in _DATASET_KEYS}
        self._loader_kw = {k: v for k, v in options.items() if k not in _DATASET_KEYS}
        self._loader_kw["size"] = size
        if workers is not None:
            self._loader_kw["workers"] = workers
        # Open once here: a bad path or option fails in the driver, and the
        # sample count and sizes plan the read tasks.
        ds = _open(self._path, self._ds_kw)
        self._n = len(ds)
        if self._n == 0:
            raise ValueError("%s has no samples (a stream cannot be split into read tasks)"
                             % self._path)
        probe = range(0, self._n, max(1, self._n // 64))
        self._mean_bytes = sum(ds.sample_size(i) for i in probe) / len(probe)
        self._row_bytes = 16 + (3 * size * size if "image" in self._columns else 0) + (
            self._mean_bytes if "bytes" in self._columns else 0)
        if "image" in self._columns:
            # Fail in the driver on Loader options it rejects, not in every task.
            Loader(ds, batch_size=self._batch_size, shuffle=False, dtype="uint8",
                   layout="nhwc", as_torch=False, rank=0, world_size=1,
                   **self._loader_kw).close()

    def get_name(self) -> str:
        return "Chute"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return int(self._n * self._row_bytes)

    def get_read_tasks(self, parallelism: int,
                       per_task_row_limit: Optional[int] = None) -> List[ReadTask]:
        world = max(1, min(int(parallelism), self._n))
        args = (self._path, self._ds_kw, self._loader_kw, self._columns)
        batch_size = self._batch_size
        tasks = []
        for rank in range(world):
            rows = len(range(rank, self._n, world))
            meta = BlockMetadata(num_rows=rows, size_bytes=int(rows * self._row_bytes),
                                 input_files=[self._path], exec_stats=None)

            def fn(rank: int = rank) -> Iterable[Block]:
                return _read_share(*args, rank, world, batch_size)

            tasks.append(ReadTask(fn, meta, per_task_row_limit=per_task_row_limit))
        return tasks


def read(path: Any, *, columns: Sequence[str] = ("image", "label", "index"), size: int = 224,
         transform: str = "eval", on_corrupt: str = "fail", batch_size: int = 64, workers: Optional[int] = None,
         override_num_blocks: Optional[int] = None,
         ray_remote_args: Optional[Dict[str, Any]] = None, **options: Any) -> "ray.data.Dataset":
    """A ``ray.data.Dataset`` of the samples of ``path``, read and decoded by chute.

    path: anything ``chute.Loader`` opens by path: a chute shard directory,
        TFRecord or WebDataset files, an ImageFolder tree, ... local or s3://.
    columns: which of ``image`` (uint8, ``(size, size, 3)`` HWC, decoded by
        chute), ``bytes`` (the encoded sample as stored: the JPEG/PNG), ``label``
        (int64) and ``index`` (int64, the sample's position in the dataset).
        Without ``image`` nothing is decoded.
    size, transform: the image's side and how it gets there: ``"eval"`` (resize
        the shorter side to ``size / crop_pct``, centre crop; the default),
        ``"none"`` (resize the whole image) or ``"train"`` (random resized crop
        and flip, seeded by sample: the same rows on every run).
    on_corrupt: a sample whose content cannot be decoded: ``"fail"`` (the
        default: the read raises ``chute.CorruptDataError`` naming it, so a
        finished read has every sample exactly once) or ``"skip"`` (the row is
        left out and counted in a ``chute.SkippedSamplesWarning``).
    batch_size: rows per block.  workers: chute's decode threads per read
        task (default: the CPUs Ray gives the task, ``num_cpus`` in
        ``ray_remote_args``, 1 unless set).
    override_num_blocks: read tasks (default: Ray's choice from the estimated
        size); every sample is in exactly one of them either way.
    **options: the dataset's (``format``, ``label_offset``, ``image_key``,
        ``label_key``, ``index_dir``, ``cache_dir``, ...) and the Loader's
        (``crop_pct``, ``resize_size``, ``dct_scale``, ``on_corrupt``,
        ``max_pixels``, ...) keywords, as ``chute.Loader`` takes them.

    Each read task opens the dataset itself (TFRecord and WebDataset index
    their files at open: give ``index_dir`` to do that once) and reads samples
    ``r, r + W, ...`` of ``W`` tasks.  Rows come in dataset order within a
    task; Ray may interleave tasks' blocks.
    """
    if workers is None:
        workers = max(1, int((ray_remote_args or {}).get("num_cpus", 1)))
    src = ChuteDatasource(path, columns=columns, size=size, batch_size=batch_size,
                          workers=workers, transform=transform, on_corrupt=on_corrupt,
                          **options)
    return ray.data.read_datasource(src, override_num_blocks=override_num_blocks,
                                    ray_remote_args=ray_remote_args)


# ---------------------------------------------------------------------------
# Writing

class ChuteDatasink(Datasink):
    """A ``ray.data`` Datasink writing one chute / TFRecord / WebDataset dataset
    with :class:`chute.Writer` (see :func:`write`), local or s3://.

    Protocol (chute._commit's, the one ``chute.spark.write`` uses): each
    write task writes its rows, in order, as complete files with its own
    ``chute.Writer`` into an attempt-unique directory
    ``dst/_chute_temporary/<job>/p<task>-<uuid>/`` and returns what it
    wrote; a failing task aborts its Writer and removes its attempt.  The
    driver's ``on_write_complete`` takes the attempts Ray reported as the
    successful ones, in task order, gives their files their final names in
    ``dst`` (rename; on s3:// a server-side copy) and writes the dataset's
    one manifest (chute) last; then removes ``_chute_temporary/<job>``,
    with any attempt of a failed or retried task in it.
    ``on_write_failed`` removes it too: a failed write leaves ``dst`` as it
    was.
    """

    def __init__(self, dst: Any, format: str = "chute", *, image_col: str = "image",
                 label_col: str = "label", shard_size: Optional[int] = None,
                 prefix: Optional[str] = None, label_offset: int = 0,
                 classes: Optional[Sequence[str]] = None, on_damaged: str = "skip") -> None:
        if on_damaged not in ("skip", "fail"):
            raise ValueError("on_damaged must be 'skip' or 'fail', not %r" % (on_damaged,))
        self.on_damaged = on_damaged
        if format not in ("chute", "tfrecord", "wds"):
            raise ValueError("format must be 'chute', 'tfrecord' or 'wds', not %r" % (format,))
        path = os.fspath(dst)
        if "://" in path and not _commit.is_s3(path):
            raise ValueError("chute.ray.write: dst must be a local or shared directory or "
                             "s3://bucket/prefix/, not %s" % path)
        self.dst = path if _commit.is_s3(path) else os.path.abspath(path)
        self.format = format
        self.image_col, self.label_col = image_col, label_col
        self.shard_size, self.prefix = shard_size, prefix
        self.label_offset = int(label_offset)
        self.classes = None if classes is None else [str(c) for c in classes]
        self.job = uuid.uuid4().hex[:12]
        self.staging = _commit.job_dir(_commit.Store(self.dst), self.job)
        self.result: Optional[Dict[str, Any]] = None

    def get_name(self) -> str:
        return "Chute"

    def on_write_start(self) -> None:
        store = _commit.Store(self.dst)
        left = [n for n in store.listdir(store.root) if n != _commit.TEMP_DIR]
        if left:
            raise FileExistsError("chute.ray.write: %s is not empty (%s...): choose a new "
                                  "directory" % (self.dst, ", ".join(left[:3])))
        if not store.s3:
            os.makedirs(self.staging)

    def _samples(self, blocks: Iterable[Block]) -> Iterable[Any]:
        for block in blocks:
            t = BlockAccessor.for_block(block).to_arrow()
            for name in (self.image_col, self.label_col):
                if name not in t.column_names:
                    raise KeyError("chute.ray.write: no column %r (columns: %s)"
                                   % (name, ", ".join(t.column_names)))
            images = t.column(self.image_col).to_pylist()
            labels = t.column(self.label_col).to_pylist()
            for data, label in zip(images, labels):
                if not isinstance(data, (bytes, bytearray, memoryview)):
                    raise TypeError("chute.ray.write: column %r holds %s, not encoded "
                                    "image bytes" % (self.image_col, type(data).__name__))
                yield data, int(label)

    def write(self, blocks: Iterable[Block], ctx: Any) -> Dict[str, Any]:
        task = int(ctx.task_idx)
        attempt = _commit.attempt_dir(self.staging, task, uuid.uuid4().hex[:8])
        opts = dict(shard_size=self.shard_size, prefix=self.prefix,
                    label_offset=self.label_offset, classes=self.classes)
        try:
            out = _commit.write_part(attempt, self.format, task, self._samples(blocks), opts,
                                     self.on_damaged)
        except BaseException:
            if not _commit.is_s3(attempt):  # (s3://: the driver removes the job's prefix)
                shutil.rmtree(attempt, ignore_errors=True)
            raise
        out["task"] = task
        return out

    def on_write_complete(self, write_result: Any) -> None:
        parts = sorted(write_result.write_returns, key=lambda r: r["task"])
        store = _commit.Store(self.dst)
        try:
            done = _commit.commit(store, self.format, parts, self.prefix)
        finally:
            _commit.cleanup(store, self.job)
        files = done["files"] + (["chute.manifest"] if self.format == "chute" else [])
        self.result = {"files": sorted(files), "bytes": done["bytes"],
                       "samples": done["samples"],
                       "parts": [int(p["samples"]) for p in parts],
                       "skipped": sum(int(p["skipped"]) for p in parts)}

    def on_write_failed(self, error: Exception) -> None:
        _commit.cleanup(_commit.Store(self.dst), self.job)


def write(ds: "ray.data.Dataset", dst: Any, format: str = "chute", *, image_col: str = "image",
          label_col: str = "label", shard_size: Optional[int] = None,
          prefix: Optional[str] = None, label_offset: int = 0,
          classes: Optional[Sequence[str]] = None, on_damaged: str = "skip",
          ray_remote_args: Optional[Dict[str, Any]] = None,
          concurrency: Optional[int] = None) -> Dict[str, Any]:
    """Write the rows of ``ds`` as one dataset in ``dst`` with :class:`chute.Writer`.

    format: ``"chute"`` (shards + one ``chute.manifest``), ``"tfrecord"``
        (``PREFIX-00000-of-0000N`` + DALI ``.idx``) or ``"wds"`` (tars).
    image_col: a column of encoded image bytes (JPEG/PNG, as ``read_binary_files``
        or :func:`read`'s ``bytes`` column give them); label_col: integers.
    classes: the class names (label k is ``classes[k]``; a label outside is
        refused).  The chute format needs them in every task (each shard
        carries the class table): without them ``ds`` is read once more for
        its largest label and the names are "0".."max".
    shard_size, prefix, label_offset: as :class:`chute.Writer`.
    on_damaged: an image chute.Writer refuses (damaged, unsupported, over
        the limits): ``"skip"`` (left out and counted in the result's
        ``skipped``; the default, as ``chute.spark.write``) or ``"fail"``
        (the write fails naming it, and leaves nothing).

    Rows are written in the dataset's order (this sets
    ``ds.context.execution_options.preserve_order``): task ``k``'s files come
    before task ``k + 1``'s.  Returns ``{"samples", "skipped", "files", "bytes",
    "parts"}`` of the committed dataset (``parts``: samples per write task).  See :class:`ChuteDatasink` for what happens on failure.
    """
    if classes is None and format == "chute":
        # Every shard carries the same class table (docs/FORMAT.md): the
        # tasks need it before they start, so this reads ds once more.
        top = ds.max(label_col)
        classes = [str(c) for c in range(int(top) + 1)] if top is not None else []
    sink = ChuteDatasink(dst, format, image_col=image_col, label_col=label_col,
                         shard_size=shard_size, prefix=prefix, label_offset=label_offset,
                         classes=classes, on_damaged=on_damaged)
    ds.context.execution_options.preserve_order = True
    ds.write_datasink(sink, ray_remote_args=ray_remote_args, concurrency=concurrency)
    assert sink.result is not None
    return sink.result
