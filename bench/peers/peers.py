#!/usr/bin/env python3
"""chute and its peers (DALI, tf.data, FFCV, WebDataset, PyTorch DataLoader), one harness.

    peers.py convert FORMAT TREE OUT        FORMAT: tfrecord | wds | ffcv
    peers.py run SYSTEM --data DIR ...      one system, one transform; prints one JSON line
    peers.py drive --data DIR ...           every system, train then eval; the table

`run` is what every in-process system goes through, so they all share one
timing protocol and one output check:

  * E epochs (--epochs) of the whole set, batch 256, 224x224 float32;
  * the first W batches (--warmup, default cores + 4) are not timed: the
    first `cores` start the workers, the next 4 drain whatever the pipeline
    prefetched meanwhile (no system prefetches more than 4 batches here), so
    the timed region is steady state and nothing made before it is counted;
  * the first batch is copied and checked in full after the timed region
    (shape, dtype, labels in [0, classes), per-channel mean/std after
    normalisation, not all images identical); every batch has its size and
    label range checked;
  * the clock starts when batch W arrives and stops at the last batch;
  * cpu_seconds is user+system time of this process and all its live
    descendants (/proc/PID/stat) plus reaped children (getrusage), over the
    timed region.

`drive` starts each `run` (and `chute bench`) as its own process and adds what
only the parent can see: ru_maxrss from wait4 (the largest single process of
the tree) and the peak of the tree's summed PSS, sampled 5 times a second.
"""
import argparse
import glob
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CORES = len(os.sched_getaffinity(0))


# ---------------------------------------------------------------- dataset ----
def list_tree(tree):
    """(path, label) in ImageFolder order: sorted classes, sorted files."""
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    items = []
    for i, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(tree, c))):
            if f.lower().endswith((".jpg", ".jpeg")):
                items.append((os.path.join(tree, c, f), i))
    return classes, items


def convert(fmt, tree, out):
    classes, items = list_tree(tree)
    tmp = out + ".tmp"
    if os.path.exists(tmp):
        subprocess.run(["rm", "-rf", tmp], check=True)
    os.makedirs(tmp)
    t0 = time.time()
    if fmt == "tfrecord":
        import tensorflow as tf
        nshards = 8
        writers = [tf.io.TFRecordWriter(os.path.join(tmp, "train-%05d-of-%05d" % (i, nshards)))
                   for i in range(nshards)]
        for k, (path, label) in enumerate(items):
            with open(path, "rb") as f:
                data = f.read()
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }))
            writers[k % nshards].write(ex.SerializeToString())
        for w in writers:
            w.close()
        # DALI's tfrecord reader needs an index per file: DALI's own tool makes it.
        idx = os.path.join(os.path.dirname(sys.executable), "tfrecord2idx")
        os.makedirs(os.path.join(tmp, "idx"))
        for p in sorted(glob.glob(os.path.join(tmp, "train-*"))):
            subprocess.run([sys.executable, idx, p, os.path.join(tmp, "idx", os.path.basename(p) + ".idx")],
                           check=True)
    elif fmt == "wds":
        import webdataset as wds
        import random
        order = list(range(len(items)))
        random.Random(0).shuffle(order)   # mix classes across shards, as a real writer would
        with wds.ShardWriter(os.path.join(tmp, "shard-%06d.tar"), maxcount=200, verbose=0) as sink:
            for k in order:
                path, label = items[k]
                with open(path, "rb") as f:
                    data = f.read()
                sink.write({"__key__": "%08d" % k, "jpg": data, "cls": label})
    elif fmt == "ffcv":
        from PIL import Image
        from ffcv.fields import IntField, RGBImageField
        from ffcv.writer import DatasetWriter

        class Folder:
            def __len__(self):
                return len(items)

            def __getitem__(self, i):
                path, label = items[i]
                with Image.open(path) as im:
                    return im.convert("RGB"), label

        w = DatasetWriter(os.path.join(tmp, "data.beton"), {
            "image": RGBImageField(write_mode="jpg", jpeg_quality=90),
            "label": IntField(),
        }, num_workers=CORES)
        w.from_indexed_dataset(Folder())
    else:
        sys.exit("peers.py: unknown format %r" % fmt)
    if os.path.exists(out):
        subprocess.run(["rm", "-rf", out], check=True)
    os.rename(tmp, out)
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out, "**"), recursive=True)
               if os.path.isfile(p))
    print("%s: %d images -> %s (%.1f MB) in %.1f s" % (fmt, len(items), out, size / 1e6, time.time() - t0))


