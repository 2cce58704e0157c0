"""Tests for zoorank.metrics.few_label.sfda_etran: ETran's energy, SFDA, ETran and NCTI.

Independent references written here: a per-row loop for the energy (and its closed form on
constant rows), the papers' step-by-step SFDA/ETran discriminant through SciPy's generalised
eigenvectors (the reference code's route; the module solves with Σ⁻¹ directly), NCTI's three terms
from an explicit PCA (NumPy SVD) and shrunk-LDA algebra (the module uses scikit-learn), and
hand-computed min–max combinations. Features are scikit-learn digits pixels600.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.linalg
from few_label_cases import softmax_rows

from zoorank.metrics import (
    DegenerateInputWarning,
    etran,
    etran_combine,
    etran_energy,
    minmax_across_zoo,
    ncti_combine,
    registry,
    sfda,
)


def reference_lda_proba(X, y, s):
    """The papers' discriminant step by step: per-class 1/n_c covariances weighted by priors,
    shrunk; Fisher directions = generalised eigenvectors of (S_b, S_w) with VᵀS_wV = I (SciPy);
    coef = μ V Vᵀ, intercept −½ μ coefᵀ + log π (as TencentARC/SFDA's SFDA._solve_eigen)."""
    classes = np.unique(y)
    n, d = X.shape
    priors = np.array([np.mean(y == c) for c in classes])
    means = np.stack([X[y == c].mean(axis=0) for c in classes])
    Sw = sum(p * np.cov(X[y == c].T, bias=True) for p, c in zip(priors, classes))
    St = np.cov(X.T, bias=True)
    mu_w, mu_t = np.trace(Sw) / d, np.trace(St) / d
    Sw_s = (1 - s) * Sw + s * mu_w * np.eye(d)
    St_s = (1 - s) * St + s * mu_t * np.eye(d)
    _, V = scipy.linalg.eigh(St_s - Sw_s, Sw_s)
    coef = means @ V @ V.T
    intercept = -0.5 * np.diag(means @ coef.T) + np.log(priors)
    return softmax_rows(X @ coef.T + intercept)


def reference_shrinkage(X, y):
    classes = np.unique(y)
    priors = [np.mean(y == c) for c in classes]
    Sw = sum(p * np.cov(X[y == c].T, bias=True) for p, c in zip(priors, classes))
    return max(math.exp(-5 * np.linalg.eigvalsh(Sw).max()), 1e-10)


def reference_sfda(X, y):
    X = X.copy()
    classes = list(np.unique(y))
    s = reference_shrinkage(X, y)
    soft = softmax_rows(reference_lda_proba(X, y, s))
    means = np.stack([X[y == c].mean(axis=0) for c in classes])
    for j, c in enumerate(classes):
        others = np.mean([means[i] for i in range(len(classes)) if i != j], axis=0)
        for i in np.flatnonzero(y == c):
            q = soft[i, j]
            X[i] = q * X[i] + (1 - q) * others
    proba = reference_lda_proba(X, y, s)
    return np.mean([proba[i, classes.index(y[i])] for i in range(len(y))])


def test_etran_energy_is_the_mean_logsumexp_of_the_lowest_half_percent(pixels600):
    X, _ = pixels600
    Z = 3.0 * X[:400] - 1.0
    energies = sorted(math.log(sum(math.exp(v) for v in row)) for row in Z)
    count = max(1, math.floor(0.005 * len(Z)))  # 2 of 400
    assert count == 2
    assert etran_energy(Z) == pytest.approx(sum(energies[:count]) / count, rel=1e-12)
    assert etran_energy(Z, fraction=1.0) == pytest.approx(np.mean(energies), rel=1e-12)


def test_etran_energy_of_constant_rows_is_the_value_plus_log_width():
    # row i = c_i·1_d has energy c_i + log d (closed form); the lowest of 50 rows is taken
    c = np.linspace(-2.0, 3.0, 50)
    Z = np.repeat(c[:, None], 16, axis=1)
    assert etran_energy(Z) == pytest.approx(c.min() + math.log(16), rel=1e-12)


def test_etran_energy_is_a_label_free_tune_objective_with_its_floor():
    from zoorank.tune.config import ObjectiveSpec
    from zoorank.tune.objective import FLOOR, score_features

    assert "etran_energy" in registry.config_names()
    assert "etran_energy" in registry.tune_metrics()
    assert ObjectiveSpec(metric="etran_energy").metric == "etran_energy"
    rng = np.random.default_rng(0)
    clean = rng.normal(size=(300, 12))
    views = clean[:, None, :] + 0.1 * rng.normal(size=(300, 2, 12))
    assert score_features(views, clean, ["etran_energy"]) == {"etran_energy": etran_energy(clean)}
    # a collapsed representation scores the floor (the worst value: −∞), with the warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = score_features(np.ones((30, 2, 4)), np.ones((30, 4)), ["etran_energy"])
    assert out == {"etran_energy": FLOOR["etran_energy"]} and FLOOR["etran_energy"] == -math.inf
    assert any(issubclass(w.category, DegenerateInputWarning) for w in caught)


def test_sfda_matches_the_step_by_step_reference(pixels600):
    X, y = pixels600
    # λ_max(S_w) ≈ 0.3 here, so the adaptive shrinkage (≈ 0.2) is far from its floor
    assert 1e-3 < reference_shrinkage(X, y) < 0.9
    assert sfda(X, y) == pytest.approx(reference_sfda(X, y), rel=1e-9)
    Xs, ys = X[:120] * 2.0, y[:120]  # a smaller shrinkage (≈ 0.003), 12 samples per class
    assert 1e-3 < reference_shrinkage(Xs, ys) < 1e-2
    assert sfda(Xs, ys) == pytest.approx(reference_sfda(Xs, ys), rel=1e-9)
    Xw, yw = X[:40], y[:40]  # fewer samples than features: S_w has no full rank
    assert 1e-3 < reference_shrinkage(Xw, yw) < 0.9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateInputWarning)  # 4 per class: near 1, flagged
        assert sfda(Xw, yw) == pytest.approx(reference_sfda(Xw, yw), rel=1e-9)


