"""RANK stage: label oracle, per-dataset ranks, transfer-rank aggregation, agreement, leaderboard.

Reads ``metrics`` (SCORE), the manifest, the sample lists and per-sample reliabilities, and
writes (contract 2 plus the tables this stage adds):

* ``oracle`` — the label oracle (:mod:`zoorank.label_oracle`, which runs it).
* ``leaderboard`` (table) / ``leaderboard.csv`` / ``.md`` — one row per model, sorted by ``rank``. Columns:
  ``model_id, family, group, rank, aggregate, family_rank``, ``joint_rank`` (when the oracle gives
  an in-domain accuracy), ``rank/<dataset>`` (rank of the primary metric on that dataset),
  ``<dataset>/<metric>`` (every label-free and oracle value) and ``<dataset>/<metric>/rank`` (every
  ranked metric). The metadata key ``zoorank`` of its commit holds the settings as JSON
  (aggregation, primary metric per dataset, in-domain accuracy).
* ``agreement`` — every label-free metric (and the leaderboard rank) against every oracle
  metric, per dataset and per family ('all' or a family with ≥ 3 models).
* with ``oracle.transferability``: few-label cells ``<score>@k<k>s<seed>`` in ``oracle``
  and the label-budget rows of :mod:`zoorank.budget` in ``agreement`` (columns
  ``labels_per_class``, ``budget_seed``; NaN / None on the label-free rows).
* ``failed`` — model_id, dataset, view, stage, error for models that failed or are missing.

Conventions (ranks 1 = best, ties averaged, NaN last; directions; τ-b signs) are those of
:mod:`zoorank.metrics.agreement`. The maths lives there and in :mod:`zoorank.metrics.oracle`; this
module is orchestration (the pure helpers at the top pick settings and shape tables). Only rows
that are fresh for the config are read (:mod:`zoorank.catalog`).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from zoorank.catalog import Catalog, build_catalog
from zoorank.config import RunConfig, fingerprint
from zoorank.errors import ConfigError, NothingRankedError
from zoorank.label_oracle import (  # noqa: F401  (oracle_suite, _labelled_split: public before)
    ORACLE,
    ORACLE_VERSION,
    UNCERTAINTY_SIGNS,
    _labelled_split,
    _oracle_task,
    oracle_direction,
    oracle_split,
    oracle_suite,
    run_oracle,
)
from zoorank.metrics import registry
from zoorank.metrics.agreement import (
    AGGREGATION_DIRECTIONS,
    aggregate_ranks,
    agreement,
    joint_rank,
    rank_within,
)
from zoorank.store import Store
from zoorank.store.layout import AGREEMENT, FAILED, LEADERBOARD, LEADERBOARD_CSV, LEADERBOARD_MD

FAILED_COLUMNS = ["model_id", "dataset", "view", "stage", "error"]

#: in-domain accuracies for CLID's joint rank, in order of preference.
IN_DOMAIN_ACCURACY = ("knn_accuracy", "linear_probe_accuracy")

MIN_MODELS_FOR_AGREEMENT = 3


# -- pure helpers ----------------------------------------------------------------------------------


def ranking_vector(metric: str, values: np.ndarray) -> tuple[np.ndarray, int] | None:
    """(values to rank, direction) for a label-free or oracle metric; None when it has no direction.

    Label-free metrics take their direction from the registry (``<name>@<view>`` included); one
    with an ideal value (α-ReQ's α = 1) is ranked by its distance to the target, lower is better.
    """
    values = np.asarray(values, dtype=np.float64)
    if registry.is_label_free(metric):
        entry = registry.info(metric)
        if entry.target is not None:
            return np.abs(values - entry.target), -1
        return values, entry.direction
    try:
        return values, oracle_direction(metric)
    except KeyError:
        return None


def wide_table(long: pd.DataFrame, model_ids: Sequence[str]) -> pd.DataFrame:
    """Long rows (model_id, dataset, metric, value) → models × ``<dataset>/<metric>`` columns."""
    if long.empty:
        return pd.DataFrame(index=pd.Index(list(model_ids), name="model_id"))
    cols = long["dataset"].astype(str) + "/" + long["metric"].astype(str)
    wide = (long.assign(column=cols)
            .pivot_table(index="model_id", columns="column", values="value", aggfunc="last",
                         dropna=False))
    wide = wide.reindex(index=list(model_ids))
    wide.columns.name = None
    wide.index.name = "model_id"
    return wide[sorted(wide.columns)]


def _markdown_table(frame: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            if math.isnan(v):
                return "—"
            return f"{v:.4g}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    sep = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, sep, *body])


# -- the stage -------------------------------------------------------------------------------------


def write_if_changed(store: Store, relpath: str, data: bytes) -> None:
    """Write only when the bytes differ, so a rerun leaves finished outputs untouched."""
    if store.exists(relpath) and store.read_bytes(relpath) == data:
        return
    store.write_bytes(relpath, data)


def _parquet_bytes(frame: pd.DataFrame, metadata: Mapping[str, Any] | None = None) -> bytes:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata is not None:
        meta = dict(table.schema.metadata or {})
        meta[b"zoorank"] = json.dumps(metadata, sort_keys=True).encode()
        table = table.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def read_leaderboard(store: Store) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """One snapshot of the leaderboard table and the settings its commit carries (``zoorank``)."""
    board, meta = store.read_table_metadata(LEADERBOARD, "zoorank")
    return board, json.loads(meta or "{}")


def read_rank_outputs(store: Store) -> tuple[pd.DataFrame | None, dict[str, Any],
                                             dict[str, pd.DataFrame]]:
    """(leaderboard, settings, {agreement, failed}) as one RANK wrote them together: the tables
    at the versions the leaderboard's commit names (the latest for an older leaderboard)."""
    board, info, _ = store.read_table_commit(LEADERBOARD)
    versions = json.loads(info.get("zoorank_tables") or "{}")
    tables = {name: store.read_frame(name, FAILED_COLUMNS if name == FAILED else None,
                                     version=versions.get(name))
              for name in (AGREEMENT, FAILED)}
    return board, json.loads(info.get("zoorank") or "{}"), tables


def read_leaderboard_settings(store: Store) -> dict[str, Any]:
    """The settings the leaderboard was built with (its commit's metadata key ``zoorank``)."""
    return read_leaderboard(store)[1]


def _budget_directions() -> dict[str, int]:
    from zoorank.budget import REFERENCE_ORACLES

    return {o: oracle_direction(o) for o in REFERENCE_ORACLES}


def _failed_models(config: RunConfig, manifest: pd.DataFrame, model_ids: Sequence[str],
                   metrics: pd.DataFrame,
                   wanted: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """Failed or missing (model, dataset) entries with the reason, from a fresh manifest."""
    names = {d.name for d in config.datasets}
    rows = []
    reasons = {"failed": None, "pending": "embedding interrupted (pending): rerun `zoorank embed`",
               "stale": "embeddings are stale (made under another config or version): rerun "
                        "`zoorank embed`"}
    bad = manifest[manifest["status"].isin(list(reasons)) & manifest["model_id"].isin(model_ids)
                   & manifest["dataset"].isin(names)]
    for r in bad.itertuples(index=False):
        rows.append({"model_id": r.model_id, "dataset": r.dataset, "view": r.view,
                     "stage": "embed", "error": reasons[r.status] or str(r.error)})
    failed_keys = {(r["model_id"], r["dataset"]) for r in rows}
    scored = set(zip(metrics["model_id"], metrics["dataset"])) if not metrics.empty else set()
    embedded = set(zip(manifest["model_id"], manifest["dataset"]))
    for ds in config.datasets:
        for mid in model_ids:
            if (mid, ds.name) in failed_keys or (mid, ds.name) in scored:
                continue
            if wanted is not None and ds.name not in wanted.get(mid, (ds.name,)):
                continue  # not ranked on this dataset (the model entry's datasets:)
            if (mid, ds.name) in embedded:
                rows.append({"model_id": mid, "dataset": ds.name, "view": "", "stage": "score",
                             "error": "no metrics for the current config (run `zoorank score`)"})
            else:
                rows.append({"model_id": mid, "dataset": ds.name, "view": "", "stage": "embed",
                             "error": "no embeddings in the store (embed not run)"})
    return pd.DataFrame(rows, columns=FAILED_COLUMNS)


def metrics_fingerprint(config: RunConfig, metrics: pd.DataFrame) -> str:
    """Fingerprint of the fresh metric rows a leaderboard is built from, and the rank settings:
    REPORT compares it with the store's current fresh rows to refuse a stale leaderboard."""
    rows = sorted(zip(metrics["model_id"], metrics["dataset"], metrics["metric"],
                      metrics["fingerprint"])) if not metrics.empty else []
    return fingerprint(rows, config.rank, config.primary_metric)


def missing_reasons(metrics: pd.DataFrame, model_ids: Sequence[str]) -> list[str]:
    """Per model: ``"<dataset>/<metric>: <reason>"`` for each metric it has no value for (``; ``)."""
    out: dict[str, list[str]] = {m: [] for m in model_ids}
    if not metrics.empty:
        nan = metrics[metrics["value"].isna() & metrics["model_id"].isin(model_ids)]
        for r in nan.itertuples(index=False):
            try:
                reason = json.loads(r.params).get("error") or "not computed"
            except (TypeError, ValueError):
                reason = "not computed"
            out[r.model_id].append(f"{r.dataset}/{r.metric}: {str(reason)[:200]}")
    return ["; ".join(v) for v in out.values()]


def build_leaderboard(
    config: RunConfig,
    models: Sequence[Any],
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(leaderboard frame sorted by rank, settings) from the long metric and oracle tables."""
    info = {m.model_id: m for m in models}
    model_ids = [m for m in info if not metrics.empty and m in set(metrics["model_id"])]
    datasets = [d.name for d in config.datasets]
    unknown = sorted(set(config.rank.dataset_weights) - set(datasets))
    if unknown:
        raise ConfigError(f"rank.dataset_weights: unknown dataset(s) {unknown}; "
                          f"datasets: {datasets}")
    values = wide_table(pd.concat([metrics, oracle], ignore_index=True)
                        [["model_id", "dataset", "metric", "value"]], model_ids)
    board = pd.DataFrame({
        "model_id": model_ids,
        "family": [info[m].family or "" for m in model_ids],
        "group": [info[m].group or "" for m in model_ids],
    })
    ranks: dict[str, np.ndarray] = {}
    for column in values.columns:
        dataset, metric = column.split("/", 1)
        oriented = ranking_vector(metric, values[column].to_numpy())
        if oriented is not None:
            ranks[f"{column}/rank"] = rank_within(*oriented)
    # The primary metric orders every dataset; a model without a value on a dataset has no rank
    # there (missing is missing), and the aggregation renormalises over the datasets it has.
    name = config.primary_metric
    primary: dict[str, str] = {}
    primary_rows: dict[str, dict[str, str]] = {}
    rank_table = {}
    for ds in datasets:
        column = f"{ds}/{name}"
        if name is None or column not in values or not values[column].notna().any():
            continue
        primary[ds] = name
        rank_table[ds] = np.where(values[column].notna(), ranks[f"{column}/rank"], np.nan)
        rows = metrics[(metrics["dataset"] == ds) & (metrics["metric"] == name)]
        # the exact rows that ordered the board, so readers (the notebook) can select them
        primary_rows[ds] = dict(zip(rows["model_id"], rows["fingerprint"]))
    method = config.rank.aggregation
    settings: dict[str, Any] = {"aggregation": method, "primary_metric": primary,
                                "ordered_by": name, "primary_fingerprints": primary_rows,
                                "metrics_fingerprint": metrics_fingerprint(config, metrics),
                                "configured_primary_metric": config.rank.primary_metric,
                                "dataset_weights": dict(config.rank.dataset_weights),
                                "in_domain": None}
    if rank_table and model_ids:
        table = pd.DataFrame(rank_table, index=model_ids)
        weights = {k: v for k, v in config.rank.dataset_weights.items() if k in table.columns}
        agg = aggregate_ranks(table, method, weights).to_numpy()
        # a model with no rank on any dataset stays unranked (NaN), it is not ranked last
        board["rank"] = np.where(np.isnan(agg), np.nan,
                                 rank_within(agg, AGGREGATION_DIRECTIONS[method]))
        board["aggregate"] = agg
    else:
        board["rank"] = np.nan
        board["aggregate"] = np.nan
    board["family_rank"] = np.nan
    for fam, idx in board.groupby("family").groups.items():
        if fam:
            r = board.loc[idx, "rank"].to_numpy()
            board.loc[idx, "family_rank"] = np.where(np.isnan(r), np.nan, rank_within(r, -1))
    for ds in datasets:
        for acc in IN_DOMAIN_ACCURACY:
            col = f"{ds}/{acc}"
            if settings["in_domain"] is None and col in values and values[col].notna().any():
                settings["in_domain"] = col
    board["missing"] = missing_reasons(metrics, model_ids)
    if settings["in_domain"] and board["rank"].notna().all() and len(board):
        acc_rank = rank_within(values[settings["in_domain"]].to_numpy(), +1)
        board["joint_rank"] = joint_rank(board["rank"].to_numpy(), acc_rank)
    for ds, r in rank_table.items():
        board[f"rank/{ds}"] = r
    for column in values.columns:
        board[column] = values[column].to_numpy()
        if f"{column}/rank" in ranks:
            board[f"{column}/rank"] = ranks[f"{column}/rank"]
    board = board.sort_values(["rank", "model_id"], kind="stable").reset_index(drop=True)
    return board, settings


def build_agreement(
    config: RunConfig,
    board: pd.DataFrame,
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
) -> pd.DataFrame:
    """Every label-free metric (and the leaderboard rank) vs every oracle metric, per family.

    Models whose metric value is missing (NaN) are excluded from that metric's row;
    ``n_metric_nan`` counts them and ``n_models`` counts the models used.
    """
    columns = ["metric", "oracle_metric", "dataset", "family", "n_models", "kendall_tau",
               "kendall_ci_low", "kendall_ci_high", "spearman", "spearman_ci_low",
               "spearman_ci_high", "pearson", "pearson_ci_low", "pearson_ci_high", "top1_regret",
               "top1_oracle", "oracle_best", "top1_model", "topk_recall", "top_k", "n_metric_nan"]
    if oracle.empty or board.empty:
        return pd.DataFrame(columns=columns)
    board = board.set_index("model_id")
    families: dict[str, list[str]] = {"all": list(board.index)}
    for fam, ids in board.groupby("family").groups.items():
        if fam and len(ids) >= MIN_MODELS_FOR_AGREEMENT and fam != "all":
            families[str(fam)] = list(ids)
    rows = []
    for ds in [d.name for d in config.datasets]:
        o_names = sorted(oracle.loc[oracle["dataset"] == ds, "metric"].unique())
        m_names = sorted(metrics.loc[metrics["dataset"] == ds, "metric"].unique())
        candidates: list[tuple[str, np.ndarray, int]] = []
        for metric in m_names:
            col = f"{ds}/{metric}"
            oriented = ranking_vector(metric, board[col].to_numpy()) if col in board else None
            if oriented is not None:
                candidates.append((metric, *oriented))
        if board["rank"].notna().any():
            candidates.append(("leaderboard_rank", board["rank"].to_numpy(), -1))
        for o_name in o_names:
            o_dir = oracle_direction(o_name)
            o_all = board[f"{ds}/{o_name}"].to_numpy(dtype=np.float64)
            for fam, ids in families.items():
                sel = board.index.get_indexer(ids)
                keep = sel[~np.isnan(o_all[sel])]
                if len(keep) < MIN_MODELS_FOR_AGREEMENT:
                    continue
                for metric, mv, m_dir in candidates:
                    # a model the metric could not score is excluded from its τ (not ranked
                    # last: that would reward a metric for failing exactly on bad models)
                    used = keep[np.isfinite(mv[keep])]
                    if len(used) < MIN_MODELS_FOR_AGREEMENT:
                        continue
                    res = agreement(mv[used], o_all[used], m_dir, o_dir,
                                    bootstrap=config.rank.bootstrap, seed=config.seed,
                                    top_k=config.rank.top_k)
                    res["n_metric_nan"] = int(len(keep) - len(used))
                    pick = board.index[used][np.argmax(m_dir * mv[used])]
                    rows.append({"metric": metric, "oracle_metric": o_name, "dataset": ds,
                                 "family": fam, **res, "top1_model": pick})
    return pd.DataFrame(rows, columns=columns)


def _markdown(board: pd.DataFrame, failed: pd.DataFrame, settings: Mapping[str, Any]) -> str:
    lines = ["# zoorank leaderboard", ""]
    primary = settings.get("primary_metric") or {}
    lines.append(f"Ordered by `{settings.get('ordered_by')}`: aggregation "
                 f"`{settings.get('aggregation')}` of its ranks over the datasets ("
                 + ", ".join(f"{d}: `{m}`" for d, m in primary.items())
                 + "). Rank 1 = best; ties averaged. A model with no value on a dataset has no "
                 "rank there and is aggregated over the datasets it has; one with no value "
                 "anywhere is unranked (listed last, its reasons in `missing`).")
    if settings.get("in_domain"):
        lines.append(f"Joint rank: sqrt(rank · rank of `{settings['in_domain']}`) (CLID §3.5).")
    lines.append("")
    compact = leaderboard_headline(board, settings)
    lines += [_markdown_table(compact), ""]
    lines += ["## Failed models", ""]
    if failed.empty:
        lines.append("None.")
    else:
        lines.append(_markdown_table(failed))
    lines.append("")
    return "\n".join(lines)


def leaderboard_headline(board: pd.DataFrame, settings: Mapping[str, Any]) -> pd.DataFrame:
    """The leaderboard's headline columns (rank, model, primary metric per dataset, oracle)."""
    cols = ["rank", "model_id", "family", "group", "aggregate"]
    if "joint_rank" in board:
        cols.append("joint_rank")
    for ds, metric in (settings.get("primary_metric") or {}).items():
        cols += [f"{ds}/{metric}", f"rank/{ds}"]
    if settings.get("in_domain"):
        cols.append(settings["in_domain"])
    if "missing" in board and (board["missing"].astype(str) != "").any():
        cols.append("missing")
    return board[[c for c in cols if c in board]]


def print_leaderboard(board: pd.DataFrame, settings: Mapping[str, Any], top: int = 10) -> None:
    """The leaderboard's top rows as a rich table on the terminal."""
    from rich.console import Console
    from rich.table import Table

    compact = leaderboard_headline(board, settings).head(top).drop(columns="group", errors="ignore")
    table = Table(title=f"zoorank leaderboard (top {min(top, len(board))} of {len(board)}), "
                        f"ordered by {settings.get('ordered_by')}")
    for c in compact.columns:
        text = c in ("model_id", "family")
        table.add_column(str(c), justify="left" if text else "right", no_wrap=text)
    for row in compact.itertuples(index=False):
        table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row])
    # Logs and pipes get rich's 80 columns, which would cut model ids; never go below 140.
    console = Console()
    Console(width=max(console.width, 140)).print(table)


def run_rank(config: RunConfig, address: str | None = None, show: bool = True,
             catalog: Catalog | None = None) -> pd.DataFrame:
    """RANK stage: oracle (when configured), ranks, aggregation, agreement; returns the leaderboard.

    ``show`` prints the leaderboard's top rows (``zoorank run`` leaves that to the REPORT stage).
    """
    store = Store(config.store)
    catalog = build_catalog(config) if catalog is None else catalog
    models = catalog.models
    manifest = catalog.fresh_manifest(store.read_manifest())
    metrics = catalog.fresh_metrics(store, manifest)
    oracle, oracle_failures = run_oracle(config, store, models, address, manifest, catalog)
    return write_rank_outputs(config, store, models, metrics, oracle, oracle_failures, show,
                              manifest)


def check_ranked(board: pd.DataFrame) -> None:
    """NothingRankedError (exit 3) when no model has a rank: every model failed or is missing."""
    if board.empty or "rank" not in board or not board["rank"].notna().any():
        raise NothingRankedError(
            "nothing could be ranked: every model failed or has no value of the primary metric "
            "(see failed.parquet / leaderboard.md)")


def write_rank_outputs(
    config: RunConfig,
    store: Store,
    models: Sequence[Any],
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
    oracle_failures: Sequence[Mapping[str, Any]] = (),
    show: bool = True,
    manifest: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Leaderboard, agreement and failed-model tables from the long metric and oracle tables.

    Writes ``leaderboard`` (table, .csv, .md), ``agreement`` and ``failed`` (only
    when their bytes change), prints the top rows and returns the leaderboard.
    """
    from zoorank import budget

    model_ids = [m.model_id for m in models]
    if not oracle.empty:
        oracle = oracle[oracle["model_id"].isin(model_ids)].reset_index(drop=True)
    oracle, budget_cells = budget.split_oracle(oracle)
    board, settings = build_leaderboard(config, models, metrics, oracle)
    agree = build_agreement(config, board, metrics, oracle)
    agree = budget.with_budget_rows(agree, board, budget_cells, _budget_directions(),
                                    config.rank.bootstrap, config.seed)
    if manifest is None:
        manifest = build_catalog(config, models).fresh_manifest(store.read_manifest())
    wanted = {m.model_id: tuple(m.datasets) for m in models
              if getattr(m, "datasets", None) is not None}
    failed = _failed_models(config, manifest, model_ids, metrics, wanted)
    if oracle_failures:
        failed = pd.concat([failed, pd.DataFrame(list(oracle_failures), columns=FAILED_COLUMNS)],
                           ignore_index=True)
    # the leaderboard's commit names the versions of the tables written with it, so a reader
    # (the report) sees one consistent set while another rank commits newer ones
    versions = {AGREEMENT: store.replace_table(AGREEMENT, agree),
                FAILED: store.replace_table(FAILED, failed)}
    store.replace_table(LEADERBOARD, board, {"zoorank": json.dumps(settings, sort_keys=True),
                                             "zoorank_tables": json.dumps(versions)})
    write_if_changed(store, LEADERBOARD_CSV, board.to_csv(index=False).encode())
    write_if_changed(store, LEADERBOARD_MD, _markdown(board, failed, settings).encode())
    if show and len(board):
        print_leaderboard(board, settings)
        for line in budget.crossover_lines(budget.crossovers(agree)):
            print(line)
    if show and len(failed):
        from rich.console import Console

        Console().print(f"[yellow]{len(failed)} failed or missing (model, dataset) entries: "
                        f"see {store.name}/{LEADERBOARD_MD}")
    return board