# ----------------------------------------------------------------- timing ----
def proc_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def descendants(pid):
    kids = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        for c in kids.get(q, []):
            out.append(c)
            todo.append(c)
    return out


def tree_cpu():
    ru_s = resource.getrusage(resource.RUSAGE_SELF)
    ru_c = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = ru_s.ru_utime + ru_s.ru_stime + ru_c.ru_utime + ru_c.ru_stime
    return own + sum(proc_cpu(p) for p in descendants(os.getpid()))


# ------------------------------------------------------------------ check ----
class CheckFailed(Exception):
    pass


def full_check(x, y, layout, batch, classes, size):
    import numpy as np
    x = np.asarray(x)
    y = np.asarray(y).reshape(-1)
    want = (batch, 3, size, size) if layout == "NCHW" else (batch, size, size, 3)
    if tuple(x.shape) != want:
        raise CheckFailed("batch shape %s, expected %s" % (tuple(x.shape), want))
    if x.dtype not in (np.float32, np.float16):
        raise CheckFailed("dtype %s, expected float32" % x.dtype)
    if y.shape[0] != batch:
        raise CheckFailed("%d labels for %d images" % (y.shape[0], batch))
    if y.min() < 0 or y.max() >= classes:
        raise CheckFailed("labels in [%d, %d], expected [0, %d)" % (y.min(), y.max(), classes))
    if len(set(y.tolist())) < 2:
        raise CheckFailed("all %d labels are %d (no shuffling?)" % (batch, y[0]))
    xf = x.astype(np.float32)
    ax = (0, 2, 3) if layout == "NCHW" else (0, 1, 2)
    m, s = xf.mean(axis=ax), xf.std(axis=ax)
    if not np.isfinite(xf).all():
        raise CheckFailed("non-finite pixels")
    if np.abs(m).max() >= 1 or s.min() <= 0.3 or s.max() >= 2:
        raise CheckFailed("per-channel mean %s std %s: not ImageNet-normalised"
                          % (np.round(m, 3).tolist(), np.round(s, 3).tolist()))
    # identical images would mean a broken augmentation / reader
    flat = xf.reshape(batch, -1)[:, ::997]
    if np.abs(flat[0] - flat[1]).max() == 0 and np.abs(flat[1] - flat[2]).max() == 0:
        raise CheckFailed("the first images of the batch are identical")
    return {"mean": round(float(m.mean()), 3), "std": round(float(s.mean()), 3)}


def quick_check(n, y, classes, batch):
    import numpy as np
    y = np.asarray(y).reshape(-1)
    if n > batch or n < 1 or y.shape[0] != n:
        raise CheckFailed("a batch of %d images / %d labels" % (n, y.shape[0]))
    if y.min() < 0 or y.max() >= classes:
        raise CheckFailed("label %d outside [0, %d)" % (y.max() if y.max() >= classes else y.min(), classes))


# ---------------------------------------------------------------- systems ----
# Each returns (layout, iterator over (images, labels) of E epochs, info dict).

def sys_torch(a, tree):
    """bench/torch_baseline.py's pipeline, exactly (ImageFolder + DataLoader)."""
    import torch
    from torchvision import datasets, transforms
    torch.manual_seed(a.seed)
    ds = datasets.ImageFolder(tree, transform=tv_transform(a))
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True,
                                         num_workers=a.workers, pin_memory=False,
                                         persistent_workers=True, drop_last=False)
    return "NCHW", epochs_of(loader, a.epochs), {"torch": torch.__version__, "dataset_images": len(ds)}


def epochs_of(loader, epochs):
    """Batches of a torch DataLoader over `epochs` epochs, then its workers stopped."""
    for _ in range(epochs):
        for x, y in loader:
            yield x, y
    if loader._iterator is not None:
        loader._iterator._shutdown_workers()


