"""The next step a decision recommends: ask for labels, ``zoorank ask CONFIG --budget N``, with N
the labels that settled the pick in the project's own measurements.

One small table of measured figures (:data:`LABELS_TO_SETTLE`), one entry per kind of zoo; each
figure names the results file it was taken from. A new measurement changes the table, nothing else.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: the placeholder for the run config's path in a command, where the path is not known (a config
#: built in Python, or a stage called directly rather than through ``zoorank CMD CONFIG`` or
#: :func:`zoorank.run` on a file).
CONFIG = "CONFIG"

#: the run config's path as the user wrote it, set by the commands that read a config file
#: (:func:`config_path`). Never part of a stage's fingerprint: the same config read through
#: another path is the same run.
_CONFIG_PATH: ContextVar[str | None] = ContextVar("zoorank_config_path", default=None)


@contextmanager
def config_path(path: str | os.PathLike | None) -> Iterator[None]:
    """Within it, the next step names ``path`` (the config file as the user typed it, relative
    to the working directory or absolute) instead of :data:`CONFIG`: in ``decision.json`` and on
    the console. ``None`` leaves the path unknown."""
    token = _CONFIG_PATH.set(None if path is None else os.fspath(path))
    try:
        yield
    finally:
        _CONFIG_PATH.reset(token)


def current_config() -> str | None:
    """The config path set by :func:`config_path`, or None."""
    return _CONFIG_PATH.get()


def config_shown() -> str:
    """The running command's config path for a command line a message suggests (quoted for a
    POSIX shell), or :data:`CONFIG` when it is not known."""
    config = current_config()
    return CONFIG if config is None else shlex.quote(config)


def ask_command(config: str | None, budget: int) -> str:
    """``zoorank ask CONFIG --budget N``, with the path quoted for a POSIX shell (:data:`CONFIG`
    when ``config`` is None)."""
    return f"zoorank ask {CONFIG if config is None else shlex.quote(config)} --budget {budget}"


#: kind of zoo → the measured label budget that settles the pick and what it rests on.
LABELS_TO_SETTLE: dict[str, dict[str, Any]] = {
    # benchmarks/results/head_stopping.md, "Stops", row "all zoos", rule b (the product's rule):
    # `zoorank ask` asking with CODA in rounds of 20 from the product's candidates, 6 classifier
    # zoos (UvA CIFAR-10 and 5 shifted CIFAR-10 domains of the shift benchmark), 58 runs: the
    # stopping rule fired in 19, after 209 labels on average, and 18 of the 19 picks were within
    # 0.5 pp of the best. 209 rounded up to whole rounds of 20: 220.
    "classifier": {
        "budget": 220,
        "labels_measured": 209,
        "source": "benchmarks/results/head_stopping.md",
        "basis": ("On 6 classifier zoos (58 runs of `zoorank ask` in rounds of 20), the stopping "
                  "rule fired in 19 runs after 209 labels on average, and 18 of those 19 picks "
                  "were within 0.5 pp of the most accurate model; in the other 39 runs it had "
                  "not fired by 300 labels."),
        "short": "measured: settled after 209 labels on average, 18 of 19 right",
    },
    # benchmarks/results/active_labels.md, per zoo "Share of runs whose pick is within 0.5 pp of
    # the best after n labels", sampler `uncertainty` (`zoorank ask`'s default for embedding
    # zoos), n = 200, the largest budget measured: demo 1.00, digits 0.95, cifar10 0.00, uva 0.70,
    # mean 0.66 over 4 zoos × 20 seeds ("All zoos together": 0.66). The stopping rule fired in 1
    # of those 80 runs.
    "encoder": {
        "budget": 200,
        "labels_measured": 200,
        "source": "benchmarks/results/active_labels.md",
        "basis": ("On 4 embedding zoos (20 runs each of `zoorank ask`'s uncertainty sampling), "
                  "after 200 labels the pick was within 0.5 pp of the most accurate model in 66% "
                  "of runs (per zoo 100%, 95%, 70% and 0%); on near-tied zoos the budget, not the "
                  "stopping rule, ends the labelling."),
        "short": "measured: within 0.5 pp of the best in 66% of runs",
    },
}


def zoo_kind(signal: str | None) -> str:
    """``classifier`` when the pick is ranked by its head (the board's ``signal`` holds
    ``head``), else ``encoder``."""
    return "classifier" if "head" in str(signal or "").split(",") else "encoder"


def next_step(kind: str, labelled: int = 0, config: str | None = None,
              unlabelled: int | None = None, dataset: str | None = None) -> dict[str, Any]:
    """``{command, budget, basis, kind, source, config, unlabelled, ...}``: ask for the measured
    budget of ``kind`` (:data:`LABELS_TO_SETTLE`), less the ``labelled`` images already given
    back, and at most the ``unlabelled`` images of the pick's ``dataset`` left to ask for (None:
    not known); with the budget spent, or no image left without a label, ``command`` and
    ``budget`` are None and ``basis`` says why. ``config``: the run config's path the command
    names (default: :func:`current_config`; None when unknown, and the command then says
    :data:`CONFIG`)."""
    entry = LABELS_TO_SETTLE[kind]
    measured = int(entry["budget"])
    left = measured - max(0, int(labelled))
    config = current_config() if config is None else config
    out = {"kind": kind, "source": entry["source"], "measured_budget": measured,
           "labelled": int(labelled), "config": config,
           "unlabelled": None if unlabelled is None else max(0, int(unlabelled))}
    if unlabelled is not None and unlabelled <= 0:
        where = f"of {dataset} " if dataset else ""
        return {**out, "command": None, "budget": None,
                "short": f"every image {where}already has a label",
                "basis": (f"Every image {where}already has a label, so there is nothing to ask "
                          "for: the label oracle (`oracle:` in the config) measures the models on "
                          "them, and the report compares the label-free ranking with it.")}
    small = unlabelled is not None and 0 < int(unlabelled) < left
    if unlabelled is not None:
        left = min(left, int(unlabelled))
    if left <= 0:
        return {**out, "command": None, "budget": None, "short": "the measured budget is spent",
                "basis": (f"{labelled} labels given back, at least the {measured} that settled "
                          f"the pick on the measured zoos; more labels are unlikely to change "
                          f"the few-label pick. {entry['basis']}")}
    pool = (f"The pool is small: only {left} image(s) {f'of {dataset} ' if dataset else ''}"
            f"have no label, fewer than the {measured} measured to settle the pick, so the "
            "budget is all of them. ") if small else ""
    return {**out, "command": ask_command(config, left), "budget": left,
            "short": f"every unlabelled image: {left} of the measured {measured}" if small
            else str(entry["short"]),
            "basis": pool + (f"{labelled} labels already given back; " if labelled else "")
            + str(entry["basis"])}


def labelled_on(few_label: Mapping[str, Any] | None, dataset: str | None) -> int:
    """Labels already given back on ``dataset`` (the few-label pick's ``labels``), 0 without."""
    entry = (few_label or {}).get(dataset) if dataset else None
    try:
        return int((entry or {}).get("labels") or 0)
    except (TypeError, ValueError):
        return 0
