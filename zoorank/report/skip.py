"""REPORT's skip: the page is not rendered again when it was rendered from the same inputs and code.

Beside REPORT as RANK's skip is beside RANK: the fingerprint of what the page is computed from
(:func:`zoorank.catalog.stage_inputs.report_inputs`: the code, the fresh manifest, metrics and
reliability rows, the leaderboard's metrics fingerprint, the datasets' labels) is kept beside the
page. Reads the store's manifest, ``metrics`` and the RANK outputs; writes the page (through
:func:`zoorank.report.run_report`) and its inputs record, or, when current, only prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from zoorank.catalog import Catalog, select_fresh, stage_inputs
from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.console import output_console
from zoorank.decide.leaderboard import (
    AGREEMENT,
    metrics_fingerprint,
    print_leaderboard,
    print_verdict,
    read_rank_outputs,
)
from zoorank.decide.verdict import read_decision
from zoorank.oracle.budget import crossover_lines, crossovers
from zoorank.store import Store
from zoorank.store.layout import REPORT_DIR


def report_unless_current(context: RunContext | RunConfig, catalog: Catalog | None = None,
                          extra_sections: Callable[[], Sequence] = tuple) -> str:
    """REPORT (:func:`zoorank.report.run_report`), skipped when the page is current; returns the
    page's path or URI. When it renders again, a line says why (the code or the inputs that
    changed). ``extra_sections`` is called only when the page is rendered."""
    from zoorank.report import run_report

    context = RunContext.of(context, catalog)
    config = context.config
    store, catalog = context.store, context.catalog
    manifest = catalog.fresh_manifest(store.read_manifest())
    stored_metrics = store.read_metrics()
    fresh = select_fresh(stored_metrics, catalog.metric_fingerprints(manifest))
    inputs = stage_inputs.report_inputs(
        config, store, manifest, catalog.fresh_reliability(manifest, stored_metrics),
        metrics_fingerprint(config, fresh), stage_inputs.dataset_labels(catalog))
    if stage_inputs.report_is_current(store, inputs):
        return report_unchanged(store)
    why = stage_inputs.report_rerun_reason(store, inputs)
    if why is not None:
        output_console().print(f"report: {why}: rendering again", markup=False, highlight=False)
    out = run_report(context, catalog=catalog, extra_sections=extra_sections())
    stage_inputs.record_report_inputs(store, inputs)
    return out


def report_unchanged(store: Store) -> str:
    """What REPORT prints, for a page that is already current: the leaderboard, the label-budget
    verdicts and where the page is; returns the page's path or URI."""
    board, settings, tables = read_rank_outputs(store)
    where = store.path(REPORT_DIR, "index.html")
    if not store.is_local:  # the URI a user can open (scheme kept, credentials removed)
        from zoorank.store.uris import join, redact

        where = redact(join(store.uri, where))
    if board is not None and len(board):
        print_leaderboard(board, settings)
    console = output_console()
    for line in crossover_lines(crossovers(tables[AGREEMENT])):
        console.print(line, markup=False, highlight=False)
    console.print(f"report: {where} is current (inputs unchanged): not re-rendered",
                  markup=False, highlight=False)
    print_verdict(read_decision(store), report=where, store=store.name)
    return where
