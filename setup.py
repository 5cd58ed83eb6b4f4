"""Build the chute Python package (python/chute) and its C extension.

The extension (chute._chute) compiles libchute's C sources from src/ into
itself, so nothing has to be built or installed first and the wheel does
not depend on a libchute.so at run time.  It uses only the public API
(include/chute.h).  It links libjpeg, zlib, pthread and m, and libspng when
pkg-config finds it (then CHUTE_HAVE_SPNG=1, as in CMakeLists.txt).
PyTorch is not needed to build it.

    pip install .                         # pyenv / venv python
    /usr/bin/python3 -m pip install --user --break-system-packages .   # Debian's python
    python3 setup.py build_ext --inplace  # for running tests from the checkout

Build products go to build-python/ (not build/, which belongs to CMake).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = "build-python"


def rel(*p):
    return os.path.join(*p)


def library_version():
    text = open(os.path.join(HERE, "include", "chute.h"), encoding="utf-8").read()
    parts = [re.search(r"#define\s+CHUTE_VERSION_%s\s+(\d+)" % k, text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def library_sources():
    """libchute's sources: the CHUTE_SOURCES list of CMakeLists.txt (the
    one place the library's file list lives), else every .c under src/."""
    try:
        cm = open(os.path.join(HERE, "CMakeLists.txt"), encoding="utf-8").read()
        m = re.search(r"set\(\s*CHUTE_SOURCES\s+([^)]*)\)", cm)
        if m:
            files = [f for f in m.group(1).split() if f.endswith(".c") and "$" not in f]
            if files and all(os.path.isfile(os.path.join(HERE, f)) for f in files):
                return files
    except OSError:
        pass
    return sorted(os.path.relpath(f, HERE)
                  for f in glob.glob(os.path.join(HERE, "src", "**", "*.c"), recursive=True))


def pkg_config(name):
    """(include dirs, library dirs, libraries, found) from pkg-config."""
    if not shutil.which("pkg-config"):
        return [], [], [], False
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", name], check=True,
                             capture_output=True, text=True).stdout.split()
    except (subprocess.CalledProcessError, OSError):
        return [], [], [], False
    inc = [t[2:] for t in out if t.startswith("-I")]
    libdirs = [t[2:] for t in out if t.startswith("-L")]
    libs = [t[2:] for t in out if t.startswith("-l")]
    return inc, libdirs, libs, True


def extension():
    include_dirs = [rel("include"), rel("src"), rel("python", "ext")]
    library_dirs = []
    libraries = []
    macros = []
    for name, fallback in (("libjpeg", "jpeg"), ("zlib", "z")):
        inc, ld, libs, found = pkg_config(name)
        include_dirs += inc
        library_dirs += ld
        libraries += libs if found else [fallback]
    inc, ld, libs, found = pkg_config("spng")
    if not found and (os.path.exists("/usr/include/spng.h") or
                      os.path.exists("/usr/local/include/spng.h")):
        libs, found = ["spng"], True
    if found:
        include_dirs += inc
        library_dirs += ld
        libraries += libs
        macros.append(("CHUTE_HAVE_SPNG", "1"))
    else:
        sys.stderr.write("chute: libspng not found, PNG decoding disabled\n")
    libraries += ["pthread", "m"]
    return Extension(
        "chute._chute",
        sources=[rel("python", "ext", "_chute.c")] + library_sources(),
        include_dirs=include_dirs,
        library_dirs=library_dirs,
        libraries=libraries,
        define_macros=macros,
        depends=[rel("include", "chute.h"), rel("python", "ext", "dlpack.h")] +
        glob.glob(rel("src", "**", "*.h"), recursive=True) +
        glob.glob(rel("src", "**", "*.def"), recursive=True),
        extra_compile_args=["-std=gnu11", "-O3", "-fvisibility=hidden", "-Wall",
                            "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
        extra_link_args=["-Wl,--version-script=" + rel("python", "ext", "_chute.map")],
    )


os.chdir(HERE)
os.makedirs(BUILD_BASE, exist_ok=True)

setup(
    name="chute",
    version=library_version(),
    package_dir={"": "python"},
    packages=["chute"],
    package_data={"chute": ["py.typed", "*.pyi"]},
    ext_modules=[extension()],
    zip_safe=False,
    options={
        "build": {"build_base": BUILD_BASE},
        "egg_info": {"egg_base": BUILD_BASE},
        "build_ext": {"parallel": os.cpu_count() or 1},
    },
)
