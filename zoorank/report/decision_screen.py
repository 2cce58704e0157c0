"""The report's first screen, the decision card: its first heading names the pick, then the
pick's checkpoint (with a copy button), the shortlist and its measured record, the pick's
expected regret, the metrics' disagreement in one line, the next step and, after ``zoorank
label``, the few-label pick. Every caveat sits in collapsed ``<details>`` under it: the top set
(the Model Confidence Set of the board's metric) with its measured level, its rank intervals (a
forest plot), the metric's record against labels (:mod:`zoorank.decide.metric_record`), health
flags as badges, the consensus, the warnings (widths, library versions, confounds) and what the
labels say. The inputs are decision.json's document (:mod:`zoorank.decide.verdict`), the
leaderboard and its settings; the output is a :class:`~zoorank.report.page.Section` for
``decision.html.j2``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from zoorank.decide.leaderboard import failed_lines, record_lines
from zoorank.decide.verdict import build_decision, top_set_claim
from zoorank.report.page import Image, Section
from zoorank.report.plots import SCATTER_ORACLES, new_figure, png_bytes
from zoorank.store.redact import redact

#: models drawn in the forest plot of rank intervals (the top set first).
MAX_FOREST_MODELS = 30

#: top-set rows per page on the decision screen (a longer top set gets a filter box and pages).
TOP_SET_PAGE_SIZE = 20
#: shortlisted models listed on the card (the rest are counted; all of them are in decision.json).
SHORTLIST_SHOWN = 12

__all__ = ["decision_section", "card_context", "forest_png", "labels_summary", "top_set_claim"]


def forest_png(board: pd.DataFrame) -> bytes:
    """Rank intervals as a forest plot: one row per model (best on top), a bar from ``rank_low``
    to ``rank_high``, a dot at its rank; top-set models in blue, blocked (flagged) ones in red."""
    from zoorank.stats.health import BLOCKING

    ranked = board[board["rank"].notna()]
    top = ranked[ranked["in_top_set"].astype(bool)]
    # the top set first, then the best of the rest; at most MAX_FOREST_MODELS rows (a top set of
    # hundreds would make the figure metres tall: the full list is the table above it)
    rows = pd.concat([top, ranked[~ranked["in_top_set"].astype(bool)]]).head(
        MAX_FOREST_MODELS).sort_values("rank", kind="stable")
    fig = new_figure(6.5, max(2.2, 0.26 * len(rows) + 1.1))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows.itertuples(index=False)):
        flags = {f.split(":")[-1] for f in str(r.flags).split(",") if f}
        colour = "#c0392b" if flags & BLOCKING else ("#1f5fa8" if r.in_top_set else "#999999")
        low, high = float(r.rank_low), float(r.rank_high)
        if np.isfinite(low) and np.isfinite(high):
            ax.plot([low, high], [yi, yi], color=colour, lw=3 if r.in_top_set else 1.6,
                    solid_capstyle="round")
        ax.plot([float(r.rank)], [yi], "o", color=colour, ms=5)
    ax.set_yticks(y, labels=[_short(str(m), 40) for m in rows["model_id"]], fontsize=7)
    ax.set_xlabel("rank (1 = best); bar = rank interval", fontsize=8)
    ax.set_xlim(0.5, max(2.0, float(np.nanmax(rows[["rank", "rank_high"]].to_numpy(float)))
                         + 0.5) if len(rows) else 2)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", color="#eee")
    title = "rank intervals (blue: top set; red: health flag keeps it out)"
    if len(top) > MAX_FOREST_MODELS:
        title = f"rank intervals of the first {MAX_FOREST_MODELS} of the top set's {len(top)}"
    ax.set_title(title, fontsize=9)
    return png_bytes(fig)


def _short(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with an ellipsis in the middle (ids share prefixes)."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2):]


def _flags(flags: Any) -> list[dict[str, Any]]:
    """A model's flags as badges: ``{"name", "blocking"}`` each (blocking: keeps it out of the top
    set)."""
    from zoorank.stats.health import BLOCKING

    return [{"name": f, "blocking": f.split(":")[-1] in BLOCKING}
            for f in str(flags or "").split(",") if f]


def _interval(r: Any) -> str:
    low, high = float(r["rank_low"]), float(r["rank_high"])
    if not (np.isfinite(low) and np.isfinite(high)):
        return "—"
    return f"{low:.0f}" if low == high else f"{low:.0f}–{high:.0f}"


def labels_summary(agree: pd.DataFrame, settings: Mapping[str, Any]) -> list[str]:
    """Sentences (the inline markup of :func:`~zoorank.report.page.inline`): which label-free
    metric tracked the labels best, how the leaderboard's order did, and how many labels per
    class would change the picture (label-budget crossover)."""
    from zoorank.oracle.budget import crossovers, split_agreement

    if agree.empty:
        return []
    label_free, _ = split_agreement(agree)
    if "kind" in label_free:  # priors (size, width, published figures) are no label-free metric
        label_free = label_free[label_free["kind"].fillna("metric") != "prior"]
    a = label_free[(label_free["family"] == "all")]
    a = a[np.isfinite(a["kendall_tau"].to_numpy(np.float64))]
    if a.empty:
        return []
    prefer = [o for o in SCATTER_ORACLES if o in set(a["oracle_metric"])]
    o_name = prefer[0] if prefer else sorted(a["oracle_metric"])[0]
    out = []
    for ds, rows in a[a["oracle_metric"] == o_name].groupby("dataset", sort=False):
        metrics_only = rows[rows["metric"] != "leaderboard_rank"]
        if metrics_only.empty:
            continue
        best = metrics_only.loc[metrics_only["kendall_tau"].idxmax()]
        text = (f"With labels ({ds}, {o_name}): **{best['metric']}** tracked "
                f"the labels best on this zoo (Kendall τ = {best['kendall_tau']:+.2f}")
        if np.isfinite(best["kendall_ci_low"]):
            text += f", 95% interval {best['kendall_ci_low']:+.2f} to {best['kendall_ci_high']:+.2f}"
        text += ")"
        ordered = (settings.get("primary_metric") or {}).get(ds)
        mine = rows[rows["metric"] == ordered]
        if ordered and ordered != best["metric"] and len(mine):
            text += (f"; the leaderboard's order, `{ordered}`, "
                     f"τ = {float(mine['kendall_tau'].iloc[0]):+.2f}")
        out.append(text + ".")
    cross = crossovers(agree)
    cross = cross[cross["oracle_metric"] == o_name] if not cross.empty else cross
    if not cross.empty:
        hits = cross[np.isfinite(cross["crossover_labels_per_class"].to_numpy(np.float64))]
        if len(hits):
            first = hits.loc[hits["crossover_labels_per_class"].idxmin()]
            out.append(f"Labels would change the picture from **"
                       f"{first['crossover_labels_per_class']:.0f} labels per class**: "
                       f"{first['score']} then ranks the models closer to "
                       f"{o_name} (τ = {first['tau_at_crossover']:+.2f}) than the best label-free "
                       f"metric ({first['best_label_free_tau']:+.2f}).")
        else:
            top_k = float(cross["max_labels_per_class"].max())
            out.append(f"Up to {top_k:.0f} labels per class, no few-label score ranks the models "
                       f"closer to {o_name} than the best label-free metric.")
    return out


def _percent(v: Any) -> str:
    return "—" if v is None else f"{float(v):.0%}"


def card_context(decision: Mapping[str, Any], board: pd.DataFrame,
                 settings: Mapping[str, Any]) -> dict[str, Any]:
    """What the decision card shows, from ``decision`` (decision.json's document): the pick and
    its checkpoint, the shortlist (with each model's value of the board's metric) and its measured
    record, the expected regret, the disagreement line, the next step and the few-label picks."""
    pick = dict(decision.get("pick") or {})
    short = dict(decision.get("shortlist") or {})
    primary = dict(settings.get("primary_metric") or {})
    value_cols = [f"{ds}/{m}" for ds, m in primary.items() if f"{ds}/{m}" in board][:2]
    ids = [str(m) for m in short.get("models") or []]
    rows = board.set_index(board["model_id"].astype(str)) if len(board) else board
    listed = [{"model_id": m, "rank": rows.loc[m, "rank"] if m in rows.index else None,
               "values": [rows.loc[m, c] if m in rows.index else None for c in value_cols],
               "is_pick": m == pick.get("model_id")} for m in ids[:SHORTLIST_SHOWN]]
    measured = short.get("hits") is not None and short.get("zoos")
    regret = dict(decision.get("expected_regret_pp") or {})
    regret_text = {k: "—" if regret.get(k) is None else f"{float(regret[k]):.2f}"
                   for k in ("median", "p90")}
    few = decision.get("few_label") or {}
    verdict = dict(decision.get("verdict") or {})  # the few-label pick first, when labels exist
    first_few = None if verdict.get("basis") != "labels" else {
        **verdict, "p_best_text": "—" if verdict.get("p_best") is None
        else f"{float(verdict['p_best']):.2f}"}
    return {
        "pick": pick,
        "first_few": first_few,
        "record_lines": record_lines(decision.get("record"), {})
        if (decision.get("record") or {}).get("held_out_units") else [],
        "failure_lines": failed_lines(decision.get("counts") or {}, decision.get("failed") or [],
                                      10 ** 6),
        "shortlist": {
            "models": listed, "size": len(ids), "more": max(0, len(ids) - SHORTLIST_SHOWN),
            "text": str(short.get("text") or ""), "measured": bool(measured),
            "hits": short.get("hits"), "zoos": short.get("zoos"),
            "hit_rate": _percent(short.get("hit_rate")),
            "mean_size": short.get("mean_size"),
            "mean_size_fraction": _percent(short.get("mean_size_fraction")),
            "held_out_zoos": short.get("held_out_zoos"),
            "coverage_note": str(short.get("coverage_note") or ""),
        },
        "value_columns": value_cols,
        "regret": {**regret_text, "zoos": regret.get("zoos")}
        if regret.get("median") is not None else None,
        "disagreement": str(decision.get("disagreement") or ""),
        "next_step": dict(decision.get("next_step") or {}),
        "few_label": [{"dataset": ds, **dict(e)} for ds, e in few.items()],
        "caveats": [str(c) for c in decision.get("caveats") or []],
    }


def decision_section(board: pd.DataFrame, settings: Mapping[str, Any], agree: pd.DataFrame,
                     version_warning: str | None = None,
                     decision: Mapping[str, Any] | None = None) -> Section:
    """The report's first screen, the decision card (``decision``: decision.json's document; built
    here from the board when not given): its first heading names the pick, then the checkpoint
    with a copy button, the shortlist and its measured record, the expected regret, the metrics'
    disagreement, the next step and the few-label picks. Every caveat (the top set and its
    measured level, the metric's record, health flags, warnings, confounds, the oracle's top set,
    ``version_warning``: the libraries whose versions differ between the store's entries) sits
    in collapsed ``<details>`` under it, with the top set's table and forest plot. Template
    ``decision.html.j2``."""
    d = settings.get("decision") or {}
    ranked = board[board["rank"].notna()] if "rank" in board else board.iloc[0:0]
    warning = redact(version_warning) if version_warning else ""
    if "in_top_set" not in board or ranked.empty:
        return Section(id="decision", title="Recommended models", template="decision.html.j2",
                       context={"ranked": False, "version_warning": warning})
    if decision is None:
        decision = build_decision(board, settings, {}, "")
    top = ranked[ranked["in_top_set"].astype(bool)]
    primary = dict(settings.get("primary_metric") or {})
    value_cols = [f"{ds}/{m}" for ds, m in primary.items() if f"{ds}/{m}" in board]
    flagged = ranked[ranked["flags"].astype(str) != ""] if "flags" in ranked else ranked.iloc[0:0]
    held = flagged[~flagged["in_top_set"].astype(bool)]
    top_set = dict(decision.get("top_set") or {})
    context = {
        "ranked": True,
        **card_context(decision, board, settings),
        "total": len(board),
        "confidence": top_set.get("level") or top_set_claim(d)["level"],
        "ordered_by": str(settings.get("ordered_by")),
        "primary": primary,
        "resamples": d.get("resamples", ""),
        "folds": d.get("folds", ""),
        "point_rule": str(d.get("top_set_rule", "")).startswith("point"),
        "top_value_columns": value_cols,
        "top": [{"rank": r["rank"], "model_id": str(r["model_id"]), "interval": _interval(r),
                 "p_best": r["p_best"], "values": [r[c] for c in value_cols],
                 "tied_with": str(r.get("tied_with") or ""),
                 "flags": _flags(r.get("flags"))} for _, r in top.iterrows()],
        "flagged": [{"model_id": str(r["model_id"]), "rank": r["rank"],
                     "flags": _flags(r["flags"])} for _, r in flagged.head(12).iterrows()],
        # a wide top set (an uncertain ranking of a large zoo) gets pages, not a screen-long table
        "uses_pager": len(top) > TOP_SET_PAGE_SIZE,
        "page_size": TOP_SET_PAGE_SIZE,
        "n_flagged": len(flagged),
        "n_held": len(held),
        "metrics_agree": bool(d.get("metrics_agree")),
        "version_warning": warning,
        "has_ties": bool("tied_with" in top and (top["tied_with"].astype(str) != "").any()),
        "labels": labels_summary(agree, settings),
    }
    return Section(id="decision", title="", template="decision.html.j2",
                   context=context, css_class="decision",
                   images=[Image("forest.png", "forest plot of rank intervals",
                                 forest_png(board))])
