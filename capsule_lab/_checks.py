"""Argument checks shared by the package: one wording for every error, naming what was expected.

Every public function checks its inputs and raises ``ValueError`` naming the expected shape
(``COURSE_DESIGN.md``, "capsule_lab"). The wording is the same everywhere:

    {name} must be a tensor of shape {shape}, got {type}                 not a tensor
    {name} must have shape {shape}, got {tuple(x.shape)}                 wrong number of dimensions or sizes
    {name} must have shape {shape} with no empty dimension, got {...}    a dimension of size 0
    {name} must be a floating-point tensor of shape {shape}, got dtype {x.dtype}
    {name} must be an integer >= {minimum}, got {value!r}
    {name} must be a number >= 0, got {value!r}
    {name} must be True or False, got {value!r}
    {name} must be a class index in [0, {classes}), got {value!r}
    {name} must be numeric (a tensor, array or nested list), got {type}  figures: not an array
    no {what} folders to merge / {what} folder(s) not found: {paths}     merging folders of files

Figures take tensors, arrays or nested lists; :func:`to_numpy`, :func:`stack_per_iteration`,
:func:`tick_labels` and :func:`image_array` turn them into checked numpy arrays with the same wording.

``shape`` is the shape as the chapters write it, with the sizes already known filled in where that helps:
``"(B, I, J, D)"``, ``"(B, J, D) = (2, 10, 16)"``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

__all__ = ["describe", "shape_error", "check_tensor", "check_positive_int", "check_nonnegative", "check_one_of",
           "check_bool", "check_class_index", "check_folders", "to_numpy",
           "stack_per_iteration", "tick_labels", "image_array"]


def check_folders(folders, what: str) -> list:
    """``folders`` (one path, or several) as a list of ``Path``, each an existing folder, else ``ValueError``: "no
    {what} folders to merge" for none, "{what} folder(s) not found: ..." naming the missing ones (a merge of the
    grader's shards, or of the cluster's task records)."""
    if isinstance(folders, (str, os.PathLike)):
        folders = [folders]
    folders = [Path(f) for f in folders]
    if not folders:
        raise ValueError(f"no {what} folders to merge")
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise ValueError(f"{what} folder(s) not found: {', '.join(missing)}")
    return folders


def describe(x) -> str:
    """What ``x`` is, for an error message: a tensor's (or array's) shape as a tuple, else its type's name."""
    shape = getattr(x, "shape", None)
    return str(tuple(shape)) if shape is not None and not isinstance(x, (str, bytes)) else type(x).__name__


def shape_error(name: str, shape: str, x) -> ValueError:
    """The ``ValueError`` "``{name} must have shape {shape}, got ...``" (to raise)."""
    return ValueError(f"{name} must have shape {shape}, got {describe(x)}")


def check_tensor(x, name: str, shape: str, *, ndim: Optional[int] = None, min_ndim: Optional[int] = None,
                 sizes: Optional[Sequence[Optional[int]]] = None, floating: bool = False,
                 nonempty: bool = False) -> torch.Tensor:
    """Return ``x`` if it is a tensor of the expected shape, else raise ``ValueError`` naming ``shape``.

    ndim: the exact number of dimensions; min_ndim: at least that many; sizes: the exact sizes, ``None``
    where any size goes (``(None, I, D_in)``); floating: a floating-point dtype; nonempty: no size 0.
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a tensor of shape {shape}, got {type(x).__name__}")
    if sizes is not None:
        ndim = len(sizes)
    if ((ndim is not None and x.dim() != ndim) or (min_ndim is not None and x.dim() < min_ndim)
            or (sizes is not None and any(s is not None and s != n for s, n in zip(sizes, x.shape)))):
        raise shape_error(name, shape, x)
    if nonempty and 0 in x.shape:
        raise ValueError(f"{name} must have shape {shape} with no empty dimension, got {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of shape {shape}, got dtype {x.dtype}")
    return x


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer (not a bool) ``>= minimum``, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_one_of(value, options, name: str):
    """Return ``value`` if it is one of ``options`` (a sequence), else raise ``ValueError`` listing them."""
    if value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def check_bool(value, name: str) -> bool:
    """Return ``value`` if it is ``True`` or ``False`` (not 0, 1 or None), else raise ``ValueError``."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_class_index(value, classes: int, name: str = "label") -> int:
    """Return ``value`` if it is an integer (not a bool) in ``[0, classes)``, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < classes:
        raise ValueError(f"{name} must be a class index in [0, {classes}), got {value!r}")
    return value


def check_nonnegative(value, name: str) -> float:
    """Return ``value`` if it is a real number (not a bool) ``>= 0``, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return value


def to_numpy(x, name: str) -> np.ndarray:
    """A float numpy copy of a tensor / array / nested sequence (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric (a tensor, array or nested list), got {type(x).__name__}") from err
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def stack_per_iteration(items, name: str, ndim: int, shape: str) -> np.ndarray:
    """Stack a sequence of ``ndim``-D arrays (or take an ``ndim+1``-D array) into ``(R, ...)``.

    A leading batch dimension of size 1 on each item is dropped, so ``RoutingResult.couplings`` of a
    single sample ``(1, I, J)`` can be passed as is.
    """
    if hasattr(items, "detach") or isinstance(items, np.ndarray):
        a = to_numpy(items, name)
        if a.ndim == ndim + 2 and a.shape[1] == 1:
            a = a[:, 0]
        if a.ndim != ndim + 1:
            raise ValueError(f"{name} must have shape (R, {shape}), got {a.shape}")
    else:
        if not isinstance(items, Sequence) or len(items) == 0:
            raise ValueError(f"{name} must be a non-empty sequence of arrays of shape ({shape})")
        parts = []
        for k, item in enumerate(items):
            p = to_numpy(item, f"{name}[{k}]")
            if p.ndim == ndim + 1 and p.shape[0] == 1:
                p = p[0]
            if p.ndim != ndim:
                raise ValueError(f"{name}[{k}] must have shape ({shape}), got {p.shape}")
            parts.append(p)
        if len({p.shape for p in parts}) != 1:
            raise ValueError(f"{name}: every iteration must have the same shape ({shape}), "
                             f"got {[p.shape for p in parts]}")
        a = np.stack(parts)
    if 0 in a.shape:
        raise ValueError(f"{name} must have shape (R, {shape}) with no empty dimension, got {a.shape}")
    return a


def tick_labels(labels, n: int, default: str, name: str) -> list[str]:
    """``labels`` as ``n`` strings, or ``default.format(k)`` for k < n when None; ``ValueError`` if not n."""
    if labels is None:
        return [default.format(k) for k in range(n)]
    labels = [str(x) for x in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} entries, got {len(labels)}")
    return labels


def image_array(x, name: str) -> np.ndarray:
    """Images ``(N, H, W)`` or ``(N, 1, H, W)`` as a float array ``(N, H, W)``, else ``ValueError``."""
    a = to_numpy(x, name)
    if a.ndim == 4 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 3 or 0 in a.shape:
        raise ValueError(f"{name} must have shape (N, H, W) or (N, 1, H, W), got {a.shape}")
    return a
