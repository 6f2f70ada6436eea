"""The ladder capsule layer: keep the K most active capsules, build the weights from which ones they are,
regress them back from the capsules above.

Taught in chapter 06 (``chapters/06_ladder.ipynb``), after Jeong, Lee and Kim, "Ladder capsule network"
(ICML 2019). Dynamic routing (chapter 02) sends every lower capsule's vote to every higher capsule and
lets them agree; the ladder capsule network (L-CapsNet) replaces it by two layers trained by
backpropagation alone:

**The pruning layer** (§3.1). Of the n lower capsules ``u_i`` (activity ``a_i = ‖u_i‖``, the capsule's
length) keep the K most active, in ascending index order (our choice, see below), as the rows of ``U_K``
``(K, d)``, and remember which they were in the *code vector* ``c ∈ {0, 1}ⁿ`` (1 where capsule i was kept;
chapter 06 writes it z, keeping c for couplings, and the class activities d_j as δ_j). With n = 6, K = 3 and
u₁, u₄, u₆ kept: ``c = (1, 0, 0, 1, 0, 1)``. Only ``U_K`` and ``c`` go to the layer above.

**Weight construction and propagation** (§3.2). The kept capsules change from image to image, so there is
no fixed matrix W_ij per pair; instead, per class j, three fully-connected networks of the code vector
(Table 1: ReLU hidden layers, a linear or sigmoid output) build the weights:

    f_{j|i}(c) ∈ R^{d×D}     for the K rows i      the propagation maps              (linear output)
    p_j(c)     ∈ (0, 1)^K                          the contributions of the K rows   (sigmoid output)
    f_j^reg(c) ∈ R^{K×d×D}                         the regression maps               (linear output)

    ũ_{j|i} = u_i f_{j|i}(c),     s_j = Σ_{i=1}^K p_{j|i}(c) ũ_{j|i} ∈ R^D          (eq. 1)

Table 1's widths for d = 8, D = 16: ``f``: n → 8·16·3 → 8·16·2 → 8·16 → 8·16·K; ``p``: n → 3K → 2K → K → K
(:func:`table1_widths`). s_j is the *pose* of class capsule j only (the paper calls it "partial"); its
activity comes from the ladder layer.

**The ladder layer** (§3.3). If class j is the right whole, its pose should predict the poses of its parts:
regress the kept capsules back from s_j, squash each regressed row into the unit ball, and score the fit:

    û_j^reg = f_j^reg(c) s_jᵀ ∈ R^{K×d}                                              (eq. 2)
    u_j^reg = squash(û_j^reg), row by row                                            (eq. 3)
    d_j     = exp(−γ · (1/K) Σ_{i=1}^K ‖u_{i|j}^reg − u_i‖²),     γ = 5.12           (eq. 4)
    v_j     = d_j · s_j / ‖s_j‖

d_j ∈ (0, 1] is class j's activity (the length of its output v_j). γ solves exp(−0.01 γ) = 0.95: a mean
squared regression error of 0.01 still gives an activity of 0.95 (:func:`solve_gamma`: the exact root is
5.129…, the paper writes 5.12).

**The loss** (§4): the margin loss on the activities d, plus ε ‖c − A‖² with ε = 10⁻⁴, where c is the
code vector and A = (a_1, …, a_n) the activities (lengths) of *all* n lower capsules: it pulls the kept
capsules' lengths toward 1 and the dropped ones' toward 0 (:func:`ladder_loss`).

**Where the paper is silent or ambiguous, this module chooses** (``tests/test_ladder.py`` checks each):

- *Gradients through the top-K selection.* The selection is piecewise constant in the activities, so no
  gradient flows into *which* capsules are kept: the kept capsules' poses pass their gradient through the
  gather (to the kept capsules only), and the code vector is a constant (its derivative is 0 almost
  everywhere; no straight-through estimator). A dropped capsule gets a gradient only from the ε ‖c − A‖²
  term.
- *Ties.* The paper assumes distinct activities (a₍₁₎ > a₍₂₎ > …). Among equal activities the lower index
  is kept, so exactly K capsules are always kept.
- *Order of the rows.* §3.1 orders the rows of U_K by activity (row p is u_{I(p)}, I(m) "the ordering index
  for the mth lowest activity level" among the kept capsules). We order them by ascending capsule index (the
  course's binding API, and the public code's): then which capsule sits in row i is a function of c alone, which
  is what lets networks of c build the weight of row i; in activity order it also depends on the activities,
  which c does not hold.
- *The squash of eq. 3* acts on each of the K regressed rows (each should land in the unit ball B^d like the
  capsule it regresses), not on the K×d matrix as one vector.
- *The regression target.* Eq. 4 compares u^reg with U_K without stopping gradients on either side: the
  kept capsules receive gradient both through the propagation and as targets of the regression.
- The ‖c − A‖² term is summed over the n capsules and averaged over the batch, like the margin loss.
- *Regress from s_j, not v_j.* §3.3's text once says the regression is "from v_j"; eq. 2 uses s_j, and v_j
  needs d_j, which needs the regression: eq. 2 is what is built.
- *Only fully-connected layers.* §5.1 says the networks of c combine fully-connected and convolution layers;
  Table 1 lists four fully-connected layers, which is what is built (with its widths by default).

**The public code differs from the paper** (taewonjeong/L-CapsNet, TF1; the course teaches the paper):
its f networks widen instead of narrowing (n → 128 → 256 → 384 → 8·16·K) and its p networks are
n → 70 → 70 → 70 → K; it L2-normalises s_j (not squashed) before regressing from it; it predicts the class
with the smallest regression error instead of the largest activity d_j, and trains with another loss; its
network has about 81M parameters.

Shapes (d, D: lower and class capsule dimensions; J classes; n lower capsules, K kept):
    u          (B, n, d)        lower capsules
    selected   (B, K, d)        U_K, ascending index order
    code       (B, n)           c, 0/1
    indices    (B, K)           the kept capsules' indices, ascending
    f, f_reg   (B, J, K, d, D)
    p          (B, J, K)
    s, v       (B, J, D)
    regressed  (B, J, K, d)     u^reg
    d          (B, J)
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import nn

from .._checks import check_nonnegative, check_positive_int, check_tensor, shape_error
from ..capsules import margin_loss, squash

__all__ = ["GAMMA", "EPSILON", "PrunedCapsules", "ConstructedWeights", "LadderResult", "capsule_activity",
           "code_vector", "top_k_capsules", "solve_gamma", "table1_widths", "propagate", "regress",
           "regressed_capsules", "ladder_activation", "ladder_poses", "ladder_loss", "CodeMLP", "CodeWeights",
           "PruningLayer", "LadderLayer"]

#: γ of eq. 4 as the paper writes it (the exact root of exp(−0.01 γ) = 0.95 is 5.129…; see :func:`solve_gamma`).
GAMMA = 5.12
#: ε of the loss L = margin(d) + ε ‖c − A‖² (§4).
EPSILON = 1e-4


class PrunedCapsules(NamedTuple):
    """What the pruning layer passes on (chapter 06): ``selected`` U_K ``(B, K, d)`` in ascending index order,
    ``code`` the 0/1 code vector c ``(B, n)``, ``indices`` ``(B, K)`` the kept capsules, ascending."""

    selected: torch.Tensor
    code: torch.Tensor
    indices: torch.Tensor


class ConstructedWeights(NamedTuple):
    """The weights built from the code vector (chapter 06): ``propagation`` f_{j|i}(c) ``(B, J, K, d, D)``,
    ``contributions`` p_j(c) ``(B, J, K)``, ``regression`` f_j^reg(c) ``(B, J, K, d, D)``."""

    propagation: torch.Tensor
    contributions: torch.Tensor
    regression: torch.Tensor


class LadderResult(NamedTuple):
    """What a :class:`LadderLayer` returns (chapter 06).

    activities: ``(B, J)`` d_j of eq. 4 (the class capsules' lengths).
    poses: ``(B, J, D)`` v_j = d_j s_j / ‖s_j‖.
    partial: ``(B, J, D)`` s_j of eq. 1.
    regressed: ``(B, J, K, d)`` u_j^reg of eq. 3 (squashed rows).
    contributions: ``(B, J, K)`` p_j(c).
    """

    activities: torch.Tensor
    poses: torch.Tensor
    partial: torch.Tensor
    regressed: torch.Tensor
    contributions: torch.Tensor


def _norm(x: torch.Tensor) -> torch.Tensor:
    """‖x‖ over the last dimension (kept), as sqrt(‖x‖² + 10⁻¹⁶): finite with a finite gradient at 0."""
    return torch.sqrt((x * x).sum(dim=-1, keepdim=True) + 1e-16)


def capsule_activity(u: torch.Tensor) -> torch.Tensor:
    """The activities a_i = ‖u_i‖ of capsules ``u`` ``(B, n, d)`` → ``(B, n)`` (§3.1: the length of a capsule
    is the probability that its entity is present). Chapter 06.
    """
    check_tensor(u, "u", "(B, n, d)", ndim=3, nonempty=True, floating=True)
    return torch.linalg.vector_norm(u, dim=-1)


def code_vector(indices: torch.Tensor, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The code vector c ``(B, n)``: 1 at each kept capsule's index, 0 elsewhere (§3.1).

    indices ``(B, K)`` distinct integers in ``[0, n)``. Figure 2 of the paper: n = 6, kept capsules 1, 4, 6
    (indices 0, 3, 5) → ``c = (1, 0, 0, 1, 0, 1)``. Chapter 06.
    """
    check_positive_int(n, "n")
    check_tensor(indices, "indices", "(B, K)", ndim=2)
    if indices.is_floating_point() or indices.dtype == torch.bool:
        raise ValueError(f"indices must be an integer tensor of shape (B, K), got dtype {indices.dtype}")
    if indices.numel() and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"indices must lie in [0, n) = [0, {n}), got range [{indices.min()}, {indices.max()}]")
    ordered = indices.sort(dim=1).values
    if (ordered[:, 1:] == ordered[:, :-1]).any():
        raise ValueError("indices must be distinct within each row of shape (B, K)")
    code = torch.zeros(indices.shape[0], n, dtype=dtype, device=indices.device)
    return code.scatter_(1, indices.long(), 1.0)


