"""Cluster Learnability (prequential k-NN accuracy of k-means pseudo-labels) and the CLID score.

The reference below is a plain Python loop over the stream written from the spec (A.3), not from the
vectorised implementation; the CLID z-scores are checked against ``scipy.stats.zscore``.
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import zscore

from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.label_free.clid import clid, cluster_learnability, prequential_knn_accuracy
from zoorank.metrics.neighbors import kmeans


def prequential_reference(Z: np.ndarray, labels: np.ndarray, k: int, chunk_size: int, seed: int):
    """Brute-force chunked prequential k-NN accuracy, one item at a time, cosine in float64."""
    Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    perm = np.random.default_rng(seed).permutation(len(Z))
    accs = []
    for start in range(0, len(perm), chunk_size):
        chunk = perm[start : start + chunk_size]
        if len(chunk) < 2:
            continue
        hits = []
        for i in range(1, len(chunk)):
            sims = [(float(Zn[chunk[i]] @ Zn[chunk[j]]), j) for j in range(i)]
            neighbours = sorted(sims, key=lambda s: (-s[0], s[1]))[:k]
            neighbour_labels = [labels[chunk[j]] for _, j in neighbours]
            counts = Counter(neighbour_labels)
            best = max(counts.values())
            tied = {lab for lab, c in counts.items() if c == best}
            prediction = next(lab for lab in neighbour_labels if lab in tied)
            hits.append(prediction == labels[chunk[i]])
        accs.append(np.mean(hits))
    return float(np.mean(accs))


@pytest.fixture(scope="module")
def tiny() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((61, 5)), rng.integers(0, 4, size=61)


def blobs(n: int = 500, n_blobs: int = 5, d: int = 32, seed: int = 0) -> np.ndarray:
    """Tight Gaussian blobs round orthogonal directions (well separated in angle)."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * np.linalg.qr(rng.standard_normal((d, n_blobs)))[0].T
    return centres[rng.integers(0, n_blobs, n)] + 0.3 * rng.standard_normal((n, d))


# --- the prequential stream ---------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize(("chunk_size", "seed"), [(25, 0), (61, 1), (10_000, 2), (2, 3)])
def test_prequential_accuracy_equals_brute_force_loop(tiny, k, chunk_size, seed):
    # k = 2 and 4 with 4 labels make many vote ties, exercising the nearest-neighbour tie-break;
    # N = 61 with chunk 25 leaves a final chunk of 11, chunk 2 leaves one of a single item.
    Z, y = tiny
    expected = prequential_reference(Z, y, k, chunk_size, seed)
    got = prequential_knn_accuracy(Z, y, k=k, chunk_size=chunk_size, seed=seed)
    assert got == pytest.approx(expected, abs=1e-15)


def test_prequential_details_count_scored_items_and_chunks(tiny):
    Z, y = tiny
    got = prequential_knn_accuracy(Z, y, chunk_size=25, return_details=True)
    assert len(got["chunk_accuracies"]) == 3  # chunks of 25, 25, 11
    assert got["n_scored"] == 61 - 3
    assert got["accuracy"] == pytest.approx(np.mean(got["chunk_accuracies"]))


def test_prequential_accepts_any_label_type(tiny):
    Z, y = tiny
    names = np.array(["cat", "dog", "emu", "yak"])[y]
    assert prequential_knn_accuracy(Z, names) == prequential_knn_accuracy(Z, y)


def test_prequential_rejects_mismatched_labels(tiny):
    Z, y = tiny
    with pytest.raises(ValueError, match="labels"):
        prequential_knn_accuracy(Z, y[:-1])


# --- cluster learnability -------------------------------------------------------------------------


def test_cl_is_prequential_accuracy_of_spherical_kmeans_labels():
    Z = blobs(n=120, seed=1)
    Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    labels, _ = kmeans(Zn, 11, spherical=True, niter=100, seed=3)  # 11 = round(sqrt(120))
    expected = prequential_reference(Z, labels, k=1, chunk_size=50, seed=3)
    got = cluster_learnability(Z, chunk_size=50, seed=3, return_details=True)
    assert got["n_clusters"] == 11
    assert got["cl"] == pytest.approx(expected, abs=1e-15)


def test_cl_with_one_cluster_is_one():
    Z = np.random.default_rng(0).standard_normal((200, 16))
    assert cluster_learnability(Z, n_clusters=1) == 1.0


def test_cl_with_one_cluster_per_sample_is_near_zero():
    Z = np.random.default_rng(0).standard_normal((200, 16))
    assert cluster_learnability(Z, n_clusters=200) < 0.05


def test_cl_is_near_one_on_well_separated_clusters():
    # The first item of each cluster in the stream has no same-cluster history and must be missed:
    # with 5 clusters and 499 scored items, perfect clusters give 495/499 = 0.992.
    assert cluster_learnability(blobs(), n_clusters=5) == pytest.approx(495 / 499)


