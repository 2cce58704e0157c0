"""Checked calls: the callables a pickle may invoke, each behind a check of its arguments' types
(:class:`SafeCall`) that returns the bytes the call allocates, charged to the load's budget
(:data:`~zoorank.zoo.safe_pickle.interpreter.MAX_METADATA_BYTES`) before the call runs.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from zoorank.zoo.safe_pickle.refusals import Refused

_TEXT_ENCODINGS = frozenset({"latin1", "latin-1", "utf-8", "utf8", "ascii"})


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
CHECKS: dict[str, Callable[[tuple, dict], int]] = {
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
