"""Config → :class:`ResolvedModel` rows: globs expanded, ``from_tune`` read, ids, fingerprints.

No network is built and no weights are read into memory here. Checkpoints may be local paths or
any ``pyarrow.fs`` URI (``s3://``, ``gs://``); their content digests come from a
:class:`zoorank.store.uris.DigestCache` kept in the store, so a file is read in full once per
(URI, size, modification time), not once per stage.

Which checkpoint problems stop the run and which fail one entry:

* **config errors** (:class:`~zoorank.errors.ConfigError`, exit 2): the config points at nothing
  -- a local path or object that does not exist (the store answers "not found"), a glob that
  matches no file, a malformed ``zoo.yaml`` or URI, an unknown source or architecture, duplicate
  ids. Fixing them needs an edit of the config or of the files.
* **unreadable checkpoints** (:attr:`ResolvedModel.unreadable`, the run goes on, exit 0): the
  object exists or may exist but cannot be read right now -- the store answers with an error
  after pyarrow's own attempts (an S3 500, a timeout, a reset connection, access denied), or reading a local
  file fails (permission denied, an I/O error). That model is kept with the redacted reason; EMBED
  records its entries ``failed`` with it (manifest, the ``failed`` table, the report), every other
  model is embedded, scored and ranked on the same samples, and the next run tries it again.
  ``zoorank gc`` deletes nothing while a checkpoint cannot be read (it cannot tell what is fresh).
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from zoorank.config import FromTuneSpec, ModelSpec, RunConfig, case_clash
from zoorank.config.digests import fingerprint
from zoorank.errors import ConfigError
from zoorank.store import uris
from zoorank.store.uris import DigestCache
from zoorank.zoo import hub, sources
from zoorank.zoo.preprocessing import Geometry, Normalization, with_overrides
from zoorank.zoo.zoofile import read_zoo_file

if TYPE_CHECKING:
    from zoorank.store import Store
    from zoorank.zoo.heads import HeadSearch

_GLOB_CHARS = "*?["
#: version of how a model is built and its weights loaded (part of every model fingerprint, in
#: place of the package version): bump it when that changes what a model computes.
MODEL_VERSION = 1
# a process-wide cache for configs whose store does not exist yet (nothing is written beside them)
_PROCESS_DIGESTS = DigestCache()


@dataclass(frozen=True)
class ResolvedModel:
    """One concrete model: spec with a single checkpoint file, preprocessing, fingerprint."""

    model_id: str
    spec: ModelSpec
    fingerprint: str
    geometry: Geometry
    normalization: Normalization
    group: str | None
    family: str | None
    #: sha256 of the weight bytes (checkpoint file, transformers directory, scripted file, cached
    #: hub weights); None for a checkpoint-less timm/python model (seeded random initialisation).
    checkpoint_digest: str | None = None
    #: names of the config's datasets this model is ranked on; None = every dataset.
    datasets: tuple[str, ...] | None = None
    #: where the preprocessing came from ("timm", "transformers", "default", "+ config (...)").
    preprocessing_origin: str = "default"
    #: pretrained hub weights: ``repo@revision`` of the cached snapshot; None otherwise.
    weights_revision: str | None = None
    #: the Hugging Face cache the hub weights were found in (actors read them from there).
    hub_cache: str | None = None
    #: why the checkpoint cannot be read right now (the store's error, redacted); None when it
    #: was read. Such a model is a failed entry of this run (see the module docstring); its
    #: ``fingerprint`` is a placeholder no embedding ever has, ``checkpoint_digest`` is None.
    unreadable: str | None = None
    #: a python model's classifier head as found on the driver (:mod:`zoorank.zoo.heads`); None
    #: for other sources and with heads off.
    head_search: HeadSearch | None = None
    #: ids of the models with the same weights and spec, ranked as this one
    #: (:mod:`zoorank.zoo.duplicates`); they are left out of the zoo.
    duplicates: tuple[str, ...] = ()

    def wants(self, dataset: str) -> bool:
        """Whether this model is ranked on ``dataset``."""
        return self.datasets is None or dataset in self.datasets


# --------------------------------------------------------------------------- resolve


def resolve_models(config: RunConfig, digests: DigestCache | None = None,
                   store: Store | None = None) -> list[ResolvedModel]:
    """Expand and resolve the config's models (no weights are read into memory).

    One model per checkpoint file of a glob (local or URI), with the id made from the file's path
    below the glob's fixed prefix (``runs/*/last.safetensors`` → ``lr0.3-s0-last``, or
    ``<id>-lr0.3-s0-last`` when the spec has an id); one per cached timm model matching a
    ``pretrained`` name glob (ids from the names); ``from_tune`` entries contribute the models of
    their ``zoo.yaml``. ``digests`` defaults to the store's digest cache (saved back at the end;
