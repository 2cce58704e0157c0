"""The shortlist: the models the user reads first, chosen by a rule whose hit rate (how often it
holds a model within 0.5 pp of the labels' best) was measured on validation zoos it was not chosen
on.

When the run's calibration record (:mod:`zoorank.decide.run_record`: the config's ``record:``,
else the one zoorank ships) has an entry for the board's kind whose metric orders the board, the
rule is its shortlist fraction and the figures are its held-out units'. Otherwise the rules and
their records come from ``shortlist_record.json`` beside this module, written by
``benchmarks/science/shortlist_conformal.py`` (split conformal prediction across the validation
zoos of ``benchmarks/zoos/build_validation_zoos.py``, then one look at zoos built after its
protocol): per metric that can order a board, the rule (:mod:`zoorank.stats.shortlist_rule`; a rank
fraction, so it is also the rank rule used on a board of several datasets or of mixed signals)
and the measured figures. A metric without a record gets half the board, stated as unmeasured.

:func:`shortlist_for` is the contract the decision, the report, the console and the Python API
code against.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from zoorank.decide.run_record import settings_record
from zoorank.evaluation import record_block
from zoorank.metrics import registry
from zoorank.stats.health import BLOCKING
from zoorank.stats.shortlist_rule import shortlist_mask

RECORD = "shortlist_record.json"
#: the rule of a metric without a record: half the board (the cap of every rule), unmeasured.
FALLBACK_RULE: dict[str, Any] = {"kind": "rank_fraction", "fraction": 0.5, "max_fraction": 0.5}
#: the coarse kinds a board can be of (inferred from its signal), and the finer kinds a zoo's
#: families can name (validation zoos are recorded with both).
CLASSIFIERS, ENCODERS = "classifiers", "encoders"
FAMILY_KINDS = {"autoencoder": "autoencoders", "ae": "autoencoders", "simclr": "SSL encoders",
                "vicreg": "SSL encoders", "byol": "SSL encoders"}


@functools.lru_cache(maxsize=1)
def load_record() -> dict[str, Any]:
    """The calibration record (package data); an empty record when none is installed."""
    try:
        text = resources.files("zoorank.decide").joinpath(RECORD).read_text()
    except (FileNotFoundError, OSError):
        return {"metrics": {}, "zoos": {}}
    return json.loads(text)


def rule_text(rule: Mapping[str, Any], metric: str | None = None) -> str:
    """The rule in words, e.g. ``the first 30% of the board (at most half)``."""
    kind = rule["kind"]
    if kind == "rank_count":
        k = int(rule["k"])
        text = "the board's first model" if k == 1 else f"the first {k} models of the board"
    elif kind == "rank_fraction":
        text = ("half the board" if rule["fraction"] >= 0.5 else
                f"the first {100 * rule['fraction']:.0f}% of the board")
    else:
        of = f" {metric}" if metric else ""
        units = {"pp": "pp", "sd": "standard deviations (of the zoo's values)",
                 "relative": "× the leader's value"}[rule["units"]]
        text = f"every model within {rule['width']:g} {units} of the leader's{of}"
    cap = rule.get("max_fraction", 0.5)
    if kind == "rank_fraction" and rule["fraction"] <= cap:
        return text
    return text + (" (at most half the board)" if cap == 0.5 else f" (at most {cap:.0%} of the board)")


def blocked_models(board: pd.DataFrame) -> np.ndarray:
    """Per row of ``board``: whether a blocking health flag keeps the model out of the shortlist."""
    if "flags" not in board:
        return np.zeros(len(board), dtype=bool)
    out = []
    for flags in board["flags"].fillna("").astype(str):
        names = {f.split(":")[-1] for f in flags.split(",") if f}
        out.append(bool(names & BLOCKING))
    return np.array(out, dtype=bool)


def board_kind(board: pd.DataFrame) -> tuple[str, str | None]:
    """(coarse kind, finer kind or None) of a board: classifiers when a model is ranked by its
    head, else encoders; the finer kind when every model's ``family`` names one
    (:data:`FAMILY_KINDS`)."""
    heads = "signal" in board and board["signal"].astype(str).str.contains("head").any()
    coarse = CLASSIFIERS if heads else ENCODERS
    fine = None
    if "family" in board and len(board):
        kinds = {FAMILY_KINDS.get(str(f).lower()) for f in board["family"].fillna("")}
        if len(kinds) == 1 and None not in kinds:
            fine = kinds.pop()
    return coarse, fine


def _measured(entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """The figures of a record entry on its HELD-OUT zoos only (``hits`` of ``zoos``, the hit
    rate, the names in ``held_out_zoos``), with the all-zoo figures beside them under ``all_*``:
    calibration zoos, whose design was seen, never count as held out."""
    entry = entry or {}
    held = entry.get("held_out") or {}
    names = list(held.get("names") or entry.get("held_out_zoo_names") or [])
    out = {"hits": held.get("hits"), "zoos": held.get("zoos"),
           "hit_rate": (held["hits"] / held["zoos"]) if held.get("zoos") else None,
           "mean_size": entry.get("mean_size"), "mean_size_fraction": entry.get("mean_size_fraction"),
           "held_out_zoos": names, "all_hits": entry.get("hits"), "all_zoos": entry.get("zoos")}
    regret = entry.get("pick_regret_pp") or {}
    out["pick_regret_pp"] = {k: regret.get(k) for k in ("median", "p90", "zoos")}
    return out


def _coverage(entry: Mapping[str, Any] | None, coarse: str, fine: str | None,
              mixed: bool) -> tuple[str, bool, str | None]:
    kind = f"{CLASSIFIERS} and {ENCODERS}" if mixed else (fine or coarse)
    if entry is None:
        return kind, False, (f"No validation zoo covers {kind} ordered this way: the shortlist's "
                             "rate is unmeasured.")
    covered_kinds = list(entry.get("kinds") or [])
    boards = set(entry.get("board_kinds") or [])
    covered = (not mixed) and coarse in boards and (fine is None or fine in covered_kinds
                                                    or fine == coarse)
    note = None if covered else (f"No validation zoo covers {kind}: the shortlist's rate is "
                                 f"measured on {', '.join(covered_kinds) or 'no zoo'}.")
    return kind, covered, note


def _unit_record(block: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(rule, measured figures, text) from a record of the protocol by unit
    (:func:`zoorank.evaluation.record_block`): its shortlist fraction, and its held-out units in
    the places of the held-out zoos."""
    cap = (block.get("conformal") or {}).get("max_fraction", FALLBACK_RULE["max_fraction"])
    rule = {"kind": "rank_fraction", "fraction": float(block["shortlist_fraction"]),
            "max_fraction": float(cap)}
    held, regret = block["held_out_units"], block["regret_pp"]["held_out"]
    measured = {"hits": held["hits"], "zoos": held["n"], "hit_rate": held["hit_rate"],
                "mean_size": None, "mean_size_fraction": None,
                "held_out_zoos": list(held.get("names") or []), "all_hits": None, "all_zoos": None,
                "pick_regret_pp": {"median": regret["median"], "p90": regret["p90"],
                                   "zoos": regret["n"]}}
    return rule, measured, rule_text(rule) + f" (calibration record: {held['n']} held-out units)"


