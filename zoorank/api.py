"""The Python API: run a config, or open a finished run, and get its verdict as a :class:`Result`.

::

    import zoorank

    result = zoorank.run("cfg.yaml", store="./store", rank={"confidence": 0.9})
    result.pick, result.shortlist        # the model to take, and the ones to read first
    result.leaderboard.head()            # a pandas DataFrame, one row per model
    zoorank.open("./store").pick         # the same verdict, read back without running anything

:func:`run` does what ``zoorank run CONFIG`` does (embed → score → rank → report, each stage
skipping the work its store already holds) and reads the result back; :func:`open` only reads.
Both read the store's tables through :class:`~zoorank.store.Store`, so a store on S3 or GCS
works the same way as a local directory.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import pandas as pd

    from zoorank.config import RunConfig
    from zoorank.store import Store

__all__ = ["Result", "run", "open", "validate"]

#: a config as :func:`run` and :func:`open` take it: a YAML file, a mapping of its keys, or a
#: validated :class:`~zoorank.config.RunConfig`.
ConfigLike = Union[str, os.PathLike, Mapping, "RunConfig"]

#: config files are told from stores by their suffix (a store is a directory or a URI prefix).
CONFIG_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, eq=False, repr=False)
class Result:
    """What a finished run concluded, read from its store.

    Attributes
    ----------
    store : str
        The store: its absolute path, or its URI with any credentials removed.
    leaderboard : pandas.DataFrame
        The leaderboard, one row per model, best first (``rank`` 1 = best): the same table as
        ``<store>/leaderboard.csv``, with every metric per dataset (``<dataset>/<metric>``
        columns), the rank interval (``rank_low``, ``rank_high``), ``p_best``, ``in_top_set`` and
        the health ``flags``.
    pick : str or None
        The model id to take (``decision.json``'s ``pick``): the leaderboard's first model
        without a health flag. None when nothing could be ranked.
    shortlist : list of str
        The model ids to read first, best first: the shortlist rule's models
        (``decision.json``'s ``shortlist``).
    warnings : list of str
        What to check before trusting the pick, one sentence each: the decision's caveats
        (health flags, metrics that disagree, confounds such as the embedding width), then the
        failed models.
    report_path : str or None
        The HTML report (``<store>/report/index.html``), None when it was not written.
    decision : dict
        ``<store>/decision.json`` as a dict: the pick, the shortlist and its measured record,
        the expected regret, the next step, the top set, the few-label picks and the caveats
        (its keys: the decision.json reference page). Empty for a store ranked before it was
        written.
    settings : dict
        The settings the leaderboard was built with (the metric that orders it per dataset,
        the aggregation, the top set's details).

    Examples
    --------
    >>> result = zoorank.open("./zoorank-store")
    >>> result.leaderboard[["rank", "model_id", "p_best"]].head()
    >>> result.table("metrics").query("metric == 'rankme'")
    """

    store: str
    leaderboard: pd.DataFrame
    pick: str | None
    shortlist: list[str]
    warnings: list[str]
    report_path: str | None
    decision: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    _store: Store | None = field(default=None, repr=False)

    @property
    def headline(self) -> pd.DataFrame:
        """The leaderboard's headline columns (rank and its interval, top set, model, flags, the
        ordering metric per dataset, the oracle when there is one), as the report shows them."""
        from zoorank.decide.leaderboard import leaderboard_headline

        return leaderboard_headline(self.leaderboard, self.settings)

    def metrics(self, label_free: bool = True) -> pd.DataFrame:
        """The leaderboard's metric values as a long table: ``model_id, dataset, metric, value``.

        Parameters
        ----------
        label_free : bool, default True
            Only the label-free metrics; False adds every other ``<dataset>/<metric>`` column (the
            label oracle's accuracies, few-label scores).

        Returns
        -------
        pandas.DataFrame
            One row per (model, dataset, metric) the leaderboard holds, in the leaderboard's
            order of models. These are exactly the values the run ranked with; the store's
            ``metrics`` table (:meth:`table`) also keeps rows of earlier settings.
        """
        import pandas as pd

        from zoorank.metrics import registry

        datasets = {c.split("/", 1)[1] for c in self.leaderboard.columns
                    if c.startswith("rank/")} | set(self.settings.get("primary_metric") or {})
        # <dataset>/<metric> only: <dataset>/<metric>/rank and rank/<dataset> are ranks
        cols = [c for c in self.leaderboard.columns
                if c.count("/") == 1 and c.split("/")[0] in datasets
                and (not label_free or registry.is_label_free(c.split("/")[1]))]
        if not cols:
            return pd.DataFrame(columns=["model_id", "dataset", "metric", "value"])
        long = self.leaderboard.melt(id_vars=["model_id"], value_vars=cols, var_name="column",
                                     value_name="value")
        split = long["column"].str.split("/", n=1, expand=True)
        long.insert(1, "dataset", split[0])
        long.insert(2, "metric", split[1])
        return long.drop(columns="column").reset_index(drop=True)

    def table(self, name: str) -> pd.DataFrame:
        """One of the store's Delta tables as a DataFrame (its latest committed snapshot).

        Parameters
        ----------
        name : str
            The table's path in the store: ``metrics``, ``oracle``, ``manifest``, ``failed``,
            ``agreement``, ``health``, ``uncertainty``, ``resamples``, ``labels``,
            ``leaderboard`` or ``datasets/<dataset>/samples``.

        Returns
        -------
        pandas.DataFrame
            The table; empty when the store has no such table.

        Notes
        -----
        The same table reads with ``deltalake.DeltaTable(uri).to_pandas()``, Polars
        (``pl.read_delta``) or DuckDB (over ``DeltaTable(uri).to_pyarrow_dataset()``). The
        ``metrics`` and ``oracle`` tables keep the rows of earlier settings beside the current
        ones (their ``fingerprint`` tells them apart): :meth:`metrics` holds only the values the
        leaderboard was built from.
        """
        return self._opened().read_frame(name)

    def _opened(self) -> Store:
        if self._store is not None:
            return self._store
        from zoorank.store import Store

        return Store(self.store)

    # -- display -----------------------------------------------------------------------------
    def _ranked(self) -> int:
        board = self.leaderboard
        return int(board["rank"].notna().sum()) if "rank" in board else 0

    def _pick_text(self) -> str:
        if self.pick is None:
            return "none (nothing could be ranked)"
        pick = self.decision.get("pick") or {}
        metric, value = pick.get("metric"), pick.get("value")
        if metric and isinstance(value, (int, float)) and math.isfinite(value):
            return f"{self.pick} ({metric} = {value:.4g}" + (
                f" on {pick['dataset']})" if pick.get("dataset") else ")")
        return self.pick

    def _decision_rows(self) -> list[tuple[str, str]]:
        """(name, text) of decision.json's one-line answers: the metrics' agreement on the pick,
        the next step."""
        rows = []
        if self.decision.get("disagreement"):
            rows.append(("agreement", str(self.decision["disagreement"])))
        step = self.decision.get("next_step") or {}
        if step.get("command"):
            rows.append(("next step", str(step["command"])))
        return rows

    def __repr__(self) -> str:
        lines = [f"zoorank.Result: {self.store} ({self._ranked()} of {len(self.leaderboard)} "
                 "models ranked)",
                 f"  pick:      {self._pick_text()}",
                 f"  shortlist: {', '.join(self.shortlist) or 'none'}",
                 *[f"  {name + ':':<10} {text}" for name, text in self._decision_rows()],
                 f"  warnings:  {len(self.warnings)}" + (" (.warnings)" if self.warnings else ""),
                 f"  report:    {self.report_path or 'not written'}"]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        report = esc(self.report_path or "not written")
        if self.report_path and "://" not in self.report_path:
            report = f'<a href="{esc(Path(self.report_path).as_uri())}">{report}</a>'
        rows = [("store", esc(self.store)), ("pick", f"<b>{esc(self._pick_text())}</b>"),
                ("shortlist", esc(", ".join(self.shortlist) or "none")),
                *[(name, esc(text)) for name, text in self._decision_rows()],
                ("models", f"{self._ranked()} of {len(self.leaderboard)} ranked"),
                ("report", report)]
        parts = ["<div><table>"]
        parts += [f'<tr><th style="text-align:left">{k}</th><td style="text-align:left">{v}'
                  "</td></tr>" for k, v in rows]
        parts.append("</table>")
        if self.warnings:
            parts.append("<p>Warnings:</p><ul>"
                         + "".join(f"<li>{esc(w)}</li>" for w in self.warnings) + "</ul>")
        if len(self.leaderboard):
            parts.append(self.headline.head(10).to_html(index=False, na_rep="—",
                                                        float_format=lambda v: f"{v:.4g}"))
            if len(self.leaderboard) > 10:
                parts.append(f"<p>(first 10 of {len(self.leaderboard)}: .leaderboard)</p>")
        parts.append("</div>")
        return "".join(parts)


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

    cfg = _as_config(config, overrides)
    context = RunContext(cfg, address=address)
    pipeline.run_all(cfg, context=context)
    return _read(context.store)


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
        The store holds no finished run (no leaderboard yet), or the path does not exist.
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
    return _read(Store(_as_config(target, {}).store))


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


def _read(store: Store) -> Result:
    """The :class:`Result` of the last RANK of ``store``."""
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
    return Result(store=store.root if store.is_local else store.name, leaderboard=board,
                  pick=pick, shortlist=shortlist,
                  warnings=_warnings(board, settings, decision, tables[FAILED]),
                  report_path=report, decision=decision, settings=settings, _store=store)


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

