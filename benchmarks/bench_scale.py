"""SCALE: hundreds of small checkpoints through the whole pipeline (embed → score → rank → report).

1. **Zoo** (cached under ``/tmp/zoorank-bench-scale``, never in the repository): real SSL checkpoints
   from ``zoorank tune`` on scikit-learn digits (small_cnn width 8, SimCLR and VICReg × 3 learning
   rates × 3 seeds, ``export_epochs: true`` so every per-epoch checkpoint of every trial is a zoo
   entry: 18 trials × ⌈models / 18⌉ epochs), ordered by seed ensemble. ``--zoo random`` writes
   seeded random-init small_cnn safetensors files instead (no training; what ``--quick`` uses).
2. **Scale**: the whole pipeline on digits (1,797 clean images + a 200 × 4 augmented view, every
   label-free metric, kNN oracle) for the first ``--subset`` models and for all ``--models``, each in
   a fresh store, stage by stage in this process on one local Ray (started beforehand and warmed by
   a 3-model run, both timed apart). Per stage: wall and CPU seconds (summed over the driver and
   its local Ray), per model and the marginal cost of one more model between the two sizes (with
   the fixed cost it implies), EMBED's start-up per actor pool against its steady state and against
   one pool (the default chunking), peak memory (the driver's RSS, and the summed RSS of its
   process tree: shared pages count once per process, so an upper bound). The linear probe is
   timed on one model in this process and extrapolated.
3. **Kill and resume**: ``python -m zoorank run`` as a subprocess, SIGKILLed (with the Ray it
   started) once the manifest lists half the models as embedded, rerun, SIGKILLed again once
   ``metrics`` holds half the models, rerun to the end, rerun once more (nothing to do).
   Reports the entries and models redone (shard mtimes and manifest seconds; metric rows), the
   runs' wall and CPU seconds against fresh uninterrupted ``zoorank run`` s (one before, one after),
   and whether the final store equals the fresh one (rows per entry, embeddings bit for bit, metric
   values).
4. **Prediction**: 300 ResNet-50 checkpoints on an 8-GPU node from the per-model figures measured
   here, one synthetic model's SCORE at n = 10,000, d = 2048, the agreement bootstrap at 300
   models, and the assumptions printed with it (GPU throughput, images, actor start-up).

Prints, never asserts; not run in CI. On 2 idle cores the full run takes about 15 minutes (the
first one also trains the zoo, about 10 more); on shared cores expect an hour, and compare CPU
seconds rather than wall seconds::

    .venv/bin/python benchmarks/bench_scale.py                  # 216 tuned checkpoints
    .venv/bin/python benchmarks/bench_scale.py --quick          # 36 random-init models, ~4 min
    .venv/bin/python benchmarks/bench_scale.py --models 300 --subset 60 --skip kill
    .venv/bin/python benchmarks/bench_scale.py --predict-from /tmp/zoorank-bench-scale/results-216.json \
        --predict-img-s 2000 --predict-cpus 64
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

import zoorank.runtime  # noqa: F401  (loopback Ray environment)

os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("ZOORANK_PROGRESS", "0")

import psutil  # noqa: E402

from zoorank.config import DEFAULT_METRICS  # noqa: E402
from zoorank.config.loading import parse_config  # noqa: E402
from zoorank.store import Store  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = Path("/tmp/zoorank-bench-scale")
#: the tune grid: trials = methods × lrs × seeds; each exports one checkpoint per epoch
METHODS, LRS, SEEDS = ("simclr", "vicreg"), (1e-3, 3e-3, 1e-2), (0, 1, 2)
TRIALS = len(METHODS) * len(LRS) * len(SEEDS)
STAGES = ("embed", "score", "rank", "report")
POOL_METRICS = {"clid", "clid_family"}  # pool-level rows, recomputed whenever the pool changes
MB = 1024**2


# -- memory ---------------------------------------------------------------------------------------
class TreeSampler:
    """Samples the RSS and CPU time of a process and of its whole process tree in a thread.

    CPU seconds (user + system, summed over the tree) are what a stage costs the machine; on
    shared cores they move far less with other people's load than wall seconds do. A process that
    lives less than one interval between two samples is missed.
    """

    def __init__(self, pid: int | None = None, interval: float = 0.25) -> None:
        self.pid = pid or os.getpid()
        self.interval = interval
        self.peak_root = self.peak_tree = 0
        self.peak_procs = 0
        self.cpu: dict[int, float] = {}  # pid → its CPU seconds at the last sample
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        with self._lock:
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            total = root_rss = 0
            for p in procs:
                with contextlib.suppress(psutil.Error), p.oneshot():
                    rss = p.memory_info().rss
                    t = p.cpu_times()
                    # children_* would count a reaped child twice (it was sampled alive)
                    self.cpu[p.pid] = t.user + t.system
                    total += rss
                    root_rss = rss if p.pid == self.pid else root_rss
            self.peak_root = max(self.peak_root, root_rss)
            self.peak_tree = max(self.peak_tree, total)
            self.peak_procs = max(self.peak_procs, len(procs))

    def cpu_seconds(self, since: dict[int, float] | None = None) -> float:
        """CPU seconds of the tree since the snapshot ``since`` (a copy of ``self.cpu``)."""
        since = since or {}
        return sum(v - since.get(pid, 0.0) for pid, v in self.cpu.items())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    @contextlib.contextmanager
    def section(self):
        """Peaks and CPU seconds within the ``with`` block: yields a dict filled in on exit."""
        self.sample()
        with self._lock:
            saved = (self.peak_root, self.peak_tree, self.peak_procs)
            self.peak_root = self.peak_tree = self.peak_procs = 0
            base = dict(self.cpu)
        out: dict = {}
        try:
            yield out
        finally:
            self.sample()
            with self._lock:
                out.update(driver=self.peak_root, tree=self.peak_tree, procs=self.peak_procs,
                           cpu=self.cpu_seconds(base))
                self.peak_root = max(saved[0], self.peak_root)
                self.peak_tree = max(saved[1], self.peak_tree)
                self.peak_procs = max(saved[2], self.peak_procs)


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- the zoo --------------------------------------------------------------------------------------
def spec_dicts(specs) -> list[dict]:
    """ModelSpecs as config entries, seed ensembles next to each other."""
    specs = sorted(specs, key=lambda s: (s.group or "", s.id or ""))
    return [s.model_dump(mode="json", exclude_defaults=True) | {"source": s.source, "name": s.name}
            for s in specs]


def tune_zoo(n_models: int, width: int) -> tuple[list[dict], float | None]:
    """Tuned checkpoints (every epoch of 18 trials); (specs, seconds of training or None if cached)."""
    from zoorank.zoo import read_zoo_file

    epochs = math.ceil(n_models / TRIALS)
    name = f"scale-w{width}-e{epochs}"
    zoo_file = CACHE / "zoo" / "tune" / name / "zoo.yaml"
    seconds = None
    if not zoo_file.is_file():
        cfg = {
            "store": str(CACHE / "zoo"),
            "dataset": {"name": "digits", "source": "sklearn_digits"},
            "backbone": {"name": "small_cnn", "width": width, "depth": 3, "input_size": 8},
            "epochs": epochs,
            "batch_size": 128,
            "probe": {"samples": 64, "per_sample": 4, "every": 1},
            "objective": {"metric": "lidar"},
            "space": {"method": {"grid": list(METHODS)}, "lr": {"grid": list(LRS)},
                      "seed": {"grid": list(SEEDS)}},
            "search": {"name": name, "algorithm": "grid", "scheduler": "fifo",
                       "cpus_per_trial": 0.5},
            "export_epochs": True,
        }
        path = CACHE / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        print(f"# training the zoo: {TRIALS} trials × {epochs} epochs (zoorank tune {path}) ...",
              flush=True)
        t0 = time.perf_counter()
        with open(CACHE / f"{name}.log", "w") as log:
            rc = subprocess.call([sys.executable, "-m", "zoorank", "tune", str(path)], cwd=REPO,
                                 stdout=log, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - t0
        if rc != 0 or not zoo_file.is_file():
            sys.exit(f"bench_scale: zoorank tune failed (exit {rc}); see {CACHE / f'{name}.log'}")
    specs = spec_dicts(read_zoo_file(zoo_file))
    return specs[:n_models], seconds


def random_zoo(n_models: int, width: int) -> tuple[list[dict], float | None]:
    """Seeded random-init small_cnn checkpoints, one safetensors file each, ensembles of 3."""
    import torch
    from safetensors.torch import save_file

    from zoorank.tune.models import small_cnn

    directory = CACHE / f"random-w{width}"
    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    wrote = False
    specs = []
    for i in range(n_models):
        path = directory / f"m{i:04d}.safetensors"
        if not path.is_file():
            torch.manual_seed(i)
            state = small_cnn(width=width, depth=3).state_dict()
            save_file({k: v.contiguous() for k, v in state.items()}, str(path))
            wrote = True
        specs.append({"id": f"rnd{i:04d}", "source": "python", "name": "zoorank.tune.models:small_cnn",
                      "model_kwargs": {"width": width, "depth": 3}, "checkpoint": str(path),
                      "group": f"g{i // 3:03d}", "family": "random", "input_size": 8,
                      "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25],
                      "interpolation": "bilinear", "crop_pct": 1.0})
    return specs, (time.perf_counter() - t0) if wrote else None


def run_config(store: Path, specs: list[dict], args) -> dict:
    embed = {"batch_size": args.batch_size}
    if args.models_per_actor:
        embed["models_per_actor"] = args.models_per_actor
    return {
        "store": str(store),
        "seed": 0,
        "datasets": [{"name": "digits", "source": "sklearn_digits"}],
        "models": specs,
        "views": [{"name": "clean"},
                  {"name": "simclr", "samples": args.views[0], "per_sample": args.views[1]}],
        "metrics": args.metrics,
        "embed": embed,
        "score": {"nc_k": 10, "nc_reference_size": 600},
        "oracle": {"knn": True},
        "rank": {"primary_metric": "lidar", "bootstrap": 200},
    }


def store_size(root: Path) -> tuple[int, int]:
    """(bytes, files) under a store."""
    size = files = 0
    for base, _, names in os.walk(root):
        for n in names:
            with contextlib.suppress(OSError):
                size += os.path.getsize(os.path.join(base, n))
                files += 1
    return size, files


# -- 2. the pipeline, stage by stage --------------------------------------------------------------
def run_stages(cfg: dict, sampler: TreeSampler) -> dict:
    from zoorank import pipeline

    config = parse_config(cfg)
    shutil.rmtree(config.store, ignore_errors=True)
    out: dict = {"models": len(cfg["models"]), "stages": {}, "store": config.store}
    for stage in STAGES:
        fn = getattr(pipeline, f"run_{stage}")
        kwargs = {"show": False} if stage == "rank" else {}
        with sampler.section() as peak:
            t0 = time.perf_counter()
            result = fn(config, **kwargs)
            seconds = time.perf_counter() - t0
        out["stages"][stage] = {"seconds": seconds, **peak}
        if stage == "embed":
            out["embed_rows"] = result
            out["pipelines"] = result.attrs.get("pipelines", [])
    out["total"] = sum(s["seconds"] for s in out["stages"].values())
    out["cpu"] = sum(s["cpu"] for s in out["stages"].values())
    out["store_bytes"], out["store_files"] = store_size(Path(config.store))
    out["shards"] = sum(1 for _ in Path(config.store).glob("embeddings/*/*/*/part-*.parquet"))
    out["maxrss_mb"] = maxrss_mb()
    return out


def embed_breakdown(run: dict, images_per_model: int) -> dict:
    """EMBED's per-pipeline start-up against its steady state, and the forward share."""
    pipes = run["pipelines"]
    rows = run["embed_rows"]
    startup = [p["startup_seconds"] for p in pipes]
    steady = [p["steady_images_per_second"] for p in pipes if p["steady_images_per_second"]]
    forward = float(rows["seconds"].sum())  # actor seconds inside the models' forward passes
    return {
        "pools": len(pipes),
        "startup_mean": float(np.mean(startup)) if startup else float("nan"),
        "startup_total": float(np.sum(startup)),
        "load_max": max((p["model_load_seconds"] for p in pipes), default=0.0),
        # images/s through every model of a pool = images/s × models in the pool
        "steady_model_images": float(np.median([p["steady_images_per_second"] * p["models"]
                                                for p in pipes if p["steady_images_per_second"]]))
        if steady else float("nan"),
        "forward": forward,
        # actor-timed steady state (first batch started to last finished), where embed reports it
        "steady_total": (float(sum(p["steady_seconds"] for p in pipes))
                         if pipes and all("steady_seconds" in p for p in pipes) else None),
        "done": int((rows["status"] == "done").sum()),
        "entries": len(rows),
        "images_per_model": images_per_model,
    }


