"""Typed fields from WebDataset tar streams (issue #13): ``pipe:cat X.tar``
and stdin with fields declared in ``extra_keys``, as webdataset writes the
tar (key.jpg, key.cls, key.npy, ...).  The tars are written here with
Python's tarfile, the .npy members with numpy.save and the JPEGs with PIL;
every expected value is what this test wrote, never what chute computed.
The same tar read as a file (format "wds") must give the same values."""
import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from PIL import Image

import chute

NAMES = ["cls", "json", "npy", "mask.npy"]
DECL = ["cls:int64", "json:bytes", "npy:float32[2x3]", "mask.npy:uint8[4x4]"]


def _npy(a):
    b = io.BytesIO()
    np.save(b, a, allow_pickle=False)
    return b.getvalue()


def _jpeg(i):
    rng = np.random.default_rng(100 + i)
    b = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (20, 16, 3), dtype=np.uint8)).save(b, "JPEG")
    return b.getvalue()


def _samples(n, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append({"__key__": "s%03d" % i, "jpg": _jpeg(i), "cls": str(i % 5).encode(),
                    "json": json.dumps({"i": i, "pad": "x" * i}).encode(),
                    "txt": ("text %d" % i).encode(),  # not declared: read past
                    "npy": rng.normal(size=(2, 3)).astype(np.float32),
                    "mask.npy": rng.integers(0, 256, (4, 4), dtype=np.uint8)})
    return out


def _write(path, samples, order=None, mangle=None):
    """One member per field, key.ext, in each sample's order (some with the
    image after the fields, as a writer may put them)."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i, s in enumerate(samples):
            exts = [k for k in s if k != "__key__"]
            if order:
                exts = order(i, exts)
            for ext in exts:
                v = s[ext]
                data = _npy(v) if isinstance(v, np.ndarray) else v
                if mangle:
                    data = mangle(i, ext, data)
                if data is None:
                    continue
                ti = tarfile.TarInfo("%s.%s" % (s["__key__"], ext))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))


def _kw(**kw):
    base = dict(batch_size=8, transform="eval", size=16, dtype="uint8", shuffle=False,
                workers=2, fields=NAMES, return_indices=True, as_torch=False, field_bytes=64)
    base.update(kw)
    return base


def _one_batch(path, **kw):
    with chute.Loader(path, **_kw(**kw)) as ld:
        bs = [dict((k, np.asarray(v).copy()) for k, v in b.items()) for b in ld]
        corrupt = ld.stats()["corrupt"]
    assert len(bs) == 1
    return bs[0], corrupt


def _check(b, samples):
    for pos, i in enumerate(b["indices"].tolist()):
        s = samples[i]
        assert b["labels"][pos] == i % 5
        assert b["cls"][pos] == int(s["cls"])
        n = int(b["json_lengths"][pos])
        assert b["json"][pos, :n].tobytes() == s["json"]
        assert np.array_equal(b["npy"][pos], s["npy"])
        assert b["npy"][pos].dtype == np.float32
        assert np.array_equal(b["mask.npy"][pos], s["mask.npy"])


@pytest.fixture
def good_tar(tmp_path):
    samples = _samples(8)
    path = str(tmp_path / "good.tar")
    # Samples 1, 4, 7: the image after the fields.
    _write(path, samples, order=lambda i, e: e[1:] + e[:1] if i % 3 == 1 else e)
    return path, samples


def test_pipe_tar_fields_equal_what_was_written_and_the_wds_file(good_tar):
    path, samples = good_tar
    b, corrupt = _one_batch("pipe:cat " + path, extra_keys=DECL)
    assert b["indices"].tolist() == list(range(8)) and corrupt == 0
    _check(b, samples)
    assert b["npy"].shape == (8, 2, 3) and b["mask.npy"].shape == (8, 4, 4)
    f, _ = _one_batch(path, format="wds")
    assert f["indices"].tolist() == list(range(8))
    _check(f, samples)
    for k in NAMES + ["json_lengths", "images", "labels"]:
        assert np.array_equal(b[k], f[k]), k
    # Shuffled through the stream's buffer: the same values per sample.
    s, _ = _one_batch("pipe:cat " + path, extra_keys=",".join(DECL), shuffle=True,
                      shuffle_buffer=3, seed=5)
    assert sorted(s["indices"].tolist()) == list(range(8))
    _check(s, samples)


def test_stdin_tar_fields(good_tar, tmp_path):
    path, samples = good_tar
    out = str(tmp_path / "got.npz")
    code = ("import sys, numpy as np, chute\n"
            "kw = dict(batch_size=8, transform='eval', size=16, dtype='uint8', shuffle=False,\n"
            "          fields=%r, extra_keys=%r, return_indices=True, as_torch=False)\n"
            "with chute.Loader('-', **kw) as ld:\n"
            "    (b,) = list(ld)\n"
            "    np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in b.items()})\n"
            % (NAMES, DECL))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(chute.__file__)) + os.pathsep + \
        env.get("PYTHONPATH", "")
    with open(path, "rb") as f:
        r = subprocess.run([sys.executable, "-c", code, out], stdin=f, capture_output=True,
                           text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    with np.load(out) as z:
        b = {k: z[k] for k in z.files}
    assert b["indices"].tolist() == list(range(8))
    _check(b, samples)


def _bad_npy_header(data):
    # numpy.save's header with its dict broken: "{'descr'..." -> "['descr'..."
    i = data.index(b"{")
    return data[:i] + b"[" + data[i + 1:]


BAD = {  # sample 1 of a two-sample tar: (mangle, what the message says)
    "missing": (lambda i, e, d: None if (i, e) == (1, "npy") else d, "no .npy member"),
    "header": (lambda i, e, d: _bad_npy_header(d) if (i, e) == (1, "npy") else d,
               "npy: header is not a dict"),
    "magic": (lambda i, e, d: b"\x93NUMPX" + d[6:] if (i, e) == (1, "mask.npy") else d,
              "no \\x93NUMPY magic"),
}


@pytest.mark.parametrize("case", sorted(BAD) + ["twice"])
def test_bad_fields_fail_naming_sample_member_and_reason(tmp_path, case):
    path = str(tmp_path / ("%s.tar" % case))
    samples = _samples(2, seed=7)
    if case == "twice":  # mask.npy twice in sample 1 (webdataset raises on it)
        _write(path, samples, order=lambda i, e: e + ["mask.npy"] if i == 1 else e)
        why = "field .mask.npy appears twice in the sample"
    else:
        _write(path, samples, mangle=BAD[case][0])
        why = BAD[case][1]
    with pytest.raises(chute.ChuteError) as e:
        _one_batch("pipe:cat " + path, extra_keys=DECL, on_corrupt="fail")
    msg = str(e.value)
    assert "(sample 's001')" in msg and why in msg, msg
    # Skip: counted, the good sample delivered in its place, as the file does.
    with pytest.warns(chute.SkippedSamplesWarning, match="s001"):
        b, corrupt = _one_batch("pipe:cat " + path, extra_keys=DECL, on_corrupt="skip")
    assert corrupt == 1 and b["indices"].tolist() == [0, 0]
    _check(b, samples)
    with pytest.warns(chute.SkippedSamplesWarning, match="s001"):
        f, fc = _one_batch(path, format="wds", on_corrupt="skip")
    assert fc == 1 and f["indices"].tolist() == [0, 0]
    for k in NAMES:
        assert np.array_equal(b[k], f[k]), k


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_a_npy_of_another_shape_is_refused_never_replaced(tmp_path, policy):
    """A .npy whose shape differs from the field's is the data varying, not
    damage: the epoch fails naming the sample and both shapes, under either
    policy, on the stream as in the file; no sample is delivered in its
    place and none is counted as corrupt."""
    path = str(tmp_path / "shape.tar")
    samples = _samples(2, seed=7)
    samples[1]["npy"] = np.zeros((3, 2), np.float32)
    _write(path, samples)
    for src, kw, origin in [("pipe:cat " + path, dict(extra_keys=DECL), "as declared in "
                             "extra_keys"),
                            (path, dict(format="wds"), 'learned from %s@0: sample "s000"' % path)]:
        with pytest.raises(chute.InvalidArgumentError) as e:
            _one_batch(src, on_corrupt=policy, **kw)
        msg = str(e.value)
        assert "s001" in msg and ('field "npy": this sample\'s value is a .npy of float32[3,2], '
                                  'but the field is float32[2,3] (%s)' % origin) in msg, msg


def test_declarations_the_wds_format_reads_otherwise_are_refused(good_tar):
    path, _ = good_tar
    for decl, why in [("npy:float32[4]", None), ("json:int64", "reads a .json member as bytes"),
                      ("cls:bytes", "as an int64 scalar"), ("jpg:bytes", "image member")]:
        if why is None:  # declared with another shape: refused at the first sample
            with pytest.raises(chute.InvalidArgumentError,
                               match=r"float32\[2,3\], but the field is float32\[4\]"):
                _one_batch("pipe:cat " + path, extra_keys=[decl], fields=["npy"],
                           on_corrupt="fail")
            continue
        with pytest.raises(chute.ChuteError, match=why):
            chute.Loader("pipe:cat " + path, **_kw(extra_keys=[decl], fields=None))
