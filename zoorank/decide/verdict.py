"""``decision.json``: the verdict a run supports, for people and pipelines.

RANK writes it beside ``leaderboard.csv`` (``<store>/decision.json``, :func:`build_decision`);
REPORT, the console, the Python API (:func:`zoorank.open`) and ``zoorank label`` read it;
``zoorank label`` adds the few-label pick (:func:`update_few_label`). Its schema
(``schema_version`` 1) is documented in ``docs/reference/decision-json.md``; a reader ignores keys
it does not know.

Keys (all written, ``null`` where they do not apply):

* ``schema_version``, ``zoorank_version``, ``created`` (UTC ISO time), ``store`` (redacted name),
  ``leaderboard_fingerprint`` (the metric rows the leaderboard was built from: REPORT checks it)
* ``pick``: ``{model_id, checkpoint, metric, value, dataset, rank, source, name, signal, values}``
  — the leaderboard's first model without a health flag
* ``shortlist``: :func:`zoorank.decide.shortlist.shortlist_for` — the models, the rule and its
  measured record (hits of ``zoos``, ``hit_rate``, ``mean_size``, ``held_out_zoos`` ...)
* ``expected_regret_pp``: ``{median, p90, zoos}`` — the pick's measured regret on held-out zoos
* ``disagreement``: one line on how far the label-free metrics agree
* ``next_step``: ``{command, budget, basis, kind, source, config, ...}`` — ``zoorank ask CONFIG
  --budget N`` with the config's path where the command that ran knows it
  (:mod:`zoorank.decide.next_step`)
* ``top_set``: the Model Confidence Set of the ordering metric (a detail), with its measured level
* ``few_label``: per dataset, the few-label pick after ``zoorank label`` (else ``{}``)
* ``caveats``: sentences, each one caveat

Cost: :func:`build_decision` is O(n log n) in the board's n models (the shortlist's sort; the
rest is one pass), no pair of models.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zoorank.decide.decision_schema import SECTIONS, check
from zoorank.decide.metric_record import summarise
from zoorank.decide.next_step import (
    LABELS_TO_SETTLE,
    current_config,
    labelled_on,
    next_step,
    zoo_kind,
)
from zoorank.decide.run_record import decision_record
from zoorank.decide.shortlist import shortlist_for
from zoorank.stats.health import BLOCKING
from zoorank.stats.uncertainty import (
    MEASURED_COVERAGE,
    MEASURED_SETTINGS,
    measured_coverage,
    p_best_claim,
)
from zoorank.store import Store
from zoorank.store.redact import redact

DECISION_JSON = "decision.json"
SCHEMA_VERSION = 1
#: the keys every decision.json holds (``docs/reference/decision-json.md`` documents each).
KEYS = tuple(key for key, _, _ in SECTIONS[0][2])
#: below this Kendall's W the disagreement line calls the metrics' agreement weak.
WEAK_W = 0.5


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def write_decision(store: Store, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` as ``<store>/decision.json`` (atomic, redacted like every text file), after
    checking its keys against :mod:`zoorank.decide.decision_schema`."""
    check(doc)
    store.write_json(DECISION_JSON, dict(doc))


def read_decision(store: Store) -> dict[str, Any] | None:
    """The stored decision, or None before the first RANK."""
    if not store.exists(DECISION_JSON):
        return None
    doc = store.read_json(DECISION_JSON)
    if not isinstance(doc, dict):
        return None
    # a file an older zoorank wrote lacks the keys added since: null until RANK rewrites it
    return {**{k: None for k in KEYS}, **doc}


def update_few_label(store: Store, dataset: str, few_label: Mapping[str, Any]) -> dict[str, Any] | None:
    """Record ``zoorank label``'s few-label pick for ``dataset`` (``few_label``: at least
    ``model_id``, ``p_best``, ``labels``) in the stored decision; returns the new document, or None
    when there is no decision yet (RANK has not run)."""
    doc = read_decision(store)
    if doc is None:
        return None
    entries = dict(doc.get("few_label") or {})
    entries[dataset] = dict(few_label, updated=now_iso())
    doc["few_label"] = entries
    doc["verdict"] = verdict_entry(doc.get("pick"), entries)
    step = doc.get("next_step") or {}
    if step.get("kind") in LABELS_TO_SETTLE:  # the labels given back count against the budget
        doc["next_step"] = _stepped(doc, current_config() or step.get("config"))
    write_decision(store, doc)
    return doc


