"""What a primary metric's best has been worth against labels: its measured record on the
validation zoos, among the caveats of the decision (``decision.json``, the report's card).

The record is a data file of the package, ``zoorank/report/metric_record.json``, written by
``benchmarks/science/default_lozo.py`` (with its command, commit and date): per metric and validation zoo,
Kendall τ against the kNN oracle, the regret of the metric's leader (the labels' best accuracy
minus that of the metric's point-best unflagged model, pp) and whether its top set held the
labels' best model; the zoos' kinds; which metrics failed when chosen out of sample.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

RECORD_FILE = "metric_record.json"

#: a record is *weak* when the mean τ over the zoos the metric ran on is below this, or the
#: metric's leader missed the labels' best by more than the record's tolerance on some zoo.
WEAK_TAU = 0.3


@lru_cache(maxsize=1)
def load_record() -> dict[str, Any]:
    """The package's record (``zoorank/report/metric_record.json``); an empty one when the file is
    missing (every metric then says it has no record)."""
    # read as a file of the package (not through ``zoorank.report``, a layer above this one)
    path = resources.files("zoorank").joinpath(f"report/{RECORD_FILE}")
    if not path.is_file():
        return {"zoos": {}, "metrics": {}}
    return json.loads(path.read_text())


def _kinds(record: Mapping[str, Any], zoos: list[str]) -> list[str]:
    return list(dict.fromkeys(str(record["zoos"][z]["kind"]) for z in zoos if z in record["zoos"]))


def summarise(metric: str, record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The record of ``metric`` (``<name>@<view>``: its base name's) in sentences.

    Returns ``{"metric", "has_record", "weak", "sentence", "warnings"}``: ``sentence`` states the
    record with its zoo counts (empty without one); ``warnings`` (shown before the recommendation)
    say where it is weak or missing, and which kinds of zoo no record covers."""
    record = load_record() if record is None else record
    base = metric.split("@", 1)[0]
    entry = (record.get("metrics") or {}).get(base)
    zoos_all = list(record.get("zoos") or {})
    kinds_all = _kinds(record, zoos_all)
    source = (f"benchmarks/science/default_lozo.py, commit {record.get('commit')}, "
              f"{record.get('date')}")
    uncovered = (f"Validation zoos so far: {len(zoos_all)} ({', '.join(kinds_all)}); none under "
                 "a distribution shift. If this zoo is of another kind, or its images differ from "
                 "what the models were trained on, no measured record covers this recommendation.")
    if not entry or not entry.get("zoos"):
        return {"metric": metric, "has_record": False, "weak": True, "sentence": "",
                "warnings": [f"{metric} has no record against labels on the validation zoos "
                             f"({source}): nothing measured says that its best model is the "
                             "best by accuracy.", uncovered]}
    zoos = entry["zoos"]
    n, total = len(zoos), len(zoos_all)
    taus = [float(z["tau"]) for z in zoos.values()]
    regrets = {name: float(z["regret_pp"]) for name, z in zoos.items()}
    hits = sum(bool(z["top_set_holds_best"]) for z in zoos.values())
    tol = float(record.get("regret_tolerance_pp", 2.0))
    worst = max(regrets, key=regrets.get)
    mean_tau = sum(taus) / n
    sentence = (f"Record of {metric} against labels ({record.get('oracle')}) on the {n} of "
                f"{total} validation zoos it ran on ({', '.join(_kinds(record, list(zoos)))}): "
                f"Kendall τ {mean_tau:+.2f} on average (from {min(taus):+.2f} to "
                f"{max(taus):+.2f}); its leader was {sum(regrets.values()) / n:.1f} pp below the "
                f"labels' best on average, {regrets[worst]:.1f} pp at worst ({worst}); its top "
                f"set held the labels' best model on {hits} of {n}. Source: {source}.")
    warnings = []
    misses = [f"{z} ({r:.1f} pp)" for z, r in regrets.items() if r > tol]
    if misses:
        warnings.append(f"Weak record: {metric}'s leader missed the labels' best by more than "
                        f"{tol:g} pp on {len(misses)} of {n} validation zoos: "
                        f"{', '.join(misses)}.")
    if mean_tau < WEAK_TAU:
        warnings.append(f"Weak record: {metric} agrees only loosely with the labels' order "
                        f"(mean τ {mean_tau:+.2f} over {n} zoos).")
    if entry.get("failed_out_of_sample"):
        warnings.append(f"{metric} failed out of sample: chosen from the other validation zoos, "
                        f"its leader missed on {', '.join(entry['picked_out_of_sample_on'])}.")
    if hits < n:
        warnings.append(f"Its top set missed the labels' best model on {n - hits} of {n} zoos: "
                        "the set is about this metric's best, which was not always the best "
                        "by accuracy.")
    warnings.append(uncovered)
    return {"metric": metric, "has_record": True, "weak": bool(misses) or mean_tau < WEAK_TAU,
            "sentence": sentence, "warnings": warnings}
