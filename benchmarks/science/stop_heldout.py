"""The stopping rule and p(best | labels) on zoos nothing was tuned on: one look, its protocol
committed first.

The stopping rule's widening (``zoorank.metrics.active.label_posterior.STOP_WIDENING`` = 2.5) and the
posterior's prior spread grid were chosen on draws of six simulated settings and the UvA
classifiers (``benchmarks/science/stop_tuning.py``). This script measures the rule as shipped,
and the calibration of the printed p(best | labels), on zoos none of those choices saw:

* **A, real classifier zoos:** the fifteen held-out shift domains of
  ``benchmarks/science/shift_heldout.py`` (:data:`shift_benchmark.HELDOUT_CORRUPTIONS`): 31
  CIFAR-10 classifiers, each image's correctness by the model's own head (top-1), the domain's
  1,000 images the pool; read from the predictions ``shift_heldout.py`` caches (run it first).
  A domain whose best model is under 20 % top-1 is left out, as there.
* **B, new simulated settings** (:func:`new_settings`): correctness simulated as in
  ``benchmarks/science/calibration.py`` (a shared per-image difficulty), at settings the tuning never
  drew: other zoo sizes, accuracy levels, gaps and error correlations.

Protocol (fixed and committed before any figure on these zoos was computed):

* labels revealed in random order, 20 a round, up to 500 labels (the calibration harness's
  protocol, ``calibration.labelled``); 50 runs per real domain, 100 per simulated setting
  (amended before any run from 100 and 200: the shared 2-core machine ran at load 40); seed 0;
  the pool is the domain's 1,000 images (A) or 2,000 simulated images (B);
* *stop*: the rule as shipped (the leader's p(best | labels) with the posterior widened by
  ``STOP_WIDENING`` ≥ ``zoorank.labels.stopping.TARGET`` = 0.9); *right*: the pick's accuracy on
  the pool is within 0.5 pp of the best's;
* **S-A / S-B, the stopping rule's claim** ("when it stops, the pick is right at least 9 times
  in 10"): met on a group when its pooled right stops / stops ≥ 0.90 and no zoo of it with
  ≥ 5 stops is right in under 0.80 of them; with fewer than 20 stops in the group, the look is
  too small to judge and reported as *not met*;
* **C1**: p(best | labels) has a Brier skill > 0 against the uniform p on every zoo of A and B;
* **C2**: no zoo of A or B reads *over-confident* at p ≥ 0.8 (``calibration.confidence_verdict``);
* one look: the figures are written as they come out, a bar not met is reported as not met.

Writes ``benchmarks/results/stop_heldout.md`` (``--markdown`` elsewhere)::

    PYTHONPATH=. .venv/bin/python benchmarks/science/stop_heldout.py
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
import shift_benchmark as B  # noqa: E402

TITLE = "The stopping rule and p(best | labels) on held-out zoos"
#: a claim holds on a group when right / stops reaches this ...
RIGHT_BAR = 0.90
#: ... and no zoo with at least MIN_ZOO_STOPS stops is right in under ZOO_BAR of them ...
ZOO_BAR, MIN_ZOO_STOPS = 0.80, 5
#: ... over at least this many stops in the group (fewer: too small to judge, not met)
MIN_STOPS = 20
NEAR_CHANCE = 0.20


def new_settings() -> list[cal.Zoo]:
    """Simulated settings the tuning never drew (it drew 8 models at ~0.80 accuracy, ρ = 0.7:
    1 pp ahead, 2/4/8 tied, 5 pp ahead, 1 pp steps)."""
    rest = np.array([0.79, 0.785, 0.78, 0.775, 0.77, 0.765, 0.76])
    sixteen = 0.80 - np.r_[0.0, 0.0, 0.0, np.linspace(0.01, 0.05, 13)]
    return [
        cal.Zoo("new: 2 pp ahead (8 models)", "simulated", np.r_[0.82, rest]),
        cal.Zoo("new: 3 tied best of 16", "simulated", sixteen),
        cal.Zoo("new: 1 pp ahead at 0.60 accuracy", "simulated", np.r_[0.60, rest - 0.20]),
        cal.Zoo("new: 2 tied best, ρ = 0.3", "simulated", np.r_[0.80, 0.80, rest[1:] - 0.005],
                rho=0.3),
        cal.Zoo("new: 0.5 pp steps (12 models)", "simulated", 0.80 - 0.005 * np.arange(12)),
    ]


def shift_zoos(folder: Path) -> tuple[list[cal.Zoo], list[str]]:
    """The held-out shift domains as real zoos (correctness of each head's top-1), and the
    domains left out (near chance or not predicted)."""
    zoos, left = [], []
    for c, s in B.HELDOUT_CORRUPTIONS:
        name = B.domain_name(c, s)
        path = folder / f"{name}.npz"
        if not path.exists():
            left.append(f"{name} (no predictions)")
            continue
        d = np.load(path)
        correct = (d["logits"].argmax(axis=2) == d["labels"][None, :]).T.astype(np.float64)
        if correct.mean(axis=0).max() < NEAR_CHANCE:
            left.append(f"{name} (near chance)")
            continue
        zoos.append(cal.Zoo(f"{name} ({correct.shape[1]} classifiers)", "real", correct=correct))
    return zoos, left


def claim(rows: list[tuple[str, dict]]) -> tuple[bool, str]:
    """(met, figures) of the stopping rule's claim over one group's zoos (the module's bar)."""
    fires = sum(lab["fires"] for _, lab in rows)
    right = sum(lab["right"] for _, lab in rows)
    bad = [n for n, lab in rows if lab["fires"] >= MIN_ZOO_STOPS and lab["right"] / lab["fires"] < ZOO_BAR]
    figures = (f"{right} right of {fires} stops ({cal._share(right, fires)}) in "
               f"{sum(lab['reps'] for _, lab in rows)} runs over {len(rows)} zoos"
               + (f"; zoos with ≥ {MIN_ZOO_STOPS} stops under {ZOO_BAR:.2f}: {', '.join(bad)}"
                  if bad else ""))
    if fires < MIN_STOPS:
        return False, figures + f" — fewer than {MIN_STOPS} stops: too small to judge"
    return right / fires >= RIGHT_BAR and not bad, figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--predictions", type=Path, default=None,
                   help="the folder of shift_heldout.py's predictions (default: the shift "
                        "benchmark's cache for the trained zoo's commit, n1000, s1000)")
    p.add_argument("--real-runs", type=int, default=50)
    p.add_argument("--sim-runs", type=int, default=100)
    p.add_argument("--pool", type=int, default=2000)
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--groups", default="A,B", help="the groups to measure: A, B or A,B")
    p.add_argument("--save", type=Path, default=None, help="keep the measured zoos (pickle)")
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="render the zoos of earlier --save runs instead of measuring")
    harness.results_option(p, "stop_heldout")
    args = p.parse_args()
    import pickle

    import shift_zoo as Z
    from threadpoolctl import threadpool_limits

    from zoorank.labels.stopping import TARGET
    from zoorank.metrics.active.label_posterior import STOP_WIDENING

    folder = args.predictions or B.CACHE / Z.training_commit() / "predictions-n1000-s1000"
    groups = args.groups.split(",")
    real, left = shift_zoos(folder) if "A" in groups and not args.merge else ([], [])
    sims = new_settings() if "B" in groups and not args.merge else []
    budgets, round_size, max_labels = [20, 50, 100, 200, 500], 20, 500
    start = time.perf_counter()
    summaries, stops = [], []
    if args.merge:
        for path in args.merge:
            part = pickle.loads(path.read_bytes())
            summaries += part["summaries"]
            stops += part["stops"]
            left += part["left"]
    with threadpool_limits(1):
        for z in real + sims:
            t0 = time.perf_counter()
            reps = args.real_runs if z.kind == "real" else args.sim_runs
            pool = len(z.correct) if z.kind == "real" else args.pool
            labs = cal.labelled(z, reps, pool, budgets, round_size, max_labels, TARGET, args.seed,
                                args.resamples, baseline_reps=0)
            prod = labs["product"]
            group = "A: held-out shift domain" if z.kind == "real" else "B: new simulated setting"
            summaries.append({"name": z.name, "status": group, "models": z.size,
                              "labels": cal.leader_summary([[prod["pairs"][b][r] for b in budgets]
                                                            for r in range(prod["reps"])])})
            for method in ("product", "product, unwidened stop"):
                stops.append((z.name, group, method, labs[method]))
            print(f"{z.name:<40} fired {prod['fires']}/{prod['reps']} right {prod['right']}  "
                  f"Brier skill {summaries[-1]['labels']['skill']:+.2f}  "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    if args.save:  # a part: rendered later with the others (--merge)
        args.save.write_bytes(pickle.dumps({"summaries": summaries, "stops": stops, "left": left}))
        print(f"saved {len(summaries)} zoo(s) to {args.save}")
        return
    took = ("Rendered from the saved runs of " + ", ".join(f"`{m.name}`" for m in args.merge)
            if args.merge else f"{time.perf_counter() - start:.0f} s")
    body = [f"{took}. Predictions: `{folder}`. Protocol: the "
            "docstring of `benchmarks/science/stop_heldout.py`, committed before this run (one "
            f"look). Stop: leader's p(best | labels) widened by {STOP_WIDENING:g} ≥ {TARGET}; "
            f"labels in random order, {round_size} a round, up to {max_labels}.", ""]
    if left:
        body += ["Left out: " + ", ".join(left) + ".", ""]
    body += ["## Verdicts (pre-registered)", ""]
    for label, grp in (("S-A, stops on the held-out shift domains", "A"),
                       ("S-B, stops on the new simulated settings", "B")):
        rows = [(n, lab) for n, g, m, lab in stops if m == "product" and g.startswith(grp)]
        met, figures = claim(rows)
        body.append(f"- **{label}: {'met' if met else 'NOT MET'}.** {figures}.")
    skill_bad = [s["name"] for s in summaries if not s["labels"]["skill"] > 0]
    over = [s["name"] for s in summaries if cal.confidence_verdict(s["labels"]) == "over-confident"]
    body += [f"- **C1, Brier skill > 0 on every zoo: {'met' if not skill_bad else 'NOT MET'}.** "
             + ("Not on: " + ", ".join(skill_bad) + "." if skill_bad else
                f"Lowest {min(s['labels']['skill'] for s in summaries):+.2f}."),
             f"- **C2, no zoo over-confident at p ≥ {cal.CONFIDENT:g}: "
             f"{'met' if not over else 'NOT MET'}.** "
             + ("Over-confident on: " + ", ".join(over) + "." if over else "")]
    body += ["", "## The stopping rule, per zoo", "",
             "*Fired*: runs in which the rule stopped at one of its looks (every round, the last at "
             "the budget; Wilson 95%); *labels at "
             "stop*: median (min–max); *right*: of the stops (Wilson 95%). *product, unwidened "
             "stop*: the same runs stopping on the calibrated p(best), for comparison (not the "
             "rule).", "",
             harness.table(["zoo", "group", "posterior", "fired (of runs)", "labels at stop",
                            "right (of stops)", "mean regret when fired (pp)"],
                           [cal.stop_row(n, g, m, lab, max_labels) for n, g, m, lab in stops],
                           "l" * 7)]
    body += ["", "## p(best | labels), per zoo", "",
             "The calibration harness's lead figures (`benchmarks/results/calibration.md` defines "
             "them): the leader's ECE, the Brier score against the uniform p, the sharpness, "
             f"and the leader's predictions at p ≥ {cal.CONFIDENT:g}; runs × {len(budgets)} "
             f"budgets ({', '.join(map(str, budgets))}).", "",
             harness.table(cal.LEAD_HEADER, cal.lead_rows(summaries, "labels"),
                           "l" * len(cal.LEAD_HEADER))]
    text = "\n".join(body)
    print(text)
    harness.write_results(args.markdown, TITLE, text)


if __name__ == "__main__":
    main()
