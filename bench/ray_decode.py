#!/usr/bin/env python3
"""ray.data + chute decode vs ray.data + PIL decode: images/s on the same cores.

The same real photos (the JPEGs of /usr/share/wallpapers and
/usr/share/backgrounds: mostly 2560x1600) go through one Ray cluster of
--cpus CPUs four ways, each to 224x224 HWC uint8 and counted by iterating
the dataset's batches:

  chute               chute.ray.read(shards): chute reads and decodes (eval
                      transform: resize the shorter side to 256, centre crop;
                      JPEGs decoded at a reduced DCT scale where the crop allows)
  chute dct_scale=0   the same at full decode resolution (what PIL does)
  bytes + PIL         chute.ray.read(shards, columns=["bytes"]) then
                      map_batches decoding with PIL the way torchvision's
                      Resize(256) + CenterCrop(224) do: same bytes in, only
                      the decoder differs (batch_size=None: Ray fuses the map
                      into the read tasks; with a batch_size it runs as a
                      separate stage, which on 2 CPUs ran one task at a time)
  read_images         Ray's own ray.data.read_images(tree, size=(224, 224))
                      (PIL inside; resizes without a crop)

One run: after a warm-up read (worker start-up is not timed) each
pipeline runs twice, in the order A B C D D C B A, so load that drifts
during the run weighs on all alike; the ratios are chute's rate over each
peer's, measured in the same run.

    PYTHONPATH=build-python/lib-test build-cluster/venv/bin/python bench/ray_decode.py
    (--cpus N, --repeat K copies of the photos, --tiny: a few images, checks it runs)
"""
import argparse
import glob
import io
import os
import shutil
import sys
import time

import numpy as np

SIZE = 224


def photos():
    fs = glob.glob("/usr/share/wallpapers/**/*.jp*g", recursive=True)
    fs += glob.glob("/usr/share/backgrounds/**/*.jp*g", recursive=True)
    return sorted(set(fs))


def make_data(work, repeat, limit):
    import chute
    tree = os.path.join(work, "tree")
    shards = os.path.join(work, "shards")
    src = photos()[:limit] if limit else photos()
    if not src:
        sys.exit("no JPEGs in /usr/share/wallpapers or /usr/share/backgrounds")
    stamp = os.path.join(work, "stamp-%d-%d" % (len(src), repeat))
    if not os.path.exists(stamp):
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(os.path.join(tree, "photos"))
        for r in range(repeat):
            for i, f in enumerate(src):
                shutil.copyfile(f, os.path.join(tree, "photos", "%d-%04d.jpg" % (r, i)))
        chute.pack(tree, shards)
        open(stamp, "w").close()
    return tree, shards, len(src) * repeat


def pil_eval(batch):
    """Decode and transform one batch of encoded images with PIL, as
    torchvision's Resize(256) + CenterCrop(224) do."""
    from PIL import Image
    out = np.empty((len(batch["bytes"]), SIZE, SIZE, 3), np.uint8)
    short = int(SIZE / 0.875)
    for k, blob in enumerate(batch["bytes"]):
        with Image.open(io.BytesIO(blob)) as im:
            im = im.convert("RGB")
            w, h = im.size
            nw, nh = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
            im = im.resize((nw, nh), Image.BILINEAR)
            top, left = int(round((nh - SIZE) / 2.0)), int(round((nw - SIZE) / 2.0))
            out[k] = np.asarray(im.crop((left, top, left + SIZE, top + SIZE)))
    return {"image": out}


def consume(ds):
    n = 0
    for batch in ds.iter_batches(batch_size=64, batch_format="numpy"):
        img = batch["image"]
        assert img.shape[1:] == (SIZE, SIZE, 3) and img.dtype == np.uint8, img.shape
        n += len(img)
    return n


