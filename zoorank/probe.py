"""The public probe API: label-free scores of *your* model on a fixed, seeded probe set.

Two calls::

    from zoorank.probe import build_probe_set, evaluate

    probe = build_probe_set({"name": "digits", "source": "sklearn_digits"}, input_size=8,
                            samples=512, per_sample=4, seed=0)
    result = evaluate(model, probe)          # any nn.Module or callable images → features
    result.metrics["lidar"], result.flags["collapsed"]

Conventions
-----------
* **The probe set is what EMBED makes.** :func:`build_probe_set` reads the dataset spec with
  :func:`zoorank.data.load_samples` (``limit`` and ``seed`` as a run config reads them), makes the
  clean view of every sample with :func:`zoorank.data.views.clean_view` and ``per_sample`` augmented views
  of the seeded subset :func:`zoorank.data.views.view_subset` with :func:`zoorank.data.views.make_views` (one
  RNG per (seed, sample_id, view_index)). ``clean_samples`` caps the clean rows with the score
  stage's own subset (:func:`zoorank.metrics.suite.select_samples`, ``score.max_samples``). So the
  run config of :meth:`ProbeSet.run_config` embeds exactly these images, and ``zoorank run`` on an
  exported checkpoint stores the metric values :func:`evaluate` returned (to float32 rounding of
  the forward pass).
* **The model's input** is the uint8 view scaled to [0, 1] and normalised per channel with the
  probe set's ``mean``/``std`` (ImageNet's by default), NCHW float32, in batches of
  ``batch_size``, as the embed stage feeds a model. Outputs are pooled as the zoo pools them
  (:func:`zoorank.zoo.pool_features`: a tuple/dict gives its first tensor, ``(B, C, H, W)`` maps are
  averaged over space, ``(B, N, C)`` tokens over N) to float32 ``(B, d)``.
* **Devices and precision.** An ``nn.Module`` runs on the device of its first parameter (or
  ``device``), in eval mode under ``torch.inference_mode`` (its train/eval mode is put back after);
  inputs take the dtype of its floating parameters (a ``.half()`` model gets fp16 inputs);
  ``precision="bf16"|"fp16"`` adds autocast. A plain callable gets tensors on ``device`` (CPU by
  default) and may return a tensor or a NumPy array.
* **Metrics** are the registry's per-model label-free metrics computed by
  :func:`zoorank.metrics.suite.label_free_suite` with the score stage's settings
  (:class:`zoorank.config.ScoreOptions`, the probe seed). Pool metrics (``clid``'s z-scores,
  ``nc``) need a pool of models and are left to ``zoorank run``; ``clid_raw`` (``100·CL + ID``, the
  per-model sum the Tune objective reports) is added when CL and ID are computed.
* **Health flags** (True = a problem): ``nonfinite`` (NaN/Inf features; no metric is computed),
  ``collapsed`` (half or more of the clean rows repeat exactly, or numerical rank ≤ 1; the rule is
  :func:`zoorank.metrics.label_free.collapse.collapse_flags`),
  ``low_rank`` (RankMe below max(2, 1% of min(n, d))), ``degenerate`` (a metric warned of degenerate input
  or failed; see ``errors`` / ``warnings``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoorank.config import DatasetSpec, ScoreOptions, ViewSpec
from zoorank.data import load_samples
from zoorank.data.images import decode_image
from zoorank.data.views import clean_view, make_views, view_subset
from zoorank.errors import ConfigError, InputError
from zoorank.metrics import registry
from zoorank.metrics.label_free.collapse import collapse_flags
from zoorank.metrics.suite import label_free_suite, select_samples
from zoorank.zoo import IMAGENET_MEAN, IMAGENET_STD, Geometry, pool_features

__all__ = ["ProbeResult", "ProbeSet", "build_probe_set", "evaluate", "DEFAULT_METRICS"]

#: the per-model label-free metrics of the registry (its order), what :func:`evaluate` computes.
DEFAULT_METRICS: tuple[str, ...] = tuple(
    name for name, m in registry.REGISTRY.items() if m.compute is not None
)


@dataclass(frozen=True)
class ProbeSet:
    """A fixed probe set: clean views of ``sample_id`` and ``q`` augmented views of ``view_ids``.

    ``clean`` uint8 (n_clean, H, W, 3); ``views`` uint8 (n, q, H, W, 3); ``view_ids`` ⊆ the
    dataset's samples. ``geometry``/``mean``/``std`` say how a model sees them.
    """

    dataset: DatasetSpec
    sample_id: np.ndarray
    clean: np.ndarray
    view_ids: np.ndarray
    views: np.ndarray
    recipe: str
    seed: int
    geometry: Geometry
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    samples: int | None = None
    clean_samples: int | None = None
    skipped: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Samples with augmented views."""
        return int(self.views.shape[0])

    @property
    def q(self) -> int:
        return int(self.views.shape[1])

    def run_config(self, models: Sequence[Mapping[str, Any]], store: str,
                   metrics: Sequence[str] | None = None, **extra: Any) -> dict[str, Any]:
        """A run config (a mapping for ``zoorank run``) whose EMBED makes exactly this probe set.

        ``models`` are model entries; each gets this probe set's ``input_size``, ``interpolation``,
        ``crop_pct``, ``mean`` and ``std`` unless it sets them (a ``from_tune`` entry's zoo file
        carries its own). ``metrics`` are config metric
        names (default: every per-model one). ``extra`` adds top-level fields (``rank``, ...).
        """
        g = self.geometry
        preprocessing = {"input_size": g.input_size, "interpolation": g.interpolation,
                         "crop_pct": g.crop_pct, "mean": list(self.mean), "std": list(self.std)}
        names = list(metrics) if metrics is not None else list(dict.fromkeys(
            registry.REGISTRY[m].config_name for m in DEFAULT_METRICS))
        config: dict[str, Any] = {
            "store": store,
            "seed": self.seed,
            "datasets": [self.dataset.model_dump(mode="json", exclude_defaults=True)
                         | {"name": self.dataset.name, "source": self.dataset.source}],
            "models": [dict(m) if "from_tune" in m else preprocessing | dict(m) for m in models],
            "views": [{"name": "clean"},
                      {"name": self.recipe, "samples": self.samples, "per_sample": self.q}],
            "metrics": names,
        }
        if self.clean_samples is not None:
            config["score"] = {"max_samples": self.clean_samples}
        for key, value in extra.items():
            config[key] = (config.get(key, {}) | value) if isinstance(value, dict) else value
        return config