def tv_transform(a):
    from torchvision import transforms
    norm = transforms.Normalize(mean=MEAN, std=STD)
    if a.transform == "train":
        return transforms.Compose([transforms.RandomResizedCrop(a.size), transforms.RandomHorizontalFlip(),
                                   transforms.ToTensor(), norm])
    return transforms.Compose([transforms.Resize(a.size * 256 // 224), transforms.CenterCrop(a.size),
                               transforms.ToTensor(), norm])


def sys_wds(a, data):
    import torch
    import webdataset as wds
    urls = sorted(glob.glob(os.path.join(data, "wds", "shard-*.tar")))
    if not urls:
        raise CheckFailed("no WebDataset shards in %s/wds" % data)
    torch.manual_seed(a.seed)
    tf = tv_transform(a)
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False, seed=a.seed)
          .shuffle(1000)
          .decode("pil")
          .to_tuple("jpg", "cls")
          .map_tuple(tf, lambda c: c)
          .batched(a.batch_size, partial=True))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=a.workers,
                                         persistent_workers=True, pin_memory=False)
    return "NCHW", epochs_of(loader, a.epochs), {"webdataset": wds.__version__ if hasattr(wds, "__version__") else "?",
                          "shards": len(urls)}


def sys_dali(a, data, tree, reader):
    import numpy as np
    import nvidia.dali as dali
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    import nvidia.dali.tfrecord as tfrec

    n = len(list_tree(tree)[1])

    @dali.pipeline_def(batch_size=a.batch_size, num_threads=a.workers, device_id=None,
                       seed=a.seed + 1, prefetch_queue_depth=2)
    def pipe():
        if reader == "file":
            jpegs, labels = fn.readers.file(file_root=tree, random_shuffle=True, name="Reader")
        else:
            files = sorted(glob.glob(os.path.join(data, "tfrecord", "train-*-of-*[0-9]")))  # not chute's .chuteidx beside them
            idx = [os.path.join(data, "tfrecord", "idx", os.path.basename(p) + ".idx") for p in files]
            inputs = fn.readers.tfrecord(path=files, index_path=idx, random_shuffle=True, name="Reader",
                                         features={
                                             "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                                             "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)})
            jpegs, labels = inputs["image/encoded"], inputs["image/class/label"]
        if a.transform == "train":
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0],
                                                   random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
            images = fn.resize(images, device="cpu", resize_x=a.size, resize_y=a.size)
            mirror = fn.random.coin_flip(probability=0.5)
            crop = (a.size, a.size)
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, device="cpu", resize_shorter=a.size * 256 // 224)
            mirror = False
            crop = (a.size, a.size)
        images = fn.crop_mirror_normalize(images, device="cpu", dtype=types.FLOAT, output_layout="CHW",
                                          crop=crop, mean=[m * 255 for m in MEAN],
                                          std=[s * 255 for s in STD], mirror=mirror)
        return images, labels

    p = pipe()
    p.build()
    batches = math.ceil(n * a.epochs / a.batch_size)

    class Lazy:
        """TensorListCPU -> numpy only when looked at (the check)."""
        def __init__(self, tl):
            self.tl = tl

        def __array__(self, dtype=None):
            arr = self.tl.as_array()
            return arr if dtype is None else arr.astype(dtype)

    def it():
        for _ in range(batches):
            x, y = p.run()
            yield Lazy(x), y.as_array()
    return "NCHW", it(), {"dali": dali.__version__, "reader": reader,
                          "note": "reader wraps around: %d full batches = %d epochs" % (batches, a.epochs)}


