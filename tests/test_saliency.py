"""capsule_lab.measures.saliency (chapter 05): Grad-CAM against one written here with plain autograd hooks, the coupling
saliency against eq. 16 written as loops, and the agreement measures against hand-worked cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.measures.saliency import (coupling_saliency_maps, grad_cam, rank_correlation, saliency_agreement,
                                           top_k_overlap)

TINY = CapsNetConfig.slim(image_size=12, conv_channels=6, conv_kernel=3, primary_kernel=3, primary_types=2,
                          primary_dim=4, classes=3, class_dim=4, decoder=False)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = CapsNet(TINY).double()
    images = torch.rand(5, 1, 12, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return model, images


def hooked_grad_cam(model, images, targets):
    """Grad-CAM from its definition: w_k = spatial mean of ∂‖v_t‖/∂A_k, map = relu(Σ_k w_k A_k), upsampled."""
    kept = {}
    handle = model.primary.conv.register_forward_hook(lambda module, inputs, output: kept.setdefault("A", output))
    try:
        model.eval()
        lengths = model(images).lengths
    finally:
        handle.remove()
    A = kept["A"]                                                           # (B, K, H', W')
    score = lengths[torch.arange(len(targets)), targets].sum()              # images are routed independently
    (dA,) = torch.autograd.grad(score, A)
    weights = dA.mean(dim=(2, 3), keepdim=True)
    cam = torch.relu((weights * A).sum(dim=1, keepdim=True))
    return F.interpolate(cam, size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0].detach()


# ---------------------------------------------------------------- Grad-CAM and the coupling saliency

def test_grad_cam_matches_a_grad_cam_written_with_hooks(tiny):
    model, images = tiny
    model.train()
    maps = grad_cam(model, images)
    assert model.training                                       # the caller's mode is given back
    assert maps.shape == (5, 12, 12) and not maps.requires_grad and (maps >= 0).all()
    with torch.no_grad():
        predicted = model.eval()(images).lengths.argmax(dim=1)
    expected = hooked_grad_cam(model, images, predicted)
    assert expected.abs().max() > 0                             # not a trivially zero case
    assert torch.allclose(maps, expected, rtol=1e-9, atol=1e-15)


def test_grad_cam_with_given_targets_and_per_image(tiny):
    model, images = tiny
    targets = torch.tensor([0, 1, 2, 2, 0])
    maps = grad_cam(model, images, targets)
    assert torch.allclose(maps, hooked_grad_cam(model, images, targets), rtol=1e-9, atol=1e-15)
    alone = torch.cat([grad_cam(model, images[b:b + 1], targets[b:b + 1]) for b in range(5)])
    assert torch.allclose(maps, alone, rtol=1e-9, atol=1e-15)


def test_grad_cam_on_another_layer(tiny):
    model, images = tiny
    targets = torch.tensor([1, 1, 0, 2, 0])
    kept = {}
    handle = model.conv.register_forward_hook(lambda module, inputs, output: kept.setdefault("A", output))
    lengths = model.eval()(images).lengths
    handle.remove()
    (dA,) = torch.autograd.grad(lengths[torch.arange(5), targets].sum(), kept["A"])
    cam = torch.relu((dA.mean(dim=(2, 3), keepdim=True) * kept["A"]).sum(dim=1, keepdim=True))
    expected = F.interpolate(cam, size=(12, 12), mode="bilinear", align_corners=False)[:, 0]
    assert torch.allclose(grad_cam(model, images, targets, layer=model.conv), expected, rtol=1e-9, atol=1e-15)


def test_coupling_saliency_maps_is_eq_16_written_as_loops(tiny):
    model, images = tiny
    maps, predictions = coupling_saliency_maps(model, images)
    with torch.no_grad():
        out = model.eval()(images)
    assert torch.equal(predictions, out.lengths.argmax(dim=1))
    g, O = TINY.primary_grid, TINY.primary_types
    grid = torch.zeros(5, g, g, dtype=torch.float64)
    for b in range(5):
        for m in range(g):
            for n in range(g):
                total = 0.0
                for o in range(O):
                    i = (m * g + n) * O + o                         # capsules ordered (row, column, type)
                    c = out.couplings[b, i, predictions[b]].item()
                    total += out.primary[b, i].norm().item() * round(10 * c) / 10
                grid[b, m, n] = total / O
    expected = F.interpolate(grid.unsqueeze(1), size=(12, 12), mode="bilinear", align_corners=False)[:, 0]
    assert maps.shape == (5, 12, 12)
    assert torch.allclose(maps, expected, atol=1e-12)


def test_grad_cam_and_coupling_saliency_check_their_inputs(tiny):
    model, images = tiny
    with pytest.raises(ValueError, match="CapsNet"):
        grad_cam(torch.nn.Linear(2, 2), images)
    with pytest.raises(ValueError, match=r"images must have shape \(B, 1, 12, 12\)"):
        grad_cam(model, images[:, :, :10])
    with pytest.raises(ValueError, match=r"targets must have shape \(B,\)"):
        grad_cam(model, images, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"targets must be integer class indices in \[0, 3\)"):
        grad_cam(model, images, torch.full((5,), 3))
    with pytest.raises(ValueError, match="layer must be a torch.nn.Module inside model"):
        grad_cam(model, images, layer=torch.nn.Conv2d(1, 1, 3))
    with pytest.raises(ValueError, match=r"images must have shape \(B, 1, 12, 12\)"):
        coupling_saliency_maps(model, images[0])


# ---------------------------------------------------------------- agreement: Spearman's rho

def test_rank_correlation_of_identical_reversed_and_monotone_maps():
    a = torch.rand(3, 5, 4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(rank_correlation(a, a), torch.ones(3, dtype=torch.float64))
    assert torch.allclose(rank_correlation(a, -a), -torch.ones(3, dtype=torch.float64))
    assert torch.allclose(rank_correlation(a, torch.exp(3 * a)), torch.ones(3, dtype=torch.float64))


def test_rank_correlation_hand_worked_four_pixels():
    # ranks 1 2 3 4 against 2 1 4 3: Σd² = 4, ρ = 1 − 6·4 / (4·(16 − 1)) = 0.6
    a = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    b = torch.tensor([[[2.0, 1.0], [4.0, 3.0]]])
    assert rank_correlation(a, b).item() == pytest.approx(0.6, abs=1e-12)
    # a tie: ranks 1.5 1.5 3 4 against 1 2 3 4 → ρ = 4.5 / √(4.5 · 5) = √0.9
    tied = torch.tensor([[[1.0, 1.0], [2.0, 3.0]]])
    assert rank_correlation(tied, a).item() == pytest.approx(math.sqrt(0.9), abs=1e-12)


def hand_average_ranks(values: list) -> list:
    """Ranks from 1, tied values sharing the mean of their positions, with a plain loop."""
    ranks = []
    for v in values:
        below = sum(1 for w in values if w < v)
        equal = sum(1 for w in values if w == v)
        ranks.append(below + (equal + 1) / 2)
    return ranks


def test_rank_correlation_matches_pearson_of_hand_ranks_with_ties():
    gen = torch.Generator().manual_seed(3)
    a = torch.randint(0, 4, (6, 3, 3), generator=gen).double()          # many ties
    b = torch.randint(0, 6, (6, 3, 3), generator=gen).double()
    a[0] = 2.0                                                         # a constant map: nan
    rho = rank_correlation(a, b)
    assert math.isnan(rho[0].item())
    for k in range(1, 6):
        ra, rb = (np.array(hand_average_ranks(x[k].flatten().tolist())) for x in (a, b))
        if ra.std() == 0 or rb.std() == 0:
            assert math.isnan(rho[k].item())
        else:
            assert rho[k].item() == pytest.approx(np.corrcoef(ra, rb)[0, 1], abs=1e-12)


# ---------------------------------------------------------------- agreement: top pixels

def test_top_k_overlap_on_hand_built_maps():
    a = torch.zeros(3, 4, 5)
    b = torch.zeros(3, 4, 5)
    # fraction 0.1 of 20 pixels: k = 2
    a[0].view(-1)[[0, 7]] = torch.tensor([5.0, 4.0])
    b[0].view(-1)[[7, 12]] = torch.tensor([3.0, 9.0])                 # one of two in common
    a[1].view(-1)[[1, 2]] = 1.0
    b[1].view(-1)[[1, 2]] = torch.tensor([2.0, 7.0])                 # both in common
    a[2].view(-1)[[3, 4]] = 1.0
    b[2].view(-1)[[18, 19]] = 1.0                                    # none in common
    assert top_k_overlap(a, b, fraction=0.1).tolist() == [0.5, 1.0, 0.0]
    # fraction 0.25: k = 5; in image 0, a's top are 0, 7 and 3 of its 18 zeros drawn at random (each 1/6), b's
    # 12, 7 and 3 of its 18 zeros: expected common = 1 (pixel 7) + 1/6 (0) + 1/6 (12) + 17 · 1/36 = 65/36
    assert top_k_overlap(a, b, fraction=0.25)[0].item() == pytest.approx(65 / 36 / 5)
    assert top_k_overlap(a, a, fraction=1.0).tolist() == [1.0, 1.0, 1.0]


def test_top_k_overlap_is_the_mean_over_every_way_to_break_the_ties():
    from itertools import combinations
    a = torch.tensor([[[3.0, 1.0, 1.0], [1.0, 0.0, 2.0]]])              # k = 3 of 6: 3, 2 and one of three 1s
    b = torch.tensor([[[0.0, 5.0, 5.0], [5.0, 5.0, 0.0]]])              # a plateau of four 5s for three places

    def tops(x, k):                                                    # every top-k set, ties broken every way
        flat = x.flatten().tolist()
        cut = sorted(flat, reverse=True)[k - 1]
        above = {p for p, v in enumerate(flat) if v > cut}
        tied = [p for p, v in enumerate(flat) if v == cut]
        return [above | set(extra) for extra in combinations(tied, k - len(above))]

    pairs = [(ta, tb) for ta in tops(a, 3) for tb in tops(b, 3)]
    expected = sum(len(ta & tb) for ta, tb in pairs) / len(pairs) / 3
    assert top_k_overlap(a, b, fraction=0.5)[0].item() == pytest.approx(expected)
    assert expected != pytest.approx(1 / 3)                           # not what row-major tie-breaking gives


def test_saliency_agreement_summarises_and_skips_constant_maps():
    gen = torch.Generator().manual_seed(5)
    a = torch.rand(5, 4, 5, generator=gen)
    b = a + 0.3 * torch.rand(5, 4, 5, generator=gen)
    b[1] = 0.0                                                       # constant: skipped
    report = saliency_agreement(a, b, fraction=0.1)
    kept = [0, 2, 3, 4]
    rho = [np.corrcoef(hand_average_ranks(a[k].flatten().tolist()),
                       hand_average_ranks(b[k].flatten().tolist()))[0, 1] for k in kept]
    overlap = []
    for k in kept:
        top_a = set(np.argsort(-a[k].flatten().numpy(), kind="stable")[:2])
        top_b = set(np.argsort(-b[k].flatten().numpy(), kind="stable")[:2])
        overlap.append(len(top_a & top_b) / 2)
    assert report["images"] == 4 and report["skipped"] == 1
    assert report["spearman_mean"] == pytest.approx(np.mean(rho), abs=1e-12)
    assert report["spearman_std"] == pytest.approx(np.std(rho), abs=1e-12)
    assert report["overlap_mean"] == pytest.approx(np.mean(overlap), abs=1e-12)
    assert report["overlap_std"] == pytest.approx(np.std(overlap), abs=1e-12)
    assert report["chance_overlap"] == pytest.approx(0.1) and report["fraction"] == 0.1
    nothing = saliency_agreement(torch.ones(2, 3, 3), torch.rand(2, 3, 3))
    assert nothing["images"] == 0 and nothing["skipped"] == 2 and math.isnan(nothing["spearman_mean"])


def test_agreement_measures_check_their_inputs():
    a = torch.rand(2, 3, 3)
    with pytest.raises(ValueError, match=r"a must have shape \(B, H, W\)"):
        rank_correlation(a[0], a[0])
    with pytest.raises(ValueError, match=r"b must have shape \(B, H, W\) = \(2, 3, 3\)"):
        top_k_overlap(a, a[:, :2])
    with pytest.raises(ValueError, match="a must be a tensor"):
        saliency_agreement(a.numpy(), a)
    bad = a.clone()
    bad[0, 0, 0] = math.nan
    with pytest.raises(ValueError, match="b must be finite"):
        rank_correlation(a, bad)
    for fraction in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"fraction must be a share in \(0, 1\]"):
            top_k_overlap(a, a, fraction)


def test_saliency_on_object_by_hand_and_its_shuffled_baseline():
    from capsule_lab.measures.saliency import saliency_on_object
    images = torch.tensor([[[0.9, 0.0], [0.0, 0.0]],                  # image 0: the object is the top-left pixel
                           [[0.0, 0.0], [0.8, 0.7]]])                 # image 1: the bottom row
    maps = torch.tensor([[[3.0, 1.0], [0.0, 0.0]],                    # 3 of 4 on image 0's object
                         [[1.0, 0.0], [1.0, 2.0]]])                   # 3 of 4 on image 1's object
    torch.testing.assert_close(saliency_on_object(maps, images), torch.tensor([0.75, 0.75], dtype=torch.float64))
    # the baseline: each map on the next image's object (map 0 on image 1's bottom row: 0 of 4; map 1 on image 0's
    # top-left pixel: 1 of 4)
    torch.testing.assert_close(saliency_on_object(maps, images.roll(1, dims=0)),
                               torch.tensor([0.0, 0.25], dtype=torch.float64))
    torch.testing.assert_close(saliency_on_object(maps, images.unsqueeze(1), threshold=0.75),
                               torch.tensor([0.75, 0.25], dtype=torch.float64))          # 0.7 is not above 0.75
    assert math.isnan(saliency_on_object(torch.zeros(1, 2, 2), images[:1]).item())      # no mass, no share
    with pytest.raises(ValueError, match="non-negative"):
        saliency_on_object(-maps, images)
    with pytest.raises(ValueError, match=r"images must have shape \(B, 1, H, W\) or \(B, H, W\)"):
        saliency_on_object(maps, images[:, :1])
