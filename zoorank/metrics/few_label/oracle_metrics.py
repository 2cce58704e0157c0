"""Label oracle: metrics that need class labels, against which label-free metrics are judged.

* ``knn_accuracy``: DINO's weighted k-NN classifier (Caron et al. 2021).
* ``linear_probe_accuracy``: a logistic-regression probe on standardised frozen features.
* ``recall_at_1`` / ``r_auroc``: the URL benchmark (Kirchhof et al. 2023; ``specs/url_sdl_nc.md``
  PART A).

For every function here **higher accuracy / R@1 / R-AUROC = better**. The loss-data framework
(spec PART B) is :mod:`zoorank.metrics.few_label.loss_data` (the curve) and
:mod:`zoorank.metrics.few_label.loss_data_costs` (SDL, εSC, MDL: costs, lower = better).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from zoorank.metrics._checks import (
    check_array,
    check_labelled,
    check_labels,
    check_train_test,
    to_numpy,
    warn_degenerate,
)
from zoorank.metrics.neighbors import knn
from zoorank.metrics.registry import register

__all__ = [
    "oracle_split",
    "knn_accuracy",
    "knn_few_label",
    "linear_probe_accuracy",
    "recall_at_1",
    "r_auroc",
]

DEFAULT_CS: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0)


def oracle_split(
    sample_ids: Any, labels: Any, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """(train ids, test ids, note): the label oracle's one split rule, stratified and seeded.

    scikit-learn's ``train_test_split(test_size=test_fraction, random_state=seed,
    stratify=labels)`` on ``sample_ids`` (ids or positions), both halves sorted. Falls back to an
    unstratified split with the same seed when a class is too small to stratify (the note says
    so). RANK's oracle, Tune's oracle and ``zoorank metrics --labels`` all call this.
    """
    from sklearn.model_selection import train_test_split

    ids = np.asarray(sample_ids)
    note = "stratified"
    try:
        tr, te = train_test_split(ids, test_size=test_fraction, random_state=seed,
                                  stratify=np.asarray(labels))
    except ValueError:
        tr, te = train_test_split(ids, test_size=test_fraction, random_state=seed)
        note = "unstratified (a class has too few samples to stratify)"
    return np.sort(tr), np.sort(te), note


@register("knn_accuracy", +1, "labels", oracle=True)
def knn_accuracy(
    train_Z: Any,
    train_y: Any,
    test_Z: Any,
    test_y: Any,
    k: int = 20,
    temperature: float = 0.07,
    return_correct: bool = False,
) -> float | tuple[float, np.ndarray]:
    """Top-1 accuracy of DINO's weighted k-NN classifier (higher = better).

    Rows are L2-normalised; each test point takes its ``k`` most cosine-similar training points and
    gives each a vote ``exp(sim / temperature)`` for its class; the class with the largest summed
    vote wins (ties: the smallest label). Defaults k = 20, T = 0.07 are DINO's (Caron et al. 2021,
    ``eval_knn.py``; Wu et al. 2018).

    Parameters
    ----------
    train_Z, test_Z : (n_train, d) and (n_test, d) arrays.
    train_y, test_y : label vectors (any hashable dtype); a test label absent from ``train_y`` is
        always wrong.
    k : neighbours, ``1 <= k <= n_train``.
    temperature : > 0.
    return_correct : also return each test point's correctness (int64 0/1), the input of the
        oracle's fold bootstrap.

    Returns
    -------
    float in [0, 1], or (float, (n_test,) int64 array). Cost: one exact k-NN search,
    O(n_test · n_train · d).
    """
    Xtr, ytr, Xte, yte = check_train_test(train_Z, train_y, test_Z, test_y, dtype=np.float32)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= len(Xtr):
        raise ValueError(f"k={k!r} must be an integer between 1 and n_train={len(Xtr)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    classes, codes = np.unique(ytr, return_inverse=True)
    dist, idx = knn(Xte, Xtr, int(k), metric="cosine")
    sim = 1.0 - dist
    # Shifting by the row maximum leaves the vote argmax unchanged and avoids overflow at small T.
    weights = np.exp((sim - sim[:, :1]) / temperature)
    votes = np.zeros((len(Xte), len(classes)), dtype=np.float64)
    rows = np.arange(len(Xte))
    neighbour_codes = codes.ravel()[idx]
    for j in range(idx.shape[1]):
        votes[rows, neighbour_codes[:, j]] += weights[:, j]
    pred = classes[np.argmax(votes, axis=1)]
    correct = (pred == yte).astype(np.int64)
    return (float(correct.mean()), correct) if return_correct else float(correct.mean())


@register("linear_probe_accuracy", +1, "labels", oracle=True)
def linear_probe_accuracy(
    train_Z: Any,
    train_y: Any,
    test_Z: Any,
    test_y: Any,
    Cs: Sequence[float] = DEFAULT_CS,
    cv: int = 3,
    seed: int = 0,
    max_iter: int = 200,
    return_correct: bool = False,
) -> float | tuple[float, np.ndarray]:
    """Test accuracy of a multinomial logistic-regression probe on frozen features (higher = better).

    Protocol: features are standardised (per-feature mean/std fitted on the data the probe is
    trained on); the inverse regularisation strength C is chosen from ``Cs`` by accuracy on a
    mean accuracy of a stratified ``cv``-fold cross-validation on the *training* set (ties: the
    smallest C); the probe is then refitted on all training data with that C and scored on the
    test set. Test data never influence any choice. Cross-validation rather than one held-out split:
    with a few hundred held-out images a single split moves a model's accuracy by several points.

    Solver: scikit-learn ``LogisticRegression`` with L-BFGS (multinomial loss, L2 penalty), a fixed
    iteration budget ``max_iter`` and warm starts along the increasing-C path. On standardised
    features L-BFGS reaches its accuracy plateau in well under 200 iterations; a probe that stops at
    the budget is part of the fixed probing algorithm, so ``ConvergenceWarning`` is silenced. With
    5,000 × 512 features and 10 classes the whole search takes a few seconds on two cores.

    Parameters
    ----------
    Cs : candidate C values (default 1e-3 … 10, log-spaced); a single value skips the selection.
    cv : folds of the cross-validation that chooses C (>= 2; fewer when a class is that small).
    seed : seed of the fold assignment (the solver itself is deterministic).
    max_iter : L-BFGS iteration budget per fit.
    return_correct : also return each test point's correctness (int64 0/1).

    Returns
    -------
    float in [0, 1], or (float, (n_test,) int64 array).
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    Xtr, ytr, Xte, yte = check_train_test(train_Z, train_y, test_Z, test_y)
    Cs = [float(c) for c in Cs]
    if not Cs or not all(c > 0 and math.isfinite(c) for c in Cs):
        raise ValueError(f"Cs must be a non-empty list of positive finite values, got {Cs}")
    if int(cv) != cv or cv < 2:
        raise ValueError(f"cv must be an integer >= 2, got {cv}")
    if len(np.unique(ytr)) < 2:
        raise ValueError("train_y has a single class: a probe needs at least two")

    def fit(X: np.ndarray, y: np.ndarray, C: float, model=None):
        model = model or LogisticRegression(max_iter=max_iter, warm_start=True)
        model.set_params(C=C)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return model.fit(X, y)

    best_C = Cs[0]
    if len(Cs) > 1:
        smallest_class = int(np.unique(ytr, return_counts=True)[1].min())
        folds = min(int(cv), len(ytr))
        if smallest_class >= folds:
            splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
        else:  # a class smaller than the fold count cannot be stratified
            splitter = KFold(n_splits=folds, shuffle=True, random_state=seed)
        scores = np.zeros(len(Cs))
        order = np.argsort(Cs)
        for fit_idx, val_idx in splitter.split(Xtr, ytr):
            if len(np.unique(ytr[fit_idx])) < 2:
                raise ValueError("a fold for choosing C has a single class; pass one C")
            scaler = StandardScaler().fit(Xtr[fit_idx])
            X_fit, X_val = scaler.transform(Xtr[fit_idx]), scaler.transform(Xtr[val_idx])
            model = None
            for i in order:  # warm starts along the increasing-C path
                model = fit(X_fit, ytr[fit_idx], Cs[i], model)
                scores[i] += float(np.mean(model.predict(X_val) == ytr[val_idx]))
        best = max(order, key=lambda i: (scores[i], -Cs[i]))
        best_C = Cs[best]
    scaler = StandardScaler().fit(Xtr)
    model = fit(scaler.transform(Xtr), ytr, best_C)
    correct = (model.predict(scaler.transform(Xte)) == yte).astype(np.int64)
    return (float(correct.mean()), correct) if return_correct else float(correct.mean())


