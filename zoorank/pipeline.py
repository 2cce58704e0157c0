"""Stage runners the CLI and the Ray-job entry points call: each stage is one function."""

from __future__ import annotations

from zoorank.config import RunConfig


def run_embed(config: RunConfig, address: str | None = None):
    from zoorank.embed import run_embed as _run

    return _run(config, address=address)


def run_score(config: RunConfig, address: str | None = None):
    from zoorank.score import run_score as _run

    return _run(config, address=address)


def run_rank(config: RunConfig, address: str | None = None, show: bool = True):
    from zoorank.rank import run_rank as _run

    return _run(config, address=address, show=show)


def run_report(config: RunConfig, address: str | None = None):
    from zoorank.report import run_report as _run

    return _run(config)


def run_all(config: RunConfig, address: str | None = None):
    """embed → score → rank → report; each stage skips work already done (fingerprints)."""
    run_embed(config, address=address)
    run_score(config, address=address)
    run_rank(config, address=address, show=False)  # the report prints the leaderboard
    return run_report(config)