def sys_tfdata(a, data):
    import tensorflow as tf
    files = sorted(glob.glob(os.path.join(data, "tfrecord", "train-*-of-*[0-9]")))  # not chute's .chuteidx beside them
    if not files:
        raise CheckFailed("no TFRecords in %s/tfrecord" % data)
    tf.random.set_seed(a.seed)
    AUTO = tf.data.AUTOTUNE
    mean = tf.constant(MEAN, tf.float32) * 255.0
    std = tf.constant(STD, tf.float32) * 255.0
    size = a.size
    feats = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
             "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def train_map(rec):
        ex = tf.io.parse_single_example(rec, feats)
        raw = ex["image/encoded"]
        shape = tf.io.extract_jpeg_shape(raw)
        begin, csize, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        oy, ox, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(csize)
        img = tf.io.decode_and_crop_jpeg(raw, tf.stack([oy, ox, h, w]), channels=3)
        img = tf.image.resize(img, [size, size], method="bilinear")
        img = tf.image.random_flip_left_right(img)
        return (img - mean) / std, ex["image/class/label"]

    def eval_map(rec):
        ex = tf.io.parse_single_example(rec, feats)
        img = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
        hw = tf.cast(tf.shape(img)[:2], tf.float32)
        short = size * 256 // 224
        scale = short / tf.reduce_min(hw)
        img = tf.image.resize(img, tf.cast(tf.round(hw * scale), tf.int32), method="bilinear")
        img = tf.image.resize_with_crop_or_pad(img, size, size)
        return (img - mean) / std, ex["image/class/label"]

    ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=a.seed)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=len(files), num_parallel_calls=AUTO,
                       deterministic=False)
    ds = ds.shuffle(1024, seed=a.seed).repeat(a.epochs)
    ds = ds.map(train_map if a.transform == "train" else eval_map, num_parallel_calls=AUTO,
                deterministic=False)
    ds = ds.batch(a.batch_size).prefetch(AUTO)

    def it():
        for x, y in ds:
            yield x, y
    return "NHWC", it(), {"tensorflow": tf.__version__, "files": len(files)}


def sys_ffcv(a, data):
    import numpy as np
    import torch
    from ffcv.fields.decoders import CenterCropRGBImageDecoder, IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage
    path = os.path.join(data, "ffcv", "data.beton")
    if not os.path.exists(path):
        raise CheckFailed("no %s" % path)
    size = (a.size, a.size)
    if a.transform == "train":
        image = [RandomResizedCropRGBImageDecoder(size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
                 RandomHorizontalFlip()]
    else:
        image = [CenterCropRGBImageDecoder(size, ratio=224 / 256)]
    # On the CPU, NormalizeImage is a numba kernel over NHWC uint8 arrays, so it
    # goes before ToTensor/ToTorchImage.  (Placed after ToTorchImage, as in the
    # GPU examples, FFCV 1.0.2's Loader never finishes building its pipeline:
    # jitted, plain, jitted stages loop forever in Graph.group_operations.)
    image += [NormalizeImage(np.array(MEAN) * 255, np.array(STD) * 255, np.float32),
              ToTensor(), ToTorchImage()]
    loader = Loader(path, batch_size=a.batch_size, num_workers=a.workers, order=OrderOption.RANDOM,
                    os_cache=True, drop_last=False, seed=a.seed,
                    pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]})

    def it():
        for _ in range(a.epochs):
            for x, y in loader:
                yield x, y
    from importlib.metadata import version
    return "NCHW", it(), {"ffcv": version("ffcv"), "numba": version("numba"), "torch": torch.__version__}


def sys_chute_py(a, src):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import chute
    ld = chute.Loader(src, batch_size=a.batch_size, transform=a.transform, size=a.size,
                      workers=a.workers, seed=a.seed, drop_last=False, shuffle=True)

    def it():
        for e in range(a.epochs):
            ld.set_epoch(e)
            for x, y in ld:
                yield x, y
        ld.close()
    return "NCHW", it(), {"chute": chute.__version__}


def to_np(x):
    if hasattr(x, "numpy") and not isinstance(x, type(None)):
        try:
            return x.numpy()
        except Exception:
            pass
    return x


