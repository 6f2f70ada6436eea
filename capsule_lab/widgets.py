"""Interactive widgets for chapters 02 and 03, each with a static figure that draws its default state.

Taught in chapters 02 and 03. The book is static and a widget needs a
running kernel, so every widget comes with a ``*_figure`` function that draws exactly what the widget
shows at its default slider values; the chapter puts the two side by side.

* :func:`routing_explorer` / :func:`routing_explorer_figure` — dynamic routing on a 2-D toy with two
  output capsules; sliders for the number of iterations r (1–6) and for a scale λ on the agreement
  added to the logits, ``b_ij ← b_ij + λ ⟨û_{j|i}, v_j⟩`` (λ = 1 is Sabour's routing).
* :func:`pose_explorer` / :func:`pose_explorer_figure` — nudge one of the 16 pose dimensions of the
  winning digit capsule and watch the decoder's reconstruction change (Sabour et al., Fig. 4).
* :func:`gradient_terms_explorer` / :func:`gradient_terms_figure` (chapter 03) — the two terms of ∂L/∂û
  on a toy layer, with sliders for the iterations r and for how polarised the couplings are.

The widgets are thin: the maths is :mod:`capsule_lab.routing` and the pictures :mod:`capsule_lab.viz`.
They can be built without a display (e.g. in tests); the figure of the current state is kept in
``.figure`` and the numbers behind it in ``.result`` / ``.reconstruction``.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from . import viz
from .capsules import margin_loss
from .gradient_figures import plot_gradient_terms
from .gradients import gradient_terms, vote_gradient
from .modes import eval_mode
from .routing import RoutingResult, check_votes, dynamic_routing

__all__ = [
    "toy_votes",
    "scaled_routing",
    "routing_explorer_figure",
    "routing_explorer",
    "RoutingExplorer",
    "SABOUR_PERTURBATIONS",
    "pose_sweep",
    "pose_explorer_figure",
    "pose_explorer",
    "PoseExplorer",
    "gradient_toy",
    "polarised_gradient_terms",
    "gradient_terms_figure",
    "gradient_terms_explorer",
    "GradientTermsExplorer",
]

# Sabour et al., Fig. 4: one pose dimension tweaked by intervals of 0.05 in [−0.25, 0.25].
SABOUR_PERTURBATIONS = tuple(round(0.05 * k, 2) for k in range(-5, 6))


def _show(output: widgets.Output, fig):
    """Show ``fig`` in ``output`` in place of what was there; return it."""
    plt.close(fig)  # shown through the Output widget only, never twice by the inline backend
    with output:
        output.clear_output(wait=True)
        display(fig)
    return fig


def toy_votes() -> torch.Tensor:
    """The chapter's 2-D toy: 5 input capsules voting for 2 output capsules, shape ``(1, 5, 2, 2)``.

    Inputs 0–2 agree on output 0 (their votes for output 1 scatter); inputs 3–4 are outliers for
    output 0 and agree with each other on output 1. Chapter 02.
    """
    return torch.tensor([[
        # vote for output 0     vote for output 1
        [[1.00, 0.45], [-0.30, 0.55]],   # input 0
        [[0.95, 0.60], [0.40, -0.70]],   # input 1
        [[1.10, 0.50], [-0.60, -0.20]],  # input 2
        [[-0.55, 0.90], [-0.30, 1.05]],  # input 3
        [[0.20, -1.00], [-0.45, 0.95]],  # input 4
    ]])


def scaled_routing(votes: torch.Tensor, iterations: int = 3, scale: float = 1.0,
                   history: bool = False) -> RoutingResult:
    """Dynamic routing whose logit update is scaled: ``b_ij ← b_ij + scale · ⟨û_{j|i}, v_j⟩``.

    ``scale = 1`` is Sabour's Algorithm 1 (the result equals :func:`capsule_lab.routing.dynamic_routing`);
    a larger scale acts like a lower softmax temperature (the couplings polarise faster), ``scale = 0``
    leaves them uniform. The one routing procedure, :func:`capsule_lab.routing.dynamic_routing` with
    ``agreement_scale=scale``. votes ``(B, I, J, D)``.

    Chapter 02 (the routing explorer).
    """
    check_votes(votes)
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not np.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    return dynamic_routing(votes, int(iterations), agreement_scale=scale, history=history)


def _toy(votes) -> torch.Tensor:
    votes = toy_votes() if votes is None else votes
    if isinstance(votes, np.ndarray):
        votes = torch.from_numpy(votes).float()
    if isinstance(votes, torch.Tensor) and votes.dim() == 3:
        votes = votes.unsqueeze(0)
    if (not isinstance(votes, torch.Tensor) or votes.dim() != 4 or votes.shape[0] != 1
            or votes.shape[3] != 2 or not votes.is_floating_point()):
        got = tuple(votes.shape) if isinstance(votes, torch.Tensor) else type(votes).__name__
        raise ValueError(f"votes must be a float tensor of shape (1, I, J, 2) or (I, J, 2): 2-D votes, got {got}")
    check_votes(votes)
    return votes.detach()


def routing_explorer_figure(votes=None, iterations: int = 3, scale: float = 1.0):
    """The routing explorer's picture for fixed values: the toy after ``iterations`` iterations, and its couplings.

    votes ``(1, I, J, 2)`` or ``(I, J, 2)`` (default :func:`toy_votes`). Returns the Figure of
    :func:`capsule_lab.viz.plot_routing_state` (``axes[1].patches[j * I + i]`` has height c_ij).

    Chapter 02.
    """
    return _routing_state(_toy(votes), iterations, scale)[0]


def _routing_state(votes: torch.Tensor, iterations: int, scale: float):
    """(figure, routing result) of the routing explorer's state."""
    result = scaled_routing(votes, iterations, scale)
    fig = viz.plot_routing_state(votes[0], result.couplings[0], result.poses[0],
                                 title=f"r = {iterations} iteration{'s' * (iterations != 1)}, "
                                       f"agreement scale λ = {scale:g}")
    return fig, result


