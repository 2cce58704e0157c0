"""Classifier zoos in ``zoorank ask`` / ``zoorank label``: the models' own predictions on every pool
image, read from the logits their kept heads wrote beside the embeddings (manifest ``logit_dim``
> 0, a ``logits`` column in the clean-view shards, K columns in the dataset's class order).

When every model of the pool has them, the labels' maths is split in two:

* **which images to label**: CODA (:mod:`zoorank.metrics.active.coda`, the authors' settings) on the
  heads' predictions, the images of largest expected information gain (or, by ``--sampler``,
  uncertainty sampling's, ModelPicker's or uniform at random);
* **the pick and p(best | labels)**: the posterior of the heads' top-1 correctness on the labelled
  images (:func:`~zoorank.metrics.active.label_posterior.labelled_p_best`, the pool as the population),
  the same calibrated posterior as an embedding zoo's (:func:`head_evidence`). With every label of
  the pool it is each head's accuracy there, so the pick is the most accurate model (ties within
  0.5 pp shared). CODA's own score, a per-class mixture Σ_c π̂_c P(best on class c) in which a
  weak model that wins a few classes scores high, is not shown as p(best).

A zoo where some model has no head (or a head of another width) keeps the embedding kNN committee
of :mod:`zoorank.metrics.active.knn_committee`: one signal for the whole pool.

Reading is O(M · n · (d + K)) (the shards hold both columns).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.labels.pool import Pool
from zoorank.metrics import softmax
from zoorank.metrics.active.coda import coda_draw_labels, coda_next, coda_prior
from zoorank.metrics.active.knn_committee import LabelEvidence, random_batch
from zoorank.metrics.active.label_posterior import (
    STOP_WIDENING,
    labelled_p_best_widened,
    pick_change_probability,
)
from zoorank.metrics.active.model_selection import (
    model_picker_eig,
    model_picker_posterior,
    top1_votes,
    uncertainty_scores,
)

#: the samplers ``zoorank ask --sampler`` offers a classifier zoo, as ``round.json`` and the
#: console call them; whichever asks, the pick is :func:`head_evidence`'s.
SAMPLERS = {
    "coda": "CODA (the images of largest expected information gain, the heads' predictions)",
    "uncertainty": "uncertainty sampling (entropy of the heads' consensus)",
    "model_picker": "ModelPicker (expected entropy reduction of its P(best), the heads' votes)",
    "random": "random sampling",
}
#: the default sampler of a classifier zoo: CODA. ``zoorank ask``'s path (rounds of 20, the
#: authors' scale, the pick by p(best | labels)), the whole pool as the budget, against random
#: rounds with the same pick (pre-registered; benchmarks/results/coda_labels.md, sections 8, 8b):
#: on the UvA nets 49.0 labels to a pick within 0.5 pp against 329.0 (20 seeds); on the shift
#: benchmark's median domain (4 strong and 27 weak nets) 610.0 against 561.0 (20 seeds, not
#: better), its pick misled by CODA's first rounds (29.2 pp regret after 20 labels, random 6.3).
DEFAULT_SAMPLER = "coda"
#: the default sampler's name.
METHOD = SAMPLERS[DEFAULT_SAMPLER]
#: what p(best | labels) reads on a classifier zoo (console, ``round.json``, ``decision.json``).
POSTERIOR = "the heads' top-1 accuracy on the labelled images (paired posterior)"
#: simulated rounds behind the probability that the next round changes the pick.
CHANGE_DRAWS = 16


def head_predictions(config: RunConfig, pool: Pool, context: RunContext | None = None
                     ) -> np.ndarray | None:
    """(M, n, K) softmax of every pool model's stored logits on the pool's samples (rows aligned
    with ``pool.sample_id``), or None unless every model has K = ``len(pool.classes)`` logits."""
    store = RunContext.of(config if context is None else context).store
    clean = config.clean_view.name
    manifest = store.read_manifest()
    k = len(pool.classes)
    rows = manifest[(manifest["dataset"] == pool.dataset) & (manifest["view"] == clean)]
    dims = rows.set_index("model_id")["logit_dim"].reindex(pool.model_ids)
    if dims.isna().any() or not (dims.astype(int) == k).all():
        return None
    out = np.empty((len(pool.model_ids), len(pool.sample_id), k))
    for j, m in enumerate(pool.model_ids):
        emb = store.read_embeddings(pool.dataset, clean, m)
        if emb.logits is None:
            return None
        keep = emb.view_index == 0
        pos = pd.Series(np.arange(int(keep.sum())), index=emb.sample_id[keep])
        out[j] = softmax(emb.logits[keep][pos.loc[pool.sample_id].to_numpy()])
    return out


def with_head_predictions(config: RunConfig, pool: Pool, context: RunContext | None = None) -> Pool:
    """``pool`` with ``predictions`` set when it is a classifier zoo (:func:`head_predictions`)."""
    return dataclasses.replace(pool, predictions=head_predictions(config, pool, context))


def head_evidence(pool: Pool, seed: int = 0) -> LabelEvidence:
    """:class:`LabelEvidence` of a classifier zoo: ``p_best`` is p(best | labels),
    :func:`~zoorank.metrics.active.label_posterior.labelled_p_best` of the heads' top-1 correctness on
    the labelled images (the pool as the population), and ``p_best_stop`` the same posterior
    widened by :data:`~zoorank.metrics.active.label_posterior.STOP_WIDENING` for the stopping rule;
    ``accuracy``: each head's top-1 accuracy on the labelled images; ``predictions``: the heads'
    top-1 (M × n). Without labels, ``p_best`` is the label-free p(best) (``pool.prior``), the
    accuracy NaN and ``p_best_stop`` None. Cost O(M · n · K) + O(M³ + resamples · M²)."""
    votes = top1_votes(pool.predictions)
    if not len(pool.codes):
        return LabelEvidence(np.asarray(pool.prior, dtype=np.float64),
                             np.full(len(votes), np.nan), 0, votes)
    correct = _correct(votes, pool.labelled, pool.codes)
    p_best, p_stop = labelled_p_best_widened(correct, (1.0, STOP_WIDENING), seed=seed,
                                             population=len(pool.sample_id))
    return LabelEvidence(p_best, correct.mean(axis=0), len(pool.codes), votes, p_stop)


def _correct(votes: np.ndarray, at: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(L, M) 0/1: whether each head's top-1 is the label of each labelled image."""
    return (votes[:, at] == np.asarray(codes)[None, :]).T.astype(np.float64)


