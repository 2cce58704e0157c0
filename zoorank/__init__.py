"""zoorank: rank zoos of vision checkpoints without labels.

The Python API (:mod:`zoorank.api`)::

    import zoorank

    result = zoorank.run("cfg.yaml")     # embed → score → rank → report, like `zoorank run`
    result.pick, result.shortlist, result.leaderboard
    zoorank.open("./zoorank-store")      # read a finished run
    result.pick.load(), result.export("./shipped")   # the picked network, and shipping it

The errors it raises are importable from here: :class:`ZoorankError` and its subclasses
:class:`ConfigError` (an invalid config: exit 2 on the CLI), :class:`InputError` (an unusable
input: exit 2) and :class:`NothingRankedError` (no model could be ranked: exit 3).

``import zoorank`` stays cheap: the API (and pandas, Ray, torch behind it) is imported on first use.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version

from zoorank.errors import ConfigError, InputError, NothingRankedError, ZoorankError

try:
    __version__ = version("zoorank")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+local"

#: the API's names, imported from zoorank.api on first use
_API = ("RankedModel", "Result", "open", "run")


def __getattr__(name: str) -> object:
    if name in _API or name == "api":
        # by name: modules that read ``zoorank.__version__`` from any layer must not depend on
        # the API (top layer) through this package (import-linter follows static imports)
        api = importlib.import_module("zoorank.api")
        return api if name == "api" else getattr(api, name)
    raise AttributeError(f"module 'zoorank' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})


# ``open`` is left out of ``__all__`` so that ``from zoorank import *`` does not shadow the builtin
__all__ = ["__version__", "ConfigError", "InputError", "NothingRankedError", "RankedModel",
           "Result", "ZoorankError", "run"]
