"""Active labelling measured with the field's metrics (issue 30, item 4): which images to label, on
real embedding zoos whose labels are hidden and revealed only as a sampler asks for them.

For every zoo (``NAME=RUN_YAML``: a store holding the clean embeddings of a labelled dataset and a
leaderboard), the pool is the one ``zoorank ask`` holds (:func:`zoorank.labels.pool.load_pool`:
the models that may be best, the leaderboard's label-free p(best) as prior). Each run reveals
``--round`` labels at a time, up to ``--max-labels``, as a sampler asks:

* ``active``: query-by-committee (``zoorank ask --sampler committee``, the default before issue
  30; :func:`zoorank.metrics.active.knn_committee.next_batch`: k-means cold start, then the committee's
  disagreement weighted by p(best), spread by k-means);
* ``random``: uniformly random unlabelled images (:func:`zoorank.metrics.active.knn_committee.random_batch`);
* ``balanced``: random images, as many of each class as possible per round (it peeks at the hidden
  labels to balance: a stronger baseline than a user can run);
* ``uncertainty``: the images whose consensus few-label kNN vote has the largest entropy
  (:func:`zoorank.metrics.active.knn_committee.uncertainty_batch`, k-means cold start on the pool's first
  model;
  ``zoorank ask``'s default since this benchmark, ``--sampler uncertainty``).

After each round p(best | labels) is computed as ``zoorank label`` does
(:func:`zoorank.metrics.active.knn_committee.label_evidence`, i.e.
:func:`~zoorank.metrics.active.label_posterior.labelled_p_best`). The *pick* is the most probable
model. The truth: each model's leave-one-out few-label kNN accuracy with every label of the pool
revealed (the *oracle's best* is the best of the pool's models). Per (zoo, sampler), over
``--seeds`` seeds (seed s is shared by the samplers, so differences are paired):

* **regret** of the pick after n labels (pp of oracle accuracy below the oracle's best) and the
  **share of runs whose pick is within the tolerance** (0.5 pp,
  :data:`zoorank.metrics.active.label_posterior.TIE_TOLERANCE`) of the best: the curves of CODA (Kay et
  al., ICCV 2025) and Model Selector (Okanovic et al., AISTATS 2025);
* **stops** of the stopping rule (the leader's p(best | labels) ≥
  :data:`zoorank.labels.stopping.TARGET`): how many runs it fires in within the budget, and how
  many of those picks are within the tolerance (*right*); a run goes on after its stop, so the
  curves hold every run to the end;
* **paired differences** against ``active`` (other − active, per seed) with their standard errors
  (sd / √seeds), at each budget and for the mean regret over the budgets.

The stores were written by earlier commits, so their embeddings are read as stored: the catalog's
fingerprint check is skipped here (``_read_as_stored``); nothing is written to the stores.

Prints, never asserts; ``--markdown`` writes the tables::

    PYTHONPATH=. .venv/bin/python benchmarks/science/active_labels.py demo=/tmp/samplers/demo/run.yaml \\
        --seeds 20 --round 20 --max-labels 300 --markdown benchmarks/results/active_labels.md
    PYTHONPATH=. .venv/bin/python benchmarks/science/active_labels.py demo=... --quick   # 2 seeds, 60 labels
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np

import zoorank.runtime  # noqa: F401  (quiet Ray environment; no Ray is started here)

TITLE = "Active labelling measured with the field's metrics"
SAMPLERS = ("active", "random", "balanced", "uncertainty")


def _read_as_stored() -> None:
    """Read every ``done`` embedding of the store, whatever commit fingerprinted it (module note)."""
    from zoorank.catalog import Catalog

    Catalog.fresh_manifest = lambda self, manifest: manifest


def balanced_batch(truth: np.ndarray, free: np.ndarray, k: int, counts: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    """``k`` free positions, each from the class with the fewest labels so far (random within)."""
    counts = counts.copy()
    out: list[int] = []
    left = {c: list(rng.permutation(free[truth[free] == c])) for c in np.unique(truth[free])}
    for _ in range(min(k, len(free))):
        c = min((c for c in left if left[c]), key=lambda c: (counts[c], rng.random()))
        out.append(int(left[c].pop()))
        counts[c] += 1
    return np.sort(np.array(out, dtype=np.int64))


def oracle_accuracy(pool) -> np.ndarray:
    """Each pool model's leave-one-out few-label kNN accuracy with every label revealed."""
    from zoorank.metrics.active.knn_committee import knn_predictions

    every = np.arange(len(pool.codes))
    n_classes = len(pool.classes)
    return np.array([(knn_predictions(Z, every, pool.codes, n_classes) == pool.codes).mean()
                     for Z in pool.Zs])