class RoutingExplorer(widgets.VBox):
    """The routing explorer (see :func:`routing_explorer`): sliders ``iterations`` and ``scale``, an ``output``.

    After every change ``result`` holds the :class:`RoutingResult` drawn and ``figure`` the Figure.
    """

    def __init__(self, votes=None):
        self.votes = _toy(votes)
        self.iterations = widgets.IntSlider(value=3, min=1, max=6, step=1, description="iterations r",
                                            continuous_update=False, style={"description_width": "initial"})
        self.scale = widgets.FloatSlider(value=1.0, min=0.0, max=5.0, step=0.25, description="agreement scale λ",
                                         continuous_update=False, readout_format=".2f",
                                         style={"description_width": "initial"})
        self.output = widgets.Output()
        self.figure = None
        self.result = None
        super().__init__([widgets.HBox([self.iterations, self.scale]), self.output])
        self.iterations.observe(self._redraw, names="value")
        self.scale.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        fig, self.result = _routing_state(self.votes, int(self.iterations.value), float(self.scale.value))
        self.figure = _show(self.output, fig)


def routing_explorer(votes=None) -> RoutingExplorer:
    """A widget to explore dynamic routing on a 2-D toy with two output capsules.

    Sliders: the number of routing iterations r (1–6, default 3) and the agreement scale λ (0–5,
    default 1), which multiplies the agreement added to the logits, ``b ← b + λ⟨û, v⟩`` (a larger λ is
    a colder softmax). Below them the toy (votes thin, outputs thick) and the coupling bars are
    redrawn; :func:`routing_explorer_figure` draws the same picture for the default values.

    votes ``(1, I, J, 2)`` or ``(I, J, 2)``; default :func:`toy_votes`. Returns the widget.

    Chapter 02.
    """
    return RoutingExplorer(votes)


# --- the pose explorer ------------------------------------------------------------------------------

def _image(image, model) -> torch.Tensor:
    if not isinstance(image, torch.Tensor) or not image.is_floating_point():
        raise ValueError(f"image must be a float tensor of shape (1, H, W) or (1, 1, H, W), got {type(image).__name__}")
    x = image
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if x.dim() == 3:
        x = x.unsqueeze(0)
    if x.dim() != 4 or x.shape[0] != 1:
        raise ValueError(f"image must have shape (H, W), (1, H, W) or (1, 1, H, W): one image, got {tuple(image.shape)}")
    if getattr(model, "decoder", None) is None:
        raise ValueError("the model has no decoder: build the CapsNet with CapsNetConfig(decoder=True)")
    return x.to(next(model.parameters()).device)


