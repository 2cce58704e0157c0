"""Make torchvision 0.28.0 importable next to a CPU-only torch 2.13.0.

torchvision's wheel is a CUDA build: with a CPU torch its C++ extension cannot load, and
``torchvision._meta_registrations`` then registers fake kernels for ``torchvision::nms`` /
``torchvision::qnms``, ops that were never defined, so ``import torchvision`` (and ``import timm``)
fails. This hook runs just before ``_meta_registrations`` is imported and, only when the extension
failed to load, defines the two op schemas so the registrations succeed. On a working install it does
nothing. ``torchvision.ops.nms`` stays unavailable; zoorank never needs it (images decode with Pillow).

Installed by ``scripts/install.sh`` as a ``.pth`` import hook.
"""

from __future__ import annotations

import importlib.abc
import sys

_TARGET = "torchvision._meta_registrations"


def _define_missing_schemas() -> None:
    extension = sys.modules.get("torchvision.extension")
    if extension is None or extension._has_ops():
        return
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw("torchvision::nms", "")
        return
    except RuntimeError:
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define(
        "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
    )
    # Keep the Library alive for the life of the process.
    sys.modules[__name__]._LIBRARY = lib  # type: ignore[attr-defined]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # noqa: ANN001
        if fullname == _TARGET:
            try:
                _define_missing_schemas()
            except Exception:  # never break an import because of this hook
                pass
        return None


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
