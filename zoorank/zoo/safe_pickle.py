"""A restricted unpickler for checkpoints whose metadata ``torch.load(weights_only=True)`` refuses.

Training checkpoints carry metadata beside the tensors: ``argparse.Namespace`` or ``pathlib``
paths in Lightning's ``hyper_parameters``, omegaconf containers (Hydra configs), numpy scalars and
arrays, Lightning's ``AttributeDict``. Allowing those classes in torch's weights-only loader would
construct them (and omegaconf needs a dozen internal classes); instead, this unpickler is an
opcode interpreter (Python's own, :class:`pickle._Unpickler`, with the dangerous opcodes replaced)
that

* resolves the globals torch's weights-only loader allows (tensor rebuilds, storages, dtypes,
  ``OrderedDict``, ...) and calls them only through a checked wrapper (:class:`SafeCall`) that
  validates the arguments' types and charges what the call allocates to the load's budget,
* resolves any global of a *metadata module* (:data:`METADATA_MODULES`) to an inert
  :class:`Placeholder` class made for this load: calling it, ``__new__`` and ``__setstate__`` only
  record their arguments,
* refuses every other global (``os.system``, ``builtins.eval``, ``builtins.list``, a user's own
  classes, ...) with :class:`UnsafeGlobal` before anything is called.

Conventions (stricter than ``weights_only=True`` where torch's loader can be made to allocate or
mutate):

* No callable allocates by argument: ``list``/``tuple``/``bytes`` of an iterable, ``bytearray(n)``,
  ``torch.Tensor(n)`` are refused; ``set``/``frozenset``/``OrderedDict`` take only a list or tuple
  the pickle itself built.
* BUILD (``__setstate__``/``__dict__`` updates) applies only to objects this load created: its
  placeholders, and, as in torch, fresh tensors, parameters and ``OrderedDict``/``Counter``
  instances. A global (a rebuild function, a dtype, a class) is never built on, so nothing a load
  does persists in the process. APPEND/SETITEM/ADDITEMS apply only to plain lists, dicts, sets and
  placeholders.
* What the metadata may cost is capped: the pickle stream may be at most
  :data:`MAX_METADATA_BYTES` long, and what checked calls allocate (set and bytes copies, tensor
  dtype conversions, quantized tensors) is charged against the same number of bytes.
* Every refusal is a :class:`Refused` (an ``UnpicklingError``) naming the global or opcode; any
  other malformation is a :class:`MalformedPickle` (also an ``UnpicklingError``).

Nothing from the file runs: no module named by the file is imported, no callable from it is
invoked. Tensors load as with ``weights_only=True``.
"""

from __future__ import annotations

import _compat_pickle
import builtins
import io
import math
import pickle
from collections import Counter, OrderedDict
from collections.abc import Callable
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

#: the most bytes a checkpoint's pickle stream may hold, and the most its checked calls may
#: allocate (tensor data of zip checkpoints lives outside the pickle and is not counted).
MAX_METADATA_BYTES = 256 << 20

_TEXT_ENCODINGS = frozenset({"latin1", "latin-1", "utf-8", "utf8", "ascii"})


class Refused(pickle.UnpicklingError):
    """The pickle asks for something this loader never does (a call, a BUILD, a size)."""


