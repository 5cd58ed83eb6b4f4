"""Shared fixtures for the cluster-engine tests (Spark here; Ray's beside).

Run through scripts/test_cluster.sh, in the venv of scripts/cluster_venv.sh
(pyspark, ray, pyarrow pinned; chute is never installed there): the chute
package is built from the checkout into build-python/lib-test/ as
tests/python does, and put on PYTHONPATH so Spark's and Ray's worker
processes import the same build.  Test photos: tests/tools/make_tree.py.
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_LIB = os.path.join(ROOT, "build-python", "lib-test")
sys.path.insert(0, os.path.join(ROOT, "tests"))

if not os.environ.get("CHUTE_TEST_INSTALLED"):
    r = subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-lib", TEST_LIB],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.exit("building the chute package failed:\n%s" % (r.stdout + r.stderr)[-4000:],
                    returncode=4)
    sys.path.insert(0, TEST_LIB)
    os.environ["PYTHONPATH"] = TEST_LIB + os.pathsep + os.environ.get("PYTHONPATH", "")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("CHUTE_REMOTE_TOOLS", os.path.join(ROOT, "build-python", "remote-tools"))

import chute  # noqa: E402,F401
from chute_testlib import tree_rows  # noqa: E402


class Ctx:
    def note(self, msg):
        print(msg, file=sys.stderr)

    def check(self, cond, msg):
        assert cond, msg


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    """[(encoded bytes, label)] of 48 real photos (JPEG and PNG kinds) in
    3 classes, ImageFolder order, and the class names."""
    out = str(tmp_path_factory.mktemp("data") / "tree")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "make_tree.py"), out,
                        "--images", "48", "--classes", "3", "--seed", "5", "--max-side", "320"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot make test photos: %s" % (r.stderr.strip() or r.stdout.strip()))
    return tree_rows(out)


@pytest.fixture(scope="session")
def weed(tmp_path_factory):
    """SeaweedFS (tests/test_remote.py's `weed mini`), its bucket made; the
    AWS_* environment chute and pyarrow read is set for the session (before
    any engine starts: Spark's and Ray's workers inherit it).  (None, why)
    where no server can be had."""
    import chute_testlib as T
    R = T.remote_harness()

    class Weed(R.Weed):
        def ready_probe(self):  # pyarrow instead of boto3 (not in the cluster venv)
            from pyarrow import fs
            s3 = fs.S3FileSystem(endpoint_override="127.0.0.1:%d" % self.port, scheme="http",
                                 access_key=R.AK, secret_key=R.SK, region="us-east-1", allow_bucket_creation=True,
                                 connect_timeout=5, request_timeout=20)
            s3.create_dir("chute-ready")
            with s3.open_output_stream("chute-ready/probe") as f:
                f.write(b"ready")
            with s3.open_input_stream("chute-ready/probe") as f:
                if f.read() != b"ready":
                    raise RuntimeError("probe object read back wrong")
    try:
        w = Weed(Ctx(), str(tmp_path_factory.mktemp("weed")))
    except T.Skip as e:
        yield None, str(e)  # the s3:// tests skip; the others run
        return
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    try:
        for k in saved:
            del os.environ[k]
        for k, v in w.env().items():
            if k.startswith("AWS_"):
                os.environ[k] = v
        from pyarrow import fs
        fs.S3FileSystem(endpoint_override="127.0.0.1:%d" % w.port, scheme="http",
                        access_key=R.AK, secret_key=R.SK, region="us-east-1",
                        allow_bucket_creation=True).create_dir(R.BUCKET)
        yield w, R.BUCKET
    finally:
        w.stop()
        for k in list(os.environ):
            if k.startswith("AWS_"):
                del os.environ[k]
        os.environ.update(saved)
