"""Reading checkpoints: safe loading, finding the state dict, fitting it to a model.

Conventions are in :mod:`zoorank.zoo` (section *Checkpoints*).
"""

from __future__ import annotations

import contextlib
import io
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoorank.config import ModelSpec
from zoorank.errors import InputError
from zoorank.store import uris
from zoorank.store.redact import redact
from zoorank.zoo.safe_pickle import restricted_pickle_module
from zoorank.zoo.safe_pickle.refusals import Refused, UnsafeGlobal

#: state-dict containers looked for, in order, when the top level is not a tensor dict.
AUTO_STATE_DICT_KEYS = ("state_dict", "model", "module")
_SAFETENSORS_SUFFIXES = (".safetensors",)

_MAX_LISTED = 10
#: ``state_dict_prefix`` presets: the backbone's prefixes in common training checkpoints, tried in
#: order (the first one that some key carries is used).
PREFIX_PRESETS: dict[str, tuple[str, ...]] = {
    # LightningModule attributes; the state dict is the checkpoint's "state_dict" entry
    "lightning": ("model.backbone.", "backbone.", "model.encoder.", "encoder.", "model."),
    # solo-learn: the method's state dict holds backbone.*, projector.*, (momentum_backbone.*)
    "solo-learn": ("backbone.",),
    # DINO's checkpoint: {"teacher": {...}, "student": {...}}; DDP students add "module."
    "dino-teacher": ("teacher.backbone.", "teacher.module.backbone."),
    "dino-student": ("student.backbone.", "student.module.backbone."),
    # MoCo v1-v3 (DDP): the query encoder
    "moco": ("module.encoder_q.", "encoder_q.", "module.base_encoder.", "base_encoder."),
}


class CheckpointError(InputError):
    """A model cannot be built or its checkpoint cannot be loaded; the message says why.

    The message is redacted (zoorank.store.redact): it names checkpoint URIs, and it flows into the
    manifest, ``failed`` rows, the leaderboard and the report."""

    def __init__(self, message: object = "") -> None:
        super().__init__(redact(message))


# --------------------------------------------------------------------------- checkpoints


def _truncated(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f", ... (+{len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else "")


def _weights_only_refusal(err: Exception) -> tuple[str | None, str]:
    """(the refused global, if any; a one-line reason) from torch's weights-only error text."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    found = re.search(r"GLOBAL\s+([\w.]+)", text)
    if found:
        return found.group(1), f"it needs the global {found.group(1)}"
    found = re.search(r"WeightsUnpickler error:\s*(.+)", text, re.DOTALL)
    lines = [ln.strip() for ln in (found.group(1) if found else text).splitlines() if ln.strip()]
    return None, lines[0] if lines else type(err).__name__


def _source(path: str) -> Any:
    """What torch/safetensors read: a local path, or the object's bytes for a URI."""
    return io.BytesIO(uris.read_bytes(path)) if uris.is_uri(path) else path


def _torch_load(path: str, trust: bool, met: set[str] | None = None) -> Any:
    """``torch.load`` on CPU: weights-only, then the restricted unpickler (metadata as
    placeholders); ``trust`` unpickles anything. The metadata globals met are added to ``met``."""
    try:
        with warnings.catch_warnings():
            # raised for protocol-4 pickles that the weights-only loader then refuses anyway
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(_source(path), map_location="cpu", weights_only=not trust)
    except InputError:
        raise
    except Exception as err:
        if not trust and "Weights only load failed" in str(err):
            return _restricted_load(path, err, met)
        if trust:
            with contextlib.suppress(Exception), uris.open_input(path) as f:
                return pickle.load(f)  # a plain (non-torch.save) pickle, trusted by the user
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt or unreadable checkpoint ({first})") from None


def _restricted_load(path: str, weights_only_error: Exception, met: set[str] | None) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(_source(path), map_location="cpu", weights_only=False,
                              pickle_module=restricted_pickle_module(met))
    except UnsafeGlobal as err:
        raise CheckpointError(
            f"{path}: unsafe pickle refused (it needs the global {err.name}); set "
            "trust_checkpoint: true only for a file you trust (loading it runs code from the file)"
        ) from None
    except Refused as err:
        raise CheckpointError(
            f"{path}: unsafe pickle refused ({err}); set trust_checkpoint: true only for a file "
            "you trust (loading it runs code from the file)"
        ) from None
    except Exception:
        _, detail = _weights_only_refusal(weights_only_error)
        raise CheckpointError(
            f"{path}: not a readable weights-only checkpoint, corrupt or a pickle the safe "
            f"loader cannot read ({detail}); trust_checkpoint: true allows arbitrary pickles"
        ) from None


def load_checkpoint_object(path: str, *, trust: bool = False,
                           met: set[str] | None = None) -> Any:
    """The whole checkpoint object (safetensors: its tensor dict), read safely on CPU."""
    if (path.split("?", 1)[0] if uris.is_uri(path) else path).endswith(_SAFETENSORS_SUFFIXES):
        from safetensors.torch import load, load_file

        try:
            if uris.is_uri(path):
                return load(uris.read_bytes(path))
            return load_file(path, device="cpu")
        except InputError:
            raise
        except Exception as err:
            raise CheckpointError(
                f"{path}: corrupt or unreadable safetensors file ({err})"
            ) from None
    return _torch_load(path, trust, met)


def _is_tensor_dict(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())
    )


