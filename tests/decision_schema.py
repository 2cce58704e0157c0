"""The keys of decision.json as its reference page documents them (the page's generated part,
:func:`zoorank.decide.decision_schema.reference`), for the tests that check a real decision.json
against its documentation."""

from __future__ import annotations

import re

#: the keys whose values are objects with documented keys of their own.
NESTED = ("pick", "verdict", "counts", "shortlist", "expected_regret_pp", "next_step", "top_set")


def documented_keys() -> dict[str, set[str]]:
    """'' → the documented top-level keys, 'pick' → the keys of ``pick``, ... (the first cell of
    every table row of the generated page, in backticks; ``few_label.<dataset>`` rows are left
    out)."""
    from zoorank.decide.decision_schema import reference

    keys: dict[str, set[str]] = {"": set()}
    for line in reference().splitlines():
        found = re.match(r"\|\s*`([^`]+)`\s*\|", line)
        if not found or "<dataset>" in found.group(1):
            continue
        parts = found.group(1).split(".")
        keys.setdefault(".".join(parts[:-1]), set()).add(parts[-1])
    return keys