def test_cl_is_low_on_isotropic_noise_and_below_clustered_data():
    # 1000 Gaussian points in 64-D, K = round(sqrt(1000)) = 32: nearest neighbours carry little
    # cluster information (measured 0.21; 1/K would be 0.03). K blobs clustered with the same K
    # are learnable almost perfectly.
    noise = cluster_learnability(np.random.default_rng(0).standard_normal((1000, 64)))
    assert noise < 0.4
    assert cluster_learnability(blobs(n=1000, n_blobs=32, d=64)) > 0.9 > noise + 0.5


def test_cl_is_invariant_to_positive_per_sample_rescaling():
    Z = blobs(n=300, seed=2)
    scales = np.random.default_rng(5).uniform(0.1, 10.0, size=(300, 1))
    assert cluster_learnability(Z * scales) == pytest.approx(cluster_learnability(Z), abs=1e-12)


def test_cl_is_deterministic_for_a_seed():
    Z = np.random.default_rng(0).standard_normal((400, 16))
    first = cluster_learnability(Z, chunk_size=150, seed=7, return_details=True)
    again = cluster_learnability(Z, chunk_size=150, seed=7, return_details=True)
    assert first == again


def test_cl_torch_and_numpy_float32_and_float64_agree():
    Z = blobs(n=300, seed=3).astype(np.float32)
    ref = cluster_learnability(Z.astype(np.float64))
    assert cluster_learnability(Z) == ref
    assert cluster_learnability(torch.from_numpy(Z)) == ref
    assert cluster_learnability(torch.from_numpy(Z).double()) == ref


def test_cl_of_collapsed_representation_warns_and_is_one():
    with pytest.warns(DegenerateInputWarning, match="one of"):
        assert cluster_learnability(np.ones((100, 8)), n_clusters=5) == 1.0


def test_cl_with_k_neighbours_runs_and_stays_in_unit_interval():
    value = cluster_learnability(blobs(n=300, seed=4), k=5)
    assert 0.0 <= value <= 1.0


@pytest.mark.parametrize(
    "bad", [{"n_clusters": 0}, {"n_clusters": 101}, {"k": 0}, {"chunk_size": 1}, {"k": 1.5}]
)
def test_cl_rejects_bad_parameters(bad):
    with pytest.raises(ValueError):
        cluster_learnability(np.random.default_rng(0).standard_normal((100, 4)), **bad)


# --- CLID -----------------------------------------------------------------------------------------------


def test_clid_zscore_equals_sum_of_scipy_zscores():
    cl = np.array([0.41, 0.55, 0.38, 0.62, 0.50])
    id_ = np.array([18.0, 22.5, 30.1, 25.0, 12.3])
    np.testing.assert_allclose(clid(cl, id_), zscore(cl) + zscore(id_), rtol=1e-12)


def test_clid_raw_modes():
    cl, id_ = np.array([0.4, 0.6]), np.array([20.0, 10.0])
    np.testing.assert_allclose(clid(cl, id_, mode="raw_percent"), [60.0, 70.0])
    np.testing.assert_allclose(clid(cl, id_, mode="raw_fraction"), [20.4, 10.6])
    np.testing.assert_allclose(clid([0.5], [3.0], mode="raw_fraction"), [3.5])


def test_clid_constant_metric_contributes_zero_with_warning():
    cl = np.full(4, 0.5)
    id_ = np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.warns(DegenerateInputWarning, match="cl is constant"):
        got = clid(cl, id_)
    np.testing.assert_allclose(got, zscore(id_), rtol=1e-12)


def test_clid_accepts_torch_and_lists():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = clid(torch.tensor([0.1, 0.2, 0.4]), [5.0, 4.0, 9.0])
    np.testing.assert_allclose(got, zscore([0.1, 0.2, 0.4]) + zscore([5.0, 4.0, 9.0]), rtol=1e-6)


@pytest.mark.parametrize(
    ("cl", "id_", "kwargs", "match"),
    [
        ([0.5], [3.0], {}, "at least 2 models"),
        ([0.5, 0.6], [3.0], {}, "same length"),
        ([0.5, 0.6], [3.0, 4.0], {"mode": "sum"}, "mode"),
        ([0.5, np.nan], [3.0, 4.0], {}, "NaN"),
    ],
)
def test_clid_rejects_bad_input(cl, id_, kwargs, match):
    with pytest.raises(ValueError, match=match):
        clid(cl, id_, **kwargs)


# --- input checks -----------------------------------------------------------------------------------


def test_nan_input_raises_value_error():
    Z = np.random.default_rng(0).standard_normal((50, 4))
    Z[7, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cluster_learnability(Z)
    with pytest.raises(ValueError, match="NaN"):
        prequential_knn_accuracy(Z, np.zeros(50))
