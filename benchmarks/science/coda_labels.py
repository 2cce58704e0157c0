"""Labels to a near-best pick: CODA against random, uncertainty and ModelPicker (issue 31, item 4).

On prediction matrices (models × images × classes, with the true labels), each seed draws a pool
of ``--pool`` images, and every method asks for labels one at a time up to ``--budget``. After each
label a method picks a model: CODA its P(best) argmax (:func:`coda_p_best`), the others the model
right most often on the labels so far (ties: a seeded choice, the same for every method in a seed;
ModelPicker's posterior with a uniform prior has the same argmax). The truth is each model's top-1
accuracy on the pool. Printed per method (means over seeds, paired differences against random with
their standard errors). ``coda_ask_count_pick`` asks as CODA does and picks as the baselines do
(it separates CODA's acquisition from its P(best)); ``random_coda_pick`` asks at random and picks by
CODA's P(best) (:data:`SPECS`: every sampler under both pick rules); ``coda_is`` (``--epsilon``)
draws from q = (1 − ε) EIG / ΣEIG + ε / F and weights each label by its importance weight
(:func:`coda_weighted.coda_sample_next`, :func:`coda_weighted.importance_weights`);
``coda_stochastic`` draws the same way at ε = 0.5 without the weights; ``--explore ε`` runs CODA
with an exploration share (each pick a uniform free image with probability ε, else the EIG
argmax: ``coda_next``'s ``explore``):

* *labels to a pick within 0.5 pp*: the fewest labels after which every pick up to the budget is
  within 0.5 pp of the best model's accuracy (``budget + 1`` when the last pick is not);
* *regret* (pp) at a few label counts, and its mean over the whole curve.

Inputs: ``--npz FILE ...`` (arrays ``probs`` or ``logits`` (M, N, K), ``labels`` (N,), optional
``model_ids``), or by default the four UvA CIFAR-10 classifiers on the first ``--images`` test
images, their predictions computed once through zoorank's loading path and cached::

    PYTHONPATH=. .venv/bin/python benchmarks/science/coda_labels.py --seeds 20
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np

from zoorank.metrics.active import coda, coda_weighted
from zoorank.metrics.active import model_selection as ms
from zoorank.metrics.active.label_posterior import labelled_p_best

TITLE = "CODA vs random, uncertainty and ModelPicker: labels to a near-best pick"
METHODS = ("coda", "coda_ask_count_pick", "random", "random_coda_pick", "uncertainty", "model_picker")
REGRET_AT = (0, 5, 10, 25, 50, 100, 200)


def uva_predictions(n: int, cache: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Softmax (4, n, 10) of the UvA classifiers on the first ``n`` CIFAR-10 test images."""
    path = cache / f"uva_{n}.npz"
    if not path.exists():
        import torch
        import yaml
        from uva_accuracy import README_TOP1, images_and_labels
        from validate_uva import config

        from zoorank.config.loading import load_config
        from zoorank.zoo import load_model, resolve_models

        cache.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(2)
        x, labels = images_and_labels(n)
        cfg = cache / "uva.yaml"
        cfg.write_text(yaml.safe_dump(config(cache, n, 1), sort_keys=False))
        models = {m.model_id: m for m in resolve_models(load_config(cfg))}
        ids, probs = [], []
        for model_id in README_TOP1:
            extractor = load_model(models[model_id])
            head = extractor.model.output_net[-1]
            with torch.inference_mode():
                logits = torch.cat([head(extractor(b)) for b in x.split(500)])
            probs.append(torch.softmax(logits.double(), dim=1).numpy())
            ids.append(model_id)
        np.savez(path, probs=np.stack(probs), labels=labels, model_ids=np.array(ids))
    data = np.load(path)
    return data["probs"], data["labels"], [str(s) for s in data["model_ids"]]


