"""A router written outside the package, registered once, runs everywhere by its name with no edit of the package:
in every network (a deep one with the network's own squash), on the bench from Python, from the command line and from
a plain script (its peak memory measured on a CPU), in chapter 05's measures (quantised inference included), in the
step's FLOP count, in the smoke run and in the epoch timing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from dataclasses import replace

import pytest
import torch
from torch.utils.data import TensorDataset

from capsule_lab import squash, squash_exp
from capsule_lab.models import CapsNet, CapsNetConfig, ConvCapsNet, ConvCapsNetConfig, DeepCapsNet, DeepCapsNetConfig
from capsule_lab.routing import RouterSpec, router_kinds, unregister_router

pytestmark = pytest.mark.slow

#: The router, as a student would write it in a module of their own (21 lines with its registration).
ROUTER = '''
"""Max routing: every input sends its whole vote to the output its vote agrees with most."""
import torch

from capsule_lab import squash
from capsule_lab.routing import Router, RoutingResult, register_router


class MaxRouter(Router):
    def __init__(self, activation=squash):
        super().__init__()
        self.activation = activation

    def forward(self, votes, activations=None, *, history=False):
        mean = self.activation(votes.mean(dim=1))                          # (B, J, D): every vote counted once
        logits = torch.einsum("bijd,bjd->bij", votes, mean)                # each vote's agreement with it
        couplings = torch.nn.functional.one_hot(logits.argmax(dim=2), votes.shape[2]).to(votes.dtype)
        poses = self.activation(torch.einsum("bij,bijd->bjd", couplings, votes))
        return RoutingResult(poses, poses.norm(dim=-1), couplings, logits)


register_router("max", MaxRouter)
'''


@pytest.fixture
def max_router(tmp_path, monkeypatch):
    """The module written to a temporary folder and imported; its kind unregistered afterwards."""
    name = f"router_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(ROUTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module
    for kind in [k for k in router_kinds() if k == "max" or k.startswith(f"{name}:")]:
        unregister_router(kind)
    sys.modules.pop(name, None)


def _images(size=28, n=4):
    g = torch.Generator().manual_seed(0)
    return torch.rand(n, 1, size, size, generator=g), torch.arange(n) % 3


def _by_hand(votes, activation):
    """Max routing computed apart from the module: the argmax of each vote's agreement with the squashed mean."""
    mean = activation(votes.mean(dim=1))
    best = (votes * mean[:, None]).sum(dim=-1).argmax(dim=2)                       # (B, I)
    s = torch.zeros_like(mean)
    for b in range(votes.shape[0]):
        for i in range(votes.shape[1]):
            s[b, best[b, i]] += votes[b, i, best[b, i]]
    return activation(s)


def test_it_runs_in_every_network_by_its_name(max_router):
    torch.manual_seed(0)
    config = CapsNetConfig.slim(image_size=20, conv_channels=8, primary_types=2, classes=3, decoder=False,
                                router="max")
    net = CapsNet(config)
    assert isinstance(net.router, max_router.MaxRouter) and net.config.router == RouterSpec("max")
    x, y = _images(20)
    out = net(x, y)
    u = net.primary(torch.relu(net.conv(x)))
    torch.testing.assert_close(out.poses, _by_hand(net.digits.votes(u), squash), rtol=1e-5, atol=1e-6)
    net.loss(out, x, y).backward()
    assert net.digits.weight.grad.abs().sum() > 0

    deep = DeepCapsNet(DeepCapsNetConfig.quick(conv_channels=(8,), capsules=4, capsule_dim=4, classes=3,
                                               routing_layers=2), router="max")
    assert all(r.activation is squash_exp for r in deep.routers())                 # the network's own squash
    sabour = DeepCapsNet(DeepCapsNetConfig.quick(conv_channels=(8,), capsules=4, capsule_dim=4, classes=3,
                                                 routing_layers=2, squash="sabour"), router="max")
    assert all(r.activation is squash for r in sabour.routers())
    x, y = _images(28)
    assert torch.isfinite(deep.loss(deep(x, y), x, y))

    conv = ConvCapsNet(ConvCapsNetConfig.slim(classes=3, router="max"))
    out = conv(x, y)
    assert len(conv.routers()) == 3 and all(isinstance(r, max_router.MaxRouter) for r in conv.routers())
    assert out.activations.shape == (4, 3) and torch.isfinite(conv.loss(out, x, y))


def test_chapter_05s_measures_and_the_flop_count_take_it(max_router):
    from capsule_lab.measures.cost import stage_flops
    from capsule_lab.measures.parse_trees import quantized_inference
    from capsule_lab.studies.rem import accuracy_by_levels, measure_routing

    torch.manual_seed(1)
    net = CapsNet(CapsNetConfig.slim(conv_channels=8, primary_types=2, decoder=False, router="max")).eval()
    x, y = _images(28, 12)
    data = TensorDataset(x, y)
    plain = measure_routing(net, data, batch_size=5)
    assert plain.couplings.shape == (12, net.config.primary_caps, 10)
    assert 0 <= plain.entropy() <= plain.entropy_ceiling() + 1e-9 and sum(plain.keys().values()) >= 1
    quantised = measure_routing(net, data, batch_size=5, quantize_levels=3)
    grid = quantised.couplings * 2                               # bin centres of K = 3: 0, 0.5, 1
    torch.testing.assert_close(grid, grid.round())
    assert set(accuracy_by_levels(net, data, levels=(2, 11), batch_size=6)) == {2, 11}     # Fig. 7's sweep
    with torch.no_grad(), quantized_inference(net, 2):
        assert net.router.hooked
        net(x)
    assert not net.router.hooked
    flops = stage_flops(net, x[:2])
    assert list(flops) == ["convolutions", "votes", "routing"] and flops["votes"] > 0


