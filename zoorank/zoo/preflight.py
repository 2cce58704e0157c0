"""Every checkpoint loaded on CPU before the heavy work (``zoorank zoo``, ``run``, ``embed``).

Each distinct checkpoint is read safely and loaded, strictly, into its architecture with the
prefix and head rules EMBED applies (:func:`zoorank.zoo.build.load_model`, given the state dict
read here). Where the line falls:

* a file that cannot be read at all (truncated, corrupt, refused by the safe loader) is that
  model's failure: it comes back with :attr:`~zoorank.zoo.resolve.ResolvedModel.unreadable` set
  to the reason, so EMBED records it ``failed`` and the rest of the sweep runs;
* a state dict that does not fit its entry (the models of one config entry: same source,
  architecture, prefix and options) on *any* readable file of the entry is a
  :class:`~zoorank.errors.ConfigError` (exit 2) whose message names the fix found by trying the
  ``state_dict_prefix`` presets and the architectures whose parameter names and shapes match
  (:mod:`zoorank.zoo.fixes`); when some files of the entry fit, the others are failures as above.

Files load in a thread pool on CPU (torch releases the GIL while it reads and copies). A pass is
remembered in the store (:data:`CACHE_FILE`, keyed on the model fingerprint, which covers the
checkpoint digest, architecture, prefix and options, and on the head), so a checkpoint already
checked is not read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from zoorank.errors import ConfigError
from zoorank.zoo import sources

if TYPE_CHECKING:
    from zoorank.store import Store
    from zoorank.zoo.resolve import ResolvedModel

#: the store file that remembers which (checkpoint, architecture, prefix, head) passed.
CACHE_FILE = "cache/preflight.json"


@dataclass
class Preflight:
    """What the check found: the models (failures marked unreadable), and its counts."""

    models: list[ResolvedModel]
    checked: int = 0  # files loaded now
    known: int = 0  # files passed before (the store's cache)
    failed: dict[str, str] = field(default_factory=dict)  # model id → reason
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """What the console says: the failures (the rest goes on); nothing when all load."""
        return [f"checkpoint of {model_id} cannot be read, recorded as failed (the other models "
                f"go on): {reason}" for model_id, reason in self.failed.items()]


def _cache_key(model: ResolvedModel) -> str:
    return hashlib.sha256(json.dumps([model.fingerprint, model.spec.head],
                                     default=str).encode()).hexdigest()[:32]


def _entry_key(model: ResolvedModel) -> str:
    """The config entry a model comes from: its spec without the id and the file."""
    return json.dumps(model.spec.model_dump(mode="json", exclude={"id", "checkpoint"}),
                      sort_keys=True, default=str)


def _read_cache(store: Store | None) -> set[str]:
    if store is None:
        return set()
    try:
        return set(store.read_json(CACHE_FILE)) if store.exists(CACHE_FILE) else set()
    except (OSError, ValueError, TypeError):
        return set()  # a cache: a damaged one is rebuilt


def _write_cache(store: Store | None, keys: set[str]) -> None:
    if store is None:
        return
    try:
        store.write_json(CACHE_FILE, sorted(keys | _read_cache(store)))
    except OSError:
        pass  # a cache: the next run checks again


def check_one(model: ResolvedModel) -> tuple[str, str | None]:
    """("ok" | "unreadable" | "misfit", the reason): one model's checkpoint read and loaded on
    CPU as EMBED loads it."""
    from zoorank.zoo.build import load_model
    from zoorank.zoo.checkpoints import CheckpointError, load_checkpoint_object, state_dict_of

    spec = model.spec
    path = str(spec.checkpoint)
    try:
        obj = load_checkpoint_object(path, trust=spec.trust_checkpoint)
    except (CheckpointError, OSError) as err:
        return "unreadable", _first(err)
    try:
        state = state_dict_of(obj, path, state_dict_key=spec.state_dict_key,
                              state_dict_prefix=spec.state_dict_prefix)
        del obj
        load_model(model, "cpu", state=state)
    except (CheckpointError, ConfigError) as err:
        return "misfit", str(err)
    except Exception as err:  # noqa: BLE001 - any build failure is the entry's to fix
        return "misfit", f"{type(err).__name__}: {_first(err)}"
    return "ok", None


def _first(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _wanted(model: ResolvedModel) -> bool:
    spec = model.spec
    return bool(spec.checkpoint) and model.unreadable is None \
        and sources.get(spec.source).state_dict_checkpoint


def preflight(models: Sequence[ResolvedModel], store: Store | None = None,
              workers: int | None = None) -> Preflight:
    """Load every checkpoint of ``models`` on CPU (threads; ``workers`` default: the CPUs, at most
    8), skipping those ``store``'s cache knows. Returns the models with unreadable files marked;
    raises ConfigError naming the fix when an entry's checkpoints do not fit it."""
    start = time.perf_counter()
    known = _read_cache(store)
    todo = [m for m in models if _wanted(m) and _cache_key(m) not in known]
    result = Preflight(list(models), known=sum(_wanted(m) for m in models) - len(todo))
    if not todo:
        return result
    workers = workers or min(8, os.cpu_count() or 1, len(todo))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zoorank-preflight") as pool:
        outcomes = dict(zip((m.model_id for m in todo), pool.map(check_one, todo)))
    result.checked = len(todo)
    by_entry: dict[str, list[ResolvedModel]] = {}
    for m in todo:
        by_entry.setdefault(_entry_key(m), []).append(m)
    for members in by_entry.values():
        kinds = {outcomes[m.model_id][0] for m in members}
        fits_somewhere = "ok" in kinds or any(_entry_key(m) == _entry_key(members[0])
                                              and _cache_key(m) in known for m in models)
        if "misfit" in kinds and not fits_somewhere:
            raise _misfit_error(members, outcomes)
    passed = {_cache_key(m) for m in todo if outcomes[m.model_id][0] == "ok"}
    _write_cache(store, passed)
    failed = {m.model_id: str(outcomes[m.model_id][1]) for m in todo
              if outcomes[m.model_id][0] != "ok"}
    result.failed = failed
    result.models = [replace(m, unreadable=failed[m.model_id]) if m.model_id in failed else m
                     for m in models]
    result.seconds = time.perf_counter() - start
    return result


def _misfit_error(members: list[ResolvedModel], outcomes: dict[str, tuple[str, Any]]
                  ) -> ConfigError:
    from zoorank.zoo.fixes import suggest_fix

    first = next(m for m in members if outcomes[m.model_id][0] == "misfit")
    spec = first.spec
    ids = [m.model_id for m in members]
    shown = ", ".join(ids[:3]) + (f" (+{len(ids) - 3} more)" if len(ids) > 3 else "")
    fix = suggest_fix(first)
    where = (f"with state_dict_prefix {spec.state_dict_prefix!r}" if spec.state_dict_prefix
             else "without a state_dict_prefix")
    head = (f"model(s) {shown}: no checkpoint of this entry loads into {spec.source} "
            f"{spec.name!r} {where}")
    advice = (f"; the fix: {fix}" if fix else
              f"; `zoorank inspect {spec.checkpoint}` lists its tensors and the state_dict_prefix "
              "presets that apply")
    return ConfigError(f"{head}{advice}. The first file: {outcomes[first.model_id][1]}")


def store_if_any(uri: str) -> Store | None:
    """The store at ``uri`` when it exists (``zoorank zoo`` creates none), else None."""
    from pathlib import Path

    from zoorank.store import Store, uris

    if not uris.is_uri(uri) and not Path(uri).expanduser().is_dir():
        return None
    return Store(uri)
