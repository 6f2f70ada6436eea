"""capsule_lab._checks: one wording for argument errors, naming the expected shape."""

import numpy as np
import pytest
import torch

from capsule_lab._checks import (check_bool, check_nonnegative, check_positive_int, check_tensor, describe, image_array,
                                 shape_error, stack_per_iteration, tick_labels, to_numpy)


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


@pytest.mark.parametrize("value", [0, 1, None, "True", torch.tensor(True)])
def test_bool_refuses_what_is_not_true_or_false(value):
    with pytest.raises(ValueError, match=r"^flag must be True or False, got "):
        check_bool(value, "flag")
    assert check_bool(True, "flag") is True and check_bool(False, "flag") is False


# ---------------------------------------------------------------- arrays for the figures

def test_to_numpy_takes_tensors_arrays_and_lists_and_refuses_the_rest():
    t = torch.tensor([[1.0, 2.0]], requires_grad=True)
    np.testing.assert_array_equal(to_numpy(t, "x"), [[1.0, 2.0]])
    np.testing.assert_array_equal(to_numpy([[1, 2]], "x"), [[1.0, 2.0]])
    with pytest.raises(ValueError, match="x must be numeric"):
        to_numpy("abc", "x")
    with pytest.raises(ValueError, match="x must be finite"):
        to_numpy([1.0, float("nan")], "x")


def test_stack_per_iteration_stacks_drops_a_batch_of_one_and_names_the_shape():
    a, b = np.zeros((1, 3, 2)), np.ones((3, 2))                # one with a batch dimension of 1
    stacked = stack_per_iteration([a, b], "couplings", 2, "I, J")
    assert stacked.shape == (2, 3, 2) and stacked[1].sum() == 6
    assert stack_per_iteration(torch.zeros(4, 1, 3, 2), "c", 2, "I, J").shape == (4, 3, 2)
    with pytest.raises(ValueError, match=r"couplings\[1\] must have shape \(I, J\)"):
        stack_per_iteration([a, np.ones(3)], "couplings", 2, "I, J")
    with pytest.raises(ValueError, match="every iteration must have the same shape"):
        stack_per_iteration([a, np.ones((4, 2))], "couplings", 2, "I, J")
    with pytest.raises(ValueError, match="non-empty sequence"):
        stack_per_iteration([], "couplings", 2, "I, J")


def test_tick_labels_and_image_array():
    assert tick_labels(None, 3, "i={}", "labels") == ["i=0", "i=1", "i=2"]
    assert tick_labels([7, 8], 2, "{}", "labels") == ["7", "8"]
    with pytest.raises(ValueError, match="labels must have 3 entries, got 2"):
        tick_labels(["a", "b"], 3, "{}", "labels")
    assert image_array(torch.zeros(5, 1, 28, 28), "images").shape == (5, 28, 28)
    with pytest.raises(ValueError, match=r"images must have shape \(N, H, W\) or \(N, 1, H, W\)"):
        image_array(torch.zeros(28, 28), "images")

