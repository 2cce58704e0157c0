"""``zoorank ask`` / ``zoorank label`` on a classifier zoo: with every model's head kept (manifest
``logit_dim`` = K, ``logits`` in the clean shards), the round is CODA's choice on the heads'
predictions, and the pick and p(best | labels) come from the posterior of the heads' top-1
correctness on the labelled images.

The store is written without Ray, as ``labels_fixtures`` does: the first 300 scikit-learn digits
as PNGs (no label column; class names in the config), and three real classifiers — logistic
regressions trained on the other 1497 digits, on the pixels plus seeded Gaussian noise of σ 0, 6
and 12 — whose embeddings are their inputs and whose logits are their decision functions. The
truth (each head's accuracy on the 300) is computed here and never written where zoorank reads.
"""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from labels_fixtures import CLASSES, _png
from scipy import stats
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from zoorank.cli import main
from zoorank.metrics.active import coda
from zoorank.store import Store

N = 300
SIGMAS = {"clf-s0": 0.0, "clf-s6": 6.0, "clf-s12": 12.0}


def _classifiers() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """(inputs, logits) of each classifier on the first N digits, and their labels."""
    from threadpoolctl import threadpool_limits

    d = load_digits()
    X, y = d.data.astype(np.float64) / 16, d.target.astype(np.int64)
    inputs, logits = {}, {}
    for i, (model_id, sigma) in enumerate(SIGMAS.items()):
        Xn = X + sigma / 16 * np.random.default_rng(10 + i).normal(size=X.shape)
        with threadpool_limits(1):  # a 1497 × 64 fit: threads only contend
            clf = LogisticRegression(max_iter=500).fit(Xn[N:], y[N:])
        inputs[model_id], logits[model_id] = Xn[:N], clf.decision_function(Xn[:N])
    return inputs, logits, y[:N]


def _write_store(tmp_path, headless: tuple[str, ...] = ()):
    """The store (``headless`` models written without logits); (config path, store, truth,
    logits)."""
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import parse_config

    d = load_digits()
    data = str(tmp_path / "digits.parquet")
    pq.write_table(pa.table({"image": pa.array([_png(im) for im in d.images[:N]],
                                               type=pa.binary())}), data)
    cfg = {"store": str(tmp_path / "store"), "seed": 0,
           "datasets": [{"name": "digits", "source": "parquet", "path": data,
                         "image_column": "image", "limit": N, "classes": CLASSES}],
           "models": [{"id": m, "source": "python", "name": "fixtures:unused"} for m in SIGMAS],
           "metrics": ["rankme"], "oracle": {"knn": True, "linear_probe": False}}
    catalog = build_catalog(parse_config(cfg, "<heads fixture>"))
    store = Store(cfg["store"])
    ids = np.arange(N, dtype=np.int64)
    inputs, logits, truth = _classifiers()
    manifest = []
    for model_id in SIGMAS:
        store.write_shard("digits", "clean", model_id, 0, ids, np.zeros(N, np.int32),
                          inputs[model_id].astype(np.float32),
                          logits=None if model_id in headless
                          else logits[model_id].astype(np.float32))
        manifest.append({"dataset": "digits", "view": "clean", "model_id": model_id,
                         "fingerprint": catalog.entries[("digits", "clean", model_id)][0],
                         "status": "done", "error": None, "rows": N, "dim": 64,
                         "seconds": 0.1, "bad_images": 0,
                         "logit_dim": 0 if model_id in headless else len(CLASSES)})
    store.update_manifest(manifest)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, tmp_path / "store", truth, logits


@pytest.fixture
def classifier_store(tmp_path):
    return _write_store(tmp_path)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _loop_model_picker_gains(P: np.ndarray) -> np.ndarray:
    """ModelPicker's first expected entropy reductions, written with loops: uniform posterior
    over the models, a label c (as likely as the share of models voting c) multiplies the
    weight of the models voting c by γ = 2."""
    votes = P.argmax(axis=2)
    m = len(votes)
    gains = []
    for i in range(votes.shape[1]):
        expected = 0.0
        for c in set(votes[:, i].tolist()):
            w = np.array([2.0 if votes[j, i] == c else 1.0 for j in range(m)])
            expected += (votes[:, i] == c).mean() * stats.entropy(w / w.sum())
        gains.append(np.log(m) - expected)
    return np.asarray(gains)


