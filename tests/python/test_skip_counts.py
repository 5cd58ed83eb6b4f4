"""Skip counts count samples, not attempts (issue 31.5 / 30.2): a corrupt
sample that is drawn again as another's replacement in the same epoch is
not counted twice, so an epoch's skip count never exceeds the corrupt
samples it holds (before: "42 samples with bad content" of 16, "84" of 40).
The replacement draws are deterministic from the seed, so each seed's
outcome is fixed."""
import io
import os

import numpy as np
import pytest

import chute

PIL = pytest.importorskip("PIL.Image")


def make_tree(root, n, bad):
    rs = np.random.RandomState(0)
    for i in range(n):
        d = os.path.join(root, "c%d" % (i % 2))
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "%03d.jpg" % i)
        if i in bad:
            with open(p, "wb") as f:
                f.write(b"\xff\xd8 this is not a JPEG " + bytes(rs.randint(0, 256, 64, np.uint8)))
        else:
            PIL.fromarray(rs.randint(0, 256, (16, 16, 3), np.uint8)).save(p, "JPEG")


@pytest.mark.parametrize("seed", range(6))
def test_epoch_skip_count_is_at_most_the_corrupt_samples(tmp_path, seed):
    bad = set(range(0, 30, 3))  # 10 of 30
    make_tree(str(tmp_path), 30, bad)
    import warnings
    ld = chute.Loader(str(tmp_path), batch_size=30, size=8, seed=seed, workers=2,
                      as_torch=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for _ in ld:
                pass
        except chute.CorruptDataError:
            pass  # every replacement of one sample was corrupt too: the batch fails
    n = ld.stats()["corrupt"]
    ld.close()
    assert 1 <= n <= len(bad), "epoch counted %d skips, the tree holds %d corrupt" % (n, len(bad))
    msgs = [str(w.message) for w in caught if issubclass(w.category, chute.SkippedSamplesWarning)]
    assert msgs, "no SkippedSamplesWarning"
    import re
    for m in msgs:
        k = re.search(r"(\d+) samples? with bad content", m)
        assert k and int(k.group(1)) <= len(bad), m