def _stepped(doc: Mapping[str, Any], config: str | None) -> dict[str, Any]:
    """``doc``'s next step again, from its kind, the labels its few-label picks count on the
    pick's dataset, and ``config``; the images left without a label stay those RANK counted
    (an upper bound once more labels are given back: `zoorank ask` never asks a labelled one)."""
    pick, step = doc.get("pick") or {}, doc.get("next_step") or {}
    labelled = labelled_on(doc.get("few_label"), pick.get("dataset"))
    return next_step(step["kind"], labelled, config, step.get("unlabelled"), pick.get("dataset"))


def with_current_config(store: Store) -> dict[str, Any] | None:
    """The stored decision, its next step renamed to the config path the running command set
    (:func:`zoorank.decide.next_step.config_path`) and written back when that path differs from
    the stored one (a RANK skipped because its inputs are unchanged, run through another path to
    the same config); None before the first RANK. Nothing else in the document changes."""
    doc = read_decision(store)
    config = current_config()
    step = (doc or {}).get("next_step") or {}
    if doc is None or config is None or step.get("config") == config \
            or step.get("kind") not in LABELS_TO_SETTLE:
        return doc
    doc["next_step"] = _stepped(doc, config)
    write_decision(store, doc)
    return doc


# -- building it (RANK) ----------------------------------------------------------------------------


def verdict_entry(pick: Mapping[str, Any] | None,
                  few_label: Mapping[str, Any] | None) -> dict[str, Any]:
    """``verdict`` of decision.json: the model to take and on what grounds. After ``zoorank label``
    the few-label pick of the pick's dataset (else of the last dataset labelled) comes first,
    with its p(best | labels), and the label-free pick stands beside it; before, the label-free
    pick. ``{model_id, basis: "labels" | "label-free", p_best, labels, dataset, label_free}``."""
    label_free = (pick or {}).get("model_id")
    few = dict(few_label or {})
    dataset = (pick or {}).get("dataset")
    entry = few.get(dataset) if dataset in few else (few[list(few)[-1]] if few else None)
    if entry and entry.get("model_id"):
        ds = dataset if dataset in few else list(few)[-1]
        return {"model_id": str(entry["model_id"]), "basis": "labels",
                "p_best": _plain(entry.get("p_best")), "labels": _plain(entry.get("labels")),
                "dataset": ds, "label_free": label_free}
    return {"model_id": label_free, "basis": "label-free", "p_best": None, "labels": None,
            "dataset": dataset, "label_free": label_free}


def failed_entries(failed: pd.DataFrame | None) -> list[dict[str, Any]]:
    """``failed`` of decision.json: one entry per (model, dataset) that failed or is missing,
    ``{model_id, dataset, stage, reason}``, from RANK's ``failed`` table (sorted)."""
    if failed is None or failed.empty:
        return []
    return [{"model_id": str(r["model_id"]), "dataset": str(r.get("dataset") or "") or None,
             "stage": str(r.get("stage") or "") or None, "reason": redact(str(r.get("error") or ""))}
            for r in failed.to_dict("records")]


def count_entry(board: pd.DataFrame, failed: Sequence[Mapping[str, Any]],
                configured: int | None) -> dict[str, int]:
    """``counts`` of decision.json: models configured (after globs; None: not known here),
    ranked (a rank on the board) and failed (configured but ranked nowhere, with an entry in
    ``failed``)."""
    ranked_ids = set(board.loc[board["rank"].notna(), "model_id"].astype(str)) \
        if "rank" in board and len(board) else set()
    failed_ids = {f["model_id"] for f in failed} - ranked_ids
    return {"configured": configured if configured is not None
            else len(ranked_ids | failed_ids), "ranked": len(ranked_ids),
            "failed": len(failed_ids)}


