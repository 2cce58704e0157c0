"""Content hashes: short stable fingerprints of config parts, sha256 of files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel


def fingerprint(*parts: Any, length: int = 16) -> str:
    """Stable short hash of JSON-serialisable parts (pydantic models are dumped first)."""

    def plain(x: Any) -> Any:
        if isinstance(x, BaseModel):
            return x.model_dump(mode="json")
        return x

    blob = json.dumps([plain(p) for p in parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes (checkpoints are fingerprinted by content, not by path)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
