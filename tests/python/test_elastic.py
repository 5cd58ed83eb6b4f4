"""Elastic resume (issue 28): a state saved mid-epoch at world size W loads
into loaders at world size W' != W (other worker counts, other batch size):
the rest of the epoch is every sample not yet consumed exactly once across
the new ranks (plus only the PAD repeats of the last row), the same number
of batches on every new rank, and each sample's pixels those of an
uninterrupted run (crops and flips are keyed by seed, epoch and sample).

Ranks are simulated in one process: one loader per rank, each stopped after
the same number of batches, as DDP's lockstep leaves them."""
import collections
import json
import os
import shutil

import pytest
import torch

import chute
from conftest import make_tree

N = 150  # conftest's tree
KW = dict(size=16, transform="train", seed=11, return_indices=True)
EPOCH = 2


def batches(loader, limit=None):
    out = []
    for images, labels, idx in loader:
        out.append((images.clone(), idx.clone()))
        if limit is not None and len(out) == limit:
            break
    return out


_REF = {}


def reference(source, epoch):
    """Every sample's pixels in an uninterrupted run of `epoch` (world 1):
    what any rank of any world size must deliver for that sample."""
    key = (source, epoch)
    if key not in _REF:
        ld = chute.Loader(source, batch_size=32, workers=2, **KW)
        ld.set_epoch(epoch)
        pix = {}
        for images, idx in batches(ld):
            for img, i in zip(images, idx.tolist()):
                pix[i] = img
        ld.close()
        assert sorted(pix) == list(range(N))
        _REF[key] = pix
    return _REF[key]


def run_ranks(source, world, stop=None, state=None, epoch=EPOCH, states=None, **kw):
    """Each rank of `world` runs `epoch` (from `state` if given), stopping
    after `stop` batches (an int, or one per rank); returns (per-rank batch
    lists, rank 0's state); every rank's state is appended to `states`."""
    out, st = [], None
    for r in range(world):
        rstop = stop[r] if isinstance(stop, (list, tuple)) else stop
        ld = chute.Loader(source, rank=r, world_size=world, **dict(KW, **kw))
        if state is not None:
            ld.load_state_dict(json.loads(json.dumps(state)))
        ld.set_epoch(epoch)
        it = iter(ld)
        n_left = len(it)
        got = batches_from(it, rstop)
        if rstop is None:
            assert len(got) == n_left  # the iterator's len() is the run's batches
        out.append(got)
        if r == 0:
            st = ld.state_dict()
        if states is not None:
            states.append(ld.state_dict())
        ld.close()
    return out, st


def batches_from(it, stop):
    out = []
    if stop == 0:
        return out
    for images, labels, idx in it:
        out.append((images.clone(), idx.clone()))
        if stop is not None and len(out) == stop:
            break
    return out


def ids(per_rank):
    return [i for rank in per_rank for _, idx in rank for i in idx.tolist()]


def check_pixels(per_rank, ref):
    for rank in per_rank:
        for images, idx in rank:
            for img, i in zip(images, idx.tolist()):
                assert torch.equal(img, ref[i]), "sample %d differs from the uninterrupted run" % i


