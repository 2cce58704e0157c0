"""What RANK and REPORT were computed from: fingerprints that let a rerun skip them.

Every other artifact is keyed by the fingerprint of what produced it (:mod:`zoorank.catalog`); the
two derived stages are too. Each fingerprint is a hash of named *parts* (:class:`StageInputs`),
kept beside the output, so a rerun says which part changed:

* ``code`` — what computes (Contract 8, no hand-bumped version): :func:`code_identity`, the
  package version and :func:`source_digest` of the package's files (its modules and the page
  templates, as the wheel ships them). Any edit of the package, a comment included, reruns both
  stages once; hashing ~1.5 MB of files costs milliseconds, which is cheaper and safer than
  tracing which modules a stage imports (many imports are inside functions).
* **RANK** — :func:`rank_inputs`: the config's settings (the models' ``prior:`` values
  included), the models (ids, families, groups, datasets), every column of the fresh metric,
  oracle, fold (``resamples``) and health rows and of the fresh manifest (``param_count`` and
  ``dim`` are the priors ``param_count`` and ``width``; statuses and errors the ``failed`` table), the
  oracle failures of this run and each dataset's labels (:meth:`zoorank.catalog.Catalog
  .labels_fingerprint`, the given labels of ``<store>/labels/`` included). It rides on the
  leaderboard's commit (metadata :data:`INPUTS_KEY`, its parts :data:`PARTS_KEY`).
* **REPORT** — :func:`report_inputs`: the leaderboard commit it renders (its version names the
  agreement, failed and uncertainty tables written with it), the oracle table's version, the
  fresh reliability tables, manifest and metric rows, the config, and each dataset's labels
  (the page's stopping-rule section reads them with the leaderboard's p(best) and the clean
  embeddings). It is kept in :data:`REPORT_INPUTS` beside the page. Neither stage reads
  ``<store>/asks/`` (a round's files only serve ``zoorank ask`` and the person labelling).

Cost: one hash of each table's rows, O(rows log rows), and one read of the package's files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from zoorank.config import RunConfig
from zoorank.config.digests import fingerprint
from zoorank.metrics.primary import PRIMARY_PREFERENCE
from zoorank.store import Store, tables
from zoorank.store.layout import LEADERBOARD, ORACLE, REPORT_DIR

#: metadata key of the leaderboard commit that holds the fingerprint of RANK's inputs.
INPUTS_KEY = "zoorank_inputs"
#: metadata key of the leaderboard commit that holds those inputs part by part (JSON).
PARTS_KEY = "zoorank_inputs_parts"
#: the report's record of what it was rendered from (beside ``index.html``).
REPORT_INPUTS = f"{REPORT_DIR}/inputs.json"
#: the installed package whose files :func:`code_identity` hashes: zoorank/ (this module is in catalog/).
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def source_digest(root: str | Path) -> str:
    """sha256 of a package's files: every ``.py`` module and every file under a ``templates/``
    directory (what the wheel ships), by path relative to ``root`` and content; ``__pycache__``
    is skipped. Any byte changed, a file added, removed or renamed changes it."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and (p.suffix == ".py" or "templates" in p.relative_to(root).parts[:-1]))
    h = hashlib.sha256()
    for path in files:
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def code_identity() -> dict[str, str]:
    """What computes RANK and REPORT: ``{"zoorank": version, "source": digest}`` of the imported
    package (:data:`PACKAGE_ROOT`, as its files are on disk now)."""
    from zoorank import __version__

    return {"zoorank": __version__, "source": source_digest(PACKAGE_ROOT)[:16]}


def describe_code(code: Any) -> str:
    """``zoorank 0.1.0 @ 3fa2c1d0e9b8`` for a :func:`code_identity`."""
    if not isinstance(code, Mapping):
        return "unknown"
    return f"zoorank {code.get('zoorank')} @ {str(code.get('source'))[:12]}"


