"""40×40 digits: expanded MNIST, its affine test set, and affNIST's own files.

Taught in chapter 06 (the ladder paper's 40×40 experiment, after Sabour §5.2). :func:`expanded_mnist` places every
28×28 digit at a seeded random offset on a 40×40 canvas (:func:`expansion_offsets`, :func:`place_on_canvas`);
:func:`affine_expanded_test_set` centres each test digit on the canvas, maps it affinely and moves it by a random
whole number of pixels, an affNIST-like test set made offline; :func:`load_affnist` and :func:`read_affnist_mat` read affNIST's own MATLAB files where they can be
downloaded.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from .._checks import check_tensor
from .sources import DataSourceError, data_root
from .transforms import affine_transform

#: affNIST's transformed test set, 32 batches of 10,000 40×40 digits as MATLAB files (Tieleman, 2013).
AFFNIST_URL = "https://www.cs.toronto.edu/~tijmen/affNIST/32x/transformed/test_batches.zip"
AFFNIST_SIZE = 40


def _images_and_labels(data) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(data, TensorDataset) or len(data.tensors) < 2:
        raise ValueError("data must be a TensorDataset of (images (N, C, H, W), labels (N,))")
    images, labels = data.tensors[:2]
    check_tensor(images, "images", "(N, C, H, W)", ndim=4, floating=True)
    return images, labels


def _stream(seed: int, stream: int) -> torch.Generator:
    """A generator for the ``stream``-th kind of draw made from one seed (stream 0 is ``manual_seed(seed)``
    itself), so that two kinds of draws from the same seed are not the same numbers."""
    return torch.Generator().manual_seed((int(seed) * 0x9E3779B1 + stream * 0x7F4A7C15) % 2**63 if stream else seed)


def expansion_offsets(n: int, canvas: int = 40, size: int = 28, seed: int = 0) -> torch.Tensor:
    """Where each of ``n`` ``size``×``size`` digits goes on a ``canvas``×``canvas`` canvas: ``(n, 2)`` int64
    (row, column) of its top-left pixel, each uniform in ``[0, canvas − size]`` (so the whole digit is inside),
    drawn from ``seed``. Chapter 06.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if isinstance(canvas, bool) or not isinstance(canvas, int) or isinstance(size, bool) \
            or not isinstance(size, int) or not 1 <= size <= canvas:
        raise ValueError(f"need integers 1 <= size <= canvas, got size={size!r}, canvas={canvas!r}")
    return torch.randint(0, canvas - size + 1, (n, 2), generator=torch.Generator().manual_seed(seed))


def place_on_canvas(images: torch.Tensor, offsets: torch.Tensor, canvas: int = 40) -> torch.Tensor:
    """Put each image ``(N, C, h, w)`` on a black ``canvas``×``canvas`` canvas with its top-left pixel at
    ``offsets`` ``(N, 2)`` (row, column) → ``(N, C, canvas, canvas)``; every image must fit. Chapter 06.
    """
    check_tensor(images, "images", "(N, C, h, w)", ndim=4, floating=True)
    N, C, h, w = images.shape
    check_tensor(offsets, "offsets", f"(N, 2) = ({N}, 2)", sizes=(N, 2))
    if offsets.is_floating_point():
        raise ValueError(f"offsets must be an integer tensor of shape (N, 2) = ({N}, 2), got dtype {offsets.dtype}")
    if N and (offsets.min() < 0 or offsets[:, 0].max() > canvas - h or offsets[:, 1].max() > canvas - w):
        raise ValueError(f"every {h}×{w} image must lie inside the {canvas}×{canvas} canvas: offsets in "
                         f"[0, {canvas - h}] × [0, {canvas - w}]")
    offsets = offsets.to(images.device).long()
    out = images.new_zeros(N, canvas, canvas, C)
    rows = offsets[:, :1] + torch.arange(h, device=images.device)           # (N, h)
    cols = offsets[:, 1:] + torch.arange(w, device=images.device)           # (N, w)
    batch = torch.arange(N, device=images.device)[:, None, None]
    out[batch, rows[:, :, None], cols[:, None, :]] = images.permute(0, 2, 3, 1)
    return out.permute(0, 3, 1, 2).contiguous()


