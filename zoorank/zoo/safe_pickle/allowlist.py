"""Which globals a checkpoint's pickle may name, and what they resolve to: torch's weights-only
globals (called only through :mod:`~zoorank.zoo.safe_pickle.checked_calls`), the globals the user
allowed with ``torch.serialization.add_safe_globals``, and inert :class:`Placeholder` classes for
any global of a metadata module (:data:`METADATA_MODULES`). Everything else is refused.
"""

from __future__ import annotations

import builtins
from typing import Any

import torch

#: modules whose classes are metadata only: their objects load as inert placeholders.
METADATA_MODULES = (
    "argparse",
    "collections",
    "pathlib",
    "omegaconf",
    "numpy",
    "typing",
    "enum",
    "datetime",
    "decimal",
    "fractions",
    "uuid",
    "lightning",
    "lightning_fabric",
    "pytorch_lightning",
)


class Placeholder:
    """An inert stand-in for a metadata object: it keeps what the pickle passed, nothing more."""

    _zoorank_global = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Placeholder:
        obj = object.__new__(cls)
        obj.__dict__["args"] = args
        obj.__dict__["state"] = None
        if kwargs:
            obj.__dict__["kwargs"] = kwargs
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.__dict__["state"] = state

    def __setitem__(self, key: Any, value: Any) -> None:  # dict subclasses (SETITEMS)
        self.__dict__.setdefault("items", {})[key] = value

    def append(self, value: Any) -> None:  # list subclasses (APPENDS)
        self.__dict__.setdefault("items_list", []).append(value)

    def extend(self, values: Any) -> None:
        for value in values:
            self.append(value)

    def add(self, value: Any) -> None:  # set subclasses (ADDITEMS)
        self.__dict__.setdefault("items_set", []).append(value)

    def __repr__(self) -> str:
        return f"<{self._zoorank_global} (not loaded)>"


#: builtins outside torch's list that pickles of plain metadata name (protocol 2 writes
#: ``bytes()`` for b"" and ``frozenset([...])``; ``slice`` and ``range`` objects are lazy).
_EXTRA_BUILTINS = ("frozenset", "bytes", "slice", "range")

#: builtin types a pickle may name as values (omegaconf records ``object_type=dict``); calling
#: them is refused (``list(range(10**10))``), NEWOBJ makes only an empty one.
_VALUE_BUILTINS = ("dict", "list", "tuple", "str", "int", "float", "bool", "object")


def allowed_globals() -> dict[str, Any]:
    from torch import _weights_only_unpickler as wou

    allowed = dict(wou._get_allowed_globals())
    for name in _EXTRA_BUILTINS + _VALUE_BUILTINS:
        allowed[f"builtins.{name}"] = getattr(builtins, name)
    return allowed


def user_safe_globals() -> dict[str, Any]:
    """What the user allowed with ``torch.serialization.add_safe_globals`` (torch's policy)."""
    out = {}
    for obj in torch.serialization.get_safe_globals():
        if isinstance(obj, tuple):
            obj, name = obj
        else:
            name = f"{obj.__module__}.{obj.__qualname__}"
        out[name] = obj
    return out


def placeholder_class(module: str, name: str) -> type:
    return type(name, (Placeholder,), {"_zoorank_global": f"{module}.{name}",
                                       "__module__": "zoorank.zoo.safe_pickle"})


def is_metadata_module(module: str) -> bool:
    root = module.split(".", 1)[0]
    return root in METADATA_MODULES
