"""The sweep evidence: the protocol by unit on the units table, baselines beside every figure.

Reads ``benchmarks/zoos/units.parquet`` (``benchmarks/zoos/build_units.py``) and writes
``benchmarks/results/sweep_evidence.md`` and the record ``benchmarks/results/sweep_evidence_record.json``
(``zoorank.evaluation.build_record`` / ``write_record``: the file the product can ship)::

    PYTHONPATH=. .venv/bin/python benchmarks/science/sweep_evidence.py

Everything is ``zoorank.evaluation``'s: per-zoo and per-unit regrets (``zoo_table``, ``unit_table``),
the baselines (a random pick's expected regret, the name/metadata heuristic, the lowest final
training loss), the metric chosen by leave-one-unit-out (``candidate_order``, ``louo_picks``), the
summaries and the paired bootstrap over units (``summary``, ``paired_difference``). This script adds
only what the package does not hold: the candidates outside the registry (LiDAR and RankMe(aug) by
the LiDAR paper's protocol, and a rank-aggregation combination chosen leave-one-unit-out), the
few-label regime, and the page.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness  # noqa: E402

from zoorank.evaluation import (  # noqa: E402
    board_candidates,
    build_record,
    candidate_order,
    louo_picks,
    metric_columns,
    paired_difference,
    summary,
    unit_table,
    write_record,
    zoo_table,
)

ROOT = Path(__file__).resolve().parents[2]
TABLE = Path(os.environ.get("SWEEP_TABLE", ROOT / "benchmarks" / "zoos" / "units.parquet"))
RECORD = ROOT / "benchmarks" / "results" / "sweep_evidence_record.json"
SWEEP = "hyperparameter sweep"
#: candidates outside the registry (all higher = better): the LiDAR paper's protocol
PAPER = ("lidar_paper", "rankme_aug_paper")
#: the metrics a combination averages the within-zoo ranks of: the best COMBINE of the order
COMBINE = 3
FEW = (20, 50, 100, 200)
BASELINES = ("random", "name_heuristic", "final_loss", "loo_best_metric")
WORDS = {"random": "a random pick (expected)", "name_heuristic": "name/metadata heuristic",
         "final_loss": "lowest final training loss", "loo_best_metric": "best single metric (LOUO)"}


def fmt(x: float | None, digits: int = 2) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def summ(values) -> str:
    s = summary(values)
    return (f"{fmt(s['median'])} / {fmt(s['p90'])} / {fmt(s['mean'])} (n = {s['n']})" if s["n"]
            else "— (n = 0)")


def paired_cell(a, b) -> str:
    d = paired_difference(a, b)
    if not d["n"]:
        return "—"
    lo, hi = d["interval_90"]
    mark = (" **excludes 0: the pick is better**" if hi < 0 else
            " **excludes 0: the pick is worse**" if lo > 0 else "")
    return f"{d['mean_diff_pp']:+.2f} [{lo:+.2f}, {hi:+.2f}] (n = {d['n']}){mark}"


# -- the combination: mean within-zoo rank of the first COMBINE metrics of the order -----------------

def zoo_ranks(models: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per model and metric, its percentile rank within its zoo (1 = best, oriented)."""
    from zoorank.metrics import registry

    out = pd.DataFrame(index=models.index)
    targets, directions = registry.targets(), registry.directions()
    for m in metrics:
        v = pd.to_numeric(models[m], errors="coerce").astype(np.float64)
        v = -(v - targets[m]).abs() if m in targets else directions.get(m, 1) * v
        out[m] = v.groupby(models["zoo"]).rank(pct=True)
    return out


def combination_regrets(models: pd.DataFrame, units: pd.DataFrame, calibration: list[str],
                        candidates: list[str], targets: list[str]) -> pd.Series:
    """For each unit of ``targets``: the regret of the mean rank of the first COMBINE candidates
    ordered on the calibration units other than it (leave one unit out)."""
    ranks = zoo_ranks(models, candidates)
    out = {}
    for u in targets:
        order = candidate_order(units.loc[[c for c in calibration if c != u]], candidates)
        chosen = order[:COMBINE]
        rows = models["unit"] == u
        score = ranks.loc[rows, chosen].mean(axis=1, skipna=True)
        sub = models.loc[rows].assign(_combo=score)
        zt = zoo_table(sub, ["_combo"])
        out[u] = float(zt["_combo"].mean()) if len(zt) else np.nan
    return pd.Series(out, dtype=np.float64)


# -- the figures on the sweeps --------------------------------------------------------------------

