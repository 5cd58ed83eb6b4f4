"""chute.Loader's argument checks and messages (issue 31.5).

- Loader(timeout=0.5) raised "TimeoutError: no batch within %.3f s"
  (PyErr_Format has no %f): the message must carry the number.
- Loader(size=True) was accepted as size 1 (1x1 images): a bool is refused
  for every integer option, naming it, except the 0..1 ones that are flags
  kept as numbers (direct_io=True is documented).
"""
import pytest

import chute
from chute import _chute


def test_timeout_message_has_the_number(tree):
    # One worker, 0.3 s per read and 8 samples per batch: no batch in 0.25 s.
    ld = chute.Loader(tree, batch_size=8, size=16, workers=1, read_delay_us=300000, readahead=0,
                      timeout=0.25)
    with pytest.raises(TimeoutError) as e:
        next(iter(ld))
    assert "%" not in str(e.value)
    assert "0.250 s" in str(e.value)
    with pytest.raises(TimeoutError, match=r"no batch within 0\.100 s"):
        ld.next_batch(timeout=0.1)
    ld.close()


def _integer_keywords():
    """Every Python keyword of the option tables that takes a count or a
    size (an integer whose range is not just 0..1)."""
    names = [r[0] for r in _chute.loader_options()
             if "python" in r[5] and r[1] != "bool" and (r[3], r[4]) != (0, 1)]
    names += [r[1] for r in _chute.option_rows()
              if r[0] == "dataset" and "python" in r[6] and r[3] in ("u32", "u64", "i32")
              and (r[8], r[9]) != (0, 1)]
    assert "size" in names and "batch_size" in names and "read_delay_us" in names
    return names


@pytest.mark.parametrize("name", _integer_keywords())
def test_bool_is_refused_for_integer_options(tree, name):
    with pytest.raises(TypeError, match=r"^%s must be an int, not bool" % name):
        chute.Loader(tree, **{name: True})


def test_size_true_is_refused_not_one_pixel(tree):
    with pytest.raises(TypeError, match="size must be an int, not bool"):
        chute.Loader(tree, batch_size=4, size=True)
    with pytest.raises(TypeError, match="timeout"):
        chute.Loader(tree, timeout=True)
    with pytest.raises(TypeError, match="epoch must be an int"):
        chute.Loader(tree).set_epoch(True)
    with pytest.raises(TypeError, match="shard_size must be an int"):
        chute.pack(tree, "/nonexistent-out", shard_size=True)
    # The extension's own conversion (opt_uint_from_py) refuses it too.
    ds = chute.Dataset(tree)
    with pytest.raises(TypeError, match="size must be an int, not bool"):
        _chute._Loader(ds, size=True)


def test_flag_like_options_still_take_bools(tree):
    ld = chute.Loader(tree, batch_size=4, size=8, drop_last=True, direct_io=False)
    assert ld.drop_last is True
    assert next(iter(ld))[0].shape[-1] == 8


def test_inside_dataloader_workers_says_what_to_do_instead(tree):
    torch = pytest.importorskip("torch")
    import pickle

    ld = chute.Loader(tree, batch_size=5, size=16)

    class Wrapped(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(ld)

    # Linux's default start method, fork: the worker's first next() raises.
    dl = torch.utils.data.DataLoader(Wrapped(), batch_size=None, num_workers=1)
    with pytest.raises(RuntimeError, match=r"(?s)DataLoader worker.*iterate the chute\.Loader"):
        next(iter(dl))
    # spawn/forkserver pickle the dataset: refused with the same advice.
    with pytest.raises(TypeError, match=r"(?s)DataLoader workers.*Iterate the chute\.Loader"):
        pickle.dumps(ld)
    # The parent's loader is unaffected.
    assert len(next(iter(ld))[1]) == 5


def test_dataset_integer_keywords_are_checked(tree):
    # chute.Dataset took True as 1 and cut out-of-range values ("I": 2**32 + 5 -> 5).
    for name in ("read_delay_us", "cache_bytes", "audio_rate", "label_offset"):
        with pytest.raises(TypeError, match=r"^%s must be an int, not bool" % name):
            chute.Dataset(tree, **{name: True})
    with pytest.raises(ValueError, match=r"^read_delay_us must be in 0\.\.10000000, got 4294967301"):
        chute.Dataset(tree, read_delay_us=2 ** 32 + 5)
    with pytest.raises(ValueError, match=r"^label_offset must be in -2147483648\.\.2147483647"):
        chute.Dataset(tree, label_offset=2 ** 31)
    with pytest.raises(TypeError, match=r"^audio_samples must be an int, not str"):
        chute.Dataset(tree, audio_samples="3")
    # 0..1 rows take bools; in-range ints pass.
    ds = chute.Dataset(tree, csv_no_header=True, direct_io=False, read_delay_us=5,
                       label_offset=-1)
    assert len(ds) > 0
