"""What a finished run concluded (:class:`Result`), and each ranked model as an object to load
and ship (:class:`RankedModel`): read from the store by :func:`zoorank.open` and
:func:`zoorank.run` (:mod:`zoorank.api`)."""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from torch import nn

    from zoorank.config import RunConfig
    from zoorank.store import Store

__all__ = ["RankedModel", "Result"]


@dataclass(frozen=True, eq=False)
class RankedModel:
    """One model of a finished run: its id, checkpoint and metric values, and its network.

    Attributes
    ----------
    model_id : str
        The model's id (the leaderboard's ``model_id``).
    checkpoint : str or None
        The checkpoint file it was loaded from (credentials removed); None for a model without
        one (hub weights, a seeded initialisation) or when the store does not say.
    rank : float or None
        Its leaderboard rank (1 = best); None when it has no value of the ordering metric.
    metrics : dict
        Its label-free metric values, ``{"<dataset>/<metric>": value}``, as the run ranked them.

    ``str(model)`` is the model id. :meth:`load` and :meth:`export` need the run's config (a
    Result opened from a config, or from a store whose ``decision.json`` names its config file).
    """

    model_id: str
    checkpoint: str | None
    rank: float | None
    metrics: dict[str, float]
    _result: Result = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self.model_id

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RankedModel):
            return (self.model_id, self._result.store) == (other.model_id, other._result.store)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.model_id, self._result.store))

    def load(self, device: str = "cpu") -> nn.Module:
        """The network as EMBED ran it, with its weights: eval mode, on ``device``.

        Returns
        -------
        torch.nn.Module
            Normalized ``(B, 3, H, W)`` (the model's preprocessing, :mod:`zoorank.export`) →
            float32 ``(B, dim)``: the embedding the store holds. ``.model`` is the bare network.

        Raises
        ------
        zoorank.InputError
            The run's config is unknown, the model is no longer in it, its weights changed since
            the run, or its checkpoint does not load.
        """
        from zoorank.export import load_ranked

        return load_ranked(self._resolved(), device=device)

    def export(self, out: str | os.PathLike) -> dict[str, str]:
        """Write the bare network's weights to ``OUT/model.safetensors`` (prefix stripped, loads
        strictly into the architecture) and ``OUT/zoorank-model.json`` (architecture,
        preprocessing, config and checkpoint digests, the decision). Returns both paths."""
        from zoorank.export import export_model, load_ranked

        resolved = self._resolved()
        return export_model(load_ranked(resolved), resolved, out,
                            config=self._result._config_or_raise(), decision=self._decision())

    def _resolved(self) -> Any:
        from zoorank.export import resolve_ranked

        return resolve_ranked(self._result._config_or_raise(), self.model_id,
                              self._result._opened())

    def _decision(self) -> dict[str, Any]:
        result = self._result
        picked = result.decision.get("pick") or {}
        return {"picked": result.pick is not None and result.pick.model_id == self.model_id,
                "shortlisted": self.model_id in {m.model_id for m in result.shortlist},
                "rank": self.rank, "metrics": self.metrics, "store": result.store,
                "pick": picked or None}


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
    pick : RankedModel or None
        The model to take (``decision.json``'s ``pick``): the leaderboard's first model
        without a health flag, with its checkpoint, metric values, ``load()`` and ``export()``.
        None when nothing could be ranked.
    shortlist : list of RankedModel
        The models to read first, best first: the shortlist rule's models
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
    >>> net = result.pick.load()                 # the picked network, as EMBED ran it
    >>> result.pick.export("./shipped")          # model.safetensors + zoorank-model.json
    """

    store: str
    leaderboard: pd.DataFrame
    pick: RankedModel | None
    shortlist: list[RankedModel]
    warnings: list[str]
    report_path: str | None
    decision: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    _store: Store | None = field(default=None, repr=False)
    _config: RunConfig | None = field(default=None, repr=False)
    #: (configured, failed) model counts: ``decision.json``'s when it has them, else the models
    #: the store knows of (leaderboard, manifest, failed table)
    counts: tuple[int, int] = (0, 0)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def model(self, model_id: str) -> RankedModel:
        """Any model of the leaderboard as a :class:`RankedModel` (InputError when absent)."""
        board = self.leaderboard
        rows = board[board["model_id"].astype(str) == str(model_id)]
        if rows.empty:
            from zoorank.errors import InputError

            raise InputError(f"{model_id!r} is not on the leaderboard of {self.store}")
        row = rows.iloc[0]
        checkpoint = row.get("checkpoint") if "checkpoint" in board else None
        picked = self.decision.get("pick") or {}
        if not _present(checkpoint) and picked.get("model_id") == str(model_id):
            checkpoint = picked.get("checkpoint")
        if not _present(checkpoint) and "checkpoint" not in board:
            checkpoint = self._checkpoints().get(str(model_id))
        rank = row.get("rank") if "rank" in board else None
        metrics = {f"{r.dataset}/{r.metric}": float(r.value) for r in self.metrics().itertuples()
                   if r.model_id == str(model_id)}
        return RankedModel(str(model_id), str(checkpoint) if _present(checkpoint) else None,
                           float(rank) if _present(rank) else None, metrics, self)

    def export(self, out: str | os.PathLike, model_id: str | None = None) -> dict[str, str]:
        """:meth:`RankedModel.export` of the pick (or of ``model_id``)."""
        from zoorank.errors import NothingRankedError

        if model_id is None and self.pick is None:
            raise NothingRankedError(f"{self.store}: nothing was ranked, there is no pick to export")
        return (self.pick if model_id is None else self.model(model_id)).export(out)

    def _checkpoints(self) -> dict[str, str | None]:
        """model_id → checkpoint (redacted) of the run's config, resolved once (the store's digest
        cache makes it cheap); empty when the config is unknown or no longer resolves."""
        if "checkpoints" not in self._cache:
            from zoorank.errors import ZoorankError
            from zoorank.store.uris import redact
            from zoorank.zoo import resolve_models

            found: dict[str, str | None] = {}
            if self._config is not None:
                try:
                    found = {m.model_id: redact(m.spec.checkpoint) if m.spec.checkpoint else None
                             for m in resolve_models(self._config)}
                except (ZoorankError, OSError):
                    found = {}
            self._cache["checkpoints"] = found
        return self._cache["checkpoints"]

    def _config_or_raise(self) -> RunConfig:
        if self._config is not None:
            return self._config
        from zoorank.errors import InputError

        raise InputError(f"{self.store}: the run's config is not known here (its decision.json "
                         "names no config file that exists): open the run by its config, "
                         "zoorank.open(\"cfg.yaml\"), to load or export a model")

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
        return str(self.pick)

    def _counted(self) -> str:
        """``3 of 4 configured models ranked, 1 failed``."""
        configured, failed = self.counts
        configured = max(configured, len(self.leaderboard))
        text = f"{self._ranked()} of {configured} configured models ranked"
        return text + (f", {failed} failed" if failed else "")

    def _decision_rows(self) -> list[tuple[str, str]]:
        """(name, text) of decision.json's one-line answers: the metrics' agreement on the pick,
        the next step."""
        rows = []
        if self.decision.get("disagreement"):
            rows.append(("agreement", str(self.decision["disagreement"])))
        step = self.decision.get("next_step") or {}
        if step.get("command"):
            rows.append(("next step", str(step["command"])))
        elif step:
            rows.append(("next step", f"none ({step.get('short') or 'nothing to ask'})"))
        return rows

    def __repr__(self) -> str:
        lines = [f"zoorank.Result: {self.store} ({self._counted()})",
                 f"  pick:      {self._pick_text()}",
                 f"  shortlist: {', '.join(map(str, self.shortlist)) or 'none'}",
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
                ("shortlist", esc(", ".join(map(str, self.shortlist)) or "none")),
                *[(name, esc(text)) for name, text in self._decision_rows()],
                ("models", esc(self._counted())),
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


def _present(value: Any) -> bool:
    """Not None, NaN or an empty string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value) not in ("", "nan", "<NA>", "None")
