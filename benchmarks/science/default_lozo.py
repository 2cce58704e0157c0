"""The default primary metric chosen out of sample: leave-one-zoo-out over the validation zoos
(issue 30, item 6), and the metrics' record against labels that the report shows (item 5).

For every zoo (a store of a finished ``zoorank run`` with the label oracle and
``score.resample_folds`` ≥ 2; ``NAME=PATH@FAMILY`` keeps only the models of one family, so the
UvA store gives its classifiers and its autoencoders as two zoos) and every candidate — each
resampled label-free metric and the two consensus orders of ``primary_evidence.py`` — this
computes, against the kNN oracle's accuracy:

* **regret**: the labels' best accuracy minus that of the candidate's leader (its point-best model
  among the unflagged ones; a tie of leaders, e.g. a seed ensemble scored by NC, counts their mean
  accuracy), in pp;
* **τ**: Kendall τ-b of the candidate's order against the accuracies;
* whether its **top set** (the RANK stage's MCS over the fold bootstrap, recomputed on the zoo's
  models by ``primary_evidence.candidates``) holds the labels' best model.

Then :func:`zoorank.metrics.primary.leave_one_zoo_out`: for each held-out zoo, the rule
(:func:`~zoorank.metrics.primary.order_by_record`: fewest failures — regret above
``REGRET_TOLERANCE`` — then lowest worst and mean regret, then highest mean τ) is applied to the
other zoos, and its pick's regret on the held-out zoo is reported beside every candidate's. Nothing
is fitted on the held-out zoo. Writes the markdown table and the record the report reads
(``zoorank/report/metric_record.json``)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/science/default_lozo.py \\
        demo=/tmp/lozo/demo/run.yaml digits=/tmp/lozo/digits/validate_run.json \\
        cifar10=/tmp/lozo/cifar10/validate_run.json \\
        uva_classifiers=/tmp/lozo/uva/run.yaml@classifier \\
        uva_autoencoders=/tmp/lozo/uva/run.yaml@autoencoder \\
        --markdown benchmarks/results/default_lozo.md --record zoorank/report/metric_record.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np
import pandas as pd
from primary_evidence import candidates, zoo_inputs
from scipy import stats

from zoorank.metrics.primary import (
    DEFAULT_COVERAGE,
    MIN_ZOOS,
    REGRET_TOLERANCE,
    default_for_coverage,
    leave_one_zoo_out,
)
from zoorank.stats.agreement import top1_regret

ORACLE = "knn_accuracy"
TITLE = "The default primary metric, chosen out of sample"

#: the in-sample default order of issue 24 (``primary_evidence.md`` of 2026-11-26), for comparison.
OLD_ORDER = ("nc", "alignment", "etran_energy", "rankme_aug", "uniformity", "clid",
             "cluster_learnability", "rankme", "coding_rate", "rankme_proj", "alpha_req",
             "rankme_norm", "mle_id", "twonn_id", "lidar")

#: what kind of zoo each validation zoo is (the report names the kinds with a record).
KINDS = {"demo": "SSL encoders", "digits": "SSL encoders", "cifar10": "SSL encoders",
         "uva_classifiers": "supervised classifiers", "uva_autoencoders": "autoencoders"}
DESCRIPTIONS = {
    "demo": "`zoorank demo`: 12 small CNNs (SimCLR/VICReg × 2 lr × 3 seeds) on digits",
    "digits": "validate_ranking.py --dataset digits: 12 small CNNs (SimCLR/VICReg × 2 lr × 3 "
              "seeds) on digits",
    "cifar10": "validate_ranking.py --dataset cifar10: 24 small CNNs (12 trials × epochs 2, 4) "
               "on 2,000 CIFAR-10 test images",
    "uva_classifiers": "UvA CIFAR-10 classifiers (ResNet, ResNetPreAct, GoogleNet, DenseNet) on "
                       "1,000 CIFAR-10 test images",
    "uva_autoencoders": "UvA CIFAR-10 autoencoders (latents 64, 128, 256, 384) on 1,000 "
                        "CIFAR-10 test images"}


def leader_regret(order: np.ndarray, accuracy: np.ndarray, blocked: np.ndarray) -> float:
    """pp between the best accuracy and the mean accuracy of the candidate's leader(s): the
    models with the highest oriented value among the unblocked ones with a value; NaN when the
    candidate ranks none."""
    ok = np.isfinite(order) & np.isfinite(accuracy) & ~blocked
    if not ok.any():
        return math.nan
    _, picked, _ = top1_regret(order[ok], accuracy[ok])  # the mean accuracy of tied leaders
    return float(100 * (np.nanmax(accuracy) - picked))


def zoo_rows(name: str, spec: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    path, _, family = spec.partition("@")
    config, _, board, folds, blocked = zoo_inputs(Path(path))
    if family:
        keep = (board["family"].astype(str) == family).to_numpy()
        if not keep.any():
            raise SystemExit(f"{name}: no model of family {family!r} in {path}")
        board = board[keep].reset_index(drop=True)
        folds = folds[folds["model_id"].isin(set(board["model_id"]))]
        blocked = {ds: b[keep] for ds, b in blocked.items()}
    (dataset,) = [d.name for d in config.datasets]
    ids = list(board["model_id"])
    acc = board[f"{dataset}/{ORACLE}"].to_numpy(dtype=np.float64)
    best = ids[int(np.nanargmax(acc))]
    cands = candidates(config, board, folds, blocked, dataset)
    ranked = {m: int(np.isfinite(c["order"]).sum()) for m, c in cands.items()}
    old = default_for_coverage([m for m in OLD_ORDER if m in cands], ranked)
    rows = []
    for cand, c in cands.items():
        order = np.asarray(c["order"], dtype=np.float64)
        ok = np.isfinite(order) & np.isfinite(acc)
        tau = stats.kendalltau(order[ok], acc[ok]).statistic if ok.sum() >= 3 else math.nan
        # a metric ranking under DEFAULT_COVERAGE of the zoo (NC without seed ensembles) did
        # not run on it as an order of the zoo
        runs = ok.sum() >= DEFAULT_COVERAGE * len(ids)
        top = [m for m, t in zip(ids, c["top"]) if t]
        rows.append({"zoo": name, "candidate": cand, "ranked": int(ok.sum()),
                     "regret": leader_regret(order, acc, blocked[dataset]) if runs else math.nan,
                     "tau": float(tau) if runs else math.nan,
                     "top_size": len(top) if runs else 0,
                     "top_holds_best": bool(best in top) if runs else None})
    info = {"zoo": name, "run": spec, "models": len(ids), "best": best,
            "best_accuracy": float(np.nanmax(acc)), "old_default": old,
            "flagged": [m for m, b in zip(ids, blocked[dataset]) if b],
            "kind": KINDS.get(name, "unknown"), "description": DESCRIPTIONS.get(name, spec)}
    return rows, info


def _cell(r: pd.Series | None) -> str:
    if r is None or not np.isfinite(r["regret"]):
        return "not run"
    return f"{r['regret']:.1f} / {r['tau']:+.2f}"


def markdown(table: pd.DataFrame, infos: list[dict[str, Any]], lozo: dict[str, Any],
             seconds: float) -> str:
    """The results file's body (its header comes from the harness)."""
    zoos = [i["zoo"] for i in infos]
    held = lozo["held_out"].set_index("zoo")
    lines = [f"{seconds:.0f} s (reads the stores and recomputes the top sets from their stored "
             "fold values).", "",
             f"Oracle: kNN accuracy on the zoo's labelled test images. **Regret** (pp): the "
             f"labels' best accuracy minus that of the candidate's leader (its point-best "
             f"unflagged model; tied leaders count their mean). A candidate *fails* on a zoo "
             f"when its regret exceeds {REGRET_TOLERANCE:g} pp. **Rule** "
             "(`zoorank.metrics.primary.order_by_record`; its keys and the 2 pp tolerance were "
             "fixed before the first run; after a trial on the two UvA zoos alone, candidates "
             "with too few zoos were put in the rule's order instead of name order, and the "
             "consensus orders made unselectable): fewest failures, then lowest worst regret, "
             "then lowest mean regret, then "
             f"highest mean τ, over the zoos where the candidate ran (at least {MIN_ZOOS}). "
             "*not run*: the candidate ranks under "
             f"{DEFAULT_COVERAGE:.0%} of the zoo's models (NC without seed ensembles) or was "
             "not computed.", "", "## Zoos", ""]
    for i in infos:
        lines.append(f"* **{i['zoo']}** ({i['kind']}): {i['description']}; {i['models']} "
                     f"models, `{i['run']}`; labels' best `{i['best']}` "
                     f"({100 * i['best_accuracy']:.1f}%); flagged: "
                     f"{', '.join(i['flagged']) or 'none'}; the earlier in-sample default "
                     f"picks `{i['old_default']}`.")
    lines += ["", "## Leave one zoo out", "",
              "Each row: the rule applied to the other zoos, its order's first three, its pick "
              "(the first of that order that ran on the held-out zoo) and the pick's regret and "
              "τ on the held-out zoo.", ""]
    by = table.set_index(["zoo", "candidate"])
    rows = []
    for info in infos:
        z, r = info["zoo"], held.loc[info["zoo"]]
        old = info["old_default"]
        old_regret = by.loc[(z, old), "regret"] if (z, old) in by.index else math.nan
        rows.append([z, f"{', '.join(f'`{c}`' for c in r['order'][:3])} …", f"`{r['pick']}`",
                     f"{r['regret']:.1f}", f"{r['tau']:+.2f}", "yes" if r["failed"] else "no",
                     f"`{old}`, {old_regret:.1f}"])
    lines.append(harness.table(["held-out zoo", "order from the other zoos", "pick",
                                "held-out regret (pp)", "held-out τ", "fails",
                                "earlier in-sample default: pick, regret (pp)"], rows, "l" * 7))
    regrets = held["regret"].to_numpy(dtype=np.float64)
    lines += ["", f"Held-out regret of the rule: mean {np.nanmean(regrets):.1f} pp, worst "
              f"{np.nanmax(regrets):.1f} pp over {len(zoos)} zoos; failed out of sample: "
              f"{', '.join(f'`{c}`' for c in lozo['failed']) or 'none'}.", "",
              "## Every candidate's regret and τ on each zoo", "",
              "Per cell: regret of the leader (pp) / τ against kNN — for a fixed candidate, its "
              "held-out figure on that zoo (nothing is fitted). Sorted by the rule over all zoos "
              "(failed out of sample last); the consensus orders, which no primary metric can "
              "name, last.", ""]
    rows = []
    shown = [*lozo["order"], *sorted(c for c in set(table["candidate"]) if c.startswith("consensus"))]
    for cand in shown:
        sub = table[table["candidate"] == cand].set_index("zoo")
        cells = [_cell(sub.loc[z] if z in sub.index else None) for z in zoos]
        ran = sub[np.isfinite(sub["regret"].to_numpy(dtype=np.float64))]
        fails = int((ran["regret"] > REGRET_TOLERANCE).sum())
        hits = int(ran["top_holds_best"].astype(bool).sum())
        name = f"`{cand}`" + (" (not selectable)" if cand.startswith("consensus") else "")
        rows.append([name, *cells, f"{len(ran)} of {len(zoos)}", fails,
                     f"{ran['tau'].mean():+.2f} over {len(ran)}", f"{hits} of {len(ran)}"])
    header = ["candidate", *zoos, "zoos run", "failures", "mean τ (over zoos run)",
              "top set held the best"]
    lines += [harness.table(header, rows, "l" * len(header)), "",
              f"Default order chosen: {', '.join(f'`{c}`' for c in lozo['order'])}.", ""]
    return "\n".join(lines)


