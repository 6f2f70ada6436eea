"""Chapter 07's experiment (capsule_lab.studies.learned_routing) and its settings (chapter_settings("07"))."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from capsule_lab.studies.learned_routing import (VOTES, RouterRun, build_model, class_layer_inputs, measure_couplings,
                                                 routing_study_data, run_routing_study, study_routers, train_router)
from capsule_lab.models import CapsNetConfig, ConvCapsNet, ConvCapsNetConfig
from capsule_lab.studies.learned_routing import LearnedRoutingSettings, with_normalized_dynamic
from capsule_lab.course.profiles import chapter_settings
from capsule_lab.routing import ConnectionistRouter, DynamicRouter, SimilarityRouter, coupling_polarisation

pytestmark = pytest.mark.xdist_group("routing_study")


@pytest.fixture(scope="module")
def tiny():
    settings = chapter_settings("07", "quick")
    settings = replace(settings, train_size=64, test_size=32, schedule=replace(settings.schedule, batch_size=32))
    return settings, {d: routing_study_data(d, settings) for d in settings.datasets}


def test_the_settings_name_the_papers_routers_and_schedule():
    full, quick = chapter_settings("07", "full"), chapter_settings("07", "quick")
    for s in (full, quick):
        assert isinstance(s, LearnedRoutingSettings) and s.routers == ("dynamic", "similarity", "connectionist")
        assert s.datasets == ("mnist", "fashion") and s.schedule.lr == 3e-3                       # Adam 3e-3
        assert (s.kernels, s.lstm_hidden, s.iterations) == (10, 16, 3)                            # class layer, Table 2
    assert not quick.capsnet.decoder and isinstance(quick.capsnet, CapsNetConfig)
    assert full.capsnet == ConvCapsNetConfig.paper() and full.schedule.epochs == 100 and full.train_size is None


def test_study_routers_builds_each_router_with_the_settings_sizes():
    s = chapter_settings("07", "quick")
    dynamic = study_routers("dynamic", s)
    assert isinstance(dynamic, DynamicRouter) and dynamic.iterations == 3
    sim, lstm = study_routers("similarity", s), study_routers("connectionist", s)
    assert isinstance(sim, SimilarityRouter) and isinstance(lstm, ConnectionistRouter)
    assert sum(p.numel() for p in lstm.parameters()) > sum(p.numel() for p in sim.parameters())
    with pytest.raises(ValueError, match="kind must be one of"):
        study_routers("em", s)
    with pytest.raises(ValueError, match="LearnedRoutingSettings"):
        study_routers("dynamic", chapter_settings("06", "quick"))


def test_every_router_starts_from_the_same_backbone():
    s = chapter_settings("07", "quick")
    nets = {name: build_model(name, s, seed=3) for name in s.routers}
    reference = nets["dynamic"].state_dict()
    for name, net in nets.items():
        state = net.state_dict()
        for key, value in reference.items():
            assert torch.equal(state[key], value), (name, key)
    assert isinstance(nets["similarity"].router, SimilarityRouter)
    assert {name: net.digits.vote_form for name, net in nets.items()} == VOTES       # Faria's routers: eq. 1 votes


def test_dynamic_routing_on_normalised_votes_is_an_arm_of_the_study():
    from capsule_lab.studies.learned_routing import DYNAMIC_NORMALIZED, with_normalized_dynamic
    s = with_normalized_dynamic(chapter_settings("07", "quick"))
    assert s.routers == ("dynamic", "similarity", "connectionist", DYNAMIC_NORMALIZED)
    assert with_normalized_dynamic(s) == s                                 # adding it twice adds it once
    arm, plain = build_model(DYNAMIC_NORMALIZED, s, seed=2), build_model("dynamic", s, seed=2)
    assert isinstance(arm.router, DynamicRouter) and arm.router.iterations == 3
    assert arm.digits.vote_form == "normalized" and plain.digits.vote_form == "plain"
    for key, value in plain.state_dict().items():                          # the same start, weight for weight
        assert torch.equal(arm.state_dict()[key], value), key
    # by hand: Sabour's plain votes with every W_ij divided by its Frobenius norm (+ 1e-6) are Faria's eq. 1
    with torch.no_grad():
        w = plain.digits.weight
        norms = torch.sqrt((w ** 2).sum(dim=(-2, -1), keepdim=True))
        plain.digits.weight.copy_(w / (norms + 1e-6))
    x = torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(arm.eval()(x).scores, plain.eval()(x).scores, atol=1e-6)
    with pytest.raises(ValueError, match="needs Sabour's CapsNet"):
        with_normalized_dynamic(chapter_settings("07", "full"))
    with pytest.raises(ValueError, match="kind must be one of"):
        study_routers(DYNAMIC_NORMALIZED, chapter_settings("07", "quick"))   # not an arm of these settings


def test_the_papers_network_gets_table_2s_routers_and_shares_its_backbone():
    s = replace(chapter_settings("07", "full"), capsnet=ConvCapsNetConfig.slim())
    sim, lstm = study_routers("similarity", s), study_routers("connectionist", s)
    assert [r.mixing_logits.numel() for r in sim] == [4, 4, 10]                        # Q per layer (§5)
    assert [r.cell.hidden_size for r in lstm] == [16, 16, 16]                          # Table 2
    nets = {name: build_model(name, s, seed=1) for name in s.routers}
    reference = nets["dynamic"].state_dict()
    for name, net in nets.items():
        assert isinstance(net, ConvCapsNet)
        state = net.state_dict()
        assert all(torch.equal(state[key], value) for key, value in reference.items()), name
    assert nets["dynamic"].parameter_counts()["routers"] == 0
    assert class_layer_inputs(s) == s.capsnet.class_inputs and class_layer_inputs(chapter_settings("07", "full")) == 144
    assert class_layer_inputs(chapter_settings("07", "quick")) == chapter_settings("07", "quick").capsnet.primary_caps


def test_the_papers_network_trains_and_is_measured(tiny):
    settings, data = tiny
    s = replace(settings, capsnet=ConvCapsNetConfig.slim())
    run = train_router("similarity", "mnist", s, data["mnist"], seed=0)
    net = build_model("similarity", s)
    assert run.router_parameters == sum(p.numel() for r in study_routers("similarity", s) for p in r.parameters())
    assert run.parameters == sum(p.numel() for p in net.parameters()) and 0 <= run.accuracy <= 1
    assert 0 <= run.entropy <= 1 and len(run.history.train_loss) == s.schedule.epochs


def _polarisation(c, over):
    p = coupling_polarisation(c, over)
    return p["normalized_entropy"], p["max_coupling"]


def test_coupling_polarisation_by_hand():
    uniform = torch.full((2, 4, 5), 0.2)                    # sums to 1 over the outputs j (J = 5)
    assert _polarisation(uniform, "outputs") == pytest.approx((1.0, 0.2))
    assert coupling_polarisation(uniform)["entropy_bits"] == pytest.approx(math.log2(5))
    one_hot = torch.zeros(1, 3, 2)
    one_hot[0, 0, :] = 1.0                                   # each output takes input 0 alone: sums to 1 over i
    assert _polarisation(one_hot, "inputs") == pytest.approx((0.0, 1.0))
    half = torch.tensor([[[0.5], [0.5], [0.0], [0.0]]])     # one output, half on each of two of 4 inputs
    assert _polarisation(half, "inputs") == pytest.approx((math.log(2) / math.log(4), 0.5))
    assert coupling_polarisation(half, "inputs")["entropy_bits"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="normalize_over"):
        coupling_polarisation(uniform, "rows")
    with pytest.raises(ValueError, match=r"\(B, I, J\)"):
        coupling_polarisation(torch.ones(3, 3), "inputs")


def test_measure_couplings_counts_correct_predictions_and_averages_over_images(tiny):
    settings, data = tiny
    net = build_model("similarity", settings).eval()
    test = data["mnist"][1]
    accuracy, entropy, largest = measure_couplings(net, test, batch_size=7)          # Faria's: over the inputs
    with torch.no_grad():
        out = net(test.tensors[0])
    assert accuracy == (out.lengths.argmax(1) == test.tensors[1]).float().mean().item()
    c = out.couplings.double()
    per_image = (-(c * c.log()).sum(1) / math.log(c.shape[1])).mean(1)
    assert entropy == pytest.approx(per_image.mean().item(), rel=1e-9)
    assert torch.allclose(c.sum(dim=1), torch.ones_like(c.sum(dim=1)))      # Faria: over the inputs
    assert largest == pytest.approx(c.max(1).values.mean().item(), rel=1e-9)


def test_train_router_and_the_study(tiny):
    settings, data = tiny
    run = train_router("connectionist", "mnist", settings, data["mnist"], seed=0)
    assert isinstance(run, RouterRun) and 0 <= run.accuracy <= 1 and run.seconds > 0
    assert run.router_parameters == sum(p.numel() for p in study_routers("connectionist", settings).parameters())
    assert run.parameters == sum(p.numel() for p in build_model("connectionist", settings).parameters())
    assert len(run.history.train_loss) == settings.schedule.epochs and 0 <= run.entropy <= 1
    runs = run_routing_study(replace(settings, routers=("dynamic", "similarity"), datasets=("fashion",)),
                             {"fashion": data["fashion"]})
    assert list(runs) == [("fashion", "dynamic"), ("fashion", "similarity")]
    assert runs["fashion", "dynamic"].router_parameters == 0
    with pytest.raises(ValueError, match="tuple of routing_study_data"):
        train_router("dynamic", "mnist", settings, data["mnist"][0])
    with pytest.raises(ValueError, match="dataset must be one of"):
        routing_study_data("norb", settings)


def test_the_shipped_longer_run_is_complete_and_consistent():
    from capsule_lab.studies.learned_routing import shipped_routing_runs
    report = shipped_routing_runs()
    prov, runs = report["provenance"], report["runs"]
    schedule = prov["settings"]["schedule"]
    assert prov["seeds"] == [0, 1, 2, 3, 4] and prov["settings"]["train_size"] == 6000
    assert schedule["epochs"] == 15 and schedule["lr_decay"] == 0.8
    settings = with_normalized_dynamic(chapter_settings("07", "quick"))
    assert list(runs) == list(settings.datasets)
    for dataset, routers in runs.items():
        assert list(routers) == list(settings.routers)                     # the normalised-votes arm included
        for router, seeds in routers.items():
            count = sum(p.numel() for p in build_model(router, settings).parameters())
            assert list(seeds) == ["0", "1", "2", "3", "4"]
            for run in seeds.values():
                assert 0.1 < run["accuracy"] <= 1 and run["parameters"] == count
                assert len(run["train_loss"]) == len(run["train_accuracy"]) == 15
                assert 0 <= run["entropy"] <= 1 and 0 < run["largest"] <= 1


# ------------------------------------------------------------------ the verdict table (LEARNED_CLAIMS)

def test_claim_records_and_verdicts_of_the_longer_run():
    from _scipy_verdicts import scipy_outcomes

    from capsule_lab.studies.learned_routing import (DYNAMIC_NORMALIZED, LEARNED_CLAIMS, learned_claim_records,
                                                     learned_verdicts, shipped_routing_runs)
    shipped = shipped_routing_runs()
    records = learned_claim_records(shipped)
    assert len(records) == sum(len(seeds) for routers in shipped["runs"].values() for seeds in routers.values())
    for r in records:
        router, dataset = r["router"].rsplit(", ", 1)
        assert r["accuracy"] == shipped["runs"][dataset][router][str(r["seed"])]["accuracy"]
    rows = learned_verdicts(shipped)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(records, LEARNED_CLAIMS)
    if all("train_accuracy" not in run for routers in shipped["runs"].values() for seeds in routers.values()
           for run in seeds.values()):
        assert all("kept no training accuracy" in r.verdict.reason for r in rows)
    # with each epoch's training accuracy kept, the convergence criterion reads it (here: still climbing)
    climbing = {"provenance": shipped["provenance"], "runs": {"mnist": {router: {str(s): {"accuracy": 0.9 + 0.01 * s + (0.02 if router == "connectionist"
                                                                                  else 0), "train_accuracy": [0.8, 0.9]}
                                            for s in range(3)} for router in ("dynamic", "similarity", "connectionist",
                                                                              DYNAMIC_NORMALIZED)},
                         "fashion": {router: {str(s): {"accuracy": 0.8, "train_accuracy": [0.8, 0.801]}
                                              for s in range(3)} for router in ("dynamic", "connectionist",
                                                                                 DYNAMIC_NORMALIZED)}}}
    rows = learned_verdicts(climbing)
    assert "connectionist, mnist not converged (seeds 0, 1, 2" in rows[0].verdict.reason
    assert all(rows[i].verdict.p_support is not None for i in (2, 4, 6))              # Fashion: converged, tested
    assert all("not converged" in rows[i].verdict.reason for i in (1, 3, 5))          # MNIST: still climbing
    with pytest.raises(ValueError, match="shipped_routing_runs"):
        learned_claim_records({"provenance": {}})


def _run_of(profile: str, routers, accuracy=lambda router, seed: 0.9 + 0.001 * seed) -> dict:
    """A run of chapter 07's study as the cluster's merge writes it: the profile's settings in the provenance."""
    from dataclasses import asdict

    settings = json.loads(json.dumps(asdict(chapter_settings("07", profile)), default=str))
    return {"provenance": {"settings": settings},
            "runs": {d: {r: {str(s): {"accuracy": accuracy(r, s), "train_accuracy": [0.9, 0.9]} for s in range(3)}
                         for r in routers} for d in ("mnist", "fashion")}}


