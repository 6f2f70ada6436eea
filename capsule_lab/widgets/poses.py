"""The pose explorer: perturb one pose dimension of the winning digit capsule and see the decoder's image.

Taught in chapter 02, after Sabour et al. (2017), Fig. 4. :func:`pose_sweep` decodes the winning capsule
with one pose dimension moved, for every (dimension, perturbation); :func:`pose_explorer_figure` draws the
whole sweep for the static book (:func:`capsule_lab.figures.plot_pose_sweep`); :func:`pose_explorer` shows
one cell of it at a time, beside the input.
"""

from __future__ import annotations

from typing import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch

from ..figures.capsnet import plot_pose_sweep
from ..figures.descriptions import attach_description, description_of
from ..training import eval_mode
from .figure_output import show_figure

__all__ = ["SABOUR_PERTURBATIONS", "pose_sweep", "pose_explorer_figure", "PoseExplorer", "pose_explorer"]

# Sabour et al., Fig. 4: one pose dimension tweaked by intervals of 0.05 in [−0.25, 0.25].
SABOUR_PERTURBATIONS = tuple(round(0.05 * k, 2) for k in range(-5, 6))
# The sliders' starting values (pose dimension, perturbation).
_DEFAULT_DIM, _DEFAULT_DELTA = 0, 0.25


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

    Returns the Figure of :func:`capsule_lab.figures.plot_pose_sweep` for :func:`pose_sweep` (rows =
    dimensions, columns = perturbations); the widget shows one cell of it at a time, beside the input. Its alt
    text says where in the grid the widget's starting state is, and its caption names the sliders.

    Chapter 02.
    """
    sweep, winner = pose_sweep(model, image, dims, perturbations)
    dims = list(range(sweep.shape[0])) if dims is None else [int(d) for d in dims]
    fig = plot_pose_sweep(sweep, perturbations, dims,
                          title=f"capsule of class {winner}: one pose dimension perturbed per row")
    deltas = [round(float(x), 6) for x in perturbations]
    alt = f"The winning capsule is of class {winner}. " + description_of(fig).alt
    if _DEFAULT_DIM in dims and _DEFAULT_DELTA in deltas:
        row, column = dims.index(_DEFAULT_DIM) + 1, deltas.index(_DEFAULT_DELTA) + 1
        alt += (f" The widget opens at dim {_DEFAULT_DIM} with {_DEFAULT_DELTA:+.2f} added: row {row}, column "
                f"{column} of the grid.")
    return attach_description(fig, alt, f"The pose explorer's every setting for one digit, read as class {winner}: "
                                        "rows are its pose-dimension slider, columns its perturbation slider")


class PoseExplorer(widgets.VBox):
    """The pose explorer (see :func:`pose_explorer`): sliders ``dim`` and ``delta``, an ``output``.

    After every change ``reconstruction`` holds the decoded image ``(H, W)`` and ``figure`` the Figure.
    """

    def __init__(self, model, image: torch.Tensor):
        self.model = model
        self.image = _image(image, model)
        self.poses, self.winner = _winning_poses(model, self.image)
        D = self.poses.shape[-1]
        self.dim = widgets.IntSlider(value=_DEFAULT_DIM, min=0, max=D - 1, step=1, description="pose dimension",
                                     continuous_update=False, style={"description_width": "initial"})
        self.delta = widgets.FloatSlider(value=_DEFAULT_DELTA, min=-0.25, max=0.25, step=0.05,
                                         description="perturbation",
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
        self.figure = show_figure(self.output, fig)


def pose_explorer(model, image: torch.Tensor) -> PoseExplorer:
    """A widget to perturb one of the pose dimensions of the winning digit capsule and see the decoder's image.

    Sliders: the dimension (0–15 for 16-D capsules) and the value added to it (−0.25…0.25 by 0.05,
    Sabour's range). Shows the input, its plain reconstruction and the perturbed one.
    :func:`pose_explorer_figure` draws all dimensions × perturbations at once, for the static book.

    model: a CapsNet with a decoder; image: one image ``(1, 1, H, W)``, ``(1, H, W)`` or ``(H, W)``.

    Chapter 02.
    """
    return PoseExplorer(model, image)
