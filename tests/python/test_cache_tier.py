"""The node-local cache tier (cache_dir): batches through it are the batches
without it, the directory stays within cache_bytes, two processes can fill
one directory at once, and a damaged or deleted cache never fails a run.

The reference is always the same loader without cache_dir; the C tests
(tests/test_cache.c) count origin reads for "one download per block"."""
import hashlib
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import chute

KW = dict(batch_size=16, workers=2, seed=5, size=32, as_torch=False, return_indices=True)


def digest(source, **kw):
    ld = chute.Loader(source, **KW, **kw)
    out = [hashlib.sha256(b"".join(np.from_dlpack(a).tobytes() for a in b)).hexdigest()
           for b in ld]
    ld.close()
    return out


def blk_files(d):
    return [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".blk")]


@pytest.mark.parametrize("kind", ["tree", "shards"])
def test_batches_identical_and_cache_reused(kind, tree, shards, tmp_path):
    src = tree if kind == "tree" else shards
    ref = digest(src)
    cdir = tmp_path / "cache"
    assert digest(src, cache_dir=cdir, cache_block_bytes=1 << 18) == ref
    files = blk_files(str(cdir))
    assert files, "nothing was cached"
    # Every name is a hash: nothing from the dataset's paths shows.
    assert all(len(os.path.basename(f)) == 36 for f in files)
    # Second run (a restarted process) reads the same directory.
    assert digest(src, cache_dir=cdir, cache_block_bytes=1 << 18) == ref


def test_budget_respected(shards, tmp_path):
    ref = digest(shards)
    cdir = tmp_path / "cache"
    budget = 600 << 10
    total = sum(os.path.getsize(os.path.join(shards, n)) for n in os.listdir(shards))
    assert total > 2 * budget
    assert digest(shards, cache_dir=cdir, cache_bytes=budget, cache_block_bytes=1 << 16) == ref
    used = sum(os.path.getsize(f) for f in blk_files(str(cdir)))
    assert 0 < used <= budget


def test_corrupt_and_deleted_cache_still_reads(shards, tmp_path):
    ref = digest(shards)
    cdir = tmp_path / "cache"
    assert digest(shards, cache_dir=cdir, cache_block_bytes=1 << 16) == ref
    for f in blk_files(str(cdir))[::2]:
        with open(f, "r+b") as fh:
            fh.seek(-7, os.SEEK_END)
            b = fh.read(1)
            fh.seek(-7, os.SEEK_END)
            fh.write(bytes([b[0] ^ 0xFF]))
    assert digest(shards, cache_dir=cdir, cache_block_bytes=1 << 16) == ref
    shutil.rmtree(cdir)
    # Gone before open: recreated.  Gone mid-run is tests/test_cache.c.
    assert digest(shards, cache_dir=cdir, cache_block_bytes=1 << 16) == ref


CHILD = r"""
import hashlib, sys
import numpy as np
import chute
ld = chute.Loader(sys.argv[1], batch_size=16, workers=3, seed=5, size=32, as_torch=False,
                  return_indices=True, cache_dir=sys.argv[2], cache_block_bytes=1 << 16)
for b in ld:
    print(hashlib.sha256(b"".join(np.from_dlpack(a).tobytes() for a in b)).hexdigest())
"""


def test_two_processes_share_one_cache(shards, tmp_path):
    ref = digest(shards)
    cdir = str(tmp_path / "cache")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, shards, cdir], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.split() == ref
    names = os.listdir(cdir)
    assert not [n for n in names if ".tmp." in n], "temporary files left behind"
    assert blk_files(cdir)


def test_ram_tier_batches_identical_and_counted(shards):
    """cache_ram_bytes alone: batches equal the uncached run's; the origin
    is read once per file with the directory's bytes (os.stat); each
    sample of the second epoch is exactly one RAM hit."""
    files = [os.path.join(shards, n) for n in os.listdir(shards)]
    size = sum(os.path.getsize(f) for f in files)
    ref = digest(shards)
    ld = chute.Loader(shards, cache_ram_bytes=1 << 30, cache_block_bytes=1 << 30, readahead=0,
                      **KW)
    hits = []
    for epoch in range(2):
        ld.set_epoch(epoch)
        got, samples = [], 0
        for b in ld:
            got.append(hashlib.sha256(b"".join(np.from_dlpack(a).tobytes() for a in b)).hexdigest())
            samples += len(np.from_dlpack(b[2]))
        st = ld.stats()
        assert st["tier_fetches"] == len(files) and st["tier_fetched_bytes"] == size, st
        assert st["tier_ram_bytes"] == size and st["tier_ram_budget"] == 1 << 30, st
        hits.append(st["tier_ram_hits"])
        if epoch == 0:
            assert got == ref
    ld.close()
    assert hits[1] - hits[0] == samples > 0, (hits, samples)
    # Without a tier the counters are zero.
    ld = chute.Loader(shards, **KW)
    for _ in ld:
        pass
    st = ld.stats()
    ld.close()
    assert st["tier_fetches"] == 0 and st["tier_ram_hits"] == 0 and st["tier_ram_budget"] == 0