def top_k_capsules(u: torch.Tensor, k: int) -> PrunedCapsules:
    """The pruning layer: keep the ``k`` most active capsules (activity = length), in ascending index order.

    u ``(B, n, d)``, 1 ≤ k ≤ n → :class:`PrunedCapsules` ``(selected (B, k, d), code (B, n) 0/1,
    indices (B, k))``, unpackable as a tuple. Among capsules of equal length the lower index is kept, so
    exactly k are kept. ``selected`` is a gather of ``u``: gradient flows to the kept capsules' poses; the
    choice itself and the code vector carry none (see the module docstring). ``code`` has ``u``'s dtype.

    Chapter 06.
    """
    check_tensor(u, "u", "(B, n, d)", ndim=3, nonempty=True, floating=True)
    B, n, d = u.shape
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k must be an integer in [1, n] = [1, {n}] for u of shape {tuple(u.shape)}, got {k!r}")
    activity = torch.linalg.vector_norm(u.detach(), dim=-1)                      # (B, n)
    # a stable sort keeps equal activities in index order, so the lower index wins a tie
    most_active = torch.sort(activity, dim=1, descending=True, stable=True).indices[:, :k]
    indices = most_active.sort(dim=1).values                                     # ascending index order
    selected = u.gather(1, indices.unsqueeze(-1).expand(B, k, d))
    return PrunedCapsules(selected, code_vector(indices, n, dtype=u.dtype), indices)


