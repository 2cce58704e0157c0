"""Neighbourhood consistency and its label-free baselines (spec url_sdl_nc.md PART C and E.6)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sklearn.neighbors import NearestNeighbors

from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.label_free.reliability import (
    embedding_norm,
    feature_variance,
    mean_knn_distance,
    neighborhood_consistency,
)


def _on_circle(degrees) -> np.ndarray:
    rad = np.deg2rad(np.asarray(degrees, dtype=np.float64))
    return np.stack([np.cos(rad), np.sin(rad)], axis=1)


# The test point sits at angle 0 in every member; reference point j sits at angle REF_ANGLES[j].
# Under cosine distance its two nearest reference points are the two smallest angles.
TEST_POINT = _on_circle([0.0])
MEMBER_12 = _on_circle([90.0, 10.0, 20.0, 180.0])  # neighbours {1, 2}
MEMBER_13 = _on_circle([180.0, 10.0, 90.0, 20.0])  # neighbours {1, 3}
MEMBER_03 = _on_circle([10.0, 90.0, 180.0, 20.0])  # neighbours {0, 3}


def _orthogonal(d: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def test_nc_hand_case_three_members_is_five_ninths():
    # Sets {1,2}, {1,3}, {1,2}: Jaccard pairs 1/3, 1, 1/3 -> mean 5/9 (spec E.6).
    nc = neighborhood_consistency(
        [TEST_POINT] * 3, [MEMBER_12, MEMBER_13, MEMBER_12], k=2, metric="cosine"
    )
    assert nc.shape == (1,)
    assert nc[0] == pytest.approx(5 / 9)


def test_nc_identical_neighbour_sets_give_one_and_disjoint_sets_give_zero():
    same = neighborhood_consistency([TEST_POINT] * 2, [MEMBER_12, MEMBER_12], k=2)
    disjoint = neighborhood_consistency([TEST_POINT] * 2, [MEMBER_12, MEMBER_03], k=2)
    assert same[0] == 1.0
    assert disjoint[0] == 0.0


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_nc_matches_brute_force_jaccard_of_python_sets(metric):
    rng = np.random.default_rng(0)
    n_test, n_ref, k = 25, 60, 6
    widths = [5, 8, 3]  # members may have different widths
    test = [rng.standard_normal((n_test, d)) for d in widths]
    ref = [rng.standard_normal((n_ref, d)) for d in widths]
    sets = []
    for t, r in zip(test, ref):
        nn = NearestNeighbors(n_neighbors=k, algorithm="brute", metric=metric).fit(r)
        _, idx = nn.kneighbors(t)
        sets.append([set(row.tolist()) for row in idx])
    expected = np.array(
        [
            np.mean([len(a[i] & b[i]) / len(a[i] | b[i]) for a, b in itertools.combinations(sets, 2)])
            for i in range(n_test)
        ]
    )
    nc = neighborhood_consistency(test, ref, k=k, metric=metric)
    np.testing.assert_allclose(nc, expected, rtol=0, atol=1e-12)


def test_nc_is_one_for_rotated_copies_while_feature_variance_is_large():
    # Theorem 1 of Park et al.: f2 = R f1 changes every coordinate but no neighbourhood.
    rng = np.random.default_rng(1)
    test, ref = rng.standard_normal((30, 12)), rng.standard_normal((80, 12))
    R = _orthogonal(12, seed=2)
    nc = neighborhood_consistency([test, test @ R.T], [ref, ref @ R.T], k=8, metric="cosine")
    fv = feature_variance([test, test @ R.T])
    np.testing.assert_array_equal(nc, np.ones(30))
    assert np.all(fv > 0.05)


def test_nc_euclidean_is_invariant_to_per_member_rotation_translation_and_scaling():
    rng = np.random.default_rng(3)
    test, ref = rng.standard_normal((20, 6)), rng.standard_normal((50, 6))
    R, shift = _orthogonal(6, seed=4), rng.standard_normal(6)
    moved_test, moved_ref = 3.0 * test @ R.T + shift, 3.0 * ref @ R.T + shift
    nc = neighborhood_consistency([test, moved_test], [ref, moved_ref], k=5, metric="euclidean")
    np.testing.assert_array_equal(nc, np.ones(20))


def test_avgdist_and_norm_are_identical_across_rotated_members():
    rng = np.random.default_rng(5)
    test, ref = rng.standard_normal((15, 7)), rng.standard_normal((40, 7))
    R = _orthogonal(7, seed=6)
    for metric in ("cosine", "euclidean"):
        single = mean_knn_distance(test, ref, k=3, metric=metric)
        rotated = mean_knn_distance(test @ R.T, ref @ R.T, k=3, metric=metric)
        ensemble = mean_knn_distance([test, test @ R.T], [ref, ref @ R.T], k=3, metric=metric)
        np.testing.assert_allclose(rotated, single, atol=1e-6)
        np.testing.assert_allclose(ensemble, single, atol=1e-6)
    np.testing.assert_allclose(embedding_norm(test @ R.T), embedding_norm(test), atol=1e-12)
    np.testing.assert_allclose(
        embedding_norm([test, test @ R.T]), np.linalg.norm(test, axis=1), atol=1e-12
    )


def test_mean_knn_distance_hand_values_and_ensemble_average():
    test = np.array([[0.0, 0.0]])
    ref_a = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])  # distances 1, 2, 3
    ref_b = np.array([[0.0, 4.0], [5.0, 0.0], [0.0, 6.0]])  # distances 4, 5, 6
    assert mean_knn_distance(test, ref_a, k=1, metric="euclidean")[0] == pytest.approx(1.0)
    assert mean_knn_distance(test, ref_a, k=2, metric="euclidean")[0] == pytest.approx(1.5)
    both = mean_knn_distance([test, test], [ref_a, ref_b], k=2, metric="euclidean")
    assert both[0] == pytest.approx((1.5 + 4.5) / 2)
    # cosine: the test direction (1, 0) is 0 away from (1, 0) and 1 - cos(90°) = 1 from (0, 2).
    cos = mean_knn_distance(np.array([[2.0, 0.0]]), ref_a, k=2, metric="cosine")
    assert cos[0] == pytest.approx(0.0)
    cos2 = mean_knn_distance(np.array([[0.0, 1.0]]), ref_a[:2], k=2, metric="cosine")
    assert cos2[0] == pytest.approx(0.5)


def test_embedding_norm_is_the_ensemble_mean_of_raw_norms_across_widths():
    a = np.array([[3.0, 4.0], [0.0, 1.0]])
    b = np.array([[6.0, 8.0, 0.0], [0.0, 0.0, 3.0]])
    np.testing.assert_allclose(embedding_norm(a), [5.0, 1.0])
    np.testing.assert_allclose(embedding_norm([a, b]), [7.5, 2.0])


def test_feature_variance_hand_values():
    # Normalised members (1, 0) and (0, 1): mean (½, ½), per-coordinate variance ¼ + ¼ = ½.
    a, b = np.array([[2.0, 0.0]]), np.array([[0.0, 5.0]])
    assert feature_variance([a, b])[0] == pytest.approx(0.5)
    # Raw: coordinates (2, 0) and (0, 5): variances 1 and 6.25.
    assert feature_variance([a, b], normalize=False)[0] == pytest.approx(7.25)
    assert feature_variance([a, a, a])[0] == pytest.approx(0.0)


def test_torch_tensors_of_any_float_dtype_agree_with_numpy():
    rng = np.random.default_rng(7)
    test = [rng.standard_normal((20, 6)) for _ in range(3)]
    ref = [rng.standard_normal((50, 6)) for _ in range(3)]
    expected = neighborhood_consistency(test, ref, k=5)
    for dtype in (torch.float32, torch.float64):
        got = neighborhood_consistency(
            [torch.tensor(t, dtype=dtype) for t in test],
            [torch.tensor(r, dtype=dtype) for r in ref],
            k=5,
        )
        np.testing.assert_array_equal(got, expected)
    stacked = torch.tensor(np.stack(test))  # one (M, n, d) tensor is an ensemble too
    np.testing.assert_allclose(feature_variance(stacked), feature_variance(test), atol=1e-12)
    np.testing.assert_allclose(
        embedding_norm(torch.tensor(test[0], dtype=torch.float32)),
        embedding_norm(test[0]),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        mean_knn_distance([torch.tensor(t) for t in test], [torch.tensor(r) for r in ref], k=2),
        mean_knn_distance(test, ref, k=2),
        atol=1e-6,
    )


def test_nan_in_any_member_raises_value_error():
    rng = np.random.default_rng(8)
    test = [rng.standard_normal((5, 3)) for _ in range(2)]
    ref = [rng.standard_normal((9, 3)) for _ in range(2)]
    bad = test[1].copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"test\[1\].*NaN"):
        neighborhood_consistency([test[0], bad], ref, k=2)
    with pytest.raises(ValueError, match="NaN"):
        feature_variance([test[0], bad])
    with pytest.raises(ValueError, match="NaN"):
        embedding_norm(bad)
    with pytest.raises(ValueError, match="NaN"):
        mean_knn_distance(bad, ref[0])


def test_bad_shapes_and_arguments_raise_value_error():
    rng = np.random.default_rng(9)
    t, r = rng.standard_normal((5, 3)), rng.standard_normal((9, 3))
    with pytest.raises(ValueError, match="at least 2 ensemble members"):
        neighborhood_consistency([t], [r], k=2)
    with pytest.raises(ValueError, match="same points"):
        neighborhood_consistency([t, t[:4]], [r, r], k=2)
    with pytest.raises(ValueError, match="same points"):
        neighborhood_consistency([t, t], [r, r[:8]], k=2)
    with pytest.raises(ValueError, match="width"):
        neighborhood_consistency([t, t], [r, r[:, :2]], k=2)
    with pytest.raises(ValueError, match="members"):
        neighborhood_consistency([t, t], [r, r, r], k=2)
    with pytest.raises(ValueError, match="k=10"):
        neighborhood_consistency([t, t], [r, r], k=10)
    with pytest.raises(ValueError, match="k=0"):
        neighborhood_consistency([t, t], [r, r], k=0)
    with pytest.raises(ValueError, match="metric"):
        neighborhood_consistency([t, t], [r, r], k=2, metric="manhattan")
    with pytest.raises(ValueError, match="list"):
        neighborhood_consistency(t, r, k=2)
    with pytest.raises(ValueError, match="common width"):
        feature_variance([t, t[:, :2]])
    with pytest.raises(ValueError, match="both be arrays or both be lists"):
        mean_knn_distance([t, t], r)
    with pytest.raises(ValueError, match="2-D"):
        embedding_norm(t[0])


def test_collapsed_reference_set_warns_that_ties_decide_the_neighbours():
    rng = np.random.default_rng(10)
    t = rng.standard_normal((4, 3))
    collapsed = np.ones((10, 3))
    with pytest.warns(DegenerateInputWarning, match="distinct"):
        nc = neighborhood_consistency([t, t], [collapsed, collapsed], k=3)
    assert np.all(np.isfinite(nc))