def test_sfda_prefers_true_labels_to_shuffled_ones(pixels600):
    X, y = pixels600
    shuffled = np.random.default_rng(0).permutation(y)
    assert sfda(X, y) > sfda(X, shuffled) + 0.3


def test_sfda_saturation_is_detected_with_few_samples_and_wide_features():
    # random labels on wide, large features: every class is separable in-sample, so SFDA ≈ 1.0
    # whatever the labels (the known saturation), and zoorank says so
    rng = np.random.default_rng(1)
    Z, y = 5.0 * rng.normal(size=(40, 256)), rng.integers(0, 4, 40)
    with pytest.warns(DegenerateInputWarning, match="saturated"):
        value = sfda(Z, y)
    assert value > 0.999
    # enough samples for a full-rank within-class scatter: no saturation, a low score, no warning
    Z, y = 5.0 * rng.normal(size=(400, 16)), rng.integers(0, 4, 400)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateInputWarning)
        assert sfda(Z, y) < 0.5


def test_sfda_budget_cells_record_the_saturation():
    from zoorank.oracle import budget

    rng = np.random.default_rng(2)
    Z, y = 5.0 * rng.normal(size=(200, 128)), np.repeat(np.arange(4), 50)
    rows = budget.transferability_rows(Z, y, ["sfda", "logme"], (5,), seeds=1)
    by_name = {r["metric"]: r for r in rows}
    assert "saturated" in by_name["sfda:k5s0"]["params"]["warning"]
    assert "warning" not in by_name["logme:k5s0"]["params"]


def test_etran_terms_are_the_discriminants_mean_true_class_probability_and_the_energy(pixels600):
    X, y = pixels600
    proba = reference_lda_proba(X, y, reference_shrinkage(X, y))
    classes = list(np.unique(y))
    lda = np.mean([proba[i, classes.index(y[i])] for i in range(len(y))])
    got = etran(X, y)
    assert got.shape == (2,)
    assert got[0] == pytest.approx(lda, rel=1e-9)
    assert got[1] == etran_energy(X)


def test_etran_combine_is_the_weighted_min_max_over_the_zoo():
    # hand-computed: minmax(lda) = [0, 1, 0.5], minmax(energy) = [1, 0, 0.5]
    out = etran_combine([0.5, 1.0, 0.75], [3.0, 1.0, 2.0])
    np.testing.assert_allclose(out, [0.15, 0.85, 0.5])


def test_minmax_keeps_nan_and_makes_a_constant_term_zero():
    out = minmax_across_zoo([2.0, np.nan, 4.0, 3.0])
    np.testing.assert_allclose(out, [0.0, np.nan, 1.0, 0.5])
    np.testing.assert_array_equal(minmax_across_zoo([7.0, 7.0]), [0.0, 0.0])


def test_the_new_scores_are_registered_few_label_scores():
    few = registry.few_label_scores()
    assert {"sfda", "etran", "ncti", "knn_few_label"} <= set(few)
    assert registry.REGISTRY["ncti"].terms == ("seli", "ncc", "vc")
    assert registry.REGISTRY["etran"].terms == ("lda", "energy")
    assert registry.REGISTRY["ncti"].combine is ncti_combine
    assert registry.label_info("sfda").direction == +1
    assert "sfda" not in registry.config_names()  # labels: not a label-free metric
