#!/usr/bin/env python3
"""Seeds for fuzz_stream_tfr and fuzz_kafka_uri (tests/fuzz/corpus/).

stream_tfr: the records of fixtures/fields/tfr/fields.tfrecord and
tfr_bad/bad.tfrecord (written by TensorFlow's TFRecordWriter, see
fixtures/make_fixtures.py) as values as-is (mode byte 2) and as bare
Examples for the harness to frame (mode 1), plus declarations (mode 0),
and whole streams (mode 3): fields.tfrecord plain, gzip'd (two members)
and zlib'd by Python's gzip/zlib, and TensorFlow's own GZIP/ZLIB files.
kafka_uri: URIs of every query key, escapes and client properties, one
with state bytes after a NUL.  tarstream: WebDataset-style tars (tarfile,
numpy.save) whose members are the fields fuzz_tarstream declares, with a
broken .npy header, a .npy of another shape, a declared member twice and a
missing one.  Plain Python and numpy: no TensorFlow needed.

    python3 tests/fuzz/make_stream_seeds.py
"""
import gzip
import io
import os
import struct
import tarfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures", "fields")


def records(path):
    b = open(path, "rb").read()
    out, p = [], 0
    while p + 16 <= len(b):
        (n,) = struct.unpack_from("<Q", b, p)
        out.append(b[p:p + 16 + n])
        p += 16 + n
    return out


def write(sub, name, data):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    good = records(os.path.join(FIX, "tfr", "fields.tfrecord"))
    bad = records(os.path.join(FIX, "tfr_bad", "bad.tfrecord"))
    for i, r in enumerate(good[:2]):
        write("stream_tfr", "framed_%d" % i, b"\x02" + r)
        write("stream_tfr", "example_%d" % i, b"\x01" + r[12:-4])
    write("stream_tfr", "framed_bad_bbox", b"\x02" + bad[1])
    write("stream_tfr", "example_bad_mask", b"\x01" + bad[2][12:-4])
    whole = open(os.path.join(FIX, "tfr", "fields.tfrecord"), "rb").read()
    cut = len(good[0]) + 5  # the second member starts inside record 1
    write("stream_tfr", "stream_plain", b"\x03" + whole)
    write("stream_tfr", "stream_gzip_2members", b"\x03" + gzip.compress(whole[:cut], mtime=0) +
          gzip.compress(whole[cut:], mtime=0))
    write("stream_tfr", "stream_zlib", b"\x03" + zlib.compress(whole))
    for name in ("gzip.tfrecord.gz", "zlib.tfrecord.zz"):
        tf = open(os.path.join(FIX, "..", name), "rb").read()
        write("stream_tfr", "stream_tf_" + name.split(".")[0], b"\x03" + tf)
    write("stream_tfr", "decl", b"\x00bbox:float32[4], ids:int64[3],weight:float32,meta:bytes,"
          b"mask.npy:uint8[4x4],t.npy:float64[]")
    write("stream_tfr", "decl_bad", b"\x00a.npy:uint8[3,4],b:int32")
    uris = {
        "group": b"kafka://h1:9092,h2:9093/topicA,topicB?group=G",
        "all_keys": b"kafka://127.0.0.1:9092/t?group=g&assign=ranks&label_header=label&until=eof"
                    b"&max_samples=37&max_unreleased=16&error_timeout_ms=2000&commit_interval_ms=50",
        "label_key": b"kafka://b/t%2Cx?group=g%20h&label_key=cls&assign=group",
        "props": b"kafka://b/t?group=g&kafka.session.timeout.ms=6000&kafka.sasl.password=s3cret"
                 b"&kafka.security.protocol=SASL_SSL",
        "reserved": b"kafka://b/t?group=g&kafka.enable.auto.commit=true",
        "bad_escape": b"kafka://b/t%zz?group=g",
        "no_group": b"kafka://b/t?until=eof",
        "with_state": b"kafka://b/t?group=g\x00" +
                      open(os.path.join(HERE, "corpus", "kafka_state", "four_partitions"), "rb").read(),
    }
    for k, v in uris.items():
        write("kafka_uri", k, v)
    tar_seeds()


def npy(a):
    b = io.BytesIO()
    np.save(b, a, allow_pickle=False)
    return b.getvalue()


def tar_of(members):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return b.getvalue()


def tar_seeds():
    """Members named as fuzz_tarstream's DECL declares them."""
    rng = np.random.default_rng(13)
    jpg = b"\xff\xd8\xff\xe0" + bytes(12)  # not decoded by the target: any bytes

    def sample(key, **over):
        m = {"jpg": jpg, "cls": b"3", "json": b'{"a": 1}', "txt": b"hi",
             "npy": npy(rng.normal(size=(2, 3)).astype(np.float32)),
             "ids.npy": npy(np.arange(4, dtype=np.int64)),
             "mask.npy": npy(rng.integers(0, 256, (4, 4), dtype=np.uint8))}
        m.update(over)
        return [("%s.%s" % (key, k), v) for k, v in m.items() if v is not None]

    good = sample("a")
    hdr = npy(np.zeros((2, 3), np.float32))
    write("tarstream", "fields_good", tar_of(good + sample("b")))
    write("tarstream", "fields_bad", tar_of(
        good + sample("c", npy=hdr.replace(b"{", b"[", 1)) +        # header not a dict
        sample("d", npy=npy(np.zeros((3, 2), np.float32))) +          # another shape
        sample("e", **{"ids.npy": None}) +                            # a declared one missing
        sample("f") + [("f.mask.npy", npy(np.ones((4, 4), np.uint8)))] +  # twice
        sample("g", json=b"j" * 80) + sample("h", cls=b"x1")))       # long json, bad cls


if __name__ == "__main__":
    main()
