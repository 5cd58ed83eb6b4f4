"""direct_io and coalesce_gap_bytes as chute.Loader keywords.

Both are rows of the dataset option table (src/common/dataset_options.def)
that only the CLI had; the Python keywords pass them to
chute_dataset_open_ex.  What is checked is their effect seen from outside
chute, never a value chute reports about itself:
  direct_io           the shard files' pages resident in the page cache
                      after an epoch (mincore(2) on a mapping, through
                      ctypes): O_DIRECT reads leave the records out of it,
                      ordinary reads bring them in; batches identical
  coalesce_gap_bytes  (tests/python/test_remote_loader.py) the GETs the
                      fault proxy forwards to SeaweedFS
and that out-of-range values are refused naming the option.
"""
import ctypes
import mmap
import os

import numpy as np
import pytest

import chute

PAGE = mmap.PAGESIZE


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.syscall.restype = ctypes.c_long
    return libc


def _resident(paths):
    """Fraction of the files' pages in the page cache: mincore(2) on a
    read-only shared mapping (mapping faults nothing in)."""
    libc = _libc()
    tot = res = 0
    for p in paths:
        n = os.path.getsize(p)
        if n == 0:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, n, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                pytest.skip("mmap failed: errno %d" % ctypes.get_errno())
            try:
                pages = (n + PAGE - 1) // PAGE
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(addr, n, vec) != 0:
                    pytest.skip("mincore failed: errno %d" % ctypes.get_errno())
                res += sum(v & 1 for v in vec)
                tot += pages
            finally:
                libc.munmap(addr, n)
        finally:
            os.close(fd)
    return res / tot if tot else 0.0


def _evict(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _io_uring_ok():
    """io_uring_setup(2) allowed here (not refused by the kernel or a
    seccomp filter)?  direct_io needs the io_uring engine."""
    libc = _libc()
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)  # __NR_io_uring_setup on x86-64 and arm64
    if fd < 0:
        return False
    os.close(fd)
    return True


def _epoch(src, **kw):
    ld = chute.Loader(src, batch_size=16, size=32, dtype="uint8", workers=1, seed=3,
                      return_indices=True, **kw)
    out = [(i.numpy().copy(), l.numpy().copy(), x.numpy().copy()) for i, l, x in ld]
    ld.close()
    return out


def test_direct_io_bypasses_the_page_cache(shards, monkeypatch):
    monkeypatch.delenv("CHUTE_READAHEAD_ENGINE", raising=False)
    files = [os.path.join(shards, f) for f in sorted(os.listdir(shards))
             if f.endswith(".chute")] or \
        [os.path.join(shards, f) for f in sorted(os.listdir(shards)) if f != "chute.manifest"]
    assert files
    if os.uname().machine not in ("x86_64", "aarch64") or not _io_uring_ok():
        pytest.skip("io_uring is refused here: direct_io falls back to ordinary reads")
    try:
        os.close(os.open(files[0], os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        pytest.skip("the filesystem refuses O_DIRECT: %s" % e)
    _evict(files)
    if _resident(files) > 0.05:
        pytest.skip("posix_fadvise(DONTNEED) does not drop these pages here")
    want = _epoch(shards, readahead=16)  # ordinary reads
    normal = _resident(files)
    _evict(files)
    got = _epoch(shards, readahead=16, direct_io=True)
    direct = _resident(files)
    assert len(got) == len(want) > 0
    for (gi, gl, gx), (wi, wl, wx) in zip(got, want):
        assert np.array_equal(gx, wx) and np.array_equal(gl, wl) and np.array_equal(gi, wi)
    # Ordinary reads cache (nearly) every page; O_DIRECT reads only the
    # headers and indexes and the few records a worker read itself before
    # the read-ahead claimed them.
    assert normal > 0.8, normal
    assert direct < 0.5 * normal, (direct, normal)


def test_direct_io_bounds(shards):
    with pytest.raises(ValueError, match="direct_io"):
        chute.Loader(shards, batch_size=16, size=32, direct_io=2)
    with pytest.raises(ValueError, match="coalesce_gap_bytes"):
        chute.Loader(shards, batch_size=16, size=32, coalesce_gap_bytes=(8 << 20) + 1)
    # in range, on a local dataset: accepted (the gap only matters for s3/http)
    ld = chute.Loader(shards, batch_size=16, size=32, coalesce_gap_bytes=4096, direct_io=0)
    ld.close()
