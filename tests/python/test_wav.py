"""The "wav" format (issue #12) through chute.Loader: files written at test
time by soundfile (libsndfile) and Python's `wave` module, every delivered
value compared with soundfile.read(dtype="float32") (bitwise: float32
passes through, integers map exactly), the eval window at the centre
(floor((frames - L) / 2)), the train window deterministic per (seed, epoch)
and different across epochs, shorter files zero-padded with their real
length, class-directory labels, and a sample-rate mismatch raising with
the file and both rates."""
import os
import wave

import numpy as np
import pytest

import chute

sf = pytest.importorskip("soundfile")

RATE = 16000


def L(path, **kw):
    kw.setdefault("as_torch", False)
    kw.setdefault("return_indices", True)
    kw.setdefault("workers", 2)
    kw.setdefault("fields", ["audio", "length"])
    return chute.Loader(str(path), **kw)


def epoch(ld):
    """{index: (audio, length, label)} of one epoch."""
    out = {}
    for b in ld:
        assert isinstance(b, dict) and "images" not in b
        a, n = np.array(b["audio"]), np.asarray(b["length"])
        assert a.dtype == np.float32 and n.dtype == np.int32
        for k, i in enumerate(np.asarray(b["indices"]).tolist()):
            assert i not in out
            out[i] = (a[k], int(n[k]), int(np.asarray(b["labels"])[k]))
    return out


@pytest.fixture
def stereo(tmp_path):
    """A flat directory of stereo files in several encodings and lengths."""
    rs = np.random.RandomState(5)
    d = tmp_path / "stereo"
    d.mkdir()
    lengths = {}
    for k, (sub, fmt) in enumerate([("PCM_16", "WAV"), ("PCM_24", "WAV"), ("PCM_32", "WAV"),
                                    ("FLOAT", "WAV"), ("DOUBLE", "WAV"), ("PCM_U8", "WAV"),
                                    ("PCM_16", "WAVEX"), ("FLOAT", "WAVEX")]):
        n = int(rs.randint(40, 900))
        x = rs.uniform(-1, 1, (n, 2))
        sf.write(str(d / ("f%02d.wav" % k)), x, RATE, subtype=sub, format=fmt)
        lengths["f%02d.wav" % k] = n
    with wave.open(str(d / "w.wav"), "wb") as w:  # Python's wave: 16-bit PCM
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(rs.randint(-32768, 32768, (333, 2)).astype("<i2").tobytes())
    names = sorted(os.listdir(d))
    return d, [sf.read(str(d / f), dtype="float32", always_2d=True)[0] for f in names]


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_every_value_is_soundfiles_and_eval_is_the_centre(stereo):
    d, ref = stereo
    ds = chute.Dataset(str(d))
    assert ds.kind == "wav" and not ds.has_images and len(ds) == len(ref)
    assert ds.fields()[0] == {"name": "audio", "kind": "tensor", "dtype": "float32",
                              "shape": (ref[0].shape[0], 2)}  # default L: the first file's
    Lf = 300
    got = epoch(L(d, transform="eval", audio_samples=Lf, batch_size=4))
    assert sorted(got) == list(range(len(ref)))
    for i, x in enumerate(ref):
        a, n, lab = got[i]
        F = x.shape[0]
        assert a.shape == (Lf, 2) and lab == 0 and n == min(F, Lf)
        s = (F - Lf) // 2 if F > Lf else 0
        assert np.array_equal(bits(a[:n]), bits(x[s:s + n])), i
        assert not a[n:].any()
    # Channels first: the same values transposed.
    got2 = epoch(L(d, transform="eval", audio_samples=Lf, audio_channels_first=1))
    for i in got:
        assert np.array_equal(bits(got2[i][0]), bits(got[i][0].T))


def test_train_window_per_seed_and_epoch(stereo):
    d, ref = stereo
    Lf = 32

    def starts(seed, ep, workers):
        ld = L(d, transform="train", audio_samples=Lf, seed=seed, workers=workers)
        ld.set_epoch(ep)
        out = {}
        for i, (a, n, _) in epoch(ld).items():
            x = ref[i]
            hits = [s for s in range(x.shape[0] - Lf + 1)
                    if np.array_equal(bits(x[s:s + Lf]), bits(a))]
            assert n == Lf and hits, i  # a window of the file, as soundfile reads it
            out[i] = hits[0]
        return out

    a, b, c, e = starts(1, 2, 1), starts(1, 2, 3), starts(1, 3, 2), starts(9, 2, 2)
    assert a == b
    assert sum(a[i] != c[i] for i in a) >= len(a) // 2
    assert sum(a[i] != e[i] for i in a) >= len(a) // 2


