"""Active labels vs random labels: how many labels until the oracle's best model is picked with
confidence (issue 25, item 4).

For every zoo (a run config whose store holds the clean embeddings of a dataset **with** labels),
the labels are hidden and revealed only for the images a method asks for, ``--round`` at a time:

* ``active``: ``zoorank ask``'s choice (:func:`zoorank.metrics.active.next_batch`: k-means cold
  start, then query-by-committee weighted by p(best), spread by k-means);
* ``random``: uniformly random unlabelled images;
* ``balanced``: random images, as many of each class as possible per round (it peeks at the hidden
  labels to balance: a stronger baseline than a user can run).

After each round p(best | labels) is recomputed exactly as ``zoorank label`` does
(:func:`zoorank.metrics.active.label_evidence`; prior: the leaderboard's label-free p(best)). The
*oracle's best* is the most accurate model by the same few-label kNN with every label revealed
(leave-one-out over the whole pool). Figures per (zoo, method), over ``--seeds`` seeds:

* ``to correct+confident``: labels until the oracle's best is ranked first with p(best) ≥ 0.9
  (censored at ``--max-labels``: ">N");
* ``stop at``: labels when the default stopping rule fires (any leader with p(best) ≥ 0.9), the
  share of seeds whose pick is the oracle's best, and the mean accuracy regret of the pick (pp);
* ``settled within ε``: labels after which the leader (most probable model) stays within
  ``--epsilon`` pp of the oracle's best accuracy for every later round (``>N`` if it never
  settles), the model-selection figure of ModelSelector (Okanovic et al. 2024) — it still counts
  on zoos whose best models are tied, where no number of labels gives p(best) ≥ 0.9;
* the curves of the oracle's best's p(best) and of the leader's regret against labels.

Prints, never asserts::

    PYTHONPATH=. .venv/bin/python benchmarks/active_labels.py demo=/tmp/labels-bench/demo/run.yaml \\
        --seeds 5 --round 10 --max-labels 300 --markdown benchmarks/results/active_labels.md
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import time
from pathlib import Path

import numpy as np

import zoorank.runtime  # noqa: F401  (quiet Ray environment; no Ray is started here)

METHODS = ("active", "random", "balanced")
TARGET = 0.9


def balanced_batch(truth: np.ndarray, free: np.ndarray, k: int, counts: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    """``k`` free positions, each from the class with the fewest labels so far (random within)."""
    counts = counts.copy()
    out: list[int] = []
    left = {c: list(rng.permutation(free[truth[free] == c])) for c in np.unique(truth[free])}
    for _ in range(min(k, len(free))):
        classes = [c for c in left if left[c]]
        c = min(classes, key=lambda c: (counts[c], rng.random()))
        out.append(int(left[c].pop()))
        counts[c] += 1
    return np.array(out, dtype=np.int64)


def simulate(pool, truth: np.ndarray, best: int, method: str, seed: int, round_size: int,
             max_labels: int) -> list[tuple[int, int, float, float]]:
    """Rounds of one method: (labels, leader, leader's p(best), the oracle's best's p(best))."""
    from zoorank.metrics.active import label_evidence, next_batch

    n, n_classes = len(truth), int(truth.max()) + 1
    rng = np.random.default_rng(seed)
    labelled = np.zeros(0, dtype=np.int64)
    ev = label_evidence(pool.Zs, labelled, truth[labelled], n_classes, pool.prior, seed=seed)
    trace = []
    while len(labelled) < min(max_labels, n):
        mask = np.zeros(n, dtype=bool)
        mask[labelled] = True
        free = np.flatnonzero(~mask)
        k = min(round_size, max_labels - len(labelled))
        if method == "active":
            batch = next_batch(pool.Zs, ev, mask, k, seed + len(labelled))
        elif method == "random":
            batch = rng.choice(free, size=min(k, len(free)), replace=False)
        else:
            batch = balanced_batch(truth, free, k, np.bincount(truth[labelled],
                                                               minlength=n_classes), rng)
        labelled = np.concatenate([labelled, batch])
        ev = label_evidence(pool.Zs, labelled, truth[labelled], n_classes, pool.prior,
                            resamples=1000, seed=seed)
        leader = int(np.argmax(ev.p_best))
        trace.append((len(labelled), leader, float(ev.p_best[leader]), float(ev.p_best[best])))
        if leader == best and ev.p_best[leader] >= TARGET:
            break
    return trace


def settled(trace: list[tuple], regret_of, epsilon: float, max_labels: int) -> float:
    """Labels after which every later leader is within ``epsilon`` pp (inf if never): a run that
    stopped correct and confident counts as settled from the round its leader last changed to
    within ε."""
    at = np.inf
    for n, leader, _, _ in trace:
        if regret_of(leader) <= epsilon:
            at = min(at, n)
        else:
            at = np.inf
    return at


def zoo_figures(name: str, run_yaml: str, seeds: int, round_size: int, max_labels: int,
                epsilon: float = 1.0) -> dict:
    from zoorank.config.loading import load_config
    from zoorank.labels.pool import load_pool
    from zoorank.metrics.active import label_evidence

    pool = load_pool(load_config(run_yaml))
    if len(pool.labelled) != len(pool.sample_id):
        raise SystemExit(f"{name}: {len(pool.sample_id) - len(pool.labelled)} pool images have "
                         "no label; the simulation needs every label (to hide and reveal)")
    truth = pool.codes  # every image labelled: positions 0..n-1 in order
    full = label_evidence(pool.Zs, np.arange(len(truth)), truth, int(truth.max()) + 1,
                          pool.prior, resamples=2000, seed=0)
    best = int(np.nanargmax(full.accuracy))
    order = np.argsort(-full.accuracy)
    out = {"name": name, "config": run_yaml, "models": len(pool.model_ids),
           "images": len(truth), "classes": int(truth.max()) + 1,
           "best": pool.model_ids[best], "best_acc": float(full.accuracy[best]),
           "runner_up": pool.model_ids[order[1]], "runner_up_acc": float(full.accuracy[order[1]]),
           "free_top_set": pool.free_top_set, "full_p_best": float(full.p_best[best]),
           "methods": {}}
    for method in METHODS:
        needed, stops, right, regret, curves, settle, regrets = [], [], [], [], [], [], []
        t0 = time.perf_counter()
        for s in range(seeds):
            trace = simulate(pool, truth, best, method, s, round_size, max_labels)
            done = [t[0] for t in trace if t[1] == best and t[2] >= TARGET]
            needed.append(done[0] if done else np.inf)
            stop = next((t for t in trace if t[2] >= TARGET), None)
            if stop is not None:
                stops.append(stop[0])
                right.append(stop[1] == best)
                regret.append(100 * (full.accuracy[best] - full.accuracy[stop[1]]))
            curves.append({t[0]: t[3] for t in trace})
            regrets.append({t[0]: 100 * (full.accuracy[best] - full.accuracy[t[1]])
                            for t in trace})
            settle.append(settled(trace, lambda m: 100 * (full.accuracy[best] - full.accuracy[m]),
                                  epsilon, max_labels))
        out["methods"][method] = {"needed": needed, "stops": stops, "right": right,
                                  "regret": regret, "curves": curves, "settled": settle,
                                  "regrets": regrets,
                                  "seconds": time.perf_counter() - t0}
        at = (f", at {np.median(stops):.0f} labels (median), pick right {np.mean(right):.0%}"
              if stops else "")
        print(f"{name:<8} {method:<9} labels to correct+confident: {_summary(needed, max_labels)}"
              f"   stop rule fired in {len(stops)}/{seeds} seeds{at}"
              f"   settled within {epsilon:g} pp: {_summary(settle, max_labels)}"
              f"   {out['methods'][method]['seconds']:.0f} s", flush=True)
    for key, what in (("needed", "to correct+confident"), ("settled", f"settled within {epsilon:g} pp")):
        a, r = (np.median(out["methods"][m][key]) for m in ("active", "random"))
        ratio = r / a if np.isfinite(a) and np.isfinite(r) else float("nan")
        print(f"{name:<8} active vs random, labels {what}: median {_fmt(a, max_labels)} vs "
              f"{_fmt(r, max_labels)}  random/active {ratio:.2f}x", flush=True)
    return out


def _curve_table(title: str, methods: dict[str, dict], key: str, shown: list[int],
                 fmt: str) -> list[str]:
    """Markdown lines: ``title``, then one row per method of its ``key`` curve at ``shown``."""
    lines = ["", title, "", "| n | " + " | ".join(str(g) for g in shown) + " |",
             "|---|" + "---|" * len(shown)]
    return lines + [f"| {m} | " + " | ".join(_curve(f[key], shown, fmt)) + " |"
                    for m, f in methods.items()]


def _curve(curves: list[dict], grid: list[int], fmt: str) -> list[str]:
    """Mean over seeds at each n of the grid (a finished run keeps its last value)."""
    row = []
    for g in grid:
        vals = []
        for c in curves:
            keys = [k for k in c if k <= g]
            vals.append(c[max(keys)] if keys else np.nan)
        row.append(fmt.format(np.nanmean(vals)) if np.isfinite(vals).any() else "—")
    return row


def _fmt(v: float, cap: int) -> str:
    return f">{cap}" if not np.isfinite(v) else f"{v:.0f}"


def _summary(needed: list[float], cap: int) -> str:
    done = [v for v in needed if np.isfinite(v)]
    return (f"median {_fmt(np.median(needed), cap)}, reached in {len(done)}/{len(needed)} seeds"
            + (f" (range {min(done):.0f}–{max(done):.0f})" if done else ""))


def markdown(zoos: list[dict], args: argparse.Namespace, seconds: float) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = ["# Active labels vs random labels (issue 25)", "",
             f"{datetime.date.today()}; commit `{commit}`; `{' '.join(args.argv)}`; "
             f"{seconds:.0f} s on 2 shared CPU cores.", "",
             "Labels hidden, revealed only for the images a method asks for, "
             f"{args.round} per round, {args.seeds} seeds, at most {args.max_labels} labels. "
             "p(best | labels): Bayesian bootstrap of each model's leave-one-out few-label kNN "
             "accuracy on the labelled images (`zoorank label`'s computation); oracle's best: "
             "the same kNN with every label revealed. *correct+confident*: the oracle's best "
             f"ranked first with p(best) ≥ {TARGET}. *stop rule*: the default stop (any leader "
             f"with p(best) ≥ {TARGET}); *right*: its pick is the oracle's best; *regret*: the "
             "oracle's best accuracy minus the pick's (pp).", ""]
    for z in zoos:
        lines += [f"## {z['name']}", "",
                  f"{z['models']} models, {z['images']} images, {z['classes']} classes "
                  f"(`{z['config']}`). Oracle's best: `{z['best']}` "
                  f"(kNN accuracy {z['best_acc']:.3f}); runner-up `{z['runner_up']}` "
                  f"({z['runner_up_acc']:.3f}, {100 * (z['best_acc'] - z['runner_up_acc']):.1f} pp "
                  f"behind); p(best) of the oracle's best with every label: "
                  f"{z['full_p_best']:.2f}. Label-free top set: "
                  f"{', '.join(z['free_top_set']) or '— (no leaderboard)'}.", "",
                  "| method | labels to correct+confident (median) | reached | "
                  f"settled within {args.epsilon:g} pp (median) | settled | stop rule fired | "
                  "labels at stop (median) | right | regret at stop (pp) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for m, f in z["methods"].items():
            done = sum(np.isfinite(f["needed"]))
            head = (f"| {m} | {_fmt(np.median(f['needed']), args.max_labels)} | "
                    f"{done}/{args.seeds} | {_fmt(np.median(f['settled']), args.max_labels)} | "
                    f"{sum(np.isfinite(f['settled']))}/{args.seeds} | ")
            lines.append(
                head + f"{len(f['stops'])}/{args.seeds} | "
                f"{np.median(f['stops']):.0f} | {np.mean(f['right']):.0%} | "
                f"{np.mean(f['regret']):.1f} |" if f["stops"] else
                head + f"0/{args.seeds} | — | — | — |")
        grid = list(range(args.round, args.max_labels + 1, args.round))
        shown = [g for g in grid if g <= 100 or g % 50 == 0]
        lines += _curve_table("p(best) of the oracle's best after n labels (mean over seeds; a "
                              "finished run keeps its last value):",
                              z["methods"], "curves", shown, "{:.2f}")
        lines += _curve_table("Regret of the leader after n labels (pp, mean over seeds; a run "
                              "that stopped correct and confident keeps its last value):",
                              z["methods"], "regrets", shown, "{:.1f}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    import sys

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("zoos", nargs="+", metavar="NAME=RUN_YAML")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--round", type=int, default=10, help="labels per round")
    p.add_argument("--max-labels", type=int, default=300)
    p.add_argument("--epsilon", type=float, default=1.0,
                   help="pp of accuracy within which a pick counts as settled (default 1)")
    p.add_argument("--markdown", type=Path)
    p.add_argument("--append", action="store_true",
                   help="append the zoos' sections (with their own command line) to --markdown")
    args = p.parse_args()
    args.argv = ["benchmarks/active_labels.py", *sys.argv[1:]]
    t0 = time.perf_counter()
    zoos = [zoo_figures(*z.split("=", 1), args.seeds, args.round, args.max_labels, args.epsilon)
            for z in args.zoos]
    if args.markdown:
        text = markdown(zoos, args, time.perf_counter() - t0)
        if args.append and args.markdown.exists():
            head, _, body = text.partition("\n## ")
            run = head.splitlines()[2]  # the date, commit and command line of this run
            text = args.markdown.read_text() + f"\n_Appended: {run}_\n\n## " + body
        args.markdown.write_text(text)
        print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
