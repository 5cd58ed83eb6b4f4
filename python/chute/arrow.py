"""Arrow tables and Parquet files as chute datasets.

Why this module: libchute takes Arrow data through the Arrow C Stream
Interface (``chute_dataset_open_arrow``), so any producer that speaks the
PyCapsule protocol -- a ``pyarrow.Table`` or ``RecordBatchReader``
(pyarrow >= 14), Polars, DuckDB -- hands its record batches over without a
copy; the library holds those batches.  Parquet needs a reader, and that
is pyarrow's, but a Parquet dataset may be larger than memory, so Parquet
files go through the library's units mode
(``chute_dataset_open_arrow_units``): at open only the footers (row-group
row counts and sizes) and the label column are read; the library calls
back (from its worker threads; the callback takes the GIL, and pyarrow
drops it while it reads and decompresses) to read one row group when a
sample in it is first needed, keeps at most ``max_resident`` row groups
(from ``parquet_memory_bytes`` over the largest row group's uncompressed
size), and releases the least recently used one.  Each row group is a
shuffle unit: ``shuffle="shards"`` (row-group order permuted per epoch,
plus the seeded shuffle buffer) keeps a few row groups live at a time;
``shuffle=True`` permutes all rows and re-reads row groups when they do
not all fit, which is correct but slow, and warns.  Null cells take the
per-column defaults of ``schema="NAME[:TYPE]=VALUE,..."`` (CSV's option
shape); a null without one fails naming the column, file, row group and
row.  pyarrow is imported only here and only when needed.
"""
import atexit
import os
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

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


_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()


def track(loader: Any) -> None:
    """Close loader at interpreter exit if it is still open: its workers
    call back into Python to read row groups, which they cannot do once
    the interpreter has begun to finalize (they would wait forever for the
    GIL, and so would the join of the loader's threads)."""
    if not _LIVE:
        atexit.register(_close_live)
    _LIVE.add(loader)


def _close_live() -> None:
    for ld in list(_LIVE):
        try:
            ld.close()
        except Exception:  # exiting anyway; a close error must not hide the real one
            pass


PARQUET_MEMORY_BYTES = 1 << 30
"""Default bound on the decoded row groups a Parquet dataset holds at once."""


def _defaults(spec: Optional[str]) -> Dict[str, str]:
    """{name: default text} of a ``schema="NAME[:TYPE]=VALUE,..."`` string
    (the library checks it in full; this is for the label column, which is
    read here)."""
    out: Dict[str, str] = {}
    for part in (spec or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.split(":", 1)[0].strip()] = v
    return out


