"""The metric registry: every metric zoorank knows, registered beside the function that computes it.

A metric is one function with one ``@register`` in its family module (a file of a wing,
``zoorank/metrics/<wing>/<family>.py``, found by :mod:`zoorank.metrics._discover`)::

    @register("uniformity", -1, "clean", settings=lambda o, seed: {"t": 2.0})
    def uniformity(Z, t=2.0): ...

Every part of zoorank that needs to know something about a metric reads it here: config validation
(which names ``metrics:`` and ``rank.primary_metric`` accept; the defaults of ``score:`` options),
SCORE (which view a metric reads, its settings, its implementation version, which pool and ensemble
rows to write), RANK (direction, ideal value; oracle and few-label directions), the Tune objective
(the floor reported for a diverged trial, the same computation and collapse guard as SCORE),
``zoorank metrics`` and the report.

Names. ``name`` is the metric's name in the metric tables; ``config_name`` is the name a run config
lists under ``metrics:`` (``collapse`` asks for ``numerical_rank`` and ``duplicate_fraction``;
``clid`` asks for ``clid`` and ``clid_family`` and needs the per-model terms in ``requires``).
One separator, one meaning: ``@`` names a **view** — augmented-view metrics of every augmented view
after the first are stored as ``<name>@<view>`` (``lidar@heavy``; :func:`split_view`). Few-label
scores of a label budget are stored as ``<score>:k<k>s<seed>`` (``logme:k5s0``; ``zoorank.oracle.budget``).

Settings. ``settings(options, seed)`` returns the keyword arguments the metric's function is called
with — written once, recorded in every row's ``params`` and part of its fingerprint; ``notes`` are
recorded too but not passed (fixed facts of the computation, e.g. ``n_clusters: round(sqrt(n))``).
``options`` is a mapping of the ``score:`` options declared in :mod:`zoorank.metrics.score_options`
(each with its default; ``resolve_options`` fills it from a ``ScoreOptions`` or any object or mapping).

Versions. ``version`` is the implementation version of the metric: bump it when its maths or
settings change, and every stored row of that metric becomes stale (and is recomputed) while the
others stay valid. The package version is not part of any fingerprint.

Inputs: ``clean`` (n × d clean embeddings), ``augmented`` (n × q × d views), ``ensemble`` (the
clean embeddings of every member of a seed ensemble), ``pool`` (other metrics' rows over the pool
of models of a dataset), ``labels`` (embeddings with labels: the label oracle and few-label scores),
``logits`` (a classifier head's logits on the clean view: the label-free accuracy estimates of
:mod:`zoorank.metrics.heads.classifier`, computed by SCORE for every model with a head, never listed
under ``metrics:`` and never the embedding board's primary metric; ``notes["source"]``: needs the
labelled source set, ``notes["zoo"]``: one value per model from the whole zoo's predictions).

Which metric orders the leaderboard by default is :mod:`zoorank.metrics.primary`. This module imports
only :mod:`zoorank.metrics.score_options` of zoorank's: it is the bottom of the metrics layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from zoorank.metrics.score_options import OPTIONS, resolve_options

Inputs = Literal["clean", "augmented", "ensemble", "pool", "labels", "logits"]
INPUTS: tuple[str, ...] = ("clean", "augmented", "ensemble", "pool", "labels", "logits")
#: inputs of a metric computed on one model's embeddings by the suite (SCORE, Tune, zoorank metrics).
PER_MODEL_INPUTS: tuple[str, ...] = ("clean", "augmented")
Settings = Callable[[Mapping[str, Any], int], dict[str, Any]]
Guard = Callable[[dict[str, Any]], "str | None"]


class CollapsedError(ValueError):
    """A metric's collapse guard tripped: its value would be meaningless (SCORE: NaN; Tune: floor)."""
F = TypeVar("F", bound=Callable[..., Any])

#: separator of a view in a stored metric name (``lidar@heavy``); the only meaning of ``@``.
VIEW_SEPARATOR = "@"
#: separator of a label budget in a stored few-label score name (``logme:k5s0``; zoorank.oracle.budget).
BUDGET_SEPARATOR = ":"