CASES = [  # (W, W', batch size before, batch size after, workers before, after)
    (1, 2, 7, 7, 1, 2),
    (2, 3, 7, 7, 2, 1),
    (4, 3, 5, 5, 1, 3),
    (3, 8, 6, 6, 2, 1),
    (2, 3, 8, 5, 1, 2),  # the batch size changes too
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "%d->%d_b%d->%d" % c[:4])
@pytest.mark.parametrize("where", ["first", "mid", "last"])
def test_elastic_resume_global(tree, case, where):
    w0, w1, b0, b1, wk0, wk1 = case
    nb = len(chute.Loader(tree, batch_size=b0, world_size=w0, **KW))
    stop = {"first": 1, "mid": nb // 2, "last": nb - 1}[where]
    before, state = run_ranks(tree, w0, stop, batch_size=b0, workers=wk0)
    assert all(len(r) == stop for r in before)
    assert state["position"] == stop * b0 * w0 < N
    after, state2 = run_ranks(tree, w1, state=state, batch_size=b1, workers=wk1)
    # Equal batch counts on every new rank, equal samples per rank.
    assert len({len(r) for r in after}) == 1
    assert len({sum(len(idx) for _, idx in r) for r in after}) == 1
    seen, rest = ids(before), ids(after)
    left = N - len(seen)
    per = -(-left // w1)  # PAD: ceil
    assert len(rest) == per * w1
    counts = collections.Counter(seen + rest)
    assert set(counts) == set(range(N))  # every sample
    assert len(seen) == len(set(seen))
    assert set(rest) >= set(range(N)) - set(seen)  # everything not yet consumed
    # Repeats: only the PAD fill of the last row, taken from the epoch's head
    # (samples delivered before the resume).
    repeats = [i for i, c in counts.items() if c > 1]
    assert sum(counts[i] - 1 for i in repeats) == per * w1 - left < w1
    assert all(counts[i] == 2 and i in set(seen) for i in repeats)
    check_pixels(before + after, reference(tree, EPOCH))
    assert state2["position"] == N  # the epoch is complete


def test_elastic_resume_shards_source_and_next_epoch(shards):
    # The shard format (global shuffle) resumes elastically as well, and the
    # following epoch is a whole one on the new world size.
    before, state = run_ranks(shards, 2, 3, batch_size=7, workers=1)
    after, _ = run_ranks(shards, 3, state=state, batch_size=7, workers=2)
    seen, rest = ids(before), ids(after)
    assert sorted(set(seen + rest)) == list(range(N)) and len(set(rest) & set(seen)) <= 2
    check_pixels(before + after, reference(shards, EPOCH))
    for r in range(3):
        ld = chute.Loader(shards, rank=r, world_size=3, batch_size=7, **KW)
        ld.load_state_dict(state)
        batches(ld)  # the rest of epoch 2
        nxt = batches(ld)  # epoch 3, no set_epoch: the automatic advance
        fresh = chute.Loader(shards, rank=r, world_size=3, batch_size=7, **KW)
        fresh.set_epoch(EPOCH + 1)
        want = batches(fresh)
        assert ld.epoch == EPOCH + 1 and len(nxt) == len(want) == len(ld)
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                   for a, b in zip(nxt, want))


def test_elastic_resume_drop(tree):
    # remainder="drop": every rank gets floor(left / W') samples; the cut is
    # the permutation's tail: never a repeat, at most W'-1 samples unseen.
    kw = dict(batch_size=6, remainder="drop", workers=1)
    before, state = run_ranks(tree, 4, 2, **kw)
    after, _ = run_ranks(tree, 7, state=state, **kw)
    seen, rest = ids(before), ids(after)
    left = N - len(seen)
    assert len(rest) == (left // 7) * 7 and len({len(r) for r in after}) == 1
    both = seen + rest
    assert len(both) == len(set(both)) and N - len(both) == left % 7
    check_pixels(before + after, reference(tree, EPOCH))


def test_elastic_resume_composes(tree):
    # 2 ranks -> 3 ranks, saved again mid-way -> 8 ranks: the three parts
    # are the epoch exactly once (plus the last row's PAD fill).
    a, s1 = run_ranks(tree, 2, 4, batch_size=5, workers=1)
    b, s2 = run_ranks(tree, 3, 2, state=s1, batch_size=5, workers=2)
    assert s2["position"] == 2 * 5 * 2 * 2 + 2 * 5 * 3
    # A run that began mid-epoch counts batches from there: its state is
    # format /2 (a chute without positions refuses it instead of misreading).
    assert (s1["format"], s2["format"]) == ("chute.Loader/1", "chute.Loader/2")
    with pytest.raises(ValueError, match="position"):
        chute.Loader(tree, world_size=8, batch_size=5, **KW).load_state_dict(
            {k: v for k, v in s2.items() if k != "position"})
    c, _ = run_ranks(tree, 8, state=s2, batch_size=5, workers=1)
    x, y, z = ids(a), ids(b), ids(c)
    assert len(set(x + y)) == len(x + y)
    left = N - len(x) - len(y)
    assert sorted(set(x + y + z)) == list(range(N)) and len(z) == -(-left // 8) * 8
    check_pixels(a + b + c, reference(tree, EPOCH))


def test_state_of_pending_resume_round_trips(tree):
    # A state saved before the resumed run started (e.g. checkpoint at once)
    # is the same resume point.
    _, state = run_ranks(tree, 2, 3, batch_size=7, workers=1)
    ld = chute.Loader(tree, world_size=3, batch_size=7, **KW)
    ld.load_state_dict(state)
    again = ld.state_dict()
    assert again["position"] == state["position"] and again["epoch"] == EPOCH


def test_state_without_position_resumes_elastically(tree):
    # A state written before positions existed (batches_consumed only).
    before, state = run_ranks(tree, 2, 3, batch_size=7, workers=1)
    del state["position"]
    after, _ = run_ranks(tree, 3, state=state, batch_size=7, workers=1)
    seen, rest = ids(before), ids(after)
    assert sorted(set(seen + rest)) == list(range(N))
    assert len(set(seen) & set(rest)) == len(rest) - (N - len(seen))


def test_incompatible_states_refused(tree, shards):
    _, state = run_ranks(tree, 2, 3, batch_size=7, workers=1)
    for change, word in (({"seed": 12}, "seed"), ({"shuffle": False}, "shuffle"),
                         ({"remainder": "drop"}, "remainder")):
        with pytest.raises(ValueError, match=word):
            chute.Loader(tree, world_size=3, batch_size=7, **dict(KW, **change)) \
                .load_state_dict(state)
    other = dict(state, dataset_size=N + 10)  # another dataset
    with pytest.raises(ValueError, match="dataset_size"):
        chute.Loader(tree, world_size=3, batch_size=7, **KW).load_state_dict(other)
    bad = dict(state, position=N + 1)
    with pytest.raises(ValueError, match="position"):
        chute.Loader(tree, world_size=3, batch_size=7, **KW).load_state_dict(bad)
    # Shards mode: each rank's order passes its own shuffle buffer; another
    # world size cannot be exact, so it is refused with the reason ...
    sk = dict(KW, shuffle="shards", shuffle_buffer=20, batch_size=7)
    _, sstate = run_ranks(shards, 2, 3, **sk)
    with pytest.raises(ValueError, match="shards.*world size"):
        chute.Loader(shards, world_size=3, **sk).load_state_dict(sstate)
    with pytest.raises(ValueError, match="shards.*batch size"):
        chute.Loader(shards, world_size=2, **dict(sk, batch_size=5)).load_state_dict(sstate)
    # ... while the same world size (other workers) still resumes exactly.
    ref, _ = run_ranks(shards, 2, **dict(sk, workers=1))
    got, _ = run_ranks(shards, 2, state=sstate, **dict(sk, workers=3))
    for r in range(2):
        assert [b[1].tolist() for b in got[r]] == [b[1].tolist() for b in ref[r][3:]]


def check_rest(before, after, w1):
    """The resumed part `after` (w1 ranks) completes `before`, by set
    arithmetic on what was delivered: every sample not in `before` exactly
    once, equal batch and sample counts per rank, repeats only the PAD fill
    of the last row (< w1, from samples already delivered)."""
    seen, rest = ids(before), ids(after)
    assert len(seen) == len(set(seen))
    assert len({len(r) for r in after}) == 1
    assert len({sum(len(idx) for _, idx in r) for r in after}) == 1
    missing = set(range(N)) - set(seen)
    assert set(rest) >= missing and len(rest) == len(set(rest))
    assert set(rest) - missing <= set(seen) and len(set(rest) - missing) < w1
    assert len(rest) == -(-len(missing) // w1) * w1


def test_every_ranks_state_is_the_same_and_suffices(tree):
    # Lockstep ranks write one state: any rank's checkpoint resumes the job.
    states = []
    before, _ = run_ranks(tree, 4, 3, batch_size=5, workers=1, states=states)
    assert len(states) == 4 and all(s == states[0] for s in states[1:])
    assert len(json.dumps(states[0])) < 1024  # a few numbers, no per-sample list
    after, _ = run_ranks(tree, 3, state=states[3], batch_size=4, workers=2)
    check_rest(before, after, 3)
    check_pixels(before + after, reference(tree, EPOCH))


def test_ranks_stopped_at_different_steps_resume_from_the_smallest_position(tree):
    # Not at a lockstep point (rank 1 ran 2 batches further), the ranks'
    # states differ.  The documented merge is the smallest (epoch, position):
    # what every rank consumed; rank 1's 2 extra batches run again.
    states = []
    before, _ = run_ranks(tree, 2, [3, 5], batch_size=6, workers=1, states=states)
    assert states[0]["position"] < states[1]["position"]
    merged = min(states, key=lambda s: (s["epoch"], s["position"]))
    after, _ = run_ranks(tree, 3, state=merged, batch_size=6, workers=1)
    common = [r[:3] for r in before]  # the batches every rank had consumed
    check_rest(common, after, 3)
    assert set(ids([before[1][3:]])) <= set(ids(after))  # delivered again
    check_pixels(after, reference(tree, EPOCH))


def test_resume_points_inside_the_new_global_batch(tree):
    # Positions that are no multiple of W' * B' (nor of B'): the new ranks
    # start mid-way through what would be one of their global batches.
    for stop in (1, 2, 5):
        before, state = run_ranks(tree, 3, stop, batch_size=7, workers=1)
        assert state["position"] % (2 * 4) != 0 and state["position"] % 4 != 0
        after, _ = run_ranks(tree, 2, state=state, batch_size=4, workers=2)
        check_rest(before, after, 2)
        check_pixels(after, reference(tree, EPOCH))


def test_other_dataset_of_the_same_size_refused(tree, tmp_path):
    _, state = run_ranks(tree, 2, 3, batch_size=7, workers=1)
    assert state["dataset_fingerprint"]
    # Same file names, size and classes, other photos (another seed).
    other = make_tree(str(tmp_path / "other"), N, seed=2)
    ld = chute.Loader(other, world_size=3, batch_size=7, **KW)
    with pytest.raises(ValueError, match="another dataset"):
        ld.load_state_dict(state)
    # The same dataset moved elsewhere resumes; so does a state from before
    # fingerprints (it has no such key).
    moved = str(tmp_path / "moved")
    shutil.copytree(tree, moved)
    chute.Loader(moved, world_size=3, batch_size=7, **KW).load_state_dict(state)
    old = {k: v for k, v in state.items() if k != "dataset_fingerprint"}
    ld.load_state_dict(old)
    ld.close()


def test_state_from_a_newer_chute_refused():
    ld = chute.Loader(os.path.join(os.path.dirname(__file__), "..", "fixtures", "fields", "wds"),
                      size=16)
    state = dict(ld.state_dict(), format="chute.Loader/3")
    with pytest.raises(ValueError, match="newer chute"):
        ld.load_state_dict(state)
    ld.close()


WDS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fields", "wds")
STREAM = "pipe:cat " + " ".join(os.path.join(WDS, "fields-%06d.tar" % k) for k in (0, 1))


def test_stream_resume_elsewhere_refused():
    # Each rank reads its own stream: no epoch permutation to re-split, so
    # another world size or batch size cannot be exact and is refused.
    kw = dict(seed=9, shuffle_buffer=3, size=24, return_indices=True)
    with chute.Loader(STREAM, batch_size=2, **kw) as ld:
        next(iter(ld))
        state = ld.state_dict()
    assert state["position"] is None
    for change in (dict(batch_size=3), dict(batch_size=2, world_size=2, rank=0)):
        with chute.Loader(STREAM, **dict(kw, **change)) as ld:
            with pytest.raises(ValueError, match="a stream resumes only at the world size and "
                                                 "batch size it was saved at"):
                ld.load_state_dict(state)
    with chute.Loader(STREAM, batch_size=2, **kw) as ld:  # the C call refuses too
        with pytest.raises(Exception, match="stream has no epoch permutation"):
            ld._core.start_epoch_at(0, 2)