def solve_gamma(distance: float = 0.01, activity: float = 0.95) -> float:
    """The γ for which a mean squared regression error ``distance`` gives the activity ``activity``:
    exp(−γ · distance) = activity, so γ = −ln(activity) / distance.

    The paper's choice: ``solve_gamma(0.01, 0.95)`` = 5.1293…, written 5.12 in the paper (the course keeps
    the paper's 5.12, :data:`GAMMA`). Chapter 06.
    """
    check_nonnegative(distance, "distance")
    if distance <= 0:
        raise ValueError(f"distance must be a number > 0, got {distance!r}")
    if isinstance(activity, bool) or not isinstance(activity, (int, float)) or not 0 < activity <= 1:
        raise ValueError(f"activity must be a number in (0, 1], got {activity!r}")
    return -math.log(activity) / distance


def table1_widths(in_dim: int, out_dim: int, k: int) -> tuple[tuple, tuple]:
    """The hidden widths of Table 1: ``(f widths, p widths)`` = ``((3dD, 2dD, dD), (3K, 2K, K))``.

    f_{j|i} and f_j^reg share the first; p_j takes the second. For d = 8, D = 16, K = 70:
    ``((384, 256, 128), (210, 140, 70))``. Chapter 06.
    """
    for value, name in ((in_dim, "in_dim"), (out_dim, "out_dim"), (k, "k")):
        check_positive_int(value, name)
    dD = in_dim * out_dim
    return (3 * dD, 2 * dD, dD), (3 * k, 2 * k, k)


