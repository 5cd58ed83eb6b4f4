"""Distributed sharding: every sample exactly once per epoch across ranks, equal lengths."""
import collections
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import chute
from conftest import TREE_IMAGES

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")


def load_json(path):
    with open(path) as f:
        return json.load(f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(argv_for_rank, env_for_rank, world, timeout=180):
    procs = []
    for r in range(world):
        env = dict(os.environ)
        for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR",
                  "MASTER_PORT"):
            env.pop(k, None)
        env.update(env_for_rank(r))
        procs.append(subprocess.Popen([sys.executable, WORKER] + argv_for_rank(r), env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, o in zip(procs, outs):
        assert p.returncode == 0, o


@pytest.mark.parametrize("kind", ["tree", "shards"])
def test_exactly_once_torch_distributed(kind, tree, shards, tmp_path):
    source = tree if kind == "tree" else shards
    world, port = 2, free_port()
    outs = [str(tmp_path / ("rank%d.json" % r)) for r in range(world)]
    run_ranks(lambda r: ["torch", source, outs[r], str(r), str(world), str(port)],
              lambda r: {}, world)
    res = load_json(outs[0])
    seen_orders = []
    for gathered in res["epochs"]:
        lens = {g["len"] for g in gathered}
        assert len(lens) == 1  # same number of batches on every rank
        all_idx = [i for g in gathered for i in g["indices"]]
        assert sorted(all_idx) == list(range(TREE_IMAGES))  # 150 = 2 x 75: exactly once
        assert set(gathered[0]["indices"]).isdisjoint(gathered[1]["indices"])
        seen_orders.append(gathered[0]["indices"])
    assert seen_orders[0] != seen_orders[1]  # set_epoch reshuffles


@pytest.mark.parametrize("env_kind", ["torchrun", "slurm"])
def test_rank_from_environment(env_kind, tree, tmp_path):
    world = 4  # 150 samples over 4 ranks: 38 each, 2 padded from the epoch's start
    outs = [str(tmp_path / ("rank%d.json" % r)) for r in range(world)]
    if env_kind == "torchrun":
        env = lambda r: {"RANK": str(r), "WORLD_SIZE": str(world)}  # noqa: E731
    else:
        env = lambda r: {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(world)}  # noqa: E731
    run_ranks(lambda r: ["env", tree, outs[r]], env, world)
    results = [load_json(o) for o in outs]
    assert [r["rank"] for r in results] == list(range(world))
    assert {r["world"] for r in results} == {world}
    assert {r["from"] for r in results} == {"env" if env_kind == "torchrun" else "slurm"}
    assert len({r["len"] for r in results}) == 1
    all_idx = [i for r in results for i in r["indices"]]
    assert len(all_idx) == 38 * world
    assert set(all_idx) == set(range(TREE_IMAGES))  # every sample at least once ...
    assert len(all_idx) - len(set(all_idx)) == 38 * world - TREE_IMAGES  # ... 2 repeats


def test_remainder_drop_and_len(tree):
    lens = set()
    idx = []
    for r in range(4):
        ld = chute.Loader(tree, batch_size=8, size=8, rank=r, world_size=4, remainder="drop",
                          drop_last=False, return_indices=True, workers=1)
        lens.add(len(ld))
        idx += [int(i) for _, _, b in ld for i in b]
    assert len(lens) == 1
    assert len(idx) == len(set(idx)) == 4 * (TREE_IMAGES // 4)


def test_defaults(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(k, raising=False)
    assert chute.distributed_defaults() == (0, 1, "default")
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    assert chute.distributed_defaults() == (3, 8, "slurm")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert chute.distributed_defaults() == (1, 2, "env")  # torchrun beats SLURM


def test_elastic_resume_gloo_2_killed_then_3(tree, tmp_path):
    """Issue 28: two gloo ranks checkpoint after 3 steps, run 2 more and are
    killed (SIGKILL) mid-epoch; three ranks (another batch size) resume from
    rank 0's checkpoint: the checkpointed part and the resumed part are the
    epoch once (the 2 steps after the checkpoint are redone, as the model's
    are), plus only the PAD fill, with equal batches on the three ranks."""
    ckpt = str(tmp_path / "ckpt.json")
    port, env = free_port(), dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(k, None)
    procs = [subprocess.Popen([sys.executable, WORKER, "elastic-save", tree, ckpt, str(r), "2",
                               str(port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    try:
        deadline = time.time() + 120
        while not all(os.path.exists("%s.rank%d.ready" % (ckpt, r)) for r in range(2)):
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()[0]
            assert time.time() < deadline, "the 2-rank job never reached step 5"
            time.sleep(0.1)
    finally:
        alive = [p.poll() is None for p in procs]
        for p in procs:
            p.kill()
            p.communicate()
    # Both ranks were still running mid-epoch and died of the SIGKILL.
    assert alive == [True, True]
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2
    out = str(tmp_path / "resumed.json")
    port = free_port()
    run_ranks(lambda r: ["elastic-resume", tree, out, str(r), "3", str(port), ckpt],
              lambda r: {}, 3)
    res = load_json(out)
    seen = [i for rank in res["seen"] for i in rank]
    assert len(seen) == 2 * 3 * 16 and len(set(seen)) == len(seen)
    assert len({g["batches"] for g in res["ranks"]}) == 1
    rest = [i for g in res["ranks"] for i in g["indices"]]
    left = TREE_IMAGES - len(seen)
    assert len(rest) == -(-left // 3) * 3
    counts = collections.Counter(seen + rest)
    assert set(counts) == set(range(TREE_IMAGES))
    assert all(c == 1 or (c == 2 and i in seen) for i, c in counts.items())
    # Pixels: each resumed sample's as in an uninterrupted one-process run
    # of epoch 1 (the same crops and flips, whatever rank delivered it).
    ref = {}
    with chute.Loader(tree, batch_size=32, size=16, seed=7, return_indices=True,
                      workers=2) as ld:
        ld.set_epoch(1)
        for images, _, idx in ld:
            for img, i in zip(images, idx.tolist()):
                ref[i] = hashlib.sha256(img.contiguous().numpy().tobytes()).hexdigest()
    got = {int(i): h for g in res["ranks"] for i, h in g["pixels"].items()}
    assert set(got) == set(rest) and all(got[i] == ref[i] for i in got)