def _plain(value: Any) -> Any:
    """A JSON value: NumPy scalars as Python ones, NaN/inf as None."""
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(float(value)) else None
    return value


def _flags(row: Mapping[str, Any]) -> set[str]:
    text = row.get("flags")
    if not isinstance(text, str):
        return set()
    return {f.split(":")[-1] for f in text.split(",") if f}


def pick_row(board: pd.DataFrame) -> tuple[dict[str, Any] | None, list[str]]:
    """(the pick's row, the ids ranked above it that a health flag passed over). The pick is the
    first ranked model without a health flag; when every ranked model has one, the first without
    a blocking flag (:data:`zoorank.stats.health.BLOCKING`), then the first ranked. Cost O(n)."""
    if board.empty or "rank" not in board:
        return None, []
    ranked = board[board["rank"].notna()].sort_values(["rank", "model_id"], kind="stable")
    flags = [_flags(r) for r in ranked[["flags"]].to_dict("records")] if "flags" in ranked \
        else [set()] * len(ranked)
    ids = [str(m) for m in ranked["model_id"]]
    for accept in (lambda f: not f, lambda f: not (f & BLOCKING), lambda f: True):
        first = next((i for i, f in enumerate(flags) if accept(f)), None)
        if first is not None:
            return ranked.iloc[first].to_dict(), ids[:first]
    return None, []


def _pick_metric(row: Mapping[str, Any], ds: str, settings: Mapping[str, Any]) -> str:
    """The metric that ranks the pick on ``ds``: the heads' estimate for a model with a head on a
    board that mixes signals, else the dataset's primary metric."""
    mixed = (settings.get("mixed_signals") or {}).get(ds)
    if mixed and str(row["model_id"]) in set(mixed.get("head_models") or ()):
        return str(mixed["head"])
    return str((settings.get("primary_metric") or {})[ds])


def pick_entry(row: Mapping[str, Any] | None, settings: Mapping[str, Any],
               models: Mapping[str, Any]) -> dict[str, Any] | None:
    """``pick`` of decision.json from the pick's leaderboard row and its zoo entry (``models``:
    model_id → :class:`~zoorank.zoo.resolve.ResolvedModel`, for the checkpoint, redacted)."""
    if row is None:
        return None
    values = {}
    for ds in settings.get("primary_metric") or {}:
        metric = _pick_metric(row, ds, settings)
        values[ds] = {"metric": metric, "value": _plain(row.get(f"{ds}/{metric}", math.nan))}
    first = next((ds for ds, v in values.items() if v["value"] is not None),
                 next(iter(values), None))
    model = models.get(str(row["model_id"]))
    spec = getattr(model, "spec", None)
    checkpoint = getattr(spec, "checkpoint", None)
    return {
        "model_id": str(row["model_id"]),
        "checkpoint": redact(checkpoint) if checkpoint else None,
        "metric": values[first]["metric"] if first else None,
        "value": values[first]["value"] if first else None,
        "dataset": first,
        "rank": _plain(row.get("rank")),
        "source": str(getattr(spec, "source", "") or "") or None,
        "name": redact(getattr(spec, "name", None)) if getattr(spec, "name", None) else None,
        "signal": str(row.get("signal") or "") or None,
        "values": values,
    }


def top_set_claim(decision: Mapping[str, Any]) -> dict[str, str]:
    """The confidence claimed for the top set: ``{"level": ..., "sentence": ...}``.

    The one place the level is taken from, for the console, decision.json and the report alike (a
    level printed is a level measured). At the settings ``benchmarks/science/calibration.py`` measured
    (:data:`~zoorank.stats.uncertainty.MEASURED_SETTINGS`) the level is the lowest coverage it
    measured there (:func:`~zoorank.stats.uncertainty.measured_coverage`, the worst simulated
    zoo); at any other settings the nominal level is printed as nominal, with that said."""
    nominal = float(decision.get("confidence", 0.95))
    guarantee = str(decision.get("top_set_guarantee") or "")
    at = {k: decision.get(k) for k in MEASURED_SETTINGS}
    measured_here = all(v is not None and math.isclose(float(v), MEASURED_SETTINGS[k])
                        for k, v in at.items())
    if not measured_here:
        return {"level": f"nominal {nominal:.0%}",
                "sentence": (f"{guarantee} Its coverage was not measured at these settings "
                             "(benchmarks/science/calibration.py measures the defaults: confidence 0.95, "
                             "8 folds of half the images), so the level is nominal.").strip()}
    level = measured_coverage()
    worst = min(MEASURED_COVERAGE, key=lambda k: MEASURED_COVERAGE[k][0])
    return {"level": f"{level:.0%}",
            "sentence": (f"{guarantee} Measured on simulated zoos with known truth "
                         f"(benchmarks/science/calibration.py), the set held every truly best model in "
                         f"{level:.0%} of simulations in the hardest setting ({worst}); read it as "
                         f"a {level:.0%} set, not {nominal:.0%}. {p_best_claim()}").strip()}