def run(a):
    data = a.data
    tree = os.path.join(data, "tree")
    s = a.system
    res = {"system": s, "transform": a.transform, "batch_size": a.batch_size, "workers": a.workers,
           "epochs": a.epochs, "warmup_batches": a.warmup}
    try:
        t_setup = time.perf_counter()
        if s == "torch-dataloader":
            layout, it, info = sys_torch(a, tree)
        elif s == "wds-dataloader":
            layout, it, info = sys_wds(a, data)
        elif s == "dali-file":
            layout, it, info = sys_dali(a, data, tree, "file")
        elif s == "dali-tfrecord":
            layout, it, info = sys_dali(a, data, tree, "tfrecord")
        elif s == "tf-data":
            layout, it, info = sys_tfdata(a, data)
        elif s == "ffcv":
            layout, it, info = sys_ffcv(a, data)
        elif s == "chute-py-shards":
            layout, it, info = sys_chute_py(a, os.path.join(data, "shards"))
        elif s == "chute-py-tree":
            layout, it, info = sys_chute_py(a, tree)
        else:
            raise CheckFailed("unknown system %s" % s)
        res.update(info)
        classes = len(list_tree(tree)[0])
        images = batches = k = seen = 0
        t0 = cpu0 = None
        stats = None
        for x, y in it:
            k += 1
            y = to_np(y)
            if k == 1:  # keep a copy; the full check runs after the timed region
                res["setup_s"] = round(time.perf_counter() - t_setup, 2)
                import numpy as np
                first = (np.array(to_np(x), copy=True), np.array(y, copy=True))
            n = int(y.reshape(-1).shape[0])
            quick_check(n, y, classes, a.batch_size)
            seen += n
            if k <= a.warmup:
                if k == a.warmup:
                    cpu0, t0 = tree_cpu(), time.perf_counter()
                continue
            images += n
            batches += 1
        stats = full_check(first[0], first[1], layout, a.batch_size, classes, a.size)
        if t0 is None or images == 0:
            raise CheckFailed("no batches after the %d warm-up ones (%d in all)" % (a.warmup, k))
        secs = time.perf_counter() - t0
        cpu = tree_cpu() - cpu0
        n_all = len(list_tree(tree)[1])
        if not s.startswith("dali-") and seen != n_all * a.epochs:
            raise CheckFailed("delivered %d images for %d epochs of %d" % (seen, a.epochs, n_all))
        res.update({"images": images, "batches": batches, "seconds": round(secs, 3),
                    "images_per_sec": round(images / secs, 1), "cpu_seconds": round(cpu, 2),
                    "cpu_seconds_per_1k": round(cpu / images * 1000, 3), "layout": layout,
                    "check": stats, "valid": True})
    except CheckFailed as e:
        res.update({"valid": False, "why": str(e)})
    print(json.dumps(res), flush=True)
    return 0


# ------------------------------------------------------------------ drive ----
def pss_tree(pid):
    tot = 0
    for p in [pid] + descendants(pid):
        try:
            with open("/proc/%d/smaps_rollup" % p) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        tot += int(line.split()[1])
                        break
        except OSError:
            pass
    return tot  # KiB


def spawn(cmd, log, timeout, env=None):
    """Run cmd in its own session; return (rc, stdout, wall, ru, peak_pss_kib)."""
    t0 = time.perf_counter()
    with open(log, "a") as lf:
        lf.write("\n-- %s\n" % " ".join(cmd))
        lf.flush()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=lf, start_new_session=True, env=env,
                             cwd=ROOT, text=True)
        import threading
        out = []
        th = threading.Thread(target=lambda: out.append(p.stdout.read()))
        th.start()
        peak = 0
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, pss_tree(p.pid))
            if time.perf_counter() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.2)
        th.join()
        p.returncode = os.waitstatus_to_exitcode(status)
        lf.write(out[0] if out else "")
    return p.returncode, out[0] if out else "", time.perf_counter() - t0, ru, peak


SETTINGS = {
    "chute-shards": "`chute bench SHARDS --workers C --epochs E --json` (CLI; its own timing, start-up included)",
    "chute-tree": "`chute bench TREE --workers C --epochs E --json` (loose JPEGs)",
    "chute-py-shards": "chute.Loader(SHARDS, workers=C), torch tensors via DLPack (the bench/peers protocol)",
    "chute-py-tree": "chute.Loader(TREE, workers=C), same",
    "torch-dataloader": "ImageFolder + DataLoader(num_workers=C, persistent), torchvision/PIL",
    "dali-file": "DALI CPU: readers.file -> decoders.image_random_crop / image -> resize -> crop_mirror_normalize, num_threads=C",
    "dali-tfrecord": "DALI CPU: readers.tfrecord (8 files + DALI idx) -> same ops",
    "tf-data": "8 TFRecords, interleave + shuffle(1024) + map(AUTOTUNE) + batch + prefetch(AUTOTUNE)",
    "ffcv": "FFCV .beton (jpg, q90), Loader(num_workers=C, RANDOM, os_cache)",
    "wds-dataloader": "WebDataset tar shards (200/shard), shuffle(1000), PIL decode + torchvision, DataLoader(num_workers=C)",
    "chute-tfrecord": "`chute bench TFRECORD --format tfrecord ...` on the very files tf-data and DALI read (TensorFlow-written)",
    "chute-wds": "`chute bench WDS --format wds ...` on the very tars wds-dataloader reads (ShardWriter-written)",
}
ORDER = ["chute-shards", "chute-tree", "chute-py-shards", "chute-py-tree", "torch-dataloader", "dali-file",
         "dali-tfrecord", "tf-data", "ffcv", "wds-dataloader", "chute-tfrecord", "chute-wds"]
