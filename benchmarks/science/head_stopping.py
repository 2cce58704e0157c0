"""The stopping rule of ``zoorank ask`` on classifier zoos, measured as the product asks.

Each run simulates ``zoorank ask`` / ``zoorank label`` on one pool of cached prediction matrices:
rounds of ``--round`` labels chosen by CODA exactly as ``zoorank.labels.head_predictions.coda_batch``
calls it (``coda_next(P, labelled, labels, excluded, k, seed=seed + round)``: the product's candidates
and grid; the prior built once, as ``coda_next`` would), hidden labels revealed as asked, up to
``--budget`` labels. After every round the pick is the product's, the argmax of p(best | labels)
(``labelled_p_best`` of the heads' top-1 correctness on the labelled images, the pool as the
population), and three stopping rules are evaluated:

* ``a``: CODA's class-mix score of CODA's own leader ≥ ``--target`` (the rule and the pick before
  2026-11-29; a diagnostic, its rightness that of CODA's leader);
* ``b``: the product's rule, the calibrated posterior widened for the repeated looks:
  ``labelled_p_best(correct, population=pool, widen=STOP_WIDENING)[pick]`` ≥ target;
* ``c``: the same unwidened (``widen=1``), a diagnostic.

(``benchmarks/results/head_stopping.md`` was measured before that change, with CODA's earlier
scale and every rule read at CODA's leader.)

A rule *stops* a run at the first round whose value clears the target; the stop is *right* when the
leader's top-1 accuracy on the pool is within 0.5 pp (``TIE_TOLERANCE``) of the pool's best. The
labels are CODA's choice, not a random sample: disputed images are over-represented, which the
correctness posterior of ``b``/``c`` does not model; the reliability tables (the leader's value in
bins against the share of those rounds whose leader is right) show whether that makes it
over-confident.

Zoos: the four UvA CIFAR-10 classifiers (``--uva``, 2,000 cached test images; pools of ``--uva-pool``
drawn per seed as ``benchmarks/science/coda_labels.py`` draws them) and the shift benchmark's domains
(``--shift-dir``, 31 classifiers, 1,000 images each; pools of ``--shift-pool`` drawn per seed: on a
fixed pool the product's CODA is deterministic, every free image being a candidate, so seeds differ
only through the pool). Runs go seed-major (every zoo's seed 0, then seed 1, ...), ``--jobs``
processes, each finished run appended to ``--out`` (JSON lines) at once; ``--report`` reads that
file and writes the tables (``--markdown``), so a run cut short by the clock still reports every
finished seed::

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python benchmarks/science/head_stopping.py \\
        --out /tmp/head_stopping.jsonl
    PYTHONPATH=. .venv/bin/python benchmarks/science/head_stopping.py --out /tmp/head_stopping.jsonl \\
        --report --markdown benchmarks/results/head_stopping.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
from coda_labels import load_npz

from zoorank.labels.stopping import TARGET
from zoorank.metrics.active import coda
from zoorank.metrics.active.label_posterior import STOP_WIDENING, TIE_TOLERANCE, labelled_p_best_widened

TITLE = "The stopping rule of `zoorank ask` on classifier zoos, with CODA asking"
RULES = {
    "a": "CODA's class-mix score [CODA's leader] (diagnostic)",
    "b": f"labelled_p_best widened {STOP_WIDENING:g} [pick] (the product)",
    "c": "labelled_p_best unwidened [pick] (diagnostic)",
}
SHIFT_DOMAINS = ("motion_blur-s1", "impulse_noise-s1", "pixelate-s1", "clean", "gaussian_noise-s1")
BINS = np.linspace(0.0, 1.0, 11)


def draw_pool(n_all: int, size: int, seed: int) -> np.ndarray:
    """The sorted image positions of seed ``seed``'s pool (``benchmarks/science/coda_labels.py``'s draw)."""
    rng = np.random.default_rng(1000 + seed)
    return np.sort(rng.choice(n_all, size=min(size, n_all), replace=False))


def simulate(P: np.ndarray, y: np.ndarray, seed: int, round_size: int, budget: int) -> list[dict]:
    """One ``zoorank ask`` run on pool predictions ``P`` (M, N, K) with hidden labels ``y``: per
    round, the labels spent, CODA's leader, its regret (pp) and rightness, and its value under each
    rule of :data:`RULES`."""
    n = P.shape[1]
    prior = coda.coda_prior(P)
    votes = prior.votes
    acc = (votes == y[None, :]).mean(axis=1)
    mask = np.zeros(n, dtype=bool)
    rounds = []
    for round_ in range(1, budget // round_size + 1):
        at = np.flatnonzero(mask)
        batch = coda.coda_next(P, at, y[at], excluded=mask, k=round_size, seed=seed + round_,
                               prior=prior)
        if not len(batch):
            break
        mask[batch] = True
        at = np.flatnonzero(mask)
        p_coda, _ = coda.coda_belief(prior, at, y[at])
        coda_leader = int(np.argmax(p_coda))
        correct = (votes[:, at] == y[at][None, :]).T.astype(np.float64)
        unwidened, widened = labelled_p_best_widened(correct, (1.0, STOP_WIDENING), seed=seed,
                                                     population=n)
        leader = int(np.argmax(unwidened))
        regret = float(acc.max() - acc[leader])
        rounds.append({"labels": len(at), "leader": leader, "regret_pp": 100 * regret,
                       "right": bool(regret <= TIE_TOLERANCE + 1e-12),
                       "coda_leader": coda_leader,
                       "coda_right": bool(acc.max() - acc[coda_leader] <= TIE_TOLERANCE + 1e-12),
                       "a": float(p_coda[coda_leader]), "b": float(widened[leader]),
                       "c": float(unwidened[leader])})
    return rounds


def one_run(task: tuple) -> dict:
    zoo, path, pool_size, seed, round_size, budget = task
    P_all, y_all, ids = load_npz(Path(path))
    pool = draw_pool(P_all.shape[1], pool_size, seed)
    P, y = P_all[:, pool], y_all[pool]
    start = time.perf_counter()
    rounds = simulate(P, y, seed, round_size, budget)
    acc = (P.argmax(axis=2) == y[None]).mean(axis=1)
    return {"zoo": zoo, "seed": seed, "pool": len(pool), "models": len(ids),
            "best": ids[int(np.argmax(acc))], "best_acc": float(acc.max()),
            "within_tol": int((acc >= acc.max() - TIE_TOLERANCE - 1e-12).sum()),
            "seconds": time.perf_counter() - start, "rounds": rounds}


def stop_of(run: dict, rule: str, target: float) -> dict | None:
    """The round at which ``rule`` stops ``run`` (None: not within the budget), its ``right``
    that of the leader the rule reads (CODA's for ``a``)."""
    stop = next((r for r in run["rounds"] if r[rule] >= target), None)
    if stop is not None and rule == "a":
        stop = {**stop, "right": stop["coda_right"]}
    return stop


def stop_rows(runs: list[dict], target: float) -> tuple[list[list[str]], dict]:
    zoos = list(dict.fromkeys(r["zoo"] for r in runs))
    rows, pooled = [], {rule: [0, 0, 0] for rule in RULES}
    for zoo in [*zoos, None]:
        these = [r for r in runs if zoo is None or r["zoo"] == zoo]
        for rule in RULES:
            stops = [s for s in (stop_of(r, rule, target) for r in these) if s is not None]
            right = sum(s["right"] for s in stops)
            if zoo is None:
                pooled[rule] = [len(these), len(stops), right]
            share = f"{right / len(stops):.2f}" if stops else "—"
            labels = f"{np.mean([s['labels'] for s in stops]):.0f}" if stops else "—"
            regret = f"{np.mean([s['regret_pp'] for s in stops]):.2f}" if stops else "—"
            last = [r["rounds"][-1] for r in these if r["rounds"]]
            rows.append(["**all zoos**" if zoo is None else zoo, rule,
                         f"{len(stops)}/{len(these)}", f"{right}/{len(stops)}", share, labels,
                         regret, f"{np.mean([x[rule] for x in last]):.3f}"])
    return rows, pooled


def reliability(runs: list[dict], rule: str) -> tuple[list[list[str]], float, int]:
    """Every (run, round) leader's value under ``rule`` in 10 equal bins against the share of
    those rounds whose leader is right; ECE = Σ (count / total) |mean value − share right|."""
    p = np.array([x[rule] for r in runs for x in r["rounds"]])
    key = "coda_right" if rule == "a" else "right"
    ok = np.array([x[key] for r in runs for x in r["rounds"]], dtype=np.float64)
    which = np.clip(np.digitize(p, BINS[1:-1]), 0, len(BINS) - 2)
    rows, ece = [], 0.0
    for b in range(len(BINS) - 1):
        sel = which == b
        if not sel.any():
            continue
        ece += sel.sum() / len(p) * abs(p[sel].mean() - ok[sel].mean())
        rows.append([f"{BINS[b]:.1f}–{BINS[b + 1]:.1f}", str(int(sel.sum())), f"{p[sel].mean():.3f}",
                     f"{ok[sel].mean():.3f}"])
    return rows, ece, len(p)


def report(runs: list[dict], target: float, markdown: Path | None) -> None:
    out = harness.Report()
    zoos = list(dict.fromkeys(r["zoo"] for r in runs))
    out.say("## Zoos\n")
    out.say(harness.table(
        ["zoo", "models", "pool", "seeds", "best (most seeds)", "models within 0.5 pp of the best "
         "(mean)", "s/seed"],
        [[z, str(rs[0]["models"]), str(rs[0]["pool"]), str(len(rs)),
          max(set(b := [r["best"] for r in rs]), key=b.count),
          f"{np.mean([r['within_tol'] for r in rs]):.1f}",
          f"{np.mean([r['seconds'] for r in rs]):.0f}"]
         for z in zoos for rs in [[r for r in runs if r["zoo"] == z]]]))
    out.say("\n## Stops\n")
    out.say("Rules: " + "; ".join(f"`{k}` {v}" for k, v in RULES.items()) + f". Target {target}. "
            "*Stops*: runs the rule stops within the budget; *right*: stops whose leader is within "
            "0.5 pp of the pool's best top-1; *labels*, *regret*: means at the stop; *value at the "
            "budget*: the leader's value after the last round, mean over runs.\n")
    rows, pooled = stop_rows(runs, target)
    out.say(harness.table(["zoo", "rule", "stops", "right", "share right", "labels at stop",
                           "regret at stop (pp)", "value at the budget"], rows))
    out.say("\n## Reliability of the leader's value (every run, every round)\n")
    out.say("Each round's pick (CODA's leader for `a`) with its value under the rule, binned; "
            "*share right*: those rounds whose leader is within 0.5 pp of the best. Rounds of one "
            "run are correlated.\n")
    for rule in RULES:
        rows_r, ece, count = reliability(runs, rule)
        out.say(f"#### rule {rule}: {RULES[rule]}, all zoos (ECE {ece:.3f} over {count} rounds)\n")
        out.say(harness.table(["bin", "rounds", "mean value", "share right"], rows_r))
        per_zoo = [f"{z} {reliability([r for r in runs if r['zoo'] == z], rule)[1]:.3f}" for z in zoos]
        out.say("\nECE per zoo: " + ", ".join(per_zoo) + "\n")
    out.say("## Leader right, by labels (share of runs)\n")
    counts = sorted({x["labels"] for r in runs for x in r["rounds"]})
    right_at = [[z, *(f"{np.mean(ok):.2f}" for c in counts
                      for ok in [[x["right"] for r in runs if r["zoo"] == z for x in r["rounds"]
                                  if x["labels"] == c]])] for z in zoos]
    out.say(harness.table(["zoo", *map(str, counts)], right_at))
    agree = np.mean([x["coda_leader"] == x["leader"] for r in runs for x in r["rounds"]])
    out.say(f"\nRounds where CODA's class-mix leader is the pick: {agree:.2f}.")
    out.say("\n## Pooled (for the decision)\n")
    for rule, (n_runs, stops, right) in pooled.items():
        out.say(f"rule {rule}: {stops} stops of {n_runs} runs, {right} right"
                + (f" ({right / stops:.3f})" if stops else ""))
    if markdown:
        out.write(markdown, TITLE)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/head_stopping.jsonl"))
    p.add_argument("--uva", default="/tmp/zoorank-coda-labels/uva_2000.npz",
                   help="the UvA nets' cached predictions ('' skips them)")
    p.add_argument("--uva-pool", type=int, default=1000)
    p.add_argument("--shift-dir",
                   default=str(Path.home() / ".cache/zoorank-shift/98158ef/predictions-n1000-s1000"))
    p.add_argument("--shift-pool", type=int, default=800)
    p.add_argument("--domains", nargs="*", default=list(SHIFT_DOMAINS))
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--round", type=int, default=20)
    p.add_argument("--budget", type=int, default=300)
    p.add_argument("--target", type=float, default=TARGET)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--report", action="store_true", help="only read --out and write the tables")
    p.add_argument("--markdown", type=Path)
    args = p.parse_args()
    if not args.report:
        zoos = [("uva4", args.uva, args.uva_pool)] * bool(args.uva) + [
            (d, str(Path(args.shift_dir) / f"{d}.npz"), args.shift_pool) for d in args.domains]
        tasks = [(z, path, size, seed, args.round, args.budget)
                 for seed in range(args.first_seed, args.first_seed + args.seeds)
                 for z, path, size in zoos]
        with multiprocessing.get_context("spawn").Pool(args.jobs) as workers, \
                args.out.open("a") as sink:
            for run in workers.imap_unordered(one_run, tasks):
                sink.write(json.dumps(run) + "\n")
                sink.flush()
                stops = {rule: (s["labels"], s["right"]) if (s := stop_of(run, rule, args.target))
                         else None for rule in RULES}
                print(f"{time.strftime('%H:%M:%S')} {run['zoo']} seed {run['seed']} "
                      f"{run['seconds']:.0f} s: {stops}", flush=True)
    runs = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
    report(runs, args.target, args.markdown)


if __name__ == "__main__":
    main()
