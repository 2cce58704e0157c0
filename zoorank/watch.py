"""``zoorank run --watch``: rank a sweep while its checkpoints arrive (:func:`watch`).

Every ``--interval`` the config's checkpoint globs are listed again; once the settled set of
models changed (:func:`settled_config`: sizes unchanged for ``--settle`` seconds), one round of
:func:`zoorank.pipeline.run_all` embeds and scores only what is new (fingerprints) and ranks and
reports again. Stops at ``--until`` (:func:`parse_until`: a time or a model count) or on
SIGINT/SIGTERM. Reads and writes what ``zoorank run`` does; the loop's own state is in memory.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from zoorank.catalog.context import RunContext
from zoorank.config import RunConfig
from zoorank.pipeline import run_all


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
    from zoorank.config import ModelSpec
    from zoorank.store import uris
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


def _manifest_state(config: RunConfig | RunContext) -> dict[tuple[str, str, str], tuple]:
    manifest = RunContext.of(config).store.read_manifest()
    cols = [c for c in ("fingerprint", "status", "rows", "seconds") if c in manifest.columns]
    return {(r["dataset"], r["view"], r["model_id"]): tuple(r[c] for c in cols)
            for r in manifest.to_dict("records")}


def read_leaderboard(config: RunConfig | RunContext):
    """The store's leaderboard frame sorted by rank (empty when there is none)."""
    import pandas as pd

    from zoorank.decide.leaderboard import read_leaderboard as read_board

    board, _ = read_board(RunContext.of(config).store)
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
    context = RunContext(config, address=address)  # the watch's store and Ray, for every round
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
            models = [] if round_config is None else _model_ids(round_config, context)
            if round_config is not None and models != previous_models:
                before = _manifest_state(context)
                try:  # the round's own catalog (its models), on the watch's store and Ray
                    run_all(round_config, context=context.with_config(round_config))
                except NothingRankedError as err:
                    out(f"watch: {err}")
                after = _manifest_state(context)
                embedded = sorted({k[2] for k, v in after.items() if before.get(k) != v})
                board = read_leaderboard(context)
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
    except SystemExit as exc:  # SIGTERM while a round's tasks ran (zoorank.tasks.runner)
        if exc.code != 128 + signal.SIGTERM:
            raise
        summary.stopped_by, summary.signum = "signal", signal.SIGTERM
    finally:
        restore()
    out(f"watch: stopped ({summary.stopped_by}) after {len(summary.rounds)} round(s); "
        f"{len(previous_models or [])} model(s) ranked")
    return summary


def _model_ids(config: RunConfig, context: RunContext) -> list[str]:
    from zoorank.zoo import resolve_models

    return sorted(m.model_id for m in resolve_models(config, store=context.store))


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