def _fixed_bytes(pa: Any, ty: Any) -> int:
    """Bytes of one value of a fixed-width Arrow type (its validity bit
    rounded up to a byte), 0 for variable-width ones."""
    if pa.types.is_fixed_size_list(ty):
        return ty.list_size * _fixed_bytes(pa, ty.value_type)
    if pa.types.is_struct(ty):
        return sum(_fixed_bytes(pa, ty.field(k).type) for k in range(ty.num_fields))
    try:
        return max(1, ty.bit_width // 8) + 1
    except ValueError:  # not fixed width
        return 0


class _RowGroups:
    """load(u): row group u as one RecordBatch; called by the library from
    its worker threads.  Each call opens its own ParquetFile over the
    footer parsed at open (a ParquetFile is not shared between threads)."""

    def __init__(self, units: List[Tuple[str, int]], metas: Dict[str, Any], schema: Any,
                 columns: Optional[Sequence[str]]) -> None:
        self.units, self.metas, self.schema, self.columns = units, metas, schema, columns

    def __call__(self, u: int) -> Any:
        import pyarrow.parquet as pq
        f, g = self.units[u]
        try:
            t = pq.ParquetFile(f, metadata=self.metas[f]).read_row_group(g, columns=self.columns)
        except ValueError as e:  # pyarrow's ArrowInvalid: damaged data
            raise ValueError("%s: row group %d: %s" % (f, g, e)) from e
        except Exception as e:
            raise OSError("%s: row group %d: %s" % (f, g, e)) from e
        if not t.schema.equals(self.schema, check_metadata=False):
            raise ValueError("%s: row group %d: schema %s, want %s" % (f, g, t.schema,
                                                                       self.schema))
        batches = t.combine_chunks().to_batches()
        if len(batches) != 1:
            raise ValueError("%s: row group %d: %d batches after combine_chunks"
                             % (f, g, len(batches)))
        return batches[0]


# The label column when label_key does not name one: the first of these
# names (Hugging Face's datasets use "label"; others "labels", "target").
LABEL_NAMES = ("label", "labels", "target", "targets", "class")


def _label_column(schema: Any, label_key: Optional[str], f: str) -> Optional[str]:
    """The label column's name, None for label_key "" (no labels); a
    missing one is an error naming the columns, never labels of 0."""
    if label_key == "":
        return None
    if label_key is not None:
        if label_key not in schema.names:
            raise ValueError("%s: no column %s (label_key); the columns are %s"
                             % (f, label_key, ", ".join(schema.names)))
        return label_key
    for n in LABEL_NAMES:
        if n in schema.names:
            return n
    raise _chute.FormatError(
        "%s: no label column: a column named %s is the label, and the columns are %s; name "
        "one with label_key, or set label_key to \"\" for rows without labels"
        % (f, ", ".join(LABEL_NAMES), ", ".join("%s (%s)" % (fl.name, fl.type) for fl in schema)))


def _label_values(pa: Any, np: Any, cols: List[Any], name: str, files: Sequence[str]) -> Any:
    """int64 labels of the label column's chunks, one per file: integers
    and booleans as they are; floats that are whole numbers as those
    numbers (else an error); dictionary-encoded (pandas category) columns
    as their codes in the first file's dictionary order; strings numbered
    in sorted order, as ImageFolder numbers class directories."""
    ty = cols[0].type
    if pa.types.is_integer(ty) or pa.types.is_boolean(ty):
        return np.concatenate([np.asarray(c.cast(pa.int64()).to_numpy(zero_copy_only=False),
                                          dtype=np.int64) for c in cols])
    if pa.types.is_floating(ty):
        v = np.concatenate([np.asarray(c.to_numpy(zero_copy_only=False), dtype=np.float64)
                            for c in cols])
        bad = np.flatnonzero(~np.isfinite(v) | (v != np.round(v)))
        if bad.size:
            raise ValueError("%s: label column %s (%s): row %d holds %r, not a whole number; "
                             "labels must be class indices" % (files[0], name, ty, bad[0],
                                                               float(v[bad[0]])))
        return v.astype(np.int64)
    if pa.types.is_dictionary(ty):
        first = cols[0].combine_chunks() if hasattr(cols[0], "combine_chunks") else cols[0]
        cats = first.dictionary.to_pylist()
        index = {c: k for k, c in enumerate(cats)}
        out = []
        for f, c in zip(files, cols):
            vals = c.cast(ty.value_type).to_pylist()
            miss = [x for x in vals if x not in index]
            if miss:
                raise ValueError("%s: label column %s: category %r is not in %s's categories"
                                 % (f, name, miss[0], files[0]))
            out.append(np.fromiter((index[x] for x in vals), np.int64, len(vals)))
        return np.concatenate(out)
    if pa.types.is_string(ty) or pa.types.is_large_string(ty):
        vals = [x for c in cols for x in c.to_pylist()]
        index = {c: k for k, c in enumerate(sorted(set(vals)))}
        return np.fromiter((index[x] for x in vals), np.int64, len(vals))
    raise ValueError("%s: label column %s has type %s: labels must be integers, whole-number "
                     "floats, strings or categories" % (files[0], name, ty))


def parquet_dataset(files: Sequence[str], *, image_key: Optional[str] = None,
                    label_key: Optional[str] = None, label_offset: int = 0,
                    read_delay_us: int = 0, columns: Optional[Sequence[str]] = None,
                    schema: Optional[str] = None, memory_bytes: Optional[int] = None,
                    shuffle: Any = False, name: str = "") -> Any:
    """A units-mode ``_chute.Dataset`` over Parquet files: one unit per
    non-empty row group, loaded on demand, at most memory_bytes of decoded
    row groups (by the footers' uncompressed sizes; at least 2) held."""
    import numpy as np
    pa = _pyarrow()
    import pyarrow.parquet as pq

    def open_file(f: str) -> Any:
        try:
            return pq.ParquetFile(f)
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
            raise OSError("%s: not a readable Parquet file: %s" % (f, e)) from e

    want = None
    units: List[Tuple[str, int]] = []
    rows: List[int] = []
    names: List[str] = []
    metas: Dict[str, Any] = {}
    biggest = 1
    fixed = 0
    labels = []
    lab_col = None
    dflt = _defaults(schema)
    for f in files:
        pf = open_file(f)
        got = pf.schema_arrow if columns is None else pa.schema(
            [pf.schema_arrow.field(c) for c in columns])
        if want is None:
            want = got
            lab_col = _label_column(want, label_key, f)
            fixed = sum(_fixed_bytes(pa, fl.type) for fl in want)
        elif not got.equals(want, check_metadata=False):
            raise ValueError("%s: its schema differs from %s's:\n%s\nvs\n%s"
                             % (f, files[0], got, want))
        md = pf.metadata
        metas[f] = md
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            if rg.num_rows == 0:
                continue
            units.append((f, g))
            rows.append(rg.num_rows)
            names.append("%s row group %d" % (f, g))
            # decoded size: the fixed-width columns exactly (the footer's
            # sizes are of encoded pages: a run of equal values is a few
            # bytes there), plus the encoded size for variable-width ones
            biggest = max(biggest, rg.num_rows * fixed + rg.total_byte_size)
        if lab_col is not None:
            try:
                col = pf.read(columns=[lab_col]).column(0)
            except Exception as e:
                raise OSError("%s: cannot read column %s: %s" % (f, lab_col, e)) from e
            if col.null_count and lab_col not in dflt:
                first = int(np.flatnonzero(np.asarray(col.is_null()))[0])
                g, r = 0, first
                while g < md.num_row_groups and r >= md.row_group(g).num_rows:
                    r -= md.row_group(g).num_rows
                    g += 1
                raise _chute.CorruptDataError(
                    "%s row group %d row %d: column %s is null and has no default (give one "
                    "with schema=\"%s=VALUE\")" % (f, g, r, lab_col, lab_col))
            if col.null_count:
                col = col.fill_null(pa.scalar(int(dflt[lab_col]), col.type))
            labels.append(col)

    if not units:
        raise ValueError("%s: the Parquet files have no rows" % (name,))
    budget = PARQUET_MEMORY_BYTES if memory_bytes is None else int(memory_bytes)
    if budget <= 0:
        raise ValueError("parquet_memory_bytes must be positive")
    max_resident = max(2, min(len(units), budget // biggest))
    if shuffle is True and max_resident < len(units):
        import warnings
        warnings.warn("chute: shuffle=True over %d Parquet row groups of which %d fit "
                      "parquet_memory_bytes re-reads row groups; shuffle='shards' reads each "
                      "once per epoch" % (len(units), max_resident), stacklevel=3)
    assert want is not None
    lab = (_label_values(pa, np, labels, lab_col, files).tobytes()
           if labels and lab_col is not None and len(labels) == len(files) else None)
    return _chute._dataset_from_arrow_units(
        want.__arrow_c_schema__(), np.asarray(rows, dtype=np.uint64).tobytes(), lab,
        _RowGroups(units, metas, want, columns), max_resident=max_resident, unit_names=names,
        image_key=image_key, label_key=label_key if lab_col is None else lab_col, label_offset=int(label_offset),
        read_delay_us=int(read_delay_us), name=name, null_defaults=schema)


def units_stats(ds: Any) -> Tuple[int, int, int]:
    """(loads, peak resident, resident) row groups of a Parquet dataset."""
    return _chute._arrow_units_stats(ds)


def dataset(source: Any, *, image_key: Optional[str] = None, label_key: Optional[str] = None,
            label_offset: int = 0, read_delay_us: int = 0,
            columns: Optional[Sequence[str]] = None, schema: Optional[str] = None,
            parquet_memory_bytes: Optional[int] = None, shuffle: Any = False) -> Any:
    """A ``_chute.Dataset`` over an Arrow producer (anything with
    ``__arrow_c_stream__``; its batches are held) or a Parquet file or
    directory (row groups loaded on demand, see :func:`parquet_dataset`)."""
    if hasattr(source, "__arrow_c_stream__"):
        return _chute._dataset_from_arrow(source.__arrow_c_stream__(), image_key=image_key,
                                          label_key=label_key, label_offset=int(label_offset),
                                          read_delay_us=int(read_delay_us),
                                          name="<arrow stream>", schema=schema)
    files = parquet_files(source)
    if not files:
        raise ValueError("%s: no .parquet files" % (source,))
    return parquet_dataset(files, image_key=image_key, label_key=label_key,
                           label_offset=label_offset, read_delay_us=read_delay_us,
                           columns=columns, schema=schema, memory_bytes=parquet_memory_bytes,
                           shuffle=shuffle, name=os.fspath(source))