@register("recall_at_1", +1, "labels")
def recall_at_1(Z: Any, y: Any, return_correct: bool = False) -> float | tuple[float, np.ndarray]:
    """Recall@1 of the URL benchmark: does each point's cosine nearest neighbour share its class?

    ``c_i = 1[y_{j*(i)} = y_i]`` with ``j*(i) = argmax_{j ≠ i} cos(z_i, z_j)`` (self excluded by
    index, so an exact duplicate of a point counts as its neighbour), and ``R@1 = mean_i c_i``
    (Kirchhof et al. 2023, Sec. 3). Higher = better. Ties between equally similar neighbours are
    broken by the search backend.

    Parameters
    ----------
    Z : (n, d) embeddings, n >= 2.
    y : (n,) labels.
    return_correct : also return the per-sample correctness ``c`` (int64 0/1), the input of
        ``r_auroc``.

    Returns
    -------
    float in [0, 1], or (float, (n,) int64 array). Cost: one exact k-NN self-search, O(n² d).
    """
    X = check_array(Z, "Z", min_rows=2, dtype=np.float32)
    codes = check_labels(y, X.shape[0], "y")
    _, idx = knn(X, None, 1, metric="cosine")
    correct = (codes[idx[:, 0]] == codes).astype(np.int64)
    r1 = float(correct.mean())
    return (r1, correct) if return_correct else r1