def expanded_mnist(data: TensorDataset, canvas: int = 40, seed: int = 0) -> TensorDataset:
    """The expanded MNIST (Sabour et al. §6; Jeong et al. §5.2): every digit of ``data`` placed at a random
    position on a black ``canvas``×``canvas`` canvas, the whole 28×28 digit inside; positions from ``seed``
    (:func:`expansion_offsets`). Same labels, same order. Chapter 06.
    """
    images, labels = _images_and_labels(data)
    N, _, h, w = images.shape
    if h != w:
        raise ValueError(f"images must be square (N, C, H, H), got {tuple(images.shape)}")
    return TensorDataset(place_on_canvas(images, expansion_offsets(N, canvas, h, seed), canvas), labels)


def _bounding_boxes(images: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """First and last row and column holding a non-zero pixel, per image ``(N, C, H, W)``; an empty image
    gets the whole canvas (so it is not moved)."""
    N, _, H, W = images.shape
    rows, cols = images.ne(0).any(dim=(1, 3)), images.ne(0).any(dim=(1, 2))          # (N, H), (N, W)
    def first_last(mask, size):
        present = mask.any(dim=1)
        first = torch.where(present, mask.float().argmax(dim=1), torch.zeros_like(present, dtype=torch.long))
        last = torch.where(present, size - 1 - mask.flip(1).float().argmax(dim=1),
                           torch.full_like(first, size - 1))
        return first, last
    return (*first_last(rows, H), *first_last(cols, W))


def affine_expanded_test_set(data: TensorDataset, seed: int = 0, canvas: int = 40, strength: float = 1.0,
                             translate: bool = True, **ranges) -> TensorDataset:
    """An affNIST-like ``canvas``×``canvas`` test set made from ``data`` (28×28 digits), the way affNIST is made:

    1. each digit centred on the canvas;
    2. chapter 03's affine map about the centre (:func:`affine_transform`: rotation ≤ 20°, shear ≤ 45°,
       scale 0.8–1.2 per axis, from ``seed``; ``strength`` and ``ranges`` as there);
    3. with ``translate``, moved by a random whole number of pixels in each direction, uniform over the moves
       that keep every non-zero pixel on the canvas (drawn from a second stream of the same seed).

    A digit sheared and scaled to more than the canvas loses what falls outside in step 2 (as in affNIST's
    range, rarely). Same labels, same order. Chapter 06.
    """
    images, labels = _images_and_labels(data)
    N, _, h, w = images.shape
    if h > canvas or w > canvas:
        raise ValueError(f"images of {h}×{w} do not fit on a {canvas}×{canvas} canvas")
    centre = torch.tensor([(canvas - h) // 2, (canvas - w) // 2]).expand(N, 2)
    out = affine_transform(place_on_canvas(images, centre, canvas), seed, strength, **ranges)
    if not translate or N == 0:
        return TensorDataset(out, labels)
    r0, r1, c0, c1 = _bounding_boxes(out)
    g = _stream(seed, 1)
    def draw(lo, hi):                                   # a whole number uniform in [lo, hi]
        u = torch.rand(N, generator=g, dtype=torch.float64)
        return torch.minimum(lo + (u * (hi - lo + 1).double()).floor().long(), hi)
    dy, dx = draw(-r0, canvas - 1 - r1), draw(-c0, canvas - 1 - c1)
    # every non-zero pixel stays on the canvas, so a cyclic shift moves only zeros across the border
    rows = (torch.arange(canvas)[None, :] - dy[:, None]) % canvas                  # (N, canvas): source row
    cols = (torch.arange(canvas)[None, :] - dx[:, None]) % canvas
    batch = torch.arange(N)[:, None, None]
    moved = out.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    return TensorDataset(moved.contiguous(), labels)


# --- affNIST's MATLAB files, read with SciPy ---------------------------------------------------------------
# SciPy is needed only here, so it is an optional extra (``capsule-lab[affnist]``) imported on first use.

def _loadmat():
    """``scipy.io.loadmat`` and the errors it raises on a file it cannot read; a clear error without SciPy."""
    try:
        from scipy.io import loadmat
        from scipy.io.matlab import MatReadError
    except ImportError as err:
        raise ImportError("reading affNIST's MATLAB files needs SciPy: pip install capsule-lab[affnist] "
                          "(or pip install scipy)") from err
    return loadmat, (ValueError, NotImplementedError, MatReadError)


def read_affnist_mat(path: str | os.PathLike) -> TensorDataset:
    """One affNIST MATLAB file as a ``TensorDataset``: images ``(N, 1, 40, 40)`` in [0, 1], labels ``(N,)`` int64.

    The file holds a struct ``affNISTdata`` whose field ``image`` is ``(1600, N)`` uint8 (one image per
    column, its 40 rows one after another) and ``label_int`` ``(1, N)``; it is read with
    ``scipy.io.loadmat`` (SciPy: ``pip install capsule-lab[affnist]``). Chapter 06.
    """
    loadmat, unreadable = _loadmat()
    try:                                # struct_as_record: affNISTdata is a (1, 1) record array, fields unsqueezed
        data = loadmat(os.fspath(path), appendmat=False, squeeze_me=False, struct_as_record=True,
                       variable_names=["affNISTdata"]).get("affNISTdata")
    except unreadable as err:
        raise ValueError(f"{path} is not a MATLAB MAT-file scipy.io.loadmat can read ({err})") from err
    fields = (data.dtype.names or ()) if isinstance(data, np.ndarray) and data.size == 1 else ()
    if "image" not in fields or "label_int" not in fields:
        raise ValueError(f"{path} is not an affNIST file: no struct affNISTdata with fields image and label_int")
    record = data.reshape(-1)[0]
    image, label = np.asarray(record["image"]), np.asarray(record["label_int"]).ravel()
    if image.ndim != 2 or image.shape[0] != AFFNIST_SIZE ** 2 or image.shape[1] != label.size:
        raise ValueError(f"{path}: affNISTdata.image must have shape (1600, N) with N = {label.size} labels, "
                         f"got {image.shape}")
    pixels = torch.from_numpy(np.ascontiguousarray(image.T).astype(np.float32) / 255.0)
    return TensorDataset(pixels.view(-1, 1, AFFNIST_SIZE, AFFNIST_SIZE), torch.from_numpy(label.astype(np.int64)))


def load_affnist(batches=(1,), root=None, download: bool = True, url: str = AFFNIST_URL) -> TensorDataset:
    """affNIST's test digits (Tieleman, 2013), 10,000 per batch (1–32), as a ``TensorDataset`` of
    ``(N, 1, 40, 40)`` images in [0, 1] and labels, concatenated in the order of ``batches``.

    Reads ``<root>/affNIST/test_batches/<k>.mat``; a missing batch is extracted from
    ``<root>/affNIST/test_batches.zip``, downloaded from ``url`` if ``download`` (Jeong et al. test on 10,000
    affNIST digits). Where affNIST cannot be reached, :func:`affine_expanded_test_set` makes an affNIST-like
    set from the MNIST test digits. Chapter 06.
    """
    batches = [batches] if isinstance(batches, int) else list(batches)
    if not batches or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 32 for k in batches):
        raise ValueError(f"batches must be integers in [1, 32], got {batches!r}")
    folder = data_root(root) / "affNIST"
    files = {k: folder / "test_batches" / f"{k}.mat" for k in batches}
    missing = [k for k, path in files.items() if not path.exists()]
    if missing:
        archive = folder / "test_batches.zip"
        if not archive.exists():
            if not download:
                raise DataSourceError(f"affNIST not found under {folder}; call load_affnist(download=True) "
                                      f"where {url} is reachable, or use affine_expanded_test_set")
            folder.mkdir(parents=True, exist_ok=True)
            try:
                with urllib.request.urlopen(url, timeout=60) as response, open(archive.with_suffix(".part"), "wb") as f:
                    shutil.copyfileobj(response, f)
            except (urllib.error.URLError, OSError) as err:
                raise DataSourceError(f"affNIST could not be downloaded from {url} ({err}); use "
                                      "affine_expanded_test_set for an affNIST-like test set") from err
            archive.with_suffix(".part").replace(archive)
        with zipfile.ZipFile(archive) as z:
            members = {Path(m).name: m for m in z.namelist()}
            for k in missing:
                if f"{k}.mat" not in members:
                    raise DataSourceError(f"{archive} holds no {k}.mat")
                files[k].parent.mkdir(parents=True, exist_ok=True)
                with z.open(members[f"{k}.mat"]) as src, open(files[k], "wb") as dst:
                    shutil.copyfileobj(src, dst)
    parts = [read_affnist_mat(files[k]) for k in batches]
    return TensorDataset(torch.cat([p.tensors[0] for p in parts]), torch.cat([p.tensors[1] for p in parts]))
