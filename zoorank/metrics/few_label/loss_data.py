"""The loss-data curve (Whitney et al. 2020, with the conventions of its official code, reprieve;
``specs/url_sdl_nc.md`` PART B): validation loss of a probe trained on log-uniform subsets of the
labelled samples, averaged over seeds. Its reducers (SDL, εSC, MDL) are
:mod:`zoorank.metrics.few_label.loss_data_costs`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from zoorank.metrics._checks import check_train_test, joint_codes, to_numpy

__all__ = ["loss_data_curve"]

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

    Xtr, ytr, Xva, yva = check_train_test(train_Z, train_y, val_Z, val_y, dtype=np.float32)
    n_classes, (ctr, cva) = joint_codes(ytr, yva)
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
