"""Loader.rank_report() (issue 27, the slowest rank): every rank's wait,
gathered over torch.distributed (gloo here, two processes), max and spread
on rank 0.  Rank 1 reads with a 6 ms delay per sample, rank 0 without: rank
1 must be named the slowest.  The expected lists are each rank's own
stats() written by that rank before the report, not the report's."""
import json
import os

import numpy as np
import pytest

import chute
from test_distributed import free_port, run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "rank_report_worker.py")


def test_rank_report_gathers_every_ranks_wait(tree, tmp_path, monkeypatch):
    pytest.importorskip("torch.distributed")
    import test_distributed
    monkeypatch.setattr(test_distributed, "WORKER", WORKER)
    world, port = 2, free_port()
    outs = [str(tmp_path / ("rank%d.json" % r)) for r in range(world)]
    delays = [0, 6000]
    logdir = str(tmp_path / "rank0")  # rank 0: tensorboard=DIR; rank 1: a recording writer
    run_ranks(lambda r: [tree, outs[r], str(r), str(world), str(port), str(delays[r])]
              + ([logdir] if r == 0 else []), lambda r: {}, world, timeout=120)
    res = []
    for o in outs:
        with open(o) as f:
            res.append(json.load(f))
    own_wait = [r["stats"]["wait_s"] for r in res]
    own_frac = [r["stats"]["wait_fraction"] for r in res]
    assert own_wait[1] > own_wait[0] + 0.1, own_wait  # the setup starved rank 1
    for r in res:
        rep = r["report"]
        assert rep["rank"] == r["rank"] and rep["world_size"] == 2
        assert rep["wait_s"] == own_wait  # float64 through gloo: exact
        # Fractions and rates divide by time: the report's own stats() is
        # taken a few ms after the one in the JSON, seconds into the run.
        assert rep["wait_fraction"] == pytest.approx(own_frac, rel=0.02)
        assert rep["window_images_per_sec"] == pytest.approx(
            [x["stats"]["window_images_per_sec"] for x in res], rel=0.02)
        assert rep["slowest_rank"] == 1
        assert rep["max_wait_s"] == own_wait[1]
        assert rep["spread_wait_s"] == own_wait[1] - own_wait[0]
        assert rep["max_wait_fraction"] == max(rep["wait_fraction"])
        assert rep["spread_wait_fraction"] == max(rep["wait_fraction"]) - min(rep["wait_fraction"])
    # Rank 0 logs the summary into its event file at step = its batches
    # handed over (TensorBoard's reader); rank 1 writes nothing.
    step = res[0]["stats"]["batches"]
    assert step == 15
    assert res[1]["written"] == []
    from test_tensorboard import _fetch_tensorboard
    _fetch_tensorboard()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    ea = EventAccumulator(logdir, size_guidance={"scalars": 0})
    ea.Reload()
    got = {}
    for tag in ea.Tags()["scalars"]:
        (e,) = ea.Scalars(tag)
        got[tag] = (e.value, e.step)
    frac = res[0]["report"]["wait_fraction"]

    def f32(v):  # simple_value is a float
        return float(np.float32(v))

    want = {
        "chute/ranks/max_wait_s": (f32(own_wait[1]), step),
        "chute/ranks/spread_wait_s": (f32(own_wait[1] - own_wait[0]), step),
        "chute/ranks/max_wait_pct": (f32(100 * max(frac)), step),
        "chute/ranks/spread_wait_pct": (f32(100 * (max(frac) - min(frac))), step),
        "chute/ranks/slowest_rank": (1.0, step),
    }
    assert got == want


def test_rank_report_writes_to_a_writer(tree):
    class Rec:
        def __init__(self):
            self.calls = []

        def add_scalar(self, tag, value, global_step=None):
            self.calls.append((tag, value, global_step))

    ld = chute.Loader(tree, batch_size=50, size=16, workers=1, read_delay_us=1000)
    for _ in ld:
        pass
    w = Rec()
    rep = ld.rank_report(writer=w)
    got = {tag: (v, s) for tag, v, s in w.calls}
    frac = rep["wait_fraction"]
    step = 3
    assert got == {
        "chute/ranks/max_wait_s": (rep["wait_s"][0], step),
        "chute/ranks/spread_wait_s": (0.0, step),
        "chute/ranks/max_wait_pct": (100 * frac[0], step),
        "chute/ranks/spread_wait_pct": (0.0, step),
        "chute/ranks/slowest_rank": (0, step),
    }


def test_rank_report_without_a_process_group_covers_this_process(tree):
    ld = chute.Loader(tree, batch_size=50, size=16, workers=1)
    for _ in ld:
        pass
    s = ld.stats()
    rep = ld.rank_report()
    assert rep["world_size"] == 1 and rep["slowest_rank"] == 0
    assert rep["wait_s"] == [s["wait_s"]] and rep["spread_wait_s"] == 0
