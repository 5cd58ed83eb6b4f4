#!/usr/bin/python3
"""The PyTorch baseline: torchvision ImageFolder + DataLoader, images/s.

    bench/torch_baseline.py ROOT [--transform train|eval] [--batch-size 256]
        [--workers N] [--size 224] [--epochs E] [--warmup-batches W]
        [--max-batches N] [--seed S]

This is the input pipeline of torchvision's ImageNet reference training
script, run without a model: ImageFolder (PIL decode via the default loader,
RGB convert), the standard transforms, and a DataLoader with shuffle=True,
pin_memory=False, persistent workers and the default collate and
prefetch_factor.  The consumer only touches each batch (reads its size), as
`chute bench` does.

  train: RandomResizedCrop(size) + RandomHorizontalFlip + ToTensor + Normalize
  eval:  Resize(size * 256 / 224) + CenterCrop(size) + ToTensor + Normalize
  (Normalize with the ImageNet mean/std; output float32 NCHW batches.)

--v2 (or --policy / --erasing, which imply it): torchvision's current
reference recipe with transforms.v2, as references/classification/presets.py
builds it with the default PIL backend: RandomResizedCrop(size,
antialias=True) + RandomHorizontalFlip + [TrivialAugmentWide() |
RandAugment(2, 9) | AutoAugment()] on the PIL image + PILToTensor +
ToDtype(float32, scale=True) + Normalize + [RandomErasing(p)]
(bench/augment_recipe.py runs it against chute).

Timing: --epochs epochs (default 2) are run, each a new shuffled pass over
the same persistent workers.  The first --warmup-batches batches (default:
one per worker, i.e. the first round, which every worker starts at once)
start the workers and are not timed; the clock starts when the last of them
arrives and stops at the last batch (or after --max-batches timed batches).
At that moment no later batch is complete yet, so nothing prepared before
the clock started is counted for free.

Prints one JSON line.  cpu_seconds is the CPU time (user + system) of this
process and its worker processes over the timed region only, read from
getrusage(RUSAGE_SELF) and /proc/<worker>/stat; cpu_seconds_total is
getrusage(RUSAGE_SELF) + getrusage(RUSAGE_CHILDREN) for the whole run,
warm-up and worker start included, taken after the workers have exited.
"""

import argparse
import json
import os
import resource
import sys
import time


def proc_cpu_seconds(pid):
    """utime + stime of a live process, from /proc (0 if it has gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])   # utime, stime (fields 14, 15)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def self_cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    cores = len(os.sched_getaffinity(0))
    ap = argparse.ArgumentParser(description="torchvision ImageFolder + DataLoader throughput")
    ap.add_argument("root")
    ap.add_argument("--transform", choices=("train", "eval"), default="train")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=cores)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--warmup-batches", type=int, default=0,
                    help="untimed first batches; default: one per worker")
    ap.add_argument("--max-batches", type=int, default=0, help="0 = no limit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--v2", action="store_true", help="transforms.v2 reference recipe (train)")
    ap.add_argument("--policy", choices=("none", "trivialaugment", "randaugment", "autoaugment"),
                    default="none")
    ap.add_argument("--erasing", type=float, default=0.0, help="RandomErasing p (v2)")
    a = ap.parse_args()
    a.v2 = a.v2 or a.policy != "none" or a.erasing > 0
    if a.workers < 1:
        ap.error("--workers must be >= 1 (persistent workers need at least one)")
    if a.warmup_batches == 0:
        a.warmup_batches = a.workers
    if a.warmup_batches < 1 or a.epochs < 1:
        ap.error("--warmup-batches and --epochs must be >= 1")

    import torch
    import torchvision
    from torchvision import datasets, transforms

    torch.manual_seed(a.seed)
    norm = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if a.transform == "train" and a.v2:
        from torchvision.transforms import v2
        steps = [v2.RandomResizedCrop(a.size, antialias=True), v2.RandomHorizontalFlip()]
        steps += {"none": [], "trivialaugment": [v2.TrivialAugmentWide()],
                  "randaugment": [v2.RandAugment(2, 9)], "autoaugment": [v2.AutoAugment()]}[a.policy]
        steps += [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                  v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])]
        if a.erasing > 0:
            steps.append(v2.RandomErasing(a.erasing))
        tf = v2.Compose(steps)
    elif a.transform == "train":
        tf = transforms.Compose([
            transforms.RandomResizedCrop(a.size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            norm,
        ])
    else:
        tf = transforms.Compose([
            transforms.Resize(a.size * 256 // 224),
            transforms.CenterCrop(a.size),
            transforms.ToTensor(),
            norm,
        ])
    try:
        ds = datasets.ImageFolder(a.root, transform=tf)
    except (FileNotFoundError, RuntimeError) as e:
        sys.exit("torch_baseline: %s" % e)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
        pin_memory=False, persistent_workers=True, drop_last=False)

    # The first --warmup-batches batches start the workers and fill the
    # prefetch queue; timing starts after them, in the same pass, so no
    # prefetched work is thrown away (abandoning a pass would make the
    # next one wait for the old pass's in-flight batches).
    images = batches = warm = 0
    pids = None
    t0 = cpu0 = None
    done = False
    for _epoch in range(a.epochs):
        for x, _y in loader:
            if t0 is None:
                warm += 1
                if warm >= a.warmup_batches:
                    pids = [w.pid for w in loader._iterator._workers]
                    cpu0 = self_cpu_seconds() + sum(proc_cpu_seconds(p) for p in pids)
                    t0 = time.perf_counter()
                continue
            images += x.shape[0]
            batches += 1
            if a.max_batches and batches >= a.max_batches:
                done = True
                break
        if done:
            break
    if t0 is None or images == 0:
        sys.exit("torch_baseline: nothing was timed: the dataset has %d batches per epoch, "
                 "--epochs %d and --warmup-batches %d leave none"
                 % (len(loader), a.epochs, a.warmup_batches))
    seconds = time.perf_counter() - t0
    cpu = self_cpu_seconds() + sum(proc_cpu_seconds(p) for p in pids) - cpu0

    # Stop the persistent workers so RUSAGE_CHILDREN includes them.
    if loader._iterator is not None:
        loader._iterator._shutdown_workers()
    del loader
    ru_c = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_total = self_cpu_seconds() + ru_c.ru_utime + ru_c.ru_stime

    print(json.dumps({
        "system": "torch-dataloader",
        "transform": a.transform,
        "v2": a.v2, "policy": a.policy, "erasing": a.erasing,
        "images_per_sec": round(images / seconds, 1),
        "images": images,
        "batches": batches,
        "epochs": a.epochs,
        "warmup_batches": a.warmup_batches,
        "seconds": round(seconds, 3),
        "workers": a.workers,
        "batch_size": a.batch_size,
        "size": a.size,
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_total": round(cpu_total, 2),
        "dataset_images": len(ds),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
