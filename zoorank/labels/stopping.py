"""The stopping rule, as data and as console lines: the leader's p(best) given the labels so far,
how the top set narrowed, the labels spent, and whether another round is likely to change the
decision. Default stop: the leader's p(best) ≥ :data:`TARGET` allowing for the rule's repeated
looks, or the label budget spent.

p(best) here is :func:`zoorank.metrics.active.label_posterior.labelled_p_best` (issue 30): a posterior
of the models' paired accuracies on the pool in which models within 0.5 pp of the best share
"best". The printed p(best) is the calibrated one; the rule, which looks after every round, fires
when the leader's p(best) under the same posterior with its covariance widened by
:data:`~zoorank.metrics.active.label_posterior.STOP_WIDENING` clears the target
(:meth:`~zoorank.metrics.active.knn_committee.LabelEvidence.stop_p_best`), so that near-tied models do
not stop
it on a chance lead. ``benchmarks/science/calibration.py`` measures how often it fires and how often its
pick is then within 0.5 pp of the best (``benchmarks/results/calibration.md``).

A classifier zoo reads the same posterior on its heads' top-1 correctness on the labelled images
(:func:`~zoorank.labels.head_predictions.head_evidence`): it makes the pick, prints p(best |
labels) and stops the rule; CODA only chooses the images. Measured with CODA asking (its earlier
scale, the stop read at CODA's leader), on the UvA nets and five shift domains
(``benchmarks/results/head_stopping.md``, 58 runs to 300 labels): 19 stops, 18 right.

:func:`stopping_rule` returns plain data (``title``, ``sentences``, ``rows`` as a list of dicts,
``stop``) for the console and the HTML report alike.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from zoorank.errors import InputError
from zoorank.labels.head_predictions import DEFAULT_SAMPLER as DEFAULT_HEAD_SAMPLER
from zoorank.labels.head_predictions import POSTERIOR as HEAD_POSTERIOR
from zoorank.labels.head_predictions import SAMPLERS as HEAD_SAMPLERS
from zoorank.labels.head_predictions import head_batch, head_change, head_evidence
from zoorank.labels.pool import Pool
from zoorank.metrics.active.knn_committee import (
    LabelEvidence,
    change_probability,
    label_evidence,
    next_batch,
    random_batch,
    uncertainty_batch,
)
from zoorank.metrics.active.label_posterior import probability_mass_set

#: the leader's p(best) at which labelling stops by default.
TARGET = 0.9
#: how ``zoorank ask --sampler`` chooses the images of an embedding zoo (a classifier zoo uses
#: CODA): ``committee`` (:func:`zoorank.metrics.active.knn_committee.next_batch`), ``uncertainty``
#: (:func:`~zoorank.metrics.active.knn_committee.uncertainty_batch`) or ``random``
#: (:func:`~zoorank.metrics.active.knn_committee.random_batch`).
SAMPLERS = ("committee", "uncertainty", "random")
#: the default of :data:`SAMPLERS`: uncertainty sampling, whose pick had the lowest mean regret
#: over 20–200 labels on the four real embedding zoos of ``benchmarks/results/active_labels.md``
#: (1.46 pp; paired against the committee −0.02 ± 0.07 pp, a tie; random 1.62 pp), and the
#: largest share of runs within 0.5 pp at 200 labels.
DEFAULT_SAMPLER = "uncertainty"
#: p(best) mass of the top set given the labels.
TOP_MASS = 0.95
#: what p(best | labels) reads on an embedding zoo (console, ``round.json``, ``decision.json``).
EMBEDDING_POSTERIOR = "each model's few-label kNN accuracy on the labelled images (paired posterior)"


def evidence(pool: Pool, seed: int = 0) -> LabelEvidence:
    """:func:`zoorank.metrics.active.knn_committee.label_evidence` of the pool's labels; for a classifier zoo
    (``pool.predictions``), :func:`zoorank.labels.head_predictions.head_evidence`."""
    if pool.predictions is not None:
        return head_evidence(pool, seed)
    return label_evidence(pool.Zs, pool.labelled, pool.codes, len(pool.classes), pool.prior,
                          seed=seed)


def embedding_batch(pool: Pool, ev: LabelEvidence, excluded: np.ndarray, k: int, seed: int,
                    sampler: str = DEFAULT_SAMPLER) -> np.ndarray:
    """The ``k`` pool rows (sorted positions, none ``excluded``) that ``sampler`` (one of
    :data:`SAMPLERS`) asks next on the pool's embeddings."""
    if sampler == "committee":
        return next_batch(pool.Zs, ev, excluded, k, seed)
    if sampler == "uncertainty":
        return uncertainty_batch(pool.Zs, pool.labelled, pool.codes, len(pool.classes), excluded,
                                 k, seed)
    if sampler == "random":
        return random_batch(excluded, k, seed)
    raise InputError(f"--sampler: {sampler!r} is not one of {', '.join(SAMPLERS)}")