@dataclass(frozen=True)
class StageInputs:
    """What a stage computes from, part by part: name → a JSON-serialisable digest (``code``:
    :func:`code_identity`). The fingerprint hashes them all."""

    stage: str
    parts: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.stage, self.parts, length=32)

    def rerun_reason(self, recorded: str | None, recorded_parts: Any) -> str:
        """Why the stage recomputes, against the fingerprint (and parts) its last output
        recorded: the code that changed (both identities), else the parts that did."""
        if recorded == self.fingerprint:
            return "its output files are missing"
        if recorded is None:
            return "the last output records no inputs (an older zoorank wrote it)"
        if not isinstance(recorded_parts, Mapping):
            return (f"code changed since the last run (now {describe_code(self.parts['code'])}; "
                    "the last run was an older zoorank, which recorded no code digest)")
        changed = [k for k in self.parts if recorded_parts.get(k) != self.parts[k]]
        changed += [k for k in recorded_parts if k not in self.parts]
        why = []
        if "code" in changed:
            why.append(f"code changed since the last run ({describe_code(recorded_parts.get('code'))}"
                       f" → {describe_code(self.parts['code'])})")
        inputs = [k for k in changed if k != "code"]
        if inputs:
            why.append(f"inputs changed since the last run ({', '.join(inputs)})")
        return "; ".join(why) or "the last output's inputs differ"


def dataset_labels(catalog: Any) -> dict[str, str]:
    """dataset → fingerprint of its sample list and labels, given labels included
    (:meth:`zoorank.catalog.Catalog.labels_fingerprint`)."""
    return {name: catalog.labels_fingerprint(name) for name in catalog.indexes}


def frame_digest(frame: pd.DataFrame | None, columns: Sequence[str]) -> str:
    """sha256 of the rows of ``frame`` restricted to ``columns``, independent of row order.

    Values are hashed by :func:`pandas.util.hash_pandas_object` (floats by their bits, NaN
    included); O(rows log rows)."""
    if frame is None or frame.empty:
        return "empty"
    cols = [c for c in columns if c in frame.columns]
    part = frame[cols].astype({c: str for c in cols if frame[c].dtype == object})
    rows = np.sort(pd.util.hash_pandas_object(part, index=False).to_numpy(np.uint64))
    h = hashlib.sha256(json.dumps(cols).encode())
    h.update(rows.tobytes())
    return h.hexdigest()


def _config_part(config: RunConfig) -> dict[str, Any]:
    """The config without its store location (moving a store changes no result)."""
    return config.model_dump(mode="json", exclude={"store"})


def _all_columns(frame: pd.DataFrame | None) -> str:
    """:func:`frame_digest` of every column (in name order: a reader's column order is no input)."""
    return frame_digest(frame, sorted(map(str, frame.columns)) if frame is not None else [])


def rank_inputs(
    config: RunConfig,
    models: Sequence[Any],
    metrics: pd.DataFrame,
    oracle: pd.DataFrame,
    folds: pd.DataFrame,
    health: pd.DataFrame,
    manifest: pd.DataFrame,
    labels: Mapping[str, str],
    oracle_failures: Sequence[Mapping[str, Any]] = (),
) -> StageInputs:
    """Everything RANK's outputs are computed from (see the module docstring); ``labels``:
    :func:`dataset_labels`. Every column of each table enters, so a column RANK starts reading
    needs no change here."""
    model_part = [(m.model_id, getattr(m, "family", None), getattr(m, "group", None),
                   list(m.datasets) if getattr(m, "datasets", None) is not None else None)
                  for m in models]
    failures = sorted(json.dumps(dict(f), sort_keys=True, default=str) for f in oracle_failures)
    return StageInputs("rank", {
        "code": code_identity(),
        # the default order: a board ordered by default changes when it does
        "default order": list(PRIMARY_PREFERENCE),
        "config": fingerprint(_config_part(config)),
        "models": fingerprint(model_part),
        "metrics": _all_columns(metrics),
        "oracle": _all_columns(oracle),
        "resamples": _all_columns(folds),
        "health": _all_columns(health),
        "manifest": _all_columns(manifest),
        "oracle failures": fingerprint(failures),
        "labels": dict(sorted(labels.items())),
    })


