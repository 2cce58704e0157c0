"""Reading checkpoints: safe loading, finding the state dict, fitting it to a model.

Conventions are in :mod:`zoorank.zoo` (section *Checkpoints*).
"""

from __future__ import annotations

import contextlib
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

AUTO_STATE_DICT_KEYS = ("state_dict", "model", "module")


_SAFETENSORS_SUFFIXES = (".safetensors",)


_MAX_LISTED = 10


class CheckpointError(InputError):
    """A model cannot be built or its checkpoint cannot be loaded; the message says why."""


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


def _torch_load(path: str, trust: bool) -> Any:
    try:
        with warnings.catch_warnings():
            # raised for protocol-4 pickles that the weights-only loader then refuses anyway
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location="cpu", weights_only=not trust)
    except Exception as err:
        if not trust and "Weights only load failed" in str(err):
            refused, detail = _weights_only_refusal(err)
            if refused:
                raise CheckpointError(
                    f"{path}: unsafe pickle refused ({detail}); set trust_checkpoint: true only "
                    "for a file you trust (loading it runs code from the file)"
                ) from None
            raise CheckpointError(
                f"{path}: not a readable weights-only checkpoint, corrupt or a pickle the safe "
                f"loader cannot read ({detail}); trust_checkpoint: true allows arbitrary pickles"
            ) from None
        if trust:
            with contextlib.suppress(Exception), open(path, "rb") as f:
                return pickle.load(f)  # a plain (non-torch.save) pickle, trusted by the user
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt or unreadable checkpoint ({first})") from None


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


def read_checkpoint(
    path: str | Path,
    *,
    trust: bool = False,
    state_dict_key: str | None = None,
) -> dict[str, torch.Tensor]:
    """The state dict of a checkpoint file (on CPU), following the conventions of the module."""
    path = str(path)
    if path.endswith(_SAFETENSORS_SUFFIXES):
        from safetensors.torch import load_file

        try:
            obj: Any = load_file(path, device="cpu")
        except Exception as err:
            raise CheckpointError(
                f"{path}: corrupt or unreadable safetensors file ({err})"
            ) from None
    else:
        obj = _torch_load(path, trust)
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


def _load_state_into(model: nn.Module, spec: ModelSpec, *, drop_classifier: bool) -> None:
    path = str(spec.checkpoint)
    state = read_checkpoint(path, trust=spec.trust_checkpoint, state_dict_key=spec.state_dict_key)
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
    problems = []
    if mismatched:
        problems.append(f"shape mismatch ({len(mismatched)}): {_truncated(mismatched)}")
    if spec.strict and missing:
        problems.append(f"missing keys ({len(missing)}): {_truncated(missing)}")
    if spec.strict and unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): {_truncated(unexpected)}")
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