def _find_state_dict(
    obj: Any, key: str | None, path: str, depth: int = 0
) -> dict[str, torch.Tensor]:
    if isinstance(obj, nn.Module):
        return dict(obj.state_dict())
    if key is not None:
        node = obj
        for part in [key] if isinstance(obj, Mapping) and key in obj else key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                keys = list(obj) if isinstance(obj, Mapping) else []
                raise CheckpointError(
                    f"{path}: state_dict_key {key!r} not found; top-level keys: {_truncated(keys)}"
                )
            node = node[part]
        return _find_state_dict(node, None, path, depth)
    if _is_tensor_dict(obj):
        return dict(obj)
    if isinstance(obj, Mapping) and depth < 3:
        for candidate in AUTO_STATE_DICT_KEYS:
            if candidate in obj:
                with contextlib.suppress(CheckpointError):
                    return _find_state_dict(obj[candidate], None, path, depth + 1)
    if depth == 0:
        keys = [str(k) for k in obj] if isinstance(obj, Mapping) else []
        raise CheckpointError(
            f"{path}: no state dict found ({type(obj).__name__}"
            + (f" with keys {_truncated(keys)}" if keys else "")
            + "); set state_dict_key"
        )
    raise CheckpointError(f"{path}: no state dict found")


def prefix_candidates(prefix: str) -> tuple[str, ...]:
    """A ``state_dict_prefix`` value: a preset's prefixes (tried in order) or the prefix itself."""
    return PREFIX_PRESETS.get(prefix, (prefix,))


def _flatten(obj: Any, prefix: str = "", depth: int = 0) -> dict[str, torch.Tensor]:
    """Every tensor under nested mappings, keyed by its dotted path (DINO's ``teacher.*`` ...)."""
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, Mapping) and depth < 6:
        for key, value in obj.items():
            if isinstance(value, torch.Tensor):
                out[f"{prefix}{key}"] = value
            elif isinstance(value, (Mapping, nn.Module)):
                out.update(_flatten(value, f"{prefix}{key}.", depth + 1))
    return out


def select_prefix(
    obj: Any, state_dict_prefix: str, state_dict_key: str | None, path: str
) -> tuple[str, dict[str, torch.Tensor]]:
    """(the prefix used, the tensors under it with the prefix stripped).

    The prefix is looked for in the state dict found as usual (``state_dict_key`` or the
    auto-detected one), then in the whole checkpoint flattened to dotted keys; a preset's
    prefixes are tried in order and the first one some key carries is used.
    """
    pools = []
    with contextlib.suppress(CheckpointError):
        pools.append(_find_state_dict(obj, state_dict_key, path))
    if state_dict_key is None:
        pools.append(_flatten(obj))
    candidates = prefix_candidates(state_dict_prefix)
    for pool in pools:
        for prefix in candidates:
            selected = {k[len(prefix):]: v for k, v in pool.items() if k.startswith(prefix)}
            if selected:
                return prefix, selected
    keys = list(pools[-1]) if pools else []
    raise CheckpointError(
        f"{path}: no key starts with state_dict_prefix {' or '.join(map(repr, candidates))}; "
        f"keys: {_truncated(keys)}"
    )


