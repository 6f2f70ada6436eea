"""The graded exercises of chapter 01 (capsules): ``01.squash``, ``01.margin_loss``, ``01.primary_capsules``.

Each task has the course's reference (from :mod:`capsule_lab.capsules`), the seeded random and edge-case
inputs it is checked on, the known wrong answers with their hints and a general hint pointing to its
section of chapter 01. Registered with :func:`capsule_lab.grading.tasks.register` on import.
"""

from __future__ import annotations

import torch

from ..capsules import conv_to_capsules, margin_loss, squash
from .tasks import Case, Task, WrongAnswer, generator, randn, register


# --- 01.squash --------------------------------------------------------------------------------------

def _ref_squash(s, dim=-1):
    return squash(s, dim=dim)


def _squash_cases() -> list:
    g = generator(101)
    cases = [
        Case("random (4, 8), float32", (randn(g, 4, 8),)),
        Case("random (2, 3, 16), float64", (randn(g, 2, 3, 16, dtype=torch.float64),)),
        Case("random (2, 8, 5) squashed along dim=1, float32", (randn(g, 2, 8, 5),), {"dim": 1}),
        Case("random (6, 3) squashed along dim=0, float64", (randn(g, 6, 3, dtype=torch.float64),), {"dim": 0}),
    ]
    z = randn(g, 5, 4)
    z[1] = 0.0
    z[3] = 0.0
    cases.append(Case("rows 1 and 3 are zero vectors, float32", (z,)))
    cases.append(Case("all-zero input (3, 8), float64: gradient at s = 0",
                      (torch.zeros(3, 8, dtype=torch.float64),), grad="finite"))
    for dtype in (torch.float32, torch.float64):
        name = str(dtype).replace("torch.", "")
        big = randn(g, 4, 8, dtype=torch.float64)
        big = big / big.norm(dim=-1, keepdim=True) * torch.tensor([1e3, 1e5, 1e7, 1e8], dtype=torch.float64)[:, None]
        cases.append(Case(f"very large vectors (‖s‖ from 1e3 to 1e8), {name}", (big.to(dtype),)))
        small = randn(g, 4, 8, dtype=torch.float64)
        small = small / small.norm(dim=-1, keepdim=True) * torch.tensor([1e-2, 1e-3, 1e-4, 1e-6],
                                                                         dtype=torch.float64)[:, None]
        # near 0 the result depends on the ε a student picks: values and finiteness are checked, and the
        # gradient must only be finite
        cases.append(Case(f"very small vectors (‖s‖ from 1e-2 to 1e-6), {name}", (small.to(dtype),),
                          grad="finite"))
    return cases


def _norm2(s, dim):
    return (s * s).sum(dim=dim, keepdim=True)


_SQUASH_WRONG = (
    WrongAnswer("no ‖s‖² factor", lambda s, dim=-1: s / (1 + _norm2(s, dim)),
                "the length of v must be ‖s‖²/(1+‖s‖²): you are missing the factor ‖s‖² "
                "(v = ‖s‖²/(1+‖s‖²) · s/‖s‖)."),
    WrongAnswer("unit vector", lambda s, dim=-1: s / torch.sqrt(_norm2(s, dim) + 1e-16),
                "you returned the unit vector s/‖s‖: multiply it by ‖s‖²/(1+‖s‖²) so that short vectors "
                "shrink towards 0 and long ones to a length just below 1."),
    WrongAnswer("last dim only", lambda s, dim=-1: _norm2(s, -1) / (1 + _norm2(s, -1)) * s / torch.sqrt(
        _norm2(s, -1) + 1e-16),
                "you squashed along the last dimension: squash along `dim` (use it in every sum/norm)."),
)


# --- 01.margin_loss ---------------------------------------------------------------------------------

def _ref_margin_loss(lengths, labels):
    return margin_loss(lengths, labels)


def _margin_cases() -> list:
    g = generator(102)

    def rand_lengths(B, J, dtype):
        return torch.rand(B, J, generator=g, dtype=torch.float64).to(dtype)

    def labels(B, J):
        return torch.randint(0, J, (B,), generator=g)

    cases = [
        Case("random lengths (8, 10), float32", (rand_lengths(8, 10, torch.float32), labels(8, 10))),
        Case("random lengths (5, 4), float64", (rand_lengths(5, 4, torch.float64), labels(5, 4))),
        Case("one sample (1, 3), float32", (rand_lengths(1, 3, torch.float32), labels(1, 3))),
    ]
    # exactly at the margins: ‖v‖ = m⁺ = 0.9 for the label, m⁻ = 0.1 for the others → loss 0
    at = torch.full((4, 5), 0.1)
    y = torch.tensor([0, 2, 4, 1])
    at[torch.arange(4), y] = 0.9
    cases.append(Case("lengths exactly at the margins 0.9 / 0.1, float32", (at, y)))
    at64 = at.double()
    at64[0, 1] = 0.95   # absent class above m⁻ … and present class below m⁺
    at64[1, 2] = 0.5
    cases.append(Case("lengths at and around the margins, float64", (at64, y)))
    ext = torch.tensor([[0.0, 0.99, 0.0], [0.99, 0.0, 0.99], [0.0, 0.0, 0.0]], dtype=torch.float64)
    cases.append(Case("lengths 0 and 0.99, float64", (ext, torch.tensor([1, 1, 2]))))
    return cases


def _margin_terms(lengths, labels):
    T = torch.nn.functional.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    present = T * torch.clamp(0.9 - lengths, min=0) ** 2
    absent = 0.5 * (1 - T) * torch.clamp(lengths - 0.1, min=0) ** 2
    return T, present, absent


