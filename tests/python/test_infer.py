"""chute.Infer, the inference session, from Python.

- its eval tensors equal the Loader's eval tensors for the same images, and
  torchvision's Resize + CenterCrop on PIL (uint8, within 1 level: the
  Loader's own bound in test_eval_options.py);
- bytes and paths both work; every id comes back once; ordered mode keeps
  submission order;
- a corrupt request comes back as its ChuteError, the others as arrays;
- a full queue raises BusyError, a closed session InvalidArgumentError, and
  poll() returns None once everything admitted was handed out;
- stats() has the latency histograms;
- worker_slice_us gives the workers (and only them) that scheduler slice, as
  the kernel reports each thread in /proc (Linux 6.12+; skips elsewhere).
"""
import glob
import os
import threading

import numpy as np
import pytest

import chute


def _files(tree, n):
    return sorted(glob.glob(os.path.join(str(tree), "*", "*")))[:n]


def _drain(inf, want, timeout=30.0):
    out = []
    while len(out) < want:
        got = inf.poll(timeout=timeout)
        assert got, "nothing came back within %s s (%d of %d)" % (timeout, len(out), want)
        out.extend(got)
    return out


def test_eval_equals_loader_and_torchvision(tree):
    ld = chute.Loader(tree, batch_size=400, size=48, transform="eval", dtype="uint8",
                      shuffle=False, as_torch=False, return_indices=True, workers=2)
    images, _, indices = next(iter(ld))
    images, indices = np.array(images, copy=True), np.array(indices, copy=True)
    expect = {int(i): images[k] for k, i in enumerate(indices)}
    ld.close()
    ds = chute.Dataset(tree)
    with chute.Infer(size=48, dtype="uint8", max_batch=4, workers=2, queue_capacity=1024) as inf:
        for i in range(len(ds)):
            inf.submit(ds.read(i) if i % 2 else _path(ds, tree, i), i)
        got = dict(_drain(inf, len(ds)))
    assert sorted(got) == list(range(len(ds)))
    for i, a in got.items():
        assert not isinstance(a, Exception), a
        np.testing.assert_array_equal(np.asarray(a), expect[i], err_msg="sample %d" % i)
    # torchvision on PIL, a few images, full-scale decode (DCT downscaling
    # is an approximation of PIL's, as in the Loader)
    tv = pytest.importorskip("torchvision")
    from PIL import Image
    import torchvision.transforms as TV
    tf = TV.Compose([TV.Resize(54), TV.CenterCrop(48)])
    tds = tv.datasets.ImageFolder(str(tree))
    picks = list(range(0, len(tds), 37))
    with chute.Infer(size=48, dtype="uint8", dct_scale=False, workers=2) as inf:
        for i in picks:
            inf.submit(tds.samples[i][0], i)
        full = dict(_drain(inf, len(picks)))
    for i in picks:
        with Image.open(tds.samples[i][0]) as im:
            ref = np.asarray(tf(im.convert("RGB")), dtype=np.int16)
        diff = np.abs(np.asarray(full[i], dtype=np.int16) - ref).max()
        assert diff <= 1, "sample %d differs from torchvision by %d" % (i, diff)


def _path(ds, tree, i):
    where = ds.describe(i)  # a tree's sample: its file
    assert os.path.exists(where), where
    return where


def test_ids_once_and_ordered(tree):
    data = [open(p, "rb").read() for p in _files(tree, 20)]
    with chute.Infer(size=16, max_batch=3, max_delay_us=200, workers=3,
                     queue_capacity=400) as inf:
        for k in range(300):
            inf.submit(data[k % len(data)], 5000 + k)
        ids = [i for i, _ in _drain(inf, 300)]
    assert ids == list(range(5000, 5300))


def test_corrupt_fails_alone_and_lifecycle(tree):
    good = open(_files(tree, 1)[0], "rb").read()
    inf = chute.Infer(size=32, max_batch=3, max_delay_us=5000000, workers=1, queue_capacity=3)
    inf.submit(good, 1)
    inf.submit(b"\x00not an image" * 10, 2)
    inf.submit(bytearray(good), 3)
    with pytest.raises(chute.BusyError, match="queue"):
        inf.submit(good, 4)
    res = dict(_drain(inf, 3))
    assert isinstance(res[2], chute.ChuteError) and res[2].status in (
        "CHUTE_EFORMAT", "CHUTE_ECORRUPT"), res[2]
    a1, a3 = np.asarray(res[1]), np.asarray(res[3])
    assert a1.shape == (3, 32, 32) and a1.dtype == np.float32
    np.testing.assert_array_equal(a1, a3)
    inf.submit(os.path.join(str(tree), "no-such.jpg"), 9)
    inf.close()
    with pytest.raises(chute.InvalidArgumentError, match="closed"):
        inf.submit(good, 10)
    rest = []
    while True:
        got = inf.poll(timeout=10)
        if got is None:
            break
        rest.extend(got)
    assert len(rest) == 1 and rest[0][0] == 9 and isinstance(rest[0][1], chute.NotFoundError)
    st = inf.stats()
    assert st["completed"] == 4 and st["failed"] == 2 and st["rejected_busy"] == 1
    assert st["total"]["count"] == 4 and st["decode"]["count"] == 2
    assert st["total"]["p99_ms"] >= st["total"]["p50_ms"] > 0


def test_threads_submit(tree):
    data = [open(p, "rb").read() for p in _files(tree, 10)]
    inf = chute.Infer(size=16, max_batch=4, workers=2, queue_capacity=16)

    def sub(base):
        for k in range(50):
            while True:
                try:
                    inf.submit(data[k % len(data)], base + k)
                    break
                except chute.BusyError:
                    threading.Event().wait(0.001)

    th = [threading.Thread(target=sub, args=(1000 * t,)) for t in range(4)]
    for t in th:
        t.start()
    got = _drain(inf, 200)
    for t in th:
        t.join()
    assert sorted(i for i, _ in got) == sorted(1000 * t + k for t in range(4) for k in range(50))


def test_bad_options():
    with pytest.raises(ValueError, match="transform"):
        chute.Infer(transform="train")
    with pytest.raises(chute.InvalidArgumentError, match="max_batch"):
        chute.Infer(max_batch=100000)


def _slices():
    """se.slice (ns) of every thread of this process, from the kernel."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/sched" % tid) as f:
                for line in f:
                    if line.startswith("se.slice"):
                        out.append(int(line.split(":")[1]))
        except OSError:
            pass
    return out


def test_worker_slice():
    with pytest.raises(chute.InvalidArgumentError, match="worker_slice_us 50"):
        chute.Infer(worker_slice_us=50)
    before = _slices()
    if not before:
        pytest.skip("/proc/self/task/*/sched shows no se.slice here")
    with chute.Infer(size=16, workers=2, worker_slice_us=3000) as inf:
        for _ in range(500):
            if _slices().count(3000000) >= 2:
                break
            threading.Event().wait(0.01)
        got = _slices().count(3000000) - before.count(3000000)
        if got == 0 and inf.stats()["worker_slice_us"] != 3000:
            pytest.skip("this kernel gives no per-thread slice (Linux < 6.12)")
        assert got == 2, "%d threads took the 3 ms slice, want the 2 workers" % got
        assert inf.stats()["worker_slice_us"] == 3000
