"""Classifier zoos in ``zoorank ask`` / ``zoorank label``: the models' own predictions on every pool
image, read from the logits their kept heads wrote beside the embeddings (manifest ``logit_dim``
> 0, a ``logits`` column in the clean-view shards, K columns in the dataset's class order).

When every model of the pool has them, the labels' maths is CODA's
(:mod:`zoorank.metrics.coda`): ``zoorank ask`` asks the images of largest expected
information gain on P(best) (or, by ``--sampler``, uncertainty sampling's, ModelPicker's or uniform
at random), and
p(best | labels) is CODA's P(best); the stopping rule reads issue 30's posterior of the heads'
correctness on the labels instead (:func:`coda_evidence`). A zoo where some model has no
head (or a head of another width) keeps the embedding kNN committee of
:mod:`zoorank.metrics.active`: one signal for the whole pool.

Reading is O(M · n · (d + K)) (the shards hold both columns).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.labels.pool import Pool
from zoorank.metrics.active import LabelEvidence, random_batch
from zoorank.metrics.coda import CodaPrior, coda_belief, coda_change_probability, coda_next, coda_prior
from zoorank.metrics.label_posterior import STOP_WIDENING, labelled_p_best
from zoorank.metrics.model_selection import model_picker_eig, model_picker_posterior, uncertainty_scores

#: the samplers ``zoorank ask --sampler`` offers a classifier zoo, as ``round.json`` and the
#: console call them.
SAMPLERS = {
    "coda": "CODA (expected information gain on P(best), the heads' predictions)",
    "uncertainty": "uncertainty sampling (entropy of the heads' consensus)",
    "model_picker": "ModelPicker (expected entropy reduction of its P(best), the heads' votes)",
    "random": "random sampling (CODA's P(best) on the labels)",
}
#: the default sampler of a classifier zoo: CODA, far fewer labels than random to a near-best
#: pick on the UvA nets (89.8 against 148.9) and on the shift benchmark's median domain with the
#: pool as the budget (178.6 against 463.8; within 100 labels +4.6 ± 3.9, not significant), where
#: the baselines need more than random (the development zoo favoured the baselines; neither
#: random asking with CODA's pick nor bias-corrected CODA beat it on both held-out sets, nor did a
#: pre-registered exploration share: benchmarks/results/coda_labels.md, sections 3, 5, 6–6c).
DEFAULT_SAMPLER = "coda"
#: the default sampler's name.
METHOD = SAMPLERS[DEFAULT_SAMPLER]


def _softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


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
        out[j] = _softmax(emb.logits[keep][pos.loc[pool.sample_id].to_numpy()])
    return out


def with_head_predictions(config: RunConfig, pool: Pool, context: RunContext | None = None) -> Pool:
    """``pool`` with ``predictions`` set when it is a classifier zoo (:func:`head_predictions`)."""
    return dataclasses.replace(pool, predictions=head_predictions(config, pool, context))


def _prior(pool: Pool) -> CodaPrior:
    return coda_prior(pool.predictions)


def coda_evidence(pool: Pool) -> LabelEvidence:
    """:class:`LabelEvidence` of a classifier zoo: CODA's P(best) given the pool's labels (its
    consensus prior before any label), the heads' top-1 ``accuracy`` on the labelled images (NaN
    without labels), their top-1 ``predictions`` (M × n) and the stopping rule's ``p_best_stop``:
    :func:`~zoorank.metrics.label_posterior.labelled_p_best` of the heads' top-1 correctness on
    the labelled images (the pool as the population), widened by
    :data:`~zoorank.metrics.label_posterior.STOP_WIDENING` (None without labels). CODA's P(best)
    of the leader stays small on zoos of many near-tied classifiers whatever the labels (0.15
    with all 1,000 labels of the shift benchmark's motion_blur zoo), so the rule reads the
    correctness posterior; its stops with CODA asking: ``benchmarks/results/head_stopping.md``."""
    prior = _prior(pool)
    p_best, _ = coda_belief(prior, pool.labelled, pool.codes)
    votes = prior.votes
    if not len(pool.codes):
        return LabelEvidence(p_best, np.full(len(votes), np.nan), 0, votes)
    correct = (votes[:, pool.labelled] == pool.codes[None, :]).T.astype(np.float64)  # (L, M)
    p_stop = labelled_p_best(correct, population=len(pool.sample_id), widen=STOP_WIDENING)
    return LabelEvidence(p_best, correct.mean(axis=0), len(pool.codes), votes, p_stop)


def coda_batch(pool: Pool, excluded: np.ndarray, k: int, seed: int) -> np.ndarray:
    """The ``k`` pool rows CODA asks next (:func:`zoorank.metrics.coda.coda_next`)."""
    return coda_next(pool.predictions, pool.labelled, pool.codes, excluded=excluded, k=k,
                     seed=seed)


def head_batch(pool: Pool, excluded: np.ndarray, k: int, seed: int,
               sampler: str = DEFAULT_SAMPLER) -> np.ndarray:
    """The ``k`` pool rows (sorted) the ``sampler`` of :data:`SAMPLERS` asks next, none
    ``excluded``: CODA's greedy batch (:func:`coda_batch`); uncertainty's ``k`` free rows of
    largest consensus entropy; ModelPicker's ``k`` free rows of largest expected entropy
    reduction under its posterior given the labels; random's ``k`` free rows drawn uniformly
    (:func:`zoorank.metrics.active.random_batch`). Ties: a seeded shuffle."""
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


def coda_change(pool: Pool, batch: np.ndarray, seed: int) -> float:
    """P(labelling ``batch`` changes CODA's leader) (:func:`coda_change_probability`)."""
    return coda_change_probability(_prior(pool), pool.labelled, pool.codes, batch, seed=seed)
