"""Finding the family modules: every module of a wing (``label_free``, ``few_label``, ``heads``,
``active``) is imported when :mod:`zoorank.metrics` is, so a metric registered in a new file of a
wing is known everywhere without an import line.

Registration order is the order of ``zoorank metrics``, of a config's default ``metrics:`` and of
the report's columns: the families of :data:`ORDER` first, in that order, then every other family
module found in a wing (wing by wing, by name).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

#: the wings, in the order their other (unlisted) family modules are imported.
WINGS: tuple[str, ...] = ("label_free", "few_label", "heads", "active")

#: where the families' metrics stand among the registry's (and so in listings and reports):
#: spectral, geometry, learnability, reliability, collapse, the suite's NC, then the label metrics
#: and the heads' estimates. A family module not named here follows them.
ORDER: tuple[str, ...] = (
    "label_free.rankme", "label_free.lidar", "label_free.alpha_req", "label_free.coding_rate",
    "label_free.geometry", "label_free.clid", "label_free.reliability", "label_free.collapse",
    "suite", "few_label.oracle_metrics", "few_label.loss_data", "few_label.loss_data_costs",
    "few_label.logme", "few_label.h_score", "few_label.nleep", "few_label.gbc",
    "few_label.sfda_etran", "few_label.ncti", "heads.classifier",
)

_PACKAGE = __name__.rpartition(".")[0]


def family_names() -> list[str]:
    """Every family module (relative to ``zoorank.metrics``): :data:`ORDER`, then the other modules
    of each wing, by name (private modules, ``_*``, are helpers and not listed)."""
    found = []
    for wing in WINGS:
        package = importlib.import_module(f"{_PACKAGE}.{wing}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("_") and not info.ispkg:
                found.append(f"{wing}.{info.name}")
    return [*ORDER, *(name for name in found if name not in ORDER)]


def discover_families() -> tuple[str, ...]:
    """Import every family module (registering its metrics); the modules' names, in import order."""
    names = family_names()
    for name in names:
        importlib.import_module(f"{_PACKAGE}.{name}")
    return tuple(names)


def metric_functions() -> dict[str, Any]:
    """Every registered metric's public function by its name (the package exports them, so a new
    family's metrics are importable from ``zoorank.metrics`` with no ``__all__`` entry there)."""
    from zoorank.metrics.registry import REGISTRY

    out: dict[str, Any] = {}
    for entry in REGISTRY.values():
        fn = entry.function
        name = getattr(fn, "__name__", "")
        if fn is not None and name.isidentifier() and not name.startswith("_"):
            out.setdefault(name, fn)
    return out
