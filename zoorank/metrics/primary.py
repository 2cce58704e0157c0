"""Which metric orders the leaderboard: the metrics ``rank.primary_metric`` may name for a config, the
default when it names none, and the metrics that grow with the embedding width (a caveat when one
of them orders a zoo of mixed widths).
"""

from __future__ import annotations

from collections.abc import Iterable

from zoorank.metrics.registry import REGISTRY, VIEW_SEPARATOR, expand

#: the default primary metric when ``rank.primary_metric`` is not set: the first of these that the
#: config computes (CLID's paper recommends CLID for a mixed zoo; LiDAR/RankMe otherwise); metrics
#: registered later follow in registration order.
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


def primary_candidates(config_names_: Iterable[str], augmented_views: Iterable[str] = ()) -> list[str]:
    """Names ``rank.primary_metric`` may take for a config: its primary-eligible metrics, with
    ``<name>@<view>`` for augmented metrics of every augmented view after the first."""
    extra_views = list(augmented_views)[1:]
    out = []
    for name in expand(config_names_):
        m = REGISTRY[name]
        if not m.primary:
            continue
        out.append(name)
        if m.inputs == "augmented":
            out += [f"{name}{VIEW_SEPARATOR}{v}" for v in extra_views]
    return out


def default_primary(config_names_: Iterable[str]) -> str | None:
    """The first metric of :data:`PRIMARY_PREFERENCE` (then registration order) the config computes."""
    computed = expand(config_names_)
    order = [*PRIMARY_PREFERENCE, *(n for n in computed if n not in PRIMARY_PREFERENCE)]
    return next((m for m in order if m in computed and REGISTRY[m].primary), None)