# Systems run as `chute bench DIR` (the CLI), with the directory under --data
# and the format to name (None: probe).  chute-tfrecord and chute-wds read
# the peers' own files, so chute and the peers read the same bytes.
CHUTE_CLI = {"chute-shards": ("shards", None), "chute-tree": ("tree", None),
             "chute-tfrecord": ("tfrecord", "tfrecord"), "chute-wds": ("wds", "wds")}


def drive(a):
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "peers.log")
    recs_path = os.path.join(a.out, "records.jsonl")
    open(recs_path, "w").close()
    skip = dict(x.split("=", 1) for x in a.skip) if a.skip else {}
    tables = {}
    for tf in ("train", "eval"):
        print("\n== %s transform" % tf, flush=True)
        rows = []
        for s in ORDER:
            rec = {"system": s, "transform": tf}
            if s in skip:
                rec.update({"valid": False, "why": "not run: " + skip[s]})
                print("   %-17s skipped: %s" % (s, skip[s]), flush=True)
                rows.append(rec)
                continue
            env = dict(os.environ)
            if s in CHUTE_CLI:
                src = os.path.join(a.data, CHUTE_CLI[s][0])
                cmd = [a.chute, "bench", src, "--transform", tf, "--workers", str(a.workers),
                       "--epochs", str(a.epochs), "--json", "--quiet"]
                if CHUTE_CLI[s][1]:
                    cmd += ["--format", CHUTE_CLI[s][1]]
            else:
                cmd = [sys.executable, os.path.abspath(__file__), "run", s, "--data", a.data,
                       "--transform", tf, "--workers", str(a.workers), "--epochs", str(a.epochs),
                       "--warmup", str(a.warmup)]
                env["TF_CPP_MIN_LOG_LEVEL"] = "2"
            rc, out, wall, ru, pss = spawn(cmd, log, a.timeout, env)
            line = [l for l in out.splitlines() if l.startswith("{")]
            r = json.loads(line[-1]) if line else {}
            rec.update(r)
            rec["system"] = s           # chute bench says "system": "chute"
            rec.update({"rc": rc, "wall_s": round(wall, 1),
                        "maxrss_mb": round(ru.ru_maxrss / 1024, 1), "pss_peak_mb": round(pss / 1024, 1),
                        "run_cpu_s": round(ru.ru_utime + ru.ru_stime, 1)})
            if s in CHUTE_CLI and r:
                rec["valid"] = (not r.get("failed") and r.get("corrupt", 0) == 0
                                and r.get("images") == r.get("samples_delivered"))
                if not rec["valid"]:
                    rec["why"] = "chute bench reported failed/corrupt samples"
                rec["check"] = "counts only (same library as chute-py-shards, whose batch is checked)"
            if rc != 0 or not r:
                rec["valid"] = False
                rec["why"] = rec.get("why") or ("exit status %d, no result (see %s)" % (rc, log))
            with open(recs_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            if rec.get("valid"):
                print("   %-17s %7.1f images/s  %.2f CPU s/1k  RSS %.0f MB  (run %.0f s)"
                      % (s, rec["images_per_sec"], rec["cpu_seconds_per_1k"], rec["maxrss_mb"], wall),
                      flush=True)
            else:
                print("   %-17s INVALID: %s" % (s, rec.get("why")), flush=True)
            rows.append(rec)
        tables[tf] = rows
    md = report(tables, a)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md)
    print()
    print(md)
    return 0