def run_once(pool, sampler: str, seed: int, round_size: int, max_labels: int
             ) -> list[tuple[int, int, float]]:
    """One run: per round, (labels revealed, the pick, the pick's p(best | labels))."""
    from zoorank.metrics.active.knn_committee import (
        label_evidence,
        next_batch,
        random_batch,
        uncertainty_batch,
    )

    truth, n_classes, n = pool.codes, len(pool.classes), len(pool.codes)
    rng = np.random.default_rng(seed)
    labelled = np.zeros(0, dtype=np.int64)
    ev = label_evidence(pool.Zs, labelled, truth[labelled], n_classes, pool.prior, seed=seed)
    trace = []
    while len(labelled) < min(max_labels, n):
        excluded = np.zeros(n, dtype=bool)
        excluded[labelled] = True
        k = min(round_size, max_labels - len(labelled))
        at = 1000 * seed + len(labelled)
        if sampler == "active":
            batch = next_batch(pool.Zs, ev, excluded, k, at)
        elif sampler == "random":
            batch = random_batch(excluded, k, at)
        elif sampler == "uncertainty":
            batch = uncertainty_batch(pool.Zs, labelled, truth[labelled], n_classes, excluded, k, at)
        else:
            batch = balanced_batch(truth, np.flatnonzero(~excluded), k,
                                   np.bincount(truth[labelled], minlength=n_classes), rng)
        labelled = np.concatenate([labelled, batch])
        ev = label_evidence(pool.Zs, labelled, truth[labelled], n_classes, pool.prior, seed=seed)
        pick = int(np.argmax(ev.p_best))
        trace.append((len(labelled), pick, ev.stop_p_best()))  # what the stopping rule compares
    return trace


def zoo_figures(name: str, run_yaml: str, args: argparse.Namespace) -> dict:
    from zoorank.config.loading import load_config
    from zoorank.labels.pool import load_pool
    from zoorank.labels.stopping import TARGET
    from zoorank.metrics.active.label_posterior import TIE_TOLERANCE

    pool = load_pool(load_config(run_yaml))
    if len(pool.labelled) != len(pool.sample_id):
        raise SystemExit(f"{name}: {len(pool.sample_id) - len(pool.labelled)} pool images have "
                         "no label; the simulation needs every label (to hide and reveal)")
    acc = oracle_accuracy(pool)
    regret_of = 100 * (acc.max() - acc)  # pp
    order = np.argsort(-acc)
    cap = min(args.max_labels, len(pool.codes))
    grid = [min(n, cap) for n in range(args.round, cap + args.round, args.round)]
    out = {"name": name, "config": run_yaml, "models": len(pool.model_ids),
           "models_total": pool.models_total, "images": len(pool.codes),
           "classes": len(pool.classes), "best": pool.model_ids[order[0]],
           "best_acc": float(acc[order[0]]), "runner_up": pool.model_ids[order[1]],
           "runner_up_acc": float(acc[order[1]]),
           "tied": int((acc >= acc.max() - TIE_TOLERANCE - 1e-12).sum()),
           "within_1pp": int((acc >= acc.max() - 0.01 - 1e-12).sum()),
           "free_top_set": pool.free_top_set, "grid": grid, "samplers": {},
           "free_leader": pool.model_ids[int(np.argmax(pool.prior))],
           "oracle": dict(zip(pool.model_ids, acc.tolist()))}
    for sampler in args.samplers:
        t0 = time.perf_counter()
        regret = np.full((args.seeds, len(grid)), np.nan)
        stops = []  # (labels, regret) per run that fired; None when it did not
        for s in range(args.seeds):
            trace = run_once(pool, sampler, s, args.round, args.max_labels)
            regret[s] = [regret_of[pick] for _, pick, _ in trace]
            fired = next(((n, regret_of[pick]) for n, pick, p in trace if p >= TARGET), None)
            stops.append(fired)
        fired = [f for f in stops if f is not None]
        right = sum(r <= 100 * TIE_TOLERANCE + 1e-9 for _, r in fired)
        out["samplers"][sampler] = {"regret": regret, "stops": stops,
                                    "seconds": time.perf_counter() - t0}
        print(f"{name:<8} {sampler:<11} mean regret {np.mean(regret):.2f} pp; within tolerance "
              f"at {grid[-1]}: {np.mean(regret[:, -1] <= 100 * TIE_TOLERANCE + 1e-9):.2f}; "
              f"stop fired {len(fired)}/{args.seeds}, right {right}/{len(fired)}; "
              f"{out['samplers'][sampler]['seconds']:.0f} s", flush=True)
    return out


