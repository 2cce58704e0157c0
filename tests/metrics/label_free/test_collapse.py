"""zoorank.metrics.label_free.collapse.collapse_flags: the probe's collapsed / low-rank rule, on hand
cases."""

from __future__ import annotations

import math

import pytest

from zoorank.metrics.label_free.collapse import collapse_flags


@pytest.mark.parametrize(("rank", "dup", "rankme", "n", "dim", "collapsed", "low_rank"), [
    (64, 0.0, 40.0, 1000, 64, False, False),     # healthy
    (1, 0.0, 1.0, 1000, 64, True, True),          # constant rows: rank 1, RankMe 1 < 2
    (30, 0.5, 20.0, 1000, 64, True, False),       # half the rows repeat: collapsed at 0.5
    (30, 0.49, 20.0, 1000, 64, False, False),
    (64, 0.0, 9.9, 1000, 1000, False, True),      # RankMe below 1% of min(n, d) = 10
    (64, 0.0, 10.0, 1000, 1000, False, False),
    (64, 0.0, math.nan, 1000, 64, False, False),  # no RankMe: no low-rank flag
    (64, math.nan, 40.0, 1000, 64, False, False),  # a NaN diagnostic flags nothing
])
def test_collapse_flags_on_hand_computed_cases(rank, dup, rankme, n, dim, collapsed, low_rank):
    assert collapse_flags(rank, dup, rankme, n, dim) == {"collapsed": collapsed,
                                                         "low_rank": low_rank}