@torch.no_grad()
def _winning_poses(model, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    with eval_mode(model):
        out = model(x)
    return out.poses, int(out.lengths.argmax(dim=1)[0])


@torch.no_grad()
def _decode(model, poses: torch.Tensor, which: int) -> torch.Tensor:
    with eval_mode(model):
        image = model.decoder(poses, torch.full((poses.shape[0],), which, dtype=torch.long, device=poses.device))
    return image


def pose_sweep(model, image: torch.Tensor, dims: Sequence[int] | None = None,
               perturbations: Sequence[float] = SABOUR_PERTURBATIONS) -> tuple[torch.Tensor, int]:
    """Decode the winning capsule with one pose dimension perturbed, for every (dimension, perturbation).

    Args:
        model: a :class:`capsule_lab.models.CapsNet` with a decoder.
        image: one image ``(1, 1, H, W)``, ``(1, H, W)`` or ``(H, W)``.
        dims: the pose dimensions to sweep (default: all D of the class capsule).
        perturbations: values added to that one dimension (default Sabour's −0.25…0.25 by 0.05).

    Returns:
        ``(sweep, winner)``: reconstructions ``(K, P, H, W)`` on the CPU and the predicted class.

    Chapter 02.
    """
    x = _image(image, model)
    poses, winner = _winning_poses(model, x)
    D = poses.shape[-1]
    dims = list(range(D)) if dims is None else [int(d) for d in dims]
    if not dims or any(not 0 <= d < D for d in dims):
        raise ValueError(f"dims must be a non-empty list of pose dimensions in [0, {D}), got {dims}")
    deltas = [float(p) for p in perturbations]
    if not deltas or not np.all(np.isfinite(deltas)):
        raise ValueError("perturbations must be a non-empty sequence of finite numbers")
    batch = poses.repeat(len(dims) * len(deltas), 1, 1)
    for k, d in enumerate(dims):
        for q, delta in enumerate(deltas):
            batch[k * len(deltas) + q, winner, d] += delta
    images = _decode(model, batch, winner)
    H, W = images.shape[-2:]
    return images.reshape(len(dims), len(deltas), H, W).cpu(), winner


def pose_explorer_figure(model, image: torch.Tensor, dims: Sequence[int] | None = None,
                         perturbations: Sequence[float] = SABOUR_PERTURBATIONS):
    """The pose explorer's static counterpart: every pose dimension × every perturbation (Sabour, Fig. 4).

    Returns the Figure of :func:`capsule_lab.viz.plot_pose_sweep` for :func:`pose_sweep` (rows =
    dimensions, columns = perturbations); the widget shows one cell of it at a time, beside the input.

    Chapter 02.
    """
    sweep, winner = pose_sweep(model, image, dims, perturbations)
    dims = list(range(sweep.shape[0])) if dims is None else list(dims)
    return viz.plot_pose_sweep(sweep, perturbations, dims,
                               title=f"capsule of class {winner}: one pose dimension perturbed per row")


class PoseExplorer(widgets.VBox):
    """The pose explorer (see :func:`pose_explorer`): sliders ``dim`` and ``delta``, an ``output``.

    After every change ``reconstruction`` holds the decoded image ``(H, W)`` and ``figure`` the Figure.
    """

    def __init__(self, model, image: torch.Tensor):
        self.model = model
        self.image = _image(image, model)
        self.poses, self.winner = _winning_poses(model, self.image)
        D = self.poses.shape[-1]
        self.dim = widgets.IntSlider(value=0, min=0, max=D - 1, step=1, description="pose dimension",
                                     continuous_update=False, style={"description_width": "initial"})
        self.delta = widgets.FloatSlider(value=0.25, min=-0.25, max=0.25, step=0.05, description="perturbation",
                                         continuous_update=False, readout_format="+.2f",
                                         style={"description_width": "initial"})
        self.output = widgets.Output()
        self.figure = None
        self.reconstruction = None
        self.plain = _decode(model, self.poses, self.winner)[0, 0].cpu()
        super().__init__([widgets.HBox([self.dim, self.delta]), self.output])
        self.dim.observe(self._redraw, names="value")
        self.delta.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        d, delta = int(self.dim.value), float(self.delta.value)
        poses = self.poses.clone()
        poses[0, self.winner, d] += delta
        self.reconstruction = _decode(self.model, poses, self.winner)[0, 0].cpu()
        fig, axes = plt.subplots(1, 3, figsize=(6.0, 2.3), constrained_layout=True)
        panels = ((self.image[0, 0].cpu(), "input"), (self.plain, f"decoded (class {self.winner})"),
                  (self.reconstruction, f"dim {d} {delta:+.2f}"))
        for ax, (img, name) in zip(axes, panels):
            ax.imshow(img.numpy(), cmap="gray_r", vmin=0.0, vmax=1.0)
            ax.set_title(name, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
        self.figure = _show(self.output, fig)


def pose_explorer(model, image: torch.Tensor) -> PoseExplorer:
    """A widget to perturb one of the pose dimensions of the winning digit capsule and see the decoder's image.

    Sliders: the dimension (0–15 for 16-D capsules) and the value added to it (−0.25…0.25 by 0.05,
    Sabour's range). Shows the input, its plain reconstruction and the perturbed one.
    :func:`pose_explorer_figure` draws all dimensions × perturbations at once, for the static book.

    model: a CapsNet with a decoder; image: one image ``(1, 1, H, W)``, ``(1, H, W)`` or ``(H, W)``.

    Chapter 02.
    """
    return PoseExplorer(model, image)


# --- the gradient-terms explorer (chapter 03) -----------------------------------------------------------

def gradient_toy(seed: int = 0, inputs: int = 8, outputs: int = 4, dim: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Chapter 03's toy layer: seeded random votes ``(1, I, J, D)`` (float64) and a fixed assignment of
    each input capsule to one output, one-hot ``(I, J)`` (input i → output i mod J). Chapter 03.
    """
    g = torch.Generator().manual_seed(seed)
    votes = 0.5 * torch.randn(1, inputs, outputs, dim, generator=g, dtype=torch.float64)
    assignment = torch.nn.functional.one_hot(torch.arange(inputs) % outputs, outputs).double()
    return votes, assignment


def polarised_gradient_terms(iterations: int = 3, polarisation: float = 0.0, seed: int = 0):
    """The two gradient terms on :func:`gradient_toy` when the couplings are pushed toward one-hot.

    The prior logits are ``polarisation × assignment``: 0 leaves routing as Sabour's (uniform start),
    a large value makes every c_i· nearly one-hot whatever the votes. The loss is the margin loss with
    target class 0. Returns ``(couplings (I, J), VoteGradient)`` for the one sample. Chapter 03.
    """
    if isinstance(polarisation, bool) or not isinstance(polarisation, (int, float)) or not np.isfinite(polarisation):
        raise ValueError(f"polarisation must be a finite number, got {polarisation!r}")
    votes, assignment = gradient_toy(seed)
    prior = polarisation * assignment
    routed = dynamic_routing(votes, iterations, prior)
    poses = routed.poses.detach().requires_grad_(True)
    (grad_poses,) = torch.autograd.grad(margin_loss(poses.norm(dim=-1), torch.tensor([0])), poses)
    return routed.couplings[0], vote_gradient(votes, grad_poses, iterations, prior)


def _gradient_terms_state(iterations: int, polarisation: float):
    """(figure, gradient_terms summary) of the explorer's state."""
    couplings, grad = polarised_gradient_terms(iterations, polarisation)
    summary = gradient_terms(grad)
    fig = plot_gradient_terms(couplings, grad.term1[0].flatten(1).norm(dim=1), grad.term2[0].flatten(1).norm(dim=1),
                              title=f"r = {iterations}, polarisation {polarisation:g}: "
                                    f"‖term 2‖/‖term 1‖ = {summary['ratio']:.3f}, cos(total, term 1) = "
                                    f"{summary['cosine']:.3f}")
    return fig, summary


def gradient_terms_figure(iterations: int = 3, polarisation: float = 0.0):
    """The gradient-terms explorer's picture: couplings and per-input norms of the two terms. Chapter 03."""
    return _gradient_terms_state(iterations, polarisation)[0]


class GradientTermsExplorer(widgets.VBox):
    """Sliders ``iterations`` and ``polarisation`` over :func:`gradient_terms_figure`; ``.summary`` holds the
    :func:`capsule_lab.gradients.gradient_terms` of the current state and ``.figure`` the Figure. Chapter 03."""

    def __init__(self):
        style = {"description_width": "initial"}
        self.iterations = widgets.IntSlider(value=3, min=1, max=6, description="iterations r",
                                            continuous_update=False, style=style)
        self.polarisation = widgets.FloatSlider(value=0.0, min=0.0, max=10.0, step=0.5, description="polarisation",
                                                continuous_update=False, style=style)
        self.output = widgets.Output()
        self.figure = self.summary = None
        super().__init__([widgets.HBox([self.iterations, self.polarisation]), self.output])
        self.iterations.observe(self._redraw, names="value")
        self.polarisation.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        fig, self.summary = _gradient_terms_state(int(self.iterations.value), float(self.polarisation.value))
        self.figure = _show(self.output, fig)


def gradient_terms_explorer() -> GradientTermsExplorer:
    """A widget: pick the number of routing iterations and how polarised the couplings are, and see the two
    terms of ∂L/∂û per input capsule (:func:`gradient_terms_figure` draws the default state). Chapter 03."""
    return GradientTermsExplorer()
