"""A ranked model back as a network, and written out to ship: :func:`load_ranked` builds it with
the product's own loader (:func:`zoorank.zoo.load_model`, the one EMBED runs), :func:`export_model`
writes its backbone as safetensors beside a JSON of its preprocessing and provenance.

Conventions
-----------
* **Loaded model.** :func:`load_ranked` returns the
  :class:`~zoorank.zoo.features.FeatureExtractor` EMBED used: a normalized float tensor
  ``(B, 3, H, W)`` (the model's ``geometry`` and ``normalization``, as in the JSON) maps to the
  float32 features ``(B, dim)`` the store holds. Its ``.model`` is the bare network.
* **Same weights as the run.** The model is resolved from the run's config again; the entry
  fingerprints this gives (weight bytes, spec, data, views) must include one of the embeddings
  the store's manifest holds for that model id, so a checkpoint overwritten since the run is an
  error, never a silent other network.
* **Export.** ``OUT/model.safetensors`` is the bare network's ``state_dict()`` (the checkpoint's
  prefix stripped and its head rules applied, as loaded): it loads with
  ``load_state_dict(..., strict=True)`` into the architecture the JSON names (``architecture``:
  ``source``, ``name``, ``model_kwargs``; for timm, ``num_classes`` as built).
  ``OUT/zoorank-model.json`` holds that architecture, the preprocessing, and the provenance:
  the config digest (sha256 of the validated config as JSON), the checkpoint's path and sha256,
  the model fingerprint, the weights file's sha256, and the decision (pick or not, rank, metric
  values, ``decision.json``'s pick).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from zoorank.config import RunConfig
    from zoorank.store import Store
    from zoorank.zoo import ResolvedModel

#: the files an export writes into its directory
WEIGHTS_FILE = "model.safetensors"
INFO_FILE = "zoorank-model.json"
EXPORT_SCHEMA_VERSION = 1


def resolve_ranked(config: RunConfig, model_id: str, store: Store | None = None) -> ResolvedModel:
    """The config's model ``model_id``, resolved as the run resolved it; with ``store``, checked
    against the fingerprints its manifest recorded (InputError when the weights changed)."""
    from zoorank.errors import InputError
    from zoorank.zoo import resolve_models

    models = {m.model_id: m for m in resolve_models(config)}
    if model_id not in models:
        known = ", ".join(sorted(models)[:8]) + (" ..." if len(models) > 8 else "")
        raise InputError(f"model {model_id!r} is not in the config's zoo (models: {known})")
    resolved = models[model_id]
    if resolved.unreadable:
        raise InputError(f"model {model_id}: {resolved.unreadable}")
    if store is not None:
        from zoorank.catalog import build_catalog

        manifest = store.read_manifest()
        done = manifest[(manifest["model_id"] == model_id) & (manifest["status"] == "done")]
        expected = {fp for key, fps in build_catalog(config, [resolved], store).entries.items()
                    for fp in fps}
        if len(done) and not set(done["fingerprint"]) & expected:
            raise InputError(
                f"model {model_id}: its weights or spec changed since the run embedded it (no "
                "embedding in the store has the fingerprint its checkpoint gives now); run the "
                "config again before loading or exporting it")
    return resolved


def load_ranked(resolved: ResolvedModel, device: str = "cpu") -> nn.Module:
    """The network EMBED ran for ``resolved`` (conventions above), eval mode, on ``device``;
    a checkpoint that does not load is an InputError naming the model."""
    from zoorank.errors import InputError
    from zoorank.zoo import CheckpointError, load_model

    try:
        return load_model(resolved, device=device)
    except CheckpointError as err:
        raise InputError(str(err)) from None


def config_digest(config: RunConfig) -> str:
    """sha256 of the validated config as JSON (keys sorted; defaults filled in)."""
    blob = json.dumps(config.model_dump(mode="json"), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def architecture(resolved: ResolvedModel, network: nn.Module) -> dict[str, Any]:
    """What to build the bare network from: source, name, model_kwargs (timm: ``num_classes``
    as built), and how its output is pooled."""
    from zoorank.store.uris import redact
    from zoorank.zoo import sources

    spec = resolved.spec
    kwargs = {**spec.model_kwargs, **sources.get(spec.source).built_kwargs(network)}
    return {"source": spec.source, "name": redact(spec.name), "model_kwargs": kwargs,
            "pooling": spec.pooling, "layer": spec.layer}


def preprocessing(resolved: ResolvedModel) -> dict[str, Any]:
    """The clean view's geometry and normalization (:mod:`zoorank.zoo.preprocessing`)."""
    g, n = resolved.geometry, resolved.normalization
    return {"input_size": g.input_size, "resize_size": g.resize_size,
            "interpolation": g.interpolation, "crop_pct": g.crop_pct,
            "mean": list(n.mean), "std": list(n.std), "origin": resolved.preprocessing_origin,
            "input": "RGB in [0, 1]: resize the shorter side to resize_size, centre-crop "
                     "input_size, then (x - mean) / std"}


def export_model(extractor: nn.Module, resolved: ResolvedModel, out: str | os.PathLike,
                 *, config: RunConfig, decision: Mapping[str, Any]) -> dict[str, str]:
    """Write ``OUT/model.safetensors`` and ``OUT/zoorank-model.json`` (conventions above);
    returns their paths. ``decision``: what the run concluded of this model (JSON-ready)."""
    import torch
    from safetensors.torch import save_file

    from zoorank import __version__
    from zoorank.store.uris import redact

    network = extractor.model
    if isinstance(network, torch.jit.ScriptModule):
        from zoorank.errors import InputError

        raise InputError(f"model {resolved.model_id}: a torchscript model is shipped as its "
                         "scripted file already; export writes eager networks only")
    directory = Path(out).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    # clones: safetensors refuses tensors that share memory (tied weights)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in network.state_dict().items()}
    weights = directory / WEIGHTS_FILE
    save_file(state, str(weights), metadata={"format": "pt", "model_id": resolved.model_id})
    spec = resolved.spec
    info = {
        "schema_version": EXPORT_SCHEMA_VERSION,
        "model_id": resolved.model_id,
        "weights": {"file": WEIGHTS_FILE, "sha256": _file_sha256(weights), "tensors": len(state)},
        "architecture": architecture(resolved, network),
        "preprocessing": preprocessing(resolved),
        "provenance": {
            "config_digest": config_digest(config),
            "checkpoint": redact(spec.checkpoint) if spec.checkpoint else None,
            "checkpoint_digest": resolved.checkpoint_digest,
            "state_dict_prefix": spec.state_dict_prefix,
            "fingerprint": resolved.fingerprint,
            "zoorank_version": __version__,
        },
        "decision": dict(decision),
    }
    path = directory / INFO_FILE
    path.write_text(json.dumps(info, indent=2, sort_keys=False, default=str) + "\n")
    return {"weights": str(weights), "info": str(path)}


def _file_sha256(path: Path) -> str:
    from zoorank.config.digests import file_digest

    return file_digest(path)
