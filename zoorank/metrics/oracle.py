"""Label oracle: metrics that need class labels, against which label-free metrics are judged.

* ``knn_accuracy``: DINO's weighted k-NN classifier (Caron et al. 2021).
* ``linear_probe_accuracy``: a logistic-regression probe on standardised frozen features.
* ``recall_at_1`` / ``r_auroc``: the URL benchmark (Kirchhof et al. 2023; ``specs/url_sdl_nc.md``
  PART A).
* ``loss_data_curve`` and its reducers ``sdl`` / ``esc`` / ``mdl``: the loss-data framework of
  Whitney et al. (2020) with the conventions of its official code, reprieve (spec PART B).

For every function here **higher accuracy / R@1 / R-AUROC = better**, while the loss-data reducers
(SDL, εSC, MDL) are costs: **lower = better representation**.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import check_array, check_labels, to_numpy, warn_degenerate
from zoorank.metrics.neighbors import knn
from zoorank.metrics.registry import register

__all__ = [
    "oracle_split",
    "knn_accuracy",
    "linear_probe_accuracy",
    "recall_at_1",
    "r_auroc",
    "loss_data_curve",
    "sdl",
    "esc",
    "mdl",
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


def _train_test(
    train_Z: Any, train_y: Any, test_Z: Any, test_y: Any, *, dtype: type = np.float64
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate a labelled train/test pair; labels come back raw (checked for shape only)."""
    Xtr = check_array(train_Z, "train_Z", dtype=dtype)
    Xte = check_array(test_Z, "test_Z", dtype=dtype)
    if Xtr.shape[1] != Xte.shape[1]:
        raise ValueError(f"train_Z width {Xtr.shape[1]} differs from test_Z width {Xte.shape[1]}")
    check_labels(train_y, Xtr.shape[0], "train_y")
    check_labels(test_y, Xte.shape[0], "test_y")
    return Xtr, to_numpy(train_y), Xte, to_numpy(test_y)


def _joint_codes(*label_arrays: np.ndarray) -> tuple[int, list[np.ndarray]]:
    """Encode several label vectors with one shared code book; returns (n_classes, codes...)."""
    classes, codes = np.unique(np.concatenate(label_arrays), return_inverse=True)
    splits = np.cumsum([len(y) for y in label_arrays])[:-1]
    return len(classes), [c.astype(np.int64) for c in np.split(codes.ravel(), splits)]


