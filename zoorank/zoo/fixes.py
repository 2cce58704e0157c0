"""The fix for a checkpoint that does not load into its entry (:mod:`zoorank.zoo.preflight`):
the ``state_dict_prefix`` presets that ``zoorank inspect`` lists, then the timm architectures
whose parameter names and shapes match, each proven by a real load (:func:`load_model`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from zoorank.zoo import sources
from zoorank.zoo.checkpoints import (
    PREFIX_PRESETS,
    CheckpointError,
    _classifier_names,
    _strip_prefixes,
    load_checkpoint_object,
    select_prefix,
    state_dict_of,
)

if TYPE_CHECKING:
    import torch

    from zoorank.zoo.resolve import ResolvedModel

#: architectures compared by parameter names and shapes, at most (only on the error path).
_MAX_ARCHITECTURES = 200


def _loads(model: ResolvedModel, state: dict[str, torch.Tensor], **update: Any) -> bool:
    from dataclasses import replace

    from zoorank.zoo.build import load_model

    candidate = replace(model, spec=model.spec.model_copy(update=update))
    try:
        load_model(candidate, "cpu", state=state)
    except Exception:  # noqa: BLE001 - this candidate does not fit
        return False
    return True


def _prefixes(obj: Any, model: ResolvedModel) -> list[tuple[str | None, str, dict]]:
    """(``state_dict_prefix`` value, the prefix it uses, the state dict) of each way of reading
    the checkpoint: the entry's own first, then the presets, then none."""
    spec, path = model.spec, str(model.spec.checkpoint)
    out = []
    for value in dict.fromkeys([spec.state_dict_prefix, *PREFIX_PRESETS, None]):
        try:
            if value:
                used, state = select_prefix(obj, value, spec.state_dict_key, path)
            else:
                used, state = "", state_dict_of(obj, path, state_dict_key=spec.state_dict_key)
        except CheckpointError:
            continue
        out.append((value, used, state))
    return out


def _strings(obj: Any, depth: int = 0) -> list[str]:
    """String values in a checkpoint's metadata (``hyper_parameters``...), tensors skipped."""
    if depth > 4:
        return []
    values = (obj.values() if isinstance(obj, dict) else obj[:50] if isinstance(obj, (list, tuple))
              else vars(obj).values() if hasattr(obj, "__dict__") and not hasattr(obj, "shape")
              else [])
    out: list[str] = []
    for value in values:
        if isinstance(value, str) and 0 < len(value) <= 80:
            out.append(value.strip())
        elif not hasattr(value, "shape"):
            out.extend(_strings(value, depth + 1))
    return out


def _architectures(obj: Any, model: ResolvedModel) -> list[str]:
    """timm names to try: those the checkpoint's metadata or path names, then the entry's
    family (``resnet18`` → ``resnet*``)."""
    import timm

    spec = model.spec
    found = [s for s in _strings(obj) if "/" not in s and timm.is_model(s)]
    for token in re.split(r"[/\-_.@=+ ]", str(spec.checkpoint)):
        if token and timm.is_model(token):
            found.append(token)
    family = re.match(r"[a-z]+", spec.name.removeprefix("hf-hub:"))
    if family:
        found += timm.list_models(f"{family.group(0)}*")
    return [n for n in dict.fromkeys(found) if n != spec.name][:_MAX_ARCHITECTURES]


def _same_shapes(state: dict[str, torch.Tensor], name: str, model: ResolvedModel) -> bool:
    """Whether ``state`` (classifier keys aside) has exactly the parameters of timm ``name``,
    built on the meta device (no memory)."""
    from zoorank.zoo import specs

    try:
        meta = specs.timm_meta_model(name, specs.kwargs_json(model.spec))
    except Exception:  # noqa: BLE001 - an architecture that does not build here
        return False
    own = {k: tuple(v.shape) for k, v in meta.state_dict().items()
           if not k.endswith("num_batches_tracked")}
    state = _strip_prefixes(dict(state), tuple(model.spec.strip_prefixes), set(own))
    heads = _classifier_names(meta)
    theirs = {k: tuple(v.shape) for k, v in state.items()
              if not k.endswith("num_batches_tracked")
              and not any(k == h or k.startswith(h + ".") for h in heads)}
    return theirs == own


def _prefix_text(value: str | None, used: str) -> str:
    if value is None:
        return "no state_dict_prefix (the keys are the architecture's own)"
    if value in PREFIX_PRESETS:
        return f"`state_dict_prefix: {value}` (it keeps the keys under {used!r})"
    return f"`state_dict_prefix: {value!r}`"


def suggest_fix(model: ResolvedModel) -> str | None:
    """What to change in the entry for its checkpoint to load (a prefix, an architecture or
    both), proven by loading the file with it; None when nothing tried fits."""
    spec = model.spec
    try:
        obj = load_checkpoint_object(str(spec.checkpoint), trust=spec.trust_checkpoint)
    except CheckpointError:
        return None
    ways = _prefixes(obj, model)
    for value, used, state in ways:
        if value != spec.state_dict_prefix and _loads(model, state, state_dict_prefix=value):
            return _prefix_text(value, used)
    if not sources.get(spec.source).suggests_architectures:
        return None
    names = _architectures(obj, model)
    for value, used, state in ways:
        for name in names:
            if _same_shapes(state, name, model) and _loads(model, state, name=name,
                                                           state_dict_prefix=value):
                text = f"`name: {name}`"
                if value != spec.state_dict_prefix:
                    text += f" and {_prefix_text(value, used)}"
                return text
    return None
