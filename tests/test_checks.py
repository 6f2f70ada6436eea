"""capsule_lab._checks: one wording for argument errors, naming the expected shape."""

import numpy as np
import pytest
import torch

from capsule_lab._checks import check_nonnegative, check_positive_int, check_tensor, describe, shape_error


def test_a_good_tensor_is_returned():
    x = torch.zeros(2, 3, 4)
    assert check_tensor(x, "x", "(B, I, D)", ndim=3, sizes=(None, 3, 4), floating=True, nonempty=True) is x


@pytest.mark.parametrize("x, kwargs, message", [
    ([1.0], dict(ndim=1), r"^x must be a tensor of shape \(B, D\), got list$"),
    (torch.zeros(2), dict(ndim=2), r"^x must have shape \(B, D\), got \(2,\)$"),
    (torch.zeros(2), dict(min_ndim=2), r"^x must have shape \(B, D\), got \(2,\)$"),
    (torch.zeros(2, 5), dict(sizes=(None, 4)), r"^x must have shape \(B, D\), got \(2, 5\)$"),
    (torch.zeros(2, 4, 1), dict(sizes=(None, 4)), r"^x must have shape \(B, D\), got \(2, 4, 1\)$"),
    (torch.zeros(0, 4), dict(ndim=2, nonempty=True), r"^x must have shape \(B, D\) with no empty dimension, got \(0, 4\)$"),
    (torch.zeros(2, 4, dtype=torch.long), dict(ndim=2, floating=True),
     r"^x must be a floating-point tensor of shape \(B, D\), got dtype torch.int64$"),
])
def test_one_wording_naming_the_shape(x, kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_tensor(x, "x", "(B, D)", **kwargs)


def test_shape_error_and_describe():
    assert describe(torch.zeros(1, 2)) == "(1, 2)" and describe(np.zeros(3)) == "(3,)"
    assert describe("abc") == "str" and describe(None) == "NoneType"
    err = shape_error("poses", "(B, J, D)", [1])
    assert isinstance(err, ValueError) and str(err) == "poses must have shape (B, J, D), got list"


@pytest.mark.parametrize("value", [0, -1, 1.0, True, "3", None])
def test_positive_int_refuses(value):
    with pytest.raises(ValueError, match=r"^n must be an integer >= 1, got "):
        check_positive_int(value, "n")


def test_positive_int_accepts_and_minimum():
    assert check_positive_int(3, "n") == 3 and check_positive_int(0, "n", minimum=0) == 0
    with pytest.raises(ValueError, match="n must be an integer >= 2, got 1"):
        check_positive_int(1, "n", minimum=2)


@pytest.mark.parametrize("value", [-0.1, float("nan"), True, "1", None])
def test_nonnegative_refuses(value):
    with pytest.raises(ValueError, match=r"^eps must be a number >= 0, got "):
        check_nonnegative(value, "eps")


def test_nonnegative_accepts():
    assert check_nonnegative(0, "eps") == 0 and check_nonnegative(0.5, "eps") == 0.5