# -- tables --------------------------------------------------------------------------------------

def _within(regret: np.ndarray) -> np.ndarray:
    from zoorank.metrics.active.label_posterior import TIE_TOLERANCE

    return (regret <= 100 * TIE_TOLERANCE + 1e-9).astype(np.float64)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard error (sd / √n, ddof 1) over the first axis."""
    x = np.asarray(x, dtype=np.float64)
    se = x.std(axis=0, ddof=1) / np.sqrt(len(x)) if len(x) > 1 else np.nan * x[0]
    return x.mean(axis=0), se


def _shown(grid: list[int]) -> list[int]:
    return [i for i, g in enumerate(grid) if g <= 100 or g % 50 == 0 or i == len(grid) - 1]


def few_label_gap(run_yaml: str, best: str, other: str, budgets=(60, 100, 200),
                  draws: int = 20) -> dict[int, tuple[float, float]]:
    """Mean (over ``draws`` uniformly random labelled sets of each budget) leave-one-out
    few-label kNN accuracy gap, ``best`` − ``other`` on the labelled images (pp), and its
    standard error: what p(best | labels) estimates, against the full-label gap it is judged
    by."""
    from zoorank.config.loading import load_config
    from zoorank.labels.pool import load_pool
    from zoorank.metrics.active.knn_committee import knn_predictions

    pool = load_pool(load_config(run_yaml))
    Zs = [pool.Zs[pool.model_ids.index(m)] for m in (best, other)]
    rng = np.random.default_rng(0)
    out = {}
    for n in budgets:
        gaps = []
        for _ in range(draws):
            lab = rng.choice(len(pool.codes), size=n, replace=False)
            y = pool.codes[lab]
            a, b = ((knn_predictions(Z, lab, y, len(pool.classes))[lab] == y).mean() for Z in Zs)
            gaps.append(100 * (a - b))
        out[n] = (float(np.mean(gaps)), float(np.std(gaps, ddof=1) / np.sqrt(draws)))
    return out


def few_label_lines(z: dict) -> list[str]:
    """The few-label gaps of the oracle's best against the runner-up and the label-free leader."""
    others = [z["runner_up"]] + [m for m in [z.get("free_leader")] if m and m not in
                                 (z["best"], z["runner_up"])]
    parts = []
    for m in others:
        g = few_label_gap(z["config"], z["best"], m)
        full = 100 * (z["oracle"][z["best"]] - z["oracle"][m])
        parts.append(f"minus `{m}`: " + ", ".join(f"n = {n}: {v:+.1f} ± {e:.1f}"
                                                  for n, (v, e) in g.items())
                     + f" (all labels: {full:+.1f})")
    return ["Few-label gap (what p(best | labels) estimates, pp): the oracle's best's leave-one-"
            "out kNN accuracy on n uniformly random labelled images (20 draws, ± standard error) "
            + "; ".join(parts) + "."]


def _table(head: list[str], rows: list[list]) -> str:
    """A markdown table of left-aligned columns (the harness's)."""
    return harness.table(head, rows, "l" * len(head))