def sweep_figures(models: pd.DataFrame) -> dict:
    """Calibration (LOUO) and held-out figures of the sweep units for two candidate sets."""
    sweeps = models[models["unit_kind"] == SWEEP]
    registered = board_candidates(metric_columns(sweeps), "encoders")
    extended = registered + [c for c in PAPER if c in sweeps and sweeps[c].notna().any()]
    every = [c for c in metric_columns(sweeps)] + [c for c in PAPER if c in extended]
    zoos = zoo_table(sweeps, every)
    units = unit_table(zoos)
    calib = units.index[units["role"] == "calibration"].tolist()
    held = units.index[units["role"] == "held_out"].tolist()
    cal = units.loc[calib]
    out = {"units": units, "calib": calib, "held": held, "registered": registered,
           "extended": extended, "every": every}
    for name, cands in (("registered", registered), ("extended", extended)):
        louo = louo_picks(cal, cands)
        louo_best = louo_picks(cal, every)
        combo_cal = combination_regrets(sweeps, units, calib, cands, calib)
        default = candidate_order(cal, cands)
        pick = default[0] if default else None
        best_all = candidate_order(cal, every)
        fig = {"order": default, "pick": pick,
               "calibration": {"pick": louo["regret"], "pick_metrics": louo["metric"],
                               "loo_best_metric": louo_best["regret"], "combination": combo_cal}}
        if held:
            hu = units.loc[held]
            fig["held_out"] = {
                "pick": hu[pick] if pick else pd.Series(np.nan, index=held),
                "loo_best_metric": hu[best_all[0]] if best_all else pd.Series(np.nan, index=held),
                "loo_best_name": best_all[0] if best_all else None,
                "combination": combination_regrets(sweeps, units, calib, cands, held),
                "combination_metrics": candidate_order(cal, cands)[:COMBINE]}
        out[name] = fig
    return out


def few_label(models: pd.DataFrame) -> pd.DataFrame:
    """Per sweep unit and budget: the regret (pp) of the few-label kNN pick, mean over seeds."""
    sweeps = models[models["unit_kind"] == SWEEP]
    rows = []
    for u, g in sweeps.groupby("unit", sort=False):
        truth = g["truth"].to_numpy(np.float64)
        row = {"unit": u, "role": g["role"].iloc[0]}
        for n in FEW:
            cols = [c for c in g.columns if c.startswith(f"few_knn_n{n}_s")]
            regrets = []
            for c in cols:
                v = g[c].to_numpy(np.float64)
                top = v == np.nanmax(v)
                regrets.append(100 * (truth.max() - truth[top].mean()))
            row[n] = float(np.mean(regrets)) if regrets else np.nan
        rows.append(row)
    return pd.DataFrame(rows).set_index("unit") if rows else pd.DataFrame()


# -- the page -------------------------------------------------------------------------------------

def unit_lines(models: pd.DataFrame) -> list[str]:
    rows = []
    for u, g in models.groupby("unit", sort=False):
        t = g["truth"].to_numpy(np.float64)
        ok = np.isfinite(t)
        best = g.loc[ok].iloc[int(np.argmax(t[ok]))] if ok.any() else None
        prev = best["truth_prev_epoch"] if best is not None else np.nan
        gain = 100 * (best["truth"] - prev) if best is not None and np.isfinite(prev) else np.nan
        spread = [100 * (z["truth"].max() - z["truth"].min()) for _, z in g.groupby("zoo")]
        secs = g["build_seconds"].iloc[0] if "build_seconds" in g else np.nan
        rows.append([f"`{u}`", g["unit_kind"].iloc[0], g["role"].iloc[0],
                     str(g["zoo"].nunique()), str(len(g)),
                     f"`{best['model_id']}` {100 * best['truth']:.1f}%" if best is not None else "—",
                     fmt(gain, 1), fmt(float(np.mean(spread)), 1),
                     fmt(secs / 60, 1) if np.isfinite(secs) else "carried"])
    return [harness.table(["unit", "kind", "role", "zoos", "models", "best (truth)",
                           "gain over its last epoch (pp)", "spread (pp)", "build (min)"],
                          rows, "lllrrlrrr")]


