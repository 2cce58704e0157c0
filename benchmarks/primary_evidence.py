"""Which default primary metric? Evidence across zoos (issue 17, item 7).

For every zoo (a run config whose store holds a finished ``zoorank run`` with the label oracle and
``score.resample_folds`` ≥ 2) and every candidate ordering, this prints

* Kendall τ-b of the candidate's order against each oracle (all ranked models; positive = agrees),
* whether the oracle's best model is in the candidate's **top set** (the models not
  distinguishable from rank 1 over the fold bootstrap of the evaluation images, computed exactly
  as the RANK stage does: :func:`zoorank.decision.metric_uncertainty`,
  :func:`zoorank.metrics.uncertainty.rank_uncertainty`, blocking health flags respected),
* the top set's size against the zoo's.

Candidates: every resampled label-free metric, and two consensus orders — the mean rank over the
label-free metrics the config computes (``consensus``: the metrics of the report's Kendall's W), and
the same without the width-sensitive ones (``consensus_width_free``) — each with its top set from
the same replicates (replicate b's mean rank uses every metric's replicate b; the fold draws are
shared, so the metrics stay paired). Nothing is fitted: the oracle is read only to score the
candidates. A zoo *passes* for a candidate when the oracle's best model is in its top set and the
top set is smaller than the zoo (the done-when of issue 17). Prints, never asserts::

    .venv/bin/python benchmarks/primary_evidence.py uva=/tmp/zoorank-validate-uva/run.yaml \\
        digits=/tmp/zoorank-validate/digits/run.yaml --markdown benchmarks/results/primary_evidence.md
"""

from __future__ import annotations

import argparse
import datetime
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

import zoorank.runtime  # noqa: F401  (quiet Ray environment; no Ray is started here)

ORACLES = ("knn_accuracy", "linear_probe_accuracy")


def _zoo_inputs(run_yaml: Path) -> tuple[Any, pd.DataFrame, pd.DataFrame, dict[str, np.ndarray]]:
    """(config, stored leaderboard, fresh fold rows, blocked models per dataset)."""
    from zoorank import resample
    from zoorank.catalog import build_catalog
    from zoorank.config.loading import load_config
    from zoorank.leaderboard import read_leaderboard
    from zoorank.metrics.health import BLOCKING
    from zoorank.store import Store

    config = load_config(run_yaml)
    store = Store(config.store)
    board, _settings = read_leaderboard(store)
    catalog = build_catalog(config)
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    folds = resample.fresh_resamples(store, metrics, config.score)
    flags = board["flags"].fillna("").astype(str).tolist()
    # one dataset per zoo here: a model is blocked when any of its flags is blocking
    blocked = np.array([bool({f.split(":")[-1] for f in fl.split(",") if f} & BLOCKING)
                        for fl in flags])
    return config, board, folds, {d.name: blocked for d in config.datasets}


def _mean_rank(rank_rows: Sequence[np.ndarray]) -> np.ndarray:
    """Per model, the mean over metrics of its rank (1 = best; NaN ranks skipped)."""
    r = np.vstack(rank_rows)
    with np.errstate(invalid="ignore"):
        counts = np.isfinite(r).sum(axis=0)
        return np.where(counts > 0, np.nansum(r, axis=0) / np.maximum(counts, 1), np.nan)