def zoo_markdown(z: dict, args: argparse.Namespace) -> list[str]:
    from zoorank.labels.stopping import TARGET

    grid, S = z["grid"], z["samplers"]
    cols = _shown(grid)
    head = ["n", *(str(grid[i]) for i in cols)]
    gap = 100 * (z["best_acc"] - z["runner_up_acc"])
    rows = []
    for m, f in S.items():
        fired = [s for s in f["stops"] if s is not None]
        right = sum(r <= 0.5 + 1e-9 for _, r in fired)
        area = f["regret"].mean(axis=1)
        mu, se = _mean_se(area)
        w_end = _within(f["regret"])[:, -1].mean()
        at = ([f"{np.median([n for n, _ in fired]):.0f}", f"{np.mean([r for _, r in fired]):.2f}"]
              if fired else ["—", "—"])
        rows.append([m, f"{len(fired)}/{args.seeds}", f"{right}/{len(fired)}", len(fired) - right,
                     *at, f"{mu:.2f} ± {se:.2f}", f"{w_end:.2f}"])
    lines = [f"## {z['name']}", "",
             f"{z['models']} of {z['models_total']} models in the pool (`zoorank ask`'s), "
             f"{z['images']} images, {z['classes']} classes (`{z['config']}`). Oracle's best: "
             f"`{z['best']}` (kNN accuracy {z['best_acc']:.3f}); runner-up `{z['runner_up']}` "
             f"({z['runner_up_acc']:.3f}, {gap:.1f} pp behind); {z['tied']} model(s) within the "
             f"0.5 pp tolerance of the best, {z['within_1pp']} within 1 pp. Label-free top set: "
             f"{', '.join(z['free_top_set']) or '—'}.", "",
             *few_label_lines(z), "",
             f"Stops and overall regret ({args.seeds} seeds; *mean regret*: over the budgets "
             f"{grid[0]}–{grid[-1]}, ± its standard error over seeds):", "",
             _table(["sampler", "stop fired", "right when fired", "wrong stops",
                     "labels at stop (median)", "mean regret at stop (pp)", "mean regret (pp)",
                     f"within tolerance at {grid[-1]}"], rows)]
    rows = []
    for m, f in S.items():
        mu, se = _mean_se(f["regret"])
        rows.append([m, *(f"{mu[i]:.2f} ± {se[i]:.2f}" for i in cols)])
    lines += ["", "Regret of the pick after n labels (pp; mean ± standard error over seeds):", "",
              _table(head, rows)]
    rows = [[m, *(f"{w[i]:.2f}" for i in cols)]
            for m, w in ((m, _within(f["regret"]).mean(axis=0)) for m, f in S.items())]
    lines += ["", "Share of runs whose pick is within 0.5 pp of the best after n labels:", "",
              _table(head, rows)]
    if "active" in S and len(S) > 1:
        base = S["active"]["regret"]
        rows = []
        for m, f in S.items():
            if m == "active":
                continue
            mu, se = _mean_se(f["regret"] - base)
            amu, ase = _mean_se(f["regret"].mean(axis=1) - base.mean(axis=1))
            rows.append([f"{m}, regret", *(f"{mu[i]:+.2f} ± {se[i]:.2f}" for i in cols),
                         f"{amu:+.2f} ± {ase:.2f}"])
            wmu, wse = _mean_se(_within(f["regret"]) - _within(base))
            rows.append([f"{m}, within", *(f"{wmu[i]:+.2f} ± {wse[i]:.2f}" for i in cols), ""])
        lines += ["", "Paired differences, other − active (per seed; ± standard error): regret "
                  "(pp; > 0: the other sampler's pick is worse) and share within tolerance "
                  "(> 0: the other is within more often):", "",
                  _table(["other − active", *head[1:], "mean regret"], rows)]
    lines += ["", f"Stopping rule: leader's p(best | labels) ≥ {TARGET}; seconds per sampler: "
              + ", ".join(f"{m} {f['seconds']:.0f}" for m, f in S.items()) + ".", ""]
    return lines


