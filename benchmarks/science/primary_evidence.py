"""Which default primary metric? Evidence across zoos (issues 17, 24 and 30).

For every zoo (a run config whose store holds a finished ``zoorank run`` with the label oracle and
``score.resample_folds`` ≥ 2) and every candidate ordering, this prints

* Kendall τ-b of the candidate's order against each oracle (all ranked models; positive = agrees),
* the candidate's **top set** (the rank-consistent Model Confidence Set over the fold bootstrap of
  the evaluation images, computed exactly as the RANK stage does:
  :func:`zoorank.decide.rank_intervals.metric_uncertainty`,
  :func:`zoorank.stats.uncertainty.rank_uncertainty`,
  blocking health flags respected) and, beside it, the size the old rule gave ("at least as good as
  the point-best model in ≥ 1 − c of the replicates"),
* the **oracle's own top set** (the same fold bootstrap and MCS over the oracle's per-fold
  accuracies on its test images, :func:`zoorank.decide.oracle_top_sets.oracle_top_sets`; needs oracle rows of
  ``ORACLE_VERSION`` ≥ 3), whether the two sets overlap, and the regret (the oracle's best accuracy
  minus the best inside the candidate's top set) against the oracle's noise (the half-width at the
  run's confidence of that paired accuracy difference over the replicates).

Candidates: every resampled label-free metric, and two consensus orders — the mean rank over the
label-free metrics the config computes (``consensus``: the metrics of the report's Kendall's W), and
the same without the width-sensitive ones (``consensus_width_free``) — each with its top set from
the same replicates (replicate b's mean rank uses every metric's replicate b; the fold draws are
shared, so the metrics stay paired). Nothing is fitted: the oracle is read only to score the
candidates. A zoo *passes* for a candidate (issue 24's done-when) when its top set overlaps the
oracle's own top set (not counted where that set holds every model: issue 30), or its regret lies
within the oracle's noise, and it holds at most half the zoo; a candidate without a value on a zoo
is "not run" there, neither a pass nor a miss; :func:`choose_default` turns the rows into the
in-sample order of issue 24 (the default itself is now chosen out of sample by
``benchmarks/science/default_lozo.py``). Prints, never asserts::

    .venv/bin/python benchmarks/science/primary_evidence.py demo=/tmp/evidence/demo/run.yaml \\
        digits=/tmp/zoorank-validate/digits/validate_run.json \\
        --markdown benchmarks/results/primary_evidence.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import pandas as pd
from scipy import stats

import zoorank.runtime  # noqa: F401  (quiet Ray environment; no Ray is started here)

ORACLES = ("knn_accuracy", "linear_probe_accuracy")
TITLE = "Default primary metric: evidence across zoos"


def zoo_inputs(run_yaml: Path) -> tuple[Any, Any, pd.DataFrame, pd.DataFrame, dict[str, np.ndarray]]:
    """(config, store, stored leaderboard, fresh fold rows, blocked models per dataset) of the run
    config ``run_yaml`` (or validate_ranking.py's ``validate_run.json``)."""
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import load_config
    from zoorank.decide.leaderboard import read_leaderboard
    from zoorank.oracle import resample
    from zoorank.stats.health import BLOCKING
    from zoorank.store import Store

    if run_yaml.suffix == ".json":  # validate_ranking.py's validate_run.json
        import json

        from zoorank.config.loading import parse_config

        config = parse_config(json.loads(run_yaml.read_text())["run_config"], str(run_yaml))
    else:
        config = load_config(run_yaml)
    store = Store(config.store)
    board, _settings = read_leaderboard(store)
    catalog = build_catalog(config)
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    folds = resample.fresh_resamples(store, metrics, config.score)
    if folds.empty:  # the top sets need them; a store scored by other code has none fresh
        raise SystemExit(f"{run_yaml}: no fresh fold values in {config.store} (needs "
                         "score.resample_folds ≥ 2 and a store scored by this code): rerun "
                         "`zoorank run` on it")
    flags = board["flags"].fillna("").astype(str).tolist()
    # one dataset per zoo here: a model is blocked when any of its flags is blocking
    blocked = np.array([bool({f.split(":")[-1] for f in fl.split(",") if f} & BLOCKING)
                        for fl in flags])
    return config, store, board, folds, {d.name: blocked for d in config.datasets}


def _mean_rank(rank_rows: Sequence[np.ndarray]) -> np.ndarray:
    """Per model, the mean over metrics of its rank (1 = best; NaN ranks skipped)."""
    r = np.vstack(rank_rows)
    with np.errstate(invalid="ignore"):
        counts = np.isfinite(r).sum(axis=0)
        return np.where(counts > 0, np.nansum(r, axis=0) / np.maximum(counts, 1), np.nan)


def _old_rule(point: np.ndarray, u: Any, confidence: float, blocked: np.ndarray) -> np.ndarray:
    """The top set of the rule before issue 24: the point-best unblocked model(s) and every model
    at least as good as it in ≥ 1 − c of the replicates (``share_vs_best``)."""
    from zoorank.stats.uncertainty import snap

    p = snap(point[None, :])[0]
    ok = np.isfinite(p) & ~blocked
    if not ok.any():
        return ok
    best = ok & (p == np.max(p[ok]))
    return ok & (best | (np.nan_to_num(u.share_vs_best, nan=0.0) >= 1 - confidence - 1e-12))


def _raw_mcs(point: np.ndarray, reps: np.ndarray, confidence: float,
             blocked: np.ndarray) -> int:
    """Size of the MCS before its upward closure (how much the closure adds)."""
    from zoorank.stats.uncertainty import model_confidence_set, snap

    p, r = snap(point[None, :])[0], snap(reps)
    ok = np.flatnonzero(np.isfinite(p) & ~blocked)
    if ok.size == 0:
        return 0
    return int(model_confidence_set(p[ok], r[:, ok], 1 - confidence)[0].sum())


def candidates(config: Any, board: pd.DataFrame, folds: pd.DataFrame,
               blocked: Mapping[str, np.ndarray], dataset: str) -> dict[str, dict[str, Any]]:
    """name → {"order": oriented point values (higher = better), "top": bool per model}."""
    from zoorank.decide.concordance import consensus
    from zoorank.decide.rank_intervals import metric_uncertainty
    from zoorank.decide.rank_intervals import unflagged_uncertainty as rank_uncertainty
    from zoorank.metrics.primary import WIDTH_SENSITIVE
    from zoorank.stats.uncertainty import replicate_ranks

    _, replicates = metric_uncertainty(config, board, folds, blocked)
    out: dict[str, dict[str, Any]] = {}
    for (ds, metric), (point, reps) in replicates.items():
        if ds != dataset:
            continue
        u = rank_uncertainty(point, reps, config.rank.confidence, blocked[ds])
        out[metric] = {"order": point, "top": u.in_top_set, "p_best": u.p_best,
                       "old_top": _old_rule(point, u, config.rank.confidence, blocked[ds]),
                       "raw": _raw_mcs(point, reps, config.rank.confidence, blocked[ds])}
    members = consensus(board, dataset, [], pd.DataFrame())["metrics"]
    sets = {"consensus": [m for m in members if (dataset, m) in replicates],
            "consensus_width_free": [m for m in members if (dataset, m) in replicates
                                     and m not in WIDTH_SENSITIVE]}
    for name, chosen in sets.items():
        if len(chosen) < 2:
            continue
        # ranks 1 = best, ties averaged, NaN stays NaN; replicate b's from every metric's b
        point = -_mean_rank([replicate_ranks(replicates[(dataset, m)][0][None, :], "average")[0]
                             for m in chosen])
        n_rep = replicates[(dataset, chosen[0])][1].shape[0]
        rank_reps = [replicate_ranks(replicates[(dataset, m)][1], "average") for m in chosen]
        reps = np.vstack([-_mean_rank([r[b] for r in rank_reps]) for b in range(n_rep)])
        u = rank_uncertainty(point, reps, config.rank.confidence, blocked[dataset])
        out[name] = {"order": point, "top": u.in_top_set, "p_best": u.p_best, "members": chosen,
                     "old_top": _old_rule(point, u, config.rank.confidence, blocked[dataset]),
                     "raw": _raw_mcs(point, reps, config.rank.confidence, blocked[dataset])}
    return out


def zoo_rows(name: str, run_yaml: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from zoorank.decide.leaderboard import read_leaderboard_settings
    from zoorank.decide.oracle_top_sets import oracle_top_sets

    config, store, board, folds, blocked = zoo_inputs(run_yaml)
    ids = list(board["model_id"])
    oracle_rows = store.read_frame("oracle")
    oracle_rows = oracle_rows[oracle_rows["model_id"].isin(ids)]
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"zoo": name, "models": len(ids), "run": str(run_yaml),
                            "consensus_members": {}, "default": config.primary_metric}
    info["ordered_by"] = read_leaderboard_settings(store).get("ordered_by")
    for d in config.datasets:
        cands = candidates(config, board, folds, blocked, d.name)
        # the stored leaderboard as RANK wrote it: its order and top set (the product's answer)
        cands["leaderboard"] = {
            "order": -board["rank"].to_numpy(dtype=np.float64),
            "top": board["in_top_set"].fillna(False).astype(bool).to_numpy()}
        for key in ("consensus", "consensus_width_free"):
            if key in cands:
                info["consensus_members"][key] = cands[key]["members"]
        for oracle in ORACLES:
            col = f"{d.name}/{oracle}"
            if col not in board or not board[col].notna().any():
                continue
            acc = board[col].to_numpy(dtype=np.float64)
            best = ids[int(np.nanargmax(acc))]
            info.setdefault("best", {})[oracle] = best
            for cand, c in cands.items():
                ok = np.isfinite(c["order"]) & np.isfinite(acc)
                tau = stats.kendalltau(c["order"][ok], acc[ok]).statistic if ok.sum() >= 3 \
                    else math.nan
                top = [m for m, t in zip(ids, c["top"]) if t]
                cmp = oracle_top_sets(config, board, oracle_rows, top).get(col)
                if cmp is None:
                    raise SystemExit(f"{name}: the oracle rows of {col} carry no fold values "
                                     "(an oracle run before ORACLE_VERSION 3): rerun `zoorank rank`")
                info.setdefault("oracle_top", {})[oracle] = (cmp["size"], cmp["top_set"])
                old = c.get("old_top")
                half = len(top) <= len(ids) / 2
                # an oracle top set of every model overlaps any answer: no evidence (issue 30)
                everything = cmp["size"] >= len(ids)
                regret_ok = math.isfinite(cmp["regret"]) and cmp["regret"] <= cmp["noise"] + 1e-12
                within = (bool(cmp["overlap"]) and not everything) or regret_ok
                rows.append({"zoo": name, "dataset": d.name, "oracle": oracle, "candidate": cand,
                             "tau": float(tau), "best": best, "best_in_top": best in top,
                             "top_size": len(top), "zoo_size": len(ids), "top": top,
                             "old_top_size": int(old.sum()) if old is not None else None,
                             "raw_mcs_size": c.get("raw"),
                             "oracle_top_size": cmp["size"], "overlap": len(cmp["overlap"]),
                             "regret": cmp["regret"], "noise": cmp["noise"],
                             "oracle_top_all": everything, "within": within, "half": half,
                             "passes": within and half})
    return rows, info


#: metrics that only seed ensembles have: the rule picks them where the zoo has ensembles.
ENSEMBLE_ONLY = frozenset({"nc"})


def choose_default(frame: pd.DataFrame) -> dict[str, list[str]]:
    """The README's rule ("Which metric orders the board"), applied to the evidence rows.

    Over every (zoo, oracle) where a candidate (every label-free metric and consensus order; not
    the stored ``leaderboard``) ranks the zoo, count its *misses* (its top set neither overlaps the
    oracle's own top set nor has a regret within the oracle's noise: a wrong answer) and its
    *vague* answers (a top set wider than half the zoo: no answer); order by fewer misses, then
    fewer vague answers, then higher mean τ against kNN. Ensemble-only metrics (NC) are listed
    apart: they order a zoo only where it has seed ensembles. Returns {"ensembles": [...],
    "no_ensembles": [...]}, best first."""
    sub = frame[frame["candidate"] != "leaderboard"]
    if sub.empty:
        return {"ensembles": [], "no_ensembles": []}
    knn = sub[sub["oracle"] == "knn_accuracy"]
    table = pd.DataFrame({
        "misses": (~sub["within"].astype(bool)).groupby(sub["candidate"]).sum(),
        "vague": (~sub["half"].astype(bool)).groupby(sub["candidate"]).sum(),
        "cases": sub.groupby("candidate").size(),
        "zoos": sub.groupby("candidate")["zoo"].nunique(),
        "tau": knn.groupby("candidate")["tau"].mean(),
        "tau_zoos": knn.groupby("candidate")["tau"].count()})
    order = table.assign(_tau=table["tau"].fillna(-np.inf)).sort_values(
        ["misses", "vague", "_tau"], ascending=[True, True, False]).drop(columns="_tau")
    return {"ensembles": [c for c in order.index if c in ENSEMBLE_ONLY],
            "no_ensembles": [c for c in order.index if c not in ENSEMBLE_ONLY],
            "table": order}


def _cell(r: Any) -> str:
    if r is None:
        return "not run"
    old = "" if r.old_top_size is None or pd.isna(r.old_top_size) \
        else f" ({int(r.raw_mcs_size)}, {int(r.old_top_size)})"
    overlap = "✗" if not r.overlap else (f"✓ {r.overlap} (set of all: not counted)"
                                         if r.oracle_top_all else f"✓ {r.overlap}")
    return (f"{r.tau:+.2f} / {overlap} / {r.top_size}{old} of {r.zoo_size} / "
            f"{100 * r.regret:.1f} ± {100 * r.noise:.1f}")


def reading(frame: pd.DataFrame, infos: list[dict[str, Any]]) -> list[str]:
    """Sentences generated from the rows, each naming the row and table it rests on and how
    many zoos stand behind it (issue 30: no sentence claims more than its table)."""
    zoos = [i["zoo"] for i in infos]
    out = []
    for oracle in ORACLES:
        sub = frame[frame["oracle"] == oracle]
        if sub.empty:
            continue
        lb = sub[sub["candidate"] == "leaderboard"]
        if len(lb):
            out.append(f"* Row `leaderboard`, table *Against {oracle}*: the stored leaderboard "
                       f"passes {int(lb['passes'].sum())} of {len(lb)} zoos (top sets of "
                       + ", ".join(f"{r.top_size} of {r.zoo_size}" for r in lb.itertuples())
                       + ").")
        trivial = sub[sub["oracle_top_all"].astype(bool)]["zoo"].unique().tolist()
        if trivial:
            out.append(f"* Table *Against {oracle}*: on {', '.join(trivial)} the oracle's own "
                       f"top set holds every model, so an overlap there is not counted as a "
                       f"pass ({len(trivial)} of {len(zoos)} zoos); only a regret within the "
                       "oracle's noise passes.")
    pick = choose_default(frame)
    table = pick["table"]
    for cand, r in table.head(3).iterrows():
        missing = [z for z in zoos if frame[(frame["candidate"] == cand)
                                            & (frame["zoo"] == z)].empty]
        out.append(f"* Row `{cand}` of *The README's rule applied*: {int(r.misses)} misses and "
                   f"{int(r.vague)} vague answers over the {int(r.cases)} (zoo, oracle) cases "
                   f"of the {int(r.zoos)} of {len(zoos)} zoos it ran on; mean τ against kNN "
                   f"{r.tau:+.2f} over {int(r.tau_zoos)} zoos"
                   + (f"; not run on {', '.join(missing)}, which counts neither as a pass nor "
                      "as a miss." if missing else "."))
    return out


def markdown(rows: list[dict[str, Any]], infos: list[dict[str, Any]], seconds: float,
             note: str = "") -> str:
    """The results file's body (its header comes from the harness)."""
    frame = pd.DataFrame(rows)
    lines = [f"{seconds:.0f} s (reads the stores, recomputes the top sets from the stored fold "
             "values; no embedding or scoring).", "",
             "The default primary metric is now chosen out of sample, by leave-one-zoo-out "
             "(`benchmarks/science/default_lozo.py`, `benchmarks/results/default_lozo.md`); this file "
             "keeps the top-set view of the same candidates.", "",
             "Top set: the rank-consistent Model Confidence Set (Hansen, Lunde & Nason 2011, T_max) "
             "over the fold bootstrap at the run's confidence, as the RANK stage computes it "
             "(flagged models excluded); *old*: the size the earlier top-set rule gave (at least "
             "as good as the point-best model in ≥ 5% of the replicates). The oracle's own top "
             "set: the same fold bootstrap and MCS over the oracle's accuracy on each fold of its "
             "test images. A zoo **passes** for a candidate when its top set overlaps the "
             "oracle's top set — not counted where that set holds every model — or its regret "
             "lies within the oracle's noise, and it holds at most half the zoo. *not run*: the "
             "candidate has no value on the zoo (not computed by its config, or NC without seed "
             "ensembles); it is neither a pass nor a miss. `consensus` = mean rank over the "
             "label-free metrics of the report's Kendall's W; `consensus_width_free` = the same "
             "without the width-sensitive metrics; `leaderboard` = the stored leaderboard as "
             "RANK wrote it.", ""]
    for info in infos:
        members = "; ".join(f"{k}: {', '.join(v)}" for k, v in info["consensus_members"].items())
        otop = ", ".join(f"{o} → {n} of {info['models']} ({', '.join(f'`{m}`' for m in t[:4])}"
                         f"{' …' if len(t) > 4 else ''})"
                         for o, (n, t) in info.get("oracle_top", {}).items())
        lines.append(f"* **{info['zoo']}**: {info['models']} models, `{info['run']}`; oracle's "
                     f"best: " + ", ".join(f"{o} → `{b}`" for o, b in info.get("best", {}).items())
                     + f"; oracle's own top set: {otop}"
                     + f"; its stored leaderboard is ordered by `{info['ordered_by']}`"
                     + (f"; consensus members — {members}" if members else ""))
    lines.append("")
    for oracle in ORACLES:
        sub = frame[frame["oracle"] == oracle] if len(frame) else frame
        if sub.empty:
            continue
        zoos = [i["zoo"] for i in infos]
        lines += [f"## Against {oracle}", "",
                  "Per cell: τ / overlap with the oracle's top set (✓ n shared, or ✗) / top-set "
                  "size (the raw MCS's before the upward closure, the old rule's) of zoo size / "
                  "regret ± the oracle's noise (pp; regret: the oracle's best accuracy minus the "
                  "best inside the top set).", ""]
        order = (sub.groupby("candidate")["passes"].sum().rename("p").to_frame()
                 .join(sub.groupby("candidate")["tau"].mean().rename("t"))
                 .sort_values(["p", "t"], ascending=False).index)
        rows = []
        for cand in order:
            cells = []
            for z in zoos:
                r = sub[(sub["candidate"] == cand) & (sub["zoo"] == z)]
                cells.append(_cell(None if r.empty else next(r.itertuples())))
            mine = sub[sub["candidate"] == cand]
            rows.append([f"`{cand}`", *cells,
                         f"{int(mine['passes'].sum())} of {mine['zoo'].nunique()}"])
        lines += [harness.table(["candidate", *zoos, "zoos passed (of zoos run)"], rows,
                                "l" * (len(zoos) + 2)), ""]
    if len(frame):
        pick = choose_default(frame)
        lines += ["## The README's rule applied (in sample; superseded by leave-one-zoo-out)", "",
                  "Over every (zoo, oracle) case a candidate ran on: *misses* (its top set neither "
                  "overlaps a non-trivial oracle top set nor has a regret within the oracle's "
                  "noise), then *vague* answers (a top set wider than half the zoo), fewer first; "
                  "then mean τ against kNN (`choose_default`). Counts are over the cases run; "
                  "a zoo not run is not a pass.", "",
                  harness.table(["order", "candidate", "zoos run", "misses (of cases)", "vague",
                                 "mean τ vs kNN (zoos)"],
                                [[i, f"`{cand}`", f"{int(r.zoos)} of {len(infos)}",
                                  f"{int(r.misses)} of {int(r.cases)}", int(r.vague),
                                  f"{r.tau:+.2f} ({int(r.tau_zoos)})"]
                                 for i, (cand, r) in enumerate(pick["table"].iterrows(), 1)],
                                "l" * 6)]
        lines += ["", "## Reading (generated from the rows above)", "", *reading(frame, infos), ""]
    if note:
        lines += ["## How the stores were made (given on the command line)", "", note, ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("zoos", nargs="+", help="NAME=RUN_YAML (the run config of a finished run, or "
                                           "validate_ranking.py's validate_run.json)")
    p.add_argument("--note", default="", help="how the stores were made (printed verbatim)")
    harness.results_option(p, "primary_evidence")
    args = p.parse_args()
    start = time.perf_counter()
    rows, infos = [], []
    for item in args.zoos:
        name, _, path = item.partition("=")
        r, info = zoo_rows(name, Path(path))
        rows += r
        infos.append(info)
    body = markdown(rows, infos, time.perf_counter() - start, args.note)
    print(body)
    harness.write_results(args.markdown, TITLE, body)

if __name__ == "__main__":
    main()
