"""The package as installed: chute.features(), the bundled CLI behind `chute` and
`python -m chute`, and the header and library for C users.

These run against the in-tree build (conftest) and, in scripts/wheel.sh, against
the repaired wheel installed into a fresh venv (CHUTE_TEST_INSTALLED=1), where
the `chute` console script sits next to the venv's python.
"""
import io
import os
import subprocess
import sys

import pytest

import chute

FEATURE_NAMES = {"jpeg", "png", "io_uring", "nvml", "s3", "hdf5", "kafka", "cuda", "libdeflate",
                 "coco", "video"}


def _png_bytes():
    Image = pytest.importorskip("PIL.Image")
    buf = io.BytesIO()
    Image.new("RGB", (5, 3), (10, 200, 30)).save(buf, format="PNG")
    return buf.getvalue()


def test_features_names_and_types():
    f = chute.features()
    assert set(f) == FEATURE_NAMES
    assert all(isinstance(v, bool) for v in f.values())
    assert f["jpeg"] is True
    from chute._chute import features as lib_features
    assert f["kafka"] == ("kafka" in lib_features().split())  # librdkafka at build time
    assert f["s3"] == ("s3" in lib_features().split())  # libcurl at build time
    assert f["hdf5"] == ("hdf5" in lib_features().split())
    assert f["coco"] == ("coco" in lib_features().split())  # libjansson at build time


def test_features_libdeflate_is_what_the_extension_links():
    """features()["libdeflate"] names the inflater of gzip HDF5 chunks, which
    moves bench/hdf5.py's gzip row by ~1.6x in CPU (bench/hdf5.py prints it
    beside its figures): it must be what the build linked, read from the
    extension's libraries (ldd), not from the code that reports it."""
    import shutil
    from chute import _chute
    if not shutil.which("ldd"):
        pytest.skip("no ldd here")
    p = _run(["ldd", _chute.__file__])
    assert p.returncode == 0, p.stderr
    linked = "libdeflate" in p.stdout  # auditwheel's vendored copy keeps the name
    assert chute.features()["libdeflate"] == linked, p.stdout


def test_features_png_agrees_with_decoding_a_png():
    """features()["png"] is what the library does, not a guess: a PNG decodes
    exactly when it says True, and fails as unsupported when it says False."""
    data = _png_bytes()
    if chute.features()["png"]:
        assert chute.probe_image(data)[:2] == (5, 3)
    else:
        with pytest.raises(chute.UnsupportedError):
            chute.probe_image(data)


def _run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_python_m_chute_runs_the_bundled_cli():
    p = _run([sys.executable, "-m", "chute", "version"])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "chute " + chute.__version__
    listed = set(lines[1].split()[1:])
    assert lines[1].startswith("features: ")
    f = chute.features()
    want = {k for k in ("jpeg", "png", "io_uring", "nvml", "s3", "cuda", "hdf5", "kafka",
                        "libdeflate", "coco", "video") if f[k]}
    assert want | ({"http"} if f["s3"] else set()) == listed  # libcurl brings both
    p = _run([sys.executable, "-m", "chute", "no-such-command"])
    assert p.returncode == 2 and "unknown command" in p.stderr


def test_python_m_chute_passes_exit_codes_and_prefix():
    p = _run([sys.executable, "-m", "chute", "inspect", "/nonexistent/chute-dataset"])
    assert p.returncode != 0 and "/nonexistent/chute-dataset" in p.stderr
    p = _run([sys.executable, "-m", "chute", "--prefix"])
    assert p.returncode == 0
    assert os.path.samefile(p.stdout.strip(), os.path.dirname(chute.__file__))


def test_console_script_when_installed():
    exe = os.path.join(os.path.dirname(sys.executable), "chute")
    if not os.environ.get("CHUTE_TEST_INSTALLED") or not os.path.exists(exe):
        pytest.skip("no `chute` console script beside %s (not a pip-installed package)"
                    % sys.executable)
    p = _run([exe, "version"])
    assert p.returncode == 0 and p.stdout.startswith("chute " + chute.__version__ + "\n")


def test_include_and_lib_for_c_users():
    assert os.path.isfile(os.path.join(chute.get_include(), "chute.h"))
    lib = os.path.join(chute.get_lib(), "libchute.so")
    assert os.path.isfile(lib)
    pc = open(os.path.join(chute.get_lib(), "pkgconfig", "chute.pc")).read()
    assert "prefix=${pcfiledir}/../.." in pc and "-lchute" in pc
    import ctypes

    so = ctypes.CDLL(lib)
    so.chute_version.restype = ctypes.c_char_p
    so.chute_features.restype = ctypes.c_char_p
    assert so.chute_version().decode() == chute.__version__
    assert ("png" in so.chute_features().decode().split()) == chute.features()["png"]