def resolve_sampler(pool: Pool, sampler: str | None) -> str:
    """``sampler`` checked against the pool's kind of zoo, or that kind's default when None: a
    classifier zoo (every model's head kept, ``pool.predictions``) samples on the heads'
    predictions (:data:`HEAD_SAMPLERS`, default CODA), an embedding zoo on the embeddings
    (:data:`SAMPLERS`, default uncertainty). A sampler of the other kind is an input error."""
    heads = pool.predictions is not None
    known, default = (HEAD_SAMPLERS, DEFAULT_HEAD_SAMPLER) if heads else (SAMPLERS, DEFAULT_SAMPLER)
    if sampler is None:
        return default
    if sampler not in known:
        kind = "a classifier zoo (heads kept)" if heads else "an embedding zoo"
        raise InputError(f"--sampler: {sampler!r} does not apply to {kind}; use one of "
                         f"{', '.join(known)}")
    return sampler


def stopping_rule(pool: Pool, ev: LabelEvidence, *, round_size: int, seed: int = 0,
                  previous: LabelEvidence | None = None, target: float = TARGET,
                  max_labels: int | None = None, excluded: np.ndarray | None = None,
                  sampler: str | None = None) -> dict[str, Any]:
    """The stopping rule of one round (see the module docstring). ``previous``: the evidence
    before the last labels came back; ``excluded``: pool rows that cannot be asked (labelled or
    asked before); ``round_size``: the labels a next round would ask for, chosen by ``sampler``
    (None: the zoo kind's default, :func:`resolve_sampler`)."""
    sampler = resolve_sampler(pool, sampler)
    ids = pool.model_ids
    leader = int(np.argmax(ev.p_best))
    p_lead = float(ev.p_best[leader])
    top = [ids[i] for i in probability_mass_set(ev.p_best, TOP_MASS)]
    spent = int(ev.n_labels)
    sentences = []
    heads = pool.predictions is not None
    if heads and spent == 0:
        sentences.append(f"No label yet on {pool.dataset}: the label-free p(best) stands: "
                         f"{ids[leader]} leads with {p_lead:.2f} (target {target:.2f}). Labels "
                         "will weigh the heads by their top-1 accuracy on the labelled images.")
    elif heads:
        sentences.append(f"Given {spent} label(s) on {pool.dataset}, {ids[leader]} is the best "
                         f"model with p(best | labels) = {p_lead:.2f} (target {target:.2f}), from "
                         f"the heads' top-1 accuracy on the labelled images; its head is right on "
                         f"{ev.accuracy[leader]:.2f} of them.")
    elif ev.predictions is None:
        sentences.append(f"{spent} label(s) on {pool.dataset}: too few (two classes needed) to "
                         f"weigh the models; the label-free p(best) stands: {ids[leader]} leads "
                         f"with {p_lead:.2f}.")
    else:
        sentences.append(f"Given {spent} label(s) on {pool.dataset}, {ids[leader]} is the best "
                         f"model with p(best) = {p_lead:.2f} (target {target:.2f}); its few-label "
                         f"kNN accuracy is {ev.accuracy[leader]:.2f}.")
    steps = [f"{len(pool.free_top_set)} without labels" if pool.free_top_set
             else "none without labels (no leaderboard yet)"]
    if previous is not None and previous.predictions is not None:
        steps.append(f"{len(probability_mass_set(previous.p_best, TOP_MASS))} after "
                     f"{previous.n_labels} labels")
    steps.append(f"{len(top)} now")
    sentences.append(f"Top set ({TOP_MASS:.0%} of p(best)): " + " → ".join(steps) + ": "
                     + ", ".join(top[:8]) + (" ..." if len(top) > 8 else "") + ".")
    budget_left = None if max_labels is None else max(0, max_labels - spent)
    change = math.nan
    p_stop = ev.stop_p_best()
    looks = "" if p_stop == p_lead else f" ({p_stop:.2f} allowing for the repeated looks)"
    if p_stop >= target and ev.predictions is not None and (spent or not heads):
        stop, verdict = True, f"Stop: the leader's p(best) {p_lead:.2f}{looks} ≥ {target:.2f}."
    elif budget_left == 0:
        stop, verdict = True, f"Stop: the label budget ({max_labels}) is spent."
    elif spent >= len(pool.sample_id):
        stop, verdict = True, f"Stop: every image of the pool ({spent}) is labelled."
    else:
        stop = False
        k = round_size if budget_left is None else min(round_size, budget_left)
        mask = np.zeros(len(pool.sample_id), bool) if excluded is None else excluded.copy()
        mask[pool.labelled] = True
        if heads:
            batch = head_batch(pool, mask, k, seed, sampler)
            change = head_change(pool, ev, batch, seed)
        else:
            batch = embedding_batch(pool, ev, mask, k, seed, sampler)
            change = change_probability(pool.Zs, pool.labelled, pool.codes, len(pool.classes),
                                        ev, batch, seed=seed)
        if math.isnan(change):
            verdict = (f"Go on: label a first round ({k} images) before the models can be "
                       "weighed.")
        else:
            likely = "likely" if change >= 0.5 else "possible" if change >= 0.1 else "unlikely"
            verdict = (f"Go on: another round of {k} labels is {likely} to change the leader "
                       f"(in {change:.0%} of simulated rounds it does)"
                       + (f"; allowing for the repeated looks the leader's p(best) is "
                          f"{p_stop:.2f}, below {target:.2f}." if p_lead >= target else "."))
    sentences.append(verdict)
    weighed = bool(spent) and (heads or ev.predictions is not None)  # else the label-free p
    rows = [{"model_id": ids[i],
             "p_best_label_free": float(pool.prior[i]),
             "p_best_given_labels": float(ev.p_best[i]),
             "few_label_accuracy": None if math.isnan(ev.accuracy[i]) else float(ev.accuracy[i]),
             "in_top_set": ids[i] in top}
            for i in np.argsort(-ev.p_best, kind="stable")[:max(len(top), 5)]]
    return {"title": f"Labels on {pool.dataset}: when to stop", "sentences": sentences,
            "rows": rows, "stop": stop, "leader": ids[leader], "p_best": p_lead,
            "p_best_stop": p_stop,
            "labels_spent": spent, "top_set": top, "change_probability": change,
            "target": target, "max_labels": max_labels,
            "leader_accuracy": None if not weighed else float(ev.accuracy[leader]),
            "posterior": ((HEAD_POSTERIOR if heads else EMBEDDING_POSTERIOR) if weighed
                          else "label-free p(best)"),
            "sampler": sampler,
            "signal": "heads" if heads else "embeddings (kNN committee)"}