def read_checkpoint(
    path: str | Path,
    *,
    trust: bool = False,
    state_dict_key: str | None = None,
    state_dict_prefix: str | None = None,
) -> dict[str, torch.Tensor]:
    """The state dict of a checkpoint file or URI (on CPU), following the package's conventions.

    With ``state_dict_prefix`` only the keys under that prefix (or a preset's first prefix that
    occurs) are returned, with the prefix stripped.
    """
    path = str(path)
    obj = load_checkpoint_object(path, trust=trust)
    return state_dict_of(obj, path, state_dict_key=state_dict_key,
                         state_dict_prefix=state_dict_prefix)


def state_dict_of(obj: Any, path: str, *, state_dict_key: str | None = None,
                  state_dict_prefix: str | None = None) -> dict[str, torch.Tensor]:
    """The state dict of an already read checkpoint object, as :func:`read_checkpoint` finds it."""
    if state_dict_prefix:
        return select_prefix(obj, state_dict_prefix, state_dict_key, path)[1]
    return _find_state_dict(obj, state_dict_key, path)


def _strip_prefixes(
    state: dict[str, torch.Tensor], prefixes: tuple[str, ...], model_keys: set[str]
) -> dict[str, torch.Tensor]:
    changed = True
    while changed and state:
        changed = False
        for prefix in prefixes:
            if all(k.startswith(prefix) for k in state) and not all(
                k.startswith(prefix) for k in model_keys
            ):
                state = {k[len(prefix) :]: v for k, v in state.items()}
                changed = True
    return state


def _classifier_names(model: nn.Module) -> tuple[str, ...]:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    names = cfg.get("classifier") if isinstance(cfg, Mapping) else None
    if not names:
        return ()
    return (names,) if isinstance(names, str) else tuple(names)


def classifier_rows(state: Mapping[str, torch.Tensor], names: tuple[str, ...]) -> int | None:
    """Rows (classes) of the first classifier ``names`` (timm's ``pretrained_cfg["classifier"]``)
    whose ``.weight`` the state dict holds; None when it holds none."""
    for name in names:
        weight = state.get(f"{name}.weight")
        if isinstance(weight, torch.Tensor) and weight.ndim >= 1:
            return int(weight.shape[0])
    return None


def _load_state_into(model: nn.Module, spec: ModelSpec, *, drop_classifier: bool,
                     state: Mapping[str, torch.Tensor] | None = None) -> None:
    """Load the checkpoint (or its already read ``state``) into ``model``; see the package
    docstring for the rules."""
    path = str(spec.checkpoint)
    if state is None:
        state = read_checkpoint(path, trust=spec.trust_checkpoint,
                                state_dict_key=spec.state_dict_key,
                                state_dict_prefix=spec.state_dict_prefix)
    state = dict(state)
    own = model.state_dict()
    state = _strip_prefixes(state, tuple(spec.strip_prefixes), set(own))
    if drop_classifier:
        heads = _classifier_names(model)
        state = {
            k: v
            for k, v in state.items()
            if k in own or not any(k == h or k.startswith(h + ".") for h in heads)
        }
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and v.shape != own[k].shape
    ]
    problems = []  # unexpected keys first: they name the prefix or architecture to use
    if spec.strict and unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): {_truncated(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatch ({len(mismatched)}): {_truncated(mismatched)}")
    if spec.strict and missing:
        problems.append(f"missing keys ({len(missing)}): {_truncated(missing)}")
    if not problems and not any(k in own for k in state):
        problems.append(
            f"no key matches the model (checkpoint keys: {_truncated(list(state))}; "
            f"model keys: {_truncated(list(own))})"
        )
    if problems:
        raise CheckpointError(
            f"{path}: checkpoint does not fit {spec.name!r}: " + "; ".join(problems)
        )
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
