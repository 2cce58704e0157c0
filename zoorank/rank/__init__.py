"""RANK stage: label oracle, per-dataset ranks, transfer-rank aggregation, agreement, leaderboard.

Reads ``metrics`` (SCORE), the manifest, the sample lists and per-sample reliabilities, and
writes (contract 2 plus the tables this stage adds):

* ``oracle`` — the label oracle (:mod:`zoorank.oracle.label_oracle`, which runs it); a classifier's
  oracle is its head's own accuracy (``head_accuracy``, computed by SCORE from the logits and
  moved here from the metric rows: :func:`split_head_oracle`).
* ``leaderboard`` (table) / ``leaderboard.csv`` / ``.md`` — one row per model, sorted by ``rank``. Columns:
  ``model_id, family, group, rank, aggregate, signal`` (``head``: ranked by its head's estimated
  accuracy, ``rank.classifier_metric``; ``embedding``: by the primary metric), ``family_rank``,
  ``joint_rank`` (when the oracle gives
  an in-domain accuracy), ``rank/<dataset>`` (rank of the primary metric on that dataset),
  ``<dataset>/<metric>`` (every label-free and oracle value) and ``<dataset>/<metric>/rank`` (every
  ranked metric), ``param_count`` and ``width`` (recorded by EMBED) and ``prior/<name>`` (the zoo
  entries' ``prior:`` values; :mod:`~zoorank.rank.prior_columns`). The metadata key ``zoorank`` of its
  commit holds the settings as JSON (aggregation, primary metric per dataset, in-domain accuracy).
* ``agreement`` — every label-free metric (and the leaderboard rank) against every oracle
  metric, per dataset and per family ('all' or a family with ≥ 3 models); column ``kind``:
  ``metric``, or ``prior`` for the rows of the priors (param_count, width, ``prior/<name>``).
* with ``oracle.transferability``: few-label cells ``<score>:k<k>s<seed>`` in ``oracle``
  and the label-budget rows of :mod:`zoorank.oracle.budget` in ``agreement`` (columns
  ``labels_per_class``, ``budget_seed``; NaN / None on the label-free rows).
* ``failed`` — model_id, dataset, view, stage, error for models that failed or are missing.
* ``decision.json`` — the verdict: the pick, the shortlist, the expected regret, the next step,
  the caveats (:mod:`zoorank.decide.verdict`); ``zoorank label``'s few-label picks are kept.

Conventions (ranks 1 = best, ties averaged, NaN last; directions; τ-b signs) are those of
:mod:`zoorank.stats.agreement`. The maths lives there and in
:mod:`zoorank.metrics.few_label.oracle_metrics`; this
module is orchestration. The tables are shaped in :mod:`~zoorank.rank.board` (leaderboard),
:mod:`~zoorank.rank.agreement_table`, :mod:`~zoorank.rank.failed` and :mod:`~zoorank.rank.markdown`.
Only rows that are fresh for the config are read (:mod:`zoorank.catalog`). The fingerprint of
everything RANK reads and of the code that computes it (:func:`zoorank.catalog.stage_inputs.rank_inputs`)
rides on the leaderboard's commit (``zoorank_inputs``); a run whose inputs have that fingerprint
computes nothing, any other says why it recomputes (the code or the inputs that changed).
Cost: O(B · n log n) per agreement row and per resampled metric (n models, B resamples), memory
O(B · n) in bounded batches; no array has two model axes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from zoorank.catalog import Catalog, build_catalog
from zoorank.catalog.context import RunContext
from zoorank.catalog.head_entries import HEAD_ORACLE
from zoorank.catalog.stage_inputs import (
    INPUTS_KEY,
    StageInputs,
    dataset_labels,
    inputs_metadata,
    leaderboard_commit,
    rank_inputs,
    recorded_parts,
)
from zoorank.config import RunConfig
from zoorank.console import output_console
from zoorank.decide.leaderboard import (
    FAILED_COLUMNS,
    metrics_fingerprint,
    print_leaderboard,
    print_verdict,
    read_rank_outputs,
    write_if_changed,
)
from zoorank.decide.rank_intervals import UNCERTAINTY
from zoorank.decide.verdict import (
    DECISION_JSON,
    build_decision,
    read_decision,
    with_current_config,
    write_decision,
)
from zoorank.errors import NothingRankedError
from zoorank.oracle.label_oracle import run_oracle
from zoorank.oracle.measures import oracle_direction
from zoorank.rank.agreement_table import build_agreement
from zoorank.rank.board import build_leaderboard
from zoorank.rank.failed import failed_models
from zoorank.rank.markdown import leaderboard_markdown
from zoorank.rank.prior_columns import model_priors, with_priors
from zoorank.store import Store
from zoorank.store.layout import AGREEMENT, FAILED, LEADERBOARD, LEADERBOARD_CSV, LEADERBOARD_MD


def _budget_directions() -> dict[str, int]:
    from zoorank.oracle.budget import REFERENCE_ORACLES

    return {o: oracle_direction(o) for o in REFERENCE_ORACLES}


def run_rank(context: RunContext | RunConfig, address: str | None = None, show: bool = True,
             catalog: Catalog | None = None) -> pd.DataFrame:
    """RANK stage: oracle (when configured), ranks, aggregation, agreement; returns the leaderboard.

    Skipped (nothing recomputed, no table written) when the leaderboard's commit records the same
    inputs (:func:`zoorank.catalog.stage_inputs.rank_inputs`: the code, the fresh metric, oracle, fold
    and health rows, the manifest, the labels, the settings); otherwise a line says why it
    recomputes (the code or the inputs that changed since the leaderboard's commit).
    ``show`` prints the leaderboard's top rows (``zoorank run`` leaves that to the REPORT stage).
    """
    from zoorank.oracle import resample

    context = RunContext.of(context, catalog, address)
    config = context.config
    store, catalog = context.store, context.catalog
    models = catalog.models
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    oracle, oracle_failures = run_oracle(config, store, models, context.address, manifest, catalog)
    folds = resample.fresh_resamples(store, metrics, config.score)
    clean = config.clean_view.name if config.clean_view else None
    health = resample.fresh_health(store, manifest, clean)
    inputs = rank_inputs(config, models, metrics, _ranked_oracle(oracle, models), folds, health,
                         manifest, dataset_labels(catalog), oracle_failures)
    board = _unchanged(store, inputs, show)
    if board is not None:
        return board
    _say_why(store, inputs)
    return write_rank_outputs(config, store, models, metrics, oracle, oracle_failures, show,
                              manifest, folds=folds, health=health, inputs=inputs,
                              unlabelled=catalog.unlabelled())


def _ranked_oracle(oracle: pd.DataFrame, models: Sequence[Any]) -> pd.DataFrame:
    if oracle.empty:
        return oracle
    return oracle[oracle["model_id"].isin([m.model_id for m in models])].reset_index(drop=True)


def _unchanged(store: Store, inputs: StageInputs, show: bool) -> pd.DataFrame | None:
    """The stored leaderboard when its commit was computed from ``inputs`` and its files are
    there (then RANK recomputes nothing and says so; it only renames the config in
    decision.json's next step when this command read the config through another path); else
    None."""
    version, info = leaderboard_commit(store)
    if version is None or info.get(INPUTS_KEY) != inputs.fingerprint or not all(
            store.exists(p) for p in (LEADERBOARD_CSV, LEADERBOARD_MD, DECISION_JSON)):
        return None
    board, settings, tables = read_rank_outputs(store)
    if board is None:
        return None
    output_console().print(f"rank: inputs unchanged since {LEADERBOARD} version {version}: "
                           "skipped (nothing recomputed)", markup=False, highlight=False)
    if show and len(board):
        from zoorank.oracle import budget

        print_leaderboard(board, settings)
        for line in budget.crossover_lines(budget.crossovers(tables[AGREEMENT])):
            output_console().print(line, markup=False, highlight=False)
    decision = with_current_config(store)  # the next step names the path this command read
    if show:
        print_verdict(decision, store=store.name)
    return board


def _say_why(store: Store, inputs: StageInputs) -> None:
    """Print why RANK recomputes a store that has a leaderboard (nothing before the first)."""
    version, info = leaderboard_commit(store)
    if version is not None:
        why = inputs.rerun_reason(info.get(INPUTS_KEY), recorded_parts(info))
        output_console().print(f"rank: {why}: recomputing", markup=False, highlight=False)


def check_ranked(board: pd.DataFrame) -> None:
    """NothingRankedError (exit 3) when no model has a rank: every model failed or is missing."""
    if board.empty or "rank" not in board or not board["rank"].notna().any():
        raise NothingRankedError(
            "nothing could be ranked: every model failed or has no value of the primary metric "
            "(see failed.parquet / leaderboard.md)")


def _decide(config: RunConfig, store: Store, board: pd.DataFrame, settings: dict[str, Any],
            metrics: pd.DataFrame, manifest: pd.DataFrame, folds: pd.DataFrame | None = None,
            health: pd.DataFrame | None = None, oracle: pd.DataFrame | None = None,
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rank intervals, top set, flags, consensus and width warning (:mod:`zoorank.decide.decision`) from
    the fresh fold and health rows (read here unless given)."""
    from zoorank.decide.decision import decide
    from zoorank.oracle import resample

    if folds is None:
        folds = resample.fresh_resamples(store, metrics, config.score)
    if health is None:
        clean = config.clean_view.name if config.clean_view else None
        health = resample.fresh_health(store, manifest, clean)
    return decide(config, board, settings, metrics, folds, health, oracle)


def split_head_oracle(metrics: pd.DataFrame, oracle: pd.DataFrame
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics, oracle) with the heads' own accuracies (SCORE's ``head_accuracy`` rows, from the
    logits) moved from the metric rows to the oracle: a classifier's oracle is its head."""
    if metrics.empty or "metric" not in metrics:
        return metrics, oracle
    is_head = (metrics["metric"] == HEAD_ORACLE).to_numpy()
    if not is_head.any():
        return metrics, oracle
    heads = metrics[is_head]
    oracle = heads if oracle.empty else pd.concat([oracle, heads[oracle.columns.intersection(
        heads.columns)]], ignore_index=True)
    return metrics[~is_head].reset_index(drop=True), oracle.reset_index(drop=True)


def with_checkpoints(board: pd.DataFrame, models: Sequence[Any]) -> pd.DataFrame:
    """``board`` with a ``checkpoint`` column: each model's checkpoint file (path or URI,
    credentials removed), None for a model without one."""
    from zoorank.store.redact import redact

    files = {m.model_id: (redact(str(m.spec.checkpoint)) if getattr(m.spec, "checkpoint", None)
                          else None) for m in models}
    return board.assign(checkpoint=board["model_id"].map(files).astype("str")) if len(board) \
        else board


def write_rank_outputs(
    config: RunConfig,
    store: Store,
    models: Sequence[Any],
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
    oracle_failures: Sequence[Mapping[str, Any]] = (),
    show: bool = True,
    manifest: pd.DataFrame | None = None,
    folds: pd.DataFrame | None = None,
    health: pd.DataFrame | None = None,
    inputs: StageInputs | None = None,
    unlabelled: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Leaderboard, agreement and failed-model tables from the long metric and oracle tables.

    Writes ``leaderboard`` (table, .csv, .md), ``agreement`` and ``failed`` (only
    when their bytes change) and ``decision.json``, prints the top rows and the verdict and
    returns the leaderboard. ``inputs``
    (:func:`zoorank.catalog.stage_inputs.rank_inputs`) rides on the leaderboard's commit.
    ``unlabelled``: dataset → images without a label, which bounds the next step's label budget
    (:meth:`zoorank.catalog.Catalog.unlabelled`, derived from the labels in ``inputs``).
    """
    from zoorank.oracle import budget

    model_ids = [m.model_id for m in models]
    # the fingerprint REPORT checks is of every fresh row, the heads' accuracies included
    rows_fingerprint = metrics_fingerprint(config, metrics)
    metrics, oracle = split_head_oracle(metrics, oracle)
    if not oracle.empty:
        oracle = oracle[oracle["model_id"].isin(model_ids)].reset_index(drop=True)
    oracle, budget_cells = budget.split_oracle(oracle)
    # ETran's and NCTI's min–max normalisation is over the zoo: their terms are combined here
    budget_cells = budget.zoo_relative_cells(budget_cells)
    board, settings = build_leaderboard(config, models, metrics, oracle)
    settings["metrics_fingerprint"] = rows_fingerprint
    if manifest is None:
        manifest = build_catalog(config, models, store=store).fresh_manifest(store.read_manifest())
    board = with_priors(board, model_priors(models, manifest))
    board = with_checkpoints(board, models)
    board, per_metric = _decide(config, store, board, settings, metrics, manifest, folds, health,
                                oracle)
    agree = build_agreement(config, board, metrics, oracle)
    agree = budget.with_budget_rows(agree, board, budget_cells, _budget_directions(),
                                    config.rank.bootstrap, config.seed)
    wanted = {m.model_id: tuple(m.datasets) for m in models
              if getattr(m, "datasets", None) is not None}
    failed = failed_models(config, manifest, model_ids, metrics, wanted)
    if oracle_failures:
        failed = pd.concat([failed, pd.DataFrame(list(oracle_failures), columns=FAILED_COLUMNS)],
                           ignore_index=True)
    # one order whatever order the tasks finished in, so an unchanged table is not re-committed
    failed = failed.sort_values(FAILED_COLUMNS, kind="stable").reset_index(drop=True)
    # the leaderboard's commit names the versions of the tables written with it, so a reader
    # (the report) sees one consistent set while another rank commits newer ones
    versions = {AGREEMENT: store.replace_table(AGREEMENT, agree),
                FAILED: store.replace_table(FAILED, failed),
                UNCERTAINTY: store.replace_table(UNCERTAINTY, per_metric)}
    metadata = {"zoorank": json.dumps(settings, sort_keys=True),
                "zoorank_tables": json.dumps(versions)}
    if inputs is not None:
        metadata.update(inputs_metadata(inputs))
    # the verdict (decision.json) beside the leaderboard; the few-label picks `zoorank label`
    # recorded are kept
    decision = build_decision(board, settings, {m.model_id: m for m in models}, store.name,
                              read_decision(store), unlabelled=unlabelled, failed=failed,
                              configured=len(models))
    store.replace_table(LEADERBOARD, board, metadata)
    write_decision(store, decision)
    write_if_changed(store, LEADERBOARD_CSV, board.to_csv(index=False).encode())
    write_if_changed(store, LEADERBOARD_MD,
                     leaderboard_markdown(board, failed, settings, decision).encode())
    if show and len(board):
        print_leaderboard(board, settings)
        for line in budget.crossover_lines(budget.crossovers(agree)):
            output_console().print(line, markup=False, highlight=False)
    if show and len(failed):
        output_console().print(f"{len(failed)} failed or missing (model, dataset) entries: "
                               f"see {store.name}/{LEADERBOARD_MD}", style="yellow",
                               markup=False)
    if show:
        print_verdict(decision, store=store.name)
    return board
