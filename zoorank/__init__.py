"""zoorank: rank zoos of vision checkpoints without labels."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("zoorank")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+local"

__all__ = ["__version__"]
