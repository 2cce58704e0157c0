"""The leaderboard as RANK writes it and REPORT reads it: one snapshot of its table and the
tables its commit names, the metric-to-ranking rule, and the console rendering (the table and
the verdict of ``decision.json``, :func:`decision_lines`).

A lower layer than the stages, so RANK and REPORT stand side by side on it (neither imports the
other).
"""

from __future__ import annotations

import contextvars
import json
import math
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.config.digests import fingerprint
from zoorank.console import PLAIN_WIDTH, output_console, shown_path
from zoorank.decide.next_step import CONFIG, ask_command, current_config
from zoorank.decide.verdict import DECISION_JSON
from zoorank.decide.verdict_lines import failure_lines, pick_lines, record_lines, wrapped
from zoorank.metrics import registry
from zoorank.store import Store
from zoorank.store.layout import AGREEMENT, FAILED, LEADERBOARD, ORACLE  # noqa: F401  (re-exported)

FAILED_COLUMNS = ["model_id", "dataset", "view", "stage", "error"]
#: set within :func:`deferred_verdict`: the stages leave the verdict to the command.
_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar("zoorank_verdict_deferred",
                                                                 default=False)


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
        return values, registry.label_info(metric).direction
    except KeyError:
        return None


def write_if_changed(store: Store, relpath: str, data: bytes, redacted: bool = False) -> None:
    """Write only when the bytes differ, so a rerun leaves finished outputs untouched
    (``redacted``: see :meth:`Store.write_bytes`)."""
    if store.exists(relpath) and store.read_bytes(relpath) == data:
        return
    store.write_bytes(relpath, data, redacted=redacted)


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


def metrics_fingerprint(config: RunConfig, metrics: pd.DataFrame) -> str:
    """Fingerprint of the fresh metric rows a leaderboard is built from, and the rank settings:
    REPORT compares it with the store's current fresh rows to refuse a stale leaderboard."""
    rows = sorted(zip(metrics["model_id"], metrics["dataset"], metrics["metric"],
                      metrics["fingerprint"])) if not metrics.empty else []
    return fingerprint(rows, config.rank, config.primary_metric)


def with_checkpoints(board: pd.DataFrame, models: Sequence[Any]) -> pd.DataFrame:
    """``board`` with a ``checkpoint`` column after ``model_id``: each model's checkpoint file
    (redacted; ``""`` for a model without one, a timm or transformers model by name)."""
    from zoorank.store.redact import redact

    files = {str(m.model_id): getattr(getattr(m, "spec", None), "checkpoint", None) for m in models}
    out = board.drop(columns=["checkpoint"], errors="ignore")
    at = list(out.columns).index("model_id") + 1 if "model_id" in out else len(out.columns)
    out.insert(at, "checkpoint", [redact(str(files[m])) if files.get(m) else ""
                                  for m in out["model_id"].astype(str)] if len(out) else [])
    return out


def leaderboard_headline(board: pd.DataFrame, settings: Mapping[str, Any]) -> pd.DataFrame:
    """The leaderboard's headline columns (rank and its interval, top set, model, flags, primary
    metric per dataset, oracle)."""
    cols = ["rank", "rank_low", "rank_high", "p_best", "in_top_set", "model_id", "family",
            "group", "flags", "aggregate"]
    if "joint_rank" in board:
        cols.append("joint_rank")
    mixed = settings.get("mixed_signals") or {}
    for ds, metric in (settings.get("primary_metric") or {}).items():
        cols += [f"{ds}/{mixed[ds]['head']}"] if ds in mixed else []
        cols += [f"{ds}/{metric}", f"rank/{ds}"]
    if "signal" in board and (board["signal"].astype(str).str.contains("head")).any():
        cols.insert(cols.index("model_id") + 1, "signal")
    if settings.get("in_domain"):
        cols.append(settings["in_domain"])
    if "missing" in board and (board["missing"].astype(str) != "").any():
        cols.append("missing")
    return board[[c for c in cols if c in board]]


