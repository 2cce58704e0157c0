"""The report's figures (pure: frames in, PNG bytes or a Plotly figure dict out): metric-vs-oracle
scatter plots (interactive: Plotly, a point names its model on hover), the heat map of rank agreement
between metrics, the per-dataset rank chart, reliability histograms and NC box plots, and the
label-budget curve (static PNGs: few points, no model to identify).

Figures are drawn on ``matplotlib.figure.Figure`` objects rendered by the Agg canvas (no pyplot, no
global backend change); a PNG carries no "Software" entry, so identical inputs give identical bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from zoorank.metrics import registry

MAX_RANK_CHART_MODELS = 30

#: seed ensembles drawn in a dataset's NC box plot (the best and worst halves beyond it).
MAX_NC_BOXES = 40

#: per-ensemble histograms drawn per dataset (the best and worst by median NC beyond it).
MAX_RELIABILITY_HISTOGRAMS = 6

#: oracle metrics drawn against the label-free metrics, in order of preference (the first two found).
SCATTER_ORACLES = (*registry.oracles(), "recall_at_1", "mdl")

#: label-free metrics drawn as labelled lines in the label-budget plot (the best by τ; the rest grey).
BUDGET_LABELLED_METRICS = 3


def budget_png(curve: pd.DataFrame, label_free: pd.DataFrame, dataset: str,
               oracle_metric: str) -> bytes:
    """τ vs labels per class of each few-label score (mean over seeds, bootstrap band), with the
    label-free metrics' τ as horizontal lines (the zero-label reference)."""
    fig = new_figure(7.0, 4.2)
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
    if "kind" in ref:  # priors are drawn by the priors section, not as a label-free line
        ref = ref[ref["kind"].fillna("metric") != "prior"]
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
    return png_bytes(fig)


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    # No "Software" metadata entry: identical inputs give identical bytes, so reruns are no-ops.
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": None}, bbox_inches="tight")
    return buf.getvalue()


def new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _finite_list(values: np.ndarray) -> list[float | None]:
    """Values for a Plotly trace: 6 significant digits, non-finite as None (a gap)."""
    return [float(f"{v:.6g}") if np.isfinite(v) else None for v in values]


def scatter_figure(board: pd.DataFrame, dataset: str, metrics: Sequence[str], oracle_metric: str,
                   taus: Mapping[str, float]) -> dict:
    """A Plotly figure (plain dict): one panel per label-free metric, its value (x) vs the oracle
    value (y), τ in the axis title; hovering a point names its model. O(models × metrics)."""
    cols = min(3, len(metrics))
    rows = math.ceil(len(metrics) / cols)
    gap_x, gap_y = 0.06, 0.12 / max(1, rows)
    y = board[f"{dataset}/{oracle_metric}"].to_numpy(np.float64)
    ids = [str(m) for m in board["model_id"]]
    data, layout = [], {"showlegend": False, "hovermode": "closest",
                        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
                        "title": {"text": f"{dataset}: label-free metrics vs {oracle_metric} "
                                          "(hover a point for its model)", "font": {"size": 14}}}
    for i, metric in enumerate(metrics):
        r, c = divmod(i, cols)
        suffix = "" if i == 0 else str(i + 1)
        x = board[f"{dataset}/{metric}"].to_numpy(np.float64)
        tau = taus.get(metric, float("nan"))
        missing = int((~np.isfinite(x)).sum())
        title = f"{metric}  τ={tau:.2f}" if np.isfinite(tau) else f"{metric}  τ=n/a"
        if missing:
            title += f"  ({missing} n/a)"
        data.append({"type": "scatter", "mode": "markers", "x": _finite_list(x),
                     "y": _finite_list(y), "text": ids, "name": metric,
                     "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                     "marker": {"size": 6, "color": "#3572b0", "opacity": 0.75},
                     "hovertemplate": "%{text}<br>" + metric + " = %{x}<br>" + oracle_metric
                                      + " = %{y}<extra></extra>"})
        top = 1 - r / rows
        layout[f"xaxis{suffix}"] = {"domain": [c / cols + gap_x / 2, (c + 1) / cols - gap_x / 2],
                                    "anchor": f"y{suffix}",
                                    "title": {"text": title, "font": {"size": 11}}}
        layout[f"yaxis{suffix}"] = {"domain": [top - 1 / rows + gap_y, top - gap_y / 2],
                                    "anchor": f"x{suffix}",
                                    "title": {"text": oracle_metric if c == 0 else "",
                                              "font": {"size": 11}}}
    return {"data": data, "layout": layout}


