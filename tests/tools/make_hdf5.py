#!/usr/bin/env python3
"""Write the HDF5 test files with h5py, and beside each what h5py reads back
(tests/test_hdf5.c compares chute's values with these, never with chute's).

  make_hdf5.py DIR

For F.h5: F.images.bin (the images dataset as h5py returns it, raw bytes),
F.labels.bin (int64 little-endian), F.<field>.bin (each field's raw bytes),
and for variable-length images F.vlen.bin (u32 length + bytes per sample).
Exits 77 (skip) when h5py, numpy or PIL is missing."""
import io
import os
import struct
import sys

try:
    import h5py
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover
    print("skip:", e)
    sys.exit(77)


def dump(path, f, names):
    for name in names:
        d = f[name]
        if d.dtype.kind == "O":
            with open(path + ".vlen.bin", "wb") as o:
                for v in d[:]:
                    b = bytes(np.asarray(v, dtype=np.uint8))
                    o.write(struct.pack("<I", len(b)) + b)
            continue
        a = d[:]
        if name == "labels":
            a = a.astype("<i8")
        with open(path + "." + name + ".bin", "wb") as o:
            o.write(np.ascontiguousarray(a).tobytes())


def write(path, images, labels, fields, **kw):
    fields = fields or {}
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, **kw.get("img", {}))
        if labels is not None:
            f.create_dataset("labels", data=labels)
        for k, v in fields.items():
            f.create_dataset(k, data=v, **kw.get("fld", {}))
    with h5py.File(path, "r") as f:
        dump(path, f, list(f.keys()))


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(12)
    N, H, W = 7, 16, 16
    imgs = rng.integers(0, 256, size=(N, H, W, 3), dtype=np.uint8)
    labels = np.array([3, 0, 1, 2, 3, 1, 0], dtype=np.int32)
    fields = {
        "boxes": rng.standard_normal((N, 4)).astype(np.float32),
        "ids": rng.integers(-2**40, 2**40, size=N, dtype=np.int64),
        "mask": rng.integers(-300, 300, size=(N, 5, 6), dtype=np.int16),
    }
    p = lambda name: os.path.join(out, name)
    write(p("contig.h5"), imgs, labels, fields)
    write(p("chunked.h5"), imgs, labels, fields, img={"chunks": (1, H, W, 3)},
          fld={"chunks": True})
    # Chunks that straddle samples and rows, edge chunks, gzip and shuffle.
    write(p("gzip.h5"), imgs, labels, fields,
          img={"chunks": (3, 5, 7, 2), "compression": "gzip", "compression_opts": 6,
               "shuffle": True},
          fld={"chunks": True, "compression": "gzip", "shuffle": True})
    write(p("grey.h5"), imgs[..., 0], labels.astype(np.uint8), None,
          img={"chunks": (2, 16, 16), "compression": "gzip"})
    # Chunks never written (rows 3.. of a gzip dataset with a fill value).
    with h5py.File(p("sparse.h5"), "w") as f:
        d = f.create_dataset("images", (N, H, W, 3), dtype=np.uint8, chunks=(1, H, W, 3),
                             compression="gzip", fillvalue=7)
        d[:3] = imgs[:3]
        f.create_dataset("labels", data=labels)
    with h5py.File(p("sparse.h5"), "r") as f:
        dump(p("sparse.h5"), f, list(f.keys()))
    # One sample per gzip chunk (bench/hdf5.py's layout; chute inflates
    # those straight into the sample), shuffle on uint8 (a no-op filter),
    # and sample 2's chunk written raw with filter mask 2 (deflate not
    # applied), which takes the general path.
    with h5py.File(p("gzip_sample.h5"), "w") as f:
        d = f.create_dataset("images", data=imgs, chunks=(1, H, W, 3), compression="gzip",
                             compression_opts=1, shuffle=True)
        d.id.write_direct_chunk((2, 0, 0, 0), np.ascontiguousarray(imgs[2] ^ 0x5a).tobytes(),
                                filter_mask=2)  # bit 1: deflate (after shuffle)
        f.create_dataset("labels", data=labels)
        f.create_dataset("mask", data=fields["mask"], chunks=(1, 5, 6), compression="gzip")
    with h5py.File(p("gzip_sample.h5"), "r") as f:
        dump(p("gzip_sample.h5"), f, list(f.keys()))
    # Encoded images in a variable-length uint8 dataset (PNG, lossless).
    with h5py.File(p("vlen.h5"), "w") as f:
        d = f.create_dataset("images", (N,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(N):
            b = io.BytesIO()
            Image.fromarray(imgs[i]).save(b, format="PNG")
            d[i] = np.frombuffer(b.getvalue(), dtype=np.uint8)
        f.create_dataset("labels", data=labels)
        f.create_dataset("ids", data=fields["ids"])
    with h5py.File(p("vlen.h5"), "r") as f:
        dump(p("vlen.h5"), f, list(f.keys()))
    # Damaged and wrong inputs.
    with h5py.File(p("float_images.h5"), "w") as f:
        f.create_dataset("images", data=imgs.astype(np.float32))
    with h5py.File(p("two_channels.h5"), "w") as f:
        f.create_dataset("images", data=imgs[..., :2])
    with h5py.File(p("few_labels.h5"), "w") as f:
        f.create_dataset("images", data=imgs)
        f.create_dataset("labels", data=labels[:5])
    with h5py.File(p("lzf.h5"), "w") as f:
        f.create_dataset("images", data=imgs, chunks=(1, H, W, 3), compression="lzf")
    data = open(p("contig.h5"), "rb").read()
    open(p("truncated.h5"), "wb").write(data[: len(data) // 2])
    # A gzip chunk with its deflate stream damaged (sample 4's chunk).
    with h5py.File(p("badchunk.h5"), "w") as f:
        f.create_dataset("images", data=imgs, chunks=(1, H, W, 3), compression="gzip")
        f.create_dataset("labels", data=labels)
    with h5py.File(p("badchunk.h5"), "r") as f:
        info = f["images"].id.get_chunk_info_by_coord((4, 0, 0, 0))
    with open(p("badchunk.h5"), "r+b") as o:
        o.seek(info.byte_offset + info.size // 2)
        o.write(b"\xff" * 16)
    with open(p("badchunk.offset"), "w") as o:
        o.write("%d\n" % info.byte_offset)


if __name__ == "__main__":
    main(sys.argv[1])