def test_class_directories_and_torch_dict(tmp_path):
    for c, n in (("dog", 3), ("cat", 2)):
        (tmp_path / c).mkdir()
        for k in range(n):
            sf.write(str(tmp_path / c / ("%d.wav" % k)), np.zeros((50 + k, 1)), RATE,
                     subtype="PCM_16")
    ld = L(tmp_path, audio_samples=40, as_torch=None, batch_size=5, shuffle=False)
    b = next(iter(ld))
    assert np.asarray(b["labels"]).tolist() == [0, 0, 1, 1, 1]  # cat, cat, dog x3
    assert tuple(b["audio"].shape) == (5, 40, 1)


def test_sample_rate_mismatch_raises_naming_file_and_rates(tmp_path):
    sf.write(str(tmp_path / "a.wav"), np.zeros((100, 1)), 16000, subtype="PCM_16")
    sf.write(str(tmp_path / "b.wav"), np.zeros((100, 1)), 22050, subtype="PCM_16")
    with pytest.raises(chute.InvalidArgumentError, match=r"a\.wav.*16000.*22050"):
        L(tmp_path, audio_rate=22050)
    ld = L(tmp_path, audio_samples=50, on_corrupt="skip", shuffle=False, batch_size=2)
    with pytest.raises(chute.InvalidArgumentError, match=r"b\.wav.*22050.*16000"):
        epoch(ld)


def test_truncated_file_names_file_and_offset(tmp_path):
    sf.write(str(tmp_path / "a.wav"), np.zeros((500, 1)), RATE, subtype="PCM_16")
    sf.write(str(tmp_path / "b.wav"), np.zeros((500, 1)), RATE, subtype="PCM_16")
    raw = (tmp_path / "b.wav").read_bytes()
    (tmp_path / "b.wav").write_bytes(raw[:-300])
    with pytest.raises(chute.CorruptDataError, match=r"b\.wav@40.*claims 1000 bytes"):
        epoch(L(tmp_path, audio_samples=50, on_corrupt="fail", shuffle=False))


def test_inspect_and_bench_summarise_a_wav_set(tmp_path):
    """`chute inspect` gives count, rates, channels and durations (as
    soundfile.info reports them); `chute bench` runs the set."""
    import json
    import subprocess
    import sys
    for k, (secs, rate) in enumerate([(0.3, 16000), (1.5, 16000), (3.0, 16000), (0.7, 8000)]):
        sf.write(str(tmp_path / ("%d.wav" % k)), np.zeros((int(secs * rate), 2)), rate,
                 subtype="PCM_24")
    infos = [sf.info(str(tmp_path / ("%d.wav" % k))) for k in range(4)]
    p = subprocess.run([sys.executable, "-m", "chute", "inspect", "--json", str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    a = j["audio"]
    assert j["format"] == "wav" and j["samples"] == 4 and a["files"] == 4 and a["bad"] == 0
    assert a["rates"] == {"16000": 3, "8000": 1} and a["channels"] == {"2": 4}
    assert a["seconds"]["max"] == pytest.approx(max(i.duration for i in infos))
    assert a["seconds"]["min"] == pytest.approx(min(i.duration for i in infos))
    assert a["duration_histogram"] == {"0": 1, "0.5": 1, "1": 1, "2": 1}
    p = subprocess.run([sys.executable, "-m", "chute", "inspect", str(tmp_path)],
                       capture_output=True, text=True)
    assert "sample rates: 16000 Hz (3) 8000 Hz (1)" in p.stdout, p.stdout
    os.remove(tmp_path / "3.wav")  # one rate: the bench runs
    p = subprocess.run([sys.executable, "-m", "chute", "bench", str(tmp_path), "--audio-samples",
                        "4000", "--fields", "audio,length", "--batch-size", "2"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "(wav, train)" in p.stdout, p.stdout + p.stderr
