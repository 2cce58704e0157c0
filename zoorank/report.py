"""REPORT stage: a static, self-contained ``report/index.html`` with its PNG plots beside it.

Reads what RANK wrote (the ``leaderboard``, ``agreement`` and ``failed`` tables,
``oracle``) plus ``metrics`` and ``reliability/<dataset>/<group>.parquet``, and
writes through :class:`~zoorank.store.Store` (so an object store works too):

* the leaderboard (headline columns, the full table folded), the agreement of every label-free
  metric with every oracle metric (Kendall τ-b with its bootstrap interval);
* ``scatter-<dataset>-<oracle>.png``: each label-free metric against an oracle metric, τ in titles;
* ``agreement-<dataset>.png``: a heat map of signed Kendall τ-b between the rankings of all metrics;
* ``ranks.png``: each model's rank per dataset (primary metric) and aggregated;
* ``reliability-<dataset>-<group>.png``: histograms of NC and its baselines per seed ensemble;
* ``budget-<dataset>-<oracle>.png``: the label-budget curve (``oracle.transferability``): τ of each
  few-label score vs labels per class, label-free metrics as horizontal lines, with one crossover
  line per score (:mod:`zoorank.budget`);
* the failed models with their reasons.

HTML uses relative image links and inline CSS only. Figures are drawn on ``matplotlib.figure.Figure``
objects rendered by the Agg canvas (no pyplot, no global backend change).
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog import Catalog, build_catalog, reliability_path
from zoorank.config import RunConfig
from zoorank.errors import InputError
from zoorank.leaderboard import (
    AGREEMENT,
    FAILED,
    FAILED_COLUMNS,
    LEADERBOARD,
    ORACLE,
    leaderboard_headline,
    metrics_fingerprint,
    print_leaderboard,
    ranking_vector,
    read_rank_outputs,
    write_if_changed,
)
from zoorank.metrics.consensus import rank_agreement_matrix
from zoorank.store import Store
from zoorank.store.layout import REPORT_DIR

MAX_ANNOTATED_MODELS = 25
MAX_RANK_CHART_MODELS = 30
#: seed ensembles drawn in a dataset's NC box plot (the best and worst halves beyond it).
MAX_NC_BOXES = 40
#: per-ensemble histograms drawn per dataset (the best and worst by median NC beyond it).
MAX_RELIABILITY_HISTOGRAMS = 6
#: oracle metrics drawn against the label-free metrics, in order of preference (the first two found).
SCATTER_ORACLES = ("knn_accuracy", "linear_probe_accuracy", "recall_at_1", "mdl")

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif;
       margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: right; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
.note { color: #666; font-size: .9em; } details { margin: .5em 0 1.5em; }
.badge { display: inline-block; padding: 0 .45em; margin: 0 .15em; border-radius: .6em;
         font-size: .8em; background: #fde2b5; color: #7a4b00; }
.badge.blocking { background: #f6c3c3; color: #7a0000; }
.decision { background: #f7fbff; border: 1px solid #cfe0f3; padding: .6em 1.2em; }
.decision h2 { margin-top: .4em; }
.warn { background: #fff4e0; border-left: 4px solid #e6a23c; padding: .4em .8em; }
.agree { border-left: 4px solid #4caf50; padding: .4em .8em; }
.disagree { border-left: 4px solid #e05a47; padding: .4em .8em; background: #fff3f1; }
dl.settings { display: grid; grid-template-columns: max-content auto; gap: .2em 1.2em; }
dl.settings dt { font-weight: 600; } dl.settings dd { margin: 0; }
"""


# -- figures (pure: frames in, PNG bytes out) ------------------------------------------------------


#: label-free metrics drawn as labelled lines in the label-budget plot (the best by τ; the rest grey).
BUDGET_LABELLED_METRICS = 3


def budget_png(curve: pd.DataFrame, label_free: pd.DataFrame, dataset: str,
               oracle_metric: str) -> bytes:
    """τ vs labels per class of each few-label score (mean over seeds, bootstrap band), with the
    label-free metrics' τ as horizontal lines (the zero-label reference)."""
    fig = _figure(7.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    means = curve[curve["budget_seed"] == "mean"]
    ks = sorted(means["labels_per_class"].unique())
    for score, rows in means.groupby("metric", sort=True):
        rows = rows.sort_values("labels_per_class")
        x = rows["labels_per_class"].to_numpy(np.float64)
        line = ax.plot(x, rows["kendall_tau"].to_numpy(np.float64), marker="o", lw=2,
                       label=str(score))[0]
        low = rows["kendall_ci_low"].to_numpy(np.float64)
        high = rows["kendall_ci_high"].to_numpy(np.float64)
        if np.isfinite(low).any():
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, lw=0)
    ref = label_free[(label_free["dataset"] == dataset)
                     & (label_free["oracle_metric"] == oracle_metric)
                     & (label_free["family"] == "all")
                     & (label_free["metric"] != "leaderboard_rank")]
    ref = ref[np.isfinite(ref["kendall_tau"].to_numpy(np.float64))]
    ref = ref.sort_values("kendall_tau", ascending=False)
    for i, r in enumerate(ref.itertuples(index=False)):
        if i < BUDGET_LABELLED_METRICS:
            ax.axhline(r.kendall_tau, ls="--", lw=1.2, color=f"C{7 + i % 3}",
                       label=f"{r.metric} (label-free)")
        else:
            ax.axhline(r.kendall_tau, ls=":", lw=0.7, color="#bbbbbb")
    if ks:
        ax.set_xscale("log")
        ax.set_xticks(ks, labels=[f"{k:g}" for k in ks])
        ax.minorticks_off()
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel("labels per class", fontsize=8)
    ax.set_ylabel(f"Kendall τ-b vs {oracle_metric}", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{dataset}: label budget (lines: mean over seeds, bands: 95% bootstrap over "
                 "models; dashed: label-free)", fontsize=9)
    return _png(fig)


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
                     "class</h3>" + _img(name, f"{ds} label-budget curve vs {o_name}"))
    return "".join(parts)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    # No "Software" metadata entry: identical inputs give identical bytes, so reruns are no-ops.
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": None}, bbox_inches="tight")
    return buf.getvalue()


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def scatter_png(board: pd.DataFrame, dataset: str, metrics: Sequence[str], oracle_metric: str,
                taus: Mapping[str, float]) -> bytes:
    """One panel per label-free metric: metric value (x) vs oracle value (y), τ in the title."""
    cols = min(4, len(metrics))
    rows = math.ceil(len(metrics) / cols)
    fig = _figure(3.2 * cols, 2.8 * rows)
    y = board[f"{dataset}/{oracle_metric}"].to_numpy(np.float64)
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, i + 1)
        x = board[f"{dataset}/{metric}"].to_numpy(np.float64)
        ok = np.isfinite(x) & np.isfinite(y)
        ax.scatter(x[ok], y[ok], s=22, color="#3572b0")
        if ok.sum() <= MAX_ANNOTATED_MODELS:
            for xi, yi, name in zip(x[ok], y[ok], board["model_id"].to_numpy()[ok]):
                ax.annotate(str(name), (xi, yi), fontsize=6, xytext=(2, 2),
                            textcoords="offset points")
        tau = taus.get(metric, float("nan"))
        missing = int((~np.isfinite(x)).sum())
        title = f"{metric}  τ={tau:.2f}" if np.isfinite(tau) else f"{metric}  τ=n/a"
        if missing:
            title += f"  ({missing} n/a)"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(metric, fontsize=7)
        ax.set_ylabel(oracle_metric, fontsize=7)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"{dataset}: label-free metrics vs {oracle_metric}", fontsize=10)
    return _png(fig)


def heatmap_png(tau: pd.DataFrame, dataset: str) -> bytes:
    """Signed Kendall τ-b between the rankings of every pair of metrics (−1 … 1)."""
    n = len(tau)
    fig = _figure(max(4.0, 0.45 * n + 2), max(3.5, 0.45 * n + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(tau.to_numpy(np.float64), cmap="RdBu", vmin=-1, vmax=1)
    ax.set_xticks(range(n), labels=list(tau.columns), rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(n), labels=list(tau.index), fontsize=7)
    if n <= 20:
        for i in range(n):
            for j in range(n):
                v = tau.iat[i, j]
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if abs(v) > 0.6 else "black")
    fig.colorbar(im, ax=ax, shrink=0.8, label="Kendall τ-b")
    ax.set_title(f"{dataset}: rank agreement between metrics", fontsize=10)
    return _png(fig)


def ranks_png(board: pd.DataFrame, datasets: Sequence[str]) -> bytes:
    """Each model's rank on every dataset (primary metric) and its aggregated rank."""
    top = board.head(MAX_RANK_CHART_MODELS)
    columns = [f"rank/{d}" for d in datasets if f"rank/{d}" in top] + ["rank"]
    labels = [c.removeprefix("rank/") for c in columns[:-1]] + ["aggregated"]
    fig = _figure(max(4.0, 1.4 * len(columns) + 2.5), max(3.0, 0.28 * len(top) + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    xs = np.arange(len(columns))
    for _, row in top.iterrows():
        r = row[columns].to_numpy(np.float64)
        ax.plot(xs, r, marker="o", linewidth=1, markersize=4)
        ax.annotate(str(row["model_id"]), (xs[-1], r[-1]), fontsize=6, xytext=(4, 0),
                    textcoords="offset points", va="center")
    ax.set_xticks(xs, labels=labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_ylabel("rank (1 = best)", fontsize=8)
    ax.set_title("per-dataset rank of the primary metric", fontsize=10)
    return _png(fig)


def reliability_png(rel: pd.DataFrame, dataset: str, group: str) -> bytes:
    """Histograms of the per-sample reliability columns of one seed ensemble."""
    columns = [c for c in ("nc", "mean_knn_distance", "embedding_norm", "feature_variance")
               if c in rel]
    fig = _figure(3.0 * max(1, len(columns)), 2.6)
    for i, column in enumerate(columns):
        ax = fig.add_subplot(1, len(columns), i + 1)
        values = rel[column].to_numpy(np.float64)
        values = values[np.isfinite(values)]
        ax.hist(values, bins=30, color="#5a9e6f")
        ax.set_title(f"{column} (mean {np.mean(values):.3g})" if len(values) else column,
                     fontsize=8)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"{dataset} / ensemble {group}: {len(rel)} samples", fontsize=10)
    return _png(fig)


def nc_boxes_png(rels: Mapping[str, pd.DataFrame], dataset: str) -> bytes:
    """Per-sample NC of each seed ensemble as one box, ordered by median (best on top)."""
    groups = _ends(list(rels), MAX_NC_BOXES)
    title = f"{dataset}: per-sample NC of {len(rels)} seed ensembles"
    if len(groups) < len(rels):
        title += f" (best and worst {MAX_NC_BOXES // 2} by median)"
    fig = _figure(6.5, max(2.5, 0.24 * len(groups) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    data = [v[np.isfinite(v)] for v in (rels[g]["nc"].to_numpy(np.float64) for g in groups)]
    positions = np.arange(len(groups))[::-1]  # first group (best) at the top
    ax.boxplot(data, positions=positions, orientation="horizontal", widths=0.6,
               showfliers=False, patch_artist=True,
               boxprops={"facecolor": "#cfe3d4"}, medianprops={"color": "#2f6b3f"})
    ax.set_yticks(positions, labels=groups, fontsize=6)
    if len(groups) < len(rels):  # the omitted middle lies between the two halves
        ax.axhline(positions[MAX_NC_BOXES // 2] + 0.5, color="#999", linestyle="--", linewidth=0.8)
    ax.set_xlabel("NC (higher = more reliable)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(title, fontsize=9)
    return _png(fig)


def _by_median_nc(rels: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The ensembles ordered by median NC, best first (ties and missing NC by name)."""
    def median(rel: pd.DataFrame) -> float:
        values = rel["nc"].to_numpy(np.float64) if "nc" in rel else np.array([])
        values = values[np.isfinite(values)]
        return float(np.median(values)) if len(values) else -np.inf

    return dict(sorted(rels.items(), key=lambda item: (-median(item[1]), item[0])))


def _ends(items: Sequence[str], limit: int) -> list[str]:
    """All of ``items`` if there are at most ``limit``, else the first and last ``limit // 2``."""
    if len(items) <= limit:
        return list(items)
    return [*items[: limit // 2], *items[len(items) - (limit - limit // 2):]]


#: models drawn in the forest plot of rank intervals (the top set is always drawn).
MAX_FOREST_MODELS = 30


def forest_png(board: pd.DataFrame) -> bytes:
    """Rank intervals as a forest plot: one row per model (best on top), a bar from ``rank_low``
    to ``rank_high``, a dot at its rank; top-set models in blue, blocked (flagged) ones in red."""
    from zoorank.metrics.health import BLOCKING

    ranked = board[board["rank"].notna()]
    top = ranked[ranked["in_top_set"].astype(bool)]
    rows = pd.concat([top, ranked[~ranked["in_top_set"].astype(bool)]]).head(
        max(MAX_FOREST_MODELS, len(top))).sort_values("rank", kind="stable")
    fig = _figure(6.5, max(2.2, 0.26 * len(rows) + 1.1))
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
    ax.set_title("rank intervals (blue: top set; red: health flag keeps it out)", fontsize=9)
    return _png(fig)


def _short(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with an ellipsis in the middle (ids share prefixes)."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2):]


def _badges(flags: Any) -> str:
    from zoorank.metrics.health import BLOCKING

    out = []
    for f in (x for x in str(flags or "").split(",") if x):
        blocking = f.split(":")[-1] in BLOCKING
        out.append(f'<span class="badge{" blocking" if blocking else ""}">{html.escape(f)}</span>')
    return "".join(out) or "—"


def _interval(r: Any) -> str:
    low, high = float(r["rank_low"]), float(r["rank_high"])
    if not (np.isfinite(low) and np.isfinite(high)):
        return "—"
    return f"{low:.0f}" if low == high else f"{low:.0f}–{high:.0f}"


def labels_summary(agree: pd.DataFrame, settings: Mapping[str, Any]) -> list[str]:
    """Plain sentences: which label-free metric tracked the labels best, how the leaderboard's
    order did, and how many labels per class would change the picture (label-budget crossover)."""
    from zoorank.budget import crossovers, split_agreement

    if agree.empty:
        return []
    label_free, _ = split_agreement(agree)
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
        text = (f"With labels ({ds}, {o_name}): <b>{html.escape(str(best['metric']))}</b> tracked "
                f"the labels best on this zoo (Kendall τ = {best['kendall_tau']:+.2f}")
        if np.isfinite(best["kendall_ci_low"]):
            text += f", 95% interval {best['kendall_ci_low']:+.2f} to {best['kendall_ci_high']:+.2f}"
        text += ")"
        ordered = (settings.get("primary_metric") or {}).get(ds)
        mine = rows[rows["metric"] == ordered]
        if ordered and ordered != best["metric"] and len(mine):
            text += (f"; the leaderboard's order, <code>{html.escape(str(ordered))}</code>, "
                     f"τ = {float(mine['kendall_tau'].iloc[0]):+.2f}")
        out.append(text + ".")
    cross = crossovers(agree)
    cross = cross[cross["oracle_metric"] == o_name] if not cross.empty else cross
    if not cross.empty:
        hits = cross[np.isfinite(cross["crossover_labels_per_class"].to_numpy(np.float64))]
        if len(hits):
            first = hits.loc[hits["crossover_labels_per_class"].idxmin()]
            out.append(f"Labels would change the picture from <b>"
                       f"{first['crossover_labels_per_class']:.0f} labels per class</b>: "
                       f"{html.escape(str(first['score']))} then ranks the models closer to "
                       f"{o_name} (τ = {first['tau_at_crossover']:+.2f}) than the best label-free "
                       f"metric ({first['best_label_free_tau']:+.2f}).")
        else:
            top_k = float(cross["max_labels_per_class"].max())
            out.append(f"Up to {top_k:.0f} labels per class, no few-label score ranks the models "
                       f"closer to {o_name} than the best label-free metric.")
    return out


def decision_section(board: pd.DataFrame, settings: Mapping[str, Any], agree: pd.DataFrame,
                     images: dict[str, bytes]) -> str:
    """The report's first screen: the top set with its rank intervals (a forest plot), flags as
    badges, the consensus sentence, the width warning and what the labels say."""
    d = settings.get("decision") or {}
    ranked = board[board["rank"].notna()] if "rank" in board else board.iloc[0:0]
    if "in_top_set" not in board or ranked.empty:
        return ("<section id='decision' class='decision'><h2>Recommended models</h2>"
                "<p>No model could be ranked (see the failed models below).</p></section>")
    top = ranked[ranked["in_top_set"].astype(bool)]
    confidence = float(d.get("confidence", 0.95))
    primary = settings.get("primary_metric") or {}
    parts = ["<section id='decision' class='decision'>",
             f"<h2>Recommended models: {len(top)} of {len(board)}</h2>",
             f"<p id='top-set-rule'>The <b>top set</b> is the models not distinguishable from rank 1 "
             f"at {confidence:.0%} confidence, ordered by <code>"
             f"{html.escape(str(settings.get('ordered_by')))}</code>"
             + (" (" + ", ".join(f"{html.escape(k)}: {html.escape(v)}" for k, v in primary.items())
                + ")" if len(primary) > 1 else "")
             + ". Rank interval: the ranks a model takes over "
             f"{d.get('resamples', '')} resamples of the evaluation images "
             f"({d.get('folds', '')} disjoint folds).</p>"]
    if str(d.get("top_set_rule", "")).startswith("point"):
        parts.append("<p class='warn'>No resampled rows in the store: the top set is the rank-1 "
                     "model only, without intervals (run <code>zoorank score</code> with "
                     "<code>score.resample_folds</code> ≥ 2).</p>")
    rows = []
    value_cols = [f"{ds}/{m}" for ds, m in primary.items() if f"{ds}/{m}" in board]
    for _, r in top.iterrows():
        values = "".join(f"<td>{_fmt(r[c])}</td>" for c in value_cols)
        rows.append(f"<tr><td>{_fmt(r['rank'])}</td><td class='text'>{_fmt(r['model_id'])}</td>"
                    f"<td>{_interval(r)}</td><td>{_fmt(r['p_best'])}</td>{values}"
                    f"<td class='text'>{_badges(r.get('flags'))}</td></tr>")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in value_cols)
    parts.append("<table id='top-set'><thead><tr><th>rank</th><th class='text'>model</th>"
                 f"<th>rank interval</th><th>p(best)</th>{head}<th class='text'>flags</th>"
                 f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    flagged = ranked[ranked["flags"].astype(str) != ""] if "flags" in ranked else ranked.iloc[0:0]
    held = flagged[~flagged["in_top_set"].astype(bool)]
    if len(flagged):
        items = "".join(f"<li>{_fmt(r['model_id'])} (rank {_fmt(r['rank'])}): "
                        f"{_badges(r['flags'])}</li>" for _, r in flagged.head(12).iterrows())
        more = f"<li>… {len(flagged) - 12} more in the full table</li>" if len(flagged) > 12 else ""
        parts.append(f"<div id='flags'><p>{len(flagged)} model(s) carry health flags"
                     + (f"; {len(held)} of them are outside the top set" if len(held) else "")
                     + f":</p><ul>{items}{more}</ul></div>")
    sentence = str(d.get("consensus_sentence") or "")
    if sentence:
        cls = "agree" if d.get("metrics_agree") else "disagree"
        parts.append(f"<p id='consensus' class='{cls}'>{html.escape(sentence)}</p>")
    if d.get("width_warning"):
        parts.append(f"<p id='width-warning' class='warn'>{html.escape(d['width_warning'])}</p>")
    for line in labels_summary(agree, settings):
        parts.append(f"<p class='labels'>{line}</p>")
    images["forest.png"] = forest_png(board)
    parts.append("<div id='forest'>" + _img("forest.png", "forest plot of rank intervals")
                 + "</div></section>")
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


# -- HTML ------------------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return "—" if math.isnan(v) else f"{v:.4g}"
    return html.escape(str(v))


def _table(frame: pd.DataFrame, text_columns: Sequence[str] = ()) -> str:
    text = set(text_columns) | {c for c in frame.columns if frame[c].dtype == object}
    head = "".join(f'<th class="{"text" if c in text else ""}">{html.escape(str(c))}</th>'
                   for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = "".join(f'<td class="{"text" if c in text else ""}">{_fmt(v)}</td>'
                        for c, v in zip(frame.columns, row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _img(name: str, alt: str) -> str:
    return f'<img src="{html.escape(name)}" alt="{html.escape(alt)}">'


def _agreement_summary(agree: pd.DataFrame) -> pd.DataFrame:
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


def _read(store: Store, relpath: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    return store.read_frame(relpath, columns)


def run_report(config: RunConfig, catalog: Catalog | None = None) -> str:
    """REPORT stage: write ``report/index.html`` and its PNGs; returns the page's path or URI.

    Reads the fresh rows and tables only (``catalog``: built from ``config`` when not given)."""

    store = Store(config.store)
    # one snapshot: the leaderboard, its settings and the agreement and failed tables of its commit
    board, settings, written = read_rank_outputs(store)
    if board is None:
        raise InputError(f"{store.name}: no {LEADERBOARD} table; run `zoorank rank CONFIG` first")
    catalog = build_catalog(config) if catalog is None else catalog
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    fresh_rel = catalog.fresh_reliability(manifest, store.read_metrics())
    if settings.get("metrics_fingerprint") != metrics_fingerprint(config, metrics):
        raise InputError(f"{store.name}/{LEADERBOARD} was not built from this config's "
                         "current metrics (the config, the zoo or the metrics changed since); "
                         "run `zoorank rank CONFIG` first")
    agree_all = written[AGREEMENT]
    agree = agree_all[agree_all["labels_per_class"].isna()] if "labels_per_class" in agree_all \
        else agree_all
    failed = written[FAILED]
    oracle = _read(store, ORACLE)
    datasets = [d.name for d in config.datasets]
    model_ids = set(board["model_id"])
    metrics = metrics[metrics["model_id"].isin(model_ids)] if not metrics.empty else metrics
    oracle = oracle[oracle["model_id"].isin(model_ids)] if not oracle.empty else oracle

    images: dict[str, bytes] = {}
    sections: list[str] = []

    # -- the decision first, then the leaderboard
    sections.append(decision_section(board, settings, agree_all, images))
    primary = settings.get("primary_metric") or {}
    lead = [f"<h2>Leaderboard</h2><p class='note'>{len(board)} models, ordered by "
            f"<code>{html.escape(str(settings.get('ordered_by')))}</code>: aggregation "
            f"<code>{html.escape(str(settings.get('aggregation')))}</code> of the primary metric's "
            "ranks (" + ", ".join(f"{html.escape(d)}: <code>{html.escape(m)}</code>"
                                  for d, m in primary.items())
            + "). Rank 1 = best; ties averaged. A model with no value on a dataset has no rank "
            "there (aggregated over the datasets it has); the <code>missing</code> column says "
            "why."]
    if settings.get("in_domain"):
        lead.append(f" Joint rank = sqrt(rank · rank of <code>"
                    f"{html.escape(settings['in_domain'])}</code>) (CLID §3.5).")
    lead.append("</p>")
    headline = leaderboard_headline(board, settings)
    lead.append(_table(headline, ["model_id", "family", "group", "flags"]))
    lead.append("<details><summary>Every metric and rank</summary>"
                + _table(board, ["model_id", "family", "group"]) + "</details>")
    sections.append("".join(lead))

    # -- per-dataset rank chart
    if len(board) and board["rank"].notna().any():
        images["ranks.png"] = ranks_png(board, datasets)
        sections.append("<h2>Ranks per dataset</h2>" + _img("ranks.png", "rank chart"))

    # -- agreement with the oracle: table, scatter plots
    if not agree.empty:
        sections.append("<h2>Agreement with the label oracle</h2><p class='note'>Signed Kendall "
                        "τ-b between each label-free metric (oriented: higher = better) and each "
                        "oracle metric over all models, with its bootstrap 95% interval over "
                        "models. The full table (Spearman, Pearson, top-1 regret, top-k recall, "
                        "per family) is the <code>agreement</code> table.</p>"
                        + _table(_agreement_summary(agree), ["metric"]))
    for ds in datasets:
        ds_metrics = sorted(m for m in metrics.loc[metrics["dataset"] == ds, "metric"].unique()
                            if f"{ds}/{m}" in board
                            and ranking_vector(m, np.zeros(1)) is not None) \
            if not metrics.empty else []
        ds_oracle = set(oracle.loc[oracle["dataset"] == ds, "metric"]) if not oracle.empty else set()
        chosen = [o for o in SCATTER_ORACLES if o in ds_oracle and f"{ds}/{o}" in board][:2]
        for o_name in chosen:
            a = agree[(agree["dataset"] == ds) & (agree["oracle_metric"] == o_name)
                       & (agree["family"] == "all")] if not agree.empty else agree
            taus = dict(zip(a["metric"], a["kendall_tau"])) if not a.empty else {}
            if ds_metrics:
                name = f"scatter-{ds}-{o_name}.png"
                images[name] = scatter_png(board, ds, ds_metrics, o_name, taus)
                sections.append(f"<h3>{html.escape(ds)}: metrics vs {html.escape(o_name)}</h3>"
                                + _img(name, f"{ds} metrics vs {o_name}"))
        # -- heat map of rank agreement between metrics (label-free and oracle)
        names = ds_metrics + sorted(o for o in ds_oracle if f"{ds}/{o}" in board)
        if len(names) >= 2 and len(board) >= 2:
            values, directions = {}, {}
            for m in names:
                oriented = ranking_vector(m, board[f"{ds}/{m}"].to_numpy(np.float64))
                if oriented is not None:
                    values[m], directions[m] = oriented
            tau = rank_agreement_matrix(pd.DataFrame(values), directions)
            name = f"agreement-{ds}.png"
            images[name] = heatmap_png(tau, ds)
            sections.append(f"<h2>Rank agreement between metrics: {html.escape(ds)}</h2>"
                            + _img(name, f"{ds} rank agreement heat map"))

    # -- label-budget curve (oracle.transferability)
    if section := budget_section(agree_all, images):
        sections.append(section)

    # -- reliability per ensemble: an NC box plot per dataset, histograms for the extremes
    rel_parts = []
    for ds in datasets:
        rels = {group: store.read_frame(reliability_path(ds, group))
                for d, group in sorted(fresh_rel)
                if d == ds and store.exists(reliability_path(ds, group))}
        rels = _by_median_nc({g: r for g, r in rels.items() if not r.empty})
        with_nc = {g: r for g, r in rels.items() if "nc" in r}
        if len(with_nc) > 1:
            name = f"nc-{ds}.png"
            images[name] = nc_boxes_png(with_nc, ds)
            rel_parts.append(_img(name, f"{ds} NC per ensemble"))
        shown = _ends(list(rels), MAX_RELIABILITY_HISTOGRAMS)
        if len(shown) < len(rels):
            rel_parts.append(f"<p class='note'>{html.escape(ds)}: histograms of the "
                             f"{len(shown) // 2} ensembles with the highest and the "
                             f"{len(shown) - len(shown) // 2} with the lowest median NC; all "
                             f"{len(rels)} tables are under <code>reliability/{html.escape(ds)}/"
                             "</code>.</p>")
        for group in shown:
            name = f"reliability-{ds}-{group}.png"
            images[name] = reliability_png(rels[group], ds, group)
            rel_parts.append(_img(name, f"{ds} {group} reliability"))
    if rel_parts:
        sections.append("<h2>Per-sample reliability of seed ensembles</h2><p class='note'>NC: "
                        "higher = more reliable; mean k-NN distance and feature variance: higher "
                        "= less reliable.</p>" + "".join(rel_parts))

    # -- failed models, settings
    sections.append("<h2>Failed models</h2>" + (
        _table(failed, FAILED_COLUMNS) if not failed.empty else "<p>None.</p>"))
    sections.append(settings_section(settings, store.name))

    title = "zoorank report"
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{CSS}</style></head><body><h1>{title}</h1>"
            + "".join(sections) + "</body></html>\n")
    for name, data in images.items():
        write_if_changed(store, f"{REPORT_DIR}/{name}", data)
    for name in store.list_files(REPORT_DIR, suffix=".png"):  # plots of an earlier report
        if name not in images:
            store.delete(f"{REPORT_DIR}/{name}")
    write_if_changed(store, f"{REPORT_DIR}/index.html", page.encode())
    where = store.path(REPORT_DIR, "index.html")
    if not store.is_local:  # the URI a user can open (scheme kept, credentials removed)
        from zoorank.uris import join, redact

        where = redact(join(store.uri, where))
    if len(board):
        print_leaderboard(board, settings)
    from zoorank.budget import crossover_lines, crossovers
    from zoorank.console import output_console

    console = output_console()
    for line in crossover_lines(crossovers(agree_all)):
        console.print(line, markup=False, highlight=False)
    if len(failed):
        console.print(f"{len(failed)} failed or missing (model, dataset) entries (listed in the "
                      "report)", style="yellow")
    console.print(f"report: {where} ({len(images)} plots)", markup=False, highlight=False)
    return where
