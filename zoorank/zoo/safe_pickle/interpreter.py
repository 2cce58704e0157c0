"""The opcode interpreter: Python's own (:class:`pickle._Unpickler`) with the dangerous opcodes
(REDUCE, BUILD, NEWOBJ, APPEND, SETITEM, ...) replaced, reading at most :data:`MAX_METADATA_BYTES`
of the stream, resolving globals through :mod:`~zoorank.zoo.safe_pickle.allowlist` and calling
them only through :mod:`~zoorank.zoo.safe_pickle.checked_calls`.
"""

from __future__ import annotations

import _compat_pickle
import pickle
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, BinaryIO

import torch

from zoorank.zoo.safe_pickle.allowlist import (
    Placeholder,
    allowed_globals,
    is_metadata_module,
    placeholder_class,
    user_safe_globals,
)
from zoorank.zoo.safe_pickle.checked_calls import CHECKS, SafeCall
from zoorank.zoo.safe_pickle.refusals import MalformedPickle, Refused, UnsafeGlobal

#: the most bytes a checkpoint's pickle stream may hold, and the most its checked calls may
#: allocate (tensor data of zip checkpoints lives outside the pickle and is not counted).
MAX_METADATA_BYTES = 256 << 20


class _BoundedReader:
    """The unpickler's view of the file: at most ``cap`` bytes, never a read past the cap (a
    ``BufferedReader`` allocates the whole size asked for before reading)."""

    def __init__(self, file: BinaryIO, cap: int) -> None:
        self._file = file
        self.left = cap

    def _take(self, n: int) -> int:
        if n < 0 or n > self.left:
            raise Refused(f"the pickle's metadata exceeds {MAX_METADATA_BYTES} bytes")
        return n

    def read(self, n: int = -1) -> bytes:
        data = self._file.read(self._take(n if n >= 0 else self.left + 1))
        self.left -= len(data)
        return data

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)

    def readline(self) -> bytes:
        line = self._file.readline(self.left + 1)
        self.left -= len(line)
        if self.left < 0:
            raise Refused(f"the pickle's metadata exceeds {MAX_METADATA_BYTES} bytes")
        return line


#: types whose fresh instances BUILD may update, with how (torch's weights-only rules).
_BUILDABLE = {torch.Tensor: "set_", torch.nn.Parameter: "setstate", OrderedDict: "dict",
              Counter: "dict"}

_LIST_TYPES = (list,)

_DICT_TYPES = (dict, OrderedDict, Counter)

_NEW_OK = (OrderedDict, Counter, set, frozenset, dict, list)

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)

_P = pickle._Unpickler  # Python's opcode interpreter: its dispatch table is ours to restrict

_OP = {name: getattr(pickle, name)[0] for name in (
    "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX", "APPEND", "APPENDS", "SETITEM", "SETITEMS",
    "ADDITEMS", "BYTEARRAY8")}