def _top_k(score: np.ndarray, asked: list[int]) -> bool:
    """Whether ``asked`` are images of the largest scores (ties broken anyhow)."""
    rest = np.setdiff1d(np.arange(len(score)), asked)
    return len(asked) == len(set(asked)) and score[asked].min() >= score[rest].max() - 1e-12


@pytest.mark.parametrize("sampler", ["default", "uncertainty", "model_picker", "random"])
def test_ask_picks_with_each_sampler(classifier_store, sampler):
    from zoorank.labels.head_predictions import DEFAULT_SAMPLER, SAMPLERS

    path, store, truth, logits = classifier_store
    P = np.stack([_softmax(logits[m].astype(np.float32).astype(np.float64)) for m in SIGMAS])
    args = ["ask", str(path), "--budget", "12"]
    if sampler != "default":
        args += ["--sampler", sampler]
    assert main(args) == 0
    used = DEFAULT_SAMPLER if sampler == "default" else sampler
    meta = json.loads((store / "asks" / "1" / "round.json").read_text())
    assert meta["method"] == SAMPLERS[used]
    with open(store / "asks" / "1" / "to_label.csv") as f:
        asked = sorted(int(r["sample_id"]) for r in csv.DictReader(f))
    if used == "uncertainty":  # 12 images of largest consensus entropy
        assert _top_k(stats.entropy(P.mean(axis=0), axis=1), asked)
    elif used == "model_picker":
        gains = _loop_model_picker_gains(P)
        assert _top_k(gains, asked) and gains[asked].min() > 0
    elif used == "random":  # a uniform draw of 12 of the pool, seeded by config seed 0 + round 1
        assert asked == sorted(np.random.default_rng(1).choice(P.shape[1], 12, replace=False).tolist())
    else:
        assert asked == coda.coda_next(P, k=12, seed=1).tolist()


