"""Build the units table: independent checkpoint sets with every label-free value and the truth.

A *unit* is a set of checkpoints trained independently of every other unit's; the same networks
on another domain are the same unit. Two sources:

* **fixed-budget SSL hyperparameter sweeps** (``ssl_sweeps.SWEEPS``; ``kind`` = "hyperparameter
  sweep"), trained here in plain torch, one thread, cached: each checkpoint is evaluated on the
  dataset's ranked images with the product's own code, ``zoorank.metrics.suite.label_free_suite``
  (SCORE's per-model suite, every registered label-free metric at its registered settings; the
  augmented view is the product's ``simclr`` recipe on 128 images × 4 views,
  ``zoorank.data.views.make_views``) and the pool metric CLID from its registration's ``combine``
  over the unit's checkpoints. Added beside them: LiDAR and RankMe(aug) by the LiDAR paper's
  protocol (``lidar_paper``, ``rankme_aug_paper``: the method's own training augmentation at the
  model's strength, n = 500 images > p, q = 10 views, on the representation). The truth is the
  label oracle's kNN accuracy (k = 20, ``oracle_split`` half/half, seed 0), on the last checkpoint
  (``truth``) and on the one an epoch before (``truth_prev_epoch``); the few-label columns
  ``few_knn_n<N>_s<S>`` are ``knn_few_label`` on N labels of the oracle's train half (seed S).
* **the validation zoos' checkpoint sets** (``validation_zoos.parquet``, built by
  ``build_validation_zoos.py`` through the product pipeline), carried over with a ``unit``.

One command builds it all, resumable (a unit whose rows are cached, or in the committed table, is
skipped; each trained checkpoint is cached)::

    PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_units.py            # every unit
    PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_units.py --list
    PYTHONPATH=. .venv/bin/python benchmarks/zoos/build_units.py --only simclr-digits-lr

Cache: ``$ZOORANK_UNITS_CACHE`` (default ``~/.cache/zoorank-units``): ``data/``, ``ckpt/<unit>/``
(safetensors of the last and the previous epoch, a JSON of losses and seconds), ``rows/<unit>.parquet``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness  # noqa: E402,F401  (puts the groups, ssl_sweeps' among them, on the path)
import ssl_sweeps  # noqa: E402

HERE = Path(__file__).resolve().parent

CACHE = Path(os.environ.get("ZOORANK_UNITS_CACHE", Path.home() / ".cache" / "zoorank-units"))
TABLE = HERE / "units.parquet"
VALIDATION = HERE / "validation_zoos.parquet"
#: LiDAR paper protocol on these small encoders: n > p (p ≤ 64), q = 10 (SimCLR/VICReg's q)
LIDAR_N, LIDAR_Q = 500, 10
PRODUCT_VIEW = ("simclr", 128, 4)
FEW_LABELS = (20, 50, 100, 200)
FEW_SEEDS = (0, 1, 2)
SEED = 0

#: validation zoo → its unit (the same networks on other domains share one)
CARRIED_UNITS = {
    **{z: "cifar10-classifiers" for z in (
        "cls-cifar10-clean", "cls-cifar10-contrast", "cls-cifar10-defocus_blur",
        "cls-cifar10-frost", "cls-cifar10-gaussian_noise", "cls-cifar10-impulse_noise",
        "cls-cifar10-jpeg_compression", "cls-cifar10-motion_blur", "cls-cifar10-pixelate",
        "cls-cifar10-snow", "cls-cifar10-spatter", "cls-cifar10-speckle_noise",
        "cls-cifar10-zoom_blur", "enc-cifar10-clean", "enc-cifar10-gaussian_noise",
        "enc-cifar10-snow", "enc-cifar10-zoom_blur")},
    "ssl-cifar10": "ssl-cifar10", "ssl-cifar10-gaussian_noise": "ssl-cifar10",
    "ssl-cifar10-tinyimagenet": "ssl-cifar10",
    "ssl-digits": "ssl-digits", "ssl-fashion": "ssl-fashion", "ssl-tinyimagenet": "ssl-tinyimagenet",
    "ae-cifar10": "ae-cifar10", "ae-digits": "ae-digits", "ae-fashion": "ae-fashion",
    "ae-uva-cifar10": "ae-uva", "ae-uva-tinyimagenet": "ae-uva",
    "sweep-cls-cifar10": "sweep-cls-cifar10",
    "sweep-cls-fashion": "sweep-cls-fashion", "sweep-cls-fashion-noise": "sweep-cls-fashion",
    "sweep-ssl-fashion": "sweep-ssl-fashion",
    "traj-cls-fashion": "traj-cls-fashion", "traj-ssl-cifar10": "traj-ssl-cifar10",
}
#: the final epoch of a validation SSL search's trials (a checkpoint id without ``-r<k>``)
SEARCH_EPOCHS = {"traj-ssl-cifar10": 10, "sweep-ssl-fashion": 2}


# -- carried-over units ----------------------------------------------------------------------------

def _meta(zoo: str, model_id: str) -> dict[str, Any]:
    """epochs / steps / width parsed from a validation zoo's model id (None where it says none)."""
    out: dict[str, Any] = {"epochs": None, "steps": None, "width": None}
    if m := re.search(r"-e(\d+)$", model_id):
        out["epochs"] = int(m.group(1))
    elif m := re.search(r"-r0*(\d+)$", model_id):
        out["epochs"] = int(m.group(1))
    elif zoo.startswith(("ssl-", "traj-ssl", "sweep-ssl")):
        out["epochs"] = SEARCH_EPOCHS.get(zoo, 3)
    if m := re.search(r"-s(\d+)$", model_id):
        if zoo.startswith("traj-cls"):
            out["steps"] = int(m.group(1))
    if m := re.search(r"(?:^|-)w(\d+)", model_id):
        out["width"] = int(m.group(1))
    elif m := re.match(r"ae-?(\d+)", model_id):
        out["width"] = int(m.group(1))
    return out


