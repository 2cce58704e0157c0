"""The Python API: run a config, or open a finished run, and get its verdict as a :class:`Result`.

::

    import zoorank

    result = zoorank.run("cfg.yaml", store="./store", rank={"confidence": 0.9})
    result.pick, result.shortlist        # the model to take, and the ones to read first
    result.pick.checkpoint, result.pick.load()   # its file, and its network with the weights
    result.export("./shipped")           # the pick as safetensors + a JSON of its provenance
    result.leaderboard.head()            # a pandas DataFrame, one row per model
    zoorank.open("./store").pick         # the same verdict, read back without running anything

:func:`run` does what ``zoorank run CONFIG`` does (embed → score → rank → report, each stage
skipping the work its store already holds) and reads the result back; :func:`open` only reads.
Both read the store's tables through :class:`~zoorank.store.Store`, so a store on S3 or GCS
works the same way as a local directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from zoorank.result import RankedModel, Result

if TYPE_CHECKING:
    import pandas as pd

    from zoorank.config import RunConfig
    from zoorank.store import Store

__all__ = ["RankedModel", "Result", "run", "open", "validate"]

#: a config as :func:`run` and :func:`open` take it: a YAML file, a mapping of its keys, or a
#: validated :class:`~zoorank.config.RunConfig`.
ConfigLike = Union[str, os.PathLike, Mapping, "RunConfig"]

#: config files are told from stores by their suffix (a store is a directory or a URI prefix).
CONFIG_SUFFIXES = (".yaml", ".yml")


def run(config: ConfigLike, *, address: str | None = None, **overrides: Any) -> Result:
    """Run the whole pipeline on a config (embed → score → rank → report) and return its result.

    The same as ``zoorank run CONFIG``: each stage skips the work the store already holds (by
    fingerprint), so running a config again only computes what changed.

    Parameters
    ----------
    config : str, os.PathLike, Mapping or RunConfig
        A YAML config file, a mapping of its keys, or a validated
        :class:`~zoorank.config.RunConfig`. A file's relative paths are read as
        ``zoorank run`` reads them; a mapping's are taken from the working directory.
    address : str, optional
        The Ray cluster to join (``auto``, ``ray://host:10001``); default: a local Ray started
        on demand (or the one ``RAY_ADDRESS`` names).
    **overrides
        Config keys that replace the config's, validated like the YAML: ``store="./other"``,
        ``seed=1``; a mapping merges into its section (``rank={"confidence": 0.9}`` keeps the
        other ``rank:`` keys), any other value (a list, a number) replaces the key's value.

    Returns
    -------
    Result
        The leaderboard, the pick, the shortlist, the warnings, the report's path and
        ``decision.json``, read back from the store the run wrote.

    Raises
    ------
    zoorank.errors.ConfigError
        The config (or an override) is invalid; the message names the file and field.
    zoorank.errors.InputError
        An input (a checkpoint, a dataset file, the store) cannot be read.
    zoorank.errors.NothingRankedError
        Every model failed or has no value of the ordering metric. The report is written and
        lists the failures (``zoorank.open`` reads the store).

    Examples
    --------
    >>> result = zoorank.run("cfg.yaml", store="./store-a")
    >>> result.pick
    'resnet18-lr0.3-s0'
    """
    from zoorank import pipeline
    from zoorank.catalog.context import RunContext
    from zoorank.decide.next_step import config_path

    cfg = _as_config(config, overrides)
    context = RunContext(cfg, address=address)
    # the next step's command names the file as given (a mapping or RunConfig has no path)
    path = os.fspath(config) if isinstance(config, (str, os.PathLike)) else None
    with config_path(path):
        pipeline.run_all(cfg, context=context)
    return _read(context.store, cfg)


def open(store_or_config: str | os.PathLike | Mapping | RunConfig) -> Result:  # noqa: A001
    """Read a finished run, without running anything.

    Parameters
    ----------
    store_or_config : str, os.PathLike, Mapping or RunConfig
        A store (a directory, or a URI such as ``s3://bucket/prefix``), or a config whose store
        is read: a YAML file (``*.yaml`` / ``*.yml``), a mapping of its keys or a
        :class:`~zoorank.config.RunConfig`.

    Returns
    -------
    Result
        What the last RANK of that store concluded.

    Raises
    ------
    zoorank.errors.InputError
        The store holds no finished run (no leaderboard yet), or the path (or a config's store)
        does not exist. Nothing is created: a config that never ran is an error, not an empty
        store.
    zoorank.errors.ConfigError
        A config given is invalid.

    Examples
    --------
    >>> zoorank.open("./zoorank-store").shortlist
    >>> zoorank.open("cfg.yaml").leaderboard.head()
    """
    from zoorank.errors import InputError
    from zoorank.store import Store
    from zoorank.store.uris import is_uri

    target = store_or_config
    if isinstance(target, (str, os.PathLike)) and not _is_config_file(target):
        text = os.fspath(target)
        if not is_uri(text) and not Path(text).expanduser().is_dir():
            # a Store would create the directory: say what is missing instead
            raise InputError(f"{text}: no such store (a directory or URI written by "
                             "`zoorank run`) or config file (*.yaml)")
        return _read(Store(text))
    config = _as_config(target, {})
    if not is_uri(config.store) and not Path(config.store).expanduser().is_dir():
        name = os.fspath(target) if isinstance(target, (str, os.PathLike)) else "the config"
        raise InputError(f"{name}: its store {config.store} does not exist: this config has not "
                         "run yet (`zoorank run CONFIG` first)")
    return _read(Store(config.store), config)


def validate(config: ConfigLike, **overrides: Any) -> RunConfig:
    """The validated config that :func:`run` would run, without running anything.

    Parameters
    ----------
    config : str, os.PathLike, Mapping or RunConfig
        A YAML config file, a mapping of its keys, or a :class:`~zoorank.config.RunConfig`.
    **overrides
        Config keys, as :func:`run` takes them.

    Returns
    -------
    RunConfig
        The config with the overrides applied; every field has its default filled in.

    Raises
    ------
    zoorank.errors.ConfigError
        The config or an override is invalid; the message names the file and field.

    Examples
    --------
    >>> zoorank.api.validate("cfg.yaml", rank={"confidence": 0.9}).rank.confidence
    0.9
    """
    return _as_config(config, overrides)


# -- helpers ---------------------------------------------------------------------------------------
def _is_config_file(target: str | os.PathLike) -> bool:
    text = os.fspath(target)
    return text.lower().endswith(CONFIG_SUFFIXES) or Path(text).expanduser().is_file()


def _merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides``: a mapping merges into a mapping (recursively), anything
    else replaces the value."""
    from pydantic import BaseModel

    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, BaseModel):
            value = value.model_dump(exclude_unset=True)
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _as_config(config: ConfigLike, overrides: Mapping[str, Any]) -> RunConfig:
    """The validated config of a file, a mapping or a RunConfig, with ``overrides`` applied and
    validated like the YAML (errors name the file and field)."""
    from zoorank.config import RunConfig
    from zoorank.config.loading import load_config, parse_config

    if isinstance(config, RunConfig):
        base, source = config, "<config>"
    elif isinstance(config, Mapping):
        if not overrides:
            return parse_config(dict(config))
        return parse_config(_merged(config, overrides))
    elif isinstance(config, (str, os.PathLike)):
        # the file is read as the CLI reads it (its relative paths resolved the same way), and
        # the overrides go onto what it holds
        base, source = load_config(config), os.fspath(config)
    else:
        raise TypeError(f"a config is a YAML path, a mapping or a RunConfig, "
                        f"not {type(config).__name__}")
    if not overrides:
        return base
    return parse_config(_merged(base.model_dump(exclude_unset=True), overrides), source)


def _read(store: Store, config: RunConfig | None = None) -> Result:
    """The :class:`Result` of the last RANK of ``store``; ``config`` (else the config file its
    decision.json names, when it exists) lets its models load."""
    from zoorank.decide.leaderboard import read_rank_outputs
    from zoorank.decide.verdict import read_decision
    from zoorank.errors import InputError
    from zoorank.store.layout import FAILED, REPORT_DIR

    board, settings, tables = read_rank_outputs(store)
    if board is None:
        raise InputError(f"{store.name}: no finished run here (no leaderboard table yet): "
                         "run `zoorank run CONFIG` first")
    decision = read_decision(store) or {}
    pick, shortlist = _verdict(board, settings, decision)
    report = store.path(REPORT_DIR, "index.html")
    if not store.exists(REPORT_DIR, "index.html"):
        report = None
    elif not store.is_local:  # the URI a user can open (scheme kept, credentials removed)
        from zoorank.store.uris import join, redact

        report = redact(join(store.uri, report))
    result = Result(store=store.root if store.is_local else store.name, leaderboard=board,
                    pick=None, shortlist=[],
                    warnings=_warnings(board, settings, decision, tables[FAILED]),
                    report_path=report, decision=decision, settings=settings, _store=store,
                    _config=config or _named_config(decision),
                    counts=_counts(store, board, tables[FAILED], decision))
    # the models refer back to their result (its config and store): set once it exists
    object.__setattr__(result, "pick", result.model(pick) if pick is not None else None)
    object.__setattr__(result, "shortlist", [result.model(m) for m in shortlist
                                             if (board["model_id"].astype(str) == m).any()])
    return result


def _named_config(decision: Mapping[str, Any]) -> RunConfig | None:
    """The config decision.json's next step names, when that file exists and validates."""
    from zoorank.errors import ConfigError

    path = (decision.get("next_step") or {}).get("config")
    if not path or not Path(str(path)).expanduser().is_file():
        return None
    try:
        return _as_config(str(path), {})
    except ConfigError:
        return None


def _counts(store: Store, board: pd.DataFrame, failed: pd.DataFrame,
            decision: Mapping[str, Any]) -> tuple[int, int]:
    """(configured, failed) models: decision.json's ``counts`` when present, else every model id
    the store knows (leaderboard, manifest, failed table) and the failed ones without a rank."""
    counts = decision.get("counts") or {}
    if isinstance(counts, Mapping) and "configured" in counts:
        return int(counts["configured"]), int(counts.get("failed") or 0)
    from zoorank.store.layout import MANIFEST

    ranked = set(board.loc[board["rank"].notna(), "model_id"].astype(str)) if "rank" in board \
        else set()
    listed = set(board["model_id"].astype(str)) | set(failed["model_id"].astype(str))
    if store.table_exists(MANIFEST):
        listed |= set(store.read_manifest()["model_id"].astype(str))
    return len(listed), len(set(failed["model_id"].astype(str)) - ranked)


def _verdict(board: pd.DataFrame, settings: Mapping[str, Any],
             decision: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """(pick, shortlist): ``decision.json``'s when the store has one, else derived from the
    leaderboard the same way (its first ranked model; the shortlist rule on the board)."""
    from zoorank.decide.shortlist import shortlist_for

    ranked = board[board["rank"].notna()] if "rank" in board else board.iloc[:0]
    if decision:  # null pick when nothing could be ranked
        pick = (decision.get("pick") or {}).get("model_id")
        listed = (decision.get("shortlist") or {}).get("models")
    else:
        pick, listed = _first_unflagged(ranked), None
    if listed is None:
        listed = shortlist_for(board, settings)["models"] if len(ranked) else []
    return (str(pick) if pick is not None else None), [str(m) for m in listed]


def _first_unflagged(ranked: pd.DataFrame) -> str | None:
    """The decision's pick (:func:`zoorank.decide.verdict.pick_row`): the first ranked model
    without a health flag; when every one has a flag, the first without a blocking flag, then the
    first. Cost O(n log n)."""
    from zoorank.decide.verdict import pick_row

    row, _ = pick_row(ranked)
    return None if row is None else str(row["model_id"])


def _warnings(board: pd.DataFrame, settings: Mapping[str, Any], decision: Mapping[str, Any],
              failed: pd.DataFrame) -> list[str]:
    """The sentences to read before trusting the pick, each once: ``decision.json``'s caveats
    (else the same checks from the leaderboard's settings: health flags, metrics that disagree,
    the width confound, other confounds), then the failed and unranked models."""
    if decision:
        out = [str(c) for c in decision.get("caveats") or []]
    else:
        detail = settings.get("decision") or {}
        out = []
        flagged = list(detail.get("flagged") or [])
        if flagged:
            out.append(f"health flags on {len(flagged)} model(s): " + ", ".join(flagged[:6])
                       + (" ..." if len(flagged) > 6 else "") + " (the leaderboard's flags column)")
        if detail.get("metrics_agree") is False and detail.get("consensus_sentence"):
            out.append(str(detail["consensus_sentence"]))
        if detail.get("width_warning"):
            out.append(str(detail["width_warning"]))
        out += [str(c["sentence"]) for c in detail.get("confounds") or [] if c.get("sentence")]
    if len(failed):
        models = list(dict.fromkeys(str(m) for m in failed["model_id"]))
        out.append(f"{len(failed)} failed or missing (model, dataset) entries, of "
                   f"{len(models)} model(s): " + ", ".join(models[:6])
                   + (" ..." if len(models) > 6 else "") + " (.table('failed') has the reasons)")
    ranked = int(board["rank"].notna().sum()) if "rank" in board else 0
    if ranked < len(board):
        out.append(f"{len(board) - ranked} of {len(board)} models have no rank "
                   "(no value of the ordering metric)")
    return list(dict.fromkeys(out))

