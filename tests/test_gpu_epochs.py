"""book/setup.md's GPU timings: its tables are the shipped reports of scripts/gpu_epochs.py and
``capsule-lab bench routing`` (run on an H200), the sentence under them is computed from them, and the script runs
(here on a CPU, tiny)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "capsule_lab" / "results"
SETUP = (ROOT / "book" / "setup.md").read_text(encoding="utf8")


def _script():
    spec = importlib.util.spec_from_file_location("gpu_epochs", ROOT / "scripts" / "gpu_epochs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table(header: str) -> list[list[str]]:
    """The rows (cells) of the markdown table whose header row starts with ``header``."""
    lines = SETUP.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _number(cell: str):
    return None if cell == "" else float(cell)


def test_the_epoch_table_is_the_shipped_report():
    report = json.loads((RESULTS / "gpu_epochs_h200.json").read_text())
    assert report["provenance"]["device"] == "NVIDIA H200"
    expected = []
    for chapter, c in report["chapters"].items():
        for name, e in c["networks"].items():
            assert "error" not in e, (chapter, name)
            steps = math.ceil(60000 / c["schedule"]["batch_size"])
            rounding = 0.05 + 0.005 * steps / 1e3                  # the epoch to 0.1 s, the step to 0.01 ms
            assert abs(e["epoch_s_from_steps"] - e["step_ms"] * steps / 1e3) <= rounding, (chapter, name)
            measured = e.get("epoch", {})
            if measured:
                assert measured["images"] == 60000 and not measured["scaled"]
            expected.append([f"{chapter}: {name}", c["schedule"]["batch_size"], e["step_ms"],
                             e["epoch_s_from_steps"], measured.get("seconds"), e["peak_memory_gb"]])
    shown = [[row[0], int(row[1]), *map(_number, row[2:])] for row in _table("| Chapter: network |")]
    assert shown == expected
    assert {chapter for chapter in report["chapters"]} == {"02", "03", "04", "05", "06", "07", "08"}
    # the sentence under the table: chapter 02's 50 epochs and chapter 07's three routers' 100 epochs
    ch02, ch07 = report["chapters"]["02"], report["chapters"]["07"]
    minutes = ch02["schedule"]["epochs"] * ch02["networks"]["CapsNet"]["epoch"]["seconds"] / 60
    nets = ch07["networks"]
    hours = ch07["schedule"]["epochs"] * (nets["ConvCapsNet dynamic"]["epoch"]["seconds"]
                                          + nets["ConvCapsNet similarity"]["epoch_s_from_steps"]
                                          + nets["ConvCapsNet connectionist"]["epoch_s_from_steps"]) / 3600
    assert f"take about {round(minutes)} minutes" in SETUP, minutes
    assert f"about {round(hours)} hours per dataset" in SETUP, hours
    pair = re.search(r"dynamic r = 3 and\s+REM-pruned, the same network before pruning: ([0-9.]+) and ([0-9.]+) ms",
                     SETUP)
    bench = report["chapters"]["08"]["networks"]
    assert (float(pair.group(1)), float(pair.group(2))) == (bench["bench dynamic r=3"]["step_ms"],
                                                            bench["bench rem-pruned"]["step_ms"])
    assert 0.2 <= float(pair.group(2)) / float(pair.group(1)) - 1 <= 0.3          # "differ by about a quarter"


def test_the_routing_table_is_the_shipped_bench():
    bench = json.loads((RESULTS / "bench_routing_h200.json").read_text())
    assert bench["device"] == "cuda"
    expected = [[shape, impl, e[impl]["forward_ms"], e[impl]["forward_backward_ms"], e[impl]["peak_memory_mb"],
                 e[impl]["forward_backward_x_bound"]]
                for shape, e in bench["shapes"].items() for impl in ("materialised", "vote_free")]
    shown = [[row[0], row[1], *map(_number, row[2:])] for row in _table("| Shape | Implementation |")]
    assert shown == expected
    assert f"{bench['matmul_gflops']:,} GFLOP/s" in SETUP


def test_the_script_times_a_chapter_on_a_cpu(tmp_path):
    gpu_epochs = _script()
    out = tmp_path / "epochs.json"
    gpu_epochs.main(["--profile", "quick", "--device", "cpu", "--chapters", "02", "--train-size", "64",
                     "--cap", "0.1", "--repeats", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    capsnet = report["chapters"]["02"]["networks"]["CapsNet"]
    assert "error" not in capsnet and capsnet["step_ms"] > 0
    assert capsnet["epoch"]["images"] == 64 and capsnet["epoch"]["scaled"]     # a batch is 128: all 64 images
    epoch = capsnet["epoch"]                                                   # seconds rounded to 0.1
    assert abs(epoch["seconds_per_60000"] - epoch["seconds"] * 60000 / 64) <= 0.05 * 60000 / 64 + 0.05
    assert capsnet["epoch_s_from_steps"] == pytest.approx(capsnet["step_ms"] * 469 / 1e3, abs=0.05 + 0.005 * 0.469)


def test_the_one_epoch_table_is_the_shipped_report():
    report = json.loads((RESULTS / "epoch_timing_h200.json").read_text())
    assert report["provenance"]["device"] == "NVIDIA H200" and report["provenance"]["profile"] == "full"
    assert report["failed"] == [] and set(report["chapters"]) == {"02", "03", "04", "05", "06", "07", "08"}
    expected = []
    for chapter, e in report["chapters"].items():
        assert e["error"] == "" and e["train_images"] == 60000 and e["test_images"] == 10000, chapter
        assert e["data"].startswith("fashion (torchvision) in place of mnist"), chapter   # what the page says
        assert abs(e["seconds_per_60000"] - e["epoch_s"]) < 0.01, chapter                 # a whole epoch
        expected.append([f"{chapter}: {e['model']}", e["parameters"], e["batch_size"], e["epoch_s"], e["step_ms"],
                         e["peak_memory_gb"], e["train_accuracy"], e["test_accuracy"]])
    rows = _table("| Chapter: network | Parameters |")
    shown = [[row[0], int(row[1].replace(",", "")), int(row[2]), *map(_number, row[3:])] for row in rows]
    assert shown == expected
    # the sentence under it: this run's epochs against the first table's measured ones, same network
    first = json.loads((RESULTS / "gpu_epochs_h200.json").read_text())["chapters"]
    ratios = [e["epoch_s"] / first[c]["networks"][e["model"]]["epoch"]["seconds"]
              for c, e in report["chapters"].items() if "epoch" in first[c]["networks"].get(e["model"], {})]
    assert len(ratios) == 6
    assert f"took {min(ratios):.2f} to {max(ratios):.2f} times as long" in SETUP
    assert max(ratios) < 2                                                 # "to within a factor of two"
