"""The Ray Tune benchmark's figures from its cached per-epoch tables (``tune_benchmark_ray.py``),
and the results page. Pure functions on the tables; nothing here trains or reads labels beyond the cached
truth column.

Conventions: regret is in percentage points of kNN accuracy against the best trial of the full
grid at the full budget; an objective is maximised (the training loss is minimised); ASHA is
Ray's asynchronous successive halving as ``ray.tune.schedulers.ASHAScheduler`` runs it with one
trial at a time (a rung's cutoff is the ``1 - 1/rf`` quantile of the values the rung already
holds; a trial below it stops).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

#: the objectives compared (``train_loss`` is minimised, the others maximised)
CANDIDATES = ("rankme", "lidar", "rankme_aug", "twonn_id", "train_loss")
#: shown beside them where the trainer's projector is visible (the built-in trainers), not a
#: default candidate: a zoo of backbones cannot be ranked by it, so zoorank's pick is Tune's
DESCRIPTIVE = ("rankme_proj",)


def sign(objective: str) -> float:
    return -1.0 if objective == "train_loss" else 1.0


def rungs(max_t: int, grace: int, rf: float) -> list[int]:
    """ASHA's milestones (Ray's ``_Bracket``, one bracket)."""
    n = int(np.log(max_t / grace) / np.log(rf) + 1)
    return [int(grace * rf**k) for k in range(n)]


def simulate_asha(trajectories: list[list[float]], max_t: int, grace: int = 1,
                  rf: float = 2.0) -> list[int]:
    """Reports each trial makes under ASHA, trials run one at a time in the given order.

    ``trajectories``: each trial's objective at reports 1, 2, ... (maximised; NaN counts as no
    value in a rung's quantile, as Ray's ``nanpercentile``).
    """
    recorded: dict[int, list[float]] = {m: [] for m in rungs(max_t, grace, rf)}
    reports = []
    for values in trajectories:
        done = len(values)
        for it, value in enumerate(values, start=1):
            if it >= max_t:
                done = it
                break
            if it in recorded:
                held = recorded[it]
                stop = bool(held) and not np.all(np.isnan(held)) and value < np.nanpercentile(
                    held, (1 - 1 / rf) * 100)
                held.append(value)
                if stop:
                    done = it
                    break
        reports.append(done)
    return reports


def _trials(table: pd.DataFrame) -> list[pd.DataFrame]:
    """Each trial's per-epoch rows, in the order Tune created the trials."""
    return [g.sort_values("epoch") for _, g in sorted(table.groupby("order"), key=lambda x: x[0])]


def _value(rows: pd.DataFrame, objective: str, where: str = "tune") -> np.ndarray:
    col = objective if objective == "train_loss" else f"{where}_{objective}"
    if objective == "rankme_proj":
        col = "tune_projector_rankme"
    return sign(objective) * rows[col].to_numpy(float)


def _argbest(values: np.ndarray) -> int:
    v = np.where(np.isfinite(values), values, -np.inf)
    return int(np.argmax(v))