def top_set_entry(board: pd.DataFrame, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``top_set`` of decision.json: the Model Confidence Set of the board's order (a detail)."""
    d = settings.get("decision") or {}
    claim = top_set_claim(d)
    models = [str(m) for m in d.get("top_set") or []]
    return {"models": models, "size": len(models), "of": len(board),
            "metric": settings.get("ordered_by"), "level": claim["level"],
            "nominal": _plain(d.get("confidence")), "rule": d.get("top_set_rule"),
            "sentence": claim["sentence"]}


def disagreement_line(settings: Mapping[str, Any], pick: str | None,
                      shortlist: Sequence[str]) -> str:
    """One line on the label-free metrics: how many rank the pick first, how many a shortlisted
    model, and their concordance (Kendall's W), over every dataset's consensus (the decision's
    ``consensus``: each metric's best model)."""
    consensus = (settings.get("decision") or {}).get("consensus") or {}
    bests = [(ds, m, b) for ds, c in consensus.items() for m, b in (c.get("best") or {}).items()]
    ws = [float(c["kendall_w"]) for c in consensus.values()
          if c.get("kendall_w") is not None and math.isfinite(float(c["kendall_w"]))]
    if len(bests) < 2 or not ws:
        n = len({m for _, m, _ in bests})
        return (f"{n} label-free metric{'s' if n != 1 else ''} ranked this zoo: no disagreement "
                "to measure.")
    shortlisted = set(shortlist)
    on_pick = sum(b == pick for _, _, b in bests)
    in_short = sum(b in shortlisted for _, _, b in bests)
    where = f" over {len(consensus)} datasets" if len(consensus) > 1 else ""
    w = (f"Kendall's W {ws[0]:.2f}" if len(ws) == 1
         else f"Kendall's W {min(ws):.2f}–{max(ws):.2f}")
    verdict = "they agree" if min(ws) >= WEAK_W and on_pick == len(bests) else (
        "broad agreement" if min(ws) >= WEAK_W else "weak")
    what = "Label-free metric rankings" if len(consensus) > 1 else "Label-free metrics"
    return (f"{what}{where}: {on_pick} of {len(bests)} put the pick first, {in_short} a "
            f"shortlisted model; {w} ({verdict}).")


def caveat_lines(board: pd.DataFrame, settings: Mapping[str, Any]) -> list[str]:
    """The decision's caveats from RANK's settings, each one sentence or paragraph: the top set
    and its measured level, health flags, the metrics' consensus, the oracle's top set against
    the label-free one, the width confound and every confound a prior explains."""
    d = settings.get("decision") or {}
    if not d:
        return []
    top = list(d.get("top_set") or [])
    claim = top_set_claim(d)
    shown = ", ".join(top[:8]) + (f" (+{len(top) - 8} more)" if len(top) > 8 else "")
    lines = [f"Top set of {settings.get('ordered_by')} ({len(top)} of {len(board)}, "
             f"a {claim['level']} set): {shown or 'none'}. It is about that metric's best under "
             f"resampling of the evaluation images, not about accuracy. {claim['sentence']}"]
    flagged = d.get("flagged") or []
    if flagged:
        lines.append(f"Health flags on {len(flagged)} model(s): "
                     + ", ".join(flagged[:6]) + (" ..." if len(flagged) > 6 else "")
                     + " (see the flags column).")
    if d.get("consensus_sentence"):
        lines.append(str(d["consensus_sentence"]))
    if d.get("oracle_comparison"):
        lines.append(str(d["oracle_comparison"]))
    if d.get("width_warning"):
        lines.append(str(d["width_warning"]))
    lines += [str(c["sentence"]) for c in d.get("confounds") or []]
    return lines


def metric_caveats(settings: Mapping[str, Any]) -> list[str]:
    """The record against labels of each metric that orders the board, and its warnings
    (:func:`zoorank.decide.metric_record.summarise`), once each."""
    primary = dict(settings.get("primary_metric") or {})
    ordered = settings.get("ordered_by")
    metrics = list(dict.fromkeys(primary.values())) or ([ordered] if ordered else [])
    out: list[str] = []
    for m in metrics:
        record = summarise(m)
        out += [record["sentence"]] if record["sentence"] else []
        out += record["warnings"]
    return list(dict.fromkeys(out))


def build_decision(board: pd.DataFrame, settings: Mapping[str, Any], models: Mapping[str, Any],
                   store_name: str, previous: Mapping[str, Any] | None = None,
                   config: str | None = None,
                   unlabelled: Mapping[str, int] | None = None,
                   failed: pd.DataFrame | None = None,
                   configured: int | None = None) -> dict[str, Any]:
    """The decision document (module docstring) of a decided leaderboard (``board`` and
    ``settings`` as RANK wrote them; ``models``: model_id → resolved zoo entry). ``previous``: the
    stored document, whose ``few_label`` is kept. ``config``: the run config's path for the next
    step's command (default: the one the running command set,
    :func:`zoorank.decide.next_step.config_path`, else ``previous``'s). ``unlabelled``: dataset →
    its images without a label (:meth:`zoorank.catalog.Catalog.unlabelled`), so that the next
    step never asks for more than are left; None: not known. ``failed``: RANK's ``failed`` table;
    ``configured``: the number of models the config names (after globs). Cost O(n log n)."""
    from zoorank import __version__

    row, passed_over = pick_row(board)
    pick = pick_entry(row, settings, models)
    short = shortlist_for(board, settings)
    few_label = dict((previous or {}).get("few_label") or {})
    caveats = []
    if passed_over:
        caveats.append(f"The pick is the first model without a health flag: "
                       f"{', '.join(passed_over[:5])}"
                       + (f" (+{len(passed_over) - 5} more)" if len(passed_over) > 5 else "")
                       + " ranked above it but carr" + ("ies" if len(passed_over) == 1 else "y")
                       + " a flag.")
    if short.get("coverage_note"):
        caveats.append(str(short["coverage_note"]))
    caveats += metric_caveats(settings) + caveat_lines(board, settings)
    config = config or current_config() or ((previous or {}).get("next_step") or {}).get("config")
    dataset = pick["dataset"] if pick else None
    step = next_step(zoo_kind(pick["signal"]), labelled_on(few_label, dataset), config,
                     (unlabelled or {}).get(dataset), dataset) if pick else None
    failures = failed_entries(failed)
    counts = count_entry(board, failures, configured)
    if counts["failed"]:
        caveats.insert(0, f"{counts['failed']} of {counts['configured']} configured models failed "
                          "and are not ranked (decision.json's failed lists each with its reason).")
    return {
        "schema_version": SCHEMA_VERSION,
        "zoorank_version": __version__,
        "created": now_iso(),
        "store": store_name,
        "leaderboard_fingerprint": settings.get("metrics_fingerprint"),
        "pick": pick,
        "verdict": verdict_entry(pick, few_label),
        "counts": counts,
        "failed": failures,
        "shortlist": short,
        "expected_regret_pp": dict(short.get("pick_regret_pp") or
                                   {"median": None, "p90": None, "zoos": None}),
        "record": decision_record(board, settings),
        "disagreement": disagreement_line(settings, pick["model_id"] if pick else None,
                                          short.get("models") or []),
        "next_step": step,
        "top_set": top_set_entry(board, settings),
        "few_label": few_label,
        "caveats": list(dict.fromkeys(caveats)),
    }
