"""The keys of decision.json as ``docs/reference/decision-json.md`` documents them, for the tests
that check a real decision.json against its documentation."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "decision-json.md"
#: the keys whose values are objects with documented keys of their own.
NESTED = ("pick", "shortlist", "expected_regret_pp", "next_step", "top_set")


def documented_keys() -> dict[str, set[str]]:
    """'' → the documented top-level keys, 'pick' → the keys of ``pick``, ... (the first cell of
    every table row, in backticks; ``few_label.<dataset>`` rows are left out)."""
    keys: dict[str, set[str]] = {"": set()}
    for line in DOC.read_text().splitlines():
        found = re.match(r"\|\s*`([^`]+)`\s*\|", line)
        if not found or "<dataset>" in found.group(1):
            continue
        parts = found.group(1).split(".")
        keys.setdefault(".".join(parts[:-1]), set()).add(parts[-1])
    return keys
