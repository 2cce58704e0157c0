"""The model confidence set: equal to arch and to the plain elimination, rank-consistent, and the
tied best kept."""

import numpy as np
import pytest

from zoorank.stats.uncertainty import (
    TOP_SET_GUARANTEE,
    fold_bootstrap,
    fold_scale,
    model_confidence_set,
    rank_uncertainty,
    top_set,
)


def _arch_case(seed: int, k: int = 8, T: int = 40):
    """A T × k loss matrix with a spread of mean losses and per-model noise levels."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 2.0, size=k)
    return rng.normal(size=(T, k)) * scale + np.linspace(0.0, 1.2, k)


@pytest.mark.parametrize("seed", range(6))
def test_model_confidence_set_equals_arch_on_arch_bootstrap_indices(seed):
    import warnings

    from arch.bootstrap import MCS

    losses = _arch_case(seed)
    ref = MCS(losses, 0.1, reps=400, block_size=1, method="max", bootstrap="cbb", seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref.compute()
    # the same replicates as arch's: model values = −mean loss over the resampled rows
    reps = np.stack([-losses[idx].mean(axis=0) for idx in ref._bootstrap_indices])
    inside, p = model_confidence_set(-losses.mean(axis=0), reps, size=0.1)
    assert np.flatnonzero(inside).tolist() == sorted(ref.included)
    pvalues = ref.pvalues["Pvalue"]
    for j in np.flatnonzero(~inside):
        assert p[j] == pytest.approx(pvalues.loc[j], abs=1e-12)


def _plain_mcs(point: np.ndarray, reps: np.ndarray, size: float) -> tuple[np.ndarray, np.ndarray]:
    """The T_max elimination written out: every step a full pass over the models left (no
    running sums, no bound, no BLAS product)."""
    loss, dev = -point, -(reps - point)
    alive, pvalues, p_running = np.ones(point.size, bool), np.full(point.size, np.nan), 0.0
    while alive.sum() > 1:
        idx = np.flatnonzero(alive)
        d = loss[idx] - loss[idx].mean()
        centred = dev[:, idx] - dev[:, idx].mean(axis=1, keepdims=True)
        sigma = np.sqrt((centred * centred).mean(axis=0))
        t = d / sigma
        p_running = max(p_running, float(np.mean(t.max() < (centred / sigma).max(axis=1))))
        if p_running > size:
            break
        out = idx[t == t.max()]
        pvalues[out], alive[out] = p_running, False
    pvalues[alive] = 1.0 if p_running <= size else p_running
    return alive, pvalues


def test_model_confidence_set_of_300_models_equals_the_plain_elimination():
    # large enough that every eliminated model's matrix-vector product (running sums, on one BLAS
    # thread) is one BLAS would otherwise split between threads; the answer is the plain loop's
    rng = np.random.default_rng(7)
    m, F = 300, 8
    true = np.sort(rng.normal(0, 0.1, m))[::-1]
    folds = true[:, None] + rng.normal(0, 0.2, (m, F))
    point = folds.mean(axis=1)
    reps = fold_bootstrap(point, folds, 400, seed=3, scale=fold_scale(F, 0.5))
    inside, p = model_confidence_set(point, reps, 0.05)
    ref_inside, ref_p = _plain_mcs(point, reps, 0.05)
    assert 1 < inside.sum() < m
    assert inside.tolist() == ref_inside.tolist()
    assert p == pytest.approx(ref_p, abs=1e-12, nan_ok=True)


def test_top_set_is_rank_consistent_on_a_60_model_zoo():
    # 60 models, noisy folds whose noise grows with the model index: the raw MCS keeps some noisy
    # low-ranked models while eliminating precise better ones; the top set closes that gap
    rng = np.random.default_rng(12)
    m, F = 60, 8
    true = np.linspace(3.0, 0.0, m) + rng.normal(0, 0.02, m)
    noise = np.where(np.arange(m) % 3 == 0, 0.4, 0.03)
    folds = true[:, None] + rng.normal(size=(m, F)) * noise[:, None]
    point = folds.mean(axis=1)
    reps = fold_bootstrap(point, folds, 1000, seed=5, scale=fold_scale(F, 1.0))
    raw, _ = model_confidence_set(point, reps, 0.05)
    order = np.argsort(-point)
    raw_sorted = raw[order]
    # the raw MCS is not rank-consistent here (a gap below its worst member's place)
    assert not raw_sorted[: np.flatnonzero(raw_sorted).max() + 1].all()
    top = top_set(point, reps, 0.95)
    assert top[raw].all()  # the MCS is inside the top set
    places = np.flatnonzero(top[order])
    assert places.tolist() == list(range(places.max() + 1))  # a prefix of the order
    u = rank_uncertainty(point, reps, 0.95)
    assert np.array_equal(u.in_top_set, top)
    assert top.sum() < m / 2


def test_model_confidence_set_without_spread_keeps_the_tied_best():
    point = np.array([3.0, 3.0, 1.0, np.nan])
    inside, p = model_confidence_set(point, np.tile(point, (10, 1)))
    assert inside.tolist() == [True, True, False, False]
    assert p[2] == 0.0 and np.isnan(p[3])


def test_top_set_guarantee_names_the_level():
    assert "95%" in TOP_SET_GUARANTEE.format(confidence=0.95)