def linear_probe_cost(store_uri: str, model_id: str) -> dict:
    """CPU seconds of the kNN oracle alone and with the linear probe on one model, in this process.

    ``_oracle_task`` is what each Ray oracle task runs (one torch thread); CPU time rather than
    wall time, which other people's load on shared cores inflates several-fold.
    """
    from zoorank.config import OracleSpec
    from zoorank.label_oracle import _labelled_split, _oracle_task

    store = Store(store_uri)
    out = {}
    for label, spec in (("knn", OracleSpec(knn=True)),
                        ("knn+linear_probe", OracleSpec(knn=True, linear_probe=True))):
        tr, ytr, te, yte, _ = _labelled_split(store, "digits", spec, 0)
        c0 = time.process_time()
        _oracle_task(store.root, "digits", "clean", model_id, tr, ytr, te, yte, spec, 0, None)
        out[label] = time.process_time() - c0
    return out


def shard_write_cost(tmp: Path, dim: int, rows: int, n: int = 200) -> float:
    """CPU seconds per ``Store.write_shard`` of a rows × dim float32 shard (an actor's write).

    CPU time (Parquet encoding, syscalls): the wall time of a write on this machine's shared
    disk varies five-fold from one minute to the next.
    """
    store = Store(tmp)
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((rows, dim), dtype=np.float32)
    ids = np.arange(rows, dtype=np.int64)
    vi = np.zeros(rows, dtype=np.int32)
    c0 = time.process_time()
    for i in range(n):
        store.write_shard("d", "v", f"m{i % 10}", i, ids, vi, emb)
    seconds = (time.process_time() - c0) / n
    shutil.rmtree(tmp, ignore_errors=True)
    return seconds