class RestrictedUnpickler(pickle._Unpickler):
    """See the module docstring. ``placeholders`` lists the metadata globals met (for inspect)."""

    dispatch = dict(_P.dispatch)

    def __init__(self, file: BinaryIO, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("buffers", None)
        self._reader = _BoundedReader(file, MAX_METADATA_BYTES)
        super().__init__(self._reader, *args, **kwargs)
        self.placeholders: set[str] = set()
        self._allowed = allowed_globals()
        self._user = user_safe_globals()
        self._user_types = tuple(v for v in self._user.values() if isinstance(v, type))
        self._classes: dict[str, type] = {}
        self._calls: dict[str, SafeCall] = {}
        self._budget = MAX_METADATA_BYTES

    # -- globals

    def find_class(self, module: str, name: str) -> Any:
        if type(module) is not str or type(name) is not str:
            raise MalformedPickle("a global's module and name must be str")
        # protocol-2 pickles (torch.save's) name Python 2 modules; no Python 3 name collides
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        full = f"{module}.{name}"
        if full in self._user:
            return self._user[full]
        if full in CHECKS and full in self._allowed:
            if full not in self._calls:
                self._calls[full] = SafeCall(full, self._allowed[full], CHECKS[full],
                                             self._charge)
            return self._calls[full]
        if full == "torch._tensor._rebuild_from_type_v2":
            return self._call_for("_rebuild_from_type_v2", self._rebuild_from_type)
        if full in self._allowed:
            return self._allowed[full]  # classes, dtypes, storage types: never called here
        if is_metadata_module(module):
            self.placeholders.add(full)
            if full not in self._classes:
                self._classes[full] = placeholder_class(module, name)
            return self._classes[full]
        raise UnsafeGlobal(full)

    def _call_for(self, name: str, fn: Callable[..., Any]) -> SafeCall:
        if name not in self._calls:
            self._calls[name] = SafeCall(name, fn, lambda a, k: 0, self._charge)
        return self._calls[name]

    def _rebuild_from_type(self, func: Any, new_type: Any, args: Any, state: Any) -> Any:
        """torch's ``_rebuild_from_type_v2`` with ``func`` a checked rebuild and ``new_type`` a
        tensor class (torch's would call any allowed global, ``torch.Tensor(n)`` included)."""
        if not isinstance(func, SafeCall) or not func.name.startswith("torch._utils._rebuild"):
            raise Refused(f"_rebuild_from_type_v2 with {func!r}")
        if new_type not in _TENSOR_TYPES or type(args) is not tuple:
            raise Refused("_rebuild_from_type_v2 takes a tensor class and a tuple")
        if state is not None and type(state) not in (dict, OrderedDict, tuple):
            raise Refused("_rebuild_from_type_v2 state must be a dict")
        return torch._tensor._rebuild_from_type_v2(func, new_type, args, state)

    def _charge(self, nbytes: int) -> None:
        self._budget -= max(int(nbytes), 0)
        if self._budget < 0:
            raise Refused(f"the pickle's metadata would allocate more than {MAX_METADATA_BYTES} "
                          "bytes")

    # -- calls

    def _call(self, func: Any, args: Any, kwargs: Any) -> Any:
        if type(args) is not tuple or type(kwargs) is not dict:
            raise MalformedPickle("call arguments must be a tuple (and a dict)")
        if isinstance(func, type) and issubclass(func, Placeholder):
            return func(*args, **kwargs)
        if isinstance(func, SafeCall):
            return func(*args, **kwargs)
        if any(func is v for v in self._user.values()):
            return func(*args, **kwargs)
        raise Refused(f"calling {_describe(func)}")

    def _new(self, cls: Any, args: Any, kwargs: Any) -> Any:
        if type(args) is not tuple or type(kwargs) is not dict:
            raise MalformedPickle("NEWOBJ arguments must be a tuple (and a dict)")
        if isinstance(cls, type) and issubclass(cls, Placeholder):
            return cls.__new__(cls, *args, **kwargs)
        if isinstance(cls, SafeCall) and cls._fn in _NEW_OK and not args and not kwargs:
            return cls._fn.__new__(cls._fn)
        if cls in _NEW_OK and not args and not kwargs:
            return cls.__new__(cls)
        if isinstance(cls, type) and cls in self._user_types:
            return cls.__new__(cls, *args, **kwargs)
        raise Refused(f"NEWOBJ of {_describe(cls)}")

    def _instantiate(self, klass: Any, args: list) -> None:  # INST, OBJ (protocols 0 and 1)
        self.append(self._call(klass, tuple(args), {}))

    def load_reduce(self) -> None:
        args = self.stack.pop()
        self.stack[-1] = self._call(self.stack[-1], args, {})

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        self.append(self._new(cls, args, {}))

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        self.append(self._new(cls, args, kwargs))

    # -- mutation: only of what this load created

    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        if isinstance(inst, Placeholder):
            inst.__setstate__(state)
            return
        how = _BUILDABLE.get(type(inst))
        if how is None and type(inst) in self._user_types:
            how = "setstate" if hasattr(inst, "__setstate__") else "dict"
        if how is None:
            raise Refused(f"BUILD on {_describe(inst)} (only objects this load created)")
        if how == "set_":
            if type(state) is not tuple:
                raise Refused("BUILD of a tensor takes a tuple")
            inst.set_(*state)
        elif how == "setstate":
            inst.__setstate__(state)
        else:
            if type(state) is not dict:
                raise Refused(f"BUILD of {type(inst).__name__} takes a dict")
            inst.__dict__.update(state)

    def _target(self, kinds: tuple[type, ...], op: str) -> Any:
        obj = self.stack[-1] if self.stack else None
        if type(obj) not in kinds and not isinstance(obj, Placeholder):
            raise Refused(f"{op} on {_describe(obj)}")
        return obj

    def load_append(self) -> None:
        value = self.stack.pop()
        self._target(_LIST_TYPES, "APPEND").append(value)

    def load_appends(self) -> None:
        items = self.pop_mark()
        self._target(_LIST_TYPES, "APPENDS").extend(items)

    def load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self._target(_DICT_TYPES, "SETITEM")[key] = value

    def load_setitems(self) -> None:
        items = self.pop_mark()
        target = self._target(_DICT_TYPES, "SETITEMS")
        if len(items) % 2:
            raise MalformedPickle("SETITEMS with an odd number of items")
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]

    def load_additems(self) -> None:
        items = self.pop_mark()
        target = self._target((set,), "ADDITEMS")
        for item in items:
            target.add(item)

    def load_bytearray8(self) -> None:
        (n,) = pickle.unpack("<Q", self.read(8))
        if n > MAX_METADATA_BYTES:  # Python's own allocates n bytes before reading them
            raise Refused(f"the pickle's metadata exceeds {MAX_METADATA_BYTES} bytes")
        data = self.read(n)
        if len(data) != n:
            raise MalformedPickle("truncated BYTEARRAY8")
        self.append(bytearray(data))

    def load(self) -> Any:
        try:
            return super().load()
        except pickle.UnpicklingError:
            raise
        except RecursionError:
            raise MalformedPickle("the pickle nests too deeply") from None
        except Exception as err:  # the stream is malformed: say so, in one exception type
            raise MalformedPickle(f"{type(err).__name__}: {err}") from None


def _describe(obj: Any) -> str:
    if isinstance(obj, SafeCall):
        return obj.name
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    if callable(obj):
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    return type(obj).__name__


for _name, _code in _OP.items():
    RestrictedUnpickler.dispatch[_code] = getattr(RestrictedUnpickler, f"load_{_name.lower()}")