def sweep_section(f: dict, few: pd.DataFrame) -> list[str]:
    units, calib, held = f["units"], f["calib"], f["held"]
    lines = [f"**{len(calib)} calibration sweep units, {len(held)} held-out sweep units.** "
             "Regrets in pp of kNN accuracy (median / p90 / mean over units, n units); a unit's "
             "regret is the mean over its zoos. Paired differences are the pick's regret minus "
             "the baseline's (negative: the pick is better), with a 90% percentile bootstrap "
             "interval over units (10,000 resamples, seed 0).", ""]
    cal = units.loc[calib]
    per = [[f"`{m}`", summ(cal[m])] for m in f["every"] if m in cal]
    per.sort(key=lambda r: float(summary(cal[r[0].strip('`')])["mean"] or np.inf))
    lines += ["Each metric on the calibration sweep units (in sample: for reading, not choosing):",
              "", harness.table(["metric", "regret median / p90 / mean (n)"], per, "ll"), ""]
    for name, title in (("registered", "registered metrics (what the product can compute)"),
                        ("extended", "registered metrics + the LiDAR paper's protocol")):
        fig = f[name]
        c = fig["calibration"]
        base = {b: cal[b] for b in BASELINES[:3]} | {"loo_best_metric": c["loo_best_metric"]}
        picks = ", ".join(f"`{m}` ×{k}" for m, k in c["pick_metrics"].value_counts().items())
        lines += [f"### Candidates: {title}", "",
                  f"Order on all calibration units: {', '.join(f'`{m}`' for m in fig['order'][:6])}"
                  f" … (default: `{fig['pick']}`). Leave-one-unit-out picks: {picks}.", ""]
        rows = [["LOUO pick (the protocol's default, out of sample)", summ(c["pick"]), ""],
                [f"combination: mean rank of the first {COMBINE} (LOUO)",
                 summ(c["combination"]), paired_cell(c["combination"], c["pick"])]]
        rows += [[WORDS[b], summ(v), paired_cell(c["pick"], v)] for b, v in base.items()]
        lines += ["Calibration units, leave one unit out:", "",
                  harness.table(["what", "regret (pp)", "pick − this (pp), 90% interval"],
                                rows, "lll"), ""]
        if "held_out" in fig:
            h = fig["held_out"]
            hu = units.loc[held]
            hb = {b: hu[b] for b in BASELINES[:3]} | {"loo_best_metric": h["loo_best_metric"]}
            pick = h["pick"].to_numpy(np.float64)
            s = summary(pick)
            rand = paired_difference(pick, hu["random"].to_numpy(np.float64))
            meets = (s["n"] and s["median"] <= 1 and s["p90"] <= 3 and rand["n"]
                     and rand["interval_90"][1] < 0)
            rows = [[f"`{fig['pick']}` (chosen on the calibration units)", summ(pick), ""],
                    [f"combination of {', '.join(f'`{m}`' for m in h['combination_metrics'])}",
                     summ(h["combination"]), paired_cell(h["combination"], pick)]]
            rows += [[WORDS[b] + (f" (`{h['loo_best_name']}`)" if b == "loo_best_metric" else ""),
                      summ(v), paired_cell(pick, v)] for b, v in hb.items()]
            lines += ["Held-out units (the one look):", "",
                      harness.table(["what", "regret (pp)", "pick − this (pp), 90% interval"],
                                    rows, "lll"), "",
                      "Targets (median ≤ 1 pp, p90 ≤ 3 pp, beats a random pick with a 90% "
                      f"interval excluding 0): **{'met' if meets else 'not met'}** "
                      f"(median {fmt(s['median'])}, p90 {fmt(s['p90'])}, vs random "
                      f"{paired_cell(pick, hu['random'].to_numpy(np.float64))}).", ""]
    if len(few):
        pick = f["registered"]["pick"]
        rows = [[f"`{u}`", r["role"], *[fmt(r[n], 1) for n in FEW], fmt(units.at[u, pick], 1),
                 fmt(units.at[u, "random"], 1)] for u, r in few.iterrows()]
        rows.append(["**median over units**", "", *[fmt(float(np.nanmedian(few[n])), 1)
                                                     for n in FEW],
                     fmt(float(np.nanmedian(units.loc[few.index, pick])), 1),
                     fmt(float(np.nanmedian(units.loc[few.index, "random"])), 1)])
        lines += ["### The few-label regime", "",
                  "Regret (pp) of the pick by `knn_few_label` (cross-validated kNN on N labels of "
                  "the oracle's train half, N/10 per class; mean over 3 label draws), beside the "
                  f"label-free default (`{pick}`, in sample) and a random pick:", "",
                  harness.table(["unit", "role", *[f"{n} labels" for n in FEW],
                                 f"`{pick}`", "random"], rows, "llrrrrrr"), ""]
    return lines


