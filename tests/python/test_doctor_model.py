"""`python -m chute.doctor SOURCE --model resnet50` (issue 14): GPU utilisation
during a real ResNet-50 step.  Here (no GPU, or torch without CUDA) it must
say so on its first line and report what it measured instead: the loader
alone and a CPU step, both positive rates.  On a GPU host
test_doctor_model_on_gpu checks the verdict's figures (needs a GPU).
"""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")


def _doctor(tree, *extra):
    cmd = [sys.executable, "-m", "chute.doctor", str(tree), "--batch", "4", "--size", "32",
           "--steps", "2", "--warmup", "1", "--workers", "2", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_doctor_model_without_gpu_says_so(tree):
    r = _doctor(tree)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("no GPU: torch "), r.stdout
    assert "measured instead: the loader alone and a resnet50 step on the CPU" in r.stdout
    j = _doctor(tree, "--json")
    assert j.returncode == 0, j.stderr
    d = json.loads(j.stdout)
    assert d["gpu"] is None and d["no_gpu"].startswith("torch ")
    assert d["loader_images_per_s"] > 0 and d["cpu_step"]["images_per_s"] > 0
    assert "synthetic" not in d and "fed" not in d


def test_doctor_model_rejects_bad_arguments(tree):
    r = _doctor(tree, "--model", "vgg")
    assert r.returncode == 2 and "invalid choice: 'vgg'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "chute.doctor", str(tree), "--steps", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--steps must be >= 1" in r.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_doctor_model_on_gpu(tree):
    r = _doctor(tree, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["gpu"] and d["synthetic"]["images_per_s"] > 0 and d["chute"]["images_per_s"] > 0
    # NVML samples the busy % during the real step (None only without NVML).
    assert d.get("nvml") or d["chute"]["gpu_busy_pct"] is not None
    assert d["fed"] == pytest.approx(d["chute"]["images_per_s"] / d["synthetic"]["images_per_s"])
    t = _doctor(tree)
    assert "verdict: this GPU is " in t.stdout and "such GPUs" in t.stdout