def _cell(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return "—" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def leaderboard_table(board: pd.DataFrame, settings: Mapping[str, Any], top: int = 10,
                      plain: bool = False) -> Any:
    """The leaderboard's top rows as a rich Table: rank, interval, p(best), top set, model,
    primary value per dataset (at most 2), flags. ``plain``: no box, for logs."""
    from rich import box
    from rich.table import Table

    d = settings.get("decision") or {}
    mixed = settings.get("mixed_signals") or {}
    # a board that mixes heads and encoders shows both signals' values (one is empty per row)
    primary = [(ds, m) for ds, metric in list((settings.get("primary_metric") or {}).items())[:2]
               for m in ([mixed[ds]["head"], metric] if ds in mixed else [metric])][:2]
    table = Table(title=f"zoorank leaderboard (top {min(top, len(board))} of {len(board)}), "
                        f"ordered by {settings.get('ordered_by')}",
                  box=None if plain else box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("interval", justify="right", no_wrap=True)
    table.add_column("p_best", justify="right", no_wrap=True)
    table.add_column("top", justify="center", no_wrap=True)
    table.add_column("model", justify="left", overflow="fold", ratio=3)
    for ds, metric in primary:
        name = metric if len({d for d, _ in primary}) == 1 else f"{ds}/{metric}"
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("flags", justify="left", overflow="fold", ratio=2)
    for _, r in board.head(top).iterrows():
        low, high = r.get("rank_low", math.nan), r.get("rank_high", math.nan)
        interval = "—" if not (np.isfinite(low) and np.isfinite(high)) else (
            f"{low:.0f}" if low == high else f"{low:.0f}-{high:.0f}")
        table.add_row(_cell(r["rank"]), interval, _cell(r.get("p_best", math.nan)),
                      "yes" if r.get("in_top_set", False) else "",
                      str(r["model_id"]), *[_cell(r.get(f"{ds}/{m}", math.nan)) for ds, m in primary],
                      str(r.get("flags", "") or ""))
    if d.get("top_set") is not None and len(d["top_set"]) > top:
        table.caption = f"top set: {len(d['top_set'])} models (the rest in leaderboard.md)"
    return table


def _fits(text: str, width: int = PLAIN_WIDTH) -> bool:
    return len(text) <= width


def verdict_width() -> int:
    """The verdict's wrap width: the terminal's columns (``COLUMNS``), at most
    :data:`PLAIN_WIDTH`."""
    import shutil

    return min(PLAIN_WIDTH, shutil.get_terminal_size((PLAIN_WIDTH, 24)).columns)


def _number(v: Any) -> str:
    return "—" if v is None else f"{float(v):.4g}"


def decision_lines(doc: Mapping[str, Any] | None, report: str | None = None,
                   config: str | None = None, store: str | None = None) -> list[str]:
    """The verdict of ``decision.json`` (:mod:`zoorank.decide.verdict`), each line within the
    terminal's width (at most :data:`PLAIN_WIDTH`) but for a long path or id, wrapped lines
    starting with two spaces: the pick (the few-label pick first, when labels were given back),
    its checkpoint on its own line, every shortlisted id and the measured record, the held-out
    record and baselines (:func:`~zoorank.decide.verdict_lines.record_lines`), the models that
    failed, the metrics' disagreement, the next step, where the report (``report``: its path; None:
    not written by this command) and decision.json (under ``store``) are. ``config``: the config's
    path, put in the next step's command (default: the running command's,
    :func:`zoorank.decide.next_step.config_path`; else the one the stored command names)."""
    if not doc:
        return []
    config = config or current_config()
    where = shown_path(f"{store}/{DECISION_JSON}") if store else DECISION_JSON
    report = shown_path(report) if report else report
    pick = doc.get("pick") or {}
    top = doc.get("top_set") or {}
    if not pick:
        return ["Pick: none (no model could be ranked: see the failed models)",
                f"Verdict, as JSON: {where}"]
    width = verdict_width()
    value = (f"{pick.get('metric')} {_number(pick.get('value'))} on {pick.get('dataset')}"
             if pick.get("metric") else "")
    lines = pick_lines(doc, value, width)
    short = doc.get("shortlist") or {}
    ids = [str(m) for m in short.get("models") or []]
    block = doc.get("record")
    if block:
        record = f"{short.get('text') or 'calibration record'}"
    elif short.get("hits") is not None and short.get("zoos"):
        record = f"within 0.5 pp of the best on {short['hits']}/{short['zoos']} validation zoos"
    else:
        record = "hit rate not measured yet"
    lines += wrapped(f"Shortlist ({len(ids)} of {top.get('of', '?')}; {record}): ", ids, width)
    lines += record_lines(block)
    regret = doc.get("expected_regret_pp") or {}
    if block:
        pass  # the record's lines above carry the held-out and all-unit regret
    elif regret.get("median") is not None:
        p90 = regret.get("p90")
        lines.append(f"Expected regret of the pick: median {float(regret['median']):.2f} pp, 90th "
                     f"percentile {'—' if p90 is None else f'{float(p90):.2f}'} pp "
                     f"({regret.get('zoos')} validation zoos)")
    else:
        lines.append("Expected regret of the pick: not measured yet")
    lines += failure_lines(doc, width)
    if doc.get("disagreement"):
        lines.append(str(doc["disagreement"]))
    step = doc.get("next_step") or {}
    if step.get("command"):
        command = ask_command(config, int(step["budget"])) if config and step.get("budget") \
            else str(step["command"])
        line = f"Next step: {command}"
        lines.append(f"{line} ({step['short']})" if step.get("short")
                     and _fits(f"{line} ({step['short']})") else line)
    elif step:
        lines.append(f"Next step: none ({step.get('short') or 'the measured budget is spent'})")
    caveats = len(doc.get("caveats") or [])
    detail = (f"Report, with the top set ({top.get('size', 0)} of {top.get('of', 0)}, a "
              f"{top.get('level')} set) and {caveats} caveat{'s' if caveats != 1 else ''}: ")
    lines.append(detail + (report or f"`zoorank report {shlex.quote(config) if config else CONFIG}`"))
    lines.append(f"Checkpoint and verdict, as JSON: {where}")
    return lines


def print_verdict(doc: Mapping[str, Any] | None, report: str | None = None,
                  config: str | None = None, store: str | None = None) -> None:
    """Print :func:`decision_lines` (nothing inside :func:`deferred_verdict`)."""
    if _DEFERRED.get():
        return
    console = output_console()
    for line in decision_lines(doc, report, config, store):  # a long path stays whole
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@contextmanager
def deferred_verdict() -> Iterator[None]:
    """Within it, the stages do not print the verdict: a command that prints more after them (the
    demo) prints it last itself."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def print_leaderboard(board: pd.DataFrame, settings: Mapping[str, Any], top: int = 10,
                      where: str | None = None) -> None:
    """The leaderboard's top rows, fitted to the terminal (plain text within
    :data:`PLAIN_WIDTH` columns when stdout is not a terminal), and where the whole table is when
    it has more rows (``where``: the store's name). The verdict is :func:`print_verdict`'s."""
    console = output_console()
    plain = not console.is_terminal
    console.print(leaderboard_table(board, settings, top, plain=plain))
    if len(board) > top:
        base = f"{where}/" if where else "the store's "
        console.print(f"the whole leaderboard ({len(board)} models): {base}leaderboard.csv "
                      "(and leaderboard.md, the report)", markup=False, highlight=False)