@dataclass(frozen=True)
class MetricInfo:
    """Everything zoorank knows about one metric.

    direction : +1 higher is better, −1 lower is better (of ``|value − target|`` when ``target``).
    inputs : what it reads (module docstring).
    options : the ``score:`` options its settings read (declared with ``options.option``).
    tune_floor : value a diverged Tune trial reports (the metric's worst); None = not a Tune metric.
    primary : whether ``rank.primary_metric`` may name it (diagnostics and label metrics may not).
    requires : per-model metrics a pool metric combines (computed whenever it is asked for).
    guard : on the computation's details: a reason when the value is meaningless (a collapsed
        representation), which SCORE records as NaN with the reason and Tune as the floor.
    compute : the function, called as ``compute(data, **settings)``; returns a float or
        ``(float, details)`` (None for pool, ensemble and label metrics, computed by their stage).
    combine : a pool metric's function, called as ``combine(*terms, **settings)`` with one array per
        ``requires`` metric over the pool's models (each finite); returns one value per model.
    scope : a pool metric's pool: every model of a dataset (``dataset``) or of one ``family``.
    solo : a pool metric's settings for a pool of one model (a Tune trial reports CLID as
        ``100·CL + ID``, mode ``raw_percent``; the search z-scores over the finished trials).
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
    notes: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    guard: Guard | None = field(default=None, compare=False, repr=False)
    compute: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    combine: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    scope: Literal["dataset", "family"] = "dataset"
    solo: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    #: the registered function itself (for every kind of input; ``compute``/``combine`` are the
    #: per-model and pool views of it)
    function: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    #: a few-label transferability score ``fn(Z, y)`` of the label-budget curve (zoorank.oracle.budget)
    few_label: bool = False
    description: str = ""
    #: label metrics stored with a suffix (``sdl_eps0.5``, ``r_auroc_nc``): match ``<name>*`` too.
    prefix: bool = False
    #: a few-label score normalised over the zoo (ETran, NCTI): its function returns one raw value
    #: per term (stored as ``<name>.<term>`` budget cells) and ``combine(*terms)`` turns the zoo's
    #: term arrays into one value per model, in RANK.
    terms: tuple[str, ...] = ()
    #: place in the primary metric's default order (1 first; how it was chosen: zoorank.metrics.
    #: primary); None: after every ranked one, in registration order.
    default_rank: int | None = None
    #: grows with the embedding width: RANK warns when it orders a zoo of mixed widths.
    width_sensitive: bool = False
    #: at its best on a collapsed encoder: it never orders a model flagged ``collapsed``.
    collapse_degenerate: bool = False
    #: an accuracy of the label oracle: the truth RANK, the label budget and Tune judge the
    #: label-free metrics against (:func:`oracles`).
    oracle: bool = False

    def oriented(self, value: float) -> float:
        """``value`` oriented so that higher is better: direction · value, or −|value − target|."""
        if self.target is not None:
            return -abs(value - self.target)
        return self.direction * value

    def kwargs(self, options: Any = None, seed: int = 0) -> dict[str, Any]:
        """The keyword arguments :attr:`compute` is called with (options resolved, defaults filled)."""
        return dict(self.settings(resolve_options(options), seed))

    def recorded_settings(self, options: Any = None, seed: int = 0) -> dict[str, Any]:
        """What a row records as its settings (fingerprinted): the view, the kwargs and the notes."""
        return {"view": self.inputs, **self.kwargs(options, seed), **dict(self.notes)}

    def run(self, data: Any, options: Any = None, seed: int = 0) -> tuple[float, dict[str, Any]]:
        """``(value, details)`` of the metric on ``data``; ValueError when the guard trips."""
        if self.compute is None:
            raise ValueError(f"{self.name} ({self.inputs}) is computed by its stage, not per model")
        out = self.compute(data, **self.kwargs(options, seed))
        value, details = out if isinstance(out, tuple) else (out, {})
        details = dict(details)
        if self.guard is not None:
            reason = self.guard(details)
            if reason:
                raise CollapsedError(reason)
        return float(value), details


# -- the tables (filled by the family modules' registrations at import) -----------------------------

REGISTRY: dict[str, MetricInfo] = {}


def fixed(**settings: Any) -> Settings:
    """Settings that read no option: the same keyword arguments for every run."""
    return lambda o, seed: dict(settings)


def register(
    name: str,
    direction: int,
    inputs: Inputs,
    *,
    config_name: str | None = None,
    version: int = 1,
    options: Iterable[str] = (),
    settings: Settings | None = None,
    notes: Mapping[str, Any] | None = None,
    target: float | None = None,
    tune_floor: float | None = None,
    primary: bool | None = None,
    requires: Iterable[str] = (),
    guard: Guard | None = None,
    description: str = "",
    prefix: bool = False,
    scope: Literal["dataset", "family"] = "dataset",
    solo: Mapping[str, Any] | None = None,
    few_label: bool = False,
    compute: bool = True,
    terms: Iterable[str] = (),
    zoo_relative: Callable[..., Any] | None = None,
    default_rank: int | None = None,
    width_sensitive: bool = False,
    collapse_degenerate: bool = False,
    oracle: bool = False,
) -> Callable[[F], F]:
    """Decorator: register the decorated function as metric ``name`` (returns it unchanged).

    The function is called as ``fn(data, **settings(options, seed))`` by SCORE, Tune and
    ``zoorank metrics`` (``compute=False`` for a pool, ensemble or label metric whose stage computes
    it: the function is then documentation; a pool metric's function is its ``combine``, called by
    SCORE over each pool of ``scope``). A few-label score with ``terms`` returns one raw value per
    term, and ``zoo_relative(*term_arrays)`` combines them over a dataset's models in RANK.
    ``default_rank``, ``width_sensitive``, ``collapse_degenerate`` and ``oracle``: see
    :class:`MetricInfo` (what may order the board and where it stands among the candidates).
    ``primary`` defaults to True for clean, augmented, ensemble and pool metrics. Registering a
    name twice replaces the entry only if it is the same function (module reloads); otherwise
    ValueError.
    """
    if direction not in (1, -1):
        raise ValueError(f"{name}: direction must be +1 or -1, got {direction}")
    if inputs not in INPUTS:
        raise ValueError(f"{name}: inputs must be one of {INPUTS}, got {inputs!r}")
    terms = tuple(terms)
    if bool(terms) != (zoo_relative is not None):
        raise ValueError(f"{name}: terms= and zoo_relative= go together")
    if VIEW_SEPARATOR in name or ":" in name:
        raise ValueError(f"{name!r}: a metric name may not contain '@' (views) or ':' (label budgets)")
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        raise ValueError(f"{name}: options {unknown} are not declared (options.option)")
    if default_rank is not None and (primary is False or inputs in ("labels", "logits")):
        raise ValueError(f"{name}: default_rank= is for a metric that may order the board")
    if oracle and inputs != "labels":
        raise ValueError(f"{name}: an oracle reads labels (inputs='labels'), got {inputs!r}")

    def decorate(fn: F) -> F:
        entry = MetricInfo(
            name=name, config_name=config_name or name, direction=direction, inputs=inputs,
            version=version, options=tuple(options), target=target, tune_floor=tune_floor,
            primary=(inputs not in ("labels", "logits")) if primary is None else primary,
            requires=tuple(requires), settings=settings or fixed(), notes=dict(notes or {}),
            guard=guard, compute=fn if compute and inputs in PER_MODEL_INPUTS else None,
            combine=fn if compute and inputs == "pool" else zoo_relative, scope=scope, solo=solo,
            function=fn, few_label=few_label,
            description=description or (fn.__doc__ or "").strip().split("\n")[0], prefix=prefix,
            terms=terms, default_rank=default_rank, width_sensitive=width_sensitive,
            collapse_degenerate=collapse_degenerate, oracle=oracle,
        )
        old = REGISTRY.get(name)
        if old is not None and getattr(old.compute or old.combine, "__qualname__", None) != getattr(
            entry.compute or entry.combine, "__qualname__", None
        ):
            raise ValueError(f"metric {name!r} is already registered")
        REGISTRY[name] = entry
        return fn

    return decorate


def unregister(name: str) -> None:
    """Remove a registration (tests that register a metric of their own)."""
    REGISTRY.pop(name, None)


def portable(names: Iterable[str]) -> list[MetricInfo]:
    """The entries of ``names`` (and their requirements), to ship to a Ray worker whose process may
    not have run the registration (a metric registered at run time, by a notebook or a test):
    entries pickle with their functions (cloudpickle sends a function defined in a notebook or
    inside a function by value). :func:`install` them there."""
    out: dict[str, MetricInfo] = {}
    for name in names:
        m = info(name) if name in label_free() or VIEW_SEPARATOR in name else REGISTRY[name]
        for r in (*m.requires, m.name):
            out.setdefault(r, REGISTRY[r])
    return list(out.values())


def install(entries: Iterable[MetricInfo]) -> None:
    """Register shipped entries that this process does not know yet (a worker's side of
    :func:`portable`; built-in entries are already registered and are left as they are)."""
    for m in entries:
        REGISTRY.setdefault(m.name, m)


# -- lookups ------------------------------------------------------------------------------------------


def label_free() -> dict[str, MetricInfo]:
    """The label-free metrics (every input but ``labels``), in registration order."""
    return {n: m for n, m in REGISTRY.items() if m.inputs != "labels"}


def config_names() -> tuple[str, ...]:
    """Names a config's ``metrics:`` may list, in registration order (not the ``logits``
    estimates: SCORE computes them for every model with a head)."""
    return tuple(dict.fromkeys(m.config_name for m in label_free().values() if m.inputs != "logits"))


def oracles() -> tuple[str, ...]:
    """The label oracle's accuracies (``oracle=True``), in registration order: what the board's
    in-domain accuracy, the label budget's reference and Tune's trial oracle read."""
    return tuple(n for n, m in REGISTRY.items() if m.oracle)


def default_preference() -> tuple[str, ...]:
    """The metrics with a ``default_rank``, by it: the default order of the primary metric."""
    ranked = [(m.default_rank, n) for n, m in REGISTRY.items() if m.default_rank is not None]
    return tuple(n for _, n in sorted(ranked))


def width_sensitive() -> frozenset[str]:
    return frozenset(n for n, m in REGISTRY.items() if m.width_sensitive)


def collapse_degenerate() -> frozenset[str]:
    return frozenset(n for n, m in REGISTRY.items() if m.collapse_degenerate)


def classifier_metrics() -> dict[str, MetricInfo]:
    """The label-free accuracy estimates of classifier heads (``logits`` input), in registration
    order."""
    return {n: m for n, m in REGISTRY.items() if m.inputs == "logits"}


def split_view(name: str) -> tuple[str, str | None]:
    """``"lidar@heavy"`` → ``("lidar", "heavy")``; a plain name → ``(name, None)``."""
    base, _, view = name.partition(VIEW_SEPARATOR)
    return base, (view or None)


def info(name: str) -> MetricInfo:
    """The entry of a stored label-free metric name (``<name>@<view>`` included); KeyError if none."""
    base, view = split_view(name)
    entry = label_free()[base]
    if view is not None and entry.inputs != "augmented":
        raise KeyError(f"{name!r}: only augmented-view metrics carry a view suffix")
    return entry


def is_label_free(name: str) -> bool:
    try:
        info(name)
    except KeyError:
        return False
    return True


def label_info(name: str) -> MetricInfo:
    """The entry of a stored label metric (oracle or few-label; suffixes such as ``sdl_eps0.5``
    and ``r_auroc_nc`` included, a budget cell's ``:k5s0`` not); KeyError if none."""
    base = name
    for m in REGISTRY.values():
        if m.inputs == "labels" and (base == m.name or (m.prefix and base.startswith(m.name))):
            return m
    raise KeyError(f"unknown label metric {name!r}")


def expand(config_names_: Iterable[str]) -> list[str]:
    """Stored metric names a config's ``metrics:`` asks for (requirements first), in order."""
    names = list(config_names_)
    known = config_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {list(known)}")
    out: list[str] = []
    for wanted in names:
        for m in label_free().values():
            if m.config_name != wanted:
                continue
            out.extend(r for r in (*m.requires, m.name) if r not in out)
    return out


def needs(name: str) -> set[str]:
    """The inputs a label-free metric reads, through its requirements (``clid`` → ``{"clean"}``)."""
    m = info(name)
    if m.inputs == "pool":
        return set().union(*(needs(r) for r in m.requires))
    return {m.inputs}


def with_inputs(config_names_: Iterable[str], *inputs: str) -> list[str]:
    """The metrics among :func:`expand` whose inputs are one of ``inputs``."""
    return [m for m in expand(config_names_) if REGISTRY[m].inputs in inputs]


def per_model(config_names_: Iterable[str]) -> list[str]:
    """The per-model (clean or augmented) metrics among :func:`expand`."""
    return with_inputs(config_names_, *PER_MODEL_INPUTS)


def pool_metrics(config_names_: Iterable[str]) -> list[str]:
    """The pool metrics a config asks for (``clid``, ``clid_family``)."""
    return with_inputs(config_names_, "pool")


def ensemble_metrics(config_names_: Iterable[str]) -> list[str]:
    """The seed-ensemble metrics a config asks for (``nc``)."""
    return with_inputs(config_names_, "ensemble")


def ensemble_metric() -> MetricInfo:
    """The seed-ensemble metric: the one registered with ``inputs="ensemble"`` (NC).

    SCORE computes it once per seed ensemble, with the per-sample reliability table whose column
    of the same name holds its per-sample values; its row name, settings and version come from
    here, so nothing else names it.
    """
    found = [m for m in REGISTRY.values() if m.inputs == "ensemble"]
    if len(found) != 1:
        raise RuntimeError(f"one ensemble metric is expected, {len(found)} are registered")
    return found[0]


def solo_value(name: str, values: Mapping[str, float]) -> float:
    """A pool metric's one-model value (its ``solo`` settings) from its terms' ``values``: what a
    Tune trial reports for CLID and the probe's ``clid_raw`` (``100·CL + ID``). ValueError for a
    metric with no one-model value; NaN when a term is missing or not finite."""
    import math

    import numpy as np

    entry = info(name)
    if entry.inputs != "pool" or entry.solo is None or entry.combine is None:
        raise ValueError(f"{name} has no one-model value")
    terms = [float(values.get(t, math.nan)) for t in entry.requires]
    if not all(math.isfinite(v) for v in terms):
        return math.nan
    return float(entry.combine(*[np.array([v]) for v in terms], **entry.solo)[0])


def directions() -> dict[str, int]:
    return {name: m.direction for name, m in label_free().items()}


def targets() -> dict[str, float]:
    return {name: m.target for name, m in label_free().items() if m.target is not None}


def tune_metrics() -> tuple[str, ...]:
    """Metrics a Tune trial can report: a Tune floor and higher is better, in registration order."""
    return tuple(n for n, m in label_free().items() if m.tune_floor is not None and m.direction > 0)


def few_label_scores() -> dict[str, Callable[..., Any]]:
    """The few-label transferability scores (``oracle.transferability``): name → ``fn(Z, y)``."""
    return {n: m.function for n, m in REGISTRY.items() if m.few_label and m.function is not None}


def tune_floors() -> dict[str, float]:
    return {name: m.tune_floor for name, m in REGISTRY.items() if m.tune_floor is not None}


def __getattr__(name: str) -> Any:
    # live views of the tables (a metric registered later is included)
    if name == "CONFIG_NAMES":
        return config_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
