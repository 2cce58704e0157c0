"""Stage runners the CLI and the Ray-job entry points call: each stage is one function.

Every store write is one transactional table commit (:mod:`zoorank.store.tables`), so
several processes may run stages on one store at once and readers see consistent snapshots.
Each command builds the config's catalog (:mod:`zoorank.catalog`: what should exist, with
fingerprints) once and hands it to every stage it runs; the stages stand side by side on it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from zoorank.catalog import Catalog, build_catalog
from zoorank.config import RunConfig


def run_embed(config: RunConfig, address: str | None = None, catalog: Catalog | None = None):
    from zoorank.embed import run_embed as _run

    return _run(config, address=address, catalog=catalog or build_catalog(config))


def run_score(config: RunConfig, address: str | None = None, catalog: Catalog | None = None):
    from zoorank.score import run_score as _run

    return _run(config, address=address, catalog=catalog or build_catalog(config))


def run_rank(config: RunConfig, address: str | None = None, show: bool = True,
             check: bool = True, catalog: Catalog | None = None):
    """RANK; raises NothingRankedError (exit 3) when no model could be ranked (``check``)."""
    from zoorank.rank import check_ranked
    from zoorank.rank import run_rank as _run

    board = _run(config, address=address, show=show, catalog=catalog or build_catalog(config))
    if check:
        check_ranked(board)
    return board


def run_report(config: RunConfig, address: str | None = None, catalog: Catalog | None = None,
               check: bool = True):
    """REPORT; the page is written even when nothing could be ranked, then (``check``)
    NothingRankedError (exit 3) is raised, as ``zoorank run`` does.

    Skipped (the page is not re-rendered) when it was rendered from the same inputs and code
    (:func:`zoorank.stage_inputs.report_inputs`); the leaderboard is printed anyway. Otherwise a
    line says why it renders again (the code or the inputs that changed)."""
    from zoorank import stage_inputs
    from zoorank.leaderboard import metrics_fingerprint, read_leaderboard
    from zoorank.rank import check_ranked
    from zoorank.report import run_report as _run
    from zoorank.store import Store

    catalog = catalog or build_catalog(config)
    store = Store(config.store)
    manifest = catalog.fresh_manifest(store.read_manifest())
    stored_metrics = store.read_metrics()
    fresh = _fresh_metrics(catalog, stored_metrics, manifest)
    inputs = stage_inputs.report_inputs(
        config, store, manifest, catalog.fresh_reliability(manifest, stored_metrics),
        metrics_fingerprint(config, fresh), stage_inputs.dataset_labels(catalog))
    if stage_inputs.report_is_current(store, inputs):
        out = _report_unchanged(store)
    else:
        why = stage_inputs.report_rerun_reason(store, inputs)
        if why is not None:
            from zoorank.console import output_console

            output_console().print(f"report: {why}: rendering again", markup=False,
                                   highlight=False)
        out = _run(config, catalog=catalog, extra_sections=_label_sections(config))
        stage_inputs.record_report_inputs(store, inputs)
    if check:
        import pandas as pd

        board, _ = read_leaderboard(Store(config.store))
        check_ranked(board if board is not None else pd.DataFrame())
    return out


def _label_sections(config: RunConfig) -> list:
    """The report's sections on the labels given back (``zoorank ask`` / ``label``): the
    stopping rule as it stands (:func:`zoorank.labels.stopping.summary`) of every dataset with
    labels given back, in the config's order; none before any label."""
    from zoorank.labels.stopping import summary
    from zoorank.report.page import Section, Table

    sections = []
    for spec in config.datasets:  # a dataset name is a valid HTML id (config.NAME_PATTERN)
        got = summary(config, spec.name)
        if got is None:
            continue
        rows = got.get("rows") or []
        sections.append(Section(id=f"labels-given-{spec.name}", title=str(got["title"]),
                                sentences=[str(s) for s in got.get("sentences") or []],
                                table=Table(rows=rows, id=f"labels-given-table-{spec.name}")
                                if rows else None))
    return sections


def _fresh_metrics(catalog: Catalog, metrics, manifest):
    """The fresh rows of an already read ``metrics`` table (:meth:`Catalog.fresh_metrics`)."""
    from zoorank.catalog import select_fresh

    return select_fresh(metrics, catalog.metric_fingerprints(manifest))


