"""The shortlist by split conformal prediction across zoos (protocol 2 of the shortlist): per metric
that can order a board, the rank fraction f* with a finite-sample guarantee of holding a model
within 0.5 pp of the labels' best on at least 90% of zoos like the calibration zoos, then one look
at zoos built after the protocol was written.

The protocol is ``shortlist_protocol_2.md`` beside this script (committed before its held-out zoos
were built); protocol 1 and its look stay in ``shortlist_calibration.py`` / ``results/shortlist.md``.
Reads the table of ``benchmarks/zoos/build_validation_zoos.py`` only (seconds)::

    .venv/bin/python benchmarks/science/shortlist_conformal.py                  # the one look
    .venv/bin/python benchmarks/science/shortlist_conformal.py --no-look \\
        --markdown /tmp/conformal.md --record /tmp/record.json                 # calibration only

Writes ``benchmarks/results/shortlist_conformal.md`` (through the harness) and the record the
product reads, ``zoorank/decide/shortlist_record.json``. ``--no-look`` drops protocol 2's held-out
zoos as the table is read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402
from shortlist_calibration import (  # noqa: E402
    BOARD_KIND,
    KIND_WORDS,
    MAX_FRACTION,
    MIN_ZOOS,
    RECORD,
    TABLE,
    TOLERANCE_PP,
    evaluate,
    pick_regret,
    zoo_cases,
    zoo_section,
    zoo_summaries,
)

from zoorank.decide.shortlist import percentile_summary, rule_text  # noqa: E402
from zoorank.stats.shortlist_rule import holds_near_best, shortlist_mask  # noqa: E402

PROTOCOL = Path(__file__).with_name("shortlist_protocol_2.md")
TITLE = "The shortlist by split conformal prediction across zoos (protocol 2)"
ALPHA = 0.1


def score(case: Mapping[str, Any]) -> float:
    """s_z: the smallest share k/n of the board's first eligible models (ties as the rule keeps
    them) that holds a model within TOLERANCE_PP of the zoo's best truth; inf when none does."""
    s = case["rank_scores"]
    n = int(np.isfinite(s).sum())
    for k in range(1, n + 1):
        mask = shortlist_mask(s, {"kind": "rank_fraction", "fraction": k / n, "max_fraction": 1.0})
        if holds_near_best(mask, case["truth"], TOLERANCE_PP):
            return k / n
    return math.inf


def conformal_fraction(scores: Sequence[float], alpha: float = ALPHA) -> tuple[float, int]:
    """(f*, the order statistic's index): the ⌈(m+1)(1−α)⌉-th smallest of m scores (inf when the
    index exceeds m)."""
    m = len(scores)
    index = math.ceil((m + 1) * (1 - alpha) - 1e-12)
    if index > m:
        return math.inf, index
    return float(sorted(scores)[index - 1]), index


def rule_of(fraction: float) -> dict[str, Any]:
    """The rank-fraction rule of f* (capped at half: beyond it, half the board)."""
    return {"kind": "rank_fraction", "fraction": float(min(fraction, MAX_FRACTION)),
            "max_fraction": MAX_FRACTION}


def calibrate(metric: str, cases: list[dict[str, Any]], look: bool) -> dict[str, Any] | None:
    calib = [c for c in cases if not c["held_out"]]
    held = [c for c in cases if c["held_out"]] if look else []
    if len(calib) < MIN_ZOOS:
        return None
    scores = {c["zoo"]: score(c) for c in calib}
    f, index = conformal_fraction(list(scores.values()))
    rule = rule_of(f)
    lozo = []
    for c in calib:
        fz, _ = conformal_fraction([v for z, v in scores.items() if z != c["zoo"]])
        rz = rule_of(fz)
        lozo.append({"zoo": c["zoo"], "rule": rz, **evaluate(c, rz)})
    look_rows = [{"zoo": c["zoo"], "rule": rule, **evaluate(c, rule)} for c in held]
    return {"metric": metric, "own_board": all(c["own_board"] for c in cases), "scores": scores,
            "fraction": f, "index": index, "rule": rule, "lozo": lozo, "held_out": look_rows,
            "regret": {c["zoo"]: pick_regret(c) for c in calib + held}, "cases": calib + held}