def carried_rows() -> pd.DataFrame:
    """The validation zoos' rows with ``unit`` and the shared columns (nothing recomputed)."""
    frame = pd.read_parquet(VALIDATION)
    missing = sorted(set(frame["zoo"]) - set(CARRIED_UNITS))
    if missing:
        raise ValueError(f"validation zoos without a unit: {missing}")
    frame = frame.copy()
    frame["unit"] = frame["zoo"].map(CARRIED_UNITS)
    meta = pd.DataFrame([_meta(z, m) for z, m in zip(frame["zoo"], frame["model_id"], strict=True)])
    for col in meta:
        frame[col] = meta[col].astype("Int64").to_numpy()
    frame["method"] = np.where(frame["kind"] == "ssl", frame["family"], None)
    frame["dataset"] = frame["domain"]
    frame["n_params"] = pd.array([pd.NA] * len(frame), dtype="Int64")
    frame["final_loss"] = np.nan
    frame["truth_prev_epoch"] = np.nan
    # their designs were seen by earlier protocols: every carried unit calibrates; the one look of
    # the unit protocol is on the sweeps of held_out_units.md (the zoos' old flags stay as they were)
    frame["role"] = "calibration"
    frame["built_after"] = None
    frame["source"] = "validation_zoos.parquet (product pipeline: embed → score → rank)"
    return frame


# -- sweep units -----------------------------------------------------------------------------------

def _save(state: dict[str, Any], path: Path) -> None:
    from safetensors.torch import save_file

    tmp = path.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp))
    tmp.rename(path)


def _load(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path))


def trained(sweep: ssl_sweeps.Sweep, i: int, data: dict[str, np.ndarray]) -> dict[str, Any]:
    """Setting ``i`` of ``sweep``, trained once and cached (``ckpt/<unit>/<model>``)."""
    folder = CACHE / "ckpt" / sweep.name
    mid = sweep.model_id(i)
    info_path = folder / f"{mid}.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        return {**info, "state": _load(folder / f"{mid}.safetensors"),
                "prev": _load(folder / f"{mid}-prev.safetensors")}
    folder.mkdir(parents=True, exist_ok=True)
    out = ssl_sweeps.train(sweep, i, data, seed=1000 + i)
    _save(out["state"], folder / f"{mid}.safetensors")
    _save(out["prev"], folder / f"{mid}-prev.safetensors")
    info = {k: v for k, v in out.items() if k not in ("state", "prev")}
    info_path.write_text(json.dumps(info, indent=1))
    return out


