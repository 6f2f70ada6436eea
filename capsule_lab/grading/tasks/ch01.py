"""The graded exercises of chapter 01 (capsules): ``01.squash``, ``01.margin_loss`` (implementations),
``01.primary_capsules`` (a bug hunt), ``01.equal_length`` (a prediction) and ``01.steps_to_long`` (a
mini-experiment).

Each task has the course's reference (from :mod:`capsule_lab.capsules`, or a few lines of plain torch for
the prediction and the experiment), the seeded random and edge-case inputs it is checked on, in named case
groups (partial credit), the known wrong answers with their hints and a general hint pointing to its
section of chapter 01. Registered with :func:`capsule_lab.grading.tasks.registry.register` on import.
"""

from __future__ import annotations

import torch

from ...capsules import conv_to_capsules, margin_loss, squash
from .registry import Case, Task, WrongAnswer, generator, randn, register


# --- 01.squash --------------------------------------------------------------------------------------

def _ref_squash(s, dim=-1):
    return squash(s, dim=dim)


def _squash_cases() -> list:
    g = generator(101)
    cases = [
        Case("random (4, 8), float32", (randn(g, 4, 8),), group="float32 and float64"),
        Case("random (2, 3, 16), float64", (randn(g, 2, 3, 16, dtype=torch.float64),), group="float32 and float64"),
        Case("random (2, 8, 5) squashed along dim=1, float32", (randn(g, 2, 8, 5),), {"dim": 1},
             group="along dim"),
        Case("random (6, 3) squashed along dim=0, float64", (randn(g, 6, 3, dtype=torch.float64),), {"dim": 0},
             group="along dim"),
    ]
    z = randn(g, 5, 4)
    z[1] = 0.0
    z[3] = 0.0
    cases.append(Case("rows 1 and 3 are zero vectors, float32", (z,), group="zero vectors"))
    cases.append(Case("all-zero input (3, 8), float64: gradient at s = 0",
                      (torch.zeros(3, 8, dtype=torch.float64),), grad="finite", group="zero vectors"))
    for dtype in (torch.float32, torch.float64):
        name = str(dtype).replace("torch.", "")
        big = randn(g, 4, 8, dtype=torch.float64)
        big = big / big.norm(dim=-1, keepdim=True) * torch.tensor([10, 1e3, 1e5, 1e8], dtype=torch.float64)[:, None]
        cases.append(Case(f"long vectors (‖s‖ from 10 to 1e8), {name}", (big.to(dtype),), group="long vectors"))
    for dtype in (torch.float32, torch.float64):
        name = str(dtype).replace("torch.", "")
        small = randn(g, 4, 8, dtype=torch.float64)
        small = small / small.norm(dim=-1, keepdim=True) * torch.tensor([1e-2, 1e-3, 1e-4, 1e-6],
                                                                         dtype=torch.float64)[:, None]
        # near 0 the result depends on the ε a student picks: values and finiteness are checked, and the
        # gradient must only be finite
        cases.append(Case(f"tiny vectors (‖s‖ from 1e-2 to 1e-6), {name}", (small.to(dtype),), grad="finite",
                          group="tiny vectors"))
    return cases


def _norm2(s, dim):
    return (s * s).sum(dim=dim, keepdim=True)


def _norm(s, dim):
    return torch.sqrt(_norm2(s, dim) + 1e-16)


def _stand_in_squash(s, dim=-1):
    """01.squash in plain torch: where the student's ``squash`` does not pass, 01's mini-experiment runs with this in
    its place (``Task.stand_in``), so one mistake costs one task."""
    return _norm2(s, dim) / (1 + _norm2(s, dim)) * (s / _norm(s, dim))


