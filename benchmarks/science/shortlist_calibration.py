"""The shortlist calibrated against accuracy: per metric that can order a board, the smallest rule
(a rank cut-off or a band around the leader) that holds a model within 0.5 pp of the labels' best
on at least 90% of the validation zoos, chosen by leave-one-zoo-out, then one look at the zoos kept
out of every choice.

The protocol (rule grid, selection, what is reported) is ``shortlist_protocol.md`` beside this
script, committed before the selection first ran; this script implements it and copies it into the
results file. Reads the table of ``benchmarks/zoos/build_validation_zoos.py`` only (seconds)::

    .venv/bin/python benchmarks/science/shortlist_calibration.py                # its one look
    .venv/bin/python benchmarks/science/shortlist_calibration.py --no-look \\
        --markdown /tmp/shortlist.md --record /tmp/record.json                 # calibration zoos only

Writes ``benchmarks/results/shortlist.md`` (through the harness) and, with ``--record PATH``, its
record. Protocol 1's look failed (see the results file); the record the product reads,
``zoorank/decide/shortlist_record.json``, is protocol 2's (``shortlist_conformal.py``).
``--no-look`` drops the held-out zoos' rows as the table is read: nothing of them is computed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

from zoorank.decide.shortlist import percentile_summary, rule_text  # noqa: E402
from zoorank.metrics import registry  # noqa: E402
from zoorank.stats.shortlist_rule import holds_near_best, shortlist_mask  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "benchmarks" / "zoos" / "validation_zoos.parquet"
RECORD = ROOT / "zoorank" / "decide" / "shortlist_record.json"
PROTOCOL = Path(__file__).with_name("shortlist_protocol.md")
TITLE = "The shortlist, calibrated against accuracy on validation zoos"

TOLERANCE_PP = 0.5
TARGET = 0.9
MAX_FRACTION = 0.5
MIN_ZOOS = 5
COVERAGE = 0.9
RANK_COUNTS = (1, 2, 3, 4, 5, 6, 8, 10)
RANK_FRACTIONS = tuple(round(0.05 * i, 2) for i in range(1, 11))
BAND_PP = (0.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 20)
BAND_SD = (0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2)
FAMILY_ORDER = {"rank_fraction": 0, "rank_count": 1, "band": 2}
#: the coarse kind of a validation zoo's board, as shortlist_for infers a user's
BOARD_KIND = {"heads": "classifiers", "embeddings": "encoders"}
KIND_WORDS = {"classifiers": "supervised classifiers", "ssl": "SSL encoders",
              "autoencoders": "autoencoders", "trajectory": "checkpoints along one training run",
              "sweep": "width/depth sweeps"}


def accuracy_estimate(metric: str) -> bool:
    """Whether ``metric`` is a label-free accuracy estimate (its band is in pp)."""
    return metric in registry.classifier_metrics()


def rule_grid(metric: str) -> list[dict[str, Any]]:
    """The protocol's grid for ``metric``: rank counts, rank fractions, then its bands."""
    cap = {"max_fraction": MAX_FRACTION}
    grid = [{"kind": "rank_count", "k": k, **cap} for k in RANK_COUNTS]
    grid += [{"kind": "rank_fraction", "fraction": f, **cap} for f in RANK_FRACTIONS]
    if accuracy_estimate(metric):
        grid += [{"kind": "band", "width": float(w), "units": "pp", **cap} for w in BAND_PP]
    else:
        grid += [{"kind": "band", "width": float(w), "units": "sd", **cap} for w in BAND_SD]
    return grid


def _param(rule: Mapping[str, Any]) -> float:
    return float(rule.get("k", rule.get("fraction", rule.get("width", 0.0))))


