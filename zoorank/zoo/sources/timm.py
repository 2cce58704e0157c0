"""``source: timm``: ``timm.create_model`` by architecture name, a checkpoint's state dict or the
hub weights of the local cache (``pretrained: true``, a name glob over cached models)."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoorank.config import ModelSpec
from zoorank.config.model_spec import MODEL_SOURCES
from zoorank.errors import ConfigError
from zoorank.zoo import hub, specs
from zoorank.zoo.label_space import heads_wanted
from zoorank.zoo.preprocessing import Geometry, Normalization
from zoorank.zoo.sources import ModelSource, register

if TYPE_CHECKING:
    import torch
    from torch import nn

    from zoorank.store.uris import DigestCache

_GLOB_CHARS = "*?["


def timm_classes(spec: ModelSpec, state: Mapping[str, torch.Tensor] | None) -> int:
    """The ``num_classes`` a timm model is built with: ``model_kwargs``' own; with heads wanted,
    the checkpoint's classifier rows (0 for a headless checkpoint) or, for ``pretrained``, the
    hub weights' head (-1: timm's default); 0 for a seeded random init (no trained head)."""
    from zoorank.zoo.checkpoints import _classifier_names, _strip_prefixes, classifier_rows

    if "num_classes" in spec.model_kwargs:
        return int(spec.model_kwargs["num_classes"])
    if not heads_wanted(spec):
        return 0
    if spec.pretrained:
        return -1
    if state is None:
        return 0
    meta = specs.timm_meta_model(spec.name, specs.kwargs_json(spec))
    stripped = _strip_prefixes(dict(state), tuple(spec.strip_prefixes), set(meta.state_dict()))
    return classifier_rows(stripped, _classifier_names(meta)) or 0


def timm_preprocessing(spec: ModelSpec, label: str) -> tuple[Geometry, Normalization]:
    """timm's ``resolve_data_config`` of the meta-device model (``img_size`` of ``model_kwargs``
    wins: timm does not reflect it in ``pretrained_cfg``)."""
    import timm
    from timm.data import resolve_data_config

    if not spec.name.startswith("hf-hub:") and not timm.is_model(spec.name):
        close = difflib.get_close_matches(spec.name, timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"{label}: unknown timm architecture {spec.name!r}{hint}")
    try:
        model = specs.timm_meta_model(spec.name, specs.kwargs_json(spec))
    except Exception as err:  # a bad model_kwargs entry, reported with the model's name
        raise ConfigError(f"{label}: timm.create_model({spec.name!r}) failed: {err}") from None
    cfg = resolve_data_config({}, model=model)
    input_size = cfg["input_size"][-1]
    img_size = spec.model_kwargs.get("img_size")
    if img_size is not None:
        input_size = img_size if isinstance(img_size, int) else int(img_size[-1])
    geometry = Geometry(int(input_size), str(cfg["interpolation"]), float(cfg["crop_pct"]))
    return geometry, Normalization(tuple(cfg["mean"]), tuple(cfg["std"]))


@register
class TimmSource(ModelSource):
    """timm architectures (``resnet18``, ``convnext_tiny.fb_in1k``, ``hf-hub:timm/...``)."""
    suggests_architectures = True

    name = "timm"
    traits = MODEL_SOURCES["timm"]
    pretrained = True
    config_input_size = True
    seeded_init = True

    def expand_names(self, spec: ModelSpec, label: str) -> list[str] | None:
        if not (spec.pretrained and any(c in spec.name for c in _GLOB_CHARS)):
            return None
        names = hub.cached_timm_names(spec.name)
        if not names:
            raise ConfigError(
                f"{label}: no cached timm model matches {spec.name!r} (looked for "
                f"models--timm--{spec.name} in {hub.hub_cache_dir()}); fetch models with "
                "`hf download timm/NAME` (or `huggingface-cli download timm/NAME`)"
            )
        return names

    def preprocessing(self, spec: ModelSpec, label: str,
                      directory: Path | None) -> tuple[Geometry, Normalization, str]:
        return *timm_preprocessing(spec, label), "timm"

    def pretrained_digest(self, spec: ModelSpec, label: str,
                          digests: DigestCache) -> tuple[str, str]:
        """(digest of revision + cached weight file, ``repo@revision``) of a timm hub model."""
        repo, revision = hub.timm_repo_id(spec.name)
        snapshot = hub.cached_snapshot(repo, revision)
        file = snapshot.file(hub.TIMM_WEIGHT_FILES) if snapshot is not None else None
        if snapshot is None or file is None:
            raise hub.missing_error(label, f"timm model {spec.name!r} ({repo})", repo)
        at = f"{repo}@{snapshot.revision}"
        file_digest = digests.digest(str(file))
        return hashlib.sha256(f"{at}:{file.name}:{file_digest}".encode()).hexdigest(), at

    def reads_state_first(self, spec: ModelSpec) -> bool:
        return heads_wanted(spec)  # its classifier decides num_classes, then it is loaded

    def build(self, spec: ModelSpec, hub_cache: str | None,
              state: Any) -> tuple[nn.Module, dict[str, Any], str | None]:
        import timm

        classes = timm_classes(spec, state)
        kwargs = {**specs.hub_kwargs(spec.name, spec.pretrained, hub_cache), **spec.model_kwargs}
        if classes >= 0:
            kwargs["num_classes"] = classes
        # pretrained: timm's own loader, from the local cache (HF_HUB_OFFLINE in deployments)
        model = timm.create_model(spec.name, pretrained=spec.pretrained, **kwargs)
        return model, {}, "timm" if getattr(model, "num_classes", 0) else None

    def drops_classifier(self, head: str | None) -> bool:
        return head is None

    def built_kwargs(self, network: nn.Module) -> dict[str, Any]:
        return {"num_classes": int(getattr(network, "num_classes", 0) or 0)}  # as built

    def meta_model(self, name: str, kwargs_json: str) -> nn.Module:
        return specs.timm_meta_model(name, kwargs_json)

    def head_classes(self, resolved: Any) -> tuple[str, int | None]:
        from zoorank.zoo.checkpoints import read_checkpoint

        spec = resolved.spec
        state = None
        if spec.checkpoint and "num_classes" not in spec.model_kwargs:
            state = read_checkpoint(str(spec.checkpoint), trust=spec.trust_checkpoint,
                                    state_dict_key=spec.state_dict_key,
                                    state_dict_prefix=spec.state_dict_prefix)
        classes = timm_classes(spec, state)
        if classes < 0:  # pretrained: the hub weights' own head
            from timm.models import get_pretrained_cfg

            cfg = get_pretrained_cfg(spec.name.removeprefix("hf-hub:"))
            classes = int(getattr(cfg, "num_classes", 0) or 0) if cfg is not None else None
        if classes == 0:
            return ("none (seeded random init: no trained head)" if not spec.checkpoint
                    and not spec.pretrained else "none (no classifier weights)"), 0
        return "timm forward_head", classes