def test_ask_picks_by_coda_and_label_reports_the_heads_correctness_posterior(classifier_store,
                                                                              tmp_path, capsys):
    from zoorank.metrics.active.label_posterior import labelled_p_best

    path, store, truth, logits = classifier_store
    P = np.stack([_softmax(logits[m].astype(np.float32).astype(np.float64)) for m in SIGMAS])
    accuracy = (P.argmax(axis=2) == truth[None]).mean(axis=1)
    assert accuracy[0] > accuracy[1] > accuracy[2]  # graded by construction

    assert main(["ask", str(path), "--budget", "12", "--sampler", "coda"]) == 0
    out = capsys.readouterr().out
    assert "CODA" in out and "No label yet on digits" in out
    with open(store / "asks" / "1" / "to_label.csv") as f:
        asked = [int(r["sample_id"]) for r in csv.DictReader(f)]
    meta = json.loads((store / "asks" / "1" / "round.json").read_text())
    assert meta["method"].startswith("CODA")
    # without labels the label-free p(best) stands (uniform: no leaderboard), and round.json says so
    assert meta["pick"]["labels"] == 0 and meta["pick"]["posterior"] == "label-free p(best)"
    assert meta["pick"]["p_best"] == pytest.approx(1 / 3)
    # the same choice computed here from the logits (config seed 0 + round 1)
    assert asked == coda.coda_next(P, k=12, seed=1).tolist()
    votes = P.argmax(axis=2)[:, asked]
    assert not (votes == votes[:1]).all(axis=0).any()  # every asked image splits the heads

    answers = tmp_path / "answers.csv"
    with open(answers, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sample_id", "label", "source"])
        w.writerows([(s, CLASSES[truth[s]], "") for s in asked])
    assert main(["label", str(path), str(answers), "--no-rank"]) == 0
    out = capsys.readouterr().out
    at = np.asarray(asked)
    # the heads' correctness on the 12 labelled images, from the logits and the truth (here)
    correct = (votes == truth[at][None, :]).T.astype(np.float64)
    expected = labelled_p_best(correct, population=N)
    leader = int(np.argmax(expected))
    assert leader == 0  # the noiseless head, the most accurate
    match = re.search(r"Given 12 label\(s\) on digits, (\S+) is the best model with "
                      r"p\(best \| labels\) = ([0-9.]+)", out)
    assert match and match.group(1) == "clf-s0"
    assert float(match.group(2)) == pytest.approx(expected[leader], abs=0.005)
    acc_line = re.search(r"clf-s0 +p\(best \| labels\) ([0-9.]+) .* head acc ([0-9.]+)", out)
    assert acc_line and float(acc_line.group(1)) == pytest.approx(expected[leader], abs=0.005)
    assert float(acc_line.group(2)) == pytest.approx(correct[:, 0].mean(), abs=0.005)
    assert "CODA" not in out  # CODA chose the images; its own score is not printed


def test_a_zoo_with_a_headless_model_keeps_the_knn_committee(tmp_path, capsys):
    from zoorank.config.loading import load_config
    from zoorank.labels.head_predictions import head_predictions
    from zoorank.labels.pool import load_pool

    path, _, _, _ = _write_store(tmp_path, headless=("clf-s12",))
    assert head_predictions(load_config(str(path)), load_pool(load_config(str(path)))) is None
    assert main(["ask", str(path), "--budget", "5"]) == 0
    assert "cold start" in capsys.readouterr().out


def _hand_pool(votes: np.ndarray, truth: np.ndarray, labelled: np.ndarray):
    """A classifier zoo's pool built by hand: each head puts 0.8 on its vote (``votes``: M × n)
    of K = 3 classes, 0.1 on the others; ``labelled`` positions carry their ``truth``."""
    from zoorank.labels.pool import Pool

    m, n = votes.shape
    P = np.full((m, n, 3), 0.1)
    np.put_along_axis(P, votes[..., None], 0.8, axis=2)
    return Pool(dataset="hand", classes=("a", "b", "c"), sample_id=np.arange(n),
                source=[""] * n, model_ids=[f"h{i}" for i in range(m)],
                Zs=[np.zeros((n, 1), np.float32)] * m, labelled=labelled,
                codes=truth[labelled], prior=np.full(m, 1.0 / m), free_top_set=[],
                catalog=None, predictions=P)


def test_a_classifier_zoo_picks_and_stops_on_the_heads_correctness_posterior():
    # the pick, the printed p(best | labels) and the stop all read labelled_p_best of the heads'
    # top-1 correctness on the labels (the stop widened by STOP_WIDENING)
    from zoorank.labels.head_predictions import head_evidence
    from zoorank.labels.stopping import few_label_pick, stopping_rule
    from zoorank.metrics.active.label_posterior import STOP_WIDENING, labelled_p_best

    rng = np.random.default_rng(0)
    n = 400
    truth = rng.integers(0, 3, n)
    wrong = (truth + 1) % 3
    labelled = np.arange(0, n, 2)  # 200 labels
    # h0 right on every image; h1, h2 right on a seeded half each: after 200 labels h0 leads by
    # ~50 pp with a standard error of ~3.5 pp, so even the widened posterior is sure of it
    votes = np.stack([truth] + [np.where(rng.random(n) < 0.5, truth, wrong) for _ in range(2)])
    pool = _hand_pool(votes, truth, labelled)
    ev = head_evidence(pool)
    correct = (votes[:, labelled] == truth[labelled][None]).T.astype(np.float64)
    np.testing.assert_allclose(ev.p_best, labelled_p_best(correct, population=n))
    np.testing.assert_allclose(ev.p_best_stop,
                               labelled_p_best(correct, population=n, widen=STOP_WIDENING))
    assert ev.accuracy[0] == 1.0 and 0.35 < ev.accuracy[1:].max() < 0.65
    rule = stopping_rule(pool, ev, round_size=5)
    assert rule["leader"] == "h0" and rule["p_best_stop"] >= 0.9 and rule["stop"]
    assert rule["p_best"] == pytest.approx(ev.p_best[0])
    assert rule["sentences"][-1].startswith("Stop: the leader's p(best) ")
    pick = few_label_pick(rule)
    assert pick["model_id"] == "h0" and pick["labels"] == 200 and pick["accuracy_on_labels"] == 1.0
    assert pick["posterior"].startswith("the heads' top-1 accuracy on the labelled images")

    # two identical heads (h1 a copy of h0, right on half the images) ahead of h2 (right on a
    # fifth): the posterior is symmetric in h0 and h1 (its pseudo-samples keep them from being
    # known equal), so each holds half of their p(best) up to Monte-Carlo error, however many
    # labels; the rule goes on; with every label, the observed accuracies tie them exactly
    same = np.stack([votes[1], votes[1], np.where(rng.random(n) < 0.2, truth, wrong)])
    for labels in (labelled[:20], labelled, np.arange(n - 1)):
        pool = _hand_pool(same, truth, labels)
        ev = head_evidence(pool)
        assert abs(ev.p_best[0] - ev.p_best[1]) < 0.05 and ev.p_best[:2].max() < 0.55
        rule = stopping_rule(pool, ev, round_size=5)
        assert not rule["stop"] and rule["p_best_stop"] < 0.55
        assert rule["sentences"][-1].startswith("Go on: another round of ")
    rule = stopping_rule(_hand_pool(same, truth, np.arange(n)), head_evidence(
        _hand_pool(same, truth, np.arange(n))), round_size=5)
    assert rule["stop"] and rule["p_best"] == 0.5
    assert rule["sentences"][-1] == f"Stop: every image of the pool ({n}) is labelled."


def _class_winner_zoo(seed: int, m: int = 12, k: int = 10, n: int = 1000):
    """A seeded classifier zoo where weak models win classes: one generalist right on each image
    with probability 0.76–0.82 whatever its class, and m − 1 specialists, each right with
    probability 0.93–0.99 on one or two classes of its own and 0.55–0.72 on the rest (overall
    0.63–0.77); wrong answers a uniform other class. The heads put 0.6 on their vote.
    Returns (votes (m, n), truth (n,))."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(k), n // k)
    rate = np.empty((m, k))
    rate[0] = rng.uniform(0.76, 0.82)
    for j in range(1, m):
        rate[j] = rng.uniform(0.55, 0.72)
        rate[j, rng.choice(k, size=rng.integers(1, 3), replace=False)] = rng.uniform(0.93, 0.99)
    right = rng.random((m, n)) < rate[:, truth]
    wrong = (truth[None] + rng.integers(1, k, size=(m, n))) % k
    return np.where(right, truth[None], wrong), truth


def _partial_label_regrets(n_labels: int, seeds: range) -> tuple[np.ndarray, np.ndarray]:
    """Per seeded zoo with class winners: the held-out regret (pp) of the product path's pick
    (head_evidence, stopping_rule) from ``n_labels`` random labels of the pool of 1000, and a
    random pick's expected regret; the truth is each model's accuracy on the OTHER images, whose
    labels the posterior did not see."""
    from zoorank.labels.head_predictions import head_evidence
    from zoorank.labels.pool import Pool
    from zoorank.labels.stopping import stopping_rule

    picks, randoms = [], []
    for seed in seeds:
        votes, truth = _class_winner_zoo(seed)
        m, n = votes.shape
        k = int(truth.max()) + 1
        labelled = np.sort(np.random.default_rng(100 + seed).choice(n, n_labels, replace=False))
        unseen = np.setdiff1d(np.arange(n), labelled)
        accuracy = (votes[:, unseen] == truth[None, unseen]).mean(axis=1)
        P = np.full((m, n, k), 0.4 / (k - 1))
        np.put_along_axis(P, votes[..., None], 0.6, axis=2)
        pool = Pool(dataset="synthetic", classes=tuple(str(c) for c in range(k)),
                    sample_id=np.arange(n), source=[""] * n, model_ids=[f"m{j}" for j in range(m)],
                    Zs=[np.zeros((n, 1), np.float32)] * m, labelled=labelled,
                    codes=truth[labelled], prior=np.full(m, 1.0 / m), free_top_set=[],
                    catalog=None, predictions=P)
        rule = stopping_rule(pool, head_evidence(pool), round_size=20)
        pick = int(rule["leader"][1:])
        picks.append(100 * (accuracy.max() - accuracy[pick]))
        randoms.append(100 * (accuracy.max() - accuracy.mean()))
    return np.array(picks), np.array(randoms)


def test_with_200_labels_the_pick_is_near_the_best_on_images_it_did_not_see():
    # 200 of 1000 labels, 16 seeded zoos where weak models win classes; measured: the pick within
    # 1 pp of the held-out best on 12/16 zoos, mean regret 1.32 pp against a random pick's 10.0 pp
    # (the argmax of the observed accuracies does better: 0.22 pp over seeds 0-19)
    regret, random = _partial_label_regrets(200, range(16))
    assert (regret <= 1.0).sum() >= 12, regret.round(2)
    assert regret.mean() < 0.2 * random.mean(), (regret.mean(), random.mean())


def test_with_20_labels_the_pick_beats_a_random_pick_on_images_it_did_not_see():
    # the few-label regime's hard end: 20 labels (2 a class); measured over 16 seeded zoos: mean
    # held-out regret 7.22 pp (median 6.58) against a random pick's 10.13 pp (within 1 pp on 3/16)
    regret, random = _partial_label_regrets(20, range(16))
    assert regret.mean() < random.mean() - 2.0, (regret.mean(), random.mean())
