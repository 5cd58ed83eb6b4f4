"""The CUDA backend from Python: device="cuda[:N]" gives CUDA tensors via
DLPack (kDLCUDA, the __dlpack__(stream=...) protocol).

Without a usable GPU (CI here) only the first tests run: the clear
UnsupportedError, the message for a missing module, and host loaders being
untouched.  The GPU tests skip with the reason and are ready for a GPU host:
batches against the CPU path (the reference is the CPU uint8 batch
normalized by numpy in float32, and the CPU float32 batch), the stream
contract, tensors alive after the loader is gone, and device memory over
100 loaders (torch.cuda.mem_get_info before/after).
"""
import gc
import os

import numpy as np
import pytest

import chute

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _gpu_reason(tree):
    if not chute.features()["cuda"]:
        return "chute was built without its CUDA module"
    torch = _torch_cuda()
    if torch is None:
        return "no CUDA device for torch"
    try:
        chute.Loader(tree, batch_size=2, size=8, workers=1, device="cuda", as_torch=False)
    except chute.UnsupportedError as e:
        return "chute cannot use the GPU: %s" % e
    return None


@pytest.fixture
def gpu(tree):
    why = _gpu_reason(tree)
    if why:
        pytest.skip(why)
    return _torch_cuda()


def test_cuda_without_gpu_is_unsupported(tree, monkeypatch):
    if _gpu_reason(tree) is None:
        pytest.skip("a GPU is usable here (the GPU tests below cover it)")
    monkeypatch.delenv("CHUTE_CUDA_MODULE", raising=False)
    with pytest.raises(chute.UnsupportedError) as e:
        chute.Loader(tree, batch_size=4, size=16, device="cuda:0")
    msg = str(e.value)
    assert msg.startswith("device cuda:0: "), msg
    assert ("no CUDA driver (libcuda.so.1 not found)" in msg or "no CUDA device" in msg
            or "CUDA module not built" in msg), msg


def test_missing_module_is_named(tree, monkeypatch):
    path = "/nonexistent/chute/libchute_cuda.so"
    monkeypatch.setenv("CHUTE_CUDA_MODULE", path)
    with pytest.raises(chute.UnsupportedError, match="CUDA module not found.*" + path):
        chute.Loader(tree, batch_size=4, size=16, device="cuda")


def test_bad_device_string(tree):
    for bad in ("gpu", "cuda:x", "cuda:-1"):
        with pytest.raises(chute.InvalidArgumentError, match="cuda:N"):
            chute.Loader(tree, batch_size=4, size=16, device=bad)
    with pytest.raises(TypeError):
        chute.Loader(tree, batch_size=4, size=16, device=0)


def test_cpu_device_is_the_host_path(tree):
    a = chute.Loader(tree, batch_size=8, size=16, seed=3, device="cpu", as_torch=False)
    b = chute.Loader(tree, batch_size=8, size=16, seed=3, as_torch=False)
    assert a.device == "cpu" and b.device == "cpu"
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.device == "cpu" and xa.__dlpack_device__() == (1, 0)
        assert np.array_equal(np.asarray(xa), np.asarray(xb))
        assert np.array_equal(np.asarray(ya), np.asarray(yb))


# ---- GPU (skipped without one) ------------------------------------------------

@pytest.mark.parametrize("dtype,layout", [("float32", "nchw"), ("float32", "nhwc"),
                                          ("float16", "nchw"), ("uint8", "nchw")])
def test_gpu_matches_cpu(gpu, tree, dtype, layout):
    torch = gpu
    kw = dict(batch_size=16, size=48, seed=5, workers=3, layout=layout)
    g = chute.Loader(tree, dtype=dtype, device="cuda", **kw)
    u8 = chute.Loader(tree, dtype="uint8", as_torch=False, **dict(kw, layout="nhwc"))
    cpu = chute.Loader(tree, dtype=dtype, as_torch=False, **kw)
    n = 0
    for (xg, yg), (xu, yu), (xc, yc) in zip(g, u8, cpu):
        assert xg.is_cuda and xg.device.index == 0 and not yg.is_cuda
        got = xg.float().cpu().numpy()
        assert np.array_equal(yg.numpy(), np.asarray(yu))
        px = np.asarray(xu).astype(np.float32)                       # N,H,W,C
        if dtype == "uint8":
            ref = px
        else:
            ref = px * (np.float32(1) / (np.float32(255) * STD)) + (-MEAN / STD)
        if layout == "nchw":
            ref = ref.transpose(0, 3, 1, 2)
        tol = {"float32": 1e-6, "float16": 2.0 ** -9, "uint8": 0}[dtype]
        assert np.abs(got - ref).max() <= tol
        cpu_path = np.asarray(xc).astype(np.float32)
        tol_cpu = 0 if dtype == "uint8" else 0.5 / (255 * 0.224) + tol
        assert np.abs(got - cpu_path).max() <= tol_cpu
        n += 1
    assert n == g.num_batches > 0


def test_gpu_stream_contract(gpu, tree):
    """A tensor taken on a side stream is complete there, and its slot is
    not overwritten while that stream still reads it (held back by a long
    kernel) even though the tensor was freed and the ring cycled."""
    torch = gpu
    ref = chute.Loader(tree, batch_size=8, size=48, seed=9, as_torch=False)
    g = chute.Loader(tree, batch_size=8, size=48, seed=9, device="cuda")
    want = np.asarray(next(iter(ref))[0])
    side = torch.cuda.Stream()
    it = iter(g)
    with torch.cuda.stream(side):
        x, y = next(it)                       # from_dlpack on `side`
        torch.cuda._sleep(200_000_000)        # ~0.1-0.2 s of GPU time on `side`
        out = x.clone()
    del x, y                                  # release: ordered after the clone on `side`
    gc.collect()
    for _ in range(8):                        # cycle every slot of the ring
        next(it, None)
    side.synchronize()
    assert np.abs(out.cpu().numpy() - want).max() <= 0.5 / (255 * 0.224) + 1e-6


def test_gpu_tensor_outlives_loader(gpu, tree):
    torch = gpu
    ref = chute.Loader(tree, batch_size=8, size=32, seed=2, as_torch=False)
    want = np.asarray(next(iter(ref))[0])
    g = chute.Loader(tree, batch_size=8, size=32, seed=2, device="cuda")
    x, _ = next(iter(g))
    del g
    gc.collect()
    torch.cuda.synchronize()
    assert np.abs(x.cpu().numpy() - want).max() <= 0.5 / (255 * 0.224) + 1e-6
    del x
    gc.collect()


def test_gpu_no_leak_over_100_loaders(gpu, tree):
    torch = gpu
    torch.cuda.synchronize()
    first = chute.Loader(tree, batch_size=16, size=32, device="cuda")
    next(iter(first))
    del first
    gc.collect()
    free0, _ = torch.cuda.mem_get_info(0)
    for i in range(100):
        g = chute.Loader(tree, batch_size=16, size=32, seed=i, device="cuda")
        x, _ = next(iter(g))
        del x, g
        gc.collect()
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info(0)
    assert free1 + (2 << 20) >= free0, (free0, free1)


def test_gpu_host_access_refused(gpu, tree):
    g = chute.Loader(tree, batch_size=4, size=16, device="cuda", as_torch=False)
    b = g.next_batch()
    a = b.images
    assert a.device == "cuda:0" and a.__dlpack_device__() == (2, 0)
    with pytest.raises(TypeError, match="CUDA memory"):
        a.numpy()
    with pytest.raises(BufferError):
        memoryview(a)
