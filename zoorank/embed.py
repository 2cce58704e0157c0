"""The EMBED stage: Ray Data streams decoded views through actors that each hold a chunk of models.

One pipeline per (dataset, Geometry group) and model chunk::

    from_pandas(sample rows) → map_batches(decode once + every view of the group)
        → map_batches(EmbedActor, ActorPoolStrategy) → one small record per (batch, view, model)

Each :class:`EmbedActor` loads a memory-bounded chunk of models once and runs every model on every
batch ("one read, many models"); the uint8 views are shared and each model's normalization is
applied in the actor. Shards are written by the actors through :meth:`Store.write_shard`, one per
(batch, view, model), named by the batch's first (sample_id, view_index) so a retried batch
overwrites its shard. Only the driver writes the manifest, after each pipeline.

Resume: an entry (dataset, view, model) is skipped when its manifest row is ``done`` with the same
fingerprint and its shards hold exactly ``rows`` rows; any other entry is cleared and recomputed.
A model that cannot be loaded or gives NaN/Inf is recorded ``failed``; the others go on.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import DatasetSpec, EmbedOptions, RunConfig, ViewSpec, fingerprint
from zoorank.data import (
    SampleTable,
    ViewGeometry,
    ViewPlan,
    check_views,
    decode_views,
    load_samples,
    view_subset,
    write_samples,
)
from zoorank.errors import ConfigError, InputError
from zoorank.store import Store
from zoorank.zoo import Geometry, Normalization, ResolvedModel, estimate_model_bytes, resolve_models

log = logging.getLogger(__name__)

#: samples decoded per decode task (each gives 1 + Σ q rows of views).
DECODE_BATCH = 32
DECODE_NUM_CPUS = 0.25


# -- planning (pure) -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One (dataset, view, model) output: its fingerprint and the rows it must hold."""

    dataset: str
    view: ViewSpec
    model: ResolvedModel
    fingerprint: str
    samples: np.ndarray  # sample_ids the view covers

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dataset, self.view.name, self.model.model_id)

    @property
    def expected_rows(self) -> int:
        return len(self.samples) * self.view.per_sample


@dataclass
class Outcome:
    """What the actors reported for one entry during a pipeline."""

    rows: int = 0
    dim: int | None = None
    seconds: float = 0.0
    bad_images: int = 0
    error: str | None = None


def dataset_selection(spec: DatasetSpec, table: SampleTable) -> dict[str, Any]:
    """What of a dataset an embedding depends on: its source and the exact sample selection."""
    digest = hashlib.sha256(np.ascontiguousarray(table.sample_id, dtype="<i8").tobytes())
    return {
        "source": spec.source,
        "path": spec.path,
        "image_column": spec.image_column if spec.source == "parquet" else None,
        "samples": len(table),
        "sample_ids": digest.hexdigest()[:16],
    }


def entry_fingerprint(
    model: ResolvedModel, selection: dict[str, Any], view: ViewSpec, seed: int
) -> str:
    """fingerprint(model fingerprint, preprocessing, dataset selection, view recipe, seed).

    The clean view draws nothing at random, so its fingerprint leaves the seed out (the seeded
    ``limit`` subset is already in ``selection``).
    """
    return fingerprint(
        model.fingerprint,
        {"geometry": vars(model.geometry), "normalization": vars(model.normalization)},
        selection,
        {"recipe": view.recipe_name, "samples": view.samples, "per_sample": view.per_sample},
        None if view.is_clean and view.samples is None else seed,
    )


def chunk_models(models: Sequence[ResolvedModel], options: EmbedOptions) -> list[list[ResolvedModel]]:
    """Split models into actor-sized chunks: ``models_per_actor`` each, else by memory budget.

    A model larger than the budget gets a chunk of its own; the order of ``models`` is kept.
    """
    if options.models_per_actor is not None:
        k = options.models_per_actor
        return [list(models[i : i + k]) for i in range(0, len(models), k)]
    budget = options.actor_memory_gb * 1024**3
    chunks: list[list[ResolvedModel]] = []
    used = 0.0
    for m in models:
        try:
            size = float(estimate_model_bytes(m))
        except Exception:  # a model that cannot be sized fails later, in its actor, with a reason
            size = 0.0
        if chunks and used + size <= budget:
            chunks[-1].append(m)
            used += size
        else:
            chunks.append([m])
            used = size
    return chunks


