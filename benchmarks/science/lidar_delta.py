"""LiDAR's δ against the label oracle on a finished store: does the regulariser decide agreement?

LiDAR whitens the between-sample scatter by the within-sample (augmentation) scatter Σ_w + δI
(spec B.2, ``specs/clid_lidar.md``). The spec's default δ = 1e-6 (absolute) is tiny next to the
Σ_w spectrum of a trained network, so directions in which a model has become nearly invariant to
the augmentations dominate the value (spec B.11 item 3: complete invariance gives Σ_b / δ). This
script recomputes LiDAR on a store's stored augmented embeddings for a grid of δ, absolute
(Σ_w + δI) and relative (Σ_w + δ·tr(Σ_w)/p·I), and prints Kendall τ-b [95% bootstrap CI over
models] against every oracle metric in the leaderboard (kNN, linear probe), over all models and
per family.

The zoo is the one the figures are read on: choosing δ by this table and reporting the same τ is
in-sample selection. Treat a δ that helps on one zoo as a hypothesis for the next.

Prints, never asserts. Examples (stores of ``zoorank demo`` and ``validate_ranking.py``)::

    .venv/bin/python benchmarks/science/lidar_delta.py zoorank-demo/store
    .venv/bin/python benchmarks/science/lidar_delta.py /tmp/zoorank-validate/cifar10/store --dataset cifar10
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import numpy as np

from zoorank.metrics.label_free.lidar import lidar
from zoorank.score.worker import load_augmented
from zoorank.stats.agreement import agreement
from zoorank.store import Store

ORACLES = ("knn_accuracy", "linear_probe_accuracy")
GRID = {"absolute": (1e-6, 1e-4, 1e-2, 1.0), "relative": (1e-6, 1e-3, 1e-2, 1e-1, 1.0)}


def _tau(values: np.ndarray, oracle: np.ndarray, bootstrap: int) -> str:
    if len(values) < 3:
        return "—"
    a = agreement(values, oracle, bootstrap=bootstrap, seed=0)
    return f"{a['kendall_tau']:+.2f} [{a['kendall_ci_low']:+.2f}, {a['kendall_ci_high']:+.2f}]"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("store", help="a store that went through `zoorank run` with an oracle")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--view", default=None, help="augmented view name (default: the store's one)")
    p.add_argument("--bootstrap", type=int, default=1000)
    harness.results_option(p, "lidar_delta")
    args = p.parse_args(argv)

    store = Store(args.store)
    board = store.read_frame("leaderboard")
    manifest = store.read_manifest()
    done = manifest[(manifest["dataset"] == args.dataset) & (manifest["status"] == "done")]
    view = args.view or next(v for v in done["view"].unique() if v != "clean")
    oracles = [o for o in ORACLES if f"{args.dataset}/{o}" in board]
    models = [m for m in board["model_id"] if ((done["view"] == view) & (done["model_id"] == m)).any()]
    families = board.set_index("model_id").loc[models, "family"].fillna("-").to_numpy()
    views = {m: load_augmented(store, args.dataset, view, m)[1] for m in models}
    n, q, d = next(iter(views.values())).shape
    about = (f"Store `{store.uri}`, dataset {args.dataset}, view {view} (n={n}, q={q}, d={d}), "
             f"{len(models)} models, oracles {', '.join(oracles)}, bootstrap {args.bootstrap}.")
    print(about)

    rows = []
    for mode, deltas in GRID.items():
        for delta in deltas:
            values = np.array([lidar(views[m], delta=delta, delta_mode=mode) for m in models])
            row = {"delta_mode": mode, "delta": f"{delta:g}"}
            for o in oracles:
                oracle = board.set_index("model_id").loc[models, f"{args.dataset}/{o}"].to_numpy(float)
                row[f"τ {o} all"] = _tau(values, oracle, args.bootstrap)
                for fam in sorted(set(families)):
                    sel = families == fam
                    row[f"τ {o} {fam}"] = _tau(values[sel], oracle[sel], args.bootstrap)
            rows.append(row)
            print(f"lidar_delta  {mode:8s} δ={delta:<6g}  " + "  ".join(
                f"{k.removeprefix('τ ')} {v}" for k, v in row.items() if k.startswith("τ")), flush=True)
    text = harness.table(list(rows[0]), [list(r.values()) for r in rows], "l" * len(rows[0]))
    print(text)
    harness.write_results(args.markdown, "lidar_delta — LiDAR's δ against the label oracle",
                          f"{about}\n\n{text}")


if __name__ == "__main__":
    main()
