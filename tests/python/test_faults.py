"""Faults the loader cannot fix, seen from Python: I/O errors (injected with
the Dataset's test-only inject_fail_* options) are retried and then raised,
never replaced by another sample; skipped bad content is reported once per
epoch with a count; batch arrays are 64-byte aligned; a Loader used in a
fork() child raises instead of hanging; the default worker count follows
the CPUs this process may use."""
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

import chute

EIO, ENOMEM = -3, -2


def _epoch(ld):
    """Every (index, label, image bytes) of one epoch, in order."""
    out = []
    for b in iter(ld.next_batch, None):
        imgs = bytes(memoryview(b.images).cast("B"))
        per = len(imgs) // b.count
        for k, (i, y) in enumerate(zip(b.indices.tolist(), b.labels.tolist())):
            out.append((i, y, imgs[k * per:(k + 1) * per]))
    return out


def _loader(source, **kw):
    args = dict(batch_size=8, size=16, dtype="uint8", workers=2, seed=3, drop_last=False,
                as_torch=False)
    args.update(kw)
    return chute.Loader(source, **args)


def test_transient_io_error_is_retried_not_skipped(tree):
    clean = _epoch(_loader(tree))
    ds = chute.Dataset(tree, inject_fail_sample=7, inject_fail_reads=2, inject_fail_status=EIO)
    ld = _loader(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error", chute.SkippedSamplesWarning)
        flaky = _epoch(ld)
    s = ld.stats()
    assert s["io_retries"] == 2 and s["corrupt"] == 0
    assert 7 in [i for i, _, _ in flaky]
    assert flaky == clean  # same samples, same pixels: nothing was substituted


@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_persistent_io_error_raises_naming_the_file(tree, policy):
    ds = chute.Dataset(tree, inject_fail_sample=4, inject_fail_reads=10 ** 6)
    ld = _loader(ds, on_corrupt=policy)
    with warnings.catch_warnings():
        warnings.simplefilter("error", chute.SkippedSamplesWarning)
        with pytest.raises(chute.ChuteIOError) as e:
            for _ in ld:
                pass
    assert ds.describe(4) in str(e.value) and e.value.status == "CHUTE_EIO"
    assert isinstance(e.value, OSError)
    s = ld.stats()
    assert s["io_retries"] == 3 and s["corrupt"] == 0


def test_out_of_memory_raises_at_once(tree):
    ds = chute.Dataset(tree, inject_fail_sample=0, inject_fail_reads=1, inject_fail_status=ENOMEM)
    ld = _loader(ds, shuffle=False)
    with pytest.raises(chute.OutOfMemoryError) as e:
        for _ in ld:
            pass
    assert ds.describe(0) in str(e.value)
    assert ld.stats()["io_retries"] == 0


def test_skips_warn_once_per_epoch_with_count(corrupt_tree):
    ld = _loader(corrupt_tree, on_corrupt="skip")
    for epoch in range(2):
        ld.set_epoch(epoch)
        before = ld.stats()["corrupt"]
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            n = sum(len(y) for _, y in ld)
        skipped = ld.stats()["corrupt"] - before
        assert n == 32 and skipped >= 2
        mine = [w for w in got if issubclass(w.category, chute.SkippedSamplesWarning)]
        assert len(mine) == 1, [str(w.message) for w in got]
        msg = str(mine[0].message)
        assert ("epoch %d: %d samples" % (epoch, skipped)) in msg, msg
        assert mine[0].filename == __file__  # points at the caller's loop
    # An epoch left before its end (every batch taken, but not the end)
    # reports when the next one starts.
    ld.set_epoch(5)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        it = iter(ld)
        for _ in range(len(ld)):
            next(it)
        ld.set_epoch(6)
        iter(ld)
    mine = [str(w.message) for w in got if issubclass(w.category, chute.SkippedSamplesWarning)]
    assert len(mine) == 1 and "epoch 5:" in mine[0], mine
    ld.close()


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
def test_batch_arrays_are_64_byte_aligned(tree, dtype):
    np = pytest.importorskip("numpy")
    # One zero-copy batch per loop, then (max_held=1, all kept) copied ones.
    ld = _loader(tree, dtype=dtype, size=5, batch_size=3, max_held=1, hold_policy="copy")
    kept = []
    for _ in range(4):
        b = ld.next_batch()
        kept.append(b)
        for a in (b.images, b.labels, b.indices):
            arr = np.asarray(a)
            assert arr.ctypes.data % 64 == 0 and arr.flags.aligned, (a, b.copied)
    assert kept[0].copied is False and any(b.copied for b in kept)
    assert np.asarray(kept[-1].labels).dtype == np.int64


def _wait(pid, limit=30.0):
    t0 = time.time()
    while time.time() - t0 < limit:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.mark.parametrize("hold", [False, True])
def test_fork_child_raises_instead_of_hanging(tree, hold):
    ld = _loader(tree, workers=2)
    it = iter(ld)
    kept = next(it) if hold else None  # a zero-copy batch alive across the fork
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            signal.alarm(20)
            try:
                next(iter(ld))
                code = 2
            except RuntimeError as e:
                if "fork" not in str(e):
                    code = 3
            try:
                ld.next_batch()
                code = 4
            except RuntimeError:
                pass
            ld.stats()                  # no lock a dead worker may hold
            del kept
            ld.close()                  # frees without joining threads that are not there
        except BaseException:
            code = 5
        os._exit(code)
    status = _wait(pid)
    assert status is not None, "child hung (killed after 30 s)"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    # The parent's loader is undisturbed.
    rest = sum(1 for _ in it)
    assert rest + (1 if hold else 0) == len(ld)
    del kept


def test_default_workers_follow_affinity(tree):
    if not hasattr(os, "sched_getaffinity") or not subprocess.run(
            ["sh", "-c", "command -v taskset"], capture_output=True).returncode == 0:
        pytest.skip("needs taskset")
    cpus = sorted(os.sched_getaffinity(0))
    code = textwrap.dedent("""
        import chute, sys
        ld = chute.Loader(sys.argv[1], batch_size=4, size=8, as_torch=False)
        n, why = chute.default_workers()
        print(ld.stats()["workers"], n, why, sep="|")
    """)
    env = dict(os.environ)
    env.pop("LOCAL_WORLD_SIZE", None)

    def run(cpulist, **extra):
        e = dict(env, **extra)
        p = subprocess.run(["taskset", "-c", cpulist, sys.executable, "-c", code, tree],
                           capture_output=True, text=True, env=e, timeout=60)
        assert p.returncode == 0, p.stderr
        workers, n, why = p.stdout.strip().split("|", 2)
        return int(workers), int(n), why

    w, n, why = run(str(cpus[0]))
    assert w == n == 1, (w, n, why)
    assert len(cpus) == 1 or "affinity" in why
    w, n, why = run(str(cpus[0]), LOCAL_WORLD_SIZE="2")
    assert w == 1, why  # never 0
    if len(cpus) >= 2:
        pair = "%d,%d" % (cpus[0], cpus[1])
        alone, _, _ = run(pair)
        w, n, why = run(pair, LOCAL_WORLD_SIZE="2")
        assert w == max(1, alone // 2) and "LOCAL_WORLD_SIZE=2" in why, (alone, w, why)


def _faultfs():
    """The LD_PRELOAD fault shim built by the C tests (tests/tools/faultfs.c)."""
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.environ.get("CHUTE_FAULTFS", ""),
             os.path.join(here, "..", "..", "build", "tests", "libchute_faultfs.so")]
    return next((c for c in cands if c and os.path.exists(c)), None)


def test_pack_fails_on_unreadable_file_instead_of_leaving_it_out(corrupt_tree, tmp_path):
    """pack leaves out files with bad content (the corrupt tree's two), but a
    file it cannot read is an I/O error: the pack fails naming it, rather
    than writing a dataset that silently lacks the file.  The read fails
    with EIO through the fault shim, in a child Python (LD_PRELOAD must be
    there from the start)."""
    import shutil
    import subprocess
    import sys
    shim = _faultfs()
    if not shim:
        pytest.skip("fault shim not built (cmake build of tests/tools/faultfs.c)")
    src = tmp_path / "tree"
    shutil.copytree(corrupt_tree, src)
    good = sorted((src / "class00").glob("*.jpg"))[0]
    shutil.copyfile(str(good), str(src / "class00" / "unreadable.jpg"))
    code = ("import sys, chute\n"
            "try:\n"
            "    chute.pack(sys.argv[1], sys.argv[2])\n"
            "except chute.ChuteIOError as e:\n"
            "    print('IOERROR', e); sys.exit(3)\n")
    env = dict(os.environ, LD_PRELOAD=shim, CHUTE_FAULT_PATH="/unreadable.jpg",
               CHUTE_FAULT_OP="read", CHUTE_FAULT_ERRNO="EIO",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "out")],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr[-2000:])
    assert b"unreadable.jpg" in p.stdout and b"Input/output error" in p.stdout, p.stdout
    with pytest.raises(chute.ChuteError):
        chute.Dataset(str(tmp_path / "out"))  # no manifest: not a dataset
    # Without the fault the same tree packs: only the two corrupt files are left out.
    res = chute.pack(str(src), str(tmp_path / "out"))
    assert res["skipped"] == 2 and res["files"] == 31
