"""What routing and training cost (``capsule_lab.measures.cost``): FLOP counts by hand, the timing helper, the JSON
report on a tiny shape, one training step as fit takes it, and peak memory against an allocation of known size."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from capsule_lab.measures import cost
from capsule_lab.cli import main


def test_routing_flops_by_hand():
    # Sabour's digit layer, r = 3. Forming the votes: 2·128·1152·10·16·8 = 377,487,360 FLOPs; a weighted sum
    # or agreement on stored votes: 2·128·1152·10·16 = 47,185,920. Forward: 2r − 1 = 5 of them.
    flops = cost.routing_flops(128, 1152, 8, 10, 16, 3)
    assert flops["materialised"] == {"forward": 377_487_360 + 5 * 47_185_920,
                                     "forward_backward": 3 * (377_487_360 + 5 * 47_185_920)}
    assert flops["vote_free"] == {"forward": 5 * 377_487_360, "forward_backward": 15 * 377_487_360}
    assert round(flops["materialised"]["forward"] / 1e9, 2) == 0.61  # the numbers chapter 02 quotes
    assert round(flops["vote_free"]["forward"] / 1e9, 2) == 1.89
    # All sizes 1, one iteration: the votes (2) + one weighted sum (2) materialised; one contraction (2) vote-free.
    assert cost.routing_flops(1, 1, 1, 1, 1, 1) == {"materialised": {"forward": 4, "forward_backward": 12},
                                                     "vote_free": {"forward": 2, "forward_backward": 6}}
    with pytest.raises(ValueError, match="iterations"):
        cost.routing_flops(1, 1, 1, 1, 1, 0)


def test_routing_flops_count_the_operations_torch_runs():
    # An independent count: torch's FLOP counter on the materialised form's contractions (votes by einsum,
    # then r weighted sums and r − 1 agreements on the stored votes), and on the vote-free form's.
    from torch.utils.flop_counter import FlopCounterMode

    B, I, D_in, J, D, r = 3, 5, 4, 2, 6, 3
    u, W = torch.randn(B, I, D_in), torch.randn(I, J, D, D_in)
    c, v = torch.rand(B, I, J), torch.randn(B, J, D)
    with FlopCounterMode(display=False) as materialised:
        votes = torch.einsum("ijdk,bik->bijd", W, u)
        for _ in range(r):
            torch.einsum("bij,bijd->bjd", c, votes)
        for _ in range(r - 1):
            torch.einsum("bijd,bjd->bij", votes, v)
    with FlopCounterMode(display=False) as vote_free:
        for _ in range(r):
            torch.einsum("ijdk,bij,bik->bjd", W, c, u)        # Σ_{i,k} (c_ij u_ik) W_ij[:, k]
        for _ in range(r - 1):
            torch.einsum("ijdk,bjd,bik->bij", W, v, u)        # ⟨u_i, W_ijᵀ v_j⟩
    flops = cost.routing_flops(B, I, D_in, J, D, r)
    assert materialised.get_total_flops() == flops["materialised"]["forward"]
    # The vote-free agreement also takes the dot product of W_ijᵀ v_j with u_i: 2·B·I·J·D_in FLOPs each, not
    # counted by routing_flops (D times smaller than the contraction).
    assert vote_free.get_total_flops() == flops["vote_free"]["forward"] + (r - 1) * 2 * B * I * J * D_in


def test_time_median_is_the_median():
    times = iter([0.0, 5.0, 0.1])  # warm-up call uses none of them
    calls = []
    clock = iter([0.0, 1.0, 10.0, 13.0, 20.0, 20.5])  # three runs: 1 s, 3 s, 0.5 s

    def fn():
        calls.append(1)

    real = cost.time.perf_counter
    cost.time.perf_counter = lambda: next(clock)
    try:
        assert cost.time_median(fn, repeats=3, warmup=1) == 1.0
    finally:
        cost.time.perf_counter = real
    assert len(calls) == 4
    with pytest.raises(ValueError):
        cost.time_median(fn, repeats=0)


@pytest.mark.slow
def test_bench_routing_report_on_a_tiny_shape(monkeypatch, capsys):
    monkeypatch.setitem(cost.ROUTING_SHAPES, "tiny", (4, 6, 2, 3, 4, 2))
    assert main(["bench", "routing", "--device", "cpu", "--repeats", "2", "--shapes", "tiny"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "cpu" and report["matmul_gflops"] > 0
    tiny = report["shapes"]["tiny"]
    flops = cost.routing_flops(4, 6, 2, 3, 4, 2)
    for impl in cost.IMPLEMENTATIONS:
        assert tiny[impl]["gflop_forward"] == round(flops[impl]["forward"] / 1e9, 3)
        assert tiny[impl]["forward_backward_x_bound"] > 0
        assert tiny[impl]["forward_ms"] > 0 and tiny[impl]["forward_backward_ms"] > 0
        assert tiny[impl]["peak_memory_mb"] >= 0
    with pytest.raises(ValueError, match="unknown shape"):
        cost.bench_routing("cpu", shapes=("huge",))


def test_a_training_step_is_timed_and_taken():
    from capsule_lab.models import CapsNet, CapsNetConfig

    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.slim(conv_channels=4, primary_types=2, decoder=False))
    before = [p.detach().clone() for p in model.parameters()]
    images, labels = torch.rand(3, 1, 28, 28), torch.tensor([1, 2, 3])
    timing = cost.training_step_seconds(model, images, labels, repeats=3, warmup=1)
    assert len(timing["times_s"]) == 3 and all(t > 0 for t in timing["times_s"])
    assert timing["median_s"] == sorted(timing["times_s"])[1]
    mean = sum(timing["times_s"]) / 3
    sd = (sum((t - mean) ** 2 for t in timing["times_s"]) / 2) ** 0.5
    assert timing["mean_s"] == pytest.approx(mean) and timing["stderr_s"] == pytest.approx(sd / 3 ** 0.5)
    assert timing["batch"] == 3 and timing["device"] == "cpu" and timing["threads"] == torch.get_num_threads()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))    # 4 Adam steps were taken
    with pytest.raises(ValueError, match="labels must be a tensor of shape"):
        cost.training_step_seconds(model, images, labels[:2])
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        cost.training_step_seconds(model, images, labels, repeats=0)


def test_a_training_step_with_amp_on_a_cpu_is_the_fp32_step():
    """amp=True runs fit's mixed-precision path (autocast, gradient scaler), which switches off on a CPU: the steps
    taken must be exactly the full-precision ones, and must be taken."""
    from capsule_lab.models import CapsNet, CapsNetConfig

    images, labels = torch.rand(3, 1, 28, 28), torch.tensor([1, 2, 3])
    models = []
    for amp in (True, False):
        torch.manual_seed(0)
        model = CapsNet(CapsNetConfig.slim(conv_channels=4, primary_types=2, decoder=False))
        start = [p.detach().clone() for p in model.parameters()]
        cost.training_step_seconds(model, images, labels, repeats=2, warmup=1, amp=amp)
        assert any(not torch.equal(a, b) for a, b in zip(start, model.parameters()))
        models.append(model)
    assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))


def test_bench_steps_times_ladders_and_capsnets(monkeypatch, capsys):
    from capsule_lab.models import CapsNetConfig, LadderCapsNetConfig

    # the quick profile's models at a test's size: 28×28, 4 conv channels, 72 primary capsules
    small = {"image_size": 28, "conv_channels": 4, "primary_types": 2}
    ladder = LadderCapsNetConfig.slim(widths=(8,), contribution_widths=(8,), **small)
    monkeypatch.setattr(LadderCapsNetConfig, "slim", classmethod(lambda cls, **ch: replace(ladder, **ch)))
    monkeypatch.setattr(CapsNetConfig, "slim",
                        classmethod(lambda cls, **ch: replace(CapsNetConfig(), **{**ch, **small})))
    assert main(["bench", "steps", "--device", "cpu", "--repeats", "1", "--batch", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["models"]) == ["ladder K=16", "ladder K=32", "ladder K=64", "capsnet r=3", "capsnet r=4",
                                      "capsnet r=5"]
    assert report["batch"] == 2 and report["device"] == "cpu"
    assert all(m["median_s"] > 0 and m["parameters"] > 0 for m in report["models"].values())
    with pytest.raises(ValueError, match="profile must be"):
        cost.step_models("medium")


def test_a_timed_step_is_fits_step():
    """training_step takes the step fit takes (train_step: Adam, the model's own loss): one step of each from the
    same start on the same batch gives the same weights."""
    from torch.utils.data import TensorDataset

    from capsule_lab.models import CapsNet, CapsNetConfig
    from capsule_lab.training import fit

    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([1, 2, 3, 4])
    nets = []
    for _ in range(2):
        torch.manual_seed(0)
        nets.append(CapsNet(CapsNetConfig.slim(conv_channels=4, primary_types=2)))
    cost.training_step(nets[0], images, labels)()
    fit(nets[1], TensorDataset(images, labels), epochs=1, batch_size=4, lr=1e-3, lr_decay=1.0, progress=False)
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(a, b)


def _allocate(megabytes, device="cpu"):
    """A step that holds ``megabytes`` MB of float32 while it runs (peak_memory's test)."""
    return lambda: torch.ones(megabytes * 250_000, device=device).sum()


@pytest.mark.slow
def test_peak_memory_sees_what_a_step_allocates():
    small, large = (cost.peak_memory(_allocate, (mb,)) / 1e6 for mb in (8, 64))
    assert 7 < small < 16 and 60 < large < 80 and large - small == pytest.approx(56, abs=6)


def test_inference_is_timed_in_evaluation_mode_without_gradients():
    from capsule_lab.models import CapsNet, CapsNetConfig

    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append((self.training, torch.is_grad_enabled()))
            return x

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Probe()).train()
    timing = cost.inference_seconds(model, torch.rand(3, 4), repeats=2, warmup=1)
    assert seen == [(False, False)] * 3 and model.training                  # one warm-up, two timed; restored
    assert len(timing["times_s"]) == 2 and timing["median_s"] > 0 and timing["batch"] == 3
    net = CapsNet(CapsNetConfig.slim(conv_channels=4, primary_types=2, decoder=False))
    assert cost.inference_seconds(net, torch.rand(2, 1, 28, 28), repeats=1, amp=True)["device"] == "cpu"
    with pytest.raises(ValueError, match="images must be a tensor"):
        cost.inference_seconds(net, [1, 2])


def test_step_breakdown_counts_each_stage_by_hand():
    """The stages' forward FLOPs against counts by hand (a multiply-add is 2 FLOPs), and the stages' times add up to
    the whole step."""
    from capsule_lab.models import CapsNet, CapsNetConfig, LadderCapsNet, LadderCapsNetConfig
    from capsule_lab.routing import RouterSpec

    B = 3
    images, labels = torch.rand(B, 1, 28, 28), torch.tensor([1, 2, 3])
    small = dict(image_size=28, conv_channels=4, primary_types=2)          # 20×20 conv, a 6×6 grid: 72 capsules
    conv = 2 * B * (20 * 20 * 4 * 81 + 6 * 6 * 16 * 4 * 81)                 # conv 1→4 9×9; primary 4→2·8 9×9/2
    torch.manual_seed(0)
    for vote_free in (False, True):
        net = CapsNet(CapsNetConfig.slim(decoder=False, router=RouterSpec(iterations=2), **small))
        net.digits.vote_free = vote_free
        report = cost.step_breakdown(net, images, labels, repeats=2)
        stages = report["stages"]
        votes = 2 * B * 72 * 10 * 16 * 8
        weighted = 2 * B * 72 * 10 * 16                                    # one weighted sum or agreement, stored votes
        assert stages["convolutions"]["forward_mflop"] * 1e6 == pytest.approx(conv)
        if vote_free:       # 2r − 1 = 3 contractions over (i, k), never forming the votes
            assert list(stages) == ["convolutions", "votes and routing, vote-free (2 iterations)", "loss and Adam"]
            assert stages["votes and routing, vote-free (2 iterations)"]["forward_mflop"] * 1e6 == pytest.approx(3 * votes)
        else:
            assert list(stages) == ["convolutions", "votes", "routing (2 iterations)", "loss and Adam"]
            assert stages["votes"]["forward_mflop"] * 1e6 == pytest.approx(votes)
            assert stages["routing (2 iterations)"]["forward_mflop"] * 1e6 == pytest.approx(3 * weighted)
        assert sum(s["seconds"] for s in stages.values()) == pytest.approx(report["step_s"])
        assert sum(s["share"] for s in stages.values()) == pytest.approx(1)
        assert report["spread_s"] >= 0
    ladder = LadderCapsNet(LadderCapsNetConfig.slim(k=5, widths=(6, 4), contribution_widths=(3,), **small))
    stages = cost.step_breakdown(ladder, images, labels, repeats=2)["stages"]
    assert list(stages) == ["convolutions", "pruning and the weight networks of z", "eqs. 1-4", "loss and Adam"]
    # f and f^reg: 72 → 6 → 4 → 5·8·16 per class; p: 72 → 3 → 5; ten classes each
    f = 10 * (72 * 6 + 6 * 4 + 4 * 5 * 8 * 16)
    p = 10 * (72 * 3 + 3 * 5)
    assert stages["pruning and the weight networks of z"]["forward_mflop"] * 1e6 == pytest.approx(2 * B * (2 * f + p))
    # eq. 1: K·d·D per class for the predictions and K·D for the weighted sum; eq. 2: K·d·D
    assert stages["eqs. 1-4"]["forward_mflop"] * 1e6 == pytest.approx(2 * B * 10 * (2 * 5 * 8 * 16 + 5 * 16))
    with pytest.raises(ValueError, match="must be a capsule_lab.models.CapsuleNetwork"):
        cost.step_breakdown(torch.nn.Linear(2, 2), images, labels)
    with pytest.raises(ValueError, match="images must be a tensor"):
        cost.step_breakdown(ladder, images[0], labels)