def shortlist_for(board: pd.DataFrame, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The shortlist of a leaderboard (sorted by ``rank``, 1 = best) and its measured record.

    The rule is the record's for the metric that orders the board (``settings["primary_metric"]``
    per dataset; on a board of classifier heads, the heads' estimate): on a board of one dataset
    and one signal, the calibrated rule on the metric's values; on a board of several datasets or
    of mixed head/embedding signals, the metric's rank rule on the board's rank. Models without a
    rank or with a blocking health flag are never shortlisted. A metric without a record gets half
    the board, with ``None`` figures.

    Returns ``{models, metric, rule, text, hits, zoos, hit_rate, mean_size, mean_size_fraction,
    held_out_zoos, pick_regret_pp: {median, p90, zoos}, kind, kind_covered, coverage_note}``;
    the record's numbers are None where nothing was measured. Cost O(n log n)."""
    if "rank" in board and len(board):
        ranked = board[board["rank"].notna()].sort_values("rank", kind="stable")
    else:
        ranked = board.iloc[:0]
    primary: dict[str, str] = dict(settings.get("primary_metric") or {})
    mixed_ds = dict(settings.get("mixed_signals") or {})
    metrics = list(dict.fromkeys(mixed_ds[ds]["head"] if ds in mixed_ds else m
                                 for ds, m in primary.items()))
    record = load_record().get("metrics", {})
    # several metrics (datasets ordered differently): the most inclusive of their rank rules
    entries = [(m, record.get(m)) for m in metrics]
    known = [(m, e) for m, e in entries if e is not None]
    metric = metrics[0] if len(metrics) == 1 else settings.get("ordered_by")
    entry = None
    if len(metrics) == 1:
        entry = record.get(metrics[0])
    elif known and len(known) == len(entries):
        metric, entry = max(known, key=lambda me: me[1]["rank_rule"]["mean_size_fraction"] or 0)
    one_signal = len(primary) == 1 and not mixed_ds
    if entry is None:
        rule, text, measured = dict(FALLBACK_RULE), None, _measured(None)
    elif one_signal:
        rule, measured = dict(entry["rule"]), _measured(entry)
        text = entry.get("text")
    else:
        rule, measured = dict(entry["rank_rule"]["rule"]), _measured(entry["rank_rule"])
        text = entry["rank_rule"].get("text")
    coarse, fine = board_kind(board)
    unit_block = record_block(settings_record(settings), coarse)
    if unit_block is not None and unit_block.get("metric") == metric:
        rule, measured, text = _unit_record(unit_block)
    eligible = ~blocked_models(ranked)
    if rule["kind"] == "band":
        (ds,) = primary
        column = f"{ds}/{primary[ds]}"
        values = (ranked[column].to_numpy(dtype=np.float64) if column in ranked
                  else np.full(len(ranked), np.nan))
        scores = np.asarray(registry.info(primary[ds]).oriented(values), dtype=np.float64)
    else:
        scores = -ranked["rank"].to_numpy(dtype=np.float64)
    scores = np.where(eligible & np.isfinite(scores), scores, np.nan)
    mask = shortlist_mask(scores, rule) if len(scores) else np.zeros(0, dtype=bool)
    kind, covered, note = _coverage(entry, coarse, fine, bool(mixed_ds))
    if unit_block is not None and unit_block.get("metric") == metric:
        covered, note = True, (None if unit_block["guaranteed"] else
                               f"The shortlist's rate is measured on "
                               f"{unit_block['held_out_units']['n']} held-out units "
                               f"({unit_block['source']}) and carries no guarantee "
                               "(guaranteed: false).")
    if text is None:
        text = rule_text(rule, metric) + ("" if entry is not None else
                                          " (no measured record for this metric)")
    if entry is not None and not one_signal:
        note = note or ("This board ranks several datasets or mixed signals: its shortlist "
                        "is the metric's rank rule, measured on boards of one.")
    return {
        "models": [str(m) for m in ranked["model_id"].to_numpy()[mask]],
        "metric": metric,
        "rule": rule,
        "text": text,
        **measured,
        "kind": kind,
        "kind_covered": covered,
        "coverage_note": note,
    }


def percentile_summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """``{median, p90, zoos}`` of finite values (linear interpolation; None for none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"median": None, "p90": None, "zoos": 0}
    return {"median": float(np.median(v)), "p90": float(np.percentile(v, 90)), "zoos": int(v.size)}