def propagate(selected: torch.Tensor, propagation: torch.Tensor, contributions: torch.Tensor) -> torch.Tensor:
    """Eq. 1: the class poses ``s_j = Σ_i p_{j|i}(c) · u_i f_{j|i}(c)`` → ``(B, J, D)``.

    selected U_K ``(B, K, d)``; propagation f ``(B, J, K, d, D)`` (row i's map u_i ↦ u_i f_{j|i}, a row vector
    times a d×D matrix); contributions p ``(B, J, K)``. Chapter 06.
    """
    check_tensor(propagation, "propagation", "(B, J, K, d, D)", ndim=5, nonempty=True, floating=True)
    B, J, K, d, D = propagation.shape
    check_tensor(selected, "selected", f"(B, K, d) = ({B}, {K}, {d})", sizes=(B, K, d), floating=True)
    check_tensor(contributions, "contributions", f"(B, J, K) = ({B}, {J}, {K})", sizes=(B, J, K), floating=True)
    predictions = torch.einsum("bkd,bjkde->bjke", selected, propagation)          # ũ_{j|i}: (B, J, K, D)
    return torch.einsum("bjk,bjke->bje", contributions, predictions)


def regress(partial: torch.Tensor, regression: torch.Tensor) -> torch.Tensor:
    """Eq. 2: the kept capsules regressed from each class pose, ``û_j^reg = f_j^reg(c) s_jᵀ`` → ``(B, J, K, d)``.

    partial s ``(B, J, D)``; regression f^reg ``(B, J, K, d, D)``: row i of û_j^reg is the d×D matrix
    f^reg[j, i] times s_j. Eq. 3 squashes each row: :func:`regressed_capsules`. Chapter 06.
    """
    check_tensor(regression, "regression", "(B, J, K, d, D)", ndim=5, nonempty=True, floating=True)
    B, J, K, d, D = regression.shape
    check_tensor(partial, "partial", f"(B, J, D) = ({B}, {J}, {D})", sizes=(B, J, D), floating=True)
    return torch.einsum("bjkde,bje->bjkd", regression, partial)