def load_npz(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    data = np.load(path)
    if "probs" in data:
        probs = data["probs"]
    else:
        z = data["logits"].astype(np.float64)
        z = np.exp(z - z.max(axis=2, keepdims=True))
        probs = z / z.sum(axis=2, keepdims=True)
    ids = ([str(s) for s in data["model_ids"]] if "model_ids" in data
           else [f"m{i}" for i in range(len(probs))])
    return probs, data["labels"].astype(np.int64), ids


def digits_domains(cache: Path) -> dict[str, tuple[np.ndarray, np.ndarray, list[str]]]:
    """The development zoo (never the judged benchmark): 14 scikit-learn heads on real digits
    (8 × 8), trained on images 900.. (logistic regressions on 50..897 images, all 64 pixels or
    the top 48; MLPs of 32 / 64 units on 200 or 897 images), predicting images 0..899 under
    seeded Gaussian pixel noise σ 0, 40, 80 (0..255 scale). Softmax (14, 900, 10) per domain."""
    path = cache / "digits_dev.npz"
    if not path.exists():
        from sklearn.datasets import load_digits
        from sklearn.linear_model import LogisticRegression
        from sklearn.neural_network import MLPClassifier

        d = load_digits()
        x, y = d.data / 16, d.target
        n = 900
        heads = {}
        for size in (50, 100, 200, 400, 897):
            for pixels in (64, 48):
                heads[f"lr{size}-{pixels}"] = (LogisticRegression(max_iter=3000), size, pixels)
        for size in (200, 897):
            for width in (32, 64):
                heads[f"mlp{width}-{size}"] = (MLPClassifier((width,), max_iter=2000,
                                                             random_state=0), size, 64)
        rng = np.random.default_rng(0)
        train = n + rng.permutation(len(y) - n)
        fitted = {name: (h.fit(x[train[:size], :pix], y[train[:size]]), pix)
                  for name, (h, size, pix) in heads.items()}
        arrays = {}
        for sigma in (0, 40, 80):
            noisy = np.clip(d.images[:n] * 255 / 16 + np.random.default_rng(7).normal(
                0, sigma, (n, 8, 8)), 0, 255).reshape(n, 64) / 255
            arrays[f"s{sigma}"] = np.stack([h.predict_proba(noisy[:, :pix])
                                            for h, pix in fitted.values()])
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, labels=y[:n], model_ids=np.array(list(fitted)), **arrays)
    data = np.load(path)
    ids = [str(s) for s in data["model_ids"]]
    return {f"digits_dev_{k}": (data[k], data["labels"], ids) for k in data.files
            if k.startswith("s")}


#: candidate images CODA scores per step (a seeded subsample beyond it; from the command line).
CANDIDATES = [ms.MAX_CANDIDATES]
#: CODA's settings in this process: the module's defaults (the authors'), or one ``--coda``.
CODA = {"strength": coda.STRENGTH, "scale": coda.SCALE, "label_weight": coda.LABEL_WEIGHT}
#: every method as (sampler, pick rule). Pick rules: ``posterior``, CODA's class-mix score argmax
#: (its prior and labels, whatever asked for them; what the paper calls P(best)); ``count``, the
#: model right most often on the labels so far (the random baseline of the CODA paper's code,
#: ``coda/baselines/iid.py``); ``labels``, the argmax of p(best | labels), the posterior of the
#: models' top-1 correctness on the labels (:func:`labelled_p_best`, the pool as the population;
#: ``zoorank ask``'s pick on a classifier zoo). Crossing them separates what CODA's acquisition
#: buys from what each pick buys.
SPECS = {
    "coda": ("coda", "posterior"),
    "coda_ask_count_pick": ("coda", "count"),
    "coda_labels_pick": ("coda", "labels"),
    "random": ("random", "count"),
    "random_coda_pick": ("random", "posterior"),
    "random_labels_pick": ("random", "labels"),
    "uncertainty": ("uncertainty", "count"),
    "uncertainty_coda_pick": ("uncertainty", "posterior"),
    "model_picker": ("model_picker", "count"),
    "coda_is": ("coda_is", "posterior"),
    "coda_stochastic": ("coda_stochastic", "posterior"),
    "coda_explore": ("coda_explore", "posterior"),
}
#: the bias-corrected CODA's ε (:func:`coda_weighted.coda_sample_next`; from the command line).
EPSILON = [0.5]
#: labels a round asks (from the command line): 1, one image at a time (the paper's loop); k > 1,
#: ``zoorank ask``'s path: CODA asks k images per call (its greedy batch, each call's candidate
#: subsample seeded 1000 · seed + labels so far), and every pick is made after a round comes
#: back and held until the next.
ROUND = [1]