@register("r_auroc", +1, "labels", prefix=True,
         description="R-AUROC of a reliability column (r_auroc_<column>)")
def r_auroc(uncertainty: Any, correct: Any) -> float:
    """R-AUROC: how well an uncertainty ranks a model's own R@1 errors above its hits (URL).

    ``R-AUROC = AUROC(score = u, positive = 1[c = 0]) = P(u_wrong > u_right) + ½ P(tie)``
    (trapezoidal ROC with every value as a threshold, ``sklearn.metrics.roc_auc_score``;
    Kirchhof et al. 2023). **Larger u must mean more uncertain**: invert certainties (norms,
    concentrations, NC) first; ``u`` and ``-u`` give values summing to 1. Higher = better;
    0.5 = uninformative (any constant u).

    Parameters
    ----------
    uncertainty : (n,) finite values.
    correct : (n,) 0/1 or bool R@1 correctness (from ``recall_at_1(..., return_correct=True)``).

    Returns
    -------
    float in [0, 1]. When every point is correct, or every point is wrong, the AUROC is undefined;
    0.5 (no information) is returned with a ``DegenerateInputWarning``. Cost O(n log n).
    """
    from sklearn.metrics import roc_auc_score

    u = check_array(uncertainty, "uncertainty", ndim=1)
    c = to_numpy(correct)
    if c.ndim != 1 or c.shape[0] != u.shape[0]:
        raise ValueError(f"correct must be 1-D with {u.shape[0]} entries, got shape {c.shape}")
    c = check_array(c, "correct", ndim=1)
    if not np.isin(c, (0.0, 1.0)).all():
        raise ValueError("correct must contain only 0/1 (or False/True)")
    wrong = (c == 0).astype(np.int64)
    if wrong.min() == wrong.max():
        warn_degenerate(
            "R-AUROC is undefined when every point is "
            + ("wrong" if wrong[0] else "correct")
            + "; returning 0.5"
        )
        return 0.5
    return float(roc_auc_score(wrong, u))


# --------------------------------------------------------------------------------------------
# kNN accuracy at a few labels per class
# --------------------------------------------------------------------------------------------


@register("knn_few_label", +1, "labels", few_label=True)
def knn_few_label(Z: Any, y: Any, k: int = 20, temperature: float = 0.07,
                  max_folds: int = 5) -> float:
    """Cross-validated kNN accuracy on the labelled samples alone (Sorkhei et al. 2025).

    The few-label form of :func:`knn_accuracy`: every
    labelled sample is held out exactly once and classified by DINO's weighted kNN
    (``k`` neighbours, ``temperature``) among the other folds' samples, so no label beyond the
    budget is read. Folds are stratified and deterministic: the j-th sample of each class (in input
    order) goes to fold ``j mod F`` with ``F = min(max_folds, smallest class size)``; ``k`` is
    capped at each fold's training size. The score is the accuracy over all held-out samples.

    Parameters
    ----------
    Z : array-like or torch.Tensor, shape (n_samples, dim)
    y : array-like, shape (n_samples,)
        At least 2 classes, each with at least 2 samples (one to hold out, one to vote).
    k, temperature : int and float, default 20 and 0.07
        DINO's kNN (as the oracle).
    max_folds : int, default 5
        At most this many folds (≥ 2).

    Returns
    -------
    float
        In [0, 1]; **higher is better**. Cost O(n²·d) (F exact kNN searches).
    """
    X, codes, n_classes = check_labelled(Z, y, min_per_class=2)
    if max_folds < 2:
        raise ValueError(f"max_folds must be >= 2, got {max_folds}")
    counts = np.bincount(codes, minlength=n_classes)
    folds = min(int(max_folds), int(counts.min()))
    fold = np.empty(len(codes), dtype=np.int64)
    for c in range(n_classes):
        where = np.flatnonzero(codes == c)
        fold[where] = np.arange(len(where)) % folds
    correct = 0.0
    for f in range(folds):
        test, train = fold == f, fold != f
        acc = knn_accuracy(X[train], codes[train], X[test], codes[test],
                           k=min(int(k), int(train.sum())), temperature=temperature)
        correct += acc * int(test.sum())
    return float(correct / len(codes))