def regressed_capsules(partial: torch.Tensor, regression: torch.Tensor) -> torch.Tensor:
    """Eqs. 2–3: the regression of eq. 2, each of its K rows squashed into the unit ball,
    ``u_j^reg = squash(f_j^reg(c) s_jᵀ)`` row by row → ``(B, J, K, d)``.

    partial s ``(B, J, D)``; regression f^reg ``(B, J, K, d, D)``. The squash acts on each d-dimensional row
    (each row stands for one kept capsule, which lies in the unit ball), not on the K×d matrix as a whole.
    Chapter 06.
    """
    return squash(regress(partial, regression))


def ladder_activation(u_reg: torch.Tensor, u_k: torch.Tensor, gamma: float = GAMMA) -> torch.Tensor:
    """Eq. 4: ``d = exp(−γ · (1/K) Σ_i ‖u_reg_i − u_k_i‖²)``, the mean over the K rows of the squared distance.

    u_reg ``(..., K, d)``, u_k ``(..., K, d)``: the leading dimensions broadcast (pass the kept capsules
    ``(B, K, d)`` as ``u_k.unsqueeze(1)`` against the regressions of J classes ``(B, J, K, d)``) → ``(...)``.
    gamma ≥ 0 (default 5.12, :data:`GAMMA`). A perfect regression gives 1; a mean squared error of 0.01
    gives exp(−0.0512) ≈ 0.95. Chapter 06.
    """
    check_tensor(u_reg, "u_reg", "(..., K, d)", min_ndim=2, nonempty=True, floating=True)
    K, d = u_reg.shape[-2:]
    check_tensor(u_k, "u_k", f"(..., K, d) = (..., {K}, {d})", min_ndim=2, nonempty=True, floating=True)
    if tuple(u_k.shape[-2:]) != (K, d):
        raise shape_error("u_k", f"(..., K, d) = (..., {K}, {d})", u_k)
    try:
        torch.broadcast_shapes(u_reg.shape[:-2], u_k.shape[:-2])
    except RuntimeError:
        raise ValueError(f"u_reg {tuple(u_reg.shape)} and u_k {tuple(u_k.shape)} must have broadcastable leading "
                         f"dimensions (..., K, d)") from None
    check_nonnegative(gamma, "gamma")
    mean_sq = ((u_reg - u_k) ** 2).sum(dim=-1).mean(dim=-1)
    return torch.exp(-gamma * mean_sq)


def ladder_poses(partial: torch.Tensor, activities: torch.Tensor) -> torch.Tensor:
    """The class capsules' outputs ``v_j = d_j · s_j / ‖s_j‖`` → ``(B, J, D)``: s_j's direction, d_j's length.

    partial s ``(B, J, D)``; activities d ``(B, J)``. Finite at s_j = 0 (there v_j = 0). Chapter 06.
    """
    check_tensor(partial, "partial", "(B, J, D)", ndim=3, nonempty=True, floating=True)
    B, J, _ = partial.shape
    check_tensor(activities, "activities", f"(B, J) = ({B}, {J})", sizes=(B, J), floating=True)
    return activities.unsqueeze(-1) * partial / _norm(partial)