_SQUASH_WRONG = (
    WrongAnswer("no ‖s‖² factor", lambda s, dim=-1: s / (1 + _norm2(s, dim)),
                "your v has length ‖s‖/(1+‖s‖²): it falls back towards 0 for long vectors. Eq. (1)'s length "
                "is ‖s‖²/(1+‖s‖²), times a *unit* vector."),
    WrongAnswer("unit vector", lambda s, dim=-1: s / _norm(s, dim),
                "every v you return has length 1: that is only the direction s/‖s‖. The length must be "
                "‖s‖²/(1+‖s‖²), near 0 for short vectors."),
    WrongAnswer("unsquared length", lambda s, dim=-1: _norm(s, dim) / (1 + _norm(s, dim)) * s / _norm(s, dim),
                "your lengths are ‖s‖/(1+‖s‖): near 0 they grow like ‖s‖, not like ‖s‖² (chapter 01, "
                "'The two curves')."),
    WrongAnswer("exponential squash", lambda s, dim=-1: -torch.expm1(-_norm(s, dim)) * s / _norm(s, dim),
                "that is the exponential squash (1 − e^−‖s‖), eq. (squash_exp) of chapter 01; this task is "
                "Sabour's eq. (1)."),
)
# (a squash that is right only along the last dimension fails the case group "along dim" alone: partial
# credit, and the message names the group; every wrong answer listed here fails every group)


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
        Case("random lengths (8, 10), float32", (rand_lengths(8, 10, torch.float32), labels(8, 10)),
             group="random lengths"),
        Case("random lengths (5, 4), float64", (rand_lengths(5, 4, torch.float64), labels(5, 4)),
             group="random lengths"),
        Case("one sample (1, 3), float32", (rand_lengths(1, 3, torch.float32), labels(1, 3)), group="random lengths"),
    ]
    # exactly at the margins: ‖v‖ = m⁺ = 0.9 for the label, m⁻ = 0.1 for the others → loss 0
    at = torch.full((4, 5), 0.1)
    y = torch.tensor([0, 2, 4, 1])
    at[torch.arange(4), y] = 0.9
    cases.append(Case("lengths exactly at the margins 0.9 / 0.1, float32", (at, y), group="lengths at the margins"))
    at64 = at.double()
    at64[0, 1] = 0.95   # absent class above m⁻ … and present class below m⁺
    at64[1, 2] = 0.5
    at64[2, 4] = 0.97   # … and just past the margins on the side that costs nothing
    at64[3, 0] = 0.03
    cases.append(Case("lengths at and around the margins, float64", (at64, y), group="lengths at the margins"))
    ext = torch.tensor([[0.0, 0.99, 0.0], [0.99, 0.0, 0.99], [0.0, 0.0, 0.0]], dtype=torch.float64)
    cases.append(Case("lengths 0 and 0.99, float64", (ext, torch.tensor([1, 1, 2])), group="lengths 0 and 0.99"))
    ext32 = torch.tensor([[0.99, 0.99, 0.0, 0.0], [0.0, 0.0, 0.0, 0.99]])
    cases.append(Case("lengths 0 and 0.99, float32", (ext32, torch.tensor([0, 1])), group="lengths 0 and 0.99"))
    return cases


def _margin_terms(lengths, labels, lam=0.5, power=2, m_pos=0.9, m_neg=0.1):
    T = torch.nn.functional.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    present = T * torch.clamp(m_pos - lengths, min=0) ** power
    absent = lam * (1 - T) * torch.clamp(lengths - m_neg, min=0) ** power
    return T, present, absent


def _margin_with(**kw):
    return lambda l, y: sum(_margin_terms(l, y, **kw)[1:]).sum(1).mean()


_MARGIN_WRONG = (
    WrongAnswer("no λ", _margin_with(lam=1.0),
                "your absent classes cost twice what they should: the λ = 0.5 of eq. (4) is missing from "
                "the absent-class term."),
    WrongAnswer("unsquared hinge", _margin_with(power=1),
                "your loss grows linearly with the distance to the margin: each hinge max(0, ·) is squared "
                "in eq. (4)."),
    WrongAnswer("mean over classes", lambda l, y: sum(_margin_terms(l, y)[1:]).mean(),
                "your loss is J times too small: you averaged over the classes k too. The loss of an image is "
                "the sum over its classes; only the batch is averaged."),
    WrongAnswer("sum over batch", lambda l, y: sum(_margin_terms(l, y)[1:]).sum(),
                "your loss grows with the batch size: the batch is averaged, not summed."),
    WrongAnswer("λ on the present class",
                lambda l, y: (0.5 * _margin_terms(l, y)[1] + _margin_terms(l, y)[2]).sum(1).mean(),
                "your present class costs half what it should: λ weighs only the absent classes (1 − T_k)."),
    WrongAnswer("no max(0, ·)", lambda l, y: ((lambda T: T * (0.9 - l) ** 2 + 0.5 * (1 - T) * (l - 0.1) ** 2)(
        _margin_terms(l, y)[0])).sum(1).mean(),
        "your loss punishes a present class longer than 0.9 (or an absent one shorter than 0.1): each term "
        "is one-sided, max(0, ·)², and costs nothing past its margin."),
    WrongAnswer("margins swapped", _margin_with(m_pos=0.1, m_neg=0.9),
                "your margins are swapped: the present class must be *longer* than m⁺ = 0.9 and the absent "
                "ones shorter than m⁻ = 0.1."),
)