def space_figures(table: pd.DataFrame, objective: str, max_t: int, grace: int = 1,
                  rf: float = 2.0) -> dict:
    """Every figure of one space for one objective (regrets in pp, n = trials)."""
    trials = _trials(table)
    truth_final = np.array([t["knn_accuracy"].iloc[-1] for t in trials])
    best = float(np.nanmax(truth_final))
    regret = lambda acc: 100.0 * (best - float(acc))  # noqa: E731
    final = np.array([_value(t, objective)[-1] for t in trials])
    ok = np.isfinite(final) & np.isfinite(truth_final)
    tau = kendalltau(final[ok], truth_final[ok]).statistic if ok.sum() >= 3 else math.nan
    grid_pick = _argbest(final)
    # ASHA on this objective, trials one at a time in Tune's order
    reports = simulate_asha([list(_value(t, objective)) for t in trials], max_t, grace, rf)
    last = [t.iloc[r - 1] for t, r in zip(trials, reports)]
    asha_epochs = int(sum(reports))
    grid_epochs = int(sum(len(t) for t in trials))
    at_last = np.array([_value(t.iloc[[r - 1]], objective)[0] for t, r in zip(trials, reports)])
    tune_best = _argbest(at_last)
    fresh = at_last if objective in ("train_loss", "rankme_proj") else np.array(
        [_value(t.iloc[[r - 1]], objective, "fresh")[0] for t, r in zip(trials, reports)])
    zoo_pick = _argbest(fresh)
    # random search at equal compute: every subset of k full-budget trials, picked by objective
    k = max(1, asha_epochs // max_t)
    subsets = list(itertools.combinations(range(len(trials)), min(k, len(trials))))
    rand = [regret(truth_final[list(s)[_argbest(final[list(s)])]]) for s in subsets]
    # the labelled objective searched by ASHA
    lab_reports = simulate_asha([list(t["knn_accuracy"]) for t in trials], max_t, grace, rf)
    lab_last = np.array([t["knn_accuracy"].iloc[r - 1] for t, r in zip(trials, lab_reports)])
    loss = np.array([-t["train_loss"].iloc[-1] for t in trials])
    return {
        "n_trials": len(trials), "tau": float(tau), "grid_regret": regret(truth_final[grid_pick]),
        "asha_epochs": asha_epochs, "grid_epochs": grid_epochs,
        "asha_fraction": asha_epochs / grid_epochs,
        "tune_best_regret": regret(last[tune_best]["knn_accuracy"]),
        "zoo_pick_regret": regret(last[zoo_pick]["knn_accuracy"]),
        "random_search_regret": float(np.mean(rand)), "random_search_trials": k,
        "labelled_asha_regret": regret(lab_last[_argbest(lab_last)]),
        "labelled_asha_fraction": sum(lab_reports) / grid_epochs,
        "random_pick_regret": float(np.mean([regret(a) for a in truth_final])),
        "lowest_loss_regret": regret(truth_final[_argbest(loss)]),
        "best_accuracy": best, "reports": reports,
    }


#: the compute bound on ASHA's trial-epochs (a share of the grid's) an objective must keep
MAX_FRACTION = 0.6


def _choose(figures: dict[str, dict[str, dict]], spaces: list[str], key: str) -> str:
    """The candidate with the lowest median ``key`` over ``spaces`` among those whose ASHA keeps
    a median share of the grid's trial-epochs ≤ ``MAX_FRACTION`` (all, when none does); ties: the
    higher mean τ."""
    within = [o for o in figures
              if np.median([figures[o][s]["asha_fraction"] for s in spaces]) <= MAX_FRACTION]
    return min(within or list(figures),
               key=lambda o: (np.median([figures[o][s][key] for s in spaces]),
                              -np.nanmean([figures[o][s]["tau"] for s in spaces])))


def loso(figures: dict[str, dict[str, dict]], key: str = "zoo_pick_regret") -> list[dict]:
    """Leave one space out: the candidate :func:`_choose` picks on the other spaces, applied to
    the held-out one."""
    spaces = sorted(next(iter(figures.values())))
    folds = []
    for held in spaces:
        chosen = _choose(figures, [s for s in spaces if s != held], key)
        folds.append({"held_out": held, "chosen": chosen,
                      "regret": figures[chosen][held][key],
                      "fraction": figures[chosen][held]["asha_fraction"]})
    return folds


def choose_default(figures: dict[str, dict[str, dict]],
                   key: str = "zoo_pick_regret") -> str:
    """The protocol's choice on every space (what ships; its estimate is the held-out figure)."""
    return _choose(figures, sorted(next(iter(figures.values()))), key)


def asha_check(table: pd.DataFrame, run: dict) -> dict:
    """Real ASHA's reports per trial against the simulation (on the real run's own values, and
    on the FIFO grid's values of the same configurations)."""
    trials = sorted(run["trials"].items(), key=lambda kv: int(kv[0].rsplit("_", 1)[-1]))
    real = [len(t["trajectory"]) for _, t in trials]
    # on the real run's values: the prefix it reported is all the simulation needs
    own = simulate_asha([t["trajectory"] for _, t in trials], run["max_t"],
                        run["grace_period"], run["reduction_factor"])
    by_params = {json.dumps(json.loads(p), sort_keys=True): g.sort_values("epoch")
                 for p, g in table.groupby("params")}
    grid = [list(by_params[json.dumps(t["params"], sort_keys=True)][f"tune_{run['objective']}"])
            for _, t in trials]
    on_grid = simulate_asha(grid, run["max_t"], run["grace_period"], run["reduction_factor"])
    return {"n": len(real), "real": real, "simulated_own": own, "simulated_grid": on_grid,
            "agree_own": sum(a == b for a, b in zip(real, own)),
            "agree_grid": sum(a == b for a, b in zip(real, on_grid)),
            "seconds": run["seconds"]}


# ------------------------------------------------------------------------------------------------
# the results page


def _f(x: float, digits: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else \
        f"{x:.{digits}f}"


def _median(values) -> float:
    values = [v for v in values if math.isfinite(v)]
    return float(np.median(values)) if values else math.nan


def write_report(cache: Path, spaces: dict, out: Path, max_t: int = 6) -> dict:
    """Compute every figure from the cached tables and write the results page; returns them."""
    tables = {s: pd.read_parquet(cache / f"{s}.parquet") for s in spaces
              if (cache / f"{s}.parquet").exists()}
    if not tables:
        raise SystemExit(f"no cached space under {cache}")
    figures = {o: {s: space_figures(t, o, max_t) for s, t in tables.items()}
               for o in CANDIDATES}
    described = {o: {s: space_figures(t, o, max_t) for s, t in tables.items()
                     if t["tune_projector_rankme"].notna().all()} for o in DESCRIPTIVE}
    folds = loso(figures) if len(tables) >= 2 else []
    default = choose_default(figures)
    lines = [
        "# Label-free Tune under real Ray Tune, on three datasets",
        "",
        "Written by `benchmarks/science/tune_benchmark_ray.py` from what it measured (the "
        "per-epoch tables are cached beside this page, in `tune_benchmark_ray/`): searches run "
        "by `zoorank tune` and by `zoorank.integrations.ray_tune.search` on a local Ray, the "
        "companion of the in-process digits benchmark (`tune_benchmark.md`). Each search space "
        "is 8 "
        f"configurations × {max_t} epochs, every trial trained to the full budget (FIFO); the "
        "truth is the kNN accuracy (k = 20) of the backbone on held labels at every epoch. "
        "ASHA (grace period 1, reduction factor 2, one trial at a time) is replayed from the "
        "per-epoch reports the search made; two spaces were also searched by real ASHA to check "
        "the replay (below). Regret: percentage points of kNN accuracy below the best trial of "
        "the full grid.",
        "",
        f"Spaces measured: {len(tables)} ({', '.join(tables)}); trials per space: "
        f"{', '.join(str(figures['rankme'][s]['n_trials']) for s in tables)}.",
        "",
        "## The default objective, chosen by leaving one space out",
        "",
        "For each space, the candidate with the lowest median regret of zoorank's pick on ASHA's "
        "zoo over the *other* spaces, among those whose ASHA kept a median share of the grid's "
        f"trial-epochs ≤ {MAX_FRACTION:.0%} there (ties: the higher mean τ), is applied to it. "
        "Candidates: "
        + ", ".join(f"`{c}`" for c in CANDIDATES) + ".",
        "",
        "| held-out space | chosen on the others | its regret there (pp) | ASHA's trial-epochs "
        "vs the grid's |",
        "|---|---|---|---|",
    ]
    for f in folds:
        lines.append(f"| {f['held_out']} | `{f['chosen']}` | {_f(f['regret'])} | "
                     f"{f['fraction']:.0%} |")
    if folds:
        held = [f["regret"] for f in folds]
        lines += ["", f"Held-out median regret: **{_f(_median(held))} pp** (n = {len(held)} "
                  f"spaces; mean {_f(float(np.mean(held)))}, worst {_f(max(held))}); median "
                  "trial-epochs "
                  f"{_median([f['fraction'] for f in folds]):.0%} of the grid's. "
                  f"Chosen on all {len(tables)} spaces: `{default}`."]
    from zoorank.tune.config import ObjectiveSpec

    shipped = ObjectiveSpec().metric
    if shipped in figures:
        sz = [figures[shipped][s]["zoo_pick_regret"] for s in tables]
        lines += ["", f"The shipped default objective (`zoorank/tune/config.py`) is `{shipped}`: "
                  f"here the median regret of zoorank's pick on ASHA's zoo with it is "
                  f"{_f(_median(sz))} pp (n = {len(sz)} spaces, in-sample), against "
                  f"{_f(_median([figures[default][s]['zoo_pick_regret'] for s in tables]))} pp "
                  f"for `{default}` and "
                  f"{_f(_median([figures['lidar'][s]['zoo_pick_regret'] for s in tables]))} pp "
                  "for `lidar`, the former default."]
    d = figures[default]
    dz = [d[s]["zoo_pick_regret"] for s in tables]
    df = [d[s]["asha_fraction"] for s in tables]
    lines += [
        "",
        f"With `{default}` on every space (in-sample): median regret of zoorank's pick on "
        f"ASHA's zoo {_f(_median(dz))} pp (n = {len(dz)}), at a median {_median(df):.0%} of "
        "the grid's trial-epochs. Target: ≤ 1.5 pp at ≤ 60%: "
        + ("met." if _median(dz) <= 1.5 and _median(df) <= 0.6 else "not met.")
        + (f" Held out: {_f(_median(held))} pp — "
           + ("met." if _median(held) <= 1.5 else "not met.") if folds else ""),
        "",
        "Beside it (medians over the same spaces): a random pick "
        f"{_f(_median([figures[default][s]['random_pick_regret'] for s in tables]))} pp; the "
        "lowest final training loss of the full grid "
        f"{_f(_median([figures[default][s]['lowest_loss_regret'] for s in tables]))} pp; the "
        "training loss as ASHA's objective "
        f"{_f(_median([figures['train_loss'][s]['zoo_pick_regret'] for s in tables]))} pp at "
        f"{_median([figures['train_loss'][s]['asha_fraction'] for s in tables]):.0%} of the "
        "grid's trial-epochs (it barely prunes: a loss falls every epoch, so a rung rarely "
        f"stops a trial), which is over the {MAX_FRACTION:.0%} bound.",
        "",
        "## Every objective on every space",
        "",
        "τ: Kendall τ-b of the objective at the last epoch against the truth over the grid's "
        "trials. Grid: the regret of the objective's pick over the full grid. ASHA: its "
        "trial-epochs as a share of the grid's, the regret of Tune's best result (the best "
        "last-reported objective) and of zoorank's pick on the exported zoo (every trial's last "
        "checkpoint ranked by the same objective on a fresh probe set). Random search: the "
        "expected regret of the objective's pick among k full-budget trials, k = ASHA's "
        "trial-epochs ÷ the budget (every subset of k). Labelled: ASHA on the truth itself. "
        "`rankme_proj` (RankMe of the projector output, where the built-in trainers expose it) "
        "is shown but is no default candidate: a zoo of backbones cannot be ranked by it, so its "
        "zoorank pick is Tune's.",
        "",
        "| objective | space | τ | grid (pp) | ASHA epochs | Tune's best (pp) | "
        "zoorank's pick (pp) | random search (pp, k) | labelled ASHA (pp, epochs) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    shown = {**figures, **described}
    for o in shown:
        for s in shown[o]:
            f = shown[o][s]
            lines.append(
                f"| `{o}` | {s} | {_f(f['tau'])} | {_f(f['grid_regret'])} | "
                f"{f['asha_epochs']}/{f['grid_epochs']} ({f['asha_fraction']:.0%}) | "
                f"{_f(f['tune_best_regret'])} | {_f(f['zoo_pick_regret'])} | "
                f"{_f(f['random_search_regret'])} ({f['random_search_trials']}) | "
                f"{_f(f['labelled_asha_regret'])} ({f['labelled_asha_fraction']:.0%}) |")
        of = shown[o]
        lines.append(f"| `{o}` | **median** | {_f(_median([f['tau'] for f in of.values()]))} | "
                     f"{_f(_median([f['grid_regret'] for f in of.values()]))} | | "
                     f"{_f(_median([f['tune_best_regret'] for f in of.values()]))} | "
                     f"{_f(_median([f['zoo_pick_regret'] for f in of.values()]))} | | |")
    r = figures["rankme"]
    lines += [
        "",
        "## Baselines",
        "",
        "| space | best kNN accuracy | a random pick (pp, expected) | the lowest final training "
        "loss (pp) |",
        "|---|---|---|---|",
    ]
    for s in tables:
        lines.append(f"| {s} | {r[s]['best_accuracy']:.3f} | {_f(r[s]['random_pick_regret'])} | "
                     f"{_f(r[s]['lowest_loss_regret'])} |")
    lines.append(f"| **median** | | {_f(_median([r[s]['random_pick_regret'] for s in tables]))} "
                 f"| {_f(_median([r[s]['lowest_loss_regret'] for s in tables]))} |")
    checks = []
    for s in tables:
        path = cache / f"{s}.asha.json"
        if path.exists():
            checks.append((s, asha_check(tables[s], json.loads(path.read_text()))))
    lines += ["", "## Real ASHA against the replay", "",
              "Real ASHA runs (objective `rankme`, one trial at a time): reports per trial, in "
              "Tune's trial order, against the replay on the run's own reported values and on "
              "the FIFO grid's values of the same configurations.", "",
              "| space | real | replayed (own values) | replayed (grid's values) | agree | "
              "wall-clock (s) |", "|---|---|---|---|---|---|"]
    for s, c in checks:
        lines.append(f"| {s} | {c['real']} | {c['simulated_own']} | {c['simulated_grid']} | "
                     f"{c['agree_own']}/{c['n']} own, {c['agree_grid']}/{c['n']} grid | "
                     f"{c['seconds']:.0f} |")
    if not checks:
        lines.append("| (no real ASHA run finished) | | | | | |")
    cost, total = [], 0.0
    for s in tables:
        path = cache / f"{s}.cost.json"
        if path.exists():
            c = json.loads(path.read_text())
            cost.append(f"{s}: search {c['search']:.0f} s, scoring every epoch "
                        f"{c['scoring']:.0f} s")
            total = total + c["search"] + c["scoring"]
    lines += ["", "## Cost", "",
              "Measured wall-clock on a 2-core machine shared with other work (0.25 CPU per "
              "trial, the grid's 8 trials at a time; real ASHA one at a time): " + "; ".join(cost)
              + f"; {total / 60:.0f} min for the grids in all, plus the real ASHA runs' "
              f"{sum(c['seconds'] for _, c in checks) / 60:.0f} min."]
    out.write_text("\n".join(lines) + "\n")
    return {"figures": figures, "folds": folds, "default": default}
