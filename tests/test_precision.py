"""capsule_lab.training's precision (chapter 02): bfloat16 only where a GPU computes it natively, float16 with a
gradient scaler on an older GPU (free Colab's T4), float32 on a CPU — decided from the device's compute capability,
which these tests mock (this machine has no GPU): every GPU generation below, by its published capability."""

from __future__ import annotations

import pytest
import torch

from capsule_lab import training
from capsule_lab.course.profiles import get_profile

# (GPU, its CUDA compute capability, the autocast dtype mixed precision must use there)
GPUS = [("P100", (6, 0), torch.float16), ("V100", (7, 0), torch.float16), ("T4", (7, 5), torch.float16),
        ("A100", (8, 0), torch.bfloat16), ("RTX 3090", (8, 6), torch.bfloat16), ("L4", (8, 9), torch.bfloat16),
        ("H100", (9, 0), torch.bfloat16)]


@pytest.fixture
def gpu(monkeypatch):
    """Pretend the CUDA device has the given compute capability; record what autocast and GradScaler are asked."""
    asked = {}

    def pretend(capability):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        return asked

    def autocast(device_type, dtype=None, enabled=True):
        asked["autocast"] = (device_type, dtype, enabled)
        return "context"

    def scaler(device="cuda", enabled=True):
        asked["scaler"] = enabled
        return "scaler"

    monkeypatch.setattr(torch, "autocast", autocast)
    monkeypatch.setattr(torch.amp, "GradScaler", scaler)
    return pretend


@pytest.mark.parametrize("name, capability, dtype", GPUS, ids=[g[0] for g in GPUS])
def test_each_gpu_gets_the_half_precision_it_computes_natively(gpu, name, capability, dtype):
    asked = gpu(capability)
    assert training.amp_dtype("cuda") is dtype and training.amp_dtype(torch.device("cuda:0")) is dtype
    training.mixed_precision(torch.device("cuda"), amp=True)
    assert asked["autocast"] == ("cuda", dtype, True)
    training.grad_scaler("cuda", amp=True)
    assert asked["scaler"] is (dtype == torch.float16)          # float16's narrow range needs scaling; bf16 does not
    expected = "float16, gradient scaling" if dtype == torch.float16 else "bfloat16"
    assert training.precision("cuda", amp=True) == f"mixed precision ({expected})"
    # without amp: float32 on every GPU, no scaler, autocast off
    assert training.precision("cuda", amp=False) == "float32"
    training.grad_scaler("cuda", amp=False)
    training.mixed_precision(torch.device("cuda"), amp=False)
    assert asked["scaler"] is False and asked["autocast"] == ("cuda", None, False)


def test_a_cpu_trains_in_float32_without_asking_for_a_gpu(monkeypatch):
    def no_gpu(device=None):
        raise AssertionError("a CPU run must not ask for a GPU's capability")

    monkeypatch.setattr(torch.cuda, "get_device_capability", no_gpu)
    assert training.amp_dtype("cpu") is None and training.precision("cpu", amp=True) == "float32"
    assert not training.grad_scaler("cpu", amp=True).is_enabled()
    with training.mixed_precision(torch.device("cpu"), amp=True):
        assert not torch.is_autocast_enabled("cpu")
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_the_setup_line_names_the_precision_chosen(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert get_profile("full", device="cuda").describe().endswith("mixed precision (float16, gradient scaling)")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert get_profile("full", device="cuda").describe().endswith("mixed precision (bfloat16)")
    assert "precision" not in get_profile("full", device="cpu").describe()          # a CPU line stays as it was
    assert "precision" not in get_profile("quick", device="cuda").describe()         # the quick profile has no AMP