def _report_unchanged(store) -> str:
    """What REPORT prints, for a page that is already current: the leaderboard, the label-budget
    verdicts and where the page is; returns the page's path or URI."""
    from zoorank.budget import crossover_lines, crossovers
    from zoorank.console import output_console
    from zoorank.leaderboard import AGREEMENT, print_leaderboard, read_rank_outputs
    from zoorank.store.layout import REPORT_DIR

    board, settings, tables = read_rank_outputs(store)
    where = store.path(REPORT_DIR, "index.html")
    if not store.is_local:  # the URI a user can open (scheme kept, credentials removed)
        from zoorank.uris import join, redact

        where = redact(join(store.uri, where))
    if board is not None and len(board):
        print_leaderboard(board, settings)
    console = output_console()
    for line in crossover_lines(crossovers(tables[AGREEMENT])):
        console.print(line, markup=False, highlight=False)
    console.print(f"report: {where} is current (inputs unchanged): not re-rendered",
                  markup=False, highlight=False)
    return where


def run_all(config: RunConfig, address: str | None = None):
    """embed → score → rank → report; each stage skips work already done (fingerprints).

    The report is written even when nothing could be ranked (it lists the failures); then
    NothingRankedError (exit 3) is raised.
    """
    from zoorank.rank import check_ranked

    catalog = build_catalog(config)  # once: every stage compares it with the store
    run_embed(config, address=address, catalog=catalog)
    run_score(config, address=address, catalog=catalog)
    board = run_rank(config, address=address, show=False, check=False,  # the report prints
                     catalog=catalog)
    out = run_report(config, catalog=catalog, check=False)
    check_ranked(board)
    return out


def run_gc(config: RunConfig, address: str | None = None, dry_run: bool = False):
    """Delete what the config no longer describes (stale rows, orphaned shards); see zoorank.gc."""
    from zoorank.gc import run_gc as _run

    return _run(config, dry_run=dry_run, catalog=build_catalog(config))


def run_ask(config: RunConfig, budget: int, round_: int | None = None,
            dataset: str | None = None, max_labels: int | None = None,
            sampler: str | None = None):
    """``zoorank ask``: one round of images to label (:mod:`zoorank.labels.ask`); ``sampler``:
    a classifier zoo's sampler (default: :data:`zoorank.labels.heads.DEFAULT_SAMPLER`)."""
    from zoorank.labels.ask import run_ask as _run
    from zoorank.labels.heads import DEFAULT_SAMPLER

    return _run(config, budget, round_=round_, dataset=dataset, max_labels=max_labels,
                sampler=sampler or DEFAULT_SAMPLER)


def run_label(config: RunConfig, path: str, dataset: str | None = None,
              max_labels: int | None = None, rank: bool = True, address: str | None = None):
    """``zoorank label``: merge labels (:mod:`zoorank.labels.merge`), then RANK, which recomputes
    the oracle, few-label scores and agreement of the datasets whose labels changed."""
    from zoorank.labels.merge import run_label as _run

    merged = _run(config, path, dataset=dataset, max_labels=max_labels)
    if rank and merged.added:
        run_rank(config, address=address, show=False, check=False)
    return merged


# -- zoorank run --watch ------------------------------------------------------------------------


@dataclass
class WatchRound:
    """One round of :func:`watch` that ranked something new.

    ``models``: the models of the round's config; ``new``: those not in the previous round;
    ``embedded``: models whose embeddings this round computed (manifest rows it wrote);
    ``top``: the leaderboard's top ids; ``seconds``: the round's wall time; ``detected``: when
    the round started (``time.time()``).
    """

    index: int
    models: list[str]
    new: list[str]
    embedded: list[str]
    top: list[str]
    seconds: float
    detected: float


@dataclass
class WatchSummary:
    rounds: list[WatchRound] = field(default_factory=list)
    #: "until" (time or count reached), "signal" (Ctrl-C / SIGTERM)
    stopped_by: str = ""
    #: the signal that stopped the watch (``signal.SIGINT`` / ``SIGTERM``), else None
    signum: int | None = None

    @property
    def exit_status(self) -> int:
        """0, or 128 + the signal that stopped the watch (130 Ctrl-C, 143 SIGTERM)."""
        return 0 if self.signum is None else 128 + self.signum