def _avg_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks (1 = best, ties averaged) of each row of oriented (B, m) values; NaN stays NaN."""
    v = np.atleast_2d(values)
    out = np.full(v.shape, np.nan)
    for b in range(v.shape[0]):
        ok = np.isfinite(v[b])
        out[b, ok] = stats.rankdata(-v[b, ok], method="average")
    return out


def candidates(config: Any, board: pd.DataFrame, folds: pd.DataFrame,
               blocked: Mapping[str, np.ndarray], dataset: str) -> dict[str, dict[str, Any]]:
    """name → {"order": oriented point values (higher = better), "top": bool per model}."""
    from zoorank.decision import consensus, metric_uncertainty
    from zoorank.metrics.primary import WIDTH_SENSITIVE
    from zoorank.metrics.uncertainty import rank_uncertainty

    _, replicates = metric_uncertainty(config, board, folds, blocked)
    out: dict[str, dict[str, Any]] = {}
    for (ds, metric), (point, reps) in replicates.items():
        if ds != dataset:
            continue
        u = rank_uncertainty(point, reps, config.rank.confidence, blocked[ds])
        out[metric] = {"order": point, "top": u.in_top_set, "p_best": u.p_best}
    members = consensus(board, dataset, [], pd.DataFrame())["metrics"]
    sets = {"consensus": [m for m in members if (dataset, m) in replicates],
            "consensus_width_free": [m for m in members if (dataset, m) in replicates
                                     and m not in WIDTH_SENSITIVE]}
    for name, chosen in sets.items():
        if len(chosen) < 2:
            continue
        point = -_mean_rank([_avg_ranks(replicates[(dataset, m)][0])[0] for m in chosen])
        n_rep = replicates[(dataset, chosen[0])][1].shape[0]
        rank_reps = [_avg_ranks(replicates[(dataset, m)][1]) for m in chosen]
        reps = np.vstack([-_mean_rank([r[b] for r in rank_reps]) for b in range(n_rep)])
        u = rank_uncertainty(point, reps, config.rank.confidence, blocked[dataset])
        out[name] = {"order": point, "top": u.in_top_set, "p_best": u.p_best, "members": chosen}
    return out


def zoo_rows(name: str, run_yaml: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    config, board, folds, blocked = _zoo_inputs(run_yaml)
    ids = list(board["model_id"])
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"zoo": name, "models": len(ids), "run": str(run_yaml),
                            "consensus_members": {}}
    for d in config.datasets:
        cands = candidates(config, board, folds, blocked, d.name)
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
                rows.append({"zoo": name, "dataset": d.name, "oracle": oracle, "candidate": cand,
                             "tau": float(tau), "best": best, "best_in_top": best in top,
                             "top_size": len(top), "zoo_size": len(ids), "top": top,
                             "passes": best in top and len(top) < len(ids)})
    return rows, info


def markdown(rows: list[dict[str, Any]], infos: list[dict[str, Any]], command: str,
             seconds: float) -> str:
    frame = pd.DataFrame(rows)
    lines = ["# Default primary metric: evidence across zoos (issue 17)", "",
             f"{datetime.date.today()}; `{command}`; {seconds:.0f} s (reads the stores, recomputes "
             "the top sets from the stored fold values; no embedding or scoring).", "",
             "A zoo **passes** for a candidate when the oracle's best model is in the candidate's "
             "top set and the top set is smaller than the zoo (issue 17's done-when). Top set: the "
             "models not distinguishable from rank 1 over the fold bootstrap at the run's "
             "confidence, as the RANK stage computes it. `consensus` = mean rank over the "
             "label-free metrics of the report's Kendall's W; `consensus_width_free` = the same "
             "without the width-sensitive metrics.", ""]
    for info in infos:
        members = "; ".join(f"{k}: {', '.join(v)}" for k, v in info["consensus_members"].items())
        lines.append(f"* **{info['zoo']}**: {info['models']} models, `{info['run']}`; oracle's "
                     f"best: " + ", ".join(f"{o} → `{b}`" for o, b in info.get("best", {}).items())
                     + (f"; consensus members — {members}" if members else ""))
    lines.append("")
    for oracle in ORACLES:
        sub = frame[frame["oracle"] == oracle]
        if sub.empty:
            continue
        zoos = list(dict.fromkeys(sub["zoo"]))
        lines += [f"## Against {oracle}", "",
                  "Per cell: τ / oracle's best in the top set (✓ or ✗) / top-set size of zoo size.",
                  "", "| candidate | " + " | ".join(zoos) + " | zoos passed |",
                  "|---|" + "---|" * len(zoos) + "---|"]
        order = (sub.groupby("candidate")["passes"].sum().rename("p").to_frame()
                 .join(sub.groupby("candidate")["tau"].mean().rename("t"))
                 .sort_values(["p", "t"], ascending=False).index)
        for cand in order:
            cells = []
            for z in zoos:
                r = sub[(sub["candidate"] == cand) & (sub["zoo"] == z)]
                if r.empty:
                    cells.append("—")
                    continue
                r = r.iloc[0]
                cells.append(f"{r.tau:+.2f} / {'✓' if r.best_in_top else '✗'} / "
                             f"{r.top_size} of {r.zoo_size}")
            passed = int(sub[sub["candidate"] == cand]["passes"].sum())
            lines.append(f"| `{cand}` | " + " | ".join(cells) + f" | {passed} of {len(zoos)} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("zoos", nargs="+", help="NAME=RUN_YAML (the run config of a finished run)")
    p.add_argument("--markdown", help="write the tables here too")
    args = p.parse_args()
    start = time.perf_counter()
    rows, infos = [], []
    for item in args.zoos:
        name, _, path = item.partition("=")
        r, info = zoo_rows(name, Path(path))
        rows += r
        infos.append(info)
    import shlex
    import sys

    text = markdown(rows, infos, shlex.join([".venv/bin/python", *sys.argv]),
                    time.perf_counter() - start)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


if __name__ == "__main__":
    main()