def product_views(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The product's augmented view of the ranked images: recipe ``simclr``, 128 samples × 4
    views (``select_subset`` salt 1 and ``make_views`` with the run seed, as EMBED does)."""
    from PIL import Image

    from zoorank.data.sources import select_subset
    from zoorank.data.views import ViewGeometry, make_views

    recipe, samples, q = PRODUCT_VIEW
    ids = select_subset(np.arange(len(images)), samples, SEED, salt=1)
    geo = ViewGeometry(images.shape[1], "bilinear", 1.0)
    views = np.stack([np.stack(make_views(Image.fromarray(images[i]), int(i), recipe, geo, q, SEED))
                      for i in ids])  # samples, q, H, W, 3
    return views, ids


def evaluate(sweep: ssl_sweeps.Sweep, state: dict[str, Any], data: dict[str, np.ndarray],
             pviews: np.ndarray, strength: float) -> dict[str, float]:
    """Every label-free value of one checkpoint (SCORE's suite + the paper-protocol LiDAR)."""
    import torch

    from zoorank.metrics import lidar, rankme, registry
    from zoorank.metrics.suite import label_free_suite
    from zoorank.tune.models import small_cnn

    clean = ssl_sweeps.embed(state, sweep, data["eval"])
    n_aug, q = pviews.shape[:2]
    views = ssl_sweeps.embed(state, sweep, pviews.reshape(-1, *pviews.shape[2:]))
    views = views.reshape(n_aug, q, -1)
    names = [m for m in registry.config_names() if m != registry.ensemble_metric().config_name]
    out = {r["metric"]: r["value"] for r in label_free_suite(clean, views, names, seed=SEED)}
    own, _ = ssl_sweeps.own_views(data["eval"], sweep.dataset, strength, LIDAR_N, LIDAR_Q)
    net = small_cnn(width=sweep.width, depth=sweep.depth)
    net.load_state_dict(state)
    net.eval()
    with torch.inference_mode():
        E = net(own).numpy().astype(np.float64).reshape(LIDAR_N, LIDAR_Q, -1)
    settings = registry.info("lidar").kwargs(None, SEED)
    try:
        out["lidar_paper"] = float(lidar(E, **settings))
        out["rankme_aug_paper"] = float(rankme(E.reshape(-1, E.shape[-1]), eps=settings["eps"]))
    except ValueError:
        out["lidar_paper"] = out["rankme_aug_paper"] = float("nan")
    out["_clean"] = clean  # type: ignore[assignment]
    return out


def truth_columns(Z: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """kNN accuracy on the oracle's split, and knn_few_label at each few-label budget."""
    from zoorank.metrics import knn_accuracy, knn_few_label
    from zoorank.metrics.few_label.oracle_metrics import oracle_split
    from zoorank.oracle.budget import stratified_subset

    tr, te, _ = oracle_split(np.arange(len(y)), y, 0.5, SEED)
    out = {"truth": knn_accuracy(Z[tr], y[tr], Z[te], y[te], k=20)}
    for n in FEW_LABELS:
        for s in FEW_SEEDS:
            sub = tr[stratified_subset(y[tr], n // 10, s)]
            out[f"few_knn_n{n}_s{s}"] = knn_few_label(Z[sub], y[sub])
    return out


def sweep_rows(sweep: ssl_sweeps.Sweep, built_after: str | None) -> pd.DataFrame:
    """Train (cached) and evaluate every checkpoint of one sweep: its rows of the table."""
    import torch

    from zoorank.metrics import knn_accuracy, registry
    from zoorank.metrics.few_label.oracle_metrics import oracle_split

    torch.set_num_threads(1)
    start = time.perf_counter()
    data = ssl_sweeps.load_dataset(sweep.dataset, CACHE)
    pviews, _ = product_views(data["eval"])
    y = data["eval_y"]
    tr, te, _ = oracle_split(np.arange(len(y)), y, 0.5, SEED)
    rows, train_seconds = [], 0.0
    for i in range(len(sweep.settings)):
        run = trained(sweep, i, data)
        train_seconds += run["seconds"]
        p = run["params"]
        values = evaluate(sweep, run["state"], data, pviews, p["strength"])
        clean = values.pop("_clean")
        prev = ssl_sweeps.embed(run["prev"], sweep, data["eval"])
        row = {"model_id": sweep.model_id(i), **values, **truth_columns(clean, y),
               "truth_prev_epoch": knn_accuracy(prev[tr], y[tr], prev[te], y[te], k=20),
               "final_loss": run["losses"][-1], "loss_prev_epoch": run["losses"][-2],
               "n_params": run["n_params"], "embed_dim": run["embed_dim"],
               "train_seconds": run["seconds"],
               **{f"hp_{k}": v for k, v in p.items()}}
        rows.append(row)
    frame = pd.DataFrame(rows)
    for pool in ("clid", "clid_family"):
        m = registry.REGISTRY[pool]
        terms = [frame[t].to_numpy(dtype=np.float64) for t in m.requires]
        ok = np.all([np.isfinite(t) for t in terms], axis=0)
        value = np.full(len(frame), np.nan)
        if ok.sum() >= 2:
            value[ok] = m.combine(*[t[ok] for t in terms], **m.kwargs(None, SEED))
        frame[pool] = value
    frame.insert(0, "unit", sweep.name)
    frame.insert(1, "zoo", sweep.name)
    frame["kind"] = "hyperparameter sweep"
    frame["board"] = "embeddings"
    frame["domain"] = ssl_sweeps.DATASET_NAMES[sweep.dataset]
    frame["dataset"] = sweep.dataset
    frame["method"] = sweep.method
    frame["family"] = sweep.method
    frame["varies"] = sweep.varies
    frame["epochs"] = sweep.epochs
    frame["width"] = sweep.width
    frame["n_models"] = len(frame)
    frame["n_images"] = len(y)
    frame["truth_metric"] = "knn_accuracy"
    frame["knn_accuracy"] = frame["truth"]
    frame["role"] = "held_out" if sweep.held_out else "calibration"
    frame["built_after"] = built_after if sweep.held_out else None
    frame["source"] = "build_units.py (SCORE's label_free_suite on embeddings computed here)"
    frame["build_seconds"] = time.perf_counter() - start
    frame["train_seconds_unit"] = train_seconds
    return frame


# -- the table -------------------------------------------------------------------------------------

def committed_units() -> dict[str, pd.DataFrame]:
    if not TABLE.exists():
        return {}
    frame = pd.read_parquet(TABLE)
    frame = frame[frame["kind"] == "hyperparameter sweep"]
    return {u: g for u, g in frame.groupby("unit", sort=False)}


def held_out_commit() -> str | None:
    """The commit that added held_out_units.md (the held-out units are built after it)."""
    try:
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h", "--",
                              "held_out_units.md"], cwd=HERE, text=True, capture_output=True,
                             check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out[-1] if out else None


def build_unit(name: str, force: bool = False) -> pd.DataFrame:
    (sweep,) = [s for s in ssl_sweeps.SWEEPS if s.name == name]
    path = CACHE / "rows" / f"{name}.parquet"
    if path.exists() and not force:
        return pd.read_parquet(path)
    after = held_out_commit()
    if sweep.held_out and after is None:
        raise SystemExit(f"{name} is held out: commit benchmarks/zoos/held_out_units.md first")
    frame = sweep_rows(sweep, after)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path)
    return frame


def write_table(built: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Carried rows + every built sweep (cache first, else the committed table's rows)."""
    sweeps = [built[s.name] for s in ssl_sweeps.SWEEPS if s.name in built]
    frame = pd.concat([carried_rows(), *sweeps], ignore_index=True)
    frame["unit_kind"] = frame.groupby("unit")["kind"].transform("first")
    frame.to_parquet(TABLE)
    return frame


def _work(name: str) -> str:
    t0 = time.perf_counter()
    rows = build_unit(name)
    return f"{name}: {len(rows)} models, {time.perf_counter() - t0:.0f} s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", metavar="UNIT")
    p.add_argument("--list", action="store_true")
    p.add_argument("--workers", type=int, default=2, help="parallel processes (default 2)")
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args(argv)
    names = [s.name for s in ssl_sweeps.SWEEPS]
    committed = committed_units()
    cached = {n for n in names if (CACHE / "rows" / f"{n}.parquet").exists()}
    if args.list:
        for s in ssl_sweeps.SWEEPS:
            state = "cached" if s.name in cached else "committed" if s.name in committed else ""
            print(f"{s.name:<26} {s.method:<7} {s.dataset:<8} w{s.width:<3} {len(s.settings)} "
                  f"× {s.epochs} ep  {'held out' if s.held_out else '':<8} {state:<9} {s.varies}")
        print(f"+ {len(set(CARRIED_UNITS.values()))} carried units of validation_zoos.parquet")
        return 0
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        raise SystemExit(f"--only: unknown unit(s) {unknown}; units: {names}")
    todo = [n for n in (args.only or names) if n not in cached and n not in committed]
    # the held-out units last: calibration units first, in the list's order
    todo.sort(key=lambda n: next(s.held_out for s in ssl_sweeps.SWEEPS if s.name == n))
    if not args.table_only and todo:
        import multiprocessing as mp

        print(f"[{time.strftime('%H:%M:%S')}] building {len(todo)} units: {todo}", flush=True)
        ctx = mp.get_context("spawn")
        with ctx.Pool(max(1, min(args.workers, len(todo)))) as pool:
            for line in pool.imap(_work, todo):
                print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)
                done = {n: pd.read_parquet(CACHE / "rows" / f"{n}.parquet") for n in names
                        if (CACHE / "rows" / f"{n}.parquet").exists()}
                write_table({**committed, **done})
    done = {n: pd.read_parquet(CACHE / "rows" / f"{n}.parquet") for n in names
            if (CACHE / "rows" / f"{n}.parquet").exists()}
    frame = write_table({**committed, **done})
    print(f"table: {TABLE} ({frame['unit'].nunique()} units, {len(frame)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
