"""A built network as a feature extractor (:class:`FeatureExtractor`): normalized
``(B, 3, H, W)`` → float32 ``(B, dim)`` features (a layer's output when ``layer`` is set; any
output pooled by :func:`pool_features`: 4-D averaged over space, 3-D over tokens, 2-D kept,
else flattened), and the head's logits beside them where a head was found; and the check that
features are finite and 2-D (:func:`check_features`). Building the networks: :mod:`.build`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from zoorank.zoo.checkpoints import CheckpointError


def pool_features(out: Any) -> torch.Tensor:
    """A model or layer output as float32 ``(B, dim)`` (conventions in the module docstring)."""
    if isinstance(out, Mapping):
        out = next((v for v in out.values() if isinstance(v, torch.Tensor)), None)
    elif isinstance(out, (tuple, list)):
        out = next((v for v in out if isinstance(v, torch.Tensor)), None)
    if not isinstance(out, torch.Tensor):
        raise CheckpointError(f"model output holds no tensor (got {type(out).__name__})")
    if out.ndim == 4:
        out = out.mean(dim=(2, 3))
    elif out.ndim == 3:
        out = out.mean(dim=1)
    elif out.ndim != 2:
        out = out.reshape(out.shape[0], -1)
    return out.float()


class _LayerReached(Exception):
    """Raised by the layer hook: the rest of the network need not run."""


#: how a head is run (:class:`FeatureExtractor`'s ``head``): timm's ``forward_features`` +
#: ``forward_head``; a transformers ``*ForImageClassification``; a python module's
#: ``forward_features``/``forward_head``, a submodule (``module:<dotted path>``) or a method
#: (``method:<name>``) (:mod:`zoorank.zoo.heads`); a torchscript (features, logits).
HEAD_KINDS = ("timm", "transformers", "forward_head", "module:<path>", "method:<name>",
              "torchscript")
#: the head's key before submodules could be named: the submodule ``head``.
_LEGACY_KEYS = {"head_attribute": "module:head"}


class FeatureExtractor(nn.Module):
    """Wraps a backbone: normalized ``(B, 3, H, W)`` → float32 ``(B, dim)``.

    With ``layer`` the output of that submodule is taken (forward hook; the forward stops there
    unless a head runs too). With ``head`` (one of :data:`HEAD_KINDS`), :meth:`features_and_logits`
    gives the classifier's logits from the same forward (conventions in the package docstring).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        source: str,
        hf_outputs: bool = False,
        pooling: str = "cls",
        layer: str | None = None,
        forward_kwargs: dict[str, Any] | None = None,
        head: str | None = None,
        head_named: bool = False,
        model_id: str | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.source = source
        #: the forward takes ``pixel_values=`` and returns a transformers ``ModelOutput``
        self.hf_outputs = hf_outputs
        self.pooling = pooling
        self.layer = layer
        head = _LEGACY_KEYS.get(head, head) if head else head
        self.head = head
        self.forward_kwargs = dict(forward_kwargs or {})
        self._captured: list[Any] = []
        self._head_io: list[Any] = []
        #: a python model's head as a callable (a submodule, or the model's bound method)
        self._head_fn: Any = None
        #: the python head was named by ``head: NAME`` (else found by layout): the first forward
        #: checks it (:meth:`_python_head`)
        self._head_named = head_named
        self._head_checked = False
        #: why the first forward did not keep a found head (None: kept, or none)
        self.head_dropped: str | None = None
        self.model_id = model_id
        if layer is not None:
            model.get_submodule(layer).register_forward_hook(self._capture)
        if head == "transformers":  # the base model's output, pooled as without a head
            model.base_model.register_forward_hook(self._capture_head_io)
        elif head and head.startswith("module:"):
            self._head_fn = model.get_submodule(head.removeprefix("module:"))
            self._head_fn.register_forward_hook(self._capture_head_call)
        elif head and head.startswith("method:"):
            name = head.removeprefix("method:")
            self._head_fn = getattr(model, name)
            # an instance attribute shadows the class's method: the forward's self.<name>(z)
            # calls the wrapper, which records the call (the module is this extractor's own)
            object.__setattr__(model, name, self._method_wrapper(self._head_fn))

    def _capture(self, module: nn.Module, args: Any, output: Any) -> None:
        self._captured.append(output)
        if self.head is None:
            raise _LayerReached

    def _capture_head_io(self, module: nn.Module, args: Any, output: Any) -> None:
        self._head_io.append(output)

    def _capture_head_call(self, module: nn.Module, args: Any, output: Any) -> None:
        self._head_io.append((args[0] if args else None, output))

    def _method_wrapper(self, bound: Any) -> Any:
        def head(*args: Any, **kwargs: Any) -> Any:
            out = bound(*args, **kwargs)
            self._head_io.append((args[0] if args else next(iter(kwargs.values()), None), out))
            return out

        return head

    def _run(self, x: torch.Tensor) -> Any:
        if self.hf_outputs:
            return self.model(pixel_values=x, **self.forward_kwargs)
        return self.model(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features_and_logits(x)[0]

    def features_and_logits(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(float32 features ``(B, dim)``, float32 logits ``(B, outputs)`` or None) of one forward."""
        self._captured.clear()
        self._head_io.clear()
        try:
            feats, logits = self._forward_all(x)
            if self.layer is not None:
                if not self._captured:
                    raise CheckpointError(f"layer {self.layer!r} did not run in the forward pass")
                feats = pool_features(self._captured[0])
        finally:
            self._captured.clear()
            self._head_io.clear()
        if logits is not None:
            if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
                shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
                raise CheckpointError(f"the head's logits must be (batch, classes), got {shape}")
            logits = logits.float()
        return feats, logits

    def _forward_all(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        head, model = self.head, self.model
        if head is None:
            try:
                out = self._run(x)
            except _LayerReached:
                return torch.empty(0), None
            return (self._pool_transformers(out) if self.hf_outputs
                    else pool_features(out)), None
        if head in ("timm", "forward_head"):
            trunk = model.forward_features(x)
            if head == "timm" or _takes_pre_logits(model):
                feats = pool_features(model.forward_head(trunk, pre_logits=True))
            else:
                feats = pool_features(trunk)
            return feats, model.forward_head(trunk)
        if head == "transformers":
            logits = self._run(x).logits
            return self._pool_transformers(self._head_io[0]), logits
        if self._head_fn is not None:
            return self._python_head(self._run(x))
        out = self._run(x)  # torchscript declared head: true → (features, logits)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise CheckpointError("head: true declares that the torchscript module returns "
                                  f"(features, logits); it returned {type(out).__name__}")
        return pool_features(out[0]), out[1]

    def _python_head(self, out: Any) -> tuple[torch.Tensor, Any]:
        """(features, logits) of a python model's forward output ``out``: the head's first call in
        the forward (its input, its output), else (a forward that returns the features) the head
        applied to the pooled output. The first forward checks the head (:mod:`.heads`): a found
        submodule must run and give a 2-D output the forward returns, a found method must give a
        2-D output; one that does not is dropped (features only, :attr:`head_dropped` says why); a
        named head that does neither is a ConfigError."""
        call = self._head_io[0] if self._head_io else None
        if call is not None:
            feats, logits = pool_features(call[0]), _squeezed(call[1])
        elif self._head_named or self.head.startswith("method:") or self._head_checked:
            feats = pool_features(out)
            try:
                logits = self._head_fn(feats)
            except Exception as err:  # noqa: BLE001 - checked below: not this model's head
                if self._head_checked:
                    raise
                logits = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        else:
            feats, logits = pool_features(out), "it does not run in the forward"
        if not self._head_checked:
            self._head_checked = True
            why = _head_mismatch(logits, out, strict=call is not None and not self._head_named
                                 and self.head.startswith("module:"))
            if why is not None:
                name = self.head.split(":", 1)[1]
                if self._head_named:
                    from zoorank.errors import ConfigError

                    who = f"model {self.model_id}: " if self.model_id else ""
                    raise ConfigError(f"{who}head: {name!r} neither runs in the model's forward "
                                      f"with a (batch, classes) output nor takes its output "
                                      f"({why})")
                self.head_dropped = f"{name}: {why}"
                self.head, self._head_fn = None, None
                return pool_features(out), None
        return feats, logits

    def _pool_transformers(self, out: Any) -> torch.Tensor:
        if self.pooling == "pooler":
            pooled = getattr(out, "pooler_output", None)
            if pooled is None:
                raise CheckpointError(
                    "this transformers model has no pooler output; use pooling cls or mean"
                )
            return pool_features(pooled)
        hidden = out.last_hidden_state
        if hidden.ndim == 4:
            return hidden.mean(dim=(2, 3)).float()
        return (hidden[:, 0] if self.pooling == "cls" else hidden.mean(dim=1)).float()


def _squeezed(logits: Any) -> Any:
    """``(B, K, 1, ...)`` logits (a convolutional classifier, SqueezeNet's) as ``(B, K)``."""
    if isinstance(logits, torch.Tensor) and logits.ndim > 2 and all(
            n == 1 for n in logits.shape[2:]):
        return logits.flatten(1)
    return logits


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [v for v in out.values() if isinstance(v, torch.Tensor)]
    if isinstance(out, (tuple, list)):
        return [v for v in out if isinstance(v, torch.Tensor)]
    return []


def _head_mismatch(logits: Any, out: Any, strict: bool) -> str | None:
    """Why ``logits`` (a head's output, or the reason it has none) are not a classifier's for a
    model whose forward returned ``out``, or None: they must be a 2-D tensor and, ``strict`` (a
    submodule found by name that ran), one of the tensors the forward returns (by shape)."""
    if isinstance(logits, str):
        return logits
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        return f"its output is {shape}, not (batch, classes)"
    if strict and tuple(logits.shape) not in {tuple(t.shape) for t in _tensors(out)}:
        return (f"its output {tuple(logits.shape)} is not what the forward returns "
                f"({[tuple(t.shape) for t in _tensors(out)]})")
    return None


def _takes_pre_logits(model: nn.Module) -> bool:
    import inspect

    try:
        return "pre_logits" in inspect.signature(model.forward_head).parameters
    except (TypeError, ValueError):
        return False


def check_features(features: Any, model_id: str | None = None) -> None:
    """Raise CheckpointError unless ``features`` is a finite 2-D ``(B, dim)`` array."""
    t = torch.as_tensor(features)
    who = f"model {model_id}: " if model_id else ""
    if t.ndim != 2:
        raise CheckpointError(f"{who}features must be 2-D (batch, dim), got shape {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex():
        nan = int(torch.isnan(t).sum())
        inf = int(torch.isinf(t).sum())
        if nan or inf:
            raise CheckpointError(
                f"{who}features contain {nan} NaN and {inf} Inf values (of {t.numel()})"
            )