def record(table: pd.DataFrame, infos: list[dict[str, Any]], lozo: dict[str, Any],
           command: str, commit: str) -> dict[str, Any]:
    """The metric record the report reads (``zoorank.report.metric_record_page``)."""
    held = lozo["held_out"]
    metrics: dict[str, Any] = {}
    for cand, sub in table.groupby("candidate"):
        if cand.startswith("consensus"):
            continue
        zoos = {}
        for r in sub.itertuples(index=False):
            if not np.isfinite(r.regret):
                continue
            zoos[r.zoo] = {"tau": float(r.tau), "regret_pp": float(r.regret),
                           "top_set_holds_best": bool(r.top_holds_best),
                           "top_set_size": int(r.top_size)}
        metrics[cand] = {"zoos": zoos,
                         "not_run": [i["zoo"] for i in infos if i["zoo"] not in zoos],
                         "picked_out_of_sample_on": list(held.loc[held["pick"] == cand, "zoo"]),
                         "failed_out_of_sample": cand in lozo["failed"]}
    return {"generated_by": "benchmarks/science/default_lozo.py", "command": command, "commit": commit,
            "date": str(datetime.date.today()), "oracle": ORACLE,
            "regret_tolerance_pp": REGRET_TOLERANCE,
            "zoos": {i["zoo"]: {"kind": i["kind"], "models": i["models"],
                                "description": i["description"]} for i in infos},
            "default_order": lozo["order"],
            "failed_out_of_sample": lozo["failed"], "metrics": metrics}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("zoos", nargs="+", help="NAME=RUN_YAML[@FAMILY] (a finished run's config or "
                                           "validate_ranking.py's validate_run.json)")
    harness.results_option(p, "default_lozo")
    p.add_argument("--record", help="write the metric record (JSON) here")
    args = p.parse_args()
    start = time.perf_counter()
    rows, infos = [], []
    for item in args.zoos:
        name, _, spec = item.partition("=")
        r, info = zoo_rows(name, spec)
        rows += r
        infos.append(info)
    table = pd.DataFrame(rows)
    # consensus orders are shown beside the metrics but cannot order a board (no primary metric
    # names them): the rule chooses among the metrics only
    lozo = leave_one_zoo_out(table[~table["candidate"].str.startswith("consensus")])
    command = harness.command_line()
    body = markdown(table, infos, lozo, time.perf_counter() - start)
    print(body)
    harness.write_results(args.markdown, TITLE, body, command)
    if args.record:
        Path(args.record).write_text(json.dumps(record(table, infos, lozo, command,
                                                       harness.commit()),
                                                indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
