"""The routing benchmark: FLOP counts by hand, the timing helper, and the JSON report on a tiny shape."""

from __future__ import annotations

import json

import pytest

from capsule_lab import bench
from capsule_lab.cli import main


def test_routing_flops_by_hand():
    # Sabour's digit layer, r = 3: one contraction = 2·128·1152·10·16·8 = 377,487,360 FLOPs;
    # forward = 2r − 1 = 5 contractions, forward + backward = 3 × 5 = 15.
    flops = bench.routing_flops(128, 1152, 8, 10, 16, 3)
    assert flops == {"forward": 5 * 377_487_360, "forward_backward": 15 * 377_487_360}
    assert bench.routing_flops(1, 1, 1, 1, 1, 1) == {"forward": 2, "forward_backward": 6}
    with pytest.raises(ValueError, match="iterations"):
        bench.routing_flops(1, 1, 1, 1, 1, 0)


def test_time_median_is_the_median():
    times = iter([0.0, 5.0, 0.1])  # warm-up call uses none of them
    calls = []
    clock = iter([0.0, 1.0, 10.0, 13.0, 20.0, 20.5])  # three runs: 1 s, 3 s, 0.5 s

    def fn():
        calls.append(1)

    real = bench.time.perf_counter
    bench.time.perf_counter = lambda: next(clock)
    try:
        assert bench.time_median(fn, repeats=3, warmup=1) == 1.0
    finally:
        bench.time.perf_counter = real
    assert len(calls) == 4
    with pytest.raises(ValueError):
        bench.time_median(fn, repeats=0)


def test_bench_routing_report_on_a_tiny_shape(monkeypatch, capsys):
    monkeypatch.setitem(bench.ROUTING_SHAPES, "tiny", (4, 6, 2, 3, 4, 2))
    assert main(["bench", "routing", "--device", "cpu", "--repeats", "2", "--shapes", "tiny"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "cpu" and report["matmul_gflops"] > 0
    tiny = report["shapes"]["tiny"]
    assert tiny["gflop_forward"] == round(3 * 2 * 4 * 6 * 3 * 4 * 2 / 1e9, 3)
    for impl in bench.IMPLEMENTATIONS:
        assert tiny[impl]["forward_ms"] > 0 and tiny[impl]["forward_backward_ms"] > 0
        assert tiny[impl]["peak_memory_mb"] >= 0
    with pytest.raises(ValueError, match="unknown shape"):
        bench.bench_routing("cpu", shapes=("huge",))
