"""WebDataset messages that name the real cause (issue 31.5), on tars
written by Python's tarfile with PIL JPEGs:

- every .cls is "3.0" or "99999999999999999999": the open used to say
  "no sample has both an image and a .cls label" although each sample has
  one; now it names the first member, what it holds and why it is refused;
- half the samples lack .cls: `chute inspect` used to count their valid
  JPEGs as "undecodable"; now they are samples the format could not give,
  with the reason, and the class counts hold only the labelled ones."""
import io
import json
import subprocess
import sys
import tarfile

import pytest

import chute

PIL = pytest.importorskip("PIL.Image")


def jpeg():
    b = io.BytesIO()
    PIL.new("RGB", (8, 8), (1, 2, 3)).save(b, "JPEG")
    return b.getvalue()


def write_tar(path, samples):
    with tarfile.open(path, "w") as t:
        for key, members in samples:
            for ext, data in members:
                ti = tarfile.TarInfo("%s.%s" % (key, ext))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))


@pytest.mark.parametrize("cls,why", [(b"3.0", "not a decimal integer"),
                                     (b"99999999999999999999", "outside the int64 range")])
def test_unreadable_cls_is_named(tmp_path, cls, why):
    p = tmp_path / "bad.tar"
    write_tar(p, [("s%d" % i, [("jpg", jpeg()), ("cls", cls)]) for i in range(3)])
    with pytest.raises(chute.ChuteError) as e:
        chute.Loader(str(p), batch_size=2)
    m = str(e.value)
    assert 'sample "s0"' in m and cls.decode() in m and why in m, m


def test_inspect_tells_missing_labels_from_undecodable(tmp_path):
    p = tmp_path / "half.tar"
    write_tar(p, [("s%02d" % i, [("jpg", jpeg())] + ([("cls", b"%d" % (i % 3))] if i % 2 == 0
                                                     else [])) for i in range(32)])
    r = subprocess.run([sys.executable, "-m", "chute", "inspect", "--json", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["formats"]["jpeg"] == 16 and j["formats"]["undecodable"] == 0, j["formats"]
    assert j["refused"] == 16
    r = subprocess.run([sys.executable, "-m", "chute", "inspect", str(p)], capture_output=True,
                       text=True)
    assert "0 undecodable" in r.stdout and "no .cls label member" in r.stdout, r.stdout
    # labels of the 16 labelled samples only: i % 3 for even i < 32
    want = {0: 6, 1: 5, 2: 5}
    assert "classes: " + " ".join("%d=%d" % kv for kv in want.items()) in r.stdout, r.stdout


@pytest.mark.parametrize("cls,why", [(b"3.0", 'holds "3.0", not a decimal integer'),
                                     (b"cat\n", 'holds "cat?", not a decimal integer'),
                                     (b"99999999999999999999",
                                      'holds "99999999999999999999", outside the int64 range'),
                                     (b"-1", 'holds "-1", a label outside 0..2147483646'),
                                     (b"1" * 40, "is 40 bytes, too long for an integer")])
def test_stream_cls_that_is_no_label_is_named(tmp_path, cls, why):
    """On a tar stream (pipe:cat) the sample whose .cls is no label fails
    (on_corrupt="fail") naming its key, what the member holds and why; it
    used to say only "the .cls member is not a decimal integer"."""
    p = tmp_path / "one_bad.tar"
    write_tar(p, [("s%d" % i, [("jpg", jpeg()), ("cls", cls if i == 2 else b"%d" % i)])
                  for i in range(4)])
    with chute.Loader("pipe:cat " + str(p), batch_size=4, size=8, shuffle=False,
                      on_corrupt="fail", as_torch=False) as ld:
        with pytest.raises(chute.CorruptDataError) as e:
            next(iter(ld))
    m = str(e.value)
    assert "s2" in m and "the .cls member " + why in m, m
