"""Concordance of label-free metrics: Kendall's W and the per-model disagreement."""

import numpy as np
import pytest


def _tau_b_by_pairs(x: np.ndarray, y: np.ndarray) -> float:
    """τ-b from its definition over all pairs (the reference; O(n²), small n only)."""
    sx = np.sign(x[:, None] - x[None, :])
    sy = np.sign(y[:, None] - y[None, :])
    den = np.sqrt(np.abs(sx).sum() * np.abs(sy).sum())
    return float((sx * sy).sum() / den) if den > 0 else float("nan")


def test_kendall_tau_b_rows_equals_scipy_row_by_row_with_ties_and_nans():
    from scipy import stats

    from zoorank.stats.agreement import kendall_tau_b_rows

    rng = np.random.default_rng(4)
    x = np.round(rng.normal(size=(40, 25)), 1)  # one decimal: many ties
    y = np.round(x + rng.normal(size=x.shape), 1)
    x[3, 5] = np.nan  # a NaN makes that row undefined, as scipy's default does
    y[7, :] = 2.0  # a constant row: undefined
    taus = kendall_tau_b_rows(x, y)
    for row_x, row_y, tau in zip(x, y, taus):
        with np.errstate(all="ignore"):
            ref = stats.kendalltau(row_x, row_y).statistic
        assert tau == pytest.approx(ref, nan_ok=True)
        if not np.isnan(ref):
            assert tau == pytest.approx(_tau_b_by_pairs(row_x, row_y))
    assert np.isnan(taus[3]) and np.isnan(taus[7])
    # stacked rows (seeds × replicates × models) keep their leading axes
    stacked = kendall_tau_b_rows(x[None].repeat(2, axis=0), y[None].repeat(2, axis=0))
    np.testing.assert_array_equal(stacked.shape, (2, 40))


def test_resampled_kendall_equals_scipy_on_each_resample_with_ties_and_nans():
    from scipy import stats

    from zoorank.stats.agreement import ResampledKendall, bootstrap_indices, draw_counts

    rng = np.random.default_rng(8)
    for n in (2, 3, 7, 33, 200):
        x = np.round(rng.normal(size=n), 1)  # ties in x, in y, and in both
        y = np.round(x + rng.normal(size=n), 1)
        idx = bootstrap_indices(n, 60, seed=n)
        taus = ResampledKendall(x, y)(draw_counts(idx, n))
        for row, tau in zip(idx, taus):
            with np.errstate(all="ignore"):
                ref = stats.kendalltau(x[row], y[row]).statistic
            assert tau == pytest.approx(ref, abs=1e-12, nan_ok=True)
    # the identity resample is the statistic itself; a NaN or a constant side is undefined
    x, y = np.array([1.0, 2.0, 2.0, 5.0]), np.array([0.3, 0.1, 0.1, 0.9])
    assert ResampledKendall(x, y)(np.ones((1, 4)))[0] == pytest.approx(
        stats.kendalltau(x, y).statistic)
    assert np.isnan(ResampledKendall([1.0, np.nan, 3.0], [1.0, 2.0, 3.0])(np.ones((1, 3)))[0])
    assert np.isnan(ResampledKendall([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])(np.ones((1, 3)))[0])


def test_draw_counts_count_each_model_in_each_resample():
    from zoorank.stats.agreement import draw_counts

    idx = np.array([[0, 0, 2], [1, 2, 1]])
    np.testing.assert_array_equal(draw_counts(idx, 3), [[2, 0, 1], [0, 2, 1]])


def test_model_bootstrap_draws_bootstrap_indices_in_memory_bounded_batches():
    from zoorank.stats.agreement import bootstrap_batch, bootstrap_indices, model_bootstrap

    values = np.arange(10.0) ** 2
    shapes = []

    def mean(idx, axis=-1):
        shapes.append(idx.shape)
        return values[idx].mean(axis=axis)

    memory = 4 * 8 * 10 * 16  # 4 replicates of 10 models at a time
    assert bootstrap_batch(10, memory) == 4
    dist = model_bootstrap(10, mean, 50, seed=3, memory=memory)
    assert max(s[0] for s in shapes) == 4 and sum(s[0] for s in shapes) == 50
    np.testing.assert_allclose(dist, values[bootstrap_indices(10, 50, seed=3)].mean(axis=1))


def test_agreement_interval_is_the_percentile_bootstrap_of_tau_over_model_resamples():
    """The CI equals a bootstrap written here: models drawn with replacement by
    ``default_rng(seed).integers``, τ-b by its pair definition, replicates without a τ dropped,
    linear percentiles; in several memory-bounded batches the draws and the result are the same."""
    import importlib

    agreement_module = importlib.import_module("zoorank.stats.agreement")
    from zoorank.stats.agreement import agreement, bootstrap_batch, bootstrap_indices

    rng = np.random.default_rng(11)
    oracle = rng.uniform(size=9)
    metric = np.round(oracle + rng.normal(0, 0.2, 9), 1)
    metric[2] = np.nan  # ranked last (a failed metric), tied with nothing
    idx = bootstrap_indices(9, 300, seed=5)
    sm = np.where(np.isnan(metric), np.nanmin(metric) - 1, metric)  # higher is better, NaN last
    ref = np.array([_tau_b_by_pairs(sm[r], oracle[r]) for r in idx])
    ref = ref[~np.isnan(ref)]
    low, high = np.quantile(ref, [0.025, 0.975])
    out = agreement(metric, oracle, bootstrap=300, seed=5)
    assert (out["kendall_ci_low"], out["kendall_ci_high"]) == pytest.approx((low, high))
    # a budget that holds only a few replicates at a time: batches of 3, same draws, same CIs
    assert bootstrap_batch(9, memory=3 * 8 * 9 * 16) == 3
    default = agreement_module.BOOTSTRAP_MEMORY
    try:
        agreement_module.BOOTSTRAP_MEMORY = 3 * 8 * 9 * 16
        assert bootstrap_batch(9) == 3
        batched = agreement(metric, oracle, bootstrap=300, seed=5)
    finally:
        agreement_module.BOOTSTRAP_MEMORY = default
    assert {k: batched[k] for k in out if k.endswith(("_low", "_high"))} == pytest.approx(
        {k: out[k] for k in out if k.endswith(("_low", "_high"))})


def test_bootstrap_batch_bounds_the_replicates_held_at_once():
    from zoorank.stats.agreement import BOOTSTRAP_MEMORY, bootstrap_batch

    for n in (10, 1_000, 2_000, 100_000):
        batch = bootstrap_batch(n)
        assert batch >= 1
        # 16 float64 vectors of n per replicate held at once stay under the budget
        assert batch == 1 or batch * n * 8 * 16 <= BOOTSTRAP_MEMORY