def task_cpu_s(ds):
    """CPU seconds the dataset's tasks used (Ray's per-block process CPU time,
    which counts chute's decode threads too): unlike images/s, not changed by
    other jobs on the cores."""
    total = 0.0

    def walk(summary):
        nonlocal total
        for op in summary.operators_stats:
            total += (op.cpu_time or {}).get("sum", 0.0)
        for parent in summary.parents:
            walk(parent)
    walk(ds._get_stats_summary())
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpus", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--work", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "data", "ray"))
    a = ap.parse_args()
    import chute
    import chute.ray
    import ray
    import ray.data
    tree, shards, n = make_data(a.work, a.repeat, 8 if a.tiny else 0)
    lib = os.path.dirname(os.path.dirname(os.path.abspath(chute.__file__)))
    os.environ["PYTHONPATH"] = lib + os.pathsep + os.environ.get("PYTHONPATH", "")
    ray.init(num_cpus=a.cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    blocks = 4 * a.cpus

    def chute_ds(**kw):
        return chute.ray.read(shards, columns=["image"], size=SIZE, batch_size=32,
                              override_num_blocks=blocks, **kw)

    ways = [
        ("chute", lambda: chute_ds()),
        ("chute dct_scale=0", lambda: chute_ds(dct_scale=False)),
        ("bytes + PIL", lambda: chute.ray.read(shards, columns=["bytes"], batch_size=32,
                                               override_num_blocks=blocks)
         .map_batches(pil_eval, batch_size=None)),
        ("read_images", lambda: ray.data.read_images(tree, size=(SIZE, SIZE), mode="RGB",
                                                     override_num_blocks=blocks)),
    ]
    # Warm-up: start the workers and import PIL/chute in them (not timed).
    consume(chute.ray.read(shards, columns=["image"], size=SIZE, batch_size=8,
                           override_num_blocks=a.cpus).limit(8 * a.cpus))
    consume(ray.data.read_images(tree, size=(SIZE, SIZE), mode="RGB").limit(a.cpus))
    # Each pipeline twice, in the order A B C D D C B A: a load that drifts
    # during the run (other jobs on shared cores) weighs on every pipeline
    # alike; the rate is images over the two runs' total time.
    times = {name: 0.0 for name, _ in ways}
    cpu = {name: 0.0 for name, _ in ways}
    load0 = os.getloadavg()[0]
    for name, make in ways + ways[::-1]:
        ds = make()
        t0 = time.perf_counter()
        got = consume(ds)
        times[name] += time.perf_counter() - t0
        cpu[name] += task_cpu_s(ds)
        if got != n:
            sys.exit("%s delivered %d images, expected %d" % (name, got, n))
    rates = {name: 2 * n / t for name, t in times.items()}
    ray.shutdown()
    print("ray.data decode, %d JPEGs (%s), %d CPUs, ray %s, chute %s, %dx%d uint8; "
          "load average %.1f before, %.1f after (other jobs on these cores)"
          % (n, "tiny" if a.tiny else "wallpapers", a.cpus, ray.__version__, chute.__version__,
             SIZE, SIZE, load0, os.getloadavg()[0]))
    print()
    ms = {name: 1000 * c / (2 * n) for name, c in cpu.items()}
    print("| pipeline | images/s | chute's ratio | task CPU ms/image | its ratio to chute's |")
    print("|---|---|---|---|---|")
    for name, r in rates.items():
        first = name == "chute"
        print("| %s | %.1f | %s | %.1f | %s |"
              % (name, r, "" if first else "%.2fx" % (rates["chute"] / r), ms[name],
                 "" if first else "%.2fx" % (ms[name] / ms["chute"])))
    print()
    print("images/s: chute / bytes+PIL %.2fx, chute dct_scale=0 / bytes+PIL %.2fx, "
          "chute / read_images %.2fx; CPU per image: bytes+PIL / chute %.2fx, "
          "bytes+PIL / chute dct_scale=0 %.2fx, read_images / chute %.2fx"
          % (rates["chute"] / rates["bytes + PIL"],
             rates["chute dct_scale=0"] / rates["bytes + PIL"],
             rates["chute"] / rates["read_images"],
             ms["bytes + PIL"] / ms["chute"], ms["bytes + PIL"] / ms["chute dct_scale=0"],
             ms["read_images"] / ms["chute"]))


if __name__ == "__main__":
    main()