def metric_record(res: Mapping[str, Any]) -> dict[str, Any]:
    metric, rows = res["metric"], res["lozo"] + res["held_out"]
    held = [r["zoo"] for r in res["held_out"]]
    guaranteed = math.isfinite(res["fraction"]) and res["fraction"] <= MAX_FRACTION
    calib_scores = list(res["scores"].values())
    entry = {
        "rule": res["rule"], "text": rule_text(res["rule"], metric),
        "hits": int(sum(r["hit"] for r in rows)), "zoos": len(rows),
        "hit_rate": float(np.mean([r["hit"] for r in rows])),
        "mean_size": float(np.mean([r["size"] for r in rows])),
        "mean_size_fraction": float(np.mean([r["fraction"] for r in rows])),
        "held_out_zoos": len(held),
        "in_sample": {"hit_rate": float(np.mean([s <= res["rule"]["fraction"] + 1e-12
                                                 for s in calib_scores])),
                      "zoos": len(calib_scores)},
        "leave_one_out": {"hits": int(sum(r["hit"] for r in res["lozo"])),
                          "zoos": len(res["lozo"]),
                          "mean_size_fraction": float(np.mean([r["fraction"] for r in res["lozo"]]))},
        "held_out": {"hits": int(sum(r["hit"] for r in res["held_out"])), "zoos": len(held),
                     "mean_size_fraction": (float(np.mean([r["fraction"] for r in res["held_out"]]))
                                            if held else None), "names": held},
        "conformal": {"alpha": ALPHA, "calibration_zoos": len(calib_scores),
                      "order_statistic": res["index"],
                      "fraction": res["fraction"] if math.isfinite(res["fraction"]) else None,
                      "guaranteed": guaranteed,
                      "scores": {z: (v if math.isfinite(v) else None)
                                 for z, v in res["scores"].items()}},
    }
    entry["rank_rule"] = {k: entry[k] for k in ("rule", "text", "hits", "zoos", "hit_rate",
                                                "mean_size", "mean_size_fraction",
                                                "held_out_zoos", "in_sample", "leave_one_out",
                                                "held_out")}
    cases = res["cases"]
    entry["pick_regret_pp"] = percentile_summary([res["regret"][z] for z in held])
    entry["rank_rule"]["pick_regret_pp"] = entry["pick_regret_pp"]
    entry["pick_regret_pp_all_zoos"] = percentile_summary(list(res["regret"].values()))
    entry["orders_boards"] = res["own_board"]
    entry["calibration_zoos"] = [c["zoo"] for c in cases if not c["held_out"]]
    entry["held_out_zoo_names"] = held
    entry["kinds"] = sorted({KIND_WORDS[c["kind"]] for c in cases}
                            | {BOARD_KIND[c["board"]] for c in cases})
    entry["board_kinds"] = sorted({BOARD_KIND[c["board"]] for c in cases})
    return entry


