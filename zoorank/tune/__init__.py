"""Label-free hyperparameter search: reference SSL trainers, the probe-set objective, Ray Tune.

Python API: ``run_search(load_tune_config(path))`` → the ``tune_results`` frame; the CLI's
``zoorank tune CONFIG`` is :func:`zoorank.tune.search.run_tune`.
"""

from zoorank.tune.config import TrialParams, TuneConfig, load_tune_config, parse_tune_config


def run_search(*args, **kwargs):
    """See :func:`zoorank.tune.search.run_search` (imported on first use: it pulls in Ray)."""
    from zoorank.tune.search import run_search as _run

    return _run(*args, **kwargs)


__all__ = ["TrialParams", "TuneConfig", "load_tune_config", "parse_tune_config", "run_search"]