# --- 01.primary_capsules (bug hunt) -----------------------------------------------------------------

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
             (coded, D), grad="none", group="coded values"),
        Case("random (1, 12, 6, 6) with capsule_dim 6 (H = W = D), float32",
             (randn(g, 1, 12, 6, 6), 6), grad="none", group="random float32"),
        Case("one capsule type: random (2, 8, 3, 4) with capsule_dim 8, float32",
             (randn(g, 2, 8, 3, 4), 8), grad="none", group="random float32"),
        Case("random (2, 16, 3, 3) with capsule_dim 8, float64",
             (randn(g, 2, 16, 3, 3, dtype=torch.float64), 8), grad="none", group="random float64"),
    ]


def _primary_neighbours(x, D):
    return x.reshape(x.shape[0], -1, D)


def _primary_type_major(x, D):
    B, CD, H, W = x.shape
    return x.reshape(B, CD // D, D, H, W).permute(0, 1, 3, 4, 2).reshape(B, -1, D)


def _primary_swapped(x, D):
    B, CD, H, W = x.shape
    return x.reshape(B, D, CD // D, H, W).permute(0, 3, 4, 2, 1).reshape(B, -1, D)


def _primary_columns_first(x, D):
    B, CD, H, W = x.shape
    return x.reshape(B, CD // D, D, H, W).permute(0, 4, 3, 1, 2).reshape(B, -1, D)


_PRIMARY_WRONG = (
    WrongAnswer("spatial neighbours", _primary_neighbours,
                "each of your capsules holds D neighbouring *positions* of one channel (on the coded case "
                "its entries differ in the last digits, row and column), not the D channels of one type at "
                "one position. A reshape never moves a number in memory: look at which axis sits next to "
                "the components before the last reshape."),
    WrongAnswer("type-major order", _primary_type_major,
                "your capsules are right but in the wrong order: yours run through the positions of type 0 "
                "first. The capsule index is (row·W + column)·C + type."),
    WrongAnswer("component-major channels", _primary_swapped,
                "your capsules mix types: channel c·D + d is component d of type c, so the channel axis "
                "splits into (types, components) in that order."),
    WrongAnswer("columns before rows", _primary_columns_first,
                "your capsules are right but in the wrong order: rows and columns are swapped. The capsule "
                "index is (row·W + column)·C + type."),
)


# --- 01.equal_length (prediction) -------------------------------------------------------------------

def _ref_equal_length():
    # ten classes of one length ℓ, one present: L(ℓ) = (0.9 − ℓ)² + 9·0.5·(ℓ − 0.1)² for 0.1 ≤ ℓ ≤ 0.9;
    # dL/dℓ = 0 gives ℓ = (0.9 + 9·0.5·0.1) / (1 + 9·0.5)
    absent, lam, m_pos, m_neg = 9, 0.5, 0.9, 0.1
    return (m_pos + absent * lam * m_neg) / (1 + absent * lam)


_EQUAL_LENGTH_WRONG = (
    WrongAnswer("λ missing", lambda: 0.18,
                "0.18 is the balance with the nine absent classes at full weight: λ = 0.5 halves their pull "
                "(and only theirs)."),
    WrongAnswer("one absent class", lambda: (0.9 + 0.5 * 0.1) / 1.5,
                "that is the balance with a single absent class: an image of one digit has nine."),
    WrongAnswer("a margin", lambda: 0.1,
                "at ℓ = m⁻ = 0.1 the absent terms are flat, but the present class's hinge still pulls the "
                "length up: the minimum is where the two pulls (the derivatives) balance."),
    WrongAnswer("the other margin", lambda: 0.9,
                "at ℓ = 0.9 the present class is satisfied, but nine absent classes are 0.8 too long: the "
                "minimum is where the two pulls (the derivatives) balance."),
    WrongAnswer("midway", lambda: 0.5,
                "the two pulls are not equal: nine absent classes, each weighted by λ, against one present "
                "class. Write L(ℓ) for ten equal lengths and set its derivative to zero."),
)


# --- 01.steps_to_long (mini-experiment) -------------------------------------------------------------

def _sabour(s):
    n2 = (s * s).sum(dim=-1, keepdim=True)
    return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-16)


def _exponential(s):
    n = torch.sqrt((s * s).sum(dim=-1, keepdim=True) + 1e-16)
    return -torch.expm1(-n) * s / n


def _run_steps(start_length, seed, squash_fn, power):
    g = torch.Generator().manual_seed(seed)
    direction = torch.randn(8, generator=g, dtype=torch.float64)
    s = (direction / direction.norm() * start_length).requires_grad_()
    for step in range(1, 1001):
        loss = torch.clamp(0.9 - squash_fn(s).norm(), min=0) ** power
        (grad,) = torch.autograd.grad(loss, s)
        with torch.no_grad():
            s -= 0.1 * grad
            if squash_fn(s).norm() >= 0.5:
                return step
    return 1000


def _ref_steps_to_long(start_length, seed=0):
    return _run_steps(start_length, seed, _sabour, 2)


def _steps_experiment(squash_fn=_sabour, power=2):
    return lambda start_length, seed=0: _run_steps(start_length, seed, squash_fn, power)


def _steps_cases() -> list:
    return [Case(f"start length {name}, seed {seed}", (x, seed), grad="none", group=f"start length {name}")
            for x, name, seed in ((0.1, "0.1", 3), (1e-3, "1e-3", 4), (1e-6, "1e-6", 5))]


_STEPS_WRONG = (
    WrongAnswer("no squash", _steps_experiment(squash_fn=lambda s: s),
                "your capsule gets long as fast from 1e-6 as from 0.1: the loss must see the *squashed* "
                "length ‖squash(s)‖, whose slope near 0 is what this experiment measures."),
    WrongAnswer("exponential squash", _steps_experiment(squash_fn=_exponential),
                "your capsule escapes a tiny start almost at once: that is the exponential squash (slope 1 "
                "at 0); this experiment uses Sabour's squash, eq. (1)."),
    WrongAnswer("unsquared hinge", _steps_experiment(power=1),
                "your counts are too large: the present class's loss is max(0, 0.9 − ‖v‖)², squared."),
)


register(
    Task("01.squash", "Squash", 1, _ref_squash, _squash_cases,
         hint="v keeps the direction of s and has the length ‖s‖²/(1+‖s‖²), every capsule along `dim` "
              "(chapter 01, §2 the squash, eq. (1)).",
         outputs=("v",), wrong_answers=_SQUASH_WRONG,
         nonfinite_hint="nan or inf at or near s = 0: your squash divides by a norm of zero there (chapter 01, "
                        "'Why the norm is smoothed').",
         input_names=("s",), function="squash", answers=(squash,), stand_in=_stand_in_squash),
    Task("01.margin_loss", "Margin loss", 1, _ref_margin_loss, _margin_cases,
         hint="eq. (4) of chapter 01, §3 the margin loss: one squared hinge per class, the absent ones weighted by λ; "
              "summed over the classes, averaged over the batch.",
         outputs=("loss",), wrong_answers=_MARGIN_WRONG,
         input_names=("lengths",), function="margin_loss", answers=(margin_loss,)),
    Task("01.primary_capsules", "Primary capsules (bug hunt)", 1, _ref_primary, _primary_cases,
         hint="a capsule is the D channels of one type at one position, ordered by (row, column, type) "
              "(chapter 01, 'Regrouping channels into capsules').",
         outputs=("capsules",), wrong_answers=_PRIMARY_WRONG, function="primary_capsules",
         answers=(conv_to_capsules,), kind="bug hunt",
         place_hint=("the wrong line regroups the channels: print which channels end up in capsule 0 and compare with "
                    "the chapter's picture of the regrouping."),
         planted=(("x = conv_out.reshape(B, C, capsule_dim, H * W)", "the line that regroups the channels"),)),
    Task("01.equal_length", "Prediction: the length ten undecided capsules settle at", 1, _ref_equal_length,
         lambda: [Case("your prediction", (), grad="none")],
         hint="write the loss of one image whose ten class capsules all have length ℓ (one present, nine "
              "absent, chapter 01, §3 the margin loss) and find the ℓ where its derivative is zero.",
         outputs=("length",), wrong_answers=_EQUAL_LENGTH_WRONG, function="predict_equal_length",
         kind="prediction", returns_number=True, atol=0.005, rtol=0.0),
    Task("01.steps_to_long", "Mini-experiment: how long a short capsule stalls", 1, _ref_steps_to_long,
         _steps_cases,
         hint="one 8-D capsule s in float64, the loss max(0, 0.9 − ‖squash(s)‖)², plain gradient descent "
              "s ← s − 0.1·∂L/∂s; count the updates until ‖squash(s)‖ ≥ 0.5 (chapter 01, 'The two curves').",
         outputs=("steps",), wrong_answers=_STEPS_WRONG, function="steps_to_long",
         kind="experiment", returns_number=True, atol=1.0, rtol=0.0, uses=("01.squash",)),
)