@pytest.fixture(scope="module")
def tiny_bench():
    from capsule_lab.course.profiles import chapter_settings
    from capsule_lab.studies.bench.entries import bench_data

    quick = chapter_settings("08", "quick")
    settings = replace(quick, train_size=64, test_size=32, seeds=(0,), rem_rounds=0, timing_repeats=1,
                       schedule=replace(quick.schedule, epochs=1, batch_size=32))
    return settings, bench_data(settings)


def test_the_bench_takes_it_from_python_and_measures_its_memory_on_a_cpu(max_router, tiny_bench, tmp_path):
    from capsule_lab.studies.bench.runner import run_router_bench

    settings, data = tiny_bench
    cache = tmp_path / "cache"
    (record,) = run_router_bench(settings, routers=["max"], data=data, cache=cache, device="cpu", progress=False)
    assert record["router"] == "max" and not record["cached"] and 0 <= record["accuracy"] <= 1
    assert record["peak_memory_mb"] is not None and record["peak_memory_mb"] > 0
    assert record["entropy"] is not None and record["dyr"] is not None
    assert not cache.exists()                                    # a router written elsewhere is never cached


def test_the_bench_takes_it_from_the_command_line(max_router, tiny_bench, tmp_path, monkeypatch, capsys):
    import capsule_lab.course.profiles as profiles
    from capsule_lab.cli import main

    settings, _ = tiny_bench
    monkeypatch.setattr(profiles, "chapter_settings", lambda chapter, profile=None: settings)
    out = tmp_path / "bench.json"
    reference = f"{max_router.__name__}:MaxRouter"               # the class itself, registered by the reference
    assert main(["bench", "routers", "--router", reference, "--no-cache", "--out", str(out)]) == 0
    (record,) = json.loads(out.read_text())
    assert record["router"] == reference and record["peak_memory_mb"] > 0
    assert json.loads(capsys.readouterr().out)["trained"] == 1


def test_the_bench_runs_from_a_plain_script(max_router, tmp_path):
    """No ``if __name__ == "__main__":`` guard: the memory measure must not import the script again."""
    script = tmp_path / "bench_script.py"
    script.write_text(textwrap.dedent(f'''
        import json
        from dataclasses import replace
        from capsule_lab.course.profiles import chapter_settings
        from capsule_lab.studies.bench.runner import run_router_bench
        from capsule_lab.routing import Router, register_router
        import {max_router.__name__} as written

        class Halved(written.MaxRouter):                     # a router defined in the script itself
            pass

        register_router("halved", Halved)
        quick = chapter_settings("08", "quick")
        settings = replace(quick, train_size=64, test_size=32, seeds=(0,), rem_rounds=0, timing_repeats=1,
                           schedule=replace(quick.schedule, epochs=1, batch_size=32))
        records = run_router_bench(settings, routers=["halved"], cache=None, device="cpu", progress=False)
        print(json.dumps([r["peak_memory_mb"] for r in records]))
        '''))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    (peak,) = json.loads(done.stdout.strip().splitlines()[-1])
    assert peak is not None and peak > 0


def test_a_failed_memory_measure_is_recorded_and_the_run_goes_on(max_router, tiny_bench, monkeypatch):
    import capsule_lab.studies.bench as rb
    from capsule_lab.studies.bench import records

    def fails(*args, **kwargs):
        raise RuntimeError("measuring peak memory failed in its process (exit code 1): MemoryError")

    monkeypatch.setattr(records, "peak_memory", fails)
    settings, data = tiny_bench
    records = rb.run_router_bench(settings, routers=["max", "uniform"], data=data, cache=None, device="cpu",
                                  progress=False)
    assert [r["router"] for r in records] == ["max", "uniform"]
    assert all(r["peak_memory_mb"] is None and "MemoryError" in r["peak_memory_error"] for r in records)


def test_the_smoke_run_and_the_epoch_timing_take_it(max_router):
    from capsule_lab.course.epoch_timing import time_epoch
    from capsule_lab.course.smoke import smoke

    results = smoke(profile="quick", routers=["max"])
    assert [(r.chapter, r.model) for r in results] == [("07", "CapsNet max"), ("07", "CapsNet max"),
                                                       ("08", "bench max")]
    assert all(r.ok for r in results), [r.error for r in results]
    timed = time_epoch("08", "quick", device="cpu", train_size=64, test_size=32, repeats=1, routers=["max"])
    assert timed.error == "" and timed.model == "bench max" and timed.epoch_s > 0