def score_cost_d2048(n: int, d: int, n_aug: int, q: int, metrics: list[str]) -> dict:
    """One model's label-free suite (+ a third of a 3-member NC) at n × d on one BLAS thread.

    Synthetic embeddings of ``bench_score`` (a mixture through a power-law spectrum). CPU seconds
    (``process_time``) next to wall seconds: on shared cores the wall time is inflated by others'
    load, the CPU time is what a dedicated core would take.
    """
    from threadpoolctl import threadpool_limits

    from zoorank.config import ScoreOptions
    from zoorank.metrics.suite import ensemble_reliability, label_free_suite

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_score import synthetic_embeddings

    members = [synthetic_embeddings(np.random.default_rng([0, i]), n, d, n_aug, q, 1.2)
               for i in range(3)]
    options = ScoreOptions()
    with threadpool_limits(1):
        w0, c0 = time.perf_counter(), time.process_time()
        label_free_suite(members[0][0], members[0][1], [m for m in metrics if m != "nc"],
                         options, 0)
        suite_wall, suite_cpu = time.perf_counter() - w0, time.process_time() - c0
        nc_wall = nc_cpu = 0.0
        if "nc" in metrics:
            w0, c0 = time.perf_counter(), time.process_time()
            ensemble_reliability([m[0] for m in members], np.arange(n), options, 0)
            nc_wall, nc_cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"wall": suite_wall + nc_wall / 3, "cpu": suite_cpu + nc_cpu / 3,
            "suite_cpu": suite_cpu, "nc_cpu": nc_cpu, "n": n, "d": d}


