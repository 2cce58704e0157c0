"""Lines of the verdict that people read (console, ``leaderboard.md``, the card): the held-out
record of the calibration record (``decision.json``'s ``record``), the failed models, the
few-label pick beside the label-free one, and long ids wrapped rather than cut. Pure; numbers
are rounded here and stay exact in ``decision.json``."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

#: the baselines of a record, in the order and words the baselines line uses.
BASELINE_WORDS = {"random": "a random pick", "name_heuristic": "the longest-trained",
                  "final_loss": "the lowest final loss", "loo_best_metric": "the best single metric"}


def pp(v: Any) -> str:
    """A regret in percentage points as people read it (two decimals; ``—`` when unknown)."""
    return "—" if v is None else f"{float(v):.2f}"


def wrapped(prefix: str, ids: Sequence[str], width: int) -> list[str]:
    """``prefix`` then every one of ``ids``, comma-separated, wrapped at ``width`` columns
    (continuation lines indented by two spaces); an id longer than the width stays whole."""
    text = prefix + (", ".join(ids) if ids else "none")
    return textwrap.wrap(text, width=max(width, 20), subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False) or [prefix]


def record_lines(block: Mapping[str, Any] | None) -> list[str]:
    """The calibration record's held-out look in at most three lines: the held-out units with
    their n and hits, the pick's held-out regret with the all-unit figure beside it, one line
    against the baselines, and ``guaranteed: false`` where it is false. ``[]`` without a record."""
    if not block:
        return []
    held = block.get("held_out_units") or {}
    regret = block.get("regret_pp") or {}
    out_, every = regret.get("held_out") or {}, regret.get("all_units") or {}
    guarantee = "" if block.get("guaranteed") else "; guaranteed: false"
    lines = [f"Record ({block.get('metric')}, {block.get('source')}): the shortlist held a "
             f"near-best model on {held.get('hits')}/{held.get('n')} held-out units"
             f"{guarantee}",
             f"Regret of the pick: held-out units median {pp(out_.get('median'))} pp, p90 "
             f"{pp(out_.get('p90'))} pp (n {out_.get('n')}); all units median "
             f"{pp(every.get('median'))} pp, p90 {pp(every.get('p90'))} pp (n {every.get('n')})"]
    base = block.get("baselines") or {}
    shown = [f"{words}: {pp(base[k].get('median'))} pp" for k, words in BASELINE_WORDS.items()
             if isinstance(base.get(k), Mapping) and base[k].get("n")]
    if shown:
        lines.append("Baselines (median regret): " + "; ".join(shown))
    return lines


def failure_lines(doc: Mapping[str, Any], width: int) -> list[str]:
    """The counts of configured, ranked and failed models, then the failed ones with their
    reasons, wrapped; ``[]`` when the decision carries no counts."""
    counts = doc.get("counts") or {}
    if not counts:
        return []
    failed = doc.get("failed") or []
    head = (f"Models: {counts.get('configured')} configured, {counts.get('ranked')} ranked, "
            f"{counts.get('failed')} failed")
    if not failed:
        return [head]
    items = [f"{f['model_id']} ({f.get('error') or f.get('stage') or 'failed'})" for f in failed]
    return wrapped(head + ": ", items, width)


def pick_lines(doc: Mapping[str, Any], value: str, width: int) -> list[str]:
    """The verdict's first lines: the few-label pick with its p(best | labels) first when
    ``zoorank label`` gave labels back (the label-free pick beside it), else the label-free pick;
    then the pick's checkpoint path on its own line (never cut)."""
    pick = doc.get("pick") or {}
    few = (doc.get("few_label") or {}).get(pick.get("dataset")) or next(
        iter((doc.get("few_label") or {}).values()), None)
    free = f"{pick['model_id']}" + (f" ({value})" if value else "")
    if few and few.get("model_id"):
        p = few.get("p_best")
        lines = [f"Pick: {few['model_id']} (few-label: p(best | labels) "
                 f"{'—' if p is None else f'{float(p):.2f}'} after {few.get('labels')} labels)",
                 f"  beside it, the label-free pick: {free}"]
    else:
        lines = [f"Pick: {free}"]
    if pick.get("checkpoint"):
        whose = "" if not few or few.get("model_id") in (None, pick["model_id"]) \
            else " of the label-free pick"
        lines.append(f"Checkpoint{whose}: {pick['checkpoint']}")
    return lines
