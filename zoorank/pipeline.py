"""Stage runners the CLI and the Ray-job entry points call: each stage is one function.

No lease: every store write is one transactional table commit (:mod:`zoorank.store.tables`), so
several processes may run stages on one store at once and readers see consistent snapshots.
"""

from __future__ import annotations

from zoorank.config import RunConfig


def run_embed(config: RunConfig, address: str | None = None):
    from zoorank.embed import run_embed as _run

    return _run(config, address=address)


def run_score(config: RunConfig, address: str | None = None):
    from zoorank.score import run_score as _run

    return _run(config, address=address)


def run_rank(config: RunConfig, address: str | None = None, show: bool = True,
             check: bool = True):
    """RANK; raises NothingRankedError (exit 3) when no model could be ranked (``check``)."""
    from zoorank.rank import check_ranked
    from zoorank.rank import run_rank as _run

    board = _run(config, address=address, show=show)
    if check:
        check_ranked(board)
    return board


def run_report(config: RunConfig, address: str | None = None):
    from zoorank.report import run_report as _run

    return _run(config)


def run_all(config: RunConfig, address: str | None = None):
    """embed → score → rank → report; each stage skips work already done (fingerprints).

    The report is written even when nothing could be ranked (it lists the failures); then
    NothingRankedError (exit 3) is raised.
    """
    from zoorank.rank import check_ranked

    run_embed(config, address=address)
    run_score(config, address=address)
    board = run_rank(config, address=address, show=False, check=False)  # the report prints
    out = run_report(config)
    check_ranked(board)
    return out


def run_gc(config: RunConfig, address: str | None = None, dry_run: bool = False):
    """Delete what the config no longer describes (stale rows, orphaned shards); see zoorank.gc."""
    from zoorank.gc import run_gc as _run

    return _run(config, dry_run=dry_run)
