"""The metric registry: one entry per label-free metric, next to the function that computes it.

Every part of zoorank that needs to know something about a label-free metric reads it here:
config validation (which names ``metrics:`` and ``rank.primary_metric`` accept), SCORE (which view
a metric reads, its settings, its implementation version), RANK (direction, ideal value), the Tune
objective (the floor reported for a diverged trial) and the report. Adding a metric is one
:class:`MetricInfo` entry plus its function.

Names. ``name`` is the metric's name in ``metrics.parquet``; ``config_name`` is the name a run
config lists under ``metrics:`` (``collapse`` asks for ``numerical_rank`` and
``duplicate_fraction``; ``clid`` asks for ``clid`` and ``clid_family`` and needs the per-model terms
``cluster_learnability`` and ``twonn_id``). Augmented-view metrics of every augmented view after
the first are stored as ``<name>@<view>`` (e.g. ``lidar@heavy``): :func:`split_view` and
:func:`info` understand that form.

Versions. ``version`` is the implementation version of the metric: bump it when its maths or
settings change, and every stored row of that metric becomes stale (and is recomputed) while the
others stay valid. The package version is not part of any fingerprint.

Inputs: ``clean`` (n × d clean embeddings), ``augmented`` (n × q × d views), ``ensemble`` (the
clean embeddings of every member of a seed ensemble), ``pool`` (other metrics' rows over the
pool of models of a dataset).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from zoorank.config import ScoreOptions

Inputs = Literal["clean", "augmented", "ensemble", "pool"]
Computation = Callable[[np.ndarray, "ScoreOptions", int], tuple[float, dict[str, Any]]]
Settings = Callable[["ScoreOptions", int], dict[str, Any]]

# Wang & Isola's (2020) exponents, also CLID's (spec A.5).
ALIGNMENT_ALPHA = 2.0
UNIFORMITY_T = 2.0


@dataclass(frozen=True)
class MetricInfo:
    """Everything zoorank knows about one label-free metric.

    direction : +1 higher is better, −1 lower is better (of ``|value − target|`` when ``target``).
    options : the ``score:`` fields the metric reads (documentation and the report).
    tune_floor : value a diverged Tune trial reports (the metric's worst); None = not a Tune metric.
    primary : whether ``rank.primary_metric`` may name it (diagnostics may not).
    requires : per-model metrics a pool metric combines (computed whenever it is asked for).
    """

    name: str
    config_name: str
    direction: int
    inputs: Inputs
    version: int = 1
    options: tuple[str, ...] = ()
    target: float | None = None
    tune_floor: float | None = None
    primary: bool = True
    requires: tuple[str, ...] = ()
    settings: Settings = field(default=lambda o, seed: {}, compare=False, repr=False)
    compute: Computation | None = field(default=None, compare=False, repr=False)
    description: str = ""

    def oriented(self, value: float) -> float:
        """``value`` oriented so that higher is better: direction · value, or −|value − target|."""
        if self.target is not None:
            return -abs(value - self.target)
        return self.direction * value


# -- computations (the functions live in their family modules; these bind the suite's settings) ---


def _rankme(Z, o, seed):
    from zoorank.metrics.spectral import rankme

    return rankme(Z, eps=o.eps, center=False), {}


def _rankme_aug(E, o, seed):
    from zoorank.metrics.spectral import rankme

    rows = E.reshape(-1, E.shape[-1])
    return rankme(rows, eps=o.eps, center=False), {"rows": int(rows.shape[0])}


#: ``rankme_proj``: every model's embeddings are projected to this many dimensions first.
PROJECTION_DIM = 64


def _rankme_norm(Z, o, seed):
    from zoorank.metrics.spectral import rankme

    value = rankme(Z, eps=o.eps, center=False)
    return value / Z.shape[1], {"rankme": float(value), "width": int(Z.shape[1])}


def _rankme_proj(Z, o, seed):
    from zoorank.metrics.spectral import rankme

    X = np.asarray(Z, dtype=np.float64)
    d = X.shape[1]
    # one random orthonormal map per (width, seed), so every model of a width sees the same
    # projection: orthonormal columns (d >= 64: a random 64-d subspace) or rows (d < 64: a
    # rotation into 64 dims, which keeps the singular values)
    rng = np.random.default_rng([int(seed), d, PROJECTION_DIM])
    q, _ = np.linalg.qr(rng.standard_normal((max(d, PROJECTION_DIM), min(d, PROJECTION_DIM))))
    R = q if d >= PROJECTION_DIM else q.T
    return rankme(X @ R, eps=o.eps, center=False), {"width": int(d)}


def _lidar(E, o, seed):
    from zoorank.metrics.spectral import lidar

    value, details = lidar(E, delta=o.lidar_delta, eps=o.eps, delta_mode=o.lidar_delta_mode,
                           return_details=True)
    return value, {"reduced": bool(details["reduced"]), "lda_dim": int(details["dim"])}


def _alpha_req(Z, o, seed):
    from zoorank.metrics.spectral import alpha_req

    alpha, r2 = alpha_req(Z, fit_range=tuple(o.alpha_fit_range), return_r2=True)
    return alpha, {"r2": float(r2)}


def _twonn(Z, o, seed):
    from zoorank.metrics.geometry import twonn_id

    d = twonn_id(Z, discard_fraction=0.1, normalize=True, return_details=True)
    return d["id"], {"n_used": d["n_used"], "n_duplicates_dropped": d["n_duplicates_dropped"]}


def _mle(Z, o, seed):
    from zoorank.metrics.geometry import mle_id

    d = mle_id(Z, k=o.mle_k, normalize=True, return_details=True)
    return d["id"], {"n_used": d["n_used"], "n_degenerate_dropped": d["n_degenerate_dropped"]}


def _cl(Z, o, seed):
    from zoorank.metrics.learnability import cluster_learnability

    n_clusters = int(round(math.sqrt(Z.shape[0])))
    d = cluster_learnability(
        Z, n_clusters=n_clusters, k=1, chunk_size=o.cl_chunk_size, seed=seed, return_details=True
    )
    if d["n_clusters"] > 1 and d["n_clusters_used"] == 1:
        # One cluster makes CL trivially 1.0 (the paper's K = 1 extreme): for ranking, a collapsed
        # representation must not get the best learnability, so record it as undefined.
        raise ValueError(
            f"collapsed representation: all rows fell into one of {d['n_clusters']} clusters, "
            "so cluster learnability is undefined (it would be a trivial 1.0)"
        )
    return d["cl"], {"n_clusters": d["n_clusters"], "n_clusters_used": d["n_clusters_used"]}


def _alignment(E, o, seed):
    from zoorank.metrics.geometry import alignment

    if E.ndim != 3 or E.shape[1] < 2:
        raise ValueError(f"alignment needs n×q views with q >= 2, got shape {tuple(E.shape)}")
    return alignment(E[:, 0], E[:, 1], alpha=ALIGNMENT_ALPHA), {}


def _uniformity(Z, o, seed):
    from zoorank.metrics.geometry import uniformity

    return uniformity(Z, t=UNIFORMITY_T), {}


def _coding_rate(Z, o, seed):
    from zoorank.metrics.spectral import coding_rate

    return coding_rate(Z, eps2=o.coding_rate_eps2), {}


def _norm(Z, o, seed):
    from zoorank.metrics.reliability import embedding_norm

    norms = embedding_norm(Z)
    stats = {"std": float(norms.std()), "min": float(norms.min()), "max": float(norms.max())}
    return float(norms.mean()), stats


def _numerical_rank(Z, o, seed):
    from zoorank.metrics.suite import numerical_rank

    return float(numerical_rank(Z)), {}


def _duplicates(Z, o, seed):
    from zoorank.metrics.suite import duplicate_fraction

    return duplicate_fraction(Z), {}


def _fixed(**settings: Any) -> Settings:
    return lambda o, seed: dict(settings)


# -- the table --------------------------------------------------------------------------------------

REGISTRY: dict[str, MetricInfo] = {
    m.name: m
    for m in [
        MetricInfo(
            "rankme", "rankme", +1, "clean", options=("eps",), tune_floor=1.0,
            settings=lambda o, s: {"eps": o.eps, "center": False}, compute=_rankme,
            description="RankMe: exp entropy of the normalised singular values (Garrido 2023)",
        ),
        MetricInfo(
            "rankme_norm", "rankme_norm", +1, "clean", options=("eps",),
            settings=lambda o, s: {"eps": o.eps, "center": False, "divided_by": "width"},
            compute=_rankme_norm,
            description="RankMe / embedding width, in (0, 1]: comparable across widths "
                        "(a model that spreads over more of its width scores higher)",
        ),
        MetricInfo(
            "rankme_proj", "rankme_proj", +1, "clean", options=("eps",),
            settings=lambda o, s: {"eps": o.eps, "center": False,
                                   "projection": "random orthonormal", "dim": PROJECTION_DIM,
                                   "seed": s},
            compute=_rankme_proj,
            description=f"RankMe after a seeded random orthonormal projection to {PROJECTION_DIM} "
                        "dims (the same for every model of a width): at most 64 at any width",
        ),
        MetricInfo(
            "rankme_aug", "rankme_aug", +1, "augmented", options=("eps",), tune_floor=1.0,
            settings=lambda o, s: {"eps": o.eps, "center": False, "pooled": "n*q rows"},
            compute=_rankme_aug, description="RankMe of the n·q augmented views pooled",
        ),
        MetricInfo(
            "lidar", "lidar", +1, "augmented",
            options=("lidar_delta", "lidar_delta_mode", "eps"), tune_floor=1.0,
            settings=lambda o, s: {"delta": o.lidar_delta, "eps": o.eps,
                                   "delta_mode": o.lidar_delta_mode},
            compute=_lidar, description="LiDAR: smooth rank of the LDA matrix (Thilak 2024)",
        ),
        MetricInfo(
            "alpha_req", "alpha_req", -1, "clean", options=("alpha_fit_range",), target=1.0,
            settings=lambda o, s: {"fit_range": list(o.alpha_fit_range), "ranked_by": "-|alpha-1|"},
            compute=_alpha_req,
            description="alpha-ReQ: power-law decay of the spectrum, ranked by |alpha - 1|",
        ),
        MetricInfo(
            "twonn_id", "twonn_id", +1, "clean", tune_floor=0.0,
            settings=_fixed(normalize=True, distance="euclidean", discard_fraction=0.1,
                            fit_intercept=False),
            compute=_twonn, description="TwoNN intrinsic dimension on L2-normalised rows",
        ),
        MetricInfo(
            "mle_id", "mle_id", +1, "clean", options=("mle_k",),
            settings=lambda o, s: {"k": o.mle_k, "normalize": True, "aggregate": "mean"},
            compute=_mle, description="Levina-Bickel MLE intrinsic dimension",
        ),
        MetricInfo(
            "cluster_learnability", "cluster_learnability", +1, "clean",
            options=("cl_chunk_size",), tune_floor=0.0,
            settings=lambda o, s: {"n_clusters": "round(sqrt(n))", "k": 1,
                                   "chunk_size": o.cl_chunk_size, "seed": s, "normalize": True,
                                   "kmeans": "spherical"},
            compute=_cl, description="cluster learnability: 1-NN accuracy on k-means labels",
        ),
        MetricInfo(
            "clid", "clid", +1, "pool", tune_floor=0.0,
            requires=("cluster_learnability", "twonn_id"),
            description="CLID: z(CL) + z(ID) over the dataset's pool of models",
        ),
        MetricInfo(
            "clid_family", "clid", +1, "pool", primary=False,
            requires=("cluster_learnability", "twonn_id"),
            description="CLID within each family",
        ),
        MetricInfo(
            "alignment", "alignment", -1, "augmented",
            settings=_fixed(alpha=ALIGNMENT_ALPHA, views=[0, 1], normalize=True),
            compute=_alignment, description="alignment of views 0 and 1 (Wang & Isola 2020)",
        ),
        MetricInfo(
            "uniformity", "uniformity", -1, "clean",
            settings=_fixed(t=UNIFORMITY_T, normalize=True), compute=_uniformity,
            description="uniformity on the sphere (Wang & Isola 2020)",
        ),
        MetricInfo(
            "coding_rate", "coding_rate", +1, "clean", options=("coding_rate_eps2",),
            settings=lambda o, s: {"eps2": o.coding_rate_eps2, "normalize": True},
            compute=_coding_rate, description="MCR² coding rate",
        ),
        MetricInfo(
            "nc", "nc", +1, "ensemble", options=("nc_k", "nc_reference_size", "nc_metric"),
            description="mean neighbourhood consistency over a seed ensemble (Park 2024)",
        ),
        MetricInfo(
            "embedding_norm_mean", "embedding_norm", +1, "clean", primary=False,
            settings=_fixed(raw=True), compute=_norm, description="mean raw embedding norm",
        ),
        MetricInfo(
            "numerical_rank", "collapse", +1, "clean", primary=False,
            settings=_fixed(tol="max(sigma)*max(n,d)*eps(float32)"), compute=_numerical_rank,
            description="numerical rank (collapse diagnostic)",
        ),
        MetricInfo(
            "duplicate_fraction", "collapse", -1, "clean", primary=False,
            settings=_fixed(exact=True), compute=_duplicates,
            description="share of exactly repeated rows (collapse diagnostic)",
        ),
    ]
}

#: config names (``metrics:``) in the registry's order.
CONFIG_NAMES: tuple[str, ...] = tuple(dict.fromkeys(m.config_name for m in REGISTRY.values()))

#: the default primary metric when ``rank.primary_metric`` is not set: the first of these that the
#: config computes (CLID's paper recommends CLID for a mixed zoo; LiDAR/RankMe otherwise).
PRIMARY_PREFERENCE: tuple[str, ...] = (
    "clid", "lidar", "rankme_aug", "rankme", "nc", "cluster_learnability", "twonn_id",
    "mle_id", "coding_rate", "uniformity", "alpha_req", "alignment",
)


#: metrics that grow with the embedding width (rank- and dimension-based): ranking models of
#: different widths by one of them orders partly by width (issue 17); RANK warns when a zoo mixes
#: widths and one of these orders it. Width-normalised variants: ``rankme_norm``, ``rankme_proj``.
WIDTH_SENSITIVE: frozenset[str] = frozenset({
    "rankme", "rankme_aug", "lidar", "twonn_id", "mle_id", "coding_rate", "clid", "clid_family",
    "numerical_rank",
})


def split_view(name: str) -> tuple[str, str | None]:
    """``"lidar@heavy"`` → ``("lidar", "heavy")``; a plain name → ``(name, None)``."""
    base, _, view = name.partition("@")
    return base, (view or None)


def info(name: str) -> MetricInfo:
    """The registry entry of a stored metric name (``<name>@<view>`` included); KeyError if none."""
    base, view = split_view(name)
    entry = REGISTRY[base]
    if view is not None and entry.inputs != "augmented":
        raise KeyError(f"{name!r}: only augmented-view metrics carry a view suffix")
    return entry


def is_label_free(name: str) -> bool:
    try:
        info(name)
    except KeyError:
        return False
    return True


def expand(config_names: Iterable[str]) -> list[str]:
    """Stored metric names a config's ``metrics:`` asks for (requirements first), in order."""
    names = list(config_names)
    unknown = [n for n in names if n not in CONFIG_NAMES]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {list(CONFIG_NAMES)}")
    out: list[str] = []
    for wanted in names:
        for m in REGISTRY.values():
            if m.config_name != wanted:
                continue
            out.extend(r for r in (*m.requires, m.name) if r not in out)
    return out


def per_model(config_names: Iterable[str]) -> list[str]:
    """The per-model (clean or augmented) metrics among :func:`expand`."""
    return [m for m in expand(config_names) if REGISTRY[m].inputs in ("clean", "augmented")]


def primary_candidates(config_names: Iterable[str], augmented_views: Iterable[str] = ()) -> list[str]:
    """Names ``rank.primary_metric`` may take for a config: its primary-eligible metrics, with
    ``<name>@<view>`` for augmented metrics of every augmented view after the first."""
    extra_views = list(augmented_views)[1:]
    out = []
    for name in expand(config_names):
        m = REGISTRY[name]
        if not m.primary:
            continue
        out.append(name)
        if m.inputs == "augmented":
            out += [f"{name}@{v}" for v in extra_views]
    return out


def default_primary(config_names: Iterable[str]) -> str | None:
    """The first metric of :data:`PRIMARY_PREFERENCE` that the config computes."""
    computed = set(expand(config_names))
    return next((m for m in PRIMARY_PREFERENCE if m in computed), None)


def directions() -> dict[str, int]:
    return {name: m.direction for name, m in REGISTRY.items()}


def tune_floors() -> dict[str, float]:
    return {name: m.tune_floor for name, m in REGISTRY.items() if m.tune_floor is not None}
