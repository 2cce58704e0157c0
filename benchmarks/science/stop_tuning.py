"""How the stopping rule's widening and the posterior's prior spread grid were chosen: the tuning
runs, reconstructed and committed.

``zoorank.metrics.active.label_posterior.SPREAD_GRID`` (prior spreads from 0.25 pp, commit ``07723fc``)
and ``STOP_WIDENING`` = 2.5 (commit ``d314c90``) were chosen on *tuning draws*: the labelled runs
of ``benchmarks/science/calibration.py`` (``calibration.labelled``) with seed 1001 instead of the reported
run's 0, 200 runs per setting, on the six simulated settings and the UvA classifiers. The script
that ran them was never committed; the constants' comments and ``benchmarks/results/
calibration.md`` kept its figures. This is that script, rebuilt from them:

* the same draws: ``calibration.labelled``'s generator sequence (seed 1001 + 7, each run's pool,
  model order and label order), the same looks (rounds of 20 to 500 labels, and the budgets 20,
  50, 100, 200, 500 for the calibration), 1,000 posterior draws seeded by the run;
* the candidates compared: the prior spread grid from 0.05 pp (before ``07723fc``) against the
  shipped grid from 0.25 pp, and the widenings 1, 1.5, 2, 2.5 and 3 (each the leader's p(best)
  under the posterior with its covariance multiplied by the widening, against the target 0.9;
  ``labelled_p_best_widened``: one mixture for every widening, each equal to its own call);
* what each was judged by: per setting, the stops and how many were right (the pick within
  0.5 pp of the best on the pool), and the ECE over every (model, run) pair at the budgets;
* the choice, as the comments describe it: the smallest widening at which every tuning setting's
  stops are all right *and* the near-tied settings (2, 4 and 8 tied best) do not stop at all
  (at 2 they were right but stopped 1–3 times: 2.5 "for the margin").

It then sets each figure the comments quote beside the reconstruction's (:data:`CLAIMS`).
Machines differ in their BLAS, so eigenvectors (and so the posterior draws) may differ in sign
and the reconstruction is the same experiment, not the same bits; a figure that differs is
reported as it comes out.

What is *not* reconstructed: the stop on P(leader within 0.5 pp of the best), tried on the same
draws and dropped (not a product function any more), and ``PRIOR_SAMPLES`` = 8, chosen earlier on
a posterior that has since changed.

Writes ``benchmarks/results/stop_tuning.md`` (``--markdown`` elsewhere)::

    PYTHONPATH=. .venv/bin/python benchmarks/science/stop_tuning.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import calibration as cal  # noqa: E402
import harness  # noqa: E402
import numpy as np  # noqa: E402

TITLE = "The tuning of the stopping rule's widening and the prior spread grid, reconstructed"
#: the prior spread grids compared (name → σ_b values); the second is the shipped one
GRIDS: dict[str, np.ndarray] = {
    "from 0.05 pp (before)": np.r_[0.0, np.geomspace(5e-4, 0.3, 24)],
    "from 0.25 pp (shipped)": np.r_[0.0, np.geomspace(2.5e-3, 0.3, 24)],
}
SHIPPED = "from 0.25 pp (shipped)"
WIDENINGS = (1.0, 1.5, 2.0, 2.5, 3.0)
NEAR_TIED = ("2 tied best", "4 tied best", "8 tied")
#: (grid, widening, setting, what, the figure the comments state); what: "right/fired" or
#: "fired" (of 200 runs) or "ece" (every (model, run) pair at the budgets, widening 1)
CLAIMS: tuple[tuple[str, float, str, str, str], ...] = (
    (SHIPPED, 1.0, "2 tied best", "right/fired", "6/11"),
    (SHIPPED, 1.0, "4 tied best", "right/fired", "9/11"),
    (SHIPPED, 1.0, "graded (1 pp steps)", "right/fired", "17/22"),
    (SHIPPED, 1.0, "unique best (1 pp ahead)", "right/fired", "4/5"),
    (SHIPPED, 1.0, "clear winner (5 pp ahead)", "fired", "179"),
    (SHIPPED, 2.0, "clear winner (5 pp ahead)", "fired", "146"),
    (SHIPPED, 2.5, "clear winner (5 pp ahead)", "fired", "114"),
    (SHIPPED, 3.0, "clear winner (5 pp ahead)", "fired", "88"),
    (SHIPPED, 2.5, "2 tied best", "fired", "0"),
    (SHIPPED, 2.5, "4 tied best", "fired", "0"),
    (SHIPPED, 2.5, "8 tied", "fired", "0"),
    ("from 0.05 pp (before)", 1.5, "graded (1 pp steps)", "right/fired", "7/9"),
    ("from 0.05 pp (before)", 1.5, "unique best (1 pp ahead)", "right/fired", "1/2"),
    ("from 0.05 pp (before)", 1.0, "uva classifiers (4, resampled)", "ece", "0.055"),
    (SHIPPED, 1.0, "uva classifiers (4, resampled)", "ece", "0.039"),
    ("from 0.05 pp (before)", 1.0, "4 tied best", "ece", "0.016"),
    (SHIPPED, 1.0, "4 tied best", "ece", "0.010"),
    ("from 0.05 pp (before)", 1.0, "8 tied", "ece", "0.005"),
    (SHIPPED, 1.0, "8 tied", "ece", "0.009"),
)


def tuning_runs(z: cal.Zoo, reps: int, pool: int, budgets: list[int], round_size: int,
                max_labels: int, target: float, seed: int, resamples: int) -> dict:
    """For each widening: fires, right stops, labels at stop; and the (p, outcome) pairs of the
    calibrated p(best) at the budgets: ``calibration.labelled``'s draws and looks, every
    widening from one posterior mixture per look."""
    from zoorank.metrics.active.label_posterior import labelled_p_best_widened

    rng = np.random.default_rng(seed + 7)  # calibration.labelled's sequence
    out = {w: {"fires": 0, "right": 0, "stops": [], "reps": reps} for w in WIDENINGS}
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    rounds = list(range(round_size, max_labels + 1, round_size))
    for r in range(reps):
        c, truth, cols = cal.pool_and_truth(z, pool, rng)
        n_pool = c.shape[0]
        order = rng.permutation(n_pool)
        share = cal.outcome_share(truth)
        looks = sorted(set(budgets) | {n for n in rounds if n <= n_pool})
        seen = z.labelled_correct(c, order, looks, cols)
        stopped: set[float] = set()
        for n in looks:
            ps = labelled_p_best_widened(seen[n], WIDENINGS, resamples, seed=r, population=n_pool)
            if n in budgets:
                pairs.append((ps[0], share))
            if n not in rounds:
                continue
            lead = int(np.argmax(ps[0]))
            for w, p in zip(WIDENINGS, ps, strict=True):
                if w not in stopped and p[lead] >= target:
                    stopped.add(w)
                    out[w]["fires"] += 1
                    out[w]["right"] += int(truth[lead] >= truth.max() - cal.TOL - 1e-12)
                    out[w]["stops"].append(n)
    return {"stops": out, "pairs": pairs}


def chosen(results: dict[str, dict], grid: str) -> float | None:
    """The widening the comments' rule picks on ``grid``: the smallest with every stop right on
    every setting and no stop on the near-tied ones."""
    for w in WIDENINGS:
        per = {z: res["stops"][w] for z, res in results[grid].items()}
        if all(s["right"] == s["fires"] for s in per.values()) and all(
                per[z]["fires"] == 0 for z in NEAR_TIED if z in per):
            return w
    return None


def reproduced(results: dict[str, dict], grid: str, w: float, zoo: str, what: str) -> str:
    if zoo not in results[grid]:
        return "not run"
    res = results[grid][zoo]
    s = res["stops"][w]
    if what == "right/fired":
        return f"{s['right']}/{s['fires']}"
    if what == "fired":
        return f"{s['fires']}"
    return f"{cal.reliability(res['pairs'])[0]:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--seed", type=int, default=1001, help="the tuning draws' seed")
    p.add_argument("--pool", type=int, default=2000)
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--uva-images", type=int, default=2000)
    p.add_argument("--cache", type=Path, default=Path("/tmp/zoorank-calibration"))
    p.add_argument("--no-uva", action="store_true")
    harness.results_option(p, "stop_tuning")
    args = p.parse_args()
    from threadpoolctl import threadpool_limits

    from zoorank.labels.stopping import TARGET
    from zoorank.metrics.active import label_posterior

    zoos = cal.simulated_zoos()
    if not args.no_uva:
        c = cal.uva_correctness(args.uva_images, args.cache)
        if c is not None:
            zoos.append(cal.Zoo("uva classifiers (4, resampled)", "real", correct=c))
    budgets, round_size, max_labels = [20, 50, 100, 200, 500], 20, 500
    start = time.perf_counter()
    results: dict[str, dict] = {g: {} for g in GRIDS}
    shipped_grid = label_posterior.SPREAD_GRID
    try:
        with threadpool_limits(1):
            for g, grid in GRIDS.items():
                label_posterior.SPREAD_GRID = grid  # _posteriors reads the module's grid
                for z in zoos:
                    t0 = time.perf_counter()
                    pool = args.pool if z.kind == "simulated" else len(z.correct)
                    results[g][z.name] = tuning_runs(z, args.reps, pool, budgets, round_size,
                                                     max_labels, TARGET, args.seed, args.resamples)
                    s = results[g][z.name]["stops"]
                    print(f"{g:<24} {z.name:<32} " + "  ".join(
                        f"×{w:g} {s[w]['right']}/{s[w]['fires']}" for w in WIDENINGS)
                        + f"  {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        label_posterior.SPREAD_GRID = shipped_grid
    assert np.array_equal(label_posterior.SPREAD_GRID, GRIDS[SHIPPED]), "the shipped grid moved"
    body = [f"{time.perf_counter() - start:.0f} s. Tuning draws: seed {args.seed}, {args.reps} runs "
            f"per setting, labels in random order, {round_size} a round up to {max_labels}, target "
            f"{TARGET}; the zoos: " + ", ".join(z.name for z in zoos) + ". These are the draws "
            "the choices were made on (in-sample by construction): the rule's record on zoos "
            "it was not tuned on is `benchmarks/results/stop_heldout.md` and the held-out rows "
            "of `benchmarks/results/calibration.md`.", ""]
    body += ["## The choice, by the comments' rule", ""]
    for g in GRIDS:
        w = chosen(results, g)
        body.append(f"- Grid {g}: the smallest widening with every stop right on every setting "
                    f"and no stop on the near-tied ones: "
                    + (f"**{w:g}**" if w is not None else "none of " + ", ".join(map(str, WIDENINGS)))
                    + ".")
    body += ["", "## The figures the comments quote, reconstructed", "",
             harness.table(["grid", "widening", "setting", "figure", "as stated", "reconstructed"],
                           [[g, f"{w:g}", z, what, claimed, reproduced(results, g, w, z, what)]
                            for g, w, z, what, claimed in CLAIMS], "l" * 6)]
    for g in GRIDS:
        rows = []
        for z in zoos:
            res = results[g][z.name]
            rows.append([z.name, *(f"{res['stops'][w]['right']}/{res['stops'][w]['fires']}"
                                   for w in WIDENINGS),
                         f"{cal.reliability(res['pairs'])[0]:.3f}",
                         f"{cal.reliability(res['pairs'], leader_only=True)[0]:.3f}"])
        body += ["", f"## Grid {g}: right stops / stops (of {args.reps} runs) per widening, and "
                 "the calibrated p(best)'s ECE", "",
                 harness.table(["setting", *(f"widened ×{w:g}" for w in WIDENINGS),
                                "ECE, every pair", "ECE, leader"], rows, "l" * (len(WIDENINGS) + 3))]
    text = "\n".join(body)
    print(text)
    harness.write_results(args.markdown, TITLE, text)


if __name__ == "__main__":
    main()