def record_lines(record: dict) -> list[str]:
    rows = []
    for key, e in record["boards"].items():
        h, r = e["held_out_units"], e["regret_pp"]
        rows.append([f"`{key}`", f"`{e['metric']}`", str(e["units"]["n"]), str(h["n"]),
                     summ_dict(r["held_out"]), summ_dict(r["all_units"]),
                     summ_dict(e["baselines"]["random"]),
                     summ_dict(e["baselines"]["name_heuristic"]),
                     pc(e["paired"]["random"]), f"{h['hits']}/{h['n']}",
                     "yes" if e["guaranteed"] else "no"])
    return [harness.table(["board", "metric", "calibration units", "held out (or LOUO)",
                           "pick (held out)", "pick (all units)", "random", "name heuristic",
                           "pick − random", "shortlist hits", "guaranteed"], rows, "l" * 11), "",
            *[f"* `{k}`: {e['statement']}" for k, e in record["boards"].items()], ""]


def summ_dict(s: dict) -> str:
    return f"{fmt(s['median'])} / {fmt(s['p90'])} (n = {s['n']})" if s["n"] else "—"


def pc(d: dict) -> str:
    if not d["n"]:
        return "—"
    lo, hi = d["interval_90"]
    return f"{d['mean_diff_pp']:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def main() -> int:
    models = pd.read_parquet(TABLE)
    if "unit_kind" not in models:
        models["unit_kind"] = models.groupby("unit")["kind"].transform("first")
    record = build_record(models, generated_by="benchmarks/science/sweep_evidence.py on "
                                               "benchmarks/zoos/units.parquet")
    write_record(record, RECORD)
    f = sweep_figures(models)
    few = few_label(models)
    sweeps = models[models["unit_kind"] == SWEEP]
    built = sweeps.drop_duplicates("unit")
    after = sorted(set(built.loc[built["role"] == "held_out", "built_after"].dropna()))
    n_units = models["unit"].nunique()
    kinds = models.drop_duplicates("unit")["unit_kind"].value_counts()
    train = built["train_seconds_unit"].to_numpy(np.float64) / 60
    whole = built["build_seconds"].to_numpy(np.float64) / 60
    # a unit built in one call (its checkpoints trained there): build time covers its training
    cost = whole[whole >= train]
    body = [
        f"**{n_units} independent units** ({', '.join(f'{v} {k}' for k, v in kinds.items())}), "
        f"{len(models)} rows. Table: `benchmarks/zoos/units.parquet`; record: "
        f"`{RECORD.relative_to(ROOT)}` (`zoorank.evaluation.build_record`).", "",
        "Build (resumable: cached checkpoints and rows, and the committed table's units are "
        "skipped):", "", "```", "PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_units.py",
        "```", "",
        f"Cost, measured: {fmt(float(np.median(cost)), 1)} min per sweep unit, training and "
        f"evaluation (median of the {len(cost)} units built in one call; "
        f"{fmt(float(cost.min()), 1)}–{fmt(float(cost.max()), 1)}); training alone "
        f"{fmt(float(np.median(train)), 1)} min per unit (median over all {len(built)}; "
        f"{fmt(float(train.sum()), 0)} min of training in all), in processes of one torch "
        "thread, two at a time, on a 2-core machine shared with other jobs (heavily loaded "
        "during the build), so these are upper bounds of the cost on an idle machine.", "",
        "Label-free values of the sweep units: the product's per-model suite "
        "(`zoorank.metrics.suite.label_free_suite`, every registered label-free metric at its "
        "registered settings, on the embeddings of the ranked images; augmented view: the "
        "product's `simclr` recipe, 128 images × 4 views) and CLID from its registration's "
        "pool function over the unit's checkpoints. `lidar_paper` and `rankme_aug_paper`: "
        "LiDAR and RankMe(aug) by the LiDAR paper's protocol (the method's own training "
        "augmentation at the model's strength, n = 500 > p images, q = 10, on the "
        "representation). Carried units: the values the product pipeline stored for the "
        "validation zoos. Truth: kNN accuracy (k = 20) on the label oracle's test half.", "",
        "## Units", "", *unit_lines(models), "",
        "## Fixed-budget hyperparameter sweeps", "",
        f"Held-out units: listed in `benchmarks/zoos/held_out_units.md` before any was built, "
        f"built after commit {', '.join(f'`{a}`' for a in after) or '—'}; the look at them is "
        "taken once, by this script, with the choices made on the calibration units.", "",
        *sweep_section(f, few),
        "## The record, per board (every kind)", "",
        "`zoorank.evaluation.build_record` on the whole table: the metric chosen on the "
        "calibration units among the registered candidates of the board, its regret on the "
        "held-out units (the sweeps of `held_out_units.md`; leave-one-unit-out where a board "
        "has none), the baselines and the paired difference with a random pick (pp, 90% "
        "bootstrap interval over units).", "", *record_lines(record)]
    harness.write_results("sweep_evidence", "Sweep evidence: label-free selection by unit, "
                          "baselines beside every figure", "\n".join(body))
    print(json.dumps({k: e["regret_pp"] for k, e in record["boards"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
