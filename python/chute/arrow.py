"""Arrow tables and Parquet files as chute datasets.

Why this module: libchute takes Arrow data through the Arrow C Stream
Interface (``chute_dataset_open_arrow``), so any producer that speaks the
PyCapsule protocol -- a ``pyarrow.Table`` or ``RecordBatchReader``
(pyarrow >= 14), Polars, DuckDB -- hands its record batches over without a
copy.  Parquet needs a reader, and that is pyarrow's: this module opens each
file, reads it row group by row group (pyarrow releases the GIL while it
reads and decompresses) and streams the batches to the library, which
keeps them (in memory: the dataset holds the decoded columns, so its size
is the table's) and reads samples straight out of their buffers.  Each
record batch is a shuffle unit (``shuffle="shards"``: row-group
granularity plus the seeded shuffle buffer); ``shuffle=True`` permutes all
rows.  pyarrow is imported only here and only when needed.
"""
import os
from typing import Any, List, Optional, Sequence

from . import _chute


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:
        raise ImportError("chute: Parquet and Arrow input need pyarrow >= 14 "
                          "(pip install pyarrow): %s" % e) from None
    return pyarrow


def parquet_files(path: "os.PathLike[str] | str") -> Optional[List[str]]:
    """The Parquet files at path: [path] for a ``.parquet`` file, the sorted
    ``*.parquet`` files of a directory that has any, else None."""
    p = os.fspath(path)
    if not isinstance(p, str) or "://" in p:
        return None
    if os.path.isfile(p):
        return [p] if p.endswith(".parquet") else None
    if os.path.isdir(p):
        names = sorted(n for n in os.listdir(p)
                       if n.endswith(".parquet") and not n.startswith(".")
                       and os.path.isfile(os.path.join(p, n)))
        return [os.path.join(p, n) for n in names] or None
    return None


def is_arrow_source(source: Any) -> bool:
    """Whether chute.Loader should read source through this module."""
    if hasattr(source, "__arrow_c_stream__"):
        return True
    if isinstance(source, (str, os.PathLike)):
        return parquet_files(source) is not None
    return False


def parquet_reader(files: Sequence[str], columns: Optional[Sequence[str]] = None) -> Any:
    """A pyarrow RecordBatchReader over files, row group by row group.  A
    file that cannot be read fails with its name and pyarrow's message."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    def open_file(f: str) -> Any:
        try:
            return pq.ParquetFile(f)
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
            raise OSError("%s: not a readable Parquet file: %s" % (f, e)) from e

    first = open_file(files[0])
    schema = first.schema_arrow
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])

    def batches() -> Any:
        for k, f in enumerate(files):
            pf = first if k == 0 else open_file(f)
            got = pf.schema_arrow if columns is None else pa.schema(
                [pf.schema_arrow.field(c) for c in columns])
            if not got.equals(schema):
                raise ValueError("%s: its schema differs from %s's:\n%s\nvs\n%s"
                                 % (f, files[0], got, schema))
            for g in range(pf.num_row_groups):
                try:
                    t = pf.read_row_group(g, columns=columns)
                except Exception as e:
                    raise OSError("%s: row group %d: %s" % (f, g, e)) from e
                for b in t.to_batches():
                    yield b

    return pa.RecordBatchReader.from_batches(schema, batches())


def dataset(source: Any, *, image_key: Optional[str] = None, label_key: Optional[str] = None,
            label_offset: int = 0, read_delay_us: int = 0,
            columns: Optional[Sequence[str]] = None) -> Any:
    """A ``_chute.Dataset`` over an Arrow producer (anything with
    ``__arrow_c_stream__``) or a Parquet file or directory."""
    name = "<arrow stream>"
    if hasattr(source, "__arrow_c_stream__"):
        stream = source
    else:
        files = parquet_files(source)
        if not files:
            raise ValueError("%s: no .parquet files" % (source,))
        stream = parquet_reader(files, columns)
        name = os.fspath(source)
    return _chute._dataset_from_arrow(stream.__arrow_c_stream__(), image_key=image_key,
                                      label_key=label_key, label_offset=int(label_offset),
                                      read_delay_us=int(read_delay_us), name=name)