def build_probe_set(
    dataset: DatasetSpec | Mapping[str, Any],
    *,
    input_size: int | None = None,
    samples: int | None = 1000,
    per_sample: int = 4,
    recipe: str = "simclr",
    seed: int = 0,
    clean_samples: int | None = None,
    interpolation: str = "bicubic",
    crop_pct: float = 1.0,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> ProbeSet:
    """Draw the probe set of a dataset spec (a :class:`zoorank.config.DatasetSpec` or its mapping).

    ``samples`` samples (None: all) get ``per_sample`` views by ``recipe``; every sample (at most
    ``clean_samples``, None: all) gets its clean view. ``input_size`` defaults to the first image's
    longer side. Undecodable images are skipped when the spec says ``on_bad_image: skip`` (as EMBED
    skips them) and listed in ``skipped``. Raises ConfigError for a bad spec or recipe.
    """
    if not isinstance(dataset, DatasetSpec):
        try:
            dataset = DatasetSpec.model_validate(dict(dataset))
        except Exception as err:
            raise ConfigError(f"dataset: {err}") from None
    try:
        view = ViewSpec(name=recipe, samples=samples, per_sample=per_sample)
    except Exception as err:
        raise ConfigError(f"probe views: {err}") from None
    from zoorank.data.views import get_recipe

    get_recipe(recipe)
    table = load_samples(dataset, seed)
    if len(table) == 0:
        raise InputError(f"dataset {dataset.name!r} has no samples")
    position = {int(s): i for i, s in enumerate(table.sample_id)}
    decoded: dict[int, Any] = {}
    skipped: list[str] = []

    def image(sid: int):
        if sid not in decoded:
            i = position[sid]
            try:
                decoded[sid] = decode_image(table.images[i], table.source_name(sid))
            except InputError as err:
                if dataset.on_bad_image == "fail":
                    raise
                decoded[sid] = None
                skipped.append(str(err))
        return decoded[sid]

    if input_size is None:
        first = next(img for sid in table.sample_id if (img := image(int(sid))) is not None)
        input_size = max(first.size)
    geometry = Geometry(int(input_size), interpolation, float(crop_pct))
    clean_pos = select_samples(table.sample_id, clean_samples, seed)
    clean_ids, clean = [], []
    for sid in table.sample_id[clean_pos]:
        img = image(int(sid))
        if img is not None:
            clean_ids.append(int(sid))
            clean.append(clean_view(img, geometry))
    view_ids, views = [], []
    for sid in view_subset(table.sample_id, view, seed):
        img = image(int(sid))
        if img is not None:
            view_ids.append(int(sid))
            views.append(np.stack(make_views(img, int(sid), recipe, geometry, per_sample, seed)))
    if not clean or not views:
        raise InputError(f"dataset {dataset.name!r}: no decodable image in the probe set")
    return ProbeSet(
        dataset=dataset, sample_id=np.asarray(clean_ids, dtype=np.int64), clean=np.stack(clean),
        view_ids=np.asarray(view_ids, dtype=np.int64), views=np.stack(views), recipe=recipe,
        seed=seed, geometry=geometry, mean=tuple(float(v) for v in mean),
        std=tuple(float(v) for v in std), samples=samples, clean_samples=clean_samples,
        skipped=tuple(skipped),
    )


@dataclass
class ProbeResult:
    """What :func:`evaluate` returns.

    ``metrics``: metric → value (NaN only with an entry in ``errors``); ``flags``: health flags
    (True = a problem; module docstring); ``params``: each metric's settings and details as the
    score stage stores them; ``seconds``: ``embed``, ``metrics``, ``total``.
    """

    metrics: dict[str, float]
    flags: dict[str, bool]
    errors: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    n: int = 0
    q: int = 0
    dim: int = 0

    @property
    def healthy(self) -> bool:
        return not any(self.flags.values())

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat floats for a logger or ``tune.report``: metrics, flags as 0/1 (``flag_<name>``)."""
        out = {f"{prefix}{k}": float(v) for k, v in self.metrics.items()}
        out |= {f"{prefix}flag_{k}": float(v) for k, v in self.flags.items()}
        return out


def _module_placement(model: Any, device: Any) -> tuple[Any, Any]:
    """(device, input dtype) of an nn.Module: its first parameter's (or buffer's), else CPU fp32."""
    import torch

    tensors = list(model.parameters()) + list(model.buffers())
    floats = [t for t in tensors if t.is_floating_point()]
    dev = torch.device(device) if device is not None else (
        tensors[0].device if tensors else torch.device("cpu"))
    dtype = floats[0].dtype if floats else torch.float32
    return dev, dtype


def embed_images(
    model: Callable[..., Any],
    images: np.ndarray,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    *,
    device: Any = None,
    precision: str | None = None,
    batch_size: int = 256,
) -> np.ndarray:
    """float32 (N, d) features of uint8 (N, H, W, 3) images (conventions: module docstring)."""
    import torch
    from torch import nn

    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision or "")
    if precision not in (None, "fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be fp32, bf16 or fp16, got {precision!r}")
    is_module = isinstance(model, nn.Module)
    if is_module:
        dev, dtype = _module_placement(model, device)
        was_training = model.training
        model.eval()
    else:
        dev, dtype, was_training = torch.device(device or "cpu"), torch.float32, False
    m = torch.tensor(mean, dtype=torch.float32, device=dev).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=dev).view(1, 3, 1, 1)
    out = []
    try:
        with torch.inference_mode():
            for start in range(0, len(images), batch_size):
                chunk = np.ascontiguousarray(images[start:start + batch_size])
                x = torch.from_numpy(chunk).to(dev).permute(0, 3, 1, 2).float().div_(255.0)
                x = ((x - m) / s).to(dtype)
                if autocast is not None:
                    with torch.autocast(dev.type, dtype=autocast):
                        y = model(x)
                else:
                    y = model(x)
                if isinstance(y, np.ndarray):
                    y = torch.from_numpy(y)
                out.append(pool_features(y).float().cpu().numpy())
    finally:
        if is_module and was_training:
            model.train()
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def evaluate(
    model: Callable[..., Any],
    probe: ProbeSet,
    *,
    metrics: Sequence[str] | None = None,
    options: ScoreOptions | Mapping[str, Any] | None = None,
    device: Any = None,
    precision: str | None = None,
    batch_size: int = 256,
) -> ProbeResult:
    """Label-free metrics and health flags of ``model`` on ``probe``.

    ``model``: an ``nn.Module`` or any callable from a normalised float batch ``(B, 3, H, W)`` to
    features (conventions: module docstring). ``metrics``: config or stored metric names
    (default :data:`DEFAULT_METRICS`). ``options``: the score stage's settings
    (:class:`zoorank.config.ScoreOptions`; ``lidar_delta``, ``eps``, ...).
    """
    t0 = time.perf_counter()
    options = ScoreOptions.model_validate(dict(options)) if isinstance(options, Mapping) else (
        options or ScoreOptions())
    names = list(metrics) if metrics is not None else list(DEFAULT_METRICS)
    images = np.concatenate([probe.clean, probe.views.reshape(-1, *probe.views.shape[2:])])
    feats = embed_images(model, images, probe.mean, probe.std, device=device,
                         precision=precision, batch_size=batch_size)
    embedded = time.perf_counter()
    n_clean = len(probe.clean)
    clean = feats[:n_clean]
    views = feats[n_clean:].reshape(probe.n, probe.q, -1)
    dim = int(feats.shape[1])
    flags = {"nonfinite": False, "collapsed": False, "low_rank": False, "degenerate": False}
    result = ProbeResult(metrics={}, flags=flags, n=probe.n, q=probe.q, dim=dim)
    if not np.all(np.isfinite(feats)):
        flags["nonfinite"] = flags["degenerate"] = True
        bad = int((~np.isfinite(feats)).any(axis=1).sum())
        for name in _stored_names(names):
            result.metrics[name] = math.nan
            result.errors[name] = f"features of {bad} of {len(feats)} images are NaN or Inf"
    else:
        wanted = list(dict.fromkeys([*names, "numerical_rank", "duplicate_fraction"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the suite records them per metric
            rows = label_free_suite(clean, views, wanted, options, probe.seed)
        for row in rows:
            params = row["params"]
            result.params[row["metric"]] = params
            if "error" in params:
                result.errors[row["metric"]] = params["error"]
            if params.get("warnings"):
                result.warnings[row["metric"]] = list(params["warnings"])
            if row["metric"] in _stored_names(names):
                result.metrics[row["metric"]] = row["value"]
        values = {r["metric"]: r["value"] for r in rows}
        # a pool metric's one-model value (CLID: 100·CL + ID), as a Tune trial reports it
        for name in _solo_metrics(result.metrics):
            result.metrics[f"{name}_raw"] = registry.solo_value(name, result.metrics)
        flags.update(collapse_flags(values["numerical_rank"], values["duplicate_fraction"],
                                    values.get("rankme", math.nan), n_clean, dim))
        flags["degenerate"] = bool(result.errors) or any(
            "degenerate" in w.lower() or "collapse" in w.lower()
            for ws in result.warnings.values() for w in ws)
    done = time.perf_counter()
    result.seconds = {"embed": embedded - t0, "metrics": done - embedded, "total": done - t0}
    return result


def _solo_metrics(computed: Mapping[str, float]) -> list[str]:
    """The registry's pool metrics with a one-model value whose terms were all computed."""
    return [m.name for m in registry.REGISTRY.values()
            if m.inputs == "pool" and m.solo is not None and m.config_name == m.name
            and all(t in computed for t in m.requires)]


def _stored_names(names: Sequence[str]) -> list[str]:
    """Config or stored names → the per-model stored names they ask for."""
    from zoorank.metrics.suite import per_model_metrics

    return per_model_metrics(names)