def knn_accuracy(
    train_Z: Any,
    train_y: Any,
    test_Z: Any,
    test_y: Any,
    k: int = 20,
    temperature: float = 0.07,
) -> float:
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

    Returns
    -------
    float in [0, 1]. Cost: one exact k-NN search, O(n_test · n_train · d).
    """
    Xtr, ytr, Xte, yte = _train_test(train_Z, train_y, test_Z, test_y, dtype=np.float32)
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
    return float(np.mean(pred == yte))


register("knn_accuracy", +1, "labels")(knn_accuracy)


def linear_probe_accuracy(
    train_Z: Any,
    train_y: Any,
    test_Z: Any,
    test_y: Any,
    Cs: Sequence[float] = DEFAULT_CS,
    cv: int = 3,
    seed: int = 0,
    max_iter: int = 200,
) -> float:
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

    Returns
    -------
    float in [0, 1].
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    Xtr, ytr, Xte, yte = _train_test(train_Z, train_y, test_Z, test_y)
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
    return float(np.mean(model.predict(scaler.transform(Xte)) == yte))


register("linear_probe_accuracy", +1, "labels")(linear_probe_accuracy)


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


register("recall_at_1", +1, "labels")(recall_at_1)


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


register("r_auroc", +1, "labels", prefix=True,
         description="R-AUROC of a reliability column (r_auroc_<column>)")(r_auroc)


# --------------------------------------------------------------------------- loss-data framework

Probe = Literal["linear", "mlp"]

_PROBE_DEFAULTS = {  # (train_steps, lr)
    "mlp": (4000, 1e-4),  # Whitney et al. 2020 / reprieve: MLP-2×512, Adam 1e-4, 4000 updates
    "linear": (500, 1e-3),  # zoorank's CPU default, see loss_data_curve
}


def _check_sizes(sizes: Any, n_train: int) -> np.ndarray:
    arr = to_numpy(sizes)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"sizes must be a non-empty 1-D list of subset sizes, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)):
        raise ValueError("sizes must be finite numbers")
    if np.any(arr != np.round(arr)) or arr.min() < 1:
        raise ValueError(f"sizes must be positive integers, got {arr.tolist()}")
    if arr.max() > n_train:
        raise ValueError(f"sizes go up to {int(arr.max())} but train_Z has only {n_train} rows")
    return np.unique(arr.astype(np.int64))


def _check_seeds(seeds: Any) -> list[int]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1 when given as a count, got {seeds}")
        return list(range(int(seeds)))
    out = [int(s) for s in seeds]
    if not out or len(set(out)) != len(out) or min(out) < 0:
        raise ValueError(f"seeds must be a non-empty list of distinct integers >= 0, got {out}")
    return out


def _init_probe(torch, gen, dims: list[int]) -> list:
    """One probe's parameters, drawn like torch.nn.Linear's default init: U(±1/sqrt(fan_in))."""
    params = []
    for fan_in, fan_out in zip(dims[:-1], dims[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        params.append((torch.rand(fan_in, fan_out, generator=gen) * 2 - 1) * bound)
        params.append((torch.rand(1, fan_out, generator=gen) * 2 - 1) * bound)
    return params


def _forward(torch, params: list, x):
    """Batched MLP over P probes: x (P, B, d) → logits (P, B, C); ReLU between layers."""
    h = x
    n_layers = len(params) // 2
    for i in range(n_layers):
        h = torch.baddbmm(params[2 * i + 1], h, params[2 * i])
        if i < n_layers - 1:
            h = torch.relu(h)
    return h


def loss_data_curve(
    train_Z: Any,
    train_y: Any,
    val_Z: Any,
    val_y: Any,
    sizes: Sequence[int],
    seeds: int | Sequence[int] = 5,
    *,
    probe: Probe = "linear",
    train_steps: int | None = None,
    batch_size: int = 256,
    lr: float | None = None,
    hidden_dim: int = 512,
    hidden_layers: int = 2,
    whiten: bool = True,
    device: str = "cpu",
    num_threads: int | None = None,
    return_per_seed: bool = False,
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loss-data curve: mean validation cross-entropy (nats) of a probe trained on n points, per n.

    For each size n and seed s (Whitney et al. 2020, App. C; reprieve ``LossDataEstimator``):
    the training subset is the first n points of a seed-``s`` permutation of the training pool
    (nested across n for one seed, fresh across seeds); a probe initialised from seed ``s`` is
    trained with Adam for a **fixed number of updates independent of n**; its mean cross-entropy on
    the whole validation set is recorded. The curve is the mean over seeds. The (n, s) probes are
    trained simultaneously as batched models (like reprieve's vmap); each one's result depends only
    on (n, s), up to float rounding, never on which other sizes or seeds are in the call.

    Probe algorithm (keep it fixed across the representations compared, spec B.8.4):

    * ``probe="mlp"`` — the paper's probe: ``hidden_layers`` × ``hidden_dim`` ReLU MLP
      (2 × 512), Adam lr 1e-4, 4,000 updates of batch 256 (reprieve defaults). Costly on CPU.
    * ``probe="linear"`` (default) — a linear softmax probe, Adam lr 1e-3, 500 updates of batch
      256: the same protocol at a CPU-friendly cost. 30 probes (10 sizes × 3 seeds) on 5,000 ×
      512 features with 10 classes take about 10 s on one busy CPU core.

    Batches: when n <= ``batch_size`` every update uses the whole subset (as reprieve's loader
    does); otherwise each update draws ``batch_size`` indices uniformly with replacement from the
    subset. ``whiten=True`` standardises all features with one *scalar* mean and std of the whole
    training pool (reprieve's whitening, not per-feature).

    Parameters
    ----------
    train_Z, train_y : the training pool (subsets are drawn from it).
    val_Z, val_y : held-out points for the loss (the spec's approximation of the population loss).
    sizes : subset sizes n, 1 <= n <= n_train (sorted and de-duplicated; the spec's grid is
        log-uniform, e.g. ``np.ceil(np.logspace(1, np.log10(n_train), 10))``).
    seeds : a list of seeds, or a count (``5`` = seeds 0..4, reprieve's default).
    train_steps, lr : None = the probe's default above.
    device : torch device for training (default CPU, bit-reproducible; ``"cuda"`` is faster).
    num_threads : CPU threads torch uses during the call (restored afterwards). None = automatic:
        1 when one update is small (< 2**28 multiply-adds over all probes), where thread
        synchronisation costs more than it saves and collapses on an oversubscribed machine;
        otherwise torch's current setting.
    return_per_seed : also return the (len(ns), len(seeds)) matrix of per-seed losses.

    Returns
    -------
    ns : (T,) int64, ascending; losses : (T,) float64 mean validation loss in nats
    (lower = better); optionally the per-seed matrix.
    """
    import torch

    Xtr, ytr, Xva, yva = _train_test(train_Z, train_y, val_Z, val_y, dtype=np.float32)
    n_classes, (ctr, cva) = _joint_codes(ytr, yva)
    ns = _check_sizes(sizes, len(Xtr))
    seed_list = _check_seeds(seeds)
    if probe not in _PROBE_DEFAULTS:
        raise ValueError(f"probe must be 'linear' or 'mlp', got {probe!r}")
    default_steps, default_lr = _PROBE_DEFAULTS[probe]
    train_steps = default_steps if train_steps is None else int(train_steps)
    lr = default_lr if lr is None else float(lr)
    if train_steps < 1 or batch_size < 1 or not lr > 0:
        raise ValueError("train_steps and batch_size must be >= 1 and lr > 0")
    if probe == "mlp" and (hidden_dim < 1 or hidden_layers < 1):
        raise ValueError("the MLP probe needs hidden_dim >= 1 and hidden_layers >= 1")
    if n_classes < 2:
        raise ValueError("train_y and val_y hold a single class: the loss-data curve is trivial")

    if whiten:
        mean, std = float(Xtr.mean(dtype=np.float64)), float(Xtr.std(dtype=np.float64))
        std = std if std > 0 else 1.0
        Xtr, Xva = (Xtr - mean) / std, (Xva - mean) / std

    jobs = [(int(n), s) for n in ns for s in seed_list]
    dims = [Xtr.shape[1]] + ([hidden_dim] * hidden_layers if probe == "mlp" else []) + [n_classes]
    dev = torch.device(device)
    macs_per_update = len(jobs) * batch_size * sum(a * b for a, b in zip(dims[:-1], dims[1:]))
    if num_threads is None and dev.type == "cpu" and macs_per_update < 2**28:
        num_threads = 1
    saved_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    # Full-batch probes (n <= batch_size) train apart, at the width of their largest n, so small
    # subsets are not padded to a whole batch.
    full_jobs = [job for job in jobs if job[0] <= batch_size]
    sampled_jobs = [job for job in jobs if job[0] > batch_size]
    loss_of: dict[tuple[int, int], float] = {}
    try:
        for group, width in (
            (full_jobs, max((n for n, _ in full_jobs), default=1)),
            (sampled_jobs, batch_size),
        ):
            if group:
                params = _fit_probes(torch, Xtr, ctr, group, dims, train_steps, width, lr, dev)
                group_losses = _validation_losses(torch, params, Xva, cva, len(group), dev)
                loss_of.update(zip(group, group_losses.tolist()))
    finally:
        torch.set_num_threads(saved_threads)
    per_seed = np.array([loss_of[job] for job in jobs]).reshape(len(ns), len(seed_list))
    if not np.isfinite(per_seed).all():
        raise ValueError("a probe diverged (non-finite validation loss); lower lr")
    losses = per_seed.mean(axis=1)
    return (ns, losses, per_seed) if return_per_seed else (ns, losses)