def zoo_summaries(table: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per zoo of the validation table: its kind, board, domain, size, role and the labels' best
    model, as the record and the results page list them (with ``held_out_protocol_1`` where the
    table carries protocol 1's roles as ``held_out_1``)."""
    zoos = {}
    for zoo, z in table.groupby("zoo", sort=False):
        t = z["truth"].to_numpy(dtype=np.float64)
        first = z.iloc[0]
        zoos[zoo] = {"kind": KIND_WORDS[first["kind"]], "board": BOARD_KIND[first["board"]],
                     "domain": first["domain"], "models": len(z),
                     "images": int(first["n_images"]), "held_out": bool(first["held_out"])}
        if "held_out_1" in z:
            zoos[zoo]["held_out_protocol_1"] = bool(first["held_out_1"])
        zoos[zoo].update({"ordering_metric": first["ordering_metric"],
                          "truth": first["truth_metric"],
                          "best_model": str(z["model_id"].iloc[int(np.nanargmax(t))]),
                          "best_accuracy": float(np.nanmax(t))})
    return zoos


def zoo_cases(table: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """metric → its zoos: per zoo the rank scores (higher = better, NaN = not eligible), the band
    scores (the metric's oriented values on eligible models), the truth, ids and the pick."""
    out: dict[str, list[dict[str, Any]]] = {}
    label_free = set(registry.label_free())
    for zoo, z in table.groupby("zoo", sort=False):
        z = z.sort_values("rank", kind="stable", na_position="last")
        eligible = z["rank"].notna().to_numpy() & ~z["blocked"].to_numpy(dtype=bool)
        truth = z["truth"].to_numpy(dtype=np.float64)
        base = {"zoo": zoo, "kind": z["kind"].iloc[0], "board": z["board"].iloc[0],
                "held_out": bool(z["held_out"].iloc[0]), "n_models": len(z), "truth": truth,
                "ids": z["model_id"].to_numpy(), "domain": z["domain"].iloc[0],
                "in_top_set": z["in_top_set"].to_numpy(dtype=bool),
                "rank": z["rank"].to_numpy(dtype=np.float64),
                "flags": z["flags"].fillna("").astype(str).to_numpy()}
        ordering = z["ordering_metric"].dropna().unique()
        own = str(ordering[0]) if len(ordering) else None
        if own is not None:
            band = np.where(eligible, z["ordering_oriented"].to_numpy(dtype=np.float64), np.nan)
            out.setdefault(own, []).append({**base, "own_board": True,
                                            "rank_scores": np.where(eligible, -z["rank"].to_numpy(
                                                dtype=np.float64), np.nan),
                                            "band_scores": band})
        heads = base["board"] == "heads"
        for metric in z.columns:
            if metric == own or metric not in label_free:
                continue
            info = registry.info(metric)
            if heads != accuracy_estimate(metric) or not (info.primary or heads):
                continue
            values = z[metric].to_numpy(dtype=np.float64)
            if np.isfinite(values).sum() < COVERAGE * len(z):
                continue
            scores = np.where(eligible & np.isfinite(values),
                              np.asarray(info.oriented(values), dtype=np.float64), np.nan)
            out.setdefault(metric, []).append({**base, "own_board": False, "rank_scores": scores,
                                               "band_scores": scores})
    return out


def evaluate(case: Mapping[str, Any], rule: Mapping[str, Any]) -> dict[str, Any]:
    """One rule on one zoo: hit, size, size / eligible models, the shortlisted ids."""
    scores = case["band_scores"] if rule["kind"] == "band" else case["rank_scores"]
    mask = shortlist_mask(scores, rule)
    n = int(np.isfinite(scores).sum())
    return {"hit": holds_near_best(mask, case["truth"], TOLERANCE_PP), "size": int(mask.sum()),
            "fraction": float(mask.sum() / n) if n else float("nan"),
            "models": list(case["ids"][mask])}


def pick_regret(case: Mapping[str, Any]) -> float:
    """pp between the best truth and the truth of the pick. On a board's own order the pick is
    the product's (:func:`zoorank.decide.verdict.pick_row`: the first ranked model without a
    health flag, else the first without a blocking one); on a metric's re-ordering, its first
    eligible model (the protocol's 'first eligible model'; equal to the product's pick wherever no
    ranked model carries a non-blocking flag)."""
    t = case["truth"]
    if case["own_board"]:
        from zoorank.decide.verdict import pick_row

        frame = pd.DataFrame({"model_id": case["ids"], "rank": case["rank"], "flags": case["flags"]})
        row, _ = pick_row(frame)
        if row is None:
            return float("nan")
        pick = int(np.flatnonzero(case["ids"] == row["model_id"])[0])
    else:
        s = case["rank_scores"]
        if not np.isfinite(s).any():
            return float("nan")
        pick = int(np.argmax(np.where(np.isfinite(s), s, -np.inf)))  # first of the best
    return float(100 * (np.nanmax(t) - t[pick]))


def select(results: Mapping[str, list[dict[str, Any]]], grid: Sequence[Mapping[str, Any]],
           zoos: Sequence[str], families: Sequence[str] | None = None) -> dict[str, Any]:
    """S(Z) of the protocol: the smallest rule (mean size fraction over ``zoos``) with hit rate
    ≥ TARGET, else the highest hit rate; ``results[key]`` is the per-zoo outcome of grid rule
    ``key`` (aligned with ``zoos``)."""
    best, best_key = None, None
    for i, rule in enumerate(grid):
        if families is not None and rule["kind"] not in families:
            continue
        rows = [results[i][z] for z in zoos]
        rate = float(np.mean([r["hit"] for r in rows]))
        size = float(np.mean([r["fraction"] for r in rows]))
        meets = rate >= TARGET - 1e-12
        key = (0 if meets else 1, -rate if not meets else 0.0, size,
               FAMILY_ORDER[rule["kind"]], _param(rule))
        if best_key is None or key < best_key:
            best, best_key = {"rule": dict(rule), "hit_rate": rate, "mean_fraction": size,
                              "meets": meets}, key
    assert best is not None
    return best


def calibrate(metric: str, cases: list[dict[str, Any]], look: bool) -> dict[str, Any] | None:
    """The protocol for one metric: rule grid on every zoo, leave one out over the calibration
    zoos, the rule and the rank rule, and (``look``) the one look at the held-out zoos."""
    calib = [c for c in cases if not c["held_out"]]
    held = [c for c in cases if c["held_out"]] if look else []
    if len(calib) < MIN_ZOOS:
        return None
    grid = rule_grid(metric)
    by_zoo = {c["zoo"]: c for c in cases}
    results = {i: {c["zoo"]: evaluate(c, rule) for c in calib + held} for i, rule in enumerate(grid)}
    names = [c["zoo"] for c in calib]
    out: dict[str, Any] = {"metric": metric, "own_board": all(c["own_board"] for c in cases)}
    for label, families in (("rule", None), ("rank_rule", ("rank_count", "rank_fraction"))):
        chosen = select(results, grid, names, families)
        lozo = []
        for z in names:
            r = select(results, grid, [n for n in names if n != z], families)
            got = evaluate(by_zoo[z], r["rule"])
            lozo.append({"zoo": z, "rule": r["rule"], **got})
        one_look = [{"zoo": c["zoo"], "rule": chosen["rule"], **evaluate(c, chosen["rule"])}
                    for c in held]
        out[label] = {"chosen": chosen, "lozo": lozo, "held_out": one_look}
    out["regret"] = {c["zoo"]: pick_regret(c) for c in calib + held}
    out["cases"] = calib + held
    return out


def summary(part: Mapping[str, Any], cases: Sequence[Mapping[str, Any]], metric: str
            ) -> dict[str, Any]:
    """The record of one rule (the protocol's 'reported per metric')."""
    rows = part["lozo"] + part["held_out"]
    sizes = [r["size"] for r in rows]
    fractions = [r["fraction"] for r in rows]
    held_names = [r["zoo"] for r in part["held_out"]]
    rule = part["chosen"]["rule"]
    return {
        "rule": rule, "text": rule_text(rule, metric),
        "hits": int(sum(r["hit"] for r in rows)), "zoos": len(rows),
        "hit_rate": float(np.mean([r["hit"] for r in rows])) if rows else None,
        "mean_size": float(np.mean(sizes)) if rows else None,
        "mean_size_fraction": float(np.mean(fractions)) if rows else None,
        "held_out_zoos": len(held_names),
        "in_sample": {"hit_rate": part["chosen"]["hit_rate"],
                      "mean_size_fraction": part["chosen"]["mean_fraction"],
                      "meets_target": part["chosen"]["meets"],
                      "zoos": len(part["lozo"])},
        "leave_one_out": {"hits": int(sum(r["hit"] for r in part["lozo"])),
                          "zoos": len(part["lozo"]),
                          "mean_size_fraction": float(np.mean([r["fraction"] for r in part["lozo"]]))},
        "held_out": {"hits": int(sum(r["hit"] for r in part["held_out"])), "zoos": len(held_names),
                     "mean_size_fraction": (float(np.mean([r["fraction"] for r in part["held_out"]]))
                                            if held_names else None),
                     "names": held_names},
    }


def metric_record(res: Mapping[str, Any]) -> dict[str, Any]:
    metric, cases = res["metric"], res["cases"]
    entry = summary(res["rule"], cases, metric)
    entry["rank_rule"] = summary(res["rank_rule"], cases, metric)
    held = [c["zoo"] for c in cases if c["held_out"]]
    regrets = [res["regret"][z] for z in held]
    entry["pick_regret_pp"] = percentile_summary(regrets)
    entry["rank_rule"]["pick_regret_pp"] = entry["pick_regret_pp"]
    entry["pick_regret_pp_all_zoos"] = percentile_summary(list(res["regret"].values()))
    entry["orders_boards"] = res["own_board"]
    entry["calibration_zoos"] = [c["zoo"] for c in cases if not c["held_out"]]
    entry["held_out_zoo_names"] = held
    entry["kinds"] = sorted({KIND_WORDS[c["kind"]] for c in cases} | {
        BOARD_KIND[c["board"]] for c in cases})
    entry["board_kinds"] = sorted({BOARD_KIND[c["board"]] for c in cases})
    return entry


# -- the results file ------------------------------------------------------------------------------

def _rule_cell(rule: Mapping[str, Any]) -> str:
    if rule["kind"] == "rank_count":
        return f"first {rule['k']}"
    if rule["kind"] == "rank_fraction":
        return f"first {100 * rule['fraction']:.0f}%"
    return f"band {rule['width']:g} {rule['units']}"


def _best(case: Mapping[str, Any]) -> str:
    t = case["truth"]
    i = int(np.nanargmax(t))
    return f"`{case['ids'][i]}` ({100 * t[i]:.1f}%)"


def zoo_section(table: pd.DataFrame) -> str:
    rows = []
    for zoo, z in table.groupby("zoo", sort=False):
        t = z["truth"].to_numpy(dtype=np.float64)
        best = z["model_id"].iloc[int(np.nanargmax(t))]
        rows.append([f"`{zoo}`", KIND_WORDS[z["kind"].iloc[0]], z["domain"].iloc[0],
                     f"{z['board'].iloc[0]} (`{z['ordering_metric'].iloc[0]}`)", len(z),
                     int(z["n_images"].iloc[0]), z["truth_metric"].iloc[0],
                     f"`{best}` ({100 * np.nanmax(t):.1f}%)",
                     "held out" if z["held_out"].iloc[0] else "calibration"])
    return harness.table(["zoo", "kind", "domain", "board (ordered by)", "models", "images",
                          "truth", "labels' best", "role"], rows, "lllllrlll")


def metric_section(res: Mapping[str, Any], entry: Mapping[str, Any]) -> list[str]:
    metric = res["metric"]
    lines = [f"### `{metric}`" + (" (orders the boards)" if res["own_board"] else ""), ""]
    for label, title in (("rule", "Rule"), ("rank_rule", "Rank rule")):
        part, e = res[label], (entry if label == "rule" else entry["rank_rule"])
        c = part["chosen"]
        lines.append(f"**{title}**: {e['text']} — in sample {100 * c['hit_rate']:.0f}% of "
                     f"{len(part['lozo'])} calibration zoos, mean size {100 * c['mean_fraction']:.0f}% "
                     f"of the zoo{'' if c['meets'] else ' (misses the 90% target)'}; leave one "
                     f"zoo out {e['leave_one_out']['hits']}/{e['leave_one_out']['zoos']}; held out "
                     f"{e['held_out']['hits']}/{e['held_out']['zoos']}.")
    lines += ["", "| zoo | role | rule chosen without it | hit | size | size / zoo | rank rule | "
              "hit | size | pick's regret (pp) |", "|---|---|---|---|---:|---:|---|---|---:|---:|"]
    by_rank = {r["zoo"]: r for r in res["rank_rule"]["lozo"] + res["rank_rule"]["held_out"]}
    for r in res["rule"]["lozo"] + res["rule"]["held_out"]:
        rr = by_rank[r["zoo"]]
        role = "held out (one look)" if any(h["zoo"] == r["zoo"] for h in res["rule"]["held_out"]) \
            else "leave one out"
        lines.append(f"| `{r['zoo']}` | {role} | {_rule_cell(r['rule'])} | "
                     f"{'yes' if r['hit'] else '**no**'} | {r['size']} | {100 * r['fraction']:.0f}% | "
                     f"{_rule_cell(rr['rule'])} | {'yes' if rr['hit'] else '**no**'} | {rr['size']} | "
                     f"{res['regret'][r['zoo']]:.1f} |")
    return lines + [""]


def top_set_section(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The Model Confidence Set of the boards' own metric beside the shortlist (a detail)."""
    rows = []
    for metric, res in results.items():
        if not res["own_board"]:
            continue
        hits, sizes = [], []
        for c in res["cases"]:
            top = c["in_top_set"]
            hits.append(holds_near_best(top, c["truth"], TOLERANCE_PP))
            sizes.append(top.sum() / max(1, np.isfinite(c["rank_scores"]).sum()))
        rows.append([f"`{metric}`", f"{sum(hits)}/{len(hits)}", f"{100 * np.mean(sizes):.0f}%"])
    return ["## The top set beside it", "",
            "The Model Confidence Set of the ordering metric's own noise (the report's detail): "
            "how often it held a model within 0.5 pp of the labels' best on the same zoos "
            "(calibration and, after the look, held-out), and its mean size.", "",
            harness.table(["metric", "held a near-best model", "mean size / zoo"], rows, "lrr"), ""]


def markdown(table: pd.DataFrame, results: Mapping[str, Any], record: Mapping[str, Any],
             look: bool, seconds: float) -> str:
    own = [m for m, r in results.items() if r["own_board"]]
    others = [m for m in results if m not in own]
    lines = [f"{seconds:.1f} s; {table['zoo'].nunique()} zoos, {len(table)} models"
             + ("" if look else " (--no-look: the held-out zoos were not read)") + ".", "",
             PROTOCOL.read_text().strip(), "",
             "**After the protocol was written** (before the one look): the pick whose regret is "
             "reported is the product's pick, `zoorank.decide.verdict.pick_row` (the first ranked "
             "model without any health flag, else the first without a blocking one), which landed "
             "on main after the protocol; the protocol said 'the board's first eligible model'. "
             "The two differ only on boards where a non-blocking flag (e.g. `failed:alpha_req`) "
             "sits on a model ranked above the pick. The shortlist rule itself is unchanged.", "",
             "## Zoos", "", zoo_section(table), "",
             "## Summary", "",
             "Per metric: the rule, its hits over the zoos each predicted by a rule chosen without "
             "it (leave one zoo out on the calibration zoos, plus the one look at the held-out "
             "zoos), apart and together, the mean size, and the pick's regret on the held-out "
             "zoos.", ""]
    rows = []
    for m in own + others:
        e = record["metrics"][m]
        lo, ho = e["leave_one_out"], e["held_out"]
        rr = e["pick_regret_pp"]
        rows.append([f"`{m}`" + (" (board)" if m in own else ""), e["text"],
                     f"{lo['hits']}/{lo['zoos']}", f"{ho['hits']}/{ho['zoos']}",
                     f"{e['hits']}/{e['zoos']} ({100 * e['hit_rate']:.0f}%)",
                     f"{e['mean_size']:.1f} ({100 * e['mean_size_fraction']:.0f}%)",
                     "—" if rr["median"] is None else f"{rr['median']:.1f} / {rr['p90']:.1f} "
                                                      f"(n {rr['zoos']})"])
    lines += [harness.table(["metric", "rule", "leave one out", "held out", "all",
                             "mean size (share of zoo)", "pick's regret on held-out zoos, "
                             "median / p90 (pp)"], rows, "lllllll"), ""]
    verdicts = []
    for m in own:
        ho = record["metrics"][m]["held_out"]
        if ho["zoos"]:
            rate = ho["hits"] / ho["zoos"]
            ok = rate >= TARGET and (ho["mean_size_fraction"] or 0) <= 0.5
            verdicts.append(f"* `{m}`: held out {ho['hits']}/{ho['zoos']} ({100 * rate:.0f}%), mean "
                            f"size {100 * ho['mean_size_fraction']:.0f}% of the zoo: "
                            f"**{'pass' if ok else 'fail'}** against the protocol's 90%.")
    if verdicts:
        lines += ["**The one look** (pass/fail as the protocol states it):", "", *verdicts, ""]
    lines += ["## Per metric", ""]
    for m in own + others:
        lines += metric_section(results[m], record["metrics"][m])
    lines += top_set_section(results)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", type=Path, default=TABLE)
    harness.results_option(p, "shortlist")
    p.add_argument("--record", type=Path, default=None,
                   help="write protocol 1's record here (the product's record is protocol 2's)")
    p.add_argument("--no-look", action="store_true",
                   help="drop the held-out zoos as the table is read (no look at them)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    table = pd.read_parquet(args.table)
    if "held_out_2" in table:  # zoos built later for protocol 2 are no part of protocol 1
        table = table[~table["held_out_2"].astype(bool)].reset_index(drop=True)
    look = not args.no_look
    if not look:
        table = table[~table["held_out"]].reset_index(drop=True)
    results = {}
    for metric, cases in zoo_cases(table).items():
        res = calibrate(metric, cases, look)
        if res is not None:
            results[metric] = res
    zoos = zoo_summaries(table)
    command = harness.command_line()
    record = {"generated_by": "benchmarks/science/shortlist_calibration.py", "command": command,
              "commit": harness.commit(), "date": str(datetime.date.today()),
              "tolerance_pp": TOLERANCE_PP, "target_hit_rate": TARGET,
              "max_fraction": MAX_FRACTION, "looked_at_held_out": look,
              "metrics": {m: metric_record(r) for m, r in results.items()}, "zoos": zoos}
    body = markdown(table, results, record, look, time.perf_counter() - start)
    print(body)
    harness.write_results(args.markdown, TITLE, body, command)
    if args.record is not None:
        args.record.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"record: {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
