"""The label-free metric suite of one model: which metric runs on which view, with which settings.

Pure (no I/O, no Ray): the SCORE stage calls :func:`label_free_suite` on a model's clean embeddings
(n × d) and augmented views (n × q × d) and stores the rows it returns. Settings follow the specs'
consolidated defaults (``specs/clid_lidar.md`` PART C) and are recorded in each row's ``params``:

* ``rankme`` on the clean view (uncentred, eps); ``rankme_aug``, ``lidar`` and ``alignment`` on the
  augmented set (RankMe(aug) pools the n·q rows; alignment pairs view 0 with view 1 of each sample).
* ``twonn_id`` and ``mle_id`` on L2-normalised rows (Euclidean on the sphere, as CLID does);
  ``cluster_learnability`` with K = round(√n), 1-NN, ``cl_chunk_size``, the run seed.
* ``uniformity`` (t = 2) and ``coding_rate`` (ε² from the options) on the clean view.
* ``embedding_norm_mean`` (raw norms; std/min/max in params), ``numerical_rank`` and
  ``duplicate_fraction`` (collapse diagnostics).

Every metric is wrapped: any exception — a ``ValueError`` (degenerate input: collapsed rows, too
few samples, NaN/Inf, a missing view), a ``FloatingPointError``, a faiss ``RuntimeError``, a
``MemoryError`` — becomes a row with value NaN and ``params["error"]`` (the other metrics go
on); warnings the metric raises (e.g. the documented sentinel 1.0 of RankMe/LiDAR on collapse) are kept in
``params["warnings"]``. A NaN never appears without an error message.

Directions (:data:`METRIC_DIRECTIONS`): +1 higher is better, −1 lower is better. ``alpha_req`` is
stored as the raw exponent α; the ReQ paper calls α ≈ 1 ideal (α < 1 a flat, noisy spectrum, α > 1
a fast-decaying, low-rank one), so it is ranked by the distance |α − 1| with direction −1
(:data:`METRIC_TARGETS`; :func:`ranking_value` returns the oriented value, ``−|α − 1|``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

from zoorank.metrics import registry
from zoorank.metrics.label_free import geometry
from zoorank.metrics.label_free.collapse import duplicate_fraction, numerical_rank
from zoorank.metrics.label_free.reliability import (
    embedding_norm,
    feature_variance,
    mean_knn_distance,
    neighborhood_consistency,
)
from zoorank.metrics.score_options import option, resolve_options

__all__ = ["duplicate_fraction", "ensemble_reliability", "label_free_suite", "nc_settings",
           "numerical_rank", "per_model_metrics", "select_samples"]

ALIGNMENT_ALPHA = geometry.ALIGNMENT_ALPHA
UNIFORMITY_T = geometry.UNIFORMITY_T


def ranking_value(metric: str, value: float) -> float:
    """``value`` oriented so that higher is better: direction · value, or −|value − target|."""
    return registry.info(metric).oriented(value)


# -- the suite (entries of zoorank.metrics.registry with a per-model computation) ----------------

Inputs = Literal["clean", "augmented"]


def per_model_metrics(metrics: Iterable[str]) -> list[str]:
    """Per-model metric names to compute for config metric names (or per-model names), in order."""
    out: list[str] = []
    known = registry.config_names()
    for name in metrics:
        if name in known:
            expanded = tuple(registry.per_model([name]))
        elif name in registry.REGISTRY and registry.REGISTRY[name].compute is not None:
            expanded = (name,)
        else:
            raise ValueError(f"unknown metric {name!r}; known: {list(known)}")
        out.extend(m for m in expanded if m not in out)
    return out


def metric_settings(metric: str, options: Any, seed: int) -> dict[str, Any]:
    """The settings a per-model metric runs with (known before running: part of its fingerprint).

    ``options``: a ``ScoreOptions``, any object or mapping with the registry's option names, or None
    (the registry's defaults)."""
    return registry.info(metric).recorded_settings(options, seed)


def metric_inputs(metric: str) -> Inputs:
    """``"clean"`` or ``"augmented"``: which embeddings the metric reads."""
    return registry.info(metric).inputs  # type: ignore[return-value]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _run_one(
    spec: registry.MetricInfo, data: Any, options: Any, seed: int
) -> tuple[float, dict[str, Any]]:
    params = metric_settings(spec.name, options, seed)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if data is None:
                what = "augmented views (n×q)" if spec.inputs == "augmented" else "clean embeddings"
                raise ValueError(f"{spec.name} needs {what}; none were given for this model")
            value, details = spec.run(data, options, seed)
            params.update(details)
            if not math.isfinite(value):
                params["error"] = f"{spec.name} returned a non-finite value ({value})"
                value = math.nan
        except Exception as err:  # any failure is this metric's, recorded; the others go on
            value = math.nan
            params["error"] = str(err) if isinstance(err, ValueError) else \
                f"{type(err).__name__}: {err}"
    messages = list(dict.fromkeys(str(w.message) for w in caught))
    if messages:
        params["warnings"] = messages
    params["seconds"] = round(time.perf_counter() - start, 4)
    return value, _jsonable(params)