def _fit_probes(torch, X, y, jobs, dims, train_steps, B, lr, dev) -> list:
    """Train (n, seed) probes at once as one batched model, B rows per update; stacked params.

    A probe with n <= B uses its whole subset every update; a larger one draws B rows.
    """
    P = len(jobs)
    perms = {s: np.random.default_rng(s).permutation(len(X)) for s in {s for _, s in jobs}}
    batch_rngs = [np.random.default_rng([s, n]) for n, s in jobs]
    sizes = np.array([n for n, _ in jobs])
    full = sizes <= B
    # Full-batch probes see positions 0..n-1 every update (padding masked out by a zero weight);
    # the others draw B positions with replacement.
    fixed_pos = np.minimum(np.arange(B)[None, :], sizes[:, None] - 1)
    weights = np.where(
        full[:, None], (np.arange(B)[None, :] < sizes[:, None]) / sizes[:, None], 1.0 / B
    )
    X_t = torch.from_numpy(np.ascontiguousarray(X)).to(dev)
    y_t = torch.from_numpy(y).to(dev)
    w_t = torch.from_numpy(weights.astype(np.float32)).to(dev)
    per_probe = [_init_probe(torch, torch.Generator().manual_seed(s), dims) for _, s in jobs]
    params = [
        torch.stack([p[i] for p in per_probe]).to(dev).requires_grad_()
        for i in range(len(per_probe[0]))
    ]
    opt = torch.optim.Adam(params, lr=lr)
    chunk = 100
    for start in range(0, train_steps, chunk):
        steps = min(chunk, train_steps - start)
        pos = np.empty((steps, P, B), dtype=np.int64)
        for p, (n, s) in enumerate(jobs):
            local = fixed_pos[p] if full[p] else batch_rngs[p].integers(0, n, size=(steps, B))
            pos[:, p] = perms[s][local]
        pos_t = torch.from_numpy(pos).to(dev)
        for t in range(steps):
            idx = pos_t[t]
            logits = _forward(torch, params, X_t[idx])
            ce = torch.nn.functional.cross_entropy(
                logits.reshape(P * B, -1), y_t[idx].reshape(-1), reduction="none"
            ).reshape(P, B)
            # A sum of per-probe losses keeps the probes independent: Adam is element-wise.
            loss = (ce * w_t).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return [p.detach() for p in params]