def few_label_pick(rule: dict[str, Any]) -> dict[str, Any]:
    """The few-label pick of a :func:`stopping_rule` as ``round.json`` and ``decision.json``
    (:func:`zoorank.decide.verdict.update_few_label`) record it: the leader, its p(best | labels),
    the labels it rests on, its accuracy on them, the posterior's name, and the rule's verdict."""
    return {"model_id": rule["leader"], "p_best": rule["p_best"], "labels": rule["labels_spent"],
            "accuracy_on_labels": rule["leader_accuracy"], "posterior": rule["posterior"],
            "p_best_stop": rule["p_best_stop"], "stop": bool(rule["stop"]),
            "target": rule["target"], "top_set": list(rule["top_set"]),
            "sampler": rule["sampler"]}


def console_lines(rule: dict[str, Any]) -> list[str]:
    """The stopping rule as console lines (the title, its sentences, the top rows)."""
    lines = [rule["title"], *(f"  {s}" for s in rule["sentences"])]
    acc_name = "head acc" if rule.get("signal", "").startswith("heads") else "kNN acc"
    for r in rule["rows"]:
        acc = "—" if r["few_label_accuracy"] is None else f"{r['few_label_accuracy']:.2f}"
        lines.append(f"    {r['model_id']:<24} p(best | labels) {r['p_best_given_labels']:.2f}  "
                     f"label-free {r['p_best_label_free']:.2f}  {acc_name} {acc}")
    return lines


def summary(context: Any, dataset: str | None = None, round_size: int = 40,
            max_labels: int | None = None) -> dict[str, Any] | None:
    """The stopping rule of ``dataset`` (default: the config's first) as it stands in the store,
    for the report: None when no label was given back (``<store>/labels/`` absent or empty for
    it). Reads every model's clean embeddings (O(M · n · d)) and simulates one round.
    ``context``: the command's :class:`~zoorank.catalog.context.RunContext` (or a config)."""
    from zoorank.catalog.context import RunContext
    from zoorank.labels.head_predictions import with_head_predictions
    from zoorank.labels.pool import load_pool, pick_dataset
    from zoorank.labels.table import read_labels

    context = RunContext.of(context)
    config = context.config
    name = pick_dataset(config, dataset)
    if read_labels(context.store, name).empty:
        return None
    pool = with_head_predictions(config, load_pool(config, name, context=context), context)
    return stopping_rule(pool, evidence(pool, config.seed), round_size=round_size,
                         seed=config.seed, max_labels=max_labels)