def ladder_loss(activities: torch.Tensor, targets: torch.Tensor, code: torch.Tensor,
                primary_activities: torch.Tensor, epsilon: float = EPSILON, m_pos: float = 0.9,
                m_neg: float = 0.1, lam: float = 0.5) -> torch.Tensor:
    """The L-CapsNet loss (§4): ``L = margin(d) + ε ‖c − A‖²``, averaged over the batch.

    activities d ``(B, J)``: the class activities of eq. 4, in Sabour's margin loss
    (:func:`~capsule_lab.capsules.margin_loss`, m⁺ = 0.9, m⁻ = 0.1, λ = 0.5); targets ``(B,)`` labels or
    ``(B, J)`` 0/1. code c ``(B, n)``: the pruning layer's code vector (a constant: detached);
    primary_activities A ``(B, n)``: the activities (lengths) a_i of *all* n lower capsules, not only the
    kept ones. ``‖c − A‖²`` is summed over the n capsules; ε = 10⁻⁴ (:data:`EPSILON`). Chapter 06.
    """
    check_tensor(code, "code", "(B, n)", ndim=2, nonempty=True, floating=True)
    B, n = code.shape
    check_tensor(primary_activities, "primary_activities", f"(B, n) = ({B}, {n})", sizes=(B, n), floating=True)
    check_tensor(activities, "activities", f"(B, J) = ({B}, J)", ndim=2, floating=True)
    if activities.shape[0] != B:
        raise shape_error("activities", f"(B, J) = ({B}, J)", activities)
    check_nonnegative(epsilon, "epsilon")
    penalty = ((code.detach() - primary_activities) ** 2).sum(dim=1).mean()
    return margin_loss(activities, targets, m_pos, m_neg, lam) + epsilon * penalty


