"""`python -m chute.doctor SOURCE --model resnet50`: are the GPUs fed during a
real training step?

Why this exists beside `chute doctor`.  The C doctor measures the input path
(storage, decode, transform, the whole pipeline) and samples NVML while a
consumer that does no work drains batches, so its GPU line says how busy the
GPU is with *nothing* to do.  What a user wants to know is whether a real
model step stays busy when chute feeds it.  That needs the model, so it is
Python: torchvision's ResNet-50 (AMP float16, channels_last, SGD, as
bench/gpu/train_resnet50.py) is stepped twice with NVML sampled every
100 ms:

  1. on one synthetic batch kept on the GPU: the model's own rate, the
     ceiling (what one GPU consumes, images/s);
  2. fed by chute.Loader on the same data the user named (device="cuda":
     CPU decode, pinned uint8, normalize on the GPU; gpu_decode_share as
     given).

The verdict, in GPUs fed: fed = rate(2) / rate(1) (>= 0.95 is "fed"), and
the loader's own rate without the model (3. the loader drained alone) over
rate(1) says how many such GPUs this host's CPUs could keep fed.

Without a GPU (or torch without CUDA) the same command says so on its first
line and measures what it can instead: the loader alone (images/s) and one
ResNet-50 step on the CPU (images/s, which says nothing about a GPU), and
exits 0: a missing GPU is a fact to report, not an error.  Without torch or
torchvision it says which is missing and exits 2.
"""
import argparse
import ctypes
import json
import os
import sys
import threading
import time

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


class Nvml:
    """GPU busy % (nvmlDeviceGetUtilizationRates) sampled in a thread; name
    and why it is unavailable otherwise.  libnvidia-ml is loaded with
    ctypes, so nothing is needed besides the driver."""

    class _Util(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    def __init__(self, index=0):
        self.lib, self.dev, self.name, self.why = None, ctypes.c_void_p(), "", ""
        self.samples, self._stop, self._thread = [], threading.Event(), None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            self.why = "NVML not found (libnvidia-ml.so.1: %s)" % e
            return
        try:
            if lib.nvmlInit_v2() != 0:
                self.why = "nvmlInit failed (no NVIDIA driver running?)"
                return
            if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.dev)) != 0:
                self.why = "NVML lists no GPU %d" % index
                return
            buf = ctypes.create_string_buffer(96)
            if lib.nvmlDeviceGetName(self.dev, buf, 96) == 0:
                self.name = buf.value.decode(errors="replace")
        except AttributeError as e:
            self.why = "NVML too old (%s)" % e
            return
        self.lib = lib

    def start(self):
        self.samples = []
        if self.lib:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self):
        u = self._Util()
        while not self._stop.wait(0.1):
            if self.lib.nvmlDeviceGetUtilizationRates(self.dev, ctypes.byref(u)) == 0:
                self.samples.append(u.gpu)

    def stop(self):
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._thread = None
        return sum(self.samples) / len(self.samples) if self.samples else None


def _gpu_state(torch):
    """(True, name) or (False, why there is no usable CUDA GPU for torch)."""
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            return False, "torch %s was built without CUDA" % torch.__version__
        return False, "torch sees no CUDA device (torch.cuda.is_available() is False)"
    return True, torch.cuda.get_device_name(0)