def labels_pick(votes: np.ndarray, at: np.ndarray, y: np.ndarray, n: int, seed: int) -> int:
    """The argmax of p(best | labels) (:func:`labelled_p_best` of the top-1 correctness on the
    labelled images, a pool of ``n``); exact ties and no label: a seeded uniform choice, as
    :func:`ms.empirical_best`."""
    if not len(at):
        return int(np.random.default_rng(seed).choice(len(votes)))
    p = labelled_p_best((votes[:, at] == y[None, :]).T.astype(np.float64), seed=seed,
                        population=n)
    return int(np.random.default_rng(seed).choice(np.flatnonzero(p == p.max())))


def run_sampler(sampler: str, P: np.ndarray, y: np.ndarray, budget: int, seed: int,
                coda_args: dict | None = None) -> dict[str, np.ndarray]:
    """The picks (model index) after 0..budget labels asked by ``sampler``, under every pick
    rule: ``{"posterior": ..., "count": ..., "labels": ...}``. The posterior is CODA's with
    ``coda_args``. In rounds (:data:`ROUND`), a pick is made when a round comes back and held."""
    n = P.shape[1]
    rng = np.random.default_rng(seed)
    labelled: list[int] = []
    drawn_q: list[float] = []
    picks: dict[str, list[int]] = {"posterior": [], "count": [], "labels": []}
    settings = {**CODA, **(coda_args or {})}
    lookahead = settings.pop("lookahead", coda.LOOKAHEAD)
    epsilon = settings.pop("epsilon", EPSILON[0])
    explore = settings.pop("explore", 0.0)
    prior = coda.coda_prior(P, **settings)
    votes = prior.votes
    size = ROUND[0]
    order = None
    queue: list[int] = []
    if sampler == "random":
        order = rng.permutation(n)
    elif sampler == "uncertainty":
        order = np.lexsort((rng.permutation(n), -ms.uncertainty_scores(P)))
    for t in range(budget + 1):
        at = np.asarray(labelled, dtype=np.int64)
        if t % size and t < budget:  # within a round: the last round's picks hold
            for rule in picks:
                picks[rule].append(picks[rule][-1])
        else:
            weights = coda_weighted.importance_weights(drawn_q, n) if sampler == "coda_is" else None
            picks["posterior"].append(int(np.argmax(coda.coda_belief(prior, at, y[at],
                                                                     weights=weights)[0])))
            picks["count"].append(ms.empirical_best(P, at, y[at], seed=seed))
            picks["labels"].append(labels_pick(votes, at, y[at], n, seed))
        if t == budget:
            break
        if order is not None:
            nxt = int(order[t])
        elif sampler == "coda" and size > 1:
            if not queue:
                queue = coda.coda_next(P, at, y[at], k=min(size, budget - t),
                                       seed=1000 * seed + t, prior=prior,
                                       max_candidates=CANDIDATES[0], lookahead=lookahead).tolist()
            nxt = int(queue.pop(0))
        elif sampler == "coda":
            nxt = int(coda.coda_next(P, at, y[at], k=1, seed=seed + t, prior=prior,
                                     max_candidates=CANDIDATES[0], lookahead=lookahead)[0])
        elif sampler == "coda_explore":  # ε-greedy: a uniform free image with probability ε
            nxt = int(coda.coda_next(P, at, y[at], k=1, seed=1_000_003 * seed + t, prior=prior,
                                     max_candidates=CANDIDATES[0], lookahead=lookahead,
                                     explore=explore)[0])
        elif sampler in ("coda_is", "coda_stochastic"):  # the second: the same draws, unweighted
            nxt, q = coda_weighted.coda_sample_next(P, at, y[at], weights, epsilon=epsilon,
                                           seed=1_000_003 * seed + t, prior=prior,
                                           max_candidates=CANDIDATES[0], lookahead=lookahead)
            drawn_q.append(q)
        else:
            nxt = ms.model_picker_next(P, at, y[at], seed=seed + t)
        labelled.append(nxt)
    return {rule: np.asarray(v) for rule, v in picks.items()}


def one_seed(args: tuple) -> dict[str, tuple[np.ndarray, float]]:
    """Every method on one seed's pool: method → (regret curve in pp, seconds). Methods sharing
    a sampler (and CODA settings) share its run; its seconds go to each of them."""
    P_all, y_all, pool_size, budget, seed, methods, coda_args, candidates, size = args
    CANDIDATES[0] = candidates
    ROUND[0] = size
    rng = np.random.default_rng(1000 + seed)
    pool = np.sort(rng.choice(P_all.shape[1], size=min(pool_size, P_all.shape[1]), replace=False))
    P, y = P_all[:, pool], y_all[pool]
    acc = (P.argmax(axis=2) == y[None]).mean(axis=1) * 100
    runs: dict[tuple, tuple[dict[str, np.ndarray], float]] = {}
    out = {}
    for name, (sampler, rule) in methods.items():
        key = (sampler, tuple(sorted(coda_args.get(name, CODA).items())))
        if key not in runs:
            start = time.perf_counter()
            picks = run_sampler(sampler, P, y, budget, seed, coda_args.get(name))
            runs[key] = (picks, time.perf_counter() - start)
        picks, seconds = runs[key]
        out[name] = (acc.max() - acc[picks[rule]], seconds)
    return out