``store``: the config's store, when the caller holds it).
    Raises ConfigError naming the model when a glob matches nothing, a file, directory or cached
    model is missing, an architecture is unknown, a dataset is not the config's, or two models
    get the same id. A checkpoint that exists (or may) but cannot be read is no error: its model
    comes back with :attr:`ResolvedModel.unreadable` set (see the module docstring). Identical
    checkpoints come back once (:mod:`zoorank.zoo.duplicates`).
    """
    own = digests is None
    digests = _digest_cache(config.store, store) if digests is None else digests
    names = [d.name for d in config.datasets]
    heads = config.embed.heads
    resolved: list[tuple[str, ResolvedModel]] = []
    for index, entry in enumerate(config.models):
        if isinstance(entry, FromTuneSpec):
            specs = read_zoo_file(entry.from_tune)
            if not specs:
                raise ConfigError(f"models[{index}]: from_tune {entry.from_tune!r} lists no models")
            for j, spec in enumerate(specs):
                label = f"models[{index}] (from_tune {uris.redact(entry.from_tune)}) [{j}]"
                resolved += [(label, r) for r in _expand(spec, label, digests, names, heads)]
        else:
            label = f"models[{index}]" + (f" ({entry.id})" if entry.id else f" ({entry.name})")
            resolved += [(label, r) for r in _expand(entry, label, digests, names, heads)]
    seen: dict[str, str] = {}
    for label, model in resolved:
        if model.model_id in seen:
            raise ConfigError(
                f"{label}: model id {model.model_id!r} is also produced by {seen[model.model_id]}; "
                "give the entries distinct ids"
            )
        seen[model.model_id] = label
    clash = case_clash(list(seen))  # ids from globs and from_tune, after expansion
    if clash:
        raise ConfigError(f"{seen[clash[1]]}: model id {clash[1]!r} differs only in case from "
                          f"{clash[0]!r} ({seen[clash[0]]}); they would share one store directory "
                          "on a case-insensitive file system")
    if own:
        digests.save()
    from zoorank.zoo.duplicates import drop_duplicates

    return drop_duplicates([model for _, model in resolved])


def _digest_cache(uri: str, store: Store | None = None) -> DigestCache:
    """The digest cache of the store at ``uri`` (``store``, when given); the process's own while a
    local store does not exist yet."""
    if not uris.is_uri(uri) and not Path(uri).expanduser().is_dir():
        return _PROCESS_DIGESTS
    if store is None:
        from zoorank.store import Store

        store = Store(uri)
    return DigestCache(store)


def _valid_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", text).strip("_.-")
    return name[:200] or "model"


def _plain_path(path: str) -> str:
    """The path part of a local path or URI (no scheme, credentials or query)."""
    if not uris.is_uri(path):
        return path
    rest = path.split("://", 1)[1].split("?", 1)[0]
    first, _, tail = rest.partition("/")
    return (first.rsplit("@", 1)[-1] + "/" + tail) if tail else first.rsplit("@", 1)[-1]


def _glob_prefix(pattern: str) -> str:
    fixed = []
    for part in _plain_path(pattern).split("/"):
        if any(c in part for c in _GLOB_CHARS):
            break
        fixed.append(part)
    return "/".join(fixed) or "."


def _id_from_path(path: str, prefix: str) -> str:
    plain = _plain_path(path)
    if uris.is_uri(path) or posixpath.isabs(prefix) != posixpath.isabs(plain):
        # object-store keys: a plain prefix cut (relpath would consult the working directory)
        head = prefix.rstrip("/") + "/"
        relative = plain[len(head):] if plain.startswith(head) else plain
    else:
        relative = posixpath.relpath(plain, prefix)
    stem = posixpath.splitext(relative)[0]
    return _valid_name("-".join(p for p in stem.split("/") if p not in ("", ".")))


def _expand(
    spec: ModelSpec, label: str, digests: DigestCache, datasets: list[str], heads: bool = True
) -> list[ResolvedModel]:
    unknown = sorted(set(spec.datasets or ()) - set(datasets))
    if unknown:
        raise ConfigError(
            f"{label}: datasets: unknown dataset(s) {unknown}; the config's datasets: {datasets}"
        )
    unknown = sorted(set(spec.label_map) - set(datasets))
    if unknown:
        raise ConfigError(
            f"{label}: label_map: unknown dataset(s) {unknown}; the config's datasets: {datasets}"
        )
    if not heads and spec.head is not False:  # embed.heads: false turns every head off
        spec = spec.model_copy(update={"head": False})
    names = sources.get(spec.source).expand_names(spec, label)
    if names is not None:
        return [
            _resolve_one(
                spec.model_copy(update={"name": name, "id": f"{spec.id}-{_valid_name(name)}"
                                        if spec.id else _valid_name(name)}),
                f"{label} [{name}]", digests)
            for name in names
        ]
    checkpoint = spec.checkpoint
    # the path decides (a URI's query, e.g. ?endpoint_override=..., holds a "?" too)
    if checkpoint and any(c in _plain_path(checkpoint) for c in _GLOB_CHARS):
        listing = uris.glob_stats(checkpoint)
        digests.listed(listing)
        matches = [st.uri for st in listing]
        if not matches:
            raise ConfigError(
                f"{label}: checkpoint glob {uris.redact(checkpoint)!r} matches no file"
            )
        prefix = _glob_prefix(os.path.expanduser(checkpoint))
        out = []
        for match in matches:
            suffix = _id_from_path(match, prefix)
            model_id = f"{spec.id}-{suffix}" if spec.id else suffix
            concrete = spec.model_copy(update={"id": model_id, "checkpoint": match})
            out.append(_resolve_one(concrete, f"{label} [{uris.redact(match)}]", digests))
        return out
    if checkpoint and not uris.is_uri(checkpoint):
        checkpoint = os.path.expanduser(checkpoint)
        spec = spec.model_copy(update={"checkpoint": checkpoint})
    if spec.id is None:
        model_id = _valid_name(spec.name.removeprefix("hf-hub:"))
        if checkpoint:
            stem = posixpath.splitext(posixpath.basename(_plain_path(checkpoint)))[0]
            model_id = _valid_name(f"{spec.name}-{stem}")
        spec = spec.model_copy(update={"id": model_id})
    return [_resolve_one(spec, label, digests)]


def _unreadable(spec: ModelSpec, err: OSError) -> str:
    """The redacted reason a checkpoint that exists (or may) cannot be read."""
    return (f"checkpoint {uris.redact(spec.checkpoint or spec.name)} cannot be read: "
            f"{uris.redact(str(err) or type(err).__name__)}")


def _resolve_one(spec: ModelSpec, label: str, digests: DigestCache) -> ResolvedModel:
    unreadable = None
    if spec.checkpoint:
        try:
            found = digests.stat(spec.checkpoint) is not None
        except OSError as err:  # an error from the store (after pyarrow's attempts), not "missing"
            found, unreadable = True, _unreadable(spec, err)
        if not found:
            raise ConfigError(f"{label}: checkpoint file not found: {uris.redact(spec.checkpoint)}")
    source = sources.get(spec.source)
    if spec.pretrained and not source.pretrained:
        hubs = " and ".join(n for n in sources.names() if sources.get(n).pretrained)
        raise ConfigError(
            f"{label}: pretrained: true is for {hubs} models; {spec.source} models load their "
            "own weights (a transformers hub id is read from the local cache as it is)"
        )
    if spec.pretrained and spec.checkpoint:
        raise ConfigError(f"{label}: give either pretrained: true or a checkpoint, not both")
    directory = source.check(spec, label)
    directory_from_hub = directory is not None and not Path(spec.name).expanduser().is_dir()
    geometry, normalization, origin = with_overrides(
        spec, *source.preprocessing(spec, label, directory))
    head_search = source.head_search(spec, label)
    revision = None
    if spec.pretrained:
        digest, revision = source.pretrained_digest(spec, label, digests)
    elif unreadable is None:
        try:
            digest = source.weights_digest(spec, label, digests, directory)
        except OSError as err:  # listed, but its bytes cannot be read (after pyarrow's own attempts)
            unreadable = _unreadable(spec, err)
    if unreadable is not None:
        digest = None
    # the head and its label maps are in each entry's fingerprint (zoorank.catalog.entries)
    excluded = {"id", "group", "family", "checkpoint", "datasets", "prior", "head", "label_map"}
    # fields added later are left out at their defaults, so earlier fingerprints stay valid
    excluded |= {f for f in ("pretrained", "state_dict_prefix") if not getattr(spec, f)}
    if not source.name_in_fingerprint:
        excluded.add("name")
    spec_part = spec.model_dump(mode="json", exclude=excluded)
    return ResolvedModel(
        model_id=str(spec.id),
        spec=spec,
        fingerprint=(fingerprint(MODEL_VERSION, digest, spec_part) if unreadable is None
                     else fingerprint(MODEL_VERSION, "unreadable", spec_part)),
        geometry=geometry,
        normalization=normalization,
        group=spec.group,
        family=spec.family,
        checkpoint_digest=digest,
        datasets=tuple(spec.datasets) if spec.datasets is not None else None,
        preprocessing_origin=origin,
        weights_revision=revision,
        hub_cache=str(hub.hub_cache_dir()) if spec.pretrained or directory_from_hub else None,
        unreadable=unreadable,
        head_search=head_search,
    )