def _pct(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{100 * x:.0f}%"


def markdown(table: pd.DataFrame, results: Mapping[str, Any], record: Mapping[str, Any],
             look: bool, seconds: float) -> str:
    own = [m for m, r in results.items() if r["own_board"]]
    order = own + [m for m in results if m not in own]
    lines = [f"{seconds:.1f} s; {table['zoo'].nunique()} zoos, {len(table)} models"
             + ("" if look else " (--no-look: protocol 2's held-out zoos were not read)") + ".", "",
             PROTOCOL.read_text().strip(), "", "## Zoos", "",
             "Role: *held out* is protocol 1's held-out zoo (a calibration zoo here); protocol 2's "
             "held-out zoos are marked in the per-metric tables.", "", zoo_section(table), "",
             "## Summary", "",
             "Per metric: the conformal rank fraction f* (of m calibration zoos), the rule, its "
             "hits over the zoos each predicted by a rule fitted without it (leave one zoo out on "
             "the calibration zoos, whose design was seen; then the one look at protocol 2's "
             "held-out zoos), the mean size, and the pick's regret on the held-out zoos.", ""]
    rows = []
    for m in order:
        e, res = record["metrics"][m], results[m]
        c, lo, ho, rr = e["conformal"], e["leave_one_out"], e["held_out"], e["pick_regret_pp"]
        rows.append([f"`{m}`" + (" (board)" if m in own else ""),
                     f"{_pct(res['fraction'])} (m {c['calibration_zoos']}, "
                     f"{c['order_statistic']}th)" + ("" if c["guaranteed"] else ", capped"),
                     e["text"], f"{lo['hits']}/{lo['zoos']}", f"{ho['hits']}/{ho['zoos']}",
                     f"{e['hits']}/{e['zoos']} ({100 * e['hit_rate']:.0f}%)",
                     f"{e['mean_size']:.1f} ({100 * e['mean_size_fraction']:.0f}%)",
                     "—" if rr["median"] is None else
                     f"{rr['median']:.1f} / {rr['p90']:.1f} (n {rr['zoos']})"])
    lines += [harness.table(["metric", "f*", "rule", "leave one out", "held out (look)", "all",
                             "mean size (share of zoo)", "pick's regret, held out, median / p90 "
                             "(pp)"], rows, "l" * 8), ""]
    verdicts = []
    for m in own:
        ho = record["metrics"][m]["held_out"]
        if ho["zoos"]:
            rate = ho["hits"] / ho["zoos"]
            ok = rate >= 1 - ALPHA - 1e-12 and (ho["mean_size_fraction"] or 0) <= 0.5
            verdicts.append(f"* `{m}`: held out {ho['hits']}/{ho['zoos']} ({100 * rate:.0f}%), mean "
                            f"size {100 * ho['mean_size_fraction']:.0f}% of the zoo: "
                            f"**{'pass' if ok else 'fail'}**.")
    if verdicts:
        lines += ["**The one look** (pass/fail as protocol 2 states it):", "", *verdicts, ""]
    lines += ["## Per metric", ""]
    for m in order:
        res, e = results[m], record["metrics"][m]
        lines += [f"### `{m}`" + (" (orders the boards)" if res["own_board"] else ""), "",
                  f"f* = {_pct(res['fraction'])}: {e['text']}"
                  + ("" if e["conformal"]["guaranteed"] else
                     " (f* above half or infinite: capped at half, no guarantee)") + ".", "",
                  "| zoo | role | score s_z | rule fitted without it | hit | size | size / zoo | "
                  "pick's regret (pp) |", "|---|---|---:|---|---|---:|---:|---:|"]
        for r in res["lozo"] + res["held_out"]:
            held = r in res["held_out"]
            s = res["scores"].get(r["zoo"])
            lines.append(f"| `{r['zoo']}` | {'held out (one look)' if held else 'leave one out'} | "
                         f"{'—' if s is None else _pct(s)} | first {_pct(r['rule']['fraction'])} | "
                         f"{'yes' if r['hit'] else '**no**'} | {r['size']} | "
                         f"{100 * r['fraction']:.0f}% | {res['regret'][r['zoo']]:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", type=Path, default=TABLE)
    harness.results_option(p, "shortlist_conformal")
    p.add_argument("--record", type=Path, default=RECORD, help="the record (JSON) to write")
    p.add_argument("--no-look", action="store_true",
                   help="drop protocol 2's held-out zoos as the table is read")
    args = p.parse_args(argv)
    start = time.perf_counter()
    table = pd.read_parquet(args.table)
    look = not args.no_look
    if "held_out_2" not in table:
        table["held_out_2"] = False
    if not look:
        table = table[~table["held_out_2"]].reset_index(drop=True)
    # protocol 1's held-out zoos are calibration zoos here; protocol 2's are held out
    table = table.assign(held_out_1=table["held_out"], held_out=table["held_out_2"])
    results = {}
    for metric, cases in zoo_cases(table).items():
        res = calibrate(metric, cases, look)
        if res is not None:
            results[metric] = res
    zoos = zoo_summaries(table)
    command = harness.command_line()
    record = {"generated_by": "benchmarks/science/shortlist_conformal.py", "protocol": 2,
              "command": command, "commit": harness.commit(), "date": str(datetime.date.today()),
              "tolerance_pp": TOLERANCE_PP, "target_hit_rate": 1 - ALPHA,
              "max_fraction": MAX_FRACTION, "looked_at_held_out": look,
              "metrics": {m: metric_record(r) for m, r in results.items()}, "zoos": zoos}
    body = markdown(table.assign(held_out=table["held_out_1"]), results, record, look,
                    time.perf_counter() - start)
    print(body)
    harness.write_results(args.markdown, TITLE, body, command)
    args.record.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"record: {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
