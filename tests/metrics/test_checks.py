"""The input checks every metric starts with: conversions, the errors that name the input, and the
row norms computed in blocks equal to numpy's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoorank.metrics import _checks
from zoorank.metrics._checks import (
    check_array,
    check_labelled,
    check_labels,
    check_train_test,
    joint_codes,
    l2_normalize,
    row_norms,
)


def test_check_array_converts_torch_and_ints_to_a_float64_copy_and_never_mutates():
    t = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    out = check_array(t, "Z")
    assert out.dtype == np.float64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, t.numpy().astype(np.float64))
    ints = np.array([[1, 2], [3, 4]])
    converted = check_array(ints)
    converted[0, 0] = 99.0
    assert ints[0, 0] == 1


@pytest.mark.parametrize("bad, message", [
    (np.ones(3), "Z must be 2-D"),
    (np.ones((0, 3)), "at least 1 rows"),
    (np.ones((2, 0)), "at least 1 columns"),
    (np.array([["a", "b"]], dtype=object), "numeric"),
    (np.array([[1.0, np.nan], [np.inf, 0.0]]), "2 NaN/Inf"),
])
def test_check_array_names_the_input_and_the_problem(bad, message):
    with pytest.raises(ValueError, match=message):
        check_array(bad, "Z")


def test_check_array_allows_nan_only_when_asked():
    out = check_array([[1.0, np.nan]], allow_nan=True)
    assert np.isnan(out[0, 1])


def test_labels_are_codes_of_the_sorted_distinct_values():
    np.testing.assert_array_equal(check_labels(["b", "a", "b", "c"], 4), [1, 0, 1, 2])
    with pytest.raises(ValueError, match="y must be 1-D with 3 entries"):
        check_labels([0, 1], 3)


def test_joint_codes_share_one_code_book():
    n, (a, b) = joint_codes(np.array([5, 7]), np.array([7, 9, 5]))
    assert n == 3
    np.testing.assert_array_equal(a, [0, 1])
    np.testing.assert_array_equal(b, [1, 2, 0])


def test_row_norms_in_blocks_equal_numpy_bit_for_bit(monkeypatch):
    Z = np.random.default_rng(0).standard_normal((37, 5))
    monkeypatch.setattr(_checks, "_NORM_BLOCK_BYTES", 8 * 5 * 4)  # blocks of 4 rows
    np.testing.assert_array_equal(row_norms(Z), np.linalg.norm(Z, axis=1, keepdims=True))


def test_l2_normalize_gives_unit_rows_and_keeps_zero_rows_zero():
    Z = np.array([[3.0, 4.0], [0.0, 0.0]])
    out = l2_normalize(Z)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])
    assert l2_normalize(Z, out=Z) is Z and Z[0, 0] == pytest.approx(0.6)


def test_train_test_widths_must_match():
    with pytest.raises(ValueError, match="train_Z width 3 differs from test_Z width 2"):
        check_train_test(np.ones((4, 3)), [0, 1, 0, 1], np.ones((2, 2)), [0, 1])


def test_check_labelled_refuses_one_class_small_classes_and_constant_features():
    X = np.random.default_rng(1).standard_normal((6, 2))
    Xc, codes, k = check_labelled(X, [3, 3, 4, 4, 5, 5])
    assert k == 3 and list(codes) == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="single class"):
        check_labelled(X, [1] * 6)
    with pytest.raises(ValueError, match="at least 3 samples, the smallest has 2"):
        check_labelled(X, [0, 0, 1, 1, 1, 1], min_per_class=3)
    with pytest.raises(ValueError, match="constant"):
        check_labelled(np.ones((4, 2)), [0, 1, 0, 1])