def parse_until(text: str | None, now: float | None = None) -> tuple[float | None, int | None]:
    """``--until``: (deadline as ``time.time()``, None) or (None, model count).

    A plain integer is a COUNT of ranked models; ``90s``/``30m``/``2h`` a duration from now;
    ``HH:MM`` the next such local time; anything else an ISO date-time (local unless it names a
    zone). Raises InputError naming the value.
    """
    import datetime as dt
    import re

    from zoorank.errors import InputError

    if text is None:
        return None, None
    now = time.time() if now is None else now
    value = text.strip()
    if value.isdigit():
        return None, int(value)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh])", value)
    if m:
        return now + float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)], None
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", value)
    if m:
        base = dt.datetime.fromtimestamp(now)
        at = base.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=0, microsecond=0)
        if at.timestamp() <= now:
            at += dt.timedelta(days=1)
        return at.timestamp(), None
    try:
        return dt.datetime.fromisoformat(value).timestamp(), None
    except ValueError:
        raise InputError(f"--until: {text!r} is neither a count, a duration (90s, 30m, 2h), "
                         "HH:MM nor an ISO date-time") from None


def settled_config(config: RunConfig, seen: dict[str, tuple[int, int]], settle: float,
                   now: float | None = None) -> tuple[RunConfig | None, list[str]]:
    """The config with every checkpoint glob replaced by its *settled* files.

    A file is settled when it is at least ``settle`` seconds old and its (size, mtime) equal those
    of the previous poll (``seen``, updated in place; a file first seen already old counts as
    settled). Each file becomes a concrete entry with the id :func:`zoorank.zoo.resolve_models`
    gives it from the glob, and the same fingerprint (path and id are not part of it). Entries
    without a glob are kept. Returns (config or None when no model is left, unsettled files).
    """
    from zoorank import uris
    from zoorank.config import ModelSpec
    from zoorank.zoo.resolve import _GLOB_CHARS, _glob_prefix, _id_from_path, _plain_path

    now = time.time() if now is None else now
    models, waiting = [], []
    for entry in config.models:
        checkpoint = getattr(entry, "checkpoint", None)
        if not (isinstance(entry, ModelSpec) and checkpoint
                and any(c in _plain_path(checkpoint) for c in _GLOB_CHARS)):
            models.append(entry)
            continue
        prefix = _glob_prefix(os.path.expanduser(checkpoint))
        for st in uris.glob_stats(checkpoint):
            match = st.uri
            current = (st.size, st.mtime_ns)
            previous = seen.get(match)
            seen[match] = current
            young = st.mtime_ns >= 0 and now - st.mtime_ns / 1e9 < settle
            if young or (previous is not None and previous != current):
                waiting.append(uris.redact(match))
                continue
            suffix = _id_from_path(match, prefix)
            model_id = f"{entry.id}-{suffix}" if entry.id else suffix
            models.append(entry.model_copy(update={"id": model_id, "checkpoint": match}))
    if not models:
        return None, waiting
    return config.model_copy(update={"models": models}), waiting


def _manifest_state(config: RunConfig) -> dict[tuple[str, str, str], tuple]:
    from zoorank.store import Store

    manifest = Store(config.store).read_manifest()
    cols = [c for c in ("fingerprint", "status", "rows", "seconds") if c in manifest.columns]
    return {(r["dataset"], r["view"], r["model_id"]): tuple(r[c] for c in cols)
            for r in manifest.to_dict("records")}


def read_leaderboard(config: RunConfig):
    """The store's leaderboard frame sorted by rank (empty when there is none)."""
    import pandas as pd

    from zoorank.leaderboard import read_leaderboard as read_board
    from zoorank.store import Store

    board, _ = read_board(Store(config.store))
    if board is None or board.empty:
        return pd.DataFrame(columns=["model_id", "rank"])
    return board.sort_values("rank", kind="stable")