def pooled_markdown(zoos: list[dict], args: argparse.Namespace) -> list[str]:
    """Every zoo together: stops, and the mean regret's paired differences over zoos × seeds."""
    samplers = list(zoos[0]["samplers"])
    rows = []
    for m in samplers:
        fired = [s for z in zoos for s in z["samplers"][m]["stops"] if s is not None]
        right = sum(r <= 0.5 + 1e-9 for _, r in fired)
        area = np.concatenate([z["samplers"][m]["regret"].mean(axis=1) for z in zoos])
        mu, se = _mean_se(area)
        if "active" in samplers and m != "active":
            base = np.concatenate([z["samplers"]["active"]["regret"].mean(axis=1) for z in zoos])
            dmu, dse = _mean_se(area - base)
            diff = f"{dmu:+.2f} ± {dse:.2f}"
        else:
            diff = "—"
        w = np.mean([_within(z["samplers"][m]["regret"])[:, -1].mean() for z in zoos])
        rows.append([m, f"{len(fired)}/{len(zoos) * args.seeds}", f"{right}/{len(fired)}",
                     len(fired) - right, f"{mu:.2f} ± {se:.2f}", diff, f"{w:.2f}"])
    return ["## All zoos together", "",
            f"{len(zoos)} zoos × {args.seeds} seeds. *Mean regret*: each run's regret averaged "
            "over its budgets, then over runs; the paired difference is other − active per "
            "(zoo, seed), ± its standard error over the zoos × seeds pairs.", "",
            _table(["sampler", "stop fired", "right when fired", "wrong stops", "mean regret (pp)",
                    "other − active, mean regret (pp)",
                    "share within tolerance at the last budget"], rows), ""]


def markdown(zoos: list[dict], args: argparse.Namespace, seconds: float) -> str:
    """The results file's body (the harness writes the header: commit, date, machine, load)."""
    from zoorank.labels.stopping import TARGET

    if args.merge:  # merged runs: the sum of the samplers' times
        seconds = sum(f["seconds"] for z in zoos for f in z["samplers"].values())
    lines = [f"{seconds:.0f} s.", "",
             f"Labels hidden and revealed only as a sampler asks, {args.round} per round, up to "
             f"{args.max_labels}, {args.seeds} seeds (seed s shared by the samplers: paired). "
             "*Pick*: the most probable model under p(best | labels) "
             "(`zoorank.metrics.active.label_posterior.labelled_p_best`, as `zoorank label` computes it). "
             "*Regret*: the oracle's best accuracy minus the pick's (pp), the oracle being each "
             "model's leave-one-out few-label kNN accuracy with every label revealed. *Within "
             "tolerance*: regret ≤ 0.5 pp. *Stop*: the stopping rule fires (leader's p(best | "
             f"labels) ≥ {TARGET}) within the budget; *right*: its pick is within tolerance. "
             "Samplers: `active` = query-by-committee (`next_batch`, `zoorank ask --sampler "
             "committee`); `random`; "
             "`balanced` = random with classes balanced (peeks at the hidden labels); "
             "`uncertainty` = largest entropy of the zoo's consensus kNN vote "
             "(`uncertainty_batch`, `zoorank ask`'s default).", ""]
    for z in zoos:
        lines += zoo_markdown(z, args)
    if len(zoos) > 1:
        lines += pooled_markdown(zoos, args)
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("zoos", nargs="*", metavar="NAME=RUN_YAML")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--round", type=int, default=20, help="labels per round")
    p.add_argument("--max-labels", type=int, default=300)
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    p.add_argument("--quick", action="store_true", help="2 seeds, 60 labels (a smoke run)")
    p.add_argument("--markdown", type=Path, help="write the tables here under the harness header "
                   "(default: print only; parallel --save runs write none)")
    p.add_argument("--save", type=Path, help="pickle the zoos' runs here (to merge runs made "
                   "in parallel processes)")
    p.add_argument("--merge", type=Path, nargs="+", default=[],
                   help="pickles of --save to report with the zoos run now")
    args = p.parse_args()
    if args.quick:
        args.seeds, args.max_labels = 2, 60
    _read_as_stored()
    t0 = time.perf_counter()
    zoos = [zoo_figures(*z.split("=", 1), args) for z in args.zoos]
    if args.save:
        args.save.write_bytes(pickle.dumps(zoos))
    for path in args.merge:
        zoos += pickle.loads(path.read_bytes())
    if not zoos:
        raise SystemExit("no zoo: give NAME=RUN_YAML or --merge")
    if len(zoos) > 1:
        print("\n".join(pooled_markdown(zoos, args)))
    if args.markdown:
        harness.write_results(args.markdown, TITLE, markdown(zoos, args, time.perf_counter() - t0))


if __name__ == "__main__":
    main()
