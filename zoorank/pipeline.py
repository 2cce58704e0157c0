"""Stage runners the CLI and the Ray-job entry points call: each stage is one function."""

from __future__ import annotations

from contextlib import contextmanager

from zoorank.config import RunConfig


@contextmanager
def _writing(config: RunConfig, command: str):
    """Hold the store's lease (one writer at a time; zoorank.lease) for a stage."""
    from zoorank.lease import store_lease
    from zoorank.store import Store

    with store_lease(Store(config.store), command):
        yield


def run_embed(config: RunConfig, address: str | None = None):
    from zoorank.embed import run_embed as _run

    with _writing(config, "embed"):
        return _run(config, address=address)


def run_score(config: RunConfig, address: str | None = None):
    from zoorank.score import run_score as _run

    with _writing(config, "score"):
        return _run(config, address=address)


def run_rank(config: RunConfig, address: str | None = None, show: bool = True,
             check: bool = True):
    """RANK; raises NothingRankedError (exit 3) when no model could be ranked (``check``)."""
    from zoorank.rank import check_ranked
    from zoorank.rank import run_rank as _run

    with _writing(config, "rank"):
        board = _run(config, address=address, show=show)
    if check:
        check_ranked(board)
    return board


def run_report(config: RunConfig, address: str | None = None, check: bool = True):
    """REPORT; the page is written even when nothing could be ranked, then (``check``)
    NothingRankedError (exit 3) is raised, as ``zoorank run`` does."""
    from zoorank.rank import LEADERBOARD, check_ranked
    from zoorank.report import run_report as _run
    from zoorank.store import Store

    with _writing(config, "report"):
        out = _run(config)
    if check:
        check_ranked(Store(config.store).read_frame(f"{LEADERBOARD}.parquet"))
    return out


def run_all(config: RunConfig, address: str | None = None):
    """embed → score → rank → report; each stage skips work already done (fingerprints).

    The report is written even when nothing could be ranked (it lists the failures); then
    NothingRankedError (exit 3) is raised.
    """
    from zoorank.rank import check_ranked

    with _writing(config, "run"):
        run_embed(config, address=address)
        run_score(config, address=address)
        board = run_rank(config, address=address, show=False, check=False)  # the report prints
        out = run_report(config, check=False)
    check_ranked(board)
    return out


def run_gc(config: RunConfig, address: str | None = None, dry_run: bool = False):
    """Delete what the config no longer describes (stale rows, orphaned shards); see zoorank.gc."""
    from zoorank.gc import run_gc as _run

    with _writing(config, "gc"):
        return _run(config, dry_run=dry_run)