def _model(torch, torchvision, device):
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    crit = torch.nn.CrossEntropyLoss()
    cuda = device.type == "cuda"
    amp = torch.float16 if cuda else torch.bfloat16
    scaler = None
    if cuda:  # torch.amp.GradScaler since torch 2.3, torch.cuda.amp before
        scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())
    model.train()

    def step(x, y):
        with torch.autocast(device_type=device.type, dtype=amp):
            loss = crit(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    return step


def _timed(torch, device, step, batches, warmup, steps, nvml):
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        step(*next(batches))
    sync()
    if nvml:
        nvml.start()
    t0 = time.perf_counter()
    n = 0
    for _ in range(steps):
        x, y = next(batches)
        step(x, y)
        n += x.shape[0]
    sync()
    dt = time.perf_counter() - t0
    busy = nvml.stop() if nvml else None
    return {"images_per_s": n / dt, "seconds": dt, "steps": steps, "gpu_busy_pct": busy}


def _synthetic(torch, device, batch, size):
    x = torch.randn(batch, 3, size, size, device=device).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    while True:
        yield x, y


def _chute_batches(torch, chute, args, device):
    kw = dict(batch_size=args.batch, size=args.size, drop_last=True, seed=0)
    if args.workers:
        kw["workers"] = args.workers
    if device.type == "cuda":
        kw.update(layout="nhwc", device="cuda")
        if args.gpu_decode_share:
            kw["gpu_decode_share"] = args.gpu_decode_share
    loader = chute.Loader(args.source, **kw)
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for x, y in loader:
            if device.type == "cuda":
                x = x.permute(0, 3, 1, 2)  # NHWC memory = channels_last NCHW
            else:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, y.to(device, non_blocking=True)
        epoch += 1


def _loader_alone(chute, args, seconds=3.0):
    kw = dict(batch_size=args.batch, size=args.size, drop_last=True, seed=0)
    if args.workers:
        kw["workers"] = args.workers
    loader = chute.Loader(args.source, **kw)
    n, t0, epoch = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        loader.set_epoch(epoch)
        for x, _ in loader:
            n += x.shape[0]
            if time.perf_counter() - t0 >= seconds:
                break
        epoch += 1
    return n / (time.perf_counter() - t0)


def run(args):
    """The measurements as one dict (what --json prints)."""
    try:
        import torch
        import torchvision
    except ImportError as e:
        return {"error": "needs torch and torchvision (%s)" % e}
    import chute
    out = {"model": args.model, "batch": args.batch, "size": args.size}
    ok, what = _gpu_state(torch)
    nvml = Nvml() if ok else None
    out["gpu"] = what if ok else None
    out["loader_images_per_s"] = _loader_alone(chute, args)
    if not ok:
        out["no_gpu"] = what
        step = _model(torch, torchvision, torch.device("cpu"))
        out["cpu_step"] = _timed(torch, torch.device("cpu"), step,
                                 _synthetic(torch, torch.device("cpu"), args.batch, args.size),
                                 1, 2, None)
        return out
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    if not nvml.lib:
        out["nvml"] = nvml.why
    step = _model(torch, torchvision, device)
    out["synthetic"] = _timed(torch, device, step,
                              _synthetic(torch, device, args.batch, args.size),
                              args.warmup, args.steps, nvml)
    batches = _chute_batches(torch, chute, args, device)
    out["chute"] = _timed(torch, device, step, batches, args.warmup, args.steps, nvml)
    batches.close()
    ceiling = out["synthetic"]["images_per_s"]
    out["fed"] = out["chute"]["images_per_s"] / ceiling
    out["gpus_fed_by_cpu"] = out["loader_images_per_s"] / ceiling
    return out


def _pct(v):
    return "n/a" if v is None else "%.0f%%" % v


def report(r):
    if "error" in r:
        return "chute doctor --model: %s" % r["error"]
    lines = []
    if r.get("no_gpu"):
        lines += ["no GPU: %s." % r["no_gpu"],
                  "  measured instead: the loader alone and a %s step on the CPU "
                  "(no GPU figure can be given)" % r["model"],
                  "  loader       %8.0f images/s (batch %d, %d px)"
                  % (r["loader_images_per_s"], r["batch"], r["size"]),
                  "  CPU step     %8.1f images/s (bfloat16 autocast; says nothing about a GPU)"
                  % r["cpu_step"]["images_per_s"]]
        return "\n".join(lines)
    s, c = r["synthetic"], r["chute"]
    lines += ["GPU %s, %s, batch %d, %d px (AMP float16, channels_last)"
              % (r["gpu"], r["model"], r["batch"], r["size"])]
    if r.get("nvml"):
        lines.append("  (GPU busy %% unavailable: %s)" % r["nvml"])
    lines += ["  synthetic    %8.0f images/s  GPU busy %s   (the model's ceiling)"
              % (s["images_per_s"], _pct(s["gpu_busy_pct"])),
              "  chute-fed    %8.0f images/s  GPU busy %s   (%.1f%% of the ceiling)"
              % (c["images_per_s"], _pct(c["gpu_busy_pct"]), 100 * r["fed"]),
              "  loader alone %8.0f images/s"
              % r["loader_images_per_s"]]
    verdict = "fed" if r["fed"] >= 0.95 else "starved: the step waits for data"
    lines.append("verdict: this GPU is %s; this host's CPUs can feed %.1f such GPUs"
                 % (verdict, r["gpus_fed_by_cpu"]))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m chute.doctor",
                                 description="GPU utilisation during a real model step fed "
                                             "by chute (see the module's docstring)")
    ap.add_argument("source", help="dataset: an image tree or shard directory")
    ap.add_argument("--model", default="resnet50", choices=["resnet50"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--workers", type=int, default=0, help="0: chute's default")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--gpu-decode-share", type=int, default=0,
                    help="percent of each batch decoded by nvJPEG (0: off)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.size < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--batch, --size and --steps must be >= 1, --warmup >= 0")
    r = run(args)
    print(json.dumps(r) if args.json else report(r))
    return 2 if "error" in r else 0


if __name__ == "__main__":
    sys.exit(main())