def rank_overview_figure(board: pd.DataFrame, primary: Mapping[str, str]) -> dict:
    """A Plotly figure (plain dict) of every ranked model: its rank (x, with its rank interval as
    a bar) against the primary metric's value on each dataset (one trace per dataset); hovering a
    point names its model. O(models × datasets)."""
    ranked = board[board["rank"].notna()]
    rank = ranked["rank"].to_numpy(np.float64)
    low = ranked["rank_low"].to_numpy(np.float64) if "rank_low" in ranked else rank
    high = ranked["rank_high"].to_numpy(np.float64) if "rank_high" in ranked else rank
    ids = [str(m) for m in ranked["model_id"]]
    interval = [f"{a:.0f}–{b:.0f}" if np.isfinite(a) and np.isfinite(b) else "n/a"
                for a, b in zip(low, high)]
    data = []
    for ds, metric in primary.items():
        column = f"{ds}/{metric}"
        if column not in ranked:
            continue
        data.append({"type": "scatter", "mode": "markers", "name": column,
                     "x": _finite_list(rank), "y": _finite_list(ranked[column].to_numpy(
                         np.float64)), "text": ids, "customdata": interval,
                     "marker": {"size": 6, "opacity": 0.75},
                     "error_x": {"type": "data", "symmetric": False, "thickness": 0.8,
                                 "width": 0, "array": _finite_list(np.where(
                                     np.isfinite(high), high - rank, 0.0)),
                                 "arrayminus": _finite_list(np.where(
                                     np.isfinite(low), rank - low, 0.0))},
                     "hovertemplate": "%{text}<br>rank %{x} (interval %{customdata})<br>"
                                      + column + " = %{y}<extra></extra>"})
    return {"data": data, "layout": {
        "hovermode": "closest", "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "title": {"text": f"every ranked model ({len(ranked)}): rank vs the primary metric "
                          "(bars: rank interval; hover a point for its model)",
                  "font": {"size": 14}},
        "xaxis": {"title": {"text": "rank (1 = best)"}},
        "yaxis": {"title": {"text": "primary metric value"}},
        "legend": {"orientation": "h", "y": -0.2}}}


def heatmap_png(tau: pd.DataFrame, dataset: str) -> bytes:
    """Signed Kendall τ-b between the rankings of every pair of metrics (−1 … 1)."""
    n = len(tau)
    fig = new_figure(max(4.0, 0.45 * n + 2), max(3.5, 0.45 * n + 1.5))
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
    return png_bytes(fig)


def ranks_png(board: pd.DataFrame, datasets: Sequence[str]) -> bytes:
    """Each model's rank on every dataset (primary metric) and its aggregated rank."""
    top = board.head(MAX_RANK_CHART_MODELS)
    columns = [f"rank/{d}" for d in datasets if f"rank/{d}" in top] + ["rank"]
    labels = [c.removeprefix("rank/") for c in columns[:-1]] + ["aggregated"]
    fig = new_figure(max(4.0, 1.4 * len(columns) + 2.5), max(3.0, 0.28 * len(top) + 1.5))
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
    return png_bytes(fig)


def reliability_png(rel: pd.DataFrame, dataset: str, group: str) -> bytes:
    """Histograms of the per-sample reliability columns of one seed ensemble."""
    columns = [c for c in ("nc", "mean_knn_distance", "embedding_norm", "feature_variance")
               if c in rel]
    fig = new_figure(3.0 * max(1, len(columns)), 2.6)
    for i, column in enumerate(columns):
        ax = fig.add_subplot(1, len(columns), i + 1)
        values = rel[column].to_numpy(np.float64)
        values = values[np.isfinite(values)]
        ax.hist(values, bins=30, color="#5a9e6f")
        ax.set_title(f"{column} (mean {np.mean(values):.3g})" if len(values) else column,
                     fontsize=8)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"{dataset} / ensemble {group}: {len(rel)} samples", fontsize=10)
    return png_bytes(fig)


def nc_boxes_png(rels: Mapping[str, pd.DataFrame], dataset: str) -> bytes:
    """Per-sample NC of each seed ensemble as one box, ordered by median (best on top)."""
    groups = ends(list(rels), MAX_NC_BOXES)
    title = f"{dataset}: per-sample NC of {len(rels)} seed ensembles"
    if len(groups) < len(rels):
        title += f" (best and worst {MAX_NC_BOXES // 2} by median)"
    fig = new_figure(6.5, max(2.5, 0.24 * len(groups) + 1.2))
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
    return png_bytes(fig)


def by_median_nc(rels: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The ensembles ordered by median NC, best first (ties and missing NC by name)."""
    def median(rel: pd.DataFrame) -> float:
        values = rel["nc"].to_numpy(np.float64) if "nc" in rel else np.array([])
        values = values[np.isfinite(values)]
        return float(np.median(values)) if len(values) else -np.inf

    return dict(sorted(rels.items(), key=lambda item: (-median(item[1]), item[0])))


def ends(items: Sequence[str], limit: int) -> list[str]:
    """All of ``items`` if there are at most ``limit``, else the first and last ``limit // 2``."""
    if len(items) <= limit:
        return list(items)
    return [*items[: limit // 2], *items[len(items) - (limit - limit // 2):]]
