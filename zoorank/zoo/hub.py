"""Pretrained weights from the local Hugging Face cache (offline): timm names and transformers ids.

The cache is the hub's own layout, ``$HF_HUB_CACHE`` (default ``$HF_HOME/hub``, default
``~/.cache/huggingface/hub``)::

    models--timm--resnet50.a1_in1k/
        refs/main                      # the revision (commit hash) "main" points at
        snapshots/<revision>/model.safetensors
        snapshots/<revision>/config.json

Nothing here touches the network: a model that is not in the cache is a ConfigError naming the
directory looked at and the command that fetches it.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from zoorank.errors import ConfigError

#: weight files of a timm hub repo, in the order timm's loader tries them.
TIMM_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors",
                     "open_clip_pytorch_model.bin")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache this process uses (read from the environment on each call)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def repo_folder(repo_id: str) -> Path:
    return hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))


@dataclass(frozen=True)
class CachedSnapshot:
    """A repo's snapshot in the cache: its revision (commit hash) and directory."""

    repo_id: str
    revision: str
    directory: Path

    def file(self, names: tuple[str, ...]) -> Path | None:
        return next((self.directory / n for n in names if (self.directory / n).is_file()), None)


def cached_snapshot(repo_id: str, revision: str | None = None) -> CachedSnapshot | None:
    """The cached snapshot of ``repo_id`` at ``revision`` (a ref like ``main`` or a hash)."""
    folder = repo_folder(repo_id)
    ref = revision or "main"
    ref_file = folder / "refs" / ref
    commit = ref_file.read_text().strip() if ref_file.is_file() else ref
    directory = folder / "snapshots" / commit
    if directory.is_dir():
        return CachedSnapshot(repo_id, commit, directory)
    if revision is None:  # no refs/main: a single snapshot is unambiguous
        snapshots = sorted((folder / "snapshots").glob("*")) if folder.is_dir() else []
        if len(snapshots) == 1:
            return CachedSnapshot(repo_id, snapshots[0].name, snapshots[0])
    return None


def fetch_hint(repo_id: str) -> str:
    return (f"fetch it with `hf download {repo_id}` (or `huggingface-cli download {repo_id}`) "
            "on a machine with network access, into this cache")


def missing_error(label: str, what: str, repo_id: str) -> ConfigError:
    return ConfigError(
        f"{label}: {what} is not in the local Hugging Face cache (looked at "
        f"{repo_folder(repo_id)}); {fetch_hint(repo_id)}"
    )


def timm_repo_id(name: str) -> tuple[str, str | None]:
    """(hub repo id, revision) of a timm model name: ``hf-hub:org/name[@rev]`` or a registry name
    with a pretrained tag (``resnet50.a1_in1k`` → ``timm/resnet50.a1_in1k``)."""
    if name.startswith("hf-hub:"):
        repo, _, revision = name.removeprefix("hf-hub:").partition("@")
        return repo, revision or None
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)  # a bare architecture gives its default pretrained tag
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    return (hub_id or f"timm/{name}"), None


def cached_timm_names(pattern: str) -> list[str]:
    """Names of the cached ``timm/*`` repos with weights whose name matches a glob, sorted."""
    cache = hub_cache_dir()
    names = []
    for folder in sorted(cache.glob("models--timm--*")) if cache.is_dir() else []:
        name = folder.name.removeprefix("models--timm--")
        if fnmatch.fnmatchcase(name, pattern):
            snap = cached_snapshot(f"timm/{name}")
            if snap is not None and snap.file(TIMM_WEIGHT_FILES) is not None:
                names.append(name)
    return names


def transformers_revision(name: str) -> tuple[str, str | None]:
    """(what ``from_pretrained`` takes, the revision): a hub id pinned as ``org/model@rev`` splits
    into ``org/model`` and ``rev``; a directory (or an unpinned id) is passed as it is."""
    if Path(name).expanduser().is_dir() or "@" not in name:
        return name, None
    repo, _, revision = name.partition("@")
    return repo, revision or None


def transformers_directory(name: str, label: str) -> Path:
    """A transformers model directory: ``name`` itself, or the cached snapshot of hub id ``name``."""
    directory = Path(name).expanduser()
    if directory.is_dir():
        return directory
    repo, _, revision = name.partition("@")
    if repo.count("/") == 1 and not directory.is_absolute() and not name.startswith("."):
        snap = cached_snapshot(repo, revision or None)
        if snap is not None and (snap.directory / "config.json").is_file():
            return snap.directory
        raise missing_error(label, f"transformers model {name!r} (not a directory either)", repo)
    raise ConfigError(f"{label}: {directory} is not a transformers model directory (no config.json)")