class UnsafeGlobal(Refused):
    """The pickle names a global that is neither a tensor building block nor metadata."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unsafe global {name}")
        self.name = name


class MalformedPickle(pickle.UnpicklingError):
    """The stream is not a pickle this loader can read (truncated, inconsistent, wrong types)."""


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


# --------------------------------------------------------------------------- checked calls


class SafeCall:
    """A global the pickle may call: the real callable behind an argument check.

    ``check(args, kwargs)`` raises :class:`Refused` for arguments the call must not get and
    returns the bytes the call allocates, which are charged to the load's budget first.
    """

    __slots__ = ("name", "_fn", "_check", "_charge")

    def __init__(self, name: str, fn: Callable[..., Any],
                 check: Callable[[tuple, dict], int], charge: Callable[[int], None]) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_check", check)
        object.__setattr__(self, "_charge", charge)

    def __setattr__(self, key: str, value: Any) -> None:
        raise Refused(f"setting {key} on {self.name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._charge(self._check(args, kwargs))
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<checked {self.name}>"


def _int(x: Any, what: str) -> int:
    if type(x) is not int and type(x) is not bool:
        raise Refused(f"{what} must be an int, got {type(x).__name__}")
    return int(x)


def _shape(x: Any, what: str) -> tuple[int, ...]:
    if not isinstance(x, (tuple, list, torch.Size)):
        raise Refused(f"{what} must be a tuple of ints, got {type(x).__name__}")
    out = tuple(_int(v, what) for v in x)
    if any(v < 0 for v in out):
        raise Refused(f"{what} has a negative entry")
    return out


def _seq(x: Any, what: str) -> int:
    """A container the pickle built (not an iterator, a range or a placeholder): its length."""
    if type(x) not in (list, tuple, set, frozenset, dict, OrderedDict):
        raise Refused(f"{what} takes a list or tuple built by the pickle, not {type(x).__name__}")
    return len(x)


def _nargs(args: tuple, kwargs: dict, low: int, high: int, name: str) -> None:
    if kwargs or not low <= len(args) <= high:
        raise Refused(f"{name} called with {len(args)} arguments" + (" and keywords" if kwargs
                                                                      else ""))


def _tensor(x: Any, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise Refused(f"{what} must be a tensor, got {type(x).__name__}")
    return x


def _storage(x: Any, what: str) -> Any:
    if not isinstance(x, (torch.storage.TypedStorage, torch.storage.UntypedStorage)):
        raise Refused(f"{what} must be a storage, got {type(x).__name__}")
    return x


def _check_set(args: tuple, kwargs: dict) -> int:
    _nargs(args, kwargs, 0, 1, "set")
    return 64 * _seq(args[0], "set") if args else 0


def _check_text_bytes(name: str) -> Callable[[tuple, dict], int]:
    """``bytes()``, ``bytes(b)``, ``bytes(s, enc)``; same for ``bytearray`` and ``_codecs.encode``:
    never a length or an iterable of ints."""

    def check(args: tuple, kwargs: dict) -> int:
        _nargs(args, kwargs, 0 if name != "_codecs.encode" else 1, 3, name)
        if not args:
            return 0
        data = args[0]
        if len(args) == 1 and type(data) in (bytes, bytearray) and name != "_codecs.encode":
            return len(data)
        # the encoding is compared as text: a lookup would import the codec module it names
        if type(data) is not str or len(args) < 2 or type(args[1]) is not str \
                or args[1].lower().replace("_", "-") not in _TEXT_ENCODINGS:
            raise Refused(f"{name} takes text and a text encoding, or bytes")
        if len(args) == 3 and type(args[2]) is not str:
            raise Refused(f"{name}: errors must be a str")
        return 4 * len(data)

    return check


def _check_numbers(name: str, high: int) -> Callable[[tuple, dict], int]:
    def check(args: tuple, kwargs: dict) -> int:
        _nargs(args, kwargs, 0, high, name)
        for a in args:
            if type(a) not in (int, float, bool, type(None)) or (type(a) is int and a.bit_length()
                                                                 > 4096):
                raise Refused(f"{name} takes numbers, got {type(a).__name__}")
        return 64

    return check


def _check_mapping(name: str) -> Callable[[tuple, dict], int]:
    def check(args: tuple, kwargs: dict) -> int:
        _nargs(args, kwargs, 0, 1, name)
        return 64 * _seq(args[0], name) if args else 0

    return check


def _check_size(args: tuple, kwargs: dict) -> int:
    _nargs(args, kwargs, 0, 1, "torch.Size")
    return 8 * len(_shape(args[0], "torch.Size")) if args else 0


def _check_device(args: tuple, kwargs: dict) -> int:
    _nargs(args, kwargs, 1, 2, "torch.device")
    if type(args[0]) is not str or (len(args) == 2 and type(args[1]) is not int):
        raise Refused("torch.device takes a device string (and an index)")
    return 0


def _check_layout(args: tuple, kwargs: dict) -> int:
    _nargs(args, kwargs, 1, 1, "torch.serialization._get_layout")
    if type(args[0]) is not str:
        raise Refused("_get_layout takes a str")
    return 0


def _check_parameter(args: tuple, kwargs: dict) -> int:
    _nargs(args, kwargs, 0, 2, "torch.nn.Parameter")
    if args and args[0] is not None:
        _tensor(args[0], "Parameter data")
    return 0


def _check_view(name: str, low: int, high: int) -> Callable[[tuple, dict], int]:
    """``_rebuild_tensor*``: a view of a storage the file provided (torch's ``set_`` checks the
    bounds); only the size and stride lists are new."""

    def check(args: tuple, kwargs: dict) -> int:
        _nargs(args, kwargs, low, high, name)
        _storage(args[0], f"{name} storage")
        _int(args[1], f"{name} offset")
        size = _shape(args[2], f"{name} size")
        stride = _shape(args[3], f"{name} stride")
        if len(size) != len(stride):
            raise Refused(f"{name}: size and stride differ in length")
        return 16 * len(size)

    return check


def _element_size(storage: Any) -> int:
    return storage.element_size() if isinstance(storage, torch.storage.TypedStorage) else 1


def _check_qtensor(args: tuple, kwargs: dict) -> int:
    name = "_rebuild_qtensor"
    _nargs(args, kwargs, 7, 7, name)
    storage = _storage(args[0], f"{name} storage")
    _int(args[1], f"{name} offset")
    size = _shape(args[2], f"{name} size")
    _shape(args[3], f"{name} stride")
    nbytes = math.prod(size) * _element_size(storage)
    if nbytes > storage.nbytes():  # torch allocates the whole size before checking the storage
        raise Refused(f"{name}: size {size} exceeds its storage ({storage.nbytes()} bytes)")
    return nbytes


def _check_device_copy(args: tuple, kwargs: dict) -> int:
    name = "_rebuild_device_tensor_from_cpu_tensor"
    _nargs(args, kwargs, 4, 4, name)
    data = _tensor(args[0], f"{name} data")
    if not isinstance(args[1], torch.dtype):
        raise Refused(f"{name}: dtype must be a torch.dtype")
    return data.numel() * args[1].itemsize


def _check_meta(args: tuple, kwargs: dict) -> int:
    name = "_rebuild_meta_tensor_no_storage"
    _nargs(args, kwargs, 4, 4, name)
    if not isinstance(args[0], torch.dtype):
        raise Refused(f"{name}: dtype must be a torch.dtype")
    return 16 * (len(_shape(args[1], f"{name} size")) + len(_shape(args[2], f"{name} stride")))


def _check_tensor_first(name: str, low: int, high: int) -> Callable[[tuple, dict], int]:
    def check(args: tuple, kwargs: dict) -> int:
        _nargs(args, kwargs, low, high, name)
        _tensor(args[0], f"{name} data")
        return 0

    return check


def _check_wrapper_subclass(args: tuple, kwargs: dict) -> int:
    name = "_rebuild_wrapper_subclass"
    _nargs(args, kwargs, 8, 8, name)
    if not (isinstance(args[0], type) and issubclass(args[0], torch.Tensor)):
        raise Refused(f"{name}: cls must be a tensor class")
    return 16 * (len(_shape(args[2], f"{name} size")) + len(_shape(args[3], f"{name} stride")))


def _check_sparse(args: tuple, kwargs: dict) -> int:
    name = "_rebuild_sparse_tensor"
    _nargs(args, kwargs, 2, 2, name)
    if not isinstance(args[0], torch.layout) or type(args[1]) is not tuple:
        raise Refused(f"{name} takes a layout and a tuple")
    return 0


def _check_nested(args: tuple, kwargs: dict) -> int:
    name = "_rebuild_nested_tensor"
    _nargs(args, kwargs, 4, 4, name)
    for i in range(4):
        _tensor(args[i], f"{name} argument {i}")
    return 0


def _refuse(name: str) -> Callable[[tuple, dict], int]:
    def check(args: tuple, kwargs: dict) -> int:
        raise Refused(f"calling {name} (it allocates or converts by argument)")

    return check


#: checks for the callables among torch's weights-only globals (others are not callable here).
_CHECKS: dict[str, Callable[[tuple, dict], int]] = {
    "builtins.set": _check_set,
    "builtins.frozenset": _check_set,
    "builtins.bytearray": _check_text_bytes("bytearray"),
    "builtins.bytes": _check_text_bytes("bytes"),
    "_codecs.encode": _check_text_bytes("_codecs.encode"),
    "builtins.complex": _check_numbers("complex", 2),
    "builtins.slice": _check_numbers("slice", 3),
    "builtins.range": _check_numbers("range", 3),  # lazy: range(10**10) holds three ints
    "collections.OrderedDict": _check_mapping("OrderedDict"),
    "collections.Counter": _check_mapping("Counter"),
    "torch.Size": _check_size,
    "torch.device": _check_device,
    "torch.serialization._get_layout": _check_layout,
    "torch.nn.parameter.Parameter": _check_parameter,
    "torch._utils._rebuild_tensor": _check_view("_rebuild_tensor", 4, 4),
    "torch._utils._rebuild_tensor_v2": _check_view("_rebuild_tensor_v2", 6, 7),
    "torch._utils._rebuild_tensor_v3": _check_view("_rebuild_tensor_v3", 7, 8),
    "torch._utils._rebuild_qtensor": _check_qtensor,
    "torch._utils._rebuild_parameter": _check_tensor_first("_rebuild_parameter", 3, 3),
    "torch._utils._rebuild_parameter_with_state": _check_tensor_first(
        "_rebuild_parameter_with_state", 4, 4),
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": _check_device_copy,
    "torch._utils._rebuild_device_tensor_from_numpy": _refuse("_rebuild_device_tensor_from_numpy"),
    "torch._utils._rebuild_meta_tensor_no_storage": _check_meta,
    "torch._utils._rebuild_wrapper_subclass": _check_wrapper_subclass,
    "torch._utils._rebuild_sparse_tensor": _check_sparse,
    "torch._utils._rebuild_nested_tensor": _check_nested,
}
#: builtins outside torch's list that pickles of plain metadata name (protocol 2 writes
#: ``bytes()`` for b"" and ``frozenset([...])``; ``slice`` and ``range`` objects are lazy).
_EXTRA_BUILTINS = ("frozenset", "bytes", "slice", "range")
#: builtin types a pickle may name as values (omegaconf records ``object_type=dict``); calling
#: them is refused (``list(range(10**10))``), NEWOBJ makes only an empty one.
_VALUE_BUILTINS = ("dict", "list", "tuple", "str", "int", "float", "bool", "object")


def _allowed_globals() -> dict[str, Any]:
    from torch import _weights_only_unpickler as wou

    allowed = dict(wou._get_allowed_globals())
    for name in _EXTRA_BUILTINS + _VALUE_BUILTINS:
        allowed[f"builtins.{name}"] = getattr(builtins, name)
    return allowed


def _user_safe_globals() -> dict[str, Any]:
    """What the user allowed with ``torch.serialization.add_safe_globals`` (torch's policy)."""
    out = {}
    for obj in torch.serialization.get_safe_globals():
        if isinstance(obj, tuple):
            obj, name = obj
        else:
            name = f"{obj.__module__}.{obj.__qualname__}"
        out[name] = obj
    return out


def _placeholder(module: str, name: str) -> type:
    return type(name, (Placeholder,), {"_zoorank_global": f"{module}.{name}",
                                       "__module__": "zoorank.zoo.safe_pickle"})


def is_metadata_module(module: str) -> bool:
    root = module.split(".", 1)[0]
    return root in METADATA_MODULES


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
        self._allowed = _allowed_globals()
        self._user = _user_safe_globals()
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
        if full in _CHECKS and full in self._allowed:
            if full not in self._calls:
                self._calls[full] = SafeCall(full, self._allowed[full], _CHECKS[full],
                                             self._charge)
            return self._calls[full]
        if full == "torch._tensor._rebuild_from_type_v2":
            return self._call_for("_rebuild_from_type_v2", self._rebuild_from_type)
        if full in self._allowed:
            return self._allowed[full]  # classes, dtypes, storage types: never called here
        if is_metadata_module(module):
            self.placeholders.add(full)
            if full not in self._classes:
                self._classes[full] = _placeholder(module, name)
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


for _name, _code in _OP.items():
    RestrictedUnpickler.dispatch[_code] = getattr(RestrictedUnpickler, f"load_{_name.lower()}")


def _describe(obj: Any) -> str:
    if isinstance(obj, SafeCall):
        return obj.name
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    if callable(obj):
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    return type(obj).__name__


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
                           UnpicklingError=pickle.UnpicklingError,
                           __name__="zoorank.zoo.safe_pickle")
