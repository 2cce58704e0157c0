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

The page opens with the decision screen (:mod:`~zoorank.report.decision_screen`), then the full
tables and plots (:mod:`~zoorank.report.plots`, :mod:`~zoorank.report.sections`). HTML uses
relative image links and inline CSS only (:mod:`~zoorank.report.markup`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd

from zoorank.catalog import Catalog, build_catalog, reliability_path
from zoorank.config import RunConfig
from zoorank.embed_progress import mixed_versions
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
from zoorank.report.decision_screen import decision_section
from zoorank.report.markup import CSS, html_table, img_tag
from zoorank.report.plots import (
    MAX_RELIABILITY_HISTOGRAMS,
    SCATTER_ORACLES,
    by_median_nc,
    ends,
    heatmap_png,
    nc_boxes_png,
    ranks_png,
    reliability_png,
    scatter_png,
)
from zoorank.report.sections import agreement_summary, budget_section, settings_section
from zoorank.store import Store
from zoorank.store.layout import REPORT_DIR


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
    # the libraries whose versions differ between the ranked models' embeddings (the console says so
    # after embed; the page says it beside the width warning)
    version_warning = mixed_versions(manifest[manifest["model_id"].isin(model_ids)])
    sections.append(decision_section(board, settings, agree_all, images, version_warning))
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
    lead.append(html_table(headline, ["model_id", "family", "group", "flags"]))
    lead.append("<details><summary>Every metric and rank</summary>"
                + html_table(board, ["model_id", "family", "group"]) + "</details>")
    sections.append("".join(lead))

    # -- per-dataset rank chart
    if len(board) and board["rank"].notna().any():
        images["ranks.png"] = ranks_png(board, datasets)
        sections.append("<h2>Ranks per dataset</h2>" + img_tag("ranks.png", "rank chart"))

    # -- agreement with the oracle: table, scatter plots
    if not agree.empty:
        sections.append("<h2>Agreement with the label oracle</h2><p class='note'>Signed Kendall "
                        "τ-b between each label-free metric (oriented: higher = better) and each "
                        "oracle metric over all models, with its bootstrap 95% interval over "
                        "models. The full table (Spearman, Pearson, top-1 regret, top-k recall, "
                        "per family) is the <code>agreement</code> table.</p>"
                        + html_table(agreement_summary(agree), ["metric"]))
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
                                + img_tag(name, f"{ds} metrics vs {o_name}"))
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
                            + img_tag(name, f"{ds} rank agreement heat map"))

    # -- label-budget curve (oracle.transferability)
    if section := budget_section(agree_all, images):
        sections.append(section)

    # -- reliability per ensemble: an NC box plot per dataset, histograms for the extremes
    rel_parts = []
    for ds in datasets:
        rels = {group: store.read_frame(reliability_path(ds, group))
                for d, group in sorted(fresh_rel)
                if d == ds and store.exists(reliability_path(ds, group))}
        rels = by_median_nc({g: r for g, r in rels.items() if not r.empty})
        with_nc = {g: r for g, r in rels.items() if "nc" in r}
        if len(with_nc) > 1:
            name = f"nc-{ds}.png"
            images[name] = nc_boxes_png(with_nc, ds)
            rel_parts.append(img_tag(name, f"{ds} NC per ensemble"))
        shown = ends(list(rels), MAX_RELIABILITY_HISTOGRAMS)
        if len(shown) < len(rels):
            rel_parts.append(f"<p class='note'>{html.escape(ds)}: histograms of the "
                             f"{len(shown) // 2} ensembles with the highest and the "
                             f"{len(shown) - len(shown) // 2} with the lowest median NC; all "
                             f"{len(rels)} tables are under <code>reliability/{html.escape(ds)}/"
                             "</code>.</p>")
        for group in shown:
            name = f"reliability-{ds}-{group}.png"
            images[name] = reliability_png(rels[group], ds, group)
            rel_parts.append(img_tag(name, f"{ds} {group} reliability"))
    if rel_parts:
        sections.append("<h2>Per-sample reliability of seed ensembles</h2><p class='note'>NC: "
                        "higher = more reliable; mean k-NN distance and feature variance: higher "
                        "= less reliable.</p>" + "".join(rel_parts))

    # -- failed models, settings
    sections.append("<h2>Failed models</h2>" + (
        html_table(failed, FAILED_COLUMNS) if not failed.empty else "<p>None.</p>"))
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
