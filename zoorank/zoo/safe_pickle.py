"""A restricted unpickler for checkpoints whose metadata ``torch.load(weights_only=True)`` refuses.

Training checkpoints carry metadata beside the tensors: ``argparse.Namespace`` or ``pathlib``
paths in Lightning's ``hyper_parameters``, omegaconf containers (Hydra configs), numpy scalars and
arrays, Lightning's ``AttributeDict``. Allowing those classes in torch's weights-only loader would
construct them (and omegaconf needs a dozen internal classes); instead, this unpickler resolves

* the globals torch's weights-only loader allows (tensor rebuilds, storages, dtypes,
  ``OrderedDict``, ...) to the real objects, and
* any global of a *metadata module* (:data:`METADATA_MODULES`) to an inert :class:`Placeholder`
  class: calling it, ``__new__`` and ``__setstate__`` only record their arguments,

and refuses every other global (``os.system``, ``builtins.eval``, ``subprocess.Popen``, a user's
own classes, ...) with :class:`UnsafeGlobal` before it is called. Nothing from the file runs: no
module named by the file is imported, no callable from it is invoked. Tensors load as with
``weights_only=True``.
"""

from __future__ import annotations

import _compat_pickle
import builtins
import io
import pickle
from types import SimpleNamespace
from typing import Any, BinaryIO

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

#: builtins that only build plain data (``dict(...)``, ``set(...)``): calling them runs nothing.
INERT_BUILTINS = frozenset({"dict", "list", "tuple", "set", "frozenset", "bytearray", "bytes",
                            "str", "int", "float", "bool", "complex", "slice", "range"})


class UnsafeGlobal(pickle.UnpicklingError):
    """The pickle names a global that is neither a tensor building block nor metadata."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unsafe global {name}")
        self.name = name


class Placeholder:
    """An inert stand-in for a metadata object: it keeps what the pickle passed, nothing more."""

    _zoorank_global = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Placeholder:
        obj = object.__new__(cls)
        obj.__dict__["args"] = args
        obj.__dict__["state"] = None
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

    def __repr__(self) -> str:
        return f"<{self._zoorank_global} (not loaded)>"


def _allowed_globals() -> dict[str, Any]:
    from torch import _weights_only_unpickler as wou

    allowed = dict(wou._get_allowed_globals())
    for obj in torch.serialization.get_safe_globals():
        if isinstance(obj, tuple):
            obj, name = obj
        else:
            name = f"{obj.__module__}.{obj.__qualname__}"
        allowed[name] = obj
    return allowed


def _placeholder(module: str, name: str) -> type:
    return type(name, (Placeholder,), {"_zoorank_global": f"{module}.{name}",
                                       "__module__": "zoorank.zoo.safe_pickle"})


def is_metadata_module(module: str) -> bool:
    root = module.split(".", 1)[0]
    return root in METADATA_MODULES


class RestrictedUnpickler(pickle.Unpickler):
    """See the module docstring. ``placeholders`` lists the metadata globals met (for inspect)."""

    def __init__(self, file: BinaryIO, *args: Any, **kwargs: Any) -> None:
        super().__init__(file, *args, **kwargs)
        self.placeholders: set[str] = set()
        self._allowed = _allowed_globals()
        self._classes: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        # protocol-2 pickles (torch.save's) name Python 2 modules; no Python 3 name collides
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        full = f"{module}.{name}"
        if module == "builtins" and name in INERT_BUILTINS:
            return getattr(builtins, name)
        if full in self._allowed:
            return self._allowed[full]
        if is_metadata_module(module):
            self.placeholders.add(full)
            if full not in self._classes:
                self._classes[full] = _placeholder(module, name)
            return self._classes[full]
        raise UnsafeGlobal(full)


def restricted_pickle_module(met: set[str] | None = None) -> SimpleNamespace:
    """A ``pickle_module`` for ``torch.load(weights_only=False)`` that unpickles restrictedly.

    The metadata globals met are added to ``met`` (when given).
    """

    class _Unpickler(RestrictedUnpickler):
        def load(self) -> Any:
            try:
                return super().load()
            finally:
                if met is not None:
                    met.update(self.placeholders)

    def load(file: BinaryIO, **kwargs: Any) -> Any:
        return _Unpickler(file, **kwargs).load()

    def loads(data: bytes, **kwargs: Any) -> Any:
        return load(io.BytesIO(data), **kwargs)

    return SimpleNamespace(Unpickler=_Unpickler, load=load, loads=loads,
                           __name__="zoorank.zoo.safe_pickle")
