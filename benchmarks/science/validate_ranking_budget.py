"""The label-budget curve on the validation zoo (issue 12): how many labels beat label-free ranking?

Takes the store of a finished ``benchmarks/science/validate_ranking.py`` run (its ``validate_run.json`` has
the run config), turns on the few-label oracle (``oracle.transferability``: LogME, H-score, NLEEP,
GBC on seeded stratified subsets of the oracle's train split with k labels per class), reruns RANK
and REPORT on that store, and writes a markdown report: the command, date, machine, load and wall
time; mean Kendall τ [95% bootstrap CI over models] of each score at each k against kNN and
linear-probe accuracy, the per-seed τ, the best label-free metric's τ (the zero-label reference)
and the crossover (smallest k whose mean τ beats it). Every figure is read from the store's
``agreement`` and ``oracle``. Prints, never asserts.

    .venv/bin/python benchmarks/science/validate_ranking.py                    # the zoo (~25-35 min CPU)
    .venv/bin/python benchmarks/science/validate_ranking_budget.py             # + the budget (~5-10 min)

Writes ``benchmarks/results/validate_ranking_budget.md`` unless ``--markdown`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import pandas as pd
from harness import table, timed
from validate_ranking import fmt_tau

import zoorank.runtime  # noqa: F401  (loopback Ray environment, usage stats off)

ROOT = Path(__file__).resolve().parents[2]
ORACLE_NAMES = {"knn_accuracy": "kNN", "linear_probe_accuracy": "linear probe"}


def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from zoorank.config.loading import parse_config
    from zoorank.pipeline import run_rank, run_report

    source = json.loads((out / "validate_run.json").read_text())
    rdict = source["run_config"]
    rdict["oracle"] = {**rdict["oracle"], "transferability": args.scores.split(","),
                       "labels_per_class": [int(k) for k in args.labels_per_class.split(",")],
                       "label_budget_seeds": args.seeds}
    config = parse_config(rdict, "<validate_ranking_budget config>")
    info: dict[str, Any] = {"command": harness.command_line(), "store": config.store,
                            "oracle": rdict["oracle"],
                            "zoo_run": {k: source.get(k) for k in ("command", "date", "git",
                                                                    "size", "every")},
                            "timings": {}}
    for name, fn in (("rank", run_rank), ("report", run_report)):
        kwargs = {"show": False} if name == "rank" else {}
        result, info["timings"][name] = timed(fn, config, address=args.address, **kwargs)
    info["report"] = str(result)
    (out / "validate_budget_run.json").write_text(json.dumps(info, indent=2, default=str))
    return info


def _spread(store) -> str:
    """The oracle's accuracy range over the zoo (identifies the zoo against validate_ranking.md)."""
    board = store.read_frame("leaderboard")
    parts = []
    for o_name, label in ORACLE_NAMES.items():
        cols = [c for c in board.columns if c.endswith(f"/{o_name}")]
        if cols:
            v = board[cols[0]].to_numpy(np.float64) * 100
            parts.append(f"{label} accuracy min {np.nanmin(v):.1f}%, median {np.nanmedian(v):.1f}%, "
                         f"max {np.nanmax(v):.1f}%")
    return "; ".join(parts) + "." if parts else ""


