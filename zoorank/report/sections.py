"""The report's sections after the decision screen that are built from the tables alone: the
agreement summary, the label-budget curve and the settings."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from zoorank.report.markup import img_tag
from zoorank.report.plots import budget_png


def budget_section(agree: pd.DataFrame, images: dict[str, bytes]) -> str:
    """The report's label-budget section (plots added to ``images``); empty without budget rows."""
    from zoorank.budget import crossover_lines, crossovers, split_agreement

    label_free, curve = split_agreement(agree)
    if curve.empty:
        return ""
    parts = ["<h2>When a few labels exist: the label-budget curve</h2><p class='note'>Each "
             "few-label score computed on seeded subsets of the oracle's train split with k labels "
             "per class, ranked against the full oracle (Kendall τ-b over all models); the "
             "label-free metrics need no label and are drawn as horizontal lines. Rows with "
             "<code>labels_per_class</code> in the <code>agreement</code> table.</p>"]
    lines = crossover_lines(crossovers(agree))
    if lines:
        parts.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")
    for (ds, o_name), rows in curve.groupby(["dataset", "oracle_metric"], sort=True):
        name = f"budget-{ds}-{o_name}.png"
        images[name] = budget_png(rows, label_free, str(ds), str(o_name))
        parts.append(f"<h3>{html.escape(str(ds))}: τ vs {html.escape(str(o_name))} by labels per "
                     "class</h3>" + img_tag(name, f"{ds} label-budget curve vs {o_name}"))
    return "".join(parts)


def settings_section(settings: Mapping[str, Any], store_name: str) -> str:
    """The settings as a readable list (not raw JSON)."""
    d = settings.get("decision") or {}
    primary = settings.get("primary_metric") or {}
    items = [
        ("store", f"<code>{html.escape(store_name)}</code>"),
        ("ordered by", f"<code>{html.escape(str(settings.get('ordered_by')))}</code>"
         + (" (configured)" if settings.get("configured_primary_metric") else
            " (default: the first of the registry's preference the config computes)")),
        ("primary metric per dataset", ", ".join(f"{html.escape(k)}: <code>{html.escape(v)}</code>"
                                                 for k, v in primary.items()) or "—"),
        ("aggregation over datasets", html.escape(str(settings.get("aggregation")))),
        ("dataset weights", html.escape(", ".join(f"{k}: {v:g}" for k, v in
                                                  (settings.get("dataset_weights") or {}).items())
                                        or "equal")),
        ("in-domain accuracy (joint rank)", html.escape(str(settings.get("in_domain") or "—"))),
        ("confidence (intervals, top set)", f"{float(d.get('confidence', math.nan)):.0%}"
         if d else "—"),
        ("resamples", html.escape(f"{d.get('resamples')} fold-bootstrap replicates of "
                                  f"{d.get('folds')} folds over {d.get('fold_fraction')} of the "
                                  "images") if d else "—"),
        ("top-set rule", html.escape(str(d.get("top_set_rule", "—")))),
        ("flags that block the top set", html.escape(", ".join(d.get("blocking_flags", [])))),
    ]
    for ds, c in (d.get("consensus") or {}).items():
        w = c.get("kendall_w")
        text = f"Kendall's W = {w:.2f}" if isinstance(w, float) and math.isfinite(w) else "W n/a"
        text += " over " + ", ".join(c.get("metrics", []))
        if c.get("partial"):
            text += f" (partial coverage, left out: {', '.join(c['partial'])})"
        items.append((f"consensus on {html.escape(ds)}", html.escape(text)))
    body = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
    return f"<h2 id='settings'>Settings</h2><dl class='settings'>{body}</dl>"


def agreement_summary(agree: pd.DataFrame) -> pd.DataFrame:
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
