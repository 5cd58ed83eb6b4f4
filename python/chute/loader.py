"""chute.Loader — the Python face of libchute's pipeline.

The heavy lifting (reading, decoding, cropping, resizing, normalising,
batching) happens in libchute's worker threads, behind the C extension
chute._chute.  This module turns option strings into the library's enums,
finds the process's rank in a distributed job, keeps the position in the
epoch for resuming, and wraps each batch's memory as PyTorch tensors
through DLPack.  It never touches pixels.
"""
import os
import sys
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _chute
from . import arrow as _arrow

__all__ = ["Loader", "pack", "distributed_defaults", "SkippedSamplesWarning", "default_workers"]

PathLike = Union[str, os.PathLike]

# The option table's enum, float, flag and string rows and the dataset's
# rows (src/common/loader_options.def, dataset_options.def), exported by the
# C extension: (table, name, field, kind, default, choices, layers, help,
# min, max).
# The choice tables (name -> C enum value = position) and the keyword
# defaults below come from it.
_ROWS = {(row[0], row[2]): row for row in _chute.option_rows()}


def _enum(field: str, table: str = "loader") -> Dict[str, int]:
    return {name: i for i, name in enumerate(_ROWS[(table, field)][5])}


def _xdefault(field: str, table: str = "loader") -> Any:
    return _ROWS[(table, field)][4]


_TRANSFORMS = _enum("transform")
# dtype also takes numpy/torch names and short aliases (Python only).
_DTYPES = dict(_enum("dtype"), float=0, f4=0, u1=1, half=2, f2=2)
_LAYOUTS = _enum("layout")
_REMAINDERS = _enum("remainder")
_CORRUPT = _enum("on_corrupt")
_HOLD = {"copy": 1, "raise": 0}
_KINDS = _enum("kind", "dataset")
_SHUFFLES = _enum("shuffle")  # chute_shuffle

_STATE_FORMAT = "chute.Loader/1"
# A state whose run began mid-epoch at a position (an elastic resume):
# batches_consumed counts from that position, so a chute that predates
# positions must refuse it rather than skip that many batches of the epoch.
_STATE_FORMAT_AT = "chute.Loader/2"

# Dataset kinds whose sample sizes and locations come from the listing or
# index made at open (no sample read): these get a resume fingerprint.
_FINGERPRINT_KINDS = ("tree", "shards", "tfrecord", "wds")
_FINGERPRINT_SAMPLES = 32


def _dataset_fingerprint(ds: Any) -> Optional[str]:
    """What tells two datasets of the same size apart for a resume check: the
    class names and, for up to 32 evenly spaced samples, label, stored size
    and location relative to the dataset's root (so a dataset moved or
    mounted elsewhere still matches).  No sample is read (a tree stats those
    32 files).  None for kinds where that is not cheap (streams, Arrow)."""
    if ds.kind not in _FINGERPRINT_KINDS:
        return None
    import hashlib

    n = len(ds)
    root = (ds.path or "").rstrip("/") + "/"
    h = hashlib.sha256(repr(tuple(ds.classes)).encode())
    for k in range(min(n, _FINGERPRINT_SAMPLES)):
        i = k * n // min(n, _FINGERPRINT_SAMPLES)
        where = ds.describe(i)
        if root != "/" and where.startswith(root):
            where = where[len(root):]
        h.update(repr((i, ds.label(i), ds.sample_size(i), where)).encode())
    return h.hexdigest()[:32]

# The loader's option table (src/common/loader_options.def), exported by
# the C extension: name -> (name, kind, default, min, max, layers, help).
# The keyword defaults and bounds below come from it, so Python, C and the
# CLI agree (docs/OPTIONS.md).
_OPTIONS = {row[0]: row for row in _chute.loader_options()}


def _default(name: str) -> int:
    return int(_OPTIONS[name][2])


def _dopt(name: str, value: Any) -> int:
    """value checked against the dataset table's bounds for option name."""
    row = _ROWS[("dataset", name)]
    return _uint(name, value, row[8], row[9])


_VIDEO_KEYS = ("video_size", "frames_per_clip", "clips_per_video", "num_indices_between_frames",
               "ms_between_frames", "sampling_range_start", "sampling_range_end",
               "video_max_side", "video_max_decoded_bytes")


def _video_kwargs(kw: Dict[str, Any]) -> Dict[str, Any]:
    """The video format's dataset options (dataset_options.def), checked;
    0 is each one's default ("0, or min..max")."""
    out: Dict[str, Any] = {k: 0 if kw[k] == 0 and type(kw[k]) is int else _dopt(k, kw[k])
                           for k in _VIDEO_KEYS}
    sampler = kw["clip_sampler"]
    if sampler not in _ROWS[("dataset", "clip_sampler")][5]:
        raise ValueError("clip_sampler must be one of %s, not %r"
                         % ("/".join(_ROWS[("dataset", "clip_sampler")][5]), sampler))
    out["clip_sampler"] = sampler
    return out


def _opt(name: str, value: Any) -> int:
    """value checked against the table's bounds for option name."""
    row = _OPTIONS[name]
    return _uint(name, value, row[3], row[4])

_torch_module: Any = None
_torch_checked = False


def _torch() -> Any:
    """The torch module, or None when it is not importable (imported once, lazily)."""
    global _torch_module, _torch_checked
    if not _torch_checked:
        _torch_checked = True
        try:
            import torch  # noqa: F401

            _torch_module = torch
        except Exception:  # ImportError, or a broken install
            _torch_module = None
    return _torch_module


def _choice(name: str, value: Any, table: Dict[str, int]) -> int:
    if isinstance(value, str):
        key = value.lower()
    else:
        # Accept dtype objects: numpy.float32, numpy.dtype('uint8'), torch.float16.
        key = (getattr(value, "__name__", None) or str(value)).lower()
        key = key.replace("torch.", "")
    if key not in table:
        raise ValueError("%s must be one of %s, not %r"
                         % (name, ", ".join(repr(k) for k in table if len(k) > 2), value))
    return table[key]


def _uint(name: str, value: Any, lo: int, hi: int) -> int:
    # A bool is an int to Python but never a count or a size: size=True
    # would mean 1x1 images.  Only a 0..1 option (a flag kept as a number,
    # e.g. direct_io) takes one.
    if isinstance(value, bool) and (lo, hi) != (0, 1):
        raise TypeError("%s must be an int, not bool" % name)
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import operator

            value = operator.index(value)
        except TypeError:
            raise TypeError("%s must be an int, not %s" % (name, type(value).__name__)) from None
    if not lo <= value <= hi:
        raise ValueError("%s must be in %d..%d, got %d" % (name, lo, hi, value))
    return int(value)


def _rgb(name: str, value: Optional[Sequence[float]]) -> Optional[Tuple[float, float, float]]:
    if value is None:
        return None
    try:
        t = tuple(float(v) for v in value)
    except TypeError:
        raise TypeError("%s must be a sequence of 3 floats" % name) from None
    if len(t) != 3:
        raise ValueError("%s must have 3 values (R, G, B), got %d" % (name, len(t)))
    return t  # type: ignore[return-value]


class SkippedSamplesWarning(UserWarning):
    """Issued once per epoch, with a count, when ``on_corrupt="skip"`` replaced
    samples whose content could not be decoded (``stats()["corrupt"]`` counts
    them too).  Turn it into an error with
    ``warnings.simplefilter("error", chute.SkippedSamplesWarning)``."""


