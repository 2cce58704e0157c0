"""One command's run context: the config, one :class:`~zoorank.store.Store` per store URI, the
catalog (built once, lazily; labels given back reach it in place) and the Ray runtime (the
``--address`` to join, else a local Ray started on first need, once).

A command (:mod:`zoorank.pipeline`) builds it once and hands it to every stage it runs; a stage
given only a config builds its own (:meth:`RunContext.of`). Driver side only: Ray tasks and
actors still build their own ``Store`` from its URI (Contract 5).
"""

from __future__ import annotations

from zoorank.catalog import Catalog, build_catalog
from zoorank.config import RunConfig
from zoorank.runtime import ensure_ray
from zoorank.store import Store


class RunContext:
    """The config, its stores (one per URI), its catalog and its Ray runtime, for one command."""

    def __init__(self, config: RunConfig, catalog: Catalog | None = None,
                 address: str | None = None, stores: dict[str, Store] | None = None) -> None:
        self.config = config
        #: the Ray to join (``--address``: ``auto``, ``ray://…``); None: a local Ray on demand.
        self.address = address
        self._stores: dict[str, Store] = {} if stores is None else stores
        self._catalog = catalog

    @classmethod
    def of(cls, config_or_context: RunConfig | RunContext, catalog: Catalog | None = None,
           address: str | None = None) -> RunContext:
        """The context given, or a new one of the config given (with ``catalog`` and ``address``
        if any); a context given without an address takes ``address``."""
        if isinstance(config_or_context, RunContext):
            if catalog is not None:
                config_or_context._catalog = catalog
            if config_or_context.address is None:
                config_or_context.address = address
            return config_or_context
        return cls(config_or_context, catalog, address)

    def with_config(self, config: RunConfig) -> RunContext:
        """A context of another config (a ``--watch`` round's models) on this one's stores and Ray
        runtime, with its own catalog."""
        return RunContext(config, address=self.address, stores=self._stores)

    def ensure_ray(self) -> None:
        """Start (or join, at :attr:`address`) the command's Ray; a Ray already up in this
        process is reused (:func:`zoorank.runtime.ensure_ray`), so it starts once per command."""
        ensure_ray(self.address)

    def store_at(self, uri: str) -> Store:
        """The one ``Store`` of ``uri`` in this command."""
        uri = str(uri)
        if uri not in self._stores:
            self._stores[uri] = Store(uri)
        return self._stores[uri]

    @property
    def store(self) -> Store:
        """The config's store."""
        return self.store_at(self.config.store)

    @property
    def catalog(self) -> Catalog:
        """The config's catalog, built on first use."""
        if self._catalog is None:
            self._catalog = build_catalog(self.config, store=self.store)
        return self._catalog

    def labels_merged(self) -> None:
        """Labels were given back (``zoorank label``): the catalog, when built, takes them in place
        (:meth:`~zoorank.catalog.Catalog.relabel`), so its labels fingerprints are those of the
        store's labels without building the catalog again."""
        if self._catalog is not None:
            self._catalog.relabel(self.store)