_MARGIN_WRONG = (
    WrongAnswer("mean over classes", lambda l, y: sum(_margin_terms(l, y)[1:]).mean(),
                "sum the loss over the classes k and average only over the batch (you averaged over the "
                "classes too)."),
    WrongAnswer("sum over batch", lambda l, y: sum(_margin_terms(l, y)[1:]).sum(),
                "average over the batch (you summed over it)."),
    WrongAnswer("λ on the present class",
                lambda l, y: (0.5 * _margin_terms(l, y)[1] + _margin_terms(l, y)[2]).sum(1).mean(),
                "λ = 0.5 down-weights only the absent classes (1 − T_k), not the present one."),
    WrongAnswer("no max(0, ·)", lambda l, y: ((lambda T: T * (0.9 - l) ** 2 + 0.5 * (1 - T) * (l - 0.1) ** 2)(
        _margin_terms(l, y)[0])).sum(1).mean(),
        "each term is max(0, ·)²: a present class longer than 0.9 (or an absent one shorter than 0.1) "
        "costs nothing."),
)


# --- 01.primary_capsules ----------------------------------------------------------------------------

def _ref_primary(conv_out, capsule_dim):
    return conv_to_capsules(conv_out, capsule_dim)


def _primary_cases() -> list:
    g = generator(103)
    B, C, D, H, W = 2, 3, 4, 2, 5
    b, c, d, h, w = torch.meshgrid(*(torch.arange(n) for n in (B, C, D, H, W)), indexing="ij")
    # the value spells its own index: 10000·b + 1000·type + 100·component + 10·row + column
    coded = (10000 * b + 1000 * c + 100 * d + 10 * h + w).reshape(B, C * D, H, W).float()
    return [
        Case("coded values 10000·b + 1000·type + 100·component + 10·row + column, B=2 C=3 D=4 H=2 W=5",
             (coded, D), grad="none"),
        Case("random (2, 16, 3, 3) with capsule_dim 8, float64",
             (randn(g, 2, 16, 3, 3, dtype=torch.float64), 8), grad="none"),
        Case("random (1, 12, 6, 6) with capsule_dim 6 (H = W = D), float32",
             (randn(g, 1, 12, 6, 6), 6), grad="none"),
        Case("one capsule type: random (2, 8, 3, 4) with capsule_dim 8, float32",
             (randn(g, 2, 8, 3, 4), 8), grad="none"),
    ]


def _primary_view_bug(x, D):
    return x.reshape(x.shape[0], -1, D)


def _primary_type_major(x, D):
    B, CD, H, W = x.shape
    return x.reshape(B, CD // D, D, H, W).permute(0, 1, 3, 4, 2).reshape(B, -1, D)


def _primary_swapped(x, D):
    B, CD, H, W = x.shape
    return x.reshape(B, D, CD // D, H, W).permute(0, 3, 4, 2, 1).reshape(B, -1, D)


_PRIMARY_WRONG = (
    WrongAnswer("spatial neighbours", _primary_view_bug,
                "your capsules group D neighbouring *positions* of one channel (x.view(B, -1, D) on the "
                "(B, C·D, H, W) tensor). A capsule is the D channels of one type at one position: view as "
                "(B, C, D, H, W), permute to (B, H, W, C, D), then reshape to (B, H·W·C, D)."),
    WrongAnswer("type-major order", _primary_type_major,
                "the capsules are right but in the wrong order: order them by (row, column, type), i.e. "
                "permute to (B, H, W, C, D) before flattening, not (B, C, H, W, D)."),
    WrongAnswer("component-major channels", _primary_swapped,
                "channel c·D + d is component d of type c: view the channels as (C, D), not (D, C)."),
)


register(
    Task("01.squash", "Squash", 1, _ref_squash, _squash_cases,
         hint="v = ‖s‖²/(1+‖s‖²) · s/‖s‖ along `dim`; compute ‖s‖ as sqrt(‖s‖² + ε²) with a tiny ε so that "
              "s = 0 gives 0 with a finite gradient (chapter 01, section on the squash).",
         outputs=("v",), wrong_answers=_SQUASH_WRONG,
         nonfinite_hint="at or near s = 0 your squash gives nan or inf: put a tiny ε inside the square root, "
                        "‖s‖ = sqrt(‖s‖² + ε²), instead of dividing by ‖s‖ = 0; for long vectors avoid "
                        "forming ‖s‖² · s before dividing.",
         input_names=("s",), function="squash", answers=(squash,)),
    Task("01.margin_loss", "Margin loss", 1, _ref_margin_loss, _margin_cases,
         hint="L = Σ_k T_k max(0, 0.9 − ‖v_k‖)² + 0.5 (1 − T_k) max(0, ‖v_k‖ − 0.1)², T = one-hot of the labels; "
              "sum over the classes k, mean over the batch (chapter 01, section on the margin loss).",
         outputs=("loss",), wrong_answers=_MARGIN_WRONG,
         input_names=("lengths",), function="margin_loss", answers=(margin_loss,)),
    Task("01.primary_capsules", "Primary capsules", 1, _ref_primary, _primary_cases,
         hint="capsule (h, w, c) is conv_out[b, c·D:(c+1)·D, h, w]: view as (B, C, D, H, W), permute to "
              "(B, H, W, C, D), reshape to (B, H·W·C, D) (chapter 01, section on primary capsules).",
         outputs=("capsules",), wrong_answers=_PRIMARY_WRONG, function="primary_capsules",
         answers=(conv_to_capsules,)),
)
