"""The embedding work of one model chunk: load the chunk once, run every model on every batch of
shared uint8 views, and write each (view, model) entry as a few large ``part-*.parquet`` files.

:func:`embed_slice` is the body of a Ray task (one GPU, or CPU threads): it streams the parts of the
decoded-view cache (:mod:`zoorank.embed.viewcache`) it is given, one ahead, and buffers each entry's rows
(:class:`~zoorank.embed.entry_writer.EntryWriter`) until ``PART_BYTES`` or the end, so an entry gets
one file per slice (more only past ``PART_BYTES``). File names are ``part-<slice>-<k>.parquet``: a
retried task rewrites the same names with the same rows.

Failures stay per model: a model that cannot be loaded, gives NaN/Inf or fails its forward is
recorded with its reason and skipped for the rest of the slice; the others go on. A CUDA OOM runs
the batch in halves.

Heads: a model whose classifier head was found (:func:`zoorank.zoo.load_model`) gives its logits
from the same forward as its features; on its first batch its label space for the dataset
(:mod:`zoorank.zoo.label_space`) picks the K head outputs kept, in the dataset's class order, and
the shards get a ``logits`` column (:mod:`zoorank.store.shards`). A label space that does not fit
is the model's error, recorded as ``ConfigError: ...`` (EMBED raises it once the rest is saved).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from zoorank.embed.entry_writer import EntryWriter
from zoorank.store import Store

#: set (seconds) to make each slice sleep before embedding (tests watch it run, then kill it).
ENV_SLOW_SLICE = "ZOORANK_TEST_SLICE_DELAY"


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]


def torch_device(device: str, allow_cpu_torch: bool) -> str:
    """The torch device of a GPU-scheduled worker: ``cpu`` when it has no CUDA and CPU is allowed.

    ``allow_cpu_torch`` (``embed.allow_cpu_torch`` or ``ZOORANK_GPU_AS_CPU=1``) lets tests run
    GPU-scheduled work on CPU torch on machines whose Ray nodes declare fake GPU resources.
    """
    if device != "cuda":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if allow_cpu_torch or os.environ.get("ZOORANK_GPU_AS_CPU") == "1":
        return "cpu"
    raise RuntimeError("embed.device is 'cuda' but this worker has no CUDA device "
                       "(set embed.allow_cpu_torch: true only for tests with fake GPU resources)")


def resolve_precision(precision: str, device: str) -> str:
    """The precision a forward runs in, decided here, on the worker that runs it.

    ``auto`` is fp32 on CPU, bf16 on a GPU that supports it, else fp16. The driver never decides
    it (a cluster's head may have no GPU, or another one): the entry's fingerprint holds the
    configured value and the manifest records the resolved one (column ``precision``).
    """
    if precision != "auto":
        return precision
    if device != "cuda":
        return "fp32"
    import torch

    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def library_versions() -> str:
    """JSON of the versions of the libraries an embedding depends on (torch, timm, transformers,
    Pillow, numpy), as recorded with each manifest entry; "" for one that is not installed."""
    import json
    from importlib import metadata

    out = {}
    for dist in ("torch", "timm", "transformers", "Pillow", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = ""
    return json.dumps(out, sort_keys=True)


def _is_cpu_oom(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, MemoryError) or (
        isinstance(err, RuntimeError) and ("DefaultCPUAllocator" in text
                                           or "can't allocate memory" in text))


class ChunkEmbedder:
    """Holds a chunk of models and embeds batches of shared uint8 views with each of them.

    Every forward takes at most ``batch_size`` views (``embed.batch_size``), whatever the size of
    the cache parts it reads.
    """

    def __init__(self, models: Sequence[Any], device: str = "cpu", precision: str = "fp32",
                 num_threads: int = 1, batch_size: int = 64,
                 label_spaces: dict[str, Any] | None = None) -> None:
        import torch

        from zoorank.zoo import load_model

        t0 = time.perf_counter()
        torch.set_num_threads(max(1, int(num_threads)))
        self.torch = torch
        self.device = torch.device(device)
        self.batch_size = max(1, int(batch_size))
        self.precision = resolve_precision(precision, self.device.type)
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        self.models: dict[str, Any] = {}
        self.norms: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        #: model_id → parameters of the module that embeds (a prior: :mod:`zoorank.stats.priors`)
        self.param_counts: dict[str, int] = {}
        #: model_id → the dataset's label space for its head (None: no head is looked for)
        self.label_spaces: dict[str, Any] = dict(label_spaces or {})
        #: model_id → the head outputs kept, in class order (None: the head is not kept), set on
        #: the model's first batch
        self.head_columns: dict[str, Any] = {}
        for m in models:
            try:
                net = load_model(m, device=device)
                self.param_counts[m.model_id] = int(sum(p.numel() for p in net.parameters()))
                if self.device.type == "cuda":
                    net = net.to(memory_format=torch.channels_last)
                self.models[m.model_id] = net
                self.norms[m.model_id] = m.normalization
            except Exception as err:  # isolate: this model fails, the others run
                self.errors[m.model_id] = _short(err)
        self.order = [m.model_id for m in models]
        self.load_seconds = time.perf_counter() - t0

    def _normalized(self, x: Any, norm: Any) -> Any:
        torch = self.torch
        mean = torch.tensor(norm.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(norm.std, device=x.device).view(1, 3, 1, 1)
        x = (x - mean) / std
        if self.device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def _forward_batches(self, net: Any, x: Any) -> tuple[Any, Any]:
        """``net`` over ``x`` in forwards of at most :attr:`batch_size` rows: (features, logits or
        None)."""
        b = self.batch_size
        if len(x) <= b:
            return self._forward(net, x)
        return self._cat([self._forward(net, x[i:i + b]) for i in range(0, len(x), b)])

    def _cat(self, parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
        feats = self.torch.cat([p[0] for p in parts])
        logits = None if parts[0][1] is None else self.torch.cat([p[1] for p in parts])
        return feats, logits

    def _forward(self, net: Any, x: Any) -> tuple[Any, Any]:
        """Forward with autocast where asked; a CUDA OOM runs the batch again in halves; running out
        of CPU memory is an error that says which batch size failed."""
        torch = self.torch
        try:
            if self.autocast_dtype is not None:
                with torch.autocast(self.device.type, dtype=self.autocast_dtype):
                    feats, logits = net.features_and_logits(x)
            else:
                feats, logits = net.features_and_logits(x)
            return feats.float(), None if logits is None else logits.float()
        except torch.cuda.OutOfMemoryError:
            if len(x) <= 1:
                raise
            torch.cuda.empty_cache()
            h = len(x) // 2
            return self._cat([self._forward(net, x[:h]), self._forward(net, x[h:])])
        except (RuntimeError, MemoryError) as err:
            if not _is_cpu_oom(err):
                raise
            raise MemoryError(
                f"out of CPU memory in a forward of {len(x)} views of "
                f"{tuple(x.shape[1:])} ({_short(err)}); lower embed.batch_size (now "
                f"{self.batch_size}) or embed.models_per_actor, or give the workers more memory"
            ) from None

    def _kept_logits(self, model_id: str, logits: Any) -> np.ndarray | None:
        """The logits of the head outputs kept for the dataset's classes (float32 (B, K)), or None
        when the model has no head. Raises ConfigError when the label space does not fit."""
        if logits is None:
            return None
        if model_id not in self.head_columns:
            from zoorank.zoo.label_space import LabelSpace, head_columns

            space = self.label_spaces.get(model_id) or LabelSpace("?", None)
            self.head_columns[model_id] = head_columns(space, int(logits.shape[1]), model_id)
        columns = self.head_columns[model_id]
        if int(logits.shape[1]) <= int(columns.max()):
            raise ValueError(f"the head gave {logits.shape[1]} outputs, then fewer than before")
        out = logits.cpu().numpy()[:, columns]
        if not np.isfinite(out).all():
            raise ValueError(f"logits contain {int((~np.isfinite(out)).sum())} NaN/Inf values")
        return np.ascontiguousarray(out, dtype=np.float32)

    def embed(self, batch: dict[str, np.ndarray], wanted: dict[str, set[str]]
              ) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None, float]]:
        """(view, model_id) → (float32 features of the batch's good rows of that view, their kept
        logits or None, seconds).

        Rows are those of ``batch`` with ``bad`` False and ``view`` == view, in batch order. A model
        that fails here is moved to :attr:`errors`.
        """
        from zoorank.zoo import check_features

        torch = self.torch
        views = batch["view"]
        ok = ~batch["bad"]
        ok_views = views[ok]
        present = sorted(set(ok_views.tolist()))
        out: dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None, float]] = {}
        if not present:
            return out
        with torch.inference_mode():
            images = torch.from_numpy(np.ascontiguousarray(batch["image"][ok])).to(self.device)
            x = images.permute(0, 3, 1, 2).float().div_(255.0)
            cache: dict[tuple[Any, tuple[str, ...]], Any] = {}
            for model_id in self.order:
                want = [v for v in present if v in wanted.get(model_id, ())]
                if not want or model_id in self.errors:
                    continue
                sel = np.isin(ok_views, want)
                key = (self.norms[model_id], tuple(want))
                if key not in cache:
                    idx = np.flatnonzero(sel)
                    part = x if len(idx) == len(x) else x[torch.from_numpy(idx).to(x.device)]
                    cache[key] = self._normalized(part, self.norms[model_id])
                t0 = time.perf_counter()
                try:
                    feats, logits = self._forward_batches(self.models[model_id], cache[key])
                    check_features(feats, model_id)
                    feats = feats.cpu().numpy()
                    logits = self._kept_logits(model_id, logits)
                except Exception as err:
                    self.errors[model_id] = _short(err)
                    del self.models[model_id]
                    continue
                seconds = time.perf_counter() - t0
                sub = ok_views[sel]
                for v in want:
                    mask = sub == v
                    out[(v, model_id)] = (feats[mask], None if logits is None else logits[mask],
                                          seconds * float(mask.mean()))
        return out


def embed_slice(
    store_uri: str,
    dataset: str,
    cache_dir: str,
    parts: Sequence[str],
    models: Sequence[Any],
    wanted: dict[str, list[str]],
    slice_index: int,
    device: str = "cpu",
    precision: str = "fp32",
    num_threads: int = 1,
    allow_cpu_torch: bool = False,
    import_paths: Sequence[str] = (),
    batch_size: int = 64,
    label_spaces: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Embed cache ``parts`` with every model of a chunk; write each entry's rows; report.

    ``label_spaces``: model_id → :class:`zoorank.zoo.label_space.LabelSpace` of the dataset for
    the models whose head is looked for. Returns ``{"records": [{view, model_id, rows, dim,
    logit_dim, seconds, error, shards, precision, versions, param_count}],
    "images", "load_seconds", "called", "done", "node_id"}`` (wall-clock times, comparable across
    workers; ``precision`` as resolved on this worker, ``versions`` :func:`library_versions`). Row
    counts are the task's own account; the driver verifies what is on disk before anything is
    marked done. ``batch_size`` bounds every forward.
    """
    import sys

    from zoorank.embed import viewcache

    sys.path.extend(p for p in import_paths if p not in sys.path and os.path.isdir(p))
    if os.environ.get(ENV_SLOW_SLICE):
        time.sleep(float(os.environ[ENV_SLOW_SLICE]))
    store = Store(store_uri)
    embedder = ChunkEmbedder(models, torch_device(device, allow_cpu_torch), precision, num_threads,
                             batch_size, label_spaces)
    want = {k: set(v) for k, v in wanted.items()}
    writer = EntryWriter(store, dataset, slice_index)
    rows: dict[tuple[str, str], int] = defaultdict(int)
    dims: dict[tuple[str, str], int] = {}
    logit_dims: dict[tuple[str, str], int] = {}
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    images = 0
    called = time.time()  # after the models are loaded: the steady state starts here
    with ThreadPoolExecutor(max_workers=1) as pool:  # read the next part while this one runs
        pending = pool.submit(viewcache.read_part, store, cache_dir, parts[0]) if parts else None
        for i in range(len(parts)):
            batch = pending.result()
            pending = (pool.submit(viewcache.read_part, store, cache_dir, parts[i + 1])
                       if i + 1 < len(parts) else None)
            out = embedder.embed(batch, want)
            ok = ~batch["bad"]
            images += int(ok.sum())
            sid, vi, views = batch["sample_id"][ok], batch["view_index"][ok], batch["view"][ok]
            for (v, model_id), (feats, logits, secs) in out.items():
                mask = views == v
                writer.add((v, model_id), sid[mask], vi[mask], feats, logits)
                rows[(v, model_id)] += int(mask.sum())
                dims[(v, model_id)] = int(feats.shape[1])
                logit_dims[(v, model_id)] = 0 if logits is None else int(logits.shape[1])
                seconds[(v, model_id)] += secs
            for model_id in embedder.errors:
                for v in want.get(model_id, ()):
                    writer.drop((v, model_id))
    for model_id in embedder.errors:
        for v in want.get(model_id, ()):
            writer.drop((v, model_id))
    writer.close()
    records = []
    versions = library_versions()
    for model_id, views in wanted.items():
        for v in views:
            key = (v, model_id)
            records.append({"view": v, "model_id": model_id, "rows": rows.get(key, 0),
                            "dim": dims.get(key, -1), "logit_dim": logit_dims.get(key, 0),
                            "seconds": seconds.get(key, 0.0),
                            "error": embedder.errors.get(model_id, ""),
                            "shards": writer.files.get(key, []),
                            "precision": embedder.precision, "versions": versions,
                            "param_count": embedder.param_counts.get(model_id)})
    return {"records": records, "images": images, "load_seconds": embedder.load_seconds,
            "called": called, "done": time.time(), "node_id": _node_id()}


def _node_id() -> str:
    """The Ray node this task ran on ("" outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # not in a Ray worker
        return ""
