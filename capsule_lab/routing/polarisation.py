"""How polarised couplings are: how far each unit of coupling is from uniform, toward one-hot.

Taught in chapter 03 (term 2 of the gradient fades as the couplings polarise) and used by chapter 07 (how
decisively each learned router routes). Couplings ``(B, I, J)`` sum to 1 along one axis (the router's
``normalize_over``): over the outputs j for each input (Sabour's) or over the inputs i for each output (Faria's).
Along that axis, with n entries:

    largest            mean of max c               1/n uniform, 1 one-hot
    entropy            mean of −Σ c log₂ c (bits)   log₂ n uniform, 0 one-hot
    normalized entropy entropy / log₂ n             1 uniform, 0 one-hot (comparable across axes and sizes)
"""

from __future__ import annotations

import math

import torch

from .._checks import check_tensor
from .router import check_normalize_over

__all__ = ["coupling_polarisation"]


def coupling_polarisation(couplings: torch.Tensor, normalize_over: str = "outputs") -> dict:
    """How far couplings ``(B, I, J)`` are from uniform along the axis they sum to 1 over (``"outputs"``: each
    input's couplings over j; ``"inputs"``: each output's over i), averaged over the rest: ``max_coupling`` (the
    mean largest coupling), ``entropy_bits`` (the mean entropy in bits), ``normalized_entropy`` (entropy / log₂ n)
    and the uniform couplings' ``uniform_max`` = 1/n and ``uniform_entropy_bits`` = log₂ n. Chapters 03 and 07.
    """
    check_tensor(couplings, "couplings", "(B, I, J)", ndim=3, nonempty=True, floating=True)
    dim = check_normalize_over(normalize_over)
    c = couplings.detach().double()
    n = c.shape[dim]
    bits = -(torch.special.xlogy(c, c).sum(dim=dim) / math.log(2))
    entropy = bits.mean().item()
    return {"max_coupling": c.max(dim=dim).values.mean().item(), "entropy_bits": entropy,
            "normalized_entropy": entropy / math.log2(n) if n > 1 else 0.0,
            "uniform_max": 1.0 / n, "uniform_entropy_bits": math.log2(n)}
