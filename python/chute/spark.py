"""chute.spark.write: a Spark DataFrame of encoded images into one dataset.

How it works (docs/CLUSTER.md, "Converting at cluster scale"):

1. Each partition is written in its executor by :class:`chute.Writer`
   into a directory of its own task attempt,
   ``DST/_chute_temporary/JOB/pPPPPP-tTASKATTEMPTID/`` (Spark's task
   attempt id is unique in the application), as complete files: the
   Writer renames nothing before its last sample and aborts (removes
   everything) on an exception.  The task returns the names of its files.
2. The driver gets back, from ``collect()``, exactly one result per
   partition: the attempt Spark counted.  A failed attempt, a retried one
   or a speculative duplicate that lost is never among them.
3. The driver commits: it gives the reported files their final names in
   partition order (rename; on s3:// a server-side copy), writes one
   manifest for the chute format, removes ``DST/_chute_temporary/JOB/``
   (every attempt that was not reported goes with it), and opens the
   result through chute's reader to count it.

Nothing under a final name exists before step 3; a job that fails leaves
only ``_chute_temporary/`` (removed by the driver when it can), which no
reader lists as data.  pyspark is imported lazily; S3 commit uses
pyarrow.fs with the AWS_* environment chute itself reads.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence

TEMP_DIR = "_chute_temporary"


def _is_s3(path: str) -> bool:
    return path.startswith("s3://")


def _s3fs():
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


class _Store:
    """The few file operations the commit needs, local or s3://."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.s3 = _is_s3(root)
        self.fs = _s3fs() if self.s3 else None

    def _key(self, path: str) -> str:
        return path[len("s3://"):] if path.startswith("s3://") else path

    def join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts) if self.s3 else os.path.join(self.root, *parts)

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
        with open(path) as f:
            return f.read()

    def put_file(self, local: str, dst: str) -> None:
        if self.s3:
            with open(local, "rb") as f, self.fs.open_output_stream(self._key(dst)) as o:
                shutil.copyfileobj(f, o)
        else:
            os.replace(local, dst)

    def rmtree(self, path: str) -> None:
        if self.s3:  # every object under it, then any directory marker
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

    def fsync_dir(self) -> None:
        if not self.s3:
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _manifest_shards(text: str) -> List[tuple]:
    """[(name, samples, bytes)] of a version-1 chute manifest (docs/FORMAT.md)."""
    out = []
    for line in text.splitlines():
        f = line.split(" ")
        if f[0] == "shard":
            out.append((f[1], int(f[2]), int(f[3])))
    return out


def _final_names(fmt: str, parts: List[Dict[str, Any]], prefix: str) -> List[tuple]:
    """[(attempt dir, its file name, final name)] in partition order."""
    data = [(p["dir"], f) for p in parts for f in p["files"] if not f.endswith(".idx")]
    out = []
    for k, (d, f) in enumerate(data):
        if fmt == "chute":
            out.append((d, f, "shard-%05d.chute" % k))
        elif fmt == "wds":
            out.append((d, f, "shard-%06d.tar" % k))
        else:
            name = "%s-%05d-of-%05d" % (prefix, k, len(data))
            out.append((d, f, name))
            out.append((d, f + ".idx", name + ".idx"))
    return out


def _is_dataset_name(name: str) -> bool:
    import re
    return bool(name == "chute.manifest" or re.fullmatch(r"shard-\d+\.(chute|tar)", name) or
                re.fullmatch(r".+-\d+-of-\d+(\.idx)?", name))


