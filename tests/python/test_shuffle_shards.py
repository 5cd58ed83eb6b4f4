"""shuffle="shards": files in a seeded order, each read front to back through a
seeded shuffle buffer (docs/DESIGN.md, "Shuffling sequential formats").

What a training job relies on, checked through the public Loader: every sample
exactly once per epoch across ranks (both ways of splitting: by files when
there are at least as many as ranks, else by samples), equal batch counts per
rank, the same order for any worker count, a new order each epoch, resume from
state_dict, and -- with a buffer of 1 -- each file read front to back.
Expected values are structural (which ids, how many, in which runs), never
orders copied from the implementation.
"""
import json
import os

import pytest

import chute

from conftest import TREE_IMAGES

KW = dict(size=16, transform="none", return_indices=True, as_torch=False, workers=2)


def indices(loader, epoch=0, limit=None):
    import numpy as np
    loader.set_epoch(epoch)
    out = []
    for n, (_, _, idx) in enumerate(loader):
        out.extend(int(i) for i in np.asarray(idx))
        if limit is not None and n + 1 == limit:
            break
    return out


@pytest.fixture(scope="module")
def packs(tree, tmp_path_factory):
    """The test tree packed three ways: one shard, a few, many."""
    out = {}
    for name, size in (("one", 1 << 30), ("few", 1 << 20), ("many", 200 << 10)):
        d = str(tmp_path_factory.mktemp("shufshards") / name)
        res = chute.pack(tree, d, shard_size=size, threads=2)
        out[name] = (d, res["shards"])
    assert out["one"][1] == 1 and out["many"][1] > out["few"][1] > 1
    return out


def runs(ids):
    """Maximal runs of consecutive ids (id, id+1, ...)."""
    r = []
    for i in ids:
        if r and i == r[-1][-1] + 1:
            r[-1].append(i)
        else:
            r.append([i])
    return r