def _validation_losses(torch, params, X, y, P, dev) -> np.ndarray:
    """Mean cross-entropy (nats) of each of the P probes on the whole validation set."""
    X_t = torch.from_numpy(np.ascontiguousarray(X)).to(dev)
    y_t = torch.from_numpy(y).to(dev)
    n_classes = params[-1].shape[-1]
    widest = max(p.shape[-1] for p in params)
    block = max(1, (1 << 22) // (P * widest))
    total = torch.zeros(P, dtype=torch.float64, device=dev)
    with torch.no_grad():
        for start in range(0, len(X), block):
            xb = X_t[start : start + block]
            logits = _forward(torch, params, xb.unsqueeze(0).expand(P, -1, -1))
            ce = torch.nn.functional.cross_entropy(
                logits.reshape(-1, n_classes), y_t[start : start + block].repeat(P),
                reduction="none",
            ).reshape(P, -1)
            total += ce.sum(dim=1, dtype=torch.float64)
    return (total / len(X)).cpu().numpy()


def _check_curve(ns: Any, losses: Any) -> tuple[np.ndarray, np.ndarray]:
    n = check_array(ns, "ns", ndim=1)
    L = check_array(losses, "losses", ndim=1)
    if n.shape != L.shape:
        raise ValueError(f"ns has {n.size} entries but losses has {L.size}")
    if n[0] <= 0 or np.any(np.diff(n) <= 0):
        raise ValueError(f"ns must be positive and strictly increasing, got {n.tolist()}")
    return n, L


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite value >= 0, got {eps}")
    return eps


def _riemann(
    n: np.ndarray, L: np.ndarray, eps: float, edge: str, first_chunk_loss: float | None
) -> float:
    widths = np.diff(np.concatenate([[0.0], n]))  # n_0 = 0
    if edge == "right":
        heights = L
    elif edge == "left":
        if first_chunk_loss is None or not math.isfinite(first_chunk_loss):
            raise ValueError(
                "edge='left' codes the first chunk (0, n_1] without a model: pass "
                "first_chunk_loss, e.g. log(n_classes) for a uniform code"
            )
        heights = np.concatenate([[float(first_chunk_loss)], L[:-1]])
    else:
        raise ValueError(f"edge must be 'right' (reprieve) or 'left' (Voita & Titov), got {edge!r}")
    return float(np.sum(widths * np.maximum(heights - eps, 0.0)))


def mdl(
    ns: Any,
    losses: Any,
    *,
    edge: Literal["right", "left"] = "right",
    first_chunk_loss: float | None = None,
) -> float:
    """Online (prequential) codelength MDL from a loss-data curve, in nats (lower = better).

    ``MDL(n_T) = Σ_t (n_t − n_{t−1}) · L̄(n_t)`` with ``n_0 = 0``: the chunked Riemann sum of the
    curve (Whitney et al. 2020, Eq. 7), i.e. ``sdl(ns, losses, eps=0)``. ``edge="right"``
    (default) takes each chunk's loss at its larger end, exactly as reprieve's ``auc_segment``;
    ``edge="left"`` codes chunk (n_{t−1}, n_t] with the model trained on n_{t−1} points (Voita &
    Titov chunking, as App. C of the paper describes) and needs ``first_chunk_loss`` for (0, n_1]
    (e.g. ``log(n_classes)``). Example: ns = [10, 20, 40], losses = [2, 1, 0.05] → 31.0.
    Cost O(T).
    """
    n, L = _check_curve(ns, losses)
    return _riemann(n, L, 0.0, edge, first_chunk_loss)


register("mdl", -1, "labels")(mdl)


def sdl(
    ns: Any,
    losses: Any,
    eps: float,
    *,
    edge: Literal["right", "left"] = "right",
    first_chunk_loss: float | None = None,
    return_bound: bool = False,
) -> float | tuple[float, bool]:
    """Surplus description length SDL_ε of a loss-data curve, in nats (lower = better).

    ``SDL_ε(n_T) = Σ_t (n_t − n_{t−1}) · [L̄(n_t) − ε]_+`` with ``n_0 = 0`` (Whitney et al. 2020,
    Eq. 11, estimated as in reprieve; ``edge`` as in ``mdl``): the area between the curve and the
    line y = ε. ε should be at least the achievable loss (the paper: 0.1 nats, or the loss of a
    large probe on raw data).

    Bound rule (reprieve's "> value"): when ``L̄(n_T) > ε`` the curve has not reached ε by the
    largest measured n, the sum is truncated there and is only a **lower bound** of SDL_ε. Then
    ``SDL = MDL − n_T·ε`` whenever the loss exceeds ε at every point.

    Returns
    -------
    float, or with ``return_bound=True`` ``(value, is_lower_bound)``. Without ``return_bound`` a
    lower bound comes with a ``DegenerateInputWarning``. Example: ns = [10, 20, 40], losses =
    [2, 1, 0.05]: ε = 0.1 → 28.0 (exact); ε = 0.01 → 30.6, a lower bound ("> 30.6"). Cost O(T).
    """
    n, L = _check_curve(ns, losses)
    eps = _check_eps(eps)
    value = _riemann(n, L, eps, edge, first_chunk_loss)
    bounded = bool(L[-1] > eps)
    if return_bound:
        return value, bounded
    if bounded:
        warn_degenerate(
            f"the loss {L[-1]:.4g} at n={n[-1]:g} is above eps={eps:g}: SDL {value:.6g} is a lower "
            "bound (pass return_bound=True to get the flag)"
        )
    return value


register("sdl_eps", -1, "labels", prefix=True,
         description="surplus description length at ε (sdl_eps<ε>)")(sdl)


def esc(
    ns: Any,
    losses: Any,
    eps: float,
    *,
    return_bound: bool = False,
) -> float | tuple[float, bool]:
    """ε sample complexity εSC: the smallest measured n with ``L̄(n) <= ε`` (lower = better).

    Whitney et al. 2020, Eq. 12, on the measured grid with reprieve's ``<=`` rule (first crossing;
    a non-monotone curve is not smoothed). The result is an upper bound at the grid's precision:
    the true εSC lies in (previous n, returned n]. Refine by measuring a finer grid there.

    When the curve never reaches ε the value is only known to exceed ``max(ns)`` ("> n_max"):
    ``return_bound=False`` returns ``math.inf`` with a ``DegenerateInputWarning`` (it sorts after
    every finite value in rankings); ``return_bound=True`` returns ``(max(ns), True)``, read as
    "> max(ns)", and ``(n, False)`` otherwise. Example: ns = [10, 20, 40], losses = [2, 1, 0.05]:
    ε = 0.1 → 40; ε = 0.01 → "> 40". Cost O(T).
    """
    n, L = _check_curve(ns, losses)
    eps = _check_eps(eps)
    below = np.flatnonzero(L <= eps)
    if below.size:
        value = float(n[below[0]])
        return (value, False) if return_bound else value
    if return_bound:
        return float(n[-1]), True
    warn_degenerate(
        f"the loss never reaches eps={eps:g} up to n={n[-1]:g}: eSC > {n[-1]:g}, returning inf "
        "(pass return_bound=True to get (max n, True) instead)"
    )
    return math.inf


register("esc_eps", -1, "labels", prefix=True, description="ε sample complexity (esc_eps<ε>)")(esc)