# -- the actor -------------------------------------------------------------------------------------
def factory_paths(models: Iterable[ResolvedModel]) -> list[str]:
    """``sys.path`` roots (on the driver) of the modules of python-factory models.

    A local Ray starts its workers with the driver's script directory and working directory only,
    so a factory importable here (e.g. from a directory added to ``sys.path``) is made importable in
    the actors by handing them these roots.
    """
    import importlib.util

    roots: list[str] = []
    for m in models:
        if m.spec.source != "python":
            continue
        top = m.spec.name.partition(":")[0].split(".")[0]
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if found is None or not found.origin or found.origin in ("built-in", "frozen"):
            continue
        root = os.path.dirname(found.origin)
        if found.submodule_search_locations is not None:  # a package: its parent directory
            root = os.path.dirname(root)
        if root not in roots:
            roots.append(root)
    return roots


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]


class EmbedActor:
    """Holds a chunk of models and runs every one of them on every batch of shared uint8 views.

    ``wanted`` maps model_id → the views that model still needs. Each call writes one shard per
    (view, model) and returns one record per (view, model) with rows, dim, seconds, bad images and
    the error of a model that failed (in this actor: it is then skipped for later batches).
    """

    def __init__(
        self,
        store_uri: str,
        dataset: str,
        models: list[ResolvedModel],
        wanted: dict[str, list[str]],
        device: str = "cpu",
        precision: str = "fp32",
        num_threads: int = 1,
        import_paths: Sequence[str] = (),
    ) -> None:
        import sys

        import torch

        from zoorank.zoo import load_model

        t0 = time.perf_counter()
        sys.path.extend(p for p in import_paths if p not in sys.path and os.path.isdir(p))

        torch.set_num_threads(max(1, int(num_threads)))
        self.torch = torch
        self.store = Store(store_uri)
        self.dataset = dataset
        self.device = torch.device(device)
        self.wanted = {k: set(v) for k, v in wanted.items()}
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.models: dict[str, Any] = {}
        self.norms: dict[str, Normalization] = {}
        self.errors: dict[str, str] = {}
        for m in models:
            try:
                net = load_model(m, device=device)
                if self.device.type == "cuda":
                    net = net.to(memory_format=torch.channels_last)
                self.models[m.model_id] = net
                self.norms[m.model_id] = m.normalization
            except Exception as err:  # isolate: this model fails, the others run
                self.errors[m.model_id] = _short(err)
        self.order = [m.model_id for m in models]
        #: seconds this actor spent loading its models (reported once, with its first batch).
        self.load_seconds = time.perf_counter() - t0

    def _normalized(self, x: Any, norm: Normalization) -> Any:
        torch = self.torch
        mean = torch.tensor(norm.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(norm.std, device=x.device).view(1, 3, 1, 1)
        x = (x - mean) / std
        if self.device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def _forward(self, net: Any, x: Any) -> Any:
        """Forward with autocast on GPU; a CUDA OOM retries the batch in halves."""
        torch = self.torch
        try:
            if self.autocast_dtype is not None:
                with torch.autocast(self.device.type, dtype=self.autocast_dtype):
                    return net(x).float()
            return net(x).float()
        except torch.cuda.OutOfMemoryError:
            if len(x) <= 1:
                raise
            torch.cuda.empty_cache()
            h = len(x) // 2
            return torch.cat([self._forward(net, x[:h]), self._forward(net, x[h:])])

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from zoorank.zoo import check_features

        torch = self.torch
        called = time.time()  # wall clock: comparable across the actors (and with the driver)
        views = np.asarray(batch["view"]).astype(str)
        bad = np.asarray(batch["bad"], dtype=bool)
        errors = np.asarray(batch["error"]).astype(str)
        sample_id = np.asarray(batch["sample_id"], dtype=np.int64)
        view_index = np.asarray(batch["view_index"], dtype=np.int32)
        present = sorted(set(views.tolist()))
        ok = ~bad
        records: list[dict[str, Any]] = []
        first_bad = {v: next(iter(errors[(views == v) & bad]), "") for v in present}
        bad_count = {v: int(((views == v) & bad).sum()) for v in present}

        with torch.inference_mode():
            images = torch.from_numpy(np.ascontiguousarray(batch["image"][ok])).to(self.device)
            x = images.permute(0, 3, 1, 2).float().div_(255.0)
            rows_ok = np.flatnonzero(ok)
            ok_views = views[ok]
            cache: dict[tuple[Normalization, tuple[str, ...]], Any] = {}
            for model_id in self.order:
                wanted = [v for v in present if v in self.wanted.get(model_id, ())]
                if not wanted:
                    continue
                base = {"model_id": model_id, "rows": 0, "dim": -1, "seconds": 0.0, "error": ""}
                if model_id in self.errors:
                    records += [dict(base, view=v, error=self.errors[model_id], bad=bad_count[v],
                                     bad_error=first_bad[v]) for v in wanted]
                    continue
                sel = np.isin(ok_views, wanted)
                norm = self.norms[model_id]
                key = (norm, tuple(wanted))
                if key not in cache:
                    idx = np.flatnonzero(sel)
                    part = x if len(idx) == len(x) else x[torch.from_numpy(idx).to(x.device)]
                    cache[key] = self._normalized(part, norm)
                xin = cache[key]
                t0 = time.perf_counter()
                try:
                    feats = self._forward(self.models[model_id], xin) if len(xin) else None
                    if feats is not None:
                        check_features(feats, model_id)
                        feats = feats.cpu().numpy()
                except Exception as err:
                    self.errors[model_id] = _short(err)
                    del self.models[model_id]
                    records += [dict(base, view=v, error=self.errors[model_id], bad=bad_count[v],
                                     bad_error=first_bad[v]) for v in wanted]
                    continue
                seconds = time.perf_counter() - t0
                rows = rows_ok[sel]
                for v in wanted:
                    mask = ok_views[sel] == v
                    n = int(mask.sum())
                    dim = -1
                    if n:
                        r = rows[mask]
                        order = np.lexsort((view_index[r], sample_id[r]))
                        r, emb = r[order], feats[mask][order]
                        part_name = f"{sample_id[r[0]]:012d}-{view_index[r[0]]:04d}"
                        self.store.write_shard(self.dataset, v, model_id, part_name,
                                               sample_id[r], view_index[r], emb)
                        dim = int(emb.shape[1])
                    records.append(dict(base, view=v, rows=n, dim=dim,
                                        seconds=seconds * n / max(1, len(xin)),
                                        bad=bad_count[v], bad_error=first_bad[v]))
        images_in_batch = int(ok.sum())
        load_seconds, self.load_seconds = self.load_seconds, 0.0
        first = [i == 0 for i in range(len(records))]
        done = time.time()
        return {
            "view": np.asarray([r["view"] for r in records], dtype=object),
            "model_id": np.asarray([r["model_id"] for r in records], dtype=object),
            "rows": np.asarray([r["rows"] for r in records], dtype=np.int64),
            "dim": np.asarray([r["dim"] for r in records], dtype=np.int64),
            "seconds": np.asarray([r["seconds"] for r in records], dtype=np.float64),
            "bad": np.asarray([r["bad"] for r in records], dtype=np.int64),
            "bad_error": np.asarray([r["bad_error"] for r in records], dtype=object),
            "error": np.asarray([r["error"] for r in records], dtype=object),
            # the batch's image count rides on its first record only (for the progress display)
            "images": np.asarray([images_in_batch if i == 0 else 0 for i in range(len(records))],
                                 dtype=np.int64),
            "load_seconds": np.asarray([load_seconds if f else 0.0 for f in first]),
            "called": np.asarray([called if f else np.nan for f in first]),
            "done": np.asarray([done if f else np.nan for f in first]),
        }


# -- the driver ------------------------------------------------------------------------------------
@dataclass
class _Resources:
    device: str
    precision: str
    num_actors: int
    num_threads: int
    num_cpus: float
    num_gpus: float


def _resources(options: EmbedOptions) -> _Resources:
    import ray

    from zoorank.runtime import cluster_gpus

    gpus = cluster_gpus()
    device = options.device
    if device == "auto":
        device = "cuda" if gpus > 0 else "cpu"
    if device == "cuda" and gpus == 0:
        raise ConfigError("embed.device: 'cuda' but the Ray cluster has no GPU")
    cpus = float(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    if device == "cuda":
        precision = options.precision
        if precision == "auto":
            import torch

            precision = "bf16" if (not torch.cuda.is_available()
                                   or torch.cuda.is_bf16_supported()) else "fp16"
        num_actors = options.num_actors or max(1, int(gpus))
        threads = max(1, int(options.num_cpus_per_actor))
        return _Resources(device, precision, num_actors, threads, options.num_cpus_per_actor, 1.0)
    precision = "fp32" if options.precision == "auto" else options.precision
    # On CPU, parallel batches beat parallel threads: intra-op threads wait on each other at every
    # layer (badly so on a shared machine), so up to 4 actors share the cores, each with its
    # share of threads (each actor holds the whole chunk, so their number is capped).
    num_actors = options.num_actors or max(1, min(4, int(cpus)))
    threads = max(1, int(cpus // num_actors))
    return _Resources(device, precision, num_actors, threads, options.num_cpus_per_actor, 0.0)


def _shard_rows(store: Store, entry_key: tuple[str, str, str]) -> int:
    """Rows held by an entry's shards (Parquet footers only)."""
    import pyarrow.parquet as pq

    base = Store.embedding_dir(*entry_key)
    return sum(
        pq.read_metadata(store.path(f"{base}/{name}"), filesystem=store.fs).num_rows
        for name in store.shard_names(*entry_key)
    )


def complete_entries(
    store: Store, entries: Sequence[Entry], manifest: pd.DataFrame
) -> set[tuple[str, str, str]]:
    """Entries done with the same fingerprint whose shards hold exactly the manifest's rows."""
    from concurrent.futures import ThreadPoolExecutor

    previous = {(r["dataset"], r["view"], r["model_id"]): r for r in manifest.to_dict("records")}
    candidates = []
    for e in entries:
        row = previous.get(e.key)
        if (row is not None and row.get("status") == "done"
                and row.get("fingerprint") == e.fingerprint and not pd.isna(row.get("rows"))):
            candidates.append((e.key, int(row["rows"])))

    def check(item: tuple[tuple[str, str, str], int]) -> bool:
        try:
            return _shard_rows(store, item[0]) == item[1]
        except OSError:
            return False

    # footers are small reads; on object stores their latency dominates, so read them in parallel
    with ThreadPoolExecutor(max_workers=16) as pool:
        flags = list(pool.map(check, candidates))
    return {key for (key, _), ok in zip(candidates, flags) if ok}


def _sample_rows(table: SampleTable, needed: np.ndarray) -> pd.DataFrame:
    pos = np.searchsorted(table.sample_id, needed)
    return pd.DataFrame(
        {
            "sample_id": needed.astype(np.int64),
            "payload": [table.image[i] for i in pos],
            "name": [f"{table.dataset}: {table.source[i]} (sample_id {table.sample_id[i]})"
                     for i in pos],
        }
    )


class _Display:
    """The live rich progress of the run (images/s and models done)."""

    def __init__(self, total_entries: int, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not enabled,
            transient=False,
        )
        self.models = self.progress.add_task("entries done", total=total_entries, rate="")
        self.images = None
        self.t0 = time.perf_counter()
        self.count = 0

    def __enter__(self) -> _Display:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def pipeline(self, label: str, total: int) -> None:
        if self.images is not None:
            self.progress.remove_task(self.images)
        self.images = self.progress.add_task(label, total=total, rate="")
        self.t0, self.count = time.perf_counter(), 0

    def advance_images(self, n: int) -> None:
        self.count += n
        rate = self.count / max(1e-9, time.perf_counter() - self.t0)
        self.progress.update(self.images, advance=n, rate=f"{rate:,.0f} img/s")

    def entries_done(self, n: int) -> None:
        self.progress.update(self.models, advance=n)


def _run_pipeline(
    store: Store,
    config: RunConfig,
    spec: DatasetSpec,
    table: SampleTable,
    geometry: Geometry,
    chunk_entries: list[list[Entry]],
    res: _Resources,
    display: _Display,
) -> Iterable[tuple[list[Entry], dict[tuple[str, str], Outcome], dict[str, Any]]]:
    """Run the chunks of one (dataset, geometry) group; yields (entries, outcomes, stats) per chunk.
    """
    import ray

    views: dict[str, ViewSpec] = {}
    needed: dict[str, set[int]] = defaultdict(set)
    for entries in chunk_entries:
        for e in entries:
            views[e.view.name] = e.view
            needed[e.view.name].update(e.samples.tolist())
    plans = [
        ViewPlan(v.name, v.recipe_name, v.per_sample, np.asarray(sorted(needed[v.name]), np.int64),
                 v.is_clean)
        for v in views.values()
    ]
    all_needed = np.unique(np.concatenate([p.samples for p in plans]))
    rows = _sample_rows(table, all_needed)
    n_blocks = max(1, math.ceil(len(rows) / DECODE_BATCH))
    bounds = np.linspace(0, len(rows), n_blocks + 1).astype(int)
    ds = ray.data.from_pandas([rows.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
    ds = ds.map_batches(
        decode_views,
        fn_kwargs={"geometry": ViewGeometry(geometry.input_size, geometry.interpolation,
                                            geometry.crop_pct),
                   "plans": plans, "seed": config.seed},
        batch_size=DECODE_BATCH,
        batch_format="numpy",
        num_cpus=DECODE_NUM_CPUS,
    )
    if len(chunk_entries) > 1:
        ds = ds.materialize()  # decode once; every chunk's actor pool reads the same views
    total_images = sum(len(p.samples) * p.per_sample for p in plans)
    for ci, entries in enumerate(chunk_entries):
        models = list({e.model.model_id: e.model for e in entries}.values())
        wanted: dict[str, list[str]] = defaultdict(list)
        for e in entries:
            wanted[e.model.model_id].append(e.view.name)
        label = (f"{spec.name} {geometry.input_size}px {geometry.interpolation}"
                 + (f" chunk {ci + 1}/{len(chunk_entries)}" if len(chunk_entries) > 1 else "")
                 + f" ({len(models)} model{'s' if len(models) > 1 else ''})")
        display.pipeline(label, total_images)
        embedded = ds.map_batches(
            EmbedActor,
            fn_constructor_kwargs={
                "store_uri": store.uri,
                "dataset": spec.name,
                "models": models,
                "wanted": dict(wanted),
                "device": res.device,
                "precision": res.precision,
                "num_threads": res.num_threads,
                "import_paths": factory_paths(models),
            },
            # no more actors than batches: each one loads the whole chunk
            compute=ray.data.ActorPoolStrategy(
                size=max(1, min(res.num_actors, math.ceil(total_images / config.embed.batch_size)))
            ),
            batch_size=config.embed.batch_size,
            batch_format="numpy",
            num_cpus=res.num_cpus,
            num_gpus=res.num_gpus,
        )
        outcomes: dict[tuple[str, str], Outcome] = defaultdict(Outcome)
        t_start, wall_start = time.perf_counter(), time.time()
        first_call, last_done = math.inf, -math.inf
        images = 0
        load_seconds: list[float] = []
        for batch in embedded.iter_batches(batch_size=None, batch_format="numpy"):
            for i in range(len(batch["view"])):
                key = (str(batch["view"][i]), str(batch["model_id"][i]))
                o = outcomes[key]
                o.rows += int(batch["rows"][i])
                o.seconds += float(batch["seconds"][i])
                o.bad_images += int(batch["bad"][i])
                if int(batch["dim"][i]) >= 0:
                    o.dim = int(batch["dim"][i])
                if batch["error"][i] and o.error is None:
                    o.error = str(batch["error"][i])
                if batch["bad"][i] and spec.on_bad_image == "fail":
                    raise InputError(f"{batch['bad_error'][i]} (on_bad_image: fail)")
            n_images = int(np.sum(batch["images"]))
            images += n_images
            load_seconds += [float(x) for x in batch["load_seconds"] if x > 0]
            if np.isfinite(batch["called"]).any():
                first_call = min(first_call, float(np.nanmin(batch["called"])))
                last_done = max(last_done, float(np.nanmax(batch["done"])))
            display.advance_images(n_images)
        t_end = time.perf_counter()
        # steady state: from the first batch an actor started to the last one it finished
        steady = last_done - first_call if last_done > first_call else 0.0
        stats = {
            "dataset": spec.name,
            "geometry": geometry,
            "chunk": ci,
            "models": len(models),
            "actors": res.num_actors,
            "images": images,
            "seconds": t_end - t_start,
            # until an actor starts its first batch: actor start-up (and the first decoding)
            "startup_seconds": (first_call - wall_start) if steady else t_end - t_start,
            "model_load_seconds": max(load_seconds, default=0.0),
            "steady_seconds": steady,
            "steady_images_per_second": images / steady if steady > 0 else None,
        }
        log.info("embed pipeline %s", stats)
        yield entries, outcomes, stats


def _manifest_row(entry: Entry, outcome: Outcome | None) -> dict[str, Any]:
    o = outcome or Outcome(error="no output (the pipeline produced no record for this entry)")
    error = o.error
    # A sample counts once per view (not per view_index), so rows = (covered − bad) × q.
    expected = (len(entry.samples) - o.bad_images) * entry.view.per_sample
    if error is None and o.rows != expected:
        error = f"incomplete: {o.rows} rows written, {expected} expected"
    if error is None and o.dim is None and expected > 0:
        error = "no embeddings produced"
    return {
        "dataset": entry.dataset,
        "view": entry.view.name,
        "model_id": entry.model.model_id,
        "fingerprint": entry.fingerprint,
        "status": "failed" if error else "done",
        "error": error,
        "rows": int(o.rows) if not error else 0,
        "dim": int(o.dim) if o.dim is not None else None,
        "seconds": round(float(o.seconds), 4),
        "bad_images": int(o.bad_images),
    }


def plan_entries(
    config: RunConfig, models: list[ResolvedModel], tables: dict[str, SampleTable]
) -> list[Entry]:
    """Every (dataset, view, model) of the config, with fingerprints and covered samples."""
    entries = []
    for spec in config.datasets:
        table = tables[spec.name]
        selection = dataset_selection(spec, table)
        for view in config.views:
            samples = view_subset(table.sample_id, view, config.seed)
            for m in models:
                if not m.wants(spec.name):  # a model entry's ``datasets:`` leaves this one out
                    continue
                fp = entry_fingerprint(m, selection, view, config.seed)
                entries.append(Entry(spec.name, view, m, fp, samples))
    return entries


def run_embed(config: RunConfig, address: str | None = None) -> pd.DataFrame:
    """Embed every (dataset, view, model) of ``config`` into the store; returns their manifest rows.

    Entries already done with the same fingerprint and complete shards are skipped. Failed models
    are recorded (status ``failed`` with the reason) and the run returns normally. The live
    progress and the summary table go to the terminal (``ZOORANK_PROGRESS=0`` turns them off);
    ``result.attrs["pipelines"]`` holds each pipeline's timings (start-up, steady-state images/s).
    """
    check_views(config.views)
    store = Store(config.store)
    models = resolve_models(config)
    tables = {spec.name: load_samples(spec, config.seed) for spec in config.datasets}
    entries = plan_entries(config, models, tables)

    manifest = store.read_manifest()
    previous = {
        (r["dataset"], r["view"], r["model_id"]): r for r in manifest.to_dict("records")
    }
    skipped = complete_entries(store, entries, manifest)
    todo = [e for e in entries if e.key not in skipped]
    for spec in config.datasets:
        write_samples(store, spec.name, tables[spec.name])

    results: dict[tuple[str, str, str], dict[str, Any]] = {
        k: {**previous[k], "status": "done"} for k in skipped
    }
    show = os.environ.get("ZOORANK_PROGRESS", "1") != "0"
    pipelines: list[dict[str, Any]] = []
    if todo:
        from zoorank.runtime import ensure_ray

        ensure_ray(address)
        _quiet_ray_data()
        res = _resources(config.embed)
        for e in todo:
            store.clear_embeddings(*e.key)
        groups: dict[tuple[str, Geometry], list[Entry]] = defaultdict(list)
        for e in todo:
            groups[(e.dataset, e.model.geometry)].append(e)
        specs = {s.name: s for s in config.datasets}
        with _Display(len(entries), enabled=show) as display:
            display.entries_done(len(skipped))
            for (dataset, geometry), group in groups.items():
                chunk_entries = _chunk_entries(group, config.embed)
                for done_entries, outcomes, stats in _run_pipeline(
                    store, config, specs[dataset], tables[dataset], geometry, chunk_entries,
                    res, display,
                ):
                    rows = [_manifest_row(e, outcomes.get((e.view.name, e.model.model_id)))
                            for e in done_entries]
                    for r, e in zip(rows, done_entries):
                        if r["status"] != "done":
                            store.clear_embeddings(*e.key)  # never leave partial shards behind
                        results[e.key] = r
                    store.update_manifest(rows)
                    display.entries_done(len(rows))
                    pipelines.append(stats)
    out = pd.DataFrame([results[e.key] for e in entries if e.key in results])
    _print_summary(out, skipped, enabled=show)
    out = out.reset_index(drop=True)
    #: timings of each pipeline run (start-up, steady-state images/s) for benchmarks and logs.
    out.attrs["pipelines"] = pipelines
    return out


def _chunk_entries(group: list[Entry], options: EmbedOptions) -> list[list[Entry]]:
    models = list({e.model.model_id: e.model for e in group}.values())
    chunks = chunk_models(models, options)
    by_model: dict[str, list[Entry]] = defaultdict(list)
    for e in group:
        by_model[e.model.model_id].append(e)
    return [[e for m in chunk for e in by_model[m.model_id]] for chunk in chunks]


def _quiet_ray_data() -> None:
    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = False
    for name in ("ray.data", "ray.data._internal.execution.streaming_executor"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _print_summary(rows: pd.DataFrame, skipped: set[tuple[str, str, str]], enabled: bool) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if rows.empty:
        return
    if enabled:
        table = Table(title="embed")
        for col in ("dataset", "view", "model", "status", "rows", "dim", "seconds"):
            table.add_column(col, justify="right" if col in ("rows", "dim", "seconds") else "left")
        for r in rows.to_dict("records"):
            key = (r["dataset"], r["view"], r["model_id"])
            status = "done (cached)" if key in skipped else str(r["status"])
            style = "red" if r["status"] == "failed" else None
            dim = "" if r["dim"] is None or pd.isna(r["dim"]) else str(int(r["dim"]))
            table.add_row(r["dataset"], r["view"], r["model_id"], status, str(int(r["rows"] or 0)),
                          dim, f"{float(r['seconds'] or 0):.2f}", style=style)
        console.print(table)
    failed = rows[rows["status"] == "failed"]
    bad = rows[(rows["status"] == "done") & (rows["bad_images"].fillna(0) > 0)]
    for (model_id, error), group in failed.groupby(["model_id", "error"], sort=False):
        where = ", ".join(f"{d}/{v}" for d, v in zip(group["dataset"], group["view"]))
        console.print(f"[red]failed[/red] {escape(str(model_id))} ({escape(where)}): "
                      f"{escape(str(error))}")
    if len(failed):
        console.print(f"{len(failed)} of {len(rows)} embeddings failed (recorded in the manifest)")
    for (dataset, view), n in bad.groupby(["dataset", "view"])["bad_images"].max().items():
        console.print(escape(f"{dataset}/{view}: skipped {int(n)} undecodable image(s)"))