@pytest.mark.parametrize("remainder", ["pad", "drop"])
def test_exactly_once_across_ranks(packs, remainder):
    regimes = set()
    for name in ("one", "few", "many"):
        path, nshards = packs[name]
        for world in (1, 2, 3, 5, 8):
            regimes.add(nshards >= world)
            seen, lengths = [], set()
            for rank in range(world):
                ld = chute.Loader(path, batch_size=7, shuffle="shards", shuffle_buffer=5,
                                  rank=rank, world_size=world, remainder=remainder, **KW)
                got = indices(ld, epoch=1)
                lengths.add((len(ld), len(got)))
                seen += got
                ld.close()
            assert len(lengths) == 1, (name, world, lengths)  # DDP stays in step
            n = TREE_IMAGES
            if remainder == "pad":
                per = -(-n // world)
                assert len(seen) == per * world and set(seen) == set(range(n))
                assert sum(seen.count(i) > 1 for i in set(seen)) == per * world - n
            else:
                per = n // world
                assert len(seen) == per * world == len(set(seen))
    assert regimes == {True, False}  # split by files and by samples both ran


def test_same_order_for_any_worker_count_and_epochs_differ(packs):
    path = packs["many"][0]
    a = chute.Loader(path, batch_size=8, shuffle="shards", shuffle_buffer=16, seed=3,
                     **dict(KW, workers=1))
    b = chute.Loader(path, batch_size=8, shuffle="shards", shuffle_buffer=16, seed=3,
                     **dict(KW, workers=3))
    e0 = indices(a, 0)
    assert e0 == indices(b, 0)
    assert sorted(e0) == list(range(TREE_IMAGES))
    e1 = indices(a, 1)
    assert e1 != e0 and e1 == indices(b, 1)
    other = chute.Loader(path, batch_size=8, shuffle="shards", shuffle_buffer=16, seed=4, **KW)
    assert indices(other, 0) != e0
    # The buffer shapes the order; the global shuffle is another order again.
    assert indices(chute.Loader(path, batch_size=8, shuffle="shards", shuffle_buffer=64,
                                seed=3, **KW), 0) != e0
    assert indices(chute.Loader(path, batch_size=8, shuffle="global", seed=3, **KW), 0) != e0


def test_buffer_one_reads_each_shard_front_to_back(packs):
    path, nshards = packs["many"]
    orders = []
    for epoch in range(3):
        ids = indices(chute.Loader(path, batch_size=10, shuffle="shards", shuffle_buffer=1,
                                   **KW), epoch)
        assert sorted(ids) == list(range(TREE_IMAGES))
        # Shards hold consecutive ids: one increasing run per shard (two
        # neighbouring shards read in order would merge into one run).
        r = runs(ids)
        assert 1 <= len(r) <= nshards
        orders.append([x[0] for x in r])
    assert len({tuple(o) for o in orders}) > 1  # the shard order changes per epoch
    assert any(len(runs(o)) > 1 for o in orders)


def test_tree_falls_back_to_runs_of_1024(tree):
    # 150 images are one run of the fallback units: buffer 1 is dataset order.
    ids = indices(chute.Loader(tree, batch_size=10, shuffle="shards", shuffle_buffer=1, **KW), 2)
    assert ids == list(range(TREE_IMAGES))


def test_webdataset_tars_are_units(tree, tmp_path):
    # Tars written by Python's tarfile (key.jpg/.png + key.cls), 3 of them.
    import tarfile
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(tree) for f in fs)
    per = -(-len(files) // 3)
    for t in range(3):
        with tarfile.open(str(tmp_path / ("part-%06d.tar" % t)), "w") as tf:
            for k, f in enumerate(files[t * per:(t + 1) * per]):
                key = "s%06d" % (t * per + k)
                tf.add(f, arcname=key + os.path.splitext(f)[1].lower())
                cls = str(tmp_path / "cls")
                with open(cls, "w") as fh:
                    fh.write("0")
                tf.add(cls, arcname=key + ".cls")
    os.remove(str(tmp_path / "cls"))
    n = len(chute.Dataset(str(tmp_path), format="wds"))
    assert n == len(files)
    firsts = set()
    for epoch in range(4):
        ids = indices(chute.Loader(str(tmp_path), format="wds", batch_size=8, shuffle="shards",
                                   shuffle_buffer=1, **KW), epoch)
        assert sorted(ids) == list(range(n))
        r = runs(ids)
        assert len(r) <= 3 and all(len(x) % per == 0 or x[-1] == n - 1 for x in r)
        firsts.add(ids[0])
    assert len(firsts) > 1  # the tar order changes per epoch


@pytest.mark.parametrize("stop_after", [3, 11])
def test_resume_mid_epoch(packs, stop_after):
    path = packs["few"][0]
    kw = dict(batch_size=6, shuffle="shards", shuffle_buffer=9, seed=8)
    reference = indices(chute.Loader(path, **kw, **KW), epoch=2)
    first = chute.Loader(path, **kw, **dict(KW, workers=1))
    seen = indices(first, epoch=2, limit=stop_after)
    state = json.loads(json.dumps(first.state_dict()))
    assert state["shuffle_mode"] == "shards" and state["shuffle_buffer"] == 9
    resumed = chute.Loader(path, **kw, **dict(KW, workers=3))
    resumed.load_state_dict(state)
    assert seen + indices(resumed, epoch=2) == reference
    # Another mode or buffer cannot resume this order.
    for change in ({"shuffle": "global"}, {"shuffle_buffer": 10}):
        other = chute.Loader(path, **dict(kw, **change), **KW)
        with pytest.raises(ValueError, match="shuffle_"):
            other.load_state_dict(state)


def test_option_values(tree):
    with pytest.raises(ValueError, match="shuffle"):
        chute.Loader(tree, shuffle="sideways", **KW)
    with pytest.raises(ValueError, match="shuffle_buffer"):
        chute.Loader(tree, shuffle="shards", shuffle_buffer=0, **KW)
    ld = chute.Loader(tree, shuffle="global", **KW)
    assert ld.shuffle and ld.state_dict()["shuffle_mode"] == "global"
    # Old state dicts (no shuffle_mode) were global shuffles.
    st = ld.state_dict()
    del st["shuffle_mode"], st["shuffle_buffer"]
    ld.load_state_dict(st)