def write_markdown(info: dict[str, Any], path: Path) -> Path:
    from zoorank.oracle.budget import crossover_lines, crossovers, split_agreement
    from zoorank.store import Store

    store = Store(info["store"])
    agree = store.read_frame("agreement")
    oracle = store.read_frame("oracle")
    label_free, curve = split_agreement(agree)
    label_free = label_free[(label_free["family"] == "all")
                            & (label_free["metric"] != "leaderboard_rank")]
    ks = sorted(curve["labels_per_class"].unique())
    scores = list(dict.fromkeys(curve["metric"]))
    n_models = int(curve["n_models"].max()) if len(curve) else 0
    o = info["oracle"]
    t = info["timings"]
    zoo = info["zoo_run"]
    lines = [
        "Produced by `benchmarks/science/validate_ranking_budget.py` on the store of a "
        "`benchmarks/science/validate_ranking.py` run. Every number is read from that store "
        "(`agreement` rows with `labels_per_class`, `oracle` cells "
        "`<score>@k<k>s<seed>`); nothing was edited by hand.",
        "",
        "## Run",
        "",
        f"* **Zoo**: `{zoo.get('command')}` ({zoo.get('date')}, git `{zoo.get('git')}`): "
        f"{n_models} checkpoints of small CNNs (SimCLR / VICReg × lr × 3 seeds, checkpoints every "
        f"{zoo.get('every')} epochs) ranked on CIFAR-10 test images; size "
        f"`{json.dumps(zoo.get('size'))}`. {_spread(store)}",
        f"* **Wall time**: rank (label oracle incl. every few-label cell, agreement) "
        f"{t['rank']:.0f} s, report {t['report']:.0f} s.",
        f"* **Few-label oracle**: scores {', '.join(f'`{s}`' for s in o['transferability'])}; "
        f"k = {', '.join(str(k) for k in o['labels_per_class'])} labels per class; "
        f"{o['label_budget_seeds']} seeds; seeded stratified subsets of the oracle's train split "
        f"(a stratified {1 - o.get('test_fraction', 0.5):.0%} of the ranked images; a class with "
        "fewer than k images there gives all it has). Reference: kNN (k = 20, T = 0.07) and "
        "linear-probe accuracy on the full train split, measured on the test split.",
        "* τ: Kendall τ-b of the score's model ranking against the oracle's over all models; the "
        "mean over seeds with a 95% percentile interval from 1000 bootstrap resamples of the models "
        "(the same resample for every seed). The label-free metrics need no label: their τ is the "
        "zero-label reference, and the best of them (picked in hindsight, so the comparison "
        "favours label-free ranking) sets the bar.",
        "",
        "## Crossovers",
        "",
    ]
    crossing = crossovers(agree)
    lines += [f"* {line}" for line in crossover_lines(crossing)]
    lines += ["", "Margin at the crossover: the score's mean τ there minus the best label-free τ, "
              "and whether the score's 95% bootstrap interval there excludes that τ (only then is "
              "the overtaking clear of the model-sampling noise).", ""]
    rows = []
    for r in crossing.itertuples(index=False):
        if np.isnan(r.crossover_labels_per_class):
            continue
        at = curve[(curve["metric"] == r.score) & (curve["oracle_metric"] == r.oracle_metric)
                   & (curve["labels_per_class"] == r.crossover_labels_per_class)
                   & (curve["budget_seed"] == "mean")].iloc[0]
        clear = "yes" if at["kendall_ci_low"] > r.best_label_free_tau else "no"
        rows.append([f"`{r.score}`", ORACLE_NAMES.get(r.oracle_metric, r.oracle_metric),
                     f"{r.crossover_labels_per_class:g}", fmt_tau(at),
                     f"`{r.best_label_free}` {r.best_label_free_tau:+.2f}",
                     f"{at['kendall_tau'] - r.best_label_free_tau:+.2f}", clear])
    if rows:
        lines.append(table(["score", "oracle", "k", "τ [95% CI]", "best label-free", "margin",
                             "CI excludes it"], rows))
    for o_name in [x for x in ORACLE_NAMES if x in set(curve["oracle_metric"])]:
        c = curve[curve["oracle_metric"] == o_name]
        lf = label_free[label_free["oracle_metric"] == o_name].sort_values("kendall_tau",
                                                                           ascending=False)
        lines += ["", f"## τ vs {ORACLE_NAMES[o_name]} accuracy by labels per class", "",
                  "Mean over seeds [95% bootstrap CI over models].", ""]
        rows = []
        for score in scores:
            cells = []
            for k in ks:
                r = c[(c["metric"] == score) & (c["labels_per_class"] == k)
                      & (c["budget_seed"] == "mean")]
                cells.append(fmt_tau(r.iloc[0] if len(r) else None))
            rows.append([f"`{score}`", *cells])
        lines.append(table(["score", *[f"k = {k:g}" for k in ks]], rows))
        lines += ["", "Per seed (τ of each seed's subset):", ""]
        rows = []
        for score in scores:
            cells = []
            for k in ks:
                r = c[(c["metric"] == score) & (c["labels_per_class"] == k)
                      & (c["budget_seed"] != "mean")].sort_values("budget_seed")
                cells.append(" / ".join(f"{v:+.2f}" for v in r["kendall_tau"]))
            rows.append([f"`{score}`", *cells])
        lines.append(table(["score", *[f"k = {k:g}" for k in ks]], rows))
        lines += ["", "Label-free metrics (0 labels), same oracle and models:", ""]
        lines.append(table(["label-free metric", "τ [95% CI]"],
                            [[f"`{r.metric}`", fmt_tau(pd.Series(r._asdict()))]
                             for r in lf.itertuples(index=False)]))
    cells = oracle[oracle["metric"].str.contains("@k", regex=False)]
    if len(cells):
        secs = cells.assign(
            score=cells["metric"].str.split("@").str[0],
            seconds=[json.loads(p).get("seconds", np.nan) for p in cells["params"]],
            error=[bool(json.loads(p).get("error")) for p in cells["params"]])
        lines += ["", "## Cost and failures of the few-label cells", "",
                  "Seconds per cell (one score on one model's subset, inside the oracle's Ray "
                  "task at 0.5 CPU), from `params.seconds` in `oracle`.", ""]
        rows = []
        for score, g in secs.groupby("score", sort=False):
            rows.append([f"`{score}`", str(len(g)), f"{g['seconds'].median():.3f}",
                         f"{g['seconds'].max():.3f}", f"{g['seconds'].sum():.1f}",
                         str(int(g["error"].sum()))])
        lines.append(table(["score", "cells", "median s", "max s", "total s", "NaN (error)"],
                            rows))
    lines += ["", f"HTML report with the curve: `{info.get('report')}` "
              f"(`budget-<dataset>-<oracle>.png`).", ""]
    return harness.write_results(
        path, "Label-budget curve on the validation zoo: few-label scores vs label-free ranking",
        "\n".join(lines), command=info["command"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="/tmp/zoorank-validate/cifar10",
                   help="work folder of a finished validate_ranking.py run")
    harness.results_option(p, "validate_ranking_budget")
    p.add_argument("--scores", default="logme,h_score,nleep,gbc")
    p.add_argument("--labels-per-class", default="5,10,25,50,100")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--address", help="Ray address to join (default: a local cluster)")
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite the markdown from <out>/validate_budget_run.json")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    if args.report_only:
        info = json.loads((out / "validate_budget_run.json").read_text())
    else:
        info = run(args, out)
    write_markdown(info, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
