"""Did-you-mean for names a config gets wrong (unknown keys, metrics, scores): difflib's close
matches, as ``git`` and ``pip`` suggest a command."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates closest to ``word`` (difflib ratio ≥ 0.6, case-insensitive), best first."""
    candidates = list(dict.fromkeys(str(c) for c in candidates))
    folded = {c.casefold(): c for c in candidates}
    return [folded[m] for m in difflib.get_close_matches(str(word).casefold(), list(folded), n=n)]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest match of ``word``, else ``""``."""
    found = close_matches(word, candidates, n=1)
    return f" (did you mean {found[0]!r}?)" if found else ""
