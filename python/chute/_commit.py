"""The commit protocol chute.spark.write and chute.ray.write share.

One job writes one dataset into DST (a directory every worker and the
driver see, or ``s3://bucket/prefix/``):

1. Each task attempt writes its rows with its own :class:`chute.Writer`
   into a directory no other attempt uses,
   ``DST/_chute_temporary/JOB/pPPPPP-TAG/`` (:func:`attempt_dir`; TAG is
   unique per attempt: Spark's task attempt id, a random one on Ray), as
   complete files (:func:`write_part`).  A failing attempt aborts its
   Writer; one that is killed leaves its directory, which step 3 removes.
2. The engine tells the driver which attempt of each part it counted:
   exactly one per part (Spark's ``collect()``, Ray's ``write_returns``).
   A failed, retried or losing speculative attempt is never among them.
3. :func:`commit` gives the counted attempts' files their final names in
   part order (``rename``; on s3:// a server-side copy, then delete), the
   chute format's one manifest last; :func:`cleanup` then removes
   ``DST/_chute_temporary/JOB/`` with every attempt that was not counted.

Nothing carries a final name before step 3, and the chute format's
dataset does not open before its manifest (the last write).  WebDataset
keys are ``pPPPPP-NNNNNN`` (part, then the sample's position in the
part): unique across the dataset and the same in every attempt of a part.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Tuple

TEMP_DIR = "_chute_temporary"
"""Where attempts write, inside DST (no chute or peer reader lists it)."""

DAMAGED_NAMES = ("CorruptDataError", "FormatError", "LimitExceededError", "UnsupportedError")
"""What chute.Writer.write refuses a damaged image with (the writer goes on)."""


def is_s3(path: str) -> bool:
    return path.startswith("s3://")


def _s3fs() -> Any:
    from pyarrow import fs
    kw: Dict[str, Any] = {}
    ep = os.environ.get("AWS_ENDPOINT_URL")
    if ep:
        scheme, _, host = ep.partition("://")
        kw.update(endpoint_override=host or scheme, scheme=scheme if host else "https")
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        kw.update(access_key=os.environ["AWS_ACCESS_KEY_ID"],
                  secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", ""))
    kw["region"] = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return fs.S3FileSystem(**kw)


class Store:
    """The few file operations the commit needs, local or s3:// (pyarrow.fs
    with the AWS_* environment chute itself reads)."""

    def __init__(self, root: str) -> None:
        self.s3 = is_s3(root)
        self.root = root.rstrip("/") if self.s3 else os.path.abspath(root)
        self.fs = _s3fs() if self.s3 else None

    def _key(self, path: str) -> str:
        return path[len("s3://"):] if path.startswith("s3://") else path

    def join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts) if self.s3 else os.path.join(self.root, *parts)

    def sub(self, d: str, name: str) -> str:
        return posixpath.join(d, name) if self.s3 else os.path.join(d, name)

    def listdir(self, path: str) -> List[str]:
        if not self.s3:
            return sorted(os.listdir(path)) if os.path.isdir(path) else []
        from pyarrow import fs
        infos = self.fs.get_file_info(fs.FileSelector(self._key(path), allow_not_found=True))
        return sorted(posixpath.basename(i.path) for i in infos)

    def move(self, src: str, dst: str) -> None:
        if self.s3:
            self.fs.copy_file(self._key(src), self._key(dst))  # CopyObject: no bytes through here
            self.fs.delete_file(self._key(src))
        else:
            os.rename(src, dst)

    def read_text(self, path: str) -> str:
        if self.s3:
            with self.fs.open_input_stream(self._key(path)) as f:
                return f.read().decode()
        with open(path, encoding="utf-8") as f:
            return f.read()

    def rmtree(self, path: str) -> None:
        if self.s3:  # every object under it
            from pyarrow import fs
            sel = fs.FileSelector(self._key(path), allow_not_found=True, recursive=True)
            for i in self.fs.get_file_info(sel):
                if i.type == fs.FileType.File:
                    self.fs.delete_file(i.path)
            # (no delete_dir: S3 has no directories; on some servers pyarrow's
            # delete_dir took the parent prefix with it)
        else:
            shutil.rmtree(path, ignore_errors=True)

    def delete(self, path: str) -> None:
        if self.s3:
            self.fs.delete_file(self._key(path))
        else:
            os.unlink(path)

    def write_manifest(self, samples: List[int], sizes: List[int]) -> None:
        from .writer import write_manifest
        if not self.s3:
            write_manifest(self.root, samples, sizes)  # temporary name, fsync, rename, fsync
            return
        with tempfile.TemporaryDirectory(prefix="chute-commit-") as t:
            write_manifest(t, samples, sizes)
            with open(os.path.join(t, "chute.manifest"), "rb") as f, \
                    self.fs.open_output_stream(self._key(self.join("chute.manifest"))) as o:
                shutil.copyfileobj(f, o)

    def fsync_dir(self) -> None:
        if not self.s3:
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def job_dir(store: Store, job: str) -> str:
    return store.join(TEMP_DIR, job)


def attempt_dir(job_root: str, part: int, tag: str) -> str:
    """The directory of one attempt at part ``part`` (``tag``: unique per attempt)."""
    name = "p%05d-%s" % (part, tag)
    return posixpath.join(job_root, name) if is_s3(job_root) else os.path.join(job_root, name)


def key_prefix(part: int) -> str:
    """The WebDataset key prefix of part ``part``'s samples: keys are
    ``pPPPPP-NNNNNN`` dataset-wide, the same in every attempt of the part."""
    return "p%05d-" % part


def write_part(adir: str, format: str, part: int, samples: Iterable[Tuple[Any, int]],
               writer_kw: Dict[str, Any], on_damaged: str) -> Dict[str, Any]:
    """Runs in a task: every (image bytes, label) of one part through one
    chute.Writer into ``adir``.  A damaged image is skipped and counted
    (``on_damaged="skip"``) or fails the attempt.  Any exception aborts the
    Writer (a local ``adir`` is left empty) and propagates.  Returns
    ``dict(dir, files, samples, bytes, skipped)``; a part with no sample writes
    no file."""
    import chute
    damaged = tuple(getattr(chute, n) for n in DAMAGED_NAMES)
    kw = dict(writer_kw)
    if format == "wds":
        kw["key_prefix"] = key_prefix(part)
    w = None
    skipped = written = 0
    try:
        for data, label in samples:
            if w is None:
                w = chute.Writer(adir, format, **kw)
            try:
                w.write(data, label)
                written += 1
            except damaged:
                if on_damaged == "fail":
                    raise
                skipped += 1  # refused whole: nothing of it was written
        if written:
            info = w.close()
        else:  # no row, or every row refused: no files (a Writer needs one sample)
            if w is not None:
                w.abort()
            info = {"samples": 0, "files": [], "bytes": 0}
    except BaseException:
        if w is not None:
            w.abort()
        raise
    return {"dir": adir, "files": list(info["files"]), "samples": int(info["samples"]),
            "bytes": int(info["bytes"]), "skipped": skipped}


def _data_files(files: List[str], format: str) -> List[str]:
    """The data files of one attempt (a Writer's sorted names), in order."""
    ext = {"chute": ".chute", "wds": ".tar"}.get(format)
    if ext is None:  # tfrecord: PREFIX-00000-of-0000N, each with its .idx
        return [n for n in files if "." not in n]
    return [n for n in files if n.endswith(ext)]


def _manifest_shards(text: str) -> Dict[str, Tuple[int, int]]:
    """{name: (samples, bytes)} of a version-1 chute manifest (docs/FORMAT.md)."""
    out = {}
    for line in text.splitlines():
        f = line.split(" ")
        if f[0] == "shard":
            out[f[1]] = (int(f[2]), int(f[3]))
    return out


def dataset_name(name: str) -> bool:
    """Is ``name`` a file a commit gives its final name to?"""
    return bool(name == "chute.manifest" or re.fullmatch(r"shard-\d+\.(chute|tar)", name) or
                re.fullmatch(r".+-\d+-of-\d+(\.idx)?", name))


def commit(store: Store, format: str, parts: List[Dict[str, Any]],
           prefix: Optional[str]) -> Dict[str, Any]:
    """Step 3: ``parts`` (one counted attempt per part, in part order, as
    :func:`write_part` returned them) become one dataset in ``store.root``.
    Returns ``dict(files=[final names in order, the chute manifest not
    among them], samples=, bytes=)`` (``bytes``: encoded images)."""
    files = [(p, n) for p in parts for n in _data_files(p["files"], format)]
    shards: Dict[str, Dict[str, Tuple[int, int]]] = {}
    counts: List[int] = []
    sizes: List[int] = []
    out: List[str] = []
    for k, (p, name) in enumerate(files):
        d = p["dir"]
        if format == "chute":
            final = "shard-%05d.chute" % k
            if d not in shards:
                shards[d] = _manifest_shards(store.read_text(store.sub(d, "chute.manifest")))
            counts.append(shards[d][name][0])
            sizes.append(shards[d][name][1])
        elif format == "tfrecord":
            final = "%s-%05d-of-%05d" % (prefix or "train", k, len(files))
        else:
            final = "shard-%06d.tar" % k
        store.move(store.sub(d, name), store.join(final))
        out.append(final)
        for side in p["files"]:  # TFRecord's DALI .idx
            if side.startswith(name + "."):
                store.move(store.sub(d, side), store.join(final + side[len(name):]))
                out.append(final + side[len(name):])
    if format == "chute":
        store.write_manifest(counts, sizes)  # last: the dataset opens from here on
    store.fsync_dir()
    return {"files": out, "samples": sum(int(p["samples"]) for p in parts),
            "bytes": sum(int(p["bytes"]) for p in parts)}


def cleanup(store: Store, job: str) -> None:
    """Remove the job's attempts (counted ones are empty by now), and
    ``_chute_temporary`` itself when no other job writes there."""
    store.rmtree(job_dir(store, job))
    top = store.join(TEMP_DIR)
    if not store.listdir(top):
        store.rmtree(top)