def report(tables, a):
    ctx = json.load(open(a.context)) if a.context and os.path.exists(a.context) else {}
    L = ["# chute and its peers", ""]
    L.append("%s; %s; %d cores; %s images (%s), %d classes; batch 256, 224x224 float32; "
             "%d epochs per system, the first %d batches untimed (chute CLI rows: all batches, "
             "start-up included); page cache **warm** (every file of every format read once "
             "before the runs%s)."
             % (ctx.get("date", time.strftime("%Y-%m-%d %H:%M")), ctx.get("cpu", "?"), a.workers,
                ctx.get("images", "?"), "quick" if ctx.get("quick") else "full", ctx.get("classes", 10),
                a.epochs, a.warmup, ctx.get("resident", "")))
    if ctx.get("versions"):
        L.append("")
        L.append("Versions: " + ctx["versions"] + ".")
    for tf, rows in tables.items():
        ref = next((r for r in rows if r["system"] == "chute-py-shards" and r.get("valid")), None)
        L += ["", "## %s transform" % tf, "",
              "| system | images/s | vs chute | CPU s / 1k images | CPU vs chute | peak RSS, largest process (MB) | peak PSS, all processes (MB) | check | settings |",
              "|---|---:|---:|---:|---:|---:|---:|---|---|"]
        for r in rows:
            s = r["system"]
            if not r.get("valid"):
                L.append("| %s | INVALID | | | | | | %s | %s |" % (s, r.get("why", "?").replace("|", "/"),
                                                                SETTINGS[s]))
                continue
            ips, cpu = r["images_per_sec"], r["cpu_seconds_per_1k"]
            ratio = "%.2f" % (ips / ref["images_per_sec"]) if ref else "n/a"
            cratio = "%.2f" % (cpu / ref["cpu_seconds_per_1k"]) if ref else "n/a"
            chk = r.get("check")
            if isinstance(chk, dict):
                chk = "ok (%s, mean %.2f, std %.2f)" % (r.get("layout"), chk["mean"], chk["std"])
            L.append("| %s | %.1f | %s | %.2f | %s | %.0f | %.0f | %s | %s |"
                     % (s, ips, ratio, cpu, cratio, r["maxrss_mb"], r["pss_peak_mb"], chk, SETTINGS[s]))
    L += ["", "images/s: images delivered in the timed region / its wall time.  CPU s / 1k images: "
          "user+system time of the system's whole process tree in the timed region (chute CLI: as "
          "`chute bench` reports it).  Peak RSS: ru_maxrss from wait4 (the largest single process "
          "of the tree); peak PSS: the tree's summed PSS sampled every 0.2 s (counts forked "
          "workers' shared pages once).  \"vs chute\" divides by chute-py-shards, the chute row "
          "measured with the same protocol as the peers (CPU: >1 means more CPU per image than "
          "chute).  check: the first batch's shape, dtype, labels in [0, 10) "
          "and per-channel mean/std after normalisation; every batch's size and labels.", ""]
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("format", choices=["tfrecord", "wds", "ffcv"])
    c.add_argument("tree")
    c.add_argument("out")
    for name in ("run", "drive"):
        r = sub.add_parser(name)
        if name == "run":
            r.add_argument("system")
        r.add_argument("--data", required=True)
        r.add_argument("--transform", choices=["train", "eval"], default="train")
        r.add_argument("--workers", type=int, default=CORES)
        r.add_argument("--batch-size", type=int, default=256)
        r.add_argument("--size", type=int, default=224)
        r.add_argument("--epochs", type=int, default=2)
        r.add_argument("--warmup", type=int, default=CORES + 4,
                       help="untimed first batches (default cores + 4: worker start, then "
                            "draining whatever was prefetched meanwhile)")
        r.add_argument("--seed", type=int, default=0)
        if name == "drive":
            r.add_argument("--chute", default=os.path.join(ROOT, "build", "chute"))
            r.add_argument("--out", required=True)
            r.add_argument("--timeout", type=float, default=300)
            r.add_argument("--skip", action="append", help="SYSTEM=why")
            r.add_argument("--context")
    a = ap.parse_args(argv)
    if a.cmd == "convert":
        convert(a.format, a.tree, a.out)
        return 0
    if a.cmd == "run":
        return run(a)
    return drive(a)


if __name__ == "__main__":
    sys.exit(main())