def leaderboard_commit(store: Store) -> tuple[int | None, dict[str, Any]]:
    """(version, commit info with its custom metadata) of the latest leaderboard commit, read
    from its log file alone (no data file); (None, {}) without a leaderboard."""
    version = store.table_version(LEADERBOARD)
    if version is None:
        return None, {}
    return version, tables.commit_info(
        store.read_text(f"{LEADERBOARD}/{tables.commit_file(version)}"))


def inputs_metadata(inputs: StageInputs) -> dict[str, str]:
    """The leaderboard commit's metadata that records RANK's ``inputs``."""
    return {INPUTS_KEY: inputs.fingerprint, PARTS_KEY: json.dumps(inputs.parts, sort_keys=True)}


def recorded_parts(info: Mapping[str, Any]) -> Any:
    """The parts a leaderboard commit's metadata recorded (None: an older zoorank's commit)."""
    try:
        return json.loads(info[PARTS_KEY])
    except (KeyError, TypeError, ValueError):
        return None


def report_inputs(config: RunConfig, store: Store, manifest: pd.DataFrame,
                  fresh_reliability: Mapping[tuple[str, str], str], metrics: str,
                  labels: Mapping[str, str]) -> StageInputs | None:
    """What REPORT renders: the leaderboard commit (and the tables it names), the oracle
    table's version, the fresh reliability tables and manifest, the fresh metric rows
    (``metrics``: :func:`zoorank.decide.leaderboard.metrics_fingerprint`, so a leaderboard gone stale is
    never taken as current), each dataset's labels (``labels``: :func:`dataset_labels`), the
    config (the store's name is on the page) and the code; None without a leaderboard."""
    version, info = leaderboard_commit(store)
    if version is None:
        return None
    return StageInputs("report", {
        "code": code_identity(),
        "config": fingerprint(config.model_dump(mode="json"), store.name),
        "leaderboard": [version, info.get(INPUTS_KEY), info.get("zoorank_tables")],
        "oracle": store.table_version(ORACLE),
        "reliability": sorted(map(list, fresh_reliability.items())),
        "manifest": _all_columns(manifest),
        "metrics": metrics,
        "labels": dict(sorted(labels.items())),
    })


def _recorded_report(store: Store) -> dict[str, Any] | None:
    if not store.exists(REPORT_INPUTS):
        return None
    try:
        got = store.read_json(REPORT_INPUTS)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def report_is_current(store: Store, inputs: StageInputs | None) -> bool:
    """Whether the page on disk was rendered from ``inputs`` (and is still there)."""
    if inputs is None or not store.exists(f"{REPORT_DIR}/index.html"):
        return False
    recorded = _recorded_report(store)
    return recorded is not None and recorded.get("fingerprint") == inputs.fingerprint


def report_rerun_reason(store: Store, inputs: StageInputs | None) -> str | None:
    """Why REPORT renders the page again (:meth:`StageInputs.rerun_reason`); None for a first
    page (nothing recorded, no page)."""
    recorded = _recorded_report(store)
    if inputs is None or (recorded is None and not store.exists(f"{REPORT_DIR}/index.html")):
        return None
    if recorded is None:
        return "the page records no inputs (an older zoorank wrote it)"
    return inputs.rerun_reason(recorded.get("fingerprint"), recorded.get("parts"))


def record_report_inputs(store: Store, inputs: StageInputs | None) -> None:
    """Keep ``inputs`` beside the page REPORT just wrote (see :func:`report_is_current`)."""
    if inputs is not None:
        store.write_json(REPORT_INPUTS, {"fingerprint": inputs.fingerprint,
                                         "parts": inputs.parts})