def write(
    df: Any,
    dst: str,
    format: str = "chute",
    *,
    image_col: str = "image",
    label_col: str = "label",
    classes: Optional[Sequence[str]] = None,
    shard_size: Optional[int] = None,
    prefix: Optional[str] = None,
    label_offset: int = 0,
    on_damaged: str = "skip",
    overwrite: bool = False,
    on_partition: Optional[Callable[[int, int, Dict[str, Any]], None]] = None,
) -> Dict[str, Any]:
    """Write ``df`` (``image_col``: encoded image bytes, ``label_col``: int)
    into ``dst`` (a local/shared directory every executor and the driver
    see, or ``s3://bucket/prefix/``) as one dataset in ``format``
    (``"chute"``, ``"tfrecord"``, ``"wds"``), rows in partition order.

    ``classes``: class names (label k is ``classes[k]``).  The chute format
    stores them in every shard; without them it runs one aggregate over
    ``label_col`` first and names the classes "0".."max".  ``on_damaged``:
    ``"skip"`` (a row whose image chute refuses is left out and counted)
    or ``"fail"`` (it fails the task, and after Spark's retries the job).
    ``overwrite``: replace a dataset already at ``dst`` (refused
    otherwise).  ``on_partition(partition, attempt, result)``: called in
    the executor once a partition's files are complete, before the task
    reports them; an exception from it fails that task attempt.

    Returns ``dict(samples=, skipped=, files=[final names], partitions=)``.
    """
    if format not in ("chute", "tfrecord", "wds"):
        raise ValueError("format must be 'chute', 'tfrecord' or 'wds', not %r" % (format,))
    if on_damaged not in ("skip", "fail"):
        raise ValueError("on_damaged must be 'skip' or 'fail'")
    import chute
    store = _Store(dst)
    old = [n for n in store.listdir(store.root) if _is_dataset_name(n)]
    if old and not overwrite:
        raise chute.InvalidArgumentError(
            "%s: holds a dataset already (%d of its files, e.g. %r); it is replaced only with "
            "overwrite=True" % (dst, len(old), old[0]))
    if format == "chute" and classes is None:
        from pyspark.sql import functions as F
        top = df.agg(F.max(label_col)).collect()[0][0]
        classes = [str(k) for k in range(int(top) + 1)] if top is not None else ["0"]
    classes = None if classes is None else [str(c) for c in classes]
    prefix = prefix or "train"
    job = uuid.uuid4().hex[:16]
    tmp_root = store.join(TEMP_DIR, job)
    opts = dict(shard_size=shard_size, prefix=prefix, label_offset=label_offset,
                classes=classes)
    strict = on_damaged == "fail"
    hook = on_partition

    def task(pid: int, rows: Any):
        from pyspark import TaskContext
        import chute as C
        tc = TaskContext.get()
        attempt = tc.attemptNumber() if tc else 0
        tid = tc.taskAttemptId() if tc else 0
        adir = (posixpath.join(tmp_root, "p%05d-t%d" % (pid, tid)) if _is_s3(tmp_root)
                else os.path.join(tmp_root, "p%05d-t%d" % (pid, tid)))
        w = None
        skipped = 0
        try:
            for row in rows:
                if w is None:
                    w = C.Writer(adir, format, **opts)
                try:
                    w.write(row[image_col], row[label_col])
                except (C.CorruptDataError, C.FormatError, C.LimitExceededError,
                        C.UnsupportedError):
                    if strict:
                        raise
                    skipped += 1
            if w is None:
                res = {"samples": 0, "files": [], "bytes": 0}
            else:
                res = w.close()
        except BaseException:
            if w is not None:
                w.abort()
            raise
        out = {"partition": pid, "attempt": attempt, "dir": adir, "files": res["files"],
               "samples": res["samples"], "skipped": skipped, "shards": []}
        if format == "chute" and res["files"]:
            out["shards"] = _manifest_shards(_Store(adir).read_text(
                posixpath.join(adir, "chute.manifest") if _is_s3(adir)
                else os.path.join(adir, "chute.manifest")))
        if hook is not None:
            hook(pid, attempt, out)
        yield out

    try:
        parts = df.select(image_col, label_col).rdd.mapPartitionsWithIndex(task).collect()
        parts.sort(key=lambda p: p["partition"])
        if len(set(p["partition"] for p in parts)) != len(parts):
            raise RuntimeError("internal: a partition was reported twice")
        total = sum(p["samples"] for p in parts)
        if total == 0:
            raise chute.NotFoundError("%s: no sample to write (%d skipped as damaged)"
                                      % (dst, sum(p["skipped"] for p in parts)))
        # Commit.  The old dataset stops opening first (its manifest), then goes.
        if "chute.manifest" in old:
            store.delete(store.join("chute.manifest"))
        for n in old:
            if n != "chute.manifest":
                store.delete(store.join(n))
        moves = _final_names(format, [p for p in parts if p["files"]], prefix)
        for d, f, final in moves:
            src = posixpath.join(d, f) if store.s3 else os.path.join(d, f)
            store.move(src, store.join(final))
        finals = [final for _, _, final in moves]
        if format == "chute":
            shards = [s for p in parts for s in p["shards"]]
            with tempfile.TemporaryDirectory(prefix="chute-commit-") as t:
                chute.writer.write_manifest(t, [s[1] for s in shards], [s[2] for s in shards])
                store.put_file(os.path.join(t, "chute.manifest"), store.join("chute.manifest"))
        store.fsync_dir()
    finally:
        store.rmtree(tmp_root)
        if not store.listdir(store.join(TEMP_DIR)):
            store.rmtree(store.join(TEMP_DIR))
    ds = chute.Dataset(dst if not store.s3 else store.root + "/",
                       format=None if format == "chute" else format,
                       label_offset=-label_offset if format != "chute" else 0)
    if len(ds) != total:
        raise chute.CorruptDataError("%s: the committed dataset has %d samples, %d were written"
                                     % (dst, len(ds), total))
    return {"samples": total, "skipped": sum(p["skipped"] for p in parts), "files": finals,
            "partitions": len(parts)}
