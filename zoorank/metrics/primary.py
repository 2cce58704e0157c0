"""Which metric orders the leaderboard: the metrics ``rank.primary_metric`` may name for a config, the
default when it names none, and the metrics that grow with the embedding width (a caveat when one
of them orders a zoo of mixed widths).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from zoorank.metrics.registry import REGISTRY, VIEW_SEPARATOR, expand

#: the default primary metric when ``rank.primary_metric`` is not set: on each dataset, the first of
#: these that the config computes and that ranks (nearly) the whole zoo (:func:`default_for_coverage`);
#: metrics registered later follow in registration order (the hook for new scores: they are
#: candidates of ``benchmarks/primary_evidence.py`` at once and move here when its rule ranks them).
#: The order is the README's rule ("Which metric orders the board": fewest misses of the oracle's
#: own top set, then fewest top sets wider than half the zoo, then mean τ against kNN) applied by
#: ``benchmarks/primary_evidence.py`` (``choose_default``) to the demo, digits, CIFAR-10 validation
#: and UvA zoos in ``benchmarks/results/primary_evidence.md`` (issue 24; 2026-11-26): NC where seed
#: ensembles exist; alignment and ETran's energy (no miss, no vague answer; ETran's energy needs no
#: augmented view); RankMe(aug) and uniformity (each missed the UvA zoo); CLID and cluster
#: learnability (misses and top sets wider than half the zoo); then the rest.
PRIMARY_PREFERENCE: tuple[str, ...] = (
    "nc", "alignment", "etran_energy", "rankme_aug", "uniformity", "clid", "cluster_learnability",
    "rankme", "coding_rate", "rankme_proj", "alpha_req", "rankme_norm", "mle_id", "twonn_id",
    "lidar",
)

#: share of the best-covered metric's models that the default primary metric must rank.
DEFAULT_COVERAGE = 0.9

#: metrics that grow with the embedding width (rank- and dimension-based): ranking models of
#: different widths by one of them orders partly by width (issue 17); RANK warns when a zoo mixes
#: widths and one of these orders it. Width-normalised variants: ``rankme_norm``, ``rankme_proj``.
WIDTH_SENSITIVE: frozenset[str] = frozenset({
    "rankme", "rankme_aug", "lidar", "twonn_id", "mle_id", "coding_rate", "clid", "clid_family",
    "numerical_rank",
})


#: metrics at their best on a collapsed encoder (a constant map has alignment 0, the ideal, and
#: uniformity ranks it by the constant's spread, none): they never order a model flagged
#: ``collapsed`` (issue 30; :func:`zoorank.metrics.ranks.flagged_last` with ``order_flagged=False``).
COLLAPSE_DEGENERATE: frozenset[str] = frozenset({"alignment", "uniformity"})


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


def default_order(config_names_: Iterable[str], augmented: bool = True) -> list[str]:
    """The primary-eligible metrics a config computes, in the order of :data:`PRIMARY_PREFERENCE`
    (then registration order); without an augmented view (``augmented=False``) the metrics that
    need one (LiDAR, RankMe(aug), alignment) are left out: they would have no value."""
    computed = expand(config_names_)
    order = [*PRIMARY_PREFERENCE, *(n for n in computed if n not in PRIMARY_PREFERENCE)]
    return [m for m in order if m in computed and REGISTRY[m].primary
            and (augmented or REGISTRY[m].inputs != "augmented")]


def default_primary(config_names_: Iterable[str], augmented: bool = True) -> str | None:
    """The first of :func:`default_order` (None when the config computes no ranking metric)."""
    return next(iter(default_order(config_names_, augmented)), None)


def default_for_coverage(order: Sequence[str], ranked: Mapping[str, int]) -> str | None:
    """The default primary metric on one dataset, from how many models each metric ranks there.

    The first metric of ``order`` (:func:`default_order`) that ranks at least
    :data:`DEFAULT_COVERAGE` of the models that the best-covered metric of ``order`` ranks, so a
    metric that only some models can have (NC: members of seed ensembles) orders the board only
    when (nearly) the whole zoo has it, and one model a metric failed on does not change the
    order. None when no metric of ``order`` ranks any model.
    """
    most = max((ranked.get(m, 0) for m in order), default=0)
    if most == 0:
        return None
    return next(m for m in order if ranked.get(m, 0) >= DEFAULT_COVERAGE * most)