def test_a_run_is_asked_only_the_rows_its_network_and_arms_can_answer():
    """The shipped run: all seven rows. The quick settings without the normalised-votes arm: the first three. Faria's
    network (a full-profile cluster run): every router already has eq. 1's votes, so Table 3's row and the same-votes
    rows are asked of its dynamic routing, and the votes-alone rows not at all."""
    from capsule_lab.studies.learned_routing import (DYNAMIC_NORMALIZED, LEARNED_CLAIMS, learned_claims,
                                                     learned_verdicts, shipped_routing_runs)
    assert learned_claims(shipped_routing_runs()) == LEARNED_CLAIMS
    plain = ("dynamic", "similarity", "connectionist")
    assert learned_claims(_run_of("quick", plain)) == LEARNED_CLAIMS[:3]
    paper = _run_of("full", plain, accuracy=lambda r, s: {"dynamic": 0.99, "similarity": 0.98}.get(r, 0.985) + s / 1e4)
    claims = learned_claims(paper)
    assert [c.question for c in claims] == [LEARNED_CLAIMS[k].question for k in (0, 3, 4)]
    assert [(c.a, c.b) for c in claims] == [("connectionist, mnist", "similarity, mnist"),
                                            ("connectionist, mnist", "dynamic, mnist"),
                                            ("connectionist, fashion", "dynamic, fashion")]
    assert all("Faria's network (Table 1)" in c.differs and "slim" not in c.differs for c in claims)
    assert not any(DYNAMIC_NORMALIZED in c.a + c.b for c in claims)
    rows = learned_verdicts(paper)                       # the example of the setup page runs on such a report
    assert [r.claim for r in rows] == list(claims)
    assert rows[1].verdict.estimate == pytest.approx(-0.005, abs=1e-9)      # 98.5 % against 99.0 %
    with pytest.raises(ValueError, match="provenance must hold the run's settings"):
        learned_claims({"runs": paper["runs"]})