# -- 3. kill and resume ---------------------------------------------------------------------------
def _zoorank_run(cfg_path: Path, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "a")  # noqa: SIM115  (closed by the caller through proc.log)
    proc = subprocess.Popen([sys.executable, "-m", "zoorank", "run", str(cfg_path)], cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the driver, then whatever it started (its local Ray) that outlives it, by pid."""
    started = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(started, timeout=10)
    leftovers = {p.pid: p for p in alive}
    for p in psutil.process_iter(["pid"]):  # late children in the run's own session
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if p.pid != os.getpid() and os.getsid(p.pid) == proc.pid:
                leftovers[p.pid] = p
    for p in leftovers.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(list(leftovers.values()), timeout=10)
    proc.log.close()  # type: ignore[attr-defined]


def _embedded_models(store: Store, n_views: int) -> int:
    with contextlib.suppress(Exception):
        m = store.read_manifest()
        done = m[m["status"] == "done"].groupby("model_id").size()
        return int((done >= n_views).sum())
    return 0


def _scored_models(store: Store) -> int:
    with contextlib.suppress(Exception):
        m = store.read_metrics()
        return int(m.loc[~m["metric"].isin(POOL_METRICS), "model_id"].nunique())
    return 0


def run_until(cfg_path: Path, log_path: Path, done_when=None, timeout: float = 7200) -> dict:
    """One ``zoorank run``: to the end, or SIGKILLed once ``done_when()`` is true."""
    proc = _zoorank_run(cfg_path, log_path)
    t0 = time.perf_counter()
    killed = False
    with TreeSampler(proc.pid, interval=0.5) as mem:
        while proc.poll() is None:
            if done_when is not None and done_when():
                _kill_tree(proc)
                killed = True
                break
            if time.perf_counter() - t0 > timeout:
                _kill_tree(proc)
                sys.exit(f"bench_scale: zoorank run exceeded {timeout:.0f} s; see {log_path}")
            time.sleep(0.2)
    seconds = time.perf_counter() - t0
    if not killed:
        proc.log.close()  # type: ignore[attr-defined]
        if proc.returncode != 0:
            sys.exit(f"bench_scale: zoorank run exited {proc.returncode}; see {log_path}")
    return {"seconds": seconds, "killed": killed, "tree": mem.peak_tree, "driver": mem.peak_root,
            "cpu": mem.cpu_seconds()}


def shard_mtimes(root: Path, model_ids) -> dict[str, int]:
    out = {}
    for mid in model_ids:
        for p in root.glob(f"embeddings/*/*/{mid}/part-*.parquet"):
            out[str(p)] = p.stat().st_mtime_ns
    return out


def metric_rows(store: Store) -> pd.DataFrame:
    m = store.read_metrics()
    return m[~m["metric"].isin(POOL_METRICS)].set_index(["model_id", "dataset", "metric"])


def compare_stores(got_root: Path, ref_root: Path) -> dict:
    """Rows per entry, embeddings (exact) and metric values of two stores of the same config."""
    got, ref = Store(got_root), Store(ref_root)
    gm = got.read_manifest().set_index(["dataset", "view", "model_id"]).sort_index()
    rm = ref.read_manifest().set_index(["dataset", "view", "model_id"]).sort_index()
    same_keys = gm.index.equals(rm.index)
    same_rows = same_keys and bool((gm["rows"].to_numpy() == rm["rows"].to_numpy()).all())
    identical = 0
    max_diff = 0.0
    for key in rm.index if same_keys else []:
        a, b = got.read_embeddings(*key), ref.read_embeddings(*key)
        if (np.array_equal(a.sample_id, b.sample_id) and np.array_equal(a.view_index, b.view_index)
                and a.embedding.shape == b.embedding.shape):
            if np.array_equal(a.embedding, b.embedding):
                identical += 1
            else:
                max_diff = max(max_diff, float(np.abs(a.embedding - b.embedding).max()))
        else:
            max_diff = float("inf")
    gv, rv = got.read_metrics(), ref.read_metrics()
    key = ["model_id", "dataset", "metric"]
    both = gv.merge(rv, on=key, suffixes=("", "_ref"))
    a, b = both["value"].to_numpy(float), both["value_ref"].to_numpy(float)
    equal = (a == b) | (np.isnan(a) & np.isnan(b))
    return {"entries": len(rm), "same_keys": same_keys, "same_rows": same_rows,
            "identical": identical, "max_diff": max_diff, "metric_rows": len(rv),
            "metric_matched": len(both), "metric_equal": int(equal.sum()),
            "metric_max_diff": float(np.nanmax(np.abs(a - b))) if len(both) else 0.0}


def kill_and_resume(cfg: dict, work: Path, fresh: bool) -> dict:
    n_models = len(cfg["models"])
    n_views = len(cfg["views"])
    half = math.ceil(n_models / 2)
    out: dict = {"models": n_models}

    ref_root = work / "fresh" / "store"
    fresh_cfg = work / "fresh" / "cfg.yaml"

    def fresh_run() -> None:
        shutil.rmtree(ref_root, ignore_errors=True)
        print("# fresh zoorank run (subprocess) ...", flush=True)
        out.setdefault("fresh", []).append(run_until(fresh_cfg, work / "fresh" / "log"))

    if fresh:
        shutil.rmtree(work / "fresh", ignore_errors=True)
        (work / "fresh").mkdir(parents=True)
        fresh_cfg.write_text(yaml.safe_dump({**cfg, "store": str(ref_root)}, sort_keys=False))
        fresh_run()

    root = work / "killed" / "store"
    shutil.rmtree(work / "killed", ignore_errors=True)
    (work / "killed").mkdir(parents=True)
    path = work / "killed" / "cfg.yaml"
    path.write_text(yaml.safe_dump({**cfg, "store": str(root)}, sort_keys=False))
    log = work / "killed" / "log"
    store = Store(root)

    print(f"# zoorank run, SIGKILL once {half} models are embedded ...", flush=True)
    out["run1"] = run_until(path, log, lambda: _embedded_models(store, n_views) >= half)
    m1 = store.read_manifest()
    done1 = m1[m1["status"] == "done"]
    out["embedded_at_kill"] = _embedded_models(store, n_views)
    out["entries_at_kill"] = len(done1)
    kept1 = shard_mtimes(root, done1["model_id"].unique())
    seconds1 = done1.set_index(["dataset", "view", "model_id"])["seconds"]

    print(f"# rerun, SIGKILL once {half} models are scored ...", flush=True)
    out["run2"] = run_until(path, log, lambda: _scored_models(store) >= half)
    out["scored_at_kill"] = _scored_models(store)
    rows2 = metric_rows(store)
    m2 = store.read_manifest()
    out["embedded_after_run2"] = _embedded_models(store, n_views)

    print("# rerun to the end ...", flush=True)
    out["run3"] = run_until(path, log)
    print("# rerun of the finished store ...", flush=True)
    out["noop"] = run_until(path, log)
    if fresh:
        fresh_run()  # again: the interrupted runs are compared with the mean of both

    # embed: entries done at the first kill whose shards or manifest seconds changed afterwards
    m3 = store.read_manifest().set_index(["dataset", "view", "model_id"])
    kept3 = shard_mtimes(root, done1["model_id"].unique())
    touched = {Path(p).parent.name for p, t in kept1.items() if kept3.get(p) != t}
    touched |= {p.split("/")[-2] for p in set(kept1) ^ set(kept3)}
    changed = [k for k in seconds1.index if m3.loc[k, "seconds"] != seconds1.loc[k]]
    out["embed_redone_models"] = len(touched | {k[2] for k in changed})
    out["embed_redone_entries"] = len(changed)
    # entries done after run 2 (embed finished there) redone by run 3?
    done2 = m2[m2["status"] == "done"].set_index(["dataset", "view", "model_id"])["seconds"]
    out["embed_redone_run3"] = int(sum(m3.loc[k, "seconds"] != s for k, s in done2.items()))
    # score: rows present at the second kill whose value or params changed afterwards
    rows3 = metric_rows(store)
    common = rows2.index.intersection(rows3.index)
    differs = (rows2.loc[common, "params"] != rows3.loc[common, "params"]) | ~(
        (rows2.loc[common, "value"] == rows3.loc[common, "value"])
        | (rows2.loc[common, "value"].isna() & rows3.loc[common, "value"].isna()))
    out["score_rows_at_kill"] = len(rows2)
    out["score_redone_rows"] = int(differs.sum())
    out["score_redone_models"] = int(pd.Index(common[differs.to_numpy()].get_level_values(0))
                                     .nunique())
    out["tmp_files"] = len(list(root.rglob(".tmp-*")))
    out["compare"] = compare_stores(root, ref_root) if fresh else None
    out["root"] = root
    return out


# -- 4. prediction --------------------------------------------------------------------------------
def agreement_cost(models: int, bootstrap: int) -> tuple[float, float]:
    """(seconds, peak bytes) of one bootstrapped Kendall τ-b (``agreement``) over ``models``."""
    import tracemalloc

    from zoorank.metrics.agreement import kendall_tau_b_rows

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(bootstrap, models)), rng.normal(size=(bootstrap, models))
    tracemalloc.start()
    t0 = time.perf_counter()
    kendall_tau_b_rows(x, y)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak


def predict(args, big: dict, eb: dict, costs: dict) -> None:
    """300 ResNet-50 checkpoints on one 8-GPU node, from the figures above and stated assumptions."""
    from zoorank.config import EmbedOptions

    m, g, cores = args.predict_models, args.predict_gpus, args.predict_cpus
    n_clean, (n_aug, q) = args.predict_images, args.predict_views
    images = n_clean + n_aug * q
    budget = EmbedOptions().actor_memory_gb * 1024**3
    r50_bytes = 25.56e6 * 4  # parameters + buffers, fp32 (what chunk_models budgets)
    per_pool = max(1, int(budget // r50_bytes))
    pools = math.ceil(m / per_pool)
    bs = args.predict_batch_size

    # measured here (big run): EMBED's time after the pools' first batches, less the forward
    # passes, per shard written (one per model, view and actor call): the work an actor does
    # around each forward (normalisation, feature checks, the shard write, records), which
    # blocks its device just the same
    n_b = big["models"]
    rows_here = 1797 + args.views[0] * args.views[1]
    steady = eb.get("steady_total") or big["stages"]["embed"]["seconds"] - eb["startup_total"]
    around = max(0.0, steady - eb["forward"]) / big["shards"]
    other = max(0.0, around - costs["shard_here"])  # the rest, beside the write of a shard
    # shards per model scale with rows / batch size (batches carry both views, as here)
    shards = round(big["shards"] / n_b * (images / bs) / (rows_here / args.batch_size))

    compute = m * images / (g * args.predict_img_s)
    startup = pools * (args.predict_actor_start + per_pool * args.predict_load_s)
    overhead = m * shards * (other + costs["shard_r50"]) / g
    embed = compute + startup + overhead
    score_s = costs.get("score_cpu") or args.predict_score_s
    # score.py on GPUs: one actor per GPU with cores / GPUs BLAS threads each (score.pool_size);
    # the suite's CPU-seconds are taken to divide over those threads (its BLAS and faiss parts do;
    # see bench_metrics for the 1- vs 2-thread ratio on these cores), against one thread per GPU
    from zoorank.score.worker import pool_size

    actors, _, threads = pool_size(m, 0.5, cores, g)
    score_now = m * score_s / (actors * threads)
    score_one = m * score_s / g
    # kNN oracle: an n/2 × n/2 × 2048 distance product per model at ~50 GFLOP/s per thread, as
    # 0.5-CPU Ray tasks on every core; plus the rank stage's per-model cost measured here
    knn = 2 * (n_clean / 2) ** 2 * 2048 / 50e9
    rank_s = m * knn / cores + big["stages"]["rank"]["seconds"] / n_b * m
    # RANK's agreement table: one bootstrapped Kendall τ-b per (metric, oracle metric, family),
    # O(bootstrap · models²) time and memory each (metrics/agreement.kendall_tau_b_rows), in the
    # driver; as many calls as rows in this run's agreement table, at the default bootstrap
    calls = costs.get("agreement_rows")
    if calls is None:
        path = CACHE / "runs" / f"inproc-{n_b}" / "store" / "agreement"
        calls = len(Store(path.parent).read_frame("agreement")) if path.is_dir() else 0
    tau_s, tau_peak = agreement_cost(m, args.predict_bootstrap)
    rank_s += calls * tau_s
    report_s = big["stages"]["report"]["seconds"] / n_b * m
    total_now = args.predict_ray_start + embed + score_now + rank_s + report_s
    total_one = args.predict_ray_start + embed + score_one + rank_s + report_s
    src = (f"measured {score_s:.0f} CPU-s at n={costs['score_n']:,}, d={costs['score_d']}"
           if costs.get("score_cpu") else f"{score_s:.0f} s (--predict-score-s)")
    print(f"\n== prediction: {m} ResNet-50 checkpoints on {g} GPUs ({cores} CPU cores) ==")
    print(f"assumptions: {args.predict_img_s:,} img/s per GPU (ResNet-50 bf16 forward, 224 px, "
          f"A100-class; public figures 2-3k); {n_clean:,} clean + {n_aug:,}×{q} augmented = "
          f"{images:,} images per model; embed batch {bs} → {shards} shards per model (as "
          f"{big['shards'] / n_b:.0f} for {rows_here:,} rows at batch {args.batch_size} here); "
          f"{per_pool} models per actor pool (actor_memory_gb {EmbedOptions().actor_memory_gb:g} / "
          f"{r50_bytes / MB:.0f} MB) → {pools} pools; pool start-up {args.predict_actor_start:g} s "
          f"+ {args.predict_load_s:g} s per checkpoint loaded; decoding off the critical path "
          f"(decoded once, CPU); score per model {src} on one thread; kNN at 50 GFLOP/s/thread")
    print(f"measured here: actor work around the forward {around * 1000:.1f} ms per shard "
          f"(a {args.batch_size}×{eb['dim']} shard write: {costs['shard_here'] * 1000:.1f} CPU-ms); "
          f"a {bs}×2048 shard write {costs['shard_r50'] * 1000:.1f} CPU-ms; rank "
          f"{big['stages']['rank']['seconds'] / n_b * 1000:.0f} ms/model, report "
          f"{report_s / m * 1000:.0f} ms/model")
    print(f"predict  embed  {m} × ResNet-50  {embed / 60:.1f} min  (forward {compute / 60:.1f} "
          f"min, {pools} pool start-ups {startup / 60:.1f} min, per-shard work "
          f"{overhead / 60:.1f} min)  compute bound {compute / 60:.1f} min  {embed / compute:.2f}× "
          f"bound")
    print(f"predict  score  {m} models  d=2048  {score_now / 60:.1f} min ({actors} GPU actors × "
          f"{threads} BLAS threads, metrics on CPU)  vs {score_one / 60:.0f} min with one thread "
          f"per actor (before score.pool_size shared the cores)  {score_one / score_now:.0f}×")
    lp = costs.get("linear_probe")
    extra = ""
    if lp:
        lp_s = (lp["knn+linear_probe"] - lp["knn"]) * n_clean * 2048 / (1797 * eb["dim"])
        extra = (f"; a linear probe would add ≈ {m * lp_s / cores / 60:.0f} min (its "
                 f"{lp['knn+linear_probe'] - lp['knn']:.2f} CPU-s/model here scaled by n·d, "
                 "a rough guess)")
    print(f"predict  rank   {m} models  {rank_s / 60:.1f} min (kNN oracle; {calls} bootstrapped "
          f"Kendall τ at bootstrap {args.predict_bootstrap}: {tau_s:.1f} s and "
          f"{tau_peak / MB:,.0f} MB peak each, in the driver){extra}")
    print(f"predict  total  {m} × ResNet-50 on {g} GPUs  {total_now / 60:.0f} min (embed "
          f"{embed / total_now:.0%}, score {score_now / total_now:.0%}, rank "
          f"{rank_s / total_now:.0%})  vs {total_one / 60:.0f} min with one-thread score actors  "
          f"{total_one / total_now:.1f}×")


# -- main -----------------------------------------------------------------------------------------
def _mb(x: float) -> str:
    return f"{x / MB:,.0f} MB"


def _peak(run: dict, key: str, stage: str | None) -> float:
    return max(x[key] for x in run["stages"].values()) if stage is None else run["stages"][stage][key]


def print_scale(runs: list[dict], breakdowns: list[dict], ray_start: float, warm: dict,
                label: str) -> None:
    cold = ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in warm["stages"].items())
    print(f"\n== whole pipeline in one process (local Ray started in {ray_start:.1f} s, "
          f"{os.cpu_count()} cores; cold 3-model warm-up run {warm['total']:.0f} s: {cold}) ==")
    print(f"{'models':>7} {'stage':<8}{'seconds':>9}{'s/model':>9}{'CPU-s':>9}{'CPU-s/model':>12}"
          f"{'driver peak':>13}{'tree peak':>12}{'procs':>7}")
    for run in runs:
        for stage in [*STAGES, None]:
            secs = run["total"] if stage is None else run["stages"][stage]["seconds"]
            cpu = run["cpu"] if stage is None else run["stages"][stage]["cpu"]
            print(f"{run['models']:>7} {stage or 'total':<8}{secs:>9.1f}{secs / run['models']:>9.3f}"
                  f"{cpu:>9.1f}{cpu / run['models']:>12.3f}{_mb(_peak(run, 'driver', stage)):>13}"
                  f"{_mb(_peak(run, 'tree', stage)):>12}{_peak(run, 'procs', stage):>7}")
    small, big = runs
    n_s, n_b = small["models"], big["models"]
    print()
    for stage in [*STAGES, None]:
        line = f"scale  {label}  {stage or 'total':<6} {n_b} models"
        for key, unit in (("seconds", "s"), ("cpu", "CPU-s")):
            t_s = small["total" if key == "seconds" else "cpu"] if stage is None else \
                small["stages"][stage][key]
            t_b = big["total" if key == "seconds" else "cpu"] if stage is None else \
                big["stages"][stage][key]
            marginal = (t_b - t_s) / (n_b - n_s)
            line += (f"  {t_b:7.1f} {unit}  {t_b / n_b:.3f} {unit}/model vs {n_s} models "
                     f"{t_s / n_s:.3f}  {(t_b / n_b) / (t_s / n_s):.2f}× (marginal {marginal:.3f}, "
                     f"fixed {t_b - marginal * n_b:.0f})")
        print(line)
    for run, eb in zip(runs, breakdowns):
        print(f"embed  {label}  {run['models']} models  {eb['pools']} actor pool(s)  start-up "
              f"{eb['startup_mean']:.1f} s/pool ({eb['startup_total']:.0f} s = "
              f"{eb['startup_total'] / run['stages']['embed']['seconds']:.0%} of the stage; model "
              f"loading ≤ {eb['load_max']:.1f} s)  steady {eb['steady_model_images']:,.0f} "
              f"model-img/s  forward {eb['forward']:.1f} s = "
              f"{eb['forward'] / run['stages']['embed']['seconds']:.0%} of the stage  "
              f"{eb['done']}/{eb['entries']} entries done")
    tree_s, tree_b = _peak(small, "tree", None), _peak(big, "tree", None)
    drv_s, drv_b = _peak(small, "driver", None), _peak(big, "driver", None)
    print(f"memory  {label}  {n_b} models  tree peak {_mb(tree_b)}  vs {n_s} models "
          f"{_mb(tree_s)}  {tree_b / tree_s:.2f}× for {n_b / n_s:.1f}× the models  "
          f"(driver {_mb(drv_b)} vs {_mb(drv_s)}, {drv_b / drv_s:.2f}×; driver ru_maxrss "
          f"{big['maxrss_mb']:,.0f} MB)")
    print(f"store  {label}  {n_b} models  {big['store_bytes'] / MB:,.0f} MB in "
          f"{big['store_files']:,} files  ({big['shards'] / n_b:.0f} embedding shards/model)  vs "
          f"{n_s} models {small['shards'] / n_s:.0f} shards/model")


def print_kill(k: dict) -> None:
    n = k["models"]
    print(f"\n== kill and resume: zoorank run as a subprocess, {n} models ==")
    r1, r2, r3, noop = k["run1"], k["run2"], k["run3"], k["noop"]
    print(f"run 1  SIGKILL after {r1['seconds']:.0f} s: {k['embedded_at_kill']} models "
          f"({k['entries_at_kill']} entries) embedded")
    print(f"run 2  SIGKILL after {r2['seconds']:.0f} s: {k['embedded_after_run2']} models embedded,"
          f" {k['scored_at_kill']} scored ({k['score_rows_at_kill']} metric rows)")
    print(f"run 3  to the end in {r3['seconds']:.0f} s; a rerun of the finished store "
          f"{noop['seconds']:.0f} s ({noop['cpu']:.0f} CPU-s)")
    print(f"resume  embed  {k['embed_redone_models']} of {k['embedded_at_kill']} finished models "
          f"redone ({k['embed_redone_entries']} entries by manifest seconds; "
          f"{k['embed_redone_run3']} entries redone by run 3)   score  "
          f"{k['score_redone_models']} of {k['scored_at_kill']} finished models redone "
          f"({k['score_redone_rows']} of {k['score_rows_at_kill']} rows)   "
          f"{k['tmp_files']} temporary files left")
    runs = (r1, r2, r3)
    wall, cpu = sum(r["seconds"] for r in runs), sum(r["cpu"] for r in runs)
    tree = max(r["tree"] for r in runs)
    fresh = k.get("fresh") or []
    if not fresh:
        print(f"resume  {n} models  killed twice + resumed {wall:.0f} s, {cpu:.0f} CPU-s in all "
              "(no fresh run: --no-fresh)")
        return
    # fresh runs before and after the interrupted ones: the machine's load drifts
    f_wall = float(np.mean([f["seconds"] for f in fresh]))
    f_cpu = float(np.mean([f["cpu"] for f in fresh]))
    each = ", ".join(f"{f['seconds']:.0f} s / {f['cpu']:.0f} CPU-s" for f in fresh)
    print(f"resume  {n} models  killed twice + resumed {wall:.0f} s, {cpu:.0f} CPU-s in all  vs "
          f"fresh {f_wall:.0f} s, {f_cpu:.0f} CPU-s (mean of {each})  {wall / f_wall:.2f}× wall  "
          f"{cpu / f_cpu:.2f}× CPU   last resume {r3['cpu'] / f_cpu:.2f}× fresh CPU   no-op "
          f"rerun {noop['cpu'] / f_cpu:.2f}× fresh CPU")
    print(f"memory  zoorank run  {n} models  tree peak {_mb(max(f['tree'] for f in fresh))} "
          f"(fresh)  {_mb(tree)} (interrupted runs)")
    c = k["compare"]
    print(f"equal  resumed vs fresh store: manifest keys {'same' if c['same_keys'] else 'DIFFER'}"
          f", rows per entry {'same' if c['same_rows'] else 'DIFFER'}, embeddings identical in "
          f"{c['identical']}/{c['entries']} entries (max |Δ| {c['max_diff']:.2g} elsewhere), "
          f"metric values equal {c['metric_equal']}/{c['metric_matched']} "
          f"(of {c['metric_rows']}; max |Δ| {c['metric_max_diff']:.2g})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=216, help="zoo size of the big run (≥ 200)")
    p.add_argument("--subset", type=int, default=50, help="zoo size of the small run")
    p.add_argument("--zoo", choices=["tune", "random"], default=None,
                   help="tuned per-epoch checkpoints (default) or random-init ones (--quick)")
    p.add_argument("--width", type=int, default=8, help="small_cnn width (features: 4× width)")
    p.add_argument("--views", type=int, nargs=2, default=[200, 4], metavar=("N", "Q"))
    p.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS))
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--models-per-actor", type=int, default=24,
                   help="models per actor pool (0: the memory budget; the manifest is written "
                   "after each pool, so this is the resume granularity)")
    p.add_argument("--skip", nargs="*", default=[], choices=["scale", "kill", "probe", "score2048"])
    p.add_argument("--no-fresh", action="store_true",
                   help="no uninterrupted subprocess run to compare the resumed store with")
    p.add_argument("--keep", action="store_true", help="keep the stores under the cache")
    p.add_argument("--quick", action="store_true",
                   help="36 random-init models (subset 12), 100×4 views, no fresh run")
    g = p.add_argument_group("prediction")
    g.add_argument("--predict-models", type=int, default=300)
    g.add_argument("--predict-gpus", type=int, default=8)
    g.add_argument("--predict-cpus", type=int, default=96, help="CPU cores of the node")
    g.add_argument("--predict-img-s", type=int, default=2500,
                   help="ResNet-50 bf16 forward images/s per GPU at 224 px")
    g.add_argument("--predict-images", type=int, default=10_000, help="clean images")
    g.add_argument("--predict-views", type=int, nargs=2, default=[1000, 10], metavar=("N", "Q"))
    g.add_argument("--predict-batch-size", type=int, default=256)
    g.add_argument("--predict-actor-start", type=float, default=15.0,
                   help="seconds to start a GPU actor pool (Ray actor, CUDA context)")
    g.add_argument("--predict-load-s", type=float, default=0.5,
                   help="seconds to load one ResNet-50 checkpoint (~100 MB) in an actor")
    g.add_argument("--predict-score-s", type=float, default=36.0,
                   help="SCORE CPU-seconds per model on one thread at n=10k, d=2048 when not "
                   "measured (the score2048 step measured 34-38 s on these cores)")
    g.add_argument("--predict-ray-start", type=float, default=30.0)
    g.add_argument("--predict-bootstrap", type=int, default=1000,
                   help="rank.bootstrap of the predicted run (the config default)")
    p.add_argument("--predict-from", metavar="JSON",
                   help="only the prediction, from the results-<models>.json a run left in the "
                   "cache (to vary the assumptions)")
    args = p.parse_args(argv)
    if args.predict_from:
        saved = json.loads(Path(args.predict_from).read_text())
        args.batch_size, args.views = saved["batch_size"], saved["views"]
        saved["costs"].setdefault("agreement_rows", saved.get("agreement_rows"))
        predict(args, saved["big"], saved["embed"], saved["costs"])
        return
    if args.quick:
        args.models, args.subset, args.views, args.no_fresh = 36, 12, [100, 4], True
        args.models_per_actor = 6
        args.zoo = args.zoo or "random"
        args.skip = [*args.skip, "score2048"]
    args.zoo = args.zoo or "tune"
    if not 0 < args.subset < args.models:
        sys.exit("bench_scale: need 0 < --subset < --models")
    CACHE.mkdir(parents=True, exist_ok=True)
    work = CACHE / "runs"

    build = tune_zoo if args.zoo == "tune" else random_zoo
    specs, built = build(args.models, args.width)
    if len(specs) < args.models:
        sys.exit(f"bench_scale: the zoo has {len(specs)} models, fewer than --models {args.models}")
    label = f"digits small_cnn-w{args.width} ({args.zoo})"
    how = f"built in {built:.0f} s" if built is not None else "cached"
    print(f"bench_scale: {args.models} models ({args.zoo} zoo {how}, {CACHE}), subset "
          f"{args.subset}; digits 1797 clean + {args.views[0]}×{args.views[1]} views; "
          f"{len(args.metrics)} metrics; kNN oracle; {args.models_per_actor or 'budget'} models "
          f"per actor pool; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")

    runs, breakdowns, lp = [], [], None
    images_per_model = 1797 + args.views[0] * args.views[1]
    if "scale" not in args.skip:
        from zoorank.runtime import ensure_ray

        with TreeSampler() as sampler:
            t0 = time.perf_counter()
            ensure_ray()
            ray_start = time.perf_counter() - t0
            # a first pipeline pays Ray's cold start (worker processes importing torch, sklearn,
            # faiss): reported apart, so the two measured runs start equally warm
            cfg = run_config(work / "warmup" / "store", specs[:3], args)
            print("# warm-up pipeline, 3 models ...", flush=True)
            warm = run_stages(cfg, sampler)
            for n in (args.subset, args.models):
                print(f"# pipeline, {n} models ...", flush=True)
                cfg = run_config(work / f"inproc-{n}" / "store", specs[:n], args)
                run = run_stages(cfg, sampler)
                runs.append(run)
                eb = embed_breakdown(run, images_per_model)
                dims = run["embed_rows"]["dim"].dropna()
                eb["dim"] = int(dims.iloc[0]) if len(dims) else 32
                breakdowns.append(eb)
            one_pool = None
            if args.models_per_actor:
                # the same EMBED with the default chunking: the memory budget holds every small
                # model, so one actor pool, one start-up, and one manifest write at the very end
                from zoorank.embed import run_embed

                cfg = run_config(work / "one-pool" / "store", specs[: args.models], args)
                cfg["embed"].pop("models_per_actor")
                shutil.rmtree(cfg["store"], ignore_errors=True)
                print(f"# embed, {args.models} models in one actor pool ...", flush=True)
                with sampler.section() as peak:
                    t0 = time.perf_counter()
                    rows = run_embed(parse_config(cfg))
                    seconds = time.perf_counter() - t0
                one_pool = {"seconds": seconds, **peak, "pools": len(rows.attrs["pipelines"])}
        import ray

        ray.shutdown()  # the kill/resume runs start their own
        print_scale(runs, breakdowns, ray_start, warm, label)
        if one_pool:
            pooled = runs[1]["stages"]["embed"]
            print(f"embed  {label}  {args.models} models  default chunking ({one_pool['pools']} "
                  f"pool) {one_pool['seconds']:.1f} s, {one_pool['cpu']:.0f} CPU-s  vs "
                  f"{breakdowns[1]['pools']} pools of {args.models_per_actor} "
                  f"{pooled['seconds']:.1f} s, {pooled['cpu']:.0f} CPU-s  "
                  f"{one_pool['seconds'] / pooled['seconds']:.2f}×   (tree peak "
                  f"{_mb(one_pool['tree'])} vs {_mb(pooled['tree'])}; the manifest is written per "
                  "pool, so one pool is also the unit a kill loses)")
        costs: dict = {}
        if "probe" not in args.skip:
            lp = linear_probe_cost(str(work / f"inproc-{args.models}" / "store"),
                                   specs[0]["id"])
            costs["linear_probe"] = lp
            print(f"oracle  {label}  1 model  kNN {lp['knn']:.2f} CPU-s  kNN + linear probe "
                  f"{lp['knn+linear_probe']:.2f} CPU-s  {lp['knn+linear_probe'] / lp['knn']:.1f}× kNN"
                  f"   → the linear probe on {args.models} models ≈ "
                  f"{(lp['knn+linear_probe'] - lp['knn']) * args.models / 60:.1f} CPU-min")
        dim = breakdowns[-1]["dim"]
        costs["shard_here"] = shard_write_cost(work / "shards", dim, args.batch_size)
        costs["shard_r50"] = shard_write_cost(work / "shards", 2048, args.predict_batch_size,
                                              n=50)
        if "score2048" not in args.skip:
            n_aug, q = args.predict_views
            print(f"# one model's score at n={args.predict_images:,}, d=2048 on one thread ...",
                  flush=True)
            sc = score_cost_d2048(args.predict_images, 2048, n_aug, q, args.metrics)
            costs.update(score_cpu=sc["cpu"], score_n=sc["n"], score_d=sc["d"])
            print(f"score  synthetic  1 model  n={sc['n']:,} d=2048 (+{n_aug}×{q})  "
                  f"{sc['cpu']:.0f} CPU-s on one thread (suite {sc['suite_cpu']:.0f} s + NC "
                  f"{sc['nc_cpu']:.0f} s / 3 members)  wall {sc['wall']:.0f} s  "
                  f"{sc['wall'] / sc['cpu']:.2f}× CPU (shared cores)")
        saved = {"big": {k: v for k, v in runs[1].items() if k not in ("embed_rows", "pipelines")},
                 "embed": breakdowns[1], "costs": costs, "batch_size": args.batch_size,
                 "views": args.views,
                 "agreement_rows": len(Store(runs[1]["store"]).read_frame("agreement"))}
        (CACHE / f"results-{args.models}.json").write_text(json.dumps(saved, indent=1, default=float))
        predict(args, runs[1], breakdowns[1], costs)

    if "kill" not in args.skip:
        cfg = run_config(work / "unused", specs[: args.models], args)
        k = kill_and_resume(cfg, work / "kill", fresh=not args.no_fresh)
        print_kill(k)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"maxrss_mb": round(maxrss_mb())}))


if __name__ == "__main__":
    main()