# -- sample selection and seed ensembles ---------------------------------------------------------

_GOLDEN = 0x9E3779B97F4A7C15


def _hash_ids(sample_ids: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of (sample_id, seed): a seeded pseudo-random key per id, independent of order."""
    z = np.asarray(sample_ids, dtype=np.int64).astype(np.uint64)
    z = z + np.uint64(_GOLDEN * (int(seed) + 1) % (1 << 64))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def select_samples(sample_ids: Any, size: int | None, seed: int) -> np.ndarray:
    """Positions (ascending) of a deterministic subset of ``size`` samples; all when size is None.

    The subset is the ``size`` ids with the smallest seeded hash, so it depends only on the ids and
    the seed: every model that embedded the same samples gets the same subset, in any order, and a
    larger ``size`` keeps the smaller subset.
    """
    ids = np.asarray(sample_ids, dtype=np.int64)
    if size is None or size >= ids.shape[0]:
        return np.arange(ids.shape[0])
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    keys = _hash_ids(ids, seed)
    chosen = np.argsort(keys, kind="stable")[:size]
    return np.sort(chosen)


#: NC's k is capped at this share of the reference set (NC paper: k ≈ 2% of |D_ref|; spec C.9.4).
NC_K_FRACTION = 0.02
#: the reference set takes at most this share of the samples; the rest are the test points.
NC_REFERENCE_FRACTION = 0.5

option("nc_k", 100, "NC: neighbours k (capped at 2% of the reference set)")
option("nc_reference_size", 5000, "NC: reference set size (capped at half the samples)")
option("nc_metric", "cosine", "NC: 'cosine' or 'euclidean' neighbours")


def nc_settings(options: Any, seed: int) -> dict[str, Any]:
    """The settings of an ensemble's NC and baselines (known before running: fingerprinted)."""
    o = resolve_options(options)
    return {
        "k": o["nc_k"],
        "k_fraction_cap": NC_K_FRACTION,
        "reference_size": o["nc_reference_size"],
        "reference_fraction_cap": NC_REFERENCE_FRACTION,
        "reference_seed": seed,
        "metric": o["nc_metric"],
        "baselines": {"mean_knn_distance": {"k": 1}, "embedding_norm": {"raw": True},
                      "feature_variance": {"normalize": o["nc_metric"] == "cosine"}},
    }


#: the seed-ensemble metric's name: its rows, and the per-sample column of its reliability table
NC = "nc"


@registry.register(
    NC, +1, "ensemble", options=("nc_k", "nc_reference_size", "nc_metric"), settings=nc_settings,
    description="mean neighbourhood consistency over a seed ensemble (Park 2024)", default_rank=4,
)
def ensemble_reliability(
    members: list[Any], sample_ids: Any, options: Any = None, seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Per-sample NC and its baselines for one seed ensemble (Park et al. 2024; spec PART C).

    The reference set is a deterministic subset of the samples (:func:`select_samples` with the run
    seed) of size ``min(nc_reference_size, ⌊n/2⌋)``, the same indices for every member; the test
    points are the *other* samples (disjoint, so no test point finds itself among its reference
    neighbours). ``k = min(nc_k, max(1, round(0.02 · |reference|)))``: the paper's k = 100 for 5,000
    references, scaled down for small sets (a large k reaches far-away anchors, spec C.9.4).

    Parameters
    ----------
    members : list of M >= 2 arrays (n, d_m), rows aligned on ``sample_ids`` across members.
    sample_ids : (n,) int ids of the rows.

    Returns
    -------
    table : ``sample_id``, ``nc`` (in [0, 1], higher = more reliable), ``mean_knn_distance``
        (AvgDist_1, ensemble mean, higher = less reliable), ``embedding_norm`` (raw, ensemble mean,
        higher = more reliable), ``feature_variance`` (higher = less reliable; NaN when member
        widths differ, with the reason in ``params["errors"]``) for the test points.
    params : the settings used (k, reference size, metric, members' count, ...) and ``errors``.

    Raises
    ------
    ValueError
        Fewer than 2 members, fewer than 4 samples, or degenerate input to NC.
    """
    o = resolve_options(options)
    ids = np.asarray(sample_ids, dtype=np.int64)
    if len(members) < 2:
        raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
    n = ids.shape[0]
    ref_size = min(o["nc_reference_size"], int(n * NC_REFERENCE_FRACTION))
    if ref_size < 2 or n - ref_size < 1:
        raise ValueError(f"NC needs at least 4 samples (2 references, 2 test points), got {n}")
    is_ref = np.zeros(n, dtype=bool)
    is_ref[select_samples(ids, ref_size, seed)] = True
    k = min(o["nc_k"], max(1, round(NC_K_FRACTION * ref_size)))
    metric = o["nc_metric"]
    test = [np.asarray(m)[~is_ref] for m in members]
    ref = [np.asarray(m)[is_ref] for m in members]
    params: dict[str, Any] = {
        **nc_settings(options, seed),
        "k": int(k),
        "k_requested": o["nc_k"],
        "reference_size": int(ref_size),
        "reference_size_requested": o["nc_reference_size"],
        "n_test": int(n - ref_size),
        "members": len(members),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = {
            "sample_id": ids[~is_ref],
            NC: neighborhood_consistency(test, ref, k=k, metric=metric),
            "mean_knn_distance": mean_knn_distance(test, ref, k=1, metric=metric),
            "embedding_norm": embedding_norm(test),
        }
        try:
            table["feature_variance"] = feature_variance(test, normalize=metric == "cosine")
        except ValueError as err:
            table["feature_variance"] = np.full(n - ref_size, np.nan)
            params["errors"] = {"feature_variance": str(err)}
    messages = list(dict.fromkeys(str(w.message) for w in caught))
    if messages:
        params["warnings"] = messages
    return table, _jsonable(params)


def label_free_suite(
    clean: Any,
    views: Any,
    metrics: Iterable[str],
    options: Any = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Compute label-free metrics of one model.

    Parameters
    ----------
    clean : (n, d) array or None
        Clean embeddings (one row per sample).
    views : (n_aug, q, d) array or None
        Augmented embeddings grouped by clean sample (q ≥ 2 views each).
    metrics : config metric names (``RunConfig.metrics``) or per-model names; expanded with
        :func:`per_model_metrics` (pool-level ``clid`` adds its CL and ID terms, ``nc`` adds nothing).
    options : ScoreOptions, or any object or mapping of the registry's options (None: defaults).
    seed : run seed (cluster learnability's k-means and stream order).

    Returns
    -------
    list of dicts ``{metric, value, params, n, dim}``, one per metric, in the order of ``metrics``.
    ``value`` is a float, NaN only with ``params["error"]``; ``params`` is a JSON-ready dict of the
    settings, result details, ``warnings`` and ``seconds``; ``n`` counts the samples the metric saw
    (clean rows, or clean samples of the augmented set), ``dim`` the embedding width.
    """
    rows = []
    for name in per_model_metrics(metrics):
        spec = registry.REGISTRY[name]
        data = clean if spec.inputs == "clean" else views
        if data is not None:
            data = np.asarray(data) if not hasattr(data, "detach") else data
        value, params = _run_one(spec, data, options, seed)
        shape = tuple(data.shape) if data is not None else (0, 0)
        rows.append(
            {
                "metric": name,
                "value": value,
                "params": params,
                "n": int(shape[0]),
                "dim": int(shape[-1]) if len(shape) >= 2 else 0,
            }
        )
    return rows


# -- live views of the registry (kept for callers of the old constants) -----------------------------


def __getattr__(name: str) -> Any:
    if name == "METRIC_DIRECTIONS":  # +1: higher is better; −1: lower is better
        return registry.directions()
    if name == "METRIC_TARGETS":  # ranked by |value − target| (direction −1)
        return registry.targets()
    if name == "CONFIG_METRICS":  # config metric name → the per-model metrics the suite emits for it
        return {n: tuple(registry.per_model([n])) for n in registry.config_names()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
