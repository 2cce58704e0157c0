"""Where every artifact lives inside a store (contract 2); the only place paths are spelled.

Tables are Delta Lake directories (``manifest/``, ``metrics/`` ...; :mod:`zoorank.store.tables`);
embedding shards and reliability tables are immutable Parquet files; ``leaderboard.csv``,
``leaderboard.md`` and ``report/`` are plain files for people.
"""

from __future__ import annotations

# -- Delta tables --------------------------------------------------------------------------------
MANIFEST = "manifest"
METRICS = "metrics"
ORACLE = "oracle"
AGREEMENT = "agreement"
FAILED = "failed"
LEADERBOARD = "leaderboard"
DIGESTS = "cache/digests"
#: running writers and their heartbeats (:mod:`zoorank.store.writers`; gc spares what they need).
WRITERS = "writers"
#: the members of each pool of a pool metric (CLID), once: its rows in ``metrics`` name it by id.
POOLS = "pools"
#: labels people gave back (``zoorank label``): dataset, sample_id, label (class name), source, time
LABELS = "labels"
#: every table at the store's top level or under ``cache/`` (samples tables are per dataset).
TABLES = (MANIFEST, METRICS, ORACLE, AGREEMENT, FAILED, LEADERBOARD, DIGESTS, POOLS, LABELS)

# -- plain files and directories -------------------------------------------------------------------
LEADERBOARD_CSV = "leaderboard.csv"
LEADERBOARD_MD = "leaderboard.md"
REPORT_DIR = "report"
EMBEDDINGS_DIR = "embeddings"
RELIABILITY_DIR = "reliability"
DATASETS_DIR = "datasets"
VIEW_CACHE_DIR = "cache/views"
TUNE_DIR = "tune"
ASKS_DIR = "asks"


def samples_table(dataset: str) -> str:
    """The per-dataset samples/labels table (sample_id, uri, label ...)."""
    return f"{DATASETS_DIR}/{dataset}/samples"


def undecodable_table(dataset: str) -> str:
    """The sample_ids a decode found undecodable (Delta table: content_digest, sample_id)."""
    return f"{DATASETS_DIR}/{dataset}/undecodable"


def undecodable_file(dataset: str) -> str:
    """Where stores before the undecodable table kept those ids (JSON; migrated on first use)."""
    return f"{DATASETS_DIR}/{dataset}/undecodable.json"


def embedding_dir(dataset: str, view: str, model_id: str) -> str:
    """The directory of one (dataset, view, model) entry's immutable shards."""
    return f"{EMBEDDINGS_DIR}/{dataset}/{view}/{model_id}"


def reliability_dir(dataset: str) -> str:
    return f"{RELIABILITY_DIR}/{dataset}"


def reliability_file(dataset: str, group: str) -> str:
    """One reliability table (a plain Parquet file) of a dataset's model group."""
    return f"{RELIABILITY_DIR}/{dataset}/{group}.parquet"


def view_cache_dir(key: str) -> str:
    return f"{VIEW_CACHE_DIR}/{key}"


def tune_dir(name: str) -> str:
    return f"{TUNE_DIR}/{name}"


def ask_dir(round_: int) -> str:
    """One ``zoorank ask`` round: ``to_label.csv``, ``index.html``, ``label_studio.json``."""
    return f"{ASKS_DIR}/{int(round_)}"
