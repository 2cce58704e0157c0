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
    cols.append("checkpoint")
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


def wrapped(prefix: str, items: Sequence[str], width: int = PLAIN_WIDTH,
            indent: str = "  ") -> list[str]:
    """``prefix`` then every one of ``items``, comma-separated, wrapped at ``width`` columns
    (never inside an item: a long id or path stands on a line of its own, whole)."""
    import textwrap

    text = prefix + (", ".join(items) if items else "none")
    return textwrap.wrap(text, width=width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [prefix.rstrip()]


def _number(v: Any) -> str:
    return "—" if v is None else f"{float(v):.4g}"


def _pp(v: Any) -> str:
    return "—" if v is None else f"{float(v):.2f} pp"


def record_lines(record: Mapping[str, Any] | None, regret: Mapping[str, Any]) -> list[str]:
    """The pick's measured record: its regret on held-out units (their n) with the all-unit
    figures beside it, one line against the baselines, and ``guaranteed: false`` where false.
    ``record``: decision.json's ``record`` block (:func:`zoorank.evaluation.record_block`); without
    one, the shortlist's held-out zoos (``regret``: ``expected_regret_pp``)."""
    from zoorank.evaluation.entry import BASELINE_WORDS

    if not record or not (record.get("held_out_units") or {}).get("n"):
        if regret.get("median") is None:
            return ["Expected regret of the pick: not measured yet"]
        return [f"Expected regret of the pick: median {_pp(regret['median'])}, p90 "
                f"{_pp(regret.get('p90'))} ({regret.get('zoos')} held-out zoos)"]
    held, r = record["held_out_units"], record.get("regret_pp") or {}
    out, every = r.get("held_out") or {}, r.get("all_units") or {}
    units = (record.get("units") or {}).get("n")
    lines = [f"Record of {record.get('metric')} ({record.get('board')}, {record.get('source')}): "
             f"the pick's regret on {held['n']} held-out units median {_pp(out.get('median'))}, "
             f"p90 {_pp(out.get('p90'))}; on all {every.get('n', units)} units median "
             f"{_pp(every.get('median'))}, p90 {_pp(every.get('p90'))}"]
    base = [f"{BASELINE_WORDS.get(k, k)}: {_pp(v.get('median'))}"
            for k, v in (record.get("baselines") or {}).items() if v.get("n")]
    if base:
        lines.append("Baselines on the same held-out units (median regret): " + "; ".join(base))
    if not record.get("guaranteed"):
        lines.append(f"guaranteed: false (the shortlist held a near-best model on "
                     f"{held.get('hits')}/{held['n']} held-out units; no coverage guarantee)")
    return lines


def decision_lines(doc: Mapping[str, Any] | None, report: str | None = None,
                   config: str | None = None, store: str | None = None) -> list[str]:
    """The verdict of ``decision.json`` (:mod:`zoorank.decide.verdict`), each line within
    :data:`PLAIN_WIDTH` columns but for a long path or id, which is never cut: the pick (after
    ``zoorank label``, the few-label pick first with the label-free one beside it), its checkpoint
    on a line of its own, every shortlisted id (wrapped), the measured record with its baselines,
    the failed models, the metrics' disagreement, the next step, where the report (``report``:
    its path; None: not written by this command) and decision.json (under ``store``) are.
    ``config``: the config's path, put in the next step's command (default: the running
    command's, :func:`zoorank.decide.next_step.config_path`; else the one the stored command
    names)."""
    if not doc:
        return []
    config = config or current_config()
    where = shown_path(f"{store}/{DECISION_JSON}") if store else DECISION_JSON
    report = shown_path(report) if report else report
    pick = doc.get("pick") or {}
    top = doc.get("top_set") or {}
    counts = doc.get("counts") or {}
    failed = doc.get("failed") or []
    if not pick:
        return ["Pick: none (no model could be ranked: see the failed models)",
                *failed_lines(counts, failed), f"Verdict, as JSON: {where}"]
    lines = []
    value = (f"{pick.get('metric')} {_number(pick.get('value'))} on {pick.get('dataset')}"
             if pick.get("metric") else "")
    label_free = f"{pick['model_id']}" + (f" ({value})" if value else "")
    verdict = doc.get("verdict") or {}
    if verdict.get("basis") == "labels":
        lines.append(f"Pick: {verdict['model_id']} (few-label: p(best | labels) "
                     f"{_number(verdict.get('p_best'))} after {verdict.get('labels')} labels on "
                     f"{verdict.get('dataset')}); label-free pick: {label_free}")
    else:
        lines.append(f"Pick: {label_free}")
    lines.append(f"Checkpoint{'' if verdict.get('basis') != 'labels' else ' of the label-free pick'}"
                 f": {pick.get('checkpoint') or 'none (the architecture alone, no file)'}")
    short = doc.get("shortlist") or {}
    ids = [str(m) for m in short.get("models") or []]
    if short.get("hits") is not None and short.get("zoos"):
        record = f"held a near-best model on {short['hits']}/{short['zoos']} held-out units or zoos"
    else:
        record = "hit rate not measured yet"
    lines += wrapped(f"Shortlist ({len(ids)} of {top.get('of', '?')}; {record}): ", ids)
    lines += record_lines(doc.get("record"), doc.get("expected_regret_pp") or {})
    lines += failed_lines(counts, failed)
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
    few = doc.get("few_label") or {}
    if len(few) > 1 or (few and verdict.get("basis") != "labels"):
        lines.append("Few-label pick: " + "; ".join(
            f"{ds}: {e.get('model_id')}, p(best | labels) {_number(e.get('p_best'))} after "
            f"{e.get('labels')} labels" for ds, e in few.items()))
    caveats = len(doc.get("caveats") or [])
    detail = (f"Report, with the top set ({top.get('size', 0)} of {top.get('of', 0)}, a "
              f"{top.get('level')} set) and {caveats} caveat{'s' if caveats != 1 else ''}: ")
    lines.append(detail + (report or f"`zoorank report {shlex.quote(config) if config else CONFIG}`"))
    lines.append(f"Checkpoint and verdict, as JSON: {where}")
    return lines


def failed_lines(counts: Mapping[str, Any], failed: Sequence[Mapping[str, Any]],
                 width: int = PLAIN_WIDTH) -> list[str]:
    """When models failed: how many of the configured, and every failed id, wrapped at
    ``width`` (the card passes a large one: the page wraps)."""
    if not counts.get("failed"):
        return []
    ids = list(dict.fromkeys(str(f["model_id"]) for f in failed))
    return wrapped(f"Failed: {counts['failed']} of {counts.get('configured')} configured models "
                   f"(reasons in decision.json's failed): ", ids, width)


def print_verdict(doc: Mapping[str, Any] | None, report: str | None = None,
                  config: str | None = None, store: str | None = None) -> None:
    """Print :func:`decision_lines` (nothing inside :func:`deferred_verdict`)."""
    if _DEFERRED.get():
        return
    console = output_console()
    for line in decision_lines(doc, report, config, store):
        console.print(line, markup=False, highlight=False)


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