def curve_convergence(mean_regret: np.ndarray, threshold: float = 1.0) -> int:
    """The CODA paper's Fig. 1 rule (its ``paper/fig1.py``), on the regret curve averaged over
    seeds: the fewest labels after which the mean regret stays strictly below ``threshold`` pp
    (len when never)."""
    bad = np.flatnonzero(mean_regret >= threshold)
    return 0 if not len(bad) else int(bad[-1]) + 1


def labels_to_good(regret: np.ndarray, tol: float) -> int:
    """Fewest labels after which every later pick's regret is ≤ ``tol`` (len when none)."""
    bad = np.flatnonzero(regret > tol + 1e-12)
    return 0 if not len(bad) else int(bad[-1]) + 1


def paired(a: np.ndarray, b: np.ndarray) -> str:
    d = a - b
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return f"{d.mean():+.1f} ± {se:.1f}"


def _same_rule_random(rule: str, methods: dict) -> str | None:
    """The random sampler's method with pick rule ``rule``, when it runs."""
    return next((m for m, spec in methods.items() if spec == ("random", rule)), None)


def _labels_or_more(n: int, budget: int) -> str:
    return f"> {budget}" if n > budget else str(n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--npz", nargs="*", default=[])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--pool", type=int, default=1000)
    p.add_argument("--budget", type=int, default=200)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--first-seed", type=int, default=0, help="seeds run: first-seed .. + seeds − 1")
    p.add_argument("--tol", type=float, default=0.5, help="pp from the best")
    p.add_argument("--cache", default="/tmp/zoorank-coda-labels")
    p.add_argument("--jobs", type=int, default=2, help="seeds run in parallel processes")
    p.add_argument("--digits", action="store_true",
                   help="the digits development zoo (tuning) instead of the UvA nets")
    p.add_argument("--methods", nargs="*", default=list(METHODS))
    p.add_argument("--domains", nargs="*", default=None, help="only these domains (by name)")
    p.add_argument("--candidates", type=int, default=ms.MAX_CANDIDATES,
                   help="images CODA scores per step (a seeded subsample beyond it)")
    p.add_argument("--coda", nargs="*", default=[],
                   help="extra CODA settings 'SCALE,STRENGTH,LABEL_WEIGHT[,LOOKAHEAD]' run beside "
                   "the default (the authors' 2,0.1,0.01,1; zoorank's earlier temperature T with "
                   "look-ahead 1 is '1/T,0.1,1,1')")
    p.add_argument("--round", type=int, default=1,
                   help="labels a round asks (1: one at a time; >1: zoorank ask's rounds)")
    p.add_argument("--epsilon", nargs="*", type=float, default=[],
                   help="bias-corrected CODA (importance-weighted, q = (1 − ε) EIG / ΣEIG + ε / F) "
                   "at each ε given, beside the methods named")
    p.add_argument("--explore", nargs="*", type=float, default=[],
                   help="CODA with an exploration share: a uniform free image with probability ε "
                   "per pick (coda_next's explore), at each ε given, beside the methods named")
    p.add_argument("--save", type=Path, help="write every method's per-seed regret curves here "
                   "(<domain>.npz, one (seeds, budget + 1) array per method)")
    p.add_argument("--markdown", type=Path, help="also write the printed tables here, under the "
                   "harness header (default: print only; results/coda_labels.md holds a "
                   "hand-written reading)")
    args = p.parse_args()
    methods = {m: SPECS[m] for m in args.methods}
    coda_args: dict[str, dict] = {}
    for spec in args.coda:
        sc, a, eta, *w = (float(v) for v in spec.split(","))
        name = f"coda s={sc:g} α={a:g} η={eta:g}" + (f" w={w[0]:g}" if w else "")
        methods[name] = ("coda", "posterior")
        coda_args[name] = {"scale": sc, "strength": a, "label_weight": eta,
                           **({"lookahead": w[0]} if w else {})}
    for e in args.epsilon:
        name = f"coda_is ε={e:g}"
        methods[name] = ("coda_is", "posterior")
        coda_args[name] = {"epsilon": e}
    for e in args.explore:
        name = f"coda ε={e:g} (explore)"
        methods[name] = ("coda_explore", "posterior")
        coda_args[name] = {"explore": e}
    if args.digits:
        domains = digits_domains(Path(args.cache))
    elif args.npz:
        domains = {Path(f).stem: load_npz(Path(f)) for f in args.npz}
    else:
        domains = {"uva_cifar10_clean": uva_predictions(args.images, Path(args.cache))}
    if args.domains:
        domains = {k: v for k, v in domains.items() if k in args.domains}
    report, summary = harness.Report(), []
    for name, (P_all, y_all, ids) in domains.items():
        acc_all = (P_all.argmax(axis=2) == y_all[None]).mean(axis=1) * 100
        report.say(f"## {name}: {P_all.shape[0]} models, {P_all.shape[1]} images, {P_all.shape[2]} "
                   f"classes; top-1 % " + ", ".join(f"{i} {a:.2f}" for i, a in zip(ids, acc_all)))
        to_good = {m: [] for m in methods}
        curves = {m: [] for m in methods}
        seconds = {m: 0.0 for m in methods}
        tasks = [(P_all, y_all, args.pool, args.budget, seed, methods, coda_args, args.candidates,
                  args.round)
                 for seed in range(args.first_seed, args.first_seed + args.seeds)]
        with multiprocessing.get_context("spawn").Pool(args.jobs) as workers:
            for result in workers.imap(one_seed, tasks):
                for method, (regret, s) in result.items():
                    seconds[method] += s
                    curves[method].append(regret)
                    to_good[method].append(labels_to_good(regret, args.tol))
        tg = {m: np.asarray(v, dtype=np.float64) for m, v in to_good.items()}
        cv = {m: np.asarray(v) for m, v in curves.items()}
        at = [t for t in REGRET_AT if t <= args.budget]
        report.say(f"\n{args.seeds} seeds, pools of {args.pool} images, budget {args.budget}; "
                   f"'> budget' counts as {args.budget + 1}\n")
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            np.savez(args.save / f"{name}.npz", **{m: cv[m] for m in methods})
        rows = []
        for m in methods:
            reached = int((tg[m] <= args.budget).sum())
            area = cv[m].mean(axis=1)
            same = _same_rule_random(methods[m][1], methods)
            rows.append([m, f"{tg[m].mean():.1f}", f"{np.median(tg[m]):.0f}", f"{reached}/{args.seeds}",
                         paired(tg[m], tg["random"]),
                         paired(tg[m], tg[same]) if same else "",
                         _labels_or_more(curve_convergence(cv[m].mean(axis=0)), args.budget),
                         f"{area.mean():.3f}", paired(area, cv["random"].mean(axis=1)),
                         *(f"{cv[m][:, t].mean():.2f}" for t in at), f"{seconds[m] / args.seeds:.1f}"])
        head = ["method", f"labels to ≤ {args.tol} pp: mean", "median", "reached",
                "Δ vs random (paired, ± SE)", "Δ vs random with the same pick rule",
                "seed-mean regret < 1 pp from (paper Fig. 1 rule)",
                "mean regret pp over 0..budget", "Δ vs random",
                *(f"regret @{t}" for t in at), "s/seed"]
        report.say(harness.table(head, rows, "l" * len(head)))
        for m in methods:
            for base in ("random", _same_rule_random(methods[m][1], methods)):
                if not base or base == m:
                    continue
                d = tg[m] - tg[base]
                se = d.std(ddof=1) / np.sqrt(len(d))
                line = (f"labels-to-{args.tol}pp  {name}  {m} {tg[m].mean():.1f}  {base} "
                        f"{tg[base].mean():.1f}  Δ {d.mean():+.1f} ± {se:.1f}  "
                        f"ratio {tg[m].mean() / max(tg[base].mean(), 1e-9):.2f}×")
                if line not in summary:
                    summary.append(line)
                    report.say(line)
    report.say("\n## summary\n" + "\n".join(summary))
    if args.markdown:
        report.write(args.markdown, TITLE)

if __name__ == "__main__":
    main()