def coda_batch(pool: Pool, excluded: np.ndarray, k: int, seed: int) -> np.ndarray:
    """The ``k`` pool rows CODA asks next (:func:`zoorank.metrics.active.coda.coda_next`, its default
    settings: the authors')."""
    return coda_next(pool.predictions, pool.labelled, pool.codes, excluded=excluded, k=k,
                     seed=seed)


def head_batch(pool: Pool, excluded: np.ndarray, k: int, seed: int,
               sampler: str = DEFAULT_SAMPLER) -> np.ndarray:
    """The ``k`` pool rows (sorted) the ``sampler`` of :data:`SAMPLERS` asks next, none
    ``excluded``: CODA's greedy batch (:func:`coda_batch`); uncertainty's ``k`` free rows of
    largest consensus entropy; ModelPicker's ``k`` free rows of largest expected entropy
    reduction under its posterior given the labels; random's ``k`` free rows drawn uniformly
    (:func:`zoorank.metrics.active.knn_committee.random_batch`). Ties: a seeded shuffle."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler: {sampler!r} is none of {sorted(SAMPLERS)}")
    if sampler == "coda":
        return coda_batch(pool, excluded, k, seed)
    if sampler == "random":
        return random_batch(excluded, k, seed)
    P = pool.predictions
    free = np.flatnonzero(~np.asarray(excluded, dtype=bool))
    if sampler == "uncertainty":
        score = uncertainty_scores(P)[free]
    else:
        votes = P.argmax(axis=2)
        post = model_picker_posterior(votes, pool.labelled, pool.codes)
        score = model_picker_eig(votes, post, free, P.shape[2])
    order = np.lexsort((np.random.default_rng(seed).permutation(len(free)), -score))
    return np.sort(free[order[:int(k)]])


def head_change(pool: Pool, ev: LabelEvidence, batch: np.ndarray, seed: int) -> float:
    """P(labelling ``batch`` changes the pick): the batch's labels drawn :data:`CHANGE_DRAWS`
    times from CODA's class estimate given the labels so far
    (:func:`~zoorank.metrics.active.coda.coda_draw_labels`), the pick recomputed from the heads'
    correctness (:func:`~zoorank.metrics.active.label_posterior.pick_change_probability`). NaN for an
    empty batch."""
    batch = np.asarray(batch, dtype=np.int64)
    if not len(batch):
        return float("nan")
    prior = coda_prior(pool.predictions)
    drawn = coda_draw_labels(prior, pool.labelled, pool.codes, batch, CHANGE_DRAWS, seed)
    votes = prior.votes[:, batch]  # (M, B)
    batch_correct = (votes[None] == drawn[:, None, :]).transpose(0, 2, 1).astype(np.float64)
    return pick_change_probability(_correct(prior.votes, pool.labelled, pool.codes),
                                   batch_correct, int(np.argmax(ev.p_best)),
                                   population=len(pool.sample_id), seed=seed)
