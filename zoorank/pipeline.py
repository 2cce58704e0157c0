"""Stage runners the CLI and the Ray-job entry points call: each stage is one function.

Every store write is one transactional table commit (:mod:`zoorank.store.tables`), so
several processes may run stages on one store at once and readers see consistent snapshots.
Each command builds its run context once (:class:`~zoorank.catalog.context.RunContext`: the
config, one ``Store`` per store URI, the catalog — what should exist, with fingerprints — built
once, and the Ray runtime, ``--address``) and hands it to every stage it runs; the stages stand
side by side on it.
This module wires stages only: ``--watch``'s loop is :mod:`zoorank.watch`, REPORT's skip
:mod:`zoorank.report.skip`.
"""

from __future__ import annotations

import pandas as pd

from zoorank import embed, gc, rank, score
from zoorank.catalog import Catalog
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.decide.leaderboard import read_leaderboard
from zoorank.decide.verdict import update_few_label
from zoorank.labels import ask, merge, stopping
from zoorank.report.page import Section, Table
from zoorank.report.skip import report_unless_current


def _context(config: RunConfig, catalog: Catalog | None, context: RunContext | None,
             address: str | None = None) -> RunContext:
    """The command's context: the one given, else a new one of ``config`` (with ``catalog`` and
    the Ray ``address``)."""
    return RunContext.of(config if context is None else context, catalog, address)


def run_embed(config: RunConfig, address: str | None = None, catalog: Catalog | None = None,
              context: RunContext | None = None):
    """EMBED, after every checkpoint was loaded on CPU (:func:`preflight`)."""
    return embed.run_embed(preflight(_context(config, catalog, context, address)))


def preflight(context: RunContext) -> RunContext:
    """Every checkpoint of the catalog loaded on CPU before any Ray actor is asked for
    (:mod:`zoorank.zoo.preflight`): a misfit entry raises ConfigError (exit 2), an unreadable
    file is that model's failure (EMBED records it); the context, with those models marked."""
    from zoorank.catalog import build_catalog
    from zoorank.zoo.duplicates import duplicate_lines
    from zoorank.zoo.preflight import preflight as _check

    catalog = context.catalog
    checked = _check(catalog.models, store=context.store)
    for line in duplicate_lines(catalog.models) + checked.lines():
        print(line)
    if checked.failed:
        catalog = build_catalog(context.config, models=checked.models, store=context.store)
        context = RunContext.of(context, catalog)
    return context


def run_score(config: RunConfig, address: str | None = None, catalog: Catalog | None = None,
              context: RunContext | None = None):
    return score.run_score(_context(config, catalog, context, address))


def run_rank(config: RunConfig, address: str | None = None, show: bool = True,
             check: bool = True, catalog: Catalog | None = None, context: RunContext | None = None):
    """RANK; raises NothingRankedError (exit 3) when no model could be ranked (``check``)."""
    board = rank.run_rank(_context(config, catalog, context, address), show=show)
    if check:
        rank.check_ranked(board)
    return board


def run_report(config: RunConfig, address: str | None = None, catalog: Catalog | None = None,
               check: bool = True, context: RunContext | None = None):
    """REPORT; the page is written even when nothing could be ranked, then (``check``)
    NothingRankedError (exit 3) is raised, as ``zoorank run`` does.

    Skipped (the page is not re-rendered) when it was rendered from the same inputs and code
    (:mod:`zoorank.report.skip`); the leaderboard is printed anyway."""
    context = _context(config, catalog, context, address)
    out = report_unless_current(context, extra_sections=lambda: _label_sections(context))
    if check:
        board, _ = read_leaderboard(context.store)
        rank.check_ranked(board if board is not None else pd.DataFrame())
    return out


def _label_sections(context: RunContext) -> list:
    """The report's sections on the labels given back (``zoorank ask`` / ``label``): the
    stopping rule as it stands (:func:`zoorank.labels.stopping.summary`) of every dataset with
    labels given back, in the config's order; none before any label."""
    sections = []
    for spec in context.config.datasets:  # a dataset name is a valid HTML id (NAME_PATTERN)
        got = stopping.summary(context, spec.name)
        if got is None:
            continue
        rows = got.get("rows") or []
        sections.append(Section(id=f"labels-given-{spec.name}", title=str(got["title"]),
                                sentences=[str(s) for s in got.get("sentences") or []],
                                table=Table(rows=rows, id=f"labels-given-table-{spec.name}")
                                if rows else None))
    return sections


def run_all(config: RunConfig, address: str | None = None, context: RunContext | None = None):
    """embed → score → rank → report; each stage skips work already done (fingerprints).

    The report is written even when nothing could be ranked (it lists the failures); then
    NothingRankedError (exit 3) is raised. ``context``: the command's, when it has one (the watch
    loop's rounds, the demo); else one is built here, once, for every stage.
    """
    context = _context(config, None, context, address)
    run_embed(config, context=context)
    run_score(config, context=context)
    board = run_rank(config, show=False, check=False, context=context)  # the report prints
    out = run_report(config, context=context, check=False)
    rank.check_ranked(board)
    return out


def run_gc(config: RunConfig, address: str | None = None, dry_run: bool = False,
           context: RunContext | None = None):
    """Delete what the config no longer describes (stale rows, orphaned shards); see zoorank.gc."""
    return gc.run_gc(_context(config, None, context, address), dry_run=dry_run)


def run_ask(config: RunConfig, budget: int, round_: int | None = None,
            dataset: str | None = None, max_labels: int | None = None,
            sampler: str | None = None):
    """``zoorank ask``: one round of images to label (:mod:`zoorank.labels.ask`); ``sampler``:
    None for the zoo kind's default (:func:`zoorank.labels.stopping.resolve_sampler`)."""
    return ask.run_ask(RunContext(config), budget, round_=round_, dataset=dataset,
                       max_labels=max_labels, sampler=sampler)


def run_label(config: RunConfig, path: str, dataset: str | None = None,
              max_labels: int | None = None, rank: bool = True, address: str | None = None):
    """``zoorank label``: merge labels (:mod:`zoorank.labels.merge`), then RANK, which recomputes
    the oracle, few-label scores and agreement of the datasets whose labels changed."""
    context = RunContext(config, address=address)
    merged = merge.run_label(context, path, dataset=dataset, max_labels=max_labels)
    if merged.added:  # the labels given back change the catalog's labels fingerprints
        context.labels_merged()
    if rank and merged.added:
        run_rank(config, show=False, check=False, context=context)
        # RANK (re)writes decision.json: the few-label pick goes back in, after it
        merged.recorded = update_few_label(context.store, merged.dataset,
                                           merged.few_label) is not None
    return merged
