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

Why not ``torch.load(weights_only=True)`` with ``torch.serialization.add_safe_globals``
(tried on torch 2.13 against ``tests/zoo/test_checkpoint_layouts.py``, 2026-11-25): it can load
those checkpoints only by allowing 14 globals for Lightning's ``hyper_parameters`` alone
(``builtins.dict``, ``collections.defaultdict``, ``typing.Any``, numpy's ``_reconstruct``,
``ndarray``, ``dtype``, ``scalar`` and the ``Float64DType`` class it BUILDs on, five omegaconf
internals, ``argparse.Namespace``, ``pathlib.PosixPath``), and then

* it *constructs* them: their ``__setstate__`` and omegaconf's own code run on the file's data, and
  omegaconf (or any library a Hydra config names) must be importable, where this loader imports
  nothing the file names and builds inert placeholders;
* the allowlist is closed: one global not listed in advance (a user's own class in the
  hyper-parameters, a ``pathlib.Path.write_text`` reduce dressed as metadata) refuses the *whole*
  file, so its tensors could not be ranked; here such metadata stays inert and the weights load
  (``test_metadata_comes_back_as_inert_placeholders``,
  ``test_a_call_into_a_metadata_module_stays_inert``);
* it has no allocation budget over what allowed callables build (``test_safe_pickle``'s bombs).

So it is kept. Its cost: the Lightning checkpoint of those tests loads in 56 ms here against 24 ms
for torch's loader with the globals allowed (a pure-Python opcode loop over the metadata; tensors
are read by torch either way), negligible beside embedding the model.

Modules: :mod:`~zoorank.zoo.safe_pickle.interpreter` (the opcode interpreter),
:mod:`~zoorank.zoo.safe_pickle.allowlist` (which globals resolve to what),
:mod:`~zoorank.zoo.safe_pickle.checked_calls` (argument checks and the allocation budget),
:mod:`~zoorank.zoo.safe_pickle.refusals`. This module makes the ``pickle_module`` torch loads with.
"""

from __future__ import annotations

import io
import pickle
from types import SimpleNamespace
from typing import Any, BinaryIO

from zoorank.zoo.safe_pickle.interpreter import RestrictedUnpickler


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