def watch(
    config: RunConfig,
    address: str | None = None,
    *,
    interval: float = 60.0,
    until: str | None = None,
    settle: float = 30.0,
    top: int = 5,
    out=print,
    stop: threading.Event | None = None,
) -> WatchSummary:
    """``zoorank run CONFIG --watch``: rank a sweep while its checkpoints arrive.

    Every ``interval`` seconds the config's checkpoint globs are listed again (local or object
    storage); when the settled set of models (:func:`settled_config`) changed, one round of
    :func:`run_all` embeds and scores only what is new (fingerprints), recomputes the pool and
    ensemble scores and rewrites leaderboard and report, and a line says what changed (new models,
    the new top set). Stops after ``until`` (:func:`parse_until`) or on Ctrl-C / SIGTERM: the
    first one between rounds ends the watch; one while a round's tasks run (or a second one)
    interrupts the round, whose finished work stays in the store. Either way the closing line is
    printed and ``summary.signum`` names the signal.
    """
    import signal

    from zoorank.errors import NothingRankedError

    stop = stop or threading.Event()
    deadline, count = parse_until(until)
    summary = WatchSummary()
    restore = _stop_on_signals(stop, summary)
    seen: dict[str, tuple[int, int]] = {}
    previous_models: list[str] | None = None
    previous_top: list[str] = []
    waiting_shown: tuple[str, ...] = ()
    try:
        while True:
            detected = time.time()
            round_config, waiting = settled_config(config, seen, settle, detected)
            if tuple(waiting) != waiting_shown and waiting:
                out(f"watch: {len(waiting)} checkpoint(s) still being written: "
                    + ", ".join(waiting[:5]) + (" ..." if len(waiting) > 5 else ""))
            waiting_shown = tuple(waiting)
            models = [] if round_config is None else _model_ids(round_config)
            if round_config is not None and models != previous_models:
                before = _manifest_state(round_config)
                try:
                    run_all(round_config, address=address)
                except NothingRankedError as err:
                    out(f"watch: {err}")
                after = _manifest_state(round_config)
                embedded = sorted({k[2] for k, v in after.items() if before.get(k) != v})
                board = read_leaderboard(round_config)
                new_top = board["model_id"].head(top).tolist()
                new = sorted(set(models) - set(previous_models or []))
                summary.rounds.append(WatchRound(len(summary.rounds) + 1, models, new,
                                                 embedded, new_top,
                                                 time.time() - detected, detected))
                out(_describe_round(summary.rounds[-1], previous_top, len(board)))
                previous_models, previous_top = models, new_top
                if count is not None and len(board) >= count:
                    summary.stopped_by = "until"
                    break
            if stop.is_set():
                summary.stopped_by = "signal"
                break
            if deadline is not None and time.time() >= deadline:
                summary.stopped_by = "until"
                break
            wait = interval if deadline is None else max(0.0, min(interval,
                                                                   deadline - time.time()))
            if stop.wait(wait):
                summary.stopped_by = "signal"
                break
    except KeyboardInterrupt:
        summary.stopped_by, summary.signum = "signal", summary.signum or signal.SIGINT
    except SystemExit as exc:  # SIGTERM while a round's tasks ran (zoorank.runner)
        if exc.code != 128 + signal.SIGTERM:
            raise
        summary.stopped_by, summary.signum = "signal", signal.SIGTERM
    finally:
        restore()
    out(f"watch: stopped ({summary.stopped_by}) after {len(summary.rounds)} round(s); "
        f"{len(previous_models or [])} model(s) ranked")
    return summary


def _model_ids(config: RunConfig) -> list[str]:
    from zoorank.zoo import resolve_models

    return sorted(m.model_id for m in resolve_models(config))


def _describe_round(r: WatchRound, previous_top: list[str], ranked: int) -> str:
    shown = ", ".join(r.new[:8]) + (" ..." if len(r.new) > 8 else "")
    line = f"watch: round {r.index} ({r.seconds:.1f} s): {ranked} ranked"
    line += f", +{len(r.new)} new ({shown})" if r.new else ", no new model"
    line += f", {len(r.embedded)} embedded"
    if r.top != previous_top:
        line += f"; top {len(r.top)}: {', '.join(r.top)}"
        if previous_top:
            line += f" (was {', '.join(previous_top)})"
    else:
        line += "; top set unchanged"
    return line


def _stop_on_signals(stop: threading.Event, summary: WatchSummary):
    """SIGINT/SIGTERM set ``stop`` (and ``summary.signum``); a second one raises
    KeyboardInterrupt. Returns the restorer."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum, frame):
        summary.signum = summary.signum or signum
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    for s in previous:
        signal.signal(s, handler)

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore
