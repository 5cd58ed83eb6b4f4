#!/usr/bin/env python3
"""ResNet-50 training fed by different input pipelines, in one run.

Why this benchmark: a data loader's job is to keep the GPU busy; the only
number that settles whether it does is the training step rate it sustains
next to the rate the same model reaches on synthetic data (the ceiling).
Every mode here runs the same torchvision ResNet-50 training step (AMP
float16, channels_last, SGD, batch 256 by default) for the same number of
timed steps after a warm-up, and reports images/s, the share of the
synthetic rate, and the GPU's busy % sampled from NVML (libnvidia-ml via
ctypes, every 100 ms) over the timed window.

Modes (--modes, comma-separated; run in this order):
  synthetic    one random batch kept on the GPU: the model's ceiling
  chute        chute.Loader on the CPU (16 workers by default), float32
               NCHW in host memory, then .cuda(non_blocking=True)
  chute-cuda   chute.Loader(device="cuda"): CPU decode, uint8 NHWC copied
               from pinned memory, normalized on the GPU (CUDA tensors)
  torch        torchvision ImageFolder + DataLoader (num_workers, pin_memory)
  dali         NVIDIA DALI: file reader, nvJPEG "mixed" decode, GPU
               RandomResizedCrop + flip + normalize (skipped when DALI is
               not installed, with the reason)
Every pipeline uses the same training transform (RandomResizedCrop 224,
scale 0.08-1, horizontal flip, ImageNet mean/std).

Without a GPU (--device cpu) the script runs the same code on the CPU with
bfloat16 autocast: only to check it works on a tiny input, never for
figures.  See README.md beside it.
"""
import argparse
import ctypes
import json
import os
import platform
import sys
import threading
import time

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


class NvmlSampler:
    """GPU busy % from NVML (nvmlDeviceGetUtilizationRates), sampled in a
    thread; None where NVML cannot be loaded."""

    class _Util(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    def __init__(self, index=0):
        self.samples = []
        self._stop = threading.Event()
        self._thread = None
        self.lib = None
        self.dev = ctypes.c_void_p()
        self.name = ""
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.dev)) != 0:
                return
            buf = ctypes.create_string_buffer(96)
            if lib.nvmlDeviceGetName(self.dev, buf, 96) == 0:
                self.name = buf.value.decode()
            self.lib = lib
        except (OSError, AttributeError):
            pass

    def start(self):
        self.samples = []
        if not self.lib:
            return
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


def synthetic_batches(torch, device, batch, size):
    x = torch.randn(batch, 3, size, size, device=device).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    while True:
        yield x, y


def chute_batches(torch, device, args, on_gpu, gpu_share=0):
    import chute
    kw = dict(batch_size=args.batch, size=args.size, workers=args.workers, drop_last=True,
              seed=0)
    if gpu_share:  # hybrid decode: this share of each batch's JPEGs through nvJPEG
        kw["gpu_decode_share"] = gpu_share
    if on_gpu:
        # NHWC on the device: permuted to N,C,H,W it is channels_last already.
        loader = chute.Loader(args.data, layout="nhwc", device="cuda", **kw)
    else:
        loader = chute.Loader(args.data, **kw)
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for x, y in loader:
            if on_gpu:
                x = x.permute(0, 3, 1, 2)
            else:
                x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            yield x, y.to(device, non_blocking=True)
        epoch += 1


def torch_batches(torch, device, args):
    import torchvision
    from torchvision import transforms as T
    tf = T.Compose([T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    ds = torchvision.datasets.ImageFolder(args.data, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, drop_last=True,
                                     num_workers=args.workers, pin_memory=device.type == "cuda",
                                     persistent_workers=args.workers > 0,
                                     prefetch_factor=2 if args.workers > 0 else None)
    while True:
        for x, y in dl:
            yield (x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last),
                   y.to(device, non_blocking=True))


def dali_batches(torch, device, args):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=args.batch, num_threads=args.workers, device_id=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=args.data, random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB,
                                               random_area=[0.08, 1.0])
        images = fn.resize(images, resize_x=args.size, resize_y=args.size)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[m * 255 for m in MEAN],
                                          std=[s * 255 for s in STD],
                                          mirror=fn.random.coin_flip())
        return images, labels.gpu()

    p = pipe()
    p.build()
    it = DALIGenericIterator([p], ["x", "y"], reader_name="r",
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
    while True:
        for d in it:
            x = d[0]["x"].contiguous(memory_format=torch.channels_last)
            yield x, d[0]["y"].squeeze(-1).long()


def run_mode(torch, torchvision, mode, args, device, nvml):
    if mode == "synthetic":
        batches = synthetic_batches(torch, device, args.batch, args.size)
    elif mode == "chute":
        batches = chute_batches(torch, device, args, on_gpu=False)
    elif mode == "chute-cuda":
        if device.type != "cuda":
            return {"mode": mode, "skipped": "needs a CUDA device"}
        batches = chute_batches(torch, device, args, on_gpu=True)
    elif mode == "chute-nvjpeg":
        if device.type != "cuda":
            return {"mode": mode, "skipped": "needs a CUDA device"}
        try:
            batches = chute_batches(torch, device, args, on_gpu=True,
                                    gpu_share=args.gpu_decode_share)
            next(batches)  # the loader is created lazily: surface "nvJPEG not found" here
        except Exception as e:
            if "nvJPEG not found" in str(e):
                return {"mode": mode, "skipped": str(e)}
            raise
    elif mode == "torch":
        batches = torch_batches(torch, device, args)
    elif mode == "dali":
        if device.type != "cuda":
            return {"mode": mode, "skipped": "needs a CUDA device"}
        try:
            batches = dali_batches(torch, device, args)
        except ImportError as e:
            return {"mode": mode, "skipped": "DALI not installed (%s)" % e}
    else:
        raise SystemExit("unknown mode %r" % mode)

    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    crit = torch.nn.CrossEntropyLoss()
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.cuda.amp.GradScaler(enabled=device.type == "cuda")

    def step(x, y):
        with torch.autocast(device_type=device.type, dtype=amp_dtype):
            loss = crit(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    for _ in range(args.warmup):
        x, y = next(batches)
        step(x, y)
    sync()
    nvml.start()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x, y = next(batches)
        loss = step(x, y)
    sync()
    dt = time.perf_counter() - t0
    busy = nvml.stop()
    batches.close()
    return {"mode": mode, "images_per_s": args.steps * args.batch / dt, "seconds": dt,
            "steps": args.steps, "gpu_busy_pct": busy, "final_loss": float(loss)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True,
                    help="ImageFolder tree of JPEGs (every mode reads it; chute also reads a "
                         "packed shard directory, but then torch/dali need a tree)")
    ap.add_argument("--modes", default="synthetic,chute,chute-cuda,chute-nvjpeg,torch,dali")
    ap.add_argument("--gpu-decode-share", type=int, default=30,
                    help="chute-nvjpeg: percent of each batch's JPEGs decoded by nvJPEG")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--steps", type=int, default=100, help="timed steps per mode")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps per mode")
    ap.add_argument("--device", default="cuda", help="cuda (figures) or cpu (smoke test only)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()

    import torch
    import torchvision
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device for torch; --device cpu runs the smoke test")
        torch.backends.cudnn.benchmark = True
    nvml = NvmlSampler()
    try:
        import chute
        chute_info = {"version": chute.__version__, "features": chute.features()}
    except ImportError as e:
        chute_info = {"error": str(e)}
    machine = {"host": platform.node(), "cpus": os.cpu_count(),
               "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
               "torch": torch.__version__, "torchvision": torchvision.__version__,
               "python": sys.version.split()[0], "chute": chute_info,
               "batch": args.batch, "size": args.size, "workers": args.workers,
               "steps": args.steps, "warmup": args.warmup,
               "gpu_decode_share": args.gpu_decode_share}
    print(json.dumps({"machine": machine}), flush=True)
    results = []
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        try:
            r = run_mode(torch, torchvision, mode, args, device, nvml)
        except Exception as e:  # one failing peer must not hide the others' figures
            r = {"mode": mode, "error": "%s: %s" % (type(e).__name__, e)}
        results.append(r)
        print(json.dumps(r), flush=True)
    synth = next((r["images_per_s"] for r in results
                  if r["mode"] == "synthetic" and "images_per_s" in r), None)
    print("\n| mode | images/s | of synthetic | GPU busy (NVML) |\n|---|---:|---:|---:|")
    for r in results:
        if "images_per_s" not in r:
            print("| %s | - | - | %s |" % (r["mode"], r.get("skipped") or r.get("error")))
            continue
        share = "%.1f%%" % (100 * r["images_per_s"] / synth) if synth else "-"
        busy = "%.0f%%" % r["gpu_busy_pct"] if r["gpu_busy_pct"] is not None else "n/a"
        print("| %s | %.0f | %s | %s |" % (r["mode"], r["images_per_s"], share, busy))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine, "results": results}, f, indent=1)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
