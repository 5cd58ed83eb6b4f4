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
reader lists as data.  pyspark is imported lazily.  The protocol (attempt
directories, commit, cleanup, the S3 store) is chute._commit's, shared
with chute.ray.write.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Dict, Optional, Sequence

from . import _commit
from ._commit import TEMP_DIR  # noqa: F401  (where attempts write, inside dst)

_Store = _commit.Store  # (tests open the bucket through it)


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
    store = _commit.Store(dst)
    old = [n for n in store.listdir(store.root) if _commit.dataset_name(n)]
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
    job_root = _commit.job_dir(store, job)
    opts = dict(shard_size=shard_size, prefix=prefix, label_offset=label_offset,
                classes=classes)
    hook = on_partition

    def task(pid: int, rows: Any):
        from pyspark import TaskContext
        tc = TaskContext.get()
        attempt = tc.attemptNumber() if tc else 0
        tid = tc.taskAttemptId() if tc else 0
        adir = _commit.attempt_dir(job_root, pid, "t%d" % tid)
        out = _commit.write_part(adir, format, pid,
                                 ((row[image_col], row[label_col]) for row in rows),
                                 opts, on_damaged)
        out.update(partition=pid, attempt=attempt)
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
        done = _commit.commit(store, format, parts, prefix)
    finally:
        _commit.cleanup(store, job)
    ds = chute.Dataset(dst if not store.s3 else store.root + "/",
                       format=None if format == "chute" else format,
                       label_offset=-label_offset if format != "chute" else 0)
    if len(ds) != total:
        raise chute.CorruptDataError("%s: the committed dataset has %d samples, %d were written"
                                     % (dst, len(ds), total))
    return {"samples": total, "skipped": sum(p["skipped"] for p in parts), "files": done["files"],
            "partitions": len(parts)}
