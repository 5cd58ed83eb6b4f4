"""Build the chute Python package (python/chute) through CMake.

There is one build of libchute: CMakeLists.txt.  This file only drives it.
With -DCHUTE_PYTHON=ON, CMake compiles libchute's sources once (chute_obj),
links them into the extension chute._chute (statically: the module does not
depend on a libchute.so at run time and exports only PyInit__chute), into the
`chute` CLI and into libchute.so, and `cmake --install --component python`
lays the binary part of the package out next to the Python files:

    chute/_chute.cpython-*.so   the extension
    chute/bin/chute             the CLI (`chute` and `python -m chute` run it)
    chute/lib/libchute.so, chute/include/chute.h, chute/lib/pkgconfig/chute.pc
                                for C users (chute.get_lib(), chute.get_include())
    chute/licenses/             the licence of every non-glibc library the
                                binaries link (auditwheel vendors those)

    pip install .                          # any Python >= 3.9 with the build deps
    pip wheel . && auditwheel repair ...   # the manylinux wheel: scripts/wheel.sh
    python3 setup.py build_ext --inplace   # for running from the checkout

Building needs cmake >= 3.18, a C compiler, pkg-config, the Python headers,
libjpeg(-turbo) and zlib; libspng (PNG) and liburing (io_uring in iobench)
are optional.  What is missing is checked first and named, with the package
to install, instead of failing deep inside CMake.  CMake's build tree goes to
build-python/cmake-<python>/ (build/ belongs to the developer's own CMake
build).  PyTorch is not needed to build.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = "build-python"

# Libraries every manylinux system provides (auditwheel does not vendor them),
# so they need no licence in the wheel.
SYSTEM_LIBS = re.compile(r"^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libgcc_s|"
                         r"libutil|libresolv)[.-]")


def library_version():
    text = open(os.path.join(HERE, "include", "chute.h"), encoding="utf-8").read()
    parts = [re.search(r"#define\s+CHUTE_VERSION_%s\s+(\d+)" % k, text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


# (what is checked, how, Debian/Ubuntu package, Fedora package, required)
PREREQS = [
    ("cmake >= 3.18", "cmake", "cmake", "cmake", True),
    ("a C compiler", "cc", "build-essential", "gcc", True),
    ("pkg-config", "pkg-config", "pkg-config", "pkgconf-pkg-config", True),
    ("Python headers (Python.h)", "python", "python3-dev", "python3-devel", True),
    ("libjpeg-turbo headers (jpeglib.h)", "#include <stdio.h>\n#include <jpeglib.h>",
     "libjpeg62-turbo-dev (Ubuntu: libjpeg-turbo8-dev)", "libjpeg-turbo-devel", True),
    ("zlib headers (zlib.h)", "#include <zlib.h>", "zlib1g-dev", "zlib-devel", True),
    ("libspng headers (spng.h) for PNG", "#include <spng.h>", "libspng-dev", "libspng-devel", False),
    ("liburing headers (liburing.h) for io_uring in iobench", "#include <liburing.h>",
     "liburing-dev", "liburing-devel", False),
    ("libdeflate headers (libdeflate.h) for faster HDF5 gzip chunks and PNG level 0",
     "#include <libdeflate.h>", "libdeflate-dev", "libdeflate-devel", False),
]


def _cmake_ok():
    exe = shutil.which("cmake")
    if not exe:
        return False
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    m = re.search(r"version (\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (3, 18)


def _compiles(cc, source):
    try:
        r = subprocess.run(cc + ["-E", "-x", "c", "-", "-o", os.devnull], input=source,
                           capture_output=True, text=True)
    except OSError:
        return False
    return r.returncode == 0


def check_prereqs():
    """Name every missing build prerequisite at once, with its package."""
    cc = (os.environ.get("CC") or "cc").split()
    have_cc = shutil.which(cc[0]) is not None
    missing, optional = [], []
    for what, how, deb, rpm, required in PREREQS:
        if how == "cmake":
            ok = _cmake_ok()
        elif how == "cc":
            ok = have_cc
        elif how == "pkg-config":
            ok = shutil.which("pkg-config") is not None
        elif how == "python":
            ok = os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
        else:
            ok = have_cc and _compiles(cc, how + "\n")
        if not ok:
            (missing if required else optional).append((what, deb, rpm))
    for what, deb, _ in optional:
        sys.stderr.write("chute: optional %s not found (Debian: %s); building without it\n"
                         % (what, deb))
    if missing:
        lines = ["chute: cannot build from source; missing:"]
        lines += ["  - %s   Debian/Ubuntu: %s   Fedora: %s" % m for m in missing]
        lines.append("Install them, e.g. on Debian 12:")
        lines.append("  sudo apt-get install " + " ".join(
            sorted({m[1].split()[0] for m in missing + optional})))
        lines.append("(optional, adds PNG and io_uring: libspng-dev liburing-dev).  "
                     "Or install a prebuilt chute wheel, which needs none of these.")
        sys.exit("\n".join(lines))


def collect_licences(pkgdir, binaries):
    """Copy the licence of every library the binaries link (other than
    glibc's and libgcc's, which every manylinux system has) into
    pkgdir/licenses/: auditwheel vendors exactly those libraries."""
    libs = {}
    for b in binaries:
        try:
            out = subprocess.run(["ldd", b], capture_output=True, text=True).stdout
        except OSError:
            return
        for line in out.splitlines():
            m = re.match(r"\s*(\S+)\s+=>\s+(/\S+)", line)
            if m and not SYSTEM_LIBS.match(m.group(1)):
                libs[m.group(1)] = m.group(2)
    dest = os.path.join(pkgdir, "licenses")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    index = ["Licences of the libraries chute's binaries link, which a repaired wheel",
             "carries in chute.libs/ (library -> package -> file here).", ""]
    for name, path in sorted(libs.items()):
        pkg = None
        if shutil.which("dpkg"):
            r = subprocess.run(["dpkg", "-S", name], capture_output=True, text=True)
            for line in r.stdout.splitlines():
                p, _, f = line.partition(": ")
                if os.path.basename(f.strip()) == name:
                    pkg = p.split(":")[0]
                    break
        src = "/usr/share/doc/%s/copyright" % pkg if pkg else None
        if src and os.path.isfile(src):
            shutil.copyfile(src, os.path.join(dest, pkg + ".txt"))
            index.append("%s -> %s -> %s.txt" % (name, pkg, pkg))
        else:
            index.append("%s (%s) -> licence not found on this system: see its package"
                         % (name, path))
    with open(os.path.join(dest, "README"), "w", encoding="utf-8") as f:
        f.write("\n".join(index) + "\n")


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class cmake_build_ext(build_ext):
    """Build chute._chute, the CLI and libchute.so with CMake, once."""

    def cmake_dir(self):
        key = hashlib.sha1(os.path.realpath(sys.base_prefix).encode()).hexdigest()[:8]
        return os.path.join(HERE, BUILD_BASE, "cmake-%s-%s" % (sys.implementation.cache_tag, key))

    def build_extension(self, ext):
        check_prereqs()
        bdir = self.cmake_dir()
        pkgdir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        cfg = ["cmake", "-S", HERE, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
               "-DCHUTE_BUILD_TESTS=OFF", "-DCHUTE_PYTHON=ON",
               "-DPython_EXECUTABLE=" + sys.executable]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        quiet = [] if self.verbose else ["--log-level=WARNING"]
        subprocess.run(cfg + quiet, check=True)
        subprocess.run(["cmake", "--build", bdir, "-j", jobs, "--target", "chute_python",
                        "chute_cli", "chute"], check=True)
        self.install_component(bdir, pkgdir)

    def install_component(self, bdir, pkgdir):
        for sub in ("bin", "lib", "include"):
            shutil.rmtree(os.path.join(pkgdir, sub), ignore_errors=True)
        subprocess.run(["cmake", "--install", bdir, "--component", "python", "--prefix", pkgdir],
                       check=True, stdout=subprocess.DEVNULL)
        exts = [f for f in os.listdir(pkgdir) if f.startswith("_chute.") and f.endswith(".so")]
        collect_licences(pkgdir, [os.path.join(pkgdir, f) for f in exts] +
                         [os.path.join(pkgdir, "bin", "chute"),
                          os.path.join(pkgdir, "lib", "libchute.so")])

    def copy_extensions_to_source(self):
        # --inplace / editable: the CLI, library and header go beside the module too.
        super().copy_extensions_to_source()
        self.install_component(self.cmake_dir(), os.path.join(HERE, "python", "chute"))


os.chdir(HERE)
os.makedirs(BUILD_BASE, exist_ok=True)

setup(
    name="chute",
    version=library_version(),
    package_dir={"": "python"},
    packages=["chute"],
    package_data={"chute": ["py.typed", "*.pyi"]},
    ext_modules=[CMakeExtension("chute._chute")],
    cmdclass={"build_ext": cmake_build_ext},
    zip_safe=False,
    options={
        "build": {"build_base": BUILD_BASE},
        "egg_info": {"egg_base": BUILD_BASE},
    },
)
