"""What the restricted unpickler raises: every refusal is a :class:`Refused` naming the global or
opcode; any other malformation is a :class:`MalformedPickle` (both ``UnpicklingError``)."""

from __future__ import annotations

import pickle


class Refused(pickle.UnpicklingError):
    """The pickle asks for something this loader never does (a call, a BUILD, a size)."""


class UnsafeGlobal(Refused):
    """The pickle names a global that is neither a tensor building block nor metadata."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unsafe global {name}")
        self.name = name


class MalformedPickle(pickle.UnpicklingError):
    """The stream is not a pickle this loader can read (truncated, inconsistent, wrong types)."""
