"""The report's sections after the decision screen that are built from the tables alone: the
leaderboard, the agreement summary, the label-budget curve, the failed models and the settings.
Each returns a :class:`~zoorank.report.page.Section` (plain data; the templates draw it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from zoorank.report.page import Image, Section, Table
from zoorank.report.plots import budget_png

#: rows of the folded every-metric table (the whole table is leaderboard.csv).
MAX_FULL_TABLE_ROWS = 200


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as dicts (the report's table rows). O(rows × columns)."""
    return frame.to_dict("records")


def leaderboard_section(board: pd.DataFrame, headline: pd.DataFrame,
                        settings: Mapping[str, Any]) -> Section:
    """The leaderboard: its ordering in words, the headline columns of every model (paged and
    filterable), every metric and rank folded (the first :data:`MAX_FULL_TABLE_ROWS` models) and
    links to ``leaderboard.csv`` / ``leaderboard.md``."""
    primary = settings.get("primary_metric") or {}
    sentence = (f"{len(board)} models, ordered by `{settings.get('ordered_by')}`: aggregation "
                f"`{settings.get('aggregation')}` of the primary metric's ranks ("
                + ", ".join(f"{d}: `{m}`" for d, m in primary.items())
                + "). Rank 1 = best; ties averaged. A model with no value on a dataset has no rank "
                "there (aggregated over the datasets it has); the `missing` column says why.")
    if settings.get("in_domain"):
        sentence += (f" Joint rank = sqrt(rank · rank of `{settings['in_domain']}`) "
                     "(CLID §3.5).")
    return Section(
        id="leaderboard", title="Leaderboard", sentences=[sentence],
        table=Table(records(headline), list(headline.columns), id="leaderboard-table"),
        template="leaderboard.html.j2",
        context={"full": Table(records(board.head(MAX_FULL_TABLE_ROWS)), list(board.columns),
                               id="full-leaderboard"),
                 "total": len(board), "csv": "../leaderboard.csv", "markdown": "../leaderboard.md"})


def agreement_section(agree: pd.DataFrame) -> Section:
    """Kendall τ-b of every label-free metric with every oracle metric, with its interval."""
    summary = agreement_summary(agree)
    return Section(
        id="agreement", title="Agreement with the label oracle",
        sentences=["Signed Kendall τ-b between each label-free metric (oriented: higher = better) "
                   "and each oracle metric over all models, with its bootstrap 95% interval over "
                   "models. The full table (Spearman, Pearson, top-1 regret, top-k recall, per "
                   "family) is the `agreement` table."],
        table=Table(records(summary), list(summary.columns)))


def budget_section(agree: pd.DataFrame) -> Section | None:
    """The report's label-budget section; None without budget rows."""
    from zoorank.oracle.budget import crossover_lines, crossovers, split_agreement

    label_free, curve = split_agreement(agree)
    if curve.empty:
        return None
    subsections = [
        Section(id=f"budget-{ds}-{o_name}",
                title=f"{ds}: τ vs {o_name} by labels per class",
                images=[Image(f"budget-{ds}-{o_name}.png",
                              f"{ds} label-budget curve vs {o_name}",
                              budget_png(rows, label_free, str(ds), str(o_name)))])
        for (ds, o_name), rows in curve.groupby(["dataset", "oracle_metric"], sort=True)]
    return Section(
        id="budget", title="When a few labels exist: the label-budget curve",
        sentences=["Each few-label score computed on seeded subsets of the oracle's train split "
                   "with k labels per class, ranked against the full oracle (Kendall τ-b over all "
                   "models); the label-free metrics need no label and are drawn as horizontal "
                   "lines. Rows with `labels_per_class` in the `agreement` table.",
                   *crossover_lines(crossovers(agree))],
        subsections=subsections)


def failed_section(failed: pd.DataFrame, columns: list[str]) -> Section:
    """The failed (model, dataset) entries with their reasons (paged when many)."""
    if failed.empty:
        return Section(id="failed", title="Failed models", sentences=["None."])
    return Section(id="failed", title="Failed models",
                   sentences=[f"{len(failed)} failed or missing (model, dataset) entries."],
                   table=Table(records(failed[columns]), columns, id="failed-table"))


def settings_section(settings: Mapping[str, Any], store_name: str) -> Section:
    """The settings as a readable list (not raw JSON). Template ``settings.html.j2``."""
    d = settings.get("decision") or {}
    primary = settings.get("primary_metric") or {}
    items = [
        ("store", f"`{store_name}`"),
        ("ordered by", f"`{settings.get('ordered_by')}`"
         + (" (configured)" if settings.get("configured_primary_metric") else
            " (default: the first of the registry's preference the config computes)")),
        ("primary metric per dataset", ", ".join(f"{k}: `{v}`" for k, v in primary.items())
         or "—"),
        ("aggregation over datasets", str(settings.get("aggregation"))),
        ("dataset weights", ", ".join(f"{k}: {v:g}" for k, v in
                                      (settings.get("dataset_weights") or {}).items()) or "equal"),
        ("in-domain accuracy (joint rank)", str(settings.get("in_domain") or "—")),
        ("confidence (intervals, top set)", f"{float(d.get('confidence', math.nan)):.0%}"
         if d else "—"),
        ("resamples", f"{d.get('resamples')} fold-bootstrap replicates of {d.get('folds')} folds "
                      f"over {d.get('fold_fraction')} of the images" if d else "—"),
        ("top-set rule", str(d.get("top_set_rule", "—"))),
        ("flags that block the top set", ", ".join(d.get("blocking_flags", []))),
    ]
    for ds, c in (d.get("consensus") or {}).items():
        w = c.get("kendall_w")
        text = f"Kendall's W = {w:.2f}" if isinstance(w, float) and math.isfinite(w) else "W n/a"
        text += " over " + ", ".join(c.get("metrics", []))
        if c.get("partial"):
            text += f" (partial coverage, left out: {', '.join(c['partial'])})"
        items.append((f"consensus on {ds}", text))
    return Section(id="settings-section", title="Settings", template="settings.html.j2",
                   context={"items": items})


def agreement_summary(agree: pd.DataFrame) -> pd.DataFrame:
    """One row per label-free metric, one column per dataset/oracle: "τ [low, high]"."""
    a = agree[agree["family"] == "all"]
    if a.empty:
        return a
    def interval(r) -> str:
        if not np.isfinite(r.kendall_tau):
            return "n/a"
        if not np.isfinite(r.kendall_ci_low):
            return f"{r.kendall_tau:.2f}"
        return f"{r.kendall_tau:.2f} [{r.kendall_ci_low:.2f}, {r.kendall_ci_high:.2f}]"
    cells = a.assign(tau=[interval(r) for r in a.itertuples(index=False)],
                     column=a["dataset"] + "/" + a["oracle_metric"])
    wide = cells.pivot_table(index="metric", columns="column", values="tau", aggfunc="first")
    wide.columns.name = None
    return wide.reset_index()
