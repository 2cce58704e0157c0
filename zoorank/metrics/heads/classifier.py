"""Label-free accuracy estimates of classifiers from their own outputs (heads kept, contract 8).

Every function takes a model's logits on the unlabelled target images (n × K, one column per class
of the dataset, in label order) and returns an **estimated top-1 accuracy in [0, 1]**, so a
classifier zoo's leaderboard orders by an accuracy and prints one. Pure functions: no I/O, no Ray.

Conventions shared by every estimator
-------------------------------------
* **Input.** ``logits`` (n × K); the softmax is taken over the K columns (float64, max-shifted).
  A probability matrix is passed as its logarithm (``np.log(P)``: softmax(log P) = P); ``-inf``
  entries (zero probabilities) are allowed, NaN and ``+inf`` are a ``ValueError`` naming the
  array, as is a row whose entries are all ``-inf``, and ``n = 0`` (no estimate without images).
* **K = 1.** A one-class head is always right: its softmax is 1 and every estimator returns 1.
* **Source set.** DoC, ATC and COT calibrate on a labelled in-distribution set: the model's
  ``source_logits`` (m × K, the same K columns) and ``source_labels`` (m integer class codes in
  ``[0, K)``, the column order).
* **Estimates outside [0, 1]** (DoC can leave it) are clipped to [0, 1].
* **Zoo estimators** (consensus agreement, Dawid–Skene) take the zoo's hard predictions, an
  (M models × n) integer matrix of argmax classes on the same images, and return one estimate per
  model.

Registered as ``logits`` metrics (:mod:`zoorank.metrics.registry`): SCORE computes them for every
model whose manifest has ``logit_dim > 0``; the zoo estimators are registered with ``zoo=True``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import to_numpy
from zoorank.metrics.registry import register

__all__ = [
    "softmax",
    "average_confidence",
    "doc_accuracy",
    "atc_accuracy",
    "nuclear_norm_accuracy",
    "cot_accuracy",
    "consensus_agreement",
    "dawid_skene_accuracy",
    "majority_vote",
    "head_accuracy",
    "DEFAULT_CLASSIFIER_METRIC",
    "DEFAULT_CLASSIFIER_METRIC_WITH_SOURCE",
]

#: the estimate a classifier zoo's leaderboard orders by unless ``rank.classifier_metric`` names
#: another, chosen by the shift benchmark (benchmarks/science/shift_benchmark.py, 31 real CIFAR-10
#: classifiers, 9 corruption domains; benchmarks/results/shift_benchmark.md): without a labelled
#: source set, the normalised nuclear norm (mean Kendall τ against true accuracy +0.63, leader's
#: regret 5.0 pp; the best of the source-free estimates: AC +0.27, consensus +0.24, Dawid–Skene
#: +0.22; in-sample: those 9 domains chose it). On 15 held-out domains fixed before the look
#: (benchmarks/results/shift_heldout.md): τ +0.62, regret 5.7 pp, still the best source-free ...
DEFAULT_CLASSIFIER_METRIC = "nuclear_norm_accuracy"
#: ... and with ``source:`` set, COT (τ +0.74, regret 4.1 pp, MAE 5.4 pp; it won 8 of the 9
#: domains, DoC the ninth; held out: τ +0.71, regret 3.2 pp, MAE 4.8 pp, the best of all).
#: Change them only here.
DEFAULT_CLASSIFIER_METRIC_WITH_SOURCE = "cot_accuracy"


# -- inputs -------------------------------------------------------------------------------------------


def _logits(x: Any, name: str) -> np.ndarray:
    arr = to_numpy(x)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n images × K classes), got shape {arr.shape}")
    if arr.shape[0] < 1:
        raise ValueError(f"{name} has no rows (n = 0): no images to estimate an accuracy on")
    if arr.shape[1] < 1:
        raise ValueError(f"{name} has no columns (K = 0)")
    arr = np.asarray(arr, dtype=np.float64)
    bad = np.isnan(arr) | (arr == np.inf)
    if bad.any():
        raise ValueError(f"{name} contains {int(bad.sum())} NaN/+Inf values")
    if (arr == -np.inf).all(axis=1).any():
        raise ValueError(f"{name} has a row whose entries are all -inf (no class has probability)")
    return arr


def softmax(logits: Any, name: str = "logits") -> np.ndarray:
    """Row-wise softmax of ``logits`` (n × K) in float64 (max-shifted; ``-inf`` → probability 0):
    zoorank's one softmax, ``scipy.special.softmax`` after the logits' checks (2-D, numeric, no
    NaN or +Inf, no row of only −inf)."""
    from scipy.special import softmax as scipy_softmax

    return scipy_softmax(_logits(logits, name), axis=1)


def _source(source_logits: Any, source_labels: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    p = softmax(source_logits, "source_logits")
    if p.shape[1] != k:
        raise ValueError(f"source_logits has {p.shape[1]} columns, the target logits {k}")
    y = to_numpy(source_labels)
    if y.ndim != 1 or y.shape[0] != p.shape[0]:
        raise ValueError(f"source_labels must be 1-D with {p.shape[0]} entries, got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"source_labels must be integer class codes, got dtype {y.dtype}")
    if y.size and (y.min() < 0 or y.max() >= k):
        raise ValueError(f"source_labels must lie in [0, {k}), got [{y.min()}, {y.max()}]")
    return p, y.astype(np.int64)


def _clip(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


# -- per-model estimators ----------------------------------------------------------------------------


@register("average_confidence", +1, "logits")
def average_confidence(logits: Any) -> float:
    """Average confidence (AC): the mean over images of the maximum softmax probability.

    Hendrycks & Gimpel (2017); the AC baseline of Guillory et al. (2021) and Garg et al. (2022).
    Equals the accuracy of a calibrated model; an overconfident head under shift overestimates.
    In [1/K, 1]; higher = more accurate. Cost O(nK).
    """
    return float(softmax(logits).max(axis=1).mean())


@register("doc_accuracy", +1, "logits", notes={"source": True})
def doc_accuracy(logits: Any, source_logits: Any, source_labels: Any) -> float:
    """Difference of confidences (DoC; Guillory et al., ICCV 2021).

    ``acc_S − (AC_S − AC_T)``: the source accuracy moved by the drop in average confidence from
    the source to the target (``AC``: :func:`average_confidence`), clipped to [0, 1]. Needs the
    labelled source set. Higher = more accurate. Cost O((n + m)K).
    """
    p_t = softmax(logits)
    p_s, y = _source(source_logits, source_labels, p_t.shape[1])
    acc_s = float((p_s.argmax(axis=1) == y).mean())
    return _clip(acc_s - (float(p_s.max(axis=1).mean()) - float(p_t.max(axis=1).mean())))


def _atc_scores(p: np.ndarray, score: str) -> np.ndarray:
    if score == "max_confidence":
        return p.max(axis=1)
    if score == "negative_entropy":
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(p > 0, p * np.log(p), 0.0)
        return plogp.sum(axis=1)
    raise ValueError(f"score must be 'negative_entropy' or 'max_confidence', got {score!r}")


@register("atc_accuracy", +1, "logits", notes={"source": True, "score": "negative_entropy"})
def atc_accuracy(logits: Any, source_logits: Any, source_labels: Any,
                 score: Literal["negative_entropy", "max_confidence"] = "negative_entropy") -> float:
    """Average thresholded confidence (ATC; Garg et al., ICLR 2022).

    A threshold ``t`` is learnt on the source so that the share of source images with score above
    ``t`` equals the source accuracy; the estimate is the share of target images with score above
    ``t``. ``score``: ``negative_entropy`` (ATC-NE, ``Σ_k p_k log p_k``; the paper's best and the
    default) or ``max_confidence`` (ATC-MC). Convention for ``t``: with ``e`` source errors,
    ``t`` is the ``e``-th smallest source score (``-inf`` when ``e = 0``), so exactly the other
    ``m − e`` source images lie strictly above it when scores are distinct. Higher = more
    accurate. Cost O((n + m)K + m log m).
    """
    p_t = softmax(logits)
    p_s, y = _source(source_logits, source_labels, p_t.shape[1])
    s_src, s_tgt = _atc_scores(p_s, score), _atc_scores(p_t, score)
    errors = int((p_s.argmax(axis=1) != y).sum())
    t = -np.inf if errors == 0 else float(np.sort(s_src)[errors - 1])
    return float((s_tgt > t).mean())


@register("nuclear_norm_accuracy", +1, "logits")
def nuclear_norm_accuracy(logits: Any) -> float:
    """Normalised nuclear norm of the softmax matrix (Deng et al., ICML 2023).

    ``‖P‖_* / sqrt(n · min(n, K))`` with ``P`` the n × K softmax matrix (singular values in
    float64). The bound ``sqrt(n · min(n, K))`` is the largest nuclear norm of a row-stochastic
    matrix, reached by confident predictions spread evenly over the classes (high confidence and
    high dispersity); a matrix of uniform rows gives ``1/K`` (n ≥ K). Deng et al. map the score
    to an accuracy by a linear regression fitted on synthetic shifted sets; without such a
    meta-set we take the normalised score itself as the estimate: it runs from chance (1/K,
    uniform predictions) to 1 (confident, balanced predictions). Higher = more accurate. Cost
    O(n K · min(n, K)).
    """
    p = softmax(logits)
    n, k = p.shape
    s = np.linalg.svd(p, compute_uv=False)
    return _clip(float(s.sum()) / np.sqrt(n * min(n, k)))


#: the most transport variables (target images × classes) COT solves exactly at once; a larger
#: problem is solved on a seeded subset of this many cells' worth of target images. Measured
#: (HiGHS interior point, one core): 10,000 × 10 cells in 7 s, 1,000 × 10 in 0.5 s.
COT_MAX_CELLS = 100_000


def transport_cost(cost: np.ndarray, target_weights: np.ndarray, class_weights: np.ndarray) -> float:
    """Exact optimal transport cost ``min_γ Σ γ_ik c_ik`` with row sums ``target_weights`` and
    column sums ``class_weights`` (both summing to 1): the transportation LP, solved by HiGHS."""
    from scipy import sparse
    from scipy.optimize import linprog

    n, k = cost.shape
    keep = class_weights > 0  # a class with no mass takes nothing: drop its column
    cost, class_weights = cost[:, keep], class_weights[keep]
    k = cost.shape[1]
    rows = sparse.kron(sparse.eye(n), np.ones((1, k)))
    cols = sparse.kron(np.ones((1, n)), sparse.eye(k))
    a_eq = sparse.vstack([rows, cols]).tocsr()
    b_eq = np.concatenate([target_weights, class_weights])
    res = linprog(cost.ravel(), A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs-ipm")
    if res.status != 0:  # pragma: no cover - a balanced transportation LP is always feasible
        raise ValueError(f"optimal transport failed: {res.message}")
    return float(res.fun)


@register("cot_accuracy", +1, "logits", notes={"source": True, "cost": "total_variation"})
def cot_accuracy(logits: Any, source_labels: Any, seed: int = 0) -> float:
    """Confidence optimal transport (COT; Lu et al., NeurIPS 2023).

    The estimated error is the Wasserstein distance between the target softmax vectors (each of
    weight 1/n) and the source label distribution (one-hot vectors ``e_k`` with the weights of
    the source labels' class frequencies), with the cost ``‖p − e_k‖_∞`` — for a probability
    vector equal to the total variation ``‖p − e_k‖_1 / 2 = 1 − p_k``; the estimate is
    ``1 − W``. The transport is exact (the transportation LP); with more than
    :data:`COT_MAX_CELLS` cells it is solved on a seeded uniform subset of the target images.
    Logits are used as stored (the paper also temperature-scales them on the source first).
    Needs the source labels (not the source logits). Higher = more accurate. Cost: one LP with
    n·K variables.
    """
    p = softmax(logits)
    n, k = p.shape
    y = to_numpy(source_labels)
    if y.ndim != 1 or y.size == 0 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"source_labels must be a non-empty 1-D integer array, got {y.shape} "
                         f"{y.dtype}")
    if y.min() < 0 or y.max() >= k:
        raise ValueError(f"source_labels must lie in [0, {k}), got [{y.min()}, {y.max()}]")
    if k == 1:
        return 1.0
    if n * k > COT_MAX_CELLS:
        rows = np.random.default_rng(seed).choice(n, COT_MAX_CELLS // k, replace=False)
        p = p[np.sort(rows)]
        n = p.shape[0]
    marginal = np.bincount(y, minlength=k) / y.size
    w = transport_cost(1.0 - p, np.full(n, 1.0 / n), marginal)
    return _clip(1.0 - w)


# -- zoo estimators ------------------------------------------------------------------------------------


def _predictions(predictions: Any, n_classes: int | None = None) -> tuple[np.ndarray, int]:
    a = to_numpy(predictions)
    if a.ndim != 2:
        raise ValueError(f"predictions must be 2-D (models × images), got shape {a.shape}")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"predictions needs at least one model and one image, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"predictions must be integer class codes, got dtype {a.dtype}")
    k = int(a.max()) + 1 if n_classes is None else int(n_classes)
    if a.min() < 0 or a.max() >= k:
        raise ValueError(f"predictions must lie in [0, {k}), got [{a.min()}, {a.max()}]")
    return a.astype(np.int64), k


def _vote_counts(a: np.ndarray, k: int) -> np.ndarray:
    """(n × K) number of models predicting each class for each image."""
    counts = np.zeros((a.shape[1], k))
    for row in a:
        counts[np.arange(a.shape[1]), row] += 1
    return counts


def majority_vote(predictions: Any, n_classes: int | None = None) -> np.ndarray:
    """The zoo's plurality vote per image (ties go to the lowest class code)."""
    a, k = _predictions(predictions, n_classes)
    return _vote_counts(a, k).argmax(axis=1)


@register("consensus_agreement", +1, "logits", notes={"zoo": True, "vote": "plurality, ties → lowest"})
def consensus_agreement(predictions: Any, n_classes: int | None = None) -> np.ndarray:
    """Agreement of each model with the zoo's majority vote: the share of images on which its
    argmax equals the plurality vote of all M models (itself included; ties → lowest class).

    An estimate of accuracy when the zoo's vote is mostly right (the consensus baseline of the
    shift benchmark). ``predictions``: (M × n) argmax class codes. One model: 1.0. Returns (M,) in [0, 1].
    Cost O(M n).
    """
    a, k = _predictions(predictions, n_classes)
    vote = _vote_counts(a, k).argmax(axis=1)
    return (a == vote[None, :]).mean(axis=1)


@register("dawid_skene_accuracy", +1, "logits", notes={"zoo": True, "init": "consensus"})
def dawid_skene_accuracy(predictions: Any, n_classes: int | None = None,
                         model: Literal["one_coin", "class_conditional"] = "one_coin",
                         max_iter: int = 200, tol: float = 1e-8, smoothing: float = 0.01,
                         return_posterior: bool = False) -> Any:
    """Each model's accuracy under a Dawid–Skene model of the zoo's predictions (EM).

    Dawid & Skene (1979). The true class of image i has prior ``ρ``; model j predicts class l
    given true class k with probability ``π_j[k, l]``: ``model="one_coin"`` (default) ties it to
    one accuracy ``a_j`` (``π_j[k, k] = a_j``, errors spread evenly over the other K − 1
    classes), ``"class_conditional"`` keeps a full confusion matrix per model. EM starts from the
    consensus (the posterior = each image's vote shares, as CODA, Kay et al. 2025), alternates
    M-step (``ρ``, ``π`` from the posteriors, with ``smoothing`` pseudo-counts) and E-step until
    the posteriors move less than ``tol``. The estimate of model j's accuracy is its expected
    accuracy under the posterior, ``(1/n) Σ_i T_i[pred_ji]``. ``predictions``: (M × n) argmax
    class codes. Returns (M,) in [0, 1] (and the n × K posterior when ``return_posterior``).
    K = 1: every model is right. Cost O(iterations · M n K).
    """
    a, k = _predictions(predictions, n_classes)
    m, n = a.shape
    if k == 1:
        acc = np.ones(m)
        return (acc, np.ones((n, 1))) if return_posterior else acc
    onehot = np.zeros((m, n, k))
    onehot[np.arange(m)[:, None], np.arange(n)[None, :], a] = 1.0
    post = onehot.sum(axis=0) / m
    for _ in range(max_iter):
        prior = (post.sum(axis=0) + smoothing) / (n + k * smoothing)
        # counts[j, k, l] = Σ_i T_ik [pred_ji = l]
        counts = np.einsum("ik,jil->jkl", post, onehot)
        if model == "one_coin":
            right = np.einsum("jkk->j", counts)
            acc = (right + smoothing) / (n + 2 * smoothing)
            log_right, log_wrong = np.log(acc), np.log((1 - acc) / (k - 1))
            # log P(preds_i | true k) = Σ_j [pred_ji = k] log a_j + [pred_ji ≠ k] log((1−a_j)/(K−1))
            log_like = np.einsum("jik,j->ik", onehot, log_right - log_wrong) + log_wrong.sum()
        elif model == "class_conditional":
            conf = (counts + smoothing) / (counts + smoothing).sum(axis=2, keepdims=True)
            log_like = np.einsum("jil,jkl->ik", onehot, np.log(conf))
        else:
            raise ValueError(f"model must be 'one_coin' or 'class_conditional', got {model!r}")
        log_post = log_like + np.log(prior)[None, :]
        log_post -= log_post.max(axis=1, keepdims=True)
        new = np.exp(log_post)
        new /= new.sum(axis=1, keepdims=True)
        moved = float(np.abs(new - post).max())
        post = new
        if moved < tol:
            break
    acc = post[np.arange(n)[None, :], a].mean(axis=1)
    return (acc, post) if return_posterior else acc


# -- the classifier oracle ----------------------------------------------------------------------------


@register("head_accuracy", +1, "labels")
def head_accuracy(logits: Any, labels: Any) -> float:
    """The head's own top-1 accuracy: the share of images whose argmax equals the label (class
    codes in ``[0, K)``, the columns' order). The oracle of a classifier zoo (not kNN on its
    features). Ties between logits go to the lowest class. Cost O(nK)."""
    z = _logits(logits, "logits")
    y = to_numpy(labels)
    if y.ndim != 1 or y.shape[0] != z.shape[0] or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be 1-D integer codes with {z.shape[0]} entries, got "
                         f"{y.shape} {y.dtype}")
    return float((z.argmax(axis=1) == y).mean())
