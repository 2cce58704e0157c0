"""REPORT stage: a self-contained ``report/index.html`` with its PNG plots beside it.

Reads what RANK wrote (the ``leaderboard``, ``agreement`` and ``failed`` tables,
``oracle``) plus ``metrics`` and ``reliability/<dataset>/<group>.parquet``, and
writes through :class:`~zoorank.store.Store` (so an object store works too):

* the decision card (:mod:`~zoorank.report.decision_screen`, from ``decision.json``): the pick,
  its checkpoint, the shortlist, the expected regret, the next step; the caveats, the top set and
  ``forest.png`` collapsed under it;
* the leaderboard: headline columns of every model (filterable, paged), every metric and rank
  folded, links to ``leaderboard.csv`` / ``leaderboard.md``; the agreement of every label-free
  metric with every oracle metric (Kendall τ-b with its bootstrap interval);
* per dataset and oracle metric, an interactive (Plotly) scatter of each label-free metric against
  it, τ in titles, a point's model id on hover; ``agreement-<dataset>.png``: a heat map of signed
  Kendall τ-b between the rankings of all metrics;
* ``ranks.png`` (2+ datasets): each model's rank per dataset (primary metric) and aggregated (the
  first 30); beyond 30 ranked models, an interactive plot of every model's rank and interval vs its
  primary metric;
* ``nc-<dataset>.png``, ``reliability-<dataset>-<group>.png``: NC and its baselines per ensemble;
* ``budget-<dataset>-<oracle>.png``: the label-budget curve (``oracle.transferability``): τ of each
  few-label score vs labels per class, label-free metrics as horizontal lines, with one crossover
  line per score (:mod:`zoorank.oracle.budget`);
* the failed models with their reasons, and the settings.

Every section is plain data (:class:`~zoorank.report.page.Section`) drawn by jinja2 templates with
autoescaping (:mod:`~zoorank.report.page`, which says how a feature adds its own section: pass it
in ``extra_sections``). The page has no external link: inline CSS and scripts (plotly.js once, when
the page has a plot), relative image links.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.catalog import Catalog, reliability_path
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.console.embed_progress import mixed_versions
from zoorank.decide.leaderboard import (
    AGREEMENT,
    FAILED,
    FAILED_COLUMNS,
    LEADERBOARD,
    ORACLE,
    leaderboard_headline,
    metrics_fingerprint,
    print_leaderboard,
    print_verdict,
    ranking_vector,
    read_rank_outputs,
    write_if_changed,
)
from zoorank.decide.next_step import config_shown
from zoorank.decide.verdict import build_decision, with_current_config
from zoorank.errors import InputError
from zoorank.report.decision_screen import decision_section
from zoorank.report.page import Image, Plot, Section, Table, page_images, render_page, walk
from zoorank.report.plots import (
    MAX_RANK_CHART_MODELS,
    MAX_RELIABILITY_HISTOGRAMS,
    SCATTER_ORACLES,
    by_median_nc,
    ends,
    heatmap_png,
    nc_boxes_png,
    rank_overview_figure,
    ranks_png,
    reliability_png,
    scatter_figure,
)
from zoorank.report.sections import (
    agreement_section,
    budget_section,
    failed_section,
    leaderboard_section,
    settings_section,
)
from zoorank.stats.consensus import rank_agreement_matrix
from zoorank.store import Store
from zoorank.store.layout import REPORT_DIR


def _read(store: Store, relpath: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    return store.read_frame(relpath, columns)


def run_report(context: RunContext | RunConfig, catalog: Catalog | None = None,
               extra_sections: Sequence[Section] = ()) -> str:
    """REPORT stage: write ``report/index.html`` and its PNGs; returns the page's path or URI.

    Reads the fresh rows and tables only (``catalog``: built from ``config`` when not given).
    ``extra_sections`` (other features' sections, plain data) go after the built-in analyses,
    before the failed models and the settings."""

    context = RunContext.of(context, catalog)
    config = context.config
    store = context.store
    # one snapshot: the leaderboard, its settings and the agreement and failed tables of its commit
    board, settings, written = read_rank_outputs(store)
    if board is None:
        raise InputError(f"{store.name}: no {LEADERBOARD} table; run `zoorank rank "
                         f"{config_shown()}` first")
    catalog = context.catalog
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    fresh_rel = catalog.fresh_reliability(manifest, store.read_metrics())
    if settings.get("metrics_fingerprint") != metrics_fingerprint(config, metrics):
        raise InputError(f"{store.name}/{LEADERBOARD} was not built from this config's "
                         "current metrics (the config, the zoo or the metrics changed since); "
                         f"run `zoorank rank {config_shown()}` first")
    agree_all = written[AGREEMENT]
    agree = agree_all[agree_all["labels_per_class"].isna()] if "labels_per_class" in agree_all \
        else agree_all
    failed = written[FAILED]
    oracle = _read(store, ORACLE)
    datasets = [d.name for d in config.datasets]
    model_ids = set(board["model_id"])
    metrics = metrics[metrics["model_id"].isin(model_ids)] if not metrics.empty else metrics
    oracle = oracle[oracle["model_id"].isin(model_ids)] if not oracle.empty else oracle

    sections: list[Section] = []

    # -- the decision first, then the leaderboard
    # the libraries whose versions differ between the ranked models' embeddings (the console says so
    # after embed; the page says it beside the width warning)
    version_warning = mixed_versions(manifest[manifest["model_id"].isin(model_ids)])
    decision = current_decision(store, board, settings, catalog.models, catalog.unlabelled(),
                                failed)
    sections.append(decision_section(board, settings, agree_all, version_warning, decision))
    sections.append(leaderboard_section(board, leaderboard_headline(board, settings), settings))

    # -- per-dataset rank chart of the first models (with 2+ datasets: one dataset draws flat
    # lines); every model, interactive, beyond what the static charts show
    ranked = int(board["rank"].notna().sum()) if len(board) else 0
    overview = [Plot("plot-rank-overview", rank_overview_figure(
        board, settings.get("primary_metric") or {}), height=480)] \
        if ranked > MAX_RANK_CHART_MODELS else []
    chart = [Image("ranks.png", "rank chart", ranks_png(board, datasets))] \
        if ranked and sum(f"rank/{d}" in board for d in datasets) > 1 else []
    if overview or chart:
        sections.append(Section(id="ranks", title="Ranks per dataset", plots=overview,
                                images=chart))

    # -- agreement with the oracle: table, scatter plots (interactive), metric-vs-metric heat map
    if not agree.empty:
        sections.append(agreement_section(agree))
    for ds in datasets:
        sections += _dataset_sections(board, metrics, oracle, agree, ds)

    # -- label-budget curve (oracle.transferability)
    if budget := budget_section(agree_all):
        sections.append(budget)

    # -- reliability per ensemble: an NC box plot per dataset, histograms for the extremes
    if reliability := _reliability_section(store, datasets, fresh_rel):
        sections.append(reliability)

    # -- priors (parameter count, width, published figures) against the oracle, and confounds
    if priors := _priors_section(board, settings, agree_all):
        sections.append(priors)

    sections += extra_sections
    # -- failed models, settings
    sections.append(failed_section(failed, FAILED_COLUMNS))
    sections.append(settings_section(settings, store.name))

    pick = (decision.get("pick") or {}).get("model_id")
    page = render_page(f"zoorank report: pick {pick}" if pick else "zoorank report", sections,
                       heading="" if pick else None)
    images = page_images(sections)
    for name, data in images.items():
        write_if_changed(store, f"{REPORT_DIR}/{name}", data)
    for name in store.list_files(REPORT_DIR, suffix=".png"):  # plots of an earlier report
        if name not in images:
            store.delete(f"{REPORT_DIR}/{name}")
    write_if_changed(store, f"{REPORT_DIR}/index.html", page.encode(), redacted=True)
    where = store.path(REPORT_DIR, "index.html")
    if not store.is_local:  # the URI a user can open (scheme kept, credentials removed)
        from zoorank.store.uris import join, redact

        where = redact(join(store.uri, where))
    if len(board):
        print_leaderboard(board, settings, where=store.name)
    from zoorank.console import output_console
    from zoorank.oracle.budget import crossover_lines, crossovers

    console = output_console()
    for line in crossover_lines(crossovers(agree_all)):
        console.print(line, markup=False, highlight=False)
    if len(failed):
        console.print(f"{len(failed)} failed or missing (model, dataset) entries (listed in the "
                      "report)", style="yellow")
    interactive = sum(len(s.plots) for s in walk(sections))
    console.print(f"report: written ({len(images)} images, {interactive} interactive plots)",
                  markup=False, highlight=False)
    print_verdict(decision, report=where, store=store.name)
    return where


def current_decision(store: Store, board: pd.DataFrame, settings: dict,
                     models: Sequence[Any],
                     unlabelled: Mapping[str, int] | None = None,
                     failed: pd.DataFrame | None = None) -> dict[str, Any]:
    """The stored decision.json when it belongs to this leaderboard (same metric rows), else the
    same document built here from the leaderboard (a store ranked before decision.json existed,
    or a RANK that committed its leaderboard but not yet its decision; not written). The stored
    next step names the config path this command read (:func:`with_current_config`). O(n log n)."""
    stored = with_current_config(store)
    if stored is not None and stored.get("leaderboard_fingerprint") == settings.get(
            "metrics_fingerprint"):
        return stored
    return build_decision(board, settings, {m.model_id: m for m in models}, store.name, stored,
                          unlabelled=unlabelled, failed=failed, configured=len(models))


def _dataset_sections(board: pd.DataFrame, metrics: pd.DataFrame, oracle: pd.DataFrame,
                      agree: pd.DataFrame, ds: str) -> list[Section]:
    """One dataset's label-free metrics vs its oracle metrics (Plotly scatter panels, the first
    two oracle metrics of :data:`SCATTER_ORACLES`) and the heat map of rank agreement between
    all its metrics (label-free and oracle)."""
    out = []
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
            rows = -(-len(ds_metrics) // 3)
            out.append(Section(
                id=f"scatter-{ds}-{o_name}", title=f"{ds}: metrics vs {o_name}",
                plots=[Plot(f"plot-scatter-{ds}-{o_name}",
                            scatter_figure(board, ds, ds_metrics, o_name, taus),
                            height=120 + 280 * rows)]))
    names = ds_metrics + sorted(o for o in ds_oracle if f"{ds}/{o}" in board)
    if len(names) >= 2 and len(board) >= 2:
        values, directions = {}, {}
        for m in names:
            oriented = ranking_vector(m, board[f"{ds}/{m}"].to_numpy(np.float64))
            if oriented is not None:
                values[m], directions[m] = oriented
        tau = rank_agreement_matrix(pd.DataFrame(values), directions)
        out.append(Section(id=f"agreement-{ds}", title=f"Rank agreement between metrics: {ds}",
                           images=[Image(f"agreement-{ds}.png", f"{ds} rank agreement heat map",
                                         heatmap_png(tau, ds))]))
    return out


def _reliability_section(store: Store, datasets: Sequence[str],
                         fresh_rel: Iterable[tuple[str, str]]) -> Section | None:
    """Per-sample reliability of the seed ensembles: an NC box plot per dataset and histograms of
    the ensembles with the highest and lowest median NC; None without reliability tables."""
    parts = []
    for ds in datasets:
        rels = {group: store.read_frame(reliability_path(ds, group))
                for d, group in sorted(fresh_rel)
                if d == ds and store.exists(reliability_path(ds, group))}
        rels = by_median_nc({g: r for g, r in rels.items() if not r.empty})
        images, sentences = [], []
        with_nc = {g: r for g, r in rels.items() if "nc" in r}
        if len(with_nc) > 1:
            images.append(Image(f"nc-{ds}.png", f"{ds} NC per ensemble",
                                nc_boxes_png(with_nc, ds)))
        shown = ends(list(rels), MAX_RELIABILITY_HISTOGRAMS)
        if len(shown) < len(rels):
            sentences.append(f"{ds}: histograms of the {len(shown) // 2} ensembles with the "
                             f"highest and the {len(shown) - len(shown) // 2} with the lowest "
                             f"median NC; all {len(rels)} tables are under `reliability/{ds}/`.")
        images += [Image(f"reliability-{ds}-{group}.png", f"{ds} {group} reliability",
                         reliability_png(rels[group], ds, group)) for group in shown]
        if images or sentences:
            parts.append(Section(id=f"reliability-{ds}", title="", sentences=sentences,
                                 images=images))
    if not parts:
        return None
    return Section(id="reliability", title="Per-sample reliability of seed ensembles",
                   sentences=["NC: higher = more reliable; mean k-NN distance and feature "
                              "variance: higher = less reliable."], subsections=parts)


def _priors_section(board: pd.DataFrame, settings: dict, agree: pd.DataFrame) -> Section | None:
    """Per model its parameter count, width and ``prior:`` values; each prior's agreement with
    the oracle beside the best label-free metric; the confound warnings
    (:func:`zoorank.decide.board_priors.prior_summary`). None when the board has no prior column."""
    from zoorank.decide.board_priors import prior_summary

    summary = prior_summary(board, settings, agree)
    if not summary["rows"]:
        return None
    confounds = [str(c["sentence"]) for c in (settings.get("decision") or {}).get("confounds") or []]
    sentences = [s for s in summary["sentences"] if s not in confounds]
    return Section(id="priors", title=summary["title"], sentences=sentences, warnings=confounds,
                   table=Table(rows=summary["rows"], id="priors-table"))