def _names_list(what: str, v: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    v = list(v)
    for x in v:
        if not isinstance(x, str) or not x or "," in x:
            raise ValueError("%s must be names (str without commas), got %r" % (what, x))
    return v


def _names_csv(what: str, v: Optional[Union[str, Sequence[str]]]) -> Optional[str]:
    return None if v is None else ",".join(_names_list(what, v))


def default_workers() -> Tuple[int, str]:
    """``(count, reason)``: the worker count a :class:`Loader` (and :func:`pack`)
    uses by default — the CPUs this process may use (its affinity mask, as set
    by ``taskset``, and its cgroup CPU quota in a container), divided by
    ``LOCAL_WORLD_SIZE`` when set (torchrun's processes per host), at least 1."""
    n, why = _chute.default_workers()
    return int(n), str(why)


def distributed_defaults() -> Tuple[int, int, str]:
    """Return ``(rank, world_size, where_from)`` for this process.

    In order: ``torch.distributed`` when it is initialised; the ``RANK`` and
    ``WORLD_SIZE`` environment variables (torchrun, torch.distributed.launch);
    ``SLURM_PROCID`` and ``SLURM_NTASKS`` (srun); else ``(0, 1, "default")``.
    torch is only consulted if the program already imported it.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size()), "torch.distributed"
        except Exception:
            pass
    env = os.environ
    for rk, wk, src in (("RANK", "WORLD_SIZE", "env"), ("SLURM_PROCID", "SLURM_NTASKS", "slurm")):
        if env.get(rk, "").strip() and env.get(wk, "").strip():
            try:
                return int(env[rk]), int(env[wk]), src
            except ValueError:
                raise ValueError("cannot parse %s=%r / %s=%r as integers"
                                 % (rk, env[rk], wk, env[wk])) from None
    return 0, 1, "default"


class Loader:
    """Iterable over training batches from an ImageFolder tree or a shard directory.

    ``Loader(source, batch_size=256, *, transform="train", size=224, shuffle=True,
    seed=0, workers=None, drop_last=False, ...)``

    The numeric options' defaults and bounds are the C library's (one table
    for C, the CLI and Python: docs/OPTIONS.md).

    ``source`` may also be an Arrow producer (a ``pyarrow.Table`` or
    ``RecordBatchReader``: anything with ``__arrow_c_stream__``) or a
    ``.parquet`` file or directory of them (read with pyarrow, row group by
    row group): columns become fields, ``image_key`` names an image column
    (default ``image``, e.g. a Hugging Face ``Image`` column) and
    ``label_key`` the labels (default ``label``); see :mod:`chute.arrow`.

    Iterating yields ``(images, labels)`` per batch — or ``(images, labels, indices)``
    with ``return_indices=True`` — as PyTorch tensors made with DLPack from the
    library's own buffer (no copy).  Without torch (or with ``as_torch=False``)
    they are :class:`chute.Array` objects, which ``numpy.asarray``,
    ``numpy.from_dlpack``, ``torch.from_dlpack`` and ``jax.dlpack`` accept, also
    without copying.

    Every iteration runs one epoch.  Epochs: :meth:`set_epoch` chooses the
    epoch of the next iteration exactly (call it every epoch in distributed
    training, as with ``DistributedSampler``); an iteration started without
    a ``set_epoch`` call since the previous one began runs the epoch after
    it (0, 1, 2, ... for a loop that never calls it), so the order and the
    crops change every epoch as with ``DataLoader(shuffle=True)``.  The
    advance counts iterations started on this process only, so ranks that
    run the same loop stay in step; :meth:`load_state_dict` restores it.
    Starting a new iteration abandons the one in progress: the older
    iterator's next ``next()`` raises RuntimeError saying so (a Loader runs
    one epoch at a time; use a second Loader to peek at a batch).

    Source
        source: path of an ImageFolder tree (``ROOT/<class>/<image>``, labels are
            the sorted class index, as torchvision's ImageFolder) or of a shard
            directory written by :func:`chute.pack`; or an open :class:`chute.Dataset`.
        source_kind: ``"auto"`` (a directory with ``chute.manifest`` is shards),
            ``"tree"`` or ``"shards"``.  Kept for compatibility; see ``format``.
        format: a registered format name (``"tree"``, ``"shards"``,
            ``"tfrecord"``, ``"wds"``), or None (the default) to probe the path.
            An unknown name raises with the list of known ones.
        label_offset: added to labels read from TFRecord/WebDataset files
            (``imagenet_to_gcs.py`` writes 1-based labels: use -1).
        image_key, label_key: TFRecord feature keys (default
            ``"image/encoded"`` and ``"image/class/label"``).
        extra_keys: TFRecord feature keys to offer as typed fields (a list of
            str, or a comma-separated str): an int64_list/float_list becomes
            a fixed-length int64/float32 field, a bytes_list a bytes field, or
            a tensor when the key ends in ``".npy"``.  Streams (``pipe:``,
            ``"-"``, ``kafka://``) cannot be probed at open, so each is
            declared with its type: ``"bbox:float32[4]"``, ``"id:int64"``,
            ``"meta:bytes"``, ``"mask.npy:uint8[4x4]"``.  On a WebDataset tar
            stream the names are member extensions typed as the ``"wds"``
            format types them (``"cls:int64"``, ``"json:bytes"``,
            ``"npy:float32[2x3]"``); a sample that lacks a declared member is
            corrupt (``on_corrupt``), one of another shape raises (below).
        schema, csv_no_header: CSV columns as typed fields,
            ``"NAME:TYPE[=DEFAULT],..."`` with TYPE int64, float32, category
            or skip (see ``chute_dataset_options.schema``); label_key names
            the label column (its number when ``csv_no_header``).  NumPy:
            label_key names the labels array (default ``labels.npy``).
        audio_samples, audio_rate, audio_channels_first: WAV (a directory
            of ``.wav`` files, flat or in class directories): frames per
            sample (0: the first file's length; ``transform`` "train" takes a
            random window seeded by (seed, epoch, sample), "eval" the
            centre, "none" the start; shorter files are zero-padded at the
            end), the sample rate every file must have (0: the first file's;
            another raises, never resampled), and 1 for ``(channels,
            frames)`` instead of soundfile's ``(frames, channels)``.
            Batches are dicts with ``"audio"`` (float32, as
            ``soundfile.read(dtype="float32")``), ``"length"`` (int32, the
            real frames) and ``"labels"``; ``fields=["audio"]`` picks.
        video_size, frames_per_clip, clips_per_video, clip_sampler,
        num_indices_between_frames, ms_between_frames, sampling_range_start,
        sampling_range_end, video_max_side, video_max_decoded_bytes: video
            (format ``"video"``, when ``"video" in chute.features()``: a
            video file, a directory of them or class directories of them,
            Kinetics/UCF layout).  A sample is one clip; batches are dicts
            with ``"video"`` (uint8, N x T x 3 x H x W, T =
            frames_per_clip; native size, or video_size x video_size with
            one crop and flip for the whole clip), ``"frames"`` (int64, the
            presentation index of each frame) and ``"labels"``.  The
            sampler follows TorchCodec: ``clip_sampler`` "random" (starts
            from (seed, epoch, sample): a fresh clip per video per epoch)
            or "regular" (clips_per_video starts evenly spaced), frames
            num_indices_between_frames apart, or ms_between_frames apart by
            presentation time (exact for variable frame rate), inside
            [sampling_range_start, sampling_range_end).  docs/VIDEO.md.

    Typed fields
        fields: names of typed fields to deliver besides images and labels
            (see :attr:`fields` / ``Dataset.fields()``; WebDataset: every
            member extension other than the image's, e.g. ``"cls"``,
            ``"json"``, ``"npy"``).  When given, iterating yields a dict:
            ``"images"``, ``"labels"`` (and ``"indices"`` with
            ``return_indices``), one tensor per field of shape
            ``(N, *field_shape)``, and for a bytes field ``NAME`` a
            ``(N, field_bytes)`` uint8 tensor plus ``NAME + "_lengths"``
            (int64, ``(N,)``).  All zero-copy views of the batch's buffer.
            A field's shape is the first sample's (or the declared one): a
            sample whose value has another shape (1-3 boxes per image)
            raises ``InvalidArgumentError`` naming the field, the sample and
            both shapes, whatever ``on_corrupt`` says; it is never replaced.
        field_bytes: capacity per sample of a bytes field; a longer value is
            a corrupt sample (``on_corrupt`` decides).

    Batches
        batch_size: samples per batch.
        drop_last: drop a final partial batch (default False, as torch's DataLoader
            and the C library).
        size: output height = width in pixels.
        transform: ``"train"`` (RandomResizedCrop(scale, ratio 3/4..4/3) + random
            horizontal flip, seeded by (seed, epoch, sample)), ``"eval"`` (resize the
            shorter side to ``resize_size``, center crop) or ``"none"`` (resize the
            whole image to size x size).
        crop_pct, resize_size: the ``"eval"`` resize side, as timm: ``resize_size``
            if given, else ``floor(size / crop_pct)`` with ``crop_pct`` in (0, 1],
            default 0.875 (224 -> 256, 299 -> 341).  Give at most one.
        scale: area range of the ``"train"`` crop, default ``(0.08, 1.0)``
            (whole percents).
        dtype: ``"float32"`` (default), ``"float16"`` or ``"uint8"``.
        layout: ``"nchw"``, ``"nhwc"`` or ``"default"`` (NCHW for floats, NHWC for uint8).
        normalize: float dtypes: ``(x/255 - mean) / std`` (True, default) or ``x/255``.
        mean, std: RGB in 0..1; default ImageNet's (0.485, 0.456, 0.406) and
            (0.229, 0.224, 0.225).
        dct_scale: let JPEGs decode at a reduced DCT scale when the crop allows.
            Eval pixels of such (large) JPEGs then differ from torchvision's;
            False gives torchvision's pixels (python/README.md, "Eval pixels").
        return_indices: also yield each sample's dataset index (int64).
        as_torch: yield torch tensors (default: when torch is importable) or
            chute.Array objects.

    Order and distribution
        shuffle, seed: shuffle each epoch with this seed (the order and the
            augmentation depend only on seed, epoch and sample, never on workers).
        rank, world_size: this process's share.  Default: torch.distributed if
            initialised, else RANK/WORLD_SIZE (torchrun), else SLURM_PROCID/
            SLURM_NTASKS, else 0 and 1.  Every rank gets the same number of
            batches: ``len(loader)``.
        remainder: how ranks split N % world_size samples: ``"pad"`` (repeat the
            epoch's first samples, default) or ``"drop"``.
        shuffle: also ``"global"`` (the same as True: one permutation of all
            samples per epoch) or ``"shards"``: for files read front to back
            (TFRecord, WebDataset, chute shards; a tree is cut into runs of
            1024 samples), a seeded order of the files per epoch, split over
            ranks by files (by samples when there are fewer files than ranks),
            each file read front to back through a seeded shuffle buffer of
            ``shuffle_buffer`` samples (tf.data's ``shuffle(buffer_size)``).
            Still exactly once per epoch across ranks, the same order for any
            worker count, and resumable (docs/DESIGN.md, "Shuffling
            sequential formats", has how well each buffer size mixes).
        shuffle_buffer: samples in that buffer (default from the option table).

    Pipeline
        workers: decoding threads (default: :func:`chute.default_workers`, the CPUs
            this process may use — affinity mask and cgroup CPU quota — divided
            by ``LOCAL_WORLD_SIZE`` when set).
        prefetch: batches prepared ahead of the consumer (default 2).
        max_held: batches that may be alive zero-copy at once, counting the one
            just returned and the previous one still bound to your loop
            variable (default 2: a plain loop keeps no more; with
            ``hold_policy="copy"`` at most 63).  The batch
            ring has ``prefetch + max_held + 1`` buffers of one batch each,
            allocated up front (for 256 x 3 x 224 x 224 float32, 154 MB each).
        hold_policy: what happens when you already keep ``max_held`` batches
            alive and ask for another: ``"copy"`` (default) copies that new
            batch out of the ring into its own memory, so nothing is ever
            overwritten while you use it (``stats()["copied_batches"]`` counts
            these); ``"raise"`` raises :class:`chute.BusyError` instead (after one
            garbage collection).
        on_corrupt: what a sample with bad *content* does (undecodable, failing its
            checksum, or over max_pixels / max_sample_bytes): ``"skip"`` (count it,
            substitute another sample of this epoch, deterministically, and issue
            one :class:`chute.SkippedSamplesWarning` per epoch with the count) or
            ``"fail"`` (raise :class:`chute.CorruptDataError` naming the file).
            I/O errors are never skipped: a read is retried 3 times with backoff
            (``stats()["io_retries"]``), then :class:`chute.ChuteIOError` names the
            file; out of memory raises :class:`chute.OutOfMemoryError` at once.
        max_pixels, max_sample_bytes: per-sample limits (default 64 Mpx, 64 MiB).
        device: ``"cpu"`` (default), ``"cuda"`` or ``"cuda:N"``: images arrive as
            CUDA tensors (the CPU decodes; uint8 pixels cross PCIe from pinned
            memory, then the GPU converts and normalizes).  ``torch.from_dlpack``
            makes the current stream wait for the batch; the buffer is reused
            only after the work that stream queued before the tensor was freed.
            Labels stay on the host.  ``hold_policy`` is ``"raise"`` on a CUDA
            device.  Needs the CUDA module (``"cuda" in chute.features()``), the
            driver and a device, else :class:`chute.UnsupportedError` says which.
        timeout: seconds to wait for one batch before :class:`TimeoutError`
            (default: forever; Ctrl-C interrupts the wait either way).
        read_delay_us: add this latency to every sample read (testing, or
            "what if my storage were slower"); ignored when source is a Dataset.
        cache_dir, cache_bytes, cache_block_bytes: node-local cache tier in front
            of the source: blocks (default 8 MiB) of the files read are kept in
            cache_dir within cache_bytes of disk (default 10 GiB), shared safely by
            every process on the node, checksum-verified; a full or deleted
            directory falls back to the origin.  Ignored when source is a Dataset.
        cache_ram_bytes: RAM tier of that cache (bytes; 0 = none): whole blocks in
            this process's memory, least recently used evicted, read before
            cache_dir (or alone without one).  Ignored when source is a Dataset.
        decoded_cache_bytes: RAM budget (bytes) of the decoded-sample cache, 0 = off.
            Samples decoded in the first epoch are kept while the budget lasts and
            later epochs skip reading and decoding them; train crops/flips are still
            drawn fresh per (seed, epoch, sample), and every batch is bit-identical to
            a run without the cache (see chute.h).  stats(): cache_hits, cache_misses,
            cache_bytes, cache_entries.
        readahead: samples read ahead of the workers in the sampler's order (default
            64), 0 = off.  Hides storage latency (cold page cache, network) from the
            decode threads; batches are identical either way (docs/DESIGN.md).
        direct_io: 1 (or True): the read-ahead reads 4 KiB-aligned local records
            (chute shards) with O_DIRECT, bypassing the page cache (io_uring
            engine; ordinary reads where refused).  0 (default): never.  Ignored
            when source is a Dataset.
        coalesce_gap_bytes: s3:// and http(s)://: read-ahead reads of one object
            at most this many bytes apart share one ranged GET of at most 8 MiB
            (0 = 64 KiB; at most 8 MiB).  Ignored when source is a Dataset.
        stream_samples: for a stream ('pipe:COMMAND' or '-'), end each epoch after
            this many samples (0 = when the stream ends).
        stream_timeout_ms: for a stream, no byte for this long raises (the command is
            killed); 0 = wait forever.  Streams have no len(); see docs/DESIGN.md
            "Streams" (rank split: put $RANK in the command).
        gpu_decode_share: with device="cuda", the percent (0..100) of each batch's
            JPEGs decoded by nvJPEG on the GPU (0 = off); needs nvJPEG (the toolkit's
            libnvjpeg, `pip install nvidia-nvjpeg`, or $CHUTE_NVJPEG), else
            UnsupportedError "nvJPEG not found".
        tensorboard: a log directory (str or path; created if missing), or a
            ``torch.utils.tensorboard.SummaryWriter`` (any object with
            ``add_scalar``).  Every ``tensorboard_every`` batches (default 100)
            the loader's scalars are written at step = batches handed over so
            far: chute/wait_ms, chute/wait_pct_of_step, chute/window_wait_pct,
            chute/images_per_sec, chute/busy_pct/{read,decode,transform},
            chute/queue_fill, chute/read_p50_ms, chute/read_p99_ms,
            chute/cache_hit_pct, chute/tier_hit_pct, chute/skipped,
            chute/io_retries, chute/batches (docs/WAITING.md says what each is,
            from :meth:`stats`).  A directory gets an event file written by the
            library from its stats thread (one per loader, shared with
            the Prometheus and ``chute top`` exports); a writer is called from this
            thread at those steps.  See also :meth:`rank_report`.
        stats_shm: 1 (default) keeps a small shared-memory stats segment that
            ``chute top`` reads (docs/TOP.md); 0 turns it off.
        metrics_port: serve Prometheus metrics at http://metrics_addr:PORT/metrics
            from the loader's stats thread (0 = off); metrics_addr defaults to
            "127.0.0.1".  metrics_file: write the same text to this path every
            second (temp file + rename) for node_exporter's textfile collector.
            metrics_name: the ``dataset`` label (default: the dataset's base
            name).  Metric set and labels: docs/METRICS.md.
        augment: augmentation ops applied to each sample's output pixels, in
            order, with torchvision.transforms.v2's semantics: a string
            ``"op[=v1:v2...],..."``, e.g.
            ``"colorjitter=0.4:0.4:0.4:0.1,grayscale=0.2,erasing=0.25"``
            (docs/AUGMENT.md lists the ops).  Draws depend on (seed, epoch,
            sample) only.  A bad string raises ValueError naming the token.
        mixup, cutmix: MixUp's / CutMix's alpha (0 = off), torchvision v2's
            MixUp / CutMix on each whole batch (partner: the batch rolled by
            one; lambda ~ Beta(alpha, alpha)); with either on, the label
            tensor becomes float32 soft labels of shape (N, num_classes)
            (``Batch.soft_labels``; ``Batch.labels`` keeps the unmixed ones).
            mix_switch: both on, the probability that a batch gets CutMix
            (default 0.5, torchvision's RandomChoice).  num_classes: the soft
            labels' length (default: the dataset's class count).  MixUp needs a
            float dtype.  Draws depend on (seed, epoch, batch position) only
            (docs/AUGMENT.md "Batch mixing").
        repeats: repeated augmentation: each sample ``repeats`` times per
            epoch, each copy with its own crop and augmentation draws, the
            copies split over ranks as torchvision references' RASampler
            (an epoch is ``repeats`` x the dataset; not with shuffle="shards").
        geometry: a geometric plan per sample instead of ``transform``'s crop,
            ``"step[=v1:v2...],..."``, e.g. ``"rrc=0.08:1,hflip,rotate=15"``
            (docs/GEOMETRY.md lists the steps: rrc, resize, letterbox,
            centercrop, crop, hflip, vflip, rotate, affine, lsj, zoomout),
            with torchvision.transforms.v2's semantics, ending at size x size.
        parquet_memory_bytes: Parquet (larger than memory): the decoded row
            groups held at once, in bytes by the footers' uncompressed sizes
            (default 1 GiB; at least 2 row groups); row groups are read on
            demand and the least recently used released.  Use
            ``shuffle="shards"`` (row-group order + the shuffle buffer) when
            the data does not fit.  For Arrow and Parquet, ``schema=
            "NAME[:TYPE]=VALUE,..."`` gives per-column defaults for null
            cells (a null without one is CorruptDataError naming column,
            row group and row).

    Memory lifetime: a tensor from a batch keeps the batch's buffer alive —
    across iterations, epochs, and even after the loader is closed or freed —
    and the buffer returns to the ring when the last tensor referring to it is
    freed.  Write ``images.clone()`` for tensors you keep for long.

    Not inside DataLoader workers: a Loader belongs to the process that
    created it.  In a ``fork()`` child (a torch ``DataLoader`` with
    ``num_workers > 0`` wrapping this Loader, ``multiprocessing`` with the
    fork start method) its threads do not exist: iterating raises
    RuntimeError saying so, and freeing it there frees memory without
    waiting for them; under spawn/forkserver it cannot be pickled
    (TypeError).  Iterate the Loader itself in the training process (its
    ``workers`` threads decode in parallel; a DataLoader around it adds
    nothing), or create a Loader in each process.

    Resume: :meth:`state_dict` records (seed, epoch, batches consumed); a new
    loader given :meth:`load_state_dict` continues that epoch with exactly the
    batches not yet delivered, in the same order and with the same crops, with
    any number of workers; with a global shuffle also on another world size or
    batch size (the epoch's remaining samples dealt over the new ranks, see
    :meth:`load_state_dict`).
    """

    def __init__(
        self,
        source: Union[PathLike, _chute.Dataset],
        batch_size: int = _default("batch_size"),
        *,
        transform: str = _xdefault("transform"),
        size: int = _default("size"),
        shuffle: Union[bool, str] = _xdefault("no_shuffle"),
        seed: int = _default("seed"),
        workers: Optional[int] = None,
        drop_last: bool = bool(_default("drop_last")),
        dtype: Any = _xdefault("dtype"),
        layout: str = _xdefault("layout"),
        normalize: bool = _xdefault("no_normalize"),
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        remainder: str = _xdefault("remainder"),
        on_corrupt: str = _xdefault("on_corrupt"),
        prefetch: int = _default("prefetch"),
        max_held: int = _default("max_held"),
        hold_policy: str = "copy",
        return_indices: bool = False,
        as_torch: Optional[bool] = None,
        source_kind: str = _xdefault("kind", "dataset"),
        format: Optional[str] = _xdefault("format", "dataset"),
        label_offset: int = _xdefault("label_offset", "dataset"),
        image_key: Optional[str] = _xdefault("image_key", "dataset"),
        label_key: Optional[str] = _xdefault("label_key", "dataset"),
        scale: Tuple[float, float] = (_default("scale_min_pct") / 100,
                                      _default("scale_max_pct") / 100),
        dct_scale: bool = _xdefault("no_dct_scale"),
        max_pixels: int = _default("max_pixels"),
        max_sample_bytes: int = _default("max_sample_bytes"),
        timeout: Optional[float] = None,
        read_delay_us: int = _xdefault("read_delay_us", "dataset"),
        crop_pct: Optional[float] = None,
        fields: Optional[Sequence[str]] = _xdefault("fields"),
        extra_keys: Optional[Union[str, Sequence[str]]] = _xdefault("extra_keys", "dataset"),
        schema: Optional[str] = _xdefault("schema", "dataset"),
        csv_no_header: bool = bool(_xdefault("csv_no_header", "dataset")),
        field_bytes: int = _default("field_bytes"),
        resize_size: Optional[int] = None,
        shuffle_buffer: int = _default("shuffle_buffer"),
        decoded_cache_bytes: int = _default("decoded_cache_bytes"),
        device: Optional[str] = _xdefault("device"),
        index_dir: Optional[str] = _xdefault("index_dir", "dataset"),
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = _xdefault("cache_dir", "dataset"),
        cache_bytes: int = _xdefault("cache_bytes", "dataset"),
        cache_block_bytes: int = _xdefault("cache_block_bytes", "dataset"),
        readahead: int = _default("readahead"),
        audio_samples: int = _xdefault("audio_samples", "dataset"),
        audio_rate: int = _xdefault("audio_rate", "dataset"),
        audio_channels_first: int = _xdefault("audio_channels_first", "dataset"),
        stream_samples: int = _default("stream_samples"),
        stream_timeout_ms: int = _default("stream_timeout_ms"),
        cache_ram_bytes: int = _xdefault("cache_ram_bytes", "dataset"),
        gpu_decode_share: int = _default("gpu_decode_share"),
        stats_shm: int = _default("stats_shm"),
        direct_io: int = _xdefault("direct_io", "dataset"),
        coalesce_gap_bytes: int = _xdefault("coalesce_gap_bytes", "dataset"),
        video_size: int = _xdefault("video_size", "dataset"),
        frames_per_clip: int = _xdefault("frames_per_clip", "dataset"),
        clips_per_video: int = _xdefault("clips_per_video", "dataset"),
        clip_sampler: str = _xdefault("clip_sampler", "dataset"),
        num_indices_between_frames: int = _xdefault("num_indices_between_frames", "dataset"),
        ms_between_frames: int = _xdefault("ms_between_frames", "dataset"),
        sampling_range_start: int = _xdefault("sampling_range_start", "dataset"),
        sampling_range_end: int = _xdefault("sampling_range_end", "dataset"),
        video_max_side: int = _xdefault("video_max_side", "dataset"),
        video_max_decoded_bytes: int = _xdefault("video_max_decoded_bytes", "dataset"),
        parquet_memory_bytes: Optional[int] = None,
        tensorboard: Any = _xdefault("tensorboard"),
        tensorboard_every: int = _default("tensorboard_every"),
        metrics_port: int = _default("metrics_port"),
        metrics_addr: Optional[str] = _xdefault("metrics_addr"),
        metrics_file: Optional[str] = _xdefault("metrics_file"),
        metrics_name: Optional[str] = _xdefault("metrics_name"),
        augment: Optional[str] = _xdefault("augment"),
        mixup: Optional[float] = None,
        cutmix: Optional[float] = None,
        mix_switch: Optional[float] = None,
        num_classes: Optional[int] = None,
        repeats: int = _default("repeats"),
        geometry: Optional[str] = _xdefault("geometry"),
    ) -> None:
        self._core: Any = None
        self.batch_size = _opt("batch_size", batch_size)
        self.size = _opt("size", size)
        t_transform = _choice("transform", transform, _TRANSFORMS)
        t_dtype = _choice("dtype", dtype, _DTYPES)
        t_layout = _choice("layout", layout, _LAYOUTS)
        t_remainder = _choice("remainder", remainder, _REMAINDERS)
        t_corrupt = _choice("on_corrupt", on_corrupt, _CORRUPT)
        t_hold = _choice("hold_policy", hold_policy, _HOLD)
        if device is not None and not isinstance(device, str):
            raise TypeError("device must be a str ('cpu', 'cuda', 'cuda:N') or None")
        if device is not None and device.startswith("cuda"):
            t_hold = _HOLD["raise"]  # a CUDA batch is never copied out on the host
        t_kind = _choice("source_kind", source_kind, _KINDS)
        if isinstance(shuffle, str):
            t_shuffle = _choice("shuffle", shuffle, _SHUFFLES)
            shuffle = True
        else:
            t_shuffle = _SHUFFLES["global"]
        self.shuffle_buffer = _opt("shuffle_buffer", shuffle_buffer)
        n_workers = None if workers is None else _opt("workers", workers)
        self.prefetch = _opt("prefetch", prefetch)
        self.max_held = _opt("max_held", max_held)
        if t_hold == _HOLD["copy"] and self.max_held >= _OPTIONS["max_held"][4]:
            raise ValueError('max_held must be in %d..%d with hold_policy="copy" (one ring slot '
                             'is kept spare for the copy), got %d'
                             % (_OPTIONS["max_held"][3], _OPTIONS["max_held"][4] - 1,
                                self.max_held))
        self.seed = _opt("seed", seed)
        mean_t, std_t = _rgb("mean", mean), _rgb("std", std)
        if not normalize and (mean_t is not None or std_t is not None):
            raise ValueError("mean/std given with normalize=False")
        if std_t is not None and not all(s > 0 for s in std_t):
            raise ValueError("std values must be positive")
        try:
            smin, smax = (float(v) for v in scale)
        except (TypeError, ValueError):
            raise TypeError("scale must be a pair of floats, e.g. (0.08, 1.0)") from None
        smin_pct, smax_pct = int(round(smin * 100)), int(round(smax * 100))
        if not _OPTIONS["scale_min_pct"][3] <= smin_pct <= smax_pct <= _OPTIONS["scale_max_pct"][4]:
            raise ValueError("scale must satisfy 0.01 <= min <= max <= 1.0, got %r" % (scale,))
        if crop_pct is not None and not 0 < float(crop_pct) <= 1:
            raise ValueError("crop_pct must be in (0, 1], got %r" % (crop_pct,))
        if crop_pct is not None and resize_size is not None:
            raise ValueError("give crop_pct or resize_size, not both")
        if isinstance(timeout, bool):
            raise TypeError("timeout must be a number of seconds or None, not bool")
        if timeout is not None and not timeout >= 0:
            raise ValueError("timeout must be >= 0 or None")
        self.timeout = None if timeout is None else float(timeout)

        d_rank, d_world, self.distributed_source = distributed_defaults()
        if rank is None and world_size is None:
            rank, world_size = d_rank, d_world
        elif world_size is None:
            world_size = d_world
        elif rank is None:
            rank = d_rank if d_world == world_size else 0
        self.world_size = _opt("world_size", world_size)
        self.rank = _opt("rank", rank)
        if self.rank >= self.world_size:
            raise ValueError("rank %d must be below world_size %d" % (self.rank, self.world_size))

        if as_torch is None:
            as_torch = _torch() is not None
        elif as_torch and _torch() is None:
            raise ImportError("as_torch=True but torch cannot be imported")
        self.as_torch = bool(as_torch)
        self.return_indices = bool(return_indices)
        self.shuffle = bool(shuffle)
        self.shuffle_mode = _ROWS[("loader", "shuffle")][5][t_shuffle]
        self.drop_last = bool(drop_last)
        self._from_dlpack: Optional[Callable[[Any], Any]] = None
        if self.as_torch:
            self._from_dlpack = _torch().utils.dlpack.from_dlpack

        if isinstance(label_offset, bool):
            raise TypeError("label_offset must be an int, not bool")
        if isinstance(source, _chute.Dataset):
            self.dataset = source
        elif format in (None, "arrow", "parquet") and _arrow.is_arrow_source(source):
            # Arrow producers (__arrow_c_stream__) and Parquet files (chute/arrow.py)
            self.dataset = _arrow.dataset(source, image_key=image_key, label_key=label_key,
                                          label_offset=int(label_offset),
                                          read_delay_us=_dopt("read_delay_us", read_delay_us),
                                          schema=schema,
                                          parquet_memory_bytes=parquet_memory_bytes,
                                          shuffle=(True if t_shuffle == _SHUFFLES["global"]
                                                   and shuffle else False))
            if not hasattr(source, "__arrow_c_stream__"):
                _arrow.track(self)  # row groups load through Python: close before exit
        else:
            if format is not None and not isinstance(format, str):
                raise TypeError("format must be a str or None")
            self.dataset = _chute.Dataset(os.fspath(source), t_kind,
                                          read_delay_us=_dopt("read_delay_us", read_delay_us),
                                          format=format, label_offset=int(label_offset),
                                          image_key=image_key, label_key=label_key,
                                          extra_keys=_names_csv("extra_keys", extra_keys),
                                          cache_dir=(None if cache_dir is None
                                                     else os.fspath(cache_dir)),
                                          cache_bytes=_dopt("cache_bytes", cache_bytes),
                                          cache_block_bytes=_dopt("cache_block_bytes",
                                                                  cache_block_bytes),
                                          schema=schema, csv_no_header=bool(csv_no_header),
                                          index_dir=index_dir,
                                          audio_samples=_dopt("audio_samples", audio_samples),
                                          audio_rate=_dopt("audio_rate", audio_rate),
                                          audio_channels_first=bool(audio_channels_first),
                                          cache_ram_bytes=_dopt("cache_ram_bytes",
                                                                cache_ram_bytes),
                                          direct_io=_dopt("direct_io", direct_io),
                                          coalesce_gap_bytes=_dopt("coalesce_gap_bytes",
                                                                   coalesce_gap_bytes),
                                          **_video_kwargs(locals()))
        # A CSV read without a schema: every column but the label is a
        # float32 scalar field; delivered by default, and stacked as one
        # (N, columns) "features" tensor in header order (issue 22.2).
        self._csv_features: Tuple[str, ...] = ()
        if (fields is None and schema is None and not isinstance(source, _chute.Dataset)
                and self.dataset.kind == "csv"):
            self._csv_features = tuple(f["name"] for f in self.dataset.fields()
                                       if f["dtype"] == "float32")
            if self._csv_features:
                fields = list(self._csv_features)
        # A video dataset delivers its clips (and their frame indices) by default.
        if fields is None and self.dataset.kind == "video":
            fields = ["video", "frames"]
        self._tb_writer: Any = None
        tb_dir: Optional[str] = None
        if tensorboard is not None:
            if hasattr(tensorboard, "add_scalar"):
                self._tb_writer = tensorboard
            elif isinstance(tensorboard, (str, os.PathLike)):
                tb_dir = os.fspath(tensorboard)
                if not isinstance(tb_dir, str) or not tb_dir:
                    raise TypeError("tensorboard must be a non-empty str path or a SummaryWriter")
            else:
                raise TypeError("tensorboard must be a log directory (str) or a SummaryWriter "
                                "(an object with add_scalar), got %s" % type(tensorboard).__name__)
        self._tb_every = _opt("tensorboard_every", tensorboard_every)
        self._tb_batches = 0        # batches handed over (the writer's step)
        self._tb_pending: Optional[Tuple[int, Any]] = None  # (step, scalars) not yet written
        self._core = _chute._Loader(
            self.dataset,
            batch_size=self.batch_size,
            size=self.size,
            transform=t_transform,
            dtype=t_dtype,
            layout=t_layout,
            workers=n_workers,
            prefetch=self.prefetch,
            max_held=self.max_held,
            seed=self.seed,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            rank=self.rank,
            world_size=self.world_size,
            remainder=t_remainder,
            on_corrupt=t_corrupt,
            normalize=bool(normalize),
            mean=mean_t,
            std=std_t,
            dct_scale=bool(dct_scale),
            max_pixels=None if max_pixels is None else _opt("max_pixels", max_pixels),
            max_sample_bytes=None if max_sample_bytes is None
            else _opt("max_sample_bytes", max_sample_bytes),
            scale_min_pct=smin_pct,
            scale_max_pct=smax_pct,
            copy_on_hold_limit=bool(t_hold),
            crop_pct=0.0 if crop_pct is None else float(crop_pct),
            resize_size=None if resize_size is None else _opt("resize_size", resize_size),
            shuffle_buffer=self.shuffle_buffer,
            shuffle_mode=t_shuffle,
            field_bytes=_opt("field_bytes", field_bytes),
            fields=None if fields is None else _names_list("fields", fields),
            decoded_cache_bytes=_opt("decoded_cache_bytes", decoded_cache_bytes),
            device=device,
            readahead=_opt("readahead", readahead),
            stream_samples=_opt("stream_samples", stream_samples),
            stream_timeout_ms=_opt("stream_timeout_ms", stream_timeout_ms),
            gpu_decode_share=_opt("gpu_decode_share", gpu_decode_share),
            tensorboard=tb_dir,
            tensorboard_every=self._tb_every,
            stats_shm=_opt("stats_shm", stats_shm),
            metrics_port=_opt("metrics_port", metrics_port),
            metrics_addr=None if metrics_addr is None else str(metrics_addr),
            metrics_file=None if metrics_file is None else os.fspath(metrics_file),
            metrics_name=None if metrics_name is None else str(metrics_name),
            augment=None if augment is None else str(augment),
            mixup=0.0 if mixup is None else float(mixup),
            cutmix=0.0 if cutmix is None else float(cutmix),
            mix_switch=0.0 if mix_switch is None else float(mix_switch),
            num_classes=None if num_classes is None else _opt("num_classes", num_classes),
            repeats=_opt("repeats", repeats),
            geometry=None if geometry is None else str(geometry),
        )
        self.mixing = bool(mixup) or bool(cutmix)
        self.device = device or "cpu"
        self.fields_requested: Tuple[str, ...] = (
            () if fields is None else tuple(_names_list("fields", fields)))
        self.dtype = _ROWS[("loader", "dtype")][5][t_dtype]
        self.layout = ("nhwc" if t_dtype == 1 else "nchw") if t_layout == 0 else layout.lower()
        # Canonical spellings of the choices (what state_dict and repr show).
        self.transform = _ROWS[("loader", "transform")][5][t_transform]
        self.remainder = _ROWS[("loader", "remainder")][5][t_remainder]
        self.on_corrupt = _ROWS[("loader", "on_corrupt")][5][t_corrupt]
        self.hold_policy = ("raise", "copy")[t_hold]
        self._epoch = 0
        # The next run uses _epoch as it is (a new loader, set_epoch,
        # load_state_dict) or, once a run has started without one since,
        # _epoch + 1: the automatic advance.
        self._epoch_chosen = True
        self._consumed = 0          # batches of the current epoch delivered
        # (epoch, start_batch, position) for the next run: position None
        # skips start_batch batches of a whole epoch; else the run starts at
        # that global position (elastic resume, start_epoch_at).
        self._resume: Optional[Tuple[int, int, Optional[int]]] = None
        # The position state_dict reports while no run of _epoch has started
        # (a fresh loader, set_epoch, load_state_dict); None: ask the core.
        self._pending_position: Optional[int] = 0
        # The position the current (or pending) run starts at; None: a whole
        # epoch's run (batches_consumed counts from the epoch's start).
        self._run_at: Optional[int] = None
        self._fingerprint_memo: Optional[Tuple[Optional[str]]] = None  # see _fingerprint
        self._generation = 0        # bumps on every start; stale iterators raise
        self._superseded_by = ""    # what bumped it last, for their message
        self._active = False        # an epoch run is in progress
        self._warned_copy = False
        self._corrupt_base = 0      # stats()["corrupt"] when the current epoch started
        self._skip_epoch: Optional[int] = None  # epoch whose skips are not yet reported

    # ------------------------------------------------------------------
    # Epochs and iteration

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration runs (shuffle and augmentation
        depend on it), exactly: call it every epoch in distributed training,
        as with ``DistributedSampler``.  Without it each new iteration runs
        the epoch after the previous one (see the class doc).  A pending
        resume point from :meth:`load_state_dict` is kept only if it belongs
        to this epoch."""
        epoch = _uint("epoch", epoch, 0, 2 ** 64 - 1)
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None
        if epoch != self._epoch:
            self._active = False
            self._supersede("set_epoch(%d)" % epoch)
            self._consumed = self._resume[1] if self._resume is not None else 0
            self._pending_position = self._resume_position() if self._resume is not None else 0
            self._run_at = self._resume[2] if self._resume is not None else None
        self._epoch = epoch
        self._epoch_chosen = True

    @property
    def epoch(self) -> int:
        """The epoch of the run in progress (or of the last one): the one set
        by :meth:`set_epoch`, restored by :meth:`load_state_dict`, or reached
        by the automatic advance."""
        return self._epoch

    def _supersede(self, why: str) -> None:
        """Invalidate the current epoch's iterator: it raises, naming why."""
        self._generation += 1
        self._superseded_by = why

    def _report_skips(self) -> None:
        """Warn once, with a count, about samples skipped in the epoch that
        just ended (or was abandoned)."""
        epoch, self._skip_epoch = self._skip_epoch, None
        if epoch is None or self._core is None or self.on_corrupt != "skip":
            return
        n = int(self._core.stats()["corrupt"]) - self._corrupt_base
        if n > 0:
            last = self._core.errmsg()
            warnings.warn("chute.Loader: epoch %d: %d sample%s with bad content (undecodable, "
                          "failing a checksum or over a size limit) replaced by other samples of "
                          "the epoch (on_corrupt='skip')%s. on_corrupt='fail' raises instead."
                          % (epoch, n, "" if n == 1 else "s",
                             "; last: " + last if last.startswith("skipped") else ""),
                          SkippedSamplesWarning, stacklevel=4)

    def _begin(self) -> None:
        self._report_skips()
        if not self._epoch_chosen:
            # No set_epoch since the last run started: the next epoch, so a
            # loop that never calls set_epoch reshuffles (and redraws its
            # crops) every epoch, as DataLoader(shuffle=True) does.  Every
            # rank starts the same number of runs, so ranks stay in step.
            if self._epoch >= 2 ** 64 - 1:
                raise OverflowError("epoch %d is the last one; call set_epoch()" % self._epoch)
            self._epoch += 1
        self._epoch_chosen = False
        start, position = 0, None
        if self._resume is not None and self._resume[0] == self._epoch:
            start, position = self._resume[1], self._resume[2]
        self._resume = None
        self._corrupt_base = int(self._core.stats()["corrupt"])
        if position is not None:
            self._core.start_epoch_at(self._epoch, position)
        else:
            self._core.start_epoch(self._epoch, start)
        self._pending_position = None
        self._run_at = position
        self._skip_epoch = self._epoch
        self._consumed = start if self._is_stream else min(start, self._core.run_batches)
        self._supersede("a new iteration (iter(loader) or next_batch()) that started epoch %d"
                        % self._epoch)
        self._active = True

    def __iter__(self) -> Iterator[Tuple[Any, ...]]:
        """Run one epoch, from its start or from the point restored by
        :meth:`load_state_dict`: the one chosen by :meth:`set_epoch` or
        :meth:`load_state_dict` if called since the last iteration started,
        else the epoch after the last one.  An iterator still open on the
        previous run is superseded: its next ``next()`` raises RuntimeError."""
        self._begin()
        return _EpochIterator(self, self._generation, self._epoch)

    def __len__(self) -> int:
        """Batches per epoch for this rank; the same on every rank.  A stream
        ('pipe:COMMAND', '-') has no length: TypeError, as for any iterable
        without one (an epoch ends when the stream does, or after
        stream_samples)."""
        if self._is_stream:
            raise TypeError("chute.Loader over a stream (%r) has no length: its epoch ends when "
                            "the stream does (or after stream_samples)" % self.dataset.path)
        return int(self._core.num_batches)

    @property
    def _is_stream(self) -> bool:
        return bool(getattr(self.dataset, "is_stream", False))

    @property
    def num_samples(self) -> int:
        """Samples this rank delivers per epoch."""
        return int(self._core.num_samples)

    @property
    def classes(self) -> Tuple[str, ...]:
        """Class names, indexed by label."""
        return self.dataset.classes

    def next_batch(self, timeout: Optional[float] = None) -> Optional[_chute.Batch]:
        """The next :class:`chute.Batch` of the current epoch as the library
        hands it over, or None after the last one.  Starts the epoch if none is
        running.  ``timeout`` (seconds) overrides the loader's."""
        if not self._active:
            self._begin()
        if self._tb_pending is not None:
            self._tb_flush()
        b = self._core.next(timeout=self.timeout if timeout is None else timeout)
        if b is None:
            self._active = False
            self._report_skips()
            return None
        self._consumed += 1
        self._tb_batches += 1
        if self._tb_writer is not None and self._tb_batches % self._tb_every == 0:
            # The snapshot now, as the native writer takes it in next(); the
            # writer is called on the next call (or close), not before this
            # batch reaches the loop.
            self._tb_pending = (self._tb_batches, self._core.tb_scalars())
        if b.copied and not self._warned_copy:
            self._warned_copy = True
            warnings.warn("chute.Loader: more than max_held=%d batches are alive at once; "
                          "batches beyond that are copied out of the ring (slower). Raise "
                          "max_held or drop references to old batches." % self.max_held,
                          ResourceWarning, stacklevel=3)
        return b

    @property
    def fields(self) -> List[Dict[str, Any]]:
        """The dataset's typed fields (name, kind, dtype, per-sample shape)."""
        return self.dataset.fields()

    def _convert(self, b: _chute.Batch) -> Any:
        if self.fields_requested or not self._has_images:
            return self._convert_fields(b)
        fd = self._from_dlpack
        labels = b.soft_labels if self.mixing else b.labels
        if fd is not None:
            if self.return_indices:
                return fd(b.images), fd(labels), fd(b.indices)
            return fd(b.images), fd(labels)
        if self.return_indices:
            return b.images, labels, b.indices
        return b.images, labels

    def _convert_fields(self, b: _chute.Batch) -> Dict[str, Any]:
        fd = self._from_dlpack or (lambda a: a)
        images = b.images
        out: Dict[str, Any] = {} if images is None else {"images": fd(images)}
        out["labels"] = fd(b.soft_labels if self.mixing else b.labels)
        if self.return_indices:
            out["indices"] = fd(b.indices)
        for name in self.fields_requested:
            out[name] = fd(b.field(name))
            if name in self._bytes_fields:
                out[name + "_lengths"] = fd(b.field_lengths(name))
        if self._csv_features:
            import numpy as np
            out["features"] = fd(np.stack([np.asarray(b.field(n)) for n in self._csv_features],
                                          axis=1))
        return out

    @property
    def _has_images(self) -> bool:
        # False for image-less datasets (NumPy tensors, CSV rows): batches
        # are then dicts without "images".
        cached = getattr(self, "_has_images_cache", None)
        if cached is None:
            cached = bool(self.dataset.has_images)
            self._has_images_cache = cached
        return cached

    @property
    def _bytes_fields(self) -> Tuple[str, ...]:
        cached = getattr(self, "_bytes_fields_cache", None)
        if cached is None:
            cached = tuple(f["name"] for f in self.dataset.fields() if f["kind"] == "bytes")
            self._bytes_fields_cache = cached
        return cached

    # ------------------------------------------------------------------
    # Resume

    def state_dict(self) -> Dict[str, Any]:
        """Where this loader stands: seed, epoch, batches consumed in the
        current run of the epoch and ``position`` (how many leading positions
        of the epoch's permutation all ranks together have consumed; the
        dataset size once the epoch is complete), plus what must match for
        an exact resume.  Plain ints and strings (JSON- and
        torch.save-friendly).  Ranks consume batches in lockstep, so rank 0's
        state is valid on every rank, and on any number of ranks (see
        :meth:`load_state_dict`)."""
        # A stream's resume re-runs its command and skips the batches
        # consumed (the same bytes give the same order): exact only if the
        # command gives the same bytes again (docs/DESIGN.md "Streams").
        return {
            "format": _STATE_FORMAT if self._run_at is None else _STATE_FORMAT_AT,
            "seed": self.seed,
            "epoch": self._epoch,
            "batches_consumed": self._consumed,
            "position": None if self._is_stream else self._position(),
            "num_batches": None if self._is_stream else len(self),
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "dataset_size": len(self.dataset),
            "dataset_fingerprint": self._fingerprint(),
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "remainder": self.remainder,
            "shuffle_mode": self.shuffle_mode,
            "shuffle_buffer": self.shuffle_buffer,
            **self._stream_state(),
        }

    def _fingerprint(self) -> Optional[str]:
        if self._fingerprint_memo is None:  # computed once: a tree stats files
            self._fingerprint_memo = (_dataset_fingerprint(self.dataset),)
        return self._fingerprint_memo[0]

    def _position(self) -> int:
        if self._pending_position is not None:
            return self._pending_position
        return int(self._core.position(self._consumed))

    def _resume_position(self) -> int:
        """The position a pending resume point stands at."""
        epoch, start, position = self._resume  # type: ignore[misc]
        if position is not None:
            return position
        if start >= len(self):
            return len(self.dataset)
        return start * self.batch_size * self.world_size

    def _stream_state(self) -> Dict[str, Any]:
        # A Kafka stream (kafka://) resumes by position, not by batches: the
        # consumer's offsets past what this loader released (base64 of
        # chute_loader_stream_state's bytes, so the dict stays JSON-friendly).
        if not self._is_stream or not self.dataset.path.startswith("kafka://"):
            return {}
        core = getattr(self, "_core", None)
        if core is None or core.closed:
            return {}
        import base64
        return {"stream_state": base64.b64encode(core.stream_state()).decode("ascii")}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`: the next iteration runs the
        saved epoch from the first sample not yet consumed.  Raises ValueError
        if the loader was built with settings that change the epoch's
        permutation or its cut (seed, shuffle, dataset size, drop_last,
        remainder, shuffle_mode and, in shards mode, shuffle_buffer).

        The worker count may differ, and with ``shuffle_mode="global"`` (or
        no shuffle) so may ``world_size`` and ``batch_size`` (elastic
        resume): the epoch's remaining samples, positions ``position`` ..
        N-1 of its permutation, are dealt round-robin over the new ranks,
        each with its uninterrupted run's crops and flips; every rank gets
        the same number of batches (``remainder`` pads or cuts the last
        row).  ``len()`` of the resumed epoch's iterator is its remainder;
        the next epoch is a whole one on the new ranks.  Shards mode and
        streams resume only at the saved world size and batch size: their
        ranks' orders are not one sequence split up (docs/DESIGN.md
        "Resume")."""
        fmt = state.get("format")
        if fmt not in (_STATE_FORMAT, _STATE_FORMAT_AT):
            if isinstance(fmt, str) and fmt.startswith("chute.Loader/"):
                raise ValueError("state format %r is from a newer chute (this one reads %s and "
                                 "%s): resume with that chute version or newer"
                                 % (fmt, _STATE_FORMAT, _STATE_FORMAT_AT))
            raise ValueError("not a chute.Loader state dict (format %r)" % fmt)
        mine = self.state_dict()
        for key in ("seed", "shuffle", "dataset_size", "drop_last", "remainder"):
            if key in state and state[key] != mine[key]:
                raise ValueError("cannot resume exactly: state has %s=%r, this loader %r"
                                 % (key, state[key], mine[key]))
        # States from before fingerprints (or of kinds without one) skip this.
        if state.get("dataset_fingerprint") and mine["dataset_fingerprint"] \
                and state["dataset_fingerprint"] != mine["dataset_fingerprint"]:
            raise ValueError("cannot resume exactly: the state is of another dataset (same size, "
                             "other samples: dataset_fingerprint %r, this loader's %r)"
                             % (state["dataset_fingerprint"], mine["dataset_fingerprint"]))
        # A state saved before shuffle modes existed was a global shuffle;
        # the buffer only shapes the order in shards mode.
        keys = ("shuffle_mode", "shuffle_buffer") if mine["shuffle_mode"] == "shards" \
            else ("shuffle_mode",)
        if self._is_stream and "shuffle_buffer" not in keys:  # a stream's order depends on it
            keys = keys + ("shuffle_buffer",)
        for key in keys:
            if state.get(key, "global" if key == "shuffle_mode" else None) != mine[key]:
                raise ValueError("cannot resume exactly: state has %s=%r, this loader %r"
                                 % (key, state.get(key), mine[key]))
        if state.get("stream_state") and "stream_state" not in mine:
            raise ValueError("cannot resume: the state is a Kafka stream's position, this "
                             "loader reads %r" % self.dataset.path)
        epoch = _uint("epoch", state["epoch"], 0, 2 ** 64 - 1)
        consumed = _uint("batches_consumed", state["batches_consumed"], 0, 2 ** 64 - 1)
        if self._is_stream:
            resume = self._stream_resume(state, mine, consumed)
        else:
            resume = self._elastic_resume(state, mine, consumed)
        self._epoch = epoch
        self._resume = (epoch,) + resume
        self._consumed = resume[0]
        self._pending_position = None if self._is_stream else self._resume_position()
        self._run_at = resume[1]
        self._active = False
        self._supersede("load_state_dict()")
        # The saved epoch runs next, from where it stopped; a state saved
        # after its epoch's last batch means the next iteration starts the
        # following epoch (as the saving loop's next iteration would have),
        # unless set_epoch chooses otherwise.
        self._epoch_chosen = self._is_stream or self._pending_position < len(self.dataset)

    def _stream_resume(self, state: Dict[str, Any], mine: Dict[str, Any],
                       consumed: int) -> Tuple[int, Optional[int]]:
        # A stream's ranks read their own streams: no global order to
        # re-split, so only the saving world size and batch size resume.
        for key in ("batch_size", "world_size"):
            if key in state and state[key] != mine[key]:
                raise ValueError("cannot resume a stream exactly: state has %s=%r, this loader "
                                 "%r (a stream resumes only at the world size and batch size "
                                 "it was saved at)" % (key, state[key], mine[key]))
        if state.get("stream_state"):
            import base64
            import binascii
            try:
                raw = base64.b64decode(state["stream_state"], validate=True)
            except (binascii.Error, TypeError, ValueError) as e:
                raise ValueError("stream_state is not base64: %s" % e) from None
            self._core.set_stream_state(raw)
        return consumed, None

    def _elastic_resume(self, state: Dict[str, Any], mine: Dict[str, Any],
                        consumed: int) -> Tuple[int, Optional[int]]:
        """(start_batch, position) for the next run of the saved epoch."""
        n = len(self.dataset)
        if state.get("position") is not None:
            position = _uint("position", state["position"], 0, n)
        elif state.get("format") == _STATE_FORMAT_AT:
            raise ValueError("a %s state needs its position" % _STATE_FORMAT_AT)
        else:
            # A state from before positions were saved: always a whole-epoch
            # run, whose ranks had each consumed `consumed` batches.
            w, b = state.get("world_size"), state.get("batch_size")
            if not isinstance(w, int) or not isinstance(b, int) or w < 1 or b < 1:
                raise ValueError("state has no position and no usable world_size/batch_size")
            whole = state.get("num_batches")
            position = n if whole is not None and consumed >= whole else min(consumed * b * w, n)
        per_step = self.batch_size * self.world_size
        if position >= n:
            return len(self), None  # the epoch is complete
        if position % per_step == 0 and state.get("world_size") == self.world_size \
                and state.get("batch_size") == self.batch_size:
            return position // per_step, None  # whole batches of the same split
        if self.shuffle_mode == "shards" and self.shuffle:
            raise ValueError(
                "cannot resume a shuffle_mode='shards' epoch on another world size or batch size "
                "(state has world_size=%r, batch_size=%r; this loader %r, %r): each rank's order "
                "passes its own shuffle buffer, so the samples consumed are not a prefix of one "
                "sequence. Resume with the saved world_size and batch_size, or use "
                "shuffle_mode='global'" % (state.get("world_size"), state.get("batch_size"),
                                           self.world_size, self.batch_size))
        return 0, position

    # ------------------------------------------------------------------
    # Introspection and shutdown

    def stats(self) -> Dict[str, Union[int, float]]:
        """The pipeline's counters since the loader was created: images_per_sec,
        mb_per_sec, bytes_read, per-stage items/bytes/busy seconds (read_*,
        decode_*, transform_*; busy time summed over workers), wait_s and
        wait_fraction (time the consumer spent blocked), queue_fill_avg (ready
        batches found per next()), batches, samples, corrupt (samples skipped or
        failed for bad content), io_retries (reads retried after an I/O error), dct_scaled,
        workers, wall_s, queue_capacity, read latency percentiles
        (read_lat_p50_ms, _p90_, _p99_, _max_), copied_batches (see
        hold_policy), held_batches (batches alive zero-copy now) and the decoded
        cache's cache_hits, cache_misses, cache_bytes, cache_entries; the block
        cache tier's (cache_dir / cache_ram_bytes, since the dataset was opened)
        tier_ram_hits, tier_disk_hits, tier_fetches, tier_fetched_bytes (read
        from the origin), tier_ram_evictions, tier_disk_evictions, tier_corrupt,
        tier_fallbacks, tier_ram_bytes, tier_ram_budget.

        The rates above are lifetime averages: a model build before the
        first batch, an evaluation or a checkpoint dilutes them.  While
        training, read the recent figures instead: window_images_per_sec
        and window_wait_fraction over the last window_s seconds (10 s, from
        the first batch asked for on), with window_batches and
        window_samples handed over in it; per batch, last_wait_s (the wait
        for the last batch, in next()) and last_step_s (time between the
        last two batches: one step of the loop, its wait included).  All
        kept by the library under the lock next() already takes, without
        allocating."""
        return self._core.stats()

    def _tb_flush(self) -> None:
        """tensorboard=writer: write the pending snapshot's scalars (the ones
        the native event file gets, computed by the library)."""
        pending, self._tb_pending = self._tb_pending, None
        if pending is not None:
            step, scalars = pending
            for tag, value in scalars:
                self._tb_writer.add_scalar(tag, value, global_step=step)

    def rank_report(self, writer: Any = None) -> Dict[str, Any]:
        """Each rank's wait, gathered: call it on every rank at the end of an
        epoch (a collective when torch.distributed is initialised; without it
        the report covers this process alone).  Each rank contributes four
        floats from :meth:`stats` (wait_s, wait_fraction, window_wait_fraction,
        window_images_per_sec) through one ``all_gather`` on the default
        process group: no other coordination.  Returns, on every rank, a dict
        with those lists indexed by rank, ``max_wait_s``, ``min_wait_s``,
        ``spread_wait_s`` (max - min), ``slowest_rank`` (the rank that waited
        longest), ``max_wait_fraction`` and ``spread_wait_fraction``.  Rank 0
        writes chute/ranks/max_wait_s, chute/ranks/spread_wait_s,
        chute/ranks/max_wait_pct, chute/ranks/spread_wait_pct and
        chute/ranks/slowest_rank at step = batches handed over to ``writer``,
        else to the SummaryWriter or the log directory given as
        ``tensorboard=``."""
        import torch  # the report's transport is torch.distributed
        s = self._core.stats()
        mine = torch.tensor([s["wait_s"], s["wait_fraction"], s["window_wait_fraction"],
                             s["window_images_per_sec"]], dtype=torch.float64)
        dist = getattr(torch, "distributed", None)
        rank, world = 0, 1
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
            if dist.get_backend() == "nccl":  # NCCL gathers device tensors only
                mine = mine.to("cuda")
            parts = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(parts, mine)
            rows = [p.cpu().tolist() for p in parts]
        else:
            rows = [mine.tolist()]
        wait_s = [r[0] for r in rows]
        frac = [r[1] for r in rows]
        rep = {"rank": rank, "world_size": world, "wait_s": wait_s, "wait_fraction": frac,
               "window_wait_fraction": [r[2] for r in rows],
               "window_images_per_sec": [r[3] for r in rows],
               "max_wait_s": max(wait_s), "min_wait_s": min(wait_s),
               "spread_wait_s": max(wait_s) - min(wait_s),
               "slowest_rank": max(range(world), key=lambda i: wait_s[i]),
               "max_wait_fraction": max(frac), "spread_wait_fraction": max(frac) - min(frac)}
        w = writer if writer is not None else self._tb_writer
        if rank == 0:
            step = int(s["batches"])
            for tag, v in (("max_wait_s", rep["max_wait_s"]),
                           ("spread_wait_s", rep["spread_wait_s"]),
                           ("max_wait_pct", 100.0 * rep["max_wait_fraction"]),
                           ("spread_wait_pct", 100.0 * rep["spread_wait_fraction"]),
                           ("slowest_rank", rep["slowest_rank"])):
                if w is not None:
                    w.add_scalar("chute/ranks/" + tag, v, global_step=step)
                else:  # tensorboard=DIR: into the library's event file (if any)
                    self._core.tb_scalar("chute/ranks/" + tag, float(v), step)
        return rep

    def close(self) -> None:
        """Stop the workers and free the ring.  Tensors still alive keep their
        batch's memory valid; it is freed with the last of them."""
        if getattr(self, "_tb_pending", None) is not None:
            self._tb_flush()
        if self._core is not None:
            if not self._core.closed:
                self._report_skips()
            self._core.close()
        self._active = False

    @property
    def closed(self) -> bool:
        return self._core is None or bool(self._core.closed)

    def __reduce__(self) -> Any:
        # What a torch DataLoader with workers does to its dataset under
        # spawn/forkserver: say why that cannot work and what to do.
        raise TypeError("a chute.Loader cannot be pickled (it owns threads and a batch ring): "
                        "it cannot be sent to torch DataLoader workers or other processes. "
                        "Iterate the chute.Loader itself (its `workers` threads decode in "
                        "parallel), or create a Loader in each process")

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._core is None:
            return "chute.Loader(<not created>)"
        return ("chute.Loader(%r, batch_size=%d, transform=%r, size=%d, dtype=%r, layout=%r, "
                "rank=%d, world_size=%d, batches=%d%s)"
                % (self.dataset.path, self.batch_size, self.transform, self.size, self.dtype,
                   self.layout, self.rank, self.world_size,
                   (0 if self._is_stream else len(self)) if not self.closed else 0,
                   ", closed" if self.closed else ""))


class _EpochIterator:
    """One epoch's iterator; stops when the epoch ends, raises RuntimeError
    once another run has superseded it.

    A Loader has one pipeline, so it runs one epoch at a time: a second
    iter(loader) (or set_epoch / load_state_dict to another epoch) while
    this one is open takes the pipeline over.  Independent iterators would
    need a pipeline (threads, batch ring) each; ending this one with a
    silent StopIteration would lose the rest of its epoch without a word
    (issue 22.3), so it raises instead."""

    __slots__ = ("_loader", "_gen", "_epoch", "_done", "_left")

    def __init__(self, loader: Loader, gen: int, epoch: int) -> None:
        self._loader = loader
        self._gen = gen
        self._epoch = epoch
        self._done = False
        # Batches of the epoch not yet delivered (None for a stream): an
        # iterator that had delivered them all lost nothing when superseded.
        self._left = (None if loader._is_stream
                      else max(0, int(loader._core.run_batches) - loader._consumed))

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> Tuple[Any, ...]:
        ld = self._loader
        if self._done:
            raise StopIteration
        if ld._generation != self._gen:
            if self._left == 0:
                self._done = True
                raise StopIteration
            raise RuntimeError(
                "this chute.Loader iterator (epoch %d) was superseded by %s: a Loader runs "
                "one epoch at a time, so the rest of this epoch is gone. Finish (or break out "
                "of) one loop before starting another, or use a second chute.Loader for a "
                "validation/peek batch" % (self._epoch, ld._superseded_by))
        if not ld._active:
            self._done = True
            raise StopIteration
        b = ld.next_batch()
        if b is None:
            self._done = True
            raise StopIteration
        if self._left is not None:
            self._left -= 1
        return ld._convert(b)

    def __len__(self) -> int:
        ld = self._loader
        if ld._is_stream:
            len(ld)  # TypeError
        return (max(0, int(ld._core.run_batches) - ld._consumed)
                if ld._generation == self._gen else 0)


def pack(
    root: PathLike,
    out_dir: PathLike,
    shard_size: Optional[int] = None,
    threads: Optional[int] = None,
    strict: bool = False,
    *,
    validate: bool = True,
    align: Optional[int] = None,
    max_pixels: Optional[int] = None,
    progress: Optional[Callable[[Dict[str, Any]], Any]] = None,
    max_sample_bytes: Optional[int] = None,
    wait: bool = True,
    max_side: Optional[int] = None,
    quality: Optional[int] = None,
    raw: bool = False,
) -> Dict[str, Any]:
    """Pack the ImageFolder tree at ``root`` into a shard directory ``out_dir``.

    shard_size: target bytes per shard (default 256 MiB).
    threads: validating threads (default: :func:`chute.default_workers`).
    strict: fail on the first undecodable file instead of leaving it out.
    validate: decode-check every file (default) or only sniff its type.
    align: record alignment in bytes, a power of two (default 4096).
    max_pixels: validation limit per image (default 64 Mpx).
    progress: called about every 0.1 s with a dict (files_done, files_total,
        bytes_done, bytes_total, skipped, shards_done, seconds); return True
        to cancel (raises chute.CancelledError).  Ctrl-C also cancels.

    max_sample_bytes: skip files larger than this (default 64 MiB, the
        loader's default limit; max_pixels' default is the loader's too).
    wait: if another process is packing into ``out_dir``, wait for it
        (default; Ctrl-C stops waiting) or raise chute.ChuteError at once.
        After waiting, a complete dataset of the same tree is reported with
        already_packed=True; another tree's dataset is not overwritten.
    max_side: resize images whose shorter side is over this to it, once,
        with Pillow's LANCZOS, and store them as JPEG (``quality``, default
        90); smaller images are stored as they are.
    raw: store decoded RGB8 pixels (CHRAW records), after max_side's resize.

    Returns a dict: files, bytes, skipped, shards, classes, seconds,
    skipped_files (a list of (path, reason)), skipped_over_limit (of
    skipped: over max_sample_bytes/max_pixels), reads_retried and
    already_packed.  An I/O error reading a file raises, never skips.  The
    manifest is written last, so an interrupted pack never leaves a
    directory that opens as a dataset.
    """
    return _chute.pack(
        os.fspath(root), os.fspath(out_dir),
        shard_size=0 if shard_size is None else _uint("shard_size", shard_size, 1, 2 ** 63),
        threads=0 if threads is None else _uint("threads", threads, 1, _chute.PACK_MAX_THREADS),
        strict=bool(strict), validate=bool(validate),
        align=0 if align is None else _uint("align", align, 1, 1 << 30),
        max_pixels=0 if max_pixels is None else _uint("max_pixels", max_pixels, 1, 2 ** 63),
        progress=progress,
        max_sample_bytes=0 if max_sample_bytes is None else _uint("max_sample_bytes",
                                                                  max_sample_bytes, 1, 2 ** 32 - 1),
        wait=bool(wait),
        max_side=0 if max_side is None else _uint("max_side", max_side, 1, 65500),
        quality=0 if quality is None else _uint("quality", quality, 1, 100),
        raw=bool(raw),
    )

