"""Shared fixtures for the chute Python tests.

Run from the repository root:

    /usr/bin/python3 -m pytest tests/python

The tests exercise the checkout: the package is first built (incrementally,
`setup.py build`, which drives CMake in build-python/cmake-*/: about 10 s when
the C sources changed, 1-2 s otherwise) into build-python/lib-test/, which
goes first on sys.path, so no stale binary is ever tested and nothing is
written into python/.  Set CHUTE_TEST_INSTALLED=1 to test the installed
package (`pip install .`, or the wheel: scripts/wheel.sh runs a copy of this
directory that way from outside the checkout) instead.  Test data is generated once per session: an ImageFolder tree of
real photos (tests/tools/make_tree.py) and the same tree packed into shards
with chute.pack.
"""
import glob
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_LIB = os.path.join(ROOT, "build-python", "lib-test")


def _build():
    r = subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-lib", TEST_LIB],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.exit("building the chute package failed:\n%s" % (r.stdout + r.stderr)[-4000:],
                    returncode=4)


if not os.environ.get("CHUTE_TEST_INSTALLED"):
    _build()
    sys.path.insert(0, TEST_LIB)
    os.environ["PYTHONPATH"] = TEST_LIB + os.pathsep + os.environ.get("PYTHONPATH", "")

try:
    import chute  # noqa: E402
except ImportError as e:  # pragma: no cover
    pytest.exit("cannot import chute (%s); run `pip install .` or unset CHUTE_TEST_INSTALLED" % e,
                returncode=4)

TREE_IMAGES = 150
TREE_CLASSES = 3


def pytest_report_header(config):
    return "chute %s from %s" % (chute.__version__, os.path.dirname(chute.__file__))


def _clean_env():
    """No inherited distributed settings: tests decide rank/world_size."""
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        os.environ.pop(k, None)


_clean_env()


def make_tree(out, images, classes=TREE_CLASSES, seed=1, max_side=640):
    tool = os.path.join(ROOT, "tests", "tools", "make_tree.py")
    r = subprocess.run([sys.executable, tool, out, "--images", str(images), "--classes",
                        str(classes), "--seed", str(seed), "--max-side", str(max_side)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot make test photos: %s" % (r.stderr.strip() or r.stdout.strip()))
    return out


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    """ImageFolder tree: 150 real photos (JPEG colour/grey/CMYK/progressive, PNG RGB/grey/RGBA)
    in 3 classes."""
    return make_tree(str(tmp_path_factory.mktemp("data") / "tree"), TREE_IMAGES)


@pytest.fixture(scope="session")
def shards(tree, tmp_path_factory):
    """The same tree packed into several small shards."""
    out = str(tmp_path_factory.mktemp("data") / "shards")
    res = chute.pack(tree, out, shard_size=1 << 20, threads=2)
    assert res["files"] == TREE_IMAGES and res["shards"] > 1
    return out


@pytest.fixture(params=["tree", "shards"])
def source(request, tree, shards):
    """Each source kind in turn."""
    return tree if request.param == "tree" else shards


@pytest.fixture(scope="session")
def corrupt_tree(tree, tmp_path_factory):
    """A small tree with one truncated JPEG and one garbage '.jpg'."""
    out = str(tmp_path_factory.mktemp("data") / "corrupt")
    for cls in sorted(os.listdir(tree)):
        os.makedirs(os.path.join(out, cls))
        for f in sorted(os.listdir(os.path.join(tree, cls)))[:10]:
            shutil.copy(os.path.join(tree, cls, f), os.path.join(out, cls, f))
    jpgs = sorted(glob.glob(os.path.join(tree, "class00", "*.jpg")))
    with open(jpgs[0], "rb") as f:
        data = f.read()
    with open(os.path.join(out, "class01", "truncated.jpg"), "wb") as f:
        f.write(data[: len(data) // 3])
    with open(os.path.join(out, "class02", "garbage.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not a jpeg " * 20)
    return out