class CodeMLP(nn.Module):
    """J fully-connected networks of the code vector, one per class, run side by side: ``(B, n)`` → ``(B, J, out)``.

    Hidden layers of the given widths with ReLU, then a linear (``output="linear"``) or sigmoid
    (``output="sigmoid"``) output layer — one column of Table 1. The J networks share nothing: the first
    layer is one ``(n, J·h₁)`` matrix (its J blocks are the J networks' first layers), the others are
    stacked ``(J, h_in, h_out)`` weights applied with one einsum. Weights and biases start uniform in
    ±1/√fan_in (``nn.Linear``'s default range).

    Chapter 06.
    """

    def __init__(self, in_features: int, classes: int, widths: tuple, out_features: int, output: str = "linear"):
        super().__init__()
        check_positive_int(in_features, "in_features")
        check_positive_int(classes, "classes")
        check_positive_int(out_features, "out_features")
        if not isinstance(widths, (tuple, list)) or not widths:
            raise ValueError(f"widths must be a non-empty tuple of hidden widths, got {widths!r}")
        for w in widths:
            check_positive_int(w, "each hidden width")
        if output not in {"linear", "sigmoid"}:
            raise ValueError(f"output must be 'linear' or 'sigmoid', got {output!r}")
        self.in_features, self.classes, self.out_features, self.output = in_features, classes, out_features, output
        self.widths = tuple(widths)
        self.first = nn.Linear(in_features, classes * self.widths[0])
        sizes = [*self.widths, out_features]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for h_in, h_out in zip(sizes, sizes[1:]):
            bound = 1.0 / math.sqrt(h_in)
            self.weights.append(nn.Parameter(torch.empty(classes, h_in, h_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(classes, h_out).uniform_(-bound, bound)))

    def forward(self, code: torch.Tensor) -> torch.Tensor:
        check_tensor(code, "code", f"(B, n) = (B, {self.in_features})", sizes=(None, self.in_features),
                     floating=True)
        h = torch.relu(self.first(code).view(code.shape[0], self.classes, self.widths[0]))
        last = len(self.weights) - 1
        for k, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.einsum("bjh,jho->bjo", h, w) + b
            if k < last:
                h = torch.relu(h)
        return torch.sigmoid(h) if self.output == "sigmoid" else h


class CodeWeights(nn.Module):
    """Weight construction (§3.2, Table 1): from the code vector c ``(B, n)`` build f_{j|i}(c), p_j(c) and
    f_j^reg(c) for J classes → :class:`ConstructedWeights`.

    Three :class:`CodeMLP` s: ``propagation`` (linear output, reshaped to ``(B, J, K, d, D)``), ``contribution``
    (sigmoid output ``(B, J, K)``) and ``regression`` (linear, ``(B, J, K, d, D)``). ``widths`` (of f and
    f^reg) and ``contribution_widths`` (of p) default to Table 1's (:func:`table1_widths`).

    Chapter 06.
    """

    def __init__(self, n: int, k: int, in_dim: int, out_dim: int, classes: int = 10,
                 widths: Optional[tuple] = None, contribution_widths: Optional[tuple] = None):
        super().__init__()
        check_positive_int(n, "n")
        check_positive_int(k, "k")
        if k > n:
            raise ValueError(f"k must be an integer in [1, n] = [1, {n}], got {k!r}")
        default_f, default_p = table1_widths(in_dim, out_dim, k)
        self.n, self.k, self.in_dim, self.out_dim, self.classes = n, k, in_dim, out_dim, classes
        size = k * in_dim * out_dim
        self.propagation = CodeMLP(n, classes, widths or default_f, size, "linear")
        self.contribution = CodeMLP(n, classes, contribution_widths or default_p, k, "sigmoid")
        self.regression = CodeMLP(n, classes, widths or default_f, size, "linear")

    def forward(self, code: torch.Tensor) -> ConstructedWeights:
        check_tensor(code, "code", f"(B, n) = (B, {self.n})", sizes=(None, self.n), floating=True)
        shape = (code.shape[0], self.classes, self.k, self.in_dim, self.out_dim)
        f = self.propagation(code).view(shape)
        return ConstructedWeights(f, self.contribution(code), self.regression(code).view(shape))


class PruningLayer(nn.Module):
    """The pruning layer (§3.1) as a module: ``(B, n, d)`` → :class:`PrunedCapsules` (:func:`top_k_capsules`).
    It has no parameters. Chapter 06.
    """

    def __init__(self, k: int):
        super().__init__()
        check_positive_int(k, "k")
        self.k = k

    def forward(self, u: torch.Tensor) -> PrunedCapsules:
        return top_k_capsules(u, self.k)

    def extra_repr(self) -> str:
        return f"k={self.k}"


class LadderLayer(nn.Module):
    """Weight construction, propagation and the ladder layer (§3.2–3.3): the kept capsules U_K ``(B, K, d)``
    and the code vector c ``(B, n)`` → :class:`LadderResult` for J class capsules of dimension D.

    forward: f, p, f^reg = :class:`CodeWeights` (c); s = :func:`propagate` (eq. 1); u^reg =
    :func:`regressed_capsules` (eqs. 2–3, each row squashed); d = :func:`ladder_activation` (u^reg, U_K, γ) (eq. 4);
    v = :func:`ladder_poses` (s, d). Every weight is trained by backpropagation: there is no routing loop.

    Args:
        n, k: the number of lower capsules and of kept ones; in_dim: their dimension d.
        classes, out_dim: J and D. widths, contribution_widths: hidden widths (default: Table 1's).
        gamma: γ of eq. 4 (default 5.12).

    Chapter 06.
    """

    def __init__(self, n: int, k: int, in_dim: int = 8, classes: int = 10, out_dim: int = 16,
                 widths: Optional[tuple] = None, contribution_widths: Optional[tuple] = None, gamma: float = GAMMA):
        super().__init__()
        check_nonnegative(gamma, "gamma")
        self.gamma = gamma
        self.weights = CodeWeights(n, k, in_dim, out_dim, classes, widths, contribution_widths)

    def forward(self, selected: torch.Tensor, code: torch.Tensor) -> LadderResult:
        w = self.weights
        check_tensor(code, "code", f"(B, n) = (B, {w.n})", sizes=(None, w.n), floating=True)
        B = code.shape[0]
        check_tensor(selected, "selected", f"(B, K, d) = ({B}, {w.k}, {w.in_dim})", sizes=(B, w.k, w.in_dim),
                     floating=True)
        f, p, f_reg = w(code)
        s = propagate(selected, f, p)                                   # eq. 1
        u_reg = regressed_capsules(s, f_reg)                            # eqs. 2-3, each row squashed
        d = ladder_activation(u_reg, selected.unsqueeze(1), self.gamma)  # eq. 4
        return LadderResult(d, ladder_poses(s, d), s, u_reg, p)
